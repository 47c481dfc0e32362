//! Issue 16, item 1 ("SIGKILL of any one sheepdog process ends its tree"): the supervisor and its
//! keeper watch each other, so a SIGKILL of either one, or of the supervisor's whole process
//! group, still runs the one stop: the provider gets SIGTERM and the grace, nothing of the tree
//! survives the entry's maximum stop + 1 s, the host's pipe reaches EOF, and a managed entry
//! records what happened (and runs its pending cleanup exactly once) without anyone calling
//! `reap`. Both tiers: CI runs this file again with `SHEEPDOG_CONTAINMENT=subreaper`.
#![cfg(target_os = "linux")]

mod common;

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use sheepdog::os::procfs;

/// Term grace and kill wait given to every supervisor here: the bound is their sum + 1 s.
const GRACE: &str = "1s";
const BOUND: Duration = Duration::from_millis(1000 + 1000 + 1000);

/// A provider that records its SIGTERM (and exits 0 on it), with a `setsid` child in a session
/// of its own that ignores SIGTERM (it must take the SIGKILL) and a plain background child.
/// Prints `pids PROVIDER SETSID CHILD`, and `stopping` on its SIGTERM first: its stdout must
/// still have a reader then (a managed entry's log pipe, even after its keeper's SIGKILL), or
/// it dies of SIGPIPE and records nothing.
fn provider(term_file: &std::path::Path) -> String {
    format!(
        "trap 'echo stopping; echo term >> {f}; exit 0' TERM; setsid sh -c 'trap \"\" TERM; sleep 301' & s=$!; sleep 302 & c=$!; \
         echo pids $$ $s $c; wait $c",
        f = term_file.display()
    )
}

/// The `pids` line a managed entry's [`provider`] logged, each pid tracked by `guard`.
fn provider_pids(st: &State, guard: &Guard, id: &str) -> Vec<i32> {
    let line = st.wait_log(id, "stdout.log", "pids ");
    let pids: Vec<i32> = line
        .lines()
        .find_map(|l| l.strip_prefix("pids "))
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    for p in &pids {
        guard.track(*p);
    }
    pids
}

/// The keeper of supervisor `sup` (the provider is the keeper's child, not the supervisor's),
/// waiting for the fork if need be.
fn the_keeper(sup: i32) -> i32 {
    let end = Instant::now() + SECS(5);
    loop {
        if let Some(k) = keeper_of(sup) {
            return k;
        }
        assert!(Instant::now() < end, "supervisor {sup} has no keeper child");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn kill9(raw: i32) {
    signal(raw, libc::SIGKILL);
}

/// SIGKILL to every member of process group `pgid`, as a host's group kill does.
fn kill9_group(pgid: i32) {
    let group = sheepdog::os::Pgid::new(pgid).expect("a group id");
    let _ = sheepdog::os::process::kill_group(group, sheepdog::os::Signal::KILL);
}

/// Reads `r` to EOF on a thread; the receiver gets a message at EOF.
fn eof_of<R: Read + Send + 'static>(mut r: R) -> std::sync::mpsc::Receiver<()> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = r.read_to_end(&mut sink);
        let _ = tx.send(());
    });
    rx
}

enum Kill {
    Supervisor,
    Group,
    Keeper,
}

impl Kill {
    /// SIGKILL to the supervisor `sup`, its whole process group, or its `keeper`.
    fn send(&self, sup: i32, keeper: i32) {
        match self {
            Kill::Supervisor => kill9(sup),
            Kill::Group => kill9_group(sup),
            Kill::Keeper => kill9(keeper),
        }
    }
}

/// `sheepdog run` under a host, killed as `how` says: the tree is gone within the bound, the
/// provider got SIGTERM first, and the host's stdout pipe reaches EOF.
fn run_survives(how: Kill) {
    let guard = Guard::new();
    let dir = tempfile::tempdir().unwrap();
    let term = dir.path().join("term");
    let mut cmd = sheepdog();
    cmd.args(["run", "--term-grace", GRACE, "--kill-wait", GRACE, "--", "sh", "-c", &provider(&term)])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .stdout(Stdio::piped());
    // Its own group, as a host's `spawn(..., {detached: true})` gives, so the group kill hits
    // nothing else.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd.spawn().expect("spawn sheepdog run");
    guard.track_child(&child);
    let sup = child.id() as i32;
    let out = child.stdout.take().unwrap();
    // The pids line, then the rest of the pipe on a thread (EOF = every holder gone).
    let mut first = Vec::new();
    let mut out = out;
    let mut byte = [0u8; 1];
    while out.read(&mut byte).unwrap_or(0) == 1 && byte[0] != b'\n' {
        first.push(byte[0]);
    }
    let line = String::from_utf8_lossy(&first).into_owned();
    let pids: Vec<i32> =
        line.strip_prefix("pids ").expect("pids line").split_whitespace().map(|p| p.parse().unwrap()).collect();
    for p in &pids {
        guard.track(*p);
    }
    let keeper = the_keeper(sup);
    guard.track(keeper);
    let eof = eof_of(out);

    let t0 = Instant::now();
    how.send(sup, keeper);
    let left = wait_gone(&pids, BOUND);
    assert!(left.is_empty(), "still alive {:?} after the SIGKILL: {left:?}", t0.elapsed());
    eof.recv_timeout(BOUND.saturating_sub(t0.elapsed()) + Duration::from_millis(500))
        .expect("the host's pipe reached EOF");
    assert_eq!(std::fs::read_to_string(&term).unwrap_or_default(), "term\n", "the provider got SIGTERM first");
    // Whichever survived is gone too.
    assert!(wait_gone(&[keeper], SECS(2)).is_empty(), "the keeper outlived the stop");
    let _ = wait_child(&mut child, SECS(5));
}

#[test]
fn sigkill_of_sheepdog_run_still_stops_the_whole_tree_and_the_hosts_pipe_reaches_eof() {
    run_survives(Kill::Supervisor);
}

#[test]
fn sigkill_of_the_supervisors_whole_group_still_stops_the_whole_tree() {
    run_survives(Kill::Group);
}

#[test]
fn sigkill_of_the_keeper_leaves_the_supervisor_in_charge_of_the_stop() {
    run_survives(Kill::Keeper);
}

#[test]
fn a_keeper_killed_in_sheepdog_run_makes_the_supervisor_exit_with_the_providers_code_after_the_stop() {
    let guard = Guard::new();
    let dir = tempfile::tempdir().unwrap();
    let term = dir.path().join("term");
    let (mut child, lines) =
        spawn_run(&["--term-grace", GRACE, "--kill-wait", GRACE, "--", "sh", "-c", &provider(&term)], &guard);
    let pids = lines.pids("pids ", SECS(10));
    for p in &pids {
        guard.track(*p);
    }
    let sup = child.id() as i32;
    let keeper = the_keeper(sup);
    kill9(keeper);
    let st = wait_child(&mut child, BOUND + SECS(1));
    // The provider exited 0 on its SIGTERM, as after owner death: its code.
    assert_eq!(st.code(), Some(0), "{st:?}");
    assert!(wait_gone(&pids, Duration::ZERO).is_empty());
}

/// What made the test above flake under load: the keeper killed after it spawned the provider
/// but before it told the supervisor so (the provider can print before the keeper runs again).
/// The supervisor then exited as the keeper did, by SIGKILL, and the provider lived on. Now it
/// finds the provider among the children it inherited and runs the stop. The window is a few
/// hundred microseconds wide, so the kill comes the instant the provider prints, many times, on
/// one CPU where `taskset` exists (the keeper then waits for the CPU the provider holds).
/// A host reading `--events-fd` when the keeper is SIGKILLed: the supervisor that adopts the
/// tree is this program again, with the same arguments, so fd 3 must still be open in it (it
/// was close-on-exec, and the adopting image refused `--events-fd 3` and left the tree). The
/// stream goes on to `exited`, with the provider's status.
#[test]
fn a_keeper_killed_under_events_fd_leaves_the_event_stream_to_the_adopting_supervisor() {
    let guard = Guard::new();
    let script = format!(
        "exec {} run --events-fd 3 --term-grace {GRACE} --kill-wait {GRACE} -- \
         sh -c \"trap 'exit 7' TERM; echo member \\$\\$; sleep 302 & wait\" 3>&1",
        bin()
    );
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", &script]).stdin(Stdio::null()).stderr(Stdio::piped());
    let (mut child, lines) = spawn_lines(cmd, &guard);
    let sup = child.id() as i32;
    let member: i32 = loop {
        if let Some(p) = lines.next(SECS(10)).strip_prefix("member ") {
            break p.parse().unwrap();
        }
    };
    guard.track(member);
    let keeper = the_keeper(sup);
    guard.track(keeper);
    kill9(keeper);
    let exited: serde_json::Value = loop {
        let l = lines.next(BOUND);
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&l)
            && v["event"] == "exited"
        {
            break v;
        }
    };
    assert_eq!(exited["exitStatus"], 7, "{exited}");
    assert_eq!(exited["treeGone"], true, "{exited}");
    let status = wait_child(&mut child, SECS(5));
    let mut err = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
    assert_eq!(status.code(), Some(7), "{err}");
    assert!(wait_gone(&[member], Duration::ZERO).is_empty());
}

