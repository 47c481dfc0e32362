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

use crate::entry::{Cleanup, CleanupResult, Entry, ReadySpec, StopTimings};
use crate::inspect::TreeProc;
use crate::logs::{COMBINED_LOG, STDERR_LOG, STDOUT_LOG};
use crate::ready::ReadyOutcome;
use crate::registry::Registry;
use crate::status::Status;
use crate::sys::Pid;
use crate::tree::Census;

/// Log paths of an entry.
#[derive(Clone, Debug, Serialize, PartialEq, Eq, schemars::JsonSchema)]
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

/// The entry view. Times are unix ms, durations ms.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
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
    /// True when that signal dumped core (`WCOREDUMP`; the shell's `(core dumped)`).
    pub core_dumped: bool,
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
    /// The readiness options it was started with (repeated by `restart`): `{port, log, listen,
    /// timeoutMs}`, null without `--ready-*`. (What the wait found is `ready` in a start's
    /// result, [`StartView`].)
    pub ready_config: Option<ReadySpec>,
    /// The id of the entry this one replaced (`restart`, `start --replace`).
    pub restart_of: Option<String>,
    /// Where its logs are.
    pub logs: LogPaths,
    /// Identity: boot id, provider and supervisor start times (clock ticks), uid.
    pub boot_id: String,
    /// Identity: the provider's start time in clock ticks after boot (`/proc/PID/stat` field
    /// 22; not a wall time: `startedAt` is that).
    pub start_time_ticks: Option<u64>,
    /// Identity: the supervisor's start time in clock ticks after boot.
    pub supervisor_start_time_ticks: Option<u64>,
    /// Identity: the uid it runs as.
    pub uid: u32,
    /// Deprecated, schema v1 only: `startTimeTicks` under its old name (gone in v2).
    #[schemars(extend("deprecated" = true))]
    pub start_time: Option<u64>,
    /// Deprecated, schema v1 only: `supervisorStartTimeTicks` under its old name (gone in v2).
    #[schemars(extend("deprecated" = true))]
    pub supervisor_start_time: Option<u64>,
    /// The tier that keeps the tree: `cgroup`, `subreaper` or `group` (null in entries from
    /// before the tiers existed).
    pub containment: Option<String>,
    /// Why a stronger tier was refused (null in the cgroup tier).
    pub containment_reason: Option<String>,
    /// The tree's cgroup directory (cgroup tier).
    pub cgroup: Option<String>,
    /// That directory's inode, checked before anything acts on the path later.
    pub cgroup_inode: Option<u64>,
    /// True when the cgroup could not be removed after the tree was gone (`reap` removes it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup_leftover: Option<bool>,
    /// Usage of a running cgroup-tier entry's cgroup, from [`crate::cgroup::usage`]:
    /// `{cpuMs, memoryBytes, tasks}`, absent controllers null; null otherwise.
    pub usage: Option<crate::cgroup::Usage>,
    /// True when started with `--stdin pipe` (`sheepdog send` writes to it); absent otherwise.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stdin_pipe: bool,
    /// The live processes (`ps --tree`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tree: Option<Vec<TreeProc>>,
}

impl EntryView {
    /// A failure worth listing after the fact: non-zero exit, killed, timed out, reaped, lost.
    pub fn failed(&self) -> bool {
        failed(self.status, self.exit_code)
    }
}

