//! `reap`: recovery after a crash of anything; stops what is provably an entry's and records it.

use crate::identity::Probe;
use std::cell::OnceCell;

use crate::cgroup;
use crate::entry::{Entry, OutsideResult};
use crate::exit;
use crate::files;
use crate::inspect::{recorded_alive, recorded_tree};
use crate::logs;
use crate::registry::{self, Registry};
use crate::status::{CleanupRunner, ReapKind};
use crate::stop::{self, StopPolicy};
use crate::sys::procfs;
use crate::tree::Member;
use crate::view::{CgroupLeft, ReapAction};

use super::{ManagerError, STARTING_LEEWAY_MS, record_lost};

/// What one `reap` did.
#[derive(Debug, Default)]
pub struct Reaped {
    /// One per entry it acted on (or, with `--dry-run`, would act on).
    pub actions: Vec<ReapAction>,
    /// The entries the listing set aside as unreadable, for the front end to report.
    pub set_aside: Vec<registry::SetAside>,
    /// Leftover cgroups it could not empty.
    pub cgroups_left: Vec<CgroupLeft>,
    /// A `--dry-run`: the actions are what it would do; nothing was signalled or recorded.
    pub dry_run: bool,
}

impl Reaped {
    /// The reap's verdict, the one every front end reads: every tree and cgroup it stopped is
    /// gone, every cleanup it ran succeeded, and every result was recorded.
    pub fn ok(&self) -> bool {
        self.exit_status() == exit::OK
    }

    /// The exit status this reap gives `sheepdog reap` ([`crate::exit`]): 0; 1 when a cleanup
    /// it ran failed; 74 when a result could not be recorded; 124 when a tree or a leftover
    /// cgroup it stopped was not confirmed gone (the largest that applies).
    pub fn exit_status(&self) -> i32 {
        let mut code = if self.actions.iter().any(|x| x.cleanup_error.is_some()) { exit::REFUSED } else { exit::OK };
        if self.actions.iter().any(|x| x.not_recorded.is_some()) {
            code = exit::NOT_RECORDED;
        }
        if self.actions.iter().any(|x| x.left.is_some()) || !self.cgroups_left.is_empty() {
            code = code.max(exit::TIMED_OUT);
        }
        code
    }
}

