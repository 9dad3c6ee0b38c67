//! The storage services a check reaches through the host: heads and lists on
//! a named end's storage and the list of staged files. The engine implements
//! [`CheckHost`] (or uses [`StoreCheckHost`] over its `object_store`s), so the
//! credentials stay with the engine and the plugin sees only paths.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::TryStreamExt;
use futures::future::BoxFuture;
use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, ObjectStore};
use serde::{Deserialize, Serialize};

/// Metadata of one object (WIT `object-meta`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    pub path: String,
    pub size: u64,
    /// Milliseconds since the Unix epoch.
    pub last_modified_ms: i64,
}

/// One page of a listing (WIT `object-page`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ObjectListing {
    pub objects: Vec<ObjectInfo>,
    pub next_page_token: Option<String>,
}

/// A file staged into the target's storage for the import (WIT `staged-file`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StagedObject {
    /// Path relative to the storage root, the same on every end.
    pub path: String,
    pub size: u64,
    /// The import batch that reads the file.
    pub batch: u32,
}

/// The staged files a check pages through, in page order (by batch, then path). Cloned
/// without copying: every check run of a restore shares the one list.
#[derive(Debug, Clone, Default)]
pub struct StagedFiles(Arc<[StagedObject]>);

impl From<Vec<StagedObject>> for StagedFiles {
    fn from(mut staged: Vec<StagedObject>) -> Self {
        staged.sort_by(|a, b| (a.batch, &a.path).cmp(&(b.batch, &b.path)));
        StagedFiles(staged.into())
    }
}

/// One page of staged files (WIT `staged-page`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StagedListing {
    pub files: Vec<StagedObject>,
    pub next_page_token: Option<String>,
}

/// Why a storage service did not answer (WIT `storage-error`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    #[error("no end named `{0}` in this restore")]
    UnknownEnd(String),
    #[error("page token not handed out by this restore")]
    BadPageToken,
    #[error("{0}")]
    Failed(String),
}

/// Storage services the engine provides to checks. Object-safe (boxed
/// futures) so a `Store` can hold it as `Arc<dyn CheckHost>`.
///
/// `end` is an end name from the restore context; the plugins module refuses
/// any other name before calling, so an implementation sees only ends of
/// the restore. `limit` is already capped at [`MAX_PAGE`].
pub trait CheckHost: Send + Sync + 'static {
    /// Metadata of `path` in `end`'s storage; `None` when absent.
    fn head<'a>(
        &'a self,
        end: &'a str,
        path: &'a str,
    ) -> BoxFuture<'a, Result<Option<ObjectInfo>, HostError>>;

    /// Up to `limit` objects under `prefix` in `end`'s storage, after the
    /// page `page_token` (a token this host handed out) ends.
    fn list<'a>(
        &'a self,
        end: &'a str,
        prefix: &'a str,
        page_token: Option<&'a str>,
        limit: u32,
    ) -> BoxFuture<'a, Result<ObjectListing, HostError>>;

    /// Up to `limit` staged files after the page `page_token` ends, ordered
    /// by batch, then path.
    fn staged_files<'a>(
        &'a self,
        page_token: Option<&'a str>,
        limit: u32,
    ) -> BoxFuture<'a, Result<StagedListing, HostError>>;
}

/// The largest page a check may ask for; bigger requests are capped, so one
/// call cannot make the host buffer an unbounded listing.
pub const MAX_PAGE: u32 = 1000;

/// A [`CheckHost`] over one `object_store` per end and a staged-file list:
/// what the engine needs once it has built each end's store, and what
/// `lockstep plugin test` uses over local folders.
pub struct StoreCheckHost {
    ends: BTreeMap<String, Arc<dyn ObjectStore>>,
    staged: StagedFiles,
}

impl StoreCheckHost {
    pub fn new(ends: BTreeMap<String, Arc<dyn ObjectStore>>, staged: StagedFiles) -> Self {
        StoreCheckHost { ends, staged }
    }

    fn store(&self, end: &str) -> Result<&Arc<dyn ObjectStore>, HostError> {
        self.ends
            .get(end)
            .ok_or_else(|| HostError::UnknownEnd(end.to_owned()))
    }
}

fn object_path(path: &str) -> Result<ObjectPath, HostError> {
    ObjectPath::parse(path).map_err(|e| HostError::Failed(format!("invalid path `{path}`: {e}")))
}

fn object_info(meta: &object_store::ObjectMeta) -> ObjectInfo {
    ObjectInfo {
        path: meta.location.to_string(),
        size: meta.size,
        last_modified_ms: meta.last_modified.timestamp_millis(),
    }
}

