//! Issue 8 ("a cleanup belongs to its entry; members that clear their environment are still
//! caught; truthful results"): real processes, real files, checked with the kernel. Each test
//! has its own state dir; its `State` and `Guard` kill what it started, by recorded identity.
// Linux only: these tests read /proc and rely on the subreaper; macOS is checked by clippy alone.
#![cfg(target_os = "linux")]

mod common;

use std::process::Stdio;

use common::*;

/// Runs a python3 host script with `SHEEPDOG` (the binary) and `STATE` (the test's state dir)
/// in its environment; returns its stdout.
fn host(state: &State, src: &str) -> String {
    let out = std::process::Command::new("python3")
        .args(["-c", src])
        .env("SHEEPDOG", bin())
        .env("STATE", state.path())
        .stdin(Stdio::null())
        .output()
        .expect("python3");
    assert!(out.status.success(), "host script failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn start_passes_only_stdio_so_a_pipe_given_to_start_sees_eof_while_the_command_runs() {
    let state = State::new();
    let out = host(
        &state,
        r#"
import os, select, subprocess, json
r, w = os.pipe()
p = subprocess.run([os.environ["SHEEPDOG"], "--state-dir", os.environ["STATE"], "start", "--json", "--", "sleep", "30"],
                   pass_fds=[w], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, check=True)
os.close(w)
ready, _, _ = select.select([r], [], [], 10)
print("EOF" if ready and os.read(r, 1) == b"" else "HANG")
"#,
    );
    assert_eq!(out.trim(), "EOF", "the supervisor or the command kept the host's pipe open");
    // The command still runs: EOF came from sheepdog letting go, not from the command ending.
    let e = &state.entries()[0];
    assert_eq!(e["status"], "running");
}

#[test]
fn run_gives_the_provider_exactly_stdin_stdout_stderr() {
    let state = State::new();
    let out = host(
        &state,
        r#"
import os, subprocess
r, w = os.pipe()
os.set_inheritable(r, True)
src = "import os\ntry:\n    os.fstat(%d)\n    print('inherited')\nexcept OSError:\n    print('closed')\n" % w
p = subprocess.run([os.environ["SHEEPDOG"], "run", "--", "python3", "-c", src], pass_fds=[r, w],
                   stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, check=True, timeout=30)
print(p.stdout.decode().strip())
"#,
    );
    assert_eq!(out.trim(), "closed", "the provider inherited an fd above 2");
}

#[test]
fn as_pid_1_the_exited_event_reports_the_status_sheepdog_really_exits_with() {
    if unshare_refused(&["--pid", "--fork", "--mount-proc"]) {
        return;
    }
    let guard = Guard::new();
    let mut cmd = std::process::Command::new("unshare");
    cmd.args(["--pid", "--fork", "--mount-proc", bin(), "run", "--events-fd", "1", "--", "sleep", "100"])
        .stdin(Stdio::null());
    let (mut child, lines) = spawn_lines(cmd, &guard);
    let spawned = lines.next(SECS(10));
    assert!(spawned.contains("\"spawned\""), "{spawned}");
    let init = sheepdog::os::procfs::children(pid(child.id() as i32));
    assert_eq!(init.len(), 1);
    let init = init[0].as_raw();
    guard.track(init);
    sheepdog::os::procfs::descendants(pid(init)).iter().for_each(|s| guard.track(s.pid.as_raw()));
    signal(init, libc::SIGTERM);
    let exited = loop {
        let l = lines.next(SECS(10));
        if l.contains("\"exited\"") {
            break l;
        }
    };
    let v: serde_json::Value = serde_json::from_str(&exited).unwrap();
    let st = wait_child(&mut child, SECS(10));
    assert_eq!(st.code(), Some(143), "as PID 1 sheepdog exits 128+15");
    assert_eq!(v["status"], 143, "the exited event must say what sheepdog exits with: {exited}");
}

fn id_of(v: &serde_json::Value) -> String {
    v["id"].as_str().expect("id").to_string()
}

/// Polls `cond` every 10 ms until it holds; panics with `what` after `timeout`.
fn until(timeout: std::time::Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let end = std::time::Instant::now() + timeout;
    while !cond() {
        assert!(std::time::Instant::now() < end, "{what} did not happen within {timeout:?}");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// A wrapper like `docker run -d`: it reports starting a "daemon" (a sleeper the test owns,
/// standing for work outside the tree) and exits 0 at once. Its cleanup kills the daemon and
/// appends a line to `count` (so "exactly once" can be counted).
fn wrapper_with_cleanup(st: &State, daemon: u32, extra: &[&str]) -> String {
    let count = st.path().join("cleanups");
    let cleanup = format!("echo ran >> {}; kill {daemon}", count.display());
    let mut args = vec!["--cleanup", &cleanup];
    args.extend_from_slice(extra);
    let echo = format!("echo started daemon {daemon}");
    args.extend_from_slice(&["--", "sh", "-c", &echo]);
    let id = id_of(&st.start(&args));
    let out = st.run(&["wait", &id]);
    assert_eq!(out.status.code(), Some(0), "the wrapper exits 0 at once");
    id
}

fn cleanups_run(st: &State) -> usize {
    std::fs::read_to_string(st.path().join("cleanups")).unwrap_or_default().lines().count()
}

#[test]
fn owner_death_runs_the_pending_cleanup_of_a_wrapper_that_already_exited_exactly_once() {
    let st = State::new();
    let guard = Guard::new();
    let mut owner = guard.sleeper();
    let mut daemon = guard.sleeper();
    let id = wrapper_with_cleanup(&st, daemon.id(), &["--owner", &owner.id().to_string()]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(daemon.try_wait().unwrap().is_none(), "nothing ran the cleanup yet");
    owner.kill().unwrap();
    owner.wait().unwrap();
    until(SECS(10), "the cleanup after owner death", || daemon.try_wait().unwrap().is_some());
    until(SECS(10), "the cleanup result", || !st.entry(&id)["cleanupResult"].is_null());
    let e = st.entry(&id);
    assert_eq!(e["status"], "exited", "the command's own result is kept");
    assert_eq!(e["cleanupResult"]["exitCode"], 0);
    // Later triggers find it done: it never runs twice.
    let _ = st.run(&["stop", &id]);
    let _ = st.run(&["reap"]);
    assert_eq!(cleanups_run(&st), 1);
}

#[test]
fn the_turn_timeout_runs_the_pending_cleanup_of_a_wrapper_that_already_exited() {
    let st = State::new();
    let guard = Guard::new();
    let mut daemon = guard.sleeper();
    let id = wrapper_with_cleanup(&st, daemon.id(), &["--timeout", "2s"]);
    assert!(daemon.try_wait().unwrap().is_none());
    until(SECS(10), "the cleanup at the turn timeout", || daemon.try_wait().unwrap().is_some());
    until(SECS(10), "the cleanup result", || !st.entry(&id)["cleanupResult"].is_null());
    assert_eq!(cleanups_run(&st), 1);
}

#[test]
fn stop_by_session_and_all_run_the_pending_cleanups_of_exited_entries() {
    let st = State::new();
    let guard = Guard::new();
    let mut d1 = guard.sleeper();
    let mut d2 = guard.sleeper();
    let id1 = wrapper_with_cleanup(&st, d1.id(), &["--session", "turn-1", "--name", "one"]);
    let id2 = wrapper_with_cleanup(&st, d2.id(), &["--name", "two"]);
    let out = st.run(&["stop", "--session", "turn-1"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("one ({id1}) had already exited (0).\n"));
    until(SECS(5), "session stop's cleanup", || d1.try_wait().unwrap().is_some());
    assert!(d2.try_wait().unwrap().is_none(), "another session's cleanup is not touched");
    let out = st.run(&["stop", "--all"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("two ({id2}) had already exited (0).\n"));
    until(SECS(5), "stop --all's cleanup", || d2.try_wait().unwrap().is_some());
    assert_eq!(cleanups_run(&st), 2);
}

#[test]
fn clear_refuses_a_pending_cleanup_and_force_drops_it_without_running_it() {
    let st = State::new();
    let guard = Guard::new();
    let mut owner = guard.sleeper();
    let mut daemon = guard.sleeper();
    let id = wrapper_with_cleanup(&st, daemon.id(), &["--owner", &owner.id().to_string()]);
    for args in [vec!["clear", id.as_str()], vec!["clear", "--finished"]] {
        let out = st.run(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("sheepdog stop") && err.contains("clear --force"), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
    }
    assert_eq!(st.entries().len(), 1, "nothing was dropped");
    let sup = st.entry(&id)["supervisorPid"].as_i64().unwrap() as i32;
    assert_eq!(st.ok(&["clear", "--force", &id]), format!("Cleared {id}.\n"));
    // The supervisor that stayed for the cleanup leaves; the owner's death later runs nothing.
    assert_eq!(wait_gone(&[sup], SECS(5)), Vec::<i32>::new());
    owner.kill().unwrap();
    owner.wait().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(daemon.try_wait().unwrap().is_none(), "a dropped cleanup never runs");
    assert_eq!(cleanups_run(&st), 0);
}

#[test]
fn wait_holds_until_a_triggered_cleanup_finished_and_carries_its_result() {
    let st = State::new();
    let id = id_of(&st.start(&["--cleanup", "sleep 1; echo cleaned", "--", "sleep", "100"]));
    let mut stop = st.cmd(&["stop", &id]).stdout(Stdio::null()).spawn().unwrap();
    st.wait_log(&id, "combined.log", "cleanup started");
    let out = st.run(&["wait", "--json", &id]);
    assert!(out.status.code().is_some());
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let v = &doc["waited"][0];
    assert_eq!(v["cleanupResult"]["exitCode"], 0, "{doc}");
    assert_eq!(v["cleanupResult"]["output"][0], "cleaned");
    wait_child(&mut stop, SECS(20));
}

#[test]
fn reap_runs_a_pending_cleanup_whose_owner_died_while_no_supervisor_watched() {
    let st = State::new();
    let guard = Guard::new();
    let mut owner = guard.sleeper();
    let mut daemon = guard.sleeper();
    let id = wrapper_with_cleanup(&st, daemon.id(), &["--owner", &owner.id().to_string(), "--name", "db"]);
    let sup = st.entry(&id)["supervisorPid"].as_i64().unwrap() as i32;
    guard.track(sup);
    kill_supervisor_and_keeper(sup);
    assert_eq!(wait_gone(&[sup], SECS(5)), Vec::<i32>::new());
    let dry = st.ok(&["reap", "--dry-run"]);
    assert_eq!(dry, "", "the owner lives: nothing is due yet");
    owner.kill().unwrap();
    owner.wait().unwrap();
    assert_eq!(st.ok(&["reap"]), format!("Ran the cleanup of db ({id}): the owner exited.\n"));
    until(SECS(5), "reap's cleanup", || daemon.try_wait().unwrap().is_some());
    assert_eq!(st.entry(&id)["cleanupResult"]["ranBy"], "reap");
    assert_eq!(st.ok(&["reap"]), "", "once");
    assert_eq!(cleanups_run(&st), 1);
}

#[test]
fn stop_of_an_entry_that_had_already_ended_says_what_happened() {
    let st = State::new();
    let id = id_of(&st.start(&["--name", "web", "--", "sh", "-c", "exit 3"]));
    let _ = st.run(&["wait", &id]);
    let out = st.run(&["stop", "web"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("web ({id}) had already exited (3).\n"));
}

#[test]
fn stop_of_a_session_that_matches_nothing_says_so_with_status_1() {
    let st = State::new();
    let out = st.run(&["stop", "--session", "NOSUCH"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nothing matched") && err.contains("NOSUCH"), "{err}");
}

#[test]
fn wait_on_an_entry_stopped_by_its_turn_timeout_returns_124_even_if_it_exited_0() {
    let st = State::new();
    let trap = "import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\nprint('up', flush=True)\ntime.sleep(100)\n";
    let id = id_of(&st.start(&["--timeout", "1s", "--", "python3", "-c", trap]));
    let out = st.run(&["wait", &id]);
    assert_eq!(out.status.code(), Some(124));
    assert!(String::from_utf8_lossy(&out.stdout).contains("timed out"), "{out:?}");
    assert_eq!(st.entry(&id)["exitCode"], 0, "the process itself exited 0");
}

#[test]
fn wait_json_prints_exactly_one_document_when_the_status_is_unknown() {
    let st = State::new();
    let id = id_of(&st.start(&["--", "sleep", "100"]));
    let e = st.entry(&id);
    let sup = e["supervisorPid"].as_i64().unwrap() as i32;
    kill_supervisor_and_keeper(sup);
    assert_eq!(wait_gone(&[sup], SECS(5)), Vec::<i32>::new());
    let _ = st.ok(&["reap"]);
    let out = st.run(&["wait", "--json", &id]);
    assert_eq!(out.status.code(), Some(125));
    let text = String::from_utf8_lossy(&out.stdout);
    let mut docs = serde_json::Deserializer::from_str(&text).into_iter::<serde_json::Value>();
    let first = docs.next().expect("a document").expect("valid JSON");
    assert!(docs.next().is_none(), "exactly one JSON document: {text}");
    // `wait --json` reports each entry in one `{waited, exitCode}` document (issue 10's contract).
    assert!(first["exitStatus"] == 125 || first["error"]["exitStatus"] == 125, "{first}");
}

/// Reads a pid a test's command wrote to `file` in the state dir.
fn pid_file(st: &State, file: &str) -> i32 {
    let path = st.path().join(file);
    let mut text = String::new();
    until(SECS(10), &format!("{file} written"), || {
        text = std::fs::read_to_string(&path).unwrap_or_default();
        text.ends_with('\n')
    });
    text.trim().parse().expect("a pid")
}

/// A provider script that waits for the test's `go` file, then starts an orphaned member through
/// `launcher` (`env -i`, `setsid env -i`) that writes its pid to the `member` file and sleeps
/// `member_secs`, and becomes `sleep provider_secs` itself. Returns the `go` path and the script.
fn member_on_go(st: &State, launcher: &str, member_secs: &str, provider_secs: &str) -> (std::path::PathBuf, String) {
    let go = st.path().join("go");
    let script = format!(
        "while [ ! -e {go} ]; do sleep 0.02; done; ({launcher} sh -c 'echo $$ > {pf}; exec sleep {member_secs}' &); exec sleep {provider_secs}",
        go = go.display(),
        pf = st.path().join("member").display()
    );
    (go, script)
}

#[test]
fn reap_stops_a_member_that_cleared_its_environment_in_the_provider_group_after_the_supervisor_died() {
    // Born after the supervisor's SIGKILL, so nobody recorded it and it carries no tag: only the
    // recorded group (and session) says it is the entry's.
    let st = State::new();
    let guard = Guard::new();
    let (go, script) = member_on_go(&st, "env -i", "3333", "601");
    let v = st.start(&["--name", "x", "--", "sh", "-c", &script]);
    let sup = v["supervisorPid"].as_i64().unwrap() as i32;
    guard.track(sup);
    kill_supervisor_and_keeper(sup);
    assert_eq!(wait_gone(&[sup], SECS(5)), Vec::<i32>::new());
    std::fs::write(&go, "").unwrap();
    let member = pid_file(&st, "member");
    guard.track(member);
    // The provider dies too: only the group member is left.
    let provider = v["pid"].as_i64().unwrap() as i32;
    guard.track(provider);
    until(SECS(5), "the provider's exec", || sheepdog::os::procfs::cmdline(pid(provider)).contains("601"));
    signal(provider, libc::SIGKILL);
    assert_eq!(wait_gone(&[provider], SECS(5)), Vec::<i32>::new());
    assert_eq!(st.entry(&id_of(&v))["status"], "orphaned", "a member of the recorded group is alive");
    let out = st.ok(&["reap"]);
    assert!(out.starts_with("Reaped x ("), "{out}");
    assert_eq!(wait_gone(&[member], SECS(5)), Vec::<i32>::new(), "the env -i member survived reap");
    assert_eq!(st.entry(&id_of(&v))["treeGone"], true);
}

#[test]
fn reap_stops_a_member_that_cleared_its_environment_in_its_own_session_by_its_recorded_identity() {
    let st = State::new();
    let guard = Guard::new();
    let script = format!(
        "(setsid env -i sh -c 'echo $$ > {pf}; exec sleep 3334' &); exec sleep 602",
        pf = st.path().join("member").display()
    );
    let v = st.start(&["--name", "y", "--", "sh", "-c", &script]);
    let id = id_of(&v);
    let member = pid_file(&st, "member");
    guard.track(member);
    // The supervisor records the descendants it sees; wait until it has seen this one.
    let entry_file = st.path().join("procs").join(&id).join("entry.json");
    until(SECS(10), "the member recorded", || {
        std::fs::read_to_string(&entry_file).unwrap_or_default().contains(&format!("\"pid\": {member}"))
    });
    let sup = v["supervisorPid"].as_i64().unwrap() as i32;
    guard.track(sup);
    kill_supervisor_and_keeper(sup);
    assert_eq!(wait_gone(&[sup], SECS(5)), Vec::<i32>::new());
    // The provider dies too: only the recorded member is left, with neither tag nor group.
    let provider = v["pid"].as_i64().unwrap() as i32;
    guard.track(provider);
    signal(provider, libc::SIGKILL);
    assert_eq!(wait_gone(&[provider], SECS(5)), Vec::<i32>::new());
    assert_eq!(st.entry(&id)["status"], "orphaned", "a recorded member is alive");
    let _ = st.ok(&["reap"]);
    assert_eq!(wait_gone(&[member], SECS(5)), Vec::<i32>::new(), "the setsid env -i member survived reap");
    assert_eq!(st.entry(&id)["treeGone"], true);
}

#[test]
fn stop_past_a_stopped_supervisor_also_stops_members_that_cleared_their_environment() {
    let st = State::new();
    let guard = Guard::new();
    let script = format!(
        "(env -i sh -c 'echo $$ > {pf}; exec sleep 3335' &); exec sleep 603",
        pf = st.path().join("member").display()
    );
    let v = st.start(&["--term-grace", "200ms", "--kill-wait", "500ms", "--", "sh", "-c", &script]);
    let member = pid_file(&st, "member");
    guard.track(member);
    let sup = v["supervisorPid"].as_i64().unwrap() as i32;
    guard.track(sup);
    signal(sup, libc::SIGSTOP);
    let out = st.run(&["stop", &id_of(&v)]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(wait_gone(&[member], SECS(5)), Vec::<i32>::new(), "stop said gone while a member lived");
}

#[test]
fn on_a_full_disk_stop_still_stops_the_tree_and_says_the_result_was_not_recorded() {
    // A private mount namespace with a 1 MiB tmpfs as the state dir, filled to the last byte.
    let body = r#"
    v = start("--", "sleep", "100")
    fill()
    r = subprocess.run([S, "--state-dir", state, "stop", "--term-grace", "1s", v["id"]], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    print("rc", r.returncode, flush=True)
    print("err", r.stderr.decode().strip().replace("\n", " | "), flush=True)
"#;
    let st = State::new();
    let guard = Guard::new();
    let Some((mut child, lines, pids)) = on_a_full_disk(&st, &guard, body) else { return };
    let rc = lines.expect("rc", SECS(30));
    let err = lines.next(SECS(10));
    wait_child(&mut child, SECS(10));
    assert_eq!(wait_gone(&pids, SECS(5)), Vec::<i32>::new(), "the tree must be stopped on a full disk too");
    assert_eq!(rc, ["74"], "{err}");
    assert!(err.contains("is gone") && err.contains("could not be recorded"), "{err}");
    assert_eq!(err.matches("sheepdog:").count(), 1, "one line: {err}");
}

/// Waits for `needle` in the entry's stdout log and returns the first word after it.
fn logged_word(st: &State, id: &str, needle: &str) -> i32 {
    let text = st.wait_log(id, "stdout.log", needle);
    let rest = &text[text.find(needle).unwrap() + needle.len()..];
    rest.split_whitespace().next().unwrap().parse().expect("a pid after the needle")
}

#[test]
fn stop_past_a_stopped_supervisor_takes_its_unrecorded_orphans_before_killing_it() {
    // The orphan is born after the supervisor was stopped, so it was never recorded; it is
    // re-parented to the stopped supervisor (its subreaper), outside the group and session,
    // without a tag.
    let st = State::new();
    let guard = Guard::new();
    let (go, script) = member_on_go(&st, "setsid env -i", "1238", "1239");
    let v = st.start(&["--term-grace", "300ms", "--kill-wait", "300ms", "--", "sh", "-c", &script]);
    let id = id_of(&v);
    let sup = v["supervisorPid"].as_i64().unwrap() as i32;
    guard.track(sup);
    signal(sup, libc::SIGSTOP);
    std::fs::write(&go, "").unwrap();
    let member = pid_file(&st, "member");
    guard.track(member);
    let out = st.run(&["stop", &id]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(wait_gone(&[member], SECS(5)), Vec::<i32>::new(), "stop said gone while an orphan lived");
    assert_eq!(st.entry(&id)["treeGone"], true);
}

#[test]
fn a_recorded_member_that_switched_uid_is_still_reaped() {
    if std::process::Command::new("setpriv").arg("--version").output().is_err() || sheepdog::os::process::getuid() != 0
    {
        eprintln!("SKIPPED: needs setpriv and root to switch a member's uid");
        return;
    }
    let st = State::new();
    let guard = Guard::new();
    let script = "(setpriv --reuid=65534 --regid=65534 --clear-groups sh -c 'echo member $$; exec sleep 1244' &); exec sleep 1245";
    let v = st.start(&["--", "sh", "-c", script]);
    let id = id_of(&v);
    let member = logged_word(&st, &id, "member ");
    guard.track(member);
    let entry_file = st.path().join("procs").join(&id).join("entry.json");
    until(SECS(10), "the member recorded", || {
        std::fs::read_to_string(&entry_file).unwrap_or_default().contains(&format!("\"pid\": {member}"))
    });
    let sup = v["supervisorPid"].as_i64().unwrap() as i32;
    guard.track(sup);
    kill_supervisor_and_keeper(sup);
    assert_eq!(wait_gone(&[sup], SECS(5)), Vec::<i32>::new());
    let _ = st.ok(&["reap"]);
    assert_eq!(wait_gone(&[member], SECS(5)), Vec::<i32>::new(), "a recorded member of another uid survived");
    assert_eq!(st.entry(&id)["treeGone"], true);
}

#[test]
fn wait_right_after_owner_death_holds_for_the_cleanup_the_supervisor_is_about_to_run() {
    let st = State::new();
    let guard = Guard::new();
    for _ in 0..3 {
        let mut owner = guard.sleeper();
        let id =
            id_of(&st.start(&["--owner", &owner.id().to_string(), "--cleanup", "sleep 0.5; echo done", "--", "true"]));
        let _ = st.run(&["wait", &id]);
        owner.kill().unwrap();
        owner.wait().unwrap();
        let out = st.run(&["wait", "--json", &id]);
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
        assert_eq!(doc["waited"][0]["cleanupResult"]["exitCode"], 0, "wait returned before the cleanup: {doc}");
    }
}

#[test]
fn a_cleanup_whose_runner_was_killed_still_counts_as_running_while_it_runs() {
    let st = State::new();
    let guard = Guard::new();
    let mark = st.path().join("cleaned");
    let cleanup = format!("sleep 1.5; echo b > {}", mark.display());
    let id = id_of(&st.start(&["--session", "sx", "--cleanup", &cleanup, "--", "true"]));
    let _ = st.run(&["wait", &id]);
    let mut stop = st.cmd(&["stop", &id]).stdout(Stdio::null()).spawn().unwrap();
    guard.track_child(&stop);
    let entry_file = st.path().join("procs").join(&id).join("entry.json");
    until(SECS(10), "the cleanup spawned", || {
        let text = std::fs::read_to_string(&entry_file).unwrap_or_default();
        serde_json::from_str::<serde_json::Value>(&text).is_ok_and(|v| v["cleanupPid"].is_number())
    });
    stop.kill().unwrap();
    stop.wait().unwrap();
    let out = st.run(&["clear", &id]);
    assert_eq!(out.status.code(), Some(1), "clear while the cleanup still runs");
    // A selection waits for it too, instead of saying nothing matched.
    let out = st.run(&["stop", "--session", "sx"]);
    assert_eq!(out.status.code(), Some(1), "its result is unknown (the runner was killed): {out:?} {}", st.entry(&id));
    assert!(String::from_utf8_lossy(&out.stdout).contains("had already exited (0)"), "{out:?}");
    assert!(mark.exists(), "stop --session returned before the cleanup ended");
    let _ = st.run(&["wait", &id]);
    assert_eq!(st.ok(&["clear", &id]), format!("Cleared {id}.\n"));
}

#[test]
fn a_reader_that_went_away_is_not_a_crash() {
    // stdout is a pipe whose read end is already closed: every write fails with EPIPE.
    let st = State::new();
    let id = id_of(&st.start(&["--", "sh", "-c", "exit 3"]));
    let _ = st.run(&["wait", &id]);
    let out = host(
        &st,
        &format!(
            r#"
import os, subprocess
S, D = os.environ["SHEEPDOG"], os.environ["STATE"]
for args in (["ps", "--all", "--json"], ["wait", "--json", "{id}"], ["ps", "--all"], ["logs", "{id}"], ["doctor"]):
    r, w = os.pipe()
    os.close(r)
    p = subprocess.run([S, "--state-dir", D] + args, stdout=w, stderr=subprocess.PIPE)
    os.close(w)
    print(args[0], p.returncode, b"panicked" in p.stderr)
"#
        ),
    );
    for line in out.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(parts[2], "False", "{line}: panicked on a closed stdout");
        assert_ne!(parts[1], "101", "{line}");
    }
}

/// `reap` under libfaketime (Debian's `faketime`), whose wall clock is shifted by `shift`
/// (`+2h`); the monotonic clock and `/proc/uptime` stay real. `None` where libfaketime is absent.
fn reap_with_wall_clock(st: &State, shift: &str) -> Option<std::process::Output> {
    let lib =
        ["/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1", "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())?;
    let out = st
        .cmd(&["reap"])
        .env("LD_PRELOAD", lib)
        .env("FAKETIME", shift)
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .stdin(Stdio::null())
        .output()
        .expect("run reap");
    Some(out)
}

#[test]
fn issue_34_a_turn_timeout_deadline_follows_the_boot_clock_not_a_wall_clock_jump() {
    let st = State::new();
    let guard = Guard::new();
    // A 30-minute turn: a +2 h step of the wall clock must not make it due.
    let mut long = guard.sleeper();
    let id = wrapper_with_cleanup(&st, long.id(), &["--timeout", "30m"]);
    let sup = st.entry(&id)["supervisorPid"].as_i64().unwrap() as i32;
    kill_supervisor_and_keeper(sup);
    let Some(out) = reap_with_wall_clock(&st, "+2h") else {
        println!("SKIPPED: libfaketime is not installed (apt-get install faketime)");
        let _ = long.kill();
        let _ = long.wait();
        return;
    };
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(cleanups_run(&st), 0, "a wall-clock jump made a 30-minute turn's cleanup run");
    let _ = long.kill();
    let _ = long.wait();

    // A 1-second turn that has passed is due, though the wall clock was set 2 h back.
    let st = State::new();
    let mut short = guard.sleeper();
    let id = wrapper_with_cleanup(&st, short.id(), &["--timeout", "1s"]);
    let sup = st.entry(&id)["supervisorPid"].as_i64().unwrap() as i32;
    kill_supervisor_and_keeper(sup);
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let out = reap_with_wall_clock(&st, "-2h").expect("libfaketime was found above");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("the turn timeout passed"), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(cleanups_run(&st), 1);
    let _ = short.wait(); // the cleanup killed it
}

#[test]
fn issue_34_a_command_that_dumped_core_says_so_in_the_events_and_the_json_documents() {
    let cwd = tempfile::tempdir().unwrap();
    let script = "ulimit -c unlimited 2>/dev/null; kill -SEGV $$";
    // Control: does this machine write a core here at all (core_pattern, the hard limit)?
    let bare = std::process::Command::new("sh").args(["-c", script]).current_dir(cwd.path()).status().unwrap();
    let dumps = std::os::unix::process::ExitStatusExt::core_dumped(&bare);
    if !dumps {
        println!("SKIPPED: no core is written here (core_pattern or RLIMIT_CORE)");
        return;
    }
    // `run`: the exited event.
    let out = sheepdog()
        .args(["run", "--events-fd", "1", "--", "sh", "-c", script])
        .current_dir(cwd.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let events = String::from_utf8_lossy(&out.stdout);
    let exited = events.lines().find(|l| l.contains("\"event\":\"exited\"")).unwrap_or_default();
    assert!(exited.contains("\"signal\":\"SIGSEGV\"") && exited.contains("\"coreDumped\":true"), "{events}");

    // A managed entry: its view, its status text and the journal's exited event.
    let st = State::new();
    let _guard = Guard::new();
    let mut start = st.cmd(&["start", "--json", "--", "sh", "-c", script]);
    let out = start.current_dir(cwd.path()).stdin(Stdio::null()).output().unwrap();
    let id = id_of(&serde_json::from_slice(&out.stdout).unwrap());
    let _ = st.run(&["wait", &id]);
    let e = st.entry(&id);
    assert_eq!((e["signal"].as_str(), &e["coreDumped"]), (Some("SIGSEGV"), &serde_json::json!(true)), "{e}");
    assert_eq!(e["statusText"], "killed (SIGSEGV, core dumped)", "{e}");
    let journal = st.ok(&["--json", "events", "--since", "0", "--no-follow"]);
    let exited = journal.lines().find(|l| l.contains("\"exited\"")).unwrap_or_default();
    assert!(exited.contains("\"coreDumped\":true"), "{journal}");
    // A signal that dumps nothing says false.
    let plain = id_of(&st.start(&["--", "sh", "-c", "kill -TERM $$"]));
    let _ = st.run(&["wait", &plain]);
    assert_eq!(st.entry(&plain)["coreDumped"], false);
}
