//! The state of `top`: one [`App`] that the event loop changes (keys, ticks, registry changes,
//! finished actions) and [`super::draw::draw`] renders. Reading the registry and `/proc` happens
//! in [`App::refresh`]; keys only change state or return an [`Action`] for the loop to run.

use std::cell::OnceCell;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use sheepdog::entry::Entry;
use sheepdog::files::now_ms;
use sheepdog::inspect;
use sheepdog::logs::COMBINED_LOG;
use sheepdog::os::{Pid, procfs};
use sheepdog::registry::{Registry, RegistryError};
use sheepdog::status::Status;
use sheepdog::usage::{self, Sampler, Usage};
use sheepdog::{cgroup, ports, view};

use super::logtail::{LogLine, LogTail};

/// Finished entries stay in the list this long after they ended: one hour (`--all`: always).
pub const FINISHED_SHOWN_MS: u64 = 60 * 60 * 1000;
/// CPU % is measured over at least this long: 900 ms. A refresh that a registry change triggers
/// sooner keeps the previous figures (clock ticks are 10 ms: shorter windows would be noise).
pub const USAGE_WINDOW: Duration = Duration::from_millis(900);
/// Listening ports are looked up this often: 3 s (each look reads every tree process's fd
/// links; a server's ports rarely change, and 100 entries every second would cost more than the
/// rest of `top` together).
pub const PORTS_EVERY: Duration = Duration::from_secs(3);
/// PgUp / PgDn move the log pane by this many lines: 10.
pub const LOG_PAGE: usize = 10;
/// The whole registry is re-listed this often even when the watcher reports nothing: 10 s (a
/// safety net for a missed event; changes arrive through the watcher at once).
pub const RELIST_EVERY: Duration = Duration::from_secs(10);

/// Which entries to show.
#[derive(Clone, Debug, Default)]
pub struct Scope {
    /// Only this session's entries.
    pub session: Option<String>,
    /// Every finished entry, not only those of the last hour.
    pub all: bool,
}

/// One line of the list.
#[derive(Clone, Debug)]
pub struct Row {
    pub entry: Entry,
    /// The status as the kernel says now (`orphaned` and `lost` derived).
    pub status: Status,
    /// What the STATUS column shows (`exited (1)`, `timed out after 2s`, `running`).
    pub status_text: String,
    /// Running, starting or orphaned: something of it may be alive.
    pub live: bool,
    /// Ended badly: a non-zero exit, a signal, lost.
    pub failed: bool,
    /// CPU and memory of the live tree (`None` for finished entries).
    pub usage: Option<Usage>,
    /// TCP ports the tree listens on.
    pub ports: Vec<u16>,
    /// It was started with a warning (a command that looks like it starts detached work).
    pub nudged: bool,
}

impl Row {
    /// The entry's id.
    pub fn id(&self) -> &str {
        &self.entry.id
    }
}

/// One live process of the expanded entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeProc {
    pub pid: i32,
    pub pgid: i32,
    pub sid: i32,
    pub command: String,
    /// Its process group is not the provider's.
    pub left_group: bool,
    /// Its session is not the provider's.
    pub left_session: bool,
}

/// What a key asks the loop to do (each is one library operation, run off the UI thread).
#[derive(Clone, Debug)]
pub enum Action {
    Stop(Entry),
    Restart(Entry),
    Clear(Entry),
}

/// A box over the list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Modal {
    /// `s` asks before stopping.
    ConfirmStop { id: String, label: String },
    /// An action is running.
    Busy(String),
    /// An action's result lines; any key closes it.
    Result { title: String, lines: Vec<String> },
}

/// The log pane's state.
#[derive(Debug)]
pub struct LogPane {
    /// The entry whose combined log is followed.
    pub id: Option<String>,
    pub tail: Option<LogTail>,
    /// `f`: following is paused (the pane keeps what it shows).
    pub paused: bool,
    /// `/`: only lines containing this (case-insensitive) are shown.
    pub search: Option<String>,
    /// The search being typed after `/`.
    pub typing: Option<String>,
    /// Lines scrolled back from the end (PgUp / PgDn; scrolling pauses following).
    pub scroll: usize,
}

