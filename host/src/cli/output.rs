//! What the CLI prints: reports as text or JSON on stdout, progress on stderr (bars on a
//! TTY, log lines otherwise). Only this module prints.

use std::collections::BTreeMap;
use std::io::{self, IsTerminal as _, Write as _};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::ValueEnum;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use serde_json::{Value, json};

use lockstep::backup::catalog;
use lockstep::engine::builds::Gate;
use lockstep::engine::progress::{JobCounts, Waiting, format_counts};
use lockstep::engine::{self, EndFiles, PlanOutput, Report};
use lockstep::job::Job;
use lockstep::journal::{Decision, RestorePhase, RestoreRecord, Role};
use lockstep::plugins::{CheckRun, Inspection, Verdict};
use lockstep::storage::StageProgress;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
}

/// Writes `value` as it is encoded, a buffer at a time: the reports of a restore of
/// thousands of collections are tens of megabytes of text, which were held whole.
fn print_json(value: &impl serde::Serialize) {
    let mut out = io::BufWriter::new(io::stdout().lock());
    let written = serde_json::to_writer_pretty(&mut out, value)
        .map_err(io::Error::from)
        .and_then(|()| writeln!(out))
        .and_then(|()| out.flush());
    if let Err(e) = written {
        eprintln!("lockstep: cannot write the output as JSON: {e}");
    }
}

/// A choice as a file or a flag spells it (`restore`, `data`): its serde value, never its
/// Rust name.
fn spelled(choice: &impl serde::Serialize) -> String {
    match serde_json::to_value(choice) {
        Ok(serde_json::Value::String(s)) => s,
        _ => String::new(),
    }
}

/// Prints an error with its causes, each once: a cause whose text its parent already
/// carries (thiserror messages often quote their source) is not repeated.
pub fn error(format: OutputFormat, e: &anyhow::Error) {
    let text = lockstep::diagnostic::error_chain(e.as_ref());
    match format {
        OutputFormat::Text => eprintln!("lockstep: {text}"),
        OutputFormat::Json => {
            // A refused input says each of its problems apart, located.
            let problems = (e.chain())
                .find_map(|cause| cause.downcast_ref::<lockstep::diagnostic::Error>())
                .map_or(&[][..], lockstep::diagnostic::Error::problems);
            print_json(&json!({ "outcome": "refused", "error": text, "problems": problems }))
        }
    }
}

/// `lockstep list`: one line per backup under the root, or why it does not read.
pub fn backups(format: OutputFormat, listed: &[catalog::Listed]) {
    match format {
        OutputFormat::Json => {
            let entries: Vec<_> = listed
                .iter()
                .map(|entry| match entry {
                    catalog::Listed::Read(b) => json!(catalog::Summary::of(b)),
                    catalog::Listed::Unreadable { name, error } => {
                        json!({ "name": name, "error": lockstep::diagnostic::error_chain(error) })
                    }
                })
                .collect();
            print_json(&json!({ "backups": entries }));
        }
        OutputFormat::Text if listed.is_empty() => println!("no backups under the root"),
        OutputFormat::Text => {
            println!(
                "{:<32} {:<8} {:>11} {:>8} {:>4} {:>12} {:>12}  milvus",
                "name", "format", "collections", "segments", "L0", "inserted", "bytes"
            );
            for entry in listed {
                match entry {
                    catalog::Listed::Read(b) => {
                        let b = catalog::Summary::of(b);
                        println!(
                            "{:<32} {:<8} {:>11} {:>8} {:>4} {:>12} {:>12}  {}",
                            b.name,
                            b.format,
                            b.collections,
                            b.figures.segments,
                            b.figures.l0_segments,
                            b.figures.inserted,
                            b.size,
                            b.milvus_version
                        );
                    }
                    catalog::Listed::Unreadable { name, error } => println!(
                        "{name:<32} unreadable: {}",
                        lockstep::diagnostic::error_chain(error)
                    ),
                }
            }
        }
    }
}

