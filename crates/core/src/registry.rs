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

use crate::identity::Probe;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::entry::{Entry, ProcRef, StopTimings};
use crate::files::{self, FileError, now_ms};
use crate::status::Status;
use crate::sys::process;
use crate::sys::procfs;

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

impl From<FileError> for RegistryError {
    fn from(e: FileError) -> RegistryError {
        match e {
            FileError::Io { path, source } => RegistryError::Io { path, source },
            FileError::NotWritten { path, source } => RegistryError::NotWritten { path, source },
        }
    }
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

/// A fresh random token: 32 hex digits (128 bits) from the system's random source (getrandom(2),
/// else /dev/urandom; the `getrandom` crate). A process carrying an entry's tag counts as the
/// entry's, so the tag must not be guessable: when the system gives no random bytes this fails
/// (the OS error, or `Other`) rather than fall back to anything weaker.
pub fn new_tag() -> io::Result<String> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| match e.raw_os_error() {
        Some(errno) => io::Error::from_raw_os_error(errno),
        None => io::Error::other(e.to_string()),
    })?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
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
    files::mkdir_private(path).map_err(io_at(path))
}

fn lock_file(path: &Path) -> Result<File, RegistryError> {
    Ok(files::lock_file(path)?)
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), RegistryError> {
    Ok(files::write_atomic(path, bytes)?)
}

