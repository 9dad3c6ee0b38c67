//! DDL on the target only: databases, collections with their schema, partitions and indexes,
//! as the plan says. Milvus replicates DDL to the secondaries over CDC; lockstep never sends
//! DDL to a secondary (it would be refused), it waits until each shows the collection, since a
//! mirror whose collection has not arrived is silently never created (docs/milvus-facts.md §2.2).
//!
//! The rule this module keeps: every DDL of a collection is answered before its first import
//! is created. A collection counts as made (`made`, what releases it to the import gate
//! through [`await_mirrors`]) only once its create (with its properties, a snapshot's
//! `preserve_field_ids` among them), the read-back of its id and field ids, its partitions
//! and its indexes were all answered; a failure anywhere releases it never. Milvus refuses
//! schema DDL while the collection has an unfinished import job, a held one included
//! (milvus#53071, docs/milvus-facts.md §2.8): a held job freezes the schema until its
//! commit, and DDL sent after the first create would meet that, or slip between two creates.
//! The only later DDL a restore sends is verification's load, once every job of the
//! collection is Completed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt as _;
use tokio::sync::watch;
use tokio::time::Instant;

use super::ends::{EndClient, Ends};
use super::faults;
use super::fence::{Fence, Lost};
use super::progress::Waiting;
use super::retry::{fenced, retry};
use crate::backup::{CollectionCreation, CollectionPlan, Namespace, RestorePlan};
use crate::journal::CreatedCollection;
use crate::milvus::{self, IndexSpec};
use milvus_proto::schema::CollectionSchema;

/// The CreateCollection property with which Milvus 3.0's rootcoord keeps the field ids the
/// schema gives instead of numbering the fields itself (`util.PreserveFieldIdsKey`, read in
/// `broadcastCreateCollectionV1`; its own snapshot restore sets it). A Milvus that does not
/// know it keeps it as a plain property; the ids are checked after the create either way.
const PRESERVE_FIELD_IDS: &str = "preserve_field_ids";

/// Why the DDL stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Milvus(#[from] milvus::Error),
    /// A create or a drop was fenced: this host no longer holds the restore.
    #[error(transparent)]
    Lost(#[from] Lost),
    /// The collection on the target numbers its fields otherwise than the backup's files.
    #[error("collection {collection} has other field ids than the backup: {}", .mismatched.join(", "))]
    FieldIds {
        collection: String,
        mismatched: Vec<String>,
    },
}

/// Why a collection's jobs can never be created on every end.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArrivalError {
    /// The DDL ended (it failed) before it made the collection on the target.
    #[error("the DDL on the target stopped before it made collection {collection}")]
    NotMade { collection: Namespace },
    /// The collection did not reach a secondary within the mirror grace of its creation.
    #[error(
        "collection {collection} did not arrive on secondary {secondary} over CDC within the \
         mirror grace; check the replication stream"
    )]
    Late {
        collection: Namespace,
        secondary: String,
    },
}

/// Collections made on the target at once ([`apply`]).
const COLLECTIONS_AT_ONCE: usize = 16;

/// How often a secondary is asked whether a collection arrived: soon after the target made
/// it at first (a stream tens of milliseconds behind brings it then, and the collection's
/// jobs wait for it), then less often, doubling up to the second bound.
const MIRROR_DDL_POLL: (Duration, Duration) =
    (Duration::from_millis(10), Duration::from_millis(100));

/// How long a collection may take to arrive before the wait is said, and how often it is
/// said again: a stream's usual lag of tens of milliseconds is not worth a word.
const SAY_WAITING_EVERY: Duration = Duration::from_secs(1);

/// The collections [`apply`] will create that did not exist at preflight, for the journal
/// to record before it starts.
pub fn to_create(
    plan: &RestorePlan,
    exists: &[bool],
    creation: CollectionCreation,
) -> Vec<(String, String)> {
    if creation == CollectionCreation::UseExisting {
        return Vec::new();
    }
    plan.collections
        .iter()
        .zip(exists)
        .filter(|(_, existed)| !**existed)
        .map(|(c, _)| (c.target.db.clone(), c.target.collection.clone()))
        .collect()
}

