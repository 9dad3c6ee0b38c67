//! A YAML document read as milvus-backup reads its config: nested maps flattened to dotted
//! keys, compared without case, null leaves dropped, lists kept as lists. Each leaf keeps
//! the byte offset of its key, so a problem names the line it is on.

use std::collections::BTreeMap;
use std::ops::Range;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

use crate::diagnostic::RawProblem;

/// A leaf's value as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Value {
    Scalar(String),
    List(Vec<String>),
}

/// One leaf of the document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Leaf {
    /// The dotted key as written, e.g. `milvus.grpc.tlsMode`.
    pub key: String,
    pub value: Value,
    /// Where the key starts.
    pub span: Range<usize>,
}

/// Leaves by their lower-cased dotted key.
pub(super) type Leaves = BTreeMap<String, Leaf>;

/// Reads `text`; a document that is not a map of maps is one problem, where it goes wrong.
pub(super) fn flatten(text: &str) -> Result<Leaves, RawProblem> {
    let mut events = Events::default();
    Parser::new_from_str(text)
        .load(&mut events, false)
        .map_err(|e| RawProblem::new("", Some(at(text, e.marker())), e.info().to_owned()))?;
    let mut reader = Reader {
        text,
        events: events.0.into_iter().peekable(),
        leaves: Leaves::new(),
    };
    reader.document()?;
    Ok(reader.leaves)
}

#[derive(Default)]
struct Events(Vec<(Event, Marker)>);

impl MarkedEventReceiver for Events {
    fn on_event(&mut self, event: Event, mark: Marker) {
        self.0.push((event, mark));
    }
}

/// The parser counts characters; problems are located by byte offset.
fn at(text: &str, mark: &Marker) -> Range<usize> {
    let offset = text
        .char_indices()
        .nth(mark.index())
        .map_or(text.len(), |(byte, _)| byte);
    offset..offset
}

/// Plain `~`, `null` or nothing: YAML's null, which leaves the default in place.
fn is_null(value: &str, style: TScalarStyle) -> bool {
    style == TScalarStyle::Plain && matches!(value, "" | "~" | "null" | "Null" | "NULL")
}

struct Reader<'t> {
    text: &'t str,
    events: std::iter::Peekable<std::vec::IntoIter<(Event, Marker)>>,
    leaves: Leaves,
}

impl Reader<'_> {
    fn problem(&self, mark: &Marker, field: &str, message: impl Into<String>) -> RawProblem {
        RawProblem::new(field, Some(at(self.text, mark)), message)
    }

    fn next(&mut self) -> Result<(Event, Marker), RawProblem> {
        self.events
            .next()
            .ok_or_else(|| RawProblem::new("", None, "the document ends early"))
    }

    fn document(&mut self) -> Result<(), RawProblem> {
        loop {
            let (event, mark) = self.next()?;
            match event {
                Event::StreamStart | Event::DocumentStart => {}
                // An empty file configures nothing: every value keeps its default.
                Event::StreamEnd | Event::DocumentEnd => return Ok(()),
                Event::MappingStart(..) => return self.mapping(""),
                Event::Scalar(value, style, ..) if is_null(&value, style) => {}
                _ => {
                    return Err(self.problem(
                        &mark,
                        "",
                        "the config is not a map of keys: expected `milvus:`, `backup:`, ... at the top",
                    ));
                }
            }
        }
    }

    /// The entries of a map whose start was read; `prefix` is its dotted key.
    fn mapping(&mut self, prefix: &str) -> Result<(), RawProblem> {
        loop {
            let (event, mark) = self.next()?;
            let key = match event {
                Event::MappingEnd => return Ok(()),
                Event::Scalar(key, ..) => key,
                _ => return Err(self.problem(&mark, prefix, "a key must be plain text")),
            };
            let dotted = if prefix.is_empty() {
                key
            } else {
                format!("{prefix}.{key}")
            };
            self.entry(dotted, mark)?;
        }
    }

    fn entry(&mut self, key: String, key_mark: Marker) -> Result<(), RawProblem> {
        let (event, mark) = self.next()?;
        let value = match event {
            Event::MappingStart(..) => return self.mapping(&key),
            Event::Scalar(value, style, ..) if is_null(&value, style) => return Ok(()),
            Event::Scalar(value, ..) => Value::Scalar(value),
            Event::SequenceStart(..) => Value::List(self.sequence(&key)?),
            Event::Alias(_) => {
                return Err(self.problem(
                    &mark,
                    &key,
                    "aliases (`*name`) are not read here: write the value",
                ));
            }
            _ => return Err(self.problem(&mark, &key, "expected a value")),
        };
        let span = at(self.text, &key_mark);
        match self.leaves.entry(key.to_lowercase()) {
            std::collections::btree_map::Entry::Occupied(first) => Err(RawProblem::new(
                key.as_str(),
                Some(span),
                format!("`{}` is set twice", first.get().key),
            )),
            std::collections::btree_map::Entry::Vacant(slot) => {
                slot.insert(Leaf { key, value, span });
                Ok(())
            }
        }
    }

    fn sequence(&mut self, key: &str) -> Result<Vec<String>, RawProblem> {
        let mut items = Vec::new();
        loop {
            let (event, mark) = self.next()?;
            match event {
                Event::SequenceEnd => return Ok(items),
                Event::Scalar(value, ..) => items.push(value),
                _ => {
                    return Err(self.problem(&mark, key, "a list item must be a plain value"));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaves(text: &str) -> Vec<(String, Value, usize)> {
        flatten(text)
            .unwrap()
            .into_values()
            .map(|l| (l.key, l.value, l.span.start))
            .collect()
    }

    #[test]
    fn maps_flatten_to_dotted_keys_and_nulls_drop() {
        let text = "milvus:\n  grpc:\n    port: 19530\n    address: ~\n  etcd:\n    endpoints: [a:1, b:2]\nlog:\n";
        assert_eq!(
            leaves(text),
            [
                (
                    "milvus.etcd.endpoints".to_owned(),
                    Value::List(vec!["a:1".into(), "b:2".into()]),
                    text.find("endpoints").unwrap()
                ),
                (
                    "milvus.grpc.port".to_owned(),
                    Value::Scalar("19530".into()),
                    text.find("port").unwrap()
                ),
            ]
        );
    }

    #[test]
    fn keys_are_compared_without_case_and_said_once() {
        let err = flatten("milvus:\n  user: a\n  User: b\n").unwrap_err();
        assert_eq!(err.message, "`milvus.user` is set twice");
        assert_eq!(err.span, Some(20..20), "the second spelling");
    }

    #[test]
    fn a_document_that_is_not_a_map_is_refused_where_it_goes_wrong() {
        assert!(flatten("- a\n- b\n").is_err());
        let err = flatten("milvus:\n  user: [a\n").unwrap_err();
        assert!(err.span.is_some());
        assert!(flatten("").unwrap().is_empty());
        assert!(flatten("# only a comment\n").unwrap().is_empty());
    }
}
