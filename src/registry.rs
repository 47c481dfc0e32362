//! Entries on disk: the crash-safe registry that every managed supervisor writes into, so that
//! after any crash `reap` can find what still runs (ARCHITECTURE.md, "The registry and identity").
//!
//! Layout under the state dir (mode 0700, refused if another user can write it):
//!
//! ```text
//! lock                 global lock: id allocation and name uniqueness
//! names/<hash>.lock    one lock per name: concurrent `start --replace` of a name serialize
//! seq                  the last id number handed out (ids are never reused)
//! procs/<id>/entry.json    the entry: what was started, its identity, its result
//! procs/<id>/lock          per-entry lock for read-modify-write
//! procs/<id>/supervisor.json   the supervisor's identity, apart from the entry: a corrupt
//!                      entry whose supervisor lives is left in place and still reachable
//! procs/<id>/stdout.log, stderr.log, combined.log (+ .1 after rotation), supervisor.log
//! corrupt/<id>-<ms>/   entries that could not be read, set aside whole (logs kept)
//! ```
//!
//! Every write is tmp file + fsync + rename + fsync of the directory, under the entry's lock,
//! as a read-modify-write: a supervisor and `stop`/`reap`/`update` writing the same entry never
//! lose each other's fields (unknown fields are carried through, too). A new entry is built in a
//! dot-directory and renamed into `procs/` whole, so readers never see a half-made entry.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::ready::ReadySpec;
use crate::status::Status;
use crate::status::StopReason;
use crate::sys::procfs;
use crate::sys::{Pid, process};

/// The state dir's environment override.
pub const STATE_DIR_ENV: &str = "SHEEPDOG_STATE_DIR";

/// Errors of the registry; each names the path it is about.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("no state dir: set {STATE_DIR_ENV}, XDG_STATE_HOME or HOME")]
    NoStateDir,
    #[error("unable to use state dir {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A write into the state dir failed (a full disk, a read-only mount): what was to be
    /// recorded was not. Status 74 where a command's result is at stake.
    #[error("unable to write {path}: {source}")]
    NotWritten {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("state dir {path} is writable by other users (mode {mode:04o}); refusing to use it (chmod 700 it)")]
    Insecure { path: PathBuf, mode: u32 },
    #[error("state dir {path} is owned by uid {owner}, not {me}; refusing to use it")]
    NotOwner { path: PathBuf, owner: u32, me: u32 },
    #[error("state dir {0} is not a directory")]
    NotADirectory(PathBuf),
    #[error("no entry with id or name '{0}'")]
    NotFound(String),
    #[error("the name '{name}' is ambiguous: {candidates}; use an id")]
    Ambiguous { name: String, candidates: String },
    #[error("the name '{name}' is already used by running entry {id}")]
    NameInUse { name: String, id: String },
    #[error("corrupt entry {path}: {reason}")]
    Corrupt { path: PathBuf, reason: String },
}

/// Opens (creating, 0600) the lock file at `path` and takes its exclusive lock, held until the
/// file is dropped. Errors: `Io` naming the path.
fn lock_file(path: &Path) -> Result<File, RegistryError> {
    let f = OpenOptions::new().create(true).truncate(false).write(true).mode(0o600).open(path).map_err(io_at(path))?;
    f.lock().map_err(io_at(path))?;
    Ok(f)
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> RegistryError + '_ {
    move |source| RegistryError::Io { path: path.to_path_buf(), source }
}

fn write_at(path: &Path) -> impl FnOnce(io::Error) -> RegistryError + '_ {
    move |source| RegistryError::NotWritten { path: path.to_path_buf(), source }
}

impl RegistryError {
    /// True when a write failed (`NotWritten`): the state was not recorded, and a command whose
    /// result was to be recorded reports status 74 ([`crate::exit::NOT_RECORDED`]).
    pub fn is_not_written(&self) -> bool {
        matches!(self, RegistryError::NotWritten { .. })
    }
}

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
    pub signal: Option<String>,
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

/// What a supervisor records when its tree is done ([`Entry::record_result`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SupervisorResult {
    pub status: Status,
    /// The human line (`exited (0)`, `stopped (owner exited)`, `timed out after 2s`).
    pub text: String,
    /// The command's own exit code, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that killed the command (`SIGTERM`), when one did.
    pub signal: Option<String>,
    /// What began the stop; `None` when the command exited on its own.
    pub stop_reason: Option<StopReason>,
    pub tree_gone: bool,
    /// The tree's cgroup could not be removed (`reap` removes it later).
    pub cgroup_left: bool,
}

