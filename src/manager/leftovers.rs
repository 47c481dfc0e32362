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

use super::*;
use crate::cgroup::Cgroup;
use crate::entry;
use crate::entry::RecordedMember;
use crate::files;
use crate::supervisor::Kept;

/// How often the supervisor of kept leftovers looks whether anything of them is left, at
/// first: 50 ms, doubling after each look up to [`LOOK_MAX`]. Nothing tells a process that is
/// not the parent that an orphan exited (the cgroup tier's `populated 0` does, and wakes it
/// at once).
pub const LOOK_MIN: Duration = Duration::from_millis(50);
/// The longest gap between two looks: 1 s (a `/proc` census of the recorded tree each time).
pub const LOOK_MAX: Duration = Duration::from_millis(1000);

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
    // The oldest that shows a command line (not one caught between fork and exec, or exiting).
    let first = h.kept.members.iter().find(|m| !procfs::cmdline(m.pid).is_empty()).or(h.kept.members.first()).copied();
    let stat = first.and_then(|m| procfs::stat(m.pid).ok());
    let line = first.map(|m| procfs::cmdline(m.pid)).unwrap_or_default();
    let argv: Vec<String> = line.split(' ').filter(|w| !w.is_empty()).map(str::to_string).collect();
    let me = process::getpid();
    let (containment, cgroup, cgroup_inode) = match &h.kept.cgroup {
        Some((path, inode)) => (Some("cgroup".to_string()), Some(path.display().to_string()), Some(*inode)),
        None => (Some("subreaper".to_string()), None, None),
    };
    let entry = Entry {
        session_id: h.session_id.clone(),
        auto_name: entry::derived_name(&argv),
        started_at: files::now_ms(),
        command_preview: super::start::preview(&argv),
        argv: argv.iter().map(|a| std::ffi::OsStr::new(a).into()).collect(),
        cwd: h.cwd.as_os_str().into(),
        owner_pid: h.owner.map(|p| p.as_raw()),
        owner_start_time: h.owner.and_then(procfs::start_time),
        starter_pid: Some(me.as_raw()),
        starter_start_time: procfs::start_time(me),
        boot_id: procfs::boot_id(),
        uid: process::getuid(),
        tag: h.tag.clone(),
        stop: h.policy.timings(),
        status: Status::Starting,
        pid: first.map(|m| m.pid.as_raw()),
        start_time: first.and_then(|m| m.start_time),
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
    logs::append_marker(
        &reg.dir(&id),
        &format!("kept alive: {} process(es) that `{preview}` left running when it exited", h.kept.members.len()),
    );
    let fail = |e: ManagerError| {
        let _ = reg.remove(&id);
        reg.release_id(&id);
        e
    };
    let args = ["supervise-leftovers", "--id", &id].map(OsString::from);
    match super::start::launch_supervisor(reg, &id, &args) {
        Ok(Some(supervise::Handshake::Spawned)) => Ok(reg.read(&id)?),
        Ok(Some(supervise::Handshake::Failed { code, message })) => Err(fail(ManagerError::Start { code, message })),
        Ok(None) => Err(fail(ManagerError::Start {
            code: exit::USAGE,
            message: "the supervisor of the leftovers exited before it took them".into(),
        })),
        Err(e) => Err(fail(e)),
    }
}

/// Why the supervisor of kept leftovers stops them.
enum Why {
    Signal(Signal),
    Owner,
}

/// The body of `sheepdog supervise-leftovers --id ID` (started by [`hand_off`]): records itself
/// as the entry's supervisor, holds the tree's cgroup, reports with a `Handshake` line, then
/// watches until nothing of the entry is left (recorded `exited`) or a stop is due (the
/// owner's death, SIGTERM/SIGINT/SIGHUP: the one stop over the recorded tree, recorded
/// `stopped`, then the cleanup if one was set). Returns the exit status: 0, or 125 when it
/// could not take the entry (then the handshake says why).
pub fn watch(reg: &Registry, id: &str) -> i32 {
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
        Ok(e) if e.status == Status::Starting && e.starter_pid == Some(process::getppid()) => {}
        Ok(_) => return fail(exit::USAGE, format!("entry {id} is not one being handed off by this process's parent")),
        Err(e) => return fail(exit::USAGE, e.to_string()),
    }
    let entry = match reg.update(id, |e| {
        e.supervisor_pid = Some(me.as_raw());
        e.supervisor_start_time = procfs::start_time(me);
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
    let owner = entry.owner_pid.and_then(Pid::new).and_then(|p| PidFd::open(p).ok());
    supervise::Handshake::Spawned.send();
    let _ = process::redirect_to_null(1);
    let policy = StopPolicy::from_timings(&entry.stop);
    let mut wait = LOOK_MIN;
    let why = loop {
        let mut fds = vec![PollFd::new(signals.as_raw_fd(), POLL_IN)];
        if let Some(o) = &owner {
            fds.push(PollFd::new(o.as_raw_fd(), POLL_IN));
        }
        if let Some(cg) = &cgroup {
            fds.push(PollFd::new(cg.events_fd(), process::POLL_PRI));
        }
        let _ = process::poll(&mut fds, Some(wait));
        let mut asked = None;
        for sig in signals.drain() {
            if matches!(sig, Signal::TERM | Signal::INT | Signal::HUP) {
                asked = Some(sig);
            }
        }
        while process::reap_any().is_some() {}
        if let Some(sig) = asked {
            break Why::Signal(sig);
        }
        let Ok(now) = reg.read(id) else { return 0 };
        if now.is_finished() {
            return 0;
        }
        if now.owner_gone() {
            break Why::Owner;
        }
        if crate::inspect::recorded_tree(&now).is_none_or(|t| t.is_gone()) {
            finish(reg, id, Status::Exited, "exited (nothing it left is running any more)".into(), None, true);
            return 0;
        }
        if let Some(cg) = &cgroup {
            // Re-arms POLLPRI.
            let _ = cg.populated();
        }
        wait = (wait * 2).min(LOOK_MAX);
    };
    let (reason, text) = match why {
        Why::Owner => (StopReason::Owner, "stopped (its owner died)".to_string()),
        Why::Signal(sig) => (StopReason::Signal, format!("stopped ({})", sig.name())),
    };
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
