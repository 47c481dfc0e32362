//! Signals: names, the self-pipe that turns them into loop events, and dying by a signal.
//!
//! The handler does nothing but record the signal and wake the loop (s6-supervise, tini): it sets
//! a per-signal flag and writes one byte to a non-blocking, close-on-exec pipe that the event loop
//! polls. A handler that runs in a forked child before `exec` (a signal that lands in the window
//! between `fork` and the child's own reset) applies the default action instead, so the supervisor
//! never mistakes the child's signal for its own.
//!
//! Dispositions, masks and the handler stay on libc: rustix has `sigaction` and `sigprocmask`
//! only among its Linux-only `runtime` calls, none of them safe, and the handler must stay
//! async-signal-safe (it saves and restores `errno` around the libc calls it makes: the sender's
//! pid check, `kill`, `write`). File-descriptor flags and reads go through rustix.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

use rustix::fs::OFlags;

use super::process::borrowed;

/// A signal number, with its conventional name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Signal(i32);

const NAMES: &[(i32, &str)] = &[
    (libc::SIGHUP, "SIGHUP"),
    (libc::SIGINT, "SIGINT"),
    (libc::SIGQUIT, "SIGQUIT"),
    (libc::SIGILL, "SIGILL"),
    (libc::SIGTRAP, "SIGTRAP"),
    (libc::SIGABRT, "SIGABRT"),
    (libc::SIGBUS, "SIGBUS"),
    (libc::SIGFPE, "SIGFPE"),
    (libc::SIGKILL, "SIGKILL"),
    (libc::SIGUSR1, "SIGUSR1"),
    (libc::SIGSEGV, "SIGSEGV"),
    (libc::SIGUSR2, "SIGUSR2"),
    (libc::SIGPIPE, "SIGPIPE"),
    (libc::SIGALRM, "SIGALRM"),
    (libc::SIGTERM, "SIGTERM"),
    (libc::SIGCHLD, "SIGCHLD"),
    (libc::SIGCONT, "SIGCONT"),
    (libc::SIGSTOP, "SIGSTOP"),
    (libc::SIGTSTP, "SIGTSTP"),
    (libc::SIGTTIN, "SIGTTIN"),
    (libc::SIGTTOU, "SIGTTOU"),
    (libc::SIGURG, "SIGURG"),
    (libc::SIGXCPU, "SIGXCPU"),
    (libc::SIGXFSZ, "SIGXFSZ"),
    (libc::SIGVTALRM, "SIGVTALRM"),
    (libc::SIGPROF, "SIGPROF"),
    (libc::SIGWINCH, "SIGWINCH"),
    (libc::SIGIO, "SIGIO"),
    (libc::SIGSYS, "SIGSYS"),
];

impl Signal {
    pub const HUP: Signal = Signal(libc::SIGHUP);
    pub const INT: Signal = Signal(libc::SIGINT);
    pub const KILL: Signal = Signal(libc::SIGKILL);
    pub const TERM: Signal = Signal(libc::SIGTERM);
    pub const CHLD: Signal = Signal(libc::SIGCHLD);
    pub const CONT: Signal = Signal(libc::SIGCONT);
    /// Freezes a process (it cannot be caught): what a stop sends before it counts and kills a
    /// tree that may be forking.
    pub const STOP: Signal = Signal(libc::SIGSTOP);
    /// To a managed supervisor whose command has exited: "your entry changed, re-read it".
    pub const USR1: Signal = Signal(libc::SIGUSR1);
    /// What a panicking keeper dies by (`keeper.rs`: musl's `abort` would signal the wrong task).
    pub const ABRT: Signal = Signal(libc::SIGABRT);

    /// Signals a supervisor passes on to the provider's process group instead of dying of them
    /// (tini forwards every catchable signal): SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGALRM,
    /// SIGXCPU, SIGXFSZ, SIGVTALRM, SIGPROF.
    pub const FORWARDED: [Signal; 9] = [
        Signal(libc::SIGQUIT),
        Signal(libc::SIGUSR1),
        Signal(libc::SIGUSR2),
        Signal(libc::SIGWINCH),
        Signal(libc::SIGALRM),
        Signal(libc::SIGXCPU),
        Signal(libc::SIGXFSZ),
        Signal(libc::SIGVTALRM),
        Signal(libc::SIGPROF),
    ];

    /// Wraps a raw signal number (1..=64 on Linux); `None` outside that range.
    pub fn from_raw(n: i32) -> Option<Signal> {
        (1..MAX_SIGNAL).contains(&n).then_some(Signal(n))
    }

    /// Parses `TERM`, `SIGTERM` or `15`.
    pub fn parse(s: &str) -> Option<Signal> {
        if let Ok(n) = s.parse::<i32>() {
            return Signal::from_raw(n);
        }
        let upper = s.to_ascii_uppercase();
        let full = if upper.starts_with("SIG") { upper } else { format!("SIG{upper}") };
        NAMES.iter().find(|(_, name)| *name == full).map(|(n, _)| Signal(*n))
    }

