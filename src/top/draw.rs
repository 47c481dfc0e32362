//! Rendering: one pure function from [`App`] to a frame, unit-tested on ratatui's test backend.
//!
//! Lines are laid out by hand (no wrapping anywhere): columns that do not fit the width are
//! dropped, least important first, so a narrow terminal loses SESSION, CLEANUP, PORTS and ID
//! rather than wrapping rows.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};

use super::app::{App, Modal, Row};
use super::logtail::LineKind;

/// The footer: every key `top` knows.
pub const KEYS: &str = "↑↓/jk move  ⏎/→ tree  s stop  r restart  c clear  l logs  t tree  / search  f pause  q quit";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Col {
    Name,
    Id,
    Session,
    Status,
    Pid,
    Time,
    Cpu,
    Mem,
    Ports,
    Cleanup,
    Nudge,
}

impl Col {
    /// Display order.
    const ALL: [Col; 11] = [
        Col::Name,
        Col::Id,
        Col::Session,
        Col::Status,
        Col::Pid,
        Col::Time,
        Col::Cpu,
        Col::Mem,
        Col::Ports,
        Col::Cleanup,
        Col::Nudge,
    ];

    fn title(self) -> &'static str {
        match self {
            Col::Name => "NAME",
            Col::Id => "ID",
            Col::Session => "SESSION",
            Col::Status => "STATUS",
            Col::Pid => "PID",
            Col::Time => "TIME",
            Col::Cpu => "CPU%",
            Col::Mem => "MEM",
            Col::Ports => "PORTS",
            Col::Cleanup => "CLEANUP",
            Col::Nudge => "!",
        }
    }

    fn width(self) -> usize {
        match self {
            Col::Name => 16,
            Col::Id => 9,
            Col::Session => 10,
            Col::Status => 18,
            Col::Pid => 7,
            Col::Time => 6,
            Col::Cpu => 6,
            Col::Mem => 7,
            Col::Ports => 11,
            Col::Cleanup => 7,
            Col::Nudge => 1,
        }
    }

    /// Lower is kept longer.
    fn rank(self) -> u8 {
        match self {
            Col::Name | Col::Status => 0,
            Col::Pid => 1,
            Col::Cpu | Col::Mem => 2,
            Col::Time => 3,
            Col::Nudge => 4,
            Col::Id => 5,
            Col::Ports => 6,
            Col::Cleanup => 7,
            Col::Session => 8,
        }
    }

    fn right_aligned(self) -> bool {
        matches!(self, Col::Pid | Col::Time | Col::Cpu | Col::Mem)
    }
}

/// The columns that fit `width` (one space between columns), least important dropped first.
fn columns(width: usize) -> Vec<Col> {
    let mut cols = Col::ALL.to_vec();
    let total = |c: &[Col]| c.iter().map(|c| c.width()).sum::<usize>() + c.len().saturating_sub(1);
    while total(&cols) > width && cols.len() > 2 {
        let worst = cols.iter().enumerate().max_by_key(|(_, c)| c.rank()).map(|(i, _)| i).unwrap_or(0);
        cols.remove(worst);
    }
    cols
}

/// Cuts or pads `s` to exactly `w` columns (char-based; an ellipsis marks a cut).
fn fit(s: &str, w: usize, right: bool) -> String {
    let n = s.chars().count();
    if n > w {
        if w == 0 {
            return String::new();
        }
        let mut out: String = s.chars().take(w - 1).collect();
        out.push('…');
        return out;
    }
    if right { format!("{s:>w$}") } else { format!("{s:<w$}") }
}

