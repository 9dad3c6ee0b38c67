//! What one seed draws: the world (topology, storage, backup), the job (atomicity, grace, a
//! check), the journal, and a schedule of timed faults. A scenario is plain data, so it
//! prints and replays: the same seed (and the same environment: etcd present or not) always
//! draws the same scenario.

use std::fmt;
use std::time::Duration;

use milvus_sim::faults::{ApiEffect, ApiFace};
use milvus_sim::fixtures::rng::SplitMix64;
use milvus_sim::fixtures::{BackupSpec, L0Segments, SchemaMix};
use milvus_sim::jobs::JobState;

use crate::{EndRules, L0Import, StorageLayout, TARGET, WorldSpec, secondary};

/// When in the run the schedule's faults fall: from the first process start to this.
const WINDOW_MS: u64 = 4_000;

/// One seed's whole run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scenario {
    pub seed: u64,
    pub secondaries: usize,
    pub storage: StorageLayout,
    pub backup: BackupShape,
    pub atomicity: Atomicity,
    /// The job's `mirror_grace`: how long a mirror may trail the target.
    pub mirror_grace_ms: u64,
    pub check: Option<CheckSetup>,
    pub journal: JournalKind,
    /// How many members the etcd journal's cluster has: 1, or 3 as Milvus runs it.
    pub etcd_members: usize,
    /// `LOCKSTEP_CRASH_AT` for the first process.
    pub crash_at: Option<&'static str>,
    /// `LOCKSTEP_PAUSE_AT` for the first process (etcd only): it stops itself at that point,
    /// and the runner goes on as for [`Fault::PauseHost`].
    pub pause_at: Option<(&'static str, Pause)>,
    /// How a killed or crashed host is brought back.
    pub resume: Resume,
    /// Timed faults, in time order.
    pub schedule: Vec<Timed>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackupShape {
    pub collections: u32,
    pub partitions: u32,
    pub segments_per_partition: u32,
    pub l0: L0Segments,
    pub schema: SchemaMix,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Atomicity {
    Restore,
    Collection,
}

impl Atomicity {
    pub fn name(self) -> &'static str {
        match self {
            Atomicity::Restore => "restore",
            Atomicity::Collection => "collection",
        }
    }
}

/// A `test-guest` check in the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckSetup {
    pub behaviour: CheckBehaviour,
    pub phase: CheckPhase,
}

/// What the check does: pass, or break one of its bounds (invariant 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckBehaviour {
    Pass,
    Trap,
    LoopForever,
    Allocate,
}

