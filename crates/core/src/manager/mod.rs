//! Managed background processes: the operations every front end calls (start, stop, restart,
//! update, wait, reap, clear), returning data for the CLI, the MCP server and `top` to render.
//!
//! One file per operation (`start`, `stop`, `wait`, `reap`, `clear`, `update`, and `stdin` for
//! `--stdin pipe` and `send`), `select` for which entries an operation applies to, and `said`
//! for what every front end says for an outcome ([`Said`]);
//! `supervise` is the detached supervisor's side (its own process, one per entry). This file holds the errors, the timing constants and the few helpers the
//! operations share (the supervisor's identity-checked pidfd, a wait on it). The live look at a
//! tree, without acting, is `crate::inspect`.
//!
//! Each managed command gets its own detached `sheepdog` supervisor (a new session, like Podman's
//! conmon; no central daemon): the same event loop and one stop as `sheepdog run`, with stdout and
//! stderr captured to the entry's logs and every transition written to the registry. After any
//! crash, [`reap`] finds entries whose supervisor is gone and stops what is left of their tree,
//! touching only processes that are provably the entry's (see `tree::Tree::recorded`).

use crate::identity::Probe;
use std::io;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use crate::entry::{Entry, OutsideResult};
use crate::exit;
use crate::logs;
use crate::registry::{Registry, RegistryError};
use crate::sys::process::{self, POLL_IN, PidFd, PollFd};
use crate::sys::{Pid, Signal};

mod clear;
mod leftovers;
mod reap;
mod said;
mod select;
mod start;
mod stdin;
mod stop;
mod supervise;
mod update;
mod wait;

pub use clear::clear;
pub use leftovers::{Handoff, LOOK_MAX, LOOK_MIN, LeftoversArgs, hand_off, watch as supervise_leftovers};
pub use reap::{Reaped, reap};
pub use said::Said;
pub use select::{Selected, Selection};
pub use start::{
    PORT_FREE_MAX, Restarted, StartRequest, Started, preview, replace, request_of, restart, set_supervisor_exe, start,
    start_ready, start_replacing, supervisor_exe,
};
pub use stdin::{SEND_MAX, SEND_TIMEOUT, SendError, send};
pub use stop::{StopOutcome, not_recorded_line, not_recorded_view, stop, stop_many, stoppable};
pub use supervise::{MAX_RECORDED_MEMBERS, SuperviseArgs, run_supervisor};
pub use update::{CLEANUP_TIMEOUT_MS, UpdateRequest, update};
pub use wait::{Waited, WaitedMany, exit_status_of, wait, wait_many, waited_line};

/// How long `stop` waits past an entry's recorded `maxStopMs` before it acts past the
/// supervisor: 1000 ms, for the supervisor's own registry write and exit.
pub const STOP_MARGIN: Duration = Duration::from_millis(1000);
/// After the tree is gone, how long the supervisor keeps draining the log pipes: 250 ms. A
/// process outside the tree that holds a pipe open (a daemon the command started) must never
/// hang a stop.
pub const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(250);
/// A `starting` entry whose supervisor has not yet recorded itself is left alone by `reap` for
/// this long: 30 s (a `start` in progress).
pub const STARTING_LEEWAY_MS: u64 = 30_000;

/// Errors of the manager; the CLI maps each to one line and a status.
#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The command could not start (126/127), or the supervisor refused (125).
    #[error("{message}")]
    Start { code: i32, message: String },
    #[error("unable to {op}: {source}")]
    Io {
        op: String,
        #[source]
        source: io::Error,
    },
    #[error("{0}")]
    Refused(String),
    /// The stop itself worked (nothing of the tree is alive) but the registry could not record
    /// it (a full disk): status [`EXIT_NOT_RECORDED`].
    #[error("the tree of {label} is gone, but its result could not be recorded: {source}")]
    NotRecorded {
        label: String,
        /// The entry as this stop knows it: its result applied in memory only.
        entry: Box<Entry>,
        #[source]
        source: RegistryError,
    },
}

/// Status of a stop that stopped the tree but could not record the result or run the cleanup
/// (the state dir's disk is full): [`crate::exit::NOT_RECORDED`] (74).
pub const EXIT_NOT_RECORDED: i32 = crate::exit::NOT_RECORDED;

impl ManagerError {
    /// 126/127 for a command that could not start, 125 for bad input and sheepdog's own
    /// failures, 1 for a refusal (clearing a running entry).
    pub fn exit_code(&self) -> i32 {
        match self {
            ManagerError::Start { code, .. } => *code,
            ManagerError::Refused(_) => exit::REFUSED,
            ManagerError::NotRecorded { .. } => exit::NOT_RECORDED,
            ManagerError::Registry(e) if e.is_not_written() => exit::NOT_RECORDED,
            _ => exit::USAGE,
        }
    }
}

fn io_err(op: impl Into<String>) -> impl FnOnce(io::Error) -> ManagerError {
    let op = op.into();
    move |source| ManagerError::Io { op, source }
}

fn record_lost(reg: &Registry, id: &str, text: &str) -> Result<Entry, ManagerError> {
    logs::append_marker(&reg.dir(id), text);
    Ok(reg.update(id, |e| {
        e.finish_from_outside(OutsideResult::Lost(text.into()), true);
    })?)
}

/// A pidfd on the entry's supervisor, opened *before* its identity is checked, so the check and
/// any signal sent through it are about the same process. `None` if it is gone or not ours.
fn verified_supervisor(e: &Entry) -> Option<PidFd> {
    if !e.this_boot() {
        return None;
    }
    let sup = e.live_supervisor()?;
    let fd = PidFd::open(Pid::new(sup.pid)?).ok()?;
    crate::identity::alive(sup).then_some(fd)
}

/// A pidfd on the entry's keeper, opened before its identity is checked (see
/// [`verified_supervisor`]). `None` if it is gone or not ours.
fn verified_keeper(e: &Entry) -> Option<PidFd> {
    if !e.this_boot() {
        return None;
    }
    let keeper = e.keeper?;
    let fd = PidFd::open(Pid::new(keeper.pid)?).ok()?;
    crate::identity::alive(keeper).then_some(fd)
}

/// Tells an entry's supervisor that stayed after its command exited (a cleanup pending) to
/// re-read its entry: SIGUSR1 through a verified pidfd. Only for finished entries: while the
/// command runs, SIGUSR1 is forwarded to it.
pub fn notify_supervisor(e: &Entry) {
    if e.is_finished()
        && let Some(sup) = verified_supervisor(e)
    {
        let _ = sup.send(Signal::USR1);
    }
}

/// Blocks until the pidfd's process exits or `timeout` passes. Returns true if it exited.
fn wait_pidfd(fd: &PidFd, timeout: Option<Duration>) -> bool {
    let end = timeout.map(|t| Instant::now() + t);
    loop {
        let mut fds = [PollFd::new(fd.as_raw_fd(), POLL_IN)];
        let left = end.map(|e| e.saturating_duration_since(Instant::now()));
        let n = process::poll(&mut fds, left).unwrap_or(0);
        if n > 0 && fds[0].ready() {
            return true;
        }
        if end.is_some_and(|e| Instant::now() >= e) {
            return false;
        }
    }
}