/// `42s`, `5m`, `3h`, `2d`.
pub fn short_duration(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

/// `512K`, `12.3M`, `1.2G` (powers of 1024).
pub fn short_bytes(b: u64) -> String {
    const K: f64 = 1024.0;
    let b = b as f64;
    if b < K * K {
        format!("{:.0}K", b / K)
    } else if b < K * K * K {
        format!("{:.1}M", b / K / K)
    } else {
        format!("{:.1}G", b / K / K / K)
    }
}

fn cell(app: &App, row: &Row, col: Col) -> String {
    let e = &row.entry;
    match col {
        Col::Name => e.display_name(),
        Col::Id => e.id.clone(),
        Col::Session => e.session_id.clone().unwrap_or_else(|| "-".into()),
        Col::Status => row.status_text.clone(),
        Col::Pid => e.pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
        // Age while it runs; how long it ran once finished.
        Col::Time => match e.ended_at.filter(|_| !row.live) {
            Some(end) => short_duration(end.saturating_sub(e.started_at)),
            None => short_duration(app.now_ms.saturating_sub(e.started_at)),
        },
        Col::Cpu => row.usage.map(|u| format!("{:.1}", u.cpu_percent)).unwrap_or_else(|| "-".into()),
        Col::Mem => row.usage.map(|u| short_bytes(u.memory_bytes)).unwrap_or_else(|| "-".into()),
        Col::Ports => {
            if row.ports.is_empty() {
                "-".into()
            } else {
                row.ports.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(",")
            }
        }
        Col::Cleanup => if e.cleanup.is_some() { "set" } else { "-" }.into(),
        Col::Nudge => if row.nudged { "!" } else { " " }.into(),
    }
}

fn status_style(app: &App, row: &Row) -> Style {
    if !app.color {
        return Style::default();
    }
    match row.status.as_str() {
        "running" | "starting" => Style::default().fg(Color::Green),
        "orphaned" => Style::default().fg(Color::Magenta).add_modifier(Modifier::BOLD),
        "timed out" => Style::default().fg(Color::Yellow),
        _ if row.failed => Style::default().fg(Color::Red),
        _ => Style::default().fg(Color::DarkGray),
    }
}

fn list_lines(app: &App, width: usize, height: usize) -> Vec<Line<'static>> {
    let cols = columns(width);
    let header: Vec<String> = cols.iter().map(|c| fit(c.title(), c.width(), c.right_aligned())).collect();
    let mut lines = vec![Line::from(Span::styled(header.join(" "), Style::default().add_modifier(Modifier::BOLD)))];
    if app.rows.is_empty() {
        lines.push(Line::from("  nothing running (start one with 'sheepdog start -- CMD')"));
        return lines;
    }
    let room = height.saturating_sub(1).max(1);
    let first = app.selected.saturating_sub(room - 1).min(app.rows.len().saturating_sub(room));
    for (i, row) in app.rows.iter().enumerate().skip(first).take(room) {
        let mut spans = Vec::new();
        for (k, c) in cols.iter().enumerate() {
            if k > 0 {
                spans.push(Span::raw(" "));
            }
            let text = fit(&cell(app, row, *c), c.width(), c.right_aligned());
            let style = match c {
                Col::Status => status_style(app, row),
                Col::Nudge if app.color => Style::default().fg(Color::Yellow),
                _ => Style::default(),
            };
            spans.push(Span::styled(text, style));
        }
        let mut line = Line::from(spans);
        if i == app.selected {
            line = line.style(Style::default().add_modifier(Modifier::REVERSED));
        }
        lines.push(line);
    }
    lines
}

fn tree_lines(app: &App) -> Vec<Line<'static>> {
    let mut lines = vec![Line::from(Span::styled(
        format!("{:>7} {:>7} {:>7}  COMMAND", "PID", "PGID", "SID"),
        Style::default().add_modifier(Modifier::BOLD),
    ))];
    if app.tree.is_empty() {
        lines.push(Line::from("  no live processes"));
    }
    for p in &app.tree {
        let mut spans = vec![Span::raw(format!("{:>7} {:>7} {:>7}  {}", p.pid, p.pgid, p.sid, p.command))];
        let mark = match (p.left_group, p.left_session) {
            (_, true) => Some("left the session"),
            (true, false) => Some("left the group"),
            _ => None,
        };
        if let Some(m) = mark {
            let style = if app.color { Style::default().fg(Color::Yellow) } else { Style::default() };
            spans.push(Span::styled(format!("  [{m}]"), style));
        }
        lines.push(Line::from(spans));
    }
    lines
}

fn log_lines(app: &App, height: usize) -> Vec<Line<'static>> {
    let visible = app.visible_log();
    let skip = visible.len().saturating_sub(height);
    visible
        .into_iter()
        .skip(skip)
        .map(|l| {
            let style = match (l.kind, app.color) {
                (LineKind::Marker, _) => Style::default().add_modifier(Modifier::DIM),
                (LineKind::Err, true) => Style::default().fg(Color::Red),
                (LineKind::Out, true) => Style::default().fg(Color::Reset),
                _ => Style::default(),
            };
            let text = match l.kind {
                LineKind::Marker => format!("· {}", l.text),
                LineKind::Err if !app.color => format!("err {}", l.text),
                _ => l.text.clone(),
            };
            Line::from(Span::styled(text, style))
        })
        .collect()
}

