//! Verification: what a query on every end sees of a restore, against what the backup's data
//! holds.
//!
//! Import jobs that say Completed are not proof that the data is queryable: Milvus has
//! reported Completed over missing objects, and replicated row counts have drifted. So each
//! restored collection is loaded and `count(*)` is asked of every end, with strong consistency
//! (every write the end accepted is counted), for the collection and for each partition, and
//! held to the live rows read from the backup's data (inserted less every delete). A
//! collection with a partition key is counted as a whole: Milvus routes its rows to its
//! partitions itself and refuses a query that names them.
//!
//! Loading follows Milvus's rules for a replicating cluster: load and release are DDL, which a
//! secondary refuses and the target replicates, so they are sent to the target only, and every
//! end is then waited for until it says Loaded. A collection this stage loaded is released
//! again; one that was loaded already is left so. A collection that cannot be loaded (Milvus
//! loads a collection only once each vector field has an index) cannot be verified, and says
//! so: it never passes silently.
//!
//! A count cannot see a row whose values changed, or a deleted row shown in place of a live
//! one. With a sample ([`crate::backup::sample`]), the sampled keys are also fetched from
//! every end, every field, and held to the backup's rows value by value (by key alone, never
//! naming a partition); a sampled key that every delete removed must not be shown at all.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt as _;
use futures::future::join_all;

use serde::{Deserialize, Serialize};

use milvus_formats::binlog::Pk;
use milvus_formats::value::{self, Value};

use object_store::ObjectStore;

use crate::backup::sample::{self, Sample};
use crate::backup::{BackupFiles, Namespace, RestorePlan};
use crate::milvus::GrpcClient;

/// One end to verify, by name; `target` is the one that takes load and release.
pub struct End<'a> {
    pub name: &'a str,
    pub target: bool,
    pub grpc: &'a GrpcClient,
}

/// What one restored collection must show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    pub collection: Namespace,
    /// Its name in the backup, where a sample of it is read.
    pub source: String,
    /// Its live rows; `None` where the backup's data could not be read when it was restored.
    pub live: Option<i64>,
    /// The live rows of each partition, where known.
    pub partitions: BTreeMap<String, i64>,
}

/// What one end showed of one collection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shown {
    pub end: String,
    pub collection: String,
    pub live: Option<i64>,
    /// `count(*)` of the whole collection; `None` when it could not be asked.
    pub shows: Option<i64>,
    /// Partitions whose count is not their live rows: (partition, live, shows).
    pub partitions_differ: Vec<(String, i64, i64)>,
    /// Why it could not be verified on this end.
    pub unverifiable: Option<String>,
    /// The end says the collection does not exist: it was dropped after its commit (by a
    /// client, or by a host that lost the restore while paused: DESIGN.md §2.1).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gone: bool,
    /// What the sample found, when one was compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample: Option<Sampled>,
}

/// What one end showed of a collection's sampled keys.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sampled {
    /// Live keys fetched and compared field by field.
    pub rows: usize,
    /// Deleted keys held to be absent.
    pub absent: usize,
    /// Every difference found.
    pub differences: usize,
    /// The first differences, each naming the key and the field.
    pub first: Vec<String>,
}

/// The differences a sample names one by one; the rest are counted.
const DIFFERENCES_NAMED: usize = 5;

/// Why a collection without a vector index is not verified, and what to do about it.
pub const NO_INDEX: &str = "no vector index, so Milvus will not load it: restore with \
     `rebuild_index = true` (job file), `--rebuild_index` (CLI) or `restoreIndex` (REST), or \
     create one, then `lockstep verify` the restore";

/// Keys asked for in one query.
const KEYS_PER_QUERY: usize = 100;

impl Sampled {
    fn differ(&mut self, what: String) {
        self.differences += 1;
        if self.first.len() < DIFFERENCES_NAMED {
            self.first.push(what);
        }
    }
}

impl Shown {
    fn differs(&self) -> bool {
        self.unverifiable.is_none()
            && (self.gone
                || self.shows != self.live
                || !self.partitions_differ.is_empty()
                || self.sample.as_ref().is_some_and(|s| s.differences > 0))
    }
}

