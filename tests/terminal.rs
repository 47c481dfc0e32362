//! `sheepdog run` in a real terminal (a private tmux server per test, an interactive bash in
//! its pane): the command takes the terminal's foreground, so it can read what is typed, and
//! gives it back when it is gone, so the script that ran it can read next. Both held before the
//! keeper (issue 16) moved the spawn into a process group of its own; a helper's trial found
//! both broken, in both tiers.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{SECS, TmuxServer};

/// A private tmux server whose pane runs an interactive bash without rc files.
fn bash_in_tmux() -> TmuxServer {
    TmuxServer::start("term", 120, 20, "exec bash --norc --noprofile -i")
}

/// Waits until a line of the screen is exactly `line`.
fn wait_line(t: &TmuxServer, line: &str) {
    t.wait(line, SECS(10), |s| s.lines().any(|l| l.trim_end() == line));
}

fn have_tmux(test: &str) -> bool {
    let ok = Command::new("tmux").arg("-V").output().is_ok_and(|o| o.status.success());
    if !ok {
        println!("SKIPPED: {test}: tmux is not installed");
    }
    ok
}

#[test]
fn an_interactive_command_gets_the_terminal_and_reads_what_is_typed() {
    if !have_tmux("an_interactive_command_gets_the_terminal_and_reads_what_is_typed") {
        return;
    }
    let t = bash_in_tmux();
    t.line(&format!("'{}' run -- sh -c 'read x; echo got:$x'; echo status:$?", common::bin()));
    // Typed once the command waits for it: a command stopped by SIGTTIN never reads it.
    std::thread::sleep(Duration::from_millis(500));
    t.track_pane_tree();
    t.line("hello");
    wait_line(&t, "got:hello");
    wait_line(&t, "status:0");
}

#[test]
fn the_terminal_comes_back_to_the_script_after_the_command() {
    if !have_tmux("the_terminal_comes_back_to_the_script_after_the_command") {
        return;
    }
    let t = bash_in_tmux();
    // A non-interactive sh does no job control: only sheepdog can give the terminal back.
    t.line(&format!("sh -c \"'{}' run -- true; read y; echo after:\\$y\"", common::bin()));
    std::thread::sleep(Duration::from_millis(500));
    t.track_pane_tree();
    t.line("world");
    wait_line(&t, "after:world");
}

/// A pty whose session leader is `sh -c 'sheepdog run ... -- AGENT'` (python's pty, no tmux):
/// prints `agent PID CHILD` from the terminal, then, on `kill` on its stdin, SIGKILLs the shell
/// and closes the master, as a terminal emulator that dies does.
fn pty_host(agent: &str) -> String {
    format!(
        r#"
import fcntl, os, signal, sys, termios, time
master, slave = os.openpty()
shell = os.fork()
if shell == 0:
    os.setsid()
    fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
    for fd in (0, 1, 2):
        os.dup2(slave, fd)
    os.close(master); os.close(slave)
    os.execvp('sh', ['sh', '-c', {cmd:?}])
os.close(slave)
print('shell', shell, flush=True)
buf = b''
while b'\n' not in buf.split(b'agent ', 1)[-1] or b'agent ' not in buf:
    buf += os.read(master, 4096)
print('agent ' + buf.split(b'agent ', 1)[1].split(b'\n')[0].decode().strip(), flush=True)
sys.stdin.readline()
os.kill(shell, signal.SIGKILL)
os.close(master)
print('closed', flush=True)
time.sleep(100)
"#,
        cmd = format!("'{}' run --term-grace 1s -- python3 -c {}", common::bin(), shell_quote(agent))
    )
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// claude-code#21287 (issue 34): the terminal dies under an agent that traps SIGHUP. The
/// kernel's SIGHUP goes to the terminal's foreground (the agent), which ignores it; the hangup
/// of sheepdog's own terminal is the one stop.
#[test]
fn the_terminals_hangup_under_a_hup_trapping_agent_is_the_one_stop() {
    let agent = "import os, signal, subprocess, time\nsignal.signal(signal.SIGHUP, signal.SIG_IGN)\nkid = subprocess.Popen(['setsid', 'sleep', '100'])\nprint('agent', os.getpid(), kid.pid, flush=True)\nwhile True:\n    time.sleep(1)";
    let guard = common::Guard::new();
    let mut host = Command::new("python3");
    host.args(["-c", &pty_host(agent)]).stdin(std::process::Stdio::piped());
    let (mut host, lines) = common::spawn_lines(host, &guard);
    let shell = lines.pids("shell", SECS(10))[0];
    guard.track(shell);
    let tree = lines.pids("agent", SECS(10));
    tree.iter().for_each(|p| guard.track(*p));
    let sup = sheepdog::os::procfs::children(common::pid(shell))
        .into_iter()
        .map(|p| p.as_raw())
        .find(|p| sheepdog::os::procfs::cmdline(common::pid(*p)).contains("sheepdog"))
        .expect("sheepdog under the shell");
    guard.track(sup);
    let keeper = common::keeper_of(sup);
    keeper.iter().for_each(|k| guard.track(*k));
    // In the background of its terminal (the agent holds the foreground), sheepdog waits.
    std::thread::sleep(Duration::from_millis(500));
    assert!(common::alive(sup), "a terminal in the background is not a hangup");

    use std::io::Write as _;
    writeln!(host.stdin.as_mut().unwrap(), "kill").unwrap();
    lines.expect("closed", SECS(5));
    let mut all = tree.clone();
    all.push(sup);
    all.extend(keeper);
    // The term grace (1 s), the kill wait (1.5 s) and a second to spare.
    assert_eq!(common::wait_gone(&all, SECS(4)), Vec::<i32>::new(), "alive after the terminal died");
    let _ = host.kill();
}
