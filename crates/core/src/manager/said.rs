//! What every front end says for an operation's outcome: one rendering, reached through `From`.
//!
//! `sheepdog stop`, MCP's `process_stop` and `top`'s stop dialog used to each pick the sentences,
//! the verdict and the status out of a [`StopOutcome`] on their own; now each turns the outcome
//! into a [`Said`] and shows what its form has room for. The CLI prints `lines` and exits with
//! `exit_status`, MCP sends `lines` as its text with `isError` = `failed`, and `top` shows `lines`
//! in its result dialog. What a front end adds after them is its own (`top`'s tree and cleanup
//! details, MCP's next call, the CLI's log tail on stderr), never another wording of the same
//! fact.

use std::cell::OnceCell;

use super::{Reaped, Restarted, Started, StopOutcome, Waited, WaitedMany, exit_status_of, waited_line};
use crate::status::ReapKind;

/// One outcome as every front end says it: the sentences, in order, and the verdicts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Said {
    /// The sentences, one per line, without a trailing newline: `Stopped web (proc_1).`,
    /// `Started web (proc_2), pid 4242.`, `Reaped web (proc_1): its supervisor is gone.`.
    pub lines: Vec<String>,
    /// What is unknown or left undone, after the lines, each a sentence that opens with the
    /// entry it is about: `web (proc_1): still running after 5s; nothing was stopped.` The CLI
    /// says each on stderr (`sheepdog: wait: ...`), MCP and `top` after the lines. Only a wait
    /// has them so far.
    pub warnings: Vec<String>,
    /// The outcome's verdict (`StopOutcome::ok`, `Restarted::ok`, ...): nothing went wrong.
    pub ok: bool,
    /// The action failed (MCP's `isError`). It differs from `!ok` in one case only: a readiness
    /// wait that timed out is not a failure, because the process keeps running and may be ready
    /// later (`ReadyOutcome::failed`), though it is not `ok` and its status is 124.
    pub failed: bool,
    /// The status the CLI exits with for this outcome ([`crate::exit`]: 0, 1, 74, 124, ...).
    pub exit_status: i32,
}

impl From<&StopOutcome> for Said {
    /// `StopOutcome::lines`: the headline, why processes could not be signalled, the cleanup's
    /// failure line.
    fn from(o: &StopOutcome) -> Said {
        Said { lines: o.lines(), warnings: Vec::new(), ok: o.ok(), failed: !o.ok(), exit_status: o.exit_status() }
    }
}

impl From<&Started> for Said {
    /// `Started NAME (ID), pid N.`; the readiness sentence is [`crate::ready::ReadyOutcome::sentence`],
    /// which each front end follows with what to do next in its own terms.
    fn from(s: &Started) -> Said {
        Said {
            lines: vec![started_line(&s.entry)],
            warnings: Vec::new(),
            ok: s.ok(),
            failed: s.ready.as_ref().is_some_and(crate::ready::ReadyOutcome::failed),
            exit_status: s.exit_status(),
        }
    }
}

impl From<&Restarted> for Said {
    /// The old entry's stop as [`StopOutcome`] says it, then `Started NAME (ID), pid N.` for the
    /// new one. It failed when the stop did or the new command ended before it was ready.
    fn from(r: &Restarted) -> Said {
        let stop = Said::from(&r.stopped);
        let mut lines = stop.lines;
        lines.push(started_line(&r.entry));
        Said {
            lines,
            warnings: Vec::new(),
            ok: r.ok(),
            failed: stop.failed || r.ready.as_ref().is_some_and(crate::ready::ReadyOutcome::failed),
            exit_status: r.exit_status(),
        }
    }
}

impl From<&Reaped> for Said {
    /// One sentence per action (`Reaped web (proc_1): REASON.`, `Ran the cleanup of ...`,
    /// `Lost ...`; `Would ...` for a dry run), each followed by who is still alive and the
    /// cleanup's failure line when there are; then one per cgroup it could not empty.
    fn from(r: &Reaped) -> Said {
        let mut lines = Vec::new();
        for x in &r.actions {
            let label = format!("{} ({})", x.name.as_deref().unwrap_or(&x.id), x.id);
            lines.push(match (x.action, r.dry_run) {
                (ReapKind::Reaped, false) => format!("Reaped {label}: {}.", x.reason),
                (ReapKind::Reaped, true) => format!("Would reap {label}: {}.", x.reason),
                (ReapKind::Cleanup, false) => format!("Ran the cleanup of {label}: {}.", x.reason),
                (ReapKind::Cleanup, true) => format!("Would run the cleanup of {label}: {}.", x.reason),
                (ReapKind::Lost, false) => format!("Lost {label}: {}.", x.reason),
                (ReapKind::Lost, true) => format!("Would record as lost {label}: {}.", x.reason),
            });
            lines.extend(x.left.as_ref().map(|left| format!("The tree of {label} was not confirmed gone: {left}.")));
            lines.extend(x.cleanup_error.clone());
        }
        lines.extend(r.cgroups_left.iter().map(|c| format!("Could not empty the cgroup {}: {}.", c.path, c.left)));
        Said { lines, warnings: Vec::new(), ok: r.ok(), failed: !r.ok(), exit_status: r.exit_status() }
    }
}

