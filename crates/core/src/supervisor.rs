//! One supervisor's life: set up, split off the keeper, spawn the provider (or take over the
//! tree after the keeper's SIGKILL), wait on events until the tree is gone or handed on, record
//! how it ended, linger while a cleanup is pending, run the cleanup, done. Single-threaded, no
//! async runtime.
//!
//! `supervise_with` reads in that order, and the file follows it:
//! 1. `Setup::fresh` (the owner check, the stdin and output relays, the subreaper bit, the
//!    containment probe) or `Setup::adopt` (what an image that re-executed itself after its
//!    keeper's SIGKILL takes over, `crate::keeper`);
//! 2. `Setup::split`: the keeper is forked; the supervisor in front relays signals until the
//!    keeper is done and exits as it did, and goes on only if the keeper was killed;
//! 3. `Setup::start`: the spawn into the tree's cgroup, or the take-over of the tree a killed
//!    keeper left (whose stop then begins at once);
//! 4. the one loop over `Life`'s states (running, stopping, recording, lingering, cleaning up,
//!    done), each state's step returning the next. Running and stopping are the tree's wakes,
//!    one `Supervisor` method per step: `wait` blocks in one `poll` on the signal self-pipe
//!    (SIGCHLD; SIGTERM, SIGINT, SIGHUP, which stop; and the signals in [`Signal::FORWARDED`],
//!    passed on to the provider's group), the owner's pidfd, stdin's hang-up (only with
//!    `--on-stdin-eof stop`), the terminal's hang-up, the cgroup's events, in a keeper the
//!    supervisor's pipe, the relays, and whatever fds the [`Hooks`] adds (a managed process's
//!    log pipes). Then, in order: the supervisor's death, the signals, the reaping of every
//!    child it has (the provider and any orphan re-parented to it), the owner, the other fds,
//!    the look at the members and the turn timeout; last `step`, where `Life::next` (a pure
//!    transition, unit-tested without processes as [`crate::stop::StopMachine`] is) decides
//!    from the stop machine's phase and the provider's status whether the supervisor runs on,
//!    waits for a drainer, steps the stop, hands the leftovers on or is done with the tree.
//!    "All gone" is re-checked after every wake, so the tree's part ends within a millisecond
//!    of the last descendant's death;
//! 5. `Supervisor::finish`: the last zombies reaped, the output relay emptied, the cgroup
//!    removed, the terminal given back: the [`Outcome`];
//! 6. `Supervisor::record`: the front end records it ([`Hooks::record_outcome`]: a managed
//!    supervisor writes the registry; `run` records nothing more) and answers what is left,
//!    `Life::recorded`: nothing, the cleanup a stop triggered, or, after the command's own
//!    exit, a cleanup pending on a trigger still to come;
//! 7. `Supervisor::linger`: while such a cleanup is pending, the same loop waits, idle, in the
//!    same `wait`, over what is still watched: the signal self-pipe, the owner's pidfd (the
//!    same `OwnerWatch`), the turn timeout and, in a keeper, the supervisor's pipe;
//!    `Life::lingered` (pure, tested the same way) decides after each wake. (After a take-over,
//!    `Supervisor::settle` waits in it too, for the cleanup the killed keeper was running);
//! 8. the cleanup ([`Hooks::clean_up`]), then `Life::Done`: the loop returns the outcome.
//!
//! Longer than the ~700 lines a file here usually keeps to (about 1600 before its unit tests),
//! on purpose: the setup, the loop, its wake-ups and its states are read as one piece; split, a
//! reader would follow a stop across files.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use crate::cgroup;
use crate::keeper::{Message, Role};
use crate::relay::{OutputRelay, Seen, StdinRelay};
use crate::spawn::{self, SpawnError, SpawnOptions, Spawned};
use crate::stop::{AfterProviderExit, Phase, Step, StopMachine, StopPolicy, Trigger};
use crate::sys::process::{self, FdKind, POLL_HUP_ONLY, POLL_IN, POLL_PRI, PidFd, PollFd};
use crate::sys::signal::SignalPipe;
use crate::sys::{Pgid, Pid, Signal, WaitStatus, procfs};
use crate::tree::{Member, Tree};

/// Without pidfds (non-Linux, or Linux before 5.3) the owner is checked this often: 100 ms.
/// Everywhere pidfds exist, owner death is an event and this is unused.
pub const OWNER_POLL: Duration = Duration::from_millis(100);

/// How soon after the spawn (and after each reaped child) the descendants are first handed to
/// [`Hooks::members`]: 10 ms; each later look waits twice as long, up to [`MEMBER_SCAN_MAX`].
/// Forks send no event, so only looking finds them; most are made right after a start.
pub const MEMBER_SCAN_MIN: Duration = Duration::from_millis(10);
/// The longest wait between two looks at the descendants for [`Hooks::members`]: 250 ms.
/// It bounds the window in which a descendant that is orphaned and then loses its supervisor to
/// a SIGKILL goes unrecorded (only the cgroup tier closes it); a look costs one read of
/// `/proc/<pid>/task/*/children` per member.
pub const MEMBER_SCAN_MAX: Duration = Duration::from_millis(250);

/// During a stop in the cgroup tier, "all gone" is also looked at this often: 250 ms. A member
/// that is not this process's descendant (moved into the cgroup from outside) ends with no
/// SIGCHLD here, and only `populated 0` in `cgroup.events` (a POLLPRI wake) tells. On Linux
/// 6.18 that wake was seen missing: the file said `populated 0` while the poll on it slept on
/// into the term grace (tests/cgroup.rs, `populated_0_wakes_...`: 4 of 223 runs under load).
/// A stop is bounded, so the look costs a few reads of one small file per second, only then.
pub const CGROUP_RECHECK: Duration = Duration::from_millis(250);

/// At most this many children are reaped per wake: 1024. The supervisor is a subreaper, so in
/// a fork storm (each member forks and exits) every exit is reparented to it as a zombie, and
/// a loop that reaps "until none is left" can chase the storm past every deadline. After a full
/// batch the next `poll` does not block, so the rest are reaped after the deadlines are seen.
pub const REAP_BATCH: usize = 1024;

/// And for at most this long per wake: 5 ms, and never past the stop's next deadline. Each
/// reap costs the kernel microseconds (it frees the zombie's task and its `/proc` entries), and
/// in a storm pinned to the supervisor's CPU the supervisor gets a thirtieth of it: a full
/// batch then took up to a second of wall time, past the term grace it is there to keep.
pub const REAP_SLICE: Duration = Duration::from_millis(5);

/// After the provider's own exit, how long a leftover that is draining its output (its stdin
/// a pipe no live member writes to any more: bash's `exec > >(reader)`) may take to finish
/// before the leftovers get the stop: 1000 ms, Orca's bound for the same
/// (`PROVIDER_OUTPUT_DRAIN_TIMEOUT_MS`). Without it the reader got SIGTERM at once and the host
/// lost what it had not yet written (codex#7846).
pub const OUTPUT_DRAIN: Duration = Duration::from_millis(1000);

/// How long after the provider's own exit the drainers are looked for again before a look that
/// finds none is believed: 50 ms. bash forks a `>(reader)` before it runs the command and the
/// subshell moves the pipe to its stdin only when it is first scheduled, which on a loaded
/// machine can be after the provider has exited; until then it looks like nothing is draining.
pub const DRAIN_SETTLE: Duration = Duration::from_millis(50);

/// A tree with more live processes than this when the provider exits is not looked at for
/// drainers: 256. The look reads every member's fds, and a fork storm's thousands would make
/// the stop wait for it.
pub const DRAIN_MAX_MEMBERS: usize = 256;

/// A wake that reaped more children than this with the provider is a fork storm's: 32. No
/// drainer is looked for then (a look reads this process's children list, which with
/// thousands of zombies is quadratic).
pub const DRAIN_MAX_REAPED: usize = 32;

/// Whom the supervisor answers to: when the owner dies, the tree is stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// Must be the supervisor's parent (`sheepdog run --owner`); checked before spawning.
    Parent(Pid),
    /// Any process, identified by its pid and start time at setup (`sheepdog start --owner`).
    Process(Pid),
}

/// What stdin reaching EOF means.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OnStdinEof {
    /// Nothing: the provider decides.
    #[default]
    Ignore,
    /// Stop: the provider gets the stdin grace to exit on its own, then the one stop. Only pipes,
    /// sockets and terminals can hang up; any other stdin (a file, `/dev/null`, closed) is
    /// already at EOF, so the grace starts at once.
    Stop,
}

/// What the provider's stdin is (`run --stdin`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum StdinMode {
    /// The supervisor's own stdin, zero-copy: the default, which costs nothing.
    #[default]
    Inherit,
    /// A pipe the supervisor holds and feeds from its own stdin ([`crate::relay`]), which it
    /// closes when a stop begins or the owner dies (Orca's supervisor relays the same way).
    Relay,
}

/// What the owner's death does (`run --on-owner-death`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OnOwnerDeath {
    /// The one stop at once: SIGTERM, the term grace, SIGKILL (the default).
    #[default]
    Stop,
    /// Close the provider's stdin first (it needs [`StdinMode::Relay`]), give it the stdin grace
    /// to flush and exit on its own, then the one stop: Orca's `closeRequest: 'stdin-end'`.
    CloseStdin,
}

/// Everything one supervisor needs.
#[derive(Debug, Default)]
pub struct Options {
    /// The provider's argv; must not be empty.
    pub argv: Vec<OsString>,
    pub spawn: SpawnOptions,
    /// The provider's stdin: inherited, or the relay (then `spawn.stdin` is set here).
    pub stdin: StdinMode,
    pub owner: Option<Owner>,
    pub on_owner_death: OnOwnerDeath,
    /// What the tree gets once the provider has exited: the grace, or SIGKILL at once.
    pub after_provider_exit: AfterProviderExit,
    pub on_stdin_eof: OnStdinEof,
    pub policy: StopPolicy,
    /// The turn timeout: the one stop runs this long after the spawn.
    pub timeout: Option<Duration>,
    /// The containment tier asked for, and limits (see [`crate::cgroup::probe`]).
    pub containment: cgroup::Request,
    /// What the provider leaves running when it exits on its own with a status (not by a
    /// signal, not within a stop): `false` (the default, `run`'s promise) stops it; `true`
    /// leaves it alive and returns it in [`Outcome::kept`], for the caller to hand to a
    /// supervisor of its own (`run --leftovers keep`, under an agent's shell tool: the server
    /// a `nohup ... &` meant to keep).
    pub keep_leftovers: bool,
    // With `keep_leftovers`, the provider's stdout and stderr go through the output relay
    // (crate::relay::OutputRelay), so that a kept leftover never holds the host's pipes.
    /// A tag the provider carries in `SHEEPDOG_TAG` (inherited by all it starts): how what it
    /// leaves is found again once this supervisor is gone ([`Options::keep_leftovers`]).
    pub tag: Option<String>,
    /// What this image takes over after its keeper's SIGKILL, when a front end took it first
    /// (a managed supervisor needs it before the loop: `manager::supervise`). `None` here:
    /// [`supervise`] takes it itself (`crate::keeper::take_adoption`), so a `run` that
    /// re-executed itself adopts its tree without its front end knowing.
    pub adoption: Option<crate::keeper::Adoption>,
}

