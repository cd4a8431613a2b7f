//! Whole-screen snapshot tests of every screen at 80×24, 140×45 and 200×60, drawn by the real renderer
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

const SIZES: [(u16, u16); 3] = [(80, 24), (140, 45), (200, 60)];

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

fn draw(app: &App, snap: &Snapshot, size: (u16, u16), theme: Theme) -> Terminal<TestBackend> {
    draw_from(&status(), app, snap, size, theme)
}

fn draw_from(
    status: &SourceStatus,
    app: &App,
    snap: &Snapshot,
    (w, h): (u16, u16),
    theme: Theme,
) -> Terminal<TestBackend> {
    let mut terminal = Terminal::new(TestBackend::new(w, h)).unwrap();
    terminal
        .draw(|frame| {
            view::render(frame, app, snap, status, &theme);
        })
        .unwrap();
    terminal
}

fn check(name: &str, app: &App, snap: &Snapshot) {
    check_from(&status(), name, app, snap);
}

fn check_from(status: &SourceStatus, name: &str, app: &App, snap: &Snapshot) {
    for size in SIZES {
        let terminal = draw_from(status, app, snap, size, Theme { color: true });
        insta::assert_snapshot!(format!("{name}_{}x{}", size.0, size.1), terminal.backend());
    }
}

