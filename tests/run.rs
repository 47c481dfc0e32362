//! `sheepdog run`, driven as a host would: real process trees, real signals, checked with the
//! kernel. Every test tracks what it spawned in a `Guard` that kills by recorded identity.
// Linux only: these tests read /proc and rely on the subreaper; macOS is checked by clippy alone.
#![cfg(target_os = "linux")]

mod common;

use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;

fn status_of(args: &[&str]) -> std::process::ExitStatus {
    let guard = Guard::new();
    let (mut child, _lines) = spawn_run(args, &guard);
    wait_child(&mut child, SECS(20))
}

#[test]
fn exits_with_the_providers_code() {
    assert_eq!(status_of(&["--", "sh", "-c", "exit 0"]).code(), Some(0));
    assert_eq!(status_of(&["--", "sh", "-c", "exit 3"]).code(), Some(3));
}

/// `run` is parsed by a command line of its own (`RunCli`: clap then builds no other
/// subcommand); its help and its errors are the full command line's, word for word.
#[test]
fn run_parsed_alone_has_the_help_and_errors_of_the_whole_command_line() {
    let out = |args: &[&str]| {
        let o = sheepdog().args(args).stdin(Stdio::null()).output().expect("sheepdog");
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let alone = out(&["run", "--help"]);
    assert_eq!(alone, out(&["help", "run"]), "`run --help` against the whole command line's help for run");
    assert!(alone.1.contains("--leftovers") && alone.1.contains("--state-dir"), "{}", alone.1);
    // A bad flag: the same line and status through either parser (`--json` first or not).
    let (code, _, err) = out(&["--json", "run", "--stdin", "bogus", "--", "true"]);
    assert_eq!(code, Some(125), "{err}");
    assert!(err.starts_with("sheepdog: invalid value 'bogus' for '--stdin <MODE>'"), "{err}");
    assert!(err.contains("(see 'sheepdog run --help')"), "{err}");
}

#[test]
fn dies_by_the_signal_that_killed_the_provider() {
    let st = status_of(&["--", "sh", "-c", "kill -USR1 $$"]);
    assert_eq!(st.signal(), Some(libc::SIGUSR1), "{st:?}");
}

#[test]
fn provider_runs_in_its_own_group_and_writes_to_the_supervisors_own_stdout() {
    let guard = Guard::new();
    // The supervisor starts with SIGINT and SIGHUP ignored (as a background job would be);
    // the provider must still start with every disposition at its default and an empty mask.
    let src = r#"
import os
st = {}
for l in open('/proc/self/status'):
    k, v = l.split(':', 1)
    st[k] = v.strip()
sup = os.getppid()
fields = open(f'/proc/{sup}/stat').read().rsplit(')', 1)[1].split()
sup_pgrp, sup_parent = int(fields[2]), int(fields[1])
print('ids', os.getpid(), os.getpgrp(), sup, sup_pgrp, sup_parent, flush=True)
print('fd1', os.readlink('/proc/self/fd/1'), os.readlink(f'/proc/{sup}/fd/1'), flush=True)
"#;
    let script = format!("trap '' INT HUP; exec {} run -- python3 -c \"$1\"", bin());
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", &script, "sh", src]).env_clear().env("PATH", std::env::var("PATH").unwrap()).stdin(Stdio::null());
    let (mut child, lines) = spawn_lines(cmd, &guard);
    let ids = lines.pids("ids", SECS(10));
    let (pid, pgrp, keeper, keeper_pgrp, keeper_parent) = (ids[0], ids[1], ids[2], ids[3], ids[4]);
    assert_eq!(pgrp, pid, "the provider leads its own process group");
    assert_ne!(keeper_pgrp, pgrp, "the supervisor's keeper is not in the provider's group");
    // The provider's parent is the supervisor's keeper (issue 16), whose parent is the supervisor.
    assert_ne!(keeper, child.id() as i32);
    assert_eq!(keeper_parent, child.id() as i32, "sh exec'd into the supervisor, the keeper's parent");
    let fd1 = lines.expect("fd1", SECS(5));
    assert!(fd1[0].starts_with("pipe:"), "{fd1:?}");
    assert_eq!(fd1[0], fd1[1], "the provider writes to the supervisor's own stdout, not a copy");
    assert_eq!(wait_child(&mut child, SECS(10)).code(), Some(0));
}

#[test]
fn provider_starts_with_default_signal_dispositions_and_an_empty_mask() {
    // The supervisor starts with SIGINT, SIGHUP and SIGQUIT ignored (as a background job of a
    // shell would be); grep reads its own /proc status, before any runtime could change it.
    let script = format!("trap '' INT HUP QUIT; exec {} run -- grep -E '^Sig(Ign|Blk)' /proc/self/status", bin());
    let out = std::process::Command::new("sh").args(["-c", &script]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text, "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n");
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn provider_gets_the_environment_unchanged() {
    let out = sheepdog()
        .args(["run", "--", "/usr/bin/env"])
        .env_clear()
        .env("SHEEPDOG_TEST_MARK", "kept")
        .env("ANOTHER", "a=b c")
        .output()
        .unwrap();
    let mut got: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect();
    got.sort();
    assert_eq!(got, ["ANOTHER=a=b c", "SHEEPDOG_TEST_MARK=kept"]);
}

#[test]
fn a_stop_that_lands_right_after_the_spawn_still_stops_the_provider() {
    // Signal handling is in place before the spawn: SIGTERM sent the moment the child exists
    // must run the one stop, not kill the supervisor and orphan the provider.
    for _ in 0..15 {
        let guard = Guard::new();
        let (mut child, _lines) = spawn_run(&["--", "sleep", "100"], &guard);
        let sup = child.id() as i32;
        let end = Instant::now() + SECS(10);
        let provider = loop {
            let kids = sheepdog::os::procfs::children(pid(sup));
            if let Some(k) = kids.first() {
                break k.as_raw();
            }
            assert!(Instant::now() < end, "provider never appeared");
            std::hint::spin_loop();
        };
        signal(sup, libc::SIGTERM);
        guard.track(provider);
        let st = wait_child(&mut child, SECS(10));
        assert_eq!(st.signal(), Some(libc::SIGTERM), "{st:?}");
        assert!(!alive(provider), "provider {provider} survived");
    }
}

#[test]
fn owner_that_is_not_the_parent_is_refused_before_the_provider_runs() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let guard = Guard::new();
    let cmd = format!("touch {}", marker.display());
    let (mut child, _lines) = spawn_run(&["--owner", "1", "--", "sh", "-c", &cmd], &guard);
    let st = wait_child(&mut child, SECS(10));
    let err = stderr_of(&mut child);
    assert_eq!(st.code(), Some(125));
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("sheepdog: owner 1 is not the parent"), "{err}");
    assert!(!marker.exists(), "the provider must never run");
}

