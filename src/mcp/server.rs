//! The tools. Each has one typed argument struct (camelCase JSON; doc comments become the
//! schema's descriptions) and one typed result struct (its `outputSchema`), and calls one library
//! operation; this file only checks input, calls, and renders.
//!
//! Every result carries `structuredContent`, a short text for the model (the first content
//! block) and the JSON copy (the second), plus `finished` news ([`crate::news`]). Bad input is a
//! tool error (`isError`) with one sentence the model can act on, never a protocol error:
//! arguments are deserialized here, not by the framework, so a wrong type is such a sentence too.
//!
//! Library calls block (stops wait seconds), so each runs on tokio's blocking pool.

use std::cell::OnceCell;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rmcp::handler::server::common::{schema_for_empty_input, schema_for_input, schema_for_output};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, JsonObject, ServerCapabilities, ServerConfig};
use rmcp::{ErrorData, ServerHandler, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use sheepdog::logread::{self, Cursor, LogQuery, LogStream};
use sheepdog::manager::{self, StartRequest, UpdateRequest, Waited};
use sheepdog::os::Census;
use sheepdog::os::Pid;
use sheepdog::ready::{DEFAULT_READY_TIMEOUT_MS, ReadyOutcome, ReadySpec};
use sheepdog::registry::{Cleanup, Entry, Registry};
use sheepdog::status::Status;
use sheepdog::stop::StopPolicy;
use sheepdog::view::{EntryView, entry_view, view_with_status};

use crate::news::{self, Finished};

/// What every tool call needs: the registry, the agent that owns what is started, and the
/// default session derived from it.
pub struct Ctx {
    pub reg: Registry,
    pub owner: Option<Pid>,
    pub session: String,
}

static MUTATIONS: AtomicUsize = AtomicUsize::new(0);

/// Tool calls that change processes (start, stop, restart, update, clear) still running.
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

/// Default timeout of a cleanup command: 10 000 ms (as `sheepdog start --cleanup`).
const CLEANUP_TIMEOUT_MS: u64 = manager::CLEANUP_TIMEOUT_MS;
/// The longest any wait inside one tool call lasts: 45 000 ms, under the 60 s call timeout
/// common among clients, so no call outlives its client's patience.
pub const WAIT_CAP_MS: u64 = 45_000;

/// The instructions sent at initialization: when to use this server.
pub const INSTRUCTIONS: &str = "sheepdog runs background processes safely. Anything slow or that does \
not exit by itself (dev servers, watchers, long builds and test runs, tunnels, containers) goes through \
process_start, never `&`, `nohup`, `setsid` or `disown` in a shell tool: a process started here is \
stopped with its whole tree (and its cleanup command) when you stop it or when this agent exits, its \
output is kept (process_logs, with a cursor), and its id stays valid when the server restarts. Give \
process_start a `ready` check (a port, a log pattern) instead of sleeping, and use process_wait rather \
than `sleep` to wait for a process to finish. If a command starts work outside its own tree \
(`docker run -d`, `ssh -f`), give it a `cleanup` command. Every result lists in `finished` the \
processes of this session that ended since the last reply.";

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
    /// Ids (proc_N) or names to wait for.
    pub ids: Option<Vec<String>>,
    /// Or every running process of this session.
    pub session: Option<String>,
    /// Return when any one has finished (default: when all have).
    pub any: Option<bool>,
    /// How long to wait in milliseconds (default and at most 45000). Never kills on timeout.
    pub timeout_ms: Option<u64>,
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

/// Arguments of `process_update`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateArgs {
    /// Id (proc_N) or name.
    pub id: String,
    /// Attach or replace the cleanup command, or `null` to remove it.
    #[serde(default, deserialize_with = "explicit_null")]
    #[schemars(with = "Option<CleanupArg>")]
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

// ---------------------------------------------------------------------------------------------
// Results

/// One managed process: the entry view every `--json` of the CLI shows (`sheepdog ps --json`);
/// documented here are the fields an agent needs, more are present.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)] // only its schema is used: the value is `sheepdog::view::EntryView`
pub struct ProcessView {
    /// `proc_N`, stable across server restarts.
    pub id: String,
    /// The name given at start, else the program's name.
    pub name: String,
    /// True if `name` was given at start.
    pub name_given: bool,
    /// starting, running, orphaned (supervisor gone, tree alive), exited, killed, stopped,
    /// timedOut, reaped, lost.
    pub status: String,
    /// The human form: `running`, `exited (0)`, `killed (SIGKILL)`, `timed out after 2s`.
    pub status_text: String,
    /// The exit code, when it exited by itself.
    pub exit_code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<String>,
    /// The command's pid (its process group leader).
    pub pid: Option<i32>,
    /// The process whose death stops it (the agent); null with `keep: true`.
    pub owner_pid: Option<i32>,
    pub session_id: Option<String>,
    /// Unix ms.
    pub started_at: u64,
    /// Unix ms.
    pub ended_at: Option<u64>,
    /// The command as one short line.
    pub command_preview: String,
    pub argv: Vec<String>,
    pub cwd: String,
    /// Keys of its extra environment (values are never shown).
    pub env_keys: Vec<String>,
    /// TCP ports its live tree listens on.
    pub ports: Vec<u16>,
    /// `{command, timeoutMs}` or null.
    pub cleanup: Option<CleanupDoc>,
    /// What the cleanup did once it ran: exitCode, signal, timedOut, durationMs, output.
    pub cleanup_result: Option<Value>,
    /// Paths of its `stdout`, `stderr` and `combined` logs.
    pub logs: Value,
    /// The tier that keeps its tree: `cgroup`, `subreaper` or `group`.
    pub containment: Option<String>,
    /// While it runs in the cgroup tier: `{cpuMs, memoryBytes, tasks}` (null where the
    /// controller is missing); null otherwise.
    pub usage: Option<Value>,
}

/// A cleanup command as configured.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub struct CleanupDoc {
    /// Run with `sh -c`.
    pub command: String,
    /// Its bound, ms.
    pub timeout_ms: u64,
}