/// The text of the whole screen, rows joined by newlines.
fn text(terminal: &Terminal<TestBackend>) -> String {
    let buffer = terminal.backend().buffer();
    let width = usize::from(buffer.area.width);
    buffer
        .content()
        .chunks(width)
        .map(|row| {
            row.iter()
                .map(ratatui::buffer::Cell::symbol)
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("\n")
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
        for size in [(80, 24), (140, 45), (200, 60), (20, 5)] {
            draw(&on(screen), &snap, size, Theme { color: true });
        }
    }
    check("overview_empty", &on(Screen::Overview), &snap);
}

/// Every screen says what to do when it has nothing to show, at every size.
#[test]
fn empty_states_say_what_to_do() {
    let snap = Snapshot::default();
    check("flows_empty", &on(Screen::Flows), &snap);
    check("tcp_empty", &on(Screen::Tcp), &snap);
    check("incidents_empty", &on(Screen::Incidents), &snap);
    check("events_empty", &on(Screen::Events), &snap);
    check("advice_empty", &on(Screen::Advice), &snap);
    let pcap = SourceStatus {
        source: "replay tbox-eth0.pcap + tbox-eth1.pcap".to_owned(),
        position: Some("⏸ 1x 0.00s/27.1s".to_owned()),
        problem: None,
    };
    check_from(&pcap, "tcp_empty_pcap_replay", &on(Screen::Tcp), &snap);
    let screen = text(&draw_from(
        &pcap,
        &on(Screen::Tcp),
        &snap,
        (140, 45),
        Theme { color: false },
    ));
    assert!(
        screen.contains("no TCP in these captures so far"),
        "{screen}"
    );
    assert!(screen.contains("capture --json"), "{screen}");
    let live = SourceStatus {
        source: "live eth0 + eth1".to_owned(),
        ..SourceStatus::default()
    };
    let screen = text(&draw_from(
        &live,
        &on(Screen::Tcp),
        &snap,
        (140, 45),
        Theme { color: false },
    ));
    assert!(
        screen.contains("no TCP socket on the paths yet"),
        "{screen}"
    );
    assert!(screen.contains("tboxscope doctor"), "{screen}");
}

/// A replay of packet captures has no kernel events: the TCP screen shows TCP as the captures
/// saw it (retransmissions by kind, the backoff ladder inferred from the wire) and, where a
/// kernel recording was joined, where the two disagree.
#[test]
fn tcp_screen_shows_the_wire_in_a_pcap_replay() {
    use tboxscope_engine::record::{TcpJoinDirection, TcpWireDirection};
    let mut snap = Snapshot::default();
    snap.tcp_wire.connections = 2;
    snap.tcp_wire.directions = vec![
        TcpWireDirection {
            path: "tbox-eth0".to_owned(),
            src: "10.0.0.2:41000".to_owned(),
            dst: "198.51.100.1:443".to_owned(),
            segments: 1480,
            retransmits: [4, 7, 2, 3, 2, 0],
            spurious: 1,
            out_of_order: 2,
            unknown_history: 1,
            window_probes: 3,
            rto_ladder: vec![1, 1, 1, 1],
            max_rto_ms: 1632,
            rtt_samples: 700,
            srtt_us: 41_500,
            rto_ms: 204,
            path_mtu_signals: 2,
            path_mtu: 1400,
            at_receiver: false,
            sender_captured: false,
            arrivals_not_taken: 0,
            arrivals_not_judged: 0,
            drops_without_stall: 0,
        },
        TcpWireDirection {
            path: "tbox-eth0".to_owned(),
            src: "198.51.100.1:443".to_owned(),
            dst: "10.0.0.2:41000".to_owned(),
            segments: 310,
            retransmits: [0, 1, 0, 0, 0, 0],
            rtt_samples: 120,
            srtt_us: 40_900,
            rto_ms: 201,
            at_receiver: true,
            arrivals_not_taken: 2,
            arrivals_not_judged: 3,
            drops_without_stall: 0,
            ..TcpWireDirection::default()
        },
    ];
    snap.tcp_join.directions = vec![TcpJoinDirection {
        path: "tbox-eth0".to_owned(),
        src: "10.0.0.2:41000".to_owned(),
        dst: "198.51.100.1:443".to_owned(),
        kernel: 17,
        wire: 16,
        matched: 15,
        not_on_wire: 1,
        original_not_captured: 1,
        not_in_kernel: 1,
        ..TcpJoinDirection::default()
    }];
    snap.tcp_join.totals = snap.tcp_join.directions[0].clone();
    let pcap = SourceStatus {
        source: "replay tbox-eth0.pcap".to_owned(),
        position: Some("⏸ 1x 0.00s/27.1s".to_owned()),
        problem: None,
    };
    check_from(&pcap, "tcp_wire_pcap_replay", &on(Screen::Tcp), &snap);
    let screen = text(&draw_from(
        &pcap,
        &on(Screen::Tcp),
        &snap,
        (140, 45),
        Theme { color: false },
    ));
    for needle in [
        "TCP on the wire: 2 connections, 2 senders",
        "10.0.0.2:41000 → 198.51.100.1:443",
        "#3",
        "longest timeout 1.63s",
        "loss_probe",
        "kernel 17, both 15: 1 not on the wire",
        "1 original not captured",
        "window probes",
    ] {
        assert!(screen.contains(needle), "{needle}:\n{screen}");
    }
    assert!(!screen.contains("no kernel events: record"), "{screen}");
    // The server's data, arriving at this capture: two segments its receiver did not take.
    let mut app = on(Screen::Tcp);
    app.apply(Action::Down);
    let screen = text(&draw_from(
        &pcap,
        &app,
        &snap,
        (140, 45),
        Theme { color: false },
    ));
    assert!(
        screen.contains("2 arrived here but were not taken by the receiver"),
        "{screen}"
    );
    assert!(screen.contains("arrived here, not judged: 3"), "{screen}");
}

/// A filter that hides every row says so, on every list screen.
#[test]
fn no_match_for_the_filter_says_so() {
    let snap = snapshot_at(16.0);
    for screen in [
        Screen::Flows,
        Screen::Tcp,
        Screen::Incidents,
        Screen::Events,
    ] {
        let mut app = on(screen);
        for c in "xy".chars() {
            app.apply(Action::FilterChar(c));
        }
        app.apply(Action::FilterAccept);
        let screen_text = text(&draw(&app, &snap, (80, 24), Theme { color: false }));
        assert!(
            screen_text.contains("no match for filter /xy"),
            "{screen:?}:\n{screen_text}"
        );
    }
    let mut app = on(Screen::Flows);
    for c in "xy".chars() {
        app.apply(Action::FilterChar(c));
    }
    app.apply(Action::FilterAccept);
    check("flows_no_match", &app, &snap);
}

/// Flow names (addresses and ports) and path labels are never cut, at 80 columns too; the
/// sorted column carries ▼, and the footer's sort and filter fit at 80 and 140 columns.
#[test]
fn names_whole_sort_marked_footer_fits() {
    let snap = snapshot_at(8.5);
    for width in [80, 140] {
        let mut app = on(Screen::Flows);
        for c in "tcp".chars() {
            app.apply(Action::FilterChar(c));
        }
        app.apply(Action::FilterAccept);
        let screen = text(&draw(&app, &snap, (width, 24), Theme { color: false }));
        assert!(
            screen.contains("10.0.0.2:40000 → 198.51.100.1:443"),
            "{screen}"
        );
        assert!(screen.contains("Pkts▼"), "{screen}");
        let footer = screen.lines().last().unwrap();
        assert!(
            footer.contains("[/tcp]") && footer.contains("sort: packets"),
            "{footer}"
        );
    }
    let screen = text(&draw(
        &on(Screen::Incidents),
        &snapshot_at(16.0),
        (80, 24),
        Theme { color: false },
    ));
    assert!(
        screen.contains("HOL tcp  10.0.0.2:40000 → 198.51.100.1:443")
            && !screen.contains("tcp tcp"),
        "{screen}"
    );
}

/// A path's two loss figures are both there, each named for what it counts.
#[test]
fn path_panels_name_both_loss_figures() {
    let screen = text(&draw(
        &on(Screen::Overview),
        &snapshot_at(16.0),
        (80, 24),
        Theme { color: false },
    ));
    assert!(
        screen.contains("msgs not carried 31.2% · re-sent 0.0%"),
        "{screen}"
    );
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

/// A path coming back is good news: drawn in the ok colour, labelled `ok`, not as a warning.
#[test]
fn path_back_is_good_news() {
    use tboxscope_engine::snapshot::{EventLine, Severity};
    let mut snap = Snapshot::default();
    snap.events.push(EventLine {
        ts_ns: 1_000_000_000,
        severity: Severity::Warn,
        text: "path eth1 back after 5.000 s of outage".to_owned(),
    });
    let terminal = draw(&on(Screen::Events), &snap, (80, 24), Theme { color: true });
    let screen = text(&terminal);
    let row = screen
        .lines()
        .position(|l| l.contains("back after"))
        .unwrap();
    assert!(
        screen.lines().nth(row).unwrap().contains(" ok "),
        "{screen}"
    );
    let buffer = terminal.backend().buffer();
    let col = screen
        .lines()
        .nth(row)
        .unwrap()
        .chars()
        .position(|c| c == 'p')
        .unwrap();
    assert_eq!(buffer[(col as u16, row as u16)].fg, Color::Green);
}

/// The Advice screen with the advice `tboxscope advise --json` made from a lab run of S1
/// (tests/data/advice-s1.json): the recommendation, its reasons, the evidence and the options.
#[test]
fn advice_of_a_lab_run() {
    let mut snap = snapshot_at(1.0);
    let json = include_str!("data/advice-s1.json");
    snap.advice = Some(Box::new(serde_json::from_str(json).unwrap()));
    check("advice_s1", &on(Screen::Advice), &snap);
    let screen = text(&draw(
        &on(Screen::Advice),
        &snap,
        (140, 45),
        Theme { color: false },
    ));
    assert!(screen.contains("advice: kcp (tbox-eth1)"), "{screen}");
    assert!(screen.contains("redundant tbox-eth0+tbox-eth1"), "{screen}");
    // ↓ scrolls: at 80×24 the options table comes into view.
    let mut app = on(Screen::Advice);
    for _ in 0..20 {
        app.apply(Action::Down);
    }
    let screen = text(&draw(&app, &snap, (80, 24), Theme { color: false }));
    assert!(screen.contains("options on this link"), "{screen}");
}
