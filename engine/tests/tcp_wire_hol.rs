//! TCP from the wire at the receiver: HOL stalls from arrivals at the receiver's capture and
//! inferred from ACKs at the sender's alone, and messages cut from the byte stream (the
//! framing's ranges carried on the segments), timed one way or to the cumulative ACK.

#[expect(dead_code, reason = "each test uses some of the shared helpers")]
mod common;

use common::*;
use tboxscope_engine::snapshot::LatencyKind;
use tboxscope_engine::{
    Config, Engine, HolIncident, HolProtocol, HolStallFrom, Host, MessageRecord, Observation,
    Record, Recovery, Spurious, TcpEvent, TcpEventKind, TcpFigures, TcpFlags, TcpOptions,
    TcpRetransmitKind, TcpRetransmitRecord, TcpRtoRecord, TcpSegment, TcpSource,
};

const MS: u64 = 1_000_000;
const ACK: u8 = 0x10;
const SYN: u8 = 0x02;

/// One connection, client `10.0.0.2:41000` → server `192.0.2.1:8883`, seen by capture 0
/// (the client's side unless stated) and, in some tests, capture 1.
struct Conn {
    e: Engine,
    cli: std::net::SocketAddr,
    srv: std::net::SocketAddr,
    records: Vec<Record>,
    /// The timestamps option (TSval, TSecr) the next segment carries, if any.
    stamps: Option<(u32, u32)>,
    /// The TTLs of the client's and the server's segments (0: not read).
    ttls: (u8, u8),
}

impl Conn {
    fn new(captures: Vec<Observation>) -> Self {
        let mut e = engine(Config::default());
        for c in captures {
            e.handle(c);
        }
        Self {
            e,
            cli: addr("10.0.0.2:41000"),
            srv: addr("192.0.2.1:8883"),
            records: Vec::new(),
            stamps: None,
            ttls: (0, 0),
        }
    }

    /// A segment at `ms` seen by `capture`; `msgs`: the messages it completes there.
    #[expect(clippy::too_many_arguments, reason = "a segment's fields")]
    fn seg(
        &mut self,
        capture: u16,
        ms: u64,
        up: bool,
        (seq, ack): (u32, u32),
        flags: u8,
        len: u32,
        sack: &[(u32, u32)],
        msgs: &[(u32, u32)],
    ) {
        let (src, dst) = if up {
            (self.cli, self.srv)
        } else {
            (self.srv, self.cli)
        };
        let label = if capture == 0 { "eth0" } else { "gw-g0" };
        let mut options = TcpOptions::default();
        for (i, b) in sack.iter().enumerate() {
            options.sack[i] = *b;
        }
        options.sack_count = sack.len() as u8;
        options.timestamps = self.stamps.take();
        let mut meta = meta(T0 + ms * MS, label, capture, src, dst, 40 + len);
        meta.ttl = if up { self.ttls.0 } else { self.ttls.1 };
        self.e.handle(Observation::TcpSegment(TcpSegment {
            meta,
            seq,
            ack,
            flags: TcpFlags(flags),
            window: 1000,
            len,
            options,
            messages: msgs.iter().copied().collect(),
        }));
        self.records.extend(self.e.drain_records());
    }

    /// The handshake seen at both ends, one way 20 ms: the T-Box's capture (0) at 0, 40 and
    /// 40 ms, the gateway's (1) at 20, 20 and 60 ms of its own clock, `gateway_ahead_ms`
    /// ahead of the T-Box's.
    fn handshake_at_both_ends(&mut self, gateway_ahead_ms: u64) {
        let g = |ms: u64| ms + gateway_ahead_ms;
        self.seg(0, 0, true, (999, 0), SYN, 0, &[], &[]);
        self.seg(1, g(20), true, (999, 0), SYN, 0, &[], &[]);
        self.seg(1, g(20), false, (5000, 1000), SYN | ACK, 0, &[], &[]);
        self.seg(0, 40, false, (5000, 1000), SYN | ACK, 0, &[], &[]);
        self.seg(0, 40, true, (1000, 5001), ACK, 0, &[], &[]);
        self.seg(1, g(60), true, (1000, 5001), ACK, 0, &[], &[]);
    }

    fn finish(&mut self) {
        let _ = self.e.finish(T0 + 60_000 * MS);
        self.records.extend(self.e.drain_records());
    }

    fn wire_incidents(&self) -> Vec<&HolIncident> {
        incidents(&self.records)
            .into_iter()
            .filter(|i| i.source == Some(TcpSource::Wire))
            .collect()
    }

    fn messages(&self) -> Vec<&MessageRecord> {
        messages(&self.records)
    }

    /// The `tcp_retransmit` records so far.
    fn resent(&self) -> Vec<&TcpRetransmitRecord> {
        retransmits(&self.records)
    }

    /// The `tcp_rto` records so far.
    fn timeouts(&self) -> Vec<&TcpRtoRecord> {
        timeouts(&self.records)
    }
}

/// 100-byte messages (`fixed:100`), one per segment: the message a segment at `seq` carries.
fn one(seq: u32) -> [(u32, u32); 1] {
    [(seq, seq + 100)]
}

/// The server's data arrives at the client's capture with segment 5100 lost on the way: held
/// behind it from the first segment past the hole (2 ms) until the resend (250 ms), two
/// segments and the two messages they complete.
#[test]
fn a_hole_at_the_receivers_capture_is_one_wire_incident() {
    let mut c = Conn::new(Vec::new());
    c.seg(0, 0, true, (99, 0), SYN, 0, &[], &[]);
    c.seg(0, 1, false, (4999, 100), SYN | ACK, 0, &[], &[]);
    c.seg(0, 1, true, (100, 5000), ACK, 0, &[], &[]);
    c.seg(0, 1, false, (5000, 100), ACK, 100, &[], &one(5000));
    c.seg(0, 2, false, (5200, 100), ACK, 100, &[], &[]);
    c.seg(0, 3, false, (5300, 100), ACK, 100, &[], &[]);
    // The resend fills the hole: the delimiter then completes three messages at once.
    c.seg(
        0,
        250,
        false,
        (5100, 100),
        ACK,
        100,
        &[],
        &[(5100, 5200), (5200, 5300), (5300, 5400)],
    );
    c.finish();
    let inc = c.wire_incidents();
    assert_eq!(inc.len(), 1, "{inc:#?}");
    let i = inc[0];
    assert_eq!(i.protocol, HolProtocol::Tcp);
    assert_eq!(i.stall_from, Some(HolStallFrom::ReceiverArrivals));
    assert_eq!(i.missing, "seq 5100");
    assert_eq!((i.start_ns, i.end_ns), (T0 + 2 * MS, Some(T0 + 250 * MS)));
    assert_eq!((i.bytes_held, i.messages_held), (200, 2));
    let m = c.messages();
    assert_eq!(m.len(), 4, "{m:#?}");
    assert!(m.iter().all(|m| m.source == Some(TcpSource::Wire)));
    assert!(m.iter().any(|m| m.id == "down seq 5300..5400"));
}

