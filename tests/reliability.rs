//! Issue 8 ("a cleanup belongs to its entry; members that clear their environment are still
//! caught; truthful results"): real processes, real files, checked with the kernel. Each test
//! has its own state dir; its `State` and `Guard` kill what it started, by recorded identity.
// Linux only: these tests read /proc and rely on the subreaper; macOS is checked by clippy alone.
#![cfg(target_os = "linux")]

mod common;

use std::process::Stdio;

use common::*;

/// Runs a python3 host script with `SHEEPDOG` (the binary) and `STATE` (the test's state dir)
/// in its environment; returns its stdout.
fn host(state: &State, src: &str) -> String {
    let out = std::process::Command::new("python3")
        .args(["-c", src])
        .env("SHEEPDOG", bin())
        .env("STATE", state.path())
        .stdin(Stdio::null())
        .output()
        .expect("python3");
    assert!(out.status.success(), "host script failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn start_passes_only_stdio_so_a_pipe_given_to_start_sees_eof_while_the_command_runs() {
    let state = State::new();
    let out = host(
        &state,
        r#"
import os, select, subprocess, json
r, w = os.pipe()
p = subprocess.run([os.environ["SHEEPDOG"], "--state-dir", os.environ["STATE"], "start", "--json", "--", "sleep", "30"],
                   pass_fds=[w], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, check=True)
os.close(w)
ready, _, _ = select.select([r], [], [], 10)
print("EOF" if ready and os.read(r, 1) == b"" else "HANG")
"#,
    );
    assert_eq!(out.trim(), "EOF", "the supervisor or the command kept the host's pipe open");
    // The command still runs: EOF came from sheepdog letting go, not from the command ending.
    let e = &state.entries()[0];
    assert_eq!(e["status"], "running");
}

#[test]
fn run_gives_the_provider_exactly_stdin_stdout_stderr() {
    let state = State::new();
    let out = host(
        &state,
        r#"
import os, subprocess
r, w = os.pipe()
os.set_inheritable(r, True)
src = "import os\ntry:\n    os.fstat(%d)\n    print('inherited')\nexcept OSError:\n    print('closed')\n" % w
p = subprocess.run([os.environ["SHEEPDOG"], "run", "--", "python3", "-c", src], pass_fds=[r, w],
                   stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, check=True, timeout=30)
print(p.stdout.decode().strip())
"#,
    );
    assert_eq!(out.trim(), "closed", "the provider inherited an fd above 2");
}

#[test]
fn as_pid_1_the_exited_event_reports_the_status_sheepdog_really_exits_with() {
    if std::process::Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .stderr(Stdio::null())
        .status()
        .map(|s| !s.success())
        .unwrap_or(true)
    {
        eprintln!("SKIPPED: unshare --pid --fork --mount-proc is refused here");
        return;
    }
    let guard = Guard::new();
    let mut cmd = std::process::Command::new("unshare");
    cmd.args(["--pid", "--fork", "--mount-proc", bin(), "run", "--events-fd", "1", "--", "sleep", "100"])
        .stdin(Stdio::null());
    let (mut child, lines) = spawn_lines(cmd, &guard);
    let spawned = lines.next(SECS(10));
    assert!(spawned.contains("\"spawned\""), "{spawned}");
    let init = sheepdog::sys::procfs::children(pid(child.id() as i32));
    assert_eq!(init.len(), 1);
    let init = init[0].as_raw();
    guard.track(init);
    sheepdog::sys::procfs::descendants(pid(init)).iter().for_each(|s| guard.track(s.pid.as_raw()));
    signal(init, libc::SIGTERM);
    let exited = loop {
        let l = lines.next(SECS(10));
        if l.contains("\"exited\"") {
            break l;
        }
    };
    let v: serde_json::Value = serde_json::from_str(&exited).unwrap();
    let st = wait_child(&mut child, SECS(10));
    assert_eq!(st.code(), Some(143), "as PID 1 sheepdog exits 128+15");
    assert_eq!(v["status"], 143, "the exited event must say what sheepdog exits with: {exited}");
}
