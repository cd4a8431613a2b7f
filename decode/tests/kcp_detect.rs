//! Port-free detection: KCP is found, and no non-KCP UDP payload (DNS, QUIC, RTP-like, random)
//! is ever taken for KCP.
#![expect(clippy::unwrap_used)]

#[expect(dead_code, reason = "each test uses some of the shared helpers")]
mod kcp_common;

use kcp_common::encode;

use proptest::prelude::*;
use tboxscope_decode::kcp::{Detection, Detector, DetectorConfig, RejectReason};

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn not_kcp(payload: &[u8]) -> bool {
    let mut d = Detector::default();
    !d.classify(40000, 53, payload).is_kcp() && !d.classify(0, 0, payload).is_kcp()
}

#[test]
fn dns_query_and_answer_are_not_kcp() {
    // Query: id 0x1a2b, RD, 1 question "example.com" A IN.
    let query = hex("1a2b 0100 0001 0000 0000 0000 07 6578616d706c65 03 636f6d 00 0001 0001");
    // Answer: same question, one A record 93.184.216.34, TTL 3600, name pointer c00c.
    let answer = hex(
        "1a2b 8180 0001 0001 0000 0000 07 6578616d706c65 03 636f6d 00 0001 0001
         c00c 0001 0001 00000e10 0004 5db8d822",
    );
    // EDNS query with an OPT record (a 24+ byte payload of typical size).
    let edns = hex(
        "beef 0120 0001 0000 0000 0001 03 777777 06 676f6f676c65 03 636f6d 00 001c 0001
         00 0029 1000 0000 0000 0000",
    );
    for p in [&query, &answer, &edns] {
        assert!(not_kcp(p));
    }
}

#[test]
fn quic_packets_from_the_fixtures_are_not_kcp() {
    let mut count = 0;
    for file in [
        include_str!("data/quic-chrome.udp-payload.tsv"),
        include_str!("data/quic-initial.udp-payload.tsv"),
    ] {
        for (frame, payload) in kcp_common::parse_tshark_payloads(file) {
            assert!(not_kcp(&payload), "QUIC frame {frame} taken for KCP");
            count += 1;
        }
    }
    // Long headers (Initial, Handshake) and short headers (1-RTT) are both in there.
    assert_eq!(count, 35);
}

#[test]
fn raw_kcp_is_found_without_ports() {
    let mut d = Detector::default();
    let mut dgram = encode(7, 82, 0, 100, 5, 1, 9, b"");
    dgram.extend(encode(7, 83, 0, 100, 5, 1, 9, b""));
    dgram.extend(encode(7, 81, 1, 100, 6, 20, 9, &[1; 100]));
    let Detection::Raw(k) = d.classify(1, 2, &dgram) else {
        panic!()
    };
    assert_eq!(k.segment_count(), 3);
    assert_eq!(d.stats().raw, 1);
    assert_eq!(d.stats().segments, 3);
}

