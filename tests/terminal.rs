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