/// One managed process, as stored in `procs/<id>/entry.json`. Field names are camelCase for
/// hosts written in TypeScript.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub id: String,
    pub name: Option<String>,
    pub session_id: Option<String>,
    /// Provider pid, once spawned.
    pub pid: Option<i32>,
    pub pgid: Option<i32>,
    /// Unix ms.
    pub started_at: u64,
    /// The command as one short line for listings.
    pub command_preview: String,
    /// Byte-exact (see [`OsText`]).
    pub argv: Vec<OsText>,
    pub cwd: OsText,
    pub owner_pid: Option<i32>,
    /// The owner's start time (clock ticks) when the entry was made: with the pid, its identity,
    /// so `reap` can tell that the owner died even after its pid was reused.
    #[serde(default)]
    pub owner_start_time: Option<u64>,
    /// The `sheepdog start` process that created the entry, while the entry is `starting`:
    /// never signalled, only checked for life, so a `start` in progress is not mistaken for a
    /// crash.
    pub starter_pid: Option<i32>,
    pub starter_start_time: Option<u64>,
    pub supervisor_pid: Option<i32>,
    /// The supervisor's keeper (`crate::keeper`): the forked copy that spawned the provider and
    /// runs the supervision loop, with its start time (clock ticks). While either it or the
    /// supervisor lives, the entry is supervised: the survivor of the other's SIGKILL stops
    /// the tree and records it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keeper_pid: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keeper_start_time: Option<u64>,
    /// Identity: boot id, provider start time (clock ticks), supervisor start time, uid.
    pub boot_id: String,
    pub start_time: Option<u64>,
    pub supervisor_start_time: Option<u64>,
    pub uid: u32,
    /// The provider's session id (for a managed entry, the supervisor's own session). A process
    /// in the recorded group *and* session, of the same uid, started no earlier than the
    /// provider, is the entry's even after the provider is gone: the group and session numbers
    /// could only have been reused if every one of their members had died first.
    #[serde(default)]
    pub sid: Option<i32>,
    /// Descendants the supervisor saw while it ran (subreaper tier), by identity: `reap` and
    /// `stop` find them without a tag, so members that cleared their environment (`env -i`,
    /// `su -`, `sudo`) are still caught. Dead ones are pruned on each write.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<RecordedMember>,
    /// The random token in the provider's `SHEEPDOG_TAG`, by which `reap` recognises its
    /// descendants after the supervisor is gone.
    pub tag: String,
    pub cleanup: Option<Cleanup>,
    /// Unix ms when a cleanup run was claimed: the claim makes "at most once" hold even if the
    /// runner is killed midway.
    pub cleanup_started_at: Option<u64>,
    /// Who claimed the cleanup run (pid and start time): while it lives, others wait for its
    /// result instead of reporting the cleanup as unfinished.
    pub cleanup_runner_pid: Option<i32>,
    pub cleanup_runner_start_time: Option<u64>,
    /// The cleanup command's own process (`sh -c`, its group leader), once spawned: a cleanup
    /// whose runner was killed may still run, and counts as running while it does.
    #[serde(default)]
    pub cleanup_pid: Option<i32>,
    #[serde(default)]
    pub cleanup_start_time: Option<u64>,
    /// How the cleanup ended, once it has.
    pub cleanup_result: Option<CleanupResult>,
    /// The extra environment given with `--env`, as `K=V`, byte-exact (the cleanup gets it too).
    pub env: Vec<OsText>,
    pub stop: StopTimings,
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
    pub signal: Option<String>,
    /// What began the stop: `signal` (sheepdog stop), `owner`, `timeout`, `reap`, ...
    pub stop_reason: Option<crate::status::StopReason>,
    pub tree_gone: Option<bool>,
    /// Unix ms.
    pub ended_at: Option<u64>,
    /// The tier that keeps the tree: `cgroup`, `subreaper` or `group` (recorded before the
    /// spawn; `None` in entries written before the tiers existed: treated as `subreaper`).
    pub containment: Option<String>,
    /// Why a stronger tier was not used (the cgroup probe's refusal); `None` in the cgroup tier.
    pub containment_reason: Option<String>,
    /// The tree's cgroup directory (absolute path), in the cgroup tier.
    pub cgroup: Option<String>,
    /// The inode of that directory: nothing acts on the path unless it still matches.
    pub cgroup_inode: Option<u64>,
    /// True when the cgroup could not be removed after the tree was gone; `reap` removes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup_leftover: Option<bool>,
    /// What `start` asked for (`--containment`, `--memory-max` in bytes, `--pids-max`), kept
    /// for `restart`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containment_asked: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_max: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids_max: Option<u64>,
    /// Unix ms when a reply of `sheepdog mcp` told the agent that this entry finished: each
    /// finished entry is reported once, also across server restarts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_reported_at: Option<u64>,
    /// A name derived from what the command runs (`npm run dev` -> `npm-run-dev`), shown when
    /// none was given; not unique, never looked up (see [`derived_name`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_name: Option<String>,
    /// Started with `--stdin pipe`: its stdin is the FIFO `procs/<id>/stdin` its supervisor
    /// holds open (see `manager::send`); false: `/dev/null`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stdin_pipe: bool,
    /// The readiness options it was started with (`--ready-port`, `--ready-log`,
    /// `--ready-listen`, `--ready-timeout`), kept for `restart`.
    pub ready: Option<ReadySpec>,
    /// The entry this one replaced (`restart`, `start --replace`).
    pub restart_of: Option<String>,
    /// Fields this version does not know, carried through every rewrite.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// Statuses after which nothing of the entry runs (tokens of [`Status`]).
