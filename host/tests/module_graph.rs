//! The crate's modules form no import cycle: a module that a second one uses does not use
//! the second back, directly or around a loop, and the same holds between its top-level
//! folders (`engine`, `backup`, `config`, ...), so that no arrow runs from a lower layer back
//! up to a higher one. The same reader checks the emulator, `tests/milvus-sim`, whose
//! cluster state is called by its faces and calls none of them. Read from the sources: every `crate::`, `super::` and `self::` path,
//! wherever it stands (a `use` tree with nested braces over several lines, a call's
//! argument, a type in parentheses), and a module's bare paths into its children, each
//! resolved to the module that defines the name (a name a parent re-exports from a child is
//! the child's). Tests, comments, `mod` lines, visibility (`pub(crate)`, `pub(super)`) and a
//! parent's `pub use` of its children (its façade) are not uses.

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

/// The code without its tests, comments and visibility restrictions.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
    let text: String = text
        .lines()
        .map(|line| match line.find("//") {
            Some(at) if !line[..at].ends_with(':') => &line[..at],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n");
    // `pub(super)` and `pub(crate)` say who sees an item, not what it uses.
    let visibility = regex::Regex::new(r"pub\s*\(\s*(?:crate|super|self|in\s+[\w:]+)\s*\)")
        .expect("the pattern");
    visibility.replace_all(&text, "pub").into_owned()
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

/// The paths a `use` tree names, each written out whole, with the name each is known by:
/// `a::{b, c::{d as e}}` is `a::b` (known as `b`) and `a::c::d` (known as `e`); `self` in
/// braces names the prefix itself.
fn expand_tree(tree: &str) -> Vec<(String, String)> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let mut parts = tree.split(" as ");
        let path = parts.next().unwrap_or_default().trim().to_owned();
        let name = match parts.next() {
            Some(alias) => alias.trim().to_owned(),
            None => path.rsplit("::").next().unwrap_or_default().to_owned(),
        };
        return vec![(path, name)];
    };
    let prefix = tree[..open].trim().trim_end_matches("::");
    let close = tree
        .rfind('}')
        .filter(|close| *close > open)
        .unwrap_or(tree.len());
    let inner = &tree[open + 1..close];
    let mut items = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    let last = |path: &str| path.rsplit("::").next().unwrap_or_default().to_owned();
    items
        .into_iter()
        .filter(|item| !item.trim().is_empty())
        .flat_map(expand_tree)
        .map(|(path, name)| match path.as_str() {
            "self" if name == "self" => (prefix.to_owned(), last(prefix)),
            "self" => (prefix.to_owned(), name),
            _ if prefix.is_empty() => (path, name),
            _ => (format!("{prefix}::{path}"), name),
        })
        .collect()
}

/// A path as written in `module` (`super::x::Y`, `crate::a`, `child::Z`, or through a name
/// a `use` brought in, `imported::Z`) made absolute, as segments; `None` for a path that
/// does not lead into the crate.
fn absolute(
    module: &str,
    path: &str,
    modules: &BTreeSet<String>,
    imported: &BTreeMap<String, Vec<String>>,
) -> Option<Vec<String>> {
    let mut segments = path.split("::").map(str::trim).filter(|s| !s.is_empty());
    let first = segments.next()?;
    let mut out: Vec<String> = match first {
        "crate" => Vec::new(),
        "super" => split(parent(module)),
        "self" => split(module),
        child if modules.contains(&join(module, child)) => {
            let mut out = split(module);
            out.push(child.to_owned());
            out
        }
        name => imported.get(name)?.clone(),
    };
    for segment in segments {
        match segment {
            "super" => {
                out.pop();
            }
            "*" => {}
            _ => out.push(segment.to_owned()),
        }
    }
    Some(out)
}