/// [`EntryView::failed`] of an entry with `status` and `exit_code`, without building its view.
fn failed(status: Status, exit_code: Option<i32>) -> bool {
    status.is_failure() || (status == Status::Exited && exit_code.is_some_and(|c| c != 0))
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
        Status::Lost if !e.is_finished() && e.cleanup.is_some() && !e.cleanup_state.is_claimed() => {
            "lost (the supervisor was killed before it recorded a result; its cleanup is pending: 'sheepdog reap' runs it)"
                .into()
        }
        Status::Lost if !e.is_finished() => lost_text(e),
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

// Here, not in ready.rs: the sentence says the entry's status as the views do, and views
// already use ready.rs (the ladder allows no circle).
impl ReadyOutcome {
    /// The one sentence every front end says for this readiness, the CLI, MCP and `top` alike;
    /// what to do next follows it in each front end's own words (its commands or tools).
    /// `label` names the entry (`web (proc_1)`). Shapes: `Ready after 1.2s: listening on port
    /// 3000.`, `Ready after 40ms: <the matching line>`, `web (proc_1) exited (3) before it was
    /// ready.`, `web (proc_1) is not ready yet after 30.0s; it keeps running.`
    pub fn sentence(&self, label: &str) -> String {
        use crate::duration::elapsed;
        match self {
            ReadyOutcome::Ready { after_ms, port: Some(p), .. } => {
                format!("Ready after {}: listening on port {p}.", elapsed(*after_ms))
            }
            ReadyOutcome::Ready { after_ms, matched: Some(line), .. } => {
                format!("Ready after {}: {line}", elapsed(*after_ms))
            }
            ReadyOutcome::Ready { after_ms, .. } => format!("Ready after {}.", elapsed(*after_ms)),
            ReadyOutcome::Exited { entry, .. } => {
                format!("{label} {} before it was ready.", status_text(entry, entry.status))
            }
            ReadyOutcome::TimedOut { after_ms } => {
                format!("{label} is not ready yet after {}; it keeps running.", elapsed(*after_ms))
            }
        }
    }
}

/// The view of `e` with its status as the kernel says now (`orphaned`, `lost` derived for
/// entries still marked running), the live tree's ports, and with `tree` its live processes.
/// `census` is taken at most once over many calls (see [`crate::inspect::live_status`]).
pub fn entry_view(reg: &Registry, e: &Entry, census: &OnceCell<Census>) -> EntryView {
    let (e, status) = current(reg, e, census);
    view_with_status(reg, &e, status, false)
}

/// [`entry_view`] with its live processes in `tree`.
pub fn entry_view_tree(reg: &Registry, e: &Entry, census: &OnceCell<Census>) -> EntryView {
    let (e, status) = current(reg, e, census);
    view_with_status(reg, &e, status, true)
}

/// `e` and its status as the kernel says now ([`crate::inspect::live_status`]). An entry read
/// while running whose supervisor is gone by the time of the look is read again: a supervisor
/// records the end and then exits, so a command that ended in between shows as it ended
/// (`exited (2)`), not as `lost`.
pub fn current<'a>(reg: &Registry, e: &'a Entry, census: &OnceCell<Census>) -> (std::borrow::Cow<'a, Entry>, Status) {
    let status = crate::inspect::live_status(e, census);
    if !e.is_finished()
        && matches!(status, Status::Lost | Status::Orphaned)
        && let Ok(x) = reg.read(&e.id)
        && x.is_finished()
    {
        let status = x.status;
        return (std::borrow::Cow::Owned(x), status);
    }
    (std::borrow::Cow::Borrowed(e), status)
}

/// True if `start` warned about this entry's command (`top`'s marker): the warnings recorded in
/// the entry when there are any, else the same check `start` makes, on the recorded argv.
pub fn started_with_warnings(e: &Entry) -> bool {
    if let Some(w) = e.extra.get("warnings").and_then(|w| w.as_array()) {
        return !w.is_empty();
    }
    let argv: Vec<std::ffi::OsString> = e.argv.iter().map(|a| a.as_os_str().to_os_string()).collect();
    !crate::nudge::check(&argv, e.cleanup.is_some()).is_empty()
}

/// What a start shows (`start --json`, each of `restart --json`): the new entry's view, then
/// `ready`, the readiness wait's outcome (null when none was asked for; the options are the
/// view's `readyConfig`), then the nudges it earned as `warnings`.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct StartView {
    #[serde(flatten)]
    pub entry: EntryView,
    /// How the readiness wait went: `{ok, afterMs, matched, port}` (+ `reason`, `output` when
    /// not ok); null without `--ready-*`.
    pub ready: Option<crate::ready::ReadyReport>,
    /// Advice about a command that hides work (`{kind, message, matched}`).
    pub warnings: Vec<Nudge>,
}

