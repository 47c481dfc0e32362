//! The one stop: every reason to stop a process tree takes this path.
//!
//! ```text
//! trigger ──► [stdin grace: let the provider exit on its own] ──► SIGTERM (+SIGCONT) to the group
//!         and every tracked descendant ──► wait ≤ term grace for "all gone" ──► SIGKILL all
//!         ──► wait ≤ kill wait for the kernel to finish ──► gone | unfinished
//! ```
//!
//! SIGCONT follows SIGTERM so a stopped (`T`) process can act on it, as systemd's `KillMode` does.
//! At the escalation the tree is frozen first (SIGSTOP, outside the cgroup tier), then counted,
//! then killed: a fork storm cannot grow while it is counted.
//! SIGTERM is sent once; SIGKILL is re-sent on every wake of the kill phase, so a process forked
//! between a scan and a signal is caught by the next scan.
//!
//! [`StopMachine`] holds the state (running → stdin grace → terminating → killing → gone or
//! unfinished); the supervisor's event loop and the out-of-supervisor stop ([`stop_blocking`],
//! used by `sheepdog stop` and `reap` when a supervisor is gone) both drive it. It acts through
//! [`StopTarget`] (three calls: gone?, how many alive, send these signals), which a `Tree`
//! implements; the unit tests drive the whole sequence against a scripted target, without
//! processes, and the integration tests check it against real ones.

use std::time::{Duration, Instant};

use crate::entry::StopTimings;
use crate::status::StopReason;
use crate::sys::Signal;
use crate::tree::Tree;

/// How long a provider may take to exit on its own after its stdin reached EOF, before
/// SIGTERM: 1000 ms. Agent CLIs in server mode exit on EOF within milliseconds.
pub const STDIN_GRACE_MS: u64 = 1000;
/// How long a tree has, after SIGTERM, to exit before SIGKILL: 3000 ms. Long enough for a dev
/// server to close its listeners and a test runner to tear down; short enough that a cancelled
/// agent turn does not visibly hang. (systemd defaults to 90 s; nextest to 10 s for tests.)
pub const TERM_GRACE_MS: u64 = 3000;
/// How long the kernel has, after SIGKILL, to finish: 1500 ms. A process in uninterruptible
/// sleep (`D`) dies only when its I/O returns; past this the stop reports status 124.
pub const KILL_WAIT_MS: u64 = 1500;
/// The longest a stop can take with the defaults: 5500 ms.
pub const MAX_STOP_MS: u64 = STDIN_GRACE_MS + TERM_GRACE_MS + KILL_WAIT_MS;

/// While killing, how often to re-scan for processes that a scan may have missed (a fork that
/// raced it, a member whose death we are not told of): 20 ms. Only in the kill phase; every
/// other wait is event-driven.
pub const KILL_RESCAN: Duration = Duration::from_millis(20);

/// The timings of a stop, each a wall-clock bound on the monotonic clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StopPolicy {
    /// After stdin EOF (with `--on-stdin-eof stop`), before SIGTERM.
    pub stdin_grace: Duration,
    /// After SIGTERM, before SIGKILL.
    pub term_grace: Duration,
    /// After SIGKILL, before giving up (exit status 124).
    pub kill_wait: Duration,
}

impl Default for StopPolicy {
    fn default() -> Self {
        StopPolicy {
            stdin_grace: Duration::from_millis(STDIN_GRACE_MS),
            term_grace: Duration::from_millis(TERM_GRACE_MS),
            kill_wait: Duration::from_millis(KILL_WAIT_MS),
        }
    }
}

impl StopPolicy {
    /// The longest a stop under this policy can take: stdin grace + term grace + kill wait.
    /// Recorded in every entry and `spawned` event, so a host knows how long to wait.
    ///
    /// ```
    /// use sheepdog_core::stop::{StopPolicy, MAX_STOP_MS};
    /// assert_eq!(StopPolicy::default().max_stop().as_millis() as u64, MAX_STOP_MS); // 5500
    /// ```
    pub fn max_stop(&self) -> Duration {
        self.stdin_grace + self.term_grace + self.kill_wait
    }

