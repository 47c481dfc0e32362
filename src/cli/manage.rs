//! Handlers of the managed-process subcommands: start, ps, logs, stop, update, wait, reap, clear,
//! and the hidden `supervise-entry`.

use std::ffi::OsString;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use crate::logs::{COMBINED_LOG, STDERR_LOG, STDOUT_LOG};
use crate::manager::{self, ManagerError, StartRequest, Waited};
use crate::registry::{Cleanup, Entry, Registry, RegistryError};
use crate::status::Status;
use crate::stop::StopPolicy;
use crate::view;

use super::{CliError, parse_duration, pid_arg};

impl From<RegistryError> for CliError {
    fn from(e: RegistryError) -> Self {
        CliError::usage(e.to_string())
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
fn warn_set_aside(aside: &[crate::registry::SetAside]) {
    for a in aside {
        match &a.moved_to {
            Some(to) => {
                eprintln!("sheepdog: corrupt entry {}: {}; set aside to {}", a.path.display(), a.reason, to.display())
            }
            None => eprintln!("sheepdog: unreadable entry {}: {}", a.path.display(), a.reason),
        }
    }
}

/// Names are free text, except the shape of ids (`proc_12`): a name equal to another entry's id
/// would make `stop proc_12` ambiguous. Also not empty and without control characters.
fn parse_name(s: &str) -> Result<String, String> {
    crate::registry::check_name(s).map(|()| s.to_string())
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("invalid --env '{s}': expected KEY=VALUE")),
    }
}

/// Sizes: `1048576`, `64KiB`, `64MiB`, `1GiB` (also `K`, `M`, `G`, `KB`, `MB`, `GB` as powers of
/// 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let bad = || format!("invalid size '{s}': expected bytes or a number with KiB, MiB or GiB, like 64MiB");
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| bad())?;
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return Err(bad()),
    };
    n.checked_mul(mult).filter(|v| *v >= 1024).ok_or_else(|| format!("invalid size '{s}': at least 1KiB"))
}

/// `sheepdog start`.
#[derive(Debug, clap::Args)]
pub struct StartArgs {
    /// A name, unique among running entries; every command takes it in place of the id.
    #[arg(long, value_parser = parse_name)]
    name: Option<String>,
    /// The agent session (turn) this process belongs to; `stop --session` stops them all.
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// Stop the process when this process dies (any process, identity-checked).
    #[arg(long, value_name = "PID")]
    owner: Option<i32>,
    /// Working directory of the command (default: the current one).
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// Extra environment for the command; repeatable.
    #[arg(long, value_name = "K=V", value_parser = parse_env)]
    env: Vec<(String, String)>,
    /// Run the one stop after this long and record `timed out after DUR`.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    timeout: Option<Duration>,
    /// After SIGTERM, how long the tree may take to exit before SIGKILL.
    #[arg(long, value_name = "DUR", default_value = "3s", value_parser = parse_duration)]
    term_grace: Duration,
    /// After SIGKILL, how long to wait for the kernel.
    #[arg(long, value_name = "DUR", default_value = "1.5s", value_parser = parse_duration)]
    kill_wait: Duration,
    /// A command (run with `sh -c`) that undoes what CMD started outside its own tree; it runs
    /// after every stop.
    #[arg(long, value_name = "CMD")]
    cleanup: Option<String>,
    /// Bound on the cleanup command.
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = parse_duration)]
    cleanup_timeout: Duration,
    /// Cap per log file; at the cap it rotates to one `.1`.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    log_max: Option<u64>,
    /// The command, after `--`.
    #[arg(value_name = "CMD", trailing_var_arg = true)]
    command: Vec<OsString>,
}

fn logs_json(reg: &Registry, id: &str) -> Value {
    serde_json::to_value(view::LogPaths::of(reg, id)).unwrap_or(Value::Null)
}

pub(super) fn start(a: StartArgs, dir: Option<PathBuf>, json: bool) -> Result<i32, CliError> {
    if a.command.is_empty() {
        return Err(CliError::usage("start: missing command (usage: sheepdog start [OPTIONS] -- CMD [ARGS...])"));
    }
    let owner = a.owner.map(|p| pid_arg("--owner", p)).transpose()?;
    let reg = open(dir)?;
    let warnings = crate::nudge::check(&a.command, a.cleanup.is_some());
    for w in &warnings {
        eprintln!("sheepdog: warning: {w}");
    }
    let req = StartRequest {
        name: a.name,
        session_id: a.session,
        owner,
        cwd: a.cwd,
        env: a.env.into_iter().map(|(k, v)| (k.into(), v.into())).collect(),
        timeout: a.timeout,
        policy: StopPolicy { stdin_grace: Duration::ZERO, term_grace: a.term_grace, kill_wait: a.kill_wait },
        cleanup: a.cleanup.map(|command| Cleanup { command, timeout_ms: a.cleanup_timeout.as_millis() as u64 }),
        log_max: a.log_max,
        ready: None,
        restart_of: None,
        argv: a.command,
    };
    let e = manager::start(&reg, req)?;
    if json {
        println!(
            "{}",
            json!({
                "id": e.id,
                "name": e.name,
                "pid": e.pid,
                "pgid": e.pgid,
                "supervisorPid": e.supervisor_pid,
                "sessionId": e.session_id,
                "logs": logs_json(&reg, &e.id),
                "warnings": warnings,
            })
        );
    } else {
        println!("{}", e.id);
    }
    Ok(0)
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
    /// List each entry's live processes (pid, pgid, session, command).
    #[arg(long)]
    tree: bool,
}

