//! Cleanup commands: the second step of every stop, for work a command started outside its own
//! tree (a container the Docker daemon owns, a daemon a wrapper started, an `ssh -f` tunnel).
//!
//! Run with `sh -c`, in the process's working directory, with the environment of the runner plus
//! the entry's `--env` and `SHEEPDOG_ID`, in its own process group, bounded by its timeout (then
//! TERM → grace → KILL of the cleanup's own tree, with the entry's timings). At most once per
//! entry: the run is claimed in the registry before it starts, so a runner killed midway never
//! causes a second run. Its output goes into the entry's combined log between markers that name
//! the command, its exit status and its duration; the last 20 lines are kept in the result.
//!
//! Who runs it: the supervisor after a stop, turn timeout or owner death; `sheepdog stop` when
//! the supervisor is gone or the process had already exited by itself; `reap` after a crash.
//! Never `clear`, never for an entry of a previous boot.

use crate::identity::Probe;
use std::collections::VecDeque;
use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::duration;
use crate::entry::{CleanupResult, CleanupState, Entry, ProcRef};
use crate::files;
use crate::logs::{COMBINED_LOG, CappedFile, DEFAULT_LOG_MAX};
use crate::registry::Registry;
use crate::status::{CleanupRunner, SignalName};
use crate::stop::{self, StopPolicy};
use crate::sys::process::{self, POLL_IN, PidFd, PollFd};
use crate::sys::signal::{pipe_cloexec, set_nonblocking};
use crate::sys::{Pid, WaitStatus};
use crate::tree::{ID_ENV, TAG_ENV, Tree};

/// Lines of cleanup output kept in the result: 20.
pub const OUTPUT_TAIL: usize = 20;

/// Runs the entry's cleanup if it has one that has not run yet; returns the result (also of an
/// earlier run). `ran_by` is recorded: `supervisor`, `stop` or `reap`.
pub fn run_once(reg: &Registry, id: &str, ran_by: CleanupRunner) -> Option<CleanupResult> {
    let mut claimed = false;
    let entry = reg.update(id, |e| claimed = claim(e)).ok()?;
    if !claimed {
        return wait_for_runner(reg, entry);
    }
    Some(run_claimed(reg, &entry, ran_by))
}

/// Claims the entry's pending cleanup for this process, inside a registry update (so a result
/// and the claim can be written together): records the claim time and this process's identity.
/// Returns false when there is nothing to claim (no cleanup, already claimed, a previous boot).
pub fn claim(e: &mut Entry) -> bool {
    if !e.cleanup_pending() {
        return false;
    }
    e.cleanup_state.claim(files::now_ms(), crate::identity::me());
    true
}

/// Runs a cleanup this process has [`claim`]ed and records its result.
pub fn run_claimed(reg: &Registry, entry: &Entry, ran_by: CleanupRunner) -> CleanupResult {
    let (result, sh) = execute(reg, entry, ran_by);
    let _ = reg.update(&entry.id, |e| e.cleanup_state.finish(result.clone()));
    // Reaped only once its result is recorded: a runner killed before that (a keeper) leaves
    // the `sh` a zombie, and the supervisor that adopts it reads the same status from it.
    if let Some(sh) = sh {
        let _ = process::reap(sh, false);
    }
    result
}

/// The result of a cleanup another process has claimed: waits while its runner lives (at most
/// the cleanup's own bound), then returns what it recorded (`None`: no cleanup, or the runner
/// died without a result).
pub fn await_result(reg: &Registry, entry: Entry) -> Option<CleanupResult> {
    wait_for_runner(reg, entry)
}

