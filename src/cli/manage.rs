//! Handlers of the managed-process subcommands: start, ps, logs, stop, update, wait, reap, clear,
//! and the hidden `supervise-entry`.

use std::ffi::OsString;
use std::io::{self, Write};
use std::path::PathBuf;
use std::time::Duration;

use sheepdog::entry::ReadySpec;
use sheepdog::entry::{Cleanup, Entry};
use sheepdog::exit;
use sheepdog::inspect;
use sheepdog::logread::{self, Cursor, LogQuery, LogStream};
use sheepdog::manager::{self, ManagerError, StartRequest, Waited};
use sheepdog::ready::{DEFAULT_READY_TIMEOUT_MS, ReadyOutcome};
use sheepdog::registry::{Registry, RegistryError};
use sheepdog::status::ReapKind;
use sheepdog::status::Status;
use sheepdog::stop::StopPolicy;
use sheepdog::view;

use super::{CliError, parse_duration, parse_positive_duration, pid_arg};

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

fn open(dir: Option<PathBuf>) -> Result<Registry, CliError> {
    Ok(Registry::open(dir)?)
}

/// Reports entries that were set aside as corrupt: one line each, naming the path.
fn warn_set_aside(aside: &[sheepdog::registry::SetAside]) {
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
fn check_name(name: Option<&str>) -> Result<(), CliError> {
    match name {
        Some(n) => sheepdog::entry::check_name(n).map_err(|why| CliError::usage(format!("--name: {why}"))),
        None => Ok(()),
    }
}

/// `--env K=V`, byte for byte: split at the first `=`; the key must be a variable name
/// (`entry::check_env_key`). Errors: one line, the key escaped.
fn parse_env(raw: &std::ffi::OsStr) -> Result<(OsString, OsString), CliError> {
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
fn check_session(s: Option<&str>) -> Result<(), CliError> {
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
fn owner_from_env() -> Result<Option<sheepdog::os::Pid>, CliError> {
    let Some(raw) = std::env::var_os(OWNER_ENV).filter(|v| !v.is_empty()) else { return Ok(None) };
    let text = raw.to_string_lossy();
    text.trim()
        .parse::<i32>()
        .ok()
        .and_then(sheepdog::os::Pid::new)
        .map(Some)
        .ok_or_else(|| CliError::usage(format!("{OWNER_ENV}={text}: not a process id (must be a number > 0)")))
}

/// `sheepdog start`.
#[derive(Debug, clap::Args)]
pub struct StartArgs {
    /// A name, unique among running entries; every command takes it in place of the id.
    #[arg(long)]
    name: Option<String>,
    /// With --name: if an entry of that name is running, stop it (cleanup included), wait for
    /// its ports to be free, then start this one in its place (`restartOf` links them).
    #[arg(long, requires = "name")]
    replace: bool,
    /// The agent session (turn) this process belongs to; `stop --session` stops them all.
    #[arg(long, value_name = "ID", env = SESSION_ENV)]
    session: Option<String>,
    /// Stop the process when this process dies (any process, identity-checked). Default:
    /// $SHEEPDOG_OWNER (unset or empty: none).
    #[arg(long, value_name = "PID", allow_hyphen_values = true)]
    owner: Option<i32>,
    /// Working directory of the command (default: the current one).
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// Extra environment for the command; repeatable. Values are kept in the entry file (0600)
    /// and never shown: `ps` and JSON show the keys only.
    #[arg(long, value_name = "K=V")]
    env: Vec<OsString>,
    /// Run the one stop after this long and record `timed out after DUR` (more than 0).
    #[arg(long, value_name = "DUR", value_parser = parse_positive_duration, allow_hyphen_values = true)]
    timeout: Option<Duration>,
    /// After SIGTERM, how long the tree may take to exit before SIGKILL.
    #[arg(long, value_name = "DUR", default_value = "3s", value_parser = parse_duration, allow_hyphen_values = true)]
    term_grace: Duration,
    /// After SIGKILL, how long to wait for the kernel.
    #[arg(long, value_name = "DUR", default_value = "1.5s", value_parser = parse_duration, allow_hyphen_values = true)]
    kill_wait: Duration,
    /// A command (run with `sh -c`) that undoes what CMD started outside its own tree; it runs
    /// after every stop.
    #[arg(long, value_name = "CMD")]
    cleanup: Option<String>,
    /// Bound on the cleanup command (default 10s; needs --cleanup).
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_hyphen_values = true)]
    cleanup_timeout: Option<Duration>,
    /// Cap per log file; at the cap it rotates to one `.1`.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    log_max: Option<u64>,
    #[command(flatten)]
    containment: super::ContainmentArgs,
    /// Return once a process of the tree listens on this TCP port (status 1 if the command exits
    /// first, 124 if --ready-timeout passes: the process keeps running).
    #[arg(long, value_name = "PORT", conflicts_with_all = ["ready_log", "ready_listen"], value_parser = clap::value_parser!(u16).range(1..))]
    ready_port: Option<u16>,
    /// Return once a line of stdout or stderr matches this regex.
    #[arg(long, value_name = "REGEX", conflicts_with = "ready_listen")]
    ready_log: Option<String>,
    /// Return once any process of the tree listens on a TCP port (reported).
    #[arg(long)]
    ready_listen: bool,
    /// How long --ready-* may wait (default 30s).
    #[arg(long, value_name = "DUR", value_parser = parse_positive_duration, allow_hyphen_values = true)]
    ready_timeout: Option<Duration>,
    /// The command's stdin: `null` (/dev/null, the default) or `pipe` (a pipe its supervisor
    /// holds; write to it with `sheepdog send`).
    #[arg(long, value_name = "MODE", value_enum, default_value = "null")]
    stdin: StdinMode,
    /// The command, after `--`.
    #[arg(value_name = "CMD", trailing_var_arg = true)]
    command: Vec<OsString>,
}

impl StartArgs {
    fn ready_spec(&self) -> Result<Option<ReadySpec>, CliError> {
        let spec = ReadySpec {
            port: self.ready_port,
            log: self.ready_log.clone(),
            listen: self.ready_listen,
            timeout_ms: self.ready_timeout.map_or(DEFAULT_READY_TIMEOUT_MS, |d| d.as_millis() as u64),
        };
        if !spec.is_set() {
            if self.ready_timeout.is_some() {
                return Err(CliError::usage("--ready-timeout needs --ready-port, --ready-log or --ready-listen"));
            }
            return Ok(None);
        }
        if let Some(l) = &spec.log {
            ReadySpec::check_pattern(l).map_err(|why| CliError::usage(format!("--ready-log '{l}': {why}")))?;
        }
        Ok(Some(spec))
    }
}

/// Prints a start's (or restart's) result and returns its status: 0, or 1 when the command
/// exited before it was ready (its last lines on stderr), 124 when it was not ready in time.
fn render_started(
    reg: &Registry,
    e: &Entry,
    ready: Option<&ReadyOutcome>,
    warnings: &[sheepdog::view::Nudge],
    json_out: Option<&mut Vec<view::StartView>>,
) -> i32 {
    let code = match ready {
        Some(ReadyOutcome::Exited { .. }) => exit::REFUSED,
        Some(ReadyOutcome::TimedOut { .. }) => exit::TIMED_OUT,
        _ => exit::OK,
    };
    let shown = match ready {
        Some(ReadyOutcome::Exited { entry, .. }) => (**entry).clone(),
        _ => e.clone(),
    };
    if let Some(list) = json_out {
        let v = view::StartView {
            entry: view::view_with_status(reg, &shown, inspect::live_status(&shown, &Default::default()), false),
            ready: ready.map(|r| r.report()),
            warnings: warnings.to_vec(),
        };
        list.push(v);
        return code;
    }
    outln!("{}", e.id);
    match ready {
        Some(ReadyOutcome::Ready { after_ms, matched, port }) => match (matched, port) {
            (_, Some(p)) => outln!("Ready after {}: listening on port {p}.", ms_text(*after_ms)),
            (Some(line), None) => outln!("Ready after {}: {line}", ms_text(*after_ms)),
            _ => outln!("Ready after {}.", ms_text(*after_ms)),
        },
        Some(ReadyOutcome::Exited { entry, last_lines, .. }) => {
            eprintln!(
                "sheepdog: {} {} before it was ready; its last {} lines:",
                entry.label(),
                view::status_text(entry, entry.status),
                last_lines.len()
            );
            for l in last_lines {
                eprintln!("{l}");
            }
        }
        Some(ReadyOutcome::TimedOut { after_ms }) => eprintln!(
            "sheepdog: {} is not ready yet after {}; it keeps running (stop it with 'sheepdog stop {}')",
            e.label(),
            ms_text(*after_ms),
            e.id
        ),
        None => {}
    }
    code
}

/// `1.2s`, `350ms`.
fn ms_text(ms: u64) -> String {
    if ms >= 1000 { format!("{:.1}s", ms as f64 / 1000.0) } else { format!("{ms}ms") }
}

pub(super) fn start(a: StartArgs, dir: Option<PathBuf>, json: bool) -> Result<i32, CliError> {
    if a.command.is_empty() {
        return Err(CliError::usage("start: missing command (usage: sheepdog start [OPTIONS] -- CMD [ARGS...])"));
    }
    let owner = match a.owner {
        Some(p) => Some(pid_arg("--owner", p)?),
        None => owner_from_env()?,
    };
    let (containment, limits) = a.containment.resolve()?;
    let ready = a.ready_spec()?;
    if a.cleanup_timeout.is_some() && a.cleanup.is_none() {
        return Err(CliError::usage("--cleanup-timeout needs --cleanup"));
    }
    if let Some(d) = a.cwd.as_ref().filter(|d| !d.is_dir()) {
        return Err(CliError::usage(format!("--cwd {}: not a directory", d.display())));
    }
    check_name(a.name.as_deref())?;
    check_session(a.session.as_deref())?;
    let env = a.env.iter().map(|kv| parse_env(kv)).collect::<Result<Vec<_>, _>>()?;
    let session = a.session.clone().filter(|s| !s.is_empty());
    let reg = open(dir)?;
    let req = StartRequest {
        name: a.name.clone(),
        session_id: session,
        owner,
        cwd: a.cwd,
        env,
        timeout: a.timeout,
        policy: StopPolicy { stdin_grace: Duration::ZERO, term_grace: a.term_grace, kill_wait: a.kill_wait },
        cleanup: a.cleanup.map(|command| Cleanup {
            command,
            timeout_ms: a.cleanup_timeout.map_or(manager::CLEANUP_TIMEOUT_MS, |d| d.as_millis() as u64),
        }),
        log_max: a.log_max,
        containment,
        limits,
        ready,
        restart_of: None,
        auto_name: None,
        stdin_pipe: a.stdin == StdinMode::Pipe,
        argv: a.command,
    };
    let started = if a.replace { manager::start_replacing(&reg, req)? } else { manager::start_ready(&reg, req)? };
    for w in &started.nudges {
        eprintln!("sheepdog: warning: {w}");
    }
    let mut list = Vec::new();
    let code = render_started(&reg, &started.entry, started.ready.as_ref(), &started.nudges, json.then_some(&mut list));
    if let (true, Some(start)) = (json, list.pop()) {
        outln!("{}", to_json(&view::StartDoc { v: view::Version, start }));
    }
    Ok(code)
}

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
                let c = render_started(&reg, &r.entry, r.ready.as_ref(), &[], json.then_some(&mut list));
                code = code.max(c);
                // The old entry's cleanup failed: said, and status 1, as `stop` does.
                if let Some(line) = sheepdog::cleanup::failure_line(&r.stopped.entry) {
                    eprintln!("sheepdog: {}: {line}", old.label());
                    code = code.max(exit::REFUSED);
                }
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

/// `sheepdog ps`.
#[derive(Debug, clap::Args)]
pub struct PsArgs {
    /// Every entry, finished ones too.
    #[arg(long)]
    all: bool,
    /// Only this session's entries.
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// Only entries with this status (running, exited, killed, stopped, timedOut, orphaned,
    /// reaped, lost, starting), finished or not, of any age.
    #[arg(long, value_name = "STATUS", value_parser = parse_status)]
    status: Option<Status>,
    /// List each entry's live processes (pid, pgid, sid = Unix session id, command).
    #[arg(long)]
    tree: bool,
}

/// A status token (`timedOut`; `timed out` too), strictly: an unknown word is an error.
fn parse_status(s: &str) -> Result<Status, String> {
    s.parse()
}

/// How long a failed finished entry stays in the default `ps` listing: 1 hour.
pub const PS_RECENT_FAILED_MS: u64 = 3_600_000;

fn age(ms: u64) -> String {
    let s = sheepdog::files::now_ms().saturating_sub(ms) / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

/// An entry's view ([`sheepdog::view::EntryView`]) with the given status.
fn entry_view(reg: &Registry, e: &Entry, status: Status) -> view::EntryView {
    view::view_with_status(reg, e, status, false)
}

/// A document as one line of JSON (a view always serializes; `{}` would say otherwise).
fn to_json<T: serde::Serialize>(doc: &T) -> String {
    serde_json::to_string(doc).unwrap_or_else(|_| "{}".into())
}

/// Cuts or pads `s` to `w` terminal columns (display width), with `…` when cut.
fn fit(s: &str, w: usize) -> String {
    view::fit_width(&printable(s), w, false)
}

/// Display width of `s` as printed (control characters escaped).
fn cols(s: &str) -> usize {
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

pub(super) fn ps(a: PsArgs, dir: Option<PathBuf>, json: bool) -> Result<i32, CliError> {
    let Some(reg) = Registry::open_existing(dir)? else {
        // Read-only: no state dir means nothing was ever started here; do not create one.
        if json {
            outln!("{}", to_json(&view::PsDoc { v: view::Version, entries: &[], hidden: 0 }));
        } else {
            outln!("No managed processes.");
        }
        return Ok(0);
    };
    let query = view::ListQuery {
        session: a.session.clone(),
        status: a.status,
        all: a.all,
        recent_failures_ms: Some(PS_RECENT_FAILED_MS),
        tree: a.tree,
    };
    let view::Listing { rows, hidden, aside } = view::list(&reg, &query);
    warn_set_aside(&aside);
    let mut out = io::BufWriter::new(io::stdout().lock());
    if json {
        let _ = serde_json::to_writer(&mut out, &view::PsDoc { v: view::Version, entries: &rows, hidden });
        let _ = writeln!(out);
        let _ = out.flush();
        return Ok(0);
    }
    if rows.is_empty() && hidden == 0 {
        let _ = writeln!(out, "No managed processes.");
        return Ok(0);
    }
    let width = |f: &dyn Fn(&view::EntryView) -> usize, min: usize, max: usize| {
        rows.iter().map(f).max().unwrap_or(0).clamp(min, max)
    };
    let wid = width(&|v| cols(&v.id), 2, 16);
    let wname = width(&|v| cols(&v.name), 4, 24);
    let wsess = width(&|v| cols(v.session_id.as_deref().unwrap_or("-")), 7, 20);
    let wstat = width(&|v| cols(&v.status_text), 6, 40);
    let ports = |v: &view::EntryView| {
        if v.ports.is_empty() {
            "-".to_string()
        } else {
            v.ports.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(",")
        }
    };
    let wports = width(&|v| ports(v).len(), 5, 24);
    let _ = writeln!(
        out,
        "{:<wid$} {:<wname$} {:<wsess$} {:<wstat$} {:>7} {:<wports$} {:>5} {:>7} {:>7} {:>5}  COMMAND",
        "ID", "NAME", "SESSION", "STATUS", "PID", "PORTS", "AGE", "CPU", "MEM", "TASKS"
    );
    for v in &rows {
        // Usage of the tree's cgroup (cgroup tier); `-` where there is no figure.
        let dash = || "-".to_string();
        let u = v.usage;
        let _ = writeln!(
            out,
            "{} {} {} {} {:>7} {} {:>5} {:>7} {:>7} {:>5}  {}",
            fit(&v.id, wid),
            fit(&v.name, wname),
            fit(v.session_id.as_deref().unwrap_or("-"), wsess),
            view::fit_status(&printable(&v.status_text), wstat),
            v.pid.map(|p| p.to_string()).unwrap_or_else(dash),
            fit(&ports(v), wports),
            age(v.started_at),
            u.map(|u| cpu_text(u.cpu_ms)).unwrap_or_else(dash),
            u.and_then(|u| u.memory_bytes).map(mem_text).unwrap_or_else(dash),
            u.and_then(|u| u.tasks).map(|t| t.to_string()).unwrap_or_else(dash),
            printable(&v.command_preview)
        );
        for p in v.tree.iter().flatten() {
            let _ = writeln!(out, "    {:>7}  pgid {:<7} sid {:<7} {}", p.pid, p.pgid, p.sid, printable(&p.command));
        }
    }
    if hidden > 0 {
        let _ = writeln!(
            out,
            "({hidden} finished {} hidden: 'sheepdog ps --all' lists every entry)",
            if hidden == 1 { "entry" } else { "entries" }
        );
    }
    Ok(0)
}

/// CPU time for the table: `850ms`, `12.3s`, `4m05s`.
fn cpu_text(ms: u64) -> String {
    match ms {
        0..1000 => format!("{ms}ms"),
        1000..60_000 => format!("{:.1}s", ms as f64 / 1000.0),
        _ => format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60),
    }
}

/// Memory for the table: `512K`, `12.5M`, `1.2G`.
fn mem_text(bytes: u64) -> String {
    match bytes {
        0..1_048_576 => format!("{}K", bytes / 1024),
        1_048_576..1_073_741_824 => format!("{:.1}M", bytes as f64 / 1_048_576.0),
        _ => format!("{:.1}G", bytes as f64 / 1_073_741_824.0),
    }
}

/// `sheepdog logs`.
#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    /// Id or name.
    #[arg(value_name = "ID|NAME")]
    target: String,
    /// Which log: `out` (stdout, byte-exact), `err` (stderr), `all` (combined, tagged lines with
    /// sheepdog's markers).
    #[arg(long, default_value = "all", value_parser = ["out", "err", "all"])]
    stream: String,
    /// Only the last N lines (after --grep and --since).
    #[arg(long, value_name = "N", conflicts_with = "head")]
    tail: Option<usize>,
    /// Only the first N lines (after --grep and --since).
    #[arg(long, value_name = "N", conflicts_with = "follow")]
    head: Option<usize>,
    /// Only lines matching this regex (for the combined log, the text after its [out]/[err] tag).
    #[arg(long, value_name = "REGEX")]
    grep: Option<String>,
    /// Only lines that arrived in the last DUR (to the second).
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_hyphen_values = true)]
    since: Option<Duration>,
    /// Only what came after a previous read's cursor (`logs --json` prints it), rotations
    /// included.
    #[arg(long, value_name = "CURSOR", conflicts_with = "follow")]
    cursor: Option<String>,
    /// Keep printing as the log grows; ends when the process has exited and the log is drained.
    #[arg(long, short = 'f')]
    follow: bool,
}

