//! `sheepdog send`: write to the stdin of an entry started with `--stdin pipe`.

use std::ffi::OsString;
use std::io;
use std::path::PathBuf;

use sheepdog::exit;
use sheepdog::inspect;
use sheepdog::manager;
use sheepdog::view;

use super::CliError;
use super::common::open;

/// `sheepdog send`.
#[derive(Debug, clap::Args)]
pub struct SendArgs {
    /// Id or name of an entry started with `--stdin pipe`.
    #[arg(value_name = "ID|NAME")]
    target: String,
    /// Then end its input: the command reads EOF.
    #[arg(long)]
    eof: bool,
    /// What to write, as is (add the newline yourself: `$'y\n'`); `-` reads it from stdin (at
    /// most 64 KiB). Nothing: only `--eof`.
    #[arg(value_name = "TEXT|-", allow_hyphen_values = true)]
    text: Option<OsString>,
}

pub(super) fn send(a: SendArgs, dir: Option<PathBuf>, json: bool) -> Result<i32, CliError> {
    use std::io::Read;
    use std::os::unix::ffi::OsStrExt;
    let input: Vec<u8> = match a.text.as_deref() {
        Some(t) if t == "-" => {
            let mut buf = Vec::new();
            io::stdin()
                .take(manager::SEND_MAX as u64 + 1)
                .read_to_end(&mut buf)
                .map_err(|e| CliError::usage(format!("send: unable to read stdin: {e}")))?;
            buf
        }
        Some(t) => t.as_bytes().to_vec(),
        None if a.eof => Vec::new(),
        None => return Err(CliError::usage("send: give TEXT, - (read stdin) or --eof")),
    };
    let reg = open(dir)?;
    let e = reg.find(&a.target)?;
    let status = inspect::live_status(&e, &Default::default());
    let finished = status.is_finished().then(|| view::status_text(&e, status));
    let n = manager::send(&reg, &e, finished, &input, a.eof).map_err(|err| {
        let code = match err {
            manager::SendError::NoPipe(_) | manager::SendError::TooLong(_) => exit::USAGE,
            manager::SendError::Full { .. } => exit::TIMED_OUT,
            _ => exit::REFUSED,
        };
        CliError::new(code, err.to_string())
    })?;
    if json {
        let doc = view::SendDoc { v: view::Version, id: e.id.clone(), bytes: n, eof: a.eof };
        outln!("{}", super::common::to_json(&doc));
    } else {
        outln!("Sent {n} bytes to {}{}.", e.label(), if a.eof { " and closed its stdin" } else { "" });
    }
    Ok(0)
}
