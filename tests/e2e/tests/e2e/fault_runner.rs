//! The fault runner's own tests: its checker catches each bug the engine plants under
//! `LOCKSTEP_PLANT` (fault-injection builds only), a clean seed passes, and a seed always
//! draws the same scenario.

use e2e::faults::checker::{self, Ending, Evidence, ProcessRun, Violation};
use e2e::faults::runner::{RunnerConfig, SeedRun, run_seed};
use e2e::faults::schedule::{Atomicity, Fault, JournalKind, Pause, Scenario, Timed};
use e2e::{EndRules, StorageLayout, TARGET, World, WorldSpec, secondary};
use lockstep::engine::faults::Bug;
use lockstep::journal::embedded::FileJournal;
use lockstep::journal::{Decision, Journal as _};
use milvus_sim::fixtures::L0Segments;
use milvus_sim::jobs::JobState;

/// Seed 7's world and job, pinned to what a planted bug needs: two secondaries on their own
/// storage, three collections committed together, the embedded journal, no check, no crash,
/// and `schedule` as the only faults.
fn pinned(schedule: Vec<Timed>) -> Scenario {
    let mut s = Scenario::draw(7, false);
    s.secondaries = 2;
    s.storage = StorageLayout::Separate;
    s.backup.collections = 3;
    s.atomicity = Atomicity::Restore;
    s.mirror_grace_ms = 3_000;
    s.check = None;
    s.journal = JournalKind::Embedded;
    s.crash_at = None;
    s.pause_at = None;
    s.schedule = schedule;
    s
}

/// [`pinned`] on the etcd journal, with the first host pausing itself in `Holding` and
/// waking once the host that took its job over has finished.
fn stale_in_holding(kill_takeover_after_ms: Option<u64>) -> Scenario {
    let mut s = pinned(vec![]);
    s.journal = JournalKind::Etcd;
    s.pause_at = Some((
        "holding",
        Pause {
            wake_after_ms: None,
            kill_takeover_after_ms,
        },
    ));
    s
}

/// Whether this machine has the etcd the fleet scenarios run; under `CI=true` it must.
fn etcd_here() -> bool {
    let here = e2e::etcd::binary().is_some();
    assert!(
        here || std::env::var("CI").as_deref() != Ok("true"),
        "CI=true, but there is no etcd binary on PATH"
    );
    if !here {
        println!("SKIPPED: no etcd binary on PATH");
    }
    here
}

async fn run_with(plant: &[Bug], scenario: &Scenario) -> anyhow::Result<SeedRun> {
    run_seed(scenario, &RunnerConfig::from_env(plant.to_vec())).await
}

/// Asserts that the run broke no invariant, showing everything if it did.
fn assert_clean(run: &SeedRun, scenario: &Scenario) {
    assert!(
        run.violations.is_empty(),
        "{:#?}\n{scenario}\n{}",
        run.violations,
        run.trace
    );
}

