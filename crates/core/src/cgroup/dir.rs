//! A tree's cgroup directory, opened by inode: its members, `populated`, the kill (freeze,
//! `cgroup.kill`, then kill(2) of whatever stays), its removal, and its usage figures.

use crate::identity::Probe;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::entry::Entry;
use crate::sys::cgroup::{self as raw, JoinFds};
use crate::sys::process::{self, PidFd};
use crate::sys::{Pid, Signal, procfs};

use super::{Cgroup, RMDIR_RETRIES_MS};

/// Usage figures of a tree's cgroup. Absent controllers give `None` (`null`), never a number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// CPU time of every task the cgroup ever had, in milliseconds (`cpu.stat` `usage_usec`).
    pub cpu_ms: u64,
    /// `memory.current` in bytes; `None` without the memory controller.
    pub memory_bytes: Option<u64>,
    /// `pids.current`, the tasks (threads included) alive now; `None` without the pids
    /// controller.
    pub tasks: Option<u64>,
}

impl Cgroup {
    /// Opens a cgroup directory; with `inode`, only if it still is that directory.
    ///
    /// Errors: the reason, as one phrase (missing, not a directory, inode changed).
    pub fn open(path: &Path, inode: Option<u64>) -> Result<Cgroup, String> {
        let dir = File::open(path).map_err(|e| format!("unable to open cgroup {}: {e}", path.display()))?;
        let meta = dir.metadata().map_err(|e| format!("unable to stat cgroup {}: {e}", path.display()))?;
        if !meta.is_dir() {
            return Err(format!("{} is not a directory", path.display()));
        }
        if inode.is_some_and(|i| i != meta.ino()) {
            return Err(format!("{} now names another cgroup (inode changed)", path.display()));
        }
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let events_path = format!("/proc/self/fd/{}/cgroup.events", dir.as_raw_fd());
        let events =
            File::open(&events_path).map_err(|e| format!("unable to open {}/cgroup.events: {e}", path.display()))?;
        let cg = Cgroup { path: path.to_path_buf(), name, inode: meta.ino(), dir, events, join: None };
        // Reading once arms POLLPRI: a freshly opened cgroup.events reports a change at once.
        let _ = cg.read_events(&mut [0; 128]);
        Ok(cg)
    }

    /// Opens the cgroup an entry recorded, only if the path still names the same directory
    /// (inode). `None` for entries outside the cgroup tier, or when the cgroup is gone (it was
    /// removed, so nothing of it lives) or replaced.
    pub fn of_entry(e: &Entry) -> Option<Cgroup> {
        if e.containment != Some(crate::status::Tier::Cgroup) || !e.this_boot() {
            return None;
        }
        let path = e.cgroup.as_deref()?;
        Cgroup::open(Path::new(path), Some(e.cgroup_inode?)).ok()
    }

    /// Marks the cgroup as having a supervisor in charge: a shared `flock` on its directory,
    /// held by the open directory (the supervisor's, and its keeper's copy of the same fd) and
    /// released by the kernel when the last holder dies. So [`sweep_leftovers`] can tell a tree
    /// whose supervisor was SIGKILLed but whose keeper still runs the stop (and its grace) from
    /// one that lost both. (A supervisor that adopted the tree after its keeper's SIGKILL is the
    /// live process the cgroup's name identifies: the sweep leaves it alone without a hold.)
    /// Best effort: a lock that cannot be taken leaves the cgroup as unmarked as before.
    pub fn hold(&self) {
        let _ = self.dir.lock_shared();
    }

    /// True if a supervisor or keeper still holds the cgroup ([`Cgroup::hold`]): an exclusive
    /// `flock` cannot be had right now.
    pub fn held(&self) -> bool {
        matches!(self.dir.try_lock(), Err(std::fs::TryLockError::WouldBlock))
    }

    /// The cgroup's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory's inode.
    pub fn inode(&self) -> u64 {
        self.inode
    }

    /// The open `cgroup.events`: poll it for `POLLPRI`; after a wake, [`Cgroup::populated`]
    /// reads it (which re-arms it).
    pub fn events_fd(&self) -> RawFd {
        self.events.as_raw_fd()
    }

    /// For the spawn: the fds the child needs to join, if this process created the cgroup.
    pub fn join_fds(&self) -> Option<JoinFds> {
        self.join.as_ref().map(|j| JoinFds {
            dir: self.dir.as_raw_fd(),
            procs: j.procs.as_raw_fd(),
            report: j.report_w.as_raw_fd(),
            report_read: j.report_r.as_raw_fd(),
        })
    }

