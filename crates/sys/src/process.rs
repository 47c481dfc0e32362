//! Process ids, groups, signals to them, reaping, pidfds, the subreaper bit and `poll`.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use super::signal::Signal;

/// A process id (always > 0). Not a group id: see [`Pgid`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pid(i32);

/// A process group id (always > 0). Signalling a group is `kill(-pgid, sig)`; the type keeps the
/// sign rule in one place (cargo-nextest's `ChildPid::for_kill` does the same).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pgid(i32);

impl Pid {
    /// `None` for 0 and negative numbers, which `kill` would read as groups.
    pub fn new(raw: i32) -> Option<Pid> {
        (raw > 0).then_some(Pid(raw))
    }
    pub fn as_raw(self) -> i32 {
        self.0
    }
    /// The group this pid leads, for a process started with `setpgid(0, 0)`.
    pub fn as_group(self) -> Pgid {
        Pgid(self.0)
    }
}

impl Pgid {
    pub const fn new(raw: i32) -> Option<Pgid> {
        if raw > 0 { Some(Pgid(raw)) } else { None }
    }
    pub fn as_raw(self) -> i32 {
        self.0
    }
}

impl std::fmt::Display for Pid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::fmt::Display for Pgid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// How a child ended, from `waitpid`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitStatus {
    Exited(i32),
    /// Ended by the signal; true when the kernel wrote a core dump (`WCOREDUMP`).
    Signaled(Signal, bool),
}

/// This process's id.
pub fn getpid() -> Pid {
    // SAFETY: getpid has no preconditions and cannot fail.
    Pid(unsafe { libc::getpid() })
}

/// The parent's id; 1 (or a subreaper's) once the parent died.
pub fn getppid() -> i32 {
    // SAFETY: getppid has no preconditions and cannot fail.
    unsafe { libc::getppid() }
}

/// The real uid of this process.
pub fn getuid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// Result of a signal sent to something that may already be gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sent {
    Delivered,
    /// ESRCH: nothing to signal (an expected race, not an error).
    Gone,
}

fn sent(rc: libc::c_int) -> io::Result<Sent> {
    if rc == 0 {
        return Ok(Sent::Delivered);
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::ESRCH) => Ok(Sent::Gone),
        _ => Err(err),
    }
}

/// `kill(pid, sig)`. Prefer `PidFd::send` when the pid may have been reused.
pub fn kill(pid: Pid, sig: Signal) -> io::Result<Sent> {
    // SAFETY: kill with a positive pid has no memory-safety preconditions.
    sent(unsafe { libc::kill(pid.0, sig.as_raw()) })
}

/// `kill(-pgid, sig)`: every member of the group.
pub fn kill_group(pgid: Pgid, sig: Signal) -> io::Result<Sent> {
    // SAFETY: as for kill; the negative sign selects the group.
    sent(unsafe { libc::kill(-pgid.0, sig.as_raw()) })
}

/// `kill(pid, 0)`: true if a process (zombies included) has this pid. See
/// [`super::procfs::is_alive`] for the check that counts zombies as dead.
pub fn exists(pid: Pid) -> bool {
    signal0(pid.0)
}

