//! The stdio transport: one JSON-RPC message per line on stdin and stdout (MCP's stdio
//! transport), with an answer for every malformed line so the client is never left waiting and
//! the server keeps serving.
//!
//! rmcp's own stdio transport drops a line that is not JSON without a word (rust-sdk issue 938:
//! to avoid error storms between two peers that echo errors). A client that sent a broken
//! request would then wait for a reply until its own timeout; JSON-RPC 2.0 says the answer is a
//! Parse error (-32700, `id: null`). A line that is JSON but not a message gets Invalid Request
//! (-32600) with its `id` when it has one; a malformed notification (a `method` and no `id`) gets
//! nothing, as JSON-RPC says. Error replies never provoke a reply from us, so two such peers
//! cannot storm.

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;

/// The longest line accepted: 16 MiB. A longer one is answered with Invalid Request and skipped.
const MAX_LINE: usize = 16 << 20;

/// Set once stdin reached EOF: the client is gone, and the server exits without waiting for
/// reads and waits in flight (a `process_wait` may have 45 s to go).
static EOF: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// Resolves once stdin reached EOF.
pub async fn eof() {
    EOF.notified().await
}

/// stdin/stdout as an rmcp transport.
pub struct Stdio {
    input: BufReader<tokio::io::Stdin>,
    output: Arc<Mutex<Option<tokio::io::Stdout>>>,
    /// What has been read of the current line (kept across cancelled `receive` calls).
    line: Vec<u8>,
    /// Discarding the rest of a line longer than [`MAX_LINE`].
    skipping: bool,
}

impl Stdio {
    pub fn new() -> Stdio {
        Stdio {
            input: BufReader::new(tokio::io::stdin()),
            output: Arc::new(Mutex::new(Some(tokio::io::stdout()))),
            line: Vec::new(),
            skipping: false,
        }
    }

    async fn write_line(output: &Mutex<Option<tokio::io::Stdout>>, mut bytes: Vec<u8>) -> std::io::Result<()> {
        bytes.push(b'\n');
        let mut guard = output.lock().await;
        let Some(out) = guard.as_mut() else {
            return Err(std::io::Error::new(std::io::ErrorKind::NotConnected, "stdout closed"));
        };
        out.write_all(&bytes).await?;
        out.flush().await
    }

    /// Answers a malformed line. On a task of its own: `receive` may be cancelled (rmcp selects
    /// over it), and a reply cut in half would corrupt the channel.
    fn reply_error(&self, id: Value, code: i32, message: String) {
        let msg = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
        let output = self.output.clone();
        tokio::spawn(async move {
            let _ = Self::write_line(&output, msg.to_string().into_bytes()).await;
        });
    }

    /// Handles one complete line (without its newline): a message, or `None` after answering it.
    fn parse(&self, line: &[u8]) -> Option<RxJsonRpcMessage<RoleServer>> {
        let text = line.strip_suffix(b"\r").unwrap_or(line);
        let text = text.strip_prefix("\u{feff}".as_bytes()).unwrap_or(text);
        if text.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        // `tools/call` whose `arguments` is not an object: Invalid params (-32602), as JSON-RPC
        // says, naming the field (rmcp would answer "method not found" with the method's name).
        if let Ok(value) = serde_json::from_slice::<Value>(text)
            && value.get("method").and_then(Value::as_str) == Some("tools/call")
            && let Some(id) = value.get("id")
        {
            let params = value.get("params");
            let bad = match params {
                Some(Value::Object(p)) => p.get("arguments").is_some_and(|a| !a.is_object() && !a.is_null()),
                Some(Value::Null) | None => false,
                Some(_) => true,
            };
            if bad {
                let what = if params.is_some_and(Value::is_object) { "`arguments`" } else { "`params`" };
                self.reply_error(id.clone(), -32602, format!("Invalid params: {what} must be an object"));
                return None;
            }
        }
        match serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(text) {
            Ok(msg) => Some(msg),
            Err(e) if e.is_syntax() || e.is_eof() => {
                self.reply_error(Value::Null, -32700, format!("Parse error: {e}"));
                None
            }
            Err(e) => {
                let value: Value = serde_json::from_slice(text).unwrap_or(Value::Null);
                let id = value.get("id").cloned();
                let notification = id.is_none() && value.get("method").is_some();
                if !notification {
                    self.reply_error(id.unwrap_or(Value::Null), -32600, format!("Invalid Request: {e}"));
                }
                None
            }
        }
    }
}

impl rmcp::transport::Transport<RoleServer> for Stdio {
    type Error = std::io::Error;

    fn name() -> Cow<'static, str> {
        "stdio".into()
    }

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let output = self.output.clone();
        async move {
            let bytes = serde_json::to_vec(&item).map_err(std::io::Error::other)?;
            Self::write_line(&output, bytes).await
        }
    }

    /// Cancel-safe (rmcp selects over it): bytes read stay in `self.line` until a whole line
    /// is there, and only then is the buffer taken.
    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            if !self.line.ends_with(b"\n") {
                let room = (MAX_LINE + 1).saturating_sub(self.line.len()) as u64;
                let n = match (&mut self.input).take(room.max(1)).read_until(b'\n', &mut self.line).await {
                    Ok(n) => n,
                    Err(_) => {
                        EOF.notify_one();
                        return None;
                    }
                };
                if n == 0 {
                    // EOF: a last line without its newline still counts.
                    if self.line.is_empty() || self.skipping {
                        EOF.notify_one();
                        return None;
                    }
                    self.line.push(b'\n');
                }
                if !self.line.ends_with(b"\n") {
                    if self.line.len() > MAX_LINE {
                        // Too long: drop what we have and the rest of the line, then answer.
                        self.line.clear();
                        self.skipping = true;
                    }
                    continue;
                }
            }
            let line = std::mem::take(&mut self.line);
            if std::mem::take(&mut self.skipping) {
                self.reply_error(Value::Null, -32600, format!("Invalid Request: line longer than {MAX_LINE} bytes"));
                continue;
            }
            if let Some(msg) = self.parse(&line[..line.len() - 1]) {
                return Some(msg);
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        let mut guard = self.output.lock().await;
        if let Some(mut out) = guard.take() {
            let _ = out.flush().await;
        }
        Ok(())
    }
}
