//! The documents are kept true by `cargo test`, as rust-analyzer's tidy tests keep its docs:
//!
//! - Every command a reader is shown (README.md, docs/*.md) runs here. A ```` ```console ````
//!   block is a session: `$ ` lines are commands (a trailing `\` continues one), the lines after
//!   a command are its whole output (stdout and stderr as one stream), and every command must
//!   exit 0 (a page that shows a failure writes `; echo $?`). In the expected output `...`
//!   stands for any text within a line, and a line that is only `...` for any number of lines;
//!   runs of spaces compare as one (tables are aligned to their contents). The blocks of one
//!   page run in order in one bash, in a temp dir, each session with a fresh state dir of its
//!   own (`SHEEPDOG_STATE_DIR`), and the built binaries first on `PATH`; the ports `8000` to `8009`
//!   are replaced by free ports. A command that cannot run in a test (a server that runs until
//!   Ctrl-C, an install from a registry, the test suite itself) is in a block whose info string
//!   says why: ```` ```sh norun: REASON ````. Any other shell block, or a `$ ` line outside a
//!   `console` block, fails `command_blocks_are_run_or_say_why_not`.
//! - A ```` ```mcp ```` block is a session with the real `sheepdog mcp`, replayed call by call
//!   (see "MCP sessions" below).
//! - docs/reference.md's generated parts (every subcommand's `--help`, every field of every
//!   document in `schema/`) are regenerated and compared; `SHEEPDOG_BLESS=1 cargo test --test
//!   docs` rewrites them. Its exit-status table is hand-written and checked against `exit.rs`.
//! - Links between the pages resolve (files and `#anchors`), and the README's test command is
//!   the one `.ci/run` runs.
//!
//! Whatever a session starts is found by a marker in its environment (`SHEEPDOG_DOCS_TAG`, which
//! every process it starts inherits, managed entries included) and by its registry; at the end
//! `sheepdog stop --all` runs, and what still lives is SIGKILLed by recorded identity and fails
//! the test.
#![cfg(target_os = "linux")]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

/// The pages whose commands run: README.md and every docs/*.md.
fn pages() -> Vec<String> {
    let mut v = vec!["README.md".to_string()];
    let mut docs: Vec<String> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .flatten()
        .map(|d| d.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    v.extend(docs);
    v
}

/// A fenced block: its info string, its lines and the line number of its first line (1-based).
struct Block {
    info: String,
    lines: Vec<String>,
    line: usize,
}

fn blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<(String, Block)> = None;
    for (i, l) in text.lines().enumerate() {
        let t = l.trim_start();
        match &mut open {
            None => {
                if let Some(fence) = ["````", "```"].iter().find(|f| t.starts_with(**f)) {
                    let info = t[fence.len()..].trim().to_string();
                    open = Some((fence.to_string(), Block { info, lines: Vec::new(), line: i + 2 }));
                }
            }
            Some((fence, b)) => {
                if t.starts_with(fence.as_str()) && t[fence.len()..].trim().is_empty() {
                    out.push(open.take().unwrap().1);
                } else {
                    b.lines.push(l.to_string());
                }
            }
        }
    }
    out
}

fn lang(info: &str) -> &str {
    info.split_whitespace().next().unwrap_or("")
}

#[test]
fn command_blocks_are_run_or_say_why_not() {
    let mut bad = Vec::new();
    for page in pages() {
        for b in blocks(&read(&page)) {
            let l = lang(&b.info);
            let shell = matches!(l, "sh" | "bash" | "shell" | "zsh" | "console" | "shell-session");
            if l == "console" {
                if !b.lines.iter().any(|x| x.starts_with("$ ")) {
                    bad.push(format!("{page}:{}: a console block without a `$ ` command", b.line));
                }
                continue;
            }
            if shell {
                let why = b.info.split_once("norun:").map(|(_, r)| r.trim()).unwrap_or("");
                if why.is_empty() {
                    bad.push(format!(
                        "{page}:{}: a `{l}` block that is neither a tested `console` session nor `{l} norun: REASON`",
                        b.line
                    ));
                }
            }
            // A session outside a console block would be shown but never run.
            if let Some(x) = b.lines.iter().find(|x| x.starts_with("$ "))
                && !b.info.contains("norun:")
                && l != "mcp"
            {
                bad.push(format!("{page}:{}: `{x}` is a command outside a console block", b.line));
            }
        }
    }
    assert!(bad.is_empty(), "blocks the doc tests cannot see:\n{}", bad.join("\n"));
}

