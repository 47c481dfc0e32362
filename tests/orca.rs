//! Orca's provider-supervisor semantics on `sheepdog run` (issue 29): the stdin relay, closing
//! stdin on the owner's death, the provider's exit ending the grace, and a spawn failure as an
//! event. Each test is shaped like one of Orca's own real-process tests of its POSIX provider
//! supervisor; real processes, and the kernel says what is left.

mod common;

use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;

fn now_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis()
}

/// An owner (python) that starts `sheepdog run --owner <itself> FLAGS -- PROVIDER` with its
/// stdin a pipe, and a sibling that holds the write end of that pipe open: once the owner is
/// SIGKILLed, the supervisor's stdin never reaches EOF, so only the owner watch can act (Orca's
/// test owner does the same). Prints `sup PID HOLDER`.
fn owner_with_holder(flags: &[&str], provider: &[String]) -> String {
    let quoted: Vec<String> =
        flags.iter().map(|a| format!("{a:?}")).chain(provider.iter().map(|a| format!("{a:?}"))).collect();
    format!(
        r#"
import os, subprocess, sys, time
p = subprocess.Popen([{bin:?}, 'run', '--owner', str(os.getpid()), {args}], stdin=subprocess.PIPE)
holder = subprocess.Popen(['sleep', '100'], stdin=p.stdin)
print('sup', p.pid, holder.pid, flush=True)
time.sleep(100)
"#,
        bin = bin(),
        args = quoted.join(", ")
    )
}

/// Starts the owner script; returns it, its lines, the supervisor's and the holder's pids.
fn spawn_owner(script: &str, guard: &Guard) -> (std::process::Child, Lines, i32, i32) {
    let mut cmd = std::process::Command::new("python3");
    cmd.args(["-c", script]).stdin(Stdio::null());
    let (owner, lines) = spawn_lines(cmd, guard);
    let pids = lines.pids("sup", SECS(10));
    pids.iter().for_each(|p| guard.track(*p));
    (owner, lines, pids[0], pids[1])
}

/// A provider that flushes on stdin EOF (200 ms, then a file, then exit 0) and records a
/// SIGTERM if one comes first: Orca's FLUSHES_ON_STDIN_END_PROVIDER.
fn flushing_provider(flushed: &std::path::Path, termed: &std::path::Path) -> Vec<String> {
    py(&format!(
        r#"
import os, signal, sys, time
def term(*_):
    open({termed:?}, 'w').write('SIGTERM'); os._exit(143)
signal.signal(signal.SIGTERM, term)
print('provider', os.getpid(), flush=True)
sys.stdin.buffer.read()
time.sleep(0.2)
open({flushed:?}, 'w').write('flushed')
"#,
        termed = termed.display().to_string(),
        flushed = flushed.display().to_string()
    ))
}

#[test]
fn owner_death_with_close_stdin_lets_a_flushing_provider_finish_while_a_sibling_holds_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let (flushed, termed) = (dir.path().join("flushed"), dir.path().join("termed"));
    let flags = ["--stdin", "relay", "--on-owner-death", "close-stdin", "--stdin-grace", "3s", "--"];
    let guard = Guard::new();
    let (mut owner, lines, sup, _holder) =
        spawn_owner(&owner_with_holder(&flags, &flushing_provider(&flushed, &termed)), &guard);
    let provider = lines.pids("provider", SECS(10))[0];
    guard.track(provider);

    owner.kill().unwrap();
    owner.wait().unwrap();
    assert_eq!(wait_gone(&[provider], SECS(2)), Vec::<i32>::new(), "the provider did not exit on its EOF");
    assert_eq!(wait_gone(&[sup], SECS(3)), Vec::<i32>::new(), "the supervisor outlived its tree");
    assert_eq!(std::fs::read_to_string(&flushed).ok().as_deref(), Some("flushed"), "the provider never flushed");
    assert!(!termed.exists(), "the provider got SIGTERM before it could flush on its EOF");
}

