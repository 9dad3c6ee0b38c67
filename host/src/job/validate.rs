//! `JobFile` → `Job`: the one validation every form of a job goes through.
//!
//! Every check runs and every problem is collected; a field that deserialization already
//! refused (and removed) is not reported again as missing.

use std::collections::BTreeSet;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::Spanned;

use crate::backup::{
    CollectionCreation, DEFAULT_MAX_SEGMENTS_PER_JOB, Filter, RenameRule, RenameRules, Renaming,
    RestoreOptions, Strategy,
};

use super::file::{
    ClusterRef, JobFile, RestoreSection, TwoPhaseSection, VerifyRows, VerifySection,
};
use super::vocabulary::Vocabulary;
use super::{
    BackupSource, DEFAULT_VERIFY_SAMPLE, DEFAULT_VERIFY_TIMEOUT, Discover, End, EndName, Job,
    Secondary, Target, TwoPhase, Unfit, Verify,
};
use crate::config::{self as host, Env, HostConfig, StorageSpec, process_env};
use crate::diagnostic::InRange;
use crate::diagnostic::{self, Error, Input, Kind, RawProblem};
use crate::plugins::{AllowedHosts, Check, CheckLimits, CheckSection, Origin};

/// `mirror_grace` default: a mirror that is catching up gets five minutes (DESIGN §1).
const DEFAULT_MIRROR_GRACE: Duration = Duration::from_secs(5 * 60);

/// A job's name when it gives none, and where it came from: an invalid one is refused at
/// that field, saying how to choose another.
pub(crate) struct DefaultName {
    pub name: String,
    /// The job-file field it came from (`name` for the file stem, `backup` for a backup).
    pub field: &'static str,
    /// E.g. "taken from the file name; set `name` to choose another".
    pub hint: &'static str,
}

/// What validation needs besides the `JobFile`.
pub(crate) struct Context<'a> {
    pub host: &'a HostConfig,
    pub env: Env<'a>,
    /// The name when the job gives none: the file stem, or the backup name for flags and
    /// requests.
    pub default_name: Option<DefaultName>,
    /// Relative plugin paths are resolved against this.
    pub base_dir: PathBuf,
    /// Fields deserialization refused and removed: already reported.
    pub removed: &'a [String],
    /// The words of the input the job came in, which a refusal speaks.
    pub vocabulary: Vocabulary,
}

struct Problems<'a> {
    list: Vec<RawProblem>,
    removed: &'a [String],
    vocabulary: Vocabulary,
}

impl Problems<'_> {
    fn push(
        &mut self,
        field: impl Into<String>,
        span: Option<Range<usize>>,
        message: impl Into<String>,
    ) {
        self.list.push(RawProblem::new(field, span, message));
    }

    /// Reports a missing required field unless deserialization already reported it. A file's
    /// problem names its key; a flag's or a request field's location already names it.
    fn missing(&mut self, field: &str, span: Option<Range<usize>>, expected: &str) {
        if !self.removed.iter().any(|r| r == field) {
            let name = field.rsplit('.').next().unwrap_or(field);
            let message = match self.vocabulary {
                Vocabulary::File => format!("missing field `{name}`: expected {expected}"),
                Vocabulary::Flags | Vocabulary::Request => format!("missing: expected {expected}"),
            };
            (self.list).push(RawProblem::of_kind(Kind::Missing, field, span, message));
        }
    }

    /// [`Problems::missing`], with an example of the value as the input would give it.
    fn missing_like(&mut self, field: &str, expected: &str, value: &str) {
        let example = self.vocabulary.example(field, value);
        self.missing(field, None, &format!("{expected}, e.g. {example}"));
    }
}

