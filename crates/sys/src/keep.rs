//! The keeper without a copy of the supervisor: `clone(CLONE_VM)`, and the supervisor's relay
//! on a stack of its own, in system calls only.
//!
//! Why: a forked keeper cost `run -- true` about 0.4 ms on the 2-vCPU VM of BENCHMARKS.md (the
//! fork copies the page tables, both sides then fault in every page they write, and the keeper's
//! exit tears down a whole address space) and about 190 KiB of PSS per managed process. Issue
//! 16's budgets are 0.2 ms and 384 KiB for the pair.
//!
//! How: [`clone_keeper`] makes the keeper a `CLONE_VM` child that goes on running the
//! supervisor's Rust code on the supervisor's own stack, as a forked keeper would, while the
//! supervisor (the pid the host holds) leaves that stack at once for a small one mapped for it
//! and runs only [`Relay`]'s loop: it passes every signal it gets on to the keeper, waits for
//! the keeper to exit, and exits as the keeper did. The two share one address space, so the
//! supervisor touches nothing in it but the relay's own memory, makes system calls directly
//! (not through libc: `errno` lives in the thread-local block the keeper uses) and never
//! allocates, locks or panics.
//!
//! A keeper killed before it said "done" may have died holding any lock of that shared memory
//! (the allocator's among them), so the supervisor does not go on in it: it `execve`s
//! `/proc/self/exe` with its own arguments and what it learned in `SHEEPDOG_ADOPT` (the
//! keeper's wait status and its messages, in hex), and the new image adopts the tree
//! (`sheepdog_core::keeper::take_adoption`). The pid, its children, its subreaper bit and its blocked
//! signals stay across `execve`.
//!
//! What this gives up: the OOM killer kills every process that shares the victim's memory, so
//! when it picks the supervisor it takes the keeper too (the provider's tree, with far more
//! memory, is the one it picks in practice). README.md's "What sheepdog cannot do" lists it with the other window.
//!
//! Linux on x86_64 and aarch64 only (a few lines of assembly per architecture); elsewhere the
//! keeper is forked (`sheepdog_core::keeper`).
//!
//! Why raw system calls and libc here, not rustix as in the rest of this crate: the relay must
//! not touch libc's `errno`, allocate, lock or panic, and that has to hold by construction, in
//! this file. rustix makes raw system calls on Linux only in its default backend (a
//! `rustix_use_libc` build setting routes it through libc); most of what the relay needs
//! (`rt_sigtimedwait`, `rt_sigaction`, `execveat`, `exit_group`) is among its `runtime` calls,
//! none of them safe; and the setup around the clone (masks, `environ`) has no safe rustix call.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;

use super::Signal;
use super::exec::Stack;

unsafe extern "C" {
    /// The process's environment (POSIX).
    static environ: *const *const libc::c_char;
}

/// Bytes of the relay's stack. Its deepest frame is the relay loop with 384 bytes of buffers.
const RELAY_STACK: usize = 32 * 1024;
/// The variable the relay hands its findings on in: `SHEEPDOG_ADOPT=`.
pub const ADOPT_VAR: &str = "SHEEPDOG_ADOPT";
/// Bytes of the keeper's messages the relay keeps: 16 records of 12 bytes.
const MESSAGES: usize = 12 * 16;
/// `SHEEPDOG_ADOPT=` + status (`e` or `s` and up to 11 digits) + `:` + the messages in hex + NUL.
const ADOPT_LEN: usize = ADOPT_VAR.len() + 1 + 12 + 1 + 2 * MESSAGES + 1;