/// Another process claimed the cleanup: while it lives, wait for its result (re-reading the
/// entry every 20 ms, at most the cleanup's own bound). A claim whose runner died without a
/// result stays without one: the cleanup is not run twice, and `failure_line` reports it.
fn wait_for_runner(reg: &Registry, mut entry: Entry) -> Option<CleanupResult> {
    let bound = entry.cleanup.as_ref().map(|c| c.timeout_ms + entry.stop.term_grace_ms + entry.stop.kill_wait_ms);
    let end = Instant::now() + Duration::from_millis(bound.unwrap_or(0) + 1000);
    // Unsettled until its result: while its runner lives, and, with every runner killed, while
    // what the cleanup started runs on (its `sh` may have ended, its `setsid` child not), up to
    // its deadline. A runner that was killed leaves the cleanup to whoever looks next: past its
    // deadline it is stopped here and recorded as timed out.
    while entry.cleanup_state.is_unsettled() && Instant::now() < end {
        if settle_abandoned(reg, &entry.id, CleanupRunner::Stop, false) {
            entry = reg.read(&entry.id).ok()?;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        entry = reg.read(&entry.id).ok()?;
    }
    entry.cleanup_state.result().cloned()
}

/// The cleanup's own tree as `reap` sees it when its runner is gone: its `sh` (by pid and start
/// time), that process's descendants, and every later process of the entry's uid that carries
/// the entry's tag (the cleanup inherits it). `None` when the cleanup never spawned.
fn recorded_cleanup_tree(e: &Entry) -> Option<Tree> {
    let child = e.cleanup_state.child()?;
    let pid = Pid::new(child.pid)?;
    let start = child.start_time?;
    let tag = if e.tag.is_empty() { "\0untagged" } else { e.tag.as_str() };
    Some(Tree::recorded(pid, pid.as_group(), start, e.uid, tag))
}

/// How far before the recorded claim a process may have started and still count as the
/// cleanup's in [`tagged_since_claim`]: 100 ms. The claim is a wall-clock time and start times
/// are clock ticks since boot; this covers the tick rounding and a small wall-clock step. What
/// it lets in carries the entry's tag all the same (the entry's own tree, stopped before its
/// cleanup began).
const CLAIM_SLACK_MS: u64 = 100;

/// The cleanup of `e`, claimed at `claimed_ms`, known only by the entry's tag: every process of
/// the entry's uid that carries it and started no earlier than the claim. `None` for an entry
/// without a tag, or where start times cannot be compared.
fn tagged_since_claim(e: &Entry, claimed_ms: u64) -> Option<Tree> {
    if e.tag.is_empty() {
        return None;
    }
    let since = crate::sys::procfs::ticks_at(claimed_ms, CLAIM_SLACK_MS)?;
    let since = e.provider.and_then(|p| p.start_time).map_or(since, |p| since.max(p));
    Some(Tree::tagged(e.uid, &e.tag, since))
}

/// `e` with the cleanup's spawned identity filled in (the runner knows it before the entry on
/// disk says so).
fn registry_view(e: &Entry, pid: Pid, start: Option<u64>) -> Entry {
    let mut v = e.clone();
    v.cleanup_state.spawned(ProcRef::new(pid.as_raw(), start));
    v
}

/// Who settled a cleanup, in a sentence: `the supervisor`, `sheepdog stop`, `sheepdog reap`.
fn runner_words(by: &CleanupRunner) -> String {
    match by {
        CleanupRunner::Supervisor => "the supervisor".into(),
        CleanupRunner::Stop => "sheepdog stop".into(),
        CleanupRunner::Reap => "sheepdog reap".into(),
        CleanupRunner::Other(w) => w.clone(),
    }
}

/// How a cleanup's own tree is stopped: TERM, the entry's term grace, KILL, the kill wait.
fn cleanup_policy(e: &Entry) -> StopPolicy {
    StopPolicy {
        stdin_grace: Duration::ZERO,
        term_grace: Duration::from_millis(e.stop.term_grace_ms),
        kill_wait: Duration::from_millis(e.stop.kill_wait_ms),
    }
}

/// The tree of a cleanup claimed at `started` whose runner is gone: the recorded one, or, when
/// the runner was killed between the spawn and the write of `cleanupPid`, what carries the
/// entry's tag and started after the claim. `None` when there is nothing to look for.
fn abandoned_tree(e: &Entry, started: u64) -> Option<Tree> {
    match recorded_cleanup_tree(e) {
        Some(t) => Some(t),
        None if cfg!(target_os = "linux") => tagged_since_claim(e, started),
        None => None,
    }
}

/// A claimed cleanup whose runner was killed (`kill -9` of `sheepdog stop`, of a supervisor):
/// nobody bounds it any more, so whoever looks next does (`reap`, `stop`, a supervisor that took
/// over, `clear --force`). Returns true when nothing of the cleanup is left running (it is
/// settled): its runner is gone and its tree is gone, or its tree was stopped here.
///
/// - The runner still lives and is another process, and not `force`: false (the runner bounds
///   it).
/// - Its tree is gone: true; the result stays unknown (`Cleanup command did not finish.`).
/// - Its tree lives past the deadline (`cleanupStartedAt` + its timeout), or `force`: the tree
///   gets the one stop (TERM, the entry's grace, KILL) and the result is recorded as timed
///   out, with `ran_by` naming who stopped it; true.
/// - Its tree lives within the deadline: false (it may still finish by itself).
pub fn settle_abandoned(reg: &Registry, id: &str, by: CleanupRunner, force: bool) -> bool {
    let Ok(e) = reg.read(id) else { return true };
    let (Some(started), Some(c)) = (e.cleanup_state.claimed_at(), e.cleanup.clone()) else { return true };
    if e.cleanup_state.result().is_some() || !e.this_boot() {
        return true;
    }
    // A runner that is this process (a supervisor settling its killed keeper's cleanup) is the
    // one deciding, not one to wait for.
    let me = process::getpid().as_raw();
    if !force && e.cleanup_state.runner().is_some_and(|r| r.pid != me && crate::identity::alive(r)) {
        return false;
    }
    let Some(tree) = abandoned_tree(&e, started) else { return true };
    if tree.is_gone() {
        return true;
    }
    if !force && deadline_ms(&e).is_some_and(|d| files::now_ms() < d) {
        return false;
    }
    let policy = cleanup_policy(&e);
    let report = stop::stop_blocking(&tree, policy);
    // The `sh` may be this process's child (the supervisor that adopted its killed keeper's
    // cleanup): then how it ended is known, and recorded with the timeout, as a living runner
    // records it. Checked by identity before it is reaped.
    // (`identity::alive` would not do: it takes a zombie for gone.)
    let status = e.cleanup_state.child().and_then(|c| {
        let pid = Pid::new(c.pid)?;
        let same = crate::sys::procfs::stat(pid).is_ok_and(|s| Some(s.start_time) == c.start_time);
        if same { process::reap(pid, false).ok().flatten() } else { None }
    });
    let result = CleanupResult {
        command: c.command.clone(),
        exit_code: match status {
            Some(WaitStatus::Exited(code)) => Some(code),
            _ => None,
        },
        signal: match status {
            Some(WaitStatus::Signaled(s, _)) => Some(SignalName::of(s)),
            _ => None,
        },
        timed_out: true,
        duration_ms: files::now_ms().saturating_sub(started),
        output: vec![format!(
            "sheepdog: the cleanup's runner was gone; {} stopped it past its {} bound",
            runner_words(&by),
            duration::format(Duration::from_millis(c.timeout_ms))
        )],
        ran_by: by,
    };
    let _ = reg.update(id, |x| {
        if x.cleanup_state.result().is_none() {
            x.cleanup_state.finish(result.clone());
        }
    });
    crate::logs::append_marker(
        &reg.dir(id),
        &format!(
            "cleanup stopped: its runner was gone and it ran past its {} bound; {} signalled, tree {}",
            duration::format(Duration::from_millis(c.timeout_ms)),
            report.signalled,
            if report.gone { "gone" } else { "NOT confirmed gone" }
        ),
    );
    report.gone
}

/// When a claimed cleanup's bound passes: its claim plus its timeout, in unix ms. `None` for an
/// entry without a cleanup, or whose cleanup was not claimed.
pub fn deadline_ms(e: &Entry) -> Option<u64> {
    Some(e.cleanup_state.claimed_at()? + e.cleanup.as_ref()?.timeout_ms)
}

/// Runs the cleanup and returns its result, with its `sh` when one was spawned: exited, and left
/// for the caller to reap once the result is recorded ([`process::exit_status_of`]).
fn execute(reg: &Registry, e: &Entry, ran_by: CleanupRunner) -> (CleanupResult, Option<Pid>) {
    let Some(c) = e.cleanup.clone() else { return (CleanupResult::default(), None) };
    let timeout = Duration::from_millis(c.timeout_ms);
    let mut log = CappedFile::open(&reg.file(&e.id, COMBINED_LOG), e.log_max_bytes.unwrap_or(DEFAULT_LOG_MAX)).ok();
    let mark = |log: &mut Option<CappedFile>, text: String| {
        if let Some(l) = log.as_mut() {
            l.write(format!("[sheepdog] {text}\n").as_bytes());
        }
    };
    mark(&mut log, format!("cleanup started: sh -c {:?}", c.command));
    let started = Instant::now();
    let mut result = CleanupResult { command: c.command.clone(), ran_by, ..CleanupResult::default() };
    let mut tail: VecDeque<String> = VecDeque::new();

    let spawned = (|| -> std::io::Result<(Pid, Option<u64>, File)> {
        let (r, w) = pipe_cloexec()?;
        set_nonblocking(r.as_raw_fd())?;
        let cwd = std::path::Path::new(&e.cwd);
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(&c.command).current_dir(if cwd.is_dir() { cwd } else { std::path::Path::new("/") });
        for kv in &e.env {
            let (k, v) = kv.split_env();
            if !k.is_empty() {
                cmd.env(k, v);
            }
        }
        // The entry's tag marks the cleanup's own descendants too (a `setsid` child, a double
        // fork), so its tree can be found and stopped even after its runner died.
        cmd.env(ID_ENV, &e.id)
            .env(TAG_ENV, &e.tag)
            .stdin(Stdio::null())
            .stdout(Stdio::from(w.try_clone()?))
            .stderr(Stdio::from(w));
        crate::spawn::isolate(&mut cmd, process::Isolation::Group { take_terminal: false });
        let child = cmd.spawn()?;
        let pid = Pid::new(child.id() as i32).ok_or_else(|| std::io::Error::other("pid 0"))?;
        let start = crate::sys::procfs::start_time(pid);
        let _ = reg.update(&e.id, |x| x.cleanup_state.spawned(ProcRef::new(pid.as_raw(), start)));
        Ok((pid, start, File::from(r)))
    })();
    let (pid, start_time, mut out) = match spawned {
        Ok(x) => x,
        Err(err) => {
            result.exit_code = Some(crate::exit::NOT_FOUND);
            result.output = vec![format!("sheepdog: unable to run the cleanup command: {err}")];
            mark(&mut log, format!("cleanup could not start: {err}"));
            return (result, None);
        }
    };
    let tree = Tree::rooted(pid, pid.as_group());
    let pidfd = PidFd::open(pid).ok();
    let mut partial = Vec::new();
    let read_out = |out: &mut File, partial: &mut Vec<u8>, tail: &mut VecDeque<String>| {
        let mut buf = [0u8; 8192];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 {
                break;
            }
            partial.extend_from_slice(&buf[..n]);
        }
        while let Some(nl) = partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = partial.drain(..=nl).collect();
            push_line(tail, String::from_utf8_lossy(&line[..line.len() - 1]).into_owned());
        }
    };
    let deadline = started + timeout;
    let mut status = None;
    let mut out_open = true;
    loop {
        if let Ok(Some(st)) = process::exit_status_of(pid, false) {
            status = Some(st);
            break;
        }
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        // -1 makes poll skip the output once it has hung up (no busy loop on a closed pipe).
        let mut fds = vec![PollFd::new(if out_open { out.as_raw_fd() } else { -1 }, POLL_IN)];
        if let Some(p) = &pidfd {
            fds.push(PollFd::new(p.as_raw_fd(), POLL_IN));
        }
        // Without a pidfd (non-Linux), re-check the child every 20 ms.
        let tick = if pidfd.is_some() { deadline - now } else { (deadline - now).min(Duration::from_millis(20)) };
        let _ = process::poll(&mut fds, Some(tick));
        read_out(&mut out, &mut partial, &mut tail);
        if fds[0].hung_up() {
            out_open = false;
        }
    }
    if status.is_none() {
        result.timed_out = true;
    }
    // The cleanup's own tree: stopped if it timed out, and leftovers in its group either way.
    let policy = cleanup_policy(e);
    if !tree.is_gone() || status.is_none() {
        stop::stop_blocking(&tree, policy);
    }
    if status.is_none() {
        status = process::exit_status_of(pid, true).ok().flatten();
    }
    // What left the cleanup's group and session (`setsid`, `( … &)`) still carries the tag.
    if let Some(escaped) = recorded_cleanup_tree(&registry_view(e, pid, start_time)) {
        stop::stop_blocking(&escaped, policy);
    }
    read_out(&mut out, &mut partial, &mut tail);
    if !partial.is_empty() {
        push_line(&mut tail, String::from_utf8_lossy(&partial).into_owned());
    }
    match status {
        Some(WaitStatus::Exited(code)) => result.exit_code = Some(code),
        Some(WaitStatus::Signaled(s, _)) => result.signal = Some(SignalName::of(s)),
        None => {}
    }
    result.duration_ms = started.elapsed().as_millis() as u64;
    result.output = tail.into_iter().collect();
    for line in &result.output {
        if let Some(l) = log.as_mut() {
            l.write(format!("[cleanup] {line}\n").as_bytes());
        }
    }
    let how = if result.timed_out {
        format!("timed out after {}; its tree was stopped", duration::format(timeout))
    } else {
        ended_by(&result)
    };
    mark(&mut log, format!("cleanup {how} after {} ms: sh -c {:?}", result.duration_ms, c.command));
    (result, Some(pid))
}

