//! Import batches: what one import job carries, the rows it must show, and how one
//! collection's segments are cut into batches (milvus-backup's batching).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::Error;
use super::meta::{CollectionBackupInfo, PartitionBackupInfo, SegmentBackupInfo};
use super::namespace::Namespace;
use super::options::{L0Batching, RestoreOptions, Strategy};
use super::read::Backup;
use super::store::BINLOG_DIR;

/// Whether a batch imports data segments or L0 delete segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchKind {
    /// Insert logs with their delta logs (`backup=true`).
    Data,
    /// L0 delete logs (`l0_import=true`).
    L0,
}

/// A batch's id: stable across runs of the same job on the same backup, so that the
/// engine can derive Idempotency-Keys and journal entries from it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct BatchId(String);

impl BatchId {
    /// `{db}.{collection}/{partition}/{data|l0}-{n}`, with `*` for all partitions (a
    /// name Milvus does not allow, so it cannot collide with a real partition).
    fn new(target: &Namespace, partition: Option<&str>, kind: BatchKind, index: usize) -> Self {
        let kind = match kind {
            BatchKind::Data => "data",
            BatchKind::L0 => "l0",
        };
        Self(format!(
            "{target}/{}/{kind}-{index}",
            partition.unwrap_or("*")
        ))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for BatchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The rows an import of one batch must show on every end.
///
/// Milvus counts a binlog import's rows after the batch's own deletes (seen on 2.3.5: 1,200
/// inserted, 37 deleted, 1,163 imported). Read from the backup's data ([`super::rows`]) that
/// figure is `exact`, and nothing else is accepted. Where the data could not be read, the
/// meta's figures give a range: exact for a batch without deletes, from inserted less deletes
/// to inserted with them. Never the server's own `totalRows`: a Milvus 2.3 whose import
/// listed no files completes with both at 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpectedRows {
    /// The sum of the segments' `num_of_rows`.
    pub inserted: i64,
    /// The delete entries of the batch's delta logs (`entries_num`); `None` when the backup
    /// holds delta logs for the batch whose meta does not count them.
    pub deletes: Option<i64>,
    /// The rows the import counts, read from the batch's data; `None` when it was not read.
    #[serde(default)]
    pub exact: Option<i64>,
}

impl ExpectedRows {
    /// The fewest rows an end may report. With deletes the meta does not count, only an
    /// import of nothing is known wrong.
    pub fn fewest(self) -> i64 {
        match self.deletes {
            Some(deletes) => (self.inserted - deletes).max(0),
            None => self.inserted.min(1),
        }
    }

    /// Whether an end that reports `imported` rows imported this batch: never more than was
    /// inserted, never fewer than inserted less deletes, and never nothing for a batch with
    /// rows.
    pub fn accepts(self, imported: i64) -> bool {
        if let Some(exact) = self.exact {
            return imported == exact;
        }
        imported <= self.inserted
            && imported >= self.fewest()
            && (self.inserted == 0 || imported > 0)
    }
}

impl fmt::Display for ExpectedRows {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(exact) = self.exact {
            return match self.inserted - exact {
                0 => write!(f, "{exact}"),
                deleted => write!(
                    f,
                    "{exact} ({} inserted, {deleted} deleted by the batch's own deletes)",
                    self.inserted
                ),
            };
        }
        match self.deletes {
            Some(0) => write!(f, "{}", self.inserted),
            Some(deletes) => write!(
                f,
                "{} to {} ({} inserted, {deletes} deleted)",
                self.fewest(),
                self.inserted,
                self.inserted
            ),
            None => write!(
                f,
                "1 to {} (deletes not counted in the backup meta)",
                self.inserted
            ),
        }
    }
}

