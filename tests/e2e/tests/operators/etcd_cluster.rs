//! The journal on a 3-member etcd, as Milvus runs its etcd: lockstep is given every member,
//! and a member that dies or a leader that moves costs it nothing but the member.

use std::time::{Duration, Instant};

use e2e::etcd::EtcdCluster;
use e2e::relay::Relay;
use lockstep::journal::etcd::{EtcdJournal, EtcdLocation};
use lockstep::journal::{Error, Journal, Outcome, RestoreId, RestoreRecord};

use crate::support::eventually;

/// A cluster of three of `test`'s own (its directory, the cluster); `None`, said, without an
/// etcd binary.
pub async fn cluster(test: &str) -> Option<(tempfile::TempDir, EtcdCluster)> {
    let Some(binary) = e2e::etcd::binary() else {
        e2e::unavailable(test, "no etcd binary on PATH");
        return None;
    };
    let dir = tempfile::tempdir().unwrap();
    let cluster = EtcdCluster::start(&binary, dir.path(), 3).await.unwrap();
    Some((dir, cluster))
}

fn record(id: &RestoreId, progress: u32) -> RestoreRecord {
    let mut record = RestoreRecord::new(id.clone(), "orders", "abcdef0123456789", 1, "b", vec![]);
    record.mirror_grace_ms = u64::from(progress);
    record
}

/// Every journal call goes on answering while one member after another is killed (and
/// brought back before the next, so a quorum stays), and while the leader moves: the claim
/// is renewed throughout, and no save is refused.
#[tokio::test]
async fn the_journal_fails_over_when_a_member_dies_or_the_leader_moves() {
    let Some((_dir, mut etcd)) = cluster("failover").await else {
        return;
    };
    // A lease of 6 s: a leader killed costs an election, which a loaded machine can stretch
    // past a shorter one.
    let url = format!("etcd://{}/failover?lease_ttl=6", etcd.endpoints());
    let journal = EtcdJournal::connect(&EtcdLocation::parse(&url).unwrap())
        .await
        .expect("the journal connects to the cluster");
    let other = EtcdJournal::connect(&EtcdLocation::parse(&url).unwrap())
        .await
        .unwrap();
    let id = RestoreId::new("orders", "abcdef0123456789", 1);
    let claim = journal.claim(&id).await.unwrap();
    let mut progress = 0;
    let mut save_all_round = async |journal: &EtcdJournal, what: &str| {
        for _ in 0..5 {
            progress += 1;
            let written = record(&id, progress);
            let saved = journal.save(claim.as_ref(), &written).await;
            assert!(saved.is_ok(), "{what}: save {progress}: {saved:?}");
            journal
                .fence(claim.as_ref())
                .await
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let loaded = other
                .load(&id)
                .await
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(loaded, Some(written), "{what}");
            let listed = other.list().await.unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(listed.whole().unwrap().len(), 1, "{what}");
        }
    };
    save_all_round(&journal, "all three up").await;
    for member in 0..3 {
        etcd.members[member].kill().await.unwrap();
        save_all_round(&journal, &format!("m{member} killed")).await;
        // Longer than the lease: the claim lives only if its renewals found another member.
        tokio::time::sleep(Duration::from_secs(7)).await;
        save_all_round(&journal, &format!("m{member} down past the lease")).await;
        etcd.members[member].up().await.unwrap();
    }
    for round in 0..3 {
        let to = etcd.move_leader().await.unwrap();
        save_all_round(&journal, &format!("leader moved to m{to} (round {round})")).await;
    }
    let mut done = record(&id, progress);
    done.outcome = Some(Outcome::Succeeded);
    journal.save(claim.as_ref(), &done).await.unwrap();
    assert_eq!(other.load(&id).await.unwrap(), Some(done));
}

/// A host that holds a claim and reaches each member through a relay of its own, which
/// the test can cut, and another host that reaches every member directly.
struct Hosts {
    journal: EtcdJournal,
    relays: Vec<Relay>,
    claim: Box<dyn lockstep::journal::Claim>,
    id: RestoreId,
    other: EtcdJournal,
}