/// The client's segment 1100 is lost after its capture; SACKs bring a fast retransmit at
/// 145 ms and the cumulative ACK passes it and the 300 bytes behind it at 185 ms. From the
/// sender's capture alone: a stall from 1100's first send (101 ms) to that ACK, filled by a
/// fast retransmit; each message timed from its send to the ACK passing it.
#[test]
fn at_the_senders_capture_alone_a_stall_runs_from_first_send_to_the_ack_of_the_resend() {
    let mut c = Conn::new(Vec::new());
    established(&mut c);
    for k in 0..5u32 {
        let seq = 1000 + 100 * k;
        c.seg(
            0,
            100 + u64::from(k),
            true,
            (seq, 5001),
            ACK,
            100,
            &[],
            &one(seq),
        );
    }
    c.seg(0, 140, false, (5001, 1100), ACK, 0, &[], &[]);
    for (k, r) in [1300u32, 1400, 1500].iter().enumerate() {
        c.seg(
            0,
            142 + k as u64,
            false,
            (5001, 1100),
            ACK,
            0,
            &[(1200, *r)],
            &[],
        );
    }
    c.seg(0, 145, true, (1100, 5001), ACK, 100, &[], &[]);
    c.seg(0, 185, false, (5001, 1500), ACK, 0, &[], &[]);
    c.finish();
    let inc = c.wire_incidents();
    assert_eq!(inc.len(), 1, "{inc:#?}");
    let i = inc[0];
    assert_eq!(i.stall_from, Some(HolStallFrom::SentToAcked));
    assert_eq!(i.missing, "seq 1100");
    assert_eq!((i.start_ns, i.end_ns), (T0 + 101 * MS, Some(T0 + 185 * MS)));
    assert_eq!(i.recovery, Recovery::Fast);
    assert_eq!((i.fast_retransmits, i.timeout_retransmits), (1, 0));
    assert_eq!((i.bytes_held, i.messages_held), (300, 3));
    let m = c.messages();
    let lat = |id: &str| {
        m.iter()
            .find(|m| m.id == id)
            .map(|m| (m.latency_us, m.latency_kind))
    };
    assert_eq!(m.len(), 5, "{m:#?}");
    assert_eq!(
        lat("up seq 1000..1100"),
        Some((Some(40_000), LatencyKind::AckRtt))
    );
    assert_eq!(
        lat("up seq 1100..1200"),
        Some((Some(84_000), LatencyKind::AckRtt))
    );
    assert_eq!(
        lat("up seq 1400..1500"),
        Some((Some(81_000), LatencyKind::AckRtt))
    );
}

/// Handshake (client ISN 999, server 5000) at 0 and 40 ms.
fn established(c: &mut Conn) {
    c.seg(0, 0, true, (999, 0), SYN, 0, &[], &[]);
    c.seg(0, 40, false, (5000, 1000), SYN | ACK, 0, &[], &[]);
    c.seg(0, 40, true, (1000, 5001), ACK, 0, &[], &[]);
}

/// No SACK, one duplicate ACK: the hole is filled by a timeout retransmission.
#[test]
fn a_stall_ended_by_a_timeout_retransmission_says_so() {
    let mut c = Conn::new(Vec::new());
    established(&mut c);
    for k in 0..3u32 {
        let seq = 1000 + 100 * k;
        c.seg(
            0,
            100 + u64::from(k),
            true,
            (seq, 5001),
            ACK,
            100,
            &[],
            &one(seq),
        );
    }
    c.seg(0, 140, false, (5001, 1100), ACK, 0, &[], &[]);
    c.seg(0, 142, false, (5001, 1100), ACK, 0, &[], &[]);
    c.seg(0, 1_200, true, (1100, 5001), ACK, 100, &[], &[]);
    c.seg(0, 1_240, false, (5001, 1300), ACK, 0, &[], &[]);
    c.finish();
    let inc = c.wire_incidents();
    assert_eq!(inc.len(), 1, "{inc:#?}");
    let i = inc[0];
    assert_eq!(i.recovery, Recovery::Timeout);
    assert_eq!((i.fast_retransmits, i.timeout_retransmits), (0, 1));
    assert_eq!(i.stall_ns, 1_139 * MS);
    assert_eq!((i.bytes_held, i.messages_held), (100, 1));
}

/// A tail loss (nothing sent behind the lost segment) holds nothing: no incident.
#[test]
fn a_resend_with_nothing_behind_it_is_no_stall() {
    let mut c = Conn::new(Vec::new());
    established(&mut c);
    c.seg(0, 100, true, (1000, 5001), ACK, 100, &[], &one(1000));
    c.seg(0, 1_100, true, (1000, 5001), ACK, 100, &[], &[]);
    c.seg(0, 1_140, false, (5001, 1100), ACK, 0, &[], &[]);
    c.finish();
    assert!(c.wire_incidents().is_empty(), "{:#?}", c.wire_incidents());
    let m = c.messages();
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].latency_us, Some(1_040_000));
}

/// Both ends captured (the gateway's clock 3 s ahead, estimated): messages are timed one way
/// (20 ms each way); the stall is the receiver's, filled by the fast retransmit the sender's
/// capture classified.
#[test]
fn with_both_ends_messages_are_one_way_and_the_stall_is_the_receivers() {
    let off = 3_000i64 * MS as i64;
    let mut c = Conn::new(vec![
        capture(0, "t-eth0", "eth0", Host::Tbox, None),
        capture(1, "gw-g0", "eth0", Host::Gateway, None),
    ]);
    let g = |ms: u64| ms + 3_000;
    // Handshake and a first round, both ends (one-way 20 ms).
    c.handshake_at_both_ends(3_000);
    let mut seq = 1000u32;
    for round in 0..10u64 {
        let t = 100 + round * 100;
        c.seg(0, t, true, (seq, 5001), ACK, 100, &[], &one(seq));
        c.seg(1, g(t + 20), true, (seq, 5001), ACK, 100, &[], &one(seq));
        c.seg(1, g(t + 20), false, (5001, seq + 100), ACK, 0, &[], &[]);
        c.seg(0, t + 40, false, (5001, seq + 100), ACK, 0, &[], &[]);
        seq += 100;
    }
    // Then five segments, the second lost between the ends.
    let t = 1_100;
    for k in 0..5u32 {
        let s = seq + 100 * k;
        c.seg(0, t + u64::from(k), true, (s, 5001), ACK, 100, &[], &one(s));
        if k != 1 {
            let done: &[(u32, u32)] = if k == 0 { &one(s) } else { &[] };
            c.seg(
                1,
                g(t + 20 + u64::from(k)),
                true,
                (s, 5001),
                ACK,
                100,
                &[],
                done,
            );
            let sack: &[(u32, u32)] = if k == 0 { &[] } else { &[(seq + 200, s + 100)] };
            c.seg(
                1,
                g(t + 20 + u64::from(k)),
                false,
                (5001, seq + 100),
                ACK,
                0,
                sack,
                &[],
            );
            c.seg(
                0,
                t + 40 + u64::from(k),
                false,
                (5001, seq + 100),
                ACK,
                0,
                sack,
                &[],
            );
        }
    }
    c.seg(0, t + 45, true, (seq + 100, 5001), ACK, 100, &[], &[]);
    let released: Vec<(u32, u32)> = (1..5)
        .map(|k| (seq + 100 * k, seq + 100 * k + 100))
        .collect();
    c.seg(
        1,
        g(t + 65),
        true,
        (seq + 100, 5001),
        ACK,
        100,
        &[],
        &released,
    );
    c.seg(1, g(t + 65), false, (5001, seq + 500), ACK, 0, &[], &[]);
    c.seg(0, t + 85, false, (5001, seq + 500), ACK, 0, &[], &[]);
    c.finish();
    let inc = c.wire_incidents();
    assert_eq!(inc.len(), 1, "{inc:#?}");
    let i = inc[0];
    assert_eq!(i.stall_from, Some(HolStallFrom::ReceiverArrivals));
    assert_eq!(i.recovery, Recovery::Fast);
    assert_eq!(i.fast_retransmits, 1);
    assert_eq!((i.bytes_held, i.messages_held), (300, 3));
    // The receiver's stall on its own clock: from 1100+22 to 1100+65 ms (gateway clock).
    assert_eq!(i.stall_ns, 43 * MS);
    let m = c.messages();
    assert_eq!(m.len(), 15, "{m:#?}");
    for m in &m {
        assert_eq!(m.latency_kind, LatencyKind::OneWay, "{m:?}");
    }
    let lat = |k: u32| {
        let id = format!("up seq {}..{}", seq + 100 * k, seq + 100 * k + 100);
        m.iter().find(|m| m.id == id).and_then(|m| m.latency_us)
    };
    // Within a millisecond of the truth (the offset is estimated from the delays seen).
    let near = |got: Option<u64>, want: u64| got.is_some_and(|g| g.abs_diff(want) <= 1_000);
    assert!(near(lat(0), 20_000), "{:?}", lat(0));
    assert!(near(lat(1), 64_000), "{:?}", lat(1));
    assert!(near(lat(4), 61_000), "{:?}", lat(4));
    let _ = off;
}

