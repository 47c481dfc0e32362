//! `stop`: through the entry's supervisor while it lives (SIGTERM to it, then a bounded wait), past
//! it when it is gone or stuck (the recorded tree, by identity), then the cleanup.

use crate::identity::Probe;
use std::time::{Duration, Instant};

use crate::entry::{self, Entry, OutsideResult, StopTimings};
use crate::inspect::recorded_tree;
use crate::logs;
use crate::registry::{self, Registry, RegistryError};
use crate::status::{CleanupRunner, Status};
use crate::stop::{self, StopPolicy};
use crate::sys::process;
use crate::sys::{Pid, Signal, procfs};
use crate::tree::denied_line;
use crate::view::{StopView, view_with_status};

use super::reap::settle_cgroup;
use super::start::settle_start;
use super::{
    ManagerError, STOP_MARGIN, notify_supervisor, record_lost, verified_keeper, verified_supervisor, wait_pidfd,
};

/// True if a stop of a selection (`--session`, `--all`) takes this entry: it still runs, or its
/// cleanup is pending or running (a cleanup belongs to its entry, and every stop runs it).
pub fn stoppable(e: &Entry) -> bool {
    !e.is_finished() || e.cleanup_pending() || e.cleanup_running() || left_running(e)
}

/// True for a finished entry whose stop did not end its tree (`treeGone: false`, this boot):
/// the next `stop` tries again.
pub(super) fn left_running(e: &Entry) -> bool {
    e.is_finished() && e.tree_gone == Some(false) && e.this_boot()
}

/// The entries a stop of a selection takes ([`stoppable`]): those of `session`, or every entry
/// with `None`, oldest first; and the entries the listing set aside as unreadable (for the
/// caller to report). [`super::Selection::for_stop`] selects here for a session and for every
/// entry.
///
/// An unreadable entry whose supervisor lives is taken too with `None` (every entry), as a
/// stand-in ([`Registry::stand_in`]): its supervisor still holds a tree.
pub(super) fn stop_selection(reg: &Registry, session: Option<&str>) -> (Vec<Entry>, Vec<registry::SetAside>) {
    let (entries, aside) = reg.list_sweeping();
    let mut targets: Vec<Entry> = entries
        .into_iter()
        .filter(|e| session.is_none_or(|s| e.session_id.as_deref() == Some(s)) && stoppable(e))
        .collect();
    if session.is_none() {
        let ids = aside
            .iter()
            .filter(|a| a.supervisor_alive && a.moved_to.is_none())
            .filter_map(|a| a.path.parent().and_then(|d| d.file_name()).map(|n| n.to_string_lossy().into_owned()));
        targets.extend(ids.filter_map(|id| reg.stand_in(&id)));
    }
    (targets, aside)
}

/// The entry `key` (an id or a name) names, for a stop: [`Registry::find`], except that an
/// entry that cannot be read (corrupt, or its entry.json deleted) but whose supervisor lives
/// (`supervisor.json`, identity checked) gives its stand-in ([`Registry::stand_in`]), so its
/// tree can still be stopped. Errors: `find`'s.
pub(super) fn find_for_stop(reg: &Registry, key: &str) -> Result<Entry, RegistryError> {
    match reg.find(key) {
        Err(err @ RegistryError::Corrupt { .. }) => reg.stand_in(key).ok_or(err),
        // A name cannot be looked up without its entry; an id still names its directory.
        Err(err @ RegistryError::NotFound(_)) if !key.contains('/') && !key.starts_with('.') => {
            reg.stand_in(key).ok_or(err)
        }
        other => other,
    }
}

/// Stops each of `targets` with [`stop()`], each on its own thread, so a whole turn stops within
/// one grace instead of one per entry. Results come in the order of `targets`.
pub fn stop_many(
    reg: &Registry,
    targets: &[Entry],
    term_grace: Option<Duration>,
) -> Vec<Result<StopOutcome, ManagerError>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = targets.iter().map(|e| s.spawn(|| stop(reg, e, term_grace))).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(ManagerError::Refused("stop panicked".into()))))
            .collect()
    })
}