/// `kill(pid, 0)` answers EPERM: the process exists and this one may not signal it (another
/// user's, a setuid helper that became root).
pub fn signal_denied(pid: Pid) -> bool {
    // SAFETY: signal 0 only checks existence and permission.
    let rc = unsafe { libc::kill(pid.0, 0) };
    rc != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// `kill(-pgid, 0)`: true if the group has any member, zombies included.
pub fn group_exists(pgid: Pgid) -> bool {
    signal0(-pgid.0)
}

/// `kill(target, 0)`: something answers (EPERM counts: it exists, just not ours).
fn signal0(target: i32) -> bool {
    // SAFETY: signal 0 only checks existence and permission.
    let rc = unsafe { libc::kill(target, 0) };
    rc == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

fn decode(status: libc::c_int) -> Option<WaitStatus> {
    if libc::WIFEXITED(status) {
        Some(WaitStatus::Exited(libc::WEXITSTATUS(status)))
    } else if libc::WIFSIGNALED(status) {
        Signal::from_raw(libc::WTERMSIG(status)).map(|s| WaitStatus::Signaled(s, libc::WCOREDUMP(status)))
    } else {
        None
    }
}

/// Reaps one exited child of this process without blocking: `waitpid(-1, WNOHANG)`.
///
/// Returns `None` when no child has exited (or there are no children: ECHILD is expected).
pub fn reap_any() -> Option<(Pid, WaitStatus)> {
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: status is a valid out-pointer.
        let rc = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if rc > 0 {
            match decode(status) {
                Some(ws) => return Some((Pid(rc), ws)),
                None => continue, // stopped/continued reports: not an exit
            }
        }
        if rc < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return None;
    }
}

/// Waits for one specific child: `waitpid(pid, 0)`, or with `WNOHANG` when `block` is false.
pub fn reap(pid: Pid, block: bool) -> io::Result<Option<WaitStatus>> {
    loop {
        let mut status: libc::c_int = 0;
        let flags = if block { 0 } else { libc::WNOHANG };
        // SAFETY: status is a valid out-pointer.
        let rc = unsafe { libc::waitpid(pid.0, &mut status, flags) };
        if rc == pid.0 {
            if let Some(ws) = decode(status) {
                return Ok(Some(ws));
            }
            continue;
        }
        if rc == 0 {
            return Ok(None);
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return Err(err);
    }
}

/// What `waitid` says of this process's children: see [`children_state`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
// Elsewhere the state is unknown ([`children_state`] gives `None`): no variant is made.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub enum Children {
    /// No child at all (`ECHILD`).
    None,
    /// A child has exited and waits to be reaped by this process.
    Reapable,
    /// Children exist, but none can be reaped now: each is running (or stopped), or is a zombie
    /// that only its outside tracer can collect (a `gdb -p`'d process: the kernel shows a traced
    /// zombie to its real parent only after the tracer lets go). Not proof that one lives.
    Unreaped,
}

/// The state of this process's children in process group `pgid`, or with `pgid` `None` of all
/// its children: `waitid(P_PGID | P_ALL, WEXITED | WNOHANG | WNOWAIT)`, which reaps nothing. One
/// pass over the kernel's list of this process's children, where reading
/// `/proc/self/task/*/children` costs a walk of that list per pid it prints (thousands of zombies
/// after a fork storm make that quadratic). Linux; elsewhere `None`: unknown, and the caller
/// looks at `/proc` instead.
#[cfg(target_os = "linux")]
pub fn children_state(pgid: Option<Pgid>) -> Option<Children> {
    let (idtype, id) = match pgid {
        Some(g) => (libc::P_PGID, g.0 as libc::id_t),
        None => (libc::P_ALL, 0),
    };
    loop {
        // SAFETY: all-zero is a valid siginfo_t; waitid writes at most one siginfo_t into it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: info is a valid out-pointer; WNOWAIT leaves every child as it was.
        let rc = unsafe { libc::waitid(idtype, id, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT) };
        if rc == 0 {
            // With WNOHANG, a zero si_pid says children exist but none is waitable.
            // SAFETY: waitid returned 0, so info is initialised (all-zero when nothing was waitable).
            let pid = unsafe { info.si_pid() };
            return Some(if pid == 0 { Children::Unreaped } else { Children::Reapable });
        }
        match io::Error::last_os_error().raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::ECHILD) => return Some(Children::None),
            _ => return None,
        }
    }
}

/// True if `pid` is a child of this process that has exited and waits to be reaped (a zombie):
/// `waitid(P_PID, WEXITED | WNOHANG | WNOWAIT)`, which reaps nothing and costs one syscall
/// where reading `/proc/<pid>/stat` costs three. A leader whose other threads still run is not
/// reported (the kernel waits for the whole group). False for anything else, and on error.
#[cfg(target_os = "linux")]
pub fn is_zombie_child(pid: Pid) -> bool {
    loop {
        // SAFETY: all-zero is a valid siginfo_t; waitid writes at most one siginfo_t into it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: info is a valid out-pointer; WNOWAIT leaves the child as it was.
        let rc = unsafe {
            libc::waitid(libc::P_PID, pid.0 as libc::id_t, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT)
        };
        if rc == 0 {
            // SAFETY: waitid returned 0, so info is initialised; si_pid is 0 when nothing exited.
            return unsafe { info.si_pid() } == pid.0;
        }
        if io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return false;
        }
    }
}

