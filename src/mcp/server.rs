//! The tools. Each has one typed argument struct (camelCase JSON; doc comments become the
//! schema's descriptions) and one typed result struct (its `outputSchema`, see
//! [`crate::schema`]), and calls one library operation; this file only checks input, calls,
//! and renders.
//!
//! Written for what the model reads. Claude Code and Codex give the model only
//! `structuredContent` when a result has it, so the structured result is the whole answer:
//! the readiness outcome, what to call next (`next`), the news (`finished`), and compact entry
//! views ([`Proc`]: the internal identity and timing fields only with `verbose: true`). The one
//! text block says the same, for clients that show text. Every reply is bounded: news lines
//! are cut at [`LINE_MAX`] bytes, news at [`NEWS_MAX`], the whole result at [`REPLY_MAX`] (past
//! that, `truncated` says what was left out and how to get it); `process_logs` keeps its own
//! `maxBytes`.
//!
//! Bad input is a tool error (`isError`) with one sentence that names the field, never a
//! protocol error: arguments are deserialized here, not by the framework.
//!
//! Library calls block (stops wait seconds), so each runs on tokio's blocking pool.

use std::cell::OnceCell;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, JsonObject, ServerCapabilities, ServerConfig};
use rmcp::{ErrorData, ServerHandler, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Value, json};
use sheepdog::entry::ReadySpec;
use sheepdog::entry::{Cleanup, Entry};
use sheepdog::inspect;
use sheepdog::logread::{self, Cursor, LogQuery, LogStream};
use sheepdog::manager::{self, StartRequest, UpdateRequest, Waited};
use sheepdog::os::Pid;
use sheepdog::ready::{DEFAULT_READY_TIMEOUT_MS, ReadyOutcome};
use sheepdog::registry::Registry;
use sheepdog::status::Status;
use sheepdog::stop::StopPolicy;
use sheepdog::view::{EntryView, entry_view, view_with_status};

use crate::news::{self, Finished};
use crate::schema::{input, output};

/// What every tool call needs: the registry, the agent that owns what is started, and the
/// default session derived from it.
pub struct Ctx {
    pub reg: Registry,
    pub owner: Option<Pid>,
    pub session: String,
}

static MUTATIONS: AtomicUsize = AtomicUsize::new(0);

/// Tool calls that change processes (start, stop, restart, update, clear, write) still running.
pub fn mutations_in_flight() -> usize {
    MUTATIONS.load(Ordering::SeqCst)
}

struct Mutation;

impl Mutation {
    fn begin() -> Mutation {
        MUTATIONS.fetch_add(1, Ordering::SeqCst);
        Mutation
    }
}

impl Drop for Mutation {
    fn drop(&mut self) {
        MUTATIONS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Supervisors this server started (each `process_start` and `process_restart` makes one, as
/// a child of the server): reaped once they exit, so none stays a zombie for as long as the
/// agent's session lasts.
static SUPERVISORS: Mutex<Vec<Pid>> = Mutex::new(Vec::new());

fn adopt_supervisor(e: &Entry) {
    if let (Some(pid), Ok(mut list)) = (e.supervisor_pid.and_then(Pid::new), SUPERVISORS.lock()) {
        list.push(pid);
    }
}

/// Reaps the supervisors of [`SUPERVISORS`] that have exited (never blocks; only those pids,
/// so no other child's status is taken from whoever waits for it).
pub fn reap_supervisors() {
    let Ok(mut list) = SUPERVISORS.lock() else { return };
    // Keep those still running; a reaped one, or one that is not our child (ECHILD), goes.
    list.retain(|pid| matches!(sheepdog::os::process::reap(*pid, false), Ok(None)));
}

/// Default timeout of a cleanup command: 10 000 ms (as `sheepdog start --cleanup`).
const CLEANUP_TIMEOUT_MS: u64 = manager::CLEANUP_TIMEOUT_MS;
/// The longest any wait inside one tool call lasts: 45 000 ms, under the 60 s call timeout
/// common among clients, so no call outlives its client's patience.
pub const WAIT_CAP_MS: u64 = 45_000;
/// The most bytes of one line of output a result carries: 512 (a 3 MB line is cut and marked,
/// `… [N more bytes]`).
pub const LINE_MAX: usize = 512;
/// The most bytes of news (`finished`) in one reply: 4096; the rest waits for the next reply
/// (`finishedOmitted` says how many).
pub const NEWS_MAX: usize = 4096;
/// The most bytes of one result (its `structuredContent` JSON, and its text block): 16 384,
/// what Claude Code shows the model in full. Past it, `truncated`.
pub const REPLY_MAX: usize = 16 * 1024;
/// Lines of output a wait or start result carries per process: the last 10.
const RESULT_LINES: usize = 10;
/// The most characters of a command a compact view shows: 80.
const COMMAND_MAX: usize = 80;

/// The instructions sent at initialization: when to use this server.
pub const INSTRUCTIONS: &str = "sheepdog runs background processes safely. Anything slow or that does \
not exit by itself (dev servers, watchers, long builds and test runs, tunnels, containers) goes through \
process_start, never `&`, `nohup`, `setsid` or `disown` in a shell tool: a process started here is \
stopped with its whole tree (and its cleanup command) when you stop it or when this agent exits, its \
output is kept (process_logs, with a cursor), and its id stays valid when the server restarts. Give \
process_start a `ready` check (a port, a log pattern) instead of sleeping, and use process_wait rather \
than `sleep` to wait for a process to finish. If a command starts work outside its own tree \
(`docker run -d`, `ssh -f`), give it a `cleanup` command. A command that asks questions can be started \
with `stdin: \"pipe\"` and answered with process_write. Every result lists in `finished` the \
processes of this session that ended since the last reply, and in `next` what to call next.";

// ---------------------------------------------------------------------------------------------
// Arguments

/// `cleanup` at start or update: a command that undoes work the process started outside its own
/// tree.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CleanupArg {
    /// Run with `sh -c` after every stop (stop, owner death, timeout), in the process's cwd and
    /// environment, at most once; e.g. `docker rm -f web`.
    pub command: String,
    /// Bound on the cleanup in milliseconds (default 10000); then its own tree is stopped.
    pub timeout_ms: Option<u64>,
}

/// `ready` at start: wait until the process is ready before returning.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReadyArg {
    /// Ready when this TCP port is listening (on this machine).
    pub port: Option<u16>,
    /// Ready when a line of its output matches this regular expression.
    pub log_pattern: Option<String>,
    /// Ready when any process of its tree listens on any TCP port.
    pub listen: Option<bool>,
    /// How long to wait in milliseconds (default 30000, at most 45000); the process keeps
    /// running if it is not ready by then.
    pub timeout_ms: Option<u64>,
}

/// Arguments of `process_start`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StartArgs {
    /// The command as a shell string, run with `sh -c`. Give this or `argv`, not both.
    pub command: Option<String>,
    /// The program and its arguments, run without a shell. Give this or `command`, not both.
    pub argv: Option<Vec<String>>,
    /// A name, unique among running processes, usable wherever an id is (not of the form proc_N).
    pub name: Option<String>,
    /// Working directory (default: the server's, normally the project's).
    pub cwd: Option<String>,
    /// Extra environment variables.
    pub env: Option<BTreeMap<String, String>>,
    /// The session it belongs to (default: this agent's); `process_stop` with `session` stops a
    /// whole session.
    pub session: Option<String>,
    /// Stop it (whole tree, then cleanup) after this many milliseconds.
    pub timeout_ms: Option<u64>,
    /// A command that undoes what it starts outside its own tree (a container, a daemon).
    pub cleanup: Option<CleanupArg>,
    /// Wait until it is ready (a port listens, a log line matches) before returning.
    pub ready: Option<ReadyArg>,
    /// Keep it running after this agent exits (no owner). Default false: it is stopped with its
    /// tree and cleanup when the agent exits.
    pub keep: Option<bool>,
    /// Cap per log file in bytes (default 64 MiB; at least 1024); at the cap it rotates once.
    pub log_max: Option<u64>,
    /// Its stdin: `null` (/dev/null, the default) or `pipe`, a pipe that `process_write`
    /// writes to (to answer a prompt, feed a REPL).
    pub stdin: Option<StdinArg>,
    /// Show every field of the entry (identity, timings, log paths) in `details`.
    pub verbose: Option<bool>,
}

