//! `--events-fd FD`: one JSON object per line per event, for hosts that want the definitive
//! outcome instead of guessing from exit codes.
//!
//! ```text
//! {"event":"spawned","pid":4242,"pgid":4242,"maxStopMs":5500,"containment":"cgroup",
//!  "containmentReason":null,"cgroup":"/sys/fs/cgroup/sheepdog-run-4241-1a2b3c4d","cgroupInode":9}
//! {"event":"stopping","trigger":"signal","signal":"SIGTERM"}      trigger: signal | owner |
//!                                                                  stdinEof | timeout |
//!                                                                  providerExited
//! {"event":"escalated","signal":"SIGKILL","remaining":2}
//! {"event":"spawnFailed","command":"nosuch","errno":"ENOENT","errnoNumber":2,"exitStatus":127,
//!  "message":"nosuch: command not found: No such file or directory (os error 2)"}  (instead of all others)
//! {"event":"exited","exitCode":0,"signal":null,"coreDumped":false,"treeGone":true,"escalated":false,
//!  "trigger":null,"exitStatus":0,"code":0,"status":0}
//! ```
//!
//! Every line starts with `"v": 1` (the schema's version, `schema/events-fd.json`). In `exited`,
//! `exitCode`/`signal` describe the provider (one of them is null; both are null if it could not
//! be killed), and `exitStatus` is what the supervisor itself exits with (a number, or the name
//! of the signal it dies by); `code` and `status` are their deprecated v1 names. Writes never block the supervisor: a line is written only
//! when `poll` says the fd has room, and dropped otherwise. The fd is close-on-exec, so the reader sees EOF when the
//! supervisor is gone, even while something it spawned still lives.

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

use serde::Serialize;

use crate::stop::Trigger;
use crate::supervisor::{Exit, Happened, Hooks, Listener, Outcome};
use crate::sys::WaitStatus;
use crate::sys::process::{self, POLL_OUT, PollFd};

/// One `--events-fd` line, `{"event": "spawned" | "stopping" | "escalated" | "exited", ...}`:
/// the shape hosts parse, in one type (camelCase fields, `event` first).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(tag = "event", rename_all = "camelCase")]
pub enum Event {
    /// The provider runs: its pid and group, the longest a stop can take (ms), and the tier.
    #[serde(rename_all = "camelCase")]
    Spawned {
        pid: i32,
        pgid: i32,
        max_stop_ms: u64,
        containment: Option<&'static str>,
        containment_reason: Option<String>,
        cgroup: Option<String>,
        cgroup_inode: Option<u64>,
    },
    /// A stop began: `trigger` is `signal` (with `signal`), `owner`, `stdinEof`, `timeout` or
    /// `providerExited` (not a stop: what an exited provider left is being cleaned up).
    Stopping {
        trigger: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        signal: Option<String>,
    },
    /// The term grace ran out; SIGKILL went to `remaining` processes.
    Escalated { signal: &'static str, remaining: usize },
    /// The command could not be started: nothing runs, no other event follows, and sheepdog
    /// exits with `exitStatus` (127 not found, 126 not executable, 125 otherwise). The data of
    /// Orca's `[orca-provider-supervisor] spawn failed: {...}` line, so a host never parses
    /// stderr.
    #[serde(rename_all = "camelCase")]
    SpawnFailed {
        /// The command as given (`argv[0]`).
        command: String,
        /// The errno's name (`ENOENT`, `EACCES`, `E2BIG`), `UNKNOWN` when it has none here.
        errno: String,
        /// The errno's number on this system (`ENOENT` is 2 on Linux), null when the failure was
        /// not a system call's.
        errno_number: Option<i32>,
        /// What sheepdog exits with.
        exit_status: i32,
        /// The sentence sheepdog prints after `sheepdog: ` on stderr.
        message: String,
    },
    /// The end: `exitCode`/`signal` describe the provider (both null if it could not be
    /// killed), `exitStatus` is what sheepdog itself exits with (a number, or the signal it dies
    /// by).
    #[serde(rename_all = "camelCase")]
    Exited {
        /// The provider's exit code, when it exited by itself.
        exit_code: Option<i32>,
        /// The signal that ended the provider.
        signal: Option<String>,
        /// That signal dumped core (`WCOREDUMP`, the shell's `(core dumped)`).
        core_dumped: bool,
        /// Nothing of the tree is left.
        tree_gone: bool,
        /// SIGKILL was needed.
        escalated: bool,
        /// What began the stop, when one did.
        trigger: Option<&'static str>,
        /// What the supervisor exits with: a number, or the name of the signal it dies by.
        exit_status: ExitValue,
        /// Deprecated, schema v1 only: `exitCode` under its old name (gone in v2).
        #[schemars(extend("deprecated" = true))]
        code: Option<i32>,
        /// Deprecated, schema v1 only: `exitStatus` under its old name (gone in v2).
        #[schemars(extend("deprecated" = true))]
        status: ExitValue,
    },
}

/// One `--events-fd` line as written: `{"v": 1, "event": ..., ...}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct EventLine {
    pub v: crate::status::Version,
    #[serde(flatten)]
    pub event: Event,
}