/// Validates `file`, returning the job or every problem.
pub(crate) fn validate(file: JobFile, context: &Context<'_>) -> Result<Job, Vec<RawProblem>> {
    let mut problems = Problems {
        list: Vec::new(),
        removed: context.removed,
        vocabulary: context.vocabulary,
    };

    let name = job_name(&file, context, &mut problems);
    let backup = backup_source(&file, context, &mut problems);
    let target = target(&file, context, &mut problems);
    let secondaries = secondaries(
        &file,
        context,
        target.as_ref().map(|t| &t.end),
        &mut problems,
    );
    let discover = discover(&file, context, target.as_ref().map(|t| &t.end));
    let strategy = file.strategy.as_ref().map(|s| *s.get_ref());
    if let Some(spanned) = &file.strategy
        && strategy == Some(Strategy::PerSeg)
        && !file.secondaries.is_empty()
    {
        problems.push(
            "strategy",
            Some(spanned.span()),
            "per_seg cannot be used with secondaries: it imports with auto-commit, which a replicating cluster refuses and which cannot be held until every mirror is ready; use \"merged\"",
        );
    }
    let restore = restore_options(
        &file.restore,
        strategy,
        &context.host.restore,
        &mut problems,
    );
    let two_phase = two_phase(&file.two_phase, &mut problems);
    let verify = verify(&file.verify, &mut problems);
    let checks: Option<Vec<Check>> = file
        .check
        .iter()
        .enumerate()
        .map(|(i, check)| self::check(i, check, context, &mut problems))
        .collect();

    // A part can be missing with no problem of its own here: deserialization reported
    // and removed it. The caller holds that problem.
    match (
        name,
        backup,
        target,
        secondaries,
        restore,
        two_phase,
        verify,
        checks,
    ) {
        (
            Some(name),
            Some(backup),
            Some(target),
            Some(secondaries),
            Some(restore),
            Some(two_phase),
            Some(verify),
            Some(checks),
        ) if problems.list.is_empty() => Ok(Job {
            vocabulary: context.vocabulary,
            ..Job::assemble(
                name,
                backup,
                target,
                secondaries,
                discover,
                restore,
                two_phase,
                verify,
                checks,
            )
        }),
        _ => Err(problems.list),
    }
}

fn job_name(file: &JobFile, context: &Context<'_>, problems: &mut Problems<'_>) -> Option<String> {
    let (name, span, field, hint) = match (&file.name, &context.default_name) {
        (Some(name), _) => (
            name.get_ref().clone(),
            Some(name.span()),
            "name",
            String::new(),
        ),
        (None, Some(default)) => (
            default.name.clone(),
            None,
            default.field,
            format!(" ({})", default.hint),
        ),
        (None, None) => return None,
    };
    if host::is_name(&name) && name.len() <= 128 && !name.bytes().all(|b| b == b'.') {
        Some(name)
    } else {
        problems.push(
            field,
            span,
            format!("invalid job name `{name}`{hint}: expected up to 128 letters, digits, `_`, `-` or `.`"),
        );
        None
    }
}

fn backup_source(
    file: &JobFile,
    context: &Context<'_>,
    problems: &mut Problems<'_>,
) -> Option<BackupSource> {
    let Some(backup) = &file.backup else {
        problems.missing_like("backup", "the name of the backup to restore", "my_backup");
        return None;
    };
    let name = backup.get_ref();
    if !crate::backup::is_backup_name(name) {
        problems.push(
            "backup",
            Some(backup.span()),
            format!(
                "invalid backup name `{name}`: expected a directory name of letters, digits, `_`, `-` or `.`"
            ),
        );
        return None;
    }
    let Some(backups) = &context.host.backups else {
        problems.push(
            "backup",
            Some(backup.span()),
            "the host config has no [backups] section saying where backups live",
        );
        return None;
    };
    check_credentials(
        &backups.storage,
        "backup",
        Some(backup.span()),
        "the host's [backups] storage",
        context,
        problems,
    );
    Some(BackupSource {
        name: name.clone(),
        storage: backups.storage.clone(),
        root: backups.root.clone(),
    })
}

/// A cluster reference resolved: the name lockstep reports it by, and its spec.
struct Resolved {
    name: EndName,
    spec: host::ClusterSpec,
}

