//! Which codec reads a segment: its `storage_version`, as the backup's meta records it.
//!
//! - 0 and 1: binlog objects ([`crate::binlog`]), one per field and log.
//! - 2 and 3: bare Parquet files of column groups ([`crate::column_group`]), each column
//!   carrying its field id in the `PARQUET:field_id` metadata. Version 3 adds a manifest
//!   that a backup does not keep, so its files read as version 2's.
//!
//! Any other version is named as unreadable, never guessed at: a reader that took a new
//! layout for an old one would count wrong rows and call them verified.

/// The family of codecs a storage version belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageKind {
    /// Binlog objects: the event envelope around a Parquet payload.
    Binlog,
    /// Column-group Parquet files, columns found by field id.
    ColumnGroup,
}

/// A storage version no codec here reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "storage version {0} is not one this reader knows (0 and 1: binlog objects; 2 and 3: \
     column-group Parquet), so its data cannot be read or verified"
)]
pub struct UnknownVersion(pub i64);

impl StorageKind {
    /// The codec family of `storage_version`.
    pub fn of(storage_version: i64) -> Result<StorageKind, UnknownVersion> {
        match storage_version {
            0 | 1 => Ok(StorageKind::Binlog),
            2 | 3 => Ok(StorageKind::ColumnGroup),
            other => Err(UnknownVersion(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_map_to_their_codec_and_others_are_named() {
        assert_eq!(StorageKind::of(0), Ok(StorageKind::Binlog));
        assert_eq!(StorageKind::of(1), Ok(StorageKind::Binlog));
        assert_eq!(StorageKind::of(2), Ok(StorageKind::ColumnGroup));
        assert_eq!(StorageKind::of(3), Ok(StorageKind::ColumnGroup));
        let err = StorageKind::of(4).unwrap_err();
        assert_eq!(err, UnknownVersion(4));
        assert!(err.to_string().starts_with("storage version 4 is not one"));
        assert_eq!(StorageKind::of(-1), Err(UnknownVersion(-1)));
    }
}
