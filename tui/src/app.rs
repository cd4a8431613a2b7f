//! Pure UI state: which screen, selection, filters, sort orders, freeze, overlays. It holds no
//! terminal and no snapshot; `apply(Action)` is the only way it changes, so every key's effect is
//! testable without a screen. Requests the UI cannot carry out itself (reset the engine's
//! windows, pause a replay) are queued for the driver to take with [`App::take_requests`].

/// The screens, in tab order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Screen {
    /// Paths, redundancy, latency, amplification, capture health.
    Overview,
    /// KCP conversations, QUIC connections, TCP sockets.
    Flows,
    /// Retransmissions, RTO backoff ladder, cwnd over time, congestion-state changes.
    Tcp,
    /// Head-of-line incidents and outages, newest first.
    Incidents,
    /// The scrolling log of everything the JSON output carries.
    Events,
    /// The transport this link wants, from what was measured so far (`advise`).
    Advice,
}

impl Screen {
    /// Every screen in tab order.
    pub const ALL: [Screen; 6] = [
        Screen::Overview,
        Screen::Flows,
        Screen::Tcp,
        Screen::Incidents,
        Screen::Events,
        Screen::Advice,
    ];

    /// Position in the tab bar (0-based).
    pub fn index(self) -> usize {
        match self {
            Screen::Overview => 0,
            Screen::Flows => 1,
            Screen::Tcp => 2,
            Screen::Incidents => 3,
            Screen::Events => 4,
            Screen::Advice => 5,
        }
    }

    /// The tab title.
    pub fn title(self) -> &'static str {
        match self {
            Screen::Overview => "Overview",
            Screen::Flows => "Flows",
            Screen::Tcp => "TCP",
            Screen::Incidents => "Incidents",
            Screen::Events => "Events",
            Screen::Advice => "Advice",
        }
    }

    /// The sort orders a screen's list offers, in the order `s` cycles through them.
    pub fn sort_keys(self) -> &'static [SortKey] {
        match self {
            Screen::Overview => &[],
            Screen::Flows => &[
                SortKey::Packets,
                SortKey::Retransmits,
                SortKey::Latency,
                SortKey::Name,
            ],
            Screen::Tcp => &[SortKey::Retransmits, SortKey::Backoff, SortKey::Name],
            Screen::Incidents => &[SortKey::Newest, SortKey::Duration, SortKey::Held],
            Screen::Events => &[SortKey::Newest, SortKey::Oldest],
            Screen::Advice => &[],
        }
    }
}

/// A sort order offered by a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    /// Most packets/segments first.
    Packets,
    /// Most retransmissions first.
    Retransmits,
    /// Highest latency (srtt or P99) first.
    Latency,
    /// Alphabetical by flow name.
    Name,
    /// Highest RTO backoff level first.
    Backoff,
    /// Newest first.
    Newest,
    /// Oldest first.
    Oldest,
    /// Longest first.
    Duration,
    /// Most held messages/bytes first.
    Held,
}

impl SortKey {
    /// How the sort is named in the status line.
    pub fn label(self) -> &'static str {
        match self {
            SortKey::Packets => "packets",
            SortKey::Retransmits => "retransmits",
            SortKey::Latency => "latency",
            SortKey::Name => "name",
            SortKey::Backoff => "backoff",
            SortKey::Newest => "newest",
            SortKey::Oldest => "oldest",
            SortKey::Duration => "duration",
            SortKey::Held => "held",
        }
    }
}

/// Everything a key can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Leave the UI.
    Quit,
    /// Next screen (wraps).
    NextScreen,
    /// Previous screen (wraps).
    PrevScreen,
    /// Jump to a screen.
    GoTo(Screen),
    /// Selection up one row.
    Up,
    /// Selection down one row.
    Down,
    /// Selection up one page.
    PageUp,
    /// Selection down one page.
    PageDown,
    /// First row.
    Top,
    /// Last row.
    Bottom,
    /// Drill into the selected row; the driver resolves it to [`Action::Open`].
    Enter,
    /// Open the detail of the row with this key (incident id, flow index).
    Open(u64),
    /// Close the overlay or detail, or clear the filter.
    Back,
    /// Start typing a filter for the current list.
    StartFilter,
    /// A character typed into the filter.
    FilterChar(char),
    /// Delete the last filter character.
    FilterBackspace,
    /// Keep the typed filter and stop editing.
    FilterAccept,
    /// Drop the typed filter and stop editing.
    FilterCancel,
    /// Cycle the sort order of the current list.
    SortNext,
    /// Reverse the current sort order.
    SortReverse,
    /// Freeze or unfreeze the display (capture continues).
    ToggleFreeze,
    /// Ask the engine to reset its sliding windows.
    ResetWindows,
    /// Show or hide the key help.
    ToggleHelp,
    /// Replay: pause or resume.
    ReplayPause,
    /// Replay: double the speed.
    ReplayFaster,
    /// Replay: halve the speed.
    ReplaySlower,
    /// Replay: seek forward this many seconds of capture time.
    ReplaySeek(i32),
    /// Replay: back to the start.
    ReplayRestart,
}

