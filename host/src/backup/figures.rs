//! A backup's figures in the one vocabulary every view gives them (README's table): data
//! segments and L0 segments counted apart, and rows as `inserted`, `deleted` and `live`.
//! `list`, `get`, `plan`, the report and REST take them from here, so one backup shows the
//! same numbers everywhere: an L0 segment's `num_of_rows` counts deletes, not rows, and is
//! never added to `inserted`.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::meta::CollectionBackupInfo;

/// A collection's rows as its data holds them: the figures every report gives under the same
/// names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataRows {
    /// The rows the data segments hold (their `num_of_rows`, which counting held the
    /// binlogs to).
    pub inserted: i64,
    /// The rows some delete removes: a delta log of the row's own segment, or an L0 segment of
    /// its partition or of the whole collection.
    pub deleted: i64,
    /// `inserted - deleted`: the rows a query sees once the restore is visible.
    pub live: i64,
    /// The live rows of each partition.
    pub partitions: BTreeMap<String, i64>,
}

/// What a backup, or one collection of it, holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Figures {
    /// Sealed segments with rows (every segment but the L0 ones).
    pub segments: usize,
    /// L0 segments: deletes only, of one partition or of the whole collection.
    pub l0_segments: usize,
    /// Rows the data segments hold before any delete: their `num_of_rows`, which preflight
    /// holds to the rows their binlogs hold.
    pub inserted: i64,
    /// Rows some delete removes; `None` where the backup's data was not read or did not.
    pub deleted: Option<i64>,
    /// `inserted - deleted`: what a query sees once the restore is visible; `None` as
    /// `deleted` is.
    pub live: Option<i64>,
}

impl Figures {
    /// What a collection's meta says without reading its data.
    pub fn of_meta(collection: &CollectionBackupInfo) -> Figures {
        let (l0, data): (Vec<_>, Vec<_>) = (collection.partition_backups.iter())
            .flat_map(|p| &p.segment_backups)
            .partition(|s| s.is_l0);
        Figures {
            segments: data.len(),
            l0_segments: l0.len() + collection.l0_segments.len(),
            inserted: data.iter().map(|s| s.num_of_rows).sum(),
            deleted: None,
            live: None,
        }
    }

    /// With the rows its data holds, where they were read.
    pub fn with_rows(self, rows: Option<&DataRows>) -> Figures {
        match rows {
            Some(rows) => Figures {
                inserted: rows.inserted,
                deleted: Some(rows.deleted),
                live: Some(rows.live),
                ..self
            },
            None => self,
        }
    }

    /// The sum of `parts`; `deleted` and `live` only where every part has them.
    pub fn total(parts: impl IntoIterator<Item = Figures>) -> Figures {
        let sum = |a: Option<i64>, b: Option<i64>| Some(a? + b?);
        (parts.into_iter()).fold(
            Figures {
                deleted: Some(0),
                live: Some(0),
                ..Figures::default()
            },
            |total, part| Figures {
                segments: total.segments + part.segments,
                l0_segments: total.l0_segments + part.l0_segments,
                inserted: total.inserted + part.inserted,
                deleted: sum(total.deleted, part.deleted),
                live: sum(total.live, part.live),
            },
        )
    }
}

/// `12 segments + 9 L0, rows inserted=12000 deleted=45 live=11955`, the rows' last two
/// `not read` without the data.
impl fmt::Display for Figures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} segments + {} L0, rows inserted={}",
            self.segments, self.l0_segments, self.inserted
        )?;
        match (self.deleted, self.live) {
            (Some(deleted), Some(live)) => write!(f, " deleted={deleted} live={live}"),
            _ => write!(f, " (deletes not read)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::meta::{PartitionBackupInfo, SegmentBackupInfo};

    fn segment(rows: i64, is_l0: bool) -> SegmentBackupInfo {
        SegmentBackupInfo {
            num_of_rows: rows,
            is_l0,
            ..SegmentBackupInfo::default()
        }
    }

    /// An L0 segment's `num_of_rows` counts its deletes: neither `inserted` nor a segment.
    #[test]
    fn l0_segments_are_counted_apart_and_hold_no_rows() {
        let collection = CollectionBackupInfo {
            partition_backups: vec![PartitionBackupInfo {
                segment_backups: vec![segment(1000, false), segment(1000, false), segment(3, true)],
                ..PartitionBackupInfo::default()
            }],
            l0_segments: vec![segment(3, true)],
            ..CollectionBackupInfo::default()
        };
        let meta = Figures::of_meta(&collection);
        assert_eq!(
            (meta.segments, meta.l0_segments, meta.inserted),
            (2, 2, 2000)
        );
        assert_eq!(
            meta.to_string(),
            "2 segments + 2 L0, rows inserted=2000 (deletes not read)"
        );
        let rows = DataRows {
            inserted: 2000,
            deleted: 5,
            live: 1995,
            ..DataRows::default()
        };
        let read = meta.with_rows(Some(&rows));
        assert_eq!(
            read.to_string(),
            "2 segments + 2 L0, rows inserted=2000 deleted=5 live=1995"
        );
        let total = Figures::total([read, read]);
        assert_eq!(
            (total.segments, total.inserted, total.live),
            (4, 4000, Some(3990))
        );
        assert_eq!(Figures::total([read, meta]).live, None, "one part unread");
    }
}
