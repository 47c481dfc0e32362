//! The stdin relay (`sheepdog run --stdin relay`): the provider's stdin is a pipe the supervisor
//! holds and feeds from its own stdin, so the supervisor can close it (EOF) when its owner dies
//! or a stop begins, as Orca's provider supervisor does with `process.stdin.pipe(child.stdin)`.
//!
//! Without the relay the provider reads the supervisor's own stdin, zero-copy, and nothing can
//! close it but the host: a host that dies while a sibling still holds the write end leaves the
//! provider waiting for an EOF that never comes.
//!
//! The relay is two fds in the supervisor's one `poll`: the supervisor's stdin (readable) and
//! the pipe's write end (writable, only while bytes wait). It copies through a bounded buffer:
//!
//! - no byte is lost or reordered: bytes are read only while the buffer has room and written in
//!   order; a closed source is relayed as EOF only after the buffer is written;
//! - nothing blocks the loop: the write end is non-blocking (it is the relay's own open file),
//!   and the source is read for at most what `FIONREAD` says is there, so its flags (shared
//!   with the host and its other children) stay as they are;
//! - a reader that is gone (EPIPE: the provider closed its stdin) ends the relay, not the
//!   supervisor (SIGPIPE is ignored in the supervisor, `sys::signal`); the host's bytes are then
//!   left unread in its pipe;
//! - [`StdinRelay::finish`] stops reading and closes the pipe once what was read is written:
//!   the provider reads everything it was sent, then EOF. [`StdinRelay::abandon`] closes it at
//!   once (the provider is gone, or the stop's SIGTERM went out).

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

use crate::sys::process::{self, POLL_IN, POLL_OUT, PollFd};
use crate::sys::signal::{pipe_cloexec, set_nonblocking};

/// The most the relay holds between its two ends: 64 KiB, a pipe's default capacity on Linux.
/// The host's writes block (backpressure) once the provider's pipe and this buffer are full.
pub const RELAY_BUFFER: usize = 64 * 1024;

/// What a call of the relay saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// Nothing worth telling.
    Nothing,
    /// The supervisor's stdin reached end of file (the host closed it).
    SourceEof,
}

/// The relay's state; see the module docs.
#[derive(Debug)]
pub struct StdinRelay {
    /// The pipe's write end; `None` once closed.
    to: Option<std::fs::File>,
    /// Read from stdin, not yet written.
    buf: Vec<u8>,
    /// Still reading the supervisor's stdin.
    reading: bool,
}

/// Where the relay wants to be polled, as slots of the loop's `poll` array.
#[derive(Clone, Copy, Debug, Default)]
pub struct Slots {
    source: Option<usize>,
    sink: Option<usize>,
}

impl StdinRelay {
    /// Makes the pipe: returns the relay and the read end, the provider's stdin (close-on-exec
    /// here; the spawn puts it on fd 0). Errors: `pipe2`/`fcntl` failures.
    pub fn new() -> io::Result<(StdinRelay, OwnedFd)> {
        let (r, w) = pipe_cloexec()?;
        set_nonblocking(w.as_raw_fd())?;
        let reading = process::stdin_fd().is_some();
        Ok((StdinRelay { to: Some(std::fs::File::from(w)), buf: Vec::new(), reading }, r))
    }

    /// The write end, while open: an fd only the process running the loop may hold.
    pub fn write_fd(&self) -> Option<RawFd> {
        self.to.as_ref().map(|f| f.as_raw_fd())
    }

    /// True once the pipe is closed.
    pub fn closed(&self) -> bool {
        self.to.is_none()
    }

    /// Adds the relay's fds to `fds`: stdin while there is room for its bytes, the pipe while
    /// bytes wait (and always for its error: a write end whose reader is gone reports `POLLERR`).
    pub fn poll_fds(&self, fds: &mut Vec<PollFd>) -> Slots {
        let Some(to) = &self.to else { return Slots::default() };
        let source = (self.reading && self.buf.len() < RELAY_BUFFER).then(|| {
            fds.push(PollFd::new(0, POLL_IN));
            fds.len() - 1
        });
        fds.push(PollFd::new(to.as_raw_fd(), if self.buf.is_empty() { 0 } else { POLL_OUT }));
        Slots { source, sink: Some(fds.len() - 1) }
    }

    /// After `poll`: reads what stdin has, writes what the pipe takes. Returns
    /// [`Seen::SourceEof`] the one time stdin is found at end of file (or unreadable).
    pub fn service(&mut self, fds: &[PollFd], slots: Slots) -> Seen {
        let mut seen = Seen::Nothing;
        if slots.source.is_some_and(|s| fds[s].ready()) {
            seen = self.read_source();
        }
        if let Some(s) = slots.sink
            && fds[s].ready()
        {
            self.flush();
            if fds[s].revents & POLL_OUT == 0 && self.to.is_some() && fds[s].hung_up() {
                // POLLERR with nothing to write: the reader is gone.
                self.abandon();
            }
        }
        seen
    }

    fn read_source(&mut self) -> Seen {
        let Some(stdin) = process::stdin_fd() else {
            self.finish();
            return Seen::SourceEof;
        };
        let room = RELAY_BUFFER - self.buf.len();
        // Never more than is there: a read of a pipe, socket or terminal then cannot block.
        let want = match process::readable_bytes(stdin.as_raw_fd()) {
            Some(0) | None => room,
            Some(n) => n.min(room),
        };
        let at = self.buf.len();
        self.buf.resize(at + want, 0);
        match process::read_fd(stdin.as_fd(), &mut self.buf[at..]) {
            Ok(n) => {
                self.buf.truncate(at + n);
                if n == 0 {
                    self.finish();
                    return Seen::SourceEof;
                }
                self.flush();
                Seen::Nothing
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.buf.truncate(at);
                Seen::Nothing
            }
            Err(_) => {
                self.buf.truncate(at);
                self.finish();
                Seen::SourceEof
            }
        }
    }

    /// Writes what waits, as much as the pipe takes now; closes the pipe when it is all written
    /// and nothing more is read.
    fn flush(&mut self) {
        use std::io::Write as _;
        let Some(to) = self.to.as_mut() else { return };
        while !self.buf.is_empty() {
            match to.write(&self.buf) {
                Ok(n) => {
                    self.buf.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    // EPIPE: the provider and everything that shared its stdin closed it.
                    self.abandon();
                    return;
                }
            }
        }
        if !self.reading {
            self.to = None;
        }
    }

    /// Reads no more; the pipe closes once what was read is written (the provider reads it all,
    /// then EOF). For the host's EOF, the owner's death (`--on-owner-death close-stdin`) and the
    /// start of a stop.
    pub fn finish(&mut self) {
        self.reading = false;
        self.flush();
    }

    /// Closes the pipe now, dropping what was not written: the provider is gone, or the stop's
    /// SIGTERM went out and a reader that did not drain by then never will.
    pub fn abandon(&mut self) {
        self.reading = false;
        self.buf = Vec::new();
        self.to = None;
    }
}