/// `lockstep get`: a backup and its collections, and why some rows were not read.
pub fn backup(
    format: OutputFormat,
    backup: &lockstep::backup::Backup,
    collections: &[catalog::CollectionSummary],
    unread: &[String],
) {
    let summary = catalog::Summary::with_collections(backup, collections);
    match format {
        OutputFormat::Json => print_json(&json!({
            "backup": summary,
            "collections": collections,
            "rows_not_read": unread,
        })),
        OutputFormat::Text => {
            println!(
                "backup {} ({} format, Milvus {}): {} collections, {}, {} bytes",
                summary.name,
                summary.format,
                summary.milvus_version,
                summary.collections,
                summary.figures,
                summary.size
            );
            for c in collections {
                println!(
                    "  {}: {} partitions, {}, {} bytes, {} indexes",
                    c.name, c.partitions, c.figures, c.size, c.indexes
                );
            }
            for why in unread {
                println!("  rows not read: {why}");
            }
        }
    }
}

/// `lockstep check`: one line per finding, or that the backup is sound.
pub fn check(
    format: OutputFormat,
    backup: &lockstep::backup::Backup,
    level: lockstep::backup::verify::Level,
    findings: &[lockstep::backup::verify::Finding],
) {
    let segments = backup.info.segments().count();
    match format {
        OutputFormat::Text => {
            if findings.is_empty() {
                println!(
                    "backup {} is sound at level {}: {} collections, {segments} segments, {} objects",
                    backup.files.location.name,
                    spelled(&level),
                    backup.info.collection_backups.len(),
                    backup.files.binlogs.len()
                );
            } else {
                println!(
                    "backup {}: {} problem(s) at level {}:",
                    backup.files.location.name,
                    findings.len(),
                    spelled(&level)
                );
                for f in findings {
                    println!("  {f}");
                }
            }
        }
        OutputFormat::Json => print_json(&json!({
            "backup": backup.files.location.name,
            "level": level,
            "collections": backup.info.collection_backups.len(),
            "segments": segments,
            "objects": backup.files.binlogs.len(),
            "sound": findings.is_empty(),
            "findings": findings,
        })),
    }
}

pub fn report(format: OutputFormat, report: &Report) {
    match format {
        OutputFormat::Text => println!("{report}"),
        OutputFormat::Json => print_json(report),
    }
}

pub fn reports(
    format: OutputFormat,
    reports: &[Report],
    refused: &[(std::path::PathBuf, lockstep::job::Error)],
) {
    match format {
        OutputFormat::Text => {
            for r in reports {
                println!("{r}");
            }
            if reports.len() + refused.len() > 1 {
                println!("summary: {} restore(s)", reports.len() + refused.len());
                for (f, _) in refused {
                    println!("  {:<40} refused (bad job file)", f.display());
                }
                for r in reports {
                    println!(
                        "  {:<40} {} (exit {})",
                        r.job_name,
                        r.outcome,
                        r.exit_code()
                    );
                }
            }
        }
        OutputFormat::Json => {
            // Encoded straight from the reports: through `json!` they were first copied into
            // a tree of JSON values (some 40 MB at 3,000 collections, the restore's peak).
            #[derive(serde::Serialize)]
            struct Reports<'a> {
                refused_files: Vec<RefusedFile<'a>>,
                reports: &'a [Report],
            }
            #[derive(serde::Serialize)]
            struct RefusedFile<'a> {
                file: &'a Path,
                error: String,
                problems: &'a [lockstep::job::Problem],
            }
            print_json(&Reports {
                refused_files: (refused.iter())
                    .map(|(file, error)| RefusedFile {
                        file,
                        error: error.to_string(),
                        problems: error.problems(),
                    })
                    .collect(),
                reports,
            });
        }
    }
}

/// `lockstep watch`'s line for each restore as it ends: text, or one JSON object a line.
pub struct Told(pub OutputFormat);

