//! Report files in a state directory: `{reports}/{restore id}.json` and `.txt` per restore
//! (the engine writes those of the restores it runs), and `{reports}/latest/{job}.json` and
//! `.txt`, symbolic links to the newest report of each job name, replaced atomically so a
//! reader never finds one missing.

use std::io;
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

use crate::engine::Report;
use crate::engine::report::ReportOf;
use crate::journal::RestoreId;

/// The report of a job file that was refused before anything ran, with each reason. Its id
/// is `{stem}.{hash12 of identity}.refused`: `identity` is the file's bytes when it was read,
/// so the same bad bytes give the same report and fixing the file gives a new one, and the
/// reason when it was not read.
pub fn refused_file(path: &Path, identity: &[u8], refusals: Vec<String>) -> Report {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let hash = hex::encode(Sha256::digest(identity));
    let of = ReportOf {
        restore_id: format!("{}refused", RestoreId::content_prefix(&stem, &hash)),
        job_name: stem,
        job_id: hash,
        backup: String::new(),
    };
    Report::refused(
        of,
        format!("job file {} refused; nothing ran", path.display()),
        refusals,
    )
}

/// Writes `report` as JSON and text and points its job's `latest` links at it.
pub fn write(reports_dir: &Path, report: &Report) -> io::Result<()> {
    report.write_files(reports_dir)?;
    link_latest(reports_dir, report)
}

/// `latest/{job}.json` and `.txt`, links to the report files of `report`'s restore.
pub fn link_latest(reports_dir: &Path, report: &Report) -> io::Result<()> {
    let latest = reports_dir.join("latest");
    crate::owner_only::dir(&latest)?;
    let job = RestoreId::content_prefix(&report.job_name, "");
    let job = job.trim_end_matches('.');
    for ext in ["json", "txt"] {
        // Relative, so the state directory can be moved or mounted elsewhere.
        let target = PathBuf::from("..").join(format!("{}.{ext}", report.restore_id));
        let link = latest.join(format!("{job}.{ext}"));
        let tmp = latest.join(format!(".{job}.{ext}.tmp"));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&target, &tmp)?;
        std::fs::rename(&tmp, &link)?;
    }
    Ok(())
}

/// The report the newest `latest` link of `job` points at.
pub fn read_latest(reports_dir: &Path, job: &str) -> Option<Report> {
    let job = RestoreId::content_prefix(job, "");
    let path = reports_dir
        .join("latest")
        .join(format!("{}.json", job.trim_end_matches('.')));
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::Outcome;

    #[test]
    fn a_refused_file_report_names_file_line_and_field_and_links_as_latest() {
        let dir = tempfile::tempdir().unwrap();
        let host = crate::config::HostConfig::empty(dir.path().join("state"));
        let path = dir.path().join("orders.toml");
        let bytes = b"backup = \"b\"\ntarget = \"http://127.0.0.1:1\"\nstrategy = \"fast\"\n";
        std::fs::write(&path, bytes).unwrap();
        let err = crate::job::Job::from_file(&path, &host).unwrap_err();
        let problems = err.problems().iter().map(ToString::to_string).collect();
        let report = refused_file(&path, bytes, problems);
        assert!(report.restore_id.starts_with("orders."));
        assert!(report.restore_id.ends_with(".refused"));
        assert!(
            report
                .refusals
                .iter()
                .any(|r| r.contains("orders.toml:3:") && r.contains("strategy")),
            "{:?}",
            report.refusals
        );

        let reports = dir.path().join("reports");
        write(&reports, &report).unwrap();
        assert_eq!(read_latest(&reports, "orders"), Some(report.clone()));
        let text = std::fs::read_to_string(reports.join("latest/orders.txt")).unwrap();
        assert!(text.contains("[refused]"), "{text}");

        // A newer report of the same job moves the links.
        let mut newer = report.clone();
        newer.restore_id = "orders.ffff.1".into();
        newer.outcome = Outcome::Succeeded;
        write(&reports, &newer).unwrap();
        assert_eq!(read_latest(&reports, "orders"), Some(newer));
        assert!(reports.join(format!("{}.json", report.restore_id)).exists());
    }
}