async fn claimed_behind_relays(etcd: &EtcdCluster, test: &str, ttl: u64) -> Hosts {
    let relays = (etcd.members.iter())
        .map(|member| Relay::start(&member.address()).unwrap())
        .collect::<Vec<_>>();
    let through = relays.iter().map(Relay::address).collect::<Vec<_>>();
    let url = format!("etcd://{}/{test}?lease_ttl={ttl}", through.join(","));
    let journal = EtcdJournal::connect(&EtcdLocation::parse(&url).unwrap())
        .await
        .unwrap();
    let direct = format!("etcd://{}/{test}", etcd.endpoints());
    let other = EtcdJournal::connect(&EtcdLocation::parse(&direct).unwrap())
        .await
        .unwrap();
    let id = RestoreId::new("orders", "abcdef0123456789", 1);
    let claim = journal.claim(&id).await.unwrap();
    journal.save(claim.as_ref(), &record(&id, 1)).await.unwrap();
    Hosts {
        journal,
        relays,
        claim,
        id,
        other,
    }
}

/// A member that hangs for this host (its packets lost, not refused) costs a renewal or
/// two, not the claim: a renewal gives up on it within a third of the TTL and the next asks
/// another member, so the claim outlives several TTLs of the hang.
#[tokio::test]
async fn a_member_that_hangs_does_not_cost_the_claim() {
    let Some((_dir, etcd)) = cluster("member-hangs").await else {
        return;
    };
    let Hosts {
        journal,
        relays,
        claim,
        id,
        other,
    } = claimed_behind_relays(&etcd, "member-hangs", 3).await;
    // Member 0 is the one every call went to so far.
    relays[0].cut();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let taken = other.claim(&id).await.map(drop);
    assert!(
        matches!(taken, Err(Error::Busy { .. })),
        "the claim was renewed through the members that answer: {taken:?}"
    );
    journal.save(claim.as_ref(), &record(&id, 2)).await.unwrap();
    journal.fence(claim.as_ref()).await.unwrap();
}

/// A host cut off from every member gives its claim up by itself within the TTL and a
/// renewal's wait, whatever a call to etcd would wait: its saves fail as lost, another host
/// takes the restore over once the lease expired, and when the partition heals the cut-off
/// host's saves still fail.
#[tokio::test]
async fn a_host_cut_off_from_every_member_loses_its_claim_within_the_lease() {
    let Some((_dir, etcd)) = cluster("cut-off").await else {
        return;
    };
    let ttl = 3;
    let Hosts {
        journal,
        relays,
        claim,
        id,
        other,
    } = claimed_behind_relays(&etcd, "cut-off", ttl).await;
    relays.iter().for_each(Relay::cut);
    // A renewal is attempted every third of the TTL and awaited as long at most, so the host
    // gives its claim up at most a TTL and two thirds of one after its last renewal got
    // through, which was before the cut. No call of its reaches etcd: only its own clock
    // can tell it, and by then a save is refused at once, without asking etcd.
    tokio::time::sleep(Duration::from_secs(ttl) * 5 / 3 + Duration::from_millis(500)).await;
    let asked = Instant::now();
    let saved = journal.save(claim.as_ref(), &record(&id, 2)).await;
    assert!(matches!(saved, Err(Error::ClaimLost(_))), "{saved:?}");
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "the save waited on etcd"
    );
    let taken = eventually(Duration::from_secs(2 * ttl), || async {
        other.claim(&id).await.ok()
    })
    .await
    .expect("another host takes the restore over once the lease expired");
    other.save(taken.as_ref(), &record(&id, 3)).await.unwrap();
    relays.iter().for_each(Relay::heal);
    assert!(matches!(
        journal.save(claim.as_ref(), &record(&id, 4)).await,
        Err(Error::ClaimLost(_))
    ));
    assert_eq!(
        other.load(&id).await.unwrap().map(|r| r.mirror_grace_ms),
        Some(3)
    );
}