pub(super) fn logs(a: LogsArgs, dir: Option<PathBuf>, json: bool) -> Result<i32, CliError> {
    let grep = a
        .grep
        .as_deref()
        .map(|g| {
            regex::Regex::new(g).map_err(|e| CliError::usage(format!("--grep '{g}': {}", one_line(&e.to_string()))))
        })
        .transpose()?;
    let cursor = a.cursor.as_deref().map(Cursor::parse).transpose().map_err(CliError::usage)?;
    if json && a.follow {
        return Err(CliError::usage("logs: --json prints one document; use --cursor to poll instead of --follow"));
    }
    let reg = Registry::open_existing(dir)?.ok_or_else(|| RegistryError::NotFound(a.target.clone()))?;
    let e = reg.find(&a.target)?;
    let default_cap = a.tail.is_none() && a.head.is_none() && cursor.is_none() && !a.follow;
    let q = LogQuery {
        stream: LogStream::parse(&a.stream).unwrap_or_default(),
        tail: a.tail,
        head: a.head,
        grep,
        since_ms: a.since.map(|d| sheepdog::files::now_ms().saturating_sub(d.as_millis() as u64)),
        cursor,
        max_lines: default_cap.then_some(logread::DEFAULT_MAX_LINES),
        max_bytes: default_cap.then_some(logread::DEFAULT_MAX_BYTES),
        partial: !json,
    };
    if a.follow {
        let mut out = io::stdout().lock();
        // A closed stdout (`| head -n 1`) ends the command quietly with status 0, as ripgrep
        // does; a reader that went away ends it even while the process is quiet.
        let mut emit = |bytes: &[u8]| -> bool {
            if bytes.is_empty() {
                return !sheepdog::os::process::peer_closed(1);
            }
            out.write_all(bytes).and_then(|_| out.flush()).is_ok()
        };
        logread::follow(&reg, &e.id, &q, &mut emit)?;
        return Ok(0);
    }
    let chunk = logread::read(&reg, &e.id, &q)?;
    if json {
        outln!("{}", to_json(&view::LogsDoc { v: view::Version, chunk }));
        return Ok(0);
    }
    let mut out = io::stdout().lock();
    if out.write_all(&chunk.bytes).and_then(|_| out.flush()).is_err() {
        return Ok(0);
    }
    if default_cap && chunk.skipped_lines > 0 {
        eprintln!(
            "sheepdog: {} earlier {} not shown (by default at most the last {} lines or {} KiB); use --tail N, --head N or --grep REGEX, or read {}",
            chunk.skipped_lines,
            if chunk.skipped_lines == 1 { "line" } else { "lines" },
            logread::DEFAULT_MAX_LINES,
            logread::DEFAULT_MAX_BYTES / 1024,
            chunk.path.display()
        );
    }
    Ok(0)
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `sheepdog stop`.
#[derive(Debug, clap::Args)]
pub struct StopArgs {
    /// Ids or names.
    #[arg(value_name = "ID|NAME")]
    targets: Vec<String>,
    /// Every entry of this session (the cancel of a whole agent turn).
    #[arg(long, value_name = "ID", conflicts_with_all = ["targets", "all"])]
    session: Option<String>,
    /// Every running entry.
    #[arg(long, conflicts_with = "targets")]
    all: bool,
    /// Override the entry's term grace for this stop.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_hyphen_values = true)]
    term_grace: Option<Duration>,
}

/// Resolves ids/names to entries; an unknown one is an error before anything is stopped.
fn resolve(reg: &Registry, keys: &[String]) -> Result<Vec<Entry>, CliError> {
    let mut out: Vec<Entry> = Vec::new();
    for k in keys {
        let e = reg.find(k)?;
        if !out.iter().any(|x| x.id == e.id) {
            out.push(e);
        }
    }
    Ok(out)
}

pub(super) fn stop(a: StopArgs, dir: Option<PathBuf>, json: bool) -> Result<i32, CliError> {
    let reg = open(dir)?;
    let targets: Vec<Entry> = if let Some(s) = &a.session {
        let (targets, aside) = manager::stop_selection(&reg, Some(s));
        warn_set_aside(&aside);
        if targets.is_empty() {
            return Err(CliError::new(
                exit::REFUSED,
                format!(
                    "stop: nothing matched --session {s} (no entry of that session is running or has a pending cleanup)"
                ),
            ));
        }
        targets
    } else if a.all {
        let (targets, aside) = manager::stop_selection(&reg, None);
        warn_set_aside(&aside);
        targets
    } else if a.targets.is_empty() {
        return Err(CliError::usage("stop: name an id or name, --session ID or --all"));
    } else {
        let mut out: Vec<Entry> = Vec::new();
        for k in &a.targets {
            let e = manager::find_for_stop(&reg, k)?;
            if !out.iter().any(|x| x.id == e.id) {
                out.push(e);
            }
        }
        out
    };
    let results = manager::stop_many(&reg, &targets, a.term_grace);
    let mut code = 0;
    let mut list = Vec::new();
    for (e, r) in targets.iter().zip(results) {
        match r {
            Ok(o) => {
                let cleanup_failed = sheepdog::cleanup::failure_line(&o.entry);
                if json {
                    let v = view::StopView::new(
                        view::view_with_status(&reg, &o.entry, o.entry.status, false),
                        o.already_finished,
                        o.tree_gone,
                        cleanup_failed.clone(),
                    );
                    list.push(v);
                } else {
                    outln!("{}", o.headline());
                    if let Some(line) = &o.not_signalled {
                        outln!("{line}");
                    }
                    if let Some(line) = &cleanup_failed {
                        outln!("{line}");
                    }
                }
                if !o.tree_gone {
                    code = code.max(exit::TIMED_OUT);
                } else if cleanup_failed.is_some() {
                    code = code.max(exit::REFUSED);
                }
            }
            Err(err @ ManagerError::NotRecorded { .. }) => {
                // The tree is gone: said on stdout too (the one document a host reads), with
                // why nothing of it is on disk.
                eprintln!("sheepdog: {err}");
                code = code.max(err.exit_code());
                if let ManagerError::NotRecorded { entry, source, .. } = &err {
                    if json {
                        let v = view::StopView::new(
                            view::view_with_status(&reg, entry, entry.status, false),
                            false,
                            true,
                            None,
                        )
                        .not_recorded(source.to_string());
                        list.push(v);
                    } else {
                        outln!("Stopped {} (not recorded).", entry.label());
                    }
                }
            }
            Err(err) => {
                eprintln!("sheepdog: unable to stop {}: {err}", e.label());
                code = code.max(err.exit_code());
            }
        }
    }
    if json {
        outln!("{}", to_json(&view::StopDoc { v: view::Version, stopped: list }));
    }
    Ok(code)
}

/// `start --stdin`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StdinMode {
    /// /dev/null.
    Null,
    /// A pipe held by the supervisor (`sheepdog send` writes to it).
    Pipe,
}

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
        outln!("{}", serde_json::json!({"id": e.id, "bytes": n, "eof": a.eof}));
    } else {
        outln!("Sent {n} bytes to {}{}.", e.label(), if a.eof { " and closed its stdin" } else { "" });
    }
    Ok(0)
}

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

