//! Update/GetReplicateConfiguration over gRPC (docs/milvus-facts.md §3): validation messages,
//! blanked tokens, and a config applied to the primary travelling to its secondaries.

use std::time::Duration;

use milvus_proto::common::{
    ConnectionParam, CrossClusterTopology, MilvusCluster, ReplicateConfiguration,
};
use milvus_proto::milvus::{GetReplicateConfigurationRequest, UpdateReplicateConfigurationRequest};
use milvus_sim::Sim;
use milvus_sim::jobs::JobState;

use crate::common::*;

fn config(sim: &Sim, ids: &[&str], edges: &[(&str, &str)], token: &str) -> ReplicateConfiguration {
    ReplicateConfiguration {
        clusters: ids
            .iter()
            .map(|id| MilvusCluster {
                cluster_id: (*id).into(),
                connection_param: Some(ConnectionParam {
                    uri: sim.uri(id),
                    token: token.into(),
                }),
                pchannels: sim.cluster(id).pchannels().to_vec(),
            })
            .collect(),
        cross_cluster_topology: edges
            .iter()
            .map(|(s, t)| CrossClusterTopology {
                source_cluster_id: (*s).into(),
                target_cluster_id: (*t).into(),
            })
            .collect(),
    }
}

async fn update(uri: &str, config: ReplicateConfiguration) -> milvus_proto::common::Status {
    grpc(uri)
        .await
        .update_replicate_configuration(UpdateReplicateConfigurationRequest {
            replicate_configuration: Some(config),
            force_promote: false,
        })
        .await
        .expect("answers")
        .into_inner()
}

fn three_standalone() -> String {
    ["a", "b", "c"]
        .iter()
        .map(|id| {
            format!("[[cluster]]\nid = \"{id}\"\nimport_in_replicating_cluster = true\n{FAST}")
        })
        .collect()
}

#[tokio::test]
async fn invalid_configs_are_refused_with_milvus_messages() {
    let sim = start(&three_standalone()).await;
    let a = sim.uri("a");
    let chain = config(&sim, &["a", "b", "c"], &[("a", "b"), ("b", "c")], "");
    let status = update(&a, chain).await;
    assert_eq!(status.code, 1100);
    assert!(
        status.reason.contains("must be a star"),
        "{}",
        status.reason
    );

    let without_me = config(&sim, &["b", "c"], &[("b", "c")], "");
    let status = update(&a, without_me).await;
    assert!(
        status
            .reason
            .starts_with("current Milvus cluster 'a' must be included in the clusters list"),
        "{}",
        status.reason
    );

    let mut dup = config(&sim, &["a", "b"], &[("a", "b")], "");
    dup.clusters[1].connection_param.as_mut().expect("set").uri = sim.uri("a");
    assert!(
        update(&a, dup)
            .await
            .reason
            .contains("duplicate connection_param.uri")
    );

    let mut short = config(&sim, &["a", "b"], &[("a", "b")], "");
    short.clusters[1].pchannels.pop();
    assert!(
        update(&a, short)
            .await
            .reason
            .contains("same number of pchannels")
    );

    assert_eq!(
        sim.cluster("a").snapshot().role,
        "standalone",
        "nothing was stored"
    );
}

