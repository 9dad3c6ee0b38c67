//! `lockstep restore` flags: milvus-backup's `restore` flags (same names, same
//! meanings) plus `--target`, `--secondaries` and `--strategy`, mapped into a
//! [`JobFile`] and validated like a job file. A problem is located at the flag that
//! gave the value.

use serde::Deserialize as _;
use toml::Spanned;

use crate::backup::Strategy;

use super::file::{ClusterRef, JobFile};
use super::vocabulary::{Vocabulary, flag_for};
use super::{Job, validate};
use crate::config::HostConfig;
use crate::config::{Env, process_env};
use crate::diagnostic::{Error, Input, Kind, Location, Problem, RawProblem};

/// The flags of `lockstep restore`, for the CLI to flatten into its subcommand.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct RestoreArgs {
    /// The backup to restore.
    #[arg(short = 'n', long = "name")]
    pub name: Option<String>,
    /// The cluster to restore into (a host config name or http(s) URI); default: the
    /// host config's default_target.
    #[arg(long)]
    pub target: Option<String>,
    /// Clusters replicating the target, comma-separated or repeated.
    #[arg(long, value_delimiter = ',')]
    pub secondaries: Vec<String>,
    /// `merged` or `per_seg`; unset, the route follows the target's Milvus version
    /// (merged from 2.5, where Milvus imports several segments in one job).
    #[arg(long)]
    pub strategy: Option<String>,
    /// Collections to restore, by their names after --suffix or --rename:
    /// db1.coll1,db2.*,coll3.
    #[arg(long)]
    pub filter: Option<String>,
    /// Add a suffix to every restored collection's name.
    #[arg(short = 's', long)]
    pub suffix: Option<String>,
    /// Rename collections: db1.c1:db2.c1_new,db1.*:db3.*,c1:c2.
    #[arg(short = 'r', long)]
    pub rename: Option<String>,
    /// Create the backup's indexes.
    #[arg(long = "rebuild_index")]
    pub rebuild_index: bool,
    /// Restore meta only, no data.
    #[arg(long = "meta_only")]
    pub meta_only: bool,
    /// Replace vector indexes with AUTOINDEX.
    #[arg(long = "use_auto_index")]
    pub use_auto_index: bool,
    /// Drop an existing target collection before creating it.
    #[arg(long = "drop_exist_collection")]
    pub drop_exist_collection: bool,
    /// Drop the target collection's existing indexes first.
    #[arg(long = "drop_exist_index")]
    pub drop_exist_index: bool,
    /// Import into existing target collections instead of creating them.
    #[arg(long = "skip_create_collection")]
    pub skip_create_collection: bool,
    /// Restore RBAC meta.
    #[arg(long)]
    pub rbac: bool,
    /// milvus-backup's merged restore (the same as --strategy merged).
    #[arg(long = "use_v2_restore")]
    pub use_v2_restore: bool,
    /// Removed from milvus-backup's restore; refused with its advice.
    #[arg(short = 'c', long = "collections", hide = true)]
    pub removed_collections: Option<String>,
    /// Removed from milvus-backup's restore; refused with its advice.
    #[arg(short = 'd', long = "databases", hide = true)]
    pub removed_databases: Option<String>,
    /// Removed from milvus-backup's restore; refused with its advice.
    #[arg(short = 'a', long = "database_collections", hide = true)]
    pub removed_database_collections: Option<String>,
    /// Removed from milvus-backup's restore; refused with its advice.
    #[arg(long = "restore_index", hide = true)]
    pub removed_restore_index: bool,
}

/// Flag values carry no position: the flag name is their location.
fn unspanned<T>(value: T) -> Spanned<T> {
    Spanned::new(0..0, value)
}

fn flag_set(set: bool) -> Option<Spanned<bool>> {
    set.then(|| unspanned(true))
}

