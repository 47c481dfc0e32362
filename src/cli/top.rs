//! `sheepdog top`: execs the `sheepdog-top` binary installed next to this one, so the
//! supervisors' binary never links the terminal UI (see `sheepdog::top`).

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

use super::CliError;

/// The name of the terminal UI's binary, looked for next to `sheepdog`.
pub const TOP_BINARY: &str = "sheepdog-top";

/// `sheepdog top`.
#[derive(Debug, clap::Args)]
pub struct TopArgs {
    /// Only this session's entries.
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// Every finished entry, not only those of the last hour.
    #[arg(long)]
    all: bool,
}

/// Replaces this process with `sheepdog-top`; returns only on failure (125).
pub(super) fn top(a: TopArgs, dir: Option<PathBuf>) -> Result<i32, CliError> {
    let exe =
        std::env::current_exe().map_err(|e| CliError::usage(format!("unable to find the sheepdog executable: {e}")))?;
    let path = exe.with_file_name(TOP_BINARY);
    let mut cmd = Command::new(&path);
    if let Some(d) = dir {
        cmd.arg("--state-dir").arg(d);
    }
    if let Some(s) = a.session {
        cmd.arg("--session").arg(s);
    }
    if a.all {
        cmd.arg("--all");
    }
    Err(super::exec_failed(&path, &cmd.exec(), "top", TOP_BINARY))
}