fn resolve_cluster(
    cluster: &Spanned<ClusterRef>,
    field: &str,
    context: &Context<'_>,
    problems: &mut Problems<'_>,
) -> Option<Resolved> {
    let span = cluster.span();
    let named_only = |what: &str, problems: &mut Problems<'_>| {
        problems.push(
            field,
            Some(span.clone()),
            format!(
                "{what}, and the host config has named_ends_only = true: name one of its clusters ({})",
                host::names(context.host.clusters.keys(), "cluster")
            ),
        );
    };
    let resolved = match cluster.get_ref() {
        ClusterRef::NameOrUri(text) if text.contains("://") => {
            let uri = host::cluster_uri(text, field, Some(span.clone()), &mut problems.list)?;
            match context.host.cluster_at(&uri) {
                // The URI of a cluster of the host config is that cluster, its storage and
                // credentials included: the host config says they belong to that address.
                Ok(Some((name, spec))) => Resolved {
                    name: EndName(name.to_owned()),
                    spec: spec.clone(),
                },
                Ok(None) if context.host.named_ends_only => {
                    named_only(&format!("`{text}` is the URI of no cluster"), problems);
                    return None;
                }
                Ok(None) => Resolved {
                    name: EndName(text.clone()),
                    spec: host::ClusterSpec {
                        uri,
                        token: None,
                        storage: None,
                        max_import_jobs: host::DEFAULT_MAX_IMPORT_JOBS,
                        paths: host::PathForm::Minio,
                        require_staging: false,
                        l0_import: None,
                        tls: host::TlsSpec::default(),
                        management: None,
                        discover_secondaries: false,
                    },
                },
                Err(names) => {
                    problems.push(
                        field,
                        Some(span),
                        format!(
                            "`{text}` is the URI of more than one cluster of the host config ({}): name the one meant",
                            names.join(", ")
                        ),
                    );
                    return None;
                }
            }
        }
        ClusterRef::NameOrUri(name) => match context.host.clusters.get(name) {
            Some(spec) => Resolved {
                name: EndName(name.clone()),
                spec: spec.clone(),
            },
            None => {
                problems.push(
                    field,
                    Some(span),
                    format!(
                        "unknown cluster `{name}`; expected a cluster of the host config ({}) or an http(s):// URI",
                        host::names(context.host.clusters.keys(), "cluster")
                    ),
                );
                return None;
            }
        },
        ClusterRef::Inline(_) if context.host.named_ends_only => {
            named_only("a job may not describe a cluster", problems);
            return None;
        }
        ClusterRef::Inline(file) => {
            let spec = host::cluster_spec(
                file,
                field,
                span.clone(),
                &context.host.storages,
                host::Author::Job,
                &mut problems.list,
            )?;
            Resolved {
                name: EndName(spec.uri.as_str().trim_end_matches('/').to_owned()),
                spec,
            }
        }
    };
    Some(resolved)
}

/// Reads the cluster's token from its environment variable.
fn end(
    resolved: &Resolved,
    field: &str,
    span: Range<usize>,
    context: &Context<'_>,
    problems: &mut Problems<'_>,
) -> Option<End> {
    let token = match resolved.spec.token.as_ref().map(|t| t.read(context.env)) {
        None => None,
        Some(Ok(token)) => Some(token),
        Some(Err(missing)) => {
            problems.push(
                field,
                Some(span),
                format!(
                    "environment variable {} (token_env of cluster {}) is not set",
                    missing.0, resolved.name
                ),
            );
            return None;
        }
    };
    Some(End {
        name: resolved.name.clone(),
        uri: resolved.spec.uri.clone(),
        token,
        paths: resolved.spec.paths.clone(),
        l0_import: resolved.spec.l0_import,
        tls: resolved.spec.tls.clone(),
        management: resolved.spec.management.clone(),
    })
}

fn check_credentials(
    storage: &StorageSpec,
    field: &str,
    span: Option<Range<usize>>,
    owner: &str,
    context: &Context<'_>,
    problems: &mut Problems<'_>,
) {
    for var in storage.credential_envs() {
        if (context.env)(var).is_none() {
            problems.push(
                field,
                span.clone(),
                format!("environment variable {var} (credentials of {owner}) is not set"),
            );
        }
    }
}