/// What happened in one supervisor's life, as its loop tells it: one value per event, in the
/// order they happen. Each front end consumes them through [`Listener::on`]: `run`'s
/// `--events-fd` writer ([`crate::events::EventSink`]) turns them into JSON lines, a managed
/// supervisor into log markers and registry writes. Told only; nothing a consumer does with
/// one changes the loop (what the loop asks is [`Hooks`]'s).
#[derive(Clone, Copy, Debug)]
pub enum Happened<'a> {
    /// The probe chose the tier, before the spawn: in the cgroup tier the cgroup exists and the
    /// command will join it before `exec`. Told again (subreaper tier, with the reason) if the
    /// child could not join and the tier was not demanded.
    Contained(&'a cgroup::Record),
    /// The provider is running, under `policy` (the timings its stop uses unless they change
    /// before it: see [`Hooks::policy_for_stop`]).
    Spawned { spawned: Spawned, policy: &'a StopPolicy },
    /// The provider could not be started (`argv[0]` is `program`): nothing runs, and the
    /// supervisor returns `error` next.
    SpawnFailed { program: &'a std::ffi::OsStr, error: &'a SpawnError },
    /// This process adopted the tree after its keeper's SIGKILL (crate::keeper): the provider
    /// is this one. The keeper may have died before it recorded that (a managed entry's record,
    /// its `started` marker): a consumer records what is missing. Nothing is told again (no
    /// second [`Happened::Spawned`]).
    Adopted(Spawned),
    /// A stop began (or, with [`Trigger::ProviderExited`], cleanup of what an exited provider
    /// left), with the timings it uses (`policy`: the entry's, or a `stop --term-grace`
    /// request's one-off grace). Told before the stop's first signal goes out, so a managed
    /// entry records why it stops even if this process is killed in the middle of it.
    Stopping { trigger: Trigger, policy: &'a StopPolicy },
    /// The term grace ran out; SIGKILL went to `remaining` processes.
    Escalated { remaining: usize },
    /// A child that is not the provider was reaped (an inherited orphan, or a helper the front
    /// end spawned itself).
    Reaped { pid: Pid, status: WaitStatus },
}

/// A consumer of a supervisor's events ([`Happened`]).
pub trait Listener {
    /// `event` happened (see each variant for when).
    fn on(&mut self, event: &Happened<'_>);
}

/// What a front end plugs into the loop besides hearing its events: the few questions the loop
/// asks (the answers steer it) and the extra fds it services. A trait, not values in
/// [`Options`]: the answers change while the loop runs (a managed entry's log pipes close, its
/// entry's timings are re-read when a stop begins) and the callbacks reach the front end's own
/// state (its log pipes, its stdin FIFO). A [`Listener`] too, so the loop takes one object: a
/// managed front end's answers and its records share its state (the registry, the logs). All
/// default to nothing.
pub trait Hooks: Listener {
    /// A stop is about to begin: the timings to use, if they changed since the spawn (a managed
    /// supervisor re-reads its entry here, so `stop --term-grace` applies).
    fn policy_for_stop(&mut self, _trigger: Trigger) -> Option<StopPolicy> {
        None
    }
    /// True if the front end wants [`Hooks::members`] calls (a managed supervisor does).
    fn wants_members(&self) -> bool {
        false
    }
    /// The live descendants of the provider, now and then while it runs: soon after the spawn
    /// and after each reaped child, then less often (see [`MEMBER_SCAN_MIN`]). A managed
    /// supervisor records them, so `reap` finds members that cleared their environment.
    /// Returns true if someone new was among them (the next look then comes soon again): a
    /// question, not an event, because the answer sets when the loop looks next.
    fn members(&mut self, _members: &[Member]) -> bool {
        false
    }
    /// Fds only the keeper may hold (closed in a supervisor that shares the keeper's memory):
    /// those whose last close someone waits for, such as the write end of a stdin FIFO.
    fn keeper_only_fds(&self) -> Vec<RawFd> {
        Vec::new()
    }
    /// Fds a supervisor that adopts the tree after its keeper's SIGKILL takes over, in an order
    /// the front end knows (a managed entry's log pipe read ends: the provider must not meet a
    /// pipe without a reader during its stop). See `crate::keeper::Adoption::take_inherited`.
    fn adoptable_fds(&self) -> Vec<RawFd> {
        Vec::new()
    }
    /// This process handed the tree to its keeper (crate::keeper) and only relays from now on:
    /// drop what only the process running the loop may hold (a managed entry's stdin pipe, whose
    /// copy here would keep the command from ever reading EOF).
    fn handed_to_keeper(&mut self) {}
    /// Extra fds to poll for readability.
    fn fds(&self) -> Vec<RawFd> {
        Vec::new()
    }
    /// One of [`Hooks::fds`] is readable or hung up.
    fn ready(&mut self, _fd: RawFd) {}
    /// `Life::Recording`: the tree's part is over and `outcome` is how it ended. Records it
    /// and answers what is left to do: [`Pending::Nothing`] (the default: `run` records nothing
    /// more than its events, and never lingers), a cleanup claimed with the record, or one that
    /// waits for a trigger.
    fn record_outcome(&mut self, _outcome: &Outcome) -> Pending {
        Pending::Nothing
    }
    /// `Life::Lingering`: a signal that is no stop came (SIGUSR1: "your entry changed"); true
    /// if the cleanup is still pending (false: the supervisor is done).
    fn still_needed(&mut self) -> bool {
        false
    }
    /// `Life::CleaningUp`: runs the cleanup, as `cleanup` says.
    fn clean_up(&mut self, _cleanup: Cleanup) {}
    /// At a take-over ([`Happened::Adopted`]): the cleanup command the killed keeper was running
    /// (its `sh`, by identity), if it was. It and what is below it are left out of the tree, so
    /// the take-over's stop does not cut its work short; the front end then answers
    /// [`Pending::Settling`] and the loop lets it finish ([`Hooks::settled`]). Default: none
    /// (`run` has no cleanup).
    fn keepers_cleanup(&mut self) -> Option<Member> {
        None
    }
    /// `Life::Settling`, after each wake (the children it reaped were told first, as
    /// [`Happened::Reaped`]): `None` when the keeper's cleanup is settled and recorded (its `sh`
    /// ended, or it was stopped past its bound) and the supervisor is done; else how long the
    /// next wake may wait at most, to the cleanup's bound (by the clock the bound is kept in, so
    /// a clock step cannot make the loop spin).
    fn settled(&mut self) -> Option<Duration> {
        None
    }
}

/// What is left to do once the outcome is recorded ([`Hooks::record_outcome`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pending {
    /// Nothing: the supervisor is done.
    Nothing,
    /// The cleanup a stop triggered, claimed with the record: it runs now
    /// ([`Cleanup::Claimed`]).
    Cleanup,
    /// A cleanup is pending after the command's own exit, and a trigger may still come: the
    /// supervisor lingers, idle, watching the owner (`owner`: its pid and its start time in
    /// clock ticks, as recorded) and the turn timeout's end (`until`), and hears SIGTERM,
    /// SIGINT, SIGHUP (ARCHITECTURE.md: "a cleanup belongs to the entry").
    Trigger { owner: Option<(Pid, Option<u64>)>, until: Option<Instant> },
    /// The cleanup the killed keeper was running still runs ([`Hooks::keepers_cleanup`]): the
    /// supervisor, now its subreaper, lets it finish, reaping as its members exit, until
    /// [`Hooks::settled`] says it is done (past its bound it is stopped).
    Settling,
}

/// Which cleanup `Life::CleaningUp` runs ([`Hooks::clean_up`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cleanup {
    /// The one a stop triggered, claimed when the outcome was recorded.
    Claimed,
    /// The one that was pending while the supervisor lingered, for this trigger (claimed now).
    Triggered(Trigger),
}

/// The front end that hears nothing and asks nothing.
pub struct Quiet;
impl Listener for Quiet {
    fn on(&mut self, _event: &Happened<'_>) {}
}
impl Hooks for Quiet {}

/// How a supervised provider and its tree ended.
#[derive(Debug)]
pub struct Outcome {
    pub spawned: Spawned,
    /// The provider's own wait status; `None` only if it could not be killed in time.
    pub provider: Option<WaitStatus>,
    /// What asked for the stop; `None` when the provider exited on its own.
    pub trigger: Option<Trigger>,
    /// The kernel confirmed nothing of the tree is alive (zombies count as dead).
    pub tree_gone: bool,
    /// SIGKILL was needed.
    pub escalated: bool,
    /// In the cgroup tier: the tree's cgroup could not be removed afterwards (a leftover for
    /// `reap`).
    pub cgroup_left: bool,
    /// What still lived when a stop ended unfinished (empty otherwise), by identity: recorded
    /// so that a later `stop` or `reap` finds them whatever uid they switched to.
    pub left: Vec<Member>,
    /// With [`Options::keep_leftovers`]: what the provider left running, not stopped.
    pub kept: Option<Kept>,
    /// When this process is the keeper: its end of the chain. The front end says
    /// [`crate::keeper::Link::done`] on it as its last act (after it recorded or printed what
    /// it must), and the supervisor in front then exits as this process does.
    pub keeper: Option<crate::keeper::Link>,
    /// This process, or the supervisor in front of this keeper, is PID 1 of its PID namespace:
    /// [`Outcome::exit`] then gives 128 + N where it would die by N.
    pub as_init: bool,
}

/// What a provider left running when it exited on its own, handed on alive
/// ([`Options::keep_leftovers`]).
#[derive(Debug)]
pub struct Kept {
    /// Its live processes, by identity, oldest first.
    pub members: Vec<Member>,
    /// The tree's cgroup (path, inode), left in place with them in it; `None` outside the
    /// cgroup tier.
    pub cgroup: Option<(std::path::PathBuf, u64)>,
    /// The provider's process group (what `cmd &` in a script shares).
    pub pgid: Pgid,
    /// The read ends of the output relay ([`crate::relay::OutputRelay`]) that the leftovers
    /// may still write to, with their stream: for the entry's log.
    pub output: Vec<(crate::logs::Stream, std::os::fd::OwnedFd)>,
}

/// How the supervisor itself should end, as docs/reference.md's exit-status table says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    /// Die by this signal (re-raised with its default action).
    Signal(Signal),
}

/// Status when the kernel did not finish the kill within the kill wait:
/// [`crate::exit::TIMED_OUT`] (124, as `timeout(1)`).
pub const EXIT_UNFINISHED: i32 = crate::exit::TIMED_OUT;

impl Outcome {
    /// - tree not confirmed gone: 124;
    /// - a signal S stopped the supervisor: die by S;
    /// - the turn timeout stopped it: 124 ([`crate::exit::TIMED_OUT`], as `timeout(1)` and
    ///   `sheepdog wait` for a timed-out entry);
    /// - owner death or stdin EOF stopped it: the provider's code, or 128 + the signal that
    ///   ended it;
    /// - the provider exited on its own: its code, or die by its signal.
    ///
    /// As PID 1 of a PID namespace a process cannot die by a signal it raises at itself (the
    /// kernel drops it), so there "die by S" is exit code 128 + S: what the process really exits
    /// with, and what `exited`'s `status` reports.
    pub fn exit(&self) -> Exit {
        match self.exit_by_signal() {
            Exit::Signal(s) if self.as_init => Exit::Code(crate::exit::by_signal(s.as_raw())),
            exit => exit,
        }
    }

    /// The turn timeout ran the stop and the tree is confirmed gone (status 124 by [`Outcome::exit`]).
    pub fn timed_out(&self) -> bool {
        self.tree_gone && self.provider.is_some() && self.trigger == Some(Trigger::Timeout)
    }

    fn exit_by_signal(&self) -> Exit {
        // What a kept tree left is alive by design (`Outcome::kept`): the provider's own status.
        let Some(status) = self.provider.filter(|_| self.tree_gone || self.kept.is_some()) else {
            return Exit::Code(EXIT_UNFINISHED);
        };
        match (self.trigger, status) {
            (Some(Trigger::Signal(s)), _) => Exit::Signal(s),
            (Some(Trigger::Timeout), _) => Exit::Code(crate::exit::TIMED_OUT),
            (_, WaitStatus::Exited(code)) => Exit::Code(code),
            (None | Some(Trigger::ProviderExited), WaitStatus::Signaled(s, _)) => Exit::Signal(s),
            (Some(_), WaitStatus::Signaled(s, _)) => Exit::Code(crate::exit::by_signal(s.as_raw())),
        }
    }
}

/// True if this process is PID 1 of its PID namespace: it cannot die by a signal it raises at
/// itself. (A keeper asks its [`crate::keeper::Link::front_is_init`].)
fn is_init() -> bool {
    process::getpid().as_raw() == 1
}

/// The supervisor's end when its keeper finished (or never spawned): it exits as the keeper
/// did, so the host sees the statuses docs/reference.md gives for `sheepdog run`.
fn exit_as(keeper: Option<WaitStatus>) -> ! {
    match keeper {
        Some(WaitStatus::Exited(code)) => std::process::exit(code),
        Some(WaitStatus::Signaled(s, _)) if is_init() => std::process::exit(crate::exit::by_signal(s.as_raw())),
        Some(WaitStatus::Signaled(s, _)) => crate::sys::signal::die_by(s),
        None => std::process::exit(crate::exit::USAGE),
    }
}

/// Why a supervisor could not do its job. Every variant is reported before the provider ran,
/// except `Io` from the loop itself.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("owner {owner} is not the parent of sheepdog (the parent is {parent})")]
    OwnerNotParent { owner: Pid, parent: i32 },
    #[error("owner {0} is not running")]
    OwnerGone(Pid),
    /// The stdin relay was asked for with a terminal as stdin: reading it from the keeper's
    /// background group would stop the keeper (SIGTTIN), and the command needs the terminal.
    #[error("stdin is a terminal: the command reads it directly, so it cannot be relayed")]
    RelayTerminal,
    /// Closing stdin on the owner's death needs the relay: sheepdog can close only a stdin it
    /// holds.
    #[error("closing the command's stdin when the owner dies needs the stdin relay")]
    CloseStdinWithoutRelay,
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    /// The cgroup tier or a limit was demanded and is unavailable here.
    #[error(transparent)]
    Containment(#[from] cgroup::Refused),
    #[error("unable to {op}: {source}")]
    Io {
        op: &'static str,
        #[source]
        source: io::Error,
    },
    /// The loop's `poll` failed: CMD was already running.
    #[error("unable to poll: {0}")]
    Poll(#[source] io::Error),
}

impl Error {
    /// 126/127 for a command that could not start, 125 for everything else.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Spawn(e) => e.exit_code(),
            _ => crate::exit::USAGE,
        }
    }

    /// True when CMD never ran and the refusal is sheepdog's own (its owner, relays, tier or a
    /// fork that failed), not CMD's: a command not found or not executable (127, 126) is CMD's
    /// own failure, and a failed `poll` comes after CMD started. `run --fail-open` runs CMD
    /// unsupervised in its place exactly then.
    pub fn before_command(&self) -> bool {
        match self {
            Error::Spawn(e) => e.exit_code() == crate::exit::USAGE,
            Error::Poll(_) => false,
            _ => true,
        }
    }
}

