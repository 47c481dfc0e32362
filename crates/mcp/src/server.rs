//! The server: its context, the router of the tools and what every tool shares (the compact
//! entry [`Proc`], the news envelope [`WithNews`], the bounds and the error sentences). Each
//! tool lives in `crate::tools`, one file each: one typed argument struct (camelCase JSON; doc
//! comments become the schema's descriptions), its handler, and one typed result struct (its
//! `outputSchema`, see [`crate::schema`]); a handler only checks input, calls one library
//! operation, and renders.
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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, JsonObject, ServerCapabilities, ServerConfig};
use rmcp::{ErrorData, ServerHandler, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::news::{self, Finished};
use crate::schema::{input, output};
use crate::tools;
use sheepdog::entry::Entry;
use sheepdog::logread;
use sheepdog::manager;
use sheepdog::os::Pid;
use sheepdog::ready::ReadyOutcome;
use sheepdog::registry::Registry;
use sheepdog::status::Status;
use sheepdog::view::{EntryView, entry_view, view_with_status};

/// What every tool call needs: the registry, the agent that owns what is started, and the
/// default session derived from it.
pub struct Ctx {
    pub reg: Registry,
    pub owner: Option<Pid>,
    pub session: String,
}

pub(crate) static MUTATIONS: AtomicUsize = AtomicUsize::new(0);

/// Tool calls that change processes (start, stop, restart, update, clear, write) still running.
pub fn mutations_in_flight() -> usize {
    MUTATIONS.load(Ordering::SeqCst)
}

pub(crate) struct Mutation;

impl Mutation {
    pub(crate) fn begin() -> Mutation {
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
pub(crate) static SUPERVISORS: Mutex<Vec<Pid>> = Mutex::new(Vec::new());

pub(crate) fn adopt_supervisor(e: &Entry) {
    if let (Some(pid), Ok(mut list)) = (e.supervisor.and_then(|s| Pid::new(s.pid)), SUPERVISORS.lock()) {
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
pub(crate) const CLEANUP_TIMEOUT_MS: u64 = manager::CLEANUP_TIMEOUT_MS;
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
pub(crate) const RESULT_LINES: usize = 10;
/// The most characters of a command a compact view shows: 80.
pub(crate) const COMMAND_MAX: usize = 80;

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
    pub(crate) fn of(v: &EntryView, verbose: bool) -> Proc {
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

    pub(crate) fn finished(&self) -> bool {
        Status::parse(&self.status).is_some_and(|s| s.is_finished())
    }
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
    pub(crate) fn of(o: &ReadyOutcome) -> Readiness {
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

pub(crate) fn is_zero(n: &usize) -> bool {
    *n == 0
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
pub(crate) fn proc_of(reg: &Registry, e: &Entry, verbose: bool) -> Proc {
    Proc::of(&entry_view(reg, e, &OnceCell::new()), verbose)
}

/// The compact view with a status already known (a stop's result).
pub(crate) fn proc_as(reg: &Registry, e: &Entry, status: Status, verbose: bool) -> Proc {
    Proc::of(&view_with_status(reg, e, status, false), verbose)
}

/// The view of an entry just started (and maybe waited on until ready), computed on a thread of
/// its own: `ports::listening` reuses a socket table for 200 ms per thread, and the one read
/// during the readiness wait may predate the listen ("Ready (port 8000)" next to `ports: []`).
pub(crate) fn fresh_view(reg: &Registry, e: &Entry) -> EntryView {
    std::thread::scope(|s| s.spawn(|| entry_view(reg, e, &OnceCell::new())).join())
        .unwrap_or_else(|_| entry_view(reg, e, &OnceCell::new()))
}

/// The last `n` lines of an entry's combined log (tags and markers kept), each cut.
pub fn last_lines(reg: &Registry, id: &str, n: usize) -> Vec<String> {
    cut_lines(&logread::last_lines(reg, id, n), n)
}

/// A call the model can make next, as `tool {json}`.
pub(crate) fn call_hint(tool: &str, args: Value) -> String {
    format!("{tool} {args}")
}

/// What one tool call produced before the news is added.
pub struct Done<R> {
    pub(crate) result: R,
    pub(crate) text: String,
    pub(crate) is_error: bool,
    pub(crate) next: Option<String>,
    /// Entries whose end this reply itself reports (not repeated as news).
    pub(crate) told: Vec<String>,
    /// Entries this call acted on, kept from other replies' news until this reply's is made.
    pub(crate) busy: Option<news::Busy>,
}

impl<R> Done<R> {
    pub(crate) fn ok(result: R, text: String) -> Done<R> {
        Done { result, text, is_error: false, next: None, told: Vec::new(), busy: None }
    }
}

/// A sentence for the model.
pub(crate) type ToolError = String;

/// The arguments as `T`; a bad one is a sentence that names the field in plain words.
pub(crate) fn parse<T: DeserializeOwned>(args: JsonObject) -> Result<T, ToolError> {
    serde_path_to_error::deserialize(Value::Object(args)).map_err(|e| {
        let path = e.path().to_string();
        plain_error(if path == "." { "" } else { &path }, &e.inner().to_string())
    })
}

/// serde's message about the field at `path` in words a model can act on, without Rust's type
/// names: "`tail` must be a whole number ≥ 0", "`cleanup.command` is required".
pub(crate) fn plain_error(path: &str, msg: &str) -> String {
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

pub(crate) fn find(reg: &Registry, key: &str) -> Result<Entry, ToolError> {
    reg.find(key).map_err(|e| sentence(&e.to_string()))
}

/// `msg` as one sentence: capitalized (unless it opens with `NAME:`, a name in its own spelling),
/// ending with a period, without Rust's ` (os error N)`.
pub(crate) fn sentence(msg: &str) -> String {
    let mut s = msg.trim().to_string();
    if let Some(at) = s.find(" (os error ")
        && s[at..].contains(')')
    {
        let end = at + s[at..].find(')').unwrap_or(0) + 1;
        s.replace_range(at..end, "");
    }
    // A message that opens with `NAME:` names something in its own spelling (a command, a
    // path, a flag): `definitely-not-a-cmd: command not found` keeps its lowercase.
    let names_something = s.split_whitespace().next().is_some_and(|w| w.len() > 1 && w.ends_with(':'));
    if !names_something && let Some(c) = s.get(..1) {
        s.replace_range(..1, &c.to_uppercase());
    }
    if !s.ends_with(['.', '!', '?']) {
        s.push('.');
    }
    s
}

/// `text` cut at a line boundary to at most [`REPLY_MAX`] bytes, saying so.
pub(crate) fn bound_text(text: String) -> String {
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
pub(crate) fn bound_value(v: &mut Value) -> Option<String> {
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
        input_schema = input::<tools::start::StartArgs>(),
        output_schema = output::<WithNews<tools::start::StartResult>>()
    )]
    async fn process_start(&self, args: JsonObject) -> Result<CallToolResult, ErrorData> {
        self.call(args, tools::start::start, true).await
    }

    /// List managed processes of this agent's session (or another, or every session with `*`):
    /// status, pid, ports, exit code, command, cleanup.
    #[tool(
        name = "process_list",
        input_schema = input::<tools::list::ListArgs>(),
        output_schema = output::<WithNews<tools::list::ListResult>>(),
        annotations(read_only_hint = true)
    )]
    async fn process_list(&self, args: JsonObject) -> Result<CallToolResult, ErrorData> {
        self.call(args, tools::list::list, false).await
    }

    /// Read a process's output: the last lines, lines matching a pattern, the whole log from the
    /// start page by page (`from: "start"`, then each `cursor`), or with `cursor` only what came
    /// since the previous call. At most `maxBytes` per call.
    #[tool(
        name = "process_logs",
        input_schema = input::<tools::logs::LogsArgs>(),
        output_schema = output::<WithNews<tools::logs::LogsResult>>(),
        annotations(read_only_hint = true)
    )]
    async fn process_logs(&self, args: JsonObject) -> Result<CallToolResult, ErrorData> {
        self.call(args, tools::logs::logs, false).await
    }

    /// Wait (at most 45 s) for processes to finish; use this rather than `sleep`. Without
    /// `ids`, waits for this agent's running processes started without `ready` (builds, tests),
    /// not for its servers. Never kills on timeout: call again, or process_stop.
    #[tool(
        name = "process_wait",
        input_schema = input::<tools::wait::WaitArgs>(),
        output_schema = output::<WithNews<tools::wait::WaitResult>>(),
        annotations(read_only_hint = true)
    )]
    async fn process_wait(&self, args: JsonObject) -> Result<CallToolResult, ErrorData> {
        self.call(args, tools::wait::wait, false).await
    }

    /// Stop a process (or a session's): its whole tree (SIGTERM, a grace, SIGKILL), then its
    /// cleanup command. isError when the tree was not confirmed gone or the cleanup failed.
    #[tool(
        name = "process_stop",
        input_schema = input::<tools::stop::StopArgs>(),
        output_schema = output::<WithNews<tools::stop::StopResult>>(),
        annotations(destructive_hint = true)
    )]
    async fn process_stop(&self, args: JsonObject) -> Result<CallToolResult, ErrorData> {
        self.call(args, tools::stop::stop, true).await
    }

    /// Restart a process: stop its whole tree (and cleanup), then start the same command again
    /// under a new id.
    #[tool(
        name = "process_restart",
        input_schema = input::<tools::restart::RestartArgs>(),
        output_schema = output::<WithNews<tools::restart::RestartResult>>()
    )]
    async fn process_restart(&self, args: JsonObject) -> Result<CallToolResult, ErrorData> {
        self.call(args, tools::restart::restart, true).await
    }

    /// Attach, replace or remove (`cleanup: null`) a process's cleanup command, or rename it.
    #[tool(
        name = "process_update",
        input_schema = input::<tools::update::UpdateArgs>(),
        output_schema = output::<WithNews<tools::update::UpdateResult>>()
    )]
    async fn process_update(&self, args: JsonObject) -> Result<CallToolResult, ErrorData> {
        self.call(args, tools::update::update, true).await
    }

    /// Remove finished processes and their logs. Refuses running ones (stop them first).
    #[tool(
        name = "process_clear",
        input_schema = input::<tools::clear::ClearArgs>(),
        output_schema = output::<WithNews<tools::clear::ClearResult>>(),
        annotations(destructive_hint = true)
    )]
    async fn process_clear(&self, args: JsonObject) -> Result<CallToolResult, ErrorData> {
        self.call(args, tools::clear::clear, true).await
    }

    /// Write to the stdin of a process started with `stdin: "pipe"` (answer a prompt such as
    /// `Proceed? [y/N]`, feed a REPL); `end: true` then closes it. Fails when it was started
    /// without a pipe or has exited.
    #[tool(
        name = "process_write",
        input_schema = input::<tools::write::WriteArgs>(),
        output_schema = output::<WithNews<tools::write::WriteResult>>()
    )]
    async fn process_write(&self, args: JsonObject) -> Result<CallToolResult, ErrorData> {
        self.call(args, tools::write::write, true).await
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

/// What `process_start` and `process_restart` say of `e`'s readiness: the library's sentence,
/// then what to do next in this server's tools.
pub(crate) fn ready_text(o: &ReadyOutcome, e: &Entry) -> String {
    // The sentence is the library's, as the CLI and `top` say it (cut as every line of a
    // reply is); what to do next is this server's, in its tools' names.
    let said = cut_line(&o.sentence(&e.label()));
    match o {
        ReadyOutcome::Ready { .. } => said,
        ReadyOutcome::Exited { .. } => format!("{said} Its last lines:"),
        ReadyOutcome::TimedOut { .. } => format!("{said} process_logs shows why, process_stop ends it."),
    }
}
