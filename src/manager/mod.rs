//! Managed background processes: the operations every front end calls (start, stop, restart,
//! update, wait, reap, clear), returning data for the CLI, the MCP server and `top` to render.
//!
//! Split by which process runs the code: this module is what a user's command runs;
//! `supervise` is the detached supervisor's side (its own process, one per entry); `inspect`
//! looks at live trees without acting.
//!
//! Each managed command gets its own detached `sheepdog` supervisor (a new session, like Podman's
//! conmon; no central daemon): the same event loop and one stop as `sheepdog run`, with stdout and
//! stderr captured to the entry's logs and every transition written to the registry. After any
//! crash, [`reap`] finds entries whose supervisor is gone and stops what is left of their tree,
//! touching only processes that are provably the entry's (see `tree::Tree::recorded`).

use std::cell::OnceCell;
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::cgroup;
use crate::duration;
use crate::entry;
use crate::entry::ReadySpec;
use crate::entry::{Cleanup, Entry, OutsideResult};
use crate::exit;
use crate::files;
use crate::logs::{self, LogSet, Stream};
use crate::ready::ReadyOutcome;
use crate::registry::{self, Registry, RegistryError};
use crate::spawn::{SpawnOptions, Spawned};
use crate::status::Status;
use crate::status::{CleanupRunner, ReapKind, StopReason};
use crate::stop::{self, StopPolicy, Trigger};
use crate::supervisor::{self, Observer, OnStdinEof, Options, Outcome, Owner};
use crate::sys::process::{self, POLL_IN, PidFd, PollFd};
use crate::sys::signal::{SignalPipe, pipe_cloexec, set_nonblocking};
use crate::sys::{Pid, Signal, WaitStatus, procfs};
use crate::tree::denied_line;
use crate::tree::{ID_ENV, Member, TAG_ENV};
use crate::view::ReapAction;

mod stdin;
mod supervise;

pub use stdin::{SEND_MAX, SEND_TIMEOUT, SendError, send};

use crate::inspect::{live_status, live_tree, recorded_alive, recorded_tree};
use supervise::Handshake;
pub use supervise::{MAX_RECORDED_MEMBERS, run_supervisor};

/// How long `stop` waits past an entry's recorded `maxStopMs` before it acts past the
/// supervisor: 1000 ms, for the supervisor's own registry write and exit.
pub const STOP_MARGIN: Duration = Duration::from_millis(1000);
/// After the tree is gone, how long the supervisor keeps draining the log pipes: 250 ms. A
/// process outside the tree that holds a pipe open (a daemon the command started) must never
/// hang a stop.
pub const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(250);
/// A `starting` entry whose supervisor has not yet recorded itself is left alone by `reap` for
/// this long: 30 s (a `start` in progress).
pub const STARTING_LEEWAY_MS: u64 = 30_000;

/// Errors of the manager; the CLI maps each to one line and a status.
#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The command could not start (126/127), or the supervisor refused (125).
    #[error("{message}")]
    Start { code: i32, message: String },
    #[error("unable to {op}: {source}")]
    Io {
        op: String,
        #[source]
        source: io::Error,
    },
    #[error("{0}")]
    Refused(String),
    /// The stop itself worked (nothing of the tree is alive) but the registry could not record
    /// it (a full disk): status [`EXIT_NOT_RECORDED`].
    #[error("the tree of {label} is gone, but its result could not be recorded: {source}")]
    NotRecorded {
        label: String,
        /// The entry as this stop knows it: its result applied in memory only.
        entry: Box<Entry>,
        #[source]
        source: RegistryError,
    },
}

/// Status of a stop that stopped the tree but could not record the result or run the cleanup
/// (the state dir's disk is full): [`crate::exit::NOT_RECORDED`] (74).
pub const EXIT_NOT_RECORDED: i32 = crate::exit::NOT_RECORDED;

impl ManagerError {
    /// 126/127 for a command that could not start, 125 for bad input and sheepdog's own
    /// failures, 1 for a refusal (clearing a running entry).
    pub fn exit_code(&self) -> i32 {
        match self {
            ManagerError::Start { code, .. } => *code,
            ManagerError::Refused(_) => exit::REFUSED,
            ManagerError::NotRecorded { .. } => exit::NOT_RECORDED,
            ManagerError::Registry(e) if e.is_not_written() => exit::NOT_RECORDED,
            _ => exit::USAGE,
        }
    }
}

fn io_err(op: impl Into<String>) -> impl FnOnce(io::Error) -> ManagerError {
    let op = op.into();
    move |source| ManagerError::Io { op, source }
}

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

