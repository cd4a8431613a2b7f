//! Capture health: what was dropped or could not be used. The Overview has a panel with every
//! counter; every screen shows a warning line whenever any loss counter is non-zero.
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Wrap};
use ratatui::Frame;
use tboxscope_engine::snapshot::Snapshot;

use super::{format, panel, Theme};

/// Which end a capture shows, in words (`T-Box`, `gateway`, `end not known`).
fn host_name(host: tboxscope_engine::Host) -> &'static str {
    match host {
        tboxscope_engine::Host::Tbox => "T-Box",
        tboxscope_engine::Host::Gateway => "gateway",
        tboxscope_engine::Host::Unknown => "end not known",
    }
}

/// The counter of packets the kernel capture buffer could not hold (`--buffer-size`).
const PCAP_DROPS: &str = "libpcap drops";

/// One counter: name, value, whether non-zero means data was lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    /// Name in the user's words.
    pub name: &'static str,
    /// Value.
    pub value: u64,
    /// Non-zero means something was lost or not understood.
    pub loss: bool,
}

/// The health view-model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthModel {
    /// Counters, losses first.
    pub counters: Vec<Counter>,
    /// What the engine inferred about the captures (pairing, clock offsets).
    pub inferences: Vec<String>,
    /// One line per capture point.
    pub captures: Vec<String>,
}

impl HealthModel {
    /// Builds the model from a snapshot.
    pub fn build(snap: &Snapshot) -> Self {
        let h = &snap.health;
        let loss = |name, value| Counter {
            name,
            value,
            loss: true,
        };
        let counters = vec![
            loss(PCAP_DROPS, h.pcap_dropped),
            loss("ring-buffer drops", h.ring_buffer_dropped),
            loss("TCP events dropped", h.tcp_events_dropped),
            loss("TCP hook runs skipped", h.tcp_hook_runs_skipped),
            loss("TCP resends without record", h.tcp_retrans_unrecorded),
            loss("TCP cong. changes seen late", h.tcp_cong_changes_late),
            loss("decrypt failures", h.decrypt_failures),
            loss("flow evictions", h.evicted_flows),
            loss("message evictions", h.evicted_messages),
            loss("unacked evictions", h.evicted_unacked),
            loss("stream evictions", h.evicted_streams),
            loss("incident evictions", h.evicted_incidents),
            loss("records dropped", h.dropped_records),
            loss("out of order", h.out_of_order),
            loss("latencies clamped", h.clamped_latencies),
            loss("messages held too long", h.held_too_long),
            Counter {
                name: "observations",
                value: h.observations,
                loss: false,
            },
        ];
        // What the engine did for copies held through outages and sessions found late, shown
        // where it happened.
        let told = [
            ("messages held for an outage", h.held_messages),
            ("late copies", h.late_copies),
            ("messages regrouped", h.regrouped_messages),
        ];
        let mut counters = counters;
        counters.extend(
            told.into_iter()
                .filter(|t| t.1 > 0)
                .map(|(name, value)| Counter {
                    name,
                    value,
                    loss: false,
                }),
        );
        let captures = h
            .captures
            .iter()
            .map(|c| {
                let offset = if c.clock_offset_ns != 0 || c.clock_offset_estimated {
                    format!(
                        ", clock {}{}",
                        if c.clock_offset_ns < 0 { "-" } else { "+" },
                        format::nanos(c.clock_offset_ns.unsigned_abs())
                    ) + if c.clock_offset_estimated {
                        " (est.)"
                    } else {
                        ""
                    }
                } else {
                    String::new()
                };
                format!(
                    "{} → path {} ({}){}, {} pkts",
                    c.name,
                    c.path,
                    host_name(c.host),
                    offset,
                    format::rate(c.packets as f64)
                )
            })
            .collect();
        Self {
            counters,
            inferences: h.inferences.clone(),
            captures,
        }
    }

    /// Counters that lost data and are non-zero.
    pub fn losses(&self) -> impl Iterator<Item = &Counter> {
        self.counters.iter().filter(|c| c.loss && c.value > 0)
    }

