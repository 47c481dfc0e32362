//! The one place with `unsafe` and raw libc calls.
//!
//! Everything above this module sees safe functions and small types that make the kernel's rules
//! explicit: a [`Pid`] is not a [`Pgid`], a [`Signal`] has a name, a wait status is an enum. Each
//! `unsafe` block carries a `// SAFETY:` line. Expected races (ESRCH, ECHILD) are returned as
//! values, not errors, so callers can handle them quietly (as tini does).

pub mod cgroup;
#[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
pub mod exec;
#[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
pub mod keep;
pub mod process;
pub mod procfs;
pub mod signal;
pub mod sysconf;

pub use process::{Pgid, Pid, WaitStatus};
pub use signal::Signal;
