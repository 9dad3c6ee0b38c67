//! The `options` map of an import request, parsed as Milvus's
//! `internal/util/importutilv2/option.go` parses it (docs/milvus-facts.md §1.5).
//!
//! Messages follow Milvus's `"parse <key> failed, err=<Go error>"` shape wrapped in
//! `ErrImportFailed` (code 2100). The texts for `source_type`, `external_spec`,
//! `_snapshot_source_uri` and the missing `partitionName` were not read in Milvus and are [infer].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::go_duration::{self, GoDuration};
use crate::merr::MilvusError;

/// Whether Milvus commits the job itself once it is Uncommitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommitMode {
    /// `auto_commit` missing or anything but "false": the checker commits.
    #[default]
    Auto,
    /// `auto_commit=false`: the job waits in Uncommitted for commit or abort.
    Manual,
}

/// What the file groups hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImportSource {
    /// Row-based files (JSON, CSV; Parquet and NumPy are not read by the sim).
    #[default]
    RowFiles,
    /// `backup=true`: each group is `[insert_prefix, delta_prefix?]` of binlogs.
    Binlogs,
    /// `l0_import=true`: each group is one delta-log prefix of an L0 segment.
    L0Deltas,
}

/// Milvus's storage format versions; `storage_version` picks one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum StorageVersion {
    #[default]
    V1,
    V2,
    V3,
}

/// The options after parsing; the raw map is kept on the job as sent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportOptions {
    pub commit: CommitMode,
    pub source: ImportSource,
    /// `timeout`; None means no timeout (`TimeoutTs = MaxUint64`).
    pub timeout: Option<std::time::Duration>,
    pub storage_version: StorageVersion,
    pub start_ts: Option<u64>,
    pub end_ts: Option<u64>,
}

/// The physical part (ms) of a hybrid timestamp is `ts >> 18`; anything before 2000-01-01 is
/// not a timestamp Milvus could have allocated ([infer]: the exact check was not read).
const MIN_HYBRID_PHYSICAL_MS: u64 = 946_684_800_000;

fn parse_ts(
    options: &BTreeMap<String, String>,
    keys: [&str; 2],
) -> Result<Option<u64>, MilvusError> {
    let Some((key, value)) = keys.iter().find_map(|k| options.get(*k).map(|v| (*k, v))) else {
        return Ok(None);
    };
    let ts: u64 = value.parse().map_err(|_| {
        MilvusError::import_failed(format!(
            "parse {key} failed, err=strconv.ParseUint: parsing \"{value}\": invalid syntax"
        ))
    })?;
    if ts != 0 && (ts >> 18) < MIN_HYBRID_PHYSICAL_MS {
        return Err(MilvusError::import_failed(format!(
            "{key} {ts} is not a valid hybrid timestamp"
        )));
    }
    Ok(Some(ts))
}