fn age(ms: u64) -> String {
    let s = crate::registry::now_ms().saturating_sub(ms) / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

/// An entry as JSON: the one view ([`crate::view::EntryView`]) with the given status.
fn entry_json(reg: &Registry, e: &Entry, status: Status) -> Value {
    serde_json::to_value(view::view_with_status(reg, e, status, false)).unwrap_or(Value::Null)
}

pub(super) fn ps(a: PsArgs, dir: Option<PathBuf>, json: bool) -> Result<i32, CliError> {
    let reg = open(dir)?;
    let (entries, aside) = reg.list();
    warn_set_aside(&aside);
    let census = std::cell::OnceCell::new();
    let rows: Vec<(Entry, Status)> = entries
        .into_iter()
        .filter(|e| a.session.as_ref().is_none_or(|s| e.session_id.as_ref() == Some(s)))
        .map(|e| {
            let s = manager::live_status(&e, &census);
            (e, s)
        })
        .filter(|(_, s)| a.all || s.is_live())
        .collect();
    let mut out = io::BufWriter::new(io::stdout().lock());
    if json {
        // Streamed, one entry at a time: `ps --all --json` over thousands of entries stays fast.
        let _ = out.write_all(b"{\"entries\":[");
        for (i, (e, s)) in rows.iter().enumerate() {
            let view = view::view_with_status(&reg, e, *s, a.tree);
            if i > 0 {
                let _ = out.write_all(b",");
            }
            let _ = serde_json::to_writer(&mut out, &view);
        }
        let _ = out.write_all(b"]}\n");
        let _ = out.flush();
        return Ok(0);
    }
    let _ = writeln!(out, "{:<10} {:<16} {:<26} {:>7} {:>5}  COMMAND", "ID", "NAME", "STATUS", "PID", "AGE");
    for (e, s) in &rows {
        let shown = if e.is_finished() { view::status_text(e, *s) } else { s.to_string() };
        let _ = writeln!(
            out,
            "{:<10} {:<16} {:<26} {:>7} {:>5}  {}",
            e.id,
            e.name.as_deref().unwrap_or("-"),
            shown,
            e.pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
            age(e.started_at),
            e.command_preview
        );
        if a.tree {
            for (pid, pgid, sid, cmd) in manager::live_tree(e) {
                let _ = writeln!(out, "    {pid:>7}  pgid {pgid:<7} session {sid:<7} {cmd}");
            }
        }
    }
    Ok(0)
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
    /// Only the last N lines.
    #[arg(long, value_name = "N")]
    tail: Option<usize>,
    /// Keep printing as the log grows; ends when the process has exited and the log is drained.
    #[arg(long, short = 'f')]
    follow: bool,
}

/// How often `logs --follow` looks for new output: 50 ms.
const FOLLOW_TICK: Duration = Duration::from_millis(50);

pub(super) fn logs(a: LogsArgs, dir: Option<PathBuf>) -> Result<i32, CliError> {
    let reg = open(dir)?;
    let e = reg.find(&a.target)?;
    let file = match a.stream.as_str() {
        "out" => STDOUT_LOG,
        "err" => STDERR_LOG,
        _ => COMBINED_LOG,
    };
    let path = reg.file(&e.id, file);
    let mut out = io::stdout().lock();
    // A closed stdout (`| head -n 1`) ends the command quietly with status 0, as ripgrep does.
    let mut emit = |bytes: &[u8]| -> bool { out.write_all(bytes).and_then(|_| out.flush()).is_ok() };
    let mut f = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            if !a.follow {
                return Ok(0);
            }
            return Err(CliError::usage(format!("no log at {}", path.display())));
        }
        Err(err) => return Err(CliError::usage(format!("unable to read {}: {err}", path.display()))),
    };
    let mut data = Vec::new();
    f.read_to_end(&mut data).map_err(|err| CliError::usage(format!("unable to read {}: {err}", path.display())))?;
    let start = match a.tail {
        Some(n) => tail_start(&data, n),
        None => 0,
    };
    if !emit(&data[start..]) {
        return Ok(0);
    }
    if !a.follow {
        return Ok(0);
    }
    let mut pos = data.len() as u64;
    let mut ino = file_id(&f);
    let mut rotated_path = path.clone().into_os_string();
    rotated_path.push(".1");
    loop {
        // Done once nothing can write any more: no supervisor (it also writes the cleanup's
        // output after the result), no cleanup runner, no start in progress.
        let done = reg
            .read(&e.id)
            .map(|x| !x.supervisor_alive() && !x.cleanup_running() && !x.starter_alive())
            .unwrap_or(true);
        let rotated = std::fs::metadata(&path).ok().map(|m| file_id_meta(&m)) != Some(ino);
        let mut chunk = Vec::new();
        let _ = f.seek(SeekFrom::Start(pos));
        let _ = f.read_to_end(&mut chunk);
        pos += chunk.len() as u64;
        if !chunk.is_empty() && !emit(&chunk) {
            return Ok(0);
        }
        if rotated {
            // The file we followed is finished. If it rotated more than once since the last
            // look, the one in between is now `.1`: print it whole before the new file.
            let middle = std::fs::File::open(&rotated_path).ok().filter(|m| file_id(m) != ino);
            if let Some(mut m) = middle {
                let mut all = Vec::new();
                let _ = m.read_to_end(&mut all);
                if !emit(&all) {
                    return Ok(0);
                }
            }
            if let Ok(nf) = std::fs::File::open(&path) {
                ino = file_id(&nf);
                f = nf;
                pos = 0;
                continue;
            }
        }
        if done && chunk.is_empty() {
            return Ok(0);
        }
        // A reader that went away (`| head`) ends us even while the process is quiet.
        if crate::sys::process::peer_closed(1) {
            return Ok(0);
        }
        std::thread::sleep(FOLLOW_TICK);
    }
}

