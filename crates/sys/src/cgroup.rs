//! The raw calls of the cgroup v2 tier (Linux): what kind of file system a path is on, whether
//! this process may write a file, and the pre-exec step that moves a forked child into its cgroup.
//!
//! Everything else about cgroups (reading `cgroup.events`, writing `cgroup.kill`, `rmdir`) is
//! plain file I/O and lives in `sheepdog_core::cgroup`.

use std::io;
use std::os::fd::RawFd;
use std::path::Path;

use super::process::borrow;

/// `CGROUP2_SUPER_MAGIC` from `linux/magic.h`: the `f_type` `statfs(2)` reports for cgroup2.
pub const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

/// The file system type (`statfs(2)` `f_type`) of the file system holding `path`.
///
/// Errors: the OS error of `statfs` (ENOENT, EACCES, ...); EINVAL for a path with a NUL byte.
#[cfg(target_os = "linux")]
pub fn fs_type(path: &Path) -> io::Result<i64> {
    #[allow(clippy::unnecessary_cast)]
    Ok(rustix::fs::statfs(path)?.f_type as i64)
}

#[cfg(not(target_os = "linux"))]
pub fn fs_type(_path: &Path) -> io::Result<i64> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// `access(path, W_OK)`: may this process write the file (with its real uid, as the kernel
/// checks a cgroup migration's permission on the writer)?
///
/// Errors: EACCES, EROFS (a read-only mount), ENOENT, ...
pub fn writable(path: &Path) -> io::Result<()> {
    Ok(rustix::fs::access(path, rustix::fs::Access::WRITE_OK)?)
}

/// The fds a forked child needs to join its cgroup before `exec`: `procs`, the tree cgroup's
/// `cgroup.procs` opened for writing, and `report`, the write end of a pipe on which a failed
/// join leaves its errno (so the parent can tell "could not join" from "could not exec"). Both
/// are close-on-exec and owned by the parent; the child only borrows the numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JoinFds {
    /// The tree cgroup's directory, for `clone3(CLONE_INTO_CGROUP)`.
    pub dir: RawFd,
    pub procs: RawFd,
    pub report: RawFd,
    /// The read end of the report pipe (non-blocking), read by the parent after a failed spawn.
    pub report_read: RawFd,
}

/// In the forked child, before `exec` (async-signal-safe only: rustix's `write` is one system
/// call that neither allocates nor locks): writes `0` to `cgroup.procs`, which moves the calling
/// process into the cgroup, so the command and everything it starts runs inside it from its
/// first instruction. On failure the errno goes to `report` and is returned. The fds are the
/// parent's, open across the fork.
pub fn join_in_child(fds: JoinFds) -> io::Result<()> {
    let code = match borrow(&fds.procs).map(|procs| rustix::io::write(procs, b"0")) {
        Some(Ok(1)) => return Ok(()),
        Some(Err(e)) => e.raw_os_error(),
        Some(Ok(_)) => libc::EIO,
        None => libc::EBADF,
    };
    if let Some(report) = borrow(&fds.report) {
        let _ = rustix::io::write(report, &code.to_ne_bytes());
    }
    Err(io::Error::from_raw_os_error(code))
}

/// After a spawn failed: the errno a failed join left on the report pipe, if any (the spawn
/// then failed because the child could not join its cgroup, not because of `exec`).
pub fn take_join_error(fds: JoinFds) -> Option<io::Error> {
    let mut code = [0u8; 4];
    let n = rustix::io::read(borrow(&fds.report_read)?, &mut code).ok()?;
    (n == 4).then(|| io::Error::from_raw_os_error(i32::from_ne_bytes(code)))
}

/// Set (to anything) to make the provider's spawn act as on a kernel without `clone3`
/// (`sheepdog_core::spawn::spawn_joined`): std forks and the child joins its cgroup by writing to
/// `cgroup.procs` (for tests of that path; Linux < 5.7).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // only the clone3 spawn (Linux) reads it
pub const NO_CLONE3_ENV: &str = "SHEEPDOG_CGROUP_NO_CLONE3";
