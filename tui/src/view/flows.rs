//! The Flows screen: KCP conversations, QUIC connections (with their paths), TCP sockets (cwnd,
//! ssthresh, srtt, RTO, backoff, retransmits, congestion state) and plain datagram flows, in
//! one sortable, filterable table; Enter shows every field of the selected flow.
use ratatui::layout::Rect;
use ratatui::text::Line;
use ratatui::widgets::{Cell, Clear, Paragraph, Row, Table, TableState};
use ratatui::Frame;
use tboxscope_engine::input::payload_hash;
use tboxscope_engine::snapshot::Snapshot;

use super::columns::{self, Keep};
use super::{centered, format, matches_filter, panel, Theme};
use crate::app::{App, Screen, SortKey};

/// One row of the flows table.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowRow {
    /// Stable key (hash of protocol and name).
    pub key: u64,
    /// `tcp`, `kcp`, `quic`, `udp`.
    pub proto: &'static str,
    /// Flow name.
    pub name: String,
    /// Paths it was seen on.
    pub paths: String,
    /// Packets / segments.
    pub packets: u64,
    /// Retransmissions (segments, or re-sent bytes for QUIC).
    pub retx: u64,
    /// Unacknowledged.
    pub unacked: Option<u64>,
    /// TCP columns: cwnd, ssthresh, srtt µs, RTO µs, backoff, congestion state.
    pub tcp: Option<(u32, u32, u32, u32, u8, String)>,
    /// Protocol-specific notes.
    pub notes: String,
    /// Every field, for the detail pop-up.
    pub detail: Vec<String>,
}

/// The Flows view-model: filtered and sorted rows.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FlowsModel {
    /// Rows after filter and sort.
    pub rows: Vec<FlowRow>,
    /// Rows before filtering.
    pub total: usize,
}

fn key(proto: &str, name: &str) -> u64 {
    payload_hash(format!("{proto} {name}").as_bytes())
}

fn ssthresh_text(ssthresh: u32) -> String {
    // Linux starts ssthresh at "infinity" (0x7fffffff); show it as such.
    if ssthresh >= 0x7fff_0000 {
        "∞".to_owned()
    } else {
        ssthresh.to_string()
    }
}

