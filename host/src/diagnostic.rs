//! Problems in a job or host config, with where they are, and the TOML reading that
//! collects all of them instead of stopping at serde's first.
//!
//! serde stops at the first error. To report every problem, a document is parsed once
//! into toml's spanned tree, then deserialized repeatedly: each failure is recorded with
//! its span, the key it points into is removed from the tree, and deserialization runs
//! again on what is left, until it succeeds. Every struct read this way has only
//! optional fields, so removing a key never creates a new error; required fields are
//! checked afterwards by validation, which also knows which keys were removed (and so
//! already reported) and does not report them missing a second time.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::{self, DeserializeOwned, Visitor};
use toml::de::{DeTable, DeValue};

/// Where a problem is, in the form the input came in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A TOML file, 1-based line and column (in characters).
    File {
        path: PathBuf,
        line: usize,
        column: usize,
    },
    /// A command-line flag, e.g. `--rename`.
    Flag(String),
    /// An environment variable that set a value.
    Env(String),
    /// A field of a REST request body, e.g. `collection_renames`.
    JsonField(String),
    /// A position in a REST request body that is not valid JSON.
    Body { line: usize, column: usize },
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File { path, line, column } => write!(f, "{}:{line}:{column}", path.display()),
            Self::Flag(flag) => f.write_str(flag),
            Self::Env(var) => write!(f, "environment variable {var}"),
            Self::JsonField(field) => write!(f, "request field `{field}`"),
            Self::Body { line, column } => write!(f, "request body line {line}, column {column}"),
        }
    }
}

/// One thing wrong with an input: where, which field (`check[1].phase`,
/// `two_phase.mirror_grace`; indexes count from 0), what kind of thing and what was
/// expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub location: Location,
    /// The field's path in the job file's terms, empty for the document as a whole.
    pub field: String,
    pub kind: Kind,
    pub message: String,
}

/// A problem as a refusal's JSON gives it: where (`file`, `line`, `column`; or `flag`,
/// `env`, `json_field`), the `field`, the `kind` and the `text`.
impl serde::Serialize for Problem {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut map = serializer.serialize_map(None)?;
        match &self.location {
            Location::File { path, line, column } => {
                map.serialize_entry("file", path)?;
                map.serialize_entry("line", line)?;
                map.serialize_entry("column", column)?;
            }
            Location::Flag(flag) => map.serialize_entry("flag", flag)?,
            Location::Env(var) => map.serialize_entry("env", var)?,
            Location::JsonField(field) => map.serialize_entry("json_field", field)?,
            Location::Body { line, column } => {
                map.serialize_entry("line", line)?;
                map.serialize_entry("column", column)?;
            }
        }
        map.serialize_entry("field", &self.field)?;
        map.serialize_entry("kind", &self.kind)?;
        map.serialize_entry("text", &self.message)?;
        map.end()
    }
}

/// What kind of problem, for a script that reads refusals (`kind` in their JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// The document is not TOML (or the body not JSON) at this place.
    Syntax,
    /// A key the format does not have.
    UnknownField,
    /// A value of the wrong type: a string where a number goes, say.
    WrongType,
    /// A value that must be given and is not.
    Missing,
    /// A value of the right type that is not allowed, or that disagrees with another.
    Invalid,
}

impl Kind {
    /// The kind of a deserializer's error, told by the texts serde gives its standard
    /// errors (`unknown field`, `missing field`, `invalid type`), which every format's
    /// deserializer, toml's and serde_json's among them, passes on as written.
    pub fn of_deserializing(message: &str) -> Kind {
        if message.starts_with("unknown field") {
            Kind::UnknownField
        } else if message.starts_with("missing field") {
            Kind::Missing
        } else if message.starts_with("invalid type") {
            Kind::WrongType
        } else {
            Kind::Invalid
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.location, self.field.is_empty()) {
            (Location::File { .. }, false) => {
                write!(f, "{}: {}: {}", self.location, self.field, self.message)
            }
            _ => write!(f, "{}: {}", self.location, self.message),
        }
    }
}

/// Which kind of input was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    JobFile(PathBuf),
    HostConfig(PathBuf),
    Flags,
    Request,
}

impl fmt::Display for Input {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::JobFile(path) => write!(f, "job file {}", path.display()),
            Self::HostConfig(path) => write!(f, "host config {}", path.display()),
            Self::Flags => f.write_str("restore flags"),
            Self::Request => f.write_str("restore request"),
        }
    }
}

/// Why a job or host config was refused. Every variant is a refusal of bad input:
/// nothing was contacted or written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {input}: {source}")]
    Read {
        input: Input,
        #[source]
        source: std::io::Error,
    },
    #[error("{input} refused ({} problem{}):\n{}", problems.len(), if problems.len() == 1 { "" } else { "s" }, list(problems))]
    Invalid {
        input: Input,
        problems: Vec<Problem>,
    },
}

