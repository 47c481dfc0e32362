//! Issue 16, item 3: no stop through a reused pid. After an entry's supervisor and provider
//! are gone, a process in the recorded process group and session counts as the entry's only
//! while neither number has been handed to a new process: the kernel reallocates a pgid or sid
//! number only once no process uses it, so a new group of that number is someone else's.
//!
//! Its own test binary: the real reproduction makes this process a child subreaper (so the
//! killed supervisor and provider can be reaped and their pids freed), which must not change
//! how other tests' orphans are parented.

#![cfg(target_os = "linux")]

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;
use sheepdog::os::{Member, Signal, signal_member};

/// The tests here run one at a time: the reproduction needs no other fork of this process
/// between a starter and its supervisor.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn member(pid_v: &Value, start: &Value) -> Member {
    Member { pid: pid(pid_v.as_i64().unwrap() as i32), start_time: Some(start.as_u64().unwrap()) }
}

/// The session of a live process (`/proc/PID/stat` field 6).
fn session_of(raw: i32) -> i32 {
    sheepdog::os::procfs::stat(pid(raw)).expect("alive").session
}

/// The reap's action for entry `id`.
fn reap_action(st: &State, id: &str) -> Option<Value> {
    let out = st.run(&["reap", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("reap --json prints one object");
    v["actions"].as_array().and_then(|a| a.iter().find(|x| x["id"] == id).cloned())
}

#[test]
fn issue16_reap_leaves_a_new_group_alone_whose_numbers_an_old_entry_recorded() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let st = State::new();
    // A healthy entry B, and an old entry A recorded (as a killed one would have been) with the
    // same provider pid, group and session numbers, but older start times: A's processes are
    // gone and the kernel gave their numbers to B's.
    let b = st.start(&["--", "sleep", "1000"]);
    let bid = b["id"].as_str().unwrap().to_string();
    let b_provider = member(&b["pid"], &b["startTime"]);
    let (bp, bs) = (b_provider.pid.as_raw(), session_of(b_provider.pid.as_raw()));
    let old = |e: &mut sheepdog::entry::Entry| {
        e.provider = Some(sheepdog::entry::ProcRef::new(bp, Some(b["startTime"].as_u64().unwrap() - 100)));
        e.pgid = Some(bp);
        e.sid = Some(bs);
        e.supervisor = Some(sheepdog::entry::ProcRef::new(bs, Some(b["supervisorStartTime"].as_u64().unwrap() - 100)));
    };
    let a = forge_entry(&st, 60_000, old);
    let a2 = forge_entry(&st, 60_000, old);
    // `stop` of such an entry finds nothing of it alive either.
    let out = st.run(&["stop", &a2]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        sheepdog::os::procfs::start_time(b_provider.pid),
        b_provider.start_time,
        "stop killed the new entry's provider"
    );
    assert_eq!(st.entry(&a)["status"], "lost", "ps: the old entry's group is not alive, a new one of its number is");
    let action = reap_action(&st, &a);
    assert_eq!(
        sheepdog::os::procfs::start_time(b_provider.pid),
        b_provider.start_time,
        "reap killed the new entry's provider"
    );
    assert_eq!(st.entry(&bid)["status"], "running");
    assert_eq!(st.entry(&a)["status"], "lost", "{action:?}");
    assert_eq!(action.as_ref().map(|x| x["action"].clone()), Some(Value::from("lost")), "{action:?}");
}

const NS_LAST_PID: &str = "/proc/sys/kernel/ns_last_pid";

/// Makes the next fork get pid `next` if it is free (as root): writes `next - 1` to
/// `/proc/sys/kernel/ns_last_pid`. False if refused.
fn next_pid_is(next: i32) -> bool {
    std::fs::write(NS_LAST_PID, (next - 1).to_string()).is_ok()
}

/// True if this process may set the next pid (root in the pid namespace's owner): the current
/// value, written back, changes nothing.
fn may_set_next_pid() -> bool {
    std::fs::read_to_string(NS_LAST_PID).is_ok_and(|v| std::fs::write(NS_LAST_PID, v.trim()).is_ok())
}

#[test]
fn issue16_reap_after_pid_reuse_through_ns_last_pid_spares_the_new_entry_and_records_the_old_lost() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !may_set_next_pid() {
        println!("SKIPPED: writing /proc/sys/kernel/ns_last_pid needs root");
        return;
    }
    // This process adopts the killed supervisor and provider, so that their zombies are reaped
    // and their pids can be handed out again (this host's PID 1 never reaps).
    sheepdog::os::process::set_child_subreaper().expect("PR_SET_CHILD_SUBREAPER");
    let st = State::new();
    let start = |st: &State| -> (i32, Value) {
        let mut cmd = st.cmd(&["start", "--json", "--", "sleep", "1000"]);
        let out = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).spawn().expect("spawn start");
        let starter = out.id() as i32;
        let out = out.wait_with_output().expect("start");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        (starter, serde_json::from_slice(&out.stdout).expect("start --json"))
    };
    // SIGKILL (or reap) a process that is, or will be, this process's child.
    let kill_and_reap = |m: &Member| {
        signal_member(m, Signal::KILL);
        // Until its pid is free: an orphan is adopted a moment after its parent dies.
        let end = Instant::now() + SECS(5);
        while std::path::Path::new(&format!("/proc/{}", m.pid)).exists() {
            let _ = sheepdog::os::process::reap(m.pid, false);
            assert!(Instant::now() < end, "pid {} was not adopted and reaped", m.pid);
            std::thread::sleep(Duration::from_millis(2));
        }
    };
    let identities =
        |e: &Value| (member(&e["supervisorPid"], &e["supervisorStartTime"]), member(&e["pid"], &e["startTime"]));
    // The supervisor's keeper, if it has one (the chain supervisor -> keeper -> provider).
    let keeper = |sup: &Member| {
        keeper_of(sup.pid.as_raw())
            .map(|k| Member { pid: pid(k), start_time: sheepdog::os::procfs::start_time(pid(k)) })
    };
    let stop_and_reap = |e: &Value| {
        let (sup, _) = identities(e);
        let k = keeper(&sup);
        let out = st.run(&["stop", e["id"].as_str().unwrap()]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        kill_and_reap(&sup);
        if let Some(k) = k {
            kill_and_reap(&k);
        }
    };
    // A: an entry whose starter, supervisor, keeper (if any) and provider were forked back to
    // back (nothing else on this busy machine forked in between), so a later start can repeat
    // the pids.
    let mut old = None;
    for _ in 0..20 {
        let (starter, e) = start(&st);
        let (sup, prov) = identities(&e);
        let k = keeper(&sup);
        let gap = if k.is_some_and(|k| k.pid.as_raw() == sup.pid.as_raw() + 1) { 2 } else { 1 };
        if sup.pid.as_raw() == starter + 1 && prov.pid.as_raw() == sup.pid.as_raw() + gap {
            old = Some((e, sup, k, prov));
            break;
        }
        stop_and_reap(&e);
    }
    let Some((a, a_sup, a_keeper, a_prov)) = old else {
        println!("SKIPPED: no entry was forked back to back in 20 tries (a busy machine)");
        return;
    };
    let aid = a["id"].as_str().unwrap().to_string();
    let (s, p) = (a_sup.pid.as_raw(), a_prov.pid.as_raw());
    assert_eq!(session_of(p), s, "the provider is in its supervisor's session");
    // A's supervisor and provider are SIGKILLed; their zombies are reaped, so both pids are free.
    // The chain killed whole: both frozen first, then the keeper killed before the supervisor
    // (a stopped keeper whose supervisor dies is sent SIGHUP and SIGCONT by the kernel, its
    // group orphaned, and would stop the tree). Its zombie is reaped once the supervisor is gone.
    let chain: Vec<Member> = a_keeper.iter().copied().chain([a_sup]).collect();
    for m in &chain {
        signal(m.pid.as_raw(), libc::SIGSTOP);
    }
    let end = Instant::now() + SECS(5);
    while !chain.iter().all(|m| sheepdog::os::procfs::stat(m.pid).map(|s| s.state == 'T').unwrap_or(true)) {
        assert!(Instant::now() < end, "the chain did not stop");
        std::thread::sleep(Duration::from_millis(1));
    }
    if let Some(k) = &a_keeper {
        signal_member(k, Signal::KILL);
    }
    kill_and_reap(&a_sup);
    if let Some(k) = &a_keeper {
        kill_and_reap(k);
    }
    kill_and_reap(&a_prov);
    // B: new entries until one's supervisor and provider land on A's pids.
    let mut landed = None;
    for _ in 0..40 {
        if !next_pid_is(s - 1) {
            break;
        }
        let (_, b) = start(&st);
        let (b_sup, b_prov) = identities(&b);
        if (b_sup.pid.as_raw(), b_prov.pid.as_raw()) == (s, p) {
            landed = Some((b, b_prov));
            break;
        }
        stop_and_reap(&b);
    }
    let Some((b, b_prov)) = landed else {
        println!("SKIPPED: no new entry landed on pids {s} and {p} in 40 tries");
        return;
    };
    assert_eq!(session_of(p), s, "the new entry has the old group and session numbers");
    let action = reap_action(&st, &aid);
    assert_eq!(
        sheepdog::os::procfs::start_time(b_prov.pid),
        b_prov.start_time,
        "reap killed the new entry's provider: {action:?}"
    );
    assert_eq!(st.entry(b["id"].as_str().unwrap())["status"], "running");
    let old = st.entry(&aid);
    assert_eq!(old["status"], "lost", "{} {} {action:?}", old["statusText"], old["stopReason"]);
}
