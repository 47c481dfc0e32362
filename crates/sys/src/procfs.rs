//! What the kernel says about processes, read from `/proc` (Linux).
//!
//! A process is alive only if it exists and is not a zombie: a zombie still answers
//! `kill(pid, 0)`, and on a host whose PID 1 never reaps (containers, some sandboxes) it answers
//! forever. A process is its thread group: a leader that called `pthread_exit` shows `Z` while
//! its other threads run (and listen, and fork), so a `Z` leader is alive while any task in
//! `/proc/<pid>/task` is not a zombie; its fds and cgroup are then read through such a thread,
//! the leader's own `/proc/<pid>/fd` being empty and its `/proc/<pid>/cgroup` the root. Field numbers follow proc(5) (`/proc/<pid>/stat`: 3 state, 4 ppid, 5 pgrp, 6 session,
//! 22 starttime in clock ticks since boot).
//!
//! Outside Linux the functions fall back to `kill(pid, 0)` and return no descendants; the group
//! tier (ARCHITECTURE.md) does not need them.

use std::io;

use super::process::{Pgid, Pid};

/// The fields of `/proc/<pid>/stat` that sheepdog uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stat {
    pub pid: Pid,
    /// Field 2 without the parentheses (at most 15 bytes, may contain spaces).
    pub comm: String,
    /// Field 3: `R`, `S`, `D`, `Z`, `T`, ...
    pub state: char,
    pub ppid: i32,
    pub pgrp: i32,
    pub session: i32,
    /// Field 22: start time after boot, in clock ticks. With the boot id and the pid, this is
    /// what tells a process from a later one that reuses its pid.
    pub start_time: u64,
    /// Field 20: threads in the group (a plain zombie has 1, a zombie leader whose workers run
    /// more).
    pub num_threads: u64,
    /// True for a zombie leader (`state` `Z`) while another thread of its group still runs:
    /// the process is then alive. Always false from [`parse_stat`] alone; [`stat`] sets it.
    pub threads_live: bool,
}

impl Stat {
    /// A zombie (`Z`) or dead (`X`) process: exited, only waiting to be reaped. A zombie leader
    /// whose other threads still run is not one ([`Stat::threads_live`]).
    pub fn is_zombie(&self) -> bool {
        (self.state == 'Z' || self.state == 'X') && !self.threads_live
    }
}

/// Parses one `/proc/<pid>/stat` line. The command name may contain spaces and parentheses,
/// so fields are counted from the last `)`.
pub fn parse_stat(line: &str) -> Option<Stat> {
    let open = line.find('(')?;
    let close = line.rfind(')')?;
    let pid = Pid::new(line[..open].trim().parse().ok()?)?;
    let comm = line.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = line.get(close + 1..)?.split_whitespace().collect();
    // rest[0] is field 3.
    let field = |n: usize| rest.get(n - 3).copied();
    Some(Stat {
        pid,
        comm,
        state: field(3)?.chars().next()?,
        ppid: field(4)?.parse().ok()?,
        pgrp: field(5)?.parse().ok()?,
        session: field(6)?.parse().ok()?,
        start_time: field(22)?.parse().ok()?,
        num_threads: field(20)?.parse().ok()?,
        threads_live: false,
    })
}

/// Reads `/proc/<pid>/stat`. ENOENT/ESRCH mean the process is gone.
#[cfg(target_os = "linux")]
pub fn stat(pid: Pid) -> io::Result<Stat> {
    let text = read_small(&format!("/proc/{pid}/stat"))?;
    let mut s = parse_stat(&text)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("unparsable /proc/{pid}/stat")))?;
    // Only a `Z` leader with other threads costs the look at them (a fork storm leaves thousands
    // of plain zombies, each with one).
    if s.state == 'Z' && s.num_threads > 1 {
        s.threads_live = live_thread(pid).is_some();
    }
    Ok(s)
}

