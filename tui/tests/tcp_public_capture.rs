//! `tboxscope analyze` of a public TCP capture made by others (`fixtures/smtp.pcap`, the
//! Wireshark sample of an SMTP session, see `fixtures/README.md`), with tshark's TCP analysis
//! as the oracle. The client's first full-sized segments exceed the path MTU: four ICMP
//! "fragmentation needed" come back and the client sends the same bytes again in smaller
//! segments, retransmissions tboxscope says were for the path MTU. Later, the client stays
//! silent for 2.4 s (its user) before QUIT.
#[expect(dead_code, reason = "each test uses some of the shared helpers")]
mod tcp_common;

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::Value;
use tcp_common::{analyze_json, sh};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/smtp.pcap");
const CLIENT: &str = "10.10.1.4:1470";

fn tshark_fields(filter: &str, fields: &[&str]) -> Vec<Vec<String>> {
    tcp_common::tshark_fields(std::path::Path::new(FIXTURE), filter, fields)
}

#[test]
fn smtp_resends_after_path_mtu_match_tshark_and_the_idle_user_is_no_outage() {
    let records = analyze_json(&[FIXTURE]);
    let resent: Vec<&Value> = records
        .iter()
        .filter(|r| r["type"] == "tcp_retransmit")
        .collect();
    for r in &resent {
        assert_eq!(
            (&r["source"], &r["src"]),
            (&"wire".into(), &CLIENT.into()),
            "{r}"
        );
        // Each resends bytes of a segment a router's ICMP "fragmentation needed" quoted,
        // after it came: for the path MTU (no timer, no duplicate ACKs, no probe of the tail).
        assert_eq!(r["kind"], "path_mtu", "{r}");
    }
    let ours: BTreeSet<u64> = resent.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        ours.len(),
        resent.len(),
        "one record per resend: {resent:?}"
    );

    // tshark flags four of them as retransmissions and the first as "out-of-order" (it came
    // within its 3 ms threshold of the original)...
    let flagged = |flag: &str| -> BTreeSet<u64> {
        tshark_fields(&format!("{flag} && tcp.srcport == 1470"), &["tcp.seq_raw"])
            .iter()
            .map(|f| f[0].parse().unwrap())
            .collect()
    };
    let retransmissions = flagged("tcp.analysis.retransmission");
    let out_of_order = flagged("tcp.analysis.out_of_order");
    assert_eq!(retransmissions.len(), 4, "{retransmissions:?}");
    assert_eq!(out_of_order.len(), 1, "{out_of_order:?}");
    assert_eq!(
        ours,
        &retransmissions | &out_of_order,
        "tboxscope's resends against tshark's"
    );
    // ...but its bytes had left in an earlier, larger segment, the one the first ICMP
    // "fragmentation needed" quotes: a resend, not a reordered original.
    let first = *out_of_order.first().unwrap();
    let earlier = tshark_fields(
        &format!("tcp.seq_raw == {first} && tcp.srcport == 1470 && !icmp"),
        &["frame.number", "tcp.len"],
    );
    assert_eq!(earlier.len(), 2, "the original and the resend: {earlier:?}");
    assert!(earlier[0][1].parse::<u32>().unwrap() > earlier[1][1].parse::<u32>().unwrap());
    let quoted = tshark_fields("icmp.type == 3 && icmp.code == 4", &["icmp.mtu", "tcp.seq"]);
    assert_eq!(quoted.len(), 4, "{quoted:?}");
    assert_eq!(
        quoted[0],
        ["1492".to_owned(), first.to_string()],
        "{quoted:?}"
    );

    let summary = records.iter().find(|r| r["type"] == "summary").unwrap();
    // 2.4 s without a word from the server, after the client's bare ACK: the user, not the
    // path (was an outage of 2.857 s "while it kept sending").
    assert_eq!(summary["outages_total"], 0, "{}", summary["outages"]);

    // The client's smoothed RTT against the round trips tshark measured on the server's ACKs.
    let mut rtts: Vec<f64> = tshark_fields(
        "tcp.analysis.ack_rtt && tcp.srcport == 25",
        &["tcp.analysis.ack_rtt"],
    )
    .iter()
    .map(|f| f[0].parse().unwrap())
    .collect();
    rtts.sort_by(f64::total_cmp);
    let median_ms = rtts[rtts.len() / 2] * 1e3;
    let client = summary["tcp_wire"]["directions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["src"] == CLIENT)
        .unwrap();
    let srtt_ms = client["srtt_us"].as_f64().unwrap() / 1e3;
    assert!(
        (srtt_ms - median_ms).abs() < 0.15 * median_ms,
        "srtt {srtt_ms} ms, tshark's median {median_ms} ms"
    );
    assert_eq!(client["segments"], 25, "{client}");
    // The four ICMP messages, each about one of the client's segments, and the MTU they name.
    assert_eq!(client["path_mtu_signals"], 4, "{client}");
    assert_eq!(client["path_mtu"], 1492, "{client}");
    assert_eq!(summary["tcp_wire"]["path_mtu_unmatched"], 0);
    assert_eq!(summary["frames"]["path_mtu"], 4, "{}", summary["frames"]);
    // The path's share of data sends retransmitted, from the segments: 5 of the 33 that
    // carried data (both directions).
    let rate = summary["paths"][0]["retransmission_rate"].as_f64().unwrap();
    assert!((rate - 5.0 / 33.0).abs() < 1e-9, "{}", summary["paths"]);
    let quoted_seqs: BTreeSet<u64> = quoted.iter().map(|q| q[1].parse().unwrap()).collect();
    let lowest = *quoted_seqs.first().unwrap();
    assert!(
        ours.iter().all(|s| *s >= lowest),
        "{ours:?} {quoted_seqs:?}"
    );
    let report = Command::new(env!("CARGO_BIN_EXE_tboxscope"))
        .args(["analyze", FIXTURE])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(
        text.contains("5 retransmitted (5 path_mtu), 4 ICMP too-big signals from routers (path MTU 1492 bytes)")
            && text.contains("TCP: 53 segments; 4 ICMP too-big signals about segments"),
        "{text}"
    );
}

/// The same capture from its 8th frame on: no handshake, the session under way (a capture
/// started late). Its TTLs place it at the client's end — the Windows client's packets leave
/// at 128, the server's arrive at 50 — and the client's resends after the path MTU signals are
/// still its own, as in the whole capture.
#[test]
fn smtp_begun_mid_session_is_placed_by_its_ttls() {
    let dir = tempfile::tempdir().unwrap();
    let mid = dir.path().join("smtp-mid.pcap");
    sh(&["editcap", "-r", FIXTURE, mid.to_str().unwrap(), "8-60"]);
    let records = analyze_json(&[&mid]);
    let summary = records.iter().find(|r| r["type"] == "summary").unwrap();
    assert_eq!(
        summary["health"]["inferences"],
        serde_json::json!([format!(
            "capture `smtp-mid` is on the T-Box: at the client's end of {CLIENT} → \
             74.53.140.153:25 (the client's packets have TTL 128, the server's 50: the \
             client's leave this host at their first TTL)"
        )])
    );
    let kinds: Vec<(&Value, &Value)> = records
        .iter()
        .filter(|r| r["type"] == "tcp_retransmit")
        .map(|r| (&r["src"], &r["kind"]))
        .collect();
    assert_eq!(
        kinds,
        vec![(&Value::from(CLIENT), &Value::from("path_mtu")); 5],
        "{kinds:?}"
    );
}
