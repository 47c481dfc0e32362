//! `sheepdog reap`: stop what a crash left behind and record it.

use std::path::PathBuf;

use sheepdog::inspect;
use sheepdog::manager;
use sheepdog::view;

use super::CliError;
use super::common::{entry_view, open, to_json, warn_set_aside};

/// `sheepdog reap`.
#[derive(Debug, clap::Args)]
pub struct ReapArgs {
    /// Say what would be done; signal and record nothing.
    #[arg(long)]
    dry_run: bool,
}

pub(super) fn reap(a: ReapArgs, dir: Option<PathBuf>, json: bool) -> Result<i32, CliError> {
    let reg = open(dir)?;
    let reaped = manager::reap(&reg, a.dry_run);
    // The sentences and the status are the library's, as every front end says them.
    let said = manager::Said::from(&reaped);
    let code = said.exit_status;
    let manager::Reaped { actions, set_aside, cgroups_left, .. } = reaped;
    warn_set_aside(&set_aside);
    // What was done (or found) but could not be written: said (status 74).
    for x in actions.iter().filter(|x| x.not_recorded.is_some()) {
        eprintln!(
            "sheepdog: the result for {} ({}) was not recorded: {}",
            x.name.as_deref().unwrap_or(&x.id),
            x.id,
            x.not_recorded.as_deref().unwrap_or_default()
        );
    }
    if json {
        let actions = actions
            .iter()
            .map(|x| view::ReapView {
                action: x.clone(),
                entry: reg
                    .read(&x.id)
                    .ok()
                    .map(|e| entry_view(&reg, &e, inspect::live_status(&e, &Default::default()))),
            })
            .collect();
        outln!("{}", to_json(&view::ReapDoc { v: view::Version, dry_run: a.dry_run, actions, cgroups_left }));
        return Ok(code);
    }
    for line in &said.lines {
        outln!("{line}");
    }
    Ok(code)
}
