//! The crate's modules form no import cycle (issue 28): a module that a second one uses does
//! not use the second back, directly or around a loop. Read from the sources: every
//! `crate::`, `super::` and `self::` path, and a parent's bare paths into its children, each
//! resolved to the module that defines the name (a name a parent re-exports from a child is
//! the child's). Tests, comments, `mod` lines and a parent's `pub use` of its children (its
//! façade) are not uses.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module path (`backup::read`, `backup`, `` for the crate root) → its code.
type Sources = BTreeMap<String, String>;
type Graph = BTreeMap<String, BTreeSet<String>>;

fn sources(root: &Path) -> Sources {
    let mut out = Sources::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("a source directory") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(root).expect("under the root");
            let mut parts: Vec<String> = relative
                .with_extension("")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                parts.pop();
            }
            let text = std::fs::read_to_string(&path).expect("a source file");
            out.insert(parts.join("::"), text);
        }
    }
    out
}

/// The code without its tests and comments.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) if !line[..at].ends_with(':') => &line[..at],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn parent(module: &str) -> &str {
    module.rsplit_once("::").map_or("", |(p, _)| p)
}

fn join(a: &str, b: &str) -> String {
    match a.is_empty() {
        true => b.to_owned(),
        false => format!("{a}::{b}"),
    }
}

/// Every path a module's code names from inside the crate, absolute, as segments.
fn paths(module: &str, code: &str, modules: &BTreeSet<String>) -> Vec<Vec<String>> {
    // Not after `(`: `pub(super)` and `pub(crate)` say who sees an item, not what it uses.
    let path = regex::Regex::new(r"(?:^|[^(\w])(crate|super|self)((?:::\w+)*)(?:::\{([^{}]*)\})?")
        .expect("the pattern");
    let bare = regex::Regex::new(r"(?:^|[^:\w])([a-z_][a-z0-9_]*)::").expect("the pattern");
    let mut out = Vec::new();
    for line in code.lines() {
        let trimmed = line.trim_start();
        // Declarations, and a parent's façade over its children, are not uses.
        if trimmed.starts_with("mod ")
            || trimmed.starts_with("pub mod ")
            || trimmed.starts_with("pub(crate) mod ")
            || (trimmed.starts_with("pub use ") && !trimmed.starts_with("pub use crate::"))
        {
            continue;
        }
        for c in path.captures_iter(line) {
            let base = match &c[1] {
                "crate" => String::new(),
                "super" => parent(module).to_owned(),
                _ => module.to_owned(),
            };
            let mut prefix: Vec<String> = base
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            let rest = c.get(2).map_or("", |m| m.as_str());
            // `super::super::x`
            for segment in rest.split("::").filter(|s| !s.is_empty()) {
                if segment == "super" {
                    prefix.pop();
                } else {
                    prefix.push(segment.to_owned());
                }
            }
            match c.get(3) {
                None => out.push(prefix),
                Some(items) => {
                    for item in items.as_str().split(',') {
                        let item = item.split(" as ").next().unwrap_or_default().trim();
                        let mut full = prefix.clone();
                        if item != "self" && !item.is_empty() {
                            full.extend(item.split("::").map(str::to_owned));
                        }
                        out.push(full);
                    }
                }
            }
        }
        for c in bare.captures_iter(line) {
            let child = join(module, &c[1]);
            if modules.contains(&child) {
                out.push(child.split("::").map(str::to_owned).collect());
            }
        }
    }
    out
}

/// The names a module re-exports from its children: name → child.
fn re_exports(text: &str) -> BTreeMap<String, String> {
    let pattern = regex::Regex::new(r"pub use (\w+)::(?:\{([^}]*)\}|(\w+))").expect("the pattern");
    let mut out = BTreeMap::new();
    for c in pattern.captures_iter(text) {
        let names = c.get(2).or(c.get(3)).map_or("", |m| m.as_str());
        for name in names.split(',') {
            let name = name.split(" as ").last().unwrap_or_default().trim();
            out.insert(name.to_owned(), c[1].to_owned());
        }
    }
    out
}

