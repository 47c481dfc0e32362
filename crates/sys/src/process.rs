//! Process ids, groups, signals to them, reaping, pidfds, the subreaper bit and `poll`.
//!
//! The calls go through `rustix` (raw system calls on Linux, libc elsewhere) where it has them;
//! what stays on libc says why where it does: the pre-exec steps rustix has no safe call for
//! (the signal mask), `fork`, `kcmp` and `close_range`, and std's `pre_exec` hook.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use rustix::io::Errno;
use rustix::process::WaitOptions;
#[cfg(target_os = "linux")]
use rustix::process::{WaitId, WaitIdOptions};

use super::signal::Signal;

/// The fd number `*fd` borrowed for rustix, which takes only borrowed fds, for as long as the
/// caller holds the number (one call). `None` for a negative number. The crates above hand this
/// crate fd numbers they own; a number that is not open makes the call fail with EBADF (`poll`:
/// POLLNVAL), as the libc call did.
pub(crate) fn borrow(fd: &RawFd) -> Option<BorrowedFd<'_>> {
    // SAFETY: -1, `BorrowedFd`'s niche, is excluded; the borrow ends with the caller's (see above).
    (*fd >= 0).then(|| unsafe { BorrowedFd::borrow_raw(*fd) })
}

/// [`borrow`], with EBADF for a negative number (what the kernel says of any fd not open).
pub(crate) fn borrowed(fd: &RawFd) -> io::Result<BorrowedFd<'_>> {
    borrow(fd).ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))
}

/// A process (or group) id for rustix; ESRCH for one that is not positive (never made by
/// [`Pid::new`] or [`Pgid::new`], which refuse them).
fn kernel_pid(raw: i32) -> Result<rustix::process::Pid, Errno> {
    rustix::process::Pid::from_raw(raw).filter(|_| raw > 0).ok_or(Errno::SRCH)
}

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
    Pid(rustix::process::getpid().as_raw_pid())
}

/// `CLOCK_MONOTONIC` in ms: one clock for every process on the machine (outside time
/// namespaces), so one process can say a deadline that another reads, which `Instant` cannot.
pub fn monotonic_ms() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u64::try_from(t.tv_sec).unwrap_or(0) * 1000 + u64::try_from(t.tv_nsec).unwrap_or(0) / 1_000_000
}

/// The parent's id; 1 (or a subreaper's) once the parent died.
pub fn getppid() -> i32 {
    rustix::process::Pid::as_raw(rustix::process::getppid())
}

/// The real uid of this process.
pub fn getuid() -> u32 {
    rustix::process::getuid().as_raw()
}

/// Result of a signal sent to something that may already be gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sent {
    Delivered,
    /// ESRCH: nothing to signal (an expected race, not an error).
    Gone,
}

fn sent(r: Result<(), Errno>) -> io::Result<Sent> {
    match r {
        Ok(()) => Ok(Sent::Delivered),
        Err(Errno::SRCH) => Ok(Sent::Gone),
        Err(e) => Err(e.into()),
    }
}

/// `kill(pid, sig)`. Prefer `PidFd::send` when the pid may have been reused.
pub fn kill(pid: Pid, sig: Signal) -> io::Result<Sent> {
    sent(kernel_pid(pid.0).and_then(|p| rustix::process::kill_process(p, sig.to_rustix())))
}

/// `kill(-pgid, sig)`: every member of the group.
pub fn kill_group(pgid: Pgid, sig: Signal) -> io::Result<Sent> {
    sent(kernel_pid(pgid.0).and_then(|g| rustix::process::kill_process_group(g, sig.to_rustix())))
}

/// `kill(pid, 0)`: true if a process (zombies included) has this pid. See
/// [`super::procfs::is_alive`] for the check that counts zombies as dead.
pub fn exists(pid: Pid) -> bool {
    answers(kernel_pid(pid.0).and_then(rustix::process::test_kill_process))
}

