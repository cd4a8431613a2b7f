//! The TCP wire matcher at the edges of what a capture shows: a capture begun in the middle of
//! a connection (what was sent before is unknown, never spurious for want of an ACK), window
//! probes into a zero window (not retransmissions, as the kernel counts them), segments
//! whose frames the capture's snap length cut (their length is the IP header's), and what
//! counts as a send left unanswered on an idle connection (no outage from a bare ACK),
//! bytes resent after a router said they were too big for the path, and acknowledged bytes
//! resent by a sender still in the recovery those ACKs ended.

#[expect(dead_code, reason = "each test uses some of the shared helpers")]
mod common;

use common::*;
use tboxscope_engine::{
    Config, Engine, Observation, OutageRecord, PathMtuSignal, Record, TcpRetransmitKind,
    TcpRetransmitRecord, TcpWireDirection,
};

const MS: u64 = 1_000_000;

struct Conn {
    e: Engine,
    cli: std::net::SocketAddr,
    srv: std::net::SocketAddr,
}

impl Conn {
    fn new() -> Self {
        Self {
            e: engine(Config::default()),
            cli: addr("10.0.0.2:41000"),
            srv: addr("192.0.2.1:8883"),
        }
    }

    fn seg(&mut self, ms: u64, up: bool, (seq, ack): (u32, u32), window: u16, len: u32) {
        let ends = if up {
            (self.cli, self.srv)
        } else {
            (self.srv, self.cli)
        };
        feed_segment(&mut self.e, ms, ends, (seq, ack), window, len);
    }

    fn data(&mut self, ms: u64, seq: u32, len: u32) {
        self.seg(ms, true, (seq, 5001), 1000, len);
    }

    fn ack(&mut self, ms: u64, ack: u32, window: u16) {
        self.seg(ms, false, (5001, ack), window, 0);
    }

    fn finish(&mut self) -> (TcpWireDirection, Vec<TcpRetransmitRecord>) {
        let s = self.e.finish(T0 + 60_000 * MS);
        let records = self
            .e
            .drain_records()
            .filter_map(|r| match r {
                Record::TcpRetransmit(x) => Some(x),
                _ => None,
            })
            .collect();
        let d = s
            .tcp_wire
            .directions
            .into_iter()
            .find(|d| d.src == "10.0.0.2:41000")
            .expect("the client's direction");
        (d, records)
    }
}

impl Conn {
    /// The outages of the run.
    fn outages(&mut self) -> Vec<OutageRecord> {
        self.e.finish(T0 + 60_000 * MS).outages
    }
}

#[test]
fn a_bare_ack_before_an_idle_stretch_is_no_send_left_unanswered() {
    // As in the public smtp.pcap: the client acknowledges the server's reply, says nothing
    // for 2.4 s (its user), then sends again and is answered a round trip later.
    let mut c = Conn::new();
    c.data(0, 1000, 100);
    c.seg(40, false, (5001, 1100), 1000, 50);
    c.seg(41, true, (1100, 5051), 1000, 0);
    c.data(2441, 1100, 6);
    c.data(2442, 1106, 6);
    c.seg(2790, false, (5051, 1112), 1000, 0);
    let outages = c.outages();
    assert!(outages.is_empty(), "an idle connection had {outages:?}");
}

#[test]
fn keep_alives_and_data_left_unanswered_are_an_outage() {
    // Idle after an exchange, then keep-alives (just below the next sequence number) into a
    // dead path, one a second: an outage once three went unanswered past the threshold.
    let mut c = Conn::new();
    c.data(0, 1000, 100);
    c.ack(40, 1100, 1000);
    for k in 0..4 {
        c.seg(10_000 + k * 1000, true, (1099, 5001), 1000, 0);
    }
    c.ack(13_500, 1100, 1000);
    // And data resent into it, unanswered for 1.5 s.
    for k in 0..4 {
        c.data(20_000 + k * 500, 1100, 100);
    }
    c.ack(21_600, 1200, 1000);
    let outages = c.outages();
    assert_eq!(outages.len(), 2, "{outages:?}");
    for (o, start) in outages.iter().zip([10_000, 20_000]) {
        assert_eq!(o.start_ns, T0 + start * MS, "{o:?}");
        assert!(o.evidence.contains("kept sending"), "{o:?}");
    }
}

#[test]
fn a_resend_of_data_sent_before_the_capture_began_is_not_called_spurious() {
    let mut c = Conn::new();
    // The capture begins with 5000..5100; 4000..4100 was sent (and lost) before it began.
    c.data(0, 5000, 100);
    c.data(1, 5100, 100);
    c.data(300, 4000, 100);
    c.ack(340, 5200, 1000);
    let (d, r) = c.finish();
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!((r[0].seq, r[0].spurious), (4000, None), "{r:?}");
    assert_eq!((d.retransmits_total(), d.spurious), (1, 0), "{d:?}");
    assert_eq!((d.unknown_history, d.out_of_order), (1, 0), "{d:?}");
}

