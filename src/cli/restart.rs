//! `sheepdog restart`: stop entries and start them again with the same options.

use std::path::PathBuf;
use std::time::Duration;

use sheepdog::manager;
use sheepdog::view;

use super::common::{open, resolve, to_json};
use super::start::render_started;
use super::{CliError, parse_duration};

/// `sheepdog restart`.
#[derive(Debug, clap::Args)]
pub struct RestartArgs {
    /// Ids or names.
    #[arg(value_name = "ID|NAME", required = true)]
    targets: Vec<String>,
    /// Override the entry's term grace for the stop.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_hyphen_values = true)]
    term_grace: Option<Duration>,
}

pub(super) fn restart(a: RestartArgs, dir: Option<PathBuf>, json: bool) -> Result<i32, CliError> {
    let reg = open(dir)?;
    let targets = resolve(&reg, &a.targets)?;
    let mut code = 0;
    let mut list = Vec::new();
    for old in &targets {
        match manager::restart(&reg, old, a.term_grace) {
            Ok(r) => {
                render_started(&reg, &r.entry, r.ready.as_ref(), &[], json.then_some(&mut list));
                // The old entry's cleanup failed: said (the status says it too, as `stop`'s does).
                if let Some(line) = r.stopped.cleanup_error() {
                    eprintln!("sheepdog: {}: {line}", old.label());
                }
                code = code.max(manager::Said::from(&r).exit_status);
            }
            Err(err) => {
                eprintln!("sheepdog: unable to restart {}: {err}", old.label());
                code = code.max(err.exit_code());
            }
        }
    }
    if json {
        outln!("{}", to_json(&view::RestartDoc { v: view::Version, restarted: list }));
    }
    Ok(code)
}
