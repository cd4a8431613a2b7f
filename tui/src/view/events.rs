//! The Events screen: a scrolling, filterable log of what happened (the same things the JSON
//! output carries), newest first by default.
use ratatui::layout::{Constraint, Rect};
use ratatui::widgets::{Row, Table, TableState};
use ratatui::Frame;
use tboxscope_engine::snapshot::{EventLine, Severity, Snapshot};

use super::{format, matches_filter, panel, Theme};
use crate::app::{App, Screen, SortKey};

/// The Events view-model.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EventsModel {
    /// Events after filter and sort.
    pub events: Vec<EventLine>,
    /// Events before filtering.
    pub total: usize,
}

/// How an event reads: its severity, except that a path coming back after an outage is good
/// news (`ok`, drawn in the ok colour), though the engine files it as a warning.
fn severity_of(e: &EventLine) -> &'static str {
    if is_recovery(e) {
        return "ok";
    }
    match e.severity {
        Severity::Info => "info",
        Severity::Warn => "warn",
        Severity::Alert => "ALERT",
    }
}

/// `path eth1 back after 5.000 s of outage`.
pub fn is_recovery(e: &EventLine) -> bool {
    e.text.starts_with("path ") && e.text.contains(" back after ")
}

impl EventsModel {
    /// Builds the model.
    pub fn build(snap: &Snapshot, app: &App) -> Self {
        let list = app.list_of(Screen::Events);
        let mut events: Vec<EventLine> = snap
            .events
            .iter()
            .filter(|e| matches_filter(&format!("{} {}", severity_of(e), e.text), &list.filter))
            .cloned()
            .collect();
        events.sort_by_key(|e| std::cmp::Reverse(e.ts_ns));
        if (app.sort_of(Screen::Events) == Some(SortKey::Oldest)) != list.reversed {
            events.reverse();
        }
        Self {
            events,
            total: snap.events.len(),
        }
    }

    /// Draws the log; returns the row count.
    pub fn render(&self, frame: &mut Frame, area: Rect, app: &App, theme: &Theme) -> usize {
        let rows: Vec<Row> = self
            .events
            .iter()
            .map(|e| {
                let style = match e.severity {
                    _ if is_recovery(e) => theme.ok(),
                    Severity::Info => ratatui::style::Style::new(),
                    Severity::Warn => theme.warn(),
                    Severity::Alert => theme.alert(),
                };
                Row::new(vec![
                    format::clock(e.ts_ns),
                    severity_of(e).to_owned(),
                    e.text.clone(),
                ])
                .style(style)
            })
            .collect();
        let title = if self.events.len() == self.total {
            format!(" Events ({}) ", self.total)
        } else {
            format!(" Events ({} of {}) ", self.events.len(), self.total)
        };
        let table = Table::new(
            rows,
            [
                Constraint::Length(12),
                Constraint::Length(5),
                Constraint::Min(20),
            ],
        )
        .header(Row::new(vec!["Time", "Sev", "What"]).style(theme.title()))
        .row_highlight_style(theme.selected())
        .block(panel(title, theme));
        let mut state = TableState::default();
        if !self.events.is_empty() {
            state.select(Some(
                app.list_of(Screen::Events)
                    .selected
                    .min(self.events.len() - 1),
            ));
        }
        frame.render_stateful_widget(table, area, &mut state);
        if let Some(text) = super::empty_text(
            self.events.len(),
            self.total,
            &app.list_of(Screen::Events).filter,
            "no event yet: paths found, outages, incidents and retransmissions are logged here \
             as they happen",
        ) {
            super::render_empty(frame, area, &text, theme);
        }
        self.events.len()
    }
}