#[test]
fn a_keeper_killed_right_after_the_spawn_still_leaves_the_supervisor_in_charge_of_the_stop() {
    let pin = std::process::Command::new("taskset").args(["-c", "0", "true"]).status().is_ok_and(|s| s.success());
    for round in 0..80 {
        let guard = Guard::new();
        // Every process of this round carries the mark: what is left of it is found (and
        // killed) by it, never by name.
        let mark = sheepdog::registry::new_tag().expect("random bytes");
        let mut cmd = if pin {
            let mut c = std::process::Command::new("taskset");
            c.args(["-c", "0", bin()]);
            c
        } else {
            sheepdog()
        };
        cmd.args(["run", "--term-grace", GRACE, "--kill-wait", GRACE, "--", "sh", "-c"])
            .arg("trap 'exit 0' TERM; echo $$; sleep 303 & wait $!")
            .env("SHEEPDOG_TEST_MARK", &mark)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .stdout(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn sheepdog run");
        guard.track_child(&child);
        let mut out = child.stdout.take().unwrap();
        // Read here, byte by byte, not on a thread: the kill must follow the provider's line.
        let (mut text, mut byte) = (Vec::new(), [0u8; 1]);
        while out.read(&mut byte).unwrap_or(0) == 1 && byte[0] != b'\n' {
            text.push(byte[0]);
        }
        let provider: i32 = String::from_utf8_lossy(&text).trim().parse().expect("the provider's pid");
        let keeper = procfs::stat(pid(provider)).expect("the provider's stat").ppid;
        kill9(keeper);
        let left = || with_env("SHEEPDOG_TEST_MARK", &mark);
        for m in left() {
            guard.track(m.pid.as_raw());
        }
        let st = wait_child(&mut child, BOUND + SECS(1));
        let end = Instant::now() + SECS(2);
        while !left().is_empty() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(5));
        }
        let left = left();
        for m in &left {
            guard.track(m.pid.as_raw());
        }
        assert_eq!(st.code(), Some(0), "round {round}: the supervisor did not run the stop: {st:?}, left {left:?}");
        assert!(left.is_empty(), "round {round}: left alive {left:?}");
    }
}

