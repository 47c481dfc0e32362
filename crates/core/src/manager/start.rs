//! `start`: a detached supervisor for one command, and its handshake; readiness (`start_ready`),
//! `start --replace` and `restart`.

use crate::identity::Probe;
use std::cell::OnceCell;
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::cgroup;
use crate::entry::{self, Cleanup, Entry, OutsideResult, ReadySpec};
use crate::exit;
use crate::files;
use crate::inspect::{live_status, live_tree};
use crate::ready::ReadyOutcome;
use crate::registry::{self, Registry, RegistryError};
use crate::status::Status;
use crate::stop::StopPolicy;
use crate::sys::process;
use crate::sys::{Pid, procfs};

use super::stop::StopOutcome;
use super::supervise::{Handshake, SuperviseArgs};
use super::{ManagerError, io_err, stop};

/// What `sheepdog start` was asked for.
#[derive(Debug, Default)]
pub struct StartRequest {
    pub name: Option<String>,
    pub session_id: Option<String>,
    pub owner: Option<Pid>,
    pub cwd: Option<PathBuf>,
    pub env: Vec<(OsString, OsString)>,
    pub timeout: Option<Duration>,
    pub policy: StopPolicy,
    pub cleanup: Option<Cleanup>,
    /// Per-file log cap in bytes.
    pub log_max: Option<u64>,
    /// The containment tier asked for (`--containment`, `$SHEEPDOG_CONTAINMENT`) and limits;
    /// the detached supervisor probes, and a refusal fails the start with status 125.
    pub containment: cgroup::Mode,
    pub limits: cgroup::Limits,
    /// Readiness options, recorded for `restart` (the wait itself is [`crate::ready::wait_ready`]).
    pub ready: Option<ReadySpec>,
    /// The entry this start replaces (`restart`, `start --replace`).
    pub restart_of: Option<String>,
    /// Shown when `name` is `None` (see [`entry::derived_name`]); not unique.
    pub auto_name: Option<String>,
    /// `--stdin pipe`: the command's stdin is a FIFO its supervisor holds (see [`send`]);
    /// false: `/dev/null`.
    pub stdin_pipe: bool,
    pub argv: Vec<OsString>,
}