/// `run --fail-open`'s other road: CMD in this process's place (`execvp`), unsupervised, where
/// [`Error::before_command`] said sheepdog cannot supervise it. Returns only if CMD could not be
/// run, as the error its spawn would give (127 not found, 126 not executable, ...).
pub fn exec_unsupervised(argv: &[OsString]) -> Error {
    use std::os::unix::process::CommandExt;
    let Some((program, args)) = argv.split_first() else {
        return SpawnError::classify(&OsString::new(), io::Error::from_raw_os_error(crate::sys::errno::ENOENT)).into();
    };
    SpawnError::classify(program, std::process::Command::new(program).args(args).exec()).into()
}

fn io_err(op: &'static str) -> impl FnOnce(io::Error) -> Error {
    move |source| Error::Io { op, source }
}

/// The owner being watched.
struct OwnerWatch {
    owner: Owner,
    /// `None` where pidfds are unavailable: then polled every [`OWNER_POLL`].
    pidfd: Option<PidFd>,
    start_time: Option<u64>,
}

impl OwnerWatch {
    /// Checks the owner is who it should be, opens its pidfd, and checks again: an owner that
    /// died between the check and the open is caught (its pid may even have been reused).
    fn open(owner: Owner) -> Result<OwnerWatch, Error> {
        let pid = match owner {
            Owner::Parent(p) | Owner::Process(p) => p,
        };
        let check = |start: Option<u64>| -> Result<Option<u64>, Error> {
            match owner {
                Owner::Parent(p) => {
                    let parent = process::getppid();
                    if parent != p.as_raw() {
                        return Err(if start.is_some() {
                            Error::OwnerGone(p)
                        } else {
                            Error::OwnerNotParent { owner: p, parent }
                        });
                    }
                    Ok(procfs::start_time(p).or(start).or(Some(0)))
                }
                Owner::Process(p) => {
                    let now =
                        if cfg!(target_os = "linux") { procfs::start_time(p) } else { process::exists(p).then_some(0) };
                    match (now, start) {
                        (None, _) => Err(Error::OwnerGone(p)),
                        (Some(a), Some(b)) if a != b => Err(Error::OwnerGone(p)),
                        (n, _) => Ok(n),
                    }
                }
            }
        };
        let start = check(None)?;
        let pidfd = PidFd::open(pid).ok();
        let start_time = check(start)?;
        Ok(OwnerWatch { owner, pidfd, start_time })
    }

    /// The watch of an owner recorded earlier as `pid` and its start time in clock ticks (a
    /// managed entry's `ownerPid`, `ownerStartTime`): `None` if it is no longer that process, or
    /// gone (with no start time recorded, whoever has the pid now counts as the owner).
    fn recorded(pid: Pid, start_time: Option<u64>) -> Option<OwnerWatch> {
        let pidfd = PidFd::open(pid).ok();
        let now = if cfg!(target_os = "linux") { procfs::start_time(pid) } else { process::exists(pid).then_some(0) };
        match (now, start_time) {
            (None, _) => None,
            (Some(a), Some(b)) if a != b => None,
            (now, _) => Some(OwnerWatch { owner: Owner::Process(pid), pidfd, start_time: now }),
        }
    }

    /// Polling fallback: true if the owner is gone.
    fn gone_by_poll(&self) -> bool {
        match self.owner {
            Owner::Parent(p) => process::getppid() != p.as_raw(),
            Owner::Process(p) => {
                if cfg!(target_os = "linux") {
                    procfs::start_time(p) != self.start_time
                } else {
                    !process::exists(p)
                }
            }
        }
    }
}

/// What the supervisor holds before the keeper split: the owner's watch, the relays, the
/// containment, the children that are not the provider's and the terminal's home. Made by
/// [`Setup::fresh`] (the checks, then what a first start makes) or by [`Setup::adopt`] (what a
/// supervisor that re-executed itself after its keeper's SIGKILL takes over).
struct Setup {
    owner: Option<OwnerWatch>,
    /// The stdin relay ([`StdinRelay`]), with `--stdin relay`.
    relay: Option<StdinRelay>,
    /// The output relay ([`OutputRelay`]), only when leftovers are kept.
    output: Option<OutputRelay>,
    containment: cgroup::Containment,
    /// Children this process already has (a shell that exec'd sheepdog may have left a job
    /// behind): not the provider's, reaped when they exit, never stopped.
    foreign: Vec<Member>,
    /// The group to give the terminal's foreground back to once the tree is gone, if the
    /// provider takes it.
    terminal_home: Option<Pgid>,
}

impl Setup {
    /// A first start, in this order: the owner check (the provider never runs for a wrong or
    /// dead owner), the relays (made before the keeper: the process that runs the loop holds
    /// their other ends alone; the stdin relay's read end and the output relay's write ends go
    /// into `opts.spawn`), the subreaper bit, then the containment probe (the tree's cgroup
    /// exists and is recorded, [`Happened::Contained`], before the command runs).
    ///
    /// Errors: [`Error::OwnerNotParent`], [`Error::OwnerGone`], [`Error::CloseStdinWithoutRelay`],
    /// [`Error::RelayTerminal`], [`Error::Containment`], [`Error::Io`]; nothing was spawned.
    fn fresh(opts: &mut Options, hooks: &mut dyn Hooks) -> Result<Setup, Error> {
        let owner = opts.owner.map(OwnerWatch::open).transpose()?;
        let mut relay = None;
        if opts.on_owner_death == OnOwnerDeath::CloseStdin && opts.stdin != StdinMode::Relay {
            return Err(Error::CloseStdinWithoutRelay);
        }
        if opts.stdin == StdinMode::Relay {
            if process::fd_kind(0) == FdKind::Tty {
                return Err(Error::RelayTerminal);
            }
            let (r, read_end) = StdinRelay::new().map_err(io_err("make the stdin relay"))?;
            opts.spawn.stdin = Some(read_end);
            relay = Some(r);
        }
        // A plain `run` gives the command the host's own fds.
        let mut output = None;
        if opts.keep_leftovers
            && let Some((o, ends)) = OutputRelay::new().map_err(io_err("make the output relay"))?
        {
            opts.spawn.stdout = ends.stdout;
            opts.spawn.stderr = ends.stderr;
            output = Some(o);
        }
        #[cfg(target_os = "linux")]
        process::set_child_subreaper().map_err(io_err("become a child subreaper"))?;
        let containment = cgroup::probe(&opts.containment)?;
        hooks.on(&Happened::Contained(&containment.record()));
        Ok(Setup {
            owner,
            relay,
            output,
            containment,
            foreign: crate::tree::foreign_children(),
            // Decided here (this process's group is the foreground, as tini checks): the keeper
            // moves to a group of its own before the spawn.
            terminal_home: process::owns_terminal_foreground().then(process::getpgrp),
        })
    }

    /// A take-over after the keeper's SIGKILL (`adoption`): an owner that is gone stops no
    /// take-over (the stop runs all the same), no relay is made (the stdin relay died with the
    /// keeper, so the provider has read its EOF), no cgroup is made (the tree's is opened), and
    /// the children from before the split and the terminal's home are the keeper's record.
    ///
    /// Errors: [`Error::Io`] if this process cannot become a subreaper.
    fn adopt(adoption: &crate::keeper::Adoption, owner: Option<Owner>) -> Result<Setup, Error> {
        // The relay kept them blocked across `execve`; the handlers are installed now.
        #[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
        crate::sys::keep::unblock_all();
        let owner = owner.and_then(|o| OwnerWatch::open(o).ok());
        #[cfg(target_os = "linux")]
        process::set_child_subreaper().map_err(io_err("become a child subreaper"))?;
        let containment = cgroup::Containment {
            tier: if adoption.cgroup.is_some() { cgroup::Tier::Cgroup } else { cgroup::Tier::fallback() },
            reason: None,
            // Not held again (`Cgroup::hold`): this process is the one the cgroup's name
            // identifies, alive, and `reap` leaves the cgroup of a live supervisor alone.
            cgroup: adoption.cgroup.as_ref().and_then(|(path, inode)| cgroup::Cgroup::open(path, Some(*inode)).ok()),
        };
        let foreign = adoption
            .foreign
            .iter()
            .filter_map(|p| procfs::stat(*p).ok())
            .filter(|s| !s.is_zombie())
            .map(|s| Member::from_stat(&s))
            .collect();
        Ok(Setup { owner, relay: None, output: None, containment, foreign, terminal_home: adoption.terminal_home })
    }

    /// The keeper (crate::keeper): from here on two processes watch each other, and the one
    /// left after the other's SIGKILL runs the stop. Returns, in the keeper, its end of the
    /// chain (held until its last act). The supervisor in front relays signals until the keeper
    /// is done and then exits as it did; it returns only if the keeper was killed, with the
    /// provider to take over ([`take_over`]).
    ///
    /// Errors: [`Error::Io`] if the keeper cannot be forked.
    fn split(&mut self, signals: &SignalPipe, opts: &mut Options, hooks: &mut dyn Hooks) -> Result<Split, Error> {
        let handover = crate::keeper::Handover {
            close: opts
                .spawn
                .fds()
                .chain(self.relay.as_ref().and_then(StdinRelay::write_fd))
                .chain(self.output.iter().flat_map(OutputRelay::read_fds))
                .chain(hooks.keeper_only_fds())
                .collect(),
            inherit: hooks.adoptable_fds(),
            foreign: self.foreign.iter().map(|m| m.pid).collect(),
            cgroup: self.containment.cgroup.as_ref().map(|c| (c.path().to_path_buf(), c.inode())),
            terminal_home: self.terminal_home,
        };
        match crate::keeper::split(signals, &handled_signals(), handover).map_err(io_err("make the keeper"))? {
            Role::Keeper(l) => {
                // The keeper's children are its own: none from before.
                self.foreign = Vec::new();
                // Its parent is the supervisor, so the owner is watched as any process.
                if let Some(o) = self.owner.as_mut() {
                    o.owner = match o.owner {
                        Owner::Parent(p) | Owner::Process(p) => Owner::Process(p),
                    };
                }
                Ok(Split { link: Some(l), adopted: None, resumed: None })
            }
            Role::Supervisor(mut front) => {
                // The provider's stdio (a managed entry's log pipes) is the keeper's: a copy held
                // here would keep the pipes from ever reaching EOF.
                drop(std::mem::take(&mut opts.spawn));
                self.relay = None;
                self.output = None;
                hooks.handed_to_keeper();
                let report = front.relay(signals);
                Ok(Split { link: None, adopted: take_over(&report, &self.foreign), resumed: report.stopping })
            }
        }
    }

