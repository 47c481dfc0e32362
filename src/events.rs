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
//! {"event":"exited","code":0,"signal":null,"treeGone":true,"status":0}
//! ```
//!
//! In `exited`, `code`/`signal` describe the provider (one of them is null; both are null if it
//! could not be killed), and `status` is what the supervisor itself exits with (a number, or the
//! name of the signal it dies by). Writes never block the supervisor: a line is written only
//! when `poll` says the fd has room, and dropped otherwise. The fd is close-on-exec, so the reader sees EOF when the
//! supervisor is gone, even while something it spawned still lives.

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

use serde_json::{Value, json};

use crate::spawn::Spawned;
use crate::stop::{StopPolicy, Trigger};
use crate::supervisor::{Exit, Observer, Outcome};
use crate::sys::WaitStatus;
use crate::sys::process::{self, POLL_OUT, PollFd};

/// Writes events to an inherited fd.
#[derive(Debug)]
pub struct EventSink {
    fd: OwnedFd,
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
        Ok(EventSink { fd: process::take_inherited_fd(fd)?, containment: None })
    }

    /// Writes one event line, only if the fd can take it now (`poll` for `POLLOUT`): a line is
    /// far below `PIPE_BUF`, so a pipe that reports room takes it whole without blocking. A
    /// reader that stopped reading loses events; it never stalls the supervisor.
    pub fn emit(&self, value: Value) {
        let mut line = value.to_string();
        line.push('\n');
        let mut fds = [PollFd::new(self.fd.as_raw_fd(), POLL_OUT)];
        if matches!(process::poll(&mut fds, Some(std::time::Duration::ZERO)), Ok(1)) && !fds[0].hung_up() {
            process::write_best_effort(self.fd.as_fd(), line.as_bytes());
        }
    }

    /// The final `exited` event.
    pub fn exited(&self, outcome: &Outcome) {
        let (code, signal) = match outcome.provider {
            Some(WaitStatus::Exited(c)) => (Some(c), None),
            Some(WaitStatus::Signaled(s)) => (None, Some(s.name())),
            None => (None, None),
        };
        let status = match outcome.exit() {
            Exit::Code(c) => json!(c),
            Exit::Signal(s) => json!(s.name()),
        };
        self.emit(json!({
            "event": "exited",
            "code": code,
            "signal": signal,
            "treeGone": outcome.tree_gone,
            "escalated": outcome.escalated,
            "trigger": outcome.trigger.map(|t| t.name()),
            "status": status,
        }));
    }
}

/// `stopping` as JSON.
pub fn stopping_json(trigger: Trigger) -> Value {
    match trigger {
        Trigger::Signal(s) => json!({"event": "stopping", "trigger": trigger.name(), "signal": s.name()}),
        _ => json!({"event": "stopping", "trigger": trigger.name()}),
    }
}

impl Observer for EventSink {
    fn contained(&mut self, record: &crate::cgroup::Record) {
        self.containment = Some(record.clone());
    }

    fn spawned(&mut self, spawned: &Spawned, policy: &StopPolicy) {
        let c = self.containment.as_ref();
        self.emit(json!({
            "event": "spawned",
            "pid": spawned.pid.as_raw(),
            "pgid": spawned.pgid.as_raw(),
            "maxStopMs": policy.max_stop().as_millis() as u64,
            "containment": c.map(|c| c.containment),
            "containmentReason": c.and_then(|c| c.containment_reason.clone()),
            "cgroup": c.and_then(|c| c.cgroup.clone()),
            "cgroupInode": c.and_then(|c| c.cgroup_inode),
        }));
    }

    fn stopping(&mut self, trigger: Trigger) {
        self.emit(stopping_json(trigger));
    }

    fn escalated(&mut self, remaining: usize) {
        self.emit(json!({"event": "escalated", "signal": "SIGKILL", "remaining": remaining}));
    }
}