/// The command as one short line: argv joined, shell-quoted where needed, cut at 120 chars.
pub fn preview(argv: &[String]) -> String {
    let mut s = argv
        .iter()
        .map(|a| {
            if !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c)) {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ");
    if s.chars().count() > 120 {
        s = s.chars().take(119).collect::<String>() + "…";
    }
    s
}

pub(super) static SUPERVISOR_EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Sets the `sheepdog` executable that [`start`] runs as each entry's detached supervisor
/// (`sheepdog supervise-entry`). Front ends built as their own binary (`sheepdog-mcp`) call it
/// once at startup, so every supervisor stays the small `sheepdog` binary. The first call wins.
pub fn set_supervisor_exe(path: PathBuf) {
    let _ = SUPERVISOR_EXE.set(path);
}

/// The executable [`start`] runs as a supervisor: the one set with [`set_supervisor_exe`], else
/// this process's own executable. Errors: `current_exe`'s.
pub fn supervisor_exe() -> io::Result<PathBuf> {
    match SUPERVISOR_EXE.get() {
        Some(p) => Ok(p.clone()),
        None => std::env::current_exe(),
    }
}

/// Starts a managed process and returns its entry once the command has really been spawned
/// and registered. A command that cannot start fails here (126/127 with the OS reason) and
/// leaves no entry behind.
pub fn start(reg: &Registry, req: StartRequest) -> Result<Entry, ManagerError> {
    if req.argv.is_empty() {
        return Err(ManagerError::Start { code: exit::USAGE, message: "start: missing command".into() });
    }
    let cwd = match req.cwd {
        Some(c) => c,
        None => std::env::current_dir().map_err(io_err("read the current directory"))?,
    };
    if !cwd.is_dir() {
        return Err(ManagerError::Start {
            code: exit::USAGE,
            message: format!("the working directory {} is not a directory", cwd.display()),
        });
    }
    let cwd = std::fs::canonicalize(&cwd).unwrap_or(cwd);
    let argv: Vec<entry::OsText> = req.argv.iter().map(|a| a.as_os_str().into()).collect();
    let me = process::getpid();
    let entry = Entry {
        name: req.name.clone(),
        session_id: req.session_id.clone(),
        started_at: files::now_ms(),
        command_preview: preview(&argv.iter().map(|a| a.escaped()).collect::<Vec<_>>()),
        argv,
        cwd: cwd.as_os_str().into(),
        owner: req.owner.map(crate::identity::proc_ref),
        // Until the supervisor records itself, the entry is `starting` and this process is its
        // starter: checked for life (reap and ps leave the entry alone), never signalled.
        starter: Some(crate::identity::proc_ref(me)),
        boot_id: procfs::boot_id(),
        uid: process::getuid(),
        tag: registry::new_tag().map_err(io_err("read random bytes for the entry's tag"))?,
        cleanup: req.cleanup.clone(),
        stop: req.policy.timings(),
        timeout_ms: req.timeout.map(|d| d.as_millis() as u64),
        status: Status::Starting,
        log_max_bytes: req.log_max,
        containment_asked: req.containment.tier(),
        memory_max: req.limits.memory_max,
        pids_max: req.limits.pids_max,
        ready: req.ready.clone(),
        restart_of: req.restart_of.clone(),
        auto_name: req.auto_name.clone().filter(|_| req.name.is_none()),
        stdin_pipe: req.stdin_pipe,
        env: req
            .env
            .iter()
            .map(|(k, v)| {
                let mut kv = k.clone();
                kv.push("=");
                kv.push(v);
                kv.into()
            })
            .collect(),
        ..Entry::default()
    };
    let entry = reg.create(entry)?;
    let id = entry.id.clone();

    let args = SuperviseArgs {
        id: id.clone(),
        containment: req.containment,
        limits: req.limits,
        cwd: cwd.clone(),
        command: req.argv.clone(),
    }
    .to_args();
    match launch_supervisor(reg, &id, &args, [-1, -1])? {
        Some(Handshake::Spawned) => return Ok(reg.read(&id)?),
        Some(Handshake::Failed { code, message }) => {
            // The supervisor removed the entry: give its id back.
            reg.release_id(&id);
            return Err(ManagerError::Start { code, message });
        }
        // Nothing (or nothing readable): the supervisor died before it could say, or its keeper
        // was killed after the spawn and the supervisor that adopted the tree recorded it.
        None => {}
    }
    if let Ok(e) = reg.read(&id)
        && e.provider.is_some()
    {
        return Ok(e);
    }
    let lost = OutsideResult::Lost("lost (the supervisor exited before the command started)".into());
    let _ = reg.update(&id, |e| {
        e.finish_from_outside(lost, true);
    });
    Err(ManagerError::Start {
        code: exit::USAGE,
        message: format!(
            "the supervisor of {id} exited before the command started; see {}",
            reg.file(&id, "supervisor.log").display()
        ),
    })
}

/// Starts `sheepdog --state-dir ROOT ARGS` as the detached supervisor of entry `id` (in `/`, a
/// session of its own, stderr appended to the entry's `supervisor.log`, stdout a pipe) and reads
/// its one [`Handshake`] line; `None` when it wrote none (it died first). A supervisor that
/// already exited is reaped here; a running one is left to whoever inherits it. Errors: the log
/// cannot be opened; the spawn failed (then the entry is removed and its id given back).
pub(super) fn launch_supervisor(
    reg: &Registry,
    id: &str,
    args: &[OsString],
    keep: [std::os::fd::RawFd; 2],
) -> Result<Option<Handshake>, ManagerError> {
    let sup_log = File::options()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(reg.file(id, "supervisor.log"))
        .map_err(io_err("open the supervisor log"))?;
    let exe = supervisor_exe().map_err(io_err("find the sheepdog executable"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("--state-dir")
        .arg(reg.root())
        .args(args)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(sup_log));
    crate::spawn::isolate_keeping(&mut cmd, process::Isolation::Session, keep);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let _ = reg.remove(id);
            reg.release_id(id);
            return Err(io_err("start the supervisor")(e));
        }
    };
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = BufReader::new(out).read_line(&mut line);
    }
    if let Some(pid) = Pid::new(child.id() as i32) {
        let _ = process::reap(pid, false);
    }
    Ok(serde_json::from_str::<Handshake>(line.trim_end()).ok())
}

