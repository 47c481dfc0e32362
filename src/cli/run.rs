//! `sheepdog run`: the foreground supervisor.

use sheepdog::events::EventSink;
use sheepdog::manager;
use sheepdog::os::die_by;
use sheepdog::stop::AfterProviderExit;
use sheepdog::stop::StopPolicy;
use sheepdog::supervisor::{self, Exit, OnOwnerDeath, OnStdinEof, Options, Owner, Quiet, StdinMode};

use super::{CliError, RunArgs, pid_arg};

pub(super) fn run(a: RunArgs, dir: Option<std::path::PathBuf>, json: bool) -> Result<i32, CliError> {
    if a.command.is_empty() {
        return Err(CliError::usage("run: missing command (usage: sheepdog run [OPTIONS] -- CMD [ARGS...])"));
    }
    let fail_open = a.fail_open.then(|| a.command.clone());
    match supervised(a, dir, json) {
        Err(Refusal { error, before_command: true }) if let Some(argv) = fail_open => {
            Ok(run_unsupervised(&argv, &error.message))
        }
        r => r.map_err(|r| r.error),
    }
}

/// Why `run` did not supervise CMD, and whether CMD had not run yet (`--fail-open` may run it).
struct Refusal {
    error: CliError,
    before_command: bool,
}

/// Every refusal before the supervisor starts comes before CMD.
impl From<CliError> for Refusal {
    fn from(error: CliError) -> Self {
        Refusal { error, before_command: true }
    }
}

/// `--fail-open`: CMD in this process's place, as written and unsupervised, after one line
/// saying why (the agent hooks' guard line: a broken sheepdog never blocks the agent's shell).
/// Returns only if CMD could not be run: its spawn error's status (127, 126), with its line.
pub(super) fn run_unsupervised(argv: &[std::ffi::OsString], why: &str) -> i32 {
    eprintln!("sheepdog: not supervised ({why}); running the command as written");
    let e = supervisor::exec_unsupervised(argv);
    eprintln!("sheepdog: {e}");
    e.exit_code()
}

fn supervised(a: RunArgs, dir: Option<std::path::PathBuf>, _json: bool) -> Result<i32, Refusal> {
    let owner = a.owner.map(|p| pid_arg("--owner", p)).transpose()?.map(Owner::Parent);
    let mut events = match a.events_fd {
        Some(fd) => Some(
            EventSink::from_inherited(fd)
                .map_err(|e| CliError::usage(format!("--events-fd {fd}: not an open file descriptor: {e}")))?,
        ),
        None => None,
    };
    let (mode, limits) = a.containment.resolve()?;
    // `--leftovers keep`: the registry is opened (and its errors reported) before CMD runs, and
    // CMD carries a tag so that what it leaves can be found again after `run` is gone.
    let keep = a.leftovers == LeftoversArg::Keep;
    if let Some(s) = &a.session {
        sheepdog::entry::check_session(s).map_err(CliError::usage)?;
    }
    let registry = if keep { Some(super::common::open(dir)?) } else { None };
    let tag = match keep.then(sheepdog::registry::new_tag).transpose() {
        Ok(t) => t,
        Err(e) => return Err(CliError::usage(format!("unable to read random bytes for the tag: {e}")).into()),
    };
    let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
    let owner_pid = a.owner.and_then(sheepdog::os::Pid::new);
    let argv = a.command.clone();
    let policy = StopPolicy { stdin_grace: a.stdin_grace, term_grace: a.term_grace, kill_wait: a.kill_wait };
    let kill_wait = a.kill_wait;
    let a_timeout = a.timeout;
    let opts = Options {
        argv: a.command,
        owner,
        on_stdin_eof: a.on_stdin_eof.into(),
        stdin: a.stdin.into(),
        on_owner_death: a.on_owner_death.into(),
        after_provider_exit: a.after_provider_exit.into(),
        policy: StopPolicy { stdin_grace: a.stdin_grace, term_grace: a.term_grace, kill_wait: a.kill_wait },
        timeout: a.timeout,
        containment: sheepdog::cgroup::Request { mode, limits, label: "run".into(), name: None },
        keep_leftovers: keep,
        tag: tag.clone(),
        ..Options::default()
    };
    let mut outcome = match events.as_mut() {
        Some(sink) => supervisor::supervise(opts, sink),
        None => supervisor::supervise(opts, &mut Quiet),
    }
    .map_err(|e| Refusal {
        before_command: e.before_command(),
        error: match e {
            supervisor::Error::Containment(r) => CliError::new(sheepdog::exit::USAGE, r.render(&super::flag)),
            supervisor::Error::RelayTerminal => CliError::usage(format!("--stdin relay: {e}")),
            supervisor::Error::CloseStdinWithoutRelay => {
                CliError::usage(format!("--on-owner-death close-stdin: {e} (add --stdin relay)"))
            }
            e => CliError::new(e.exit_code(), e.to_string()),
        },
    })?;
    if let Some(sink) = &events {
        sink.exited(&outcome);
    }
    // Decided before the kept tree is taken: a provider whose leftovers were kept exits with its
    // own status.
    let exit = outcome.exit();
    if let (Some(kept), Some(reg), Some(tag)) = (outcome.kept.take(), &registry, tag) {
        let h = manager::Handoff {
            kept,
            tag,
            session_id: a.session.clone(),
            owner: owner_pid,
            cwd,
            policy,
            provider_argv: argv,
        };
        if let Err(e) = manager::hand_off(reg, h) {
            eprintln!("sheepdog: what CMD left running could not be kept ({e}); it was stopped");
        }
        // In the keeper: the work is done; the supervisor in front exits as this process does.
        if let Some(keeper) = outcome.keeper.take() {
            keeper.done();
        }
        return match exit {
            Exit::Code(c) => Ok(c),
            Exit::Signal(s) => die_by(s),
        };
    }
    // Only worth a line when the tree is gone: otherwise the 124 line below says why.
    if outcome.cgroup_left && outcome.tree_gone {
        eprintln!("sheepdog: the cgroup of the process tree of {} could not be removed", outcome.spawned.pid);
    }
    if let (Some(t), true) = (a_timeout, outcome.timed_out()) {
        eprintln!("sheepdog: timed out after {}", sheepdog::duration::format(t));
    }
    if !outcome.tree_gone {
        eprintln!(
            "sheepdog: the process tree of {} was still alive {} ms after SIGKILL; exiting 124",
            outcome.spawned.pid,
            kill_wait.as_millis()
        );
    }
    // In the keeper: the work is done; the supervisor in front exits as this process does.
    if let Some(keeper) = outcome.keeper.take() {
        keeper.done();
    }
    match outcome.exit() {
        Exit::Code(c) => Ok(c),
        Exit::Signal(s) => die_by(s),
    }
}

