//! The status vocabulary of a managed process: one enum for the registry, every `--json` view,
//! the MCP server and `top`.
//!
//! Serialized as one camelCase token (`running`, `exited`, `killed`, `stopped`, `timedOut`,
//! `orphaned`, `reaped`, `lost`, `starting`). Entries written by earlier versions stored
//! `timed out`; it is read as [`Status::TimedOut`]. An unknown stored word (a newer version's)
//! is read as [`Status::Lost`] rather than making the entry unreadable.
//!
//! The human line (`exited (0)`, `timed out after 2s`) is the entry's `statusText`, not this.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Where an entry is in its life.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Status {
    /// Registered; its supervisor has not yet spawned the command.
    #[default]
    Starting,
    /// The supervisor lives and runs the command.
    Running,
    /// The command exited by itself with a code (`exitCode`).
    Exited,
    /// The command was killed by a signal nobody at sheepdog sent (`signal`).
    Killed,
    /// Stopped by a stop trigger: `sheepdog stop`, owner death, a signal to the supervisor.
    Stopped,
    /// Stopped by its `--timeout`.
    TimedOut,
    /// Derived, never stored: the supervisor is gone but the tree is alive (`reap` stops it).
    Orphaned,
    /// `reap` stopped a tree whose supervisor was gone.
    Reaped,
    /// No result can be known: the supervisor is gone and nothing is alive, or a previous boot.
    Lost,
    /// A word this version does not know (a newer sheepdog's), kept as it was written so that
    /// rewriting the entry does not lose it. It claims nothing: not finished, so what the
    /// kernel says decides (`running` while its supervisor lives, else `orphaned` or `lost`), and
    /// nothing treats it as over while it may still run (no `clear`, no "re-read" signal).
    Other(&'static str),
}

/// Every status, in the order of a life.
pub const ALL: [Status; 9] = [
    Status::Starting,
    Status::Running,
    Status::Exited,
    Status::Killed,
    Status::Stopped,
    Status::TimedOut,
    Status::Orphaned,
    Status::Reaped,
    Status::Lost,
];

impl Status {
    /// The camelCase token, as in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Starting => "starting",
            Status::Running => "running",
            Status::Exited => "exited",
            Status::Killed => "killed",
            Status::Stopped => "stopped",
            Status::TimedOut => "timedOut",
            Status::Orphaned => "orphaned",
            Status::Reaped => "reaped",
            Status::Lost => "lost",
            Status::Other(word) => word,
        }
    }

    /// Reads a token, also the older stored spelling `timed out` (and `timed-out`,
    /// `timed_out`, any case). `None` for anything else.
    pub fn parse(s: &str) -> Option<Status> {
        let norm: String = s.chars().filter(|c| !matches!(c, ' ' | '-' | '_')).collect::<String>().to_lowercase();
        ALL.into_iter().find(|st| st.as_str().to_lowercase() == norm)
    }

    /// True once a result is recorded: nothing of the entry runs (its cleanup may still).
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            Status::Exited | Status::Killed | Status::Stopped | Status::TimedOut | Status::Reaped | Status::Lost
        )
    }

    /// True while something of the entry may run: `starting`, `running`, `orphaned`.
    pub fn is_live(self) -> bool {
        !self.is_finished()
    }

    /// A failure worth showing after the fact: `killed`, `timedOut`, `reaped`, `lost`
    /// (`exited` with a non-zero code is judged on the entry, see `view`).
    pub fn is_failure(self) -> bool {
        matches!(self, Status::Killed | Status::TimedOut | Status::Reaped | Status::Lost)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Status {
    type Err = String;
    fn from_str(s: &str) -> Result<Status, String> {
        Status::parse(s).ok_or_else(|| {
            format!(
                "invalid status '{s}' (possible values: {})",
                ALL.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
            )
        })
    }
}

/// One string of [`ALL`]'s tokens. A newer version's word (`Status::Other`) is outside the
/// enum: a new token is a schema change, made visible by the schema test.
impl schemars::JsonSchema for Status {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Status".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let tokens: Vec<&str> = ALL.iter().map(|s| s.as_str()).collect();
        schemars::json_schema!({
            "description": "Where an entry is in its life, one token (`statusText` is the human line).",
            "type": "string",
            "enum": tokens,
        })
    }
}

/// The longest unknown status word kept, and how many distinct ones: 32 bytes, 64 words. Past
/// either (not a status a sheepdog would write), the word reads as `lost`.
const OTHER_MAX_LEN: usize = 32;
const OTHER_MAX_WORDS: usize = 64;

