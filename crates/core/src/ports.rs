//! Which TCP ports a set of processes listens on: "which port is my dev server on".
//!
//! Linux: `/proc/net/tcp` and `/proc/net/tcp6` list sockets (state `0A` = LISTEN) with their
//! inode; `/proc/<pid>/fd/*` links read `socket:[INODE]` for the sockets a process holds. A port
//! is the process's if one of its fds is a listening socket's inode. Only the network namespace
//! of the reader is seen (a server inside a container's namespace is not). Elsewhere: empty.

use std::collections::{BTreeSet, HashMap};

use crate::sys::Pid;

/// TCP state LISTEN in `/proc/net/tcp` (`include/net/tcp_states.h`).
const TCP_LISTEN: &str = "0A";

/// Listening TCP sockets of this network namespace: inode → port.
pub fn listening_sockets() -> HashMap<u64, u16> {
    let mut map = HashMap::new();
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(file) else { continue };
        for (inode, port) in parse_net_tcp(&text) {
            map.insert(inode, port);
        }
    }
    map
}

/// Parses `/proc/net/tcp{,6}` text into (inode, local port) of sockets in state LISTEN.
pub fn parse_net_tcp(text: &str) -> Vec<(u64, u16)> {
    let mut out = Vec::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
        if f.len() < 10 || f[3] != TCP_LISTEN {
            continue;
        }
        let Some(port) = f[1].rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok()) else { continue };
        let Ok(inode) = f[9].parse::<u64>() else { continue };
        if inode != 0 {
            out.push((inode, port));
        }
    }
    out
}

/// True if anything in this network namespace listens on TCP `port` (any address).
pub fn port_in_listen(port: u16) -> bool {
    listening_sockets().values().any(|p| *p == port)
}

/// Socket inodes held open by `pid` (its fds that read `socket:[N]`). Unreadable fds (another
/// user's process, a process that just exited) are skipped.
///
/// A leader that called `pthread_exit` has an empty `/proc/<pid>/fd` while its threads still
/// hold the fds: then they are read through a live thread (`/proc/<pid>/task/<tid>/fd`).
pub fn socket_inodes(pid: Pid) -> Vec<u64> {
    let fds = |path: String| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(path).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default()
    };
    let mut links = fds(format!("/proc/{pid}/fd"));
    if links.is_empty() {
        links = fds(crate::sys::procfs::thread_file(pid, "fd"));
    }
    links
        .iter()
        .filter_map(|d| std::fs::read_link(d).ok())
        .filter_map(|l| {
            let s = l.to_string_lossy().into_owned();
            s.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect()
}

/// How long one read of the socket tables serves later calls on the same thread: 200 ms, so a
/// `ps` over many entries reads `/proc/net/tcp{,6}` once, not once per entry.
const SOCKETS_REUSE: std::time::Duration = std::time::Duration::from_millis(200);

/// A socket table (inode → port) and when it was read.
type SocketTable = (std::time::Instant, std::rc::Rc<HashMap<u64, u16>>);

thread_local! {
    static SOCKETS: std::cell::RefCell<Option<SocketTable>> = const { std::cell::RefCell::new(None) };
}

/// [`listening_sockets`], reused for [`SOCKETS_REUSE`] on this thread.
fn sockets_recent() -> std::rc::Rc<HashMap<u64, u16>> {
    SOCKETS.with(|c| {
        let mut c = c.borrow_mut();
        if let Some((t, m)) = c.as_ref()
            && t.elapsed() < SOCKETS_REUSE
        {
            return m.clone();
        }
        let m = std::rc::Rc::new(listening_sockets());
        *c = Some((std::time::Instant::now(), m.clone()));
        m
    })
}

/// The TCP ports that any of `pids` listens on, sorted, without duplicates (IPv4 and IPv6 on
/// one port count once). Empty outside Linux. The socket tables may be up to 200 ms old when
/// called repeatedly on one thread (a listing); readiness checks use [`listening_now`].
pub fn listening(pids: &[Pid]) -> Vec<u16> {
    if pids.is_empty() || !cfg!(target_os = "linux") {
        return Vec::new();
    }
    let inodes = inodes_of(pids);
    if inodes.is_empty() {
        return Vec::new();
    }
    ports_of(&inodes, &sockets_recent())
}

/// [`listening`] from fresh socket tables (which later [`listening`] calls then reuse).
pub fn listening_now(pids: &[Pid]) -> Vec<u16> {
    if pids.is_empty() || !cfg!(target_os = "linux") {
        return Vec::new();
    }
    let inodes = inodes_of(pids);
    if inodes.is_empty() {
        return Vec::new();
    }
    let m = std::rc::Rc::new(listening_sockets());
    SOCKETS.with(|c| *c.borrow_mut() = Some((std::time::Instant::now(), m.clone())));
    ports_of(&inodes, &m)
}

/// The socket inodes `pids` hold. Read first: most trees hold no socket, and then the socket
/// tables (`/proc/net/tcp{,6}`, which walk the kernel's whole connection table on every read)
/// are never read at all.
fn inodes_of(pids: &[Pid]) -> Vec<u64> {
    pids.iter().flat_map(|p| socket_inodes(*p)).collect()
}

fn ports_of(inodes: &[u64], sockets: &HashMap<u64, u16>) -> Vec<u16> {
    inodes.iter().filter_map(|i| sockets.get(i).copied()).collect::<BTreeSet<u16>>().into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::parse_net_tcp;

    #[test]
    fn parses_listen_lines_only() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 00000000:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 12345 1 0000000000000000 100 0 0 10 0\n\
   1: 0100007F:1F41 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1000        0 12346 1 0000000000000000 100 0 0 10 0\n";
        assert_eq!(parse_net_tcp(text), vec![(12345, 8000)]);
    }
}
