//! Which processes belong to a provider, whether any is alive, and signalling them safely.
//!
//! Two views of a tree, one per situation (ARCHITECTURE.md, "How all of it is tracked"):
//!
//! - [`Tree::supervised`]: seen from the live supervisor. On Linux the supervisor is a child
//!   subreaper, so every descendant of the provider, whatever group or session it moved to, stays
//!   a descendant of the supervisor: the tree is the supervisor's descendants plus any live member
//!   of the provider's process group. Elsewhere it is the process group alone (the group tier).
//! - [`Tree::recorded`]: seen by `stop`/`reap` after the supervisor is gone. Orphans went to
//!   init, so descendants cannot be walked from the supervisor; a process counts only if it is
//!   the recorded provider (full identity match), a descendant of it, or carries the entry's
//!   `SHEEPDOG_TAG` in its environment with the same uid and a start time no earlier than the
//!   provider's. The tag is evidence used only for an entry being stopped anyway.
//!
//! Zombies are dead everywhere here. Every signal to a single process goes through a pidfd opened
//! before its start time is re-checked, so the check and the signal are about the same process.

use std::cell::Cell;
use std::time::Duration;

use crate::cgroup::Cgroup;
use crate::sys::process::{self, Children, POLL_IN, PidFd, PollFd};
use crate::sys::procfs::{self, Stat};
use crate::sys::{Pgid, Pid, Signal};

/// The environment variable a managed provider and its descendants inherit: the entry's id
/// (`proc_4`), for the processes' own use. Ids repeat across state dirs, so it is not evidence.
pub const ID_ENV: &str = "SHEEPDOG_ID";
/// The environment variable that tags a managed provider's descendants for `reap`: a random
/// 128-bit token recorded in the entry, unique across state dirs and users.
pub const TAG_ENV: &str = "SHEEPDOG_TAG";

/// The group number of a tree that has none ([`Tree::tagged`]): `i32::MAX`, above the kernel's
/// largest `pid_max` (2^22), so `kill(-NO_GROUP)` can only fail with ESRCH.
const NO_GROUP: Pgid = match Pgid::new(i32::MAX) {
    Some(g) => g,
    None => unreachable!(),
};

/// One live process of a tree, with the start time that identifies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Member {
    pub pid: Pid,
    /// Clock ticks since boot (`/proc/<pid>/stat` field 22); `None` where /proc is missing.
    pub start_time: Option<u64>,
}

impl Member {
    pub(crate) fn from_stat(s: &Stat) -> Member {
        Member { pid: s.pid, start_time: Some(s.start_time) }
    }
}

#[derive(Debug)]
enum Scope {
    /// Descendants of `root`, except the subtrees of `foreign`: children `root` already had
    /// before the provider was spawned (a shell that `exec`s sheepdog may leave a background job
    /// or a process substitution behind; those are not the provider's).
    Supervised { root: Pid, foreign: Vec<Member> },
    Recorded {
        /// `None` for a tree known only by its tag ([`Tree::tagged`]).
        provider: Option<Pid>,
        /// The provider's start time (clock ticks): nothing that started earlier is the tree's.
        provider_start: u64,
        uid: u32,
        tag: String,
        /// Descendants the supervisor saw while it ran, by identity.
        members: Vec<Member>,
        /// The provider's session: with the group, evidence for members that lost their tag.
        sid: Option<i32>,
        /// The recorded identities that may hold the group's or the session's number as their
        /// own pid (the provider, the supervisor): see [`numbers_reused`].
        leaders: Vec<Member>,
    },
}

