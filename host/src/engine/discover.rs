//! Secondaries from the topology: a job that names none, for a target whose host config says
//! `secondaries = "discover"`, restores into every cluster the target replicates to. They
//! are read from the target's replication configuration and each is resolved, by its URI, to
//! its cluster of the host config, whose storage and credentials it then has; one that is
//! no cluster there is refused, since lockstep would hold its mirrors blind. Preflight then
//! holds them to the topology as it holds secondaries a job named.

use std::borrow::Cow;

use super::ends::Ends;
use super::refusal::Refusal;
use crate::config::same_endpoint;
use crate::job::Job;
use crate::milvus::Topology;
use crate::milvus::topology::uri_of;

/// `job`, with its secondaries discovered when it asks for that.
pub async fn secondaries(job: &Job) -> Result<Cow<'_, Job>, Vec<Refusal>> {
    let Some(discover) = &job.discover else {
        return Ok(Cow::Borrowed(job));
    };
    let ends = Ends::for_job(job).map_err(|e| vec![Refusal::Client(e)])?;
    let target = ends.target();
    let topology = match target.grpc.replicate_configuration().await {
        Ok(config) => Topology::new(config),
        Err(e) => {
            return Err(vec![Refusal::TopologyUnreadable {
                end: target.name.clone(),
                reason: e.to_string(),
            }]);
        }
    };
    // A target that does not replicate, or is not where its topology begins, has no
    // secondaries to find: preflight says what it says of such a target.
    let Some(me) = (topology.find(None, &target.uri)).or_else(|| topology.primary()) else {
        return Ok(Cow::Owned(job.with_discovered(Vec::new())));
    };
    let mut found = Vec::new();
    let mut refusals = Vec::new();
    for cluster in topology.targets_of(&me.cluster_id) {
        let uri = uri_of(cluster);
        let known = discover.clusters.iter().find(|c| {
            let at = match c {
                Ok(secondary) => secondary.end.uri.as_str(),
                Err(unfit) => unfit.uri.as_str(),
            };
            same_endpoint(at, &uri)
        });
        match known {
            Some(Ok(secondary)) => found.push(secondary.clone()),
            Some(Err(unfit)) => refusals.push(Refusal::DiscoveredUnfit {
                target: target.name.clone(),
                cluster: cluster.cluster_id.clone(),
                name: unfit.name.clone(),
                why: unfit.why.clone(),
            }),
            None => refusals.push(Refusal::DiscoveredUnknown {
                target: target.name.clone(),
                cluster: cluster.cluster_id.clone(),
                uri,
            }),
        }
    }
    if !refusals.is_empty() {
        return Err(refusals);
    }
    let names: Vec<&str> = found.iter().map(|s| s.end.name.as_str()).collect();
    tracing::info!(target = %target.name, secondaries = ?names, "secondaries discovered from the target's replication configuration");
    Ok(Cow::Owned(job.with_discovered(found)))
}