/// One import job's worth of segments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImportBatch {
    pub id: BatchId,
    pub kind: BatchKind,
    /// The target collection.
    pub target: Namespace,
    /// The target partition; `None` for the collection-level L0 batches, which apply to
    /// every partition (milvus-backup passes an empty partition name).
    pub partition: Option<String>,
    /// The vchannel the segments were written on; empty for backups without group ids.
    pub vchannel: String,
    pub storage_version: i64,
    /// The import `files`: one entry per segment (or per partition for backups without
    /// group ids), each `[insert_prefix, delta_prefix]`, `[insert_prefix]` when the backup
    /// has no delta logs there, or `[delta_prefix]` for L0. Prefixes end in `/` and are
    /// relative to the backup directory (`binlogs/insert_log/...`).
    pub files: Vec<Vec<String>>,
    /// The bytes listed under the batch's prefixes.
    pub bytes: u64,
    /// The sum of the segments' `num_of_rows`.
    pub rows: i64,
    /// The delete entries of the segments' delta logs; `None` when the batch imports delta
    /// files that the meta does not count (see [`ExpectedRows`]).
    pub deletes: Option<i64>,
    /// The rows its import counts, read from its data by [`super::rows::count`]; `None`
    /// until then, or when the data cannot be read.
    pub exact_rows: Option<i64>,
    /// `end_ts`: the vchannel's checkpoint time, with `truncate_binlog_by_ts` only.
    pub end_ts: Option<u64>,
    /// The database's encryption-zone key, mapped through `ezk_mapping`.
    pub ezk: Option<String>,
}

impl ImportBatch {
    /// What every end must import of this batch; `None` for an L0 batch, which imports
    /// deletes, not rows.
    pub fn expected_rows(&self) -> Option<ExpectedRows> {
        (self.kind == BatchKind::Data).then_some(ExpectedRows {
            inserted: self.rows,
            deletes: self.deletes,
            exact: self.exact_rows,
        })
    }

    /// The import options milvus-backup sends for this batch (docs/milvus-facts.md §5.4):
    /// `skip_disk_quota_check`, `backup` or `l0_import`, `storage_version` when > 0,
    /// `end_ts` when truncating, `ezk` when the database has one. `auto_commit` is the
    /// engine's to add: it depends on the strategy, not on the batch.
    pub fn options(&self) -> BTreeMap<String, String> {
        let mut options = BTreeMap::from([("skip_disk_quota_check".to_owned(), "true".to_owned())]);
        let kind = match self.kind {
            BatchKind::Data => "backup",
            BatchKind::L0 => "l0_import",
        };
        options.insert(kind.to_owned(), "true".to_owned());
        if self.storage_version > 0 {
            options.insert(
                "storage_version".to_owned(),
                self.storage_version.to_string(),
            );
        }
        if let Some(end_ts) = self.end_ts.filter(|ts| *ts > 0) {
            options.insert("end_ts".to_owned(), end_ts.to_string());
        }
        if let Some(ezk) = &self.ezk {
            options.insert("ezk".to_owned(), ezk.clone());
        }
        options
    }
}

/// Builds one collection's import batches.
pub(super) struct CollectionBatcher<'a> {
    pub backup: &'a Backup,
    pub collection: &'a CollectionBackupInfo,
    pub source: &'a Namespace,
    pub target: &'a Namespace,
    pub ezk: Option<String>,
    pub options: &'a RestoreOptions,
    pub strategy: Strategy,
}

