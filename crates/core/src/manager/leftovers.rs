//! Leftovers kept alive: what a command under an agent's shell tool left running when it exited
//! on its own (`nohup server &`, `setsid`, a double fork), made an entry of the agent's session
//! instead of being stopped (`run --leftovers keep`, which the agent hooks use). The agent
//! usually means to keep such a server; what it must not do is outlive the agent.
//!
//! The entry gets a small supervisor of its own, `sheepdog supervise-leftovers` (a new session,
//! like every managed supervisor), that watches and stops but spawns nothing: the processes are
//! no longer anyone's children once `run` exits. So it keeps them the way `reap` and
//! `sheepdog stop` keep a tree whose supervisor is gone ([`crate::inspect::recorded_tree`]): in
//! the cgroup tier the tree's cgroup itself (the supervisor takes its `flock` hold, so `reap`'s
//! sweep leaves it), in the subreaper tier the recorded members, their descendants and the
//! entry's `SHEEPDOG_TAG`, which `run` gave the command. It stops them, with the entry's
//! grace, when its owner (the agent) dies or it is asked to (`sheepdog stop`, the session's
//! end), and records the entry exited once nothing of it is left.

use crate::identity::{self, Probe};
use std::ffi::OsString;
use std::io;
use std::os::fd::AsFd;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::cgroup::Cgroup;
use crate::entry;
use crate::entry::RecordedMember;
use crate::entry::{Entry, ProcRef};
use crate::files;
use crate::logs::{LogSet, Stream};
use crate::registry::Registry;
use crate::status::{CleanupRunner, Status, StopReason, Tier};
use crate::stop::{StopPolicy, Trigger};
use crate::supervisor::Kept;
use crate::sys::process::{POLL_IN, PidFd, PollFd};
use crate::sys::signal::set_nonblocking;
use crate::sys::{Pid, Signal, process, procfs};
use crate::tree::Member;
use crate::{exit, logs, supervisor};

use super::{ManagerError, supervise};

/// How often the supervisor of kept leftovers looks whether anything of them is left, at
/// first: 50 ms, doubling after each look up to [`LOOK_MAX`]. Nothing tells a process that is
/// not the parent that an orphan exited (the cgroup tier's `populated 0` does, and wakes it
/// at once).
pub const LOOK_MIN: Duration = Duration::from_millis(50);
/// The longest gap between two looks: 1 s (a `/proc` census of the recorded tree each time).
pub const LOOK_MAX: Duration = Duration::from_millis(1000);

/// The arguments of the supervisor of kept leftovers, as [`hand_off`] writes them on its command
/// line (what `ps` shows) after `sheepdog --state-dir ROOT`: `supervise-leftovers --id ID
/// [--out-fd N] [--err-fd N]`. [`to_args`] writes them and [`parse`] reads them back (the CLI's
/// `supervise-leftovers`), here in one place so the two cannot drift.
///
/// Read by hand, not by clap, as [`super::SuperviseArgs`] is: each entry of kept leftovers has
/// a supervisor of its own, and clap's command tree would cost each of them memory for nothing
/// (BENCHMARKS.md, PSS per extra supervisor).
///
/// [`to_args`]: LeftoversArgs::to_args
/// [`parse`]: LeftoversArgs::parse
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeftoversArgs {
    /// The entry's id.
    pub id: String,
    /// The read ends of `run`'s output relay that the supervisor inherits, by number: stdout's,
    /// then stderr's (`None`: that stream is not relayed, or shares stdout's pipe).
    pub output_fds: [Option<RawFd>; 2],
}

impl LeftoversArgs {
    /// The subcommand's name, the first of [`LeftoversArgs::to_args`].
    pub const SUBCOMMAND: &'static str = "supervise-leftovers";

