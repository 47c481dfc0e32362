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

/// The output relay (`run --leftovers keep`, which the agent hooks use): the provider's stdout
/// and stderr are pipes the supervisor holds and copies to its own fd 1 and 2, so that what
/// the command leaves running (`nohup server &`) never holds the host's pipes. The host's call
/// returns when the command ends (opencode #20902, codex#7846 are the hangs and losses of a
/// leftover that kept them), and what a kept leftover writes later goes to its entry's log
/// (`manager::hand_off` passes the read ends on, [`OutputRelay::into_kept`]).
///
/// - A terminal is not relayed: the command keeps it (and its size, colours, job control).
/// - Stdout and stderr that are the same file or pipe (a host's one task file, `2>&1`) share
///   one pipe, so their order is kept byte for byte.
/// - The host's fds keep their flags (they are shared): a write to a pipe or socket is at most
///   [`PIPE_BUF`] bytes per `POLLOUT`, which never blocks; a file's write does not block.
/// - A host that stopped reading (EPIPE) gets nothing more; the tree's output is then read
///   and dropped, so the tree never blocks on a full pipe because of it.
/// - Only this mode pays for the copy: a plain `run` gives the command the host's fds.
#[derive(Debug)]
pub struct OutputRelay {
    pumps: Vec<Pump>,
}

/// `PIPE_BUF` on Linux: 4096 bytes, the largest write to a pipe that `POLLOUT` guarantees room
/// for (pipe(7)).
pub const PIPE_BUF: usize = 4096;

/// The most [`OutputRelay::drain_now`] copies per stream before it leaves the rest in the
/// pipe: 1 MiB. A leftover that writes without pause must not keep the hand-off waiting.
pub const DRAIN_MAX: usize = 1024 * 1024;

#[derive(Debug)]
struct Pump {
    stream: crate::logs::Stream,
    /// The supervisor's fd the bytes go to: 1 or 2.
    to: RawFd,
    /// Writes to `to` are cut to [`PIPE_BUF`] (a pipe or socket); a file takes any size.
    small_writes: bool,
    /// The pipe's read end (non-blocking: the relay's own open file); `None` after EOF.
    from: Option<std::fs::File>,
    buf: Vec<u8>,
    /// False once the host's end failed (EPIPE): bytes are read and dropped.
    sink_ok: bool,
}

/// The provider's ends of the output relay's pipes; `None`: that fd is inherited.
#[derive(Debug)]
pub struct WriteEnds {
    pub stdout: Option<OwnedFd>,
    pub stderr: Option<OwnedFd>,
}

/// Where each pump of the output relay wants to be polled: (read slot, write slot).
#[derive(Clone, Debug, Default)]
pub struct OutputSlots(Vec<(Option<usize>, Option<usize>)>);

impl OutputRelay {
    /// Makes the pipes for the supervisor's fd 1 and 2 that are not terminals (or closed).
    /// Returns the relay and the write ends for the provider's stdout and stderr (`None`:
    /// inherited), or `None` when nothing is relayed. Errors: `pipe2`/`fcntl` failures.
    pub fn new() -> io::Result<Option<(OutputRelay, WriteEnds)>> {
        use crate::logs::Stream;
        let relayable = |fd: RawFd| !matches!(process::fd_kind(fd), process::FdKind::Tty | process::FdKind::Closed);
        let small = |fd: RawFd| matches!(process::fd_kind(fd), process::FdKind::Fifo | process::FdKind::Socket);
        let pump = |stream, to| -> io::Result<(Pump, OwnedFd)> {
            let (r, w) = pipe_cloexec()?;
            set_nonblocking(r.as_raw_fd())?;
            let from = Some(std::fs::File::from(r));
            Ok((Pump { stream, to, small_writes: small(to), from, buf: Vec::new(), sink_ok: true }, w))
        };
        let (out, err) = (relayable(1), relayable(2));
        if out && err && process::fd_identity(1) == process::fd_identity(2) {
            let (p, w) = pump(Stream::Out, 1)?;
            let w2 = w.try_clone()?;
            return Ok(Some((OutputRelay { pumps: vec![p] }, WriteEnds { stdout: Some(w), stderr: Some(w2) })));
        }
        let mut pumps = Vec::new();
        let mut ends = [None, None];
        for (i, (fd, stream, yes)) in [(1, Stream::Out, out), (2, Stream::Err, err)].into_iter().enumerate() {
            if yes {
                let (p, w) = pump(stream, fd)?;
                pumps.push(p);
                ends[i] = Some(w);
            }
        }
        if pumps.is_empty() {
            return Ok(None);
        }
        let [stdout, stderr] = ends;
        Ok(Some((OutputRelay { pumps }, WriteEnds { stdout, stderr })))
    }