impl From<&WaitedMany> for Said {
    /// One line per entry, in the order asked ([`waited_line`], with the status the kernel
    /// says now): `web (proc_1): exited (0).`, `web (proc_1): still running.`. Then, as
    /// warnings: the decisive entry's status that nobody saw, each entry that ended without a
    /// recorded result, and, when the wait ran out of time, which entries still run (`any`:
    /// that none finished). A wait never fails (MCP's `isError`): an entry's own exit status is
    /// the answer, not an error of the wait; its `exit_status` is [`WaitedMany::exit_status`].
    fn from(w: &WaitedMany) -> Said {
        let (mut lines, mut warnings, mut running) = (Vec::new(), Vec::new(), Vec::new());
        // Ended, but what the wait holds for runs on: its cleanup, or what a stop left of its tree.
        let mut finishing = Vec::new();
        for (i, r) in w.results.iter().enumerate() {
            let (e, ended) = match r {
                Waited::Finished(e) | Waited::NoResult(e) => (e, true),
                Waited::TimedOut(e) => (e, false),
            };
            let status = crate::inspect::live_status(e, &OnceCell::new());
            // Read a moment after the wait returned: one that finished since is said as finished.
            let finished = ended || status.is_finished();
            lines.push(waited_line(e, status, finished));
            if !finished {
                running.push(e.label());
            } else if !ended {
                let what = if e.cleanup.is_some() && e.cleanup_state.result().is_none() {
                    "its cleanup is"
                } else {
                    "what is left of its tree is"
                };
                finishing.push((e.label(), what));
            }
            match r {
                Waited::Finished(x) if Some(i) == w.decisive && exit_status_of(x).is_none() => warnings.push(format!(
                    "{}: {}; its exit status is unknown (its supervisor was killed).",
                    x.label(),
                    x.status
                )),
                Waited::NoResult(x) => {
                    warnings
                        .push(format!("{}: ended without a recorded result (its supervisor was killed).", x.label()));
                }
                _ => {}
            }
        }
        if w.timed_out() {
            let within = w.timeout.map(|t| format!(" within {}", crate::duration::format(t))).unwrap_or_default();
            let after = w.timeout.map(|t| format!(" after {}", crate::duration::format(t))).unwrap_or_default();
            if w.any {
                let all: Vec<String> = w.results.iter().map(|r| r.entry().label()).collect();
                warnings.push(format!("{}: none finished{within}; nothing was stopped.", all.join(", ")));
            } else {
                if !running.is_empty() {
                    warnings.push(format!("{}: still running{after}; nothing was stopped.", running.join(", ")));
                }
                for (label, what) in finishing {
                    warnings.push(format!("{label}: {what} still running{after}; nothing was stopped."));
                }
            }
        }
        Said { lines, warnings, ok: w.ok(), failed: false, exit_status: w.exit_status() }
    }
}

