//! `sheepdog top`: a live, full-screen view of every managed process — status, usage, ports,
//! the process tree and the log — with stop, restart and clear one key away.
//!
//! Its own binary (`sheepdog-top`, which `sheepdog top` execs), so the supervisors never link a
//! terminal UI (BENCHMARKS.md has the sizes). Built the way bottom and gitui are: one [`App`]
//! state, one event loop, one pure [`draw::draw`]. The loop waits on one channel fed by four
//! sources, each blocking on its own fd so nothing spins: terminal input (crossterm), registry
//! changes (inotify, [`watch`]), signals (the self-pipe), and finished actions; a timeout on the
//! channel is the tick (1 s, and 250 ms for the followed log). Actions call the same library
//! operations as the CLI (`manager::stop`, `manager::clear`, restart) on a worker thread, so a
//! stop's grace never freezes the screen, and only render what they return.

#![forbid(unsafe_code)]

pub mod app;
pub mod draw;
pub mod logtail;
pub mod term;
pub mod watch;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use clap::Parser;
use ratatui::crossterm::event::{self, Event as TermEvent};

pub use app::{Action, App, Scope};

use sheepdog::manager;
use sheepdog::os::Signal;
use sheepdog::os::SignalPipe;
use sheepdog::os::process::{self, POLL_IN, PollFd};
use sheepdog::registry::Registry;
use sheepdog::usage::Sampler;

/// The list, statuses and usage are re-read this often without any change: 1 s (the issue's
/// "about once a second"; CPU % needs a window anyway).
pub const TICK: Duration = Duration::from_secs(1);
/// The followed log is looked at this often while its pane is shown: 250 ms. One `stat` when
/// nothing was written; a bounded read when something was.
pub const LOG_TICK: Duration = Duration::from_millis(250);

/// In debug builds, `top` panics after its first screen when this is set: how the tests check
/// that a panic restores the terminal. Release builds ignore it.
pub const TEST_PANIC_ENV: &str = "SHEEPDOG_TOP_TEST_PANIC";

/// Exit status when stdout is not a terminal: [`sheepdog::exit::USAGE`] (125), as for any bad input.
pub const EXIT_NOT_A_TERMINAL: i32 = sheepdog::exit::USAGE;

/// What wakes the loop.
#[derive(Debug)]
enum Event {
    Key(event::KeyEvent),
    Resize,
    /// The terminal's input ended or failed.
    InputGone,
    /// These entries were created, changed or removed.
    Registry(Vec<String>),
    /// SIGTERM, SIGINT or SIGHUP.
    Signal(Signal),
    /// An action finished: title, result lines, and an entry to select (a restart's new one).
    Done(String, Vec<String>, Option<String>),
}

/// `sheepdog-top` / `sheepdog top` arguments.
#[derive(Debug, Parser)]
#[command(name = "sheepdog top", about = "A live view of every managed process: tree, usage, ports, logs.")]
pub struct TopArgs {
    /// The registry's directory (default: $SHEEPDOG_STATE_DIR, else $XDG_STATE_HOME/sheepdog,
    /// else ~/.local/state/sheepdog).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Only this session's entries.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Every finished entry, not only those of the last hour.
    #[arg(long)]
    pub all: bool,
}

/// The `sheepdog-top` binary: parse, run, exit status.
pub fn main() -> i32 {
    let args = match TopArgs::try_parse() {
        Ok(a) => a,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return 0;
            }
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            eprintln!("sheepdog: {} (see 'sheepdog top --help')", first.strip_prefix("error: ").unwrap_or(first));
            return sheepdog::exit::USAGE;
        }
    };
    run(args)
}

