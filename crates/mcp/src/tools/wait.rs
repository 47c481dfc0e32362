//! `process_wait`: wait (at most 45 s) for processes to finish.

use std::cell::OnceCell;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::news;
use crate::server::{Ctx, Done, Proc, RESULT_LINES, ToolError, WAIT_CAP_MS, call_hint, cut_lines, proc_as, sentence};
use sheepdog::entry::Entry;
use sheepdog::inspect;
use sheepdog::manager::{self, Selection, Waited};

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

pub(crate) fn wait(ctx: &Ctx, a: WaitArgs) -> Result<Done<WaitResult>, ToolError> {
    let timeout = a.timeout_ms.unwrap_or(WAIT_CAP_MS).min(WAIT_CAP_MS);
    let verbose = a.verbose.unwrap_or(false);
    let selection = match (&a.ids, &a.session) {
        (Some(_), Some(_)) => return Err("Give either `ids` or `session`, not both.".into()),
        (Some(ids), None) if !ids.is_empty() => Selection::Keys(ids.clone()),
        (Some(_), None) => return Err("`ids` is empty: give the ids or names to wait for.".into()),
        (None, session) => Selection::Session(session.clone().unwrap_or_else(|| ctx.session.clone())),
    };
    let by_keys = matches!(selection, Selection::Keys(_));
    let targets: Vec<Entry> = selection
        .for_wait(&ctx.reg)
        .map_err(|e| sentence(&e.to_string()))?
        .entries
        .into_iter()
        // By session, those expected to end: started without `ready` (a server is not waited for).
        .filter(|e| by_keys || e.ready.is_none())
        .collect();
    if targets.is_empty() {
        let text = "No running processes to wait for (those started with `ready` are waited for only by `ids`).";
        return Ok(Done::ok(WaitResult { done: true, waited: Vec::new(), truncated: None }, text.into()));
    }
    let busy = news::busy(targets.iter().map(|e| e.id.clone()));
    let any = a.any.unwrap_or(false);
    let waited = manager::wait_many(&ctx.reg, &targets, any, Some(Duration::from_millis(timeout)))
        .map_err(|e| sentence(&e.to_string()))?;
    // The library's sentences, as `sheepdog wait` says them for several entries; each
    // finished one followed by its last lines.
    let said = manager::Said::from(&waited);
    let mut items = Vec::new();
    let mut lines = Vec::new();
    let mut told = Vec::new();
    for (w, line) in waited.results.iter().zip(&said.lines) {
        let cur = w.entry();
        let status = inspect::live_status(cur, &OnceCell::new());
        let done = !matches!(w, Waited::TimedOut(_)) || status.is_finished();
        let last =
            if done { cut_lines(&sheepdog::ready::output_tail(&ctx.reg, &cur.id), RESULT_LINES) } else { Vec::new() };
        lines.push(line.clone());
        if done {
            told.push(cur.id.clone());
            lines.extend(last.iter().map(|l| format!("    {l}")));
        }
        items.push(WaitItem { process: proc_as(&ctx.reg, cur, status, verbose), done, last_lines: last });
    }
    lines.extend(said.warnings.iter().cloned());
    let all_done = if any { items.iter().any(|i| i.done) } else { items.iter().all(|i| i.done) };
    let mut next = None;
    if !all_done {
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