/// Recovery after a crash of anything: entries from a previous boot are dead and never
/// signalled; an entry whose supervisor is alive is left to it; one whose supervisor is gone
/// but whose tree is alive (identity verified) gets the one stop and is recorded as `reaped`;
/// nothing alive and no result: recorded as `lost`.
///
/// Returns what was done, the entries set aside as unreadable, and the leftover cgroups that
/// could not be emptied ([`Reaped`]).
pub fn reap(reg: &Registry, dry_run: bool) -> Reaped {
    let (entries, aside) = if dry_run { reg.list() } else { reg.list_sweeping() };
    let census = OnceCell::new();
    let mut actions = Vec::new();
    let mut cgroups_left = Vec::new();
    if !dry_run {
        for e in entries.iter().filter(|e| e.cgroup_leftover == Some(true) && e.is_finished() && !e.supervisor_alive())
        {
            settle_cgroup(reg, e.clone());
        }
    }
    // Cleanups whose runner was killed: past their deadline they are stopped here.
    for e in entries.iter().filter(|e| e.cleanup_state.is_unsettled()) {
        if dry_run || !e.this_boot() || e.cleanup_state.runner().is_some_and(crate::identity::alive) {
            continue;
        }
        if crate::cleanup::settle_abandoned(reg, &e.id, CleanupRunner::Reap, false)
            && let Ok(x) = reg.read(&e.id)
            && x.cleanup_state.result().is_some_and(|r| r.timed_out)
        {
            actions.push(ReapAction {
                id: x.id.clone(),
                name: Some(x.display_name()),
                action: ReapKind::Cleanup,
                signalled: 0,
                tree_gone: true,
                reason: "its runner was killed; stopped past its bound".into(),
                cleanup_error: crate::cleanup::failure_line(&x),
                not_recorded: None,
                left: None,
            });
        }
    }
    for e in entries.iter().filter(|e| !e.is_finished()) {
        let action = |what: ReapKind, signalled, tree_gone, reason: &str| ReapAction {
            id: e.id.clone(),
            name: Some(e.display_name()),
            action: what,
            signalled,
            tree_gone,
            reason: reason.into(),
            cleanup_error: None,
            not_recorded: None,
            left: None,
        };
        let unrecorded = |r: Result<Entry, ManagerError>| r.err().map(|err| err.to_string());
        if !e.this_boot() {
            let mut a = action(ReapKind::Lost, 0, true, "previous boot");
            if !dry_run {
                a.not_recorded = unrecorded(record_lost(
                    reg,
                    &e.id,
                    "lost (recorded during a previous boot; nothing was signalled)",
                ));
            }
            actions.push(a);
            continue;
        }
        if e.supervisor_alive() || e.starter_alive() {
            continue;
        }
        // The supervisor may have finished between the listing and now: re-read.
        let Ok(e) = reg.read(&e.id) else { continue };
        if e.is_finished() {
            continue;
        }
        let tree = recorded_tree(&e).filter(|_| recorded_alive(&e, &census));
        // A populated cgroup is never "nothing alive", even when no member can be listed.
        let live = tree.as_ref().map(|t| t.live().len().max(usize::from(!t.is_gone()))).unwrap_or(0);
        let Some(tree) = tree.filter(|_| live > 0) else {
            if e.provider.is_none() && files::now_ms().saturating_sub(e.started_at) < STARTING_LEEWAY_MS {
                if !dry_run && e.supervisor.is_some() {
                    // Its supervisor died before the spawn: a cgroup it made is empty.
                    settle_cgroup(reg, e.clone());
                }
                continue;
            }
            let mut a = action(ReapKind::Lost, 0, true, "supervisor gone, nothing alive");
            if !dry_run {
                match record_lost(reg, &e.id, &crate::view::lost_text(&e)) {
                    Ok(x) => {
                        settle_cgroup(reg, x);
                    }
                    Err(err) => a.not_recorded = Some(err.to_string()),
                }
                crate::cleanup::run_once(reg, &e.id, CleanupRunner::Reap);
            }
            actions.push(a);
            continue;
        };
        if dry_run {
            actions.push(action(
                ReapKind::Reaped,
                0,
                false,
                &format!("supervisor gone, {}", plural(live, "process", "processes")),
            ));
            continue;
        }
        let report = stop::stop_blocking(&tree, StopPolicy::from_timings(&e.stop_in_effect()));
        logs::append_marker(
            &reg.dir(&e.id),
            &format!(
                "reaped (the supervisor was gone): {} signalled, tree {}",
                report.signalled,
                if report.gone { "gone" } else { "NOT confirmed gone" }
            ),
        );
        let still = if report.gone { Vec::new() } else { tree.live() };
        let recorded = reg.update(&e.id, |x| {
            if x.finish_from_outside(OutsideResult::Reaped, report.gone) && !report.gone {
                x.status_text = Some(crate::tree::unfinished_text("reaped", &still));
            }
        });
        drop(tree);
        if let Ok(x) = reg.read(&e.id) {
            settle_cgroup(reg, x);
        }
        crate::cleanup::run_once(reg, &e.id, CleanupRunner::Reap);
        let mut a = action(
            ReapKind::Reaped,
            report.signalled,
            report.gone,
            &format!("supervisor gone, {}", plural(live, "process", "processes")),
        );
        a.not_recorded = recorded.err().map(|err| err.to_string());
        a.left = (!report.gone).then(|| crate::tree::left_line(&still));
        actions.push(a);
    }
    // Cgroups a supervisor could not remove once its tree was gone, and those of supervisors
    // killed by SIGKILL (empty, their pid gone), `run`'s included. After the entries: a kept
    // tree (`run --leftovers keep`) lives in the cgroup of the `run` that made it, and its
    // entry's own pass above stops it with its grace and records it as reaped; the sweep
    // (SIGKILL, no record) is for what no entry of this registry names.
    if !dry_run {
        for (path, pids) in cgroup::sweep_leftovers().not_emptied {
            let members: Vec<_> = pids.iter().map(|p| Member { pid: *p, start_time: procfs::start_time(*p) }).collect();
            cgroups_left.push(CgroupLeft {
                path: path.display().to_string(),
                pids: pids.iter().map(|p| p.as_raw()).collect(),
                left: crate::tree::left_line(&members),
            });
        }
    }
    // Finished entries whose cleanup is still pending and due: their owner died or their turn
    // timeout passed while no supervisor was watching (it was killed while it waited).
    for e in entries.iter().filter(|e| e.is_finished() && e.cleanup_pending() && !e.supervisor_alive()) {
        let reason = if e.owner_gone() {
            "the owner exited"
        } else if e.timeout_passed() {
            "the turn timeout passed"
        } else {
            continue;
        };
        let mut cleanup_error = None;
        if !dry_run {
            crate::cleanup::run_once(reg, &e.id, CleanupRunner::Reap);
            cleanup_error = reg.read(&e.id).ok().and_then(|x| crate::cleanup::failure_line(&x));
        }
        actions.push(ReapAction {
            id: e.id.clone(),
            name: Some(e.display_name()),
            action: ReapKind::Cleanup,
            signalled: 0,
            tree_gone: true,
            reason: reason.into(),
            cleanup_error,
            not_recorded: None,
            left: None,
        });
    }
    Reaped { actions, set_aside: aside, cgroups_left, dry_run }
}