    pub fn as_raw(self) -> i32 {
        self.0
    }

    /// The signal as rustix's type, to send it (`kill`, `pidfd_send_signal`).
    pub(crate) fn to_rustix(self) -> rustix::process::Signal {
        // SAFETY: `self.0` is a valid, non-zero signal number (1..=64: `from_raw` and the
        // constants). rustix asks not to send libc's reserved real-time signals; the value is
        // only ever sent, to a process the user named, as libc's `kill` sent it before.
        unsafe { rustix::process::Signal::from_raw_unchecked(self.0) }
    }

    /// `SIGTERM`, or `SIG42` for one without a conventional name.
    pub fn name(self) -> String {
        NAMES
            .iter()
            .find(|(n, _)| *n == self.0)
            .map(|(_, name)| (*name).to_string())
            .unwrap_or_else(|| format!("SIG{}", self.0))
    }
}

impl std::fmt::Display for Signal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

/// One past the highest signal number we track (Linux has 64 signals; macOS 32).
const MAX_SIGNAL: i32 = 65;

static PENDING: [AtomicBool; MAX_SIGNAL as usize] = [const { AtomicBool::new(false) }; MAX_SIGNAL as usize];
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);
static OWNER_PID: AtomicI32 = AtomicI32::new(0);
/// The value each signal last arrived with when it was queued with one (`SI_QUEUE`: `sigqueue`,
/// [`crate::process::PidFd::send_with_value`]): the whole `sigval`, 64 bits on 64-bit Linux.
static VALUES: [AtomicU64; MAX_SIGNAL as usize] = [const { AtomicU64::new(0) }; MAX_SIGNAL as usize];
/// Whether the signal's last arrival carried a value (in [`VALUES`]); false when it came plainly
/// (`kill`). A flag of its own, as every value of [`VALUES`] is one a sender may mean.
static QUEUED: [AtomicBool; MAX_SIGNAL as usize] = [const { AtomicBool::new(false) }; MAX_SIGNAL as usize];

/// The value `info` carries, or `None` for a signal sent plainly.
///
/// # Safety
/// `info` is NULL or the `siginfo_t` the kernel passed to an `SA_SIGINFO` handler.
#[cfg(target_os = "linux")]
unsafe fn queued_value(info: *const libc::siginfo_t) -> Option<u64> {
    // SAFETY: the function's contract; `si_value` reads the union member SI_QUEUE fills.
    unsafe {
        if info.is_null() || (*info).si_code != libc::SI_QUEUE {
            return None;
        }
        Some((*info).si_value().sival_ptr as usize as u64)
    }
}

#[cfg(not(target_os = "linux"))]
unsafe fn queued_value(_info: *const libc::siginfo_t) -> Option<u64> {
    None
}

extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _context: *mut libc::c_void) {
    // SAFETY: getpid, signal, kill and write are async-signal-safe; errno is saved and restored
    // so the interrupted code does not see ours.
    unsafe {
        let saved = *errno_location();
        if libc::getpid() != OWNER_PID.load(Ordering::Relaxed) {
            // A forked child between fork and exec: behave as if no handler were installed.
            libc::signal(sig, libc::SIG_DFL);
            libc::kill(libc::getpid(), sig);
        } else {
            // The value first: the loop reads it after it sees the flags.
            let came = queued_value(info);
            if let (Some(value), Some(queued)) = (VALUES.get(sig as usize), QUEUED.get(sig as usize)) {
                value.store(came.unwrap_or(0), Ordering::SeqCst);
                queued.store(came.is_some(), Ordering::SeqCst);
            }
            if let Some(flag) = PENDING.get(sig as usize) {
                flag.store(true, Ordering::SeqCst);
            }
            let fd = WAKE_FD.load(Ordering::Relaxed);
            if fd >= 0 {
                let byte = 1u8;
                // A full pipe (EAGAIN) is fine: the loop is already due to wake.
                libc::write(fd, (&byte as *const u8).cast(), 1);
            }
        }
        *errno_location() = saved;
    }
}

#[cfg(target_os = "linux")]
unsafe fn errno_location() -> *mut libc::c_int {
    // SAFETY: always valid for the calling thread.
    unsafe { libc::__errno_location() }
}

#[cfg(not(target_os = "linux"))]
unsafe fn errno_location() -> *mut libc::c_int {
    // SAFETY: always valid for the calling thread.
    unsafe { libc::__error() }
}

/// The read end of the self-pipe; readable whenever a handled signal arrived.
///
/// Only one may exist per process (the handlers are process-wide).
#[derive(Debug)]
pub struct SignalPipe {
    read: OwnedFd,
    _write: OwnedFd,
}

