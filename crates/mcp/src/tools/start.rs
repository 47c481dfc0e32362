//! `process_start`: a background process under its own supervisor, returned once it runs (or, with
//! `ready`, once it is ready).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::server::{
    CLEANUP_TIMEOUT_MS, CleanupArg, Ctx, Done, Proc, RESULT_LINES, Readiness, ToolError, WAIT_CAP_MS, adopt_supervisor,
    call_hint, cut_lines, fresh_view, ready_text, sentence,
};
use sheepdog::entry::{Cleanup, ReadySpec};
use sheepdog::manager::{self, StartRequest};
use sheepdog::ready::{DEFAULT_READY_TIMEOUT_MS, ReadyOutcome};
use sheepdog::stop::StopPolicy;
use sheepdog::view;

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
    pub warnings: Vec<view::Nudge>,
    /// Its last lines of output (`[out] `/`[err] `), when it already ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_lines: Option<Vec<String>>,
}

// ---------------------------------------------------------------------------------------------
// The operations (blocking; run on tokio's blocking pool)

/// Linux's bound on one argument of `exec`: 131 072 bytes (`MAX_ARG_STRLEN`, 32 pages), NUL
/// included.
pub(crate) const ARG_STRLEN_MAX: usize = 32 * 4096;

/// Refuses a command `exec` would refuse with E2BIG, in words: its argument (a shell string is
/// one) or arguments and environment together (with the server's own, which the supervisor
/// inherits) over the system's bound.
pub(crate) fn check_length(argv: &[String], env: &BTreeMap<String, String>) -> Result<(), ToolError> {
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

pub(crate) fn start(ctx: &Ctx, a: StartArgs) -> Result<Done<StartResult>, ToolError> {
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
    let started = manager::start_ready(&ctx.reg, req).map_err(|e| sentence(&e.to_string()))?;
    // `Started NAME (ID), pid N.` and the verdict are the library's, as every front end says them.
    let said = manager::Said::from(&started);
    let manager::Started { entry: e, ready: outcome, nudges } = started;
    adopt_supervisor(&e);
    let e = ctx.reg.read(&e.id).unwrap_or(e);
    let process = Proc::of(&fresh_view(&ctx.reg, &e), verbose);
    let mut text = said.lines.join("\n");
    let mut told = Vec::new();
    let mut tail = None;
    let is_error = said.failed;
    if let Some(o) = &outcome {
        text.push('\n');
        text.push_str(&ready_text(o, &e));
        if let ReadyOutcome::Exited { last_lines, .. } = o {
            tail = Some(cut_lines(last_lines, RESULT_LINES));
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
    let warnings = nudges;
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
pub(crate) fn ready_spec(r: ReadyArg) -> Result<ReadySpec, ToolError> {
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
