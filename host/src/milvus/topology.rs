//! What a client can learn from `GetReplicateConfiguration` (docs/milvus-facts.md §3.3).
//!
//! Milvus never tells a server its own cluster id, so lockstep finds the ends it was given
//! in the configuration by the URI it dialled (or by an explicit cluster id from the host
//! config), then reads the star topology: one primary with no incoming edge, each secondary
//! the target of exactly one edge from it.

use milvus_proto::common::{MilvusCluster, ReplicateConfiguration};

/// The URI a replication configuration gives `cluster` (empty when it gives none).
pub fn uri_of(cluster: &MilvusCluster) -> String {
    (cluster.connection_param.as_ref()).map_or_else(String::new, |p| p.uri.clone())
}

/// A replication configuration as read from one cluster, with the questions preflight asks.
#[derive(Debug, Clone, Default)]
pub struct Topology {
    config: Option<ReplicateConfiguration>,
}

impl Topology {
    pub fn new(config: Option<ReplicateConfiguration>) -> Topology {
        Topology { config }
    }

    /// The predicate datacoord uses: a config with edges or with more than one cluster.
    pub fn is_replicating(&self) -> bool {
        self.config
            .as_ref()
            .is_some_and(|c| !c.cross_cluster_topology.is_empty() || c.clusters.len() > 1)
    }

    /// The cluster with no incoming edge, when there is exactly one.
    pub fn primary(&self) -> Option<&MilvusCluster> {
        let cfg = self.config.as_ref()?;
        let mut sources = cfg.clusters.iter().filter(|c| {
            !cfg.cross_cluster_topology
                .iter()
                .any(|e| e.target_cluster_id == c.cluster_id)
        });
        let primary = sources.next()?;
        sources.next().is_none().then_some(primary)
    }

    /// The clusters that `source` replicates to.
    pub fn targets_of(&self, source: &str) -> Vec<&MilvusCluster> {
        let Some(cfg) = self.config.as_ref() else {
            return Vec::new();
        };
        cfg.cross_cluster_topology
            .iter()
            .filter(|e| e.source_cluster_id == source)
            .filter_map(|e| {
                cfg.clusters
                    .iter()
                    .find(|c| c.cluster_id == e.target_cluster_id)
            })
            .collect()
    }

    /// Finds the cluster an end is: by its configured cluster id when the host config names
    /// one, else by the URI lockstep dials.
    pub fn find(&self, cluster_id: Option<&str>, uri: &str) -> Option<&MilvusCluster> {
        let cfg = self.config.as_ref()?;
        match cluster_id {
            Some(id) => cfg.clusters.iter().find(|c| c.cluster_id == id),
            None => cfg.clusters.iter().find(|c| {
                c.connection_param
                    .as_ref()
                    .is_some_and(|p| crate::config::same_endpoint(&p.uri, uri))
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use milvus_proto::common::{ConnectionParam, CrossClusterTopology};

    fn cluster(id: &str, uri: &str) -> MilvusCluster {
        MilvusCluster {
            cluster_id: id.into(),
            connection_param: Some(ConnectionParam {
                uri: uri.into(),
                token: String::new(),
            }),
            pchannels: vec![format!("{id}-rootcoord-dml_0")],
        }
    }

    fn star() -> Topology {
        Topology::new(Some(ReplicateConfiguration {
            clusters: vec![
                cluster("a", "http://127.0.0.1:19530"),
                cluster("b", "http://10.0.0.2:19530"),
                cluster("c", "http://10.0.0.3:19531"),
            ],
            cross_cluster_topology: vec![
                CrossClusterTopology {
                    source_cluster_id: "a".into(),
                    target_cluster_id: "b".into(),
                },
                CrossClusterTopology {
                    source_cluster_id: "a".into(),
                    target_cluster_id: "c".into(),
                },
            ],
        }))
    }

    #[test]
    fn star_has_one_primary_and_its_targets() {
        let t = star();
        assert!(t.is_replicating());
        assert_eq!(t.primary().map(|c| c.cluster_id.as_str()), Some("a"));
        let targets: Vec<_> = t
            .targets_of("a")
            .iter()
            .map(|c| c.cluster_id.clone())
            .collect();
        assert_eq!(targets, ["b", "c"]);
        assert!(t.targets_of("b").is_empty());
    }

    #[test]
    fn no_config_or_single_cluster_is_not_replicating() {
        assert!(!Topology::new(None).is_replicating());
        let single = Topology::new(Some(ReplicateConfiguration {
            clusters: vec![cluster("a", "http://127.0.0.1:19530")],
            cross_cluster_topology: vec![],
        }));
        assert!(!single.is_replicating());
    }

    #[test]
    fn ends_are_found_by_uri_or_id() {
        let t = star();
        assert_eq!(
            t.find(None, "http://localhost:19530")
                .map(|c| c.cluster_id.as_str()),
            Some("a")
        );
        assert_eq!(
            t.find(None, "10.0.0.3:19531")
                .map(|c| c.cluster_id.as_str()),
            Some("c")
        );
        assert_eq!(
            t.find(Some("b"), "http://elsewhere:1")
                .map(|c| c.cluster_id.as_str()),
            Some("b")
        );
        assert!(t.find(None, "http://10.0.0.3:19530").is_none());
    }
}
