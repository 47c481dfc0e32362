//! Wakes `top` when an entry changes, instead of polling: inotify on the registry (Linux).
//!
//! Watched: `procs/` for entries appearing and disappearing (a new entry is renamed into place
//! whole; `clear` renames it away), and each `procs/<id>/` for `entry.json` being renamed into
//! place (every registry write is tmp + rename). The mask has no IN_MODIFY, so a process writing
//! 10 MB/s to its logs in the same directory does not wake `top` at all. Elsewhere: nothing is
//! watched and the one-second tick does the work.

use std::path::Path;
use std::sync::mpsc::Sender;

/// Starts the watcher thread; it sends `event(ids)` with the ids of the entries that changed
/// (created, rewritten, removed) and ends when the receiver is gone. Errors (no inotify, too many
/// watches) are returned for the caller to show; the tick still refreshes.
#[cfg(target_os = "linux")]
pub fn spawn<T: Send + 'static>(procs: &Path, tx: Sender<T>, event: fn(Vec<String>) -> T) -> std::io::Result<()> {
    use inotify::{EventMask, Inotify, WatchMask};
    let mut ino = Inotify::init()?;
    let dir_mask =
        WatchMask::MOVED_TO | WatchMask::MOVED_FROM | WatchMask::CREATE | WatchMask::DELETE | WatchMask::ONLYDIR;
    let entry_mask = WatchMask::MOVED_TO | WatchMask::ONLYDIR;
    let procs_wd = ino.watches().add(procs, dir_mask)?;
    // Which entry each watch is on.
    let mut ids = std::collections::HashMap::new();
    if let Ok(rd) = std::fs::read_dir(procs) {
        for d in rd.flatten() {
            let id = d.file_name().to_string_lossy().into_owned();
            if !id.starts_with('.')
                && let Ok(wd) = ino.watches().add(d.path(), entry_mask)
            {
                ids.insert(wd, id);
            }
        }
    }
    let procs = procs.to_path_buf();
    std::thread::Builder::new().name("top-watch".into()).spawn(move || {
        let mut buf = [0u8; 4096];
        loop {
            let Ok(events) = ino.read_events_blocking(&mut buf) else { return };
            let mut changed: Vec<String> = Vec::new();
            let mut new_dirs = Vec::new();
            for ev in events {
                let name = ev.name.map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                if ev.wd == procs_wd {
                    if name.starts_with('.') {
                        continue;
                    }
                    if ev.mask.intersects(EventMask::MOVED_TO | EventMask::CREATE) {
                        new_dirs.push(name.clone());
                    }
                    changed.push(name);
                } else if ev.mask.contains(EventMask::IGNORED) {
                    ids.remove(&ev.wd);
                } else if name == "entry.json"
                    && let Some(id) = ids.get(&ev.wd)
                {
                    changed.push(id.clone());
                }
            }
            for id in new_dirs {
                if let Ok(wd) = ino.watches().add(procs.join(&id), entry_mask) {
                    ids.insert(wd, id);
                }
            }
            if !changed.is_empty() && tx.send(event(changed)).is_err() {
                return;
            }
        }
    })?;
    Ok(())
}

#[cfg(not(target_os = "linux"))]
pub fn spawn<T: Send + 'static>(_procs: &Path, _tx: Sender<T>, _event: fn(Vec<String>) -> T) -> std::io::Result<()> {
    Ok(())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::sync::mpsc::channel;
    use std::time::Duration;

    use sheepdog::files::write_atomic;

    #[test]
    fn reports_entry_writes_and_new_entries_but_not_log_writes() {
        let dir = tempfile::tempdir().unwrap();
        let procs = dir.path().join("procs");
        std::fs::create_dir_all(procs.join("proc_1")).unwrap();
        let (tx, rx) = channel();
        super::spawn(&procs, tx, |ids| ids).unwrap();
        // A log write (the supervisor appending output) wakes nothing.
        std::fs::write(procs.join("proc_1/combined.log"), b"[out] hi\n").unwrap();
        std::fs::OpenOptions::new().append(true).open(procs.join("proc_1/combined.log")).unwrap();
        assert!(rx.recv_timeout(Duration::from_millis(300)).is_err(), "a log write woke top");
        // An entry write (tmp + rename) names the entry.
        write_atomic(&procs.join("proc_1/entry.json"), b"{}").unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), vec!["proc_1".to_string()]);
        // A new entry, renamed into place whole, is named and then watched too.
        std::fs::create_dir(procs.join(".new-proc_2")).unwrap();
        std::fs::rename(procs.join(".new-proc_2"), procs.join("proc_2")).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), vec!["proc_2".to_string()]);
        write_atomic(&procs.join("proc_2/entry.json"), b"{}").unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), vec!["proc_2".to_string()]);
    }
}
