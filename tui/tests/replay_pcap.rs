//! `tboxscope replay` over packet captures: two pcap files (the T-Box's eth0 and eth1) of a
//! KCP flow dual-sent on both paths, ACKed per path, with eth0 silent for 5 s in the middle.
//! The player decodes them as they play: both paths, the redundancy, the ACK latency per path
//! and the outage must show; a seek back rebuilds the state from the first packet. Then the
//! four captures of `four_captures` (both ends of both paths) with statements about them
//! (`--clock-offset` and the like), applied on every pass as `analyze` applies them.
#![expect(clippy::unwrap_used)]

mod four_captures;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use four_captures::{udp, MS, T0};
use probe_user::correlate::CaptureHint;
use tboxscope::app::Request;
use tboxscope::replay::{self, PacketSettings, PlayOptions};
use tboxscope::source::SnapshotSource;
use tboxscope_engine::snapshot::Snapshot;
use tboxscope_engine::{FlowSelector, MatchMode, ModeOverride};
use tboxscope_test_support::pcap;

const MESSAGES: u32 = 600; // 12 s at 50 messages/s
const OUTAGE: std::ops::Range<u64> = 4_000 * MS..9_000 * MS; // eth0 silent (after T0)
const RTT_MS: [u64; 2] = [80, 50];

/// Writes `t-eth0.pcap` and `t-eth1.pcap` into `dir`.
fn write_captures(dir: &Path) -> Vec<PathBuf> {
    let tbox = [[10, 0, 0, 2], [10, 1, 0, 2]];
    let gateway = [192, 0, 2, 1];
    let payload = vec![0x42u8; 600];
    let mut files = Vec::new();
    for path in 0..2 {
        let mut packets = Vec::new();
        for sn in 0..MESSAGES {
            let sent = T0 + u64::from(sn) * 20 * MS + path as u64 * 100_000;
            if path == 0 && OUTAGE.contains(&(sent - T0)) {
                continue;
            }
            let ts = (sent / MS) as u32;
            let push = pcap::kcp_segment(7, 81, 0, 128, ts, sn, sn, &payload);
            let frame = udp(tbox[path], gateway, 40_000, 7_101, &push);
            packets.push((sent, frame.len() as u32, frame));
            let acked = sent + RTT_MS[path] * MS;
            let ack = pcap::kcp_segment(7, 82, 0, 128, ts, sn, sn + 1, &[]);
            let frame = udp(gateway, tbox[path], 7_101, 40_000, &ack);
            packets.push((acked, frame.len() as u32, frame));
        }
        packets.sort_by_key(|p| p.0);
        let file = dir.join(format!("t-eth{path}.pcap"));
        std::fs::write(&file, pcap::pcap(1, true, false, &packets)).unwrap();
        files.push(file);
    }
    files
}

/// Polls `source` until the replay has reached the end and returns the snapshot after it.
fn final_snapshot(source: &mut dyn SnapshotSource) -> Arc<Snapshot> {
    let mut latest = Arc::new(Snapshot::default());
    wait_for(source, &mut latest, "the end of the replay", |_, p| {
        p.starts_with("end")
    });
    // One more snapshot after the end, so the figures are final.
    std::thread::sleep(Duration::from_millis(300));
    source.poll().unwrap_or(latest)
}