/// The set of processes one provider started. See the module docs for the two views.
#[derive(Debug)]
pub struct Tree {
    scope: Scope,
    pgid: Pgid,
    /// True while the group number cannot have been reused: the supervisor has not yet reaped
    /// the group leader (the provider). Only then is `kill(-pgid)` safe.
    leader_held: Cell<bool>,
    /// In the cgroup tier, the tree's cgroup: while it is populated it alone says who is a
    /// member, and SIGKILL is one write to `cgroup.kill` (see [`crate::cgroup`]).
    cgroup: Option<Cgroup>,
    /// In the cgroup tier, whether the scope is looked at once the cgroup is empty: a member
    /// may have moved itself to another cgroup (systemd#6875), and the processes this tree can
    /// still see by the scope (the supervisor's descendants, the provider's group and session,
    /// the recorded members) are the tree's too. False for a tree known only by its cgroup
    /// ([`Tree::of_cgroup`]).
    beyond_cgroup: bool,
}

impl Tree {
    /// The tree of a provider that this process (its supervisor) spawned as group leader `pgid`.
    pub fn supervised(pgid: Pgid) -> Tree {
        Tree::rooted(process::getpid(), pgid)
    }

    /// Like [`Tree::supervised`], leaving out `foreign`: this process's children from before the
    /// spawn (see [`foreign_children`]) and everything below them.
    pub fn supervised_except(pgid: Pgid, foreign: Vec<Member>) -> Tree {
        Tree {
            scope: Scope::Supervised { root: process::getpid(), foreign },
            pgid,
            leader_held: Cell::new(true),
            cgroup: None,
            beyond_cgroup: true,
        }
    }

    /// The tree below `root` (not `root` itself) plus the live members of group `pgid`, whose
    /// leader this process has spawned and not yet reaped (a cleanup command).
    pub fn rooted(root: Pid, pgid: Pgid) -> Tree {
        Tree {
            scope: Scope::Supervised { root, foreign: Vec::new() },
            pgid,
            leader_held: Cell::new(true),
            cgroup: None,
            beyond_cgroup: true,
        }
    }

    /// The tree of a recorded provider whose supervisor is gone: `provider` started at
    /// `provider_start` clock ticks, owned by `uid`, tagged `SHEEPDOG_TAG=tag`.
    pub fn recorded(provider: Pid, pgid: Pgid, provider_start: u64, uid: u32, tag: &str) -> Tree {
        Tree {
            scope: Scope::Recorded {
                provider: Some(provider),
                provider_start,
                uid,
                tag: tag.to_string(),
                members: Vec::new(),
                sid: None,
                leaders: vec![Member { pid: provider, start_time: Some(provider_start) }],
            },
            pgid,
            leader_held: Cell::new(false),
            cgroup: None,
            beyond_cgroup: true,
        }
    }

    /// The processes of `uid` that carry `SHEEPDOG_TAG=tag` and started no earlier than `since`
    /// (clock ticks): a tree known by nothing else, such as a cleanup whose runner died before
    /// it recorded the cleanup's pid. The tag is evidence only for an entry being stopped
    /// anyway (ARCHITECTURE.md, "The registry and identity"). No group is known: the group
    /// number is [`NO_GROUP`], which no process can have, so no group signal reaches anyone.
    pub fn tagged(uid: u32, tag: &str, since: u64) -> Tree {
        Tree {
            scope: Scope::Recorded {
                provider: None,
                provider_start: since,
                uid,
                tag: tag.to_string(),
                members: Vec::new(),
                sid: None,
                leaders: Vec::new(),
            },
            pgid: NO_GROUP,
            leader_held: Cell::new(false),
            cgroup: None,
            beyond_cgroup: true,
        }
    }

    /// The same tree kept by `cgroup` (the cgroup tier), or unchanged with `None`.
    pub fn contained(mut self, cgroup: Option<Cgroup>) -> Tree {
        self.cgroup = cgroup;
        self
    }

    /// The tree of an entry in the cgroup tier whose supervisor is gone: exactly the processes
    /// in its recorded cgroup (opened with the inode checked), whatever they did to their
    /// environment, group or session.
    pub fn of_cgroup(cgroup: Cgroup, pgid: Pgid) -> Tree {
        Tree {
            scope: Scope::Supervised { root: process::getpid(), foreign: Vec::new() },
            pgid,
            leader_held: Cell::new(false),
            cgroup: Some(cgroup),
            beyond_cgroup: false,
        }
    }

