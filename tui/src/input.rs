//! Keys → actions, as a table. The help overlay is generated from the same table, so it lists
//! every key the UI understands and nothing else.
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use crate::app::{Action, Screen};

/// One key: a code and the modifiers that must be held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// The key.
    pub code: KeyCode,
    /// Ctrl/Alt required (Shift is folded into the character).
    pub ctrl: bool,
}

const fn k(c: char) -> Key {
    Key {
        code: KeyCode::Char(c),
        ctrl: false,
    }
}

const fn code(code: KeyCode) -> Key {
    Key { code, ctrl: false }
}

const fn ctrl(c: char) -> Key {
    Key {
        code: KeyCode::Char(c),
        ctrl: true,
    }
}

/// A row of the key table: keys, what they do, the help text.
#[derive(Debug, Clone, Copy)]
pub struct Binding {
    /// The keys bound to the action.
    pub keys: &'static [Key],
    /// The action.
    pub action: Action,
    /// One line of help.
    pub help: &'static str,
    /// Only offered while replaying a file.
    pub replay_only: bool,
}

const fn bind(keys: &'static [Key], action: Action, help: &'static str) -> Binding {
    Binding {
        keys,
        action,
        help,
        replay_only: false,
    }
}

const fn replay(keys: &'static [Key], action: Action, help: &'static str) -> Binding {
    Binding {
        keys,
        action,
        help,
        replay_only: true,
    }
}

/// The key table of normal mode.
pub const BINDINGS: &[Binding] = &[
    bind(&[k('?')], Action::ToggleHelp, "show/hide this help"),
    bind(&[k('q'), ctrl('c')], Action::Quit, "quit"),
    bind(&[code(KeyCode::Tab)], Action::NextScreen, "next screen"),
    bind(
        &[code(KeyCode::BackTab)],
        Action::PrevScreen,
        "previous screen",
    ),
    bind(&[k('1')], Action::GoTo(Screen::Overview), "Overview screen"),
    bind(&[k('2')], Action::GoTo(Screen::Flows), "Flows screen"),
    bind(&[k('3')], Action::GoTo(Screen::Tcp), "TCP screen"),
    bind(
        &[k('4')],
        Action::GoTo(Screen::Incidents),
        "Incidents screen",
    ),
    bind(&[k('5')], Action::GoTo(Screen::Events), "Events screen"),
    bind(&[k('6')], Action::GoTo(Screen::Advice), "Advice screen"),
    bind(&[code(KeyCode::Up), k('k')], Action::Up, "move up"),
    bind(&[code(KeyCode::Down), k('j')], Action::Down, "move down"),
    bind(&[code(KeyCode::PageUp)], Action::PageUp, "page up"),
    bind(&[code(KeyCode::PageDown)], Action::PageDown, "page down"),
    bind(&[code(KeyCode::Home), k('g')], Action::Top, "first row"),
    bind(&[code(KeyCode::End), k('G')], Action::Bottom, "last row"),
    bind(
        &[code(KeyCode::Enter)],
        Action::Enter,
        "open incident/flow detail",
    ),
    bind(
        &[code(KeyCode::Esc)],
        Action::Back,
        "back: close, clear filter",
    ),
    bind(&[k('/')], Action::StartFilter, "filter the list"),
    bind(&[k('s')], Action::SortNext, "next sort order"),
    bind(&[k('S')], Action::SortReverse, "reverse the sort order"),
    bind(&[k(' ')], Action::ToggleFreeze, "freeze/unfreeze display"),
    bind(&[k('r')], Action::ResetWindows, "reset the sliding windows"),
    replay(&[k('p')], Action::ReplayPause, "replay: play/pause"),
    replay(
        &[k('+'), k('=')],
        Action::ReplayFaster,
        "replay: faster (x2)",
    ),
    replay(&[k('-')], Action::ReplaySlower, "replay: slower (/2)"),
    replay(
        &[code(KeyCode::Right), k('l')],
        Action::ReplaySeek(10),
        "replay: seek +10 s",
    ),
    replay(
        &[code(KeyCode::Left), k('h')],
        Action::ReplaySeek(-10),
        "replay: seek -10 s",
    ),
    replay(&[k('0')], Action::ReplayRestart, "replay: play from start"),
];

/// Keys while typing a filter (other printable characters are typed into it).
pub const FILTER_BINDINGS: &[Binding] = &[
    bind(
        &[code(KeyCode::Enter)],
        Action::FilterAccept,
        "filter: keep it",
    ),
    bind(
        &[code(KeyCode::Esc)],
        Action::FilterCancel,
        "filter: drop it",
    ),
    bind(
        &[code(KeyCode::Backspace)],
        Action::FilterBackspace,
        "filter: delete a char",
    ),
    bind(&[ctrl('c')], Action::Quit, "quit"),
];

