//! Issue 34, item 1: a member that moves itself to another cgroup (it writes its pid into that
//! cgroup's `cgroup.procs`, systemd#6875) is still the tree's. `run`, `stop` and `reap` end it,
//! and `treeGone` is true only once it is gone. Each test runs in the tier `SHEEPDOG_CONTAINMENT`
//! chooses (CI runs both); the subreaper tier never relied on the cgroup. Real processes, real
//! cgroups, checked in /proc.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::time::Duration;

use common::*;

/// A cgroup v2 directory beside sheepdog's own tree cgroups, for the members to escape into:
/// removed on drop (after its processes are gone). `None` where cgroup v2 cannot be written.
struct Elsewhere(PathBuf);

impl Elsewhere {
    fn new(what: &str) -> Option<Elsewhere> {
        let out = sheepdog().args(["doctor", "--json"]).output().ok()?;
        let d: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        let mount = PathBuf::from(d["cgroupMount"].as_str()?);
        let own = mount.join(d["ownCgroup"].as_str()?.trim_start_matches('/'));
        let dir = own.join(format!("sdtest-escape-{}-{what}", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        Some(Elsewhere(dir))
    }
}

impl Drop for Elsewhere {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0.join("cgroup.kill"), "1");
        let end = std::time::Instant::now() + SECS(5);
        while std::fs::remove_dir(&self.0).is_err() && std::time::Instant::now() < end {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A provider that starts two members which move themselves into `to`: one in its process
/// group, one in a session of its own (`setsid`). Each prints `member PID` once it moved.
fn escaping_script(to: &std::path::Path) -> String {
    let procs = to.join("cgroup.procs");
    format!(
        "sh -c 'echo $$ > {p} && echo member $$ && exec sleep 100 >/dev/null 2>&1' & \
         setsid sh -c 'echo $$ > {p} && echo member $$ && exec sleep 100 >/dev/null 2>&1' & wait",
        p = procs.display()
    )
}

fn in_cgroup(pid: i32, dir: &std::path::Path) -> bool {
    let want = dir.to_string_lossy().into_owned();
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("0::"))
        .any(|p| want.ends_with(p))
}

#[test]
fn run_ends_a_member_that_moved_itself_to_another_cgroup_before_it_exits() {
    let Some(elsewhere) = Elsewhere::new("run") else {
        println!("SKIPPED: cgroup v2 cannot be written here");
        return;
    };
    let guard = Guard::new();
    let script = escaping_script(&elsewhere.0);
    let (mut child, lines) = spawn_run(&["--term-grace", "300ms", "--", "sh", "-c", &script], &guard);
    let members = [lines.pids("member", SECS(10))[0], lines.pids("member", SECS(10))[0]];
    members.iter().for_each(|p| guard.track(*p));
    assert!(members.iter().all(|p| in_cgroup(*p, &elsewhere.0)), "the members moved");
    signal(child.id() as i32, libc::SIGTERM);
    let st = wait_child(&mut child, SECS(10));
    let err = stderr_of(&mut child);
    // run's exit means the tree is gone: the escaped members died before it.
    let left: Vec<i32> = members.iter().copied().filter(|p| alive(*p)).collect();
    assert_eq!(left, Vec::<i32>::new(), "run exited ({st:?}) while escaped members lived: {err}");
    assert!(st.code() == Some(143) || st.signal() == Some(libc::SIGTERM), "{st:?} {err}");
}

#[test]
fn stop_and_reap_end_a_member_that_moved_itself_to_another_cgroup() {
    let Some(elsewhere) = Elsewhere::new("stop") else {
        println!("SKIPPED: cgroup v2 cannot be written here");
        return;
    };
    let st = State::new();
    let guard = Guard::new();
    let out_file = st.path().join("members");
    let script = format!("({}) > {}", escaping_script(&elsewhere.0), out_file.display());
    let start = |name: &str| {
        let v = st.start(&["--name", name, "--term-grace", "300ms", "--", "sh", "-c", &script]);
        let id = v["id"].as_str().unwrap().to_string();
        guard.track(v["supervisorPid"].as_i64().unwrap() as i32);
        id
    };
    let members = |n: usize| -> Vec<i32> {
        let end = std::time::Instant::now() + SECS(10);
        loop {
            let text = std::fs::read_to_string(&out_file).unwrap_or_default();
            let pids: Vec<i32> = text.lines().filter_map(|l| l.strip_prefix("member ")?.parse().ok()).collect();
            if pids.len() >= n {
                pids.iter().for_each(|p| guard.track(*p));
                return pids;
            }
            assert!(std::time::Instant::now() < end, "the members never moved: {text}");
            std::thread::sleep(Duration::from_millis(10));
        }
    };

    // stop, through the supervisor.
    let id = start("stopped");
    let first = members(2);
    let out = st.run(&["stop", &id]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(wait_gone(&first, Duration::ZERO), Vec::<i32>::new(), "stop returned while escaped members lived");
    assert_eq!(st.entry(&id)["treeGone"], true);

    // reap, after the supervisor and its keeper were killed together.
    let _ = std::fs::remove_file(&out_file);
    let id = start("reaped");
    let second = members(2);
    let sup = st.entry(&id)["supervisorPid"].as_i64().unwrap() as i32;
    kill_supervisor_and_keeper(sup);
    assert!(second.iter().all(|p| alive(*p)));
    let out = st.run(&["reap"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(wait_gone(&second, SECS(5)), Vec::<i32>::new(), "reap left escaped members");
    let e = st.entry(&id);
    assert_eq!((&e["status"], &e["treeGone"]), (&serde_json::json!("reaped"), &serde_json::json!(true)), "{e}");
    drop(elsewhere);
}

#[test]
fn an_escaped_member_keeps_the_stop_unfinished_until_it_is_gone() {
    // The kill of the recorded tree must wait for the escaped member too: with it frozen (the
    // cgroup v1 freezer holds it through SIGKILL), the stop is not done, and says so.
    let (Some(elsewhere), Some(frozen)) = (Elsewhere::new("frozen"), Frozen::new("escape")) else {
        println!("SKIPPED: cgroup v2 or the v1 freezer cannot be written here");
        return;
    };
    let st = State::new();
    let guard = Guard::new();
    let out_file = st.path().join("members");
    let procs = elsewhere.0.join("cgroup.procs");
    let script = format!(
        "(setsid sh -c 'echo $$ > {} && echo member $$ && exec sleep 100' & wait) > {}",
        procs.display(),
        out_file.display()
    );
    let v = st.start(&["--term-grace", "200ms", "--kill-wait", "300ms", "--", "sh", "-c", &script]);
    let id = v["id"].as_str().unwrap().to_string();
    guard.track(v["supervisorPid"].as_i64().unwrap() as i32);
    let end = std::time::Instant::now() + SECS(10);
    let member = loop {
        let text = std::fs::read_to_string(&out_file).unwrap_or_default();
        if let Some(p) = text.lines().find_map(|l| l.strip_prefix("member ")?.parse::<i32>().ok()) {
            break p;
        }
        assert!(std::time::Instant::now() < end, "the member never moved");
        std::thread::sleep(Duration::from_millis(10));
    };
    guard.track(member);
    frozen.freeze(member);
    let out = st.run(&["stop", &id]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(124), "{text}");
    assert!(text.contains(&format!("pid {member} (sleep) is still alive")), "{text}");
    assert_eq!(st.entry(&id)["treeGone"], false);
    frozen.thaw();
    assert_eq!(wait_gone(&[member], SECS(5)), Vec::<i32>::new());
}
