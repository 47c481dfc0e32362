//! News in replies: clients do not show server-initiated notifications to the model, so every
//! tool result carries `finished`, the processes of this agent that ended since the last reply
//! that reported them.
//!
//! "Reported" is recorded in the registry (`finishedReportedAt` on the entry, claimed under the
//! entry's lock), not in the server: a server restarted by the client, or a second server of the
//! same agent, never reports an entry twice. A reply that already tells how an entry ended (a
//! stop, a wait that saw it finish, a start that ended inside its ready window) claims it too, so
//! it is not repeated as news.

use sheepdog::identity::Probe;
use std::collections::HashMap;
use std::sync::Mutex;

use schemars::JsonSchema;
use serde::Serialize;
use sheepdog::entry::Entry;
use sheepdog::files;
use sheepdog::registry::Registry;

use crate::server::{Ctx, last_lines};

/// Lines of output each news item carries: 5.
const NEWS_LINES: usize = 5;

/// A process of this agent that ended since the last reply that reported it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Finished {
    /// The process id (`proc_N`).
    pub id: String,
    /// Its name, else one derived from what it ran.
    pub name: String,
    /// `exited`, `killed`, `stopped`, `timedOut`, `reaped` or `lost`.
    pub status: String,
    /// The human form: `exited (1)`, `killed (SIGKILL)`, `timed out after 2s`.
    pub status_text: String,
    /// The exit code, when it exited by itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The signal that ended it, when one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// The last lines (at most 5, each at most 512 bytes) of its combined log (`[out] `/`[err] `/
    /// `[sheepdog] ` prefixed).
    pub last_lines: Vec<String>,
}

/// The news of one reply: what fits in its budget, and how many more wait for the next reply.
pub struct News {
    pub items: Vec<Finished>,
    pub omitted: usize,
}

/// Entries a tool call of this server is acting on (stopping, waiting for, restarting): their
/// end belongs in that call's reply, so no other reply reports it as news meanwhile. A count per
/// id, as two calls may act on the same entry.
static BUSY: Mutex<Option<HashMap<String, usize>>> = Mutex::new(None);

/// Marks entries busy until dropped (after the reply's news is collected).
pub struct Busy(Vec<String>);

/// Marks `ids` busy for the life of the returned guard.
pub fn busy(ids: impl IntoIterator<Item = String>) -> Busy {
    let ids: Vec<String> = ids.into_iter().collect();
    if let Ok(mut m) = BUSY.lock() {
        let m = m.get_or_insert_with(HashMap::new);
        for id in &ids {
            *m.entry(id.clone()).or_insert(0) += 1;
        }
    }
    Busy(ids)
}

impl Drop for Busy {
    fn drop(&mut self) {
        if let Ok(mut m) = BUSY.lock()
            && let Some(m) = m.as_mut()
        {
            for id in &self.0 {
                if let Some(n) = m.get_mut(id) {
                    *n -= 1;
                    if *n == 0 {
                        m.remove(id);
                    }
                }
            }
        }
    }
}

fn is_busy(id: &str) -> bool {
    BUSY.lock().ok().and_then(|m| m.as_ref().map(|m| m.contains_key(id))).unwrap_or(false)
}

/// True if `e` belongs to this server's agent: its default session, or started for its owner.
pub fn is_mine(ctx: &Ctx, e: &Entry) -> bool {
    e.session_id.as_deref() == Some(ctx.session.as_str())
        || (ctx.owner.is_some() && e.owner.map(|o| o.pid) == ctx.owner.map(|p| p.as_raw()))
}

/// Marks `e` reported; true if this call did (it was finished and not reported before).
pub fn claim(reg: &Registry, id: &str) -> bool {
    let mut claimed = false;
    let _ = reg.update(id, |x| {
        if x.finished_reported_at.is_none() && x.is_finished() {
            x.finished_reported_at = Some(files::now_ms());
            claimed = true;
        }
    });
    claimed
}

/// The news for a reply: claims the finished, unreported entries of this agent that fit in
/// `budget` bytes of JSON and returns them, except those in `told` (the ones the reply itself
/// reports, claimed silently). Those that do not fit stay unclaimed, counted in `omitted`.
pub fn collect(ctx: &Ctx, told: &[String], budget: usize) -> News {
    for id in told {
        claim(&ctx.reg, id);
    }
    let (entries, _) = ctx.reg.list();
    let mut out = Vec::new();
    let (mut used, mut omitted) = (0usize, 0usize);
    for e in entries {
        // Reported once its cleanup (if one runs) is done, so the news is the whole story.
        if e.finished_reported_at.is_some() || !e.is_finished() || !is_mine(ctx, &e) || e.cleanup_running() {
            continue;
        }
        if !told.contains(&e.id) && is_busy(&e.id) {
            continue;
        }
        let item = Finished {
            name: e.display_name(),
            status: e.status.as_str().into(),
            status_text: sheepdog::view::status_text(&e, e.status),
            exit_code: e.exit_code,
            signal: e.signal.as_ref().map(|s| s.name()),
            last_lines: last_lines(&ctx.reg, &e.id, NEWS_LINES),
            id: e.id.clone(),
        };
        let size = serde_json::to_string(&item).map_or(0, |s| s.len());
        if used + size > budget {
            omitted += 1;
            continue;
        }
        if !claim(&ctx.reg, &e.id) {
            continue;
        }
        used += size;
        out.push(item);
    }
    News { items: out, omitted }
}

/// News as text for the model: one line per process, then its last lines indented; then how
/// many more wait for the next reply.
pub fn text(news: &[Finished], omitted: usize) -> String {
    let mut s = String::new();
    if news.is_empty() {
        if omitted > 0 {
            s.push_str(&format!("{omitted} more finished processes are reported in the next reply.\n"));
        }
        return s;
    }
    s.push_str("Finished since the last reply:\n");
    for n in news {
        s.push_str(&format!("- {} ({}): {}\n", n.name, n.id, n.status_text));
        for l in &n.last_lines {
            s.push_str(&format!("    {l}\n"));
        }
    }
    if omitted > 0 {
        s.push_str(&format!("({omitted} more: reported in the next reply)\n"));
    }
    s
}
