//! `wait`: block until entries finish (by pidfd on the supervisor, else a bounded look), and the
//! exit status a finished entry stands for.

use crate::identity::Probe;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use crate::entry::Entry;
use crate::exit;
use crate::inspect::recorded_tree;
use crate::registry::{Registry, RegistryError};
use crate::status::Status;
use crate::sys::Signal;
use crate::sys::process::{self, POLL_IN, PollFd};

use super::start::settle_start;
use super::{ManagerError, stop, verified_supervisor, wait_pidfd};

/// The result of `wait`.
#[derive(Clone, Debug)]
pub enum Waited {
    /// Finished: the entry with its result.
    Finished(Entry),
    /// Still running when the timeout passed: the entry as last read.
    TimedOut(Entry),
    /// The supervisor is gone and no result was recorded.
    NoResult(Entry),
}

impl Waited {
    /// The entry as the wait last saw it, whichever way it returned.
    pub fn entry(&self) -> &Entry {
        match self {
            Waited::Finished(e) | Waited::TimedOut(e) | Waited::NoResult(e) => e,
        }
    }
}

/// How often `wait` re-reads an entry while its supervisor lives: 50 ms. A supervisor whose
/// command exited may stay on (its cleanup pending), so its exit alone does not say "done".
pub(super) const WAIT_TICK: Duration = Duration::from_millis(50);

/// Blocks until the entry's process has exited and any cleanup that has been triggered has
/// finished (a pending cleanup that nothing triggered does not hold it), then returns the
/// entry with its result. Wakes on the supervisor's pidfd, re-reading the entry every
/// `WAIT_TICK`; if the supervisor was killed, waits on what is left of the recorded tree.
pub fn wait(reg: &Registry, entry: &Entry, timeout: Option<Duration>) -> Result<Waited, ManagerError> {
    let entry = &settle_start(reg, entry)?;
    let end = timeout.map(|t| Instant::now() + t);
    let left = || end.map(|x| x.saturating_duration_since(Instant::now()));
    loop {
        let e = reg.read(&entry.id)?;
        if e.is_finished() {
            // A cleanup that is running, or that a supervisor still watching is about to run
            // (its owner is gone or its turn timeout passed), holds the wait.
            let due = e.cleanup_pending() && (e.owner_gone() || e.timeout_passed()) && e.supervisor_alive();
            if e.cleanup_running() || due {
                if left() == Some(Duration::ZERO) {
                    return Ok(Waited::TimedOut(e));
                }
                std::thread::sleep(left().unwrap_or(WAIT_TICK).min(Duration::from_millis(20)));
                continue;
            }
            // A stop that did not end the tree (a member frozen, or in D state) has not
            // finished the entry: wait for what is left, and record when it is gone.
            if stop::left_running(&e)
                && let Some(tree) = recorded_tree(&e)
            {
                while !tree.is_gone() {
                    let l = left();
                    if l == Some(Duration::ZERO) {
                        return Ok(Waited::TimedOut(e));
                    }
                    tree.wait_any_exit(l.unwrap_or(Duration::from_secs(1)).min(Duration::from_millis(100)));
                }
                return Ok(Waited::Finished(record_gone_later(reg, e)));
            }
            return Ok(Waited::Finished(e));
        }
        if left() == Some(Duration::ZERO) {
            return Ok(Waited::TimedOut(e));
        }
        if let Some(sup) = verified_supervisor(&e) {
            wait_pidfd(&sup, Some(left().unwrap_or(WAIT_TICK).min(WAIT_TICK)));
            continue;
        }
        // The supervisor is gone without a result (it was killed, maybe while we waited): wait
        // for what is left of the tree itself.
        if let Some(tree) = recorded_tree(&e).filter(|_| e.this_boot()) {
            while !tree.is_gone() {
                let l = left();
                if l == Some(Duration::ZERO) {
                    return Ok(Waited::TimedOut(e));
                }
                tree.wait_any_exit(l.unwrap_or(Duration::from_secs(1)).min(Duration::from_millis(100)));
            }
        }
        let e = reg.read(&entry.id)?;
        return Ok(if e.is_finished() { Waited::Finished(e) } else { Waited::NoResult(e) });
    }
}

/// Records that the tree a stop left running (`treeGone: false`) is gone now: `treeGone: true`,
/// and a status text that says it ended only after the stop. Returns the entry as recorded, or
/// as known when it cannot be written (the next `stop` or `reap` records it then).
fn record_gone_later(reg: &Registry, mut e: Entry) -> Entry {
    let id = e.id.clone();
    let mark = |e: &mut Entry| {
        if !stop::left_running(e) {
            return;
        }
        e.tree_gone = Some(true);
        let text = e.status_text.take().unwrap_or_else(|| e.status.as_str().to_string());
        let base = text.split("; the tree was not confirmed gone").next().unwrap_or(&text).to_string();
        e.status_text = Some(format!("{base}; the tree was gone only after the stop"));
    };
    match reg.update(&id, mark) {
        Ok(now) => now,
        Err(_) => {
            mark(&mut e);
            e
        }
    }
}