/// `stdin` at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum StdinArg {
    /// /dev/null.
    Null,
    /// A pipe held by its supervisor; `process_write` writes to it.
    Pipe,
}

/// Arguments of `process_list`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ListArgs {
    /// Only this session's processes (default: this agent's session; `*` for every session).
    pub session: Option<String>,
    /// Finished processes too (default: only running, starting and orphaned ones).
    pub all: Option<bool>,
    /// Only processes with this status: running, starting, orphaned, exited, killed, stopped,
    /// timedOut, reaped, lost.
    pub status: Option<String>,
    /// Show every field of each entry (identity, timings, log paths) in `details`.
    pub verbose: Option<bool>,
}

/// Arguments of `process_logs`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LogsArgs {
    /// Id (proc_N) or name.
    pub id: String,
    /// `out` (stdout), `err` (stderr) or `all` (both, interleaved, with sheepdog's markers;
    /// the default).
    pub stream: Option<String>,
    /// Only the last N lines.
    pub tail: Option<usize>,
    /// Only lines matching this regular expression.
    pub grep: Option<String>,
    /// Continue after the previous call's `cursor`: only new output, none twice, none lost
    /// across a log rotation.
    pub cursor: Option<String>,
    /// At most this many bytes of text (default 16384); `truncated` says when more is waiting.
    /// Whole lines only: an unterminated last line comes once it ends (or the process does).
    pub max_bytes: Option<usize>,
}

/// Arguments of `process_wait`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WaitArgs {
    /// Ids (proc_N) or names to wait for. Default: this agent's running processes that were
    /// started without `ready` (builds, tests: those expected to end), not its servers.
    pub ids: Option<Vec<String>>,
    /// Or the running processes of this session started without `ready`.
    pub session: Option<String>,
    /// Return when any one has finished (default: when all have).
    pub any: Option<bool>,
    /// How long to wait in milliseconds (default and at most 45000). Never kills on timeout.
    pub timeout_ms: Option<u64>,
    /// Show every field of each entry in `details`.
    pub verbose: Option<bool>,
}

/// Arguments of `process_stop`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StopArgs {
    /// Id (proc_N) or name of one process.
    pub id: Option<String>,
    /// Name of one process (same as `id` with a name).
    pub name: Option<String>,
    /// Every running process of this session.
    pub session: Option<String>,
    /// Every running process of this agent's session.
    pub all: Option<bool>,
}

/// Arguments of `process_restart`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RestartArgs {
    /// Id (proc_N) or name.
    pub id: Option<String>,
    /// Name (same as `id` with a name).
    pub name: Option<String>,
}

/// `Some(None)` for an explicit `null`, `None` when absent.
fn explicit_null<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// `cleanup` in `process_update`: a cleanup, or `null` to remove it (the one `null` an
/// argument takes, as a `oneOf`).
fn cleanup_or_null(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let cleanup = g.subschema_for::<CleanupArg>();
    schemars::json_schema!({
        "description": "Attach or replace the cleanup command (an object), or null to remove it.",
        "oneOf": [cleanup, {"type": "null"}]
    })
}

/// Arguments of `process_update`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateArgs {
    /// Id (proc_N) or name.
    pub id: String,
    /// Attach or replace the cleanup command, or `null` to remove it.
    #[serde(default, deserialize_with = "explicit_null")]
    #[schemars(schema_with = "cleanup_or_null")]
    pub cleanup: Option<Option<CleanupArg>>,
    /// Rename (unique among running processes).
    pub name: Option<String>,
}

/// Arguments of `process_clear`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClearArgs {
    /// Ids (proc_N) or names of finished processes to remove with their logs.
    pub ids: Option<Vec<String>>,
    /// Or every finished process of this agent's session.
    pub finished: Option<bool>,
    /// Also remove one whose cleanup is pending (it never ran: `process_stop` would run it),
    /// dropping that cleanup. Never one that runs, or whose cleanup is running.
    pub force: Option<bool>,
}

/// Arguments of `process_write`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WriteArgs {
    /// Id (proc_N) or name of a process started with `stdin: "pipe"`.
    pub id: String,
    /// What to write, as is: add the newline (`"y\n"`) a prompt waits for. At most 65536 bytes.
    pub input: String,
    /// Then close its stdin: it reads end of input (EOF).
    pub end: Option<bool>,
}

// ---------------------------------------------------------------------------------------------
// Results

/// One managed process, compact: what the model needs to act (at most about 300 bytes of
/// JSON). Optional fields are absent, never null.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Proc {
    /// `proc_N`, stable across server restarts.
    pub id: String,
    /// The name given at start, else one derived from what it runs (`npm-run-dev`).
    pub name: String,
    /// starting, running, orphaned (supervisor gone, tree alive), exited, killed, stopped,
    /// timedOut, reaped, lost.
    pub status: String,
    /// The human form: `running`, `exited (0)`, `killed (SIGKILL)`, `timed out after 2s`.
    pub status_text: String,
    /// The command's pid (its process group leader).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    /// TCP ports its live tree listens on.
    pub ports: Vec<u16>,
    /// The exit code, when it exited by itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The signal that ended it, when one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// The command, shortened to 80 characters.
    pub command: String,
    /// Its session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Unix ms.
    pub started_at: u64,
    /// Unix ms, once finished.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<u64>,
    /// Its cleanup command, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cleanup: Option<String>,
    /// `pipe` when started with `stdin: "pipe"` (`process_write` writes to it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdin: Option<String>,
    /// With `verbose: true`: every field of the entry as `sheepdog ps --json` shows it (owner,
    /// supervisor, identity, stop timings, log paths, containment, usage, cleanup result...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Map<String, Value>>,
}

impl Proc {
    fn of(v: &EntryView, verbose: bool) -> Proc {
        let details = verbose.then(|| match serde_json::to_value(v) {
            Ok(Value::Object(m)) => m,
            _ => serde_json::Map::new(),
        });
        let mut command = v.command_preview.clone();
        if command.chars().count() > COMMAND_MAX {
            command = command.chars().take(COMMAND_MAX - 1).collect::<String>() + "…";
        }
        Proc {
            id: v.id.clone(),
            name: v.name.clone(),
            status: v.status.as_str().into(),
            status_text: v.status_text.clone(),
            pid: v.pid,
            ports: v.ports.clone(),
            exit_code: v.exit_code,
            signal: v.signal.clone(),
            command,
            session: v.session_id.clone(),
            started_at: v.started_at,
            ended_at: v.ended_at,
            cleanup: v.cleanup.as_ref().map(|c| c.command.clone()),
            stdin: v.stdin_pipe.then(|| "pipe".to_string()),
            details,
        }
    }

    fn finished(&self) -> bool {
        Status::parse(&self.status).is_some_and(|s| s.is_finished())
    }
}

/// One nudge (as `sheepdog start --json` gives it).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Warning {
    /// `outsideTree` (stopping the tree will not end the work: give a cleanup) or
    /// `stoppedOnExit` (the work is stopped as soon as the command exits).
    pub kind: String,
    /// One sentence.
    pub message: String,
    /// What was found (`nohup, &`).
    pub matched: String,
}

/// How a readiness wait went.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Readiness {
    /// True when the condition was met.
    pub ok: bool,
    /// How long the wait took, ms.
    pub after_ms: u64,
    /// The matching log line, or `port N`, when ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub matched: Option<String>,
    /// The port that made it ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// When not ready: `exited` (it ended first: the result is an error) or `timeout` (it
    /// keeps running).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Readiness {
    fn of(o: &ReadyOutcome) -> Readiness {
        let r = o.report();
        Readiness {
            ok: r.ok,
            after_ms: r.after_ms,
            matched: r.matched.map(|m| cut_line(&m)),
            port: r.port,
            reason: r.reason,
        }
    }
}