impl CheckBehaviour {
    /// The `behaviour` config test-guest reads.
    pub fn config(self) -> &'static str {
        match self {
            CheckBehaviour::Pass => "pass",
            CheckBehaviour::Trap => "trap",
            CheckBehaviour::LoopForever => "loop-forever",
            CheckBehaviour::Allocate => "allocate",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckPhase {
    BeforeImport,
    BeforeCommit,
}

impl CheckPhase {
    pub fn name(self) -> &'static str {
        match self {
            CheckPhase::BeforeImport => "before-import",
            CheckPhase::BeforeCommit => "before-commit",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalKind {
    /// JSON files in the world's state directory.
    Embedded,
    /// The etcd at `LOCKSTEP_TEST_ETCD`, under a prefix of its own.
    Etcd,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// `lockstep recover`.
    Recover,
    /// `lockstep run FILE` again.
    RunAgain,
}

/// A fault at `at_ms` after the first lockstep process starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timed {
    pub at_ms: u64,
    pub fault: Fault,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// The target's stream to secondary `to` lags by `lag_ms` from now on.
    StreamLag { to: String, lag_ms: u64 },
    /// The stream to `to` stops for `for_ms`, then flows again.
    StreamPause { to: String, for_ms: u64 },
    /// The `nth` job created on `end` from now fails on reaching `state`.
    JobFails {
        end: String,
        nth: u32,
        state: JobState,
    },
    /// `end`'s API answers 503 / Unavailable, or late, for `for_ms`.
    Api {
        end: String,
        face: ApiFace,
        effect: ApiEffect,
        for_ms: u64,
    },
    /// The `nth` job created on `end` from now imports `rows` fewer rows than its files
    /// hold and completes all the same, as a Milvus 2.3 does with a prefix it lists empty.
    ShortImport { end: String, nth: u32, rows: i64 },
    /// The next import on `end` whose own deletes remove a row keeps one, and reports the
    /// rows it should have: row accounting cannot see it, a query can. Drawn where the
    /// restore's own run verifies what it committed (its job rebuilds the indexes a load
    /// needs) and no host fault hands the commit to a recovery, which does not verify.
    LostDelete { end: String },
    /// The next import on `end` shows one of its rows with a value changed, and reports the
    /// rows it should have: no count can see it, a sample can. The job then compares a
    /// sample that takes every key.
    ChangedRow { end: String },
    /// Staged files vanish from secondary `end`'s storage.
    DeleteStaged { end: String },
    /// `end` goes down for `down_ms`.
    Restart { end: String, down_ms: u64 },
    /// `end` imports L0 segments (`dataCoord.import.enableL0Import` on), and the host
    /// config says so (`l0_import = true`): a world setting, in place before the first
    /// process starts. Its held L0 imports lose their deletes there, as on 3.0
    /// (milvus#51247), so a restore that imported the L0 segments as L0 jobs rather than
    /// folding them would show the deleted rows once every end has it.
    L0ImportOn { end: String },
    /// SIGKILL of the running lockstep process, which is then resumed.
    KillHost,
    /// A second host runs the same job on the same etcd journal.
    RaceHost,
    /// SIGSTOP of the running lockstep process past its lease (etcd only): another host
    /// takes the job over, and the paused one wakes later.
    PauseHost(Pause),
    /// The seed's etcd (every member of it) is killed and starts again `down_ms` later,
    /// its data kept.
    EtcdRestart { down_ms: u64 },
    /// One member of a 3-member etcd is killed and starts again `down_ms` later; the others
    /// keep a quorum. Member 0 is the one every host asks first.
    MemberDown { member: usize, down_ms: u64 },
    /// The etcd leader hands leadership to another member.
    LeaderMoves,
    /// The running lockstep process is cut off from every etcd member, as by a network
    /// partition, while it still reaches Milvus: another host takes the job over once its
    /// lease is gone, and the partition heals as a pause's host wakes.
    PartitionHost(Pause),
    /// Every end's job budget holds exactly the restore's jobs, and the answer to the create
    /// of the job `from_last` before the restore's last is lost after the job was made: a
    /// retry meets the budget full, the lost job in it (milvus#53228 admits before it looks
    /// the key up).
    LostCreateAnswer { from_last: u32 },
    /// Another client sends schema DDL (AlterCollection) to the target for the backup's
    /// `collection`-th collection once one of its jobs is held; every end refuses schema DDL
    /// while an import is unfinished (milvus#53071), so it is refused with 112 and the
    /// restore goes on as if it had not been sent.
    SchemaDdl { collection: u32 },
    /// `end`'s clock runs `behind_ms` behind the backup's newest row from the start: a
    /// commit it stamps before then is one the commit fence rejects (milvus#51589). Set up
    /// with the world, so its time is always 0.
    ClockBehind { end: String, behind_ms: u64 },
}

/// What follows a paused host: the takeover, maybe killed, and the wake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pause {
    /// When the paused host wakes, after its pause; `None`: once the main line (the
    /// takeover and any resume after it) has finished, so after the new attempt's commit.
    pub wake_after_ms: Option<u64>,
    /// SIGKILL of the host taking over, this long after it started: a host killed during a
    /// takeover.
    pub kill_takeover_after_ms: Option<u64>,
}

impl Fault {
    /// A fault of the fleet: a stale host, or the journal going away.
    pub fn is_fleet(&self) -> bool {
        matches!(
            self,
            Fault::PauseHost(_)
                | Fault::EtcdRestart { .. }
                | Fault::MemberDown { .. }
                | Fault::LeaderMoves
                | Fault::PartitionHost(_)
        )
    }

    /// The kind, for the runner's counts.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::StreamLag { .. } => "stream-lag",
            Fault::StreamPause { .. } => "stream-pause",
            Fault::JobFails { end, .. } if end == TARGET => "target-job-fails",
            Fault::JobFails { .. } => "mirror-job-fails",
            Fault::Api {
                effect: ApiEffect::Unavailable,
                ..
            } => "api-unavailable",
            Fault::Api { .. } => "api-slow",
            Fault::ShortImport { .. } => "short-import",
            Fault::LostDelete { .. } => "lost-delete",
            Fault::ChangedRow { .. } => "changed-row",
            Fault::DeleteStaged { .. } => "staged-files-deleted",
            Fault::Restart { .. } => "cluster-restart",
            Fault::L0ImportOn { .. } => "l0-import-on",
            Fault::KillHost => "host-sigkill",
            Fault::RaceHost => "second-host-race",
            Fault::PauseHost(_) => "host-paused",
            Fault::EtcdRestart { .. } => "etcd-restart",
            Fault::MemberDown { .. } => "etcd-member-down",
            Fault::LeaderMoves => "etcd-leader-moves",
            Fault::PartitionHost(_) => "host-partitioned",
            Fault::LostCreateAnswer { .. } => "lost-create-answer-full-budget",
            Fault::SchemaDdl { .. } => "schema-ddl-while-held",
            Fault::ClockBehind { .. } => "clock-behind",
        }
    }
}

