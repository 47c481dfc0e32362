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
//! The keeper is cloned from the supervisor before the provider is spawned: with `CLONE_VM` on
//! Linux x86_64 and aarch64 (`crate::sys::keep`: no copy of the supervisor's memory, and the
//! supervisor relays in system calls only), by `fork` elsewhere or with `SHEEPDOG_KEEPER=fork`.
//! It moves into a process group of its own (a host's group kill, `kill -9 -PGID`, aimed at the supervisor
//! misses it; the session stays, so an interactive provider keeps its terminal), becomes a child
//! subreaper, spawns the provider and runs the supervision loop: everything the supervisor did
//! before. The supervisor relays every signal it gets to the keeper and, when the keeper is done,
//! exits as the keeper did, so the host sees one process with the old exit statuses.
//!
//! - Supervisor killed: the keeper sees its pipe from the supervisor hang up and runs the one
//!   stop itself (`Trigger::SupervisorKilled`): SIGTERM, the term grace, SIGKILL. The keeper is
//!   a subreaper and an ancestor of the whole tree, so it still sees every orphan, in both tiers.
//! - Keeper killed: its children, the provider among them, are re-parented to the supervisor
//!   (a subreaper too), which runs the same stop on the same tree and records it. A supervisor
//!   that shared its memory with the keeper first `execve`s itself ([`adoption`]): the keeper
//!   may have died holding a lock of that memory.
//!
//! So SIGKILL of either one, or of the supervisor's whole group, ends the tree within the stop's
//! own bound. What remains: both killed in the same instant (`kill -9 -1`, or each by pid before
//! either could act); then `reap` (and, in the cgroup tier, its cgroup backstop) is the answer.
//!
//! The keeper tells the supervisor what happened on a pipe, in fixed 12-byte records that one
//! `write` delivers whole (below `PIPE_BUF`): the provider was spawned, the provider exited
//! (its wait status, which only the keeper can reap), done. A keeper that exits without "done"
//! after it spawned the provider was killed; one killed between the spawn and its "spawned"
//! leaves the provider as the supervisor's child, which the supervisor finds by itself: a shared
//! keeper's clone has the kernel write the provider's pid into the memory the two share before
//! the provider runs (`crate::sys::exec::SPAWNED`), and a forked one's supervisor looks in
//! `/proc` for a child it did not have before the split.

// Elsewhere than Linux x86_64/aarch64 the keeper is always forked: the shared keeper's
// handover and adoption are never built there.
#![cfg_attr(not(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64"))), allow(dead_code))]

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::time::Instant;

use crate::spawn::Spawned;
use crate::stop::Trigger;
use crate::sys::process::{self, Forked};
use crate::sys::signal::{SignalPipe, pipe_cloexec, set_nonblocking};
use crate::sys::{Pgid, Pid, Signal, WaitStatus};

/// The variable that chooses how the keeper is made: `SHEEPDOG_KEEPER=off` runs without one,
/// `SHEEPDOG_KEEPER=fork` forks it where it would be cloned with `CLONE_VM`. For benchmarks (the
/// cost of the keeper, side by side) and debugging only: without a keeper the promise holds
/// only while the supervisor lives.
pub const KEEPER_ENV: &str = "SHEEPDOG_KEEPER";

/// The variable an adopting supervisor finds the tree's particulars in (the children it had
/// before the split, the tree's cgroup, the terminal's group), set by [`split`] for the
/// relay's `execve`. See [`adoption`].
const TREE_VAR: &str = "SHEEPDOG_ADOPT_TREE";

/// True if this supervisor should run with a keeper: on Linux (the chain needs subreapers),
/// unless `SHEEPDOG_KEEPER=off`.
pub fn wanted() -> bool {
    cfg!(target_os = "linux") && std::env::var_os(KEEPER_ENV).is_none_or(|v| v != "off")
}

/// True if the keeper shares the supervisor's memory (`CLONE_VM`): Linux x86_64 and aarch64,
/// unless `SHEEPDOG_KEEPER=fork`.
fn shared() -> bool {
    cfg!(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))
        && std::env::var_os(KEEPER_ENV).is_none_or(|v| v != "fork")
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
    /// The keeper's stop sent its SIGTERM, for this trigger; its grace ends at this
    /// `CLOCK_MONOTONIC` ms ([`crate::sys::process::monotonic_ms`]). A supervisor that adopts
    /// the tree after the keeper's SIGKILL goes on with this stop.
    Stopping(Trigger, u64),
}