fn target(file: &JobFile, context: &Context<'_>, problems: &mut Problems<'_>) -> Option<Target> {
    let default;
    let cluster = match (&file.target, &context.host.default_target) {
        (Some(cluster), _) => cluster,
        (None, Some(name)) => {
            default = Spanned::new(0..0, ClusterRef::NameOrUri(name.clone()));
            &default
        }
        (None, None) => {
            problems.missing_like(
                "target",
                "the cluster to restore into, a name of the host config or a URI (the host config has no default_target)",
                "prod-a",
            );
            return None;
        }
    };
    let span = file.target.as_ref().map(Spanned::span);
    let resolved = resolve_cluster(cluster, "target", context, problems)?;
    let Some(storage) = resolved.spec.storage.clone() else {
        // Only a job file can describe a target inline.
        let inline = match context.vocabulary {
            Vocabulary::File => ", or write target as a table with `uri` and `storage`",
            Vocabulary::Flags | Vocabulary::Request => "",
        };
        problems.push(
            "target",
            span,
            format!(
                "target {} has no storage: lockstep stages the backup's binlogs into the target's object storage, so name a cluster of the host config that has `storage`{inline}",
                resolved.name
            ),
        );
        return None;
    };
    let owner = format!("cluster {}'s storage", resolved.name);
    check_credentials(&storage, "target", span.clone(), &owner, context, problems);
    let end = end(&resolved, "target", span.unwrap_or(0..0), context, problems)?;
    Some(Target {
        end,
        storage,
        max_import_jobs: resolved.spec.max_import_jobs,
    })
}

fn secondaries(
    file: &JobFile,
    context: &Context<'_>,
    target: Option<&End>,
    problems: &mut Problems<'_>,
) -> Option<Vec<Secondary>> {
    let mut secondaries = Vec::new();
    let mut ok = true;
    let mut seen = BTreeSet::new();
    for (i, cluster) in file.secondaries.iter().enumerate() {
        let field = format!("secondaries[{i}]");
        match secondary(cluster, &field, context, target, &mut seen, problems) {
            Some(secondary) => secondaries.push(secondary),
            None => ok = false,
        }
    }
    ok.then_some(secondaries)
}

/// One cluster as a secondary of `target`, or `None` with its problems.
fn secondary(
    cluster: &Spanned<ClusterRef>,
    field: &str,
    context: &Context<'_>,
    target: Option<&End>,
    seen: &mut BTreeSet<url::Url>,
    problems: &mut Problems<'_>,
) -> Option<Secondary> {
    let resolved = resolve_cluster(cluster, field, context, problems)?;
    if target.is_some_and(|t| t.uri == resolved.spec.uri || t.name == resolved.name) {
        problems.push(
            field,
            Some(cluster.span()),
            format!(
                "{} is the target; a secondary must be another cluster",
                resolved.name
            ),
        );
        return None;
    }
    if !seen.insert(resolved.spec.uri.clone()) {
        problems.push(
            field,
            Some(cluster.span()),
            format!("{} is listed twice", resolved.name),
        );
        return None;
    }
    if resolved.spec.require_staging && resolved.spec.storage.is_none() {
        problems.push(
            field,
            Some(cluster.span()),
            format!(
                "cluster {} has require_staging = true but no storage: lockstep cannot stage the backup into it; add `storage` to [clusters.{}]",
                resolved.name, resolved.name
            ),
        );
        return None;
    }
    if let Some(storage) = &resolved.spec.storage {
        let owner = format!("cluster {}'s storage", resolved.name);
        check_credentials(
            storage,
            field,
            Some(cluster.span()),
            &owner,
            context,
            problems,
        );
    }
    let end = end(&resolved, field, cluster.span(), context, problems)?;
    Some(Secondary {
        end,
        storage: resolved.spec.storage,
        max_import_jobs: resolved.spec.max_import_jobs,
    })
}

/// With no secondaries named, and a target whose host config says `secondaries =
/// "discover"`: every other cluster of the host config, each validated as a secondary on its
/// own. One that is unfit (a token not set, say) refuses the restore only if the target
/// turns out to replicate to it.
fn discover(file: &JobFile, context: &Context<'_>, target: Option<&End>) -> Option<Discover> {
    let target = target?;
    let discovers =
        (context.host.clusters.get(target.name.as_str())).is_some_and(|c| c.discover_secondaries);
    if !file.secondaries.is_empty() || !discovers {
        return None;
    }
    let clusters = (context.host.clusters.iter())
        .filter(|(name, _)| *name != target.name.as_str())
        .map(|(name, spec)| {
            let mut found = Problems {
                list: Vec::new(),
                removed: &[],
                vocabulary: context.vocabulary,
            };
            let cluster = Spanned::new(0..0, ClusterRef::NameOrUri(name.clone()));
            let field = format!("clusters.{name}");
            match secondary(
                &cluster,
                &field,
                context,
                Some(target),
                &mut BTreeSet::new(),
                &mut found,
            ) {
                Some(secondary) if found.list.is_empty() => Ok(secondary),
                _ => Err(Box::new(Unfit {
                    name: name.clone(),
                    uri: spec.uri.clone(),
                    why: (found.list.iter().map(|p| p.message.as_str()))
                        .collect::<Vec<_>>()
                        .join("; "),
                })),
            }
        })
        .collect();
    Some(Discover { clusters })
}