/// Everything `top` shows.
#[derive(Debug)]
pub struct App {
    pub scope: Scope,
    pub rows: Vec<Row>,
    /// Index into `rows`.
    pub selected: usize,
    /// The id whose process tree is shown (Enter / → / `t`).
    pub expanded: Option<String>,
    pub tree: Vec<TreeProc>,
    /// `l`: the log pane is shown.
    pub show_logs: bool,
    pub log: LogPane,
    pub modal: Option<Modal>,
    /// A one-line message over the footer (a refused key, an error).
    pub flash: Option<String>,
    /// Colours on (off when `NO_COLOR` is set).
    pub color: bool,
    /// Unix ms of the last refresh, for ages.
    pub now_ms: u64,
    /// Set by `q` / Esc.
    pub quit: bool,
    /// Whether the key or event changed anything worth a redraw.
    pub dirty: bool,
    /// After the next refresh, select this entry (a restart's new entry).
    pub select_after_refresh: Option<String>,
    /// False when the registry is not watched: every refresh re-lists it.
    pub watching: bool,
    /// Every entry, by id, as last read.
    entries: HashMap<String, Entry>,
    listed_at: Option<Instant>,
    ports_at: Option<Instant>,
    /// `/proc` files held open between rounds.
    files: usage::ProcFiles,
    /// Open cgroups of cgroup-tier entries, by id.
    cgroups: HashMap<String, cgroup::Cgroup>,
    /// This boot's id, read once.
    boot_id: String,
    usage_at: Option<Instant>,
    /// Per entry: usage and listening ports, as of the last measuring round.
    usage: HashMap<String, (Usage, Vec<u16>)>,
    nudges: HashMap<String, bool>,
}

/// True unless `NO_COLOR` is set to a non-empty value (no-color.org).
pub fn colors_wanted() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

impl App {
    /// An empty view of `scope`, with or without colours; [`App::refresh`] fills it.
    pub fn new(scope: Scope, color: bool) -> App {
        App {
            scope,
            rows: Vec::new(),
            selected: 0,
            expanded: None,
            tree: Vec::new(),
            show_logs: true,
            log: LogPane { id: None, tail: None, paused: false, search: None, typing: None, scroll: 0 },
            modal: None,
            flash: None,
            color,
            now_ms: now_ms(),
            quit: false,
            dirty: true,
            select_after_refresh: None,
            watching: false,
            entries: HashMap::new(),
            listed_at: None,
            ports_at: None,
            cgroups: HashMap::new(),
            files: usage::ProcFiles::default(),
            boot_id: procfs::boot_id(),
            usage_at: None,
            usage: HashMap::new(),
            nudges: HashMap::new(),
        }
    }

    /// The selected row.
    pub fn current(&self) -> Option<&Row> {
        self.rows.get(self.selected)
    }

    /// Re-reads the whole registry and `/proc`: statuses, usage, ports, the tree, the log.
    pub fn refresh(&mut self, reg: &Registry, sampler: &mut Sampler) {
        self.refresh_changed(reg, sampler, None);
    }