static SUPERVISOR_EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

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
        owner_pid: req.owner.map(|p| p.as_raw()),
        owner_start_time: req.owner.and_then(procfs::start_time),
        // Until the supervisor records itself, the entry is `starting` and this process is its
        // starter: checked for life (reap and ps leave the entry alone), never signalled.
        starter_pid: Some(me.as_raw()),
        starter_start_time: procfs::start_time(me),
        boot_id: procfs::boot_id(),
        uid: process::getuid(),
        tag: registry::new_tag(),
        cleanup: req.cleanup.clone(),
        stop: req.policy.timings(),
        timeout_ms: req.timeout.map(|d| d.as_millis() as u64),
        status: Status::Starting,
        log_max_bytes: req.log_max,
        containment_asked: (req.containment != cgroup::Mode::Auto).then(|| req.containment.name().to_string()),
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

    let sup_log = File::options()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(reg.file(&id, "supervisor.log"))
        .map_err(io_err("open the supervisor log"))?;
    let exe = supervisor_exe().map_err(io_err("find the sheepdog executable"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("--state-dir")
        .arg(reg.root())
        .args(["supervise-entry", "--id", &id, "--containment", req.containment.name()])
        .args(req.limits.memory_max.map(|m| format!("--memory-max={m}")))
        .args(req.limits.pids_max.map(|p| format!("--pids-max={p}")))
        .arg("--cwd")
        .arg(&cwd)
        .arg("--")
        .args(&req.argv)
        .envs(req.env.iter().map(|(k, v)| (k, v)))
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(sup_log));
    crate::spawn::isolate(&mut cmd, process::Isolation::Session);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let _ = reg.remove(&id);
            reg.release_id(&id);
            return Err(io_err("start the supervisor")(e));
        }
    };
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = BufReader::new(out).read_line(&mut line);
    }
    // A supervisor that already finished (a command like `true`) is reaped here; a running one
    // is left to whoever inherits it.
    if let Some(pid) = Pid::new(child.id() as i32) {
        let _ = process::reap(pid, false);
    }
    match serde_json::from_str::<Handshake>(line.trim_end()) {
        Ok(Handshake::Spawned) => return Ok(reg.read(&id)?),
        Ok(Handshake::Failed { code, message }) => {
            // The supervisor removed the entry: give its id back.
            reg.release_id(&id);
            return Err(ManagerError::Start { code, message });
        }
        // Nothing (or nothing readable): the supervisor died before it could say.
        Err(_) => {}
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

/// True if a stop of a selection (`--session`, `--all`) takes this entry: it still runs, or its
/// cleanup is pending or running (a cleanup belongs to its entry, and every stop runs it).
pub fn stoppable(e: &Entry) -> bool {
    !e.is_finished() || e.cleanup_pending() || e.cleanup_running() || left_running(e)
}

/// True for a finished entry whose stop did not end its tree (`treeGone: false`, this boot):
/// the next `stop` tries again.
fn left_running(e: &Entry) -> bool {
    e.is_finished() && e.tree_gone == Some(false) && e.this_boot()
}

/// The entries a stop of a selection takes ([`stoppable`]): those of `session`, or every entry
/// with `None`, oldest first; and the entries the listing set aside as unreadable (for the
/// caller to report). The CLI's `stop --session`/`--all` and the MCP `stop` tool select here.
///
/// An unreadable entry whose supervisor lives is taken too with `None` (every entry), as a
/// stand-in ([`Registry::stand_in`]): its supervisor still holds a tree.
pub fn stop_selection(reg: &Registry, session: Option<&str>) -> (Vec<Entry>, Vec<registry::SetAside>) {
    let (entries, aside) = reg.list_sweeping();
    let mut targets: Vec<Entry> = entries
        .into_iter()
        .filter(|e| session.is_none_or(|s| e.session_id.as_deref() == Some(s)) && stoppable(e))
        .collect();
    if session.is_none() {
        let ids = aside
            .iter()
            .filter(|a| a.supervisor_alive && a.moved_to.is_none())
            .filter_map(|a| a.path.parent().and_then(|d| d.file_name()).map(|n| n.to_string_lossy().into_owned()));
        targets.extend(ids.filter_map(|id| reg.stand_in(&id)));
    }
    (targets, aside)
}

/// The entry `key` (an id or a name) names, for a stop: [`Registry::find`], except that an
/// entry that cannot be read but whose supervisor lives gives its stand-in
/// ([`Registry::stand_in`]), so its tree can still be stopped. Errors: `find`'s.
pub fn find_for_stop(reg: &Registry, key: &str) -> Result<Entry, RegistryError> {
    match reg.find(key) {
        Err(err @ RegistryError::Corrupt { .. }) => reg.stand_in(key).ok_or(err),
        other => other,
    }
}

/// Stops each of `targets` with [`stop()`], each on its own thread, so a whole turn stops within
/// one grace instead of one per entry. Results come in the order of `targets`.
pub fn stop_many(
    reg: &Registry,
    targets: &[Entry],
    term_grace: Option<Duration>,
) -> Vec<Result<StopOutcome, ManagerError>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = targets.iter().map(|e| s.spawn(|| stop(reg, e, term_grace))).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(ManagerError::Refused("stop panicked".into()))))
            .collect()
    })
}

/// How one `stop` ended.
#[derive(Debug)]
pub struct StopOutcome {
    pub entry: Entry,
    /// The entry had already finished before this stop.
    pub already_finished: bool,
    /// Nothing of the tree is alive.
    pub tree_gone: bool,
    /// Why the tree is not gone, when processes of it could not be signalled: `1 process of
    /// uid 0 could not be signalled: permission denied` ([`crate::tree::denied_line`]).
    pub not_signalled: Option<String>,
}

impl StopOutcome {
    /// The first line every front end shows for this stop: `Stopped NAME (ID).` for a real
    /// stop; for an entry that had already ended, what happened instead (`web (proc_5) had
    /// already exited (3).`), never `Stopped`.
    pub fn headline(&self) -> String {
        let e = &self.entry;
        if self.not_signalled.is_some() {
            return format!("Could not stop {}.", e.label());
        }
        if !self.already_finished {
            return format!("Stopped {}.", e.label());
        }
        let text = crate::view::status_text(e, e.status);
        let what = match e.status {
            Status::Exited | Status::TimedOut => text,
            Status::Killed | Status::Stopped | Status::Reaped => format!("been {text}"),
            _ => format!("ended: {text}"),
        };
        format!("{} had already {what}.", e.label())
    }
}

