//! The year-of-service soak (issue 52, DESIGN.md §6), run by hand against milvus-sim:
//!
//! ```sh
//! cargo build --workspace --bins && cargo bench -p e2e --bench soak --profile dev
//! SOAK_TOTAL=200 SOAK_EVERY=50 cargo bench -p e2e --bench soak --profile dev   # a try
//! ```
//!
//! The bench starts the `lockstep` binary of its own profile (`target/debug/lockstep` with
//! `--profile dev`, `target/release/lockstep` with the default bench profile: build that one
//! first). One world: a target replicating to one secondary, a backup of one collection with
//! one partition of a few rows, instant imports. `lockstep serve` runs on it with the job
//! directory watched and the embedded journal in the state directory, without `[retention]`:
//! the history grows to every restore the soak asks for, which is what the listing figures
//! must stay flat against. `SOAK_TOTAL` restores (10,000 unless set), every other one asked
//! for through milvus-backup's REST restore, the others by a job file dropped into the
//! watched directory and removed once its restore ended (as a pipeline that writes job files
//! cleans up after them), each with its own name and collection suffix: a new restore each.
//! At most [`IN_FLIGHT`] are asked for and not yet ended (ended: its report is linked as the
//! job's latest in the state directory, read there so that waiting costs `serve` nothing); a
//! 429 is waited out for its `Retry-After`. Every `SOAK_EVERY` restores (1,000 unless set),
//! `serve` is stopped with SIGTERM and started again.
//!
//! Per thousand (each `SOAK_EVERY`) it prints, read from the real processes at the end of the
//! thousand, before the restart:
//! - wall: from the thousand's first request to its last restore ended, and restores a second;
//! - CPU: `serve`'s CPU time, user and system, over the thousand (from /proc/PID/stat); and
//!   `sim`, this process's, which is milvus-sim's answers and the soak's own asking;
//! - scans: the time `serve`'s journal spent reading records over the thousand, whole or
//!   through its index (the sweeps for open restores, the lookups of a job's attempts, the
//!   audit at start), as its `/metrics` counts it;
//! - RSS: `serve`'s resident set (`VmRSS` in /proc/PID/status);
//! - fds: `serve`'s open file descriptors (entries of /proc/PID/fd);
//! - list: `GET /api/v1/list_restores?limit=50`, and `lockstep status --last 50` (a process of
//!   its own: its start is in the figure), the median of [`TIMINGS`] each;
//! - metrics: `GET /metrics`, the median of [`TIMINGS`];
//!
//! each beside its ratio to the first thousand's, the baseline. It fails, naming them, if any
//! restore did not succeed; `/metrics` must count every restore so far as succeeded, the
//! listings must hold 50, the newest restore of each kind must have put the backup's rows in
//! its collection on both ends, and at the end `lockstep status` must list every restore as
//! succeeded. `SOAK_LOG=FILE` keeps `serve`'s warnings there (they go nowhere otherwise).
//!
//! milvus-sim runs in this process and keeps every collection made. Its ends forget a
//! finished import job after [`RETENTION`] (`SOAK_RETENTION_SECS`), as Milvus does after its
//! `taskRetention`: a restore's preflight lists every job of every end (for the import-job
//! budget), and what that list holds is the ends' recent work, not lockstep's history.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use e2e::{TARGET, World, WorldSpec, answering, cpu_time, etcd::free_port, secondary};
use lockstep::journal::Outcome;
use lockstep::serve::reports;
use serde_json::{Value, json};

/// Restores asked for and not yet ended, at most: beyond `--max-parallel`, so the runner's
/// queue is never empty, and below `max_queued`, so a 429 is the exception it is in service.
const IN_FLIGHT: usize = 8;
const MAX_PARALLEL: &str = "4";
/// How often the reports of the restores in flight are looked for.
const POLL: Duration = Duration::from_millis(200);
/// Each listing and scrape is timed this many times; the median is the figure.
const TIMINGS: usize = 5;
/// The listings' page.
const PAGE: usize = 50;

fn main() -> anyhow::Result<()> {
    let total = count_from_env("SOAK_TOTAL", 10_000)?;
    let every = count_from_env("SOAK_EVERY", 1_000)?;
    let retention = match std::env::var("SOAK_RETENTION_SECS") {
        Ok(text) if text == "all" => None,
        Ok(text) => Some(Duration::from_secs(text.parse().with_context(|| {
            format!("SOAK_RETENTION_SECS={text}: seconds, or `all`")
        })?)),
        Err(_) => Some(RETENTION),
    };
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(soak(total, every, retention))
}

