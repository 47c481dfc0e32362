//! CPU and memory of a managed process's whole tree, read from `/proc` (Linux), for `top`.
//!
//! CPU % is a rate, so it needs two looks: a [`Sampler`] remembers each process's CPU time
//! (`utime + stime`, `/proc/<pid>/stat` fields 14 and 15, clock ticks) from the previous round
//! and divides the growth by the wall time between rounds. 100 % is one core busy. A process is
//! known by pid *and* start time, so a reused pid never yields a negative or borrowed delta; a
//! process first seen in this round counts from the next one. Memory is the resident set
//! (field 24, pages) summed over the tree: shared pages count once per process, as `top`
//! shows them.
//!
//! Entries in the cgroup tier take their CPU time from the cgroup ([`Sampler::cgroup_percent`]
//! over `cpu.stat`, which also counts children that already exited) and their memory from
//! `memory.current` when that controller is enabled; the rest is summed over the tree here.

use crate::identity::Probe;
use std::collections::HashMap;
use std::time::Instant;

use crate::entry::Entry;
use crate::sys::procfs::{self, Stat};
use crate::sys::{Pgid, Pid, sysconf};

/// What one tree costs now.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    /// Percent of one core over the time since the previous round (0 on the first round).
    pub cpu_percent: f64,
    /// Resident set, bytes, summed over the tree's processes.
    pub memory_bytes: u64,
    /// Live processes counted.
    pub processes: usize,
}

/// The figures of one process from `/proc/<pid>/stat`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcTimes {
    /// `utime + stime`, clock ticks.
    pub cpu_ticks: u64,
    /// Field 22, clock ticks since boot: with the pid, the process's identity.
    pub start_time: u64,
    /// Field 24, pages.
    pub rss_pages: u64,
    /// A zombie or dead process (nothing to count).
    pub zombie: bool,
    /// Field 20: threads (each may have forked children of its own).
    pub threads: u64,
}

/// Parses the fields [`ProcTimes`] needs from one `/proc/<pid>/stat` line (fields counted from
/// the last `)`, as the command name may hold spaces and parentheses).
pub fn parse_times(line: &str) -> Option<ProcTimes> {
    let rest: Vec<&str> = line.get(line.rfind(')')? + 1..)?.split_whitespace().collect();
    let field = |n: usize| rest.get(n - 3).copied();
    let num = |n: usize| field(n).and_then(|s| s.parse::<u64>().ok());
    let state = field(3)?.chars().next()?;
    Some(ProcTimes {
        cpu_ticks: num(14)? + num(15)?,
        start_time: num(22)?,
        rss_pages: num(24).unwrap_or(0),
        zombie: state == 'Z' || state == 'X',
        threads: num(20).unwrap_or(1),
    })
}

/// Reads one process's times; `None` if it is gone (or outside Linux).
pub fn times(pid: Pid) -> Option<ProcTimes> {
    read_proc(pid).map(|p| p.times)
}

/// One process as one read of `/proc/<pid>/stat` gives it: who it is (group, session, name) and
/// what it costs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proc {
    pub stat: Stat,
    pub times: ProcTimes,
}

/// Reads a small `/proc` file whole, without the size and position lookups (`statx`, `lseek`)
/// that `read_to_string` makes first (`/proc` files report size 0 anyway): one open, one read
/// when the file fits the 4 KiB buffer (a seq_file hands out whole records, so a short read is
/// the end), one close.
fn read_small(path: &str) -> Option<String> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).ok()?;
    read_whole(|buf, _| f.read(buf))
}

/// The read loop of [`read_small`] and [`ProcFiles`]: `read(buf, offset)` until end of file, one
/// 4 KiB read for the usual small file. `None` on an error (the process is gone) or bad UTF-8.
fn read_whole(mut read: impl FnMut(&mut [u8], u64) -> std::io::Result<usize>) -> Option<String> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match read(&mut buf, out.len() as u64) {
            Ok(0) => break,
            Ok(n) if n < buf.len() && out.is_empty() => return String::from_utf8(buf[..n].to_vec()).ok(),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return None,
        }
    }
    String::from_utf8(out).ok()
}

/// Reads `/proc/<pid>/stat` once; `None` if the process is gone (or outside Linux).
pub fn read_proc(pid: Pid) -> Option<Proc> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let line = read_small(&format!("/proc/{pid}/stat"))?;
    Some(Proc { stat: procfs::parse_stat(&line)?, times: parse_times(&line)? })
}