    /// The tree's cgroup, in the cgroup tier.
    pub fn cgroup(&self) -> Option<&Cgroup> {
        self.cgroup.as_ref()
    }

    /// Closes the tree's cgroup (its fds): its supervisor is done with the tree, and what is
    /// left of it, if anything, is `reap`'s.
    pub fn close_cgroup(&mut self) {
        self.cgroup = None;
    }

    /// Adds the evidence that needs no tag (for members that cleared their environment):
    /// `members` the supervisor recorded (each counts, with its descendants, while its start
    /// time still matches), and the provider's session `sid`: a process in the recorded group
    /// *and* session, of the same uid, started no earlier than the provider, is the entry's
    /// (those two numbers could only have been reused after every member of both had died).
    /// `holders` are the recorded processes that may have the group's or the session's number
    /// as their pid (the supervisor, its keeper): the group and session count only while their
    /// numbers are not reused ([`numbers_reused`]). No effect on a supervised tree.
    pub fn with_evidence(mut self, recorded: Vec<Member>, session: Option<i32>, holders: Vec<Member>) -> Tree {
        if let Scope::Recorded { members, sid, leaders, .. } = &mut self.scope {
            *members = recorded;
            *sid = session;
            leaders.extend(holders);
        }
        self
    }

    /// The provider's process group.
    pub fn pgid(&self) -> Pgid {
        self.pgid
    }

    /// Tells the tree that the supervisor reaped the group leader: from now on the group number
    /// may be reused, so only identity-checked per-process signals are sent.
    pub fn leader_reaped(&self) {
        self.leader_held.set(false);
    }

    /// Every live (non-zombie) process of the tree, deduplicated. In the cgroup tier, the
    /// cgroup's members; once it is empty, what the scope still sees (`beyond_cgroup`).
    pub fn live(&self) -> Vec<Member> {
        if let Some(cg) = &self.cgroup {
            let members: Vec<Member> =
                cg.members().into_iter().map(|pid| Member { pid, start_time: procfs::start_time(pid) }).collect();
            if !members.is_empty() || !self.beyond_cgroup || cg.populated() {
                return members;
            }
        }
        self.scope_live()
    }

    /// [`Tree::live`] by the scope alone.
    fn scope_live(&self) -> Vec<Member> {
        let mut out: Vec<Member> = Vec::new();
        let push = |m: Member, out: &mut Vec<Member>| {
            if !out.iter().any(|o| o.pid == m.pid) {
                out.push(m);
            }
        };
        match &self.scope {
            Scope::Supervised { root, foreign } => {
                for s in walk(*root, foreign) {
                    if !s.is_zombie() {
                        push(Member::from_stat(&s), &mut out);
                    }
                }
                if cfg!(target_os = "linux") {
                    if process::group_exists(self.pgid) {
                        for s in procfs::live_group_members(self.pgid) {
                            push(Member::from_stat(&s), &mut out);
                        }
                    }
                } else if process::group_exists(self.pgid) {
                    // The group tier: members cannot be listed, the group stands for them.
                    push(Member { pid: Pid::new(self.pgid.as_raw()).unwrap_or(*root), start_time: None }, &mut out);
                }
            }
            Scope::Recorded { provider, provider_start, uid, tag, members, sid, leaders } => {
                // The tree is as old as its oldest recorded process: a hand-off's entry is named
                // from one leftover, which may be younger than the others (a subshell that
                // forked it), and nothing older than the tree can be of it.
                let floor = members.iter().filter_map(|m| m.start_time).fold(*provider_start, u64::min);
                // Looked at once: the recorded group and session are the entry's only while
                // their numbers have not been handed to new ones.
                let sid = sid.filter(|sid| !numbers_reused(&[self.pgid.as_raw(), *sid], leaders, floor));
                for s in procfs::all() {
                    if s.is_zombie() || s.start_time < floor {
                        continue;
                    }
                    let is_provider = Some(s.pid) == *provider && s.start_time == *provider_start;
                    let is_recorded = members.iter().any(|m| m.pid == s.pid && m.start_time == Some(s.start_time));
                    // By full identity (pid and start time, this boot): the supervisor saw it as
                    // its own, whatever uid it switched to since (`su`, `setpriv`).
                    if is_recorded || (is_provider && procfs::uid(s.pid) == Some(*uid)) {
                        push(Member::from_stat(&s), &mut out);
                        for d in procfs::descendants(s.pid) {
                            if !d.is_zombie() {
                                push(Member::from_stat(&d), &mut out);
                            }
                        }
                        continue;
                    }
                    let in_group = sid.is_some_and(|sid| s.pgrp == self.pgid.as_raw() && s.session == sid);
                    if procfs::uid(s.pid) == Some(*uid) && (in_group || procfs::environ_has(s.pid, TAG_ENV, tag)) {
                        push(Member::from_stat(&s), &mut out);
                    }
                }
            }
        }
        out
    }

