//! The kernel's TCP retransmissions joined with a capture's: both agree on a sender-side
//! capture; a capture behind a lossy link misses originals (`original_not_captured`) or the
//! resend itself (`not_on_wire`); a resend the probes did not report (`not_in_kernel`); and
//! what neither side could judge (another host's sender, a time no capture covered).

#[expect(dead_code, reason = "each test uses some of the shared helpers")]
mod common;

use common::*;
use tboxscope_engine::{
    Config, Engine, Observation, Record, RetransmitKind, TcpDisagreement, TcpDisagreementRecord,
    TcpEvent, TcpEventKind, TcpFigures, TcpFlags, TcpJoinSummary, TcpOptions, TcpSegment,
};

const MS: u64 = 1_000_000;
const ACK: u8 = 0x10;

struct Run {
    e: Engine,
    cli: std::net::SocketAddr,
    srv: std::net::SocketAddr,
}

impl Run {
    fn new() -> Self {
        Self {
            e: engine(Config::default()),
            cli: addr("10.0.0.2:41000"),
            srv: addr("192.0.2.1:8883"),
        }
    }

    fn seg(&mut self, ms: u64, up: bool, (seq, ack): (u32, u32), len: u32) {
        let ends = if up {
            (self.cli, self.srv)
        } else {
            (self.srv, self.cli)
        };
        feed_segment(&mut self.e, ms, ends, (seq, ack), 1000, len);
    }

    /// Client data on the wire.
    fn data(&mut self, ms: u64, seq: u32, len: u32) {
        self.seg(ms, true, (seq, 5001), len);
    }

    /// The server's ACK on the wire.
    fn ack(&mut self, ms: u64, ack: u32) {
        self.seg(ms, false, (5001, ack), 0);
    }

    /// A kernel event of the client's socket.
    fn kernel(&mut self, ms: u64, kind: TcpEventKind) {
        self.kernel_of(ms, kind, self.cli, self.srv);
    }

    fn kernel_of(
        &mut self,
        ms: u64,
        kind: TcpEventKind,
        local: std::net::SocketAddr,
        remote: std::net::SocketAddr,
    ) {
        self.e.handle(Observation::Tcp(TcpEvent {
            ts_ns: T0 + ms * MS,
            path: "eth0".into(),
            local,
            remote,
            kind,
            figures: TcpFigures::default(),
        }));
    }

    fn resend(&mut self, ms: u64, kind: RetransmitKind, seq: u32, len: u32) {
        self.kernel(ms, TcpEventKind::Retransmit { kind, seq, len });
    }

    /// The first 1000 bytes sent and acknowledged, the kernel's socket reported.
    fn started() -> Self {
        let mut r = Self::new();
        r.kernel(0, TcpEventKind::Sample);
        r.data(1, 1000, 100);
        r.ack(41, 1100);
        r
    }

    fn finish(&mut self, ms: u64) -> (TcpJoinSummary, Vec<TcpDisagreementRecord>) {
        let s = self.e.finish(T0 + ms * MS);
        let records = self
            .e
            .drain_records()
            .filter_map(|r| match r {
                Record::TcpDisagreement(d) => Some(d),
                _ => None,
            })
            .collect();
        (s.tcp_join, records)
    }
}

#[test]
fn a_sender_side_capture_agrees_with_the_kernel() {
    let mut r = Run::started();
    // Four segments, the first lost after the capture point: the kernel resends it fast,
    // the capture sees the resend 50 µs later.
    for k in 0..4u32 {
        r.data(50 + u64::from(k), 1100 + 100 * k, 100);
    }
    for k in 0..3 {
        r.ack(91 + k, 1100);
    }
    r.e.handle(Observation::Tcp(TcpEvent {
        ts_ns: T0 + 94 * MS,
        path: "eth0".into(),
        local: r.cli,
        remote: r.srv,
        kind: TcpEventKind::Retransmit {
            kind: RetransmitKind::Fast,
            seq: 1100,
            len: 100,
        },
        figures: TcpFigures::default(),
    }));
    r.e.handle(Observation::TcpSegment(TcpSegment {
        meta: meta(T0 + 94 * MS + 50_000, "eth0", 0, r.cli, r.srv, 140),
        seq: 1100,
        ack: 5001,
        flags: TcpFlags(ACK),
        window: 1000,
        len: 100,
        options: TcpOptions::default(),
        messages: Default::default(),
    }));
    r.ack(134, 1500);
    // Later traffic: the capture ran on.
    r.data(3000, 1500, 100);
    r.ack(3040, 1600);
    let (j, records) = r.finish(10_000);
    assert!(records.is_empty(), "{records:?}");
    assert_eq!(j.directions.len(), 1, "{j:?}");
    let d = &j.directions[0];
    assert_eq!(
        (
            d.kernel,
            d.wire,
            d.matched,
            d.kinds_differ,
            d.disagreements()
        ),
        (1, 1, 1, 0, 0),
        "{d:?}"
    );
    assert_eq!(
        (d.path.as_str(), d.src.as_str(), d.dst.as_str()),
        ("eth0", "10.0.0.2:41000", "192.0.2.1:8883")
    );
    assert_eq!(j.totals.matched, 1);
    assert_eq!((j.kernel_outside_captures, j.wire_not_probed), (0, 0));
}

