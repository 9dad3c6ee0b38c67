//! The commit fence (milvus#51589, docs/milvus-facts.md §2.7): a commit stamped below the
//! newest row timestamp of a binlog import's files is rejected and retried without end, so
//! the collection's pchannels stop on every cluster the commit reaches; and the cluster clock
//! a commit is stamped with, which a topology can set behind the host's.

use std::path::Path;
use std::time::Duration;

use milvus_proto::milvus::AllocTimestampRequest;
use milvus_sim::catalog::NewCollection;
use milvus_sim::cluster::CreateImport;
use milvus_sim::jobs::JobState;
use milvus_sim::{Protocol, Sim, Topology};

use crate::common::*;

/// A star a → b on in-memory storage with stages of 1 s, for paused time; `extra` goes into
/// both clusters' tables, and a's clock runs an hour behind.
async fn star_in_memory(extra: &str) -> Sim {
    let cluster = |id: &str, own: &str| {
        format!(
            "[[cluster]]\nid = \"{id}\"\nimport_in_replicating_cluster = true\n{own}{extra}[cluster.storage]\nurl = \"memory://\"\n[cluster.durations]\npending = \"1s\"\npreimport = \"1s\"\nimporting = \"1s\"\nsorting = \"1s\"\nindex_building = \"1s\"\ncommitting = \"1s\"\n"
        )
    };
    let text = cluster("a", "clock_offset = \"-1h\"\n")
        + &cluster("b", "")
        + "[replication]\nprimary = \"a\"\nsecondaries = [\"b\"]\n";
    let topology = Topology::from_toml_str(&text, "t.toml", Path::new(".")).expect("valid");
    let sim = Sim::start(topology).await.expect("starts");
    let a = sim.cluster("a");
    // "c" gets a's pchannel 0, "d" its pchannel 1, and the mirrors b's.
    for name in ["c", "d"] {
        a.create_collection(NewCollection::keyed("default", name))
            .expect("collection created");
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    sim
}

/// A manual-commit backup import of one segment group into `collection`.
fn backup_import(collection: &str, files: &[String; 2]) -> CreateImport {
    CreateImport {
        db_name: String::new(),
        collection_name: collection.into(),
        partition_name: "_default".into(),
        files: vec![files.to_vec()],
        options: [("backup", "true"), ("auto_commit", "false")]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .into(),
        idempotency_key: None,
        protocol: Protocol::Rest,
    }
}

fn state(cluster: &milvus_sim::Cluster, job: i64) -> JobState {
    cluster.job(job).expect("the job exists").state
}

#[tokio::test(start_paused = true)]
async fn a_commit_below_the_rows_timestamps_stops_its_pchannels_on_every_cluster() {
    for blocks in [true, false] {
        let extra = if blocks {
            ""
        } else {
            "stale_commit_blocks_channel = false\n"
        };
        let sim = star_in_memory(extra).await;
        let (a, b) = (sim.cluster("a"), sim.cluster("b"));
        // Rows stamped now on the host: an hour after a's clock, from a's point of view a
        // backup from the future. "fresh" rows are stamped 0.
        let now = milvus_sim::tso::now();
        let (mut stale, mut fresh) = (None, None);
        for cluster in [&a, &b] {
            stale = Some(put_segment_at(cluster, "stale", 10, now).await);
            fresh = Some(put_segment(cluster, "fresh", 10, 0).await);
        }
        let (stale, fresh) = (stale.expect("two clusters"), fresh.expect("two clusters"));
        let job = a
            .create_import(backup_import("c", &stale))
            .expect("created");
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(
            (state(&a, job), state(&b, job)),
            (JobState::Uncommitted, JobState::Uncommitted)
        );

        // The commit answers success: Milvus broadcasts it; the fence fails in the replay.
        a.commit_import(&job.to_string())
            .expect("the commit answers 0");
        tokio::time::sleep(Duration::from_secs(3600)).await;
        if !blocks {
            assert_eq!(
                (state(&a, job), state(&b, job)),
                (JobState::Completed, JobState::Completed)
            );
            assert!(a.snapshot().fences.is_empty() && b.snapshot().fences.is_empty());
            continue;
        }
        for (cluster, pchannel) in [(&a, "a-rootcoord-dml_0"), (&b, "b-rootcoord-dml_0")] {
            assert_eq!(
                state(cluster, job),
                JobState::Committing,
                "{pchannel}: forever"
            );
            let fences = cluster.snapshot().fences;
            assert_eq!(fences.len(), 1, "{fences:?}");
            let fence = &fences[0];
            assert_eq!((fence.pchannel.as_str(), fence.job_id), (pchannel, job));
            assert!(fence.commit_ts < fence.max_row_ts && fence.max_row_ts == now);
        }
        // b's replication of a's pchannel 0 stands still; of pchannel 1 it goes on.
        let tick = |pchannel: &str| {
            b.replicate_checkpoint("a", pchannel)
                .expect("b is a's secondary")
                .time_tick
        };
        let (stopped, flowing) = (tick("a-rootcoord-dml_0"), tick("a-rootcoord-dml_1"));
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(tick("a-rootcoord-dml_0"), stopped);
        assert!(tick("a-rootcoord-dml_1") > flowing);

        // No later commit on the stopped pchannel completes; one on another pchannel does.
        let later = a
            .create_import(backup_import("c", &fresh))
            .expect("created");
        let elsewhere = a
            .create_import(backup_import("d", &fresh))
            .expect("created");
        tokio::time::sleep(Duration::from_secs(30)).await;
        for id in [later, elsewhere] {
            a.commit_import(&id.to_string())
                .expect("the commit answers 0");
        }
        tokio::time::sleep(Duration::from_secs(3600)).await;
        for cluster in [&a, &b] {
            assert_eq!(
                state(cluster, later),
                JobState::Committing,
                "{}",
                cluster.id()
            );
            assert_eq!(
                state(cluster, elsewhere),
                JobState::Completed,
                "{}",
                cluster.id()
            );
        }
    }
}

/// What AllocTimestamp answers on the cluster at `uri`.
async fn allocated_on(uri: &str) -> u64 {
    let answer = grpc(uri)
        .await
        .alloc_timestamp(AllocTimestampRequest::default())
        .await
        .expect("answers")
        .into_inner();
    answer.timestamp
}

/// A cluster's clock (`clock_offset`) is what AllocTimestamp answers and what its streams'
/// checkpoints are read in, so the two still compare.
#[tokio::test]
async fn allocated_timestamps_and_checkpoints_follow_a_clock_that_runs_behind() {
    let topology = star().replacen(
        "[[cluster]]\nid = \"a\"",
        "[[cluster]]\nid = \"a\"\nclock_offset = \"-1h\"",
        1,
    );
    let sim = start(&topology).await;
    let hour = 3_600_000u64 << 18;
    let allocated = allocated_on(&sim.uri("a")).await;
    let host = milvus_sim::tso::now();
    assert!(
        allocated < host - hour + (60_000 << 18) && allocated > host - 2 * hour,
        "an hour behind the host: {} against {host}",
        allocated
    );
    let checkpoint = sim
        .cluster("b")
        .replicate_checkpoint("a", "a-rootcoord-dml_0")
        .expect("b is a's secondary")
        .time_tick;
    assert!(checkpoint <= sim.cluster("a").clock() && checkpoint > host - 2 * hour);
    // b's own clock is the host's.
    assert!(allocated_on(&sim.uri("b")).await >= host);
}
