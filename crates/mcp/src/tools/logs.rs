//! `process_logs`: a process's output: the last lines, a pattern, or what came since a cursor.
//!
//! A model walks a whole log in bounded replies: `from: "start"` gives the first page (at most
//! `maxBytes`), and each reply's `cursor` the next, until `eof` (issue 31). A read of the last
//! lines that left earlier ones out says so in `next`, with the call that reads from the start.

use std::cell::OnceCell;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::server::{Ctx, Done, ToolError, call_hint, find, sentence};
use sheepdog::inspect;
use sheepdog::logread::{self, Cursor, LogQuery, LogStream};

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
    /// `start`: from the beginning of the log, one page of at most `maxBytes`; pass each reply's
    /// `cursor` on to read the rest, page by page, until `eof`. `end` (the default): the last
    /// lines.
    pub from: Option<String>,
    /// Only lines matching this regular expression.
    pub grep: Option<String>,
    /// Continue after the previous call's `cursor`: only new output, none twice, none lost
    /// across a log rotation.
    pub cursor: Option<String>,
    /// At most this many bytes of text (default 16384); `truncated` says when more is waiting.
    /// Whole lines only: an unterminated last line comes once it ends (or the process does).
    pub max_bytes: Option<usize>,
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
    /// Lines were left out of this reply: `maxBytes` or `tail` cut it, or a log rotation
    /// dropped them. `next` says how to read what is left out: with `cursor` after a page cut
    /// by `maxBytes`, with `from: "start"` after the last lines.
    pub truncated: bool,
    /// Nothing more will come: the process and its cleanup are done and everything was read.
    pub eof: bool,
    /// The process's status now.
    pub status: String,
}

/// Default `maxBytes` of `process_logs`: 16 KiB.
pub(crate) const LOGS_MAX_BYTES: usize = 16 * 1024;

pub(crate) fn logs(ctx: &Ctx, a: LogsArgs) -> Result<Done<LogsResult>, ToolError> {
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
    let from_start = match a.from.as_deref() {
        None | Some("end") => false,
        Some("start") => true,
        Some(f) => return Err(format!("Unknown `from` '{f}': use start or end.")),
    };
    if from_start && cursor.is_some() {
        return Err("`from` and `cursor` do not go together: `from: \"start\"` reads the first page, then pass each reply's `cursor` alone.".into());
    }
    if from_start && a.tail.is_some() {
        return Err("`tail` reads the last lines and `from: \"start\"` the first: give one of them.".into());
    }
    // A read from the start is a cursor read from before the first byte: it keeps the first
    // lines and its cursor is where the next page begins.
    let cursor = if from_start { Some(Cursor::START) } else { cursor };
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
        format!("No {}output from {}.", if a.cursor.is_some() { "new " } else { "" }, e.label())
    } else {
        text.trim_end_matches('\n').to_string()
    };
    // A cursor read cut by `maxBytes` is a page: the rest follows its cursor. Any other read that
    // left lines out kept the last ones: the earlier ones are read from the start.
    let paged = cursor.is_some() && chunk.skipped_lines > 0;
    let earlier = cursor.is_none() && chunk.truncated;
    if paged {
        summary.push_str("\n[more output: call again with this cursor]");
    } else if earlier {
        summary.push_str("\n[earlier output left out: read it with from: \"start\", then each cursor]");
    }
    summary.push_str(&format!(
        "\n[cursor {}; {} is {}{}]",
        chunk.cursor,
        e.id,
        status,
        if chunk.eof { "; end of log" } else { "" }
    ));
    // The next call keeps this one's stream, pattern and page size.
    let mut same = json!({"id": e.id});
    if a.stream.is_some() {
        same["stream"] = json!(stream.as_str());
    }
    if let Some(g) = &a.grep {
        same["grep"] = json!(g);
    }
    if let Some(m) = a.max_bytes {
        same["maxBytes"] = json!(m);
    }
    let with = |k: &str, v: &str| {
        let mut args = same.clone();
        args[k] = json!(v);
        call_hint("process_logs", args)
    };
    let onward = with("cursor", &chunk.cursor);
    let next = if paged {
        Some(format!("{onward} for the rest"))
    } else if earlier {
        let start = with("from", "start");
        Some(if chunk.eof {
            format!("{start} to read it from the start, then each reply's cursor")
        } else {
            format!("{start} to read it from the start, then each reply's cursor; {onward} for what comes next")
        })
    } else {
        (!chunk.eof).then(|| format!("{onward} for what comes next"))
    };
    let result = LogsResult {
        id: e.id.clone(),
        stream: stream.as_str().into(),
        text,
        cursor: chunk.cursor,
        truncated: chunk.truncated || paged,
        eof: chunk.eof,
        status: status.as_str().into(),
    };
    let mut done = Done::ok(result, summary);
    done.next = next;
    Ok(done)
}