    /// Re-reads `/proc` and, of the registry, only the entries in `changed` (from the watcher),
    /// or all of them when `changed` is `None`, nothing is watched, or the last full listing is
    /// [`RELIST_EVERY`] old. Statuses, usage, ports, the expanded tree and the log follow.
    pub fn refresh_changed(&mut self, reg: &Registry, sampler: &mut Sampler, changed: Option<&[String]>) {
        self.now_ms = now_ms();
        let keep = self.select_after_refresh.take().or_else(|| self.current().map(|r| r.id().to_string()));
        let full = changed.is_none() || !self.watching || self.listed_at.is_none_or(|t| t.elapsed() >= RELIST_EVERY);
        if full {
            let (entries, _) = reg.list();
            self.entries = entries.into_iter().map(|e| (e.id.clone(), e)).collect();
            self.listed_at = Some(Instant::now());
        } else {
            for id in changed.unwrap_or_default() {
                match reg.read(id) {
                    Ok(e) => {
                        self.entries.insert(id.clone(), e);
                    }
                    Err(RegistryError::NotFound(_)) => {
                        self.entries.remove(id);
                    }
                    // Half-written or corrupt: the next full listing sets it aside.
                    Err(_) => {}
                }
            }
        }
        let census = OnceCell::new();
        let sockets = OnceCell::new();
        let measure = self.usage_at.is_none_or(|t| t.elapsed() >= USAGE_WINDOW);
        if measure {
            sampler.round();
            self.usage_at = Some(Instant::now());
        }
        let look_ports = measure && self.ports_at.is_none_or(|t| t.elapsed() >= PORTS_EVERY);
        if look_ports {
            self.ports_at = Some(Instant::now());
        }
        let entries: Vec<Entry> = self.entries.values().cloned().collect();
        let mut rows = Vec::new();
        for e in entries {
            if self.scope.session.as_ref().is_some_and(|s| e.session_id.as_ref() != Some(s)) {
                continue;
            }
            // The common case in one `stat` read: the recorded supervisor is still that process.
            // Anything else is the library's call (orphaned, lost, starting).
            let supervisor = if e.is_finished() || e.boot_id != self.boot_id {
                None
            } else {
                e.supervisor.and_then(|sup| {
                    self.files
                        .read_proc(Pid::new(sup.pid)?)
                        .filter(|p| !p.times.zombie && Some(p.times.start_time) == sup.start_time)
                })
            };
            let supervisor_alive = supervisor.is_some();
            let status = if e.is_finished() || supervisor_alive { e.status } else { inspect::live_status(&e, &census) };
            let live = status.is_live();
            let recent = e.ended_at.unwrap_or(e.started_at) + FINISHED_SHOWN_MS >= self.now_ms;
            if !live && !self.scope.all && !recent {
                continue;
            }
            let (usage, ports) = if live {
                if measure {
                    let members = match &supervisor {
                        // The keeper is the supervisor's, not the tree's (its descendants are).
                        Some(root) => self
                            .files
                            .descendants_of(root)
                            .into_iter()
                            .filter(|p| Some(p.stat.pid.as_raw()) != e.keeper.map(|k| k.pid))
                            .collect(),
                        None => usage::tree_members_known(&e, false),
                    };
                    let mut u = sampler.usage(&members);
                    if let Some(cg) = self.cgroup_usage(&e) {
                        u.cpu_percent = sampler.cgroup_percent(&e.id, cg.cpu_ms);
                        u.memory_bytes = cg.memory_bytes.unwrap_or(u.memory_bytes);
                    }
                    let slot = self.usage.entry(e.id.clone()).or_default();
                    slot.0 = u;
                    if look_ports {
                        let pids: Vec<Pid> = members.iter().map(|p| p.stat.pid).collect();
                        slot.1 = listening_ports(&pids, &sockets);
                    }
                }
                let (u, p) = self.usage.get(&e.id).cloned().unwrap_or_default();
                (Some(u), p)
            } else {
                (None, Vec::new())
            };
            let nudged = *self.nudges.entry(e.id.clone()).or_insert_with(|| view::started_with_warnings(&e));
            // Live: the word, as `ps` shows it; finished: the recorded line (`exited (1)`).
            let status_text = if live { status_word(status).to_string() } else { view::status_text(&e, status) };
            let failed = status.is_failure() || (status == Status::Exited && e.exit_code.is_some_and(|c| c != 0));
            rows.push(Row { entry: e, status, status_text, live, failed, usage, ports, nudged });
        }
        // Running ones first (oldest first), then the finished ones, most recently ended first.
        rows.sort_by(|a, b| {
            b.live.cmp(&a.live).then_with(|| {
                if a.live {
                    (a.entry.started_at, &a.entry.id).cmp(&(b.entry.started_at, &b.entry.id))
                } else {
                    b.entry.ended_at.cmp(&a.entry.ended_at)
                }
            })
        });
        self.rows = rows;
        self.usage.retain(|id, _| self.rows.iter().any(|r| r.id() == id && r.live));
        self.cgroups.retain(|id, _| self.rows.iter().any(|r| r.id() == id && r.live));
        self.selected = keep
            .and_then(|id| self.rows.iter().position(|r| r.id() == id))
            .unwrap_or(self.selected)
            .min(self.rows.len().saturating_sub(1));
        if measure {
            self.files.sweep();
        }
        self.refresh_tree();
        self.follow_selected(reg);
        self.poll_log();
        self.dirty = true;
    }