#[test]
fn each_rule_rejects_with_its_reason() {
    let mut d = Detector::default();
    let push = encode(7, 81, 0, 100, 5, 1, 9, b"abc");
    let cases: Vec<(Vec<u8>, RejectReason)> = vec![
        (vec![], RejectReason::Empty),
        (push[..23].to_vec(), RejectReason::TooShort),
        (
            encode(7, 80, 0, 100, 5, 1, 9, b""),
            RejectReason::UnknownCmd,
        ),
        (
            push[..push.len() - 1].to_vec(),
            RejectReason::TruncatedSegment,
        ),
        (
            [push.clone(), vec![0; 3]].concat(),
            RejectReason::TruncatedSegment,
        ),
        (
            encode(7, 82, 0, 100, 5, 1, 9, b"x"),
            RejectReason::ControlWithPayload,
        ),
        (
            encode(7, 84, 1, 100, 5, 1, 9, b""),
            RejectReason::ControlWithFragment,
        ),
        (
            encode(7, 81, 2, 100, 5, 1, 9, b""),
            RejectReason::FragmentWithoutPayload,
        ),
        (
            [push.clone(), encode(8, 81, 0, 100, 5, 2, 9, b"")].concat(),
            RejectReason::ConvMismatch,
        ),
        (
            [push.clone(), encode(7, 81, 0, 100, 5, 2, 10, b"")].concat(),
            RejectReason::UnaMismatch,
        ),
        (
            [push.clone(), encode(7, 81, 0, 99, 5, 2, 9, b"")].concat(),
            RejectReason::WndMismatch,
        ),
    ];
    for (payload, reason) in &cases {
        assert_eq!(
            d.classify(1, 2, payload),
            Detection::NotKcp(*reason),
            "{reason}"
        );
    }
    for (_, reason) in &cases {
        assert!(d.stats().rejected_for(*reason) >= 1, "{reason} counted");
    }
    assert_eq!(d.stats().rejected_total(), cases.len() as u64);
    // Rule 6 can be switched off.
    let mut lenient = Detector::new(DetectorConfig {
        require_uniform_una_wnd: false,
        ..DetectorConfig::default()
    });
    assert!(lenient.classify(1, 2, &cases[9].0).is_kcp());
}

#[test]
fn forced_port_relaxes_plausibility_and_reports_encrypted() {
    let mut d = Detector::new(DetectorConfig {
        forced_ports: vec![4000],
        ..DetectorConfig::default()
    });
    // A PUSH with frg>0 and no payload: implausible, accepted on the forced port only.
    let odd = encode(7, 81, 2, 100, 5, 1, 9, b"");
    assert!(d.classify(4000, 5555, &odd).is_kcp());
    assert!(!d.classify(4001, 5555, &odd).is_kcp());
    // Random-looking bytes on the forced port: encrypted kcp-go or unknown.
    let random: Vec<u8> = (0..200u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    assert!(matches!(
        d.classify(5555, 4000, &random),
        Detection::EncryptedOrUnknown { .. }
    ));
    assert!(matches!(
        d.classify(5555, 4001, &random),
        Detection::NotKcp(_)
    ));
    assert_eq!(d.stats().encrypted_or_unknown, 1);
}

/// An RTP packet: version 2, payload type, sequence, timestamp, SSRC, then payload.
fn rtp(pt: u8, marker: bool, seq: u16, ts: u32, ssrc: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0x80, pt | if marker { 0x80 } else { 0 }];
    v.extend_from_slice(&seq.to_be_bytes());
    v.extend_from_slice(&ts.to_be_bytes());
    v.extend_from_slice(&ssrc.to_be_bytes());
    v.extend_from_slice(payload);
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5_000))]

    /// Random payloads of any size: none decodes as KCP.
    #[test]
    fn random_payloads_are_never_kcp(bytes in proptest::collection::vec(any::<u8>(), 0..1500)) {
        prop_assert!(not_kcp(&bytes));
    }

    /// RTP-like payloads (real header, random media): none decodes as KCP.
    #[test]
    fn rtp_like_payloads_are_never_kcp(
        pt in 0u8..128, marker: bool, seq: u16, ts: u32, ssrc: u32,
        media in proptest::collection::vec(any::<u8>(), 0..1400),
    ) {
        prop_assert!(not_kcp(&rtp(pt, marker, seq, ts, ssrc, &media)));
    }

    /// Random payloads whose byte 4 is a valid KCP command (the hardest random case).
    #[test]
    fn random_payloads_with_a_kcp_cmd_byte_are_never_kcp(
        mut bytes in proptest::collection::vec(any::<u8>(), 24..1500), cmd in 81u8..=84,
    ) {
        bytes[4] = cmd;
        prop_assert!(not_kcp(&bytes));
    }

    /// Random payloads with an FEC type at bytes 4..6 are never kcp-go either.
    #[test]
    fn random_payloads_with_an_fec_type_are_never_kcpgo(
        mut bytes in proptest::collection::vec(any::<u8>(), 8..1500), t in 0xf1u8..=0xf3,
    ) {
        bytes[4] = t;
        bytes[5] = 0;
        prop_assert!(not_kcp(&bytes));
    }
}