const SPAWNED: i32 = 1;
const EXITED: i32 = 2;
const SIGNALED: i32 = 3;
const DONE: i32 = 4;
/// The low byte of a [`Message::Stopping`]'s kind; the next byte is the trigger
/// ([`trigger_code`], -3 to 64 as a byte), so that both words hold the 64-bit deadline (a grace
/// may last 8760h: more ms than 32 bits hold).
const STOPPING: i32 = 5;

/// A trigger in a [`Message::Stopping`]: a signal by its number, the others below zero. Only
/// the triggers of a stop asked from outside the chain go there.
fn trigger_code(t: Trigger) -> Option<i32> {
    match t {
        Trigger::Signal(s) => Some(s.as_raw()),
        Trigger::OwnerDied => Some(-1),
        Trigger::StdinEof => Some(-2),
        Trigger::Timeout => Some(-3),
        Trigger::ProviderExited | Trigger::SupervisorKilled => None,
    }
}

fn trigger_of(code: i32) -> Option<Trigger> {
    match code {
        -1 => Some(Trigger::OwnerDied),
        -2 => Some(Trigger::StdinEof),
        -3 => Some(Trigger::Timeout),
        n => Signal::from_raw(n).map(Trigger::Signal),
    }
}

impl Message {
    fn encode(self) -> [u8; 12] {
        let (kind, a, b) = match self {
            Message::Spawned(s) => (SPAWNED, s.pid.as_raw(), s.pgid.as_raw()),
            Message::Provider(WaitStatus::Exited(c)) => (EXITED, c, 0),
            Message::Provider(WaitStatus::Signaled(s, core)) => (SIGNALED, s.as_raw(), i32::from(core)),
            Message::Done => (DONE, 0, 0),
            Message::Stopping(t, until) => {
                let kind = STOPPING | (i32::from(trigger_code(t).unwrap_or(0) as i8 as u8) << 8);
                let mut out = [0u8; 12];
                out[..4].copy_from_slice(&kind.to_ne_bytes());
                out[4..].copy_from_slice(&until.to_ne_bytes());
                return out;
            }
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
            SIGNALED => Signal::from_raw(word(4)).map(|s| Message::Provider(WaitStatus::Signaled(s, word(8) != 0))),
            DONE => Some(Message::Done),
            k if k & 0xFF == STOPPING => {
                let until = u64::from_ne_bytes(rec.get(4..12)?.try_into().ok()?);
                trigger_of(i32::from(((k >> 8) & 0xFF) as u8 as i8)).map(|t| Message::Stopping(t, until))
            }
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
    Keeper(Link),
}

/// What the supervisor hands over at the split, for a keeper that shares its memory.
#[derive(Debug, Default)]
pub(crate) struct Handover {
    /// Fds only the keeper may hold: the provider's stdio and anything whose last close the
    /// provider or a sender must see (a supervisor holding a copy would keep a pipe from EOF).
    pub close: Vec<RawFd>,
    /// Fds an adopting image takes over, in order (a managed entry's log pipe read ends).
    pub inherit: Vec<RawFd>,
    /// The children this process had before the split (never the tree's).
    pub foreign: Vec<Pid>,
    /// The tree's cgroup: its path and inode.
    pub cgroup: Option<(PathBuf, u64)>,
    /// The process group to give the terminal back to once the tree is gone.
    pub terminal_home: Option<Pgid>,
}

impl Handover {
    /// `SHEEPDOG_ADOPT_TREE=f<pid>,<pid>;i<fd>,<fd>;t<pgid>;c<inode>:<path>`
    /// (each part optional; the path last, as it may hold any byte but NUL).
    fn to_env(&self) -> String {
        let foreign: Vec<String> = self.foreign.iter().map(|p| p.as_raw().to_string()).collect();
        let inherit: Vec<String> = self.inherit.iter().map(|f| f.to_string()).collect();
        let mut v = format!("{TREE_VAR}=f{};i{}", foreign.join(","), inherit.join(","));
        if let Some(t) = self.terminal_home {
            v.push_str(&format!(";t{}", t.as_raw()));
        }
        if let Some((path, inode)) = &self.cgroup {
            v.push_str(&format!(";c{inode}:{}", path.display()));
        }
        v
    }
}

/// Makes the keeper (see the module docs): cloned with `CLONE_VM` where [`shared`], else
/// forked. In the keeper: its own process group, a child subreaper, the signal handlers its own
/// (`signals` renewed), the pipe ends kept for the rest of its life. `handled` are the signals
/// the supervisor has handlers for (it relays them). Must run in a single-threaded process (the
/// supervisor binaries).
///
/// A shared clone returns only in the keeper: the supervisor relays until it exits or adopts
/// (`crate::sys::keep`).
///
/// Errors: pipe, mapping, clone or fork failures (nothing was made), as `io::Error`.
pub(crate) fn split(signals: &SignalPipe, handled: &[Signal], handover: Handover) -> io::Result<Role> {
    let (from_keeper, to_supervisor) = pipe_cloexec()?;
    let (from_supervisor, life) = pipe_cloexec()?;
    set_nonblocking(from_keeper.as_raw_fd())?;
    // Read here, in the supervisor: the keeper is never PID 1, but exits as its front does.
    let front_is_init = process::getpid().as_raw() == 1;
    #[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
    if shared() {
        use crate::sys::keep;
        // Blocked before the drain: a signal that comes later waits for the relay.
        let mask = keep::block_all();
        let early = signals.drain();
        let tree_env = handover.to_env();
        let mut close = handover.close;
        close.extend([to_supervisor.as_raw_fd(), from_supervisor.as_raw_fd()]);
        let relay = keep::Relay::new(
            handled,
            &early,
            from_keeper.as_raw_fd(),
            (close, handover.inherit),
            (DONE, SPAWNED),
            front_is_init,
            &[tree_env],
        )
        .inspect_err(|_| keep::restore_mask(&mask))?;
        let mask = keep::clone_keeper(relay, mask)?;
        drop((from_keeper, life));
        let ready = signals.renew_after_fork().and_then(|()| {
            keep::restore_mask(&mask);
            become_keeper()
        });
        return keeper_ready(ready, Link { to_supervisor, from_supervisor, front_is_init });
    }
    let _ = (handled, handover);
    match process::fork()? {
        Forked::Parent(keeper) => {
            drop((to_supervisor, from_supervisor));
            Ok(Role::Supervisor(Front { keeper, from_keeper, _life: life }))
        }
        Forked::Child => {
            drop((from_keeper, life));
            let ready = signals.renew_after_fork().and_then(|()| become_keeper());
            keeper_ready(ready, Link { to_supervisor, from_supervisor, front_is_init })
        }
    }
}

/// The keeper's own process group and subreaper bit.
fn become_keeper() -> io::Result<()> {
    process::own_process_group()?;
    #[cfg(target_os = "linux")]
    process::set_child_subreaper()?;
    Ok(())
}

/// In the keeper, after its setup: `link`, which it holds until its last act (linger and
/// cleanups still watch the supervisor). Until the setup succeeded the keeper is only a copy: a
/// failure is the same as a keeper killed at birth, which the supervisor handles (it exits as
/// the keeper did).
fn keeper_ready(ready: io::Result<()>, link: Link) -> io::Result<Role> {
    if ready.is_err() {
        std::process::exit(crate::exit::USAGE);
    }
    // A panic aborts (the release profile), and musl's abort raises SIGABRT at the thread id it
    // cached, which in a keeper cloned with CLONE_VM is its supervisor's. The keeper dies by
    // SIGABRT itself instead, so its supervisor sees a killed keeper and adopts the tree.
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default(info);
        crate::sys::signal::die_by(Signal::ABRT);
    }));
    Ok(Role::Keeper(link))
}