/// `sheepdog wait`.
#[derive(Debug, clap::Args)]
pub struct WaitArgs {
    /// Ids or names.
    #[arg(value_name = "ID|NAME")]
    targets: Vec<String>,
    /// Every running entry of this session.
    #[arg(long, value_name = "ID", conflicts_with = "targets")]
    session: Option<String>,
    /// Return when the first one finishes (exit with its status).
    #[arg(long)]
    any: bool,
    /// Give up after this long (status 124; the processes keep running).
    #[arg(long, value_name = "DUR", value_parser = parse_positive_duration, allow_hyphen_values = true)]
    timeout: Option<Duration>,
}

/// Lines of output `wait --json` shows per entry: 20.
const WAIT_TAIL: usize = 20;

pub(super) fn wait(a: WaitArgs, dir: Option<PathBuf>, json: bool) -> Result<i32, CliError> {
    if a.targets.is_empty() && a.session.is_none() {
        return Err(CliError::usage("wait: name one or more ids or names, or --session ID"));
    }
    let Some(reg) = Registry::open_existing(dir)? else {
        let what = a.targets.first().cloned().unwrap_or_default();
        if a.session.is_some() {
            return Err(CliError::usage(format!("wait: no entries in session '{}'", a.session.unwrap_or_default())));
        }
        return Err(RegistryError::NotFound(what).into());
    };
    let targets: Vec<Entry> = match &a.session {
        Some(s) => {
            let (entries, aside) = reg.list();
            warn_set_aside(&aside);
            let census = std::cell::OnceCell::new();
            entries
                .into_iter()
                .filter(|e| e.session_id.as_ref() == Some(s) && inspect::live_status(e, &census).is_live())
                .collect()
        }
        None => resolve(&reg, &a.targets)?,
    };
    if targets.is_empty() {
        if json {
            let doc = view::WaitDoc { v: view::Version, waited: Vec::new(), exit_status: 0, exit_code: 0 };
            outln!("{}", to_json(&doc));
        } else {
            outln!("Nothing to wait for.");
        }
        return Ok(0);
    }
    let many = manager::wait_many(&reg, &targets, a.any, a.timeout)?;
    let single = targets.len() == 1;
    let mut list = Vec::new();
    let mut messages = Vec::new();
    let mut code = 0;
    let mut any_still_running = false;
    for (i, (e, w)) in targets.iter().zip(&many.results).enumerate() {
        let (entry, finished, status) = match w {
            Waited::Finished(x) => (x.clone(), true, manager::exit_status_of(x)),
            Waited::NoResult(x) => (x.clone(), false, None),
            Waited::TimedOut => (reg.read(&e.id).unwrap_or_else(|_| e.clone()), false, None),
        };
        let st = inspect::live_status(&entry, &Default::default());
        if matches!(w, Waited::TimedOut) {
            any_still_running = true;
        }
        if Some(i) == many.decisive {
            code = match (w, status) {
                (Waited::Finished(_), Some(c)) => c,
                (Waited::Finished(x), None) => {
                    messages.push(format!(
                        "wait: {} is {}; its exit status is unknown (its supervisor was killed)",
                        x.label(),
                        x.status
                    ));
                    exit::USAGE
                }
                _ => code,
            };
        }
        if let Waited::NoResult(x) = w {
            messages.push(format!(
                "wait: {} ended without a recorded result (its supervisor was killed); run 'sheepdog reap'",
                x.label()
            ));
            code = code.max(exit::USAGE);
        }
        if json {
            let tail = sheepdog::ready::output_tail(&reg, &entry.id);
            let v = view::WaitView {
                entry: view::view_with_status(&reg, &entry, st, false),
                finished,
                exit_status: status,
                last_lines: tail[tail.len().saturating_sub(WAIT_TAIL)..].to_vec(),
            };
            list.push(v);
        } else if finished {
            if single {
                outln!("{}", view::status_text(&entry, entry.status));
            } else {
                outln!("{}: {}", entry.label(), view::status_text(&entry, entry.status));
            }
        } else if !a.any && matches!(w, Waited::TimedOut) {
            messages.push(format!(
                "wait: {} still running after {}",
                entry.label(),
                sheepdog::duration::format(a.timeout.unwrap_or_default())
            ));
        }
    }
    // Timed out: every entry (all mode) or the first (any mode) had to finish.
    let timed_out = if a.any { many.decisive.is_none() } else { any_still_running };
    if timed_out {
        code = exit::TIMED_OUT;
        if a.any {
            messages.push(format!(
                "wait: none of {} finished within {}",
                targets.iter().map(|e| e.label()).collect::<Vec<_>>().join(", "),
                sheepdog::duration::format(a.timeout.unwrap_or_default())
            ));
        }
    }
    for m in &messages {
        eprintln!("sheepdog: {m}");
    }
    if json {
        outln!("{}", to_json(&view::WaitDoc { v: view::Version, waited: list, exit_status: code, exit_code: code }));
    }
    Ok(code)
}

