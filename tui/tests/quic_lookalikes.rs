//! UDP that only looks like QUIC: LLMNR queries, zero-filled blobs and plain
//! KCP parse as QUIC headers (Version Negotiation, unknown versions, short headers) but are
//! never counted as QUIC nor as decryption failures, and make no flows, spans or outages.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use probe_user::dissect::DissectConfig;
use probe_user::engine::Config as EngineConfig;
use probe_user::source::pcap::live::LivePacket;
use probe_user::source::pcap::CaptureFile;
use tboxscope::feed::EngineFeed;
use tboxscope::source::{snapshot_channel, SnapshotSource};
use tboxscope_decode::net::LinkType;
use tboxscope_engine::snapshot::Snapshot;
use tboxscope_test_support::fixture;
use tboxscope_test_support::pcap::{eth_udp, kcp_segment, pcap};

const BIN: &str = env!("CARGO_BIN_EXE_tboxscope");

/// An LLMNR query for `wpad` with transaction id `id` (RFC 4795: a DNS header, one question).
fn llmnr_query(id: u16) -> Vec<u8> {
    let mut v = id.to_be_bytes().to_vec();
    v.extend([0, 0, 0, 1, 0, 0, 0, 0, 0, 0]); // flags, QDCOUNT 1, no other records
    v.extend(b"\x04wpad\x00");
    v.extend([0, 1, 0, 1]); // type A, class IN
    v
}

/// Datagram payloads that parse as QUIC headers without being QUIC, with their UDP ports.
fn lookalikes() -> Vec<(u16, u16, Vec<u8>)> {
    let mut out = Vec::new();
    for i in 0..10u16 {
        // Id 0xa0 00: first byte 0xa0 (long header), then a zero "version" (Version
        // Negotiation) with DCID length 1 and a list starting with zero bytes.
        out.push((50_000 + i, 5355, llmnr_query(0xa000)));
        // Other ids: "versions" QUIC does not know.
        out.push((50_000 + i, 5355, llmnr_query(0xa000 | (i + 1))));
        // Zero-filled blobs behind a long-header byte: a Version Negotiation of zero versions.
        let mut blob = vec![0u8; 64];
        blob[0] = 0x80;
        out.push((40_000, 40_001, blob));
        out.push((40_000, 40_001, vec![0u8; 48]));
        // Plain KCP: conv 0xc3 makes a long header of version 0x00000051 (cmd PUSH), conv 0x41
        // a short header (fixed bit set).
        for conv in [0xc3u32, 0x41] {
            let seg = kcp_segment(conv, 81, 0, 128, u32::from(i) * 100, u32::from(i), 0, b"hi");
            out.push((7000, 7001, seg));
        }
    }
    out
}

const T0: u64 = 1_700_000_000_000_000_000;

fn lookalike_capture(dir: &Path) -> PathBuf {
    let packets: Vec<(u64, u32, Vec<u8>)> = lookalikes()
        .into_iter()
        .enumerate()
        .map(|(i, (sport, dport, payload))| {
            let frame = eth_udp(&[], false, sport, dport, &payload);
            (T0 + i as u64 * 50_000_000, frame.len() as u32, frame)
        })
        .collect();
    let f = dir.join("lookalikes.pcap");
    std::fs::write(&f, pcap(1, true, false, &packets)).unwrap();
    f
}

fn analyze(files: &[&Path], json: bool) -> String {
    let mut cmd = Command::new(BIN);
    cmd.arg("analyze").args(files).stdin(Stdio::null());
    if json {
        cmd.args(["--json", "-"]);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn lookalikes_are_not_quic_and_not_decrypt_failures() {
    let dir = tempfile::tempdir().unwrap();
    let built = lookalike_capture(dir.path());
    let kcp = fixture("ndpi-kcp.pcap");
    for files in [vec![built.as_path()], vec![kcp.as_path()]] {
        let text = analyze(&files, false);
        assert!(text.contains(" 0 QUIC (0 packets)"), "{text}");
        assert!(!text.lines().any(|l| l.starts_with("QUIC:")), "{text}");
        let json = analyze(&files, true);
        let summary: serde_json::Value = json
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["type"] == "summary")
            .unwrap();
        assert_eq!(summary["quic"]["packets"], 0, "{summary}");
        assert_eq!(summary["quic"]["not_decrypted"], serde_json::json!({}));
        assert_eq!(summary["frames"]["quic_packets"], 0);
    }
}

/// A capture of look-alikes and a little KCP, and the KCP fixture taken 57 days later: no outage
/// outlasts the capture of its path (the first one's KCP stopping where its capture ends is no
/// outage, though the other capture delivers long after).
#[test]
fn lookalikes_make_no_absurd_span_or_outage() {
    let dir = tempfile::tempdir().unwrap();
    let built = lookalike_capture(dir.path());
    let kcp = fixture("ndpi-kcp.pcap");
    let json = analyze(&[built.as_path(), kcp.as_path()], true);
    let records: Vec<serde_json::Value> = json
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    // ndpi-kcp.pcap spans 15.7 s, the built capture 3 s.
    let outages: Vec<&serde_json::Value> =
        records.iter().filter(|r| r["type"] == "outage").collect();
    assert!(!outages.is_empty());
    for o in outages {
        let d = o["duration_ns"].as_u64().unwrap();
        assert!(d < 16_000_000_000, "{o}");
        assert_eq!(o["path"], "ndpi-kcp", "{o}");
    }
    let text = analyze(&[built.as_path(), kcp.as_path()], false);
    assert!(!text.contains("lookalikes:"), "{text}");
}

/// Live: the same datagrams and the KCP fixture's frames fed to the live engine leave the health
/// line without decrypt failures.
#[test]
fn live_lookalikes_are_no_decrypt_failures() {
    let mut packets: Vec<LivePacket> = lookalikes()
        .into_iter()
        .enumerate()
        .map(|(i, (sport, dport, payload))| LivePacket {
            path: 0,
            ts_ns: T0 + i as u64 * 50_000_000,
            orig_len: 0,
            link: LinkType::Ethernet,
            data: eth_udp(&[], false, sport, dport, &payload),
        })
        .collect();
    let mut reader = CaptureFile::open(&fixture("ndpi-kcp.pcap")).unwrap();
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
    let (feed, mut source) = snapshot_channel("test");
    let mut engine = EngineFeed::new(DissectConfig::default(), EngineConfig::default(), None, 1);
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
    assert_eq!(snap.health.decrypt_failures, 0, "{:?}", snap.health);
    assert!(
        !snap.health.inferences.iter().any(|n| n.contains("QUIC")),
        "{:?}",
        snap.health.inferences
    );
}