/// What a supervisor that re-executed itself after its keeper's SIGKILL takes over: set by its
/// relay (`crate::sys::keep`) in `SHEEPDOG_ADOPT` and by [`split`] in `SHEEPDOG_ADOPT_TREE`,
/// read once by [`take_adoption`] and passed down as a value ([`crate::supervisor::Options`]).
#[derive(Debug)]
pub struct Adoption {
    /// What the keeper told before it ended, and how it ended.
    pub(crate) report: Report,
    /// The children the supervisor had before the split.
    pub(crate) foreign: Vec<Pid>,
    /// The tree's cgroup: path and inode.
    pub(crate) cgroup: Option<(PathBuf, u64)>,
    /// The group to give the terminal back to.
    pub(crate) terminal_home: Option<Pgid>,
    /// The fds left open for this image ([`Handover::inherit`]), until taken.
    inherited: Vec<RawFd>,
}

impl Adoption {
    /// Takes the fds the relay left open ([`Handover::inherit`], in order), each owned once:
    /// a second call gets none. An fd that is not open is left out.
    pub(crate) fn take_inherited(&mut self) -> Vec<OwnedFd> {
        #[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
        {
            let fds = std::mem::take(&mut self.inherited);
            fds.into_iter().filter_map(crate::sys::keep::inherited_fd).collect()
        }
        #[cfg(not(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64"))))]
        Vec::new()
    }
}