/// Runs the view until `q`, Esc, Ctrl-C or a signal. Returns 0, 128 + the signal, or 125 when
/// stdout is not a terminal or the state dir cannot be used.
pub fn run(args: TopArgs) -> i32 {
    if !std::io::stdout().is_terminal() {
        eprintln!(
            "sheepdog: top: stdout is not a terminal; for a one-time listing use 'sheepdog ps' (or 'sheepdog ps --json')"
        );
        return EXIT_NOT_A_TERMINAL;
    }
    // Every supervisor a restart starts is the small `sheepdog` binary next to this one, never
    // this terminal UI.
    match std::env::current_exe().map(|p| p.with_file_name("sheepdog")) {
        Ok(p) if p.is_file() => manager::set_supervisor_exe(p),
        Ok(p) => {
            eprintln!("sheepdog: {} not found; install sheepdog and sheepdog-top side by side", p.display());
            return sheepdog::exit::USAGE;
        }
        Err(e) => {
            eprintln!("sheepdog: unable to find this executable: {e}");
            return sheepdog::exit::USAGE;
        }
    }
    let reg = match Registry::open(args.state_dir) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("sheepdog: {e}");
            return sheepdog::exit::USAGE;
        }
    };
    // Before any thread starts, so every thread inherits the unblocked mask.
    let signals = match SignalPipe::install(&[Signal::TERM, Signal::INT, Signal::HUP]) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sheepdog: unable to install signal handlers: {e}");
            return sheepdog::exit::USAGE;
        }
    };
    let mut terminal = match term::enter() {
        Ok(t) => t,
        Err(e) => {
            term::leave();
            eprintln!("sheepdog: unable to set up the terminal: {e}");
            return sheepdog::exit::USAGE;
        }
    };
    let scope = Scope { session: args.session, all: args.all };
    let code = event_loop(&mut terminal, &reg, scope, signals);
    term::leave();
    code
}

fn spawn_sources(tx: &Sender<Event>, reg: &Registry, signals: SignalPipe) -> Option<String> {
    let input = tx.clone();
    let _ = std::thread::Builder::new().name("top-input".into()).spawn(move || {
        loop {
            let ev = match event::read() {
                Ok(TermEvent::Key(k)) => Event::Key(k),
                Ok(TermEvent::Resize(..)) => Event::Resize,
                Ok(_) => continue,
                Err(_) => Event::InputGone,
            };
            let gone = matches!(ev, Event::InputGone);
            if input.send(ev).is_err() || gone {
                return;
            }
        }
    });
    let sig = tx.clone();
    let _ = std::thread::Builder::new().name("top-signals".into()).spawn(move || {
        loop {
            let mut fds = [PollFd::new(std::os::fd::AsRawFd::as_raw_fd(&signals), POLL_IN)];
            if process::poll(&mut fds, None).is_err() {
                continue;
            }
            for s in signals.drain() {
                if sig.send(Event::Signal(s)).is_err() {
                    return;
                }
            }
        }
    });
    watch::spawn(&reg.root().join("procs"), tx.clone(), Event::Registry)
        .err()
        .map(|e| format!("not watching the registry ({e}); refreshing every second"))
}

fn event_loop(terminal: &mut term::Term, reg: &Registry, scope: Scope, signals: SignalPipe) -> i32 {
    let (tx, rx) = mpsc::channel();
    let mut app = App::new(scope, app::colors_wanted());
    app.flash = spawn_sources(&tx, reg, signals);
    app.watching = app.flash.is_none() && cfg!(target_os = "linux");
    let mut sampler = Sampler::new();
    app.refresh(reg, &mut sampler);
    let mut next_tick = Instant::now() + TICK;
    let mut next_log = Instant::now() + LOG_TICK;
    // Tests of the panic path (debug builds only): panic once the first screen is drawn.
    let panic_for_test = cfg!(debug_assertions) && std::env::var_os(TEST_PANIC_ENV).is_some();
    loop {
        if app.dirty {
            if terminal.draw(|f| draw::draw(&app, f)).is_err() {
                return 1;
            }
            app.dirty = false;
            if panic_for_test {
                panic!("{TEST_PANIC_ENV} is set: panicking to test that the terminal is restored");
            }
        }
        let log_on = app.show_logs && !app.log.paused;
        let wake = if log_on { next_tick.min(next_log) } else { next_tick };
        let first = match rx.recv_timeout(wake.saturating_duration_since(Instant::now())) {
            Ok(ev) => Some(ev),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => return 0,
        };
        let mut refresh = false;
        let mut changed: Vec<String> = Vec::new();
        // Handle everything already queued before drawing once.
        for ev in first.into_iter().chain(std::iter::from_fn(|| rx.try_recv().ok())) {
            match ev {
                Event::Key(k) => {
                    if let Some(action) = app.on_key(k) {
                        run_action(action, reg, tx.clone());
                    }
                    app.follow_selected(reg);
                    if app.log.typing.is_none() {
                        app.poll_log();
                    }
                }
                Event::Resize => app.dirty = true,
                Event::InputGone => return 0,
                Event::Registry(ids) => {
                    changed.extend(ids);
                    refresh = true;
                }
                Event::Signal(s) => return sheepdog::exit::by_signal(s.as_raw()),
                Event::Done(title, lines, select) => {
                    app.finished(title, lines);
                    // A restart's new entry, and the changed ones, come through the watcher too;
                    // a full listing makes sure the result and the list agree.
                    app.select_after_refresh = select;
                    app.refresh(reg, &mut sampler);
                }
            }
            if app.quit {
                return 0;
            }
        }
        let now = Instant::now();
        if refresh || now >= next_tick {
            changed.sort();
            changed.dedup();
            app.refresh_changed(reg, &mut sampler, Some(&changed));
            next_tick = Instant::now() + TICK;
        }
        if now >= next_log {
            app.poll_log();
            next_log = Instant::now() + LOG_TICK;
        }
    }
}