    /// The longest a cleanup command with this `timeout` can take under this policy: the
    /// timeout, then its own stop (term grace + kill wait). `sheepdog stop` waits this long, on
    /// top of [`StopPolicy::max_stop`], for a supervisor that runs one.
    pub fn cleanup_bound(&self, timeout: Duration) -> Duration {
        timeout + self.term_grace + self.kill_wait
    }

    /// The policy as an entry records it: each timing in ms, and [`StopPolicy::max_stop`].
    pub fn timings(&self) -> StopTimings {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        StopTimings {
            stdin_grace_ms: ms(self.stdin_grace),
            term_grace_ms: ms(self.term_grace),
            kill_wait_ms: ms(self.kill_wait),
            max_stop_ms: ms(self.max_stop()),
        }
    }

    /// The policy an entry's recorded timings describe (`maxStopMs` is derived, not read).
    pub fn from_timings(t: &StopTimings) -> StopPolicy {
        StopPolicy {
            stdin_grace: Duration::from_millis(t.stdin_grace_ms),
            term_grace: Duration::from_millis(t.term_grace_ms),
            kill_wait: Duration::from_millis(t.kill_wait_ms),
        }
    }
}

/// Why a stop began.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// SIGTERM, SIGINT or SIGHUP to the supervisor (for a managed process: `sheepdog stop`).
    Signal(Signal),
    /// The owner process died.
    OwnerDied,
    /// Stdin reached EOF with `--on-stdin-eof stop`.
    StdinEof,
    /// The turn timeout (`--timeout`) expired.
    Timeout,
    /// Not a stop: the provider exited on its own and what it left running is being cleaned up.
    ProviderExited,
    /// A process of the supervisor's chain was killed (SIGKILL of the supervisor, its group, or
    /// the keeper): the survivor stops the tree (see [`crate::keeper`]).
    SupervisorKilled,
}

/// The stop reason an entry records for the trigger that began its stop.
impl From<Trigger> for StopReason {
    fn from(t: Trigger) -> StopReason {
        match t {
            Trigger::Signal(_) => StopReason::Signal,
            Trigger::OwnerDied => StopReason::Owner,
            Trigger::StdinEof => StopReason::StdinEof,
            Trigger::Timeout => StopReason::Timeout,
            Trigger::ProviderExited => StopReason::ProviderExited,
            Trigger::SupervisorKilled => StopReason::SupervisorKilled,
        }
    }
}

impl Trigger {
    /// The one table that turns a trigger into text: its word in events and the registry
    /// (`signal`, `owner`, `stdinEof`, `timeout`, `providerExited`, `supervisorKilled`), and
    /// the cause in words that the log markers say (`stopping: the owner exited`, `cleanup
    /// triggered: the turn timeout expired`), and the `statusText` of an entry it stopped. A
    /// signal's cause is completed with its name by [`Display`](std::fmt::Display).
    const fn words(&self) -> (&'static str, &'static str, &'static str) {
        match self {
            Trigger::Signal(_) => ("signal", "(stop requested)", "stopped"),
            Trigger::OwnerDied => ("owner", "the owner exited", "stopped (owner exited)"),
            Trigger::StdinEof => ("stdinEof", "stdin reached EOF", "stopped"),
            Trigger::Timeout => ("timeout", "the turn timeout expired", "timed out"),
            Trigger::ProviderExited => {
                ("providerExited", "the command exited; stopping what it left running", "stopped")
            }
            Trigger::SupervisorKilled => {
                ("supervisorKilled", "the supervisor was killed", "stopped (the supervisor was killed)")
            }
        }
    }

    /// The name used in events and the registry: `signal`, `owner`, `stdinEof`, `timeout`,
    /// `providerExited`, `supervisorKilled`.
    pub fn name(&self) -> &'static str {
        self.words().0
    }

    /// The recorded `statusText` of an entry this trigger stopped: `stopped (owner exited)`,
    /// `stopped (the supervisor was killed)`, else `stopped` (a stop asked for by a signal says
    /// no more: `stopReason` has it). A timeout's is `timed out`; the supervisor, which knows
    /// the length, writes `timed out after 2s`.
    pub fn stopped_text(&self) -> &'static str {
        self.words().2
    }
}

