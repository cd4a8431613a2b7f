//! The Overview screen.
//!
//! ```text
//! ┌ eth0 ───────────────┐┌ eth1 ───────────────┐   paths.rs: one panel per path
//! │ UP / DOWN 3.2s      ││                     │
//! │ pkt/s, B/s, loss    ││                     │
//! │ P50/P99 + sparkline ││                     │
//! └─────────────────────┘└─────────────────────┘
//! ┌ Redundancy ─────────┐┌ Latency ────────────┐   redundancy.rs | latency.rs
//! └─────────────────────┘└─────────────────────┘
//! ┌ Amplification ──────┐┌ Capture health ─────┐   amplification.rs | ../health.rs
//! └─────────────────────┘└─────────────────────┘
//! ```
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::Frame;
use tboxscope_engine::snapshot::Snapshot;

use super::health::HealthModel;
use super::Theme;

pub mod amplification;
pub mod latency;
pub mod paths;
pub mod redundancy;

/// The Overview view-model.
#[derive(Debug, Clone)]
pub struct OverviewModel {
    /// One panel per path.
    pub paths: Vec<paths::PathModel>,
    /// Redundancy per flow.
    pub redundancy: redundancy::RedundancyModel,
    /// Latency per path and combined.
    pub latency: latency::LatencyModel,
    /// Amplification per flow.
    pub amplification: amplification::AmplificationModel,
    /// Capture health.
    pub health: HealthModel,
}

impl OverviewModel {
    /// Builds the model from a snapshot.
    pub fn build(snap: &Snapshot) -> Self {
        Self {
            paths: paths::PathModel::build_all(snap),
            redundancy: redundancy::RedundancyModel::build(snap),
            latency: latency::LatencyModel::build(snap),
            amplification: amplification::AmplificationModel::build(snap),
            health: HealthModel::build(snap),
        }
    }

    /// Draws the screen.
    pub fn render(&self, frame: &mut Frame, area: Rect, theme: &Theme) {
        let tall = area.height >= 40;
        let path_height = if tall { 9 } else { 7 };
        let bottom_height = if tall { 10 } else { 5 };
        let [paths_area, middle, bottom] = Layout::vertical([
            Constraint::Length(path_height),
            Constraint::Min(6),
            Constraint::Length(bottom_height),
        ])
        .areas(area);
        paths::render_all(&self.paths, frame, paths_area, theme);
        let [left, right] =
            Layout::horizontal([Constraint::Percentage(45), Constraint::Percentage(55)])
                .areas(middle);
        self.redundancy.render(frame, left, theme);
        self.latency.render(frame, right, theme);
        let [left, right] =
            Layout::horizontal([Constraint::Percentage(45), Constraint::Percentage(55)])
                .areas(bottom);
        self.amplification.render(frame, left, theme);
        self.health.render(frame, right, theme);
    }
}