/// `kill(pid, 0)` answers EPERM: the process exists and this one may not signal it (another
/// user's, a setuid helper that became root).
pub fn signal_denied(pid: Pid) -> bool {
    kernel_pid(pid.0).and_then(rustix::process::test_kill_process) == Err(Errno::PERM)
}

/// `kill(-pgid, 0)`: true if the group has any member, zombies included.
pub fn group_exists(pgid: Pgid) -> bool {
    answers(kernel_pid(pgid.0).and_then(rustix::process::test_kill_process_group))
}

/// The result of a `kill(target, 0)`: something answers (EPERM counts: it exists, just not ours).
fn answers(r: Result<(), Errno>) -> bool {
    matches!(r, Ok(()) | Err(Errno::PERM))
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
        match rustix::process::wait(WaitOptions::NOHANG) {
            Ok(Some((pid, status))) => match decode(status.as_raw()) {
                Some(ws) => return Some((Pid(pid.as_raw_pid()), ws)),
                None => continue, // stopped/continued reports: not an exit
            },
            Err(Errno::INTR) => continue,
            _ => return None,
        }
    }
}

/// Waits for one specific child: `waitpid(pid, 0)`, or with `WNOHANG` when `block` is false.
pub fn reap(pid: Pid, block: bool) -> io::Result<Option<WaitStatus>> {
    let flags = if block { WaitOptions::empty() } else { WaitOptions::NOHANG };
    loop {
        match rustix::process::waitpid(Some(kernel_pid(pid.0)?), flags) {
            Ok(Some((_, status))) => match decode(status.as_raw()) {
                Some(ws) => return Ok(Some(ws)),
                None => continue,
            },
            Ok(None) => return Ok(None),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// The wait status of `pid`, a child of this process, once it has exited, without reaping it:
/// `waitid(P_PID, WEXITED | WNOWAIT)` (with `WNOHANG` unless `block`). The child stays a zombie
/// until [`reap`]: whoever reaps it later (this process, or the subreaper it is re-parented to
/// if this one dies first) reads the same status. `None` while it runs. Linux; elsewhere it
/// reaps, as [`reap`] does.
#[cfg(target_os = "linux")]
pub fn exit_status_of(pid: Pid, block: bool) -> io::Result<Option<WaitStatus>> {
    let kpid = kernel_pid(pid.0)?;
    let mut flags = WaitIdOptions::EXITED | WaitIdOptions::NOWAIT;
    if !block {
        flags |= WaitIdOptions::NOHANG;
    }
    loop {
        match rustix::process::waitid(WaitId::Pid(kpid), flags) {
            Ok(None) => return Ok(None),
            Ok(Some(st)) => {
                let status = match (st.exit_status(), st.terminating_signal().and_then(Signal::from_raw)) {
                    (Some(code), _) => WaitStatus::Exited(code),
                    (None, Some(s)) => WaitStatus::Signaled(s, st.dumped()),
                    // Not an exit this can say (WEXITED asks for none other): reaped as `reap`
                    // does. Looked at again without reaping, the same report would come back
                    // for ever.
                    (None, None) => return reap(pid, block),
                };
                return Ok(Some(status));
            }
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// See the Linux version: reaps here.
#[cfg(not(target_os = "linux"))]
pub fn exit_status_of(pid: Pid, block: bool) -> io::Result<Option<WaitStatus>> {
    reap(pid, block)
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
    let id = match pgid {
        Some(g) => WaitId::Pgid(Some(kernel_pid(g.0).ok()?)),
        None => WaitId::All,
    };
    loop {
        // WNOWAIT leaves every child as it was.
        match rustix::process::waitid(id.clone(), WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT)
        {
            // With WNOHANG, nothing reported says children exist but none is waitable.
            Ok(None) => return Some(Children::Unreaped),
            Ok(Some(_)) => return Some(Children::Reapable),
            Err(Errno::INTR) => continue,
            Err(Errno::CHILD) => return Some(Children::None),
            Err(_) => return None,
        }
    }
}

/// True if `pid` is a child of this process that has exited and waits to be reaped (a zombie):
/// `waitid(P_PID, WEXITED | WNOHANG | WNOWAIT)`, which reaps nothing and costs one syscall
/// where reading `/proc/<pid>/stat` costs three. A leader whose other threads still run is not
/// reported (the kernel waits for the whole group). False for anything else, and on error.
#[cfg(target_os = "linux")]
pub fn is_zombie_child(pid: Pid) -> bool {
    let Ok(kpid) = kernel_pid(pid.0) else { return false };
    loop {
        // WNOWAIT leaves the child as it was; with WNOHANG, nothing reported: it has not exited.
        match rustix::process::waitid(
            WaitId::Pid(kpid),
            WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT,
        ) {
            Ok(status) => return status.is_some(),
            Err(Errno::INTR) => continue,
            Err(_) => return false,
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
    // rustix passes the pid as the flag: any non-zero value sets it.
    Ok(rustix::process::set_child_subreaper(Some(rustix::process::getpid()))?)
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
    let fd = borrowed(&fd)?;
    loop {
        match rustix::io::write(fd, buf) {
            Err(Errno::INTR) => continue,
            r => return Ok(r?),
        }
    }
}

/// One `read(2)` from a raw fd this process owns into `buf`; EINTR is retried. Returns the
/// bytes read (0 at EOF). Errors: the read's (EAGAIN on an empty non-blocking fd).
pub fn read_raw(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    read_fd(borrowed(&fd)?, buf)
}

/// Moves this process into a process group of its own (`setpgid(0, 0)`), so that a signal to
/// the group it came from (a host's `kill(-pgid)`) no longer reaches it.
pub fn own_process_group() -> io::Result<()> {
    Ok(rustix::process::setpgid(None, None)?)
}

/// A pidfd (Linux 5.3+): a handle on one process that cannot be confused with a later process
/// that reuses the pid. Readable (`POLLIN`) once the process has exited.
#[derive(Debug)]
pub struct PidFd(OwnedFd);

impl PidFd {
    /// `pidfd_open(pid, 0)`. Errors: ESRCH when no such process; ENOSYS on older kernels.
    #[cfg(target_os = "linux")]
    pub fn open(pid: Pid) -> io::Result<PidFd> {
        // pidfds are always close-on-exec.
        Ok(PidFd(rustix::process::pidfd_open(kernel_pid(pid.0)?, rustix::process::PidfdFlags::empty())?))
    }

    /// No pidfds outside Linux.
    #[cfg(not(target_os = "linux"))]
    pub fn open(_pid: Pid) -> io::Result<PidFd> {
        Err(io::Error::from_raw_os_error(libc::ENOSYS))
    }

    /// `pidfd_send_signal`: signals exactly the process the fd was opened on.
    #[cfg(target_os = "linux")]
    pub fn send(&self, sig: Signal) -> io::Result<Sent> {
        sent(rustix::process::pidfd_send_signal(&self.0, sig.to_rustix()))
    }

    #[cfg(not(target_os = "linux"))]
    pub fn send(&self, _sig: Signal) -> io::Result<Sent> {
        Err(io::Error::from_raw_os_error(libc::ENOSYS))
    }

    /// `pidfd_send_signal` with `value` in the `siginfo` (`SI_QUEUE`, as `sigqueue(3)` sends
    /// one), which the receiver's handler reads ([`crate::signal::SignalPipe::take_value`]): how
    /// a stop request carries its one-off term grace straight to the supervisor. 64-bit Linux;
    /// elsewhere ENOSYS, and the caller says it another way.
    #[cfg(all(target_os = "linux", target_pointer_width = "64"))]
    pub fn send_with_value(&self, sig: Signal, value: u64) -> io::Result<Sent> {
        let info = queued_info(sig, value);
        // SAFETY: pidfd_send_signal(2) with an fd this value owns, a siginfo buffer of the
        // kernel's size that outlives the call, and no flags.
        let rc = unsafe {
            libc::syscall(libc::SYS_pidfd_send_signal, self.0.as_raw_fd(), sig.as_raw(), info.as_ptr(), 0u32)
        };
        if rc == 0 {
            return Ok(Sent::Delivered);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ESRCH) { Ok(Sent::Gone) } else { Err(e) }
    }

    #[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
    pub fn send_with_value(&self, _sig: Signal, _value: u64) -> io::Result<Sent> {
        Err(io::Error::from_raw_os_error(libc::ENOSYS))
    }
}

/// A `siginfo_t` of `SI_QUEUE` from this process carrying `value`, as the kernel lays it out on
/// 64-bit Linux: `si_signo` at 0, `si_code` at 8, then `si_pid` at 16, `si_uid` at 20 and the
/// `sigval` at 24 (what `rt_sigqueueinfo(2)` and `pidfd_send_signal(2)` take).
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
pub fn queued_info(sig: Signal, value: u64) -> [u8; 128] {
    let mut info = [0u8; 128];
    let mut put = |at: usize, bytes: &[u8]| info[at..at + bytes.len()].copy_from_slice(bytes);
    put(0, &sig.as_raw().to_ne_bytes());
    put(8, &libc::SI_QUEUE.to_ne_bytes());
    put(16, &getpid().0.to_ne_bytes());
    put(20, &getuid().to_ne_bytes());
    put(24, &value.to_ne_bytes());
    info
}

/// Queues `sig` with `value` to `pid` (`rt_sigqueueinfo`): for a process whose pid cannot be
/// reused meanwhile (this process's unreaped child: the forked keeper). 64-bit Linux; elsewhere
/// ENOSYS.
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
pub fn queue(pid: Pid, sig: Signal, value: u64) -> io::Result<()> {
    let info = queued_info(sig, value);
    // SAFETY: rt_sigqueueinfo(2) with a siginfo buffer of the kernel's size that outlives the call.
    let rc = unsafe { libc::syscall(libc::SYS_rt_sigqueueinfo, pid.as_raw(), sig.as_raw(), info.as_ptr()) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

#[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
pub fn queue(_pid: Pid, _sig: Signal, _value: u64) -> io::Result<()> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
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
    use rustix::event::{PollFlags, Timespec};
    let timeout = timeout.map(|d| {
        let ms = d.as_micros().div_ceil(1000).min(i32::MAX as u128) as i64;
        Timespec { tv_sec: ms / 1000, tv_nsec: (ms % 1000) * 1_000_000 }
    });
    // A negative fd is left out, as poll(2) ignores it (its revents stay 0).
    let numbers: Vec<RawFd> = fds.iter().map(|p| p.fd).collect();
    let mut index = Vec::with_capacity(fds.len());
    let mut raw = Vec::with_capacity(fds.len());
    for (i, fd) in numbers.iter().enumerate() {
        if let Some(fd) = borrow(fd) {
            index.push(i);
            raw.push(rustix::event::PollFd::from_borrowed_fd(fd, PollFlags::from_bits_retain(fds[i].events as _)));
        }
    }
    let n = match rustix::event::poll(&mut raw, timeout.as_ref()) {
        Ok(n) => n,
        Err(Errno::INTR) => return Ok(0),
        Err(e) => return Err(e.into()),
    };
    for p in fds.iter_mut() {
        p.revents = 0;
    }
    for (i, r) in index.into_iter().zip(&raw) {
        // u16 on Linux, i16 elsewhere.
        #[allow(clippy::unnecessary_cast)]
        {
            fds[i].revents = r.revents().bits() as i16;
        }
    }
    Ok(n)
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
    let st = rustix::fs::fstat(borrow(&fd)?).ok()?;
    #[allow(clippy::unnecessary_cast)]
    Some((st.st_dev as u64, st.st_ino as u64))
}

/// Classifies `fd` with `fstat` and `isatty`.
pub fn fd_kind(fd: RawFd) -> FdKind {
    use rustix::fs::FileType;
    let Some(borrowed) = borrow(&fd) else { return FdKind::Closed };
    let Ok(st) = rustix::fs::fstat(borrowed) else { return FdKind::Closed };
    if rustix::termios::isatty(borrowed) {
        return FdKind::Tty;
    }
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Fifo => FdKind::Fifo,
        FileType::Socket => FdKind::Socket,
        _ => FdKind::Other,
    }
}

/// Writes all of `buf` to a borrowed fd; EAGAIN and EPIPE drop the rest silently (a host that
/// stopped reading must never stall or kill the supervisor).
pub fn write_best_effort(fd: BorrowedFd<'_>, buf: &[u8]) {
    let mut rest = buf;
    while !rest.is_empty() {
        match rustix::io::write(fd, rest) {
            Ok(n) if n > 0 => rest = &rest[n..],
            Err(Errno::INTR) => continue,
            _ => return,
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
/// rustix's calls here are single system calls that neither allocate nor lock (libc's
/// async-signal-safe wrappers outside Linux).
pub fn pre_exec(isolation: Isolation) -> io::Result<()> {
    match isolation {
        Isolation::Group { take_terminal } => {
            rustix::process::setpgid(None, None)?;
            if take_terminal {
                set_terminal_foreground(rustix::process::getpgrp());
            }
        }
        Isolation::Session => {
            rustix::process::setsid()?;
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
    for fd in keep.iter().filter(|fd| **fd > 2) {
        // Clears only that fd's close-on-exec flag.
        rustix::io::fcntl_setfd(borrowed(fd)?, rustix::io::FdFlags::empty())?;
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
/// `fcntl(F_SETFD)` on every fd number below the open-files limit (at most 65536). Async-signal-safe,
/// and on Linux it never writes libc's `errno`: the provider's `CLONE_VM` child (`exec`) runs it
/// in its spawner's memory.
pub fn close_inherited_on_exec() {
    use rustix::io::FdFlags;
    #[cfg(target_os = "linux")]
    {
        /// `CLOSE_RANGE_CLOEXEC` from linux/close_range.h.
        const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
        // rustix has no close_range. (On failure libc's `syscall` writes `errno`, which a
        // `CLONE_VM` child shares with its spawner: harmless, the spawner is suspended and
        // reads no errno of this across the spawn.)
        // SAFETY: close_range takes two fd numbers and a flag; no pointers. A bare syscall.
        let rc =
            unsafe { libc::syscall(libc::SYS_close_range, 3 as libc::c_uint, libc::c_uint::MAX, CLOSE_RANGE_CLOEXEC) };
        if rc == 0 {
            return;
        }
    }
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current.unwrap_or(u64::MAX);
    // An fd that is not open yields EBADF and is skipped.
    for fd in 3..limit.min(65536) as RawFd {
        let Some(fd) = borrow(&fd) else { continue };
        if let Ok(flags) = rustix::io::fcntl_getfd(fd)
            && !flags.contains(FdFlags::CLOEXEC)
        {
            let _ = rustix::io::fcntl_setfd(fd, flags | FdFlags::CLOEXEC);
        }
    }
}

/// True if stdin is a terminal whose foreground group is this process's group: then the
/// provider should take the foreground.
pub fn owns_terminal_foreground() -> bool {
    let Some(stdin) = stdin_fd() else { return false };
    rustix::termios::isatty(stdin) && rustix::termios::tcgetpgrp(stdin) == Ok(rustix::process::getpgrp())
}

/// This process's group.
pub fn getpgrp() -> Pgid {
    Pgid(rustix::process::getpgrp().as_raw_pid())
}

/// After a provider that took the terminal is gone: gives the foreground of the terminal on
/// stdin back to `home` if it is still `provider`'s group or a group with nobody left in it
/// (the provider may have handed it to a job of its own). A foreground that someone else
/// took meanwhile (the shell, after `bg`) is left alone. SIGTTOU, which `tcsetpgrp` from a
/// background group raises, is blocked for the call. Errors are ignored: the terminal may be
/// gone.
pub fn give_terminal_back(provider: Pgid, home: Pgid) {
    let Some(stdin) = stdin_fd() else { return };
    let Ok(fg) = rustix::termios::tcgetpgrp(stdin) else { return };
    if fg.as_raw_pid() == home.as_raw() {
        return;
    }
    let empty = rustix::process::test_kill_process_group(fg) == Err(Errno::SRCH);
    if fg.as_raw_pid() != provider.as_raw() && !empty {
        return;
    }
    if let Ok(home) = kernel_pid(home.as_raw()) {
        set_terminal_foreground(home);
    }
}

/// `tcsetpgrp` on stdin to `pgrp`, with SIGTTOU (which it raises when called from a background
/// group) blocked for the call and the mask restored after. Async-signal-safe; errors ignored.
/// The mask stays on libc: rustix has `sigprocmask` only among its `runtime` calls (Linux, not safe).
fn set_terminal_foreground(pgrp: rustix::process::Pid) {
    // SAFETY: sigset calls on initialised sets, sigprocmask with a valid out-set.
    let old = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTTOU);
        libc::sigprocmask(libc::SIG_BLOCK, &set, &mut old);
        old
    };
    // fd 0 is borrowed for the call only; a closed one is EBADF, ignored.
    if let Some(stdin) = borrow(&0) {
        let _ = rustix::termios::tcsetpgrp(stdin, pgrp);
    }
    // SAFETY: restores the mask saved above.
    unsafe { libc::sigprocmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
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
    Ok(rustix::io::fcntl_dupfd_cloexec(borrowed(&fd)?, 3)?)
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
    Ok(match target {
        0 => rustix::stdio::dup2_stdin(&null),
        1 => rustix::stdio::dup2_stdout(&null),
        2 => rustix::stdio::dup2_stderr(&null),
        _ => Err(Errno::BADF),
    }?)
}

/// Opens `name` (a path relative to the directory `dir`) read-only and close-on-exec:
/// `openat(2)`. A listing of 10,000 entries opens each `ID/entry.json` below one open `procs/`
/// instead of walking the state dir's whole path 10,000 times (most of its kernel time).
///
/// Errors: as `openat` (ENOENT, EACCES, ...); a name with a NUL byte is `InvalidInput`.
pub fn open_at(dir: BorrowedFd<'_>, name: &std::ffi::OsStr) -> io::Result<std::fs::File> {
    use rustix::fs::{Mode, OFlags};
    if name.as_encoded_bytes().contains(&0) {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    Ok(rustix::fs::openat(dir, name, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?.into())
}

/// How many bytes `fd` can give without blocking (`ioctl(FIONREAD)`): pipes, sockets and
/// terminals say; `None` where the kernel does not (a regular file, `/dev/null`: a read of those
/// never blocks anyway). Lets the stdin relay read the host's stdin without setting
/// `O_NONBLOCK` on it, a flag of the open file that the host and its other children share.
pub fn readable_bytes(fd: RawFd) -> Option<usize> {
    let n = rustix::io::ioctl_fionread(borrow(&fd)?).ok()?;
    Some(n as usize)
}

/// `read(2)` on a borrowed fd, retried on EINTR. `Ok(0)` is end of file.
pub fn read_fd(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match rustix::io::read(fd, &mut *buf) {
            Err(Errno::INTR) => continue,
            r => return Ok(r?),
        }
    }
}

/// This process's stdin, borrowed. `None` if fd 0 is not open.
pub fn stdin_fd() -> Option<BorrowedFd<'static>> {
    // fd 0 stays open while a borrow is used: this process never closes it (the relay that
    // reads it lives in the supervisor loop, which leaves fd 0 alone).
    let stdin = rustix::stdio::stdin();
    rustix::io::fcntl_getfd(stdin).is_ok().then_some(stdin)
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
