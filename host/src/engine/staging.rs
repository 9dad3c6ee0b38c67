//! The staging stage: the plan's files into every end's store that is not the backup's, in
//! the import gate's order, telling the gate as each file lands.

use tokio_util::sync::CancellationToken;

use super::error::StageError;
use super::fence::Fence;
use super::gate::ImportGate;
use super::preflight::Preflight;
use super::report::StagingReport;
use crate::job::Job;
use crate::journal::RestoreId;
use crate::storage::{self, ImportPaths, StagingPrefix};

/// The stores the ends import from, opened, and where in them.
pub(super) struct Destinations {
    pub paths: ImportPaths,
    stores: Vec<(String, storage::OpenedStore)>,
}

impl Destinations {
    /// Opens every destination store and picks the import paths: the staging prefix, or
    /// the backup itself when every destination is the backup's store and the backup's
    /// files are where an import looks for them.
    pub fn open(
        job: &Job,
        preflight: &Preflight,
        restore_id: &RestoreId,
    ) -> Result<Self, StageError> {
        let prefix = StagingPrefix::for_restore(restore_id.as_str());
        let mut stores = Vec::new();
        for (end, spec) in job.destinations() {
            let store = storage::open(spec).map_err(|e| StageError::Storage {
                end: end.clone(),
                source: Box::new(e),
            })?;
            stores.push((end, store));
        }
        let ids: Vec<&storage::StoreId> = stores.iter().map(|(_, s)| &s.id).collect();
        let paths = match in_place(preflight) {
            true => storage::import_paths(
                &preflight.backup_store.id,
                &preflight.backup.location.dir,
                &ids,
                prefix,
            ),
            false => ImportPaths::Staged { prefix },
        };
        Ok(Destinations { paths, stores })
    }

    /// The staging prefix and the ends staged into, for the restore's record before
    /// anything is copied, so that a crash mid-copy can still clean up; `None` when the
    /// ends import in place.
    pub fn recorded(&self) -> Option<(String, Vec<String>)> {
        let ImportPaths::Staged { prefix } = &self.paths else {
            return None;
        };
        let ends = self.stores.iter().map(|(e, _)| e.clone()).collect();
        Some((prefix.path().to_string(), ends))
    }
}

/// Whether the ends may import the backup where it is: its files are where an import looks
/// for them, and lockstep wrote none of its own (an L0 fold's delta logs go into the stage;
/// the backup is never written to).
pub(super) fn in_place(preflight: &Preflight) -> bool {
    preflight.backup.importable_in_place()
        && preflight
            .plan
            .files_to_stage
            .iter()
            .all(|f| f.written.is_none())
}

/// Copies the plan's files into every destination in the gate's order, telling the gate as
/// each is durable everywhere and `progress` as the bytes go; what was staged, or why not.
/// Cancelling `stop` ends the copy early with an error, once the copies under way are
/// settled (a copy abandoned mid-request could land after a rollback deleted the prefix).
pub(super) async fn stage_files(
    preflight: &Preflight,
    to: &Destinations,
    gate: &ImportGate,
    progress: &(dyn Fn(storage::StageProgress) + Send + Sync),
    stop: &CancellationToken,
) -> Result<StagingReport, StageError> {
    let (paths, opened) = (&to.paths, &to.stores);
    // The plan's files in the gate's order, by reference: a copy of each would double the
    // largest list a restore holds.
    let files: Vec<&crate::backup::BackupFile> = gate
        .order
        .iter()
        .map(|&i| &preflight.plan.files_to_stage[i])
        .collect();
    let mut report = StagingReport {
        prefix: paths.prefix().to_string(),
        files: files.len() as u64,
        bytes: files.iter().map(|f| f.size).sum(),
        bytes_streamed: 0,
        transfers: Default::default(),
        destinations: opened.iter().map(|(e, _)| e.clone()).collect(),
        cleaned_up: false,
    };
    let ImportPaths::Staged { prefix } = paths else {
        // Imported in place: every file is there already.
        (0..gate.order.len()).for_each(|position| gate.file_ready(position));
        return Ok(report);
    };
    let destinations: Vec<storage::Destination<'_>> = opened
        .iter()
        .map(|(end, store)| storage::Destination { end, store })
        .collect();
    let source = storage::StageSource {
        store: &preflight.backup_store,
        backup_dir: &preflight.backup.location.dir,
    };
    let staged = storage::stage(
        source,
        &files,
        &destinations,
        prefix,
        storage::StageOptions::default(),
        progress,
        &|position| gate.file_ready(position),
        stop,
    )
    .await
    .map_err(|e| StageError::Staging(Box::new(e)))?;
    let (transfers, streamed) = staged.tally(&files);
    for (transfer, placed) in transfers {
        *report.transfers.entry(transfer).or_default() += placed;
    }
    report.bytes_streamed += streamed;
    Ok(report)
}

/// Deletes the staged files of a restore decided for commit from every destination once
/// nothing reads them (unless `keep_temp_files`), once `fence` passed: the plan's `staged`
/// files by name. Whether they are gone, for the report.
pub(super) async fn clean_up(
    job: &Job,
    fence: &dyn Fence,
    restore_id: &RestoreId,
    staged: &[crate::backup::BackupFile],
) -> bool {
    if fence.check().await.is_err() {
        return false;
    }
    let prefix = StagingPrefix::for_restore(restore_id.as_str());
    let temp = storage::TempFiles::after(job.restore.keep_temp_files, true);
    let staged: Vec<&str> = staged.iter().map(|f| f.path.as_str()).collect();
    let cleaned = storage::delete_stage(&job.destinations(), &prefix, temp, &staged).await;
    cleaned && temp == storage::TempFiles::Delete
}