impl FlowsModel {
    /// Every flow of the snapshot as a row, filtered and sorted as the app says.
    pub fn build(snap: &Snapshot, app: &App) -> Self {
        let mut rows = Vec::new();
        for t in &snap.flows.tcp {
            let state = format!("{:?}", t.cong_state);
            rows.push(FlowRow {
                key: key("tcp", &t.socket),
                proto: "tcp",
                // The protocol has its own column.
                name: t
                    .socket
                    .strip_prefix("tcp ")
                    .unwrap_or(&t.socket)
                    .to_owned(),
                paths: t.path.clone(),
                packets: 0,
                retx: u64::from(t.figures.retransmits),
                unacked: None,
                tcp: Some((
                    t.figures.cwnd,
                    t.figures.ssthresh,
                    t.figures.srtt_us,
                    t.figures.rto_us,
                    t.figures.backoff,
                    state.clone(),
                )),
                notes: t.state.clone(),
                detail: vec![
                    format!("TCP socket {}", t.socket),
                    format!("path {} · state {} · congestion {state}", t.path, t.state),
                    format!(
                        "cwnd {} · ssthresh {}",
                        t.figures.cwnd,
                        ssthresh_text(t.figures.ssthresh)
                    ),
                    format!(
                        "srtt {} · RTO {} · backoff {}",
                        format::micros(u64::from(t.figures.srtt_us)),
                        format::micros(u64::from(t.figures.rto_us)),
                        t.figures.backoff
                    ),
                    format!("retransmits {}", t.figures.retransmits),
                    format!("last event {}", format::clock(t.last_event_ns)),
                ],
            });
        }
        for k in &snap.flows.kcp {
            let name = format!("conv {}", k.conv);
            rows.push(FlowRow {
                key: key("kcp", &name),
                proto: "kcp",
                paths: k.paths.join("+"),
                packets: k.segments,
                retx: k.retransmissions,
                unacked: Some(k.unacked),
                tcp: None,
                notes: format!("sn {} una {} wnd {}", k.max_sn, k.una, k.wnd),
                detail: vec![
                    format!("KCP conversation {}", k.conv),
                    format!("paths {}", k.paths.join(", ")),
                    format!(
                        "segments {} · retransmitted {} · unacked {}",
                        k.segments, k.retransmissions, k.unacked
                    ),
                    format!("highest sn {} · una {} · window {}", k.max_sn, k.una, k.wnd),
                ],
                name,
            });
        }
        for q in &snap.flows.quic {
            rows.push(FlowRow {
                key: key("quic", &q.conn),
                proto: "quic",
                name: q.conn.clone(),
                paths: q.paths.join("+"),
                packets: q.packets,
                retx: q.retransmitted_bytes,
                unacked: Some(q.unacked),
                tcp: None,
                notes: format!(
                    "{} streams, {} re-sent",
                    q.streams,
                    format::bytes(q.retransmitted_bytes as f64)
                ),
                detail: vec![
                    format!("QUIC connection {}", q.conn),
                    format!("paths {}", q.paths.join(", ")),
                    format!(
                        "packets {} · streams {} · unacked {}",
                        q.packets, q.streams, q.unacked
                    ),
                    format!(
                        "stream bytes re-sent {}",
                        format::bytes(q.retransmitted_bytes as f64)
                    ),
                ],
            });
        }
        for d in &snap.flows.datagram {
            rows.push(FlowRow {
                key: key("udp", &d.flow),
                proto: "udp",
                name: d.flow.clone(),
                paths: d.paths.join("+"),
                packets: d.datagrams,
                retx: 0,
                unacked: None,
                tcp: None,
                notes: "dual-sent datagrams".to_owned(),
                detail: vec![
                    format!("datagram flow {}", d.flow),
                    format!("paths {}", d.paths.join(", ")),
                    format!("datagrams {}", d.datagrams),
                ],
            });
        }
        let total = rows.len();
        let list = app.list_of(Screen::Flows);
        rows.retain(|r| {
            matches_filter(
                &format!("{} {} {} {}", r.proto, r.name, r.paths, r.notes),
                &list.filter,
            )
        });
        match app.sort_of(Screen::Flows) {
            Some(SortKey::Retransmits) => rows.sort_by_key(|r| std::cmp::Reverse(r.retx)),
            Some(SortKey::Latency) => rows.sort_by(|a, b| {
                let srtt = |r: &FlowRow| r.tcp.as_ref().map_or(0, |t| t.2);
                srtt(b).cmp(&srtt(a))
            }),
            Some(SortKey::Name) => rows.sort_by(|a, b| a.name.cmp(&b.name)),
            _ => rows.sort_by_key(|r| std::cmp::Reverse(r.packets)),
        }
        if list.reversed {
            rows.reverse();
        }
        Self { rows, total }
    }

    /// Key of the selected row.
    pub fn selected_key(&self, app: &App) -> Option<u64> {
        let n = self.rows.len();
        if n == 0 {
            return None;
        }
        self.rows
            .get(app.list_of(Screen::Flows).selected.min(n - 1))
            .map(|r| r.key)
    }

