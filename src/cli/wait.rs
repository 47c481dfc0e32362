//! `sheepdog wait`: block until entries finish; exit with the (last) one's status.

use std::path::PathBuf;
use std::time::Duration;

use sheepdog::inspect;
use sheepdog::manager::{self, Selected, Selection, Waited};
use sheepdog::registry::{Registry, RegistryError};
use sheepdog::view;

use super::common::{to_json, warn_set_aside};
use super::{CliError, parse_positive_duration};

/// `sheepdog wait`.
#[derive(Debug, clap::Args)]
pub struct WaitArgs {
    /// Ids or names.
    #[arg(value_name = "ID|NAME")]
    targets: Vec<String>,
    /// Every running entry of this session.
    #[arg(long, value_name = "ID", conflicts_with = "targets")]
    session: Option<String>,
    /// Return when the first one finishes (exit with its status).
    #[arg(long)]
    any: bool,
    /// Give up after this long (status 124; the processes keep running).
    #[arg(long, value_name = "DUR", value_parser = parse_positive_duration, allow_hyphen_values = true)]
    timeout: Option<Duration>,
}

/// Lines of output `wait --json` shows per entry: 20.
const WAIT_TAIL: usize = 20;

pub(super) fn wait(a: WaitArgs, dir: Option<PathBuf>, json: bool) -> Result<i32, CliError> {
    if a.targets.is_empty() && a.session.is_none() {
        return Err(CliError::usage("wait: name one or more ids or names, or --session ID"));
    }
    let Some(reg) = Registry::open_existing(dir)? else {
        let what = a.targets.first().cloned().unwrap_or_default();
        if a.session.is_some() {
            return Err(CliError::usage(format!("wait: no entries in session '{}'", a.session.unwrap_or_default())));
        }
        return Err(RegistryError::NotFound(what).into());
    };
    let selection = match &a.session {
        Some(s) => Selection::Session(s.clone()),
        None => Selection::Keys(a.targets.clone()),
    };
    let Selected { entries: targets, set_aside } = selection.for_wait(&reg)?;
    warn_set_aside(&set_aside);
    if targets.is_empty() {
        if json {
            let doc = view::WaitDoc { v: view::Version, waited: Vec::new(), exit_status: 0, exit_code: 0 };
            outln!("{}", to_json(&doc));
        } else {
            outln!("Nothing to wait for.");
        }
        return Ok(0);
    }
    let many = manager::wait_many(&reg, &targets, a.any, a.timeout)?;
    // The sentences and the status are the library's, as MCP's `process_wait` says them.
    let said = manager::Said::from(&many);
    let code = said.exit_status;
    if json {
        let list = many.results.iter().map(|w| {
            let (entry, finished, status) = match w {
                Waited::Finished(x) => (x, true, manager::exit_status_of(x)),
                Waited::NoResult(x) | Waited::TimedOut(x) => (x, false, None),
            };
            let st = inspect::live_status(entry, &Default::default());
            let tail = sheepdog::ready::output_tail(&reg, &entry.id);
            view::WaitView {
                entry: view::view_with_status(&reg, entry, st, false),
                finished,
                exit_status: status,
                last_lines: tail[tail.len().saturating_sub(WAIT_TAIL)..].to_vec(),
            }
        });
        let doc = view::WaitDoc { v: view::Version, waited: list.collect(), exit_status: code, exit_code: code };
        outln!("{}", to_json(&doc));
    } else if let [Waited::Finished(x)] = many.results.as_slice() {
        // One entry: its status alone, for a script (`status=$(sheepdog wait web)`).
        outln!("{}", view::status_text(x, x.status));
    } else if many.results.len() > 1 {
        for line in &said.lines {
            outln!("{line}");
        }
    }
    for w in &said.warnings {
        eprintln!("sheepdog: wait: {w}");
    }
    if many.results.iter().any(|w| matches!(w, Waited::NoResult(_))) {
        eprintln!("sheepdog: wait: run 'sheepdog reap' to record how it ended");
    }
    Ok(code)
}