/// Draws from the seed's generator; every draw goes through here, so the order of draws is
/// the only thing a scenario depends on.
struct Draw(SplitMix64);

impl Draw {
    /// A value in `lo..=hi`.
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.0.below(hi - lo + 1)
    }

    fn chance(&mut self, in_: u64) -> bool {
        self.0.below(in_) == 0
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.0.below(items.len() as u64) as usize]
    }

    /// A pause's wake and takeover kill. The lease is 2 s: a wake from 2.5 s on comes after
    /// the takeover started; later ones fall in its phases or after it ended.
    fn pause(&mut self) -> Pause {
        Pause {
            wake_after_ms: (!self.chance(3)).then(|| self.between(2_500, 12_000)),
            kill_takeover_after_ms: self.chance(4).then(|| self.between(0, 3_000)),
        }
    }
}

impl Scenario {
    /// The scenario of `seed`. Without etcd the journal is embedded and no second host races,
    /// pauses or loses its etcd.
    pub fn draw(seed: u64, etcd_available: bool) -> Scenario {
        Scenario::draw_in(seed, etcd_available, false)
    }

    /// A fleet scenario: the etcd journal, and at least one stale or lost host (a pause, a
    /// host killed during a takeover) or an etcd restart. Other seeds than [`Scenario::draw`]'s
    /// (the fleet's are drawn from a generator of their own), so both ranges can grow.
    pub fn draw_fleet(seed: u64) -> Scenario {
        Scenario::draw_in(seed, true, true)
    }

