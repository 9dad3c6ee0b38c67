//! storage-probe: before the import, every secondary's storage must already
//! see the files lockstep staged in the target's storage, because each
//! secondary's Milvus reads its mirror of the import from its own storage. A
//! missing file there would fail the mirror after the target committed.
//!
//! Config:
//! - `sample` (optional, a count): probe at most this many files per batch,
//!   spread evenly over the batch; every file when unset.
//! - `show_missing` (optional, default 5): how many missing paths per
//!   secondary the failure names.

use std::collections::BTreeMap;

use lockstep_check::{Check, CheckError, Context, StagedFile, Verdict, log, sample, storage};

struct StorageProbe;

/// What one secondary lacks.
struct Gaps {
    probed: usize,
    missing: Vec<String>,
}

impl Check for StorageProbe {
    fn check(ctx: &Context) -> Result<Verdict, CheckError> {
        let per_batch: Option<usize> = ctx.config_parse("sample")?;
        let show: usize = ctx.config_parse("show_missing")?.unwrap_or(5);
        if ctx.secondaries.is_empty() {
            log::info("no secondaries: nothing to probe", &[]);
            return Ok(Verdict::Pass);
        }

        let staged = storage::staged_files()?;
        let mut batches: BTreeMap<u32, Vec<StagedFile>> = BTreeMap::new();
        for file in staged {
            batches.entry(file.batch).or_default().push(file);
        }
        let probe: Vec<&StagedFile> = batches
            .values()
            .flat_map(|files| match per_batch {
                Some(n) => sample::evenly(files, n),
                None => files.iter().collect(),
            })
            .collect();

        let mut failures = Vec::new();
        for secondary in &ctx.secondaries {
            let gaps = probe_end(&secondary.name, &probe)?;
            log::info(
                "probed secondary storage",
                &[
                    ("end", &secondary.name),
                    ("probed", &gaps.probed.to_string()),
                    ("missing", &gaps.missing.len().to_string()),
                ],
            );
            if !gaps.missing.is_empty() {
                let shown: Vec<&str> = gaps.missing.iter().take(show).map(String::as_str).collect();
                let more = gaps.missing.len().saturating_sub(show);
                failures.push(format!(
                    "secondary `{}` lacks {} of {} probed staged files: {}{}",
                    secondary.name,
                    gaps.missing.len(),
                    gaps.probed,
                    shown.join(", "),
                    if more > 0 {
                        format!(" (and {more} more)")
                    } else {
                        String::new()
                    },
                ));
            }
        }
        Ok(if failures.is_empty() {
            Verdict::Pass
        } else {
            Verdict::Fail(failures.join("; "))
        })
    }
}

/// Heads every probed file on `end`; a file of another size counts as missing
/// (a partial copy is as bad as none).
fn probe_end(end: &str, probe: &[&StagedFile]) -> Result<Gaps, CheckError> {
    let mut missing = Vec::new();
    for file in probe {
        match storage::head(end, &file.path)? {
            Some(meta) if meta.size == file.size => {}
            Some(meta) => missing.push(format!(
                "{} (size {} instead of {})",
                file.path, meta.size, file.size
            )),
            None => missing.push(file.path.clone()),
        }
    }
    Ok(Gaps {
        probed: probe.len(),
        missing,
    })
}

lockstep_check::export_check!(StorageProbe);