/// Both ends captured and nothing stated: the two captures pair on the first data seen at
/// both, and that segment goes on as the pair places it (the far end of the T-Box's path, not
/// a path of its own). Every message is then one copy on the T-Box's path, timed one way, and
/// none says it was not sent on the gateway's capture (the demo's TCP row said 0.1 %
/// duplication and "not sent on gateway-g0" for every message when the segment that paired
/// the captures kept the facts it had before).
#[test]
fn undeclared_ends_pair_and_each_message_is_one_copy_on_one_path() {
    let c = undeclared_ends(|c| c.handshake_at_both_ends(0), 20, 0, true);
    let m = c.messages();
    assert_eq!(m.len(), 10, "{m:#?}");
    for m in &m {
        let paths: Vec<&str> = m.copies.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(paths, ["eth0"], "{m:?}");
        assert!(m.not_sent_on.is_empty(), "{m:?}");
        assert_eq!(m.latency_kind, LatencyKind::OneWay, "{m:?}");
        assert_eq!(m.latency_us, Some(20_000), "{m:?}");
    }
}

/// Both ends captured: each direction's round trip is timed at its sender's capture; at the
/// receiver's, data to ACK is the receiver's ACK delay, and the direction says so
/// (`at_receiver`) instead of passing it off as an RTT.
#[test]
fn at_the_receivers_capture_the_data_to_ack_time_is_the_ack_delay() {
    let mut c = Conn::new(vec![
        capture(0, "t-eth0", "eth0", Host::Tbox, None),
        capture(1, "gw-g0", "eth0", Host::Gateway, None),
    ]);
    // One way 20 ms; the gateway acknowledges 1 ms after each arrival.
    c.handshake_at_both_ends(0);
    let mut seq = 1000u32;
    for round in 0..10u64 {
        let t = 100 + round * 100;
        c.seg(0, t, true, (seq, 5001), ACK, 100, &[], &[]);
        c.seg(1, t + 20, true, (seq, 5001), ACK, 100, &[], &[]);
        c.seg(1, t + 21, false, (5001, seq + 100), ACK, 0, &[], &[]);
        c.seg(0, t + 41, false, (5001, seq + 100), ACK, 0, &[], &[]);
        seq += 100;
    }
    let s = c.e.finish(T0 + 60_000 * MS);
    // The two captures show one path: each direction is listed once per capture.
    let dir = |up: bool, at_receiver: bool| {
        let src = if up {
            "10.0.0.2:41000"
        } else {
            "192.0.2.1:8883"
        };
        let found: Vec<_> = s
            .tcp_wire
            .directions
            .iter()
            .filter(|d| d.src == src && d.at_receiver == at_receiver)
            .collect();
        assert_eq!(
            found.len(),
            1,
            "{up} {at_receiver}: {:#?}",
            s.tcp_wire.directions
        );
        found[0].clone()
    };
    let sender = dir(true, false);
    // The SYN's 40 ms round trip smoothed with the data's 41 ms ones.
    assert!((40_000..=41_000).contains(&sender.srtt_us), "{sender:?}");
    assert_eq!(sender.segments, 11);
    let receiver = dir(true, true);
    assert!(receiver.srtt_us <= 1_000, "{receiver:?}");
    assert_eq!(receiver.segments, 11);
    // The SYN-ACK's direction: sent at the gateway, received at the T-Box.
    let _ = (dir(false, false), dir(false, true));
}

/// Both ends captured, a segment lost after the receiver's capture point (seen arriving
/// there, never acknowledged) and resent twice by the timer (300 ms, then 600 ms: backoff 0,
/// then 1): each resend is one retransmission, the sender's (its kind, timer and backoff),
/// not once more from the receiver's capture, which saw the same copies arrive. The
/// receiver's direction still counts them and says its records are the sender's capture's.
/// Given alone, the receiver's capture writes its own.
#[test]
fn with_both_ends_each_retransmission_is_written_once_by_the_senders_capture() {
    let run = |captures: &[u16]| {
        let mut c = Conn::new(vec![
            capture(0, "t-eth0", "eth0", Host::Tbox, None),
            capture(1, "gw-g0", "eth0", Host::Gateway, None),
        ]);
        let seg = |c: &mut Conn, cap: u16, ms: u64, up: bool, sa: (u32, u32), len: u32| {
            if captures.contains(&cap) {
                c.seg(cap, ms, up, sa, ACK, len, &[], &[]);
            }
        };
        // One way 20 ms; the gateway acknowledges 1 ms after each arrival.
        if captures.len() == 2 {
            c.handshake_at_both_ends(0);
        }
        let mut seq = 1000u32;
        for round in 0..10u64 {
            let t = 100 + round * 100;
            seg(&mut c, 0, t, true, (seq, 5001), 100);
            seg(&mut c, 1, t + 20, true, (seq, 5001), 100);
            seg(&mut c, 1, t + 21, false, (5001, seq + 100), 0);
            seg(&mut c, 0, t + 41, false, (5001, seq + 100), 0);
            seq += 100;
        }
        // Sent at 1100, resent at 1400 and 2000; only the last copy is acknowledged.
        for t in [1_100, 1_400, 2_000] {
            seg(&mut c, 0, t, true, (seq, 5001), 100);
            seg(&mut c, 1, t + 20, true, (seq, 5001), 100);
        }
        seg(&mut c, 1, 2_021, false, (5001, seq + 100), 0);
        seg(&mut c, 0, 2_041, false, (5001, seq + 100), 0);
        let summary = c.e.finish(T0 + 60_000 * MS);
        c.records.extend(c.e.drain_records());
        let resent: Vec<(TcpRetransmitKind, u8)> =
            c.resent().iter().map(|x| (x.kind, x.backoff)).collect();
        let timeouts: Vec<u8> = c.timeouts().iter().map(|x| x.backoff).collect();
        (resent, timeouts, summary.tcp_wire.directions)
    };
    let rto = TcpRetransmitKind::Rto;
    let (resent, timeouts, directions) = run(&[0, 1]);
    assert_eq!(resent, [(rto, 0), (rto, 1)], "{directions:#?}");
    assert_eq!(timeouts, [0, 1]);
    let up: Vec<_> = directions
        .iter()
        .filter(|d| d.src == "10.0.0.2:41000")
        .collect();
    assert_eq!(up.len(), 2, "{directions:#?}");
    for d in &up {
        // Both captures count the two resends; the receiver's says who writes them.
        assert_eq!(d.retransmits_total(), 2, "{d:?}");
        assert_eq!(d.sender_captured, d.at_receiver, "{d:?}");
    }
    assert!(up.iter().any(|d| d.at_receiver), "{up:#?}");
    // Each capture alone writes what it saw.
    let (sender_alone, _, _) = run(&[0]);
    assert_eq!(sender_alone, resent);
    let (receiver_alone, _, directions) = run(&[1]);
    assert_eq!(
        receiver_alone.len(),
        2,
        "{receiver_alone:?} {directions:#?}"
    );
    assert!(
        directions.iter().all(|d| !d.sender_captured),
        "{directions:#?}"
    );
}