    /// The cgroup figures of a cgroup-tier entry, through a handle kept open between rounds
    /// (opening a cgroup checks its inode and arms its events file: done once, not every
    /// second). `None` outside the cgroup tier or once the cgroup is gone.
    fn cgroup_usage(&mut self, e: &Entry) -> Option<cgroup::Usage> {
        if e.containment != Some(cgroup::Tier::Cgroup) {
            return None;
        }
        if !self.cgroups.contains_key(&e.id) {
            self.cgroups.insert(e.id.clone(), cgroup::Cgroup::of_entry(e)?);
        }
        let u = self.cgroups.get(&e.id)?.usage();
        if u.is_none() {
            self.cgroups.remove(&e.id);
        }
        u
    }

    /// Re-reads the expanded entry's live processes.
    pub fn refresh_tree(&mut self) {
        self.tree.clear();
        let Some(id) = &self.expanded else { return };
        let Some(row) = self.rows.iter().find(|r| r.id() == id) else { return };
        let (pgid, sid) = usage::provider_group_and_session(&row.entry);
        let mut members: Vec<procfs::Stat> = usage::tree_members(&row.entry).into_iter().map(|p| p.stat).collect();
        members.sort_by_key(|s| s.pid);
        self.tree = members
            .iter()
            .map(|s| TreeProc {
                pid: s.pid.as_raw(),
                pgid: s.pgrp,
                sid: s.session,
                command: {
                    let c = procfs::cmdline(s.pid);
                    if c.is_empty() { format!("[{}]", s.comm) } else { c }
                },
                left_group: pgid.is_some_and(|g| g.as_raw() != s.pgrp),
                left_session: sid.is_some_and(|x| x != s.session),
            })
            .collect();
    }

    /// Points the log pane at the selected entry (a new tail when the selection changed).
    pub fn follow_selected(&mut self, reg: &Registry) {
        let id = self.current().map(|r| r.id().to_string());
        if id != self.log.id {
            self.log.tail = id.as_ref().map(|id| LogTail::new(reg.file(id, COMBINED_LOG)));
            self.log.scroll = 0;
            self.log.id = id;
            self.dirty = true;
        }
    }

    /// Reads new log lines (unless paused or hidden); true if the pane changed.
    pub fn poll_log(&mut self) -> bool {
        if !self.show_logs || self.log.paused {
            return false;
        }
        let changed = self.log.tail.as_mut().is_some_and(|t| t.poll());
        self.dirty |= changed;
        changed
    }

    /// The log lines the pane shows: all kept lines, or those matching the search.
    pub fn visible_log(&self) -> Vec<&LogLine> {
        let Some(t) = &self.log.tail else { return Vec::new() };
        match &self.log.search {
            Some(q) => {
                let q = q.to_lowercase();
                t.lines.iter().filter(|l| l.text.to_lowercase().contains(&q)).collect()
            }
            None => t.lines.iter().collect(),
        }
    }