/// `sheepdog reap`.
#[derive(Debug, clap::Args)]
pub struct ReapArgs {
    /// Say what would be done; signal and record nothing.
    #[arg(long)]
    dry_run: bool,
}

pub(super) fn reap(a: ReapArgs, dir: Option<PathBuf>, json: bool) -> Result<i32, CliError> {
    let reg = open(dir)?;
    let (actions, aside) = manager::reap(&reg, a.dry_run);
    warn_set_aside(&aside);
    let mut code = if actions.iter().any(|x| x.cleanup_error.is_some()) { exit::REFUSED } else { exit::OK };
    // What was done (or found) but could not be written: said, and status 74.
    for x in actions.iter().filter(|x| x.not_recorded.is_some()) {
        eprintln!(
            "sheepdog: the result for {} ({}) was not recorded: {}",
            x.name.as_deref().unwrap_or(&x.id),
            x.id,
            x.not_recorded.as_deref().unwrap_or_default()
        );
        code = exit::NOT_RECORDED;
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
        outln!("{}", to_json(&view::ReapDoc { v: view::Version, dry_run: a.dry_run, actions }));
        return Ok(code);
    }
    let would = if a.dry_run { "Would reap" } else { "Reaped" };
    for x in &actions {
        let label = format!("{} ({})", x.name.as_deref().unwrap_or(&x.id), x.id);
        match x.action {
            ReapKind::Reaped => outln!("{would} {label}: {}.", x.reason),
            ReapKind::Cleanup => {
                let ran = if a.dry_run { "Would run" } else { "Ran" };
                outln!("{ran} the cleanup of {label}: {}.", x.reason);
            }
            ReapKind::Lost => {
                outln!("{} {label}: {}.", if a.dry_run { "Would record as lost" } else { "Lost" }, x.reason)
            }
        }
        if let Some(line) = &x.cleanup_error {
            outln!("{line}");
        }
    }
    Ok(code)
}

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
    let mut it = args.iter().skip(1);
    let mut dir = None;
    loop {
        match it.next()?.to_str()? {
            "--state-dir" => dir = Some(PathBuf::from(it.next()?)),
            "supervise-entry" => break,
            _ => return None,
        }
    }
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