/// Runs one action on its own thread; its result lines come back as [`Event::Done`].
fn run_action(action: Action, reg: &Registry, tx: Sender<Event>) {
    let reg = reg.clone();
    let _ = std::thread::Builder::new().name("top-action".into()).spawn(move || {
        let (title, lines, select) = match action {
            Action::Stop(e) => ("stop", stop_lines(&reg, &e), None),
            Action::Clear(e) => (
                "clear",
                match manager::clear(&reg, &e, false) {
                    Ok(()) => vec![format!("Cleared {}.", e.id)],
                    Err(err) => vec![err.to_string()],
                },
                None,
            ),
            Action::Restart(e) => {
                let (lines, new) = restart_lines(&reg, &e);
                ("restart", lines, new)
            }
        };
        let _ = tx.send(Event::Done(title.to_string(), lines, select));
    });
}

/// `manager::stop`'s result: the lines `sheepdog stop` prints (`StopOutcome::lines`), then
/// whether the tree was confirmed gone and what the cleanup did.
pub fn stop_lines(reg: &Registry, e: &sheepdog::entry::Entry) -> Vec<String> {
    match manager::stop(reg, e, None) {
        Ok(o) => outcome_lines(&o),
        Err(manager::ManagerError::NotRecorded { entry, source, .. }) => {
            vec![manager::not_recorded_line(&entry), tree_line(true).into(), format!("Not recorded: {source}")]
        }
        Err(err) => vec![format!("unable to stop {}: {err}", e.label())],
    }
}

/// A stop's lines in the dialog: the sentences every front end says for it, then the tree
/// line and the cleanup's details (its failure line is one of the sentences already).
fn outcome_lines(o: &manager::StopOutcome) -> Vec<String> {
    let failure = o.cleanup_error();
    let mut lines = manager::Said::from(o).lines;
    lines.push(tree_line(o.tree_gone).into());
    lines.extend(cleanup_lines(&o.entry).into_iter().filter(|l| Some(l) != failure.as_ref()));
    lines
}

/// Whether the stop confirmed the tree gone, as the dialog says it (docs/guide.md: `top`'s keys).
pub fn tree_line(gone: bool) -> &'static str {
    if gone { "The process tree is confirmed gone." } else { "The process tree was NOT confirmed gone." }
}

/// What the cleanup did, for a stop's result: the command, how it ended (or the exact failure
/// line `sheepdog stop` prints), and its last output lines.
pub fn cleanup_lines(e: &sheepdog::entry::Entry) -> Vec<String> {
    let Some(c) = &e.cleanup else { return vec!["No cleanup command.".into()] };
    let mut lines = vec![format!("Cleanup: {}", c.command)];
    match (e.cleanup_state.result(), sheepdog::cleanup::failure_line(e)) {
        (_, Some(fail)) => lines.push(fail),
        (Some(r), None) => lines.push(format!("Cleanup command exited with code 0 after {} ms.", r.duration_ms)),
        (None, None) => lines.push("Cleanup command did not run.".into()),
    }
    if let Some(r) = e.cleanup_state.result() {
        lines.extend(r.output.iter().rev().take(5).rev().map(|l| format!("  | {l}")));
    }
    lines
}

/// `manager::restart`'s result: the stop's lines, then the new entry.
pub fn restart_lines(reg: &Registry, e: &sheepdog::entry::Entry) -> (Vec<String>, Option<String>) {
    match manager::restart(reg, e, None) {
        Ok(r) => {
            // The stop's lines with this dialog's details, then the new entry's, as
            // `manager::Said` says it for every front end.
            let mut lines = outcome_lines(&r.stopped);
            lines.extend(manager::Said::from(&r).lines.pop());
            // The library's sentence, as the CLI and MCP say it.
            if let Some(o) = &r.ready {
                lines.push(o.sentence(&r.entry.label()));
            }
            (lines, Some(r.entry.id))
        }
        Err(err) => (vec![format!("unable to restart {}: {err}", e.label())], None),
    }
}