/// See the Linux version: never known here.
#[cfg(not(target_os = "linux"))]
pub fn is_zombie_child(_pid: Pid) -> bool {
    false
}

/// See the Linux version: unknown here.
#[cfg(not(target_os = "linux"))]
pub fn children_state(_pgid: Option<Pgid>) -> Option<Children> {
    None
}

/// Marks this process a child subreaper (`PR_SET_CHILD_SUBREAPER`, Linux 3.4+): orphaned
/// descendants are re-parented to it instead of to init, so it can track and reap them.
#[cfg(target_os = "linux")]
pub fn set_child_subreaper() -> io::Result<()> {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes an integer flag; no pointers.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// True if processes `a` and `b` share one address space (`kcmp(KCMP_VM)`, Linux 3.5): a
/// supervisor and the keeper it cloned with `CLONE_VM` do (`sheepdog_core::keeper`). For measuring
/// memory, where a shared address space counts once.
///
/// Errors: the call's (ESRCH for a process that is gone, EPERM without ptrace read access), as
/// `io::Error`.
#[cfg(target_os = "linux")]
pub fn shares_memory(a: Pid, b: Pid) -> io::Result<bool> {
    const KCMP_VM: libc::c_long = 1;
    // SAFETY: kcmp takes two pids, a type and two unused integers; no memory is passed.
    let rc = unsafe { libc::syscall(libc::SYS_kcmp, a.0 as libc::c_long, b.0 as libc::c_long, KCMP_VM, 0, 0) };
    match rc {
        0 => Ok(true),
        r if r > 0 => Ok(false),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Which side of a [`fork`] this process is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forked {
    /// The original process; the child's pid.
    Parent(Pid),
    /// The new process, a copy of the original that goes on running the same code.
    Child,
}

/// `fork()` without `exec`: the supervisor's keeper (`sheepdog_core::keeper`) is a copy of the
/// supervisor that goes on running Rust code. Only sound in a single-threaded process (after a
/// fork only the calling thread exists, and a lock another thread held would stay locked
/// forever); the callers are the supervisor binaries, which never start a thread.
///
/// Errors: EAGAIN / ENOMEM from the kernel.
pub fn fork() -> io::Result<Forked> {
    // SAFETY: the caller is single-threaded (see above), so the child inherits no lock held
    // by another thread and may go on allocating and running ordinary code.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(Pid(pid))),
    }
}

/// One `write(2)` of `buf` to a raw fd this process owns; EINTR is retried. Returns the bytes
/// written. Errors: the write's.
pub fn write_raw(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    loop {
        // SAFETY: buf is valid for buf.len() bytes; a closed fd yields EBADF.
        let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(err);
        }
    }
}

/// One `read(2)` from a raw fd this process owns into `buf`; EINTR is retried. Returns the
/// bytes read (0 at EOF). Errors: the read's (EAGAIN on an empty non-blocking fd).
pub fn read_raw(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: buf is valid for buf.len() bytes; a closed fd yields EBADF.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(err);
        }
    }
}

