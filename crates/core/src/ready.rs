//! Readiness: `start` returns once the command is ready, not merely running (`--ready-port`,
//! `--ready-log`, `--ready-listen`, `--ready-timeout`).
//!
//! - Port: ready when a process of the entry's tree listens on the port (read from
//!   `/proc/net/tcp{,6}` and the processes' socket inodes, see [`crate::ports`]). A process
//!   outside the tree that holds the port (the old server of an "Address already in use") never
//!   makes it ready. For servers that live outside the tree (`docker run -p`), a TCP connect to
//!   127.0.0.1 / ::1 also counts, but only if the port did not accept connections before the
//!   start.
//! - Log: ready when a line of stdout or stderr (the combined log, without its tag) matches the
//!   regex (the `regex` crate's syntax); the line is reported.
//! - Listen: ready as soon as any process of the tree listens on a TCP port; the port is
//!   reported.
//!
//! Checked every [`READY_TICK`] until ready, the entry is final (it exited before it was ready)
//! or the timeout passes (the process keeps running).

use crate::identity::Probe;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use regex::Regex;
use serde::Serialize;

use crate::entry::{Entry, ReadySpec};
use crate::logread::{self, Cursor, LogQuery, LogStream};
use crate::registry::{Registry, RegistryError};
use crate::sys::Pid;

/// Default `--ready-timeout`: 30 s.
pub const DEFAULT_READY_TIMEOUT_MS: u64 = 30_000;
/// How often readiness is checked: 20 ms (a port or a log line has no event to block on).
pub const READY_TICK: Duration = Duration::from_millis(20);
/// Lines of output shown when the command exits before it is ready: 20.
pub const EXIT_TAIL: usize = 20;

/// How a readiness wait ended.
#[derive(Clone, Debug, PartialEq)]
pub enum ReadyOutcome {
    /// Ready.
    Ready {
        /// Ms from the start of the wait.
        after_ms: u64,
        /// The matching log line, or `port N`.
        matched: Option<String>,
        /// The port, for `--ready-port` and `--ready-listen`.
        port: Option<u16>,
    },
    /// The command finished before it was ready.
    Exited {
        /// Ms from the start of the wait.
        after_ms: u64,
        /// The entry, final.
        entry: Box<Entry>,
        /// Its last 20 lines of output (`[out] `/`[err] ` tagged).
        last_lines: Vec<String>,
    },
    /// Not ready within the timeout; the process keeps running.
    TimedOut {
        /// Ms from the start of the wait.
        after_ms: u64,
    },
}

/// `ready` in `start --json`: `{ok, afterMs, matched}` (+ `port`, and `reason`/`output` when not
/// ok).
#[derive(Clone, Debug, Serialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReadyReport {
    /// Ready within the timeout.
    pub ok: bool,
    /// Ms the wait took.
    pub after_ms: u64,
    /// The matching log line, or `port N`; null when not ready.
    pub matched: Option<String>,
    /// The port that made it ready (`--ready-port`, `--ready-listen`).
    pub port: Option<u16>,
    /// `exited` or `timeout` when not ok.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The last 20 lines of output when it exited before it was ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Vec<String>>,
}

impl ReadyOutcome {
    /// The readiness wait's verdict: the command became ready.
    pub fn ok(&self) -> bool {
        matches!(self, ReadyOutcome::Ready { .. })
    }

    /// True when the command ended before it was ready: a failed start. A wait that timed out
    /// is not a failure (the process keeps running, and may be ready later): MCP's `isError`
    /// follows this, the CLI's status [`Self::exit_status`].
    pub fn failed(&self) -> bool {
        matches!(self, ReadyOutcome::Exited { .. })
    }

    /// The exit status this readiness gives `start` and `restart` ([`crate::exit`]): 0 when
    /// ready; 1 when the command exited first; 124 when the wait timed out (the process keeps
    /// running).
    pub fn exit_status(&self) -> i32 {
        match self {
            ReadyOutcome::Ready { .. } => crate::exit::OK,
            ReadyOutcome::Exited { .. } => crate::exit::REFUSED,
            ReadyOutcome::TimedOut { .. } => crate::exit::TIMED_OUT,
        }
    }

    /// The JSON report.
    pub fn report(&self) -> ReadyReport {
        match self {
            ReadyOutcome::Ready { after_ms, matched, port } => ReadyReport {
                ok: true,
                after_ms: *after_ms,
                matched: matched.clone(),
                port: *port,
                reason: None,
                output: None,
            },
            ReadyOutcome::Exited { after_ms, last_lines, .. } => ReadyReport {
                ok: false,
                after_ms: *after_ms,
                matched: None,
                port: None,
                reason: Some("exited".into()),
                output: Some(last_lines.clone()),
            },
            ReadyOutcome::TimedOut { after_ms } => ReadyReport {
                ok: false,
                after_ms: *after_ms,
                matched: None,
                port: None,
                reason: Some("timeout".into()),
                output: None,
            },
        }
    }
}

