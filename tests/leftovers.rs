//! `run --leftovers keep` (issue 30, item 3): what a command leaves running when it exits on
//! its own (`setsid`, a double fork, `nohup ... &`) is not stopped but kept as an entry of the
//! session, with a supervisor of its own that stops it when its owner dies or it is asked to.
//! Real processes; the kernel says what is left. Both tiers (CI runs the suite twice).

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;

/// A shell (the owner) that runs `sheepdog run --owner $$ --leftovers keep --session S --
/// SHELL -c CMD`, prints `run STATUS`, then waits to be killed. CMD prints `left PID...` of what
/// it leaves.
fn owner_script(st: &State, session: &str, shell: &str, cmd: &str) -> String {
    format!(
        "{bin} --state-dir {dir} run --owner $$ --leftovers keep --session {session} --term-grace 1s -- {shell} -c {cmd}; echo run $?; exec sleep 100",
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
    cmd.args(["-c", &owner_script(st, session, "sh", LEAVES_THREE)]).env("D", dir).stdin(Stdio::null());
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
    // In the words a managed entry's owner stop is recorded in (`Trigger::stopped_text`).
    assert_eq!(e["statusText"], "stopped (owner exited)", "{e}");
}

/// Its supervisor SIGKILLed (stopped first, so nothing of it runs the stop), then its owner:
/// `reap` stops what was kept and records it as `reaped`, in both tiers. In the cgroup tier the
/// kept tree is in the cgroup of the `run` that made it, whose supervisor is gone too; the
/// machine-wide sweep of such cgroups comes after the entries, so the entry's own pass finds its
/// tree alive and says so, instead of `lost` with nothing alive (seen with pi's reap).
#[test]
fn reap_records_a_kept_tree_whose_supervisor_was_killed_as_reaped() {
    let guard = Guard::new();
    let st = State::new();
    let dir = tempfile::tempdir().unwrap();
    let (mut owner, lines, left) = spawn_owner(&st, dir.path(), "s-reap", &guard);
    assert_eq!(lines.expect("run", SECS(10)), vec!["3"]);
    let e = kept_entry(&st, "s-reap");
    let sup = e["supervisorPid"].as_i64().unwrap() as i32;
    guard.track(sup);
    kill_supervisor_and_keeper(sup);
    owner.kill().unwrap();
    let _ = owner.wait();
    std::thread::sleep(Duration::from_millis(200));
    assert!(left.iter().all(|p| alive(*p)), "with nobody watching, what was kept lives on until a reap");
    st.ok(&["reap"]);
    assert_eq!(wait_gone(&left, SECS(5)), Vec::<i32>::new(), "reap ends every leftover");
    let e = kept_entry(&st, "s-reap");
    assert_eq!(e["status"], "reaped", "{e}");
    assert_eq!(e["treeGone"], true, "{e}");
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

/// The host's pipes reach EOF when the command ends, though what it left still runs (the hang
/// of opencode #20902 and codex#7846's lost lines): `run --leftovers keep` relays the command's
/// output through pipes of its own, and what the leftover writes later goes to the entry's log.
#[test]
fn the_hosts_pipes_end_with_the_command_and_later_output_goes_to_the_entrys_log() {
    let guard = Guard::new();
    let st = State::new();
    let mut run = st.cmd(&[
        "run",
        "--leftovers",
        "keep",
        "--session",
        "s-out",
        "--",
        "sh",
        "-c",
        "echo first; echo first-err >&2; (sleep 0.5; echo later; echo later-err >&2; exec sleep 300) & echo left $!",
    ]);
    run.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = run.spawn().unwrap();
    guard.track_child(&child);
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    let tx2 = tx.clone();
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut out, &mut s);
        let _ = tx.send((1, s));
    });
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut s);
        let _ = tx2.send((2, s));
    });
    let mut got = [String::new(), String::new()];
    for _ in 0..2 {
        let (fd, text) = rx.recv_timeout(SECS(5)).expect("the host's pipe reaches EOF when the command ends");
        got[fd - 1] = text;
    }
    assert!(wait_child(&mut child, SECS(5)).success());
    let left: Vec<i32> = got[0].lines().filter_map(|l| l.strip_prefix("left ")?.parse().ok()).collect();
    left.iter().for_each(|p| guard.track(*p));
    assert_eq!(left.len(), 1, "{got:?}");
    assert!(alive(left[0]), "the leftover still runs");
    assert_eq!(got[0].lines().next(), Some("first"), "{got:?}");
    assert_eq!(got[1], "first-err\n", "the command's own stderr reaches the host's stderr");
    let e = kept_entry(&st, "s-out");
    guard.track(e["supervisorPid"].as_i64().unwrap_or(0) as i32);
    let id = e["id"].as_str().unwrap();
    st.wait_log(id, "stdout.log", "later\n");
    st.wait_log(id, "stderr.log", "later-err\n");
    let combined = st.wait_log(id, "combined.log", "[err] later-err");
    assert!(combined.contains("kept alive"), "{combined}");
    assert!(!got[0].contains("later") && !got[1].contains("later"), "later output is the entry's, not the host's");
    st.ok(&["stop", id]);
    let left_alive = wait_gone(&left, SECS(5));
    let log = std::fs::read_to_string(st.path().join("procs").join(id).join("combined.log")).unwrap_or_default();
    assert_eq!(left_alive, Vec::<i32>::new(), "{}\n{log}", st.entry(id));
}

