//! TCP HOL incidents from kernel events alone (RTO with backoff) and with captured segments
//! (original send time, bytes behind the hole, the ACK that ends the stall).

#[expect(dead_code, reason = "each test uses some of the shared helpers")]
mod common;

use common::*;
use tboxscope_engine::{
    Config, CongState, Engine, HolProtocol, Observation, Record, Recovery, RetransmitKind,
    TcpEvent, TcpEventKind, TcpFigures, TcpSegment,
};

fn ev(ts: u64, kind: TcpEventKind, backoff: u8, rto_ms: u32) -> Observation {
    Observation::Tcp(TcpEvent {
        ts_ns: ts,
        path: "eth0".to_owned(),
        local: addr("10.0.0.2:41000"),
        remote: addr("192.0.2.1:8883"),
        kind,
        figures: TcpFigures {
            congestion_control: "cubic".parse().ok(),
            cwnd: 10,
            ssthresh: 7,
            srtt_us: 40_000,
            rto_us: rto_ms * 1000,
            backoff,
            retransmits: u32::from(backoff) + 1,
        },
    })
}

fn incidents(e: &mut Engine) -> Vec<tboxscope_engine::HolIncident> {
    e.drain_records()
        .filter_map(|r| match r {
            Record::HolIncident(h) => Some(h),
            _ => None,
        })
        .collect()
}

/// The one incident `e` records from `obs`.
fn one_incident(e: &mut Engine, obs: Vec<Observation>) -> tboxscope_engine::HolIncident {
    for o in obs {
        e.handle(o);
    }
    let mut incs = incidents(e);
    assert_eq!(incs.len(), 1, "{incs:?}");
    incs.remove(0)
}

#[test]
fn rto_with_backoff_from_kernel_events_is_one_incident() {
    let t = T0 + 1_000_000_000;
    let rto = |s: u32| TcpEventKind::Retransmit {
        kind: RetransmitKind::Rto,
        seq: s,
        len: 600,
    };
    let obs = vec![
        ev(t, TcpEventKind::RtoExpired, 0, 204),
        ev(t, rto(1000), 0, 204),
        ev(
            t,
            TcpEventKind::CongState {
                state: CongState::Loss,
            },
            1,
            408,
        ),
        ev(t + 408_000_000, rto(1000), 1, 408),
        ev(t + 1_224_000_000, rto(1000), 2, 816),
        ev(t + 1_300_000_000, TcpEventKind::BackoffEnd, 0, 204),
    ];
    let mut e = engine(Config::default());
    let h = &one_incident(&mut e, obs);
    assert_eq!(h.protocol, HolProtocol::Tcp);
    assert_eq!(h.missing, "seq 1000");
    assert_eq!(h.start_ns, t);
    assert_eq!(h.end_ns, Some(t + 1_300_000_000));
    assert_eq!(h.stall_ns, 1_300_000_000);
    assert_eq!(h.timeout_retransmits, 3);
    assert_eq!(h.fast_retransmits, 0);
    assert_eq!(h.backoff, 2);
    assert_eq!(h.recovery, Recovery::Timeout);
    let snap = e.snapshot();
    assert_eq!(snap.flows.tcp.len(), 1);
    assert_eq!(snap.flows.tcp[0].figures.cwnd, 10);
    assert_eq!(snap.flows.tcp[0].figures.backoff, 0);
    assert_eq!(snap.paths[0].label, "eth0");
}

#[test]
fn backoff_end_keeps_the_socket_figures() {
    let t = T0 + 1_000_000_000;
    let mut e = engine(Config::default());
    e.handle(ev(t, TcpEventKind::RtoExpired, 2, 816));
    // As `capture` records it: the end of an episode carries no socket figures.
    let Observation::Tcp(mut end) = ev(t + 900_000_000, TcpEventKind::BackoffEnd, 0, 0) else {
        unreachable!("ev makes TCP events");
    };
    end.figures = TcpFigures::default();
    e.handle(Observation::Tcp(end));
    let snap = e.snapshot();
    let sock = &snap.flows.tcp[0];
    assert_eq!(sock.figures.cwnd, 10);
    assert_eq!(sock.figures.rto_us, 816_000);
    assert_eq!(sock.figures.srtt_us, 40_000);
    assert_eq!(sock.figures.backoff, 0);
    assert!(
        sock.history.iter().all(|s| s.figures.cwnd == 10),
        "{:?}",
        sock.history
    );
}

