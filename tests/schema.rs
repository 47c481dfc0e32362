//! The checked-in schemas (`schema/`) are the ones generated from the types, and what the real
//! binary prints validates against them (issue 19).
//!
//! Regenerate after a change to a view: `SHEEPDOG_BLESS=1 cargo test --test schema`.
//!
//! The documents are checked with Python's `jsonschema` (Draft 2020-12), a client hosts use, in
//! a strict form: every object schema with `properties` gets `unevaluatedProperties: false`, so
//! a field the binary prints but the schema does not name fails too.
#![cfg(target_os = "linux")]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::*;
use serde_json::json;

fn schema_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("schema")
}

#[test]
fn checked_in_schemas_are_the_generated_ones() {
    let dir = schema_dir();
    let docs = sheepdog::schema::documents();
    if std::env::var_os("SHEEPDOG_BLESS").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        for (name, schema) in &docs {
            std::fs::write(dir.join(name), sheepdog::schema::to_file_text(schema)).unwrap();
        }
    }
    let mut differ = Vec::new();
    for (name, schema) in &docs {
        let want = sheepdog::schema::to_file_text(schema);
        let have = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
        if have != want {
            differ.push(*name);
        }
    }
    let mut stale: Vec<String> = std::fs::read_dir(&dir)
        .map(|rd| rd.flatten().map(|d| d.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    stale.retain(|f| f.ends_with(".json") && !docs.iter().any(|(n, _)| n == f));
    assert!(
        differ.is_empty() && stale.is_empty(),
        "schema/ is out of date: differ {differ:?}, not generated {stale:?}; run SHEEPDOG_BLESS=1 cargo test --test schema"
    );
}

/// Validates `docs` (pairs of schema file and document) with Python's jsonschema, strictly.
/// Panics with every failure.
fn validate(docs: &[(&str, serde_json::Value)]) {
    let script = r#"
import json, sys
from jsonschema import Draft202012Validator
def strict(s, branch=False):
    # A branch of oneOf/anyOf/allOf sees only its own properties: the object that holds the
    # combination says what is left over (unevaluatedProperties looks into the branches).
    if isinstance(s, dict):
        if "properties" in s and not branch and "additionalProperties" not in s:
            s["unevaluatedProperties"] = False
        for k, v in s.items():
            if k in ("oneOf", "anyOf", "allOf"):
                for b in v:
                    strict(b, True)
            else:
                strict(v)
    elif isinstance(s, list):
        for v in s:
            strict(v)
    return s
bad = []
for name, doc in json.load(sys.stdin):
    schema = strict(json.load(open(sys.argv[1] + "/" + name)))
    Draft202012Validator.check_schema(schema)
    for e in Draft202012Validator(schema).iter_errors(doc):
        bad.append(f"{name}: {list(e.absolute_path)}: {e.message[:300]}")
print("\n".join(bad))
sys.exit(1 if bad else 0)
"#;
    let mut child = Command::new("python3")
        .args(["-c", script])
        .arg(schema_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    use std::io::Write;
    let input = serde_json::to_vec(&docs).unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "documents do not match schema/:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn json_of(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not one JSON document ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Every command's `--json` document, from real runs, matches its schema: start (with a
/// readiness report and a nudge), ps (with a tree), logs, update, wait, restart, stop (with a
/// cleanup), reap, clear, doctor, the error document, the event stream and `--events-fd`.
#[test]
fn every_document_the_binary_prints_matches_its_schema() {
    let st = State::new();
    let mut docs: Vec<(&str, serde_json::Value)> = Vec::new();
    let start = st.start(&[
        "--name",
        "web",
        "--cleanup",
        "echo bye",
        "--ready-log",
        "^up",
        "--",
        "sh",
        "-c",
        "echo up; sleep 30 & wait",
    ]);
    assert_eq!(start["v"], 1);
    assert_eq!(start["ready"]["ok"], true, "{start}");
    assert_eq!(start["readyConfig"]["log"], "^up", "the options under their own name");
    docs.push(("start.json", start));
    let nudged = st.start(&["--", "sh", "-c", "nohup sleep 1 &"]);
    assert!(!nudged["warnings"].as_array().unwrap().is_empty(), "{nudged}");
    docs.push(("start.json", nudged));
    let ps = json_of(&st.run(&["--json", "ps", "--all", "--tree"]));
    assert!(ps["entries"].as_array().unwrap().iter().any(|e| e["tree"].is_array()), "{ps}");
    docs.push(("ps.json", ps.clone()));
    for e in ps["entries"].as_array().unwrap() {
        docs.push(("entry.json", e.clone()));
    }
    docs.push(("logs.json", json_of(&st.run(&["--json", "logs", "web", "--tail", "1"]))));
    docs.push(("update.json", json_of(&st.run(&["--json", "update", "web", "--cleanup", "echo bye bye"]))));
    docs.push(("wait.json", json_of(&st.run(&["--json", "wait", "proc_2", "--timeout", "10s"]))));
    docs.push(("restart.json", json_of(&st.run(&["--json", "restart", "web"]))));
    let stop = json_of(&st.run(&["--json", "stop", "web"]));
    assert_eq!(stop["stopped"][0]["cleanupResult"]["exitCode"], 0, "{stop}");
    docs.push(("stop.json", stop));
    docs.push(("reap.json", json_of(&st.run(&["--json", "reap"]))));
    // `send --json` (issue 31: it had no `v` and no schema).
    let asked = st.start(&["--stdin", "pipe", "--", "sh", "-c", "read a; echo got $a"]);
    let asked = asked["id"].as_str().unwrap().to_string();
    let sent = json_of(&st.run(&["--json", "send", &asked, "--eof", "yes\n"]));
    assert_eq!((&sent["id"], &sent["bytes"], &sent["eof"]), (&json!(asked), &json!(4), &json!(true)), "{sent}");
    docs.push(("send.json", sent));
    docs.push(("wait.json", json_of(&st.run(&["--json", "wait", &asked, "--timeout", "10s"]))));
    // The empty documents: an idempotent cancel, and a wait with nothing to wait for.
    let none = json_of(&st.run(&["--json", "stop", "--session", "none", "--missing-ok"]));
    assert_eq!(none["stopped"], json!([]), "{none}");
    docs.push(("stop.json", none));
    docs.push(("clear.json", json_of(&st.run(&["--json", "clear", "--finished"]))));
    docs.push(("doctor.json", json_of(&st.run(&["--json", "doctor"]))));
    let err = st.run(&["--json", "stop", "nope"]);
    assert_eq!(err.status.code(), Some(125));
    let err = json_of(&err);
    assert_eq!(err["error"]["exitStatus"], 125);
    docs.push(("error.json", err));
    // A flag clap refuses is reported in the same document.
    let err = st.run(&["--json", "stop", "--nope"]);
    assert_eq!(err.status.code(), Some(125));
    docs.push(("error.json", json_of(&err)));
    let events = st.ok(&["--json", "events", "--since", "0", "--no-follow"]);
    let kinds: Vec<String> = events
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let k = v["event"].as_str().unwrap().to_string();
            docs.push(("events.json", v));
            k
        })
        .collect();
    for k in ["started", "ready", "exited", "stopped", "cleanupFinished", "cleared"] {
        assert!(kinds.iter().any(|x| x == k), "no {k} event in {kinds:?}");
    }
    // `run --events-fd`: every line, a stop included.
    let out = Command::new("sh")
        .args(["-c", &format!("{} run --events-fd 3 -- sh -c 'exit 4' 3>&1 >/dev/null", bin())])
        .output()
        .unwrap();
    let lines = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(lines.contains("\"exitCode\":4"), "{lines}");
    for l in lines.lines() {
        docs.push(("events-fd.json", serde_json::from_str(l).unwrap()));
    }
    // Every document carries `"v": 1` (the entry views are parts of `ps --json`, not documents).
    let no_v: Vec<String> =
        docs.iter().filter(|(f, d)| *f != "entry.json" && d["v"] != 1).map(|(f, d)| format!("{f}: {d}")).collect();
    assert!(no_v.is_empty(), "documents without \"v\": 1: {no_v:#?}");
    // Every subcommand's document was among them, and every schema in schema/ checked.
    let commands = String::from_utf8(common::sheepdog().arg("--help").output().unwrap().stdout).unwrap();
    let commands: Vec<&str> = commands
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let listed: Vec<&str> = DOCUMENTS.iter().map(|(c, _)| *c).collect();
    assert_eq!(commands, listed, "a subcommand is missing from DOCUMENTS in tests/schema.rs");
    let mut unchecked: Vec<String> = DOCUMENTS
        .iter()
        .filter_map(|(c, f)| f.filter(|f| !docs.iter().any(|(d, _)| d == f)).map(|f| format!("{c}: {f}")))
        .collect();
    for (file, _) in sheepdog::schema::documents() {
        if !docs.iter().any(|(d, _)| *d == file) {
            unchecked.push(file.to_string());
        }
    }
    assert!(unchecked.is_empty(), "no real document validated against {unchecked:?}");
    validate(&docs);
}

/// The schema of each subcommand's `--json` document, in `--help`'s order (None: the command
/// prints no document of its own: `run` writes events-fd.json's lines to `--events-fd`, `top`
/// is a screen, `completions` and `man` print scripts and roff, `mcp` speaks MCP, whose schemas
/// are in schema/mcp/).
const DOCUMENTS: [(&str, Option<&str>); 18] = [
    ("run", Some("events-fd.json")),
    ("start", Some("start.json")),
    ("ps", Some("ps.json")),
    ("logs", Some("logs.json")),
    ("stop", Some("stop.json")),
    ("restart", Some("restart.json")),
    ("update", Some("update.json")),
    ("send", Some("send.json")),
    ("wait", Some("wait.json")),
    ("reap", Some("reap.json")),
    ("clear", Some("clear.json")),
    ("events", Some("events.json")),
    ("top", None),
    ("doctor", Some("doctor.json")),
    ("completions", None),
    ("man", None),
    ("mcp", None),
    ("help", None),
];
