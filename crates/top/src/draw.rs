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
use sheepdog::status::Status;

use super::app::{App, Modal, Row};
use super::logtail::LineKind;

/// The footer: every key `top` knows.
pub const KEYS: &str =
    "↑↓/jk move  ⏎/→/t tree  s stop  r restart  c clear  l logs  / search  f pause  PgUp/Dn scroll  q quit";

/// The footer on a terminal too narrow for [`KEYS`] (under 101 columns): the keys alone.
pub const KEYS_SHORT: &str = "↑↓jk ⏎→t s r c l / f PgUp/Dn q";

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

/// Cuts or pads `s` to exactly `w` columns, by display width (`view::fit_width`).
fn fit(s: &str, w: usize, right: bool) -> String {
    sheepdog::view::fit_width(s, w, right)
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
        Col::Pid => e.pid().map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
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
    match row.status {
        Status::Running | Status::Starting => Style::default().fg(Color::Green),
        Status::Orphaned => Style::default().fg(Color::Magenta).add_modifier(Modifier::BOLD),
        Status::TimedOut => Style::default().fg(Color::Yellow),
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
            let text = match c {
                // A status cut to fit keeps its hint (`orphaned: run sheepdog reap`).
                Col::Status => sheepdog::view::fit_status(&cell(app, row, *c), c.width()),
                _ => fit(&cell(app, row, *c), c.width(), c.right_aligned()),
            };
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
    let scroll = app.log.scroll.min(visible.len().saturating_sub(height));
    let skip = visible.len().saturating_sub(height + scroll);
    visible
        .into_iter()
        .skip(skip)
        .take(height)
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
        let mode = match (app.log.paused, app.log.scroll) {
            (false, _) => "following".to_string(),
            (true, 0) => "paused (f to follow)".to_string(),
            (true, n) => format!("paused, {n} lines back (f to follow)"),
        };
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
        None => {
            let keys = if KEYS.chars().count() > foot.width as usize { KEYS_SHORT } else { KEYS };
            Line::from(Span::styled(keys, Style::default().add_modifier(Modifier::DIM)))
        }
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

#[cfg(test)]
mod tests {
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;
    use ratatui::buffer::Buffer;
    use ratatui::style::{Color, Modifier};
    use sheepdog::entry::{Cleanup, Entry};
    use sheepdog::status::Status;
    use sheepdog::usage::Usage;

    use crate::app::{App, Modal, Row, Scope, TreeProc};
    use crate::logtail::{LineKind, LogLine, LogTail};

    use super::{KEYS_SHORT, draw};

    const NOW: u64 = 1_800_000_000_000;

    fn row(id: &str, name: &str, status: &str, text: &str) -> Row {
        let live = Status::parse(status).expect("a status word").is_live();
        let entry = Entry {
            id: id.into(),
            name: Some(name.into()),
            session_id: Some("s1".into()),
            provider: Some(sheepdog::entry::ProcRef::new(4242, None)),
            started_at: NOW - 65_000,
            ended_at: (!live).then_some(NOW - 5_000),
            exit_code: (status == "exited").then_some(1),
            status: Status::parse(status).expect("a status word"),
            ..Entry::default()
        };
        Row {
            entry,
            status: Status::parse(status).expect("a status word"),
            status_text: text.into(),
            live,
            failed: matches!(status, "exited" | "killed"),
            usage: live.then_some(Usage { cpu_percent: 12.5, memory_bytes: 3 << 20, processes: 2 }),
            ports: if live { vec![8000] } else { vec![] },
            nudged: false,
        }
    }

    fn app(color: bool) -> App {
        let mut a = App::new(Scope::default(), color);
        a.now_ms = NOW;
        let mut web = row("proc_1", "web", "running", "running");
        web.entry.cleanup = Some(Cleanup { command: "docker rm -f web".into(), timeout_ms: 10_000 });
        web.nudged = true;
        a.rows = vec![
            web,
            row("proc_2", "worker", "orphaned", "orphaned"),
            row("proc_3", "tests", "exited", "exited (1)"),
            row("proc_4", "slow", "timedOut", "timed out after 2s"),
        ];
        a
    }

    fn render(app: &App, w: u16, h: u16) -> Buffer {
        let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
        t.draw(|f| draw(app, f)).unwrap();
        t.backend().buffer().clone()
    }

    fn lines(buf: &Buffer) -> Vec<String> {
        let a = buf.area;
        (0..a.height).map(|y| (0..a.width).map(|x| buf[(x, y)].symbol()).collect::<String>()).collect()
    }

    /// Where `needle` first appears below the title and column header.
    fn find(buf: &Buffer, needle: &str) -> (u16, u16) {
        for (y, l) in lines(buf).iter().enumerate().skip(2) {
            if let Some(i) = l.find(needle) {
                return (l[..i].chars().count() as u16, y as u16);
            }
        }
        panic!("{needle:?} not on screen:\n{}", lines(buf).join("\n"))
    }

    #[test]
    fn wide_terminal_shows_every_column() {
        let buf = render(&app(true), 140, 30);
        let text = lines(&buf);
        let header = &text[1];
        for col in ["NAME", "ID", "SESSION", "STATUS", "PID", "TIME", "CPU%", "MEM", "PORTS", "CLEANUP", "!"] {
            assert!(header.contains(col), "{col} missing in {header:?}");
        }
        let web = text.iter().find(|l| l.starts_with("web")).unwrap();
        for cell in ["proc_1", "s1", "running", "4242", "1m", "12.5", "3.0M", "8000", "set", "!"] {
            assert!(web.contains(cell), "{cell} missing in {web:?}");
        }
        let tests = text.iter().find(|l| l.starts_with("tests")).unwrap();
        assert!(tests.contains("exited (1)") && tests.contains("1m"), "{tests:?}");
        assert!(text[0].contains("2 running") && text[0].contains("2 finished (last hour)"), "{:?}", text[0]);
        assert!(text.last().unwrap().contains("s stop") && text.last().unwrap().contains("q quit"));
    }

    #[test]
    fn narrow_terminal_drops_columns_instead_of_wrapping() {
        let buf = render(&app(true), 50, 20);
        let text = lines(&buf);
        let header = &text[1];
        assert!(header.starts_with("NAME") && header.contains("STATUS"), "{header:?}");
        for gone in ["SESSION", "CLEANUP", "PORTS"] {
            assert!(!header.contains(gone), "{gone} still shown in {header:?}");
        }
        // Each entry is one line with its status on it: nothing wrapped onto the next line.
        let web = text.iter().position(|l| l.starts_with("web")).unwrap();
        assert!(text[web].contains("running"), "{:?}", text[web]);
        assert!(text[web + 1].starts_with("worker"), "{:?}", text[web + 1]);
        assert_eq!(text.last().unwrap().trim_end(), KEYS_SHORT, "the short footer");
        // And a width in between keeps more than the narrow one.
        let mid = lines(&render(&app(true), 80, 20));
        assert!(mid[1].contains("CPU%") && mid[1].contains("MEM") && !mid[1].contains("SESSION"), "{:?}", mid[1]);
    }

    #[test]
    fn issue18_a_wide_name_keeps_the_columns_aligned_at_60_columns() {
        let mut a = app(true);
        a.rows[0].entry.name = Some("naïve-日本語🐑".into());
        let text = lines(&render(&a, 60, 20));
        let header = &text[1];
        let wide = text.iter().find(|l| l.starts_with("naïve")).unwrap();
        // MEM is the last column at this width: whole, and right-aligned under its title.
        assert!(wide.trim_end().ends_with("3.0M"), "{wide:?}");
        // One symbol per cell (a wide character's second cell is blank): cells, by chars.
        let end = |l: &str| l.trim_end().chars().count();
        assert_eq!(end(wide), end(header), "{header:?}\n{wide:?}");
        // A status cut to fit keeps its hint, where it fits; else it is cut.
        assert_eq!(
            sheepdog::view::fit_status("orphaned (the supervisor is gone; run 'sheepdog reap')", 27),
            "orphaned: run sheepdog reap"
        );
    }

    #[test]
    fn statuses_are_coloured_unless_no_color() {
        let buf = render(&app(true), 140, 30);
        for (text, color) in [
            ("running", Color::Green),
            ("orphaned", Color::Magenta),
            ("exited (1)", Color::Red),
            ("timed out", Color::Yellow),
        ] {
            let (x, y) = find(&buf, text);
            assert_eq!(buf[(x, y)].fg, color, "{text}");
        }
        let plain = render(&app(false), 140, 30);
        for text in ["running", "orphaned", "exited (1)", "timed out"] {
            let (x, y) = find(&plain, text);
            assert_eq!(plain[(x, y)].fg, Color::Reset, "{text} coloured under NO_COLOR");
        }
    }

    #[test]
    fn log_pane_colours_streams_dims_markers_and_filters_on_search() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("combined.log");
        std::fs::write(&path, "[sheepdog] started pid 1: x\n[out] hello out\n[err] hello err\n[out] other\n").unwrap();
        let mut a = app(true);
        let mut tail = LogTail::new(path);
        assert!(tail.poll());
        a.log.tail = Some(tail);
        let buf = render(&a, 100, 30);
        let (x, y) = find(&buf, "hello err");
        assert_eq!(buf[(x, y)].fg, Color::Red);
        let (x, y) = find(&buf, "started pid 1");
        assert!(buf[(x, y)].modifier.contains(Modifier::DIM));
        assert!(lines(&buf).iter().any(|l| l.contains("log: web (proc_1) · following")));
        a.log.search = Some("HELLO".into());
        a.log.paused = true;
        let text = lines(&render(&a, 100, 30));
        assert!(text.iter().any(|l| l.contains("hello out")));
        assert!(!text.iter().any(|l| l.contains("other")), "search did not filter");
        assert!(text.iter().any(|l| l.contains("paused") && l.contains("/HELLO")));
        // Scrolled back while paused: the end is off screen, the start on it.
        let mut lines_app = app(true);
        let path = dir.path().join("many.log");
        let many: String = (0..100).map(|i| format!("[out] line {i:03}\n")).collect();
        std::fs::write(&path, many).unwrap();
        let mut tail = LogTail::new(path);
        tail.poll();
        lines_app.log.tail = Some(tail);
        lines_app.log.paused = true;
        lines_app.log.scroll = 50;
        let text = lines(&render(&lines_app, 100, 30)).join("\n");
        assert!(text.contains("line 049") && !text.contains("line 099"), "{text}");
        assert!(text.contains("50 lines back"), "{text}");
        assert_eq!(
            a.visible_log(),
            vec![
                &LogLine { kind: LineKind::Out, text: "hello out".into() },
                &LogLine { kind: LineKind::Err, text: "hello err".into() }
            ]
        );
    }

    #[test]
    fn expanded_tree_marks_members_that_left() {
        let mut a = app(true);
        a.expanded = Some("proc_1".into());
        a.tree = vec![
            TreeProc { pid: 10, pgid: 10, sid: 5, command: "sh -c x".into(), left_group: false, left_session: false },
            TreeProc { pid: 11, pgid: 11, sid: 11, command: "sleep 300".into(), left_group: true, left_session: true },
            TreeProc { pid: 12, pgid: 12, sid: 5, command: "sleep 200".into(), left_group: true, left_session: false },
        ];
        let text = lines(&render(&a, 120, 40));
        assert!(text.iter().any(|l| l.contains("tree: web (proc_1)")));
        let l = text.iter().find(|l| l.contains("sleep 300")).unwrap();
        assert!(l.contains("11") && l.contains("[left the session]"), "{l:?}");
        let l = text.iter().find(|l| l.contains("sleep 200")).unwrap();
        assert!(l.contains("[left the group]"), "{l:?}");
        assert!(!text.iter().find(|l| l.contains("sh -c x")).unwrap().contains("[left"));
    }

    #[test]
    fn stop_asks_first_and_shows_its_result_lines() {
        let mut a = app(true);
        a.modal = Some(Modal::ConfirmStop { id: "proc_1".into(), label: "web (proc_1)".into() });
        let text = lines(&render(&a, 100, 30)).join("\n");
        assert!(text.contains("Stop web (proc_1) and its whole process tree?"), "{text}");
        a.modal = Some(Modal::Result {
            title: "stop".into(),
            lines: vec!["Stopped web (proc_1).".into(), "Cleanup command failed with exit code 1.".into()],
        });
        let text = lines(&render(&a, 100, 30)).join("\n");
        assert!(text.contains("Stopped web (proc_1).") && text.contains("Cleanup command failed with exit code 1."));
        // Even a tiny terminal draws without panicking.
        let _ = render(&a, 20, 6);
    }

    #[test]
    fn an_empty_registry_says_so() {
        let a = App::new(Scope::default(), false);
        let text = lines(&render(&a, 80, 10)).join("\n");
        assert!(text.contains("nothing running"), "{text}");
    }
}