/// Stops one entry: asks its supervisor (SIGTERM through a pidfd, after its identity is
/// verified), waits up to the entry's `maxStopMs` plus [`STOP_MARGIN`], and if the supervisor is
/// gone or does not finish, stops the recorded tree itself with the same sequence.
///
/// Every stop that ends records a `stopped` event in the journal ([`crate::journal`]).
pub fn stop(reg: &Registry, entry: &Entry, term_grace: Option<Duration>) -> Result<StopOutcome, ManagerError> {
    let o = stop_entry(reg, entry, term_grace)?;
    let cleanup_error = crate::cleanup::failure_line(&o.entry);
    let kind = crate::journal::Kind::Stopped {
        already_finished: o.already_finished,
        tree_gone: o.tree_gone,
        ok: o.tree_gone && cleanup_error.is_none(),
        cleanup_error,
    };
    let _ = crate::journal::append(reg.root(), &o.entry, kind);
    Ok(o)
}

fn stop_entry(reg: &Registry, entry: &Entry, term_grace: Option<Duration>) -> Result<StopOutcome, ManagerError> {
    let settled = settle_start(reg, entry)?;
    match stop_settled(reg, &settled, term_grace) {
        // Cleared meanwhile (`clear --finished` in another caller): `clear` removes only entries
        // that nothing of runs any more, so the entry is finished, and this stop is not an error.
        Err(ManagerError::Registry(RegistryError::NotFound(_))) => Ok(cleared_meanwhile(settled)),
        other => other,
    }
}

/// The outcome of a stop whose entry was cleared while the stop ran: finished, the tree gone.
fn cleared_meanwhile(mut e: Entry) -> StopOutcome {
    let already_finished = e.is_finished();
    if !already_finished {
        e.status = Status::Stopped;
        e.status_text = Some("stopped (its entry was cleared meanwhile)".into());
        e.tree_gone = Some(true);
    }
    StopOutcome { entry: e, already_finished, tree_gone: true, not_signalled: None }
}

/// [`stop`] of an entry past `starting`.
fn stop_settled(reg: &Registry, entry: &Entry, term_grace: Option<Duration>) -> Result<StopOutcome, ManagerError> {
    let id = entry.id.clone();
    if left_running(entry) && !entry.supervisor_alive() {
        return stop_again(reg, entry);
    }
    if entry.is_finished() {
        // The wrapper may have exited while its work goes on: the cleanup is still due. A
        // supervisor that stayed to watch for it is told to re-read its entry and leave.
        if entry.this_boot() {
            crate::cleanup::run_once(reg, &id, CleanupRunner::Stop);
            notify_supervisor(entry);
        }
        let e = reg.read(&id)?;
        return Ok(StopOutcome { entry: e, already_finished: true, tree_gone: true, not_signalled: None });
    }
    if !entry.this_boot() {
        let e = record_lost(reg, &id, "lost (recorded during a previous boot; nothing was signalled)")?;
        return Ok(StopOutcome { entry: e, already_finished: true, tree_gone: true, not_signalled: None });
    }
    let mut entry = entry.clone();
    // A supervisor already stopping keeps the grace it started with: wait for the longer.
    let before = Duration::from_millis(entry.stop.max_stop_ms);
    if let Some(g) = term_grace {
        let set = |e: &mut Entry| {
            e.stop = StopPolicy { term_grace: g, ..StopPolicy::from_timings(&e.stop) }.timings();
        };
        // A registry that cannot be written (a full disk) must not keep the tree from stopping.
        match reg.update(&id, set) {
            Ok(e) => entry = e,
            Err(_) => set(&mut entry),
        }
    }
    let mut past_a_stuck_supervisor = false;
    if let Some(sup) = verified_supervisor(&entry) {
        let _ = sup.send(Signal::TERM);
        let bound = before.max(Duration::from_millis(entry.stop.max_stop_ms)) + cleanup_bound(&entry) + STOP_MARGIN;
        wait_pidfd(&sup, Some(bound));
        let now = reg.read(&id)?;
        if now.is_finished() {
            // The supervisor ran the cleanup; if it died before doing so, run it here.
            crate::cleanup::run_once(reg, &id, CleanupRunner::Stop);
            let now = reg.read(&id)?;
            let tree_gone = now.tree_gone.unwrap_or(true);
            let not_signalled = if tree_gone { None } else { recorded_tree(&now).and_then(|t| denied_line(&t.live())) };
            return Ok(StopOutcome { tree_gone, entry: now, already_finished: false, not_signalled });
        }
        // The tree is gone but nothing says so: the supervisor could not record its result (a
        // full disk) and waits to retry, holding the real outcome. Record ours first; if that
        // cannot be written either, leave the supervisor alive: its next write tells the truth.
        if recorded_tree(&now).is_none_or(|t| t.is_gone()) {
            let why = "the supervisor did not finish in time and was killed";
            let mut known = now.clone();
            known.finish_from_outside(OutsideResult::StoppedPast(why), true);
            if let Err(source) = reg.update(&id, |e| {
                e.finish_from_outside(OutsideResult::StoppedPast(why), true);
            }) && source.is_not_written()
            {
                return Err(ManagerError::NotRecorded { label: now.label(), entry: Box::new(known), source });
            }
        }
        // The supervisor did not finish: it is stuck or died mid-stop. Act past it. Orphans were
        // re-parented to it (it is their subreaper) and it may not have recorded them yet: take
        // its descendants as members while they are still its own, before it is killed.
        let adopted: Vec<entry::RecordedMember> = Pid::new(now.supervisor_pid.unwrap_or(0))
            .map(procfs::descendants)
            .unwrap_or_default()
            .iter()
            .filter(|s| !s.is_zombie() && Some(s.pid.as_raw()) != now.keeper_pid)
            .map(|s| entry::RecordedMember { pid: s.pid.as_raw(), start_time: s.start_time })
            .collect();
        past_a_stuck_supervisor = sup.send(Signal::KILL).is_ok_and(|s| s == process::Sent::Delivered);
        // A stuck chain may be stuck in either process: the keeper goes too, or it would stay
        // stopped forever (a SIGSTOPped keeper cannot take over).
        if let Some(keeper) = verified_keeper(&now) {
            let _ = keeper.send(Signal::KILL);
        }
        entry = now;
        entry.members.extend(adopted);
    }
    let report = match recorded_tree(&entry) {
        Some(tree) => stop::stop_blocking(&tree, StopPolicy::from_timings(&entry.stop)),
        None => stop::StopReport { gone: true, escalated: false, signalled: 0 },
    };
    let why = if past_a_stuck_supervisor {
        "the supervisor did not finish in time and was killed"
    } else {
        "the supervisor was gone"
    };
    logs::append_marker(
        &reg.dir(&id),
        &format!(
            "stopped by sheepdog stop ({why}): {} signalled, tree {}",
            report.signalled,
            if report.gone { "gone" } else { "NOT confirmed gone" }
        ),
    );
    let recorded = reg.update(&id, |e| {
        e.finish_from_outside(OutsideResult::StoppedPast(why), report.gone);
    });
    let e = match recorded {
        Ok(e) => e,
        Err(source) if report.gone && source.is_not_written() => {
            let mut known = entry.clone();
            known.finish_from_outside(OutsideResult::StoppedPast(why), true);
            return Err(ManagerError::NotRecorded { label: entry.label(), entry: Box::new(known), source });
        }
        Err(source) => return Err(source.into()),
    };
    let e = settle_cgroup(reg, e);
    let e = match crate::cleanup::run_once(reg, &id, CleanupRunner::Stop) {
        Some(_) => reg.read(&id)?,
        None => e,
    };
    let not_signalled = if report.gone { None } else { recorded_tree(&e).and_then(|t| denied_line(&t.live())) };
    Ok(StopOutcome { entry: e, already_finished: false, tree_gone: report.gone, not_signalled })
}