impl SignalPipe {
    /// Installs handlers for `signals` and returns the pipe the loop polls.
    ///
    /// Call before spawning anything, so a signal that lands the instant after a spawn is seen.
    /// SIGPIPE is set to ignored at the same time: the supervisor must never die of a closed pipe.
    ///
    /// Errors: `pipe2`/`fcntl`/`sigaction` failures, as `io::Error`.
    pub fn install(signals: &[Signal]) -> io::Result<SignalPipe> {
        let (read, write) = pipe_cloexec()?;
        set_nonblocking(read.as_raw_fd())?;
        set_nonblocking(write.as_raw_fd())?;
        OWNER_PID.store(rustix::process::getpid().as_raw_pid(), Ordering::SeqCst);
        WAKE_FD.store(write.as_raw_fd(), Ordering::SeqCst);
        for sig in signals {
            // SAFETY: a zeroed sigaction is a valid starting point; the handler is an extern "C"
            // fn with the signature an SA_SIGINFO handler has; SA_RESTART keeps std's blocking
            // calls from seeing EINTR.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_signal as *const () as libc::sighandler_t;
                action.sa_flags =
                    libc::SA_SIGINFO | libc::SA_RESTART | if sig.0 == libc::SIGCHLD { libc::SA_NOCLDSTOP } else { 0 };
                libc::sigemptyset(&mut action.sa_mask);
                if libc::sigaction(sig.0, &action, std::ptr::null_mut()) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
        }
        ignore(libc::SIGPIPE)?;
        unblock(signals)?;
        Ok(SignalPipe { read, _write: write })
    }

    /// In a forked child that goes on running the same code (the keeper): makes the handlers
    /// this process's own again, on a pipe of its own. Without it the child's handlers would
    /// take the default action (they act only for the pid that installed them), and both
    /// processes would read each other's wake-ups from one shared pipe. The new pipe takes the
    /// old one's fd numbers, so every copy of this `SignalPipe` stays valid; flags that were
    /// pending in the parent are dropped.
    ///
    /// Errors: `pipe2`/`fcntl`/`dup2` failures, as `io::Error`.
    pub fn renew_after_fork(&self) -> io::Result<()> {
        let (read, write) = pipe_cloexec()?;
        set_nonblocking(read.as_raw_fd())?;
        set_nonblocking(write.as_raw_fd())?;
        for (new, old) in [(&read, &self.read), (&write, &self._write)] {
            // SAFETY: dup2 between two fds this process owns; the old number now names the new
            // pipe end (single-threaded, so nothing can fork between this and the cloexec).
            if unsafe { libc::dup2(new.as_raw_fd(), old.as_raw_fd()) } < 0 {
                return Err(io::Error::last_os_error());
            }
            set_cloexec(old.as_raw_fd())?;
        }
        for flag in &PENDING {
            flag.store(false, Ordering::SeqCst);
        }
        for (value, queued) in VALUES.iter().zip(&QUEUED) {
            queued.store(false, Ordering::SeqCst);
            value.store(0, Ordering::SeqCst);
        }
        OWNER_PID.store(rustix::process::getpid().as_raw_pid(), Ordering::SeqCst);
        Ok(())
    }

    /// Empties the pipe and returns the signals that arrived since the last call, in number order.
    pub fn drain(&self) -> Vec<Signal> {
        let mut buf = [0u8; 64];
        while let Ok(1..) = rustix::io::read(&self.read, &mut buf) {}
        (1..MAX_SIGNAL).filter(|n| PENDING[*n as usize].swap(false, Ordering::SeqCst)).map(Signal).collect()
    }

    /// The value `sig` last arrived with when it was queued with one (a stop's one-off term
    /// grace in ms: [`crate::process::PidFd::send_with_value`]), taken once; `None` when it came
    /// plainly. Read after [`SignalPipe::drain`] returned `sig`.
    pub fn take_value(&self, sig: Signal) -> Option<u64> {
        let i = sig.0 as usize;
        QUEUED.get(i)?.swap(false, Ordering::SeqCst).then(|| VALUES[i].swap(0, Ordering::SeqCst))
    }
}

impl Drop for SignalPipe {
    /// The handlers stay installed (a signal must never kill a supervisor that is still writing
    /// its result), but stop writing to a pipe whose fd number may soon name another file.
    fn drop(&mut self) {
        WAKE_FD.store(-1, Ordering::SeqCst);
    }
}

impl AsRawFd for SignalPipe {
    fn as_raw_fd(&self) -> RawFd {
        self.read.as_raw_fd()
    }
}

