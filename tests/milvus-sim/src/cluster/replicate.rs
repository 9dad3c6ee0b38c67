//! The replication configuration of a cluster (docs/milvus-facts.md §3): Get and Update with
//! Milvus's rules ([`crate::replication`]), and the checkpoints `GetReplicateInfo` answers.

use std::time::Duration;

use milvus_proto::common::{ReplicateCheckpoint, ReplicateConfiguration};

use super::{Cluster, State};
use crate::cdc::CdcMessage;
use crate::merr::MilvusError;
use crate::replication::{self, Role};

/// How long a secondary waits for a config it was sent directly to arrive through CDC.
/// [infer]: Milvus's docs say only that it waits; a bound keeps a client from hanging forever.
const CONFIG_ARRIVAL_WAIT: Duration = Duration::from_secs(10);

/// What an UpdateReplicateConfiguration call still has to do after the synchronous part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConfigStep {
    Done,
    AwaitReplication,
}

impl Cluster {
    /// The stored config with tokens blanked, as `GetReplicateConfiguration` answers.
    pub fn replicate_configuration(&self) -> Option<ReplicateConfiguration> {
        self.lock()
            .replicate_config
            .as_ref()
            .map(replication::sanitize)
    }

    /// `GetReplicateInfo` on this cluster: how far its replication from `source` has come on
    /// the source's pchannel `pchannel`, read off the source's stream to this cluster, and held
    /// where it was when the pchannel's replay stopped at a rejected commit fence. `None`
    /// unless this cluster is a secondary of `source` and the pchannel is one of the source's.
    pub fn replicate_checkpoint(
        &self,
        source: &str,
        pchannel: &str,
    ) -> Option<ReplicateCheckpoint> {
        let role = replication::role_of(self.lock().replicate_config.as_ref(), self.id());
        if !matches!(&role, Role::Secondary { primary } if primary == source) {
            return None;
        }
        let primary = self.0.registry.upgrade()?.get(source)?;
        // CDC maps the source's pchannel i to this cluster's pchannel i.
        let index = primary.0.pchannels.iter().position(|p| p == pchannel)?;
        let live = self.stream_checkpoint(source)?;
        let stopped =
            (self.0.pchannels.get(index)).and_then(|own| self.lock().fences.checkpoint(own));
        let time_tick = stopped.map_or(live, |at| at.min(live));
        Some(ReplicateCheckpoint {
            cluster_id: source.to_owned(),
            pchannel: pchannel.to_owned(),
            message_id: None,
            time_tick,
        })
    }

    /// `UpdateReplicateConfiguration` (docs/milvus-facts.md §3.1): validated with Milvus's rules;
    /// on the primary the new config also travels to its secondaries over the stream. A cluster
    /// that is a secondary waits for the config to arrive through CDC.
    pub async fn update_replicate_configuration(
        &self,
        incoming: &ReplicateConfiguration,
    ) -> Result<(), MilvusError> {
        let mut changes = self.0.config_changed.subscribe();
        if self.store_unless_secondary(incoming)? == ConfigStep::Done {
            return Ok(());
        }
        let arrived = tokio::time::timeout(CONFIG_ARRIVAL_WAIT, async {
            while changes.changed().await.is_ok() {
                let state = self.lock();
                let stored = state.replicate_config.as_ref();
                if self
                    .validate_config(incoming, stored)
                    .is_ok_and(|v| Some(&v) == stored)
                {
                    return true;
                }
            }
            false
        })
        .await;
        match arrived {
            Ok(true) => Ok(()),
            _ => Err(MilvusError::new(
                crate::merr::code::UNEXPECTED,
                format!(
                    "cluster '{}' is a secondary; the replicate configuration did not arrive through CDC within {CONFIG_ARRIVAL_WAIT:?}",
                    self.id()
                ),
            )),
        }
    }

    /// Validates and stores `incoming`, replicating it from a primary; a secondary must wait
    /// for the config to arrive through CDC instead.
    fn store_unless_secondary(
        &self,
        incoming: &ReplicateConfiguration,
    ) -> Result<ConfigStep, MilvusError> {
        let mut state = self.lock();
        let validated = self.validate_config(incoming, state.replicate_config.as_ref())?;
        if Some(&validated) == state.replicate_config.as_ref() {
            return Ok(ConfigStep::Done);
        }
        if let Role::Secondary { .. } =
            replication::role_of(state.replicate_config.as_ref(), self.id())
        {
            return Ok(ConfigStep::AwaitReplication);
        }
        self.store_config(&mut state, validated.clone());
        self.broadcast(&mut state, CdcMessage::ReplicateConfig(validated));
        Ok(ConfigStep::Done)
    }

    /// Stores a config without the secondary wait: the Sim applies its topology's short form
    /// to every cluster this way at start, as an operator applies it to each cluster.
    pub(crate) fn apply_configuration(
        &self,
        config: &ReplicateConfiguration,
    ) -> Result<(), MilvusError> {
        let mut state = self.lock();
        let validated = self.validate_config(config, state.replicate_config.as_ref())?;
        self.store_config(&mut state, validated);
        Ok(())
    }

    pub(super) fn store_config(&self, state: &mut State, config: ReplicateConfiguration) {
        state.replicate_config = Some(config);
        self.0.config_changed.send_modify(|n| *n += 1);
    }

    /// [`replication::validate`] with this cluster's id, pchannels and token rule.
    pub(super) fn validate_config(
        &self,
        incoming: &ReplicateConfiguration,
        stored: Option<&ReplicateConfiguration>,
    ) -> Result<ReplicateConfiguration, MilvusError> {
        let redacted = if self.0.spec.fill_redacted_tokens {
            replication::RedactedTokens::Filled
        } else {
            replication::RedactedTokens::Refused
        };
        replication::validate(incoming, stored, self.id(), &self.0.pchannels, redacted)
    }
}
