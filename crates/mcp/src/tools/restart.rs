//! `process_restart`: stop, then the same command again under a new id.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::news;
use crate::server::{
    Ctx, Done, Proc, RESULT_LINES, Readiness, ToolError, adopt_supervisor, cut_lines, find, fresh_view, ready_text,
    sentence,
};
use sheepdog::manager;
use sheepdog::ready::ReadyOutcome;

/// Arguments of `process_restart`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RestartArgs {
    /// Id (proc_N) or name.
    pub id: Option<String>,
    /// Name (same as `id` with a name).
    pub name: Option<String>,
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

pub(crate) fn restart(ctx: &Ctx, a: RestartArgs) -> Result<Done<RestartResult>, ToolError> {
    let key = match (&a.id, &a.name) {
        (Some(k), None) | (None, Some(k)) => k,
        _ => return Err("Give exactly one of `id` or `name`.".into()),
    };
    let old = find(&ctx.reg, key)?;
    let busy = news::busy([old.id.clone()]);
    let r = manager::restart(&ctx.reg, &old, None).map_err(|e| sentence(&e.to_string()))?;
    adopt_supervisor(&r.entry);
    // The old tree's stop as `process_stop` says it, then the new entry; the call failed when
    // the stop did or the new command ended before it was ready.
    let said = manager::Said::from(&r);
    let lines = manager::Said::from(&r.stopped).lines;
    let e = ctx.reg.read(&r.entry.id).unwrap_or(r.entry);
    let process = Proc::of(&fresh_view(&ctx.reg, &e), false);
    let mut text = said.lines.join("\n");
    let is_error = said.failed;
    if let Some(o) = &r.ready {
        text.push('\n');
        text.push_str(&ready_text(o, &e));
        if let ReadyOutcome::Exited { last_lines, .. } = o {
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