/// The client's and the server's socket of [`ev`]'s connection.
fn ends() -> (std::net::SocketAddr, std::net::SocketAddr) {
    (addr("10.0.0.2:41000"), addr("192.0.2.1:8883"))
}

/// A captured segment (ACK flag) at `ts` on eth0.
fn seg(
    ts: u64,
    src: std::net::SocketAddr,
    dst: std::net::SocketAddr,
    seq: u32,
    ack: u32,
    len: u32,
) -> Observation {
    Observation::TcpSegment(TcpSegment {
        meta: meta(ts, "eth0", 0, src, dst, 40 + len),
        seq,
        ack,
        flags: tboxscope_engine::TcpFlags(0x10),
        len,
        ..TcpSegment::default()
    })
}

#[test]
fn fast_retransmit_with_segments_uses_send_time_and_ack() {
    let t = T0 + 1_000_000_000;
    let (cli, srv) = ends();
    let mut obs = Vec::new();
    // Five 600-byte segments from seq 1000; the first is lost.
    for k in 0..5u32 {
        obs.push(seg(
            t + u64::from(k) * 1_000_000,
            cli,
            srv,
            1000 + k * 600,
            1,
            600,
        ));
    }
    // Duplicate ACKs for 1000, then fast retransmit, then the ACK past everything.
    for k in 0..3u64 {
        obs.push(seg(t + 40_000_000 + k * 1_000_000, srv, cli, 1, 1000, 0));
    }
    obs.push(ev(
        t + 43_000_000,
        TcpEventKind::Retransmit {
            kind: RetransmitKind::Fast,
            seq: 1000,
            len: 600,
        },
        0,
        204,
    ));
    obs.push(ev(
        t + 43_000_000,
        TcpEventKind::CongState {
            state: CongState::Recovery,
        },
        0,
        204,
    ));
    obs.push(seg(t + 43_000_001, cli, srv, 1000, 1, 600));
    obs.push(seg(t + 83_000_000, srv, cli, 1, 4000, 0));
    let mut e = engine(Config::default());
    for o in sorted(obs) {
        e.handle(o);
    }
    let incs = incidents(&mut e);
    assert_eq!(incs.len(), 1, "{incs:?}");
    let h = &incs[0];
    assert_eq!(
        h.start_ns, t,
        "starts at the original send of the lost segment"
    );
    assert_eq!(h.end_ns, Some(t + 83_000_000));
    assert_eq!(h.recovery, Recovery::Fast);
    assert_eq!(h.fast_retransmits, 1);
    // Four segments were sent behind the lost one.
    assert_eq!(h.bytes_held, 4 * 600);
    let s = e.finish(t + 100_000_000);
    let amp = &s.amplification[0];
    assert_eq!(amp.unique_payload_bytes, 3000);
    assert_eq!(amp.retransmit_bytes, 640);
    assert_eq!(amp.ack_bytes, 4 * 40);
}

#[test]
fn a_resend_from_inside_a_captured_segment_starts_at_its_first_send() {
    // The kernel resends from seq 1300, inside the segment 1000..1600 captured leaving at
    // `t` (a partly acknowledged segment, or one collapsed differently on resending).
    let t = T0 + 1_000_000_000;
    let (cli, srv) = ends();
    let obs = vec![
        seg(t, cli, srv, 1000, 1, 600),
        seg(t + 40_000_000, srv, cli, 1, 1300, 0),
        ev(
            t + 244_000_000,
            TcpEventKind::Retransmit {
                kind: RetransmitKind::Rto,
                seq: 1300,
                len: 300,
            },
            0,
            204,
        ),
        seg(t + 244_000_001, cli, srv, 1300, 1, 300),
        seg(t + 284_000_000, srv, cli, 1, 1600, 0),
    ];
    let h = &one_incident(&mut engine(Config::default()), obs);
    assert_eq!(h.missing, "seq 1300");
    assert_eq!(h.start_ns, t, "the byte at 1300 first left at t: {h:?}");
    assert_eq!(h.end_ns, Some(t + 284_000_000));
    assert!(
        h.evidence
            .iter()
            .any(|l| l.ts_ns == t && l.what == "seq 1300 first sent"),
        "{:?}",
        h.evidence
    );
}