/// A small `/proc` file (a `stat` line, a `children` list): open, one `read`, close, where
/// `read_to_string` also asks for the size and reads again for the end. One read is taken as
/// the whole file only when it is a complete line that did not fill the buffer (a `stat` line,
/// which the kernel writes whole at the first read); anything else is read to the end.
#[cfg(target_os = "linux")]
fn read_small(path: &str) -> io::Result<String> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut buf = [0u8; 2048];
    let n = loop {
        match f.read(&mut buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            r => break r?,
        }
    };
    let mut text = String::from_utf8_lossy(&buf[..n]).into_owned();
    if n > 0 && (n == buf.len() || !text.ends_with('\n')) {
        let mut rest = Vec::new();
        f.read_to_end(&mut rest)?;
        text.push_str(&String::from_utf8_lossy(&rest));
    }
    Ok(text)
}

/// A thread of `pid`'s group that is not a zombie: `pid` itself while its state is not `Z`/`X`,
/// else the first such task in `/proc/<pid>/task` (the leader called `pthread_exit`). `None`
/// when the whole group has exited (or `pid` is gone).
#[cfg(target_os = "linux")]
pub fn live_thread(pid: Pid) -> Option<Pid> {
    let state = |path: String| {
        let text = std::fs::read_to_string(path).ok()?;
        parse_stat(&text).map(|s| s.state)
    };
    if !matches!(state(format!("/proc/{pid}/stat"))?, 'Z' | 'X') {
        return Some(pid);
    }
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
        .filter_map(|t| t.file_name().to_str().and_then(|n| n.parse().ok()).and_then(Pid::new))
        .find(|tid| {
            *tid != pid && state(format!("/proc/{pid}/task/{tid}/stat")).is_some_and(|c| !matches!(c, 'Z' | 'X'))
        })
}

#[cfg(not(target_os = "linux"))]
pub fn live_thread(pid: Pid) -> Option<Pid> {
    super::process::exists(pid).then_some(pid)
}

/// `/proc/<pid>/task/<tid>/FILE` of a live thread of `pid` ([`live_thread`]): where a zombie
/// leader's fds (`fd`) and cgroup (`cgroup`) are still seen. `/proc/<pid>/FILE` when none lives.
pub fn thread_file(pid: Pid, file: &str) -> String {
    match live_thread(pid) {
        Some(tid) if tid != pid => format!("/proc/{pid}/task/{tid}/{file}"),
        _ => format!("/proc/{pid}/{file}"),
    }
}

/// The thread group (process) of thread `tid`: `Tgid:` in `/proc/<tid>/status`.
pub fn tgid(tid: Pid) -> Option<Pid> {
    let text = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    text.lines().find_map(|l| l.strip_prefix("Tgid:")).and_then(|v| v.trim().parse().ok()).and_then(Pid::new)
}

#[cfg(not(target_os = "linux"))]
pub fn stat(_pid: Pid) -> io::Result<Stat> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// True if `pid` exists and is not a zombie.
pub fn is_alive(pid: Pid) -> bool {
    if cfg!(target_os = "linux") { matches!(stat(pid), Ok(s) if !s.is_zombie()) } else { super::process::exists(pid) }
}

/// The start time (clock ticks since boot) of a live process, `None` if gone or a zombie.
pub fn start_time(pid: Pid) -> Option<u64> {
    stat(pid).ok().filter(|s| !s.is_zombie()).map(|s| s.start_time)
}

/// The kernel's id for this boot (`/proc/sys/kernel/random/boot_id`); a process recorded under
/// another boot id is gone by definition. Outside Linux: the empty string (untested).
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").map(|s| s.trim().to_string()).unwrap_or_default()
}

/// The owner uid of a process, from the owner of `/proc/<pid>`.
pub fn uid(pid: Pid) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}")).ok().map(|m| m.uid())
}