/// Moves this process into a process group of its own (`setpgid(0, 0)`), so that a signal to
/// the group it came from (a host's `kill(-pgid)`) no longer reaches it.
pub fn own_process_group() -> io::Result<()> {
    // SAFETY: setpgid takes two integers; no pointers.
    if unsafe { libc::setpgid(0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A pidfd (Linux 5.3+): a handle on one process that cannot be confused with a later process
/// that reuses the pid. Readable (`POLLIN`) once the process has exited.
#[derive(Debug)]
pub struct PidFd(OwnedFd);

impl PidFd {
    /// `pidfd_open(pid, 0)`. Errors: ESRCH when no such process; ENOSYS on older kernels.
    #[cfg(target_os = "linux")]
    pub fn open(pid: Pid) -> io::Result<PidFd> {
        // SAFETY: pidfd_open takes a pid and flags, returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.0, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the syscall returned a fresh fd that nothing else owns. pidfds are always
        // close-on-exec.
        Ok(PidFd(unsafe { OwnedFd::from_raw_fd(fd as RawFd) }))
    }

    /// No pidfds outside Linux.
    #[cfg(not(target_os = "linux"))]
    pub fn open(_pid: Pid) -> io::Result<PidFd> {
        Err(io::Error::from_raw_os_error(libc::ENOSYS))
    }

    /// `pidfd_send_signal`: signals exactly the process the fd was opened on.
    #[cfg(target_os = "linux")]
    pub fn send(&self, sig: Signal) -> io::Result<Sent> {
        // SAFETY: a valid pidfd, a signal number, a null siginfo and zero flags.
        sent(unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.0.as_raw_fd(),
                sig.as_raw(),
                std::ptr::null::<libc::siginfo_t>(),
                0,
            ) as libc::c_int
        })
    }

    #[cfg(not(target_os = "linux"))]
    pub fn send(&self, _sig: Signal) -> io::Result<Sent> {
        Err(io::Error::from_raw_os_error(libc::ENOSYS))
    }
}

impl AsRawFd for PidFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// Poll interest: readable (or hang-up) on a pipe, a pidfd, a socket.
pub const POLL_IN: i16 = libc::POLLIN;

/// `O_NONBLOCK`, for `OpenOptions::custom_flags` (a FIFO opened without blocking).
pub const O_NONBLOCK: i32 = libc::O_NONBLOCK;
/// Poll interest: a priority event; what a cgroup's `cgroup.events` reports when it changes.
pub const POLL_PRI: i16 = libc::POLLPRI;
/// Poll interest: writable without blocking.
pub const POLL_OUT: i16 = libc::POLLOUT;
/// Hang-up only (no `POLLIN`): the peer closed. On Linux also asks for `POLLRDHUP`, which a
/// socket reports when its peer shuts down writing (libuv's stdio "pipes" are socketpairs).
#[cfg(target_os = "linux")]
pub const POLL_HUP_ONLY: i16 = libc::POLLRDHUP;
#[cfg(not(target_os = "linux"))]
pub const POLL_HUP_ONLY: i16 = 0;

/// One fd to poll and what happened to it.
#[derive(Clone, Copy, Debug)]
pub struct PollFd {
    pub fd: RawFd,
    pub events: i16,
    pub revents: i16,
}

impl PollFd {
    pub fn new(fd: RawFd, events: i16) -> PollFd {
        PollFd { fd, events, revents: 0 }
    }
    /// Anything reported: data, hang-up, error or an invalid fd.
    pub fn ready(&self) -> bool {
        self.revents != 0
    }
    /// The peer is gone (`POLLHUP`, `POLLRDHUP`, `POLLERR` or `POLLNVAL`).
    pub fn hung_up(&self) -> bool {
        let base = libc::POLLHUP | libc::POLLERR | libc::POLLNVAL;
        // POLLRDHUP exists only on Linux: a socket peer that shut down writing.
        #[cfg(target_os = "linux")]
        let mask = base | libc::POLLRDHUP;
        #[cfg(not(target_os = "linux"))]
        let mask = base;
        self.revents & mask != 0
    }
}

/// `poll(2)`: blocks until an fd is ready or `timeout` passes (`None`: forever).
///
/// The timeout is rounded up to whole milliseconds so a deadline is never missed by a wake just
/// short of it. EINTR returns `Ok(0)`: the signal pipe is among the fds, so the loop sees why.
pub fn poll(fds: &mut [PollFd], timeout: Option<Duration>) -> io::Result<usize> {
    let ms: libc::c_int = match timeout {
        None => -1,
        Some(d) => d.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int,
    };
    let mut raw: Vec<libc::pollfd> =
        fds.iter().map(|p| libc::pollfd { fd: p.fd, events: p.events, revents: 0 }).collect();
    // SAFETY: raw is a valid array of raw.len() pollfd structs.
    let rc = unsafe { libc::poll(raw.as_mut_ptr(), raw.len() as libc::nfds_t, ms) };
    if rc < 0 {
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EINTR) {
            return Ok(0);
        }
        return Err(err);
    }
    for (p, r) in fds.iter_mut().zip(raw.iter()) {
        p.revents = r.revents;
    }
    Ok(rc as usize)
}

