//! The hidden `supervise-entry` and `supervise-leftovers` subcommands: the detached supervisors'
//! own entry points, recognised before clap so that they cost every managed start nothing.

use std::ffi::OsString;
use std::path::PathBuf;

use sheepdog::manager::{self, LeftoversArgs, SuperviseArgs};

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
#[inline(never)]
pub(super) fn supervise_entry(a: SuperviseArgs, dir: Option<PathBuf>) -> Result<i32, CliError> {
    let reg = open(dir)?;
    let containment = a.containment_request();
    Ok(manager::run_supervisor(&reg, &a.id, a.cwd, a.command, containment, &super::flag))
}

/// Recognises `sheepdog [--state-dir DIR] supervise-leftovers --id ID [--out-fd N] [--err-fd N]`
/// (the shape `manager::hand_off` writes, read back by [`LeftoversArgs::parse`]): the supervisor
/// of what a `run --leftovers keep` command left running, and the read ends of its output relay.
/// `None` for anything else, which then goes to clap.
pub(super) fn leftovers_invocation(args: &[OsString]) -> Option<(Option<PathBuf>, LeftoversArgs)> {
    let (dir, rest) = super::invocation(args, LeftoversArgs::SUBCOMMAND)?;
    Some((dir, LeftoversArgs::parse(rest)?))
}

/// The hidden `supervise-leftovers` (started by `sheepdog run --leftovers keep`; not for direct
/// use): the supervisor of what the command left running.
#[inline(never)]
pub(super) fn supervise_leftovers(a: LeftoversArgs, dir: Option<PathBuf>) -> Result<i32, CliError> {
    let reg = open(dir)?;
    Ok(manager::supervise_leftovers(&reg, &a.id, a.output_fds))
}
