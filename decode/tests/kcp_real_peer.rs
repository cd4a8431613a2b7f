//! Traffic from a real KCP implementation nobody here wrote (the `kcp` crate, a port of ikcp):
//! two endpoints exchange messages over a simulated lossy link on a virtual clock; every datagram
//! is captured at the client and read with the detector and the segment decoder alone. The
//! decoded fields must tell exactly the messages sent (their bytes, from the fragment runs), the
//! retransmissions of the lost segments and their timestamps, ACKs echoing the timestamps of the
//! transmissions they acknowledge, and the receive window closing and being probed.
//! (The engine's analysis of the same peers runs in probe-user's `pcap_live_kcp`.)

#![expect(clippy::unwrap_used)]

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::Write;
use std::rc::Rc;

use kcp::Kcp;
use tboxscope_decode::kcp::{Cmd, Detection, Detector, KcpSegment};

const CONV: u32 = 0x5eed_0001;
const ONE_WAY_MS: u32 = 20;

/// Which way a datagram goes, seen from the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    /// Client to server.
    Up,
    /// Server to client.
    Down,
}

/// Collects what a KCP endpoint writes: one `write` call is one datagram.
#[derive(Clone, Default)]
struct Wire(Rc<RefCell<Vec<Vec<u8>>>>);

impl Write for Wire {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().push(buf.to_vec());
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The capture at the client: (time ms, direction, datagram).
type Capture = Vec<(u32, Direction, Vec<u8>)>;

struct Run {
    capture: Capture,
    received: Vec<Vec<u8>>,
    dropped_sns: BTreeSet<u32>,
}

/// Runs client → server messages over the link; `drop` decides which client datagrams are lost
/// (after the capture point); `pause` is a span of server time during which its application
/// does not read (its receive window fills up).
fn run(
    messages: &[Vec<u8>],
    send_at: impl Fn(u32) -> bool,
    nodelay: bool,
    drop: impl Fn(u32, &[u8]) -> bool,
    pause: std::ops::Range<u32>,
    end_ms: u32,
) -> Run {
    let (cw, sw) = (Wire::default(), Wire::default());
    let mut client = Kcp::new(CONV, cw.clone());
    let mut server = Kcp::new(CONV, sw.clone());
    // Update every 10 ms, fast resend after 2 skipping ACKs, no congestion window; no-delay mode
    // (minimum RTO 30 ms) or normal mode (minimum RTO 100 ms).
    client.set_nodelay(nodelay, 10, 2, true);
    server.set_nodelay(nodelay, 10, 2, true);
    let mut to_server: VecDeque<(u32, Vec<u8>)> = VecDeque::new();
    let mut to_client: VecDeque<(u32, Vec<u8>)> = VecDeque::new();
    let mut capture = Vec::new();
    let mut received = Vec::new();
    let mut dropped_sns = BTreeSet::new();
    let mut sent = 0usize;
    let mut buf = vec![0u8; 1 << 16];
    for now in (0..end_ms).step_by(5) {
        // Deliver what has arrived.
        while to_server.front().is_some_and(|(t, _)| *t <= now) {
            let (_, d) = to_server.pop_front().unwrap();
            server.input(&d).unwrap();
        }
        while to_client.front().is_some_and(|(t, _)| *t <= now) {
            let (_, d) = to_client.pop_front().unwrap();
            // Captured at the client when it arrives.
            capture.push((now, Direction::Down, d.clone()));
            client.input(&d).unwrap();
        }
        // The client application sends one message when `send_at` says so.
        if send_at(now) && sent < messages.len() && client.wait_snd() < 64 {
            client.send(&messages[sent]).unwrap();
            sent += 1;
        }
        if !pause.contains(&now) {
            while let Ok(n) = server.recv(&mut buf) {
                received.push(buf[..n].to_vec());
            }
        }
        client.update(now).unwrap();
        server.update(now).unwrap();
        for d in cw.0.borrow_mut().drain(..) {
            capture.push((now, Direction::Up, d.clone()));
            if drop(now, &d) {
                for s in tboxscope_decode::kcp::decode_strict(&d).unwrap() {
                    if s.cmd() == Cmd::Push {
                        dropped_sns.insert(s.sn());
                    }
                }
            } else {
                to_server.push_back((now + ONE_WAY_MS, d));
            }
        }
        for d in sw.0.borrow_mut().drain(..) {
            to_client.push_back((now + ONE_WAY_MS, d));
        }
    }
    Run {
        capture,
        received,
        dropped_sns,
    }
}

/// One decoded segment of the capture: (time ms, direction, fields, payload).
type Seen = (u32, Direction, KcpSegment, Vec<u8>);

/// Every segment of the capture, in capture order; every datagram must be detected as raw KCP.
fn decode(capture: &Capture) -> (Detector, Vec<Seen>) {
    let mut detector = Detector::default();
    let mut seen = Vec::new();
    for (t, direction, d) in capture {
        let detection = detector.classify(40000, 29900, d);
        let Detection::Raw(datagram) = detection else {
            panic!("real KCP datagram not detected: {detection:?} {d:02x?}");
        };
        for s in datagram.segments() {
            let summary = s.summary();
            assert_eq!(summary.conv, CONV);
            assert_eq!(summary.len as usize, s.payload().len());
            seen.push((*t, *direction, summary, s.payload().to_vec()));
        }
    }
    (detector, seen)
}

/// One transmission of a PUSH segment: (time ms, fields, payload).
type Transmission<'a> = (u32, KcpSegment, &'a [u8]);

