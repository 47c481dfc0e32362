//! The cgroup v2 tier: one cgroup per supervised tree, exact membership, an atomic kill, usage
//! figures and limits, wherever the host gives a writable cgroup v2 (ARCHITECTURE.md,
//! the section on the tiers). Everywhere else the subreaper tier keeps the tree,
//! and the reason is recorded.
//!
//! The order of operations, per supervisor and before the spawn ([`probe`]):
//!
//! 1. the cgroup2 mount: the usual places first (`/sys/fs/cgroup`, and `/sys/fs/cgroup/unified`
//!    where hybrid hosts mount it), else `/proc/self/mountinfo`; always checked with `statfs` to
//!    really be cgroup2;
//! 2. the supervisor's own cgroup from `/proc/self/cgroup` (`0::/PATH`), whose `cgroup.procs`
//!    this process must be able to write (the kernel checks a migration on the common ancestor);
//! 3. for `--memory-max` / `--pids-max`: the controllers in the own cgroup's
//!    `cgroup.controllers`, enabled in its `cgroup.subtree_control`;
//! 4. `mkdir` of the tree's cgroup below the own one, with `cgroup.kill` present (Linux 5.14+);
//! 5. `cgroup.events` opened (and read once, which arms `POLLPRI`); the child is then created in
//!    the cgroup with `clone3(CLONE_INTO_CGROUP)` (`sys::cgroup::spawn_into`); where
//!    the kernel refuses that, it is forked and joins with one `write("0")` to the
//!    `cgroup.procs` opened here, before `exec` (`sys::cgroup::join_in_child`).
//!
//! Any refusal falls back to the subreaper tier with the reason kept, unless the cgroup tier was
//! demanded (`--containment cgroup`) or limits were asked for: then it is an error (status 125).
//!
//! A cgroup is always addressed through an open directory fd and `/proc/self/fd/N/FILE`, and a
//! recorded one is opened only if its inode still matches, so a path that now names another
//! cgroup is never touched. Zombies do not keep a cgroup populated (the kernel unlinks a task at
//! exit, before it is reaped), so `populated 0` is "the tree is gone".

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::sys::cgroup::{self as raw};
use crate::sys::process;
use crate::sys::procfs;

mod diagnosis;
mod dir;
mod leftovers;

pub use diagnosis::{Doctor, doctor};
pub use dir::{LEFTOVER_KILL_WAIT, Usage};
pub use leftovers::{Swept, entry_cgroup_name, planned_path, remove_recorded, sweep_leftovers, usage};

/// The environment variable that chooses the containment tier when `--containment` is not
/// given: `auto`, `cgroup` or `subreaper`.
pub const CONTAINMENT_ENV: &str = "SHEEPDOG_CONTAINMENT";
/// Overrides where the probe looks for the cgroup2 mount (diagnosis and tests: point it at a
/// path that is not cgroup2 to see the fallback). The path must still be a cgroup2 file system
/// for the tier to be used, so it cannot make sheepdog write anywhere else.
pub const CGROUP_MOUNT_ENV: &str = "SHEEPDOG_CGROUP_MOUNT";

/// How long `rmdir` of a tree's cgroup is retried while the kernel answers EBUSY: delays of 1,
/// 2, 4, 8, 16 and 32 ms (63 ms in all). A cgroup whose last task just exited can still be
/// busy for a moment; past that, the leftover is recorded and `reap` removes it.
pub const RMDIR_RETRIES_MS: [u64; 6] = [1, 2, 4, 8, 16, 32];

/// Which tier was asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// The strongest tier the host allows (the default).
    #[default]
    Auto,
    /// The cgroup tier, or an error (status 125) with the reason.
    Cgroup,
    /// The subreaper tier even where a cgroup is available.
    Subreaper,
}

