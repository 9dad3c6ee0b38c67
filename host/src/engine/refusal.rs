//! Why a restore is refused: every reason preflight, the plugin loader or the first import
//! create can give, each with the values it names, so that callers and tests branch on the
//! kind and people read the text (the report keeps the text).

use crate::backup::{CollectionConflict, Namespace};
use crate::journal::Role;
use crate::milvus::ServerVersion;

/// What to check for an end that did not answer: over TLS, the certificates too, since a
/// refused handshake reads as a dropped connection.
fn unreachable_advice(uri: &str) -> &'static str {
    if uri.starts_with("https://") {
        "check its URI, its TLS settings (CA, certificate name, client certificate) and that Milvus is up"
    } else {
        "check its URI and that Milvus is up"
    }
}

/// One line for an end that did not answer, naming its URI once: `reason` is
/// `milvus::Error`'s text, which starts with the end and the URI this line names already,
/// and an end given by URI alone is named by it.
fn unreachable_text(end: &str, uri: &str, reason: &str) -> String {
    let cause = reason
        .strip_prefix(&format!("{end}: cannot reach {uri}: "))
        .unwrap_or(reason);
    let at = match end == uri {
        true => String::new(),
        false => format!(" ({uri})"),
    };
    format!(
        "{end}{at} is unreachable: {cause}; {}",
        unreachable_advice(uri)
    )
}

