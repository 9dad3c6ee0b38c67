//! How a restore names what it creates, as milvus-backup's `CollMapper`s do
//! (`core/restore/task.go`): unchanged, with a suffix, or by rename rules.
//!
//! Rename rules (`--rename`, `collection_renames`) are `from:to` pairs of one of four
//! kinds, both sides of the same kind:
//!
//! - `db1.*:db2.*`: every collection of `db1` goes to `db2` under its own name;
//! - `db1.c1:db2.c2`: one collection, renamed and possibly moved;
//! - `c1:c2`: the same within the default database;
//! - `db1.:db2.`: the database `db1` itself is created as `db2`.
//!
//! A collection rule wins over a database wildcard, and one collection may be renamed to
//! several targets (it is then restored once per target), as `TableMapper` allows.
//!
//! milvus-backup parses the `db1.:db2.` kind but then drops it ("handle in db mapping",
//! which only its restore plan fills). Here it maps the database the restore creates for
//! the backup's `db1`, which is what the rule says; collections are moved only by the
//! other kinds.

use std::collections::BTreeMap;

use serde::Serialize;

use super::namespace::{Namespace, is_word};

/// One parsed `from:to` rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenameRule {
    /// `db1.*:db2.*`
    DatabaseWildcard { from: String, to: String },
    /// `db1.c1:db2.c2` or `c1:c2`
    Collection { from: Namespace, to: Namespace },
    /// `db1.:db2.`
    Database { from: String, to: String },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenameError {
    #[error(
        "invalid rename rule `{0}`: expected `db1.*:db2.*`, `db1.c1:db2.c2`, `c1:c2` or `db1.:db2.` (both sides of the same kind)"
    )]
    Malformed(String),
    #[error("database `{db}` is renamed twice: to `{first}` and to `{second}`")]
    DatabaseRenamedTwice {
        db: String,
        first: String,
        second: String,
    },
    #[error("invalid suffix `{0}`: only ASCII letters, digits and underscores are allowed")]
    BadSuffix(String),
}

impl RenameRule {
    /// Parses `from:to`; exactly one colon.
    pub fn parse(rule: &str) -> Result<Self, RenameError> {
        let malformed = || RenameError::Malformed(rule.to_owned());
        let (from, to) = rule.split_once(':').ok_or_else(malformed)?;
        if to.contains(':') {
            return Err(malformed());
        }
        match (RuleSide::parse(from), RuleSide::parse(to)) {
            (Some(RuleSide::AllOf(from)), Some(RuleSide::AllOf(to))) => {
                Ok(Self::DatabaseWildcard { from, to })
            }
            (Some(RuleSide::Qualified(from)), Some(RuleSide::Qualified(to)))
            | (Some(RuleSide::Bare(from)), Some(RuleSide::Bare(to))) => {
                Ok(Self::Collection { from, to })
            }
            (Some(RuleSide::Database(from)), Some(RuleSide::Database(to))) => {
                Ok(Self::Database { from, to })
            }
            _ => Err(malformed()),
        }
    }
}

/// One side of a rule; the kinds must match on both sides.
enum RuleSide {
    AllOf(String),
    Qualified(Namespace),
    Bare(Namespace),
    Database(String),
}

impl RuleSide {
    fn parse(s: &str) -> Option<Self> {
        if let Some(db) = s.strip_suffix(".*") {
            return is_word(db).then(|| Self::AllOf(db.to_owned()));
        }
        if let Some(db) = s.strip_suffix('.') {
            return is_word(db).then(|| Self::Database(db.to_owned()));
        }
        match s.split_once('.') {
            Some((db, c)) => {
                (is_word(db) && is_word(c)).then(|| Self::Qualified(Namespace::new(db, c)))
            }
            None => is_word(s).then(|| Self::Bare(Namespace::new("", s))),
        }
    }
}

/// How source names become target names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub enum Renaming {
    /// Every collection keeps its name.
    #[default]
    Identity,
    /// `--suffix`: the suffix is appended to every collection name; databases keep theirs.
    Suffix(String),
    /// `--rename` rules.
    Rules(RenameRules),
}

/// Rename rules, indexed for lookup.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RenameRules {
    /// `db1.*:db2.*`
    database_wildcards: BTreeMap<String, String>,
    /// `db1.c1:db2.c2` and `c1:c2`; one source may have several targets.
    #[serde(serialize_with = "serialize_by_name")]
    collections: BTreeMap<Namespace, Vec<Namespace>>,
    /// `db1.:db2.`
    databases: BTreeMap<String, String>,
}