/// What a stop shows per entry (`stop --json`): the entry's view after the stop (its
/// `treeGone` what this stop found), then whether it had ended before, `ok` (the tree is gone
/// and no cleanup failed) and the cleanup's failure line (null when it did not fail).
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StopView {
    #[serde(flatten)]
    pub entry: EntryView,
    /// The entry had ended before this stop (not an error; a pending cleanup still ran).
    pub already_finished: bool,
    /// The tree is gone and no cleanup failed.
    pub ok: bool,
    /// The cleanup's failure line (`Cleanup command failed with exit code 1.`), else null.
    pub cleanup_error: Option<String>,
    /// Exactly what `sheepdog stop` prints for this entry, one line each: `Stopped NAME (ID).`
    /// (or `NAME (ID) had already exited (3).`, `Could not stop NAME (ID).`), then why processes
    /// could not be signalled, then the cleanup's failure line.
    pub lines: Vec<String>,
    /// Why this stop's result is not in the registry (a full disk, a read-only state dir);
    /// absent when it is. `ok` is false then, and the entry's fields are what the stop knows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_recorded: Option<String>,
}

impl StopView {
    /// The view of a stop that found the tree gone or not (`tree_gone`), with the stop's
    /// verdict `ok` as the outcome decided it (`manager::StopOutcome::view` builds it).
    pub fn new(
        mut entry: EntryView,
        already_finished: bool,
        tree_gone: bool,
        ok: bool,
        cleanup_error: Option<String>,
        lines: Vec<String>,
    ) -> StopView {
        entry.tree_gone = Some(tree_gone);
        StopView { entry, already_finished, ok, cleanup_error, lines, not_recorded: None }
    }

    /// The same view, for a stop whose result could not be written (`why`).
    pub fn not_recorded(mut self, why: String) -> StopView {
        self.ok = false;
        self.not_recorded = Some(why);
        self
    }
}

/// What a wait shows per entry (`wait --json`): the entry's view, whether it finished, the
/// status `wait` exits with for it (null: unknown), and its last lines of output.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaitView {
    #[serde(flatten)]
    pub entry: EntryView,
    /// It finished (a result is recorded).
    pub finished: bool,
    /// The status `wait` exits with for it (its exit code, 128 + N for signal N, 124 for its
    /// `--timeout`); null when unknown.
    pub exit_status: Option<i32>,
    /// Its last lines of output (`[out] `/`[err] ` tagged), at most 20.
    pub last_lines: Vec<String>,
}

/// Which entries a listing shows (`sheepdog ps`, the MCP `process_list` tool).
#[derive(Clone, Debug, Default)]
pub struct ListQuery {
    /// Only this session's entries; `None`: every session.
    pub session: Option<String>,
    /// Only entries with this status, finished or not, of any age.
    pub status: Option<Status>,
    /// Finished entries too, in registry order.
    pub all: bool,
    /// Without `all` or `status`: after the live entries, the finished ones that failed within
    /// this many ms (`ps` shows the last hour's); `None`: no finished entry.
    pub recent_failures_ms: Option<u64>,
    /// Each row with its live processes (`tree`).
    pub tree: bool,
}

/// What a listing found: the rows, how many matching entries it left out (finished, not
/// asked for), and the entries set aside as unreadable (for the caller to report).
#[derive(Debug)]
pub struct Listing {
    pub rows: Vec<EntryView>,
    pub hidden: usize,
    pub aside: Vec<crate::registry::SetAside>,
    /// Every entry read, shown or not: a command that exits next may `std::mem::forget` them
    /// (`ps`: freeing 10,000 entries' strings one by one is a tenth of its time).
    pub entries: Vec<Entry>,
}