/// How long the ends keep a finished import job (`dataCoord.import.taskRetention`), as a
/// year of service keeps them at the soak's pace. Milvus keeps one 48 h (3.0.2), 0.55 % of
/// a year; 0.55 % of the soak's hour or so is 20 s. So each end holds the jobs of the last
/// fifty-odd restores, as it would after 48 h of 10,000 restores a year, not every job of
/// the soak, which no end running for a year would hold. `SOAK_RETENTION_SECS=all` keeps
/// every job, for what a preflight's list of an end's jobs costs as that list grows.
const RETENTION: Duration = Duration::from_secs(20);

fn count_from_env(var: &str, default: usize) -> anyhow::Result<usize> {
    match std::env::var(var) {
        Ok(text) => text
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .with_context(|| format!("{var}={text}: expected a whole number, at least 1")),
        Err(_) => Ok(default),
    }
}

/// How a restore is asked for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Via {
    Rest,
    JobFile,
}

/// The `i`th restore of the soak: its job name and collection suffix, and how it is asked for.
struct Restore {
    name: String,
    suffix: String,
    via: Via,
}

impl Restore {
    fn nth(i: usize) -> Restore {
        Restore {
            name: format!("soak{i:05}"),
            suffix: format!("_s{i:05}"),
            via: if i.is_multiple_of(2) {
                Via::Rest
            } else {
                Via::JobFile
            },
        }
    }
}

/// One thousand's figures.
struct Figures {
    wall: Duration,
    rss_kib: u64,
    fds: usize,
    /// `serve`'s CPU time, user and system, over the thousand (it started with it).
    cpu: Duration,
    /// This process's CPU time over the thousand: milvus-sim's answers and the soak's own
    /// asking and waiting.
    sim: Duration,
    /// What `serve`'s journal spent scanning over the thousand, by its own `/metrics`.
    scans: Duration,
    list: Duration,
    status: Duration,
    metrics: Duration,
    /// 429s answered to this thousand's requests.
    refused: usize,
}