/// One command of a session and the output the page says it prints.
struct Step {
    block: usize,
    command: String,
    expected: Vec<String>,
    line: usize,
}

fn steps(page: &str, text: &str) -> Vec<Step> {
    let mut out: Vec<Step> = Vec::new();
    for (n, b) in blocks(text).into_iter().filter(|b| lang(&b.info) == "console").enumerate() {
        let mut i = 0;
        while i < b.lines.len() {
            let l = &b.lines[i];
            if let Some(cmd) = l.strip_prefix("$ ") {
                let mut command = cmd.to_string();
                let line = b.line + i;
                while command.ends_with('\\') && i + 1 < b.lines.len() {
                    i += 1;
                    command.push('\n');
                    command.push_str(&b.lines[i]);
                }
                out.push(Step { block: n, command, expected: Vec::new(), line });
            } else if let Some(s) = out.last_mut() {
                s.expected.push(l.clone());
            } else {
                panic!("{page}:{}: output before the first `$ ` command", b.line + i);
            }
            i += 1;
        }
    }
    out
}

/// `text` with runs of whitespace as one space, trimmed.
fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// One line against a pattern in which `...` is any text.
fn line_matches(pattern: &str, line: &str) -> bool {
    let (p, l) = (squash(pattern), squash(line));
    let parts: Vec<&str> = p.split("...").collect();
    if parts.len() == 1 {
        return p == l;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !l.starts_with(first) || l.len() < first.len() + last.len() || !l.ends_with(last) {
        return false;
    }
    let mut rest = &l[first.len()..l.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(at) => rest = &rest[at + mid.len()..],
            None => return false,
        }
    }
    true
}

