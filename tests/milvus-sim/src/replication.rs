//! The replication configuration (CDC v2): validation as Milvus's
//! `pkg/util/replicateutil/config_validator.go` does it (docs/milvus-facts.md §3.2), and what a
//! cluster learns from it: whether it replicates, and whether it is primary or secondary.
//!
//! The rules are Milvus's. The messages "current Milvus cluster '%s' must be included in the
//! clusters list" and "cluster '%s' connection_param.uri/token cannot be changed" are Milvus's
//! text; the others follow the same style and are [infer], as is the wrapping with code 1100.

use std::collections::{BTreeMap, BTreeSet};

use milvus_proto::common::ReplicateConfiguration;

use crate::merr::{MilvusError, code};

/// Where a cluster stands in the replication star.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Not replicating (no config, or a single cluster with no edge).
    Standalone,
    /// The centre of the star; replicates to these clusters.
    Primary { secondaries: Vec<String> },
    /// A target of the primary; refuses writes.
    Secondary { primary: String },
}

impl Role {
    pub fn name(&self) -> &'static str {
        match self {
            Role::Standalone => "standalone",
            Role::Primary { .. } => "primary",
            Role::Secondary { .. } => "secondary",
        }
    }
}

/// Milvus's `isReplicatingCluster`: a config with an edge or more than one cluster.
pub fn is_replicating(config: Option<&ReplicateConfiguration>) -> bool {
    config.is_some_and(|c| !c.cross_cluster_topology.is_empty() || c.clusters.len() > 1)
}

/// The role of cluster `me` under `config`.
pub fn role_of(config: Option<&ReplicateConfiguration>, me: &str) -> Role {
    let Some(config) = config else {
        return Role::Standalone;
    };
    if let Some(edge) = config
        .cross_cluster_topology
        .iter()
        .find(|e| e.target_cluster_id == me)
    {
        return Role::Secondary {
            primary: edge.source_cluster_id.clone(),
        };
    }
    let secondaries: Vec<String> = config
        .cross_cluster_topology
        .iter()
        .filter(|e| e.source_cluster_id == me)
        .map(|e| e.target_cluster_id.clone())
        .collect();
    if secondaries.is_empty() {
        Role::Standalone
    } else {
        Role::Primary { secondaries }
    }
}

/// The config as `GetReplicateConfiguration` returns it: every token blanked.
pub fn sanitize(config: &ReplicateConfiguration) -> ReplicateConfiguration {
    let mut out = config.clone();
    for cluster in &mut out.clusters {
        if let Some(param) = &mut cluster.connection_param {
            param.token.clear();
        }
    }
    out
}

fn invalid(msg: impl std::fmt::Display) -> MilvusError {
    MilvusError::new(code::PARAMETER_INVALID, format!("{msg}: invalid parameter"))
}

/// What a config carrying a blanked token (as Get returns them) does to a stored token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedactedTokens {
    /// Released 3.0.x: an empty token is a change, refused.
    Refused,
    /// Newer code (`FillRedactedConnectionTokens`): the stored token is kept, so a
    /// read-modify-write round trip works.
    Filled,
}

