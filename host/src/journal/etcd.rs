//! The journal a fleet shares: restore records in etcd, claims held by etcd leases.
//!
//! Keys under the prefix of `etcd://HOST:PORT/prefix`:
//! - `{prefix}/claim/{restore id}`: who works on the restore, attached to that host's lease.
//!   It disappears when the lease is revoked (the claim dropped) or expires (the host died or
//!   lost etcd for longer than the TTL), which is what lets another host take the restore
//!   over.
//! - `{prefix}/record/{restore id}`: the [`RestoreRecord`] as JSON, without a lease (a record
//!   outlives every host). Each save is a transaction that writes it only if the claim key
//!   still carries the saver's lease, so a host whose lease expired (a long pause, a
//!   partition) cannot overwrite the record of the host that took over: its save fails with
//!   [`Error::ClaimLost`].
//! - `{prefix}/part/{restore id}/{generation}/{index}`: a record larger than the value limit
//!   (`[journal] max_value_kib`; etcd refuses a request over `--max-request-bytes`, 1.5 MiB
//!   by default), in parts no larger, each written under the claim before the record key,
//!   which then holds only where they are ([`SplitHead`]). The record key is still what
//!   every save writes last and what the fence compares, so a split record is fenced as a
//!   whole one is; the save that writes it deletes, in the same transaction, every part
//!   that is not its own (a replaced record's, or one a lost save left).
//!
//! - `{prefix}/index/…`: the index entries ([`super::index`]), empty keys written and
//!   removed in the transaction that saves (or removes) the record, so they never disagree
//!   with it; `{prefix}/index/built` once every record written before the index was entered.
//!
//! A lease proves nothing to Milvus, which cannot check a fencing token; the engine re-reads
//! every end's job states right before it commits or aborts (docs/milvus-facts.md §6.2),
//! and a takeover re-reads the record under its new claim before acting.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use milvus_proto::etcd::etcdserverpb::{LeaseKeepAliveRequest, RequestOp, response_op::Response};
use milvus_proto::etcd::mvccpb::KeyValue;
use serde::{Deserialize, Serialize};

use super::etcd_client::{self as etcd, EtcdClient};
use super::index::{self, outcome_label, outcome_labels};
use super::{
    Claim, Error, Journal, Listed, Listing, Newest, Removal, RestoreId, RestoreRecord, Result,
    Unreadable, Visit,
};
pub use crate::config::{DEFAULT_LEASE_TTL, EtcdLocation, LocationError, ValueLimit};

/// Bound on connecting and on each request, so a dead etcd fails a save instead of hanging
/// a restore.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// How many times a read of a split record starts again from its record key when its parts
/// went away meanwhile (a save replaced them): more means a record saved that often while
/// one read lasts, which no restore does (it writes progress every 3 s at most).
const SPLIT_READS: usize = 3;

/// The most keys one range asks for: a page of small records.
const PAGE_KEYS: i64 = 256;

/// How many records one transaction of the index's first build enters: each takes a compare
/// and 12 operations, and etcd takes 128 operations a transaction by default.
const BUILD_BATCH: usize = 8;

/// What the record key holds when the record did not fit in one value: where its parts are.
/// A record never has this one field alone, so the two read apart.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SplitHead {
    split: Split,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Split {
    /// Random per save, so that no two saves write the same part keys.
    generation: String,
    parts: usize,
    bytes: usize,
}

/// Who holds a claim: shown to people in `Busy`, and read by a host to recognise a claim it
/// dropped itself but whose lease revocation has not landed yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Holder {
    host: String,
    pid: u32,
    /// Random per journal instance: two processes on one host never share it.
    instance: String,
}

impl Holder {
    fn describe(&self) -> String {
        format!("lockstep process {} on {}", self.pid, self.host)
    }
}

/// A claim this process holds: the lease it lives under and whether that lease is known
/// to be gone.
struct Held {
    lease: i64,
    lost: Arc<AtomicBool>,
    /// The record's revision as this claim last wrote it, or found it when it was taken;
    /// `None` while there is none. Nobody else can write it while the claim holds, so any
    /// other revision means the claim was lost.
    known: Option<i64>,
}

