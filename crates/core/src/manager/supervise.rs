//! The detached supervisor's side of a managed entry: what runs in the `sheepdog supervise-entry`
//! process that `start` launches (a new session, like Podman's conmon). It spawns the command
//! under the one stop, drains its output into the capped logs, writes every transition to the
//! registry, runs the cleanup a stop triggered, and stays idle while a cleanup is pending and
//! an owner or turn timeout is still to be watched.

use crate::identity::Probe;
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::entry;
use crate::entry::Entry;
use crate::logs::{LogSet, Stream};
use crate::registry::{Registry, RegistryError};
use crate::spawn::{SpawnOptions, Spawned};
use crate::status::{CleanupRunner, SignalName, Status, StopReason};
use crate::stop::{StopPolicy, Trigger};
use crate::supervisor::{Cleanup, Happened, Hooks, Listener, OnStdinEof, Options, Outcome, Owner, Pending};
use crate::sys::process::{POLL_IN, PollFd};
use crate::sys::signal::{pipe_cloexec, set_nonblocking};
use crate::sys::{Pid, Signal, WaitStatus, process, procfs};
use crate::tree::{ID_ENV, Member, TAG_ENV};
use crate::{cgroup, duration, exit, logs, supervisor};

use super::DRAIN_AFTER_EXIT;

/// What a detached supervisor tells the `start` that launched it, as one JSON line on the pipe
/// that is its stdout until then: `{"handshake":"spawned"}` once the command runs (and the
/// entry says so), or `{"handshake":"failed","code":127,"message":"..."}` when it could not
/// start (the entry is removed). No line at all: it died first.
#[derive(Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "handshake", rename_all = "camelCase")]
pub(super) enum Handshake {
    Spawned,
    /// `code`: 126/127 (the command), 125 (the supervisor's own failure).
    Failed {
        code: i32,
        message: String,
    },
}

impl Handshake {
    /// Writes the line to stdout (best effort: a `start` that went away is not an error).
    pub(super) fn send(&self) {
        if let Ok(line) = serde_json::to_string(self) {
            let mut out = io::stdout();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
    }
}

/// The detached supervisor's arguments, as [`start`](super::start) writes them on its command
/// line (what `ps` shows) after `sheepdog --state-dir ROOT`: `supervise-entry --id ID
/// --containment MODE [--memory-max=N] [--pids-max=N] --cwd DIR -- CMD...`. [`to_args`] writes
/// them and [`parse`] reads them back (the CLI's `supervise-entry`), here in one place so the two
/// cannot drift.
///
/// Read by hand, not by clap: every managed process has a supervisor of its own, and building
/// clap's whole command tree would leave each of them with a larger heap and stack for nothing
/// (BENCHMARKS.md, PSS per extra supervisor).
///
/// [`to_args`]: SuperviseArgs::to_args
/// [`parse`]: SuperviseArgs::parse
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SuperviseArgs {
    /// The entry's id.
    pub id: String,
    /// The containment tier asked for (`auto` when the flag is missing or names no tier).
    pub containment: cgroup::Mode,
    /// The cgroup limits asked for.
    pub limits: cgroup::Limits,
    /// The command's working directory.
    pub cwd: PathBuf,
    /// The command and its arguments.
    pub command: Vec<OsString>,
}

impl SuperviseArgs {
    /// The subcommand's name, the first of [`SuperviseArgs::to_args`].
    pub const SUBCOMMAND: &'static str = "supervise-entry";

    /// The arguments, [`SuperviseArgs::SUBCOMMAND`] first.
    pub fn to_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> =
            [Self::SUBCOMMAND, "--id", &self.id, "--containment", self.containment.name()].map(OsString::from).into();
        args.extend(self.limits.memory_max.map(|m| format!("--memory-max={m}").into()));
        args.extend(self.limits.pids_max.map(|p| format!("--pids-max={p}").into()));
        args.extend(["--cwd".into(), self.cwd.clone().into_os_string(), "--".into()]);
        args.extend(self.command.iter().cloned());
        args
    }

    /// Reads the arguments that follow [`SuperviseArgs::SUBCOMMAND`]. `None` for anything
    /// [`SuperviseArgs::to_args`] would not have written: an unknown flag, a flag without its
    /// value, a limit that is not a number, no id or no command.
    pub fn parse(rest: &[OsString]) -> Option<SuperviseArgs> {
        let mut it = rest.iter();
        let mut a = SuperviseArgs::default();
        while let Some(arg) = it.next() {
            let s = arg.to_str()?;
            match s {
                "--id" => a.id = it.next()?.to_str()?.to_string(),
                "--cwd" => a.cwd = PathBuf::from(it.next()?),
                "--containment" => a.containment = cgroup::Mode::parse(it.next()?.to_str()?).unwrap_or_default(),
                "--" => {
                    a.command = it.cloned().collect();
                    break;
                }
                _ => {
                    if let Some(v) = s.strip_prefix("--memory-max=") {
                        a.limits.memory_max = Some(v.parse().ok()?);
                    } else if let Some(v) = s.strip_prefix("--pids-max=") {
                        a.limits.pids_max = Some(v.parse().ok()?);
                    } else {
                        return None;
                    }
                }
            }
        }
        (!a.id.is_empty() && !a.command.is_empty()).then_some(a)
    }