    /// Handles one key; returns an action for the loop to run.
    pub fn on_key(&mut self, key: KeyEvent) -> Option<Action> {
        if key.kind == KeyEventKind::Release {
            return None;
        }
        self.dirty = true;
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            self.quit = true;
            return None;
        }
        if let Some(typed) = &mut self.log.typing {
            match key.code {
                KeyCode::Char(c) => typed.push(c),
                KeyCode::Backspace => {
                    typed.pop();
                }
                KeyCode::Enter => {
                    let q = std::mem::take(typed);
                    self.log.search = (!q.is_empty()).then_some(q);
                    self.log.typing = None;
                }
                KeyCode::Esc => self.log.typing = None,
                _ => {}
            }
            return None;
        }
        match &self.modal {
            Some(Modal::ConfirmStop { id, .. }) => {
                let id = id.clone();
                match key.code {
                    KeyCode::Char('y') | KeyCode::Char('Y') | KeyCode::Enter => {
                        let row = self.rows.iter().find(|r| r.id() == id)?;
                        let entry = row.entry.clone();
                        self.modal = Some(Modal::Busy(format!("Stopping {}…", entry.label())));
                        return Some(Action::Stop(entry));
                    }
                    KeyCode::Char('n') | KeyCode::Char('N') | KeyCode::Esc | KeyCode::Char('q') => self.modal = None,
                    _ => {}
                }
                return None;
            }
            Some(Modal::Busy(_)) => return None,
            Some(Modal::Result { .. }) => {
                self.modal = None;
                return None;
            }
            None => {}
        }
        self.flash = None;
        match key.code {
            KeyCode::Char('q') | KeyCode::Esc => self.quit = true,
            KeyCode::Down | KeyCode::Char('j') => self.select(self.selected.saturating_add(1)),
            KeyCode::Up | KeyCode::Char('k') => self.select(self.selected.saturating_sub(1)),
            KeyCode::Home | KeyCode::Char('g') => self.select(0),
            KeyCode::End | KeyCode::Char('G') => self.select(usize::MAX),
            KeyCode::Enter | KeyCode::Right => self.expanded = self.current().map(|r| r.id().to_string()),
            KeyCode::Left => self.expanded = None,
            KeyCode::Char('t') => {
                let id = self.current().map(|r| r.id().to_string());
                self.expanded = if self.expanded == id { None } else { id };
            }
            KeyCode::Char('l') => self.show_logs = !self.show_logs,
            KeyCode::Char('f') => {
                self.log.paused = !self.log.paused;
                self.log.scroll = 0;
            }
            KeyCode::PageUp => {
                self.log.paused = true;
                self.log.scroll = self.log.scroll.saturating_add(LOG_PAGE);
            }
            KeyCode::PageDown => self.log.scroll = self.log.scroll.saturating_sub(LOG_PAGE),
            KeyCode::Char('/') => {
                self.show_logs = true;
                self.log.typing = Some(String::new());
            }
            KeyCode::Char('s') => {
                let row = self.current()?;
                self.modal = Some(Modal::ConfirmStop { id: row.id().to_string(), label: row.entry.label() });
            }
            KeyCode::Char('r') => {
                let row = self.current()?;
                let entry = row.entry.clone();
                self.modal = Some(Modal::Busy(format!("Restarting {}…", entry.label())));
                return Some(Action::Restart(entry));
            }
            KeyCode::Char('c') => {
                let row = self.current()?;
                if row.live {
                    let status = status_word(row.status);
                    self.flash = Some(format!("{} is {status}; stop it first (s)", row.entry.label()));
                    return None;
                }
                let entry = row.entry.clone();
                self.modal = Some(Modal::Busy(format!("Clearing {}…", entry.label())));
                return Some(Action::Clear(entry));
            }
            _ => self.dirty = false,
        }
        if self.expanded.is_some() {
            self.refresh_tree();
        }
        None
    }

    fn select(&mut self, i: usize) {
        self.selected = i.min(self.rows.len().saturating_sub(1));
        if self.expanded.is_some() {
            self.expanded = self.current().map(|r| r.id().to_string());
        }
    }

    /// Shows an action's result lines.
    pub fn finished(&mut self, title: String, lines: Vec<String>) {
        self.modal = Some(Modal::Result { title, lines });
        self.dirty = true;
    }
}

/// The TCP ports `pids` listen on. The namespace's listening sockets are read at most once per
/// round, and only once some process holds a socket: reading `/proc/net/tcp` walks the
/// kernel's whole established-connection hash table, empty or not, which cost more than all
/// the rest of a round with 100 entries (perf: `established_get_first`).
fn listening_ports(pids: &[Pid], sockets: &OnceCell<HashMap<u64, u16>>) -> Vec<u16> {
    let inodes: Vec<u64> = pids.iter().flat_map(|p| ports::socket_inodes(*p)).collect();
    if inodes.is_empty() {
        return Vec::new();
    }
    let sockets = sockets.get_or_init(ports::listening_sockets);
    let mut out: Vec<u16> = inodes.iter().filter_map(|i| sockets.get(i).copied()).collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The status as one word for the list: `running`, `timed out`, ... (the JSON token, spaced).
pub fn status_word(s: Status) -> &'static str {
    match s {
        Status::TimedOut => "timed out",
        s => s.as_str(),
    }
}

#[cfg(test)]
mod tests {
    use ratatui::crossterm::event::KeyEvent;
    use ratatui::crossterm::event::{KeyCode, KeyModifiers};
    use sheepdog::entry::Entry;
    use sheepdog::files::now_ms;
    use sheepdog::registry::Registry;
    use sheepdog::status::Status;
    use sheepdog::usage::Sampler;

    use super::{Action, App, LOG_PAGE, Modal, Row, Scope};

