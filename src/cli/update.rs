//! `sheepdog update`: change an entry's cleanup command or name.

use std::path::PathBuf;
use std::time::Duration;

use sheepdog::inspect;
use sheepdog::manager;
use sheepdog::view;

use super::common::{check_name, entry_view, open, to_json};
use super::{CliError, parse_duration};

/// `sheepdog update`.
#[derive(Debug, clap::Args)]
pub struct UpdateArgs {
    /// Id or name; running and exited entries alike (a cleanup attached to an exited entry runs at its next stop).
    #[arg(value_name = "ID|NAME")]
    target: String,
    /// Attach or replace the cleanup command (run with `sh -c` after the stop).
    #[arg(long, value_name = "CMD", conflicts_with = "no_cleanup")]
    cleanup: Option<String>,
    /// Remove the cleanup command.
    #[arg(long)]
    no_cleanup: bool,
    /// The cleanup's bound (default 10s, or the one already set).
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_hyphen_values = true)]
    cleanup_timeout: Option<Duration>,
    /// Rename (unique among running entries).
    #[arg(long)]
    name: Option<String>,
}

pub(super) fn update(a: UpdateArgs, dir: Option<PathBuf>, json: bool) -> Result<i32, CliError> {
    check_name(a.name.as_deref())?;
    let changes_cleanup = a.cleanup.is_some() || a.no_cleanup || a.cleanup_timeout.is_some();
    if !changes_cleanup && a.name.is_none() {
        return Err(CliError::usage(format!(
            "update {}: nothing was changed (give --cleanup CMD, --no-cleanup, --cleanup-timeout DUR or --name N)",
            a.target
        )));
    }
    let reg = open(dir)?;
    let e = reg.find(&a.target)?;
    let req = manager::UpdateRequest {
        cleanup: if a.no_cleanup { Some(None) } else { a.cleanup.map(Some) },
        cleanup_timeout: a.cleanup_timeout,
        name: a.name,
    };
    let e = manager::update(&reg, &e, &req)?;
    if json {
        let entry = entry_view(&reg, &e, inspect::live_status(&e, &Default::default()));
        outln!("{}", to_json(&view::EntryDoc { v: view::Version, entry }));
    } else {
        outln!("Updated {}.", e.label());
    }
    Ok(0)
}
