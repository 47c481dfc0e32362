//! The command line: clap definitions, one handler per subcommand, and the mapping of every
//! failure to one `sheepdog: ...` line on stderr and a documented exit status.
//!
//! Exit statuses of sheepdog's own errors (see docs/reference.md): 125 for bad arguments and sheepdog's
//! own failures (as `env`, `nohup` and `timeout` use it), 126/127 for a command that cannot be
//! executed / found, 124 when the kernel did not finish a kill in time.

/// `println!` for results: a reader that went away (`| head`) is not an error, as in ripgrep;
/// the rest of the output is dropped and the status stays the command's own.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

mod clear;
mod common;
mod docs;
mod doctor;
mod events;
mod hook;
mod logs;
mod ps;
mod reap;
mod restart;
mod run;
mod send;
mod start;
mod stop;
mod supervise;
mod top;
mod update;
mod wait;

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

/// Status for sheepdog's own errors: [`sheepdog::exit::USAGE`] (125).
pub const EXIT_USAGE: i32 = sheepdog::exit::USAGE;

/// The flag that sets `s`: how the CLI names a setting in a library refusal.
pub fn flag(s: sheepdog::cgroup::Setting) -> String {
    format!("--{}", s.word())
}

/// A failure to report: one line, one status.
#[derive(Debug)]
pub struct CliError {
    pub code: i32,
    pub message: String,
}

impl CliError {
    pub fn new(code: i32, message: impl Into<String>) -> CliError {
        CliError { code, message: message.into() }
    }
    pub fn usage(message: impl Into<String>) -> CliError {
        CliError::new(EXIT_USAGE, message)
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    sheepdog::duration::parse(s)
}

fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    sheepdog::duration::parse_positive(s)
}

#[derive(Debug, Parser)]
#[command(
    name = "sheepdog",
    version,
    about = "A process supervisor for AI coding agents: when sheepdog is gone, so is everything the agent started."
)]
struct Cli {
    #[command(flatten)]
    globals: Globals,
    #[command(subcommand)]
    command: Command,
}

/// The options every subcommand takes, [`Cli`]'s and [`RunCli`]'s alike.
#[derive(Debug, clap::Args)]
struct Globals {
    /// Print errors (and results, where a command has them) as JSON on stdout.
    #[arg(long, global = true)]
    json: bool,
    /// The registry's directory (default: $SHEEPDOG_STATE_DIR, else $XDG_STATE_HOME/sheepdog,
    /// else ~/.local/state/sheepdog).
    #[arg(long, global = true, value_name = "DIR")]
    state_dir: Option<PathBuf>,
}

/// `run`'s one line in `--help`, shared by [`Command::Run`] and [`RunCli`].
const RUN_ABOUT: &str = "Run CMD in the foreground under supervision: stop its whole process tree, then exit";

/// The command line of `sheepdog [--json] [--state-dir DIR] run ...` alone: the same global
/// options and the same [`RunArgs`] as [`Cli`], so the same help and errors. `run` is the
/// supervisor under every hooked shell call, and for [`Cli`] clap builds every subcommand's
/// arguments first: that heap's high water stays in the process for the command's whole life
/// (BENCHMARKS.md).
#[derive(Debug, Parser)]
#[command(name = "sheepdog", version)]
struct RunCli {
    #[command(flatten)]
    globals: Globals,
    #[command(subcommand)]
    command: RunOnly,
}

#[derive(Debug, Subcommand)]
enum RunOnly {
    #[command(about = RUN_ABOUT)]
    Run(RunArgs),
}

/// True when the subcommand is `run`: the first argument that is not a global option.
fn is_run(args: &[OsString]) -> bool {
    let mut rest = args.iter().skip(1);
    while let Some(a) = rest.next() {
        match a.to_str() {
            Some("--json") => {}
            Some("--state-dir") => {
                rest.next();
            }
            Some(s) if s.starts_with("--state-dir=") => {}
            Some(s) => return s == "run",
            None => return false,
        }
    }
    false
}