/// True if `fd` is a pipe or socket whose reading end has been closed (`POLLERR`/`POLLHUP` on a
/// writer), so writing would fail with EPIPE.
pub fn peer_closed(fd: RawFd) -> bool {
    let mut fds = [PollFd::new(fd, POLL_OUT)];
    matches!(poll(&mut fds, Some(Duration::ZERO)), Ok(n) if n > 0)
        && fds[0].revents & (libc::POLLERR | libc::POLLHUP) != 0
}

/// What kind of file an fd is, for deciding whether it can report a hang-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FdKind {
    Closed,
    Fifo,
    Socket,
    Tty,
    Other,
}

/// The file `fd` refers to, as `(st_dev, st_ino)`: two fds with the same identity write to
/// the same file or pipe (a host that gave stdout and stderr one task file, or `2>&1`). `None`
/// if it is not open.
pub fn fd_identity(fd: RawFd) -> Option<(u64, u64)> {
    // SAFETY: st is a valid out-pointer; a closed fd yields EBADF.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) != 0 {
            return None;
        }
        #[allow(clippy::unnecessary_cast)]
        Some((st.st_dev as u64, st.st_ino as u64))
    }
}

/// Classifies `fd` with `fstat` and `isatty`.
pub fn fd_kind(fd: RawFd) -> FdKind {
    // SAFETY: st is a valid out-pointer; a closed fd yields EBADF.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) != 0 {
            return FdKind::Closed;
        }
        if libc::isatty(fd) == 1 {
            return FdKind::Tty;
        }
        match st.st_mode & libc::S_IFMT {
            libc::S_IFIFO => FdKind::Fifo,
            libc::S_IFSOCK => FdKind::Socket,
            _ => FdKind::Other,
        }
    }
}

/// Writes all of `buf` to a borrowed fd; EAGAIN and EPIPE drop the rest silently (a host that
/// stopped reading must never stall or kill the supervisor).
pub fn write_best_effort(fd: BorrowedFd<'_>, buf: &[u8]) {
    let mut rest = buf;
    while !rest.is_empty() {
        // SAFETY: rest is a valid slice; the fd is borrowed for the call.
        let n = unsafe { libc::write(fd.as_raw_fd(), rest.as_ptr().cast(), rest.len()) };
        if n > 0 {
            rest = &rest[n as usize..];
        } else if n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        } else {
            return;
        }
    }
}

/// How a spawned command is set apart from its spawner, applied in the forked child before
/// `exec` by [`pre_exec`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isolation {
    /// Its own process group (a provider, a cleanup command). With `take_terminal`, the new
    /// group also takes the terminal's foreground, as tini does: without it an interactive
    /// agent CLI in a background group would be stopped by SIGTTIN on its first read.
    Group { take_terminal: bool },
    /// Its own session (a detached supervisor: it outlives the caller's terminal).
    Session,
}