fn split(module: &str) -> Vec<String> {
    module
        .split("::")
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Every path a module's code names from inside the crate, absolute, as segments.
fn paths(module: &str, code: &str, modules: &BTreeSet<String>) -> Vec<Vec<String>> {
    // rustfmt starts every `use` on a line of its own; a "use" inside a string does not.
    let statement = regex::Regex::new(r"(?m)^[ \t]*(pub\s+)?use\s+([^;]*);").expect("the pattern");
    let declaration = regex::Regex::new(r"(?m)^\s*(?:pub\s+)?mod\s+\w+\s*;").expect("the pattern");
    let inline =
        regex::Regex::new(r"(?:^|[^:\w$])([a-z_][a-z0-9_]*(?:::\w+)+)").expect("the pattern");
    let code = declaration.replace_all(code, "");
    let mut out = Vec::new();
    let mut imported = BTreeMap::new();
    for c in statement.captures_iter(&code) {
        let tree = &c[2];
        // A parent's façade over its children: `pub use child::Name`.
        let from = tree.trim_start().split("::").next().unwrap_or_default();
        if c.get(1).is_some() && !matches!(from, "crate" | "super" | "self") {
            continue;
        }
        for (path, name) in expand_tree(tree) {
            if let Some(used) = absolute(module, &path, modules, &BTreeMap::new()) {
                imported.insert(name, used.clone());
                out.push(used);
            }
        }
    }
    let rest = statement.replace_all(&code, "");
    for c in inline.captures_iter(&rest) {
        out.extend(absolute(module, &c[1], modules, &imported));
    }
    out
}

/// The names a module re-exports from its children: name → child.
fn re_exports(text: &str) -> BTreeMap<String, String> {
    let pattern = regex::Regex::new(r"(?s)\bpub use (\w+)::([^;]*);").expect("the pattern");
    let mut out = BTreeMap::new();
    for c in pattern.captures_iter(text) {
        if matches!(&c[1], "crate" | "super" | "self") {
            continue;
        }
        for (_, name) in expand_tree(&c[2]) {
            out.insert(name, c[1].to_owned());
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
        .map(|(module, text)| (module.clone(), re_exports(&code(text))))
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

/// The graph with every module collapsed to its top-level folder (or file), its uses inside
/// one folder left out.
fn folders(graph: &Graph) -> Graph {
    let top = |module: &str| module.split("::").next().unwrap_or_default().to_owned();
    let mut out = Graph::new();
    for (module, uses) in graph {
        let from = top(module);
        let entry = out.entry(from.clone()).or_default();
        entry.extend(uses.iter().map(|u| top(u)).filter(|to| *to != from));
    }
    out
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

/// Every module `from` reaches, directly or through others.
fn reachable(graph: &Graph, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![from.to_owned()];
    while let Some(module) = stack.pop() {
        for next in graph.get(&module).into_iter().flatten() {
            if seen.insert(next.clone()) {
                stack.push(next.clone());
            }
        }
    }
    seen
}

/// Every module that lies on a cycle, with one cycle through it.
fn cycles(graph: &Graph) -> Vec<String> {
    graph
        .keys()
        .filter_map(|module| cycle_through(graph, module))
        .map(|cycle| cycle.join(" → "))
        .collect()
}

fn assert_acyclic(graph: &Graph, what: &str) {
    let found = cycles(graph);
    assert!(
        found.is_empty(),
        "{what} import each other:\n{}",
        found.join("\n")
    );
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
    // The reader sees uses of each kind: `super::`, `crate::`, a re-exported name, a `use`
    // tree over several lines, a path inside a call.
    assert!(
        graph["engine::run"].contains("engine::staging"),
        "{graph:?}"
    );
    assert!(graph["verify"].contains("milvus::grpc"), "{graph:?}");
    assert!(
        graph["engine::report"].contains("backup::plan"),
        "{graph:?}"
    );
    assert!(
        graph["job::validate"].contains("config::validate"),
        "{graph:?}"
    );
    assert_acyclic(&graph, "modules");
    assert_acyclic(&folders(&graph), "folders");
}

/// The emulator's modules (`tests/milvus-sim`, beside this crate) form no cycle either, and
/// its cluster state (the `cluster` folder) reaches no face: REST, gRPC, the management and
/// control APIs and the server call the cluster; it answers with values and calls none back.
#[test]
fn the_emulators_modules_form_no_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/milvus-sim/src");
    let graph = graph(&sources(&root));
    assert!(
        graph.len() > 30,
        "read the emulator's modules: {:?}",
        graph.keys()
    );
    // Uses of each kind: a name the cluster re-exports from a child, `super::` between the
    // cluster's children, a `use` tree of bare modules, a path inside a call.
    assert!(graph["rest"].contains("cluster::import"), "{graph:?}");
    assert!(
        graph["cluster::mirror"].contains("cluster::import"),
        "{graph:?}"
    );
    assert!(graph["server"].contains("management"), "{graph:?}");
    assert!(graph["grpc"].contains("query"), "{graph:?}");
    assert_acyclic(&graph, "the emulator's modules");
    let folders = folders(&graph);
    assert_acyclic(&folders, "the emulator's folders");
    let faces = ["rest", "grpc", "query", "management", "control", "server"];
    let reached = reachable(&folders, "cluster");
    let called: Vec<_> = faces.iter().filter(|f| reached.contains(**f)).collect();
    assert!(called.is_empty(), "the cluster reaches faces {called:?}");
}

/// The planted crate's sources with `b`'s code replaced.
fn planted(b: &str) -> Sources {
    Sources::from([
        (String::new(), "pub mod a;\npub mod b;\n".to_owned()),
        (
            "a".to_owned(),
            "mod inner;\npub use inner::Thing;\nuse crate::b::Other;\n".to_owned(),
        ),
        ("a::inner".to_owned(), "pub struct Thing;\n".to_owned()),
        ("b".to_owned(), format!("pub struct Other;\n{b}")),
    ])
}

/// A cycle planted in sources of the crate's shape is found, through a re-export too.
#[test]
fn a_planted_cycle_is_found() {
    let sources = planted("fn f() -> crate::a::Thing { todo!() }\n");
    let uses = graph(&sources);
    assert_eq!(uses["b"], BTreeSet::from(["a::inner".to_owned()]));
    assert!(cycles(&uses).is_empty(), "{uses:?}");
    let mut looped = sources.clone();
    looped.insert(
        "a::inner".to_owned(),
        "pub struct Thing;\nuse super::super::b::Other;\n".to_owned(),
    );
    assert_eq!(
        cycles(&graph(&looped)),
        ["a::inner → b → a::inner", "b → a::inner → b"]
    );
}

/// Each way of writing a use is read: in a call's parentheses, in a nested `use` tree over
/// several lines, through `self`; visibility is not a use.
#[test]
fn every_path_form_is_read() {
    for (how, b) in [
        ("in parentheses", "fn f() { drop(crate::a::Thing); }\n"),
        (
            "in nested braces over lines",
            "use crate::{\n    a::{\n        Thing,\n    },\n};\n",
        ),
        (
            "in a generic",
            "fn f() -> Vec<crate::a::Thing> { todo!() }\n",
        ),
        ("after a reference", "fn f(_: &crate::a::Thing) {}\n"),
    ] {
        let uses = graph(&planted(b));
        assert_eq!(
            uses["b"],
            BTreeSet::from(["a::inner".to_owned()]),
            "{how}: {b}"
        );
    }
    let uses = graph(&planted(
        "pub(crate) struct Other2;\npub(super) fn g() {}\n",
    ));
    assert!(uses["b"].is_empty(), "visibility is not a use: {uses:?}");
}

/// A folder that uses another folder which uses it back, through modules that form no
/// cycle of their own, is found by the folder-level pass.
#[test]
fn a_planted_folder_cycle_is_found() {
    let sources = Sources::from([
        (String::new(), "pub mod high;\npub mod low;\n".to_owned()),
        ("high".to_owned(), "mod x;\nmod y;\n".to_owned()),
        ("high::x".to_owned(), "use crate::low::p::P;\n".to_owned()),
        ("high::y".to_owned(), "pub struct Y;\n".to_owned()),
        ("low".to_owned(), "pub mod p;\npub mod q;\n".to_owned()),
        ("low::p".to_owned(), "pub struct P;\n".to_owned()),
        (
            "low::q".to_owned(),
            "fn f(_: crate::high::y::Y) {}\n".to_owned(),
        ),
    ]);
    let modules = graph(&sources);
    assert!(cycles(&modules).is_empty(), "{modules:?}");
    assert_eq!(
        cycles(&folders(&modules)),
        ["high → low → high", "low → high → low"]
    );
}