/// The relay changes nothing the host reads: every byte, in order, with stdout and stderr that
/// shared one pipe still interleaved as the command wrote them, and the command's status.
#[test]
fn the_output_relay_passes_every_byte_in_order() {
    let st = State::new();
    let script = format!(
        "{bin} --state-dir {dir} run --leftovers keep -- sh -c 'seq 1 100000; echo mid >&2; seq 100001 150000; exit 7' 2>&1 | cat; echo status ${{PIPESTATUS[0]}}",
        bin = bin(),
        dir = st.path().display()
    );
    let out = std::process::Command::new("bash").args(["-c", &script]).stdin(Stdio::null()).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let mut want = (1..=100000).map(|n| format!("{n}\n")).collect::<String>();
    want.push_str("mid\n");
    want.extend((100001..=150000).map(|n| format!("{n}\n")));
    want.push_str("status 7\n");
    assert!(text == want, "{} bytes, not the {} written", text.len(), want.len());
    assert!(st.entries().is_empty(), "nothing was left, so nothing is kept");
}

/// bash's `disown`, the fourth way a command leaves a process it means to keep: kept like the
/// others, and the entry is named from the leftover's own command.
#[test]
fn a_disowned_job_is_kept_and_the_entry_is_named_from_its_command() {
    let guard = Guard::new();
    let st = State::new();
    let script = owner_script(&st, "s-disown", "bash", "sleep 303 & disown; echo left $!; exit 0");
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", &script]).stdin(Stdio::null());
    let (_owner, lines) = spawn_lines(cmd, &guard);
    let left = lines.pids("left", SECS(10));
    left.iter().for_each(|p| guard.track(*p));
    assert_eq!(lines.expect("run", SECS(10)), vec!["0"]);
    let e = kept_entry(&st, "s-disown");
    guard.track(e["supervisorPid"].as_i64().unwrap() as i32);
    assert_eq!((e["status"].as_str(), e["pid"].as_i64()), (Some("running"), Some(i64::from(left[0]))), "{e}");
    assert_eq!(e["name"], "sleep", "named from the leftover's command: {e}");
    assert_eq!(e["commandPreview"], "sleep 303", "{e}");
    st.ok(&["stop", "--session", "s-disown"]);
    assert_eq!(wait_gone(&left, SECS(5)), Vec::<i32>::new());
}

/// A leftover older than the process the entry is named from is still the entry's. Here the
/// older one is a subshell blocked in `read` (no program of its own: it shows the provider's
/// command line), so the entry is named from the younger `sleep 0.3`; once that ends, the
/// subshell is all that is left, and the entry must still run, and its stop end it (the
/// recorded tree used to skip every process older than the one the entry is named from: the
/// entry said `exited` while the subshell ran on, unowned).
#[test]
fn a_leftover_older_than_the_one_the_entry_is_named_from_is_still_the_entrys() {
    let guard = Guard::new();
    let st = State::new();
    let dir = tempfile::tempdir().unwrap();
    let cmd = "mkfifo \"$D/fifo\"; (read x < \"$D/fifo\"; exec sleep 300) & a=$!; sleep 0.1; sleep 0.3 & echo left $a; exit 0";
    let mut c = std::process::Command::new("sh");
    c.args(["-c", &owner_script(&st, "s-older", "sh", cmd)]).env("D", dir.path()).stdin(Stdio::null());
    let (_owner, lines) = spawn_lines(c, &guard);
    let left = lines.pids("left", SECS(10));
    left.iter().for_each(|p| guard.track(*p));
    assert_eq!(lines.expect("run", SECS(10)), vec!["0"]);
    let e = kept_entry(&st, "s-older");
    guard.track(e["supervisorPid"].as_i64().unwrap() as i32);
    assert_eq!(e["commandPreview"], "sleep 0.3", "named from the younger leftover: {e}");
    // `sleep 0.3` has ended; the subshell is all that is left.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(alive(left[0]));
    let e = kept_entry(&st, "s-older");
    assert_eq!(e["status"], "running", "the subshell still runs: {e}");
    st.ok(&["stop", "--session", "s-older"]);
    assert_eq!(wait_gone(&left, SECS(5)), Vec::<i32>::new(), "the stop ended the older leftover: {e}");
}
