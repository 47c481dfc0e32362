//! `sheepdog run` in a real terminal (a private tmux server per test, an interactive bash in
//! its pane): the command takes the terminal's foreground, so it can read what is typed, and
//! gives it back when it is gone, so the script that ran it can read next. Both held before the
//! keeper (issue 16) moved the spawn into a process group of its own; a helper's trial found
//! both broken, in both tiers.

mod common;

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{Guard, SECS};

static N: AtomicUsize = AtomicUsize::new(0);

/// One private tmux server whose pane runs an interactive bash without rc files.
struct Tmux {
    socket: String,
    /// TMUX_TMPDIR: the socket lives here, and goes with it.
    dir: tempfile::TempDir,
    guard: Guard,
}

impl Tmux {
    fn start() -> Tmux {
        let socket = format!("sheepdog-term-{}-{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst));
        let t = Tmux { socket, dir: tempfile::tempdir().expect("temp dir"), guard: Guard::new() };
        let ok = t
            .tmux(&["-f", "/dev/null", "new-session", "-d", "-x", "120", "-y", "20"])
            .arg("exec bash --norc --noprofile -i")
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

    fn tmux(&self, args: &[&str]) -> Command {
        let mut c = Command::new("tmux");
        c.env("TMUX_TMPDIR", self.dir.path()).env_remove("TMUX").args(["-L", &self.socket]).args(args);
        c.stdin(Stdio::null());
        c
    }

    fn display(&self, format: &str) -> String {
        let out = self.tmux(&["display-message", "-p", format]).output().expect("tmux display");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn screen(&self) -> String {
        let out = self.tmux(&["capture-pane", "-p"]).output().expect("tmux capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Types `text` and Enter.
    fn line(&self, text: &str) {
        assert!(self.tmux(&["send-keys", "-l", text]).status().expect("send-keys").success());
        assert!(self.tmux(&["send-keys", "Enter"]).status().expect("send-keys").success());
    }

    /// Waits until a line of the screen is exactly `line`; panics with the screen if not.
    fn wait_line(&self, line: &str, timeout: Duration) {
        let end = Instant::now() + timeout;
        loop {
            let s = self.screen();
            if s.lines().any(|l| l.trim_end() == line) {
                return;
            }
            assert!(Instant::now() < end, "{line:?} not on screen within {timeout:?}:\n{s}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Tracks every process of the pane's session for the guard (whatever the test started).
    fn track_all(&self) {
        let sh: i32 = self.display("#{pane_pid}").parse().expect("pane pid");
        let mut todo = vec![common::pid(sh)];
        while let Some(p) = todo.pop() {
            self.guard.track(p.as_raw());
            todo.extend(sheepdog::os::procfs::children(p));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.track_all();
        let _ = self.tmux(&["kill-server"]).stderr(Stdio::null()).status();
    }
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
    let t = Tmux::start();
    t.line(&format!("'{}' run -- sh -c 'read x; echo got:$x'; echo status:$?", common::bin()));
    // Typed once the command waits for it: a command stopped by SIGTTIN never reads it.
    std::thread::sleep(Duration::from_millis(500));
    t.track_all();
    t.line("hello");
    t.wait_line("got:hello", SECS(10));
    t.wait_line("status:0", SECS(10));
}

#[test]
fn the_terminal_comes_back_to_the_script_after_the_command() {
    if !have_tmux("the_terminal_comes_back_to_the_script_after_the_command") {
        return;
    }
    let t = Tmux::start();
    // A non-interactive sh does no job control: only sheepdog can give the terminal back.
    t.line(&format!("sh -c \"'{}' run -- true; read y; echo after:\\$y\"", common::bin()));
    std::thread::sleep(Duration::from_millis(500));
    t.track_all();
    t.line("world");
    t.wait_line("after:world", SECS(10));
}
