//! The `sysconf` values needed to turn `/proc/<pid>/stat` figures into units, clock ticks per
//! second (`utime`/`stime` are in ticks) and the page size (`rss` is in pages), and the size an
//! `exec` may pass.

/// `sysconf(_SC_CLK_TCK)`: clock ticks per second (USER_HZ, 100 on every common Linux), through
/// rustix (libc's `sysconf`: the workspace enables rustix's `use-libc-auxv`). Falls back to 100 if
/// the call fails.
pub fn clock_ticks_per_second() -> u64 {
    // rustix casts a failed sysconf's -1.
    match rustix::param::clock_ticks_per_second() {
        0 | u64::MAX => 100,
        n => n,
    }
}

/// `sysconf(_SC_PAGESIZE)`: bytes per page, through rustix as above. Falls back to 4096 if the
/// call fails.
pub fn page_size() -> u64 {
    match rustix::param::page_size() {
        0 | usize::MAX => 4096,
        n => n as u64,
    }
}

/// `sysconf(_SC_ARG_MAX)`: bytes an `exec` may pass in arguments and environment together.
/// Falls back to 131 072 (POSIX's least) if the call fails. On libc: rustix has no `ARG_MAX`.
pub fn arg_max() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_ARG_MAX) };
    if n > 0 { n as u64 } else { 131_072 }
}
