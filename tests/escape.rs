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
    // The supervisor and its keeper in the same instant (else the keeper stops the tree): what
    // is left is reap's to stop.
    kill_supervisor_and_keeper(pid_of(&e["supervisorPid"]).as_raw());
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

/// A setuid-root helper as a real one behaves: it becomes root for good (`setuid(0)`, so the
/// user who ran it may no longer signal it), then runs its arguments.
const BECOME_ROOT_C: &str = r#"
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc < 2 || setgid(0) || setuid(0)) { perror("become-root"); return 1; }
    execvp(argv[1], argv + 1);
    perror("exec");
    return 127;
}
"#;

/// The owner of `/proc/PID`: the process's uid.
fn uid_of(raw: i32) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{raw}")).ok().map(|m| m.uid())
}

/// The uid sheepdog runs as in the permission test: `nobody`.
const NOBODY: u32 = 65534;

#[test]
fn issue16_a_member_that_became_root_is_reported_not_stopped_and_a_second_stop_tries_again() {
    if sheepdog::os::process::getuid() != 0 {
        println!("SKIPPED: needs root, to run sheepdog as uid {NOBODY} with a setuid-root member");
        return;
    }
    let st = State::new();
    let leaders = Leaders::default();
    use std::os::unix::fs::PermissionsExt;
    // A directory every user may enter, holding the helper (setuid root) and the state dir
    // (owned by the unprivileged user, as its own would be).
    std::fs::set_permissions(st.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let Some(helper) = compile(st.path(), "become-root", BECOME_ROOT_C) else { return };
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let state = st.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&state, Some(NOBODY), Some(NOBODY)).unwrap();
    // The binary, reachable by that user whatever the checkout's directory allows (a clone under
    // `mktemp -d` is 0700): a hard link beside the helper, else a copy.
    let sd = st.path().join("sheepdog");
    if std::fs::hard_link(bin(), &sd).is_err() {
        std::fs::copy(bin(), &sd).unwrap();
    }
    let sd = sd.to_str().unwrap().to_string();
    let as_nobody = |args: &[&str]| {
        let out = Command::new("setpriv")
            .args(["--reuid", &NOBODY.to_string(), "--regid", &NOBODY.to_string(), "--clear-groups", &sd])
            .arg("--state-dir")
            .arg(&state)
            .args(args)
            .env_remove("SHEEPDOG_STATE_DIR")
            // A directory the unprivileged user may enter: `start` records its cwd, and the
            // checkout may sit in a directory only root can enter (a `mktemp -d` clone).
            .current_dir(st.path())
            .stdin(std::process::Stdio::null())
            .output()
            .expect("setpriv");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = as_nobody(&[
        "start",
        "--json",
        "--name",
        "suid",
        "--term-grace",
        "200ms",
        "--kill-wait",
        "300ms",
        "--",
        helper.to_str().unwrap(),
        "sleep",
        "1000",
    ]);
    if code != Some(0) && err.contains("setpriv") {
        println!("SKIPPED: setpriv is refused here: {err}");
        return;
    }
    assert_eq!(code, Some(0), "{out} {err}");
    let e: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let id = e["id"].as_str().unwrap().to_string();
    let provider = e["pid"].as_i64().unwrap() as i32;
    leaders.track(provider);
    // Once it has become root, the user who started it may not signal it.
    let end = Instant::now() + SECS(5);
    while uid_of(provider) != Some(0) || !sheepdog::os::procfs::cmdline(pid(provider)).starts_with("sleep") {
        assert!(Instant::now() < end, "the helper never became root");
        std::thread::sleep(Duration::from_millis(5));
    }
    let line = "1 process of uid 0 could not be signalled: permission denied";
    let (code, out, err) = as_nobody(&["stop", "suid"]);
    assert!(out.lines().any(|l| l == line), "stop names what it could not stop: {out:?} {err:?}");
    assert!(!out.contains("Stopped"), "{out:?}");
    assert_eq!(code, Some(124), "{out} {err}");
    let (_, ps, _) = as_nobody(&["ps", "--all", "--json"]);
    let v: serde_json::Value = serde_json::from_str(ps.trim()).unwrap();
    let e = v["entries"].as_array().unwrap().iter().find(|x| x["id"] == id).cloned().unwrap();
    assert_eq!(e["treeGone"], false, "{e}");
    assert_ne!(e["statusText"], "stopped", "{e}");
    assert!(e["statusText"].as_str().unwrap().contains(line), "{e}");
    let (_, table, _) = as_nobody(&["ps", "--all"]);
    assert!(table.contains("not stopped"), "{table}");
    // A second stop tries again, and says so again: it has not been stopped.
    let (code, out, err) = as_nobody(&["stop", "suid"]);
    assert!(out.lines().any(|l| l == line), "the second stop tried again: {out:?} {err:?}");
    assert!(!out.contains("already"), "{out:?}");
    assert_eq!(code, Some(124), "{out} {err}");
    assert!(sheepdog::os::procfs::is_alive(pid(provider)), "the root member lives on (nobody could stop it)");
    // Once the member is gone (ended here, by root), the next stop finds the tree gone and
    // records it.
    let _ = sheepdog::os::process::kill(pid(provider), sheepdog::os::Signal::KILL);
    assert!(wait_gone(&[provider], SECS(2)).is_empty());
    let (code, out, err) = as_nobody(&["stop", "suid"]);
    assert_eq!(code, Some(0), "{out} {err}");
    let (_, ps, _) = as_nobody(&["ps", "--all", "--json"]);
    let v: serde_json::Value = serde_json::from_str(ps.trim()).unwrap();
    assert_eq!(v["entries"][0]["treeGone"], true, "{v}");
}