/// Asserts that the run reported a violation `wanted` accepts, showing everything if not.
fn assert_caught(run: &SeedRun, scenario: &Scenario, wanted: fn(&Violation) -> bool) {
    let found: Vec<String> = run.violations.iter().map(Violation::to_string).collect();
    assert!(
        run.violations.iter().any(wanted),
        "the checker missed the planted bug; it found {found:#?}\n{scenario}\n{}",
        run.trace
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn catches_a_commit_sent_before_a_mirror_is_uncommitted() -> anyhow::Result<()> {
    // The stream to s1 lags well behind: a host that does not hold commits before s1 has
    // even created its mirrors.
    let scenario = pinned(vec![Timed {
        at_ms: 0,
        fault: Fault::StreamLag {
            to: secondary(0),
            lag_ms: 1_500,
        },
    }]);
    let run = run_with(&[Bug::CommitEarly], &scenario).await?;
    assert_caught(
        &run,
        &scenario,
        |v| matches!(v, Violation::CommitBeforeUncommitted { end, .. } if *end == secondary(0)),
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn catches_an_abort_skipped_after_a_failure_before_the_decision() -> anyhow::Result<()> {
    // s2's first mirror fails while importing: the restore must abort every job it holds.
    let scenario = pinned(vec![Timed {
        at_ms: 0,
        fault: Fault::JobFails {
            end: secondary(1),
            nth: 1,
            state: JobState::Importing,
        },
    }]);
    let run = run_with(&[Bug::SkipAbort], &scenario).await?;
    assert_caught(&run, &scenario, |v| {
        matches!(v, Violation::AbortSkipped { .. })
    });
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn catches_a_commit_without_a_written_decision() -> anyhow::Result<()> {
    let scenario = pinned(vec![]);
    let run = run_with(&[Bug::NoDecision], &scenario).await?;
    assert_caught(&run, &scenario, |v| {
        matches!(v, Violation::CommitWithoutDecision { .. })
    });
    Ok(())
}

/// s1's first mirror imports 3 rows fewer than its files hold and completes all the same.
fn short_mirror() -> Vec<Timed> {
    vec![Timed {
        at_ms: 0,
        fault: Fault::ShortImport {
            end: secondary(0),
            nth: 1,
            rows: 3,
        },
    }]
}

#[tokio::test(flavor = "multi_thread")]
async fn catches_a_commit_of_a_job_a_mirror_imported_short() -> anyhow::Result<()> {
    let scenario = pinned(short_mirror());
    let run = run_with(&[Bug::SkipRows], &scenario).await?;
    assert_caught(
        &run,
        &scenario,
        |v| matches!(v, Violation::RowsWrong { end, .. } if *end == secondary(0)),
    );
    Ok(())
}

/// A mirror that keeps a row its deletes remove: its imported rows are right, and only what
/// the end shows differs. A restore that does not ask a query succeeds; the checker holds
/// every end to the backup's live rows and finds it.
#[tokio::test(flavor = "multi_thread")]
async fn catches_a_mirror_that_shows_a_row_a_delete_removed() -> anyhow::Result<()> {
    let scenario = lost_delete();
    let run = run_with(&[Bug::SkipVerify], &scenario).await?;
    assert_caught(&run, &scenario, |v| {
        matches!(v, Violation::DataMismatch { end, detail, .. }
            if *end == secondary(0) && detail.contains("rows live"))
    });
    Ok(())
}

fn lost_delete() -> Scenario {
    pinned(vec![Timed {
        at_ms: 0,
        fault: Fault::LostDelete { end: secondary(0) },
    }])
}

/// A mirror that shows one row with a value changed: every count is right. A restore that
/// does not compare its sample succeeds; the checker asks the end what it changed and finds
/// the report silent.
#[tokio::test(flavor = "multi_thread")]
async fn catches_a_mirror_that_shows_a_changed_value() -> anyhow::Result<()> {
    let scenario = changed_row();
    let run = run_with(&[Bug::SkipVerify], &scenario).await?;
    assert_caught(&run, &scenario, |v| {
        matches!(v, Violation::DataMismatch { end, detail, .. }
            if *end == secondary(0) && detail.contains("value changed"))
    });
    Ok(())
}

fn changed_row() -> Scenario {
    pinned(vec![Timed {
        at_ms: 0,
        fault: Fault::ChangedRow { end: secondary(0) },
    }])
}

/// Issue 49: every end imports L0 segments, and loses a held L0 import's deletes, as 3.0
/// does once L0 import is on (milvus#51247). A restore that imports them as held L0 jobs
/// rather than folding them imports the backup's L0 logs, not the folded delta logs, and
/// leaves the deleted rows visible: the checker holds every end's imported logs to what a
/// two-phase restore imports.
#[tokio::test(flavor = "multi_thread")]
async fn catches_held_l0_jobs_where_every_end_imports_l0() -> anyhow::Result<()> {
    let scenario = l0_import_everywhere();
    let run = run_with(&[Bug::HeldL0Jobs], &scenario).await?;
    assert_caught(&run, &scenario, |v| {
        matches!(v, Violation::DataMismatch { detail, .. }
            if detail.contains("imported logs differ"))
    });
    Ok(())
}

/// [`pinned`] with L0 segments in the backup and L0 import switched on at every end.
fn l0_import_everywhere() -> Scenario {
    let ends = [TARGET.to_owned(), secondary(0), secondary(1)];
    let mut s = pinned(
        ends.map(|end| Timed {
            at_ms: 0,
            fault: Fault::L0ImportOn { end },
        })
        .into(),
    );
    s.backup.l0 = L0Segments::Present;
    s
}

#[tokio::test(flavor = "multi_thread")]
async fn the_same_scenario_without_a_planted_bug_passes() -> anyhow::Result<()> {
    // Each planted-bug scenario, run by a correct engine: the violations above come from
    // the bug, not from the scenario.
    for scenario in [
        vec![Timed {
            at_ms: 0,
            fault: Fault::StreamLag {
                to: secondary(0),
                lag_ms: 1_500,
            },
        }],
        vec![Timed {
            at_ms: 0,
            fault: Fault::JobFails {
                end: secondary(1),
                nth: 1,
                state: JobState::Importing,
            },
        }],
        short_mirror(),
        lost_delete().schedule,
        changed_row().schedule,
    ]
    .map(pinned)
    .into_iter()
    .chain([l0_import_everywhere()])
    {
        let run = run_with(&[], &scenario).await?;
        assert_clean(&run, &scenario);
    }
    Ok(())
}

/// Issue 26: a host paused in `Holding` wakes after another host re-ran its job and
/// committed. With its fence checks passing whatever (the window no check closes) and its
/// rollback dropping by name, it drops the collections attempt 2 committed.
#[tokio::test(flavor = "multi_thread")]
async fn catches_a_stale_host_dropping_the_restore_that_replaced_it() -> anyhow::Result<()> {
    if !etcd_here() {
        return Ok(());
    }
    let scenario = stale_in_holding(None);
    let run = run_with(&[Bug::Unfenced, Bug::DropByName], &scenario).await?;
    assert_caught(&run, &scenario, |v| {
        matches!(v, Violation::CommittedGone { .. })
    });
    Ok(())
}

/// The same stale host, unfenced but dropping only by identity, leaves attempt 2 alone; a
/// correct engine passes it too, and so does a takeover killed halfway.
#[tokio::test(flavor = "multi_thread")]
async fn a_stale_host_that_drops_by_identity_passes() -> anyhow::Result<()> {
    if !etcd_here() {
        return Ok(());
    }
    for (plant, kill_takeover) in [
        (&[Bug::Unfenced][..], None),
        (&[][..], None),
        (&[][..], Some(300)),
    ] {
        let scenario = stale_in_holding(kill_takeover);
        let run = run_with(plant, &scenario).await?;
        assert!(
            run.violations.is_empty(),
            "planted {plant:?}: {:#?}\n{scenario}\n{}",
            run.violations,
            run.trace
        );
        assert_eq!(
            run.outcome,
            Some(lockstep::journal::Outcome::Succeeded),
            "the takeover re-ran the job\n{scenario}\n{}",
            run.trace
        );
    }
    Ok(())
}

/// Issue 49's faults, pinned: the last create's answer lost into a job budget the restore
/// fills, and another client's schema DDL on a held collection. The retry meets the full
/// budget and the DDL is refused while held; the restore commits all the same.
#[tokio::test(flavor = "multi_thread")]
async fn a_lost_create_answer_into_a_full_budget_and_schema_ddl_on_a_held_collection_pass()
-> anyhow::Result<()> {
    let scenario = pinned(vec![
        Timed {
            at_ms: 0,
            fault: Fault::LostCreateAnswer { from_last: 0 },
        },
        Timed {
            at_ms: 0,
            fault: Fault::SchemaDdl { collection: 1 },
        },
    ]);
    let run = run_with(&[], &scenario).await?;
    assert_clean(&run, &scenario);
    let met = |kind: &str| run.injected.get(kind).copied().unwrap_or(0) == 1;
    assert!(
        met("lost-answer-retry-refused") && met("schema-ddl-refused-112"),
        "the faults did not meet what they are for: {:?}\n{}",
        run.injected,
        run.trace
    );
    assert_eq!(run.outcome, Some(lockstep::journal::Outcome::Succeeded));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_drawn_seed_passes() -> anyhow::Result<()> {
    let etcd = e2e::etcd::binary().is_some();
    let scenario = Scenario::draw(1, etcd);
    let run = run_with(&[], &scenario).await?;
    assert_clean(&run, &scenario);
    assert!(
        run.outcome.is_some(),
        "no report\n{scenario}\n{}",
        run.trace
    );
    Ok(())
}

#[test]
fn a_seed_always_draws_the_same_scenario() {
    for etcd in [false, true] {
        let first: Vec<Scenario> = (0..200).map(|seed| Scenario::draw(seed, etcd)).collect();
        let again: Vec<Scenario> = (0..200).map(|seed| Scenario::draw(seed, etcd)).collect();
        assert_eq!(first, again);
        // And seeds differ: at least most neighbours draw different scenarios.
        let distinct = first
            .windows(2)
            .filter(|w| (&w[0].schedule, w[0].backup) != (&w[1].schedule, w[1].backup))
            .count();
        assert!(distinct > 190, "only {distinct} of 199 neighbours differ");
    }
}

#[test]
fn without_etcd_no_scenario_uses_it() {
    for seed in 0..500 {
        let s = Scenario::draw(seed, false);
        assert_eq!(s.journal, JournalKind::Embedded, "seed {seed}");
        assert!(
            !s.schedule
                .iter()
                .any(|t| t.fault == Fault::RaceHost || t.fault.is_fleet()),
            "seed {seed}"
        );
        assert_eq!(s.pause_at, None, "seed {seed}");
    }
}

#[test]
fn every_fleet_seed_has_a_stale_or_lost_host_or_an_etcd_restart() {
    for seed in 0..500 {
        let s = Scenario::draw_fleet(seed);
        assert_eq!(s.journal, JournalKind::Etcd, "seed {seed}");
        assert!(
            s.pause_at.is_some() || s.schedule.iter().any(|t| t.fault.is_fleet()),
            "seed {seed}: {s}"
        );
    }
}

/// Found by the fault runner (seeds 29, 41, 47 and 53 of the CI set): with
/// `atomicity = "collection"`, a collection failing after others were committed made the
/// whole restore report `rolled_back` (exit 1, "nothing visible") while the committed
/// collections were visible on every end.
#[tokio::test(flavor = "multi_thread")]
async fn a_collection_failing_after_others_committed_is_not_reported_as_rolled_back()
-> anyhow::Result<()> {
    // 3 collections of 4 jobs on a budget of 5: committed one collection at a time, so
    // the first two are committed when the last job fails.
    let world = World::start(WorldSpec {
        max_import_job_num: 5,
        ..WorldSpec::with_collections(3)
    })
    .await?;
    let job = world.job("waves", "[two_phase]\natomicity = \"collection\"\n")?;
    world
        .fail_last_job_at_uncommitted(&job, "segment corrupt")
        .await?;
    let job = job.to_str().expect("a UTF-8 temp path");
    let run = world.run(&["run", job], &[]).await?;
    let records = FileJournal::open(&world.path("state"))?
        .list()
        .await?
        .whole()?;
    let committed = records
        .iter()
        .flat_map(|r| &r.groups)
        .filter(|g| matches!(g.decision, Some(Decision::Commit { .. })))
        .count();
    assert!(
        committed > 0,
        "no collection was committed before the failure: the test proved nothing\n{}",
        run.explain()
    );
    let violations = checked(&world, &run).await?;
    assert!(
        violations.is_empty(),
        "{}\n{}",
        violations
            .iter()
            .map(Violation::to_string)
            .collect::<Vec<_>>()
            .join("\n"),
        run.explain()
    );
    Ok(())
}

/// What the checker finds of `world` after the one run `run`.
async fn checked(world: &World, run: &e2e::RunResult) -> anyhow::Result<Vec<Violation>> {
    let records = FileJournal::open(&world.path("state"))?
        .list()
        .await?
        .whole()?;
    let ends = world.snapshots().await?;
    Ok(checker::check(&Evidence {
        ends: &ends,
        records: &records,
        processes: &[ProcessRun {
            name: "run#1".into(),
            ending: Ending::Finished,
            code: run.code,
            report: serde_json::from_value(run.report.clone()).ok(),
        }],
        backup: &world.backup,
        l0: world.l0_logs(),
        misbehaving_check: false,
        resubmission: None,
    }))
}

/// Issue 49: a host that does not hold the ends' clocks to the backup's newest row commits
/// below it onto a target whose clock runs days behind: the commit fence stops the
/// collection's channels and the jobs stay Committing (the job's short completion timeout
/// ends the run). The checker names the stale commit. A correct host refuses the same
/// restore, and the checker finds nothing written.
#[tokio::test(flavor = "multi_thread")]
async fn catches_a_commit_stamped_below_the_backups_rows() -> anyhow::Result<()> {
    let job_tables = "[two_phase]\ncompletion_timeout = \"10s\"\n";
    for plant in [Some(Bug::SkipClock), None] {
        let mut spec = WorldSpec::default();
        (spec.end_rules).insert(TARGET.into(), EndRules::clock_before_generated_backups());
        let world = World::start(spec).await?;
        let job = world.job("stale", job_tables)?;
        let env: Vec<(&str, &str)> = plant.iter().map(|b| ("LOCKSTEP_PLANT", b.name())).collect();
        let run = world
            .run(&["run", job.to_str().expect("a UTF-8 path")], &env)
            .await?;
        let violations = checked(&world, &run).await?;
        let stale = (violations.iter()).any(|v| matches!(v, Violation::StaleCommit { .. }));
        match plant {
            Some(_) => assert!(
                stale,
                "the checker missed the stale commit: {violations:#?}\n{}",
                run.explain()
            ),
            None => {
                assert_eq!(run.code, 2, "{}", run.explain());
                assert!(violations.is_empty(), "{violations:#?}\n{}", run.explain());
            }
        }
    }
    Ok(())
}