#[test]
fn owner_death_with_close_stdin_sends_sigterm_to_an_eof_ignoring_provider_no_sooner_than_the_stdin_grace() {
    let dir = tempfile::tempdir().unwrap();
    let termed = dir.path().join("termed");
    // Ignores its EOF and SIGTERM; records when SIGTERM came (Orca's RECORDS_SIGTERM_PROVIDER).
    let provider = py(&format!(
        r#"
import os, signal, time
def term(*_):
    open({termed:?}, 'w').write(str(int(time.time() * 1000)))
signal.signal(signal.SIGTERM, term)
print('provider', os.getpid(), flush=True)
while True:
    time.sleep(1)
"#,
        termed = termed.display().to_string()
    ));
    let flags = [
        "--stdin",
        "relay",
        "--on-owner-death",
        "close-stdin",
        "--stdin-grace",
        "600ms",
        "--term-grace",
        "300ms",
        "--",
    ];
    let guard = Guard::new();
    let (mut owner, lines, sup, _holder) = spawn_owner(&owner_with_holder(&flags, &provider), &guard);
    let provider = lines.pids("provider", SECS(10))[0];
    guard.track(provider);

    let killed_at = now_ms();
    owner.kill().unwrap();
    owner.wait().unwrap();
    assert_eq!(wait_gone(&[provider, sup], SECS(5)), Vec::<i32>::new(), "survivors after the owner's death");
    let termed_at: u128 = std::fs::read_to_string(&termed).expect("the provider never got SIGTERM").parse().unwrap();
    // Clocks of two processes: allow one tick early.
    assert!(termed_at + 20 >= killed_at + 600, "SIGTERM came {} ms after the owner's death", termed_at - killed_at);
    assert!(termed_at < killed_at + 600 + 1500, "SIGTERM came {} ms after the owner's death", termed_at - killed_at);
}

#[test]
fn without_close_stdin_owner_death_still_sends_sigterm_at_once() {
    // The default policy (`stop`): no stdin grace on owner death, relay or not.
    let dir = tempfile::tempdir().unwrap();
    let (flushed, termed) = (dir.path().join("flushed"), dir.path().join("termed"));
    let flags = ["--stdin", "relay", "--stdin-grace", "3s", "--"];
    let guard = Guard::new();
    let (mut owner, lines, sup, _holder) =
        spawn_owner(&owner_with_holder(&flags, &flushing_provider(&flushed, &termed)), &guard);
    let provider = lines.pids("provider", SECS(10))[0];
    guard.track(provider);
    owner.kill().unwrap();
    owner.wait().unwrap();
    assert_eq!(wait_gone(&[provider, sup], SECS(3)), Vec::<i32>::new(), "survivors after the owner's death");
    assert!(termed.exists(), "the default owner death is the one stop, SIGTERM first");
}

/// The link `/proc/PID/fd/0` points at (`pipe:[inode]`).
fn stdin_of(pid: i32) -> String {
    std::fs::read_link(format!("/proc/{pid}/fd/0")).map(|p| p.display().to_string()).unwrap_or_default()
}

#[test]
fn four_mib_through_the_relay_to_a_slow_reader_arrive_intact_and_in_order() {
    let guard = Guard::new();
    // Reads in small pieces with pauses, then prints how many bytes and their digest.
    let reader = py(r#"
import hashlib, os, sys, time
print('provider', os.getpid(), flush=True)
h, n = hashlib.sha256(), 0
while True:
    b = os.read(0, 3000)
    if not b:
        break
    h.update(b); n += len(b)
    if n % 30000 < 3000:
        time.sleep(0.002)
print('got', n, h.hexdigest(), flush=True)
"#);
    let mut child = sheepdog()
        .args(["run", "--stdin", "relay", "--"])
        .args(&reader)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    guard.track_child(&child);
    let lines = Lines::new(child.stdout.take().unwrap());
    let provider = lines.pids("provider", SECS(10))[0];
    guard.track(provider);
    assert_ne!(
        stdin_of(provider),
        stdin_of(child.id() as i32),
        "the provider reads sheepdog's own stdin, not the relay"
    );

    // 4 MiB that a lost, repeated or reordered block would change.
    let mut data = vec![0u8; 4 << 20];
    let mut x: u32 = 0x9e37_79b9;
    for b in data.iter_mut() {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        *b = x as u8;
    }
    let want = {
        let out = std::process::Command::new("python3")
            .args(["-c", "import hashlib,sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .and_then(|mut p| {
                p.stdin.take().unwrap().write_all(&data)?;
                p.wait_with_output()
            })
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        for chunk in data.chunks(100_000) {
            stdin.write_all(chunk).unwrap();
        }
    });
    let got = lines.expect("got", SECS(60));
    writer.join().unwrap();
    assert_eq!(got, vec![(4 << 20).to_string(), want]);
    let st = wait_child(&mut child, SECS(10));
    assert_eq!(st.code(), Some(0));
}