/// Validates `incoming` for cluster `me` (whose pchannels are `local_pchannels`) against the
/// `stored` config, and returns the config to store. An empty clusters list is refused (the
/// proto's "an empty config clears it" was reverted, #49080).
pub fn validate(
    incoming: &ReplicateConfiguration,
    stored: Option<&ReplicateConfiguration>,
    me: &str,
    local_pchannels: &[String],
    redacted: RedactedTokens,
) -> Result<ReplicateConfiguration, MilvusError> {
    if incoming.clusters.is_empty() {
        // `merr.WrapErrParameterMissingMsg`, code 1101.
        return Err(MilvusError::new(
            code::PARAMETER_MISSING,
            "clusters list cannot be empty: missing parameter",
        ));
    }
    let mut config = incoming.clone();
    let mut ids = BTreeSet::new();
    let mut uris = BTreeSet::new();
    let mut pchannel_count = None;
    for cluster in &config.clusters {
        let id = &cluster.cluster_id;
        if id.is_empty() || id.chars().any(char::is_whitespace) {
            return Err(invalid(format!(
                "cluster_id '{id}' must be non-empty and contain no whitespace"
            )));
        }
        if !ids.insert(id.clone()) {
            return Err(invalid(format!("duplicate cluster_id '{id}'")));
        }
        let uri = cluster
            .connection_param
            .as_ref()
            .map(|p| p.uri.as_str())
            .unwrap_or_default();
        if uri.is_empty() {
            return Err(invalid(format!(
                "cluster '{id}' connection_param.uri cannot be empty"
            )));
        }
        if !is_request_uri(uri) {
            return Err(invalid(format!(
                "cluster '{id}' connection_param.uri '{uri}' is not a valid URI"
            )));
        }
        if !uris.insert(uri.to_owned()) {
            return Err(invalid(format!("duplicate connection_param.uri '{uri}'")));
        }
        if cluster.pchannels.is_empty() {
            return Err(invalid(format!("cluster '{id}' pchannels cannot be empty")));
        }
        let mut seen = BTreeSet::new();
        if let Some(dup) = cluster.pchannels.iter().find(|p| !seen.insert(p.as_str())) {
            return Err(invalid(format!(
                "cluster '{id}' has duplicate pchannel '{dup}'"
            )));
        }
        match pchannel_count {
            None => pchannel_count = Some(cluster.pchannels.len()),
            Some(n) if n != cluster.pchannels.len() => {
                return Err(invalid(format!(
                    "cluster '{id}' has {} pchannels, expected {n}: all clusters must have the same number of pchannels",
                    cluster.pchannels.len()
                )));
            }
            Some(_) => {}
        }
    }
    let current = config
        .clusters
        .iter()
        .find(|c| c.cluster_id == me)
        .ok_or_else(|| {
            invalid(format!(
                "current Milvus cluster '{me}' must be included in the clusters list"
            ))
        })?;
    if current.pchannels != local_pchannels {
        return Err(invalid(format!(
            "current Milvus cluster '{me}' pchannels {:?} do not match the local pchannels {local_pchannels:?}",
            current.pchannels
        )));
    }
    validate_star(&config, &ids)?;
    if let Some(stored) = stored {
        for cluster in &mut config.clusters {
            let Some(old) = stored
                .clusters
                .iter()
                .find(|o| o.cluster_id == cluster.cluster_id)
            else {
                continue;
            };
            let id = &cluster.cluster_id;
            let old_param = old.connection_param.clone().unwrap_or_default();
            let param = cluster.connection_param.get_or_insert_default();
            if param.uri != old_param.uri {
                return Err(invalid(format!(
                    "cluster '{id}' connection_param.uri cannot be changed"
                )));
            }
            if param.token.is_empty() && redacted == RedactedTokens::Filled {
                param.token = old_param.token.clone();
            } else if param.token != old_param.token {
                return Err(invalid(format!(
                    "cluster '{id}' connection_param.token cannot be changed"
                )));
            }
            if !cluster.pchannels.starts_with(&old.pchannels) {
                return Err(invalid(format!(
                    "cluster '{id}' pchannels can only be appended, existing {:?}",
                    old.pchannels
                )));
            }
        }
    }
    Ok(config)
}

fn validate_star(
    config: &ReplicateConfiguration,
    ids: &BTreeSet<String>,
) -> Result<(), MilvusError> {
    let mut edges = BTreeSet::new();
    let mut in_degree: BTreeMap<&str, usize> = ids.iter().map(|id| (id.as_str(), 0)).collect();
    let mut out_degree = in_degree.clone();
    for edge in &config.cross_cluster_topology {
        let (source, target) = (
            edge.source_cluster_id.as_str(),
            edge.target_cluster_id.as_str(),
        );
        for end in [source, target] {
            if !ids.contains(end) {
                return Err(invalid(format!(
                    "topology references unknown cluster '{end}'"
                )));
            }
        }
        if source == target {
            return Err(invalid(format!(
                "topology edge {source}->{target} is a self loop"
            )));
        }
        if !edges.insert((source, target)) {
            return Err(invalid(format!(
                "duplicate topology edge {source}->{target}"
            )));
        }
        *out_degree.entry(source).or_default() += 1;
        *in_degree.entry(target).or_default() += 1;
    }
    let n = ids.len();
    if n == 1 && edges.is_empty() {
        return Ok(());
    }
    let centres: Vec<&str> = ids
        .iter()
        .map(String::as_str)
        .filter(|id| out_degree[id] == n - 1 && in_degree[id] == 0)
        .collect();
    let star = centres.len() == 1
        && ids
            .iter()
            .filter(|id| id.as_str() != centres[0])
            .all(|id| in_degree[id.as_str()] == 1 && out_degree[id.as_str()] == 0);
    if star {
        Ok(())
    } else {
        Err(invalid(
            "cross_cluster_topology must be a star: one source cluster replicating to every other cluster",
        ))
    }
}

/// Go's `url.ParseRequestURI` in the cases that matter: an absolute URI with a scheme, or an
/// absolute path.
fn is_request_uri(uri: &str) -> bool {
    uri.starts_with('/')
        || url::Url::parse(uri).is_ok_and(|u| !u.cannot_be_a_base() || u.scheme() == "unix")
}

#[cfg(test)]
mod tests {
    use super::*;
    use milvus_proto::common::{ConnectionParam, CrossClusterTopology, MilvusCluster};

    fn cluster(id: &str, uri: &str, token: &str, n: usize) -> MilvusCluster {
        MilvusCluster {
            cluster_id: id.into(),
            connection_param: Some(ConnectionParam {
                uri: uri.into(),
                token: token.into(),
            }),
            pchannels: (0..n).map(|i| format!("{id}-rootcoord-dml_{i}")).collect(),
        }
    }