/// Both ends captured and nothing stated: the captures pair on the third new segment both
/// saw, and a segment resent before that (the first, 250 ms on) is seen resent at both. The
/// receiver's records of it wait for the pair and are then left to the sender's capture: one
/// record of each kind, the receiver's counted as left to the sender.
#[test]
fn undeclared_ends_a_resend_before_the_captures_pair_is_written_once() {
    let mut c = Conn::new(Vec::new());
    c.e = engine(Config {
        await_pairing: true,
        ..Config::default()
    });
    c.handshake_at_both_ends(0);
    let both = |c: &mut Conn, t: u64, seq: u32| {
        c.seg(0, t, true, (seq, 5001), ACK, 100, &[], &[]);
        c.seg(1, t + 20, true, (seq, 5001), ACK, 100, &[], &[]);
    };
    both(&mut c, 100, 1000);
    both(&mut c, 101, 1100);
    c.seg(1, 122, false, (5001, 1000), ACK, 0, &[(1100, 1200)], &[]);
    c.seg(0, 142, false, (5001, 1000), ACK, 0, &[(1100, 1200)], &[]);
    // Not yet paired: two votes.
    assert!(c
        .e
        .snapshot()
        .health
        .inferences
        .iter()
        .all(|s| !s.contains("two ends")));
    both(&mut c, 350, 1000);
    both(&mut c, 351, 1200);
    c.seg(1, 372, false, (5001, 1300), ACK, 0, &[], &[]);
    c.seg(0, 392, false, (5001, 1300), ACK, 0, &[], &[]);
    let said = c.e.snapshot().health.inferences;
    assert!(said.iter().any(|s| s.contains("two ends")), "{said:?}");
    let summary = c.e.finish(T0 + 60_000 * MS);
    c.records.extend(c.e.drain_records());
    let resent: Vec<u32> = c.resent().iter().map(|x| x.seq).collect();
    assert_eq!(resent, [1000], "{:#?}", summary.tcp_wire);
    // 250 ms of silence: a timeout, one `tcp_rto` record too.
    assert_eq!(c.timeouts().len(), 1);
    // The receiver's two (the timeout's, held until the pair; the resend's, at its verdict).
    assert_eq!(
        summary.tcp_wire.left_to_sender, 2,
        "{:#?}",
        summary.tcp_wire
    );
}

/// The T-Box's two interfaces captured, nothing of the gateway's: neither capture can be the
/// other's far end (both on the T-Box), so a retransmission's record is written at its
/// verdict, not held for a pair that cannot come.
#[test]
fn captures_on_one_host_do_not_wait_for_a_pair() {
    let mut c = Conn::new(vec![
        capture(0, "t-eth0", "eth0", Host::Tbox, None),
        capture(1, "t-eth1", "eth1", Host::Tbox, None),
    ]);
    let mut seq = 1000u32;
    for round in 0..5u64 {
        let t = 100 + round * 100;
        c.seg(0, t, true, (seq, 5001), ACK, 100, &[], &[]);
        c.seg(0, t + 40, false, (5001, seq + 100), ACK, 0, &[], &[]);
        seq += 100;
    }
    c.seg(0, 600, true, (seq, 5001), ACK, 100, &[], &[]);
    c.seg(0, 900, true, (seq, 5001), ACK, 100, &[], &[]);
    c.seg(0, 940, false, (5001, seq + 100), ACK, 0, &[], &[]);
    assert_eq!(c.resent().len(), 1, "{:#?}", c.records);
}

/// The gateway's capture alone, timestamps on, one way 40 ms: the handshake times the round
/// trip on the gateway's own SYN-ACK (80 ms: the sender's timeout is about 280 ms). A segment
/// is lost before the gateway; the segment behind it arrives, the fast retransmit and four
/// timeouts (280, 560, 1120, 2240 ms) are lost too, and the fifth timeout's copy, 4480 ms
/// later, gets through. It is one retransmission at the receiver: a timeout at backoff level
/// 4, against the 280 ms the round trip gives (not the receiver's ACK delay plus 200 ms, nor
/// level 5 from the silence read as one doubled timeout).
#[test]
fn at_the_receiver_alone_a_timeout_after_lost_ones_has_the_senders_level() {
    let resent = receiver_alone_through_a_handover(true);
    assert_eq!(resent.len(), 1, "{resent:?}");
    let (kind, backoff, rto_ms) = resent[0];
    assert_eq!((kind, backoff), (TcpRetransmitKind::Rto, 4), "{resent:?}");
    assert!((270..=290).contains(&rto_ms), "{resent:?}");
}

/// The gateway's capture alone (timestamps on, one way 40 ms; with the `handshake` or begun
/// mid-connection): ten rounds of a segment every 100 ms, each acknowledged 1 ms after it
/// arrives; then one lost before the gateway, the segment behind it arriving and SACKed, and
/// the copy the sender's fifth timeout sends arriving at 9 902 ms. The retransmission records
/// made there: (kind, backoff, rto_ms).
fn receiver_alone_through_a_handover(handshake: bool) -> Vec<(TcpRetransmitKind, u8, u64)> {
    let mut c = Conn::new(vec![capture(1, "gw-g0", "eth0", Host::Gateway, None)]);
    // TSvals: the client's clock in ms (sending time), the gateway's in ms + 50 000.
    let gw = |ms: u64| 50_000 + ms as u32;
    let mut last_ack = gw(0);
    if handshake {
        c.stamps = Some((0, 0));
        c.seg(1, 40, true, (999, 0), SYN, 0, &[], &[]);
        c.stamps = Some((gw(40), 0));
        c.seg(1, 40, false, (5000, 1000), SYN | ACK, 0, &[], &[]);
        c.stamps = Some((80, gw(40)));
        c.seg(1, 120, true, (1000, 5001), ACK, 0, &[], &[]);
        last_ack = gw(120);
    }
    let mut seq = 1000u32;
    for round in 0..10u64 {
        let sent = 100 + round * 100;
        c.stamps = Some((sent as u32, last_ack));
        c.seg(1, sent + 40, true, (seq, 5001), ACK, 100, &[], &[]);
        last_ack = gw(sent + 41);
        c.stamps = Some((last_ack, sent as u32));
        c.seg(1, sent + 41, false, (5001, seq + 100), ACK, 0, &[], &[]);
        seq += 100;
    }
    // Sent at 1100: `seq` lost; `seq + 100` (sent at 1101) arrives and is SACKed.
    c.stamps = Some((1_101, last_ack));
    c.seg(1, 1_141, true, (seq + 100, 5001), ACK, 100, &[], &[]);
    c.stamps = Some((gw(1_142), 1_101));
    c.seg(
        1,
        1_142,
        false,
        (5001, seq),
        ACK,
        0,
        &[(seq + 100, seq + 200)],
        &[],
    );
    // Fast retransmit at 1182, timeouts at 1462, 2022, 3142, 5382 lost; the one at 9862
    // arrives at 9902.
    c.stamps = Some((9_862, gw(1_142)));
    c.seg(1, 9_902, true, (seq, 5001), ACK, 100, &[], &[]);
    c.stamps = Some((gw(9_903), 9_862));
    c.seg(1, 9_903, false, (5001, seq + 200), ACK, 0, &[], &[]);
    c.finish();
    c.resent()
        .iter()
        .map(|x| (x.kind, x.backoff, x.rto_ms))
        .collect()
}

