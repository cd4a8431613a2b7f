//! `tboxscope analyze` of four captures — both ends of both paths, the gateway's clock 300 ms
//! ahead of the T-Box's — of a KCP flow dual-sent on both paths (40 ms and 25 ms one way):
//! what tboxscope infers by itself (pairs, hosts, the clock offset, the matching mode), and
//! what flags state instead (`--pair`, `--host`, `--clock-offset`, `--match`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../probe-user/tests/pcap_common/mod.rs"]
mod pcap_common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use etherparse::PacketBuilder;
use serde_json::Value;

const T0: u64 = 1_796_000_000_000_000_000;
const MS: u64 = 1_000_000;
const MESSAGES: u32 = 200;
const DELAY_MS: [u64; 2] = [40, 25];
/// How far the gateway's clock is ahead of the T-Box's.
const GATEWAY_AHEAD_MS: u64 = 300;

fn udp(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(src, dst, 64)
        .udp(sport, dport)
        .write(&mut v, payload)
        .unwrap();
    v
}

/// Writes `t-eth0`, `gw-g0`, `t-eth1`, `gw-g1` (.pcap) into `dir`: every message sent on both
/// paths (same conv and sn), acknowledged by the gateway 1 ms after it arrived.
fn write_captures(dir: &Path) -> Vec<PathBuf> {
    let tbox = [[10, 0, 0, 2], [10, 1, 0, 2]];
    let gateway = [[192, 0, 2, 1], [198, 51, 100, 1]];
    let mut files = Vec::new();
    for path in 0..2 {
        let (mut at_tbox, mut at_gateway) = (Vec::new(), Vec::new());
        for sn in 0..MESSAGES {
            let mut payload = vec![0x42u8; 600];
            payload[..4].copy_from_slice(&sn.to_be_bytes());
            let sent = T0 + u64::from(sn) * 20 * MS;
            let ts = (sent / MS) as u32;
            let push = pcap_common::kcp_segment(7, 81, 0, 128, ts, sn, sn, &payload);
            let frame = udp(tbox[path], gateway[path], 40_000, 7_101, &push);
            let arrived = sent + DELAY_MS[path] * MS;
            at_tbox.push((sent, frame.len() as u32, frame.clone()));
            at_gateway.push((arrived + GATEWAY_AHEAD_MS * MS, frame.len() as u32, frame));
            let ack = pcap_common::kcp_segment(7, 82, 0, 128, ts, sn, sn + 1, &[]);
            let frame = udp(gateway[path], tbox[path], 7_101, 40_000, &ack);
            let acked = arrived + MS;
            at_gateway.push((
                acked + GATEWAY_AHEAD_MS * MS,
                frame.len() as u32,
                frame.clone(),
            ));
            at_tbox.push((acked + DELAY_MS[path] * MS, frame.len() as u32, frame));
        }
        for (name, mut packets) in [
            (format!("t-eth{path}"), at_tbox),
            (format!("gw-g{path}"), at_gateway),
        ] {
            packets.sort_by_key(|p| p.0);
            let file = dir.join(format!("{name}.pcap"));
            std::fs::write(&file, pcap_common::pcap(1, true, false, &packets)).unwrap();
            files.push(file);
        }
    }
    files
}

fn analyze(files: &[PathBuf], flags: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tboxscope"))
        .arg("analyze")
        .args(flags)
        .args(["--json", "-"])
        .args(files)
        .output()
        .unwrap()
}

fn summary(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["type"] == "summary")
        .unwrap()
}

/// Each path's exact largest one-way latency (µs), by label.
fn max_latency_us(s: &Value) -> Vec<(String, u64)> {
    s["latency"]["per_path"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p[0].as_str().unwrap().to_owned(),
                p[1]["max_us"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn inferences(s: &Value) -> Vec<String> {
    s["health"]["inferences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn inferred_by_itself_or_stated_by_flags() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_captures(dir.path());
    let one_way = |extra_ms: u64| {
        vec![
            ("t-eth0".to_owned(), (DELAY_MS[0] + extra_ms) * 1000),
            ("t-eth1".to_owned(), (DELAY_MS[1] + extra_ms) * 1000),
        ]
    };

    // By itself: both pairs, the T-Box ends, the gateway's clock 300 ms ahead, exact latency.
    let s = summary(&analyze(&files, &[]));
    let said = inferences(&s);
    for (t, g) in [("t-eth0", "gw-g0"), ("t-eth1", "gw-g1")] {
        let pair = format!("captures `{t}` and `{g}` show the same path at its two ends (same copies with the same addresses); `{t}` is on the T-Box (it saw client-to-server copies first)");
        assert!(said.contains(&pair), "{said:#?}");
        let offset = format!("clock offset of `{g}` estimated from copies in both directions: -300.000 ms (updated as traffic flows)");
        assert!(said.contains(&offset), "{said:#?}");
    }
    assert_eq!(max_latency_us(&s), one_way(0));
    let red = &s["redundancy"][0];
    assert_eq!(
        (red["mode"].as_str(), red["mode_forced"].as_bool()),
        (Some("kcp_sn"), Some(false))
    );
    assert_eq!(red["on_all_paths"], MESSAGES);

    // Stated: the pairs and hosts as given, and a clock offset 10 ms short of the truth, which
    // the latencies show exactly (the estimate would have corrected it).
    let s = summary(&analyze(
        &files,
        &[
            "--pair",
            "t-eth0=gw-g0",
            "--pair",
            "gw-g1=t-eth1",
            "--host",
            "t-eth1=tbox",
            "--clock-offset",
            "gw-g0=-290",
            "--clock-offset",
            "gw-g1=-290.0",
            "--match",
            "conv:7=kcp-sn",
        ],
    ));
    let said = inferences(&s);
    for line in [
        "clock offset of `gw-g0` given: -290.000 ms",
        "clock offset of `gw-g1` given: -290.000 ms",
        "captures `t-eth0` and `gw-g0` show the same path at its two ends (stated); `t-eth0` is on the T-Box (it saw client-to-server copies first)",
        "captures `t-eth1` and `gw-g1` show the same path at its two ends (stated); `t-eth1` is on the T-Box",
    ] {
        assert!(said.iter().any(|l| l == line), "{line}\n{said:#?}");
    }
    assert!(!said.iter().any(|l| l.contains("estimated")), "{said:#?}");
    assert_eq!(max_latency_us(&s), one_way(10));
    let red = &s["redundancy"][0];
    assert_eq!(red["mode_forced"], true);
    assert_eq!(red["on_all_paths"], MESSAGES);

    // A statement about a capture no file has fails the run, naming the label.
    let out = analyze(&files, &["--host", "t-eth2=tbox"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no capture is labelled t-eth2"), "{err}");
    // And a malformed one is refused before anything runs.
    let out = analyze(&files, &["--match", "port:x=content"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("selector must be port:N, conv:N or conn:LABEL"),
        "{err}"
    );
}