/// Why one end's answers about a collection stopped short.
enum Unasked {
    /// The end says the collection does not exist.
    Gone,
    Failed(String),
}

impl Unasked {
    /// `e`, which stopped `what`: a collection the end does not know is gone, anything else
    /// is said.
    fn from(e: &crate::milvus::Error, what: &str) -> Unasked {
        match e.is_collection_missing() {
            true => Unasked::Gone,
            false => Unasked::Failed(format!("{what}: {e}")),
        }
    }
}

impl Shown {
    fn unasked(&mut self, unasked: Unasked) {
        match unasked {
            Unasked::Gone => self.gone = true,
            Unasked::Failed(why) => self.unverifiable = Some(why),
        }
    }
}

/// What verification found, end by end and collection by collection.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verification {
    pub shown: Vec<Shown>,
}

impl Verification {
    /// Every end shows every collection's live rows.
    pub fn passed(&self) -> bool {
        self.shown
            .iter()
            .all(|s| s.unverifiable.is_none() && !s.differs())
    }

    /// The collections some end shows with other rows than the backup's data holds.
    pub fn mismatches(&self) -> impl Iterator<Item = &Shown> {
        self.shown.iter().filter(|s| s.differs())
    }

    /// The collections some end could not be asked about, with why.
    pub fn unverifiable(&self) -> impl Iterator<Item = &Shown> {
        self.shown.iter().filter(|s| s.unverifiable.is_some())
    }

    /// Why collections could not be asked about, each reason once (a missing index stops
    /// the load of every collection on every end), in order of first appearance.
    pub fn unverified(&self) -> Vec<Unverified<'_>> {
        let mut grouped: Vec<Unverified<'_>> = Vec::new();
        for s in self.unverifiable() {
            let why = s.unverifiable.as_deref().unwrap_or_default();
            let at = match grouped.iter().position(|u| u.why == why) {
                Some(at) => at,
                None => {
                    grouped.push(Unverified {
                        why,
                        collections: Vec::new(),
                        ends: Vec::new(),
                    });
                    grouped.len() - 1
                }
            };
            let u = &mut grouped[at];
            for (names, name) in [(&mut u.collections, &s.collection), (&mut u.ends, &s.end)] {
                if !names.contains(&name.as_str()) {
                    names.push(name);
                }
            }
        }
        grouped
    }
}

/// One reason collections could not be verified, with the collections and ends it held on.
#[derive(Debug, PartialEq, Eq)]
pub struct Unverified<'a> {
    pub why: &'a str,
    pub collections: Vec<&'a str>,
    pub ends: Vec<&'a str>,
}

impl std::fmt::Display for Unverified<'_> {
    /// The first few collections (the JSON report has every one), the ends, the reason.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const NAMED: usize = 5;
        let named = self.collections.len().min(NAMED);
        write!(f, "{}", self.collections[..named].join(", "))?;
        if self.collections.len() > named {
            write!(f, " and {} more", self.collections.len() - named)?;
        }
        write!(f, " on {}: {}", self.ends.join(", "), self.why)
    }
}

impl std::fmt::Display for Verification {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for unverified in self.unverified() {
            writeln!(f, "  not verified: {unverified}")?;
        }
        for s in &self.shown {
            let live = s.live.map_or("?".to_owned(), |n| n.to_string());
            match (&s.unverifiable, s.shows) {
                (Some(_), _) => {}
                (None, Some(shows)) => {
                    let verdict = if s.differs() { "MISMATCH" } else { "ok" };
                    let sampled = s.sample.as_ref().map_or(String::new(), |s| {
                        format!(" sampled={}+{} absent", s.rows, s.absent)
                    });
                    writeln!(
                        f,
                        "  {:<16} {:<36} live={live} shows={shows}{sampled} {verdict}",
                        s.end, s.collection
                    )?;
                    for (p, live, shows) in &s.partitions_differ {
                        writeln!(f, "    partition {p}: live={live} shows={shows}")?;
                    }
                    if let Some(sample) = s.sample.as_ref().filter(|s| s.differences > 0) {
                        for what in &sample.first {
                            writeln!(f, "    {what}")?;
                        }
                        let rest = sample.differences - sample.first.len();
                        if rest > 0 {
                            writeln!(f, "    and {rest} more")?;
                        }
                    }
                }
                (None, None) if s.gone => writeln!(
                    f,
                    "  {:<16} {:<36} live={live} GONE (dropped after its commit)",
                    s.end, s.collection
                )?,
                (None, None) => {}
            }
        }
        Ok(())
    }
}