/// The gateway's capture alone: the last segments arrive and are acknowledged, but the ACKs
/// are lost in a handover and the sender's timer resends the oldest unacknowledged one after
/// 8.7 s (timeouts of 280, 560, 1120, 2240 and 4480 ms, the copies before it lost). At the
/// receiver this is a spurious timeout retransmission at backoff level 4, not a loss probe.
#[test]
fn at_the_receiver_alone_a_timeout_resend_of_acknowledged_data_is_a_spurious_timeout() {
    let mut c = Conn::new(vec![capture(1, "gw-g0", "eth0", Host::Gateway, None)]);
    // The handshake times the round trip at the gateway: 80 ms.
    c.seg(1, 40, true, (999, 0), SYN, 0, &[], &[]);
    c.seg(1, 40, false, (5000, 1000), SYN | ACK, 0, &[], &[]);
    c.seg(1, 120, true, (1000, 5001), ACK, 0, &[], &[]);
    let mut seq = 1000u32;
    for round in 0..10u64 {
        let sent = 100 + round * 100;
        c.seg(1, sent + 40, true, (seq, 5001), ACK, 100, &[], &[]);
        c.seg(1, sent + 41, false, (5001, seq + 100), ACK, 0, &[], &[]);
        seq += 100;
    }
    // The last one, sent at 1000, acknowledged at 1041: that ACK never reached the sender.
    let last = seq - 100;
    c.seg(1, 1_040 + 8_680, true, (last, 5001), ACK, 100, &[], &[]);
    c.seg(
        1,
        1_041 + 8_680,
        false,
        (5001, seq),
        ACK,
        0,
        &[(last, seq)],
        &[],
    );
    c.finish();
    let resent: Vec<_> = c
        .resent()
        .iter()
        .map(|x| (x.kind, x.backoff, x.spurious))
        .collect();
    assert_eq!(
        resent,
        [(TcpRetransmitKind::Rto, 4, Some(Spurious::AckedBefore))],
        "{resent:?}"
    );
}

/// A client on the lower port (`10.0.0.2:8000` → `192.0.2.1:50000`): the port guess (client =
/// higher port) is wrong, the SYN says otherwise. The kernel's socket reported first (the flow
/// made the wrong way round), then the handshake and two messages at the sender's capture
/// alone: one flow named client → server, the messages `up` and timed to their ACK, as for a
/// client on the higher port.
#[test]
fn the_syn_names_the_client_whatever_its_port() {
    let mut c = Conn::new(Vec::new());
    c.cli = addr("10.0.0.2:8000");
    c.srv = addr("192.0.2.1:50000");
    c.e.handle(Observation::Tcp(TcpEvent {
        ts_ns: T0,
        path: "eth0".into(),
        local: c.cli,
        remote: c.srv,
        kind: TcpEventKind::Sample,
        figures: TcpFigures::default(),
    }));
    established(&mut c);
    c.seg(0, 100, true, (1000, 5001), ACK, 100, &[], &one(1000));
    c.seg(0, 101, true, (1100, 5001), ACK, 100, &[], &one(1100));
    c.seg(0, 140, false, (5001, 1200), ACK, 0, &[], &[]);
    let flows = c.e.snapshot().flows.tcp;
    c.finish();
    assert_eq!(flows.len(), 1, "{flows:#?}");
    let m = c.messages();
    assert_eq!(m.len(), 2, "{m:#?}");
    for (m, id, us) in [
        (m[0], "up seq 1000..1100", 40_000),
        (m[1], "up seq 1100..1200", 39_000),
    ] {
        assert_eq!(m.flow, "tcp 10.0.0.2:8000 → 192.0.2.1:50000");
        assert_eq!(m.id, id);
        assert_eq!(
            (m.latency_us, m.latency_kind),
            (Some(us), LatencyKind::AckRtt)
        );
    }
}

/// A segment as [`Conn::seg`] takes it, after the capture that sees it.
type Seg = (
    u16,
    u64,
    bool,
    (u32, u32),
    u8,
    u32,
    &'static [(u32, u32)],
    &'static [(u32, u32)],
);

/// The first data segment lost between the T-Box and the gateway: the gateway holds the
/// second from its arrival until the resend, as it would behind any later hole. Seen with
/// the captures in `seen` (0 the T-Box's, 1 the gateway's), declared when `declared`.
fn lost_first_segment(seen: &[u16], declared: bool) -> (Vec<HolIncident>, Vec<String>) {
    let mut c = Conn::new(if declared {
        vec![
            capture(0, "t-eth0", "eth0", Host::Tbox, None),
            capture(1, "gw-g0", "eth0", Host::Gateway, None),
        ]
    } else {
        Vec::new()
    });
    let segs: [Seg; 15] = [
        (0, 0, true, (999, 0), SYN, 0, &[], &[]),
        (1, 20, true, (999, 0), SYN, 0, &[], &[]),
        (1, 20, false, (5000, 1000), SYN | ACK, 0, &[], &[]),
        (0, 40, false, (5000, 1000), SYN | ACK, 0, &[], &[]),
        (0, 40, true, (1000, 5001), ACK, 0, &[], &[]),
        (0, 41, true, (1000, 5001), ACK, 100, &[], &[(1000, 1100)]),
        (1, 60, true, (1000, 5001), ACK, 0, &[], &[]),
        (0, 60, true, (1100, 5001), ACK, 100, &[], &[(1100, 1200)]),
        (1, 80, true, (1100, 5001), ACK, 100, &[], &[]),
        (1, 80, false, (5001, 1000), ACK, 0, &[(1100, 1200)], &[]),
        (0, 100, false, (5001, 1000), ACK, 0, &[(1100, 1200)], &[]),
        (0, 300, true, (1000, 5001), ACK, 100, &[], &[]),
        (
            1,
            320,
            true,
            (1000, 5001),
            ACK,
            100,
            &[],
            &[(1000, 1100), (1100, 1200)],
        ),
        (1, 320, false, (5001, 1200), ACK, 0, &[], &[]),
        (0, 340, false, (5001, 1200), ACK, 0, &[], &[]),
    ];
    for (cap, ms, up, sa, flags, len, sack, msgs) in segs {
        if seen.contains(&cap) {
            c.seg(cap, ms, up, sa, flags, len, sack, msgs);
        }
    }
    let said = c.e.snapshot().health.inferences;
    c.finish();
    (c.wire_incidents().into_iter().cloned().collect(), said)
}

/// Both ends captured (declared, or paired and placed by their own evidence), or the
/// gateway's alone: the stall of a lost first segment is the same.
#[test]
fn a_lost_first_segment_is_a_stall_at_both_ends_and_at_the_gateway_alone() {
    for (seen, declared) in [
        (&[0, 1][..], true),
        (&[0, 1][..], false),
        (&[1][..], false),
        (&[1][..], true),
    ] {
        let (inc, said) = lost_first_segment(seen, declared);
        if !declared {
            // Each capture placed by the handshake it saw, also where the other end saw it
            // too (one handshake per capture).
            for (cap, end) in [(0, "client's"), (1, "server's")] {
                if seen.contains(&cap) {
                    assert!(
                        said.iter()
                            .any(|s| s.contains(&format!("capture {cap} (")) && s.contains(end)),
                        "{said:?}"
                    );
                }
            }
        }
        assert_eq!(inc.len(), 1, "{seen:?} {declared}: {inc:#?}");
        let i = &inc[0];
        assert_eq!(i.missing, "seq 1000", "{seen:?} {declared}");
        assert_eq!(i.stall_from, Some(HolStallFrom::ReceiverArrivals));
        assert_eq!((i.start_ns, i.end_ns), (T0 + 80 * MS, Some(T0 + 320 * MS)));
    }
}