/// The cause in words, as the log markers say it: `SIGTERM (stop requested)`, `the owner
/// exited`, `the turn timeout expired`, ...
impl std::fmt::Display for Trigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Trigger::Signal(s) => write!(f, "{s} {}", self.words().1),
            t => f.write_str(t.words().1),
        }
    }
}

/// Where a stop is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Running,
    /// Stdin reached EOF; the provider may still exit by itself until then.
    StdinGrace {
        until: Instant,
    },
    /// SIGTERM sent; SIGKILL at `until`.
    Terminating {
        until: Instant,
    },
    /// SIGKILL sent; unfinished at `until`.
    Killing {
        until: Instant,
    },
    /// Nothing of the tree is alive.
    Gone,
    /// SIGKILL was sent and something still lived after the kill wait.
    Unfinished,
}

/// Something the machine did that a front end may want to report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// SIGTERM went to `signalled` processes (and the group).
    Terminated { signalled: usize },
    /// The grace ran out with `remaining` processes alive; SIGKILL went to them.
    Escalated { remaining: usize },
}

/// What the stop machine acts on: a process tree (`tree::Tree`), or in the unit tests below a
/// scripted stand-in, so that the sequence itself is checked without processes.
pub trait StopTarget {
    /// True when nothing of it is alive (zombies count as gone).
    fn is_gone(&self) -> bool;
    /// How many of its processes are alive.
    fn live_count(&self) -> usize;
    /// Sends each of `sigs`, in order, to all of it. Returns how many received the first.
    fn signal_all(&self, sigs: &[Signal]) -> usize;
    /// Freezes what can fork (SIGSTOP) before it is counted and killed, so the count does not
    /// chase new pids; nothing where one kill is atomic anyway (a cgroup's `cgroup.kill`).
    fn freeze(&self) {}
    /// The time now, for a call that began at `began` and has just signalled: the real clock
    /// (never earlier than `began`). A scripted target keeps `began`, so its sequence is exact.
    fn after(&self, began: Instant) -> Instant {
        began.max(Instant::now())
    }
}

impl StopTarget for Tree {
    fn is_gone(&self) -> bool {
        Tree::is_gone(self)
    }
    fn live_count(&self) -> usize {
        self.live().len()
    }
    fn signal_all(&self, sigs: &[Signal]) -> usize {
        Tree::signal_all(self, sigs)
    }
    fn freeze(&self) {
        if self.cgroup().is_none() {
            Tree::signal_all(self, &[Signal::STOP]);
        }
    }
}

/// What the rest of the tree gets once the provider has exited (`run --after-provider-exit`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AfterProviderExit {
    /// The whole sequence: SIGTERM, the term grace, SIGKILL, as systemd gives every process
    /// of a unit (the default).
    #[default]
    Grace,
    /// SIGKILL at once, during a stop or after the provider's own exit: Orca's one-shot
    /// providers, whose helpers have nothing to save once the provider has answered.
    Kill,
}

/// The stop sequence as a small state machine over a [`StopTarget`] (a `tree::Tree`).
#[derive(Debug)]
pub struct StopMachine {
    policy: StopPolicy,
    after_provider_exit: AfterProviderExit,
    phase: Phase,
    /// The first real stop trigger (never `ProviderExited`).
    trigger: Option<Trigger>,
    escalated: bool,
}

impl StopMachine {
    pub fn new(policy: StopPolicy) -> StopMachine {
        StopMachine {
            policy,
            after_provider_exit: AfterProviderExit::Grace,
            phase: Phase::Running,
            trigger: None,
            escalated: false,
        }
    }