/// Lines against patterns; a pattern line `...` is any number of lines.
fn lines_match(pats: &[String], lines: &[String]) -> bool {
    match pats.split_first() {
        None => lines.is_empty(),
        Some((p, rest)) if p.trim() == "..." => (0..=lines.len()).any(|k| lines_match(rest, &lines[k..])),
        Some((p, rest)) => lines.split_first().is_some_and(|(l, more)| line_matches(p, l) && lines_match(rest, more)),
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0").local_addr().unwrap().port()
}

/// `8000`..`8009` (not inside a longer number) replaced by `ports`.
fn with_ports(s: &str, ports: &[u16]) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let digit = |j: usize| b.get(j).is_some_and(|c| c.is_ascii_digit());
        if s[i..].starts_with("800") && digit(i + 3) && !digit(i + 4) && (i == 0 || !digit(i - 1)) {
            out.push_str(&ports[(b[i + 3] - b'0') as usize].to_string());
            i += 4;
        } else {
            let c = s[i..].chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// Runs every console session of `page` and checks what it printed; cleans up what it started.
fn run_page(page: &str) {
    let steps = steps(page, &read(page));
    assert!(!steps.is_empty(), "{page} has no console session");
    let ports: Vec<u16> = (0..10).map(|_| free_port()).collect();
    let tmp = tempfile::tempdir().expect("temp dir");
    let (work, out) = (tmp.path().join("work"), tmp.path().join("out"));
    let state = |n: usize| tmp.path().join(format!("state-{n}"));
    for d in [&work, &out] {
        std::fs::create_dir_all(d).unwrap();
    }
    let mut script = String::from("exec </dev/null\n");
    for (i, s) in steps.iter().enumerate() {
        // Each session begins on a fresh registry, as on a fresh machine (ids start at proc_1).
        if i == 0 || steps[i - 1].block != s.block {
            writeln!(script, "export SHEEPDOG_STATE_DIR='{}'", state(s.block).display()).unwrap();
        }
        let o = out.join(i.to_string());
        // A group command runs in this shell, so `export` and `cd` carry to the next command.
        writeln!(
            script,
            "{{ {}\n}} >'{}' 2>&1; echo $? >'{}.rc'",
            with_ports(&s.command, &ports),
            o.display(),
            o.display()
        )
        .unwrap();
    }
    let tag = format!("docs-{}-{}", std::process::id(), page.replace('/', "-"));
    let bin_dir = Path::new(bin()).parent().unwrap().to_path_buf();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let guard = Guard::new();
    let mut child = Command::new("bash")
        .args(["--noprofile", "--norc", "-c", &script])
        .current_dir(&work)
        .env("PATH", path)
        .env("SHEEPDOG_DOCS_TAG", &tag)
        .env_remove("SHEEPDOG_SESSION")
        .env_remove("SHEEPDOG_OWNER")
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn bash");
    guard.track_child(&child);
    let end = Instant::now() + Duration::from_secs(240);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };

    // Clean up first (by the registry, then by the marker), so a failed comparison leaves nothing.
    let blocks_run: BTreeSet<usize> = steps.iter().map(|s| s.block).collect();
    for n in blocks_run {
        let _ = sheepdog().arg("--state-dir").arg(state(n)).args(["stop", "--all"]).stdin(Stdio::null()).output();
    }
    let survivors: Vec<i32> = with_env("SHEEPDOG_DOCS_TAG", &tag).iter().map(|m| m.pid.as_raw()).collect();
    let survivors = wait_gone(&survivors, Duration::from_secs(5));
    for p in &survivors {
        guard.track(*p);
    }
    drop(guard);

    let mut failures = Vec::new();
    if status.is_none() {
        failures.push(format!("{page}: the session did not finish within 240 s"));
    }
    for (i, s) in steps.iter().enumerate() {
        let o = out.join(i.to_string());
        let Ok(got) = std::fs::read(&o) else {
            failures.push(format!("{page}:{}: `{}` never ran", s.line, s.command));
            break;
        };
        let got = String::from_utf8_lossy(&got).into_owned();
        let rc = std::fs::read_to_string(format!("{}.rc", o.display())).unwrap_or_default();
        let got_lines: Vec<String> = got.lines().map(str::to_string).collect();
        let want: Vec<String> = s.expected.iter().map(|l| with_ports(l, &ports)).collect();
        if rc.trim() != "0" || !lines_match(&want, &got_lines) {
            failures.push(format!(
                "{page}:{}: `{}` exited {} and printed:\n{}\n--- the page says:\n{}",
                s.line,
                s.command,
                rc.trim(),
                got.trim_end(),
                want.join("\n")
            ));
        }
    }
    assert!(survivors.is_empty(), "{page}: processes outlived the session and `stop --all`: {survivors:?}");
    assert!(failures.is_empty(), "ports {:?} stand for 8000..\n{}", &ports[..2], failures.join("\n\n"));
}

#[test]
fn readme_commands_run() {
    run_page("README.md");
}

#[test]
fn guide_commands_run() {
    for page in pages().into_iter().filter(|p| p != "README.md") {
        if blocks(&read(&page)).iter().any(|b| lang(&b.info) == "console") {
            run_page(&page);
        }
    }
}

#[test]
fn the_matcher_means_what_the_header_says() {
    assert!(line_matches("Ready after ...ms: listening on port 8000.", "Ready after 12ms: listening on port 8000."));
    assert!(line_matches("a  b ... c", "a b x y c"));
    assert!(!line_matches("a ... c", "a b"));
    assert!(!line_matches("proc_1", "proc_12"));
    let l = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert!(lines_match(&l(&["a", "...", "d"]), &l(&["a", "b", "c", "d"])));
    assert!(lines_match(&l(&["a", "...", "d"]), &l(&["a", "d"])));
    assert!(!lines_match(&l(&["a"]), &l(&["a", "b"])));
    assert!(!lines_match(&l(&[]), &l(&["b"])));
    assert_eq!(with_ports("port 8000, 18000, 8001x 80001", &[1, 2]), "port 1, 18000, 2x 80001");
}

// ---- Links ----

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    let mut fenced = false;
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for l in text.lines() {
        if l.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if fenced || !l.starts_with('#') {
            continue;
        }
        let s = slug(l.trim_start_matches('#'));
        let n = seen.entry(s.clone()).or_insert(0);
        out.insert(if *n == 0 { s.clone() } else { format!("{s}-{n}") });
        *n += 1;
    }
    out
}