/// How one `stop` ended.
#[derive(Debug)]
pub struct StopOutcome {
    pub entry: Entry,
    /// The entry had already finished before this stop.
    pub already_finished: bool,
    /// Nothing of the tree is alive.
    pub tree_gone: bool,
    /// Why the tree is not gone, when processes of it could not be signalled: `1 process of
    /// uid 0 could not be signalled: permission denied` ([`crate::tree::denied_line`]).
    pub not_signalled: Option<String>,
    /// Who is still alive when the tree is not gone for another reason (a member frozen, or in
    /// D state): `pid 4242 (sleep) is still alive` ([`crate::tree::left_line`]).
    pub left: Option<String>,
}

impl StopOutcome {
    /// The first line every front end shows for this stop: `Stopped NAME (ID).` for a real
    /// stop; `The tree of NAME (ID) was not confirmed gone: pid 4242 (sleep) is still alive.`
    /// for one that did not finish (without who is left when that is not known); for an entry
    /// that had already ended, what happened instead (`web (proc_5) had already exited (3).`),
    /// never `Stopped`.
    pub fn headline(&self) -> String {
        let e = &self.entry;
        if self.not_signalled.is_some() {
            return format!("Could not stop {}.", e.label());
        }
        if !self.tree_gone {
            return match &self.left {
                Some(left) => format!("The tree of {} was not confirmed gone: {left}.", e.label()),
                None => format!("The tree of {} was not confirmed gone.", e.label()),
            };
        }
        if !self.already_finished {
            return format!("Stopped {}.", e.label());
        }
        let text = crate::view::status_text(e, e.status);
        let what = match e.status {
            Status::Exited | Status::TimedOut => text,
            Status::Killed | Status::Stopped | Status::Reaped => format!("been {text}"),
            _ => format!("ended: {text}"),
        };
        format!("{} had already {what}.", e.label())
    }
}

impl StopOutcome {
    /// The cleanup's failure line when its cleanup failed ([`crate::cleanup::failure_line`]).
    pub fn cleanup_error(&self) -> Option<String> {
        crate::cleanup::failure_line(&self.entry)
    }

    /// The stop's verdict, the one every front end reads (the CLI's status, MCP's `isError`,
    /// the journal's `ok`): the tree is gone and the cleanup, if any, did not fail.
    pub fn ok(&self) -> bool {
        self.tree_gone && self.cleanup_error().is_none()
    }

    /// The exit status this stop gives `sheepdog stop` ([`crate::exit`]): 0; 124 when the tree
    /// was not confirmed gone; 1 when it is gone but the cleanup failed.
    pub fn exit_status(&self) -> i32 {
        if !self.tree_gone {
            crate::exit::TIMED_OUT
        } else if self.cleanup_error().is_some() {
            crate::exit::REFUSED
        } else {
            crate::exit::OK
        }
    }

    /// The sentences every front end says for this stop (`sheepdog stop`'s stdout, MCP's
    /// `lines` and text, `top`'s dialog): the [`headline`](StopOutcome::headline), then why
    /// processes could not be signalled, then the cleanup's failure line
    /// ([`cleanup_error`](StopOutcome::cleanup_error)).
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![self.headline()];
        lines.extend(self.not_signalled.clone());
        lines.extend(self.cleanup_error());
        lines
    }
}

impl StopOutcome {
    /// This stop as `stop --json` shows it: the entry's view with the outcome's verdict
    /// ([`ok`](StopOutcome::ok)), its cleanup's failure line and its [`lines`](StopOutcome::lines).
    pub fn view(&self, reg: &Registry) -> StopView {
        let entry = view_with_status(reg, &self.entry, self.entry.status, false);
        StopView::new(entry, self.already_finished, self.tree_gone, self.ok(), self.cleanup_error(), self.lines())
    }
}

/// A stop whose tree is gone but whose result could not be recorded ([`ManagerError::NotRecorded`]:
/// `entry` as the stop knows it, `why` the write's error), as `stop --json` shows it: `ok`
/// false, `notRecorded` why, and the [`not_recorded_line`].
pub fn not_recorded_view(reg: &Registry, entry: &Entry, why: &RegistryError) -> StopView {
    let view = view_with_status(reg, entry, entry.status, false);
    StopView::new(view, false, true, false, None, vec![not_recorded_line(entry)]).not_recorded(why.to_string())
}

/// The sentence every front end says for a stop whose tree is gone but whose result could not be
/// recorded ([`ManagerError::NotRecorded`], status 74): `Stopped NAME (ID) (not recorded).`
pub fn not_recorded_line(entry: &Entry) -> String {
    format!("Stopped {} (not recorded).", entry.label())
}

