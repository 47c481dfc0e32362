//! What an entry *is*: the record of one managed process as `procs/<id>/entry.json` stores it
//! ([`Entry`]), the data it carries (byte-exact text, stop timings, processes by identity
//! ([`ProcRef`]), the cleanup and readiness specs, the cleanup's one run ([`CleanupState`]) and
//! its result, recorded members) and the transitions a writer makes on it (`record_spawned`,
//! `record_result`, `finish_from_outside`, ...). Data only: nothing here reads the disk or the
//! kernel. The Rust types are typed; the file keeps the flat keys and their order that every
//! earlier sheepdog wrote (`wire`), so old files read as before and `v` is unchanged. Storage
//! is `registry` (above, with what the kernel says of an entry's recorded processes:
//! `supervisor_alive`, `owner_gone`, ...); the vocabularies (statuses, stop reasons, who ran a
//! cleanup, tiers, signal names) are `status`.

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::files::now_ms;
use crate::status::{SignalName, Status, StopReason, Tier};

/// An argument, a path or an environment entry exactly as the OS gave it: bytes, usually UTF-8.
/// On disk it is a JSON string when the bytes are UTF-8 (every entry written so far), else an
/// object `{"hex": "fffe41"}`: it round-trips byte for byte, and an older sheepdog, which
/// expects a string, refuses such an entry (as corrupt) instead of running other bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct OsText(std::ffi::OsString);

impl OsText {
    /// The bytes, for a command line, a `current_dir` or an environment.
    pub fn as_os_str(&self) -> &std::ffi::OsStr {
        &self.0
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        std::os::unix::ffi::OsStrExt::as_bytes(self.0.as_os_str())
    }

    /// The text when it is UTF-8.
    pub fn to_str(&self) -> Option<&str> {
        self.0.to_str()
    }

    /// For people and JSON views: the text, with every byte that is not UTF-8 written `\xFF`
    /// (escaped, never replaced by U+FFFD).
    pub fn escaped(&self) -> String {
        escape_bytes(self.as_bytes())
    }
}

/// `bytes` as text: valid UTF-8 kept (a backslash too), each other byte written `\xFF`.
pub fn escape_bytes(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

impl OsText {
    /// An environment entry `K=V` split at its first `=` (no `=`: the whole is the key).
    pub fn split_env(&self) -> (std::ffi::OsString, std::ffi::OsString) {
        use std::os::unix::ffi::OsStrExt;
        let b = self.as_bytes();
        match b.iter().position(|&c| c == b'=') {
            Some(at) => (
                std::ffi::OsStr::from_bytes(&b[..at]).to_os_string(),
                std::ffi::OsStr::from_bytes(&b[at + 1..]).to_os_string(),
            ),
            None => (self.0.clone(), std::ffi::OsString::new()),
        }
    }
}

impl AsRef<std::ffi::OsStr> for OsText {
    fn as_ref(&self) -> &std::ffi::OsStr {
        &self.0
    }
}

impl From<std::ffi::OsString> for OsText {
    fn from(s: std::ffi::OsString) -> Self {
        OsText(s)
    }
}

impl From<&std::ffi::OsStr> for OsText {
    fn from(s: &std::ffi::OsStr) -> Self {
        OsText(s.to_os_string())
    }
}

impl From<&str> for OsText {
    fn from(s: &str) -> Self {
        OsText(s.into())
    }
}

impl From<String> for OsText {
    fn from(s: String) -> Self {
        OsText(s.into())
    }
}

impl PartialEq<str> for OsText {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for OsText {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl Serialize for OsText {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.to_str() {
            Some(t) => s.serialize_str(t),
            None => {
                use serde::ser::SerializeMap;
                let hex: String = self.as_bytes().iter().map(|b| format!("{b:02x}")).collect();
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("hex", &hex)?;
                m.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for OsText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Text(String),
            Hex { hex: String },
        }
        match Form::deserialize(d)? {
            Form::Text(t) => Ok(OsText(t.into())),
            Form::Hex { hex } => {
                let bad = || serde::de::Error::custom(format!("invalid hex bytes {hex:?}"));
                if hex.len() % 2 != 0 || !hex.is_ascii() {
                    return Err(bad());
                }
                let bytes = (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16))
                    .collect::<Result<Vec<u8>, _>>()
                    .map_err(|_| bad())?;
                Ok(OsText(std::os::unix::ffi::OsStringExt::from_vec(bytes)))
            }
        }
    }
}

/// The stop timings recorded in an entry, in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StopTimings {
    pub stdin_grace_ms: u64,
    pub term_grace_ms: u64,
    pub kill_wait_ms: u64,
    /// The longest the supervisor's stop can take; `stop` waits this plus a margin before it
    /// acts past the supervisor.
    pub max_stop_ms: u64,
}

/// A cleanup command attached to an entry (issue: cleanup hooks).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Cleanup {
    /// Run with `sh -c`.
    pub command: String,
    pub timeout_ms: u64,
}

/// How a cleanup command ended.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CleanupResult {
    pub command: String,
    pub exit_code: Option<i32>,
    pub signal: Option<SignalName>,
    pub timed_out: bool,
    pub duration_ms: u64,
    /// The last 20 lines of its output (stdout and stderr together).
    pub output: Vec<String>,
    /// Who ran it: `supervisor`, `stop` or `reap`.
    pub ran_by: crate::status::CleanupRunner,
}

impl CleanupResult {
    /// Exit code 0, not timed out.
    pub fn succeeded(&self) -> bool {
        !self.timed_out && self.exit_code == Some(0)
    }
}

/// A process the supervisor saw in an entry's tree: pid and start time (clock ticks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedMember {
    pub pid: i32,
    pub start_time: u64,
}

/// A process by identity as an entry records it: its pid and its start time in clock ticks
/// since boot (`/proc/<pid>/stat` field 22), `None` when that could not be read (not Linux, or
/// the process was already gone). With the entry's boot id and uid it is the identity that
/// `identity::alive` checks; without a start time a process is never taken as alive (only an
/// owner is then judged by its pid: `identity::Probe::owner_gone`). On disk it is two flat keys
/// of the entry (`supervisorPid`, `supervisorStartTime`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProcRef {
    /// The process id.
    pub pid: i32,
    /// Clock ticks since boot.
    pub start_time: Option<u64>,
}

impl ProcRef {
    /// `pid` with its start time.
    pub fn new(pid: i32, start_time: Option<u64>) -> ProcRef {
        ProcRef { pid, start_time }
    }

    /// The process of two flat keys: none without a pid (a start time alone names no process,
    /// and no sheepdog records one).
    fn from_keys(pid: Option<i32>, start_time: Option<u64>) -> Option<ProcRef> {
        pid.map(|pid| ProcRef { pid, start_time })
    }

    /// The two flat keys of `r`.
    fn keys(r: Option<ProcRef>) -> (Option<i32>, Option<u64>) {
        (r.map(|r| r.pid), r.and_then(|r| r.start_time))
    }
}