fn restore_options(
    section: &RestoreSection,
    strategy: Option<Strategy>,
    defaults: &host::RestoreDefaults,
    problems: &mut Problems<'_>,
) -> Option<RestoreOptions> {
    let before = problems.list.len();
    let filter = parse_filter(section.filter.as_ref(), "restore.filter", problems);
    let backup_filter = parse_filter(
        section.backup_filter.as_ref(),
        "restore.backup_filter",
        problems,
    );
    let renaming = match (&section.suffix, &section.rename) {
        (Some(suffix), Some(_)) => {
            problems.push(
                "restore.suffix",
                Some(suffix.span()),
                "suffix and rename cannot be set at the same time (as in milvus-backup): rename collections one way",
            );
            None
        }
        (Some(suffix), None) => match Renaming::suffix(suffix.get_ref()) {
            Ok(renaming) => Some(renaming),
            Err(e) => {
                problems.push("restore.suffix", Some(suffix.span()), e.to_string());
                None
            }
        },
        (None, Some(rules)) => rename_rules(rules.get_ref(), problems),
        (None, None) => Some(Renaming::Identity),
    };
    let drop = section
        .drop_exist_collection
        .as_ref()
        .filter(|d| *d.get_ref());
    let skip = section
        .skip_create_collection
        .as_ref()
        .filter(|s| *s.get_ref());
    let collection_creation = match (drop, skip) {
        (Some(drop), Some(_)) => {
            problems.push(
                "restore.drop_exist_collection",
                Some(drop.span()),
                "drop_exist_collection and skip_create_collection cannot both be true: choose dropping the existing collection or importing into it",
            );
            CollectionCreation::Create
        }
        (Some(_), None) => CollectionCreation::DropAndCreate,
        (None, Some(_)) => CollectionCreation::UseExisting,
        (None, None) => CollectionCreation::Create,
    };
    let max_segments_per_job = match &section.max_segments_per_job {
        None => defaults.max_segments_per_job,
        Some(n) => match usize::try_from(*n.get_ref()) {
            Ok(n) if (1..=DEFAULT_MAX_SEGMENTS_PER_JOB).contains(&n) => n,
            _ => {
                problems.push(
                    "restore.max_segments_per_job",
                    Some(n.span()),
                    format!("invalid value {}: expected 1 to {DEFAULT_MAX_SEGMENTS_PER_JOB} segments per job", n.get_ref()),
                );
                DEFAULT_MAX_SEGMENTS_PER_JOB
            }
        },
    };
    let max_shard_num =
        section
            .max_shard_num
            .as_ref()
            .and_then(|n| match i32::try_from(*n.get_ref()) {
                Ok(n) if n > 0 => Some(n),
                _ => {
                    problems.push(
                        "restore.max_shard_num",
                        Some(n.span()),
                        format!(
                            "invalid value {}: expected a positive shard count",
                            n.get_ref()
                        ),
                    );
                    None
                }
            });
    let options = RestoreOptions {
        strategy,
        backup_filter: backup_filter?,
        renaming: renaming?,
        filter: filter?,
        collection_creation,
        meta_only: section.meta_only.unwrap_or(false),
        rebuild_index: section.rebuild_index.unwrap_or(false),
        use_auto_index: section.use_auto_index.unwrap_or(false),
        drop_exist_index: section.drop_exist_index.unwrap_or(false),
        rbac: section.rbac.unwrap_or(false),
        keep_temp_files: section.keep_temp_files.unwrap_or(defaults.keep_temp_files),
        max_segments_per_job,
        max_shard_num,
        truncate_binlog_by_ts: section.truncate_binlog_by_ts.unwrap_or(false),
        ezk_mapping: section.ezk_mapping.clone().unwrap_or_default(),
        verify_backup: section.verify_backup.unwrap_or_default(),
        l0_batching: Default::default(),
    };
    (problems.list.len() == before).then_some(options)
}