/// How often, and for how long at most, `stop` and `wait` re-read an entry whose `start` is
/// still in progress: 5 ms, 10 s. The detached supervisor records itself within milliseconds;
/// only then is there a process to signal or wait on (the `start` command is never signalled).
pub(super) const START_SETTLE_TICK: Duration = Duration::from_millis(5);

pub(super) const START_SETTLE_MAX: Duration = Duration::from_secs(10);

/// Waits until an entry is past `starting` (its supervisor has spawned the command, failed, or
/// its starter died), and returns the entry as it is then.
pub(super) fn settle_start(reg: &Registry, entry: &Entry) -> Result<Entry, ManagerError> {
    let end = Instant::now() + START_SETTLE_MAX;
    let mut e = entry.clone();
    while e.status == Status::Starting && (e.starter_alive() || e.supervisor_alive()) && Instant::now() < end {
        std::thread::sleep(START_SETTLE_TICK);
        e = match reg.read(&e.id) {
            Ok(x) => x,
            // The start failed and removed its entry: nothing to stop or wait for.
            Err(RegistryError::NotFound(_)) => return Err(RegistryError::NotFound(entry.id.clone()).into()),
            Err(err) => return Err(err.into()),
        };
    }
    Ok(e)
}

/// How long `restart` waits for the ports the old tree listened on to be free before it starts
/// the new command anyway: 5 s (a tree that is gone has closed its sockets; this covers a
/// listening socket still held by a process that is exiting).
pub const PORT_FREE_MAX: Duration = Duration::from_secs(5);

/// What a start did: the entry, its readiness (when asked for) and the nudges the command
/// earned (`nudge::check`: advice only, the start went ahead).
#[derive(Debug)]
pub struct Started {
    pub entry: Entry,
    pub ready: Option<ReadyOutcome>,
    pub nudges: Vec<crate::nudge::Warning>,
}

impl Started {
    /// The start's verdict, the one every front end reads: the command runs, and was ready
    /// when readiness was asked for (nudges are advice, never a failure).
    pub fn ok(&self) -> bool {
        self.exit_status() == exit::OK
    }

    /// The exit status this start gives `sheepdog start` ([`crate::exit`]): 0; with a readiness
    /// wait, 1 when the command exited before it was ready, 124 when it was not ready in time
    /// ([`ReadyOutcome::exit_status`]).
    pub fn exit_status(&self) -> i32 {
        self.ready.as_ref().map_or(exit::OK, ReadyOutcome::exit_status)
    }
}

/// Starts a managed process and, if `req.ready` is set, waits until it is ready
/// ([`crate::ready::wait_ready`]); the nudge check runs here, so every front end gets the same
/// advice. Errors: those of [`start`]; the entry vanishing meanwhile.
pub fn start_ready(reg: &Registry, req: StartRequest) -> Result<Started, ManagerError> {
    let nudges = crate::nudge::check(&req.argv, req.cleanup.is_some());
    let spec = req.ready.clone().filter(|s| s.is_set());
    // A port that already accepts before the start is someone else's: only the tree's own
    // listening socket will count.
    let port_was_open = spec.as_ref().and_then(|s| s.port).is_some_and(crate::ready::port_accepts);
    let entry = start(reg, req)?;
    let ready = match spec {
        Some(s) => Some(crate::ready::wait_ready(reg, &entry, &s, port_was_open)?),
        None => None,
    };
    if let Some(ReadyOutcome::Ready { after_ms, matched, port }) = &ready {
        let kind = crate::journal::Kind::Ready { after_ms: *after_ms, matched: matched.clone(), port: *port };
        let _ = crate::journal::append(reg.root(), &entry, kind);
    }
    Ok(Started { entry, ready, nudges })
}

/// `start --name N --replace`: under N's lock ([`Registry::name_lock`]), so that concurrent
/// replaces serialize and each replaces the one before it, stops the running entry named N (if
/// any: [`replace`]) and starts `req` in its place, else just starts it ([`start_ready`]).
/// Errors: those of `replace` and `start_ready`; the lock's.
pub fn start_replacing(reg: &Registry, req: StartRequest) -> Result<Started, ManagerError> {
    let Some(name) = req.name.clone() else { return start_ready(reg, req) };
    let _serial = reg.name_lock(&name)?;
    let running = reg.find(&name).ok().filter(|e| live_status(e, &OnceCell::new()).is_live());
    match running {
        Some(old) => {
            let r = replace(reg, &old, req, None)?;
            Ok(Started { entry: r.entry, ready: r.ready, nudges: r.nudges })
        }
        None => start_ready(reg, req),
    }
}

