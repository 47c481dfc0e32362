//! `run --leftovers keep` (issue 30, item 3): what a command leaves running when it exits on
//! its own (`setsid`, a double fork, `nohup ... &`) is not stopped but kept as an entry of the
//! session, with a supervisor of its own that stops it when its owner dies or it is asked to.
//! Real processes; the kernel says what is left. Both tiers (CI runs the suite twice).

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;

/// A shell (the owner) that runs `sheepdog run --owner $$ --leftovers keep --session S -- sh -c
/// CMD`, prints `run STATUS`, then waits to be killed. CMD prints `left PID...` of what it
/// leaves.
fn owner_script(st: &State, session: &str, cmd: &str) -> String {
    format!(
        "{bin} --state-dir {dir} run --owner $$ --leftovers keep --session {session} --term-grace 1s -- sh -c {cmd}; echo run $?; exec sleep 100",
        bin = bin(),
        dir = st.path().display(),
        cmd = shell_quote(cmd),
    )
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Leaves a `setsid` sleeper, a double-forked sleeper and a `nohup`'d one, prints their pids,
/// and exits 3 at once.
const LEAVES_THREE: &str = "setsid sleep 300 & a=$!; (sleep 301 & echo $! > \"$D/b\"); nohup sleep 302 >/dev/null 2>&1 & c=$!; \
     echo left $a $(cat \"$D/b\") $c; exit 3";

fn spawn_owner(
    st: &State,
    dir: &std::path::Path,
    session: &str,
    guard: &Guard,
) -> (std::process::Child, Lines, Vec<i32>) {
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", &owner_script(st, session, LEAVES_THREE)]).env("D", dir).stdin(Stdio::null());
    let (owner, lines) = spawn_lines(cmd, guard);
    let left = lines.pids("left", SECS(10));
    left.iter().for_each(|p| guard.track(*p));
    (owner, lines, left)
}

fn kept_entry(st: &State, session: &str) -> serde_json::Value {
    let t = Instant::now();
    loop {
        if let Some(e) = st.entries().into_iter().find(|e| e["sessionId"] == session) {
            return e;
        }
        assert!(t.elapsed() < SECS(10), "no entry of session {session}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_command_that_exits_leaves_its_setsid_double_forked_and_nohup_children_running_as_one_entry() {
    let guard = Guard::new();
    let st = State::new();
    let dir = tempfile::tempdir().unwrap();
    let (_owner, lines, left) = spawn_owner(&st, dir.path(), "s-keep", &guard);
    assert_eq!(lines.expect("run", SECS(10)), vec!["3"], "run exits with the command's own status, at once");
    assert_eq!(left.len(), 3);
    std::thread::sleep(Duration::from_millis(300));
    assert!(left.iter().all(|p| alive(*p)), "what the command left still runs");
    let e = kept_entry(&st, "s-keep");
    assert_eq!(e["status"], "running", "{e}");
    let sup = e["supervisorPid"].as_i64().unwrap() as i32;
    guard.track(sup);
    assert!(alive(sup), "the kept entry has a live supervisor");
    // `stop --session` (the session's end) stops all of it.
    st.ok(&["stop", "--session", "s-keep"]);
    assert_eq!(wait_gone(&left, SECS(5)), Vec::<i32>::new(), "the session's stop ends every leftover");
    let e = kept_entry(&st, "s-keep");
    assert_eq!(e["status"], "stopped", "{e}");
    assert_eq!(e["treeGone"], true, "{e}");
    assert_eq!(wait_gone(&[sup], SECS(5)), Vec::<i32>::new(), "its supervisor exits once they are gone");
}

#[test]
fn the_owners_sigkill_stops_what_was_kept() {
    let guard = Guard::new();
    let st = State::new();
    let dir = tempfile::tempdir().unwrap();
    let (mut owner, lines, left) = spawn_owner(&st, dir.path(), "s-owner", &guard);
    assert_eq!(lines.expect("run", SECS(10)), vec!["3"]);
    let e = kept_entry(&st, "s-owner");
    guard.track(e["supervisorPid"].as_i64().unwrap() as i32);
    assert!(left.iter().all(|p| alive(*p)));
    owner.kill().unwrap();
    let _ = owner.wait();
    assert_eq!(wait_gone(&left, SECS(5)), Vec::<i32>::new(), "the owner's death ends every leftover");
    let t = Instant::now();
    while kept_entry(&st, "s-owner")["status"] == "running" && t.elapsed() < SECS(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let e = kept_entry(&st, "s-owner");
    assert_eq!((e["status"].as_str(), e["stopReason"].as_str()), (Some("stopped"), Some("owner")), "{e}");
}

#[test]
fn leftovers_that_end_on_their_own_leave_the_entry_exited() {
    let guard = Guard::new();
    let st = State::new();
    let script = format!(
        "{bin} --state-dir {dir} run --leftovers keep --session s-end -- sh -c 'setsid sleep 0.3 & echo left $!'",
        bin = bin(),
        dir = st.path().display()
    );
    let (mut sh, lines) = spawn_script("sh", &script, &guard);
    let left = lines.pids("left", SECS(10));
    left.iter().for_each(|p| guard.track(*p));
    assert!(wait_child(&mut sh, SECS(10)).success());
    let e = kept_entry(&st, "s-end");
    guard.track(e["supervisorPid"].as_i64().unwrap_or(0) as i32);
    let t = Instant::now();
    while kept_entry(&st, "s-end")["status"] == "running" && t.elapsed() < SECS(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let e = kept_entry(&st, "s-end");
    assert_eq!(e["status"], "exited", "{e}");
}

#[test]
fn a_provider_killed_by_a_signal_keeps_nothing() {
    // A host's tree kill reaches the provider first: what it left goes with it.
    let guard = Guard::new();
    let st = State::new();
    let script = format!(
        "{bin} --state-dir {dir} run --leftovers keep --session s-sig --term-grace 1s -- sh -c 'setsid sleep 300 & echo left $!; kill -TERM $$'",
        bin = bin(),
        dir = st.path().display()
    );
    let (mut sh, lines) = spawn_script("sh", &script, &guard);
    let left = lines.pids("left", SECS(10));
    left.iter().for_each(|p| guard.track(*p));
    wait_child(&mut sh, SECS(10));
    assert_eq!(wait_gone(&left, SECS(5)), Vec::<i32>::new());
    assert!(st.entries().is_empty(), "no entry is kept");
}

#[test]
fn without_keep_run_still_stops_what_the_command_left() {
    let guard = Guard::new();
    let mut run = sheepdog();
    run.args(["run", "--term-grace", "1s", "--", "sh", "-c", "setsid sleep 300 & echo left $!; exit 0"]);
    run.stdin(Stdio::null());
    let (mut child, lines) = spawn_lines(run, &guard);
    let left = lines.pids("left", SECS(10));
    left.iter().for_each(|p| guard.track(*p));
    assert!(wait_child(&mut child, SECS(10)).success());
    assert_eq!(wait_gone(&left, SECS(1)), Vec::<i32>::new(), "gone by the time run exits");
}

#[test]
fn a_forged_supervise_leftovers_cannot_take_another_entry() {
    let guard = Guard::new();
    let st = State::new();
    let e = st.start(&["--", "sleep", "300"]);
    let id = e["id"].as_str().unwrap().to_string();
    guard.track(e["pid"].as_i64().unwrap() as i32);
    let sup = st.entry(&id)["supervisorPid"].clone();
    guard.track(sup.as_i64().unwrap() as i32);
    let out = st.run(&["supervise-leftovers", "--id", &id]);
    assert_eq!(out.status.code(), Some(125));
    assert_eq!(st.entry(&id)["supervisorPid"], sup, "the entry is untouched");
    st.ok(&["stop", &id]);
}