async fn soak(total: usize, every: usize, retention: Option<Duration>) -> anyhow::Result<()> {
    let mut spec = soak_world();
    // None: the version's own, longer than any soak.
    spec.task_retention = retention;
    let world = World::start(spec).await?;
    let log = std::env::var_os("SOAK_LOG").map(std::path::PathBuf::from);
    let expected_rows = world.rows_after_deletes();
    println!(
        "soak: {total} restores (REST and job files in turn), serve restarted every {every}, \
         1 collection × 1 partition × {expected_rows} rows, target + 1 secondary, instant imports, \
         finished import jobs kept {}",
        retention.map_or("for the soak's whole run".to_owned(), |r| format!(
            "{} s",
            r.as_secs()
        ))
    );
    println!(
        "  {:>6} {:>8} {:>6} {:>7} {:>7} {:>8} {:>14} {:>12} {:>20} {:>20} {:>18} {:>5}",
        "done",
        "wall s",
        "/s",
        "CPU s",
        "sim s",
        "scans s",
        "RSS MB",
        "fds",
        "list_restores ms",
        "status --last ms",
        "/metrics ms",
        "429s"
    );
    let started = Instant::now();
    let mut first: Option<Figures> = None;
    let mut done = 0;
    while done < total {
        let upto = (done + every).min(total);
        let serve = Serve::start(&world, log.as_deref()).await?;
        let began = Instant::now();
        let sim_began = own_cpu()?;
        let refused = drive(&world, &serve, done..upto).await?;
        let wall = began.elapsed();
        let sim = own_cpu()? - sim_began;
        check_rows(&world, upto, expected_rows).await?;
        let figures = Figures {
            wall,
            rss_kib: serve.rss_kib()?,
            fds: serve.fds()?,
            cpu: serve.cpu()?,
            sim,
            scans: serve.scan_seconds().await?,
            list: timed(|| serve.list_restores(upto.min(PAGE))).await?,
            status: timed(|| status_last(&world, upto.min(PAGE))).await?,
            metrics: timed(|| serve.metrics(upto)).await?,
            refused,
        };
        serve.stop().await?;
        print_row(upto, upto - done, &figures, first.as_ref());
        first.get_or_insert(figures);
        done = upto;
    }
    every_restore_succeeded(&world, total).await?;
    println!(
        "  all {total} restores succeeded (lockstep status lists them all); {:.0} s in all",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The smallest restore worth a restore: one collection, one partition, one segment of a few
/// rows, onto a target and one secondary that import at once.
fn soak_world() -> WorldSpec {
    let mut spec = WorldSpec::pair();
    spec.backup.collections = 1;
    spec.backup.partitions = 1;
    spec.backup.segments_per_partition = 1;
    spec.backup.rows_per_segment = 10;
    spec.backup.l0_segments = milvus_sim::fixtures::L0Segments::Absent;
    spec.target_stage = Duration::ZERO;
    spec.secondary_stage = Duration::ZERO;
    spec.stream_lag = Duration::ZERO;
    spec
}

fn print_row(done: usize, count: usize, f: &Figures, first: Option<&Figures>) {
    let ratio = |now: f64, base: fn(&Figures) -> f64| {
        first.map_or("    ".to_owned(), |b| format!("{:>4.2}×", now / base(b)))
    };
    fn ms(d: Duration) -> f64 {
        d.as_secs_f64() * 1000.0
    }
    let wall = f.wall.as_secs_f64();
    let rss = f.rss_kib as f64 / 1024.0;
    println!(
        "  {done:>6} {wall:>8.1} {:>6.1} {:>7.1} {:>7.1} {:>8.1} {rss:>8.1} {} {:>6} {} {:>14.1} {} {:>14.1} {} {:>12.1} {} {:>5}",
        count as f64 / wall,
        f.cpu.as_secs_f64(),
        f.sim.as_secs_f64(),
        f.scans.as_secs_f64(),
        ratio(rss, |b| b.rss_kib as f64 / 1024.0),
        f.fds,
        ratio(f.fds as f64, |b| b.fds as f64),
        ms(f.list),
        ratio(ms(f.list), |b| ms(b.list)),
        ms(f.status),
        ratio(ms(f.status), |b| ms(b.status)),
        ms(f.metrics),
        ratio(ms(f.metrics), |b| ms(b.metrics)),
        f.refused
    );
}

/// This process's CPU time so far.
fn own_cpu() -> anyhow::Result<Duration> {
    let cpu = cpu_time(std::process::id()).context("no CPU times in this process's /proc stat")?;
    Ok(cpu.user + cpu.system)
}

/// `lockstep serve` on the world, watching its `jobs/` directory.
struct Serve {
    child: tokio::process::Child,
    pid: u32,
    base: String,
    http: reqwest::Client,
}

impl Serve {
    async fn start(world: &World, log: Option<&Path>) -> anyhow::Result<Serve> {
        let jobs = world.path("jobs");
        std::fs::create_dir_all(&jobs)?;
        let listen = format!("127.0.0.1:{}", free_port()?);
        let stderr = match log {
            Some(path) => Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .with_context(|| format!("SOAK_LOG {}", path.display()))?,
            ),
            None => Stdio::null(),
        };
        let jobs = jobs.to_str().context("the world's path is UTF-8")?;
        let child = world
            .lockstep(
                &[
                    "serve",
                    "--listen",
                    &listen,
                    "--watch",
                    jobs,
                    "--max-parallel",
                    MAX_PARALLEL,
                ],
                &[("LOCKSTEP_LOG", "warn")],
            )
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .context("starting lockstep serve")?;
        let pid = child.id().context("a running child has a pid")?;
        let base = format!("http://{listen}");
        answering(&base).await?;
        Ok(Serve {
            child,
            pid,
            base,
            http: reqwest::Client::new(),
        })
    }

    /// SIGTERM, as systemd stops it, and its end.
    async fn stop(mut self) -> anyhow::Result<()> {
        let pid = rustix::process::Pid::from_raw(self.pid as i32).context("serve's pid")?;
        rustix::process::kill_process(pid, rustix::process::Signal::TERM)?;
        let status = tokio::time::timeout(Duration::from_secs(60), self.child.wait())
            .await
            .context("serve did not stop within 60 s of SIGTERM")??;
        ensure!(status.success(), "serve stopped with {status} on SIGTERM");
        Ok(())
    }

    async fn get(&self, path_and_query: &str) -> anyhow::Result<reqwest::Response> {
        let url = format!("{}{path_and_query}", self.base);
        Ok(self.http.get(url).send().await?.error_for_status()?)
    }

    /// Asks for `restore` through milvus-backup's REST restore: whether the server took it,
    /// or the wait its 429 asked for.
    async fn post_restore(&self, restore: &Restore) -> anyhow::Result<Option<Duration>> {
        let body = json!({
            "id": restore.name, "backup_name": "bak", "async": true,
            "target": TARGET, "secondaries": [secondary(0)],
            "collection_suffix": restore.suffix,
        });
        let answer = (self.http.post(format!("{}/api/v1/restore", self.base)))
            .json(&body)
            .send()
            .await?;
        if answer.status() == reqwest::StatusCode::TOO_MANY_REQUESTS {
            let wait = (answer.headers().get("retry-after"))
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .context("a 429 without a Retry-After in seconds")?;
            return Ok(Some(Duration::from_secs(wait)));
        }
        let status = answer.status();
        let text = answer.text().await?;
        ensure!(
            status.is_success(),
            "restore {}: {status} {text}",
            restore.name
        );
        Ok(None)
    }

    async fn list_restores(&self, want: usize) -> anyhow::Result<()> {
        let listed: Value = (self
            .get(&format!("/api/v1/list_restores?limit={PAGE}"))
            .await?)
            .json()
            .await?;
        let got = listed["data"].as_array().map_or(0, Vec::len);
        ensure!(
            got == want,
            "list_restores listed {got}, not {want}: {listed}"
        );
        Ok(())
    }

    /// Scrapes `/metrics`: every restore so far counted as succeeded, and the runner holding
    /// none of them.
    async fn metrics(&self, succeeded: usize) -> anyhow::Result<()> {
        let text = self.get("/metrics").await?.text().await?;
        let value = |prefix: &str| {
            (text.lines())
                .find_map(|l| l.strip_prefix(prefix)?.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        let counted = value("lockstep_restores{outcome=\"succeeded\"}");
        ensure!(
            counted == succeeded as u64,
            "/metrics counts {counted} succeeded restores, not {succeeded}"
        );
        for map in ["tasks", "wanted"] {
            let held = value(&format!("lockstep_runner_tracked_jobs{{map=\"{map}\"}}"));
            ensure!(held == 0, "the runner still holds {held} job(s) in {map}");
        }
        Ok(())
    }

    fn rss_kib(&self) -> anyhow::Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid))?;
        (status.lines())
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .context("no VmRSS in serve's /proc status")
    }

    fn cpu(&self) -> anyhow::Result<Duration> {
        let cpu = cpu_time(self.pid).context("no CPU times in serve's /proc stat")?;
        Ok(cpu.user + cpu.system)
    }

    /// `lockstep_journal_seconds_sum` of `op="scan"` and `op="index"`: every read of records
    /// so far, whole (the audit, a lookup's prefix) or through the index (the sweeps, the
    /// newest, the outcome counts).
    async fn scan_seconds(&self) -> anyhow::Result<Duration> {
        let text = self.get("/metrics").await?.text().await?;
        let sum = |op: &str| {
            let line = format!("lockstep_journal_seconds_sum{{op=\"{op}\"}}");
            (text.lines())
                .find_map(|l| l.strip_prefix(&line)?.trim().parse::<f64>().ok())
                .with_context(|| format!("no journal {op} time in /metrics"))
        };
        Ok(Duration::from_secs_f64(sum("scan")? + sum("index")?))
    }

    fn fds(&self) -> anyhow::Result<usize> {
        Ok(std::fs::read_dir(format!("/proc/{}/fd", self.pid))?.count())
    }
}