    /// The flags of [`LeftoversArgs::output_fds`], in its order.
    const FD_FLAGS: [&'static str; 2] = ["--out-fd", "--err-fd"];

    /// The arguments, [`LeftoversArgs::SUBCOMMAND`] first.
    pub fn to_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = [Self::SUBCOMMAND, "--id", &self.id].map(OsString::from).into();
        for (flag, fd) in Self::FD_FLAGS.into_iter().zip(self.output_fds) {
            if let Some(fd) = fd {
                args.extend([flag.into(), fd.to_string().into()]);
            }
        }
        args
    }

    /// Reads the arguments that follow [`LeftoversArgs::SUBCOMMAND`]. `None` for anything
    /// [`LeftoversArgs::to_args`] would not have written: no `--id` first or an empty id, an
    /// unknown flag, a flag without its value, an fd that is not a number.
    pub fn parse(rest: &[OsString]) -> Option<LeftoversArgs> {
        let [flag, id, more @ ..] = rest else { return None };
        if flag != "--id" || id.is_empty() {
            return None;
        }
        let mut a = LeftoversArgs { id: id.to_str()?.to_string(), output_fds: [None, None] };
        for pair in more.chunks(2) {
            let [flag, n] = pair else { return None };
            let slot = Self::FD_FLAGS.iter().position(|f| flag == f)?;
            a.output_fds[slot] = Some(n.to_str()?.parse().ok()?);
        }
        Some(a)
    }
}

/// What `run --leftovers keep` hands on.
#[derive(Debug)]
pub struct Handoff {
    /// What the provider left running.
    pub kept: Kept,
    /// The tag `run` put in the command's environment (`SHEEPDOG_TAG`).
    pub tag: String,
    /// The agent session the entry joins (`stop --session`, `ps --session`).
    pub session_id: Option<String>,
    /// The agent: its death stops the entry.
    pub owner: Option<Pid>,
    /// The command's working directory.
    pub cwd: PathBuf,
    /// The stop the leftovers get.
    pub policy: StopPolicy,
    /// The provider's own argv, for the log's first line.
    pub provider_argv: Vec<OsString>,
}

/// Makes the leftovers of `h` an entry with its own supervisor and returns the entry once that
/// supervisor holds them. Named from the oldest leftover's command ([`entry::derived_name`]).
///
/// Errors (the registry cannot be written, the supervisor cannot start): the leftovers are
/// stopped here, with the same policy, before the error is returned, so a failed hand-off
/// leaks nothing.
pub fn hand_off(reg: &Registry, h: Handoff) -> Result<Entry, ManagerError> {
    let result = register_and_watch(reg, &h);
    if result.is_err() {
        let tree = match &h.kept.cgroup {
            Some((path, inode)) => {
                Cgroup::open(path, Some(*inode)).ok().map(|cg| crate::tree::Tree::of_cgroup(cg, h.kept.pgid))
            }
            None => None,
        };
        let tree = tree.unwrap_or_else(|| {
            let uid = process::getuid();
            let since = h.kept.members.iter().filter_map(|m| m.start_time).min().unwrap_or(0);
            crate::tree::Tree::tagged(uid, &h.tag, since).with_evidence(h.kept.members.clone(), None, Vec::new())
        });
        crate::stop::stop_blocking(&tree, h.policy);
    }
    result
}