/// `word` as a `&'static str`, each distinct word allocated once (so [`Status`] stays `Copy`
/// and a long-lived reader, `top` or the MCP server, does not leak per read).
fn intern(word: &str) -> Option<&'static str> {
    use std::collections::HashSet;
    use std::sync::{Mutex, OnceLock};
    static WORDS: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut words = WORDS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(w) = words.get(word) {
        return Some(w);
    }
    if word.len() > OTHER_MAX_LEN || words.len() >= OTHER_MAX_WORDS || word.is_empty() {
        return None;
    }
    let w: &'static str = Box::leak(word.to_owned().into_boxed_str());
    words.insert(w);
    Some(w)
}

impl Serialize for Status {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Status {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Status, D::Error> {
        let s = String::deserialize(d)?;
        Ok(Status::parse(&s).or_else(|| intern(&s).map(Status::Other)).unwrap_or(Status::Lost))
    }
}

/// What began a stop, as recorded in an entry's `stopReason`: the supervisor's trigger
/// (`signal`: a SIGTERM/SIGINT/SIGHUP, which is how `sheepdog stop` asks; `owner`; `stdinEof`;
/// `timeout`), or who acted past a supervisor that was gone or stuck (`stop`, `reap`). A word
/// this version does not know is kept as it was written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum StopReason {
    Signal,
    Owner,
    StdinEof,
    Timeout,
    ProviderExited,
    /// A process of the supervisor's chain was SIGKILLed and the survivor stopped the tree
    /// (see [`crate::keeper`]).
    SupervisorKilled,
    /// `sheepdog stop` stopped the recorded tree itself: the supervisor was gone or stuck.
    Stop,
    /// `reap` stopped the recorded tree of an entry whose supervisor was gone.
    Reap,
    #[serde(untagged)]
    Other(String),
}

/// Who ran a cleanup, as recorded in `cleanupResult.ranBy`: the entry's `supervisor`, `sheepdog
/// stop`, or `reap`. A word this version does not know is kept as it was written.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum CleanupRunner {
    #[default]
    Supervisor,
    Stop,
    Reap,
    #[serde(untagged)]
    Other(String),
}

impl fmt::Display for CleanupRunner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CleanupRunner::Supervisor => f.write_str("supervisor"),
            CleanupRunner::Stop => f.write_str("stop"),
            CleanupRunner::Reap => f.write_str("reap"),
            CleanupRunner::Other(s) => f.write_str(s),
        }
    }
}

/// The tier that keeps a tree (ARCHITECTURE.md, "the tiers"), as the probe chooses it and as an
/// entry records it (`containment`, `containmentAsked`): one word, `cgroup`, `subreaper` or
/// `group`. A word this version does not know (a newer version's tier) is kept as it was
/// written, and counts as no cgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tier {
    Cgroup,
    Subreaper,
    Group,
    /// A word this version does not know, interned (so the type stays `Copy`); past the bound
    /// on kept words it reads as `other`.
    Other(&'static str),
}

impl Tier {
    /// `cgroup`, `subreaper` or `group` (an unknown word as it was written), as entries and
    /// events record it.
    pub fn name(self) -> &'static str {
        match self {
            Tier::Cgroup => "cgroup",
            Tier::Subreaper => "subreaper",
            Tier::Group => "group",
            Tier::Other(w) => w,
        }
    }

    /// The tier used when the cgroup tier is not: subreaper on Linux, group elsewhere.
    pub fn fallback() -> Tier {
        if cfg!(target_os = "linux") { Tier::Subreaper } else { Tier::Group }
    }

    /// The tier a recorded word names.
    pub fn parse(word: &str) -> Tier {
        match word {
            "cgroup" => Tier::Cgroup,
            "subreaper" => Tier::Subreaper,
            "group" => Tier::Group,
            other => Tier::Other(intern(other).unwrap_or("other")),
        }
    }
}

