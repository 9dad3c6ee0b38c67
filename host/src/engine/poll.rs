//! Watching (end, job) pairs until each reaches what the caller waits for.
//!
//! One loop serves the hold before the decision, the wait for completion after it and the
//! wait for a clean abort: the caller judges each sighting, the [`Schedule`] decides when
//! each pair is asked next and caps the rate of calls.
//!
//! The jobs of one database on one end are read together: one `list` answers for all of
//! them, where a `describe` answers for one. Milvus's list returns every job of a
//! collection, or every job when no collection is named, each with state, progress and
//! reason. A restore of many collections and partitions thus costs one call per end per
//! look, not one per job or per collection, and each look sees every job, so the last
//! transition is seen as soon as any of them is due.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;
use tokio::time::Instant;

use super::ends::{EndClient, Ends};
use super::schedule::{FirstLook, Schedule};
use crate::milvus::{self, ImportListEntry, ImportProgress, JobState, MilvusJobId};

/// Calls in flight at once across all ends.
const CALLS_IN_FLIGHT: usize = 32;

/// Rows of other jobs than the watch's own that a list of a whole end may bring before that
/// end's lists name their collection again. Milvus keeps finished jobs for hours and
/// computes each row's progress, so on a busy cluster the whole list costs it more than one
/// list per collection would.
const FOREIGN_ROWS: usize = 256;