#[derive(Debug, Subcommand)]
enum Command {
    #[command(about = RUN_ABOUT)]
    Run(RunArgs),
    /// Start CMD in the background under its own detached supervisor; print its id.
    Start(start::StartArgs),
    /// List managed processes (running ones; --all for every entry).
    Ps(ps::PsArgs),
    /// Print a managed process's logs.
    Logs(logs::LogsArgs),
    /// Stop managed processes: their whole tree, then their cleanup command.
    Stop(stop::StopArgs),
    /// Stop managed processes and start them again with the same options; print the new ids.
    Restart(restart::RestartArgs),
    /// Change a process's cleanup command or name (running or exited entries).
    Update(update::UpdateArgs),
    /// Write to the stdin of a process started with `--stdin pipe` (`--eof`: then close it).
    Send(send::SendArgs),
    /// Block until managed processes exit; exit with the (last) one's status.
    Wait(wait::WaitArgs),
    /// Stop what a crash left behind (entries whose supervisor is gone) and record it.
    Reap(reap::ReapArgs),
    /// Remove finished entries and their logs.
    Clear(clear::ClearArgs),
    /// Follow what happens to entries: one JSON object per line with --json (started, ready,
    /// exited, stopped, cleanupFinished, cleared, setAside).
    Events(events::EventsArgs),
    /// A live full-screen view: statuses, usage, ports, process trees, logs; stop/restart/clear.
    Top(top::TopArgs),
    /// Which containment tier `run` and `start` get here, and why; the cgroup2 mount, kernel
    /// and controllers.
    Doctor(doctor::DoctorArgs),
    /// Print a completion script for bash, zsh or fish on stdout.
    Completions(docs::CompletionsArgs),
    /// Print the man page, sheepdog(1), on stdout (roff: `man -l <(sheepdog man)`).
    Man(docs::ManArgs),
    /// Serve the Model Context Protocol on stdin/stdout: background processes as tools for an
    /// agent (runs sheepdog-mcp, installed next to sheepdog; see 'sheepdog mcp --help').
    Mcp(McpArgs),
}

/// `sheepdog mcp ARGS...`: listed here for `--help`; the arguments are `sheepdog-mcp`'s own
/// (normally recognised before clap, see [`mcp_invocation`]).
#[derive(Debug, clap::Args)]
#[command(disable_help_flag = true)]
struct McpArgs {
    #[arg(value_name = "ARGS", trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<OsString>,
}

/// `sheepdog run`.
#[derive(Debug, clap::Args)]
struct RunArgs {
    /// Stop when this process dies. It must be sheepdog's parent (checked before CMD starts).
    #[arg(long, value_name = "PID")]
    owner: Option<i32>,
    /// What the owner's death does: `stop` the tree at once, or `close-stdin` (needs --stdin
    /// relay): EOF on CMD's stdin, --stdin-grace to exit on its own, then the stop.
    #[arg(long, value_name = "ACTION", value_enum, default_value = "stop")]
    on_owner_death: run::OwnerDeathArg,
    /// CMD's stdin: `inherit` sheepdog's own (zero-copy), or `relay` it through a pipe that
    /// sheepdog closes when the owner dies or a stop begins.
    #[arg(long, value_name = "MODE", value_enum, default_value = "inherit")]
    stdin: run::StdinArg,
    /// What stdin reaching EOF means: `ignore` it, or `stop` (after --stdin-grace).
    #[arg(long, value_name = "ACTION", value_enum, default_value = "ignore")]
    on_stdin_eof: run::StdinEofArg,
    /// Once CMD itself has exited (on its own or during a stop), what the rest of its tree
    /// gets: the term `grace`, or SIGKILL at once (`kill`).
    #[arg(long, value_name = "POLICY", value_enum, default_value = "grace")]
    after_provider_exit: run::AfterExitArg,
    /// After stdin EOF, how long CMD may take to exit on its own before SIGTERM.
    #[arg(long, value_name = "DUR", default_value = "1s", value_parser = parse_duration, allow_hyphen_values = true)]
    stdin_grace: Duration,
    /// After SIGTERM, how long the tree may take to exit before SIGKILL.
    #[arg(long, value_name = "DUR", default_value = "3s", value_parser = parse_duration, allow_hyphen_values = true)]
    term_grace: Duration,
    /// After SIGKILL, how long to wait for the kernel before giving up with status 124.
    #[arg(long, value_name = "DUR", default_value = "1.5s", value_parser = parse_duration, allow_hyphen_values = true)]
    kill_wait: Duration,
    /// Run the one stop after this long (more than 0); sheepdog then exits 124 with one line
    /// `sheepdog: timed out after DUR`, as `start --timeout` records it.
    #[arg(long, value_name = "DUR", value_parser = parse_positive_duration, allow_hyphen_values = true)]
    timeout: Option<Duration>,
    /// Write one JSON line per event (spawned, stopping, escalated, exited; spawnFailed when CMD
    /// could not start) to this inherited fd.
    #[arg(long, value_name = "FD")]
    events_fd: Option<i32>,
    /// What CMD leaves running when it exits on its own (with a status, not by a signal):
    /// `stop` it, or `keep` it as a managed entry of --session with a supervisor of its own,
    /// stopped when the owner dies (the agent hooks' mode: `nohup server &`).
    #[arg(long, value_name = "ACTION", value_enum, default_value = "stop")]
    leftovers: run::LeftoversArg,
    /// The session kept leftovers join (`ps --session`, `stop --session`).
    #[arg(long, value_name = "ID", env = "SHEEPDOG_SESSION")]
    session: Option<String>,
    /// If sheepdog cannot supervise CMD (its state dir, session, owner or containment refused,
    /// before CMD runs), run CMD unsupervised in its place after one line on stderr, instead of
    /// exiting 125. CMD's own failure to start (126, 127) is not such a refusal. The agent
    /// hooks' mode: a broken sheepdog never blocks the agent's shell.
    #[arg(long)]
    fail_open: bool,
    #[command(flatten)]
    containment: ContainmentArgs,
    /// The command to supervise, after `--`.
    #[arg(value_name = "CMD", trailing_var_arg = true)]
    command: Vec<OsString>,
}