    fn draw_in(seed: u64, etcd_available: bool, fleet: bool) -> Scenario {
        // Spread neighbouring seeds apart before the first draw.
        let mut d = Draw(SplitMix64::new(
            seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ if fleet { 0xF1EE7 } else { 0x5EED },
        ));
        let secondaries = d.between(0, 3) as usize;
        let storage = if secondaries > 0 && d.chance(3) {
            StorageLayout::Shared
        } else {
            StorageLayout::Separate
        };
        let backup = BackupShape {
            collections: d.between(1, 20) as u32,
            partitions: d.between(1, 3) as u32,
            segments_per_partition: d.between(1, 2) as u32,
            l0: d.pick(&[L0Segments::Present, L0Segments::Absent]),
            schema: d.pick(&[SchemaMix::Plain, SchemaMix::Varied]),
        };
        let atomicity = d.pick(&[Atomicity::Restore, Atomicity::Collection]);
        let mirror_grace_ms = d.between(1_000, 3_000);
        let check = d.chance(4).then(|| CheckSetup {
            behaviour: d.pick(&[
                CheckBehaviour::Pass,
                CheckBehaviour::Trap,
                CheckBehaviour::LoopForever,
                CheckBehaviour::Allocate,
            ]),
            phase: d.pick(&[CheckPhase::BeforeImport, CheckPhase::BeforeCommit]),
        });
        let journal = if fleet || (d.chance(3) && etcd_available) {
            JournalKind::Etcd
        } else {
            JournalKind::Embedded
        };
        let crash_at = d
            .chance(6)
            .then(|| d.pick(lockstep::engine::faults::POINTS));
        let resume = d.pick(&[Resume::Recover, Resume::RunAgain]);
        let etcd = journal == JournalKind::Etcd;
        // A host stops itself at a crash point, or between a fence check that passed and
        // the drop it allows (DESIGN.md §2.1: the drop must not leave once it wakes).
        let points: Vec<&'static str> = (lockstep::engine::faults::POINTS.iter().copied())
            .chain(["drop-checked"])
            .collect();
        let pause_at = (etcd && crash_at.is_none() && d.chance(if fleet { 2 } else { 6 }))
            .then(|| (d.pick(&points), d.pause()));

        let ends: Vec<String> = std::iter::once(TARGET.to_string())
            .chain((0..secondaries).map(secondary))
            .collect();
        // Jobs a restore creates: about one per partition, more with several segments.
        let jobs = u64::from(backup.collections * backup.partitions);
        let faults = d.between(0, 4);
        let mut schedule = Vec::new();
        for _ in 0..faults {
            let at_ms = d.between(0, WINDOW_MS);
            let kind = d.between(0, if etcd { 11 } else { 9 });
            let fault = match kind {
                0 | 1 if secondaries > 0 => {
                    let to = secondary(d.between(0, secondaries as u64 - 1) as usize);
                    if kind == 0 {
                        // Shorter or longer than the grace.
                        let lag_ms = if d.chance(2) {
                            d.between(50, mirror_grace_ms / 2)
                        } else {
                            d.between(mirror_grace_ms + 200, mirror_grace_ms + 2_500)
                        };
                        Fault::StreamLag { to, lag_ms }
                    } else {
                        let for_ms = d.between(100, mirror_grace_ms * 2);
                        Fault::StreamPause { to, for_ms }
                    }
                }
                2 | 3 => {
                    let end = ends[d.between(0, ends.len() as u64 - 1) as usize].clone();
                    // A target job fails before it is ready (after that only a commit moves
                    // it, and a commit cannot fail in Milvus); a mirror fails at any state.
                    let state = if end == TARGET {
                        d.pick(&[JobState::Importing, JobState::Uncommitted])
                    } else {
                        d.pick(&[
                            JobState::Importing,
                            JobState::Uncommitted,
                            JobState::Committing,
                        ])
                    };
                    let nth = d.between(1, jobs.max(1)) as u32;
                    Fault::JobFails { end, nth, state }
                }
                4 | 5 => {
                    let end = ends[d.between(0, ends.len() as u64 - 1) as usize].clone();
                    let face = d.pick(&[ApiFace::Rest, ApiFace::Grpc, ApiFace::Both]);
                    let effect = if d.chance(2) {
                        ApiEffect::Unavailable
                    } else {
                        ApiEffect::Delay {
                            delay_ms: d.between(50, 1_500),
                        }
                    };
                    let for_ms = d.between(100, 3_000);
                    Fault::Api {
                        end,
                        face,
                        effect,
                        for_ms,
                    }
                }
                6 if secondaries > 0 => Fault::DeleteStaged {
                    end: secondary(d.between(0, secondaries as u64 - 1) as usize),
                },
                7 => Fault::Restart {
                    end: ends[d.between(0, ends.len() as u64 - 1) as usize].clone(),
                    down_ms: d.between(100, 2_000),
                },
                8 => Fault::ShortImport {
                    end: ends[d.between(0, ends.len() as u64 - 1) as usize].clone(),
                    nth: d.between(1, jobs.max(1)) as u32,
                    rows: d.between(1, 5) as i64,
                },
                9 if etcd => Fault::RaceHost,
                10 => Fault::PauseHost(d.pause()),
                11 => Fault::EtcdRestart {
                    down_ms: d.between(200, 4_000),
                },
                _ => Fault::KillHost,
            };
            schedule.push(Timed { at_ms, fault });
        }
        if fleet && pause_at.is_none() && !schedule.iter().any(|t| t.fault.is_fleet()) {
            let at_ms = d.between(0, WINDOW_MS);
            let fault = if d.chance(3) {
                Fault::EtcdRestart {
                    down_ms: d.between(200, 4_000),
                }
            } else {
                Fault::PauseHost(d.pause())
            };
            schedule.push(Timed { at_ms, fault });
        }
        // Drawn last, so that every earlier draw of a seed stays what it was. A restore a
        // recovery or another host finishes is verified there too, so any seed may draw it.
        if d.chance(5) {
            let end = ends[d.between(0, ends.len() as u64 - 1) as usize].clone();
            schedule.push(Timed {
                at_ms: 0,
                fault: Fault::LostDelete { end },
            });
        }
        if d.chance(5) {
            let end = ends[d.between(0, ends.len() as u64 - 1) as usize].clone();
            schedule.push(Timed {
                at_ms: 0,
                fault: Fault::ChangedRow { end },
            });
        }
        // L0 import switched on: at every end (what a restore that imported L0 jobs would
        // show its deletes lost on), or at some.
        if d.chance(3) {
            let every = d.chance(2);
            for end in &ends {
                if every || d.chance(2) {
                    schedule.push(Timed {
                        at_ms: 0,
                        fault: Fault::L0ImportOn { end: end.clone() },
                    });
                }
            }
        }
        // Issue 49's rules. The last create is the one whose retry certainly meets the
        // budget full; an earlier one's retry may come before the last job is made.
        if d.chance(4) {
            let from_last = if d.chance(2) {
                0
            } else {
                d.between(1, 3) as u32
            };
            schedule.push(Timed {
                at_ms: 0,
                fault: Fault::LostCreateAnswer { from_last },
            });
        }
        // From the start: the other client waits for a held job of its collection.
        if d.chance(4) {
            let collection = d.between(0, u64::from(backup.collections) - 1) as u32;
            schedule.push(Timed {
                at_ms: 0,
                fault: Fault::SchemaDdl { collection },
            });
        }
        if d.chance(6) {
            let end = ends[d.between(0, ends.len() as u64 - 1) as usize].clone();
            let margin = lockstep::engine::clock::MARGIN.as_millis() as u64;
            // Seconds behind (waited for), just past the margin when the world starts (by
            // preflight within it, or not), or days behind (refused).
            let behind_ms = match d.between(0, 2) {
                0 => d.between(500, margin - 2_000),
                1 => d.between(margin + 1_000, margin + 30_000),
                _ => d.between(3_600_000, 40 * 86_400_000),
            };
            schedule.push(Timed {
                at_ms: 0,
                fault: Fault::ClockBehind { end, behind_ms },
            });
        }
        // The etcd a fleet meets in production: three members, one of which dies or loses the
        // lead mid-restore, and hosts a partition hides from all of them. (The other seeds'
        // etcd journal has one member.)
        let etcd_members = if etcd && fleet { 3 } else { 1 };
        if etcd_members == 3 {
            if d.chance(2) {
                let member = if d.chance(3) { d.between(1, 2) } else { 0 } as usize;
                let (at_ms, down_ms) = (d.between(0, WINDOW_MS), d.between(200, 6_000));
                let fault = Fault::MemberDown { member, down_ms };
                schedule.push(Timed { at_ms, fault });
            }
            for _ in 0..d.between(0, 2) {
                let at_ms = d.between(0, WINDOW_MS);
                let fault = Fault::LeaderMoves;
                schedule.push(Timed { at_ms, fault });
            }
        }
        if etcd && d.chance(if fleet { 3 } else { 8 }) {
            let at_ms = d.between(0, WINDOW_MS);
            let fault = Fault::PartitionHost(d.pause());
            schedule.push(Timed { at_ms, fault });
        }
        schedule.sort_by_key(|t| t.at_ms);
        Scenario {
            seed,
            secondaries,
            storage,
            backup,
            atomicity,
            mirror_grace_ms,
            check,
            journal,
            etcd_members,
            crash_at,
            pause_at,
            resume,
            schedule,
        }
    }