impl Mode {
    /// Parses `auto`, `cgroup` or `subreaper`.
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "auto" => Some(Mode::Auto),
            "cgroup" => Some(Mode::Cgroup),
            "subreaper" => Some(Mode::Subreaper),
            _ => None,
        }
    }

    /// The tier this mode names, as an entry records it (`containmentAsked`); `None` for
    /// `auto`.
    pub fn tier(self) -> Option<Tier> {
        match self {
            Mode::Auto => None,
            Mode::Cgroup => Some(Tier::Cgroup),
            Mode::Subreaper => Some(Tier::Subreaper),
        }
    }

    /// The mode that asks for `tier` (`auto` for one that cannot be asked for).
    pub fn of_tier(tier: Tier) -> Mode {
        Mode::parse(tier.name()).unwrap_or_default()
    }

    /// `auto`, `cgroup` or `subreaper`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Auto => "auto",
            Mode::Cgroup => "cgroup",
            Mode::Subreaper => "subreaper",
        }
    }

    /// The mode from `$SHEEPDOG_CONTAINMENT`, else `auto` (a front end's own option, the CLI's
    /// `--containment`, goes first and is parsed there with [`Mode::parse`]).
    ///
    /// Errors: one line naming the variable and its bad value.
    pub fn from_env() -> Result<Mode, String> {
        match std::env::var(CONTAINMENT_ENV) {
            Ok(v) if !v.is_empty() => {
                Mode::parse(&v).ok_or_else(|| format!("{CONTAINMENT_ENV}={v}: expected auto, cgroup or subreaper"))
            }
            _ => Ok(Mode::Auto),
        }
    }
}

/// Limits applied to a tree's cgroup (`--memory-max`, `--pids-max`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// `memory.max`, in bytes.
    pub memory_max: Option<u64>,
    /// `pids.max`, in tasks.
    pub pids_max: Option<u64>,
}

impl Limits {
    fn any(&self) -> bool {
        self.memory_max.is_some() || self.pids_max.is_some()
    }

    /// The settings asked for, in a fixed order.
    fn settings(&self) -> Vec<Setting> {
        let mut v = Vec::new();
        if self.memory_max.is_some() {
            v.push(Setting::MemoryMax);
        }
        if self.pids_max.is_some() {
            v.push(Setting::PidsMax);
        }
        v
    }
}

impl Request {
    /// True when limits were asked for (then the cgroup tier is required).
    pub fn limits_asked(&self) -> bool {
        self.limits.any()
    }
}

/// What a supervisor asks of the probe.
#[derive(Clone, Debug, Default)]
pub struct Request {
    pub mode: Mode,
    pub limits: Limits,
    /// A short label for the cgroup's name (`run`, or the entry's id); the name is
    /// `sheepdog-LABEL-PID-RANDOM`.
    pub label: String,
    /// The exact name to use instead (a managed supervisor records it in its entry before the
    /// `mkdir`, so a SIGKILL in between leaves nothing unrecorded; see [`entry_cgroup_name`]).
    pub name: Option<String>,
}

/// The tier that keeps a tree (the record's vocabulary, in `status`).
pub use crate::status::Tier;

/// What is recorded about a tree's containment: in the entry, in the `spawned` event, in
/// `ps --json` (`containment`, `containmentReason`, `cgroup`, `cgroupInode`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// `cgroup`, `subreaper` or `group`.
    pub containment: Tier,
    /// Why a stronger tier was not used; `None` in the cgroup tier.
    pub containment_reason: Option<String>,
    /// The absolute path of the tree's cgroup directory.
    pub cgroup: Option<String>,
    /// Its inode, checked before anything acts on the path later.
    pub cgroup_inode: Option<u64>,
}

/// The outcome of the probe: the tier, the reason a stronger one was refused, and the cgroup.
#[derive(Debug)]
pub struct Containment {
    pub tier: Tier,
    pub reason: Option<String>,
    pub cgroup: Option<Cgroup>,
}

impl Containment {
    /// The fallback tier, for `reason`.
    pub fn fallback(reason: String) -> Containment {
        Containment { tier: Tier::fallback(), reason: Some(reason), cgroup: None }
    }

