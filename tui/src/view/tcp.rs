//! The TCP screen: sockets with live retransmissions; for the selected socket the RTO backoff
//! ladder (200 → 400 → 800 ms … one bar per timeout of the current or last episode), cwnd and
//! ssthresh over time with the retransmissions and timeouts on it, labelled with the socket's
//! congestion-control algorithm, and the congestion-state changes. Without the kernel's events (a replay
//! of packet captures, or no probes), TCP as the captures saw it: per connection direction the
//! retransmissions by kind and the backoff ladder inferred from the wire; with both, the title
//! says where the kernel and the wire disagree.
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
use tboxscope_engine::record::{TcpJoinSummary, TcpRetransmitKind, TcpWireDirection};
use tboxscope_engine::snapshot::{Snapshot, TcpSocketView};

use super::columns::{self, Keep};
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
    /// TCP seen on the wire, per connection direction, after the filter (busiest first).
    pub wire: Vec<TcpWireDirection>,
    /// Connections the wire matcher followed.
    pub wire_connections: u64,
    /// The kernel's retransmissions joined with the wire's.
    pub join: TcpJoinSummary,
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
        let mut wire: Vec<TcpWireDirection> = snap
            .tcp_wire
            .directions
            .iter()
            .filter(|d| matches_filter(&format!("{} {} {}", d.src, d.dst, d.path), &list.filter))
            .cloned()
            .collect();
        if list.reversed {
            wire.reverse();
        }
        Self {
            sockets,
            total: snap.flows.tcp.len(),
            source: super::SourceKind::Live,
            wire,
            wire_connections: snap.tcp_wire.connections,
            join: snap.tcp_join.clone(),
        }
    }

    /// Says what the source is (for the empty state).
    pub fn from_source(mut self, source: super::SourceKind) -> Self {
        self.source = source;
        self
    }

    /// Draws the screen; returns the socket count.
    pub fn render(&self, frame: &mut Frame, area: Rect, app: &App, theme: &Theme) -> usize {
        if self.sockets.is_empty() && !self.wire.is_empty() {
            return self.render_wire(frame, area, app, theme);
        }
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
                    "no TCP in these captures so far; the kernel's own view (cwnd, RTO as the \
                     socket had it) needs its events: record them with `sudo tboxscope capture \
                     --json FILE` (or live with `sudo tboxscope`)"
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
        let columns = columns::columns_of(
            &specs,
            |i, h| columns::sorted_header(h, i == sorted_col, most_first != list.reversed),
            |i| rows.iter().map(move |(r, _)| r[i].as_str()),
        );
        let shown = columns::Shown::of(&columns, area.width.saturating_sub(2), 2);
        let rows: Vec<Row> = rows
            .into_iter()
            .map(|(cells, style)| Row::new(shown.cells(cells)).style(style))
            .collect();
        let mut title = if self.sockets.len() == self.total {
            format!(" TCP sockets ({}) ", self.total)
        } else {
            format!(" TCP sockets ({} of {}) ", self.sockets.len(), self.total)
        };
        if let Some(join) = join_text(&self.join) {
            title.push_str(&format!("· {join} "));
        }
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
    let algorithm = socket
        .figures
        .congestion_control
        .map_or_else(|| "algorithm unknown".to_owned(), |c| c.to_string());
    let block = panel(
        format!(
            " cwnd {} · ssthresh over time · {algorithm} ",
            socket.figures.cwnd
        ),
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
    // Retransmissions on the window line (the cwnd of the sample before each), the ones
    // after a timeout apart: the RTO backoff episodes.
    let cwnd_at = |ts: u64| {
        let i = socket.history.partition_point(|s| s.ts_ns <= ts);
        socket.history[i.saturating_sub(1)].figures.cwnd
    };
    let (mut fast, mut timeouts) = (Vec::new(), Vec::new());
    let mut max_backoff = 0;
    for r in socket.retransmissions.iter().filter(|r| r.ts_ns >= t0) {
        let point = (secs(r.ts_ns), f64::from(cwnd_at(r.ts_ns)));
        if r.kind == RetransmitKind::Rto {
            max_backoff = max_backoff.max(r.backoff);
            timeouts.push(point);
        } else {
            fast.push(point);
        }
    }
    let x_max = cwnd
        .last()
        .map_or(1.0, |p| p.0)
        .max(fast.last().map_or(0.0, |p| p.0))
        .max(timeouts.last().map_or(0.0, |p| p.0))
        .max(1.0);
    let y_max = cwnd
        .iter()
        .chain(&ssthresh)
        .map(|p| p.1)
        .fold(4.0_f64, f64::max)
        * 1.1;
    let mut datasets = vec![
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
    ];
    if !fast.is_empty() {
        datasets.push(
            Dataset::default()
                .name("retransmit")
                .marker(Marker::Dot)
                .graph_type(GraphType::Scatter)
                .style(theme.warn())
                .data(&fast),
        );
    }
    let rto_name = format!("RTO ≤b{max_backoff}");
    if !timeouts.is_empty() {
        datasets.push(
            Dataset::default()
                .name(rto_name.as_str())
                .marker(Marker::Block)
                .graph_type(GraphType::Scatter)
                .style(theme.alert())
                .data(&timeouts),
        );
    }
    let chart = Chart::new(datasets)
        .hidden_legend_constraints((Constraint::Ratio(1, 2), Constraint::Ratio(1, 2)))
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

/// The kernel's retransmissions against the wire's, in a few words (`None` before either
/// side has any).
fn join_text(j: &TcpJoinSummary) -> Option<String> {
    let t = &j.totals;
    (t.kernel + t.wire > 0).then(|| {
        format!(
            "kernel vs wire: {} seen by both, {} not on the wire, {} original not captured, {} \
             not reported by the kernel",
            t.matched, t.not_on_wire, t.original_not_captured, t.not_in_kernel
        )
    })
}

impl TcpModel {
    /// TCP as the captures saw it: the directions, and for the selected one its backoff
    /// ladder and retransmissions by kind.
    fn render_wire(&self, frame: &mut Frame, area: Rect, app: &App, theme: &Theme) -> usize {
        let list_height = (self.wire.len() as u16 + 3).max(4).min(area.height / 2 + 1);
        let [top, bottom] =
            Layout::vertical([Constraint::Length(list_height), Constraint::Min(0)]).areas(area);
        let selected = app
            .list_of(Screen::Tcp)
            .selected
            .min(self.wire.len().saturating_sub(1));
        self.render_wire_list(frame, top, selected, theme);
        let Some(d) = self.wire.get(selected) else {
            return 0;
        };
        let [left, right] =
            Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)])
                .areas(bottom);
        render_wire_ladder(frame, left, d, theme);
        render_wire_kinds(frame, right, d, &self.join, theme);
        self.wire.len()
    }

    fn render_wire_list(&self, frame: &mut Frame, area: Rect, selected: usize, theme: &Theme) {
        let rows: Vec<_> = self
            .wire
            .iter()
            .map(|d| {
                let style = if d.rto_ladder.len() > 1 {
                    theme.alert()
                } else if d.retransmits_total() > 0 {
                    theme.warn()
                } else {
                    ratatui::style::Style::new()
                };
                let n = |k: TcpRetransmitKind| {
                    TcpRetransmitKind::ALL
                        .iter()
                        .position(|x| *x == k)
                        .and_then(|i| d.retransmits.get(i))
                        .copied()
                        .unwrap_or(0)
                        .to_string()
                };
                (
                    [
                        format!("{} → {}", d.src, d.dst),
                        d.path.clone(),
                        d.segments.to_string(),
                        d.retransmits_total().to_string(),
                        n(TcpRetransmitKind::Rto),
                        n(TcpRetransmitKind::Fast),
                        n(TcpRetransmitKind::LossProbe),
                        d.spurious.to_string(),
                        d.rto_ladder.len().saturating_sub(1).to_string(),
                        // At the receiver's end, data to ACK is its ACK delay: no round trip
                        // and no timer of the sender's to show.
                        if d.at_receiver {
                            "-".to_owned()
                        } else {
                            format::micros(d.srtt_us)
                        },
                        if d.at_receiver {
                            "-".to_owned()
                        } else {
                            format::micros(d.rto_ms.saturating_mul(1000))
                        },
                    ],
                    style,
                )
            })
            .collect();
        let specs = [
            ("Sender → receiver", Keep::Always),
            ("Path", Keep::Always),
            ("Segs", Keep::Rank(4)),
            ("Retx", Keep::Rank(9)),
            ("RTO", Keep::Rank(8)),
            ("Fast", Keep::Rank(7)),
            ("TLP", Keep::Rank(6)),
            ("Spur", Keep::Rank(3)),
            ("Boff", Keep::Rank(8)),
            ("SRTT", Keep::Rank(5)),
            ("RTO est", Keep::Rank(2)),
        ];
        let columns = columns::columns_of(
            &specs,
            |_, h| h.to_owned(),
            |i| rows.iter().map(move |(r, _)| r[i].as_str()),
        );
        let shown = columns::Shown::of(&columns, area.width.saturating_sub(2), 2);
        let rows: Vec<Row> = rows
            .into_iter()
            .map(|(cells, style)| Row::new(shown.cells(cells)).style(style))
            .collect();
        let title = format!(
            " TCP on the wire: {} connections, {} senders (no kernel events: inferred from the \
             packets) ",
            self.wire_connections,
            self.wire.len()
        );
        let table = Table::new(rows, shown.widths)
            .column_spacing(2)
            .header(Row::new(shown.header).style(theme.title()))
            .row_highlight_style(theme.selected())
            .block(panel(title, theme));
        let mut state = TableState::default();
        state.select(Some(selected));
        frame.render_stateful_widget(table, area, &mut state);
    }
}