    fn key(c: KeyCode) -> KeyEvent {
        KeyEvent::new(c, KeyModifiers::NONE)
    }

    fn app() -> App {
        let mut a = App::new(Scope::default(), false);
        for (id, live) in [("proc_1", true), ("proc_2", false)] {
            let entry = Entry { id: id.into(), name: Some(format!("n{id}")), ..Entry::default() };
            a.rows.push(Row {
                entry,
                status: if live { Status::Running } else { Status::Exited },
                status_text: String::new(),
                live,
                failed: false,
                usage: None,
                ports: vec![],
                nudged: false,
            });
        }
        a
    }

    #[test]
    fn finished_entries_of_the_last_hour_only_unless_all() {
        let dir = tempfile::tempdir().unwrap();
        let reg = Registry::open(Some(dir.path().to_path_buf())).unwrap();
        let now = now_ms();
        for (name, ended_ago_ms) in [("old", 2 * 3600 * 1000), ("recent", 5 * 60 * 1000)] {
            reg.create(Entry {
                name: Some(name.into()),
                status: Status::Exited,
                exit_code: Some(0),
                started_at: now - ended_ago_ms - 1000,
                ended_at: Some(now - ended_ago_ms),
                ..Entry::default()
            })
            .unwrap();
        }
        let names = |a: &App| a.rows.iter().map(|r| r.entry.display_name()).collect::<Vec<_>>();
        let mut a = App::new(Scope::default(), false);
        a.refresh(&reg, &mut Sampler::new());
        assert_eq!(names(&a), vec!["recent"]);
        let mut a = App::new(Scope { session: None, all: true }, false);
        a.refresh(&reg, &mut Sampler::new());
        assert_eq!(names(&a), vec!["recent", "old"], "most recently ended first");
    }

    #[test]
    fn stop_needs_confirmation() {
        let mut a = app();
        assert!(a.on_key(key(KeyCode::Char('s'))).is_none());
        assert!(matches!(a.modal, Some(Modal::ConfirmStop { .. })));
        assert!(a.on_key(key(KeyCode::Char('n'))).is_none());
        assert!(a.modal.is_none());
        a.on_key(key(KeyCode::Char('s')));
        match a.on_key(key(KeyCode::Char('y'))) {
            Some(Action::Stop(e)) => assert_eq!(e.id, "proc_1"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(a.modal, Some(Modal::Busy(_))));
        a.finished("stop".into(), vec!["Stopped x.".into()]);
        a.on_key(key(KeyCode::Char('x')));
        assert!(a.modal.is_none());
    }

    #[test]
    fn clear_only_finished_entries_and_navigation() {
        let mut a = app();
        assert!(a.on_key(key(KeyCode::Char('c'))).is_none());
        assert!(a.flash.as_deref().unwrap_or("").contains("stop it first"));
        a.on_key(key(KeyCode::Char('j')));
        assert_eq!(a.selected, 1);
        a.on_key(key(KeyCode::Down));
        assert_eq!(a.selected, 1);
        assert!(matches!(a.on_key(key(KeyCode::Char('c'))), Some(Action::Clear(e)) if e.id == "proc_2"));
        a.modal = None;
        a.on_key(key(KeyCode::Char('k')));
        assert_eq!(a.selected, 0);
        a.on_key(key(KeyCode::Right));
        assert_eq!(a.expanded.as_deref(), Some("proc_1"));
        a.on_key(key(KeyCode::Left));
        assert_eq!(a.expanded, None);
        a.on_key(key(KeyCode::Char('/')));
        for c in "err".chars() {
            a.on_key(key(KeyCode::Char(c)));
        }
        assert!(!a.quit, "typing a search must not trigger keys");
        a.on_key(key(KeyCode::Enter));
        assert_eq!(a.log.search.as_deref(), Some("err"));
        a.on_key(key(KeyCode::Char('f')));
        assert!(a.log.paused);
        a.on_key(key(KeyCode::Char('f')));
        a.on_key(key(KeyCode::PageUp));
        assert!(a.log.paused && a.log.scroll == LOG_PAGE, "PgUp pauses and scrolls back");
        a.on_key(key(KeyCode::PageDown));
        assert_eq!(a.log.scroll, 0);
        a.on_key(key(KeyCode::Esc));
        assert!(a.quit);
    }
}