/// Stops one entry: asks its supervisor (SIGTERM through a pidfd, after its identity is
/// verified), waits up to the entry's `maxStopMs` plus [`STOP_MARGIN`], and if the supervisor is
/// gone or does not finish, stops the recorded tree itself with the same sequence.
///
/// Every stop that ends records a `stopped` event in the journal ([`crate::journal`]).
pub fn stop(reg: &Registry, entry: &Entry, term_grace: Option<Duration>) -> Result<StopOutcome, ManagerError> {
    let o = stop_entry(reg, entry, term_grace)?;
    let kind = crate::journal::Kind::Stopped {
        already_finished: o.already_finished,
        tree_gone: o.tree_gone,
        ok: o.ok(),
        cleanup_error: o.cleanup_error(),
    };
    let _ = crate::journal::append(reg.root(), &o.entry, kind);
    Ok(o)
}

pub(super) fn stop_entry(
    reg: &Registry,
    entry: &Entry,
    term_grace: Option<Duration>,
) -> Result<StopOutcome, ManagerError> {
    let settled = settle_start(reg, entry)?;
    match stop_settled(reg, &settled, term_grace) {
        // Cleared meanwhile (`clear --finished` in another caller): `clear` removes only entries
        // that nothing of runs any more, so the entry is finished, and this stop is not an error.
        Err(ManagerError::Registry(RegistryError::NotFound(_))) => Ok(cleared_meanwhile(settled)),
        other => other,
    }
}

/// The outcome of a stop whose entry was cleared while the stop ran: finished, the tree gone.
pub(super) fn cleared_meanwhile(mut e: Entry) -> StopOutcome {
    let already_finished = e.is_finished();
    if !already_finished {
        e.status = Status::Stopped;
        e.status_text = Some("stopped (its entry was cleared meanwhile)".into());
        e.tree_gone = Some(true);
    }
    StopOutcome { entry: e, already_finished, tree_gone: true, not_signalled: None, left: None }
}

/// Why a stop that did not end the tree (`gone` false) did not, from what of `e`'s recorded tree
/// lives now: the refused signals ([`denied_line`]) as the first, or else who is left
/// ([`crate::tree::left_line`]) as the second.
fn unfinished(e: &Entry, gone: bool) -> (Option<String>, Option<String>) {
    if gone {
        return (None, None);
    }
    let live = recorded_tree(e).map(|t| t.live()).unwrap_or_default();
    match denied_line(&live) {
        Some(line) => (Some(line), None),
        None => (None, Some(crate::tree::left_line(&live))),
    }
}

/// How the tree part of a stop ended, before its cleanup step ([`stop_settled`]).
enum Stopped {
    /// Nothing was signalled: the entry had ended (the wrapper may have exited while its work
    /// goes on: its cleanup is still due).
    AlreadyEnded,
    /// The supervisor (or its keeper) ran the stop and recorded it.
    BySupervisor,
    /// This process stopped the recorded tree itself, past a supervisor that was gone or stuck;
    /// `gone`: what the kernel said of the tree.
    FromOutside { entry: Box<Entry>, gone: bool },
}

/// [`stop`] of an entry past `starting`: the tree ([`stop_tree`]), then the cleanup step,
/// claimed here and nowhere else in a stop (`cleanup::run_once`: a cleanup the supervisor
/// already ran, or still runs, is waited for and not run twice; one whose runner died is run
/// here). The outcome is read after it.
pub(super) fn stop_settled(
    reg: &Registry,
    entry: &Entry,
    term_grace: Option<Duration>,
) -> Result<StopOutcome, ManagerError> {
    let id = entry.id.clone();
    if left_running(entry) && !entry.supervisor_alive() {
        return stop_again(reg, entry);
    }
    let stopped = if entry.is_finished() {
        Stopped::AlreadyEnded
    } else if !entry.this_boot() {
        let e = record_lost(reg, &id, "lost (recorded during a previous boot; nothing was signalled)")?;
        return Ok(StopOutcome { entry: e, already_finished: true, tree_gone: true, not_signalled: None, left: None });
    } else {
        stop_tree(reg, entry, term_grace)?
    };
    if matches!(stopped, Stopped::AlreadyEnded) {
        ask_the_lingering_supervisor(reg, entry);
    }
    // An entry of a previous boot has nothing to run its cleanup for.
    let ran = entry.this_boot().then(|| crate::cleanup::run_once(reg, &id, CleanupRunner::Stop)).flatten();
    match stopped {
        Stopped::AlreadyEnded => {
            // A supervisor that stayed to watch for the cleanup is told to re-read its entry
            // and leave.
            notify_supervisor(entry);
            let e = reg.read(&id)?;
            Ok(StopOutcome { entry: e, already_finished: true, tree_gone: true, not_signalled: None, left: None })
        }
        Stopped::BySupervisor => {
            let now = reg.read(&id)?;
            let tree_gone = now.tree_gone.unwrap_or(true);
            let (not_signalled, left) = unfinished(&now, tree_gone);
            Ok(StopOutcome { tree_gone, entry: now, already_finished: false, not_signalled, left })
        }
        Stopped::FromOutside { entry: e, gone } => {
            let e = match ran {
                Some(_) => reg.read(&id)?,
                None => *e,
            };
            let (not_signalled, left) = unfinished(&e, gone);
            Ok(StopOutcome { entry: e, already_finished: false, tree_gone: gone, not_signalled, left })
        }
    }
}

