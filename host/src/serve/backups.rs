//! milvus-backup's read-only backup routes: `GET /api/v1/hello`, `GET /api/v1/list` and
//! `GET /api/v1/get_backup`, with its request parameters and answer shapes (field names,
//! which fields are left out when empty), over the host config's backups. Creating and
//! deleting backups stay milvus-backup's.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde::{Deserialize, Serialize};

use super::envelope::{Code, envelope, header_request_id};
use super::state::ApiState;
use crate::backup::{self, Backup, catalog};
use crate::config::BackupsSpec;
use crate::storage::OpenedStore;

/// milvus-backup's answer to `hello`, plain text.
pub async fn hello() -> &'static str {
    "Hello, This is backup service"
}

/// A backup in `list`: milvus-backup's `BackupSummary`.
#[derive(Debug, Serialize)]
struct BackupSummary {
    #[serde(skip_serializing_if = "String::is_empty")]
    id: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    name: String,
    size: i64,
    #[serde(skip_serializing_if = "String::is_empty")]
    milvus_version: String,
}

/// A backup in `get_backup`: milvus-backup's `BackupInfoBrief` of a finished backup.
#[derive(Debug, Serialize)]
struct BackupInfoBrief {
    #[serde(skip_serializing_if = "String::is_empty")]
    id: String,
    /// milvus-backup's `BACKUP_SUCCESS`: a backup whose meta reads is a finished one.
    state_code: i32,
    progress: i32,
    #[serde(skip_serializing_if = "String::is_empty")]
    name: String,
    #[serde(skip_serializing_if = "is_zero")]
    backup_timestamp: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    collection_backups: Vec<CollectionBrief>,
    size: i64,
    #[serde(skip_serializing_if = "String::is_empty")]
    milvus_version: String,
    /// The bytes of its `meta/` directory.
    meta_size: i64,
    #[serde(skip_serializing_if = "String::is_empty")]
    format: String,
}

