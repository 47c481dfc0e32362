//! Issue 16: nothing of a tree escapes a stop or a reap: a thread group whose leader called
//! `pthread_exit` (items 2), a group number the kernel reallocated (item 3), a member that could
//! not be signalled (item 5). Each test runs in the tier `SHEEPDOG_CONTAINMENT` chooses (CI runs
//! both), with real processes, and kills what it started by recorded identity.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

/// A C program whose main thread starts a worker that listens on a loopback port, prints
/// `port PID PORT`, then calls `pthread_exit`: the leader is a zombie (`Z`) while the worker
/// accepts connections. With the argument `ignore-term` it ignores SIGTERM (only SIGKILL ends
/// it, and on Linux 6.18 `cgroup.kill` misses such a thread group).
const ZOMBIE_LEADER_C: &str = r#"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
static int fd;
static void *serve(void *arg) {
    (void)arg;
    for (;;) { int c = accept(fd, 0, 0); if (c >= 0) close(c); }
    return 0;
}
int main(int argc, char **argv) {
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    pthread_t t;
    if (argc > 1 && strcmp(argv[1], "ignore-term") == 0) signal(SIGTERM, SIG_IGN);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 16)) { perror("listen"); return 1; }
    getsockname(fd, (struct sockaddr *)&a, &len);
    pthread_create(&t, 0, serve, 0);
    printf("port %d %d\n", getpid(), ntohs(a.sin_port));
    fflush(stdout);
    pthread_exit(0);
}
"#;

/// Compiles `src` with `cc -pthread` into `dir/name`; `None` (after a SKIPPED line) without a
/// C compiler.
fn compile(dir: &Path, name: &str, src: &str) -> Option<PathBuf> {
    let c = dir.join(format!("{name}.c"));
    let out = dir.join(name);
    std::fs::write(&c, src).unwrap();
    match Command::new("cc").arg("-pthread").arg("-o").arg(&out).arg(&c).status() {
        Ok(st) if st.success() => Some(out),
        other => {
            println!("SKIPPED: no working C compiler (cc): {other:?}");
            None
        }
    }
}

/// Kills, when dropped, each recorded process whose start time (read straight from
/// `/proc/PID/stat`, not through the library under test) still matches: a zombie leader's
/// threads die with it even if the library's view of liveness is what broke.
#[derive(Default)]
struct Leaders(std::cell::RefCell<Vec<(i32, String)>>);

fn raw_start(pid: i32) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s.rsplit(')').next()?.split_whitespace().nth(19).map(String::from)
}

impl Leaders {
    fn track(&self, pid: i32) {
        if let Some(t) = raw_start(pid) {
            self.0.borrow_mut().push((pid, t));
        }
    }
}

impl Drop for Leaders {
    fn drop(&mut self) {
        for (p, t) in self.0.borrow().iter() {
            if raw_start(*p).as_ref() == Some(t) {
                let _ = sheepdog::os::process::kill(pid(*p), sheepdog::os::Signal::KILL);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// True while something accepts connections on loopback `port`.
fn accepts(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(500)).is_ok()
}

/// Waits until `port` no longer accepts; true if it stopped within `timeout`.
fn port_freed(port: u16, timeout: Duration) -> bool {
    let end = Instant::now() + timeout;
    while accepts(port) {
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// Starts an entry whose command leaves a zombie-leader listener in a session of its own
/// (`setsid`, so no group signal reaches it) below a `sleep`; waits for its `port PID PORT`
/// line. Returns the entry's id, the listener's pid and its port.
fn start_zombie_leader(st: &State, leaders: &Leaders, zl: &Path, arg: &str) -> (String, i32, u16) {
    let script = format!("setsid {} {arg} & exec sleep 1000", zl.display());
    let e = st.start(&["--", "sh", "-c", &script]);
    let id = e["id"].as_str().unwrap().to_string();
    let log = st.wait_log(&id, "stdout.log", "port ");
    let f: Vec<&str> = log.lines().find_map(|l| l.strip_prefix("port ")).unwrap().split_whitespace().collect();
    let (pid, port): (i32, u16) = (f[0].parse().unwrap(), f[1].parse().unwrap());
    leaders.track(pid);
    // The leader has called pthread_exit: a zombie whose worker thread still listens.
    let end = Instant::now() + SECS(5);
    while std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default().split_whitespace().nth(2)
        != Some("Z")
    {
        assert!(Instant::now() < end, "the leader {pid} never became a zombie");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(accepts(port), "the worker thread listens on {port}");
    (id, pid, port)
}

#[test]
fn issue16_a_zombie_leader_whose_worker_listens_is_alive_for_ps_and_stop_frees_its_port() {
    let st = State::new();
    let leaders = Leaders::default();
    let Some(zl) = compile(st.path(), "zombie-leader", ZOMBIE_LEADER_C) else { return };
    // It ignores SIGTERM: only the SIGKILL after the grace ends it.
    let (id, pid, port) = start_zombie_leader(&st, &leaders, &zl, "ignore-term");
    let e = st.entry(&id);
    assert!(
        e["ports"].as_array().unwrap().iter().any(|p| p == port),
        "ps --json lists the port {port} of the zombie leader's worker: {e}"
    );
    assert!(st.tree_pids(&id).contains(&pid), "ps --tree lists the zombie leader {pid}");
    let out = st.run(&["stop", "--json", "--term-grace", "300ms", &id]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stop --json prints one object");
    let v = v["stopped"][0].clone();
    assert!(port_freed(port, Duration::from_millis(500)), "stop left port {port} listening: {v}");
    assert!(wait_gone(&[pid], SECS(2)).is_empty(), "the zombie leader's worker {pid} survived the stop");
    assert_eq!(out.status.code(), Some(0), "{v} {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(v["treeGone"], true, "{v}");
}

#[test]
fn issue16_reap_after_a_supervisor_sigkill_frees_a_zombie_leaders_port() {
    let st = State::new();
    let leaders = Leaders::default();
    let Some(zl) = compile(st.path(), "zombie-leader", ZOMBIE_LEADER_C) else { return };
    let (id, pid, port) = start_zombie_leader(&st, &leaders, &zl, "");
    let e = st.entry(&id);
    let sup = sheepdog::os::Member {
        pid: pid_of(&e["supervisorPid"]),
        start_time: Some(e["supervisorStartTime"].as_u64().unwrap()),
    };
    assert!(sheepdog::os::signal_member(&sup, sheepdog::os::Signal::KILL), "SIGKILL to the supervisor");
    assert!(wait_gone(&[sup.pid.as_raw()], SECS(2)).is_empty());
    // Whoever frees it (a keeper of the tree, or reap), the port is free once reap returns.
    let out = st.run(&["reap", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(port_freed(port, SECS(1)), "reap left port {port} listening: {}", String::from_utf8_lossy(&out.stdout));
    assert!(wait_gone(&[pid], SECS(1)).is_empty(), "the zombie leader's worker {pid} survived reap");
    let e = st.entry(&id);
    assert_ne!(e["treeGone"], false, "{e}");
}

fn pid_of(v: &serde_json::Value) -> sheepdog::os::Pid {
    pid(v.as_i64().unwrap() as i32)
}