/// An ended entry whose supervisor stayed for its pending cleanup (it has an owner or a
/// timeout): that supervisor runs the cleanup, as it does for the owner's death or the timeout,
/// asked with a stop's SIGTERM. It bounds the cleanup even if this process is killed meanwhile;
/// run here, a SIGKILLed `stop` left it running past its bound. Waits until the claim is made
/// (the cleanup step after it then waits for its result) or the supervisor is gone, at most
/// [`STOP_MARGIN`]: a stuck supervisor leaves the cleanup to this stop.
fn ask_the_lingering_supervisor(reg: &Registry, entry: &Entry) {
    if !entry.cleanup_pending() {
        return;
    }
    let Some(sup) = verified_supervisor(entry) else { return };
    if sup.send(Signal::TERM).is_err() {
        return;
    }
    let end = Instant::now() + STOP_MARGIN;
    while Instant::now() < end && !wait_pidfd(&sup, Some(Duration::from_millis(20))) {
        if reg.read(&entry.id).is_ok_and(|e| !e.cleanup_pending()) {
            return;
        }
    }
}

/// The tree part of [`stop_settled`] for a running entry of this boot: asks the supervisor and
/// waits for it, or acts past it.
fn stop_tree(reg: &Registry, entry: &Entry, term_grace: Option<Duration>) -> Result<Stopped, ManagerError> {
    let id = entry.id.clone();
    let mut entry = entry.clone();
    // A supervisor already stopping keeps the grace it started with: wait for the longer.
    let before = Duration::from_millis(entry.stop_in_effect().max_stop_ms);
    // The request's one-off timings: in this copy they say what this stop waits for (and stops
    // with, past a stuck supervisor); the supervisor hears them with the signal, not from the
    // entry, and records them as the stop under way beside the entry's own.
    let asked = term_grace.map(|g| with_term_grace(&entry.stop, g));
    let one_off = |e: &mut Entry| {
        if asked.is_some() {
            e.stop_under_way = asked;
        }
    };
    one_off(&mut entry);
    let mut past_a_stuck_supervisor = false;
    if let Some(sup) = verified_supervisor(&entry) {
        ask_to_stop(reg, &id, &sup, term_grace);
        let bound =
            before.max(Duration::from_millis(entry.stop_in_effect().max_stop_ms)) + cleanup_bound(&entry) + STOP_MARGIN;
        let deadline = Instant::now() + bound;
        let exited = wait_pidfd(&sup, Some(bound));
        let mut now = reg.read(&id)?;
        // The supervisor was killed from outside while it stopped (it exited with nothing
        // recorded): its keeper has taken the stop over (`supervisorKilled`). Let it finish
        // within the same bound; killing it would cut the grace short and record a false cause.
        if exited
            && !now.is_finished()
            && let Some(keeper) = verified_keeper(&now)
        {
            wait_pidfd(&keeper, Some(deadline.saturating_duration_since(Instant::now())));
            now = reg.read(&id)?;
        }
        if now.is_finished() {
            // The supervisor ran the cleanup, or died before it: the cleanup step settles it.
            return Ok(Stopped::BySupervisor);
        }
        // The tree is gone but nothing says so: the supervisor could not record its result (a
        // full disk) and waits to retry, holding the real outcome. Record ours first; if that
        // cannot be written either, leave the supervisor alive: its next write tells the truth.
        if recorded_tree(&now).is_none_or(|t| t.is_gone()) {
            let why = "the supervisor did not finish in time and was killed";
            let mut known = now.clone();
            known.finish_from_outside(OutsideResult::StoppedPast(why), true);
            if let Err(source) = reg.update(&id, |e| {
                e.finish_from_outside(OutsideResult::StoppedPast(why), true);
            }) && source.is_not_written()
            {
                return Err(ManagerError::NotRecorded { label: now.label(), entry: Box::new(known), source });
            }
        }
        // The supervisor did not finish: it is stuck or died mid-stop. Act past it. Orphans were
        // re-parented to it (it is their subreaper) and it may not have recorded them yet: take
        // its descendants as members while they are still its own, before it is killed.
        let adopted: Vec<entry::RecordedMember> = Pid::new(now.supervisor.map_or(0, |s| s.pid))
            .map(procfs::descendants)
            .unwrap_or_default()
            .iter()
            .filter(|s| !s.is_zombie() && Some(s.pid.as_raw()) != now.keeper.map(|k| k.pid))
            .map(|s| entry::RecordedMember { pid: s.pid.as_raw(), start_time: s.start_time })
            .collect();
        // Stuck only if it still ran: a zombie (killed meanwhile, its parent slow to reap it)
        // takes the signal too, but nothing here killed it.
        let ran = Pid::new(now.supervisor.map_or(0, |s| s.pid))
            .and_then(|p| procfs::stat(p).ok())
            .is_none_or(|s| !s.is_zombie());
        past_a_stuck_supervisor = sup.send(Signal::KILL).is_ok_and(|s| s == process::Sent::Delivered) && ran;
        // A stuck chain may be stuck in either process: the keeper goes too, or it would stay
        // stopped forever (a SIGSTOPped keeper cannot take over).
        if let Some(keeper) = verified_keeper(&now) {
            let _ = keeper.send(Signal::KILL);
        }
        entry = now;
        one_off(&mut entry);
        entry.members.extend(adopted);
        // The stop goes on here with the request's grace: recorded as the stop under way while
        // it runs, as the supervisor records it (what other stops wait for); the result below
        // ends it.
        if asked.is_some() {
            let _ = reg.update(&id, |e| {
                if !e.is_finished() {
                    e.stop_under_way = asked;
                }
            });
        }
    }
    let report = match recorded_tree(&entry) {
        Some(tree) => stop::stop_blocking(&tree, StopPolicy::from_timings(&entry.stop_in_effect())),
        None => stop::StopReport { gone: true, escalated: false, signalled: 0 },
    };
    let why = if past_a_stuck_supervisor {
        "the supervisor did not finish in time and was killed"
    } else {
        "the supervisor was gone"
    };
    logs::append_marker(
        &reg.dir(&id),
        &format!(
            "stopped by sheepdog stop ({why}): {} signalled, tree {}",
            report.signalled,
            if report.gone { "gone" } else { "NOT confirmed gone" }
        ),
    );
    let live = if report.gone { Vec::new() } else { recorded_tree(&entry).map(|t| t.live()).unwrap_or_default() };
    let recorded = reg.update(&id, |e| {
        let finished = e.finish_from_outside(OutsideResult::StoppedPast(why), report.gone);
        if finished && !report.gone {
            e.status_text = Some(crate::tree::unfinished_text(&format!("stopped (by sheepdog stop; {why})"), &live));
        }
    });
    let e = match recorded {
        Ok(e) => e,
        Err(source) if report.gone && source.is_not_written() => {
            let mut known = entry.clone();
            known.finish_from_outside(OutsideResult::StoppedPast(why), true);
            return Err(ManagerError::NotRecorded { label: entry.label(), entry: Box::new(known), source });
        }
        Err(source) => return Err(source.into()),
    };
    Ok(Stopped::FromOutside { entry: Box::new(settle_cgroup(reg, e)), gone: report.gone })
}