/// Where an entry's cleanup run is: at most one run per entry, claimed before it starts. The
/// variants carry what each stage has; the `cleanup` spec itself is [`Entry::cleanup`] (a
/// state with no spec stays `Pending`). On disk it is the flat keys `cleanupStartedAt`,
/// `cleanupRunnerPid`, `cleanupRunnerStartTime`, `cleanupPid`, `cleanupStartTime` and
/// `cleanupResult`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CleanupState {
    /// Not claimed: a stop, owner death, the turn timeout or `reap` will run it (when the entry
    /// has a cleanup, this boot).
    #[default]
    Pending,
    /// Claimed by `runner` at `at_ms` (unix ms), not yet spawned: the claim makes "at most once"
    /// hold even if the runner is killed midway. While the runner lives, others wait for its
    /// result. `runner` is `None` only in entries written before runners were recorded.
    Claimed { at_ms: u64, runner: Option<ProcRef> },
    /// Its command (`sh -c`, its group leader) is spawned as `child`: a cleanup whose runner was
    /// killed may still run, and counts as running while it does.
    Running { at_ms: u64, runner: Option<ProcRef>, child: ProcRef },
    /// It ended: `result` says how. What it went through stays recorded (`at_ms` is `None` only
    /// for a result written without a claim, which no sheepdog does; kept so such a file reads
    /// back as it was).
    Done { at_ms: Option<u64>, runner: Option<ProcRef>, child: Option<ProcRef>, result: CleanupResult },
}

impl CleanupState {
    /// Unix ms of the claim, once claimed.
    pub fn claimed_at(&self) -> Option<u64> {
        match self {
            CleanupState::Pending => None,
            CleanupState::Claimed { at_ms, .. } | CleanupState::Running { at_ms, .. } => Some(*at_ms),
            CleanupState::Done { at_ms, .. } => *at_ms,
        }
    }

    /// True once claimed (running or done included).
    pub fn is_claimed(&self) -> bool {
        self.claimed_at().is_some()
    }

    /// Claimed and not done: a runner holds it, or held it and died without a result.
    pub fn is_unsettled(&self) -> bool {
        matches!(self, CleanupState::Claimed { .. } | CleanupState::Running { .. })
    }

    /// Who claimed the run.
    pub fn runner(&self) -> Option<ProcRef> {
        match self {
            CleanupState::Pending => None,
            CleanupState::Claimed { runner, .. }
            | CleanupState::Running { runner, .. }
            | CleanupState::Done { runner, .. } => *runner,
        }
    }

    /// The cleanup command's own process, once spawned.
    pub fn child(&self) -> Option<ProcRef> {
        match self {
            CleanupState::Running { child, .. } => Some(*child),
            CleanupState::Done { child, .. } => *child,
            _ => None,
        }
    }

    /// How it ended, once it has.
    pub fn result(&self) -> Option<&CleanupResult> {
        match self {
            CleanupState::Done { result, .. } => Some(result),
            _ => None,
        }
    }

    /// The claim: `Pending` becomes `Claimed` by `runner` at `at_ms`. Does nothing once claimed.
    pub fn claim(&mut self, at_ms: u64, runner: ProcRef) {
        if *self == CleanupState::Pending {
            *self = CleanupState::Claimed { at_ms, runner: Some(runner) };
        }
    }

    /// The command was spawned as `child`: a claimed run becomes `Running` (a done one keeps its
    /// result and records the child). Nothing happens to an unclaimed one.
    pub fn spawned(&mut self, child: ProcRef) {
        match self {
            CleanupState::Pending => {}
            CleanupState::Claimed { at_ms, runner } | CleanupState::Running { at_ms, runner, .. } => {
                *self = CleanupState::Running { at_ms: *at_ms, runner: *runner, child }
            }
            CleanupState::Done { child: c, .. } => *c = Some(child),
        }
    }

    /// A runner that was killed is replaced by `runner`, the process that settles the cleanup
    /// now (the supervisor that adopted the keeper's tree): whoever waits for the result then
    /// waits while it lives, as for the first. Only a claimed run that is not done changes.
    pub fn hand_to(&mut self, runner: ProcRef) {
        if let CleanupState::Claimed { runner: r, .. } | CleanupState::Running { runner: r, .. } = self {
            *r = Some(runner);
        }
    }

    /// Records how it ended, replacing an earlier result; what it went through is kept.
    pub fn finish(&mut self, result: CleanupResult) {
        let (at_ms, runner, child) = (self.claimed_at(), self.runner(), self.child());
        *self = CleanupState::Done { at_ms, runner, child, result };
    }

    /// The state of the six flat keys: a result makes it `Done`, else a spawned child
    /// `Running`, else a claim time `Claimed`. Keys no sheepdog writes alone (a runner or a
    /// child without a claim) are dropped.
    fn from_keys(
        at_ms: Option<u64>,
        runner: Option<ProcRef>,
        child: Option<ProcRef>,
        result: Option<CleanupResult>,
    ) -> CleanupState {
        match (at_ms, child, result) {
            (at_ms, child, Some(result)) => CleanupState::Done { at_ms, runner, child, result },
            (Some(at_ms), Some(child), None) => CleanupState::Running { at_ms, runner, child },
            (Some(at_ms), None, None) => CleanupState::Claimed { at_ms, runner },
            (None, _, None) => CleanupState::Pending,
        }
    }

    /// The flat keys of this state: claim time, runner, child, result.
    fn keys(&self) -> (Option<u64>, Option<ProcRef>, Option<ProcRef>, Option<&CleanupResult>) {
        (self.claimed_at(), self.runner(), self.child(), self.result())
    }
}

/// What a supervisor records when its tree is done ([`Entry::record_result`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SupervisorResult {
    pub status: Status,
    /// The human line (`exited (0)`, `stopped (owner exited)`, `timed out after 2s`).
    pub text: String,
    /// The command's own exit code, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that killed the command (`SIGTERM`), when one did.
    pub signal: Option<SignalName>,
    /// The kernel wrote a core dump when that signal killed it (`WCOREDUMP`).
    pub core_dumped: bool,
    /// What began the stop; `None` when the command exited on its own.
    pub stop_reason: Option<StopReason>,
    pub tree_gone: bool,
    /// The tree's cgroup could not be removed (`reap` removes it later).
    pub cgroup_left: bool,
}