impl RenameRules {
    /// Indexes parsed rules (see [`RenameRules::add`]).
    pub fn new(rules: impl IntoIterator<Item = RenameRule>) -> Result<Self, RenameError> {
        let mut indexed = Self::default();
        for rule in rules {
            indexed.add(rule)?;
        }
        Ok(indexed)
    }

    /// Adds one rule. A database may be mapped once per kind; a collection as often as
    /// wanted (each distinct target once).
    pub fn add(&mut self, rule: RenameRule) -> Result<(), RenameError> {
        match rule {
            RenameRule::DatabaseWildcard { from, to } => {
                insert_once(&mut self.database_wildcards, from, to)
            }
            RenameRule::Database { from, to } => insert_once(&mut self.databases, from, to),
            RenameRule::Collection { from, to } => {
                let targets = self.collections.entry(from).or_default();
                if !targets.contains(&to) {
                    targets.push(to);
                }
                Ok(())
            }
        }
    }
}

/// Keyed by `db.collection`: serialized forms (a job's identity) need string keys.
fn serialize_by_name<S: serde::Serializer>(
    collections: &BTreeMap<Namespace, Vec<Namespace>>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_map(collections.iter().map(|(from, to)| (from.to_string(), to)))
}

fn insert_once(
    map: &mut BTreeMap<String, String>,
    from: String,
    to: String,
) -> Result<(), RenameError> {
    match map.get(&from) {
        Some(first) if *first != to => Err(RenameError::DatabaseRenamedTwice {
            db: from,
            first: first.clone(),
            second: to,
        }),
        _ => {
            map.insert(from, to);
            Ok(())
        }
    }
}

impl std::fmt::Display for Renaming {
    /// As `status` lists a restore: `suffix _r`, or `rename ` and the rules in the form
    /// `--rename` takes them; nothing when every collection keeps its name.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Identity => Ok(()),
            Self::Suffix(suffix) => write!(f, "suffix {suffix}"),
            Self::Rules(rules) => {
                let wildcards =
                    (rules.database_wildcards.iter()).map(|(a, b)| format!("{a}.*:{b}.*"));
                let databases = (rules.databases.iter()).map(|(a, b)| format!("{a}.:{b}."));
                let collections = (rules.collections.iter())
                    .flat_map(|(from, to)| to.iter().map(move |to| format!("{from}:{to}")));
                let all: Vec<String> = wildcards.chain(databases).chain(collections).collect();
                write!(f, "rename {}", all.join(","))
            }
        }
    }
}

impl Renaming {
    /// A suffix renaming; milvus-backup allows only letters, digits and underscores.
    pub fn suffix(suffix: &str) -> Result<Self, RenameError> {
        if is_word(suffix) {
            Ok(Self::Suffix(suffix.to_owned()))
        } else {
            Err(RenameError::BadSuffix(suffix.to_owned()))
        }
    }

    /// The namespaces the backup's collection `source` is restored as.
    pub fn collection_targets(&self, source: &Namespace) -> Vec<Namespace> {
        match self {
            Self::Identity => vec![source.clone()],
            Self::Suffix(suffix) => vec![Namespace::new(
                &source.db,
                &format!("{}{suffix}", source.collection),
            )],
            Self::Rules(rules) => {
                if let Some(targets) = rules.collections.get(source) {
                    targets.clone()
                } else if let Some(db) = rules.database_wildcards.get(&source.db) {
                    vec![Namespace::new(db, &source.collection)]
                } else {
                    vec![source.clone()]
                }
            }
        }
    }

