//! Issue 31, item 5: a newcomer's first-hour stumbles, each with the real binary: the hint when
//! `sheepdog mcp`/`top` are not built, an idempotent session cancel, suggestions for typos with
//! the subcommand's own help, and one rule for duration units. Each test has its own state dir;
//! `State` kills what its entries started, by recorded identity.
#![cfg(target_os = "linux")]

mod common;

use common::*;

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_flag_typo_gets_a_suggestion_and_the_subcommands_help() {
    let st = State::new();
    let o = st.run(&["stop", "--term-grac", "1s", "web"]);
    assert_eq!(o.status.code(), Some(125));
    assert_eq!(
        stderr(&o).trim(),
        "sheepdog: unexpected argument '--term-grac' found (did you mean '--term-grace'?) (see 'sheepdog stop --help')"
    );
    let o = st.run(&["stpo"]);
    assert_eq!(o.status.code(), Some(125));
    let e = stderr(&o);
    assert!(e.contains("(did you mean 'top' or 'stop'?) (see 'sheepdog --help')"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
}

#[test]
fn every_duration_needs_a_unit_and_the_error_says_which() {
    let st = State::new();
    // The two forms a newcomer tried: once `0` passed bare and `5` did not.
    for (flag, bare) in [("--term-grace", "0"), ("--timeout", "5"), ("--kill-wait", "1.5")] {
        let o = st.run(&["run", flag, bare, "--", "true"]);
        assert_eq!(o.status.code(), Some(125), "{flag} {bare}");
        let e = stderr(&o);
        assert!(e.contains(&format!("a number needs a unit, like {bare}s or {bare}ms")), "{e}");
        assert!(e.contains("(see 'sheepdog run --help')"), "{e}");
    }
    for ok in ["0s", "0ms"] {
        let o = st.run(&["run", "--term-grace", ok, "--", "true"]);
        assert_eq!(o.status.code(), Some(0), "{ok}: {}", stderr(&o));
    }
}

#[test]
fn mcp_and_top_that_were_not_built_say_how_to_build_them() {
    // `cargo run --release -- run ...` builds only sheepdog: a copy of it alone in a directory.
    let dir = tempfile::tempdir().unwrap();
    let lone = dir.path().join("sheepdog");
    std::fs::copy(bin(), &lone).unwrap();
    for (sub, binary) in [("mcp", "sheepdog-mcp"), ("top", "sheepdog-top")] {
        let o = std::process::Command::new(&lone).arg(sub).stdin(std::process::Stdio::null()).output().unwrap();
        assert_eq!(o.status.code(), Some(125), "{sub}");
        let e = stderr(&o);
        assert!(e.contains(&format!("{binary}: not found")), "{e}");
        assert!(e.contains("`cargo build --release`"), "{e}");
    }
}

#[test]
fn a_second_session_cancel_with_missing_ok_is_an_empty_list() {
    let st = State::new();
    st.start(&["--session", "turn-1", "--", "sleep", "100"]);
    let first = st.ok(&["--json", "stop", "--session", "turn-1"]);
    let v: serde_json::Value = serde_json::from_str(first.trim()).unwrap();
    assert_eq!(v["stopped"].as_array().map(Vec::len), Some(1), "{v}");
    // Without the flag a second cancel is refused, as before (a typo in a session id shows).
    let o = st.run(&["stop", "--session", "turn-1"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("nothing matched --session turn-1"), "{}", stderr(&o));
    let o = st.run(&["--json", "stop", "--session", "turn-1", "--missing-ok"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["stopped"], serde_json::json!([]), "{v}");
    assert_eq!(v["v"], 1, "{v}");
    let o = st.run(&["stop", "--session", "turn-1", "--missing-ok"]);
    assert_eq!((o.status.code(), o.stdout.is_empty(), o.stderr.is_empty()), (Some(0), true, true));
    // Only with --session: for ids it would hide a typo.
    let o = st.run(&["stop", "--missing-ok", "web"]);
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
}