/// The timings `own` with the term grace `g` in its place (`maxStopMs` derived again).
fn with_term_grace(own: &StopTimings, g: Duration) -> StopTimings {
    StopPolicy { term_grace: g, ..StopPolicy::from_timings(own) }.timings()
}

/// Asks a verified supervisor for the one stop: SIGTERM, carrying `term_grace` (ms) as the
/// signal's value when given (`sys::process::PidFd::send_with_value`), which the supervisor
/// uses for this stop only and records with it. Where a signal cannot carry a value (not 64-bit
/// Linux), or the grace does not fit in its 64 bits of ms, the grace is written to the entry
/// first, for the supervisor to read as its stop begins; a registry that cannot be written (a
/// full disk) must not keep the tree from stopping, so the signal goes either way.
fn ask_to_stop(reg: &Registry, id: &str, sup: &crate::sys::process::PidFd, term_grace: Option<Duration>) {
    if let Some(g) = term_grace {
        if let Ok(ms) = u64::try_from(g.as_millis())
            && sup.send_with_value(Signal::TERM, ms).is_ok()
        {
            return;
        }
        let _ = reg.update(id, |e| {
            if !e.is_finished() {
                e.stop_under_way = Some(with_term_grace(&e.stop, g));
            }
        });
    }
    let _ = sup.send(Signal::TERM);
}

