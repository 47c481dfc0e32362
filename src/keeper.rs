//! The keeper: the supervisor's promise survives the supervisor's own SIGKILL.
//!
//! A host kills its agent with `child.kill('SIGKILL')`, or the OOM killer picks the supervisor;
//! a process that is killed can run no stop. So every supervisor (`sheepdog run`, each managed
//! entry's detached supervisor) is two processes that watch each other, in a chain:
//!
//! ```text
//! host ─► supervisor (the pid the host holds) ─► keeper ─► provider ─► ...
//! ```
//!
//! The keeper is forked from the supervisor before the provider is spawned. It moves into a
//! process group of its own (a host's group kill, `kill -9 -PGID`, aimed at the supervisor
//! misses it; the session stays, so an interactive provider keeps its terminal), becomes a child
//! subreaper, spawns the provider and runs the supervision loop: everything the supervisor did
//! before. The supervisor relays every signal it gets to the keeper and, when the keeper is done,
//! exits as the keeper did, so the host sees one process with the old exit statuses.
//!
//! - Supervisor killed: the keeper sees its pipe from the supervisor hang up and runs the one
//!   stop itself (`Trigger::SupervisorKilled`): SIGTERM, the term grace, SIGKILL. The keeper is
//!   a subreaper and an ancestor of the whole tree, so it still sees every orphan, in both tiers.
//! - Keeper killed: its children, the provider among them, are re-parented to the supervisor
//!   (a subreaper too), which runs the same stop on the same tree and records it.
//!
//! So SIGKILL of either one, or of the supervisor's whole group, ends the tree within the stop's
//! own bound. What remains: both killed in the same instant (`kill -9 -1`, or each by pid before
//! either could act); then `reap` (and, in the cgroup tier, its cgroup backstop) is the answer.
//!
//! The keeper tells the supervisor what happened on a pipe, in fixed 12-byte records that one
//! `write` delivers whole (below `PIPE_BUF`): the provider was spawned, the provider exited
//! (its wait status, which only the keeper can reap), done. A keeper that exits without "done"
//! after it spawned the provider was killed; one killed between the spawn and its "spawned"
//! leaves the provider as the supervisor's child, which the supervisor finds by itself.

use std::io;
use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};

use crate::spawn::Spawned;
use crate::sys::process::{self, Forked};
use crate::sys::signal::{SignalPipe, pipe_cloexec, set_nonblocking};
use crate::sys::{Pgid, Pid, Signal, WaitStatus};

/// The variable that turns the keeper off: `SHEEPDOG_KEEPER=off`. For benchmarks (the cost of
/// the keeper, side by side) and debugging only: without a keeper the promise holds only while
/// the supervisor lives.
pub const KEEPER_ENV: &str = "SHEEPDOG_KEEPER";

/// In the keeper: the write end of its pipe to the supervisor. -1 elsewhere.
static TO_SUPERVISOR: AtomicI32 = AtomicI32::new(-1);
/// In the keeper: the read end of the pipe only the supervisor can write to; it hangs up when
/// the supervisor is gone. -1 elsewhere.
static FROM_SUPERVISOR: AtomicI32 = AtomicI32::new(-1);

/// True if this supervisor should run with a keeper: on Linux (the chain needs subreapers),
/// unless `SHEEPDOG_KEEPER=off`.
pub fn wanted() -> bool {
    cfg!(target_os = "linux") && std::env::var_os(KEEPER_ENV).is_none_or(|v| v != "off")
}

/// A message from the keeper to the supervisor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Message {
    /// The provider runs.
    Spawned(Spawned),
    /// The keeper reaped the provider.
    Provider(WaitStatus),
    /// The keeper finished its work (the tree is gone, results recorded, cleanups run) and
    /// exits now: the supervisor exits as it does.
    Done,
}

const SPAWNED: i32 = 1;
const EXITED: i32 = 2;
const SIGNALED: i32 = 3;
const DONE: i32 = 4;

impl Message {
    fn encode(self) -> [u8; 12] {
        let (kind, a, b) = match self {
            Message::Spawned(s) => (SPAWNED, s.pid.as_raw(), s.pgid.as_raw()),
            Message::Provider(WaitStatus::Exited(c)) => (EXITED, c, 0),
            Message::Provider(WaitStatus::Signaled(s)) => (SIGNALED, s.as_raw(), 0),
            Message::Done => (DONE, 0, 0),
        };
        let mut out = [0u8; 12];
        out[..4].copy_from_slice(&kind.to_ne_bytes());
        out[4..8].copy_from_slice(&a.to_ne_bytes());
        out[8..].copy_from_slice(&b.to_ne_bytes());
        out
    }

    fn decode(rec: &[u8]) -> Option<Message> {
        let word = |i: usize| i32::from_ne_bytes([rec[i], rec[i + 1], rec[i + 2], rec[i + 3]]);
        match word(0) {
            SPAWNED => Some(Message::Spawned(Spawned { pid: Pid::new(word(4))?, pgid: Pgid::new(word(8))? })),
            EXITED => Some(Message::Provider(WaitStatus::Exited(word(4)))),
            SIGNALED => Signal::from_raw(word(4)).map(|s| Message::Provider(WaitStatus::Signaled(s))),
            DONE => Some(Message::Done),
            _ => None,
        }
    }
}

/// The supervisor's side of the chain.
#[derive(Debug)]
pub(crate) struct Front {
    /// The keeper, this process's child.
    pub keeper: Pid,
    /// The keeper's messages (non-blocking).
    from_keeper: OwnedFd,
    /// Held, never written: the keeper's [`supervisor_gone_fd`] hangs up when it closes.
    _life: OwnedFd,
}

/// Which process this is after [`split`].
#[derive(Debug)]
pub(crate) enum Role {
    Supervisor(Front),
    Keeper,
}