    fn edge(s: &str, t: &str) -> CrossClusterTopology {
        CrossClusterTopology {
            source_cluster_id: s.into(),
            target_cluster_id: t.into(),
        }
    }

    fn star() -> ReplicateConfiguration {
        ReplicateConfiguration {
            clusters: vec![
                cluster("a", "http://127.0.0.1:1", "ta", 2),
                cluster("b", "http://127.0.0.1:2", "tb", 2),
                cluster("c", "http://127.0.0.1:3", "tc", 2),
            ],
            cross_cluster_topology: vec![edge("a", "b"), edge("a", "c")],
        }
    }

    fn local(id: &str) -> Vec<String> {
        (0..2).map(|i| format!("{id}-rootcoord-dml_{i}")).collect()
    }

    fn refusal(
        config: &ReplicateConfiguration,
        stored: Option<&ReplicateConfiguration>,
        me: &str,
    ) -> String {
        let e = validate(config, stored, me, &local(me), RedactedTokens::Refused)
            .expect_err("config must be refused");
        assert_eq!(e.code, code::PARAMETER_INVALID);
        e.message
    }

    #[test]
    fn star_is_accepted_and_roles_follow() {
        let stored =
            validate(&star(), None, "b", &local("b"), RedactedTokens::Refused).expect("valid");
        assert_eq!(
            role_of(Some(&stored), "a"),
            Role::Primary {
                secondaries: vec!["b".into(), "c".into()]
            }
        );
        assert_eq!(
            role_of(Some(&stored), "c"),
            Role::Secondary {
                primary: "a".into()
            }
        );
        assert!(is_replicating(Some(&stored)));
        assert!(sanitize(&stored).clusters.iter().all(|c| {
            c.connection_param
                .as_ref()
                .is_some_and(|p| p.token.is_empty())
        }));
    }

    #[test]
    fn each_rule_has_its_message() {
        let mut dup_id = star();
        dup_id.clusters[2].cluster_id = "b".into();
        assert!(refusal(&dup_id, None, "a").contains("duplicate cluster_id 'b'"));

        let mut dup_uri = star();
        dup_uri.clusters[2]
            .connection_param
            .as_mut()
            .expect("set")
            .uri = "http://127.0.0.1:2".into();
        assert!(refusal(&dup_uri, None, "a").contains("duplicate connection_param.uri"));

        let mut bad_uri = star();
        bad_uri.clusters[1]
            .connection_param
            .as_mut()
            .expect("set")
            .uri = "not a uri".into();
        assert!(refusal(&bad_uri, None, "a").contains("is not a valid URI"));

        let mut counts = star();
        counts.clusters[1] = cluster("b", "http://127.0.0.1:2", "", 3);
        assert!(refusal(&counts, None, "a").contains("same number of pchannels"));

        assert_eq!(
            refusal(&star(), None, "z").split(':').next(),
            Some("current Milvus cluster 'z' must be included in the clusters list")
        );

        let mut chain = star();
        chain.cross_cluster_topology = vec![edge("a", "b"), edge("b", "c")];
        assert!(refusal(&chain, None, "a").contains("must be a star"));

        let mut twice = star();
        twice.cross_cluster_topology.push(edge("a", "b"));
        assert!(refusal(&twice, None, "a").contains("duplicate topology edge a->b"));
    }

    #[test]
    fn stored_config_constrains_changes() {
        let stored = star();
        let mut moved = star();
        moved.clusters[1]
            .connection_param
            .as_mut()
            .expect("set")
            .uri = "http://127.0.0.1:9".into();
        assert!(
            refusal(&moved, Some(&stored), "a")
                .starts_with("cluster 'b' connection_param.uri cannot be changed")
        );

        let mut token = star();
        token.clusters[1]
            .connection_param
            .as_mut()
            .expect("set")
            .token = "other".into();
        assert!(
            refusal(&token, Some(&stored), "a")
                .starts_with("cluster 'b' connection_param.token cannot be changed")
        );

        let mut shrunk = star();
        for c in &mut shrunk.clusters {
            c.pchannels.reverse();
        }
        let e = validate(
            &shrunk,
            Some(&stored),
            "a",
            &["a-rootcoord-dml_1".into(), "a-rootcoord-dml_0".into()],
            RedactedTokens::Refused,
        )
        .expect_err("reordered pchannels");
        assert!(e.message.contains("can only be appended"), "{}", e.message);

        // A read-modify-write with blanked tokens: refused by released 3.0.x, the stored
        // tokens kept by newer code.
        let blanked = sanitize(&stored);
        let e = validate(
            &blanked,
            Some(&stored),
            "a",
            &local("a"),
            RedactedTokens::Refused,
        )
        .expect_err("a blanked token is a change");
        assert!(
            e.message
                .contains("connection_param.token cannot be changed")
        );
        let filled = validate(
            &blanked,
            Some(&stored),
            "a",
            &local("a"),
            RedactedTokens::Filled,
        )
        .expect("round trip is valid");
        assert_eq!(filled, stored);
    }
}
