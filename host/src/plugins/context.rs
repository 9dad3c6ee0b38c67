//! The restore context a check is called with, as the engine builds it and as
//! `lockstep plugin test` reads it from JSON, and its conversion to the WIT
//! record.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::bindings::wit_types;

/// When a check runs (WIT `phase`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// After staging, before any import job is created.
    BeforeImport,
    /// After every job is Uncommitted on every end, before the decision.
    BeforeCommit,
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Phase::BeforeImport => "before-import",
            Phase::BeforeCommit => "before-commit",
        })
    }
}

/// The part an end plays (WIT `end-role`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EndRole {
    Target,
    Secondary,
}

/// One cluster of the restore (WIT `end`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckEnd {
    pub name: String,
    pub uri: String,
    pub role: EndRole,
}

/// One collection and the partitions restored into it (WIT `collection`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckCollection {
    pub database: String,
    pub name: String,
    pub partitions: Vec<String>,
}

/// A job's state on one end as the check sees it (WIT `job-state`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobState {
    Absent,
    Pending,
    Importing,
    Uncommitted,
    Committing,
    Completed,
    Failed(String),
    Unknown(String),
}

/// One end's view of a job (WIT `end-job-state`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndJobState {
    pub end: String,
    pub state: JobState,
}

/// One import job (WIT `import-job`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckImportJob {
    /// Milvus's job id; empty before the job exists.
    #[serde(default)]
    pub id: String,
    pub batch: u32,
    pub collection: String,
    pub partition: String,
    #[serde(default)]
    pub states: Vec<EndJobState>,
}

/// Everything a check is told about the restore (WIT `restore-context`, less
/// the check's own config, which each check adds from its `[[check]]` table).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckContext {
    pub restore_id: String,
    pub backup_name: String,
    pub phase: Phase,
    pub target: CheckEnd,
    #[serde(default)]
    pub secondaries: Vec<CheckEnd>,
    #[serde(default)]
    pub collections: Vec<CheckCollection>,
    #[serde(default)]
    pub jobs: Vec<CheckImportJob>,
}

impl CheckContext {
    /// Whether `name` is one of this restore's ends, the only ones a check's
    /// storage calls may reach.
    pub fn has_end(&self, name: &str) -> bool {
        self.target.name == name || self.secondaries.iter().any(|end| end.name == name)
    }

    /// The WIT record for one call, with the check's config sorted by key.
    pub(crate) fn to_wit(&self, config: &BTreeMap<String, String>) -> wit_types::RestoreContext {
        wit_types::RestoreContext {
            restore_id: self.restore_id.clone(),
            backup_name: self.backup_name.clone(),
            phase: match self.phase {
                Phase::BeforeImport => wit_types::Phase::BeforeImport,
                Phase::BeforeCommit => wit_types::Phase::BeforeCommit,
            },
            target: self.target.to_wit(),
            secondaries: self.secondaries.iter().map(CheckEnd::to_wit).collect(),
            collections: self
                .collections
                .iter()
                .map(|c| wit_types::Collection {
                    database: c.database.clone(),
                    name: c.name.clone(),
                    partitions: c.partitions.clone(),
                })
                .collect(),
            jobs: self.jobs.iter().map(CheckImportJob::to_wit).collect(),
            config: config.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        }
    }
}

impl CheckEnd {
    fn to_wit(&self) -> wit_types::End {
        wit_types::End {
            name: self.name.clone(),
            uri: self.uri.clone(),
            role: match self.role {
                EndRole::Target => wit_types::EndRole::Target,
                EndRole::Secondary => wit_types::EndRole::Secondary,
            },
        }
    }
}

impl CheckImportJob {
    fn to_wit(&self) -> wit_types::ImportJob {
        wit_types::ImportJob {
            id: self.id.clone(),
            batch: self.batch,
            collection: self.collection.clone(),
            partition: self.partition.clone(),
            states: self
                .states
                .iter()
                .map(|s| wit_types::EndJobState {
                    end: s.end.clone(),
                    state: s.state.to_wit(),
                })
                .collect(),
        }
    }
}

impl JobState {
    fn to_wit(&self) -> wit_types::JobState {
        match self {
            JobState::Absent => wit_types::JobState::Absent,
            JobState::Pending => wit_types::JobState::Pending,
            JobState::Importing => wit_types::JobState::Importing,
            JobState::Uncommitted => wit_types::JobState::Uncommitted,
            JobState::Committing => wit_types::JobState::Committing,
            JobState::Completed => wit_types::JobState::Completed,
            JobState::Failed(reason) => wit_types::JobState::Failed(reason.clone()),
            JobState::Unknown(name) => wit_types::JobState::Unknown(name.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_documented_json_shape() {
        let json = r#"{
            "restore_id": "r1", "backup_name": "b1", "phase": "before-commit",
            "target": {"name": "a", "uri": "http://a:19530", "role": "target"},
            "secondaries": [{"name": "b", "uri": "http://b:19530", "role": "secondary"}],
            "jobs": [{"id": "7", "batch": 0, "collection": "c", "partition": "_default",
                      "states": [{"end": "a", "state": "uncommitted"},
                                 {"end": "b", "state": {"failed": "disk full"}}]}]
        }"#;
        let ctx: CheckContext = serde_json::from_str(json).expect("documented shape parses");
        assert_eq!(ctx.phase, Phase::BeforeCommit);
        assert!(ctx.has_end("b") && !ctx.has_end("c"));
        assert_eq!(
            ctx.jobs[0].states[1].state,
            JobState::Failed("disk full".into())
        );
        let config = BTreeMap::from([
            ("z".to_owned(), "1".to_owned()),
            ("a".to_owned(), "2".to_owned()),
        ]);
        let wit = ctx.to_wit(&config);
        assert_eq!(
            wit.config[0].0, "a",
            "config reaches the guest sorted by key"
        );
    }

    #[test]
    fn refuses_unknown_fields() {
        let json = r#"{"restore_id": "r", "backup_name": "b", "phase": "before-import",
            "target": {"name": "a", "uri": "u", "role": "target", "colour": "red"}}"#;
        let error = serde_json::from_str::<CheckContext>(json).expect_err("unknown field refused");
        assert!(error.to_string().contains("colour"), "{error}");
    }
}