/// `Started NAME (ID), pid N.` (without the pid when none is recorded yet).
fn started_line(e: &crate::entry::Entry) -> String {
    format!("Started {}{}.", e.label(), e.pid().map(|p| format!(", pid {p}")).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::{Reaped, Restarted, Said, Started, StopOutcome, Waited, WaitedMany};
    use crate::entry::{CleanupState, Entry};
    use crate::ready::ReadyOutcome;
    use crate::status::{ReapKind, Status};
    use crate::view::ReapAction;

    fn entry(id: &str) -> Entry {
        Entry { id: id.into(), name: Some("web".into()), status: Status::Running, ..Entry::default() }
    }

    fn stopped(tree_gone: bool) -> StopOutcome {
        let e = Entry { status: Status::Stopped, ..entry("proc_1") };
        StopOutcome { entry: e, already_finished: false, tree_gone, not_signalled: None, left: None }
    }

    /// A stop's sentences and verdicts are the outcome's own, so the three front ends cannot
    /// drift apart on them.
    #[test]
    fn a_stop_is_said_as_its_outcome_says_it() {
        let said = Said::from(&stopped(true));
        let lines = vec!["Stopped web (proc_1).".into()];
        assert_eq!(said, Said { lines, warnings: Vec::new(), ok: true, failed: false, exit_status: 0 });
        let said = Said::from(&stopped(false));
        assert_eq!((said.ok, said.failed, said.exit_status), (false, true, 124));
        assert_eq!(said.lines, vec!["The tree of web (proc_1) was not confirmed gone.".to_string()]);
    }

    /// A readiness wait that timed out is not ok and exits 124, but it is not a failure: the
    /// process keeps running (MCP's `isError` stays false). One that exited first is both.
    #[test]
    fn a_start_not_ready_in_time_is_not_ok_yet_not_failed() {
        let start = |ready| Started { entry: entry("proc_2"), ready: Some(ready), nudges: Vec::new() };
        let late = Said::from(&start(ReadyOutcome::TimedOut { after_ms: 5000 }));
        assert_eq!((late.ok, late.failed, late.exit_status), (false, false, 124));
        assert_eq!(late.lines, vec!["Started web (proc_2).".to_string()]);
        let exited = ReadyOutcome::Exited { after_ms: 10, last_lines: Vec::new(), entry: Box::new(entry("proc_2")) };
        let gone = Said::from(&start(exited));
        assert_eq!((gone.ok, gone.failed, gone.exit_status), (false, true, 1));
    }

    /// A restart says the old stop, then the new entry; a stop that did not end the old tree
    /// fails it whatever the new start did.
    #[test]
    fn a_restart_says_the_stop_then_the_start() {
        let r = Restarted { stopped: stopped(false), entry: entry("proc_2"), ready: None, nudges: Vec::new() };
        let said = Said::from(&r);
        assert_eq!(said.lines[1], "Started web (proc_2).");
        assert_eq!((said.ok, said.failed, said.exit_status), (false, true, 124));
    }

    /// A dry run says what it would do; a real one what it did, each with who is left.
    #[test]
    fn a_reap_says_each_action_and_a_dry_run_says_would() {
        let action = ReapAction {
            id: "proc_1".into(),
            name: Some("web".into()),
            action: ReapKind::Reaped,
            signalled: 1,
            tree_gone: false,
            reason: "its supervisor is gone".into(),
            cleanup_error: None,
            not_recorded: None,
            left: Some("pid 4242 (sleep) is still alive".into()),
        };
        let reaped = |dry_run| Reaped { actions: vec![action.clone()], dry_run, ..Reaped::default() };
        let said = Said::from(&reaped(false));
        assert_eq!(
            said.lines,
            vec![
                "Reaped web (proc_1): its supervisor is gone.".to_string(),
                "The tree of web (proc_1) was not confirmed gone: pid 4242 (sleep) is still alive.".into(),
            ]
        );
        assert_eq!(said.exit_status, 124);
        assert_eq!(Said::from(&reaped(true)).lines[0], "Would reap web (proc_1): its supervisor is gone.");
    }

    /// A wait says one line per entry, and as warnings what nobody saw: the decisive entry's
    /// unknown status, an entry without a result; `any` that ran out of time names them all.
    /// It never fails, whatever the entries' statuses.
    #[test]
    fn a_wait_says_each_entry_and_warns_of_what_is_unknown() {
        let ended = |id: &str, status, code| Entry { status, exit_code: code, ..entry(id) };
        let results = vec![
            Waited::Finished(ended("proc_1", Status::Exited, Some(3))),
            Waited::NoResult(ended("proc_2", Status::Lost, None)),
            Waited::Finished(ended("proc_3", Status::Stopped, None)),
        ];
        let w = WaitedMany { results, decisive: Some(2), any: false, timeout: None };
        let said = Said::from(&w);
        assert_eq!(said.lines[0], "web (proc_1): exited (3).");
        assert_eq!(
            said.warnings,
            vec![
                "web (proc_2): ended without a recorded result (its supervisor was killed).".to_string(),
                "web (proc_3): stopped; its exit status is unknown (its supervisor was killed).".into(),
            ]
        );
        assert_eq!((said.ok, said.failed, said.exit_status), (false, false, 125));
        let none = |id: &str| Waited::TimedOut(ended(id, Status::Running, None));
        let w = WaitedMany {
            results: vec![none("proc_1"), none("proc_2")],
            decisive: None,
            any: true,
            timeout: Some(std::time::Duration::from_millis(300)),
        };
        let said = Said::from(&w);
        let all = "web (proc_1), web (proc_2): none finished within 300ms; nothing was stopped.";
        assert_eq!(said.warnings, vec![all.to_string()]);
        assert_eq!((said.failed, said.exit_status), (false, 124));
        // Ended, its cleanup still running when the wait ran out: said as what runs on (it used
        // to be `: still running after 1s`, with no entry named).
        let cleaning = Entry {
            cleanup: Some(crate::entry::Cleanup { command: "sleep 300".into(), timeout_ms: 2000 }),
            cleanup_state: CleanupState::Claimed { at_ms: 1, runner: None },
            ..ended("proc_1", Status::Exited, Some(0))
        };
        let w = WaitedMany {
            results: vec![Waited::TimedOut(cleaning)],
            decisive: None,
            any: false,
            timeout: Some(std::time::Duration::from_secs(1)),
        };
        let said = Said::from(&w);
        assert_eq!(said.lines, vec!["web (proc_1): exited (0).".to_string()]);
        assert_eq!(
            said.warnings,
            vec!["web (proc_1): its cleanup is still running after 1s; nothing was stopped.".to_string()]
        );
        assert_eq!(said.exit_status, 124);
    }
}