/// Creates what the plan needs on the target, [`COLLECTIONS_AT_ONCE`] collections at once, in
/// plan order. `exists[i]` says whether collection `i` was there at preflight. Each
/// collection this restore creates goes to `created` as soon as it exists, with the id the
/// target gave it (it is dropped again if the restore rolls back, while it still has that
/// id), and `made` counts the collections whose DDL is all answered, from the plan's first
/// (the module's rule), so that waiting on the secondaries, and then the imports, can start
/// collection by collection. Every create and drop of a collection waits for `fence`
/// first. At the first error no collection is begun; it is returned once those under way
/// finished.
#[allow(clippy::too_many_arguments)]
pub async fn apply(
    ends: &Ends,
    fence: &dyn Fence,
    plan: &RestorePlan,
    exists: &[bool],
    creation: CollectionCreation,
    deadline: Instant,
    created: &(dyn Fn(CreatedCollection) + Sync),
    made: &watch::Sender<usize>,
) -> Result<(), Error> {
    let target = ends.target();
    let databases = retry(deadline, || target.grpc.list_databases()).await?;
    for db in &plan.databases {
        if !databases.contains(db) {
            retry(deadline, || target.grpc.create_database(db)).await?;
            tracing::info!(end = %target.name, db, "created database");
        }
    }
    // Several collections at once (milvus-backup makes two): each is a dozen round trips,
    // and one at a time, on a target busy importing the first batches, they were the
    // restore's longest chain; at four at once they still were, at 1,000 collections on
    // milvus-sim (6.3 s of a 14 s restore; 3.4 s at sixteen). `made` still counts the
    // plan's collections in order, which is how the arrivals wait for them. After a failure
    // no collection is begun, and those under way finish, so that each one made is recorded
    // with its id for the rollback.
    let failed = AtomicBool::new(false);
    let failed = &failed;
    let count = plan.collections.len().min(exists.len());
    let mut in_order = futures::stream::iter(0..count)
        .map(|i| async move {
            if failed.load(Ordering::Relaxed) {
                return Ok(());
            }
            let c = &plan.collections[i];
            let made_one =
                make_collection(target, fence, c, exists[i], creation, deadline, created).await;
            failed.fetch_or(made_one.is_err(), Ordering::Relaxed);
            made_one
        })
        .buffered(COLLECTIONS_AT_ONCE);
    let mut first_failure = None;
    let mut done = 0;
    while let Some(made_one) = in_order.next().await {
        match made_one {
            Ok(()) if first_failure.is_none() => {
                done += 1;
                made.send_replace(done);
                // Breaks the module's rule: the indexes come after the release, late.
                if faults::planted(faults::Bug::IndexAfterRelease) {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    let late = make_indexes(target, fence, &plan.collections[done - 1], deadline);
                    if let Err(e) = late.await {
                        first_failure.get_or_insert(e);
                    }
                }
            }
            Ok(()) => {}
            Err(e) => {
                first_failure.get_or_insert(e);
            }
        }
    }
    first_failure.map_or(Ok(()), Err)
}

/// Makes collection `c` as the plan says: created (after a drop, if it `existed` and the
/// plan drops and recreates), its field ids checked, its partitions and indexes made; every
/// call answered when this returns.
async fn make_collection(
    target: &EndClient,
    fence: &dyn Fence,
    c: &CollectionPlan,
    existed: bool,
    creation: CollectionCreation,
    deadline: Instant,
    created: &(dyn Fn(CreatedCollection) + Sync),
) -> Result<(), Error> {
    let (db, name) = (&c.target.db, &c.target.collection);
    match (creation, existed) {
        (CollectionCreation::UseExisting, _) => {}
        (CollectionCreation::DropAndCreate, true) => {
            fenced(deadline, fence, || drop_checked(target, fence, db, name)).await??;
            tracing::info!(end = %target.name, collection = %c.target, "dropped existing collection");
            created(create_collection(target, fence, c, deadline).await?);
        }
        _ => created(create_collection(target, fence, c, deadline).await?),
    }
    if c.verify_field_ids {
        let described = retry(deadline, || target.grpc.describe_collection(db, name)).await?;
        let mismatched = mismatched_field_ids(&c.schema, &described.schema);
        if !mismatched.is_empty() {
            return Err(Error::FieldIds {
                collection: c.target.to_string(),
                mismatched,
            });
        }
    }
    // With a partition key, Milvus makes the partitions itself.
    if c.partition_num == 0 {
        let present = retry(deadline, || target.grpc.show_partitions(db, name)).await?;
        // Fenced as a collection's create is: a host that lost the restore mid-DDL (a
        // pause, a partition from etcd) must not add a partition to the collection of the
        // same name that the next attempt is importing into (fleet seed 378).
        for p in c.partitions.iter().filter(|p| !present.contains(p)) {
            fenced(deadline, fence, || {
                target.grpc.create_partition(db, name, p)
            })
            .await??;
        }
    }
    if !faults::planted(faults::Bug::IndexAfterRelease) {
        make_indexes(target, fence, c, deadline).await?;
    }
    Ok(())
}