/// A datagram the capture cut anywhere from its first header's end on: the segments whose
/// header is in the captured bytes, the one the cut ends with its payload as captured, what
/// is past the last one seen counted unseen; cut in the first header, nothing.
#[test]
fn a_cut_datagram_is_its_segments_as_far_as_captured() {
    let segments = [
        encode(7, 81, 1, 100, 5, 1, 9, &[1; 100]),
        encode(7, 81, 0, 100, 5, 2, 9, &[2; 30]),
        encode(7, 82, 0, 100, 5, 0, 9, b""),
    ];
    let whole = segments.concat();
    let starts = [0usize, 124, 178];
    let mut d = Detector::default();
    for n in 0..whole.len() {
        let cut = d.classify_cut(1, 2, &whole[..n], whole.len());
        if n < 24 {
            assert!(!cut.is_kcp(), "cut at {n}");
            continue;
        }
        let Detection::Raw(k) = cut else {
            panic!("cut at {n}: {cut:?}")
        };
        let seen: Vec<_> = k.segments().collect();
        let in_sight = starts.iter().filter(|s| **s + 24 <= n).count();
        assert_eq!(seen.len(), in_sight, "cut at {n}");
        assert_eq!(k.segment_count(), in_sight, "cut at {n}");
        for (i, s) in seen.iter().enumerate() {
            assert_eq!(s.sn(), [1, 2, 0][i], "cut at {n}");
            assert_eq!(s.len(), [100, 30, 0][i], "cut at {n}: the header's length");
            let captured = (n - starts[i] - 24).min(s.len() as usize);
            assert_eq!(s.payload().len(), captured, "cut at {n}");
            assert_eq!(s.is_cut(), captured < s.len() as usize, "cut at {n}");
        }
        let last = seen
            .last()
            .map_or(0, |s| starts[seen.len() - 1] + 24 + s.len() as usize);
        assert_eq!(k.unseen_bytes(), whole.len() - last, "cut at {n}");
    }
    // Not cut at all (the caller's check) is still a valid reading.
    assert!(d.classify_cut(1, 2, &whole, whole.len()).is_kcp());
}

/// A cut datagram follows the same rules as a whole one, judged by its headers; a segment
/// longer than the datagram's declared length is not KCP; what is not KCP is left for the
/// caller to count (a truncated frame).
#[test]
fn a_cut_datagram_follows_the_rules_by_its_headers() {
    let mut d = Detector::default();
    let ack_with_data = encode(7, 82, 0, 100, 5, 1, 9, &[0; 40]);
    assert_eq!(
        d.classify_cut(1, 2, &ack_with_data[..30], ack_with_data.len()),
        Detection::NotKcp(RejectReason::ControlWithPayload)
    );
    let push = encode(7, 81, 0, 100, 5, 1, 9, &[0; 40]);
    assert_eq!(
        d.classify_cut(1, 2, &push[..30], push.len() - 1),
        Detection::NotKcp(RejectReason::TruncatedSegment)
    );
    let other_conv = [push.clone(), encode(8, 81, 0, 100, 5, 2, 9, &[0; 40])].concat();
    assert_eq!(
        d.classify_cut(1, 2, &other_conv[..90], other_conv.len()),
        Detection::NotKcp(RejectReason::ConvMismatch)
    );
    let quic_like = [0xc0u8; 60];
    assert!(!d.classify_cut(1, 2, &quic_like, 1200).is_kcp());
    assert_eq!(d.stats().rejected_total(), 0, "the caller counts these");
    assert_eq!(d.stats().raw, 0);
    assert!(d.classify_cut(1, 2, &push[..30], push.len()).is_kcp());
    assert_eq!((d.stats().raw, d.stats().segments), (1, 1));
}
