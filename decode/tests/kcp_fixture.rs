//! The raw-KCP fixture (nDPI's kcp.pcap) decodes segment by segment, with tshark's `udp.payload`
//! as the reference bytes (checked in under tests/data; compared with a live tshark by an ignored
//! test, which `cargo xtask test` runs).
#![expect(clippy::too_many_arguments)]

#[expect(dead_code, reason = "each test uses some of the shared helpers")]
mod kcp_common;

use tboxscope_decode::kcp::{Cmd, Detection, Detector, KcpSegment, RejectReason, Segment};

const TSHARK_REFERENCE: &str = include_str!("data/ndpi-kcp.tshark.tsv");

/// Frames that are not KCP: a keep-alive protocol whose datagrams start f0 0f f0 0f 01 00 ...
const NOT_KCP: [usize; 24] = [
    6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 19, 20, 25, 26, 29, 30, 37, 38, 41, 42, 43, 44,
];

fn seg(conv: u32, cmd: Cmd, sn: u32, una: u32, ts: u32, frg: u8, wnd: u16, len: u32) -> KcpSegment {
    KcpSegment {
        conv,
        cmd,
        sn,
        una,
        ts,
        frg,
        wnd,
        len,
    }
}

/// The expected decode of every KCP frame, written from the hex by hand (conv 10 throughout).
fn expected() -> Vec<(usize, Vec<KcpSegment>)> {
    use Cmd::{Ack, Push};
    let p = |sn, una, ts, frg, len| seg(10, Push, sn, una, ts, frg, 128, len);
    let a = |sn, una, ts, wnd| seg(10, Ack, sn, una, ts, 0, wnd, 0);
    vec![
        (1, vec![p(0, 0, 20, 2, 1448)]),
        (2, vec![a(0, 1, 20, 127)]),
        (3, vec![p(1, 0, 40, 1, 1448)]),
        (4, vec![p(2, 0, 40, 0, 1104)]),
        (5, vec![a(1, 3, 40, 128), a(2, 3, 40, 128)]),
        (18, vec![p(0, 3, 1010, 2, 1448)]),
        (21, vec![a(0, 1, 1010, 127)]),
        (22, vec![p(1, 3, 1020, 1, 1448)]),
        (23, vec![p(2, 3, 1020, 0, 1104)]),
        (24, vec![a(1, 3, 1020, 128), a(2, 3, 1020, 128)]),
        (27, vec![p(3, 3, 3000, 2, 1448)]),
        (28, vec![p(4, 3, 3000, 1, 1448)]),
        (31, vec![p(3, 3, 3120, 2, 1448)]),
        (32, vec![p(4, 3, 3120, 1, 1448)]),
        (33, vec![p(3, 3, 3320, 2, 1448)]),
        (34, vec![p(4, 3, 3320, 1, 1448)]),
        (35, vec![p(3, 3, 3720, 2, 1448)]),
        (36, vec![p(4, 3, 3720, 1, 1448)]),
        (39, vec![p(3, 3, 4520, 2, 1448)]),
        (40, vec![p(4, 3, 4520, 1, 1448)]),
        (45, vec![p(3, 3, 6120, 2, 1448)]),
        (46, vec![p(4, 3, 6120, 1, 1448)]),
        (47, vec![p(3, 3, 9321, 2, 1448)]),
        (48, vec![p(4, 3, 9321, 1, 1448)]),
        (49, vec![p(3, 3, 15721, 2, 1448)]),
        (50, vec![p(4, 3, 15721, 1, 1448)]),
    ]
}

#[test]
fn fixture_payloads_match_tshark_reference() {
    let frames = kcp_common::read_udp_frames(&kcp_common::fixture_path());
    let reference = kcp_common::parse_tshark_payloads(TSHARK_REFERENCE);
    assert_eq!(frames.len(), 50);
    assert_eq!(reference.len(), 50);
    for (frame, (number, payload)) in frames.iter().zip(&reference) {
        assert_eq!(frame.number, *number);
        assert_eq!(&frame.payload, payload, "frame {number}");
    }
}

