//! Starting a command in its own process group, with the pre-exec steps, and telling apart the
//! reasons it could not start (status 127 not found, 126 not executable, as a shell reports).

use std::ffi::OsString;
use std::io;
use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};

#[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
use crate::sys::exec;
use crate::sys::process::{self, Isolation};
use crate::sys::{Pgid, Pid};

/// Why a command did not start.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// ENOENT: status 127.
    #[error("{program}: command not found: {source}")]
    NotFound {
        program: String,
        #[source]
        source: io::Error,
    },
    /// EACCES, ENOEXEC, EISDIR, ...: status 126.
    #[error("{program}: cannot execute: {source}")]
    NotExecutable {
        program: String,
        #[source]
        source: io::Error,
    },
    /// Anything else (fork failed, pre-exec failed): status 125.
    #[error("unable to start {program}: {source}")]
    Other {
        program: String,
        #[source]
        source: io::Error,
    },
    /// The child could not enter its working directory: status 125 (the command itself was
    /// not looked at).
    #[error("unable to start {program}: working directory {dir}: {source}")]
    Cwd {
        program: String,
        dir: String,
        #[source]
        source: io::Error,
    },
    /// The child could not join the tree's cgroup before `exec` (the cgroup tier was
    /// demanded, so there is no fallback): status 125.
    #[error("unable to move {program} into its cgroup: {source}")]
    Cgroup {
        program: String,
        #[source]
        source: io::Error,
    },
}

impl SpawnError {
    /// The shell's status for this failure: 127, 126 or 125.
    pub fn exit_code(&self) -> i32 {
        match self {
            SpawnError::NotFound { .. } => crate::exit::NOT_FOUND,
            SpawnError::NotExecutable { .. } => crate::exit::NOT_EXECUTABLE,
            SpawnError::Other { .. } | SpawnError::Cgroup { .. } | SpawnError::Cwd { .. } => crate::exit::USAGE,
        }
    }

    /// The errno the kernel gave (`ENOENT` is 2), if the failure was a system call's.
    pub fn os_error(&self) -> Option<i32> {
        match self {
            SpawnError::NotFound { source, .. }
            | SpawnError::NotExecutable { source, .. }
            | SpawnError::Other { source, .. }
            | SpawnError::Cwd { source, .. }
            | SpawnError::Cgroup { source, .. } => source.raw_os_error(),
        }
    }

    pub(crate) fn classify(program: &OsString, source: io::Error) -> SpawnError {
        let program = program.to_string_lossy().into_owned();
        match source.raw_os_error() {
            Some(crate::sys::errno::ENOENT) | Some(crate::sys::errno::ENOTDIR) => {
                SpawnError::NotFound { program, source }
            }
            // What a shell reports with 126 too (bash: "Argument list too long", "File name
            // too long", "Too many levels of symbolic links").
            Some(crate::sys::errno::EACCES)
            | Some(crate::sys::errno::ENOEXEC)
            | Some(crate::sys::errno::EISDIR)
            | Some(crate::sys::errno::EPERM)
            | Some(crate::sys::errno::ETXTBSY)
            | Some(crate::sys::errno::E2BIG)
            | Some(crate::sys::errno::ENAMETOOLONG)
            | Some(crate::sys::errno::ELOOP) => SpawnError::NotExecutable { program, source },
            _ => SpawnError::Other { program, source },
        }
    }
}

/// A started provider: the leader of its own process group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spawned {
    pub pid: Pid,
    pub pgid: Pgid,
}

/// What a provider gets besides its argv.
#[derive(Debug, Default)]
pub struct SpawnOptions {
    pub cwd: Option<std::path::PathBuf>,
    /// Added to (or replacing in) the inherited environment.
    pub env: Vec<(OsString, OsString)>,
    /// stdin, stdout and stderr; `None`: inherit the supervisor's stdio unchanged.
    pub stdio: Option<[OwnedFd; 3]>,
    /// With `stdio` `None`: stdin alone, stdout and stderr inherited (the read end of the stdin
    /// relay's pipe, `crate::relay`).
    pub stdin: Option<OwnedFd>,
    /// With `stdio` `None`: stdout alone (the output relay's pipe, `crate::relay::OutputRelay`).
    pub stdout: Option<OwnedFd>,
    /// With `stdio` `None`: stderr alone (the output relay's pipe).
    pub stderr: Option<OwnedFd>,
}

impl SpawnOptions {
    /// Every fd these options hold for the child: what the process that does not spawn must
    /// close (a copy of a pipe's end elsewhere keeps its reader from EOF).
    pub fn fds(&self) -> impl Iterator<Item = std::os::fd::RawFd> + '_ {
        use std::os::fd::AsRawFd;
        self.stdio
            .iter()
            .flatten()
            .chain(self.stdin.iter())
            .chain(self.stdout.iter())
            .chain(self.stderr.iter())
            .map(|fd| fd.as_raw_fd())
    }
}

/// Sets `cmd` apart as `isolation` says, in the forked child before `exec` (see
/// [`Isolation`]; fds above 2 close-on-exec, default signals). Every command sheepdog spawns
/// goes through here or [`spawn_joined`]: a detached supervisor (`Session`), a cleanup command
/// (`Group`), and the provider (`Group`, after joining its cgroup).
pub fn isolate(cmd: &mut Command, isolation: Isolation) {
    process::set_pre_exec(cmd, move || process::pre_exec(isolation));
}

/// [`isolate`], with the fds of `keep` (above 2; negative: none) left open across `exec` for a
/// child that is told their numbers.
pub fn isolate_keeping(cmd: &mut Command, isolation: Isolation, keep: [std::os::fd::RawFd; 2]) {
    process::set_pre_exec(cmd, move || process::pre_exec_keeping(isolation, keep));
}

