//! A managed process's logs: stdout and stderr byte-exact in their own files, and a combined log
//! that keeps arrival order with each line tagged by stream. Supervisor markers (started,
//! stopping, escalated, exited, cleanup) go into the combined log only.
//!
//! Never unbounded: each file is capped (default 64 MiB); at the cap it is renamed to `<name>.1`
//! (replacing an older `.1`) and a new file starts with a marker line, so a log is never
//! truncated to empty. In the combined log an unterminated line longer than 64 KiB is split with
//! a marker.
//!
//! Combined log lines: `[out] text`, `[err] text`, `[sheepdog] marker`.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Default cap per log file: 64 MiB.
pub const DEFAULT_LOG_MAX: u64 = 64 * 1024 * 1024;
/// Longest unterminated line the combined log holds before splitting it: 64 KiB.
pub const MAX_LINE: usize = 64 * 1024;

pub const STDOUT_LOG: &str = "stdout.log";
pub const STDERR_LOG: &str = "stderr.log";
pub const COMBINED_LOG: &str = "combined.log";

/// Which stream a chunk came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Out,
    Err,
}

impl Stream {
    fn tag(self) -> &'static [u8] {
        match self {
            Stream::Out => b"[out] ",
            Stream::Err => b"[err] ",
        }
    }
}

/// Suffix of a log's time index: `combined.log.times` (one for the file and its `.1`).
pub const TIMES_SUFFIX: &str = ".times";

/// The time index of a log file: `<path>.times`.
pub fn times_path(log: &Path) -> PathBuf {
    let mut p = log.as_os_str().to_owned();
    p.push(TIMES_SUFFIX);
    PathBuf::from(p)
}

/// One file with a size cap and one rotation.
///
/// Beside it, a time index (`<name>.times`): one text line `INODE OFFSET UNIX_MS` for the first
/// write of each wall-clock second (and the first write of a file), so `logs --since` knows when
/// each line arrived, to the second, without changing the log's own bytes. The index is not
/// rotated (a rotation must stay cheap: a follower loses data if the writer rotates twice between
/// its looks); past [`TIMES_MAX`] it is compacted to the records of the current file and `.1`.
#[derive(Debug)]
pub struct CappedFile {
    path: PathBuf,
    file: File,
    size: u64,
    cap: u64,
    /// Bytes of the marker line that starts a rotated file (0 for the first file).
    header: u64,
    times: Option<File>,
    /// The unix second of the last index line (`u64::MAX`: none yet in this file).
    last_sec: u64,
    /// Inode of the current file.
    ino: u64,
}

/// Size past which a time index is compacted: 256 KiB (about three days of a line every second).
pub const TIMES_MAX: u64 = 256 * 1024;

impl CappedFile {
    /// Opens (appending) `path`. Errors: the open's.
    pub fn open(path: &Path, cap: u64) -> io::Result<CappedFile> {
        let file = OpenOptions::new().create(true).append(true).mode(0o600).open(path)?;
        let size = file.metadata()?.len();
        let times = OpenOptions::new().create(true).append(true).mode(0o600).open(times_path(path)).ok();
        let ino = std::os::unix::fs::MetadataExt::ino(&file.metadata()?);
        Ok(CappedFile {
            path: path.to_path_buf(),
            file,
            size,
            cap: cap.max(1024),
            header: 0,
            times,
            last_sec: u64::MAX,
            ino,
        })
    }

    /// Writes an index line for the write about to happen at `self.size`, once per second.
    fn stamp(&mut self) {
        let ms = crate::files::now_ms();
        if ms / 1000 == self.last_sec {
            return;
        }
        self.last_sec = ms / 1000;
        // Truncated in place since (logrotate's `copytruncate`): appends now land at its new
        // end, so the size (and the offsets the index records) follow the file.
        if let Ok(m) = self.file.metadata()
            && m.len() < self.size
        {
            self.size = m.len();
            self.header = 0;
        }
        let Some(t) = &mut self.times else { return };
        let _ = t.write_all(format!("{} {} {ms}\n", self.ino, self.size).as_bytes());
        if t.metadata().map(|m| m.len()).unwrap_or(0) > TIMES_MAX {
            self.compact_times();
        }
    }

    /// Rewrites the time index with the records of the current file and `.1` only.
    fn compact_times(&mut self) {
        let path = times_path(&self.path);
        let mut old = self.path.clone().into_os_string();
        old.push(".1");
        let keep: Vec<u64> = [Some(self.ino), fs::metadata(&old).ok().map(|m| std::os::unix::fs::MetadataExt::ino(&m))]
            .into_iter()
            .flatten()
            .collect();
        let text = fs::read_to_string(&path).unwrap_or_default();
        let kept: String = text
            .lines()
            .filter(|l| l.split(' ').next().and_then(|i| i.parse::<u64>().ok()).is_some_and(|i| keep.contains(&i)))
            .map(|l| format!("{l}\n"))
            .collect();
        if crate::files::write_atomic(&path, kept.as_bytes()).is_ok() {
            self.times = OpenOptions::new().append(true).open(&path).ok();
        }
    }

