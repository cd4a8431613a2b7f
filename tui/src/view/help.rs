//! The `?` overlay: every key, generated from the key table in `input.rs`.
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, Paragraph};
use ratatui::Frame;

use super::{centered, panel, Theme};
use crate::app::App;
use crate::input::help_lines;

/// Draws the help overlay centred in `area`.
pub fn render(frame: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let entries = help_lines(app.replay);
    let key_width = entries
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0);
    let mut lines: Vec<Line> = entries
        .iter()
        .map(|(keys, text)| {
            Line::from(vec![
                Span::styled(format!(" {keys:<key_width$}  "), theme.title()),
                Span::raw(*text),
            ])
        })
        .collect();
    let text_width = lines.iter().map(Line::width).max().unwrap_or(0) as u16;
    let block = panel(" Keys (Esc or ? closes) ", theme);
    if lines.len() as u16 + 2 <= area.height {
        let popup = centered(area, text_width + 3, lines.len() as u16 + 2);
        frame.render_widget(Clear, popup);
        frame.render_widget(Paragraph::new(lines).block(block), popup);
        return;
    }
    // Too tall for the terminal: two columns.
    let half = lines.len().div_ceil(2);
    let right = lines.split_off(half);
    let col_width = lines
        .iter()
        .chain(&right)
        .map(Line::width)
        .max()
        .unwrap_or(0) as u16
        + 1;
    let popup = centered(area, col_width * 2 + 3, half as u16 + 2);
    frame.render_widget(Clear, popup);
    let inner = block.inner(popup);
    frame.render_widget(block, popup);
    let [a, b] =
        Layout::horizontal([Constraint::Length(col_width), Constraint::Min(0)]).areas(inner);
    frame.render_widget(Paragraph::new(lines), a);
    frame.render_widget(Paragraph::new(right), b);
}