/// The start request that repeats `e`: same argv, cwd, env, name, session, owner, timeout,
/// stop timings, cleanup, log cap and readiness options.
pub fn request_of(e: &Entry) -> StartRequest {
    StartRequest {
        name: e.name.clone(),
        session_id: e.session_id.clone(),
        owner: e.owner.and_then(|o| Pid::new(o.pid)),
        cwd: Some(PathBuf::from(e.cwd.as_os_str())),
        env: e.env.iter().map(|kv| kv.split_env()).collect(),
        timeout: e.timeout_ms.map(Duration::from_millis),
        policy: StopPolicy { stdin_grace: Duration::ZERO, ..StopPolicy::from_timings(&e.stop) },
        cleanup: e.cleanup.clone(),
        log_max: e.log_max_bytes,
        ready: e.ready.clone(),
        restart_of: None,
        containment: e.containment_asked.map(cgroup::Mode::of_tier).unwrap_or_default(),
        limits: cgroup::Limits { memory_max: e.memory_max, pids_max: e.pids_max },
        auto_name: e.auto_name.clone(),
        stdin_pipe: e.stdin_pipe,
        argv: e.argv.iter().map(|a| a.as_os_str().to_os_string()).collect(),
    }
}

/// What `restart` (and `start --replace`) did.
#[derive(Debug)]
pub struct Restarted {
    /// The stop of the old entry.
    pub stopped: StopOutcome,
    /// The new entry (`restartOf` = the old id).
    pub entry: Entry,
    /// Readiness, when the options asked for it.
    pub ready: Option<ReadyOutcome>,
    /// The nudges the new command earned (see [`Started`]).
    pub nudges: Vec<crate::nudge::Warning>,
}

impl Restarted {
    /// The restart's verdict, the one every front end reads: the old tree is gone and its
    /// cleanup, if any, did not fail, and the new command runs (and was ready, when asked).
    pub fn ok(&self) -> bool {
        self.exit_status() == exit::OK
    }

    /// The exit status this restart gives `sheepdog restart` ([`crate::exit`]): the larger of
    /// the stop's (1 when the old entry's cleanup failed; a tree not confirmed gone is an
    /// error before anything new starts) and the new start's readiness (1 exited first, 124
    /// not ready in time).
    pub fn exit_status(&self) -> i32 {
        let ready = self.ready.as_ref().map_or(exit::OK, ReadyOutcome::exit_status);
        ready.max(self.stopped.exit_status())
    }
}

/// `restart`: the one stop of `old` (cleanup included), then a new start with the same options
/// ([`request_of`]), recorded as `restartOf` the old id.
pub fn restart(reg: &Registry, old: &Entry, term_grace: Option<Duration>) -> Result<Restarted, ManagerError> {
    replace(reg, old, request_of(old), term_grace)
}

/// Stops `old` (cleanup included), waits until the TCP ports its tree listened on (and the
/// `--ready-port` of `req`) are free, at most [`PORT_FREE_MAX`], then starts `req` as
/// `restartOf` the old id, waiting for readiness if asked. Errors: the old tree was not confirmed
/// gone (124; nothing new is started), and those of [`start_ready`].
pub fn replace(
    reg: &Registry,
    old: &Entry,
    mut req: StartRequest,
    term_grace: Option<Duration>,
) -> Result<Restarted, ManagerError> {
    let pids: Vec<Pid> = live_tree(old).iter().filter_map(|p| Pid::new(p.pid)).collect();
    let mut ports = crate::ports::listening_now(&pids);
    ports.extend(req.ready.as_ref().and_then(|r| r.port));
    let stopped = stop(reg, old, term_grace)?;
    if !stopped.tree_gone {
        return Err(ManagerError::Start {
            code: exit::TIMED_OUT,
            message: format!("the tree of {} was not confirmed gone; nothing new was started", old.label()),
        });
    }
    let end = Instant::now() + PORT_FREE_MAX;
    while ports.iter().any(|p| crate::ports::port_in_listen(*p)) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    req.restart_of = Some(old.id.clone());
    let Started { entry, ready, nudges } = start_ready(reg, req)?;
    Ok(Restarted { stopped, entry, ready, nudges })
}