    /// Spawns the provider into the tree's cgroup (falling back to the subreaper tier if it
    /// could not join and the tier was not demanded, told as [`Happened::Contained`]), or takes
    /// over the one `adopted` names (the keeper was killed: its children, the provider first,
    /// are re-parented to this process, a subreaper, so the same tree is below it). Returns the
    /// provider, its wait status if the keeper reaped it, and the tree.
    ///
    /// Errors: [`Error::Spawn`] (told first as [`Happened::SpawnFailed`]; the cgroup is removed).
    fn start(
        &mut self,
        opts: &mut Options,
        split: &Split,
        hooks: &mut dyn Hooks,
    ) -> Result<(Spawned, Option<WaitStatus>, Tree), Error> {
        let mut foreign = std::mem::take(&mut self.foreign);
        if let Some((spawned, provider)) = split.adopted {
            // A cleanup the killed keeper was running is the entry's, not the tree's.
            foreign.extend(hooks.keepers_cleanup());
            let tree = Tree::supervised_except(spawned.pgid, foreign).contained(self.containment.cgroup.take());
            if provider.is_some() {
                tree.leader_reaped();
            }
            hooks.on(&Happened::Adopted(spawned));
            return Ok((spawned, provider, tree));
        }
        let join = self.containment.cgroup.as_ref().and_then(|cg| cg.join_fds()).map(|fds| spawn::CgroupJoin {
            fds,
            fallback: opts.containment.mode == cgroup::Mode::Auto && !opts.containment.limits_asked(),
        });
        let spawn_opts = std::mem::take(&mut opts.spawn);
        let spawned = match spawn::spawn_joined(&opts.argv, spawn_opts, join, self.terminal_home.is_some()) {
            Ok((spawned, None)) => spawned,
            Ok((spawned, Some(why))) => {
                let path = self.containment.cgroup.as_ref().map(|c| c.path().display().to_string()).unwrap_or_default();
                if let Some(cg) = self.containment.cgroup.take() {
                    let _ = cg.remove();
                }
                self.containment =
                    cgroup::Containment::fallback(format!("unable to move the command into cgroup {path}: {why}"));
                hooks.on(&Happened::Contained(&self.containment.record()));
                spawned
            }
            Err(e) => {
                if let Some(cg) = &self.containment.cgroup {
                    let _ = cg.remove();
                }
                hooks.on(&Happened::SpawnFailed {
                    program: opts.argv.first().map(OsString::as_os_str).unwrap_or_default(),
                    error: &e,
                });
                return Err(e.into());
            }
        };
        if let Some(l) = &split.link {
            l.tell(Message::Spawned(spawned));
        }
        hooks.on(&Happened::Spawned { spawned, policy: &opts.policy });
        let tree = Tree::supervised_except(spawned.pgid, foreign).contained(self.containment.cgroup.take());
        Ok((spawned, None, tree))
    }
}

/// Who goes on after the keeper split ([`Setup::split`]).
struct Split {
    /// In the keeper: its end of the chain, held until its last act.
    link: Option<crate::keeper::Link>,
    /// The keeper was killed (or, in an adopting image, had been): the provider to take over,
    /// and its wait status if the keeper reaped it.
    adopted: Option<(Spawned, Option<WaitStatus>)>,
    /// With `adopted`: the stop the killed keeper had begun, to go on with
    /// ([`crate::keeper::Report::stopping`]).
    resumed: Option<(Trigger, u64)>,
}

/// Runs one provider under supervision until it and everything it started are gone, then
/// until the front end's record and cleanup are done ([`Hooks::record_outcome`]).
///
/// Order matters and is the point: signal handlers first (a stop that lands the instant after
/// the spawn is still seen), then the owner check (the provider never runs for a wrong or dead
/// owner), then the subreaper bit, then the containment probe (the tree's cgroup exists and is
/// recorded before the command runs), then the spawn.
///
/// Call it from a single-threaded process, as the `sheepdog` binary is: the keeper is a `fork`
/// that goes on running Rust code (a lock another thread held at the fork would stay held in
/// it), it reaps every child of the process (`waitpid(-1)`), and it owns the process's signal
/// handlers.
///
/// Errors: [`Error`]; on error nothing was spawned.
pub fn supervise(opts: Options, hooks: &mut dyn Hooks) -> Result<Outcome, Error> {
    let signals = install_signals()?;
    supervise_with(&signals, opts, hooks)
}

/// Installs the supervisor's signal handlers (SIGTERM, SIGINT, SIGHUP, SIGCHLD and the
/// forwarded ones) and returns the self-pipe its loop polls. Errors: [`Error::Io`].
pub fn install_signals() -> Result<SignalPipe, Error> {
    SignalPipe::install(&handled_signals()).map_err(io_err("install signal handlers"))
}

/// The signals a supervisor has handlers for: SIGTERM, SIGINT, SIGHUP, SIGCHLD and
/// [`Signal::FORWARDED`].
fn handled_signals() -> Vec<Signal> {
    let mut handled = vec![Signal::TERM, Signal::INT, Signal::HUP, Signal::CHLD];
    handled.extend(Signal::FORWARDED);
    handled
}

/// [`supervise`] with its signal handlers installed: the one life, in order. The setup
/// ([`Setup::fresh`] or [`Setup::adopt`], [`Setup::split`], [`Setup::start`]), then the one
/// loop over [`Life`]'s states until [`Life::Done`].
fn supervise_with(signals: &SignalPipe, mut opts: Options, hooks: &mut dyn Hooks) -> Result<Outcome, Error> {
    if let Some(tag) = opts.tag.take() {
        opts.spawn.env.push((crate::tree::TAG_ENV.into(), tag.into()));
    }
    // A supervisor that re-executed itself after its keeper's SIGKILL takes the tree over: no
    // owner check can stop it, no cgroup is made, nothing is spawned. Taken once, here or by
    // the front end before (`Options::adoption`), and held as a value from then on.
    let adoption = opts.adoption.take().or_else(crate::keeper::take_adoption);
    let adoption = adoption.as_ref();
    let mut setup = match adoption {
        None => Setup::fresh(&mut opts, hooks)?,
        Some(a) => Setup::adopt(a, opts.owner)?,
    };
    let split = match adoption {
        Some(a) => Split { link: None, adopted: take_over(&a.report, &setup.foreign), resumed: a.report.stopping },
        None if crate::keeper::wanted() => setup.split(signals, &mut opts, hooks)?,
        None => Split { link: None, adopted: None, resumed: None },
    };
    let (spawned, provider, tree) = setup.start(&mut opts, &split, hooks)?;
    let Split { link, adopted, resumed } = split;
    let Setup { owner, relay, output, terminal_home, .. } = setup;
    let started = Instant::now();
    let mut sup = Supervisor {
        signals,
        on_owner_death: opts.on_owner_death,
        on_stdin_eof: opts.on_stdin_eof,
        keep_leftovers: opts.keep_leftovers,
        spawned,
        provider,
        tree,
        machine: StopMachine::new(opts.policy).after_provider_exit(opts.after_provider_exit),
        supervisor_fd: link.as_ref().map(crate::keeper::Link::supervisor_gone_fd),
        link,
        owner,
        relay,
        output,
        watch_stdin: false,
        stdin_at_eof: false,
        terminal: None,
        timeout_at: opts.timeout.map(|d| started + d),
        scan_every: MEMBER_SCAN_MIN,
        next_scan: hooks.wants_members().then_some(started + MEMBER_SCAN_MIN),
        hooks,
        drain: None,
        backlog: false,
        kept: None,
        outcome: None,
        told_the_stop: false,
        settle_until: None,
    };
    sup.first_watches(adopted.is_some(), resumed);
    let mut life = Life::Running;
    let outcome = loop {
        life = match life {
            // Running and stopping: one wake of the tree's `poll`, its steps in order, and
            // `Life::next` at its end.
            Life::Running | Life::Draining | Life::Stopping => {
                let now = Instant::now();
                let (fds, slots) = sup.wait(now)?;
                sup.supervisor_death(&fds, &slots);
                sup.signals();
                let reaped = sup.reap(now);
                sup.owner(&fds, &slots);
                sup.ready(&fds, slots);
                let now = Instant::now();
                sup.scan_and_timeout(now, reaped > 0);
                let life = sup.step(now, reaped);
                sup.tell_the_stop(now);
                life
            }
            // The tree's ends: the last zombies, the relays, the cgroup, the terminal; the outcome.
            Life::HandingOn | Life::Gone | Life::Unfinished => sup.finish(terminal_home),
            Life::Recording => sup.record(),
            // The same `wait` as the tree's wakes, over what is still watched; a failed `poll`
            // ends the lingering (the outcome is recorded already).
            Life::Lingering => match sup.wait(Instant::now()) {
                Ok((fds, slots)) => sup.linger(&fds, &slots),
                Err(_) => Life::Done,
            },
            Life::Settling => sup.settle(),
            Life::CleaningUp(cleanup) => {
                sup.hooks.clean_up(cleanup);
                Life::Done
            }
            // Every road to `Done` passes `finish`; were one not to, the tree is finished (and
            // recorded) first.
            Life::Done => match sup.outcome.take() {
                Some(outcome) => break outcome,
                None => sup.finish(terminal_home),
            },
        };
    };
    Ok(outcome)
}

/// The supervision loop's state, held from the spawn (or take-over) to the end. Its methods are
/// the steps of one wake of the tree, in the order [`supervise_with`] calls them, then the
/// states after the tree's, in the loop's order.
struct Supervisor<'a> {
    signals: &'a SignalPipe,
    hooks: &'a mut dyn Hooks,
    on_owner_death: OnOwnerDeath,
    on_stdin_eof: OnStdinEof,
    keep_leftovers: bool,
    spawned: Spawned,
    /// The provider's wait status, once reaped (here, or by the keeper before a take-over).
    provider: Option<WaitStatus>,
    tree: Tree,
    machine: StopMachine,
    /// In the keeper: its end of the chain, held until its last act.
    link: Option<crate::keeper::Link>,
    owner: Option<OwnerWatch>,
    relay: Option<StdinRelay>,
    output: Option<OutputRelay>,
    /// Stdin is watched for its hang-up (`--on-stdin-eof stop` without the relay).
    watch_stdin: bool,
    /// With the relay, the relay reads stdin and reports its EOF.
    stdin_at_eof: bool,
    /// The terminal watched for its hang-up.
    terminal: Option<RawFd>,
    /// In the keeper: the supervisor's pipe, which hangs up when the supervisor is killed.
    supervisor_fd: Option<RawFd>,
    timeout_at: Option<Instant>,
    scan_every: Duration,
    next_scan: Option<Instant>,
    /// After the provider's own exit: the leftovers draining its output.
    drain: Option<Drain>,
    /// The last wake left children to reap: the next `poll` does not block.
    backlog: bool,
    /// What [`Life::HandingOn`] handed on.
    kept: Option<Kept>,
    /// How the tree ended, from [`Supervisor::finish`] on: what [`Life::Recording`] records and
    /// the loop returns at [`Life::Done`].
    outcome: Option<Outcome>,
    /// In a keeper: the supervisor in front was told of the stop ([`Supervisor::tell_the_stop`]).
    told_the_stop: bool,
    /// [`Life::Settling`]: when [`Hooks::settled`] asked to be asked again at the latest.
    settle_until: Option<Instant>,
}

/// Where each watched fd sits in one wake's poll set (index 0 is the signal self-pipe).
struct Slots {
    owner: Option<usize>,
    stdin: Option<usize>,
    terminal: Option<usize>,
    cgroup: Option<usize>,
    supervisor: Option<usize>,
    relay: crate::relay::Slots,
    output: crate::relay::OutputSlots,
    /// The first of [`Hooks::fds`]; they run to the end.
    extra_from: usize,
}

/// Adds `fd` to the poll set; returns its slot.
fn slot(fds: &mut Vec<PollFd>, fd: RawFd, events: i16) -> usize {
    fds.push(PollFd::new(fd, events));
    fds.len() - 1
}