/// The adoption this process was started for, if any, taken from the environment (and removed
/// from it, so that nothing it spawns sees it, and a second call finds none). The supervisor's
/// one entry takes it first, before anything is spawned, and hands the value down: a managed
/// supervisor's `run_supervisor` (which also needs it before the loop) through
/// [`crate::supervisor::Options::adoption`], else `supervise` itself.
pub(crate) fn take_adoption() -> Option<Adoption> {
    #[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        use crate::sys::keep;
        let found = keep::take_env(keep::ADOPT_VAR)?;
        let tree = keep::take_env(TREE_VAR).unwrap_or_default();
        parse_adoption(found.to_str()?, &tree.to_string_lossy())
    }
    #[cfg(not(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64"))))]
    None
}

/// Parses the two variables (see [`Adoption`]): `s<signal>:<hex>` or `e<code>:<hex>`, and
/// [`Handover`]'s form. `None` if the first is malformed.
fn parse_adoption(found: &str, tree: &str) -> Option<Adoption> {
    let (status, hex) = found.split_once(':')?;
    let n: i32 = status.get(1..)?.parse().ok()?;
    let keeper = match status.as_bytes().first()? {
        b's' => WaitStatus::Signaled(Signal::from_raw(n)?, false),
        b'e' => WaitStatus::Exited(n),
        _ => return None,
    };
    let bytes: Vec<u8> =
        (0..hex.len() / 2).filter_map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()).collect();
    let mut report = Report { keeper: Some(keeper), ..Report::default() };
    report.read(&bytes);
    let mut a = Adoption { report, foreign: Vec::new(), cgroup: None, terminal_home: None, inherited: Vec::new() };
    let mut rest = tree;
    while !rest.is_empty() {
        let (part, more) = match rest.as_bytes()[0] {
            // The path runs to the end.
            b'c' => (rest, ""),
            _ => rest.split_once(';').unwrap_or((rest, "")),
        };
        rest = more;
        match (part.as_bytes()[0], &part[1..]) {
            (b'f', list) => a.foreign = list.split(',').filter_map(|p| Pid::new(p.parse().ok()?)).collect(),
            (b't', g) => a.terminal_home = g.parse().ok().and_then(Pgid::new),
            (b'i', list) => {
                a.inherited = list.split(',').filter_map(|f| f.parse().ok()).collect();
            }
            (b'c', c) => {
                a.cgroup = c.split_once(':').and_then(|(i, p)| Some((PathBuf::from(p), i.parse().ok()?)));
            }
            _ => {}
        }
    }
    Some(a)
}

/// The keeper's end of the chain: what [`split`] hands the process that became the keeper, held
/// by it for its whole life and passed down as a value (the supervision loop, the outcome, a
/// managed entry's linger and cleanup) instead of living in globals.
#[derive(Debug)]
#[must_use = "a keeper must say `done` as its last act, or its supervisor takes it for killed"]
pub struct Link {
    /// The write end of the pipe to the supervisor (records of [`Message`]).
    to_supervisor: OwnedFd,
    /// The read end of the pipe only the supervisor can write to: it hangs up when the
    /// supervisor is gone.
    from_supervisor: OwnedFd,
    /// The supervisor in front is PID 1 of its PID namespace (`sheepdog run` as a container's
    /// init), which cannot die by a signal it raises at itself: see [`Link::front_is_init`].
    front_is_init: bool,
}

impl Link {
    /// The fd that becomes readable (hangs up) when the supervisor is gone.
    pub fn supervisor_gone_fd(&self) -> RawFd {
        self.from_supervisor.as_raw_fd()
    }

    /// True if the supervisor in front is PID 1 of its PID namespace: the statuses this keeper
    /// exits with are then what PID 1 can exit with (128 + N, never death by N), since the front
    /// exits as the keeper did.
    pub fn front_is_init(&self) -> bool {
        self.front_is_init
    }

    /// Tells the supervisor that this keeper's stop sent its SIGTERM, for `trigger`, with its
    /// grace ending at `until` ([`Message::Stopping`]); a trigger from inside the chain is not
    /// told (a keeper whose supervisor was killed has no one to tell).
    pub(crate) fn tell_stopping(&self, trigger: Trigger, until: Instant) {
        if trigger_code(trigger).is_none() {
            return;
        }
        let left = until.saturating_duration_since(Instant::now());
        let at = process::monotonic_ms().saturating_add(u64::try_from(left.as_millis()).unwrap_or(u64::MAX));
        self.tell(Message::Stopping(trigger, at));
    }

