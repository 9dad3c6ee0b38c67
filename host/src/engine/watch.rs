//! Watching (end, job) pairs until each reaches what the caller waits for.
//!
//! One loop serves the hold before the decision, the wait for completion after it and the
//! wait for a clean abort: the caller judges each sighting, the [`Schedule`] decides when
//! each pair is asked next and caps the rate of calls.
//!
//! The jobs of one collection on one end are read together: one `list` answers for all of
//! them (Milvus returns a collection's every job, with state, progress and reason), where a
//! `describe` answers for one. A restore of many partitions thus costs one call per
//! collection and end per look, not one per job, and each look sees every job of the
//! collection, so the last transition is seen as soon as any of them is due.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;
use tokio::time::Instant;

use super::ends::{EndClient, Ends};
use super::schedule::{FirstLook, Schedule};
use crate::milvus::{self, ImportListEntry, ImportProgress, JobState, MilvusJobId};

/// Calls in flight at once across all ends.
const CALLS_IN_FLIGHT: usize = 32;

/// One pair to watch: a job on an end (index into [`Ends::all`]).
#[derive(Debug, Clone)]
pub struct Pair {
    pub job: MilvusJobId,
    pub end: usize,
    /// The job's target collection, `db.collection`: the pairs of one collection on one end
    /// are read with one list.
    pub collection: String,
}

/// What an end said about a job, from a describe or from the job's row in a list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub state: JobState,
    pub progress: i64,
    pub reason: Option<String>,
}

impl From<ImportProgress> for Seen {
    fn from(p: ImportProgress) -> Seen {
        Seen {
            state: p.state,
            progress: p.progress,
            reason: p.reason,
        }
    }
}

impl From<ImportListEntry> for Seen {
    fn from(e: ImportListEntry) -> Seen {
        Seen {
            state: e.state,
            progress: e.progress,
            reason: e.reason,
        }
    }
}

/// What one look saw of a pair.
#[derive(Debug)]
pub enum Sight {
    Seen(Seen),
    /// The end does not know the job (yet, for a mirror whose ImportMsg is in flight).
    Missing,
    /// The end did not answer; the pair is asked again later. Shared by the pairs one
    /// failed list was for.
    Unreachable(Arc<milvus::Error>),
}

/// The caller's verdict on a sighting.
#[derive(Debug, PartialEq, Eq)]
pub enum Judgement {
    /// This pair is where the caller wants it; stop asking.
    Done,
    /// Not yet; ask again.
    Wait,
    /// Give up on the whole watch, for this reason.
    Stop(String),
}

/// One call to an end.
enum Call {
    /// A pair alone in its collection on its end.
    Describe(usize),
    /// Every pair still watched in one collection on one end.
    List {
        end: usize,
        collection: String,
        pairs: Vec<usize>,
    },
}

/// Asks about every pair until the judge calls each one done (`Ok`) or stops the watch
/// (`Err(reason)`). `jobs` is the number of distinct jobs, for the call budget.
pub async fn watch(
    ends: &Ends,
    pairs: &[Pair],
    jobs: usize,
    first: FirstLook,
    judge: &mut (dyn FnMut(usize, Sight, Instant) -> Judgement + Send),
) -> Result<(), String> {
    let mut schedule = Schedule::new(pairs.len(), jobs, Instant::now(), first);
    let mut remaining = pairs.len();
    while remaining > 0 {
        let due = match schedule.due(Instant::now()) {
            Ok(due) => due,
            Err(next) => {
                tokio::time::sleep_until(next).await;
                continue;
            }
        };
        let mut calls = plan(pairs, &due, &schedule);
        calls.truncate(schedule.calls_allowed());
        let mut looks =
            futures::stream::iter(calls.into_iter().map(|call| look(ends, pairs, call)))
                .buffer_unordered(CALLS_IN_FLIGHT);
        while let Some((sightings, made)) = looks.next().await {
            schedule.spend(made);
            for (i, sight) in sightings {
                // A list can answer for a pair finished earlier in this round.
                if !schedule.is_active(i) {
                    continue;
                }
                let now = Instant::now();
                let progress = match &sight {
                    Sight::Seen(s) => s.progress,
                    _ => 0,
                };
                match judge(i, sight, now) {
                    Judgement::Done => {
                        schedule.finish(i);
                        remaining -= 1;
                    }
                    Judgement::Wait => schedule.observe(i, progress, now),
                    Judgement::Stop(reason) => return Err(reason),
                }
            }
        }
    }
    Ok(())
}