pub const FINISHED: &[&str] = &["exited", "killed", "stopped", "timedOut", "reaped", "lost"];

impl Entry {
    /// True once a result is recorded.
    pub fn is_finished(&self) -> bool {
        self.status.is_finished()
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

    /// True if the entry was recorded during this boot.
    pub fn this_boot(&self) -> bool {
        self.boot_id == procfs::boot_id()
    }

    /// True if the recorded supervisor, or its keeper, is still that process (boot, pid, start
    /// time) and alive: either one stops the tree when the other is killed (`crate::keeper`).
    pub fn supervisor_alive(&self) -> bool {
        self.this_boot()
            && (identity_alive(self.supervisor_pid, self.supervisor_start_time)
                || identity_alive(self.keeper_pid, self.keeper_start_time))
    }

    /// The live process of the supervisor's chain to signal and wait on: the supervisor, else
    /// (after its SIGKILL, while the keeper stops the tree) the keeper. `None` if both are gone.
    pub fn live_supervisor(&self) -> Option<(i32, Option<u64>)> {
        if !self.this_boot() {
            return None;
        }
        [(self.supervisor_pid, self.supervisor_start_time), (self.keeper_pid, self.keeper_start_time)]
            .into_iter()
            .find(|(p, t)| identity_alive(*p, *t))
            .and_then(|(p, t)| Some((p?, t)))
    }

    /// The root below which the entry's tree hangs while it is supervised: the keeper while it
    /// lives (the tree is its descendants), else the supervisor.
    pub fn tree_root(&self) -> Option<i32> {
        if identity_alive(self.keeper_pid, self.keeper_start_time) { self.keeper_pid } else { self.supervisor_pid }
    }

    /// True while the entry is `starting` and its `sheepdog start` process still lives.
    pub fn starter_alive(&self) -> bool {
        self.status == crate::status::Status::Starting
            && self.this_boot()
            && identity_alive(self.starter_pid, self.starter_start_time)
    }

    /// True while a claimed cleanup has no result and its runner still lives.
    pub fn cleanup_running(&self) -> bool {
        self.cleanup_started_at.is_some()
            && self.cleanup_result.is_none()
            && self.this_boot()
            && (identity_alive(self.cleanup_runner_pid, self.cleanup_runner_start_time)
                || identity_alive(self.cleanup_pid, self.cleanup_start_time))
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
        if reason.is_some() {
            self.stop_reason = reason;
            self.tree_gone = Some(tree_gone);
        }
        self.ended_at = Some(now_ms());
        true
    }

    /// Transition the supervisor makes once the command runs: its pid, group, start time
    /// (clock ticks) and session, and `starting` → `running`. Guard: a result recorded
    /// meanwhile (a stop or reap while the command was being spawned) is kept, and the
    /// returned `true` tells the supervisor to honour it by stopping the tree at once.
    pub fn record_spawned(&mut self, pid: i32, pgid: i32, start_time: Option<u64>, sid: Option<i32>) -> bool {
        self.pid = Some(pid);
        self.pgid = Some(pgid);
        self.start_time = start_time;
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
        if let Some(c) = r.exit_code {
            self.exit_code = Some(c);
        }
        if let Some(s) = r.signal {
            self.signal = Some(s);
        }
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

    /// True while a cleanup is set, has not been claimed, and could still run (this boot): a
    /// stop, owner death, the turn timeout or `reap` will run it; `clear` refuses to drop it.
    pub fn cleanup_pending(&self) -> bool {
        self.cleanup.is_some() && self.cleanup_started_at.is_none() && self.this_boot()
    }

    /// True if the entry has an owner and it is no longer that process (identity-checked when
    /// its start time was recorded).
    pub fn owner_gone(&self) -> bool {
        let Some(pid) = self.owner_pid.and_then(Pid::new) else { return false };
        if !self.this_boot() {
            return true;
        }
        match self.owner_start_time {
            Some(t) => procfs::start_time(pid) != Some(t),
            None => !procfs::is_alive(pid),
        }
    }

    /// Unix ms at which the turn timeout (`--timeout`) expires, if one is set.
    pub fn timeout_at_ms(&self) -> Option<u64> {
        self.timeout_ms.map(|t| self.started_at.saturating_add(t))
    }

    /// True if the recorded provider is still that process and alive.
    pub fn provider_alive(&self) -> bool {
        self.this_boot() && identity_alive(self.pid, self.start_time)
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

/// True if `pid` is alive with exactly `start_time` (and our uid).
pub fn identity_alive(pid: Option<i32>, start_time: Option<u64>) -> bool {
    let (Some(pid), Some(t)) = (pid.and_then(Pid::new), start_time) else {
        return false;
    };
    procfs::start_time(pid) == Some(t) && procfs::uid(pid) == Some(process::getuid())
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

/// A fresh random token: 32 hex digits from /dev/urandom (time and pid if unreadable).
pub fn new_tag() -> String {
    let mut b = [0u8; 16];
    let ok = File::open("/dev/urandom").and_then(|mut f| io::Read::read_exact(&mut f, &mut b)).is_ok();
    if !ok {
        let seed = now_ms() as u128 ^ ((std::process::id() as u128) << 64);
        b = seed.to_le_bytes();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Now, in unix milliseconds.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// An entry that could not be read, and where it was moved (`None`: left in place, by a
/// read-only listing, or because its supervisor is alive and will rewrite it).
#[derive(Debug)]
pub struct SetAside {
    pub path: PathBuf,
    pub reason: String,
    pub moved_to: Option<PathBuf>,
    /// The entry's supervisor is alive (by `supervisor.json`): it rewrites the entry from what
    /// it holds at its next write, and `stop` still reaches it.
    pub supervisor_alive: bool,
}

/// `procs/<id>/supervisor.json`: who supervises the entry, written by the supervisor when it
/// starts, apart from `entry.json`, so that a corrupt entry whose supervisor lives is neither
/// set aside nor out of `stop`'s reach. Only a hint: nothing is signalled unless the identity
/// (boot, pid, start time, uid) still matches.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SupervisorFile {
    pub pid: i32,
    /// Clock ticks.
    pub start_time: u64,
    pub boot_id: String,
    /// The entry's `maxStopMs`: how long `stop` waits for it.
    pub max_stop_ms: u64,
}

/// The state dir.
#[derive(Clone, Debug)]
pub struct Registry {
    root: PathBuf,
}

/// Resolves the state dir: `explicit`, else `$SHEEPDOG_STATE_DIR`, else
/// `$XDG_STATE_HOME/sheepdog`, else `~/.local/state/sheepdog` (never /tmp), made absolute
/// against the current directory. Absolute once, here: every process sheepdog starts (the
/// detached supervisor runs in `/`) is handed this path, so a relative one would name another
/// directory there. Errors: `NoStateDir`; `Io` when the current directory cannot be read.
pub fn state_dir(explicit: Option<PathBuf>) -> Result<PathBuf, RegistryError> {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    let dir = match explicit {
        Some(p) => p,
        None => match (env(STATE_DIR_ENV), env("XDG_STATE_HOME"), env("HOME")) {
            (Some(p), _, _) => p,
            (None, Some(x), _) => x.join("sheepdog"),
            (None, None, Some(h)) => h.join(".local/state/sheepdog"),
            (None, None, None) => return Err(RegistryError::NoStateDir),
        },
    };
    std::path::absolute(&dir).map_err(io_at(&dir))
}

/// Refuses a state dir that is not a directory, belongs to another user or that others can
/// write.
fn check_private(root: &Path, meta: &fs::Metadata) -> Result<(), RegistryError> {
    if !meta.is_dir() {
        return Err(RegistryError::NotADirectory(root.to_path_buf()));
    }
    let me = process::getuid();
    if meta.uid() != me {
        return Err(RegistryError::NotOwner { path: root.to_path_buf(), owner: meta.uid(), me });
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(RegistryError::Insecure { path: root.to_path_buf(), mode });
    }
    Ok(())
}

fn mkdir_private(path: &Path) -> Result<(), RegistryError> {
    match fs::DirBuilder::new().recursive(true).mode(0o700).create(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io_at(path)(e)),
    }
}

impl Registry {
    /// Opens (creating with mode 0700) the state dir. Refuses one that another user can write
    /// or that belongs to another user.
    pub fn open(explicit: Option<PathBuf>) -> Result<Registry, RegistryError> {
        let root = state_dir(explicit)?;
        mkdir_private(&root)?;
        let meta = fs::metadata(&root).map_err(io_at(&root))?;
        check_private(&root, &meta)?;
        let reg = Registry { root };
        mkdir_private(&reg.procs())?;
        Ok(reg)
    }

    /// Opens the state dir only if it exists: read-only commands (`ps`, `logs`, `wait`) never
    /// create it or its parents. `Ok(None)`: there is no state (nothing was ever started here).
    /// Errors: as [`Registry::open`] for an existing dir.
    pub fn open_existing(explicit: Option<PathBuf>) -> Result<Option<Registry>, RegistryError> {
        let root = state_dir(explicit)?;
        let meta = match fs::metadata(&root) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_at(&root)(e)),
        };
        check_private(&root, &meta)?;
        Ok(Some(Registry { root }))
    }

    /// Gives back the id of an entry that was created and removed because its start failed, if
    /// no later id was handed out meanwhile: failed starts do not use up ids.
    pub fn release_id(&self, id: &str) {
        let Ok(_lock) = self.global_lock() else { return };
        let seq_path = self.root.join("seq");
        let last: u64 = fs::read_to_string(&seq_path).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
        if id_number(id) == last && !self.dir(id).exists() {
            let _ = write_atomic(&seq_path, format!("{}\n", last - 1).as_bytes());
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn procs(&self) -> PathBuf {
        self.root.join("procs")
    }

    /// `procs/<id>`.
    pub fn dir(&self, id: &str) -> PathBuf {
        self.procs().join(id)
    }

    /// `procs/<id>/<file>`.
    pub fn file(&self, id: &str, file: &str) -> PathBuf {
        self.dir(id).join(file)
    }

    fn global_lock(&self) -> Result<File, RegistryError> {
        lock_file(&self.root.join("lock"))
    }

    /// A lock serializing everything done under one name (`start --name N --replace`: find the
    /// running N, stop it, start the new one), held until dropped: `names/<hash>.lock`, the
    /// name hashed (FNV-1a, 64 bits) so any name makes a valid file name. Two names sharing a
    /// hash only wait for each other. Errors: `Io` (the lock file cannot be made).
    pub fn name_lock(&self, name: &str) -> Result<File, RegistryError> {
        let dir = self.root.join("names");
        mkdir_private(&dir)?;
        let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3));
        lock_file(&dir.join(format!("{hash:016x}.lock")))
    }

    /// Creates a new entry: allocates `proc_<n>`, checks the name is not used by a live entry,
    /// and renames the complete directory into place, all under the global lock.
    pub fn create(&self, mut entry: Entry) -> Result<Entry, RegistryError> {
        let _lock = self.global_lock()?;
        if let Some(name) = &entry.name {
            self.check_name_free(name, None)?;
        }
        let seq_path = self.root.join("seq");
        let last: u64 = fs::read_to_string(&seq_path).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
        let mut n = last + 1;
        while self.dir(&format!("proc_{n}")).exists() {
            n += 1;
        }
        entry.id = format!("proc_{n}");
        write_atomic(&seq_path, format!("{n}\n").as_bytes())?;
        let tmp = self.procs().join(format!(".new-{}", entry.id));
        let _ = fs::remove_dir_all(&tmp);
        mkdir_private(&tmp)?;
        write_atomic(&tmp.join("entry.json"), &to_json(&entry))?;
        let dest = self.dir(&entry.id);
        fs::rename(&tmp, &dest).map_err(io_at(&dest))?;
        sync_dir(&self.procs())?;
        Ok(entry)
    }

    /// Errors with `NameInUse` if a live entry other than `except` has `name`: one whose
    /// supervisor, provider or `start` command still lives. Call under the global lock.
    fn check_name_free(&self, name: &str, except: Option<&str>) -> Result<(), RegistryError> {
        let (entries, _) = self.list();
        let taken = |e: &&Entry| {
            Some(e.id.as_str()) != except
                && e.name.as_deref() == Some(name)
                && !e.is_finished()
                && (e.supervisor_alive() || e.provider_alive() || e.starter_alive())
        };
        match entries.iter().find(taken) {
            Some(other) => Err(RegistryError::NameInUse { name: name.to_string(), id: other.id.clone() }),
            None => Ok(()),
        }
    }

    /// Renames an entry, under the global lock that `create` takes, so two live entries never
    /// share a name. Errors: `NameInUse`, `NotFound`.
    pub fn rename(&self, id: &str, name: &str) -> Result<Entry, RegistryError> {
        self.update_renaming(id, Some(name), |_| true).map(|(e, _)| e)
    }

    /// One locked change of an entry that may also rename it: `f` decides on the entry as it is
    /// now (under its lock) and returns whether to go on; only then are its changes and the
    /// new `name` written, together. With a name, under the global lock that [`Registry::create`]
    /// takes, so two live entries never share one. Returns the entry (as written, or as read)
    /// and whether it was written. Errors: `NameInUse`, `NotFound`.
    pub fn update_renaming(
        &self,
        id: &str,
        name: Option<&str>,
        f: impl FnOnce(&mut Entry) -> bool,
    ) -> Result<(Entry, bool), RegistryError> {
        let _names = match name {
            Some(n) => {
                let lock = self.global_lock()?;
                self.check_name_free(n, Some(id))?;
                Some(lock)
            }
            None => None,
        };
        self.update_if(id, |e| {
            let go = f(e);
            if let (true, Some(n)) = (go, name) {
                e.name = Some(n.to_string());
            }
            go
        })
    }

    /// Reads one entry. Errors: `NotFound`, `Corrupt` (not set aside: see [`Registry::list`]).
    pub fn read(&self, id: &str) -> Result<Entry, RegistryError> {
        self.read_with(None, id, &mut Vec::new())
    }

    /// [`Registry::read`] into `buf` (cleared first): a listing reuses one buffer, and reading
    /// into its spare capacity needs no `statx` for the size (10,000 entries: 10,000 syscalls).
    /// With `procs` (the open `procs/` directory), the file is opened relative to it.
    fn read_with(&self, procs: Option<&File>, id: &str, buf: &mut Vec<u8>) -> Result<Entry, RegistryError> {
        use std::os::fd::AsFd;
        let path = self.file(id, "entry.json");
        buf.clear();
        let file = match procs {
            Some(d) => process::open_at(d.as_fd(), Path::new(id).join("entry.json").as_os_str()),
            None => File::open(&path),
        };
        match file.and_then(|mut f| io::Read::read_to_end(&mut f, buf)) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(RegistryError::NotFound(id.to_string())),
            Err(e) => return Err(RegistryError::Corrupt { path, reason: e.to_string() }),
        }
        serde_json::from_slice(buf).map_err(|e| RegistryError::Corrupt { path, reason: e.to_string() })
    }

    /// Every readable entry, oldest first, and the ones that could not be read (reported, left
    /// in place: a listing never moves files; [`Registry::list_sweeping`] does, for writers).
    pub fn list(&self) -> (Vec<Entry>, Vec<SetAside>) {
        let mut entries = Vec::new();
        let mut aside = Vec::new();
        let Ok(dir) = fs::read_dir(self.procs()) else {
            return (entries, aside);
        };
        let mut buf = Vec::with_capacity(64 * 1024);
        let procs = File::open(self.procs()).ok();
        for d in dir.flatten() {
            let name = d.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            let unreadable = |path: PathBuf, reason: String| SetAside {
                path,
                reason,
                moved_to: None,
                supervisor_alive: self.live_supervisor(&name).is_some(),
            };
            match self.read_with(procs.as_ref(), &name, &mut buf) {
                Ok(e) => entries.push(e),
                Err(RegistryError::Corrupt { path, reason }) => aside.push(unreadable(path, reason)),
                // Removed meanwhile (a `clear`), or a directory being made: not an entry.
                Err(RegistryError::NotFound(_)) if !d.path().is_dir() => {}
                Err(RegistryError::NotFound(_)) => {
                    aside.push(unreadable(self.file(&name, "entry.json"), "entry.json is missing".into()))
                }
                Err(e) => aside.push(unreadable(d.path(), e.to_string())),
            }
        }
        // Keys computed once and the entries moved once: comparing by `id_number` and moving
        // ~1 KiB entries inside the sort cost a listing of 10,000 about a fifth of its time.
        entries.sort_by_cached_key(|e| (e.started_at, id_number(&e.id)));
        (entries, aside)
    }

    /// [`Registry::list`] for commands that write (`stop`, `reap`, `clear`): unreadable entries
    /// are moved whole to `corrupt/`, so nothing is lost and they stop hiding others, except
    /// one whose supervisor is alive (it rewrites its entry from what it holds).
    pub fn list_sweeping(&self) -> (Vec<Entry>, Vec<SetAside>) {
        let (entries, aside) = self.list();
        let aside = aside
            .into_iter()
            .map(|a| {
                let id = a.path.parent().and_then(|d| d.file_name()).map(|n| n.to_string_lossy().into_owned());
                match id {
                    Some(id) if !a.supervisor_alive && a.moved_to.is_none() => self.set_aside(&id, a),
                    _ => a,
                }
            })
            .collect();
        (entries, aside)
    }

    fn set_aside(&self, id: &str, mut a: SetAside) -> SetAside {
        let corrupt = self.root.join("corrupt");
        let dest = corrupt.join(format!("{id}-{}", now_ms()));
        let moved = mkdir_private(&corrupt).is_ok() && fs::rename(self.dir(id), &dest).is_ok();
        if moved {
            // The entry cannot be read: its event names the id alone.
            let e = Entry { id: id.to_string(), ..Entry::default() };
            let kind =
                crate::journal::Kind::SetAside { reason: a.reason.clone(), moved_to: Some(dest.display().to_string()) };
            let _ = crate::journal::append(&self.root, &e, kind);
        }
        a.moved_to = moved.then_some(dest);
        a
    }

    /// Records the entry's supervisor in `supervisor.json` (this process). Not synced: a hint,
    /// checked against the kernel before use. Errors: the write's.
    pub fn record_supervisor(&self, id: &str, max_stop_ms: u64) -> Result<(), RegistryError> {
        let me = process::getpid();
        let f = SupervisorFile {
            pid: me.as_raw(),
            start_time: procfs::start_time(me).unwrap_or(0),
            boot_id: procfs::boot_id(),
            max_stop_ms,
        };
        let path = self.file(id, "supervisor.json");
        let tmp = self.file(id, &format!(".supervisor.json.tmp-{}", me.as_raw()));
        let bytes = serde_json::to_vec(&f).unwrap_or_default();
        let written = fs::write(&tmp, bytes).and_then(|()| fs::rename(&tmp, &path));
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        written.map_err(write_at(&path))
    }

    /// The entry's supervisor by `supervisor.json`, if it is still that process (this boot,
    /// pid, start time, uid).
    pub fn live_supervisor(&self, id: &str) -> Option<SupervisorFile> {
        let bytes = fs::read(self.file(id, "supervisor.json")).ok()?;
        let f: SupervisorFile = serde_json::from_slice(&bytes).ok()?;
        (f.boot_id == procfs::boot_id() && identity_alive(Some(f.pid), Some(f.start_time))).then_some(f)
    }

    /// What a `stop` needs of an entry that cannot be read but whose supervisor lives: its id
    /// and the supervisor's identity (the supervisor rewrites the entry when it acts on the
    /// stop). `None` when the supervisor is not alive.
    pub fn stand_in(&self, id: &str) -> Option<Entry> {
        let f = self.live_supervisor(id)?;
        Some(Entry {
            id: id.to_string(),
            supervisor_pid: Some(f.pid),
            supervisor_start_time: Some(f.start_time),
            boot_id: f.boot_id,
            uid: process::getuid(),
            status: Status::Running,
            stop: StopTimings { max_stop_ms: f.max_stop_ms, ..StopTimings::default() },
            ..Entry::default()
        })
    }

    /// Writes `entry` as the entry's whole file, under its lock, without reading what is there:
    /// how a live supervisor repairs its own entry found corrupt. Errors: `NotFound`, the write's.
    pub fn rewrite(&self, entry: &Entry) -> Result<(), RegistryError> {
        if !self.dir(&entry.id).is_dir() {
            return Err(RegistryError::NotFound(entry.id.clone()));
        }
        let _lock = self.entry_lock(&entry.id)?;
        write_atomic(&self.file(&entry.id, "entry.json"), &to_json(entry))
    }

    /// Finds an entry by id, or by name. A name means the live entry with that name (running,
    /// starting or orphaned: names are unique among those), else the newest finished one. Two
    /// live entries with one name (only possible across a crash) are `Ambiguous`, listed.
    pub fn find(&self, key: &str) -> Result<Entry, RegistryError> {
        if !key.contains('/') && !key.starts_with('.') {
            match self.read(key) {
                Ok(e) => return Ok(e),
                Err(RegistryError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        let (entries, _) = self.list();
        let mut named: Vec<Entry> = entries.into_iter().filter(|e| e.name.as_deref() == Some(key)).collect();
        let live: Vec<&Entry> = named
            .iter()
            .filter(|e| !e.is_finished() && (e.supervisor_alive() || e.provider_alive() || e.starter_alive()))
            .collect();
        if live.len() > 1 {
            let candidates = live.iter().map(|e| format!("{} ({})", e.id, e.status)).collect::<Vec<_>>().join(", ");
            return Err(RegistryError::Ambiguous { name: key.to_string(), candidates });
        }
        named.sort_by_key(|e| (!e.is_finished(), e.started_at));
        named.pop().ok_or_else(|| RegistryError::NotFound(key.to_string()))
    }

    /// The entry's lock (`procs/<id>/lock`), held until dropped. A lock file that cannot be
    /// created (a read-only state dir) is opened for reading: `flock` works on either.
    fn entry_lock(&self, id: &str) -> Result<File, RegistryError> {
        let lock_path = self.file(id, "lock");
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&lock_path)
            .or_else(|e| File::open(&lock_path).map_err(|_| e))
            .map_err(io_at(&lock_path))?;
        f.lock().map_err(io_at(&lock_path))?;
        Ok(f)
    }

    /// Read-modify-write of one entry under its lock. `f` sees the latest version on disk.
    pub fn update<F: FnOnce(&mut Entry)>(&self, id: &str, f: F) -> Result<Entry, RegistryError> {
        self.update_if(id, |e| {
            f(e);
            true
        })
        .map(|(e, _)| e)
    }

    /// [`Registry::update`], written only if `f` returns true (else nothing of its changes is);
    /// returns the entry as written or as read, and whether it was written.
    pub fn update_if<F: FnOnce(&mut Entry) -> bool>(&self, id: &str, f: F) -> Result<(Entry, bool), RegistryError> {
        if !self.dir(id).is_dir() {
            return Err(RegistryError::NotFound(id.to_string()));
        }
        // Removed meanwhile (`clear` renames the directory away): not found, as if a moment later.
        let gone = |e: RegistryError| match e {
            RegistryError::Io { source, .. } | RegistryError::NotWritten { source, .. }
                if source.kind() == io::ErrorKind::NotFound =>
            {
                RegistryError::NotFound(id.to_string())
            }
            e => e,
        };
        let lock = self.entry_lock(id).map_err(gone)?;
        let entry = self.read(id)?;
        let mut changed = entry.clone();
        if !f(&mut changed) {
            return Ok((entry, false));
        }
        write_atomic(&self.file(id, "entry.json"), &to_json(&changed)).map_err(gone)?;
        // The events this write means, appended while the entry's lock is held: in order.
        crate::journal::transitions(&self.root, &entry, &changed);
        drop(lock);
        Ok((changed, true))
    }

    /// Removes an entry and its logs.
    pub fn remove(&self, id: &str) -> Result<(), RegistryError> {
        let dir = self.dir(id);
        let was = self.read(id).ok();
        // Rename first so a concurrent reader never sees a half-deleted entry.
        let tmp = self.procs().join(format!(".del-{id}-{}", now_ms()));
        fs::rename(&dir, &tmp).map_err(io_at(&dir))?;
        if let Some(e) = &was {
            let _ = crate::journal::append(&self.root, e, crate::journal::Kind::Cleared);
        }
        fs::remove_dir_all(&tmp).map_err(io_at(&tmp))?;
        sync_dir(&self.procs())
    }
}

fn id_number(id: &str) -> u64 {
    id.strip_prefix("proc_").and_then(|n| n.parse().ok()).unwrap_or(u64::MAX)
}

fn to_json(entry: &Entry) -> Vec<u8> {
    let mut v = serde_json::to_vec_pretty(entry).unwrap_or_default();
    v.push(b'\n');
    v
}

/// tmp file + fsync + rename + fsync of the directory: after a crash at any point the file is
/// either the old version or the new one, never a mix.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), RegistryError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let written = (|| {
        let mut f = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(write_at(&tmp))?;
        f.write_all(bytes).map_err(write_at(&tmp))?;
        f.sync_all().map_err(write_at(&tmp))?;
        fs::rename(&tmp, path).map_err(write_at(path))
    })();
    if written.is_err() {
        // A full disk leaves an empty temp file: never leave it behind.
        let _ = fs::remove_file(&tmp);
    }
    written?;
    sync_dir(dir)
}

fn sync_dir(dir: &Path) -> Result<(), RegistryError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io_at(dir))
}