#[test]
#[ignore = "needs tshark"]
fn fixture_tshark_live_matches_checked_in_reference() {
    let out = std::process::Command::new("tshark")
        .args(["-r", &kcp_common::fixture_path(), "-T", "fields"])
        .args(["-e", "frame.number", "-e", "udp.payload"])
        .output()
        .expect("tshark runs");
    assert!(out.status.success(), "tshark failed");
    let live = kcp_common::parse_tshark_payloads(&String::from_utf8(out.stdout).unwrap());
    assert_eq!(live, kcp_common::parse_tshark_payloads(TSHARK_REFERENCE));
}

#[test]
fn fixture_decodes_segment_by_segment() {
    let reference = kcp_common::parse_tshark_payloads(TSHARK_REFERENCE);
    let mut expected = expected().into_iter().peekable();
    let mut detector = Detector::default();
    for (number, payload) in &reference {
        // Ports deliberately 0: detection must not need them.
        let detection = detector.classify(0, 0, payload);
        if NOT_KCP.contains(number) {
            assert_eq!(
                detection,
                Detection::NotKcp(RejectReason::UnknownCmd),
                "frame {number} must be rejected"
            );
            continue;
        }
        let (want_number, want) = expected.next().unwrap();
        assert_eq!(want_number, *number);
        let Detection::Raw(datagram) = detection else {
            panic!("frame {number}: {detection:?}");
        };
        let got: Vec<KcpSegment> = datagram.segments().map(|s| s.summary()).collect();
        assert_eq!(got, want, "frame {number}");
        // Payload bytes of PUSH segments are the test pattern 0,1,2,... continued across fragments.
        for s in datagram.segments() {
            assert_eq!(s.payload().len(), s.len() as usize);
            if s.cmd() == Cmd::Push {
                let start = (2 - u32::from(s.frg())) * 1448;
                for (i, b) in s.payload().iter().enumerate() {
                    assert_eq!(u32::from(*b), (start + i as u32) % 256, "frame {number}");
                }
            }
        }
    }
    assert!(expected.next().is_none());
    let stats = detector.stats();
    assert_eq!(stats.raw, 26);
    assert_eq!(stats.segments, 28);
    assert_eq!(stats.rejected_for(RejectReason::UnknownCmd), 24);
    assert_eq!(stats.rejected_total(), 24);
}

#[test]
fn fixture_frg_run_and_echoed_ts() {
    let reference = kcp_common::parse_tshark_payloads(TSHARK_REFERENCE);
    let by_frame = |n: usize| {
        let payload = &reference.iter().find(|(k, _)| *k == n).unwrap().1;
        tboxscope_decode::kcp::decode_strict(payload)
            .unwrap()
            .iter()
            .map(Segment::summary)
            .collect::<Vec<_>>()
    };
    // frg 2/1/0 run: sn 0,1,2 of one 4000-byte message (1448 + 1448 + 1104).
    let run: Vec<KcpSegment> = [1, 3, 4].iter().flat_map(|&n| by_frame(n)).collect();
    assert_eq!(run.iter().map(|s| s.frg).collect::<Vec<_>>(), [2, 1, 0]);
    assert_eq!(run.iter().map(|s| s.sn).collect::<Vec<_>>(), [0, 1, 2]);
    assert_eq!(run.iter().map(|s| s.len).sum::<u32>(), 4000);
    // Batched ACKs (two in one datagram) echo the ts of the PUSH they acknowledge.
    let acks = by_frame(5);
    assert_eq!(acks.len(), 2);
    for ack in &acks {
        let push = run.iter().find(|p| p.sn == ack.sn).unwrap();
        assert_eq!(ack.ts, push.ts);
    }
}
