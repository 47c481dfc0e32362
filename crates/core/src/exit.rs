//! Every exit status sheepdog reports, in one place (as ripgrep keeps its in `main`): the
//! shell's conventions for a wrapper (`env`, `nohup`, `timeout`), and docs/reference.md's table.
//!
//! A supervised command's own status passes through unchanged; the numbers here are
//! sheepdog's own. Which error maps to which lives beside each error type (`exit_code()`), each
//! returning one of these.

/// Success.
pub const OK: i32 = 0;

/// The request was understood and refused, or matched nothing: clearing a running entry,
/// `stop --session` with nothing to stop, a readiness wait whose command exited. 1, as `grep`
/// reports "no match".
pub const REFUSED: i32 = 1;

/// The state dir could not be written (its disk is full, or it is read-only): what the command
/// did (a stopped tree, a reaped or lost entry, a change) is true but not recorded. 74,
/// `EX_IOERR` from sysexits.h.
pub const NOT_RECORDED: i32 = 74;

/// A time bound passed first: the kernel did not finish the kill within the kill wait, a
/// `wait --timeout` or a readiness wait ran out, an entry ended by its `--timeout`. 124, as
/// `timeout(1)`.
pub const TIMED_OUT: i32 = 124;

/// sheepdog's own failure: bad arguments, an owner that is not the parent, a state dir it must
/// not use, a cgroup it was asked for and cannot have. 125, as `env`, `nohup` and `timeout`.
pub const USAGE: i32 = 125;

/// The command was found and cannot be executed (permissions, a directory). 126, as the shell.
pub const NOT_EXECUTABLE: i32 = 126;

/// The command was not found. 127, as the shell.
pub const NOT_FOUND: i32 = 127;

/// A process that died by signal `n` is reported as `128 + n`, as the shell does.
pub const fn by_signal(n: i32) -> i32 {
    128 + n
}
