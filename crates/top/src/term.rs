//! Entering and leaving full-screen mode, and the promise that the terminal is given back on
//! every way out: a normal quit, an error, SIGTERM/SIGINT/SIGHUP (the loop turns them into a
//! quit), and a panic (the hook below restores first, then reports, then exits 101).

use std::io::{self, Stdout, Write};
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};

use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::cursor::{Hide, Show};
use ratatui::crossterm::execute;
use ratatui::crossterm::terminal::{EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode};

/// The terminal `top` draws on.
pub type Term = Terminal<CrosstermBackend<Stdout>>;

/// True while the terminal is in raw mode on the alternate screen.
static ACTIVE: AtomicBool = AtomicBool::new(false);
static HOOK: Once = Once::new();

/// Raw mode, the alternate screen, no cursor; installs the panic hook once.
pub fn enter() -> io::Result<Term> {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            leave();
            previous(info);
            // A panic on any thread ends `top`: the screen it drew on is gone.
            std::process::exit(101);
        }));
    });
    enable_raw_mode()?;
    ACTIVE.store(true, Ordering::SeqCst);
    execute!(io::stdout(), EnterAlternateScreen, Hide)?;
    Terminal::new(CrosstermBackend::new(io::stdout()))
}

/// Leaves the alternate screen, shows the cursor, ends raw mode. Idempotent; errors are ignored
/// (there is nothing better to do with them on the way out).
pub fn leave() {
    if ACTIVE.swap(false, Ordering::SeqCst) {
        let mut out = io::stdout();
        let _ = execute!(out, LeaveAlternateScreen, Show);
        let _ = disable_raw_mode();
        let _ = out.flush();
    }
}