    /// The machine with `after` as what the tree gets once the provider has exited.
    pub fn after_provider_exit(mut self, after: AfterProviderExit) -> StopMachine {
        self.after_provider_exit = after;
        self
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    pub fn policy(&self) -> &StopPolicy {
        &self.policy
    }

    /// Replaces the timings; takes effect at the next phase change.
    pub fn set_policy(&mut self, policy: StopPolicy) {
        self.policy = policy;
    }

    /// The first trigger that asked for a stop; `None` if the provider exited on its own.
    pub fn trigger(&self) -> Option<Trigger> {
        self.trigger
    }

    /// True once SIGKILL was needed.
    pub fn escalated(&self) -> bool {
        self.escalated
    }

    /// True while a stop (or the cleanup after the provider's own exit) is under way.
    pub fn stopping(&self) -> bool {
        matches!(self.phase, Phase::StdinGrace { .. } | Phase::Terminating { .. } | Phase::Killing { .. })
    }

    /// Starts (or hastens) the stop. Returns true if this trigger is the one that began it.
    ///
    /// Stdin EOF opens the stdin grace; every other trigger sends SIGTERM at once (owner death
    /// included: never an immediate SIGKILL). A signal that arrives during the stdin grace or
    /// after the provider's own exit ends the grace early; later triggers change nothing else.
    pub fn begin(&mut self, trigger: Trigger, now: Instant, tree: &impl StopTarget) -> Option<Step> {
        if trigger == Trigger::StdinEof {
            self.begin_with_stdin_grace(trigger, now);
            return None;
        }
        self.note(trigger);
        match self.phase {
            Phase::Running | Phase::StdinGrace { .. } => Some(self.terminate(now, tree)),
            _ => None,
        }
    }

    /// Goes on with a stop another process began and signalled (a killed keeper's, which told
    /// its supervisor the trigger and when its grace ends): the grace runs on to `until`, and the
    /// tree gets no second SIGTERM, which many programs take for "quit now" (Node's and npm's
    /// handlers, a shell `trap` run twice). A stop already under way here is not changed.
    pub fn resume(&mut self, trigger: Trigger, until: Instant) {
        self.note(trigger);
        if matches!(self.phase, Phase::Running | Phase::StdinGrace { .. }) {
            self.phase = Phase::Terminating { until };
        }
    }

    /// Starts the stop with the stdin grace first: the provider's stdin reached (or was given)
    /// EOF and it may exit on its own until the grace ends. For stdin EOF, and for owner death
    /// under `--on-owner-death close-stdin` (Orca's `closeRequest: 'stdin-end'`), with
    /// `trigger` the reason recorded. A stop already under way is not changed.
    pub fn begin_with_stdin_grace(&mut self, trigger: Trigger, now: Instant) {
        self.note(trigger);
        if self.phase == Phase::Running {
            self.phase = Phase::StdinGrace { until: now + self.policy.stdin_grace };
        }
    }

    fn note(&mut self, trigger: Trigger) {
        if trigger != Trigger::ProviderExited && self.trigger.is_none() {
            self.trigger = Some(trigger);
        }
    }

    fn terminate(&mut self, now: Instant, tree: &impl StopTarget) -> Step {
        let signalled = tree.signal_all(&[Signal::TERM, Signal::CONT]);
        // The grace runs from the signal, not from the call: the look before it can take a
        // while (a fork storm's zombies are reaped first), and the tree is owed the whole grace.
        self.phase = Phase::Terminating { until: tree.after(now) + self.policy.term_grace };
        Step::Terminated { signalled }
    }

    /// Re-evaluates after any event: moves to `Gone` when nothing is alive, and along the
    /// deadlines otherwise. `provider_done` says the provider itself has been reaped (a
    /// supervisor must not call the tree gone before it knows the provider's status).
    pub fn advance(&mut self, now: Instant, tree: &impl StopTarget, provider_done: bool) -> Option<Step> {
        let grace_over = provider_done && self.after_provider_exit == AfterProviderExit::Kill;
        if let Phase::StdinGrace { until } = self.phase {
            if provider_done {
                // The provider honoured EOF; what it left behind still gets the full sequence
                // (or SIGKILL at once, with AfterProviderExit::Kill).
                if tree.is_gone() {
                    self.phase = Phase::Gone;
                    return None;
                }
                if grace_over {
                    return Some(self.kill(now, tree));
                }
                return Some(self.terminate(now, tree));
            }
            if now >= until {
                return Some(self.terminate(now, tree));
            }
            return None;
        }
        if !matches!(self.phase, Phase::Terminating { .. } | Phase::Killing { .. }) {
            return None;
        }
        if provider_done && tree.is_gone() {
            self.phase = Phase::Gone;
            return None;
        }
        match self.phase {
            Phase::Terminating { until } if now >= until || grace_over => Some(self.kill(now, tree)),
            Phase::Killing { until } => {
                if now >= until {
                    self.phase = Phase::Unfinished;
                } else {
                    tree.signal_all(&[Signal::KILL]);
                }
                None
            }
            _ => None,
        }
    }

    /// The escalation: freeze, count, SIGKILL all, then the kill wait.
    fn kill(&mut self, now: Instant, tree: &impl StopTarget) -> Step {
        tree.freeze();
        let remaining = tree.live_count();
        tree.signal_all(&[Signal::KILL]);
        self.escalated = true;
        self.phase = Phase::Killing { until: tree.after(now) + self.policy.kill_wait };
        Step::Escalated { remaining }
    }

    /// When the loop must wake next even if nothing happens.
    pub fn deadline(&self, now: Instant) -> Option<Instant> {
        match self.phase {
            Phase::StdinGrace { until } | Phase::Terminating { until } => Some(until),
            Phase::Killing { until } => Some(until.min(now + KILL_RESCAN)),
            _ => None,
        }
    }

    /// For a provider that exited on its own: clean up what it left (not a stop trigger).
    pub fn provider_exited(&mut self, now: Instant, tree: &impl StopTarget) -> Option<Step> {
        match self.phase {
            Phase::Running => {
                if tree.is_gone() {
                    self.phase = Phase::Gone;
                    None
                } else if self.after_provider_exit == AfterProviderExit::Kill {
                    Some(self.kill(now, tree))
                } else {
                    self.begin(Trigger::ProviderExited, now, tree)
                }
            }
            _ => self.advance(now, tree, true),
        }
    }
}

/// How a stop run outside a supervisor ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StopReport {
    /// Nothing of the tree is alive.
    pub gone: bool,
    /// SIGKILL was needed.
    pub escalated: bool,
    /// Processes that received SIGTERM.
    pub signalled: usize,
}