    /// True if the tree has at most `max` live processes, found by a look that stops after
    /// `max + 1` (a fork storm's thousands are not walked to count them). The cgroup tier
    /// counts its cgroup's members; the group's members that are not descendants are not
    /// counted.
    pub fn at_most(&self, max: usize) -> bool {
        if let Some(cg) = &self.cgroup {
            return cg.members().len() <= max;
        }
        let Scope::Supervised { root, foreign } = &self.scope else { return self.live().len() <= max };
        let seen = std::cell::Cell::new(0usize);
        procfs::descendants_except(*root, |s| {
            if seen.get() > max || foreign.iter().any(|f| f.pid == s.pid && f.start_time == Some(s.start_time)) {
                return true;
            }
            if !s.is_zombie() {
                seen.set(seen.get() + 1);
            }
            false
        });
        seen.get() <= max
    }

    /// The members that are draining what the provider wrote: their stdin is a pipe that no
    /// live member writes to any more (a `>(reader)` of bash, a `| tee log` whose writer was
    /// the provider), so they end on their own once it is read (codex#7846). Linux only.
    ///
    /// A pipe this process holds too (the host's stdin, the stdin relay) is not the provider's
    /// output: a leftover reading it is not draining.
    pub fn draining(&self) -> Vec<Member> {
        let live = self.live();
        let own = procfs::pipes(process::getpid());
        let pipes: Vec<(Member, Vec<procfs::PipeFd>)> = live.iter().map(|m| (*m, procfs::pipes(m.pid))).collect();
        pipes
            .iter()
            .filter(|(_, fds)| {
                fds.iter().any(|p| {
                    p.fd == 0
                        && !p.writes
                        && !own.iter().any(|o| o.inode == p.inode)
                        && !pipes.iter().any(|(_, other)| other.iter().any(|o| o.inode == p.inode && o.writes))
                })
            })
            .map(|(m, _)| *m)
            .collect()
    }

    /// The live descendants of a supervised tree (no group scan): what a managed supervisor
    /// records so that `reap` can find them without it. Empty for a recorded tree.
    pub fn live_descendants(&self) -> Vec<Member> {
        match &self.scope {
            Scope::Supervised { root, foreign } => {
                walk(*root, foreign).iter().filter(|s| !s.is_zombie()).map(Member::from_stat).collect()
            }
            Scope::Recorded { .. } => Vec::new(),
        }
    }

    /// True when nothing of the tree is alive (zombies count as gone). In the cgroup tier: the
    /// cgroup is empty and, beyond it, nothing the scope sees lives (one `waitid` and one
    /// `kill(-pgid, 0)` when nothing does).
    pub fn is_gone(&self) -> bool {
        if let Some(cg) = &self.cgroup {
            if cg.populated() {
                return false;
            }
            if !self.beyond_cgroup {
                return true;
            }
        }
        self.scope_gone()
    }