    /// What the supervisor asks of the cgroup probe: the tier and limits asked for, labelled
    /// with the entry's id.
    pub fn containment_request(&self) -> cgroup::Request {
        cgroup::Request { mode: self.containment, limits: self.limits, label: self.id.clone(), name: None }
    }
}

/// The body of the detached supervisor (`sheepdog supervise-entry`): runs the entry's command
/// to the end and records the result. `name` names the settings in a containment refusal as the
/// front end that started it does. Reports the spawn to `start` with a `Handshake` line on
/// stdout, then points stdout at /dev/null. Returns the supervisor's exit status.
pub fn run_supervisor(
    reg: &Registry,
    id: &str,
    cwd: PathBuf,
    argv: Vec<OsString>,
    containment: cgroup::Request,
    name: &dyn Fn(cgroup::Setting) -> String,
) -> i32 {
    let fail = |code: i32, message: String| {
        let _ = reg.remove(id);
        Handshake::Failed { code, message }.send();
        code
    };
    // Taken once, first: what this image takes over after its keeper's SIGKILL, a value from
    // here down to the loop (`Options::adoption`).
    let adoption = crate::keeper::take_adoption();
    let mut prepared = match prepare(reg, id, cwd, argv, containment, adoption) {
        Ok(p) => p,
        Err((code, message)) => return fail(code, message),
    };
    let opts = std::mem::take(&mut prepared.opts);
    // The whole life, to the recorded result and the cleanup (`Hooks for Managed`).
    let outcome = match supervisor::supervise(opts, &mut prepared.managed) {
        Ok(o) => o,
        Err(supervisor::Error::Containment(r)) => return fail(exit::USAGE, r.render(name)),
        Err(e) => return fail(e.exit_code(), e.to_string()),
    };
    if let Some(keeper) = outcome.keeper {
        keeper.done();
    }
    0
}

/// What [`prepare`] hands to the supervising part: the loop's options and its front end.
struct Prepared<'a> {
    opts: Options,
    managed: Managed<'a>,
}

