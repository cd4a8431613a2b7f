//! Styles. Only the 16 ANSI colours are used (they work on every terminal that has colour), and
//! with `NO_COLOR` set every style falls back to bold/reverse/dim, so nothing depends on colour.
use ratatui::style::{Color, Modifier, Style};

/// The styles the views use, colour or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Theme {
    /// Colours allowed.
    pub color: bool,
}

impl Theme {
    /// Colour unless the `NO_COLOR` environment variable is set to anything non-empty
    /// (<https://no-color.org>).
    pub fn from_env() -> Self {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Self { color: !no_color }
    }

    fn pick(&self, color: Color, fallback: Modifier) -> Style {
        if self.color {
            Style::new().fg(color)
        } else {
            Style::new().add_modifier(fallback)
        }
    }

    /// Good news: path up, redundancy confirmed.
    pub fn ok(&self) -> Style {
        self.pick(Color::Green, Modifier::empty())
    }

    /// Worth a look.
    pub fn warn(&self) -> Style {
        self.pick(Color::Yellow, Modifier::BOLD)
    }

    /// Outage, incident, drops.
    pub fn alert(&self) -> Style {
        self.pick(Color::Red, Modifier::BOLD | Modifier::REVERSED)
    }

    /// Secondary text.
    pub fn dim(&self) -> Style {
        self.pick(Color::DarkGray, Modifier::DIM)
    }

    /// Panel titles and headers.
    pub fn title(&self) -> Style {
        if self.color {
            Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD)
        } else {
            Style::new().add_modifier(Modifier::BOLD)
        }
    }

    /// The selected row.
    pub fn selected(&self) -> Style {
        Style::new().add_modifier(Modifier::REVERSED)
    }

    /// The active tab.
    pub fn tab(&self) -> Style {
        if self.color {
            Style::new()
                .fg(Color::Black)
                .bg(Color::Cyan)
                .add_modifier(Modifier::BOLD)
        } else {
            Style::new().add_modifier(Modifier::REVERSED | Modifier::BOLD)
        }
    }

    /// The colour of the n-th path (and of the combination, `None`).
    pub fn series(&self, path: Option<usize>) -> Style {
        if !self.color {
            return Style::new();
        }
        let color = match path {
            None => Color::White,
            Some(i) => [Color::Cyan, Color::Magenta, Color::Yellow, Color::Blue][i % 4],
        };
        Style::new().fg(color)
    }
}