/// An owner (python) that starts `sheepdog run --owner <itself>` and reports its pid. With
/// `quiet_pipe`, the supervisor's stdout/stderr go to a pipe the owner never reads, so after
/// the owner's death every write there hits a closed pipe.
fn owner_script(provider: &[&str], quiet_pipe: bool) -> String {
    let argv: Vec<String> = provider.iter().map(|a| format!("{a:?}")).collect();
    // With the pipe, sheepdog's events also go there (--events-fd 2): it must write to the
    // closed pipe after the owner's death and neither die of SIGPIPE nor stall.
    let (pipes, events) = if quiet_pipe {
        ("stdout=subprocess.PIPE, stderr=subprocess.STDOUT", "'--events-fd', '2', ")
    } else {
        ("", "")
    };
    format!(
        r#"
import os, subprocess, sys, time
p = subprocess.Popen([{bin:?}, 'run', '--owner', str(os.getpid()), {events}'--term-grace', '2s', '--', {argv}], {pipes})
print('sup', p.pid, flush=True)
time.sleep(100)
"#,
        bin = bin(),
        argv = argv.join(", ")
    )
}

/// Runs an owner script; its stdin is a pipe this test holds open for the whole run (so stdin
/// EOF is never what stops anything). Returns the owner, that stdin, its output lines and the
/// supervisor's pid from its `sup PID` line.
fn spawn_owner(script: &str, guard: &Guard) -> (std::process::Child, Option<std::process::ChildStdin>, Lines, i32) {
    let mut cmd = std::process::Command::new("python3");
    cmd.args(["-c", script]).stdin(Stdio::piped());
    let (mut owner, lines) = spawn_lines(cmd, guard);
    let stdin = owner.stdin.take();
    let sup = lines.pids("sup", SECS(10))[0];
    guard.track(sup);
    (owner, stdin, lines, sup)
}