/// The stop of a finished entry whose tree was not gone when it was stopped (a member could not
/// be signalled): the one stop once more over what is recorded of it, and the result written
/// back (`treeGone`, and a status text that says what is still left).
pub(super) fn stop_again(reg: &Registry, entry: &Entry) -> Result<StopOutcome, ManagerError> {
    let id = &entry.id;
    let report = match recorded_tree(entry) {
        Some(tree) => stop::stop_blocking(&tree, StopPolicy::from_timings(&entry.stop)),
        None => stop::StopReport { gone: true, escalated: false, signalled: 0 },
    };
    let live = if report.gone { Vec::new() } else { recorded_tree(entry).map(|t| t.live()).unwrap_or_default() };
    logs::append_marker(
        &reg.dir(id),
        &format!(
            "stopped again by sheepdog stop: {} signalled, tree {}",
            report.signalled,
            if report.gone { "gone" } else { "NOT confirmed gone" }
        ),
    );
    let e = reg.update(id, |e| {
        e.tree_gone = Some(report.gone);
        e.status_text = Some(if report.gone {
            "stopped (by sheepdog stop, again)".into()
        } else {
            crate::tree::unfinished_text("stopped (by sheepdog stop, again)", &live)
        });
    })?;
    let e = settle_cgroup(reg, e);
    let (not_signalled, left) = unfinished(&e, report.gone);
    Ok(StopOutcome { entry: e, already_finished: false, tree_gone: report.gone, not_signalled, left })
}

/// The longest a cleanup can take: its timeout plus the stop of its own tree.
pub(super) fn cleanup_bound(e: &Entry) -> Duration {
    match &e.cleanup {
        Some(c) => StopPolicy::from_timings(&e.stop).cleanup_bound(Duration::from_millis(c.timeout_ms)),
        None => Duration::ZERO,
    }
}

#[cfg(test)]
mod tests {
    use super::{StopOutcome, not_recorded_line};
    use crate::entry::Entry;
    use crate::status::Status;

    fn outcome(tree_gone: bool, not_signalled: Option<&str>, left: Option<&str>) -> StopOutcome {
        let entry =
            Entry { id: "proc_1".into(), name: Some("web".into()), status: Status::Stopped, ..Entry::default() };
        StopOutcome {
            entry,
            already_finished: false,
            tree_gone,
            not_signalled: not_signalled.map(str::to_string),
            left: left.map(str::to_string),
        }
    }

    /// The sentences, verdict and status every front end takes from one stop's outcome.
    #[test]
    fn a_stop_says_its_own_sentences_and_verdict() {
        let o = outcome(true, None, None);
        assert_eq!((o.lines(), o.ok(), o.exit_status()), (vec!["Stopped web (proc_1).".to_string()], true, 0));
        let o = outcome(false, None, Some("pid 4242 (sleep) is still alive"));
        assert_eq!(o.lines(), ["The tree of web (proc_1) was not confirmed gone: pid 4242 (sleep) is still alive."]);
        assert_eq!((o.ok(), o.exit_status()), (false, 124));
        // Not gone, and nobody known to be left: never `Stopped`.
        let o = outcome(false, None, None);
        assert_eq!(o.lines(), ["The tree of web (proc_1) was not confirmed gone."]);
        let why = "1 process of uid 0 could not be signalled: permission denied";
        let o = outcome(false, Some(why), None);
        assert_eq!(o.lines(), ["Could not stop web (proc_1).", why]);
        assert_eq!(not_recorded_line(&o.entry), "Stopped web (proc_1) (not recorded).");
    }
}