impl Supervisor<'_> {
    /// What is watched from the start: a take-over (`adopted`) runs the stop at once; stdin is
    /// watched for EOF (`--on-stdin-eof stop`, or the stop begins at once for a stdin that is
    /// already at EOF); the terminal is watched for its hang-up.
    fn first_watches(&mut self, adopted: bool, resumed: Option<(Trigger, u64)>) {
        match resumed {
            // The killed keeper's stop goes on: its trigger (a `run` stopped by SIGTERM still
            // dies by SIGTERM), and what was left of its grace, not a second whole one.
            Some((trigger, until)) if adopted => {
                let left = Duration::from_millis(until.saturating_sub(process::monotonic_ms()));
                resume(&mut self.machine, trigger, self.hooks, left);
            }
            _ if adopted => begin(&mut self.machine, Trigger::SupervisorKilled, &self.tree, self.hooks),
            _ => {}
        }
        // With the relay, the relay reads stdin and reports its EOF.
        if self.on_stdin_eof == OnStdinEof::Stop && !adopted && self.relay.is_none() {
            match process::fd_kind(0) {
                FdKind::Fifo | FdKind::Socket | FdKind::Tty => self.watch_stdin = true,
                FdKind::Closed | FdKind::Other => {
                    begin(&mut self.machine, Trigger::StdinEof, &self.tree, self.hooks);
                }
            }
        }
        // The terminal sheepdog was started on, watched for its hangup (the pty master closed,
        // the terminal emulator killed): its foreground, the provider, gets the kernel's SIGHUP
        // and may trap it, and nothing else tells sheepdog (claude-code#21287). Stdin that is
        // the terminal and already watched for EOF (`--on-stdin-eof stop`) is not watched twice.
        let watch_stdin = self.watch_stdin;
        self.terminal = (!adopted)
            .then(|| (0..3).find(|fd| process::fd_kind(*fd) == FdKind::Tty))
            .flatten()
            .filter(|fd| !(watch_stdin && *fd == 0));
    }

    /// In a keeper, once its stop sent SIGTERM: the supervisor in front is told the stop's
    /// trigger and when its grace ends ([`crate::keeper::Link::tell_stopping`]), once, so that
    /// if this keeper is SIGKILLed the supervisor that adopts the tree goes on with this stop
    /// ([`resume`]) instead of beginning a second one, with a whole grace and no trigger.
    fn tell_the_stop(&mut self, now: Instant) {
        let (Some(link), false) = (&self.link, self.told_the_stop) else { return };
        let until = match self.machine.phase() {
            Phase::Terminating { until } => until,
            Phase::Killing { .. } => now,
            _ => return,
        };
        if let Some(trigger) = self.machine.trigger() {
            link.tell_stopping(trigger, until);
        }
        self.told_the_stop = true;
    }

    /// Blocks in the one `poll` until something is ready or [`Supervisor::deadline`] passes,
    /// in every state that waits: the tree's wakes, [`Life::Lingering`] and [`Life::Settling`].
    /// It watches what is still there to watch: after [`Supervisor::finish`] closed the tree's
    /// watches, the signal self-pipe, the owner's pidfd and, in a keeper, the supervisor's pipe
    /// (the [`Hooks::fds`], the tree's, no longer). Returns the poll set and where each watched
    /// fd sits in it. Errors: [`Error::Poll`].
    fn wait(&mut self, now: Instant) -> Result<(Vec<PollFd>, Slots), Error> {
        let mut fds = vec![PollFd::new(self.signals.as_raw_fd(), POLL_IN)];
        let owner =
            self.owner.as_ref().and_then(|o| o.pidfd.as_ref()).map(|fd| slot(&mut fds, fd.as_raw_fd(), POLL_IN));
        let stdin = self.watch_stdin.then(|| slot(&mut fds, 0, POLL_HUP_ONLY));
        // No events asked: a terminal reports only its hangup, never being in the background.
        let terminal = self.terminal.map(|fd| slot(&mut fds, fd, 0));
        // In the cgroup tier, `populated 0` wakes the loop as soon as the last member exits.
        let cgroup = self.tree.cgroup().map(|cg| slot(&mut fds, cg.events_fd(), POLL_PRI));
        let supervisor = self.supervisor_fd.map(|fd| slot(&mut fds, fd, POLL_IN));
        let relay = self.relay.as_ref().map(|r| r.poll_fds(&mut fds)).unwrap_or_default();
        let output = self.output.as_ref().map(|o| o.poll_fds(&mut fds)).unwrap_or_default();
        let extra_from = fds.len();
        if self.outcome.is_none() {
            fds.extend(self.hooks.fds().into_iter().map(|fd| PollFd::new(fd, POLL_IN)));
        }
        let deadline = self.deadline(now);
        process::poll(&mut fds, deadline.map(|d| d.saturating_duration_since(now))).map_err(Error::Poll)?;
        Ok((fds, Slots { owner, stdin, terminal, cgroup, supervisor, relay, output, extra_from }))
    }

    /// When the loop must wake even if nothing happens: the stop's next deadline; at once with
    /// children left to reap; while no stop runs, the turn timeout, the next look at the
    /// members and the drain window's end; the owner's next look without a pidfd; during a
    /// stop in the cgroup tier, the next look at "all gone" ([`CGROUP_RECHECK`]); while
    /// settling, the bound [`Hooks::settled`] gave. (After the tree's part the stop machine has
    /// no deadline and no stop runs: the turn timeout left is lingering's.)
    fn deadline(&self, now: Instant) -> Option<Instant> {
        let mut deadline = earliest(self.machine.deadline(now), self.settle_until);
        if self.backlog {
            deadline = Some(now);
        }
        if !self.machine.stopping() {
            deadline = earliest(earliest(deadline, self.timeout_at), self.next_scan);
            deadline = earliest(deadline, self.drain.as_ref().map(Drain::deadline));
        }
        if self.owner.as_ref().is_some_and(|o| o.pidfd.is_none()) {
            deadline = earliest(deadline, Some(now + OWNER_POLL));
        }
        if self.machine.stopping() && self.tree.cgroup().is_some() {
            deadline = earliest(deadline, Some(now + CGROUP_RECHECK));
        }
        deadline
    }

    /// Before the signals: a keeper whose supervisor died in a stopped process group is sent
    /// SIGHUP and SIGCONT by the kernel (the group became orphaned), and the stop it then runs
    /// is for its supervisor's death, as recorded (issue 34, item 9).
    fn supervisor_death(&mut self, fds: &[PollFd], slots: &Slots) {
        if slots.supervisor.is_some_and(|slot| fds[slot].ready()) {
            self.supervisor_fd = None;
            begin(&mut self.machine, Trigger::SupervisorKilled, &self.tree, self.hooks);
        }
    }

    /// The signals received: the forwarded ones go to the tree, SIGTERM, SIGINT and SIGHUP
    /// begin the stop (SIGCHLD only wakes: every wake reaps).
    fn signals(&mut self) {
        for sig in self.signals.drain() {
            if Signal::FORWARDED.contains(&sig) {
                // Not a stop: passed on, and the supervisor lives on with its tree.
                self.tree.forward(sig);
            } else if sig != Signal::CHLD {
                // A signal's EINTR leaves this wake's poll results unread: the supervisor's death
                // that came with it (the kernel's SIGHUP to an orphaned group) is looked at now.
                let trigger = match self.supervisor_fd {
                    Some(fd) if gone(fd) => Trigger::SupervisorKilled,
                    _ => Trigger::Signal(sig),
                };
                // `sheepdog stop --term-grace`: the request's one-off grace, in ms, rides in the
                // signal's value (nothing is written to the entry for this process to read back).
                // Anyone may queue a value with a signal: held to the longest grace `stop`
                // accepts, so none can make a stop that never escalates.
                let one_off =
                    self.signals.take_value(sig).map(|ms| Duration::from_millis(ms).min(crate::duration::MAX));
                begin_with(&mut self.machine, trigger, &self.tree, self.hooks, one_off);
            }
        }
    }

    /// Reaps children, at most [`REAP_BATCH`] and for at most [`REAP_SLICE`] (never past the
    /// stop's next deadline, from the wake's `now`): the provider's status is kept (and told to
    /// the supervisor in front, in a keeper), any other child's is told. Returns how many.
    fn reap(&mut self, now: Instant) -> usize {
        let mut reaped = 0;
        let reap_until = earliest(Some(Instant::now() + REAP_SLICE), self.machine.deadline(now));
        let mut cut = false;
        while !cut
            && reaped < REAP_BATCH
            && let Some((pid, status)) = process::reap_any()
        {
            reaped += 1;
            // The clock is read every 16 reaps (a vDSO call, but not free at this rate).
            if reaped % 16 == 0 && reap_until.is_some_and(|t| Instant::now() >= t) {
                cut = true;
            }
            if pid == self.spawned.pid {
                self.provider = Some(status);
                self.tree.leader_reaped();
                if let Some(l) = &self.link {
                    l.tell(Message::Provider(status));
                }
            } else {
                self.hooks.on(&Happened::Reaped { pid, status });
            }
        }
        self.backlog = cut || reaped == REAP_BATCH;
        reaped
    }

    /// The owner's death (its pidfd ready, or the look without one) begins the stop, with the
    /// stdin grace first under `--on-owner-death close-stdin`.
    fn owner(&mut self, fds: &[PollFd], slots: &Slots) {
        let owner_died = match (&self.owner, slots.owner) {
            (Some(_), Some(slot)) => fds[slot].ready(),
            (Some(o), None) => o.gone_by_poll(),
            (None, _) => false,
        };
        if owner_died {
            self.owner = None;
            if self.on_owner_death == OnOwnerDeath::CloseStdin {
                // Orca's `stdin-end` close: EOF first (the relay finishes in `step`, as for every
                // stop), the stdin grace, then the one stop.
                begin_with_stdin_grace(&mut self.machine, Trigger::OwnerDied, self.hooks);
            } else {
                begin(&mut self.machine, Trigger::OwnerDied, &self.tree, self.hooks);
            }
        }
    }

    /// The other fds that are ready: the cgroup's events (re-armed), stdin's and the terminal's
    /// hang-ups (a stop), the relays (serviced; the stdin relay's EOF may stop) and the front
    /// end's own fds ([`Hooks::ready`]).
    fn ready(&mut self, fds: &[PollFd], slots: Slots) {
        if let (Some(slot), Some(cg)) = (slots.cgroup, self.tree.cgroup())
            && fds[slot].ready()
        {
            // Re-arms POLLPRI; "all gone" itself is re-checked in `step`, as after every wake.
            let _ = cg.populated();
        }
        if slots.stdin.is_some_and(|slot| fds[slot].hung_up()) {
            self.watch_stdin = false;
            begin(&mut self.machine, Trigger::StdinEof, &self.tree, self.hooks);
        }
        if slots.terminal.is_some_and(|slot| fds[slot].hung_up()) {
            // As a SIGHUP to sheepdog: the terminal's hangup is the signal's reason.
            self.terminal = None;
            begin(&mut self.machine, Trigger::Signal(Signal::HUP), &self.tree, self.hooks);
        }
        if let Some(r) = self.relay.as_mut() {
            if r.service(fds, slots.relay) == Seen::SourceEof {
                self.stdin_at_eof = true;
                if self.on_stdin_eof == OnStdinEof::Stop {
                    begin(&mut self.machine, Trigger::StdinEof, &self.tree, self.hooks);
                }
            }
            if r.closed() && !self.stdin_at_eof && !self.machine.stopping() {
                // The provider closed its stdin (EPIPE): the host's EOF is watched as without
                // the relay.
                self.relay = None;
                self.watch_stdin = self.on_stdin_eof == OnStdinEof::Stop;
            }
        }
        if let Some(o) = self.output.as_mut() {
            o.service(fds, &slots.output);
        }
        for p in &fds[slots.extra_from..] {
            if p.ready() {
                self.hooks.ready(p.fd);
            }
        }
    }

    /// While the provider runs: the descendants for [`Hooks::members`] when the look is due
    /// (or a child was reaped), and the turn timeout.
    fn scan_and_timeout(&mut self, now: Instant, reaped_any: bool) {
        if let Some(t) = self.next_scan
            && !self.machine.stopping()
            && self.provider.is_none()
            && (now >= t || reaped_any)
        {
            let news = self.hooks.members(&self.tree.live_descendants());
            self.scan_every =
                if reaped_any || news { MEMBER_SCAN_MIN } else { (self.scan_every * 2).min(MEMBER_SCAN_MAX) };
            self.next_scan = Some(now + self.scan_every);
        }
        if self.timeout_at.is_some_and(|t| now >= t) && !self.machine.stopping() {
            begin(&mut self.machine, Trigger::Timeout, &self.tree, self.hooks);
        }
    }

    /// The end of a wake: [`Life::next`] decides, and the loop acts on it (hands the leftovers
    /// on, waits, or steps the stop machine). Returns where the life is after it: the tree's part
    /// ends at [`Life::HandingOn`], [`Life::Gone`] and [`Life::Unfinished`].
    fn step(&mut self, now: Instant, reaped: usize) -> Life {
        // Exited on its own with a status: what it left is handed on, not stopped, and without
        // the drain window (a reader of its output is kept with the rest). A provider killed by
        // a signal was stopped from outside (an agent's tree kill), and what it left goes too.
        let mut look = TreeLook { tree: &self.tree, now, reaped, drain: &mut self.drain, members: Vec::new() };
        let life = Life::next(self.machine.phase(), self.provider, self.keep_leftovers, &mut look);
        let step = match life {
            Life::HandingOn => {
                let members = look.members;
                self.hand_on(members);
                return Life::HandingOn;
            }
            // Draining: not yet, a reader is still writing out what the provider printed. (The
            // states after the tree's are never `Life::next`'s.)
            Life::Running
            | Life::Draining
            | Life::Gone
            | Life::Unfinished
            | Life::Recording
            | Life::Lingering
            | Life::Settling
            | Life::CleaningUp(_)
            | Life::Done => None,
            Life::Stopping if self.provider.is_some() => {
                let was_running = !self.machine.stopping();
                if was_running && let Some(policy) = self.hooks.policy_for_stop(Trigger::ProviderExited) {
                    self.machine.set_policy(policy);
                }
                let step = self.machine.provider_exited(now, &self.tree);
                if was_running && self.machine.stopping() {
                    self.hooks
                        .on(&Happened::Stopping { trigger: Trigger::ProviderExited, policy: self.machine.policy() });
                }
                step
            }
            Life::Stopping => self.machine.advance(now, &self.tree, false),
        };
        if let Some(Step::Escalated { remaining }) = step {
            self.hooks.on(&Happened::Escalated { remaining });
        }
        if let Some(r) = self.relay.as_mut() {
            // Gone, the provider holds no stdin to drain; stopping, nothing more is relayed and
            // the provider reads what it was sent, then EOF.
            if self.provider.is_some() {
                r.abandon();
            } else if self.machine.stopping() {
                r.finish();
            }
        }
        match self.machine.phase() {
            Phase::Gone => Life::Gone,
            Phase::Unfinished => Life::Unfinished,
            _ => life,
        }
    }

    /// [`Life::HandingOn`]: the live `members`, oldest first, with the tree's cgroup and the
    /// output relay's read ends, become [`Outcome::kept`].
    fn hand_on(&mut self, mut members: Vec<Member>) {
        members.sort_by_key(|m| m.start_time);
        let cgroup = self.tree.cgroup().map(|c| (c.path().to_path_buf(), c.inode()));
        // All the command itself wrote is in the pipes now: the host gets it first, and what
        // the leftovers write from here on goes to the entry's log.
        let output = match self.output.take() {
            Some(mut o) => {
                o.drain_now();
                o.into_kept()
            }
            None => Vec::new(),
        };
        self.kept = Some(Kept { members, cgroup, pgid: self.spawned.pgid, output });
    }

    /// [`Life::HandingOn`], [`Life::Gone`], [`Life::Unfinished`]: the tree's part ends. The last
    /// zombies reaped, the output relay emptied, the tree's cgroup removed (not a kept one), the
    /// terminal given back to `terminal_home`, and what only the tree's watch needed closed (the
    /// relays, the owner's pidfd, the cgroup's fds): how it ended is the [`Outcome`], next
    /// recorded ([`Life::Recording`]).
    fn finish(&mut self, terminal_home: Option<Pgid>) -> Life {
        let (spawned, provider, machine) = (self.spawned, self.provider, &self.machine);
        // The tree's cgroup goes with the tree; a leftover is reported (and removed by `reap`).
        if machine.phase() == Phase::Gone {
            // Nothing of the tree is alive, so no more zombies come: reap them now rather than
            // leave thousands (after a fork storm) to whoever inherits them. Bounded all the
            // same, in case an inherited orphan that is not the tree's keeps forking.
            for _ in 0..REAP_BATCH * 64 {
                let Some((pid, status)) = process::reap_any() else { break };
                // Told, as every reaped child is: a killed keeper's cleanup `sh` may be one.
                self.hooks.on(&Happened::Reaped { pid, status });
            }
        }
        // The tree is gone (or past its kill wait): the relay copies out what it left in the pipes.
        if let Some(mut o) = self.output.take() {
            o.drain_now();
        }
        let kept = self.kept.take();
        // A tree handed on alive keeps its cgroup.
        let cgroup_left = kept.is_none() && self.tree.cgroup().is_some_and(|cg| cg.remove().is_err());
        if let Some(home) = terminal_home {
            // A script that ran `sheepdog run -- CMD` reads the terminal next: the foreground goes
            // back from the provider's (now empty) group, unless someone else already took it.
            process::give_terminal_back(spawned.pgid, home);
        }
        let left = if machine.phase() == Phase::Unfinished { self.tree.live() } else { Vec::new() };
        // Nothing below watches the tree or its stdin any more.
        self.tree.close_cgroup();
        self.relay = None;
        self.owner = None;
        self.drain = None;
        (self.watch_stdin, self.terminal, self.supervisor_fd) = (false, None, None);
        // The tree's timers too: the turn timeout that lingering waits for is set as it begins;
        // one left from the tree's life, passed, would make every later wake at once (a spin).
        (self.next_scan, self.backlog, self.timeout_at) = (None, false, None);
        self.outcome = Some(Outcome {
            spawned,
            provider,
            trigger: machine.trigger(),
            tree_gone: machine.phase() == Phase::Gone,
            escalated: machine.escalated(),
            cgroup_left,
            left,
            kept,
            as_init: is_init() || self.link.as_ref().is_some_and(crate::keeper::Link::front_is_init),
            keeper: self.link.take(),
        });
        Life::Recording
    }

    /// [`Life::Recording`]: the front end records the outcome ([`Hooks::record_outcome`]) and
    /// answers what is left to do ([`Life::recorded`]). A pending cleanup to watch for begins
    /// [`Life::Lingering`] at once ([`Supervisor::begin_lingering`]).
    // Never inlined, as the other states after the tree's: their locals would sit in the frame
    // under the loop for the supervisor's whole life (ARCHITECTURE.md, "Invariants").
    #[inline(never)]
    fn record(&mut self) -> Life {
        let Some(outcome) = &self.outcome else { return Life::Done };
        let pending = self.hooks.record_outcome(outcome);
        match (Life::recorded(&pending), pending) {
            (Life::Lingering, Pending::Trigger { owner, until }) => self.begin_lingering(owner, until),
            (next, _) => next,
        }
    }

    /// [`Life::Settling`]: the children this subreaper inherits are reaped and told
    /// ([`Happened::Reaped`]: the cleanup's `sh` among them), [`Hooks::settled`] decides, and
    /// if it is not done, one wake of [`Supervisor::wait`] (after the tree's part, the signal
    /// self-pipe: SIGCHLD), at most as long as it says. Reaped first and asked before any
    /// wait: a cleanup that ended, or never began, before the take-over is settled at once,
    /// with the status of its `sh` when there is one. A signal that asks for a stop finds
    /// nothing of the tree to stop and is let go: the cleanup has its own bound. A failed
    /// `poll` is a wake like any other.
    #[inline(never)]
    fn settle(&mut self) -> Life {
        while let Some((pid, status)) = process::reap_any() {
            self.hooks.on(&Happened::Reaped { pid, status });
        }
        let Some(left) = self.hooks.settled() else { return Life::Done };
        let now = Instant::now();
        self.settle_until = Some(now + left);
        let _ = self.wait(now);
        let _ = self.signals.drain();
        Life::Settling
    }

    /// Lingering begins: the watches of the tree's life are set to what is left to watch, the
    /// owner recorded as `owner` (pid, start time in clock ticks; identity-checked through a
    /// pidfd, as in the tree's life), the turn timeout's end `until` and, in a keeper, the
    /// supervisor's pipe. Then the first look, before any `poll`: an owner already gone, a
    /// cleanup no longer needed, a timeout already past.
    fn begin_lingering(&mut self, owner: Option<(Pid, Option<u64>)>, until: Option<Instant>) -> Life {
        self.owner = owner.and_then(|(pid, start_time)| OwnerWatch::recorded(pid, start_time));
        self.timeout_at = until;
        self.supervisor_fd =
            self.outcome.as_ref().and_then(|o| o.keeper.as_ref()).map(crate::keeper::Link::supervisor_gone_fd);
        let first = Lingered {
            owner_died: owner.is_some() && self.owner.is_none(),
            recheck: true,
            timed_out: until.is_some_and(|u| Instant::now() >= u),
            ..Lingered::default()
        };
        let hooks = &mut *self.hooks;
        Life::lingered(&first, &mut || hooks.still_needed())
    }

    /// [`Life::Lingering`], after one wake of [`Supervisor::wait`] (`fds`, `slots`): on the
    /// signal self-pipe, the owner's pidfd and, in a keeper, the supervisor's pipe, until the
    /// turn timeout's end (the owner looked at every [`OWNER_POLL`] without a pidfd). Children
    /// it still inherits are reaped.
    #[inline(never)]
    fn linger(&mut self, fds: &[PollFd], slots: &Slots) -> Life {
        let mut wake = Lingered::of_signals(&self.signals.drain());
        if wake.reap {
            while process::reap_any().is_some() {}
        }
        wake.supervisor_gone = slots.supervisor.is_some_and(|slot| fds[slot].ready());
        wake.owner_died = match (&self.owner, slots.owner) {
            (Some(_), Some(slot)) => fds[slot].ready(),
            (Some(o), None) => o.gone_by_poll(),
            (None, _) => false,
        };
        wake.timed_out = self.timeout_at.is_some_and(|u| Instant::now() >= u);
        let hooks = &mut *self.hooks;
        Life::lingered(&wake, &mut || hooks.still_needed())
    }
}

