//! `sheepdog ps`: the listing of managed processes.

use std::io::{self, Write};
use std::path::PathBuf;

use sheepdog::registry::Registry;
use sheepdog::status::Status;
use sheepdog::view;

use super::CliError;
use super::common::{age, cols, fit, printable, to_json, warn_set_aside};

/// `sheepdog ps`.
#[derive(Debug, clap::Args)]
pub struct PsArgs {
    /// Every entry, finished ones too.
    #[arg(long)]
    all: bool,
    /// Only this session's entries.
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// Only entries with this status (running, exited, killed, stopped, timedOut, orphaned,
    /// reaped, lost, starting), finished or not, of any age.
    #[arg(long, value_name = "STATUS", value_parser = parse_status)]
    status: Option<Status>,
    /// List each entry's live processes (pid, pgid, sid = Unix session id, command).
    #[arg(long)]
    tree: bool,
}

/// A status token (`timedOut`; `timed out` too), strictly: an unknown word is an error.
fn parse_status(s: &str) -> Result<Status, String> {
    s.parse()
}

/// How long a failed finished entry stays in the default `ps` listing: 1 hour.
pub const PS_RECENT_FAILED_MS: u64 = 3_600_000;

pub(super) fn ps(a: PsArgs, dir: Option<PathBuf>, json: bool) -> Result<i32, CliError> {
    let Some(reg) = Registry::open_existing(dir)? else {
        // Read-only: no state dir means nothing was ever started here; do not create one.
        if json {
            outln!("{}", to_json(&view::PsDoc { v: view::Version, entries: &[], hidden: 0 }));
        } else {
            outln!("No managed processes.");
        }
        return Ok(0);
    };
    let query = view::ListQuery {
        session: a.session.clone(),
        status: a.status,
        all: a.all,
        recent_failures_ms: Some(PS_RECENT_FAILED_MS),
        tree: a.tree,
    };
    let view::Listing { rows, hidden, aside, entries } = view::list(&reg, &query);
    // The process exits after printing: the kernel takes the memory back at once.
    std::mem::forget(entries);
    warn_set_aside(&aside);
    let mut out = io::BufWriter::new(io::stdout().lock());
    if json {
        let _ = serde_json::to_writer(&mut out, &view::PsDoc { v: view::Version, entries: &rows, hidden });
        let _ = writeln!(out);
        let _ = out.flush();
        return Ok(0);
    }
    if rows.is_empty() && hidden == 0 {
        let _ = writeln!(out, "No managed processes.");
        return Ok(0);
    }
    let width = |f: &dyn Fn(&view::EntryView) -> usize, min: usize, max: usize| {
        rows.iter().map(f).max().unwrap_or(0).clamp(min, max)
    };
    let wid = width(&|v| cols(&v.id), 2, 16);
    let wname = width(&|v| cols(&v.name), 4, 24);
    let wsess = width(&|v| cols(v.session_id.as_deref().unwrap_or("-")), 7, 20);
    let wstat = width(&|v| cols(&v.status_text), 6, 40);
    let ports = |v: &view::EntryView| {
        if v.ports.is_empty() {
            "-".to_string()
        } else {
            v.ports.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(",")
        }
    };
    let wports = width(&|v| ports(v).len(), 5, 24);
    let _ = writeln!(
        out,
        "{:<wid$} {:<wname$} {:<wsess$} {:<wstat$} {:>7} {:<wports$} {:>5} {:>7} {:>7} {:>5}  COMMAND",
        "ID", "NAME", "SESSION", "STATUS", "PID", "PORTS", "AGE", "CPU", "MEM", "TASKS"
    );
    for v in &rows {
        // Usage of the tree's cgroup (cgroup tier); `-` where there is no figure.
        let dash = || "-".to_string();
        let u = v.usage;
        let _ = writeln!(
            out,
            "{} {} {} {} {:>7} {} {:>5} {:>7} {:>7} {:>5}  {}",
            fit(&v.id, wid),
            fit(&v.name, wname),
            fit(v.session_id.as_deref().unwrap_or("-"), wsess),
            view::fit_status(&printable(&v.status_text), wstat),
            v.pid.map(|p| p.to_string()).unwrap_or_else(dash),
            fit(&ports(v), wports),
            age(v.started_at),
            u.map(|u| cpu_text(u.cpu_ms)).unwrap_or_else(dash),
            u.and_then(|u| u.memory_bytes).map(mem_text).unwrap_or_else(dash),
            u.and_then(|u| u.tasks).map(|t| t.to_string()).unwrap_or_else(dash),
            printable(&v.command_preview)
        );
        for p in v.tree.iter().flatten() {
            let _ = writeln!(out, "    {:>7}  pgid {:<7} sid {:<7} {}", p.pid, p.pgid, p.sid, printable(&p.command));
        }
    }
    if hidden > 0 {
        let _ = writeln!(
            out,
            "({hidden} finished {} hidden: 'sheepdog ps --all' lists every entry)",
            if hidden == 1 { "entry" } else { "entries" }
        );
    }
    Ok(0)
}

/// CPU time for the table: `850ms`, `12.3s`, `4m05s`.
fn cpu_text(ms: u64) -> String {
    match ms {
        0..1000 => format!("{ms}ms"),
        1000..60_000 => format!("{:.1}s", ms as f64 / 1000.0),
        _ => format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60),
    }
}

/// Memory for the table: `512K`, `12.5M`, `1.2G`.
fn mem_text(bytes: u64) -> String {
    match bytes {
        0..1_048_576 => format!("{}K", bytes / 1024),
        1_048_576..1_073_741_824 => format!("{:.1}M", bytes as f64 / 1_048_576.0),
        _ => format!("{:.1}G", bytes as f64 / 1_073_741_824.0),
    }
}