/// The etcd journal. Cheap to clone: one client, shared state.
#[derive(Clone)]
pub struct EtcdJournal {
    client: EtcdClient,
    prefix: String,
    ttl: Duration,
    /// The largest value written; a record larger is split.
    value_limit: usize,
    me: Holder,
    // No await happens while this is held.
    held: Arc<Mutex<HashMap<RestoreId, Held>>>,
}

struct EtcdClaim {
    id: RestoreId,
    lease: i64,
    held: Arc<Mutex<HashMap<RestoreId, Held>>>,
    client: EtcdClient,
    keep_alive: tokio::task::JoinHandle<()>,
}

impl Claim for EtcdClaim {
    fn restore_id(&self) -> &RestoreId {
        &self.id
    }
}

impl Drop for EtcdClaim {
    /// Stops renewing and revokes the lease, so the claim key goes at once rather than
    /// after the TTL.
    fn drop(&mut self) {
        self.keep_alive.abort();
        self.held
            .lock()
            .expect("held-claims lock: no panics under it")
            .remove(&self.id);
        let client = self.client.clone();
        let lease = self.lease;
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(e) = client.lease_revoke(lease).await {
                    tracing::debug!(lease, error = %e, "lease revoke failed; it expires by itself");
                }
            });
        }
    }
}

fn backend(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Backend(format!("etcd {what}: {e}"))
}

impl EtcdJournal {
    /// Connects to the members of `location`, refusing plain http to one that is not on this
    /// host unless the host config says `insecure = true`.
    pub async fn connect(location: &EtcdLocation) -> Result<EtcdJournal> {
        let exposed = location.exposed();
        if !exposed.is_empty() {
            return Err(Error::Backend(format!(
                "etcd at {} is reached over plain http from another host, where anyone on the \
                 path could read and write the journal: give the host config's [journal] a \
                 tls table (and user and password_env), or insecure = true to accept it",
                exposed.join(",")
            )));
        }
        let ttl = location.lease_ttl;
        let connect =
            |e: etcd::CallError| backend(&format!("connect {}", location.endpoints.join(",")), e);
        let client = (EtcdClient::connect(location, REQUEST_TIMEOUT).await).map_err(connect)?;
        let journal = EtcdJournal {
            client,
            prefix: location.prefix.clone(),
            ttl,
            value_limit: location.value_limit.0,
            me: Holder {
                host: host_name(),
                pid: std::process::id(),
                instance: hex::encode(rand_bytes()),
            },
            held: Arc::default(),
        };
        // Fail now, not at the first restore, when etcd is not there.
        let built = (journal.client.get(&journal.index_key("built")).await).map_err(connect)?;
        if built.is_none() {
            journal.build_index().await?;
        }
        Ok(journal)
    }

    fn claim_key(&self, id: &RestoreId) -> String {
        format!("{}/claim/{id}", self.prefix)
    }

    fn record_key(&self, id: &RestoreId) -> String {
        format!("{}/record/{id}", self.prefix)
    }

    fn record_key_prefix(&self) -> String {
        format!("{}/record/", self.prefix)
    }

    fn index_key(&self, entry: &str) -> String {
        format!("{}/index/{entry}", self.prefix)
    }

    fn open_key(&self, id: &RestoreId) -> String {
        self.index_key(&format!("open/{id}"))
    }

    fn outcome_key(&self, label: &str, id: &RestoreId) -> String {
        self.index_key(&format!("outcome/{label}/{id}"))
    }

    /// The index keys `record` has, and those of its id it does not have (other outcomes',
    /// the open entry of one that is not open).
    fn index_entries(&self, record: &RestoreRecord) -> (Vec<String>, Vec<String>) {
        let started = self.index_key(&format!("started/{}", index::started_name(record)));
        let own = outcome_label(record.outcome);
        let (mut has, mut not) = (vec![started], vec![]);
        for label in outcome_labels() {
            let key = self.outcome_key(label, &record.id);
            if label == own {
                has.push(key)
            } else {
                not.push(key)
            }
        }
        let open = self.open_key(&record.id);
        if record.is_open() {
            has.push(open)
        } else {
            not.push(open)
        }
        (has, not)
    }