    /// The world this scenario runs in: fast stages and small binlogs, so a run takes
    /// seconds; the stream lag starts at the default and faults change it. Every end has
    /// Milvus 3.0's default of L0 import (off) but those its faults switch it on at, and
    /// refuses schema DDL while an import is unfinished (milvus#53071): a restore must
    /// never meet that, whatever else happens. A clock that runs behind is set against the
    /// backup's newest row from now.
    pub fn world_spec(&self) -> anyhow::Result<WorldSpec> {
        let base = WorldSpec::default();
        let l0_on = (self.schedule.iter())
            .filter_map(|t| match &t.fault {
                Fault::L0ImportOn { end } => Some(end.clone()),
                _ => None,
            })
            .collect();
        let mut spec = WorldSpec {
            secondaries: self.secondaries,
            storage: self.storage,
            l0_import: L0Import::OnAt(l0_on),
            rules: EndRules {
                import_blocks_schema_ddl: true,
                ..base.rules.clone()
            },
            backup: BackupSpec {
                name: "faults_backup".into(),
                seed: self.seed,
                collections: self.backup.collections,
                partitions: self.backup.partitions,
                segments_per_partition: self.backup.segments_per_partition,
                l0_segments: self.backup.l0,
                schema: self.backup.schema,
                ..base.backup.clone()
            },
            ..base
        };
        for t in &self.schedule {
            if let Fault::ClockBehind { end, behind_ms } = &t.fault {
                let behind = Duration::from_millis(*behind_ms);
                let rules = (spec.rules.clone()).clock_behind_newest_row(&spec.backup, behind)?;
                spec.end_rules.insert(end.clone(), rules);
            }
        }
        Ok(spec)
    }