#[test]
fn a_resend_below_an_ack_seen_is_still_spurious_mid_connection() {
    let mut c = Conn::new();
    c.data(0, 5000, 100);
    c.ack(40, 5100, 1000);
    // The receiver had 4000..4100 (acknowledged through 5100): this resend was not needed.
    c.data(300, 4000, 100);
    let (d, r) = c.finish();
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(r[0].spurious.is_some(), "{r:?}");
    assert_eq!((d.spurious, d.unknown_history), (1, 1), "{d:?}");
}

#[test]
fn acknowledged_bytes_resent_as_a_recovery_ends_belong_to_that_recovery() {
    // Seen with Linux senders (tcp_path_mtu): the ACKs ending a fast recovery wait in the
    // socket's backlog while RACK, still in recovery, resends what they acknowledge.
    let mut c = Conn::new();
    for k in 0..4 {
        c.data(k, 1000 + 100 * k as u32, 100);
    }
    c.ack(40, 1000, 1000);
    for ms in [41, 42, 43] {
        c.ack(ms, 1000, 1000);
    }
    c.data(44, 1000, 100);
    c.ack(80, 1400, 1000);
    // 1200..1300 was acknowledged a moment ago, but the sender is still recovering.
    c.data(81, 1200, 100);
    // Long after the recovery, a resend of acknowledged bytes has no known reason.
    c.data(3000, 1300, 100);
    let (d, r) = c.finish();
    let kinds: Vec<_> = r
        .iter()
        .map(|x| (x.seq, x.kind, x.spurious.is_some()))
        .collect();
    assert_eq!(
        kinds,
        [
            (1000, TcpRetransmitKind::Fast, false),
            (1200, TcpRetransmitKind::Fast, true),
            (1300, TcpRetransmitKind::Other, true),
        ],
        "{r:?}"
    );
    assert_eq!((d.retransmits_total(), d.spurious), (3, 2), "{d:?}");

    // Duplicate ACKs, then one ACK for everything before the sender resent anything: the
    // sender, reading the duplicates late, resends what was acknowledged meanwhile.
    let mut c = Conn::new();
    for k in 0..4 {
        c.data(k, 1000 + 100 * k as u32, 100);
    }
    for ms in [40, 41, 42, 43] {
        c.ack(ms, 1000, 1000);
    }
    c.ack(44, 1400, 1000);
    c.data(45, 1000, 100);
    c.data(46, 1100, 100);
    let (_, r) = c.finish();
    let kinds: Vec<_> = r.iter().map(|x| (x.seq, x.kind)).collect();
    assert_eq!(
        kinds,
        [
            (1000, TcpRetransmitKind::Fast),
            (1100, TcpRetransmitKind::Fast)
        ],
        "{r:?}"
    );

    // The last segment resent at once after an ACK that ended a loss signal answers that ACK
    // (no probe's timer ran: it needs a round trip of quiet); after a quiet of two round
    // trips, the last segment resent is a tail loss probe.
    for (resent_ms, kind) in [
        (80, TcpRetransmitKind::Fast),
        (160, TcpRetransmitKind::LossProbe),
    ] {
        let mut c = Conn::new();
        for k in 0..4 {
            c.data(k, 1000 + 100 * k as u32, 100);
        }
        c.ack(40, 1100, 1000);
        c.ack(41, 1100, 1000);
        c.ack(80, 1300, 1000);
        c.data(resent_ms, 1300, 100);
        let (_, r) = c.finish();
        let kinds: Vec<_> = r.iter().map(|x| (x.seq, x.kind)).collect();
        assert_eq!(kinds, [(1300, kind)], "{resent_ms}: {r:?}");
    }
}

#[test]
fn window_probes_into_a_zero_window_are_not_retransmissions() {
    let mut c = Conn::new();
    c.data(0, 1000, 100);
    // The receiver's buffer is full: everything acknowledged, window zero.
    c.ack(40, 1100, 0);
    // Linux probes with a zero-length segment just below the acknowledged sequence...
    c.data(240, 1099, 0);
    c.ack(241, 1100, 0);
    c.data(640, 1099, 0);
    c.ack(641, 1100, 0);
    // ...other stacks with one byte of new data, resent while the window stays shut.
    c.data(1000, 1100, 1);
    c.ack(1001, 1100, 0);
    c.data(1400, 1100, 1);
    c.ack(1401, 1100, 0);
    c.data(2200, 1100, 1);
    // The window opens: the byte and what follows are acknowledged.
    c.ack(2201, 1101, 1000);
    c.data(2202, 1101, 100);
    c.ack(2242, 1201, 1000);
    let (d, r) = c.finish();
    assert!(r.is_empty(), "{r:?}");
    assert_eq!(d.retransmits_total(), 0, "{d:?}");
    assert_eq!(d.window_probes, 4, "{d:?}");
}