/// The sentence every front end says for one entry of a wait (`sheepdog wait` for several
/// entries, MCP's `process_wait`): `web (proc_1): exited (0).` once it finished, `web
/// (proc_1): still running.` when the wait returned before it did. `status` is the entry's as
/// the kernel says now (`inspect::live_status`). A `sheepdog wait` for one entry prints its
/// status text alone (a script's `status=$(sheepdog wait web)`).
pub fn waited_line(e: &Entry, status: Status, finished: bool) -> String {
    let text = crate::view::status_text(e, status);
    if finished { format!("{}: {text}.", e.label()) } else { format!("{}: still {text}.", e.label()) }
}

/// The exit status `wait` reports for a finished entry: the process's code, or 128 + the signal
/// that ended it; `None` when neither is known (the supervisor was killed, and the entry was
/// then stopped, reaped or recorded lost from outside: nobody saw the process's own status).
///
/// An entry stopped by its turn timeout reports 124, as GNU `timeout` does, whatever the process
/// itself exited with (one that traps SIGTERM and exits 0 still timed out). A stop is not a
/// success either: an entry stopped (`sheepdog stop`, a session's cancel, its owner's death, a
/// signal to its supervisor) reports 128 + the signal that ended it, and one that trapped
/// SIGTERM and exited on its own within the stop reports 143, as `run` under a SIGTERM does
/// (issue 34, item 5). Its own exit code stays recorded (`exitCode`) as data. A stop from
/// outside that saw no status (its supervisor was killed) stays unknown.
pub fn exit_status_of(e: &Entry) -> Option<i32> {
    if e.status == Status::TimedOut {
        return Some(exit::TIMED_OUT);
    }
    if e.status == Status::Stopped && e.exit_code.is_some() && e.signal.is_none() {
        return Some(exit::by_signal(Signal::TERM.as_raw()));
    }
    if let Some(c) = e.exit_code {
        return Some(c);
    }
    e.signal.as_ref().and_then(|s| s.signal()).map(|s| exit::by_signal(s.as_raw()))
}

/// What `wait` on several entries returns.
#[derive(Debug)]
pub struct WaitedMany {
    /// One result per entry, in the order given; `TimedOut` for one still running when the
    /// wait returned (the timeout passed, or with `any` another finished first).
    pub results: Vec<Waited>,
    /// The index of the entry that decides the exit status: with `any` the first that finished,
    /// else the last to finish (by its recorded end). `None` if none finished.
    pub decisive: Option<usize>,
    /// The wait returned at the first entry to finish (`wait --any`), not at the last.
    pub any: bool,
    /// How long the wait was bounded to (`wait --timeout`, MCP's `timeoutMs`), as asked.
    pub timeout: Option<Duration>,
}

impl WaitedMany {
    /// The wait ran out of time: with `any` none finished, else one was still running.
    pub fn timed_out(&self) -> bool {
        if self.any { self.decisive.is_none() } else { self.results.iter().any(|w| matches!(w, Waited::TimedOut(_))) }
    }

    /// The wait's verdict, the one every front end reads: it did not time out, and the entry
    /// that decides ([`WaitedMany::decisive`]) exited 0.
    pub fn ok(&self) -> bool {
        self.exit_status() == exit::OK
    }

    /// The exit status this wait gives `sheepdog wait` ([`crate::exit`]): the decisive entry's
    /// ([`exit_status_of`]: its code, 128 + its signal, 124 for a turn timeout), or 125 when it
    /// is unknown (its supervisor was killed); at least 125 when any entry ended without a
    /// recorded result, wherever it stands; 124 when the wait timed out, whatever else.
    pub fn exit_status(&self) -> i32 {
        if self.timed_out() {
            return exit::TIMED_OUT;
        }
        let code = match self.decisive.and_then(|i| self.results.get(i)) {
            Some(Waited::Finished(x)) => exit_status_of(x).unwrap_or(exit::USAGE),
            Some(Waited::NoResult(_)) => exit::USAGE,
            _ => exit::OK,
        };
        // An entry that ended without a result may have ended last, and how is unknown: never
        // a success, wherever it stands in the order asked.
        if self.results.iter().any(|w| matches!(w, Waited::NoResult(_))) { code.max(exit::USAGE) } else { code }
    }
}

/// True when `wait` on this entry would return at once: it is final and its cleanup is not
/// running and its tree is gone (or not known to be alive), or its supervisor is gone.
pub(super) fn wait_would_return(e: &Entry) -> bool {
    (e.is_finished() && !e.cleanup_running() && !stop::left_running(e))
        || (!stop::left_running(e) && !e.supervisor_alive() && !e.starter_alive())
}