impl CheckHost for StoreCheckHost {
    fn head<'a>(
        &'a self,
        end: &'a str,
        path: &'a str,
    ) -> BoxFuture<'a, Result<Option<ObjectInfo>, HostError>> {
        Box::pin(async move {
            let store = self.store(end)?;
            let location = object_path(path)?;
            match store
                .get_opts(&location, GetOptions::new().with_head(true))
                .await
            {
                Ok(result) => Ok(Some(object_info(&result.meta))),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(HostError::Failed(format!("head {path} on {end}: {e}"))),
            }
        })
    }

    /// Pages by the last path of the previous page. Stores do not promise an
    /// order (the local filesystem lists in directory order), so each page
    /// lists everything after the token and sorts it: fine for the thousands
    /// of files a check looks at, not meant for millions.
    fn list<'a>(
        &'a self,
        end: &'a str,
        prefix: &'a str,
        page_token: Option<&'a str>,
        limit: u32,
    ) -> BoxFuture<'a, Result<ObjectListing, HostError>> {
        Box::pin(async move {
            let store = self.store(end)?;
            let prefix = (!prefix.is_empty())
                .then(|| object_path(prefix))
                .transpose()?;
            let stream = match page_token {
                Some(token) => store.list_with_offset(prefix.as_ref(), &object_path(token)?),
                None => store.list(prefix.as_ref()),
            };
            let mut objects: Vec<ObjectInfo> = stream
                .map_ok(|meta| object_info(&meta))
                .try_collect()
                .await
                .map_err(|e| HostError::Failed(format!("list on {end}: {e}")))?;
            objects.sort_by(|a, b| a.path.cmp(&b.path));
            let limit = limit.clamp(1, MAX_PAGE) as usize;
            let next_page_token = (objects.len() > limit).then(|| objects[limit - 1].path.clone());
            objects.truncate(limit);
            Ok(ObjectListing {
                objects,
                next_page_token,
            })
        })
    }

    fn staged_files<'a>(
        &'a self,
        page_token: Option<&'a str>,
        limit: u32,
    ) -> BoxFuture<'a, Result<StagedListing, HostError>> {
        Box::pin(async move {
            let start = match page_token {
                None => 0,
                Some(token) => token
                    .parse::<usize>()
                    .ok()
                    .filter(|&start| start <= self.staged.0.len())
                    .ok_or(HostError::BadPageToken)?,
            };
            let staged = &self.staged.0;
            let end = (start + limit.clamp(1, MAX_PAGE) as usize).min(staged.len());
            Ok(StagedListing {
                files: staged[start..end].to_vec(),
                next_page_token: (end < staged.len()).then(|| end.to_string()),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::local::LocalFileSystem;
    use object_store::{ObjectStoreExt, PutPayload};

    #[tokio::test]
    async fn heads_lists_and_pages_a_local_store() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store: Arc<dyn ObjectStore> =
            Arc::new(LocalFileSystem::new_with_prefix(dir.path()).expect("local store"));
        for name in ["b/2", "b/1", "b/3", "c/1"] {
            store
                .put(&ObjectPath::from(name), PutPayload::from_static(b"xy"))
                .await
                .expect("put");
        }
        let staged = (0..3)
            .map(|i| StagedObject {
                path: format!("b/{}", 3 - i),
                size: 2,
                batch: 0,
            })
            .collect::<Vec<_>>();
        let host = StoreCheckHost::new(BTreeMap::from([("a".to_owned(), store)]), staged.into());

        let meta = host.head("a", "b/1").await.expect("head").expect("present");
        assert_eq!(meta.size, 2);
        assert_eq!(host.head("a", "b/9").await.expect("head"), None);
        assert_eq!(
            host.head("z", "b/1").await,
            Err(HostError::UnknownEnd("z".into()))
        );

        let first = host.list("a", "b", None, 2).await.expect("list");
        let paths: Vec<_> = first.objects.iter().map(|o| o.path.as_str()).collect();
        assert_eq!(paths, ["b/1", "b/2"]);
        let token = first.next_page_token.expect("more pages");
        let second = host.list("a", "b", Some(&token), 2).await.expect("list");
        assert_eq!(second.objects.len(), 1);
        assert_eq!(second.objects[0].path, "b/3");
        assert_eq!(second.next_page_token, None);

        let page = host.staged_files(None, 2).await.expect("staged");
        assert_eq!(page.files[0].path, "b/1", "sorted by batch then path");
        let rest = host
            .staged_files(page.next_page_token.as_deref(), 2)
            .await
            .expect("staged");
        assert_eq!(rest.files.len(), 1);
        assert_eq!(rest.next_page_token, None);
        assert_eq!(
            host.staged_files(Some("99"), 2).await,
            Err(HostError::BadPageToken)
        );
    }
}
