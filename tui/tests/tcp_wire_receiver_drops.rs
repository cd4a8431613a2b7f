//! As root: real kernel TCP through a router that loses 3 % of the data on its way to the
//! receiver (holes at the receiver's capture), and a receiver whose own input drops 5 % of the
//! data segments after its capture point (nftables, input hook): some of the segments that
//! fill a hole arrive at the capture and are then dropped, and the hole stays until the next
//! copy. `tboxscope analyze` of the receiver's capture alone must not end a stall before the
//! receiver took the data at its hole, as the receiver's own ACKs in the capture say; and the
//! arrivals it counts as not taken by the receiver must be no more than the drops, and at
//! least a third of them (also from the capture begun mid-connection). Each hole the
//! receiver's ACKs show (SACK blocks above the cumulative ACK where there were none) is a
//! stall at the capture, also where the capture saw nothing missing (an arrival in order that
//! the receiver dropped): at least 95 % of them (a drop resent before the receiver can have
//! had it in hand is not judged, and has no stall; drops whose stall could not be made are
//! counted, `drops_without_stall`).
#[expect(dead_code, reason = "each test uses some of the shared helpers")]
mod tcp_common;

use std::io::Write;
use std::time::Duration;

use tcp_common::{
    analyze_json, connect_from, holes_stalled, nft_counted, nstat, sh, spawn_receiver,
    stalls_end_as_the_receiver_acks, tshark_fields, wire_direction, Routed, Tcpdump,
};

/// Data segments the receiver's TCP itself dropped after the input rule (out-of-order queue
/// or receive queue full, zero window, socket backlog): not taken either.
fn dropped_by_the_receivers_tcp(ns: &str) -> u64 {
    [
        "TcpExtTCPOFODrop",
        "TcpExtTCPRcvQDrop",
        "TcpExtTCPZeroWindowDrop",
        "TcpExtTCPBacklogDrop",
    ]
    .iter()
    .map(|name| nstat(ns, name))
    .sum()
}

#[test]
#[ignore = "needs root"]
fn a_fill_the_receiver_drops_does_not_end_the_stall_at_its_capture() {
    let chain = Routed::new(30);
    chain.one_segment_per_packet();
    let port = chain.server.port();
    sh(&[
        "ip",
        "netns",
        "exec",
        &chain.b,
        "nft",
        &format!(
            "table inet tbxrx {{ chain c {{ type filter hook input priority 0; \
             tcp dport {port} ip length > 80 numgen random mod 1000 < 50 counter drop; }}; }}"
        ),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("gateway.pcap");
    let dump = Tcpdump::start(&chain.b, &chain.dev_b, port, &pcap);
    let receiver = spawn_receiver(&chain.b, chain.server);
    let mut s = connect_from(&chain.a, chain.server);
    let local = s.local_addr().unwrap().to_string();
    let chunk = vec![0x5au8; 64 * 1024];
    for _ in 0..64 {
        s.write_all(&chunk).unwrap();
    }
    drop(s);
    assert_eq!(receiver.join().unwrap(), 64 * 64 * 1024);
    std::thread::sleep(Duration::from_millis(300));
    drop(dump);
    let log = std::fs::read_to_string(pcap.with_extension("log")).unwrap_or_default();
    assert!(
        log.lines()
            .any(|l| l.trim() == "0 packets dropped by kernel"),
        "tcpdump lost packets: {log}"
    );
    let (lost, by_rule) = (chain.dropped(), nft_counted(&chain.b, "tbxrx"));
    let dropped = by_rule + dropped_by_the_receivers_tcp(&chain.b);
    let line = format!("{lost} lost at the router, {dropped} dropped past the receiver's capture");
    if let Ok(keep) = std::env::var("TBX_KEEP_PCAP") {
        std::fs::copy(&pcap, format!("{keep}.receiver-drops.pcap")).unwrap();
    }
    assert!(lost > 10 && dropped > 10, "{line}");
    let checked = stalls_end_as_the_receiver_acks(&pcap, port, &line);
    // The arrivals its ACKs never took, beside the drops: equal in tcp_wire_vs_kernel (no
    // loss before the capture). Here, with holes from upstream, a receiver may hold ranges its
    // ACKs do not list (more than its SACK option's room) and the sender resends them: those
    // are not judged, so the count is a lower bound, never above the drops (2026-12-06, eight
    // runs: 102–173 for 125–174 drops, 0 too many by sequence number against a log of the
    // drops in one of them).
    // The holes the receiver's ACKs show, each a stall: before 2026-12-06 only those the
    // capture saw too (lost upstream) were, 32–51 % of them on ten kept captures and four
    // of them cut mid-connection; since, all of them.
    let verdicts = |pcap: &std::path::Path| {
        let lines = analyze_json(&[pcap]);
        let direction = wire_direction(&lines, &local);
        let count = |k: &str| direction.as_ref().and_then(|d| d[k].as_u64()).unwrap_or(0);
        let (stalled, holes) = holes_stalled(pcap, port, &lines);
        let without = count("drops_without_stall");
        eprintln!(
            "{}: {stalled} of {holes} holes at the receiver stalls, {without} drops without",
            pcap.display()
        );
        assert!(
            stalled * 20 >= holes * 19,
            "{line}: of {holes} holes the receiver's ACKs show, {stalled} are stalls ({without} \
             drops without their stall)"
        );
        (count("arrivals_not_taken"), count("arrivals_not_judged"))
    };
    let (not_taken, not_judged) = verdicts(&pcap);
    eprintln!(
        "{line}; {checked} stalls checked; arrivals not taken {not_taken}, not judged {not_judged}"
    );
    assert!(
        not_taken <= dropped && not_taken * 3 >= dropped,
        "{not_taken} arrivals not taken ({not_judged} not judged) for {dropped} drops"
    );
    // Begun mid-connection (its first third cut off, no handshake): the same verdicts on what
    // it saw (on eight kept captures, 65–75 % of the whole's count).
    let frames = tshark_fields(&pcap, "frame", &["frame.number"]).len();
    let mid = pcap.with_file_name("gateway-mid.pcap");
    sh(&[
        "editcap",
        "-r",
        pcap.to_str().unwrap(),
        mid.to_str().unwrap(),
        &format!("{}-{frames}", frames / 3 + 1),
    ]);
    let (mid_not_taken, mid_not_judged) = verdicts(&mid);
    eprintln!(
        "from frame {}: not taken {mid_not_taken}, not judged {mid_not_judged}",
        frames / 3 + 1
    );
    assert!(
        mid_not_taken <= not_taken && mid_not_taken * 3 >= not_taken,
        "begun mid-connection: {mid_not_taken} not taken ({mid_not_judged} not judged), the \
         whole capture {not_taken}"
    );
}