/// Maps the flags into a `JobFile`, with the problems only flags can have.
fn job_file(args: &RestoreArgs) -> (JobFile, Vec<Problem>) {
    let mut problems = Vec::new();
    for (set, flag, advice) in [
        (
            args.removed_collections.is_some(),
            "-c/--collections",
            "use --filter instead",
        ),
        (
            args.removed_databases.is_some(),
            "-d/--databases",
            "use --filter instead",
        ),
        (
            args.removed_database_collections.is_some(),
            "-a/--database_collections",
            "use --filter instead",
        ),
        (
            args.removed_restore_index,
            "--restore_index",
            "use --rebuild_index instead",
        ),
    ] {
        if set {
            problems.push(Problem {
                location: Location::Flag(flag.to_owned()),
                field: String::new(),
                kind: Kind::UnknownField,
                message: format!("{flag} was removed from milvus-backup's restore: {advice}"),
            });
        }
    }

    let mut strategy = args.strategy.as_deref().and_then(|s| {
        match Strategy::deserialize(
            serde::de::value::StrDeserializer::<serde::de::value::Error>::new(s),
        ) {
            Ok(strategy) => Some(unspanned(strategy)),
            Err(e) => {
                problems.push(Problem {
                    location: Location::Flag("--strategy".to_owned()),
                    field: "strategy".to_owned(),
                    kind: Kind::Invalid,
                    message: e.to_string(),
                });
                None
            }
        }
    });
    if args.use_v2_restore {
        match strategy.as_ref().map(|s| *s.get_ref()) {
            Some(Strategy::PerSeg) => problems.push(Problem {
                location: Location::Flag("--use_v2_restore".to_owned()),
                field: "strategy".to_owned(),
                kind: Kind::Invalid,
                message: "--use_v2_restore asks for the merged strategy and --strategy asks for per_seg: give one"
                    .to_owned(),
            }),
            Some(Strategy::Merged) => {}
            None => strategy = Some(unspanned(Strategy::Merged)),
        }
    }

    let mut file = JobFile {
        backup: args.name.clone().map(unspanned),
        target: args
            .target
            .clone()
            .map(|t| unspanned(ClusterRef::NameOrUri(t))),
        secondaries: args
            .secondaries
            .iter()
            .map(|s| unspanned(ClusterRef::NameOrUri(s.trim().to_owned())))
            .collect(),
        strategy,
        ..JobFile::default()
    };
    let restore = &mut file.restore;
    restore.filter = args.filter.clone().map(unspanned);
    restore.suffix = args.suffix.clone().map(unspanned);
    restore.rename = args.rename.as_ref().map(|rules| {
        unspanned(
            rules
                .split(',')
                .map(|r| unspanned(r.trim().to_owned()))
                .collect(),
        )
    });
    restore.drop_exist_collection = flag_set(args.drop_exist_collection);
    restore.skip_create_collection = flag_set(args.skip_create_collection);
    restore.meta_only = args.meta_only.then_some(true);
    restore.rebuild_index = args.rebuild_index.then_some(true);
    restore.use_auto_index = args.use_auto_index.then_some(true);
    restore.drop_exist_index = args.drop_exist_index.then_some(true);
    restore.rbac = args.rbac.then_some(true);
    (file, problems)
}

pub(super) fn job_from_args(
    args: &RestoreArgs,
    host: &HostConfig,
    env: Env<'_>,
) -> Result<Job, Error> {
    let (file, mut problems) = job_file(args);
    let context = validate::Context {
        host,
        env,
        default_name: args.name.clone().map(|name| validate::DefaultName {
            name,
            field: "backup",
            hint: "the job is named after the backup it restores",
        }),
        base_dir: std::path::PathBuf::new(),
        removed: &[],
        vocabulary: Vocabulary::Flags,
    };
    let located = |raw: Vec<RawProblem>| {
        raw.into_iter().map(|p| Problem {
            location: Location::Flag(flag_for(&p.field)),
            field: p.field,
            kind: p.kind,
            message: p.message,
        })
    };
    match validate::validate(file, &context) {
        Ok(job) if problems.is_empty() => Ok(job),
        Ok(_) => Err(Error::Invalid {
            input: Input::Flags,
            problems,
        }),
        Err(raw) => {
            problems.extend(located(raw));
            Err(Error::Invalid {
                input: Input::Flags,
                problems,
            })
        }
    }
}

impl Job {
    /// Validates `lockstep restore` flags against `host`.
    pub fn from_cli(args: &RestoreArgs, host: &HostConfig) -> Result<Self, Error> {
        job_from_args(args, host, &process_env)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use clap::Parser as _;

    use super::*;
    use crate::config::testing::{env, host};

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        restore: RestoreArgs,
    }

    fn args(argv: &[&str]) -> RestoreArgs {
        Cli::try_parse_from(std::iter::once("restore").chain(argv.iter().copied()))
            .unwrap()
            .restore
    }

    fn from_flags(argv: &[&str]) -> Result<Job, Error> {
        job_from_args(&args(argv), &host(), &env)
    }

    const TOML: &str = r#"
        name = "orders_bak"
        backup = "orders_bak"
        target = "prod-a"
        secondaries = ["prod-b", "http://10.0.0.9:19530"]
        strategy = "merged"
        [restore]
        filter = "default.orders_r"
        suffix = "_r"
        rebuild_index = true
        use_auto_index = true
        drop_exist_collection = true
        drop_exist_index = true
        rbac = true
        meta_only = true
    "#;