    /// [`Tree::is_gone`] by the scope alone.
    fn scope_gone(&self) -> bool {
        match &self.scope {
            Scope::Supervised { root, foreign } => {
                // Fastest path, for the supervisor's own tree: a subreaper with no child at all
                // has no descendant (every orphan below it is re-parented to it), and one with
                // a child is not done: the child is alive, or a zombie that the loop reaps
                // before it asks again. One waitid, where reading its own `children` list in a
                // fork storm (thousands of zombies) is quadratic and the storm's CPU share
                // leaves the supervisor a thirtieth of a core for it.
                //
                // Children none of which can be reaped are live, or zombies held by an outside
                // tracer (`gdb -p`), which are dead: only a walk tells them apart, and it stops
                // at the first live one.
                let own = *root == process::getpid() && foreign.is_empty();
                match own.then(|| process::children_state(None)).flatten() {
                    Some(Children::Reapable) => return false,
                    Some(Children::None) => {}
                    // Without a process table no walk can tell a live child from a traced
                    // zombie: one that cannot be reaped yet is taken as alive (a child killed a
                    // moment ago is still exiting).
                    Some(Children::Unreaped) if !procfs::readable() => return false,
                    // Fast path: the walk covers every descendant; the full scan for group
                    // members that are not descendants runs only while the group has any.
                    Some(Children::Unreaped) | None => {
                        if any_live_descendant(*root, foreign) {
                            return false;
                        }
                    }
                }
                if !process::group_exists(self.pgid) {
                    return true;
                }
                // The group exists: its members are zombies, or alive. Without `/proc` (a mount
                // namespace without it, or not Linux) only its absence says gone; its zombies
                // are the supervisor's to reap (it is their subreaper), so that comes.
                procfs::readable() && procfs::live_group_members(self.pgid).is_empty()
            }
            Scope::Recorded { .. } => self.live().is_empty(),
        }
    }

    /// Sends each of `sigs`, in order, to the whole tree after one scan. Returns how many
    /// received the first (the group counting as one).
    ///
    /// While the group number is safe (the leader is not reaped, or a child of this process is
    /// still in the group: [`Tree::group_held`]), `kill(-pgid)` reaches every group member at
    /// once, first; the per-process signals then go only to processes outside the group (no
    /// member gets a signal twice, which some programs read as "force quit"), and no full
    /// `/proc` scan is needed. Otherwise members are found by scanning and signalled one by one.
    ///
    /// In the cgroup tier the cgroup gets them; once it is empty, a member that left it for
    /// another cgroup is signalled by the scope (`beyond_cgroup`). While the cgroup is
    /// populated it is not looked for: a fork storm in the cgroup must meet `cgroup.kill` first,
    /// not a walk. So an escaped member outside the provider's group meets the stop's SIGKILL
    /// (once the cgroup is empty), not always its SIGTERM.
    pub fn signal_all(&self, sigs: &[Signal]) -> usize {
        if let Some(cg) = &self.cgroup {
            let n = cg.signal_all(sigs);
            if !self.beyond_cgroup || cg.populated() {
                return n;
            }
            return n + self.scope_signal_all(sigs);
        }
        self.scope_signal_all(sigs)
    }