/// The calls that answer for the `due` pairs, soonest due first: one list per collection
/// and end that has two or more pairs still watched (it answers for all of them, due or
/// not), one describe for a pair alone in its collection.
fn plan(pairs: &[Pair], due: &[usize], schedule: &Schedule) -> Vec<Call> {
    let mut watched: HashMap<(usize, &str), Vec<usize>> = HashMap::new();
    for (i, p) in pairs.iter().enumerate() {
        if schedule.is_active(i) {
            watched.entry((p.end, &p.collection)).or_default().push(i);
        }
    }
    // Keyed by the position of the group's soonest due pair, which `due` is sorted by.
    let mut calls: BTreeMap<usize, Call> = BTreeMap::new();
    let mut listed: HashSet<(usize, &str)> = HashSet::new();
    for (position, &i) in due.iter().enumerate() {
        let key = (pairs[i].end, pairs[i].collection.as_str());
        let group = &watched[&key];
        if group.len() < 2 {
            calls.insert(position, Call::Describe(i));
        } else if listed.insert(key) {
            calls.insert(
                position,
                Call::List {
                    end: key.0,
                    collection: key.1.to_owned(),
                    pairs: group.clone(),
                },
            );
        }
    }
    calls.into_values().collect()
}

/// Makes one call; returns what it saw of each pair and how many calls that took (a pair a
/// list does not show is asked about alone, to tell a job not created yet from one the
/// list leaves out, as Milvus does for collections the caller cannot import into; so is
/// every pair of a list the end refuses).
async fn look(ends: &Ends, pairs: &[Pair], call: Call) -> (Vec<(usize, Sight)>, usize) {
    match call {
        Call::Describe(i) => {
            let end = &ends.all()[pairs[i].end];
            (vec![(i, describe(end, &pairs[i].job).await)], 1)
        }
        Call::List {
            end,
            collection,
            pairs: group,
        } => {
            let end = &ends.all()[end];
            // Milvus names cannot hold a dot, so the first one ends the database name.
            let (db, name) = collection
                .split_once('.')
                .unwrap_or(("default", &collection));
            let rows = match end.rest.list(db, name).await {
                Ok(rows) => rows,
                Err(e) if e.is_retriable() => {
                    let e = Arc::new(e);
                    let sightings = group
                        .into_iter()
                        .map(|i| (i, Sight::Unreachable(Arc::clone(&e))))
                        .collect();
                    return (sightings, 1);
                }
                // An answer, not an outage: the collection is gone (dropped by a rollback,
                // or by hand) or the list is refused. Its jobs still have their states, by
                // id; asking the list again would get the same answer forever.
                Err(_) => Vec::new(),
            };
            let mut rows: HashMap<MilvusJobId, ImportListEntry> =
                rows.into_iter().map(|r| (r.job_id.clone(), r)).collect();
            let mut sightings = Vec::with_capacity(group.len());
            let mut made = 1;
            for i in group {
                let sight = match rows.remove(&pairs[i].job) {
                    Some(row) => Sight::Seen(row.into()),
                    None => {
                        made += 1;
                        describe(end, &pairs[i].job).await
                    }
                };
                sightings.push((i, sight));
            }
            (sightings, made)
        }
    }
}