/// The supervisor's setup before its loop: records itself in the entry, opens the log pipes,
/// the logs and the stdin, and builds the loop's options. Errors: the status and the message
/// for the handshake (the caller removes the entry).
// Never inlined, and boxed: its locals (entries read, changed and written back) would
// otherwise sit in the frame under the loop for the supervisor's whole life, and every page
// of stack that frame reaches stays resident in each idle supervisor (BENCHMARKS.md).
#[inline(never)]
fn prepare<'a>(
    reg: &'a Registry,
    id: &str,
    cwd: PathBuf,
    argv: Vec<OsString>,
    containment: cgroup::Request,
    mut adoption: Option<crate::keeper::Adoption>,
) -> Result<Box<Prepared<'a>>, (i32, String)> {
    let me = process::getpid();
    let mut cgroup_name = None;
    if let Ok(e) = reg.read(id) {
        // Apart from the entry: a corrupt entry.json does not hide who supervises it.
        let _ = reg.record_supervisor(id, e.stop.max_stop_ms);
    }
    let entry = match reg.update(id, |e| {
        e.supervisor = Some(crate::identity::proc_ref(me));
        // The tree's cgroup path, recorded before it is made: a SIGKILL between the `mkdir`
        // and the recording of its inode leaves a cgroup `reap` can still find and remove.
        if containment.mode != cgroup::Mode::Subreaper {
            let name = cgroup::entry_cgroup_name(id, me, &e.tag);
            e.cgroup = cgroup::planned_path(&name);
            cgroup_name = Some(name);
        }
    }) {
        Ok(e) => e,
        Err(e) => return Err((exit::USAGE, e.to_string())),
    };
    let pipes = (|| -> io::Result<_> {
        let (out_r, out_w) = pipe_cloexec()?;
        let (err_r, err_w) = pipe_cloexec()?;
        set_nonblocking(out_r.as_raw_fd())?;
        set_nonblocking(err_r.as_raw_fd())?;
        Ok((out_r, out_w, err_r, err_w))
    })();
    let (mut out_r, out_w, mut err_r, err_w) = match pipes {
        Ok(p) => p,
        Err(e) => return Err((exit::USAGE, format!("unable to create log pipes: {e}"))),
    };
    // A supervisor adopting its tree reads the pipes the provider already writes to, which its
    // relay left open across `execve` (crate::keeper::Adoption); the new ones go unused.
    if let Some(a) = adoption.as_mut()
        && let Ok([out, err]) = <[OwnedFd; 2]>::try_from(a.take_inherited())
    {
        (out_r, err_r) = (out, err);
    }
    let logs = match LogSet::open(&reg.dir(id), entry.log_max_bytes.unwrap_or(logs::DEFAULT_LOG_MAX)) {
        Ok(l) => l,
        Err(e) => return Err((exit::USAGE, format!("unable to open logs in {}: {e}", reg.dir(id).display()))),
    };
    // `--stdin pipe`: the command reads a FIFO this supervisor holds open (stdin.rs).
    // A supervisor adopting its tree spawns nothing: the FIFOs are the dead keeper's, and the
    // command has its stdin.
    let adopting = adoption.is_some();
    let (stdin_pipe, stdin) = if entry.stdin_pipe && !adopting {
        match super::stdin::StdinPipe::open(&reg.dir(id)) {
            Ok((pipe, reader)) => (Some(pipe), OwnedFd::from(reader)),
            Err(e) => return Err((exit::USAGE, format!("unable to make the stdin pipe: {e}"))),
        }
    } else {
        match File::open("/dev/null") {
            Ok(null) => (None, OwnedFd::from(null)),
            Err(e) => return Err((exit::USAGE, format!("unable to open /dev/null: {e}"))),
        }
    };
    let opts = Options {
        argv,
        spawn: SpawnOptions {
            cwd: Some(cwd),
            // `start --env` reaches the command here, not through this process's own
            // environment: `--env SHEEPDOG_KEEPER=off` or `LD_PRELOAD=...` is the command's
            // business, not the supervisor's. The id and tag win over anything given.
            env: entry
                .env
                .iter()
                .map(|kv| kv.split_env())
                .filter(|(k, _)| !k.is_empty())
                .chain([(ID_ENV.into(), id.into()), (TAG_ENV.into(), entry.tag.clone().into())])
                .collect(),
            stdio: Some([stdin, out_w, err_w]),
            ..SpawnOptions::default()
        },
        owner: entry.owner.and_then(|o| Pid::new(o.pid)).map(Owner::Process),
        on_stdin_eof: OnStdinEof::Ignore,
        policy: StopPolicy::from_timings(&entry.stop),
        timeout: entry.timeout_ms.map(Duration::from_millis),
        containment: cgroup::Request { label: id.to_string(), name: cgroup_name, ..containment },
        adoption,
        ..Options::default()
    };
    let managed = Managed {
        reg,
        id: id.to_string(),
        adopted: false,
        keepers_cleanup: None,
        known: entry,
        logs,
        pipes: vec![(File::from(out_r), Stream::Out), (File::from(err_r), Stream::Err)],
        seen: Default::default(),
        stdin: stdin_pipe,
    };
    Ok(Box::new(Prepared { opts, managed }))
}

/// The front end of a managed supervisor: logs and registry writes.
struct Managed<'a> {
    reg: &'a Registry,
    id: String,
    /// The entry as this supervisor last wrote or read it: what it rewrites the entry from if
    /// it finds it corrupt, so `stop` and `reap` keep working.
    known: Entry,
    logs: LogSet,
    /// Open read ends of the provider's stdout and stderr.
    pipes: Vec<(File, Stream)>,
    /// Descendants last recorded in the entry: (pid, start time).
    seen: std::collections::HashSet<(i32, u64)>,
    /// `--stdin pipe`, until the input is ended or the tree is gone.
    stdin: Option<super::stdin::StdinPipe>,
    /// This supervisor took the tree over from its killed keeper ([`Happened::Adopted`]).
    adopted: bool,
    /// The cleanup the killed keeper was running, let finish after the take-over
    /// ([`Hooks::keepers_cleanup`]).
    keepers_cleanup: Option<KeepersCleanup>,
}

/// A cleanup whose runner, the keeper, was killed while it ran: its `sh` is this supervisor's
/// child now (re-parented to a subreaper), and its wait status is the cleanup's result.
#[derive(Clone, Copy, Debug)]
struct KeepersCleanup {
    /// The cleanup's `sh`; `None` if it could not be found.
    sh: Option<Pid>,
    /// The `sh`'s wait status, once this supervisor reaped it.
    status: Option<WaitStatus>,
    /// The cleanup's bound: its claim plus its timeout, in unix ms.
    bound_ms: u64,
}

/// At most this many descendants are recorded in an entry: 4096 (the oldest first). A tree
/// larger than that is still stopped whole by its supervisor; only `reap` after a supervisor
/// SIGKILL relies on the record, and then also on the tag and the group.
pub const MAX_RECORDED_MEMBERS: usize = 4096;

/// How long a supervisor whose result could not be written waits before the next try: from
/// 100 ms, doubling, to at most 2 s. A full or read-only state dir may be fixed at any time; the
/// supervisor holds the only true account of the outcome until then, so it stays and retries
/// (idle, its tree gone) until the write goes in, the entry is removed, or
/// [`RESULT_RETRY_FOR`] has passed.
const RESULT_RETRY_FIRST: Duration = Duration::from_millis(100);
const RESULT_RETRY_MAX: Duration = Duration::from_secs(2);
/// How long a supervisor keeps retrying a result it could not write: 10 minutes. Long enough
/// for a person to free space or remount; bounded, so a state dir that stays full does not keep
/// an idle process forever (the entry then reads `lost`).
const RESULT_RETRY_FOR: Duration = Duration::from_secs(600);