#[test]
fn links_between_the_pages_resolve() {
    let mut bad = Vec::new();
    let mut files = pages();
    files.push("ARCHITECTURE.md".into());
    for page in &files {
        let text = read(page);
        let dir = Path::new(page).parent().unwrap_or(Path::new(""));
        let mut rest = text.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = &rest[..end];
            if target.contains("://") || target.starts_with("mailto:") || target.contains(' ') {
                continue;
            }
            let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
            let path = if file.is_empty() { PathBuf::from(page) } else { dir.join(file) };
            let full = root().join(&path);
            if !full.exists() {
                bad.push(format!("{page}: link to {target}: no such file"));
                continue;
            }
            if !anchor.is_empty() && path.extension().is_some_and(|e| e == "md") {
                let text = std::fs::read_to_string(&full).unwrap();
                if !anchors(&text).contains(anchor) {
                    bad.push(format!("{page}: link to {target}: no such heading"));
                }
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn readme_test_command_is_what_ci_runs() {
    let readme = read("README.md");
    let ci = read(".ci/run");
    let tests: Vec<Block> = blocks(&readme)
        .into_iter()
        .filter(|b| b.lines.iter().any(|l| l.trim_start().starts_with("cargo test")))
        .collect();
    assert_eq!(tests.len(), 1, "README.md shows one test command block");
    for l in &tests[0].lines {
        let cmd = l.split(" #").next().unwrap().trim();
        if !cmd.is_empty() {
            assert!(ci.lines().any(|c| c.trim() == cmd), "README's `{cmd}` is not a line of .ci/run");
        }
    }
    let run = blocks(&readme)
        .into_iter()
        .filter(|b| {
            b.lines
                .iter()
                .any(|l| l.trim() == "cargo run --release -- run -- python3 -m http.server 8000 --bind 127.0.0.1")
        })
        .count();
    assert_eq!(run, 1, "README.md shows the run command");
}

// ---- The reference ----

const GEN_BEGIN: &str = "<!-- generated by tests/docs.rs";
const GEN_END: &str = "<!-- end generated -->";

fn help(args: &[&str]) -> String {
    let o = sheepdog().args(args).arg("--help").stdin(Stdio::null()).output().expect("run --help");
    assert!(o.status.success(), "{args:?} --help: {:?}", o.status);
    String::from_utf8(o.stdout).expect("utf-8 help").trim_end().to_string()
}

/// Every subcommand `sheepdog --help` lists, in its order.
fn subcommands(top: &str) -> Vec<String> {
    top.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect()
}

fn gen_commands() -> String {
    let top = help(&[]);
    let mut s = format!("### sheepdog\n\n```text\n{top}\n```\n");
    for c in subcommands(&top) {
        write!(s, "\n### sheepdog {c}\n\n```text\n{}\n```\n", help(&[&c])).unwrap();
    }
    s
}

fn cell(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ").replace('|', "\\|")
}

/// A schema's type in a few words: `string | null`, `array of EntryView`, `"started"`.
fn ty(s: &Value) -> String {
    let mut t = if let Some(r) = s.get("$ref").and_then(Value::as_str) {
        format!("`{}`", r.rsplit('/').next().unwrap())
    } else if let Some(c) = s.get("const") {
        format!("`{c}`")
    } else if let Some(e) = s.get("enum").and_then(Value::as_array) {
        e.iter().map(|v| format!("`{v}`")).collect::<Vec<_>>().join(" \\| ")
    } else if let Some(alts) = s.get("oneOf").or_else(|| s.get("anyOf")).and_then(Value::as_array) {
        alts.iter().map(ty).collect::<Vec<_>>().join(" \\| ")
    } else {
        let kinds: Vec<String> = match s.get("type") {
            Some(Value::String(k)) => vec![k.clone()],
            Some(Value::Array(ks)) => ks.iter().filter_map(Value::as_str).map(str::to_string).collect(),
            _ => vec![],
        };
        let kinds: Vec<String> = kinds
            .into_iter()
            .map(|k| match (k.as_str(), s.get("items"), s.get("additionalProperties")) {
                ("array", Some(items), _) => format!("array of {}", ty(items)),
                ("object", None, Some(ap)) if ap.is_object() && s.get("properties").is_none() => {
                    format!("object of {}", ty(ap))
                }
                _ => k,
            })
            .collect();
        if kinds.is_empty() { "any".to_string() } else { kinds.join(" \\| ") }
    };
    if s.get("deprecated").and_then(Value::as_bool) == Some(true) {
        t.push_str(" (deprecated)");
    }
    t
}

/// A table of an object schema's properties (nothing when it has none).
fn props(s: &Value) -> String {
    let Some(p) = s.get("properties").and_then(Value::as_object) else { return String::new() };
    let req: BTreeSet<&str> = s
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut t = String::from("| field | type | always | meaning |\n|---|---|---|---|\n");
    for (k, v) in p {
        let d = v.get("description").and_then(Value::as_str).unwrap_or("");
        let yes = if req.contains(k.as_str()) { "yes" } else { "" };
        writeln!(t, "| `{k}` | {} | {yes} | {} |", ty(v), cell(d)).unwrap();
    }
    t
}

/// The body of one schema: its description, its fields, its variants (`oneOf`).
fn schema_body(s: &Value) -> String {
    let mut out = String::new();
    if let Some(d) = s.get("description").and_then(Value::as_str) {
        writeln!(out, "{}\n", cell(d)).unwrap();
    }
    let p = props(s);
    if !p.is_empty() {
        writeln!(out, "{p}").unwrap();
    } else if s.get("oneOf").is_none() {
        writeln!(out, "Type: {}.\n", ty(s)).unwrap();
    }
    if let Some(alts) = s.get("oneOf").and_then(Value::as_array) {
        for a in alts {
            let name = a
                .pointer("/properties/event/const")
                .map(|c| format!("`{}`", c.as_str().unwrap_or("")))
                .unwrap_or_else(|| ty(a));
            writeln!(out, "**{name}**: {}\n", cell(a.get("description").and_then(Value::as_str).unwrap_or("")))
                .unwrap();
            let p = props(a);
            if !p.is_empty() {
                writeln!(out, "{p}").unwrap();
            }
        }
    }
    out
}

fn schema_files(dir: &str) -> Vec<(String, Value)> {
    let mut v: Vec<(String, Value)> = std::fs::read_dir(root().join(dir))
        .unwrap()
        .flatten()
        .filter(|d| d.file_name().to_string_lossy().ends_with(".json"))
        .map(|d| {
            let name = d.file_name().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(d.path()).unwrap();
            (name, serde_json::from_str(&text).expect("schema is JSON"))
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// `$defs` of several schemas, once each by name (two different ones of one name are both kept,
/// the second named after its file).
fn defs_section(schemas: &[(String, &Value)]) -> String {
    let mut defs: BTreeMap<String, Value> = BTreeMap::new();
    for (file, s) in schemas {
        for (k, v) in s.get("$defs").and_then(Value::as_object).into_iter().flatten() {
            match defs.get(k) {
                Some(old) if old != v => {
                    defs.insert(format!("{k} ({file})"), v.clone());
                }
                _ => {
                    defs.insert(k.clone(), v.clone());
                }
            }
        }
    }
    let mut out = String::new();
    for (k, v) in defs {
        write!(out, "#### {k}\n\n{}", schema_body(&v)).unwrap();
    }
    out
}

fn gen_documents() -> String {
    let files = schema_files("schema");
    let mut out = String::new();
    for (name, s) in &files {
        let title = s.get("title").and_then(Value::as_str).unwrap_or("");
        write!(out, "### schema/{name} ({title})\n\n{}", schema_body(s)).unwrap();
    }
    out.push_str("### Shared definitions\n\n");
    let refs: Vec<(String, &Value)> = files.iter().map(|(n, s)| (n.clone(), s)).collect();
    out.push_str(&defs_section(&refs));
    out
}

fn gen_mcp() -> String {
    let files = schema_files("schema/mcp");
    let mut out = String::new();
    let mut all = Vec::new();
    for (name, s) in &files {
        let tool = name.trim_end_matches(".json");
        write!(
            out,
            "### {tool}\n\nArguments:\n\n{}Result:\n\n{}",
            schema_body(&s["inputSchema"]),
            schema_body(&s["outputSchema"])
        )
        .unwrap();
        all.push((format!("{tool} input"), &s["inputSchema"]));
        all.push((format!("{tool} result"), &s["outputSchema"]));
    }
    out.push_str("### MCP definitions\n\n");
    out.push_str(&defs_section(&all));
    out
}

/// docs/reference.md with each generated part (between its markers) written anew.
fn regenerate(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(GEN_BEGIN) {
        let head_end = at + rest[at..].find("-->").expect("marker ends with -->") + 3;
        let marker = &rest[at..head_end];
        let kind =
            marker.split_whitespace().find_map(|w| w.strip_prefix("part=")).expect("part=NAME").trim_end_matches(':');
        let body = match kind {
            "commands" => gen_commands(),
            "documents" => gen_documents(),
            "mcp" => gen_mcp(),
            other => panic!("unknown generated part {other}"),
        };
        let end = rest[head_end..].find(GEN_END).expect("end marker") + head_end;
        write!(out, "{}{marker}\n\n{}\n{GEN_END}", &rest[..at], body.trim_end()).unwrap();
        rest = &rest[end + GEN_END.len()..];
    }
    out.push_str(rest);
    out
}

#[test]
fn reference_is_generated_from_clap_and_schema() {
    let path = root().join("docs/reference.md");
    let text = std::fs::read_to_string(&path).expect("docs/reference.md");
    let fresh = regenerate(&text);
    if std::env::var_os("SHEEPDOG_BLESS").is_some() {
        std::fs::write(&path, &fresh).unwrap();
        return;
    }
    if fresh != text {
        let (a, b): (Vec<&str>, Vec<&str>) = (text.lines().collect(), fresh.lines().collect());
        let first = a.iter().zip(&b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
        panic!(
            "docs/reference.md differs from clap and schema/ at line {}:\n  file: {:?}\n  now:  {:?}\n\
             run `SHEEPDOG_BLESS=1 cargo test --test docs reference` and commit the diff",
            first + 1,
            a.get(first),
            b.get(first)
        );
    }
}

#[test]
fn reference_lists_every_exit_status() {
    let text = read("docs/reference.md");
    let table: BTreeSet<i32> = text
        .lines()
        .skip_while(|l| !l.starts_with("## Exit statuses"))
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .filter_map(|l| l.strip_prefix("| ")?.split(" |").next())
        .flat_map(|c| c.split(" / ").map(str::to_string).collect::<Vec<_>>())
        .filter_map(|c| c.trim().parse().ok())
        .collect();
    use sheepdog::exit::*;
    for s in [OK, REFUSED, NOT_RECORDED, TIMED_OUT, USAGE, NOT_EXECUTABLE, NOT_FOUND] {
        assert!(table.contains(&s), "docs/reference.md's exit-status table lacks {s} (crates/core/src/exit.rs)");
    }
    for s in &table {
        assert!(
            [OK, REFUSED, NOT_RECORDED, TIMED_OUT, USAGE, NOT_EXECUTABLE, NOT_FOUND].contains(s),
            "docs/reference.md lists exit status {s}, which crates/core/src/exit.rs does not define"
        );
    }
}

// ---- MCP sessions ----
//
// A ```` ```mcp ```` block is a session with the real `sheepdog mcp`, replayed here: `> TOOL
// {JSON}` calls a tool, the `< ` lines after it are the result's text block (the same `...`
// rules as a console session), `  isError: true` says the result is an error, and
// `  structuredContent.PATH: JSON` says what a field holds (compact JSON, `...` allowed). A `$ `
// line runs a shell command between calls (it must exit 0). Other lines are not checked.

/// One JSON-RPC line to the server; the response with `id` (notifications are skipped).
fn rpc(stdin: &mut std::process::ChildStdin, lines: &Lines, id: u64, method: &str, params: Value) -> Value {
    use std::io::Write as _;
    let msg = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    writeln!(stdin, "{msg}").expect("write to sheepdog mcp");
    let end = Instant::now() + Duration::from_secs(90);
    loop {
        let left = end.saturating_duration_since(Instant::now());
        let line = lines.try_next(left).unwrap_or_else(|| panic!("no reply to {method} within 90 s"));
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON from the server: {e}: {line}"));
        if v.get("id") == Some(&serde_json::json!(id)) {
            return v;
        }
    }
}

/// `a.b[0].c` as the JSON pointer `/a/b/0/c`.
fn pointer(path: &str) -> String {
    path.split('.').flat_map(|p| p.split('[')).map(|p| format!("/{}", p.trim_end_matches(']'))).collect()
}

/// The result of one MCP call against what the page says of it: `None` when they agree.
fn check_call(
    page: &str,
    last: &Option<(usize, String, Value)>,
    want: &[String],
    fields: &[(String, String)],
    is_error: bool,
) -> Option<String> {
    let (line, call, r) = last.as_ref()?;
    let res = &r["result"];
    let got = res.pointer("/content/0/text").and_then(Value::as_str).unwrap_or("");
    let got_lines: Vec<String> = got.lines().map(str::to_string).collect();
    let mut bad = Vec::new();
    if !lines_match(want, &got_lines) {
        bad.push(format!("its text is:\n{got}\n--- the page says:\n{}", want.join("\n")));
    }
    if res.get("isError").and_then(Value::as_bool).unwrap_or(false) != is_error {
        bad.push(format!("isError is {}, the page says {is_error}", res["isError"]));
    }
    for (p, v) in fields {
        let at = res.pointer(&format!("/structuredContent{}", pointer(p)));
        let at = at.map(|a| a.to_string()).unwrap_or_else(|| "(absent)".into());
        if !line_matches(v, &at) {
            bad.push(format!("structuredContent.{p} is {at}, the page says {v}"));
        }
    }
    (!bad.is_empty()).then(|| format!("{page}:{line}: `{call}`: {}", bad.join("\n")))
}

fn run_mcp_page(page: &str) {
    let text = read(page);
    let sessions: Vec<Block> = blocks(&text).into_iter().filter(|b| lang(&b.info) == "mcp").collect();
    if sessions.is_empty() {
        return;
    }
    let ports: Vec<u16> = (0..10).map(|_| free_port()).collect();
    let tmp = tempfile::tempdir().expect("temp dir");
    let tag = format!("docs-mcp-{}-{}", std::process::id(), page.replace('/', "-"));
    let bin_dir = Path::new(bin()).parent().unwrap().to_path_buf();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let guard = Guard::new();
    let mut failures = Vec::new();
    for (n, b) in sessions.iter().enumerate() {
        let state = tmp.path().join(format!("state-{n}"));
        let mut child = sheepdog()
            .arg("mcp")
            .current_dir(tmp.path())
            .env("PATH", &path)
            .env("SHEEPDOG_STATE_DIR", &state)
            .env("SHEEPDOG_DOCS_TAG", &tag)
            .env_remove("SHEEPDOG_SESSION")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn sheepdog mcp");
        guard.track_child(&child);
        let mut stdin = child.stdin.take().unwrap();
        let lines = Lines::new(child.stdout.take().unwrap());
        let init = serde_json::json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "docs", "version": "1"}});
        let r = rpc(&mut stdin, &lines, 1, "initialize", init);
        assert_eq!(r.pointer("/result/serverInfo/name").and_then(Value::as_str), Some("sheepdog"), "{r}");
        {
            use std::io::Write as _;
            writeln!(stdin, "{}", serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
                .unwrap();
        }
        let mut id = 1;
        let mut last: Option<(usize, String, Value)> = None;
        let (mut want, mut fields, mut is_error) = (Vec::new(), Vec::new(), false);
        for (i, l) in b.lines.iter().enumerate() {
            let l = with_ports(l, &ports);
            if let Some(call) = l.strip_prefix("> ") {
                failures.extend(check_call(page, &last, &want, &fields, is_error));
                (want, fields, is_error) = (Vec::new(), Vec::new(), false);
                let (tool, args) = call.split_once(' ').unwrap_or((call, "{}"));
                let args: Value =
                    serde_json::from_str(args).unwrap_or_else(|e| panic!("{page}:{}: bad JSON: {e}", b.line + i));
                id += 1;
                let r = rpc(&mut stdin, &lines, id, "tools/call", serde_json::json!({"name": tool, "arguments": args}));
                last = Some((b.line + i, call.to_string(), r));
            } else if let Some(t) = l.strip_prefix("< ").or(if l == "<" { Some("") } else { None }) {
                want.push(t.to_string());
            } else if l.trim() == "isError: true" {
                is_error = true;
            } else if let Some((p, v)) = l.trim().strip_prefix("structuredContent.").and_then(|r| r.split_once(": ")) {
                fields.push((p.to_string(), v.to_string()));
            } else if let Some(cmd) = l.strip_prefix("$ ") {
                failures.extend(check_call(page, &last, &want, &fields, is_error));
                (want, fields, is_error, last) = (Vec::new(), Vec::new(), false, None);
                let o = Command::new("bash")
                    .args(["--noprofile", "--norc", "-c", cmd])
                    .current_dir(tmp.path())
                    .env("PATH", &path)
                    .env("SHEEPDOG_STATE_DIR", &state)
                    .env("SHEEPDOG_DOCS_TAG", &tag)
                    .stdin(Stdio::null())
                    .output()
                    .expect("bash");
                if !o.status.success() {
                    failures.push(format!("{page}:{}: `{cmd}` failed: {:?}", b.line + i, o.status));
                }
            }
        }
        failures.extend(check_call(page, &last, &want, &fields, is_error));
        drop(stdin);
        let _ = wait_child(&mut child, Duration::from_secs(10));
        let _ = sheepdog().arg("--state-dir").arg(&state).args(["stop", "--all"]).stdin(Stdio::null()).output();
    }
    let survivors: Vec<i32> = with_env("SHEEPDOG_DOCS_TAG", &tag).iter().map(|m| m.pid.as_raw()).collect();
    let survivors = wait_gone(&survivors, Duration::from_secs(5));
    for p in &survivors {
        guard.track(*p);
    }
    drop(guard);
    assert!(survivors.is_empty(), "{page}: processes outlived the MCP session and `stop --all`: {survivors:?}");
    assert!(failures.is_empty(), "ports {:?} stand for 8000..\n{}", &ports[..2], failures.join("\n\n"));
}

#[test]
fn mcp_sessions_run() {
    let mut any = false;
    for page in pages() {
        any |= blocks(&read(&page)).iter().any(|b| lang(&b.info) == "mcp");
        run_mcp_page(&page);
    }
    assert!(any, "no mcp session in the docs");
}