/// The client's PUSH transmissions by sequence number, in capture order. Every copy of a
/// sequence number carries the same fragment and bytes.
fn pushes_up(seen: &[Seen]) -> BTreeMap<u32, Vec<Transmission<'_>>> {
    let mut by_sn: BTreeMap<u32, Vec<Transmission<'_>>> = BTreeMap::new();
    for (t, direction, s, payload) in seen {
        if *direction == Direction::Up && s.cmd == Cmd::Push {
            let copies = by_sn.entry(s.sn).or_default();
            if let Some((_, first, bytes)) = copies.first() {
                assert_eq!(
                    (first.frg, *bytes),
                    (s.frg, payload.as_slice()),
                    "sn {}",
                    s.sn
                );
            }
            copies.push((*t, *s, payload));
        }
    }
    by_sn
}

/// The messages the client sent, rebuilt from the fragment runs of its PUSH segments (sequence
/// numbers 0, 1, 2… with no gap; `frg` counts the fragments still to come).
fn messages_up(seen: &[Seen]) -> Vec<Vec<u8>> {
    let pushes = pushes_up(seen);
    assert!(
        pushes.keys().copied().eq(0..pushes.len() as u32),
        "a gap in the sequence numbers"
    );
    let mut messages = Vec::new();
    let mut message = Vec::new();
    for copies in pushes.values() {
        let (_, s, payload) = copies[0];
        message.extend_from_slice(payload);
        if s.frg == 0 {
            messages.push(std::mem::take(&mut message));
        }
    }
    assert!(
        message.is_empty(),
        "the capture ends in the middle of a message"
    );
    messages
}

/// The server's ACKs: (time ms at the client, acknowledged sn, echoed ts). Each names a
/// transmission the client made: that sequence number sent with that timestamp.
fn acks_down(seen: &[Seen]) -> Vec<(u32, u32, u32)> {
    let pushes = pushes_up(seen);
    let acks: Vec<(u32, u32, u32)> = seen
        .iter()
        .filter(|(_, d, s, _)| *d == Direction::Down && s.cmd == Cmd::Ack)
        .map(|(t, _, s, _)| (*t, s.sn, s.ts))
        .collect();
    for &(t, sn, ts) in &acks {
        let sent = pushes
            .get(&sn)
            .is_some_and(|c| c.iter().any(|(_, s, _)| s.ts == ts));
        assert!(
            sent,
            "ACK at {t} ms of sn {sn} ts {ts}: no such transmission"
        );
    }
    acks
}

fn messages() -> Vec<Vec<u8>> {
    // Sizes around the MSS (1376 with the default MTU) so that frg runs of 1..4 appear.
    [10usize, 1376, 1377, 3000, 5000, 100, 2752, 1, 4128, 700]
        .iter()
        .enumerate()
        .map(|(i, &n)| (0..n).map(|j| (i * 31 + j) as u8).collect())
        .collect()
}

#[test]
fn lossless_exchange_decodes_to_the_messages_sent() {
    let sent = messages();
    let run = run(&sent, |now| now % 20 == 0, true, |_, _| false, 0..0, 2000);
    assert_eq!(run.received, sent, "the real peers delivered everything");
    let (detector, seen) = decode(&run.capture);
    assert_eq!(detector.stats().rejected_total(), 0);
    assert_eq!(messages_up(&seen), sent);
    let pushes = pushes_up(&seen);
    assert!(pushes.values().all(|c| c.len() == 1), "nothing was resent");
    // Every transmission is acknowledged; its RTT, from the echoed timestamp, is two one-way
    // delays plus at most one flush interval of ACK delay.
    let acks = acks_down(&seen);
    let acked: BTreeSet<u32> = acks.iter().map(|a| a.1).collect();
    assert!(acked.iter().copied().eq(pushes.keys().copied()));
    for (t, sn, ts) in acks {
        let rtt = t.wrapping_sub(ts);
        assert!((40..=60).contains(&rtt), "sn {sn}: rtt {rtt} ms");
    }
}