impl Error {
    /// Every problem found; empty for a read error.
    pub fn problems(&self) -> &[Problem] {
        match self {
            Self::Read { .. } => &[],
            Self::Invalid { problems, .. } => problems,
        }
    }
}

fn list(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| format!("  {p}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A problem before it is located: the field path and, for TOML, the byte span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawProblem {
    pub field: String,
    pub span: Option<Range<usize>>,
    pub kind: Kind,
    pub message: String,
}

impl RawProblem {
    /// A value that is not allowed ([`Kind::Invalid`]): what validation finds.
    pub fn new(
        field: impl Into<String>,
        span: Option<Range<usize>>,
        message: impl Into<String>,
    ) -> Self {
        Self::of_kind(Kind::Invalid, field, span, message)
    }

    pub fn of_kind(
        kind: Kind,
        field: impl Into<String>,
        span: Option<Range<usize>>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            field: field.into(),
            span,
            kind,
            message: message.into(),
        }
    }
}

/// Line and column (1-based, column in characters) of a byte offset.
pub(crate) fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

/// Locates problems found in the TOML file `path` whose text is `text`.
pub(crate) fn locate_in_file(path: &Path, text: &str, problems: Vec<RawProblem>) -> Vec<Problem> {
    problems
        .into_iter()
        .map(|p| {
            let (line, column) = line_column(text, p.span.map_or(0, |s| s.start));
            Problem {
                location: Location::File {
                    path: path.to_owned(),
                    line,
                    column,
                },
                field: p.field,
                kind: p.kind,
                message: p.message,
            }
        })
        .collect()
}

/// A document read as far as it could be: the value (if the syntax was sound), every
/// problem found, and the field paths removed because of them.
pub(crate) struct TomlRead<T> {
    pub value: Option<T>,
    pub problems: Vec<RawProblem>,
    pub removed: Vec<String>,
}