fn parse_filter(
    filter: Option<&Spanned<String>>,
    field: &str,
    problems: &mut Problems<'_>,
) -> Option<Filter> {
    let Some(filter) = filter else {
        return Some(Filter::default());
    };
    match Filter::parse(filter.get_ref()) {
        Ok(parsed) => Some(parsed),
        Err(e) => {
            problems.push(field, Some(filter.span()), e.to_string());
            None
        }
    }
}

fn rename_rules(rules: &[Spanned<String>], problems: &mut Problems<'_>) -> Option<Renaming> {
    let mut indexed = RenameRules::default();
    let mut ok = true;
    for (i, rule) in rules.iter().enumerate() {
        if let Err(e) = RenameRule::parse(rule.get_ref()).and_then(|parsed| indexed.add(parsed)) {
            problems.push(
                format!("restore.rename[{i}]"),
                Some(rule.span()),
                e.to_string(),
            );
            ok = false;
        }
    }
    ok.then_some(Renaming::Rules(indexed))
}

fn two_phase(section: &TwoPhaseSection, problems: &mut Problems<'_>) -> Option<TwoPhase> {
    let mirror_grace = duration(
        section.mirror_grace.as_ref(),
        "two_phase.mirror_grace",
        problems,
    );
    let commit_timeout = duration(
        section.commit_timeout.as_ref(),
        "two_phase.commit_timeout",
        problems,
    );
    let completion_timeout = duration(
        section.completion_timeout.as_ref(),
        "two_phase.completion_timeout",
        problems,
    );
    Some(TwoPhase {
        mirror_grace: mirror_grace?.unwrap_or(DEFAULT_MIRROR_GRACE),
        commit_timeout: commit_timeout?,
        completion_timeout: completion_timeout?,
        atomicity: section
            .atomicity
            .as_ref()
            .map(|a| *a.get_ref())
            .unwrap_or_default(),
        allow_mixed_builds: section.allow_mixed_builds.unwrap_or(false),
    })
}

fn verify(section: &VerifySection, problems: &mut Problems<'_>) -> Option<Verify> {
    let timeout = duration(section.timeout.as_ref(), "verify.timeout", problems)?;
    let rows = (section.rows.as_ref())
        .map(|r| *r.get_ref())
        .unwrap_or_default();
    let sample = match (rows, &section.sample) {
        (VerifyRows::Sample, n) => Some(n.as_ref().map_or(DEFAULT_VERIFY_SAMPLE, |n| {
            usize::try_from(n.get_ref().get()).unwrap_or(usize::MAX)
        })),
        (_, Some(n)) => {
            problems.push(
                "verify.sample",
                Some(n.span()),
                "takes keys only with rows = \"sample\"",
            );
            return None;
        }
        (_, None) => None,
    };
    let required = section.required.as_ref().is_some_and(|r| *r.get_ref());
    if let Some(r) = section.required.as_ref().filter(|_| required)
        && rows == VerifyRows::Off
    {
        problems.push(
            "verify.required",
            Some(r.span()),
            "requires a verification that rows = \"off\" turns off",
        );
        return None;
    }
    Some(Verify {
        rows,
        sample,
        timeout: timeout.unwrap_or(DEFAULT_VERIFY_TIMEOUT),
        required,
    })
}

/// Parses an optional duration: `None` if it is malformed (reported), `Some(None)` if absent.
fn duration(
    value: Option<&Spanned<String>>,
    field: &str,
    problems: &mut Problems<'_>,
) -> Option<Option<Duration>> {
    let Some(value) = value else {
        return Some(None);
    };
    match parse_duration(value.get_ref()) {
        Ok(parsed) => Some(Some(parsed)),
        Err(message) => {
            problems.push(field, Some(value.span()), message);
            None
        }
    }
}

/// jiff's friendly format: "30s", "5m", "1h30m", "2 hours".
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    jiff::fmt::friendly::SpanParser::new()
        .parse_unsigned_duration(text)
        .map_err(|_| format!("invalid duration `{text}`: expected a duration such as \"30s\", \"5m\" or \"1h30m\""))
}