/// Everything the supervisor's relay needs after the clone, prepared before it and never
/// touched by the keeper. Leaked: the relay ends in `exit` or `execve`.
pub struct Relay {
    /// Signals the relay waits for and passes on (all but SIGCHLD), as a kernel sigset.
    waited: u64,
    /// Signals that arrived before the clone, passed on first.
    early: u64,
    /// The keeper's pipe to the supervisor (non-blocking read end).
    from_keeper: RawFd,
    /// Fds the supervisor closes after the clone: the provider's stdio and the keeper's pipe
    /// ends. The keeper holds its own copies.
    close: Vec<RawFd>,
    /// Fds the adopting image inherits (close-on-exec cleared before `execve`): the read ends
    /// of a managed entry's log pipes, so the provider's writes during the stop still have a
    /// reader (without one it dies of SIGPIPE before its SIGTERM handler runs).
    inherit: Vec<RawFd>,
    /// The record kinds that mean "done" and "spawned" (`sheepdog_core::keeper::Message`).
    done_kind: i32,
    spawned_kind: i32,
    /// PID 1 of its namespace: it cannot die by a signal it raises at itself.
    is_init: bool,
    _argv: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    _extra_env: Vec<CString>,
    /// `environ` as it was at the clone (its strings are never freed), without any
    /// `SHEEPDOG_ADOPT*`, then the extra variables, then `adopt`, then NULL.
    envp: Vec<*const libc::c_char>,
    /// The same with only `PATH`, `HOME` and `SHEEPDOG_*` of `environ`: the retry when the
    /// whole environment and the adoption's variables no longer fit the kernel's limit (E2BIG):
    /// the adoption must not need more room than the command had.
    envp_small: Vec<*const libc::c_char>,
    /// This program, opened before the clone (`O_PATH`): re-executed with `execveat`, so the
    /// adoption needs neither a mounted `/proc` nor the file still at its path. -1 if it could
    /// not be opened (then `/proc/self/exe`).
    exe: RawFd,
    adopt: [u8; ADOPT_LEN],
    /// The relay's stack; never unmapped once the relay runs on it (the relay is leaked).
    stack: Stack,
}

impl Relay {
    /// A relay that passes on `waited` (SIGCHLD is added), reads the keeper's records from
    /// `from_keeper`, closes `close` in the supervisor, and on adoption re-executes this
    /// process's arguments with `extra_env` (`NAME=value` strings) added and `inherit` open.
    ///
    /// Errors: the stack's mapping, as `io::Error`; `InvalidInput` for an argument or variable
    /// with a NUL byte.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        waited: &[Signal],
        early: &[Signal],
        from_keeper: RawFd,
        (close, inherit): (Vec<RawFd>, Vec<RawFd>),
        (done_kind, spawned_kind): (i32, i32),
        is_init: bool,
        extra_env: &[String],
    ) -> io::Result<Box<Relay>> {
        let set = |sigs: &[Signal]| sigs.iter().fold(0u64, |m, s| m | (1u64 << (s.as_raw() - 1)));
        let nul = |_| io::Error::from(io::ErrorKind::InvalidInput);
        let argv: Vec<CString> =
            std::env::args_os().map(|a| CString::new(a.as_bytes())).collect::<Result<_, _>>().map_err(nul)?;
        let extra: Vec<CString> =
            extra_env.iter().map(|v| CString::new(v.as_bytes())).collect::<Result<_, _>>().map_err(nul)?;
        let mut envp = Vec::new();
        let mut envp_small = Vec::new();
        // SAFETY: `environ` is NULL or a NULL-terminated array of NUL-terminated strings; this
        // process is single-threaded, so nothing changes it while it is read.
        unsafe {
            let mut p = environ;
            while !p.is_null() && !(*p).is_null() {
                let bytes = std::ffi::CStr::from_ptr(*p).to_bytes();
                if !bytes.starts_with(ADOPT_VAR.as_bytes()) {
                    envp.push(*p);
                    if [&b"PATH="[..], b"HOME=", b"SHEEPDOG_"].iter().any(|k| bytes.starts_with(k)) {
                        envp_small.push(*p);
                    }
                }
                p = p.add(1);
            }
        }
        envp.extend(extra.iter().map(|c| c.as_ptr()));
        envp_small.extend(extra.iter().map(|c| c.as_ptr()));
        let mut relay = Box::new(Relay {
            waited: set(waited) | set(&[Signal::CHLD]),
            early: set(early),
            from_keeper,
            close,
            inherit,
            done_kind,
            spawned_kind,
            is_init,
            argv: argv.iter().map(|c| c.as_ptr()).chain([std::ptr::null()]).collect(),
            _argv: argv,
            _extra_env: extra,
            envp,
            envp_small,
            exe: open_own_executable(),
            adopt: [0; ADOPT_LEN],
            stack: Stack::map(RELAY_STACK)?,
        });
        // The slot for the adoption variable: its address is final (the relay is boxed).
        let adopt = relay.adopt.as_ptr().cast();
        for envp in [&mut relay.envp, &mut relay.envp_small] {
            envp.push(adopt);
            envp.push(std::ptr::null());
        }
        Ok(relay)
    }
}