/// The indexes of `c` the target does not have yet (`rebuild_index`, or a snapshot's).
async fn make_indexes(
    target: &EndClient,
    fence: &dyn Fence,
    c: &CollectionPlan,
    deadline: Instant,
) -> Result<(), Error> {
    if c.indexes.is_empty() {
        return Ok(());
    }
    let (db, name) = (&c.target.db, &c.target.collection);
    let present = retry(deadline, || target.grpc.index_names(db, name)).await?;
    for index in &c.indexes {
        if !index.index_name.is_empty() && present.contains(&index.index_name) {
            continue;
        }
        let spec = IndexSpec {
            field_name: index.field_name.clone(),
            index_name: index.index_name.clone(),
            params: index
                .params
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        };
        fenced(deadline, fence, || {
            target.grpc.create_index(db, name, &spec)
        })
        .await??;
    }
    Ok(())
}

/// Creates `c` once `fence` passed, and reads back the id the target gave it.
async fn create_collection(
    target: &EndClient,
    fence: &dyn Fence,
    c: &CollectionPlan,
    deadline: Instant,
) -> Result<CreatedCollection, Error> {
    let mut schema = c.schema.clone();
    // Milvus adds the dynamic `$meta` field itself and refuses a schema that names one.
    schema.fields.retain(|f| !f.is_dynamic);
    let mut properties: Vec<(String, String)> = c
        .properties
        .iter()
        .map(|kv| (kv.key.clone(), kv.value.clone()))
        .collect();
    if c.verify_field_ids && !properties.iter().any(|(k, _)| k == PRESERVE_FIELD_IDS) {
        properties.push((PRESERVE_FIELD_IDS.into(), "true".into()));
    }
    fenced(deadline, fence, || {
        target.grpc.create_collection(
            &c.target.db,
            &c.target.collection,
            &schema,
            c.shards_num,
            c.consistency_level as i32,
            properties.clone(),
            c.partition_num,
        )
    })
    .await??;
    let (db, name) = (&c.target.db, &c.target.collection);
    // Read at once, so that the name is still this create's. A describe that fails leaves
    // no id, and the collection is then dropped by name alone (DESIGN.md §2.1).
    let id = match retry(deadline, || target.grpc.describe_collection(db, name)).await {
        Ok(described) => Some(described.id),
        Err(e) => {
            tracing::warn!(collection = %c.target, error = %e, "could not read the new collection's id");
            None
        }
    };
    tracing::info!(end = %target.name, collection = %c.target, id, "created collection");
    Ok(CreatedCollection {
        db: db.clone(),
        name: name.clone(),
        id,
    })
}

/// The fields of `planned` that `made` (the collection as the target describes it) numbers
/// otherwise, as `name: planned id → made id`. The dynamic `$meta` field is not compared:
/// Milvus adds it itself and DescribeCollection does not show it.
fn mismatched_field_ids(planned: &CollectionSchema, made: &CollectionSchema) -> Vec<String> {
    planned
        .fields
        .iter()
        .filter(|field| !field.is_dynamic)
        .filter_map(|field| {
            let found = made.fields.iter().find(|f| f.name == field.name);
            match found.map(|f| f.field_id) {
                Some(id) if id == field.field_id => None,
                Some(id) => Some(format!("{}: {} → {id}", field.name, field.field_id)),
                None => Some(format!("{}: {} → absent", field.name, field.field_id)),
            }
        })
        .collect()
}

/// Waits until every secondary shows every collection of the plan with its partitions,
/// collection by collection in plan order, each once the target's DDL made it (`made`
/// counts those, see [`apply`]). A collection has `grace` from then to arrive; `arrived` is
/// called with its index once every secondary shows it, and `waiting` with what is awaited
/// while a secondary does not show it yet (`None` once it does).
pub async fn await_mirrors(
    ends: &Ends,
    plan: &RestorePlan,
    grace: Duration,
    mut made: watch::Receiver<usize>,
    arrived: &(dyn Fn(usize) + Sync),
    waiting: &(dyn Fn(Option<Waiting>) + Sync),
) -> Result<(), ArrivalError> {
    for (i, c) in plan.collections.iter().enumerate() {
        if made.wait_for(|n| *n > i).await.is_err() {
            return Err(ArrivalError::NotMade {
                collection: c.target.clone(),
            });
        }
        let made_at = Instant::now();
        let deadline = made_at + grace;
        let (db, name) = (&c.target.db, &c.target.collection);
        let mut waited = false;
        let mut say_at = made_at + SAY_WAITING_EVERY;
        for s in ends.secondaries() {
            let mut pause = MIRROR_DDL_POLL.0;
            loop {
                let here = match s.grpc.has_collection(db, name).await {
                    Ok(true) if c.partition_num > 0 => true,
                    Ok(true) => match s.grpc.show_partitions(db, name).await {
                        Ok(present) => c.partitions.iter().all(|p| present.contains(p)),
                        Err(_) => false,
                    },
                    _ => false,
                };
                if here {
                    break;
                }
                if Instant::now() >= deadline {
                    return Err(ArrivalError::Late {
                        collection: c.target.clone(),
                        secondary: s.name.clone(),
                    });
                }
                if Instant::now() >= say_at {
                    (waited, say_at) = (true, say_at + SAY_WAITING_EVERY);
                    waiting(Some(Waiting::Arrival {
                        collection: c.target.to_string(),
                        end: s.name.clone(),
                        since: made_at,
                    }));
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MIRROR_DDL_POLL.1);
            }
        }
        if waited {
            waiting(None);
        }
        arrived(i);
    }
    Ok(())
}

