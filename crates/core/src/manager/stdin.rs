//! Stdin for background processes (`start --stdin pipe`, `sheepdog send`, MCP `process_write`):
//! an agent answers a prompt (`Proceed? [y/N]`) or feeds a REPL.
//!
//! The command's stdin is the read end of a FIFO in the entry's directory, `procs/<id>/stdin`
//! (0600, in the 0700 state dir). Its supervisor holds the FIFO's write end open (close-on-exec,
//! so neither the tree nor a cleanup command inherits it): the command does not see EOF between
//! two senders, and no fd of any writer reaches the tree. A sender opens the FIFO for writing,
//! writes (non-blocking, at most [`SEND_MAX`] bytes, for at most [`SEND_TIMEOUT`]) and closes.
//! When nothing reads the FIFO any more (the command closed its stdin or exited), the open
//! fails with ENXIO: "not reading". End of input (`send --eof`, `end: true`) is one byte on a
//! second FIFO, `procs/<id>/stdin.ctl`, that the supervisor polls: it closes its write end and
//! removes both FIFOs, so the command reads EOF once the sender closes its own, and a later
//! send is told the input was closed. Default stdin stays `/dev/null`.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::entry::Entry;
use crate::registry::Registry;

/// The FIFO that is the command's stdin: `procs/<id>/stdin`.
pub const STDIN_FIFO: &str = "stdin";
/// The FIFO on which a sender asks the supervisor to close the input: `procs/<id>/stdin.ctl`.
pub const STDIN_CTL: &str = "stdin.ctl";
/// The most one send writes: 65 536 bytes (a pipe's default capacity: a command that reads at
/// all takes it without the sender waiting long).
pub const SEND_MAX: usize = 64 * 1024;
/// How long a send waits at most for the command to make room in a full pipe: 5 s.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a send retries a full pipe: every 10 ms.
const SEND_RETRY: Duration = Duration::from_millis(10);

/// The supervisor's side of the pipe: the write end it holds and the control FIFO it polls.
/// Dropping it closes the write end and removes both FIFOs.
pub(super) struct StdinPipe {
    _keep: File,
    ctl: File,
    _ctl_keep: File,
    paths: [PathBuf; 2],
}

impl StdinPipe {
    /// Makes both FIFOs in `dir` and returns the pipe and the read end for the command's
    /// stdin (blocking, close-on-exec: the spawn dups it onto fd 0).
    pub(super) fn open(dir: &Path) -> io::Result<(StdinPipe, File)> {
        let (data, ctl_path) = (dir.join(STDIN_FIFO), dir.join(STDIN_CTL));
        for p in [&data, &ctl_path] {
            let _ = std::fs::remove_file(p);
            crate::sys::signal::mkfifo(p, 0o600)?;
        }
        let nonblocking = |read: bool, p: &Path| {
            OpenOptions::new().read(read).write(!read).custom_flags(crate::sys::process::O_NONBLOCK).open(p)
        };
        // The reader first (a non-blocking open for writing needs one), then the writer.
        let reader = nonblocking(true, &data)?;
        let keep = nonblocking(false, &data)?;
        crate::sys::signal::set_blocking(reader.as_raw_fd())?;
        let ctl = nonblocking(true, &ctl_path)?;
        let ctl_keep = nonblocking(false, &ctl_path)?;
        Ok((StdinPipe { _keep: keep, ctl, _ctl_keep: ctl_keep, paths: [data, ctl_path] }, reader))
    }

    /// Closes this process's fds without removing the FIFOs (another process, the keeper,
    /// holds its own copies and removes them).
    pub(super) fn forget(mut self) {
        self.paths = [PathBuf::new(), PathBuf::new()];
    }

    /// Every fd this process holds for the pipe: the data FIFO's write end, the control
    /// FIFO's two ends.
    pub(super) fn fds(&self) -> [RawFd; 3] {
        [self._keep.as_raw_fd(), self.ctl.as_raw_fd(), self._ctl_keep.as_raw_fd()]
    }

    /// The control FIFO, to poll for readability.
    pub(super) fn ctl_fd(&self) -> RawFd {
        self.ctl.as_raw_fd()
    }

    /// Reads the control FIFO; true when a sender asked to end the input.
    pub(super) fn end_requested(&mut self) -> bool {
        let mut buf = [0u8; 64];
        let mut end = false;
        loop {
            match (&self.ctl).read(&mut buf) {
                Ok(0) => return end,
                Ok(n) => end |= buf[..n].contains(&b'e'),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return end,
            }
        }
    }
}