/// The module that defines what `path` names: the longest module prefix, or the child a
/// module re-exports the next name from.
fn resolve(path: &[String], exports: &BTreeMap<String, BTreeMap<String, String>>) -> String {
    let mut at = String::new();
    let mut rest = path;
    while let Some((first, tail)) = rest.split_first() {
        let next = join(&at, first);
        if !exports.contains_key(&next) {
            break;
        }
        at = next;
        rest = tail;
    }
    match rest.first().and_then(|name| exports[&at].get(name)) {
        Some(child) if exports.contains_key(&join(&at, child)) => join(&at, child),
        _ => at,
    }
}

fn graph(sources: &Sources) -> Graph {
    let modules: BTreeSet<String> = sources.keys().cloned().collect();
    let exports: BTreeMap<String, BTreeMap<String, String>> = sources
        .iter()
        .map(|(module, text)| (module.clone(), re_exports(text)))
        .collect();
    let mut graph = Graph::new();
    for (module, text) in sources {
        let uses = paths(module, &code(text), &modules)
            .iter()
            .map(|p| resolve(p, &exports))
            .filter(|used| used != module && !used.is_empty())
            .collect();
        graph.insert(module.clone(), uses);
    }
    graph
}

/// A way from `start` back to itself, if there is one: the modules in order.
fn cycle_through(graph: &Graph, start: &str) -> Option<Vec<String>> {
    let mut seen = BTreeSet::new();
    let mut path = vec![start.to_owned()];
    fn walk(
        graph: &Graph,
        start: &str,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        let last = path.last().expect("a start").clone();
        for next in graph.get(&last).into_iter().flatten() {
            if next == start {
                path.push(next.clone());
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if walk(graph, start, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    walk(graph, start, &mut path, &mut seen).then_some(path)
}

/// Every module that lies on a cycle, with one cycle through it.
fn cycles(graph: &Graph) -> Vec<String> {
    graph
        .keys()
        .filter_map(|module| cycle_through(graph, module))
        .map(|cycle| cycle.join(" → "))
        .collect()
}

#[test]
fn the_crates_modules_form_no_cycle() {
    let sources = sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let graph = graph(&sources);
    assert!(
        graph.len() > 80,
        "read the crate's modules: {:?}",
        graph.keys()
    );
    // The reader sees uses of each kind: `super::`, `crate::`, a re-exported name.
    assert!(
        graph["engine::run"].contains("engine::staging"),
        "{graph:?}"
    );
    assert!(graph["verify"].contains("milvus::grpc"), "{graph:?}");
    assert!(
        graph["engine::report"].contains("backup::plan"),
        "{graph:?}"
    );
    let found = cycles(&graph);
    assert!(
        found.is_empty(),
        "modules import each other:\n{}",
        found.join("\n")
    );
}

/// A cycle planted in sources of the crate's shape is found, through a re-export too.
#[test]
fn a_planted_cycle_is_found() {
    let planted = Sources::from([
        (String::new(), "pub mod a;\npub mod b;\n".to_owned()),
        (
            "a".to_owned(),
            "mod inner;\npub use inner::Thing;\nuse crate::b::Other;\n".to_owned(),
        ),
        ("a::inner".to_owned(), "pub struct Thing;\n".to_owned()),
        (
            "b".to_owned(),
            "pub struct Other;\nfn f() -> crate::a::Thing { todo!() }\n".to_owned(),
        ),
    ]);
    let uses = graph(&planted);
    assert_eq!(uses["b"], BTreeSet::from(["a::inner".to_owned()]));
    assert!(cycles(&uses).is_empty(), "{uses:?}");
    let mut looped = planted.clone();
    looped.insert(
        "a::inner".to_owned(),
        "pub struct Thing;\nuse super::super::b::Other;\n".to_owned(),
    );
    assert_eq!(
        cycles(&graph(&looped)),
        ["a::inner → b → a::inner", "b → a::inner → b"]
    );
}
