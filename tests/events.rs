//! `sheepdog events` (issue 19): real processes change entries, and a real reader follows the
//! journal the processes that made each change wrote.
#![cfg(target_os = "linux")]

mod common;

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// `sheepdog events --json ARGS` as a child, its lines on a thread; tracked by `g`.
fn reader(st: &State, args: &[&str], g: &Guard) -> (Child, Lines) {
    let mut a = vec!["--json", "events"];
    a.extend_from_slice(args);
    let mut c = st.cmd(&a);
    c.stdin(Stdio::null()).stderr(Stdio::piped());
    spawn_lines(c, g)
}

/// The next event, parsed.
fn next(lines: &Lines) -> Value {
    let l = lines.next(SECS(20));
    serde_json::from_str(&l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))
}

/// Events until one of kind `kind` for `id` (inclusive).
fn until(lines: &Lines, id: &str, kind: &str) -> Vec<Value> {
    let mut got = Vec::new();
    loop {
        let v = next(lines);
        let done = v["id"] == id && v["event"] == kind;
        got.push(v);
        if done {
            return got;
        }
    }
}

fn kinds_of(evs: &[Value], id: &str) -> Vec<String> {
    evs.iter().filter(|v| v["id"] == id).map(|v| v["event"].as_str().unwrap().to_string()).collect()
}

#[test]
fn events_follow_start_ready_exit_stop_with_cleanup_and_clear_as_they_happen() {
    let st = State::new();
    let g = Guard::new();
    // From the beginning of this (empty) state dir: nothing can slip before the reader starts.
    let (mut child, lines) = reader(&st, &["--since", "0"], &g);
    let web = st.start(&[
        "--name",
        "web",
        "--cleanup",
        "echo undone",
        "--ready-log",
        "^up",
        "--",
        "sh",
        "-c",
        "echo up; exec sleep 100",
    ]);
    let id = web["id"].as_str().unwrap().to_string();
    let pid = web["pid"].as_i64().unwrap();
    let evs = until(&lines, &id, "ready");
    assert_eq!(kinds_of(&evs, &id), ["started", "ready"], "{evs:?}");
    assert_eq!(evs[0]["pid"], pid, "started carries the pid");
    assert_eq!(evs[1]["matched"], "up");
    st.ok(&["stop", "web"]);
    let evs = until(&lines, &id, "stopped");
    assert_eq!(kinds_of(&evs, &id), ["exited", "cleanupFinished", "stopped"], "{evs:?}");
    assert_eq!(evs[0]["status"], "stopped");
    assert_eq!(evs[0]["signal"], "SIGTERM");
    assert_eq!(evs[1]["exitCode"], 0, "the cleanup's own code");
    assert_eq!(evs[1]["timedOut"], false);
    assert_eq!(evs[2]["ok"], true, "the stop's outcome");
    assert_eq!(evs[2]["treeGone"], true);
    let job = st.start(&["--", "sh", "-c", "exit 3"])["id"].as_str().unwrap().to_string();
    let evs = until(&lines, &job, "exited");
    assert_eq!(kinds_of(&evs, &job), ["started", "exited"]);
    assert_eq!(evs[1]["exitCode"], 3);
    assert_eq!(evs[1]["statusText"], "exited (3)");
    st.ok(&["clear", &job]);
    let evs = until(&lines, &job, "cleared");
    assert_eq!(kinds_of(&evs, &job), ["cleared"]);
    // One cursor order: seq counts up by one, whoever wrote the line.
    let all = st.ok(&["--json", "events", "--since", "0", "--no-follow"]);
    let seqs: Vec<u64> =
        all.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "{all}");
    signal(child.id() as i32, libc::SIGTERM);
    let _ = wait_child(&mut child, SECS(5));
}

