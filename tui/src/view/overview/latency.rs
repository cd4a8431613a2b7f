//! The latency panel: P50/P90/P99/P999 per path and for the redundant combination, the
//! independent-paths prediction next to the observed combined tail, latency during vs outside
//! outages, and (when tall enough) a percentile chart.
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Chart, Dataset, GraphType, Paragraph, Wrap};
use ratatui::Frame;
use tboxscope_engine::snapshot::{LatencyKind, Percentiles, Snapshot};

use crate::view::{format, panel, Theme};

/// Rows of the percentile chart at most.
const MAX_CHART_HEIGHT: u16 = 14;

/// The chart's y range in µs: from 80 % of the lowest median to the highest maximum, at
/// least a factor 2 apart so that equal figures do not make an empty range.
pub fn chart_bounds(rows: &[LatencyRow]) -> (u64, u64) {
    let with = rows.iter().filter(|r| r.p.count > 0);
    let low = with.clone().map(|r| r.p.p50_us).min().unwrap_or(1);
    let high = with.map(|r| r.p.max_us).max().unwrap_or(1_000);
    let low = (low * 4 / 5).max(1);
    (low, high.max(low * 2))
}

/// One row of the percentile table.
#[derive(Debug, Clone, PartialEq)]
pub struct LatencyRow {
    /// Path label, or `both` for the combination.
    pub name: String,
    /// Index of the path for its colour; `None` for the combination.
    pub series: Option<usize>,
    /// The percentiles.
    pub p: Percentiles,
}

/// The latency panel model.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LatencyModel {
    /// Per path, then the combination.
    pub rows: Vec<LatencyRow>,
    /// `one-way` or `to ACK`.
    pub kind: &'static str,
    /// (threshold µs, predicted, observed).
    pub tail: Vec<(u64, f64, f64)>,
    /// The verdict about independence.
    pub verdict: String,
    /// Combined P99 during / outside outages (µs, samples).
    pub during_outage: (u64, u64),
    /// Combined P99 outside outages (µs, samples).
    pub outside_outage: (u64, u64),
}

impl LatencyModel {
    /// Builds the model.
    pub fn build(snap: &Snapshot) -> Self {
        let l = &snap.latency;
        let mut rows: Vec<LatencyRow> = l
            .per_path
            .iter()
            .map(|(name, p)| LatencyRow {
                name: name.clone(),
                series: snap.paths.iter().position(|path| &path.label == name),
                p: p.clone(),
            })
            .collect();
        rows.push(LatencyRow {
            name: "both".to_owned(),
            series: None,
            p: l.combined.clone(),
        });
        Self {
            rows,
            kind: match l.kind {
                LatencyKind::OneWay => "one-way",
                LatencyKind::AckRtt => "to ACK",
            },
            tail: l
                .tail
                .iter()
                .map(|t| (t.t_us, t.predicted, t.observed))
                .collect(),
            verdict: l.verdict.clone(),
            during_outage: (l.during_outage.p99_us, l.during_outage.count),
            outside_outage: (l.outside_outage.p99_us, l.outside_outage.count),
        }
    }