/// `sheepdog [--state-dir DIR] [--json] mcp ARGS...`: the state dir (if given) and ARGS, else
/// `None`. Recognised before clap parses anything, so `mcp` costs `run` and every supervisor
/// nothing (no extra subcommand for clap to build on each start; see BENCHMARKS.md).
fn mcp_invocation(args: &[OsString]) -> Option<(Option<PathBuf>, Vec<OsString>)> {
    let mut dir = None;
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        let s = a.to_str()?;
        if s == "mcp" {
            return Some((dir, it.cloned().collect()));
        } else if s == "--state-dir" {
            dir = Some(PathBuf::from(it.next()?));
        } else if let Some(d) = s.strip_prefix("--state-dir=") {
            dir = Some(PathBuf::from(d));
        } else if s != "--json" {
            return None;
        }
    }
    None
}

/// `sheepdog [--state-dir DIR] NAME REST...`: the state dir (if given) and REST, for the hidden
/// entry points recognised before clap (`supervise-entry`, `supervise-leftovers`, `hook`), in
/// the shape their callers write. `None` for anything else, which then goes to clap.
fn invocation<'a>(args: &'a [OsString], name: &str) -> Option<(Option<PathBuf>, &'a [OsString])> {
    let mut dir = None;
    let mut i = 1;
    loop {
        match args.get(i)?.to_str()? {
            "--state-dir" => {
                dir = Some(PathBuf::from(args.get(i + 1)?));
                i += 2;
            }
            s if s == name => return Some((dir, &args[i + 1..])),
            _ => return None,
        }
    }
}

/// The MCP server's binary: `sheepdog-mcp` in the directory of this executable. A separate
/// binary so that `run` and every supervisor never load an async runtime (BENCHMARKS.md).
pub const MCP_BINARY: &str = "sheepdog-mcp";

/// Replaces this process with `sheepdog-mcp` (same pid, so the MCP client stays its parent and
/// owner detection sees the same tree). Returns only on failure: status 125 with the path.
fn mcp(args: Vec<OsString>, dir: Option<PathBuf>) -> Result<i32, CliError> {
    use std::os::unix::process::CommandExt;
    let exe =
        std::env::current_exe().map_err(|e| CliError::usage(format!("unable to find the sheepdog executable: {e}")))?;
    let server = exe.with_file_name(MCP_BINARY);
    let mut cmd = std::process::Command::new(&server);
    if let Some(d) = dir {
        cmd.arg("--state-dir").arg(d);
    }
    cmd.args(&args);
    Err(exec_failed(&server, &cmd.exec(), "mcp", MCP_BINARY))
}