/// The drain window after the provider's own exit: the drainers found, and when to look again.
#[derive(Debug)]
struct Drain {
    /// When the look that found nothing is believed ([`DRAIN_SETTLE`]); `None` once it was.
    settle: Option<Instant>,
    until: Instant,
    found: Vec<Member>,
}

impl Drain {
    /// The window that opens at the provider's exit; none (nothing waited for) in a storm,
    /// when this wake reaped more than [`DRAIN_MAX_REAPED`] children: a look then costs what the
    /// stop needs its CPU for.
    fn new(now: Instant, tree: &Tree, reaped: usize) -> Drain {
        if reaped > DRAIN_MAX_REAPED {
            return Drain { settle: None, until: now, found: Vec::new() };
        }
        let found = look_for_drainers(tree);
        Drain { settle: Some(now + DRAIN_SETTLE), until: now + OUTPUT_DRAIN, found }
    }

    /// True while the leftovers' stop must wait: a drainer found is alive, or the settle has not
    /// passed. Looks again (once) at the settle's deadline.
    fn waiting(&mut self, now: Instant, tree: &Tree) -> bool {
        if now >= self.until || tree.is_gone() {
            return false;
        }
        self.found.retain(|m| procfs::is_alive(m.pid) && procfs::start_time(m.pid) == m.start_time);
        match self.settle {
            Some(t) if now < t => true,
            Some(_) => {
                self.settle = None;
                if self.found.is_empty() {
                    self.found = look_for_drainers(tree);
                }
                !self.found.is_empty()
            }
            None => !self.found.is_empty(),
        }
    }

    fn deadline(&self) -> Instant {
        self.settle.unwrap_or(self.until).min(self.until)
    }
}

fn look_for_drainers(tree: &Tree) -> Vec<Member> {
    if !cfg!(target_os = "linux") || !tree.at_most(DRAIN_MAX_MEMBERS) {
        return Vec::new();
    }
    tree.draining()
}