/// A managed entry whose supervisor (or keeper, or the supervisor's group) is SIGKILLed: the
/// survivor stops the tree and records it, and the pending cleanup runs once.
fn managed_survives(how: Kill) {
    let st = State::new();
    let guard = Guard::new();
    let term = st.path().join("term");
    let count = st.path().join("cleanups");
    let cleanup = format!("echo ran >> {}", count.display());
    let v = st.start(&[
        "--term-grace",
        GRACE,
        "--kill-wait",
        GRACE,
        "--cleanup",
        &cleanup,
        "--",
        "sh",
        "-c",
        &provider(&term),
    ]);
    let id = v["id"].as_str().unwrap().to_string();
    let sup = v["supervisorPid"].as_i64().unwrap() as i32;
    let pids = provider_pids(&st, &guard, &id);
    let keeper = the_keeper(sup);
    guard.track(keeper);
    let t0 = Instant::now();
    // A detached supervisor leads its own session and group, as a host's child does here.
    how.send(sup, keeper);
    let left = wait_gone(&pids, BOUND);
    assert!(left.is_empty(), "still alive {:?} after the SIGKILL: {left:?}", t0.elapsed());
    // Recorded by the survivor, with nobody calling `reap`.
    let end = Instant::now() + SECS(5);
    let e = loop {
        let e = st.entry(&id);
        if !e["cleanupResult"].is_null() {
            break e;
        }
        assert!(Instant::now() < end, "no cleanup result: {e}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(e["status"], "stopped", "{e}");
    assert_eq!(e["stopReason"], "supervisorKilled", "{e}");
    assert_eq!(e["treeGone"], true, "{e}");
    assert_eq!(e["cleanupResult"]["exitCode"], 0, "{e}");
    assert_eq!(std::fs::read_to_string(&term).unwrap_or_default(), "term\n", "the provider got SIGTERM first");
    let log = std::fs::read_to_string(st.path().join("procs").join(&id).join("stdout.log")).unwrap_or_default();
    assert!(log.contains("stopping"), "what the provider printed during its stop is logged: {log:?}");
    assert!(wait_gone(&[sup, keeper], SECS(3)).is_empty(), "the survivor did not exit after its work");
    // Later triggers find it done: the cleanup never runs twice.
    let _ = st.run(&["stop", &id]);
    let _ = st.run(&["reap"]);
    assert_eq!(std::fs::read_to_string(&count).unwrap_or_default().lines().count(), 1);
}

#[test]
fn sigkill_of_a_managed_supervisor_stops_its_tree_records_it_and_runs_the_cleanup_once() {
    managed_survives(Kill::Supervisor);
}

#[test]
fn sigkill_of_a_managed_supervisors_group_stops_its_tree_records_it_and_runs_the_cleanup_once() {
    managed_survives(Kill::Group);
}

#[test]
fn sigkill_of_a_managed_keeper_stops_its_tree_records_it_and_runs_the_cleanup_once() {
    managed_survives(Kill::Keeper);
}

/// The keeper SIGKILLed while it runs the entry's cleanup (after the tree's stop): the supervisor
/// that adopts the tree finds the tree recorded and the cleanup running, and lets the cleanup
/// finish within its bound instead of stopping it as the tree; its exit code is recorded, and
/// what it left behind (a `setsid` child) is stopped when its `sh` ends, as a living runner
/// does, not kept until the bound and then recorded as timed out.
#[test]
fn a_keeper_killed_during_the_cleanup_lets_the_cleanup_finish_and_records_its_code() {
    keeper_killed_during_the_cleanup(None);
}

/// The same with the forked keeper (`SHEEPDOG_KEEPER=fork`, the only one off 64-bit Linux),
/// whose supervisor takes the tree over in place instead of re-executing: it used to stop the
/// cleanup with the tree.
#[test]
fn a_forked_keeper_killed_during_the_cleanup_lets_the_cleanup_finish_too() {
    keeper_killed_during_the_cleanup(Some("fork"));
}

fn keeper_killed_during_the_cleanup(keeper_mode: Option<&str>) {
    let st = State::new();
    let guard = Guard::new();
    let cl = st.path().join("cl");
    let esc = st.path().join("escaped");
    let cleanup = format!(
        "trap 'echo got-TERM >> {f}' TERM; setsid sleep 305 & echo $! > {e}; echo start >> {f}; \
         sleep 1 & wait $!; echo end >> {f}; exit 3",
        f = cl.display(),
        e = esc.display()
    );
    let (id, sup, keeper) = start_with_cleanup(&st, &guard, keeper_mode, &cleanup, None);
    let stopper = stop_in_background(&st, &guard, &["stop", &id]);
    let end = Instant::now() + SECS(5);
    while !std::fs::read_to_string(&cl).unwrap_or_default().contains("start") {
        assert!(Instant::now() < end, "the cleanup never started");
        std::thread::sleep(Duration::from_millis(5));
    }
    let escaped: i32 = std::fs::read_to_string(&esc).unwrap().trim().parse().unwrap();
    guard.track(escaped);
    kill9(keeper);
    let t0 = Instant::now();
    let out = stopper.wait_with_output().unwrap();
    // Well inside the cleanup's 10 s bound: nothing waited for the escaped child.
    assert!(t0.elapsed() < SECS(5), "stop took {:?}", t0.elapsed());
    assert!(wait_gone(&[escaped], Duration::ZERO).is_empty(), "the cleanup's setsid child outlived it");
    let said = output_text(&out);
    assert_eq!(std::fs::read_to_string(&cl).unwrap(), "start\nend\n", "the cleanup was cut short; stop said {said}");
    let e = st.entry(&id);
    assert_eq!(e["cleanupResult"]["exitCode"], 3, "{e}");
    assert_eq!(e["cleanupResult"]["ranBy"], "supervisor", "{e}");
    assert!(said.contains("Cleanup command failed with exit code 3."), "{said}");
    assert!(wait_gone(&[sup], SECS(3)).is_empty(), "the supervisor outlived the cleanup");
    // The keeper's record is left as it is, and said once in the log.
    let log = st.wait_log(&id, "combined.log", "[sheepdog] exited: ");
    assert_eq!(log.matches("[sheepdog] exited: ").count(), 1, "{log}");
}

/// CPU time of `raw` so far, in clock ticks (utime + stime, /proc/PID/stat).
fn cpu_ticks(raw: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{raw}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = after.split_whitespace().map(|x| x.parse().unwrap_or(0)).collect();
    f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0)
}

/// A keeper killed during the cleanup its turn timeout triggered: the supervisor that settles
/// the cleanup waits for it idle. The tree's turn timeout, long passed, used to make every wake
/// of the settle at once: it spun, re-reading the entry, until the cleanup ended.
#[test]
fn a_keeper_killed_during_a_timeouts_cleanup_leaves_the_supervisor_idle_while_it_settles() {
    let st = State::new();
    let guard = Guard::new();
    let cl = st.path().join("cl");
    let cleanup = format!("echo start >> {f}; sleep 2.5; echo end >> {f}", f = cl.display());
    let args = ["--timeout", "300ms", "--cleanup", &cleanup, "--", "sleep", "304"];
    let (id, _cmd, sup, keeper) = start_tracked_with(&st, &guard, None, &args);
    wait_text(&cl, "start");
    kill9(keeper);
    std::thread::sleep(Duration::from_millis(300));
    let before = cpu_ticks(sup);
    std::thread::sleep(Duration::from_millis(1500));
    let spent = cpu_ticks(sup) - before;
    assert!(spent < 30, "the settling supervisor spent {spent} ticks of CPU in 1.5 s");
    wait_text(&cl, "end");
    assert!(wait_gone(&[sup], SECS(5)).is_empty(), "the supervisor outlived the cleanup");
    assert_eq!(st.entry(&id)["cleanupResult"]["exitCode"], 0);
}

/// An entry running `sleep 304` with `cleanup` (grace and kill wait [`GRACE`], and the cleanup
/// bounded by `bound` when given), started under the keeper `keeper_mode` asks for (`None`: the
/// default, shared one; checked), its command, supervisor and keeper tracked: its id,
/// supervisor and keeper.
fn start_with_cleanup(
    st: &State,
    guard: &Guard,
    keeper_mode: Option<&str>,
    cleanup: &str,
    bound: Option<&str>,
) -> (String, i32, i32) {
    let mut args = vec!["start", "--json", "--term-grace", GRACE, "--kill-wait", GRACE, "--cleanup", cleanup];
    if let Some(b) = bound {
        args.extend(["--cleanup-timeout", b]);
    }
    args.extend(["--", "sleep", "304"]);
    let mut start = st.cmd(&args);
    if let Some(mode) = keeper_mode {
        start.env("SHEEPDOG_KEEPER", mode);
    }
    let out = start.output().expect("run start");
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("start --json prints one object");
    let sup = v["supervisorPid"].as_i64().unwrap() as i32;
    guard.track(v["pid"].as_i64().unwrap() as i32);
    guard.track(sup);
    let keeper = the_keeper(sup);
    guard.track(keeper);
    let shared = sheepdog::os::process::shares_memory(pid(sup), pid(keeper)).expect("kcmp");
    assert_eq!(shared, keeper_mode.is_none(), "the keeper asked for");
    (v["id"].as_str().unwrap().to_string(), sup, keeper)
}

/// `sheepdog stop ARGS` left running with its output piped, tracked by the guard.
fn stop_in_background(st: &State, guard: &Guard, args: &[&str]) -> std::process::Child {
    let child = st.cmd(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    guard.track_child(&child);
    child
}

/// What a command said, stdout then stderr.
fn output_text(out: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// Waits (at most 10 s) until the file at `path` holds `text`.
fn wait_text(path: &std::path::Path, text: &str) {
    let end = Instant::now() + SECS(10);
    while !std::fs::read_to_string(path).unwrap_or_default().contains(text) {
        assert!(Instant::now() < end, "{} never held {text:?}", path.display());
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A cleanup that writes `start` and `end` to `cl` around a 1 s wait and exits 3, and leaves a
/// `setsid` child that ignores SIGTERM (its pid in `esc`): stopping it takes the whole grace, so
/// its runner is still at work well after the `sh` ended.
fn cleanup_with_a_stubborn_child(cl: &std::path::Path, esc: &std::path::Path) -> String {
    format!(
        "setsid sh -c 'trap \"\" TERM; while :; do sleep 0.05; done' & echo $! > {e}; echo start >> {f}; \
         sleep 1 & wait $!; echo end >> {f}; exit 3",
        f = cl.display(),
        e = esc.display()
    )
}

/// The keeper SIGKILLed after the cleanup's `sh` ended, while it stops what the `sh` left: the
/// `sh`'s status is not lost with it. The keeper reads the status without reaping, and reaps only
/// once the result is recorded; the supervisor that adopts the zombie reaps it, and records
/// exit 3 (it used to record nothing, "did not finish").
fn keeper_killed_as_the_cleanup_ends(keeper_mode: Option<&str>) {
    let st = State::new();
    let guard = Guard::new();
    let (cl, esc) = (st.path().join("cl"), st.path().join("escaped"));
    let (id, sup, keeper) =
        start_with_cleanup(&st, &guard, keeper_mode, &cleanup_with_a_stubborn_child(&cl, &esc), None);
    let stopper = stop_in_background(&st, &guard, &["stop", &id]);
    wait_text(&cl, "start");
    let escaped: i32 = std::fs::read_to_string(&esc).unwrap().trim().parse().unwrap();
    guard.track(escaped);
    wait_text(&cl, "end");
    // The keeper is now in the 1 s grace of the stubborn child's stop.
    std::thread::sleep(Duration::from_millis(200));
    kill9(keeper);
    let out = stopper.wait_with_output().unwrap();
    let said = output_text(&out);
    assert!(said.contains("Cleanup command failed with exit code 3."), "{said}");
    let e = st.entry(&id);
    assert_eq!(e["cleanupResult"]["exitCode"], 3, "{e}");
    assert!(wait_gone(&[escaped, sup], SECS(5)).is_empty(), "the cleanup's child or the supervisor outlived it");
}

#[test]
fn a_keeper_killed_as_the_cleanup_ends_leaves_its_status_to_the_supervisor() {
    keeper_killed_as_the_cleanup_ends(None);
}

#[test]
fn a_forked_keeper_killed_as_the_cleanup_ends_leaves_its_status_to_the_supervisor() {
    keeper_killed_as_the_cleanup_ends(Some("fork"));
}

/// A second `stop` while the supervisor settles its killed keeper's cleanup waits for that
/// supervisor, the cleanup's runner now, and says the cleanup's real result. It used to wait for
/// the dead keeper, and once the `sh` had ended (the supervisor still stopping what it left)
/// said `Cleanup command did not finish.` at once.
fn a_second_stop_while_the_supervisor_settles(keeper_mode: Option<&str>) {
    let st = State::new();
    let guard = Guard::new();
    let (cl, esc) = (st.path().join("cl"), st.path().join("escaped"));
    let (id, sup, keeper) =
        start_with_cleanup(&st, &guard, keeper_mode, &cleanup_with_a_stubborn_child(&cl, &esc), None);
    let first = stop_in_background(&st, &guard, &["stop", &id]);
    wait_text(&cl, "start");
    guard.track(std::fs::read_to_string(&esc).unwrap().trim().parse().unwrap());
    kill9(keeper);
    wait_text(&cl, "end");
    let second = st.cmd(&["stop", &id]).output().unwrap();
    let said = output_text(&second);
    assert!(said.contains("Cleanup command failed with exit code 3."), "the second stop said {said}");
    let first = first.wait_with_output().unwrap();
    assert!(String::from_utf8_lossy(&first.stdout).contains("Cleanup command failed with exit code 3."), "{first:?}");
    assert!(wait_gone(&[sup], SECS(5)).is_empty(), "the supervisor outlived the cleanup");
}

#[test]
fn a_second_stop_while_the_supervisor_settles_the_cleanup_says_its_result() {
    a_second_stop_while_the_supervisor_settles(None);
}

#[test]
fn a_second_stop_while_a_forked_keepers_supervisor_settles_says_its_result() {
    a_second_stop_while_the_supervisor_settles(Some("fork"));
}

/// A killed keeper's cleanup that runs past its bound: the supervisor that adopted it stops it
/// at the bound and records it as a living runner does, timed out and with how its `sh` ended
/// (SIGTERM); the status used to be thrown away.
fn keeper_killed_during_a_cleanup_past_its_bound(keeper_mode: Option<&str>) {
    let st = State::new();
    let guard = Guard::new();
    let cl = st.path().join("cl");
    let cleanup = format!("echo start >> {}; sleep 30; true", cl.display());
    let (id, sup, keeper) = start_with_cleanup(&st, &guard, keeper_mode, &cleanup, Some("1s"));
    let stopper = stop_in_background(&st, &guard, &["stop", &id]);
    wait_text(&cl, "start");
    kill9(keeper);
    let out = stopper.wait_with_output().unwrap();
    let said = output_text(&out);
    assert!(said.contains("Cleanup command timed out after 1s."), "{said}");
    let r = &st.entry(&id)["cleanupResult"];
    assert_eq!(
        (&r["timedOut"], &r["signal"], &r["ranBy"]),
        (&true.into(), &"SIGTERM".into(), &"supervisor".into()),
        "{r}"
    );
    assert!(wait_gone(&[sup], SECS(5)).is_empty(), "the supervisor outlived the cleanup");
}

#[test]
fn a_keeper_killed_during_a_cleanup_past_its_bound_leaves_its_status_recorded() {
    keeper_killed_during_a_cleanup_past_its_bound(None);
}

#[test]
fn a_forked_keeper_killed_during_a_cleanup_past_its_bound_leaves_its_status_recorded() {
    keeper_killed_during_a_cleanup_past_its_bound(Some("fork"));
}

/// A cleanup that SIGKILLs its own runner (the keeper) and the supervisor, and exits, leaving a
/// `setsid` child: nothing of its runners is left, but what it started runs on. The `stop`
/// waits for it to its bound, then stops it and records it timed out; it used to say `did not
/// finish` at once and leave the child running past its bound.
#[test]
fn a_cleanup_whose_runners_are_both_killed_is_stopped_past_its_bound_by_the_waiting_stop() {
    let st = State::new();
    let guard = Guard::new();
    let esc = st.path().join("escaped");
    let cleanup = format!(
        "k=$PPID; s=$(awk '{{print $4}}' /proc/$k/stat); setsid sleep 306 & echo $! > {}; kill -9 $k $s; exit 0",
        esc.display()
    );
    let (id, sup, _keeper) = start_with_cleanup(&st, &guard, None, &cleanup, Some("2s"));
    let t0 = Instant::now();
    let out = st.cmd(&["stop", &id]).output().unwrap();
    let said = output_text(&out);
    let escaped: i32 = std::fs::read_to_string(&esc).unwrap().trim().parse().unwrap();
    guard.track(escaped);
    assert!(said.contains("Cleanup command timed out after 2s."), "after {:?}: {said}", t0.elapsed());
    assert!(wait_gone(&[escaped, sup], Duration::ZERO).is_empty(), "the cleanup's child outlived its bound");
    let r = &st.entry(&id)["cleanupResult"];
    assert_eq!((&r["timedOut"], &r["ranBy"]), (&true.into(), &"stop".into()), "{r}");
}

/// The keeper SIGKILLed while `sheepdog start` waits for the handshake (right after the spawn,
/// before its record): the supervisor that adopts the tree records the spawn, so `start`
/// reports the command it really started instead of "exited before the command started" (125).
/// Many trials, the kill at once and a little later: whatever `start` says must match the log.
#[test]
fn a_keeper_killed_while_start_waits_never_makes_start_deny_a_started_command() {
    let st = State::new();
    let guard = Guard::new();
    let mut denied_but_ran = Vec::new();
    for i in 0..30 {
        let mut start = st
            .cmd(&["start", "--json", "--term-grace", "100ms", "--", "sh", "-c", "echo up; exec sleep 303"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        guard.track_child(&start);
        let me = start.id() as i32;
        let end = Instant::now() + SECS(5);
        // start → supervisor → keeper: SIGKILL the keeper as soon as it exists (later each trial).
        let keeper = loop {
            if let Some(k) = keeper_of(me).and_then(keeper_of) {
                break Some(k);
            }
            if Instant::now() > end || start.try_wait().unwrap().is_some() {
                break None;
            }
            std::thread::yield_now();
        };
        if let Some(k) = keeper {
            guard.track(k);
            std::thread::sleep(Duration::from_micros(100 * (i % 10)));
            kill9(k);
        }
        let out = start.wait_with_output().unwrap();
        let id = format!("proc_{}", i + 1);
        let log = std::fs::read_to_string(st.path().join("procs").join(&id).join("stdout.log")).unwrap_or_default();
        if out.status.code() != Some(0) && log.contains("up") {
            denied_but_ran.push((id, String::from_utf8_lossy(&out.stderr).into_owned()));
        }
    }
    assert!(denied_but_ran.is_empty(), "start said the command never started, but it ran: {denied_but_ran:?}");
    let _ = st.run(&["stop", "--all"]);
}

/// The supervisor SIGKILLed while `sheepdog stop` waits for it: its keeper has already begun the
/// stop and finishes it (the grace kept, its own record); `stop` waits for the keeper instead of
/// killing it and writing "did not finish in time".
/// The keeper SIGKILLed in the middle of a stop a signal began: the supervisor that adopts the
/// tree goes on with that stop (told by the keeper, `keeper::Message::Stopping`), so `run`
/// still dies by the SIGTERM it was sent, and the events say one stop. It used to begin a
/// second stop for the keeper's death, with a whole grace: exit 137, two `stopping` events and
/// `exited` with the trigger `supervisorKilled`.
#[test]
fn a_keeper_killed_mid_stop_leaves_the_supervisor_to_finish_that_stop_for_its_signal() {
    let guard = Guard::new();
    let script = format!(
        "exec {} run --events-fd 3 --term-grace 3s -- \
         sh -c \"trap '' TERM; echo member \\$\\$; while :; do sleep 0.05; done\" 3>&1",
        bin()
    );
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", &script]).stdin(Stdio::null()).stderr(Stdio::piped());
    let (mut child, lines) = spawn_lines(cmd, &guard);
    let sup = child.id() as i32;
    let mut events = Vec::new();
    let member: i32 = loop {
        let l = lines.next(SECS(10));
        match l.strip_prefix("member ") {
            Some(p) => break p.parse().unwrap(),
            None => events.push(l),
        }
    };
    guard.track(member);
    let keeper = the_keeper(sup);
    guard.track(keeper);
    signal(sup, libc::SIGTERM);
    // The keeper's stop has sent its SIGTERM (the command ignores it: the grace runs).
    loop {
        let l = lines.next(SECS(10));
        let stopping = l.contains(r#""event":"stopping""#);
        events.push(l);
        if stopping {
            break;
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    kill9(keeper);
    let status = wait_child(&mut child, SECS(15));
    while let Some(l) = lines.try_next(SECS(1)) {
        events.push(l);
    }
    let text = events.join("\n");
    assert_eq!(status.signal(), Some(libc::SIGTERM), "run dies by the SIGTERM it was sent: {status:?}\n{text}");
    assert_eq!(text.matches(r#""event":"stopping""#).count(), 1, "one stop:\n{text}");
    let exited = events.iter().find(|l| l.contains(r#""event":"exited""#)).unwrap_or_else(|| panic!("{text}"));
    assert!(exited.contains(r#""trigger":"signal""#), "{exited}");
    assert!(wait_gone(&[member], Duration::ZERO).is_empty());
}

/// An entry started with `args`, its command, supervisor and keeper tracked by `guard`: its id,
/// and the pids of its command, its supervisor and its keeper.
fn start_tracked(st: &State, guard: &Guard, args: &[&str]) -> (String, i32, i32, i32) {
    start_tracked_with(st, guard, None, args)
}

/// [`start_tracked`] with `SHEEPDOG_KEEPER` set to `keeper_mode` for the start (`fork`).
fn start_tracked_with(st: &State, guard: &Guard, keeper_mode: Option<&str>, args: &[&str]) -> (String, i32, i32, i32) {
    let mut start = st.cmd(&[&["start", "--json"], args].concat());
    if let Some(mode) = keeper_mode {
        start.env("SHEEPDOG_KEEPER", mode);
    }
    let out = start.output().expect("run start");
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("start --json prints one object");
    let (cmd, sup) = (v["pid"].as_i64().unwrap() as i32, v["supervisorPid"].as_i64().unwrap() as i32);
    guard.track(cmd);
    guard.track(sup);
    let keeper = the_keeper(sup);
    guard.track(keeper);
    (v["id"].as_str().unwrap().to_string(), cmd, sup, keeper)
}

/// The same for a managed entry under `sheepdog stop`: the keeper killed a second into the
/// stop's grace; the adopting supervisor goes on with the stop `stop` asked for, and the entry
/// records it as that stop (it used to record a second stop, `supervisorKilled`, "stopped (the
/// supervisor was killed)").
#[test]
fn a_keeper_killed_during_sheepdog_stop_leaves_the_supervisor_to_finish_that_stop() {
    let st = State::new();
    let guard = Guard::new();
    let (id, cmd, sup, keeper) = start_tracked(&st, &guard, &["--term-grace", "3s", "--", "sh", "-c", IGNORES_TERM]);
    let stopper = stop_in_background(&st, &guard, &["stop", &id]);
    st.wait_log(&id, "combined.log", "[sheepdog] stopping:");
    std::thread::sleep(Duration::from_secs(1));
    kill9(keeper);
    let out = stopper.wait_with_output().unwrap();
    let (o, e) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{o}{e}");
    let e = st.entry(&id);
    assert_eq!((e["status"].as_str(), e["stopReason"].as_str()), (Some("stopped"), Some("signal")), "{e}");
    assert_eq!(e["statusText"], "stopped", "{e}");
    assert_eq!(e["treeGone"], true, "{e}");
    assert!(wait_gone(&[cmd, sup], SECS(5)).is_empty(), "nothing is left");
}

/// A keeper killed in the middle of a `stop --term-grace`: the adopting image goes on with the
/// one-off, and its result leaves the entry's own grace in effect for a `restart` to repeat (the
/// adopter used to read the one-off back from the entry and record it as the entry's own).
#[test]
fn a_keeper_killed_mid_one_off_stop_leaves_the_entry_its_own_grace() {
    let st = State::new();
    let guard = Guard::new();
    let (id, cmd, sup, keeper) = start_tracked(&st, &guard, &["--term-grace", "4s", "--", "sh", "-c", IGNORES_TERM]);
    let stopper = stop_in_background(&st, &guard, &["stop", "--term-grace", "3s", &id]);
    st.wait_log(&id, "combined.log", "[sheepdog] stopping:");
    assert_eq!(st.term_grace_ms(&id), Some(3000), "the one-off, recorded while its stop runs");
    kill9(keeper);
    let out = stopper.wait_with_output().unwrap();
    let (o, e) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{o}{e}");
    assert_eq!(st.term_grace_ms(&id), Some(4000), "the entry's own grace, in effect with the result");
    assert!(wait_gone(&[cmd, sup], SECS(5)).is_empty(), "nothing is left");
}

/// The keeper killed after its stop's SIGTERM: the supervisor that adopts the tree goes on in
/// that stop's grace without a second SIGTERM, which a command's handler would take for "quit
/// now" (a shell `trap` ran twice), with either keeper.
fn a_keeper_killed_after_its_term(keeper_mode: Option<&str>) {
    let st = State::new();
    let guard = Guard::new();
    let got = st.path().join("got");
    let script = format!("trap 'echo TERM >> {}' TERM; echo up; while :; do sleep 0.05; done", got.display());
    let args = ["--term-grace", "1500ms", "--", "sh", "-c", &script];
    let (id, cmd, sup, keeper) = start_tracked_with(&st, &guard, keeper_mode, &args);
    st.wait_log(&id, "stdout.log", "up");
    let stopper = stop_in_background(&st, &guard, &["stop", &id]);
    wait_text(&got, "TERM");
    kill9(keeper);
    let out = stopper.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    assert_eq!(std::fs::read_to_string(&got).unwrap(), "TERM\n", "the command got SIGTERM more than once");
    assert!(wait_gone(&[cmd, sup], SECS(5)).is_empty(), "nothing is left");
}

#[test]
fn a_keeper_killed_after_its_term_leaves_no_second_term() {
    a_keeper_killed_after_its_term(None);
}

#[test]
fn a_forked_keeper_killed_after_its_term_leaves_no_second_term() {
    a_keeper_killed_after_its_term(Some("fork"));
}

/// The keeper, then the supervisor that adopted the tree, both SIGKILLed during a `stop
/// --term-grace`: the `stop` finishes the stop itself and records it, which leaves the entry's
/// own grace in effect, as the supervisor's result would have (the one-off used to stay, and a
/// `restart` repeated it).
#[test]
fn a_stop_that_outlives_the_keeper_and_its_supervisor_puts_the_entrys_own_grace_back() {
    let st = State::new();
    let guard = Guard::new();
    let (id, cmd, sup, keeper) = start_tracked(&st, &guard, &["--term-grace", "4s", "--", "sh", "-c", IGNORES_TERM]);
    let stopper = stop_in_background(&st, &guard, &["stop", "--term-grace", "2s", &id]);
    st.wait_log(&id, "combined.log", "[sheepdog] stopping:");
    kill9(keeper);
    std::thread::sleep(Duration::from_millis(300));
    kill9(sup);
    let out = stopper.wait_with_output().unwrap();
    let (o, e) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{o}{e}");
    assert_eq!(st.term_grace_ms(&id), Some(4000), "the entry's own grace, in effect with the result the stop recorded");
    // Killed here, not by the stop (whatever reaps the supervisor's zombie, and when).
    assert_eq!(st.entry(&id)["statusText"], "stopped (by sheepdog stop; the supervisor was gone)");
    assert!(wait_gone(&[cmd], SECS(5)).is_empty(), "nothing is left");
}

/// The `stop --term-grace`, the keeper and the supervisor all SIGKILLed in the middle of that
/// stop: nobody is left to put the entry's own grace back, so it must never have been replaced.
/// The one-off is recorded beside it (`stopUnderWay`) and ends with the next stop's result, and
/// a `restart` repeats the own grace (the one-off used to stay as the entry's own for good).
#[test]
fn a_one_off_stop_killed_with_its_whole_chain_leaves_the_entrys_own_grace() {
    let st = State::new();
    let guard = Guard::new();
    let (id, cmd, sup, keeper) = start_tracked(&st, &guard, &["--term-grace", "4s", "--", "sh", "-c", IGNORES_TERM]);
    let mut stopper = stop_in_background(&st, &guard, &["stop", "--term-grace", "2s", &id]);
    st.wait_log(&id, "combined.log", "[sheepdog] stopping:");
    assert_eq!(st.term_grace_ms(&id), Some(2000), "the one-off, in effect while its stop runs");
    kill9(stopper.id() as i32);
    kill9(keeper);
    kill9(sup);
    let _ = stopper.wait();
    assert!(wait_gone(&[keeper, sup], SECS(5)).is_empty(), "the chain is gone");
    assert_eq!(st.own_term_grace_ms(&id), Some(4000), "the entry's own grace, untouched by the one-off");
    st.ok(&["stop", &id]);
    assert_eq!(st.term_grace_ms(&id), Some(4000), "the own grace, in effect once the stop is recorded");
    assert!(wait_gone(&[cmd], SECS(5)).is_empty(), "nothing is left");
    let new_id = st.restart_tracked(&guard, &id);
    assert_eq!(st.own_term_grace_ms(&new_id), Some(4000), "the restart repeats the entry's own grace");
    st.ok(&["stop", "--term-grace", "0ms", &new_id]);
}

/// A `stop --term-grace` past a stuck chain (supervisor and keeper SIGSTOPped): the stop acts
/// itself with the request's grace, records it while it runs, as a supervisor does, and the
/// result leaves the entry's own in effect (the entry used to show the own grace throughout).
#[test]
fn a_stop_past_a_stuck_chain_records_its_one_off_grace_while_it_runs() {
    let st = State::new();
    let guard = Guard::new();
    let (id, cmd, sup, keeper) = start_tracked(&st, &guard, &["--term-grace", "4s", "--", "sh", "-c", IGNORES_TERM]);
    signal(sup, libc::SIGSTOP);
    signal(keeper, libc::SIGSTOP);
    let stopper = stop_in_background(&st, &guard, &["stop", "--term-grace", "2s", &id]);
    // The stop waits out the stuck supervisor (its 4 s grace, 1.5 s kill wait and a margin), then
    // acts past it.
    // Looked at until it changes (a loaded machine can take a while), and what it changed to
    // kept: the stop may end, and put the own grace back, before a second look.
    let end = Instant::now() + SECS(30);
    let mut seen = st.term_grace_ms(&id);
    while seen == Some(4000) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
        seen = st.term_grace_ms(&id);
    }
    assert_eq!(seen, Some(2000), "the one-off, recorded while the stop runs past the chain");
    let out = stopper.wait_with_output().unwrap();
    let (o, e) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{o}{e}");
    assert_eq!(st.term_grace_ms(&id), Some(4000), "the entry's own grace, back with the result");
    assert!(wait_gone(&[cmd, sup, keeper], SECS(5)).is_empty(), "nothing is left");
}

/// What is left of a grace longer than 24.8 days (more ms than a signed 32-bit word holds) goes
/// on after the keeper's SIGKILL too: the deadline the keeper tells is 64 bits of ms.
#[test]
fn a_keeper_killed_mid_stop_hands_on_a_grace_of_weeks() {
    let st = State::new();
    let guard = Guard::new();
    let (id, cmd, sup, keeper) = start_tracked(&st, &guard, &["--term-grace", "600h", "--", "sh", "-c", IGNORES_TERM]);
    let mut stopper = st.cmd(&["stop", &id]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    guard.track_child(&stopper);
    st.wait_log(&id, "combined.log", "[sheepdog] stopping:");
    kill9(keeper);
    // Past the kill wait (1.5 s): a grace read as over will have been escalated by now.
    std::thread::sleep(Duration::from_secs(3));
    let alive = procfs::stat(sheepdog::os::Pid::new(cmd).unwrap()).is_ok_and(|s| !s.is_zombie());
    signal(cmd, libc::SIGKILL);
    wait_child(&mut stopper, SECS(15));
    assert!(alive, "the command kept what was left of its 600 h grace");
    assert!(wait_gone(&[cmd, sup], SECS(5)).is_empty(), "nothing is left");
}

#[test]
fn sigkill_of_a_supervisor_during_sheepdog_stop_leaves_the_stop_to_its_keeper() {
    let st = State::new();
    let guard = Guard::new();
    let term = st.path().join("term");
    let count = st.path().join("cleanups");
    let cleanup = format!("echo ran >> {}", count.display());
    let script = provider(&term);
    let v = st.start(&["--term-grace", GRACE, "--kill-wait", GRACE, "--cleanup", &cleanup, "--", "sh", "-c", &script]);
    let id = v["id"].as_str().unwrap().to_string();
    let sup = v["supervisorPid"].as_i64().unwrap() as i32;
    let pids = provider_pids(&st, &guard, &id);
    let keeper = the_keeper(sup);
    guard.track(keeper);
    let stopper = stop_in_background(&st, &guard, &["stop", &id]);
    // The stop has begun (the setsid child ignores SIGTERM: the keeper is in its grace).
    st.wait_log(&id, "combined.log", "[sheepdog] stopping:");
    kill9(sup);
    let out = stopper.wait_with_output().unwrap();
    let (o, e) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{o}{e}");
    assert!(wait_gone(&pids, Duration::ZERO).is_empty(), "the tree outlived `stop`");
    let log = std::fs::read_to_string(st.path().join("procs").join(&id).join("combined.log")).unwrap();
    assert!(!log.contains("stopped by sheepdog stop"), "`stop` took the stop over from a working keeper:\n{log}");
    assert!(log.contains("[sheepdog] escalated: SIGKILL"), "the keeper kept the grace and escalated:\n{log}");
    let e = st.entry(&id);
    assert_eq!(e["status"], "stopped", "{e}");
    assert!(!e["statusText"].as_str().unwrap_or("").contains("did not finish in time"), "{e}");
    assert_eq!(e["treeGone"], true, "{e}");
    assert!(wait_gone(&[sup, keeper], SECS(3)).is_empty(), "the keeper did not exit after its work");
    assert_eq!(std::fs::read_to_string(&count).unwrap_or_default().lines().count(), 1, "the cleanup ran once");
}

#[test]
fn sigkill_of_a_supervisor_that_waits_with_a_pending_cleanup_runs_the_cleanup_once() {
    // The wrapper exits at once; its cleanup is pending, watched for an owner that lives on.
    let st = State::new();
    let guard = Guard::new();
    let mut owner = guard.sleeper();
    let count = st.path().join("cleanups");
    let cleanup = format!("echo ran >> {}", count.display());
    let v = st.start(&["--owner", &owner.id().to_string(), "--cleanup", &cleanup, "--", "true"]);
    let id = v["id"].as_str().unwrap().to_string();
    let sup = v["supervisorPid"].as_i64().unwrap() as i32;
    st.wait_log(&id, "combined.log", "waiting: the cleanup is pending");
    guard.track(sup);
    kill9(sup);
    let end = Instant::now() + SECS(5);
    while st.entry(&id)["cleanupResult"].is_null() {
        assert!(Instant::now() < end, "the pending cleanup never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
    let e = st.entry(&id);
    assert_eq!(e["status"], "exited", "the command's own result is kept: {e}");
    let _ = st.run(&["reap"]);
    assert_eq!(std::fs::read_to_string(&count).unwrap_or_default().lines().count(), 1);
    owner.kill().unwrap();
    owner.wait().unwrap();
}

#[test]
fn the_keeper_is_in_a_group_of_its_own_and_is_not_part_of_the_tree() {
    let st = State::new();
    let guard = Guard::new();
    let v = st.start(&["--", "sleep", "30"]);
    let id = v["id"].as_str().unwrap().to_string();
    let sup = v["supervisorPid"].as_i64().unwrap() as i32;
    let keeper = the_keeper(sup);
    guard.track(keeper);
    let k = procfs::stat(pid(keeper)).unwrap();
    let s = procfs::stat(pid(sup)).unwrap();
    assert_ne!(k.pgrp, s.pgrp, "a group kill of the supervisor would take the keeper with it");
    assert_eq!(k.session, s.session);
    let tree = st.tree_pids(&id);
    assert!(!tree.contains(&keeper), "ps --tree lists the keeper: {tree:?}");
    assert_eq!(tree, vec![v["pid"].as_i64().unwrap() as i32]);
    st.ok(&["stop", &id]);
    assert!(wait_gone(&[sup, keeper], SECS(5)).is_empty());
}

/// Issue 16's memory budget: the default keeper is cloned with `CLONE_VM`, so it and its
/// supervisor are one address space (the pair costs one supervisor's PSS); with
/// `SHEEPDOG_KEEPER=fork` it is a copy. The kernel says which (`kcmp`).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[test]
fn the_default_keeper_shares_the_supervisors_memory_and_a_forked_one_does_not() {
    for (how, shared) in [(None, true), (Some("fork"), false)] {
        let st = State::new();
        let guard = Guard::new();
        // Through start's own environment, as a host's would reach the detached supervisor.
        let mut cmd = st.cmd(&["start", "--json", "--", "sleep", "30"]);
        if let Some(k) = how {
            cmd.env("SHEEPDOG_KEEPER", k);
        }
        let out = cmd.output().expect("run start");
        assert!(out.status.success(), "{out:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("start --json prints one object");
        let id = v["id"].as_str().unwrap().to_string();
        let sup = v["supervisorPid"].as_i64().unwrap() as i32;
        guard.track(sup);
        let keeper = the_keeper(sup);
        guard.track(keeper);
        let same = sheepdog::os::process::shares_memory(pid(sup), pid(keeper)).expect("kcmp");
        assert_eq!(same, shared, "SHEEPDOG_KEEPER={how:?}: one address space is {same}");
        st.ok(&["stop", &id]);
        assert!(wait_gone(&[sup, keeper], SECS(5)).is_empty());
    }
}

/// Issue 16, item 4: a cleanup that starts a `setsid` child and a `( setsid … &)` double fork (an
/// orphan in a session of its own: neither the cleanup's descendant nor in its group), triggered
/// by owner death; its pids are appended to `pids` in the state dir. Returns (state, guard, id,
/// supervisor, cleanup pids).
fn cleanup_with_escapes() -> (State, Guard, String, i32, Vec<i32>) {
    let st = State::new();
    let guard = Guard::new();
    let mut owner = guard.sleeper();
    let f = st.path().join("pids");
    let cleanup = format!(
        "setsid sh -c 'echo $$ >> {f}; exec sleep 200' & (setsid sh -c 'echo $$ >> {f}; exec sleep 201' &); \
         echo $$ >> {f}; sleep 202",
        f = f.display()
    );
    let v = st.start(&[
        "--owner",
        &owner.id().to_string(),
        "--cleanup",
        &cleanup,
        "--cleanup-timeout",
        "3s",
        "--term-grace",
        "300ms",
        "--kill-wait",
        "300ms",
        "--",
        "sleep",
        "100",
    ]);
    let id = v["id"].as_str().unwrap().to_string();
    let sup = v["supervisorPid"].as_i64().unwrap() as i32;
    guard.track(sup);
    owner.kill().unwrap();
    owner.wait().unwrap();
    let end = Instant::now() + SECS(10);
    let pids = loop {
        let pids: Vec<i32> =
            std::fs::read_to_string(&f).unwrap_or_default().lines().filter_map(|l| l.trim().parse().ok()).collect();
        if pids.len() == 3 {
            break pids;
        }
        assert!(Instant::now() < end, "the cleanup's three processes never started: {pids:?}");
        std::thread::sleep(Duration::from_millis(10));
    };
    // Every process of the cleanup, by the entry's tag: the three above and the `sleep 202`
    // child of the cleanup's `sh` (four in all), so the guard kills each of them on failure too.
    let tag = entry_tag(&st, &id);
    let end = Instant::now() + SECS(10);
    let all = loop {
        // The provider's tree (tagged too) was stopped before the cleanup began.
        let all: Vec<i32> = with_env("SHEEPDOG_TAG", &tag).iter().map(|m| m.pid.as_raw()).collect();
        for p in &all {
            guard.track(*p);
        }
        if pids.iter().all(|p| all.contains(p)) && all.len() == 4 {
            break all;
        }
        assert!(Instant::now() < end, "the cleanup's four processes never ran: {all:?} (pids {pids:?})");
        std::thread::sleep(Duration::from_millis(10));
    };
    (st, guard, id, sup, all)
}

/// The entry's `SHEEPDOG_TAG` (from its file: no document shows it).
fn entry_tag(st: &State, id: &str) -> String {
    let reg = sheepdog::registry::Registry::open(Some(st.path().to_path_buf())).unwrap();
    reg.read(id).unwrap().tag
}

#[test]
fn a_cleanup_stays_bounded_when_the_supervisor_is_killed_while_it_runs() {
    let (st, _guard, id, sup, pids) = cleanup_with_escapes();
    std::thread::sleep(Duration::from_millis(800));
    kill9(sup);
    // The keeper (the runner) still bounds it: 3 s from its start, then 300 ms + 300 ms.
    let left = wait_gone(&pids, SECS(4));
    assert!(left.is_empty(), "cleanup processes outlived their bound: {left:?}");
    let end = Instant::now() + SECS(3);
    while st.entry(&id)["cleanupResult"].is_null() {
        assert!(Instant::now() < end, "no cleanup result");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(st.entry(&id)["cleanupResult"]["timedOut"], true);
    let out = st.run(&["clear", "--force", &id]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A `stop` SIGKILLed while the cleanup of an entry that had already ended runs: the supervisor
/// that stayed for that cleanup (the entry has a turn timeout) runs it when the stop comes, as
/// it does for the owner's death or the timeout, so the cleanup stays bounded by its timeout and
/// its result is recorded. It ran in the `stop`, and a killed `stop` left it running for good.
#[test]
fn a_lingering_entrys_cleanup_stays_bounded_when_the_stop_that_asked_for_it_is_killed() {
    let st = State::new();
    let guard = Guard::new();
    let pidfile = st.path().join("cleanup.pid");
    let cleanup = format!("echo $$ > {}; exec sleep 307", pidfile.display());
    let args = ["--timeout", "600s", "--cleanup", &cleanup, "--cleanup-timeout", "1s", "--", "true"];
    let (id, _cmd, sup, keeper) = start_tracked(&st, &guard, &args);
    let out = st.run(&["wait", &id]);
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    let mut stopper = stop_in_background(&st, &guard, &["stop", &id]);
    wait_text(&pidfile, "\n");
    let sh: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    guard.track(sh);
    kill9(stopper.id() as i32);
    let _ = stopper.wait();
    // Its 1 s timeout, then SIGTERM (the sleep dies of it), with room for a loaded machine.
    assert!(wait_gone(&[sh], SECS(10)).is_empty(), "the cleanup outlived its bound");
    let end = Instant::now() + SECS(10);
    while st.entry(&id)["cleanupResult"].is_null() {
        assert!(Instant::now() < end, "no cleanup result");
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = &st.entry(&id)["cleanupResult"];
    assert_eq!((&r["timedOut"], &r["ranBy"]), (&true.into(), &"supervisor".into()), "{r}");
    assert!(wait_gone(&[sup, keeper], SECS(5)).is_empty(), "the supervisor left once the cleanup ran");
}

#[test]
fn a_cleanup_whose_runner_died_is_stopped_by_the_next_reap_past_its_deadline() {
    let (st, _guard, id, sup, pids) = cleanup_with_escapes();
    std::thread::sleep(Duration::from_millis(800));
    // The runner (the keeper) and the supervisor die together: nobody bounds the cleanup now.
    kill_supervisor_and_keeper(sup);
    assert_eq!(st.ok(&["reap"]), "", "within its bound a cleanup is left to finish");
    assert!(wait_gone(&pids, Duration::ZERO).len() == 4, "reap stopped a cleanup within its bound");
    let out = st.run(&["clear", &id]);
    assert_eq!(out.status.code(), Some(1), "clear without --force refuses a running cleanup");
    std::thread::sleep(SECS(3));
    let out = st.run(&["reap"]);
    assert_eq!(out.status.code(), Some(1), "a cleanup that timed out is a failure");
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.starts_with(&format!("Ran the cleanup of sleep ({id}): its runner was killed")), "{out}");
    assert!(out.contains("Cleanup command timed out after 3s."), "{out}");
    assert_eq!(wait_gone(&pids, SECS(2)), Vec::<i32>::new(), "reap left cleanup processes alive");
    let e = st.entry(&id);
    assert_eq!(e["cleanupResult"]["timedOut"], true, "{e}");
    assert_eq!(e["cleanupResult"]["ranBy"], "reap", "{e}");
}

#[test]
fn clear_force_always_works_even_while_an_abandoned_cleanup_runs() {
    let (st, _guard, id, sup, pids) = cleanup_with_escapes();
    kill_supervisor_and_keeper(sup);
    let out = st.run(&["clear", "--force", &id]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(wait_gone(&pids, SECS(2)), Vec::<i32>::new(), "clear --force left the cleanup running");
    assert!(st.entries().is_empty());
}

/// A finished entry whose cleanup (bounded by `timeout_ms`) was claimed just now by a runner
/// that died before it wrote `cleanupPid` (killed between the spawn and that write): forged,
/// with processes carrying the entry's tag started around it. Returns (id, before, after): a tagged process
/// that started before the claim (not the cleanup's) and the cleanup's own two, one of them in
/// a session of its own.
fn cleanup_without_a_pid(st: &State, guard: &Guard, timeout_ms: u64) -> (String, i32, Vec<i32>) {
    let tag = sheepdog::registry::new_tag().expect("random bytes");
    // Reaped by the guard, which tracks each (spawn_lines).
    let tagged = |script: &str| {
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", script]).env("SHEEPDOG_TAG", &tag);
        spawn_lines(cmd, guard).1
    };
    let before_pid = tagged("echo $$; exec sleep 205").pids("", SECS(5))[0];
    // Past the claim's slack (100 ms) and a clock tick: the claim is clearly later.
    std::thread::sleep(Duration::from_millis(400));
    let id = forge_entry(st, 60_000, |e| {
        e.tag = tag.clone();
        e.status = sheepdog::status::Status::Stopped;
        e.status_text = Some("stopped".into());
        e.tree_gone = Some(true);
        e.provider = Some(sheepdog::entry::ProcRef::new(i32::MAX - 1, Some(1)));
        e.pgid = Some(i32::MAX - 1);
        e.cleanup = Some(sheepdog::entry::Cleanup { command: "sleep 206".into(), timeout_ms });
        // A runner that is gone (no such pid), and no `cleanupPid`.
        e.cleanup_state = sheepdog::entry::CleanupState::Claimed {
            at_ms: sheepdog::files::now_ms(),
            runner: Some(sheepdog::entry::ProcRef::new(i32::MAX - 2, Some(1))),
        };
    });
    let lines = tagged("setsid sh -c 'echo $$; exec sleep 207' & echo $$; exec sleep 208");
    let mut cleanup = lines.pids("", SECS(5));
    cleanup.extend(lines.pids("", SECS(5)));
    for p in &cleanup {
        guard.track(*p);
    }
    (id, before_pid, cleanup)
}

#[test]
fn clear_force_stops_a_cleanup_whose_runner_died_before_recording_its_pid() {
    let st = State::new();
    let guard = Guard::new();
    let (id, before, cleanup) = cleanup_without_a_pid(&st, &guard, 60_000);
    let out = st.run(&["clear", &id]);
    assert_eq!(out.status.code(), Some(1), "clear without --force refuses a cleanup within its bound");
    assert!(String::from_utf8_lossy(&out.stderr).contains("is still finishing"), "{out:?}");
    let out = st.run(&["clear", "--force", &id]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(wait_gone(&cleanup, SECS(3)), Vec::<i32>::new(), "clear --force left the cleanup running");
    assert!(alive(before), "a tagged process older than the claim is not the cleanup's");
    assert!(st.entries().is_empty());
}

#[test]
fn reap_stops_a_cleanup_whose_runner_died_before_recording_its_pid_past_its_bound() {
    let st = State::new();
    let guard = Guard::new();
    let (id, before, cleanup) = cleanup_without_a_pid(&st, &guard, 500);
    std::thread::sleep(Duration::from_millis(700));
    let out = st.run(&["reap"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.starts_with(&format!("Ran the cleanup of sleep ({id}): its runner was killed")), "{text}");
    assert_eq!(wait_gone(&cleanup, SECS(3)), Vec::<i32>::new(), "reap left the cleanup running");
    assert!(alive(before), "a tagged process older than the claim is not the cleanup's");
    assert_eq!(st.entry(&id)["cleanupResult"]["timedOut"], true);
}

/// Issue 34, item 2: `sheepdog run` through a python launcher that sizes its environment to
/// `room` bytes under the kernel's limit (fs/exec.c, bprm_stack_limits) and execs it, with
/// `/proc` unmounted in a mount namespace of its own with `unmount_proc`. Prints `pids ...` of
/// the tree `script`; events on fd 3 (the launcher's stdout).
fn launch_near_the_exec_limit(room: usize, unmount_proc: bool, script: &str) -> String {
    format!(
        r#"
import os, resource, sys
soft = resource.getrlimit(resource.RLIMIT_STACK)[0]
limit = 6 << 20 if soft == resource.RLIM_INFINITY else min(6 << 20, soft // 4)
limit = max(limit, 128 << 10)
exe = {bin:?}
argv = [exe, 'run', '--events-fd', '3', '--term-grace', '1s', '--kill-wait', '1s', '--', 'sh', '-c', {script:?}]
env = {{'PATH': os.environ['PATH']}}
def size(env):
    return len(exe) + 1 + sum(len(a) + 1 for a in argv) + sum(len(k) + len(v) + 2 for k, v in env.items()) + (len(argv) + len(env)) * 8
i = 0
while size(env) < limit - {room}:
    env['FILL%d' % i] = 'x' * min(100000, limit - {room} - size(env) - 16)
    i += 1
os.dup2(1, 3)
if {unmount_proc}:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x00020000) != 0 or libc.umount2(b'/proc', 2) != 0:
        print('refused', flush=True); sys.exit(0)
os.execve(exe, argv, env)
"#,
        bin = bin(),
        script = script,
        unmount_proc = if unmount_proc { "True" } else { "False" },
    )
}

/// Runs the launcher, SIGKILLs the keeper once the tree is up, and checks that the adopting
/// supervisor still ran the one stop: nothing of the tree is left, and the stream ends in
/// `exited` with `treeGone`. `false` when the launcher was refused what it needs.
fn keeper_killed_under(launcher: &str) -> bool {
    let guard = Guard::new();
    let mut cmd = std::process::Command::new("python3");
    cmd.args(["-c", launcher]).stdin(Stdio::null());
    let (mut child, lines) = spawn_lines(cmd, &guard);
    let sup = child.id() as i32;
    let tree: Vec<i32> = loop {
        let l = lines.next(SECS(10));
        if l == "refused" {
            eprintln!("SKIPPED: a mount namespace is refused here");
            return false;
        }
        if let Some(p) = l.strip_prefix("pids ") {
            break p.split_whitespace().map(|p| p.parse().unwrap()).collect();
        }
    };
    tree.iter().for_each(|p| guard.track(*p));
    let all: Vec<i32> = procfs::descendants(pid(sup)).iter().map(|s| s.pid.as_raw()).collect();
    all.iter().for_each(|p| guard.track(*p));
    let keeper = the_keeper(sup);
    kill9(keeper);
    let exited: serde_json::Value = loop {
        let l = lines.next(BOUND + SECS(2));
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&l)
            && v["event"] == "exited"
        {
            break v;
        }
    };
    assert_eq!(exited["treeGone"], true, "{exited}");
    assert_eq!(exited["trigger"], "supervisorKilled", "{exited}");
    let st = wait_child(&mut child, SECS(5));
    assert_eq!(st.code(), Some(128 + libc::SIGTERM), "{st:?}");
    assert_eq!(wait_gone(&all, Duration::ZERO), Vec::<i32>::new(), "survivors after the keeper's SIGKILL");
    true
}

#[test]
fn a_keeper_killed_with_the_environment_near_the_exec_limit_still_has_its_tree_stopped() {
    // 40 bytes of room: less than the adoption's own two variables (about 100 bytes).
    let tree = "setsid sleep 1001 & sleep 1002 & echo pids $$ $!; exec sleep 1003";
    keeper_killed_under(&launch_near_the_exec_limit(40, false, tree));
}

#[test]
fn a_keeper_killed_without_a_mounted_proc_still_has_its_tree_stopped() {
    // A mount namespace of its own with /proc lazily unmounted: the adoption cannot re-execute
    // /proc/self/exe there (this test's own view of /proc is untouched).
    // Without /proc nothing can list a process's children, so the tree here is the provider's
    // process group (README.md says what is lost: members in a session of their own).
    let tree = "sleep 1002 & echo pids $$ $!; exec sleep 1003";
    keeper_killed_under(&launch_near_the_exec_limit(1 << 20, true, tree));
}

/// Issue 34, item 9: the supervisor and its keeper SIGSTOPped, then the supervisor SIGKILLed:
/// the kernel sends the keeper's group (orphaned by that death) SIGHUP and SIGCONT, and the
/// keeper runs the stop for its supervisor's death until its own SIGKILL comes. That stop is
/// deliberate, so the entry records it from its first signal on: `stopReason` and a status text
/// that says a stop began (it used to say only `lost`, with no reason).
#[test]
fn a_stop_cut_short_by_the_keepers_sigkill_is_recorded_as_begun() {
    let st = State::new();
    let guard = Guard::new();
    let v = st.start(&[
        "--term-grace",
        "5s",
        "--",
        "bash",
        "-c",
        "trap 'echo term' TERM; setsid sleep 1002 & echo pids $$ $!; while :; do sleep 0.05; done",
    ]);
    let id = v["id"].as_str().unwrap().to_string();
    let sup = v["supervisorPid"].as_i64().unwrap() as i32;
    let pids = provider_pids(&st, &guard, &id);
    let keeper = the_keeper(sup);
    guard.track(keeper);
    for p in [sup, keeper] {
        signal(p, libc::SIGSTOP);
    }
    let end = Instant::now() + SECS(5);
    while ![sup, keeper].iter().all(|p| procfs::stat(pid(*p)).map(|s| s.state == 'T').unwrap_or(false)) {
        assert!(Instant::now() < end, "the supervisor or its keeper did not stop");
        std::thread::sleep(Duration::from_millis(1));
    }
    kill9(sup);
    // The keeper, woken by the kernel, begins the stop: the provider hears SIGTERM.
    st.wait_log(&id, "stdout.log", "term");
    kill9(keeper);
    assert!(wait_gone(&[sup, keeper], SECS(5)).is_empty());
    // The provider traps SIGTERM and lives on: the entry is orphaned, and says the stop began.
    let e = st.entry(&id);
    assert_eq!(e["stopReason"], "supervisorKilled", "{e}");
    assert_eq!(e["status"], "orphaned", "{e}");
    // What is left of the tree is reap's: nothing outlives it.
    let _ = st.run(&["reap"]);
    assert!(wait_gone(&pids, SECS(8)).is_empty(), "survivors after reap");
}