    /// Whether some end's clock runs behind the backup: the job then bounds its wait after
    /// the commit, which a commit the fence rejects would make endless.
    pub fn clock_behind(&self) -> bool {
        (self.schedule.iter()).any(|t| matches!(t.fault, Fault::ClockBehind { .. }))
    }

    /// Whether a host is ever cut off from etcd: every host then reaches it through relays
    /// of its own, which the cut acts on.
    pub fn partitions(&self) -> bool {
        (self.schedule.iter()).any(|t| matches!(t.fault, Fault::PartitionHost(_)))
    }

    /// Whether every end's job budget is to hold exactly the restore's jobs.
    pub fn fills_the_budget(&self) -> bool {
        (self.schedule.iter()).any(|t| matches!(t.fault, Fault::LostCreateAnswer { .. }))
    }

    /// The longest a stream may still be delivering after the last fault: what the runner
    /// waits for mirrors to settle.
    pub fn longest_lag(&self) -> Duration {
        let lag = self
            .schedule
            .iter()
            .filter_map(|t| match &t.fault {
                Fault::StreamLag { lag_ms, .. } => Some(*lag_ms),
                Fault::StreamPause { for_ms, .. } => Some(*for_ms),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        Duration::from_millis(lag) + WorldSpec::default().stream_lag
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.backup;
        writeln!(
            f,
            "seed {}: 1 target + {} secondaries ({:?} storage), backup {} collections x {} partitions x {} segments (L0 {:?}, schema {:?})",
            self.seed,
            self.secondaries,
            self.storage,
            b.collections,
            b.partitions,
            b.segments_per_partition,
            b.l0,
            b.schema
        )?;
        writeln!(
            f,
            "  job: atomicity {}, mirror_grace {} ms, check {}, journal {:?} ({} members), crash at {}, pause at {}, resume by {:?}",
            self.atomicity.name(),
            self.mirror_grace_ms,
            self.check.map_or("none".to_string(), |c| format!(
                "{} at {}",
                c.behaviour.config(),
                c.phase.name()
            )),
            self.journal,
            self.etcd_members,
            self.crash_at.unwrap_or("none"),
            self.pause_at
                .map_or("none".to_string(), |(point, pause)| format!(
                    "{point} {pause:?}"
                )),
            self.resume
        )?;
        if self.schedule.is_empty() {
            writeln!(f, "  schedule: no timed faults")?;
        }
        for t in &self.schedule {
            writeln!(f, "  at {:>5} ms: {:?}", t.at_ms, t.fault)?;
        }
        Ok(())
    }
}
