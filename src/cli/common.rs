//! Helpers the subcommand handlers share: opening the registry, the checks of names, sessions and
//! `--env`, sizes, the owner and session defaults from the environment, and how an entry and a
//! document are rendered.

use std::ffi::OsString;
use std::path::PathBuf;

use sheepdog::entry::Entry;
use sheepdog::exit;
use sheepdog::manager::ManagerError;
use sheepdog::registry::{Registry, RegistryError};
use sheepdog::status::Status;
use sheepdog::view;

use super::CliError;

impl From<RegistryError> for CliError {
    fn from(e: RegistryError) -> Self {
        // A write that failed (full disk, read-only state dir): nothing was recorded, 74.
        let code = if e.is_not_written() { exit::NOT_RECORDED } else { exit::USAGE };
        CliError::new(code, e.to_string())
    }
}

impl From<ManagerError> for CliError {
    fn from(e: ManagerError) -> Self {
        CliError::new(e.exit_code(), e.to_string())
    }
}

pub(super) fn open(dir: Option<PathBuf>) -> Result<Registry, CliError> {
    Ok(Registry::open(dir)?)
}

/// Reports entries that were set aside as corrupt: one line each, naming the path.
pub(super) fn warn_set_aside(aside: &[sheepdog::registry::SetAside]) {
    for a in aside {
        match &a.moved_to {
            Some(to) => {
                eprintln!("sheepdog: corrupt entry {}: {}; set aside to {}", a.path.display(), a.reason, to.display())
            }
            None if a.supervisor_alive => eprintln!(
                "sheepdog: corrupt entry {}: {}; left in place (its supervisor runs and rewrites it)",
                a.path.display(),
                a.reason
            ),
            None => eprintln!("sheepdog: corrupt entry {}: {}", a.path.display(), a.reason),
        }
    }
}

/// Names are free text, except the shape of ids (`proc_12`): a name equal to another entry's id
/// would make `stop proc_12` ambiguous. Also not blank, without control characters, at most
/// 128 bytes (`entry::check_name`). Checked here, not by clap, whose message would repeat
/// the whole value (a 100 KB name, an escape sequence) on the terminal.
pub(super) fn check_name(name: Option<&str>) -> Result<(), CliError> {
    match name {
        Some(n) => sheepdog::entry::check_name(n).map_err(|why| CliError::usage(format!("--name: {why}"))),
        None => Ok(()),
    }
}

/// `--env K=V`, byte for byte: split at the first `=`; the key must be a variable name
/// (`entry::check_env_key`). Errors: one line, the key escaped.
pub(super) fn parse_env(raw: &std::ffi::OsStr) -> Result<(OsString, OsString), CliError> {
    use std::os::unix::ffi::OsStrExt;
    let b = raw.as_bytes();
    let Some(at) = b.iter().position(|&c| c == b'=') else {
        return Err(CliError::usage(format!("--env {:?}: expected KEY=VALUE", sheepdog::entry::escape_bytes(b))));
    };
    let (k, v) = (&b[..at], &b[at + 1..]);
    let key = std::str::from_utf8(k).map_err(|_| {
        CliError::usage(format!(
            "--env: invalid environment variable {:?}: the key is not UTF-8",
            sheepdog::entry::escape_bytes(k)
        ))
    })?;
    sheepdog::entry::check_env_key(key).map_err(|why| CliError::usage(format!("--env: {why}")))?;
    Ok((OsString::from(key), std::ffi::OsStr::from_bytes(v).to_os_string()))
}

/// A session id (`--session`, `$SHEEPDOG_SESSION`): as a name, no control characters and at most
/// 128 bytes; empty means none.
pub(super) fn check_session(s: Option<&str>) -> Result<(), CliError> {
    match s.filter(|s| !s.is_empty()) {
        Some(s) => sheepdog::entry::check_session(s).map_err(|why| CliError::usage(format!("--session: {why}"))),
        None => Ok(()),
    }
}

/// Sizes: `1048576`, `64KiB`, `64MiB`, `1GiB`, decimals such as `1.5MiB` (also `K`, `M`, `G`,
/// `KB`, `MB`, `GB` as powers of 1024). At least 1 KiB.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let bad = || format!("invalid size '{s}': expected bytes or a number with KiB, MiB or GiB, like 64MiB or 1.5MiB");
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() || num.starts_with('.') || num.ends_with('.') {
        return Err(bad());
    }
    let n: f64 = num.parse().map_err(|_| bad())?;
    let mult: f64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        _ => return Err(bad()),
    };
    let v = (n * mult).round();
    if !v.is_finite() || v > u64::MAX as f64 / 2.0 {
        return Err(bad());
    }
    Some(v as u64).filter(|v| *v >= 1024).ok_or_else(|| format!("invalid size '{s}': at least 1KiB"))
}

/// Environment defaults of `start --session` and `start --owner` (the flags win): a host sets
/// them once for an agent's turn.
pub const SESSION_ENV: &str = "SHEEPDOG_SESSION";

pub const OWNER_ENV: &str = "SHEEPDOG_OWNER";

/// `$SHEEPDOG_OWNER` as a pid: unset or empty is none; anything else must be a pid.
pub(super) fn owner_from_env() -> Result<Option<sheepdog::os::Pid>, CliError> {
    let Some(raw) = std::env::var_os(OWNER_ENV).filter(|v| !v.is_empty()) else { return Ok(None) };
    let text = raw.to_string_lossy();
    text.trim()
        .parse::<i32>()
        .ok()
        .and_then(sheepdog::os::Pid::new)
        .map(Some)
        .ok_or_else(|| CliError::usage(format!("{OWNER_ENV}={text}: not a process id (must be a number > 0)")))
}

pub(super) fn age(ms: u64) -> String {
    let s = sheepdog::files::now_ms().saturating_sub(ms) / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

/// An entry's view ([`sheepdog::view::EntryView`]) with the given status.
pub(super) fn entry_view(reg: &Registry, e: &Entry, status: Status) -> view::EntryView {
    view::view_with_status(reg, e, status, false)
}

/// A document as one line of JSON (a view always serializes; `{}` would say otherwise).
pub(super) fn to_json<T: serde::Serialize>(doc: &T) -> String {
    serde_json::to_string(doc).unwrap_or_else(|_| "{}".into())
}

/// Cuts or pads `s` to `w` terminal columns (display width), with `…` when cut.
pub(super) fn fit(s: &str, w: usize) -> String {
    view::fit_width(&printable(s), w, false)
}

/// Display width of `s` as printed (control characters escaped).
pub(super) fn cols(s: &str) -> usize {
    view::display_width(&printable(s))
}

/// `s` with control characters escaped (`\n`, `\u{1b}`): a command's own arguments or a forged
/// entry must not move the cursor or break a table's lines on the user's terminal.
pub(super) fn printable(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_string();
    }
    s.chars().flat_map(|c| if c.is_control() { c.escape_default().collect::<Vec<_>>() } else { vec![c] }).collect()
}

pub(super) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Resolves ids/names to entries; an unknown one is an error before anything is stopped.
pub(super) fn resolve(reg: &Registry, keys: &[String]) -> Result<Vec<Entry>, CliError> {
    let mut out: Vec<Entry> = Vec::new();
    for k in keys {
        let e = reg.find(k)?;
        if !out.iter().any(|x| x.id == e.id) {
            out.push(e);
        }
    }
    Ok(out)
}