/// Where a supervisor's life is: the state of its one loop ([`supervise_with`]), from the
/// spawn (or take-over) to the end. Each state's step in the loop returns the next; the
/// decisions are pure functions, unit-tested without processes as [`crate::stop::StopMachine`]
/// is: [`Life::next`] at the end of each of the tree's wakes, [`Life::recorded`] after the
/// record, [`Life::lingered`] after each wake while lingering.
///
/// Issue 32 names the stages running, stopping, recording, lingering, cleaning up and done. In
/// the loop they are:
/// - running: [`Life::Running`]; after the provider's own exit, [`Life::Draining`] holds the
///   stop back (at most [`OUTPUT_DRAIN`]) while a leftover writes out what the provider printed;
/// - stopping: [`Life::Stopping`], the one stop or the cleanup of what an exited provider left.
///   The tree's part ends at [`Life::Gone`] or [`Life::Unfinished`], or at [`Life::HandingOn`]
///   when the leftovers are kept alive ([`Options::keep_leftovers`]); there the tree is
///   finished ([`Supervisor::finish`]) and its [`Outcome`] made;
/// - recording: [`Life::Recording`], the front end records the outcome and answers what is left
///   ([`Hooks::record_outcome`]);
/// - lingering: [`Life::Lingering`], after the command's own exit while its cleanup is pending
///   and an owner or turn timeout is set: idle, until a trigger or until the cleanup is no
///   longer needed;
/// - cleaning up: [`Life::CleaningUp`], the cleanup runs ([`Hooks::clean_up`]); after a
///   take-over, [`Life::Settling`] instead lets the cleanup the killed keeper was running finish
///   ([`Hooks::settled`]);
/// - done: [`Life::Done`], the loop returns the outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Life {
    /// The provider runs and no stop was asked: the loop waits (the stop machine has no step).
    Running,
    /// The provider exited on its own and a leftover still drains its output ([`Drain`]): the
    /// stop of what it left waits.
    Draining,
    /// The stop machine steps: the one stop (stdin grace, SIGTERM, SIGKILL, kill wait), or, once
    /// the provider has exited on its own, the cleanup of what it left, which ends at once when
    /// nothing is left.
    Stopping,
    /// The provider exited on its own with a status and leftovers are kept: what it left alive
    /// is handed on ([`Kept`]), not stopped, and the tree's part ends.
    HandingOn,
    /// Nothing of the tree is alive: the tree's part ends.
    Gone,
    /// The kill wait passed with something alive: the tree's part ends.
    Unfinished,
    /// The outcome is recorded ([`Hooks::record_outcome`]).
    Recording,
    /// A cleanup is pending and its trigger may still come ([`Pending::Trigger`]): the loop
    /// waits on the signals, the owner, the turn timeout and, in a keeper, the supervisor.
    Lingering,
    /// After a take-over, the cleanup the killed keeper was running is let finish within its
    /// bound ([`Pending::Settling`]): the loop waits on SIGCHLD and reaps.
    Settling,
    /// The cleanup runs ([`Hooks::clean_up`]).
    CleaningUp(Cleanup),
    /// Nothing is left to do: the loop returns the outcome.
    Done,
}

/// What [`Life::next`] may need to look at, asked only when the answer decides (each look
/// reads `/proc`): the tree ([`TreeLook`]) in the loop, a scripted stand-in in the unit tests.
trait Look {
    /// True if anything of the tree is alive (what would be handed on).
    fn leftovers_alive(&mut self) -> bool;
    /// True while a leftover still drains the provider's output ([`Drain::waiting`]).
    fn drain_waits(&mut self) -> bool;
}

impl Life {
    /// The transition at the end of a wake: from the stop machine's `phase` (after this wake's
    /// triggers began or hastened a stop), the provider's wait status once reaped, and
    /// `keep_leftovers`. Leftovers are looked for only for a provider that exited with a status
    /// under `keep_leftovers` (one killed by a signal was stopped from outside, and what it
    /// left goes too), the drain only once the provider has exited and no stop runs: a plain
    /// `run` whose provider is alive looks at nothing.
    fn next(phase: Phase, provider: Option<WaitStatus>, keep_leftovers: bool, look: &mut impl Look) -> Life {
        match (phase, provider) {
            (Phase::Gone, _) => Life::Gone,
            (Phase::Unfinished, _) => Life::Unfinished,
            (Phase::StdinGrace { .. } | Phase::Terminating { .. } | Phase::Killing { .. }, _) => Life::Stopping,
            (Phase::Running, None) => Life::Running,
            (Phase::Running, Some(WaitStatus::Exited(_))) if keep_leftovers && look.leftovers_alive() => {
                Life::HandingOn
            }
            (Phase::Running, Some(_)) if look.drain_waits() => Life::Draining,
            (Phase::Running, Some(_)) => Life::Stopping,
        }
    }

    /// The transition after [`Life::Recording`], from what the front end answered: nothing left
    /// is [`Life::Done`], a claimed cleanup runs now, a pending one is waited for.
    fn recorded(pending: &Pending) -> Life {
        match pending {
            Pending::Nothing => Life::Done,
            Pending::Cleanup => Life::CleaningUp(Cleanup::Claimed),
            Pending::Trigger { .. } => Life::Lingering,
            Pending::Settling => Life::Settling,
        }
    }

    /// The transition at the end of a wake of [`Life::Lingering`] (and at its beginning, with
    /// `recheck` set), from what the wake saw, first found first: a stop's signal, the
    /// supervisor's death (in a keeper), the owner's death each run the cleanup for their
    /// trigger; then, if another signal came, `still_needed` is asked (once) and a no ends the
    /// supervisor; last the turn timeout runs the cleanup. Otherwise the lingering goes on.
    fn lingered(wake: &Lingered, still_needed: &mut dyn FnMut() -> bool) -> Life {
        let trigger = match *wake {
            Lingered { stop: Some(sig), .. } => Trigger::Signal(sig),
            Lingered { supervisor_gone: true, .. } => Trigger::SupervisorKilled,
            Lingered { owner_died: true, .. } => Trigger::OwnerDied,
            Lingered { recheck: true, .. } if !still_needed() => return Life::Done,
            Lingered { timed_out: true, .. } => Trigger::Timeout,
            _ => return Life::Lingering,
        };
        Life::CleaningUp(Cleanup::Triggered(trigger))
    }
}

/// What one wake of [`Life::Lingering`] saw ([`Life::lingered`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Lingered {
    /// The first SIGTERM, SIGINT or SIGHUP received: a stop.
    stop: Option<Signal>,
    /// Another signal came (SIGUSR1: "your entry changed"): is the cleanup still needed?
    recheck: bool,
    /// SIGCHLD came: children this process inherits are reaped.
    reap: bool,
    /// In a keeper: the supervisor's pipe hung up.
    supervisor_gone: bool,
    /// The owner died (or, as lingering begins, was already gone or someone else).
    owner_died: bool,
    /// The turn timeout's end has passed.
    timed_out: bool,
}

impl Lingered {
    /// What the signals received in one wake, in order, ask for (nothing else is set).
    fn of_signals(signals: &[Signal]) -> Lingered {
        let mut wake = Lingered::default();
        for &sig in signals {
            match sig {
                Signal::TERM | Signal::INT | Signal::HUP => {
                    wake.stop = wake.stop.or(Some(sig));
                }
                Signal::CHLD => wake.reap = true,
                _ => wake.recheck = true,
            }
        }
        wake
    }
}

/// The loop's [`Look`]: the tree now, the drain window (opened at the first look after the
/// provider's exit), and the live members once looked at (what [`Life::HandingOn`] hands on).
struct TreeLook<'a> {
    tree: &'a Tree,
    now: Instant,
    /// Children this wake reaped ([`Drain::new`] looks at nothing after a storm's wake).
    reaped: usize,
    drain: &'a mut Option<Drain>,
    members: Vec<Member>,
}

impl Look for TreeLook<'_> {
    fn leftovers_alive(&mut self) -> bool {
        self.members = self.tree.live();
        !self.members.is_empty()
    }

    fn drain_waits(&mut self) -> bool {
        if self.drain.is_none() && !self.tree.is_gone() {
            *self.drain = Some(Drain::new(self.now, self.tree, self.reaped));
        }
        // A drainer's exit wakes the loop: it is this process's child by then, or the cgroup's
        // last member.
        self.drain.as_mut().is_some_and(|d| d.waiting(self.now, self.tree))
    }
}

/// What a supervisor does once its keeper is gone, from what the keeper told (`report`): exits
/// as the keeper did, unless the keeper was killed after it spawned the provider; then returns
/// the provider (and its wait status, if the keeper reaped it) to run the stop on.
fn take_over(report: &crate::keeper::Report, foreign: &[Member]) -> Option<(Spawned, Option<WaitStatus>)> {
    let mut report = report.clone();
    if !report.done && report.spawned.is_none() {
        // Killed after its spawn of the provider but before it said so (the provider can print
        // before the keeper is scheduled again): the provider is this process's child now, as
        // the orphan of a child of a subreaper.
        report.spawned = unannounced_provider(foreign);
    }
    if !report.keeper_killed() {
        exit_as(report.keeper);
    }
    report.spawned.map(|s| (s, report.provider))
}

/// The provider of a keeper that died before it reported the spawn: a live child of this
/// process that is not one of `foreign` (the children from before the split). The kernel moves
/// a dying process's children to the nearest subreaper before its parent can reap it, so they
/// are this process's children by the time the keeper is reaped. The provider leads its own
/// group (`spawn` makes it so), or is about to: the one whose group is its pid, else the oldest.
/// `None` if the keeper died before it forked the provider.
fn unannounced_provider(foreign: &[Member]) -> Option<Spawned> {
    let mut children: Vec<procfs::Stat> = procfs::children(process::getpid())
        .into_iter()
        .filter_map(|p| procfs::stat(p).ok())
        .filter(|s| !foreign.iter().any(|f| f.pid == s.pid && f.start_time == Some(s.start_time)))
        .collect();
    children.sort_by_key(|s| (s.pgrp != s.pid.as_raw(), s.start_time));
    children.first().map(|s| Spawned { pid: s.pid, pgid: s.pid.as_group() })
}

/// Begins (or hastens) the stop for `trigger`. The front end hears of a stop
/// ([`Happened::Stopping`]) before its first signal goes out, so a managed entry records why it
/// stops even if this process is killed in the middle of it.
fn begin(machine: &mut StopMachine, trigger: Trigger, tree: &Tree, hooks: &mut dyn Hooks) {
    begin_with(machine, trigger, tree, hooks, None);
}

/// [`begin`] with a stop request's one-off term grace, which replaces the entry's for this stop
/// only (a stop already under way keeps the grace it began with).
fn begin_with(
    machine: &mut StopMachine,
    trigger: Trigger,
    tree: &Tree,
    hooks: &mut dyn Hooks,
    one_off: Option<Duration>,
) {
    if machine.phase() == Phase::Running {
        if let Some(policy) = hooks.policy_for_stop(trigger) {
            machine.set_policy(policy);
        }
        if let Some(term_grace) = one_off {
            machine.set_policy(StopPolicy { term_grace, ..*machine.policy() });
        }
        hooks.on(&Happened::Stopping { trigger, policy: machine.policy() });
    }
    machine.begin(trigger, Instant::now(), tree);
}

/// After a keeper's SIGKILL: the stop it had begun for `trigger` goes on with the grace `left`
/// (the front end heard of it from the keeper already: no [`Happened::Stopping`] again).
fn resume(machine: &mut StopMachine, trigger: Trigger, hooks: &mut dyn Hooks, left: Duration) {
    if let Some(policy) = hooks.policy_for_stop(trigger) {
        machine.set_policy(policy);
    }
    // The keeper's SIGTERM was sent (it told the stop only after): the grace goes on, no second.
    machine.resume(trigger, Instant::now() + left);
}

/// [`begin`] with the stdin grace first ([`StopMachine::begin_with_stdin_grace`]).
fn begin_with_stdin_grace(machine: &mut StopMachine, trigger: Trigger, hooks: &mut dyn Hooks) {
    if machine.phase() == Phase::Running {
        if let Some(policy) = hooks.policy_for_stop(trigger) {
            machine.set_policy(policy);
        }
        hooks.on(&Happened::Stopping { trigger, policy: machine.policy() });
    }
    machine.begin_with_stdin_grace(trigger, Instant::now());
}