    /// What to record.
    pub fn record(&self) -> Record {
        Record {
            containment: self.tier,
            containment_reason: self.reason.clone(),
            cgroup: self.cgroup.as_ref().map(|c| c.path.to_string_lossy().into_owned()),
            cgroup_inode: self.cgroup.as_ref().map(|c| c.inode),
        }
    }
}

/// A setting a refusal is about. Each front end names it in its own words when it reports the
/// refusal (the CLI by its flags: `--containment`, `--memory-max`, `--pids-max`);
/// [`Setting::word`] is the library's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setting {
    Containment,
    MemoryMax,
    PidsMax,
}

impl Setting {
    /// `containment`, `memory-max`, `pids-max`.
    pub fn word(self) -> &'static str {
        match self {
            Setting::Containment => "containment",
            Setting::MemoryMax => "memory-max",
            Setting::PidsMax => "pids-max",
        }
    }
}

/// The probe refused what was demanded (the cgroup tier, or limits): status 125. The reasons
/// name files and kernel facts, never a front end's options: [`Refused::render`] lets the
/// front end name the settings; `Display` uses [`Setting::word`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// Limits were asked for, and so was the subreaper tier.
    LimitsWithSubreaper { limits: Vec<Setting> },
    /// The cgroup tier was demanded and is unavailable, for `reason`.
    TierDemanded { reason: String },
    /// Limits were asked for, and the cgroup tier is unavailable, for `reason`.
    LimitsNeedTier { limits: Vec<Setting>, reason: String },
    /// The tier is there but a limit cannot be applied; `about` is the limit to blame, if one is.
    Limit { about: Option<Setting>, reason: String },
}

impl Refused {
    /// One line, with each setting named by `name`.
    pub fn render(&self, name: &dyn Fn(Setting) -> String) -> String {
        let list = |v: &[Setting]| v.iter().map(|s| name(*s)).collect::<Vec<_>>().join(" and ");
        match self {
            Refused::LimitsWithSubreaper { limits } => format!(
                "{}: limits need the cgroup tier, and {} subreaper was asked for",
                list(limits),
                name(Setting::Containment)
            ),
            Refused::TierDemanded { reason } => {
                format!("{} cgroup: the cgroup tier is unavailable: {reason}", name(Setting::Containment))
            }
            Refused::LimitsNeedTier { limits, reason } => {
                format!("{}: limits need the cgroup tier, which is unavailable: {reason}", list(limits))
            }
            Refused::Limit { about: Some(s), reason } => format!("{}: {reason}", name(*s)),
            Refused::Limit { about: None, reason } => reason.clone(),
        }
    }
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(&|s| s.word().to_string()))
    }
}

impl std::error::Error for Refused {}

/// One tree's cgroup, held open.
#[derive(Debug)]
pub struct Cgroup {
    path: PathBuf,
    /// The last path component (`sheepdog-run-4242-1a2b3c4d`), random enough to recognise the
    /// cgroup in `/proc/PID/cgroup`.
    name: String,
    inode: u64,
    dir: File,
    events: File,
    /// Only for a cgroup this process created: what the child needs to join it.
    join: Option<Join>,
}

#[derive(Debug)]
struct Join {
    procs: File,
    report_r: OwnedFd,
    report_w: OwnedFd,
}

/// Where cgroup2 is mounted on most hosts: unified hosts (and containers) at `/sys/fs/cgroup`,
/// hybrid hosts (like this project's test machine) at `/sys/fs/cgroup/unified`. Checked first,
/// with one `statfs` each, because reading `/proc/self/mountinfo` costs about 60 µs of a
/// `run`'s start and these two answer for nearly every host.
pub const USUAL_MOUNTS: [&str; 2] = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"];