/// Asks for the restores `range` and waits until each ended, at most [`IN_FLIGHT`] at a time;
/// fails naming every one that did not succeed. Returns the 429s it was answered.
async fn drive(
    world: &World,
    serve: &Serve,
    range: std::ops::Range<usize>,
) -> anyhow::Result<usize> {
    let mut waiting = range.map(Restore::nth).peekable();
    let mut in_flight: Vec<Restore> = Vec::new();
    let mut failed = Vec::new();
    let mut refused = 0;
    loop {
        while in_flight.len() < IN_FLIGHT
            && let Some(next) = waiting.peek()
        {
            match next.via {
                Via::Rest => {
                    if let Some(wait) = serve.post_restore(next).await? {
                        refused += 1;
                        tokio::time::sleep(wait).await;
                        break;
                    }
                }
                Via::JobFile => {
                    world.job(
                        &next.name,
                        &format!("[restore]\nsuffix = \"{}\"\n", next.suffix),
                    )?;
                }
            }
            in_flight.extend(waiting.next());
        }
        if in_flight.is_empty() {
            break;
        }
        tokio::time::sleep(POLL).await;
        let mut still = Vec::with_capacity(in_flight.len());
        for restore in in_flight {
            // The report `serve` links as the job's latest once it ended: read from the
            // state directory, so that waiting costs `serve` nothing.
            match reports::read_latest(&world.path("state/reports"), &restore.name) {
                None => still.push(restore),
                Some(report) => {
                    if restore.via == Via::JobFile {
                        std::fs::remove_file(
                            world.path("jobs").join(format!("{}.toml", restore.name)),
                        )?;
                    }
                    if report.outcome != Outcome::Succeeded {
                        failed.push(format!(
                            "{}: {:?} {}",
                            restore.name, report.outcome, report.summary
                        ));
                    }
                }
            }
        }
        in_flight = still;
    }
    if !failed.is_empty() {
        bail!(
            "{} restore(s) did not succeed:\n{}",
            failed.len(),
            failed.join("\n")
        );
    }
    Ok(refused)
}