impl lockstep::serve::told::Tell for Told {
    fn tell(&self, told: &lockstep::serve::told::Told) {
        match self.0 {
            OutputFormat::Text => println!("{told}"),
            OutputFormat::Json => match serde_json::to_string(told) {
                Ok(line) => println!("{line}"),
                Err(e) => eprintln!("lockstep: cannot write the output as JSON: {e}"),
            },
        }
    }
}

pub fn refused_file(format: OutputFormat, file: &Path, error: &str) {
    if format == OutputFormat::Text {
        eprintln!("lockstep: {error}");
    } else {
        tracing::warn!(file = %file.display(), %error, "job file refused");
    }
}

pub fn plan(format: OutputFormat, job: &Job, plan: &PlanOutput) {
    let p = &plan.plan;
    match format {
        OutputFormat::Json => print_json(&json!({
            "job": job.name,
            "backup": job.backup.name,
            "format": plan.format,
            "ends": plan.ends,
            "route": plan.route,
            "totals": p.totals,
            "staging": plan.import_prefix_note,
            "collections": p.collections.iter().map(|c| with_figures(json!({
                "source": c.source.to_string(),
                "target": c.target.to_string(),
                "partitions": c.partitions,
                "indexes": c.indexes.len(),
                "l0_deletes": c.l0,
                "live_by_partition": c.rows.as_ref().map(|r| &r.partitions),
                "batches": c.batches.iter().map(|b| json!({
                    "id": b.id.to_string(), "kind": b.kind,
                    "partition": b.partition, "segments": b.files.len(), "bytes": b.bytes, "rows": b.rows,
                })).collect::<Vec<_>>(),
            }), c.figures())).collect::<Vec<_>>(),
            "checks": job.checks.iter().map(|c| json!({"plugin": c.plugin, "phase": c.phase})).collect::<Vec<_>>(),
        })),
        OutputFormat::Text => {
            println!(
                "plan for job {} (backup {}, {} format): preflight passed, nothing was changed",
                job.name, job.backup.name, plan.format
            );
            println!("  import: {} ({})", plan.route.route, plan.route.why);
            for end in &plan.ends {
                let files = match end.files {
                    EndFiles::Staged => "files staged into its storage",
                    EndFiles::InPlace => "imports the backup in place",
                    EndFiles::TargetStore => {
                        "no storage known: its mirrors read the paths staged into the target's storage from its own (a shared bucket, or synced content); add `storage` to its cluster in the host config to stage into it"
                    }
                };
                let gate = match end.gate {
                    None => "",
                    Some(Gate::On) => "; replicated import gate on",
                    Some(Gate::Off) => "; replicated import gate OFF",
                    Some(Gate::NotRead) => {
                        "; replicated import gate not read: no management URI in the host config (add `management` to its cluster)"
                    }
                };
                println!(
                    "  end {}: Milvus {}; {}; paths as {}{gate}",
                    end.name, end.version, files, end.import_paths
                );
            }
            let t = &p.totals;
            println!(
                "  {} database(s), {} collection(s), {} partition(s), {} import job(s), {} bytes to stage; {}",
                t.databases, t.collections, t.partitions, t.batches, t.bytes_to_stage, t.figures
            );
            println!("  {}", plan.import_prefix_note);
            println!(
                "  atomicity: {}; mirror grace {}s",
                spelled(&job.two_phase.atomicity),
                job.two_phase.mirror_grace.as_secs()
            );
            for c in &p.collections {
                let l0 =
                    c.l0.map_or(String::new(), |route| format!("; L0 deletes {route}"));
                println!(
                    "  {} ← {}: {} partition(s), {} index(es), {} batch(es), {} bytes; {}{l0}",
                    c.target,
                    c.source,
                    c.partitions.len(),
                    c.indexes.len(),
                    c.batches.len(),
                    c.batches.iter().map(|b| b.bytes).sum::<u64>(),
                    c.figures()
                );
            }
            for c in &job.checks {
                println!("  check {} at {}", c.plugin.display(), c.phase);
            }
        }
    }
}

