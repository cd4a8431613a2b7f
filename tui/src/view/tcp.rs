//! The TCP screen: sockets with live retransmissions; for the selected socket the RTO backoff
//! ladder (200 → 400 → 800 ms … one bar per timeout of the current or last episode), cwnd and
//! ssthresh over time, and the congestion-state changes.
//!
//! ```text
//! ┌ Sockets ─────────────────────────────────────────────┐
//! └──────────────────────────────────────────────────────┘
//! ┌ RTO backoff ladder ─────┐┌ cwnd / ssthresh over time ─┐
//! ├ Retransmissions ────────┤│                            │
//! ├ Congestion state ───────┤│                            │
//! └─────────────────────────┘└────────────────────────────┘
//! ```
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Chart, Dataset, GraphType, Paragraph, Row, Table, TableState};
use ratatui::Frame;
use tboxscope_engine::input::RetransmitKind;
use tboxscope_engine::snapshot::{Snapshot, TcpSocketView};

use super::columns::{self, Column, Keep};
use super::{format, matches_filter, panel, Theme};
use crate::app::{App, Screen, SortKey};

/// One step of the backoff ladder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rung {
    /// When the timeout retransmission happened.
    pub ts_ns: u64,
    /// Backoff level at that moment.
    pub backoff: u8,
    /// The RTO that expired (µs).
    pub rto_us: u32,
    /// Sequence number re-sent.
    pub seq: u32,
}

/// The TCP screen's model.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TcpModel {
    /// Sockets after filter and sort.
    pub sockets: Vec<TcpSocketView>,
    /// Sockets before filtering.
    pub total: usize,
    /// What the source is (the empty state differs).
    pub source: super::SourceKind,
}

/// The ladder of the latest RTO episode: consecutive timeout retransmissions whose backoff level
/// rises (a new episode starts when the level drops back).
pub fn ladder(socket: &TcpSocketView) -> Vec<Rung> {
    let mut rungs: Vec<Rung> = Vec::new();
    for r in socket
        .retransmissions
        .iter()
        .filter(|r| r.kind == RetransmitKind::Rto)
    {
        if rungs.last().is_some_and(|last| r.backoff <= last.backoff) {
            rungs.clear();
        }
        rungs.push(Rung {
            ts_ns: r.ts_ns,
            backoff: r.backoff,
            rto_us: r.rto_us,
            seq: r.seq,
        });
    }
    rungs
}

impl TcpModel {
    /// Builds the model.
    pub fn build(snap: &Snapshot, app: &App) -> Self {
        let list = app.list_of(Screen::Tcp);
        let mut sockets: Vec<TcpSocketView> = snap
            .flows
            .tcp
            .iter()
            .filter(|t| {
                matches_filter(
                    &format!("{} {} {:?} {}", t.socket, t.path, t.cong_state, t.state),
                    &list.filter,
                )
            })
            .cloned()
            .collect();
        match app.sort_of(Screen::Tcp) {
            Some(SortKey::Backoff) => sockets.sort_by_key(|t| std::cmp::Reverse(t.figures.backoff)),
            Some(SortKey::Name) => sockets.sort_by(|a, b| a.socket.cmp(&b.socket)),
            _ => sockets.sort_by_key(|t| std::cmp::Reverse(t.figures.retransmits)),
        }
        if list.reversed {
            sockets.reverse();
        }
        Self {
            sockets,
            total: snap.flows.tcp.len(),
            source: super::SourceKind::Live,
        }
    }

    /// Says what the source is (for the empty state).
    pub fn from_source(mut self, source: super::SourceKind) -> Self {
        self.source = source;
        self
    }