/// The rows of a listing, oldest first: with `status` or `all` every match in order; else the
/// live entries, then the recent failures. The kernel is asked once for all of them (one
/// census, see [`crate::inspect::live_status`]).
pub fn list(reg: &Registry, q: &ListQuery) -> Listing {
    let (entries, aside) = reg.list();
    let census = OnceCell::new();
    let now = crate::files::now_ms();
    let (mut rows, mut failed, mut hidden) = (Vec::new(), Vec::new(), 0usize);
    for e in entries.iter().filter(|e| q.session.as_ref().is_none_or(|s| e.session_id.as_ref() == Some(s))) {
        let s = crate::inspect::live_status(e, &census);
        if let Some(want) = q.status {
            if s == want {
                rows.push(view_with_status(reg, e, s, q.tree));
            }
            continue;
        }
        if q.all || s.is_live() {
            rows.push(view_with_status(reg, e, s, q.tree));
            continue;
        }
        // Decided on the entry: a hidden one's view is never built (10,000 of them cost `ps`
        // tens of ms).
        let recent = q.recent_failures_ms.is_some_and(|ms| now.saturating_sub(e.ended_at.unwrap_or(e.started_at)) < ms);
        if recent && self::failed(s, e.exit_code) {
            failed.push(view_with_status(reg, e, s, false));
        } else {
            hidden += 1;
        }
    }
    rows.extend(failed);
    Listing { rows, hidden, aside, entries }
}

/// The view of `e` with a status already known (no kernel reads for finished entries).
pub fn view_with_status(reg: &Registry, e: &Entry, status: Status, with_tree: bool) -> EntryView {
    let live = if status.is_finished() { Vec::new() } else { crate::inspect::live_tree(e) };
    let pids: Vec<Pid> = live.iter().filter_map(|p| Pid::new(p.pid)).collect();
    let ports = crate::ports::listening(&pids);
    let tree = with_tree.then_some(live);
    EntryView {
        id: e.id.clone(),
        name: e.display_name(),
        name_given: e.name.is_some(),
        session_id: e.session_id.clone(),
        status,
        status_text: status_text(e, status),
        exit_code: e.exit_code,
        signal: e.signal.as_ref().map(|s| s.name()),
        core_dumped: e.core_dumped,
        pid: e.pid(),
        pgid: e.pgid,
        supervisor_pid: e.supervisor.map(|s| s.pid),
        owner_pid: e.owner.map(|o| o.pid),
        started_at: e.started_at,
        ended_at: e.ended_at,
        command_preview: e.command_preview.clone(),
        argv: e.argv.iter().map(|a| a.escaped()).collect(),
        cwd: e.cwd.escaped(),
        env_keys: env_keys(e),
        ports,
        cleanup: e.cleanup.clone(),
        cleanup_result: e.cleanup_state.result().cloned(),
        cleanup_started_at: e.cleanup_state.claimed_at(),
        timeout_ms: e.timeout_ms,
        // A `stop --term-grace` under way shows its one-off grace, as it did when it was
        // recorded in the entry's own place.
        stop: e.stop_in_effect(),
        stop_reason: e.stop_reason.clone(),
        tree_gone: e.tree_gone,
        log_max_bytes: e.log_max_bytes,
        ready_config: e.ready.clone(),
        restart_of: e.restart_of.clone(),
        logs: LogPaths::of(reg, &e.id),
        boot_id: e.boot_id.clone(),
        start_time_ticks: e.provider.and_then(|p| p.start_time),
        supervisor_start_time_ticks: e.supervisor.and_then(|s| s.start_time),
        uid: e.uid,
        start_time: e.provider.and_then(|p| p.start_time),
        supervisor_start_time: e.supervisor.and_then(|s| s.start_time),
        containment: e.containment.map(|t| t.name().to_string()),
        containment_reason: e.containment_reason.clone(),
        cgroup: e.cgroup.clone(),
        cgroup_inode: e.cgroup_inode,
        cgroup_leftover: e.cgroup_leftover,
        usage: if status.is_finished() { None } else { crate::cgroup::usage(e) },
        stdin_pipe: e.stdin_pipe,
        tree,
    }
}

