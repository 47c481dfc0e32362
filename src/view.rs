//! The one view of an entry that every front end renders: every `--json` of the CLI (`start`,
//! `ps`, `stop`, `wait`, `reap`, `update`, `clear`, `restart`), the MCP server and `top`.
//!
//! Shape (camelCase): `status` is one [`Status`] token and `statusText` the human line, never
//! null; `name` is the display name (the given name, else the program's basename); `envKeys`
//! lists the `--env` keys only (the values stay in the 0600 entry file: they may be secrets);
//! `cleanup` is the configuration (`{command, timeoutMs}` or null) and `cleanupResult` what the
//! cleanup did (or null), never merged; `ports` are the TCP ports the live tree listens on.

use std::cell::OnceCell;

/// A nudge a start earned (`{kind, message, matched}` in `warnings`); see `manager::Started`.
pub use crate::nudge::{NudgeKind, Warning as Nudge};
use std::path::PathBuf;

use serde::Serialize;

use crate::logs::{COMBINED_LOG, STDERR_LOG, STDOUT_LOG};
use crate::ready::ReadySpec;
use crate::registry::{Cleanup, CleanupResult, Entry, Registry, StopTimings};
use crate::status::Status;
use crate::sys::Pid;
use crate::tree::Census;

/// Log paths of an entry.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct LogPaths {
    /// `procs/<id>/stdout.log`: stdout, byte-exact.
    pub stdout: PathBuf,
    /// `procs/<id>/stderr.log`: stderr, byte-exact.
    pub stderr: PathBuf,
    /// `procs/<id>/combined.log`: tagged lines in arrival order, with markers.
    pub combined: PathBuf,
}

impl LogPaths {
    /// The paths of entry `id` in `reg`.
    pub fn of(reg: &Registry, id: &str) -> LogPaths {
        LogPaths {
            stdout: reg.file(id, STDOUT_LOG),
            stderr: reg.file(id, STDERR_LOG),
            combined: reg.file(id, COMBINED_LOG),
        }
    }
}

/// One live process of an entry's tree. `sid` is the Unix session id.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct TreeProc {
    /// Its pid.
    pub pid: i32,
    /// Its process group.
    pub pgid: i32,
    /// Its Unix session id.
    pub sid: i32,
    /// Its command line.
    pub command: String,
}

/// The entry view. Times are unix ms, durations ms.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EntryView {
    /// `proc_N`, never reused.
    pub id: String,
    /// The given name, else the program's basename (the same value everywhere).
    pub name: String,
    /// True if `name` was given (`--name`), false if it is the program's basename.
    pub name_given: bool,
    /// `--session`: the agent turn it belongs to.
    pub session_id: Option<String>,
    /// One token: `running`, `exited`, `timedOut`...
    pub status: Status,
    /// The human line: `running`, `exited (0)`, `timed out after 2s`, `orphaned (...)`. Never null.
    pub status_text: String,
    /// The command's exit code, when it exited by itself.
    pub exit_code: Option<i32>,
    /// The signal that ended the command (`SIGTERM`), when one did.
    pub signal: Option<String>,
    /// The command's (provider's) pid, once spawned.
    pub pid: Option<i32>,
    /// Its process group.
    pub pgid: Option<i32>,
    /// The detached supervisor's pid.
    pub supervisor_pid: Option<i32>,
    /// `--owner`: the entry stops when this process dies.
    pub owner_pid: Option<i32>,
    /// Unix ms.
    pub started_at: u64,
    /// Unix ms, once finished.
    pub ended_at: Option<u64>,
    /// The command as one short line (at most 120 characters).
    pub command_preview: String,
    /// The command and its arguments.
    pub argv: Vec<String>,
    /// Its working directory.
    pub cwd: String,
    /// Keys of the `--env` variables (values are never shown).
    pub env_keys: Vec<String>,
    /// TCP ports the live tree listens on (empty once finished).
    pub ports: Vec<u16>,
    /// The configuration: `{command, timeoutMs}` or null.
    pub cleanup: Option<Cleanup>,
    /// What the cleanup did, once it ran; null before (or without one).
    pub cleanup_result: Option<CleanupResult>,
    /// When the cleanup run was claimed (unix ms).
    pub cleanup_started_at: Option<u64>,
    /// `--timeout`, ms.
    pub timeout_ms: Option<u64>,
    /// The stop timings (ms), `maxStopMs` included.
    pub stop: StopTimings,
    /// What began the stop (`signal`, `owner`, `timeout`, `reap`, `stop`...), once stopped.
    pub stop_reason: Option<crate::status::StopReason>,
    /// Whether the whole tree was confirmed gone at the end.
    pub tree_gone: Option<bool>,
    /// `--log-max` in bytes (null: the 64 MiB default).
    pub log_max_bytes: Option<u64>,
    /// The readiness options it was started with (repeated by `restart`).
    pub ready: Option<ReadySpec>,
    /// The id of the entry this one replaced (`restart`, `start --replace`).
    pub restart_of: Option<String>,
    /// Where its logs are.
    pub logs: LogPaths,
    /// Identity: boot id, provider and supervisor start times (clock ticks), uid.
    pub boot_id: String,
    /// Identity: the provider's start time in clock ticks after boot.
    pub start_time: Option<u64>,
    /// Identity: the supervisor's start time in clock ticks after boot.
    pub supervisor_start_time: Option<u64>,
    /// Identity: the uid it runs as.
    pub uid: u32,
    /// The tier that keeps the tree: `cgroup`, `subreaper` or `group` (null in entries from
    /// before the tiers existed).
    pub containment: Option<String>,
    /// Why a stronger tier was refused (null in the cgroup tier).
    pub containment_reason: Option<String>,
    /// The tree's cgroup directory and its inode (cgroup tier).
    pub cgroup: Option<String>,
    pub cgroup_inode: Option<u64>,
    /// True when the cgroup could not be removed after the tree was gone (`reap` removes it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup_leftover: Option<bool>,
    /// Usage of a running cgroup-tier entry's cgroup, from [`crate::cgroup::usage`]:
    /// `{cpuMs, memoryBytes, tasks}`, absent controllers null; null otherwise.
    pub usage: Option<crate::cgroup::Usage>,
    /// The live processes (`ps --tree`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tree: Option<Vec<TreeProc>>,
}