/// What the UI asks its driver to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// Reset the engine's sliding windows.
    ResetWindows,
    /// Pause or resume a replay.
    ReplayPause,
    /// Multiply the replay speed by 2.
    ReplayFaster,
    /// Divide the replay speed by 2.
    ReplaySlower,
    /// Seek the replay by this many seconds (negative: back).
    ReplaySeek(i32),
    /// Restart the replay from the first record.
    ReplayRestart,
}

/// Per-screen list state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListState {
    /// Selected row in the filtered, sorted list (clamped when drawn).
    pub selected: usize,
    /// Case-insensitive substring filter; empty shows everything.
    pub filter: String,
    /// Index into [`Screen::sort_keys`].
    pub sort: usize,
    /// Reverse the sort.
    pub reversed: bool,
    /// The opened detail (incident id, flow key), if any.
    pub detail: Option<u64>,
}

/// Rows a page moves.
pub const PAGE: usize = 10;

/// The whole UI state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct App {
    /// The visible screen.
    pub screen: Screen,
    /// One list state per screen, indexed by [`Screen::index`].
    pub lists: [ListState; 6],
    /// Help overlay shown.
    pub help: bool,
    /// Display frozen: the driver keeps showing the snapshot taken when freezing.
    pub frozen: bool,
    /// The filter of the current screen is being typed.
    pub editing_filter: bool,
    /// The user asked to leave.
    pub quit: bool,
    /// Replay controls are offered (key help and status line).
    pub replay: bool,
    requests: Vec<Request>,
}

impl Default for App {
    fn default() -> Self {
        Self::new(false)
    }
}

impl App {
    /// A fresh UI on the Overview screen; `replay` enables the replay keys.
    pub fn new(replay: bool) -> Self {
        Self {
            screen: Screen::Overview,
            lists: Default::default(),
            help: false,
            frozen: false,
            editing_filter: false,
            quit: false,
            replay,
            requests: Vec::new(),
        }
    }

    /// The list state of the visible screen.
    pub fn list(&self) -> &ListState {
        &self.lists[self.screen.index()]
    }

    /// The list state of a screen.
    pub fn list_of(&self, screen: Screen) -> &ListState {
        &self.lists[screen.index()]
    }

    fn list_mut(&mut self) -> &mut ListState {
        &mut self.lists[self.screen.index()]
    }

    /// The current sort of a screen, if it has any.
    pub fn sort_of(&self, screen: Screen) -> Option<SortKey> {
        let keys = screen.sort_keys();
        keys.get(self.list_of(screen).sort % keys.len().max(1))
            .copied()
    }

    /// Takes the requests queued for the driver.
    pub fn take_requests(&mut self) -> Vec<Request> {
        std::mem::take(&mut self.requests)
    }

