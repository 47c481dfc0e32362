//! The event journal: what happened to entries, one JSON object per line, in the state dir, so
//! that a host can follow changes (`sheepdog events`) instead of polling `ps --json`, and a
//! stream started later (after a crash of anything) still sees what was recorded.
//!
//! ```text
//! events/lock              held while a line is appended (and the journal rotated)
//! events/journal.jsonl     the current journal
//! events/journal.1.jsonl   the one rotated journal kept
//! ```
//!
//! Written by the process that makes the change, best effort (a full disk never fails the change
//! itself): the registry's transitions (`started`, `exited`, `cleanupFinished`, `cleared`,
//! `setAside`; see `registry::Registry`'s writes, which call [`transitions`] under the entry's lock, so
//! one entry's events are in order), `start --ready-*` (`ready`) and `stop` (`stopped`). Each
//! line is appended under `events/lock` in one `write`, then `fdatasync`ed, with `seq` one more
//! than the last line's: `seq` is the cursor (`--since SEQ` prints what came after it, without
//! loss or duplicates, across a restart of the reader and across a rotation).
//!
//! Bounded: when the current file has reached [`MAX_BYTES`] (1 MiB), it is renamed to
//! `journal.1.jsonl` (replacing the older one) and a new one begins, so the journal holds at
//! most about 2 MiB. A reader whose cursor is older than the oldest kept line is told how many
//! events it missed.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::entry::Entry;
use crate::files::{mkdir_private, now_ms};
use crate::status::{CleanupRunner, Status, StopReason, Version};

/// The journal's directory under the state dir.
pub const DIR: &str = "events";
/// The current journal file.
pub const FILE: &str = "journal.jsonl";
/// The rotated journal file (one kept).
pub const ROTATED: &str = "journal.1.jsonl";
/// Size at which the current file is rotated: 1 MiB, about 5,000 events; with the one rotated
/// file kept, the journal stays under about 2 MiB.
pub const MAX_BYTES: u64 = 1024 * 1024;
/// How far back from the end the last `seq` is looked for: 4 KiB first (a line is about 250
/// bytes; a supervisor appends `started` and `exited`, and a larger read would stay in its
/// heap as private memory), then 64 KiB for lines with very long names.
const TAIL_BYTES: [u64; 2] = [4 * 1024, 64 * 1024];

/// What happened, with its own fields (`event` names it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(tag = "event", rename_all = "camelCase")]
pub enum Kind {
    /// The command runs (its supervisor recorded the spawn).
    #[serde(rename_all = "camelCase")]
    Started {
        /// The command's pid.
        pid: i32,
        /// Its process group.
        pgid: Option<i32>,
    },
    /// `start --ready-*` found it ready.
    #[serde(rename_all = "camelCase")]
    Ready {
        /// Ms from the start of the wait.
        after_ms: u64,
        /// The matching log line, or `port N`.
        matched: Option<String>,
        /// The port that made it ready.
        port: Option<u16>,
    },
    /// A result was recorded: it exited, was killed, stopped, timed out, reaped or lost.
    #[serde(rename_all = "camelCase")]
    Exited {
        /// The entry's status now.
        status: Status,
        /// The human line (`exited (2)`).
        status_text: String,
        /// The command's exit code, when it exited by itself.
        exit_code: Option<i32>,
        /// The signal that ended it, when one did.
        signal: Option<String>,
        /// That signal dumped core (`WCOREDUMP`).
        core_dumped: bool,
        /// What began the stop, when one did.
        stop_reason: Option<StopReason>,
        /// Whether the whole tree was confirmed gone.
        tree_gone: Option<bool>,
    },
    /// `sheepdog stop` (or `restart`, the MCP `process_stop`) is done with it.
    #[serde(rename_all = "camelCase")]
    Stopped {
        /// It had ended before this stop.
        already_finished: bool,
        /// The tree is gone.
        tree_gone: bool,
        /// The tree is gone and no cleanup failed.
        ok: bool,
        /// The cleanup's failure line, else null.
        cleanup_error: Option<String>,
    },
    /// Its cleanup command ended.
    #[serde(rename_all = "camelCase")]
    CleanupFinished {
        /// The cleanup's exit code (null if it was killed or timed out).
        exit_code: Option<i32>,
        /// The signal that ended it.
        signal: Option<String>,
        /// It ran past its `--cleanup-timeout` and was stopped.
        timed_out: bool,
        /// How long it ran, ms.
        duration_ms: u64,
        /// Who ran it: `supervisor`, `stop` or `reap`.
        ran_by: CleanupRunner,
    },
    /// `clear` removed it and its logs.
    Cleared,
    /// Its entry could not be read and was moved whole to `corrupt/`.
    #[serde(rename_all = "camelCase")]
    SetAside {
        /// Why it could not be read.
        reason: String,
        /// Where it went (null if the move failed).
        moved_to: Option<String>,
    },
}

