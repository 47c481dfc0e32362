//! Helpers for tests that drive the real binary with real processes.
//!
//! Every process a test learns of is tracked by a [`Guard`] with its start time; on drop (also
//! when the test panics) the guard SIGKILLs whatever of it still lives, by that recorded identity
//! and never by name. Zombies count as dead: this machine's PID 1 does not reap.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use sheepdog::os::Pid;
use sheepdog::os::process;
use sheepdog::os::procfs;
use sheepdog::os::{Member, signal_member};

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_sheepdog")
}

pub fn sheepdog() -> Command {
    Command::new(bin())
}

pub fn pid(raw: i32) -> Pid {
    Pid::new(raw).expect("positive pid")
}

/// Alive = exists and is not a zombie.
pub fn alive(raw: i32) -> bool {
    procfs::is_alive(pid(raw))
}

/// Waits until none of `pids` is alive; returns those still alive after `timeout`.
pub fn wait_gone(pids: &[i32], timeout: Duration) -> Vec<i32> {
    let end = Instant::now() + timeout;
    loop {
        let left: Vec<i32> = pids.iter().copied().filter(|p| alive(*p)).collect();
        if left.is_empty() || Instant::now() >= end {
            return left;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Kills what a test spawned, by recorded pid and start time, when dropped.
#[derive(Default)]
pub struct Guard {
    members: Mutex<Vec<Member>>,
}

impl Guard {
    pub fn new() -> Guard {
        Guard::default()
    }

    /// Records `raw` (if alive) so it is killed at the end of the test.
    pub fn track(&self, raw: i32) {
        if let Some(t) = procfs::start_time(pid(raw)) {
            self.members.lock().unwrap().push(Member { pid: pid(raw), start_time: Some(t) });
        }
    }

    pub fn track_child(&self, child: &Child) {
        self.track(child.id() as i32);
    }

    /// A `sleep 100` standing for an unrelated process (an owner, a container, a victim),
    /// tracked like the rest.
    pub fn sleeper(&self) -> Child {
        let child = Command::new("sleep").arg("100").spawn().expect("spawn sleep");
        self.track_child(&child);
        child
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let members = self.members.lock().map(|m| m.clone()).unwrap_or_default();
        for m in &members {
            signal_member(m, sheepdog::os::Signal::KILL);
        }
        for m in &members {
            // Reap it if it was ours; zombies of others are dead already.
            let _ = process::reap(m.pid, false);
        }
        // `sheepdog run` supervisors killed here (or ending with 124) cannot remove their
        // tree's cgroup: remove each `sheepdog-run-PID-*` of a tracked pid.
        if let Ok(own) = sheepdog::cgroup::own_dir() {
            let names: Vec<String> = std::fs::read_dir(&own)
                .map(|rd| rd.flatten().map(|d| d.file_name().to_string_lossy().into_owned()).collect())
                .unwrap_or_default();
            for m in &members {
                let prefix = format!("sheepdog-run-{}-", m.pid);
                for n in names.iter().filter(|n| n.starts_with(&prefix)) {
                    // Only an empty one: the pid may be another test's supervisor by now.
                    if let Ok(cg) = sheepdog::cgroup::Cgroup::open(&own.join(n), None) {
                        let _ = cg.remove();
                    }
                }
            }
        }
    }
}

/// Lines of a child's stdout, read on a thread, with timeouts.
pub struct Lines {
    rx: Receiver<String>,
}

impl Lines {
    pub fn new<R: Read + Send + 'static>(r: R) -> Lines {
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(r).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Lines { rx }
    }

    /// The next line, or panics after `timeout` (a readiness line that never came).
    pub fn next(&self, timeout: Duration) -> String {
        self.rx.recv_timeout(timeout).unwrap_or_else(|e| panic!("no line within {timeout:?}: {e}"))
    }

    pub fn try_next(&self, timeout: Duration) -> Option<String> {
        self.rx.recv_timeout(timeout).ok()
    }

    /// Waits for a line starting with `prefix` and returns the rest, split on whitespace.
    pub fn expect(&self, prefix: &str, timeout: Duration) -> Vec<String> {
        let end = Instant::now() + timeout;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let line = self.next(left);
            if let Some(rest) = line.strip_prefix(prefix) {
                return rest.split_whitespace().map(String::from).collect();
            }
        }
    }

    /// Waits for a line `prefix PID...` and returns the pids.
    pub fn pids(&self, prefix: &str, timeout: Duration) -> Vec<i32> {
        self.expect(prefix, timeout).iter().map(|s| s.parse().expect("pid")).collect()
    }
}

/// Spawns `cmd` with piped stdout (for readiness lines), tracked by `guard`. Stdin is the
/// caller's choice.
pub fn spawn_lines(mut cmd: Command, guard: &Guard) -> (Child, Lines) {
    let mut child = cmd.stdout(Stdio::piped()).spawn().expect("spawn");
    guard.track_child(&child);
    let lines = Lines::new(child.stdout.take().unwrap());
    (child, lines)
}

/// Spawns `sheepdog run ARGS` with piped stdout (for readiness lines) and stderr.
pub fn spawn_run(args: &[&str], guard: &Guard) -> (Child, Lines) {
    let mut cmd = sheepdog();
    cmd.arg("run").args(args).stdin(Stdio::null()).stderr(Stdio::piped());
    spawn_lines(cmd, guard)
}

/// Waits for a child with a bound; panics (the guard then kills it) if it does not exit.
pub fn wait_child(child: &mut Child, timeout: Duration) -> std::process::ExitStatus {
    let end = Instant::now() + timeout;
    loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            return st;
        }
        if Instant::now() >= end {
            panic!("pid {} did not exit within {timeout:?}", child.id());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

pub fn stderr_of(child: &mut Child) -> String {
    let mut s = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut s);
    }
    s
}