#[cfg(test)]
mod transition_tests {
    use super::*;

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
            (e.status, e.pid, e.pgid, e.start_time, e.sid),
            (Status::Running, Some(4242), Some(4242), Some(77), Some(4000))
        );
        let mut stopped = Entry { status: Status::Stopped, ..Entry::default() };
        assert!(stopped.record_spawned(4243, 4243, None, None), "the supervisor must honour the stop");
        assert_eq!(stopped.status, Status::Stopped);
        assert_eq!(stopped.pid, Some(4243), "the pid is recorded all the same, for the stop to find");
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
            stop_reason: Some(StopReason::Signal),
            tree_gone: true,
            cgroup_left: true,
        });
        assert_eq!(e.status, Status::Killed);
        assert_eq!(e.status_text.as_deref(), Some("killed (SIGKILL)"));
        assert_eq!((e.signal.as_deref(), e.exit_code), (Some("SIGKILL"), None));
        assert_eq!((e.stop_reason, e.tree_gone, e.cgroup_leftover), (Some(StopReason::Signal), Some(true), Some(true)));
        assert!(e.ended_at.is_some());
    }

    #[test]
    fn members_are_kept_oldest_first_up_to_the_bound() {
        let mut e = Entry::default();
        let m = |pid, start_time| RecordedMember { pid, start_time };
        e.record_members(vec![m(30, 300), m(10, 100), m(20, 200), m(5, 100)], 3);
        assert_eq!(e.members, vec![m(5, 100), m(10, 100), m(20, 200)]);
    }
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