/// The keys of an entry's `--env` (`K=V` stored), in order.
pub fn env_keys(e: &Entry) -> Vec<String> {
    e.env
        .iter()
        .map(|kv| crate::entry::escape_bytes(std::os::unix::ffi::OsStrExt::as_bytes(kv.split_env().0.as_os_str())))
        .collect()
}

/// Display width of `s` in terminal columns (`unicode-width`: a CJK character or an emoji takes
/// two, a combining mark none).
pub fn display_width(s: &str) -> usize {
    unicode_width::UnicodeWidthStr::width(s)
}

/// Cuts or pads `s` to exactly `w` terminal columns (by display width, so a table stays aligned
/// whatever a name holds); an ellipsis marks a cut. `right`: right-aligned.
pub fn fit_width(s: &str, w: usize, right: bool) -> String {
    use unicode_width::UnicodeWidthChar;
    let n = display_width(s);
    if n > w {
        if w == 0 {
            return String::new();
        }
        let mut out = String::new();
        let mut used = 0;
        for c in s.chars() {
            let cw = c.width().unwrap_or(0);
            if used + cw > w - 1 {
                break;
            }
            out.push(c);
            used += cw;
        }
        out.push('…');
        return out + &" ".repeat(w - 1 - used);
    }
    let pad = " ".repeat(w - n);
    if right { pad + s } else { s.to_string() + &pad }
}

/// A status line cut to `w` columns that keeps what to do: a status whose text ends in a hint
/// (`orphaned (...: run 'sheepdog reap')`) becomes `orphaned: run sheepdog reap` when the whole
/// does not fit; else [`fit_width`].
pub fn fit_status(text: &str, w: usize) -> String {
    if display_width(text) > w && text.contains("sheepdog reap") {
        let head = text.split(" (").next().unwrap_or(text);
        let short = format!("{head}: run sheepdog reap");
        if display_width(&short) <= w {
            return fit_width(&short, w, false);
        }
    }
    fit_width(text, w, false)
}

// ---------------------------------------------------------------------------------------------
// The documents: what each `--json` prints, as one type each (the schemas in `schema/` are
// generated from these, see `crate::schema`).

pub use crate::status::{SCHEMA_VERSION, Version};

/// `start --json`: the new entry's [`StartView`].
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct StartDoc {
    pub v: Version,
    #[serde(flatten)]
    pub start: StartView,
}

/// `restart --json`: one [`StartView`] per restarted entry, each with `restartOf` the old id.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct RestartDoc {
    pub v: Version,
    /// The new entries.
    pub restarted: Vec<StartView>,
}

/// `ps --json`: the listed entries and how many finished ones were left out.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct PsDoc<'a> {
    pub v: Version,
    /// Running entries, then recent failures (`--all`: every entry; `--status`: that status).
    pub entries: &'a [EntryView],
    /// Finished entries not listed.
    pub hidden: usize,
}

/// `update --json`: the entry's view after the change.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct EntryDoc {
    pub v: Version,
    #[serde(flatten)]
    pub entry: EntryView,
}

/// `stop --json`: one [`StopView`] per entry stopped.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct StopDoc {
    pub v: Version,
    pub stopped: Vec<StopView>,
}

/// `wait --json`: one [`WaitView`] per entry, and the status `wait` exits with.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaitDoc {
    pub v: Version,
    pub waited: Vec<WaitView>,
    /// What `sheepdog wait` exits with: the (last, or with `--any` first) process's code, 128 + N
    /// for a signal, 124 for a timeout, 125 when unknown.
    pub exit_status: i32,
    /// Deprecated, schema v1 only: `exitStatus` under its old name (gone in v2).
    #[schemars(extend("deprecated" = true))]
    pub exit_code: i32,
}

