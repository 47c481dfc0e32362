//! The live look at an entry's tree, shared by everything that looks without acting (`ps` and
//! every view, readiness, usage, `reap`'s census, `stop` past a dead supervisor, `top`): the
//! status the kernel says now, whether anything of a recorded tree is alive, and which
//! processes are the entry's. Below `view` and `ready`, above the registry and the tree.

use crate::identity::Probe;
use std::cell::OnceCell;

use serde::Serialize;

use crate::cgroup;
use crate::entry::{Entry, ProcRef};
use crate::status::Status;
use crate::sys::{Pgid, Pid, process, procfs};
use crate::tree::{Census, Member, Tree};

/// One live process of an entry's tree. `sid` is the Unix session id.
#[derive(Clone, Debug, Serialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct TreeProc {
    /// Its pid.
    pub pid: i32,
    /// Its process group.
    pub pgid: i32,
    /// Its Unix session id.
    pub sid: i32,
    /// Its command line.
    pub command: String,
}

/// The status `ps` shows: the recorded one for finished entries; for the others what the
/// kernel says now: `running`/`starting` while the supervisor lives, `orphaned` when it is gone
/// but the tree is alive, `lost` when nothing is alive and no result was recorded (or the entry
/// is from a previous boot). `census` is taken at most once, on the first entry that needs it.
pub fn live_status(e: &Entry, census: &OnceCell<Census>) -> Status {
    if e.is_finished() {
        return e.status;
    }
    if !e.this_boot() {
        return Status::Lost;
    }
    if e.supervisor_alive() || e.starter_alive() {
        return e.status;
    }
    if recorded_alive(e, census) { Status::Orphaned } else { Status::Lost }
}

/// True if anything of an entry's recorded tree is alive: the provider itself (full identity),
/// or a process carrying its tag (same uid, started no earlier than the provider).
pub fn recorded_alive(e: &Entry, census: &OnceCell<Census>) -> bool {
    if !e.this_boot() {
        return false;
    }
    if e.containment == Some(crate::status::Tier::Cgroup) && e.cgroup.is_some() {
        return cgroup::Cgroup::of_entry(e).is_some_and(|cg| cg.populated());
    }
    let Some(start) = e.provider.and_then(|p| p.start_time) else { return false };
    if e.provider_alive() {
        return true;
    }
    let census = census.get_or_init(Census::take);
    (!e.tag.is_empty() && census.tagged_alive(&e.tag, e.uid, start))
        || e.members.iter().any(|m| census.is_alive(m.pid, m.start_time))
        || (e.pgid.zip(e.sid).is_some_and(|(pgid, sid)| census.group_alive(pgid, sid, e.uid, start, &leaders(e))))
}

/// The recorded processes that may hold an entry's group or session number as their pid: the
/// provider, the supervisor and its keeper, by identity.
fn leaders(e: &Entry) -> Vec<Member> {
    let member = |p: Option<ProcRef>| Some(Member { pid: Pid::new(p?.pid)?, start_time: Some(p?.start_time?) });
    [member(e.provider), member(e.supervisor), member(e.keeper)].into_iter().flatten().collect()
}

/// The tree of an entry as seen without its supervisor; `None` if it never spawned. In the
/// cgroup tier: the recorded cgroup (inode checked) while it is populated; once it is empty or
/// gone, what is recorded by identity, as in the other tiers (a member that moved itself to
/// another cgroup is still the entry's).
pub fn recorded_tree(e: &Entry) -> Option<Tree> {
    if e.containment == Some(crate::status::Tier::Cgroup)
        && e.cgroup.is_some()
        && let Some(cg) = cgroup::Cgroup::of_entry(e)
    {
        // Beyond the cgroup, once it is empty: what is recorded by identity (a member that moved
        // itself to another cgroup). Without a provider identity, the cgroup alone.
        return Some(match by_identity(e) {
            Some(tree) => tree.contained(Some(cg)),
            None => Tree::of_cgroup(cg, e.pgid.and_then(Pgid::new).unwrap_or(process::getpid().as_group())),
        });
    }
    by_identity(e)
}

/// The recorded tree of `e` by identity: the provider, the recorded members, the tag, the group
/// and session (see [`recorded_tree`]).
fn by_identity(e: &Entry) -> Option<Tree> {
    let provider = e.provider?;
    let pid = Pid::new(provider.pid)?;
    let pgid = Pgid::new(e.pgid.unwrap_or(pid.as_raw()))?;
    // Without a tag only the provider itself (by full identity), what was recorded and their
    // descendants count.
    let tag = if e.tag.is_empty() { "\0untagged" } else { &e.tag };
    let members =
        e.members.iter().filter_map(|m| Some(Member { pid: Pid::new(m.pid)?, start_time: Some(m.start_time) }));
    let tree =
        Tree::recorded(pid, pgid, provider.start_time?, e.uid, tag).with_evidence(members.collect(), e.sid, leaders(e));
    Some(tree)
}

/// Live processes of a running or orphaned entry, each with its group, session and command.
pub fn live_tree(e: &Entry) -> Vec<TreeProc> {
    if e.is_finished() || !e.this_boot() {
        return Vec::new();
    }
    let stats: Vec<procfs::Stat> = if e.supervisor_alive() {
        e.tree_root().and_then(Pid::new).map(procfs::descendants).unwrap_or_default()
    } else {
        let live = recorded_tree(e).map(|t| t.live()).unwrap_or_default();
        live.iter().filter_map(|m| procfs::stat(m.pid).ok()).collect()
    };
    stats
        .iter()
        .filter(|s| !s.is_zombie())
        .map(|s| TreeProc { pid: s.pid.as_raw(), pgid: s.pgrp, sid: s.session, command: procfs::cmdline(s.pid) })
        .collect()
}