fn ignore(sig: i32) -> io::Result<()> {
    // SAFETY: setting a disposition to SIG_IGN has no memory-safety preconditions.
    if unsafe { libc::signal(sig, libc::SIG_IGN) } == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn unblock(signals: &[Signal]) -> io::Result<()> {
    // SAFETY: the set is initialised by sigemptyset before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in signals {
            libc::sigaddset(&mut set, sig.0);
        }
        let rc = libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
    }
    Ok(())
}

/// Creates a pipe whose both ends are close-on-exec: `(read, write)`.
///
/// Atomically (`pipe2(O_CLOEXEC)`, through std's `io::pipe`): a pipe made with `pipe` and then
/// `fcntl` could leak into a child that another thread (a parallel `stop`) forks in between, and
/// a leaked write end keeps a reader from ever seeing EOF.
pub fn pipe_cloexec() -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = std::io::pipe()?;
    Ok((OwnedFd::from(r), OwnedFd::from(w)))
}

/// Sets `O_NONBLOCK` on `fd`.
pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    let fd = borrowed(&fd)?;
    Ok(rustix::fs::fcntl_setfl(fd, rustix::fs::fcntl_getfl(fd)? | OFlags::NONBLOCK)?)
}

/// Sets `FD_CLOEXEC` on `fd`, so commands we spawn do not inherit it.
///
/// Errors: EBADF when `fd` is not open, which callers use to validate an inherited fd.
pub fn set_cloexec(fd: RawFd) -> io::Result<()> {
    let fd = borrowed(&fd)?;
    Ok(rustix::io::fcntl_setfd(fd, rustix::io::fcntl_getfd(fd)? | rustix::io::FdFlags::CLOEXEC)?)
}

/// Ends this process by `sig`, as a shell would see it (`WIFSIGNALED`), after the tree is gone.
///
/// Core dumps are disabled first: re-raising SIGSEGV or SIGQUIT to report a status must not
/// write a core file. If the signal does not end the process (it cannot be caught here, but a
/// default action of "ignore" or "stop" would not end it), exits with `128 + sig` instead.
pub fn die_by(sig: Signal) -> ! {
    // SAFETY: setrlimit, signal, sigprocmask, getpid and kill have no memory-safety preconditions;
    // the structures passed are fully initialised.
    unsafe {
        let zero = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        libc::setrlimit(libc::RLIMIT_CORE, &zero);
        libc::signal(sig.0, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig.0);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        // kill(getpid()), not raise(): musl's raise signals the thread id it cached, which in a
        // keeper cloned with CLONE_VM (sheepdog_core::keeper) is its supervisor's, not its own.
        libc::kill(libc::getpid(), sig.0);
    }
    std::process::exit(128 + sig.0)
}

/// Sets `sig`'s disposition to SIG_DFL. On Linux x86_64/aarch64 this is the raw
/// `rt_sigaction` syscall: glibc's wrapper refuses signals 32 and 33 (reserved for its threads),
/// yet a parent may have left them ignored, and an ignored signal survives `exec`.
fn set_default(sig: i32) {
    #[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        // The kernel's struct sigaction on these architectures.
        #[repr(C)]
        struct KernelSigaction {
            handler: usize,
            flags: u64,
            restorer: usize,
            mask: u64,
        }
        let act = KernelSigaction { handler: 0, flags: 0, restorer: 0, mask: 0 }; // SIG_DFL
        // SAFETY: act is a valid kernel sigaction for the call; the old action is not read;
        // 8 is the kernel's sigset size. Async-signal-safe (a bare syscall).
        unsafe {
            libc::syscall(libc::SYS_rt_sigaction, sig, &act as *const KernelSigaction, std::ptr::null::<u8>(), 8usize);
        }
    }
    #[cfg(not(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64"))))]
    // SAFETY: setting SIG_DFL is async-signal-safe; invalid numbers return EINVAL, ignored.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
    }
}

/// In a forked child before `exec`: every signal back to its default action and an empty mask,
/// so the command starts as if launched by a shell (tini and process-wrap's `ResetSigmask` do
/// the same). Async-signal-safe.
pub fn reset_for_exec() -> io::Result<()> {
    for sig in 1..MAX_SIGNAL {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        set_default(sig);
    }
    // SAFETY: set is initialised by sigemptyset.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        if libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Clears `O_NONBLOCK` on `fd` (a FIFO opened non-blocking, about to be a command's stdin).
pub fn set_blocking(fd: RawFd) -> io::Result<()> {
    let fd = borrowed(&fd)?;
    Ok(rustix::fs::fcntl_setfl(fd, rustix::fs::fcntl_getfl(fd)? - OFlags::NONBLOCK)?)
}

/// `mkfifo(path, mode)`: a named pipe (std's `mkfifo` is not stable yet).
///
/// Errors: the OS error (EEXIST when something is already there).
pub fn mkfifo(path: &std::path::Path, mode: u32) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), mode as libc::mode_t) };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}
