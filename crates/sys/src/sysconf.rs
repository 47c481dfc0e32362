//! The two `sysconf` values needed to turn `/proc/<pid>/stat` figures into units: clock ticks
//! per second (`utime`/`stime` are in ticks) and the page size (`rss` is in pages).

/// `sysconf(_SC_CLK_TCK)`: clock ticks per second (USER_HZ, 100 on every common Linux). Falls
/// back to 100 if the call fails.
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if n > 0 { n as u64 } else { 100 }
}

/// `sysconf(_SC_PAGESIZE)`: bytes per page. Falls back to 4096 if the call fails.
pub fn page_size() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 { n as u64 } else { 4096 }
}

/// `sysconf(_SC_ARG_MAX)`: bytes an `exec` may pass in arguments and environment together.
/// Falls back to 131 072 (POSIX's least) if the call fails.
pub fn arg_max() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_ARG_MAX) };
    if n > 0 { n as u64 } else { 131_072 }
}