impl Managed<'_> {
    /// One locked change of the entry ([`Registry::update`]); an entry found corrupt is
    /// rewritten from [`Managed::known`] with the change. The entry as written is then
    /// [`Managed::known`].
    /// Records the provider in the entry (pid, group, start time, session; in a keeper, the
    /// keeper's own identity too). Returns the command's preview as written (`None`: not
    /// written) and whether a stop was recorded while the command was being spawned
    /// (`Entry::record_spawned`).
    fn record_spawn(&mut self, spawned: &Spawned) -> (Option<String>, bool) {
        let stat = procfs::stat(spawned.pid).ok();
        let start_time = stat.as_ref().map(|s| s.start_time);
        let sid = stat.as_ref().map(|s| s.session);
        let mut stopped_meanwhile = false;
        let written = self.write(&mut |e| {
            stopped_meanwhile = e.record_spawned(spawned.pid.as_raw(), spawned.pgid.as_raw(), start_time, sid);
            // The process that spawns is the keeper unless it is the recorded supervisor
            // (`SHEEPDOG_KEEPER=off`).
            let me = process::getpid();
            if e.supervisor.map(|s| s.pid) != Some(me.as_raw()) {
                e.keeper = Some(crate::identity::proc_ref(me));
            }
        });
        (written.ok().map(|()| self.known.command_preview.clone()), stopped_meanwhile)
    }

    // The entry as written is left in `known`, not returned: a returned copy is one more
    // entry-sized slot in the frame of every caller, under the loop (BENCHMARKS.md).
    fn write(&mut self, f: &mut dyn FnMut(&mut Entry)) -> Result<(), RegistryError> {
        // Corrupt, or entry.json deleted while its directory stays (`ps` promised a rewrite);
        // a cleared entry has no directory, and `rewrite` refuses it.
        self.known = match self.reg.update(&self.id, |e| f(e)) {
            Err(RegistryError::Corrupt { .. } | RegistryError::NotFound(_)) => self.repair(f),
            other => other,
        }?;
        Ok(())
    }

    /// Rewrites the corrupt entry from what this supervisor holds, with `f` applied.
    fn repair(&mut self, f: &mut dyn FnMut(&mut Entry)) -> Result<Entry, RegistryError> {
        let mut e = self.known.clone();
        f(&mut e);
        let missing = !self.reg.file(&self.id, "entry.json").exists();
        self.reg.rewrite(&e)?;
        self.logs.marker(if missing {
            "entry.json was missing; rewritten from the supervisor's own record"
        } else {
            "entry.json was corrupt; rewritten from the supervisor's own record"
        });
        Ok(e)
    }

    /// Rewrites entry.json if it was deleted while this supervisor runs (issue 34, item 6): one
    /// `stat` per look at the members, so within [`crate::supervisor::MEMBER_SCAN_MAX`].
    fn restore_if_missing(&mut self) {
        if self.reg.file(&self.id, "entry.json").exists() || !self.reg.dir(&self.id).is_dir() {
            return;
        }
        let _ = self.repair(&mut |_| {});
    }

    /// Reads what is available on `fd`; closes it at EOF.
    fn read_fd(&mut self, fd: RawFd) {
        let Some(i) = self.pipes.iter().position(|(p, _)| p.as_raw_fd() == fd) else { return };
        let stream = self.pipes[i].1;
        let mut buf = [0u8; 65536];
        // At most 1 MiB per wake, so one flooding stream cannot starve the loop.
        for _ in 0..16 {
            let n = (&self.pipes[i].0).read(&mut buf);
            match n {
                Ok(0) => {
                    self.pipes.remove(i);
                    return;
                }
                Ok(n) => self.logs.write(stream, &buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    self.pipes.remove(i);
                    return;
                }
            }
        }
    }

    /// Drains the pipes for at most `bound` after the tree is gone.
    fn drain(&mut self, bound: Duration) {
        let end = Instant::now() + bound;
        while !self.pipes.is_empty() {
            let now = Instant::now();
            if now >= end {
                break;
            }
            let mut fds: Vec<PollFd> = self.pipes.iter().map(|(p, _)| PollFd::new(p.as_raw_fd(), POLL_IN)).collect();
            if process::poll(&mut fds, Some(end - now)).unwrap_or(0) == 0 {
                break;
            }
            for p in fds.iter().filter(|p| p.ready()) {
                self.read_fd(p.fd);
            }
        }
    }

    /// Records `outcome` as the entry's result (retrying a write that did not go in, for at
    /// most [`RESULT_RETRY_FOR`]). Returns true if a stop's cleanup was claimed with it: it is
    /// this supervisor's to run now.
    fn finish(&mut self, outcome: &Outcome) -> bool {
        let mut text = String::new();
        let mut claimed = false;
        // The keeper had recorded the result (and said so in the log): left as it is.
        let mut kept_the_keepers = false;
        let adopted = self.adopted;
        // An unfinished stop: who is left, by identity (a later stop or reap looks for them), and
        // in the status text who it is, or the reason when it is a refused signal.
        let mut apply =
            |e: &mut Entry| {
                if e.is_finished() && (outcome.trigger == Some(Trigger::SupervisorKilled) || adopted) {
                    // The keeper recorded the result and was killed afterwards (during the cleanup
                    // or while it waited for a trigger): its death is a stop, so only a cleanup
                    // that is still pending is left to do. (An adopter that went on with the
                    // keeper's stop has that stop's trigger, not `SupervisorKilled`.)
                    text = e.status_text.clone().unwrap_or_default();
                    claimed = crate::cleanup::claim(e);
                    kept_the_keepers = true;
                    return;
                }
                let (status, t) = result_status(outcome, e.timeout_ms);
                text = if outcome.tree_gone { t } else { crate::tree::unfinished_text(&t, &outcome.left) };
                if !outcome.left.is_empty() {
                    let mut list = e.members.clone();
                    list.extend(outcome.left.iter().filter_map(|m| {
                        Some(entry::RecordedMember { pid: m.pid.as_raw(), start_time: m.start_time? })
                    }));
                    list.sort_by_key(|m| (m.pid, m.start_time));
                    list.dedup();
                    e.record_members(list, MAX_RECORDED_MEMBERS);
                }
                e.record_result(entry::SupervisorResult {
                    status,
                    text: text.clone(),
                    exit_code: match outcome.provider {
                        Some(WaitStatus::Exited(c)) => Some(c),
                        _ => None,
                    },
                    signal: match outcome.provider {
                        Some(WaitStatus::Signaled(s, _)) => Some(SignalName::of(s)),
                        _ => None,
                    },
                    core_dumped: matches!(outcome.provider, Some(WaitStatus::Signaled(_, true))),
                    stop_reason: outcome.trigger.map(StopReason::from),
                    tree_gone: outcome.tree_gone,
                    cgroup_left: outcome.cgroup_left,
                });
                // A stop (not the command's own exit) is two steps: the tree, then the cleanup. The
                // claim goes in the same write as the result, so nobody who reads a stopped entry
                // (`wait`, `clear`) can see its cleanup as not yet triggered.
                if outcome.trigger.is_some() {
                    claimed = crate::cleanup::claim(e);
                }
            };
        let mut recorded = self.write(&mut apply);
        let mut pause = RESULT_RETRY_FIRST;
        let give_up = Instant::now() + RESULT_RETRY_FOR;
        while let Err(err) = &recorded
            && err.is_not_written()
            && Instant::now() < give_up
        {
            if pause == RESULT_RETRY_FIRST {
                self.logs.marker(&format!("unable to record the result yet ({err}); retrying"));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(RESULT_RETRY_MAX);
            recorded = self.write(&mut apply);
        }
        if !kept_the_keepers {
            self.logs.marker(&format!("exited: {text}"));
        }
        claimed && recorded.is_ok()
    }

    /// The command exited on its own, but its cleanup is still pending (a `docker run -d`
    /// wrapper exits at once; its container runs on). While an owner or a turn timeout is set,
    /// the supervisor lingers, idle, watching them ([`Pending::Trigger`]), and runs the cleanup
    /// when either fires or when asked to stop (SIGTERM); it leaves as soon as nothing is
    /// pending any more (it ran elsewhere, was removed by `update`, or the entry was cleared:
    /// `sheepdog` sends SIGUSR1 after such changes, and [`Hooks::still_needed`] reads the entry).
    fn pending_trigger(&mut self) -> Pending {
        let Ok(e) = self.reg.read(&self.id) else { return Pending::Nothing };
        if !e.cleanup_pending() || (e.owner.is_none() && e.timeout_ms.is_none()) {
            return Pending::Nothing;
        }
        let owner = e.owner.and_then(|o| Some((Pid::new(o.pid)?, o.start_time)));
        let until = e.timeout_left().map(|left| Instant::now() + left);
        self.logs.marker("waiting: the cleanup is pending; it runs on stop, owner exit or the turn timeout");
        Pending::Trigger { owner, until }
    }
}

