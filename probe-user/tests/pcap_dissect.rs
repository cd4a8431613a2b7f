//! The dissector on synthetic UDP: random and structured non-KCP/QUIC payloads give no records,
//! and UDP GSO batches of QUIC short headers are split only when every segment matches.

use probe_user::decode::net::LinkType;
use probe_user::dissect::{gso_segment_size, Decoded, DissectConfig, Dissector};
use tboxscope_test_support::pcap::{ipv4_udp, kcp_segment};

fn xorshift(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

#[test]
fn random_udp_payloads_decode_as_nothing() {
    let mut d = Dissector::new(DissectConfig::default());
    let mut seed = 0x1234_5678_9abc_def1u64;
    let mut out = Vec::new();
    for i in 0..20_000 {
        let len = (xorshift(&mut seed) % 1400) as usize;
        let payload: Vec<u8> = (0..len).map(|_| xorshift(&mut seed) as u8).collect();
        let sport = 1024 + (i % 5000) as u16;
        let frame = ipv4_udp(sport, 53 + (i % 3) as u16 * 1000, &payload);
        d.dissect(Some(LinkType::RawIp), "test", &frame, i, &mut out);
    }
    assert!(out.is_empty(), "{:?}", out.first());
    let s = d.stats();
    assert_eq!((s.udp, s.other_udp), (20_000, 20_000));
}

#[test]
fn kcp_segments_are_decoded_with_their_payload_position() {
    let mut d = Dissector::new(DissectConfig::default());
    let mut payload = kcp_segment(7, 81, 1, 32, 100, 5, 4, b"hello");
    payload.extend(kcp_segment(7, 82, 0, 32, 90, 3, 4, b""));
    let frame = ipv4_udp(4000, 5000, &payload);
    let mut out = Vec::new();
    assert_eq!(
        d.dissect(Some(LinkType::RawIp), "test", &frame, 9, &mut out),
        2
    );
    let Decoded::KcpSegment(push) = &out[0].decoded else {
        panic!()
    };
    let s = &push.header;
    assert_eq!(
        (s.cmd.as_str(), s.sn, s.frg, s.len, s.ts),
        ("push", 5, 1, 5, 100)
    );
    let at = push.payload_at.unwrap() as usize;
    assert_eq!(&frame[at..at + 5], b"hello");
    let Decoded::KcpSegment(ack) = &out[1].decoded else {
        panic!()
    };
    assert_eq!((ack.header.cmd.as_str(), ack.index), ("ack", 1));
}

#[test]
fn gso_batches_are_recognised_only_when_every_segment_matches() {
    let cid = [9u8, 8, 7, 6, 5, 4, 3, 2];
    let segment = |first: u8, len: usize, fill: u8| {
        let mut s = vec![first];
        s.extend(cid);
        s.resize(len, fill);
        s
    };
    let mut batch = Vec::new();
    for (i, first) in [0x41u8, 0x05, 0x47].iter().enumerate() {
        batch.extend(segment(*first, 1350, i as u8));
    }
    batch.extend(segment(0x43, 200, 9));
    assert_eq!(gso_segment_size(&batch), Some(1350));
    // One segment with another connection ID: not a batch.
    let mut broken = batch.clone();
    broken[1350 * 2 + 3] ^= 1;
    assert_eq!(gso_segment_size(&broken), None);
    // Small datagrams, long headers and random bytes are never split.
    assert_eq!(gso_segment_size(&batch[..1400]), None);
    let mut long = batch.clone();
    long[0] = 0xc1;
    assert_eq!(gso_segment_size(&long), None);
    let mut seed = 77u64;
    let random: Vec<u8> = (0..9000)
        .map(|_| (xorshift(&mut seed) as u8) & 0x7f)
        .collect();
    assert_eq!(gso_segment_size(&random), None);
}