/// True when this process can see the process table: `/proc` is mounted in its mount namespace
/// (Linux). Without it the walks here find nothing, which must never read as "no process".
#[cfg(target_os = "linux")]
pub fn readable() -> bool {
    std::fs::metadata("/proc/self/stat").is_ok()
}

#[cfg(not(target_os = "linux"))]
pub fn readable() -> bool {
    false
}

/// The direct children of `pid`, from `/proc/<pid>/task/*/children` (every thread's: a child
/// forked by a non-main thread is listed under that thread). Racy by nature; callers re-check
/// after each event.
#[cfg(target_os = "linux")]
pub fn children(pid: Pid) -> Vec<Pid> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        let mut path = task.path();
        path.push("children");
        if let Ok(text) = path.to_str().map_or_else(|| std::fs::read_to_string(&path), read_small) {
            out.extend(text.split_whitespace().filter_map(|s| s.parse().ok()).filter_map(Pid::new));
        }
    }
    out
}

#[cfg(not(target_os = "linux"))]
pub fn children(_pid: Pid) -> Vec<Pid> {
    Vec::new()
}

/// Clock ticks since boot now, from `/proc/uptime` (rounded up): a process whose start time is
/// later began after this was read. `None` where it cannot be read.
pub fn now_ticks() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/uptime").ok()?;
    let secs: f64 = text.split_whitespace().next()?.parse().ok()?;
    Some((secs * super::sysconf::clock_ticks_per_second() as f64).ceil() as u64)
}

/// The clock tick count since boot (`/proc/<pid>/stat`'s start-time unit) at the wall-clock
/// time `wall_ms` (ms since the epoch), less `slack_ms`: a lower bound, so a process started
/// at or after `wall_ms` has a start time no earlier than this (the two clocks agree to within
/// one tick plus any wall-clock step between then and now, which `slack_ms` covers). `None`
/// where `/proc/uptime` cannot be read.
pub fn ticks_at(wall_ms: u64, slack_ms: u64) -> Option<u64> {
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).ok()?.as_millis() as u64;
    let hz = super::sysconf::clock_ticks_per_second();
    let ago_ticks = (now_ms.saturating_sub(wall_ms) + slack_ms) * hz / 1000 + 1;
    Some(now_ticks()?.saturating_sub(ago_ticks))
}

/// Every descendant of `root` (not `root` itself), zombies included.
pub fn descendants(root: Pid) -> Vec<Stat> {
    descendants_except(root, |_| false)
}

/// Every descendant of `root`, zombies included, leaving out each process for which `skip`
/// is true together with everything below it. This process's own zombie children are left out
/// too (one `waitid` each instead of a read of their `stat`: after a fork storm a subreaper has
/// thousands of them waiting to be reaped).
pub fn descendants_except(root: Pid, skip: impl Fn(&Stat) -> bool) -> Vec<Stat> {
    let me = super::process::getpid();
    let mut out = Vec::new();
    let mut queue = vec![root];
    while let Some(pid) = queue.pop() {
        let own = pid == me;
        for child in children(pid) {
            if own && super::process::is_zombie_child(child) {
                continue;
            }
            if let Ok(s) = stat(child)
                && !skip(&s)
            {
                // A zombie has no children (the kernel re-parents them when it exits): not
                // looked into, which after a fork storm saves two reads per zombie.
                if !s.is_zombie() {
                    queue.push(child);
                }
                out.push(s);
            }
        }
    }
    out
}

/// Every process on the system (Linux), for the rare checks that need a full scan: members of a
/// group that are not descendants, and the tagged processes of an entry being reaped.
#[cfg(target_os = "linux")]
pub fn all() -> Vec<Stat> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
        .filter_map(Pid::new)
        .filter_map(|pid| stat(pid).ok())
        .collect()
}

#[cfg(not(target_os = "linux"))]
pub fn all() -> Vec<Stat> {
    Vec::new()
}