/// True if something accepts a TCP connection on `port` at 127.0.0.1 or ::1 (100 ms each).
pub fn port_accepts(port: u16) -> bool {
    let t = Duration::from_millis(100);
    ["127.0.0.1", "::1"]
        .iter()
        .filter_map(|h| {
            format!("{}:{port}", if h.contains(':') { format!("[{h}]") } else { h.to_string() })
                .parse::<SocketAddr>()
                .ok()
        })
        .any(|a| TcpStream::connect_timeout(&a, t).is_ok())
}

/// Live pids of an entry's tree.
fn tree_pids(e: &Entry) -> Vec<Pid> {
    crate::inspect::live_tree(e).iter().filter_map(|p| Pid::new(p.pid)).collect()
}

/// Waits until `entry` is ready by `spec`, it finishes, or `spec.timeout_ms` passes.
/// `port_was_open`: the port accepted connections before the start (then only the tree's own
/// listening socket counts). Errors: the entry vanished.
pub fn wait_ready(
    reg: &Registry,
    entry: &Entry,
    spec: &ReadySpec,
    port_was_open: bool,
) -> Result<ReadyOutcome, RegistryError> {
    let t0 = Instant::now();
    let end = t0 + Duration::from_millis(spec.timeout_ms);
    let re = spec.log.as_deref().and_then(|l| Regex::new(l).ok());
    let mut cursor = Cursor::default();
    let ms = || t0.elapsed().as_millis() as u64;
    loop {
        let e = reg.read(&entry.id)?;
        // Lines first: a line printed just before exiting still makes it ready.
        if let Some(re) = &re {
            let q = LogQuery { stream: LogStream::All, cursor: Some(cursor), partial: false, ..LogQuery::default() };
            let chunk = logread::read(reg, &entry.id, &q)?;
            for l in &chunk.lines {
                let text = l.strip_prefix("[out] ").or_else(|| l.strip_prefix("[err] "));
                if let Some(text) = text
                    && re.is_match(text)
                {
                    return Ok(ReadyOutcome::Ready { after_ms: ms(), matched: Some(text.to_string()), port: None });
                }
            }
            cursor = Cursor::parse(&chunk.cursor).unwrap_or(cursor);
        }
        if !e.is_finished() && (spec.port.is_some() || spec.listen) {
            let ports = crate::ports::listening_now(&tree_pids(&e));
            if let Some(p) = spec.port {
                if ports.contains(&p) || (!port_was_open && port_accepts(p)) {
                    return Ok(ReadyOutcome::Ready {
                        after_ms: ms(),
                        matched: Some(format!("port {p}")),
                        port: Some(p),
                    });
                }
            } else if let Some(p) = ports.first() {
                return Ok(ReadyOutcome::Ready { after_ms: ms(), matched: Some(format!("port {p}")), port: Some(*p) });
            }
        }
        if e.is_finished() || (!e.supervisor_alive() && !e.starter_alive() && !e.provider_alive()) {
            // Final: let a running cleanup finish writing, then report the last lines.
            let e = settle_final(reg, &entry.id)?;
            return Ok(ReadyOutcome::Exited {
                after_ms: ms(),
                last_lines: output_tail(reg, &entry.id),
                entry: Box::new(e),
            });
        }
        if Instant::now() >= end {
            return Ok(ReadyOutcome::TimedOut { after_ms: ms() });
        }
        std::thread::sleep(READY_TICK.min(end.saturating_duration_since(Instant::now())));
    }
}

/// The last [`EXIT_TAIL`] lines of the command's own output (`[out] `/`[err] ` lines of the
/// combined log, markers left out).
pub fn output_tail(reg: &Registry, id: &str) -> Vec<String> {
    let mut lines: Vec<String> = logread::last_lines(reg, id, 400)
        .into_iter()
        .filter(|l| l.starts_with("[out] ") || l.starts_with("[err] "))
        .collect();
    let n = lines.len().saturating_sub(EXIT_TAIL);
    lines.drain(..n);
    lines
}

/// Re-reads an entry until its supervisor and cleanup are done (at most 10 s).
fn settle_final(reg: &Registry, id: &str) -> Result<Entry, RegistryError> {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let e = reg.read(id)?;
        if logread::writers_gone(&e) || Instant::now() >= end {
            return Ok(e);
        }
        std::thread::sleep(READY_TICK);
    }
}