/// One managed process, as stored in `procs/<id>/entry.json`. Field names are camelCase for
/// hosts written in TypeScript. The Rust fields are typed ([`ProcRef`], [`CleanupState`]);
/// on disk the entry keeps the flat keys it always had (`ownerPid`, `ownerStartTime`,
/// `cleanupStartedAt`, ...), in the same order: it is read and written through
/// `wire::EntryWire`, the layout of the file, so `v` did not change with the types.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Entry {
    pub id: String,
    pub name: Option<String>,
    pub session_id: Option<String>,
    /// The provider, once spawned (`pid`, `startTime`): its pid and its start time in clock
    /// ticks, the identity every check of the tree begins with.
    pub provider: Option<ProcRef>,
    /// The provider's process group, once spawned.
    pub pgid: Option<i32>,
    /// Unix ms.
    pub started_at: u64,
    /// The command as one short line for listings.
    pub command_preview: String,
    /// Byte-exact (see [`OsText`]).
    pub argv: Vec<OsText>,
    pub cwd: OsText,
    /// The owner, when the entry has one (`ownerPid`, `ownerStartTime`): its start time, taken
    /// when the entry was made, lets `reap` tell that the owner died even after its pid was
    /// reused.
    pub owner: Option<ProcRef>,
    /// The `sheepdog start` process that created the entry, while the entry is `starting`
    /// (`starterPid`, `starterStartTime`): never signalled, only checked for life, so a `start`
    /// in progress is not mistaken for a crash.
    pub starter: Option<ProcRef>,
    /// The detached supervisor (`supervisorPid`, `supervisorStartTime`).
    pub supervisor: Option<ProcRef>,
    /// The supervisor's keeper (`crate::keeper`; `keeperPid`, `keeperStartTime`, absent when
    /// none): the copy that spawned the provider and runs the supervision loop. While either it
    /// or the supervisor lives, the entry is supervised: the survivor of the other's SIGKILL
    /// stops the tree and records it.
    pub keeper: Option<ProcRef>,
    /// Identity, with the provider's start time: the boot id (`/proc/sys/kernel/random/boot_id`)
    /// and the uid.
    pub boot_id: String,
    pub uid: u32,
    /// The provider's session id (for a managed entry, the supervisor's own session). A process
    /// in the recorded group *and* session, of the same uid, started no earlier than the
    /// provider, is the entry's even after the provider is gone: the group and session numbers
    /// could only have been reused if every one of their members had died first.
    pub sid: Option<i32>,
    /// Descendants the supervisor saw while it ran (subreaper tier), by identity: `reap` and
    /// `stop` find them without a tag, so members that cleared their environment (`env -i`,
    /// `su -`, `sudo`) are still caught. Dead ones are pruned on each write.
    pub members: Vec<RecordedMember>,
    /// The random token in the provider's `SHEEPDOG_TAG`, by which `reap` recognises its
    /// descendants after the supervisor is gone.
    pub tag: String,
    pub cleanup: Option<Cleanup>,
    /// Where the cleanup's one run is: pending, claimed, running, done (see [`CleanupState`]).
    pub cleanup_state: CleanupState,
    /// The extra environment given with `--env`, as `K=V`, byte-exact (the cleanup gets it too).
    pub env: Vec<OsText>,
    /// The entry's own stop timings, as it was started with them (what `restart` repeats).
    pub stop: StopTimings,
    /// The timings of a stop under way that a request gave a one-off grace (`stop
    /// --term-grace`; `stopUnderWay`, absent otherwise): recorded by whoever runs that stop, so
    /// that other stops wait as long as it may take. Never replaces [`Entry::stop`], so a stop
    /// killed in its middle leaves the entry's own timings as they were; read through
    /// [`Entry::stop_in_effect`], which ignores it once a result is recorded.
    pub stop_under_way: Option<StopTimings>,
    pub timeout_ms: Option<u64>,
    /// Per-file log cap in bytes; `None`: the default (64 MiB).
    pub log_max_bytes: Option<u64>,
    /// `starting`, `running`, `exited`, `killed`, `stopped`, `timedOut`, `reaped`, `lost`
    /// (older entries stored `timed out`; read the same). `ps` derives `orphaned` (and `lost`)
    /// from the kernel for entries still marked running.
    pub status: Status,
    /// The human form: `exited (0)`, `killed (SIGKILL)`, `timed out after 2s`, ...
    pub status_text: Option<String>,
    pub exit_code: Option<i32>,
    pub signal: Option<SignalName>,
    /// True when the signal that killed the command dumped core (`WCOREDUMP`, as the shell's
    /// `(core dumped)`); absent otherwise.
    pub core_dumped: bool,
    /// What began the stop: `signal` (sheepdog stop), `owner`, `timeout`, `reap`, ...
    pub stop_reason: Option<crate::status::StopReason>,
    pub tree_gone: Option<bool>,
    /// Unix ms.
    pub ended_at: Option<u64>,
    /// The tier that keeps the tree: `cgroup`, `subreaper` or `group` (recorded before the
    /// spawn; `None` in entries written before the tiers existed: treated as `subreaper`).
    pub containment: Option<Tier>,
    /// Why a stronger tier was not used (the cgroup probe's refusal); `None` in the cgroup tier.
    pub containment_reason: Option<String>,
    /// The tree's cgroup directory (absolute path), in the cgroup tier.
    pub cgroup: Option<String>,
    /// The inode of that directory: nothing acts on the path unless it still matches.
    pub cgroup_inode: Option<u64>,
    /// True when the cgroup could not be removed after the tree was gone; `reap` removes it.
    pub cgroup_leftover: Option<bool>,
    /// What `start` asked for (`--containment` as the tier it names, `None` for `auto`;
    /// `--memory-max` in bytes, `--pids-max`), kept for `restart`.
    pub containment_asked: Option<Tier>,
    pub memory_max: Option<u64>,
    pub pids_max: Option<u64>,
    /// Unix ms when a reply of `sheepdog mcp` told the agent that this entry finished: each
    /// finished entry is reported once, also across server restarts.
    pub finished_reported_at: Option<u64>,
    /// A name derived from what the command runs (`npm run dev` -> `npm-run-dev`), shown when
    /// none was given; not unique, never looked up (see [`derived_name`]).
    pub auto_name: Option<String>,
    /// Started with `--stdin pipe`: its stdin is the FIFO `procs/<id>/stdin` its supervisor
    /// holds open (see `manager::send`); false: `/dev/null`.
    pub stdin_pipe: bool,
    /// The readiness options it was started with (`--ready-port`, `--ready-log`,
    /// `--ready-listen`, `--ready-timeout`), kept for `restart`.
    pub ready: Option<ReadySpec>,
    /// The entry this one replaced (`restart`, `start --replace`).
    pub restart_of: Option<String>,
    /// Fields this version does not know, carried through every rewrite.
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl Entry {
    /// True once a result is recorded.
    pub fn is_finished(&self) -> bool {
        self.status.is_finished()
    }

    /// The stop timings that hold now: those of a stop under way with a one-off grace
    /// ([`Entry::stop_under_way`]) until a result is recorded, else the entry's own.
    pub fn stop_in_effect(&self) -> StopTimings {
        match self.stop_under_way {
            Some(t) if !self.is_finished() => t,
            _ => self.stop,
        }
    }

    /// `NAME (ID)` for messages. Without a name, the command's program name stands in
    /// (`sleep (proc_3)`), so every message keeps one shape.
    pub fn label(&self) -> String {
        format!("{} ({})", self.display_name(), self.id)
    }

    /// The name, else the basename of the program (`argv[0]`), else the id.
    pub fn display_name(&self) -> String {
        if let Some(n) = self.name.as_ref().or(self.auto_name.as_ref()) {
            return n.clone();
        }
        self.argv
            .first()
            .map(|a| {
                let a = a.escaped();
                a.rsplit('/').next().unwrap_or(&a).to_string()
            })
            .filter(|a| !a.is_empty())
            .unwrap_or_else(|| self.id.clone())
    }

    /// Transition to a final result recorded from outside the supervisor: `lost` with `text`
    /// (`lost (...)`), `stopped` by `sheepdog stop` or `reaped`, with whether the tree is gone.
    /// Guard: an entry that already has a result keeps it (the supervisor may have written it a
    /// moment earlier); returns false then.
    pub fn finish_from_outside(&mut self, result: OutsideResult, tree_gone: bool) -> bool {
        if self.is_finished() {
            return false;
        }
        let (status, text, reason) = match result {
            OutsideResult::Lost(text) => (Status::Lost, text, None),
            OutsideResult::StoppedPast(why) => (
                Status::Stopped,
                if tree_gone {
                    format!("stopped (by sheepdog stop; {why})")
                } else {
                    "stopped (the tree was not confirmed gone)".into()
                },
                Some(StopReason::Stop),
            ),
            OutsideResult::Reaped => (Status::Reaped, "reaped".into(), Some(StopReason::Reap)),
        };
        self.status = status;
        self.status_text = Some(text);
        self.stop_under_way = None;
        if reason.is_some() {
            self.stop_reason = reason;
            self.tree_gone = Some(tree_gone);
        }
        self.ended_at = Some(now_ms());
        true
    }

    /// The provider's pid, once spawned: [`Entry::provider`]'s.
    pub fn pid(&self) -> Option<i32> {
        self.provider.map(|p| p.pid)
    }

    /// Transition the supervisor makes once the command runs: its pid, group, start time
    /// (clock ticks) and session, and `starting` → `running`. Guard: a result recorded
    /// meanwhile (a stop or reap while the command was being spawned) is kept, and the
    /// returned `true` tells the supervisor to honour it by stopping the tree at once.
    pub fn record_spawned(&mut self, pid: i32, pgid: i32, start_time: Option<u64>, sid: Option<i32>) -> bool {
        self.provider = Some(ProcRef::new(pid, start_time));
        self.pgid = Some(pgid);
        self.sid = sid;
        if self.status == Status::Starting {
            self.status = Status::Running;
        }
        self.is_finished()
    }

    /// Transition the supervisor makes when its tree is done: the result (status and its
    /// text, the command's code or signal, what stopped it, whether the tree is gone, a
    /// cgroup left behind) and the end time. The supervisor knows best, so no guard: its result
    /// replaces one written from outside a moment earlier.
    pub fn record_result(&mut self, r: SupervisorResult) {
        self.status = r.status;
        self.status_text = Some(r.text);
        self.stop_under_way = None;
        if let Some(c) = r.exit_code {
            self.exit_code = Some(c);
        }
        if let Some(s) = r.signal {
            self.signal = Some(s);
        }
        self.core_dumped |= r.core_dumped;
        self.stop_reason = r.stop_reason;
        self.tree_gone = Some(r.tree_gone);
        self.ended_at = Some(now_ms());
        if r.cgroup_left {
            self.cgroup_leftover = Some(true);
        }
    }

    /// Transition the supervisor makes when new members appeared: who of the tree is alive now
    /// (oldest first, at most `max`), so that `reap` finds members that cleared their
    /// environment after the supervisor is gone.
    pub fn record_members(&mut self, mut members: Vec<RecordedMember>, max: usize) {
        members.sort_by_key(|m| (m.start_time, m.pid));
        members.truncate(max);
        self.members = members;
    }

    /// Unix ms at which the turn timeout (`--timeout`) expires, if one is set. For display; a
    /// deadline is `identity::Probe::timeout_left`, which a wall-clock step does not move.
    pub fn timeout_at_ms(&self) -> Option<u64> {
        self.timeout_ms.map(|t| self.started_at.saturating_add(t))
    }

    /// Ms since `started_at` by the wall clock: what `identity::Probe::timeout_left` falls back to
    /// outside the boot the entry was made in.
    pub(crate) fn wall_elapsed_ms(&self) -> u64 {
        now_ms().saturating_sub(self.started_at)
    }
}