fn is_true(options: &BTreeMap<String, String>, key: &str) -> bool {
    options
        .get(key)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// What the file groups hold, from the `l0_import` and `backup` flags alone (Milvus's
/// `IsL0Import`/`IsBackup`): the proxy decides its partition rules on this before the options
/// are checked.
pub fn import_source(options: &BTreeMap<String, String>) -> ImportSource {
    if is_true(options, "l0_import") {
        ImportSource::L0Deltas
    } else if is_true(options, "backup") {
        ImportSource::Binlogs
    } else {
        ImportSource::RowFiles
    }
}

/// Parses and checks `options` of a create request whose partition is `partition_name`.
pub fn parse(
    options: &BTreeMap<String, String>,
    partition_name: &str,
) -> Result<ImportOptions, MilvusError> {
    let commit = match options.get("auto_commit") {
        Some(v) if v.eq_ignore_ascii_case("false") => CommitMode::Manual,
        _ => CommitMode::Auto,
    };
    let timeout = match options.get("timeout") {
        None => None,
        Some(v) => Some(
            go_duration::parse(v)
                .map(GoDuration::clamped)
                .map_err(|e| {
                    MilvusError::import_failed(format!("parse timeout failed, err={e}"))
                })?,
        ),
    };
    let backup = is_true(options, "backup");
    let l0_import = is_true(options, "l0_import");
    let source_type = options.get("source_type");
    let storage_version = match options.get("storage_version") {
        None => None,
        Some(v) => Some(match v.parse::<i64>() {
            Ok(2) => StorageVersion::V2,
            Ok(3) => StorageVersion::V3,
            Ok(_) => StorageVersion::V1,
            Err(_) => {
                return Err(MilvusError::import_failed(format!(
                    "parse storage_version failed, err=strconv.ParseInt: parsing \"{v}\": invalid syntax"
                )));
            }
        }),
    };
    if options.contains_key("_snapshot_source_uri") {
        return Err(MilvusError::import_failed(
            "option _snapshot_source_uri is reserved and cannot be set by a client",
        ));
    }
    match source_type.map(String::as_str) {
        None => {}
        Some("snapshot") => {
            if !backup {
                return Err(MilvusError::import_failed(
                    "source_type=snapshot requires backup=true",
                ));
            }
            if l0_import {
                return Err(MilvusError::import_failed(
                    "source_type=snapshot is incompatible with l0_import",
                ));
            }
            if storage_version.is_some() {
                return Err(MilvusError::import_failed(
                    "source_type=snapshot is incompatible with storage_version",
                ));
            }
            // Snapshot imports read a snapshot manifest whose format the sim does not know.
            return Err(MilvusError::operation_not_supported(
                "milvus-sim does not emulate source_type=snapshot imports",
            ));
        }
        Some(other) => {
            return Err(MilvusError::import_failed(format!(
                "unsupported source_type '{other}'"
            )));
        }
    }
    if options.contains_key("external_spec") {
        return Err(MilvusError::import_failed(
            "external_spec requires source_type=snapshot",
        ));
    }
    if backup && storage_version == Some(StorageVersion::V3) {
        return Err(MilvusError::import_failed(
            "StorageV3 backup import requires source_type=snapshot and must not specify storage_version",
        ));
    }
    if backup && partition_name.is_empty() {
        return Err(MilvusError::import_failed(
            "partition name is required when backup=true",
        ));
    }
    let start_ts = parse_ts(options, ["start_ts", "startTs"])?;
    let end_ts = parse_ts(options, ["end_ts", "endTs"])?;
    if let (Some(start), Some(end)) = (start_ts, end_ts)
        && start > end
    {
        return Err(MilvusError::import_failed(
            "start_ts shouldn't be larger than end_ts",
        ));
    }
    Ok(ImportOptions {
        commit,
        source: import_source(options),
        timeout,
        storage_version: storage_version.unwrap_or_default(),
        start_ts,
        end_ts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merr::code;

    fn opts(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn refused(pairs: &[(&str, &str)], partition: &str) -> String {
        let e = parse(&opts(pairs), partition).expect_err("options must be refused");
        assert_eq!(e.code, code::IMPORT_FAILED, "{}", e.message);
        e.message
    }

    #[test]
    fn auto_commit_is_true_unless_false() {
        assert_eq!(parse(&opts(&[]), "").expect("ok").commit, CommitMode::Auto);
        assert_eq!(
            parse(&opts(&[("auto_commit", "FALSE")]), "")
                .expect("ok")
                .commit,
            CommitMode::Manual
        );
        assert_eq!(
            parse(&opts(&[("auto_commit", "no")]), "")
                .expect("ok")
                .commit,
            CommitMode::Auto
        );
    }

    #[test]
    fn timeout_parses_as_go_duration() {
        let o = parse(&opts(&[("timeout", "1.5s")]), "").expect("ok");
        assert_eq!(o.timeout, Some(std::time::Duration::from_millis(1500)));
        assert_eq!(parse(&opts(&[]), "").expect("ok").timeout, None);
        assert_eq!(
            refused(&[("timeout", "soon")], ""),
            "parse timeout failed, err=time: invalid duration \"soon\": importing data failed"
        );
    }

    #[test]
    fn backup_needs_a_partition() {
        assert!(refused(&[("backup", "true")], "").contains("partition name is required"));
        assert_eq!(
            parse(&opts(&[("backup", "true")]), "p").expect("ok").source,
            ImportSource::Binlogs
        );
        assert_eq!(
            parse(&opts(&[("l0_import", "true")]), "")
                .expect("ok")
                .source,
            ImportSource::L0Deltas
        );
    }

    #[test]
    fn storage_version_rules() {
        assert_eq!(
            parse(&opts(&[("storage_version", "2")]), "")
                .expect("ok")
                .storage_version,
            StorageVersion::V2
        );
        assert_eq!(
            parse(&opts(&[("storage_version", "0")]), "")
                .expect("ok")
                .storage_version,
            StorageVersion::V1
        );
        assert!(
            refused(&[("storage_version", "two")], "").starts_with("parse storage_version failed")
        );
        assert!(
            refused(&[("backup", "true"), ("storage_version", "3")], "p")
                .starts_with("StorageV3 backup import requires source_type=snapshot and must not specify storage_version")
        );
    }

    #[test]
    fn timestamps_rules() {
        let now_ts = 1_780_000_000_000u64 << 18;
        let later = (now_ts + (1 << 18)).to_string();
        let o = parse(
            &opts(&[("start_ts", &now_ts.to_string()), ("endTs", &later)]),
            "",
        )
        .expect("ok");
        assert_eq!((o.start_ts, o.end_ts.is_some()), (Some(now_ts), true));
        assert!(refused(&[("end_ts", "x")], "").starts_with("parse end_ts failed"));
        assert!(refused(&[("start_ts", "12345")], "").contains("is not a valid hybrid timestamp"));
        assert!(
            refused(&[("start_ts", &later), ("end_ts", &now_ts.to_string())], "")
                .starts_with("start_ts shouldn't be larger than end_ts")
        );
    }

    #[test]
    fn source_type_rules() {
        assert!(refused(&[("source_type", "snapshot")], "").contains("requires backup=true"));
        assert!(
            refused(
                &[
                    ("source_type", "snapshot"),
                    ("backup", "true"),
                    ("l0_import", "true")
                ],
                "p"
            )
            .contains("incompatible with l0_import")
        );
        assert!(
            refused(
                &[
                    ("source_type", "snapshot"),
                    ("backup", "true"),
                    ("storage_version", "2")
                ],
                "p"
            )
            .contains("incompatible with storage_version")
        );
        assert!(refused(&[("external_spec", "{}")], "").contains("requires source_type=snapshot"));
        assert!(refused(&[("_snapshot_source_uri", "x")], "").contains("reserved"));
    }
}