    /// The writes of `record`'s index entries and the removal of those it does not have:
    /// operations of the transaction that writes it.
    fn index_ops(&self, record: &RestoreRecord) -> Vec<RequestOp> {
        let (has, not) = self.index_entries(record);
        (has.iter().map(|key| etcd::op_put(key, Vec::new(), 0)))
            .chain(not.iter().map(|key| etcd::op_delete(key)))
            .collect()
    }

    /// Enters every record written before the index (once per journal): in transactions
    /// that hold only while each record is as read, so a save meanwhile (which writes its own
    /// entries) is never undone; a few records a transaction, each alone again when one of
    /// them changed. A record that does not read is left to whole listings.
    async fn build_index(&self) -> Result<()> {
        let mut pages = self.pages(&self.record_key_prefix());
        let mut entered = 0usize;
        while let Some(kvs) = pages.next(&self.client).await? {
            let mut read = Vec::new();
            for kv in kvs {
                let key = String::from_utf8_lossy(&kv.key).into_owned();
                match self.read(&key, kv.value).await {
                    Ok(Some(record)) => read.push((key, kv.mod_revision, record)),
                    Ok(None) => {}
                    Err(error @ Error::Backend(_)) => return Err(error),
                    Err(e) => {
                        tracing::warn!(record = %key, error = %e, "a journal record does not read: whole listings name it, the index does not")
                    }
                }
            }
            for batch in read.chunks(BUILD_BATCH) {
                if !self.enter_unchanged(batch).await? {
                    for one in batch {
                        self.enter_unchanged(std::slice::from_ref(one)).await?;
                    }
                }
                entered += batch.len();
            }
        }
        let built = etcd::op_put(&self.index_key("built"), Vec::new(), 0);
        (self.client.txn(vec![], vec![built], vec![]).await).map_err(|e| backend("index", e))?;
        tracing::info!(prefix = %self.prefix, records = entered, "indexed the journal's records");
        Ok(())
    }

    /// Writes the index entries of `records` (key, revision read, record) if none changed.
    async fn enter_unchanged(&self, records: &[(String, i64, RestoreRecord)]) -> Result<bool> {
        let unchanged = (records.iter())
            .map(|(key, revision, _)| etcd::modified_at(key, *revision))
            .collect();
        let writes = (records.iter())
            .flat_map(|(_, _, record)| self.index_ops(record))
            .collect();
        let answer =
            (self.client.txn(unchanged, writes, vec![]).await).map_err(|e| backend("index", e))?;
        Ok(answer.succeeded)
    }

    /// The keys under `prefix` with their values, a page at a time.
    fn pages(&self, prefix: &str) -> Pages {
        Pages {
            from: prefix.as_bytes().to_vec(),
            end: etcd::prefix_end(prefix.as_bytes()),
            keys: self.page_keys(),
            done: false,
        }
    }

    /// The record `id` as a listing shows it: read, or named as not reading; `None` when it
    /// is gone (removed since its index entry was read). `Err` when etcd fails.
    async fn listed(&self, id: &RestoreId) -> Result<Option<Listed>> {
        let key = self.record_key(id);
        let found = self.client.get(&key).await.map_err(|e| backend("get", e))?;
        match found {
            None => Ok(None),
            Some(kv) => self.listed_of(key, kv.value).await,
        }
    }

    /// The record a listing found at `key`, holding `value`.
    async fn listed_of(&self, key: String, value: Vec<u8>) -> Result<Option<Listed>> {
        match self.read(&key, value).await {
            Ok(record) => Ok(record.map(Listed::Record)),
            // etcd, not the record, failed: the listing fails as a page would.
            Err(error @ Error::Backend(_)) => Err(error),
            Err(error) => Ok(Some(Listed::Unreadable(Unreadable { key, error }))),
        }
    }