    /// [`Tree::signal_all`] by the scope alone.
    fn scope_signal_all(&self, sigs: &[Signal]) -> usize {
        let group_kill = self.leader_held.get() || !cfg!(target_os = "linux") || self.group_held();
        // The group first, in one atomic signal, before the walk below gives a fork storm time
        // (and, on a loaded CPU, its share of it) to grow. A batch that ends in SIGCONT (the
        // SIGTERM of a stop) holds the group frozen (SIGSTOP) during the walk instead, and is
        // sent after it: SIGTERM then lands on a group that SIGCONT wakes, as always.
        let send_group = |sigs: &[Signal]| {
            let mut first = false;
            for (i, sig) in sigs.iter().enumerate() {
                let sent = matches!(process::kill_group(self.pgid, *sig), Ok(process::Sent::Delivered));
                if i == 0 {
                    first = sent;
                }
            }
            first
        };
        let hold = group_kill && sigs.contains(&Signal::CONT);
        let mut group = false;
        if hold {
            send_group(&[Signal::STOP]);
        } else if group_kill {
            group = send_group(sigs);
        }
        // Processes started after the group signal are not walked into: a chain of forks could
        // keep the walk chasing it, and the next signal's walk finds what this one left.
        let began = procfs::now_ticks().map(|t| t + 1);
        let members: Vec<Member> = match (&self.scope, group_kill) {
            (Scope::Supervised { root, foreign }, true) => procfs::descendants_except(*root, |s| {
                began.is_some_and(|t| s.start_time > t)
                    || foreign.iter().any(|f| f.pid == s.pid && f.start_time == Some(s.start_time))
            })
            .iter()
            .filter(|s| !s.is_zombie() && s.pgrp != self.pgid.as_raw())
            .map(Member::from_stat)
            .collect(),
            _ => self.live(),
        };
        let mut count = 0;
        for (i, sig) in sigs.iter().enumerate() {
            let n = members.iter().filter(|m| signal_member(m, *sig)).count();
            if i == 0 {
                count = n;
            }
        }
        if hold {
            group = send_group(sigs);
        }
        count + usize::from(group)
    }

    /// True if a child of this process that is the tree's (alive, or a zombie not yet reaped)
    /// is in the provider's group: the kernel hands a group's number out again only once no
    /// process, zombies included, uses it, and this single-threaded supervisor reaps nothing
    /// between this check and the `kill(-pgid)` that follows, so the group is still the tree's.
    /// This keeps the one atomic signal to a group after the provider was reaped: a fork storm
    /// in the group cannot outrun it, where one-by-one signals chase new pids.
    fn group_held(&self) -> bool {
        let Scope::Supervised { root, .. } = &self.scope else { return false };
        if *root != process::getpid() {
            return false;
        }
        // A process that holds the number holds it whoever it is, so the foreign children need
        // no exclusion here; one waitid instead of a read of the children list (see is_gone).
        // Unknown (an unexpected error) counts as not held: then only identity-checked
        // per-process signals are sent.
        process::children_state(Some(self.pgid)).is_some_and(|c| c != Children::None)
    }

    /// Passes a signal on to the provider's process group (while the group number is safe),
    /// as tini forwards signals to its child. Not a stop: nothing else is signalled.
    pub fn forward(&self, sig: Signal) {
        if self.leader_held.get() {
            let _ = process::kill_group(self.pgid, sig);
        }
    }

    /// Blocks until a member exits or `timeout` passes, on pidfds (Linux) or a plain sleep.
    pub fn wait_any_exit(&self, timeout: Duration) {
        if let Some(cg) = &self.cgroup
            && (!self.beyond_cgroup || cg.populated())
        {
            return cg.wait_change(timeout);
        }
        let fds: Vec<PidFd> = self.live().iter().take(256).filter_map(|m| PidFd::open(m.pid).ok()).collect();
        if fds.is_empty() {
            std::thread::sleep(timeout.min(Duration::from_millis(10)));
            return;
        }
        let mut polls: Vec<PollFd> =
            fds.iter().map(|f| PollFd::new(std::os::fd::AsRawFd::as_raw_fd(f), POLL_IN)).collect();
        let _ = process::poll(&mut polls, Some(timeout));
    }
}

/// The live children of this process now, with their start times: taken before a spawn, they
/// are what [`Tree::supervised_except`] leaves out.
pub fn foreign_children() -> Vec<Member> {
    procfs::children(process::getpid())
        .into_iter()
        .filter_map(|p| procfs::stat(p).ok())
        .filter(|s| !s.is_zombie())
        .map(|s| Member::from_stat(&s))
        .collect()
}

