//! Probes on an end's store by end name: head one object, list a prefix page by page.
//! The plugin host serves its storage imports with these, so a check sees only paths.

use std::collections::BTreeMap;

use futures::{StreamExt as _, TryStreamExt as _};
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStoreExt as _};

use super::Error;
use super::open::{OpenedStore, StoreId};

/// One page of a listing, in path order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListPage {
    pub objects: Vec<ObjectMeta>,
    /// Pass as `after` to get the next page; `None` on the last page.
    pub next: Option<Path>,
}

/// The restore's ends and their open stores.
#[derive(Debug, Clone, Default)]
pub struct EndStores {
    ends: BTreeMap<String, OpenedStore>,
}

impl EndStores {
    pub fn new(ends: BTreeMap<String, OpenedStore>) -> Self {
        EndStores { ends }
    }

    pub fn get(&self, end: &str) -> Result<&OpenedStore, Error> {
        self.ends.get(end).ok_or_else(|| Error::UnknownEnd {
            end: end.to_owned(),
        })
    }

    /// Metadata of `path` on `end`'s store; `None` when it does not exist.
    pub async fn head(&self, end: &str, path: &Path) -> Result<Option<ObjectMeta>, Error> {
        match self.get(end)?.store.head(path).await {
            Ok(meta) => Ok(Some(meta)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(source) => Err(Error::Probe {
                end: end.to_owned(),
                path: path.to_string(),
                source,
            }),
        }
    }

    /// Up to `limit` (at least 1) objects under `prefix` on `end`'s store whose paths sort
    /// after `after`.
    ///
    /// S3 lists in key order, so a page reads only `limit + 1` keys; a local directory lists
    /// in no order, so its page sorts everything after `after` (fine for the thousands of
    /// files a restore stages, not meant for millions).
    pub async fn list_page(
        &self,
        end: &str,
        prefix: &Path,
        after: Option<&Path>,
        limit: usize,
    ) -> Result<ListPage, Error> {
        let opened = self.get(end)?;
        let limit = limit.max(1);
        let listing = match after {
            Some(after) => opened.store.list_with_offset(Some(prefix), after),
            None => opened.store.list(Some(prefix)),
        };
        let error = |source| Error::Probe {
            end: end.to_owned(),
            path: prefix.to_string(),
            source,
        };
        let mut objects: Vec<ObjectMeta> = match opened.id {
            // A local listing comes in no order, so all of it is sorted; a cloud store's
            // comes sorted, so the first page is enough.
            StoreId::Local { .. } => listing.try_collect().await.map_err(error)?,
            _ => listing.take(limit + 1).try_collect().await.map_err(error)?,
        };
        objects.sort_by(|a, b| a.location.cmp(&b.location));
        let next = (objects.len() > limit).then(|| objects[limit - 1].location.clone());
        objects.truncate(limit);
        Ok(ListPage { objects, next })
    }
}

#[cfg(test)]
mod tests {
    use object_store::PutPayload;

    use super::super::test_stores::local;
    use super::*;

    #[tokio::test]
    async fn heads_and_pages_through_a_named_end() {
        let dir = tempfile::tempdir().expect("tempdir");
        let opened = local(dir.path());
        for name in ["p/c", "p/a", "p/b", "p/d/e", "q/a"] {
            opened
                .store
                .put(&Path::from(name), PutPayload::from_static(b"abc"))
                .await
                .expect("put");
        }
        let ends = EndStores::new(BTreeMap::from([("target".to_owned(), opened)]));

        let meta = ends
            .head("target", &Path::from("p/a"))
            .await
            .expect("head")
            .expect("exists");
        assert_eq!(meta.size, 3);
        assert_eq!(
            ends.head("target", &Path::from("p/zz"))
                .await
                .expect("head"),
            None
        );
        assert!(
            matches!(ends.head("other", &Path::from("p/a")).await, Err(Error::UnknownEnd { end }) if end == "other")
        );

        let mut seen = Vec::new();
        let mut after = None;
        loop {
            let page = ends
                .list_page("target", &Path::from("p"), after.as_ref(), 2)
                .await
                .expect("list");
            assert!(page.objects.len() <= 2);
            seen.extend(page.objects.iter().map(|o| o.location.to_string()));
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        assert_eq!(seen, ["p/a", "p/b", "p/c", "p/d/e"]);
    }
}
