//! The TCP wire matcher on hand-built segment sequences: each retransmission kind, the RTO
//! backoff ladder from the spacing of timeouts, spurious retransmissions, sequence wrap and
//! the connection bound.

#[expect(dead_code, reason = "each test uses some of the shared helpers")]
mod common;

use common::*;
use tboxscope_engine::{
    Config, Engine, HolStallFrom, Observation, Record, Spurious, TcpFlags, TcpOptions,
    TcpRetransmitKind, TcpRetransmitRecord, TcpRtoRecord, TcpSegment, TcpSource,
};

const MS: u64 = 1_000_000;
const ACK: u8 = 0x10;
const SYN: u8 = 0x02;

struct Conn {
    e: Engine,
    cli: std::net::SocketAddr,
    srv: std::net::SocketAddr,
    /// The TTLs the client's and the server's packets have at the capture (0: not known).
    ttls: (u8, u8),
}

impl Conn {
    fn new() -> Self {
        Self {
            e: Engine::new(Config::default()),
            cli: addr("10.0.0.2:41000"),
            srv: addr("192.0.2.1:8883"),
            ttls: (0, 0),
        }
    }

    fn seg(
        &mut self,
        ms: u64,
        up: bool,
        (seq, ack): (u32, u32),
        flags: u8,
        len: u32,
        sack: &[(u32, u32)],
    ) {
        let (src, dst) = if up {
            (self.cli, self.srv)
        } else {
            (self.srv, self.cli)
        };
        let mut options = TcpOptions::default();
        for (i, b) in sack.iter().enumerate() {
            options.sack[i] = *b;
        }
        options.sack_count = sack.len() as u8;
        let mut meta = meta(T0 + ms * MS, "eth0", 0, src, dst, 40 + len);
        meta.ttl = if up { self.ttls.0 } else { self.ttls.1 };
        self.e.handle(Observation::TcpSegment(TcpSegment {
            meta,
            seq,
            ack,
            flags: TcpFlags(flags),
            window: 1000,
            len,
            options,
            ..TcpSegment::default()
        }));
    }

    /// Data from the client.
    fn data(&mut self, ms: u64, seq: u32, len: u32) {
        self.seg(ms, true, (seq, 5001), ACK, len, &[]);
    }

    /// Data from the client carrying the timestamps option with `tsval`.
    fn data_ts(&mut self, ms: u64, seq: u32, len: u32, tsval: u32) {
        self.data_echo(ms, seq, len, (tsval, 0));
    }

    /// Data from the client carrying the timestamps option (TSval, TSecr).
    fn data_echo(&mut self, ms: u64, seq: u32, len: u32, timestamps: (u32, u32)) {
        let mut meta = meta(T0 + ms * MS, "eth0", 0, self.cli, self.srv, 52 + len);
        meta.ttl = self.ttls.0;
        self.e.handle(Observation::TcpSegment(TcpSegment {
            meta,
            seq,
            ack: 5001,
            flags: TcpFlags(ACK),
            window: 1000,
            len,
            options: TcpOptions {
                timestamps: Some(timestamps),
                ..TcpOptions::default()
            },
            ..TcpSegment::default()
        }));
    }

    /// An ACK from the server.
    fn ack(&mut self, ms: u64, ack: u32, sack: &[(u32, u32)]) {
        self.seg(ms, false, (5001, ack), ACK, 0, sack);
    }

    /// Handshake with a 40 ms RTT at time 0 (client ISN 999, server 5000), then 100 bytes
    /// acknowledged after 40 ms: RTT samples of 40 ms, RTO 240 ms.
    fn established(isn: u32) -> Self {
        let mut c = Self::new();
        c.seg(0, true, (isn, 0), SYN, 0, &[]);
        c.seg(40, false, (5000, isn.wrapping_add(1)), SYN | ACK, 0, &[]);
        c.seg(40, true, (isn.wrapping_add(1), 5001), ACK, 0, &[]);
        c.data(50, isn.wrapping_add(1), 100);
        c.ack(90, isn.wrapping_add(101), &[]);
        c
    }

