//! `sheepdog logs`: a managed process's logs (tail, head, grep, since, cursor, follow).

use std::io::{self, Write};
use std::path::PathBuf;
use std::time::Duration;

use sheepdog::logread::{self, Cursor, LogQuery, LogStream};
use sheepdog::registry::{Registry, RegistryError};
use sheepdog::view;

use super::common::{one_line, to_json};
use super::{CliError, parse_duration};

/// `sheepdog logs`.
#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    /// Id or name.
    #[arg(value_name = "ID|NAME")]
    target: String,
    /// Which log: `out` (stdout, byte-exact), `err` (stderr), `all` (combined, tagged lines with
    /// sheepdog's markers).
    // Parsed once: only the three names pass clap's check, and each is a stream.
    #[arg(long, default_value = "all", value_parser = clap::builder::TypedValueParser::map(
        clap::builder::PossibleValuesParser::new(["out", "err", "all"]),
        |s: String| LogStream::parse(&s).unwrap_or_default(),
    ))]
    stream: LogStream,
    /// Only the last N lines (after --grep and --since).
    #[arg(long, value_name = "N", conflicts_with = "head")]
    tail: Option<usize>,
    /// Only the first N lines (after --grep and --since).
    #[arg(long, value_name = "N", conflicts_with = "follow")]
    head: Option<usize>,
    /// Only lines matching this regex (for the combined log, the text after its [out]/[err] tag).
    #[arg(long, value_name = "REGEX")]
    grep: Option<String>,
    /// Only lines that arrived in the last DUR (to the second).
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_hyphen_values = true)]
    since: Option<Duration>,
    /// Only what came after a previous read's cursor (`logs --json` prints it), rotations
    /// included.
    #[arg(long, value_name = "CURSOR", conflicts_with = "follow")]
    cursor: Option<String>,
    /// Keep printing as the log grows; ends when the process has exited and the log is drained.
    #[arg(long, short = 'f')]
    follow: bool,
}

pub(super) fn logs(a: LogsArgs, dir: Option<PathBuf>, json: bool) -> Result<i32, CliError> {
    let grep = a
        .grep
        .as_deref()
        .map(|g| {
            regex::Regex::new(g).map_err(|e| CliError::usage(format!("--grep '{g}': {}", one_line(&e.to_string()))))
        })
        .transpose()?;
    let cursor = a.cursor.as_deref().map(Cursor::parse).transpose().map_err(CliError::usage)?;
    if json && a.follow {
        return Err(CliError::usage("logs: --json prints one document; use --cursor to poll instead of --follow"));
    }
    let reg = Registry::open_existing(dir)?.ok_or_else(|| RegistryError::NotFound(a.target.clone()))?;
    let e = reg.find(&a.target)?;
    let default_cap = a.tail.is_none() && a.head.is_none() && cursor.is_none() && !a.follow;
    let q = LogQuery {
        stream: a.stream,
        tail: a.tail,
        head: a.head,
        grep,
        since_ms: a.since.map(|d| sheepdog::files::now_ms().saturating_sub(d.as_millis() as u64)),
        cursor,
        max_lines: default_cap.then_some(logread::DEFAULT_MAX_LINES),
        max_bytes: default_cap.then_some(logread::DEFAULT_MAX_BYTES),
        partial: !json,
    };
    if a.follow {
        let mut out = io::stdout().lock();
        // A closed stdout (`| head -n 1`) ends the command quietly with status 0, as ripgrep
        // does; a reader that went away ends it even while the process is quiet.
        let mut emit = |bytes: &[u8]| -> bool {
            if bytes.is_empty() {
                return !sheepdog::os::process::peer_closed(1);
            }
            out.write_all(bytes).and_then(|_| out.flush()).is_ok()
        };
        logread::follow(&reg, &e.id, &q, &mut emit)?;
        return Ok(0);
    }
    let chunk = logread::read(&reg, &e.id, &q)?;
    if json {
        outln!("{}", to_json(&view::LogsDoc { v: view::Version, chunk }));
        return Ok(0);
    }
    let mut out = io::stdout().lock();
    if out.write_all(&chunk.bytes).and_then(|_| out.flush()).is_err() {
        return Ok(0);
    }
    if default_cap && chunk.skipped_lines > 0 {
        eprintln!(
            "sheepdog: {} earlier {} not shown (by default at most the last {} lines or {} KiB); use --tail N, --head N or --grep REGEX, or read {}",
            chunk.skipped_lines,
            if chunk.skipped_lines == 1 { "line" } else { "lines" },
            logread::DEFAULT_MAX_LINES,
            logread::DEFAULT_MAX_BYTES / 1024,
            chunk.path.display()
        );
    }
    Ok(0)
}
