//! Conversation tracking: the fixture's RTTs, message and timeout backoff; synthetic copies across
//! paths, fast resends, window probes and stalls, bounded memory.

mod kcp_common;

use tboxscope_decode::kcp::{
    Cmd, ConvEvent, ConvKey, ConvTracker, ConvTrackerConfig, Detector, Direction, KcpSegment,
    Observation, ResendKind,
};

const KEY: ConvKey = ConvKey { scope: 0, conv: 10 };

fn run_fixture() -> (ConvTracker, Vec<ConvEvent>) {
    let frames = kcp_common::read_udp_frames(&kcp_common::fixture_path());
    let mut detector = Detector::default();
    let mut tracker = ConvTracker::default();
    let mut events = Vec::new();
    for f in &frames {
        let Some(segments) = detector
            .classify(f.src_port, f.dst_port, &f.payload)
            .segments()
        else {
            continue;
        };
        // The server listens on 8000; frames 45-50 are the client's with rewritten ports.
        let direction = if f.src_port == 8000 {
            Direction::Down
        } else {
            Direction::Up
        };
        for s in segments {
            let obs = Observation {
                time_ns: f.time_ns,
                direction,
                path: 0,
                scope: 0,
            };
            tracker.observe(obs, &s.summary(), &mut events);
        }
    }
    (tracker, events)
}

#[test]
fn fixture_rtt_from_echoed_ts() {
    let (tracker, events) = run_fixture();
    let rtts: Vec<(Direction, u32, u32, u64)> = events
        .iter()
        .filter_map(|e| match *e {
            ConvEvent::Rtt {
                direction,
                sn,
                attempt,
                rtt_ns,
                ..
            } => Some((direction, sn, attempt, rtt_ns)),
            _ => None,
        })
        .collect();
    // Capture times (µs) from the pcap: PUSH first seen → ACK echoing its ts.
    assert_eq!(
        rtts,
        vec![
            (Direction::Up, 0, 1, 10_081_000), // frame 1 → 2
            (Direction::Up, 1, 1, 10_147_000), // frame 3 → 5
            (Direction::Up, 2, 1, 10_135_000), // frame 4 → 5 (batched ACK)
            (Direction::Down, 0, 1, 323_000),  // frame 18 → 21
            (Direction::Down, 1, 1, 316_000),  // frame 22 → 24
            (Direction::Down, 2, 1, 308_000),  // frame 23 → 24
        ]
    );
    assert!(tracker.srtt_ns(KEY, Direction::Up).is_some());
}