/// Pre-exec steps, run in the forked child (async-signal-safe only): the `isolation`, then every
/// inherited fd above 2 marked close-on-exec, default signal dispositions and an empty mask.
pub fn pre_exec(isolation: Isolation) -> io::Result<()> {
    match isolation {
        Isolation::Group { take_terminal } => {
            // SAFETY: setpgid, tcsetpgrp, sigprocmask and the sigset calls are
            // async-signal-safe; the set is initialised before use.
            unsafe {
                if libc::setpgid(0, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if take_terminal {
                    set_terminal_foreground(libc::getpgrp());
                }
            }
        }
        Isolation::Session => {
            // SAFETY: setsid is async-signal-safe and has no pointer arguments.
            if unsafe { libc::setsid() } < 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    close_inherited_on_exec();
    super::signal::reset_for_exec()
}

/// [`pre_exec`], then `keep` (fds above 2; negative entries are skipped) left open across
/// `exec`: how a parent hands a detached supervisor a pipe's read end whose number it passes
/// in argv (the leftovers' output, `manager::hand_off`). Async-signal-safe.
pub fn pre_exec_keeping(isolation: Isolation, keep: [RawFd; 2]) -> io::Result<()> {
    pre_exec(isolation)?;
    for fd in keep.into_iter().filter(|fd| *fd > 2) {
        // SAFETY: fcntl with integer arguments; clears only that fd's close-on-exec flag.
        if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// In a forked child before `exec`: marks every fd above 2 close-on-exec, so the command gets
/// exactly stdin, stdout and stderr, whatever its parent inherited (systemd and Python's
/// `close_fds` do the same). Without it a host that passed `sheepdog start` a pipe and waits for
/// its EOF would hang until the dev server died. The fds are marked, not closed: std reports an
/// `exec` failure through its own close-on-exec pipe, which must stay open until `exec`.
///
/// Linux 5.11+: one `close_range(3, ~0, CLOSE_RANGE_CLOEXEC)`; elsewhere (or on older kernels)
/// `fcntl(F_SETFD)` on every fd number below the open-files limit (at most 65536). Async-signal-safe.
pub fn close_inherited_on_exec() {
    #[cfg(target_os = "linux")]
    {
        /// `CLOSE_RANGE_CLOEXEC` from linux/close_range.h.
        const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
        // SAFETY: close_range takes two fd numbers and a flag; no pointers. A bare syscall.
        let rc =
            unsafe { libc::syscall(libc::SYS_close_range, 3 as libc::c_uint, libc::c_uint::MAX, CLOSE_RANGE_CLOEXEC) };
        if rc == 0 {
            return;
        }
    }
    // SAFETY: getrlimit fills a valid out-struct; fcntl on fd numbers with integer arguments
    // (an fd that is not open yields EBADF and is skipped).
    unsafe {
        let mut lim = libc::rlimit { rlim_cur: 1024, rlim_max: 1024 };
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        let max = lim.rlim_cur.min(65536) as libc::c_int;
        for fd in 3..max {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 && flags & libc::FD_CLOEXEC == 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
        }
    }
}

/// True if stdin is a terminal whose foreground group is this process's group: then the
/// provider should take the foreground.
pub fn owns_terminal_foreground() -> bool {
    // SAFETY: isatty and tcgetpgrp take an fd; errors return 0 / -1.
    unsafe { libc::isatty(libc::STDIN_FILENO) == 1 && libc::tcgetpgrp(libc::STDIN_FILENO) == libc::getpgrp() }
}

/// This process's group.
pub fn getpgrp() -> Pgid {
    // SAFETY: getpgrp has no preconditions and cannot fail.
    Pgid(unsafe { libc::getpgrp() })
}

/// After a provider that took the terminal is gone: gives the foreground of the terminal on
/// stdin back to `home` if it is still `provider`'s group or a group with nobody left in it
/// (the provider may have handed it to a job of its own). A foreground that someone else
/// took meanwhile (the shell, after `bg`) is left alone. SIGTTOU, which `tcsetpgrp` from a
/// background group raises, is blocked for the call. Errors are ignored: the terminal may be
/// gone.
pub fn give_terminal_back(provider: Pgid, home: Pgid) {
    // SAFETY: tcgetpgrp and kill with signal 0 take integers.
    unsafe {
        let fg = libc::tcgetpgrp(libc::STDIN_FILENO);
        if fg <= 0 || fg == home.as_raw() {
            return;
        }
        let empty = libc::kill(-fg, 0) != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if fg != provider.as_raw() && !empty {
            return;
        }
    }
    set_terminal_foreground(home.as_raw());
}

/// `tcsetpgrp` on stdin to `pgrp`, with SIGTTOU (which it raises when called from a background
/// group) blocked for the call and the mask restored after. Async-signal-safe; errors ignored.
fn set_terminal_foreground(pgrp: libc::pid_t) {
    // SAFETY: sigset calls on initialised sets, sigprocmask with a valid out-set, tcsetpgrp on
    // integers.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTTOU);
        libc::sigprocmask(libc::SIG_BLOCK, &set, &mut old);
        libc::tcsetpgrp(libc::STDIN_FILENO, pgrp);
        libc::sigprocmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
}

/// Takes ownership of an fd the caller inherited for sheepdog's own use (`--events-fd`), so
/// commands spawned later do not inherit it: fds above 2 are marked close-on-exec and owned;
/// 0, 1 and 2 are duplicated close-on-exec (the provider still inherits the originals).
///
/// Errors: EBADF when `fd` is not open.
pub fn take_inherited_fd(fd: RawFd) -> io::Result<OwnedFd> {
    if fd > 2 {
        super::signal::set_cloexec(fd)?;
        // SAFETY: the fd is open (fcntl succeeded) and the caller hands it over to us.
        return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
    }
    // SAFETY: F_DUPFD_CLOEXEC returns a fresh fd or -1.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: new is a fresh fd nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// Runs `f` with `pre_exec` so the unsafe hook stays in this module.
pub fn set_pre_exec<F>(cmd: &mut std::process::Command, f: F)
where
    F: FnMut() -> io::Result<()> + Send + Sync + 'static,
{
    use std::os::unix::process::CommandExt;
    // SAFETY: every closure passed here (`pre_exec`, with cgroup::join_in_child first for a
    // provider) makes only async-signal-safe calls and does not
    // allocate.
    unsafe {
        cmd.pre_exec(f);
    }
}

/// Points `target` (0, 1 or 2) at `/dev/null`: a detached supervisor drops the pipe it used to
/// report readiness, so the reader sees EOF and later writes go nowhere.
pub fn redirect_to_null(target: RawFd) -> io::Result<()> {
    let null = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null")?;
    // SAFETY: dup2 between two open fds; target is one of the standard fds this process owns.
    if unsafe { libc::dup2(null.as_raw_fd(), target) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Opens `name` (a path relative to the directory `dir`) read-only and close-on-exec:
/// `openat(2)`. A listing of 10,000 entries opens each `ID/entry.json` below one open `procs/`
/// instead of walking the state dir's whole path 10,000 times (most of its kernel time).
///
/// Errors: as `openat` (ENOENT, EACCES, ...); a name with a NUL byte is `InvalidInput`.
pub fn open_at(dir: BorrowedFd<'_>, name: &std::ffi::OsStr) -> io::Result<std::fs::File> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(name.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `dir` is an open fd for the borrow's lifetime and `c` a NUL-terminated string that
    // outlives the call; the returned fd, if any, is new and owned by nobody else.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by `openat` and is owned by nothing else.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// How many bytes `fd` can give without blocking (`ioctl(FIONREAD)`): pipes, sockets and
/// terminals say; `None` where the kernel does not (a regular file, `/dev/null`: a read of those
/// never blocks anyway). Lets the stdin relay read the host's stdin without setting
/// `O_NONBLOCK` on it, a flag of the open file that the host and its other children share.
pub fn readable_bytes(fd: RawFd) -> Option<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one c_int through the valid pointer; a bad fd yields EBADF.
    let rc = unsafe { libc::ioctl(fd, libc::FIONREAD as _, &mut n) };
    (rc == 0).then_some(n.max(0) as usize)
}

/// `read(2)` on a borrowed fd, retried on EINTR. `Ok(0)` is end of file.
pub fn read_fd(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: buf is a valid writable slice of buf.len() bytes; the fd is borrowed for the call.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// This process's stdin, borrowed. `None` if fd 0 is not open.
pub fn stdin_fd() -> Option<BorrowedFd<'static>> {
    // SAFETY: F_GETFD only reads the fd's flags.
    let open = unsafe { libc::fcntl(0, libc::F_GETFD) } >= 0;
    // SAFETY: fd 0 is open, and this process never closes it while a borrow is used (the relay
    // that reads it lives in the supervisor loop, which leaves fd 0 alone).
    open.then(|| unsafe { BorrowedFd::borrow_raw(0) })
}

/// The symbolic name of an errno value (`ENOENT`), for documents a host parses: the names of
/// the errors `execve`, `fork` and `clone` report, else `None`.
pub fn errno_name(code: i32) -> Option<&'static str> {
    Some(match code {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EIO => "EIO",
        libc::E2BIG => "E2BIG",
        libc::ENOEXEC => "ENOEXEC",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::ENFILE => "ENFILE",
        libc::EMFILE => "EMFILE",
        libc::ETXTBSY => "ETXTBSY",
        libc::ENAMETOOLONG => "ENAMETOOLONG",
        libc::ELOOP => "ELOOP",
        libc::ENOSYS => "ENOSYS",
        #[cfg(target_os = "linux")]
        libc::ELIBBAD => "ELIBBAD",
        _ => return None,
    })
}