/// One nudge (as `sheepdog start --json` shows it).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)] // only its schema is used: the value is `sheepdog::view::Nudge`
pub struct WarningDoc {
    /// `outsideTree` (stopping the tree will not end the work: give a cleanup) or
    /// `stoppedOnExit` (the work is stopped as soon as the command exits).
    pub kind: String,
    /// One sentence.
    pub message: String,
    /// What was found (`nohup, &`).
    pub matched: String,
}

/// How a readiness wait went (as `sheepdog start --json` shows it).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)] // only its schema is used: the value is `sheepdog::ready::ReadyReport`
pub struct ReadyDoc {
    /// True when the condition was met.
    pub ok: bool,
    /// How long the wait took, ms.
    pub after_ms: u64,
    /// The matching log line, or `port N`; null when not ready.
    pub matched: Option<String>,
    /// The port that made it ready.
    pub port: Option<u16>,
    /// `exited` (it ended before it was ready) or `timeout` (it keeps running) when not ok.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Its last lines of output when it exited before it was ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Vec<String>>,
}

/// A result with the news every reply carries.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WithNews<R> {
    #[serde(flatten)]
    pub result: R,
    /// Processes of this agent that ended since the last reply that reported them (each once).
    pub finished: Vec<Finished>,
}

/// Result of `process_start`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StartResult {
    /// The new process: its entry view's fields, as `sheepdog start --json` prints them.
    #[serde(flatten)]
    #[schemars(with = "ProcessView")]
    pub process: Value,
    /// Nudges, as the CLI gives them: the command looks like its work outlives its tree (or
    /// dies with it) and it has no cleanup.
    #[schemars(with = "Vec<WarningDoc>")]
    pub warnings: Vec<Value>,
    /// The readiness check (null when none was asked for), as `start --json` has it.
    #[schemars(with = "Option<ReadyDoc>")]
    pub ready: Option<Value>,
    /// Its last lines of output, when it already ended.
    pub last_lines: Option<Vec<String>>,
}