/// True if the pipe read end `fd` is readable or hung up now (the supervisor's life pipe).
fn gone(fd: RawFd) -> bool {
    let mut fds = [PollFd::new(fd, POLL_IN)];
    matches!(process::poll(&mut fds, Some(Duration::ZERO)), Ok(n) if n > 0)
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use crate::spawn::{SpawnError, Spawned};
    use crate::stop::{Phase, Trigger};
    use crate::sys::{Pid, Signal, WaitStatus};

    use super::{Cleanup, Error, Exit, Life, Lingered, Outcome, Pending};

    /// docs/reference.md's exit-status table of `sheepdog run`, row by row.
    #[test]
    fn exit_status_follows_the_readme_table() {
        let pid = Pid::new(4242).unwrap();
        let spawned = Spawned { pid, pgid: pid.as_group() };
        let outcome = |provider: Option<WaitStatus>, trigger: Option<Trigger>, tree_gone: bool| Outcome {
            spawned,
            provider,
            trigger,
            tree_gone,
            escalated: false,
            cgroup_left: false,
            left: Vec::new(),
            kept: None,
            keeper: None,
            as_init: false,
        };
        let kill = Signal::KILL;
        let term = Signal::TERM;
        let rows: &[(&str, Outcome, Exit)] = &[
            ("CMD exited with code N", outcome(Some(WaitStatus::Exited(3)), None, true), Exit::Code(3)),
            (
                "CMD killed by signal S, no stop",
                outcome(Some(WaitStatus::Signaled(kill, false)), None, true),
                Exit::Signal(kill),
            ),
            (
                "CMD exited, what it left was cleaned up",
                outcome(Some(WaitStatus::Exited(0)), Some(Trigger::ProviderExited), true),
                Exit::Code(0),
            ),
            (
                "signal S stopped sheepdog",
                outcome(Some(WaitStatus::Signaled(term, false)), Some(Trigger::Signal(term)), true),
                Exit::Signal(term),
            ),
            (
                "owner death: CMD's code if it exited",
                outcome(Some(WaitStatus::Exited(0)), Some(Trigger::OwnerDied), true),
                Exit::Code(0),
            ),
            (
                "owner death: else 128 + the signal",
                outcome(Some(WaitStatus::Signaled(term, false)), Some(Trigger::OwnerDied), true),
                Exit::Code(128 + Signal::TERM.as_raw()),
            ),
            (
                "stdin EOF: 128 + the signal",
                outcome(Some(WaitStatus::Signaled(kill, false)), Some(Trigger::StdinEof), true),
                Exit::Code(128 + Signal::KILL.as_raw()),
            ),
            (
                "the kernel did not finish the kill",
                outcome(Some(WaitStatus::Signaled(kill, false)), Some(Trigger::Signal(term)), false),
                Exit::Code(124),
            ),
            ("the provider could not be reaped", outcome(None, Some(Trigger::OwnerDied), false), Exit::Code(124)),
        ];
        for (row, o, want) in rows {
            assert_eq!(o.exit(), *want, "{row}");
        }
        // As PID 1 of a PID namespace (or a keeper whose front is): no death by a signal, its
        // status instead; codes are unchanged.
        for (row, o, want) in rows {
            let o = Outcome { as_init: true, ..outcome(o.provider, o.trigger, o.tree_gone) };
            let want = match *want {
                Exit::Signal(s) => Exit::Code(128 + s.as_raw()),
                code => code,
            };
            assert_eq!(o.exit(), want, "as PID 1: {row}");
        }
        let e = |raw| std::io::Error::from_raw_os_error(raw);
        let program = "x".to_string();
        assert_eq!(
            SpawnError::NotFound { program: program.clone(), source: e(crate::sys::errno::ENOENT) }.exit_code(),
            127
        );
        assert_eq!(SpawnError::NotExecutable { program, source: e(crate::sys::errno::EACCES) }.exit_code(), 126);
        assert_eq!(Error::OwnerGone(pid).exit_code(), 125, "sheepdog's own error");
    }

    /// A scripted [`super::Look`]: fixed answers, and which looks were asked.
    #[derive(Default)]
    struct Scripted {
        alive: bool,
        drain: bool,
        asked_leftovers: bool,
        asked_drain: bool,
    }

    impl super::Look for Scripted {
        fn leftovers_alive(&mut self) -> bool {
            self.asked_leftovers = true;
            self.alive
        }
        fn drain_waits(&mut self) -> bool {
            self.asked_drain = true;
            self.drain
        }
    }

    fn next(phase: Phase, provider: Option<WaitStatus>, keep: bool, look: &mut Scripted) -> Life {
        Life::next(phase, provider, keep, look)
    }

    const EXITED: Option<WaitStatus> = Some(WaitStatus::Exited(0));
    const KILLED: Option<WaitStatus> = Some(WaitStatus::Signaled(Signal::KILL, false));

    #[test]
    fn a_running_provider_stays_running_and_nothing_is_looked_at() {
        for keep in [false, true] {
            let mut look = Scripted { alive: true, drain: true, ..Scripted::default() };
            assert_eq!(next(Phase::Running, None, keep, &mut look), Life::Running);
            assert!(!look.asked_leftovers && !look.asked_drain, "a plain run reads no /proc");
        }
    }

    #[test]
    fn a_stop_under_way_is_stopping_with_or_without_the_provider_and_looks_at_nothing() {
        let until = Instant::now();
        for phase in [Phase::StdinGrace { until }, Phase::Terminating { until }, Phase::Killing { until }] {
            for provider in [None, EXITED, KILLED] {
                for keep in [false, true] {
                    let mut look = Scripted { alive: true, drain: true, ..Scripted::default() };
                    assert_eq!(next(phase, provider, keep, &mut look), Life::Stopping, "{phase:?} {provider:?}");
                    assert!(!look.asked_leftovers && !look.asked_drain, "no drain window once a stop runs");
                }
            }
        }
    }

    #[test]
    fn the_end_phases_are_the_ends() {
        for provider in [None, EXITED, KILLED] {
            let mut look = Scripted::default();
            assert_eq!(next(Phase::Gone, provider, true, &mut look), Life::Gone);
            assert_eq!(next(Phase::Unfinished, provider, true, &mut look), Life::Unfinished);
            assert!(!look.asked_leftovers && !look.asked_drain);
        }
    }

    #[test]
    fn with_leftovers_kept_an_exit_with_a_status_hands_on_what_is_alive_without_the_drain() {
        let mut look = Scripted { alive: true, drain: true, ..Scripted::default() };
        assert_eq!(next(Phase::Running, Some(WaitStatus::Exited(3)), true, &mut look), Life::HandingOn);
        assert!(look.asked_leftovers && !look.asked_drain, "a reader of its output is kept with the rest");
    }

    #[test]
    fn with_leftovers_kept_and_none_alive_the_exit_goes_on_as_without() {
        let mut look = Scripted { alive: false, drain: false, ..Scripted::default() };
        assert_eq!(next(Phase::Running, EXITED, true, &mut look), Life::Stopping);
        assert!(look.asked_leftovers && look.asked_drain);
    }

    #[test]
    fn a_provider_killed_by_a_signal_is_never_handed_on() {
        for drain in [false, true] {
            let mut look = Scripted { alive: true, drain, ..Scripted::default() };
            let want = if drain { Life::Draining } else { Life::Stopping };
            assert_eq!(next(Phase::Running, KILLED, true, &mut look), want);
            assert!(!look.asked_leftovers, "what it left goes too");
        }
    }

    #[test]
    fn after_the_providers_own_exit_the_drain_holds_the_cleanup_back_until_it_is_over() {
        for provider in [EXITED, KILLED] {
            let mut look = Scripted { alive: true, drain: true, ..Scripted::default() };
            assert_eq!(next(Phase::Running, provider, false, &mut look), Life::Draining);
            assert!(!look.asked_leftovers && look.asked_drain, "leftovers are looked for only to keep them");
            look.drain = false;
            assert_eq!(next(Phase::Running, provider, false, &mut look), Life::Stopping, "the drain is over");
        }
    }

    #[test]
    fn recording_answers_done_a_cleanup_now_or_lingering() {
        assert_eq!(Life::recorded(&Pending::Nothing), Life::Done, "run: nothing more to do");
        assert_eq!(Life::recorded(&Pending::Cleanup), Life::CleaningUp(Cleanup::Claimed));
        assert_eq!(Life::recorded(&Pending::Settling), Life::Settling, "a killed keeper's cleanup");
        let pid = Pid::new(4242).unwrap();
        for owner in [None, Some((pid, Some(7)))] {
            for until in [None, Some(Instant::now())] {
                assert_eq!(Life::recorded(&Pending::Trigger { owner, until }), Life::Lingering);
            }
        }
    }

    /// [`Life::lingered`] with `still_needed` answering `needed`; also returns whether it was asked.
    fn lingered(wake: Lingered, needed: bool) -> (Life, usize) {
        let mut asked = 0;
        let life = Life::lingered(&wake, &mut || {
            asked += 1;
            needed
        });
        (life, asked)
    }

    fn triggered(trigger: Trigger) -> Life {
        Life::CleaningUp(Cleanup::Triggered(trigger))
    }

    #[test]
    fn lingering_with_nothing_seen_goes_on_and_asks_nothing() {
        for needed in [false, true] {
            assert_eq!(lingered(Lingered::default(), needed), (Life::Lingering, 0));
            let reaped_only = Lingered { reap: true, ..Lingered::default() };
            assert_eq!(lingered(reaped_only, needed), (Life::Lingering, 0), "SIGCHLD only reaps");
        }
    }

    #[test]
    fn lingering_each_trigger_runs_the_cleanup_for_it() {
        let none = Lingered::default();
        let cases = [
            (Lingered { stop: Some(Signal::TERM), ..none }, Trigger::Signal(Signal::TERM)),
            (Lingered { stop: Some(Signal::HUP), ..none }, Trigger::Signal(Signal::HUP)),
            (Lingered { supervisor_gone: true, ..none }, Trigger::SupervisorKilled),
            (Lingered { owner_died: true, ..none }, Trigger::OwnerDied),
            (Lingered { timed_out: true, ..none }, Trigger::Timeout),
        ];
        for (wake, trigger) in cases {
            assert_eq!(lingered(wake, true), (triggered(trigger), 0), "{wake:?}");
        }
    }

    #[test]
    fn lingering_looks_at_a_stop_then_the_supervisor_then_the_owner_then_the_entry_then_the_timeout() {
        let all = Lingered {
            stop: Some(Signal::INT),
            recheck: true,
            reap: true,
            supervisor_gone: true,
            owner_died: true,
            timed_out: true,
        };
        assert_eq!(lingered(all, false), (triggered(Trigger::Signal(Signal::INT)), 0));
        let all = Lingered { stop: None, ..all };
        assert_eq!(lingered(all, false), (triggered(Trigger::SupervisorKilled), 0));
        let all = Lingered { supervisor_gone: false, ..all };
        assert_eq!(lingered(all, false), (triggered(Trigger::OwnerDied), 0), "an owner gone at the start, too");
        let all = Lingered { owner_died: false, ..all };
        assert_eq!(lingered(all, false), (Life::Done, 1), "a cleanup no longer needed does not run at the timeout");
        assert_eq!(lingered(all, true), (triggered(Trigger::Timeout), 1));
    }

    #[test]
    fn lingering_another_signal_asks_once_whether_the_cleanup_is_still_needed() {
        let recheck = Lingered { recheck: true, ..Lingered::default() };
        assert_eq!(lingered(recheck, false), (Life::Done, 1), "it ran elsewhere, or the entry was cleared");
        assert_eq!(lingered(recheck, true), (Life::Lingering, 1));
    }

    #[test]
    fn lingering_reads_a_wakes_signals_in_order() {
        let of = |sigs: &[Signal]| Lingered::of_signals(sigs);
        assert_eq!(of(&[]), Lingered::default());
        assert_eq!(of(&[Signal::CHLD]), Lingered { reap: true, ..Lingered::default() });
        assert_eq!(of(&[Signal::USR1]), Lingered { recheck: true, ..Lingered::default() });
        let both = of(&[Signal::USR1, Signal::INT, Signal::TERM, Signal::CHLD]);
        assert_eq!(both, Lingered { stop: Some(Signal::INT), recheck: true, reap: true, ..Lingered::default() });
        assert_eq!(of(&[Signal::HUP]).stop, Some(Signal::HUP));
    }
}