/// Where a provider must run: the fds that let the forked child join the tree's cgroup before
/// `exec` (ARCHITECTURE.md: no member ever runs outside it), and whether a failed join may fall back
/// to running the command outside the cgroup (`--containment auto`).
#[derive(Clone, Copy, Debug)]
pub struct CgroupJoin {
    pub fds: crate::sys::cgroup::JoinFds,
    pub fallback: bool,
}

/// Spawns `argv` as the leader of a new process group with default signal dispositions and an
/// empty signal mask (with `take_terminal`, the new group takes the terminal's foreground: the
/// supervisor held it, `sys::process::owns_terminal_foreground`), the child joining `join`'s
/// cgroup first when given. Returns only after `exec` succeeded, so an error means the command
/// never ran. Returns the spawned provider and, when the join failed and `fallback` allowed
/// running it outside the cgroup, why the join failed. Errors: [`SpawnError`] (`Cgroup` when
/// the join failed without a fallback; `Cwd` only from the clone3 way: std's fork reports a
/// working directory it cannot enter as an exec error).
///
/// The fast way is `clone3(CLONE_VM | CLONE_VFORK)` with the child created inside the cgroup
/// (`sys::exec`, as `posix_spawn` does): no copy of the supervisor's memory. Where the kernel
/// refuses that clone (before Linux 5.7, a seccomp filter, a cgroup that cannot take
/// processes), or `SHEEPDOG_CGROUP_NO_CLONE3` is set, std forks and the child joins with a
/// write to `cgroup.procs` before `exec`.
pub fn spawn_joined(
    argv: &[OsString],
    opts: SpawnOptions,
    join: Option<CgroupJoin>,
    take_terminal: bool,
) -> Result<(Spawned, Option<io::Error>), SpawnError> {
    let (program, args) = argv.split_first().ok_or_else(|| SpawnError::Other {
        program: String::new(),
        source: io::Error::new(io::ErrorKind::InvalidInput, "empty command"),
    })?;
    #[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
    if std::env::var_os(crate::sys::cgroup::NO_CLONE3_ENV).is_none() {
        use std::os::fd::AsRawFd;
        // A negative source leaves that fd as the supervisor's (exec::Plan).
        let one = |fd: &Option<OwnedFd>| fd.as_ref().map_or(-1, AsRawFd::as_raw_fd);
        let stdio = match &opts.stdio {
            Some(fds) => Some(fds.each_ref().map(AsRawFd::as_raw_fd)),
            None if opts.stdin.is_some() || opts.stdout.is_some() || opts.stderr.is_some() => {
                Some([one(&opts.stdin), one(&opts.stdout), one(&opts.stderr)])
            }
            None => None,
        };
        let plan = exec::Plan::new(program, args, &opts.env, opts.cwd.as_deref(), stdio, take_terminal)
            .map_err(|e| SpawnError::classify(program, e))?;
        match exec::spawn(&plan, join.map(|j| j.fds.dir)) {
            Ok(pid) => return Ok((Spawned { pid, pgid: pid.as_group() }, None)),
            Err(exec::Failed::Exec(e)) => return Err(SpawnError::classify(program, e)),
            Err(exec::Failed::Cwd(source)) => {
                return Err(SpawnError::Cwd {
                    program: program.to_string_lossy().into_owned(),
                    dir: opts.cwd.as_deref().map(|d| d.display().to_string()).unwrap_or_default(),
                    source,
                });
            }
            Err(exec::Failed::Clone) => {}
        }
    }
    let mut cmd = Command::new(program);
    cmd.args(args);
    if let Some(cwd) = &opts.cwd {
        cmd.current_dir(cwd);
    }
    for (k, v) in &opts.env {
        cmd.env(k, v);
    }
    if let Some([i, o, e]) = opts.stdio {
        cmd.stdin(Stdio::from(i)).stdout(Stdio::from(o)).stderr(Stdio::from(e));
    } else {
        if let Some(i) = opts.stdin {
            cmd.stdin(Stdio::from(i));
        }
        if let Some(o) = opts.stdout {
            cmd.stdout(Stdio::from(o));
        }
        if let Some(e) = opts.stderr {
            cmd.stderr(Stdio::from(e));
        }
    }
    // Read in the forked child: set by the parent before a retry outside the cgroup.
    let skip_join = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let skip = skip_join.clone();
    process::set_pre_exec(&mut cmd, move || {
        if let Some(j) = join
            && !skip.load(std::sync::atomic::Ordering::Relaxed)
        {
            crate::sys::cgroup::join_in_child(j.fds)?;
        }
        process::pre_exec(Isolation::Group { take_terminal })
    });
    let mut refused = None;
    let child = match (cmd.spawn(), join) {
        (Ok(c), _) => c,
        (Err(e), Some(j)) => match crate::sys::cgroup::take_join_error(j.fds) {
            Some(why) if j.fallback => {
                skip_join.store(true, std::sync::atomic::Ordering::Relaxed);
                refused = Some(why);
                cmd.spawn().map_err(|e| SpawnError::classify(program, e))?
            }
            Some(why) => {
                return Err(SpawnError::Cgroup { program: program.to_string_lossy().into_owned(), source: why });
            }
            None => return Err(SpawnError::classify(program, e)),
        },
        (Err(e), None) => return Err(SpawnError::classify(program, e)),
    };
    // The supervisor reaps with waitpid itself; dropping Child neither waits nor kills.
    let pid = Pid::new(child.id() as i32).ok_or_else(|| SpawnError::Other {
        program: program.to_string_lossy().into_owned(),
        source: io::Error::other("kernel returned pid 0"),
    })?;
    Ok((Spawned { pid, pgid: pid.as_group() }, refused))
}