    #[test]
    fn flags_make_the_same_job_as_the_toml() {
        let toml = Job::from_str_with_env(TOML, Path::new("orders.toml"), &host(), &env).unwrap();
        let flags = from_flags(&[
            "-n",
            "orders_bak",
            "--target",
            "prod-a",
            "--secondaries",
            "prod-b,http://10.0.0.9:19530",
            "--filter",
            "default.orders_r",
            "-s",
            "_r",
            "--rebuild_index",
            "--use_auto_index",
            "--drop_exist_collection",
            "--drop_exist_index",
            "--rbac",
            "--meta_only",
            "--use_v2_restore",
        ])
        .unwrap();
        // The same job, spoken of in flags rather than keys.
        assert_eq!(flags.vocabulary, Vocabulary::Flags);
        assert_eq!(
            Job {
                vocabulary: Vocabulary::File,
                ..flags.clone()
            },
            toml
        );
        assert_eq!(flags.id(), toml.id());
        // Repeated --secondaries is the same as a comma-separated list.
        let repeated = from_flags(&[
            "-n",
            "orders_bak",
            "--target=prod-a",
            "--secondaries",
            "prod-b",
            "--secondaries",
            "http://10.0.0.9:19530",
            "--filter=default.orders_r",
            "--suffix=_r",
            "--rebuild_index",
            "--use_auto_index",
            "--drop_exist_collection",
            "--drop_exist_index",
            "--rbac",
            "--meta_only",
            "--strategy=merged",
        ])
        .unwrap();
        assert_eq!(repeated, flags);
    }

    #[test]
    fn rename_flag_splits_rules_on_commas() {
        let job = from_flags(&[
            "-n",
            "b",
            "--target",
            "prod-a",
            "-r",
            "db1.c1:db2.c1_new,db1.*:db3.*",
        ])
        .unwrap();
        let toml = Job::from_str_with_env(
            "backup = \"b\"\ntarget = \"prod-a\"\n[restore]\nrename = [\"db1.c1:db2.c1_new\", \"db1.*:db3.*\"]\n",
            Path::new("b.toml"),
            &host(),
            &env,
        )
        .unwrap();
        assert_eq!(job.restore, toml.restore);
    }

    #[test]
    fn problems_are_located_at_their_flags() {
        let err = from_flags(&[
            "--target",
            "prod-x",
            "--strategy",
            "v1",
            "-s",
            "_r",
            "-r",
            "a:b",
            "--drop_exist_collection",
            "--skip_create_collection",
            "--filter",
            "a-b",
        ])
        .unwrap_err();
        let shown: Vec<String> = err.problems().iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            vec![
                "--strategy: unknown variant `v1`, expected `merged` or `per_seg`",
                "-n/--name: missing: expected the name of the backup to restore, e.g. `--name my_backup`",
                "--target: unknown cluster `prod-x`; expected a cluster of the host config (`prod-a`, `prod-b`, `prod-c`) or an http(s):// URI",
                "--filter: invalid filter rule `a-b`: expected `db.*`, `db.collection`, `collection` or `db.`",
                "-s/--suffix: suffix and rename cannot be set at the same time (as in milvus-backup): rename collections one way",
                "--drop_exist_collection: drop_exist_collection and skip_create_collection cannot both be true: choose dropping the existing collection or importing into it",
            ]
        );
        assert!(
            err.to_string()
                .starts_with("restore flags refused (6 problems):\n")
        );
    }

    #[test]
    fn removed_milvus_backup_flags_are_refused_with_advice() {
        let err = from_flags(&[
            "-n",
            "b",
            "--target",
            "prod-a",
            "-c",
            "c1",
            "--restore_index",
        ])
        .unwrap_err();
        let shown: Vec<String> = err.problems().iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            vec![
                "-c/--collections: -c/--collections was removed from milvus-backup's restore: use --filter instead",
                "--restore_index: --restore_index was removed from milvus-backup's restore: use --rebuild_index instead",
            ]
        );
    }

    /// A CLI user cannot describe a target inline: the refusal does not tell them to.
    #[test]
    fn a_target_uri_without_storage_is_refused_in_flag_words() {
        let err = from_flags(&["-n", "b", "--target", "http://10.9.9.9:19530"]).unwrap_err();
        let shown: Vec<String> = err.problems().iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            vec![
                "--target: target http://10.9.9.9:19530 has no storage: lockstep stages the backup's binlogs into the target's object storage, so name a cluster of the host config that has `storage`",
            ]
        );
    }

    #[test]
    fn v2_restore_and_per_seg_conflict() {
        let err = from_flags(&[
            "-n",
            "b",
            "--target",
            "prod-a",
            "--use_v2_restore",
            "--strategy",
            "per_seg",
        ])
        .unwrap_err();
        assert_eq!(err.problems().len(), 1);
        assert_eq!(
            err.problems()[0].location,
            Location::Flag("--use_v2_restore".into())
        );
        let per_seg =
            from_flags(&["-n", "b", "--target", "prod-a", "--strategy", "per_seg"]).unwrap();
        assert_eq!(per_seg.strategy(), Some(Strategy::PerSeg));
    }
}