/// One line of the journal, as `sheepdog events --json` prints it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    pub v: Version,
    /// The cursor: one more than the line before (`--since SEQ` resumes after it).
    pub seq: u64,
    /// When it was recorded, unix ms.
    pub at_ms: u64,
    /// The entry's id.
    pub id: String,
    /// Its display name (the given name, else the program's basename).
    pub name: String,
    /// Its session, if it has one.
    pub session_id: Option<String>,
    #[serde(flatten)]
    pub kind: Kind,
}

/// The `seq` of the last complete line of `f` (0 for an empty file or none found).
fn last_seq(f: &mut File) -> u64 {
    let Ok(len) = f.metadata().map(|m| m.len()) else { return 0 };
    for tail in TAIL_BYTES {
        let from = len.saturating_sub(tail);
        let mut buf = Vec::new();
        if f.seek(SeekFrom::Start(from)).is_err() || f.take(len - from).read_to_end(&mut buf).is_err() {
            return 0;
        }
        if let Some(seq) = buf.split(|b| *b == b'\n').rev().find_map(seq_of) {
            return seq;
        }
        if from == 0 {
            break;
        }
    }
    0
}

/// The `seq` of one journal line, if it is one.
fn seq_of(line: &[u8]) -> Option<u64> {
    serde_json::from_slice::<serde_json::Value>(line).ok()?.get("seq")?.as_u64()
}

/// Appends one event about `e` (best effort: errors are returned for tests and ignored by
/// writers). Under `events/lock`: rotates a full journal, takes the next `seq`, writes the line
/// in one `write` and `fdatasync`s it.
pub fn append(root: &Path, e: &Entry, kind: Kind) -> io::Result<u64> {
    let dir = root.join(DIR);
    mkdir_private(&dir)?;
    let lock = OpenOptions::new().create(true).truncate(false).write(true).mode(0o600).open(dir.join("lock"))?;
    lock.lock()?;
    let path = dir.join(FILE);
    let mut f = OpenOptions::new().create(true).read(true).append(true).mode(0o600).open(&path)?;
    let mut last = last_seq(&mut f);
    if f.metadata()?.len() >= MAX_BYTES {
        fs::rename(&path, dir.join(ROTATED))?;
        f = OpenOptions::new().create(true).read(true).append(true).mode(0o600).open(&path)?;
    } else if last == 0
        && let Ok(mut old) = File::open(dir.join(ROTATED))
    {
        last = last_seq(&mut old);
    }
    let seq = last + 1;
    let rec = Record {
        v: Version,
        seq,
        at_ms: now_ms(),
        id: e.id.clone(),
        name: e.display_name(),
        session_id: e.session_id.clone(),
        kind,
    };
    let mut line = serde_json::to_vec(&rec).map_err(io::Error::other)?;
    line.push(b'\n');
    f.write_all(&line)?;
    f.sync_data()?;
    Ok(seq)
}

/// Records the events a registry write from `before` to `after` means: `started` (the pid was
/// recorded), `exited` (a result was), `cleanupFinished` (a cleanup result was). Called by the
/// registry under the entry's lock, after the write.
pub fn transitions(root: &Path, before: &Entry, after: &Entry) {
    if before.provider.is_none()
        && let Some(pid) = after.pid()
    {
        let _ = append(root, after, Kind::Started { pid, pgid: after.pgid });
    }
    if !before.is_finished() && after.is_finished() {
        let kind = Kind::Exited {
            status: after.status,
            // A result is always recorded with its text; the token stands in for one that is not.
            status_text: after.status_text.clone().unwrap_or_else(|| after.status.to_string()),
            exit_code: after.exit_code,
            signal: after.signal.as_ref().map(|s| s.name()),
            core_dumped: after.core_dumped,
            stop_reason: after.stop_reason.clone(),
            tree_gone: after.tree_gone,
        };
        let _ = append(root, after, kind);
    }
    if before.cleanup_state.result().is_none()
        && let Some(r) = after.cleanup_state.result()
    {
        let kind = Kind::CleanupFinished {
            exit_code: r.exit_code,
            signal: r.signal.as_ref().map(|s| s.name()),
            timed_out: r.timed_out,
            duration_ms: r.duration_ms,
            ran_by: r.ran_by.clone(),
        };
        let _ = append(root, after, kind);
    }
}