    /// The newest `n` records, through the `started` index read backwards.
    async fn newest_async(&self, n: usize) -> Result<Listing> {
        let prefix = self.index_key("started/");
        let mut end = etcd::prefix_end(prefix.as_bytes());
        let mut newest = Newest::of(n);
        while !newest.full() {
            let page = (self.client)
                .keys_page_backwards(prefix.as_bytes(), &end, PAGE_KEYS)
                .await
                .map_err(|e| backend("list", e))?;
            if let Some(last) = page.kvs.last() {
                end.clone_from(&last.key);
            }
            for kv in &page.kvs {
                let name = String::from_utf8_lossy(&kv.key[prefix.len()..]).into_owned();
                let Some(id) = index::id_of_started(&name) else {
                    continue;
                };
                if newest.full() {
                    break;
                }
                if let Some(listed) = self.listed(&id).await? {
                    newest.take(listed);
                }
            }
            if !page.more {
                break;
            }
        }
        Ok(newest.done())
    }

    /// Hands `visit` the open records the `open` index names, and each that does not read.
    async fn scan_open_async(&self, visit: &mut Visit<'_>) -> Result<()> {
        let prefix = self.index_key("open/");
        let mut pages = self.pages(&prefix);
        while let Some(kvs) = pages.next(&self.client).await? {
            for kv in kvs {
                let name = String::from_utf8_lossy(&kv.key[prefix.len()..]).into_owned();
                let Ok(id) = RestoreId::parse(&name) else {
                    continue;
                };
                match self.listed(&id).await? {
                    Some(Listed::Record(record)) if !record.is_open() => {}
                    Some(listed) => visit(listed),
                    None => {}
                }
            }
        }
        Ok(())
    }