    fn records(&mut self) -> (Vec<TcpRetransmitRecord>, Vec<TcpRtoRecord>) {
        let _ = self.e.finish(T0 + 60_000 * MS);
        let (mut r, mut t) = (Vec::new(), Vec::new());
        for rec in self.e.drain_records() {
            match rec {
                Record::TcpRetransmit(x) => r.push(x),
                Record::TcpRto(x) => t.push(x),
                _ => {}
            }
        }
        (r, t)
    }
}

#[test]
fn duplicate_acks_and_sack_make_a_fast_retransmit() {
    let mut c = Conn::established(999);
    for k in 0..5u32 {
        c.data(100 + u64::from(k), 1100 + 100 * k, 100);
    }
    // The first is lost: the next four are SACKed, each ACK a duplicate.
    for k in 1..5u32 {
        c.ack(140 + u64::from(k), 1100, &[(1200, 1200 + 100 * k)]);
    }
    c.data(146, 1100, 100);
    c.ack(186, 1600, &[]);
    let (r, t) = c.records();
    assert!(t.is_empty(), "{t:?}");
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0].kind, TcpRetransmitKind::Fast);
    assert_eq!((r[0].seq, r[0].len, r[0].spurious), (1100, 100, None));
    assert_eq!(r[0].source, TcpSource::Wire);
    assert_eq!(r[0].rto_ms, 240);
    assert_eq!(
        (r[0].src.as_str(), r[0].dst.as_str()),
        ("10.0.0.2:41000", "192.0.2.1:8883")
    );
    let s = c.e.finish(T0 + 61_000 * MS).tcp_wire;
    assert_eq!(s.directions[0].retransmits, [0, 1, 0, 0, 0, 0]);
}

#[test]
fn repeated_timeouts_climb_the_backoff_ladder() {
    let mut c = Conn::established(999);
    // A blackout: one segment, resent after 240, 480 and 960 ms of silence.
    c.data(1000, 1100, 50);
    c.data(1240, 1100, 50);
    c.data(1720, 1100, 50);
    c.data(2680, 1100, 50);
    c.ack(2720, 1150, &[]);
    let (r, t) = c.records();
    assert_eq!(
        t.iter()
            .map(|x| (x.timeout, x.backoff, x.rto_ms))
            .collect::<Vec<_>>(),
        [(1, 0, 240), (2, 1, 480), (3, 2, 960)]
    );
    assert!(r
        .iter()
        .all(|x| x.kind == TcpRetransmitKind::Rto && x.spurious.is_none()));
    assert_eq!(r.iter().map(|x| x.backoff).collect::<Vec<_>>(), [0, 1, 2]);
    let s = c.e.finish(T0 + 61_000 * MS).tcp_wire;
    assert_eq!(s.directions[0].rto_ladder, [1, 1, 1]);
    assert_eq!(s.directions[0].max_rto_ms, 960);
}

#[test]
fn a_timeout_missing_from_the_capture_shows_in_the_spacing() {
    let mut c = Conn::established(999);
    c.data(1000, 1100, 50);
    c.data(1240, 1100, 50);
    // The 480 ms timeout's retransmission was not captured: the next comes 480 + 960 later.
    c.data(2680, 1100, 50);
    let (_, t) = c.records();
    assert_eq!(t.iter().map(|x| x.backoff).collect::<Vec<_>>(), [0, 2]);
}

#[test]
fn the_tail_resent_before_the_timeout_is_a_loss_probe() {
    let mut c = Conn::established(999);
    c.data(1000, 1100, 100);
    c.data(1001, 1200, 100);
    c.data(1002, 1300, 100);
    // 2 × SRTT later, the last segment again.
    c.data(1082, 1300, 100);
    c.ack(1122, 1400, &[]);
    let (r, _) = c.records();
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0].kind, TcpRetransmitKind::LossProbe);
}

#[test]
fn after_a_timeout_the_rest_is_loss_recovery() {
    let mut c = Conn::established(999);
    c.data(1000, 1100, 100);
    c.data(1001, 1200, 100);
    c.data(1240, 1100, 100);
    c.ack(1280, 1200, &[]);
    c.data(1281, 1200, 100);
    c.ack(1321, 1300, &[]);
    let (r, t) = c.records();
    assert_eq!(t.len(), 1);
    assert_eq!(
        r.iter().map(|x| x.kind).collect::<Vec<_>>(),
        [TcpRetransmitKind::Rto, TcpRetransmitKind::LossRecovery]
    );
}