/// Sends a signal by the pid of a child we hold (cannot be reused while unreaped).
pub fn signal(raw: i32, sig: i32) {
    let _ = process::kill(pid(raw), sheepdog::os::Signal::from_raw(sig).unwrap());
}

/// A python3 program as `python3 -c SRC`.
pub fn py(src: &str) -> Vec<String> {
    vec!["python3".into(), "-c".into(), src.into()]
}

pub const SECS: fn(u64) -> Duration = Duration::from_secs;

/// A private state dir for one test, and cleanup of everything its entries started: on drop,
/// every entry's supervisor and live tree are SIGKILLed by recorded identity.
pub struct State {
    pub dir: tempfile::TempDir,
}

impl State {
    pub fn new() -> State {
        State { dir: tempfile::tempdir().expect("temp dir") }
    }

    pub fn path(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// `sheepdog --state-dir DIR ARGS...`, run to completion.
    pub fn run(&self, args: &[&str]) -> std::process::Output {
        self.cmd(args).stdin(Stdio::null()).output().expect("run sheepdog")
    }

    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = sheepdog();
        c.arg("--state-dir").arg(self.path()).args(args);
        c
    }

    /// Runs and returns stdout, asserting success.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(out.status.success(), "{args:?} failed: {:?}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `restart --json ID`: the new entry's id, its command and supervisor tracked by `guard`.
    pub fn restart_tracked(&self, guard: &Guard, id: &str) -> String {
        let out: serde_json::Value = serde_json::from_str(self.ok(&["restart", "--json", id]).trim()).unwrap();
        let new = &out["restarted"][0];
        guard.track(new["pid"].as_i64().unwrap() as i32);
        guard.track(new["supervisorPid"].as_i64().unwrap() as i32);
        new["id"].as_str().unwrap().to_string()
    }

    /// `start --json ARGS` and the parsed object.
    pub fn start(&self, args: &[&str]) -> serde_json::Value {
        let mut a = vec!["start", "--json"];
        a.extend_from_slice(args);
        serde_json::from_str(self.ok(&a).trim()).expect("start --json prints one object")
    }

    /// `ps --all --json` entries.
    pub fn entries(&self) -> Vec<serde_json::Value> {
        let v: serde_json::Value = serde_json::from_str(self.ok(&["ps", "--all", "--json"]).trim()).unwrap();
        v["entries"].as_array().cloned().unwrap_or_default()
    }

    /// The term grace (ms) in effect for `id` as its entry.json records it: a stop under way's
    /// one-off (`stopUnderWay`) until a result is recorded, else the entry's own (`stop`);
    /// `None` while the file cannot be read or parsed (a write in progress).
    pub fn term_grace_ms(&self, id: &str) -> Option<u64> {
        let e = self.raw_entry(id)?;
        let unfinished = matches!(e["status"].as_str(), Some("starting" | "running"));
        e["stopUnderWay"]["termGraceMs"].as_u64().filter(|_| unfinished).or_else(|| e["stop"]["termGraceMs"].as_u64())
    }