/// The stop of a finished entry whose tree was not gone when it was stopped (a member could not
/// be signalled): the one stop once more over what is recorded of it, and the result written
/// back (`treeGone`, and a status text that says what is still left).
fn stop_again(reg: &Registry, entry: &Entry) -> Result<StopOutcome, ManagerError> {
    let id = &entry.id;
    let report = match recorded_tree(entry) {
        Some(tree) => stop::stop_blocking(&tree, StopPolicy::from_timings(&entry.stop)),
        None => stop::StopReport { gone: true, escalated: false, signalled: 0 },
    };
    let not_signalled = if report.gone { None } else { recorded_tree(entry).and_then(|t| denied_line(&t.live())) };
    logs::append_marker(
        &reg.dir(id),
        &format!(
            "stopped again by sheepdog stop: {} signalled, tree {}",
            report.signalled,
            if report.gone { "gone" } else { "NOT confirmed gone" }
        ),
    );
    let e = reg.update(id, |e| {
        e.tree_gone = Some(report.gone);
        e.status_text = Some(match &not_signalled {
            Some(line) => format!("not stopped: {line}"),
            None if report.gone => "stopped (by sheepdog stop, again)".into(),
            None => "stopped (the tree was not confirmed gone)".into(),
        });
    })?;
    let e = settle_cgroup(reg, e);
    Ok(StopOutcome { entry: e, already_finished: false, tree_gone: report.gone, not_signalled })
}

/// The longest a cleanup can take: its timeout plus the stop of its own tree.
fn cleanup_bound(e: &Entry) -> Duration {
    match &e.cleanup {
        Some(c) => StopPolicy::from_timings(&e.stop).cleanup_bound(Duration::from_millis(c.timeout_ms)),
        None => Duration::ZERO,
    }
}

/// How often, and for how long at most, `stop` and `wait` re-read an entry whose `start` is
/// still in progress: 5 ms, 10 s. The detached supervisor records itself within milliseconds;
/// only then is there a process to signal or wait on (the `start` command is never signalled).
const START_SETTLE_TICK: Duration = Duration::from_millis(5);
const START_SETTLE_MAX: Duration = Duration::from_secs(10);