#[test]
fn dsack_and_an_earlier_ack_mark_spurious_retransmissions() {
    let mut c = Conn::established(999);
    // Delayed, not lost: the RTO fires, then the receiver reports the data twice (D-SACK).
    c.data(1000, 1100, 100);
    c.data(1240, 1100, 100);
    c.ack(1280, 1200, &[(1100, 1200)]);
    // Acknowledged, then sent again anyway.
    c.data(2000, 1200, 100);
    c.ack(2040, 1300, &[]);
    c.data(2041, 1200, 100);
    let (r, _) = c.records();
    assert_eq!(
        r.iter().map(|x| (x.seq, x.spurious)).collect::<Vec<_>>(),
        [
            (1100, Some(Spurious::Dsack)),
            (1200, Some(Spurious::AckedBefore))
        ]
    );
    let s = c.e.finish(T0 + 61_000 * MS).tcp_wire;
    assert_eq!(s.directions[0].spurious, 2);
}

#[test]
fn sequence_numbers_wrap() {
    let isn = u32::MAX - 150;
    let mut c = Conn::established(isn);
    // Data across the wrap, all new: no retransmission.
    let mut seq = isn.wrapping_add(101);
    for k in 0..4u64 {
        c.data(100 + k, seq, 100);
        seq = seq.wrapping_add(100);
    }
    c.ack(150, seq, &[]);
    // One segment after the wrap resent after a timeout.
    c.data(1000, seq, 100);
    c.data(1240, seq, 100);
    let (r, t) = c.records();
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!((r[0].seq, r[0].kind), (seq, TcpRetransmitKind::Rto));
    assert_eq!(t.len(), 1);
}

#[test]
fn a_resent_syn_is_a_timeout() {
    let mut c = Conn::new();
    c.seg(0, true, (999, 0), SYN, 0, &[]);
    c.seg(1000, true, (999, 0), SYN, 0, &[]);
    c.seg(3000, true, (999, 0), SYN, 0, &[]);
    let (r, t) = c.records();
    assert_eq!(r.len(), 2);
    assert_eq!(t.iter().map(|x| x.backoff).collect::<Vec<_>>(), [0, 1]);
}

#[test]
fn connections_are_bounded_and_evictions_counted() {
    let mut c = Conn::new();
    for i in 0..5000u32 {
        let src = std::net::SocketAddr::new(c.cli.ip(), 1024 + (i % 60_000) as u16);
        c.e.handle(Observation::TcpSegment(TcpSegment {
            meta: meta(T0 + u64::from(i) * MS, "eth0", 0, src, c.srv, 60),
            seq: i,
            flags: TcpFlags(SYN),
            ..TcpSegment::default()
        }));
    }
    let s = c.e.finish(T0 + 60_000 * MS).tcp_wire;
    assert_eq!(s.connections, 5000);
    assert!(s.evicted_connections > 0);
    assert!(s.directions.len() <= 4096);
}

#[test]
fn a_connection_active_through_evictions_keeps_its_state() {
    let mut c = Conn::new();
    let other = |c: &mut Conn, i: u32, ms: u64| {
        let src = std::net::SocketAddr::new(c.cli.ip(), 1024 + (i % 30_000) as u16);
        c.e.handle(Observation::TcpSegment(TcpSegment {
            meta: meta(T0 + ms * MS, "eth0", 0, src, c.srv, 60),
            seq: i,
            flags: TcpFlags(SYN),
            ..TcpSegment::default()
        }));
    };
    // Connections seen before this one, so that evictions move it in the table.
    for i in 0..100u32 {
        other(&mut c, i, 0);
    }
    c.seg(0, true, (999, 0), SYN, 0, &[]);
    c.seg(40, false, (5000, 1000), SYN | ACK, 0, &[]);
    c.seg(40, true, (1000, 5001), ACK, 0, &[]);
    // 5000 more come and go while this one keeps sending: the table evicts the quiet ones
    // several times over, and this one is still found with its data.
    let mut seq = 1000u32;
    for i in 100..5100u32 {
        let ms = 100 + u64::from(i);
        other(&mut c, i, ms);
        if i % 100 == 0 {
            c.data(ms, seq, 100);
            seq = seq.wrapping_add(100);
        }
    }
    // Its first unacknowledged segment (sent at 200 ms) sent again after a long silence: a
    // timeout, whose original only the state kept since the start knows.
    c.data(5600, 1000, 100);
    let (r, _) = c.records();
    assert_eq!(
        r.iter()
            .map(|x| (x.seq, x.kind, x.since_first_ms))
            .collect::<Vec<_>>(),
        [(1000, TcpRetransmitKind::Rto, 5400)],
        "{r:?}"
    );
    let s = c.e.finish(T0 + 61_000 * MS).tcp_wire;
    assert!(s.evicted_connections > 0);
}