#[test]
fn a_capture_behind_the_loss_misses_originals_and_resends() {
    let mut r = Run::started();
    // Lost before this capture: the original of 1100 and, later, both copies of 1300.
    r.data(51, 1200, 100);
    r.resend(300, RetransmitKind::Rto, 1100, 100);
    // The resend reaches the capture 20 ms later: its first copy here.
    r.data(320, 1100, 100);
    r.ack(340, 1300);
    r.data(400, 1400, 100);
    r.resend(700, RetransmitKind::Rto, 1300, 100);
    r.resend(1100, RetransmitKind::Rto, 1300, 100);
    r.data(1120, 1300, 100);
    r.ack(1140, 1500);
    r.data(4000, 1500, 100);
    r.ack(4040, 1600);
    let (j, records) = r.finish(10_000);
    let d = &j.directions[0];
    assert_eq!(
        (d.kernel, d.matched, d.original_not_captured, d.not_on_wire),
        (3, 0, 2, 1),
        "{d:?}"
    );
    let what: Vec<(TcpDisagreement, u32, u64)> = records
        .iter()
        .map(|x| (x.disagreement, x.seq, (x.ts_ns - T0) / MS))
        .collect();
    assert_eq!(
        what,
        [
            (TcpDisagreement::OriginalNotCaptured, 1100, 300),
            (TcpDisagreement::NotOnWire, 1300, 700),
            (TcpDisagreement::OriginalNotCaptured, 1300, 1100),
        ]
    );
    assert_eq!(records[0].kernel_kind, Some(RetransmitKind::Rto));
    assert_eq!(j.totals.disagreements(), 3);
}

#[test]
fn a_resend_the_kernel_did_not_report_is_counted() {
    let mut r = Run::started();
    r.data(50, 1100, 100);
    // Resent after 300 ms of silence (an RTO on the wire); no kernel event for it.
    r.data(350, 1100, 100);
    r.ack(390, 1200);
    r.data(4000, 1200, 100);
    r.kernel(4001, TcpEventKind::Sample);
    let (j, records) = r.finish(10_000);
    let d = &j.directions[0];
    assert_eq!((d.kernel, d.wire, d.not_in_kernel), (0, 1, 1), "{d:?}");
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].disagreement, TcpDisagreement::NotInKernel);
    assert_eq!(records[0].seq, 1100);
    assert!(records[0].wire_kind.is_some());
}

#[test]
fn what_neither_side_could_see_is_not_held_against_the_other() {
    let mut r = Run::new();
    // The kernel resends before the capture starts.
    r.kernel(0, TcpEventKind::Sample);
    r.resend(10, RetransmitKind::Rto, 900, 100);
    r.data(1000, 1000, 100);
    r.ack(1040, 1100);
    // The server (whose socket the probes never reported) resends on the wire.
    r.seg(1100, false, (5001, 1100), 10);
    r.seg(1500, false, (5001, 1100), 10);
    r.ack(1540, 1100);
    r.data(5000, 1100, 100);
    let (j, records) = r.finish(10_000);
    assert!(records.is_empty(), "{records:?}");
    assert_eq!(
        (j.kernel_outside_captures, j.wire_not_probed),
        (1, 1),
        "{j:?}"
    );
    assert_eq!(j.totals.disagreements(), 0);
    // A socket the kernel reported only from its own side: still judged as its sender.
    let mut r = Run::started();
    r.kernel_of(2, TcpEventKind::Sample, r.srv, r.cli);
    assert!(r.finish(100).1.is_empty());
}

#[test]
fn verdicts_wait_for_late_kernel_events_and_the_snapshot_shows_them() {
    let mut r = Run::started();
    r.data(50, 1100, 100);
    r.data(350, 1100, 100);
    // The kernel's event comes after the capture's copy (the live UI's order can be either).
    r.resend(349, RetransmitKind::Rto, 1100, 100);
    r.ack(390, 1200);
    r.data(4000, 1200, 100);
    r.e.tick(T0 + 6000 * MS);
    let snap = r.e.snapshot();
    assert_eq!(snap.tcp_join.totals.matched, 1, "{:?}", snap.tcp_join);
    assert_eq!(snap.tcp_wire.directions.len(), 1);
    let (j, records) = r.finish(10_000);
    assert!(records.is_empty(), "{records:?}");
    assert_eq!(j.totals.matched, 1);
}