/// The file's layout ([`wire::EntryWire`]) and the conversions to and from [`Entry`]. Kept flat
/// (not `#[serde(flatten)]` per pair) because the keys of one process are not adjacent on disk
/// (`supervisorPid` ... `bootId`, `startTime`, `supervisorStartTime`), and a new file must be
/// byte-identical to what earlier versions wrote. Writing borrows the entry (no copy of its
/// argv, environment and unknown keys per write: a supervisor's memory is measured).
mod wire {
    use std::borrow::Cow;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::{Cleanup, CleanupResult, CleanupState, Entry, OsText, ProcRef, ReadySpec, RecordedMember, StopTimings};
    use crate::status::{SignalName, Status, StopReason, Tier};

    /// `procs/<id>/entry.json` as it is on disk, key by key and in order: the layout every
    /// sheepdog since the first has written (new keys only added). [`Entry`] is read and written
    /// through it (borrowed to write, owned once read); its doc comments are on [`Entry`]'s
    /// fields.
    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct EntryWire<'a> {
        id: Cow<'a, str>,
        name: Option<Cow<'a, str>>,
        session_id: Option<Cow<'a, str>>,
        pid: Option<i32>,
        pgid: Option<i32>,
        started_at: u64,
        command_preview: Cow<'a, str>,
        argv: Cow<'a, [OsText]>,
        cwd: Cow<'a, OsText>,
        owner_pid: Option<i32>,
        #[serde(default)]
        owner_start_time: Option<u64>,
        starter_pid: Option<i32>,
        starter_start_time: Option<u64>,
        supervisor_pid: Option<i32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        keeper_pid: Option<i32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        keeper_start_time: Option<u64>,
        boot_id: Cow<'a, str>,
        start_time: Option<u64>,
        supervisor_start_time: Option<u64>,
        uid: u32,
        #[serde(default)]
        sid: Option<i32>,
        #[serde(default, skip_serializing_if = "<[RecordedMember]>::is_empty")]
        members: Cow<'a, [RecordedMember]>,
        tag: Cow<'a, str>,
        cleanup: Option<Cow<'a, Cleanup>>,
        cleanup_started_at: Option<u64>,
        cleanup_runner_pid: Option<i32>,
        cleanup_runner_start_time: Option<u64>,
        #[serde(default)]
        cleanup_pid: Option<i32>,
        #[serde(default)]
        cleanup_start_time: Option<u64>,
        cleanup_result: Option<Cow<'a, CleanupResult>>,
        env: Cow<'a, [OsText]>,
        stop: StopTimings,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stop_under_way: Option<StopTimings>,
        timeout_ms: Option<u64>,
        log_max_bytes: Option<u64>,
        status: Status,
        status_text: Option<Cow<'a, str>>,
        exit_code: Option<i32>,
        signal: Option<Cow<'a, SignalName>>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        core_dumped: bool,
        stop_reason: Option<Cow<'a, StopReason>>,
        tree_gone: Option<bool>,
        ended_at: Option<u64>,
        containment: Option<Tier>,
        containment_reason: Option<Cow<'a, str>>,
        cgroup: Option<Cow<'a, str>>,
        cgroup_inode: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cgroup_leftover: Option<bool>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        containment_asked: Option<Tier>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        memory_max: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pids_max: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        finished_reported_at: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        auto_name: Option<Cow<'a, str>>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        stdin_pipe: bool,
        ready: Option<Cow<'a, ReadySpec>>,
        restart_of: Option<Cow<'a, str>>,
        #[serde(flatten)]
        extra: Cow<'a, serde_json::Map<String, serde_json::Value>>,
    }

    impl Serialize for Entry {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let e = self;
            let (owner_pid, owner_start_time) = ProcRef::keys(e.owner);
            let (starter_pid, starter_start_time) = ProcRef::keys(e.starter);
            let (supervisor_pid, supervisor_start_time) = ProcRef::keys(e.supervisor);
            let (keeper_pid, keeper_start_time) = ProcRef::keys(e.keeper);
            let (pid, start_time) = ProcRef::keys(e.provider);
            let (cleanup_started_at, runner, child, cleanup_result) = e.cleanup_state.keys();
            let (cleanup_runner_pid, cleanup_runner_start_time) = ProcRef::keys(runner);
            let (cleanup_pid, cleanup_start_time) = ProcRef::keys(child);
            EntryWire {
                owner_pid,
                owner_start_time,
                starter_pid,
                starter_start_time,
                supervisor_pid,
                supervisor_start_time,
                keeper_pid,
                keeper_start_time,
                cleanup_started_at,
                cleanup_runner_pid,
                cleanup_runner_start_time,
                cleanup_pid,
                cleanup_start_time,
                cleanup_result: cleanup_result.map(Cow::Borrowed),
                id: Cow::Borrowed(&e.id),
                name: e.name.as_deref().map(Cow::Borrowed),
                session_id: e.session_id.as_deref().map(Cow::Borrowed),
                pid,
                pgid: e.pgid,
                started_at: e.started_at,
                command_preview: Cow::Borrowed(&e.command_preview),
                argv: Cow::Borrowed(&e.argv),
                cwd: Cow::Borrowed(&e.cwd),
                boot_id: Cow::Borrowed(&e.boot_id),
                start_time,
                uid: e.uid,
                sid: e.sid,
                members: Cow::Borrowed(&e.members),
                tag: Cow::Borrowed(&e.tag),
                cleanup: e.cleanup.as_ref().map(Cow::Borrowed),
                env: Cow::Borrowed(&e.env),
                stop: e.stop,
                stop_under_way: e.stop_under_way,
                timeout_ms: e.timeout_ms,
                log_max_bytes: e.log_max_bytes,
                status: e.status,
                status_text: e.status_text.as_deref().map(Cow::Borrowed),
                exit_code: e.exit_code,
                signal: e.signal.as_ref().map(Cow::Borrowed),
                core_dumped: e.core_dumped,
                stop_reason: e.stop_reason.as_ref().map(Cow::Borrowed),
                tree_gone: e.tree_gone,
                ended_at: e.ended_at,
                containment: e.containment,
                containment_reason: e.containment_reason.as_deref().map(Cow::Borrowed),
                cgroup: e.cgroup.as_deref().map(Cow::Borrowed),
                cgroup_inode: e.cgroup_inode,
                cgroup_leftover: e.cgroup_leftover,
                containment_asked: e.containment_asked,
                memory_max: e.memory_max,
                pids_max: e.pids_max,
                finished_reported_at: e.finished_reported_at,
                auto_name: e.auto_name.as_deref().map(Cow::Borrowed),
                stdin_pipe: e.stdin_pipe,
                ready: e.ready.as_ref().map(Cow::Borrowed),
                restart_of: e.restart_of.as_deref().map(Cow::Borrowed),
                extra: Cow::Borrowed(&e.extra),
            }
            .serialize(s)
        }
    }

    impl<'de> Deserialize<'de> for Entry {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Entry, D::Error> {
            let w = EntryWire::deserialize(d)?;
            let runner = ProcRef::from_keys(w.cleanup_runner_pid, w.cleanup_runner_start_time);
            let child = ProcRef::from_keys(w.cleanup_pid, w.cleanup_start_time);
            let result = w.cleanup_result.map(Cow::into_owned);
            Ok(Entry {
                owner: ProcRef::from_keys(w.owner_pid, w.owner_start_time),
                starter: ProcRef::from_keys(w.starter_pid, w.starter_start_time),
                supervisor: ProcRef::from_keys(w.supervisor_pid, w.supervisor_start_time),
                keeper: ProcRef::from_keys(w.keeper_pid, w.keeper_start_time),
                cleanup_state: CleanupState::from_keys(w.cleanup_started_at, runner, child, result),
                id: w.id.into_owned(),
                name: w.name.map(Cow::into_owned),
                session_id: w.session_id.map(Cow::into_owned),
                provider: ProcRef::from_keys(w.pid, w.start_time),
                pgid: w.pgid,
                started_at: w.started_at,
                command_preview: w.command_preview.into_owned(),
                argv: w.argv.into_owned(),
                cwd: w.cwd.into_owned(),
                boot_id: w.boot_id.into_owned(),
                uid: w.uid,
                sid: w.sid,
                members: w.members.into_owned(),
                tag: w.tag.into_owned(),
                cleanup: w.cleanup.map(Cow::into_owned),
                env: w.env.into_owned(),
                stop: w.stop,
                stop_under_way: w.stop_under_way,
                timeout_ms: w.timeout_ms,
                log_max_bytes: w.log_max_bytes,
                status: w.status,
                status_text: w.status_text.map(Cow::into_owned),
                exit_code: w.exit_code,
                signal: w.signal.map(Cow::into_owned),
                core_dumped: w.core_dumped,
                stop_reason: w.stop_reason.map(Cow::into_owned),
                tree_gone: w.tree_gone,
                ended_at: w.ended_at,
                containment: w.containment,
                containment_reason: w.containment_reason.map(Cow::into_owned),
                cgroup: w.cgroup.map(Cow::into_owned),
                cgroup_inode: w.cgroup_inode,
                cgroup_leftover: w.cgroup_leftover,
                containment_asked: w.containment_asked,
                memory_max: w.memory_max,
                pids_max: w.pids_max,
                finished_reported_at: w.finished_reported_at,
                auto_name: w.auto_name.map(Cow::into_owned),
                stdin_pipe: w.stdin_pipe,
                ready: w.ready.map(Cow::into_owned),
                restart_of: w.restart_of.map(Cow::into_owned),
                extra: w.extra.into_owned(),
            })
        }
    }
}

