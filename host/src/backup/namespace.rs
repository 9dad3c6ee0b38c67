//! A collection's name within its database, as milvus-backup's `namespace.NS` writes it:
//! `db.collection`, with an empty database meaning `default`.

use std::fmt;

/// Milvus's default database, which milvus-backup substitutes for an empty name.
pub const DEFAULT_DB: &str = "default";

/// A collection's full name: database and collection.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct Namespace {
    pub db: String,
    pub collection: String,
}

impl Namespace {
    /// A namespace in `db`; an empty `db` is the default database.
    pub fn new(db: &str, collection: &str) -> Self {
        let db = if db.is_empty() { DEFAULT_DB } else { db };
        Self {
            db: db.to_owned(),
            collection: collection.to_owned(),
        }
    }

    /// Parses `db.collection` or `collection` (in the default database), as
    /// `namespace.Parse` does: more than one dot is refused.
    pub fn parse(s: &str) -> Result<Self, NamespaceError> {
        if s.is_empty() {
            return Err(NamespaceError::Empty);
        }
        match s.split_once('.') {
            None => Ok(Self::new(DEFAULT_DB, s)),
            Some((db, collection)) if !collection.contains('.') => Ok(Self::new(db, collection)),
            Some(_) => Err(NamespaceError::TooManyDots(s.to_owned())),
        }
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.db, self.collection)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NamespaceError {
    #[error("empty collection name")]
    Empty,
    #[error("`{0}` has more than one dot; expected `db.collection` or `collection`")]
    TooManyDots(String),
}

/// Whether `s` is a non-empty run of ASCII letters, digits and underscores: Go's `\w+`,
/// which milvus-backup's filter and rename rules match names with.
pub(crate) fn is_word(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_defaults_the_database_and_refuses_two_dots() {
        assert_eq!(
            Namespace::parse("c1").unwrap(),
            Namespace::new("default", "c1")
        );
        assert_eq!(
            Namespace::parse("db1.c1").unwrap(),
            Namespace::new("db1", "c1")
        );
        assert_eq!(
            Namespace::parse(".c1").unwrap(),
            Namespace::new("default", "c1")
        );
        assert_eq!(
            Namespace::parse("a.b.c"),
            Err(NamespaceError::TooManyDots("a.b.c".into()))
        );
        assert_eq!(Namespace::parse(""), Err(NamespaceError::Empty));
        assert_eq!(Namespace::new("", "c").to_string(), "default.c");
    }
}