    /// Applies one action.
    pub fn apply(&mut self, action: Action) {
        match action {
            Action::Quit => self.quit = true,
            Action::NextScreen => self.switch((self.screen.index() + 1) % Screen::ALL.len()),
            Action::PrevScreen => {
                self.switch((self.screen.index() + Screen::ALL.len() - 1) % Screen::ALL.len());
            }
            Action::GoTo(screen) => self.switch(screen.index()),
            Action::Up => self.move_by(-1),
            Action::Down => self.move_by(1),
            Action::PageUp => self.move_by(-(PAGE as i64)),
            Action::PageDown => self.move_by(PAGE as i64),
            Action::Top => self.list_mut().selected = 0,
            Action::Bottom => self.list_mut().selected = usize::MAX,
            Action::Enter => {}
            Action::Open(key) => self.list_mut().detail = Some(key),
            Action::Back => {
                if self.help {
                    self.help = false;
                } else if self.list().detail.is_some() {
                    self.list_mut().detail = None;
                } else {
                    self.list_mut().filter.clear();
                }
            }
            Action::StartFilter => self.editing_filter = true,
            Action::FilterChar(c) => {
                let list = self.list_mut();
                list.filter.push(c);
                list.selected = 0;
            }
            Action::FilterBackspace => {
                self.list_mut().filter.pop();
            }
            Action::FilterAccept => self.editing_filter = false,
            Action::FilterCancel => {
                self.editing_filter = false;
                self.list_mut().filter.clear();
            }
            Action::SortNext => {
                let n = self.screen.sort_keys().len();
                if n > 0 {
                    let list = self.list_mut();
                    list.sort = (list.sort + 1) % n;
                    list.selected = 0;
                }
            }
            Action::SortReverse => {
                let list = self.list_mut();
                list.reversed = !list.reversed;
            }
            Action::ToggleFreeze => self.frozen = !self.frozen,
            Action::ResetWindows => self.requests.push(Request::ResetWindows),
            Action::ToggleHelp => self.help = !self.help,
            Action::ReplayPause => self.replay_request(Request::ReplayPause),
            Action::ReplayFaster => self.replay_request(Request::ReplayFaster),
            Action::ReplaySlower => self.replay_request(Request::ReplaySlower),
            Action::ReplaySeek(secs) => self.replay_request(Request::ReplaySeek(secs)),
            Action::ReplayRestart => self.replay_request(Request::ReplayRestart),
        }
    }

    fn replay_request(&mut self, request: Request) {
        if self.replay {
            self.requests.push(request);
        }
    }

    fn switch(&mut self, index: usize) {
        if let Some(screen) = Screen::ALL.get(index) {
            self.screen = *screen;
            self.editing_filter = false;
        }
    }

    fn move_by(&mut self, delta: i64) {
        let list = self.list_mut();
        // `Bottom` parks the selection at usize::MAX; views clamp it to the last row.
        let current = list.selected.min(u32::MAX as usize) as i64;
        list.selected = current.saturating_add(delta).max(0) as usize;
    }

    /// Clamps every selection to the row counts the views found (call after drawing so
    /// `Up` after `Bottom` moves from the real last row).
    pub fn clamp(&mut self, screen: Screen, rows: usize) {
        let list = &mut self.lists[screen.index()];
        list.selected = list.selected.min(rows.saturating_sub(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tab_wraps_both_ways() {
        let mut app = App::new(false);
        app.apply(Action::PrevScreen);
        assert_eq!(app.screen, Screen::Advice);
        app.apply(Action::NextScreen);
        assert_eq!(app.screen, Screen::Overview);
    }

    #[test]
    fn back_closes_help_then_detail_then_filter() {
        let mut app = App::new(false);
        app.apply(Action::GoTo(Screen::Incidents));
        app.apply(Action::FilterChar('x'));
        app.apply(Action::Open(7));
        app.apply(Action::ToggleHelp);
        app.apply(Action::Back);
        assert!(!app.help);
        assert_eq!(app.list().detail, Some(7));
        app.apply(Action::Back);
        assert_eq!(app.list().detail, None);
        assert_eq!(app.list().filter, "x");
        app.apply(Action::Back);
        assert_eq!(app.list().filter, "");
    }

    #[test]
    fn reset_and_replay_become_requests() {
        let mut app = App::new(false);
        app.apply(Action::ResetWindows);
        app.apply(Action::ReplayPause);
        assert_eq!(app.take_requests(), vec![Request::ResetWindows]);
        let mut replay = App::new(true);
        replay.apply(Action::ReplaySeek(-10));
        assert_eq!(replay.take_requests(), vec![Request::ReplaySeek(-10)]);
    }

    #[test]
    fn selection_never_goes_negative_and_clamps() {
        let mut app = App::new(false);
        app.apply(Action::Up);
        assert_eq!(app.list().selected, 0);
        app.apply(Action::Bottom);
        app.clamp(Screen::Overview, 4);
        app.apply(Action::Up);
        assert_eq!(app.list().selected, 2);
    }
}