/// `/proc` files held open between rounds and re-read with `pread` at offset 0, so a `top` that
/// looks at 100 trees every second does not open and close hundreds of files each time (the
/// path walk and `pid_revalidate` of each open were most of its kernel time). A held
/// `/proc/<pid>/stat` fails with ESRCH once its process is gone, and is then dropped; a
/// `children` file (which reads empty for a dead task) is keyed by pid *and* start time, so a
/// reused pid never reads a dead process's list. Files not read in a round are closed by
/// [`ProcFiles::sweep`]. At most [`ProcFiles::MAX_OPEN`] are held; past that, reads open and
/// close as usual.
#[derive(Debug, Default)]
pub struct ProcFiles {
    open: HashMap<String, std::fs::File>,
    used: std::collections::HashSet<String>,
}

impl ProcFiles {
    /// Most files held open: 512 (well under the usual 1024 soft limit on descriptors).
    pub const MAX_OPEN: usize = 512;

    fn pread(f: &std::fs::File) -> Option<String> {
        use std::os::unix::fs::FileExt;
        read_whole(|buf, offset| f.read_at(buf, offset))
    }

    /// Reads `path` (a held file when there is one); `key` is what it is held under.
    fn read(&mut self, path: &str, key: String) -> Option<String> {
        if let Some(f) = self.open.get(&key) {
            if let Some(s) = Self::pread(f) {
                self.used.insert(key);
                return Some(s);
            }
            self.open.remove(&key);
        }
        let f = std::fs::File::open(path).ok()?;
        let s = Self::pread(&f)?;
        if self.open.len() < Self::MAX_OPEN {
            self.open.insert(key.clone(), f);
            self.used.insert(key);
        }
        Some(s)
    }

    /// One process's `stat`, through a held file.
    pub fn read_proc(&mut self, pid: Pid) -> Option<Proc> {
        if !cfg!(target_os = "linux") {
            return None;
        }
        let path = format!("/proc/{pid}/stat");
        let line = self.read(&path, path.clone())?;
        Some(Proc { stat: procfs::parse_stat(&line)?, times: parse_times(&line)? })
    }

    fn children_of(&mut self, p: &Proc) -> Vec<Pid> {
        if p.times.threads > 1 || !cfg!(target_os = "linux") {
            return procfs::children(p.stat.pid);
        }
        let pid = p.stat.pid;
        let path = format!("/proc/{pid}/task/{pid}/children");
        let key = format!("{path}@{}", p.times.start_time);
        self.read(&path, key)
            .map(|t| t.split_whitespace().filter_map(|s| s.parse().ok()).filter_map(Pid::new).collect())
            .unwrap_or_default()
    }

    /// [`descendants_of`] through held files.
    pub fn descendants_of(&mut self, root: &Proc) -> Vec<Proc> {
        let mut out = Vec::new();
        let mut queue = self.children_of(root);
        while let Some(pid) = queue.pop() {
            if let Some(p) = self.read_proc(pid) {
                let kids = self.children_of(&p);
                queue.extend(kids);
                if !p.times.zombie {
                    out.push(p);
                }
            }
        }
        out
    }

    /// Closes the files that were not read since the last sweep.
    pub fn sweep(&mut self) {
        let used = std::mem::take(&mut self.used);
        self.open.retain(|k, _| used.contains(k));
    }

    /// How many files are held (for tests).
    pub fn held(&self) -> usize {
        self.open.len()
    }
}

/// The children of a process already read: a single-threaded one lists them all in
/// `/proc/<pid>/task/<pid>/children` (one read); otherwise every thread's list is read
/// ([`procfs::children`]).
fn children_of(p: &Proc) -> Vec<Pid> {
    if p.times.threads > 1 || !cfg!(target_os = "linux") {
        return procfs::children(p.stat.pid);
    }
    let pid = p.stat.pid;
    read_small(&format!("/proc/{pid}/task/{pid}/children"))
        .map(|t| t.split_whitespace().filter_map(|s| s.parse().ok()).filter_map(Pid::new).collect())
        .unwrap_or_default()
}

/// Every live (non-zombie) descendant of `root`, one `stat` read each.
pub fn descendants(root: Pid) -> Vec<Proc> {
    read_proc(root).map(|r| descendants_of(&r)).unwrap_or_default()
}