fn matches(key: &Key, event: &KeyEvent) -> bool {
    let ctrl = event.modifiers.contains(KeyModifiers::CONTROL);
    if key.ctrl != ctrl {
        return false;
    }
    match (key.code, event.code) {
        // Terminals differ in reporting Shift with characters; compare the character only.
        (KeyCode::Char(a), KeyCode::Char(b)) => a == b,
        (a, b) => a == b,
    }
}

/// The action for a key press; `None` for releases, repeats of nothing, and unbound keys.
/// `filtering`: a filter is being typed; `replay`: replay keys are live.
pub fn action_for(event: &KeyEvent, filtering: bool, replay: bool) -> Option<Action> {
    if event.kind == KeyEventKind::Release {
        return None;
    }
    if filtering {
        let bound = FILTER_BINDINGS
            .iter()
            .find(|b| b.keys.iter().any(|k| matches(k, event)))
            .map(|b| b.action);
        return bound.or(match event.code {
            KeyCode::Char(c) if !event.modifiers.contains(KeyModifiers::CONTROL) => {
                Some(Action::FilterChar(c))
            }
            _ => None,
        });
    }
    BINDINGS
        .iter()
        .filter(|b| replay || !b.replay_only)
        .find(|b| b.keys.iter().any(|k| matches(k, event)))
        .map(|b| b.action)
}

/// How a key is written in the help overlay.
pub fn key_label(key: &Key) -> String {
    let base = match key.code {
        KeyCode::Char(' ') => "Space".to_owned(),
        KeyCode::Char(c) => c.to_string(),
        KeyCode::Tab => "Tab".to_owned(),
        KeyCode::BackTab => "Shift-Tab".to_owned(),
        KeyCode::Up => "↑".to_owned(),
        KeyCode::Down => "↓".to_owned(),
        KeyCode::Left => "←".to_owned(),
        KeyCode::Right => "→".to_owned(),
        KeyCode::PageUp => "PgUp".to_owned(),
        KeyCode::PageDown => "PgDn".to_owned(),
        KeyCode::Home => "Home".to_owned(),
        KeyCode::End => "End".to_owned(),
        KeyCode::Enter => "Enter".to_owned(),
        KeyCode::Esc => "Esc".to_owned(),
        KeyCode::Backspace => "Backspace".to_owned(),
        other => format!("{other:?}"),
    };
    if key.ctrl {
        format!("Ctrl-{base}")
    } else {
        base
    }
}

/// The help lines: (keys, text) for each binding offered in this mode, then the keys of
/// filter typing (Ctrl-C there is the same quit as above, so it is not repeated).
pub fn help_lines(replay: bool) -> Vec<(String, &'static str)> {
    BINDINGS
        .iter()
        .filter(|b| replay || !b.replay_only)
        .chain(FILTER_BINDINGS.iter().filter(|b| b.action != Action::Quit))
        .map(|b| {
            let keys: Vec<String> = b.keys.iter().map(key_label).collect();
            (keys.join(" "), b.help)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn press(code: KeyCode, modifiers: KeyModifiers) -> KeyEvent {
        KeyEvent::new(code, modifiers)
    }

    #[test]
    fn every_key_is_bound_once() {
        let mut seen = Vec::new();
        for b in BINDINGS {
            for key in b.keys {
                assert!(!seen.contains(key), "{key:?} bound twice");
                seen.push(*key);
            }
        }
    }

    #[test]
    fn ctrl_c_quits_in_both_modes_and_q_types_in_a_filter() {
        let ctrl_c = press(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert_eq!(action_for(&ctrl_c, false, false), Some(Action::Quit));
        assert_eq!(action_for(&ctrl_c, true, false), Some(Action::Quit));
        let q = press(KeyCode::Char('q'), KeyModifiers::NONE);
        assert_eq!(action_for(&q, true, false), Some(Action::FilterChar('q')));
        let plain_c = press(KeyCode::Char('c'), KeyModifiers::NONE);
        assert_eq!(action_for(&plain_c, false, false), None);
    }

    #[test]
    fn replay_keys_only_in_replay() {
        let p = press(KeyCode::Char('p'), KeyModifiers::NONE);
        assert_eq!(action_for(&p, false, false), None);
        assert_eq!(action_for(&p, false, true), Some(Action::ReplayPause));
        assert!(help_lines(true).len() > help_lines(false).len());
        // Help texts stay short enough for two columns on an 80-column terminal.
        assert!(help_lines(true).iter().all(|(_, text)| text.len() <= 26));
    }

    #[test]
    fn shifted_characters_match() {
        let big_s = press(KeyCode::Char('S'), KeyModifiers::SHIFT);
        assert_eq!(action_for(&big_s, false, false), Some(Action::SortReverse));
    }
}