    /// Draws the panel.
    pub fn render(&self, frame: &mut Frame, area: Rect, theme: &Theme) {
        let block = panel(format!(" Latency ({}) ", self.kind), theme);
        let inner = block.inner(area);
        frame.render_widget(block, area);
        // Columns of 8 where they fit, 7 on narrow terminals.
        let (name_w, w) = if inner.width >= 48 { (8, 8) } else { (6, 7) };
        let mut lines = vec![Line::styled(
            format!(
                "{:<name_w$}{:>w$}{:>w$}{:>w$}{:>w$}{:>w$}",
                "", "P50", "P90", "P99", "P999", "n"
            ),
            theme.dim(),
        )];
        for row in &self.rows {
            let p = &row.p;
            let cells = if p.count == 0 {
                format!("{:>w$}{:>w$}{:>w$}{:>w$}{:>w$}", "-", "-", "-", "-", 0)
            } else {
                format!(
                    "{:>w$}{:>w$}{:>w$}{:>w$}{:>w$}",
                    format::micros(p.p50_us),
                    format::micros(p.p90_us),
                    format::micros(p.p99_us),
                    format::micros(p.p999_us),
                    format::rate(p.count as f64)
                )
            };
            lines.push(Line::from(vec![
                Span::styled(
                    format!("{:<name_w$}", format::fit(&row.name, name_w - 1)),
                    theme.series(row.series),
                ),
                Span::raw(cells),
            ]));
        }
        let tail: Vec<String> = self
            .tail
            .iter()
            .map(|(t, predicted, observed)| {
                format!(
                    ">{}: pred {} obs {}",
                    format::micros(*t),
                    format::probability(*predicted),
                    format::probability(*observed)
                )
            })
            .collect();
        if !tail.is_empty() {
            lines.push(Line::raw(format!("P(both>t) {}", tail.join(" · "))));
        }
        if self.during_outage.1 > 0 {
            lines.push(Line::raw(format!(
                "P99 during outages {} (n={}) · outside {} (n={})",
                format::micros(self.during_outage.0),
                self.during_outage.1,
                format::micros(self.outside_outage.0),
                self.outside_outage.1
            )));
        }
        if self.rows.iter().all(|r| r.p.count == 0) {
            lines.push(Line::styled(
                "no latency sample yet: a message needs its send and its arrival (capture both \
                 ends) or its acknowledgment",
                theme.dim(),
            ));
        }
        if !self.verdict.is_empty() {
            let style = if self.verdict.contains("together") {
                theme.warn()
            } else {
                theme.ok()
            };
            lines.push(Line::styled(format!("» {}", self.verdict), style));
        }
        let room = usize::from(inner.width.max(1));
        let text_height: u16 = lines
            .iter()
            .map(|l| l.width().max(1).div_ceil(room) as u16)
            .sum();
        // The chart is at most as tall as a distribution needs to be readable; the rest stays
        // empty below it rather than stretching five points over thirty rows.
        let chart_room = inner
            .height
            .saturating_sub(text_height)
            .min(MAX_CHART_HEIGHT);
        let [text, chart, _] = Layout::vertical([
            Constraint::Length(text_height.min(inner.height)),
            Constraint::Length(chart_room),
            Constraint::Min(0),
        ])
        .areas(inner);
        frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }), text);
        if chart_room >= 8 && inner.width >= 40 {
            self.render_chart(frame, chart, theme);
        }
    }

    /// A percentile chart: x = P50, P90, P99, P999, max; y = latency on a logarithmic scale
    /// from just below the lowest median to the highest maximum, so that a tail 100× the
    /// median (an outage) does not flatten the rest of the distribution into the bottom row;
    /// one line per path and one for the combination.
    fn render_chart(&self, frame: &mut Frame, area: Rect, theme: &Theme) {
        let (low_us, high_us) = chart_bounds(&self.rows);
        let (bottom, top) = ((low_us as f64).log10(), (high_us as f64).log10());
        let points: Vec<Vec<(f64, f64)>> = self
            .rows
            .iter()
            .map(|row| {
                let p = &row.p;
                if p.count == 0 {
                    return Vec::new();
                }
                [p.p50_us, p.p90_us, p.p99_us, p.p999_us, p.max_us]
                    .iter()
                    .enumerate()
                    .map(|(i, us)| (i as f64, ((*us).max(1) as f64).log10()))
                    .collect()
            })
            .collect();
        let middle = 10f64.powf((bottom + top) / 2.0).round() as u64;
        let datasets: Vec<Dataset> = self
            .rows
            .iter()
            .zip(&points)
            .map(|(row, data)| {
                Dataset::default()
                    .name(row.name.clone())
                    .marker(Marker::Braille)
                    .graph_type(GraphType::Line)
                    .style(theme.series(row.series))
                    .data(data)
            })
            .collect();
        let chart = Chart::new(datasets)
            .hidden_legend_constraints((Constraint::Ratio(1, 2), Constraint::Ratio(1, 2)))
            .x_axis(
                Axis::default()
                    .bounds([0.0, 4.0])
                    .labels(["P50", "P90", "P99", "P999", "max"])
                    .style(theme.dim()),
            )
            .y_axis(
                Axis::default()
                    .bounds([bottom, top])
                    .labels([
                        format::micros(low_us),
                        format::micros(middle),
                        format::micros(high_us),
                    ])
                    .style(theme.dim()),
            );
        frame.render_widget(chart, area);
    }
}