/// DropCollection, right after `fence` passed, sent by when that check stops counting:
/// a pause of this host between the two does not carry the drop past it (DESIGN.md §2.1).
fn drop_checked<'a>(
    target: &'a EndClient,
    fence: &dyn Fence,
    db: &'a str,
    name: &'a str,
) -> impl Future<Output = Result<(), crate::milvus::Error>> + 'a {
    faults::crash_point("drop-checked");
    target.grpc.drop_collection(db, name, fence.send_by())
}

/// Drops the collections a rolled-back restore created, so that nothing it made stays
/// behind and a rerun is not refused for "collection exists". Each is dropped only once
/// `fence` passed and while its name still holds the id recorded at its creation: a
/// collection another attempt made under the same name since is never dropped. Best
/// effort: reports what it could not drop, or did not because it is not this restore's;
/// stops at the first fence that fails.
pub async fn drop_created(
    ends: &Ends,
    fence: &dyn Fence,
    created: &[CreatedCollection],
    deadline: Instant,
) -> Result<Vec<String>, Lost> {
    let target = ends.target();
    let mut problems = Vec::new();
    for c in created {
        let (db, name) = (&c.db, &c.name);
        fence.check().await?;
        // Without a recorded id (the create's answer, or the write after it, was lost) the
        // name is all there is; a test may plant the bug of dropping by name anyway.
        if let (Some(recorded), false) = (c.id, faults::planted(faults::Bug::DropByName)) {
            match retry(deadline, || target.grpc.has_collection(db, name)).await {
                Ok(false) => continue,
                Ok(true) => {}
                Err(e) => {
                    problems.push(format!("could not look up {db}.{name}: {e}"));
                    continue;
                }
            }
            match retry(deadline, || target.grpc.describe_collection(db, name)).await {
                Ok(now) if now.id == recorded => {}
                Ok(now) => {
                    problems.push(format!(
                        "left {db}.{name} in place: it is collection {}, not {recorded} \
                         that this restore created (another attempt made it since)",
                        now.id
                    ));
                    continue;
                }
                Err(e) => {
                    problems.push(format!("could not describe {db}.{name}: {e}"));
                    continue;
                }
            }
        }
        // Asked again right before the drop, and before each retry of it.
        if let Err(e) = fenced(deadline, fence, || drop_checked(target, fence, db, name)).await? {
            problems.push(format!(
                "could not drop {db}.{name} created by this restore: {e}"
            ));
        }
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use milvus_proto::schema::FieldSchema;

    use super::*;

    fn schema(fields: &[(&str, i64)]) -> CollectionSchema {
        CollectionSchema {
            fields: fields
                .iter()
                .map(|(name, id)| FieldSchema {
                    name: (*name).into(),
                    field_id: *id,
                    is_dynamic: *name == "$meta",
                    ..FieldSchema::default()
                })
                .collect(),
            ..CollectionSchema::default()
        }
    }

    #[test]
    fn field_ids_are_compared_by_name_but_for_the_undescribed_dynamic_field() {
        let planned = schema(&[("pk", 200), ("vec", 201), ("n", 202), ("$meta", 203)]);
        let made = schema(&[("vec", 201), ("pk", 200), ("n", 202)]);
        assert!(mismatched_field_ids(&planned, &made).is_empty());
        assert_eq!(
            mismatched_field_ids(&planned, &schema(&[("pk", 100), ("vec", 201)])),
            ["pk: 200 → 100", "n: 202 → absent"]
        );
    }

    /// The report's and the journal's words for a collection whose jobs can never be
    /// created; the error carries the collection and the secondary for the engine.
    #[test]
    fn an_arrival_failure_names_the_collection_and_the_secondary() {
        let orders = Namespace::new("", "orders");
        let late = ArrivalError::Late {
            collection: orders.clone(),
            secondary: "prod-b".into(),
        };
        assert_eq!(
            late.to_string(),
            "collection default.orders did not arrive on secondary prod-b over CDC within the \
             mirror grace; check the replication stream"
        );
        let not_made = ArrivalError::NotMade { collection: orders };
        assert_eq!(
            not_made.to_string(),
            "the DDL on the target stopped before it made collection default.orders"
        );
    }
}