/// utime + stime of `pid`, in clock ticks (`/proc/PID/stat` fields 14 and 15).
fn cpu_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    after.split_whitespace().skip(11).take(2).filter_map(|f| f.parse::<u64>().ok()).sum()
}

#[test]
fn a_relay_whose_reader_is_gone_does_not_end_the_supervisor_before_the_stop() {
    let guard = Guard::new();
    // Reads nothing while the host fills the pipe and the relay's buffer, then closes its stdin.
    let mut child = sheepdog()
        .args(["run", "--stdin", "relay", "--term-grace", "1s", "--", "sh", "-c"])
        .arg("echo provider $$; sleep 0.5; exec 0<&-; echo closed; exec sleep 100")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    guard.track_child(&child);
    let lines = Lines::new(child.stdout.take().unwrap());
    let provider = lines.pids("provider", SECS(10))[0];
    guard.track(provider);
    let mut stdin = child.stdin.take().unwrap();
    // More than the pipe and the relay's buffer hold: bytes wait in the relay when the reader
    // goes, so its next write meets EPIPE.
    let block = vec![b'x'; 64 * 1024];
    let writer = std::thread::spawn(move || {
        for _ in 0..4 {
            if stdin.write_all(&block).is_err() {
                break;
            }
        }
        stdin
    });
    lines.expect("closed", SECS(5));
    // From now on the pipe's write end reports POLLERR: a relay that kept polling it would spin.
    let sup = child.id() as i32;
    let busy = || [Some(sup), keeper_of(sup)].into_iter().flatten().map(cpu_ticks).sum::<u64>();
    let before = busy();
    std::thread::sleep(Duration::from_millis(500));
    let spent = busy() - before;
    assert!(spent < 10, "the supervisor spent {spent} ticks of CPU in 500 ms with nothing to relay");
    assert!(alive(sup), "the supervisor died of its relay's EPIPE");
    assert!(alive(provider), "the relay's EPIPE stopped the tree");
    signal(sup, libc::SIGTERM);
    let st = wait_child(&mut child, SECS(10));
    assert_eq!(st.signal(), Some(libc::SIGTERM), "{st:?}");
    assert_eq!(wait_gone(&[provider], Duration::ZERO), Vec::<i32>::new());
    drop(writer);
}

