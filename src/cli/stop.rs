//! `sheepdog stop`: the whole tree of each entry, then its cleanup command.

use std::path::PathBuf;
use std::time::Duration;

use sheepdog::exit;
use sheepdog::manager::{self, ManagerError, Selection};
use sheepdog::view;

use super::common::{open, to_json, warn_set_aside};
use super::{CliError, parse_duration};

/// `sheepdog stop`.
#[derive(Debug, clap::Args)]
pub struct StopArgs {
    /// Ids or names.
    #[arg(value_name = "ID|NAME")]
    targets: Vec<String>,
    /// Every entry of this session (the cancel of a whole agent turn).
    #[arg(long, value_name = "ID", conflicts_with_all = ["targets", "all"])]
    session: Option<String>,
    /// Every running entry.
    #[arg(long, conflicts_with = "targets")]
    all: bool,
    /// With --session: a session with nothing left to stop is not an error (an idempotent
    /// cancel, as `rm -f`): nothing is printed, `--json` gives `"stopped": []`, status 0.
    #[arg(long, requires = "session")]
    missing_ok: bool,
    /// Override the entry's term grace for this stop.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_hyphen_values = true)]
    term_grace: Option<Duration>,
}

pub(super) fn stop(a: StopArgs, dir: Option<PathBuf>, json: bool) -> Result<i32, CliError> {
    if a.missing_ok && a.session.is_none() {
        // clap's `requires` is not checked when ids are given too.
        return Err(CliError::usage("stop: --missing-ok goes with --session ID (see 'sheepdog stop --help')"));
    }
    let reg = open(dir)?;
    // The CLI's `--all` is every entry of the registry (MCP's `all` is the agent's session).
    let selection = match (&a.session, a.all) {
        (Some(s), _) => Selection::Session(s.clone()),
        (None, true) => Selection::Every,
        (None, false) if a.targets.is_empty() => {
            return Err(CliError::usage("stop: name an id or name, --session ID or --all"));
        }
        (None, false) => Selection::Keys(a.targets.clone()),
    };
    let selected = selection.for_stop(&reg)?;
    warn_set_aside(&selected.set_aside);
    let targets = selected.entries;
    if let (Some(s), true, false) = (&a.session, targets.is_empty(), a.missing_ok) {
        return Err(CliError::new(
            exit::REFUSED,
            format!(
                "stop: nothing matched --session {s} (no entry of that session is running or has a pending cleanup)"
            ),
        ));
    }
    let results = manager::stop_many(&reg, &targets, a.term_grace);
    let mut code = 0;
    let mut list = Vec::new();
    for (e, r) in targets.iter().zip(results) {
        match r {
            Ok(o) => {
                let said = manager::Said::from(&o);
                if json {
                    list.push(o.view(&reg));
                } else {
                    for line in &said.lines {
                        outln!("{line}");
                    }
                }
                code = code.max(said.exit_status);
            }
            Err(err @ ManagerError::NotRecorded { .. }) => {
                // The tree is gone: said on stdout too (the one document a host reads), with
                // why nothing of it is on disk.
                eprintln!("sheepdog: {err}");
                code = code.max(err.exit_code());
                if let ManagerError::NotRecorded { entry, source, .. } = &err {
                    if json {
                        list.push(manager::not_recorded_view(&reg, entry, source));
                    } else {
                        outln!("{}", manager::not_recorded_line(entry));
                    }
                }
            }
            Err(err) => {
                eprintln!("sheepdog: unable to stop {}: {err}", e.label());
                code = code.max(err.exit_code());
            }
        }
    }
    if json {
        outln!("{}", to_json(&view::StopDoc { v: view::Version, stopped: list }));
    }
    Ok(code)
}