/// A result recorded by someone other than the entry's supervisor (see
/// [`Entry::finish_from_outside`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutsideResult {
    /// Nothing can be known: the text says why (`lost (recorded during a previous boot; ...)`).
    Lost(String),
    /// `sheepdog stop` stopped the recorded tree itself; the text says why it had to.
    StoppedPast(&'static str),
    /// `reap` stopped the recorded tree of an entry whose supervisor was gone.
    Reaped,
}

/// The longest name (and session id) an entry may carry: 128 bytes. Names are echoed in every
/// later reply and listing; a longer one is a mistake (or an attack on the replies' size).
pub const MAX_NAME_BYTES: usize = 128;

/// Names are free text, except the shape of ids (`proc_12`): a name equal to another entry's id
/// would make `stop proc_12` ambiguous. Also not blank, without control characters, and at most
/// [`MAX_NAME_BYTES`]. The error is one sentence naming the problem (a long name is not echoed).
pub fn check_name(s: &str) -> Result<(), String> {
    check_label("name", s)?;
    let id_like = s.strip_prefix("proc_").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    if id_like {
        return Err(format!("invalid name '{s}': names of the form proc_N are reserved for ids"));
    }
    Ok(())
}

/// A session id: not blank, no control characters, at most [`MAX_NAME_BYTES`] (as a name).
/// Errors: one sentence.
pub fn check_session(s: &str) -> Result<(), String> {
    check_label("session id", s)
}