#[test]
fn a_reader_resumes_from_its_cursor_across_a_restart_without_loss_or_duplicates() {
    let st = State::new();
    let g = Guard::new();
    let a = st.start(&["--", "sh", "-c", "exit 1"])["id"].as_str().unwrap().to_string();
    let _ = st.run(&["wait", &a]);
    let (mut first, lines) = reader(&st, &["--since", "0"], &g);
    let seen = until(&lines, &a, "exited");
    let cursor = seen.last().unwrap()["seq"].as_u64().unwrap();
    // The reader goes (killed by its pid, as a crash would), the registry goes on changing.
    signal(first.id() as i32, libc::SIGKILL);
    let _ = wait_child(&mut first, SECS(5));
    let b = st.start(&["--", "sh", "-c", "exit 2"])["id"].as_str().unwrap().to_string();
    let _ = st.run(&["wait", &b]);
    st.ok(&["clear", &a]);
    // A new reader from the cursor gets exactly what came after it, then follows.
    let (mut second, lines) = reader(&st, &["--since", &cursor.to_string()], &g);
    // `wait` returns once the result is in the entry; its `exited` line follows the entry's
    // write, so it may come after `cleared`: read until both are there.
    let mut evs = until(&lines, &a, "cleared");
    while kinds_of(&evs, &b).len() < 2 {
        evs.push(next(&lines));
    }
    let seqs: Vec<u64> = evs.iter().map(|v| v["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (cursor + 1..cursor + 1 + seqs.len() as u64).collect::<Vec<_>>(), "no gap, no repeat: {evs:?}");
    assert_eq!(kinds_of(&evs, &b), ["started", "exited"]);
    let c = st.start(&["--", "true"])["id"].as_str().unwrap().to_string();
    let evs = until(&lines, &c, "exited");
    assert_eq!(evs[0]["seq"].as_u64().unwrap(), seqs.last().unwrap() + 1, "and then what comes live");
    signal(second.id() as i32, libc::SIGTERM);
    let _ = wait_child(&mut second, SECS(5));
}

#[test]
fn a_reader_that_goes_away_ends_the_stream_quietly_and_writers_never_notice() {
    let st = State::new();
    let g = Guard::new();
    let a = st.start(&["--", "true"])["id"].as_str().unwrap().to_string();
    let _ = st.run(&["wait", &a]);
    let mut c = st.cmd(&["--json", "events", "--since", "0"]);
    c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    g.track_child(&child);
    let mut out = child.stdout.take().unwrap();
    let mut buf = [0u8; 16];
    use std::io::Read;
    assert!(out.read(&mut buf).unwrap() > 0);
    // The pipe's reader goes away while nothing new is written: the stream ends at once, 0.
    drop(out);
    let status = wait_child(&mut child, SECS(5));
    assert_eq!(status.code(), Some(0), "{}", stderr_of(&mut child));
    // Writers are unaffected: the journal is a file, not the reader's pipe.
    let b = st.start(&["--", "true"])["id"].as_str().unwrap().to_string();
    let out = st.run(&["wait", &b]);
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn filters_by_session_and_by_id_or_name() {
    let st = State::new();
    let a = st.start(&["--session", "s1", "--name", "one", "--", "true"])["id"].as_str().unwrap().to_string();
    let b = st.start(&["--session", "s2", "--", "true"])["id"].as_str().unwrap().to_string();
    let _ = st.run(&["wait", &a, &b]);
    let ids = |args: &[&str]| -> Vec<String> {
        let mut a = vec!["--json", "events", "--since", "0", "--no-follow"];
        a.extend_from_slice(args);
        st.ok(&a)
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(ids(&["--session", "s1"]), [a.clone(), a.clone()]);
    assert_eq!(ids(&["--session", "s2"]), [b.clone(), b.clone()]);
    assert_eq!(ids(&["--id", &b]), [b.clone(), b.clone()]);
    assert_eq!(ids(&["--id", "one"]), [a.clone(), a.clone()], "a name works too");
    let text = st.ok(&["events", "--since", "0", "--no-follow", "--id", "one"]);
    assert_eq!(text, format!("1 one ({a}): started, pid {}\n2 one ({a}): exited (0)\n", st.entry(&a)["pid"]), "{text}");
    let bad = st.run(&["events", "--since", "yesterday"]);
    assert_eq!(bad.status.code(), Some(125));
    assert_eq!(
        String::from_utf8_lossy(&bad.stderr),
        "sheepdog: --since 'yesterday': not an event cursor (the `seq` of an event, a number such as 42)\n"
    );
}

/// The journal is bounded: past 1 MiB the current file is rotated to one `.1`, a cursor keeps
/// working across it, and a cursor older than the oldest kept line is told what it missed.
#[test]
fn the_journal_rotates_at_its_bound_and_a_cursor_survives_the_rotation() {
    let st = State::new();
    let reg = sheepdog::registry::Registry::open(Some(st.path().to_path_buf())).unwrap();
    // Big lines (a 4000-byte session id) fill the file in a few hundred appends.
    let e = sheepdog::entry::Entry { id: "proc_1".into(), session_id: Some("s".repeat(4000)), ..Default::default() };
    let per_file = sheepdog::journal::MAX_BYTES / 4000;
    let total = per_file * 2 + per_file / 2;
    for _ in 0..total {
        sheepdog::journal::append(reg.root(), &e, sheepdog::journal::Kind::Cleared).unwrap();
    }
    let dir = st.path().join(sheepdog::journal::DIR);
    let size = |f: &str| std::fs::metadata(dir.join(f)).map(|m| m.len()).unwrap_or(0);
    let line = 4200;
    assert!(size(sheepdog::journal::FILE) <= sheepdog::journal::MAX_BYTES + line);
    assert!(size(sheepdog::journal::ROTATED) <= sheepdog::journal::MAX_BYTES + line);
    let read = |since: u64| {
        let out = st.run(&["--json", "events", "--no-follow", "--since", &since.to_string()]);
        let seqs: Vec<u64> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["seq"].as_u64().unwrap())
            .collect();
        (seqs, String::from_utf8_lossy(&out.stderr).into_owned())
    };
    // A cursor inside the rotated file: everything after it, across the rotation, once.
    let rotated = std::fs::read_to_string(dir.join(sheepdog::journal::ROTATED)).unwrap();
    let first_kept = serde_json::from_str::<Value>(rotated.lines().next().unwrap()).unwrap()["seq"].as_u64().unwrap();
    assert!(first_kept > 1, "two rotations dropped the oldest lines");
    let since = first_kept + 10;
    let (seqs, err) = read(since);
    assert_eq!(seqs, (since + 1..=total).collect::<Vec<_>>());
    assert_eq!(err, "");
    // A cursor older than what is kept: what is kept, and a line saying how much was lost.
    let (seqs, err) = read(1);
    assert_eq!(seqs, (first_kept..=total).collect::<Vec<_>>());
    let lost = first_kept - 2;
    assert_eq!(
        err,
        format!(
            "sheepdog: events: {lost} events after cursor 1 were rotated out of the journal before this read (it keeps about 2 MiB)\n"
        )
    );
}

/// A follower blocks in `poll` on inotify: idle, it uses no CPU to speak of (under 0.5 % of a
/// core; the clock-tick resolution makes "at most 1 tick in 4 s" the check).
#[test]
fn an_idle_follower_does_not_poll() {
    let st = State::new();
    let g = Guard::new();
    for _ in 0..3 {
        st.start(&["--", "sleep", "100"]);
    }
    let (mut child, _lines) = reader(&st, &[], &g);
    let cpu = |pid: u32| -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let f: Vec<&str> = s.rsplit_once(')').unwrap().1.split_whitespace().collect();
        f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
    };
    std::thread::sleep(Duration::from_millis(500));
    let (t0, c0) = (Instant::now(), cpu(child.id()));
    std::thread::sleep(Duration::from_secs(4));
    let used = cpu(child.id()) - c0;
    assert!(used <= 1, "{used} ticks of CPU in {:?} while idle", t0.elapsed());
    signal(child.id() as i32, libc::SIGTERM);
    let _ = wait_child(&mut child, SECS(5));
    st.ok(&["stop", "--all"]);
}