/// Result of `process_list`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListResult {
    /// Entry views, oldest first (as `sheepdog ps --json`).
    #[schemars(with = "Vec<ProcessView>")]
    pub entries: Vec<Value>,
}

/// Result of `process_logs`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LogsResult {
    pub id: String,
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
    /// Its entry view.
    #[serde(flatten)]
    #[schemars(with = "ProcessView")]
    pub process: Value,
    /// True when it finished (cleanup included); false: still running.
    pub done: bool,
    /// Its last lines of output (`[out] `/`[err] ` lines).
    pub last_lines: Vec<String>,
}

/// Result of `process_wait`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaitResult {
    /// True when the wait was satisfied (all done, or any with `any`); false on timeout.
    pub done: bool,
    /// One per process, in the order asked (as `sheepdog wait --json`).
    pub waited: Vec<WaitItem>,
}

/// One stopped process.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StopItem {
    /// Its entry view (`cleanupResult` has what the cleanup did, `output` its last 20 lines).
    #[serde(flatten)]
    #[schemars(with = "ProcessView")]
    pub process: Value,
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
    /// The cleanup's failure line, null when it succeeded or there was none.
    pub cleanup_error: Option<String>,
}

/// Result of `process_stop`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StopResult {
    pub stopped: Vec<StopItem>,
}

/// Result of `process_restart`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestartResult {
    /// The new process (a new id, `restartOf` the old), started after the old tree was gone.
    #[serde(flatten)]
    #[schemars(with = "ProcessView")]
    pub process: Value,
    /// The id it replaced.
    pub replaced: String,
    /// The stop of the old one, as `process_stop` says it (`Stopped web (proc_4).`, and a
    /// cleanup failure line when there was one).
    pub lines: Vec<String>,
    /// The readiness check (the same as at its start), when it had one.
    #[schemars(with = "Option<ReadyDoc>")]
    pub ready: Option<Value>,
}

/// Result of `process_update`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateResult {
    /// The entry view after the change.
    #[serde(flatten)]
    #[schemars(with = "ProcessView")]
    pub process: Value,
}

/// A refusal in `process_clear`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Refusal {
    pub id: String,
    pub message: String,
}

/// Result of `process_clear`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClearResult {
    /// The entries removed with their logs (their last views, as `sheepdog clear --json`).
    #[schemars(with = "Vec<ProcessView>")]
    pub cleared: Vec<Value>,
    /// Those that were not: still running, or still running their cleanup.
    pub refused: Vec<Refusal>,
}

// ---------------------------------------------------------------------------------------------
// Rendering helpers

/// An entry as every `--json` shows it ([`sheepdog::view::EntryView`]), status as the kernel
/// says now.
fn view(reg: &Registry, e: &Entry, census: &OnceCell<Census>) -> Value {
    serde_json::to_value(entry_view(reg, e, census)).unwrap_or(Value::Null)
}

/// `v` as a JSON object without its `ready` (the readiness options): the results that carry
/// a readiness report under that name.
fn without_ready(v: &EntryView) -> Value {
    let mut v = serde_json::to_value(v).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        m.remove("ready");
    }
    v
}

/// The view with a status already known (a stop's result).
fn view_as(reg: &Registry, e: &Entry, status: Status) -> Value {
    serde_json::to_value(view_with_status(reg, e, status, false)).unwrap_or(Value::Null)
}

/// The view of an entry just started (and maybe waited on until ready), computed on a thread of
/// its own: `ports::listening` reuses a socket table for 200 ms per thread, and the one read
/// during the readiness wait may predate the listen ("Ready (port 8000)" next to `ports: []`).
fn fresh_view(reg: &Registry, e: &Entry) -> EntryView {
    std::thread::scope(|s| s.spawn(|| entry_view(reg, e, &OnceCell::new())).join())
        .unwrap_or_else(|_| entry_view(reg, e, &OnceCell::new()))
}

/// The last `n` lines of an entry's combined log (tags and markers kept).
pub fn last_lines(reg: &Registry, id: &str, n: usize) -> Vec<String> {
    logread::last_lines(reg, id, n)
}