/// The error of `sheepdog mcp` or `top` when their binary (installed next to sheepdog) cannot be
/// run. A missing one is most often a source checkout where `cargo run` built only `sheepdog`,
/// so the line names the command that builds all three.
fn exec_failed(path: &std::path::Path, err: &std::io::Error, sub: &str, binary: &str) -> CliError {
    let why = if err.kind() == std::io::ErrorKind::NotFound {
        format!(
            "not found (sheepdog {sub} is the {binary} binary, installed next to sheepdog; from a source checkout, \
             build it with `cargo build --release`: `cargo run` builds only sheepdog)"
        )
    } else {
        format!("{err} (sheepdog {sub} is the {binary} binary, installed next to sheepdog)")
    };
    CliError::usage(format!("unable to run {}: {why}", path.display()))
}

/// Parses the process's arguments, runs the subcommand, and returns the exit status (or does
/// not return: `run` may die by the signal that stopped it).
pub fn main() -> i32 {
    let args: Vec<OsString> = std::env::args_os().collect();
    // The detached supervisors first, each in a frame of its own: `main`'s frame lies under a
    // supervisor for its whole life, and every page of stack it reaches stays resident in each
    // idle supervisor (BENCHMARKS.md), so what the other subcommands keep in their frames
    // (clap's matches, a hook's reply) stays out of it.
    if let Some((dir, a)) = supervise::supervise_invocation(&args) {
        return supervise::supervise_entry(a, dir).unwrap_or_else(|e| report(&e, false));
    }
    if let Some((dir, a)) = supervise::leftovers_invocation(&args) {
        return supervise::supervise_leftovers(a, dir).unwrap_or_else(|e| report(&e, false));
    }
    dispatch(&args)
}

/// Every subcommand but the detached supervisors: the hooks and `mcp` (recognised before clap,
/// so that their arguments pass as given), then what clap parses.
#[inline(never)]
fn dispatch(args: &[OsString]) -> i32 {
    let json = args.iter().take_while(|a| *a != "--").any(|a| a == "--json");
    if let Some((dir, a)) = hook::hook_invocation(args) {
        return hook::hook(dir, a);
    }
    if let Some((dir, rest)) = mcp_invocation(args) {
        return mcp(rest, dir).unwrap_or_else(|e| report(&e, json));
    }
    if is_run(args) {
        let cli = match RunCli::try_parse_from(args) {
            Ok(cli) => cli,
            Err(e) => return clap_error(e, json, help_for(args)),
        };
        let RunOnly::Run(a) = cli.command;
        let Globals { json, state_dir } = cli.globals;
        return run::run(a, state_dir, json).unwrap_or_else(|e| report(&e, json));
    }
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => return clap_error(e, json, help_for(args)),
    };
    let Globals { json, state_dir: dir } = cli.globals;
    let result = match cli.command {
        Command::Run(a) => run::run(a, dir, json),
        Command::Start(a) => start::start(a, dir, json),
        Command::Ps(a) => ps::ps(a, dir, json),
        Command::Logs(a) => logs::logs(a, dir, json),
        Command::Restart(a) => restart::restart(a, dir, json),
        Command::Stop(a) => stop::stop(a, dir, json),
        Command::Update(a) => update::update(a, dir, json),
        Command::Send(a) => send::send(a, dir, json),
        Command::Wait(a) => wait::wait(a, dir, json),
        Command::Reap(a) => reap::reap(a, dir, json),
        Command::Clear(a) => clear::clear(a, dir, json),
        Command::Events(a) => events::events(a, dir, json),
        Command::Top(a) => top::top(a, dir),
        Command::Doctor(a) => doctor::doctor(a, json),
        Command::Completions(a) => docs::completions(a),
        Command::Man(a) => docs::man(a),
        Command::Mcp(a) => mcp(a.args, dir),
    };
    match result {
        Ok(code) => code,
        Err(e) => report(&e, json),
    }
}

/// Prints one error line (and the JSON object with `--json`) and returns its status.
pub fn report(e: &CliError, json: bool) -> i32 {
    eprintln!("sheepdog: {}", e.message);
    if json {
        let doc = sheepdog::view::ErrorDoc::new(&e.message, e.code);
        outln!("{}", serde_json::to_string(&doc).unwrap_or_default());
    }
    e.code
}

/// The help to point at for a bad invocation: the subcommand's own (`sheepdog stop --help`) when
/// the arguments name one before `--`, else the top level's.
fn help_for(args: &[OsString]) -> String {
    use clap::CommandFactory;
    let cmd = Cli::command();
    let sub = args
        .iter()
        .skip(1)
        .take_while(|a| *a != "--")
        .filter_map(|a| a.to_str())
        .find(|a| cmd.get_subcommands().any(|c| c.get_name() == *a));
    match sub {
        Some(s) => format!("sheepdog {s} --help"),
        None => "sheepdog --help".into(),
    }
}