/// Which events a reader wants.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Only this session's.
    pub session: Option<String>,
    /// Only this entry's: its id, or its name.
    pub id: Option<String>,
    /// Only what came after this `seq`; `None`: only what comes from now on.
    pub since: Option<u64>,
}

impl Filter {
    fn matches(&self, v: &serde_json::Value) -> bool {
        let s = |k: &str| v.get(k).and_then(|x| x.as_str());
        self.session.as_deref().is_none_or(|want| s("sessionId") == Some(want))
            && self.id.as_deref().is_none_or(|want| s("id") == Some(want) || s("name") == Some(want))
    }
}

/// What a reader gets: one journal line (its JSON as written: a newer writer's fields and kinds
/// pass through whole) and its parsed value.
pub struct Line<'a> {
    pub raw: &'a [u8],
    pub value: &'a serde_json::Value,
}

/// A reader of the journal: where it is in which file.
struct Reader {
    dir: PathBuf,
    file: Option<File>,
    ino: u64,
    pending: Vec<u8>,
    last: u64,
}

impl Reader {
    /// Reads what is new in the current file (and what was left in a file that was rotated
    /// away meanwhile); calls `emit` for each complete line after `self.last`.
    fn drain(&mut self, filter: &Filter, emit: &mut dyn FnMut(Line) -> bool) -> io::Result<bool> {
        loop {
            if self.file.is_none() {
                match File::open(self.dir.join(FILE)) {
                    Ok(f) => {
                        self.ino = f.metadata()?.ino();
                        self.file = Some(f);
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(true),
                    Err(e) => return Err(e),
                }
            }
            let Some(f) = self.file.as_mut() else { return Ok(true) };
            f.read_to_end(&mut self.pending)?;
            if !self.lines(filter, emit) {
                return Ok(false);
            }
            // Rotated: nothing more is written to the old file, but a line may have been
            // appended to it between the read above and the rename: read it to its end once
            // more, then go on with the new one.
            match fs::metadata(self.dir.join(FILE)) {
                Ok(m) if m.ino() != self.ino => {
                    if let Some(f) = self.file.as_mut() {
                        f.read_to_end(&mut self.pending)?;
                    }
                    if !self.lines(filter, emit) {
                        return Ok(false);
                    }
                    self.file = None;
                    self.pending.clear();
                }
                _ => return Ok(true),
            }
        }
    }

    fn lines(&mut self, filter: &Filter, emit: &mut dyn FnMut(Line) -> bool) -> bool {
        let Some(end) = self.pending.iter().rposition(|b| *b == b'\n') else { return true };
        let complete: Vec<u8> = self.pending.drain(..=end).collect();
        for raw in complete.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let Ok(value) = serde_json::from_slice::<serde_json::Value>(raw) else { continue };
            let Some(seq) = value.get("seq").and_then(|s| s.as_u64()) else { continue };
            if seq <= self.last {
                continue;
            }
            self.last = seq;
            if filter.matches(&value) && !emit(Line { raw, value: &value }) {
                return false;
            }
        }
        true
    }
}

/// Where a read starts: the lines of the rotated file after `since` (if any are there), and
/// how many events between `since` and the oldest kept line are lost to rotation.
fn start(dir: &Path, since: u64, filter: &Filter, emit: &mut dyn FnMut(Line) -> bool) -> (bool, u64) {
    let mut r = Reader { dir: dir.to_path_buf(), file: None, ino: 0, pending: Vec::new(), last: since };
    let rotated = fs::read(dir.join(ROTATED)).unwrap_or_default();
    let current_first =
        fs::read(dir.join(FILE)).ok().and_then(|b| b.split(|c| *c == b'\n').find_map(seq_of)).unwrap_or(u64::MAX);
    let oldest = rotated.split(|c| *c == b'\n').find_map(seq_of).unwrap_or(current_first);
    let missed = if oldest != u64::MAX && oldest > since + 1 { oldest - since - 1 } else { 0 };
    r.pending = rotated;
    if !r.pending.ends_with(b"\n") && !r.pending.is_empty() {
        r.pending.push(b'\n');
    }
    (r.lines(filter, emit), missed)
}

/// What [`follow`] reports before the stream: events that a cursor older than the journal's
/// oldest line can no longer get.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Missed(pub u64);