#[test]
fn fixture_messages_and_timeout_backoff() {
    let (tracker, events) = run_fixture();
    let messages: Vec<_> = events
        .iter()
        .filter_map(|e| match *e {
            ConvEvent::Message {
                direction,
                first_sn,
                fragments,
                bytes,
                complete,
                ..
            } => Some((direction, first_sn, fragments, bytes, complete)),
            _ => None,
        })
        .collect();
    assert_eq!(
        messages,
        vec![
            (Direction::Up, 0, 3, 4000, true),
            (Direction::Down, 0, 3, 4000, true)
        ]
    );
    // sn 3 and 4 (frg 2 and 1 of the next message) are resent 7 times each on timeout, with the
    // sender's backoff visible in the ts gaps; no ACK ever comes back.
    for sn in [3, 4] {
        let gaps: Vec<(u32, u32)> = events
            .iter()
            .filter_map(|e| match *e {
                ConvEvent::Retransmission {
                    sn: s,
                    kind,
                    ts_gap_ms,
                    attempt,
                    skip_acks,
                    ..
                } if s == sn => {
                    assert_eq!(kind, ResendKind::Timeout);
                    assert_eq!(skip_acks, 0);
                    Some((attempt, ts_gap_ms))
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            gaps,
            vec![
                (2, 120),
                (3, 200),
                (4, 400),
                (5, 800),
                (6, 1600),
                (7, 3201),
                (8, 6400)
            ]
        );
    }
    let stats = tracker.conv_stats(KEY).unwrap();
    assert_eq!(stats.pushes, [5, 3]);
    assert_eq!(stats.bytes, [4000 + 2 * 1448, 4000]);
    assert_eq!(stats.timeout_resends, [14, 0]);
    assert_eq!(stats.fast_resends, [0, 0]);
    assert_eq!(stats.acks, [3, 3]);
    assert_eq!(stats.rtt_samples, [3, 3]);
    assert_eq!(stats.copies, [0, 0]);
    assert_eq!(stats.stalls, [0, 0]);
    // The fixture has no WASK/WINS segment (its README mentions window probes; there are none).
    assert_eq!(stats.window_probes, [0, 0]);
    assert!(!events
        .iter()
        .any(|e| matches!(e, ConvEvent::WindowProbe { .. })));
}

fn push(sn: u32, ts: u32, frg: u8, len: u32, una: u32) -> KcpSegment {
    KcpSegment {
        conv: 5,
        cmd: Cmd::Push,
        sn,
        una,
        ts,
        frg,
        wnd: 128,
        len,
    }
}
fn ack(sn: u32, ts: u32, una: u32) -> KcpSegment {
    KcpSegment {
        conv: 5,
        cmd: Cmd::Ack,
        sn,
        una,
        ts,
        frg: 0,
        wnd: 128,
        len: 0,
    }
}
fn at(ms: u64, direction: Direction, path: u16) -> Observation {
    Observation {
        time_ns: ms * 1_000_000,
        direction,
        path,
        scope: 7,
    }
}

#[test]
fn copies_on_two_paths_are_not_retransmissions() {
    let mut t = ConvTracker::default();
    let mut ev = Vec::new();
    // The same transmission on 4G (path 0) and 5G (path 1): 30 ms apart.
    t.observe(at(100, Direction::Up, 1), &push(0, 1000, 0, 50, 0), &mut ev);
    t.observe(at(130, Direction::Up, 0), &push(0, 1000, 0, 50, 0), &mut ev);
    // ACK comes back on both paths; the first gives the RTT from the earliest copy.
    t.observe(at(150, Direction::Down, 1), &ack(0, 1000, 1), &mut ev);
    t.observe(at(170, Direction::Down, 0), &ack(0, 1000, 1), &mut ev);
    let key = ConvKey { scope: 7, conv: 5 };
    assert!(ev.contains(&ConvEvent::Copy {
        key,
        direction: Direction::Up,
        sn: 0,
        path: 0,
        first_path: 1,
        delay_ns: 30_000_000,
        time_ns: 130_000_000,
    }));
    assert!(ev.contains(&ConvEvent::Rtt {
        key,
        direction: Direction::Up,
        sn: 0,
        attempt: 1,
        rtt_ns: 50_000_000,
        data_path: 1,
        ack_path: 1,
        time_ns: 150_000_000,
    }));
    let s = t.conv_stats(key).unwrap();
    assert_eq!(
        (
            s.copies,
            s.duplicate_acks,
            s.timeout_resends,
            s.fast_resends
        ),
        ([1, 0], [1, 0], [0, 0], [0, 0])
    );
    assert_eq!(s.messages, [1, 0]);
}

#[test]
fn fast_resend_versus_timeout_and_rtt_of_the_right_transmission() {
    let mut t = ConvTracker::default();
    let mut ev = Vec::new();
    let up = |ms| at(ms, Direction::Up, 0);
    let down = |ms| at(ms, Direction::Down, 0);
    // RTT sample of 20 ms first.
    t.observe(up(0), &push(0, 0, 0, 10, 0), &mut ev);
    t.observe(down(20), &ack(0, 0, 1), &mut ev);
    // sn 1 lost, sn 2 and 3 acknowledged: sn 1 resent 10 ms later = fast.
    t.observe(up(100), &push(1, 100, 0, 10, 0), &mut ev);
    t.observe(up(101), &push(2, 101, 0, 10, 0), &mut ev);
    t.observe(up(102), &push(3, 102, 0, 10, 0), &mut ev);
    t.observe(down(121), &ack(2, 101, 1), &mut ev);
    t.observe(down(122), &ack(3, 102, 1), &mut ev);
    t.observe(up(125), &push(1, 125, 0, 10, 0), &mut ev);
    // sn 4 lost with nothing after it: resent after 200 ms = timeout.
    t.observe(up(200), &push(4, 200, 0, 10, 0), &mut ev);
    t.observe(up(400), &push(4, 400, 0, 10, 0), &mut ev);
    // The ACK of sn 1 echoes the retransmission's ts: RTT from the retransmission (attempt 2).
    t.observe(down(146), &ack(1, 125, 4), &mut ev);
    let resends: Vec<_> = ev
        .iter()
        .filter_map(|e| match *e {
            ConvEvent::Retransmission {
                sn,
                kind,
                skip_acks,
                ts_gap_ms,
                ..
            } => Some((sn, kind, skip_acks, ts_gap_ms)),
            _ => None,
        })
        .collect();
    assert_eq!(
        resends,
        vec![
            (1, ResendKind::Fast, 2, 25),
            (4, ResendKind::Timeout, 0, 200)
        ]
    );
    let rtt = ev.iter().rev().find_map(|e| match *e {
        ConvEvent::Rtt {
            sn: 1,
            attempt,
            rtt_ns,
            ..
        } => Some((attempt, rtt_ns)),
        _ => None,
    });
    assert_eq!(rtt, Some((2, 21_000_000)));
}

#[test]
fn out_of_order_fragments_reassemble_in_sn_order() {
    let mut t = ConvTracker::default();
    let mut ev = Vec::new();
    let up = |ms| at(ms, Direction::Up, 0);
    t.observe(up(1), &push(0, 1, 0, 5, 0), &mut ev); // message of one fragment
    t.observe(up(2), &push(3, 2, 0, 7, 0), &mut ev); // last fragment of sn 1..3 first
    t.observe(up(3), &push(1, 2, 2, 100, 0), &mut ev);
    t.observe(up(4), &push(2, 2, 1, 100, 0), &mut ev);
    let msgs: Vec<_> = ev
        .iter()
        .filter_map(|e| match *e {
            ConvEvent::Message {
                first_sn,
                fragments,
                bytes,
                first_ns,
                complete_ns,
                complete,
                ..
            } => Some((
                first_sn,
                fragments,
                bytes,
                first_ns / 1_000_000,
                complete_ns / 1_000_000,
                complete,
            )),
            _ => None,
        })
        .collect();
    assert_eq!(msgs, vec![(0, 1, 5, 1, 1, true), (1, 3, 207, 2, 4, true)]);
}

#[test]
fn capture_starting_mid_message_is_reported_incomplete() {
    let mut t = ConvTracker::default();
    let mut ev = Vec::new();
    t.observe(at(1, Direction::Down, 0), &push(41, 1, 1, 100, 0), &mut ev);
    t.observe(at(2, Direction::Down, 0), &push(42, 1, 0, 10, 0), &mut ev);
    t.observe(at(3, Direction::Down, 0), &push(43, 1, 0, 10, 0), &mut ev);
    let complete: Vec<bool> = ev
        .iter()
        .filter_map(|e| match *e {
            ConvEvent::Message { complete, .. } => Some(complete),
            _ => None,
        })
        .collect();
    assert_eq!(complete, vec![false, true]);
}

#[test]
fn window_probes_and_stalls() {
    let mut t = ConvTracker::default();
    let mut ev = Vec::new();
    let mut zero = ack(0, 0, 0);
    zero.wnd = 0;
    // The T-Box advertises a zero window: downlink data is blocked.
    t.observe(at(10, Direction::Up, 0), &zero, &mut ev);
    t.observe(at(20, Direction::Up, 0), &zero, &mut ev);
    let wask = KcpSegment {
        cmd: Cmd::Wask,
        ..ack(0, 0, 0)
    };
    t.observe(at(7010, Direction::Down, 0), &wask, &mut ev);
    let wins = KcpSegment {
        cmd: Cmd::Wins,
        wnd: 64,
        ..ack(0, 0, 0)
    };
    t.observe(at(7020, Direction::Up, 0), &wins, &mut ev);
    let key = ConvKey { scope: 7, conv: 5 };
    let shape: Vec<_> = ev
        .iter()
        .filter(|e| !matches!(e, ConvEvent::Rtt { .. }))
        .copied()
        .collect();
    assert_eq!(
        shape,
        vec![
            ConvEvent::StallStart {
                key,
                stalled: Direction::Down,
                time_ns: 10_000_000
            },
            ConvEvent::WindowProbe {
                key,
                direction: Direction::Down,
                cmd: Cmd::Wask,
                wnd: 128,
                time_ns: 7_010_000_000
            },
            ConvEvent::StallEnd {
                key,
                stalled: Direction::Down,
                duration_ns: 7_010_000_000,
                wnd: 64,
                time_ns: 7_020_000_000
            },
            ConvEvent::WindowProbe {
                key,
                direction: Direction::Up,
                cmd: Cmd::Wins,
                wnd: 64,
                time_ns: 7_020_000_000
            },
        ]
    );
    let s = t.conv_stats(key).unwrap();
    assert_eq!((s.stalls, s.window_probes), ([0, 1], [1, 1]));
    let json = serde_json::to_string(&ev[0]).unwrap();
    assert_eq!(
        json,
        r#"{"event":"stall_start","key":{"scope":7,"conv":5},"stalled":"down","time_ns":10000000}"#
    );
}

#[test]
fn memory_is_bounded_and_evictions_counted() {
    let mut t = ConvTracker::new(ConvTrackerConfig {
        max_convs: 4,
        max_tracked_sns: 64,
        ..ConvTrackerConfig::default()
    });
    let mut ev = Vec::new();
    // 10 000 unacknowledged segments near the sn wrap: at most 64 tracked.
    for i in 0..10_000u32 {
        let sn = (u32::MAX - 5_000).wrapping_add(i);
        t.observe(
            at(u64::from(i), Direction::Up, 0),
            &push(sn, i, 0, 1, 0),
            &mut ev,
        );
        ev.clear();
    }
    let s = t.conv_stats(ConvKey { scope: 7, conv: 5 }).unwrap();
    assert_eq!(s.pushes[0], 10_000);
    assert_eq!(s.evicted_sns[0], 10_000 - 64);
    // The first segment seen (not sn 0) may be the tail of a longer message: not complete.
    assert_eq!((s.messages[0], s.incomplete_messages[0]), (9_999, 1));
    // More conversations than allowed: the least recently active go.
    for conv in 0..10u32 {
        let seg = KcpSegment {
            conv,
            ..push(0, 0, 0, 1, 0)
        };
        t.observe(
            at(20_000 + u64::from(conv), Direction::Up, 0),
            &seg,
            &mut ev,
        );
    }
    assert_eq!(t.convs().count(), 4);
    assert_eq!(t.stats().evicted_convs, 7);
}

#[test]
fn a_gap_that_never_fills_is_given_up_on() {
    let mut t = ConvTracker::new(ConvTrackerConfig {
        max_tracked_sns: 8,
        ..ConvTrackerConfig::default()
    });
    let mut ev = Vec::new();
    t.observe(at(0, Direction::Up, 0), &push(0, 0, 0, 10, 0), &mut ev);
    // sn 1 never arrives; 2..=10 wait for it until the bound is hit.
    for sn in 2..=10 {
        t.observe(
            at(u64::from(sn), Direction::Up, 0),
            &push(sn, sn, 0, 10, 0),
            &mut ev,
        );
    }
    // Reassembly restarts at the next segment.
    t.observe(at(20, Direction::Up, 0), &push(11, 11, 0, 10, 0), &mut ev);
    let s = t.conv_stats(ConvKey { scope: 7, conv: 5 }).unwrap();
    assert_eq!(s.reassembly_dropped[0], 9);
    assert_eq!((s.messages[0], s.incomplete_messages[0]), (1, 1));
    assert_eq!(s.pushes[0], 11);
}