#[test]
fn a_reordered_original_is_not_a_retransmission() {
    let mut c = Conn::established(999);
    // 1200..1300 arrives after 1300..1500 (reordered on the way, as a receiver-side capture
    // sees it): its first copy here, filling a hole, not a resend.
    c.data(100, 1100, 100);
    c.data(101, 1300, 100);
    c.data(102, 1400, 100);
    c.data(103, 1200, 100);
    c.ack(143, 1500, &[]);
    // A resend of something seen is still one.
    c.data(150, 1500, 100);
    c.data(151, 1600, 100);
    c.data(152, 1500, 100);
    c.ack(192, 1700, &[]);
    let (r, _) = c.records();
    assert_eq!(r.iter().map(|x| x.seq).collect::<Vec<_>>(), [1500], "{r:?}");
    let s = c.e.finish(T0 + 61_000 * MS).tcp_wire;
    assert_eq!(s.directions[0].out_of_order, 1);
    assert_eq!(s.directions[0].retransmits_total(), 1);
}

#[test]
fn timestamps_tell_a_reordered_original_from_a_resend_after_an_upstream_loss() {
    let mut c = Conn::established(999);
    // Reordered: 1200 carries the TSval of its neighbours (sent before 1300).
    c.data_ts(100, 1100, 100, 7000);
    c.data_ts(101, 1300, 100, 7001);
    c.data_ts(102, 1200, 100, 7000);
    c.ack(142, 1400, &[]);
    // 1500 lost before this (receiver-side) capture: its first copy here is the sender's
    // resend, with a TSval newer than everything seen.
    c.data_ts(200, 1400, 100, 7100);
    c.data_ts(201, 1600, 100, 7101);
    c.data_ts(202, 1700, 100, 7102);
    c.ack(203, 1500, &[(1600, 1800)]);
    c.data_ts(260, 1500, 100, 7160);
    c.ack(300, 1800, &[]);
    let (r, _) = c.records();
    assert_eq!(
        r.iter().map(|x| (x.seq, x.kind)).collect::<Vec<_>>(),
        [(1500, TcpRetransmitKind::Fast)],
        "{r:?}"
    );
    let s = c.e.finish(T0 + 61_000 * MS).tcp_wire;
    assert_eq!(s.directions[0].out_of_order, 1);
}

#[test]
fn a_resend_sent_in_the_same_tick_as_new_data_is_still_a_resend() {
    let mut c = Conn::established(999);
    // 1100 lost before this (receiver-side) capture; 1200..1400 arrive (TSval 7000).
    c.data_ts(100, 1200, 100, 7000);
    c.data_ts(101, 1300, 100, 7000);
    c.ack(102, 1100, &[(1200, 1400)]);
    // A round trip later the sender sends new data and, in the same millisecond, the resend:
    // its TSval equals the newest seen, but is newer than 1200's, the first segment above it
    // (a reordered original never is).
    c.data_ts(140, 1400, 100, 7040);
    c.data_ts(141, 1100, 100, 7040);
    c.ack(142, 1500, &[]);
    let (r, _) = c.records();
    assert_eq!(r.iter().map(|x| x.seq).collect::<Vec<_>>(), [1100], "{r:?}");
    let s = c.e.finish(T0 + 61_000 * MS).tcp_wire;
    assert_eq!(s.directions[0].out_of_order, 0);
}