fn register_and_watch(reg: &Registry, h: &Handoff) -> Result<Entry, ManagerError> {
    let named = named_member(h);
    let first = named.as_ref().map(|(m, _)| *m);
    let stat = first.and_then(|m| procfs::stat(m.pid).ok());
    // The line the member was chosen by: a second read could land in an `execve` and see none.
    let line = named.map(|(_, l)| l).unwrap_or_default();
    let argv: Vec<String> = line.split(' ').filter(|w| !w.is_empty()).map(str::to_string).collect();
    let (containment, cgroup, cgroup_inode) = match &h.kept.cgroup {
        Some((path, inode)) => (Some(Tier::Cgroup), Some(path.display().to_string()), Some(*inode)),
        None => (Some(Tier::Subreaper), None, None),
    };
    let entry = Entry {
        session_id: h.session_id.clone(),
        auto_name: entry::derived_name(&argv),
        started_at: files::now_ms(),
        command_preview: super::start::preview(&argv),
        argv: argv.iter().map(|a| std::ffi::OsStr::new(a).into()).collect(),
        cwd: h.cwd.as_os_str().into(),
        owner: h.owner.map(identity::proc_ref),
        starter: Some(identity::me()),
        boot_id: procfs::boot_id(),
        uid: process::getuid(),
        tag: h.tag.clone(),
        stop: h.policy.timings(),
        status: Status::Starting,
        provider: first.map(|m| ProcRef::new(m.pid.as_raw(), m.start_time)),
        pgid: stat.as_ref().map(|s| s.pgrp),
        sid: stat.as_ref().map(|s| s.session),
        members: h
            .kept
            .members
            .iter()
            .filter_map(|m| Some(RecordedMember { pid: m.pid.as_raw(), start_time: m.start_time? }))
            .collect(),
        containment,
        cgroup,
        cgroup_inode,
        ..Entry::default()
    };
    let entry = reg.create(entry)?;
    let id = entry.id.clone();
    let preview =
        super::start::preview(&h.provider_argv.iter().map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>());
    // The logs exist from here on, as a started entry's do (`logs ID` reads them at once).
    if let Ok(mut l) = LogSet::open(&reg.dir(&id), logs::DEFAULT_LOG_MAX) {
        l.marker(&format!(
            "kept alive: {} process(es) that `{preview}` left running when it exited",
            h.kept.members.len()
        ));
    }
    let fail = |e: ManagerError| {
        let _ = reg.remove(&id);
        reg.release_id(&id);
        e
    };
    // The output relay's read ends go to the new supervisor by number (left open across its
    // `exec`), for the entry's log.
    let mut args = LeftoversArgs { id: id.clone(), output_fds: [None, None] };
    for (stream, fd) in &h.kept.output {
        let slot = match stream {
            logs::Stream::Out => 0,
            logs::Stream::Err => 1,
        };
        args.output_fds[slot] = Some(fd.as_raw_fd());
    }
    let keep = args.output_fds.map(|fd| fd.unwrap_or(-1));
    match super::start::launch_supervisor(reg, &id, &args.to_args(), keep) {
        Ok(Some(supervise::Handshake::Spawned)) => {
            // For the agent's hooks: told to the agent once, on its next call.
            if let Some(s) = &h.session_id
                && let Err(e) = reg.mark_untold(s, &id)
            {
                eprintln!("sheepdog: {} will not be told to the agent: {e}", id);
            }
            Ok(reg.read(&id)?)
        }
        Ok(Some(supervise::Handshake::Failed { code, message })) => Err(fail(ManagerError::Start { code, message })),
        Ok(None) => Err(fail(ManagerError::Start {
            code: exit::USAGE,
            message: "the supervisor of the leftovers exited before it took them".into(),
        })),
        Err(e) => Err(fail(e)),
    }
}

/// How long a hand-off waits at most for a leftover to `exec` its own program, so that the
/// entry is named from it: 50 ms, in 5 ms looks. `nohup server &` in a shell is a fork of the
/// shell until it execs, and the provider's exit often comes first.
pub const NAME_WAIT: Duration = Duration::from_millis(50);

/// How long past [`NAME_WAIT`] a hand-off waits while no member shows any command line at all:
/// 500 ms. A process in the middle of `execve` shows none, and on a loaded machine one was seen
/// there for longer than 50 ms (the entry then had no name and no command).
pub const NAME_WAIT_MAX: Duration = Duration::from_millis(500);