#[test]
fn a_provider_that_closes_its_stdin_before_any_input_leaves_the_relay_idle() {
    let guard = Guard::new();
    let mut child = sheepdog()
        .args(["run", "--stdin", "relay", "--", "sh", "-c", "exec 0<&-; echo provider $$; exec sleep 100"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    guard.track_child(&child);
    let lines = Lines::new(child.stdout.take().unwrap());
    let provider = lines.pids("provider", SECS(10))[0];
    guard.track(provider);
    let _stdin = child.stdin.take().unwrap();
    // The pipe's write end reports POLLERR with nothing to write: a relay that kept polling it
    // would spin.
    let sup = child.id() as i32;
    let busy = || [Some(sup), keeper_of(sup)].into_iter().flatten().map(cpu_ticks).sum::<u64>();
    std::thread::sleep(Duration::from_millis(100));
    let before = busy();
    std::thread::sleep(Duration::from_millis(500));
    let spent = busy() - before;
    assert!(spent < 10, "the supervisor spent {spent} ticks of CPU in 500 ms with nothing to relay");
    signal(sup, libc::SIGTERM);
    assert_eq!(wait_child(&mut child, SECS(10)).signal(), Some(libc::SIGTERM));
}

#[test]
fn the_relay_closes_the_providers_stdin_when_a_stop_begins() {
    // Orca's `stdin-end-and-sigterm`: a stop ends the provider's stdin too, so a provider that
    // shuts down on EOF while ignoring SIGTERM still ends within the grace.
    let guard = Guard::new();
    let mut child = sheepdog()
        .args(["run", "--stdin", "relay", "--term-grace", "5s", "--"])
        .args(py("import os, signal, sys\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('provider', os.getpid(), flush=True)\nsys.stdin.read()\nprint('eof', flush=True)"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    guard.track_child(&child);
    let lines = Lines::new(child.stdout.take().unwrap());
    let provider = lines.pids("provider", SECS(10))[0];
    guard.track(provider);
    let _stdin = child.stdin.take().unwrap(); // held open: only the relay can give the EOF
    let t0 = Instant::now();
    signal(child.id() as i32, libc::SIGTERM);
    lines.expect("eof", SECS(3));
    let st = wait_child(&mut child, SECS(10));
    assert_eq!(st.signal(), Some(libc::SIGTERM), "{st:?}");
    assert!(t0.elapsed() < SECS(3), "waited {:?}: the provider had no EOF until SIGKILL", t0.elapsed());
}

/// `sheepdog run --term-grace 3s FLAGS` over a provider that exits on SIGTERM (or, with
/// `on_its_own`, at once) and leaves a TERM-ignoring child. Returns how long after the SIGTERM
/// to the supervisor (or after the provider's exit) the child was gone, and the supervisor's
/// status.
fn leftover_gone_after(flags: &[&str], on_its_own: bool) -> (Duration, std::process::ExitStatus) {
    let guard = Guard::new();
    let script = if on_its_own {
        "(trap '' TERM; exec sleep 100) & echo tree $$ $!; sleep 0.3; echo exiting; exit 0"
    } else {
        "trap 'exit 0' TERM; (trap '' TERM; exec sleep 100) & echo tree $$ $!; while :; do sleep 0.05; done"
    };
    let mut child = sheepdog()
        .args(["run", "--term-grace", "3s"])
        .args(flags)
        .args(["--", "sh", "-c", script])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    guard.track_child(&child);
    let lines = Lines::new(child.stdout.take().unwrap());
    let tree = lines.pids("tree", SECS(10));
    tree.iter().for_each(|p| guard.track(*p));
    // The child's `trap '' TERM` is in place once it is `sleep` (its exec).
    let end = Instant::now() + SECS(5);
    while !std::fs::read_to_string(format!("/proc/{}/comm", tree[1])).unwrap_or_default().starts_with("sleep") {
        assert!(Instant::now() < end, "the child never became sleep");
        std::thread::sleep(Duration::from_millis(5));
    }
    let t0 = if on_its_own {
        lines.expect("exiting", SECS(5));
        Instant::now()
    } else {
        signal(child.id() as i32, libc::SIGTERM);
        Instant::now()
    };
    assert_eq!(wait_gone(&tree, SECS(10)), Vec::<i32>::new(), "survivors");
    let gone = t0.elapsed();
    (gone, wait_child(&mut child, SECS(10)))
}

#[test]
fn after_provider_exit_kill_ends_the_grace_when_the_provider_exits_during_a_stop() {
    let (gone, st) = leftover_gone_after(&["--after-provider-exit", "kill"], false);
    assert!(gone < Duration::from_millis(1000), "the TERM-ignoring child lived {gone:?} (1/3 of the grace is 1 s)");
    assert_eq!(st.signal(), Some(libc::SIGTERM), "{st:?}");
}

#[test]
fn by_default_the_rest_of_the_tree_keeps_the_whole_grace_after_the_provider_exits_during_a_stop() {
    let (gone, st) = leftover_gone_after(&[], false);
    assert!(gone >= Duration::from_millis(2900), "the TERM-ignoring child was gone after {gone:?}, before the grace");
    assert_eq!(st.signal(), Some(libc::SIGTERM), "{st:?}");
}

#[test]
fn after_provider_exit_kill_also_applies_when_the_provider_exits_on_its_own() {
    let (gone, st) = leftover_gone_after(&["--after-provider-exit", "kill"], true);
    assert!(gone < Duration::from_millis(1000), "the leftover lived {gone:?} after the provider's exit");
    assert_eq!(st.code(), Some(0), "the provider's own code: {st:?}");
    let (gone, _) = leftover_gone_after(&[], true);
    assert!(gone >= Duration::from_millis(2900), "by default the leftover gets the grace; gone after {gone:?}");
}

/// `sheepdog run --events-fd 3 -- ARGV` as a python launcher execs it (its exact argv and
/// environment, so a test can size them): the events and sheepdog's status.
fn spawn_failed_events(launcher: &str) -> (Vec<serde_json::Value>, std::process::ExitStatus, String) {
    let guard = Guard::new();
    let mut child = std::process::Command::new("python3")
        .args(["-c", launcher, bin()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    guard.track_child(&child);
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    let st = wait_child(&mut child, SECS(10));
    let err = stderr_of(&mut child);
    let events = out.lines().map(|l| serde_json::from_str(l).expect("one JSON object per line")).collect();
    (events, st, err)
}

/// The launcher: events on fd 3 (a dup of its stdout), then `execve(sheepdog, run ...)`.
const LAUNCH: &str = r#"
import os, sys
def launch(argv, env=None):
    os.dup2(1, 3)
    os.execve(sys.argv[1], [sys.argv[1], 'run', '--events-fd', '3', '--', *argv], env if env is not None else dict(os.environ))
"#;

fn assert_spawn_failed(ev: &[serde_json::Value], command: &str, errno: &str, number: i32, status: i32) {
    assert_eq!(ev.len(), 1, "{ev:?}");
    let e = &ev[0];
    assert_eq!(e["v"], 1);
    assert_eq!(e["event"], "spawnFailed", "{e}");
    assert_eq!(e["command"], command);
    assert_eq!(e["errno"], errno);
    assert_eq!(e["errnoNumber"], number);
    assert_eq!(e["exitStatus"], status);
    assert!(e["message"].as_str().unwrap().starts_with(command), "{e}");
}

#[test]
fn spawn_failed_event_for_a_command_not_found() {
    let (ev, st, err) = spawn_failed_events(&format!("{LAUNCH}\nlaunch(['sheepdog-no-such-command', 'x'])"));
    assert_spawn_failed(&ev, "sheepdog-no-such-command", "ENOENT", libc::ENOENT, 127);
    assert_eq!(st.code(), Some(127));
    assert_eq!(err.trim(), format!("sheepdog: {}", ev[0]["message"].as_str().unwrap()), "the line and the event agree");
}

#[test]
fn spawn_failed_event_for_a_file_that_is_not_executable() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-executable");
    std::fs::write(&file, "#!/bin/sh\necho no\n").unwrap();
    let path = file.display().to_string();
    let (ev, st, _) = spawn_failed_events(&format!("{LAUNCH}\nlaunch([{path:?}])"));
    assert_spawn_failed(&ev, &path, "EACCES", libc::EACCES, 126);
    assert_eq!(st.code(), Some(126));
}

#[test]
fn spawn_failed_event_for_an_argument_list_too_long_for_the_command_but_not_for_sheepdog() {
    // The provider's `execve` copies its path twice (as the file name and as argv[0]) where
    // sheepdog's had it once: a path of 4000 bytes, with arguments that fill sheepdog's own
    // exec to 2 KB under the kernel's limit (fs/exec.c, bprm_stack_limits), leaves the
    // provider's about 2 KB over it.
    let launcher = format!(
        r#"{LAUNCH}
import resource
soft = resource.getrlimit(resource.RLIMIT_STACK)[0]
limit = 6 << 20 if soft == resource.RLIM_INFINITY else min(6 << 20, soft // 4)
limit = max(limit, 128 << 10)
path = '/' + './' * 1994 + 'bin/true'
env = {{'PATH': '/usr/bin:/bin'}}
env_bytes = sum(len(k) + len(v) + 2 for k, v in env.items())
head = [sys.argv[1], 'run', '--events-fd', '3', '--', path]
def size(args):
    argv = head + args
    return len(sys.argv[1]) + 1 + env_bytes + sum(len(a) + 1 for a in argv) + (len(argv) + len(env)) * 8
args = []
while size(args + ['x' * 99999]) < limit - 2048:
    args.append('x' * 99999)
rest = limit - 2048 - size(args) - 8 - 1
if rest > 0:
    args.append('y' * rest)
launch([path, *args], env)
"#
    );
    let (ev, st, _) = spawn_failed_events(&launcher);
    let path = format!("/{}bin/true", "./".repeat(1994));
    assert_spawn_failed(&ev, &path, "E2BIG", libc::E2BIG, 126);
    assert_eq!(st.code(), Some(126));
}