fn check(
    index: usize,
    check: &Spanned<CheckSection>,
    context: &Context<'_>,
    problems: &mut Problems<'_>,
) -> Option<Check> {
    let field = |name: &str| format!("check[{index}].{name}");
    let section = check.get_ref();
    let before = problems.list.len();
    let plugin = match &section.plugin {
        Some(plugin) if !plugin.get_ref().is_empty() => {
            Some(context.base_dir.join(plugin.get_ref()))
        }
        Some(plugin) => {
            problems.push(
                field("plugin"),
                Some(plugin.span()),
                "empty plugin path: expected the path of a .wasm component",
            );
            None
        }
        None => {
            problems.missing(
                &field("plugin"),
                Some(check.span()),
                "the path of the plugin's .wasm component",
            );
            None
        }
    };
    let name = match &section.name {
        Some(name) if name.get_ref().trim().is_empty() => {
            problems.push(
                field("name"),
                Some(name.span()),
                "empty check name: expected a name for logs and the report, or no `name` for the plugin's file stem",
            );
            None
        }
        Some(name) => Some(name.get_ref().clone()),
        None => plugin
            .as_ref()
            .and_then(|p| p.file_stem())
            .map(|stem| stem.to_string_lossy().into_owned()),
    };
    let phase = section.phase.as_ref().map(|p| *p.get_ref());
    if phase.is_none() {
        problems.missing(
            &field("phase"),
            Some(check.span()),
            "\"before-import\" or \"before-commit\"",
        );
    }
    let mut origins = Vec::new();
    for (i, entry) in section.allow_hosts.iter().flatten().enumerate() {
        match Origin::parse(entry.get_ref()) {
            Ok(origin) => origins.push(origin),
            Err(reason) => problems.push(
                format!("check[{index}].allow_hosts[{i}]"),
                Some(entry.span()),
                format!(
                    "invalid origin `{}`: {reason}; expected http://host or http://host:port",
                    entry.get_ref()
                ),
            ),
        }
    }
    if problems.list.len() > before {
        return None;
    }
    Some(Check {
        plugin: plugin?,
        name: name?,
        phase: phase?,
        config: section.config.clone().unwrap_or_default(),
        on_error: section.on_error.unwrap_or_default(),
        allow_hosts: AllowedHosts::new(origins),
        max_wait: Duration::from_millis(section.max_wait_ms.map_or(0, InRange::get)),
        limits: CheckLimits::from_section(&section.limits.unwrap_or_default()),
    })
}

/// A job from a job file: read, parsed and validated.
impl Job {
    /// Reads, parses and validates the job file at `path` against `host`.
    pub fn from_file(path: &Path, host: &HostConfig) -> Result<Self, Error> {
        Self::from_file_with_env(path, host, &process_env)
    }

    pub(crate) fn from_file_with_env(
        path: &Path,
        host: &HostConfig,
        env: Env<'_>,
    ) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            input: Input::JobFile(path.to_owned()),
            source,
        })?;
        Self::from_str_with_env(&text, path, host, env)
    }

    /// Validates job file text; `path` names it in messages, gives the default name (its
    /// stem) and the directory plugin paths are relative to.
    pub fn from_str_with_env(
        text: &str,
        path: &Path,
        host: &HostConfig,
        env: Env<'_>,
    ) -> Result<Self, Error> {
        let (file, mut problems, removed) = JobFile::read(text);
        let context = Context {
            host,
            env,
            default_name: path.file_stem().map(|s| DefaultName {
                name: s.to_string_lossy().into_owned(),
                field: "name",
                hint: "taken from the file name; set `name` to choose another",
            }),
            base_dir: path.parent().map(Path::to_owned).unwrap_or_default(),
            removed: &removed,
            vocabulary: Vocabulary::File,
        };
        let job = file.and_then(|file| match validate(file, &context) {
            Ok(job) => Some(job),
            Err(more) => {
                problems.extend(more);
                None
            }
        });
        // In the order they appear in the file.
        problems.sort_by_key(|p| p.span.as_ref().map_or(0, |s| s.start));
        match job {
            Some(job) if problems.is_empty() => Ok(job),
            _ => Err(Error::Invalid {
                input: Input::JobFile(path.to_owned()),
                problems: diagnostic::locate_in_file(path, text, problems),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_use_jiff_friendly_format() {
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("2 hours"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        for bad in ["", "5", "soon", "-5m", "PT5M"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }
}