fn entry_line(v: &EntryView) -> String {
    let pid = v.pid.filter(|_| !v.status.is_finished()).map(|p| format!(" pid {p}")).unwrap_or_default();
    let ports = if v.ports.is_empty() {
        String::new()
    } else {
        format!(" ports {}", v.ports.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(","))
    };
    let since = v.ended_at.unwrap_or_else(sheepdog::registry::now_ms).saturating_sub(v.started_at);
    let age = match since / 1000 {
        s @ 0..60 => format!("{s}s"),
        s @ 60..3600 => format!("{}m", s / 60),
        s @ 3600..86400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    };
    let age = if v.status.is_finished() { format!(", ran {age}") } else { format!(", up {age}") };
    format!("{} {}: {}{pid}{ports}{age} — {}", v.id, v.name, v.status_text, v.command_preview)
}

/// What one tool call produced before the news is added.
pub struct Done<R> {
    result: R,
    text: String,
    is_error: bool,
    /// Entries whose end this reply itself reports (not repeated as news).
    told: Vec<String>,
    /// Entries this call acted on, kept from other replies' news until this reply's is made.
    busy: Option<news::Busy>,
}

impl<R> Done<R> {
    fn ok(result: R, text: String) -> Done<R> {
        Done { result, text, is_error: false, told: Vec::new(), busy: None }
    }
}

/// A sentence for the model.
type ToolError = String;

fn parse<T: DeserializeOwned>(args: JsonObject) -> Result<T, ToolError> {
    serde_json::from_value(Value::Object(args)).map_err(|e| format!("Invalid arguments: {e}."))
}

fn find(reg: &Registry, key: &str) -> Result<Entry, ToolError> {
    reg.find(key).map_err(|e| sentence(&e.to_string()))
}

/// `msg` as one sentence: capitalized, ending with a period.
fn sentence(msg: &str) -> String {
    let mut s = msg.trim().to_string();
    if let Some(c) = s.get(..1) {
        s.replace_range(..1, &c.to_uppercase());
    }
    if !s.ends_with(['.', '!', '?']) {
        s.push('.');
    }
    s
}

fn input<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    schema_for_input::<T>().unwrap_or_else(|_| schema_for_empty_input())
}

fn output<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    schema_for_output::<WithNews<T>>()
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
    /// Parses the arguments, runs `op` on the blocking pool, adds the news, and renders.
    async fn call<A, R>(
        &self,
        args: JsonObject,
        op: fn(&Ctx, A) -> Result<Done<R>, ToolError>,
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
            let mut done = op(&ctx, a)?;
            let busy = done.busy.take();
            let finished = news::collect(&ctx, &done.told);
            // Only now may other replies report what this call acted on.
            drop(busy);
            Ok::<_, ToolError>((done, finished))
        })
        .await;
        let (done, finished) = match joined {
            Ok(Ok(x)) => x,
            Ok(Err(msg)) => return Ok(CallToolResult::error(vec![ContentBlock::text(msg)])),
            Err(e) => return Err(ErrorData::internal_error(format!("the tool failed: {e}"), None)),
        };
        let mut text = done.text;
        let news_text = news::text(&finished);
        if !news_text.is_empty() {
            if !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&news_text);
        }
        let value = serde_json::to_value(WithNews { result: done.result, finished })
            .map_err(|e| ErrorData::internal_error(format!("unable to render the result: {e}"), None))?;
        let mut result = if done.is_error {
            CallToolResult::structured_error(value.clone())
        } else {
            CallToolResult::structured(value.clone())
        };
        result.content = vec![ContentBlock::text(text.trim_end().to_string()), ContentBlock::text(value.to_string())];
        Ok(result)
    }
}

#[tool_router]
impl Sheepdog {
    pub fn new(ctx: Ctx) -> Sheepdog {
        Sheepdog { ctx: Arc::new(ctx), tool_router: Self::tool_router() }
    }

