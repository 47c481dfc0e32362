//! The one stop: every reason to stop a process tree takes this path.
//!
//! ```text
//! trigger ──► [stdin grace: let the provider exit on its own] ──► SIGTERM (+SIGCONT) to the group
//!         and every tracked descendant ──► wait ≤ term grace for "all gone" ──► SIGKILL all
//!         ──► wait ≤ kill wait for the kernel to finish ──► gone | unfinished
//! ```
//!
//! SIGCONT follows SIGTERM so a stopped (`T`) process can act on it, as systemd's `KillMode` does.
//! SIGTERM is sent once; SIGKILL is re-sent on every wake of the kill phase, so a process forked
//! between a scan and a signal is caught by the next scan.
//!
//! [`StopMachine`] holds the state (running → stdin grace → terminating → killing → gone or
//! unfinished); the supervisor's event loop and the out-of-supervisor stop ([`stop_blocking`],
//! used by `sheepdog stop` and `reap` when a supervisor is gone) both drive it.

use std::time::{Duration, Instant};

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
    /// use sheepdog::stop::{StopPolicy, MAX_STOP_MS};
    /// assert_eq!(StopPolicy::default().max_stop().as_millis() as u64, MAX_STOP_MS); // 5500
    /// ```
    pub fn max_stop(&self) -> Duration {
        self.stdin_grace + self.term_grace + self.kill_wait
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
}

impl Trigger {
    /// The name used in events and the registry: `signal`, `owner`, `stdinEof`, `timeout`,
    /// `providerExited`.
    pub fn name(&self) -> &'static str {
        match self {
            Trigger::Signal(_) => "signal",
            Trigger::OwnerDied => "owner",
            Trigger::StdinEof => "stdinEof",
            Trigger::Timeout => "timeout",
            Trigger::ProviderExited => "providerExited",
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

/// The stop sequence as a small state machine over a [`Tree`].
#[derive(Debug)]
pub struct StopMachine {
    policy: StopPolicy,
    phase: Phase,
    /// The first real stop trigger (never `ProviderExited`).
    trigger: Option<Trigger>,
    escalated: bool,
}

impl StopMachine {
    pub fn new(policy: StopPolicy) -> StopMachine {
        StopMachine { policy, phase: Phase::Running, trigger: None, escalated: false }
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
    pub fn begin(&mut self, trigger: Trigger, now: Instant, tree: &Tree) -> Option<Step> {
        if trigger != Trigger::ProviderExited && self.trigger.is_none() {
            self.trigger = Some(trigger);
        }
        match (self.phase, trigger) {
            (Phase::Running, Trigger::StdinEof) => {
                self.phase = Phase::StdinGrace { until: now + self.policy.stdin_grace };
                None
            }
            (Phase::Running, _) | (Phase::StdinGrace { .. }, _) => Some(self.terminate(now, tree)),
            _ => None,
        }
    }

    fn terminate(&mut self, now: Instant, tree: &Tree) -> Step {
        let signalled = tree.signal_all(&[Signal::TERM, Signal::CONT]);
        self.phase = Phase::Terminating { until: now + self.policy.term_grace };
        Step::Terminated { signalled }
    }

    /// Re-evaluates after any event: moves to `Gone` when nothing is alive, and along the
    /// deadlines otherwise. `provider_done` says the provider itself has been reaped (a
    /// supervisor must not call the tree gone before it knows the provider's status).
    pub fn advance(&mut self, now: Instant, tree: &Tree, provider_done: bool) -> Option<Step> {
        if let Phase::StdinGrace { until } = self.phase {
            if provider_done {
                // The provider honoured EOF; what it left behind still gets the full sequence.
                if tree.is_gone() {
                    self.phase = Phase::Gone;
                    return None;
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
            Phase::Terminating { until } if now >= until => {
                let remaining = tree.live().len();
                tree.signal(Signal::KILL);
                self.escalated = true;
                self.phase = Phase::Killing { until: now + self.policy.kill_wait };
                Some(Step::Escalated { remaining })
            }
            Phase::Killing { until } => {
                if now >= until {
                    self.phase = Phase::Unfinished;
                } else {
                    tree.signal(Signal::KILL);
                }
                None
            }
            _ => None,
        }
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
    pub fn provider_exited(&mut self, now: Instant, tree: &Tree) -> Option<Step> {
        match self.phase {
            Phase::Running => {
                if tree.is_gone() {
                    self.phase = Phase::Gone;
                    None
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