/// `clear --json`: the last views of the removed entries.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct ClearDoc {
    pub v: Version,
    pub cleared: Vec<EntryView>,
}

/// `send --json`: what one send did, `{"v": 1, "id", "bytes", "eof"}`.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SendDoc {
    pub v: Version,
    /// The entry's id (`proc_N`).
    pub id: String,
    /// Bytes written to its stdin (all of the input: a send that cannot write it all fails).
    #[schemars(range(min = 0))]
    pub bytes: usize,
    /// Its stdin was closed after the write (`--eof`): the command reads end of input.
    pub eof: bool,
}

/// One thing `reap` did (or, with `--dry-run`, would do).
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReapAction {
    pub id: String,
    pub name: Option<String>,
    /// `reaped` (a live orphaned tree was stopped), `lost` (nothing alive, no result) or
    /// `cleanup` (a finished entry's pending cleanup ran: its owner is gone or its turn timeout
    /// passed, and no supervisor was left to notice).
    pub action: crate::status::ReapKind,
    /// Processes that received SIGTERM.
    pub signalled: usize,
    pub tree_gone: bool,
    pub reason: String,
    /// The cleanup's failure line when it ran and failed (`Cleanup command failed with exit
    /// code 1.`), else null.
    pub cleanup_error: Option<String>,
    /// Why the result could not be written to the registry (a full disk, a read-only state
    /// dir), else null: the action happened (or, for `lost`, is true) but nothing says so on
    /// disk. `reap` exits 74 then. Always null with `--dry-run`.
    pub not_recorded: Option<String>,
    /// When the stop did not end the tree (`treeGone` false): who is still alive, `pid 4242
    /// (sleep) is still alive` ([`crate::tree::left_line`]); else null. `reap` exits 124 then.
    pub left: Option<String>,
}

/// A leftover cgroup that `reap` killed but could not empty within 2 s (a member frozen by a
/// freezer, or in D state): `reap` exits 124 then.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CgroupLeft {
    /// The cgroup's directory.
    pub path: String,
    /// The pids listed in it when `reap` gave up.
    pub pids: Vec<i32>,
    /// Who is still alive, as [`ReapAction::left`] says it.
    pub left: String,
}

/// One thing `reap` did, with the entry's view after it (null when the entry is gone).
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct ReapView {
    #[serde(flatten)]
    pub action: ReapAction,
    pub entry: Option<EntryView>,
}

/// `reap --json`.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReapDoc {
    pub v: Version,
    /// `--dry-run`: nothing was signalled or recorded.
    pub dry_run: bool,
    pub actions: Vec<ReapView>,
    /// Leftover cgroups killed but still populated ([`CgroupLeft`]); empty when every one
    /// was emptied, and always with `--dry-run`.
    pub cgroups_left: Vec<CgroupLeft>,
}

/// `logs --json`: one read of a log.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct LogsDoc {
    pub v: Version,
    #[serde(flatten)]
    pub chunk: crate::logread::LogChunk,
}

/// `doctor --json`.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct DoctorDoc {
    pub v: Version,
    #[serde(flatten)]
    pub doctor: crate::cgroup::Doctor,
}

/// What failed: printed alone, instead of the result, by every `--json` command that fails.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    /// The `sheepdog: ...` line without its prefix.
    pub message: String,
    /// sheepdog's own exit status (125 bad input, 1, 74, 124, ...; docs/reference.md's tables).
    pub exit_status: i32,
    /// Deprecated, schema v1 only: `exitStatus` under its old name (gone in v2).
    #[schemars(extend("deprecated" = true))]
    pub exit_code: i32,
}

/// The error document: `{"v": 1, "error": {"message", "exitStatus"}}`.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct ErrorDoc {
    pub v: Version,
    pub error: ErrorBody,
}