/// The recorded status and its human form for a supervisor's outcome.
fn result_status(outcome: &Outcome, timeout_ms: Option<u64>) -> (Status, String) {
    match (outcome.trigger, outcome.provider) {
        (Some(Trigger::Timeout), _) => {
            let after = timeout_ms.map(|ms| duration::format(Duration::from_millis(ms)));
            (Status::TimedOut, format!("timed out after {}", after.unwrap_or_default()))
        }
        (Some(t), _) => (Status::Stopped, t.stopped_text().into()),
        (_, Some(WaitStatus::Exited(c))) => (Status::Exited, format!("exited ({c})")),
        (_, Some(WaitStatus::Signaled(s, false))) => (Status::Killed, format!("killed ({s})")),
        (_, Some(WaitStatus::Signaled(s, true))) => (Status::Killed, format!("killed ({s}, core dumped)")),
        // Not reaped: the tree was not confirmed gone, which `finish` adds, with who is left.
        (_, None) => (Status::Stopped, "stopped".into()),
    }
}

/// A managed supervisor's events become registry writes and log markers, each written by the
/// arm of its event: a marker's text depends on what the write found (the command's preview, an
/// adopting image's missing record), and a stop's record must go in before its first signal.
/// The one event type ([`Happened`]) has two consumers here, each a method of its own: the
/// registry writer ([`Managed::record`]) and the log markers ([`Managed::mark`]), in that order
/// (a marker says what the record holds: the command it started, whether an adoption was the
/// one to record the spawn). `start`'s handshake follows both, so that what it reads next (the
/// entry, the log) is written. The third consumer of the same type is `run --events-fd`'s
/// writer (`events::EventSink`).
impl Listener for Managed<'_> {
    fn on(&mut self, event: &Happened<'_>) {
        self.adopted |= matches!(event, Happened::Adopted(_));
        if let (Happened::Reaped { pid, status }, Some(c)) = (event, self.keepers_cleanup.as_mut())
            && c.sh == Some(*pid)
        {
            c.status = Some(*status);
        }
        let recorded = self.record(event);
        self.mark(event, &recorded);
        if let Happened::Spawned { .. } = event {
            Handshake::Spawned.send();
            let _ = process::redirect_to_null(1);
        }
    }
}