/// Polls `source` (at most 60 s) until `done` holds for the newest snapshot and position.
fn wait_for(
    source: &mut dyn SnapshotSource,
    latest: &mut Arc<Snapshot>,
    what: &str,
    done: impl Fn(&Snapshot, &str) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(s) = source.poll() {
            *latest = s;
        }
        let position = source.status().position.unwrap_or_default();
        if done(latest, &position) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; position {position:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn two_pcap_files_replay_as_two_paths_with_latency_redundancy_and_the_outage() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_captures(dir.path());
    let options = PlayOptions {
        speed: 64.0,
        ..PlayOptions::default()
    };
    let (player, mut source) = replay::start(&files, options, PacketSettings::default()).unwrap();
    assert!(source.status().source.contains("t-eth0.pcap + t-eth1.pcap"));
    let snap = final_snapshot(&mut source);
    let mut latest = Arc::clone(&snap);
    let labels: Vec<&str> = snap.paths.iter().map(|p| p.label.as_str()).collect();
    assert_eq!(labels.len(), 2, "paths: {labels:?}");
    let eth0 = snap
        .paths
        .iter()
        .find(|p| p.label.contains("eth0"))
        .expect("eth0 path");
    let eth1 = snap
        .paths
        .iter()
        .find(|p| p.label.contains("eth1"))
        .expect("eth1 path");
    // ACK round trips: 80 ms and 50 ms exactly (hdrhistogram rounds up by < 0.1%).
    let within = |got: u64, want_ms: u64| got.abs_diff(want_ms * 1000) <= want_ms;
    assert!(within(eth0.latency.p50_us, RTT_MS[0]), "{:?}", eth0.latency);
    assert!(within(eth1.latency.p50_us, RTT_MS[1]), "{:?}", eth1.latency);
    let red = snap.redundancy.first().expect("a redundancy view");
    assert_eq!(red.messages, u64::from(MESSAGES), "{red:?}");
    let skipped = (OUTAGE.end - OUTAGE.start) / (20 * MS);
    assert_eq!(red.on_all_paths, u64::from(MESSAGES) - skipped, "{red:?}");
    // The 5 s of silence on eth0 is an outage of about 5 s.
    let outage = snap
        .outages
        .iter()
        .find(|o| o.path.contains("eth0"))
        .unwrap_or_else(|| panic!("no eth0 outage: {:?}", snap.outages));
    let secs = outage.duration_ns as f64 / 1e9;
    assert!((4.7..=5.3).contains(&secs), "outage {secs} s: {outage:?}");
    let observed = snap.health.observations;
    let packets = 4 * u64::from(MESSAGES) - 2 * skipped;
    let note = format!("{packets} packets in 2 file(s)");
    assert!(
        snap.health.inferences.iter().any(|n| n.contains(&note)),
        "{:?}",
        snap.health.inferences
    );

    // Back to the start: a fresh engine, then the whole recording again.
    source.request(Request::ReplayRestart);
    wait_for(&mut source, &mut latest, "the restart", |s, _| {
        s.health.observations < observed / 2
    });
    wait_for(&mut source, &mut latest, "the end again", |s, p| {
        p.starts_with("end") && s.health.observations == observed
    });
    drop(player);
}

/// Replay reads what `analyze` reads: a capture cut inside its last record is replayed up to
/// the cut (the health panel says where it broke); one broken before its first packet, or
/// mixed with JSON Lines, is refused before the UI starts.
#[test]
fn a_cut_capture_replays_up_to_the_cut_and_a_broken_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let good = write_captures(dir.path()).remove(0);
    let cut = dir.path().join("cut.pcap");
    let bytes = std::fs::read(&good).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() - 1]).unwrap();
    let options = PlayOptions {
        speed: 64.0,
        ..PlayOptions::default()
    };
    let (player, mut source) =
        replay::start(&[cut], options, PacketSettings::default()).expect("a cut capture plays");
    let snap = final_snapshot(&mut source);
    let packets = 2 * u64::from(MESSAGES) - (OUTAGE.end - OUTAGE.start) / (20 * MS) * 2;
    let note = format!("{} packets in 1 file(s)", packets - 1);
    let notes = &snap.health.inferences;
    assert!(notes.iter().any(|n| n.contains(&note)), "{notes:?}");
    assert!(
        notes
            .iter()
            .any(|n| n.contains("cut.pcap") && n.contains("truncated")),
        "{notes:?}"
    );
    drop(player);
    let broken = dir.path().join("broken.pcap");
    std::fs::write(&broken, &bytes[..24 + 10]).unwrap();
    let err = replay::start(&[broken], PlayOptions::default(), PacketSettings::default())
        .err()
        .expect("a capture broken before its first packet is an error");
    assert!(err.to_string().contains("broken.pcap"), "{err}");
    let jsonl = dir.path().join("x.jsonl");
    std::fs::write(&jsonl, "{}\n").unwrap();
    let err = replay::start(
        &[good, jsonl],
        PlayOptions::default(),
        PacketSettings::default(),
    )
    .err()
    .expect("mixing a pcap and JSON Lines is an error");
    assert!(err.to_string().contains("x.jsonl"), "{err}");
}

/// A clock offset stated for both gateway captures, `-290 ms` where the truth is -300 ms.
fn offsets_10_ms_short() -> PacketSettings {
    let given = |label: &str| {
        let hint = CaptureHint {
            clock_offset_ns: Some(-290 * MS as i64),
            ..CaptureHint::default()
        };
        (label.to_owned(), hint)
    };
    PacketSettings {
        captures: vec![given("gw-g0"), given("gw-g1")],
        ..PacketSettings::default()
    }
}

/// Each path's median one-way latency (µs), by label.
fn latency_p50(snap: &Snapshot) -> Vec<(String, u64)> {
    let mut latency: Vec<(String, u64)> = snap
        .paths
        .iter()
        .map(|p| (p.label.clone(), p.latency.p50_us))
        .collect();
    latency.sort();
    latency
}

/// The gateway captures' clock offsets: (capture, ns, estimated).
fn gateway_offsets(snap: &Snapshot) -> Vec<(String, i64, bool)> {
    let mut offsets: Vec<(String, i64, bool)> = snap
        .health
        .captures
        .iter()
        .filter(|c| c.name.starts_with("gw-"))
        .map(|c| (c.name.clone(), c.clock_offset_ns, c.clock_offset_estimated))
        .collect();
    offsets.sort();
    offsets
}

