//! A process's identity, and what the kernel says of an entry's recorded processes. A process
//! is (boot id, pid, start time in clock ticks, uid): nothing is trusted, and nothing signalled,
//! unless all four still match (ARCHITECTURE.md, "The registry and identity"). What looks at the
//! kernel for an entry (`this_boot`, `supervisor_alive`, `owner_gone`, ...) is the [`Probe`]
//! trait, kept apart from `entry`, which is data only, and below everything that asks it. A
//! caller imports the trait by name (`use crate::identity::Probe`), so each module that reads
//! the kernel through an entry shows it in its imports, where tests/architecture.rs sees it.

use crate::entry::{CleanupState, Entry, ProcRef};
use crate::sys::{Pid, process, procfs};

/// What the kernel says of an entry's recorded processes: each check is by full identity (boot,
/// pid, start time, uid), never by pid alone. Implemented for [`Entry`] only.
pub trait Probe {
    /// True if the entry was recorded during this boot.
    fn this_boot(&self) -> bool;
    /// How much of the turn timeout (`--timeout`) is left now (zero once it passed), if one is
    /// set. Within the boot the entry was made in, by the boot clock: clock ticks since its
    /// supervisor started (`/proc/<pid>/stat` field 22 against `/proc/uptime`, 10 ms steps),
    /// which a wall-clock step (NTP, a suspended VM, `date -s`) does not move, as systemd's
    /// timers use CLOCK_MONOTONIC; by the wall clock otherwise.
    fn timeout_left(&self) -> Option<std::time::Duration>;
    /// True once the turn timeout has passed ([`Probe::timeout_left`]).
    fn timeout_passed(&self) -> bool;
    /// True if the recorded supervisor, or its keeper, is still that process (boot, pid, start
    /// time) and alive: either one stops the tree when the other is killed (`crate::keeper`).
    fn supervisor_alive(&self) -> bool;
    /// The live process of the supervisor's chain to signal and wait on: the supervisor, else
    /// (after its SIGKILL, while the keeper stops the tree) the keeper. `None` if both are gone.
    fn live_supervisor(&self) -> Option<ProcRef>;
    /// The root below which the entry's tree hangs while it is supervised: the keeper while it
    /// lives (the tree is its descendants), else the supervisor.
    fn tree_root(&self) -> Option<i32>;
    /// True while the entry is `starting` and its `sheepdog start` process still lives.
    fn starter_alive(&self) -> bool;
    /// True while a claimed cleanup has no result and its runner still lives.
    fn cleanup_running(&self) -> bool;
    /// True while a cleanup is set, has not been claimed, and could still run (this boot): a
    /// stop, owner death, the turn timeout or `reap` will run it; `clear` refuses to drop it.
    fn cleanup_pending(&self) -> bool;
    /// True if the entry has an owner and it is no longer that process (identity-checked when
    /// its start time was recorded).
    fn owner_gone(&self) -> bool;
    /// True if the recorded provider is still that process and alive.
    fn provider_alive(&self) -> bool;
}

/// Ms since the entry began: by the boot clock from its supervisor's start within this boot,
/// else by the wall clock from `started_at`.
fn elapsed_ms(e: &Entry) -> u64 {
    let by_boot = match (e.supervisor.and_then(|s| s.start_time), procfs::now_ticks()) {
        (Some(start), Some(now)) if e.this_boot() => {
            let hz = crate::sys::sysconf::clock_ticks_per_second().max(1);
            Some(now.saturating_sub(start) * 1000 / hz)
        }
        _ => None,
    };
    by_boot.unwrap_or_else(|| e.wall_elapsed_ms())
}

impl Probe for Entry {
    fn this_boot(&self) -> bool {
        self.boot_id == procfs::boot_id()
    }

    fn timeout_left(&self) -> Option<std::time::Duration> {
        let t = self.timeout_ms?;
        Some(std::time::Duration::from_millis(t.saturating_sub(elapsed_ms(self))))
    }

    fn timeout_passed(&self) -> bool {
        self.timeout_left().is_some_and(|l| l.is_zero())
    }

    fn supervisor_alive(&self) -> bool {
        self.this_boot() && (self.supervisor.is_some_and(alive) || self.keeper.is_some_and(alive))
    }

    fn live_supervisor(&self) -> Option<ProcRef> {
        if !self.this_boot() {
            return None;
        }
        [self.supervisor, self.keeper].into_iter().flatten().find(|p| alive(*p))
    }

    fn tree_root(&self) -> Option<i32> {
        match self.keeper {
            Some(k) if alive(k) => Some(k.pid),
            _ => self.supervisor.map(|s| s.pid),
        }
    }

    fn starter_alive(&self) -> bool {
        self.status == crate::status::Status::Starting && self.this_boot() && self.starter.is_some_and(alive)
    }

    fn cleanup_running(&self) -> bool {
        match self.cleanup_state {
            CleanupState::Claimed { runner, .. } => self.this_boot() && runner.is_some_and(alive),
            CleanupState::Running { runner, child, .. } => {
                self.this_boot() && (runner.is_some_and(alive) || alive(child))
            }
            CleanupState::Pending | CleanupState::Done { .. } => false,
        }
    }

    fn cleanup_pending(&self) -> bool {
        self.cleanup.is_some() && self.cleanup_state == CleanupState::Pending && self.this_boot()
    }

    fn owner_gone(&self) -> bool {
        let Some(owner) = self.owner else { return false };
        let Some(pid) = Pid::new(owner.pid) else { return false };
        if !self.this_boot() {
            return true;
        }
        match owner.start_time {
            Some(t) => procfs::start_time(pid) != Some(t),
            None => !procfs::is_alive(pid),
        }
    }

    fn provider_alive(&self) -> bool {
        self.this_boot() && self.provider.is_some_and(alive)
    }
}

/// True if `p` is alive with exactly its start time (and our uid); false when its start time
/// is unknown.
pub fn alive(p: ProcRef) -> bool {
    let (Some(pid), Some(t)) = (Pid::new(p.pid), p.start_time) else {
        return false;
    };
    procfs::start_time(pid) == Some(t) && procfs::uid(pid) == Some(process::getuid())
}

/// `pid` as an entry records it: with its start time, when it can be read.
pub fn proc_ref(pid: Pid) -> ProcRef {
    ProcRef::new(pid.as_raw(), procfs::start_time(pid))
}

/// This process, as an entry records it ([`proc_ref`]).
pub fn me() -> ProcRef {
    proc_ref(process::getpid())
}
