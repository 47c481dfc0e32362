//! Issue 18 ("truthful state under bad input, races and failing disks"): relative state dirs,
//! non-UTF-8 bytes, a full and a read-only state dir, corrupt entries, racing callers, `doctor`,
//! refused input and what people read. Real processes, real files, real (tmpfs, read-only bind)
//! mounts in private mount namespaces; each test has its own state dir, and its `State` and
//! `Guard` kill what it started, by recorded identity.
// Linux only: these tests read /proc and use mount namespaces; macOS is checked by clippy alone.
#![cfg(target_os = "linux")]

mod common;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;

fn id_of(v: &serde_json::Value) -> String {
    v["id"].as_str().expect("id").to_string()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Polls `cond` every 10 ms until it holds; panics with `what` after `timeout`.
fn until(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < end, "{what} did not happen within {timeout:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Paths and bytes

#[test]
fn issue18_a_relative_state_dir_is_made_absolute_for_every_process_sheepdog_starts() {
    let guard = Guard::new();
    let cwd = tempfile::tempdir().unwrap();
    // A name no earlier run can have left at the root, so its absence there says something.
    let rel = format!("rel-{}", sheepdog::registry::new_tag().expect("random bytes"));
    for flag in [true, false] {
        let mut c = sheepdog();
        c.current_dir(cwd.path()).env_remove("SHEEPDOG_STATE_DIR");
        if flag {
            c.args(["--state-dir", &format!("./{rel}")]);
        } else {
            c.env("SHEEPDOG_STATE_DIR", &rel);
        }
        let out = c.args(["start", "--json", "--", "sleep", "100"]).stdin(Stdio::null()).output().unwrap();
        assert!(out.status.success(), "start with a relative state dir: {}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        guard.track(v["supervisorPid"].as_i64().unwrap() as i32);
        guard.track(v["pid"].as_i64().unwrap() as i32);
        assert_eq!(v["status"], "running", "{v}");
        let here = cwd.path().join(&rel);
        assert!(here.join("procs").join(id_of(&v)).join("entry.json").is_file(), "the entry is in ./{rel}");
        assert!(!std::path::Path::new("/").join(&rel).exists(), "/{rel} must not be created");
        let stop = sheepdog().arg("--state-dir").arg(&here).args(["stop", &id_of(&v)]).output().unwrap();
        assert!(stop.status.success(), "{}", text(&stop.stderr));
        assert_eq!(wait_gone(&[v["pid"].as_i64().unwrap() as i32], SECS(5)), Vec::<i32>::new());
    }
}

#[test]
fn issue18_non_utf8_argv_cwd_and_env_reach_restart_and_the_cleanup_byte_for_byte() {
    let st = State::new();
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join(OsStr::from_bytes(b"d\xff"));
    std::fs::create_dir(&dir).unwrap();
    let arg = OsStr::from_bytes(b"\xff\xfeARG");
    let env = OsStr::from_bytes(b"K=v\xfe");
    // The command writes its argument, cwd and variable to files named by its pid.
    let script = "printf %s \"$1\" > arg.$$; pwd > cwd.$$; printf %s \"$K\" > env.$$; exec sleep 100";
    let cleanup = "printf %s \"$K\" > cleanup.env; pwd > cleanup.cwd";
    let mut c = st.cmd(&["start", "--json", "--term-grace", "200ms"]);
    c.arg("--cwd")
        .arg(&dir)
        .arg("--env")
        .arg(env)
        .args(["--cleanup", cleanup, "--", "sh", "-c", script, "sh"])
        .arg(arg);
    let out = c.stdin(Stdio::null()).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["argv"][4], "\\xff\\xfeARG", "shown escaped, never lossily: {v}");
    assert_eq!(v["cwd"].as_str().unwrap(), format!("{}/d\\xff", work.path().display()));
    let out = st.run(&["--json", "restart", &id_of(&v)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let new = &r["restarted"][0];
    let pid = new["pid"].as_i64().unwrap();
    let read = |name: &str| {
        let p = dir.join(name);
        until(SECS(10), &format!("{name} written"), || std::fs::metadata(&p).is_ok_and(|m| m.len() > 0));
        std::fs::read(&p).unwrap()
    };
    assert_eq!(read(&format!("arg.{pid}")), b"\xff\xfeARG", "restart runs the same argument bytes");
    let mut cwd = dir.as_os_str().as_bytes().to_vec();
    cwd.push(b'\n');
    assert_eq!(read(&format!("cwd.{pid}")), cwd, "restart runs in the same directory");
    assert_eq!(read(&format!("env.{pid}")), b"v\xfe", "restart gets the same environment");
    // The old entry's cleanup ran (on the restart's stop) in the same cwd with the same bytes.
    assert_eq!(read("cleanup.env"), b"v\xfe");
    assert_eq!(read("cleanup.cwd"), cwd, "the cleanup runs in the entry's cwd, not in /");
    let ps = st.ok(&["ps", "--json"]);
    assert!(ps.contains(r#""\\xff\\xfeARG""#), "{ps}");
    assert!(!ps.contains('\u{fffd}'), "nothing is replaced: {ps}");
    st.ok(&["stop", &id_of(new)]);
}

// ---------------------------------------------------------------------------------------------
// 2. The record tells what happened

#[test]
fn issue18_on_a_full_disk_stop_json_says_the_tree_is_gone_unrecorded_and_the_supervisor_records_it_later() {
    let body = r#"
    v = start("--", "sleep", "100")
    fill()
    r = subprocess.run([S, "--state-dir", state, "--json", "stop", "--term-grace", "300ms", v["id"]],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    print("rc", r.returncode, flush=True)
    print("out", r.stdout.decode().strip(), flush=True)
    print("err", r.stderr.decode().strip().replace("\n", " | "), flush=True)
    tmp = [n for _, _, files in os.walk(state) for n in files if ".tmp-" in n]
    print("tmp", len(tmp), " ".join(tmp), flush=True)
    os.remove(fill_path)
    status = "none"
    for _ in range(500):
        ps = json.loads(subprocess.run([S, "--state-dir", state, "ps", "--all", "--json"],
                                       stdout=subprocess.PIPE, check=True).stdout)
        status = ps["entries"][0]["status"]
        if status != "running":
            break
        time.sleep(0.02)
    print("after", status, ps["entries"][0]["statusText"], flush=True)
"#;
    let st = State::new();
    let guard = Guard::new();
    let Some((mut child, lines, pids)) = on_a_full_disk(&st, &guard, body) else { return };
    let rc = lines.expect("rc", SECS(30));
    let out = lines.expect("out", SECS(5)).join(" ");
    let err = lines.expect("err", SECS(5)).join(" ");
    let tmp = lines.expect("tmp", SECS(5));
    let after = lines.expect("after", SECS(30)).join(" ");
    wait_child(&mut child, SECS(10));
    assert_eq!(wait_gone(&pids[..1], SECS(5)), Vec::<i32>::new(), "the tree must be stopped on a full disk too");
    assert_eq!(rc, ["74"], "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("one JSON document");
    let s = &v["stopped"][0];
    assert_eq!(s["treeGone"], true, "the document says the tree is gone: {out}");
    assert_eq!(s["ok"], false, "{out}");
    assert!(s["notRecorded"].as_str().is_some_and(|m| m.contains("No space left")), "and why not recorded: {out}");
    assert_eq!(err.matches("sheepdog:").count(), 1, "one line: {err}");
    assert_eq!(tmp, ["0"], "no temp file is left behind");
    assert!(after.starts_with("stopped"), "once space is freed the supervisor records the real outcome: {after}");
    assert_eq!(wait_gone(&pids, SECS(5)), Vec::<i32>::new(), "the supervisor leaves once it recorded");
}

/// Issue 32, item 5: `stop --term-grace` carries its one-off grace to the supervisor with the
/// SIGTERM (the signal's value), not through `entry.json`. On a full disk the entry cannot take
/// it, and the supervisor used to read the entry's own 30 s grace back: the trapping command
/// then lived 30 s instead of 300 ms.
#[test]
fn a_one_off_term_grace_reaches_the_supervisor_on_a_full_disk() {
    let body = r#"
    v = start("--term-grace", "30s", "--", "sh", "-c", "trap '' TERM; echo up; while :; do sleep 0.05; done")
    fill()
    asked = time.monotonic()
    stop = subprocess.Popen([S, "--state-dir", state, "stop", "--term-grace", "300ms", v["id"]],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while time.monotonic() - asked < 20:
        try:
            if open("/proc/%d/stat" % v["pid"]).read().split(") ")[1].split()[0] == "Z":
                break
        except OSError:
            break
        time.sleep(0.02)
    print("gone", round(time.monotonic() - asked, 3), flush=True)
    os.remove(fill_path)
    stop.wait()
"#;
    let st = State::new();
    let guard = Guard::new();
    let Some((mut child, lines, pids)) = on_a_full_disk(&st, &guard, body) else { return };
    let gone: f64 = lines.expect("gone", SECS(30))[0].parse().unwrap();
    eprintln!("the command lived {gone} s after the stop");
    wait_child(&mut child, SECS(60));
    // 300 ms of grace, the 1.5 s kill wait, and room for a loaded machine; far below 30 s.
    assert!(gone < 10.0, "the command lived {gone} s after the stop with a 300 ms grace");
    assert_eq!(wait_gone(&pids, SECS(10)), Vec::<i32>::new(), "nothing is left");
}

/// The term grace `id` records in effect once it is no longer `from` (a stop began with another
/// grace), looked at for up to 10 s; what it records then.
fn grace_once_changed(st: &State, id: &str, from: u64) -> Option<u64> {
    let deadline = Instant::now() + SECS(10);
    while st.term_grace_ms(id) == Some(from) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    st.term_grace_ms(id)
}

/// Issue 32, item 5: a one-off grace over 49 days (more ms than 32 bits hold) rides in the
/// SIGTERM's value too, all 64 bits of it on 64-bit Linux: on a full disk nothing else could
/// carry it, and the supervisor used to fall back on the entry's own 1 s grace, killing the
/// command the request asked to wait 60 days for.
#[test]
#[cfg(target_pointer_width = "64")]
fn a_one_off_term_grace_over_49_days_reaches_the_supervisor_on_a_full_disk() {
    let body = r#"
    v = start("--term-grace", "1s", "--", "sh", "-c", "trap '' TERM; echo up; while :; do sleep 0.05; done")
    fill()
    stop = subprocess.Popen([S, "--state-dir", state, "stop", "--term-grace", "1440h", v["id"]],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # The entry's 1 s grace and the 1.5 s kill wait, with room for a loaded machine.
    time.sleep(5)
    try:
        alive = open("/proc/%d/stat" % v["pid"]).read().split(") ")[1].split()[0] != "Z"
    except OSError:
        alive = False
    print("alive", alive, flush=True)
    os.remove(fill_path)
    try:
        os.kill(v["pid"], 9)
    except ProcessLookupError:
        pass
    print("stop", stop.wait(), flush=True)
"#;
    let st = State::new();
    let guard = Guard::new();
    let Some((mut child, lines, pids)) = on_a_full_disk(&st, &guard, body) else { return };
    let alive = lines.expect("alive", SECS(30)).join(" ");
    let stop = lines.expect("stop", SECS(30)).join(" ");
    wait_child(&mut child, SECS(30));
    assert_eq!(alive, "True", "the command kept its 60-day grace, not the entry's 1 s");
    assert_ne!(stop, "", "the stop returned once the command was killed");
    assert_eq!(wait_gone(&pids, SECS(10)), Vec::<i32>::new(), "nothing is left");
}

/// The other end of the same path: the supervisor reads all 64 bits of the value, and records
/// the grace it stops with (`stop.termGraceMs`), where a 32-bit read made 60 days into 10.
#[test]
#[cfg(target_pointer_width = "64")]
fn the_supervisor_records_a_one_off_grace_over_49_days_to_the_ms() {
    let st = State::new();
    let guard = Guard::new();
    let v = st.start(&["--term-grace", "1s", "--", "sh", "-c", IGNORES_TERM]);
    let (id, cmd) = (v["id"].as_str().unwrap().to_string(), v["pid"].as_i64().unwrap() as i32);
    guard.track(cmd);
    guard.track(v["supervisorPid"].as_i64().unwrap() as i32);
    let mut stop =
        st.cmd(&["stop", "--term-grace", "1440h", &id]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    guard.track_child(&stop);
    let recorded = grace_once_changed(&st, &id, 1000);
    signal(cmd, libc::SIGKILL);
    wait_child(&mut stop, SECS(20));
    assert_eq!(recorded, Some(1440 * 3_600_000), "the grace the stop asked for, to the ms");
    assert_eq!(wait_gone(&[cmd], SECS(10)), Vec::<i32>::new(), "nothing is left");
}

/// A SIGTERM queued with a value by anyone (`sigqueue(3)`) is read as a one-off grace in ms, as
/// `stop --term-grace` sends it, and so is held to the longest grace `stop` accepts (8760h):
/// 2^64 - 1 ms used to be taken as it came, a stop that never escalates.
#[test]
#[cfg(target_pointer_width = "64")]
fn a_queued_sigterms_value_is_held_to_the_longest_grace_stop_accepts() {
    let st = State::new();
    let guard = Guard::new();
    let v = st.start(&["--term-grace", "1s", "--", "sh", "-c", IGNORES_TERM]);
    let (id, cmd, sup) = (
        v["id"].as_str().unwrap().to_string(),
        v["pid"].as_i64().unwrap() as i32,
        v["supervisorPid"].as_i64().unwrap() as i32,
    );
    guard.track(cmd);
    guard.track(sup);
    let queued = std::process::Command::new("python3")
        .args(["-c", "import ctypes, sys; sys.exit(ctypes.CDLL(None).sigqueue(int(sys.argv[1]), 15, ctypes.c_void_p(2**64 - 1)))"])
        .arg(sup.to_string())
        .status()
        .unwrap();
    assert!(queued.success(), "sigqueue: {queued:?}");
    let recorded = grace_once_changed(&st, &id, 1000);
    signal(cmd, libc::SIGKILL);
    assert_eq!(recorded, Some(8760 * 3_600_000), "at most 8760h");
    assert_eq!(wait_gone(&[cmd, sup], SECS(10)), Vec::<i32>::new(), "nothing is left");
}

/// A one-off grace is for its stop only: once the stop is recorded the entry's own timings are
/// back, and a `restart` repeats them (it used to repeat the one-off: `stop --term-grace 0ms`
/// then `restart` made an entry that is SIGKILLed at once on every stop).
#[test]
fn a_one_off_term_grace_does_not_outlive_its_stop_into_a_restart() {
    let st = State::new();
    let guard = Guard::new();
    let v = st.start(&["--term-grace", "2s", "--", "sh", "-c", IGNORES_TERM]);
    let id = v["id"].as_str().unwrap().to_string();
    guard.track(v["pid"].as_i64().unwrap() as i32);
    guard.track(v["supervisorPid"].as_i64().unwrap() as i32);
    st.ok(&["stop", "--term-grace", "0ms", &id]);
    assert_eq!(st.term_grace_ms(&id), Some(2000), "the stopped entry's own grace");
    let new_id = st.restart_tracked(&guard, &id);
    assert_eq!(st.term_grace_ms(&new_id), Some(2000), "the restart repeats the entry's grace, not the one-off");
    st.ok(&["stop", "--term-grace", "0ms", &new_id]);
}

#[test]
fn issue18_on_a_read_only_state_dir_reap_says_it_recorded_nothing_and_records_once_writable() {
    let st = State::new();
    let guard = Guard::new();
    // An entry whose supervisor and tree are gone (past the leeway a start in progress gets).
    let id = forge_entry(&st, 60_000, |e| {
        e.provider = Some(sheepdog::entry::ProcRef::new(i32::MAX - 1, Some(1)));
        e.pgid = Some(i32::MAX - 1);
    });
    let src = r#"
import json, os, subprocess
S, state = os.environ["SHEEPDOG"], os.environ["STATE"]
subprocess.run(["mount", "--make-rprivate", "/"], check=True)
subprocess.run(["mount", "--bind", state, state], check=True)
subprocess.run(["mount", "-o", "remount,bind,ro", state], check=True)
def reap(*a):
    r = subprocess.run([S, "--state-dir", state, *a, "reap"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return r.returncode, r.stdout.decode().strip().replace("\n", " | "), r.stderr.decode().strip().replace("\n", " | ")
for tag, args in (("ro", ()), ("rojson", ("--json",))):
    rc, out, err = reap(*args)
    print(tag, rc, "|", out, "|", err, flush=True)
subprocess.run(["mount", "-o", "remount,bind,rw", state], check=True)
for tag in ("rw", "again"):
    rc, out, err = reap()
    print(tag, rc, "|", out, "|", err, flush=True)
"#;
    let Some((mut child, lines)) = in_mount_namespace(&st, src, &guard) else { return };
    let ro = lines.expect("ro", SECS(20)).join(" ");
    let rojson = lines.expect("rojson", SECS(20)).join(" ");
    let rw = lines.expect("rw", SECS(20)).join(" ");
    let again = lines.expect("again", SECS(20)).join(" ");
    wait_child(&mut child, SECS(10));
    assert!(ro.starts_with("74 |"), "a reap that recorded nothing says so with 74: {ro}");
    assert!(ro.contains("was not recorded") && ro.contains("Read-only file system"), "{ro}");
    assert!(rojson.starts_with("74 |") && rojson.contains("\"notRecorded\":\"unable to write"), "{rojson}");
    assert!(rw.starts_with("0 |") && rw.contains(&format!("Lost sleep ({id})")), "{rw}");
    assert_eq!(again, "0 | |", "recorded once: the next reap has nothing to do");
    assert_eq!(st.entry(&id)["status"], "lost");
}

#[test]
fn issue18_ps_only_reports_a_corrupt_entry_and_its_live_supervisor_rewrites_it_so_stop_works() {
    let st = State::new();
    let guard = Guard::new();
    let v = st.start(&["--term-grace", "300ms", "--", "sleep", "100"]);
    let (id, pid) = (id_of(&v), v["pid"].as_i64().unwrap() as i32);
    guard.track(pid);
    guard.track(v["supervisorPid"].as_i64().unwrap() as i32);
    let entry = st.path().join("procs").join(&id).join("entry.json");
    // After the supervisor's first look at the tree's members (10 ms after the start), so that
    // nothing makes it write (and so repair) its entry before the stop.
    st.wait_log(&id, "combined.log", "started pid");
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(&entry, b"{ not json").unwrap();
    for args in [&["ps"][..], &["ps", "--json"], &["logs", &id]] {
        let out = st.run(args);
        let err = text(&out.stderr);
        assert!(err.contains(&entry.display().to_string()), "{args:?} names the file: {err}");
        assert!(entry.is_file(), "{args:?} must not move the entry");
    }
    assert!(!st.path().join("corrupt").exists(), "nothing set aside by a reader");
    let out = st.run(&["reap"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(entry.is_file(), "a writer never sets aside an entry whose supervisor is alive");
    assert!(alive(pid), "reap leaves a live supervisor's tree alone");
    let out = st.run(&["stop", "--all"]);
    assert!(out.status.success(), "stop --all reaches the tree: {}", text(&out.stderr));
    assert_eq!(wait_gone(&[pid], SECS(5)), Vec::<i32>::new(), "the tree is stopped");
    let e = st.entry(&id);
    assert_eq!(e["status"], "stopped", "the supervisor rewrote its entry and recorded the stop: {e}");
    let log = std::fs::read_to_string(st.path().join("procs").join(&id).join("combined.log")).unwrap();
    assert!(log.contains("[sheepdog] exited: stopped"), "{log}");
}

#[test]
fn issue_34_an_entry_json_deleted_while_its_supervisor_runs_is_rewritten_and_stop_id_finds_it() {
    let st = State::new();
    let guard = Guard::new();
    let v = st.start(&["--term-grace", "300ms", "--", "sleep", "100"]);
    let (id, pid) = (id_of(&v), v["pid"].as_i64().unwrap() as i32);
    guard.track(pid);
    guard.track(v["supervisorPid"].as_i64().unwrap() as i32);
    let entry = st.path().join("procs").join(&id).join("entry.json");
    // Past the supervisor's first looks at the members, which write the entry (and would repair
    // it as a side effect): from then on only the promised rewrite brings it back.
    st.wait_log(&id, "combined.log", "started pid");
    std::thread::sleep(Duration::from_millis(500));
    std::fs::remove_file(&entry).unwrap();
    let out = st.run(&["ps"]);
    assert!(text(&out.stderr).contains("left in place (its supervisor runs and rewrites it)"), "{}", text(&out.stderr));
    // The supervisor keeps the promise: within its next look at the members (at most 250 ms).
    let end = std::time::Instant::now() + SECS(2);
    while !entry.is_file() {
        assert!(std::time::Instant::now() < end, "entry.json was never rewritten");
        std::thread::sleep(Duration::from_millis(10));
    }
    let e = st.entry(&id);
    assert_eq!((e["status"].as_str(), e["pid"].as_i64()), (Some("running"), Some(pid as i64)), "{e}");
    st.wait_log(&id, "combined.log", "entry.json was missing; rewritten");

    // Deleted again, `stop ID` at once finds the entry through supervisor.json.
    std::fs::remove_file(&entry).unwrap();
    let out = st.run(&["stop", &id]);
    assert_eq!(out.status.code(), Some(0), "{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(wait_gone(&[pid], SECS(5)), Vec::<i32>::new(), "the tree is stopped");
    let e = st.entry(&id);
    assert_eq!(e["status"], "stopped", "the supervisor recorded the stop: {e}");
}

// ---------------------------------------------------------------------------------------------
// 3. Races

#[test]
fn issue18_stop_all_while_another_caller_clears_finished_entries_reports_every_stop_as_done() {
    let st = State::new();
    let guard = Guard::new();
    let mut pids = Vec::new();
    for _ in 0..12 {
        let v = st.start(&["--term-grace", "200ms", "--", "sleep", "100"]);
        pids.push(v["pid"].as_i64().unwrap() as i32);
        guard.track(v["supervisorPid"].as_i64().unwrap() as i32);
    }
    pids.iter().for_each(|p| guard.track(*p));
    let stop = st.cmd(&["stop", "--all"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    guard.track_child(&stop);
    // Clear finished entries as fast as they appear, until the stop is done.
    let path = st.path().to_path_buf();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = done.clone();
    let clearer = std::thread::spawn(move || {
        while !flag.load(std::sync::atomic::Ordering::Relaxed) {
            let _ = sheepdog().arg("--state-dir").arg(&path).args(["clear", "--finished"]).output();
        }
    });
    let out = stop.wait_with_output().unwrap();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    clearer.join().unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("no entry"), "{err}");
    assert_eq!(text(&out.stdout).matches("Stopped ").count(), 12, "{}", text(&out.stdout));
    assert_eq!(wait_gone(&pids, SECS(5)), Vec::<i32>::new());
}

#[test]
fn issue18_concurrent_replaces_of_one_name_serialize_and_exactly_one_runs_at_the_end() {
    let st = State::new();
    let guard = Guard::new();
    let children: Vec<_> = (0..6)
        .map(|_| {
            let c = st
                .cmd(&["start", "--json", "--name", "same", "--replace", "--term-grace", "200ms", "--", "sleep", "61"])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            guard.track_child(&c);
            c
        })
        .collect();
    let mut codes = Vec::new();
    for c in children {
        let out = c.wait_with_output().unwrap();
        codes.push((out.status.code(), text(&out.stderr)));
    }
    for e in st.entries() {
        for k in ["pid", "supervisorPid"] {
            if let Some(p) = e[k].as_i64() {
                guard.track(p as i32);
            }
        }
    }
    assert!(codes.iter().all(|(c, _)| *c == Some(0)), "every replace succeeds: {codes:?}");
    let entries = st.entries();
    let running: Vec<_> = entries.iter().filter(|e| e["status"] == "running").collect();
    assert_eq!(running.len(), 1, "exactly one runs: {entries:?}");
    assert_eq!(entries.len(), 6);
    // Each replaced the one before it: a chain through all six.
    let mut at = running[0].clone();
    let mut seen = 1;
    while let Some(prev) = at["restartOf"].as_str() {
        at = entries.iter().find(|e| e["id"] == prev).cloned().unwrap();
        assert_eq!(at["status"], "stopped", "{at}");
        seen += 1;
    }
    assert_eq!(seen, 6, "{entries:?}");
    st.ok(&["stop", "same"]);
}

// ---------------------------------------------------------------------------------------------
// 4. doctor

#[test]
fn issue18_doctor_reports_the_refusal_run_would_give_when_the_cgroup_tier_is_demanded_and_unavailable() {
    let not_cgroup = tempfile::tempdir().unwrap();
    let env = [("SHEEPDOG_CONTAINMENT", "cgroup"), ("SHEEPDOG_CGROUP_MOUNT", not_cgroup.path().to_str().unwrap())];
    let run = sheepdog().envs(env).args(["run", "--", "true"]).output().unwrap();
    assert_eq!(run.status.code(), Some(125));
    let line = text(&run.stderr);
    let doctor = sheepdog().envs(env).arg("doctor").output().unwrap();
    assert_eq!(doctor.status.code(), Some(125), "doctor exits as run does");
    assert_eq!(text(&doctor.stderr), line, "with the same line");
    assert!(text(&doctor.stdout).starts_with("containment: none (run and start refuse with status 125: "));
    let json = sheepdog().envs(env).args(["doctor", "--json"]).output().unwrap();
    assert_eq!(json.status.code(), Some(125));
    let d: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!((d["refused"].clone(), d["containment"].clone()), (serde_json::json!(true), serde_json::json!("none")));
    assert!(line.contains(d["containmentReason"].as_str().unwrap()), "{d} / {line}");
}

// ---------------------------------------------------------------------------------------------
// 5. Input refused in one line (125), nothing changed

#[test]
fn issue18_bad_input_is_refused_in_one_line_with_125_and_nothing_is_registered() {
    let st = State::new();
    let long = "n".repeat(100_000);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["start", "--ready-port", "0", "--", "true"], "--ready-port"),
        (vec!["start", "--cleanup-timeout", "1s", "--", "true"], "--cleanup-timeout needs --cleanup"),
        (vec!["start", "--name", "", "--", "true"], "blank"),
        (vec!["start", "--name", "   ", "--", "true"], "blank"),
        (vec!["start", "--name", "a\u{1b}[2Jb", "--", "true"], "control characters"),
        (vec!["start", "--name", &long, "--", "true"], "100000 bytes long, at most 128"),
        (vec!["start", "--env", "=x", "--", "true"], "the key is empty"),
        (vec!["start", "--env", "A\nB=1", "--", "true"], "cannot hold '=', a newline or NUL"),
        (vec!["start", "--session", "s\u{7}", "--", "true"], "control characters"),
        (vec!["start", "--timeout", "10000h", "--", "true"], "at most 8760h"),
        (vec!["run", "--term-grace", "9000h", "--", "true"], "at most 8760h"),
    ];
    for (full, says) in &cases {
        let out = st.run(full);
        // Named in messages cut short: one case is 100 KB.
        let args: Vec<String> = full.iter().map(|a| a.chars().take(24).collect()).collect();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?} should say {says:?}: {err}");
        assert_eq!(err.lines().count(), 1, "one line: {err:?}");
        assert!(err.starts_with("sheepdog: ") && err.len() < 400, "short, never the whole value: {err:?}");
        assert!(!err.contains('\u{1b}') && !err.contains('\u{7}'), "no control character reaches the terminal");
    }
    let procs = st.path().join("procs");
    assert_eq!(std::fs::read_dir(&procs).map(|d| d.count()).unwrap_or(0), 0, "nothing was registered");
    // A state dir that is a regular file.
    let file = st.path().join("plain-file");
    std::fs::write(&file, b"").unwrap();
    for args in [&["ps"][..], &["start", "--", "true"], &["reap"]] {
        let out = sheepdog().arg("--state-dir").arg(&file).args(args).output().unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {err}");
        assert_eq!(err.trim_end(), format!("sheepdog: state dir {} is not a directory", file.display()));
        assert!(out.stdout.is_empty(), "no header, nothing else");
    }
}

// ---------------------------------------------------------------------------------------------
// 6. What people read

/// The display column where `needle` starts in `line`.
fn column_of(line: &str, needle: &str) -> usize {
    sheepdog::view::display_width(&line[..line.find(needle).unwrap()])
}

#[test]
fn issue18_ps_pads_by_display_width_says_no_processes_and_keeps_the_reap_hint() {
    let st = State::new();
    let guard = Guard::new();
    std::fs::create_dir_all(st.path().join("procs")).unwrap();
    assert_eq!(st.ok(&["ps"]), "No managed processes.\n", "an empty registry says so");
    let wide = st.start(&["--name", "naïve-日本語🐑", "--", "sleep", "100"]);
    let plain = st.start(&["--name", "plain", "--", "sleep", "101"]);
    for v in [&wide, &plain] {
        guard.track(v["pid"].as_i64().unwrap() as i32);
        guard.track(v["supervisorPid"].as_i64().unwrap() as i32);
    }
    // Orphan `plain`: its supervisor and keeper are killed at once, its tree lives.
    let sup = plain["supervisorPid"].as_i64().unwrap() as i32;
    if let Some(k) = keeper_of(sup) {
        guard.track(k);
    }
    kill_supervisor_and_keeper(sup);
    assert_eq!(wait_gone(&[sup], SECS(5)), Vec::<i32>::new());
    let ps = st.ok(&["ps"]);
    let lines: Vec<&str> = ps.lines().collect();
    let (a, b) =
        (lines.iter().find(|l| l.contains("naïve")).unwrap(), lines.iter().find(|l| l.contains("plain")).unwrap());
    assert_eq!(column_of(a, "sleep 100"), column_of(b, "sleep 101"), "aligned by display width:\n{ps}");
    assert_eq!(column_of(lines[0], "COMMAND"), column_of(a, "sleep 100"), "{ps}");
    assert!(b.contains("orphaned: run sheepdog reap"), "a cut status keeps its hint:\n{ps}");
    st.ok(&["reap"]);
    st.ok(&["stop", "--all"]);
}

#[test]
fn issue18_mcp_is_listed_and_a_missing_sheepdog_mcp_gets_the_install_hint() {
    let help = text(&sheepdog().arg("--help").output().unwrap().stdout);
    assert!(help.lines().any(|l| l.trim_start().starts_with("mcp ")), "mcp in the commands list:\n{help}");
    let alone = tempfile::tempdir().unwrap();
    let copy = alone.path().join("sheepdog");
    std::fs::copy(bin(), &copy).unwrap();
    let out = std::process::Command::new(&copy).arg("mcp").stdin(Stdio::null()).output().unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("sheepdog-mcp binary, installed next to sheepdog"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn issue18_tops_stop_dialog_says_whether_the_tree_was_confirmed_gone() {
    let st = State::new();
    let guard = Guard::new();
    let v = st.start(&["--term-grace", "200ms", "--", "sleep", "100"]);
    guard.track(v["pid"].as_i64().unwrap() as i32);
    guard.track(v["supervisorPid"].as_i64().unwrap() as i32);
    let reg = sheepdog::registry::Registry::open(Some(st.path().to_path_buf())).unwrap();
    let e = reg.read(&id_of(&v)).unwrap();
    let lines = sheepdog_top::stop_lines(&reg, &e);
    assert_eq!(lines[0], format!("Stopped sleep ({}).", id_of(&v)));
    assert!(lines.iter().any(|l| l == "The process tree is confirmed gone."), "{lines:?}");
    assert!(lines.iter().any(|l| l == "No cleanup command."), "{lines:?}");
}

/// A view read while the entry ran, whose supervisor recorded the end and exited before the
/// look at it, shows the end (`exited`), not `lost`: the race seen as MCP's `process_start` of a
/// command that ends at once saying `It already ended: lost`.
#[test]
fn a_view_taken_as_the_supervisor_records_the_end_shows_the_end_not_lost() {
    let st = State::new();
    let v = st.start(&["--", "sh", "-c", "exit 2"]);
    let id = id_of(&v);
    let t = std::time::Instant::now();
    while st.entry(&id)["status"] != "exited" {
        assert!(t.elapsed() < SECS(10), "{}", st.entry(&id));
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // The end is recorded a moment before the supervisor exits; the case here is the look after
    // its exit. (Looked at while it still lived, the copy read earlier is rightly `running`: a
    // clean CI run caught this test at that moment.)
    let sup = v["supervisorPid"].as_i64().unwrap() as i32;
    assert_eq!(wait_gone(&[sup], SECS(10)), Vec::<i32>::new(), "the supervisor did not exit");
    let reg = sheepdog::registry::Registry::open(Some(st.path().to_path_buf())).unwrap();
    // The copy read a moment earlier: still running, its supervisor (now gone) in charge.
    let mut read_earlier = reg.read(&id).unwrap();
    read_earlier.status = sheepdog::status::Status::Running;
    let view = sheepdog::view::entry_view(&reg, &read_earlier, &Default::default());
    let doc = serde_json::to_value(&view).unwrap();
    assert_eq!((doc["status"].as_str(), doc["exitCode"].as_i64()), (Some("exited"), Some(2)), "{doc}");
}