fn centered(area: Rect, width: u16, height: u16) -> Rect {
    let w = width.min(area.width);
    let h = height.min(area.height);
    Rect { x: area.x + (area.width - w) / 2, y: area.y + (area.height - h) / 2, width: w, height: h }
}

/// Draws the whole screen from `app`; reads nothing else.
pub fn draw(app: &App, f: &mut Frame) {
    let area = f.area();
    let live = app.rows.iter().filter(|r| r.live).count();
    let header = format!(
        "sheepdog top · {live} running · {} finished{}{}",
        app.rows.len() - live,
        if app.scope.all { "" } else { " (last hour)" },
        app.scope.session.as_ref().map(|s| format!(" · session {s}")).unwrap_or_default()
    );
    let tree_h = if app.expanded.is_some() { (app.tree.len().max(1) as u16 + 3).min(12) } else { 0 };
    let [head, body, foot] =
        Layout::vertical([Constraint::Length(1), Constraint::Min(3), Constraint::Length(1)]).areas(area);
    let [list_area, tree_area, log_area] = Layout::vertical([
        Constraint::Min(3),
        Constraint::Length(tree_h),
        Constraint::Percentage(if app.show_logs { 45 } else { 0 }),
    ])
    .areas(body);

    f.render_widget(
        Paragraph::new(Line::from(Span::styled(header, Style::default().add_modifier(Modifier::BOLD)))),
        head,
    );
    f.render_widget(Paragraph::new(list_lines(app, list_area.width as usize, list_area.height as usize)), list_area);
    if tree_h > 0 {
        let title = app.current().map(|r| format!(" tree: {} ", r.entry.label())).unwrap_or_default();
        let block = Block::default().borders(Borders::TOP).title(title);
        let inner = block.inner(tree_area);
        f.render_widget(block, tree_area);
        f.render_widget(Paragraph::new(tree_lines(app)), inner);
    }
    if app.show_logs && log_area.height > 0 {
        let name = app.current().map(|r| r.entry.label()).unwrap_or_else(|| "-".into());
        let mode = if app.log.paused { "paused (f to follow)" } else { "following" };
        let search = match (&app.log.typing, &app.log.search) {
            (Some(t), _) => format!(" · search: /{t}▏"),
            (None, Some(q)) => format!(" · /{q}"),
            _ => String::new(),
        };
        let block = Block::default().borders(Borders::TOP).title(format!(" log: {name} · {mode}{search} "));
        let inner = block.inner(log_area);
        f.render_widget(block, log_area);
        f.render_widget(Paragraph::new(log_lines(app, inner.height as usize)), inner);
    }
    let footer = match &app.flash {
        Some(m) => Line::from(Span::styled(
            m.clone(),
            if app.color { Style::default().fg(Color::Yellow) } else { Style::default() },
        )),
        None => Line::from(Span::styled(KEYS, Style::default().add_modifier(Modifier::DIM))),
    };
    f.render_widget(Paragraph::new(footer), foot);

    if let Some(m) = &app.modal {
        let (title, mut lines, hint) = match m {
            Modal::ConfirmStop { label, .. } => (
                " stop ".to_string(),
                vec![format!("Stop {label} and its whole process tree?")],
                "y / Enter: stop   n / Esc: cancel",
            ),
            Modal::Busy(text) => (" working ".to_string(), vec![text.clone()], ""),
            Modal::Result { title, lines } => (format!(" {title} "), lines.clone(), "any key: close"),
        };
        if !hint.is_empty() {
            lines.push(String::new());
            lines.push(hint.to_string());
        }
        let w = lines.iter().map(|l| l.chars().count()).max().unwrap_or(10).max(title.len()) as u16 + 4;
        let rect = centered(area, w, lines.len() as u16 + 2);
        f.render_widget(Clear, rect);
        let block = Block::default().borders(Borders::ALL).title(title);
        let text: Vec<Line> = lines.into_iter().map(Line::from).collect();
        f.render_widget(Paragraph::new(text).block(block), rect);
    }
}