/// Forks the keeper. In the keeper: its own process group, a child subreaper, the signal
/// handlers its own (`signals` renewed), the pipe ends kept for the rest of its life. Must run
/// in a single-threaded process (the supervisor binaries).
///
/// Errors: pipe or fork failures (nothing was forked), as `io::Error`.
pub(crate) fn split(signals: &SignalPipe) -> io::Result<Role> {
    let (from_keeper, to_supervisor) = pipe_cloexec()?;
    let (from_supervisor, life) = pipe_cloexec()?;
    set_nonblocking(from_keeper.as_raw_fd())?;
    match process::fork()? {
        Forked::Parent(keeper) => {
            drop((to_supervisor, from_supervisor));
            Ok(Role::Supervisor(Front { keeper, from_keeper, _life: life }))
        }
        Forked::Child => {
            drop((from_keeper, life));
            // Until these succeed the keeper is only a copy: a failure here is the same as a
            // keeper killed at birth, which the supervisor handles (it exits as the keeper did).
            let ready = (|| {
                signals.renew_after_fork()?;
                process::own_process_group()?;
                #[cfg(target_os = "linux")]
                process::set_child_subreaper()?;
                Ok::<_, io::Error>(())
            })();
            if ready.is_err() {
                std::process::exit(crate::exit::USAGE);
            }
            // Kept for the keeper's whole life: linger and cleanups still watch the supervisor.
            TO_SUPERVISOR.store(to_supervisor.into_raw_fd(), Ordering::SeqCst);
            FROM_SUPERVISOR.store(from_supervisor.into_raw_fd(), Ordering::SeqCst);
            Ok(Role::Keeper)
        }
    }
}

/// In the keeper: the fd that becomes readable (hangs up) when the supervisor is gone. `None`
/// in any other process.
pub fn supervisor_gone_fd() -> Option<RawFd> {
    let fd = FROM_SUPERVISOR.load(Ordering::SeqCst);
    (fd >= 0).then_some(fd)
}

/// True if this process is a keeper (see the module docs).
pub fn is_keeper() -> bool {
    supervisor_gone_fd().is_some()
}

/// In the keeper: tells the supervisor `message`. A no-op in any other process; a supervisor
/// that is gone is not an error.
pub(crate) fn tell(message: Message) {
    let fd = TO_SUPERVISOR.load(Ordering::SeqCst);
    if fd >= 0 {
        let rec = message.encode();
        let _ = process::write_raw(fd, &rec);
    }
}

/// In the keeper, as its last act: the work is done, the supervisor may exit as the keeper
/// does. Every exit path of a keeper that spawned a provider calls this.
pub fn done() {
    tell(Message::Done);
}

/// What the supervisor learned by the time its keeper exited.
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub spawned: Option<Spawned>,
    pub provider: Option<WaitStatus>,
    pub done: bool,
    /// The keeper's own wait status.
    pub keeper: Option<WaitStatus>,
}

impl Report {
    /// The keeper is gone before it finished and after it spawned the provider: it was killed,
    /// and the supervisor must stop the tree itself.
    pub fn keeper_killed(&self) -> bool {
        self.spawned.is_some() && !self.done
    }
}

impl Front {
    /// The supervisor's loop while the keeper works: every signal it gets goes on to the keeper
    /// (SIGTERM is how `sheepdog stop` and a host ask for the one stop); children it inherited
    /// before the split are reaped as they exit, never stopped. Returns once the keeper exited.
    ///
    /// Only signals wake it (SIGCHLD among them), not the keeper's messages: they matter only
    /// once the keeper is gone, and they wait in the pipe until then (three records, far below
    /// its capacity). Every wake here is a process competing with the keeper and the provider
    /// for a CPU on their start and exit path.
    pub fn relay(&mut self, signals: &SignalPipe) -> Report {
        let mut report = Report::default();
        loop {
            let mut fds = [process::PollFd::new(signals.as_raw_fd(), process::POLL_IN)];
            if process::poll(&mut fds, None).is_err() {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            for sig in signals.drain() {
                if sig != Signal::CHLD {
                    let _ = process::kill(self.keeper, sig);
                }
            }
            while let Some((pid, status)) = process::reap_any() {
                if pid == self.keeper {
                    report.keeper = Some(status);
                }
            }
            if report.keeper.is_some() {
                // Whatever it wrote before it died is in the pipe.
                self.read_messages(&mut report);
                return report;
            }
        }
    }

    /// Reads every record the keeper left in the pipe (it is gone: nothing more comes). A
    /// keeper writes at most three (spawned, provider exited, done), each in one `write`.
    fn read_messages(&mut self, report: &mut Report) {
        let mut buf = [0u8; 12 * 16];
        let mut len = 0;
        while len < buf.len() {
            match process::read_raw(self.from_keeper.as_raw_fd(), &mut buf[len..]) {
                Ok(0) | Err(_) => break,
                Ok(n) => len += n,
            }
        }
        for rec in buf[..len].chunks_exact(12) {
            match Message::decode(rec) {
                Some(Message::Spawned(s)) => report.spawned = Some(s),
                Some(Message::Provider(ws)) => report.provider = Some(ws),
                Some(Message::Done) => report.done = true,
                None => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        let pid = Pid::new(4242).unwrap();
        for m in [
            Message::Spawned(Spawned { pid, pgid: pid.as_group() }),
            Message::Provider(WaitStatus::Exited(3)),
            Message::Provider(WaitStatus::Signaled(Signal::KILL)),
            Message::Done,
        ] {
            assert_eq!(Message::decode(&m.encode()), Some(m));
        }
        assert_eq!(Message::decode(&[0; 12]), None);
    }
}