/// True at the first live (non-zombie) descendant of `root` outside the subtrees of `foreign`.
/// Children are looked at newest first: after a storm of exits the oldest are thousands of
/// zombies waiting to be reaped, and the live ones were re-parented last.
fn any_live_descendant(root: Pid, foreign: &[Member]) -> bool {
    let me = process::getpid();
    let mut queue = vec![root];
    while let Some(pid) = queue.pop() {
        for child in procfs::children(pid).into_iter().rev() {
            // This process's zombies, by one waitid each (no `stat` read, nothing below them).
            if pid == me && process::is_zombie_child(child) {
                continue;
            }
            let Ok(s) = procfs::stat(child) else { continue };
            if foreign.iter().any(|f| f.pid == s.pid && f.start_time == Some(s.start_time)) {
                continue;
            }
            if !s.is_zombie() {
                return true;
            }
            queue.push(child);
        }
    }
    false
}

/// Every descendant of `root` (zombies included), skipping the subtrees of `foreign` members.
fn walk(root: Pid, foreign: &[Member]) -> Vec<Stat> {
    procfs::descendants_except(root, |s| foreign.iter().any(|f| f.pid == s.pid && f.start_time == Some(s.start_time)))
}

/// Signals one process only if it is still the one that was seen: pidfd first, then the start
/// time check, then the signal through the pidfd. Returns true if delivered.
pub fn signal_member(m: &Member, sig: Signal) -> bool {
    match PidFd::open(m.pid) {
        Ok(fd) => {
            let same = match m.start_time {
                Some(t) => procfs::start_time(m.pid) == Some(t),
                None => true,
            };
            same && matches!(fd.send(sig), Ok(process::Sent::Delivered))
        }
        Err(e) if e.raw_os_error() == Some(crate::sys::errno::ENOSYS) => {
            matches!(process::kill(m.pid, sig), Ok(process::Sent::Delivered))
        }
        Err(_) => false,
    }
}

/// True if any of `numbers` (a recorded process group or session) has been reallocated: a
/// process now has that number as its pid, is none of the recorded `leaders` (by start time;
/// zombies count, a zombie still holds its pid), and started no earlier than `min_start` (the
/// provider). The kernel never hands out a pid that a live group or session still uses as its
/// id, so then the recorded group or session is gone and the one of that number is new: its
/// members are not the entry's. A holder older than the provider was there all along (a
/// session the entry did not make) and says nothing.
pub fn numbers_reused(numbers: &[i32], leaders: &[Member], min_start: u64) -> bool {
    numbers.iter().filter_map(|n| Pid::new(*n)).any(|n| match procfs::stat(n) {
        Ok(s) => s.start_time >= min_start && !leaders.iter().any(|l| l.pid == n && l.start_time == Some(s.start_time)),
        Err(_) => false,
    })
}

/// Why a stop could not end `members` (what still lives after it), when the reason is that this
/// process may not signal some of them (EPERM: another user's, a setuid helper that became
/// root): one line, `1 process of uid 0 could not be signalled: permission denied`, counted per
/// owner uid, lowest first. `None` when every one of them may be signalled.
pub fn denied_line(members: &[Member]) -> Option<String> {
    let mut by_uid: std::collections::BTreeMap<Option<u32>, usize> = std::collections::BTreeMap::new();
    for m in members.iter().filter(|m| process::signal_denied(m.pid)) {
        *by_uid.entry(procfs::uid(m.pid)).or_default() += 1;
    }
    if by_uid.is_empty() {
        return None;
    }
    let parts: Vec<String> = by_uid
        .iter()
        .map(|(uid, n)| {
            let what = if *n == 1 { "process" } else { "processes" };
            match uid {
                Some(u) => format!("{n} {what} of uid {u}"),
                None => format!("{n} {what} of another user"),
            }
        })
        .collect();
    Some(format!("{} could not be signalled: permission denied", parts.join(" and ")))
}

/// How many of the processes left by an unfinished stop [`left_line`] names: 3.
const LEFT_NAMED: usize = 3;