    /// Draws the table (and the detail pop-up); returns the row count. Columns by priority
    /// (see [`columns`]): protocol, flow and paths whole; notes shrink first; then the TCP
    /// figures least looked at (ssthresh, unacked, cwnd) go before retransmissions and RTO.
    pub fn render(&self, frame: &mut Frame, area: Rect, app: &App, theme: &Theme) -> usize {
        let plain = ratatui::style::Style::new();
        // Each row's cells with their style, in table order.
        let cells: Vec<Vec<(String, ratatui::style::Style)>> = self
            .rows
            .iter()
            .map(|r| {
                let packets = if r.proto == "tcp" {
                    "-".to_owned()
                } else {
                    format::rate(r.packets as f64)
                };
                let retx_style = if r.retx > 0 { theme.warn() } else { plain };
                let mut row = vec![
                    (r.proto.to_owned(), plain),
                    (r.name.clone(), plain),
                    (r.paths.clone(), plain),
                    (packets, plain),
                    (format::rate(r.retx as f64), retx_style),
                    (r.unacked.map_or("-".to_owned(), |u| u.to_string()), plain),
                ];
                match &r.tcp {
                    Some((cwnd, ssthresh, srtt, rto, backoff, cong)) => {
                        let backoff_style = if *backoff > 0 { theme.alert() } else { plain };
                        row.extend([
                            (cwnd.to_string(), plain),
                            (ssthresh_text(*ssthresh), plain),
                            (format::micros(u64::from(*srtt)), plain),
                            (format::micros(u64::from(*rto)), plain),
                            (backoff.to_string(), backoff_style),
                            (cong.clone(), plain),
                        ]);
                    }
                    None => row.extend((0..6).map(|_| ("·".to_owned(), plain))),
                }
                row.push((r.notes.clone(), plain));
                row
            })
            .collect();
        let list = app.list_of(Screen::Flows);
        let sort = app.sort_of(Screen::Flows);
        // Which column each sort orders, and whether that sort puts the most first.
        let (sorted_col, most_first) = match sort {
            Some(SortKey::Retransmits) => (4, true),
            Some(SortKey::Latency) => (8, true),
            Some(SortKey::Name) => (1, false),
            _ => (3, true),
        };
        let specs: [(&str, Keep); 13] = [
            ("Proto", Keep::Always),
            ("Flow", Keep::Always),
            ("Paths", Keep::Always),
            ("Pkts", Keep::Rank(8)),
            ("Retx", Keep::Rank(9)),
            ("Unack", Keep::Rank(2)),
            ("cwnd", Keep::Rank(3)),
            ("ssthr", Keep::Rank(1)),
            ("srtt", Keep::Rank(7)),
            ("RTO", Keep::Rank(6)),
            ("Boff", Keep::Rank(5)),
            ("Cong", Keep::Rank(4)),
            ("Notes", Keep::Rest { min: 10 }),
        ];
        let columns = columns::columns_of(
            &specs,
            |i, h| columns::sorted_header(h, i == sorted_col, most_first != list.reversed),
            |i| cells.iter().map(move |r| r[i].0.as_str()),
        );
        let shown = columns::Shown::of(&columns, area.width.saturating_sub(2), 1);
        let rows: Vec<Row> = cells
            .into_iter()
            .map(|row| {
                Row::new(
                    shown
                        .cells(row)
                        .into_iter()
                        .map(|(text, style)| Cell::from(text).style(style)),
                )
            })
            .collect();
        let title = if self.rows.len() == self.total {
            format!(" Flows ({}) ", self.total)
        } else {
            format!(" Flows ({} of {}) ", self.rows.len(), self.total)
        };
        let table = Table::new(rows, shown.widths)
            .header(Row::new(shown.header).style(theme.title()))
            .row_highlight_style(theme.selected())
            .column_spacing(1)
            .block(panel(title, theme));
        let mut state = TableState::default();
        if !self.rows.is_empty() {
            state.select(Some(
                app.list_of(Screen::Flows).selected.min(self.rows.len() - 1),
            ));
        }
        frame.render_stateful_widget(table, area, &mut state);
        if let Some(text) = super::empty_text(
            self.rows.len(),
            self.total,
            &list.filter,
            "no flow yet: KCP conversations, QUIC connections, TCP sockets and dual-sent UDP \
             flows appear here as their packets or kernel events arrive",
        ) {
            super::render_empty(frame, area, &text, theme);
        }
        if let Some(open) = app.list_of(Screen::Flows).detail {
            if let Some(row) = self.rows.iter().find(|r| r.key == open) {
                let lines: Vec<Line> = row.detail.iter().map(|l| Line::raw(l.clone())).collect();
                let width = row
                    .detail
                    .iter()
                    .map(|l| l.chars().count())
                    .max()
                    .unwrap_or(20);
                let popup = centered(area, width as u16 + 4, lines.len() as u16 + 2);
                frame.render_widget(Clear, popup);
                frame.render_widget(
                    Paragraph::new(lines).block(panel(" Flow (Esc closes) ", theme)),
                    popup,
                );
            }
        }
        self.rows.len()
    }
}