impl Conn {
    /// A router's ICMP "fragmentation needed" to the client about its segment at `seq`
    /// from `segment_src`.
    fn too_big(&mut self, ms: u64, segment_src: std::net::SocketAddr, seq: u32, mtu: u32) {
        let to = std::net::SocketAddr::new(self.cli.ip(), 0);
        self.e.handle(Observation::PathMtu(PathMtuSignal {
            meta: meta(T0 + ms * MS, "eth0", 0, addr("192.0.2.254:0"), to, 590),
            mtu,
            segment_src,
            segment_dst: self.srv,
            seq,
        }));
    }
}

#[test]
fn bytes_a_router_said_were_too_big_are_resent_for_the_path_mtu() {
    use TcpRetransmitKind::{PathMtu, Rto};
    let mut c = Conn::new();
    let cli = c.cli;
    c.data(0, 1000, 1400);
    c.data(1, 2400, 1400);
    c.data(2, 3800, 100);
    c.too_big(20, cli, 1000, 1200);
    c.too_big(21, cli, 2400, 1200);
    // About no segment seen, and about a connection not followed: counted, nothing else.
    c.too_big(21, cli, 7777, 1200);
    c.too_big(21, addr("10.0.0.9:5000"), 1000, 1200);
    // The quoted segments' bytes again, smaller.
    c.data(22, 1000, 1160);
    c.data(22, 2160, 240);
    c.data(23, 2400, 1160);
    c.data(23, 3560, 240);
    c.ack(80, 3900, 1000);
    // Data first sent after the signals, resent by the timer: not for the path MTU.
    c.data(100, 3900, 500);
    c.data(900, 3900, 500);
    c.ack(980, 4400, 1000);
    let s = c.e.finish(T0 + 60_000 * MS);
    let records: Vec<TcpRetransmitRecord> =
        c.e.drain_records()
            .filter_map(|r| match r {
                Record::TcpRetransmit(x) => Some(x),
                _ => None,
            })
            .collect();
    let kinds: Vec<(u32, TcpRetransmitKind)> = records.iter().map(|r| (r.seq, r.kind)).collect();
    assert_eq!(
        kinds,
        [
            (1000, PathMtu),
            (2160, PathMtu),
            (2400, PathMtu),
            (3560, PathMtu),
            (3900, Rto)
        ]
    );
    let d = s
        .tcp_wire
        .directions
        .iter()
        .find(|d| d.src == "10.0.0.2:41000")
        .expect("the client's direction");
    assert_eq!((d.path_mtu_signals, d.path_mtu), (2, 1200), "{d:?}");
    assert_eq!(d.retransmits, [1, 0, 0, 0, 4, 0], "{d:?}");
    assert_eq!(s.tcp_wire.path_mtu_unmatched, 2);
}

#[test]
fn a_recording_made_before_the_path_mtu_kind_reads_its_counts_in_place() {
    let old = r#"{"path":"eth0","src":"a","dst":"b","segments":9,"retransmits":[1,2,3,4,5],
        "spurious":0,"rto_ladder":[],"max_rto_ms":0,"rtt_samples":0,"srtt_us":0,"rto_ms":0}"#;
    let d: TcpWireDirection = serde_json::from_str(old).expect("an old direction");
    assert_eq!(d.retransmits, [1, 2, 3, 4, 0, 5]);
    assert_eq!((d.path_mtu_signals, d.path_mtu), (0, 0));
    let now = serde_json::to_string(&d).expect("serializes");
    let back: TcpWireDirection = serde_json::from_str(&now).expect("reads back");
    assert_eq!(back, d);
}

#[test]
fn an_original_too_big_for_the_named_mtu_is_resent_for_it_before_its_own_icmp_comes() {
    use TcpRetransmitKind::{Fast, PathMtu, Rto};
    let mut c = Conn::new();
    let cli = c.cli;
    c.data(0, 1000, 1448);
    c.data(0, 2448, 1448);
    // The router's word on the first; the sender's kernel resends both at the new size, the
    // second before its own ICMP message reaches the capture.
    c.too_big(0, cli, 1000, 1280);
    c.data(1, 1000, 1228);
    c.data(1, 2228, 220);
    c.data(1, 2448, 1228);
    c.too_big(1, cli, 2448, 1280);
    c.data(1, 3676, 220);
    // The small piece of the first is lost (duplicate ACKs): resent again, fast this time.
    for _ in 0..4 {
        c.ack(2, 2228, 1000);
    }
    c.data(3, 2228, 220);
    c.ack(5, 3896, 1000);
    // Long after, a full-sized original again (the path MTU back up) lost and resent by the
    // timer: not for the path MTU.
    c.data(3000, 3896, 1448);
    c.data(4300, 3896, 1448);
    c.ack(4305, 5344, 1000);
    let (d, records) = c.finish();
    let kinds: Vec<(u32, TcpRetransmitKind)> = records.iter().map(|r| (r.seq, r.kind)).collect();
    assert_eq!(
        kinds,
        [
            (1000, PathMtu),
            (2228, PathMtu),
            (2448, PathMtu),
            (3676, PathMtu),
            (2228, Fast),
            (3896, Rto)
        ]
    );
    assert_eq!((d.path_mtu_signals, d.path_mtu), (2, 1280));
}