/// `object` with `figures`' fields beside its own, under the names every view gives them.
fn with_figures(mut object: Value, figures: lockstep::backup::Figures) -> Value {
    if let (Value::Object(fields), Ok(Value::Object(more))) =
        (&mut object, serde_json::to_value(figures))
    {
        fields.extend(more);
    }
    object
}

/// What `verify` found: a line per end and collection, or the whole as JSON.
pub fn verification(format: OutputFormat, id: &str, verification: &lockstep::verify::Verification) {
    match format {
        OutputFormat::Json => print_json(&json!({
            "restore_id": id,
            "passed": verification.passed(),
            "shown": verification.shown,
        })),
        OutputFormat::Text => {
            let verdict = if verification.passed() {
                "every end shows the backup's live rows"
            } else if verification.mismatches().next().is_some() {
                "MISMATCH: some end shows other rows than the backup's data holds"
            } else {
                "NOT VERIFIED: some end could not be asked"
            };
            println!("verify {id}: {verdict}");
            print!("{verification}");
        }
    }
}

/// What `plan` prints of a refused job: each reason, and in JSON each reason's kind.
pub fn refusals(format: OutputFormat, job: &Job, refusals: &[engine::Refusal]) {
    match format {
        OutputFormat::Json => print_json(&json!({
            "job": job.name,
            "outcome": "refused",
            "refusals": engine::Refusal::texts(refusals),
            "refusal_kinds": refusals.iter().map(engine::Refusal::kind).collect::<Vec<_>>(),
        })),
        OutputFormat::Text => {
            println!(
                "job {} refused by preflight; nothing was changed:",
                job.name
            );
            for r in refusals {
                println!("  - {r}");
            }
        }
    }
}

pub fn record(format: OutputFormat, record: &RestoreRecord) {
    match format {
        OutputFormat::Json => print_json(record),
        OutputFormat::Text => match record.report.as_ref().and_then(|r| r.read::<Report>().ok()) {
            Some(r) => println!("{r}"),
            None => {
                println!(
                    "restore {} ({}), attempt {}",
                    record.id, record.job_name, record.attempt
                );
                println!("  {}, updated {}", outcome_of(record), record.updated_at);
                for g in &record.groups {
                    let submitted = g.batches.iter().filter(|b| b.job_id.is_some()).count();
                    let decision = match &g.decision {
                        None => "none yet".to_owned(),
                        Some(Decision::Commit { at }) => format!("commit at {at}"),
                        Some(Decision::Abort { at, reason }) => format!("abort at {at}: {reason}"),
                    };
                    println!(
                        "  group {}: {submitted}/{} jobs submitted, decision {decision}",
                        g.id,
                        g.batches.len(),
                    );
                }
            }
        },
    }
}

/// A record's outcome as `status` says it: the outcome's one spelling, or the phase an
/// unfinished restore is in.
fn outcome_of(record: &RestoreRecord) -> String {
    match record.outcome {
        Some(outcome) => outcome.to_string(),
        None => format!("unfinished ({})", record.phase),
    }
}

/// The target's name (the record lists it first).
fn target_of(record: &RestoreRecord) -> &str {
    (record.ends.iter())
        .find(|e| e.role == Role::Target)
        .map_or("", |e| e.name.as_str())
}

/// `lockstep status`: the restores in the journal, newest first, in columns under a header.
pub fn records(format: OutputFormat, records: &[RestoreRecord]) {
    match format {
        OutputFormat::Json => print_json(
            &records
                .iter()
                .map(|r| {
                    json!({
                        "id": r.id, "job": r.job_name, "backup": r.backup, "target": target_of(r),
                        "renaming": r.renaming, "phase": r.phase, "outcome": r.outcome,
                        "started_at": r.started_at, "updated_at": r.updated_at,
                        "stage_left": r.stage_left.then(|| json!({
                            "prefix": r.staging_prefix, "ends": r.staged_ends,
                        })),
                    })
                })
                .collect::<Vec<_>>(),
        ),
        OutputFormat::Text => {
            if records.is_empty() {
                println!("no restores in the journal");
                return;
            }
            let header = [
                "id", "job", "backup", "target", "renaming", "outcome", "started",
            ];
            let rows: Vec<[String; 7]> = (records.iter())
                .map(|r| {
                    [
                        r.id.to_string(),
                        r.job_name.clone(),
                        r.backup.clone(),
                        target_of(r).to_owned(),
                        r.renaming.clone(),
                        outcome_of(r),
                        r.started_at.to_string(),
                    ]
                })
                .collect();
            table(&header, &rows);
            // Stages still to clean: what a recovery could not delete, and who will.
            for r in records.iter().filter(|r| r.stage_left) {
                println!(
                    "staged files still to clean: {} on {} ({}; `lockstep recover` and every serve/watch sweep retry)",
                    r.staging_prefix.as_deref().unwrap_or("?"),
                    r.staged_ends.join(", "),
                    r.id
                );
            }
        }
    }
}

