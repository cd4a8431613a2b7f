//! The top bar (tabs, freeze marker, source) and the bottom bar (key hints, filter prompt,
//! replay position).
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use super::{SourceStatus, Theme};
use crate::app::{App, Screen};

/// Draws the tab bar.
pub fn render_top(frame: &mut Frame, area: Rect, app: &App, status: &SourceStatus, theme: &Theme) {
    let mut spans = Vec::new();
    for screen in Screen::ALL {
        // One space between tabs: six tabs and a replay's source fit in 80 columns.
        let text = format!(" {} {}", screen.index() + 1, screen.title());
        let style = if screen == app.screen {
            theme.tab()
        } else {
            theme.dim()
        };
        spans.push(Span::styled(text, style));
    }
    let mut right = Vec::new();
    if app.frozen {
        right.push(Span::styled(" FROZEN ", theme.alert()));
        right.push(Span::raw(" "));
    }
    right.push(Span::styled(status.source.clone(), theme.dim()));
    let used: usize = spans.iter().map(Span::width).sum();
    let right_width: usize = right.iter().map(Span::width).sum();
    let width = area.width as usize;
    if used + right_width < width {
        spans.push(Span::raw(" ".repeat(width - used - right_width)));
        spans.extend(right);
    } else if app.frozen {
        // Too narrow for the source: keep at least the freeze marker visible.
        spans.push(Span::styled(" FROZEN", theme.alert()));
    }
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}

/// Draws the bottom bar.
pub fn render_bottom(
    frame: &mut Frame,
    area: Rect,
    app: &App,
    status: &SourceStatus,
    theme: &Theme,
) {
    let mut spans = Vec::new();
    let list = app.list();
    if app.editing_filter {
        spans.push(Span::styled(" filter: ", theme.title()));
        spans.push(Span::raw(format!("{}▏", list.filter)));
        spans.push(Span::styled("  Enter keep · Esc drop", theme.dim()));
    } else {
        // The state of the list first (filter, sort), so that it is never cut; the key hints
        // take what is left.
        if !list.filter.is_empty() {
            spans.push(Span::styled(format!(" [/{}]", list.filter), theme.warn()));
        }
        if let Some(sort) = app.sort_of(app.screen) {
            // The direction is the ▲/▼ on the sorted column's header.
            let reversed = if list.reversed { ", reversed" } else { "" };
            spans.push(Span::styled(
                format!(" sort: {}{reversed} ·", sort.label()),
                theme.title(),
            ));
        }
        let mut hints = String::from(
            " ? help · q quit · Tab screens · / filter · s sort · Space freeze · r reset",
        );
        if app.replay {
            hints.push_str(" · p play/pause · +/- speed · ←/→ seek");
        }
        spans.push(Span::styled(hints, theme.dim()));
    }
    let mut right = Vec::new();
    if let Some(problem) = &status.problem {
        right.push(Span::styled(format!(" {problem} "), theme.alert()));
    }
    if let Some(position) = &status.position {
        right.push(Span::styled(format!(" {position} "), theme.title()));
    }
    let right_width: usize = right.iter().map(Span::width).sum();
    let width = area.width as usize;
    // The right part (position, problems) wins over the hints when space is short.
    let left_room = width.saturating_sub(right_width);
    let mut left = Vec::new();
    let mut used = 0;
    for span in spans {
        let w = span.width();
        if used + w <= left_room {
            used += w;
            left.push(span);
        } else {
            let room = left_room - used;
            let text = super::format::fit(&span.content, room);
            used += text.chars().count();
            left.push(Span::styled(text, span.style));
            break;
        }
    }
    left.push(Span::raw(" ".repeat(left_room - used)));
    left.extend(right);
    frame.render_widget(Paragraph::new(Line::from(left)), area);
}