async fn describe(end: &EndClient, job: &MilvusJobId) -> Sight {
    match end.rest.describe(job).await {
        Ok(p) => Sight::Seen(p.into()),
        Err(e) if e.is_job_not_found() => Sight::Missing,
        Err(e) => Sight::Unreachable(Arc::new(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(job: &str, end: usize, collection: &str) -> Pair {
        Pair {
            job: MilvusJobId(job.into()),
            end,
            collection: collection.into(),
        }
    }

    fn shape(calls: &[Call]) -> Vec<String> {
        calls
            .iter()
            .map(|c| match c {
                Call::Describe(i) => format!("describe {i}"),
                Call::List {
                    end,
                    collection,
                    pairs,
                } => format!("list {collection}@{end} {pairs:?}"),
            })
            .collect()
    }

    /// Seeds 3662 and 3929: a rollback dropped the collection, every list of it answered
    /// "collection not found", and the watch asked the list again until killed.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_list_refused_for_a_dropped_collection_falls_back_to_describing_each_job() {
        use milvus_proto::schema::{CollectionSchema, FieldSchema};
        use milvus_sim::catalog::{DdlOp, NewCollection};
        use milvus_sim::cluster::CreateImport;

        let topology = milvus_sim::Topology::from_toml_str(
            "[[cluster]]\nid = \"t\"\nversion = \"3.0.0\"\n",
            "test.toml",
            std::path::Path::new("."),
        )
        .expect("topology");
        let sim = milvus_sim::Sim::start(topology).await.expect("sim starts");
        let t = sim.cluster("t");
        t.create_collection(NewCollection {
            db: "default".into(),
            name: "c".into(),
            schema: CollectionSchema {
                name: "c".into(),
                fields: vec![FieldSchema {
                    field_id: 100,
                    name: "id".into(),
                    is_primary_key: true,
                    data_type: 5,
                    ..Default::default()
                }],
                ..Default::default()
            },
            shards_num: 1,
            consistency_level: 0,
            properties: vec![],
            num_partitions: 0,
        })
        .expect("collection");
        let jobs: Vec<i64> = (0..2)
            .map(|_| {
                t.create_import(CreateImport {
                    db_name: String::new(),
                    collection_name: "c".into(),
                    partition_name: "_default".into(),
                    files: vec![vec!["bk/".into()]],
                    options: [("backup", "true"), ("auto_commit", "false")]
                        .map(|(k, v)| (k.to_owned(), v.to_owned()))
                        .into(),
                    idempotency_key: None,
                    protocol: milvus_sim::Protocol::Rest,
                })
                .expect("created")
            })
            .collect();
        t.execute_ddl(DdlOp::DropCollection {
            db: "default".into(),
            name: "c".into(),
        })
        .expect("dropped");

        let ends = Ends::from_clients(vec![
            EndClient::connect("t", crate::journal::Role::Target, &t.uri(), None).expect("client"),
        ]);
        let pairs: Vec<Pair> = jobs
            .iter()
            .map(|j| pair(&j.to_string(), 0, "default.c"))
            .collect();
        let mut failed = Vec::new();
        let mut judge = |i: usize, sight: Sight, _: Instant| match sight {
            Sight::Seen(s) if s.state == JobState::Failed => {
                failed.push(i);
                Judgement::Done
            }
            _ => Judgement::Wait,
        };
        let watched = tokio::time::timeout(
            std::time::Duration::from_secs(20),
            watch(&ends, &pairs, pairs.len(), FirstLook::Now, &mut judge),
        )
        .await;
        assert_eq!(
            watched,
            Ok(Ok(())),
            "the watch kept asking the refused list"
        );
        failed.sort();
        assert_eq!(failed, [0, 1], "each job's state, by describe");
    }

    #[tokio::test(start_paused = true)]
    async fn one_list_answers_for_a_collections_jobs_on_an_end_and_a_lone_job_is_described() {
        let pairs = [
            pair("1", 0, "db.a"),
            pair("2", 0, "db.a"),
            pair("3", 0, "db.a"),
            pair("1", 1, "db.a"),
            pair("4", 0, "db.b"),
        ];
        let mut schedule = Schedule::new(pairs.len(), 4, Instant::now(), FirstLook::Now);
        schedule.finish(2);
        // Due: job 2 and job 4 on the target, job 1 on the secondary; job 1 on the target
        // is not due but is read by the same list as job 2; job 3 is finished.
        let calls = plan(&pairs, &[1, 4, 3], &schedule);
        assert_eq!(
            shape(&calls),
            ["list db.a@0 [0, 1]", "describe 4", "describe 3"]
        );
    }
}