/// How soon an end's load state is asked again after it first said not loaded; each wait
/// is twice the last, up to [`LOAD_POLL`]. A secondary asked as the target loads shows the
/// load once the stream brings it, mostly within milliseconds: with a first wait of
/// 200 ms, counting 1,000 collections eight at a time still added 13 % to the restore.
const LOAD_POLL_FIRST: Duration = Duration::from_millis(5);

/// The longest wait between two asks of an end's load state while it loads.
const LOAD_POLL: Duration = Duration::from_millis(200);

/// Where a sample's rows are read from: a backup, as planned (the restore's own plan, or a
/// plan made again from the backup), and how many keys of each collection.
pub struct Sampler<'a> {
    pub store: &'a dyn ObjectStore,
    pub backup: &'a BackupFiles,
    pub plan: &'a RestorePlan,
    pub keys: usize,
}

impl Sampler<'_> {
    /// The sample of the planned collection named `source` in the backup. A plan that
    /// folded L0 deletes wrote delta logs for them; those are read from the plan.
    async fn read(&self, source: &str) -> Result<Sample, String> {
        let wanted = Namespace::parse(source).map_err(|e| e.to_string())?;
        let collection = (self.plan.collections.iter())
            .find(|c| c.source == wanted)
            .ok_or_else(|| format!("{source} is not in the backup's plan"))?;
        let staged = &self.plan.files_to_stage;
        sample::sample(self.store, self.backup, staged, collection, self.keys)
            .await
            .map_err(|e| e.to_string())
    }
}

/// A backup a restore read, opened again and planned whole: what a sample is read from after
/// the restore (`lockstep verify --sample`, a recovery that has the job).
pub struct Reopened {
    store: crate::storage::OpenedStore,
    backup: BackupFiles,
    plan: RestorePlan,
}

/// Why a backup could not be opened again for its sample.
#[derive(Debug, thiserror::Error)]
pub enum ReopenError {
    #[error("cannot open {url}")]
    Open {
        url: String,
        #[source]
        source: crate::storage::Error,
    },
    #[error("cannot read backup {name} for its sample")]
    Read {
        name: String,
        #[source]
        source: crate::backup::Error,
    },
}

impl Reopened {
    /// Opens backup `name` under `root` of `storage`, reads it and plans all of it.
    pub async fn open(
        storage: &crate::config::StorageSpec,
        root: &str,
        name: &str,
    ) -> Result<Reopened, ReopenError> {
        let store = crate::storage::open(storage).map_err(|source| ReopenError::Open {
            url: storage.url.to_string(),
            source,
        })?;
        let location = crate::backup::BackupLocation::new(storage.url.as_str(), root, name);
        let read = |source| ReopenError::Read {
            name: name.to_owned(),
            source,
        };
        let backup = crate::backup::read(store.store.as_ref(), &location)
            .await
            .map_err(read)?;
        let options = crate::backup::RestoreOptions::default();
        let plan = crate::backup::plan(&backup, &options, crate::backup::Strategy::default())
            .map_err(read)?;
        Ok(Reopened {
            store,
            backup: backup.files,
            plan,
        })
    }

    /// A sampler of `keys` keys of each collection.
    pub fn sampler(&self, keys: usize) -> Sampler<'_> {
        Sampler {
            store: self.store.store.as_ref(),
            backup: &self.backup,
            plan: &self.plan,
            keys,
        }
    }
}

/// Collections verified at once. A collection's verification is mostly waiting: on its
/// load, and on a round trip for each count of each end. One at a time, 1,000 collections
/// spent seven seconds so. Each collection this stage loads is released once counted, so
/// this is also how many restored collections verification holds loaded at a time beyond
/// what was loaded before: few enough for a real cluster's query nodes.
const COLLECTIONS_AT_ONCE: usize = 8;