    async fn count_outcomes_async(&self) -> Result<BTreeMap<&'static str, u64>> {
        let mut counts = BTreeMap::new();
        for label in outcome_labels() {
            let prefix = self.index_key(&format!("outcome/{label}/"));
            let n = (self.client.count_prefix(&prefix).await).map_err(|e| backend("count", e))?;
            counts.insert(label, n.max(0) as u64);
        }
        Ok(counts)
    }

    /// Where the parts of the record at `record_key` go, each save's under a generation of
    /// its own.
    fn parts_prefix(&self, record_key: &str) -> String {
        let id = record_key
            .strip_prefix(&self.record_key_prefix())
            .unwrap_or(record_key);
        format!("{}/part/{id}/", self.prefix)
    }

    /// How many records one range asks for: as many as fit, at the value limit each, in half
    /// of the answer the client takes.
    fn page_keys(&self) -> i64 {
        let fit = etcd::RESPONSE_LIMIT / 2 / self.value_limit.max(1);
        (fit as i64).clamp(1, PAGE_KEYS)
    }

    async fn claim_async(&self, id: RestoreId) -> Result<Box<dyn Claim>> {
        let client = self.client.clone();
        let key = self.claim_key(&id);
        let record = self.record_key(&id);
        let holder = serde_json::to_string(&self.me).expect("a holder serializes");
        let lease = client
            .lease_grant(self.ttl)
            .await
            .map_err(|e| backend("lease grant", e))?;
        let put = etcd::op_put(&key, holder, lease);
        // Free: nobody holds the key.
        let answer = client
            .txn(
                vec![etcd::absent(&key)],
                vec![put.clone(), etcd::op_get(&record)],
                vec![etcd::op_get(&key)],
            )
            .await
            .map_err(|e| backend("claim", e))?;
        let mut won = answer.succeeded;
        let mut known = answer.succeeded.then(|| record_revision(&answer)).flatten();
        if !won {
            let existing = answer.responses.into_iter().find_map(|r| match r.response {
                Some(Response::ResponseRange(range)) => range.kvs.into_iter().next(),
                _ => None,
            });
            let theirs = existing
                .as_ref()
                .and_then(|kv| serde_json::from_slice::<Holder>(&kv.value).ok());
            let stale_own = theirs.as_ref() == Some(&self.me)
                && !self
                    .held
                    .lock()
                    .expect("held-claims lock: no panics under it")
                    .contains_key(&id);
            // A claim this journal dropped whose revocation has not landed yet: take it back
            // if nothing changed it since it was read.
            if stale_own && let Some(kv) = existing {
                let answer = client
                    .txn(
                        vec![etcd::modified_at(&key, kv.mod_revision)],
                        vec![put, etcd::op_get(&record)],
                        vec![],
                    )
                    .await
                    .map_err(|e| backend("claim", e))?;
                won = answer.succeeded;
                known = record_revision(&answer);
            }
            if !won {
                let _ = client.lease_revoke(lease).await;
                return Err(Error::Busy {
                    id,
                    holder: theirs.map_or_else(|| "another lockstep host".into(), |h| h.describe()),
                });
            }
        }
        let lost = Arc::new(AtomicBool::new(false));
        self.held
            .lock()
            .expect("held-claims lock: no panics under it")
            .insert(
                id.clone(),
                Held {
                    lease,
                    lost: Arc::clone(&lost),
                    known,
                },
            );
        let keep_alive = tokio::spawn(keep_alive(
            client.clone(),
            lease,
            self.ttl,
            lost,
            id.clone(),
        ));
        Ok(Box::new(EtcdClaim {
            id,
            lease,
            held: Arc::clone(&self.held),
            client,
            keep_alive,
        }))
    }

    async fn save_async(&self, claim: &dyn Claim, record: &RestoreRecord) -> Result<()> {
        if claim.restore_id() != &record.id {
            return Err(Error::ClaimLost(record.id.clone()));
        }
        let lease = {
            let held = self
                .held
                .lock()
                .expect("held-claims lock: no panics under it");
            match held.get(&record.id) {
                Some(h) if !h.lost.load(Ordering::SeqCst) => h.lease,
                _ => return Err(Error::ClaimLost(record.id.clone())),
            }
        };
        let key = self.record_key(&record.id);
        let json = serde_json::to_vec(record).map_err(|source| Error::Corrupt {
            path: key.clone(),
            source,
        })?;
        let claim_key = self.claim_key(&record.id);
        let parts = self.parts_prefix(&key);
        let all_parts = (parts.as_bytes(), etcd::prefix_end(parts.as_bytes()));
        let (head, others) = if json.len() <= self.value_limit {
            (json, vec![etcd::op_delete_range(all_parts.0, &all_parts.1)])
        } else {
            let split = Split {
                generation: hex::encode(rand_bytes()),
                parts: json.len().div_ceil(self.value_limit),
                bytes: json.len(),
            };
            let own = format!("{parts}{}/", split.generation);
            for (index, part) in json.chunks(self.value_limit).enumerate() {
                // Each part under the claim too: a host that lost it writes nothing at all.
                let answer = self
                    .client
                    .txn(
                        vec![etcd::under_lease(&claim_key, lease)],
                        vec![etcd::op_put(&format!("{own}{index:06}"), part, 0)],
                        vec![],
                    )
                    .await
                    .map_err(|e| backend("save", e))?;
                if !answer.succeeded {
                    return Err(Error::ClaimLost(record.id.clone()));
                }
            }
            let own_end = etcd::prefix_end(own.as_bytes());
            let head = serde_json::to_vec(&SplitHead { split }).expect("a split head serializes");
            let others = vec![
                etcd::op_delete_range(all_parts.0, own.as_bytes()),
                etcd::op_delete_range(&own_end, &all_parts.1),
            ];
            (head, others)
        };
        // Written only while the claim key carries this host's lease: the check happens in
        // etcd, atomically with the write, and with the removal of every part the record no
        // longer points at.
        let mut writes = vec![etcd::op_put(&key, head, 0)];
        writes.extend(others);
        writes.extend(self.index_ops(record));
        let answer = self
            .client
            .txn(vec![etcd::under_lease(&claim_key, lease)], writes, vec![])
            .await
            .map_err(|e| backend("save", e))?;
        if !answer.succeeded {
            return Err(Error::ClaimLost(record.id.clone()));
        }
        // The put's revision is the record key's mod revision from now on: the fence holds
        // the record to it.
        let revision = answer.header.map_or(0, |h| h.revision);
        if let Some(held) = self
            .held
            .lock()
            .expect("held-claims lock: no panics under it")
            .get_mut(&record.id)
        {
            held.known = Some(revision);
        }
        Ok(())
    }

    async fn fence_async(&self, claim: &dyn Claim) -> Result<()> {
        let id = claim.restore_id();
        let (lease, known) = {
            let held = self
                .held
                .lock()
                .expect("held-claims lock: no panics under it");
            match held.get(id) {
                Some(h) if !h.lost.load(Ordering::SeqCst) => (h.lease, h.known),
                _ => return Err(Error::ClaimLost(id.clone())),
            }
        };
        // One read in etcd, atomic: the claim key carries this host's lease, and the record
        // is still the one it last wrote (absent if it wrote none yet).
        let record = self.record_key(id);
        let unchanged = match known {
            Some(revision) => etcd::modified_at(&record, revision),
            None => etcd::absent(&record),
        };
        let answer = self
            .client
            .txn(
                vec![etcd::under_lease(&self.claim_key(id), lease), unchanged],
                vec![],
                vec![],
            )
            .await
            .map_err(|e| backend("fence", e))?;
        if !answer.succeeded {
            tracing::error!(restore = %id, "the claim is lost: its lease or its record changed hands");
            return Err(Error::ClaimLost(id.clone()));
        }
        Ok(())
    }

    async fn load_async(&self, id: &RestoreId) -> Result<Option<RestoreRecord>> {
        let key = self.record_key(id);
        let found = self.client.get(&key).await.map_err(|e| backend("get", e))?;
        match found {
            None => Ok(None),
            Some(kv) => self.read(&key, kv.value).await,
        }
    }

    /// One transaction deletes the record only while no claim key exists and the record is
    /// at the revision read here, finished and as listed: a host that claims it first keeps
    /// it, and one that claims it after finds none.
    async fn remove_async(&self, listed: &RestoreRecord) -> Result<Removal> {
        let key = self.record_key(&listed.id);
        let Some(kv) = (self.client.get(&key).await).map_err(|e| backend("get", e))? else {
            return Ok(Removal::Changed);
        };
        let now = self.read(&key, kv.value).await?;
        if now.as_ref() != Some(listed) || listed.is_unfinished() {
            return Ok(Removal::Changed);
        }
        let claim = self.claim_key(&listed.id);
        // A record saved in parts goes with its parts, in the same step.
        let parts = self.parts_prefix(&key);
        let parts_end = etcd::prefix_end(parts.as_bytes());
        // And with its index entries.
        let (has, not) = self.index_entries(listed);
        let mut deletes = vec![
            etcd::op_delete(&key),
            etcd::op_delete_range(parts.as_bytes(), &parts_end),
        ];
        deletes.extend(has.iter().chain(&not).map(|key| etcd::op_delete(key)));
        let answer = self
            .client
            .txn(
                vec![
                    etcd::absent(&claim),
                    etcd::modified_at(&key, kv.mod_revision),
                ],
                deletes,
                vec![etcd::op_get(&claim)],
            )
            .await
            .map_err(|e| backend("remove", e))?;
        if answer.succeeded {
            return Ok(Removal::Removed);
        }
        let holder = answer.responses.into_iter().find_map(|r| match r.response {
            Some(Response::ResponseRange(range)) => range.kvs.into_iter().next(),
            _ => None,
        });
        Ok(match holder {
            Some(kv) => Removal::Claimed {
                holder: serde_json::from_slice::<Holder>(&kv.value)
                    .map_or_else(|_| "another lockstep host".into(), |h| h.describe()),
            },
            None => Removal::Changed,
        })
    }

    /// The record whose key holds `value`: the value itself, or the parts it points at. A
    /// record replaced while its parts were read is read again from its key; `None` when
    /// the key went away meanwhile.
    async fn read(&self, key: &str, mut value: Vec<u8>) -> Result<Option<RestoreRecord>> {
        for _ in 0..SPLIT_READS {
            let Ok(SplitHead { split }) = serde_json::from_slice(&value) else {
                return parse(key, &value).map(Some);
            };
            if let Some(whole) = self.read_parts(key, &split).await? {
                return parse(key, &whole).map(Some);
            }
            match self.client.get(key).await.map_err(|e| backend("get", e))? {
                Some(kv) => value = kv.value,
                None => return Ok(None),
            }
        }
        Err(Error::Torn {
            key: format!("etcd key {key}"),
        })
    }

    /// The parts of one save of the record at `key`, joined, a page at a time; `None` when
    /// they are not all there (a later save replaced them).
    async fn read_parts(&self, key: &str, split: &Split) -> Result<Option<Vec<u8>>> {
        let own = format!("{}{}/", self.parts_prefix(key), split.generation);
        let end = etcd::prefix_end(own.as_bytes());
        // Sized by what arrives, not by what the head says: a head is anyone's who can
        // write under the prefix.
        let mut whole = Vec::new();
        let (mut from, mut count) = (own.into_bytes(), 0);
        loop {
            let page = (self.client.range_page(&from, &end, self.page_keys()).await)
                .map_err(|e| backend("get", e))?;
            if let Some(last) = page.kvs.last() {
                from = etcd::after(&last.key);
            }
            count += page.kvs.len();
            for kv in page.kvs {
                whole.extend_from_slice(&kv.value);
            }
            if !page.more {
                break;
            }
        }
        Ok((count == split.parts && whole.len() == split.bytes).then_some(whole))
    }

    /// Hands `visit` every record whose id starts with `id_prefix`, and those that do not
    /// read, a page of record keys at a time.
    async fn scan_async(&self, id_prefix: &str, visit: &mut Visit<'_>) -> Result<()> {
        let mut pages = self.pages(&format!("{}{id_prefix}", self.record_key_prefix()));
        while let Some(kvs) = pages.next(&self.client).await? {
            for kv in kvs {
                let key = String::from_utf8_lossy(&kv.key).into_owned();
                if let Some(listed) = self.listed_of(key, kv.value).await? {
                    visit(listed);
                }
            }
        }
        Ok(())
    }
}

