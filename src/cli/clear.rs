//! `sheepdog clear`: remove finished entries and their logs.

use std::path::PathBuf;

use sheepdog::entry::Entry;
use sheepdog::inspect;
use sheepdog::manager;
use sheepdog::view;

use super::CliError;
use super::common::{entry_view, open, resolve, to_json, warn_set_aside};

/// `sheepdog clear`.
#[derive(Debug, clap::Args)]
pub struct ClearArgs {
    /// Ids or names.
    #[arg(value_name = "ID|NAME")]
    targets: Vec<String>,
    /// Every finished entry.
    #[arg(long, conflicts_with = "targets")]
    finished: bool,
    /// Also remove entries whose cleanup command has not run, dropping it (without `--force`
    /// they are refused: `stop` runs the cleanup).
    #[arg(long)]
    force: bool,
}

pub(super) fn clear(a: ClearArgs, dir: Option<PathBuf>, json: bool) -> Result<i32, CliError> {
    let reg = open(dir)?;
    let targets: Vec<Entry> = if a.finished {
        let (entries, aside) = reg.list_sweeping();
        warn_set_aside(&aside);
        let census = std::cell::OnceCell::new();
        entries.into_iter().filter(|e| !inspect::live_status(e, &census).is_live()).collect()
    } else if a.targets.is_empty() {
        return Err(CliError::usage("clear: name an id or name, or --finished"));
    } else {
        resolve(&reg, &a.targets)?
    };
    let mut code = 0;
    let mut cleared = Vec::new();
    for e in &targets {
        match manager::clear(&reg, e, a.force) {
            Ok(()) => cleared.push(e.clone()),
            Err(err) => {
                eprintln!("sheepdog: {err}");
                code = code.max(err.exit_code());
            }
        }
    }
    if json {
        let cleared = cleared.iter().map(|e| entry_view(&reg, e, e.status)).collect();
        outln!("{}", to_json(&view::ClearDoc { v: view::Version, cleared }));
    } else {
        for e in &cleared {
            outln!("Cleared {}.", e.id);
        }
    }
    Ok(code)
}