/// The member the entry is named from: the oldest that runs a program of its own (its command
/// line is neither empty, as while it exits, nor the provider's, as a shell's fork before its
/// `exec`); after [`NAME_WAIT`], the oldest that shows any command line.
fn named_member(h: &Handoff) -> Option<(Member, String)> {
    let provider: Vec<String> = h.provider_argv.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let provider = provider.join(" ");
    let start = Instant::now();
    loop {
        let lines: Vec<(Member, String)> = h.kept.members.iter().map(|m| (*m, procfs::cmdline(m.pid))).collect();
        if let Some(found) = lines.iter().find(|(_, l)| !l.is_empty() && *l != provider) {
            return Some(found.clone());
        }
        let any = lines.iter().find(|(_, l)| !l.is_empty());
        if start.elapsed() >= NAME_WAIT && (any.is_some() || start.elapsed() >= NAME_WAIT + NAME_WAIT_MAX) {
            return any.cloned().or_else(|| h.kept.members.first().map(|m| (*m, String::new())));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The body of `sheepdog supervise-leftovers --id ID` ([`LeftoversArgs`]; started by [`hand_off`]): records itself
/// as the entry's supervisor, holds the tree's cgroup, reports with a `Handshake` line, then
/// watches until nothing of the entry is left (recorded `exited`) or a stop is due (the
/// owner's death, SIGTERM/SIGINT/SIGHUP: the one stop over the recorded tree, recorded
/// `stopped`, then the cleanup if one was set). Returns the exit status: 0, or 125 when it
/// could not take the entry (then the handshake says why).
pub fn watch(reg: &Registry, id: &str, output_fds: [Option<RawFd>; 2]) -> i32 {
    let fail = |code: i32, message: String| {
        supervise::Handshake::Failed { code, message }.send();
        code
    };
    let signals = match supervisor::install_signals() {
        Ok(s) => s,
        Err(e) => return fail(e.exit_code(), e.to_string()),
    };
    let me = process::getpid();
    // Only the hand-off that made the entry starts its supervisor: an entry that is past
    // `starting`, or was made by another process, is someone else's and is left as it is.
    match reg.read(id) {
        Ok(e) if e.status == Status::Starting && e.starter.map(|s| s.pid) == Some(process::getppid()) => {}
        Ok(_) => return fail(exit::USAGE, format!("entry {id} is not one being handed off by this process's parent")),
        Err(e) => return fail(exit::USAGE, e.to_string()),
    }
    let entry = match reg.update(id, |e| {
        e.supervisor = Some(identity::proc_ref(me));
        if e.status == Status::Starting {
            e.status = Status::Running;
        }
    }) {
        Ok(e) => e,
        Err(e) => return fail(exit::USAGE, e.to_string()),
    };
    let _ = reg.record_supervisor(id, entry.stop.max_stop_ms);
    let cgroup = Cgroup::of_entry(&entry);
    if let Some(cg) = &cgroup {
        cg.hold();
    }
    let owner = entry.owner.and_then(|o| Pid::new(o.pid)).and_then(|p| PidFd::open(p).ok());
    let mut output = Output::take(reg, &entry, output_fds);
    supervise::Handshake::Spawned.send();
    let _ = process::redirect_to_null(1);
    let policy = StopPolicy::from_timings(&entry.stop);
    let mut wait = LOOK_MIN;
    let mut next_look = Instant::now() + wait;
    let trigger = loop {
        let mut fds = vec![PollFd::new(signals.as_raw_fd(), POLL_IN)];
        let owner_slot = owner.as_ref().map(|o| {
            fds.push(PollFd::new(o.as_raw_fd(), POLL_IN));
            fds.len() - 1
        });
        let cgroup_slot = cgroup.as_ref().map(|cg| {
            fds.push(PollFd::new(cg.events_fd(), process::POLL_PRI));
            fds.len() - 1
        });
        let output_from = fds.len();
        output.poll_fds(&mut fds);
        let _ = process::poll(&mut fds, Some(next_look.saturating_duration_since(Instant::now())));
        // Output alone does not call for a census: only the look's timer, the cgroup's
        // `populated` change, a pipe's end (its last writer exited) or a signal do.
        let ended = output.service(&fds[output_from..]);
        let mut asked = None;
        for sig in signals.drain() {
            if matches!(sig, Signal::TERM | Signal::INT | Signal::HUP) {
                asked = Some(sig);
            }
        }
        while process::reap_any().is_some() {}
        if let Some(sig) = asked {
            break Trigger::Signal(sig);
        }
        let cgroup_woke = cgroup_slot.is_some_and(|s| fds[s].ready());
        let owner_woke = owner_slot.is_some_and(|s| fds[s].ready());
        if !ended && !cgroup_woke && !owner_woke && Instant::now() < next_look {
            continue;
        }
        let Ok(now) = reg.read(id) else { return 0 };
        if now.is_finished() {
            return 0;
        }
        if now.owner_gone() {
            break Trigger::OwnerDied;
        }
        if crate::inspect::recorded_tree(&now).is_none_or(|t| t.is_gone()) {
            output.drain();
            finish(reg, id, Status::Exited, "exited (nothing it left is running any more)".into(), None, true);
            return 0;
        }
        if let Some(cg) = &cgroup {
            // Re-arms POLLPRI.
            let _ = cg.populated();
        }
        wait = (wait * 2).min(LOOK_MAX);
        next_look = Instant::now() + wait;
    };
    // The stop's record in the words of the one table (`Trigger::stopped_text`).
    let (reason, text) = (StopReason::from(trigger), trigger.stopped_text().to_string());
    let _ = reg.update(id, |e| {
        if e.stop_reason.is_none() {
            e.stop_reason = Some(reason.clone());
        }
    });
    let now = reg.read(id).unwrap_or(entry);
    let report = match crate::inspect::recorded_tree(&now) {
        Some(tree) => crate::stop::stop_blocking(&tree, policy),
        None => crate::stop::StopReport { gone: true, escalated: false, signalled: 0 },
    };
    // What the tree wrote while it stopped (its SIGTERM handlers' last words).
    output.drain();
    logs::append_marker(
        &reg.dir(id),
        &format!(
            "{text}: {} signalled, tree {}",
            report.signalled,
            if report.gone { "gone" } else { "NOT confirmed gone" }
        ),
    );
    finish(reg, id, Status::Stopped, text, Some(reason), report.gone);
    0
}

/// Records the end of kept leftovers (unless someone recorded one first), removes their cgroup
/// once it is empty, and runs the entry's cleanup if one is still due.
fn finish(reg: &Registry, id: &str, status: Status, text: String, reason: Option<StopReason>, tree_gone: bool) {
    let _ = reg.update(id, |e| {
        if !e.is_finished() {
            e.status = status;
            e.status_text = Some(text.clone());
            if reason.is_some() {
                e.stop_reason = reason.clone();
            }
            e.tree_gone = Some(tree_gone);
            e.ended_at = Some(files::now_ms());
        }
    });
    if let Ok(e) = reg.read(id) {
        super::reap::settle_cgroup(reg, e);
    }
    crate::cleanup::run_once(reg, id, CleanupRunner::Supervisor);
}

/// The leftovers' output: the read ends of `run`'s output relay (crate::relay::OutputRelay),
/// copied into the entry's logs (stdout.log, stderr.log, combined.log; capped as any entry's).
/// A pipe that stdout and stderr shared is logged as stdout.
struct Output {
    logs: Option<LogSet>,
    from: Vec<(Stream, OwnedFd)>,
}

impl Output {
    /// Takes the fds `hand_off` passed (numbers above 2 only: 0, 1 and 2 are this process's
    /// stdio) and opens the entry's logs for them.
    fn take(reg: &Registry, entry: &Entry, fds: [Option<RawFd>; 2]) -> Output {
        let from: Vec<(Stream, OwnedFd)> = [Stream::Out, Stream::Err]
            .into_iter()
            .zip(fds)
            .filter_map(|(s, fd)| {
                let fd = process::take_inherited_fd(fd.filter(|fd| *fd > 2)?).ok()?;
                set_nonblocking(fd.as_raw_fd()).ok()?;
                Some((s, fd))
            })
            .collect();
        let cap = entry.log_max_bytes.unwrap_or(logs::DEFAULT_LOG_MAX);
        let logs = if from.is_empty() { None } else { LogSet::open(&reg.dir(&entry.id), cap).ok() };
        Output { logs, from }
    }

    fn poll_fds(&self, fds: &mut Vec<PollFd>) {
        fds.extend(self.from.iter().map(|(_, fd)| PollFd::new(fd.as_raw_fd(), POLL_IN)));
    }

    /// After `poll` (`fds`: the slots [`Output::poll_fds`] added): one read of each ready pipe.
    /// True if a pipe ended (its last writer is gone).
    fn service(&mut self, fds: &[PollFd]) -> bool {
        let mut ended = false;
        let mut i = 0;
        self.from.retain(|(stream, fd)| {
            let ready = fds.get(i).is_some_and(PollFd::ready);
            i += 1;
            if !ready {
                return true;
            }
            let open = read_into(&mut self.logs, *stream, fd, 1);
            ended |= !open;
            open
        });
        ended
    }

    /// Reads what the pipes hold now (at most [`crate::relay::DRAIN_MAX`] each), then closes
    /// them and ends the logs' unterminated lines.
    fn drain(&mut self) {
        for (stream, fd) in std::mem::take(&mut self.from) {
            read_into(&mut self.logs, stream, &fd, crate::relay::DRAIN_MAX / READ_CHUNK);
        }
        if let Some(l) = self.logs.as_mut() {
            l.flush_partials();
        }
    }
}

/// The size of one read of the leftovers' output: 64 KiB.
const READ_CHUNK: usize = 64 * 1024;

/// Up to `reads` reads of `fd` into `logs`; false at EOF or error (the pipe is done).
fn read_into(logs: &mut Option<LogSet>, stream: Stream, fd: &OwnedFd, reads: usize) -> bool {
    let mut buf = vec![0u8; READ_CHUNK];
    for _ in 0..reads {
        match process::read_fd(fd.as_fd(), &mut buf) {
            Ok(0) => return false,
            Ok(n) => {
                if let Some(l) = logs.as_mut() {
                    l.write(stream, &buf[..n]);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Err(_) => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use super::LeftoversArgs;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn leftovers_args_read_back_what_they_write_in_the_command_line_ps_shows() {
        let a = LeftoversArgs { id: "proc_1".into(), output_fds: [Some(5), Some(7)] };
        let args = a.to_args();
        assert_eq!(args, os(&["supervise-leftovers", "--id", "proc_1", "--out-fd", "5", "--err-fd", "7"]));
        assert_eq!(LeftoversArgs::parse(&args[1..]), Some(a.clone()));
        for output_fds in [[None, None], [Some(5), None], [None, Some(7)]] {
            let b = LeftoversArgs { output_fds, ..a.clone() };
            assert_eq!(LeftoversArgs::parse(&b.to_args()[1..]), Some(b));
        }
        assert_eq!(
            LeftoversArgs { output_fds: [None, None], ..a }.to_args(),
            os(&["supervise-leftovers", "--id", "proc_1"])
        );
    }

    #[test]
    fn leftovers_args_refuse_what_hand_off_never_writes() {
        for bad in [
            &[][..],
            &["--id"],
            &["--id", ""],
            &["--out-fd", "5", "--id", "a"],
            &["--id", "a", "--out-fd"],
            &["--id", "a", "--out-fd", "x"],
            &["--id", "a", "--bogus", "5"],
            &["--id", "a", "--", "true"],
        ] {
            assert_eq!(LeftoversArgs::parse(&os(bad)), None, "{bad:?}");
        }
    }
}