/// A collection of `get_backup`: milvus-backup's `CollectionBackupInfoBrief`, without the
/// schema, index and property detail lockstep does not echo.
#[derive(Debug, Serialize)]
struct CollectionBrief {
    #[serde(skip_serializing_if = "String::is_empty")]
    id: String,
    collection_id: i64,
    #[serde(skip_serializing_if = "String::is_empty")]
    db_name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    collection_name: String,
    shards_num: i32,
    #[serde(skip_serializing_if = "is_zero")]
    backup_timestamp: u64,
    size: i64,
    has_index: bool,
    #[serde(skip_serializing_if = "String::is_empty")]
    load_state: String,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

const BACKUP_SUCCESS: i32 = 2;

#[derive(Debug, Deserialize)]
pub struct ListQuery {
    collection_name: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct GetQuery {
    backup_name: Option<String>,
    backup_id: Option<String>,
    /// The backups' root for this request instead of the host config's.
    path: Option<String>,
}

/// The backups' store, or what to answer (code 3) when there is none.
fn store(state: &ApiState) -> Result<(BackupsSpec, OpenedStore), &'static str> {
    let Some(backups) = state.runner.host().backups.clone() else {
        return Err("the host config says nowhere where backups live");
    };
    match crate::storage::open(&backups.storage) {
        Ok(store) => Ok((backups, store)),
        Err(e) => {
            tracing::warn!(error = %e, "the backups' storage could not be opened");
            Err("the backups' storage could not be opened; the server's log says why")
        }
    }
}

pub async fn list(
    State(state): State<Arc<ApiState>>,
    headers: HeaderMap,
    Query(query): Query<ListQuery>,
) -> Response {
    let rid = header_request_id(&headers);
    if query.collection_name.is_some_and(|c| !c.is_empty()) {
        return envelope::<()>(
            rid,
            Code::ParameterError,
            "collection_name is deprecated",
            None,
        );
    }
    let (backups, store) = match store(&state) {
        Ok(opened) => opened,
        Err(why) => return envelope::<()>(rid, Code::Fail, why, None),
    };
    let listed = match catalog::list(
        store.store.as_ref(),
        backups.storage.url.as_str(),
        &backups.root,
    )
    .await
    {
        Ok(listed) => listed,
        Err(e) => {
            tracing::warn!(error = %e, "the backups' root could not be listed");
            return envelope::<()>(
                rid,
                Code::Fail,
                "the backups' root could not be listed; the server's log says why",
                None,
            );
        }
    };
    // As milvus-backup, a directory that does not read as a backup is left out (and logged).
    let summaries: Vec<BackupSummary> = listed
        .into_iter()
        .filter_map(|entry| match entry {
            catalog::Listed::Read(backup) => Some(BackupSummary {
                id: backup.info.id.clone(),
                name: backup.files.location.name.clone(),
                size: backup.info.size,
                milvus_version: backup.info.milvus_version.clone(),
            }),
            catalog::Listed::Unreadable { name, error } => {
                tracing::warn!(backup = %name, error = %error, "not a readable backup; left out of the list");
                None
            }
        })
        .collect();
    envelope(rid, Code::Success, "", Some(summaries))
}

pub async fn get_backup(
    State(state): State<Arc<ApiState>>,
    headers: HeaderMap,
    Query(query): Query<GetQuery>,
) -> Response {
    let rid = header_request_id(&headers);
    let name = query.backup_name.filter(|n| !n.is_empty());
    let id = query.backup_id.filter(|i| !i.is_empty());
    if name.is_none() && id.is_none() {
        return envelope::<()>(
            rid,
            Code::ParameterError,
            "empty backup name and backup id, please set a backup name or id",
            None,
        );
    }
    // Names and paths are checked before anything is read: a query can name no file.
    if let Some(name) = name.as_deref().filter(|n| !backup::is_backup_name(n)) {
        return envelope::<()>(
            rid,
            Code::ParameterError,
            format!(
                "invalid backup name `{name}`: expected a directory name of letters, digits, `_`, `-` or `.`"
            ),
            None,
        );
    }
    let root = match query.path.filter(|p| !p.is_empty()) {
        None => None,
        Some(path) => match object_store::path::Path::parse(path.trim_matches('/')) {
            Ok(parsed) if !path.split('/').any(|part| part == "..") => Some(parsed.to_string()),
            _ => {
                return envelope::<()>(
                    rid,
                    Code::ParameterError,
                    "invalid path: expected the backups' root directory, relative, without `..`",
                    None,
                );
            }
        },
    };
    let (mut backups, store) = match store(&state) {
        Ok(opened) => opened,
        Err(why) => return envelope::<()>(rid, Code::Fail, why, None),
    };
    if let Some(root) = root {
        backups.root = root;
    }
    let url = backups.storage.url.as_str().to_owned();
    let found = match (&name, &id) {
        (Some(name), _) => {
            let location = backup::BackupLocation::new(&url, &backups.root, name);
            backup::read(store.store.as_ref(), &location).await.ok()
        }
        (None, Some(id)) => match catalog::list(store.store.as_ref(), &url, &backups.root).await {
            Ok(listed) => listed.into_iter().find_map(|entry| match entry {
                catalog::Listed::Read(backup) if backup.info.id == *id => Some(*backup),
                _ => None,
            }),
            Err(_) => None,
        },
        (None, None) => unreachable!("one of the two was checked to be there"),
    };
    let Some(backup) = found else {
        let what = name.unwrap_or_else(|| format!("with id {}", id.unwrap_or_default()));
        return envelope::<()>(rid, Code::Fail, format!("backup {what} not found"), None);
    };
    let meta_size = meta_size(store.store.as_ref(), &backup).await;
    envelope(
        rid,
        Code::Success,
        "success",
        Some(brief(&backup, meta_size)),
    )
}

/// The bytes under the backup's `meta/`, as milvus-backup's `meta_size`; 0 when unlisted.
async fn meta_size(store: &dyn object_store::ObjectStore, backup: &Backup) -> i64 {
    use futures::TryStreamExt as _;
    let meta = backup.files.location.path("meta");
    store
        .list(Some(&meta))
        .try_fold(0i64, |sum, object| async move {
            Ok(sum + i64::try_from(object.size).unwrap_or(i64::MAX))
        })
        .await
        .unwrap_or(0)
}

fn brief(backup: &Backup, meta_size: i64) -> BackupInfoBrief {
    let info = &backup.info;
    BackupInfoBrief {
        id: info.id.clone(),
        state_code: BACKUP_SUCCESS,
        progress: 100,
        name: backup.files.location.name.clone(),
        backup_timestamp: info.backup_timestamp,
        collection_backups: info
            .collection_backups
            .iter()
            .map(|c| CollectionBrief {
                id: c.id.clone(),
                collection_id: c.collection_id,
                db_name: c.db_name.clone(),
                collection_name: c.collection_name.clone(),
                shards_num: c.shards_num,
                backup_timestamp: c.backup_timestamp,
                size: c.size,
                has_index: c.has_index,
                load_state: c.load_state.clone(),
            })
            .collect(),
        size: info.size,
        milvus_version: info.milvus_version.clone(),
        meta_size,
        format: info.format.clone(),
    }
}