/// A result with what every reply carries: the news, what to call next, and whether it was cut.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WithNews<R> {
    #[serde(flatten)]
    pub result: R,
    /// What to call next, e.g. `process_logs {"id": "proc_1", "cursor": "..."}` or
    /// `process_wait {"ids": ["proc_2"]}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    /// Processes of this agent that ended since the last reply that reported them (each once;
    /// at most 5 lines each, 4 KiB in all).
    pub finished: Vec<Finished>,
    /// How many more ended processes did not fit in `finished`: the next reply reports them.
    #[serde(skip_serializing_if = "is_zero")]
    #[schemars(range(min = 0))]
    pub finished_omitted: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Result of `process_start`: the new process, its readiness, the nudges.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StartResult {
    #[serde(flatten)]
    pub process: Proc,
    /// The readiness check, when one was asked for. Not ok with `reason: exited` is an error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready: Option<Readiness>,
    /// Nudges: the command looks like its work outlives its tree (or dies with it) and it has no
    /// cleanup.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Warning>,
    /// Its last lines of output (`[out] `/`[err] `), when it already ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_lines: Option<Vec<String>>,
}

/// Result of `process_list`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListResult {
    /// The processes, oldest first.
    pub entries: Vec<Proc>,
    /// Set when this result was cut to stay under 16 KiB: what was left out and how to get it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated: Option<String>,
}

/// Result of `process_logs`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LogsResult {
    /// The process.
    pub id: String,
    /// `out`, `err` or `all`.
    pub stream: String,
    /// The output (lines end with a newline; `all` prefixes `[out] `, `[err] `, `[sheepdog] `).
    pub text: String,
    /// Pass as `cursor` to get only what comes after.
    pub cursor: String,
    /// More was available than `maxBytes` (or `tail`) allowed: call again with `cursor`.
    pub truncated: bool,
    /// Nothing more will come: the process and its cleanup are done and everything was read.
    pub eof: bool,
    /// The process's status now.
    pub status: String,
}

/// One process in a wait's result.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaitItem {
    #[serde(flatten)]
    pub process: Proc,
    /// True when it finished (cleanup included); false: still running.
    pub done: bool,
    /// Its last lines of output (`[out] `/`[err] `), at most 10, each at most 512 bytes.
    pub last_lines: Vec<String>,
}

/// Result of `process_wait`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaitResult {
    /// True when the wait was satisfied (all done, or any with `any`); false on timeout.
    pub done: bool,
    /// One per process, in the order asked.
    pub waited: Vec<WaitItem>,
    /// Set when this result was cut to stay under 16 KiB: what was left out and how to get it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated: Option<String>,
}

/// What a cleanup did once it ran.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CleanupOutcome {
    /// Its exit code, when it exited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The signal that ended it, when one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// It outlived its bound and was stopped.
    pub timed_out: bool,
    /// How long it ran, ms.
    pub duration_ms: u64,
    /// Its last lines of output (each at most 512 bytes).
    pub output: Vec<String>,
}

/// One stopped process.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StopItem {
    #[serde(flatten)]
    pub process: Proc,
    /// Exactly what `sheepdog stop` prints: `Stopped web (proc_4).`, then, when the cleanup
    /// failed, `Cleanup command failed with exit code 1.` or `Cleanup command timed out after
    /// 10s.`
    pub lines: Vec<String>,
    /// It had already finished before this stop (its cleanup still ran).
    pub already_finished: bool,
    /// Nothing of its tree is alive.
    pub tree_gone: bool,
    /// Tree gone and cleanup (if any) succeeded.
    pub ok: bool,
    /// The cleanup's failure line, when it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cleanup_error: Option<String>,
    /// What the cleanup did, when one ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cleanup_result: Option<CleanupOutcome>,
}

/// Result of `process_stop`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StopResult {
    /// One per process stopped.
    pub stopped: Vec<StopItem>,
    /// Set when this result was cut to stay under 16 KiB: what was left out and how to get it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated: Option<String>,
}

/// Result of `process_restart`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestartResult {
    /// The new process (a new id), started after the old tree and its cleanup were done.
    #[serde(flatten)]
    pub process: Proc,
    /// The id it replaced.
    pub replaced: String,
    /// The stop of the old one, as `process_stop` says it.
    pub lines: Vec<String>,
    /// The readiness check (the same as at its start), when it had one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready: Option<Readiness>,
}

/// Result of `process_update`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateResult {
    /// The process after the change.
    #[serde(flatten)]
    pub process: Proc,
}

/// A refusal in `process_clear`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Refusal {
    /// The process.
    pub id: String,
    /// Why, in one sentence.
    pub message: String,
}

/// Result of `process_clear`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClearResult {
    /// The processes removed with their logs (their last views).
    pub cleared: Vec<Proc>,
    /// Those that were not: still running, still running their cleanup, or a cleanup pending.
    pub refused: Vec<Refusal>,
    /// Set when this result was cut to stay under 16 KiB: what was left out and how to get it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated: Option<String>,
}

/// Result of `process_write`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WriteResult {
    /// The process.
    pub id: String,
    /// Bytes written to its stdin.
    #[schemars(range(min = 0))]
    pub bytes: usize,
    /// Its stdin was closed after the write (`end: true`).
    pub ended: bool,
}

// ---------------------------------------------------------------------------------------------
// Rendering helpers

/// `line` cut to at most [`LINE_MAX`] bytes (at a character boundary), marked with how much
/// was left out.
pub fn cut_line(line: &str) -> String {
    if line.len() <= LINE_MAX {
        return line.to_string();
    }
    let mark = format!("… [{} more bytes]", line.len());
    let mut end = LINE_MAX.saturating_sub(mark.len());
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [{} more bytes]", &line[..end], line.len() - end)
}

/// The last `n` of `lines`, each cut by [`cut_line`].
pub fn cut_lines(lines: &[String], n: usize) -> Vec<String> {
    lines[lines.len().saturating_sub(n)..].iter().map(|l| cut_line(l)).collect()
}

/// The compact view of an entry, status as the kernel says now.
fn proc_of(reg: &Registry, e: &Entry, verbose: bool) -> Proc {
    Proc::of(&entry_view(reg, e, &OnceCell::new()), verbose)
}

/// The compact view with a status already known (a stop's result).
fn proc_as(reg: &Registry, e: &Entry, status: Status, verbose: bool) -> Proc {
    Proc::of(&view_with_status(reg, e, status, false), verbose)
}

/// The view of an entry just started (and maybe waited on until ready), computed on a thread of
/// its own: `ports::listening` reuses a socket table for 200 ms per thread, and the one read
/// during the readiness wait may predate the listen ("Ready (port 8000)" next to `ports: []`).
fn fresh_view(reg: &Registry, e: &Entry) -> EntryView {
    std::thread::scope(|s| s.spawn(|| entry_view(reg, e, &OnceCell::new())).join())
        .unwrap_or_else(|_| entry_view(reg, e, &OnceCell::new()))
}

/// The last `n` lines of an entry's combined log (tags and markers kept), each cut.
pub fn last_lines(reg: &Registry, id: &str, n: usize) -> Vec<String> {
    cut_lines(&logread::last_lines(reg, id, n), n)
}

/// One line per process, for the text block.
fn proc_line(p: &Proc) -> String {
    let pid = p.pid.filter(|_| !p.finished()).map(|p| format!(" pid {p}")).unwrap_or_default();
    let ports = if p.ports.is_empty() {
        String::new()
    } else {
        format!(" ports {}", p.ports.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(","))
    };
    let since = p.ended_at.unwrap_or_else(sheepdog::files::now_ms).saturating_sub(p.started_at);
    let age = match since / 1000 {
        s @ 0..60 => format!("{s}s"),
        s @ 60..3600 => format!("{}m", s / 60),
        s @ 3600..86400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    };
    let age = if p.finished() { format!(", ran {age}") } else { format!(", up {age}") };
    format!("{} {}: {}{pid}{ports}{age} — {}", p.id, p.name, p.status_text, p.command)
}