#[test]
fn owner_killed_while_another_process_holds_stdin_stops_the_tree_with_sigterm_first() {
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("term");
    let provider =
        format!("trap 'echo term >> {m}; exit 0' TERM; sleep 100 & echo tree $$ $!; wait", m = mark.display());
    let guard = Guard::new();
    let (mut owner, _stdin, lines, sup) = spawn_owner(&owner_script(&["sh", "-c", &provider], false), &guard);
    let tree = lines.pids("tree", SECS(10));
    tree.iter().for_each(|p| guard.track(*p));

    owner.kill().unwrap();
    owner.wait().unwrap();
    let mut all = tree.clone();
    all.push(sup);
    assert_eq!(wait_gone(&all, SECS(4)), Vec::<i32>::new(), "survivors after owner death");
    let got = std::fs::read_to_string(&mark).unwrap_or_default();
    assert_eq!(got.trim(), "term", "owner death sends SIGTERM first, never an immediate SIGKILL");
}

#[test]
fn owner_killed_while_provider_floods_a_pipe_nobody_reads_the_supervisor_still_stops_the_tree() {
    sheepdog::os::process::set_child_subreaper().unwrap(); // to collect the orphaned supervisor's status
    let provider = py(r#"
import os, sys, time
kid = os.fork()
if kid == 0:
    time.sleep(100); os._exit(0)
print('tree', os.getpid(), kid, file=sys.stderr, flush=True)
while True:
    sys.stdout.write('x' * 64 + '\n'); sys.stdout.flush(); time.sleep(0.003)
"#);
    let argv: Vec<&str> = provider.iter().map(String::as_str).collect();
    let guard = Guard::new();
    // The owner's stderr (inherited by sheepdog... but redirected to its pipe) is not ours:
    // the provider reports its tree on stderr, which goes into the owner's unread pipe, so
    // read the tree from /proc instead.
    let (mut owner, _stdin, _lines, sup) = spawn_owner(&owner_script(&argv, true), &guard);
    let end = Instant::now() + SECS(10);
    let tree = loop {
        let d: Vec<i32> = sheepdog::os::procfs::descendants(pid(sup)).iter().map(|s| s.pid.as_raw()).collect();
        if d.len() >= 2 {
            break d;
        }
        assert!(Instant::now() < end, "tree never appeared");
        std::thread::sleep(Duration::from_millis(5));
    };
    tree.iter().for_each(|p| guard.track(*p));
    std::thread::sleep(Duration::from_millis(100)); // let the pipe fill with unread output

    owner.kill().unwrap();
    owner.wait().unwrap();
    let mut all = tree.clone();
    all.push(sup);
    assert_eq!(wait_gone(&all, SECS(4)), Vec::<i32>::new(), "survivors after owner death");
    // The orphaned supervisor was re-parented to this test (a subreaper): read how it ended.
    let st = sheepdog::os::process::reap(pid(sup), true).unwrap();
    match st {
        Some(sheepdog::os::WaitStatus::Exited(code)) => assert!(code > 128, "status {code}"),
        other => panic!("the supervisor must exit, not die of a closed pipe: {other:?}"),
    }
}

#[test]
fn stdin_eof_fast_path_provider_that_exits_on_eof_ends_well_under_the_grace() {
    let guard = Guard::new();
    let mut child = sheepdog()
        .args(["run", "--on-stdin-eof", "stop", "--stdin-grace", "10s", "--"])
        .args(py("import sys; sys.stdin.read(); print('eof', flush=True)"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    guard.track_child(&child);
    let lines = Lines::new(child.stdout.take().unwrap());
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"hello\n").unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    drop(stdin);
    lines.expect("eof", SECS(5));
    let st = wait_child(&mut child, SECS(10));
    assert_eq!(st.code(), Some(0));
    assert!(t0.elapsed() < SECS(5), "took {:?}: waited for the 10 s grace", t0.elapsed());
}

#[test]
fn stdin_eof_slow_path_sends_sigterm_no_sooner_than_the_grace() {
    let guard = Guard::new();
    let mut child = sheepdog()
        .args(["run", "--on-stdin-eof", "stop", "--stdin-grace", "600ms", "--", "sleep", "100"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    guard.track_child(&child);
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    drop(child.stdin.take());
    let st = wait_child(&mut child, SECS(10));
    let took = t0.elapsed();
    assert_eq!(st.code(), Some(128 + libc::SIGTERM), "{st:?}");
    assert!(took >= Duration::from_millis(600), "SIGTERM after {took:?}, before the grace");
    assert!(took < SECS(3), "took {took:?}");
}

#[test]
fn stdin_eof_is_ignored_by_default() {
    let guard = Guard::new();
    let mut child =
        sheepdog().args(["run", "--", "sh", "-c", "sleep 0.5; exit 7"]).stdin(Stdio::piped()).spawn().unwrap();
    guard.track_child(&child);
    drop(child.stdin.take());
    assert_eq!(wait_child(&mut child, SECS(10)).code(), Some(7));
}

/// A provider whose child starts a new session, forks a grandchild and exits: the grandchild
/// is an orphan in another session and group, reachable only through the subreaper.
const NEW_SESSION_TREE: &str = r#"
import os, time
r, w = os.pipe()
kid = os.fork()
if kid == 0:
    os.setsid()
    if os.fork() == 0:
        os.write(w, b'%d' % os.getpid()); time.sleep(100); os._exit(0)
    os._exit(0)
os.waitpid(kid, 0)
os.close(w)
print('tree', os.read(r, 32).decode(), flush=True)
time.sleep(100)
"#;

#[test]
fn a_descendant_in_its_own_session_survives_nothing() {
    let guard = Guard::new();
    let (mut child, lines) = spawn_run(&["--term-grace", "1s", "--", "python3", "-c", NEW_SESSION_TREE], &guard);
    let tree = lines.pids("tree", SECS(10));
    tree.iter().for_each(|p| guard.track(*p));
    let st = sheepdog::os::procfs::stat(pid(tree[0])).unwrap();
    assert_ne!(st.session, sheepdog::os::procfs::stat(pid(child.id() as i32)).unwrap().session);
    signal(child.id() as i32, libc::SIGTERM);
    let status = wait_child(&mut child, SECS(10));
    assert_eq!(status.signal(), Some(libc::SIGTERM));
    assert_eq!(wait_gone(&tree, Duration::ZERO), Vec::<i32>::new(), "alive after the supervisor exited");
}

#[test]
fn double_forked_orphans_are_stopped_when_the_provider_exits_on_its_own() {
    let guard = Guard::new();
    let src = r#"
import os, time
r, w = os.pipe()
if os.fork() == 0:
    if os.fork() == 0:
        os.write(w, b'%d' % os.getpid()); time.sleep(100); os._exit(0)
    os._exit(0)
os.wait()
os.close(w)
print('orphan', os.read(r, 32).decode(), flush=True)
"#;
    let (mut child, lines) = spawn_run(&["--", "python3", "-c", src], &guard);
    let orphan = lines.pids("orphan", SECS(10));
    orphan.iter().for_each(|p| guard.track(*p));
    let st = wait_child(&mut child, SECS(10));
    assert_eq!(st.code(), Some(0));
    assert_eq!(wait_gone(&orphan, Duration::ZERO), Vec::<i32>::new(), "orphan outlived the supervisor");
}

#[test]
fn a_background_job_of_a_non_interactive_shell_is_stopped_after_the_shell_exits() {
    let guard = Guard::new();
    let (mut child, lines) = spawn_run(&["--", "sh", "-c", "sleep 100 & echo job $!; exit 0"], &guard);
    let job = lines.pids("job", SECS(10))[0];
    guard.track(job);
    let st = wait_child(&mut child, SECS(10));
    assert_eq!(st.code(), Some(0), "the provider's own status");
    assert!(!alive(job), "background job {job} outlived the supervisor");
}

/// sh (ignores SIGTERM) with a grandchild that ignores it too: only SIGKILL ends them.
const STUBBORN: &str = "trap '' TERM; (trap '' TERM; exec sleep 100) & echo tree $$ $!; wait";

#[test]
fn sigterm_escalates_to_sigkill_and_the_supervisor_dies_by_sigterm_after_the_group_is_empty() {
    let guard = Guard::new();
    let (mut child, lines) = spawn_run(&["--term-grace", "500ms", "--", "sh", "-c", STUBBORN], &guard);
    let tree = lines.pids("tree", SECS(10));
    tree.iter().for_each(|p| guard.track(*p));
    let pgid = sheepdog::os::Pgid::new(tree[0]).unwrap();
    let t0 = Instant::now();
    signal(child.id() as i32, libc::SIGTERM);
    let st = wait_child(&mut child, SECS(10));
    let took = t0.elapsed();
    assert_eq!(st.signal(), Some(libc::SIGTERM), "{st:?}");
    assert!(took >= Duration::from_millis(500), "SIGKILL before the grace: {took:?}");
    assert!(sheepdog::os::procfs::live_group_members(pgid).is_empty(), "group not empty at exit");
    assert_eq!(wait_gone(&tree, Duration::ZERO), Vec::<i32>::new());
}

#[test]
fn a_grandchild_that_needs_300ms_to_clean_up_after_sigterm_gets_them() {
    let dir = tempfile::tempdir().unwrap();
    let done = dir.path().join("cleaned");
    let src = format!(
        r#"
import os, signal, time
kid = os.fork()
if kid == 0:
    def on_term(*_):
        time.sleep(0.3)
        open({done:?}, 'w').write('yes')
        os._exit(0)
    signal.signal(signal.SIGTERM, on_term)
    print('tree', os.getpid(), flush=True)
    while True: time.sleep(1)
time.sleep(100)
"#,
        done = done.display().to_string()
    );
    let guard = Guard::new();
    let (mut child, lines) = spawn_run(&["--", "python3", "-c", &src], &guard);
    let tree = lines.pids("tree", SECS(10));
    tree.iter().for_each(|p| guard.track(*p));
    let t0 = Instant::now();
    signal(child.id() as i32, libc::SIGTERM);
    let st = wait_child(&mut child, SECS(10));
    assert_eq!(st.signal(), Some(libc::SIGTERM));
    assert!(t0.elapsed() >= Duration::from_millis(300));
    assert_eq!(std::fs::read_to_string(&done).unwrap_or_default(), "yes", "cleanup was cut short");
}

#[test]
fn exits_as_soon_as_the_last_descendant_dies_not_at_the_end_of_the_grace() {
    // The provider exits at once; its grandchild ignores SIGTERM and exits by itself after
    // 400 ms. With a 5 s grace, an event-driven supervisor exits right after the grandchild.
    let src = r#"
import os, signal, time
if os.fork() == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.setsid()
    time.sleep(0.4); os._exit(0)
"#;
    let guard = Guard::new();
    let t0 = Instant::now();
    let (mut child, _lines) = spawn_run(&["--term-grace", "5s", "--", "python3", "-c", src], &guard);
    let st = wait_child(&mut child, SECS(10));
    let took = t0.elapsed();
    assert_eq!(st.code(), Some(0));
    assert!(took >= Duration::from_millis(400), "exited before the grandchild: {took:?}");
    assert!(took < Duration::from_millis(2500), "waited for the grace: {took:?}");
}

#[test]
fn forty_supervisors_torn_down_at_once_leave_no_survivor() {
    let guard = Guard::new();
    let mut sups = Vec::new();
    let mut tree = Vec::new();
    for _ in 0..40 {
        let (child, lines) = spawn_run(&["--term-grace", "500ms", "--", "sh", "-c", STUBBORN], &guard);
        sups.push((child, lines));
    }
    for (_, lines) in &sups {
        let t = lines.pids("tree", SECS(20));
        t.iter().for_each(|p| guard.track(*p));
        tree.extend(t);
    }
    for (child, _) in &sups {
        signal(child.id() as i32, libc::SIGTERM);
    }
    for (child, _) in &mut sups {
        let st = wait_child(child, SECS(20));
        assert_eq!(st.signal(), Some(libc::SIGTERM), "{st:?}");
    }
    assert_eq!(wait_gone(&tree, Duration::ZERO), Vec::<i32>::new(), "survivors");
}

fn events_of(args: &str, signal_after: Option<Duration>) -> (std::process::ExitStatus, Vec<serde_json::Value>) {
    let guard = Guard::new();
    let script = format!("exec {} run --events-fd 3 {args} 3>&1 >/dev/null", bin());
    let (mut child, lines) = spawn_script("sh", &script, &guard);
    let mut events = vec![lines.next(SECS(10))];
    if let Some(after) = signal_after {
        std::thread::sleep(after);
        signal(child.id() as i32, libc::SIGTERM);
    }
    let st = wait_child(&mut child, SECS(10));
    while let Some(l) = lines.try_next(Duration::from_millis(500)) {
        events.push(l);
    }
    (st, events.iter().map(|l| serde_json::from_str(l).expect("one JSON object per line")).collect())
}

#[test]
fn events_fd_reports_spawned_and_exited() {
    let (st, ev) = events_of("-- sh -c 'exit 3'", None);
    assert_eq!(st.code(), Some(3));
    assert_eq!(ev.len(), 2, "{ev:?}");
    assert_eq!(ev[0]["event"], "spawned");
    assert!(ev[0]["pid"].as_i64().unwrap() > 0);
    assert_eq!(ev[0]["pid"], ev[0]["pgid"]);
    assert_eq!(ev[0]["maxStopMs"], 5500);
    assert_eq!(ev[1]["event"], "exited");
    assert_eq!(ev[1]["exitCode"], 3);
    assert_eq!(ev[1]["exitStatus"], 3, "sheepdog's own exit");
    assert_eq!(ev[1]["code"], 3, "the deprecated v1 name stays readable");
    assert_eq!(ev[1]["signal"], serde_json::Value::Null);
    assert_eq!(ev[1]["treeGone"], true);
    assert!(ev.iter().all(|e| e["v"] == 1), "{ev:?}");
}

#[test]
fn events_fd_reports_stopping_and_escalated() {
    let (st, ev) = events_of(&format!("--term-grace 300ms -- sh -c \"{STUBBORN}\""), Some(Duration::from_millis(300)));
    assert_eq!(st.signal(), Some(libc::SIGTERM));
    let names: Vec<&str> = ev.iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(names, ["spawned", "stopping", "escalated", "exited"], "{ev:?}");
    assert_eq!(ev[1]["trigger"], "signal");
    assert_eq!(ev[1]["signal"], "SIGTERM");
    assert_eq!(ev[2]["signal"], "SIGKILL");
    assert!(ev[2]["remaining"].as_u64().unwrap() >= 1);
    assert_eq!(ev[3]["signal"], "SIGKILL");
    assert_eq!(ev[3]["treeGone"], true);
}

#[test]
fn bad_input_gets_one_line_and_status_125() {
    for args in [
        vec!["run", "--term-grace", "5x", "--", "true"],
        vec!["run", "--kill-wait", "10", "--", "true"],
        vec!["run", "--bogus", "--", "true"],
        vec!["run"],
        vec!["run", "--on-stdin-eof", "maybe", "--", "true"],
        vec!["run", "--owner", "0", "--", "true"],
        vec!["run", "--events-fd", "97", "--", "true"],
    ] {
        let out = sheepdog().args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("sheepdog: "), "{args:?}: {err}");
    }
}

#[test]
fn command_not_found_is_127_and_not_executable_is_126_with_the_os_reason() {
    let out = sheepdog().args(["run", "--", "/nonexistent/agent"]).output().unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert!(String::from_utf8_lossy(&out.stderr).contains("No such file"));
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("agent");
    std::fs::write(&f, "#!/bin/sh\n").unwrap();
    let out = sheepdog().args(["run", "--"]).arg(&f).output().unwrap();
    assert_eq!(out.status.code(), Some(126));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Permission denied"));
}

#[test]
fn as_pid_1_of_a_pid_namespace_it_reaps_orphans_and_turns_sigterm_into_the_stop() {
    if unshare_refused(&["--pid", "--fork", "--mount-proc"]) {
        return;
    }
    let src = r#"
import os, time
if os.fork() == 0:
    if os.fork() == 0:
        time.sleep(0.2); os._exit(0)
    os._exit(0)
os.wait()
time.sleep(0.8)
def state(p):
    try: return open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()[0]
    except OSError: return '-'
zombies = [p for p in os.listdir('/proc') if p.isdigit() and state(p) == 'Z']
print('pid1', open('/proc/1/comm').read().strip(), 'zombies', len(zombies), flush=True)
time.sleep(100)
"#;
    let guard = Guard::new();
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events");
    let mut cmd = std::process::Command::new("unshare");
    cmd.args([
        "--pid",
        "--fork",
        "--mount-proc",
        "sh",
        "-c",
        r#"exec "$0" run --events-fd 3 -- python3 -c "$1" 3>"$2""#,
    ])
    .args([bin(), src])
    .arg(&events)
    .stdin(Stdio::null());
    let (mut child, lines) = spawn_lines(cmd, &guard);
    let got = lines.expect("pid1", SECS(10));
    assert_eq!(got, ["sheepdog", "zombies", "0"], "the orphan's zombie was not reaped");
    // SIGTERM to the namespace's PID 1 (the child of unshare) runs the one stop.
    let init = sheepdog::os::procfs::children(pid(child.id() as i32));
    assert_eq!(init.len(), 1);
    let init = init[0].as_raw();
    guard.track(init);
    let tree: Vec<i32> = sheepdog::os::procfs::descendants(pid(init)).iter().map(|s| s.pid.as_raw()).collect();
    tree.iter().for_each(|p| guard.track(*p));
    signal(init, libc::SIGTERM);
    let st = wait_child(&mut child, SECS(10));
    // PID 1 cannot die by a signal it handles; it exits 128+15 instead.
    assert!(st.code() == Some(143) || st.signal() == Some(libc::SIGTERM), "{st:?}");
    assert_eq!(wait_gone(&tree, Duration::ZERO), Vec::<i32>::new());
    // And says so: the `exited` event (written by the keeper, whose front is PID 1) gives the
    // status PID 1 really exits with.
    let text = std::fs::read_to_string(&events).unwrap();
    let exited = text.lines().find(|l| l.contains(r#""event":"exited""#)).unwrap_or_else(|| panic!("{text}"));
    assert!(exited.contains(r#""status":143"#), "{exited}");
}

#[test]
fn a_tree_the_kernel_cannot_finish_killing_in_time_exits_124_with_one_line() {
    // A process frozen by the cgroup v1 freezer does not die of SIGKILL until thawed: the one
    // way to make "the kernel did not finish the kill" happen on purpose.
    let Some(frozen) = Frozen::new("run") else { return };
    // The frozen sleep must not hold the test's pipes: they are read to the end below.
    let guard = Guard::new();
    let (mut child, lines) = spawn_run(
        &[
            "--term-grace",
            "200ms",
            "--kill-wait",
            "300ms",
            "--",
            "sh",
            "-c",
            "sleep 100 >/dev/null 2>&1 & echo tree $!; wait",
        ],
        &guard,
    );
    let tree = lines.pids("tree", SECS(10));
    tree.iter().for_each(|p| guard.track(*p));
    frozen.freeze(tree[0]);
    let t0 = Instant::now();
    signal(child.id() as i32, libc::SIGTERM);
    let st = wait_child(&mut child, SECS(10));
    let err = stderr_of(&mut child);
    assert_eq!(st.code(), Some(124), "{st:?} {err}");
    assert!(t0.elapsed() >= Duration::from_millis(500), "term grace + kill wait: {:?}", t0.elapsed());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("sheepdog: ") && err.contains("still alive"), "{err}");
    drop(frozen); // thaw: the pending SIGKILL now ends it
    assert_eq!(wait_gone(&tree, SECS(5)), Vec::<i32>::new());
}

#[test]
fn stdin_eof_on_a_socket_half_closed_by_the_host_stops_like_node_hosts_need() {
    // Node's child_process gives a child socketpairs, not pipes, and `stdin.end()` only shuts
    // down the writing half: the supervisor must see that as EOF (POLLRDHUP).
    let src = format!(
        r#"
import os, socket, subprocess, sys, time
a, b = socket.socketpair()
p = subprocess.Popen([{bin:?}, 'run', '--on-stdin-eof', 'stop', '--stdin-grace', '300ms', '--', 'sleep', '100'], stdin=b)
b.close()
time.sleep(0.3)
t = time.monotonic()
a.shutdown(socket.SHUT_WR)
code = p.wait(timeout=10)
print('result', code, round((time.monotonic() - t) * 1000), flush=True)
"#,
        bin = bin()
    );
    let guard = Guard::new();
    let mut host = std::process::Command::new("python3").args(["-c", &src]).stdout(Stdio::piped()).spawn().unwrap();
    guard.track_child(&host);
    let lines = Lines::new(host.stdout.take().unwrap());
    let got = lines.expect("result", SECS(15));
    assert_eq!(got[0], (128 + libc::SIGTERM).to_string(), "{got:?}");
    let took: u64 = got[1].parse().unwrap();
    assert!((300..3000).contains(&took), "stopped after {took} ms");
    let _ = host.wait();
}

#[test]
fn children_sheepdog_had_before_its_exec_are_not_the_providers() {
    // A shell that execs sheepdog can leave a job behind (or a `>(reader)` for --events-fd):
    // it is not the provider's, so it is neither stopped nor waited for.
    let guard = Guard::new();
    let script = format!("(trap '' TERM; exec sleep 60) & echo bg $!; exec {} run -- sh -c 'exit 7'", bin());
    let t0 = Instant::now();
    let (mut child, lines) = spawn_script("bash", &script, &guard);
    let bg = lines.pids("bg", SECS(10))[0];
    guard.track(bg);
    let st = wait_child(&mut child, SECS(10));
    assert_eq!(st.code(), Some(7));
    assert!(t0.elapsed() < SECS(2), "waited for a process that is not the provider's: {:?}", t0.elapsed());
    assert!(alive(bg), "a process the provider did not start was stopped");
}

#[test]
fn events_fd_shared_with_stdout_does_not_make_the_providers_writes_fail() {
    let script = format!("{} run --events-fd 1 -- head -c 1000000 /dev/zero | (sleep 0.5; wc -c)", bin());
    let out = std::process::Command::new("sh").args(["-c", &script]).output().unwrap();
    let n: usize = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(n >= 1_000_000, "the provider lost output: {n} bytes");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "", "the provider saw EAGAIN");
}

#[test]
fn other_signals_are_forwarded_to_the_group_not_fatal_to_the_supervisor() {
    let guard = Guard::new();
    let (mut child, lines) =
        spawn_run(&["--", "sh", "-c", "trap 'echo got-usr1' USR1; echo ready; while :; do sleep 0.05; done"], &guard);
    lines.expect("ready", SECS(10));
    let sup = child.id() as i32;
    let tree: Vec<i32> = sheepdog::os::procfs::descendants(pid(sup)).iter().map(|s| s.pid.as_raw()).collect();
    tree.iter().for_each(|p| guard.track(*p));
    for sig in [libc::SIGUSR1, libc::SIGWINCH] {
        signal(sup, sig);
    }
    lines.expect("got-usr1", SECS(5));
    std::thread::sleep(Duration::from_millis(100));
    assert!(child.try_wait().unwrap().is_none(), "the supervisor died of a signal it should pass on");
    signal(sup, libc::SIGTERM);
    assert_eq!(wait_child(&mut child, SECS(10)).signal(), Some(libc::SIGTERM));
    assert_eq!(wait_gone(&tree, Duration::ZERO), Vec::<i32>::new());
}

/// Issue 21 (Papercup's turn timeout): `run --timeout` runs the one stop after DUR, as `start
/// --timeout` does, and exits 124 with `timed out after DUR`; the whole tree (a TERM-ignoring
/// descendant in its own session included) is gone, and the `exited` event says `timeout`.
/// (`sh`, not python3: it must have forked well within the timeout, also on a loaded machine.)
#[test]
fn issue_21_run_timeout_stops_the_tree_and_exits_124() {
    let guard = Guard::new();
    let script = format!(
        "exec {} run --timeout 1s --term-grace 200ms --events-fd 3 -- sh -c '{}' 3>&2",
        bin(),
        r#"setsid sh -c "trap \"\" TERM; echo child \$\$; exec sleep 100" & wait"#
    );
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", &script]).stdin(Stdio::null()).stderr(Stdio::piped());
    let started = Instant::now();
    let (mut child, lines) = spawn_lines(cmd, &guard);
    let tree = lines.pids("child", SECS(10));
    tree.iter().for_each(|p| guard.track(*p));
    let status = wait_child(&mut child, SECS(10));
    assert!(started.elapsed() >= SECS(1), "stopped before the timeout");
    assert_eq!(status.code(), Some(124), "{status:?}");
    assert_eq!(wait_gone(&tree, Duration::ZERO), Vec::<i32>::new(), "alive after the timeout stop");
    let err = stderr_of(&mut child);
    assert!(err.contains("sheepdog: timed out after 1s"), "{err}");
    let exited = err.lines().find(|l| l.contains("\"event\":\"exited\"")).expect("exited event");
    assert!(exited.contains("\"trigger\":\"timeout\"") && exited.contains("\"status\":124"), "{exited}");
    assert!(exited.contains("\"escalated\":true"), "the TERM-ignoring child was not there: {exited}");
}

#[test]
fn issue_21_run_timeout_of_zero_is_refused() {
    let out = sheepdog().args(["run", "--timeout", "0s", "--", "true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("sheepdog: ") && err.lines().count() == 1, "{err}");
}

/// codex#7846 (issue 34, item 7): bash's `exec > >(reader)` leaves the reader as a leftover
/// that still has the provider's output to write. It gets up to `OUTPUT_DRAIN` (1 s) to finish
/// before the leftovers' stop; it used to get SIGTERM at once, and the host 0 of 5000 lines.
#[test]
fn issue_34_a_leftover_draining_the_providers_output_finishes_before_the_stop() {
    let guard = Guard::new();
    let mut child = sheepdog()
        .args(["run", "--", "bash", "-c", "exec > >(sleep 0.2; cat) 2>&1; seq 5000"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    guard.track_child(&child);
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    let st = wait_child(&mut child, SECS(10));
    assert_eq!(out.lines().count(), 5000, "lines the reader had to write were lost");
    assert_eq!(st.code(), Some(0));
}

/// The drain is only for a pipe the tree made: a leftover that reads the host's own stdin
/// pipe (its writer outside the tree) is not draining, and is stopped at once.
#[test]
fn issue_34_a_leftover_reading_the_hosts_stdin_is_not_waited_for() {
    let guard = Guard::new();
    let mut child = sheepdog()
        .args(["run", "--", "bash", "-c", "sleep 100 & echo leftover $!; exit 0"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    guard.track_child(&child);
    drop(child.stdin.take()); // the host's pipe has no writer now, as after `echo x |`
    let lines = Lines::new(child.stdout.take().unwrap());
    let leftover = lines.pids("leftover", SECS(10))[0];
    guard.track(leftover);
    let t0 = Instant::now();
    let st = wait_child(&mut child, SECS(10));
    assert_eq!(st.code(), Some(0));
    assert!(t0.elapsed() < Duration::from_millis(700), "waited {:?} for a leftover that drains nothing", t0.elapsed());
}