    /// The name under which the backup's database `source` is created.
    pub fn database_target(&self, source: &str) -> String {
        match self {
            Self::Rules(rules) => rules
                .databases
                .get(source)
                .cloned()
                .unwrap_or_else(|| source.to_owned()),
            Self::Identity | Self::Suffix(_) => source.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(db: &str, c: &str) -> Namespace {
        Namespace::new(db, c)
    }

    fn rules(rules: &[&str]) -> Renaming {
        Renaming::Rules(
            RenameRules::new(rules.iter().map(|r| RenameRule::parse(r).unwrap())).unwrap(),
        )
    }

    // milvus-backup's TestDefaultRenamer.
    #[test]
    fn identity_keeps_the_name() {
        assert_eq!(
            Renaming::Identity.collection_targets(&ns("db1", "coll1")),
            vec![ns("db1", "coll1")]
        );
    }

    /// `status` says a renaming in the words `--suffix` and `--rename` take, so it can be
    /// given again as it reads.
    #[test]
    fn a_renaming_reads_as_its_flags() {
        assert_eq!(Renaming::Identity.to_string(), "");
        assert_eq!(Renaming::suffix("_r").unwrap().to_string(), "suffix _r");
        let r = rules(&["db1.*:db2.*", "c1:c2", "db3.c3:db4.c4", "db5.:db6."]);
        assert_eq!(
            r.to_string(),
            "rename db1.*:db2.*,db5.:db6.,db3.c3:db4.c4,default.c1:default.c2"
        );
    }

    // milvus-backup's TestSuffixRenamer.
    #[test]
    fn suffix_appends_to_the_collection_only() {
        let r = Renaming::suffix("_bak").unwrap();
        assert_eq!(
            r.collection_targets(&ns("db1", "coll1")),
            vec![ns("db1", "coll1_bak")]
        );
        assert_eq!(r.database_target("db1"), "db1");
        assert_eq!(
            Renaming::suffix("-bak"),
            Err(RenameError::BadSuffix("-bak".into()))
        );
        assert_eq!(
            Renaming::suffix(""),
            Err(RenameError::BadSuffix(String::new()))
        );
    }

    // milvus-backup's TestMapRenamer/DBWildcard.
    #[test]
    fn database_wildcard_moves_every_collection_of_that_database() {
        let r = rules(&["db1.*:db2.*"]);
        assert_eq!(
            r.collection_targets(&ns("db1", "coll1")),
            vec![ns("db2", "coll1")]
        );
        assert_eq!(
            r.collection_targets(&ns("db1", "coll2")),
            vec![ns("db2", "coll2")]
        );
        assert_eq!(
            r.collection_targets(&ns("db3", "coll1")),
            vec![ns("db3", "coll1")]
        );
    }

    // milvus-backup's TestMapRenamer/CollMapper: one source, two targets.
    #[test]
    fn collection_rule_may_have_several_targets() {
        let r = rules(&["db1.coll1:db2.coll2", "db1.coll1:db3.coll3"]);
        assert_eq!(
            r.collection_targets(&ns("db1", "coll1")),
            vec![ns("db2", "coll2"), ns("db3", "coll3")]
        );
        assert_eq!(
            r.collection_targets(&ns("db1", "coll2")),
            vec![ns("db1", "coll2")]
        );
    }

    #[test]
    fn collection_rule_wins_over_wildcard_and_bare_names_mean_default_db() {
        let r = rules(&["db1.*:db2.*", "db1.c1:db9.x", "c1:c2"]);
        assert_eq!(r.collection_targets(&ns("db1", "c1")), vec![ns("db9", "x")]);
        assert_eq!(
            r.collection_targets(&ns("db1", "c5")),
            vec![ns("db2", "c5")]
        );
        assert_eq!(
            r.collection_targets(&ns("default", "c1")),
            vec![ns("default", "c2")]
        );
    }

    #[test]
    fn database_rule_maps_the_created_database_not_the_collections() {
        let r = rules(&["db1.:db2."]);
        assert_eq!(r.database_target("db1"), "db2");
        assert_eq!(r.database_target("db3"), "db3");
        assert_eq!(r.collection_targets(&ns("db1", "c")), vec![ns("db1", "c")]);
    }

    #[test]
    fn malformed_and_conflicting_rules_are_refused() {
        for bad in [
            "db1.*:db2.c",
            "c1:db2.c2",
            "c1",
            "c1:c2:c3",
            "db1.:db2.*",
            "a-b:c",
            ":c",
        ] {
            assert_eq!(
                RenameRule::parse(bad),
                Err(RenameError::Malformed(bad.into())),
                "{bad}"
            );
        }
        let twice = ["db1.*:db2.*", "db1.*:db3.*"].map(|r| RenameRule::parse(r).unwrap());
        assert_eq!(
            RenameRules::new(twice),
            Err(RenameError::DatabaseRenamedTwice {
                db: "db1".into(),
                first: "db2".into(),
                second: "db3".into()
            })
        );
    }
}