fn file_id(f: &std::fs::File) -> (u64, u64) {
    f.metadata().map(|m| file_id_meta(&m)).unwrap_or((0, 0))
}

fn file_id_meta(m: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (m.dev(), m.ino())
}

/// Byte offset where the last `n` lines of `data` begin.
fn tail_start(data: &[u8], n: usize) -> usize {
    if n == 0 {
        return data.len();
    }
    let body = data.strip_suffix(b"\n").unwrap_or(data);
    let mut count = 0;
    for (i, b) in body.iter().enumerate().rev() {
        if *b == b'\n' {
            count += 1;
            if count == n {
                return i + 1;
            }
        }
    }
    0
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
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
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
        let (entries, aside) = reg.list();
        warn_set_aside(&aside);
        entries.into_iter().filter(|e| e.session_id.as_ref() == Some(s) && !e.is_finished()).collect()
    } else if a.all {
        let (entries, aside) = reg.list();
        warn_set_aside(&aside);
        entries.into_iter().filter(|e| !e.is_finished()).collect()
    } else if a.targets.is_empty() {
        return Err(CliError::usage("stop: name an id or name, --session ID or --all"));
    } else {
        resolve(&reg, &a.targets)?
    };
    // Each entry is stopped on its own thread: a whole turn stops in one grace, not one per entry.
    let results: Vec<Result<manager::StopOutcome, ManagerError>> = std::thread::scope(|s| {
        let handles: Vec<_> = targets.iter().map(|e| s.spawn(|| manager::stop(&reg, e, a.term_grace))).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(ManagerError::Refused("stop panicked".into()))))
            .collect()
    });
    let mut code = 0;
    let mut list = Vec::new();
    for (e, r) in targets.iter().zip(results) {
        match r {
            Ok(o) => {
                let cleanup_failed = crate::cleanup::failure_line(&o.entry);
                if json {
                    let mut v = entry_json(&reg, &o.entry, o.entry.status);
                    if let Value::Object(m) = &mut v {
                        m.insert("alreadyFinished".into(), json!(o.already_finished));
                        m.insert("treeGone".into(), json!(o.tree_gone));
                        m.insert("ok".into(), json!(o.tree_gone && cleanup_failed.is_none()));
                        m.insert("cleanupError".into(), json!(cleanup_failed));
                    }
                    list.push(v);
                } else {
                    println!("Stopped {}.", o.entry.label());
                    if let Some(line) = &cleanup_failed {
                        println!("{line}");
                    }
                }
                if !o.tree_gone {
                    code = code.max(124);
                } else if cleanup_failed.is_some() {
                    code = code.max(1);
                }
            }
            Err(err) => {
                eprintln!("sheepdog: unable to stop {}: {err}", e.label());
                code = code.max(err.exit_code());
            }
        }
    }
    if json {
        println!("{}", json!({ "stopped": list }));
    }
    Ok(code)
}