/// One reason to refuse a restore. The text says why and what to do.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refusal {
    #[error(transparent)]
    Client(super::ends::NoClient),
    /// Another process holds the restore's claim.
    #[error(
        "restore {id} is being worked on by {holder}; wait for it to finish, or see \
         `lockstep status`"
    )]
    Busy { id: String, holder: String },
    #[error("{}", unreachable_text(end, uri, reason))]
    Unreachable {
        end: String,
        uri: String,
        reason: String,
    },
    #[error(
        "{role} {end} runs Milvus {found}; a restore with secondaries holds every import \
         Uncommitted (two-phase import), which needs Milvus 3.0 or newer on the target and \
         every secondary"
    )]
    VersionTooOld {
        role: Role,
        end: String,
        found: ServerVersion,
    },
    #[error(
        "{end} runs the branch build {version}, and asking which import routes it serves \
         failed: {reason}"
    )]
    RouteUnknown {
        end: String,
        version: ServerVersion,
        reason: String,
    },
    /// The job's strategy and what the target's import API can do do not meet.
    #[error(transparent)]
    NoRoute(#[from] super::route::NoRoute),
    #[error("cannot read the replication configuration of {end}: {reason}")]
    TopologyUnreadable { end: String, reason: String },
    #[error(
        "strategy per_seg uses auto-commit imports, which Milvus refuses in a replicating \
         cluster and {target} replicates; use strategy = \"merged\" with its secondaries"
    )]
    PerSegReplicates { target: String },
    #[error(
        "target {target} does not replicate (GetReplicateConfiguration has no topology), so \
         {} cannot be its secondaries; drop them from the job or configure CDC first",
        .secondaries.join(", ")
    )]
    NotReplicating {
        target: String,
        secondaries: Vec<String>,
    },
    #[error(
        "the replication configuration of {target} has no single primary; fix the topology \
         first"
    )]
    NoPrimary { target: String },
    #[error(
        "{target} is a secondary (cluster {cluster}) in its replication topology; restore into \
         the primary {primary}"
    )]
    TargetIsSecondary {
        target: String,
        cluster: String,
        primary: String,
    },
    #[error(
        "target {target} replicates to {}; name them as secondaries ({fix}) so the restore \
         holds every mirror Uncommitted before the commit, or say `secondaries = \"discover\"` \
         on its cluster in the host config",
        .replicates_to.join(", ")
    )]
    SecondariesUnnamed {
        target: String,
        replicates_to: Vec<String>,
        /// The secondaries as the caller would name them: a job file's key, a flag or a
        /// request's field.
        fix: String,
    },
    #[error(
        "target {target} replicates and runs Milvus {version}; import into a replicating \
         cluster needs Milvus 3.0 or newer"
    )]
    ReplicatingTooOld {
        target: String,
        version: ServerVersion,
    },
    #[error(
        "secondary {secondary} ({uri}) is not a replication target of {target} (cluster \
         {cluster}); its targets are: {}",
        if .targets.is_empty() { "none".to_string() } else { .targets.join(", ") }
    )]
    NotATarget {
        secondary: String,
        uri: String,
        target: String,
        cluster: String,
        targets: Vec<String>,
    },
    #[error(
        "{target} replicates to cluster {cluster} at {uri}, which is no cluster of the host \
         config; add it to [clusters] with its storage, so its secondaries can be discovered"
    )]
    DiscoveredUnknown {
        target: String,
        cluster: String,
        uri: String,
    },
    #[error(
        "{target} replicates to cluster {cluster}, the host config's {name}, which cannot be a secondary: {why}"
    )]
    DiscoveredUnfit {
        target: String,
        cluster: String,
        name: String,
        why: String,
    },
    #[error(
        "{target} also replicates to cluster {cluster} at {uri}, which the job does not name; \
         every secondary must be held Uncommitted before the commit, so add it to secondaries"
    )]
    UnnamedTarget {
        target: String,
        cluster: String,
        uri: String,
    },
    #[error(
        "secondary {secondary}'s replication from cluster {from} has not moved in \
         {waited_ms} ms on {}: its checkpoint stands {behind}; the topology still names it, so \
         the replication stopped without saying so (as milvus#52727 does after a standby is \
         seeded), and its mirrors would never appear; get the replication moving again \
         before the restore",
        .pchannels.join(", ")
    )]
    StreamStalled {
        secondary: String,
        /// The cluster it replicates from.
        from: String,
        pchannels: Vec<String>,
        /// Where the oldest checkpoint stands, in words.
        behind: String,
        waited_ms: u64,
    },
    #[error(
        "secondary {secondary} has no replication checkpoint from cluster {from} on \
         {pchannel} (GetReplicateInfo), although the topology names it as a target; it does \
         not replicate, and its mirrors would never appear"
    )]
    NoCheckpoint {
        secondary: String,
        from: String,
        pchannel: String,
    },
    #[error("cannot read the replication progress of secondary {secondary}: {reason}")]
    StreamUnreadable { secondary: String, reason: String },
    #[error(
        "secondary {secondary} reads import paths as {secondary_paths}, but the target \
         {target} as {target_paths}; a mirror imports the target's paths verbatim, so set \
         storage_type and local_storage_path alike on every end"
    )]
    PathForms {
        secondary: String,
        secondary_paths: String,
        target: String,
        target_paths: String,
    },
    #[error(
        "restore.rbac: restoring users, roles and grants is not supported by this version of \
         lockstep; restore RBAC with milvus-backup or leave rbac off"
    )]
    Rbac,
    #[error(
        "restore.drop_exist_index is not supported by this version of lockstep; drop the \
         indexes first or use drop_exist_collection"
    )]
    DropExistIndex,
    #[error("backup storage {url}: {reason}")]
    BackupStorage { url: String, reason: String },
    /// The backup cannot be read or planned (missing, corrupt, a format not restored).
    #[error("backup {backup}: {reason}")]
    Backup { backup: String, reason: String },
    #[error(
        "collection {collection}: segment {segment} of its snapshot bundle is in storage \
         version 3, which Milvus's backup import cannot read (milvus#52930); leave the \
         collection out with a filter to restore the others"
    )]
    StorageV3 { collection: String, segment: i64 },
    /// The collection the DDL made (or found) numbers its fields otherwise than the
    /// backup's files do: an import would file each field's data under another field.
    #[error(
        "collection {collection} on the target numbers its fields otherwise than the \
         backup's files: {}; the target did not keep the backup's field ids, so nothing \
         was imported and what this restore created was dropped",
        .mismatched.join(", ")
    )]
    FieldIds {
        collection: String,
        /// `name: id in the backup → id on the target`, one per field that differs.
        mismatched: Vec<String>,
    },
    /// One object of the backup is not what its meta says (`verify_backup`): one refusal
    /// per object, so each is a line of its own.
    #[error("backup {backup}: {finding}")]
    BackupObject {
        backup: String,
        finding: crate::backup::verify::Finding,
    },
    /// A file group's binlogs hold other rows than its segments' meta says.
    #[error("backup {backup} disagrees with its meta: {disagreement}")]
    BackupRows {
        backup: String,
        disagreement: crate::backup::rows::Disagreement,
    },
    #[error("nothing to restore: no collection of backup {backup} passes the job's filters")]
    NothingToRestore { backup: String },
    #[error(transparent)]
    CollectionConflict(#[from] CollectionConflict),
    #[error(
        "collection {collection} does not exist on the target (no database {}), and \
         skip_create_collection imports into an existing one",
        .collection.db
    )]
    NoDatabase { collection: Namespace },
    #[error("cannot tell whether {collection} exists: {reason}")]
    ExistenceUnknown {
        collection: Namespace,
        reason: String,
    },
    #[error("cannot list the import jobs active on {end}: {reason}")]
    BudgetUnknown { end: String, reason: String },
    #[error(
        "the restore holds {held} import jobs Uncommitted at once and {end} has {active} \
         active (every job not Completed or Failed counts, mirrors too), beyond its import \
         job budget of {limit} (dataCoord.import.maxImportJobNum); {advice}"
    )]
    OverBudget {
        held: usize,
        end: String,
        active: usize,
        limit: usize,
        advice: String,
    },
    /// Said once for every end it holds on, naming them.
    #[error(
        "{} import no L0 (delete-only) segments (Milvus 2.3 has none; from 3.0 only with \
         dataCoord.import.enableL0Import on), and the L0 deletes of {} cannot be folded into \
         the data imports, because their data did not read (the warnings name each object); \
         restore a readable backup, or turn the setting on and say so with \
         `l0_import = true` in {} of the host config",
        EndRunning::list(ends),
        .collections.join(", "),
        .ends.iter().map(|e| format!("[clusters.{}]", e.end)).collect::<Vec<_>>().join(", ")
    )]
    L0Import {
        ends: Vec<EndRunning>,
        collections: Vec<String>,
    },
    #[error(
        "the L0 deletes of {} cannot be folded into the data imports, because their data did \
         not read (the warnings name each object), and a two-phase import cannot take them as \
         L0 jobs: their deletes would keep timestamps older than the commit gives the rows and \
         remove nothing (milvus#51247); restore a readable backup",
        .collections.join(", ")
    )]
    L0TwoPhase { collections: Vec<String> },
    #[error("the plugin runtime cannot start: {reason}")]
    PluginRuntime { reason: String },
    #[error("check[{index}] ({name}): {reason}")]
    CheckLoad {
        index: usize,
        name: String,
        reason: String,
    },
    #[error(
        "{reason}; enable dataCoord.import.enableInReplicatingCluster on the target and every \
         secondary (it is off by default)"
    )]
    ReplicatedImportDisabled { reason: String },
    /// An end's clock stands at or before the backup's newest row (milvus#51589).
    #[error(
        "{role} {end}'s clock (AllocTimestamp) reads {clock}, {behind} before the newest row \
         of the backup ({newest_row}, in {collection}); Milvus refuses a commit stamped below \
         the rows it makes visible and retries it without end, which stops the collection's \
         channels until an operator steps in (milvus#51589); set the clock of {end}'s nodes \
         right (NTP) and run the restore again"
    )]
    ClockBehind {
        role: Role,
        end: String,
        /// Both times in UTC, and how far apart, in words.
        clock: String,
        newest_row: String,
        behind: String,
        collection: String,
    },
    #[error(
        "cannot read the clock of {role} {end} (AllocTimestamp): {reason}; a commit stamped \
         below the backup's rows would stop its channels (milvus#51589), so nothing is started \
         before the clock is known"
    )]
    ClockUnreadable {
        role: Role,
        end: String,
        reason: String,
    },
    /// A secondary runs another build than the target's (milvus#53544).
    #[error(
        "secondary {secondary} runs {build} and the target {target} runs {target_build}; \
         Milvus's replicated import is promised only between ends of the same build \
         (milvus#53544), so run one build on every end, or set [two_phase] \
         allow_mixed_builds = true to restore anyway"
    )]
    MixedBuilds {
        secondary: String,
        build: String,
        target: String,
        target_build: String,
    },
    #[error(
        "{role} {end} has dataCoord.import.enableInReplicatingCluster off (its management API \
         at {management} says so); a restore with secondaries imports on every end through \
         that gate, so turn it on there (it takes effect without a restart)"
    )]
    GateOff {
        role: Role,
        end: String,
        management: String,
    },
    #[error(
        "cannot read the replicated import gate of {role} {end} from its management API at \
         {management}: {reason}; check `management` of its cluster in the host config \
         (Milvus's metrics port, 9091 by default) and its token, or leave it out to restore \
         without reading the gate"
    )]
    GateUnreadable {
        role: Role,
        end: String,
        management: String,
        reason: String,
    },
}

