//! Preflight's look at what the ends of a restore with secondaries run: one build on every
//! end, with the replicated import gate on.
//!
//! Milvus's replicated import has no release-note contract (milvus#53544): its gate,
//! `dataCoord.import.enableInReplicatingCluster`, is off by default, and with it on a
//! maintainer requires every end to run the same build; the guide's promise that a job
//! fails on the side that diverges holds only where every end has the gate on. A build is
//! what `GetVersion` answers (a release's version, or a branch build's
//! `<branch>-<date>-<sha>`; docs/milvus-facts.md §4.2): a secondary whose string is not the
//! target's is refused unless the job allows it (`allow_mixed_builds`). The gate is read
//! from each end's management API (its metrics port, §4.6), which the host config names per
//! cluster. An end without one cannot be read: it is let through with one warning, as
//! preflight lets through a server without `GetReplicateInfo`, since a target with the gate
//! off still refuses the first create, before any job exists.

use futures::future::join_all;
use serde::{Deserialize, Serialize};

use super::ends::Ends;
use super::refusal::Refusal;
use crate::milvus::ServerVersion;

/// An end's replicated import gate as preflight found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Gate {
    On,
    Off,
    /// The host config gives the end no management URI.
    NotRead,
}

/// What preflight learned of the ends' builds and gates, for the plan and the report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Builds {
    /// Each end's gate, in [`Ends::all`] order; empty for a restore without secondaries,
    /// where no gate applies.
    pub gates: Vec<Gate>,
    /// `end build` of every end, when their builds differ and the job let it through.
    pub mixed: Vec<String>,
}

impl Builds {
    /// The ends of `ends` (those preflight looked at) whose gate was not read, by name.
    pub fn not_read(&self, ends: &Ends) -> Vec<String> {
        (ends.all().iter())
            .zip(&self.gates)
            .filter(|(_, gate)| **gate == Gate::NotRead)
            .map(|(end, _)| end.name.clone())
            .collect()
    }
}

/// Holds a restore with secondaries to one build (that of the target) and the gate on, on
/// every end of `ends`, which run `versions`; refuses each end that does not, unless
/// `allow_mixed` lets different builds through.
pub(super) async fn check(
    ends: &Ends,
    versions: &[ServerVersion],
    allow_mixed: bool,
    refusals: &mut Vec<Refusal>,
) -> Builds {
    if ends.secondaries().is_empty() {
        return Builds::default();
    }
    let target = (ends.target(), &versions[0]);
    let differ: Vec<_> = (ends.secondaries().iter())
        .zip(&versions[1..])
        .filter(|(_, build)| build.to_string() != target.1.to_string())
        .collect();
    let mut mixed = Vec::new();
    if !differ.is_empty() && allow_mixed {
        mixed = (ends.all().iter())
            .zip(versions)
            .map(|(end, build)| format!("{} {build}", end.name))
            .collect();
        tracing::warn!(builds = %mixed.join(", "), "the ends run different builds, which Milvus's replicated import does not promise to handle (milvus#53544): restoring anyway, as the job allows");
    } else {
        refusals.extend(differ.into_iter().map(|(end, build)| Refusal::MixedBuilds {
            secondary: end.name.clone(),
            build: build.to_string(),
            target: target.0.name.clone(),
            target_build: target.1.to_string(),
        }));
    }
    Builds {
        gates: gates(ends, refusals).await,
        mixed,
    }
}

/// Every end's gate, read from its management API; refuses an end with the gate off, and
/// one whose management API does not say.
async fn gates(ends: &Ends, refusals: &mut Vec<Refusal>) -> Vec<Gate> {
    let read = join_all(ends.all().iter().map(|end| async move {
        match &end.management {
            Some(api) => Some(api.replicated_import_gate().await),
            None => None,
        }
    }))
    .await;
    let mut gates = Vec::new();
    for (end, read) in ends.all().iter().zip(read) {
        let management =
            || (end.management.as_ref()).map_or(String::new(), |api| api.uri().to_owned());
        let unreadable = |reason: String| Refusal::GateUnreadable {
            role: end.role,
            end: end.name.clone(),
            management: management(),
            reason,
        };
        gates.push(match read {
            None => Gate::NotRead,
            Some(Ok(Some(true))) => Gate::On,
            Some(Ok(Some(false))) => {
                refusals.push(Refusal::GateOff {
                    role: end.role,
                    end: end.name.clone(),
                    management: management(),
                });
                Gate::Off
            }
            Some(Ok(None)) => {
                refusals.push(unreadable(
                    "its settings do not list dataCoord.import.enableInReplicatingCluster".into(),
                ));
                Gate::NotRead
            }
            Some(Err(e)) => {
                refusals.push(unreadable(e.to_string()));
                Gate::NotRead
            }
        });
    }
    let unread: Vec<&str> = (ends.all().iter())
        .zip(&gates)
        .filter(|(end, gate)| **gate == Gate::NotRead && end.management.is_none())
        .map(|(end, _)| end.name.as_str())
        .collect();
    if !unread.is_empty() {
        tracing::warn!(
            ends = %unread.join(", "),
            "the replicated import gate (dataCoord.import.enableInReplicatingCluster) cannot be \
             read: the host config gives no management URI; add `management = \"http://HOST:9091\"` \
             (Milvus's metrics port) to each cluster to have it checked before anything is written"
        );
    }
    gates
}
