//! The Incidents screen: HOL incidents and path outages, newest first; Enter opens the timeline
//! of one: the lost segment, the retransmissions, the held messages, the release.
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, Paragraph, Row, Table, TableState, Wrap};
use ratatui::Frame;
use tboxscope_engine::record::{HolIncident, HolProtocol, OutageRecord, Recovery};
use tboxscope_engine::snapshot::Snapshot;

use super::columns::{self, Keep};
use super::{format, matches_filter, panel, Theme};
use crate::app::{App, Screen, SortKey};

/// One incident or outage.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// A head-of-line incident.
    Hol(HolIncident),
    /// A path outage.
    Outage(OutageRecord),
}

impl Item {
    /// Stable key: ids are per kind, so the kind goes into the low bit.
    pub fn key(&self) -> u64 {
        match self {
            Item::Hol(h) => h.id.wrapping_mul(2),
            Item::Outage(o) => o.id.wrapping_mul(2).wrapping_add(1),
        }
    }

    fn start_ns(&self) -> u64 {
        match self {
            Item::Hol(h) => h.start_ns,
            Item::Outage(o) => o.start_ns,
        }
    }

    fn duration_ns(&self) -> u64 {
        match self {
            Item::Hol(h) => h.stall_ns,
            Item::Outage(o) => o.duration_ns,
        }
    }

    fn held(&self) -> u64 {
        match self {
            Item::Hol(h) => h.messages_held,
            Item::Outage(o) => o.carried_by_others.saturating_add(o.lost),
        }
    }

    fn open(&self) -> bool {
        match self {
            Item::Hol(h) => h.end_ns.is_none(),
            Item::Outage(o) => o.end_ns.is_none(),
        }
    }

    /// Kind column.
    pub fn kind(&self) -> String {
        match self {
            Item::Hol(h) => format!("HOL {}", protocol(h.protocol)),
            Item::Outage(_) => "OUTAGE".to_owned(),
        }
    }

    /// Flow or path column; a flow without the protocol its name starts with, which the kind
    /// already says (`HOL kcp  conv 7`, not `HOL kcp  kcp conv 7`).
    pub fn subject(&self) -> String {
        match self {
            Item::Hol(h) => {
                let flow = h
                    .flow
                    .strip_prefix(protocol(h.protocol))
                    .and_then(|rest| rest.strip_prefix(' '))
                    .unwrap_or(&h.flow);
                match h.stream {
                    Some(stream) => format!("{flow} stream {stream}"),
                    None => flow.to_owned(),
                }
            }
            Item::Outage(o) => format!("path {}", o.path),
        }
    }

    /// What column.
    pub fn what(&self) -> String {
        match self {
            Item::Hol(h) => {
                let mut s = format!("missing {}, {}", h.missing, recovery(h.recovery));
                if h.backoff > 0 {
                    s.push_str(&format!(" (backoff {})", h.backoff));
                }
                s
            }
            Item::Outage(o) => format!(
                "{}; {} carried by other paths, {} lost",
                o.evidence, o.carried_by_others, o.lost
            ),
        }
    }
}

fn protocol(p: HolProtocol) -> &'static str {
    p.name()
}

fn recovery(r: Recovery) -> &'static str {
    match r {
        Recovery::Unknown => "recovery not known",
        _ => r.describe(),
    }
}

/// The Incidents view-model.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct IncidentsModel {
    /// Items after filter and sort (newest first by default).
    pub items: Vec<Item>,
    /// Items before filtering.
    pub total: usize,
    /// Totals ever opened (history is bounded).
    pub totals: (u64, u64),
}

impl IncidentsModel {
    /// Builds the model.
    pub fn build(snap: &Snapshot, app: &App) -> Self {
        let mut items: Vec<Item> = snap
            .incidents
            .iter()
            .cloned()
            .map(Item::Hol)
            .chain(snap.outages.iter().cloned().map(Item::Outage))
            .collect();
        let total = items.len();
        let list = app.list_of(Screen::Incidents);
        items.retain(|i| {
            matches_filter(
                &format!("{} {} {}", i.kind(), i.subject(), i.what()),
                &list.filter,
            )
        });
        match app.sort_of(Screen::Incidents) {
            Some(SortKey::Duration) => items.sort_by_key(|i| std::cmp::Reverse(i.duration_ns())),
            Some(SortKey::Held) => items.sort_by_key(|i| std::cmp::Reverse(i.held())),
            _ => items.sort_by_key(|i| std::cmp::Reverse((i.start_ns(), i.key()))),
        }
        if list.reversed {
            items.reverse();
        }
        Self {
            items,
            total,
            totals: (snap.incidents_total, snap.outages_total),
        }
    }

