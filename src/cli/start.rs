//! `sheepdog start`: a command into the background under its own detached supervisor.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use sheepdog::entry::{Cleanup, Entry, ReadySpec};
use sheepdog::manager::{self, StartRequest};
use sheepdog::ready::{DEFAULT_READY_TIMEOUT_MS, ReadyOutcome};
use sheepdog::registry::Registry;
use sheepdog::stop::StopPolicy;
use sheepdog::view;

use super::common::{SESSION_ENV, check_name, check_session, open, owner_from_env, parse_env, parse_size, to_json};
use super::{CliError, parse_duration, parse_positive_duration, pid_arg};

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

/// Prints a start's (or restart's) result: the id and the readiness on stdout, or, when the
/// command exited before it was ready, its last lines on stderr (the status is the outcome's
/// `exit_status()`).
pub(super) fn render_started(
    reg: &Registry,
    e: &Entry,
    ready: Option<&ReadyOutcome>,
    warnings: &[sheepdog::view::Nudge],
    json_out: Option<&mut Vec<view::StartView>>,
) {
    let shown = match ready {
        Some(ReadyOutcome::Exited { entry, .. }) => (**entry).clone(),
        _ => e.clone(),
    };
    if let Some(list) = json_out {
        let v = view::StartView {
            entry: view::entry_view(reg, &shown, &Default::default()),
            ready: ready.map(|r| r.report()),
            warnings: warnings.to_vec(),
        };
        list.push(v);
        return;
    }
    outln!("{}", e.id);
    // The sentence is the library's, as MCP and `top` say it; what follows is the CLI's.
    match ready {
        Some(r @ ReadyOutcome::Ready { .. }) => outln!("{}", r.sentence(&e.label())),
        Some(r @ ReadyOutcome::Exited { entry, last_lines, .. }) => {
            eprintln!("sheepdog: {} Its last {} lines:", r.sentence(&entry.label()), last_lines.len());
            for l in last_lines {
                eprintln!("{l}");
            }
        }
        Some(r @ ReadyOutcome::TimedOut { .. }) => {
            eprintln!("sheepdog: {} Stop it with 'sheepdog stop {}'.", r.sentence(&e.label()), e.id)
        }
        None => {}
    }
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
    render_started(&reg, &started.entry, started.ready.as_ref(), &started.nudges, json.then_some(&mut list));
    if let (true, Some(start)) = (json, list.pop()) {
        outln!("{}", to_json(&view::StartDoc { v: view::Version, start }));
    }
    Ok(manager::Said::from(&started).exit_status)
}

/// `start --stdin`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StdinMode {
    /// /dev/null.
    Null,
    /// A pipe held by the supervisor (`sheepdog send` writes to it).
    Pipe,
}
