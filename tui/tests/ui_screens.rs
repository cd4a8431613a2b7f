//! Whole-screen snapshot tests of every screen at 80×24 and 200×60, drawn by the real renderer
//! from snapshots the replay builds out of a checked-in recording (`fixtures/two-path.jsonl`,
//! written by `examples/synth_capture.rs`): two paths, a 5 s outage of eth1 from +6 s to +11 s,
//! TCP/KCP/QUIC head-of-line incidents, a TCP socket going through an RTO backoff ladder.
#![expect(clippy::unwrap_used)]

use std::path::Path;

use ratatui::backend::TestBackend;
use ratatui::style::Color;
use ratatui::Terminal;
use tboxscope::app::{Action, App, Screen};
use tboxscope::replay::{load, PlayOptions, Player};
use tboxscope::view::{self, SourceStatus, Theme};
use tboxscope_engine::snapshot::Snapshot;

const SIZES: [(u16, u16); 2] = [(80, 24), (200, 60)];

fn snapshot_at(secs: f64) -> Snapshot {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/two-path.jsonl");
    let recording = load(&path).unwrap();
    let start = recording.start_ns();
    let mut player = Player::new(
        recording,
        PlayOptions {
            paused: true,
            ..PlayOptions::default()
        },
    );
    player.seek_to(start + (secs * 1e9) as u64);
    player.snapshot()
}

fn status() -> SourceStatus {
    SourceStatus {
        source: "replay two-path.jsonl".to_owned(),
        position: Some("⏸ 1x 8.50s/16.0s".to_owned()),
        problem: None,
    }
}

fn draw(app: &App, snap: &Snapshot, (w, h): (u16, u16), theme: Theme) -> Terminal<TestBackend> {
    let mut terminal = Terminal::new(TestBackend::new(w, h)).unwrap();
    terminal
        .draw(|frame| {
            view::render(frame, app, snap, &status(), &theme);
        })
        .unwrap();
    terminal
}

fn check(name: &str, app: &App, snap: &Snapshot) {
    for size in SIZES {
        let terminal = draw(app, snap, size, Theme { color: true });
        insta::assert_snapshot!(format!("{name}_{}x{}", size.0, size.1), terminal.backend());
    }
}

fn on(screen: Screen) -> App {
    let mut app = App::new(true);
    app.apply(Action::GoTo(screen));
    app
}

#[test]
fn overview_mid_outage() {
    check(
        "overview_mid_outage",
        &on(Screen::Overview),
        &snapshot_at(8.5),
    );
}

#[test]
fn overview_at_end() {
    check("overview_end", &on(Screen::Overview), &snapshot_at(16.0));
}

#[test]
fn flows() {
    check("flows", &on(Screen::Flows), &snapshot_at(8.5));
}

#[test]
fn tcp_after_backoff_ladder() {
    check("tcp", &on(Screen::Tcp), &snapshot_at(8.5));
}

#[test]
fn incidents_newest_first() {
    check("incidents", &on(Screen::Incidents), &snapshot_at(16.0));
}

#[test]
fn incident_timeline_of_the_tcp_stall() {
    let snap = snapshot_at(16.0);
    let mut app = on(Screen::Incidents);
    // Newest first: QUIC (+15 s), KCP (+13 s), outage (+6 s), TCP (+3 s).
    app.apply(Action::Bottom);
    app.clamp(Screen::Incidents, 4);
    let key = view::selected_key(&app, &snap).unwrap();
    app.apply(Action::Open(key));
    check("incident_timeline_tcp", &app, &snap);
}

#[test]
fn outage_open_while_it_lasts() {
    let snap = snapshot_at(8.5);
    let outage = snap.outages.first().unwrap();
    assert_eq!(outage.end_ns, None);
    assert_eq!(outage.duration_ns, 2_500_000_000);
    let eth1 = snap.paths.iter().find(|p| p.label == "eth1").unwrap();
    assert!(!eth1.up);
    assert_eq!(eth1.outage_for_ns, Some(2_500_000_000));
}

#[test]
fn events_filtered() {
    let mut app = on(Screen::Events);
    for c in "retransmit".chars() {
        app.apply(Action::FilterChar(c));
    }
    check("events_filtered", &app, &snapshot_at(16.0));
}

#[test]
fn help_overlay() {
    let mut app = on(Screen::Overview);
    app.apply(Action::ToggleHelp);
    check("help", &app, &snapshot_at(1.0));
}

#[test]
fn empty_snapshot_draws_everywhere() {
    let snap = Snapshot::default();
    for screen in Screen::ALL {
        for size in [(80, 24), (200, 60), (20, 5)] {
            draw(&on(screen), &snap, size, Theme { color: true });
        }
    }
    check("overview_empty", &on(Screen::Overview), &snap);
}

fn colors(terminal: &Terminal<TestBackend>) -> Vec<Color> {
    terminal
        .backend()
        .buffer()
        .content()
        .iter()
        .flat_map(|c| [c.fg, c.bg])
        .collect()
}

#[test]
fn no_color_uses_no_colour_and_colour_uses_only_the_16() {
    let snap = snapshot_at(8.5);
    for screen in Screen::ALL {
        let app = on(screen);
        let plain = draw(&app, &snap, (200, 60), Theme { color: false });
        assert!(
            colors(&plain).iter().all(|c| *c == Color::Reset),
            "{screen:?} uses colour under NO_COLOR"
        );
        let coloured = draw(&app, &snap, (200, 60), Theme { color: true });
        assert!(
            colors(&coloured)
                .iter()
                .all(|c| !matches!(c, Color::Rgb(..) | Color::Indexed(_))),
            "{screen:?} uses more than the 16 ANSI colours"
        );
    }
}