/// A call the model can make next, as `tool {json}`.
fn call_hint(tool: &str, args: Value) -> String {
    format!("{tool} {args}")
}

/// What one tool call produced before the news is added.
pub struct Done<R> {
    result: R,
    text: String,
    is_error: bool,
    next: Option<String>,
    /// Entries whose end this reply itself reports (not repeated as news).
    told: Vec<String>,
    /// Entries this call acted on, kept from other replies' news until this reply's is made.
    busy: Option<news::Busy>,
}

impl<R> Done<R> {
    fn ok(result: R, text: String) -> Done<R> {
        Done { result, text, is_error: false, next: None, told: Vec::new(), busy: None }
    }
}

/// A sentence for the model.
type ToolError = String;

/// The arguments as `T`; a bad one is a sentence that names the field in plain words.
fn parse<T: DeserializeOwned>(args: JsonObject) -> Result<T, ToolError> {
    serde_path_to_error::deserialize(Value::Object(args)).map_err(|e| {
        let path = e.path().to_string();
        plain_error(if path == "." { "" } else { &path }, &e.inner().to_string())
    })
}

/// serde's message about the field at `path` in words a model can act on, without Rust's type
/// names: "`tail` must be a whole number ≥ 0", "`cleanup.command` is required".
fn plain_error(path: &str, msg: &str) -> String {
    let msg = msg.split(" at line ").next().unwrap_or(msg);
    let field = |f: &str| if path.is_empty() { f.to_string() } else { format!("{path}.{f}") };
    let quoted = |s: &str| s.split('`').nth(1).map(str::to_string);
    if let Some(rest) = msg.strip_prefix("missing field ") {
        return format!("`{}` is required.", field(&quoted(rest).unwrap_or_default()));
    }
    if let Some(rest) = msg.strip_prefix("unknown field ") {
        let name = quoted(rest).unwrap_or_default();
        let known: Vec<&str> = rest.split('`').skip(3).step_by(2).collect();
        let at = if path.is_empty() { String::new() } else { format!(" in `{path}`") };
        return format!("unknown field `{name}`{at}: the fields are {}.", known.join(", "));
    }
    if let Some(rest) = msg.strip_prefix("unknown variant ") {
        let name = quoted(rest).unwrap_or_default();
        let known: Vec<&str> = rest.split('`').skip(3).step_by(2).collect();
        return format!("`{path}` must be one of {} (not '{name}').", known.join(", "));
    }
    let expected = msg.rsplit(", expected ").next().filter(|_| msg.contains(", expected "));
    let what = match expected {
        Some("usize" | "u64" | "u32" | "u8") => "a whole number ≥ 0".to_string(),
        Some("u16") => "a whole number from 0 to 65535".to_string(),
        Some("i32" | "i64") => "a whole number".to_string(),
        Some("a boolean") => "true or false".to_string(),
        Some("a sequence") => "an array".to_string(),
        Some("a map") => "an object".to_string(),
        Some(e) if e.starts_with("struct ") => "an object".to_string(),
        Some(e) if e.starts_with("variant identifier") || e.contains(" or ") => format!("one of {e}"),
        Some(e) => e.to_string(),
        None => return format!("`{}` is invalid: {msg}.", if path.is_empty() { "arguments" } else { path }),
    };
    if path.is_empty() {
        return format!("The arguments must be {what}.");
    }
    format!("`{path}` must be {what}.")
}

fn find(reg: &Registry, key: &str) -> Result<Entry, ToolError> {
    reg.find(key).map_err(|e| sentence(&e.to_string()))
}

/// `msg` as one sentence: capitalized, ending with a period, without Rust's ` (os error N)`.
fn sentence(msg: &str) -> String {
    let mut s = msg.trim().to_string();
    if let Some(at) = s.find(" (os error ")
        && s[at..].contains(')')
    {
        let end = at + s[at..].find(')').unwrap_or(0) + 1;
        s.replace_range(at..end, "");
    }
    if let Some(c) = s.get(..1) {
        s.replace_range(..1, &c.to_uppercase());
    }
    if !s.ends_with(['.', '!', '?']) {
        s.push('.');
    }
    s
}

/// `text` cut at a line boundary to at most [`REPLY_MAX`] bytes, saying so.
fn bound_text(text: String) -> String {
    if text.len() <= REPLY_MAX {
        return text;
    }
    let note = "\n[cut to 16 KiB: see `truncated`]";
    let mut end = REPLY_MAX - note.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let end = text[..end].rfind('\n').unwrap_or(end);
    format!("{}{note}", &text[..end])
}

/// Cuts the structured result `v` to at most [`REPLY_MAX`] bytes by dropping items from the end
/// of its list (`entries`, `waited`, `stopped`, `cleared`); returns what `truncated` says, if
/// anything was dropped.
fn bound_value(v: &mut Value) -> Option<String> {
    if v.to_string().len() <= REPLY_MAX {
        return None;
    }
    let key =
        ["entries", "waited", "stopped", "cleared"].into_iter().find(|k| v.get(*k).is_some_and(Value::is_array))?;
    let total = v[key].as_array().map_or(0, Vec::len);
    let mut note = String::new();
    while v.to_string().len() + note.len() + 32 > REPLY_MAX {
        let Some(items) = v[key].as_array_mut() else { break };
        if items.pop().is_none() {
            break;
        }
        let kept = items.len();
        note = format!(
            "{} of {total} `{key}` left out to keep this reply under 16 KiB: narrow the call (`session`, `status`, fewer `ids`), or read one process with process_logs.",
            total - kept
        );
    }
    (!note.is_empty()).then_some(note)
}

// ---------------------------------------------------------------------------------------------
// The server

/// The MCP server: stateless apart from what the registry holds.
#[derive(Clone)]
pub struct Sheepdog {
    ctx: Arc<Ctx>,
    tool_router: ToolRouter<Sheepdog>,
}

impl Sheepdog {
    /// Parses the arguments, runs `op` on the blocking pool, adds the news, bounds and renders.
    /// `mutating`: the call changes processes, so a server whose stdin closed lets it finish
    /// (counted on the blocking thread itself: the async side is not polled after EOF).
    async fn call<A, R>(
        &self,
        args: JsonObject,
        op: fn(&Ctx, A) -> Result<Done<R>, ToolError>,
        mutating: bool,
    ) -> Result<CallToolResult, ErrorData>
    where
        A: DeserializeOwned + Send + 'static,
        R: Serialize + Send + 'static,
    {
        let a: A = match parse(args) {
            Ok(a) => a,
            Err(msg) => return Ok(CallToolResult::error(vec![ContentBlock::text(msg)])),
        };
        let ctx = self.ctx.clone();
        let joined = tokio::task::spawn_blocking(move || {
            let _m = mutating.then(Mutation::begin);
            reap_supervisors();
            let mut done = op(&ctx, a)?;
            let busy = done.busy.take();
            let news = news::collect(&ctx, &done.told, NEWS_MAX);
            // Only now may other replies report what this call acted on.
            drop(busy);
            reap_supervisors();
            Ok::<_, ToolError>((done, news))
        })
        .await;
        let (done, news) = match joined {
            Ok(Ok(x)) => x,
            Ok(Err(msg)) => return Ok(CallToolResult::error(vec![ContentBlock::text(msg)])),
            Err(e) => return Err(ErrorData::internal_error(format!("the tool failed: {e}"), None)),
        };
        let mut text = done.text;
        let envelope =
            WithNews { result: done.result, next: done.next, finished: news.items, finished_omitted: news.omitted };
        let mut value = serde_json::to_value(&envelope)
            .map_err(|e| ErrorData::internal_error(format!("unable to render the result: {e}"), None))?;
        if let Some(note) = bound_value(&mut value) {
            text.push_str(&format!("\n[{note}]"));
            value["truncated"] = Value::String(note);
        }
        if let Some(n) = &envelope.next {
            text.push_str(&format!("\nNext: {n}"));
        }
        let news_text = news::text(&envelope.finished, envelope.finished_omitted);
        if !news_text.is_empty() {
            if !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&news_text);
        }
        let mut result =
            if done.is_error { CallToolResult::structured_error(value) } else { CallToolResult::structured(value) };
        result.content = vec![ContentBlock::text(bound_text(text.trim_end().to_string()))];
        Ok(result)
    }
}