    /// Tells the supervisor `message`; a supervisor that is gone is not an error.
    pub(crate) fn tell(&self, message: Message) {
        let _ = process::write_raw(self.to_supervisor.as_raw_fd(), &message.encode());
    }

    /// As the keeper's last act: the work is done, the supervisor may exit as the keeper does.
    /// Every exit path of a keeper that spawned a provider ends here (the link is consumed, so
    /// it can be said once).
    pub fn done(self) {
        self.tell(Message::Done);
    }
}

/// What the supervisor learned by the time its keeper exited.
#[derive(Clone, Debug, Default)]
pub(crate) struct Report {
    pub spawned: Option<Spawned>,
    pub provider: Option<WaitStatus>,
    pub done: bool,
    /// The keeper's own wait status.
    pub keeper: Option<WaitStatus>,
    /// The stop the keeper had begun ([`Message::Stopping`]): its trigger, and when its grace
    /// ends (`CLOCK_MONOTONIC` ms).
    pub stopping: Option<(Trigger, u64)>,
}

impl Report {
    /// Takes in the keeper's records `bytes` (whole 12-byte records; a partial tail is ignored).
    fn read(&mut self, bytes: &[u8]) {
        for rec in bytes.chunks_exact(12) {
            match Message::decode(rec) {
                Some(Message::Spawned(s)) => self.spawned = Some(s),
                Some(Message::Provider(ws)) => self.provider = Some(ws),
                Some(Message::Done) => self.done = true,
                Some(Message::Stopping(t, until)) => self.stopping = Some((t, until)),
                None => {}
            }
        }
    }

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
                if sig == Signal::CHLD {
                    continue;
                }
                // A value (a stop's one-off term grace) goes on with the signal it came with.
                let queued = signals.take_value(sig).is_some_and(|v| process::queue(self.keeper, sig, v).is_ok());
                if !queued {
                    let _ = process::kill(self.keeper, sig);
                }
            }
            // Up to the keeper, no further: the kernel moves a dying keeper's children (a
            // cleanup's exited `sh` among them) to the end of this process's list as it makes the
            // keeper a zombie, under one lock, so every child after the keeper is its orphan,
            // whose status the adopting loop reads (`supervisor::Happened::Reaped`).
            while let Some((pid, status)) = process::reap_any() {
                if pid == self.keeper {
                    report.keeper = Some(status);
                    break;
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
        report.read(&buf[..len]);
    }
}

#[cfg(test)]
mod tests {
    use crate::spawn::Spawned;
    use crate::stop::Trigger;
    use crate::sys::{Pid, Signal, WaitStatus};

    use super::{Handover, Message, TREE_VAR, parse_adoption};

    /// What the split hands an adopting image comes back whole from its variable, a cgroup
    /// path with `;` and `:` in it (which runs to the end) among it.
    #[test]
    fn the_handover_round_trips_through_its_variable() {
        let handover = Handover {
            foreign: vec![Pid::new(7).unwrap(), Pid::new(9).unwrap()],
            inherit: vec![3, 4],
            terminal_home: Pid::new(12).map(Pid::as_group),
            cgroup: Some(("/sys/fs/cgroup/a;b:c".into(), 77)),
            ..Handover::default()
        };
        let env = handover.to_env();
        let tree = env.strip_prefix(&format!("{TREE_VAR}=")).unwrap();
        let a = parse_adoption("s9:", tree).unwrap();
        assert_eq!(a.foreign, handover.foreign);
        assert_eq!(a.inherited, vec![3, 4]);
        assert_eq!(a.terminal_home, handover.terminal_home);
        assert_eq!(a.cgroup, handover.cgroup);
    }

    #[test]
    fn messages_round_trip() {
        let pid = Pid::new(4242).unwrap();
        for m in [
            Message::Spawned(Spawned { pid, pgid: pid.as_group() }),
            Message::Provider(WaitStatus::Exited(3)),
            Message::Provider(WaitStatus::Signaled(Signal::KILL, false)),
            Message::Done,
            Message::Stopping(Trigger::Signal(Signal::TERM), 7),
            Message::Stopping(Trigger::Signal(Signal::from_raw(31).unwrap()), 1 << 40),
            Message::Stopping(Trigger::OwnerDied, u64::MAX),
            Message::Stopping(Trigger::StdinEof, 0),
            Message::Stopping(Trigger::Timeout, 1 << 31),
        ] {
            assert_eq!(Message::decode(&m.encode()), Some(m));
        }
        assert_eq!(Message::decode(&[0; 12]), None);
    }
}
