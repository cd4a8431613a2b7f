//! Traffic from a real KCP implementation nobody here wrote (the `kcp` crate, a port of ikcp):
//! two endpoints exchange messages over a simulated lossy link on a virtual clock; every datagram
//! is captured at the client and fed to the detector and the conversation tracker, which must
//! recover exactly the messages sent, the retransmissions of the lost segments, plausible RTTs,
//! and the window stall with its probes.

#![allow(clippy::unwrap_used)]

use std::cell::RefCell;
use std::collections::{BTreeSet, VecDeque};
use std::io::Write;
use std::rc::Rc;

use kcp::Kcp;
use tboxscope_decode::kcp::{
    Cmd, ConvEvent, ConvKey, ConvTracker, Detection, Detector, Direction, Observation, ResendKind,
};

const CONV: u32 = 0x5eed_0001;
const ONE_WAY_MS: u32 = 20;

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

fn analyse(capture: &Capture) -> (Detector, ConvTracker, Vec<ConvEvent>) {
    let mut detector = Detector::default();
    let mut tracker = ConvTracker::default();
    let mut events = Vec::new();
    for (t, direction, d) in capture {
        let detection = detector.classify(40000, 29900, d);
        let Detection::Raw(datagram) = detection else {
            panic!("real KCP datagram not detected: {detection:?} {d:02x?}");
        };
        let obs = Observation {
            time_ns: u64::from(*t) * 1_000_000,
            direction: *direction,
            path: 0,
            scope: 0,
        };
        for s in datagram.segments() {
            tracker.observe(obs, &s.summary(), &mut events);
        }
    }
    (detector, tracker, events)
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
    let (detector, tracker, events) = analyse(&run.capture);
    assert_eq!(detector.stats().rejected_total(), 0);
    let got: Vec<(u64, bool)> = events
        .iter()
        .filter_map(|e| match *e {
            ConvEvent::Message {
                direction: Direction::Up,
                bytes,
                complete,
                ..
            } => Some((bytes, complete)),
            _ => None,
        })
        .collect();
    let want: Vec<(u64, bool)> = sent.iter().map(|m| (m.len() as u64, true)).collect();
    assert_eq!(got, want);
    let stats = tracker
        .conv_stats(ConvKey {
            scope: 0,
            conv: CONV,
        })
        .unwrap();
    assert_eq!(stats.timeout_resends, [0, 0]);
    assert_eq!(stats.fast_resends, [0, 0]);
    // Every RTT: two one-way delays plus at most one flush interval of ACK delay.
    let rtts: Vec<u64> = events
        .iter()
        .filter_map(|e| match *e {
            ConvEvent::Rtt {
                direction: Direction::Up,
                rtt_ns,
                attempt: 1,
                ..
            } => Some(rtt_ns),
            _ => None,
        })
        .collect();
    assert_eq!(rtts.len() as u64, stats.pushes[0]);
    for rtt in rtts {
        assert!((40_000_000..=60_000_000).contains(&rtt), "rtt {rtt}");
    }
}

#[test]
fn lost_segments_are_retransmitted_and_classified() {
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
    let (_, tracker, events) = analyse(&run.capture);
    let mut resent = BTreeSet::new();
    let (mut fast, mut timeout) = (0, 0);
    for e in &events {
        if let ConvEvent::Retransmission {
            direction: Direction::Up,
            sn,
            kind,
            ts_gap_ms,
            attempt,
            ..
        } = *e
        {
            resent.insert(sn);
            // Ground truth from the sender's rules: no timeout can fire before 100 ms.
            let truth = if ts_gap_ms < 100 {
                ResendKind::Fast
            } else {
                ResendKind::Timeout
            };
            assert_eq!(kind, truth, "sn {sn} attempt {attempt} gap {ts_gap_ms} ms");
            match kind {
                ResendKind::Fast => fast += 1,
                ResendKind::Timeout => timeout += 1,
            }
        }
    }
    assert!(fast > 0 && timeout > 0, "fast {fast}, timeout {timeout}");
    // Every lost segment was seen retransmitted, and nothing else was.
    assert_eq!(resent, run.dropped_sns);
    // Messages still come out whole, in order.
    let got: Vec<u64> = events
        .iter()
        .filter_map(|e| match *e {
            ConvEvent::Message {
                direction: Direction::Up,
                bytes,
                complete: true,
                ..
            } => Some(bytes),
            _ => None,
        })
        .collect();
    assert_eq!(got, sent.iter().map(|m| m.len() as u64).collect::<Vec<_>>());
    let stats = tracker
        .conv_stats(ConvKey {
            scope: 0,
            conv: CONV,
        })
        .unwrap();
    assert_eq!(stats.copies, [0, 0]);
    assert_eq!(
        (stats.fast_resends[0], stats.timeout_resends[0]),
        (fast, timeout)
    );
}

#[test]
fn a_full_receive_window_stalls_and_is_probed() {
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
    let (_, tracker, events) = analyse(&run.capture);
    let stall_start = events.iter().find_map(|e| match *e {
        ConvEvent::StallStart {
            stalled: Direction::Up,
            time_ns,
            ..
        } => Some(time_ns),
        _ => None,
    });
    let stall_end = events.iter().find_map(|e| match *e {
        ConvEvent::StallEnd {
            stalled: Direction::Up,
            duration_ns,
            ..
        } => Some(duration_ns),
        _ => None,
    });
    assert!(stall_start.is_some(), "no stall seen");
    let duration = stall_end.unwrap();
    assert!(
        (7_000_000_000..=10_500_000_000).contains(&duration),
        "{duration}"
    );
    let wask = events.iter().any(|e| {
        matches!(
            e,
            ConvEvent::WindowProbe {
                direction: Direction::Up,
                cmd: Cmd::Wask,
                ..
            }
        )
    });
    assert!(wask, "client never probed the window");
    let stats = tracker
        .conv_stats(ConvKey {
            scope: 0,
            conv: CONV,
        })
        .unwrap();
    assert_eq!(stats.stalls[0], 1);
}