/// sheepdog's own exit in the `exited` event: a number, or the name of the signal it dies by.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum ExitValue {
    /// An exit code.
    Code(i32),
    /// The name of the signal it dies by (`SIGTERM`).
    Signal(String),
}

impl Event {
    /// The `stopping` event of `trigger`.
    pub fn stopping(trigger: Trigger) -> Event {
        let signal = match trigger {
            Trigger::Signal(s) => Some(s.name()),
            _ => None,
        };
        Event::Stopping { trigger: trigger.name(), signal }
    }

    /// The `spawnFailed` event of a command `program` that could not start.
    pub fn spawn_failed(program: &std::ffi::OsStr, e: &crate::spawn::SpawnError) -> Event {
        let number = e.os_error();
        Event::SpawnFailed {
            command: program.to_string_lossy().into_owned(),
            errno: number.and_then(process::errno_name).unwrap_or("UNKNOWN").to_string(),
            errno_number: number,
            exit_status: e.exit_code(),
            message: e.to_string(),
        }
    }

    /// The `exited` event of an outcome.
    pub fn exited(outcome: &Outcome) -> Event {
        let (code, signal) = match outcome.provider {
            Some(WaitStatus::Exited(c)) => (Some(c), None),
            Some(WaitStatus::Signaled(s, _)) => (None, Some(s.name())),
            None => (None, None),
        };
        let status = match outcome.exit() {
            Exit::Code(c) => ExitValue::Code(c),
            Exit::Signal(s) => ExitValue::Signal(s.name()),
        };
        Event::Exited {
            exit_code: code,
            signal,
            core_dumped: matches!(outcome.provider, Some(WaitStatus::Signaled(_, true))),
            tree_gone: outcome.tree_gone,
            escalated: outcome.escalated,
            trigger: outcome.trigger.map(|t| t.name()),
            exit_status: status.clone(),
            code,
            status,
        }
    }
}

/// Writes events to an inherited fd.
#[derive(Debug)]
pub struct EventSink {
    fd: OwnedFd,
    /// The fd number the host passed (`--events-fd`).
    inherited_as: RawFd,
    /// The tier the probe chose, for the `spawned` event.
    containment: Option<crate::cgroup::Record>,
}

impl EventSink {
    /// Takes over inherited `fd` (close-on-exec from now on). Its file status flags are left
    /// alone: the open file may be shared with the provider's stdout or the host, and making
    /// it non-blocking there would make their writes fail with EAGAIN.
    ///
    /// Errors: EBADF when it is not open.
    pub fn from_inherited(fd: RawFd) -> std::io::Result<EventSink> {
        Ok(EventSink { fd: process::take_inherited_fd(fd)?, inherited_as: fd, containment: None })
    }

    /// Writes one event line, only if the fd can take it now (`poll` for `POLLOUT`): a line is
    /// far below `PIPE_BUF`, so a pipe that reports room takes it whole without blocking. A
    /// reader that stopped reading loses events; it never stalls the supervisor.
    pub fn emit(&self, event: &Event) {
        let line = EventLine { v: crate::status::Version, event: event.clone() };
        let Ok(mut line) = serde_json::to_string(&line) else { return };
        line.push('\n');
        let mut fds = [PollFd::new(self.fd.as_raw_fd(), POLL_OUT)];
        if matches!(process::poll(&mut fds, Some(std::time::Duration::ZERO)), Ok(1)) && !fds[0].hung_up() {
            process::write_best_effort(self.fd.as_fd(), line.as_bytes());
        }
    }

    /// The final `exited` event.
    pub fn exited(&self, outcome: &Outcome) {
        self.emit(&Event::exited(outcome));
    }
}

