//! The etcd journal against a real etcd: exclusive claims across hosts, saves fenced by the
//! claim's lease, records that outlive every claim, takeover after a lease is gone.

use std::path::Path;
use std::time::Duration;

use jiff::Timestamp;
use lockstep::config::HostConfig;
use lockstep::journal::etcd::{EtcdJournal, EtcdLocation};
use lockstep::journal::etcd_client::{self, EtcdClient};
use lockstep::journal::{
    Error, Journal, Outcome, RestoreId, RestorePhase, RestoreRecord, StoredReport,
};

use crate::support::{etcd, eventually};

fn record(id: &RestoreId, attempt: u32) -> RestoreRecord {
    RestoreRecord {
        mirror_grace_ms: 1000,
        started_at: Timestamp::from_second(1_700_000_000 + i64::from(attempt)).unwrap(),
        ..RestoreRecord::new(
            id.clone(),
            "orders",
            "abcdef0123456789",
            attempt,
            "b",
            vec![],
        )
    }
}

async fn journal(url: &str) -> EtcdJournal {
    let location = EtcdLocation::parse(&format!("{url}?lease_ttl=2")).unwrap();
    EtcdJournal::connect(&location)
        .await
        .expect("etcd journal connects")
}

#[tokio::test]
async fn claims_are_exclusive_across_hosts_and_records_outlive_them() {
    let Some(etcd) = etcd("exclusive").await else {
        return;
    };
    let url = etcd.journal_url("exclusive");
    let (a, b) = (journal(&url).await, journal(&url).await);
    let id = RestoreId::new("orders", "abcdef0123456789", 1);

    let claim = a.claim(&id).await.unwrap();
    match b.claim(&id).await {
        Err(Error::Busy { holder, .. }) => {
            assert!(holder.contains(&std::process::id().to_string()), "{holder}")
        }
        other => panic!("expected Busy, got {:?}", other.map(|_| ())),
    }
    let mut r = record(&id, 1);
    a.save(claim.as_ref(), &r).await.unwrap();
    r.outcome = Some(Outcome::Succeeded);
    a.save(claim.as_ref(), &r).await.unwrap();
    drop(claim);

    // Another host reads it back, and may claim it once the holder let go.
    assert_eq!(b.load(&id).await.unwrap(), Some(r.clone()));
    let claim = eventually(Duration::from_secs(5), || async { b.claim(&id).await.ok() })
        .await
        .expect("the dropped claim");
    drop(claim);

    let id2 = RestoreId::new("orders", "abcdef0123456789", 2);
    let other = RestoreId::new("orders", "ffff00000000", 1);
    for (id, attempt) in [(&id2, 2), (&other, 1)] {
        let claim = a.claim(id).await.unwrap();
        a.save(claim.as_ref(), &record(id, attempt)).await.unwrap();
    }
    let attempts = b.attempts("orders", "abcdef0123456789").await.unwrap();
    assert_eq!(
        attempts.iter().map(|r| r.attempt).collect::<Vec<_>>(),
        [1, 2]
    );
    assert_eq!(b.list().await.unwrap().whole().unwrap().len(), 3);
    assert_eq!(
        b.load(&RestoreId::parse("nope.ab.1").unwrap())
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn a_dropped_claim_can_be_taken_again_at_once_by_the_same_host() {
    let Some(etcd) = etcd("retake").await else {
        return;
    };
    let a = journal(&etcd.journal_url("retake")).await;
    let id = RestoreId::new("orders", "abcdef0123456789", 1);
    for _ in 0..3 {
        let claim = a
            .claim(&id)
            .await
            .expect("claimable right after its own drop");
        a.save(claim.as_ref(), &record(&id, 1)).await.unwrap();
    }
}

/// The lease going away (expiry after a pause, or revocation) ends the right to write: the
/// old holder's save fails with ClaimLost even after another host took over and wrote.
#[tokio::test]
async fn a_save_after_the_lease_is_gone_fails_with_claim_lost() {
    let Some(etcd) = etcd("lost").await else {
        return;
    };
    let url = etcd.journal_url("lost");
    let (a, b) = (journal(&url).await, journal(&url).await);
    let id = RestoreId::new("orders", "abcdef0123456789", 1);
    let claim = a.claim(&id).await.unwrap();
    a.save(claim.as_ref(), &record(&id, 1)).await.unwrap();

    // Revoke a's lease behind its back, as its expiry would.
    let location = EtcdLocation::parse(&url).unwrap();
    let raw = EtcdClient::connect(&location, Duration::from_secs(5))
        .await
        .unwrap();
    let key = format!("{}/claim/{id}", location.prefix);
    let lease = raw.get(&key).await.unwrap().expect("the claim key").lease;
    raw.lease_revoke(lease).await.unwrap();

    let mut newer = record(&id, 1);
    newer.phase = RestorePhase::Holding;
    let taken = b.claim(&id).await.expect("free once the lease is gone");
    b.save(taken.as_ref(), &newer).await.unwrap();

    let mut stale = record(&id, 1);
    stale.phase = RestorePhase::Importing;
    match a.save(claim.as_ref(), &stale).await {
        Err(Error::ClaimLost(lost)) => assert_eq!(lost, id),
        other => panic!("expected ClaimLost, got {other:?}"),
    }
    assert_eq!(
        a.load(&id).await.unwrap().unwrap().phase,
        RestorePhase::Holding
    );
}

/// The fence a host asks before every action: it holds while nobody else touched the
/// restore (a taken-over record included, from the revision found at the claim), and fails
/// once another host took the claim and wrote, even while the old claim's lease would
/// still be renewed: the record's revision moved.
#[tokio::test]
async fn the_fence_holds_until_another_host_writes_the_record() {
    let Some(etcd) = etcd("fence").await else {
        return;
    };
    let url = etcd.journal_url("fence");
    let (a, b) = (journal(&url).await, journal(&url).await);
    let id = RestoreId::new("orders", "abcdef0123456789", 1);
    let claim = a.claim(&id).await.unwrap();
    a.fence(claim.as_ref())
        .await
        .expect("held before any write");
    a.save(claim.as_ref(), &record(&id, 1)).await.unwrap();
    a.fence(claim.as_ref())
        .await
        .expect("held after its own write");
    drop(claim);

    // Taken over (as after a dead host): the record is there, written by someone else.
    let claim = eventually(Duration::from_secs(10), || async {
        b.claim(&id).await.ok()
    })
    .await
    .expect("the claim free again");
    b.fence(claim.as_ref())
        .await
        .expect("held from the record it found");

    // Behind b's back, a record written under a claim that is not b's lease: what a
    // second holder after b's lapse would do. The raw write stands for it.
    let location = EtcdLocation::parse(&url).unwrap();
    let raw = EtcdClient::connect(&location, Duration::from_secs(5))
        .await
        .unwrap();
    let key = format!("{}/record/{id}", location.prefix);
    let json = serde_json::to_vec(&record(&id, 1)).unwrap();
    raw.txn(
        vec![],
        vec![lockstep::journal::etcd_client::op_put(&key, json, 0)],
        vec![],
    )
    .await
    .unwrap();
    match b.fence(claim.as_ref()).await {
        Err(Error::ClaimLost(lost)) => assert_eq!(lost, id),
        other => panic!("expected ClaimLost, got {other:?}"),
    }
}

/// A held claim survives many TTLs because it is renewed. (A host that stops renewing, being
/// killed, is taken over after the TTL: the fleet tests kill real processes.)
#[tokio::test]
async fn a_claim_is_renewed_while_held() {
    let Some(etcd) = etcd("renew").await else {
        return;
    };
    let url = etcd.journal_url("renew");
    let (a, b) = (journal(&url).await, journal(&url).await);
    let id = RestoreId::new("orders", "abcdef0123456789", 1);
    let claim = a.claim(&id).await.unwrap();
    // Three TTLs of 2s.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(matches!(b.claim(&id).await, Err(Error::Busy { .. })));
    a.save(claim.as_ref(), &record(&id, 1)).await.unwrap();
}

#[tokio::test]
async fn connecting_to_nothing_fails_with_the_endpoint_named() {
    let port = crate::support::free_port().unwrap();
    let location = EtcdLocation::parse(&format!("etcd://127.0.0.1:{port}/x")).unwrap();
    let err = match EtcdJournal::connect(&location).await {
        Ok(_) => panic!("nothing listens on {port}"),
        Err(e) => e,
    };
    assert!(err.to_string().contains(&port.to_string()), "{err}");
}

/// An etcd of `test`'s own, to stop and start (its data directory, the server, the journal
/// URL); `None`, said, without an etcd binary.
async fn own_etcd(test: &str) -> Option<(tempfile::TempDir, e2e::etcd::EtcdServer, String)> {
    let Some(binary) = e2e::etcd::binary() else {
        e2e::unavailable(test, "no etcd binary on PATH");
        return None;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = e2e::etcd::EtcdServer::start(&binary, dir.path())
        .await
        .unwrap();
    let url = format!("etcd://{}/{test}", server.address());
    Some((dir, server, url))
}

/// The fault runner's etcd (stopped and started by its faults) says at once why it could not
/// start, from its own log, rather than waiting out its 30 s; and starts again on its data
/// once the port is free.
#[tokio::test]
async fn a_seeds_etcd_that_cannot_bind_says_why_at_once() {
    let Some((_dir, mut server, url)) =
        own_etcd("a_seeds_etcd_that_cannot_bind_says_why_at_once").await
    else {
        return;
    };
    let id = RestoreId::new("orders", "abcdef0123456789", 1);
    {
        let journal = journal(&url).await;
        let claim = journal.claim(&id).await.unwrap();
        journal.save(claim.as_ref(), &record(&id, 1)).await.unwrap();
    }
    server.kill().await.unwrap();

    let squatter = std::net::TcpListener::bind(server.address()).unwrap();
    let began = std::time::Instant::now();
    let err = format!("{:#}", server.up().await.unwrap_err());
    assert!(began.elapsed() < Duration::from_secs(10), "{err}");
    assert!(err.contains("address already in use"), "{err}");
    let port = server.address().rsplit(':').next().unwrap().to_owned();
    assert!(
        err.contains(&format!("port {port}")),
        "the port is named: {err}"
    );

    drop(squatter);
    server.up().await.unwrap();
    let journal = journal(&url).await;
    let saved = journal.load(&id).await.unwrap();
    assert_eq!(
        saved.map(|r| r.attempt),
        Some(1),
        "the data outlived both starts"
    );
}

/// A record that does not read is one bad record: a listing names it by its key and lists
/// the others; only the attempts of its own job, which must all be read, fail on it.
#[tokio::test]
async fn a_record_that_does_not_read_is_one_bad_record() {
    let Some(etcd) = etcd("bad-record").await else {
        return;
    };
    let url = etcd.journal_url("bad-record");
    let a = journal(&url).await;
    let good = RestoreId::new("orders", "abcdef0123456789", 1);
    let claim = a.claim(&good).await.unwrap();
    a.save(claim.as_ref(), &record(&good, 1)).await.unwrap();
    drop(claim);
    let location = EtcdLocation::parse(&url).unwrap();
    let raw = EtcdClient::connect(&location, Duration::from_secs(5))
        .await
        .unwrap();
    let bad = format!("{}/record/broken.ffff00000000.1", location.prefix);
    let put = lockstep::journal::etcd_client::op_put(&bad, b"{ not a record".to_vec(), 0);
    raw.txn(vec![], vec![put], vec![]).await.unwrap();

    let listing = a.list().await.expect("listed despite the bad record");
    let ids: Vec<&RestoreId> = listing.records.iter().map(|r| &r.id).collect();
    assert_eq!(ids, [&good]);
    let keys: Vec<&str> = listing.unreadable.iter().map(|u| u.key.as_str()).collect();
    assert_eq!(keys, [bad.as_str()]);
    assert!(matches!(listing.unreadable[0].error, Error::Corrupt { .. }));
    assert_eq!(
        a.attempts("orders", "abcdef0123456789")
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(a.attempts("broken", "ffff00000000").await.is_err());
}

/// Readiness is the journal's to say: ready while etcd answers a write and a read, not while
/// it is down, ready again once it is back; a record that does not parse is not its concern.
#[tokio::test]
async fn readiness_follows_etcd() {
    let Some((_dir, mut server, url)) = own_etcd("readiness_follows_etcd").await else {
        return;
    };
    let journal = journal(&url).await;
    journal.ready().await.expect("ready with etcd up");
    server.kill().await.unwrap();
    let err = journal.ready().await.expect_err("not ready with etcd down");
    assert!(err.to_string().contains("etcd ready"), "{err}");
    server.up().await.unwrap();
    e2e::eventually(Duration::from_secs(30), || async {
        journal.ready().await.ok()
    })
    .await
    .expect("ready again once etcd is back");
}

/// etcdctl against `server` as its admin (the test's own tool: it trusts the server without
/// checking its name, which is the CA's test name, not 127.0.0.1).
fn etcdctl(server: &e2e::etcd::EtcdServer, certs: &e2e::tls::Certs, args: &[&str]) {
    let out = std::process::Command::new("etcdctl")
        .arg(format!("--endpoints=https://{}", server.address()))
        .arg(format!("--cacert={}", certs.ca.display()))
        .arg(format!("--cert={}", certs.client_cert.display()))
        .arg(format!("--key={}", certs.client_key.display()))
        .args(["--insecure-skip-tls-verify", "--user=root:root-password"])
        .args(args)
        .output()
        .expect("etcdctl runs (Debian's etcd-client)");
    assert!(
        out.status.success() || args == ["user", "add", "root:root-password"],
        "etcdctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An etcd under `dir` that serves clients only over TLS (with a certificate for
/// [`e2e::tls::SERVER_NAME`]) and checks users: `lockstep`, whose password is
/// `journal-password`, may read and write under `/j/`. `None`, said, without an etcd binary.
pub async fn etcd_with_tls_and_users(
    test: &str,
    dir: &Path,
) -> Option<(e2e::etcd::EtcdServer, e2e::tls::Certs)> {
    let Some(binary) = e2e::etcd::binary() else {
        e2e::unavailable(test, "no etcd binary on PATH");
        return None;
    };
    let certs = e2e::tls::Certs::generate(&dir.join("certs")).unwrap();
    let server = e2e::etcd::EtcdServer::start_tls(&binary, dir, certs.clone())
        .await
        .unwrap();
    for args in [
        &["user", "add", "root:root-password"][..],
        &["user", "grant-role", "root", "root"],
        &["role", "add", "journal"],
        &[
            "role",
            "grant-permission",
            "journal",
            "--prefix=true",
            "readwrite",
            "/j/",
        ],
        &["user", "add", "lockstep:journal-password"],
        &["user", "grant-role", "lockstep", "journal"],
        &["auth", "enable"],
    ] {
        etcdctl(&server, &certs, args);
    }
    Some((server, certs))
}

/// The variable the test's host config names for the journal user's password.
const PASSWORD_VAR: &str = "LOCKSTEP_TEST_ETCD_PASSWORD";

/// An etcd that serves clients only over TLS with a certificate its CA signed, and checks
/// users: the journal reaches it as the host config's `[journal]` says, signs in again once
/// its token expired, and is refused, with the reason, without the right password or its TLS.
#[tokio::test]
async fn a_journal_on_an_etcd_with_tls_and_users() {
    let dir = tempfile::tempdir().unwrap();
    let Some((server, certs)) = etcd_with_tls_and_users("etcd with TLS", dir.path()).await else {
        return;
    };
    let config = |tls: bool, user: bool| {
        let mut text = format!("[journal]\netcd = \"etcd://{}/j\"\n", server.address());
        if tls {
            text.push_str(&format!(
                "tls = {{ ca_cert = \"{}\", client_cert = \"{}\", client_key = \"{}\", server_name = \"{}\" }}\n",
                certs.ca.display(),
                certs.client_cert.display(),
                certs.client_key.display(),
                e2e::tls::SERVER_NAME
            ));
        }
        if user {
            text.push_str(&format!(
                "user = \"lockstep\"\npassword_env = \"{PASSWORD_VAR}\"\n"
            ));
        }
        let host = HostConfig::parse_str(&text, &dir.path().join("lockstep.toml")).unwrap();
        host.journal
            .location(None)
            .unwrap()
            .expect("[journal] etcd")
    };
    let set_password = |password: &str| {
        // SAFETY: nextest runs each test in a process of its own, and this test's runtime
        // has one thread, which is here.
        unsafe { std::env::set_var(PASSWORD_VAR, password) }
    };

    set_password("journal-password");
    let journal = EtcdJournal::connect(&config(true, true)).await.unwrap();
    let id = RestoreId::new("orders", "abcdef0123456789", 1);
    let claim = journal.claim(&id).await.unwrap();
    journal.save(claim.as_ref(), &record(&id, 1)).await.unwrap();
    // Past the token's 2 s: the next call is refused as unauthenticated, and the client
    // signs in again and asks once more.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let mut later = record(&id, 1);
    later.phase = RestorePhase::Holding;
    journal.save(claim.as_ref(), &later).await.unwrap();
    assert_eq!(journal.load(&id).await.unwrap(), Some(later));
    drop(claim);

    set_password("not-the-password");
    let wrong = EtcdJournal::connect(&config(true, true))
        .await
        .err()
        .unwrap();
    assert!(
        wrong.to_string().contains("authentication failed"),
        "{wrong}"
    );
    set_password("journal-password");
    // Its certificate alone names no user that may read the journal.
    let anonymous = EtcdJournal::connect(&config(true, false))
        .await
        .err()
        .unwrap();
    assert!(
        anonymous.to_string().contains("etcd connect"),
        "{anonymous}"
    );
    let plain = EtcdJournal::connect(&config(false, true))
        .await
        .err()
        .unwrap();
    assert!(plain.to_string().contains("etcd connect"), "{plain}");
}

/// A journal on another host's etcd over plain http is refused before it is contacted,
/// unless the host config accepts it.
#[tokio::test]
async fn plain_http_to_another_hosts_etcd_is_refused_unless_accepted() {
    let refused = EtcdJournal::connect(&EtcdLocation::parse("etcd://10.255.255.1:2379/j").unwrap())
        .await
        .err()
        .unwrap();
    assert!(
        refused
            .to_string()
            .contains("10.255.255.1:2379 is reached over plain http")
            && refused.to_string().contains("insecure = true"),
        "{refused}"
    );
    let host = HostConfig::parse_str(
        "[journal]\netcd = \"etcd://10.255.255.1:2379/j\"\ninsecure = true\n",
        Path::new("/etc/lockstep/lockstep.toml"),
    )
    .unwrap();
    let accepted = EtcdJournal::connect(&host.journal.location(None).unwrap().unwrap())
        .await
        .err()
        .unwrap();
    assert!(!accepted.to_string().contains("plain http"), "{accepted}");
}

/// Issue 52: a record larger than etcd takes in one request (1.5 MiB by default) is saved
/// in parts no larger than the value limit and read back whole, by `load` and by a listing;
/// a save that replaces it leaves only its own parts, and a record whose parts went missing
/// is one bad record while the others list.
#[tokio::test]
async fn a_record_larger_than_etcds_request_limit_is_saved_in_parts_and_read_back() {
    let Some(etcd) = etcd("split").await else {
        return;
    };
    let url = etcd.journal_url("split");
    let a = journal(&url).await;
    let location = EtcdLocation::parse(&url).unwrap();
    let raw = EtcdClient::connect(&location, Duration::from_secs(5))
        .await
        .unwrap();
    let parts_of = |id: &RestoreId| {
        let (raw, prefix) = (raw.clone(), format!("{}/part/{id}/", location.prefix));
        async move {
            let end = etcd_client::prefix_end(prefix.as_bytes());
            let page = raw
                .range_page(prefix.as_bytes(), &end, 10_000)
                .await
                .unwrap();
            assert!(!page.more);
            page.kvs
        }
    };
    // A finished restore of many collections: its report alone is megabytes.
    let large = |id: &RestoreId, word: &str| {
        let names: Vec<String> = (0..120_000)
            .map(|i| format!("db.{word}_collection_{i:06}"))
            .collect();
        RestoreRecord {
            outcome: Some(Outcome::Succeeded),
            phase: RestorePhase::Finished,
            report: Some(StoredReport::of(&serde_json::json!({ "collections": names })).unwrap()),
            ..record(id, 1)
        }
    };
    let id = RestoreId::new("orders", "abcdef0123456789", 1);
    let claim = a.claim(&id).await.unwrap();
    let big = large(&id, "first");
    let size = serde_json::to_vec(&big).unwrap().len();
    assert!(
        size > 3 << 20,
        "{size} bytes: more than twice etcd's request limit"
    );
    a.save(claim.as_ref(), &big)
        .await
        .expect("a large record saves");
    assert_eq!(a.load(&id).await.unwrap().as_ref(), Some(&big));
    let listed = a.list().await.unwrap().whole().unwrap();
    assert_eq!(listed, std::slice::from_ref(&big));
    let parts = parts_of(&id).await;
    assert_eq!(parts.len(), size.div_ceil(512 * 1024), "parts of 512 KiB");
    assert!(parts.iter().all(|p| p.value.len() <= 512 * 1024));
    let head = raw.get(&format!("{}/record/{id}", location.prefix)).await;
    assert!(
        head.unwrap().unwrap().value.len() < 200,
        "the record key points at the parts"
    );
    a.fence(claim.as_ref())
        .await
        .expect("the fence holds a split record");

    // Replaced by another large record, then by a small one: only the latest save's parts stay.
    let bigger = large(&id, "second");
    a.save(claim.as_ref(), &bigger).await.unwrap();
    let generations: std::collections::BTreeSet<Vec<u8>> = (parts_of(&id).await.iter())
        .map(|p| p.key.rsplitn(2, |b| *b == b'/').nth(1).unwrap().to_vec())
        .collect();
    assert_eq!(generations.len(), 1, "one save's parts");
    assert_eq!(a.load(&id).await.unwrap().as_ref(), Some(&bigger));
    let small = record(&id, 1);
    a.save(claim.as_ref(), &small).await.unwrap();
    assert!(
        parts_of(&id).await.is_empty(),
        "a whole record leaves no parts"
    );
    assert_eq!(a.load(&id).await.unwrap(), Some(small));
    a.fence(claim.as_ref())
        .await
        .expect("held after its own saves");

    // A record as one value, written before records were split, still reads.
    let old = RestoreId::new("orders", "abcdef0123456789", 2);
    let old_record = record(&old, 2);
    let put = etcd_client::op_put(
        &format!("{}/record/{old}", location.prefix),
        serde_json::to_vec(&old_record).unwrap(),
        0,
    );
    raw.txn(vec![], vec![put], vec![]).await.unwrap();
    assert_eq!(a.load(&old).await.unwrap().as_ref(), Some(&old_record));

    // Parts gone (a hand at etcd): that record does not read, and the others list.
    a.save(claim.as_ref(), &big).await.unwrap();
    let prefix = format!("{}/part/{id}/", location.prefix);
    let end = etcd_client::prefix_end(prefix.as_bytes());
    raw.txn(
        vec![],
        vec![etcd_client::op_delete_range(prefix.as_bytes(), &end)],
        vec![],
    )
    .await
    .unwrap();
    // A head planted by whoever can write the prefix, claiming parts of a petabyte.
    let planted = RestoreId::new("planted", "abcdef0123456789", 1);
    let head = serde_json::json!({"split": {"generation": "00", "parts": 3, "bytes": 1u64 << 50}});
    let put = etcd_client::op_put(
        &format!("{}/record/{planted}", location.prefix),
        serde_json::to_vec(&head).unwrap(),
        0,
    );
    raw.txn(vec![], vec![put], vec![]).await.unwrap();
    let listing = a.list().await.expect("listed despite the torn records");
    assert_eq!(listing.records, [old_record]);
    let keys: Vec<&str> = listing.unreadable.iter().map(|u| u.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            format!("{}/record/{id}", location.prefix),
            format!("{}/record/{planted}", location.prefix)
        ]
    );
    assert!(
        (listing.unreadable.iter()).all(|u| matches!(u.error, Error::Torn { .. })),
        "{:?}",
        listing.unreadable
    );
}

/// Saves attempts 3, 1, 5, 2 and 4 of one job (started in attempt order), the even ones
/// finished.
async fn five_attempts(journal: &EtcdJournal) {
    for attempt in [3, 1, 5, 2, 4] {
        let id = RestoreId::new("orders", "abcdef0123456789", attempt);
        let claim = journal.claim(&id).await.unwrap();
        let mut r = record(&id, attempt);
        r.outcome = (attempt % 2 == 0).then_some(Outcome::Succeeded);
        journal.save(claim.as_ref(), &r).await.unwrap();
    }
}

fn attempts(listing: &lockstep::journal::Listing) -> Vec<u32> {
    listing.records.iter().map(|r| r.attempt).collect()
}

fn unreadable(listing: &lockstep::journal::Listing) -> Vec<&str> {
    listing.unreadable.iter().map(|u| u.key.as_str()).collect()
}

/// Writes `value` at `key` (under the journal's prefix) as anyone who can write etcd could.
async fn plant(url: &str, key: &str, value: &[u8]) {
    let location = EtcdLocation::parse(url).unwrap();
    let raw = EtcdClient::connect(&location, Duration::from_secs(5))
        .await
        .unwrap();
    let put = etcd_client::op_put(&format!("{}/{key}", location.prefix), value.to_vec(), 0);
    raw.txn(vec![], vec![put], vec![]).await.unwrap();
}

/// The keys under the journal's `index/`, without the prefix.
async fn index_keys(url: &str) -> Vec<String> {
    let location = EtcdLocation::parse(url).unwrap();
    let raw = EtcdClient::connect(&location, Duration::from_secs(5))
        .await
        .unwrap();
    let prefix = format!("{}/index/", location.prefix);
    let page = raw
        .range_page(
            prefix.as_bytes(),
            &etcd_client::prefix_end(prefix.as_bytes()),
            1000,
        )
        .await
        .unwrap();
    (page.kvs.iter())
        .map(|kv| String::from_utf8_lossy(&kv.key[prefix.len()..]).into_owned())
        .filter(|k| k != "built")
        .collect()
}

/// Issue 52: the newest, the open and the counts come from the index, which each save and
/// removal keeps in the same transaction as the record. The newest are found without
/// reading older records (a bad one older than those shown is not come to), and a bad
/// record among them is one bad record.
#[tokio::test]
async fn the_index_finds_the_newest_and_the_open_and_follows_every_save() {
    let Some(etcd) = etcd("index").await else {
        return;
    };
    let url = etcd.journal_url("index");
    let a = journal(&url).await;
    five_attempts(&a).await;
    assert_eq!(attempts(&a.newest(2).await.unwrap()), [4, 5]);
    assert_eq!(attempts(&a.list_open().await.unwrap()), [1, 3, 5]);
    let counts = a.count_outcomes().await.unwrap();
    assert_eq!((counts["running"], counts["succeeded"]), (3, 2));
    assert_eq!(counts.values().sum::<u64>(), 5);

    // Attempt 1 is old and does not read: the newest four never come to it.
    plant(&url, "record/orders.abcdef012345.1", b"{ not a record").await;
    let newest = a.newest(4).await.unwrap();
    assert_eq!(
        (attempts(&newest), unreadable(&newest)),
        (vec![2, 3, 4, 5], vec![])
    );
    let more = a.newest(5).await.unwrap();
    assert_eq!(attempts(&more), [2, 3, 4, 5]);
    assert_eq!(unreadable(&more).len(), 1, "{:?}", unreadable(&more));
    let open = a.list_open().await.unwrap();
    assert_eq!((attempts(&open), unreadable(&open).len()), (vec![3, 5], 1));

    // Finishing attempt 5 takes it out of the open entries and moves its count; removing it
    // leaves no entry of it.
    let fifth = RestoreId::new("orders", "abcdef0123456789", 5);
    let claim = a.claim(&fifth).await.unwrap();
    let mut done = record(&fifth, 5);
    done.outcome = Some(Outcome::RolledBack);
    a.save(claim.as_ref(), &done).await.unwrap();
    drop(claim);
    assert_eq!(attempts(&a.list_open().await.unwrap()), [3]);
    assert_eq!(a.count_outcomes().await.unwrap()["rolled_back"], 1);
    let of_fifth = |keys: Vec<String>| keys.into_iter().filter(|k| k.ends_with(".5")).count();
    assert_eq!(
        of_fifth(index_keys(&url).await),
        2,
        "a started and an outcome entry"
    );
    eventually(Duration::from_secs(10), || async {
        (a.remove(&done).await.unwrap() == lockstep::journal::Removal::Removed).then_some(())
    })
    .await
    .expect("removed once its claim's lease is revoked");
    assert_eq!(of_fifth(index_keys(&url).await), 0);
    assert_eq!(a.count_outcomes().await.unwrap()["rolled_back"], 0);
}

/// Records written before the index (by an older lockstep) are entered when a journal first
/// connects, once: a record planted later is found only by a whole listing.
#[tokio::test]
async fn records_from_before_the_index_are_entered_at_the_first_connect() {
    let Some(etcd) = etcd("index-build").await else {
        return;
    };
    let url = etcd.journal_url("index-build");
    for attempt in 1..=3 {
        let id = RestoreId::new("orders", "abcdef0123456789", attempt);
        let mut r = record(&id, attempt);
        r.outcome = (attempt != 2).then_some(Outcome::Succeeded);
        plant(
            &url,
            &format!("record/{id}"),
            &serde_json::to_vec(&r).unwrap(),
        )
        .await;
    }
    plant(&url, "record/broken.ffff00000000.1", b"{ not a record").await;
    let a = journal(&url).await;
    assert_eq!(attempts(&a.newest(2).await.unwrap()), [2, 3]);
    assert_eq!(attempts(&a.list_open().await.unwrap()), [2]);
    assert_eq!(a.count_outcomes().await.unwrap()["succeeded"], 2);

    let late = RestoreId::new("orders", "abcdef0123456789", 4);
    plant(
        &url,
        &format!("record/{late}"),
        &serde_json::to_vec(&record(&late, 4)).unwrap(),
    )
    .await;
    let b = journal(&url).await;
    assert_eq!(attempts(&b.newest(1).await.unwrap()), [3]);
    assert_eq!(attempts(&b.list().await.unwrap()), [1, 2, 3, 4]);
}