impl Drop for StdinPipe {
    fn drop(&mut self) {
        for p in self.paths.iter().filter(|p| !p.as_os_str().is_empty()) {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Why a send failed. Each names the entry (`web (proc_4)`).
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// Started without `--stdin pipe`: its stdin is /dev/null.
    #[error("{0} was not started with a stdin pipe (its stdin is /dev/null); start it with --stdin pipe")]
    NoPipe(String),
    /// The entry is final.
    #[error("{0} has exited ({1}); nothing reads its stdin")]
    Exited(String, String),
    /// The input was already ended by an earlier send.
    #[error("the stdin of {0} was already closed (end of input was sent)")]
    Closed(String),
    /// Nothing reads the FIFO: the command closed its stdin, exited, or its supervisor is gone.
    #[error("nothing reads the stdin of {0} any more (it closed its stdin or exited)")]
    NotReading(String),
    /// The pipe stayed full.
    #[error("{label} did not read its stdin within {secs}s: {written} of {total} bytes were written")]
    Full { label: String, secs: u64, written: usize, total: usize },
    /// More than [`SEND_MAX`] bytes.
    #[error("input too long: {0} bytes (at most {SEND_MAX} per send)")]
    TooLong(usize),
    /// Another I/O error.
    #[error("unable to write to the stdin of {0}: {1}")]
    Io(String, io::Error),
}

/// Writes `input` to the stdin of `e` (then ends the input when `end`); returns the bytes
/// written. `status` is the entry's status as the kernel says now (see `manager::live_status`).
///
/// Errors: [`SendError`], each one sentence for the front end.
pub fn send(reg: &Registry, e: &Entry, finished: Option<String>, input: &[u8], end: bool) -> Result<usize, SendError> {
    let label = e.label();
    if !e.stdin_pipe {
        return Err(SendError::NoPipe(label));
    }
    if let Some(status) = finished {
        return Err(SendError::Exited(label, status));
    }
    if input.len() > SEND_MAX {
        return Err(SendError::TooLong(input.len()));
    }
    let open = |p: &Path| OpenOptions::new().write(true).custom_flags(crate::sys::process::O_NONBLOCK).open(p);
    // A missing FIFO: the supervisor removed both, because the input was ended or because the
    // tree is gone (it removes them only after the result is recorded, so the entry says which).
    let gone = |label: String| match reg.read(&e.id) {
        Ok(now) if now.is_finished() => SendError::Exited(label, crate::view::status_text(&now, now.status)),
        _ => SendError::Closed(label),
    };
    // With `end`, the control FIFO is opened first, before a byte is written: a command that
    // reads the input and exits at once (`read line; echo $line`) makes its supervisor remove
    // both FIFOs, and an open after the write would find none and refuse a send that reached it.
    let ctl = if end {
        match open(&reg.file(&e.id, STDIN_CTL)) {
            Ok(f) => Some(f),
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Err(gone(label)),
            Err(err) if err.raw_os_error() == Some(crate::sys::errno::ENXIO) => {
                return Err(SendError::NotReading(label));
            }
            Err(err) => return Err(SendError::Io(label, err)),
        }
    } else {
        None
    };
    let mut fifo = match open(&reg.file(&e.id, STDIN_FIFO)) {
        Ok(f) => f,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Err(gone(label)),
        Err(err) if err.raw_os_error() == Some(crate::sys::errno::ENXIO) => return Err(SendError::NotReading(label)),
        Err(err) => return Err(SendError::Io(label, err)),
    };
    let deadline = Instant::now() + SEND_TIMEOUT;
    let mut written = 0;
    while written < input.len() {
        match fifo.write(&input[written..]) {
            Ok(n) => written += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    let secs = SEND_TIMEOUT.as_secs();
                    return Err(SendError::Full { label, secs, written, total: input.len() });
                }
                std::thread::sleep(SEND_RETRY);
            }
            Err(err) if err.kind() == io::ErrorKind::BrokenPipe => return Err(SendError::NotReading(label)),
            Err(err) => return Err(SendError::Io(label, err)),
        }
    }
    if let Some(mut ctl) = ctl {
        // The supervisor closes its write end; the command reads EOF once ours is closed too. A
        // refused write (EPIPE) means the supervisor already closed the input or its tree is
        // gone: the data is in the pipe either way, and the end is moot.
        let _ = ctl.write_all(b"e");
    }
    drop(fifo);
    Ok(written)
}