    /// Key of the selected row.
    pub fn selected_key(&self, app: &App) -> Option<u64> {
        let n = self.items.len();
        let selected = app
            .list_of(Screen::Incidents)
            .selected
            .min(n.checked_sub(1)?);
        self.items.get(selected).map(Item::key)
    }

    /// Draws the list, or the timeline when one is open; returns the row count.
    pub fn render(&self, frame: &mut Frame, area: Rect, app: &App, theme: &Theme) -> usize {
        let list = app.list_of(Screen::Incidents);
        let rows: Vec<_> = self
            .items
            .iter()
            .map(|i| {
                let style = if i.open() {
                    theme.alert()
                } else if matches!(i, Item::Outage(_)) {
                    theme.warn()
                } else {
                    ratatui::style::Style::new()
                };
                let duration = format::nanos(i.duration_ns()) + if i.open() { " …" } else { "" };
                (
                    [
                        format::clock(i.start_ns()),
                        i.kind(),
                        i.subject(),
                        duration,
                        i.held().to_string(),
                        i.what(),
                    ],
                    style,
                )
            })
            .collect();
        // Columns by priority: kind and flow/path whole, the description shrinks first.
        let sorted_col = match app.sort_of(Screen::Incidents) {
            Some(SortKey::Duration) => 3,
            Some(SortKey::Held) => 4,
            _ => 0,
        };
        let specs = [
            ("Start", Keep::Rank(5)),
            ("Kind", Keep::Always),
            ("Flow / path", Keep::Always),
            ("Duration", Keep::Rank(9)),
            ("Held", Keep::Rank(4)),
            ("What", Keep::Rest { min: 12 }),
        ];
        let columns = columns::columns_of(
            &specs,
            |i, h| columns::sorted_header(h, i == sorted_col, !list.reversed),
            |i| rows.iter().map(move |(r, _)| r[i].as_str()),
        );
        let shown = columns::Shown::of(&columns, area.width.saturating_sub(2), 1);
        let rows: Vec<Row> = rows
            .into_iter()
            .map(|(cells, style)| Row::new(shown.cells(cells)).style(style))
            .collect();
        let title = format!(
            " Incidents: {} HOL, {} outages ever{} ",
            self.totals.0,
            self.totals.1,
            if self.items.len() < self.total {
                format!(" · {} of {} shown", self.items.len(), self.total)
            } else {
                String::new()
            }
        );
        let table = Table::new(rows, shown.widths)
            .header(Row::new(shown.header).style(theme.title()))
            .row_highlight_style(theme.selected())
            .block(panel(title, theme));
        let mut state = TableState::default();
        if !self.items.is_empty() {
            state.select(Some(list.selected.min(self.items.len() - 1)));
        }
        frame.render_stateful_widget(table, area, &mut state);
        if let Some(open) = list.detail {
            if let Some(item) = self.items.iter().find(|i| i.key() == open) {
                let popup = Rect {
                    x: area.x + 1,
                    y: area.y + 1,
                    width: area.width.saturating_sub(2),
                    height: area.height.saturating_sub(2),
                };
                frame.render_widget(Clear, popup);
                render_timeline(frame, popup, item, theme);
            }
        }
        if let Some(text) = super::empty_text(
            self.items.len(),
            self.total,
            &list.filter,
            "no head-of-line incident or outage so far: a gap a retransmission has to fill, \
             or a path going silent, appears here",
        ) {
            super::render_empty(frame, area, &text, theme);
        }
        self.items.len()
    }
}