/// What [`Managed::record`] wrote for an event, for its marker.
enum Recorded {
    /// Nothing this event records, or nothing recorded (an adoption whose spawn the keeper had
    /// recorded already).
    Nothing,
    /// The spawn, and the command it records (its preview), as written.
    Spawn(String),
}

impl Managed<'_> {
    /// The registry writer: what `event` changes in the entry.
    fn record(&mut self, event: &Happened<'_>) -> Recorded {
        match *event {
            Happened::Contained(record) => {
                let _ = self.write(&mut |e| record_containment(e, record));
                Recorded::Nothing
            }
            Happened::Spawned { spawned, .. } => {
                let (preview, stopped_meanwhile) = self.record_spawn(&spawned);
                if stopped_meanwhile {
                    // A stop (or reap) recorded a result while the command was being spawned:
                    // honour it through the one stop, by the same signal `sheepdog stop` sends.
                    let _ = process::kill(process::getpid(), Signal::TERM);
                }
                Recorded::Spawn(preview.unwrap_or_default())
            }
            // The keeper was killed between the spawn and its record: the entry says the command
            // runs (so `start`, which got no handshake, reports it started; and the stop after
            // this adoption is recorded against it). No handshake: `start` reads the entry. A
            // stop recorded meanwhile needs nothing more: the keeper's death stops the tree.
            Happened::Adopted(spawned) if self.reg.read(&self.id).is_ok_and(|e| e.provider.is_none()) => {
                let (preview, _) = self.record_spawn(&spawned);
                Recorded::Spawn(preview.unwrap_or_default())
            }
            Happened::Stopping { trigger, policy } if trigger != Trigger::ProviderExited => {
                // Recorded before the first signal: a supervisor and keeper both killed in the
                // middle of the stop leave an entry that says a stop began, and why, and with
                // which timings when a `stop --term-grace` gave it a one-off grace (what other
                // stops wait for: `stopUnderWay`, beside the entry's own, which stay as they are).
                let reason = StopReason::from(trigger);
                let policy = *policy;
                let _ = self.write(&mut |e| {
                    if !e.is_finished() && e.stop_reason.is_none() {
                        e.stop_reason = Some(reason.clone());
                        e.stop_under_way = (policy != StopPolicy::from_timings(&e.stop)).then(|| policy.timings());
                    }
                });
                Recorded::Nothing
            }
            // The handshake's `failed` line and the entry's removal follow the error the
            // supervisor returns next (`run_supervisor`); a reaped orphan is not recorded.
            Happened::Adopted(_)
            | Happened::Stopping { .. }
            | Happened::Escalated { .. }
            | Happened::SpawnFailed { .. }
            | Happened::Reaped { .. } => Recorded::Nothing,
        }
    }

    /// The log markers: one line in the entry's logs for what `event` is, after its record.
    fn mark(&mut self, event: &Happened<'_>, recorded: &Recorded) {
        let line = match (*event, recorded) {
            (Happened::Spawned { spawned, .. }, Recorded::Spawn(preview)) => {
                format!("started pid {}: {preview}", spawned.pid)
            }
            (Happened::Adopted(spawned), Recorded::Spawn(preview)) => {
                format!(
                    "started pid {}: {preview} (recorded by the supervisor after its keeper's SIGKILL)",
                    spawned.pid
                )
            }
            (Happened::Stopping { trigger, .. }, _) => format!("stopping: {trigger}"),
            (Happened::Escalated { remaining }, _) => {
                format!("escalated: SIGKILL to {remaining} processes still alive after the term grace")
            }
            _ => return,
        };
        self.logs.marker(&line);
    }
}