/// How a cleanup that was not timed out ended: `exited with code N` or `was killed by SIGX`.
fn ended_by(result: &CleanupResult) -> String {
    match (result.exit_code, &result.signal) {
        (Some(c), _) => format!("exited with code {c}"),
        (None, s) => format!("was killed by {}", s.as_ref().map(|s| s.name()).unwrap_or_default()),
    }
}

/// Ends a cleanup whose runner (a keeper) was killed while it ran, in the process that reaped
/// its `sh` (the supervisor that adopted the tree): `status` is the `sh`'s wait status. As when
/// its runner lives (`execute`), what the `sh` left running (its group, and what carries the tag
/// past it) is stopped, and the result is the `sh`'s. Its output went with the runner's end of
/// the pipe, so the result's output is one line saying so. Nothing is done if a result is
/// already recorded (a stop past its bound).
pub fn record_reaped(reg: &Registry, id: &str, status: WaitStatus, by: CleanupRunner) {
    let Ok(e) = reg.read(id) else { return };
    let Some(c) = e.cleanup.as_ref().filter(|_| e.cleanup_state.result().is_none()) else { return };
    if let Some(left) = e.cleanup_state.claimed_at().and_then(|started| abandoned_tree(&e, started))
        && !left.is_gone()
    {
        stop::stop_blocking(&left, cleanup_policy(&e));
    }
    let result = CleanupResult {
        command: c.command.clone(),
        exit_code: match status {
            WaitStatus::Exited(code) => Some(code),
            WaitStatus::Signaled(..) => None,
        },
        signal: match status {
            WaitStatus::Signaled(s, _) => Some(SignalName::of(s)),
            WaitStatus::Exited(_) => None,
        },
        duration_ms: files::now_ms().saturating_sub(e.cleanup_state.claimed_at().unwrap_or_default()),
        output: vec!["sheepdog: the cleanup's output went with its runner, which was killed".into()],
        ran_by: by,
        ..CleanupResult::default()
    };
    let mut recorded = false;
    let _ = reg.update(id, |x| {
        recorded = x.cleanup_state.result().is_none();
        if recorded {
            x.cleanup_state.finish(result.clone());
        }
    });
    if recorded {
        let how = ended_by(&result);
        crate::logs::append_marker(
            &reg.dir(id),
            &format!("cleanup {how} after {} ms (its runner was killed): sh -c {:?}", result.duration_ms, c.command),
        );
    }
}