/// Every live (non-zombie) descendant of a process already read (not itself).
pub fn descendants_of(root: &Proc) -> Vec<Proc> {
    let mut out = Vec::new();
    let mut queue = children_of(root);
    while let Some(pid) = queue.pop() {
        if let Some(p) = read_proc(pid) {
            queue.extend(children_of(&p));
            if !p.times.zombie {
                out.push(p);
            }
        }
    }
    out
}

/// Remembers CPU times between rounds. Call [`Sampler::round`] once per refresh, then
/// [`Sampler::tree`] for each tree.
#[derive(Debug)]
pub struct Sampler {
    /// (pid, start time) → CPU ticks, as of the previous round.
    last: HashMap<(i32, u64), u64>,
    /// Filled during the current round.
    next: HashMap<(i32, u64), u64>,
    last_at: Option<Instant>,
    now: Instant,
    hz: f64,
    page: u64,
    /// Entry id → cgroup CPU time (ms), as of the previous round; and this round's.
    last_cgroup: HashMap<String, u64>,
    next_cgroup: HashMap<String, u64>,
}

impl Default for Sampler {
    fn default() -> Self {
        Sampler::new()
    }
}

impl Sampler {
    /// A sampler with no baseline (the first round shows 0 % CPU).
    pub fn new() -> Sampler {
        Sampler {
            last: HashMap::new(),
            next: HashMap::new(),
            last_at: None,
            now: Instant::now(),
            hz: sysconf::clock_ticks_per_second() as f64,
            page: sysconf::page_size(),
            last_cgroup: HashMap::new(),
            next_cgroup: HashMap::new(),
        }
    }

    /// CPU % of a cgroup whose total CPU time is `cpu_ms` now (`cpu.stat` `usage_usec` / 1000),
    /// over the time since the previous round; `key` names the cgroup (the entry id). 0 on the
    /// first round it is seen.
    pub fn cgroup_percent(&mut self, key: &str, cpu_ms: u64) -> f64 {
        let elapsed = self.last_at.map(|t| self.now.duration_since(t).as_secs_f64()).unwrap_or(0.0);
        self.next_cgroup.insert(key.to_string(), cpu_ms);
        match self.last_cgroup.get(key) {
            Some(before) if elapsed > 0.0 => cpu_ms.saturating_sub(*before) as f64 / 1000.0 / elapsed * 100.0,
            _ => 0.0,
        }
    }

    /// Starts a round: what the previous round saw becomes the baseline.
    pub fn round(&mut self) {
        if !self.next.is_empty() || !self.next_cgroup.is_empty() || self.last_at.is_some() {
            self.last = std::mem::take(&mut self.next);
            self.last_cgroup = std::mem::take(&mut self.next_cgroup);
            self.last_at = Some(self.now);
        }
        self.now = Instant::now();
    }

    /// The usage of the processes `pids` (one tree) in this round.
    pub fn tree(&mut self, pids: &[Pid]) -> Usage {
        let procs: Vec<Proc> = pids.iter().filter_map(|p| read_proc(*p)).collect();
        self.usage(&procs)
    }

    /// The usage of processes already read (one tree) in this round.
    pub fn usage(&mut self, procs: &[Proc]) -> Usage {
        let elapsed = self.last_at.map(|t| self.now.duration_since(t).as_secs_f64()).unwrap_or(0.0);
        let mut u = Usage::default();
        let mut ticks = 0u64;
        for p in procs {
            let t = p.times;
            if t.zombie {
                continue;
            }
            u.processes += 1;
            u.memory_bytes += t.rss_pages * self.page;
            let key = (p.stat.pid.as_raw(), t.start_time);
            if let Some(before) = self.last.get(&key) {
                ticks += t.cpu_ticks.saturating_sub(*before);
            }
            self.next.insert(key, t.cpu_ticks);
        }
        if elapsed > 0.0 {
            u.cpu_percent = ticks as f64 / self.hz / elapsed * 100.0;
        }
        u
    }
}

/// The live (non-zombie) processes of a running or orphaned entry, from `/proc`: while its
/// supervisor lives, every descendant of it (it is a subreaper, so processes that changed group
/// or session are still there); after that, the recorded tree (provider by identity,
/// descendants, tagged processes). Empty for finished entries and other boots.
pub fn tree_members(e: &Entry) -> Vec<Proc> {
    if e.is_finished() || !e.this_boot() {
        return Vec::new();
    }
    tree_members_known(e, e.supervisor_alive())
}