#[tokio::test]
async fn a_config_applied_to_the_primary_travels_to_its_secondaries() {
    let sim = start(&three_standalone()).await;
    // A collection created before replication exists only on a.
    create_collection(&sim.uri("a"), "early").await;
    let star = config(&sim, &["a", "b", "c"], &[("a", "b"), ("a", "c")], "secret");
    assert_eq!(update(&sim.uri("a"), star.clone()).await.code, 0);
    assert_eq!(sim.cluster("a").snapshot().role, "primary");
    for end in ["b", "c"] {
        for _ in 0..400 {
            if sim.cluster(end).snapshot().role == "secondary" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(
            sim.cluster(end).snapshot().primary.as_deref(),
            Some("a"),
            "{end}"
        );
    }
    // Applying the same config to a secondary afterwards is accepted (it already arrived).
    assert_eq!(update(&sim.uri("b"), star.clone()).await.code, 0);

    // Tokens are blanked on read; released 3.0.x takes a blanked token sent back as a change
    // (`blanked_tokens_sent_back_keep_the_stored_ones_where_the_cluster_fills_them` has the
    // newer rule), and a changed one is refused either way.
    let read = grpc(&sim.uri("a"))
        .await
        .get_replicate_configuration(GetReplicateConfigurationRequest {})
        .await
        .expect("answers")
        .into_inner();
    let read = read.configuration.expect("configured");
    assert!(read.clusters.iter().all(|c| {
        c.connection_param
            .as_ref()
            .is_some_and(|p| p.token.is_empty())
    }));
    let round_trip = update(&sim.uri("a"), read.clone()).await;
    assert_eq!(round_trip.code, 1100, "{round_trip:?}");
    assert!(
        round_trip
            .reason
            .starts_with("cluster 'a' connection_param.token cannot be changed"),
        "{round_trip:?}"
    );
    let mut changed = star.clone();
    changed.clusters[1]
        .connection_param
        .as_mut()
        .expect("set")
        .token = "other".into();
    assert!(
        update(&sim.uri("a"), changed)
            .await
            .reason
            .contains("connection_param.token cannot be changed")
    );

    // The import of a collection b never received is skipped there (Milvus skips it silently).
    let files = put_segment(&sim.cluster("a"), "bk", 4, 0).await;
    let id = Rest::new(&sim.uri("a"))
        .create_manual("early", &files[0])
        .await;
    wait_for(&sim.cluster("a"), id, JobState::Uncommitted).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(sim.cluster("b").job(id).is_none());
    assert!(sim.cluster("c").job(id).is_none());
}

/// Newer Milvus fills the blanked tokens of a config sent back with the stored ones
/// (`FillRedactedConnectionTokens`), so a read-modify-write round trip works.
#[tokio::test]
async fn blanked_tokens_sent_back_keep_the_stored_ones_where_the_cluster_fills_them() {
    let topology = three_standalone().replace(
        "import_in_replicating_cluster = true",
        "import_in_replicating_cluster = true\nfill_redacted_tokens = true",
    );
    let sim = start(&topology).await;
    let star = config(&sim, &["a", "b", "c"], &[("a", "b"), ("a", "c")], "secret");
    assert_eq!(update(&sim.uri("a"), star).await.code, 0);
    let read = grpc(&sim.uri("a"))
        .await
        .get_replicate_configuration(GetReplicateConfigurationRequest {})
        .await
        .expect("answers")
        .into_inner()
        .configuration
        .expect("configured");
    assert_eq!(update(&sim.uri("a"), read).await.code, 0);
}

/// An empty clusters list is refused (1101) and a missing config too (1100): the proto's
/// "an empty config clears it" was reverted (docs/milvus-facts.md §3.2).
#[tokio::test]
async fn an_empty_or_missing_replicate_configuration_is_refused() {
    let sim = start(&three_standalone()).await;
    let a = sim.uri("a");
    let empty = update(&a, ReplicateConfiguration::default()).await;
    assert_eq!(
        (empty.code, empty.reason.as_str()),
        (1101, "clusters list cannot be empty: missing parameter")
    );
    let missing = grpc(&a)
        .await
        .update_replicate_configuration(UpdateReplicateConfigurationRequest {
            replicate_configuration: None,
            force_promote: false,
        })
        .await
        .expect("answers")
        .into_inner();
    assert_eq!(
        (missing.code, missing.reason.as_str()),
        (1100, "config cannot be nil: invalid parameter")
    );
    assert_eq!(sim.cluster("a").snapshot().role, "standalone");
}