/// The one stop for a tree that has no supervisor (it was killed, or does not answer): runs the
/// sequence to the end and returns. Waits on pidfds of the tree's members where it can; a
/// 20 ms re-scan (the kill phase's [`KILL_RESCAN`]) catches members it was not told of.
pub fn stop_blocking(tree: &Tree, policy: StopPolicy) -> StopReport {
    let mut machine = StopMachine::new(policy);
    let mut signalled = 0;
    if tree.is_gone() {
        return StopReport { gone: true, escalated: false, signalled };
    }
    if let Some(Step::Terminated { signalled: n }) = machine.begin(Trigger::OwnerDied, Instant::now(), tree) {
        signalled = n;
    }
    loop {
        let now = Instant::now();
        machine.advance(now, tree, true);
        match machine.phase() {
            Phase::Gone => return StopReport { gone: true, escalated: machine.escalated(), signalled },
            Phase::Unfinished => return StopReport { gone: false, escalated: true, signalled },
            _ => {}
        }
        let deadline = machine.deadline(now).unwrap_or(now + KILL_RESCAN);
        let wait = deadline.saturating_duration_since(Instant::now()).min(Duration::from_millis(50));
        tree.wait_any_exit(wait);
    }
}

#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};
    use std::time::{Duration, Instant};

    use crate::sys::Signal;

    use super::{AfterProviderExit, KILL_RESCAN, Phase, Step, StopMachine, StopPolicy, StopTarget, Trigger};

    /// A stand-in tree: `alive` processes until a SIGKILL (unless `stuck`, a process in `D`
    /// state); SIGTERM is ignored unless `term_works`. Records every signal batch.
    #[derive(Default)]
    struct Script {
        alive: Cell<usize>,
        term_works: bool,
        stuck: bool,
        sent: RefCell<Vec<Vec<Signal>>>,
    }

    impl StopTarget for Script {
        fn is_gone(&self) -> bool {
            self.alive.get() == 0
        }
        fn live_count(&self) -> usize {
            self.alive.get()
        }
        fn signal_all(&self, sigs: &[Signal]) -> usize {
            self.sent.borrow_mut().push(sigs.to_vec());
            let n = self.alive.get();
            if (sigs.contains(&Signal::KILL) && !self.stuck) || (sigs.contains(&Signal::TERM) && self.term_works) {
                self.alive.set(0);
            }
            n
        }
        fn after(&self, began: Instant) -> Instant {
            began
        }
    }

    fn policy() -> StopPolicy {
        StopPolicy {
            stdin_grace: Duration::from_millis(100),
            term_grace: Duration::from_millis(300),
            kill_wait: Duration::from_millis(200),
        }
    }

    fn ms(t0: Instant, n: u64) -> Instant {
        t0 + Duration::from_millis(n)
    }

    #[test]
    fn timings_are_recorded_in_ms_with_the_maximum_and_read_back_whole() {
        let p = policy();
        let t = p.timings();
        assert_eq!((t.stdin_grace_ms, t.term_grace_ms, t.kill_wait_ms, t.max_stop_ms), (100, 300, 200, 600));
        assert_eq!(StopPolicy::from_timings(&t), p);
        let j = serde_json::to_value(t).unwrap();
        assert_eq!(
            j,
            serde_json::json!({"stdinGraceMs": 100, "termGraceMs": 300, "killWaitMs": 200, "maxStopMs": 600})
        );
        assert_eq!(p.cleanup_bound(Duration::from_secs(5)), Duration::from_millis(5500));
    }

    #[test]
    fn sigterm_and_sigcont_once_then_sigkill_after_the_grace_then_gone() {
        let t = Script { alive: Cell::new(3), ..Script::default() };
        let mut m = StopMachine::new(policy());
        let t0 = Instant::now();
        assert_eq!(m.begin(Trigger::OwnerDied, t0, &t), Some(Step::Terminated { signalled: 3 }));
        assert_eq!(*t.sent.borrow(), vec![vec![Signal::TERM, Signal::CONT]]);
        // A second trigger changes nothing: SIGTERM is sent once.
        assert_eq!(m.begin(Trigger::Timeout, ms(t0, 10), &t), None);
        assert_eq!(m.trigger(), Some(Trigger::OwnerDied));
        assert_eq!(m.advance(ms(t0, 299), &t, true), None);
        assert_eq!(m.deadline(ms(t0, 299)), Some(ms(t0, 300)));
        assert_eq!(m.advance(ms(t0, 300), &t, true), Some(Step::Escalated { remaining: 3 }));
        assert_eq!(t.sent.borrow().last(), Some(&vec![Signal::KILL]));
        assert!(m.escalated());
        assert_eq!(m.advance(ms(t0, 301), &t, true), None);
        assert_eq!(m.phase(), Phase::Gone);
    }

    #[test]
    fn a_tree_that_honours_sigterm_is_gone_without_sigkill() {
        let t = Script { alive: Cell::new(2), term_works: true, ..Script::default() };
        let mut m = StopMachine::new(policy());
        let t0 = Instant::now();
        m.begin(Trigger::Signal(Signal::TERM), t0, &t);
        // Not gone before the provider's status is known, however empty the tree.
        assert_eq!(m.advance(ms(t0, 5), &t, false), None);
        assert!(m.stopping());
        m.advance(ms(t0, 6), &t, true);
        assert_eq!(m.phase(), Phase::Gone);
        assert!(!m.escalated());
        assert_eq!(t.sent.borrow().len(), 1);
    }

    #[test]
    fn stdin_eof_waits_the_stdin_grace_before_sigterm_and_a_provider_exit_in_it_ends_the_stop() {
        let t = Script { alive: Cell::new(1), ..Script::default() };
        let mut m = StopMachine::new(policy());
        let t0 = Instant::now();
        assert_eq!(m.begin(Trigger::StdinEof, t0, &t), None);
        assert!(t.sent.borrow().is_empty(), "no signal during the stdin grace");
        assert_eq!(m.advance(ms(t0, 99), &t, false), None);
        assert!(matches!(m.advance(ms(t0, 100), &t, false), Some(Step::Terminated { .. })));

        let quiet = Script::default();
        let mut m = StopMachine::new(policy());
        m.begin(Trigger::StdinEof, t0, &quiet);
        m.advance(ms(t0, 50), &quiet, true);
        assert_eq!(m.phase(), Phase::Gone, "the provider honoured EOF and left nothing");
        assert!(quiet.sent.borrow().is_empty());
    }

    #[test]
    fn a_signal_during_the_stdin_grace_ends_the_grace_at_once() {
        let t = Script { alive: Cell::new(1), ..Script::default() };
        let mut m = StopMachine::new(policy());
        let t0 = Instant::now();
        m.begin(Trigger::StdinEof, t0, &t);
        assert!(matches!(m.begin(Trigger::Signal(Signal::INT), ms(t0, 1), &t), Some(Step::Terminated { .. })));
        assert_eq!(m.trigger(), Some(Trigger::StdinEof), "the first trigger is the one recorded");
    }

    #[test]
    fn owner_death_with_the_stdin_grace_waits_it_out_and_records_the_owner() {
        let t = Script { alive: Cell::new(1), ..Script::default() };
        let mut m = StopMachine::new(policy());
        let t0 = Instant::now();
        m.begin_with_stdin_grace(Trigger::OwnerDied, t0);
        assert!(m.stopping());
        assert_eq!(m.trigger(), Some(Trigger::OwnerDied));
        assert_eq!(m.advance(ms(t0, 99), &t, false), None);
        assert!(t.sent.borrow().is_empty(), "no signal during the stdin grace");
        assert!(matches!(m.advance(ms(t0, 100), &t, false), Some(Step::Terminated { .. })));
        // A stop already under way is not given a grace again.
        m.begin_with_stdin_grace(Trigger::StdinEof, ms(t0, 101));
        assert!(matches!(m.phase(), Phase::Terminating { .. }));
    }

    #[test]
    fn after_provider_exit_kill_sends_sigkill_at_once_in_each_phase() {
        let t0 = Instant::now();
        // The provider exits on its own with a member left: no SIGTERM, SIGKILL.
        let t = Script { alive: Cell::new(2), ..Script::default() };
        let mut m = StopMachine::new(policy()).after_provider_exit(AfterProviderExit::Kill);
        assert_eq!(m.provider_exited(t0, &t), Some(Step::Escalated { remaining: 2 }));
        assert_eq!(*t.sent.borrow(), vec![vec![Signal::KILL]]);
        assert_eq!(m.trigger(), None, "not a stop");
        // During the term grace: SIGKILL as soon as the provider is reaped.
        let t = Script { alive: Cell::new(2), ..Script::default() };
        let mut m = StopMachine::new(policy()).after_provider_exit(AfterProviderExit::Kill);
        m.begin(Trigger::Signal(Signal::TERM), t0, &t);
        assert_eq!(m.advance(ms(t0, 10), &t, false), None);
        assert_eq!(m.provider_exited(ms(t0, 11), &t), Some(Step::Escalated { remaining: 2 }));
        assert!(matches!(m.phase(), Phase::Killing { .. }));
        // During the stdin grace: likewise.
        let t = Script { alive: Cell::new(2), ..Script::default() };
        let mut m = StopMachine::new(policy()).after_provider_exit(AfterProviderExit::Kill);
        m.begin(Trigger::StdinEof, t0, &t);
        assert_eq!(m.provider_exited(ms(t0, 5), &t), Some(Step::Escalated { remaining: 2 }));
        // The default keeps the grace: SIGTERM, then the whole term grace.
        let t = Script { alive: Cell::new(2), ..Script::default() };
        let mut m = StopMachine::new(policy());
        m.begin(Trigger::Signal(Signal::TERM), t0, &t);
        assert_eq!(m.provider_exited(ms(t0, 11), &t), None);
        assert!(matches!(m.phase(), Phase::Terminating { .. }));
    }

    #[test]
    fn a_stuck_tree_gets_sigkill_on_every_wake_and_ends_unfinished_after_the_kill_wait() {
        let t = Script { alive: Cell::new(1), stuck: true, ..Script::default() };
        let mut m = StopMachine::new(policy());
        let t0 = Instant::now();
        m.begin(Trigger::OwnerDied, t0, &t);
        m.advance(ms(t0, 300), &t, true);
        assert_eq!(m.deadline(ms(t0, 300)), Some(ms(t0, 300) + KILL_RESCAN));
        m.advance(ms(t0, 320), &t, true);
        m.advance(ms(t0, 340), &t, true);
        let kills = t.sent.borrow().iter().filter(|b| b == &&vec![Signal::KILL]).count();
        assert_eq!(kills, 3, "SIGKILL at the escalation and on each wake after it");
        m.advance(ms(t0, 500), &t, true);
        assert_eq!(m.phase(), Phase::Unfinished);
    }

    #[test]
    fn a_provider_that_exits_leaving_nothing_is_gone_without_a_stop() {
        let t = Script::default();
        let mut m = StopMachine::new(policy());
        assert_eq!(m.provider_exited(Instant::now(), &t), None);
        assert_eq!(m.phase(), Phase::Gone);
        assert_eq!(m.trigger(), None);
        assert!(t.sent.borrow().is_empty());

        let left = Script { alive: Cell::new(2), ..Script::default() };
        let mut m = StopMachine::new(policy());
        assert!(matches!(m.provider_exited(Instant::now(), &left), Some(Step::Terminated { signalled: 2 })));
        assert_eq!(m.trigger(), None, "cleaning up after the provider is not a stop trigger");
    }

    /// One table gives a trigger's word (events, `stopReason`) and its cause in words (the log
    /// markers `stopping: ...` and `cleanup triggered: ...`).
    #[test]
    fn a_trigger_has_one_word_and_one_cause() {
        let all = [
            (Trigger::Signal(Signal::TERM), "signal", "SIGTERM (stop requested)"),
            (Trigger::OwnerDied, "owner", "the owner exited"),
            (Trigger::StdinEof, "stdinEof", "stdin reached EOF"),
            (Trigger::Timeout, "timeout", "the turn timeout expired"),
            (Trigger::ProviderExited, "providerExited", "the command exited; stopping what it left running"),
            (Trigger::SupervisorKilled, "supervisorKilled", "the supervisor was killed"),
        ];
        for (t, word, cause) in all {
            assert_eq!(t.name(), word);
            assert_eq!(t.to_string(), cause);
            assert_eq!(serde_json::to_value(crate::status::StopReason::from(t)).unwrap(), word);
        }
    }

    /// A stop taken over from a killed keeper goes on in the grace it had left, without a second
    /// SIGTERM; at the grace's end it escalates as any stop does.
    #[test]
    fn a_resumed_stop_sends_no_second_term_and_escalates_at_the_grace_it_had_left() {
        let tree = Script { alive: Cell::new(2), ..Script::default() };
        let mut m = StopMachine::new(policy());
        let t0 = Instant::now();
        m.resume(Trigger::SupervisorKilled, ms(t0, 50));
        assert_eq!(m.phase(), Phase::Terminating { until: ms(t0, 50) });
        assert_eq!(m.trigger(), Some(Trigger::SupervisorKilled));
        assert!(tree.sent.borrow().is_empty(), "no signal at the take-over");
        assert_eq!(m.advance(ms(t0, 10), &tree, false), None);
        assert!(matches!(m.advance(ms(t0, 50), &tree, false), Some(Step::Escalated { remaining: 2 })));
        assert_eq!(*tree.sent.borrow(), vec![vec![Signal::KILL]]);
    }
}
