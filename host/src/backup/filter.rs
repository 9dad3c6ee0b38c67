//! Which databases and collections a restore takes, in milvus-backup's rule syntax
//! (`internal/filter`): a comma-separated list of
//!
//! - `db1.*`: every collection of `db1`;
//! - `db1.coll1`: one collection of `db1`;
//! - `coll1`: one collection of the default database;
//! - `db1.`: the database `db1` itself, none of its collections.
//!
//! Names are Go's `\w+` (ASCII letters, digits, underscore). The same syntax serves the
//! filter applied to the backup's own names and the one applied after renaming.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::namespace::{DEFAULT_DB, Namespace, is_word};

/// What a filter keeps of one database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum DbSelection {
    /// `db.*`: the database and all of its collections.
    AllCollections,
    /// `db.coll` rules: the database and the named collections; empty for `db.`, which
    /// keeps the database alone.
    Collections(BTreeSet<String>),
}

/// A parsed filter. The default keeps everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Filter {
    /// `None` keeps every database and collection; otherwise only the databases listed.
    databases: Option<BTreeMap<String, DbSelection>>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid filter rule `{rule}`: expected `db.*`, `db.collection`, `collection` or `db.`")]
pub struct FilterError {
    pub rule: String,
}

impl Filter {
    /// Parses a comma-separated rule list; an empty string keeps everything. Space
    /// around a rule is ignored.
    pub fn parse(s: &str) -> Result<Self, FilterError> {
        if s.trim().is_empty() {
            return Ok(Self::default());
        }
        let mut databases = BTreeMap::new();
        for rule in s.split(',').map(str::trim) {
            let (db, selection) = parse_rule(rule).ok_or_else(|| FilterError {
                rule: rule.to_owned(),
            })?;
            merge(&mut databases, db, selection);
        }
        Ok(Self {
            databases: Some(databases),
        })
    }

    /// Whether this filter keeps everything.
    pub fn keeps_everything(&self) -> bool {
        self.databases.is_none()
    }

    /// Whether the database `db` is kept (as a database to create).
    pub fn allows_db(&self, db: &str) -> bool {
        match &self.databases {
            None => true,
            Some(dbs) => dbs.contains_key(db),
        }
    }

    /// Whether the collection `ns` is kept.
    pub fn allows(&self, ns: &Namespace) -> bool {
        match &self.databases {
            None => true,
            Some(dbs) => match dbs.get(&ns.db) {
                None => false,
                Some(DbSelection::AllCollections) => true,
                Some(DbSelection::Collections(names)) => names.contains(&ns.collection),
            },
        }
    }
}

fn parse_rule(rule: &str) -> Option<(String, DbSelection)> {
    if let Some(db) = rule.strip_suffix(".*") {
        return is_word(db).then(|| (db.to_owned(), DbSelection::AllCollections));
    }
    if let Some(db) = rule.strip_suffix('.') {
        return is_word(db).then(|| (db.to_owned(), DbSelection::Collections(BTreeSet::new())));
    }
    let (db, collection) = rule.split_once('.').unwrap_or((DEFAULT_DB, rule));
    (is_word(db) && is_word(collection)).then(|| {
        (
            db.to_owned(),
            DbSelection::Collections(BTreeSet::from([collection.to_owned()])),
        )
    })
}

/// Adds one rule's selection. milvus-backup panics on `db.*` followed by `db.c` (it writes
/// into a nil map); here the wider selection wins whatever the order.
fn merge(databases: &mut BTreeMap<String, DbSelection>, db: String, selection: DbSelection) {
    match (databases.get_mut(&db), selection) {
        (None, selection) => {
            databases.insert(db, selection);
        }
        (Some(existing), DbSelection::AllCollections) => *existing = DbSelection::AllCollections,
        (Some(DbSelection::AllCollections), DbSelection::Collections(_)) => {}
        (Some(DbSelection::Collections(names)), DbSelection::Collections(more)) => {
            names.extend(more)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(db: &str, c: &str) -> Namespace {
        Namespace::new(db, c)
    }

    #[test]
    fn empty_filter_keeps_everything() {
        let f = Filter::parse("").unwrap();
        assert!(f.keeps_everything());
        assert!(f.allows_db("any"));
        assert!(f.allows(&ns("any", "c")));
    }

    #[test]
    fn each_rule_kind_selects_what_milvus_backup_selects() {
        let f = Filter::parse("db1.*,db2.c2,c3,db4.").unwrap();
        assert!(f.allows(&ns("db1", "anything")));
        assert!(f.allows(&ns("db2", "c2")));
        assert!(!f.allows(&ns("db2", "other")));
        assert!(f.allows(&ns("default", "c3")));
        assert!(!f.allows(&ns("default", "c4")));
        assert!(f.allows_db("db4"));
        assert!(!f.allows(&ns("db4", "c")));
        assert!(!f.allows_db("db5"));
        assert!(!f.allows(&ns("db5", "c")));
    }

    #[test]
    fn wider_rule_wins_in_either_order() {
        for s in ["db1.*,db1.c1", "db1.c1,db1.*", "db1.,db1.*"] {
            let f = Filter::parse(s).unwrap();
            assert!(f.allows(&ns("db1", "zzz")), "{s}");
        }
        let f = Filter::parse("db1.,db1.c1,db1.c2").unwrap();
        assert!(f.allows(&ns("db1", "c1")) && f.allows(&ns("db1", "c2")));
        assert!(!f.allows(&ns("db1", "c3")));
    }

    #[test]
    fn malformed_rules_are_named() {
        for bad in ["db-1.*", "a.b.c", "db1.c-1", ",", "db1,,db2", "*", "db1.**"] {
            let err = Filter::parse(bad).unwrap_err();
            assert!(bad.split(',').any(|r| r.trim() == err.rule), "{bad}: {err}");
        }
    }
}
