//! Table columns laid out by priority, as trippy and k9s do: the columns that name a row
//! (flow, socket, path label, ports) always get their full width, the free-text column (notes,
//! what) takes what is left and shrinks first, and the other figures are dropped one by one,
//! least important first, when the terminal is too narrow for all of them.
use ratatui::layout::Constraint;

/// How a column yields when space is short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Names the row: full width whatever the terminal (cut only if it alone is wider).
    Always,
    /// A figure: shown while it fits; higher numbers are dropped last.
    Rank(u8),
    /// Free text: the space left over, hidden below `min` characters.
    Rest {
        /// Narrowest useful width.
        min: u16,
    },
}

/// One column: its header, the widest cell, how it yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// Header text (with the sort marker, if any).
    pub header: String,
    /// Width of the widest cell or the header, whichever is wider.
    pub width: u16,
    /// How it yields.
    pub keep: Keep,
}

impl Column {
    /// A column whose width is that of its header and of `cells`.
    pub fn new<'a>(
        header: impl Into<String>,
        cells: impl Iterator<Item = &'a str>,
        keep: Keep,
    ) -> Self {
        let header = header.into();
        let widest = cells.map(|c| c.chars().count()).max().unwrap_or(0);
        let width = widest
            .max(header.chars().count())
            .min(usize::from(u16::MAX)) as u16;
        Self {
            header,
            width,
            keep,
        }
    }
}

/// The columns of a table from its `(header, keep)` specs: column `i`'s header as
/// `header(i, text)` gives it (a sort marker added), its width from the cells `cells(i)` yields.
pub fn columns_of<'a, I: Iterator<Item = &'a str>>(
    specs: &[(&str, Keep)],
    mut header: impl FnMut(usize, &str) -> String,
    mut cells: impl FnMut(usize) -> I,
) -> Vec<Column> {
    specs
        .iter()
        .enumerate()
        .map(|(i, (h, keep))| Column::new(header(i, h), cells(i), *keep))
        .collect()
}

/// The part of a table that [`layout`] keeps: the shown columns' headers and widths, and
/// which columns they are (to pick a row's cells).
pub struct Shown {
    /// Headers of the shown columns.
    pub header: Vec<String>,
    /// Widths of the shown columns.
    pub widths: Vec<Constraint>,
    mask: Vec<bool>,
}

impl Shown {
    /// The columns of `columns` shown in `available` characters with `spacing` between them.
    pub fn of(columns: &[Column], available: u16, spacing: u16) -> Self {
        let laid = layout(columns, available, spacing);
        let mask: Vec<bool> = laid.iter().map(Option::is_some).collect();
        Self {
            header: columns
                .iter()
                .zip(&mask)
                .filter(|(_, s)| **s)
                .map(|(c, _)| c.header.clone())
                .collect(),
            widths: laid.into_iter().flatten().collect(),
            mask,
        }
    }

    /// A row's cells in the shown columns.
    pub fn cells<T>(&self, row: impl IntoIterator<Item = T>) -> Vec<T> {
        row.into_iter()
            .zip(&self.mask)
            .filter(|(_, s)| **s)
            .map(|(c, _)| c)
            .collect()
    }
}

/// The columns shown in `available` characters with `spacing` between columns: for each
/// column, in order, its constraint, or None when it is dropped.
pub fn layout(columns: &[Column], available: u16, spacing: u16) -> Vec<Option<Constraint>> {
    let mut shown: Vec<bool> = columns.iter().map(|c| c.keep == Keep::Always).collect();
    let cost = |shown: &[bool]| -> u32 {
        let (mut w, mut n) = (0u32, 0u32);
        for (c, s) in columns.iter().zip(shown) {
            if *s {
                w += u32::from(c.width);
                n += 1;
            }
        }
        w + u32::from(spacing) * n.saturating_sub(1)
    };
    let mut ranked: Vec<(usize, u8)> = columns
        .iter()
        .enumerate()
        .filter_map(|(i, c)| match c.keep {
            Keep::Rank(r) => Some((i, r)),
            _ => None,
        })
        .collect();
    // Most important first; among equals, the leftmost.
    ranked.sort_by_key(|(i, r)| (std::cmp::Reverse(*r), *i));
    for (i, _) in ranked {
        shown[i] = true;
        if cost(&shown) > u32::from(available) {
            shown[i] = false;
        }
    }
    let used = cost(&shown);
    let rest = columns
        .iter()
        .position(|c| matches!(c.keep, Keep::Rest { .. }));
    let mut rest_width = 0;
    if let Some(r) = rest {
        let room = u32::from(available).saturating_sub(used + u32::from(spacing));
        if let Keep::Rest { min } = columns[r].keep {
            if room >= u32::from(min) {
                shown[r] = true;
                rest_width = room as u16;
            }
        }
    }
    columns
        .iter()
        .zip(&shown)
        .map(|(c, s)| {
            s.then(|| match c.keep {
                Keep::Rest { .. } => Constraint::Min(rest_width),
                _ => Constraint::Length(c.width),
            })
        })
        .collect()
}

/// `header ▼`/`header ▲` on the column the rows are sorted by: `descending` is the sort's
/// own direction (most first), flipped when the user reversed it.
pub fn sorted_header(header: &str, sorted: bool, descending: bool) -> String {
    match (sorted, descending) {
        (false, _) => header.to_owned(),
        (true, true) => format!("{header}▼"),
        (true, false) => format!("{header}▲"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(header: &str, width: u16, keep: Keep) -> Column {
        Column {
            header: header.to_owned(),
            width,
            keep,
        }
    }

    #[test]
    fn names_stay_whole_notes_shrink_first_then_figures_go_least_important_first() {
        let cols = [
            col("Flow", 30, Keep::Always),
            col("Path", 9, Keep::Always),
            col("Retx", 5, Keep::Rank(9)),
            col("ssthr", 5, Keep::Rank(1)),
            col("Notes", 20, Keep::Rest { min: 8 }),
        ];
        let wide = layout(&cols, 100, 1);
        assert_eq!(wide[0], Some(Constraint::Length(30)));
        assert_eq!(wide[4], Some(Constraint::Min(100 - 30 - 9 - 5 - 5 - 4)));
        // 30+9+5+5 and 3 spaces = 52: no room for 8 characters of notes.
        let narrow = layout(&cols, 56, 1);
        assert_eq!(narrow[4], None);
        assert_eq!(narrow[3], Some(Constraint::Length(5)));
        let narrower = layout(&cols, 48, 1);
        assert_eq!(
            narrower,
            vec![
                Some(Constraint::Length(30)),
                Some(Constraint::Length(9)),
                Some(Constraint::Length(5)),
                None,
                None
            ]
        );
    }

    #[test]
    fn the_sorted_column_carries_its_direction() {
        assert_eq!(sorted_header("Retx", true, true), "Retx▼");
        assert_eq!(sorted_header("Flow", true, false), "Flow▲");
        assert_eq!(sorted_header("Pkts", false, true), "Pkts");
    }
}
