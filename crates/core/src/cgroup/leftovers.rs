//! An entry's cgroup seen from outside its supervisor: its usage, its name and planned path, its
//! removal once empty, and the sweep of `sheepdog-run-*` cgroups whose supervisor is provably
//! gone (issue 16's backstop).

use crate::identity::Probe;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::entry::Entry;
use crate::sys::process;
use crate::sys::{Pid, procfs};

use super::dir::{LEFTOVER_KILL_WAIT, Usage};
use super::{Cgroup, own_dir};

/// Usage figures of an entry's tree, from its recorded cgroup (inode checked). `None` outside
/// the cgroup tier, for a finished entry, or when the cgroup is gone. For `ps`, `top` and
/// every other view.
pub fn usage(e: &Entry) -> Option<Usage> {
    if e.is_finished() {
        return None;
    }
    Cgroup::of_entry(e)?.usage()
}

/// The cgroup name of a managed entry's tree: `sheepdog-ID-SUPERVISORPID-TAG8`, where TAG8
/// starts the entry's random tag; so a recorded path can be told to be the entry's own.
pub fn entry_cgroup_name(id: &str, supervisor: Pid, tag: &str) -> String {
    format!("sheepdog-{id}-{supervisor}-{}", tag.get(..8).unwrap_or(tag))
}

/// Where a managed supervisor's tree cgroup will be made, recorded in the entry before the
/// probe's `mkdir`; `None` where the cgroup tier is not available at all.
pub fn planned_path(name: &str) -> Option<String> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    own_dir().ok().map(|d| d.join(name).to_string_lossy().into_owned())
}

/// Removes an entry's recorded cgroup once nothing in it lives (after a stop or reap past its
/// supervisor, or a leftover the supervisor could not remove). Also a cgroup recorded only as
/// planned (the supervisor died between recording the path and recording the inode): removed
/// if its name is the entry's and it is empty. Returns true if none is left.
pub fn remove_recorded(e: &Entry) -> bool {
    let Some(path) = e.cgroup.as_deref().filter(|_| e.this_boot()) else { return true };
    if e.containment == Some(crate::status::Tier::Cgroup) && e.cgroup_inode.is_some() {
        return match Cgroup::of_entry(e) {
            Some(cg) => cg.remove().is_ok(),
            // Gone, or the path names another directory now: nothing of ours is left there.
            None => true,
        };
    }
    let name = Path::new(path).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let ours = e.supervisor.and_then(|s| Pid::new(s.pid)).is_some_and(|p| name == entry_cgroup_name(&e.id, p, &e.tag));
    match Cgroup::open(Path::new(path), None) {
        Ok(cg) if ours && !cg.populated() => cg.remove().is_ok(),
        Ok(_) => false,
        Err(_) => true,
    }
}

/// The cgroups that supervisors killed by SIGKILL left behind, below this process's own cgroup:
/// `sheepdog-LABEL-PID-XXXXXXXX[tSTART]` directories. `run` has no registry, and an entry's
/// record may be gone with its state dir; `reap` calls this.
///
/// - Named with the supervisor's start time (`tSTART`, clock ticks): when no process with that
///   pid and start time lives, the supervisor is provably gone. A cgroup still populated and no
///   longer held ([`Cgroup::held`]: the keeper that runs the stop after its supervisor's
///   SIGKILL holds it) lost its supervisor and its keeper both (`kill -9 -1`): it is killed
///   (`cgroup.kill`, then every pid still listed, see [`Cgroup::kill`]) and removed. The one stop's SIGTERM and
///   grace are gone with both processes; what is left gets SIGKILL.
/// - Older names (no start time): only empty ones whose PID is not alive are removed (a live
///   PID may be a supervisor about to use its cgroup).
///
/// Returns the paths removed, and the cgroups it killed but could not empty within
/// [`LEFTOVER_KILL_WAIT`] (a member frozen, or in D state), with the pids still in them.
pub fn sweep_leftovers() -> Swept {
    let mut swept = Swept::default();
    let Ok(own) = own_dir() else { return swept };
    let Ok(rd) = fs::read_dir(&own) else { return swept };
    for d in rd.flatten() {
        let name = d.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("sheepdog-") else { continue };
        // LABEL-PID-SUFFIX: the pid is the second field from the end.
        let mut fields = rest.rsplit('-');
        let suffix = fields.next().unwrap_or_default();
        let Some(pid) = fields.next().and_then(|p| p.parse().ok()).and_then(Pid::new) else { continue };
        let start = suffix.split_once('t').and_then(|(_, t)| t.parse::<u64>().ok());
        let gone = match start {
            Some(t) => procfs::start_time(pid) != Some(t),
            None => !process::exists(pid),
        };
        if !gone {
            continue;
        }
        let Ok(cg) = Cgroup::open(&d.path(), None) else { continue };
        if cg.populated() {
            // Unnamed by start time, or its keeper still holds it: someone is in charge of the
            // stop and its grace.
            if start.is_none() || cg.held() {
                continue;
            }
            let end = std::time::Instant::now() + LEFTOVER_KILL_WAIT;
            while cg.populated() && std::time::Instant::now() < end {
                let _ = cg.kill();
                cg.wait_change(Duration::from_millis(50));
            }
            if cg.populated() {
                swept.not_emptied.push((d.path(), cg.members()));
                continue;
            }
        }
        if !cg.populated() && cg.remove().is_ok() {
            swept.removed.push(d.path());
        }
    }
    swept
}

/// What [`sweep_leftovers`] did.
#[derive(Debug, Default)]
pub struct Swept {
    /// The leftover cgroups removed.
    pub removed: Vec<PathBuf>,
    /// The leftover cgroups killed but still populated after [`LEFTOVER_KILL_WAIT`], with the
    /// pids listed in them then (empty when none could be listed).
    pub not_emptied: Vec<(PathBuf, Vec<Pid>)>,
}