impl EntryView {
    /// A failure worth listing after the fact: non-zero exit, killed, timed out, reaped, lost.
    pub fn failed(&self) -> bool {
        self.status.is_failure() || (self.status == Status::Exited && self.exit_code.is_some_and(|c| c != 0))
    }
}

/// The human status line: the recorded text when there is one, else one derived from the status.
pub fn status_text(e: &Entry, status: Status) -> String {
    if status == e.status
        && let Some(t) = &e.status_text
    {
        return t.clone();
    }
    match status {
        Status::Orphaned => "orphaned (the supervisor is gone; the tree is alive: run 'sheepdog reap')".into(),
        Status::Lost if !e.is_finished() && e.cleanup.is_some() && e.cleanup_started_at.is_none() => {
            "lost (the supervisor was killed before it recorded a result; its cleanup is pending: 'sheepdog reap' runs it)"
                .into()
        }
        Status::Lost if !e.is_finished() => "lost (the supervisor is gone and nothing of the tree is alive)".into(),
        Status::Exited => match e.exit_code {
            Some(c) => format!("exited ({c})"),
            None => "exited".into(),
        },
        Status::Killed => match &e.signal {
            Some(s) => format!("killed ({s})"),
            None => "killed".into(),
        },
        Status::TimedOut => "timed out".into(),
        s => s.as_str().into(),
    }
}

/// The view of `e` with its status as the kernel says now (`orphaned`, `lost` derived for
/// entries still marked running), the live tree's ports, and with `tree` its live processes.
/// `census` is taken at most once over many calls (see [`crate::manager::live_status`]).
pub fn entry_view(reg: &Registry, e: &Entry, census: &OnceCell<Census>) -> EntryView {
    let status = crate::manager::live_status(e, census);
    view_with_status(reg, e, status, false)
}

/// [`entry_view`] with its live processes in `tree`.
pub fn entry_view_tree(reg: &Registry, e: &Entry, census: &OnceCell<Census>) -> EntryView {
    let status = crate::manager::live_status(e, census);
    view_with_status(reg, e, status, true)
}

/// The view of `e` with a status already known (no kernel reads for finished entries).
pub fn view_with_status(reg: &Registry, e: &Entry, status: Status, with_tree: bool) -> EntryView {
    let live = if status.is_finished() { Vec::new() } else { crate::manager::live_tree(e) };
    let pids: Vec<Pid> = live.iter().filter_map(|(p, ..)| Pid::new(*p)).collect();
    let ports = crate::ports::listening(&pids);
    let tree = with_tree.then(|| {
        live.iter()
            .map(|(pid, pgid, sid, command)| TreeProc { pid: *pid, pgid: *pgid, sid: *sid, command: command.clone() })
            .collect()
    });
    EntryView {
        id: e.id.clone(),
        name: e.display_name(),
        name_given: e.name.is_some(),
        session_id: e.session_id.clone(),
        status,
        status_text: status_text(e, status),
        exit_code: e.exit_code,
        signal: e.signal.clone(),
        pid: e.pid,
        pgid: e.pgid,
        supervisor_pid: e.supervisor_pid,
        owner_pid: e.owner_pid,
        started_at: e.started_at,
        ended_at: e.ended_at,
        command_preview: e.command_preview.clone(),
        argv: e.argv.clone(),
        cwd: e.cwd.clone(),
        env_keys: env_keys(e),
        ports,
        cleanup: e.cleanup.clone(),
        cleanup_result: e.cleanup_result.clone(),
        cleanup_started_at: e.cleanup_started_at,
        timeout_ms: e.timeout_ms,
        stop: e.stop,
        stop_reason: e.stop_reason.clone(),
        tree_gone: e.tree_gone,
        log_max_bytes: e.log_max_bytes,
        ready: e.ready.clone(),
        restart_of: e.restart_of.clone(),
        logs: LogPaths::of(reg, &e.id),
        boot_id: e.boot_id.clone(),
        start_time: e.start_time,
        supervisor_start_time: e.supervisor_start_time,
        uid: e.uid,
        containment: e.containment.clone(),
        containment_reason: e.containment_reason.clone(),
        cgroup: e.cgroup.clone(),
        cgroup_inode: e.cgroup_inode,
        cgroup_leftover: e.cgroup_leftover,
        usage: if status.is_finished() { None } else { crate::cgroup::usage(e) },
        tree,
    }
}

/// The keys of an entry's `--env` (`K=V` stored), in order.
pub fn env_keys(e: &Entry) -> Vec<String> {
    e.env.iter().map(|kv| kv.split_once('=').map(|(k, _)| k).unwrap_or(kv).to_string()).collect()
}