/// Rows under a header, each column as wide as its widest cell.
fn table<const N: usize>(header: &[&str; N], rows: &[[String; N]]) {
    let mut widths = header.map(str::len);
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: &[&str]| {
        let padded: Vec<String> = (cells.iter().zip(widths))
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        println!("{}", padded.join("  ").trim_end());
    };
    line(header);
    for row in rows {
        line(&row.each_ref().map(String::as_str));
    }
}

/// What `lockstep prune` removed, would remove and kept, each with why.
pub fn pruned(format: OutputFormat, pruned: &[lockstep::serve::retention::Pruned]) {
    match format {
        OutputFormat::Json => print_json(&pruned),
        OutputFormat::Text => {
            if pruned.is_empty() {
                println!("no restores in the journal");
                return;
            }
            let rows: Vec<[String; 5]> = (pruned.iter())
                .map(|p| {
                    [
                        spelled(&p.action),
                        p.id.clone(),
                        p.started.map_or(String::new(), |s| s.to_string()),
                        p.outcome.map_or("running".into(), |o| o.to_string()),
                        p.why.clone(),
                    ]
                })
                .collect();
            table(&["action", "id", "started", "outcome", "why"], &rows);
        }
    }
}

pub fn inspection(format: OutputFormat, inspection: &Inspection) {
    match format {
        OutputFormat::Text => println!("{inspection}"),
        OutputFormat::Json => print_json(&json!({ "inspection": inspection.to_string() })),
    }
}

/// Prints a plugin test run; exit 0 for pass, 1 for fail or error, 0 for retry-after
/// (a valid answer).
pub fn check_run(format: OutputFormat, run: &CheckRun) -> i32 {
    let (verdict, code) = match &run.outcome {
        Ok(Verdict::Pass) => ("pass".to_string(), 0),
        Ok(Verdict::Fail { reason }) => (format!("fail: {reason}"), 1),
        Ok(Verdict::RetryAfter { after, reason }) => {
            (format!("retry-after {}ms: {reason}", after.as_millis()), 0)
        }
        Err(e) => (format!("error: {e}"), 1),
    };
    match format {
        OutputFormat::Json => print_json(&json!({
            "verdict": verdict,
            "elapsed_us": run.elapsed.as_micros() as u64,
            "logs": run.logs.iter().map(|l| json!({"level": format!("{:?}", l.level), "source": format!("{:?}", l.source), "message": l.message, "fields": l.fields})).collect::<Vec<_>>(),
            "dropped_logs": run.dropped_logs,
        })),
        OutputFormat::Text => {
            println!("verdict: {verdict}");
            println!("time: {:.3} ms", run.elapsed.as_secs_f64() * 1000.0);
            for l in &run.logs {
                println!(
                    "  [{:?} {:?}] {} {:?}",
                    l.level, l.source, l.message, l.fields
                );
            }
            if run.dropped_logs > 0 {
                println!("  … {} log lines dropped", run.dropped_logs);
            }
        }
    }
    code
}