    /// `/proc/self/fd/DIR/file`: the file in this very directory, whatever its path now is.
    pub(super) fn at(&self, file: &str) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}/{file}", self.dir.as_raw_fd()))
    }

    /// Reads `cgroup.events` from its start, which re-arms `POLLPRI`: one `pread` into `buf`
    /// (the file is two short lines, `populated N` and `frozen N`; a supervisor reads it after
    /// every wake, so the usual seek, size probe and second read are left out). Returns the
    /// bytes read.
    pub(super) fn read_events<'b>(&self, buf: &'b mut [u8; 128]) -> io::Result<&'b [u8]> {
        let n = self.events.read_at(buf, 0)?;
        Ok(&buf[..n])
    }

    /// True while any process (in this cgroup or one below it) is alive: `populated 1` in
    /// `cgroup.events`. Zombies do not count. A cgroup that can no longer be read is empty.
    pub fn populated(&self) -> bool {
        let mut buf = [0u8; 128];
        self.read_events(&mut buf).is_ok_and(|s| s.split(|b| *b == b'\n').any(|l| l == b"populated 1"))
    }

    /// The processes in this cgroup and every cgroup below it, zombies left out: those in
    /// `cgroup.procs`, and the process of each thread in `cgroup.threads` that is not (the
    /// kernel leaves a leader that called `pthread_exit` out of `cgroup.procs` while its other
    /// threads still run there).
    pub fn members(&self) -> Vec<Pid> {
        let mut out = Vec::new();
        let mut threads = Vec::new();
        let mut dirs = vec![self.at("")];
        let ids = |text: String| -> Vec<Pid> {
            text.split_whitespace().filter_map(|s| s.parse().ok()).filter_map(Pid::new).collect()
        };
        while let Some(d) = dirs.pop() {
            if let Ok(text) = fs::read_to_string(d.join("cgroup.procs")) {
                out.extend(ids(text));
            }
            if let Ok(text) = fs::read_to_string(d.join("cgroup.threads")) {
                threads.extend(ids(text));
            }
            if let Ok(rd) = fs::read_dir(&d) {
                dirs.extend(rd.flatten().filter(|x| x.file_type().is_ok_and(|t| t.is_dir())).map(|x| x.path()));
            }
        }
        // A thread whose tid is a listed process is that process's main thread: the common case
        // costs no read of /proc/TID/status.
        let listed: std::collections::HashSet<Pid> = out.iter().copied().collect();
        let mut extra: Vec<Pid> =
            threads.into_iter().filter(|t| !listed.contains(t)).filter_map(procfs::tgid).collect();
        extra.sort_by_key(|p| p.as_raw());
        extra.dedup();
        out.extend(extra.into_iter().filter(|p| !listed.contains(p)));
        out.retain(|p| procfs::is_alive(*p));
        out
    }

    /// True if `pid`'s cgroup (from `/proc/PID/cgroup`, read through a live thread: a zombie
    /// leader's own reads the root) is this one or below it.
    pub(super) fn contains(&self, pid: Pid) -> bool {
        let Ok(text) = fs::read_to_string(procfs::thread_file(pid, "cgroup")) else { return false };
        let needle = format!("/{}", self.name);
        text.lines()
            .filter_map(|l| l.strip_prefix("0::"))
            .any(|p| p.ends_with(&needle) || p.contains(&format!("{needle}/")))
    }

    /// Sends each of `sigs`, in order, to every member after one read of the membership:
    /// SIGKILL as one write of `1` to `cgroup.kill` (atomic: a fork racing it is killed too);
    /// any other signal to each member through a pidfd, opened once per member after checking
    /// (with the pidfd open) that the process is still in this cgroup. Returns how many
    /// members received the first signal (for SIGKILL: how many there were).
    ///
    /// `cgroup.kill` misses a thread group whose leader called `pthread_exit` (seen on Linux
    /// 6.18: the kernel walks leaders, and that one has left), so SIGKILL also goes to each
    /// member still listed after the write, through a pidfd as above.
    pub fn signal_all(&self, sigs: &[Signal]) -> usize {
        if sigs.contains(&Signal::KILL) {
            // Kill first, count after: the count must not give a fork storm time to grow.
            let _ = self.kill();
        }
        let members = self.members();
        let pidfds: Vec<PidFd> = if sigs.iter().any(|s| *s != Signal::KILL) || !members.is_empty() {
            members.iter().filter_map(|pid| PidFd::open(*pid).ok().filter(|_| self.contains(*pid))).collect()
        } else {
            Vec::new()
        };
        let mut first = 0;
        for (i, sig) in sigs.iter().enumerate() {
            let n = if *sig == Signal::KILL {
                for fd in &pidfds {
                    let _ = fd.send(Signal::KILL);
                }
                members.len()
            } else {
                pidfds.iter().filter(|fd| matches!(fd.send(*sig), Ok(process::Sent::Delivered))).count()
            };
            if i == 0 {
                first = n;
            }
        }
        first
    }

    /// Writes `1` to `cgroup.kill`: SIGKILL to every process in the cgroup and below, at once.
    ///
    /// Errors: the write's OS error (ENOENT once the cgroup is removed).
    pub fn kill(&self) -> io::Result<()> {
        let mut f = OpenOptions::new().write(true).open(self.at("cgroup.kill"))?;
        f.write_all(b"1")
    }

    /// Blocks until `cgroup.events` changes or `timeout` passes (`POLLPRI`).
    pub fn wait_change(&self, timeout: Duration) {
        let mut fds = [process::PollFd::new(self.events_fd(), process::POLL_PRI)];
        let _ = process::poll(&mut fds, Some(timeout));
        let _ = self.read_events(&mut [0; 128]);
    }

    /// If the child's join failed (reported on the pipe before it gave up), the error.
    pub fn join_error(&self) -> Option<io::Error> {
        let fds = self.join_fds()?;
        raw::take_join_error(fds)
    }

    /// Removes the cgroup and every empty cgroup below it (members may have made some; nested
    /// supervisors leave theirs), retrying EBUSY per [`RMDIR_RETRIES_MS`]. Only when nothing is
    /// populated, and only while the path still names this directory.
    ///
    /// Errors: the last `rmdir` error (EBUSY: still busy; the caller records a leftover).
    pub fn remove(&self) -> io::Result<()> {
        if self.populated() {
            return Err(io::Error::from_raw_os_error(crate::sys::errno::EBUSY));
        }
        match fs::metadata(&self.path) {
            Ok(m) if m.ino() == self.inode => {}
            Ok(_) => return Ok(()), // someone removed ours and made another: not ours to touch
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        }
        let mut last = Ok(());
        for delay in std::iter::once(0).chain(RMDIR_RETRIES_MS) {
            if delay > 0 {
                std::thread::sleep(Duration::from_millis(delay));
            }
            last = remove_tree(&self.path);
            match &last {
                Err(e) if e.raw_os_error() == Some(crate::sys::errno::EBUSY) => continue,
                _ => break,
            }
        }
        last
    }

    /// Usage figures now: `cpu.stat` (always there in v2), `memory.current` and `pids.current`
    /// when those controllers are enabled for the cgroup.
    pub fn usage(&self) -> Option<Usage> {
        let cpu = fs::read_to_string(self.at("cpu.stat")).ok()?;
        let usec: u64 = cpu.lines().find_map(|l| l.strip_prefix("usage_usec "))?.trim().parse().ok()?;
        let number = |file: &str| fs::read_to_string(self.at(file)).ok().and_then(|s| s.trim().parse().ok());
        Some(Usage { cpu_ms: usec / 1000, memory_bytes: number("memory.current"), tasks: number("pids.current") })
    }
}

/// `rmdir` of `path` after every directory below it, deepest first. ENOENT counts as done.
/// The plain `rmdir` first: a tree's cgroup seldom has any below it, and the listing costs six
/// system calls on every `run`'s exit path.
pub(super) fn remove_tree(path: &Path) -> io::Result<()> {
    match fs::remove_dir(path) {
        Err(e) if matches!(e.raw_os_error(), Some(crate::sys::errno::EBUSY) | Some(crate::sys::errno::ENOTEMPTY)) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        r => return r,
    }
    if let Ok(rd) = fs::read_dir(path) {
        for d in rd.flatten() {
            if d.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&d.path())?;
            }
        }
    }
    match fs::remove_dir(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

/// How long `reap` waits for a leftover cgroup it killed to empty before it leaves it for the
/// next `reap`: 2000 ms (SIGKILL is delivered at once; this is for a loaded machine).
pub const LEFTOVER_KILL_WAIT: Duration = Duration::from_millis(2000);