fn check_label(what: &str, s: &str) -> Result<(), String> {
    if s.len() > MAX_NAME_BYTES {
        return Err(format!("invalid {what}: {} bytes long, at most {MAX_NAME_BYTES}", s.len()));
    }
    if s.trim().is_empty() {
        return Err(format!("invalid {what} {s:?}: empty or blank"));
    }
    if s.chars().any(char::is_control) {
        return Err(format!("invalid {what} {s:?}: it has control characters"));
    }
    Ok(())
}

/// A key of `--env K=V`: not empty, and without `=`, a newline or NUL (the environment could
/// not hold it, or would read it back as another variable). Errors: one sentence.
pub fn check_env_key(k: &str) -> Result<(), String> {
    if k.is_empty() {
        return Err("invalid environment variable: the key is empty".into());
    }
    if k.contains(['=', '\n', '\0']) {
        return Err(format!("invalid environment variable {k:?}: a key cannot hold '=', a newline or NUL"));
    }
    Ok(())
}

/// What "ready" means for one entry; stored in the entry so `restart` repeats it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReadySpec {
    /// `--ready-port`.
    pub port: Option<u16>,
    /// `--ready-log` (a regex).
    pub log: Option<String>,
    /// `--ready-listen`.
    #[serde(default)]
    pub listen: bool,
    /// `--ready-timeout`, ms.
    pub timeout_ms: u64,
}

impl ReadySpec {
    /// True if any condition is set.
    pub fn is_set(&self) -> bool {
        self.port.is_some() || self.log.is_some() || self.listen
    }