/// An end and the Milvus it runs, for a refusal that holds on several ends.
#[derive(Debug, Clone, PartialEq)]
pub struct EndRunning {
    pub role: Role,
    pub end: String,
    pub version: ServerVersion,
}

impl EndRunning {
    fn list(ends: &[EndRunning]) -> String {
        ends.iter()
            .map(|e| format!("{} {} (Milvus {})", e.role, e.end, e.version))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl Refusal {
    /// The kind, for scripts and tests to branch on: the variant's name in snake case, as
    /// the report's `refusal_kinds` lists it.
    pub fn kind(&self) -> &'static str {
        match self {
            Refusal::Client(_) => "client",
            Refusal::Busy { .. } => "busy",
            Refusal::Unreachable { .. } => "unreachable",
            Refusal::VersionTooOld { .. } => "version_too_old",
            Refusal::RouteUnknown { .. } => "route_unknown",
            Refusal::NoRoute(_) => "no_route",
            Refusal::TopologyUnreadable { .. } => "topology_unreadable",
            Refusal::PerSegReplicates { .. } => "per_seg_replicates",
            Refusal::NotReplicating { .. } => "not_replicating",
            Refusal::NoPrimary { .. } => "no_primary",
            Refusal::TargetIsSecondary { .. } => "target_is_secondary",
            Refusal::SecondariesUnnamed { .. } => "secondaries_unnamed",
            Refusal::ReplicatingTooOld { .. } => "replicating_too_old",
            Refusal::NotATarget { .. } => "not_a_target",
            Refusal::DiscoveredUnknown { .. } => "discovered_unknown",
            Refusal::DiscoveredUnfit { .. } => "discovered_unfit",
            Refusal::UnnamedTarget { .. } => "unnamed_target",
            Refusal::StreamStalled { .. } => "stream_stalled",
            Refusal::NoCheckpoint { .. } => "no_checkpoint",
            Refusal::StreamUnreadable { .. } => "stream_unreadable",
            Refusal::PathForms { .. } => "path_forms",
            Refusal::Rbac => "rbac",
            Refusal::DropExistIndex => "drop_exist_index",
            Refusal::BackupStorage { .. } => "backup_storage",
            Refusal::Backup { .. } => "backup",
            Refusal::StorageV3 { .. } => "storage_v3",
            Refusal::BackupObject { .. } => "backup_object",
            Refusal::BackupRows { .. } => "backup_rows",
            Refusal::FieldIds { .. } => "field_ids",
            Refusal::NothingToRestore { .. } => "nothing_to_restore",
            Refusal::CollectionConflict(_) => "collection_conflict",
            Refusal::NoDatabase { .. } => "no_database",
            Refusal::ExistenceUnknown { .. } => "existence_unknown",
            Refusal::BudgetUnknown { .. } => "budget_unknown",
            Refusal::OverBudget { .. } => "over_budget",
            Refusal::L0Import { .. } | Refusal::L0TwoPhase { .. } => "l0_import",
            Refusal::PluginRuntime { .. } => "plugin_runtime",
            Refusal::CheckLoad { .. } => "check_load",
            Refusal::ReplicatedImportDisabled { .. } => "replicated_import_disabled",
            Refusal::ClockBehind { .. } => "clock_behind",
            Refusal::ClockUnreadable { .. } => "clock_unreadable",
            Refusal::MixedBuilds { .. } => "mixed_builds",
            Refusal::GateOff { .. } => "gate_off",
            Refusal::GateUnreadable { .. } => "gate_unreadable",
        }
    }

    /// The texts of `refusals`, as a report keeps them.
    pub fn texts(refusals: &[Refusal]) -> Vec<String> {
        refusals.iter().map(ToString::to_string).collect()
    }

    /// `refusals` in one line, for a summary.
    pub fn joined(refusals: &[Refusal]) -> String {
        Refusal::texts(refusals).join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(v: &str) -> ServerVersion {
        ServerVersion::parse(v)
    }

    /// An end given by URI was named four times: as the end, in brackets, and twice in the
    /// client's error.
    #[test]
    fn an_unreachable_end_is_one_line_naming_its_uri_once() {
        let uri = "http://127.0.0.1:1";
        let refusal = |end: &str| Refusal::Unreachable {
            end: end.into(),
            uri: uri.into(),
            reason: format!("{end}: cannot reach {uri}: Connection refused (os error 111)"),
        };
        assert_eq!(
            refusal(uri).to_string(),
            "http://127.0.0.1:1 is unreachable: Connection refused (os error 111); check its \
             URI and that Milvus is up"
        );
        assert_eq!(
            refusal("t").to_string(),
            "t (http://127.0.0.1:1) is unreachable: Connection refused (os error 111); check \
             its URI and that Milvus is up"
        );
    }

    #[test]
    fn texts_read_as_one_sentence_each_without_runs_of_spaces() {
        let all = [
            Refusal::VersionTooOld {
                role: Role::Secondary,
                end: "b".into(),
                found: version("2.6.1"),
            },
            Refusal::Rbac,
            Refusal::DropExistIndex,
            Refusal::NotATarget {
                secondary: "c".into(),
                uri: "http://c:19530".into(),
                target: "a".into(),
                cluster: "ca".into(),
                targets: vec![],
            },
            Refusal::L0Import {
                ends: vec![
                    EndRunning {
                        role: Role::Target,
                        end: "a".into(),
                        version: version("3.0.1"),
                    },
                    EndRunning {
                        role: Role::Secondary,
                        end: "b".into(),
                        version: version("3.0.1"),
                    },
                ],
                collections: vec!["default.c".into(), "db1.d".into()],
            },
            Refusal::NoDatabase {
                collection: Namespace::new("db1", "c"),
            },
            Refusal::StorageV3 {
                collection: "default.c".into(),
                segment: 7,
            },
            Refusal::FieldIds {
                collection: "default.c".into(),
                mismatched: vec!["id: 200 → 100".into(), "vec: 201 → 101".into()],
            },
            Refusal::Busy {
                id: "orders-ab-1".into(),
                holder: "host-b".into(),
            },
            Refusal::Client(crate::engine::ends::NoClient {
                end: "a".into(),
                uri: "http//a:19530".into(),
                reason: "invalid uri character".into(),
            }),
            Refusal::Backup {
                backup: "nightly".into(),
                reason: "backup_meta.json not found".into(),
            },
            Refusal::StreamStalled {
                secondary: "b".into(),
                from: "a".into(),
                pchannels: vec!["a-dml_0".into(), "a-dml_1".into()],
                behind: "at 2026-12-03T08:00:00Z, 64 s behind this host's clock".into(),
                waited_ms: 5_000,
            },
        ];
        for refusal in &all {
            let text = refusal.to_string();
            assert!(!text.contains("  "), "a run of spaces: {text:?}");
            assert!(!text.contains('\n'), "one line: {text:?}");
        }
        assert_eq!(
            all[0].to_string(),
            "secondary b runs Milvus 2.6.1; a restore with secondaries holds every import \
             Uncommitted (two-phase import), which needs Milvus 3.0 or newer on the target and \
             every secondary"
        );
        assert_eq!(
            all[1].to_string(),
            "restore.rbac: restoring users, roles and grants is not supported by this version \
             of lockstep; restore RBAC with milvus-backup or leave rbac off"
        );
        assert!(all[3].to_string().ends_with("its targets are: none"));
        assert!(
            all[4].to_string().contains(
                "the L0 deletes of default.c, db1.d cannot be folded into the data imports"
            )
        );
        assert!(
            all[4].to_string().starts_with(
                "target a (Milvus 3.0.1), secondary b (Milvus 3.0.1) import no L0 (delete-only) segments"
            ),
            "said once, naming every end: {}",
            all[4]
        );
        assert!(
            all[4]
                .to_string()
                .contains("say so with `l0_import = true` in [clusters.a], [clusters.b] of")
        );
        assert!(all[5].to_string().contains("(no database db1)"));
        assert!(all[6].to_string().starts_with(
            "collection default.c: segment 7 of its snapshot bundle is in storage version 3"
        ));
        assert!(all[7].to_string().contains(
            "otherwise than the backup's files: id: 200 → 100, vec: 201 → 101; the target"
        ));
        assert_eq!(
            all[9].to_string(),
            "a (http//a:19530): invalid uri character; check its URI and token"
        );
        assert_eq!(
            all[10].to_string(),
            "backup nightly: backup_meta.json not found"
        );
        assert!(all[11].to_string().starts_with(
            "secondary b's replication from cluster a has not moved in 5000 ms on a-dml_0, \
             a-dml_1: its checkpoint stands at 2026-12-03T08:00:00Z, 64 s behind"
        ));
    }
}