/// Where the cgroup2 file system is mounted: `$SHEEPDOG_CGROUP_MOUNT`, else the first of
/// [`USUAL_MOUNTS`] that `statfs` says is cgroup2, else the first cgroup2 line of
/// `/proc/self/mountinfo`. Checked with `statfs` to be cgroup2.
///
/// Errors: the reason, as one phrase.
pub fn mount_point() -> Result<PathBuf, String> {
    let path = match std::env::var_os(CGROUP_MOUNT_ENV).filter(|v| !v.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => {
            let usual =
                USUAL_MOUNTS.iter().map(Path::new).find(|p| raw::fs_type(p).ok() == Some(raw::CGROUP2_SUPER_MAGIC));
            if let Some(p) = usual {
                return Ok(p.to_path_buf());
            }
            let text = fs::read_to_string("/proc/self/mountinfo")
                .map_err(|e| format!("unable to read /proc/self/mountinfo: {e}"))?;
            parse_mountinfo(&text).ok_or("no cgroup2 file system is mounted (/proc/self/mountinfo)")?
        }
    };
    match raw::fs_type(&path) {
        Ok(t) if t == raw::CGROUP2_SUPER_MAGIC => Ok(path),
        Ok(_) => Err(format!("{} is not a cgroup2 file system", path.display())),
        Err(e) => Err(format!("unable to stat the cgroup2 mount {}: {e}", path.display())),
    }
}

/// The mount point of the first `cgroup2` file system in a `mountinfo` text (octal escapes
/// such as `\040` decoded).
pub fn parse_mountinfo(text: &str) -> Option<PathBuf> {
    text.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        if right.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        Some(PathBuf::from(unescape(left.split_whitespace().nth(4)?)))
    })
}

fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// This process's cgroup v2 path (`/`, `/user.slice/...`) from `/proc/self/cgroup`.
///
/// Errors: the reason, as one phrase.
pub fn own_cgroup() -> Result<String, String> {
    let text = fs::read_to_string("/proc/self/cgroup").map_err(|e| format!("unable to read /proc/self/cgroup: {e}"))?;
    let path = text
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or("this process is in no cgroup v2 hierarchy (no 0:: line in /proc/self/cgroup)")?;
    if !path.starts_with('/') || path.split('/').any(|c| c == "..") || path.ends_with(" (deleted)") {
        return Err(format!("this process's cgroup {path} is outside the visible hierarchy"));
    }
    Ok(path.to_string())
}

/// The controllers listed in `DIR/cgroup.controllers` (empty if unreadable).
pub fn controllers(dir: &Path) -> Vec<String> {
    fs::read_to_string(dir.join("cgroup.controllers"))
        .map(|s| s.split_whitespace().map(String::from).collect())
        .unwrap_or_default()
}

/// The own cgroup's directory: the mount point joined with [`own_cgroup`].
pub fn own_dir() -> Result<PathBuf, String> {
    let mount = mount_point()?;
    let own = own_cgroup()?;
    let dir = mount.join(own.trim_start_matches('/'));
    if !dir.is_dir() {
        return Err(format!("this process's cgroup {} does not exist", dir.display()));
    }
    Ok(dir)
}

/// The probe: decides the tier for one tree and, in the cgroup tier, creates its cgroup. Call
/// once per supervisor, before the spawn.
///
/// Errors: [`Refused`] when the cgroup tier was demanded (`Mode::Cgroup`) or limits were asked
/// for and cannot be had; with `Mode::Auto` and no limits it never fails.
pub fn probe(req: &Request) -> Result<Containment, Refused> {
    let want_limits = req.limits.any();
    if req.mode == Mode::Subreaper {
        if want_limits {
            return Err(Refused::LimitsWithSubreaper { limits: req.limits.settings() });
        }
        return Ok(Containment::fallback("the subreaper tier was asked for".into()));
    }
    if !cfg!(target_os = "linux") {
        let reason = "cgroups exist only on Linux".to_string();
        return match (req.mode, want_limits) {
            (Mode::Auto, false) => Ok(Containment::fallback(reason)),
            (Mode::Cgroup, _) => Err(Refused::TierDemanded { reason }),
            _ => Err(Refused::LimitsNeedTier { limits: req.limits.settings(), reason }),
        };
    }
    match create(req) {
        Ok(cg) => Ok(Containment { tier: Tier::Cgroup, reason: None, cgroup: Some(cg) }),
        Err(Refusal::Limits(about, reason)) => Err(Refused::Limit { about, reason }),
        Err(Refusal::Tier(reason)) => {
            if req.mode == Mode::Cgroup {
                Err(Refused::TierDemanded { reason })
            } else if want_limits {
                Err(Refused::LimitsNeedTier { limits: req.limits.settings(), reason })
            } else {
                Ok(Containment::fallback(reason))
            }
        }
    }
}

