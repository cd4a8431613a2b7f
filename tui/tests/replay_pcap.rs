//! `tboxscope replay` over packet captures: two pcap files (the T-Box's eth0 and eth1) of a
//! KCP flow dual-sent on both paths, ACKed per path, with eth0 silent for 5 s in the middle.
//! The player decodes them as they play: both paths, the redundancy, the ACK latency per path
//! and the outage must show; a seek back rebuilds the state from the first packet.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../probe-user/tests/pcap_common/mod.rs"]
mod pcap_common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use etherparse::PacketBuilder;
use probe_user::dissect::DissectConfig;
use tboxscope::app::Request;
use tboxscope::replay::{self, PlayOptions};
use tboxscope::source::SnapshotSource;
use tboxscope_engine::snapshot::Snapshot;

const T0: u64 = 1_796_000_000_000_000_000;
const MS: u64 = 1_000_000;
const MESSAGES: u32 = 600; // 12 s at 50 messages/s
const OUTAGE: std::ops::Range<u64> = 4_000 * MS..9_000 * MS; // eth0 silent (after T0)
const RTT_MS: [u64; 2] = [80, 50];

fn udp(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(src, dst, 64)
        .udp(sport, dport)
        .write(&mut v, payload)
        .unwrap();
    v
}

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
            let push = pcap_common::kcp_segment(7, 81, 0, 128, ts, sn, sn, &payload);
            let frame = udp(tbox[path], gateway, 40_000, 7_101, &push);
            packets.push((sent, frame.len() as u32, frame));
            let acked = sent + RTT_MS[path] * MS;
            let ack = pcap_common::kcp_segment(7, 82, 0, 128, ts, sn, sn + 1, &[]);
            let frame = udp(gateway, tbox[path], 7_101, 40_000, &ack);
            packets.push((acked, frame.len() as u32, frame));
        }
        packets.sort_by_key(|p| p.0);
        let file = dir.join(format!("t-eth{path}.pcap"));
        std::fs::write(&file, pcap_common::pcap(1, true, false, &packets)).unwrap();
        files.push(file);
    }
    files
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
    let (player, mut source) = replay::start(&files, options, DissectConfig::default()).unwrap();
    assert!(source.status().source.contains("t-eth0.pcap + t-eth1.pcap"));
    let mut latest = Arc::new(Snapshot::default());
    wait_for(&mut source, &mut latest, "the end of the replay", |_, p| {
        p.starts_with("end")
    });
    // One more snapshot after the end, so the figures are final.
    std::thread::sleep(Duration::from_millis(300));
    if let Some(s) = source.poll() {
        latest = s;
    }
    let snap = Arc::clone(&latest);
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

#[test]
fn a_broken_capture_is_refused_before_the_ui_starts() {
    let dir = tempfile::tempdir().unwrap();
    let good = write_captures(dir.path()).remove(0);
    let bad = dir.path().join("cut.pcap");
    let bytes = std::fs::read(&good).unwrap();
    std::fs::write(&bad, &bytes[..bytes.len() - 7]).unwrap();
    let err = replay::start(&[bad], PlayOptions::default(), DissectConfig::default())
        .err()
        .expect("a truncated capture is an error");
    assert!(err.to_string().contains("cut.pcap"), "{err}");
    let jsonl = dir.path().join("x.jsonl");
    std::fs::write(&jsonl, "{}\n").unwrap();
    let err = replay::start(
        &[good, jsonl],
        PlayOptions::default(),
        DissectConfig::default(),
    )
    .err()
    .expect("mixing a pcap and JSON Lines is an error");
    assert!(err.to_string().contains("x.jsonl"), "{err}");
}
