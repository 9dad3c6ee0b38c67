//! The journal on a 3-member etcd, as Milvus runs its etcd: lockstep is given every member,
//! and a member that dies or a leader that moves costs it nothing but the member.

use std::time::Duration;

use e2e::etcd::EtcdCluster;
use lockstep::journal::etcd::{EtcdJournal, EtcdLocation};
use lockstep::journal::{Journal, Outcome, RestoreId, RestoreRecord};

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
    let url = format!("etcd://{}/failover?lease_ttl=3", etcd.endpoints());
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
        tokio::time::sleep(Duration::from_secs(4)).await;
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