    /// The entry's own term grace (ms) in its entry.json (`stop.termGraceMs`), whatever stop runs.
    pub fn own_term_grace_ms(&self, id: &str) -> Option<u64> {
        self.raw_entry(id)?["stop"]["termGraceMs"].as_u64()
    }

    /// `id`'s entry.json as it is on disk; `None` while it cannot be read or parsed.
    fn raw_entry(&self, id: &str) -> Option<serde_json::Value> {
        let text = std::fs::read(self.path().join("procs").join(id).join("entry.json")).ok()?;
        serde_json::from_slice(&text).ok()
    }

    pub fn entry(&self, id: &str) -> serde_json::Value {
        self.entries().into_iter().find(|e| e["id"] == id).unwrap_or_else(|| panic!("no entry {id}"))
    }

    /// Live processes of an entry's tree (from `ps --tree`).
    pub fn tree_pids(&self, id: &str) -> Vec<i32> {
        let v: serde_json::Value = serde_json::from_str(self.ok(&["ps", "--all", "--tree", "--json"]).trim()).unwrap();
        v["entries"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["id"] == id)
            .flat_map(|e| e["tree"].as_array().cloned().unwrap_or_default())
            .map(|p| p["pid"].as_i64().unwrap() as i32)
            .collect()
    }

    /// Spins until the entry's directory exists: a `start` in progress has registered it.
    pub fn wait_entry_dir(&self, id: &str) {
        let dir = self.path().join("procs").join(id);
        let end = Instant::now() + SECS(10);
        while !dir.exists() {
            assert!(Instant::now() < end, "{} never appeared", dir.display());
            std::hint::spin_loop();
        }
    }