/// Partition counts asked at once of one end, beside the collection's: a collection may
/// have thousands of partitions, and [`COLLECTIONS_AT_ONCE`] collections are counted at once
/// on every end.
const PARTITIONS_AT_ONCE: usize = 8;

/// Counts every collection of `expected` on every end of `ends` (the target first), and with
/// a `sampler` compares its sample, loading what is not loaded, waiting at most `timeout` for
/// each collection to load everywhere. What is shown comes in `expected`'s order.
pub async fn run(
    ends: &[End<'_>],
    expected: &[Expected],
    sampler: Option<&Sampler<'_>>,
    timeout: Duration,
) -> Verification {
    // By index: a closure over a borrowed item would keep the restore's future from being
    // `Send` (rust-lang/rust#102211).
    let shown = futures::stream::iter(0..expected.len())
        .map(|i| sampled_collection(ends, &expected[i], sampler, timeout))
        .buffered(COLLECTIONS_AT_ONCE)
        .concat()
        .await;
    Verification { shown }
}

/// What every end shows of one collection, with its sample read first where one is asked.
async fn sampled_collection(
    ends: &[End<'_>],
    each: &Expected,
    sampler: Option<&Sampler<'_>>,
    timeout: Duration,
) -> Vec<Shown> {
    let sample = match sampler {
        Some(sampler) => Some(sampler.read(&each.source).await),
        None => None,
    };
    let read = sample.as_ref().and_then(|s| s.as_ref().ok());
    let mut shown = collection(ends, each, read, timeout).await;
    if let Some(Err(why)) = sample {
        for s in &mut shown {
            s.unverifiable
                .get_or_insert_with(|| format!("its sample cannot be read from the backup: {why}"));
        }
    }
    shown
}

/// What every end of `ends` shows of one collection: its count, and with `sample` the
/// sampled keys' rows; loaded on the target first where it is not, and released again.
pub async fn collection(
    ends: &[End<'_>],
    expected: &Expected,
    sample: Option<&Sample>,
    timeout: Duration,
) -> Vec<Shown> {
    let Namespace { db, collection } = &expected.collection;
    let shown = |end: &End<'_>| Shown {
        end: end.name.to_owned(),
        collection: expected.collection.to_string(),
        live: expected.live,
        shows: None,
        partitions_differ: Vec::new(),
        unverifiable: None,
        gone: false,
        sample: None,
    };
    let unverifiable = |why: String| -> Vec<Shown> {
        ends.iter()
            .map(|end| Shown {
                unverifiable: Some(why.clone()),
                ..shown(end)
            })
            .collect()
    };
    let Some(live) = expected.live else {
        return unverifiable(
            "the backup's data could not be read when it was restored, so its live rows are not known"
                .into(),
        );
    };
    let Some(target) = ends.iter().find(|e| e.target) else {
        return unverifiable("no target end to load it on".into());
    };
    // Gone from the target: nothing loads it, and the other ends are not asked.
    let gone_from_target = || -> Vec<Shown> {
        let why = format!("it is gone from {}, where it would be loaded", target.name);
        ends.iter()
            .map(|end| match end.target {
                true => Shown {
                    gone: true,
                    ..shown(end)
                },
                false => Shown {
                    unverifiable: Some(why.clone()),
                    ..shown(end)
                },
            })
            .collect()
    };
    let (loaded, partitions) = tokio::join!(
        target.grpc.is_loaded(db, collection),
        partitions_to_count(target, expected),
    );
    let loaded_before = match loaded {
        Ok(loaded) => loaded,
        Err(e) if e.is_collection_missing() => return gone_from_target(),
        Err(e) => {
            return unverifiable(format!(
                "its load state cannot be read on {}: {e}",
                target.name
            ));
        }
    };
    let partitions = match partitions {
        Ok(partitions) => partitions,
        Err(why) => return unverifiable(why),
    };
    if !loaded_before && let Err(e) = target.grpc.load_collection(db, collection).await {
        if e.is_collection_missing() {
            return gone_from_target();
        }
        return unverifiable(match e.is_index_missing() {
            // What milvus-backup, its REST API and lockstep's flags do by default: said in
            // the words that change it, not in Milvus's.
            true => NO_INDEX.to_owned(),
            false => format!("{} cannot load it: {e}", target.name),
        });
    }
    // Each end is asked at once: a secondary shows the load when the replication stream
    // brings it, whatever the other ends are doing.
    let out = join_all((0..ends.len()).map(|e| async move {
        let end = &ends[e];
        let mut seen = shown(end);
        match count_on(end, expected, partitions, timeout).await {
            Ok((shows, partitions_differ)) => {
                seen.shows = Some(shows);
                seen.partitions_differ = partitions_differ;
            }
            Err(unasked) => seen.unasked(unasked),
        }
        if let Some(sample) = sample.filter(|_| seen.unverifiable.is_none() && !seen.gone) {
            match sample_on(end, &expected.collection, sample).await {
                Ok(sampled) => seen.sample = Some(sampled),
                Err(unasked) => seen.unasked(unasked),
            }
        }
        if seen.differs() {
            tracing::error!(end = end.name, collection = %expected.collection, live, shows = seen.shows, "a query shows other rows than the backup's data holds");
        }
        seen
    }))
    .await;
    if !loaded_before && let Err(e) = target.grpc.release_collection(db, collection).await {
        tracing::warn!(end = target.name, collection = %expected.collection, error = %e, "could not release what verification loaded");
    }
    out
}

/// The sampled keys of `collection` fetched from one end, every field, held to the backup's
/// rows; the sampled deleted keys held to be absent.
async fn sample_on(
    end: &End<'_>,
    collection: &Namespace,
    sample: &Sample,
) -> Result<Sampled, Unasked> {
    let Namespace { db, collection } = collection;
    let names: Vec<String> = sample.fields.iter().map(|f| f.name.clone()).collect();
    let pk_name = &names[0];
    let mut found = Sampled::default();
    let mut keys: Vec<(&Pk, Option<&[Value]>)> = (sample.rows.iter())
        .map(|r| (&r.pk, Some(r.values.as_slice())))
        .collect();
    keys.extend(sample.absent.iter().map(|pk| (pk, None)));
    for chunk in keys.chunks(KEYS_PER_QUERY) {
        let list: Vec<String> = chunk.iter().map(|(pk, _)| literal(pk)).collect();
        let expr = format!("{pk_name} in [{}]", list.join(", "));
        let answer = end
            .grpc
            .query(db, collection, &[], &expr, &names)
            .await
            .map_err(|e| Unasked::from(&e, "the sampled keys cannot be fetched"))?;
        let mut columns = Vec::with_capacity(names.len());
        for name in &names {
            let column = answer.iter().find(|f| &f.field_name == name);
            columns.push(match column.map(value::from_field_data) {
                Some(Ok(values)) => Some(values),
                Some(Err(e)) => {
                    return Err(Unasked::Failed(format!("the answer does not read: {e}")));
                }
                None => None,
            });
        }
        let shown_keys = columns[0]
            .as_ref()
            .ok_or_else(|| Unasked::Failed(format!("the answer holds no {pk_name} column")))?;
        for (pk, backup) in chunk {
            let row = shown_keys
                .iter()
                .position(|v| key_of(v).as_ref() == Some(*pk));
            match (backup, row) {
                (None, None) => found.absent += 1,
                (None, Some(_)) => {
                    found.absent += 1;
                    found.differ(format!("key {pk}: deleted, and shown"));
                }
                (Some(_), None) => {
                    found.rows += 1;
                    found.differ(format!("key {pk}: missing"));
                }
                (Some(values), Some(row)) => {
                    found.rows += 1;
                    for (i, field) in sample.fields.iter().enumerate().skip(1) {
                        let shown = columns[i].as_ref().and_then(|c| c.get(row));
                        match shown {
                            Some(shown) if values[i].same(shown) => {}
                            Some(shown) => found.differ(format!(
                                "key {pk}, field {}: the backup holds {}, the end shows {}{}",
                                field.name,
                                values[i].brief(),
                                shown.brief(),
                                first_difference(&values[i], shown)
                            )),
                            None => found.differ(format!(
                                "key {pk}, field {}: not in the answer",
                                field.name
                            )),
                        }
                    }
                }
            }
        }
    }
    if found.differences > 0 {
        tracing::error!(end = end.name, %collection, differences = found.differences, first = ?found.first.first(), "a sampled row differs from the backup's");
    }
    Ok(found)
}

/// Where two vectors' bytes first differ: a changed vector often shares its first bytes.
fn first_difference(backup: &Value, shown: &Value) -> String {
    match (backup, shown) {
        (Value::Bytes(a), Value::Bytes(b)) => (a.iter().zip(b))
            .position(|(x, y)| x != y)
            .map_or(String::new(), |at| {
                format!(" (first difference at byte {at})")
            }),
        _ => String::new(),
    }
}

/// `pk` written as an expression's literal: a string quoted as JSON quotes it.
fn literal(pk: &Pk) -> String {
    match pk {
        Pk::Int(i) => i.to_string(),
        Pk::VarChar(s) => serde_json::Value::from(s.as_str()).to_string(),
    }
}

fn key_of(value: &Value) -> Option<Pk> {
    match value {
        Value::Int(i) => Some(Pk::Int(*i)),
        Value::String(s) => Some(Pk::VarChar(s.clone())),
        _ => None,
    }
}

/// The partitions of `expected` a count may name: every one, but none of a collection with
/// a partition key, whose partitions Milvus refuses to have named in a query (it routes rows
/// to them itself; docs/milvus-facts.md §4.5), so that it is counted as a whole. Whether it
/// has one is asked of the target's schema: a restore's report, and so `lockstep verify`,
/// holds its live rows per partition either way.
async fn partitions_to_count<'a>(
    target: &End<'_>,
    expected: &'a Expected,
) -> Result<&'a BTreeMap<String, i64>, String> {
    static NONE: BTreeMap<String, i64> = BTreeMap::new();
    if expected.partitions.is_empty() {
        return Ok(&expected.partitions);
    }
    let Namespace { db, collection } = &expected.collection;
    let info = (target.grpc.describe_collection(db, collection).await)
        .map_err(|e| format!("its schema cannot be read on {}: {e}", target.name))?;
    match info.schema.fields.iter().any(|f| f.is_partition_key) {
        true => Ok(&NONE),
        false => Ok(&expected.partitions),
    }
}

