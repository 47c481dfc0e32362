//! `process_list`: the managed processes of a session, compact.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::server::{Ctx, Done, Proc, ToolError};
use sheepdog::status::Status;

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

/// One line per process, for the text block.
pub(crate) fn proc_line(p: &Proc) -> String {
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

pub(crate) fn list(ctx: &Ctx, a: ListArgs) -> Result<Done<ListResult>, ToolError> {
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
