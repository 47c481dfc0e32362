//! `process_stop`: the whole tree, then the cleanup; an error when either failed.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::news;
use crate::server::{Ctx, Done, Proc, RESULT_LINES, ToolError, cut_lines, proc_as, sentence};
use sheepdog::manager::{self, Selection};

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

pub(crate) fn stop(ctx: &Ctx, a: StopArgs) -> Result<Done<StopResult>, ToolError> {
    let selectors = [a.id.is_some(), a.name.is_some(), a.session.is_some(), a.all.unwrap_or(false)];
    if selectors.iter().filter(|s| **s).count() != 1 {
        return Err("Give exactly one of `id`, `name`, `session` or `all: true`.".into());
    }
    // The tool's `all` is the calling agent's session (the CLI's `--all` is every entry).
    let selection = match (a.id.or(a.name), a.session) {
        (Some(k), _) => Selection::Keys(vec![k]),
        (None, Some(s)) => Selection::Session(s),
        (None, None) => Selection::Session(ctx.session.clone()),
    };
    let targets = selection.for_stop(&ctx.reg).map_err(|e| sentence(&e.to_string()))?.entries;
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
                let failure = o.cleanup_error();
                let said = manager::Said::from(&o);
                is_error |= said.failed;
                text.extend(said.lines.iter().cloned());
                let cleanup_result = o.entry.cleanup_state.result().map(|r| CleanupOutcome {
                    exit_code: r.exit_code,
                    signal: r.signal.as_ref().map(|s| s.name()),
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
                    lines: said.lines,
                    already_finished: o.already_finished,
                    tree_gone: o.tree_gone,
                    ok: said.ok,
                    cleanup_error: failure,
                    cleanup_result,
                });
            }
            Err(err @ manager::ManagerError::NotRecorded { .. }) => {
                // The tree is gone: said as `sheepdog stop` says it, then why it is not on disk.
                is_error = true;
                if let manager::ManagerError::NotRecorded { entry, .. } = &err {
                    text.push(manager::not_recorded_line(entry));
                }
                text.push(sentence(&err.to_string()));
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
