//! `sheepdog-sys`: the one place with `unsafe` and raw libc calls, for the `sheepdog-core`
//! library (which forbids `unsafe`) and, through its `os` module, the front ends.
//!
//! Everything above this crate sees safe functions and small types that make the kernel's rules
//! explicit: a [`Pid`] is not a [`Pgid`], a [`Signal`] has a name, a wait status is an enum. Each
//! `unsafe` block carries a `// SAFETY:` line. Expected races (ESRCH, ECHILD) are returned as
//! values, not errors, so callers can handle them quietly (as tini does).

// Each `unsafe` block with a `// SAFETY:` line (clippy checks it).
#![deny(clippy::undocumented_unsafe_blocks)]

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

/// The `errno` values the crates above compare an `io::Error::raw_os_error()` with: named here,
/// so that no other crate of the workspace names libc.
pub mod errno {
    pub use libc::{
        E2BIG, EACCES, EBUSY, EISDIR, ELOOP, ENAMETOOLONG, ENOENT, ENOEXEC, ENOSYS, ENOTDIR, ENOTEMPTY, ENXIO, EPERM,
        ETXTBSY,
    };
}
pub use signal::Signal;
