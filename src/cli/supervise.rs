//! The hidden `supervise-entry` subcommand: the detached supervisor's own entry point, recognised
//! before clap so that it costs every managed start nothing.

use std::ffi::OsString;
use std::path::PathBuf;

use sheepdog::manager::{self, SuperviseArgs};

use super::CliError;
use super::common::open;

/// Recognises `sheepdog [--state-dir DIR] supervise-entry ...` (the shape `manager::start`
/// writes, read back by [`SuperviseArgs::parse`]); `None` for anything else, which then goes to
/// clap.
pub(super) fn supervise_invocation(args: &[OsString]) -> Option<(Option<PathBuf>, SuperviseArgs)> {
    let (dir, rest) = super::invocation(args, SuperviseArgs::SUBCOMMAND)?;
    Some((dir, SuperviseArgs::parse(rest)?))
}

/// The hidden `supervise-entry` (started by `sheepdog start`; not for direct use): the entry's
/// detached supervisor.
pub(super) fn supervise_entry(a: SuperviseArgs, dir: Option<PathBuf>) -> Result<i32, CliError> {
    let reg = open(dir)?;
    let containment = a.containment_request();
    Ok(manager::run_supervisor(&reg, &a.id, a.cwd, a.command, containment, &super::flag))
}

/// Recognises `sheepdog [--state-dir DIR] supervise-leftovers --id ID [--out-fd N] [--err-fd N]`
/// (the shape `manager::hand_off` writes): the supervisor of what a `run --leftovers keep`
/// command left running, and the read ends of its output relay. `None` for anything else.
pub(super) fn leftovers_invocation(args: &[OsString]) -> Option<(Option<PathBuf>, String, [Option<i32>; 2])> {
    let (dir, rest) = super::invocation(args, "supervise-leftovers")?;
    let [flag, id, more @ ..] = rest else { return None };
    if flag != "--id" || id.is_empty() {
        return None;
    }
    let mut fds = [None, None];
    for pair in more.chunks(2) {
        let [flag, n] = pair else { return None };
        let slot = match flag.to_str()? {
            "--out-fd" => 0,
            "--err-fd" => 1,
            _ => return None,
        };
        fds[slot] = Some(n.to_str()?.parse().ok()?);
    }
    Some((dir, id.to_str()?.to_string(), fds))
}

pub(super) fn supervise_leftovers(id: String, dir: Option<PathBuf>, fds: [Option<i32>; 2]) -> Result<i32, CliError> {
    let reg = open(dir)?;
    Ok(manager::supervise_leftovers(&reg, &id, fds))
}