impl CollectionBatcher<'_> {
    pub fn batches(&self) -> Result<Vec<ImportBatch>, Error> {
        let mut data = Vec::new();
        let mut partition_l0 = Vec::new();
        for partition in &self.collection.partition_backups {
            data.extend(self.data_batches(partition)?);
            let l0: Vec<&SegmentBackupInfo> = partition
                .segment_backups
                .iter()
                .filter(|s| s.is_l0)
                .collect();
            partition_l0.extend(self.l0_batches(Some(&partition.partition_name), &l0)?);
        }
        let collection_l0: Vec<&SegmentBackupInfo> = self.collection.l0_segments.iter().collect();
        let collection_l0 = self.l0_batches(None, &collection_l0)?;
        Ok(data
            .into_iter()
            .chain(partition_l0)
            .chain(collection_l0)
            .collect())
    }

    /// Segments per job: one under `per_seg` (a v1 import per segment directory).
    fn chunk_size(&self, kind: BatchKind) -> usize {
        match (self.strategy, kind, self.options.l0_batching) {
            (Strategy::PerSeg, _, _) | (Strategy::Merged, BatchKind::L0, L0Batching::OnePerJob) => {
                1
            }
            (Strategy::Merged, _, _) => self.options.max_segments_per_job.max(1),
        }
    }

    /// milvus-backup's `notL0SegmentBatches`: with group ids, one entry per segment,
    /// grouped by (vchannel, storage version) and chunked; without (old backups), one
    /// entry for the whole partition.
    fn data_batches(&self, partition: &PartitionBackupInfo) -> Result<Vec<ImportBatch>, Error> {
        let segments: Vec<&SegmentBackupInfo> = partition
            .segment_backups
            .iter()
            .filter(|s| !s.is_l0)
            .collect();
        if segments.is_empty() {
            return Ok(Vec::new());
        }
        for segment in &segments {
            self.check_binlogs(partition, segment)?;
        }
        let name = Some(partition.partition_name.as_str());
        if segments.iter().all(|s| s.group_id == 0) {
            if self.options.truncate_binlog_by_ts {
                return Err(Error::TruncateWithoutGroupIds {
                    collection: self.source.clone(),
                    partition: partition.partition_name.clone(),
                });
            }
            let dirs = format!(
                "{}/{}",
                self.collection.collection_id, partition.partition_id
            );
            let entry = self.data_entry(&dirs);
            let batch = self.batch(
                BatchKind::Data,
                name,
                0,
                String::new(),
                0,
                vec![entry],
                &segments,
                None,
            );
            return Ok(vec![batch]);
        }
        self.grouped(BatchKind::Data, name, &segments, |segment| {
            let dirs = format!(
                "{}/{}/{}",
                self.collection.collection_id, segment.partition_id, segment.group_id
            );
            self.data_entry(&dirs)
        })
    }

    /// Every field the meta lists binlogs for has some under the segment's directory, so
    /// that nothing the meta counts is missing before anything is written. (What Milvus's
    /// `verify` would refuse, or a 2.3 would import as 0 rows, is found here instead.)
    fn check_binlogs(
        &self,
        partition: &PartitionBackupInfo,
        segment: &SegmentBackupInfo,
    ) -> Result<(), Error> {
        if segment.num_of_rows == 0 {
            return Ok(());
        }
        let dir = match segment.group_id {
            0 => format!(
                "{BINLOG_DIR}/insert_log/{}/{}/{}",
                self.collection.collection_id, segment.partition_id, segment.segment_id
            ),
            group => format!(
                "{BINLOG_DIR}/insert_log/{}/{}/{group}/{}",
                self.collection.collection_id, segment.partition_id, segment.segment_id
            ),
        };
        let listed = segment
            .binlogs
            .iter()
            .filter(|field| !field.binlogs.is_empty())
            .map(|field| format!("{dir}/{}/", field.field_id));
        let wanted: Vec<String> = std::iter::once(format!("{dir}/")).chain(listed).collect();
        match wanted
            .into_iter()
            .find(|p| !self.backup.files.binlogs.has_prefix(p))
        {
            None => Ok(()),
            Some(prefix) => Err(Error::MissingBinlogs {
                collection: self.source.clone(),
                partition: partition.partition_name.clone(),
                segment: segment.segment_id,
                rows: segment.num_of_rows,
                prefix,
            }),
        }
    }

    /// `[insert_log/{dirs}/, delta_log/{dirs}/]`, the delta prefix only if the backup
    /// has files under it.
    fn data_entry(&self, dirs: &str) -> Vec<String> {
        let insert = format!("{BINLOG_DIR}/insert_log/{dirs}/");
        let delta = format!("{BINLOG_DIR}/delta_log/{dirs}/");
        if self.backup.files.binlogs.has_prefix(&delta) {
            vec![insert, delta]
        } else {
            vec![insert]
        }
    }

    /// milvus-backup's `l0SegmentBatches`: `[delta_log/{c}/{p}/{segment}/]` per segment.
    fn l0_batches(
        &self,
        partition: Option<&str>,
        segments: &[&SegmentBackupInfo],
    ) -> Result<Vec<ImportBatch>, Error> {
        self.grouped(BatchKind::L0, partition, segments, |segment| {
            vec![format!(
                "{BINLOG_DIR}/delta_log/{}/{}/{}/",
                self.collection.collection_id, segment.partition_id, segment.segment_id
            )]
        })
    }

    /// Groups `segments` by (vchannel, storage version) in order of first appearance and
    /// chunks each group into batches.
    fn grouped(
        &self,
        kind: BatchKind,
        partition: Option<&str>,
        segments: &[&SegmentBackupInfo],
        entry: impl Fn(&SegmentBackupInfo) -> Vec<String>,
    ) -> Result<Vec<ImportBatch>, Error> {
        let mut groups: Vec<((&str, i64), Vec<&SegmentBackupInfo>)> = Vec::new();
        for segment in segments {
            let key = (segment.v_channel.as_str(), segment.storage_version);
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, members)) => members.push(segment),
                None => groups.push((key, vec![segment])),
            }
        }
        let mut batches = Vec::new();
        for ((vchannel, storage_version), members) in groups {
            let end_ts = self.end_ts(vchannel)?;
            for chunk in members.chunks(self.chunk_size(kind)) {
                let files = chunk.iter().map(|s| entry(s)).collect();
                let index = batches.len();
                batches.push(self.batch(
                    kind,
                    partition,
                    index,
                    vchannel.to_owned(),
                    storage_version,
                    files,
                    chunk,
                    end_ts,
                ));
            }
        }
        Ok(batches)
    }

    #[allow(clippy::too_many_arguments)]
    fn batch(
        &self,
        kind: BatchKind,
        partition: Option<&str>,
        index: usize,
        vchannel: String,
        storage_version: i64,
        files: Vec<Vec<String>>,
        segments: &[&SegmentBackupInfo],
        end_ts: Option<u64>,
    ) -> ImportBatch {
        let bytes = files
            .iter()
            .flatten()
            .map(|prefix| self.backup.files.binlogs.bytes_under(prefix))
            .sum();
        let rows = segments.iter().map(|s| s.num_of_rows).sum();
        let counted: i64 = segments
            .iter()
            .flat_map(|s| &s.deltalogs)
            .flat_map(|field| &field.binlogs)
            .map(|log| log.entries_num)
            .sum();
        let imports_deltas = files
            .iter()
            .flatten()
            .any(|prefix| prefix.starts_with(&format!("{BINLOG_DIR}/delta_log/")));
        // Delta files the meta has no count for: the deletes are not known.
        let deletes = (counted > 0 || !imports_deltas).then_some(counted);
        ImportBatch {
            id: BatchId::new(self.target, partition, kind, index),
            kind,
            target: self.target.clone(),
            partition: partition.map(str::to_owned),
            vchannel,
            storage_version,
            files,
            bytes,
            rows,
            deletes,
            exact_rows: None,
            end_ts,
            ezk: self.ezk.clone(),
        }
    }

    /// The vchannel's checkpoint time when truncating (milvus-backup's `backupTS`).
    fn end_ts(&self, vchannel: &str) -> Result<Option<u64>, Error> {
        if !self.options.truncate_binlog_by_ts {
            return Ok(None);
        }
        let missing = || Error::MissingCheckpoint {
            collection: self.source.clone(),
            vchannel: vchannel.to_owned(),
        };
        if vchannel.is_empty() {
            return Err(missing());
        }
        let timestamp = self
            .collection
            .checkpoint_ts(vchannel)
            .ok_or_else(missing)?
            .map_err(|reason| Error::BadCheckpoint {
                collection: self.source.clone(),
                vchannel: vchannel.to_owned(),
                reason,
            })?;
        Ok(Some(timestamp))
    }
}