#[test]
fn a_resend_within_the_tick_of_the_data_above_it_is_told_by_its_echo() {
    let mut c = Conn::established(999);
    // A round trip under the sender's tick (an idle path): 1100 is lost before this
    // (receiver-side) capture, 1200 arrives, and the resend that the receiver's SACK set off
    // leaves in the same millisecond (TSval 7000) — but echoes that SACK's TSval (3001), newer
    // than the echo 1200 carried (3000). A reordered original, sent before 1200, never does.
    c.data_echo(100, 1200, 100, (7000, 3000));
    c.ack(100, 1100, &[(1200, 1300)]);
    c.data_echo(100, 1100, 100, (7000, 3001));
    // Reordered on the way: 1400 (sent before 1500) arrives after it, with the same clocks.
    c.data_echo(101, 1300, 100, (7001, 3001));
    c.data_echo(101, 1500, 100, (7001, 3001));
    c.data_echo(101, 1400, 100, (7001, 3001));
    c.ack(140, 1600, &[]);
    let (r, _) = c.records();
    assert_eq!(r.iter().map(|x| x.seq).collect::<Vec<_>>(), [1100], "{r:?}");
    let s = c.e.finish(T0 + 61_000 * MS).tcp_wire;
    assert_eq!(s.directions[0].out_of_order, 1);
}

/// A bulk transfer's loss as `c`'s capture shows it after `c`'s handshake (and its first
/// data segment, 1000, unless `sent`): 1100 missing, 1200 and 1300 ahead of it, the
/// server's duplicate ACKs, the resend.
fn one_loss(c: &mut Conn, sent: bool) -> tboxscope_engine::Summary {
    if !sent {
        c.data(100, 1000, 100);
    }
    c.data(101, 1200, 100);
    c.ack(101, 1100, &[(1200, 1300)]);
    c.data(102, 1300, 100);
    c.ack(102, 1100, &[(1200, 1400)]);
    c.data(103, 1100, 100);
    c.ack(103, 1400, &[]);
    c.e.finish(T0 + 61_000 * MS)
}

#[test]
fn a_capture_at_the_servers_end_is_told_by_its_handshake() {
    // At the server: its SYN-ACK answers the SYN at once, the client's ACK, on its first
    // data, comes a 40 ms round trip later. The client's data arrives here: its hole is the
    // receiver's own stall (the segment that told counts as arrived, or a hole below the
    // next one would never fill).
    let mut c = Conn::new();
    c.seg(0, true, (999, 0), SYN, 0, &[]);
    c.seg(0, false, (5000, 1000), SYN | ACK, 0, &[]);
    c.data(40, 1000, 100);
    let s = one_loss(&mut c, true);
    let said = s.health.inferences.join("\n");
    assert!(
        said.contains("is on the gateway: at the server's end"),
        "{said}"
    );
    let stalls: Vec<_> = s
        .hol_incidents
        .iter()
        .map(|i| (i.missing.as_str(), i.stall_from, i.end_ns.is_some()))
        .collect();
    assert_eq!(
        stalls,
        [("seq 1100", Some(HolStallFrom::ReceiverArrivals), true)],
        "{said}"
    );
    // The same traffic seen at the client (a round trip between SYN and SYN-ACK): sent
    // here, not the receiver's arrivals.
    let mut c = Conn::established(999);
    placed_at_the_client(&one_loss(&mut c, true));
}

/// `s` says its capture is on the T-Box, where the client's data is sent: no stall from the
/// receiver's arrivals.
fn placed_at_the_client(s: &tboxscope_engine::Summary) {
    let said = s.health.inferences.join("\n");
    assert!(
        said.contains("is on the T-Box: at the client's end"),
        "{said}"
    );
    assert!(
        s.hol_incidents
            .iter()
            .all(|i| i.stall_from != Some(HolStallFrom::ReceiverArrivals)),
        "{said}"
    );
}

/// [`one_loss`] seen by a capture begun mid-connection (no handshake) where the client's and
/// the server's packets have `ttls`.
fn one_loss_mid_connection(ttls: (u8, u8)) -> tboxscope_engine::Summary {
    let mut c = Conn::new();
    c.ttls = ttls;
    c.ack(0, 1000, &[]);
    c.data(40, 1000, 100);
    one_loss(&mut c, true)
}