impl Hooks for Managed<'_> {
    fn policy_for_stop(&mut self, _trigger: Trigger) -> Option<StopPolicy> {
        match self.reg.read(&self.id) {
            Ok(e) => Some(StopPolicy::from_timings(&e.stop_in_effect())),
            // Found corrupt as the stop begins: rewritten now, so the stop's result (and the
            // next `stop` or `reap`) can be recorded.
            Err(RegistryError::Corrupt { .. }) => {
                self.repair(&mut |_| {}).ok().map(|e| StopPolicy::from_timings(&e.stop_in_effect()))
            }
            Err(_) => None,
        }
    }

    fn wants_members(&self) -> bool {
        true
    }

    fn members(&mut self, members: &[Member]) -> bool {
        self.restore_if_missing();
        let now: std::collections::HashSet<(i32, u64)> =
            members.iter().filter_map(|m| Some((m.pid.as_raw(), m.start_time?))).collect();
        if now.is_subset(&self.seen) {
            return false;
        }
        // Write only when someone new appeared; the list then holds who is alive now.
        self.seen = now;
        let list: Vec<entry::RecordedMember> = self
            .seen
            .iter()
            .map(|(pid, start_time)| entry::RecordedMember { pid: *pid, start_time: *start_time })
            .collect();
        let _ = self.write(&mut |e| e.record_members(list.clone(), MAX_RECORDED_MEMBERS));
        true
    }

    fn adoptable_fds(&self) -> Vec<RawFd> {
        // Out, then err: run_supervisor takes them back in that order.
        self.pipes.iter().map(|(p, _)| p.as_raw_fd()).collect()
    }

    fn keeper_only_fds(&self) -> Vec<RawFd> {
        // The data FIFO's write end: the command reads EOF once the keeper closes it.
        self.stdin.as_ref().map(|p| p.fds().to_vec()).unwrap_or_default()
    }

    fn handed_to_keeper(&mut self) {
        // The keeper holds the stdin pipe; the FIFOs stay for it (forget, do not remove).
        if let Some(pipe) = self.stdin.take() {
            pipe.forget();
        }
    }

    fn fds(&self) -> Vec<RawFd> {
        self.pipes.iter().map(|(p, _)| p.as_raw_fd()).chain(self.stdin.as_ref().map(|s| s.ctl_fd())).collect()
    }

    /// Drains the log pipes (for at most [`DRAIN_AFTER_EXIT`]), then writes the result; a stop's
    /// cleanup claimed with it runs next, else what is left is a cleanup pending on a trigger,
    /// or nothing.
    fn record_outcome(&mut self, outcome: &Outcome) -> Pending {
        self.drain(DRAIN_AFTER_EXIT);
        self.logs.flush_partials();
        if self.finish(outcome) {
            return Pending::Cleanup;
        }
        if self.keepers_cleanup.is_some() {
            return Pending::Settling;
        }
        // The FIFOs go once the result is recorded (after a claimed cleanup, as before it ran):
        // a sender that finds them gone reads the entry to tell "exited" from "input already
        // closed" (stdin.rs).
        self.stdin = None;
        if outcome.trigger.is_some() {
            return Pending::Nothing;
        }
        self.pending_trigger()
    }

    fn still_needed(&mut self) -> bool {
        self.reg.read(&self.id).is_ok_and(|e| e.cleanup_pending())
    }

    /// The keeper had stopped the tree, recorded it, and was running the entry's cleanup when it
    /// was killed: that cleanup is let finish (stopping it with the tree would cut its work
    /// short). Its `sh` is the one the entry records, or, for a keeper killed before it recorded
    /// it, this process's child that leads its own group (the tree is gone: the cleanup is all
    /// that is below).
    fn keepers_cleanup(&mut self) -> Option<Member> {
        let e = self.reg.read(&self.id).ok().filter(|e| {
            e.is_finished()
                && e.cleanup_state.is_unsettled()
                && e.cleanup_state.runner().map(|r| r.pid) == e.keeper.map(|k| k.pid)
        })?;
        self.logs.marker("the keeper was killed while it ran the cleanup; the supervisor bounds it");
        // This process is its runner now: a `stop` or `wait` meanwhile waits for it, not for the
        // dead keeper (which would read as a cleanup that did not finish).
        let me = crate::identity::me();
        let recorded = e.cleanup_state.child().and_then(|c| Pid::new(c.pid));
        // A `sh` found, not recorded (the keeper was killed before it wrote it down), is
        // recorded now: whoever settles the cleanup past its bound reads its status by it.
        let found = recorded.is_none().then(|| {
            procfs::children(process::getpid())
                .into_iter()
                .filter_map(|c| procfs::stat(c).ok())
                .find(|s| s.pgrp == s.pid.as_raw())
        });
        let found = found.flatten().map(|s| Member::from_stat(&s));
        let _ = self.write(&mut |e| {
            e.cleanup_state.hand_to(me);
            if let Some(m) = found.filter(|_| e.cleanup_state.child().is_none()) {
                e.cleanup_state.spawned(entry::ProcRef { pid: m.pid.as_raw(), start_time: m.start_time });
            }
        });
        let bound_ms = crate::cleanup::deadline_ms(&e).unwrap_or(0);
        let sh = recorded.or(found.map(|m| m.pid));
        self.keepers_cleanup = Some(KeepersCleanup { sh, status: None, bound_ms });
        procfs::stat(sh?).ok().map(|s| Member::from_stat(&s))
    }

    /// The `sh` ended: what it left is stopped and its status recorded, as its runner would
    /// have (`cleanup::record_reaped`); else, past its bound, it is stopped and recorded timed
    /// out (`cleanup::settle_abandoned`, which also ends a cleanup that is gone without a known
    /// status). Not yet: the rest of its bound, in the wall-clock ms `settle_abandoned` keeps
    /// it in (at least 1 ms, so a clock stepped back meanwhile makes a wait, not a spin).
    fn settled(&mut self) -> Option<Duration> {
        let c = self.keepers_cleanup?;
        if let Some(st) = c.status {
            crate::cleanup::record_reaped(self.reg, &self.id, st, CleanupRunner::Supervisor);
            return None;
        }
        if crate::cleanup::settle_abandoned(self.reg, &self.id, CleanupRunner::Supervisor, false) {
            return None;
        }
        Some(Duration::from_millis(c.bound_ms.saturating_sub(crate::files::now_ms()).max(1)))
    }

    fn clean_up(&mut self, cleanup: Cleanup) {
        match cleanup {
            Cleanup::Claimed => {
                crate::cleanup::run_claimed(self.reg, &self.known, CleanupRunner::Supervisor);
                self.stdin = None;
            }
            Cleanup::Triggered(trigger) => {
                self.logs.marker(&format!("cleanup triggered: {trigger}"));
                crate::cleanup::run_once(self.reg, &self.id, CleanupRunner::Supervisor);
            }
        }
    }

    fn ready(&mut self, fd: RawFd) {
        if let Some(pipe) = self.stdin.as_mut()
            && pipe.ctl_fd() == fd
        {
            if pipe.end_requested() {
                self.stdin = None;
                self.logs.marker("stdin closed (end of input sent)");
            }
            return;
        }
        self.read_fd(fd);
    }
}

