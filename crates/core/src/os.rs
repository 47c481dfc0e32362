//! What the binaries and the tests may ask of the kernel, and nothing more: the public face of
//! the `sheepdog-sys` crate and the crate-private `tree` module (the only `unsafe` stays behind it).
//!
//! - [`Pid`], [`Pgid`], [`Signal`], [`WaitStatus`]: the values every call takes.
//! - [`procfs`]: read-only views of `/proc` (a process's stat, children, descendants, start
//!   time, command line, environment; the boot id). A zombie is never "alive".
//! - [`process`]: the handful of process calls a front end or a test needs (its own uid and
//!   parent, becoming a subreaper and reaping, a signal by pid, whether a peer hung up, whether
//!   two processes share one address space).
//! - [`signal_member`], [`Member`]: a signal only to the process that was seen (pidfd, then the
//!   start time), how tests kill what they spawned and nothing else.
//! - [`Census`]: one `/proc` scan shared by many registry entries.
//! - [`die_by`]: end the calling process the way a signal would (what `run` does last).
//! - [`SignalPipe`]: signals as bytes on a self-pipe, for a front end's own loop (`top`).

pub use crate::sys::signal::{SignalPipe, die_by};
pub use crate::sys::sysconf::arg_max;
pub use crate::sys::{Pgid, Pid, Signal, WaitStatus};
pub use crate::tree::{Census, Member, signal_member};

/// Read-only views of `/proc` (Linux; elsewhere they find nothing).
pub mod procfs {
    pub use crate::sys::procfs::{
        Stat, all, boot_id, children, cmdline, descendants, environ_value, is_alive, live_group_members, start_time,
        stat,
    };
}

/// The process calls a front end or a test needs.
pub mod process {
    pub use crate::sys::process::{POLL_IN, PollFd, Sent, getppid, getuid, kill, kill_group, peer_closed, poll, reap};
    #[cfg(target_os = "linux")]
    pub use crate::sys::process::{set_child_subreaper, shares_memory};
}
