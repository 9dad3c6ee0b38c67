//! Object storage of the restore's ends, reached through the host (which holds
//! the credentials), and the files staged for the import.

use crate::bindings::lockstep::plugin::host;
use crate::{ObjectMeta, StagedFile, StorageError};

/// Files per `staged-files` call; the host caps pages at 1000.
const STAGED_PAGE: u32 = 1000;

/// Metadata of `path` in the storage of the end named `end`; `None` if absent.
pub fn head(end: &str, path: &str) -> Result<Option<ObjectMeta>, StorageError> {
    host::head_object(end, path)
}

/// Every object under `prefix` in the storage of the end named `end`.
pub fn list(end: &str, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
    let mut objects = Vec::new();
    let mut token = None;
    loop {
        let page = host::list_objects(end, prefix, token.as_deref(), STAGED_PAGE)?;
        objects.extend(page.objects);
        match page.next_page_token {
            Some(next) => token = Some(next),
            None => return Ok(objects),
        }
    }
}

/// Every file staged for this restore, in the host's order (batch, then path).
pub fn staged_files() -> Result<Vec<StagedFile>, StorageError> {
    let mut files = Vec::new();
    let mut token = None;
    loop {
        let page = host::staged_files(token.as_deref(), STAGED_PAGE)?;
        files.extend(page.files);
        match page.next_page_token {
            Some(next) => token = Some(next),
            None => return Ok(files),
        }
    }
}