/// A range read a page at a time, each page as many keys as fit in an answer.
struct Pages {
    from: Vec<u8>,
    end: Vec<u8>,
    keys: i64,
    done: bool,
}

impl Pages {
    /// The next page's keys and values; `None` past the last.
    async fn next(&mut self, client: &EtcdClient) -> Result<Option<Vec<KeyValue>>> {
        while !self.done {
            let page = match client.range_page(&self.from, &self.end, self.keys).await {
                Ok(page) => page,
                // Values written before the limit, or under a larger one, can make a page
                // larger than the client takes: the same page again, smaller.
                Err(e) if e.too_large() && self.keys > 1 => {
                    self.keys /= 2;
                    continue;
                }
                Err(e) => return Err(backend("list", e)),
            };
            if let Some(last) = page.kvs.last() {
                self.from = etcd::after(&last.key);
            }
            self.done = !page.more;
            return Ok(Some(page.kvs));
        }
        Ok(None)
    }
}

/// The mod revision of the record a claim transaction read with its second operation.
fn record_revision(answer: &milvus_proto::etcd::etcdserverpb::TxnResponse) -> Option<i64> {
    answer.responses.get(1).and_then(|r| match &r.response {
        Some(Response::ResponseRange(range)) => range.kvs.first().map(|kv| kv.mod_revision),
        _ => None,
    })
}