    /// Appends `bytes`, rotating first if they would cross the cap. Rotation happens on a line
    /// boundary where the chunk has one: the lines that fit stay in the old file, the rest starts
    /// the new one after its marker; only a line longer than the whole cap is cut. Write errors
    /// (disk full) are dropped: a full disk must not stop the supervisor from draining and
    /// stopping.
    pub fn write(&mut self, bytes: &[u8]) {
        let mut rest = bytes;
        while !rest.is_empty() {
            let room = self.cap.saturating_sub(self.size) as usize;
            let n = if rest.len() <= room {
                rest.len()
            } else if let Some(nl) = rest[..room].iter().rposition(|b| *b == b'\n') {
                nl + 1
            } else if self.size > self.header {
                self.rotate();
                continue;
            } else {
                room.max(1)
            };
            self.stamp();
            if self.file.write_all(&rest[..n]).is_err() {
                return;
            }
            self.size += n as u64;
            rest = &rest[n..];
            if !rest.is_empty() {
                self.rotate();
            }
        }
    }

    fn rotate(&mut self) {
        let mut old = self.path.clone().into_os_string();
        old.push(".1");
        let _ = fs::rename(&self.path, &old);
        self.last_sec = u64::MAX;
        if let Ok(f) = OpenOptions::new().create(true).truncate(true).write(true).mode(0o600).open(&self.path) {
            self.ino = f.metadata().map(|m| std::os::unix::fs::MetadataExt::ino(&m)).unwrap_or(0);
            self.file = f;
            self.size = 0;
            self.stamp();
            let marker =
                format!("[sheepdog] log reached its cap of {} bytes; the earlier part is in {}\n", self.cap, {
                    Path::new(&old).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
                });
            let _ = self.file.write_all(marker.as_bytes());
            self.size = marker.len() as u64;
            self.header = self.size;
        }
    }
}

/// The three logs of one managed process.
#[derive(Debug)]
pub struct LogSet {
    out: CappedFile,
    err: CappedFile,
    combined: CappedFile,
    /// Unterminated tail of each stream, waiting for its newline (combined log only).
    partial: [Vec<u8>; 2],
}

impl LogSet {
    /// Opens the logs in `dir` (the entry's directory, never the process's cwd).
    pub fn open(dir: &Path, cap: u64) -> io::Result<LogSet> {
        Ok(LogSet {
            out: CappedFile::open(&dir.join(STDOUT_LOG), cap)?,
            err: CappedFile::open(&dir.join(STDERR_LOG), cap)?,
            combined: CappedFile::open(&dir.join(COMBINED_LOG), cap)?,
            partial: [Vec::new(), Vec::new()],
        })
    }

    /// Records a chunk read from `stream`: verbatim in its own file, as tagged lines in the
    /// combined log.
    pub fn write(&mut self, stream: Stream, bytes: &[u8]) {
        match stream {
            Stream::Out => self.out.write(bytes),
            Stream::Err => self.err.write(bytes),
        }
        let i = stream as usize;
        // Every complete line of the chunk goes out in one write (a flood of short lines must
        // not cost a syscall per line).
        let mut out = Vec::with_capacity(bytes.len() + bytes.len() / 8 + 16);
        let mut rest = bytes;
        while let Some(nl) = rest.iter().position(|b| *b == b'\n') {
            out.extend_from_slice(stream.tag());
            out.append(&mut self.partial[i]);
            out.extend_from_slice(&rest[..=nl]);
            rest = &rest[nl + 1..];
        }
        self.partial[i].extend_from_slice(rest);
        while self.partial[i].len() > MAX_LINE {
            out.extend_from_slice(stream.tag());
            out.extend(self.partial[i].drain(..MAX_LINE));
            out.extend_from_slice(b"\n[sheepdog] line longer than 65536 bytes split here\n");
        }
        if !out.is_empty() {
            self.combined.write(&out);
        }
    }

    fn combined_line(&mut self, stream: Stream, line: &[u8]) {
        let mut buf = Vec::with_capacity(line.len() + 8);
        buf.extend_from_slice(stream.tag());
        buf.extend_from_slice(line);
        self.combined.write(&buf);
    }

    /// Writes unterminated tails (at exit) so nothing read is lost.
    pub fn flush_partials(&mut self) {
        for (i, stream) in [Stream::Out, Stream::Err].into_iter().enumerate() {
            if !self.partial[i].is_empty() {
                let mut line = std::mem::take(&mut self.partial[i]);
                line.push(b'\n');
                self.combined_line(stream, &line);
            }
        }
    }

    /// A supervisor marker line, combined log only: `[sheepdog] text`.
    pub fn marker(&mut self, text: &str) {
        self.combined.write(format!("[sheepdog] {text}\n").as_bytes());
    }
}

/// Appends one `[sheepdog] text` marker to the combined log in `dir`, for the commands that act
/// on an entry from outside its supervisor (`stop` past a dead supervisor, `reap`). Best effort.
pub fn append_marker(dir: &Path, text: &str) {
    if let Ok(mut f) = OpenOptions::new().append(true).open(dir.join(COMBINED_LOG)) {
        let _ = f.write_all(format!("[sheepdog] {text}\n").as_bytes());
    }
}