#[tool_router]
impl Sheepdog {
    pub fn new(ctx: Ctx) -> Sheepdog {
        Sheepdog { ctx: Arc::new(ctx), tool_router: Self::tool_router() }
    }

    /// Start a background process (dev server, watcher, build, test run) under its own
    /// supervisor. Returns once it really runs; with `ready`, once it is ready (or ended: an
    /// error, or the ready timeout passed). Use this instead of `&`, `nohup` or `setsid`.
    #[tool(
        name = "process_start",
        input_schema = input::<StartArgs>(),
        output_schema = output::<WithNews<StartResult>>()
    )]
    async fn process_start(&self, args: JsonObject) -> Result<CallToolResult, ErrorData> {
        self.call(args, start, true).await
    }

    /// List managed processes of this agent's session (or another, or every session with `*`):
    /// status, pid, ports, exit code, command, cleanup.
    #[tool(
        name = "process_list",
        input_schema = input::<ListArgs>(),
        output_schema = output::<WithNews<ListResult>>(),
        annotations(read_only_hint = true)
    )]
    async fn process_list(&self, args: JsonObject) -> Result<CallToolResult, ErrorData> {
        self.call(args, list, false).await
    }

    /// Read a process's output: the last lines, lines matching a pattern, or with `cursor` only
    /// what came since the previous call. At most `maxBytes` per call.
    #[tool(
        name = "process_logs",
        input_schema = input::<LogsArgs>(),
        output_schema = output::<WithNews<LogsResult>>(),
        annotations(read_only_hint = true)
    )]
    async fn process_logs(&self, args: JsonObject) -> Result<CallToolResult, ErrorData> {
        self.call(args, logs, false).await
    }

    /// Wait (at most 45 s) for processes to finish; use this rather than `sleep`. Without
    /// `ids`, waits for this agent's running processes started without `ready` (builds, tests),
    /// not for its servers. Never kills on timeout: call again, or process_stop.
    #[tool(
        name = "process_wait",
        input_schema = input::<WaitArgs>(),
        output_schema = output::<WithNews<WaitResult>>(),
        annotations(read_only_hint = true)
    )]
    async fn process_wait(&self, args: JsonObject) -> Result<CallToolResult, ErrorData> {
        self.call(args, wait, false).await
    }

    /// Stop a process (or a session's): its whole tree (SIGTERM, a grace, SIGKILL), then its
    /// cleanup command. isError when the tree was not confirmed gone or the cleanup failed.
    #[tool(
        name = "process_stop",
        input_schema = input::<StopArgs>(),
        output_schema = output::<WithNews<StopResult>>(),
        annotations(destructive_hint = true)
    )]
    async fn process_stop(&self, args: JsonObject) -> Result<CallToolResult, ErrorData> {
        self.call(args, stop, true).await
    }

    /// Restart a process: stop its whole tree (and cleanup), then start the same command again
    /// under a new id.
    #[tool(
        name = "process_restart",
        input_schema = input::<RestartArgs>(),
        output_schema = output::<WithNews<RestartResult>>()
    )]
    async fn process_restart(&self, args: JsonObject) -> Result<CallToolResult, ErrorData> {
        self.call(args, restart, true).await
    }

    /// Attach, replace or remove (`cleanup: null`) a process's cleanup command, or rename it.
    #[tool(
        name = "process_update",
        input_schema = input::<UpdateArgs>(),
        output_schema = output::<WithNews<UpdateResult>>()
    )]
    async fn process_update(&self, args: JsonObject) -> Result<CallToolResult, ErrorData> {
        self.call(args, update, true).await
    }

    /// Remove finished processes and their logs. Refuses running ones (stop them first).
    #[tool(
        name = "process_clear",
        input_schema = input::<ClearArgs>(),
        output_schema = output::<WithNews<ClearResult>>(),
        annotations(destructive_hint = true)
    )]
    async fn process_clear(&self, args: JsonObject) -> Result<CallToolResult, ErrorData> {
        self.call(args, clear, true).await
    }

    /// Write to the stdin of a process started with `stdin: "pipe"` (answer a prompt such as
    /// `Proceed? [y/N]`, feed a REPL); `end: true` then closes it. Fails when it was started
    /// without a pipe or has exited.
    #[tool(
        name = "process_write",
        input_schema = input::<WriteArgs>(),
        output_schema = output::<WithNews<WriteResult>>()
    )]
    async fn process_write(&self, args: JsonObject) -> Result<CallToolResult, ErrorData> {
        self.call(args, write, true).await
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Sheepdog {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("sheepdog", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }
}

// ---------------------------------------------------------------------------------------------
// The operations (blocking; run on tokio's blocking pool)

/// Linux's bound on one argument of `exec`: 131 072 bytes (`MAX_ARG_STRLEN`, 32 pages), NUL
/// included.
const ARG_STRLEN_MAX: usize = 32 * 4096;

/// Refuses a command `exec` would refuse with E2BIG, in words: its argument (a shell string is
/// one) or arguments and environment together (with the server's own, which the supervisor
/// inherits) over the system's bound.
fn check_length(argv: &[String], env: &BTreeMap<String, String>) -> Result<(), ToolError> {
    if let Some(a) = argv.iter().find(|a| a.len() + 1 > ARG_STRLEN_MAX) {
        return Err(format!("command too long: {} bytes (at most {}).", a.len(), ARG_STRLEN_MAX - 1));
    }
    let own: usize = std::env::vars_os().map(|(k, v)| k.len() + v.len() + 2 + 8).sum();
    let ours: usize = argv.iter().map(|a| a.len() + 1 + 8).sum::<usize>()
        + env.iter().map(|(k, v)| k.len() + v.len() + 2 + 8).sum::<usize>();
    // The supervisor's own arguments (state dir, id, flags) and the tag it adds: 4 KiB is ample.
    let room = (sheepdog::os::arg_max() as usize).saturating_sub(own + 4096);
    if ours > room {
        return Err(format!("command too long: {ours} bytes (at most {room}) with its environment."));
    }
    Ok(())
}

fn start(ctx: &Ctx, a: StartArgs) -> Result<Done<StartResult>, ToolError> {
    let argv: Vec<String> = match (a.command, a.argv) {
        (Some(_), Some(_)) => {
            return Err("Give either `command` (a shell string) or `argv` (an array), not both.".into());
        }
        (Some(c), None) if !c.trim().is_empty() => vec!["sh".into(), "-c".into(), c],
        (None, Some(v)) if v.first().is_some_and(|p| !p.is_empty()) => v,
        (Some(_), None) => return Err("`command` is empty: give the shell command to run.".into()),
        (None, Some(_)) => return Err("`argv` is empty: give the program and its arguments.".into()),
        (None, None) => return Err("Give `command` (a shell string) or `argv` (an array): what to run.".into()),
    };
    if let Some(n) = &a.name {
        sheepdog::entry::check_name(n).map_err(|e| sentence(&e))?;
    }
    if let Some(c) = &a.cleanup
        && c.command.trim().is_empty()
    {
        return Err("`cleanup.command` is empty: give the command that undoes the work, or leave out `cleanup`.".into());
    }
    if let Some(m) = a.log_max
        && m < 1024
    {
        return Err(format!("`logMax` {m} is too small: at least 1024 bytes."));
    }
    if a.timeout_ms == Some(0) {
        return Err("`timeoutMs` must be more than 0.".into());
    }
    if let Some(c) = &a.cwd
        && !std::path::Path::new(c).is_dir()
    {
        return Err(format!("`cwd` '{c}' is not a directory."));
    }
    if let Some(k) = a.env.iter().flatten().map(|(k, _)| k).find(|k| k.is_empty() || k.contains(['=', '\0'])) {
        return Err(format!("`env` key {k:?} is not a variable name (empty, or with '=' or NUL)."));
    }
    check_length(&argv, a.env.as_ref().unwrap_or(&BTreeMap::new()))?;
    let ready = match a.ready {
        Some(r) => Some(ready_spec(r)?),
        None => None,
    };
    let verbose = a.verbose.unwrap_or(false);
    // The tier as the CLI picks it: $SHEEPDOG_CONTAINMENT, else the strongest the host allows.
    let containment = sheepdog::cgroup::Mode::from_env().map_err(|e| sentence(&e))?;
    let auto_name = if a.name.is_none() { sheepdog::entry::derived_name(&argv) } else { None };
    let argv_os: Vec<OsString> = argv.iter().map(OsString::from).collect();
    let req = StartRequest {
        name: a.name,
        session_id: Some(a.session.unwrap_or_else(|| ctx.session.clone())),
        owner: if a.keep.unwrap_or(false) { None } else { ctx.owner },
        cwd: a.cwd.map(PathBuf::from),
        env: a.env.unwrap_or_default().into_iter().map(|(k, v)| (k.into(), v.into())).collect(),
        timeout: a.timeout_ms.map(Duration::from_millis),
        policy: StopPolicy { stdin_grace: Duration::ZERO, ..StopPolicy::default() },
        cleanup: a
            .cleanup
            .map(|c| Cleanup { command: c.command, timeout_ms: c.timeout_ms.unwrap_or(CLEANUP_TIMEOUT_MS) }),
        log_max: a.log_max,
        ready,
        restart_of: None,
        containment,
        limits: sheepdog::cgroup::Limits::default(),
        auto_name,
        stdin_pipe: a.stdin == Some(StdinArg::Pipe),
        argv: argv_os,
    };
    let manager::Started { entry: e, ready: outcome, nudges } =
        manager::start_ready(&ctx.reg, req).map_err(|e| sentence(&e.to_string()))?;
    adopt_supervisor(&e);
    let e = ctx.reg.read(&e.id).unwrap_or(e);
    let process = Proc::of(&fresh_view(&ctx.reg, &e), verbose);
    let mut text = format!("Started {}{}.", e.label(), process.pid.map(|p| format!(", pid {p}")).unwrap_or_default());
    let mut told = Vec::new();
    let mut tail = None;
    let mut is_error = false;
    if let Some(o) = &outcome {
        text.push('\n');
        text.push_str(&ready_text(o, &e));
        if let ReadyOutcome::Exited { last_lines, .. } = o {
            tail = Some(cut_lines(last_lines, RESULT_LINES));
            // It ended before it was ready: the CLI exits 1 there; the call failed.
            is_error = true;
        }
    }
    if process.finished() {
        told.push(e.id.clone());
        if tail.is_none() {
            text.push_str(&format!("\nIt already ended: {}.", process.status_text));
            tail = Some(cut_lines(&sheepdog::ready::output_tail(&ctx.reg, &e.id), RESULT_LINES));
        }
    }
    if let Some(lines) = &tail {
        for l in lines {
            text.push_str(&format!("\n    {l}"));
        }
    }
    for w in &nudges {
        text.push_str(&format!("\nWarning: {}", w.message));
    }
    let id = json!(e.id);
    let next = match &outcome {
        _ if process.finished() => Some(call_hint("process_logs", json!({"id": id}))),
        Some(ReadyOutcome::TimedOut { .. }) => Some(call_hint("process_logs", json!({"id": id, "tail": 20}))),
        Some(_) => None,
        None if e.stdin_pipe => Some(call_hint("process_write", json!({"id": id, "input": "...\n"}))),
        None => Some(format!(
            "{} when it should end by itself, or {} for its output",
            call_hint("process_wait", json!({"ids": [id]})),
            call_hint("process_logs", json!({"id": id}))
        )),
    };
    let warnings = nudges
        .iter()
        .map(|w| Warning {
            kind: serde_json::to_value(w.kind).ok().and_then(|k| k.as_str().map(str::to_string)).unwrap_or_default(),
            message: w.message.clone(),
            matched: w.matched.clone(),
        })
        .collect();
    Ok(Done {
        result: StartResult { process, ready: outcome.as_ref().map(Readiness::of), warnings, last_lines: tail },
        text,
        is_error,
        next,
        told,
        busy: None,
    })
}

/// `ready` as the library's spec; a bad pattern or an empty check is a tool error.
fn ready_spec(r: ReadyArg) -> Result<ReadySpec, ToolError> {
    if let Some(p) = &r.log_pattern
        && let Err(why) = ReadySpec::check_pattern(p)
    {
        return Err(format!("`ready.logPattern` '{p}' is not a valid regular expression: {why}"));
    }
    if r.port == Some(0) {
        return Err("`ready.port` must be a TCP port from 1 to 65535.".into());
    }
    let spec = ReadySpec {
        port: r.port,
        log: r.log_pattern,
        listen: r.listen.unwrap_or(false),
        timeout_ms: r.timeout_ms.unwrap_or(DEFAULT_READY_TIMEOUT_MS).min(WAIT_CAP_MS),
    };
    if !spec.is_set() {
        return Err("`ready` needs `port`, `logPattern` or `listen: true`.".into());
    }
    Ok(spec)
}

fn ready_text(o: &ReadyOutcome, e: &Entry) -> String {
    match o {
        ReadyOutcome::Ready { after_ms, matched, .. } => {
            format!("Ready after {after_ms} ms ({}).", cut_line(matched.as_deref().unwrap_or("condition met")))
        }
        ReadyOutcome::Exited { after_ms, entry, .. } => format!(
            "It ended before it was ready, after {after_ms} ms: {}. Its last lines:",
            sheepdog::view::status_text(entry, entry.status)
        ),
        ReadyOutcome::TimedOut { after_ms } => format!(
            "Not ready after {after_ms} ms; {} keeps running (process_logs to see why, process_stop to end it).",
            e.label()
        ),
    }
}

fn list(ctx: &Ctx, a: ListArgs) -> Result<Done<ListResult>, ToolError> {
    let wanted = match &a.status {
        Some(s) => Some(Status::parse(s).filter(|st| st.as_str() == s).ok_or_else(|| {
            let all: Vec<&str> = sheepdog::status::ALL.iter().map(|s| s.as_str()).collect();
            format!("Unknown status '{s}': use one of {}.", all.join(", "))
        })?),
        None => None,
    };
    let session = a.session.unwrap_or_else(|| ctx.session.clone());
    let query = sheepdog::view::ListQuery {
        session: (session != "*").then_some(session),
        status: wanted,
        all: a.all.unwrap_or(false),
        recent_failures_ms: None,
        tree: false,
    };
    let verbose = a.verbose.unwrap_or(false);
    let listing = sheepdog::view::list(&ctx.reg, &query);
    let entries: Vec<Proc> = listing.rows.iter().map(|v| Proc::of(v, verbose)).collect();
    let lines: Vec<String> = entries.iter().map(proc_line).collect();
    let text = if lines.is_empty() { "No processes.".to_string() } else { lines.join("\n") };
    Ok(Done::ok(ListResult { entries, truncated: None }, text))
}

/// Default `maxBytes` of `process_logs`: 16 KiB.
const LOGS_MAX_BYTES: usize = 16 * 1024;

fn logs(ctx: &Ctx, a: LogsArgs) -> Result<Done<LogsResult>, ToolError> {
    let stream = match a.stream.as_deref() {
        None => LogStream::All,
        Some(s) => LogStream::parse(s).ok_or_else(|| format!("Unknown stream '{s}': use out, err or all."))?,
    };
    let grep = match &a.grep {
        Some(p) => Some(regex::Regex::new(p).map_err(|e| {
            let why = e.to_string().split_whitespace().collect::<Vec<_>>().join(" ");
            format!("`grep` '{p}' is not a valid regular expression: {why}")
        })?),
        None => None,
    };
    let cursor = match &a.cursor {
        Some(c) => Some(Cursor::parse(c).map_err(|_| {
            format!("Invalid cursor '{c}': pass the `cursor` of a previous process_logs result, or leave it out.")
        })?),
        None => None,
    };
    if a.max_bytes == Some(0) {
        return Err("`maxBytes` must be more than 0.".into());
    }
    let e = find(&ctx.reg, &a.id)?;
    let q = LogQuery {
        stream,
        tail: a.tail,
        grep,
        cursor,
        max_bytes: Some(a.max_bytes.unwrap_or(LOGS_MAX_BYTES)),
        // Whole lines only (an unterminated last line waits for its newline, or for the end of
        // the process): a cursor never splits a line across two reads.
        partial: false,
        ..LogQuery::default()
    };
    let chunk = logread::read(&ctx.reg, &e.id, &q).map_err(|err| sentence(&err.to_string()))?;
    let status = inspect::live_status(&ctx.reg.read(&e.id).unwrap_or(e.clone()), &OnceCell::new());
    let text = String::from_utf8_lossy(&chunk.bytes).into_owned();
    let mut summary = if text.is_empty() {
        format!("No {}output from {}.", if cursor.is_some() { "new " } else { "" }, e.label())
    } else {
        text.trim_end_matches('\n').to_string()
    };
    if chunk.truncated {
        summary.push_str("\n[more output: call again with this cursor, or use tail/grep]");
    }
    summary.push_str(&format!(
        "\n[cursor {}; {} is {}{}]",
        chunk.cursor,
        e.id,
        status,
        if chunk.eof { "; end of log" } else { "" }
    ));
    let mut next_args = json!({"id": e.id, "cursor": chunk.cursor});
    if a.stream.is_some() {
        next_args["stream"] = json!(stream.as_str());
    }
    let next = (!chunk.eof).then(|| {
        let why = if chunk.truncated { "for the rest" } else { "for what comes next" };
        format!("{} {why}", call_hint("process_logs", next_args))
    });
    let result = LogsResult {
        id: e.id.clone(),
        stream: stream.as_str().into(),
        text,
        cursor: chunk.cursor,
        truncated: chunk.truncated,
        eof: chunk.eof,
        status: status.as_str().into(),
    };
    let mut done = Done::ok(result, summary);
    done.next = next;
    Ok(done)
}

fn wait(ctx: &Ctx, a: WaitArgs) -> Result<Done<WaitResult>, ToolError> {
    let timeout = a.timeout_ms.unwrap_or(WAIT_CAP_MS).min(WAIT_CAP_MS);
    let verbose = a.verbose.unwrap_or(false);
    let targets: Vec<Entry> = match (&a.ids, &a.session) {
        (Some(_), Some(_)) => return Err("Give either `ids` or `session`, not both.".into()),
        (Some(ids), None) if !ids.is_empty() => {
            let mut out: Vec<Entry> = Vec::new();
            for k in ids {
                let e = find(&ctx.reg, k)?;
                if !out.iter().any(|x| x.id == e.id) {
                    out.push(e);
                }
            }
            out
        }
        (Some(_), None) => return Err("`ids` is empty: give the ids or names to wait for.".into()),
        (None, session) => {
            let session = session.clone().unwrap_or_else(|| ctx.session.clone());
            let (entries, _) = ctx.reg.list();
            let census = OnceCell::new();
            // Those expected to end: started without `ready` (a server is not waited for).
            entries
                .into_iter()
                .filter(|e| e.session_id.as_deref() == Some(session.as_str()))
                .filter(|e| e.ready.is_none())
                .filter(|e| !inspect::live_status(e, &census).is_finished())
                .collect()
        }
    };
    if targets.is_empty() {
        let text = "No running processes to wait for (those started with `ready` are waited for only by `ids`).";
        return Ok(Done::ok(WaitResult { done: true, waited: Vec::new(), truncated: None }, text.into()));
    }
    let busy = news::busy(targets.iter().map(|e| e.id.clone()));
    let any = a.any.unwrap_or(false);
    let waited = manager::wait_many(&ctx.reg, &targets, any, Some(Duration::from_millis(timeout)))
        .map_err(|e| sentence(&e.to_string()))?;
    let mut items = Vec::new();
    let mut lines = Vec::new();
    let mut told = Vec::new();
    for (e, w) in targets.iter().zip(waited.results) {
        let (done, cur) = match w {
            Waited::Finished(x) | Waited::NoResult(x) => (true, x),
            Waited::TimedOut => (false, ctx.reg.read(&e.id).unwrap_or_else(|_| e.clone())),
        };
        let status = inspect::live_status(&cur, &OnceCell::new());
        let done = done || status.is_finished();
        let status_text = sheepdog::view::status_text(&cur, status);
        let last =
            if done { cut_lines(&sheepdog::ready::output_tail(&ctx.reg, &cur.id), RESULT_LINES) } else { Vec::new() };
        if done {
            told.push(cur.id.clone());
            lines.push(format!("{}: {status_text}.", cur.label()));
            lines.extend(last.iter().map(|l| format!("    {l}")));
        } else {
            lines.push(format!("{}: still {status_text}.", cur.label()));
        }
        items.push(WaitItem { process: proc_as(&ctx.reg, &cur, status, verbose), done, last_lines: last });
    }
    let all_done = if any { items.iter().any(|i| i.done) } else { items.iter().all(|i| i.done) };
    let mut next = None;
    if !all_done {
        lines.push(format!(
            "Still running after {}; nothing was stopped (call process_wait again, or process_stop).",
            sheepdog::duration::format(Duration::from_millis(timeout))
        ));
        let ids: Vec<&str> = items.iter().filter(|i| !i.done).map(|i| i.process.id.as_str()).collect();
        next = Some(format!("{} to keep waiting", call_hint("process_wait", json!({"ids": ids}))));
    }
    Ok(Done {
        result: WaitResult { done: all_done, waited: items, truncated: None },
        text: lines.join("\n"),
        is_error: false,
        next,
        told,
        busy: Some(busy),
    })
}

fn restart(ctx: &Ctx, a: RestartArgs) -> Result<Done<RestartResult>, ToolError> {
    let key = match (&a.id, &a.name) {
        (Some(k), None) | (None, Some(k)) => k,
        _ => return Err("Give exactly one of `id` or `name`.".into()),
    };
    let old = find(&ctx.reg, key)?;
    let busy = news::busy([old.id.clone()]);
    let r = manager::restart(&ctx.reg, &old, None).map_err(|e| sentence(&e.to_string()))?;
    adopt_supervisor(&r.entry);
    let mut lines = vec![format!("Stopped {}.", r.stopped.entry.label())];
    if let Some(f) = sheepdog::cleanup::failure_line(&r.stopped.entry) {
        lines.push(f);
    }
    let e = ctx.reg.read(&r.entry.id).unwrap_or(r.entry);
    let process = Proc::of(&fresh_view(&ctx.reg, &e), false);
    let mut text = lines.join("\n");
    text.push_str(&format!(
        "\nStarted {}{}.",
        e.label(),
        process.pid.map(|p| format!(", pid {p}")).unwrap_or_default()
    ));
    let mut is_error = false;
    if let Some(o) = &r.ready {
        text.push('\n');
        text.push_str(&ready_text(o, &e));
        if let ReadyOutcome::Exited { last_lines, .. } = o {
            is_error = true;
            for l in cut_lines(last_lines, RESULT_LINES) {
                text.push_str(&format!("\n    {l}"));
            }
        }
    }
    let mut told = vec![old.id.clone()];
    if process.finished() {
        told.push(e.id.clone());
    }
    let result = RestartResult { process, replaced: old.id.clone(), lines, ready: r.ready.as_ref().map(Readiness::of) };
    Ok(Done { result, text, is_error, next: None, told, busy: Some(busy) })
}

fn stop(ctx: &Ctx, a: StopArgs) -> Result<Done<StopResult>, ToolError> {
    let selectors = [a.id.is_some(), a.name.is_some(), a.session.is_some(), a.all.unwrap_or(false)];
    if selectors.iter().filter(|s| **s).count() != 1 {
        return Err("Give exactly one of `id`, `name`, `session` or `all: true`.".into());
    }
    let targets: Vec<Entry> = if let Some(k) = a.id.as_ref().or(a.name.as_ref()) {
        vec![find(&ctx.reg, k)?]
    } else {
        let session = a.session.unwrap_or_else(|| ctx.session.clone());
        manager::stop_selection(&ctx.reg, Some(&session)).0
    };
    if targets.is_empty() {
        return Ok(Done::ok(
            StopResult { stopped: Vec::new(), truncated: None },
            "No running processes to stop.".into(),
        ));
    }
    let busy = news::busy(targets.iter().map(|e| e.id.clone()));
    let results = manager::stop_many(&ctx.reg, &targets, None);
    let mut stopped = Vec::new();
    let mut text = Vec::new();
    let mut is_error = false;
    let mut told = Vec::new();
    for (e, r) in targets.iter().zip(results) {
        match r {
            Ok(o) => {
                let failure = sheepdog::cleanup::failure_line(&o.entry);
                let mut lines = vec![o.headline()];
                if let Some(line) = &o.not_signalled {
                    lines.push(line.clone());
                } else if !o.tree_gone {
                    lines.push(format!("The tree of {} was not confirmed gone.", o.entry.label()));
                }
                if let Some(f) = &failure {
                    lines.push(f.clone());
                }
                let ok = o.tree_gone && failure.is_none();
                is_error |= !ok;
                text.extend(lines.iter().cloned());
                let cleanup_result = o.entry.cleanup_result.as_ref().map(|r| CleanupOutcome {
                    exit_code: r.exit_code,
                    signal: r.signal.clone(),
                    timed_out: r.timed_out,
                    duration_ms: r.duration_ms,
                    output: cut_lines(&r.output, RESULT_LINES),
                });
                if failure.is_some()
                    && let Some(r) = &cleanup_result
                    && !r.output.is_empty()
                {
                    text.push("Cleanup output:".into());
                    text.extend(r.output.iter().map(|l| format!("    {l}")));
                }
                told.push(o.entry.id.clone());
                stopped.push(StopItem {
                    process: proc_as(&ctx.reg, &o.entry, o.entry.status, false),
                    lines,
                    already_finished: o.already_finished,
                    tree_gone: o.tree_gone,
                    ok,
                    cleanup_error: failure,
                    cleanup_result,
                });
            }
            Err(err) => {
                is_error = true;
                text.push(sentence(&format!("unable to stop {}: {err}", e.label())));
            }
        }
    }
    Ok(Done {
        result: StopResult { stopped, truncated: None },
        text: text.join("\n"),
        is_error,
        next: None,
        told,
        busy: Some(busy),
    })
}

fn update(ctx: &Ctx, a: UpdateArgs) -> Result<Done<UpdateResult>, ToolError> {
    if a.cleanup.is_none() && a.name.is_none() {
        return Err("Nothing to update: give `cleanup` (an object, or null to remove it) or `name`.".into());
    }
    if let Some(n) = &a.name {
        sheepdog::entry::check_name(n).map_err(|e| sentence(&e))?;
    }
    if let Some(Some(c)) = &a.cleanup
        && c.command.trim().is_empty()
    {
        return Err("`cleanup.command` is empty: give a command, or `cleanup: null` to remove the cleanup.".into());
    }
    let e = find(&ctx.reg, &a.id)?;
    let req = UpdateRequest {
        cleanup: a.cleanup.as_ref().map(|c| c.as_ref().map(|c| c.command.clone())),
        cleanup_timeout: a
            .cleanup
            .as_ref()
            .and_then(|c| c.as_ref())
            .and_then(|c| c.timeout_ms)
            .map(Duration::from_millis),
        name: a.name,
    };
    let e = manager::update(&ctx.reg, &e, &req).map_err(|e| sentence(&e.to_string()))?;
    let what = match &a.cleanup {
        Some(None) => "; cleanup removed".to_string(),
        Some(Some(c)) => format!("; cleanup: sh -c {:?}", c.command),
        None => String::new(),
    };
    Ok(Done::ok(UpdateResult { process: proc_of(&ctx.reg, &e, false) }, format!("Updated {}{what}.", e.label())))
}

fn clear(ctx: &Ctx, a: ClearArgs) -> Result<Done<ClearResult>, ToolError> {
    let force = a.force.unwrap_or(false);
    let targets: Vec<Entry> = match (a.ids, a.finished.unwrap_or(false)) {
        (Some(_), true) => return Err("Give either `ids` or `finished: true`, not both.".into()),
        (Some(ids), false) if !ids.is_empty() => {
            let mut out: Vec<Entry> = Vec::new();
            for k in &ids {
                let e = find(&ctx.reg, k)?;
                if !out.iter().any(|x| x.id == e.id) {
                    out.push(e);
                }
            }
            out
        }
        (None, true) => {
            let (entries, _) = ctx.reg.list();
            let census = OnceCell::new();
            entries
                .into_iter()
                .filter(|e| e.session_id.as_deref() == Some(ctx.session.as_str()))
                .filter(|e| inspect::live_status(e, &census).is_finished())
                .collect()
        }
        _ => return Err("Give `ids` (an array of ids or names) or `finished: true`.".into()),
    };
    let mut cleared = Vec::new();
    let mut refused = Vec::new();
    for e in &targets {
        let last = proc_as(&ctx.reg, e, inspect::live_status(e, &OnceCell::new()), false);
        match manager::clear(&ctx.reg, e, force) {
            Ok(()) => cleared.push(last),
            Err(err) => refused.push(Refusal { id: e.id.clone(), message: sentence(&err.to_string()) }),
        }
    }
    let mut text: Vec<String> = cleared.iter().map(|p| format!("Cleared {}.", p.id)).collect();
    text.extend(refused.iter().map(|r| r.message.clone()));
    if text.is_empty() {
        text.push("Nothing to clear.".into());
    }
    let is_error = !refused.is_empty();
    Ok(Done {
        result: ClearResult { cleared, refused, truncated: None },
        text: text.join("\n"),
        is_error,
        next: None,
        told: Vec::new(),
        busy: None,
    })
}

fn write(ctx: &Ctx, a: WriteArgs) -> Result<Done<WriteResult>, ToolError> {
    let end = a.end.unwrap_or(false);
    if a.input.is_empty() && !end {
        return Err("`input` is empty: give the text to write (with its newline), or `end: true`.".into());
    }
    let e = find(&ctx.reg, &a.id)?;
    let status = inspect::live_status(&e, &OnceCell::new());
    let finished = status.is_finished().then(|| sheepdog::view::status_text(&e, status));
    let n = manager::send(&ctx.reg, &e, finished, a.input.as_bytes(), end).map_err(|err| match err {
        manager::SendError::NoPipe(l) => {
            format!("{l} was not started with a stdin pipe (its stdin is /dev/null): start it with `stdin: \"pipe\"`.")
        }
        err => sentence(&err.to_string()),
    })?;
    let text = format!("Wrote {n} bytes to {}{}.", e.label(), if end { " and closed its stdin" } else { "" });
    let mut done = Done::ok(WriteResult { id: e.id.clone(), bytes: n, ended: end }, text);
    done.next = Some(format!("{} for its answer", call_hint("process_logs", json!({"id": e.id, "tail": 10}))));
    Ok(done)
}