/// Writes a containment record into an entry.
fn record_containment(e: &mut Entry, r: &cgroup::Record) {
    e.containment = Some(r.containment);
    e.containment_reason = r.containment_reason.clone();
    e.cgroup = r.cgroup.clone();
    e.cgroup_inode = r.cgroup_inode;
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use super::SuperviseArgs;
    use crate::cgroup;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn supervise_args_read_back_what_they_write_in_the_command_line_ps_shows() {
        let a = SuperviseArgs {
            id: "web-3".into(),
            containment: cgroup::Mode::Cgroup,
            limits: cgroup::Limits { memory_max: Some(1 << 20), pids_max: Some(64) },
            cwd: "/tmp/x y".into(),
            command: os(&["sh", "-c", "echo --id"]),
        };
        let args = a.to_args();
        assert_eq!(
            args,
            os(&[
                "supervise-entry",
                "--id",
                "web-3",
                "--containment",
                "cgroup",
                "--memory-max=1048576",
                "--pids-max=64",
                "--cwd",
                "/tmp/x y",
                "--",
                "sh",
                "-c",
                "echo --id"
            ])
        );
        assert_eq!(SuperviseArgs::parse(&args[1..]), Some(a.clone()));
        let plain = SuperviseArgs { limits: cgroup::Limits::default(), containment: cgroup::Mode::Auto, ..a };
        assert_eq!(SuperviseArgs::parse(&plain.to_args()[1..]), Some(plain));
    }

    #[test]
    fn supervise_args_refuse_what_start_never_writes() {
        for bad in [
            &["--id", "a", "--cwd", "/"][..],
            &["--cwd", "/", "--", "true"],
            &["--id", "a", "--bogus", "--", "true"],
            &["--id", "a", "--pids-max=x", "--", "true"],
            &["--id"],
        ] {
            assert_eq!(SuperviseArgs::parse(&os(bad)), None, "{bad:?}");
        }
        // An unknown tier reads as `auto`, as before.
        let a = SuperviseArgs::parse(&os(&["--id", "a", "--containment", "x", "--", "true"]));
        assert_eq!(a.map(|a| a.containment), Some(cgroup::Mode::Auto));
    }
}