/// Reads `text` as a `T`, collecting every problem (see the module docs). Syntax errors
/// are all reported and stop there, since the tree recovered around them is a guess.
pub(crate) fn read_toml<T: DeserializeOwned>(text: &str) -> TomlRead<T> {
    let (mut root, syntax_errors) = DeTable::parse_recoverable(text);
    if !syntax_errors.is_empty() {
        let problems = syntax_errors
            .iter()
            .map(|e| RawProblem::of_kind(Kind::Syntax, "", e.span(), e.message().trim()))
            .collect();
        return TomlRead {
            value: None,
            problems,
            removed: Vec::new(),
        };
    }
    let mut problems = Vec::new();
    let mut removed = Vec::new();
    loop {
        match T::deserialize(toml::de::Deserializer::from(root.clone())) {
            Ok(value) => {
                return TomlRead {
                    value: Some(value),
                    problems,
                    removed,
                };
            }
            Err(error) => {
                let message = error.message().trim().to_owned();
                let kind = Kind::of_deserializing(&message);
                let Some(span) = error.span() else {
                    problems.push(RawProblem::of_kind(kind, "", None, message));
                    return TomlRead {
                        value: None,
                        problems,
                        removed,
                    };
                };
                let mut path = Vec::new();
                let mut deepest = Vec::new();
                find_deepest(root.get_ref(), &span, &mut path, &mut deepest);
                problems.push(RawProblem::of_kind(
                    kind,
                    render(&deepest),
                    Some(span),
                    message,
                ));
                // Remove the innermost key holding the error: a bad element of an array
                // of scalars takes the whole array with it.
                while matches!(deepest.last(), Some(Segment::Index(_))) {
                    deepest.pop();
                }
                if deepest.is_empty() || !remove(root.get_mut(), &deepest) {
                    return TomlRead {
                        value: None,
                        problems,
                        removed,
                    };
                }
                removed.push(render(&deepest));
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Key(String),
    Index(usize),
}

/// `check[1].phase`
fn render(path: &[Segment]) -> String {
    let mut out = String::new();
    for segment in path {
        match segment {
            Segment::Key(key) if out.is_empty() => out.push_str(key),
            Segment::Key(key) => {
                out.push('.');
                out.push_str(key);
            }
            Segment::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

fn contains(outer: &Range<usize>, inner: &Range<usize>) -> bool {
    outer.start <= inner.start && inner.end <= outer.end && outer.start < outer.end
}

/// The deepest key or array element whose key or value span contains `span`. Children
/// are searched whether or not their parent's span contains them: the span toml gives an
/// array of tables does not cover the keys under its headers.
fn find_deepest(
    table: &DeTable<'_>,
    span: &Range<usize>,
    path: &mut Vec<Segment>,
    deepest: &mut Vec<Segment>,
) {
    for (key, value) in table.iter() {
        path.push(Segment::Key(key.get_ref().to_string()));
        if (contains(&key.span(), span) || contains(&value.span(), span))
            && path.len() > deepest.len()
        {
            *deepest = path.clone();
        }
        find_in_value(value.get_ref(), span, path, deepest);
        path.pop();
    }
}

fn find_in_value(
    value: &DeValue<'_>,
    span: &Range<usize>,
    path: &mut Vec<Segment>,
    deepest: &mut Vec<Segment>,
) {
    match value {
        DeValue::Table(table) => find_deepest(table, span, path, deepest),
        DeValue::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                path.push(Segment::Index(i));
                if contains(&item.span(), span) && path.len() > deepest.len() {
                    *deepest = path.clone();
                }
                find_in_value(item.get_ref(), span, path, deepest);
                path.pop();
            }
        }
        _ => {}
    }
}

/// Removes the key at `path` (which ends in a key); false if it is not there.
fn remove(table: &mut DeTable<'_>, path: &[Segment]) -> bool {
    match path {
        [Segment::Key(key)] => table.remove(key.as_str()).is_some(),
        [Segment::Key(key), rest @ ..] => table
            .get_mut(key.as_str())
            .is_some_and(|value| remove_in(value.get_mut(), rest)),
        _ => false,
    }
}

fn remove_in(value: &mut DeValue<'_>, path: &[Segment]) -> bool {
    match (value, path) {
        (DeValue::Table(table), [Segment::Key(_), ..]) => remove(table, path),
        (DeValue::Array(items), [Segment::Index(i), rest @ ..]) => items
            .get_mut(*i)
            .is_some_and(|item| remove_in(item.get_mut(), rest)),
        _ => false,
    }
}

/// A whole number from `MIN` to `MAX`, refused while it is read so the message
/// points at the value itself (in TOML and in JSON alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InRange<const MIN: u64, const MAX: u64>(u64);

impl<const MIN: u64, const MAX: u64> InRange<MIN, MAX> {
    pub fn get(self) -> u64 {
        self.0
    }
}

impl<'de, const MIN: u64, const MAX: u64> Deserialize<'de> for InRange<MIN, MAX> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct RangeVisitor<const MIN: u64, const MAX: u64>;
        impl<const MIN: u64, const MAX: u64> RangeVisitor<MIN, MAX> {
            fn expected() -> String {
                format!("a whole number from {MIN} to {MAX}")
            }
        }
        impl<'de, const MIN: u64, const MAX: u64> Visitor<'de> for RangeVisitor<MIN, MAX> {
            type Value = InRange<MIN, MAX>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&Self::expected())
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                if (MIN..=MAX).contains(&v) {
                    Ok(InRange(v))
                } else {
                    Err(E::invalid_value(
                        de::Unexpected::Unsigned(v),
                        &Self::expected().as_str(),
                    ))
                }
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::invalid_value(
                        de::Unexpected::Signed(v),
                        &Self::expected().as_str(),
                    )),
                }
            }
        }
        deserializer.deserialize_u64(RangeVisitor::<MIN, MAX>)
    }
}

/// An error with its causes, on one line.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        source = cause.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Doc {
        a: Option<u32>,
        b: Option<String>,
        t: Option<Inner>,
        list: Option<Vec<Inner>>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        x: Option<u32>,
    }

    #[test]
    fn collects_every_problem_with_its_path() {
        let text =
            "a = \"one\"\nzz = 1\nb = \"ok\"\n[t]\nx = \"two\"\n[[list]]\nx = 1\n[[list]]\ny = 2\n";
        let read = read_toml::<Doc>(text);
        assert!(read.value.is_some());
        let fields: Vec<_> = read.problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(fields.len(), 4, "{:?}", read.problems);
        for expected in ["a", "zz", "t.x", "list[1].y"] {
            assert!(
                fields.contains(&expected),
                "{expected} missing from {fields:?}"
            );
        }
        let located = locate_in_file(Path::new("f.toml"), text, read.problems);
        let y = located.iter().find(|p| p.field == "list[1].y").unwrap();
        assert_eq!(
            y.location,
            Location::File {
                path: "f.toml".into(),
                line: 9,
                column: 1
            }
        );
        assert!(
            y.message.contains("unknown field `y`, expected `x`"),
            "{}",
            y.message
        );
    }

    #[test]
    fn syntax_errors_are_all_reported_and_stop_reading() {
        let read = read_toml::<Doc>("a = \nb = = 2\n");
        assert!(read.value.is_none());
        assert!(!read.problems.is_empty());
    }

    #[test]
    fn line_column_counts_characters() {
        assert_eq!(line_column("ab\ncé d", 7), (2, 4));
        assert_eq!(line_column("", 0), (1, 1));
    }
}
