//! Which entries an operation applies to: one [`Selection`] that each front end builds from its
//! own options, resolved here, so that the meaning of "these", "this session" and "all" is
//! written once.
//!
//! The front ends' words differ, and stay a contract: the CLI's `stop --all` is every entry
//! ([`Selection::Every`]); the MCP tool's `all: true` is the calling agent's session
//! ([`Selection::Session`] with that session's id).

use crate::entry::Entry;
use crate::identity::Probe;
use crate::registry::{self, Registry, RegistryError};

use super::stop::{find_for_stop, stop_selection};

/// Which entries an operation applies to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selection {
    /// These ids or names, in the order given; an entry named twice is taken once.
    Keys(Vec<String>),
    /// Every entry of this session (the CLI's `--session ID`; MCP's `session`, and its `all:
    /// true` with the agent's own session).
    Session(String),
    /// Every entry of the registry (the CLI's `--all`).
    Every,
}

/// What a [`Selection`] resolved to.
#[derive(Debug, Default)]
pub struct Selected {
    /// The entries, in the order of the keys, else oldest first.
    pub entries: Vec<Entry>,
    /// The entries the listing set aside as unreadable on the way, for the front end to report
    /// (a selection by keys lists nothing, and sets nothing aside).
    pub set_aside: Vec<registry::SetAside>,
}

impl Selection {
    /// The entries a stop of this selection takes. By keys: each key's entry
    /// ([`find_for_stop`]: an unreadable entry whose supervisor lives gives its stand-in), even
    /// one that has finished (its stop says so, and runs a pending cleanup). By session or
    /// every entry: those that still run or whose cleanup is pending or running
    /// ([`super::stoppable`]); with [`Selection::Every`], also the stand-ins of unreadable entries
    /// whose supervisor lives.
    ///
    /// Errors: the first key that names no entry, or names an entry that cannot be read
    /// ([`Registry::find`]'s errors); nothing is selected then.
    pub fn for_stop(&self, reg: &Registry) -> Result<Selected, RegistryError> {
        match self {
            Selection::Keys(keys) => {
                let mut entries: Vec<Entry> = Vec::new();
                for k in keys {
                    let e = find_for_stop(reg, k)?;
                    if !entries.iter().any(|x| x.id == e.id) {
                        entries.push(e);
                    }
                }
                Ok(Selected { entries, set_aside: Vec::new() })
            }
            Selection::Session(s) => {
                let (entries, set_aside) = stop_selection(reg, Some(s));
                Ok(Selected { entries, set_aside })
            }
            Selection::Every => {
                let (entries, set_aside) = stop_selection(reg, None);
                Ok(Selected { entries, set_aside })
            }
        }
    }
    /// The entries a wait of this selection waits for. By keys: each key's entry
    /// ([`Registry::find`]), finished or not (its wait returns at once), an entry named twice
    /// taken once. By session: its entries that have not finished (or whose cleanup still
    /// runs), oldest first; by every entry: every such entry. The listing's unreadable entries are in
    /// [`Selected::set_aside`].
    ///
    /// Errors: the first key that names no entry, or names an entry that cannot be read;
    /// nothing is selected then.
    pub fn for_wait(&self, reg: &Registry) -> Result<Selected, RegistryError> {
        let session = match self {
            Selection::Keys(keys) => {
                let mut entries: Vec<Entry> = Vec::new();
                for k in keys {
                    let e = reg.find(k)?;
                    if !entries.iter().any(|x| x.id == e.id) {
                        entries.push(e);
                    }
                }
                return Ok(Selected { entries, set_aside: Vec::new() });
            }
            Selection::Session(s) => Some(s),
            Selection::Every => None,
        };
        let (entries, set_aside) = reg.list();
        let census = std::cell::OnceCell::new();
        let entries = entries
            .into_iter()
            .filter(|e| session.is_none_or(|s| e.session_id.as_ref() == Some(s)))
            // One whose stop's cleanup still runs is not done yet: a wait holds for it.
            .filter(|e| crate::inspect::live_status(e, &census).is_live() || e.cleanup_running())
            .collect();
        Ok(Selected { entries, set_aside })
    }
}
