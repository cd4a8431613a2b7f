//! The redundancy panel: per flow, duplication %, per-path win rate, messages only one path
//! carried, copy spacing and the verdict line.
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Wrap};
use ratatui::Frame;
use tboxscope_engine::snapshot::Snapshot;

use crate::view::{format, panel, Theme};

/// One flow's redundancy lines.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowRedundancy {
    /// Flow and matching mode.
    pub title: String,
    /// Duplication share 0..1 and messages.
    pub duplication: f64,
    /// Closed messages.
    pub messages: u64,
    /// Per path: label, win rate, messages only it carried.
    pub paths: Vec<(String, f64, u64)>,
    /// Copy spacing P50/P99 (µs), when measured.
    pub spacing: Option<(u64, u64)>,
    /// The verdict sentence.
    pub verdict: String,
}

/// The redundancy panel model.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RedundancyModel {
    /// Flows, in snapshot order.
    pub flows: Vec<FlowRedundancy>,
}

impl RedundancyModel {
    /// Builds the model.
    pub fn build(snap: &Snapshot) -> Self {
        let flows = snap
            .redundancy
            .iter()
            .map(|r| {
                let title = match r.mode {
                    Some(m) => format!(
                        "{} [{}{}]",
                        r.flow,
                        m.name(),
                        if r.mode_forced { ", forced" } else { "" }
                    ),
                    None => r.flow.clone(),
                };
                FlowRedundancy {
                    title,
                    duplication: r.duplication,
                    messages: r.messages,
                    paths: r
                        .paths
                        .iter()
                        .map(|p| (p.path.clone(), p.win_rate, p.only))
                        .collect(),
                    spacing: (r.copy_spacing.count > 0)
                        .then_some((r.copy_spacing.p50_us, r.copy_spacing.p99_us)),
                    verdict: r.verdict.clone(),
                }
            })
            .collect();
        Self { flows }
    }

    /// Draws the panel; flows that do not fit are counted in the title.
    pub fn render(&self, frame: &mut Frame, area: Rect, theme: &Theme) {
        let mut lines = Vec::new();
        let room = area.height.saturating_sub(2) as usize;
        let mut shown = 0;
        for flow in &self.flows {
            let block = flow_lines(flow, theme);
            if !lines.is_empty() && lines.len() + block.len() > room {
                break;
            }
            lines.extend(block);
            shown += 1;
        }
        if self.flows.is_empty() {
            lines.push(Line::styled(
                "no messages matched across paths yet: a flow whose copies travel on two paths \
                 shows its duplication and which path wins here",
                theme.dim(),
            ));
        }
        let title = if shown < self.flows.len() {
            format!(" Redundancy ({shown} of {} flows) ", self.flows.len())
        } else {
            " Redundancy ".to_owned()
        };
        frame.render_widget(
            Paragraph::new(lines)
                .wrap(Wrap { trim: true })
                .block(panel(title, theme)),
            area,
        );
    }
}

fn flow_lines<'a>(flow: &FlowRedundancy, theme: &Theme) -> Vec<Line<'a>> {
    let dup_style = if flow.duplication >= 0.99 {
        theme.ok()
    } else {
        theme.warn()
    };
    let mut lines = vec![
        Line::styled(flow.title.clone(), theme.title()),
        Line::from(vec![
            Span::raw("duplication "),
            Span::styled(format::percent(flow.duplication), dup_style),
            Span::raw(format!(" of {} msgs", flow.messages)),
        ]),
    ];
    let wins: Vec<String> = flow
        .paths
        .iter()
        .map(|(path, rate, _)| format!("{path} {}", format::percent(*rate)))
        .collect();
    lines.push(Line::raw(format!("wins: {}", wins.join(" · "))));
    let only: Vec<String> = flow
        .paths
        .iter()
        .map(|(path, _, only)| format!("{path} {only}"))
        .collect();
    let spacing = match flow.spacing {
        Some((p50, p99)) => format!(
            "spacing P50 {} P99 {}",
            format::micros(p50),
            format::micros(p99)
        ),
        None => "spacing -".to_owned(),
    };
    lines.push(Line::raw(format!("only: {} · {spacing}", only.join(" · "))));
    if !flow.verdict.is_empty() {
        lines.push(Line::styled(format!("» {}", flow.verdict), dup_style));
    }
    lines
}
