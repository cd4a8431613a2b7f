//! Shared by the tests of several captures: four pcap files — both ends of both paths, the
//! gateway's clock 300 ms ahead of the T-Box's — of a KCP flow dual-sent on both paths (40 ms
//! and 25 ms one way), every message acknowledged by the gateway 1 ms after it arrived.

use std::path::{Path, PathBuf};

use etherparse::PacketBuilder;

use tboxscope_test_support::pcap;

/// When the first message is sent (Unix epoch ns, T-Box clock).
pub const T0: u64 = 1_796_000_000_000_000_000;
/// One millisecond in ns.
pub const MS: u64 = 1_000_000;
/// Messages sent, 50 per second.
pub const MESSAGES: u32 = 200;
/// One-way delay of each path.
pub const DELAY_MS: [u64; 2] = [40, 25];
/// How far the gateway's clock is ahead of the T-Box's.
pub const GATEWAY_AHEAD_MS: u64 = 300;

/// An Ethernet frame holding one UDP datagram.
pub fn udp(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
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
pub fn write_captures(dir: &Path) -> Vec<PathBuf> {
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
            let push = pcap::kcp_segment(7, 81, 0, 128, ts, sn, sn, &payload);
            let frame = udp(tbox[path], gateway[path], 40_000, 7_101, &push);
            let arrived = sent + DELAY_MS[path] * MS;
            at_tbox.push((sent, frame.len() as u32, frame.clone()));
            at_gateway.push((arrived + GATEWAY_AHEAD_MS * MS, frame.len() as u32, frame));
            let ack = pcap::kcp_segment(7, 82, 0, 128, ts, sn, sn + 1, &[]);
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
            std::fs::write(&file, pcap::pcap(1, true, false, &packets)).unwrap();
            files.push(file);
        }
    }
    files
}
