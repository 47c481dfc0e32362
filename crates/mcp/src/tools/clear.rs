//! `process_clear`: remove finished processes and their logs.

use std::cell::OnceCell;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::server::{Ctx, Done, Proc, ToolError, find, proc_as, sentence};
use sheepdog::entry::Entry;
use sheepdog::inspect;
use sheepdog::manager;

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

pub(crate) fn clear(ctx: &Ctx, a: ClearArgs) -> Result<Done<ClearResult>, ToolError> {
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