    /// The warning line(s) for the footer, empty when nothing was lost.
    pub fn footer_lines(&self, width: u16) -> Vec<String> {
        let parts: Vec<String> = self
            .losses()
            .map(|c| {
                if c.name == PCAP_DROPS {
                    format!("{} {} (try a larger --buffer-size)", c.name, c.value)
                } else {
                    format!("{} {}", c.name, c.value)
                }
            })
            .collect();
        if parts.is_empty() {
            return Vec::new();
        }
        let text = format!(" capture health: {}", parts.join(" · "));
        if text.chars().count() <= width as usize {
            vec![text]
        } else {
            let (a, b) = parts.split_at(parts.len().div_ceil(2));
            vec![
                format!(" capture health: {}", a.join(" · ")),
                format!("   {}", b.join(" · ")),
            ]
        }
    }

    /// Draws the Overview's health panel.
    pub fn render(&self, frame: &mut Frame, area: Rect, theme: &Theme) {
        let mut spans = Vec::new();
        for c in self.losses() {
            spans.push(Span::styled(
                format!("{} {}", c.name, c.value),
                theme.alert(),
            ));
            spans.push(Span::raw("  "));
        }
        if spans.is_empty() {
            spans.push(Span::styled(
                "no drops, no evictions, no decrypt failures",
                theme.ok(),
            ));
            spans.push(Span::raw("  "));
        }
        for c in self.counters.iter().filter(|c| !c.loss) {
            spans.push(Span::raw(format!("{} {}", c.name, c.value)));
        }
        let mut lines = vec![Line::from(spans)];
        for text in self.captures.iter().chain(&self.inferences) {
            lines.push(Line::styled(text.clone(), theme.dim()));
        }
        frame.render_widget(
            Paragraph::new(lines)
                .wrap(Wrap { trim: true })
                .block(panel(" Capture health ", theme)),
            area,
        );
    }
}

/// Draws the footer warning lines (nothing when there are none).
pub fn render_footer(frame: &mut Frame, area: Rect, lines: &[String], theme: &Theme) {
    if area.height == 0 {
        return;
    }
    let lines: Vec<Line> = lines
        .iter()
        .map(|l| Line::styled(l.clone(), theme.alert()))
        .collect();
    frame.render_widget(Paragraph::new(lines), area);
}

#[cfg(test)]
mod tests {
    use super::*;
    use tboxscope_engine::snapshot::CaptureView;
    use tboxscope_engine::Host;

    #[test]
    fn kernel_tcp_events_dropped_show_with_the_other_drops() {
        let mut snap = Snapshot::default();
        assert!(HealthModel::build(&snap).footer_lines(200).is_empty());
        snap.health.ring_buffer_dropped = 2;
        snap.health.tcp_events_dropped = 3;
        snap.health.tcp_hook_runs_skipped = 4;
        snap.health.tcp_retrans_unrecorded = 5;
        snap.health.tcp_cong_changes_late = 1;
        assert_eq!(
            HealthModel::build(&snap).footer_lines(200),
            [" capture health: ring-buffer drops 2 · TCP events dropped 3 · TCP hook runs skipped 4 · TCP resends without record 5 · TCP cong. changes seen late 1"]
        );
    }

    #[test]
    fn libpcap_drops_suggest_a_larger_buffer() {
        let mut snap = Snapshot::default();
        snap.health.pcap_dropped = 7;
        assert_eq!(
            HealthModel::build(&snap).footer_lines(200),
            [" capture health: libpcap drops 7 (try a larger --buffer-size)"]
        );
    }

    /// Which end a capture shows reads in words, not as a Debug name (`(Unknown)`).
    #[test]
    fn capture_ends_in_words() {
        let mut snap = Snapshot::default();
        for (name, host) in [
            ("t0", Host::Tbox),
            ("g0", Host::Gateway),
            ("x", Host::Unknown),
        ] {
            snap.health.captures.push(CaptureView {
                name: name.to_owned(),
                path: "eth0".to_owned(),
                host,
                ..CaptureView::default()
            });
        }
        let lines = HealthModel::build(&snap).captures;
        assert!(lines[0].contains("(T-Box)"), "{lines:?}");
        assert!(lines[1].contains("(gateway)"), "{lines:?}");
        assert!(lines[2].contains("(end not known)"), "{lines:?}");
        assert!(!lines
            .iter()
            .any(|l| l.contains("Unknown") || l.contains("Tbox")));
    }
}
