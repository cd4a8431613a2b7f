//! The command line never misleads: the real `tboxscope` binary with a
//! closed pipe, options written before the subcommand, `doctor` against live mode, options that
//! change nothing, `replay` reading what `analyze` reads, a file given twice and captures that
//! do not overlap in time. Tests that load eBPF programs (`doctor`) need root: they are
//! `#[ignore]`d and run by `cargo xtask test` (under `flock /tmp/tbx-root.lock` by hand).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use probe_user::dissect::DissectConfig;
use probe_user::engine::Config as EngineConfig;
use probe_user::source::pcap::live::LivePacket;
use probe_user::source::pcap::CaptureFile;
use tboxscope::feed::EngineFeed;
use tboxscope::source::{snapshot_channel, SnapshotSource};
use tboxscope_engine::snapshot::Snapshot;
use tboxscope_test_support::fixture;

const BIN: &str = env!("CARGO_BIN_EXE_tboxscope");

fn kcp() -> String {
    fixture("ndpi-kcp.pcap").display().to_string()
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Item 1: every subcommand that writes to standard output ends quietly when its reader has
/// gone (the pipe is closed before the program writes anything).
#[test]
fn a_closed_pipe_ends_quietly() {
    let k = kcp();
    let cases: Vec<Vec<&str>> = vec![
        vec!["analyze", &k],
        vec!["analyze", &k, "--json", "-"],
        vec!["analyze", &k, "--packets"],
        vec!["lab", "--prefix", "tbxnopipe-", "status"],
        vec!["lab", "--prefix", "tbxnopipe-", "status", "--json"],
        vec!["--help"],
    ];
    for args in cases {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = Command::new(BIN)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert!(
            !err.contains("panicked") && !err.contains("Broken pipe"),
            "{args:?}: {err}"
        );
        // The reader has what it wanted: a success, as for other command-line tools.
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
    }
}

/// Item 1 for the subcommands that load eBPF programs: `doctor` and `capture --json -`.
#[test]
#[ignore = "needs root"]
fn a_closed_pipe_ends_doctor_and_capture_quietly() {
    for args in [
        vec!["doctor", "-i", "lo"],
        vec!["capture", "--json", "-", "--duration", "2s"],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = Command::new(BIN)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert!(
            !err.contains("panicked") && !err.contains("Broken pipe"),
            "{args:?}: {err}"
        );
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
    }
}

/// Item 2: options of the live UI written before the subcommand are honoured where the
/// subcommand has them, refused with the reason where it does not; never ignored.
#[test]
fn options_before_the_subcommand_are_honoured_or_refused() {
    let k = kcp();
    // Honoured: analyze reads the key log given before it (here: one that does not exist).
    let out = run(&["--keylog", "/nonexistent/tbx-keys.txt", "analyze", &k]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("/nonexistent/tbx-keys.txt"),
        "{}",
        text(&out.stderr)
    );
    // Honoured: capture captures the interface given before it (here: one that does not
    // exist, refused before anything is loaded).
    let out = run(&[
        "-i",
        "tbxnosuch0",
        "capture",
        "--json",
        "/dev/null",
        "--duration",
        "1s",
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("no interface tbxnosuch0"),
        "{}",
        text(&out.stderr)
    );
    // Refused, naming the option and the subcommand.
    for (args, flag) in [
        (vec!["--filter", "udp portx 1", "analyze", &k], "--filter"),
        (vec!["-i", "lo", "replay", &k], "-i"),
        (vec!["--no-tcp", "analyze", &k], "--no-tcp"),
        (vec!["--port", "7101", "analyze", &k], "--port"),
        (vec!["--keylog", "k.txt", "lab", "status"], "--keylog"),
    ] {
        let out = run(&args);
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(err.contains(flag), "{args:?}: {err}");
        assert!(err.contains("does not take"), "{args:?}: {err}");
    }
}

/// Items 2 and 3: `doctor` checks the interfaces live mode would capture (`-i`, also written
/// before it), says why live mode cannot run in live mode's own words, and exits 1 then.
#[test]
#[ignore = "needs root"]
fn doctor_agrees_with_live_mode() {
    let missing = "tbxnoiface0";
    let live = run(&["-i", missing, "--no-tcp"]);
    assert!(!live.status.success());
    let live_err = text(&live.stderr);
    let why = format!("no interface {missing} here");
    assert!(live_err.contains(&why), "{live_err}");
    for args in [vec!["doctor", "-i", missing], vec!["-i", missing, "doctor"]] {
        let out = run(&args);
        let report = text(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {report}");
        assert!(
            report.contains(&format!("live mode: cannot run: {why}")),
            "{args:?}: {report}"
        );
        assert!(!report.contains("can run\n"), "{report}");
    }
    // libpcap's pseudo-devices are there too.
    let out = run(&["doctor", "-i", "lo", "-i", "any", "-i", "nflog:5", "--json"]);
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["live_mode"], true, "{r}");
    assert_eq!(out.status.code(), Some(0));
}

/// Item 11 (doctor): human text, no JSON fragments; colour on a terminal only.
#[test]
#[ignore = "needs root"]
fn doctor_speaks_text_and_colours_only_a_terminal() {
    let out = run(&["doctor", "-i", "lo"]);
    let report = text(&out.stdout);
    assert!(out.status.success(), "{report}");
    for fragment in ["{\"", "\":", "[\"", "\"/"] {
        assert!(!report.contains(fragment), "JSON in: {report}");
    }
    assert!(report.contains("tracefs mounted at /"), "{report}");
    assert!(
        !report.contains('\x1b'),
        "escape codes in a pipe: {report:?}"
    );
    // Under a terminal (script(1) gives one): coloured like the terminal UI.
    let tty = Command::new("script")
        .args(["-qec", &format!("{BIN} doctor -i lo"), "/dev/null"])
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .output()
        .expect("script(1) from util-linux");
    let shown = text(&tty.stdout);
    assert!(
        shown.contains("\x1b[32mok"),
        "no colour on a terminal: {shown:?}"
    );
}

/// Item 3 without root: the refusal of live mode and doctor's verdict use the same words.
#[test]
fn live_mode_names_the_missing_interface() {
    let out = run(&["-i", "tbxnoiface0", "--no-tcp"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("no interface tbxnoiface0 here"));
}

/// Item 4: options that would change nothing say so.
#[test]
fn options_that_change_nothing_say_so() {
    let k = kcp();
    let cases: [(Vec<&str>, &str); 5] = [
        (
            vec!["analyze", &k, "--match", "port:9999=datagram"],
            "--match port:9999=datagram changed nothing",
        ),
        (
            vec!["analyze", &k, "--match", "port:8000=quic-stream"],
            "--match port:8000=quic-stream changed nothing",
        ),
        (
            vec!["analyze", &k, "--app-id", "5000:8"],
            "--app-id 5000:8 changed nothing",
        ),
        (vec!["analyze", &k, "--unknown-udp"], "--packets"),
        (vec!["analyze", &k, "--app-id", "0:0"], "1 to 8 bytes"),
    ];
    for (args, want) in cases {
        let out = run(&args);
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{args:?} accepted: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    // A --match that applies, and an --app-id that finds ids, are fine.
    assert!(run(&["analyze", &k, "--match", "conv:10=kcp-sn"])
        .status
        .success());
    assert!(run(&["analyze", &k, "--app-id", "0:4"]).status.success());
    // A bad filter is a bad filter, for root too (not "run as root").
    let out = run(&["--filter", "udp portx 1", "-i", "lo", "--no-tcp"]);
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("invalid capture filter"), "{err}");
    assert!(!err.contains("run as root"), "{err}");
}

/// Item 4: the live UI's health line says why QUIC stays encrypted: no key log given, or a
/// named one that does not exist.
#[test]
fn live_health_line_names_a_missing_key_log() {
    // Frames of a QUIC capture (its embedded secrets are not a key log file).
    let mut reader =
        CaptureFile::open(&fixture("chrome-cloudflare-quic-with-secrets.pcapng")).unwrap();
    let mut packets = Vec::new();
    while let Some(p) = reader.next_packet().unwrap() {
        let (interface, ts_ns, orig_len, data) =
            (p.interface, p.ts_ns, p.orig_len, p.data.to_vec());
        let link = reader.interfaces()[interface].link.unwrap();
        packets.push(LivePacket {
            path: 0,
            ts_ns,
            orig_len,
            link,
            data,
        });
    }
    let notes = |keylog: Option<PathBuf>| -> Vec<String> {
        let (feed, mut source) = snapshot_channel("test");
        let mut engine =
            EngineFeed::new(DissectConfig::default(), EngineConfig::default(), keylog, 1);
        for p in &packets {
            engine.frame(None, "eth0", p);
        }
        engine.publish(&feed);
        let deadline = Instant::now() + Duration::from_secs(5);
        let snap: Arc<Snapshot> = loop {
            if let Some(s) = source.poll() {
                break s;
            }
            assert!(Instant::now() < deadline, "no snapshot");
            std::thread::sleep(Duration::from_millis(10));
        };
        snap.health.inferences.clone()
    };
    let none = notes(None);
    assert!(
        none.iter().any(|n| n.contains("no key log given")),
        "{none:?}"
    );
    let missing = notes(Some(PathBuf::from("/nonexistent/tbx-keys.txt")));
    assert!(
        missing
            .iter()
            .any(|n| n.contains("/nonexistent/tbx-keys.txt") && n.contains("does not exist")),
        "{missing:?}"
    );
}

/// Item 5: replay calls a `.pcap` that is no capture "not a pcap", as analyze does.
#[test]
fn replay_says_not_a_pcap() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("notes.pcap");
    std::fs::write(&f, "these are notes, not packets\n").unwrap();
    let f = f.display().to_string();
    let analyze = text(&run(&["analyze", &f]).stdout);
    assert!(analyze.contains("not a pcap"), "{analyze}");
    let out = run(&["replay", &f]);
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("not a pcap or pcapng file"), "{err}");
}

/// Item 6: the same file twice is refused (by any path to it); captures that never overlap
/// in time are named in a warning, in the report and the JSON summary.
#[test]
fn a_repeated_file_is_refused_and_disjoint_captures_are_named() {
    let k = kcp();
    let dotted = format!("{}/./ndpi-kcp.pcap", fixture("").display());
    for cmd in ["analyze", "replay"] {
        let out = run(&[cmd, &k, &dotted]);
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{cmd}: {err}");
        assert!(err.contains("are the same file"), "{cmd}: {err}");
    }
    // nDPI's KCP capture (2024) and QUIC v2 capture (2022).
    let q = fixture("ndpi-quic-v2.pcapng").display().to_string();
    let out = run(&["analyze", &k, &q]);
    let report = text(&out.stdout);
    assert!(
        report.contains("warning: the captures do not overlap in time"),
        "{report}"
    );
    assert!(report.contains("days before"), "{report}");
    let out = run(&["analyze", &k, &q, "--json", "-"]);
    let last = text(&out.stdout).lines().last().unwrap().to_owned();
    let summary: serde_json::Value = serde_json::from_str(&last).unwrap();
    assert!(
        summary["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("do not overlap")),
        "{last}"
    );
}

/// An unsupported link type is named in a warning, not only counted.
#[test]
fn an_unsupported_link_type_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("user0.pcap");
    let frame = tboxscope_test_support::pcap::ipv4_udp(1, 2, b"x");
    std::fs::write(
        &f,
        tboxscope_test_support::pcap::pcap(147, false, false, &[(1, frame.len() as u32, frame)]),
    )
    .unwrap();
    let out = run(&["analyze", &f.display().to_string()]);
    let report = text(&out.stdout);
    assert!(
        report.contains("warning: user0.pcap: capture user0 has link type 147")
            && report.contains("its 1 frame is not decoded"),
        "{report}"
    );
}

/// Polls `source` (at most 20 s) until a snapshot's health notes hold `want`; returns them.
fn health_notes_with(source: &mut dyn SnapshotSource, want: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = Vec::new();
    while Instant::now() < deadline {
        if let Some(s) = source.poll() {
            last = s.health.inferences.clone();
            if last.iter().any(|n| n.contains(want)) {
                return last;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("no health note with {want:?}: {last:?}");
}

/// The replay UI says the same as `analyze`: a link type it does not decode is named, and
/// captures that never overlap in time are called so, from the first snapshot on.
#[test]
fn replay_names_an_unsupported_link_type_and_disjoint_captures() {
    use tboxscope::replay::{self, PacketSettings, PlayOptions};
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("user0.pcap");
    let frame = tboxscope_test_support::pcap::ipv4_udp(1, 2, b"x");
    std::fs::write(
        &f,
        tboxscope_test_support::pcap::pcap(147, false, false, &[(1, frame.len() as u32, frame)]),
    )
    .unwrap();
    let paused = PlayOptions {
        paused: true,
        ..PlayOptions::default()
    };
    let (player, mut source) = replay::start(&[f], paused, PacketSettings::default()).unwrap();
    health_notes_with(&mut source, "user0.pcap has link type 147");
    drop(player);
    let files = [fixture("ndpi-kcp.pcap"), fixture("ndpi-quic-v2.pcapng")];
    let (player, mut source) = replay::start(&files, paused, PacketSettings::default()).unwrap();
    health_notes_with(&mut source, "the captures do not overlap in time");
    drop(player);
}

/// Item 4 in replay: a `--match` no flow took up is named in the health panel after a pass.
#[test]
fn replay_names_a_match_that_changed_nothing() {
    use tboxscope::replay::{self, PacketSettings, PlayOptions};
    use tboxscope_engine::{FlowSelector, MatchMode, ModeOverride};
    let settings = PacketSettings {
        engine: EngineConfig {
            mode_overrides: vec![ModeOverride {
                selector: FlowSelector {
                    port: Some(9999),
                    ..FlowSelector::default()
                },
                mode: MatchMode::Datagram,
            }],
            ..EngineConfig::default()
        },
        ..PacketSettings::default()
    };
    let fast = PlayOptions {
        speed: 1000.0,
        ..PlayOptions::default()
    };
    let (player, mut source) = replay::start(&[fixture("ndpi-kcp.pcap")], fast, settings).unwrap();
    health_notes_with(
        &mut source,
        "replay: --match port:9999=datagram changed nothing",
    );
    drop(player);
}