/// `sheepdog update`.
#[derive(Debug, clap::Args)]
pub struct UpdateArgs {
    /// Id or name.
    #[arg(value_name = "ID|NAME")]
    target: String,
    /// Attach or replace the cleanup command (run with `sh -c` after the stop).
    #[arg(long, value_name = "CMD", conflicts_with = "no_cleanup")]
    cleanup: Option<String>,
    /// Remove the cleanup command.
    #[arg(long)]
    no_cleanup: bool,
    /// The cleanup's bound (default 10s, or the one already set).
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    cleanup_timeout: Option<Duration>,
    /// Rename (unique among running entries).
    #[arg(long, value_parser = parse_name)]
    name: Option<String>,
}

pub(super) fn update(a: UpdateArgs, dir: Option<PathBuf>, json: bool) -> Result<i32, CliError> {
    let reg = open(dir)?;
    let e = reg.find(&a.target)?;
    let req = manager::UpdateRequest {
        cleanup: if a.no_cleanup { Some(None) } else { a.cleanup.map(Some) },
        cleanup_timeout: a.cleanup_timeout,
        name: a.name,
    };
    let e = manager::update(&reg, &e, &req)?;
    if json {
        println!("{}", entry_json(&reg, &e, manager::live_status(&e, &Default::default())));
    } else {
        println!("Updated {}.", e.label());
    }
    Ok(0)
}

/// `sheepdog wait`.
#[derive(Debug, clap::Args)]
pub struct WaitArgs {
    /// Id or name.
    #[arg(value_name = "ID|NAME")]
    target: String,
    /// Give up after this long (status 124).
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    timeout: Option<Duration>,
}

pub(super) fn wait(a: WaitArgs, dir: Option<PathBuf>, json: bool) -> Result<i32, CliError> {
    let reg = open(dir)?;
    let e = reg.find(&a.target)?;
    match manager::wait(&reg, &e, a.timeout)? {
        Waited::Finished(e) => {
            if json {
                println!("{}", entry_json(&reg, &e, e.status));
            } else {
                println!("{}", view::status_text(&e, e.status));
            }
            manager::exit_status_of(&e).ok_or_else(|| {
                CliError::usage(format!(
                    "wait: {} is {}; its exit status is unknown (its supervisor was killed)",
                    e.label(),
                    e.status
                ))
            })
        }
        Waited::TimedOut => Err(CliError::new(
            124,
            format!(
                "wait: {} still running after {}",
                e.label(),
                crate::duration::format(a.timeout.unwrap_or_default())
            ),
        )),
        Waited::NoResult(e) => Err(CliError::usage(format!(
            "wait: {} ended without a recorded result (its supervisor was killed); run 'sheepdog reap'",
            e.label()
        ))),
    }
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
    if json {
        println!("{}", json!({ "dryRun": a.dry_run, "actions": actions }));
        return Ok(0);
    }
    let would = if a.dry_run { "Would reap" } else { "Reaped" };
    for x in &actions {
        let label = format!("{} ({})", x.name.as_deref().unwrap_or(&x.id), x.id);
        match x.action.as_str() {
            "reaped" => println!("{would} {label}: {}.", x.reason),
            _ => println!("{} {label}: {}.", if a.dry_run { "Would record as lost" } else { "Lost" }, x.reason),
        }
    }
    Ok(0)
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
}

pub(super) fn clear(a: ClearArgs, dir: Option<PathBuf>, json: bool) -> Result<i32, CliError> {
    let reg = open(dir)?;
    let targets: Vec<Entry> = if a.finished {
        let (entries, aside) = reg.list();
        warn_set_aside(&aside);
        let census = std::cell::OnceCell::new();
        entries.into_iter().filter(|e| !manager::live_status(e, &census).is_live()).collect()
    } else if a.targets.is_empty() {
        return Err(CliError::usage("clear: name an id or name, or --finished"));
    } else {
        resolve(&reg, &a.targets)?
    };
    let mut code = 0;
    let mut cleared = Vec::new();
    for e in &targets {
        match manager::clear(&reg, e) {
            Ok(()) => cleared.push(e.id.clone()),
            Err(err) => {
                eprintln!("sheepdog: {err}");
                code = code.max(err.exit_code());
            }
        }
    }
    if json {
        println!("{}", json!({ "cleared": cleared }));
    } else {
        for id in &cleared {
            println!("Cleared {id}.");
        }
    }
    Ok(code)
}

/// The hidden `supervise-entry`.
#[derive(Debug, clap::Args)]
pub struct SuperviseArgs {
    #[arg(long)]
    id: String,
    #[arg(long)]
    cwd: PathBuf,
    #[arg(trailing_var_arg = true)]
    command: Vec<OsString>,
}

pub(super) fn supervise_entry(a: SuperviseArgs, dir: Option<PathBuf>) -> Result<i32, CliError> {
    let reg = open(dir)?;
    Ok(manager::run_supervisor(&reg, &a.id, a.cwd, a.command))
}