/// The newest restore of each kind before `upto` put the backup's rows, and only those, in its
/// collection on every end.
async fn check_rows(world: &World, upto: usize, rows: i64) -> anyhow::Result<()> {
    let newest: Vec<Restore> = (upto.saturating_sub(2)..upto).map(Restore::nth).collect();
    for end in world.ends() {
        let collections = world.collections(&end).await?;
        for restore in &newest {
            let found: BTreeMap<_, _> = (collections.iter())
                .filter(|(name, _)| name.ends_with(&restore.suffix))
                .collect();
            ensure!(
                found.len() == 1 && found.values().all(|r| **r == rows),
                "{}: expected one collection of {rows} rows on {end}, found {found:?}",
                restore.name
            );
        }
    }
    Ok(())
}

/// `lockstep status --last N` lists `want` restores.
async fn status_last(world: &World, want: usize) -> anyhow::Result<()> {
    let listed = status(world, &["--last", &PAGE.to_string()]).await?;
    ensure!(
        listed.len() == want,
        "status --last listed {}, not {want}",
        listed.len()
    );
    Ok(())
}

/// At the end: `lockstep status` lists `total` restores, every one succeeded.
async fn every_restore_succeeded(world: &World, total: usize) -> anyhow::Result<()> {
    let listed = status(world, &[]).await?;
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    for record in &listed {
        *outcomes.entry(record["outcome"].to_string()).or_default() += 1;
    }
    let succeeded = outcomes.get("\"succeeded\"").copied().unwrap_or(0);
    ensure!(
        listed.len() == total && succeeded == total,
        "lockstep status lists {} restores, by outcome {outcomes:?}; expected {total} succeeded",
        listed.len()
    );
    Ok(())
}

/// `lockstep status ARGS` on the world's state directory: the records it lists.
async fn status(world: &World, args: &[&str]) -> anyhow::Result<Vec<Value>> {
    let args: Vec<&str> = std::iter::once("status")
        .chain(args.iter().copied())
        .collect();
    let out = world
        .lockstep(&args, &[("LOCKSTEP_LOG", "warn")])
        .output()
        .await?;
    ensure!(
        out.status.success(),
        "lockstep status: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    match serde_json::from_slice(&out.stdout)? {
        Value::Array(records) => Ok(records),
        other => bail!("lockstep status printed no list: {other}"),
    }
}

/// The median of [`TIMINGS`] runs of `op`, each of which must succeed.
async fn timed<F, Fut>(mut op: F) -> anyhow::Result<Duration>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let mut times = Vec::with_capacity(TIMINGS);
    for _ in 0..TIMINGS {
        let started = Instant::now();
        op().await?;
        times.push(started.elapsed());
    }
    times.sort();
    Ok(times[TIMINGS / 2])
}