/// The gateway's capture begun mid-connection (no handshake), just after the client's
/// segment 2000 was lost upstream: the first data it sees, 2100 and 2200, lies past the hole,
/// which the gateway's first ACK (2000, SACKing them) says. One stall from 2100's arrival to
/// the resend's, holding both; a capture whose first arrival the first ACK passes has none.
/// So does the capture with nothing stated, placed at the server by the TTLs of the first two
/// segments (the first data taken for sent until then).
#[test]
fn a_capture_begun_just_past_a_hole_sees_the_hole() {
    let begun = |hole: bool, declared: bool| {
        let mut c = if declared {
            Conn::new(vec![capture(1, "gw-g0", "eth0", Host::Gateway, None)])
        } else {
            Conn::new(Vec::new())
        };
        c.ttls = (63, 64);
        c.seg(1, 100, true, (2100, 5001), ACK, 100, &[], &[]);
        c.seg(1, 101, true, (2200, 5001), ACK, 100, &[], &[]);
        if hole {
            c.seg(1, 101, false, (5001, 2000), ACK, 0, &[(2100, 2300)], &[]);
            c.seg(1, 300, true, (2000, 5001), ACK, 100, &[], &[]);
        }
        c.seg(1, 301, false, (5001, 2300), ACK, 0, &[], &[]);
        c.seg(1, 400, true, (2300, 5001), ACK, 100, &[], &[]);
        c.seg(1, 440, false, (5001, 2400), ACK, 0, &[], &[]);
        c.finish();
        c.wire_incidents().into_iter().cloned().collect::<Vec<_>>()
    };
    for declared in [true, false] {
        let inc = begun(true, declared);
        assert_eq!(inc.len(), 1, "{inc:#?}");
        let i = &inc[0];
        assert_eq!(i.stall_from, Some(HolStallFrom::ReceiverArrivals));
        assert_eq!(i.missing, "seq 2000");
        assert_eq!((i.start_ns, i.end_ns), (T0 + 100 * MS, Some(T0 + 300 * MS)));
        assert_eq!(i.bytes_held, 200);
        let none = begun(false, declared);
        assert!(none.is_empty(), "{none:#?}");
    }
}

/// The gateway's capture alone, begun mid-connection (no handshake: no round trip of its own
/// data to time), uplink only: the round trip is timed from each of its ACKs leaving to the
/// client's next segment echoing it (sent every 100 ms: 99 ms), and the timeout that gets
/// through after a handover is timed against that, as the sender's timer ran: ~300 ms, not
/// the 200 ms floor of the gateway's ACK delay.
#[test]
fn at_the_receiver_begun_mid_connection_the_echoes_of_its_acks_time_round_trips() {
    let resent = receiver_alone_through_a_handover(false);
    assert_eq!(resent.len(), 1, "{resent:?}");
    let (kind, backoff, rto_ms) = resent[0];
    assert_eq!((kind, backoff), (TcpRetransmitKind::Rto, 4), "{resent:?}");
    assert!((280..=310).contains(&rto_ms), "{resent:?}");
}

/// The client's capture begun mid-connection, the client's port below the server's (so the
/// ports guess the connection the wrong way round) and nothing stated: its first data segment
/// is read under the guess, as arriving, until the server's first ACK brings the second TTL
/// (64 leaving, 63 arriving) that places the capture at the data's sender. The stall is then
/// inferred from the ACKs, as at a sender's capture that saw the handshake.
#[test]
fn a_sender_capture_turned_round_by_the_ports_still_infers_stalls() {
    let mut c = Conn::new(Vec::new());
    c.cli = addr("10.0.0.2:4000");
    c.ttls = (64, 63);
    for k in 0..5u32 {
        let seq = 1000 + 100 * k;
        c.seg(0, 100 + u64::from(k), true, (seq, 5001), ACK, 100, &[], &[]);
    }
    c.seg(0, 140, false, (5001, 1100), ACK, 0, &[], &[]);
    for (k, r) in [1300u32, 1400, 1500].iter().enumerate() {
        c.seg(
            0,
            142 + k as u64,
            false,
            (5001, 1100),
            ACK,
            0,
            &[(1200, *r)],
            &[],
        );
    }
    c.seg(0, 145, true, (1100, 5001), ACK, 100, &[], &[]);
    c.seg(0, 185, false, (5001, 1500), ACK, 0, &[], &[]);
    c.finish();
    let inc = c.wire_incidents();
    assert_eq!(inc.len(), 1, "{inc:#?}");
    let i = inc[0];
    assert_eq!(i.stall_from, Some(HolStallFrom::SentToAcked));
    assert_eq!(i.missing, "seq 1100");
    assert_eq!((i.start_ns, i.end_ns), (T0 + 101 * MS, Some(T0 + 185 * MS)));
    assert_eq!(i.bytes_held, 300);
}

/// As above, the capture begun at a resend of bytes sent before it (900–1000), then new data
/// past bytes it never saw (1000–1100, sent before it began): read under the ports' guess as
/// arriving, that is a hole. The server's ACK places the capture at the data's sender: what
/// the guess made of it, the hole too, is undone; no stall, as the ACKs show none.
#[test]
fn a_sender_capture_turned_round_begun_at_a_resend_has_no_stall_from_the_guess() {
    let mut c = Conn::new(Vec::new());
    c.cli = addr("10.0.0.2:4000");
    c.ttls = (64, 63);
    c.seg(0, 100, true, (900, 5001), ACK, 100, &[], &[]);
    for k in 0..4u32 {
        let seq = 1100 + 100 * k;
        c.seg(0, 101 + u64::from(k), true, (seq, 5001), ACK, 100, &[], &[]);
    }
    c.seg(0, 140, false, (5001, 1100), ACK, 0, &[], &[]);
    c.seg(0, 145, false, (5001, 1500), ACK, 0, &[], &[]);
    c.finish();
    let inc = c.wire_incidents();
    assert!(inc.is_empty(), "{inc:#?}");
}

/// The gateway's capture sees segments arrive that its kernel then drops (its memory, its
/// window: past the capture point). Its ACKs say so: in order, the cumulative ACK does not
/// pass the segment; out of order with SACK in use, no block holds it. Judged 5 ms on (an
/// ACK sent just before by another path of the kernel may not show it yet). Without SACK an
/// arrival out of order waits until the hole below it is filled: the cumulative ACK then
/// passes it, or stops at it. One the capture ends before an ACK could take is not judged.
#[test]
fn arrivals_the_receiver_does_not_take_are_counted() {
    let run = |sack: bool| {
        let mut c = Conn::new(vec![capture(1, "gw-g0", "eth0", Host::Gateway, None)]);
        c.seg(1, 100, true, (1000, 5001), ACK, 100, &[], &[]);
        c.seg(1, 100, false, (5001, 1100), ACK, 0, &[], &[]);
        // In order, dropped: the ACK 1 ms on may not show it yet, the one 10 ms on does.
        c.seg(1, 110, true, (1100, 5001), ACK, 100, &[], &[]);
        c.seg(1, 111, false, (5001, 1100), ACK, 0, &[], &[]);
        c.seg(1, 120, false, (5001, 1100), ACK, 0, &[], &[]);
        // Out of order, taken (SACKed, or with no SACK waiting), then out of order dropped
        // (not in the SACK blocks, or with no SACK waiting), past a hole (1300).
        c.seg(1, 130, true, (1200, 5001), ACK, 100, &[], &[]);
        let first: &[(u32, u32)] = if sack { &[(1200, 1300)] } else { &[] };
        c.seg(1, 130, false, (5001, 1100), ACK, 0, first, &[]);
        c.seg(1, 140, true, (1400, 5001), ACK, 100, &[], &[]);
        c.seg(1, 150, false, (5001, 1100), ACK, 0, first, &[]);
        // The resend fills the hole and is taken, with what the receiver held behind it.
        c.seg(1, 300, true, (1100, 5001), ACK, 100, &[], &[]);
        c.seg(1, 300, false, (5001, 1300), ACK, 0, &[], &[]);
        // The second hole's fill (lost before the capture) is taken, and the ACK stops at
        // the arrival the receiver dropped.
        c.seg(1, 350, true, (1300, 5001), ACK, 100, &[], &[]);
        c.seg(1, 350, false, (5001, 1400), ACK, 0, &[], &[]);
        // The capture ends before any ACK could take the last arrival: not judged.
        c.seg(1, 400, true, (1500, 5001), ACK, 100, &[], &[]);
        let summary = c.e.finish(T0 + 60_000 * MS);
        let d = summary
            .tcp_wire
            .directions
            .iter()
            .find(|d| d.at_receiver)
            .cloned()
            .expect("the client's data, at the gateway");
        (d.arrivals_not_taken, d.arrivals_not_judged)
    };
    assert_eq!(run(true), (2, 1));
    assert_eq!(run(false), (2, 1));
}