    /// Checks a log pattern (a regex, as `log` holds it).
    ///
    /// Errors: why it is not a valid regular expression, as one line; the front end names the
    /// option it came from (the CLI's `--ready-log`, the MCP tool's `ready.logPattern`).
    pub fn check_pattern(pattern: &str) -> Result<(), String> {
        Regex::new(pattern).map(|_| ()).map_err(|e| one_line(&e.to_string()))
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Programs whose first words say what runs (`npm run dev`, `cargo test`, `docker compose up`):
/// the name joins them with `-`.
const SUBCOMMAND_PROGRAMS: &[&str] = &[
    "npm", "pnpm", "yarn", "bun", "deno", "cargo", "go", "make", "just", "docker", "podman", "kubectl", "uv", "poetry",
    "mvn", "gradle", "gradlew", "dotnet", "mix", "rails", "bundle", "npx", "pnpx", "bunx", "uvx",
];
/// Interpreters whose script or module is the name (`python3 -m http.server` -> `http.server`).
const INTERPRETERS: &[&str] = &["python", "python3", "node", "ruby", "perl", "php", "bash", "sh", "zsh", "dash"];

/// A name for a command that was given none, from what it runs: `sh -c CMD` is read as CMD's
/// words; leading `VAR=value` words, `env`, `exec`, `nohup` and `sudo` are skipped; a package
/// manager or build tool gives its first three plain words joined with `-` (`npm run dev` ->
/// `npm-run-dev`); an interpreter gives its module (`python3 -m http.server 8000` ->
/// `http.server`) or script's file name (`node server.js` -> `server.js`); anything else the
/// program's file name. At most 40 bytes; `None` when nothing usable is found (the entry then
/// shows its program's name).
pub fn derived_name(argv: &[String]) -> Option<String> {
    let shell_words: Vec<String>;
    let mut words: &[String] = argv;
    if argv.len() >= 3 && matches!(base(&argv[0]), "sh" | "bash" | "dash" | "zsh") && argv[1] == "-c" {
        // The shell string's first simple command, split on blanks (no quoting: a name only).
        let first = argv[2].split(['\n', ';', '&', '|']).map(str::trim).find(|c| !c.is_empty())?;
        shell_words = first.split_whitespace().map(|w| w.trim_matches(['\'', '"']).to_string()).collect();
        words = &shell_words;
    }
    let mut i = 0;
    while i < words.len() {
        let w = words[i].as_str();
        let assignment = w.split_once('=').is_some_and(|(k, _)| !k.is_empty() && !k.starts_with('-'));
        if assignment || matches!(base(w), "env" | "exec" | "nohup" | "sudo" | "time" | "nice") {
            i += 1;
        } else {
            break;
        }
    }
    let words = &words[i..];
    let program = base(words.first()?);
    let name = if SUBCOMMAND_PROGRAMS.contains(&program) {
        let plain: Vec<&str> = std::iter::once(program)
            .chain(words[1..].iter().map(|w| w.as_str()).take_while(|w| !w.starts_with('-')).map(base))
            .take(3)
            .collect();
        plain.join("-")
    } else if INTERPRETERS.contains(&program.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.')) {
        let mut rest = words[1..].iter();
        let mut found = None;
        while let Some(w) = rest.next() {
            if w == "-m" {
                found = rest.next().map(|m| m.to_string());
                break;
            }
            if w == "-c" || w == "-e" {
                break;
            }
            if !w.starts_with('-') {
                found = Some(base(w).to_string());
                break;
            }
        }
        found.unwrap_or_else(|| program.to_string())
    } else {
        program.to_string()
    };
    let mut name: String =
        name.chars().map(|c| if c.is_alphanumeric() || "._-".contains(c) { c } else { '-' }).collect();
    while name.len() > 40 {
        name.pop();
    }
    let name = name.trim_matches('-').to_string();
    (!name.is_empty()).then_some(name)
}

fn base(w: &str) -> &str {
    w.rsplit('/').next().unwrap_or(w)
}

#[cfg(test)]
mod transition_tests {
    use crate::status::{Status, StopReason};

    use super::{Entry, OutsideResult, RecordedMember, StopTimings, SupervisorResult};

    #[test]
    fn a_result_from_outside_never_overwrites_the_supervisors() {
        let mut e = Entry { status: Status::Running, ..Entry::default() };
        assert!(e.finish_from_outside(OutsideResult::StoppedPast("the supervisor was gone"), false));
        assert_eq!(e.status, Status::Stopped);
        assert_eq!(e.status_text.as_deref(), Some("stopped (the tree was not confirmed gone)"));
        assert_eq!((e.stop_reason.clone(), e.tree_gone), (Some(StopReason::Stop), Some(false)));
        // A second writer (reap, racing) keeps the first result.
        assert!(!e.finish_from_outside(OutsideResult::Reaped, true));
        assert_eq!(e.status, Status::Stopped);
        let mut lost = Entry { status: Status::Running, ..Entry::default() };
        assert!(lost.finish_from_outside(OutsideResult::Lost("lost (a previous boot)".into()), true));
        assert_eq!((lost.status, lost.tree_gone, lost.stop_reason), (Status::Lost, None, None));
    }

    #[test]
    fn spawned_moves_starting_to_running_and_keeps_a_result_recorded_meanwhile() {
        let mut e = Entry::default();
        assert!(!e.record_spawned(4242, 4242, Some(77), Some(4000)));
        assert_eq!(
            (e.status, e.pid(), e.pgid, e.provider.and_then(|p| p.start_time), e.sid),
            (Status::Running, Some(4242), Some(4242), Some(77), Some(4000))
        );
        let mut stopped = Entry { status: Status::Stopped, ..Entry::default() };
        assert!(stopped.record_spawned(4243, 4243, None, None), "the supervisor must honour the stop");
        assert_eq!(stopped.status, Status::Stopped);
        assert_eq!(stopped.pid(), Some(4243), "the pid is recorded all the same, for the stop to find");
    }

    #[test]
    fn the_supervisors_result_replaces_one_from_outside_and_keeps_what_it_does_not_know() {
        let mut e = Entry { status: Status::Running, exit_code: None, ..Entry::default() };
        e.finish_from_outside(OutsideResult::StoppedPast("the supervisor was stuck"), false);
        e.record_result(SupervisorResult {
            status: Status::Killed,
            text: "killed (SIGKILL)".into(),
            exit_code: None,
            signal: Some("SIGKILL".into()),
            core_dumped: false,
            stop_reason: Some(StopReason::Signal),
            tree_gone: true,
            cgroup_left: true,
        });
        assert_eq!(e.status, Status::Killed);
        assert_eq!(e.status_text.as_deref(), Some("killed (SIGKILL)"));
        assert_eq!((e.signal.as_ref().map(|s| s.name()), e.exit_code), (Some("SIGKILL".to_string()), None));
        assert_eq!((e.stop_reason, e.tree_gone, e.cgroup_leftover), (Some(StopReason::Signal), Some(true), Some(true)));
        assert!(e.ended_at.is_some());
    }

    /// A one-off stop's timings hold while it runs, sit beside the entry's own (never over
    /// them), and end with any result: the supervisor's, or one recorded from outside.
    #[test]
    fn a_stop_under_way_holds_until_a_result_and_leaves_the_own_timings_alone() {
        let own = StopTimings { stdin_grace_ms: 0, term_grace_ms: 4000, kill_wait_ms: 1500, max_stop_ms: 5500 };
        let one_off = StopTimings { term_grace_ms: 2000, max_stop_ms: 3500, ..own };
        let running = Entry { status: Status::Running, stop: own, stop_under_way: Some(one_off), ..Entry::default() };
        assert_eq!(running.stop_in_effect(), one_off);
        let text = serde_json::to_string(&running).unwrap();
        assert!(text.contains(r#""stopUnderWay":{"stdinGraceMs":0,"termGraceMs":2000"#), "{text}");
        assert_eq!(serde_json::from_str::<Entry>(&text).unwrap(), running, "read back whole");
        let stale = Entry { status: Status::Stopped, ..running.clone() };
        assert_eq!(stale.stop_in_effect(), own, "a result recorded: the own timings, whatever is left beside them");
        let mut outside = running.clone();
        outside.finish_from_outside(OutsideResult::Reaped, true);
        assert_eq!((outside.stop, outside.stop_under_way), (own, None));
        let mut supervised = running;
        supervised.record_result(SupervisorResult {
            status: Status::Stopped,
            text: "stopped".into(),
            exit_code: None,
            signal: None,
            core_dumped: false,
            stop_reason: Some(StopReason::Signal),
            tree_gone: true,
            cgroup_left: false,
        });
        assert_eq!((supervised.stop, supervised.stop_under_way), (own, None));
        let none = serde_json::to_string(&Entry::default()).unwrap();
        assert!(!none.contains("stopUnderWay"), "absent when no stop under way: the layout as before");
    }

    #[test]
    fn members_are_kept_oldest_first_up_to_the_bound() {
        let mut e = Entry::default();
        let m = |pid, start_time| RecordedMember { pid, start_time };
        e.record_members(vec![m(30, 300), m(10, 100), m(20, 200), m(5, 100)], 3);
        assert_eq!(e.members, vec![m(5, 100), m(10, 100), m(20, 200)]);
    }
}

#[cfg(test)]
mod derived_name_tests {
    use super::derived_name;

    fn name(argv: &[&str]) -> Option<String> {
        derived_name(&argv.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn a_command_is_named_after_what_it_runs() {
        assert_eq!(name(&["sh", "-c", "npm run dev"]).as_deref(), Some("npm-run-dev"));
        assert_eq!(name(&["python3", "-m", "http.server", "8000"]).as_deref(), Some("http.server"));
        assert_eq!(name(&["sh", "-c", "python3 -u -m http.server 8000"]).as_deref(), Some("http.server"));
        assert_eq!(name(&["sh", "-c", "PORT=3000 node server.js"]).as_deref(), Some("server.js"));
        assert_eq!(name(&["sh", "-c", "cargo test --release; echo done"]).as_deref(), Some("cargo-test"));
        assert_eq!(name(&["sh", "-c", "sleep 100"]).as_deref(), Some("sleep"));
        assert_eq!(name(&["/usr/bin/tail", "-f", "x"]).as_deref(), Some("tail"));
        assert_eq!(name(&["sh", "-c", "   "]), None);
    }
}

#[cfg(test)]
mod wire_tests {
    use crate::status::{CleanupRunner, SignalName, Tier};

    use super::{CleanupResult, CleanupState, Entry, ProcRef};

    /// Entries as the sheepdog before the typed record wrote them (`name<TAB>entry.json`), one
    /// per cleanup state and a few odd words: each must read into its state and write back
    /// byte for byte.
    const BEFORE: &str = include_str!("../testdata/entries-before-typed-record.txt");

    fn before(name: &str) -> &'static str {
        BEFORE.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix('\t')).unwrap()
    }

    fn result() -> CleanupResult {
        CleanupResult {
            command: "docker rm -f web".into(),
            exit_code: None,
            signal: Some(SignalName::of(crate::sys::Signal::KILL)),
            timed_out: false,
            duration_ms: 5,
            output: vec!["bye".into()],
            ran_by: CleanupRunner::Stop,
        }
    }

    const AT: u64 = 1_800_000_004_000;
    const RUNNER: ProcRef = ProcRef { pid: 4300, start_time: Some(901) };
    const CHILD: ProcRef = ProcRef { pid: 4301, start_time: Some(902) };

    #[test]
    fn every_old_file_reads_into_its_state_and_writes_back_the_same_bytes() {
        let cases = [
            ("pending", CleanupState::Pending),
            ("claimed", CleanupState::Claimed { at_ms: AT, runner: Some(RUNNER) }),
            ("claimed_old", CleanupState::Claimed { at_ms: AT, runner: None }),
            ("running", CleanupState::Running { at_ms: AT, runner: Some(RUNNER), child: CHILD }),
            (
                "running_no_start",
                CleanupState::Running { at_ms: AT, runner: Some(RUNNER), child: ProcRef::new(4301, None) },
            ),
            (
                "done",
                CleanupState::Done { at_ms: Some(AT), runner: Some(RUNNER), child: Some(CHILD), result: result() },
            ),
            (
                "done_unspawned",
                CleanupState::Done { at_ms: Some(AT), runner: Some(RUNNER), child: None, result: result() },
            ),
            ("done_unclaimed", CleanupState::Done { at_ms: None, runner: None, child: None, result: result() }),
        ];
        for (name, state) in cases {
            let text = before(name);
            let e: Entry = serde_json::from_str(text).unwrap();
            assert_eq!(e.cleanup_state, state, "{name}");
            assert_eq!(serde_json::to_string(&e).unwrap(), text, "{name}");
            // The state, made by the new code, writes what the old flat fields wrote.
            let made = Entry { cleanup_state: state, ..serde_json::from_str(before("pending")).unwrap() };
            assert_eq!(serde_json::to_string(&made).unwrap(), text, "{name}");
        }
    }

    #[test]
    fn the_processes_tiers_and_signals_keep_their_keys_and_words() {
        let text = before("full");
        let e: Entry = serde_json::from_str(text).unwrap();
        assert_eq!(e.owner, Some(ProcRef::new(100, None)), "an owner whose start time was not read");
        assert_eq!(e.starter, Some(ProcRef::new(4000, Some(50))));
        assert_eq!(e.supervisor, Some(ProcRef::new(4241, Some(76))));
        assert_eq!(e.keeper, Some(ProcRef::new(4243, Some(77))));
        assert_eq!(e.provider, Some(ProcRef::new(4242, Some(78))));
        assert_eq!(e.signal, Some(SignalName::of(crate::sys::Signal::TERM)));
        assert_eq!((e.containment, e.containment_asked), (Some(Tier::Cgroup), Some(Tier::Subreaper)));
        assert_eq!(e.extra.get("futureKey"), Some(&serde_json::json!({"a": 1})));
        assert_eq!(serde_json::to_string(&e).unwrap(), text);
        // Without a keeper its keys stay absent, as before.
        assert!(!before("pending").contains("keeper"));

        let odd: Entry = serde_json::from_str(before("odd")).unwrap();
        assert_eq!(odd.signal.as_ref().and_then(SignalName::signal).map(|s| s.as_raw()), Some(42));
        assert_eq!(odd.containment, Some(Tier::Other("futuretier")), "a newer version's tier is kept");
        assert_eq!(serde_json::to_string(&odd).unwrap(), before("odd"));
        let odd2: Entry = serde_json::from_str(before("odd2")).unwrap();
        assert_eq!(odd2.signal.as_ref().map(SignalName::name).as_deref(), Some("SIGWHAT"));
        assert_eq!(odd2.signal.as_ref().and_then(SignalName::signal), None);
        assert_eq!(odd2.containment, Some(Tier::Group));
        assert_eq!(serde_json::to_string(&odd2).unwrap(), before("odd2"));
    }

    #[test]
    fn every_key_an_old_file_can_hold_writes_back_the_same() {
        let every: Entry = serde_json::from_str(before("every")).unwrap();
        assert_eq!(
            every.cleanup_state,
            CleanupState::Running { at_ms: 24, runner: None, child: ProcRef::new(25, None) }
        );
        assert_eq!((every.starter, every.keeper), (Some(ProcRef::new(15, None)), Some(ProcRef::new(17, None))));
        assert_eq!(serde_json::to_string(&every).unwrap(), before("every"));
        // The fewest keys the old code read: what it wrote back, this writes.
        let minimal: Entry = serde_json::from_str(before("minimal_in")).unwrap();
        assert_eq!(serde_json::to_string(&minimal).unwrap(), before("minimal_out"));
    }

    #[test]
    fn every_signal_name_round_trips() {
        for n in 1..65 {
            let Some(s) = crate::sys::Signal::from_raw(n) else { continue };
            let json = serde_json::to_string(&SignalName::of(s)).unwrap();
            assert_eq!(json, format!("\"{}\"", s.name()));
            let back: SignalName = serde_json::from_str(&json).unwrap();
            assert_eq!(back, SignalName::of(s), "{json}");
        }
    }

    #[test]
    fn the_lifecycle_moves_forward_and_keeps_what_it_went_through() {
        let mut s = CleanupState::Pending;
        s.spawned(CHILD);
        assert_eq!(s, CleanupState::Pending, "nothing spawns unclaimed");
        s.claim(AT, RUNNER);
        s.claim(AT + 1, ProcRef::new(1, None));
        assert_eq!(s, CleanupState::Claimed { at_ms: AT, runner: Some(RUNNER) }, "claimed once");
        s.spawned(CHILD);
        assert_eq!(s, CleanupState::Running { at_ms: AT, runner: Some(RUNNER), child: CHILD });
        assert!(s.is_unsettled());
        s.finish(result());
        assert_eq!(
            s,
            CleanupState::Done { at_ms: Some(AT), runner: Some(RUNNER), child: Some(CHILD), result: result() }
        );
        assert!(!s.is_unsettled() && s.is_claimed());
    }
}