enum Refusal {
    /// The tier itself is unavailable (fall back, unless demanded).
    Tier(String),
    /// The tier is there, the limits are not (always an error): the limit to blame, if one is.
    Limits(Option<Setting>, String),
}

fn create(req: &Request) -> Result<Cgroup, Refusal> {
    let own = own_dir().map_err(Refusal::Tier)?;
    let procs = own.join("cgroup.procs");
    if let Err(e) = raw::writable(&procs) {
        return Err(Refusal::Tier(format!(
            "unable to write {} (needed to move the command into a child cgroup): {e}",
            procs.display()
        )));
    }
    if req.limits.any() {
        enable_controllers(&own, &req.limits).map_err(|(s, why)| Refusal::Limits(s, why))?;
    }
    let name = req.name.clone().unwrap_or_else(|| {
        let label = if req.label.is_empty() { "run" } else { req.label.as_str() };
        // The pid makes it unique among live supervisors; the clock's nanoseconds tell it from
        // a leftover of an earlier process with the same pid (no read of /dev/urandom needed).
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
        // ...and the supervisor's start time (clock ticks) after `t` names it exactly, so that
        // `reap` can prove it gone even after its pid was reused (`sweep_leftovers`).
        let me = process::getpid();
        let start = procfs::start_time(me).map(|t| format!("t{t}")).unwrap_or_default();
        format!("sheepdog-{label}-{me}-{nanos:08x}{start}")
    });
    let path = own.join(&name);
    fs::DirBuilder::new()
        .mode(0o755)
        .create(&path)
        .map_err(|e| Refusal::Tier(format!("unable to create cgroup {}: {e}", path.display())))?;
    let undo = |r: Refusal| {
        let _ = fs::remove_dir(&path);
        r
    };
    let cg = Cgroup::open(&path, None).map_err(|e| undo(Refusal::Tier(e)))?;
    cg.hold();
    if !cg.at("cgroup.kill").exists() {
        return Err(undo(Refusal::Tier(format!(
            "{} has no cgroup.kill (Linux 5.14 or later is needed)",
            path.display()
        ))));
    }
    let mut cg = cg;
    let join = (|| -> io::Result<Join> {
        let procs = OpenOptions::new().write(true).open(cg.at("cgroup.procs"))?;
        let (report_r, report_w) = crate::sys::signal::pipe_cloexec()?;
        crate::sys::signal::set_nonblocking(report_r.as_raw_fd())?;
        Ok(Join { procs, report_r, report_w })
    })()
    .map_err(|e| undo(Refusal::Tier(format!("unable to open {}/cgroup.procs: {e}", path.display()))))?;
    cg.join = Some(join);
    let write = |file: &str, value: u64| {
        fs::write(cg.at(file), value.to_string())
            .map_err(|e| Refusal::Limits(None, format!("unable to set {file} of {}: {e}", path.display())))
    };
    if let Some(m) = req.limits.memory_max {
        write("memory.max", m).map_err(undo)?;
    }
    if let Some(p) = req.limits.pids_max {
        write("pids.max", p).map_err(undo)?;
    }
    Ok(cg)
}

