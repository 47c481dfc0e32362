//! The provider's spawn without a copy of the supervisor: `clone3(CLONE_VM | CLONE_VFORK)`, the
//! way glibc's and musl's `posix_spawn` start a child, with `CLONE_INTO_CGROUP` when the tree
//! has a cgroup.
//!
//! Why: a fork copies the spawner's page tables and both sides then fault in what they touch;
//! on the 2-vCPU VM of BENCHMARKS.md a fork, exit and reap costs about 170 µs even for a tiny C
//! program, and `run -- true` paid it for the provider on top of the keeper's own fork. With
//! `CLONE_VM` the child borrows the spawner's memory and runs on a stack of its own until
//! `execve` gives it a fresh one; `CLONE_VFORK` keeps the spawner suspended meanwhile, so
//! nothing else touches that memory.
//!
//! What that allows in the child: only what [`Plan`] prepared (every string, pointer array and
//! path candidate is built by the spawner), and only system calls. No allocation, no locks, no
//! panics; its errors go back through the plan, which the spawner reads once it resumes.
//!
//! Linux on x86_64 and aarch64 only (the clone needs a few lines of assembly per architecture);
//! elsewhere `sheepdog_core::spawn` forks through std.
//!
//! The child side stays on libc's async-signal-safe wrappers and the clone on assembly, not
//! rustix: `clone3` with a child function is not in rustix at all, and the child's steps must
//! stay few, visible and free of allocation and locks here (as `keep`'s relay; the `errno` a
//! failed wrapper writes is the suspended spawner's, read by nobody). The signal mask around the
//! clone and the stack mapping have no safe rustix call either (its `runtime` and `mm` ones).

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicI32, Ordering};

use super::Pid;

unsafe extern "C" {
    /// The process's environment (POSIX).
    static environ: *const *const libc::c_char;
}

/// The shell execvp runs a file with when the kernel cannot (no `#!` line).
const SH: &std::ffi::CStr = c"/bin/sh";

/// Bytes of the child's stack, mapped for the spawn with a guard page below it and unmapped
/// after. The child's deepest call is a libc wrapper around one system call. (Not a buffer in
/// the spawner's frame: stack probes would touch every page of it in each supervisor and its
/// keeper for good, 10 KiB more PSS each.)
const CHILD_STACK: usize = 16 * 1024;
/// The guard page below the child's stack: an overflow faults instead of writing over the
/// spawner's memory.
const GUARD: usize = 4096;

/// The pid of the child of this process's last [`spawn`], written by the kernel before the child
/// first runs (`CLONE_PARENT_SETTID`); 0 before any spawn and after one that failed. A keeper that
/// shares its supervisor's memory (`keep`) spawns the provider this way, so a supervisor whose
/// keeper was killed between the clone and its "spawned" record still learns the provider's pid,
/// with or without a mounted `/proc`.
pub static SPAWNED: AtomicI32 = AtomicI32::new(0);

/// Everything the child needs between the clone and `execve`, prepared by the spawner.
pub struct Plan {
    /// The paths to try in order: the program itself when it names a path (has a `/`), else
    /// each directory of the child's `PATH` joined with it (as `execvp` searches).
    candidates: Vec<CString>,
    _argv: Vec<CString>,
    argv_ptrs: Vec<*const libc::c_char>,
    /// `/bin/sh`, the candidate, then the arguments: the retry for a script without `#!`.
    sh_argv: std::cell::UnsafeCell<Vec<*const libc::c_char>>,
    /// The variables `env` sets; the rest of `envp_ptrs` points into `environ`.
    _envp: Vec<CString>,
    envp_ptrs: Vec<*const libc::c_char>,
    cwd: Option<CString>,
    /// stdin, stdout, stderr; `None`: inherited; a negative fd leaves that one inherited.
    stdio: Option<[RawFd; 3]>,
    /// Take the terminal's foreground for the child's new process group (as tini does).
    take_terminal: bool,
    /// Set by the child to the errno of the step that failed; 0 while all went well.
    err: AtomicI32,
    /// Set by the child when the step that failed was the `chdir`.
    cwd_failed: std::sync::atomic::AtomicBool,
}