    /// Draws the screen; returns the socket count.
    pub fn render(&self, frame: &mut Frame, area: Rect, app: &App, theme: &Theme) -> usize {
        let list_height = (self.sockets.len() as u16 + 3)
            .max(4)
            .min(area.height / 3 + 1);
        let [top, bottom] =
            Layout::vertical([Constraint::Length(list_height), Constraint::Min(0)]).areas(area);
        let selected = app
            .list_of(Screen::Tcp)
            .selected
            .min(self.sockets.len().saturating_sub(1));
        self.render_list(frame, top, selected, app, theme);
        let Some(socket) = self.sockets.get(selected) else {
            let nothing = match self.source {
                super::SourceKind::PacketReplay => {
                    "a pcap replay has no kernel events: record them with `sudo tboxscope \
                     capture --json FILE` (or live with `sudo tboxscope`) and replay that file"
                }
                super::SourceKind::RecordingReplay => {
                    "no TCP socket in this recording so far: it was recorded without the \
                     kernel probes (--no-tcp), or no socket on the paths has had an event yet"
                }
                super::SourceKind::Live => {
                    "no TCP socket on the paths yet: the kernel's events appear here when a \
                     socket connects, retransmits or backs off (`sudo tboxscope doctor` shows \
                     whether the probes are attached)"
                }
            };
            let text = super::empty_text(0, self.total, &app.list_of(Screen::Tcp).filter, nothing)
                .unwrap_or_default();
            frame.render_widget(
                Paragraph::new(Line::styled(text, theme.dim()))
                    .wrap(ratatui::widgets::Wrap { trim: true })
                    .block(panel(" Socket ", theme)),
                bottom,
            );
            return 0;
        };
        let [left, right] =
            Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)])
                .areas(bottom);
        let rungs = ladder(socket);
        let ladder_height = (rungs.len() as u16 + 3).max(4).min(left.height / 2);
        let [ladder_area, retx_area, cong_area] = Layout::vertical([
            Constraint::Length(ladder_height),
            Constraint::Min(3),
            Constraint::Length((socket.cong_changes.len() as u16 + 2).clamp(3, 8)),
        ])
        .areas(left);
        render_ladder(frame, ladder_area, socket, &rungs, theme);
        render_retransmissions(frame, retx_area, socket, theme);
        render_cong(frame, cong_area, socket, theme);
        render_cwnd(frame, right, socket, theme);
        self.sockets.len()
    }

    fn render_list(
        &self,
        frame: &mut Frame,
        area: Rect,
        selected: usize,
        app: &App,
        theme: &Theme,
    ) {
        let rows: Vec<_> = self
            .sockets
            .iter()
            .map(|t| {
                let style = if t.figures.backoff > 0 {
                    theme.alert()
                } else if t.figures.retransmits > 0 {
                    theme.warn()
                } else {
                    ratatui::style::Style::new()
                };
                (
                    [
                        t.socket
                            .strip_prefix("tcp ")
                            .unwrap_or(&t.socket)
                            .to_owned(),
                        t.path.clone(),
                        t.figures.retransmits.to_string(),
                        t.figures.backoff.to_string(),
                        format::micros(u64::from(t.figures.rto_us)),
                        t.figures.cwnd.to_string(),
                        format!("{:?}", t.cong_state),
                    ],
                    style,
                )
            })
            .collect();
        // Columns by priority: socket (addresses and ports) and path whole.
        let list = app.list_of(Screen::Tcp);
        let (sorted_col, most_first) = match app.sort_of(Screen::Tcp) {
            Some(SortKey::Backoff) => (3, true),
            Some(SortKey::Name) => (0, false),
            _ => (2, true),
        };
        let specs = [
            ("Socket", Keep::Always),
            ("Path", Keep::Always),
            ("Retx", Keep::Rank(9)),
            ("Boff", Keep::Rank(8)),
            ("RTO", Keep::Rank(7)),
            ("cwnd", Keep::Rank(5)),
            ("Cong", Keep::Rank(6)),
        ];
        let columns: Vec<Column> = specs
            .iter()
            .enumerate()
            .map(|(i, (h, keep))| {
                let header =
                    columns::sorted_header(h, i == sorted_col, most_first != list.reversed);
                Column::new(header, rows.iter().map(|(r, _)| r[i].as_str()), *keep)
            })
            .collect();
        let shown = columns::Shown::of(&columns, area.width.saturating_sub(2), 2);
        let rows: Vec<Row> = rows
            .into_iter()
            .map(|(cells, style)| Row::new(shown.cells(cells)).style(style))
            .collect();
        let title = if self.sockets.len() == self.total {
            format!(" TCP sockets ({}) ", self.total)
        } else {
            format!(" TCP sockets ({} of {}) ", self.sockets.len(), self.total)
        };
        let table = Table::new(rows, shown.widths)
            .column_spacing(2)
            .header(Row::new(shown.header).style(theme.title()))
            .row_highlight_style(theme.selected())
            .block(panel(title, theme));
        let mut state = TableState::default();
        if !self.sockets.is_empty() {
            state.select(Some(selected));
        }
        frame.render_stateful_widget(table, area, &mut state);
    }
}

