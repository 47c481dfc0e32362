//! `sheepdog top` in a real terminal: each test runs it inside its own tmux server (a private
//! socket, killed at the end), starts entries in its own state dir, and reads the screen with
//! `tmux capture-pane`. The rendering itself is unit-tested in `crates/top/src/draw.rs`.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{SECS, State, TmuxServer, alive, wait_gone};

type Tmux = TmuxServer;

/// A private tmux server whose pane runs `sheepdog top` after a marker line, and a shell line
/// that reports top's exit status.
fn start_top(state: &State, width: u16, height: u16, env: &[(&str, &str)]) -> Tmux {
    let envs: String = env.iter().map(|(k, v)| format!("{k}={v} ")).collect();
    let script = format!(
        "echo BEFORE-TOP; {envs}'{}' --state-dir '{}' top; echo \"top exited $?\"; exec sleep 600",
        common::bin(),
        state.path().display()
    );
    TmuxServer::start("top", width, height, &script)
}

/// The pid of `sheepdog-top` (the pane shell's child that `sheepdog top` exec'd into).
fn top_pid(t: &Tmux) -> i32 {
    let sh: i32 = t.display("#{pane_pid}").parse().expect("pane pid");
    let kids = sheepdog::os::procfs::children(common::pid(sh));
    let p = kids.first().expect("top runs in the pane").as_raw();
    t.guard.track(p);
    p
}

/// The line of the list that starts with `name`.
fn line_of<'a>(screen: &'a str, name: &str) -> &'a str {
    screen.lines().find(|l| l.starts_with(name)).unwrap_or("")
}

#[test]
fn entries_and_statuses_appear_and_an_exit_shows_within_2s() {
    let st = State::new();
    st.start(&["--name", "web", "--session", "s1", "--", "sleep", "300"]);
    let flag = st.path().join("go");
    let script = format!("while [ ! -e '{}' ]; do sleep 0.02; done; exit 3", flag.display());
    st.start(&["--name", "brief", "--", "sh", "-c", &script]);
    let t = start_top(&st, 140, 30, &[]);
    let s = t.wait("both entries running", SECS(10), |s| {
        line_of(s, "web").contains("running") && line_of(s, "brief").contains("running")
    });
    assert!(line_of(&s, "web").contains("s1") && line_of(&s, "web").contains("proc_1"), "{s}");
    // An entry started while top runs shows up (registry change, not only the tick).
    st.start(&["--name", "late", "--", "sleep", "300"]);
    t.wait_for("late");
    std::fs::write(&flag, b"").unwrap();
    let at = Instant::now();
    let s = t.wait("brief exited (3)", SECS(10), |s| line_of(s, "brief").contains("exited (3)"));
    let took = at.elapsed();
    assert!(took < SECS(2), "the exit took {took:?} to show:\n{s}");
    // Finished entries sit below the running ones.
    let pos = |n: &str| s.lines().position(|l| l.starts_with(n)).unwrap();
    assert!(pos("brief") > pos("web") && pos("brief") > pos("late"), "{s}");
    t.keys(&["q"]);
    t.wait_for("top exited 0");
}

#[test]
fn expanding_shows_the_member_that_called_setsid() {
    let st = State::new();
    let e = st.start(&["--name", "tree", "--", "sh", "-c", "setsid sleep 300 & sleep 300"]);
    let id = e["id"].as_str().unwrap().to_string();
    // The setsid'd member: a tree process that leads its own session.
    let end = Instant::now() + SECS(10);
    let leader = loop {
        let found = st
            .tree_pids(&id)
            .into_iter()
            .find(|p| sheepdog::os::procfs::stat(common::pid(*p)).is_ok_and(|s| s.session == *p && s.comm == "sleep"));
        if let Some(p) = found {
            break p;
        }
        assert!(Instant::now() < end, "the setsid member never appeared");
        std::thread::sleep(Duration::from_millis(20));
    };
    let t = start_top(&st, 120, 40, &[]);
    t.wait_for("tree");
    t.keys(&["Enter"]);
    let s = t.wait_for("[left the session]");
    let marked = s.lines().find(|l| l.contains("[left the session]")).unwrap();
    assert!(marked.trim_start().starts_with(&leader.to_string()), "{marked:?} is not pid {leader}:\n{s}");
    assert!(marked.contains("sleep 300"), "{marked:?}");
    assert!(s.contains("tree: tree (proc_1)"), "{s}");
    // The provider itself is not marked.
    let provider = s.lines().find(|l| l.contains("sh -c setsid sleep 300")).unwrap();
    assert!(!provider.contains("[left"), "{provider:?}");
}