/// `count(*)` of the collection on one end once it is loaded there, and of each of
/// `partitions` whose count differs from its live rows.
async fn count_on(
    end: &End<'_>,
    expected: &Expected,
    partitions: &BTreeMap<String, i64>,
    timeout: Duration,
) -> Result<(i64, Vec<(String, i64, i64)>), Unasked> {
    let Namespace { db, collection } = &expected.collection;
    let deadline = tokio::time::Instant::now() + timeout;
    let mut pause = LOAD_POLL_FIRST;
    loop {
        match end.grpc.is_loaded(db, collection).await {
            Ok(true) => break,
            Ok(false) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(LOAD_POLL);
            }
            Ok(false) => {
                let why = format!("not loaded within {}s", timeout.as_secs());
                return Err(Unasked::Failed(why));
            }
            Err(e) => return Err(Unasked::from(&e, "its load state cannot be read")),
        }
    }
    // The collection's count beside its partitions', a few at a time: a verification is
    // mostly such waits, and one after another took five round trips for four partitions.
    // By index, as in `run`.
    let names: Vec<&String> = partitions.keys().collect();
    let (shows, counts) = tokio::join!(
        end.grpc.count_rows(db, collection, &[]),
        futures::stream::iter(0..names.len())
            .map(|i| end
                .grpc
                .count_rows(db, collection, std::slice::from_ref(names[i])))
            .buffered(PARTITIONS_AT_ONCE)
            .collect::<Vec<_>>()
    );
    let shows = shows.map_err(|e| Unasked::from(&e, "count(*) failed"))?;
    let mut differ = Vec::new();
    for ((partition, live), n) in partitions.iter().zip(counts) {
        let n =
            n.map_err(|e| Unasked::from(&e, &format!("count(*) of partition {partition} failed")))?;
        if n != *live {
            differ.push((partition.clone(), *live, n));
        }
    }
    Ok((shows, differ))
}