/// The backoff ladder inferred from the wire: timeouts per level, the longest timeout.
fn render_wire_ladder(frame: &mut Frame, area: Rect, d: &TcpWireDirection, theme: &Theme) {
    let bar_room = u64::from(area.width.saturating_sub(20).max(1));
    let most = d.rto_ladder.iter().copied().max().unwrap_or(1).max(1);
    let mut lines: Vec<Line> = d
        .rto_ladder
        .iter()
        .enumerate()
        .map(|(level, &n)| {
            let len = (n * bar_room).div_ceil(most) as usize;
            Line::from(vec![
                Span::raw(format!("#{level:<2} ×{n:<4} ")),
                Span::styled("█".repeat(len), theme.alert()),
            ])
        })
        .collect();
    if lines.is_empty() {
        lines.push(Line::styled("no RTO timeouts on the wire", theme.dim()));
    }
    let title = if d.max_rto_ms > 0 {
        format!(
            " RTO backoff ladder (wire): longest timeout {} ",
            format::micros(d.max_rto_ms.saturating_mul(1000))
        )
    } else {
        " RTO backoff ladder (wire) ".to_owned()
    };
    frame.render_widget(Paragraph::new(lines).block(panel(title, theme)), area);
}

/// Retransmissions by kind, what is not one, and where the kernel disagrees.
fn render_wire_kinds(
    frame: &mut Frame,
    area: Rect,
    d: &TcpWireDirection,
    join: &TcpJoinSummary,
    theme: &Theme,
) {
    let mut lines: Vec<Line> = TcpRetransmitKind::ALL
        .iter()
        .zip(d.retransmits)
        .map(|(k, n)| Line::raw(format!("{:<14}{n:>6}", k.as_str())))
        .collect();
    lines.push(Line::raw(format!("{:<14}{:>6}", "spurious", d.spurious)));
    if d.path_mtu_signals > 0 {
        let mtu = match d.path_mtu {
            0 => "no MTU named".to_owned(),
            m => format!("smallest MTU {m} bytes"),
        };
        lines.push(Line::raw(format!(
            "routers said too big: {} times, {mtu}",
            d.path_mtu_signals
        )));
    }
    lines.push(Line::styled(
        format!(
            "not retransmissions: {} out of order, {} window probes; {} of data sent before \
             the capture began",
            d.out_of_order, d.window_probes, d.unknown_history
        ),
        theme.dim(),
    ));
    if let Some(note) = d.not_taken_note() {
        lines.push(Line::raw(note));
    }
    if d.arrivals_not_judged > 0 {
        lines.push(Line::styled(
            format!(
                "arrived here, not judged: {} (resent before the receiver's ACKs could tell, or \
                 still waiting for an ACK when the capture ended)",
                d.arrivals_not_judged
            ),
            theme.dim(),
        ));
    }
    let joined = join
        .directions
        .iter()
        .find(|j| j.src == d.src && j.dst == d.dst && j.path == d.path);
    if let Some(j) = joined {
        lines.push(Line::raw(format!(
            "kernel {}, both {}: {} not on the wire, {} original not captured, {} not reported \
             by the kernel",
            j.kernel, j.matched, j.not_on_wire, j.original_not_captured, j.not_in_kernel
        )));
    }
    let title = format!(" Retransmissions ({} total) ", d.retransmits_total());
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(ratatui::widgets::Wrap { trim: true })
            .block(panel(title, theme)),
        area,
    );
}