fn parse(key: &str, bytes: &[u8]) -> Result<RestoreRecord> {
    serde_json::from_slice(bytes).map_err(|source| Error::Corrupt {
        path: format!("etcd key {key}"),
        source,
    })
}

/// Renews `lease` every third of its TTL until aborted. When etcd answers that the lease is
/// gone (TTL 0), or no renewal got through for a whole TTL, the claim is marked lost: every
/// later save under it fails, since another host may already hold the restore. Opening the
/// stream (on whichever member answers) and each answer are awaited a third of the TTL at
/// most: a renewal that waited out a longer request limit would learn of a lease that had
/// already expired, with a short TTL. One that failed is tried again a twelfth of the TTL
/// later on the next member, so a renewal gets through within about three quarters of the
/// TTL of the last while any member answers.
async fn keep_alive(
    client: EtcdClient,
    lease: i64,
    ttl: Duration,
    lost: Arc<AtomicBool>,
    id: RestoreId,
) {
    let every = ttl / 3;
    let answer_within = REQUEST_TIMEOUT.min(every);
    let mut last_renewed = tokio::time::Instant::now();
    let mut channel = None;
    loop {
        // A stream just opened carries its first renewal already.
        let sent = match channel.as_mut() {
            None => {
                let open = tokio::time::timeout(answer_within, client.lease_keep_alive(lease));
                channel = open.await.ok().and_then(Result::ok);
                Ok(())
            }
            Some(stream) => stream
                .renew
                .send(LeaseKeepAliveRequest { id: lease })
                .await
                .map_err(drop),
        };
        let renewed = match channel.as_mut() {
            Some(stream) => match sent {
                Ok(()) => {
                    match tokio::time::timeout(answer_within, stream.answers.message()).await {
                        Ok(Ok(Some(answer))) if answer.ttl > 0 => true,
                        Ok(Ok(Some(_))) => {
                            tracing::error!(restore = %id, lease, "the claim's lease expired; this host no longer holds the restore");
                            lost.store(true, Ordering::SeqCst);
                            return;
                        }
                        _ => false,
                    }
                }
                Err(_) => false,
            },
            None => false,
        };
        let next = if renewed {
            last_renewed = tokio::time::Instant::now();
            every
        } else {
            channel = None;
            client.unpin();
            if last_renewed.elapsed() >= ttl {
                tracing::error!(restore = %id, lease, "no lease renewal got through for a whole TTL; the claim is lost");
                lost.store(true, Ordering::SeqCst);
                return;
            }
            // Soon, on the next member: a renewal that waited a third of the TTL for its
            // answer, then another third for its turn, would land after the lease expired.
            every / 4
        };
        tokio::time::sleep(next).await;
    }
}

fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".into())
}

/// 8 random bytes from the OS, through the `ring` the host already links.
fn rand_bytes() -> [u8; 8] {
    use ring::rand::SecureRandom as _;
    let mut bytes = [0u8; 8];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .expect("the OS random source is available");
    bytes
}

impl Journal for EtcdJournal {
    fn claim(&self, id: &RestoreId) -> BoxFuture<'_, Result<Box<dyn Claim>>> {
        Box::pin(self.claim_async(id.clone()))
    }

    fn save<'a>(
        &'a self,
        claim: &'a dyn Claim,
        record: &'a RestoreRecord,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.save_async(claim, record))
    }

    fn fence<'a>(&'a self, claim: &'a dyn Claim) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.fence_async(claim))
    }

    /// A quarter of the lease's TTL: a lease renewed every third of it has at least that
    /// left when etcd answers, so an answer acted on within it was not overtaken by a
    /// takeover (DESIGN.md §2.1).
    fn fence_fresh(&self) -> Option<Duration> {
        Some(self.ttl / 4)
    }

    fn load<'a>(&'a self, id: &'a RestoreId) -> BoxFuture<'a, Result<Option<RestoreRecord>>> {
        Box::pin(self.load_async(id))
    }

    fn scan<'a>(
        &'a self,
        id_prefix: &'a str,
        visit: &'a mut Visit<'_>,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.scan_async(id_prefix, visit))
    }

    fn newest(&self, n: usize) -> BoxFuture<'_, Result<Listing>> {
        Box::pin(self.newest_async(n))
    }

    fn scan_open<'a>(&'a self, visit: &'a mut Visit<'_>) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.scan_open_async(visit))
    }

    fn count_outcomes(&self) -> BoxFuture<'_, Result<BTreeMap<&'static str, u64>>> {
        Box::pin(self.count_outcomes_async())
    }

    fn remove<'a>(&'a self, listed: &'a RestoreRecord) -> BoxFuture<'a, Result<Removal>> {
        Box::pin(self.remove_async(listed))
    }

    fn ready(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let key = format!("{}/ready", self.prefix);
            let written = etcd::op_put(&key, host_name(), 0);
            (self.client.txn(vec![], vec![written], vec![]).await)
                .map_err(|e| backend("ready", e))?;
            (self.client.get(&key).await).map_err(|e| backend("ready", e))?;
            Ok(())
        })
    }
}
