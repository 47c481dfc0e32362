//! `clear`: remove finished entries and their logs (`--force`: settle an abandoned cleanup first).

use crate::identity::Probe;
use std::cell::OnceCell;

use crate::entry::Entry;
use crate::inspect::live_status;
use crate::registry::Registry;
use crate::status::CleanupRunner;
use crate::sys::Signal;

use super::{ManagerError, verified_supervisor};

/// Removes a finished entry and its logs. Refuses one that still runs, one whose cleanup is
/// running, and one whose cleanup is pending (it has not run: `stop` runs it) unless `force`
/// drops it. A supervisor that stayed for the pending cleanup is told, and leaves.
pub fn clear(reg: &Registry, e: &Entry, force: bool) -> Result<(), ManagerError> {
    // A claimed cleanup without a result may still run even when nothing recorded says so (its
    // runner died before it wrote `cleanupPid`): `settle_abandoned` looks by the tag too.
    let unsettled = e.cleanup_state.is_unsettled() && e.this_boot();
    // `--force` always works: a running cleanup is stopped first (its tree, by the tag).
    if force && unsettled {
        crate::cleanup::settle_abandoned(reg, &e.id, CleanupRunner::Stop, true);
    }
    if !force
        && (e.cleanup_running()
            || (unsettled && !crate::cleanup::settle_abandoned(reg, &e.id, CleanupRunner::Stop, false)))
    {
        return Err(ManagerError::Refused(format!(
            "{} is still finishing (its cleanup command is running); try again when it is done",
            e.label()
        )));
    }
    let status = live_status(e, &OnceCell::new());
    if status.is_live() {
        return Err(ManagerError::Refused(format!(
            "{} is {status}; stop it first ('sheepdog stop {}')",
            e.label(),
            e.id
        )));
    }
    if e.cleanup_pending() && !force {
        return Err(ManagerError::Refused(format!(
            "{} has a cleanup command that has not run; 'sheepdog stop {}' runs it, 'sheepdog clear --force {}' drops it",
            e.label(),
            e.id,
            e.id
        )));
    }
    let lingering = verified_supervisor(e);
    reg.remove(&e.id)?;
    if let Some(sup) = lingering {
        let _ = sup.send(Signal::USR1);
    }
    Ok(())
}
