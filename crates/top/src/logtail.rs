//! The log pane's reader: follows the end of an entry's combined log without ever reading the
//! whole file, so a process printing 10 MB/s costs one bounded read per look.
//!
//! Each look reads what was appended since the last one, but at most [`TAIL_BYTES`]: when more
//! arrived, it jumps to the last [`TAIL_BYTES`] and drops the partial line it lands in. A
//! rotation (the file's inode changed, or it shrank) starts over at the new file's tail.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

/// The most one look reads: 256 KiB (a screenful of lines many times over).
pub const TAIL_BYTES: u64 = 256 * 1024;
/// Lines kept for the pane (and for `/` search): 2000.
pub const KEEP_LINES: usize = 2000;
/// A displayed line is cut at this many bytes: 4 KiB (the pane shows one row per line).
pub const LINE_CUT: usize = 4096;

/// Which stream a combined-log line came from (its `[out] `/`[err] `/`[sheepdog] ` tag).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineKind {
    Out,
    Err,
    Marker,
    /// No known tag (a line split by a cap).
    Other,
}

/// One line of the combined log, tag removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    pub kind: LineKind,
    pub text: String,
}

impl LogLine {
    /// Splits the tag off a combined-log line.
    pub fn parse(raw: &[u8]) -> LogLine {
        let raw = &raw[..raw.len().min(LINE_CUT)];
        let s = String::from_utf8_lossy(raw);
        let s = s.trim_end_matches(['\n', '\r']);
        for (tag, kind) in [("[out] ", LineKind::Out), ("[err] ", LineKind::Err), ("[sheepdog] ", LineKind::Marker)] {
            if let Some(rest) = s.strip_prefix(tag) {
                return LogLine { kind, text: rest.to_string() };
            }
        }
        LogLine { kind: LineKind::Other, text: s.to_string() }
    }
}

/// Follows one log file.
#[derive(Debug)]
pub struct LogTail {
    path: PathBuf,
    file: Option<File>,
    ino: u64,
    pos: u64,
    /// The unterminated end of the last read, waiting for its newline.
    partial: Vec<u8>,
    /// The last [`KEEP_LINES`] lines.
    pub lines: VecDeque<LogLine>,
    /// Bytes the last [`LogTail::poll`] read (at most [`TAIL_BYTES`]).
    pub last_read: u64,
}

impl LogTail {
    /// A reader of `path` (which may not exist yet); nothing is read until [`LogTail::poll`].
    pub fn new(path: PathBuf) -> LogTail {
        LogTail { path, file: None, ino: 0, pos: 0, partial: Vec::new(), lines: VecDeque::new(), last_read: 0 }
    }

    /// Reads what was appended since the last call (bounded by [`TAIL_BYTES`]); true if any
    /// line was added.
    pub fn poll(&mut self) -> bool {
        let Ok(meta) = std::fs::metadata(&self.path) else { return false };
        if self.file.is_none() || meta.ino() != self.ino || meta.len() < self.pos {
            let Ok(f) = File::open(&self.path) else { return false };
            self.file = Some(f);
            self.ino = meta.ino();
            self.pos = 0;
            self.partial.clear();
        }
        let len = meta.len();
        if len == self.pos {
            return false;
        }
        let mut skip_partial = false;
        if len - self.pos > TAIL_BYTES {
            self.pos = len - TAIL_BYTES;
            self.partial.clear();
            skip_partial = true;
        }
        let Some(f) = self.file.as_mut() else { return false };
        if f.seek(SeekFrom::Start(self.pos)).is_err() {
            return false;
        }
        let mut buf = Vec::with_capacity((len - self.pos) as usize);
        if f.take(len - self.pos).read_to_end(&mut buf).is_err() {
            return false;
        }
        self.pos += buf.len() as u64;
        self.last_read = buf.len() as u64;
        let mut rest = &buf[..];
        if skip_partial {
            // We landed inside a line: drop up to its end.
            match rest.iter().position(|b| *b == b'\n') {
                Some(nl) => rest = &rest[nl + 1..],
                None => rest = &[],
            }
        }
        let before = self.lines.len();
        let mut added = 0usize;
        while let Some(nl) = rest.iter().position(|b| *b == b'\n') {
            let line = if self.partial.is_empty() {
                LogLine::parse(&rest[..nl])
            } else {
                self.partial.extend_from_slice(&rest[..nl]);
                LogLine::parse(&std::mem::take(&mut self.partial))
            };
            self.lines.push_back(line);
            added += 1;
            rest = &rest[nl + 1..];
        }
        if self.partial.len() < LINE_CUT {
            self.partial.extend_from_slice(&rest[..rest.len().min(LINE_CUT)]);
        }
        while self.lines.len() > KEEP_LINES {
            self.lines.pop_front();
        }
        added > 0 || self.lines.len() != before
    }
}

#[cfg(test)]
mod tests {
    use std::fs::File;
    use std::io::Write;

    use super::{KEEP_LINES, LineKind, LogLine, LogTail, TAIL_BYTES};

    #[test]
    fn parses_tags() {
        assert_eq!(LogLine::parse(b"[out] hi\n"), LogLine { kind: LineKind::Out, text: "hi".into() });
        assert_eq!(LogLine::parse(b"[err] oops"), LogLine { kind: LineKind::Err, text: "oops".into() });
        assert_eq!(LogLine::parse(b"[sheepdog] started"), LogLine { kind: LineKind::Marker, text: "started".into() });
        assert_eq!(LogLine::parse(b"plain").kind, LineKind::Other);
    }

    #[test]
    fn follows_appends_and_reads_only_the_tail_of_a_big_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("combined.log");
        let mut f = File::create(&path).unwrap();
        let mut t = LogTail::new(path.clone());
        assert!(!t.poll());
        f.write_all(b"[out] one\n[err] tw").unwrap();
        assert!(t.poll());
        assert_eq!(t.lines.len(), 1);
        f.write_all(b"o\n").unwrap();
        assert!(t.poll());
        assert_eq!(t.lines[1], LogLine { kind: LineKind::Err, text: "two".into() });
        // 10 MB at once: only the last TAIL_BYTES are read, starting at a line boundary.
        let line = format!("[out] {}\n", "x".repeat(99));
        let big: String =
            (0..100_000).map(|i| if i == 99_999 { "[out] last\n".to_string() } else { line.clone() }).collect();
        f.write_all(big.as_bytes()).unwrap();
        assert!(t.poll());
        assert!(t.last_read <= TAIL_BYTES, "read {} bytes of a 10 MB append", t.last_read);
        assert_eq!(t.lines.back().unwrap().text, "last");
        assert!(t.lines.iter().all(|l| l.kind == LineKind::Out));
        assert!(t.lines.len() <= KEEP_LINES);
        // Rotation: a new, shorter file.
        std::fs::rename(&path, dir.path().join("combined.log.1")).unwrap();
        std::fs::write(&path, b"[sheepdog] rotated\n").unwrap();
        assert!(t.poll());
        assert_eq!(t.lines.back().unwrap().kind, LineKind::Marker);
    }
}
