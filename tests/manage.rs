//! Managed background processes and the registry: start, ps, logs, stop, wait, reap, clear,
//! with real detached supervisors, real trees and real files. Each test has its own state dir;
//! its `State` guard kills whatever the entries started, by recorded identity.
// Linux only: these tests read /proc and rely on the subreaper; macOS is checked by clippy alone.
#![cfg(target_os = "linux")]

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

fn id_of(v: &Value) -> String {
    v["id"].as_str().unwrap().to_string()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn start_ps_logs_stop_with_a_provider_that_ignores_sigterm() {
    let st = State::new();
    let v = st.start(&[
        "--name",
        "stubborn",
        "--term-grace",
        "300ms",
        "--",
        "sh",
        "-c",
        "trap '' TERM; echo ready; echo oops >&2; exec sleep 100",
    ]);
    let id = id_of(&v);
    assert_eq!(id, "proc_1");
    assert!(v["pid"].as_i64().unwrap() > 0 && v["pid"] == v["pgid"], "{v}");
    assert!(v["supervisorPid"].as_i64().unwrap() > 0);
    for k in ["stdout", "stderr", "combined"] {
        assert!(v["logs"][k].as_str().unwrap().starts_with(st.path().to_str().unwrap()), "logs live in the state dir");
    }
    let ps: Value = serde_json::from_str(st.ok(&["ps", "--json"]).trim()).unwrap();
    let e = &ps["entries"][0];
    assert_eq!(e["status"], "running");
    assert_eq!(e["name"], "stubborn");
    for field in ["id", "pid", "pgid", "startedAt", "commandPreview", "argv", "cwd", "supervisorPid", "stop", "bootId"]
    {
        assert!(!e[field].is_null(), "missing {field} in {e}");
    }
    assert_eq!(e["stop"]["termGraceMs"], 300);
    let tree = st.tree_pids(&id);
    assert!(!tree.is_empty());
    assert_eq!(st.wait_log(&id, "stdout.log", "ready"), "ready\n", "stdout byte-exact");
    assert_eq!(st.wait_log(&id, "stderr.log", "oops"), "oops\n");
    let logs = st.ok(&["logs", "stubborn"]);
    assert!(logs.contains("[out] ready") && logs.contains("[err] oops"), "{logs}");

    let t0 = Instant::now();
    let out = st.run(&["stop", "stubborn"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "Stopped stubborn (proc_1).\n");
    assert!(t0.elapsed() >= Duration::from_millis(300), "SIGKILL before the grace");
    let sup = v["supervisorPid"].as_i64().unwrap() as i32;
    let mut all = tree.clone();
    all.push(sup);
    assert_eq!(wait_gone(&all, SECS(2)), Vec::<i32>::new());
    assert_eq!(st.entry(&id)["status"], "stopped");
    // Stopping an already-stopped entry is not an error.
    assert_eq!(st.run(&["stop", &id]).status.code(), Some(0));
    let logs = st.ok(&["logs", &id]);
    let order: Vec<usize> = ["started pid", "stopping:", "escalated:", "exited:"]
        .iter()
        .map(|m| logs.find(m).unwrap_or(usize::MAX))
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "markers missing or out of order:\n{logs}");
}

/// A tree with an orphaned descendant that left the group and session (its parent, a subshell,
/// exited), reporting readiness: after the supervisor dies only the tag ties it to the entry.
const SPLIT_TREE: &str = "(setsid sleep 100 &); echo child; exec sleep 100";

#[test]
fn reap_after_the_supervisor_is_sigkilled_stops_the_orphaned_tree_and_records_it() {
    let st = State::new();
    let v = st.start(&["--name", "web", "--", "sh", "-c", SPLIT_TREE]);
    let id = id_of(&v);
    st.wait_log(&id, "stdout.log", "child");
    let pgid = v["pgid"].as_i64().unwrap() as i32;
    // `echo child` may run before the background `setsid` has left the group: wait for it.
    let end = Instant::now() + SECS(10);
    let (tree, left_group) = loop {
        let tree = st.tree_pids(&id);
        let left_group: Vec<i32> = tree
            .iter()
            .copied()
            .filter(|p| sheepdog::os::procfs::stat(pid(*p)).is_ok_and(|s| s.pgrp != pgid && s.comm == "sleep"))
            .collect();
        if left_group.len() == 1 || Instant::now() >= end {
            break (tree, left_group);
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(tree.len() >= 2, "{tree:?}");
    assert_eq!(left_group.len(), 1, "one descendant left the group: {tree:?}");

    let sup = v["supervisorPid"].as_i64().unwrap() as i32;
    kill_supervisor_and_keeper(sup);
    assert_eq!(wait_gone(&[sup], SECS(5)), Vec::<i32>::new());
    assert_eq!(st.entry(&id)["status"], "orphaned");
    assert_eq!(wait_gone(&tree, Duration::from_millis(200)).len(), tree.len(), "nothing stops it before reap");

    let dry = st.ok(&["reap", "--dry-run"]);
    assert!(dry.contains("web (proc_1)"), "{dry}");
    assert_eq!(wait_gone(&tree, Duration::ZERO).len(), tree.len(), "--dry-run signals nothing");

    let out = st.ok(&["reap"]);
    assert!(out.starts_with("Reaped web (proc_1)"), "{out}");
    assert_eq!(wait_gone(&tree, SECS(2)), Vec::<i32>::new(), "survivors after reap");
    let e = st.entry(&id);
    assert_eq!(e["status"], "reaped");
    assert_eq!(e["treeGone"], true);
    assert_eq!(st.ok(&["reap"]), "", "a second reap has nothing to do");
}

/// Writes an entry directly, as a forger (or a stale file after a reboot) would.
fn forge(st: &State, f: impl FnOnce(&mut sheepdog::entry::Entry)) -> String {
    forge_entry(st, 0, f)
}

#[test]
fn forged_entries_with_a_reused_pid_or_another_boot_are_never_signalled() {
    let st = State::new();
    let guard = Guard::new();
    let mut victim = guard.sleeper();
    let vpid = victim.id() as i32;
    let real_start = sheepdog::os::procfs::start_time(pid(vpid)).unwrap();
    // Same pid, another start time: a pid reused after the recorded process died.
    let reused = forge(&st, |e| {
        e.name = Some("reused".into());
        e.provider = Some(sheepdog::entry::ProcRef::new(vpid, Some(real_start + 1)));
        e.pgid = Some(vpid);
        e.supervisor = Some(sheepdog::entry::ProcRef::new(vpid, Some(real_start + 1)));
    });
    // Every identity field right but the boot id: an entry from before a reboot.
    let old_boot = forge(&st, |e| {
        e.name = Some("oldboot".into());
        e.provider = Some(sheepdog::entry::ProcRef::new(vpid, Some(real_start)));
        e.pgid = Some(vpid);
        e.supervisor = Some(sheepdog::entry::ProcRef::new(vpid, Some(real_start)));
        e.boot_id = "00000000-0000-0000-0000-000000000000".into();
    });
    let out = st.run(&["stop", "reused", "oldboot"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let _ = st.ok(&["reap"]);
    std::thread::sleep(Duration::from_millis(100));
    assert!(victim.try_wait().unwrap().is_none(), "an unrelated process was signalled");
    assert!(alive(vpid));
    for id in [&reused, &old_boot] {
        let s = st.entry(id)["status"].as_str().unwrap().to_string();
        assert!(s == "lost" || s == "stopped", "{id}: {s}");
    }
    victim.kill().unwrap();
    victim.wait().unwrap();
}

#[test]
fn fifty_parallel_starts_give_fifty_intact_entries() {
    let st = State::new();
    let handles: Vec<_> = (0..50)
        .map(|i| {
            st.cmd(&["start", "--json", "--name", &format!("n{i}"), "--", "sleep", "100"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut ids = Vec::new();
    for h in handles {
        let out = h.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        ids.push(id_of(&v));
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 50, "ids must be unique");
    let out = st.run(&["ps", "--json"]);
    assert_eq!(stderr(&out), "", "no corrupt entry reported");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let entries = v["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 50);
    assert!(entries.iter().all(|e| e["status"] == "running" && e["pid"].as_i64().is_some()));
    let out = st.run(&["stop", "--all", "--term-grace", "200ms"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 50);
}

#[test]
fn sigkill_of_writers_at_random_moments_never_leaves_an_unreadable_entry() {
    let st = State::new();
    let mut seed: u64 = 0x5eed_0001;
    let mut rnd = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for round in 0..40 {
        let mut child = st
            .cmd(&["start", "--name", &format!("w{round}"), "--", "sh", "-c", "echo hi; sleep 0.05"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_micros(rnd(20_000)));
        let _ = child.kill();
        let _ = child.wait();
        // Kill the entry's supervisor too, at another random moment, sometimes mid-write.
        if round % 2 == 0 {
            std::thread::sleep(Duration::from_micros(rnd(10_000)));
            let reg = sheepdog::registry::Registry::open(Some(st.path().to_path_buf())).unwrap();
            if let Ok(e) = reg.find(&format!("w{round}"))
                && let Some(s) = e.supervisor
                && sheepdog::identity::alive(s)
            {
                signal(s.pid, libc::SIGKILL);
            }
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    let _ = st.ok(&["reap"]);
    let out = st.run(&["ps", "--all", "--json"]);
    assert_eq!(stderr(&out), "", "an entry was unreadable");
    assert!(!st.path().join("corrupt").exists());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    for e in v["entries"].as_array().unwrap() {
        assert!(e["id"].is_string() && e["status"].is_string(), "{e}");
        assert_ne!(e["status"], "running", "reap left a running entry with a dead supervisor: {e}");
    }
}

#[test]
fn stop_session_stops_exactly_that_sessions_entries() {
    let st = State::new();
    let a1 = id_of(&st.start(&["--session", "turn-a", "--", "sleep", "100"]));
    let a2 = id_of(&st.start(&["--session", "turn-a", "--", "sh", "-c", SPLIT_TREE]));
    let b1 = id_of(&st.start(&["--session", "turn-b", "--", "sleep", "100"]));
    let none = id_of(&st.start(&["--", "sleep", "100"]));
    st.wait_log(&a2, "stdout.log", "child");
    let a_tree: Vec<i32> = [st.tree_pids(&a1), st.tree_pids(&a2)].concat();
    let b_tree: Vec<i32> = [st.tree_pids(&b1), st.tree_pids(&none)].concat();
    let ps: Value = serde_json::from_str(st.ok(&["ps", "--session", "turn-a", "--json"]).trim()).unwrap();
    assert_eq!(ps["entries"].as_array().unwrap().len(), 2);

    let out = st.ok(&["stop", "--session", "turn-a"]);
    assert_eq!(out.lines().count(), 2, "{out}");
    assert_eq!(wait_gone(&a_tree, SECS(2)), Vec::<i32>::new());
    assert!(b_tree.iter().all(|p| alive(*p)), "another session's process was stopped");
    assert_eq!(st.entry(&b1)["status"], "running");
    assert_eq!(st.entry(&none)["status"], "running");
}

#[test]
fn timeout_stops_and_records_timed_out_after_dur() {
    let st = State::new();
    let id = id_of(&st.start(&["--timeout", "500ms", "--", "sleep", "100"]));
    let t0 = Instant::now();
    let out = st.run(&["wait", &id]);
    assert!(t0.elapsed() >= Duration::from_millis(400), "{:?}", t0.elapsed());
    // Issue 8: a turn timeout is 124, as GNU timeout reports it (not the process's own 128+15).
    assert_eq!(out.status.code(), Some(124), "{}", stderr(&out));
    let e = st.entry(&id);
    assert_eq!(e["status"], "timedOut");
    assert_eq!(e["statusText"], "timed out after 500ms");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "timed out after 500ms");
}

#[test]
fn owner_death_stops_the_managed_process() {
    let st = State::new();
    let guard = Guard::new();
    let mut owner = guard.sleeper();
    let v = st.start(&["--owner", &owner.id().to_string(), "--", "sh", "-c", SPLIT_TREE]);
    let id = id_of(&v);
    st.wait_log(&id, "stdout.log", "child");
    let tree = st.tree_pids(&id);
    owner.kill().unwrap();
    owner.wait().unwrap();
    let out = st.run(&["wait", &id, "--timeout", "5s"]);
    assert!(out.status.code().is_some(), "{}", stderr(&out));
    assert_eq!(wait_gone(&tree, SECS(2)), Vec::<i32>::new());
    let e = st.entry(&id);
    assert_eq!(e["status"], "stopped");
    assert_eq!(e["stopReason"], "owner");
}

#[test]
fn an_owner_that_is_not_running_is_refused_at_start() {
    let st = State::new();
    let out = st.run(&["start", "--owner", "999999", "--", "sleep", "100"]);
    assert_eq!(out.status.code(), Some(125));
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    assert!(st.entries().is_empty(), "no entry is left behind");
}

#[test]
fn three_hundred_short_lived_starts_leave_no_zombie_and_no_running_entry() {
    // This test is a subreaper, so the detached supervisors come back to it when `start`
    // exits, and it can check each one exited cleanly and reap it (this machine's PID 1 does
    // not reap; a normal init would).
    sheepdog::os::process::set_child_subreaper().unwrap();
    let st = State::new();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let dir = st.path().to_path_buf();
            std::thread::spawn(move || {
                for _ in 0..75 {
                    let out = sheepdog()
                        .arg("--state-dir")
                        .arg(&dir)
                        .args(["start", "--json", "--", "true"])
                        .stdin(Stdio::null())
                        .output()
                        .unwrap();
                    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let entries = st.entries();
    assert_eq!(entries.len(), 300);
    for e in &entries {
        let id = e["id"].as_str().unwrap();
        let out = st.run(&["wait", id, "--timeout", "10s"]);
        assert_eq!(out.status.code(), Some(0), "{id}: {}", stderr(&out));
        let sup = e["supervisorPid"].as_i64().unwrap() as i32;
        // Reaped by us (it was re-parented here) or already gone.
        let _ = sheepdog::os::process::reap(pid(sup), true);
        let provider = e["pid"].as_i64().unwrap() as i32;
        assert!(sheepdog::os::procfs::stat(pid(provider)).is_err(), "provider {provider} left a zombie");
    }
    let running: Vec<Value> = st.entries().into_iter().filter(|e| e["status"] != "exited").collect();
    assert!(running.is_empty(), "{running:?}");
}

#[test]
fn wait_blocks_until_exit_and_exits_with_the_process_code() {
    let st = State::new();
    let id = id_of(&st.start(&["--", "sh", "-c", "sleep 0.3; exit 5"]));
    let t0 = Instant::now();
    let out = st.run(&["wait", &id]);
    assert!(t0.elapsed() >= Duration::from_millis(200));
    assert_eq!(out.status.code(), Some(5));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "exited (5)");
    let id = id_of(&st.start(&["--", "sleep", "100"]));
    let out = st.run(&["wait", &id, "--timeout", "200ms"]);
    assert_eq!(out.status.code(), Some(124));
    assert_eq!(stderr(&out).lines().count(), 1);
}

#[test]
fn start_of_a_command_that_cannot_run_fails_with_127_or_126_and_leaves_no_entry() {
    let st = State::new();
    let out = st.run(&["start", "--", "/nonexistent/dev-server"]);
    assert_eq!(out.status.code(), Some(127), "{}", stderr(&out));
    assert!(stderr(&out).contains("No such file"), "{}", stderr(&out));
    let file = st.path().join("not-executable");
    std::fs::write(&file, "#!/bin/sh\n").unwrap();
    let out = st.run(&["start", "--", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(126), "{}", stderr(&out));
    assert!(st.entries().is_empty());
}

#[test]
fn clear_removes_finished_entries_and_refuses_a_running_one() {
    let st = State::new();
    let done = id_of(&st.start(&["--", "true"]));
    let _ = st.run(&["wait", &done]);
    let live = id_of(&st.start(&["--name", "live", "--", "sleep", "100"]));
    let out = st.run(&["clear", "live"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stderr(&out).lines().count(), 1);
    assert!(stderr(&out).contains("stop it first"), "{}", stderr(&out));
    assert_eq!(st.ok(&["clear", "--finished"]), format!("Cleared {done}.\n"));
    assert!(!st.path().join("procs").join(&done).exists(), "logs removed with the entry");
    assert_eq!(st.entries().len(), 1);
    assert_eq!(st.entries()[0]["id"], live);
}

#[test]
fn bad_inputs_get_one_line_and_a_documented_code() {
    let st = State::new();
    let _ = st.start(&["--name", "dup", "--", "sleep", "100"]);
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        (vec!["stop", "nope"], 125, "no entry with id or name 'nope'"),
        (vec!["wait", "nope"], 125, "no entry"),
        (vec!["logs", "nope"], 125, "no entry"),
        (vec!["clear", "nope"], 125, "no entry"),
        (vec!["start", "--name", "dup", "--", "sleep", "1"], 125, "already used"),
        (vec!["start", "--timeout", "soon", "--", "true"], 125, "invalid duration"),
        (vec!["start", "--env", "NOEQUALS", "--", "true"], 125, "KEY=VALUE"),
        (vec!["start", "--cwd", "/nonexistent", "--", "true"], 125, "not a directory"),
        (vec!["start"], 125, "missing command"),
        (vec!["stop"], 125, "--session"),
    ];
    for (args, code, needle) in cases {
        let out = st.run(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("sheepdog: ") && err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn a_corrupt_entry_is_reported_by_path_and_set_aside_by_a_writer_and_hides_nothing() {
    let st = State::new();
    let good = id_of(&st.start(&["--name", "good", "--", "sleep", "100"]));
    let bad_dir = st.path().join("procs").join("proc_99");
    std::fs::create_dir_all(&bad_dir).unwrap();
    std::fs::write(bad_dir.join("entry.json"), b"{\"id\": \"proc_99\", truncated").unwrap();
    std::fs::write(bad_dir.join("stdout.log"), b"keep me").unwrap();
    let out = st.run(&["ps", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(&bad_dir.join("entry.json").display().to_string()), "names the path: {err}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["entries"].as_array().unwrap().len(), 1);
    assert_eq!(v["entries"][0]["id"], good);
    // A listing only reports it (issue 18: read-only commands never move files); a writer
    // (`reap`) sets it aside whole, logs kept, as no supervisor of it lives; listing is clean
    // afterwards.
    assert!(bad_dir.join("entry.json").is_file() && !st.path().join("corrupt").exists());
    let reap = st.run(&["reap"]);
    assert!(stderr(&reap).contains("set aside to"), "{}", stderr(&reap));
    let aside: Vec<_> = std::fs::read_dir(st.path().join("corrupt")).unwrap().flatten().collect();
    assert_eq!(aside.len(), 1);
    assert_eq!(std::fs::read(aside[0].path().join("stdout.log")).unwrap(), b"keep me");
    assert_eq!(stderr(&st.run(&["ps"])), "");
    assert_eq!(st.run(&["stop", "good"]).status.code(), Some(0));
}

#[test]
fn a_state_dir_that_others_can_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let st = State::new();
    std::fs::set_permissions(st.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = st.run(&["ps"]);
    assert_eq!(out.status.code(), Some(125));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("writable by other users") && err.contains(st.path().to_str().unwrap()), "{err}");
    std::fs::set_permissions(st.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
}

#[test]
fn the_state_dir_is_created_private_from_the_environment() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("nested/state");
    let out = sheepdog().args(["reap"]).env("SHEEPDOG_STATE_DIR", &dir).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
    let xdg = base.path().join("xdg");
    let out = sheepdog().args(["reap"]).env_remove("SHEEPDOG_STATE_DIR").env("XDG_STATE_HOME", &xdg).output().unwrap();
    assert!(out.status.success());
    assert!(xdg.join("sheepdog/procs").is_dir());
}

/// A helper's trial: `supervisor.json` was 0644 where every other file of an entry is 0600.
#[test]
fn every_file_of_an_entry_is_private_to_its_user() {
    use std::os::unix::fs::PermissionsExt;
    let st = State::new();
    let id = id_of(&st.start(&["--cleanup", "true", "--", "sleep", "100"]));
    let dir = st.path().join("procs").join(&id);
    let mut seen = Vec::new();
    for f in std::fs::read_dir(&dir).unwrap().flatten() {
        let mode = f.metadata().unwrap().permissions().mode() & 0o777;
        let name = f.file_name().to_string_lossy().into_owned();
        assert_eq!(mode & 0o077, 0, "{name} is {mode:o}");
        seen.push(name);
    }
    assert!(seen.iter().any(|n| n == "supervisor.json") && seen.iter().any(|n| n == "entry.json"), "{seen:?}");
    st.ok(&["stop", &id]);
}

#[test]
fn messages_keep_the_name_id_shape_without_a_name_and_json_errors_go_to_stdout() {
    let st = State::new();
    let id = id_of(&st.start(&["--", "sleep", "100"]));
    assert_eq!(st.ok(&["stop", &id]), format!("Stopped sleep ({id}).\n"));
    let out = st.run(&["--json", "stop", "nope"]);
    assert_eq!(out.status.code(), Some(125));
    assert_eq!(stderr(&out), "sheepdog: no entry with id or name 'nope'\n");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["exitStatus"], 125);
    assert_eq!(v["error"]["message"], "no entry with id or name 'nope'");
}

#[test]
fn a_stop_during_start_waits_for_the_supervisor_and_never_signals_start() {
    for _ in 0..5 {
        let st = State::new();
        let start =
            st.cmd(&["start", "--name", "victim", "--", "sleep", "300"]).stdout(Stdio::piped()).spawn().unwrap();
        st.wait_entry_dir("proc_1");
        let stop = st.run(&["stop", "--all"]);
        assert_eq!(stop.status.code(), Some(0), "{}", stderr(&stop));
        let out = start.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "the start command itself was signalled: {:?}", out.status);
        let e = st.entry("proc_1");
        assert_eq!(e["status"], "stopped", "{e}");
        if let Some(p) = e["pid"].as_i64() {
            assert_eq!(wait_gone(&[p as i32], SECS(5)), Vec::<i32>::new(), "the command kept running");
        }
        let sup = e["supervisorPid"].as_i64().unwrap() as i32;
        assert_eq!(wait_gone(&[sup], SECS(5)), Vec::<i32>::new(), "the supervisor kept running");
    }
}

#[test]
fn names_shaped_like_ids_are_refused() {
    let st = State::new();
    for bad in ["proc_11", "proc_1", ""] {
        let out = st.run(&["start", "--name", bad, "--", "true"]);
        assert_eq!(out.status.code(), Some(125), "{bad:?}");
        assert_eq!(stderr(&out).lines().count(), 1);
    }
    let id = id_of(&st.start(&["--name", "ok", "--", "sleep", "100"]));
    assert_eq!(st.run(&["update", &id, "--name", "proc_9"]).status.code(), Some(125));
    assert!(st.entries().len() == 1);
}

/// Waits (at most 10 s) until `id`'s cleanup is claimed (`cleanupStartedAt`): its stop runs it.
fn wait_cleanup_claimed(st: &State, id: &str) {
    let end = Instant::now() + SECS(10);
    while st.entry(id)["cleanupStartedAt"].is_null() {
        assert!(Instant::now() < end, "the cleanup never started");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn cleanup_in_progress_cannot_be_cleared_and_a_killed_one_is_not_success() {
    let st = State::new();
    let v = st.start(&["--name", "c", "--cleanup", "sleep 1", "--", "sleep", "1000"]);
    let id = id_of(&v);
    let sup = v["supervisorPid"].as_i64().unwrap() as i32;
    let stop = st.cmd(&["stop", "c"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    wait_cleanup_claimed(&st, &id);
    let out = st.run(&["clear", "c"]);
    assert_eq!(out.status.code(), Some(1), "clear during the cleanup must refuse");
    assert!(stderr(&out).contains("still finishing"), "{}", stderr(&out));
    // Now kill the supervisor in the middle of its cleanup.
    kill_supervisor_and_keeper(sup);
    let out = stop.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "Stopped c (proc_1).\nCleanup command did not finish.\n");
    assert_eq!(out.status.code(), Some(1));
}

/// A wait that runs out while an ended entry's cleanup runs names the entry and says what runs
/// on (it said `: still running after 300ms; ...`, naming nobody, as the command had ended).
#[test]
fn a_wait_that_runs_out_during_a_cleanup_says_the_cleanup_runs_on() {
    let st = State::new();
    let guard = Guard::new();
    let pidfile = st.path().join("cleanup.pid");
    let cleanup = format!("echo $$ > {}; exec sleep 30", pidfile.display());
    let v = st.start(&["--name", "c", "--cleanup", &cleanup, "--", "sleep", "1000"]);
    let id = id_of(&v);
    guard.track(v["pid"].as_i64().unwrap() as i32);
    guard.track(v["supervisorPid"].as_i64().unwrap() as i32);
    let mut stop = st.cmd(&["stop", "c"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    guard.track_child(&stop);
    wait_cleanup_claimed(&st, &id);
    let end = Instant::now() + SECS(10);
    while !std::fs::read_to_string(&pidfile).unwrap_or_default().ends_with('\n') {
        assert!(Instant::now() < end, "the cleanup never ran");
        std::thread::sleep(Duration::from_millis(10));
    }
    guard.track(std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap());
    let out = st.run(&["wait", "c", "--timeout", "300ms"]);
    assert_eq!(out.status.code(), Some(124));
    assert_eq!(
        stderr(&out),
        "sheepdog: wait: c (proc_1): its cleanup is still running after 300ms; nothing was stopped.\n"
    );
    st.ok(&["clear", "--force", "c"]);
    let _ = stop.wait();
}

#[test]
fn stop_with_a_shorter_grace_does_not_kill_a_supervisor_already_stopping() {
    let st = State::new();
    let id = id_of(&st.start(&[
        "--name",
        "tg",
        "--timeout",
        "300ms",
        "--term-grace",
        "4s",
        "--",
        "sh",
        "-c",
        "trap '' TERM; while :; do sleep 0.1; done",
    ]));
    std::thread::sleep(Duration::from_millis(600));
    let out = st.run(&["stop", "tg", "--term-grace", "100ms"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let e = st.entry(&id);
    assert_eq!(e["status"], "timedOut", "{e}");
    assert_eq!(e["statusText"], "timed out after 300ms");
}

#[test]
fn wait_during_start_waits_for_the_command() {
    let st = State::new();
    let start = st.cmd(&["start", "--", "sh", "-c", "sleep 0.3; exit 4"]).stdout(Stdio::piped()).spawn().unwrap();
    st.wait_entry_dir("proc_1");
    let out = st.run(&["wait", "proc_1"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(start.wait_with_output().unwrap().status.success());
}

/// An entry that ended without a recorded result (its supervisor and keeper killed, then its
/// command) makes a wait on several never a success, wherever it is named; and `wait --any` on
/// entries that had all finished answers with the first to finish, not the first named.
#[test]
fn wait_on_several_does_not_depend_on_the_order_they_are_named_in() {
    let st = State::new();
    let guard = Guard::new();
    let three = id_of(&st.start(&["--", "sh", "-c", "exit 3"]));
    assert_eq!(st.run(&["wait", &three]).status.code(), Some(3));
    let v = st.start(&["--", "sleep", "100"]);
    let killed = id_of(&v);
    let cmd = v["pid"].as_i64().unwrap() as i32;
    guard.track(cmd);
    signal(cmd, libc::SIGKILL);
    assert_eq!(st.run(&["wait", &killed]).status.code(), Some(137));
    for args in [["--any", killed.as_str(), three.as_str()], ["--any", three.as_str(), killed.as_str()]] {
        let out = st.run(&[&["wait"], &args[..]].concat());
        assert_eq!(out.status.code(), Some(3), "wait {args:?}: the first to finish exited 3: {}", stderr(&out));
    }
    let zero = id_of(&st.start(&["--", "true"]));
    assert_eq!(st.run(&["wait", &zero]).status.code(), Some(0));
    let v = st.start(&["--", "sleep", "100"]);
    let lost = id_of(&v);
    let cmd = v["pid"].as_i64().unwrap() as i32;
    guard.track(cmd);
    kill_supervisor_and_keeper(v["supervisorPid"].as_i64().unwrap() as i32);
    signal(cmd, libc::SIGKILL);
    assert!(wait_gone(&[cmd], SECS(5)).is_empty());
    for args in [[lost.as_str(), zero.as_str()], [zero.as_str(), lost.as_str()]] {
        let out = st.run(&[&["wait"], &args[..]].concat());
        assert_eq!(out.status.code(), Some(125), "wait {args:?}: one ended with no result: {}", stderr(&out));
    }
}

/// `wait --session` takes an entry whose stop's cleanup still runs, and holds for it, as
/// `wait` by id does (it said `Nothing to wait for.` at once).
#[test]
fn wait_for_a_session_holds_for_a_cleanup_its_stop_triggered() {
    let st = State::new();
    let done = st.path().join("done");
    let cleanup = format!("sleep 1; echo done > {}", done.display());
    let id = id_of(&st.start(&["--session", "sc", "--cleanup", &cleanup, "--", "sleep", "100"]));
    let stop = st.cmd(&["stop", &id]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    wait_cleanup_claimed(&st, &id);
    let out = st.run(&["wait", "--session", "sc"]);
    assert!(done.exists(), "wait returned before the cleanup ended: {}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(out.status.code(), Some(143), "{}", stderr(&out));
    assert!(stop.wait_with_output().unwrap().status.success());
}

#[test]
fn wait_outlives_a_killed_supervisor_and_never_reports_an_unknown_status_as_0() {
    let st = State::new();
    let v = st.start(&["--", "sleep", "100"]);
    let id = id_of(&v);
    let sup = v["supervisorPid"].as_i64().unwrap() as i32;
    let provider = v["pid"].as_i64().unwrap() as i32;
    let waiter = st.cmd(&["wait", &id]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    kill_supervisor_and_keeper(sup);
    std::thread::sleep(Duration::from_millis(300));
    assert!(alive(provider));
    let mut waiter = waiter;
    assert!(waiter.try_wait().unwrap().is_none(), "wait returned while the orphaned process still runs");
    let _ = st.ok(&["reap"]);
    let out = waiter.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(125), "an unknown status must not read as success");
    let out = st.run(&["wait", &id]);
    assert_eq!(out.status.code(), Some(125));
    assert!(stderr(&out).contains("exit status is unknown"), "{}", stderr(&out));
}

#[test]
fn update_refuses_what_would_have_no_effect_and_keeps_names_unique() {
    let st = State::new();
    let id = id_of(&st.start(&["--cleanup", "true", "--", "sleep", "100"]));
    let _ = st.ok(&["stop", &id]);
    let out = st.run(&["update", &id, "--cleanup", "echo second"]);
    assert_eq!(out.status.code(), Some(1), "an update after the cleanup ran reported success");
    // An orphaned entry (supervisor killed, process alive) still holds its name.
    let v = st.start(&["--name", "web", "--", "sleep", "300"]);
    kill_supervisor_and_keeper(v["supervisorPid"].as_i64().unwrap() as i32);
    std::thread::sleep(Duration::from_millis(200));
    let other = id_of(&st.start(&["--", "sleep", "300"]));
    let out = st.run(&["update", &other, "--name", "web"]);
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(stderr(&out).contains("already used"));
}

#[test]
fn a_status_word_from_a_newer_sheepdog_survives_a_rewrite_and_claims_nothing() {
    let st = State::new();
    let forge = |id: &str| {
        let dir = st.path().join("procs").join(id);
        let file = dir.join("entry.json");
        // Under the entry's lock and atomically, as any sheepdog writes: a write without the
        // lock is lost to a supervisor's read-modify-write in flight (its first look at the
        // tree's members, just after the start), and a torn file would read as corrupt, which
        // a live supervisor rewrites from what it holds.
        let _lock = sheepdog::files::lock_file(&dir.join("lock")).unwrap();
        let mut v: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        v["status"] = "paused".into();
        sheepdog::files::write_atomic(&file, &serde_json::to_vec(&v).unwrap()).unwrap();
        file
    };
    // A running entry with a word this version does not know: shown as written, and not taken
    // for finished (clear refuses it; nothing is signalled).
    let started = st.start(&["--name", "newer", "--", "sleep", "300"]);
    let (id, pid) = (started["id"].as_str().unwrap().to_string(), started["pid"].as_i64().unwrap() as i32);
    let file = forge(&id);
    let ps: Value = serde_json::from_slice(&st.run(&["ps", "--json"]).stdout).unwrap();
    assert_eq!(ps["entries"][0]["status"], "paused", "shown as written: {ps}");
    assert_ne!(st.run(&["clear", &id]).status.code(), Some(0), "not cleared while it may run");
    std::thread::sleep(Duration::from_millis(200));
    assert!(alive(pid), "nothing was signalled");
    // A rewrite of the entry (a rename) keeps the word.
    assert_eq!(st.run(&["update", &id, "--name", "renamed"]).status.code(), Some(0));
    let after: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!((after["status"].as_str(), after["name"].as_str()), (Some("paused"), Some("renamed")));
    // stop works as for any running entry, and records a result.
    assert_eq!(st.run(&["stop", &id]).status.code(), Some(0));
    assert!(!alive(pid));
    assert_eq!(st.entry(&id)["status"], "stopped");

    // A finished one: the kernel decides (nothing alive, no result this version knows: lost),
    // and clear removes it.
    let v = st.start(&["--", "true"]);
    let done = id_of(&v);
    assert_eq!(st.run(&["wait", &done]).status.code(), Some(0));
    // `wait` returns once the result is recorded; the supervisor and its keeper exit just after.
    // Nothing alive is this case's premise, so they are waited for first.
    let recorded: Value =
        serde_json::from_slice(&std::fs::read(st.path().join("procs").join(&done).join("entry.json")).unwrap())
            .unwrap();
    let keeper = recorded["keeperPid"].as_i64();
    let chain: Vec<i32> = [v["supervisorPid"].as_i64(), keeper].into_iter().flatten().map(|p| p as i32).collect();
    assert_eq!(wait_gone(&chain, SECS(10)), Vec::<i32>::new(), "the supervisor and its keeper exit");
    let file = forge(&done);
    let ps: Value = serde_json::from_slice(&st.run(&["ps", "--all", "--json"]).stdout).unwrap();
    let shown = ps["entries"].as_array().unwrap().iter().find(|e| e["id"] == done.as_str()).cloned().unwrap();
    assert_eq!(shown["status"], "lost", "{shown}");
    assert_eq!(st.run(&["clear", &done]).status.code(), Some(0));
    assert!(!file.exists());
}

#[test]
fn ps_escapes_control_characters_from_commands_and_entries() {
    let st = State::new();
    let id = id_of(&st.start(&["--", "sh", "-c", "exit 3", "\u{1b}[2Jwiped\nsecond line"]));
    assert_eq!(st.run(&["wait", &id]).status.code(), Some(3));
    let file = st.path().join("procs").join(&id).join("entry.json");
    let mut v: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    v["statusText"] = "exited (3)\u{1b}[31m\nforged".into();
    std::fs::write(&file, serde_json::to_vec(&v).unwrap()).unwrap();
    let out = st.run(&["ps", "--all"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!text.contains('\u{1b}'), "an escape reached the terminal: {text:?}");
    assert_eq!(text.lines().count(), 2, "the header and one line for the entry: {text:?}");
    assert!(text.contains("\\u{1b}[2Jwiped\\nsecond line"), "{text:?}");
}

#[test]
fn start_env_reaches_the_command_and_its_cleanup_but_not_the_supervisor() {
    let st = State::new();
    // SHEEPDOG_KEEPER=off would turn the keeper off if it reached the supervisor.
    let v = st.start(&[
        "--env",
        "SHEEPDOG_KEEPER=off",
        "--env",
        "SHEEPDOG_TEST_ENV=given",
        "--cleanup",
        "echo \"cleanup:$SHEEPDOG_TEST_ENV\"",
        "--",
        "sh",
        "-c",
        "echo \"cmd:$SHEEPDOG_TEST_ENV:$SHEEPDOG_KEEPER\"; exec sleep 100",
    ]);
    let id = id_of(&v);
    let sup = v["supervisorPid"].as_i64().expect("supervisorPid") as i32;
    let pid = v["pid"].as_i64().expect("pid") as i32;
    let printed = st.wait_log(&id, "stdout.log", "cmd:");
    let environ = |p: i32| std::fs::read(format!("/proc/{p}/environ")).unwrap_or_default();
    let sup_env = environ(sup);
    let parent = sheepdog::os::procfs::stat(sheepdog::os::Pid::new(pid).unwrap()).map(|s| s.ppid).unwrap_or(0);
    st.ok(&["stop", &id]);
    assert!(printed.contains("cmd:given:off"), "{printed}");
    assert!(!sup_env.windows(b"SHEEPDOG_KEEPER".len()).any(|w| w == b"SHEEPDOG_KEEPER"), "the supervisor got --env");
    assert_ne!(parent, sup, "the command's parent is the keeper, not the supervisor");
    let log = st.wait_log(&id, "combined.log", "[cleanup] cleanup:");
    assert!(log.contains("[cleanup] cleanup:given"), "{log}");
}

/// codex#7846 (issue 34, item 7), managed: a `>(reader)` leftover writes what the command
/// printed into the entry's log before the stop of what is left (it used to log nothing).
#[test]
fn issue_34_a_leftover_draining_the_output_reaches_the_log_before_the_stop() {
    let st = State::new();
    let v = st.start(&["--", "bash", "-c", "exec > >(sleep 0.2; cat) 2>&1; seq 5000"]);
    let id = id_of(&v);
    let out = st.run(&["wait", &id, "--timeout", "10s"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let log = std::fs::read_to_string(st.path().join("procs").join(&id).join("stdout.log")).unwrap();
    assert_eq!(log.lines().count(), 5000, "lines the reader had to write were lost");
    assert_eq!(log.lines().last(), Some("5000"));
}

/// Issue 34, item 5: a stop is not a success. An entry whose command traps SIGTERM and exits 0
/// within the stop gives `wait` 143 (128 + SIGTERM), as `run` does, whether `sheepdog stop` or
/// its owner's death stopped it; its own exit code stays recorded as data.
#[test]
fn issue_34_a_stopped_entry_never_waits_as_a_success() {
    let st = State::new();
    let guard = Guard::new();
    let trap = "trap 'exit 0' TERM; echo up; while :; do sleep 0.05; done";
    let mut owner = guard.sleeper();
    let owner_pid = owner.id().to_string();
    for how in ["stop", "owner"] {
        let mut args = vec!["--", "bash", "-c", trap];
        if how == "owner" {
            args.splice(0..0, ["--owner", owner_pid.as_str()]);
        }
        let v = st.start(&args);
        let id = id_of(&v);
        st.wait_log(&id, "stdout.log", "up");
        if how == "stop" {
            st.ok(&["stop", &id]);
        } else {
            owner.kill().unwrap();
        }
        let out = st.run(&["wait", &id, "--timeout", "10s", "--json"]);
        assert_eq!(out.status.code(), Some(143), "{how}: {}", stderr(&out));
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(doc["exitStatus"], 143, "{how}: {doc}");
        let e = st.entry(&id);
        assert_eq!((e["status"].as_str(), e["exitCode"].as_i64()), (Some("stopped"), Some(0)), "{how}: {e}");
    }
    let _ = owner.wait();
}