impl From<&str> for Tier {
    fn from(word: &str) -> Tier {
        Tier::parse(word)
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for Tier {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Tier {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Tier, D::Error> {
        Ok(Tier::parse(&String::deserialize(d)?))
    }
}

/// The signal that killed a command or a cleanup, as recorded (`signal`): its name, `SIGTERM`
/// (`SIG42` for one without a conventional name), as `sys::Signal::name` writes it. A name this
/// version does not know is kept as it was written, so it round-trips byte for byte.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SignalName(SignalWord);

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum SignalWord {
    /// A signal whose name is exactly what was recorded.
    Known(crate::sys::Signal),
    /// Any other word.
    Other(String),
}

impl SignalName {
    /// The name of `signal`.
    pub fn of(signal: crate::sys::Signal) -> SignalName {
        SignalName(SignalWord::Known(signal))
    }

    /// The signal the name stands for (`TERM` and `15` are read as `SIGTERM` too); `None` for
    /// a name no signal has here.
    pub fn signal(&self) -> Option<crate::sys::Signal> {
        match &self.0 {
            SignalWord::Known(s) => Some(*s),
            SignalWord::Other(w) => crate::sys::Signal::parse(w),
        }
    }

    /// The name as recorded: `SIGTERM`.
    pub fn name(&self) -> String {
        match &self.0 {
            SignalWord::Known(s) => s.name(),
            SignalWord::Other(w) => w.clone(),
        }
    }

    /// The name recorded in a file: a signal when it is exactly that signal's name, else kept.
    pub fn parse(word: &str) -> SignalName {
        let known = crate::sys::Signal::parse(word)
            .or_else(|| word.strip_prefix("SIG").and_then(|n| n.parse().ok()).and_then(crate::sys::Signal::from_raw))
            .filter(|s| s.name() == word);
        SignalName(known.map_or_else(|| SignalWord::Other(word.to_string()), SignalWord::Known))
    }
}

impl fmt::Display for SignalName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            SignalWord::Known(s) => fmt::Display::fmt(s, f),
            SignalWord::Other(w) => f.write_str(w),
        }
    }
}

impl From<&str> for SignalName {
    fn from(word: &str) -> SignalName {
        SignalName::parse(word)
    }
}

impl PartialEq<&str> for SignalName {
    fn eq(&self, other: &&str) -> bool {
        self.name() == *other
    }
}

/// A string in the documents' schemas, as the `Option<String>` it replaced: the schema files
/// stay byte-identical.
impl schemars::JsonSchema for SignalName {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        "String".into()
    }

    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        String::json_schema(g)
    }
}

impl Serialize for SignalName {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.name())
    }
}

impl<'de> Deserialize<'de> for SignalName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<SignalName, D::Error> {
        Ok(SignalName::parse(&String::deserialize(d)?))
    }
}

/// What `reap` did to one entry (`action` in `reap --json`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ReapKind {
    /// A live orphaned tree was stopped.
    Reaped,
    /// Nothing was alive and no result was recorded (or the entry is from a previous boot).
    Lost,
    /// A finished entry's pending cleanup ran: its owner is gone or its turn timeout passed.
    Cleanup,
}

/// The schema's major version, `"v": 1` in every document: within it changes are additive (new
/// fields, new event kinds); a rename or removal makes it 2. Serialized as the number.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Version;

/// The number [`Version`] stands for.
pub const SCHEMA_VERSION: u32 = 1;

impl Serialize for Version {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(SCHEMA_VERSION)
    }
}

impl schemars::JsonSchema for Version {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Version".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "The schema's major version: within it, changes are additive.",
            "type": "integer",
            "const": SCHEMA_VERSION,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{ALL, CleanupRunner, Status, StopReason};

    #[test]
    fn tokens_round_trip_and_old_spellings_are_read() {
        for s in ALL {
            assert_eq!(Status::parse(s.as_str()), Some(s));
            let j = serde_json::to_string(&s).unwrap();
            assert_eq!(serde_json::from_str::<Status>(&j).unwrap(), s);
        }
        assert_eq!(serde_json::from_str::<Status>("\"timed out\"").unwrap(), Status::TimedOut);
        assert_eq!(serde_json::to_string(&Status::TimedOut).unwrap(), "\"timedOut\"");
        assert_eq!(Status::parse("bogus"), None);
        // A newer version's word is kept as written and claims nothing: not finished.
        let other = serde_json::from_str::<Status>("\"paused\"").unwrap();
        assert_eq!(other, Status::Other("paused"));
        assert_eq!(serde_json::to_string(&other).unwrap(), "\"paused\"");
        assert!(!other.is_finished() && !other.is_failure());
        assert_eq!(Status::parse("paused"), None, "not a status a filter accepts");
        let long = format!("\"{}\"", "x".repeat(40));
        assert_eq!(serde_json::from_str::<Status>(&long).unwrap(), Status::Lost, "not a word a sheepdog writes");
    }

    #[test]
    fn stop_reasons_and_runners_keep_words_they_do_not_know() {
        let r: StopReason = serde_json::from_str("\"stdinEof\"").unwrap();
        assert_eq!(r, StopReason::StdinEof);
        let r: StopReason = serde_json::from_str("\"someday\"").unwrap();
        assert_eq!(serde_json::to_string(&r).unwrap(), "\"someday\"");
        let c: CleanupRunner = serde_json::from_str("\"reap\"").unwrap();
        assert_eq!(c, CleanupRunner::Reap);
        let c: CleanupRunner = serde_json::from_str("\"cron\"").unwrap();
        assert_eq!(serde_json::to_string(&c).unwrap(), "\"cron\"");
    }
}
