//! Bandwidth amplification per flow: wire bytes (all copies, retransmissions, ACKs, FEC parity)
//! over unique payload bytes delivered.
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;
use tboxscope_engine::snapshot::Snapshot;

use crate::view::{format, panel, Theme};

/// One flow's amplification line.
#[derive(Debug, Clone, PartialEq)]
pub struct AmplificationRow {
    /// Flow and protocol.
    pub flow: String,
    /// wire / unique.
    pub ratio: f64,
    /// Wire bytes.
    pub wire: u64,
    /// Unique payload bytes.
    pub unique: u64,
    /// Shares of the wire bytes: retransmissions, ACKs, overhead (0..1).
    pub shares: (f64, f64, f64),
}

/// The ratio as shown: `–` while nothing was delivered (the engine's ratio is 0 then: no
/// ratio yet, not `0.00×`).
pub fn ratio_text(row: &AmplificationRow) -> String {
    if !row.ratio.is_finite() || row.ratio <= 0.0 {
        "–".to_owned()
    } else {
        format!("{:.2}×", row.ratio)
    }
}

/// The amplification panel model.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AmplificationModel {
    /// Per flow.
    pub rows: Vec<AmplificationRow>,
}

impl AmplificationModel {
    /// Builds the model.
    pub fn build(snap: &Snapshot) -> Self {
        let rows = snap
            .amplification
            .iter()
            .map(|a| {
                let share = |n: u64| {
                    if a.wire_bytes == 0 {
                        0.0
                    } else {
                        n as f64 / a.wire_bytes as f64
                    }
                };
                AmplificationRow {
                    flow: format!("{} ({})", a.flow, a.protocol),
                    ratio: a.ratio,
                    wire: a.wire_bytes,
                    unique: a.unique_payload_bytes,
                    shares: (
                        share(a.retransmit_bytes),
                        share(a.ack_bytes),
                        share(a.overhead_bytes),
                    ),
                }
            })
            .collect();
        Self { rows }
    }

    /// Draws the panel.
    pub fn render(&self, frame: &mut Frame, area: Rect, theme: &Theme) {
        let mut lines = Vec::new();
        for row in &self.rows {
            let style = if row.ratio > 2.5 {
                theme.warn()
            } else {
                ratatui::style::Style::new()
            };
            let mut first = vec![
                Span::styled(ratio_text(row), style),
                Span::raw(format!(" {}", row.flow)),
            ];
            if row.wire == 0 {
                lines.push(Line::from(first));
                continue;
            }
            first.push(Span::raw(format!(
                " · wire {} / unique {}",
                format::bytes(row.wire as f64),
                format::bytes(row.unique as f64)
            )));
            lines.push(Line::from(first));
            lines.push(Line::styled(
                format!(
                    "   retx {} · acks {} · overhead/FEC {}",
                    format::percent(row.shares.0),
                    format::percent(row.shares.1),
                    format::percent(row.shares.2)
                ),
                theme.dim(),
            ));
        }
        if lines.is_empty() {
            lines.push(Line::styled("nothing delivered yet", theme.dim()));
        }
        frame.render_widget(
            Paragraph::new(lines).block(panel(" Amplification ", theme)),
            area,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A flow with nothing delivered yet has no ratio: `–`, not `0.00×`.
    #[test]
    fn nothing_delivered_is_a_dash() {
        let row = |ratio, unique| AmplificationRow {
            flow: "tcp 10.0.0.2:40000 → 10.0.0.1:443 (tcp)".to_owned(),
            ratio,
            wire: 0,
            unique,
            shares: (0.0, 0.0, 0.0),
        };
        assert_eq!(ratio_text(&row(0.0, 0)), "–");
        assert_eq!(ratio_text(&row(f64::NAN, 0)), "–");
        assert_eq!(ratio_text(&row(2.125, 1000)), "2.12×");
        // A window's ratio carries no byte counts.
        assert_eq!(ratio_text(&row(2.2, 0)), "2.20×");
    }
}