#[test]
fn lost_segments_are_retransmitted_with_their_new_timestamps() {
    // Normal mode (minimum RTO 100 ms, so the first timeout comes ≥ 112 ms after a send) with fast
    // resend on, over a 40 ms RTT. Bursts of messages every 5 ms for 100 ms, then 300 ms of
    // silence. Lost: the data datagrams flushed 30 ms and 90 ms into each burst. Depending on
    // what follows them and whether the retransmission is lost too, the sender resends fast (on
    // skipping ACKs, ~50 ms later) or on its timer (≥ 112 ms, with backoff).
    let sent: Vec<Vec<u8>> = (0..8).flat_map(|_| messages()).collect();
    let run = run(
        &sent,
        |now| now % 400 < 100,
        false,
        |now, d| (now % 400 == 30 || now % 400 == 90) && d[4] == 81,
        0..0,
        12_000,
    );
    assert_eq!(run.received, sent, "the real peers recovered from the loss");
    assert!(run.dropped_sns.len() >= 8);
    let (_, seen) = decode(&run.capture);
    // Messages still come out whole, in order, from the first copy of each segment.
    assert_eq!(messages_up(&seen), sent);
    // Every lost segment was seen retransmitted, and nothing else was.
    let pushes = pushes_up(&seen);
    let resent: BTreeSet<u32> = pushes
        .iter()
        .filter(|(_, c)| c.len() > 1)
        .map(|(sn, _)| *sn)
        .collect();
    assert_eq!(resent, run.dropped_sns);
    // Each copy carries the time it was sent: its timestamp is the capture time (the sender's
    // clock is the capture's here), later than the previous copy's. The gaps show both kinds of
    // resend: under 100 ms only a fast one is possible, timeouts come later.
    let (mut fast, mut timeout) = (0, 0);
    for copies in pushes.values() {
        for (t, s, _) in copies {
            assert_eq!(s.ts, *t, "sn {}", s.sn);
        }
        for pair in copies.windows(2) {
            let gap = pair[1].1.ts - pair[0].1.ts;
            assert!(gap > 0);
            if gap < 100 {
                fast += 1;
            } else {
                timeout += 1;
            }
        }
    }
    assert!(fast > 0 && timeout > 0, "fast {fast}, timeout {timeout}");
    // ACKs echo the timestamp of the copy that arrived, so each RTT is still one round trip.
    for (t, sn, ts) in acks_down(&seen) {
        let rtt = t.wrapping_sub(ts);
        assert!((40..=60).contains(&rtt), "sn {sn}: rtt {rtt} ms");
    }
}

#[test]
fn a_full_receive_window_is_advertised_and_probed() {
    // The server reads nothing for 10 s: the client fills its 128-segment receive window (ikcp's
    // minimum), sees wnd = 0, probes with WASK after 7 s; the server tells its window (WINS)
    // when it reads again.
    let sent: Vec<Vec<u8>> = (0..160).map(|i| vec![i as u8; 1376]).collect();
    let run = run(
        &sent,
        |now| now % 20 == 0,
        true,
        |_, _| false,
        0..10_000,
        16_000,
    );
    assert_eq!(run.received, sent);
    let (_, seen) = decode(&run.capture);
    assert_eq!(messages_up(&seen), sent);
    // The server's advertised window: closed once, for the rest of its pause.
    let mut closed: Vec<(u32, u32)> = Vec::new();
    let mut closed_since = None;
    for (t, direction, s, _) in &seen {
        if *direction != Direction::Down {
            continue;
        }
        match (s.wnd, closed_since) {
            (0, None) => closed_since = Some(*t),
            (1.., Some(start)) => {
                closed.push((start, *t));
                closed_since = None;
            }
            _ => {}
        }
    }
    assert_eq!(closed_since, None, "the window never reopened");
    let [(start, end)] = closed[..] else {
        panic!("the window closed {} times: {closed:?}", closed.len());
    };
    assert!((7_000..=10_500).contains(&(end - start)), "{start}..{end}");
    assert!(
        end >= 10_000,
        "reopened at {end} ms, before the server read again"
    );
    // The client asked for the window while it was closed, and the server told it.
    let first = |direction, cmd| {
        seen.iter()
            .find(|(_, d, s, _)| *d == direction && s.cmd == cmd)
            .map(|(t, ..)| *t)
    };
    let wask = first(Direction::Up, Cmd::Wask).expect("the client never probed the window");
    assert!((start + 7_000..end).contains(&wask), "WASK at {wask} ms");
    let wins = first(Direction::Down, Cmd::Wins).expect("the server never told its window");
    assert!(wins > wask, "WINS at {wins} ms");
}