impl ErrorDoc {
    /// The document of a failure with `message` and exit status `status`.
    pub fn new(message: &str, status: i32) -> ErrorDoc {
        ErrorDoc {
            v: Version,
            error: ErrorBody { message: message.to_string(), exit_status: status, exit_code: status },
        }
    }
}

/// The text of an unfinished entry whose supervisor is gone and whose tree is not alive: with
/// the stop that had begun, when one had (`stopReason` recorded at its start).
pub fn lost_text(e: &Entry) -> String {
    match e.stop_reason.as_ref().and_then(|r| serde_json::to_value(r).ok()) {
        Some(serde_json::Value::String(r)) => format!(
            "lost (a stop ({r}) began, and its supervisor and keeper were killed before it ended; nothing of the tree is alive)"
        ),
        _ => "lost (the supervisor is gone and nothing of the tree is alive)".into(),
    }
}

#[cfg(test)]
mod tests {
    use crate::entry::{Cleanup, CleanupState, Entry, ProcRef};
    use crate::registry::Registry;
    use crate::status::Status;

    use super::{StartView, StopView, WaitView, lost_text, view_with_status};
    use crate::entry::CleanupResult;
    use crate::status::{CleanupRunner, StopReason};

    #[test]
    fn a_lost_entry_says_which_stop_had_begun() {
        let mut e = Entry::default();
        assert_eq!(lost_text(&e), "lost (the supervisor is gone and nothing of the tree is alive)");
        e.stop_reason = Some(StopReason::SupervisorKilled);
        assert_eq!(
            lost_text(&e),
            "lost (a stop (supervisorKilled) began, and its supervisor and keeper were killed before it ended; nothing of the tree is alive)"
        );
    }

