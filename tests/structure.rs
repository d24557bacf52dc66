//! The shape of the crate, checked: the top-level modules of src/ import one
//! way (no cycle among them), and no source file grows past 800 lines (tests
//! included): a file that long holds more than one idea.
//!
//! The import graph is read from the source text: every `crate::name` path
//! (also inside `use crate::{a, b::c}`) in a module's files is an edge from that
//! module to `name`. Comments and test code (`#[cfg(test)] mod x { .. }` blocks
//! and files named `tests.rs`) are left out: tests may assemble the layers above
//! the code they test. `main.rs` and `cli/` (the binary) sit on top of
//! everything and are not part of the library's graph.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 800;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn src_files() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    rust_files(&root, &mut paths);
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let rel = p
                .strip_prefix(&root)
                .expect("under src/")
                .to_string_lossy()
                .replace('\\', "/");
            (rel, fs::read_to_string(&p).expect("a readable source file"))
        })
        .collect()
}

/// The text without `//` comments (string literals holding `//` are kept).
fn without_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let mut in_string = false;
        let mut escaped = false;
        let mut cut = line.len();
        let bytes = line.as_bytes();
        for (i, &b) in bytes.iter().enumerate() {
            if in_string {
                match (escaped, b) {
                    (true, _) => escaped = false,
                    (false, b'\\') => escaped = true,
                    (false, b'"') => in_string = false,
                    _ => {}
                }
            } else if b == b'"' {
                in_string = true;
            } else if b == b'/' && bytes.get(i + 1) == Some(&b'/') {
                cut = i;
                break;
            }
        }
        out.push_str(&line[..cut]);
        out.push('\n');
    }
    out
}

/// The text without `#[cfg(test)] mod name { .. }` blocks.
fn without_test_modules(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let trimmed = after.trim_start();
        let is_inline_module = trimmed.starts_with("mod ")
            && trimmed
                .find(['{', ';'])
                .is_some_and(|i| trimmed.as_bytes()[i] == b'{');
        if !is_inline_module {
            rest = after;
            continue;
        }
        let open = after.find('{').expect("a module body");
        let mut depth = 0usize;
        let mut end = after.len();
        for (i, c) in after[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The top-level modules a text names through `crate::`.
fn named_modules(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(is_ident) {
            continue; // e.g. `kcrate::`
        }
        if let Some(group) = rest.strip_prefix('{') {
            // `crate::{a, b::c, d::{e, f}}`: the names at depth one.
            let mut depth = 1;
            let mut at_name = true;
            let mut name = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => at_name = true,
                    c if depth == 1 && at_name && is_ident(c) => name.push(c),
                    c if depth == 1 && at_name && !c.is_whitespace() => {
                        at_name = false;
                        if !name.is_empty() {
                            names.insert(std::mem::take(&mut name));
                        }
                    }
                    _ => {}
                }
                if c == ',' && !name.is_empty() {
                    names.insert(std::mem::take(&mut name));
                }
            }
            if !name.is_empty() {
                names.insert(name);
            }
        } else {
            let name: String = rest.chars().take_while(|&c| is_ident(c)).collect();
            if !name.is_empty() {
                names.insert(name);
            }
        }
    }
    names
}

/// module -> module -> the files that make the edge.
type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

fn import_graph() -> Graph {
    let mut graph = Graph::new();
    for (rel, text) in src_files() {
        let top = rel
            .split('/')
            .next()
            .expect("a path")
            .trim_end_matches(".rs")
            .to_owned();
        if matches!(top.as_str(), "lib" | "main" | "cli") || rel.ends_with("tests.rs") {
            continue;
        }
        let code = without_test_modules(&without_comments(&text));
        let edges = graph.entry(top.clone()).or_default();
        for name in named_modules(&code) {
            if name != top && name != "self" && name != "super" {
                edges.entry(name).or_default().insert(rel.clone());
            }
        }
    }
    graph
}