fn render_ladder(
    frame: &mut Frame,
    area: Rect,
    socket: &TcpSocketView,
    rungs: &[Rung],
    theme: &Theme,
) {
    let mut lines = Vec::new();
    let bar_room = u64::from(area.width.saturating_sub(22).max(1));
    let longest = rungs
        .iter()
        .map(|r| u64::from(r.rto_us))
        .max()
        .unwrap_or(1)
        .max(1);
    for rung in rungs {
        let len = (u64::from(rung.rto_us) * bar_room).div_ceil(longest).max(1) as usize;
        lines.push(Line::from(vec![
            Span::raw(format!(
                "#{:<2}{:>7} ",
                rung.backoff,
                format::micros(u64::from(rung.rto_us))
            )),
            Span::styled("█".repeat(len), theme.alert()),
        ]));
    }
    if rungs.is_empty() {
        lines.push(Line::styled(
            format!(
                "no RTO timeouts · RTO now {}",
                format::micros(u64::from(socket.figures.rto_us))
            ),
            theme.dim(),
        ));
    }
    let title = if socket.figures.backoff > 0 {
        format!(
            " RTO backoff: level {} now, RTO {} ",
            socket.figures.backoff,
            format::micros(u64::from(socket.figures.rto_us))
        )
    } else {
        " RTO backoff ladder ".to_owned()
    };
    frame.render_widget(Paragraph::new(lines).block(panel(title, theme)), area);
}

fn render_retransmissions(frame: &mut Frame, area: Rect, socket: &TcpSocketView, theme: &Theme) {
    let room = area.height.saturating_sub(2) as usize;
    let lines: Vec<Line> = socket
        .retransmissions
        .iter()
        .rev()
        .take(room)
        .map(|r| {
            let kind = match r.kind {
                RetransmitKind::Fast => "fast",
                RetransmitKind::Rto => "RTO",
                RetransmitKind::Tlp => "TLP",
                RetransmitKind::LossRecovery => "loss",
                RetransmitKind::Unknown => "?",
            };
            // The kernel probes do not see the segment (seq 0): no seq then.
            let seq = if r.seq == 0 {
                String::new()
            } else {
                format!("seq {} ", r.seq)
            };
            Line::raw(format!(
                "{} {kind:<4} {seq}backoff {} RTO {}",
                format::clock(r.ts_ns),
                r.backoff,
                format::micros(u64::from(r.rto_us))
            ))
        })
        .collect();
    let title = format!(" Retransmissions ({} total) ", socket.figures.retransmits);
    frame.render_widget(Paragraph::new(lines).block(panel(title, theme)), area);
}

fn render_cong(frame: &mut Frame, area: Rect, socket: &TcpSocketView, theme: &Theme) {
    let room = area.height.saturating_sub(2) as usize;
    let lines: Vec<Line> = socket
        .cong_changes
        .iter()
        .rev()
        .take(room)
        .map(|(ts, state)| Line::raw(format!("{} → {state:?}", format::clock(*ts))))
        .collect();
    let title = format!(" Congestion state: {:?} ", socket.cong_state);
    frame.render_widget(Paragraph::new(lines).block(panel(title, theme)), area);
}

fn render_cwnd(frame: &mut Frame, area: Rect, socket: &TcpSocketView, theme: &Theme) {
    let block = panel(
        format!(" cwnd {} · ssthresh over time ", socket.figures.cwnd),
        theme,
    );
    let Some(first) = socket.history.first() else {
        frame.render_widget(
            Paragraph::new(Line::styled("no samples yet", theme.dim())).block(block),
            area,
        );
        return;
    };
    let t0 = first.ts_ns;
    let secs = |ts: u64| ts.saturating_sub(t0) as f64 / 1e9;
    let cwnd: Vec<(f64, f64)> = socket
        .history
        .iter()
        .map(|s| (secs(s.ts_ns), f64::from(s.figures.cwnd)))
        .collect();
    // ssthresh starts "infinite"; only finite values are drawn.
    let ssthresh: Vec<(f64, f64)> = socket
        .history
        .iter()
        .filter(|s| s.figures.ssthresh < 0x7fff_0000)
        .map(|s| (secs(s.ts_ns), f64::from(s.figures.ssthresh)))
        .collect();
    let x_max = cwnd.last().map_or(1.0, |p| p.0).max(1.0);
    let y_max = cwnd
        .iter()
        .chain(&ssthresh)
        .map(|p| p.1)
        .fold(4.0_f64, f64::max)
        * 1.1;
    let chart = Chart::new(vec![
        Dataset::default()
            .name("cwnd")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(theme.series(Some(0)))
            .data(&cwnd),
        Dataset::default()
            .name("ssthresh")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(theme.series(Some(1)))
            .data(&ssthresh),
    ])
    .block(block)
    .x_axis(
        Axis::default()
            .bounds([0.0, x_max])
            .labels(["0s".to_owned(), format!("{x_max:.1}s")])
            .style(theme.dim()),
    )
    .y_axis(
        Axis::default()
            .bounds([0.0, y_max])
            .labels(["0".to_owned(), format!("{y_max:.0}")])
            .style(theme.dim()),
    );
    frame.render_widget(chart, area);
}
