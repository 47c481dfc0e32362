//! The module map in ARCHITECTURE.md is the rule, and this test keeps the code to it (issues 17
//! and 32), as rust-analyzer's tidy tests keep its docs true.
//!
//! - The crates (its "Crates" table): each crate's workspace dependencies must be edges the table
//!   allows, the table a ladder, and every workspace member a row. The core's dependency tree has
//!   no front end's crate (tokio, rmcp, ratatui, crossterm, clap), only `sheepdog-sys` depends on
//!   libc, and only `crates/sys` has `unsafe` (every other crate root forbids it).
//! - Inside the core (its "The core's ladder" table): every `crate::` reference of every module
//!   of `crates/core/src` must be an edge the table allows; the table itself must be a ladder
//!   (each row may use only rows below it); and every module must have a row, and every row a
//!   module. A failure names the file and line.
//!
//! A table is read as written: the first column's backticked names (`registry.rs`, `manager/`,
//! `sheepdog-core`) are the row's units; the last column is backticked names, or
//! `everything below`, `nothing`, `libc`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The core's `crate::` names that are not modules of its own: `sys` is the `sheepdog-sys`
/// crate (`pub(crate) use sheepdog_sys as sys;` in its lib.rs), with a row in the ladder.
const EXTERNAL: &[&str] = &["sys"];

/// The heading of the crates' table and of the core's ladder in ARCHITECTURE.md.
const CRATES: &str = "### Crates";
const LADDER: &str = "### The core's ladder";

/// Where the core's modules are, from the workspace root.
const CORE_SRC: &str = "crates/core/src";

/// Crates the core must not depend on, even through another crate: the front ends' own.
const FRONT_END_CRATES: &[&str] = &["tokio", "rmcp", "ratatui", "crossterm", "clap"];

#[derive(Debug)]
struct Row {
    modules: Vec<String>,
    may_use: MayUse,
    line: usize,
}

#[derive(Debug, Clone)]
enum MayUse {
    Below,
    Named(BTreeSet<String>),
}

#[derive(Debug, PartialEq, Eq)]
struct Edge {
    from: String,
    to: String,
    file: String,
    line: usize,
}

fn backticked(cell: &str) -> Vec<String> {
    cell.split('`').skip(1).step_by(2).map(unit_of_name).collect()
}

/// `registry.rs` -> `registry`, `manager/` -> `manager`, `main.rs` -> `main`.
fn unit_of_name(name: &str) -> String {
    name.trim().trim_end_matches('/').trim_end_matches(".rs").to_string()
}

/// The rows of the table under `heading` (up to the next heading), in order, with their line
/// numbers.
fn read_map(text: &str, heading: &str) -> Result<Vec<Row>, String> {
    let start = text
        .lines()
        .scan(0, |at, l| {
            let here = *at;
            *at += l.len() + 1;
            Some((here, l))
        })
        .find(|(_, l)| l.trim_end() == heading)
        .map(|(at, _)| at)
        .ok_or(format!("ARCHITECTURE.md has no \"{heading}\" section"))?;
    let first_line = text[..start].lines().count() + 1;
    let mut rows = Vec::new();
    let mut in_table = false;
    for (i, line) in text[start..].lines().enumerate().skip(1) {
        let line_no = first_line + i;
        if line.starts_with('#') {
            break;
        }
        if !line.starts_with('|') {
            if in_table {
                break;
            }
            continue;
        }
        let cells: Vec<&str> = line.trim().trim_matches('|').split('|').collect();
        if !in_table {
            in_table = true; // the header row
            continue;
        }
        if cells.iter().all(|c| c.trim().chars().all(|ch| ch == '-' || ch == ':')) {
            continue; // the separator
        }
        let (Some(first), Some(last)) = (cells.first(), cells.last()) else {
            return Err(format!("ARCHITECTURE.md:{line_no}: a table row without cells"));
        };
        let modules = backticked(first);
        if modules.is_empty() {
            return Err(format!("ARCHITECTURE.md:{line_no}: the first cell names no module in backticks"));
        }
        let last_text = last.trim();
        let may_use = match last_text {
            "everything below" => MayUse::Below,
            "nothing" | "libc" => MayUse::Named(BTreeSet::new()),
            _ => {
                let names = backticked(last_text);
                let rest: String = last_text.split('`').step_by(2).collect::<String>();
                if names.is_empty() || rest.chars().any(|c| !(c == ',' || c.is_whitespace())) {
                    return Err(format!(
                        "ARCHITECTURE.md:{line_no}: \"may use\" must be backticked names separated by commas, \
                         or `everything below`, `nothing`, `libc`: {last_text:?}"
                    ));
                }
                MayUse::Named(names.into_iter().collect())
            }
        };
        rows.push(Row { modules, may_use, line: line_no });
    }
    if rows.is_empty() {
        return Err(format!("ARCHITECTURE.md's \"{heading}\" has no table rows"));
    }
    Ok(rows)
}