impl Listener for EventSink {
    fn on(&mut self, event: &Happened<'_>) {
        match *event {
            Happened::Contained(record) => self.containment = Some(record.clone()),
            Happened::Spawned { spawned, policy } => {
                let c = self.containment.as_ref();
                self.emit(&Event::Spawned {
                    pid: spawned.pid.as_raw(),
                    pgid: spawned.pgid.as_raw(),
                    max_stop_ms: policy.timings().max_stop_ms,
                    containment: c.map(|c| c.containment.name()),
                    containment_reason: c.and_then(|c| c.containment_reason.clone()),
                    cgroup: c.and_then(|c| c.cgroup.clone()),
                    cgroup_inode: c.and_then(|c| c.cgroup_inode),
                });
            }
            Happened::SpawnFailed { program, error } => self.emit(&Event::spawn_failed(program, error)),
            Happened::Stopping { trigger, .. } => self.emit(&Event::stopping(trigger)),
            Happened::Escalated { remaining } => self.emit(&Event::Escalated { signal: "SIGKILL", remaining }),
            // Not lines of the schema: an adopting image told the host nothing new, and reaped
            // orphans are not the host's business.
            Happened::Adopted(_) | Happened::Reaped { .. } => {}
        }
    }
}

impl Hooks for EventSink {
    fn adoptable_fds(&self) -> Vec<RawFd> {
        // A supervisor that adopts the tree after its keeper's SIGKILL is this program again,
        // parsing `--events-fd N` again: fd N must still be open there. (An fd of 0-2 was
        // duplicated above 2; the original stays open across the exec anyway.)
        let fd = self.fd.as_raw_fd();
        if fd == self.inherited_as { vec![fd] } else { Vec::new() }
    }
}

#[cfg(test)]
mod tests {
    use crate::spawn::Spawned;
    use crate::stop::Trigger;
    use crate::supervisor::Outcome;
    use crate::sys::WaitStatus;
    use crate::sys::{Pid, Signal};

    use super::{Event, EventLine};

    /// The shapes hosts parse, byte for byte (docs/guide.md, `--events-fd`).
    #[test]
    fn event_lines_keep_their_shape() {
        let spawned = Event::Spawned {
            pid: 4242,
            pgid: 4242,
            max_stop_ms: 5500,
            containment: Some("subreaper"),
            containment_reason: Some("no cgroup2 mount".into()),
            cgroup: None,
            cgroup_inode: None,
        };
        assert_eq!(
            serde_json::to_string(&spawned).unwrap(),
            r#"{"event":"spawned","pid":4242,"pgid":4242,"maxStopMs":5500,"containment":"subreaper","containmentReason":"no cgroup2 mount","cgroup":null,"cgroupInode":null}"#
        );
        assert_eq!(
            serde_json::to_string(&Event::stopping(Trigger::Signal(Signal::TERM))).unwrap(),
            r#"{"event":"stopping","trigger":"signal","signal":"SIGTERM"}"#
        );
        assert_eq!(
            serde_json::to_string(&Event::stopping(Trigger::OwnerDied)).unwrap(),
            r#"{"event":"stopping","trigger":"owner"}"#
        );
        assert_eq!(
            serde_json::to_string(&Event::Escalated { signal: "SIGKILL", remaining: 2 }).unwrap(),
            r#"{"event":"escalated","signal":"SIGKILL","remaining":2}"#
        );
        let pid = Pid::new(4242).unwrap();
        let outcome = Outcome {
            spawned: Spawned { pid, pgid: pid.as_group() },
            provider: Some(WaitStatus::Signaled(Signal::KILL, false)),
            trigger: Some(Trigger::Signal(Signal::TERM)),
            tree_gone: true,
            escalated: true,
            cgroup_left: false,
            left: Vec::new(),
            kept: None,
            keeper: None,
            as_init: false,
        };
        assert_eq!(
            serde_json::to_string(&Event::exited(&outcome)).unwrap(),
            r#"{"event":"exited","exitCode":null,"signal":"SIGKILL","coreDumped":false,"treeGone":true,"escalated":true,"trigger":"signal","exitStatus":"SIGTERM","code":null,"status":"SIGTERM"}"#
        );
        // As written: the schema's version first.
        let line = EventLine { v: crate::status::Version, event: Event::Escalated { signal: "SIGKILL", remaining: 2 } };
        assert_eq!(
            serde_json::to_string(&line).unwrap(),
            r#"{"v":1,"event":"escalated","signal":"SIGKILL","remaining":2}"#
        );
    }
}