fn clap_error(e: clap::Error, json: bool, help: String) -> i32 {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand { EXIT_USAGE } else { 0 }
        }
        _ => report(&CliError::usage(format!("{} (see '{help}')", flatten_clap(&e.render().to_string()))), json),
    }
}

/// `--containment`, `--memory-max`, `--pids-max`: shared by `run` and `start`.
#[derive(Debug, clap::Args)]
struct ContainmentArgs {
    /// How the tree is kept: `cgroup` (a cgroup v2 per tree; status 125 if unavailable),
    /// `subreaper` (process group + child subreaper), or `auto` (cgroup where the host allows;
    /// default, or $SHEEPDOG_CONTAINMENT).
    // Parsed once: only the three names pass clap's check, and each is a mode.
    #[arg(long, value_name = "TIER", value_parser = clap::builder::TypedValueParser::map(
        clap::builder::PossibleValuesParser::new(["auto", "cgroup", "subreaper"]),
        |s: String| sheepdog::cgroup::Mode::parse(&s).unwrap_or_default(),
    ))]
    containment: Option<sheepdog::cgroup::Mode>,
    /// Memory limit of the tree (`memory.max` of its cgroup), like 512MiB; status 125 where it
    /// cannot be applied.
    #[arg(long, value_name = "SIZE", value_parser = common::parse_size)]
    memory_max: Option<u64>,
    /// Task limit of the tree (`pids.max` of its cgroup); status 125 where it cannot be applied.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pids_max: Option<u64>,
}

impl ContainmentArgs {
    /// The mode (flag, else `$SHEEPDOG_CONTAINMENT`, else auto) and limits.
    fn resolve(&self) -> Result<(sheepdog::cgroup::Mode, sheepdog::cgroup::Limits), CliError> {
        let mode = match self.containment {
            Some(m) => m,
            None => sheepdog::cgroup::Mode::from_env().map_err(CliError::usage)?,
        };
        Ok((mode, sheepdog::cgroup::Limits { memory_max: self.memory_max, pids_max: self.pids_max }))
    }
}

/// clap's message as one line, keeping what it says: the missing arguments' names, an enum
/// flag's possible values (`[possible values: out, err, all]` becomes `(possible values: ...)`).
/// Usage and "for more information" lines are dropped.
fn flatten_clap(text: &str) -> String {
    let mut parts: Vec<String> = Vec::new();
    for line in text.lines() {
        let l = line.trim();
        if l.is_empty() {
            continue;
        }
        if let Some(tip) = l.strip_prefix("tip:") {
            parts.push(did_you_mean(tip.trim()));
            continue;
        }
        if l.starts_with("Usage:") || l.starts_with("For more information") {
            break;
        }
        let l = l.strip_prefix("error: ").unwrap_or(l);
        if let Some(v) = l.strip_prefix('[').and_then(|x| x.strip_suffix(']')) {
            parts.push(format!("({v})"));
        } else {
            parts.push(l.to_string());
        }
    }
    let mut out = String::new();
    for p in parts {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&p);
    }
    if out.is_empty() { "invalid arguments".into() } else { out }
}

/// clap's suggestion tip as a question: `a similar argument exists: '--all'` becomes
/// `(did you mean '--all'?)`, `some similar subcommands exist: 'top', 'stop'` becomes
/// `(did you mean 'top' or 'stop'?)`. Any other tip is kept in parentheses.
fn did_you_mean(tip: &str) -> String {
    let Some((_, names)) = tip.split_once(" exists: ").or_else(|| tip.split_once(" exist: ")) else {
        return format!("({tip})");
    };
    let names: Vec<&str> = names.split(", ").collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("(did you mean {} or {last}?)", rest.join(", ")),
        _ => format!("(did you mean {names}?)", names = names.join(", ")),
    }
}

/// Converts a raw pid argument, refusing 0 and negatives (which `kill` reads as groups).
fn pid_arg(flag: &str, raw: i32) -> Result<sheepdog::os::Pid, CliError> {
    sheepdog::os::Pid::new(raw).ok_or_else(|| CliError::usage(format!("{flag} {raw}: not a process id (must be > 0)")))
}
