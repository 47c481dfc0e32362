//! `process_write`: write to the stdin of a process started with `stdin: "pipe"`.

use std::cell::OnceCell;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::server::{Ctx, Done, ToolError, call_hint, find, sentence};
use sheepdog::inspect;
use sheepdog::manager;

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

pub(crate) fn write(ctx: &Ctx, a: WriteArgs) -> Result<Done<WriteResult>, ToolError> {
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