/// Live (non-zombie) members of a process group, by a full scan. This process's zombie
/// children are passed over without a read (see [`descendants_except`]).
#[cfg(target_os = "linux")]
pub fn live_group_members(pgid: Pgid) -> Vec<Stat> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
        .filter_map(Pid::new)
        .filter(|pid| !super::process::is_zombie_child(*pid))
        .filter_map(|pid| stat(pid).ok())
        .filter(|s| s.pgrp == pgid.as_raw() && !s.is_zombie())
        .collect()
}

#[cfg(not(target_os = "linux"))]
pub fn live_group_members(_pgid: Pgid) -> Vec<Stat> {
    Vec::new()
}

/// True if `/proc/<pid>/environ` holds exactly `KEY=VALUE`. Unreadable (gone, another user):
/// false.
pub fn environ_has(pid: Pid, key: &str, value: &str) -> bool {
    environ_value(pid, key).as_deref() == Some(value)
}

/// The value of `KEY` in `/proc/<pid>/environ`, if readable and present.
pub fn environ_value(pid: Pid, key: &str) -> Option<String> {
    let bytes = read_memory_file(pid, "environ")?;
    let prefix = format!("{key}=");
    bytes
        .split(|b| *b == 0)
        .find_map(|kv| kv.strip_prefix(prefix.as_bytes()).map(|v| String::from_utf8_lossy(v).into_owned()))
}

/// `/proc/<pid>/FILE` for a file read from the process's memory (`environ`, `cmdline`): a
/// zombie leader has none of its own (empty), so then it is read through a live thread.
fn read_memory_file(pid: Pid, file: &str) -> Option<Vec<u8>> {
    let bytes = std::fs::read(format!("/proc/{pid}/{file}")).ok()?;
    if !bytes.is_empty() {
        return Some(bytes);
    }
    std::fs::read(thread_file(pid, file)).ok()
}

/// One fd of a process that is a pipe's end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PipeFd {
    pub fd: i32,
    /// The pipe (`pipe:[inode]`).
    pub inode: u64,
    /// This fd writes to it (its access mode is not read-only).
    pub writes: bool,
}

/// The pipes `pid` holds: each fd that is a pipe's end, from `/proc/<pid>/fd` and the access
/// mode in `/proc/<pid>/fdinfo/<fd>`. Unreadable: none.
pub fn pipes(pid: Pid) -> Vec<PipeFd> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return Vec::new() };
    let mut out = Vec::new();
    for e in dir.flatten() {
        let Some(fd) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let Ok(link) = std::fs::read_link(e.path()) else { continue };
        let Some(ino) = link.to_str().and_then(|l| l.strip_prefix("pipe:[")?.strip_suffix(']')?.parse().ok()) else {
            continue;
        };
        let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).unwrap_or_default();
        let flags = info.lines().find_map(|l| l.strip_prefix("flags:")).map(str::trim).unwrap_or("0");
        let flags = i32::from_str_radix(flags, 8).unwrap_or(0);
        out.push(PipeFd { fd, inode: ino, writes: flags & libc::O_ACCMODE != libc::O_RDONLY });
    }
    out
}

/// The command line of `pid`, arguments joined by spaces (empty for zombies and kernel threads).
pub fn cmdline(pid: Pid) -> String {
    read_memory_file(pid, "cmdline")
        .map(|b| {
            b.split(|c| *c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::{is_alive, parse_stat, start_time};

    #[test]
    fn parses_a_comm_with_spaces_and_parens() {
        let line = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 987654 1000 10";
        let s = parse_stat(line).unwrap();
        assert_eq!(s.pid.as_raw(), 4242);
        assert_eq!(s.comm, "a (b) c");
        assert_eq!(s.state, 'S');
        assert_eq!((s.ppid, s.pgrp, s.session), (1, 4242, 4242));
        assert_eq!(s.start_time, 987654);
    }

    #[test]
    fn own_process_is_alive_with_a_start_time() {
        let me = super::super::process::getpid();
        assert!(is_alive(me));
        assert!(start_time(me).is_some());
    }
}