fn push_line(tail: &mut VecDeque<String>, line: String) {
    if tail.len() == OUTPUT_TAIL {
        tail.pop_front();
    }
    tail.push_back(line);
}

/// The second line `sheepdog stop` prints when the cleanup failed, exactly:
/// `Cleanup command failed with exit code 1.` or `Cleanup command timed out after 10s.`
pub fn failure_line(e: &Entry) -> Option<String> {
    let r = match &e.cleanup_state {
        // Claimed, and its runner died before recording how it ended.
        CleanupState::Claimed { .. } | CleanupState::Running { .. } if e.cleanup.is_some() => {
            return Some("Cleanup command did not finish.".into());
        }
        s => s.result()?,
    };
    if r.timed_out {
        let t = e.cleanup.as_ref().map(|c| c.timeout_ms).unwrap_or(r.duration_ms);
        return Some(format!("Cleanup command timed out after {}.", duration::format(Duration::from_millis(t))));
    }
    match (r.exit_code, &r.signal) {
        (Some(0), _) => None,
        (Some(c), _) => Some(format!("Cleanup command failed with exit code {c}.")),
        (None, Some(s)) => Some(format!("Cleanup command was killed by {s}.")),
        (None, None) => Some("Cleanup command did not finish.".into()),
    }
}