/// This program as an `O_PATH` fd (close-on-exec: the keeper's provider never sees it):
/// `/proc/self/exe`, else the path it was executed by (`AT_EXECFN` of the auxiliary vector,
/// which needs no `/proc`). -1 if neither opens.
fn open_own_executable() -> RawFd {
    let flags = libc::O_PATH | libc::O_CLOEXEC;
    // SAFETY: open with a NUL-terminated path; the result is an fd or -1.
    let fd = unsafe { libc::open(c"/proc/self/exe".as_ptr(), flags) };
    if fd >= 0 {
        return fd;
    }
    // SAFETY: getauxval reads the auxiliary vector; AT_EXECFN is a pointer to the NUL-terminated
    // path given to execve (or 0), which lives as long as the process.
    let path = unsafe { libc::getauxval(libc::AT_EXECFN) } as *const libc::c_char;
    if path.is_null() {
        return -1;
    }
    // SAFETY: as above; a relative path is taken from the current directory, as it was.
    unsafe { libc::open(path, flags) }
}

/// A signal mask saved by [`block_all`].
#[derive(Debug)]
pub struct Mask(libc::sigset_t);

/// Blocks every signal and returns the mask before. The supervisor's first step of the split:
/// a handler of its own must never run once the keeper shares its memory (it would run Rust
/// code in memory the keeper uses).
pub fn block_all() -> Mask {
    let mut old = unsafe_zeroed();
    // SAFETY: sigfillset initialises `all`; sigprocmask stores the old mask in `old`.
    unsafe {
        let mut all = unsafe_zeroed();
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_SETMASK, &all, &mut old);
    }
    Mask(old)
}

/// Restores a mask [`block_all`] saved.
pub fn restore_mask(m: &Mask) {
    // SAFETY: a mask sigprocmask stored.
    unsafe { libc::sigprocmask(libc::SIG_SETMASK, &m.0, std::ptr::null_mut()) };
}

/// Clones the keeper (see the module docs), with every signal blocked ([`block_all`], whose
/// `mask` it takes). Returns in the keeper only, still with every signal blocked: the keeper
/// restores the returned mask once its handlers are its own. In the supervisor it returns only
/// on failure (nothing was cloned, the mask restored); on success the supervisor runs `relay`
/// until it exits or re-executes itself.
///
/// Must be called from a single-threaded process (the supervisor is).
///
/// Errors: the clone's (EAGAIN, ENOMEM), as `io::Error`.
pub fn clone_keeper(relay: Box<Relay>, mask: Mask) -> io::Result<Mask> {
    let top = relay.stack.top();
    let relay = Box::into_raw(relay);
    // SAFETY: `top` is the 16-byte aligned top of the relay's own mapping, which nothing else
    // uses; `relay_main` never returns and touches only the leaked relay and its stack. The
    // keeper goes on with this stack and memory; the supervisor leaves both before it touches
    // memory (see clone_then), and every signal is blocked, so no handler runs meanwhile.
    let rc = unsafe { clone_then(top, relay_main, relay.cast()) };
    // Only the keeper, or a supervisor whose clone failed, gets here.
    if rc < 0 {
        restore_mask(&mask);
        // SAFETY: the box leaked above; no relay ran, so its stack may be unmapped.
        drop(unsafe { Box::from_raw(relay) });
        return Err(io::Error::from_raw_os_error(-rc as i32));
    }
    Ok(mask)
}

/// Unblocks every signal: an adopting supervisor's first act once its handlers are installed
/// (the relay left them blocked across `execve`, so none was lost).
pub fn unblock_all() {
    let mut none = unsafe_zeroed();
    // SAFETY: sigemptyset initialises `none`; the call has no other precondition.
    unsafe {
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
    }
}

fn unsafe_zeroed() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; all zeroes is a valid (empty) set.
    unsafe { std::mem::zeroed() }
}

