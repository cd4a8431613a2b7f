//! The Advice screen: the transport this link wants (`tboxscope advise`), remade from what the
//! engine measured so far every few seconds of capture, as `advise` prints it; ↑/↓ scroll.
use ratatui::layout::Rect;
use ratatui::text::Line;
use ratatui::widgets::{Paragraph, Wrap};
use ratatui::Frame;
use tboxscope_engine::advice;
use tboxscope_engine::snapshot::Snapshot;

use super::{panel, Theme};
use crate::app::{App, Screen};

/// Draws the advice, or what it still waits for, from the selected line on.
pub fn render(frame: &mut Frame, area: Rect, snap: &Snapshot, app: &App, theme: &Theme) {
    let lines: Vec<Line> = match &snap.advice {
        Some(a) => advice::render(a)
            .lines()
            .map(|l| Line::from(l.to_owned()))
            .collect(),
        None => vec![
            Line::from("No advice yet: it needs messages whose delay was measured on a path"),
            Line::from("(both ends of a path captured, or the T-Box's ACKs), and is remade"),
            Line::from(format!(
                "every {} s of capture.",
                advice::ADVICE_EVERY_NS / 1_000_000_000
            )),
        ],
    };
    // Scrolled by the list's selection, kept within the text.
    let top = app
        .list_of(Screen::Advice)
        .selected
        .min(lines.len().saturating_sub(1));
    let p = Paragraph::new(lines)
        .scroll((u16::try_from(top).unwrap_or(u16::MAX), 0))
        .block(panel("Advice: which transport this link wants", theme))
        .wrap(Wrap { trim: false });
    frame.render_widget(p, area);
}