#[test]
fn stop_with_confirmation_stops_the_whole_tree() {
    let st = State::new();
    let e = st.start(&["--name", "victim", "--", "sh", "-c", "setsid sleep 300 & sleep 300"]);
    let id = e["id"].as_str().unwrap().to_string();
    let end = Instant::now() + SECS(10);
    let pids = loop {
        let p = st.tree_pids(&id);
        if p.len() >= 3 {
            break p;
        }
        assert!(Instant::now() < end, "tree never grew to 3: {p:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let t = start_top(&st, 120, 40, &[]);
    t.wait_for("victim");
    t.keys(&["s"]);
    t.wait_for("Stop victim (proc_1) and its whole process tree?");
    assert!(pids.iter().all(|p| alive(*p)), "s alone must not stop anything");
    t.keys(&["y"]);
    let s = t.wait_for("Stopped victim (proc_1).");
    assert!(s.contains("No cleanup command."), "{s}");
    assert_eq!(wait_gone(&pids, SECS(10)), Vec::<i32>::new(), "tree survived the stop");
    t.keys(&["Escape"]);
    t.wait("victim stopped", SECS(10), |s| line_of(s, "victim").contains("stopped"));
}

#[test]
fn stop_shows_the_cleanup_result() {
    let st = State::new();
    st.start(&["--name", "wrapped", "--cleanup", "echo undoing; exit 1", "--", "sleep", "300"]);
    let t = start_top(&st, 120, 40, &[]);
    t.wait_for("wrapped");
    t.keys(&["s"]);
    t.wait_for("Stop wrapped");
    t.keys(&["Enter"]);
    let s = t.wait_for("Stopped wrapped (proc_1).");
    assert!(s.contains("Cleanup command failed with exit code 1."), "{s}");
    assert!(s.contains("undoing"), "{s}");
}

#[test]
fn log_pane_shows_what_the_process_printed() {
    let st = State::new();
    st.start(&["--name", "talker", "--", "sh", "-c", "echo hello-from-the-log; echo oops-on-stderr >&2; sleep 300"]);
    let t = start_top(&st, 120, 40, &[]);
    let s = t.wait("the printed line", SECS(10), |s| s.lines().any(|l| l.trim() == "hello-from-the-log"));
    assert!(s.contains("log: talker (proc_1)"), "{s}");
    t.wait_for("oops-on-stderr");
    // `/` filters the pane to the matching lines.
    t.keys(&["/", "o", "o", "p", "s", "Enter"]);
    // (The `started` marker quotes the whole command, so it matches too.)
    let s = t.wait("search applied", SECS(10), |s| {
        s.contains("/oops") && !s.lines().any(|l| l.trim() == "hello-from-the-log")
    });
    assert!(s.lines().any(|l| l.trim() == "oops-on-stderr"), "{s}");
}

#[test]
fn quitting_restores_the_terminal() {
    let st = State::new();
    let t = start_top(&st, 100, 30, &[]);
    t.wait_for("sheepdog top");
    assert_eq!(t.display("#{alternate_on}"), "1", "top draws on the alternate screen");
    t.keys(&["q"]);
    let s = t.wait_for("top exited 0");
    assert_eq!(t.display("#{alternate_on}"), "0", "the alternate screen was left");
    assert!(s.contains("BEFORE-TOP"), "the previous content is back:\n{s}");
    assert!(!s.contains("sheepdog top ·"), "{s}");
}

#[test]
fn sigterm_restores_the_terminal() {
    let st = State::new();
    let t = start_top(&st, 100, 30, &[]);
    t.wait_for("sheepdog top");
    let top = top_pid(&t);
    common::signal(top, libc::SIGTERM);
    let s = t.wait_for("top exited 143");
    assert_eq!(t.display("#{alternate_on}"), "0");
    assert!(s.contains("BEFORE-TOP"), "{s}");
    assert!(wait_gone(&[top], SECS(5)).is_empty());
}

#[test]
fn a_panic_restores_the_terminal() {
    let st = State::new();
    let t = start_top(&st, 100, 30, &[("SHEEPDOG_TOP_TEST_PANIC", "1")]);
    let s = t.wait_for("top exited 101");
    assert_eq!(t.display("#{alternate_on}"), "0", "still on the alternate screen after a panic");
    assert!(s.contains("BEFORE-TOP") && s.contains("panicking to test"), "{s}");
}

#[test]
fn resizing_redraws_for_the_new_width() {
    let st = State::new();
    st.start(&["--name", "web", "--session", "s1", "--", "sleep", "300"]);
    let t = start_top(&st, 140, 30, &[]);
    t.wait("all columns", SECS(10), |s| s.lines().nth(1).is_some_and(|h| h.contains("SESSION")));
    assert!(t.tmux(&["resize-window", "-x", "50", "-y", "20"]).status().unwrap().success());
    let s = t.wait("columns dropped", SECS(10), |s| {
        s.lines().nth(1).is_some_and(|h| h.starts_with("NAME") && !h.contains("SESSION"))
    });
    assert!(line_of(&s, "web").contains("running"), "{s}");
    assert!(t.tmux(&["resize-window", "-x", "140", "-y", "30"]).status().unwrap().success());
    t.wait("columns back", SECS(10), |s| s.lines().nth(1).is_some_and(|h| h.contains("SESSION")));
}

#[test]
fn narrow_terminal_drops_columns_and_no_color_is_honoured() {
    let st = State::new();
    st.start(&["--name", "web", "--session", "s1", "--", "sleep", "300"]);
    let t = start_top(&st, 50, 20, &[("NO_COLOR", "1")]);
    let s = t.wait("web running", SECS(10), |s| line_of(s, "web").contains("running"));
    let header = s.lines().nth(1).unwrap_or("");
    assert!(header.starts_with("NAME") && !header.contains("SESSION"), "{s}");
    // Colours as tmux re-encodes them (`38;5;N` foregrounds): none under NO_COLOR...
    let colours = |t: &Tmux| {
        let out = t.tmux(&["capture-pane", "-p", "-e"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let raw = colours(&t);
    assert!(!raw.contains("38;5;") && !raw.contains("\x1b[32m"), "colours despite NO_COLOR: {raw:?}");
    // ... and a green `running` without it.
    let coloured = start_top(&st, 50, 20, &[]);
    coloured.wait("web running", SECS(10), |s| line_of(s, "web").contains("running"));
    let raw = colours(&coloured);
    assert!(raw.contains("\x1b[38;5;2mrunning"), "no green status: {raw:?}");
}

#[test]
fn not_a_terminal_points_at_ps_with_status_125() {
    let st = State::new();
    let out = st.cmd(&["top"]).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).output().unwrap();
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("sheepdog: ") && err.contains("not a terminal") && err.contains("'sheepdog ps'"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn restart_replaces_the_entry_and_ports_show() {
    let st = State::new();
    let server = "import socket,time\ns=socket.socket()\ns.bind(('127.0.0.1',0))\ns.listen()\nprint('port',s.getsockname()[1],flush=True)\ntime.sleep(300)";
    let e = st.start(&["--name", "srv", "--", "python3", "-c", server]);
    let id = e["id"].as_str().unwrap().to_string();
    let log = st.wait_log(&id, "combined.log", "[out] port ");
    let port: u16 = log.lines().find_map(|l| l.strip_prefix("[out] port ")).unwrap().trim().parse().unwrap();
    let old = st.tree_pids(&id);
    let t = start_top(&st, 140, 40, &[]);
    t.wait("the port on srv's line", SECS(10), |s| line_of(s, "srv").contains(&port.to_string()));
    t.keys(&["r"]);
    let s = t.wait_for("Started srv (proc_2)");
    assert!(s.contains("Stopped srv (proc_1)."), "{s}");
    assert_eq!(wait_gone(&old, SECS(10)), Vec::<i32>::new(), "the old tree survived the restart");
    let new = st.entry("proc_2");
    assert_eq!(new["status"], "running", "{new}");
    t.keys(&["Escape"]);
    // The new entry is selected: its log is the one followed.
    t.wait_for("log: srv (proc_2)");
}

#[test]
fn clear_removes_a_finished_entry() {
    let st = State::new();
    let e = st.start(&["--name", "done", "--", "true"]);
    let id = e["id"].as_str().unwrap().to_string();
    st.ok(&["wait", &id]);
    let t = start_top(&st, 120, 30, &[]);
    t.wait("done exited", SECS(10), |s| line_of(s, "done").contains("exited (0)"));
    t.keys(&["c"]);
    t.wait_for(&format!("Cleared {id}."));
    assert!(!st.path().join("procs").join(&id).exists());
    t.keys(&["Escape"]);
    t.wait("the entry gone from the list", SECS(10), |s| !s.lines().any(|l| l.starts_with("done")));
}

#[test]
fn usage_columns_show_a_busy_tree() {
    let st = State::new();
    st.start(&["--name", "spin", "--", "sh", "-c", "sh -c 'while :; do :; done' & wait"]);
    let t = start_top(&st, 140, 30, &[]);
    // CPU% is the 7th column (NAME ID SESSION STATUS PID TIME CPU% MEM ...), MEM the 8th.
    let cols = |s: &str| line_of(s, "spin").split_whitespace().map(String::from).collect::<Vec<_>>();
    let s = t.wait("the spinning tree's CPU", SECS(15), |s| {
        let c = cols(s);
        c.len() > 7 && c[6].parse::<f64>().is_ok_and(|v| v > 5.0)
    });
    let mem = cols(&s)[7].clone();
    assert!(mem.ends_with('K') || mem.ends_with('M'), "MEM {mem:?}:\n{s}");
}

#[test]
fn session_filter_shows_only_that_session() {
    let st = State::new();
    st.start(&["--name", "mine", "--session", "s1", "--", "sleep", "300"]);
    st.start(&["--name", "theirs", "--session", "s2", "--", "sleep", "300"]);
    let script = format!("'{}' --state-dir '{}' top --session s1; exec sleep 600", common::bin(), st.path().display());
    let t = TmuxServer::start("top", 140, 30, &script);
    let s = t.wait("mine", SECS(10), |s| line_of(s, "mine").contains("running"));
    assert!(s.contains("session s1") && !s.contains("theirs"), "{s}");
}

#[test]
fn a_missing_top_binary_is_one_line_and_125() {
    let dir = tempfile::tempdir().unwrap();
    let lone = dir.path().join("sheepdog");
    std::fs::copy(common::bin(), &lone).unwrap();
    let st = State::new();
    // Executing a file just written can fail with ETXTBSY while another test thread's fork
    // still holds the copy's write fd (until that child execs): retry briefly.
    let mut tries = 0;
    let out = loop {
        match Command::new(&lone).arg("--state-dir").arg(st.path()).arg("top").stdin(Stdio::null()).output() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 100 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            r => break r.unwrap(),
        }
    };
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("sheepdog: unable to run ") && err.contains("sheepdog-top"), "{err}");
}

#[test]
fn a_flooding_log_keeps_the_screen_live() {
    let st = State::new();
    // As fast as it can: `yes` with 100-byte lines, tens of MB/s into the logs (capped: 4 MiB).
    let e = st.start(&[
        "--name",
        "flood",
        "--log-max",
        "4MiB",
        "--",
        "sh",
        "-c",
        "yes 0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789",
    ]);
    let id = e["id"].as_str().unwrap().to_string();
    let t = start_top(&st, 120, 30, &[]);
    let s = t.wait("flood's lines in the pane", SECS(10), |s| s.contains("0123456789012345678901234567890"));
    assert!(s.contains(&format!("log: flood ({id})")), "{s}");
    // Keys still act at once: hide the pane, show it again, open the tree.
    t.keys(&["l"]);
    t.wait("the pane hidden", SECS(5), |s| !s.contains("log: flood"));
    t.keys(&["l"]);
    t.wait("the pane back", SECS(5), |s| s.contains("log: flood"));
    t.keys(&["Enter"]);
    t.wait_for(&format!("tree: flood ({id})"));
    let footer = t.screen().lines().rfind(|l| !l.trim().is_empty()).unwrap_or("").to_string();
    for k in ["s stop", "r restart", "c clear", "l logs", "t tree", "/ search", "f pause", "q quit", "jk move"] {
        assert!(footer.contains(k), "{k} missing in the footer {footer:?}");
    }
}
