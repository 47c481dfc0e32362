//! The hidden `supervise-entry` subcommand: the detached supervisor's own entry point, recognised
//! before clap so that it costs every managed start nothing.

use std::ffi::OsString;
use std::path::PathBuf;

use sheepdog::manager;

use super::CliError;
use super::common::open;

/// The hidden `supervise-entry` (started by `sheepdog start`; not for direct use):
/// `--id ID --containment MODE [--memory-max=N] [--pids-max=N] --cwd DIR -- CMD...`.
///
/// Read by hand, before clap: every managed process has a supervisor of its own, and building
/// clap's whole command tree would leave each of them with a larger heap and stack for nothing
/// (BENCHMARKS.md, PSS per extra supervisor).
#[derive(Debug, Default)]
pub struct SuperviseArgs {
    id: String,
    cwd: PathBuf,
    containment: String,
    memory_max: Option<u64>,
    pids_max: Option<u64>,
    command: Vec<OsString>,
}

/// Recognises `sheepdog [--state-dir DIR] supervise-entry ...` (the shape `manager::start`
/// writes); `None` for anything else, which then goes to clap.
pub(super) fn supervise_invocation(args: &[OsString]) -> Option<(Option<PathBuf>, SuperviseArgs)> {
    let (dir, rest) = super::invocation(args, "supervise-entry")?;
    let mut it = rest.iter();
    let mut a = SuperviseArgs { containment: "auto".into(), ..SuperviseArgs::default() };
    while let Some(arg) = it.next() {
        let s = arg.to_str()?;
        match s {
            "--id" => a.id = it.next()?.to_str()?.to_string(),
            "--cwd" => a.cwd = PathBuf::from(it.next()?),
            "--containment" => a.containment = it.next()?.to_str()?.to_string(),
            "--" => {
                a.command = it.cloned().collect();
                break;
            }
            _ => {
                if let Some(v) = s.strip_prefix("--memory-max=") {
                    a.memory_max = Some(v.parse().ok()?);
                } else if let Some(v) = s.strip_prefix("--pids-max=") {
                    a.pids_max = Some(v.parse().ok()?);
                } else {
                    return None;
                }
            }
        }
    }
    (!a.id.is_empty() && !a.command.is_empty()).then_some((dir, a))
}

pub(super) fn supervise_entry(a: SuperviseArgs, dir: Option<PathBuf>) -> Result<i32, CliError> {
    let reg = open(dir)?;
    let containment = sheepdog::cgroup::Request {
        mode: sheepdog::cgroup::Mode::parse(&a.containment).unwrap_or_default(),
        limits: sheepdog::cgroup::Limits { memory_max: a.memory_max, pids_max: a.pids_max },
        label: a.id.clone(),
        name: None,
    };
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