    /// The whole `--json` / MCP document of a finished entry, field by field: a snapshot. A
    /// field renamed, dropped or added shows here first; hosts script against these names.
    #[test]
    fn the_entry_view_and_the_result_views_of_a_finished_entry_are_these_documents() {
        let dir = tempfile::tempdir().unwrap();
        let reg = Registry::open(Some(dir.path().join("state"))).unwrap();
        let e = Entry {
            id: "proc_7".into(),
            name: None,
            session_id: Some("turn-1".into()),
            status: Status::Stopped,
            status_text: Some("stopped (owner exited)".into()),
            exit_code: None,
            signal: Some("SIGTERM".into()),
            provider: Some(ProcRef::new(4242, Some(77))),
            pgid: Some(4242),
            supervisor: Some(ProcRef::new(4241, Some(76))),
            owner: Some(ProcRef::new(100, None)),
            started_at: 1_800_000_000_000,
            ended_at: Some(1_800_000_005_000),
            command_preview: "npm run dev".into(),
            argv: vec!["npm".into(), "run".into(), "dev".into()],
            cwd: "/work/app".into(),
            env: vec!["PORT=3000".into()],
            cleanup: Some(Cleanup { command: "docker rm -f web".into(), timeout_ms: 10_000 }),
            cleanup_state: CleanupState::Done {
                at_ms: Some(1_800_000_004_000),
                runner: None,
                child: None,
                result: CleanupResult {
                    command: "docker rm -f web".into(),
                    exit_code: Some(0),
                    duration_ms: 120,
                    output: vec!["web".into()],
                    ran_by: CleanupRunner::Supervisor,
                    ..CleanupResult::default()
                },
            },
            timeout_ms: None,
            stop: crate::stop::StopPolicy::default().timings(),
            stop_reason: Some(StopReason::Owner),
            tree_gone: Some(true),
            boot_id: "b00t".into(),
            uid: 1000,
            containment: Some("subreaper".into()),
            containment_reason: Some("no writable cgroup v2".into()),
            ..Entry::default()
        };
        let v = serde_json::to_value(view_with_status(&reg, &e, e.status, false)).unwrap();
        let logs = |f: &str| reg.file("proc_7", f).display().to_string();
        let want = serde_json::json!({
            "id": "proc_7", "name": "npm", "nameGiven": false, "sessionId": "turn-1",
            "status": "stopped", "statusText": "stopped (owner exited)",
            "exitCode": null, "signal": "SIGTERM", "coreDumped": false,
            "pid": 4242, "pgid": 4242, "supervisorPid": 4241, "ownerPid": 100,
            "startedAt": 1_800_000_000_000u64, "endedAt": 1_800_000_005_000u64,
            "commandPreview": "npm run dev", "argv": ["npm", "run", "dev"], "cwd": "/work/app",
            "envKeys": ["PORT"], "ports": [],
            "cleanup": {"command": "docker rm -f web", "timeoutMs": 10_000},
            "cleanupResult": {
                "command": "docker rm -f web", "exitCode": 0, "signal": null, "timedOut": false,
                "durationMs": 120, "output": ["web"], "ranBy": "supervisor"
            },
            "cleanupStartedAt": 1_800_000_004_000u64, "timeoutMs": null,
            "stop": {"stdinGraceMs": 1000, "termGraceMs": 3000, "killWaitMs": 1500, "maxStopMs": 5500},
            "stopReason": "owner", "treeGone": true, "logMaxBytes": null, "readyConfig": null,
            "restartOf": null,
            "logs": {"stdout": logs("stdout.log"), "stderr": logs("stderr.log"), "combined": logs("combined.log")},
            "bootId": "b00t", "startTimeTicks": 77, "supervisorStartTimeTicks": 76, "uid": 1000,
            // The v1 names of the two, deprecated, kept for hosts that read them (gone in v2).
            "startTime": 77, "supervisorStartTime": 76,
            "containment": "subreaper", "containmentReason": "no writable cgroup v2",
            "cgroup": null, "cgroupInode": null, "usage": null
        });
        assert_eq!(v, want, "got {}", serde_json::to_string_pretty(&v).unwrap());

        // The result views: the entry's fields first, then their own, in this order.
        let entry = view_with_status(&reg, &e, e.status, false);
        let tail = |v: serde_json::Value, n: usize| -> Vec<(String, serde_json::Value)> {
            let m = v.as_object().unwrap();
            assert_eq!(m.len(), want.as_object().unwrap().len() + n);
            m.iter().skip(m.len() - n).map(|(k, v)| (k.clone(), v.clone())).collect()
        };
        let lines = vec!["Could not stop web (proc_7).".to_string()];
        let stop = serde_json::to_value(StopView::new(entry.clone(), true, false, false, None, lines)).unwrap();
        assert_eq!(stop["treeGone"], false, "what the stop found, in the entry's place");
        let got = tail(stop, 4);
        assert_eq!(
            got,
            [
                ("alreadyFinished".into(), serde_json::json!(true)),
                ("ok".into(), serde_json::json!(false)),
                ("cleanupError".into(), serde_json::Value::Null),
                ("lines".into(), serde_json::json!(["Could not stop web (proc_7)."])),
            ]
        );
        let start =
            serde_json::to_value(StartView { entry: entry.clone(), ready: None, warnings: Vec::new() }).unwrap();
        assert_eq!(start["readyConfig"], serde_json::Value::Null, "the options, under their own name");
        let got = tail(start, 2);
        assert_eq!(
            got,
            [("ready".into(), serde_json::Value::Null), ("warnings".into(), serde_json::json!([]))],
            "the readiness report, a name of its own"
        );
        let wait = WaitView { entry, finished: true, exit_status: Some(143), last_lines: vec!["bye".into()] };
        let got = tail(serde_json::to_value(wait).unwrap(), 3);
        assert_eq!(
            got,
            [
                ("finished".into(), serde_json::json!(true)),
                ("exitStatus".into(), serde_json::json!(143)),
                ("lastLines".into(), serde_json::json!(["bye"]))
            ]
        );
    }
}