/// Who a stop left alive, for the sentence that says it did not finish: `pid 4242 (sleep) is
/// still alive`, `pids 4242 (sleep), 4250 (node) and 2 more are still alive`; the command name
/// is the kernel's (`/proc/PID/stat`, at most 15 bytes), read now. At most [`LEFT_NAMED`] are
/// named. With nothing found (a tree seen only through its cgroup, emptied meanwhile): `nothing
/// of it could be found`.
pub fn left_line(members: &[Member]) -> String {
    let named: Vec<String> = members
        .iter()
        .take(LEFT_NAMED)
        .map(|m| match procfs::stat(m.pid) {
            Ok(s) => format!("{} ({})", m.pid, s.comm),
            Err(_) => m.pid.to_string(),
        })
        .collect();
    match members.len() {
        0 => "nothing of it could be found".into(),
        1 => format!("pid {} is still alive", named[0]),
        n if n <= LEFT_NAMED => {
            let (last, rest) = named.split_last().map(|(l, r)| (l.clone(), r.join(", "))).unwrap_or_default();
            format!("pids {rest} and {last} are still alive")
        }
        n => format!("pids {} and {} more are still alive", named.join(", "), n - LEFT_NAMED),
    }
}

/// The status text of a stop that did not finish: `BASE; the tree was not confirmed gone: pid
/// 4242 (sleep) is still alive` ([`left_line`]), or `not stopped: 1 process of uid 0 could not
/// be signalled: permission denied` ([`denied_line`]) when that is why. `BASE` is what the stop
/// was (`stopped`, `stopped (owner exited)`, `timed out after 30m`).
pub fn unfinished_text(base: &str, left: &[Member]) -> String {
    match denied_line(left) {
        Some(line) => format!("not stopped: {line}"),
        None => format!("{base}; the tree was not confirmed gone: {}", left_line(left)),
    }
}

/// A live process as a [`Census`] keeps it: start time (clock ticks) and owner uid.
type Seen = (u64, Option<u32>);

/// One scan of `/proc` that records every live process carrying a `SHEEPDOG_TAG`, so that many
/// recorded entries (`ps`, `reap` over thousands) are checked against one scan instead of one
/// scan each.
#[derive(Debug, Default)]
pub struct Census {
    /// tag → (start time, uid) of each live process carrying it.
    by_tag: std::collections::HashMap<String, Vec<Seen>>,
    /// (process group, session) → (start time, uid) of each live process in them.
    by_group: std::collections::HashMap<(i32, i32), Vec<Seen>>,
    /// (pid, start time) of every live process.
    live: std::collections::HashSet<(i32, u64)>,
}

impl Census {
    /// Scans `/proc` once (Linux; empty elsewhere).
    pub fn take() -> Census {
        let mut census = Census::default();
        for s in procfs::all() {
            if s.is_zombie() {
                continue;
            }
            let uid = procfs::uid(s.pid);
            if let Some(tag) = procfs::environ_value(s.pid, TAG_ENV) {
                census.by_tag.entry(tag).or_default().push((s.start_time, uid));
            }
            census.by_group.entry((s.pgrp, s.session)).or_default().push((s.start_time, uid));
            census.live.insert((s.pid.as_raw(), s.start_time));
        }
        census
    }

    /// True if a live process is in group `pgid` and session `sid`, belongs to `uid` and started
    /// no earlier than `min_start`, while neither number has been reused since `leaders` held
    /// them (see `Tree::with_evidence` and [`numbers_reused`]).
    pub fn group_alive(&self, pgid: i32, sid: i32, uid: u32, min_start: u64, leaders: &[Member]) -> bool {
        self.by_group.get(&(pgid, sid)).is_some_and(|v| v.iter().any(|(t, u)| *t >= min_start && *u == Some(uid)))
            && !numbers_reused(&[pgid, sid], leaders, min_start)
    }

    /// True if the process `pid` started at `start_time` is alive (not a zombie).
    pub fn is_alive(&self, pid: i32, start_time: u64) -> bool {
        self.live.contains(&(pid, start_time))
    }

    /// True if a live process carries `tag`, belongs to `uid` and started no earlier than
    /// `min_start` (the provider's start time).
    pub fn tagged_alive(&self, tag: &str, uid: u32, min_start: u64) -> bool {
        self.by_tag.get(tag).is_some_and(|v| v.iter().any(|(t, u)| *t >= min_start && *u == Some(uid)))
    }
}