/// One step at the gateway's capture: (ms, from the client, its sequence number (data, 100
/// bytes) or the ACK's number, the ACK's SACK blocks).
type Step<'a> = (u64, bool, u32, &'a [(u32, u32)]);

/// The gateway's capture of the client's first segment and its ACK, then `steps`.
fn at_the_gateway(steps: &[Step]) -> Conn {
    let mut c = Conn::new(vec![capture(1, "gw-g0", "eth0", Host::Gateway, None)]);
    c.seg(1, 100, true, (1000, 5001), ACK, 100, &[], &[]);
    c.seg(1, 100, false, (5001, 1100), ACK, 0, &[], &[]);
    for &(ms, up, n, sack) in steps {
        match up {
            true => c.seg(1, ms, true, (n, 5001), ACK, 100, &[], &[]),
            false => c.seg(1, ms, false, (5001, n), ACK, 0, sack, &[]),
        }
    }
    c
}

/// A receiver whose ACK fills the SACK option's room may hold data it does not list (Linux
/// keeps four ranges, lists three beside timestamps and forgets the oldest for a fifth): an
/// arrival it no longer lists is not called dropped, and the resend of it the sender makes
/// (never told it was SACKed) leaves it not judged. So is a copy resent before the receiver
/// can have had it in hand (no arrival after it taken yet: here the original, reordered behind
/// its successor, and a fast duplicate); one it had in hand and does not show, not taken.
#[test]
fn arrivals_the_receiver_may_hold_unlisted_are_not_judged() {
    let play = |steps: &[Step]| {
        let mut c = at_the_gateway(steps);
        let summary = c.e.finish(T0 + 60_000 * MS);
        let d = summary
            .tcp_wire
            .directions
            .iter()
            .find(|d| d.at_receiver)
            .cloned()
            .expect("the client's data, at the gateway");
        (d.arrivals_not_taken, d.arrivals_not_judged)
    };
    // 1100 lost upstream; five ranges arrive together past holes of their own, and the
    // receiver's ACKs list the four newest (its option's room): 1200 is held unlisted. The
    // timeout then resends 1100 and 1200 (never SACKed) back to back.
    let newest = &[(2000, 2100), (1800, 1900), (1600, 1700), (1400, 1500)][..];
    let unlisted = [
        (110, true, 1200, &[][..]),
        (110, true, 1400, &[]),
        (110, true, 1600, &[]),
        (110, true, 1800, &[]),
        (110, true, 2000, &[]),
        (110, false, 1100, newest),
        (130, false, 1100, newest),
        (330, true, 1100, &[]),
        (330, true, 1200, &[]),
        (330, false, 1300, newest),
    ];
    assert_eq!(play(&unlisted), (0, 1), "held unlisted, then resent");
    // Reordered: 1100 arrives behind 1200, an ACK answering 1200 leaves before the receiver
    // took 1100, and a duplicate of 1100 comes at once.
    let reordered = [
        (110, true, 1200, &[][..]),
        (110, true, 1100, &[]),
        (110, false, 1100, &[(1200, 1300)]),
        (110, true, 1100, &[]),
        (110, false, 1300, &[]),
    ];
    assert_eq!(play(&reordered), (0, 1), "resent before it was in hand");
    // Dropped at the receiver: 1200 after it is taken, then the resend of 1100 comes.
    let dropped = [
        (110, true, 1100, &[][..]),
        (110, true, 1200, &[]),
        (110, false, 1100, &[(1200, 1300)]),
        (112, true, 1100, &[]),
        (112, false, 1300, &[]),
    ];
    assert_eq!(play(&dropped), (1, 0), "in hand, not shown, resent");
}

/// At the gateway's capture the resend that fills the hole arrives, but its kernel drops it:
/// the ACKs stay at the hole, and the stall goes on until the next resend, which the ACKs
/// take (also when the dropped resend began below the hole, with bytes the receiver had). A
/// fill the ACKs take at once ends the stall at its arrival, as before.
#[test]
fn a_fill_the_receiver_drops_does_not_end_the_stall() {
    let run = |dropped: bool, from: u32| {
        let mut c = Conn::new(vec![capture(1, "gw-g0", "eth0", Host::Gateway, None)]);
        c.seg(1, 100, true, (1000, 5001), ACK, 100, &[], &[]);
        c.seg(1, 100, false, (5001, 1100), ACK, 0, &[], &[]);
        // 1100 lost on the way: 1200 arrives past the hole.
        c.seg(1, 110, true, (1200, 5001), ACK, 100, &[], &[]);
        c.seg(1, 110, false, (5001, 1100), ACK, 0, &[(1200, 1300)], &[]);
        // The fast resend of 1100 arrives (with bytes below it, from 1000).
        c.seg(1, 120, true, (from, 5001), ACK, 1200 - from, &[], &[]);
        if dropped {
            // Not taken: the ACKs, the last 10 ms on, stay at the hole.
            c.seg(1, 121, false, (5001, 1100), ACK, 0, &[(1200, 1300)], &[]);
            c.seg(1, 130, false, (5001, 1100), ACK, 0, &[(1200, 1300)], &[]);
            // The timeout's resend is taken.
            c.seg(1, 330, true, (1100, 5001), ACK, 100, &[], &[]);
            c.seg(1, 330, false, (5001, 1300), ACK, 0, &[], &[]);
        } else {
            c.seg(1, 120, false, (5001, 1300), ACK, 0, &[], &[]);
        }
        c.seg(1, 400, true, (1300, 5001), ACK, 100, &[], &[]);
        c.seg(1, 400, false, (5001, 1400), ACK, 0, &[], &[]);
        c.finish();
        let inc = c.wire_incidents();
        assert_eq!(inc.len(), 1, "{inc:#?}");
        ((inc[0].start_ns - T0) / MS, inc[0].stall_ns / MS)
    };
    assert_eq!(run(false, 1100), (110, 10));
    assert_eq!(run(true, 1100), (110, 220));
    assert_eq!(run(true, 1000), (110, 220));
}

/// The gateway's capture sees a segment arrive in order that its kernel then drops (past the
/// capture point), and the next two arrive: the receiver holds them behind the hole (its
/// ACKs stay at it, SACKing them) until the resend is taken. At the capture nothing was out
/// of order; the stall is made once the dropped arrival is judged — by its resend, or 5 ms
/// on by an ACK that does not take it —, from the first arrival behind it to the resend,
/// with the bytes and messages held (each segment completing one message).
#[test]
fn an_arrival_the_receiver_drops_stalls_what_follows_it() {
    let run = |judged_by_ack: bool| {
        let mut c = Conn::new(vec![capture(1, "gw-g0", "eth0", Host::Gateway, None)]);
        let data = |c: &mut Conn, ms: u64, seq: u32| {
            c.seg(1, ms, true, (seq, 5001), ACK, 100, &[], &[(seq, seq + 100)]);
        };
        data(&mut c, 100, 1000);
        c.seg(1, 100, false, (5001, 1100), ACK, 0, &[], &[]);
        // 1100 arrives and is dropped; 1200 and 1300 are held behind it.
        data(&mut c, 110, 1100);
        data(&mut c, 111, 1200);
        c.seg(1, 111, false, (5001, 1100), ACK, 0, &[(1200, 1300)], &[]);
        data(&mut c, 112, 1300);
        c.seg(1, 112, false, (5001, 1100), ACK, 0, &[(1200, 1400)], &[]);
        if judged_by_ack {
            c.seg(1, 120, false, (5001, 1100), ACK, 0, &[(1200, 1400)], &[]);
        }
        // The fast resend is taken: the ACK passes all the receiver held.
        data(&mut c, 130, 1100);
        c.seg(1, 130, false, (5001, 1400), ACK, 0, &[], &[]);
        data(&mut c, 140, 1400);
        c.seg(1, 140, false, (5001, 1500), ACK, 0, &[], &[]);
        c.finish();
        let inc: Vec<HolIncident> = c.wire_incidents().into_iter().cloned().collect();
        inc
    };
    for judged_by_ack in [false, true] {
        let inc = run(judged_by_ack);
        assert_eq!(inc.len(), 1, "{inc:#?}");
        let i = &inc[0];
        assert_eq!(i.stall_from, Some(HolStallFrom::ReceiverArrivals));
        assert_eq!(i.missing, "seq 1100");
        assert_eq!((i.start_ns, i.end_ns), (T0 + 111 * MS, Some(T0 + 130 * MS)));
        assert_eq!((i.bytes_held, i.messages_held), (200, 2), "{i:#?}");
    }
}

