//! `sheepdog events`: the event journal as a stream, one JSON object per line (`--json`) or a
//! short line per event for people. The library reads and follows it ([`sheepdog::journal`]);
//! this only renders.

use std::io::Write;
use std::path::PathBuf;

use sheepdog::journal::{self, Filter, Line, Missed};
use sheepdog::registry::Registry;

use super::CliError;

/// `sheepdog events`.
#[derive(Debug, clap::Args)]
pub struct EventsArgs {
    /// Only events of this session's entries.
    #[arg(long, value_name = "S")]
    session: Option<String>,
    /// Only events of this entry (its id, or its name).
    #[arg(long, value_name = "ID")]
    id: Option<String>,
    /// Resume after this cursor (the `seq` of the last event read; 0: every event kept).
    /// Without it, only events from now on.
    #[arg(long, value_name = "CURSOR")]
    since: Option<String>,
    /// Print what is recorded and exit instead of following.
    #[arg(long)]
    no_follow: bool,
}

/// A cursor: an event's `seq`.
fn parse_cursor(s: &str) -> Result<u64, CliError> {
    s.trim().parse::<u64>().map_err(|_| {
        CliError::usage(format!("--since '{s}': not an event cursor (the `seq` of an event, a number such as 42)"))
    })
}

/// One event for people: `SEQ NAME (ID): WHAT`.
fn text(v: &serde_json::Value) -> String {
    let s = |k: &str| v.get(k).and_then(|x| x.as_str()).unwrap_or("");
    let n = |k: &str| v.get(k).and_then(|x| x.as_i64());
    let seq = v.get("seq").and_then(|x| x.as_u64()).unwrap_or(0);
    let what = match s("event") {
        "started" => format!("started, pid {}", n("pid").unwrap_or(0)),
        "ready" => match (n("port"), v["matched"].as_str()) {
            (Some(p), _) => format!("ready after {}ms (port {p})", n("afterMs").unwrap_or(0)),
            (None, Some(m)) => format!("ready after {}ms: {m}", n("afterMs").unwrap_or(0)),
            (None, None) => format!("ready after {}ms", n("afterMs").unwrap_or(0)),
        },
        "exited" => s("statusText").to_string(),
        "stopped" => {
            let gone = if v["treeGone"] == true { "" } else { "; the tree was not confirmed gone" };
            let cleanup = v["cleanupError"].as_str().map(|e| format!("; {e}")).unwrap_or_default();
            let before = if v["alreadyFinished"] == true { " (it had already ended)" } else { "" };
            format!("stop done{before}{gone}{cleanup}")
        }
        "cleanupFinished" => match (v["timedOut"] == true, n("exitCode")) {
            (true, _) => format!("cleanup timed out after {}ms", n("durationMs").unwrap_or(0)),
            (false, Some(c)) => format!("cleanup exited with code {c} after {}ms", n("durationMs").unwrap_or(0)),
            (false, None) => format!("cleanup killed by {}", s("signal")),
        },
        "cleared" => "cleared".into(),
        "setAside" => format!("set aside: {}", s("reason")),
        other => other.to_string(),
    };
    let who = if s("name").is_empty() { s("id").to_string() } else { format!("{} ({})", s("name"), s("id")) };
    super::common::printable(&format!("{seq} {who}: {what}"))
}

pub(super) fn events(a: EventsArgs, dir: Option<PathBuf>, json: bool) -> Result<i32, CliError> {
    let since = a.since.as_deref().map(parse_cursor).transpose()?;
    // A stream may begin before anything was started: the state dir is made, as `start` would.
    let reg = Registry::open(dir)?;
    let filter = Filter { session: a.session, id: a.id, since };
    let mut out = std::io::stdout().lock();
    let mut missed = |Missed(n): Missed| {
        eprintln!(
            "sheepdog: events: {n} events after cursor {} were rotated out of the journal before this read (it keeps about 2 MiB)",
            since.unwrap_or(0)
        );
    };
    // A reader that went away (`| head -1`) ends the stream quietly with status 0.
    let mut emit = |l: Line| -> bool {
        let ok = if json {
            out.write_all(l.raw).and_then(|_| out.write_all(b"\n"))
        } else {
            writeln!(out, "{}", text(l.value))
        };
        ok.and_then(|_| out.flush()).is_ok()
    };
    journal::follow(reg.root(), &filter, !a.no_follow, &mut missed, &mut emit, Some(1))
        .map_err(|e| CliError::usage(format!("unable to follow {}: {e}", reg.root().join(journal::DIR).display())))?;
    Ok(0)
}
