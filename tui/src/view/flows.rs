//! The Flows screen: KCP conversations, QUIC connections (with their paths), TCP sockets (cwnd,
//! ssthresh, srtt, RTO, backoff, retransmits, congestion state) and plain datagram flows, in
//! one sortable, filterable table; Enter shows every field of the selected flow.
use ratatui::layout::{Constraint, Rect};
use ratatui::text::Line;
use ratatui::widgets::{Cell, Clear, Paragraph, Row, Table, TableState};
use ratatui::Frame;
use tboxscope_engine::input::payload_hash;
use tboxscope_engine::snapshot::Snapshot;

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

    /// Draws the table (and the detail pop-up); returns the row count.
    pub fn render(&self, frame: &mut Frame, area: Rect, app: &App, theme: &Theme) -> usize {
        let wide = area.width >= 120;
        let mut header = vec!["Proto", "Flow"];
        if wide {
            header.push("Paths");
        }
        header.extend([
            "Pkts", "Retx", "Unack", "cwnd", "ssthr", "srtt", "RTO", "Boff", "Cong",
        ]);
        if wide {
            header.push("Notes");
        }
        let rows: Vec<Row> = self
            .rows
            .iter()
            .map(|r| {
                let mut cells = vec![Cell::from(r.proto), Cell::from(r.name.clone())];
                if wide {
                    cells.push(Cell::from(r.paths.clone()));
                }
                cells.push(Cell::from(if r.proto == "tcp" {
                    "-".to_owned()
                } else {
                    format::rate(r.packets as f64)
                }));
                let retx_style = if r.retx > 0 {
                    theme.warn()
                } else {
                    ratatui::style::Style::new()
                };
                cells.push(Cell::from(format::rate(r.retx as f64)).style(retx_style));
                cells.push(Cell::from(
                    r.unacked.map_or("-".to_owned(), |u| u.to_string()),
                ));
                match &r.tcp {
                    Some((cwnd, ssthresh, srtt, rto, backoff, cong)) => {
                        let backoff_style = if *backoff > 0 {
                            theme.alert()
                        } else {
                            ratatui::style::Style::new()
                        };
                        cells.extend([
                            Cell::from(cwnd.to_string()),
                            Cell::from(ssthresh_text(*ssthresh)),
                            Cell::from(format::micros(u64::from(*srtt))),
                            Cell::from(format::micros(u64::from(*rto))),
                            Cell::from(backoff.to_string()).style(backoff_style),
                            Cell::from(cong.clone()),
                        ]);
                    }
                    None => cells.extend((0..6).map(|_| Cell::from("·"))),
                }
                if wide {
                    cells.push(Cell::from(r.notes.clone()));
                }
                Row::new(cells)
            })
            .collect();
        let mut widths = vec![Constraint::Length(5), Constraint::Min(14)];
        if wide {
            widths.push(Constraint::Length(12));
        }
        widths.extend([
            Constraint::Length(5),
            Constraint::Length(5),
            Constraint::Length(5),
            Constraint::Length(5),
            Constraint::Length(5),
            Constraint::Length(6),
            Constraint::Length(6),
            Constraint::Length(4),
            Constraint::Length(8),
        ]);
        if wide {
            widths.push(Constraint::Min(20));
        }
        let title = if self.rows.len() == self.total {
            format!(" Flows ({}) ", self.total)
        } else {
            format!(" Flows ({} of {}) ", self.rows.len(), self.total)
        };
        let table = Table::new(rows, widths)
            .header(Row::new(header).style(theme.title()))
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
