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
    let single = targets.len() == 1;
    let mut list = Vec::new();
    let mut messages = Vec::new();
    for (i, (e, w)) in targets.iter().zip(&many.results).enumerate() {
        let (entry, finished, status) = match w {
            Waited::Finished(x) => (x.clone(), true, manager::exit_status_of(x)),
            Waited::NoResult(x) => (x.clone(), false, None),
            Waited::TimedOut => (reg.read(&e.id).unwrap_or_else(|_| e.clone()), false, None),
        };
        let st = inspect::live_status(&entry, &Default::default());
        if let (true, Waited::Finished(x), None) = (Some(i) == many.decisive, w, status) {
            messages.push(format!(
                "wait: {} is {}; its exit status is unknown (its supervisor was killed)",
                x.label(),
                x.status
            ));
        }
        if let Waited::NoResult(x) = w {
            messages.push(format!(
                "wait: {} ended without a recorded result (its supervisor was killed); run 'sheepdog reap'",
                x.label()
            ));
        }
        if json {
            let tail = sheepdog::ready::output_tail(&reg, &entry.id);
            let v = view::WaitView {
                entry: view::view_with_status(&reg, &entry, st, false),
                finished,
                exit_status: status,
                last_lines: tail[tail.len().saturating_sub(WAIT_TAIL)..].to_vec(),
            };
            list.push(v);
        } else if finished {
            // One entry: its status alone, for a script; several: the sentence MCP says too.
            if single {
                outln!("{}", view::status_text(&entry, entry.status));
            } else {
                outln!("{}", manager::waited_line(&entry, entry.status, true));
            }
        } else if !a.any && matches!(w, Waited::TimedOut) {
            messages.push(format!(
                "wait: {} still running after {}",
                entry.label(),
                sheepdog::duration::format(a.timeout.unwrap_or_default())
            ));
        }
    }
    // Timed out: every entry (all mode) or the first (any mode) had to finish.
    let code = many.exit_status();
    if many.timed_out() && a.any {
        messages.push(format!(
            "wait: none of {} finished within {}",
            targets.iter().map(|e| e.label()).collect::<Vec<_>>().join(", "),
            sheepdog::duration::format(a.timeout.unwrap_or_default())
        ));
    }
    for m in &messages {
        eprintln!("sheepdog: {m}");
    }
    if json {
        outln!("{}", to_json(&view::WaitDoc { v: view::Version, waited: list, exit_status: code, exit_code: code }));
    }
    Ok(code)
}