/// [`tree_members`] for a caller that has already checked the boot and whether the supervisor
/// is alive (one look for many uses).
pub fn tree_members_known(e: &Entry, supervisor_alive: bool) -> Vec<Proc> {
    if supervisor_alive {
        return e.tree_root().and_then(Pid::new).map(descendants).unwrap_or_default();
    }
    let live = crate::inspect::recorded_tree(e).map(|t| t.live()).unwrap_or_default();
    live.iter().filter_map(|m| read_proc(m.pid)).filter(|p| !p.times.zombie).collect()
}

/// The provider's process group and session, against which [`tree_members`] that left are
/// marked: the recorded group, and the session of the provider (or, once it is gone, of its
/// supervisor, which the provider shares).
pub fn provider_group_and_session(e: &Entry) -> (Option<Pgid>, Option<i32>) {
    let pgid = e.pgid.or(e.pid()).and_then(Pgid::new);
    let session = [e.pid(), e.supervisor.map(|s| s.pid)]
        .into_iter()
        .flatten()
        .filter_map(Pid::new)
        .filter_map(|p| procfs::stat(p).ok())
        .find(|s| !s.is_zombie())
        .map(|s| s.session);
    (pgid, session)
}

#[cfg(test)]
mod tests {
    use crate::sys::{Pid, procfs};

    use super::{Proc, ProcFiles, ProcTimes, Sampler, parse_times};

    #[test]
    fn parses_times_from_a_stat_line() {
        let line = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 70 30 0 0 20 0 1 0 987654 1000 25 10";
        let t = parse_times(line).unwrap();
        assert_eq!(t, ProcTimes { cpu_ticks: 100, start_time: 987654, rss_pages: 25, zombie: false, threads: 1 });
    }

    #[test]
    fn held_files_follow_process_identity() {
        let mut files = ProcFiles::default();
        let mut parent = std::process::Command::new("sh").args(["-c", "sleep 100 & wait"]).spawn().unwrap();
        let pid = Pid::new(parent.id() as i32).unwrap();
        let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let kids = loop {
            let root = files.read_proc(pid).unwrap();
            let kids = files.descendants_of(&root);
            if !kids.is_empty() || std::time::Instant::now() > end {
                break kids;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        assert_eq!(kids.len(), 1, "{kids:?}");
        assert!(files.held() >= 3, "stat and children files are held: {}", files.held());
        // Read again through the held files: the same process (its rss and CPU time may have
        // moved meanwhile: the child can be caught in its exec, with no pages yet).
        let root = files.read_proc(pid).unwrap();
        let ids = |ps: &[Proc]| ps.iter().map(|p| (p.stat.pid, p.stat.start_time)).collect::<Vec<_>>();
        assert_eq!(ids(&files.descendants_of(&root)), ids(&kids));
        let child = kids[0].stat.pid;
        let _ = crate::sys::process::kill(child, crate::sys::Signal::KILL);
        let _ = parent.wait();
        // Gone: the held stat file now fails, and is dropped.
        assert!(files.read_proc(pid).is_none());
        files.sweep();
        files.sweep();
        assert_eq!(files.held(), 0);
    }

    #[test]
    fn a_busy_process_shows_cpu_and_memory() {
        /// Kills and reaps the spinning shell however the test ends (a failed assert included).
        struct Spinner(std::process::Child);
        impl Drop for Spinner {
            fn drop(&mut self) {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
        let child = Spinner(std::process::Command::new("sh").args(["-c", "while :; do :; done"]).spawn().unwrap());
        let pid = Pid::new(child.0.id() as i32).unwrap();
        // Past the exec: the shell's own figures, not the forking test's.
        let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while procfs::cmdline(pid) != "sh -c while :; do :; done" && std::time::Instant::now() < end {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // Right after the exec the new image may have no resident page yet (rss 0 in a loaded
        // CI run): look again on a fresh sampler until it has.
        let (mut s, first) = loop {
            let mut s = Sampler::new();
            s.round();
            let first = s.tree(&[pid]);
            if first.memory_bytes > 0 || std::time::Instant::now() >= end {
                break (s, first);
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        assert_eq!(first.cpu_percent, 0.0, "no baseline on the first round");
        assert!(first.memory_bytes > 0);
        std::thread::sleep(std::time::Duration::from_millis(500));
        s.round();
        let second = s.tree(&[pid]);
        drop(child);
        // A spinning shell on a shared machine: well above zero, at most a bit over one core.
        assert!(second.cpu_percent > 2.0 && second.cpu_percent < 250.0, "{second:?}");
        assert_eq!(second.processes, 1);
    }
}