#[test]
fn a_capture_begun_mid_connection_is_placed_by_its_ttls() {
    // At the server, no handshake: the server's ACK leaves at its initial TTL (64), the
    // client's data arrives 12 routers lower. Its hole is the receiver's own stall, as after
    // a handshake.
    let s = one_loss_mid_connection((52, 64));
    let said = s.health.inferences.join("\n");
    assert!(
        said.contains(
            "is on the gateway: at the server's end of 10.0.0.2:41000 → 192.0.2.1:8883 \
             (the client's packets have TTL 52, the server's 64"
        ),
        "{said}"
    );
    let stalls: Vec<_> = s
        .hol_incidents
        .iter()
        .map(|i| (i.missing.as_str(), i.stall_from))
        .collect();
    assert_eq!(
        stalls,
        [("seq 1100", Some(HolStallFrom::ReceiverArrivals))],
        "{said}"
    );
    // At the client (a Windows one: 128) the same traffic is sent: no receiver's stall.
    placed_at_the_client(&one_loss_mid_connection((128, 50)));
    // Both sent from here (no router between them) or neither (a capture in the middle): no
    // verdict, the capture stays assumed to be the T-Box's.
    for ttls in [(64, 64), (60, 52)] {
        let s = one_loss_mid_connection(ttls);
        assert!(
            s.health.inferences.is_empty(),
            "{ttls:?}: {:?}",
            s.health.inferences
        );
    }
}

#[test]
fn the_receivers_ack_fills_a_hole_its_capture_did_not_see_filled() {
    // At the server, begun during a loss episode: bytes 1200..1300 had arrived before the
    // capture began. The receiver's ACK past them says it holds them: no stall, and the
    // next hole is a stall of its own.
    let mut c = Conn::new();
    c.ttls = (52, 64);
    c.ack(0, 1000, &[]);
    c.data(1, 1100, 100);
    c.data(2, 1300, 100);
    c.ack(3, 1400, &[]);
    c.data(10, 1500, 100);
    c.ack(10, 1400, &[(1500, 1600)]);
    c.data(50, 1400, 100);
    c.ack(50, 1600, &[]);
    let s = c.e.finish(T0 + 61_000 * MS);
    let stalls: Vec<_> = s
        .hol_incidents
        .iter()
        .map(|i| (i.missing.as_str(), i.stall_ns / MS, i.end_ns.is_some()))
        .collect();
    assert_eq!(
        stalls,
        [("seq 1200", 1, true), ("seq 1400", 40, true)],
        "{:?}",
        s.health.inferences
    );
}

#[test]
fn the_new_part_of_a_resend_counts_as_seen() {
    let mut c = Conn::established(999);
    c.data(100, 1100, 100);
    // Resent with 100 new bytes behind it, then the new part alone again: both resends.
    c.data(400, 1100, 200);
    c.data(700, 1200, 100);
    c.ack(740, 1300, &[]);
    let (r, _) = c.records();
    assert_eq!(r.iter().map(|x| x.seq).collect::<Vec<_>>(), [1100, 1200]);
    let s = c.e.finish(T0 + 61_000 * MS).tcp_wire;
    assert_eq!(s.directions[0].out_of_order, 0);
}

#[test]
fn go_back_n_after_a_timeout_counts_every_resend() {
    let mut c = Conn::established(999);
    // Five originals (one a GSO burst of two), then a timeout: the head alone, and after its
    // ACK the rest resent in bursts that span originals.
    c.data(100, 1100, 100);
    c.data(101, 1200, 200);
    c.data(102, 1400, 100);
    c.data(103, 1500, 100);
    c.data(400, 1100, 100);
    c.ack(440, 1200, &[]);
    c.data(441, 1200, 300);
    c.data(442, 1500, 100);
    c.ack(482, 1600, &[]);
    let (r, t) = c.records();
    assert_eq!(t.len(), 1);
    assert_eq!(
        r.iter().map(|x| (x.seq, x.len, x.kind)).collect::<Vec<_>>(),
        [
            (1100, 100, TcpRetransmitKind::Rto),
            (1200, 300, TcpRetransmitKind::LossRecovery),
            (1500, 100, TcpRetransmitKind::LossRecovery)
        ]
    );
}