/// Holes lost upstream beside an arrival the receiver drops, each hole a stall. Behind a hole
/// lost upstream, a held arrival the receiver drops (no SACK block holds it 5 ms on) is taken
/// out of what the stall holds, and once the hole is filled it is a hole of its own: a second
/// stall, as for a second hole lost upstream, from the arrival held behind it (1400, held
/// since it came) to its resend. An arrival in order that the receiver drops, judged once a
/// hole lost upstream opened a stall past it: the hole it left comes first, its stall made
/// from the first arrival after it; the hole past it is a stall again once it is filled.
#[test]
fn drops_beside_holes_lost_upstream_are_holes_of_their_own() {
    // The steps, then the resends of 1100 and 1300, each taken.
    let play = |steps: &[Step]| {
        let resends: [Step; 4] = [
            (130, true, 1100, &[]),
            (130, false, 1300, &[(1400, 1500)]),
            (150, true, 1300, &[]),
            (150, false, 1500, &[]),
        ];
        let mut c = at_the_gateway(&[steps, &resends].concat());
        c.finish();
        let at = |ns: u64| (ns - T0) / MS;
        c.wire_incidents()
            .iter()
            .map(|i| {
                (
                    i.missing.clone(),
                    at(i.start_ns),
                    i.end_ns.map(at),
                    i.bytes_held,
                )
            })
            .collect::<Vec<_>>()
    };
    let both: &[(u32, u32)] = &[(1400, 1500), (1200, 1300)];
    // 1100 lost on the way; 1200 held, 1300 dropped, 1400 held.
    let held_dropped = play(&[
        (110, true, 1200, &[]),
        (110, false, 1100, &[(1200, 1300)]),
        (111, true, 1300, &[]),
        (112, true, 1400, &[]),
        (112, false, 1100, both),
        (120, false, 1100, both),
    ]);
    // 1100 dropped past the capture, 1200 held; 1300 lost on the way, 1400 held.
    let dropped_first = play(&[
        (110, true, 1100, &[]),
        (111, true, 1200, &[]),
        (111, false, 1100, &[(1200, 1300)]),
        (112, true, 1400, &[]),
        (112, false, 1100, both),
        (120, false, 1100, both),
    ]);
    let stall = |missing: &str, from: u64, to: u64| (missing.to_owned(), from, Some(to), 100);
    assert_eq!(
        held_dropped,
        [stall("seq 1100", 110, 130), stall("seq 1300", 112, 150)]
    );
    assert_eq!(
        dropped_first,
        [stall("seq 1100", 111, 130), stall("seq 1300", 112, 150)]
    );
}

/// Undeclared ends, as `analyze` sets them (messages wait for the captures to pair), after
/// `handshake`: ten rounds of 100 bytes from the client (each a message when `framed`), one way
/// `one_way_ms`, each acknowledged `ack_ms` after its arrival; finished, the two captures
/// said to show one path at its two ends.
fn undeclared_ends(
    handshake: impl FnOnce(&mut Conn),
    one_way_ms: u64,
    ack_ms: u64,
    framed: bool,
) -> Conn {
    let mut c = Conn::new(Vec::new());
    c.e = engine(Config {
        await_pairing: true,
        ..Config::default()
    });
    handshake(&mut c);
    let mut seq = 1000u32;
    for round in 0..10u64 {
        let t = 100 + round * 100;
        let msgs: &[(u32, u32)] = if framed { &one(seq) } else { &[] };
        let (arrival, acked) = (t + one_way_ms, t + one_way_ms + ack_ms);
        c.seg(0, t, true, (seq, 5001), ACK, 100, &[], msgs);
        c.seg(1, arrival, true, (seq, 5001), ACK, 100, &[], msgs);
        c.seg(1, acked, false, (5001, seq + 100), ACK, 0, &[], &[]);
        c.seg(
            0,
            acked + one_way_ms,
            false,
            (5001, seq + 100),
            ACK,
            0,
            &[],
            &[],
        );
        seq += 100;
    }
    let said = c.e.snapshot().health.inferences;
    c.finish();
    assert!(
        said.iter().any(|s| s.contains("same path at its two ends")),
        "{said:?}"
    );
    c
}

/// Undeclared ends of one link with nothing between them (same TTLs, a handshake too quick
/// to place either) are placed only by pairing, on data both saw: the receiver's capture saw
/// the first data arrive before, unfollowed. Nothing was lost: no stall (there was one, never
/// ended, from the first arrival followed, its hole the data that had arrived before; seen
/// with tcp_wire_vs_kernel's two captures).
#[test]
fn ends_placed_late_by_pairing_make_no_stall_of_the_data_before() {
    let quick_handshake = |c: &mut Conn| {
        for capture in [0, 1] {
            c.seg(capture, 0, true, (999, 0), SYN, 0, &[], &[]);
            c.seg(capture, 0, false, (5000, 1000), SYN | ACK, 0, &[], &[]);
            c.seg(capture, 0, true, (1000, 5001), ACK, 0, &[], &[]);
        }
    };
    let c = undeclared_ends(quick_handshake, 0, 1, false);
    let inc = c.wire_incidents();
    assert!(inc.is_empty(), "{inc:#?}");
}

/// At the gateway's capture, which saw the handshake: the last segment arrives and is
/// dropped, and the tail loss probe (its last 50 bytes) comes 6 ms on, before the resend of
/// the rest. The probe is held behind the hole until the resend: a stall (before, the
/// delivery the capture saw in order before the drop was done again at the probe's arrival,
/// and the hole was lost).
#[test]
fn a_tail_drop_stalls_its_probe_at_a_capture_that_saw_the_syn() {
    let mut c = Conn::new(vec![capture(1, "gw-g0", "eth0", Host::Gateway, None)]);
    c.seg(1, 0, true, (999, 0), SYN, 0, &[], &[]);
    c.seg(1, 0, false, (5000, 1000), SYN | ACK, 0, &[], &[]);
    c.seg(1, 20, true, (1000, 5001), ACK, 0, &[], &[]);
    c.seg(1, 100, true, (1000, 5001), ACK, 100, &[], &[]);
    c.seg(1, 100, false, (5001, 1100), ACK, 0, &[], &[]);
    c.seg(1, 110, true, (1100, 5001), ACK, 100, &[], &[]);
    c.seg(1, 110, false, (5001, 1100), ACK, 0, &[], &[]);
    c.seg(1, 116, true, (1150, 5001), ACK, 50, &[], &[]);
    c.seg(1, 116, false, (5001, 1100), ACK, 0, &[(1150, 1200)], &[]);
    c.seg(1, 120, true, (1100, 5001), ACK, 50, &[], &[]);
    c.seg(1, 120, false, (5001, 1200), ACK, 0, &[], &[]);
    c.finish();
    let inc = c.wire_incidents();
    assert_eq!(inc.len(), 1, "{inc:#?}");
    let i = inc[0];
    assert_eq!(i.missing, "seq 1100");
    assert_eq!((i.start_ns, i.end_ns), (T0 + 116 * MS, Some(T0 + 120 * MS)));
    assert_eq!(i.bytes_held, 50);
}