/// Prints the journal's events through `emit` (false from `emit` ends it: a reader that went
/// away), from `filter.since` (else from now), then, with `follow`, every new one as it is
/// appended, woken by inotify on `events/` (Linux; elsewhere it looks every 500 ms), never by
/// polling the file. While it waits it also watches `idle_fd` (the CLI's stdout): once that
/// pipe's reader is gone the stream ends, even when nothing is appended. `missed` gets the count
/// of events lost to rotation before the first line, if any.
///
/// Errors: the journal cannot be read, or inotify cannot be set up.
pub fn follow(
    root: &Path,
    filter: &Filter,
    follow: bool,
    missed: &mut dyn FnMut(Missed),
    emit: &mut dyn FnMut(Line) -> bool,
    idle_fd: Option<std::os::fd::RawFd>,
) -> io::Result<()> {
    let dir = root.join(DIR);
    mkdir_private(&dir)?;
    #[cfg(target_os = "linux")]
    let mut ino = {
        use inotify::{Inotify, WatchMask};
        let ino = Inotify::init()?;
        ino.watches().add(&dir, WatchMask::MODIFY | WatchMask::CREATE | WatchMask::MOVED_TO)?;
        ino
    };
    let since = match filter.since {
        Some(s) => s,
        None => File::open(dir.join(FILE)).map(|mut f| last_seq(&mut f)).unwrap_or(0),
    };
    let mut r = Reader { dir: dir.clone(), file: None, ino: 0, pending: Vec::new(), last: since };
    // The current file is opened before the rotated one is read: a rotation in between leaves
    // this fd on what became the rotated file, read to its end before the new one (lines seen
    // twice are skipped by `seq`), so nothing falls between the two.
    if let Ok(f) = File::open(dir.join(FILE)) {
        r.ino = f.metadata()?.ino();
        r.file = Some(f);
    }
    if filter.since.is_some() {
        let mut last = since;
        let (go, lost) = start(&dir, since, filter, &mut |l: Line| {
            if let Some(s) = l.value.get("seq").and_then(|s| s.as_u64()) {
                last = s;
            }
            emit(l)
        });
        if lost > 0 {
            missed(Missed(lost));
        }
        if !go {
            return Ok(());
        }
        r.last = r.last.max(last);
    }
    loop {
        if !r.drain(filter, emit)? || !follow {
            return Ok(());
        }
        #[cfg(target_os = "linux")]
        {
            use crate::sys::process::{POLL_IN, PollFd, poll};
            use std::os::fd::AsRawFd;
            let mut fds = vec![PollFd::new(ino.as_raw_fd(), POLL_IN)];
            if let Some(fd) = idle_fd {
                // No interest: poll still reports POLLERR/POLLHUP once the pipe's reader is gone.
                fds.push(PollFd::new(fd, 0));
            }
            match poll(&mut fds, None) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            if fds.get(1).is_some_and(|f| f.hung_up()) {
                return Ok(());
            }
            let mut buf = [0u8; 4096];
            // Only to empty the queue: what changed is read from the file itself.
            while let Ok(evs) = ino.read_events(&mut buf) {
                if evs.count() == 0 {
                    break;
                }
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            if idle_fd.is_some_and(crate::sys::process::peer_closed) {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
    }
}

#[cfg(test)]
mod reader_tests {
    use std::fs;
    use std::fs::OpenOptions;
    use std::io::Write;

    use super::{FILE, Filter, Line, ROTATED, Reader};

    /// The journal's twin of `logread`'s lost-write race: a writer appends a line between the
    /// reader's read and its look at the file's name, then rotates. The line is still read.
    #[test]
    fn a_line_appended_just_before_a_rotation_is_not_lost() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let line = |seq: u64| format!("{{\"seq\":{seq},\"event\":\"cleared\"}}\n");
        fs::write(dir.join(FILE), line(1)).unwrap();
        let mut r = Reader { dir: dir.clone(), file: None, ino: 0, pending: Vec::new(), last: 0 };
        let mut seen = Vec::new();
        let filter = Filter { session: None, id: None, since: Some(0) };
        let more = r
            .drain(&filter, &mut |l: Line| {
                let seq = l.value["seq"].as_u64().unwrap();
                seen.push(seq);
                if seq == 1 {
                    let mut f = OpenOptions::new().append(true).open(dir.join(FILE)).unwrap();
                    f.write_all(line(2).as_bytes()).unwrap();
                    fs::rename(dir.join(FILE), dir.join(ROTATED)).unwrap();
                    fs::write(dir.join(FILE), line(3)).unwrap();
                }
                true
            })
            .unwrap();
        assert!(more);
        assert_eq!(seen, [1, 2, 3]);
    }
}
