//! One panel per path: label, interface, up/down with the outage timer, packets/s, bytes/s,
//! loss and retransmission rate, latency P50/P99 and a sparkline of recent P99.
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Sparkline};
use ratatui::Frame;
use tboxscope_engine::snapshot::{LatencyKind, Snapshot};

use crate::view::{format, panel, Theme};

/// One path's panel.
#[derive(Debug, Clone, PartialEq)]
pub struct PathModel {
    /// Path label.
    pub label: String,
    /// Interfaces / capture names on this path.
    pub interfaces: String,
    /// Up (false while in outage).
    pub up: bool,
    /// Current outage length.
    pub outage_for: Option<String>,
    /// Packets per second.
    pub packets_per_s: f64,
    /// Bytes per second.
    pub bytes_per_s: f64,
    /// Totals.
    pub packets: u64,
    /// Messages never carried, share 0..1 (not the packet loss on the wire).
    pub loss_rate: f64,
    /// Data sends that were retransmissions, share 0..1 (packets lost on the wire, or taken
    /// for lost).
    pub retransmission_rate: f64,
    /// Whole-run P50 / P99 (µs) and samples.
    pub p50_us: u64,
    /// Whole-run P99 (µs).
    pub p99_us: u64,
    /// Latency samples.
    pub samples: u64,
    /// What latency measures.
    pub kind: LatencyKind,
    /// Recent P99 per window (µs), oldest first.
    pub recent_p99: Vec<u64>,
    /// Recent P50 per window (µs), oldest first.
    pub recent_p50: Vec<u64>,
}

impl PathModel {
    /// One model per path of the snapshot.
    pub fn build_all(snap: &Snapshot) -> Vec<Self> {
        snap.paths
            .iter()
            .map(|p| {
                let interfaces: Vec<&str> = snap
                    .health
                    .captures
                    .iter()
                    .filter(|c| c.path == p.label && c.name != p.label)
                    .map(|c| c.name.as_str())
                    .collect();
                Self {
                    label: p.label.clone(),
                    interfaces: interfaces.join(", "),
                    up: p.up,
                    outage_for: p.outage_for_ns.map(format::nanos),
                    packets_per_s: p.packets_per_s,
                    bytes_per_s: p.bytes_per_s,
                    packets: p.packets,
                    loss_rate: p.loss_rate,
                    retransmission_rate: p.retransmission_rate,
                    p50_us: p.latency.p50_us,
                    p99_us: p.latency.p99_us,
                    samples: p.latency.count,
                    kind: p.latency_kind,
                    recent_p99: p.recent.iter().map(|s| s.p99_us).collect(),
                    recent_p50: p.recent.iter().map(|s| s.p50_us).collect(),
                }
            })
            .collect()
    }

    fn render(&self, frame: &mut Frame, area: Rect, index: usize, theme: &Theme) {
        let title = if self.interfaces.is_empty() {
            format!(" {} ", self.label)
        } else {
            format!(" {} ({}) ", self.label, self.interfaces)
        };
        let block = panel(Line::styled(title, theme.series(Some(index))), theme);
        let inner = block.inner(area);
        frame.render_widget(block, area);
        let status = if self.up {
            Span::styled(" UP ", theme.ok())
        } else {
            Span::styled(
                format!(
                    " DOWN {} ",
                    self.outage_for.clone().unwrap_or_else(|| "?".to_owned())
                ),
                theme.alert(),
            )
        };
        let kind = match self.kind {
            LatencyKind::OneWay => "one-way",
            LatencyKind::AckRtt => "to ACK",
        };
        let latency = if self.samples == 0 {
            Span::styled(format!("latency ({kind}): no samples"), theme.dim())
        } else {
            Span::raw(format!(
                "P50 {} P99 {} {kind} n={}",
                format::micros(self.p50_us),
                format::micros(self.p99_us),
                self.samples
            ))
        };
        let loss_style = if self.loss_rate > 0.01 || self.retransmission_rate > 0.01 {
            theme.warn()
        } else {
            ratatui::style::Style::new()
        };
        let lines = vec![
            Line::from(vec![
                status,
                Span::raw(format!(
                    " {} pkt/s  {}/s  {} pkts",
                    format::rate(self.packets_per_s),
                    format::bytes(self.bytes_per_s),
                    format::rate(self.packets as f64)
                )),
            ]),
            // Two different figures, each named: messages the path never delivered, and
            // packets sent again (what the wire lost, or what the sender took for lost).
            Line::styled(
                format!(
                    "msgs not carried {} · re-sent {}",
                    format::percent(self.loss_rate),
                    format::percent(self.retransmission_rate),
                ),
                loss_style,
            ),
            Line::from(latency),
        ];
        let [text, spark] =
            Layout::vertical([Constraint::Length(3), Constraint::Min(0)]).areas(inner);
        frame.render_widget(Paragraph::new(lines), text);
        if spark.height > 0 {
            let width = spark.width as usize;
            let start = self.recent_p99.len().saturating_sub(width);
            let label = "P99 ";
            let [l, s] =
                Layout::horizontal([Constraint::Length(4), Constraint::Min(0)]).areas(spark);
            frame.render_widget(Paragraph::new(Span::styled(label, theme.dim())), l);
            frame.render_widget(
                Sparkline::default()
                    .data(&self.recent_p99[start..])
                    .style(theme.series(Some(index))),
                s,
            );
        }
    }
}

/// Draws the path panels side by side.
pub fn render_all(paths: &[PathModel], frame: &mut Frame, area: Rect, theme: &Theme) {
    if paths.is_empty() {
        frame.render_widget(
            Paragraph::new(Line::styled(
                "no path seen yet: waiting for packets or kernel events on the paths \
                 (live: name them with -i IFACE=LABEL)",
                theme.dim(),
            ))
            .wrap(ratatui::widgets::Wrap { trim: true })
            .block(panel(" Paths ", theme)),
            area,
        );
        return;
    }
    let constraints = vec![Constraint::Ratio(1, paths.len() as u32); paths.len()];
    let areas = Layout::horizontal(constraints).split(area);
    for (i, (path, rect)) in paths.iter().zip(areas.iter()).enumerate() {
        path.render(frame, *rect, i, theme);
    }
}
