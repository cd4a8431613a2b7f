//! `tboxscope analyze` of a TCP capture with a known truth (the generator of the TCP
//! benchmark's capture: bulk connections, losses repaired by fast retransmit, tail loss probe
//! and RTO, some timing out twice, sequence numbers wrapping): every retransmission found,
//! each of its kind and backoff level, and tshark's TCP analysis flags the same ones — with
//! full segments, and with a control channel's small ones (many segments per round trip).

#![expect(clippy::unwrap_used, reason = "test helper shared by two cases")]

use std::collections::BTreeMap;
use std::process::Command;

use serde_json::Value;
use tboxscope_test_support::tcpflow::{write_tcp_capture, TcpTraffic, FULL_SEGMENT};

#[test]
fn bulk_retransmissions_by_kind_and_level_match_the_truth_and_tshark() {
    by_kind_and_level(FULL_SEGMENT);
}

#[test]
fn control_channel_retransmissions_by_kind_and_level_match_the_truth_and_tshark() {
    by_kind_and_level(160);
}

fn by_kind_and_level(segment_bytes: u32) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tcp.pcap");
    let (_, truth) = write_tcp_capture(
        &file,
        &TcpTraffic {
            connections: 6,
            frames: 40_000,
            loss_per_mille: 20,
            seed: 7,
            segment_bytes,
        },
    );
    assert!(
        truth.fast > 50 && truth.loss_probe > 20 && truth.rto_level1 > 5,
        "{truth:?}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_tboxscope"))
        .args(["analyze", file.to_str().unwrap(), "--json", "-"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let records: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
    let mut spurious = 0;
    for r in records.iter().filter(|r| r["type"] == "tcp_retransmit") {
        assert_eq!(r["source"], "wire");
        *kinds
            .entry(r["kind"].as_str().unwrap().to_owned())
            .or_default() += 1;
        spurious += u64::from(!r["spurious"].is_null());
    }
    let expected: BTreeMap<String, u64> = [
        ("fast", truth.fast),
        ("loss_probe", truth.loss_probe),
        ("rto", truth.rto_level0 + truth.rto_level1),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(kinds, expected);
    assert_eq!(spurious, 0, "every retransmission here repaired a loss");
    let mut levels: BTreeMap<u64, u64> = BTreeMap::new();
    for r in records.iter().filter(|r| r["type"] == "tcp_rto") {
        *levels.entry(r["backoff"].as_u64().unwrap()).or_default() += 1;
    }
    assert_eq!(
        levels,
        BTreeMap::from([(0, truth.rto_level0), (1, truth.rto_level1)])
    );

    // A second oracle: tshark's own TCP analysis on the same file.
    let tshark = Command::new("tshark")
        .args(["-r", file.to_str().unwrap(), "-T", "fields"])
        .args(["-e", "tcp.analysis.retransmission"])
        .args(["-e", "tcp.analysis.fast_retransmission"])
        .output()
        .unwrap();
    assert!(tshark.status.success());
    let text = String::from_utf8(tshark.stdout).unwrap();
    let flagged = |col: usize| {
        text.lines()
            .filter(|l| l.split('\t').nth(col).is_some_and(|v| !v.is_empty()))
            .count() as u64
    };
    assert_eq!(flagged(0), truth.retransmissions());
    assert_eq!(flagged(1), truth.fast);
}