impl Plan {
    /// The plan for `program args...` with the spawner's environment plus `env` (a later value
    /// of a name wins), in `cwd`, with `stdio` on 0, 1 and 2, as the leader of a new process
    /// group. Errors: ENOENT for an empty program (as `execvp` gives), `InvalidInput` for a NUL
    /// byte in any string.
    pub fn new(
        program: &OsStr,
        args: &[OsString],
        env: &[(OsString, OsString)],
        cwd: Option<&std::path::Path>,
        stdio: Option<[RawFd; 3]>,
        take_terminal: bool,
    ) -> io::Result<Plan> {
        let cstr = |b: &[u8]| CString::new(b).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte"));
        if program.is_empty() {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        let mut argv = Vec::with_capacity(args.len() + 1);
        argv.push(cstr(program.as_bytes())?);
        for a in args {
            argv.push(cstr(a.as_bytes())?);
        }
        // The child's environment points at this process's own strings (`environ`), minus
        // the names `env` sets: no copy of each variable per spawn.
        let mut envp_ptrs: Vec<*const libc::c_char> = Vec::new();
        let mut path: Option<OsString> = None;
        let overridden = |name: &[u8]| env.iter().any(|(n, _)| n.as_bytes() == name);
        // SAFETY: `environ` is the process's NULL-terminated array of NUL-terminated strings;
        // nothing in sheepdog changes the environment (no setenv), so the strings stay put for
        // as long as the plan is used.
        unsafe {
            let mut p = environ;
            while !p.is_null() && !(*p).is_null() {
                let entry = std::ffi::CStr::from_ptr(*p).to_bytes();
                let (name, value) = match entry.iter().position(|b| *b == b'=') {
                    Some(i) => (&entry[..i], Some(&entry[i + 1..])),
                    None => (entry, None),
                };
                if !overridden(name) {
                    // The first PATH with a value, as getenv and execvp read it.
                    if name == b"PATH"
                        && path.is_none()
                        && let Some(v) = value
                    {
                        path = Some(OsStr::from_bytes(v).to_os_string());
                    }
                    envp_ptrs.push(*p);
                }
                p = p.add(1);
            }
        }
        let mut envp = Vec::new();
        for (i, (k, v)) in env.iter().enumerate() {
            if env[i + 1..].iter().any(|(n, _)| n == k) {
                continue;
            }
            if k == "PATH" {
                path = Some(v.clone());
            }
            envp.push(cstr(&[k.as_bytes(), b"=", v.as_bytes()].concat())?);
        }
        envp_ptrs.extend(envp.iter().map(|s| s.as_ptr()));
        envp_ptrs.push(std::ptr::null());
        let candidates = if program.as_bytes().contains(&b'/') {
            vec![cstr(program.as_bytes())?]
        } else {
            // execvp's default when PATH is unset (glibc's _CS_PATH); an empty element is the
            // working directory.
            let path = path.unwrap_or_else(|| "/bin:/usr/bin".into());
            let mut out = Vec::new();
            for dir in path.as_bytes().split(|b| *b == b':') {
                let dir: &[u8] = if dir.is_empty() { b"." } else { dir };
                out.push(cstr(&[dir, b"/", program.as_bytes()].concat())?);
            }
            out
        };
        let ptrs = |v: &[CString]| v.iter().map(|s| s.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
        // For a file without a `#!` line (ENOEXEC): `/bin/sh PATH ARGS...`, as execvp retries.
        // Slot 1 is the candidate that failed, filled in by the child.
        let mut sh_argv: Vec<*const libc::c_char> = vec![SH.as_ptr(), std::ptr::null()];
        sh_argv.extend(argv[1..].iter().map(|s| s.as_ptr()));
        sh_argv.push(std::ptr::null());
        Ok(Plan {
            candidates,
            sh_argv: std::cell::UnsafeCell::new(sh_argv),
            argv_ptrs: ptrs(&argv),
            _argv: argv,
            envp_ptrs,
            _envp: envp,
            cwd: cwd.map(|c| cstr(c.as_os_str().as_bytes())).transpose()?,
            stdio,
            take_terminal,
            err: AtomicI32::new(0),
            cwd_failed: std::sync::atomic::AtomicBool::new(false),
        })
    }
}

/// How [`spawn`] failed.
#[derive(Debug)]
pub enum Failed {
    /// `clone3` refused (ENOSYS before Linux 5.3, a seccomp filter, EBUSY for a cgroup that
    /// cannot take processes, ...): nothing was started; the caller may fork the usual way.
    Clone,
    /// The child started but a step before `execve`, or `execve` itself, failed with this
    /// error; the child has been reaped.
    Exec(io::Error),
    /// The child could not enter the working directory (gone, not a directory, no search
    /// permission); the child has been reaped.
    Cwd(io::Error),
}

/// Starts the plan's command as the leader of a new process group, inside the cgroup whose
/// directory fd is `cgroup` when given, and returns its pid once `execve` succeeded (the
/// spawner is suspended until then). In the child, in order: `setpgid(0, 0)`, the terminal's
/// foreground when the plan asks for it, the stdio fds on 0/1/2, `chdir`, every fd above 2
/// marked close-on-exec, every signal's disposition set to default and an empty mask, then
/// `execve` of each candidate path (as glibc's `execvp`: on to the next on ENOENT, ENOTDIR,
/// ENAMETOOLONG or EACCES, reporting EACCES if any candidate gave it; a file the kernel cannot
/// run, ENOEXEC, is run with `/bin/sh`).
///
/// Must be called from a single-threaded process (the supervisor is): the child shares its
/// memory, and another thread could change it underneath.
pub fn spawn(plan: &Plan, cgroup: Option<RawFd>) -> Result<Pid, Failed> {
    /// `clone3` flag: start the child in the cgroup of directory fd `cgroup` (Linux 5.7).
    const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;
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
    // Unmapped when the spawn returns, whichever way: the child no longer runs on it then
    // (CLONE_VFORK: it has exec'd or exited when the spawner resumes).
    let stack = Stack::map(CHILD_STACK).map_err(|_| Failed::Clone)?;

    plan.err.store(0, Ordering::Relaxed);
    SPAWNED.store(0, Ordering::SeqCst);
    let mut args = CloneArgs {
        flags: (libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PARENT_SETTID) as u64,
        parent_tid: SPAWNED.as_ptr() as u64,
        exit_signal: libc::SIGCHLD as u64,
        stack: stack.bottom() as u64,
        stack_size: CHILD_STACK as u64,
        ..CloneArgs::default()
    };
    if let Some(fd) = cgroup {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = fd as u64;
    }
    // Every signal blocked across the clone: a handler of the spawner's must never run in the
    // child (it would run on the child's stack with the spawner's memory). The child resets the
    // dispositions before it clears its mask.
    // SAFETY: sigfillset initialises `all`; sigprocmask stores the old mask in `old`.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_SETMASK, &all, &mut old);
    }
    // SAFETY: `args` is a valid clone_args of the size passed, its stack the mapping above,
    // which nothing else uses and which outlives the child's use of it. CLONE_VFORK suspends
    // this thread until the child execs or exits, so the child alone runs on that stack and
    // reads `plan`, which outlives the call. The child runs only `child`, which never returns
    // (execve or _exit).
    let rc = unsafe { clone3_run(&args, std::mem::size_of::<CloneArgs>(), child, (plan as *const Plan).cast()) };
    let refused = rc < 0;
    // SAFETY: restores the mask saved above.
    unsafe {
        libc::sigprocmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
    if refused {
        return Err(Failed::Clone);
    }
    let pid = Pid::new(rc as i32).ok_or(Failed::Clone)?;
    match plan.err.load(Ordering::Acquire) {
        0 => Ok(pid),
        code => {
            SPAWNED.store(0, Ordering::SeqCst);
            let _ = super::process::reap(pid, true);
            let e = io::Error::from_raw_os_error(code);
            Err(if plan.cwd_failed.load(Ordering::Acquire) { Failed::Cwd(e) } else { Failed::Exec(e) })
        }
    }
}

/// A stack for a child that shares this process's memory: an anonymous mapping of `size` bytes
/// with a guard page below it (an overflow faults instead of writing over other memory), unmapped
/// on drop. Page aligned, so its top is 16-byte aligned as both ABIs want at a call.
pub(super) struct Stack {
    map: *mut libc::c_void,
    size: usize,
}

impl Stack {
    /// Maps it. Errors: `mmap`'s or `mprotect`'s, as `io::Error`.
    pub(super) fn map(size: usize) -> io::Result<Stack> {
        // SAFETY: an anonymous private mapping of a fixed size; checked for MAP_FAILED.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                GUARD + size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = Stack { map, size };
        // SAFETY: the first page of the mapping above.
        if unsafe { libc::mprotect(map, GUARD, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// The lowest usable address (above the guard page).
    pub(super) fn bottom(&self) -> usize {
        self.map as usize + GUARD
    }

    /// The top: where a stack pointer starts.
    pub(super) fn top(&self) -> usize {
        self.bottom() + self.size
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: the mapping `map` made, of that size; the owner drops it only once nothing
        // runs on it (or never, for the keeper's relay: see sys::keep).
        unsafe { libc::munmap(self.map, GUARD + self.size) };
    }
}

/// `clone3(args, size)`; in the child, on the stack `args` names, `f(arg)`, which must not
/// return. Returns the child's pid, or `-errno`, in the parent.
///
/// # Safety
/// `args` must be a valid `clone_args` with a stack whose top is 16-byte aligned; `f` must
/// never return and may only use the stack it is given and memory that outlives the child.
#[cfg(target_arch = "x86_64")]
unsafe fn clone3_run<T>(
    args: *const T,
    size: usize,
    f: unsafe extern "C" fn(*const libc::c_void) -> !,
    arg: *const libc::c_void,
) -> isize {
    let ret: isize;
    // SAFETY: the caller's contract. `syscall` clobbers rcx and r11; r12 and r13 carry f and
    // arg into the child, whose registers are the parent's at the clone.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "mov rdi, r13",
            "call r12",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 as isize => ret,
            in("rdi") args,
            in("rsi") size,
            in("r12") f,
            in("r13") arg,
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
unsafe fn clone3_run<T>(
    args: *const T,
    size: usize,
    f: unsafe extern "C" fn(*const libc::c_void) -> !,
    arg: *const libc::c_void,
) -> isize {
    let ret: isize;
    // SAFETY: the caller's contract. x20 and x21 carry f and arg into the child, whose
    // registers are the parent's at the clone.
    unsafe {
        std::arch::asm!(
            "svc #0",
            "cbnz x0, 2f",
            "mov x0, x21",
            "blr x20",
            "brk #1",
            "2:",
            inlateout("x0") args => ret,
            in("x1") size,
            in("x8") libc::SYS_clone3,
            in("x20") f,
            in("x21") arg,
            options(nostack),
        );
    }
    ret
}

/// The child, from the clone to `execve`: system calls only (see the module docs).
///
/// # Safety
/// `arg` is the spawner's `&Plan`, alive and unchanged until this child execs or exits.
unsafe extern "C" fn child(arg: *const libc::c_void) -> ! {
    // SAFETY: the function's contract.
    let plan = unsafe { &*arg.cast::<Plan>() };
    let errno = || io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
    let fail = |code: i32| -> ! {
        plan.err.store(code, Ordering::Release);
        // SAFETY: _exit ends the child at once: no destructor, no atexit handler runs.
        unsafe { libc::_exit(127) }
    };
    // SAFETY: each call is a system call wrapper on integers, fds the spawner holds open, and
    // NUL-terminated strings and pointer arrays the plan keeps alive.
    unsafe {
        if libc::setpgid(0, 0) != 0 {
            fail(errno());
        }
        if plan.take_terminal {
            // SIGTTOU, which tcsetpgrp from a background group raises, is blocked (all are).
            libc::tcsetpgrp(libc::STDIN_FILENO, libc::getpid());
        }
        if let Some(fds) = plan.stdio {
            // A source below 3 could be overwritten by an earlier dup2: move each out of the
            // way first.
            let mut src = fds;
            for s in src.iter_mut() {
                if (0..3).contains(s) {
                    let moved = libc::fcntl(*s, libc::F_DUPFD_CLOEXEC, 3);
                    if moved < 0 {
                        fail(errno());
                    }
                    *s = moved;
                }
            }
            for (target, s) in (0..3).zip(src) {
                if s >= 0 && libc::dup2(s, target) < 0 {
                    fail(errno());
                }
            }
        }
        if let Some(cwd) = &plan.cwd
            && libc::chdir(cwd.as_ptr()) != 0
        {
            let code = errno();
            plan.cwd_failed.store(true, Ordering::Release);
            fail(code);
        }
    }
    super::process::close_inherited_on_exec();
    if let Err(e) = super::signal::reset_for_exec() {
        fail(e.raw_os_error().unwrap_or(libc::EIO));
    }
    let mut code = libc::ENOENT;
    let mut denied = false;
    for path in &plan.candidates {
        // SAFETY: as above; execve returns only on failure.
        unsafe { libc::execve(path.as_ptr(), plan.argv_ptrs.as_ptr(), plan.envp_ptrs.as_ptr()) };
        code = errno();
        if code == libc::ENOEXEC {
            // SAFETY: the spawner is suspended and never touches `sh_argv` while a child runs;
            // slot 1 exists (the plan made it) and only the pointer is written, no reallocation.
            unsafe {
                let sh = &mut *plan.sh_argv.get();
                sh[1] = path.as_ptr();
                libc::execve(SH.as_ptr(), sh.as_ptr(), plan.envp_ptrs.as_ptr());
            }
            code = errno();
            break;
        }
        if code == libc::EACCES {
            denied = true;
        } else if !search_goes_on(code) {
            break;
        }
    }
    fail(if denied && search_goes_on(code) { libc::EACCES } else { code })
}

/// True for an `execve` error after which glibc's `execvp` tries the next directory of `PATH`
/// (EACCES too, but it is remembered: see [`child`]).
fn search_goes_on(code: i32) -> bool {
    matches!(code, libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT | libc::ENAMETOOLONG)
}

#[cfg(test)]
mod tests {
    use std::ffi::{OsStr, OsString};

    use super::{Failed, Plan, spawn};

    fn plan(program: &str, args: &[&str]) -> Plan {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        Plan::new(OsStr::new(program), &args, &[], None, None, false).unwrap()
    }

    #[test]
    fn a_command_on_the_path_runs_in_a_group_of_its_own() {
        let p = plan("sh", &["-c", "read x; exit 7"]);
        let (r, w) = super::super::signal::pipe_cloexec().unwrap();
        let mut p = p;
        p.stdio = Some([std::os::fd::AsRawFd::as_raw_fd(&r), 1, 2]);
        let pid = spawn(&p, None).unwrap();
        let pgid = rustix::process::getpgid(rustix::process::Pid::from_raw(pid.as_raw())).unwrap().as_raw_pid();
        drop(w);
        assert_eq!(super::super::process::reap(pid, true).unwrap(), Some(super::super::WaitStatus::Exited(7)));
        assert_eq!(pgid, pid.as_raw());
    }

    #[test]
    fn the_environment_is_the_spawners_with_the_plans_variables_on_top() {
        let env = [("SHEEPDOG_EXEC_TEST".into(), "a".into()), ("HOME".into(), "/override".into())];
        let script = concat!(
            r#"[ "$SHEEPDOG_EXEC_TEST" = a ] && [ "$HOME" = /override ] && [ -n "$PATH" ] && "#,
            r#"[ "$(env | grep -c '^HOME=')" = 1 ]"#
        );
        let args = ["-c".into(), script.into()];
        let p = Plan::new(OsStr::new("sh"), &args, &env, None, None, false).unwrap();
        let pid = spawn(&p, None).unwrap();
        assert_eq!(super::super::process::reap(pid, true).unwrap(), Some(super::super::WaitStatus::Exited(0)));
    }

    #[test]
    fn a_script_without_a_shebang_runs_with_sh_and_a_too_long_path_entry_is_skipped() {
        let dir = std::env::temp_dir().join(format!("sheepdog-exec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("noshebang");
        std::fs::write(&script, "exit $(($1 + 1))\n").unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let p = Plan::new(script.as_os_str(), &["4".into()], &[], None, None, false).unwrap();
        let status = super::super::process::reap(spawn(&p, None).unwrap(), true).unwrap();
        // A PATH element longer than PATH_MAX is passed over, as execvp does.
        let long = format!("{}:{}", "/x".repeat(2100), dir.display());
        let p = Plan::new(OsStr::new("noshebang"), &["1".into()], &[("PATH".into(), long.into())], None, None, false)
            .unwrap();
        let searched = spawn(&p, None).map(|pid| super::super::process::reap(pid, true).unwrap());
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(status, Some(super::super::WaitStatus::Exited(5)));
        assert!(matches!(searched, Ok(Some(super::super::WaitStatus::Exited(2)))), "{searched:?}");
    }

    #[test]
    fn a_working_directory_that_cannot_be_entered_is_told_apart() {
        let p = Plan::new(OsStr::new("true"), &[], &[], Some(std::path::Path::new("/nonexistent/dir")), None, false)
            .unwrap();
        let r = spawn(&p, None);
        assert!(matches!(r, Err(Failed::Cwd(ref e)) if e.raw_os_error() == Some(libc::ENOENT)), "{r:?}");
    }

    #[test]
    fn exec_errors_come_back_with_their_errno() {
        let missing = spawn(&plan("/nonexistent/sheepdog-test", &[]), None);
        assert!(matches!(missing, Err(Failed::Exec(ref e)) if e.raw_os_error() == Some(libc::ENOENT)), "{missing:?}");
        let not_found = spawn(&plan("sheepdog-no-such-command-anywhere", &[]), None);
        assert!(
            matches!(not_found, Err(Failed::Exec(ref e)) if e.raw_os_error() == Some(libc::ENOENT)),
            "{not_found:?}"
        );
        let denied = spawn(&plan("/etc/passwd", &[]), None);
        assert!(matches!(denied, Err(Failed::Exec(ref e)) if e.raw_os_error() == Some(libc::EACCES)), "{denied:?}");
    }
}