    /// The read ends, while open: fds only the process running the loop may hold.
    pub fn read_fds(&self) -> impl Iterator<Item = RawFd> + '_ {
        self.pumps.iter().filter_map(|p| p.from.as_ref().map(|f| f.as_raw_fd()))
    }

    /// Adds the relay's fds to `fds`: each read end while there is room for its bytes, the
    /// host's fd while bytes wait for it.
    pub fn poll_fds(&self, fds: &mut Vec<PollFd>) -> OutputSlots {
        let mut slots = Vec::with_capacity(self.pumps.len());
        for p in &self.pumps {
            let read = p.from.as_ref().filter(|_| p.buf.len() < RELAY_BUFFER).map(|f| {
                fds.push(PollFd::new(f.as_raw_fd(), POLL_IN));
                fds.len() - 1
            });
            let write = (!p.buf.is_empty()).then(|| {
                fds.push(PollFd::new(p.to, POLL_OUT));
                fds.len() - 1
            });
            slots.push((read, write));
        }
        OutputSlots(slots)
    }

    /// After `poll`: reads what the tree wrote, writes what the host's fds take.
    pub fn service(&mut self, fds: &[PollFd], slots: &OutputSlots) {
        for (p, (read, write)) in self.pumps.iter_mut().zip(&slots.0) {
            if read.is_some_and(|s| fds[s].ready()) {
                p.read_some();
            }
            if write.is_some_and(|s| fds[s].ready()) {
                p.write_some();
            }
        }
    }

    /// Copies what the pipes hold now to the host, blocking on its writes (at most
    /// [`DRAIN_MAX`] per stream): before the supervisor exits, and before a hand-off, so that
    /// everything the command itself wrote reaches the host first.
    pub fn drain_now(&mut self) {
        for p in &mut self.pumps {
            let mut copied = 0;
            loop {
                p.flush_blocking();
                if p.from.is_none() || copied >= DRAIN_MAX {
                    break;
                }
                let before = p.buf.len();
                if !p.read_some() || p.buf.len() == before {
                    p.flush_blocking();
                    break;
                }
                copied += p.buf.len() - before;
            }
        }
    }

    /// The read ends still open, with their stream (one `Out` for a shared pipe): what a
    /// supervisor of kept leftovers reads into the entry's log. Call after [`Self::drain_now`].
    pub fn into_kept(self) -> Vec<(crate::logs::Stream, OwnedFd)> {
        self.pumps.into_iter().filter_map(|p| p.from.map(|f| (p.stream, OwnedFd::from(f)))).collect()
    }
}

impl Pump {
    /// One read of what the pipe holds, into the buffer's room. False at EOF or error (the
    /// read end is then closed).
    fn read_some(&mut self) -> bool {
        let Some(from) = &self.from else { return false };
        let room = RELAY_BUFFER.saturating_sub(self.buf.len());
        if room == 0 {
            return true;
        }
        let at = self.buf.len();
        self.buf.resize(at + room, 0);
        let got = process::read_fd(from.as_fd(), &mut self.buf[at..]);
        match got {
            Ok(n) => {
                self.buf.truncate(at + n);
                if !self.sink_ok {
                    self.buf.clear();
                }
                if n == 0 {
                    self.from = None;
                    return false;
                }
                true
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.buf.truncate(at);
                true
            }
            Err(_) => {
                self.buf.truncate(at);
                self.from = None;
                false
            }
        }
    }

    /// One write to the host's fd that cannot block: at most [`PIPE_BUF`] to a pipe or socket.
    fn write_some(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let n = if self.small_writes { self.buf.len().min(PIPE_BUF) } else { self.buf.len() };
        match process::write_raw(self.to, &self.buf[..n]) {
            Ok(w) => {
                self.buf.drain(..w);
            }
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {}
            Err(_) => self.give_up(),
        }
    }

    /// Writes all that waits, blocking as the host's fd does.
    fn flush_blocking(&mut self) {
        while !self.buf.is_empty() && self.sink_ok {
            match process::write_raw(self.to, &self.buf) {
                Ok(0) => self.give_up(),
                Ok(w) => {
                    self.buf.drain(..w);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // The host's fd is non-blocking (its flags are the host's): wait for room.
                    let mut fds = [PollFd::new(self.to, POLL_OUT)];
                    if process::poll(&mut fds, Some(std::time::Duration::from_secs(1))).unwrap_or(0) == 0 {
                        self.give_up();
                    }
                }
                Err(_) => self.give_up(),
            }
        }
    }

    /// The host's end is gone: nothing more is written to it.
    fn give_up(&mut self) {
        self.sink_ok = false;
        self.buf.clear();
    }
}