    /// Waits until `file` in the entry's dir contains `needle`.
    pub fn wait_log(&self, id: &str, file: &str, needle: &str) -> String {
        let path = self.path().join("procs").join(id).join(file);
        let end = Instant::now() + SECS(10);
        loop {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            if text.contains(needle) {
                return text;
            }
            assert!(Instant::now() < end, "{needle:?} never appeared in {}: {text:?}", path.display());
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for State {
    fn drop(&mut self) {
        let Ok(reg) = sheepdog::registry::Registry::open(Some(self.path().to_path_buf())) else { return };
        let (entries, _) = reg.list();
        for e in entries {
            // The supervisor and its keeper (either would stop the tree after the other's death).
            for r in [e.supervisor, e.keeper].into_iter().flatten() {
                if let (Some(p), Some(t)) = (Pid::new(r.pid), r.start_time) {
                    signal_member(&Member { pid: p, start_time: Some(t) }, sheepdog::os::Signal::KILL);
                }
            }
            if let Some(tree) = sheepdog::inspect::recorded_tree(&e) {
                for m in tree.live() {
                    signal_member(&m, sheepdog::os::Signal::KILL);
                }
            }
            // The cgroup tier: kill by the recorded cgroup and remove it (no test leaves one).
            if let Some(cg) = sheepdog::cgroup::Cgroup::of_entry(&e) {
                remove_cgroup(&cg);
            }
            // One only planned (its supervisor was killed before recording the inode).
            sheepdog::cgroup::remove_recorded(&e);
        }
    }
}

/// Kills everything in a cgroup (`cgroup.kill`), waits for `populated 0` and removes it.
pub fn remove_cgroup(cg: &sheepdog::cgroup::Cgroup) {
    let end = Instant::now() + SECS(5);
    while cg.populated() && Instant::now() < end {
        let _ = cg.kill();
        cg.wait_change(Duration::from_millis(50));
    }
    let _ = cg.remove();
}

/// Runs `shell -c script` with piped stdout (for readiness lines), tracked by `guard`.
pub fn spawn_script(shell: &str, script: &str, guard: &Guard) -> (Child, Lines) {
    let mut cmd = Command::new(shell);
    cmd.args(["-c", script]).stdin(Stdio::null());
    spawn_lines(cmd, guard)
}

/// Runs `script` with python3 in a private mount namespace (`unshare -m`), `SHEEPDOG` and
/// `STATE` in its environment; its stdout lines as they come. `None` (after `SKIPPED`) where
/// unshare is refused.
pub fn in_mount_namespace(st: &State, script: &str, guard: &Guard) -> Option<(Child, Lines)> {
    if unshare_refused(&["-m"]) {
        return None;
    }
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "python3", "-c", script]).env("SHEEPDOG", bin()).env("STATE", st.path()).stdin(Stdio::null());
    Some(spawn_lines(cmd, guard))
}

/// The start of a full-disk test's Python, run by [`in_mount_namespace`]: `d`, a 1 MiB tmpfs
/// mounted in the namespace (the script unmounts it, `umount -l d`, in its `finally`), and
/// `state`, a state dir in it; `start(*args)` runs `sheepdog start --json ARGS` there and prints
/// `pids PROVIDER SUPERVISOR [KEEPER]`; `fill()` fills `d` to its last byte, as
/// `fill_path`.
pub const FULL_DISK_PY: &str = r#"
import json, os, subprocess, tempfile, time
S = os.environ["SHEEPDOG"]
d = tempfile.mkdtemp()
subprocess.run(["mount", "--make-rprivate", "/"], check=True)
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", d], check=True)
state = os.path.join(d, "state")
fill_path = os.path.join(d, "fill")

def start(*args):
    v = json.loads(subprocess.run([S, "--state-dir", state, "start", "--json", *args],
                                  stdout=subprocess.PIPE, check=True).stdout)
    keeper = json.load(open(os.path.join(state, "procs", v["id"], "entry.json"))).get("keeperPid") or ""
    print("pids", v["pid"], v["supervisorPid"], keeper, flush=True)
    return v

def fill():
    with open(fill_path, "wb", buffering=0) as f:
        for size in (65536, 4096, 512, 1):
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError:
                pass
"#;

/// A command that ignores SIGTERM and lives until SIGKILL: which grace a stop used shows in
/// how long it lives.
pub const IGNORES_TERM: &str = "trap '' TERM; while :; do sleep 0.05; done";

/// A full-disk test's script run: `body`, the Python of its `try:` block (indented four spaces),
/// after [`FULL_DISK_PY`] and before a `finally:` that unmounts the tmpfs, in a mount namespace
/// of its own ([`in_mount_namespace`]); the `pids` line that `start` prints is read and each pid
/// tracked by `guard`. `None` (skipped) where a mount namespace is refused.
pub fn on_a_full_disk(st: &State, guard: &Guard, body: &str) -> Option<(Child, Lines, Vec<i32>)> {
    let src = format!("{FULL_DISK_PY}\ntry:\n{body}\nfinally:\n    subprocess.run([\"umount\", \"-l\", d])\n");
    let (child, lines) = in_mount_namespace(st, &src, guard)?;
    let pids = lines.pids("pids", SECS(10));
    pids.iter().for_each(|p| guard.track(*p));
    Some((child, lines, pids))
}

/// True (after printing `SKIPPED: ...`) when `unshare ARGS true` is refused here: tests that need
/// a namespace of their own then skip instead of failing.
pub fn unshare_refused(args: &[&str]) -> bool {
    let refused = Command::new("unshare")
        .args(args)
        .arg("true")
        .stderr(Stdio::null())
        .status()
        .map(|s| !s.success())
        .unwrap_or(true);
    if refused {
        eprintln!("SKIPPED: unshare {} is refused here", args.join(" "));
    }
    refused
}

/// Live processes whose environment carries `KEY=token`, with their start times: how a test
/// finds (and its sweep kills) every process of a tree it marked, by identity, never by name.
pub fn with_env(key: &str, token: &str) -> Vec<Member> {
    procfs::all()
        .into_iter()
        .filter(|s| !s.is_zombie() && procfs::environ_value(s.pid, key).as_deref() == Some(token))
        .map(|s| Member { pid: s.pid, start_time: Some(s.start_time) })
        .collect()
}

/// Writes a running entry (`sleep 100`, this boot, this uid) directly, as a forger or a stale
/// file would, started `age_ms` ago, then lets `f` change it. Returns its id.
pub fn forge_entry(st: &State, age_ms: u64, f: impl FnOnce(&mut sheepdog::entry::Entry)) -> String {
    let reg = sheepdog::registry::Registry::open(Some(st.path().to_path_buf())).unwrap();
    let e = reg
        .create(sheepdog::entry::Entry {
            status: sheepdog::status::Status::Running,
            argv: vec!["sleep".into(), "100".into()],
            command_preview: "sleep 100".into(),
            cwd: "/".into(),
            boot_id: procfs::boot_id(),
            uid: process::getuid(),
            tag: sheepdog::registry::new_tag().expect("random bytes"),
            started_at: sheepdog::files::now_ms() - age_ms,
            ..Default::default()
        })
        .unwrap();
    reg.update(&e.id, f).unwrap().id
}

/// The keeper of supervisor `sup` (its one child that runs sheepdog: see `sheepdog::keeper`), if
/// it has one.
pub fn keeper_of(sup: i32) -> Option<i32> {
    procfs::children(pid(sup)).into_iter().find(|k| procfs::cmdline(*k).contains("sheepdog")).map(|k| k.as_raw())
}

/// SIGKILL of a supervisor *and* its keeper in the same instant: the one window the keeper
/// leaves, `kill -9 -1`, which `reap` and `stop` answer. Both are frozen first (SIGSTOP, until
/// the kernel says `T`), so neither can start the stop when the other dies. The keeper goes
/// first: a stopped keeper whose supervisor died would be sent SIGHUP and SIGCONT by the
/// kernel (its process group became orphaned) and would run the stop. Waits until both are gone.
pub fn kill_supervisor_and_keeper(sup: i32) {
    let keeper = keeper_of(sup);
    let mut both: Vec<i32> = keeper.into_iter().collect();
    both.push(sup);
    for p in &both {
        signal(*p, libc::SIGSTOP);
    }
    let end = Instant::now() + SECS(5);
    while !both.iter().all(|p| procfs::stat(pid(*p)).map(|s| s.state == 'T' || s.is_zombie()).unwrap_or(true)) {
        assert!(Instant::now() < end, "the supervisor or its keeper did not stop");
        std::thread::sleep(Duration::from_millis(1));
    }
    for p in &both {
        signal(*p, libc::SIGKILL);
    }
    assert!(wait_gone(&both, SECS(5)).is_empty(), "the supervisor or its keeper survived SIGKILL");
}

/// One private tmux server (its own socket in its own `TMUX_TMPDIR`, killed on drop) with one
/// pane running `script` in `sh -c`: `top` in a real terminal, `run` in an interactive shell.
/// Every process of the pane's tree it has seen is tracked by its guard, and on drop the whole
/// tree is looked up once more, so a test that fails midway leaves nothing behind.
pub struct TmuxServer {
    socket: String,
    /// TMUX_TMPDIR: the socket lives here, and goes with it.
    dir: tempfile::TempDir,
    pub guard: Guard,
}

static TMUX_SERVERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl TmuxServer {
    /// Starts the server, `width` × `height`, named `sheepdog-PREFIX-PID-N`.
    pub fn start(prefix: &str, width: u16, height: u16, script: &str) -> TmuxServer {
        let n = TMUX_SERVERS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let socket = format!("sheepdog-{prefix}-{}-{n}", std::process::id());
        let t = TmuxServer { socket, dir: tempfile::tempdir().expect("temp dir"), guard: Guard::new() };
        let ok = t
            .tmux(&["-f", "/dev/null", "new-session", "-d", "-x", &width.to_string(), "-y", &height.to_string()])
            .arg(script)
            .status()
            .expect("run tmux")
            .success();
        assert!(ok, "tmux new-session failed");
        for f in ["#{pid}", "#{pane_pid}"] {
            if let Ok(p) = t.display(f).parse() {
                t.guard.track(p);
            }
        }
        t
    }

    /// `tmux -L SOCKET ARGS` against this server.
    pub fn tmux(&self, args: &[&str]) -> Command {
        let mut c = Command::new("tmux");
        c.env("TMUX_TMPDIR", self.dir.path()).env_remove("TMUX").args(["-L", &self.socket]).args(args);
        c.stdin(Stdio::null());
        c
    }

    pub fn display(&self, format: &str) -> String {
        let out = self.tmux(&["display-message", "-p", format]).output().expect("tmux display");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    pub fn screen(&self) -> String {
        let out = self.tmux(&["capture-pane", "-p"]).output().expect("tmux capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Sends tmux key names (`Enter`, `j`, `Escape`).
    pub fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys"];
        args.extend_from_slice(keys);
        assert!(self.tmux(&args).status().expect("send-keys").success());
    }

    /// Types `text` as it is, then Enter.
    pub fn line(&self, text: &str) {
        assert!(self.tmux(&["send-keys", "-l", text]).status().expect("send-keys").success());
        self.keys(&["Enter"]);
    }

    /// Waits until the screen satisfies `pred`; returns it, or panics with the last screen.
    pub fn wait(&self, what: &str, timeout: Duration, pred: impl Fn(&str) -> bool) -> String {
        let end = Instant::now() + timeout;
        loop {
            let s = self.screen();
            if pred(&s) {
                return s;
            }
            assert!(Instant::now() < end, "{what} not on screen within {timeout:?}:\n{s}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn wait_for(&self, needle: &str) -> String {
        self.wait(needle, SECS(10), |s| s.contains(needle))
    }

    /// Tracks every live process of the pane's tree.
    pub fn track_pane_tree(&self) {
        let Ok(sh) = self.display("#{pane_pid}").parse::<i32>() else { return };
        let mut todo = vec![pid(sh)];
        while let Some(p) = todo.pop() {
            self.guard.track(p.as_raw());
            todo.extend(procfs::children(p));
        }
    }
}

impl Drop for TmuxServer {
    fn drop(&mut self) {
        self.track_pane_tree();
        let _ = self.tmux(&["kill-server"]).stderr(Stdio::null()).status();
    }
}

/// A cgroup v1 freezer group for one test (`/sys/fs/cgroup/freezer/sheepdog-test-PID-WHAT`),
/// thawed and removed on drop. A frozen process does not die of SIGKILL until it is thawed: the
/// one way to make "the kernel did not finish the kill" happen on purpose.
pub struct Frozen(pub std::path::PathBuf);

impl Frozen {
    /// A new freezer group, or `None` (and a SKIPPED line) where there is no writable v1 freezer.
    pub fn new(what: &str) -> Option<Frozen> {
        let root = std::path::Path::new("/sys/fs/cgroup/freezer");
        let cg = root.join(format!("sheepdog-test-{}-{what}", std::process::id()));
        if !root.join("tasks").exists() || std::fs::create_dir(&cg).is_err() {
            eprintln!("SKIPPED: no writable cgroup v1 freezer here");
            return None;
        }
        Some(Frozen(cg))
    }

    /// Moves `raw` into the group and freezes it; returns once the kernel says `FROZEN`.
    pub fn freeze(&self, raw: i32) {
        std::fs::write(self.0.join("tasks"), raw.to_string()).expect("join the freezer group");
        std::fs::write(self.0.join("freezer.state"), "FROZEN").expect("freeze");
        let end = Instant::now() + SECS(5);
        while std::fs::read_to_string(self.0.join("freezer.state")).unwrap_or_default().trim() != "FROZEN" {
            assert!(Instant::now() < end, "the freezer never froze");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Thaws the group: a pending SIGKILL then ends what is in it.
    pub fn thaw(&self) {
        let _ = std::fs::write(self.0.join("freezer.state"), "THAWED");
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        self.thaw();
        let end = Instant::now() + SECS(5);
        while std::fs::remove_dir(&self.0).is_err() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// An outside tracer (see [`trace`]), killed and reaped on drop.
pub struct Tracer(Child);

impl Drop for Tracer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An outside tracer of `raw` (`PTRACE_SEIZE` from a python3 child, as `gdb -p` attaches): while
/// it lives, `raw`'s zombie is shown to its tracer only, and its parent cannot reap it. Returns
/// once the seize succeeded; the guard kills the tracer too.
pub fn trace(raw: i32, guard: &Guard) -> Tracer {
    let src = format!(
        "import ctypes, sys, time\n\
         libc = ctypes.CDLL(None, use_errno=True)\n\
         rc = libc.ptrace(0x4206, {raw}, None, None)\n\
         print('seized', rc, ctypes.get_errno(), flush=True)\n\
         time.sleep(300)\n"
    );
    let mut c = Command::new("python3").args(["-c", &src]).stdout(Stdio::piped()).spawn().expect("python3");
    guard.track_child(&c);
    let lines = Lines::new(c.stdout.take().expect("piped"));
    let tracer = Tracer(c);
    let got = lines.expect("seized", SECS(10));
    assert_eq!(got, ["0", "0"], "PTRACE_SEIZE of {raw} failed");
    tracer
}