#[test]
fn statements_about_captures_apply_on_every_pass() {
    let dir = tempfile::tempdir().unwrap();
    let files = four_captures::write_captures(dir.path());
    let options = PlayOptions {
        speed: 64.0,
        ..PlayOptions::default()
    };
    // hdrhistogram rounds up by < 0.1%.
    let near = |got: &[(String, u64)], extra_ms: u64| {
        let want = [("t-eth0", 0), ("t-eth1", 1)]
            .map(|(l, i)| (l, (four_captures::DELAY_MS[i] + extra_ms) * 1000));
        got.len() == 2
            && got
                .iter()
                .zip(want)
                .all(|((l, us), (wl, wus))| l == wl && us.abs_diff(wus) <= wus / 1000)
    };

    // By itself: the offset is estimated and the latency is the true one-way delay.
    let (player, mut source) = replay::start(&files, options, PacketSettings::default()).unwrap();
    let snap = final_snapshot(&mut source);
    drop(player);
    assert!(
        !snap
            .redundancy
            .first()
            .expect("a redundancy view")
            .mode_forced
    );
    let (latency, offsets) = (latency_p50(&snap), gateway_offsets(&snap));
    assert!(near(&latency, 0), "{latency:?}");
    let estimated = -(four_captures::GATEWAY_AHEAD_MS as i64) * MS as i64;
    for (name, ns, was_estimated) in &offsets {
        assert!(
            *was_estimated && ns.abs_diff(estimated) <= MS,
            "{name}: {ns}"
        );
    }

    // Stated 10 ms short of the truth: every latency 10 ms above it, the offsets as given; and
    // the matching mode stated (the one it would choose, but forced).
    let mut settings = offsets_10_ms_short();
    settings.engine.mode_overrides = vec![ModeOverride {
        selector: FlowSelector {
            conv: Some(7),
            ..FlowSelector::default()
        },
        mode: MatchMode::KcpSn,
    }];
    let (player, mut source) = replay::start(&files, options, settings).unwrap();
    let check = |snap: &Snapshot| {
        let red = snap.redundancy.first().expect("a redundancy view");
        assert!(red.mode_forced, "{red:?}");
        assert_eq!(
            red.on_all_paths,
            u64::from(four_captures::MESSAGES),
            "{red:?}"
        );
        let (latency, offsets) = (latency_p50(snap), gateway_offsets(snap));
        assert!(near(&latency, 10), "{latency:?}");
        let given = |l: &str| (l.to_owned(), -290 * MS as i64, false);
        assert_eq!(offsets, vec![given("gw-g0"), given("gw-g1")]);
        assert!(
            snap.health
                .inferences
                .iter()
                .any(|l| l == "clock offset of `gw-g0` given: -290.000 ms"),
            "{:#?}",
            snap.health.inferences
        );
    };
    let snap = final_snapshot(&mut source);
    check(&snap);
    // A seek back starts a fresh engine: the statements hold there too.
    source.request(Request::ReplayRestart);
    let mut latest = snap;
    let observed = latest.health.observations;
    wait_for(&mut source, &mut latest, "the restart", |s, _| {
        s.health.observations < observed / 2
    });
    let snap = final_snapshot(&mut source);
    assert_eq!(snap.health.observations, observed);
    check(&snap);
    drop(player);
}

#[test]
fn a_statement_about_an_unknown_capture_is_refused_before_the_ui_starts() {
    let dir = tempfile::tempdir().unwrap();
    let files = four_captures::write_captures(dir.path());
    let mut settings = offsets_10_ms_short();
    settings.captures.push((
        "t-eth2".to_owned(),
        CaptureHint {
            pair_with: Some("gw-g2".to_owned()),
            ..CaptureHint::default()
        },
    ));
    let err = replay::start(&files, PlayOptions::default(), settings)
        .err()
        .expect("an unknown label is an error");
    assert_eq!(
        err.to_string(),
        "no capture is labelled gw-g2, t-eth2 (the captures: t-eth0, gw-g0, t-eth1, gw-g1)"
    );

    // The command line says the same, before any terminal is touched.
    let replay = |flags: &[&str], files: &[PathBuf]| {
        let out = Command::new(env!("CARGO_BIN_EXE_tboxscope"))
            .arg("replay")
            .args(flags)
            .args(files)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = replay(&["--host", "t-eth2=tbox"], &files);
    assert!(
        err.contains("no capture is labelled t-eth2 (the captures: t-eth0, gw-g0, t-eth1, gw-g1)"),
        "{err}"
    );
    // A JSON Lines recording was matched when it was recorded: statements are refused.
    let jsonl = dir.path().join("run.jsonl");
    std::fs::write(&jsonl, "{}\n").unwrap();
    let err = replay(
        &["--clock-offset", "gw-g0=-290", "--message-timeout", "9"],
        &[jsonl],
    );
    assert!(
        err.contains("--message-timeout, --clock-offset apply to packet captures only"),
        "{err}"
    );
}