/// A cycle in the graph, as the modules along it, if there is one.
fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        node: &str,
        graph: &Graph,
        marks: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match marks.get(node) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let from = path.iter().position(|n| n == node).expect("on the path");
                let mut cycle = path[from..].to_vec();
                cycle.push(node.to_owned());
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(node.to_owned(), Mark::Open);
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flat_map(|e| e.keys()) {
            if let Some(cycle) = visit(next, graph, marks, path) {
                return Some(cycle);
            }
        }
        path.pop();
        marks.insert(node.to_owned(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for node in graph.keys() {
        if let Some(cycle) = visit(node, graph, &mut marks, &mut Vec::new()) {
            return Some(cycle);
        }
    }
    None
}

#[test]
fn the_top_level_modules_import_one_way() {
    let graph = import_graph();
    assert!(
        graph.len() >= 15 && graph["handlers"].contains_key("protocol"),
        "the graph was read: {graph:?}"
    );
    if let Some(cycle) = find_cycle(&graph) {
        let mut why = String::new();
        for pair in cycle.windows(2) {
            let files: Vec<&str> = graph[&pair[0]][&pair[1]]
                .iter()
                .map(String::as_str)
                .collect();
            why.push_str(&format!(
                "\n  {} -> {}: {}",
                pair[0],
                pair[1],
                files.join(", ")
            ));
        }
        panic!(
            "the modules of src/ import each other in a circle: {}{why}\n\
             (ARCHITECTURE.md says which layer may import which)",
            cycle.join(" -> ")
        );
    }
}

/// The files of one directory module (neither its mod.rs nor tests.rs) and
/// the siblings each names, through `super::` or the module's full path.
fn sibling_graphs() -> BTreeMap<String, Graph> {
    let files = src_files();
    let mut graphs: BTreeMap<String, Graph> = BTreeMap::new();
    for (rel, text) in &files {
        let Some((dir, file)) = rel.rsplit_once('/') else {
            continue;
        };
        let stem = file.trim_end_matches(".rs");
        if matches!(stem, "mod" | "tests") || dir.starts_with("cli") {
            continue;
        }
        let siblings: BTreeSet<String> = files
            .iter()
            .filter_map(|(other, _)| {
                let (d, f) = other.rsplit_once('/')?;
                let s = f.trim_end_matches(".rs");
                (d == dir && !matches!(s, "mod" | "tests") && s != stem).then(|| s.to_owned())
            })
            .collect();
        let code = without_test_modules(&without_comments(text));
        let full = format!("crate::{}::", dir.replace('/', "::"));
        let code = code.replace(&full, "crate::").replace("super::", "crate::");
        let edges = graphs
            .entry(dir.to_owned())
            .or_default()
            .entry(stem.to_owned())
            .or_default();
        for name in named_modules(&code)
            .into_iter()
            .filter(|n| siblings.contains(n))
        {
            edges.entry(name).or_default().insert(rel.clone());
        }
    }
    graphs
}

#[test]
fn the_files_of_a_module_import_one_way() {
    let graphs = sibling_graphs();
    assert!(
        graphs["upstream"]["configs"].contains_key("cluster"),
        "the graphs were read: {:?}",
        graphs["upstream"]
    );
    let circles: Vec<String> = graphs
        .iter()
        .filter_map(|(dir, graph)| Some(format!("{dir}: {}", find_cycle(graph)?.join(" -> "))))
        .collect();
    assert!(
        circles.is_empty(),
        "files of one module import each other in a circle (move what both need into a third \
         file, or into the one the other already imports):\n  {}",
        circles.join("\n  ")
    );
}

#[test]
fn architecture_md_names_every_top_level_module() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let mut missing = Vec::new();
    for entry in fs::read_dir(root.join("src")).expect("src/") {
        let name = entry
            .expect("an entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        let module = name.trim_end_matches(".rs");
        if matches!(module, "lib" | "main") {
            continue;
        }
        let named = [
            format!("`{module}`"),
            format!("`{module}/`"),
            format!("`{module}.rs`"),
        ]
        .iter()
        .any(|n| page.contains(n.as_str()))
            || page.contains(&format!(" {module}/ "));
        if !named {
            missing.push(module.to_owned());
        }
    }
    missing.sort();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md does not name these modules of src/: {missing:?}"
    );
}

#[test]
fn no_source_file_is_over_800_lines() {
    let files = src_files();
    assert!(files.len() > 50, "src/ was read: {} files", files.len());
    let long: Vec<String> = files
        .iter()
        .map(|(rel, text)| (rel, text.lines().count()))
        .filter(|(_, lines)| *lines > MAX_LINES)
        .map(|(rel, lines)| format!("{rel}: {lines} lines"))
        .collect();
    assert!(
        long.is_empty(),
        "split these files along their seams (at most {MAX_LINES} lines each):\n  {}",
        long.join("\n  ")
    );
}

#[test]
fn the_cycle_check_sees_cycles_and_grouped_imports() {
    let text = "use crate::{alpha, beta::{x, y}, gamma::z};\n// crate::comment\n\
                let s = \"// not a comment\"; crate::delta::f();\n\
                #[cfg(test)]\nmod tests { use crate::epsilon; }\nfn after() { crate::zeta::g() }";
    let code = without_test_modules(&without_comments(text));
    let names: Vec<String> = named_modules(&code).into_iter().collect();
    assert_eq!(names, ["alpha", "beta", "delta", "gamma", "zeta"]);

    let mut graph = Graph::new();
    for (from, to) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
        graph
            .entry(from.into())
            .or_default()
            .entry(to.into())
            .or_default()
            .insert(format!("{from}.rs"));
    }
    assert_eq!(
        find_cycle(&graph),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    graph.get_mut("c").unwrap().remove("a");
    assert_eq!(find_cycle(&graph), None);
}
