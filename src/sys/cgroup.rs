//! The raw calls of the cgroup v2 tier (Linux): what kind of file system a path is on, whether
//! this process may write a file, and the pre-exec step that moves a forked child into its cgroup.
//!
//! Everything else about cgroups (reading `cgroup.events`, writing `cgroup.kill`, `rmdir`) is
//! plain file I/O and lives in [`crate::cgroup`].

use std::ffi::CString;
use std::io;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// `CGROUP2_SUPER_MAGIC` from `linux/magic.h`: the `f_type` `statfs(2)` reports for cgroup2.
pub const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// The file system type (`statfs(2)` `f_type`) of the file system holding `path`.
///
/// Errors: the OS error of `statfs` (ENOENT, EACCES, ...); EINVAL for a path with a NUL byte.
#[cfg(target_os = "linux")]
pub fn fs_type(path: &Path) -> io::Result<i64> {
    let c = c_path(path)?;
    // SAFETY: c is a valid NUL-terminated path; st is a valid out-pointer, zeroed first.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        if libc::statfs(c.as_ptr(), &mut st) != 0 {
            return Err(io::Error::last_os_error());
        }
        #[allow(clippy::unnecessary_cast)]
        Ok(st.f_type as i64)
    }
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
    let c = c_path(path)?;
    // SAFETY: c is a valid NUL-terminated path; access has no other preconditions.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
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

/// In the forked child, before `exec` (async-signal-safe only): writes `0` to `cgroup.procs`,
/// which moves the calling process into the cgroup, so the command and everything it starts
/// runs inside it from its first instruction. On failure the errno goes to `report` and is
/// returned.
pub(crate) fn join_in_child(fds: JoinFds) -> io::Result<()> {
    // SAFETY: write on two fds the parent opened and keeps open across the fork; the buffers
    // are valid for their lengths; __errno_location / __error are async-signal-safe.
    unsafe {
        if libc::write(fds.procs, b"0".as_ptr().cast(), 1) == 1 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        let code: i32 = err.raw_os_error().unwrap_or(libc::EIO);
        libc::write(fds.report, (&code as *const i32).cast(), 4);
        Err(err)
    }
}

/// After a spawn failed: the errno a failed join left on the report pipe, if any (the spawn
/// then failed because the child could not join its cgroup, not because of `exec`).
pub fn take_join_error(fds: JoinFds) -> Option<io::Error> {
    let mut code: i32 = 0;
    // SAFETY: reads at most 4 bytes into a valid i32 from a non-blocking fd the caller owns.
    let n = unsafe { libc::read(fds.report_read, (&mut code as *mut i32).cast(), 4) };
    (n == 4).then(|| io::Error::from_raw_os_error(code))
}

/// Set (to anything) to make [`spawn_into`] act as on a kernel without `clone3`, so the child
/// joins its cgroup by writing to `cgroup.procs` (for tests of that path; Linux < 5.7).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // only clone3 (Linux) reads it
pub const NO_CLONE3_ENV: &str = "SHEEPDOG_CGROUP_NO_CLONE3";

/// How [`spawn_into`] failed.
#[derive(Debug)]
pub enum SpawnInto {
    /// `clone3` itself failed (ENOSYS before Linux 5.7, EINVAL, EBUSY, EOPNOTSUPP for a cgroup
    /// that cannot take processes, ...): nothing was started; the caller forks and has the child
    /// join by writing `cgroup.procs`, whose own failure is the one reported.
    Clone,
    /// The child started in the cgroup but `exec` (or a pre-exec step) failed with this error;
    /// the child has been reaped.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))] // elsewhere nothing is started
    Exec(io::Error),
}

/// `clone3` flag: start the child in the cgroup whose directory fd is in `cgroup` (Linux 5.7).
#[cfg(target_os = "linux")]
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// The kernel's `struct clone_args` (version 2, 88 bytes, with `cgroup`).
#[cfg(target_os = "linux")]
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// Starts `cmd` with its first instruction already inside the cgroup of directory `dir`:
/// `clone3(CLONE_INTO_CGROUP)` (fork semantics), then, in the child, `Command::exec` (which runs
/// the pre-exec closures, sets up stdio, cwd and environment, and execs); an exec error travels
/// back on a close-on-exec pipe, as std's own spawn does. Unlike a write to `cgroup.procs`,
/// this takes no write lock on the kernel's cgroup threadgroup semaphore, whose RCU grace
/// period made each `run` several milliseconds slower on a busy host.
///
/// Call only from a single-threaded process (the supervisor is): the child runs Rust code
/// between the clone and `exec`, which is sound only when no other thread could have held a
/// lock at the clone. Returns the child's pid.
#[cfg(target_os = "linux")]
pub fn spawn_into(cmd: &mut std::process::Command, dir: RawFd) -> Result<super::Pid, SpawnInto> {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    if std::env::var_os(NO_CLONE3_ENV).is_some() {
        return Err(SpawnInto::Clone);
    }
    let (r, w) = super::signal::pipe_cloexec().map_err(|_| SpawnInto::Clone)?;
    let args = CloneArgs {
        flags: CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: dir as u64,
        ..CloneArgs::default()
    };
    // SAFETY: a valid clone_args of the size passed; no CLONE_VM, so the child gets a copy of
    // the address space as with fork. The process is single-threaded (documented contract).
    let rc = unsafe { libc::syscall(libc::SYS_clone3, &args as *const CloneArgs, std::mem::size_of::<CloneArgs>()) };
    if rc < 0 {
        return Err(SpawnInto::Clone);
    }
    if rc == 0 {
        // The child: exec, or report why not and exit without running any destructor.
        drop(r);
        let err = cmd.exec();
        let code: i32 = err.raw_os_error().unwrap_or(libc::EIO);
        // SAFETY: write of 4 bytes from a valid i32 to an fd we own; _exit never returns.
        unsafe {
            libc::write(w.as_raw_fd(), (&code as *const i32).cast(), 4);
            libc::_exit(127);
        }
    }
    drop(w);
    let pid = super::Pid::new(rc as i32).ok_or(SpawnInto::Clone)?;
    let mut code: i32 = 0;
    let n = loop {
        // SAFETY: reads at most 4 bytes into a valid i32 from the pipe's read end we own.
        let n = unsafe { libc::read(r.as_raw_fd(), (&mut code as *mut i32).cast(), 4) };
        if n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        break n;
    };
    if n == 4 {
        let _ = super::process::reap(pid, true);
        return Err(SpawnInto::Exec(io::Error::from_raw_os_error(code)));
    }
    Ok(pid)
}

#[cfg(not(target_os = "linux"))]
pub fn spawn_into(_cmd: &mut std::process::Command, _dir: RawFd) -> Result<super::Pid, SpawnInto> {
    Err(SpawnInto::Clone)
}