/// In the cgroup tier, once an entry's tree is gone: removes its recorded cgroup (inode
/// checked) and records whether a leftover remains (`cgroupLeftover`, for the next `reap`).
/// Returns the entry as it is then.
pub(super) fn settle_cgroup(reg: &Registry, e: Entry) -> Entry {
    if e.cgroup.is_none() {
        return e;
    }
    let left = !cgroup::remove_recorded(&e);
    if e.cgroup_leftover.unwrap_or(false) == left {
        return e;
    }
    reg.update(&e.id, |x| x.cgroup_leftover = left.then_some(true)).unwrap_or(e)
}

pub(super) fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {} alive", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::Reaped;
    use crate::status::ReapKind;
    use crate::view::{CgroupLeft, ReapAction};

    fn action() -> ReapAction {
        ReapAction {
            id: "proc_1".into(),
            name: None,
            action: ReapKind::Reaped,
            signalled: 1,
            tree_gone: true,
            reason: "the supervisor was gone".into(),
            cleanup_error: None,
            not_recorded: None,
            left: None,
        }
    }

    /// `reap`'s status is decided once, by the outcome: 1 a cleanup failed, 74 a result was not
    /// recorded, 124 a tree or cgroup was not confirmed gone (the largest that applies).
    #[test]
    fn a_reap_says_its_own_exit_status() {
        let reaped = |actions, cgroups_left| Reaped { actions, set_aside: Vec::new(), cgroups_left, dry_run: false };
        assert_eq!(reaped(vec![action()], vec![]).exit_status(), 0);
        assert!(reaped(vec![], vec![]).ok());
        let failed = ReapAction { cleanup_error: Some("Cleanup command failed with exit code 1.".into()), ..action() };
        assert_eq!(reaped(vec![action(), failed.clone()], vec![]).exit_status(), 1);
        let unwritten = ReapAction { not_recorded: Some("no space left on device".into()), ..action() };
        assert_eq!(reaped(vec![failed.clone(), unwritten.clone()], vec![]).exit_status(), 74);
        let left = ReapAction { left: Some("pid 4242 (sleep) is still alive".into()), ..action() };
        assert_eq!(reaped(vec![unwritten, left], vec![]).exit_status(), 124);
        let cgroup =
            CgroupLeft { path: "/sys/fs/cgroup/x".into(), pids: vec![1], left: "pid 1 (x) is still alive".into() };
        let r = reaped(vec![failed], vec![cgroup]);
        assert_eq!((r.exit_status(), r.ok()), (124, false));
    }
}