/// One event on the timeline: offset from the start, path, what.
pub fn timeline(item: &Item) -> Vec<(u64, String, String)> {
    match item {
        Item::Hol(h) => {
            let mut events: Vec<(u64, String, String)> = h
                .evidence
                .iter()
                .map(|e| (e.ts_ns, e.path.clone(), e.what.clone()))
                .collect();
            if events.first().is_none_or(|e| e.0 > h.start_ns) {
                events.insert(
                    0,
                    (
                        h.start_ns,
                        String::new(),
                        format!("gap opens: {} missing", h.missing),
                    ),
                );
            }
            match h.end_ns {
                Some(end) => events.push((
                    end,
                    String::new(),
                    format!(
                        "released: {} messages / {} held behind the gap",
                        h.messages_held,
                        format::bytes(h.bytes_held as f64)
                    ),
                )),
                None => events.push((
                    h.start_ns.saturating_add(h.stall_ns),
                    String::new(),
                    "still open: data waiting behind the gap".to_owned(),
                )),
            }
            events
        }
        Item::Outage(o) => {
            let mut events = vec![(
                o.start_ns,
                o.path.clone(),
                "last sign of life; silence begins".to_owned(),
            )];
            let end = o.end_ns.unwrap_or(o.start_ns.saturating_add(o.duration_ns));
            events.push((
                end,
                o.path.clone(),
                if o.end_ns.is_some() {
                    format!(
                        "path back: {} messages carried by other paths, {} lost",
                        o.carried_by_others, o.lost
                    )
                } else {
                    "still down".to_owned()
                },
            ));
            events
        }
    }
}

fn render_timeline(frame: &mut Frame, area: Rect, item: &Item, theme: &Theme) {
    let block = panel(
        format!(" {} {} — timeline (Esc back) ", item.kind(), item.subject()),
        theme,
    );
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let mut header = vec![Line::styled(item.what(), theme.title())];
    match item {
        Item::Hol(h) => {
            header.push(Line::raw(format!(
                "stall {} · retransmissions: {} fast, {} timeout · held {} msgs / {}",
                format::nanos(h.stall_ns),
                h.fast_retransmits,
                h.timeout_retransmits,
                h.messages_held,
                format::bytes(h.bytes_held as f64)
            )));
            if !h.streams_not_held.is_empty() {
                let streams: Vec<String> =
                    h.streams_not_held.iter().map(ToString::to_string).collect();
                header.push(Line::styled(
                    format!("streams not held (kept delivering): {}", streams.join(", ")),
                    theme.ok(),
                ));
            }
        }
        Item::Outage(o) => header.push(Line::raw(format!(
            "duration {} · detected by: {}",
            format::nanos(o.duration_ns),
            o.evidence
        ))),
    }
    let events = timeline(item);
    let start = events.first().map_or(0, |e| e.0);
    let end = events.last().map_or(start, |e| e.0).max(start + 1);
    // A one-line time axis with a marker per event.
    let width = u64::from(inner.width.saturating_sub(2).max(2));
    let mut axis: Vec<char> = vec!['─'; width as usize];
    for (ts, _, _) in &events {
        let pos = ((ts - start) * (width - 1) / (end - start)) as usize;
        if let Some(c) = axis.get_mut(pos) {
            *c = '●';
        }
    }
    header.push(Line::from(vec![
        Span::raw("├"),
        Span::styled(axis.into_iter().collect::<String>(), theme.warn()),
        Span::raw("┤"),
    ]));
    let header_height = header.len() as u16;
    let [top, bottom] =
        Layout::vertical([Constraint::Length(header_height), Constraint::Min(0)]).areas(inner);
    frame.render_widget(Paragraph::new(header).wrap(Wrap { trim: false }), top);
    let lines: Vec<Line> = events
        .iter()
        .map(|(ts, path, what)| {
            Line::from(vec![
                Span::styled(format!("{:>9} ", format::offset(*ts, start)), theme.title()),
                Span::styled(format!("{} ", format::clock(*ts)), theme.dim()),
                Span::styled(format!("{path:<6} "), theme.dim()),
                // A path coming back is good news.
                if what.starts_with("path back") {
                    Span::styled(what.clone(), theme.ok())
                } else {
                    Span::raw(what.clone())
                },
            ])
        })
        .collect();
    frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }), bottom);
}