/// Replaces comments, string and char literals with spaces (newlines kept), so that only code
/// is searched and line numbers stay true.
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let blank = |out: &mut Vec<u8>, s: &[u8]| out.extend(s.iter().map(|&c| if c == b'\n' { b'\n' } else { b' ' }));
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        let ident_before = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        if rest.starts_with(b"//") {
            let end = rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest.starts_with(b"/*") {
            let mut depth = 0;
            let mut j = 0;
            while j < rest.len() {
                if rest[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if rest[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, &rest[..j]);
            i += j;
        } else if !ident_before && (rest.starts_with(b"r\"") || rest.starts_with(b"r#") || rest.starts_with(b"br")) {
            let skip = if rest[0] == b'b' { 2 } else { 1 };
            let hashes = rest[skip..].iter().take_while(|&&c| c == b'#').count();
            if rest.get(skip + hashes) != Some(&b'"') {
                out.push(b[i]);
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
            let body = skip + hashes + 1;
            let end = rest[body..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(rest.len(), |p| body + p + close.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest[0] == b'"' || (!ident_before && rest.starts_with(b"b\"")) {
            let mut j = if rest[0] == b'b' { 2 } else { 1 };
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest[0] == b'\'' {
            // A char literal ('x', '\n', '\u{1F600}', '"'), else a lifetime ('a).
            let len = if rest.get(1) == Some(&b'\\') {
                rest[2..].iter().position(|&c| c == b'\'').map(|p| p + 3)
            } else {
                let ch = std::str::from_utf8(&rest[1..rest.len().min(6)])
                    .ok()
                    .or_else(|| std::str::from_utf8(&rest[1..rest.len().min(5)]).ok())
                    .or_else(|| std::str::from_utf8(&rest[1..rest.len().min(4)]).ok())
                    .or_else(|| std::str::from_utf8(&rest[1..rest.len().min(3)]).ok())
                    .and_then(|s| s.chars().next());
                ch.map(char::len_utf8).filter(|n| rest.get(1 + n) == Some(&b'\'')).map(|n| n + 2)
            };
            match len {
                Some(n) => {
                    blank(&mut out, &rest[..n]);
                    i += n;
                }
                None => {
                    out.push(b'\'');
                    i += 1;
                }
            }
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The first segment of each path that follows `root::` in `code` (`use crate::{a::B, c}` gives
/// `a` and `c`), with its line.
fn references(code: &str, root: &str) -> Vec<(String, usize)> {
    let b = code.as_bytes();
    let needle = format!("{root}::");
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find(&needle) {
        let at = from + at;
        from = at + needle.len();
        if at > 0 && (is_ident(b[at - 1]) || b[at - 1] == b'$' || b[at - 1] == b':') {
            continue;
        }
        let line = code[..at].matches('\n').count() + 1;
        let mut j = from;
        while j < b.len() && b[j].is_ascii_whitespace() {
            j += 1;
        }
        if j < b.len() && b[j] == b'{' {
            // A group: split its top level at commas.
            let mut depth = 0;
            let mut item_start = j + 1;
            let mut k = j;
            while k < b.len() {
                match b[k] {
                    b'{' => depth += 1,
                    b'}' | b',' if depth == 1 => {
                        let item = code[item_start..k].trim();
                        let name: String =
                            item.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                        if !name.is_empty() && name != "self" {
                            found.push((name, line + code[j..item_start].matches('\n').count()));
                        }
                        item_start = k + 1;
                        if b[k] == b'}' {
                            break;
                        }
                    }
                    b'}' => depth -= 1,
                    _ => {}
                }
                k += 1;
            }
        } else {
            let name: String = code[j..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if !name.is_empty() {
                found.push((name, line));
            }
        }
    }
    found
}

/// The unit a source file belongs to: `registry.rs` and `manager/stop.rs` -> `registry`,
/// `manager`. `None` for the crate root.
fn unit_of_file(rel: &Path) -> Option<String> {
    let mut parts = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned());
    let first = parts.next()?;
    if first == "lib.rs" {
        return None;
    }
    Some(unit_of_name(&first))
}

/// Every `.rs` file under `dir`, relative to it, sorted.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("reading {}: {e}", d.display())) {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|x| x == "rs") {
                out.push(path.strip_prefix(dir).expect("below src").to_path_buf());
            }
        }
    }
    out.sort();
    out
}

/// The edges between units in `files` (relative path, text): a module's `crate::X`. References
/// inside a unit (to itself) are not edges.
fn edges(files: &[(PathBuf, String)]) -> Vec<Edge> {
    let mut out = Vec::new();
    for (rel, text) in files {
        let Some(unit) = unit_of_file(rel) else { continue };
        for (to, line) in references(&code_only(text), "crate") {
            if to != unit {
                out.push(Edge { from: unit.clone(), to, file: format!("{CORE_SRC}/{}", rel.display()), line });
            }
        }
    }
    out
}

/// Everything wrong between the map and the code, one line each.
fn violations(rows: &[Row], files: &[(PathBuf, String)]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut row_of: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, r) in rows.iter().enumerate() {
        for m in &r.modules {
            if row_of.insert(m, i).is_some() {
                problems.push(format!("ARCHITECTURE.md:{}: `{m}` has two rows in the module map", r.line));
            }
        }
    }
    let allowed = |i: usize| -> BTreeSet<String> {
        match &rows[i].may_use {
            // A layer's modules may use each other (without a cycle, checked below) and the
            // layers under it.
            MayUse::Below => rows[i..].iter().flat_map(|r| r.modules.iter().cloned()).collect(),
            MayUse::Named(n) => n.clone(),
        }
    };
    // The table is a ladder: a row may name only modules of rows below it.
    for (i, r) in rows.iter().enumerate() {
        if let MayUse::Named(names) = &r.may_use {
            for n in names {
                match row_of.get(n.as_str()) {
                    None => {
                        problems.push(format!("ARCHITECTURE.md:{}: \"may use\" names `{n}`, which has no row", r.line))
                    }
                    Some(&j) if j <= i => problems.push(format!(
                        "ARCHITECTURE.md:{}: `{}` may use `{n}`, which is not below it: the map must be a ladder",
                        r.line, r.modules[0]
                    )),
                    _ => {}
                }
            }
        }
    }
    // Every module has a row, and every row a module.
    let mut units: BTreeSet<String> = files.iter().filter_map(|(rel, _)| unit_of_file(rel)).collect();
    for u in &units {
        if !row_of.contains_key(u.as_str()) {
            problems.push(format!("{CORE_SRC}/{u}: a module the map in ARCHITECTURE.md does not list"));
        }
    }
    units.extend(EXTERNAL.iter().map(|e| e.to_string()));
    for (m, &i) in &row_of {
        if !units.contains(*m) {
            problems.push(format!("ARCHITECTURE.md:{}: `{m}` is in the map but not in {CORE_SRC}/", rows[i].line));
        }
    }
    let edges = edges(files);
    for e in &edges {
        let Some(&i) = row_of.get(e.from.as_str()) else { continue };
        if !allowed(i).contains(&e.to) {
            problems.push(format!(
                "{}:{}: `{}` uses `{}`, an edge ARCHITECTURE.md's module map does not allow (row at line {})",
                e.file, e.line, e.from, e.to, rows[i].line
            ));
        }
    }
    if let Some(cycle) = cycle(&edges) {
        problems.push(format!("a cycle of modules (each uses the next): {}", cycle.join(" -> ")));
    }
    problems
}

/// A cycle in the graph of `edges`, as its units in order (the first repeated at the end), or
/// `None`: the rows of a layer may use each other, but never in a circle.
fn cycle(edges: &[Edge]) -> Option<Vec<String>> {
    let mut next: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for e in edges {
        next.entry(e.from.as_str()).or_default().insert(e.to.as_str());
    }
    // Depth-first, with the path on a stack: an edge back into the path closes a cycle.
    fn visit<'a>(
        at: &'a str,
        next: &BTreeMap<&'a str, BTreeSet<&'a str>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(p) = path.iter().position(|u| *u == at) {
            let mut c: Vec<String> = path[p..].iter().map(|u| u.to_string()).collect();
            c.push(at.to_string());
            return Some(c);
        }
        if !done.insert(at) {
            return None;
        }
        path.push(at);
        for to in next.get(at).into_iter().flatten() {
            if let Some(c) = visit(to, next, path, done) {
                return Some(c);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    next.keys().find_map(|from| visit(from, &next, &mut Vec::new(), &mut done))
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read_tree() -> (Vec<Row>, Vec<(PathBuf, String)>) {
    let map = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let rows = read_map(&map, LADDER).unwrap_or_else(|e| panic!("{e}"));
    let src = root().join(CORE_SRC);
    let files = sources(&src)
        .into_iter()
        .map(|rel| {
            let text = std::fs::read_to_string(src.join(&rel)).expect("a source file");
            (rel, text)
        })
        .collect();
    (rows, files)
}

#[test]
fn every_dependency_points_down_the_module_map() {
    let (rows, files) = read_tree();
    let problems = violations(&rows, &files);
    assert!(problems.is_empty(), "the code and ARCHITECTURE.md's module map disagree:\n{}", problems.join("\n"));
}

#[test]
fn one_forbidden_use_turns_the_check_red_naming_file_and_line() {
    let (rows, mut files) = read_tree();
    // `registry` sits below `manager`: a `use` of it is the kind of edge that made the circle.
    let (_, text) = files.iter_mut().find(|(rel, _)| rel == Path::new("registry.rs")).expect("registry.rs");
    let line = text.lines().count() + 1;
    text.push_str("\nuse crate::manager;\n");
    let problems = violations(&rows, &files);
    let want = format!("{CORE_SRC}/registry.rs:{}: `registry` uses `manager`", line + 1);
    assert!(problems.iter().any(|p| p.starts_with(&want)), "wanted {want:?} in {problems:#?}");
}

#[test]
fn references_are_read_from_code_only_and_through_groups() {
    let src = "use crate::{a::{self, B}, c as d};\n// crate::e in a comment\nlet s = \"crate::f\";\nlet c = '\"'; crate::g::h();\nfn x<'a>(y: &'a str) { $crate::i; }\nlet r = r#\"crate::j\"#;";
    let got: Vec<(String, usize)> = references(&code_only(src), "crate");
    let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["a", "c", "g"], "{got:?}");
    assert_eq!(got[2].1, 4, "line numbers survive the stripping");
}

#[test]
fn modules_of_one_layer_may_use_each_other_but_not_in_a_circle() {
    let map = "### The core's ladder\n\n| module | what | may use |\n|---|---|---|\n\
               | `a.rs`, `b.rs` | x | everything below |\n| `c.rs` | y | nothing |\n";
    let rows = read_map(map, LADDER).expect("a table");
    let file = |name: &str, text: &str| (PathBuf::from(name), text.to_string());
    let fine = vec![file("a.rs", "use crate::b;"), file("b.rs", "use crate::c;"), file("c.rs", "")];
    assert_eq!(violations(&rows, &fine), Vec::<String>::new());
    let circle = vec![file("a.rs", "use crate::b;"), file("b.rs", "use crate::a;"), file("c.rs", "")];
    let problems = violations(&rows, &circle);
    assert!(
        problems.iter().any(|p| p.contains("a cycle of modules (each uses the next): a -> b -> a")),
        "{problems:#?}"
    );
}

#[test]
fn the_map_must_be_a_ladder() {
    let map = "### The core's ladder\n\n| module | what | may use |\n|---|---|---|\n| `a.rs` | x | `b` |\n| `b.rs` | y | `a` |\n";
    let rows = read_map(map, LADDER).expect("a table");
    let files = vec![(PathBuf::from("a.rs"), String::new()), (PathBuf::from("b.rs"), String::new())];
    let problems = violations(&rows, &files);
    assert!(problems.iter().any(|p| p.contains("`b` may use `a`, which is not below it")), "{problems:#?}");
}

/// One package of the workspace (`cargo metadata`): its name, its directory (from the root), and
/// the packages it depends on outside tests (normal and build dependencies).
struct Package {
    name: String,
    dir: PathBuf,
    deps: BTreeSet<String>,
}

fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

fn workspace() -> Vec<Package> {
    let out = cargo()
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(root())
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    let root = root().canonicalize().expect("the workspace root");
    let mut packages = Vec::new();
    for p in doc["packages"].as_array().expect("packages") {
        let manifest = PathBuf::from(p["manifest_path"].as_str().expect("manifest_path"));
        let dir = manifest.parent().expect("a manifest's directory").strip_prefix(&root).expect("inside").to_path_buf();
        let deps = p["dependencies"]
            .as_array()
            .expect("dependencies")
            .iter()
            .filter(|d| d["kind"].as_str() != Some("dev"))
            .filter_map(|d| d["name"].as_str().map(String::from))
            .collect();
        packages.push(Package { name: p["name"].as_str().expect("name").to_string(), dir, deps });
    }
    packages
}

/// Everything wrong between the crates' table and the workspace's manifests, one line each.
fn crate_violations(rows: &[Row], packages: &[Package]) -> Vec<String> {
    let mut problems = Vec::new();
    let names: BTreeSet<&str> = packages.iter().map(|p| p.name.as_str()).collect();
    let row_of: BTreeMap<&str, usize> =
        rows.iter().enumerate().flat_map(|(i, r)| r.modules.iter().map(move |m| (m.as_str(), i))).collect();
    for (i, r) in rows.iter().enumerate() {
        if let MayUse::Named(allowed) = &r.may_use {
            for n in allowed {
                match row_of.get(n.as_str()) {
                    Some(&j) if j > i => {}
                    Some(_) => problems.push(format!(
                        "ARCHITECTURE.md:{}: `{}` may use `{n}`, which is not below it: the crates must be a ladder",
                        r.line, r.modules[0]
                    )),
                    None => problems.push(format!("ARCHITECTURE.md:{}: `{n}` is not a crate of the table", r.line)),
                }
            }
        }
    }
    for p in packages {
        let Some(&i) = row_of.get(p.name.as_str()) else {
            problems.push(format!(
                "{}/Cargo.toml: `{}` has no row in ARCHITECTURE.md's crates",
                p.dir.display(),
                p.name
            ));
            continue;
        };
        let allowed: BTreeSet<String> = match &rows[i].may_use {
            MayUse::Below => rows[i + 1..].iter().flat_map(|r| r.modules.iter().cloned()).collect(),
            MayUse::Named(n) => n.clone(),
        };
        for d in p.deps.iter().filter(|d| names.contains(d.as_str())) {
            if !allowed.contains(d) {
                problems.push(format!(
                    "{}/Cargo.toml: `{}` depends on `{d}`, an edge ARCHITECTURE.md's crates do not allow (row at line {})",
                    p.dir.display(),
                    p.name,
                    rows[i].line
                ));
            }
        }
        if p.name != "sheepdog-sys" && p.deps.contains("libc") {
            problems.push(format!(
                "{}/Cargo.toml: `{}` depends on libc: only sheepdog-sys may",
                p.dir.display(),
                p.name
            ));
        }
    }
    for (m, &i) in &row_of {
        if !names.contains(m) {
            problems.push(format!("ARCHITECTURE.md:{}: `{m}` is not a package of the workspace", rows[i].line));
        }
    }
    problems
}

#[test]
fn every_crate_depends_only_on_crates_below_it() {
    let map = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let rows = read_map(&map, CRATES).unwrap_or_else(|e| panic!("{e}"));
    let problems = crate_violations(&rows, &workspace());
    assert!(problems.is_empty(), "the workspace and ARCHITECTURE.md's crates disagree:\n{}", problems.join("\n"));
}

#[test]
fn one_upward_crate_dependency_turns_the_check_red() {
    let map = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let rows = read_map(&map, CRATES).unwrap_or_else(|e| panic!("{e}"));
    let mut packages = workspace();
    let core = packages.iter_mut().find(|p| p.name == "sheepdog-core").expect("sheepdog-core");
    core.deps.insert("sheepdog-top".into());
    core.deps.insert("libc".into());
    let problems = crate_violations(&rows, &packages);
    assert!(
        problems.iter().any(|p| p.starts_with("crates/core/Cargo.toml: `sheepdog-core` depends on `sheepdog-top`")),
        "{problems:#?}"
    );
    assert!(problems.iter().any(|p| p.contains("`sheepdog-core` depends on libc")), "{problems:#?}");
}

/// Issue 32: anyone who uses the library from Rust compiles none of the front ends' crates.
#[test]
fn the_core_links_no_front_end_crate() {
    let out = cargo()
        .args(["tree", "-p", "sheepdog-core", "-e", "normal", "--prefix", "none", "--offline"])
        .current_dir(root())
        .output()
        .expect("cargo tree runs");
    assert!(out.status.success(), "cargo tree: {}", String::from_utf8_lossy(&out.stderr));
    let tree = String::from_utf8_lossy(&out.stdout);
    let crates: BTreeSet<&str> = tree.lines().filter_map(|l| l.split_whitespace().next()).collect();
    assert!(crates.contains("sheepdog-sys"), "{tree}");
    let front: Vec<&&str> = FRONT_END_CRATES.iter().filter(|c| crates.contains(**c)).collect();
    assert!(front.is_empty(), "sheepdog-core depends on {front:?}:\n{tree}");
}

/// The sources of every crate but sheepdog-sys, the tests and the benches: no `unsafe` in their
/// code, and every crate root (a lib.rs, a binary's main) forbids it.
#[test]
fn unsafe_lives_in_the_sys_crate_alone() {
    let mut problems = Vec::new();
    for p in workspace().iter().filter(|p| p.name != "sheepdog-sys") {
        let src = root().join(&p.dir).join("src");
        for rel in sources(&src) {
            let file = Path::new(&p.dir).join("src").join(&rel);
            let text = std::fs::read_to_string(src.join(&rel)).expect("a source file");
            let is_root = rel == Path::new("lib.rs") || rel == Path::new("main.rs") || rel.starts_with("bin");
            if is_root && !text.contains("#![forbid(unsafe_code)]") {
                problems.push(format!("{}: a crate root without #![forbid(unsafe_code)]", file.display()));
            }
            problems.extend(unsafe_lines(&text).into_iter().map(|l| format!("{}:{l}: unsafe", file.display())));
        }
    }
    for dir in ["tests", "benches"] {
        for rel in sources(&root().join(dir)) {
            let text = std::fs::read_to_string(root().join(dir).join(&rel)).expect("a source file");
            problems.extend(unsafe_lines(&text).into_iter().map(|l| format!("{dir}/{}:{l}: unsafe", rel.display())));
        }
    }
    assert!(problems.is_empty(), "unsafe outside crates/sys:\n{}", problems.join("\n"));
    assert_eq!(unsafe_lines("// unsafe\nlet s = \"unsafe\";\nunsafe { x() }"), [3], "the check sees code only");
}

/// The lines of `text` whose code (not comments or strings) has the word `unsafe`.
fn unsafe_lines(text: &str) -> Vec<usize> {
    let code = code_only(text);
    code.lines()
        .enumerate()
        .filter(|(_, l)| {
            l.match_indices("unsafe").any(|(at, _)| {
                let b = l.as_bytes();
                (at == 0 || !is_ident(b[at - 1])) && b.get(at + 6).is_none_or(|&c| !is_ident(c))
            })
        })
        .map(|(i, _)| i + 1)
        .collect()
}

/// Issue 32: `use super::*` hid the `manager/` edges from this test and from readers; every
/// module names what it takes from its parent.
#[test]
fn no_module_imports_all_of_its_parent() {
    let mut problems = Vec::new();
    for p in workspace() {
        let src = root().join(&p.dir).join("src");
        for rel in sources(&src) {
            let code = code_only(&std::fs::read_to_string(src.join(&rel)).expect("a source file"));
            for (i, l) in code.lines().enumerate() {
                if l.split_whitespace().collect::<String>().contains("usesuper::*") {
                    problems.push(format!("{}:{}: use super::*", p.dir.join("src").join(&rel).display(), i + 1));
                }
            }
        }
    }
    assert!(problems.is_empty(), "glob imports of a parent module:\n{}", problems.join("\n"));
}