/// Takes over `fd`, an fd the relay left open across `execve` for the adopting image: marked
/// close-on-exec again and owned from here on. `None` if it is not open. Call it once per fd.
pub fn inherited_fd(fd: RawFd) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: fcntl on an integer fd; F_SETFD only changes that fd's flags.
    if fd < 3 || unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } != 0 {
        return None;
    }
    // SAFETY: the fd is open (fcntl succeeded), was left open for this image by its relay, and
    // the caller takes it once, so nothing else owns it.
    Some(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Reads and removes `name` from this process's environment: how an adopting supervisor takes
/// what its relay left, so that nothing it spawns (a cleanup, a nested `sheepdog run`) sees it.
/// Must be called from a single-threaded process.
pub fn take_env(name: &str) -> Option<std::ffi::OsString> {
    let v = std::env::var_os(name)?;
    // SAFETY: the caller is single-threaded (the supervisor binaries), so no other thread reads
    // the environment meanwhile.
    unsafe { std::env::remove_var(OsStr::new(name)) };
    Some(v)
}

/// `clone(CLONE_VM | SIGCHLD)` with the child on the caller's stack. The child returns 0; a
/// failed clone returns `-errno` in the caller. The parent of a clone that succeeded never
/// returns: before it touches any memory it moves to `top` and calls `f(arg, child_pid)`.
///
/// # Safety
/// `top` must be the 16-byte aligned top of a stack nothing else uses; `f` must never return
/// and may use only that stack and memory the child never touches. Every signal must be
/// blocked (a handler would run on the shared stack).
#[cfg(target_arch = "x86_64")]
unsafe fn clone_then(
    top: usize,
    f: unsafe extern "C" fn(*mut libc::c_void, i32) -> !,
    arg: *mut libc::c_void,
) -> isize {
    let ret: isize;
    // SAFETY: the caller's contract. `syscall` clobbers rcx and r11; r12, r13 and r14 carry
    // the stack, f and arg past it. The child (rax 0) and a failure (rax < 0) fall through.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jle 2f",
            "mov rsp, r12",
            "mov rdi, r14",
            "mov esi, eax",
            "call r13",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone as isize => ret,
            in("rdi") (libc::CLONE_VM | libc::SIGCHLD) as usize,
            in("rsi") 0usize,
            in("rdx") 0usize,
            in("r10") 0usize,
            in("r8") 0usize,
            in("r12") top,
            in("r13") f,
            in("r14") arg,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// See the x86_64 version.
///
/// # Safety
/// As there.
#[cfg(target_arch = "aarch64")]
unsafe fn clone_then(
    top: usize,
    f: unsafe extern "C" fn(*mut libc::c_void, i32) -> !,
    arg: *mut libc::c_void,
) -> isize {
    let ret: isize;
    // SAFETY: the caller's contract. x20, x21 and x22 carry the stack, f and arg past the
    // `svc`, which preserves every register but x0.
    unsafe {
        std::arch::asm!(
            "svc #0",
            "cmp x0, #0",
            "b.le 2f",
            "mov sp, x20",
            "mov x1, x0",
            "mov x0, x22",
            "blr x21",
            "brk #1",
            "2:",
            inlateout("x0") (libc::CLONE_VM | libc::SIGCHLD) as usize as isize => ret,
            in("x1") 0usize,
            in("x2") 0usize,
            in("x3") 0usize,
            in("x4") 0usize,
            in("x8") libc::SYS_clone,
            in("x20") top,
            in("x21") f,
            in("x22") arg,
            lateout("x30") _,
            options(nostack),
        );
    }
    ret
}

/// One system call of up to five arguments (unused ones 0: waitid reads its fifth, the
/// rusage pointer), without libc (no `errno`): returns the result or `-errno`.
///
/// # Safety
/// As the system call `n` with arguments `a`.
#[cfg(target_arch = "x86_64")]
unsafe fn sys(n: libc::c_long, a: [usize; 5]) -> isize {
    let ret: isize;
    // SAFETY: the caller's contract; `syscall` clobbers rcx and r11 only.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") n as isize => ret,
            in("rdi") a[0],
            in("rsi") a[1],
            in("rdx") a[2],
            in("r10") a[3],
            in("r8") a[4],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// See the x86_64 version.
///
/// # Safety
/// As there.
#[cfg(target_arch = "aarch64")]
unsafe fn sys(n: libc::c_long, a: [usize; 5]) -> isize {
    let ret: isize;
    // SAFETY: the caller's contract; `svc` preserves every register but x0.
    unsafe {
        std::arch::asm!(
            "svc #0",
            inlateout("x0") a[0] as isize => ret,
            in("x1") a[1],
            in("x2") a[2],
            in("x3") a[3],
            in("x4") a[4],
            in("x8") n,
            options(nostack),
        );
    }
    ret
}

/// The kernel's sigset size (64 signals).
const SIGSET: usize = 8;

/// The supervisor after the clone: system calls only (see the module docs).
///
/// # Safety
/// `arg` is the leaked [`Relay`]; this runs on its stack; the keeper never touches either.
unsafe extern "C" fn relay_main(arg: *mut libc::c_void, keeper: i32) -> ! {
    // SAFETY: the function's contract.
    let r = unsafe { &mut *arg.cast::<Relay>() };
    // SAFETY: every call below is a system call on integers, fds this process holds, and
    // buffers of the relay or this frame of the sizes given.
    unsafe {
        // Block only what the supervisor has handlers for; the rest keep their default action.
        let waited = r.waited;
        sys(libc::SYS_rt_sigprocmask, [libc::SIG_SETMASK as usize, &waited as *const u64 as usize, 0, SIGSET, 0]);
        for fd in &r.close {
            sys(libc::SYS_close, [*fd as usize, 0, 0, 0, 0]);
        }
        for sig in 1..=64 {
            if r.early & (1u64 << (sig - 1)) != 0 && sig != libc::SIGCHLD {
                sys(libc::SYS_kill, [keeper as usize, sig as usize, 0, 0, 0]);
            }
        }
        let mut info = [0u8; 128];
        // What the signal came with: a stop request's one-off term grace rides in the value of a
        // signal queued with one (si_code SI_QUEUE at offset 8), passed on as it came.
        let mut came = [0u8; 128];
        let (code, status) = loop {
            let sig = sys(
                libc::SYS_rt_sigtimedwait,
                [&waited as *const u64 as usize, came.as_mut_ptr() as usize, 0, SIGSET, 0],
            );
            if sig == libc::SIGCHLD as isize {
                info.fill(0);
                let rc = sys(
                    libc::SYS_waitid,
                    [
                        libc::P_PID as usize,
                        keeper as usize,
                        info.as_mut_ptr() as usize,
                        (libc::WEXITED | libc::WNOHANG) as usize,
                        0,
                    ],
                );
                // si_pid at offset 16, si_code at 8 and si_status at 24 (x86_64 and aarch64).
                let word = |at: usize| i32::from_ne_bytes([info[at], info[at + 1], info[at + 2], info[at + 3]]);
                if rc == 0 && word(16) == keeper {
                    break (word(8), word(24));
                }
                if rc == -(libc::ECHILD as isize) {
                    // Not this process's child any more (cannot happen): nothing to wait for.
                    break (libc::CLD_EXITED, 125);
                }
            } else if sig > 0 {
                let code = i32::from_ne_bytes([came[8], came[9], came[10], came[11]]);
                if code == libc::SI_QUEUE {
                    sys(libc::SYS_rt_sigqueueinfo, [keeper as usize, sig as usize, came.as_ptr() as usize, 0, 0]);
                } else {
                    sys(libc::SYS_kill, [keeper as usize, sig as usize, 0, 0, 0]);
                }
            }
        };
        let signaled = code != libc::CLD_EXITED;

        // What the keeper wrote before it exited is in the pipe.
        let mut msgs = [0u8; MESSAGES];
        let mut len = 0;
        while len < MESSAGES {
            let n = sys(
                libc::SYS_read,
                [r.from_keeper as usize, msgs.as_mut_ptr().add(len) as usize, MESSAGES - len, 0, 0],
            );
            if n <= 0 {
                break;
            }
            len += n as usize;
        }
        let kind = |i: usize| i32::from_ne_bytes([msgs[i], msgs[i + 1], msgs[i + 2], msgs[i + 3]]);
        let mut done = false;
        let mut spawned = false;
        let mut i = 0;
        while i + 12 <= len {
            done |= kind(i) == r.done_kind;
            spawned |= kind(i) == r.spawned_kind;
            i += 12;
        }
        // Killed between its clone of the provider and its record of it (the provider can run
        // and print before the keeper is scheduled again): the kernel wrote the pid into the
        // memory the two share before the provider first ran (`exec::SPAWNED`).
        let provider = crate::exec::SPAWNED.load(core::sync::atomic::Ordering::SeqCst);
        if !done && !spawned && provider > 0 && len + 12 <= MESSAGES {
            for (at, word) in [r.spawned_kind, provider, provider].into_iter().enumerate() {
                msgs[len + 4 * at..len + 4 * at + 4].copy_from_slice(&word.to_ne_bytes());
            }
            len += 12;
            spawned = true;
        }
        if !done && (signaled || spawned) {
            // Killed before it finished: a fresh image of this program adopts the tree.
            let mut w = Writer { buf: &mut r.adopt, at: 0 };
            w.bytes(ADOPT_VAR.as_bytes());
            w.bytes(if signaled { b"=s" } else { b"=e" });
            w.number(status as u32);
            w.bytes(b":");
            for b in &msgs[..len] {
                let hex = b"0123456789abcdef";
                w.bytes(&[hex[(b >> 4) as usize], hex[(b & 15) as usize]]);
            }
            w.bytes(b"\0");
            for fd in &r.inherit {
                sys(libc::SYS_fcntl, [*fd as usize, libc::F_SETFD as usize, 0, 0, 0]);
            }
            // This program by its fd, then with the smaller environment if the whole one and
            // the adoption's variables are over the kernel's limit (E2BIG), then by its path.
            for envp in [&r.envp, &r.envp_small] {
                let argv = r.argv.as_ptr() as usize;
                let rc = if r.exe >= 0 {
                    let empty = c"".as_ptr() as usize;
                    let at = libc::AT_EMPTY_PATH as usize;
                    sys(libc::SYS_execveat, [r.exe as usize, empty, argv, envp.as_ptr() as usize, at])
                } else {
                    sys(libc::SYS_execve, [c"/proc/self/exe".as_ptr() as usize, argv, envp.as_ptr() as usize, 0, 0])
                };
                if rc != -(libc::E2BIG as isize) {
                    break;
                }
            }
            // No image to adopt with: leave as the keeper did.
        }
        exit_as(signaled, status, r.is_init)
    }
}

/// Ends the supervisor as its keeper ended: the same code, or death by the same signal (no
/// core file; PID 1, which cannot die by its own signal, exits 128 + N).
///
/// # Safety
/// System calls only; callable from the relay.
unsafe fn exit_as(signaled: bool, status: i32, is_init: bool) -> ! {
    // SAFETY: system calls on integers and a local struct.
    unsafe {
        if signaled && !is_init && (1..=64).contains(&status) {
            let zero = [0u64; 2];
            sys(libc::SYS_prlimit64, [0, libc::RLIMIT_CORE as usize, zero.as_ptr() as usize, 0, 0]);
            // The kernel's struct sigaction: handler, flags, restorer, mask. SIG_DFL.
            let act = [0u64; 4];
            sys(libc::SYS_rt_sigaction, [status as usize, act.as_ptr() as usize, 0, SIGSET, 0]);
            let only = 1u64 << (status - 1);
            sys(libc::SYS_rt_sigprocmask, [libc::SIG_UNBLOCK as usize, &only as *const u64 as usize, 0, SIGSET, 0]);
            let me = sys(libc::SYS_getpid, [0; 5]);
            sys(libc::SYS_kill, [me as usize, status as usize, 0, 0, 0]);
        }
        let code = if signaled { 128 + status } else { status };
        sys(libc::SYS_exit_group, [code as usize, 0, 0, 0, 0]);
    }
    #[allow(clippy::empty_loop)]
    loop {}
}

/// Bytes into a fixed buffer, cut at its end (keeping room for the NUL).
struct Writer<'a> {
    buf: &'a mut [u8],
    at: usize,
}

impl Writer<'_> {
    fn bytes(&mut self, b: &[u8]) {
        for &c in b {
            if (self.at + 1 < self.buf.len() || c == 0)
                && let Some(slot) = self.buf.get_mut(self.at)
            {
                *slot = c;
                self.at += 1;
            }
        }
    }

    fn number(&mut self, mut n: u32) {
        let mut digits = [0u8; 10];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        let tail = &digits[i..];
        self.bytes(tail);
    }
}