fn sync_dir(dir: &Path) -> Result<(), RegistryError> {
    Ok(files::sync_dir(dir)?)
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

    /// `untold/<hash of the session>/`: the session's kept entries whose agent was not told of
    /// them yet, one empty file per entry id. A directory per session, so that the agent hooks'
    /// per-call look costs one `readdir` of it, whatever the size of the registry.
    fn untold_dir(&self, session: &str) -> PathBuf {
        // FNV-1a (64 bits): a session id may hold `/` and be longer than a file name may.
        let hash =
            session.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        self.root.join("untold").join(format!("{hash:016x}"))
    }

    /// Marks entry `id` of `session` as not told to its agent yet (the leftovers hand-off:
    /// what a hooked shell call left running). Errors: the marker could not be written.
    pub fn mark_untold(&self, session: &str, id: &str) -> Result<(), RegistryError> {
        let dir = self.untold_dir(session);
        let create = || OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(dir.join(id));
        mkdir_private(&dir)?;
        // A concurrent `take_untold` may remove the emptied directory between the two calls.
        match create() {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                mkdir_private(&dir)?;
                create().map_err(io_at(&dir))?
            }
            r => r.map_err(io_at(&dir))?,
        };
        Ok(())
    }

    /// The entries of `session` marked by [`Registry::mark_untold`] that still run, each
    /// returned to one caller once (its marker is removed first; of two concurrent callers,
    /// the one whose removal succeeds has it), oldest first. A marker of an entry that is gone
    /// or finished is removed too; one of another session (a hash collision) is left alone.
    pub fn take_untold(&self, session: &str) -> Vec<Entry> {
        let dir = self.untold_dir(session);
        let Ok(files) = fs::read_dir(&dir) else { return Vec::new() };
        let mut ids: Vec<String> = files.flatten().filter_map(|f| f.file_name().into_string().ok()).collect();
        ids.sort_by_key(|id| id_number(id));
        let mut out = Vec::new();
        for id in ids {
            let entry = self.read(&id).ok();
            if entry.as_ref().is_some_and(|e| e.session_id.as_deref() != Some(session)) {
                continue;
            }
            if fs::remove_file(dir.join(&id)).is_ok()
                && let Some(e) = entry.filter(|e| !e.is_finished())
            {
                out.push(e);
            }
        }
        // Emptied: gone (an entry marked meanwhile makes it again).
        let _ = fs::remove_dir(&dir);
        out
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

    /// [`Registry::read`] with `buf` as scratch space: a listing reuses one buffer. With `procs`
    /// (the open `procs/` directory), the file is opened relative to it.
    fn read_with(&self, procs: Option<&File>, id: &str, buf: &mut Vec<u8>) -> Result<Entry, RegistryError> {
        use std::os::fd::AsFd;
        // The path is built for an error only (10,000 entries, 10,000 allocations saved).
        let path = || self.file(id, "entry.json");
        let file = match procs {
            Some(d) => process::open_at(d.as_fd(), Path::new(id).join("entry.json").as_os_str()),
            None => File::open(path()),
        };
        let len = match file.and_then(|f| read_whole(f, buf)) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(RegistryError::NotFound(id.to_string())),
            Err(e) => return Err(RegistryError::Corrupt { path: path(), reason: e.to_string() }),
        };
        serde_json::from_slice(&buf[..len]).map_err(|e| RegistryError::Corrupt { path: path(), reason: e.to_string() })
    }

    /// Every readable entry, oldest first, and the ones that could not be read (reported, left
    /// in place: a listing never moves files; [`Registry::list_sweeping`] does, for writers).
    pub fn list(&self) -> (Vec<Entry>, Vec<SetAside>) {
        let Ok(dir) = fs::read_dir(self.procs()) else {
            return (Vec::new(), Vec::new());
        };
        let mut names: Vec<(String, PathBuf)> = dir
            .flatten()
            .map(|d| (d.file_name().to_string_lossy().into_owned(), d.path()))
            .filter(|(name, _)| !name.starts_with('.'))
            .collect();
        // Read in id order, which is nearly always start order too: the entries then come out
        // sorted, and the ~1 KiB entries are not moved again by a sort (checked, not assumed).
        names.sort_by_cached_key(|(name, _)| id_number(name));
        let procs = File::open(self.procs()).ok();
        let (mut entries, aside) = self.read_all_parallel(procs.as_ref(), &names);
        let key = |e: &Entry| (e.started_at, id_number(&e.id));
        if !entries.is_sorted_by_key(key) {
            entries.sort_by_cached_key(key);
        }
        (entries, aside)
    }

    /// [`Registry::read_all`] split over up to 4 threads for a large registry: reading and
    /// parsing 10,000 entries is 30,000 syscalls and 15 MB of JSON, which a listing (`ps`,
    /// `reap`; never a supervisor, which reads only its own entry) spreads over the cores it
    /// has. `SHEEPDOG_LIST_THREADS=N` sets the number (1: one thread, for the benchmark's side
    /// by side). Results keep `names`' order.
    fn read_all_parallel(&self, procs: Option<&File>, names: &[(String, PathBuf)]) -> (Vec<Entry>, Vec<SetAside>) {
        // Below this a thread costs more than it saves (about 50 us to start one).
        const PER_THREAD: usize = 1024;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()).min(4);
        let wanted = std::env::var("SHEEPDOG_LIST_THREADS").ok().and_then(|v| v.parse::<usize>().ok()).unwrap_or(cores);
        let threads = wanted.min(names.len() / PER_THREAD);
        if threads < 2 {
            return self.read_all(procs, names, names.len());
        }
        let chunk = names.len().div_ceil(threads);
        let parts: Vec<(Vec<Entry>, Vec<SetAside>)> = std::thread::scope(|s| {
            let handles: Vec<_> = names
                .chunks(chunk)
                .enumerate()
                .map(|(i, c)| s.spawn(move || self.read_all(procs, c, if i == 0 { names.len() } else { c.len() })))
                .collect();
            // A reader that panicked (it never should: bad files are `Corrupt`) reads again here.
            handles
                .into_iter()
                .zip(names.chunks(chunk))
                .map(|(h, c)| h.join().unwrap_or_else(|_| self.read_all(procs, c, names.len())))
                .collect()
        });
        // The first part was made with room for all (see below): only the others are moved.
        let mut parts = parts.into_iter();
        let (mut entries, mut aside) = parts.next().unwrap_or_default();
        for (e, a) in parts {
            entries.extend(e);
            aside.extend(a);
        }
        (entries, aside)
    }

    /// The entries named in `names` (directory name, path), read with one reused buffer, into
    /// a list with room for `room` entries.
    fn read_all(&self, procs: Option<&File>, names: &[(String, PathBuf)], room: usize) -> (Vec<Entry>, Vec<SetAside>) {
        let mut entries = Vec::with_capacity(room.max(names.len()));
        let mut aside = Vec::new();
        let mut buf = Vec::new();
        for (name, dir) in names {
            let unreadable = |path: PathBuf, reason: String| SetAside {
                path,
                reason,
                moved_to: None,
                supervisor_alive: self.live_supervisor(name).is_some(),
            };
            match self.read_with(procs, name, &mut buf) {
                Ok(e) => entries.push(e),
                Err(RegistryError::Corrupt { path, reason }) => aside.push(unreadable(path, reason)),
                // Removed meanwhile (a `clear`), or a directory being made: not an entry.
                Err(RegistryError::NotFound(_)) if !dir.is_dir() => {}
                Err(RegistryError::NotFound(_)) => {
                    aside.push(unreadable(self.file(name, "entry.json"), "entry.json is missing".into()))
                }
                Err(e) => aside.push(unreadable(dir.clone(), e.to_string())),
            }
        }
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
        // Private as every other file of the entry (no fsync: a hint, checked before use).
        let written = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut t| io::Write::write_all(&mut t, &bytes))
            .and_then(|()| fs::rename(&tmp, &path));
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
        (f.boot_id == procfs::boot_id() && crate::identity::alive(ProcRef::new(f.pid, Some(f.start_time)))).then_some(f)
    }

    /// What a `stop` needs of an entry that cannot be read but whose supervisor lives: its id
    /// and the supervisor's identity (the supervisor rewrites the entry when it acts on the
    /// stop). `None` when the supervisor is not alive.
    pub fn stand_in(&self, id: &str) -> Option<Entry> {
        let f = self.live_supervisor(id)?;
        Some(Entry {
            id: id.to_string(),
            supervisor: Some(ProcRef::new(f.pid, Some(f.start_time))),
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

    /// Removes an entry and its logs, under the entry's lock: a write in progress (the
    /// supervisor recording the result, whose `exited` event is appended under the lock) ends
    /// first, so `cleared` is always an entry's last event. Errors: `NotFound` when it is gone.
    pub fn remove(&self, id: &str) -> Result<(), RegistryError> {
        let dir = self.dir(id);
        if !dir.is_dir() {
            return Err(RegistryError::NotFound(id.to_string()));
        }
        let lock = self.entry_lock(id)?;
        let was = self.read(id).ok();
        // Rename first so a concurrent reader never sees a half-deleted entry.
        let tmp = self.procs().join(format!(".del-{id}-{}", now_ms()));
        fs::rename(&dir, &tmp).map_err(io_at(&dir))?;
        if let Some(e) = &was {
            let _ = crate::journal::append(&self.root, e, crate::journal::Kind::Cleared);
        }
        drop(lock);
        fs::remove_dir_all(&tmp).map_err(io_at(&tmp))?;
        sync_dir(&self.procs())
    }
}

/// Reads all of `f` into `buf` (its length is the scratch space, grown as needed and kept for
/// the next file) and returns how many bytes it holds. An entry file is never written in place
/// (a new version is renamed over it), so a read that does not fill the space is its end: one
/// `read` per entry, not `read_to_end`'s `statx`, `lseek` and a second `read` (a listing of
/// 10,000 entries: 30,000 syscalls fewer). Errors: the read's.
fn read_whole(mut f: File, buf: &mut Vec<u8>) -> io::Result<usize> {
    use std::io::Read;
    if buf.len() < ENTRY_READ_SPACE {
        buf.resize(ENTRY_READ_SPACE, 0);
    }
    let mut len = 0;
    loop {
        match f.read(&mut buf[len..]) {
            Ok(0) => return Ok(len),
            Ok(n) => {
                len += n;
                if len < buf.len() {
                    return Ok(len);
                }
                buf.resize(buf.len() * 2, 0);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// The scratch space one entry file is read into first: 4 KiB (entries are about 1.5 KiB; a
/// larger one doubles it). Small on purpose: a supervisor reads its own entry with a fresh
/// buffer, and every KiB it dirties stays in its heap for its whole life (BENCHMARKS.md).
const ENTRY_READ_SPACE: usize = 4 * 1024;

fn id_number(id: &str) -> u64 {
    id.strip_prefix("proc_").and_then(|n| n.parse().ok()).unwrap_or(u64::MAX)
}

fn to_json(entry: &Entry) -> Vec<u8> {
    let mut v = serde_json::to_vec_pretty(entry).unwrap_or_default();
    v.push(b'\n');
    v
}

#[cfg(test)]
mod list_tests {
    use std::fs;

    use crate::entry::Entry;
    use crate::status::Status;

    use super::{ENTRY_READ_SPACE, Registry, id_number};

    /// Writes an entry file as a forger (or an older sheepdog) would: straight into `procs/`.
    fn put(reg: &Registry, id: &str, text: &str) {
        let dir = reg.procs().join(id);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("entry.json"), text).unwrap();
    }

    /// `n` readable entries and `bad` corrupt ones spread among them: the listing has every
    /// readable one, oldest first, and reports each corrupt one.
    fn listing_of(n: usize, bad: usize) {
        let tmp = tempfile::tempdir().unwrap();
        let reg = Registry::open(Some(tmp.path().join("s"))).unwrap();
        for i in 1..=n {
            // started_at runs backwards, so the order comes from the sort, not the directory.
            let e = Entry { id: format!("proc_{i}"), started_at: (n - i) as u64 / 2, ..Entry::default() };
            put(&reg, &e.id, &serde_json::to_string(&e).unwrap());
        }
        for b in 0..bad {
            let id = format!("proc_{}", 100_000 + b * 7919);
            put(&reg, &id, &format!("{{\"id\": \"{id}\", \"pid\": \"not a number\"}}"));
        }
        let (entries, aside) = reg.list();
        assert_eq!(entries.len(), n, "every readable entry is listed");
        let keys: Vec<(u64, u64)> = entries.iter().map(|e| (e.started_at, id_number(&e.id))).collect();
        assert!(keys.windows(2).all(|w| w[0] <= w[1]), "oldest first, ids breaking ties");
        let mut ids: Vec<u64> = entries.iter().map(|e| id_number(&e.id)).collect();
        ids.sort_unstable();
        assert_eq!(ids, (1..=n as u64).collect::<Vec<_>>(), "each once");
        assert_eq!(aside.len(), bad, "{aside:?}");
        assert!(aside.iter().all(|a| a.path.ends_with("entry.json") && a.reason.contains("invalid type")), "{aside:?}");
    }

    #[test]
    fn a_listing_is_whole_in_order_and_reports_the_corrupt_entry() {
        listing_of(300, 1);
    }

    /// Large enough to be read by several threads (1024 entries each at least).
    #[test]
    fn a_listing_read_by_several_threads_is_whole_in_order_and_reports_every_corrupt_entry() {
        listing_of(5000, 5);
    }

    #[test]
    fn fields_this_version_does_not_know_are_kept_through_a_rewrite() {
        let tmp = tempfile::tempdir().unwrap();
        let reg = Registry::open(Some(tmp.path().join("s"))).unwrap();
        let mut doc = serde_json::to_value(Entry { id: "proc_1".into(), ..Entry::default() }).unwrap();
        doc["fromANewerVersion"] = serde_json::json!({"a": [1, 2]});
        put(&reg, "proc_1", &doc.to_string());
        assert_eq!(reg.list().0[0].extra.get("fromANewerVersion"), Some(&doc["fromANewerVersion"]));
        reg.update("proc_1", |e| e.exit_code = Some(3)).unwrap();
        let text = fs::read_to_string(reg.file("proc_1", "entry.json")).unwrap();
        let again: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            (&again["fromANewerVersion"], &again["exitCode"]),
            (&doc["fromANewerVersion"], &serde_json::json!(3))
        );
    }

    #[test]
    fn an_entry_larger_than_the_read_space_is_read_whole() {
        let tmp = tempfile::tempdir().unwrap();
        let reg = Registry::open(Some(tmp.path().join("s"))).unwrap();
        let long = "x".repeat(ENTRY_READ_SPACE * 2 + 7);
        let e = Entry { id: "proc_1".into(), command_preview: long.clone(), ..Entry::default() };
        put(&reg, "proc_1", &serde_json::to_string(&e).unwrap());
        assert_eq!(reg.read("proc_1").unwrap().command_preview, long);
        assert_eq!(reg.list().0[0].command_preview, long);
    }

    /// The helper's trial of this round (`start -- true; wait; clear` in a loop, under load):
    /// `cleared` came before `exited` for 2 entries in 150, and once `exited` never came. A
    /// remove that does not wait for the entry's lock renames the entry away while a write is
    /// in progress: its event comes after, or the write fails and its event never comes.
    #[test]
    fn remove_waits_for_a_write_in_progress_so_cleared_is_the_last_event() {
        let tmp = tempfile::tempdir().unwrap();
        let reg = Registry::open(Some(tmp.path().join("s"))).unwrap();
        let e = Entry {
            id: "proc_1".into(),
            status: Status::Running,
            provider: Some(crate::entry::ProcRef::new(42, None)),
            ..Entry::default()
        };
        put(&reg, &e.id, &serde_json::to_string(&e).unwrap());
        std::thread::scope(|s| {
            // The supervisor recording the result: the lock is held from before the read until
            // after the event is appended.
            let writer = s.spawn(|| {
                reg.update("proc_1", |e| {
                    std::thread::sleep(std::time::Duration::from_millis(300));
                    e.status = Status::Exited;
                    e.exit_code = Some(0);
                })
            });
            std::thread::sleep(std::time::Duration::from_millis(100));
            reg.remove("proc_1").unwrap();
            let _ = writer.join();
        });
        let journal = fs::read_to_string(tmp.path().join("s/events/journal.jsonl")).unwrap();
        let kinds: Vec<String> = journal
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["event"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(kinds, ["exited", "cleared"]);
    }
}
