//! The views: each screen (or region) builds a small view-model from the engine's
//! [`Snapshot`] and the [`App`] state, then draws it with `render(frame, area)`.
//!
//! Root layout (every screen):
//!
//! ```text
//! ┌──────────────────────────────────────────────────────────────────────┐
//! │ 1 Overview  2 Flows  3 TCP  4 Incidents  5 Events  6 Advice  source │  bar.rs (1 line)
//! ├──────────────────────────────────────────────────────────────────────┤
//! │                                                                      │
//! │   the current screen: overview.rs / flows.rs / tcp.rs /              │
//! │   incidents.rs / events.rs / advice.rs  (detail pop-ups on top)      │
//! │                                                                      │
//! ├──────────────────────────────────────────────────────────────────────┤
//! │ capture health warnings (only when non-zero)                         │  health.rs
//! │ key hints · filter prompt · replay position                          │  bar.rs (1 line)
//! └──────────────────────────────────────────────────────────────────────┘
//!                     `?` draws help.rs over everything
//! ```
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Paragraph};
use ratatui::Frame;
use tboxscope_engine::snapshot::Snapshot;

use crate::app::{App, Screen};

pub mod advice;
pub mod bar;
pub mod columns;
pub mod events;
pub mod flows;
pub mod format;
pub mod health;
pub mod help;
pub mod incidents;
pub mod overview;
pub mod tcp;
pub mod theme;

pub use theme::Theme;

/// What the driver says about its source, shown in the bars.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceStatus {
    /// Where the data comes from: `live eth0+eth1`, `replay capture.jsonl`.
    pub source: String,
    /// Replay position and speed (`▶ 2x 00:12/01:30`), when replaying.
    pub position: Option<String>,
    /// A problem of the source worth showing (it stopped, it is behind).
    pub problem: Option<String>,
}

/// What a frame found out that the driver needs: how many rows the current list has (to clamp
/// the selection).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drawn {
    /// Rows in the current screen's filtered list.
    pub rows: usize,
}

/// Draws one whole frame.
pub fn render(
    frame: &mut Frame,
    app: &App,
    snap: &Snapshot,
    status: &SourceStatus,
    theme: &Theme,
) -> Drawn {
    let health = health::HealthModel::build(snap);
    let health_lines = health.footer_lines(frame.area().width);
    let [top, body, warn, bottom] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(0),
        Constraint::Length(health_lines.len().min(2) as u16),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    bar::render_top(frame, top, app, status, theme);
    let rows = match app.screen {
        Screen::Overview => {
            overview::OverviewModel::build(snap).render(frame, body, theme);
            0
        }
        Screen::Flows => flows::FlowsModel::build(snap, app).render(frame, body, app, theme),
        Screen::Tcp => tcp::TcpModel::build(snap, app)
            .from_source(SourceKind::of(&status.source))
            .render(frame, body, app, theme),
        Screen::Incidents => {
            incidents::IncidentsModel::build(snap, app).render(frame, body, app, theme)
        }
        Screen::Events => events::EventsModel::build(snap, app).render(frame, body, app, theme),
        Screen::Advice => {
            advice::render(frame, body, snap, app, theme);
            0
        }
    };
    health::render_footer(frame, warn, &health_lines, theme);
    bar::render_bottom(frame, bottom, app, status, theme);
    if app.help {
        help::render(frame, frame.area(), app, theme);
    }
    Drawn { rows }
}

/// The key of the selected row of the current screen (what Enter opens), if any.
pub fn selected_key(app: &App, snap: &Snapshot) -> Option<u64> {
    match app.screen {
        Screen::Overview | Screen::Events | Screen::Advice => None,
        Screen::Flows => flows::FlowsModel::build(snap, app).selected_key(app),
        Screen::Tcp => None,
        Screen::Incidents => incidents::IncidentsModel::build(snap, app).selected_key(app),
    }
}

/// A bordered panel with a styled title.
pub fn panel<'a>(title: impl Into<Line<'a>>, theme: &Theme) -> Block<'a> {
    Block::default()
        .borders(Borders::ALL)
        .border_style(theme.dim())
        .title(title.into().style(theme.title()))
}

/// A centred rectangle of at most `width`×`height` inside `area` (for pop-ups).
pub fn centered(area: Rect, width: u16, height: u16) -> Rect {
    let w = width.min(area.width);
    let h = height.min(area.height);
    Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    }
}

/// Case-insensitive substring match; an empty filter matches everything.
pub fn matches_filter(haystack: &str, filter: &str) -> bool {
    filter.is_empty() || haystack.to_lowercase().contains(&filter.to_lowercase())
}

/// What an empty list says: the filter that hides every row (`no match for filter /xy`), or
/// `nothing`, what to do when there is nothing at all; None when the list has rows.
pub fn empty_text(shown: usize, total: usize, filter: &str, nothing: &str) -> Option<String> {
    if shown > 0 {
        None
    } else if total > 0 {
        Some(format!(
            "no match for filter /{filter} among {total} (Esc clears the filter)"
        ))
    } else {
        Some(nothing.to_owned())
    }
}

/// Draws an empty list's text inside a bordered table `area`, under its header row.
pub fn render_empty(frame: &mut Frame, area: Rect, text: &str, theme: &Theme) {
    if area.height <= 3 || area.width <= 4 {
        return;
    }
    let inner = Rect {
        x: area.x + 2,
        y: area.y + 2,
        width: area.width - 4,
        height: area.height - 3,
    };
    frame.render_widget(
        Paragraph::new(Line::styled(text.to_owned(), theme.dim()))
            .wrap(ratatui::widgets::Wrap { trim: true }),
        inner,
    );
}

/// What the source is, for the empty states: live, a replay of packet captures (`replay
/// a.pcap + b.pcapng`, which hold no kernel events), or of a JSON Lines recording.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SourceKind {
    /// Live capture (or a lab run).
    #[default]
    Live,
    /// Replay of pcap/pcapng files.
    PacketReplay,
    /// Replay of a `capture --json` or UI recording.
    RecordingReplay,
}

impl SourceKind {
    /// The kind of the source named `source` in the top bar.
    pub fn of(source: &str) -> Self {
        match source.strip_prefix("replay ") {
            None => Self::Live,
            Some(files) if files.contains(".json") => Self::RecordingReplay,
            Some(_) => Self::PacketReplay,
        }
    }
}