/// Waits until an entry is past `starting` (its supervisor has spawned the command, failed, or
/// its starter died), and returns the entry as it is then.
fn settle_start(reg: &Registry, entry: &Entry) -> Result<Entry, ManagerError> {
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

fn record_lost(reg: &Registry, id: &str, text: &str) -> Result<Entry, ManagerError> {
    logs::append_marker(&reg.dir(id), text);
    Ok(reg.update(id, |e| {
        e.finish_from_outside(OutsideResult::Lost(text.into()), true);
    })?)
}

/// A pidfd on the entry's supervisor, opened *before* its identity is checked, so the check and
/// any signal sent through it are about the same process. `None` if it is gone or not ours.
fn verified_supervisor(e: &Entry) -> Option<PidFd> {
    if !e.this_boot() {
        return None;
    }
    let (pid, start) = e.live_supervisor()?;
    let fd = PidFd::open(Pid::new(pid)?).ok()?;
    registry::identity_alive(Some(pid), start).then_some(fd)
}

/// A pidfd on the entry's keeper, opened before its identity is checked (see
/// [`verified_supervisor`]). `None` if it is gone or not ours.
fn verified_keeper(e: &Entry) -> Option<PidFd> {
    if !e.this_boot() {
        return None;
    }
    let fd = PidFd::open(Pid::new(e.keeper_pid?)?).ok()?;
    registry::identity_alive(e.keeper_pid, e.keeper_start_time).then_some(fd)
}

/// Tells an entry's supervisor that stayed after its command exited (a cleanup pending) to
/// re-read its entry: SIGUSR1 through a verified pidfd. Only for finished entries: while the
/// command runs, SIGUSR1 is forwarded to it.
pub fn notify_supervisor(e: &Entry) {
    if e.is_finished()
        && let Some(sup) = verified_supervisor(e)
    {
        let _ = sup.send(Signal::USR1);
    }
}

/// Blocks until the pidfd's process exits or `timeout` passes. Returns true if it exited.
fn wait_pidfd(fd: &PidFd, timeout: Option<Duration>) -> bool {
    let end = timeout.map(|t| Instant::now() + t);
    loop {
        let mut fds = [PollFd::new(fd.as_raw_fd(), POLL_IN)];
        let left = end.map(|e| e.saturating_duration_since(Instant::now()));
        let n = process::poll(&mut fds, left).unwrap_or(0);
        if n > 0 && fds[0].ready() {
            return true;
        }
        if end.is_some_and(|e| Instant::now() >= e) {
            return false;
        }
    }
}

/// The result of `wait`.
#[derive(Clone, Debug)]
pub enum Waited {
    /// Finished: the entry with its result.
    Finished(Entry),
    /// Still running when the timeout passed.
    TimedOut,
    /// The supervisor is gone and no result was recorded.
    NoResult(Entry),
}

/// How often `wait` re-reads an entry while its supervisor lives: 50 ms. A supervisor whose
/// command exited may stay on (its cleanup pending), so its exit alone does not say "done".
const WAIT_TICK: Duration = Duration::from_millis(50);

/// Blocks until the entry's process has exited and any cleanup that has been triggered has
/// finished (a pending cleanup that nothing triggered does not hold it), then returns the
/// entry with its result. Wakes on the supervisor's pidfd, re-reading the entry every
/// `WAIT_TICK`; if the supervisor was killed, waits on what is left of the recorded tree.
pub fn wait(reg: &Registry, entry: &Entry, timeout: Option<Duration>) -> Result<Waited, ManagerError> {
    let entry = &settle_start(reg, entry)?;
    let end = timeout.map(|t| Instant::now() + t);
    let left = || end.map(|x| x.saturating_duration_since(Instant::now()));
    loop {
        let e = reg.read(&entry.id)?;
        if e.is_finished() {
            // A cleanup that is running, or that a supervisor still watching is about to run
            // (its owner is gone or its turn timeout passed), holds the wait.
            let due = e.cleanup_pending()
                && (e.owner_gone() || e.timeout_at_ms().is_some_and(|at| at <= files::now_ms()))
                && e.supervisor_alive();
            if e.cleanup_running() || due {
                if left() == Some(Duration::ZERO) {
                    return Ok(Waited::TimedOut);
                }
                std::thread::sleep(left().unwrap_or(WAIT_TICK).min(Duration::from_millis(20)));
                continue;
            }
            return Ok(Waited::Finished(e));
        }
        if left() == Some(Duration::ZERO) {
            return Ok(Waited::TimedOut);
        }
        if let Some(sup) = verified_supervisor(&e) {
            wait_pidfd(&sup, Some(left().unwrap_or(WAIT_TICK).min(WAIT_TICK)));
            continue;
        }
        // The supervisor is gone without a result (it was killed, maybe while we waited): wait
        // for what is left of the tree itself.
        if let Some(tree) = recorded_tree(&e).filter(|_| e.this_boot()) {
            while !tree.is_gone() {
                let l = left();
                if l == Some(Duration::ZERO) {
                    return Ok(Waited::TimedOut);
                }
                tree.wait_any_exit(l.unwrap_or(Duration::from_secs(1)).min(Duration::from_millis(100)));
            }
        }
        let e = reg.read(&entry.id)?;
        return Ok(if e.is_finished() { Waited::Finished(e) } else { Waited::NoResult(e) });
    }
}

/// The exit status `wait` reports for a finished entry: the process's code, or 128 + the signal
/// that ended it; `None` when neither is known (the supervisor was killed, and the entry was
/// then stopped, reaped or recorded lost from outside: nobody saw the process's own status).
///
/// An entry stopped by its turn timeout reports 124, as GNU `timeout` does, whatever the process
/// itself exited with (one that traps SIGTERM and exits 0 still timed out).
pub fn exit_status_of(e: &Entry) -> Option<i32> {
    if e.status == Status::TimedOut {
        return Some(exit::TIMED_OUT);
    }
    if let Some(c) = e.exit_code {
        return Some(c);
    }
    e.signal.as_deref().and_then(Signal::parse).map(|s| exit::by_signal(s.as_raw()))
}

/// Recovery after a crash of anything: entries from a previous boot are dead and never
/// signalled; an entry whose supervisor is alive is left to it; one whose supervisor is gone
/// but whose tree is alive (identity verified) gets the one stop and is recorded as `reaped`;
/// nothing alive and no result: recorded as `lost`.
pub fn reap(reg: &Registry, dry_run: bool) -> (Vec<ReapAction>, Vec<registry::SetAside>) {
    let (entries, aside) = if dry_run { reg.list() } else { reg.list_sweeping() };
    let census = OnceCell::new();
    let mut actions = Vec::new();
    // Cgroups a supervisor could not remove once its tree was gone, and those of supervisors
    // killed by SIGKILL (empty, their pid gone), `run`'s included.
    if !dry_run {
        cgroup::sweep_leftovers();
        for e in entries.iter().filter(|e| e.cgroup_leftover == Some(true) && e.is_finished() && !e.supervisor_alive())
        {
            settle_cgroup(reg, e.clone());
        }
    }
    // Cleanups whose runner was killed: past their deadline they are stopped here.
    for e in entries.iter().filter(|e| e.cleanup_started_at.is_some() && e.cleanup_result.is_none()) {
        if dry_run || !e.this_boot() || registry::identity_alive(e.cleanup_runner_pid, e.cleanup_runner_start_time) {
            continue;
        }
        if crate::cleanup::settle_abandoned(reg, &e.id, CleanupRunner::Reap, false)
            && let Ok(x) = reg.read(&e.id)
            && x.cleanup_result.as_ref().is_some_and(|r| r.timed_out)
        {
            actions.push(ReapAction {
                id: x.id.clone(),
                name: Some(x.display_name()),
                action: ReapKind::Cleanup,
                signalled: 0,
                tree_gone: true,
                reason: "its runner was killed; stopped past its bound".into(),
                cleanup_error: crate::cleanup::failure_line(&x),
                not_recorded: None,
            });
        }
    }
    for e in entries.iter().filter(|e| !e.is_finished()) {
        let action = |what: ReapKind, signalled, tree_gone, reason: &str| ReapAction {
            id: e.id.clone(),
            name: Some(e.display_name()),
            action: what,
            signalled,
            tree_gone,
            reason: reason.into(),
            cleanup_error: None,
            not_recorded: None,
        };
        let unrecorded = |r: Result<Entry, ManagerError>| r.err().map(|err| err.to_string());
        if !e.this_boot() {
            let mut a = action(ReapKind::Lost, 0, true, "previous boot");
            if !dry_run {
                a.not_recorded = unrecorded(record_lost(
                    reg,
                    &e.id,
                    "lost (recorded during a previous boot; nothing was signalled)",
                ));
            }
            actions.push(a);
            continue;
        }
        if e.supervisor_alive() || e.starter_alive() {
            continue;
        }
        // The supervisor may have finished between the listing and now: re-read.
        let Ok(e) = reg.read(&e.id) else { continue };
        if e.is_finished() {
            continue;
        }
        let tree = recorded_tree(&e).filter(|_| recorded_alive(&e, &census));
        // A populated cgroup is never "nothing alive", even when no member can be listed.
        let live = tree.as_ref().map(|t| t.live().len().max(usize::from(!t.is_gone()))).unwrap_or(0);
        let Some(tree) = tree.filter(|_| live > 0) else {
            if e.pid.is_none() && files::now_ms().saturating_sub(e.started_at) < STARTING_LEEWAY_MS {
                if !dry_run && e.supervisor_pid.is_some() {
                    // Its supervisor died before the spawn: a cgroup it made is empty.
                    settle_cgroup(reg, e.clone());
                }
                continue;
            }
            let mut a = action(ReapKind::Lost, 0, true, "supervisor gone, nothing alive");
            if !dry_run {
                match record_lost(reg, &e.id, "lost (the supervisor is gone and nothing of the tree is alive)") {
                    Ok(x) => {
                        settle_cgroup(reg, x);
                    }
                    Err(err) => a.not_recorded = Some(err.to_string()),
                }
                crate::cleanup::run_once(reg, &e.id, CleanupRunner::Reap);
            }
            actions.push(a);
            continue;
        };
        if dry_run {
            actions.push(action(
                ReapKind::Reaped,
                0,
                false,
                &format!("supervisor gone, {}", plural(live, "process", "processes")),
            ));
            continue;
        }
        let report = stop::stop_blocking(&tree, StopPolicy::from_timings(&e.stop));
        logs::append_marker(
            &reg.dir(&e.id),
            &format!(
                "reaped (the supervisor was gone): {} signalled, tree {}",
                report.signalled,
                if report.gone { "gone" } else { "NOT confirmed gone" }
            ),
        );
        let recorded = reg.update(&e.id, |x| {
            x.finish_from_outside(OutsideResult::Reaped, report.gone);
        });
        drop(tree);
        if let Ok(x) = reg.read(&e.id) {
            settle_cgroup(reg, x);
        }
        crate::cleanup::run_once(reg, &e.id, CleanupRunner::Reap);
        let mut a = action(
            ReapKind::Reaped,
            report.signalled,
            report.gone,
            &format!("supervisor gone, {}", plural(live, "process", "processes")),
        );
        a.not_recorded = recorded.err().map(|err| err.to_string());
        actions.push(a);
    }
    // Finished entries whose cleanup is still pending and due: their owner died or their turn
    // timeout passed while no supervisor was watching (it was killed while it waited).
    for e in entries.iter().filter(|e| e.is_finished() && e.cleanup_pending() && !e.supervisor_alive()) {
        let reason = if e.owner_gone() {
            "the owner exited"
        } else if e.timeout_at_ms().is_some_and(|at| at <= files::now_ms()) {
            "the turn timeout passed"
        } else {
            continue;
        };
        let mut cleanup_error = None;
        if !dry_run {
            crate::cleanup::run_once(reg, &e.id, CleanupRunner::Reap);
            cleanup_error = reg.read(&e.id).ok().and_then(|x| crate::cleanup::failure_line(&x));
        }
        actions.push(ReapAction {
            id: e.id.clone(),
            name: Some(e.display_name()),
            action: ReapKind::Cleanup,
            signalled: 0,
            tree_gone: true,
            reason: reason.into(),
            cleanup_error,
            not_recorded: None,
        });
    }
    (actions, aside)
}

/// In the cgroup tier, once an entry's tree is gone: removes its recorded cgroup (inode
/// checked) and records whether a leftover remains (`cgroupLeftover`, for the next `reap`).
/// Returns the entry as it is then.
fn settle_cgroup(reg: &Registry, e: Entry) -> Entry {
    if e.cgroup.is_none() {
        return e;
    }
    let left = !cgroup::remove_recorded(&e);
    if e.cgroup_leftover.unwrap_or(false) == left {
        return e;
    }
    reg.update(&e.id, |x| x.cgroup_leftover = left.then_some(true)).unwrap_or(e)
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {} alive", if n == 1 { one } else { many })
}

/// Removes a finished entry and its logs. Refuses one that still runs, one whose cleanup is
/// running, and one whose cleanup is pending (it has not run: `stop` runs it) unless `force`
/// drops it. A supervisor that stayed for the pending cleanup is told, and leaves.
pub fn clear(reg: &Registry, e: &Entry, force: bool) -> Result<(), ManagerError> {
    // `--force` always works: a running cleanup is stopped first (its tree, by the tag).
    if force && e.cleanup_running() {
        crate::cleanup::settle_abandoned(reg, &e.id, CleanupRunner::Stop, true);
    }
    if e.cleanup_running() && !force {
        return Err(ManagerError::Refused(format!(
            "{} is still finishing (its cleanup command is running); try again when it is done",
            e.label()
        )));
    }
    let status = live_status(e, &OnceCell::new());
    if status.is_live() {
        return Err(ManagerError::Refused(format!(
            "{} is {status}; stop it first ('sheepdog stop {}')",
            e.label(),
            e.id
        )));
    }
    if e.cleanup_pending() && !force {
        return Err(ManagerError::Refused(format!(
            "{} has a cleanup command that has not run; 'sheepdog stop {}' runs it, 'sheepdog clear --force {}' drops it",
            e.label(),
            e.id,
            e.id
        )));
    }
    let lingering = verified_supervisor(e);
    reg.remove(&e.id)?;
    if let Some(sup) = lingering {
        let _ = sup.send(Signal::USR1);
    }
    Ok(())
}

/// What `update` changes: the cleanup (attach, replace, or remove with `Some(None)`), its
/// timeout alone, and the name.
#[derive(Debug, Default)]
pub struct UpdateRequest {
    /// `Some(Some(cmd))`: attach or replace; `Some(None)`: remove; `None`: leave it.
    pub cleanup: Option<Option<String>>,
    /// The cleanup's bound; `None`: the one already set, else the default (10 s).
    pub cleanup_timeout: Option<Duration>,
    /// A new name (unique among live entries).
    pub name: Option<String>,
}

/// Default timeout of a cleanup command: 10 000 ms.
pub const CLEANUP_TIMEOUT_MS: u64 = 10_000;

/// Changes an entry's cleanup and/or name. The supervisor reads the cleanup at stop time.
/// Refused (`Refused`, status 1) when the cleanup is to change but its run has already been
/// claimed (it has run or is running): the change would have no effect. Errors: `NameInUse`,
/// `NotFound`.
pub fn update(reg: &Registry, e: &Entry, req: &UpdateRequest) -> Result<Entry, ManagerError> {
    let changes_cleanup = req.cleanup.is_some() || req.cleanup_timeout.is_some();
    if changes_cleanup && e.cleanup_started_at.is_some() {
        return Err(ManagerError::Refused(format!(
            "the cleanup of {} has already run (or is running); a change would have no effect",
            e.label()
        )));
    }
    // The rename and the cleanup change are one write under the entry's lock: a cleanup the
    // supervisor claimed meanwhile refuses both, never the one after the other was applied.
    let (e, written) = reg.update_renaming(&e.id, req.name.as_deref(), |x| {
        if !changes_cleanup {
            return true;
        }
        // Re-checked under the entry's lock: the supervisor may have claimed it meanwhile.
        if x.cleanup_started_at.is_some() {
            return false;
        }
        let timeout_ms = req
            .cleanup_timeout
            .map(|d| d.as_millis() as u64)
            .or(x.cleanup.as_ref().map(|c| c.timeout_ms))
            .unwrap_or(CLEANUP_TIMEOUT_MS);
        match &req.cleanup {
            Some(None) => x.cleanup = None,
            Some(Some(c)) => x.cleanup = Some(Cleanup { command: c.clone(), timeout_ms }),
            None => {
                if let Some(c) = &mut x.cleanup {
                    c.timeout_ms = timeout_ms;
                }
            }
        }
        true
    })?;
    if !written {
        return Err(ManagerError::Refused(format!(
            "the cleanup of {} started before this update; the change had no effect",
            e.label()
        )));
    }
    // A supervisor that stayed for a pending cleanup re-reads its entry (it leaves if none is
    // pending any more).
    notify_supervisor(&e);
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
        owner: e.owner_pid.and_then(Pid::new),
        cwd: Some(PathBuf::from(e.cwd.as_os_str())),
        env: e.env.iter().map(|kv| kv.split_env()).collect(),
        timeout: e.timeout_ms.map(Duration::from_millis),
        policy: StopPolicy { stdin_grace: Duration::ZERO, ..StopPolicy::from_timings(&e.stop) },
        cleanup: e.cleanup.clone(),
        log_max: e.log_max_bytes,
        ready: e.ready.clone(),
        restart_of: None,
        containment: e.containment_asked.as_deref().and_then(cgroup::Mode::parse).unwrap_or_default(),
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

/// What `wait` on several entries returns.
#[derive(Debug)]
pub struct WaitedMany {
    /// One result per entry, in the order given; `TimedOut` for one still running when the
    /// wait returned (the timeout passed, or with `any` another finished first).
    pub results: Vec<Waited>,
    /// The index of the entry that decides the exit status: with `any` the first that finished,
    /// else the last to finish (by its recorded end). `None` if none finished.
    pub decisive: Option<usize>,
}

/// True when `wait` on this entry would return at once: it is final and its cleanup is not
/// running, or its supervisor is gone.
fn wait_would_return(e: &Entry) -> bool {
    (e.is_finished() && !e.cleanup_running()) || (!e.supervisor_alive() && !e.starter_alive())
}

/// `wait` on several entries: all of them, or with `any` until the first finishes; bounded by
/// `timeout`. Each finished entry's result is [`wait`]'s.
pub fn wait_many(
    reg: &Registry,
    entries: &[Entry],
    any: bool,
    timeout: Option<Duration>,
) -> Result<WaitedMany, ManagerError> {
    let end = timeout.map(|t| Instant::now() + t);
    let left = || end.map(|e| e.saturating_duration_since(Instant::now()));
    let mut results: Vec<Option<Waited>> = vec![None; entries.len()];
    if !any {
        for (i, e) in entries.iter().enumerate() {
            results[i] = Some(wait(reg, e, left())?);
        }
        let decisive = results
            .iter()
            .enumerate()
            .filter_map(|(i, w)| match w {
                Some(Waited::Finished(e)) => Some((e.ended_at.unwrap_or(0), i)),
                _ => None,
            })
            .max()
            .map(|(_, i)| i);
        return Ok(WaitedMany {
            results: results.into_iter().map(|w| w.unwrap_or(Waited::TimedOut)).collect(),
            decisive,
        });
    }
    let mut decisive = None;
    'outer: loop {
        let mut sups = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            let cur = match reg.read(&e.id) {
                Ok(c) => c,
                Err(RegistryError::NotFound(_)) => continue,
                Err(err) => return Err(err.into()),
            };
            if cur.status != Status::Starting && wait_would_return(&cur) {
                results[i] = Some(wait(reg, &cur, Some(left().unwrap_or(Duration::from_secs(10))))?);
                decisive = Some(i);
                break 'outer;
            }
            sups.extend(verified_supervisor(&cur));
        }
        let tick = Duration::from_millis(100);
        let wait_for = left().map_or(tick, |l| l.min(tick));
        if left() == Some(Duration::ZERO) {
            break;
        }
        let mut fds: Vec<PollFd> = sups.iter().map(|s| PollFd::new(s.as_raw_fd(), POLL_IN)).collect();
        if fds.is_empty() {
            std::thread::sleep(wait_for);
        } else {
            let _ = process::poll(&mut fds, Some(wait_for));
        }
    }
    Ok(WaitedMany { results: results.into_iter().map(|w| w.unwrap_or(Waited::TimedOut)).collect(), decisive })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_update_whose_cleanup_was_claimed_meanwhile_changes_nothing_not_even_the_name() {
        let dir = tempfile::tempdir().unwrap();
        let reg = Registry::open(Some(dir.path().join("state"))).unwrap();
        let cleanup = Cleanup { command: "docker rm -f web".into(), timeout_ms: CLEANUP_TIMEOUT_MS };
        let stale = reg
            .create(Entry {
                name: Some("web".into()),
                status: Status::Running,
                cleanup: Some(cleanup),
                ..Entry::default()
            })
            .unwrap();
        // The supervisor claims the cleanup after the caller read the entry.
        reg.update(&stale.id, |e| e.cleanup_started_at = Some(files::now_ms())).unwrap();
        let req = UpdateRequest { cleanup: Some(Some("true".into())), cleanup_timeout: None, name: Some("api".into()) };
        assert!(matches!(update(&reg, &stale, &req), Err(ManagerError::Refused(_))));
        let now = reg.read(&stale.id).unwrap();
        assert_eq!(now.name.as_deref(), Some("web"), "a refused update must not half-apply");
        assert_eq!(now.cleanup.map(|c| c.command).as_deref(), Some("docker rm -f web"));

        // Without the race, both go in, in one write.
        let fresh = reg.read(&stale.id).unwrap();
        reg.update(&fresh.id, |e| e.cleanup_started_at = None).unwrap();
        let fresh = reg.read(&stale.id).unwrap();
        let e = update(&reg, &fresh, &req).unwrap();
        assert_eq!((e.name.as_deref(), e.cleanup.map(|c| c.command)), (Some("api"), Some("true".to_string())));
    }
}
