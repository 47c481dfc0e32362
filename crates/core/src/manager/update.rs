//! `update`: change an entry's cleanup command or name, under its lock, all or nothing.

use std::time::Duration;

use crate::entry::{Cleanup, Entry};
use crate::registry::Registry;

use super::{ManagerError, notify_supervisor};

/// What `update` changes: the cleanup (attach, replace, or remove with `Some(None)`), its
/// timeout alone, and the name.
#[derive(Debug, Default)]
pub struct UpdateRequest {
    /// `Some(Some(cmd))`: attach or replace; `Some(None)`: remove; `None`: leave it.
    pub cleanup: Option<Option<String>>,
    /// The cleanup's bound; `None`: the one already set, else the default (10 s).
    pub cleanup_timeout: Option<Duration>,
    /// A new name (unique among live entries).
    pub name: Option<String>,
}

/// Default timeout of a cleanup command: 10 000 ms.
pub const CLEANUP_TIMEOUT_MS: u64 = 10_000;

/// Changes an entry's cleanup and/or name. The supervisor reads the cleanup at stop time.
/// Refused (`Refused`, status 1) when the cleanup is to change but its run has already been
/// claimed (it has run or is running): the change would have no effect. Errors: `NameInUse`,
/// `NotFound`.
pub fn update(reg: &Registry, e: &Entry, req: &UpdateRequest) -> Result<Entry, ManagerError> {
    let changes_cleanup = req.cleanup.is_some() || req.cleanup_timeout.is_some();
    if changes_cleanup && e.cleanup_state.is_claimed() {
        return Err(ManagerError::Refused(format!(
            "the cleanup of {} has already run (or is running); a change would have no effect",
            e.label()
        )));
    }
    // The rename and the cleanup change are one write under the entry's lock: a cleanup the
    // supervisor claimed meanwhile refuses both, never the one after the other was applied.
    let (e, written) = reg.update_renaming(&e.id, req.name.as_deref(), |x| {
        if !changes_cleanup {
            return true;
        }
        // Re-checked under the entry's lock: the supervisor may have claimed it meanwhile.
        if x.cleanup_state.is_claimed() {
            return false;
        }
        let timeout_ms = req
            .cleanup_timeout
            .map(|d| d.as_millis() as u64)
            .or(x.cleanup.as_ref().map(|c| c.timeout_ms))
            .unwrap_or(CLEANUP_TIMEOUT_MS);
        match &req.cleanup {
            Some(None) => x.cleanup = None,
            Some(Some(c)) => x.cleanup = Some(Cleanup { command: c.clone(), timeout_ms }),
            None => {
                if let Some(c) = &mut x.cleanup {
                    c.timeout_ms = timeout_ms;
                }
            }
        }
        true
    })?;
    if !written {
        return Err(ManagerError::Refused(format!(
            "the cleanup of {} started before this update; the change had no effect",
            e.label()
        )));
    }
    // A supervisor that stayed for a pending cleanup re-reads its entry (it leaves if none is
    // pending any more).
    notify_supervisor(&e);
    Ok(e)
}

#[cfg(test)]
mod tests {
    use crate::entry::{Cleanup, Entry};
    use crate::files;
    use crate::manager::ManagerError;
    use crate::registry::Registry;
    use crate::status::Status;

    use super::{CLEANUP_TIMEOUT_MS, UpdateRequest, update};

    #[test]
    fn an_update_whose_cleanup_was_claimed_meanwhile_changes_nothing_not_even_the_name() {
        let dir = tempfile::tempdir().unwrap();
        let reg = Registry::open(Some(dir.path().join("state"))).unwrap();
        let cleanup = Cleanup { command: "docker rm -f web".into(), timeout_ms: CLEANUP_TIMEOUT_MS };
        let stale = reg
            .create(Entry {
                name: Some("web".into()),
                status: Status::Running,
                cleanup: Some(cleanup),
                ..Entry::default()
            })
            .unwrap();
        // The supervisor claims the cleanup after the caller read the entry.
        reg.update(&stale.id, |e| {
            e.cleanup_state = crate::entry::CleanupState::Claimed { at_ms: files::now_ms(), runner: None }
        })
        .unwrap();
        let req = UpdateRequest { cleanup: Some(Some("true".into())), cleanup_timeout: None, name: Some("api".into()) };
        assert!(matches!(update(&reg, &stale, &req), Err(ManagerError::Refused(_))));
        let now = reg.read(&stale.id).unwrap();
        assert_eq!(now.name.as_deref(), Some("web"), "a refused update must not half-apply");
        assert_eq!(now.cleanup.map(|c| c.command).as_deref(), Some("docker rm -f web"));

        // Without the race, both go in, in one write.
        let fresh = reg.read(&stale.id).unwrap();
        reg.update(&fresh.id, |e| e.cleanup_state = crate::entry::CleanupState::Pending).unwrap();
        let fresh = reg.read(&stale.id).unwrap();
        let e = update(&reg, &fresh, &req).unwrap();
        assert_eq!((e.name.as_deref(), e.cleanup.map(|c| c.command)), (Some("api"), Some("true".to_string())));
    }
}