    /// Start a background process (dev server, watcher, build, test run) under its own
    /// supervisor. Returns once it really runs; with `ready`, once it is ready (or ended, or the
    /// ready timeout passed). Use this instead of `&`, `nohup` or `setsid` in a shell.
    #[tool(
        name = "process_start",
        input_schema = input::<StartArgs>(),
        output_schema = output::<StartResult>()
    )]
    async fn process_start(&self, args: JsonObject) -> Result<CallToolResult, ErrorData> {
        self.call(args, start).await
    }

    /// List managed processes of this agent's session (or another, or every session with `*`):
    /// status, pid, age, exit code, command, cleanup.
    #[tool(
        name = "process_list",
        input_schema = input::<ListArgs>(),
        output_schema = output::<ListResult>(),
        annotations(read_only_hint = true)
    )]
    async fn process_list(&self, args: JsonObject) -> Result<CallToolResult, ErrorData> {
        self.call(args, list).await
    }

    /// Read a process's output: the last lines, lines matching a pattern, or with `cursor` only
    /// what came since the previous call. At most `maxBytes` per call.
    #[tool(
        name = "process_logs",
        input_schema = input::<LogsArgs>(),
        output_schema = output::<LogsResult>(),
        annotations(read_only_hint = true)
    )]
    async fn process_logs(&self, args: JsonObject) -> Result<CallToolResult, ErrorData> {
        self.call(args, logs).await
    }

    /// Wait (at most 45 s) for processes to finish; use this rather than `sleep`. Never kills
    /// on timeout: call again, or process_stop.
    #[tool(
        name = "process_wait",
        input_schema = input::<WaitArgs>(),
        output_schema = output::<WaitResult>(),
        annotations(read_only_hint = true)
    )]
    async fn process_wait(&self, args: JsonObject) -> Result<CallToolResult, ErrorData> {
        self.call(args, wait).await
    }

    /// Stop a process (or a session's): its whole tree (SIGTERM, a grace, SIGKILL), then its
    /// cleanup command. isError when the tree was not confirmed gone or the cleanup failed.
    #[tool(
        name = "process_stop",
        input_schema = input::<StopArgs>(),
        output_schema = output::<StopResult>(),
        annotations(destructive_hint = true)
    )]
    async fn process_stop(&self, args: JsonObject) -> Result<CallToolResult, ErrorData> {
        let _m = Mutation::begin();
        self.call(args, stop).await
    }

    /// Restart a process: stop its whole tree (and cleanup), then start the same command again
    /// under a new id.
    #[tool(
        name = "process_restart",
        input_schema = input::<RestartArgs>(),
        output_schema = output::<RestartResult>()
    )]
    async fn process_restart(&self, args: JsonObject) -> Result<CallToolResult, ErrorData> {
        let _m = Mutation::begin();
        self.call(args, restart).await
    }

    /// Attach, replace or remove (`cleanup: null`) a process's cleanup command, or rename it.
    #[tool(
        name = "process_update",
        input_schema = input::<UpdateArgs>(),
        output_schema = output::<UpdateResult>()
    )]
    async fn process_update(&self, args: JsonObject) -> Result<CallToolResult, ErrorData> {
        let _m = Mutation::begin();
        self.call(args, update).await
    }

    /// Remove finished processes and their logs. Refuses running ones (stop them first).
    #[tool(
        name = "process_clear",
        input_schema = input::<ClearArgs>(),
        output_schema = output::<ClearResult>(),
        annotations(destructive_hint = true)
    )]
    async fn process_clear(&self, args: JsonObject) -> Result<CallToolResult, ErrorData> {
        let _m = Mutation::begin();
        self.call(args, clear).await
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

fn start(ctx: &Ctx, a: StartArgs) -> Result<Done<StartResult>, ToolError> {
    let _m = Mutation::begin();
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
        sheepdog::registry::check_name(n).map_err(|e| sentence(&e))?;
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
    let ready = match a.ready {
        Some(r) => Some(ready_spec(r)?),
        None => None,
    };
    // The tier as the CLI picks it: $SHEEPDOG_CONTAINMENT, else the strongest the host allows.
    let containment = sheepdog::cgroup::Mode::from_env().map_err(|e| sentence(&e))?;
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
        argv: argv_os,
    };
    let manager::Started { entry: e, ready: outcome, nudges } =
        manager::start_ready(&ctx.reg, req).map_err(|e| sentence(&e.to_string()))?;
    let e = ctx.reg.read(&e.id).unwrap_or(e);
    let v = fresh_view(&ctx.reg, &e);
    let mut text = format!("Started {}{}.", e.label(), e.pid.map(|p| format!(", pid {p}")).unwrap_or_default());
    let mut told = Vec::new();
    let mut tail = None;
    if let Some(o) = &outcome {
        text.push('\n');
        text.push_str(&ready_text(o, &e));
        if let ReadyOutcome::Exited { last_lines, .. } = o {
            tail = Some(last_lines.clone());
        }
    }
    if v.status.is_finished() {
        told.push(e.id.clone());
        if tail.is_none() {
            text.push_str(&format!("\nIt already ended: {}.", v.status_text));
            tail = Some(sheepdog::ready::output_tail(&ctx.reg, &e.id));
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
    let warnings = nudges.iter().map(|w| serde_json::to_value(w).unwrap_or(Value::Null)).collect();
    let ready = outcome.as_ref().map(|o| serde_json::to_value(o.report()).unwrap_or(Value::Null));
    let process = without_ready(&v);
    Ok(Done {
        result: StartResult { process, warnings, ready, last_lines: tail },
        text,
        is_error: false,
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
            format!("Ready after {after_ms} ms ({}).", matched.as_deref().unwrap_or("condition met"))
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
    let listing = sheepdog::view::list(&ctx.reg, &query);
    let lines: Vec<String> = listing.rows.iter().map(entry_line).collect();
    let processes: Vec<Value> = listing.rows.iter().map(|v| serde_json::to_value(v).unwrap_or(Value::Null)).collect();
    let text = if lines.is_empty() { "No processes.".to_string() } else { lines.join("\n") };
    Ok(Done::ok(ListResult { entries: processes }, text))
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
    let status = manager::live_status(&ctx.reg.read(&e.id).unwrap_or(e.clone()), &OnceCell::new());
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
    let result = LogsResult {
        id: e.id.clone(),
        stream: stream.as_str().into(),
        text,
        cursor: chunk.cursor,
        truncated: chunk.truncated,
        eof: chunk.eof,
        status: status.as_str().into(),
    };
    Ok(Done::ok(result, summary))
}

fn wait(ctx: &Ctx, a: WaitArgs) -> Result<Done<WaitResult>, ToolError> {
    let timeout = a.timeout_ms.unwrap_or(WAIT_CAP_MS).min(WAIT_CAP_MS);
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
            entries
                .into_iter()
                .filter(|e| e.session_id.as_deref() == Some(session.as_str()))
                .filter(|e| !manager::live_status(e, &census).is_finished())
                .collect()
        }
    };
    if targets.is_empty() {
        return Ok(Done::ok(WaitResult { done: true, waited: Vec::new() }, "No running processes to wait for.".into()));
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
        let status = manager::live_status(&cur, &OnceCell::new());
        let done = done || status.is_finished();
        let status_text = sheepdog::view::status_text(&cur, status);
        if done {
            told.push(cur.id.clone());
            lines.push(format!("{}: {status_text}.", cur.label()));
        } else {
            lines.push(format!("{}: still {status_text}.", cur.label()));
        }
        let last = sheepdog::ready::output_tail(&ctx.reg, &cur.id);
        if done {
            lines.extend(last.iter().rev().take(5).rev().map(|l| format!("    {l}")));
        }
        items.push(WaitItem { process: view_as(&ctx.reg, &cur, status), done, last_lines: last });
    }
    let all_done = if any { items.iter().any(|i| i.done) } else { items.iter().all(|i| i.done) };
    if !all_done {
        lines.push(format!(
            "Still running after {}; nothing was stopped (call process_wait again, or process_stop).",
            sheepdog::duration::format(Duration::from_millis(timeout))
        ));
    }
    Ok(Done {
        result: WaitResult { done: all_done, waited: items },
        text: lines.join("\n"),
        is_error: false,
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
    let mut lines = vec![format!("Stopped {}.", r.stopped.entry.label())];
    if let Some(f) = sheepdog::cleanup::failure_line(&r.stopped.entry) {
        lines.push(f);
    }
    let e = ctx.reg.read(&r.entry.id).unwrap_or(r.entry);
    let v = fresh_view(&ctx.reg, &e);
    let mut text = lines.join("\n");
    text.push_str(&format!("\nStarted {}{}.", e.label(), e.pid.map(|p| format!(", pid {p}")).unwrap_or_default()));
    if let Some(o) = &r.ready {
        text.push('\n');
        text.push_str(&ready_text(o, &e));
        if let ReadyOutcome::Exited { last_lines, .. } = o {
            for l in last_lines {
                text.push_str(&format!("\n    {l}"));
            }
        }
    }
    let mut told = vec![old.id.clone()];
    if v.status.is_finished() {
        told.push(e.id.clone());
    }
    let result = RestartResult {
        process: without_ready(&v),
        replaced: old.id.clone(),
        lines,
        ready: r.ready.as_ref().map(|o| serde_json::to_value(o.report()).unwrap_or(Value::Null)),
    };
    Ok(Done { result, text, is_error: false, told, busy: Some(busy) })
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
        return Ok(Done::ok(StopResult { stopped: Vec::new() }, "No running processes to stop.".into()));
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
                if failure.is_some()
                    && let Some(r) = &o.entry.cleanup_result
                    && !r.output.is_empty()
                {
                    text.push("Cleanup output:".into());
                    text.extend(r.output.iter().map(|l| format!("    {l}")));
                }
                told.push(o.entry.id.clone());
                stopped.push(StopItem {
                    process: view_as(&ctx.reg, &o.entry, o.entry.status),
                    lines,
                    already_finished: o.already_finished,
                    tree_gone: o.tree_gone,
                    ok,
                    cleanup_error: failure,
                });
            }
            Err(err) => {
                is_error = true;
                text.push(sentence(&format!("unable to stop {}: {err}", e.label())));
            }
        }
    }
    Ok(Done { result: StopResult { stopped }, text: text.join("\n"), is_error, told, busy: Some(busy) })
}

fn update(ctx: &Ctx, a: UpdateArgs) -> Result<Done<UpdateResult>, ToolError> {
    if a.cleanup.is_none() && a.name.is_none() {
        return Err("Nothing to update: give `cleanup` (an object, or null to remove it) or `name`.".into());
    }
    if let Some(n) = &a.name {
        sheepdog::registry::check_name(n).map_err(|e| sentence(&e))?;
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
    Ok(Done::ok(
        UpdateResult { process: view(&ctx.reg, &e, &OnceCell::new()) },
        format!("Updated {}{what}.", e.label()),
    ))
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
                .filter(|e| manager::live_status(e, &census).is_finished())
                .collect()
        }
        _ => return Err("Give `ids` (an array of ids or names) or `finished: true`.".into()),
    };
    let mut cleared = Vec::new();
    let mut refused = Vec::new();
    for e in &targets {
        match manager::clear(&ctx.reg, e, force) {
            Ok(()) => cleared.push(view_as(&ctx.reg, e, manager::live_status(e, &OnceCell::new()))),
            Err(err) => refused.push(Refusal { id: e.id.clone(), message: sentence(&err.to_string()) }),
        }
    }
    let mut text: Vec<String> =
        cleared.iter().map(|v| format!("Cleared {}.", v["id"].as_str().unwrap_or("?"))).collect();
    text.extend(refused.iter().map(|r| r.message.clone()));
    if text.is_empty() {
        text.push("Nothing to clear.".into());
    }
    let is_error = !refused.is_empty();
    Ok(Done { result: ClearResult { cleared, refused }, text: text.join("\n"), is_error, told: Vec::new(), busy: None })
}