// The flags' values, parsed once by clap (the library has no clap; each maps onto its type).
// The variants' meaning is in the flag's own doc, which `--help` shows: a doc comment on a
// variant would list it again.

/// `run --on-owner-death`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum OwnerDeathArg {
    // Stop the tree at once.
    Stop,
    // EOF on CMD's stdin (needs --stdin relay), --stdin-grace to exit on its own, then the stop.
    CloseStdin,
}

impl From<OwnerDeathArg> for OnOwnerDeath {
    fn from(a: OwnerDeathArg) -> Self {
        match a {
            OwnerDeathArg::Stop => OnOwnerDeath::Stop,
            OwnerDeathArg::CloseStdin => OnOwnerDeath::CloseStdin,
        }
    }
}

/// `run --stdin`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum StdinArg {
    // sheepdog's own stdin (zero-copy).
    Inherit,
    // Through a pipe that sheepdog closes when the owner dies or a stop begins.
    Relay,
}

impl From<StdinArg> for StdinMode {
    fn from(a: StdinArg) -> Self {
        match a {
            StdinArg::Inherit => StdinMode::Inherit,
            StdinArg::Relay => StdinMode::Relay,
        }
    }
}

/// `run --on-stdin-eof`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum StdinEofArg {
    // Nothing.
    Ignore,
    // The stop, after --stdin-grace.
    Stop,
}

impl From<StdinEofArg> for OnStdinEof {
    fn from(a: StdinEofArg) -> Self {
        match a {
            StdinEofArg::Ignore => OnStdinEof::Ignore,
            StdinEofArg::Stop => OnStdinEof::Stop,
        }
    }
}

/// `run --after-provider-exit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum AfterExitArg {
    // The rest of the tree gets the term grace.
    Grace,
    // SIGKILL at once.
    Kill,
}

impl From<AfterExitArg> for AfterProviderExit {
    fn from(a: AfterExitArg) -> Self {
        match a {
            AfterExitArg::Grace => AfterProviderExit::Grace,
            AfterExitArg::Kill => AfterProviderExit::Kill,
        }
    }
}

/// `run --leftovers`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum LeftoversArg {
    // Stopped with the rest of the tree.
    Stop,
    // Kept as a managed entry of --session with a supervisor of its own.
    Keep,
}
