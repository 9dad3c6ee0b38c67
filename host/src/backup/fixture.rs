//! The test backup `orders_bak`: meta files hand-written in milvus-backup's Go
//! `encoding/json` shape (`host/tests/data/backups/`), binlog objects written here with
//! the sizes the meta records.

use std::path::PathBuf;
use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt as _, PutPayload};

use super::BackupLocation;

/// The backup's binlog objects, relative to its directory, and their sizes.
pub const BINLOGS: &[(&str, usize)] = &[
    ("binlogs/insert_log/100/1000/2001/2001/100/1", 100),
    ("binlogs/insert_log/100/1000/2001/2001/101/2", 200),
    ("binlogs/delta_log/100/1000/2001/2001/3", 50),
    ("binlogs/insert_log/100/1000/2002/2002/100/4", 300),
    ("binlogs/insert_log/100/1000/2003/2003/100/5", 400),
    ("binlogs/delta_log/100/1000/2004/6", 60),
    ("binlogs/delta_log/100/-1/2005/7", 70),
    ("binlogs/insert_log/200/2000/3001/100/8", 500),
    ("binlogs/insert_log/200/2000/3002/100/9", 600),
    ("binlogs/delta_log/200/2000/3002/10", 10),
];

pub const STORE_URL: &str = "memory://test";

/// Which meta files the fixture provides.
#[derive(Debug, Clone, Copy)]
pub enum Layout {
    /// `backup_meta.json` and `full_meta.json`.
    Full,
    /// `backup_meta.json` and the collection, partition and segment level files.
    Levels,
}

pub fn location() -> BackupLocation {
    BackupLocation::new(STORE_URL, "backup", "orders_bak")
}

fn meta_dir(layout: Layout) -> PathBuf {
    let variant = match layout {
        Layout::Full => "full",
        Layout::Levels => "levels",
    };
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/backups")
        .join(variant)
        .join("orders_bak/meta")
}

/// Writes the fixture backup into `store` under `location()`.
pub async fn write(store: &dyn ObjectStore, layout: Layout) {
    let location = location();
    for entry in std::fs::read_dir(meta_dir(layout)).expect("fixture meta directory exists") {
        let entry = entry.expect("fixture meta directory is readable");
        let name = entry
            .file_name()
            .into_string()
            .expect("fixture file names are UTF-8");
        let bytes = std::fs::read(entry.path()).expect("fixture meta file is readable");
        store
            .put(
                &location.path(&format!("meta/{name}")),
                PutPayload::from(bytes),
            )
            .await
            .expect("in-test store accepts writes");
    }
    for (path, size) in BINLOGS {
        store
            .put(&location.path(path), PutPayload::from(vec![b'x'; *size]))
            .await
            .expect("in-test store accepts writes");
    }
}

/// A fresh in-memory store holding the fixture.
pub async fn store(layout: Layout) -> Arc<dyn ObjectStore> {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    write(store.as_ref(), layout).await;
    store
}

/// `path` within the fixture backup, for tests that overwrite one object.
pub fn path(relative: &str) -> Path {
    location().path(relative)
}
