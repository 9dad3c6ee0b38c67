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
//! A lease proves nothing to Milvus, which cannot check a fencing token; the engine re-reads
//! every end's job states right before it commits or aborts (docs/milvus-facts.md §6.2),
//! and a takeover re-reads the record under its new claim before acting.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use milvus_proto::etcd::etcdserverpb::{LeaseKeepAliveRequest, response_op::Response};
use serde::{Deserialize, Serialize};

use super::etcd_client::{self as etcd, EtcdClient};
use super::{
    Claim, Error, Journal, Listed, Removal, RestoreId, RestoreRecord, Result, Unreadable, Visit,
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
        journal
            .client
            .count_prefix(&journal.record_key_prefix())
            .await
            .map_err(connect)?;
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
        let answer = self
            .client
            .txn(
                vec![
                    etcd::absent(&claim),
                    etcd::modified_at(&key, kv.mod_revision),
                ],
                vec![
                    etcd::op_delete(&key),
                    etcd::op_delete_range(parts.as_bytes(), &parts_end),
                ],
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
        let prefix = format!("{}{id_prefix}", self.record_key_prefix());
        let end = etcd::prefix_end(prefix.as_bytes());
        let mut from = prefix.into_bytes();
        let mut keys = self.page_keys();
        loop {
            let page = match self.client.range_page(&from, &end, keys).await {
                Ok(page) => page,
                // Values written before the limit, or under a larger one, can make a page
                // larger than the client takes: the same page again, smaller.
                Err(e) if e.too_large() && keys > 1 => {
                    keys /= 2;
                    continue;
                }
                Err(e) => return Err(backend("list", e)),
            };
            if let Some(last) = page.kvs.last() {
                from = etcd::after(&last.key);
            }
            for kv in page.kvs {
                let key = String::from_utf8_lossy(&kv.key).into_owned();
                match self.read(&key, kv.value).await {
                    Ok(Some(record)) => visit(Listed::Record(record)),
                    Ok(None) => {}
                    // etcd, not the record, failed: the listing fails as a page would.
                    Err(error @ Error::Backend(_)) => return Err(error),
                    Err(error) => visit(Listed::Unreadable(Unreadable { key, error })),
                }
            }
            if !page.more {
                return Ok(());
            }
        }
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