/// `wait` on several entries: all of them, or with `any` until the first finishes; bounded by
/// `timeout`. Each finished entry's result is [`wait`]'s.
pub fn wait_many(
    reg: &Registry,
    entries: &[Entry],
    any: bool,
    timeout: Option<Duration>,
) -> Result<WaitedMany, ManagerError> {
    let end = timeout.map(|t| Instant::now() + t);
    let left = || end.map(|e| e.saturating_duration_since(Instant::now()));
    let mut results: Vec<Option<Waited>> = vec![None; entries.len()];
    if !any {
        for (i, e) in entries.iter().enumerate() {
            results[i] = Some(wait(reg, e, left())?);
        }
        let decisive = results
            .iter()
            .enumerate()
            .filter_map(|(i, w)| match w {
                Some(Waited::Finished(e)) => Some((e.ended_at.unwrap_or(0), i)),
                _ => None,
            })
            .max()
            .map(|(_, i)| i);
        return Ok(WaitedMany { results: unfinished_as_timed_out(reg, entries, results), decisive, any, timeout });
    }
    let mut decisive = None;
    loop {
        let mut sups = Vec::new();
        // Of those done by now, the first to finish (by its recorded end; one without a
        // result, whose end nobody saw, after those), whatever the order asked.
        let mut done = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            let cur = match reg.read(&e.id) {
                Ok(c) => c,
                Err(RegistryError::NotFound(_)) => continue,
                Err(err) => return Err(err.into()),
            };
            if cur.status != Status::Starting && wait_would_return(&cur) {
                done.push((cur.ended_at.filter(|_| cur.is_finished()).unwrap_or(u64::MAX), i, cur));
                continue;
            }
            sups.extend(verified_supervisor(&cur));
        }
        done.sort_by_key(|(ended, i, _)| (*ended, *i));
        for (_, i, cur) in done {
            // Its wait may still run out (a cleanup its supervisor is about to run holds it):
            // that one has not finished first, so the next is looked at.
            let w = wait(reg, &cur, Some(left().unwrap_or(Duration::from_secs(10))))?;
            let ended = !matches!(w, Waited::TimedOut(_));
            results[i] = Some(w);
            if ended {
                decisive = Some(i);
                break;
            }
        }
        if decisive.is_some() {
            break;
        }
        let tick = Duration::from_millis(100);
        let wait_for = left().map_or(tick, |l| l.min(tick));
        if left() == Some(Duration::ZERO) {
            break;
        }
        let mut fds: Vec<PollFd> = sups.iter().map(|s| PollFd::new(s.as_raw_fd(), POLL_IN)).collect();
        if fds.is_empty() {
            std::thread::sleep(wait_for);
        } else {
            let _ = process::poll(&mut fds, Some(wait_for));
        }
    }
    Ok(WaitedMany { results: unfinished_as_timed_out(reg, entries, results), decisive, any, timeout })
}

/// The results of [`wait_many`], one per entry: an entry not waited to its end (with `any`,
/// another finished first; or the timeout passed) is [`Waited::TimedOut`], as read now.
fn unfinished_as_timed_out(reg: &Registry, entries: &[Entry], results: Vec<Option<Waited>>) -> Vec<Waited> {
    let now = |e: &Entry| Waited::TimedOut(reg.read(&e.id).unwrap_or_else(|_| e.clone()));
    entries.iter().zip(results).map(|(e, w)| w.unwrap_or_else(|| now(e))).collect()
}

#[cfg(test)]
mod tests {
    use super::{Waited, WaitedMany};
    use crate::entry::Entry;
    use crate::status::Status;

    fn exited(code: i32, ended_at: u64) -> Waited {
        Waited::Finished(Entry {
            status: Status::Exited,
            exit_code: Some(code),
            ended_at: Some(ended_at),
            ..Entry::default()
        })
    }

    /// `wait`'s status is decided once, by the outcome: the decisive entry's code; 125 when it
    /// is unknown or an entry before it has no result; 124 on a timeout, whatever else.
    #[test]
    fn a_wait_says_its_own_exit_status() {
        let many = |results, decisive, any| WaitedMany { results, decisive, any, timeout: None };
        let running = || Waited::TimedOut(Entry::default());
        let w = many(vec![exited(0, 1), exited(3, 2)], Some(1), false);
        assert_eq!((w.exit_status(), w.ok()), (3, false));
        let w = many(vec![exited(0, 1)], Some(0), false);
        assert_eq!((w.exit_status(), w.ok()), (0, true));
        let w = many(vec![exited(0, 1), running()], Some(0), false);
        assert_eq!((w.exit_status(), w.timed_out()), (124, true));
        let w = many(vec![running(), exited(2, 1)], Some(1), true);
        assert_eq!((w.exit_status(), w.timed_out()), (2, false), "with any, one finished is enough");
        let w = many(vec![running(), running()], None, true);
        assert_eq!(w.exit_status(), 124);
        let unknown = Waited::Finished(Entry { status: Status::Lost, ..Entry::default() });
        assert_eq!(many(vec![unknown], Some(0), false).exit_status(), 125);
        let w = many(vec![exited(0, 1), Waited::NoResult(Entry::default())], Some(0), false);
        assert_eq!(w.exit_status(), 125, "an entry without a result after the decisive one");
    }
}