/// Bars on an interactive stderr, log lines otherwise (and always with JSON output, whose
/// stdout is for the report).
pub fn progress_for(format: OutputFormat) -> Arc<dyn engine::Progress> {
    if format == OutputFormat::Text && std::io::stderr().is_terminal() {
        Arc::new(Bars::default())
    } else {
        Arc::new(engine::Logged::default())
    }
}

/// The one set of bars of the process: the log writer prints above them.
fn multi_progress() -> &'static MultiProgress {
    static BARS: std::sync::OnceLock<MultiProgress> = std::sync::OnceLock::new();
    BARS.get_or_init(MultiProgress::new)
}

/// The log's writer: each event goes to stderr in one write, with the bars (if any are
/// drawn) taken away and redrawn below it, so they stay at the bottom of the terminal.
pub struct AboveBars;

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for AboveBars {
    type Writer = EventLine;

    fn make_writer(&'a self) -> EventLine {
        EventLine(Vec::new())
    }
}

/// One log event, written out when the formatter is done with it.
pub struct EventLine(Vec<u8>);

impl std::io::Write for EventLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for EventLine {
    fn drop(&mut self) {
        use std::io::Write as _;
        let line = std::mem::take(&mut self.0);
        // A log line that cannot be written has nowhere else to go.
        multi_progress().suspend(|| {
            let _ = std::io::stderr().write_all(&line);
        });
    }
}

/// Colour for people at a terminal only, and not for those who set `NO_COLOR`
/// (no-color.org: present and not empty).
pub fn log_colour() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Per restore: a spinner with its phase and job states, and a byte bar while staging.
struct Bars {
    multi: &'static MultiProgress,
    // No await happens under this lock.
    restores: Mutex<BTreeMap<String, (ProgressBar, Option<ProgressBar>)>>,
}

impl Default for Bars {
    fn default() -> Self {
        Bars {
            multi: multi_progress(),
            restores: Mutex::default(),
        }
    }
}

impl Bars {
    fn with<R>(
        &self,
        restore: &str,
        f: impl FnOnce(&MultiProgress, &mut (ProgressBar, Option<ProgressBar>)) -> R,
    ) -> R {
        let mut restores = self
            .restores
            .lock()
            .expect("progress lock: no panics under it");
        let entry = restores.entry(restore.to_string()).or_insert_with(|| {
            let bar = self.multi.add(ProgressBar::new_spinner());
            bar.set_style(
                ProgressStyle::with_template("{spinner} {prefix} {msg}").expect("static template"),
            );
            bar.set_prefix(restore.to_string());
            bar.enable_steady_tick(Duration::from_millis(120));
            (bar, None)
        });
        f(self.multi, entry)
    }
}

impl engine::Progress for Bars {
    fn phase(&self, restore: &str, phase: RestorePhase) {
        self.with(restore, |_, (bar, bytes)| {
            if phase == RestorePhase::Finished {
                bar.finish_and_clear();
                if let Some(b) = bytes.take() {
                    b.finish_and_clear();
                }
            } else {
                bar.set_message(phase.to_string());
            }
        });
    }

    fn staging(&self, restore: &str, p: StageProgress) {
        self.with(restore, |multi, (_, bytes)| {
            let bar = bytes.get_or_insert_with(|| {
                let b = multi.add(ProgressBar::new(p.bytes_total));
                b.set_style(
                    ProgressStyle::with_template(
                        "  staging {bar:30} {bytes}/{total_bytes} {bytes_per_sec} {msg}",
                    )
                    .expect("static template"),
                );
                b
            });
            bar.set_position(p.bytes_done);
            bar.set_message(format!("{}/{} files", p.files_done, p.files_total));
            if p.files_done == p.files_total {
                bar.finish();
            }
        });
    }

    fn jobs(&self, restore: &str, counts: &JobCounts) {
        self.with(restore, |_, (bar, _)| {
            bar.set_message(format_counts(counts))
        });
    }

    fn waiting(&self, restore: &str, waiting: Option<&Waiting>) {
        if let Some(waiting) = waiting {
            self.with(restore, |_, (bar, _)| bar.set_message(waiting.to_string()));
        }
    }
}