/// Makes the controllers the limits need available to children of `own`: they must be listed
/// in its `cgroup.controllers`, then are enabled in its `cgroup.subtree_control` (left enabled
/// afterwards: other children may rely on them).
fn enable_controllers(own: &Path, limits: &Limits) -> Result<(), (Option<Setting>, String)> {
    let available = controllers(own);
    let listed = if available.is_empty() { "none".to_string() } else { available.join(" ") };
    let mut wanted = Vec::new();
    for (setting, ctl, asked) in [
        (Setting::MemoryMax, "memory", limits.memory_max.is_some()),
        (Setting::PidsMax, "pids", limits.pids_max.is_some()),
    ] {
        if !asked {
            continue;
        }
        if !available.iter().any(|c| c == ctl) {
            return Err((
                Some(setting),
                format!(
                    "the {ctl} controller is not available in the cgroup v2 hierarchy \
                     ({} lists: {listed}; the host may bind {ctl} to cgroup v1)",
                    own.join("cgroup.controllers").display()
                ),
            ));
        }
        wanted.push(ctl);
    }
    let enabled = fs::read_to_string(own.join("cgroup.subtree_control")).unwrap_or_default();
    for ctl in wanted {
        if enabled.split_whitespace().any(|c| c == ctl) {
            continue;
        }
        fs::write(own.join("cgroup.subtree_control"), format!("+{ctl}")).map_err(|e| {
            let why = format!(
                "unable to enable the {ctl} controller in {}: {e}{}",
                own.join("cgroup.subtree_control").display(),
                if e.raw_os_error() == Some(crate::sys::errno::EBUSY) {
                    " (a non-root cgroup with processes of its own, sheepdog's among them, cannot enable controllers \
                     for its children)"
                } else {
                    ""
                }
            );
            (None, why)
        })?;
    }
    Ok(())
}

/// The ways to get the cgroup tier, for a refused one.
pub const HINTS: [&str; 2] = [
    "as a normal user with systemd: systemd-run --user --scope -p Delegate=yes -- sheepdog ...",
    "in a container: give it a writable cgroup namespace (docker/podman run --cgroupns=private, with the cgroup \
     file system mounted read-write, e.g. a privileged or systemd-enabled container)",
];

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::{Mode, Refused, Setting, parse_mountinfo};

    #[test]
    fn a_refusal_names_settings_the_way_its_front_end_does() {
        let r = Refused::LimitsWithSubreaper { limits: vec![Setting::MemoryMax, Setting::PidsMax] };
        let flag = |s: Setting| format!("--{}", s.word());
        assert_eq!(
            r.render(&flag),
            "--memory-max and --pids-max: limits need the cgroup tier, and --containment subreaper was asked for"
        );
        assert_eq!(
            r.to_string(),
            "memory-max and pids-max: limits need the cgroup tier, and containment subreaper was asked for"
        );
        let t = Refused::TierDemanded { reason: "no cgroup2".into() };
        assert_eq!(t.render(&flag), "--containment cgroup: the cgroup tier is unavailable: no cgroup2");
        let l = Refused::Limit { about: None, reason: "unable to set memory.max".into() };
        assert_eq!(l.render(&flag), "unable to set memory.max");
    }

    #[test]
    fn finds_the_cgroup2_mount_of_a_hybrid_host() {
        let text = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
                    35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
                    41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        assert_eq!(parse_mountinfo(text), Some(PathBuf::from("/sys/fs/cgroup/unified")));
        let spaced = "41 31 0:38 / /mnt/cg\\040two rw shared:1 - cgroup2 none rw\n";
        assert_eq!(parse_mountinfo(spaced), Some(PathBuf::from("/mnt/cg two")));
        assert_eq!(parse_mountinfo("31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"), None);
    }

    #[test]
    fn modes_parse_and_name() {
        for m in [Mode::Auto, Mode::Cgroup, Mode::Subreaper] {
            assert_eq!(Mode::parse(m.name()), Some(m));
        }
        assert_eq!(Mode::parse("systemd"), None);
    }
}
