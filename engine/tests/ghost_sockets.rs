//! Sockets that are not connections (listening, not yet connected, only seen closing) are not
//! listed as flows: `127.0.0.1:47010 → 0.0.0.0:0` at "0.00×" was.

#[expect(dead_code, reason = "each test uses some of the shared helpers")]
mod common;

use common::*;
use tboxscope_engine::{Config, Observation, RetransmitKind, TcpEvent, TcpEventKind, TcpFigures};

fn ev(ts: u64, local: &str, remote: &str, kind: TcpEventKind) -> Observation {
    Observation::Tcp(TcpEvent {
        ts_ns: ts,
        path: "eth0".to_owned(),
        local: addr(local),
        remote: addr(remote),
        kind,
        figures: TcpFigures {
            congestion_control: "cubic".parse().ok(),
            cwnd: 10,
            ssthresh: 7,
            srtt_us: 40_000,
            rto_us: 204_000,
            backoff: 0,
            retransmits: 0,
        },
    })
}

fn state(new: &str) -> TcpEventKind {
    TcpEventKind::StateChange {
        old: "CLOSE".to_owned(),
        new: new.to_owned(),
    }
}

#[test]
fn listening_and_closed_sockets_are_not_flows() {
    let mut e = engine(Config::default());
    let t = T0 + 1_000_000_000;
    let obs = vec![
        ev(t, "127.0.0.1:47010", "0.0.0.0:0", state("LISTEN")),
        ev(t + 1, "10.0.0.2:41001", "192.0.2.1:8883", state("CLOSE")),
        ev(
            t + 2,
            "10.0.0.2:41000",
            "192.0.2.1:8883",
            state("ESTABLISHED"),
        ),
        ev(
            t + 3,
            "10.0.0.2:41000",
            "192.0.2.1:8883",
            TcpEventKind::Sample,
        ),
        ev(
            t + 4,
            "10.0.0.2:41000",
            "192.0.2.1:8883",
            TcpEventKind::Retransmit {
                kind: RetransmitKind::Rto,
                seq: 1000,
                len: 600,
            },
        ),
    ];
    for o in obs {
        e.handle(o);
    }
    let snap = e.snapshot();
    let sockets: Vec<&str> = snap.flows.tcp.iter().map(|t| t.socket.as_str()).collect();
    assert_eq!(sockets.len(), 1, "{sockets:?}");
    assert!(sockets[0].contains("41000"), "{sockets:?}");
    for a in &snap.amplification {
        assert!(
            !a.flow.contains("0.0.0.0:0") && !a.flow.contains("41001"),
            "{a:?}"
        );
    }
    let summary = e.finish(t + 10);
    for f in &summary.flows {
        assert!(
            !f.flow.contains("0.0.0.0:0") && !f.flow.contains("41001"),
            "{f:?}"
        );
    }
}