/// One pair to watch: a job on an end (index into [`Ends::all`]).
#[derive(Debug, Clone)]
pub struct Pair {
    pub job: MilvusJobId,
    /// The job's target database, named in `DB-Name` when it is described.
    pub db: Arc<str>,
    pub end: usize,
    /// The job's target collection, `db.collection`: the pairs of one collection on one end
    /// are read with one list.
    pub collection: Arc<str>,
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

/// An end refused the caller's rights while it was watched: an answer no wait changes, so
/// the watch stops with it whatever its judge would say.
#[derive(Debug)]
pub struct Denied(pub String);

impl From<Denied> for String {
    fn from(denied: Denied) -> String {
        denied.0
    }
}

/// The caller's verdict on a sighting.
#[derive(Debug, PartialEq, Eq)]
pub enum Judgement<E = String> {
    /// This pair is where the caller wants it; stop asking.
    Done,
    /// Not yet; ask again.
    Wait,
    /// Give up on the whole watch, for this reason.
    Stop(E),
}

/// One call to an end, and what it says of the end's whole list.
struct Look {
    sightings: Vec<(usize, Sight)>,
    /// Calls it took: a list, and a describe for each job it left out unexplained.
    made: usize,
    /// Rows its answer brought: a list's, or one for a describe.
    rows: usize,
    /// The end, when a list of all its jobs brought more than [`FOREIGN_ROWS`] of others.
    crowded: Option<usize>,
}

/// One call to an end.
enum Call {
    /// A pair alone in what one list would answer for (see [`scope`]).
    Describe(usize),
    /// Every pair still watched in one database on one end.
    List(ListCall),
}

/// A list of one end's import jobs in one database: of their collection when they all
/// belong to one, else of every job the end has.
struct ListCall {
    end: usize,
    db: String,
    collection: Option<String>,
    pairs: Vec<usize>,
}

/// `db.collection` as its two names. Milvus names cannot hold a dot, so the first one ends
/// the database name.
fn names(collection: &str) -> (&str, &str) {
    collection
        .split_once('.')
        .unwrap_or(("default", collection))
}

/// Asks about every pair until the judge calls each one done (`Ok`) or stops the watch
/// (`Err(reason)`). `jobs` is the number of distinct jobs, for the call budget.
pub async fn watch<E: From<Denied>>(
    ends: &Ends,
    pairs: &[Pair],
    jobs: usize,
    first: FirstLook,
    judge: &mut (dyn FnMut(usize, Sight, Instant) -> Judgement<E> + Send),
) -> Result<(), E> {
    let mut schedule = Schedule::new(pairs.len(), jobs, Instant::now(), first);
    let mut remaining = pairs.len();
    // Pairs an end was seen not to have: a list that leaves one out again is believed, where
    // a describe would only say the same (a mirror's jobs arrive over CDC, a stream's lag
    // after the target's).
    let mut absent: HashSet<usize> = HashSet::new();
    // Ends whose whole list is mostly other jobs: their lists name one collection each.
    // The watch's own jobs, finished or not, are not others.
    let mut crowded: HashSet<usize> = HashSet::new();
    let ours: HashSet<&MilvusJobId> = pairs.iter().map(|p| &p.job).collect();
    while remaining > 0 {
        let due = match schedule.due(Instant::now()) {
            Ok(due) => due,
            Err(next) => {
                tokio::time::sleep_until(next).await;
                continue;
            }
        };
        let mut calls = plan(pairs, &due, &schedule, &crowded);
        calls.truncate(schedule.calls_allowed());
        let mut looks = futures::stream::iter(
            calls
                .into_iter()
                .map(|call| look(ends, pairs, &absent, &ours, call)),
        )
        .buffer_unordered(CALLS_IN_FLIGHT);
        let mut seen_absent = Vec::new();
        let mut seen_crowded = Vec::new();
        while let Some(look) = looks.next().await {
            schedule.spend(look.made);
            // Its pairs are looked at again as soon as what it brought allows.
            if look.rows > 0 {
                schedule.listed(look.rows);
            }
            seen_crowded.extend(look.crowded);
            for (i, sight) in look.sightings {
                // A list can answer for a pair finished earlier in this round.
                if !schedule.is_active(i) {
                    continue;
                }
                // A refusal of the caller's rights is an answer no wait changes.
                if let Sight::Unreachable(e) = &sight
                    && e.is_denied()
                {
                    return Err(Denied(e.to_string()).into());
                }
                let now = Instant::now();
                let progress = match &sight {
                    Sight::Seen(s) => s.progress,
                    Sight::Missing => {
                        seen_absent.push(i);
                        0
                    }
                    Sight::Unreachable(_) => 0,
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
        drop(looks);
        absent.extend(seen_absent);
        crowded.extend(seen_crowded);
    }
    Ok(())
}

/// The pairs one list answers for: those of one database on an end, or of one collection on
/// a crowded end (`db.collection` begins with its database's name).
fn scope<'p>(p: &'p Pair, crowded: &HashSet<usize>) -> (usize, &'p str) {
    if crowded.contains(&p.end) {
        (p.end, &*p.collection)
    } else {
        (p.end, names(&p.collection).0)
    }
}

/// The calls that answer for the `due` pairs, soonest due first: one list per database and
/// end that has two or more pairs still watched (it answers for all of them, due or not),
/// one describe for a pair alone in its database on its end. On a `crowded` end, the same
/// per collection.
fn plan(pairs: &[Pair], due: &[usize], schedule: &Schedule, crowded: &HashSet<usize>) -> Vec<Call> {
    let mut watched: HashMap<(usize, &str), Vec<usize>> = HashMap::new();
    for (i, p) in pairs.iter().enumerate() {
        if schedule.is_active(i) {
            watched.entry(scope(p, crowded)).or_default().push(i);
        }
    }
    // Keyed by the position of the group's soonest due pair, which `due` is sorted by.
    let mut calls: BTreeMap<usize, Call> = BTreeMap::new();
    let mut listed: HashSet<(usize, &str)> = HashSet::new();
    for (position, &i) in due.iter().enumerate() {
        let key = scope(&pairs[i], crowded);
        let group = &watched[&key];
        if group.len() < 2 {
            calls.insert(position, Call::Describe(i));
        } else if listed.insert(key) {
            // One collection's list is all the answer needs; the end's whole list is
            // larger, but one call where there would be one per collection.
            let collection = &pairs[group[0]].collection;
            let one = group.iter().all(|&j| pairs[j].collection == *collection);
            calls.insert(
                position,
                Call::List(ListCall {
                    end: key.0,
                    db: names(collection).0.to_owned(),
                    collection: one.then(|| names(collection).1.to_owned()),
                    pairs: group.clone(),
                }),
            );
        }
    }
    calls.into_values().collect()
}

/// Makes one call: what it saw of each pair, and how many calls that took. A pair a
/// list does not show is asked about alone, to tell a job not created yet from one the list
/// leaves out (as Milvus does for collections the caller cannot import into), unless that
/// is already known: the pair is `absent` (seen missing before), or the list showed another
/// job of its collection, or a describe found one missing. Every pair of a list the end
/// refuses is asked about alone.
async fn look(
    ends: &Ends,
    pairs: &[Pair],
    absent: &HashSet<usize>,
    ours: &HashSet<&MilvusJobId>,
    call: Call,
) -> Look {
    match call {
        Call::Describe(i) => {
            let end = &ends.all()[pairs[i].end];
            Look {
                sightings: vec![(i, describe(end, &pairs[i].db, &pairs[i].job).await)],
                made: 1,
                rows: 1,
                crowded: None,
            }
        }
        Call::List(call) => list(ends, pairs, absent, ours, call).await,
    }
}

/// One list of `end`'s import jobs (of `collection`, or of every collection), read for the
/// jobs of `group`; a job the list leaves out is described, unless its collection is known
/// to have none there yet.
async fn list(
    ends: &Ends,
    pairs: &[Pair],
    absent: &HashSet<usize>,
    ours: &HashSet<&MilvusJobId>,
    call: ListCall,
) -> Look {
    let ListCall {
        end: index,
        db,
        collection,
        pairs: group,
    } = call;
    let (db, collection) = (db.as_str(), collection.as_deref());
    let end = &ends.all()[index];
    let (rows, answered) = match end.rest.list(db, collection.unwrap_or("")).await {
        Ok(rows) => (rows, true),
        Err(e) if e.is_retriable() => {
            let e = Arc::new(e);
            let sightings = group
                .into_iter()
                .map(|i| (i, Sight::Unreachable(Arc::clone(&e))))
                .collect();
            return Look {
                sightings,
                made: 1,
                rows: 0,
                crowded: None,
            };
        }
        // An answer, not an outage: the collection is gone (dropped by a rollback, or by
        // hand) or the list is refused. Its jobs still have their states, by id; asking the
        // list again would get the same answer forever.
        Err(_) => (Vec::new(), false),
    };
    let listed = rows.len();
    let mut rows: HashMap<MilvusJobId, ImportListEntry> =
        rows.into_iter().map(|r| (r.job_id.clone(), r)).collect();
    let found: Vec<Option<ImportListEntry>> =
        group.iter().map(|&i| rows.remove(&pairs[i].job)).collect();
    let others = rows.keys().filter(|id| !ours.contains(id)).count();
    let crowded = (collection.is_none() && others > FOREIGN_ROWS).then_some(index);
    // Collections the list leaves nothing of out: it showed one of their jobs, or a
    // describe found one missing (the end has none of them yet, as a mirror before the
    // stream brings them).
    let mut explained: HashSet<&str> = group
        .iter()
        .zip(&found)
        .filter(|(_, row)| row.is_some())
        .map(|(&i, _)| &*pairs[i].collection)
        .collect();
    let mut sightings = Vec::with_capacity(group.len());
    let mut made = 1;
    for (i, row) in group.into_iter().zip(found) {
        let collection = &*pairs[i].collection;
        let sight = match row {
            Some(row) => Sight::Seen(row.into()),
            None if answered && (absent.contains(&i) || explained.contains(collection)) => {
                Sight::Missing
            }
            None => {
                made += 1;
                let sight = describe(end, &pairs[i].db, &pairs[i].job).await;
                if matches!(sight, Sight::Missing) {
                    explained.insert(collection);
                }
                sight
            }
        };
        sightings.push((i, sight));
    }
    Look {
        sightings,
        made,
        rows: listed,
        crowded,
    }
}

async fn describe(end: &EndClient, db: &str, job: &MilvusJobId) -> Sight {
    match end.rest.describe(db, job).await {
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
            db: collection.split_once('.').map_or("", |(db, _)| db).into(),
            end,
            collection: collection.into(),
        }
    }

    fn shape(calls: &[Call]) -> Vec<String> {
        calls
            .iter()
            .map(|c| match c {
                Call::Describe(i) => format!("describe {i}"),
                Call::List(ListCall {
                    end,
                    db,
                    collection,
                    pairs,
                }) => format!(
                    "list {db}.{}@{end} {pairs:?}",
                    collection.as_deref().unwrap_or("*")
                ),
            })
            .collect()
    }

    /// A one-cluster sim, `t`, with each of `collections` (in `default`) holding that many
    /// imports, all Pending; their ids, per collection.
    async fn sim_with(collections: &[(&str, usize)]) -> (milvus_sim::Sim, Vec<Vec<i64>>) {
        use milvus_sim::catalog::NewCollection;
        use milvus_sim::cluster::CreateImport;

        let topology = milvus_sim::Topology::from_toml_str(
            // Pending for the whole test, however loaded the machine: the tests count calls,
            // and a job that moved on between looks would change what they see.
            "[[cluster]]\nid = \"t\"\nversion = \"3.0.0\"\n[cluster.durations]\npending = \"1h\"\n",
            "test.toml",
            std::path::Path::new("."),
        )
        .expect("topology");
        let sim = milvus_sim::Sim::start(topology).await.expect("sim starts");
        let t = sim.cluster("t");
        let ids = collections
            .iter()
            .map(|&(name, jobs)| {
                t.create_collection(NewCollection::keyed("default", name))
                    .expect("collection");
                (0..jobs)
                    .map(|_| {
                        t.create_import(CreateImport {
                            db_name: String::new(),
                            collection_name: name.into(),
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
                    .collect()
            })
            .collect();
        (sim, ids)
    }

    fn target_of(sim: &milvus_sim::Sim) -> Ends {
        Ends::from_clients(vec![
            EndClient::connect(
                "t",
                crate::journal::Role::Target,
                &sim.cluster("t").uri(),
                None,
                &crate::milvus::Tls::default(),
            )
            .expect("client"),
        ])
    }

    /// Seeds 3662 and 3929: a rollback dropped the collection, every list of it answered
    /// "collection not found", and the watch asked the list again until killed.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_list_refused_for_a_dropped_collection_falls_back_to_describing_each_job() {
        let (sim, ids) = sim_with(&[("c", 2)]).await;
        sim.cluster("t")
            .execute_ddl(milvus_sim::catalog::DdlOp::DropCollection {
                db: "default".into(),
                name: "c".into(),
            })
            .expect("dropped");
        let ends = target_of(&sim);
        let pairs: Vec<Pair> = ids[0]
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
            watch::<String>(&ends, &pairs, pairs.len(), FirstLook::Now, &mut judge),
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

    /// One look at two collections' jobs is one list of the end. A job the list does not
    /// show, in a collection it shows other jobs of, is not there yet: no describe asks.
    /// One in a collection the list shows nothing of may be hidden from the caller, and is
    /// described, once: the next list that leaves it out is believed, and so is this list
    /// for the rest of that collection's jobs.
    #[tokio::test(flavor = "multi_thread")]
    async fn one_list_of_the_end_sees_every_collection_and_describes_only_the_unexplained() {
        let (sim, ids) = sim_with(&[("a", 2), ("b", 2)]).await;
        let ends = target_of(&sim);
        let mut pairs: Vec<Pair> = ids
            .iter()
            .zip(["default.a", "default.b"])
            .flat_map(|(jobs, c)| jobs.iter().map(move |j| pair(&j.to_string(), 0, c)))
            .collect();
        pairs.push(pair("1", 0, "default.a"));
        pairs.push(pair("2", 0, "default.c"));
        pairs.push(pair("3", 0, "default.c"));
        let mut sights = vec![String::new(); pairs.len()];
        // A missing job is looked at twice.
        let mut judge = |i: usize, sight: Sight, _: Instant| match sight {
            Sight::Missing if sights[i].is_empty() => {
                sights[i] = "missing once".into();
                Judgement::Wait
            }
            sight => {
                sights[i] = match sight {
                    Sight::Seen(s) => format!("{:?}", s.state),
                    Sight::Missing => "missing twice".into(),
                    Sight::Unreachable(e) => format!("unreachable: {e}"),
                };
                Judgement::Done
            }
        };
        watch::<String>(&ends, &pairs, pairs.len(), FirstLook::Now, &mut judge)
            .await
            .expect("watched");
        let pending = format!("{:?}", JobState::Pending);
        assert_eq!(
            sights,
            [
                &pending,
                &pending,
                &pending,
                &pending,
                "missing twice",
                "missing twice",
                "missing twice"
            ]
        );
        let t = sim.cluster("t").snapshot();
        assert_eq!(t.requests_to("import/list").len(), 2, "one list a look");
        assert_eq!(
            t.requests_to("import/describe").len(),
            1,
            "only the job in a collection the list showed nothing of"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn one_list_answers_for_a_databases_jobs_on_an_end_and_a_lone_job_is_described() {
        let pairs = [
            pair("1", 0, "db.a"),
            pair("2", 0, "db.a"),
            pair("3", 0, "db.a"),
            pair("1", 1, "db.a"),
            pair("4", 0, "db.b"),
            pair("5", 0, "other.c"),
            pair("6", 0, "other.c"),
            pair("7", 1, "other.d"),
        ];
        let mut schedule = Schedule::new(pairs.len(), 7, Instant::now(), FirstLook::Now);
        schedule.finish(2);
        // Due: job 2 and job 4 on the target, job 1 on the secondary, job 5 on the target.
        // One list of the whole end answers for `db`'s jobs on the target, a and b, due
        // or not (job 1 is not due; job 3 is finished); `other` has one collection
        // there, so its list names it; job 1 is alone in `db` on the secondary.
        let calls = plan(&pairs, &[1, 4, 3, 5], &schedule, &HashSet::new());
        assert_eq!(
            shape(&calls),
            [
                "list db.*@0 [0, 1, 4]",
                "describe 3",
                "list other.c@0 [5, 6]"
            ]
        );
    }

    /// A busy cluster keeps thousands of other jobs: once a list of the whole end brings
    /// more of them than [`FOREIGN_ROWS`], that end's lists name their collection.
    #[tokio::test(flavor = "multi_thread")]
    async fn an_end_crowded_with_other_jobs_is_listed_collection_by_collection() {
        let (sim, ids) = sim_with(&[("a", 2), ("b", 2), ("z", FOREIGN_ROWS + 1)]).await;
        let ends = target_of(&sim);
        let pairs: Vec<Pair> = ids[..2]
            .iter()
            .zip(["default.a", "default.b"])
            .flat_map(|(jobs, c)| jobs.iter().map(move |j| pair(&j.to_string(), 0, c)))
            .collect();
        // Each pair is looked at twice.
        let mut looks = vec![0; pairs.len()];
        let mut judge = |i: usize, sight: Sight, _: Instant| {
            assert!(matches!(sight, Sight::Seen(_)), "{sight:?}");
            looks[i] += 1;
            if looks[i] == 2 {
                Judgement::Done
            } else {
                Judgement::Wait
            }
        };
        watch::<String>(&ends, &pairs, pairs.len(), FirstLook::Now, &mut judge)
            .await
            .expect("watched");
        let t = sim.cluster("t").snapshot();
        assert_eq!(
            t.requests_to("import/list").len(),
            3,
            "one list of the end, then one of each collection"
        );
        assert!(t.requests_to("import/describe").is_empty());
    }
}
