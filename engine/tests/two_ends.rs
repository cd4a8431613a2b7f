//! Both ends of both paths captured (the lab's shape: `tbox-eth0`, `gateway-g0`, `tbox-eth1`,
//! `gateway-g1`), declared as `lab run` does or (QUIC, outage) not at all, the engine pairing
//! the captures itself. Each test reproduces a way tboxscope's own capture of `lab run` once
//! came out wrong:
//! - redundant QUIC as one connection per path, a message's STREAM frame split over two
//!   packets and ACK-only packets: extra messages (767 instead of 600) and split flows;
//! - redundant KCP as one session (conv) per path: no duplication seen at all;
//! - idle paths after the traffic (keep-alives only): outages that did not happen, and copies
//!   held through a real outage not counted as carried by the other path.

#![expect(clippy::needless_range_loop)]

#[expect(dead_code, reason = "each test uses some of the shared helpers")]
mod common;

use common::*;
use tboxscope_engine::{
    Config, ConnId, FlowSummary, Host, KcpCmd, KcpHeader, KcpSegment, MatchMode, Observation,
    QuicPacket, StreamRange,
};

const N: u64 = 300;
const GAP: u64 = 20_000_000;
const MS: u64 = 1_000_000;
/// One-way delay per path (A, B), constant so the expected latency is exact.
const DELAY: [u64; 2] = [40 * MS, 25 * MS];
const LABELS: [(&str, &str); 2] = [("eth0", "g0"), ("eth1", "g1")];
const TBOX: [&str; 2] = ["10.40.0.2:50000", "10.50.0.2:50001"];
const GW: [&str; 2] = ["10.40.0.1:7401", "10.50.0.1:7401"];

/// Runs a trace of one session per path and checks what such traces must give: one flow with
/// messages, matched in `mode`, all N on both paths, and first send → first arrival = path B's
/// delay exactly (2 significant digits per flow).
fn one_group_flow(obs: Vec<Observation>, mode: MatchMode) -> FlowSummary {
    let s = run(
        obs,
        Config {
            emit_messages: false,
            ..Config::default()
        },
    );
    // The sessions (connections) are reported as part of their group: one row.
    assert_eq!(s.flows.len(), 1, "{:#?}", s.flows);
    assert_eq!(s.amplification.len(), 1, "{:#?}", s.amplification);
    let f = s.flows[0].clone();
    assert_eq!(f.mode, Some(mode), "{f:?}");
    assert_eq!(f.messages, N);
    assert_eq!(f.duplication, 1.0);
    // Every message took the same time: the median is that sample, not its bucket's edge.
    assert_eq!(
        (f.latency.p50_us, f.latency.max_us),
        (DELAY[1] / 1000, DELAY[1] / 1000)
    );
    f
}

/// A packet seen at the T-Box when sent and at the gateway `DELAY[p]` later (or, for the
/// gateway's packets, the reverse); captures 2p (T-Box) and 2p+1 (gateway).
fn both_ends(
    obs: &mut Vec<Observation>,
    p: usize,
    sent: u64,
    up: bool,
    make: impl Fn(u64, &str, u16) -> Observation,
) {
    let arrive = sent + DELAY[p];
    let (t, g) = if up { (sent, arrive) } else { (arrive, sent) };
    obs.push(make(t, LABELS[p].0, (2 * p) as u16));
    obs.push(make(g, LABELS[p].1, (2 * p + 1) as u16));
}

/// The four captures as `lab run` declares them: hosts, and each T-Box capture paired with the
/// gateway capture of its path.
fn declared() -> Vec<Observation> {
    (0..4u16)
        .map(|c| {
            let p = usize::from(c / 2);
            let tbox = c % 2 == 0;
            Observation::Capture(tboxscope_engine::CapturePoint {
                ts_ns: T0,
                capture: c,
                name: format!("capture {c}"),
                path: (if tbox { LABELS[p].0 } else { LABELS[p].1 }).to_owned(),
                host: if tbox { Host::Tbox } else { Host::Gateway },
                local_addrs: Vec::new(),
                clock_offset_ns: Some(0),
                pair_with: Some(c ^ 1),
            })
        })
        .collect()
}

fn quic(ts: u64, label: &str, cap: u16, p: usize, up: bool, pn: u64) -> QuicPacket {
    let (src, dst) = if up {
        (TBOX[p], GW[p])
    } else {
        (GW[p], TBOX[p])
    };
    QuicPacket {
        meta: meta(ts, label, cap, addr(src), addr(dst), 100),
        conn: ConnId(p as u64),
        path_id: 0,
        pn,
        streams: Default::default(),
        acks: Default::default(),
        ack_only: false,
    }
}

#[test]
fn quic_connection_per_path_split_frames_and_acks_give_one_message_each() {
    let mut obs = Vec::new();
    for i in 0..N {
        let t = T0 + 1_000_000_000 + i * GAP;
        for p in 0..2usize {
            // Message i is stream 4i+2 of each connection: the head frame (with the id) in one
            // packet, the rest of the message in the next.
            let stream = 4 * i + 2;
            both_ends(&mut obs, p, t, true, |ts, l, c| {
                let mut q = quic(ts, l, c, p, true, 2 * i);
                q.meta.wire_len = 460;
                q.streams.push(StreamRange {
                    stream_id: stream,
                    offset: 0,
                    len: 400,
                    fin: false,
                    data_hash: None,
                    app_msg_id: Some(i),
                    framed: None,
                });
                Observation::Quic(Box::new(q))
            });
            both_ends(&mut obs, p, t + MS, true, |ts, l, c| {
                let mut q = quic(ts, l, c, p, true, 2 * i + 1);
                q.meta.wire_len = 260;
                q.streams.push(StreamRange {
                    stream_id: stream,
                    offset: 400,
                    len: 200,
                    fin: true,
                    data_hash: None,
                    app_msg_id: None,
                    framed: None,
                });
                Observation::Quic(Box::new(q))
            });
            // The gateway acknowledges both packets in an ACK-only packet.
            both_ends(&mut obs, p, t + DELAY[p] + 2 * MS, false, |ts, l, c| {
                let mut q = quic(ts, l, c, p, false, i);
                q.meta.wire_len = 80;
                q.acks.push(tboxscope_engine::QuicAck {
                    path_id: 0,
                    ranges: smallvec::smallvec![(2 * i, 2 * i + 1)],
                    ack_delay_us: 0,
                });
                Observation::Quic(Box::new(q))
            });
        }
    }
    let f = one_group_flow(obs, MatchMode::AppId);
    // Every packet is counted once (at its sender) once the captures are paired: the few
    // before the third matching copy count at both ends. Unique bytes are 600 per message.
    let wire = N * 2 * (460 + 260 + 80);
    let expect = wire as f64 / (N * 600) as f64;
    let rel = (f.amplification - expect) / expect;
    assert!(
        (0.0..0.02).contains(&rel),
        "{} vs {expect}",
        f.amplification
    );
}

/// One QUIC connection on path A, both ends captured and nothing stated, each packet
/// carrying two messages (a stream each): the captures pair on a copy seen at both, and the
/// packet's second message, sighted after its first paired them, is the far end's arrival
/// like the first (not a copy on a path of its own). Every message is then one copy on `eth0`
/// timed one way, and none says it was not sent on `g0`.
#[test]
fn a_packet_that_pairs_the_captures_goes_on_as_the_pair_places_it() {
    let mut obs = Vec::new();
    for i in 0..N / 2 {
        let t = T0 + 1_000_000_000 + i * GAP;
        both_ends(&mut obs, 0, t, true, |ts, l, c| {
            let mut q = quic(ts, l, c, 0, true, i);
            for k in 0..2 {
                q.streams.push(StreamRange {
                    stream_id: 4 * (2 * i + k) + 2,
                    offset: 0,
                    len: 300,
                    fin: true,
                    data_hash: None,
                    app_msg_id: Some(2 * i + k),
                    framed: None,
                });
            }
            Observation::Quic(Box::new(q))
        });
    }
    let mut e = engine(Config {
        await_pairing: true,
        ..Config::default()
    });
    let end = obs.iter().map(Observation::ts_ns).max().unwrap_or(T0);
    let mut records = Vec::new();
    for o in sorted(obs) {
        e.handle(o);
        records.extend(e.drain_records());
    }
    let said = e.snapshot().health.inferences;
    let _ = e.finish(end + 10_000 * MS);
    records.extend(e.drain_records());
    assert!(
        said.iter().any(|s| s.contains("same path at its two ends")),
        "{said:?}"
    );
    let m = messages(&records);
    assert_eq!(m.len() as u64, N, "{m:#?}");
    for m in &m {
        let paths: Vec<&str> = m.copies.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(paths, ["eth0"], "{m:?}");
        assert!(m.not_sent_on.is_empty(), "{m:?}");
        assert_eq!(m.latency_us, Some(DELAY[0] / 1000), "{m:?}");
    }
}

fn kcp(
    ts: u64,
    label: &str,
    cap: u16,
    p: usize,
    cmd: KcpCmd,
    sn: u32,
    app: Option<u64>,
) -> Observation {
    let up = matches!(cmd, KcpCmd::Push | KcpCmd::Wask);
    let (src, dst) = if up {
        (TBOX[p], GW[p])
    } else {
        (GW[p], TBOX[p])
    };
    Observation::Kcp(KcpSegment {
        meta: meta(
            ts,
            label,
            cap,
            addr(src),
            addr(dst),
            if cmd == KcpCmd::Push { 652 } else { 52 },
        ),
        header: KcpHeader {
            conv: 0x1000 + p as u32,
            cmd,
            sn,
            una: if up { 0 } else { sn + 1 },
            frg: 0,
            wnd: 128,
            len: if cmd == KcpCmd::Push { 600 } else { 0 },
            ts: (ts / MS) as u32,
        },
        app_msg_id: app,
        content_hash: None,
    })
}

#[test]
fn kcp_session_per_path_is_matched_by_application_id() {
    let mut obs = declared();
    for i in 0..N {
        let t = T0 + 1_000_000_000 + i * GAP;
        for p in 0..2usize {
            // Each session numbers its segments itself; path B's started 7 messages later.
            let sn = (i + 7 * p as u64) as u32;
            both_ends(&mut obs, p, t, true, |ts, l, c| {
                kcp(ts, l, c, p, KcpCmd::Push, sn, Some(i))
            });
            both_ends(&mut obs, p, t + DELAY[p] + MS, false, |ts, l, c| {
                kcp(ts, l, c, p, KcpCmd::Ack, sn, None)
            });
        }
    }
    let f = one_group_flow(obs, MatchMode::AppId);
    let expect = (N * 2 * (652 + 52)) as f64 / (N * 600) as f64;
    assert!(
        (f.amplification - expect).abs() < 1e-9,
        "{} vs {expect}",
        f.amplification
    );
}

/// The same sessions without an application id: byte-identical copies are matched by content
/// (every tenth message is the same keep-alive: paired in order), also with the sessions'
/// sns apart and a message retransmitted on one path. Sessions are known to be per-path ones
/// once both were seen (KCP has no handshake to tell it earlier): the first message, seen at
/// the T-Box before the other session was, moves into the group then (one message, not a
/// single-path flow of its own).
#[test]
fn kcp_session_per_path_is_matched_by_content() {
    let mut obs = declared();
    let content = |i: u64| if i % 10 == 5 { 0x4b41 } else { 0xc0_0000 + i };
    for i in 0..N {
        let t = T0 + 1_000_000_000 + i * GAP;
        for p in 0..2usize {
            let sn = (i + 7 * p as u64) as u32;
            let push = |ts, l: &str, c| {
                let mut o = kcp(ts, l, c, p, KcpCmd::Push, sn, None);
                if let Observation::Kcp(k) = &mut o {
                    k.content_hash = Some(content(i));
                }
                o
            };
            both_ends(&mut obs, p, t, true, push);
            if p == 0 && i % 50 == 7 {
                // Sent again before the ACK came: the same message, not the next one.
                both_ends(&mut obs, p, t + 3 * MS, true, push);
            }
            both_ends(&mut obs, p, t + DELAY[p] + 4 * MS, false, |ts, l, c| {
                kcp(ts, l, c, p, KcpCmd::Ack, sn, None)
            });
        }
    }
    let s = run(
        obs,
        Config {
            emit_messages: false,
            ..Config::default()
        },
    );
    let group = s.flows.iter().find(|f| f.messages > 1).unwrap();
    assert_eq!(group.mode, Some(MatchMode::Content), "{:#?}", s.flows);
    assert_eq!(s.flows.len(), 1, "{:#?}", s.flows);
    assert_eq!(s.health.regrouped_messages, 1);
    assert_eq!(group.messages, N);
    let red = s.redundancy.iter().find(|r| r.flow == group.flow).unwrap();
    assert_eq!(red.on_all_paths, N, "{red:#?}");
}

#[test]
fn one_outage_on_the_silent_path_none_on_idle_paths() {
    // 10 s of messages on both sessions; path A loses everything that would arrive from 3 s to
    // 8 s (the T-Box keeps sending; the copies it held arrive right after 8 s); then 6 s of
    // keep-alives every 1.05 s on both paths, answered but one: idle paths, silent longer than
    // the threshold, in no outage.
    let start = T0 + 1_000_000_000;
    let (down, up_again) = (start + 3_000_000_000, start + 8_000_000_000);
    let lost = |arrival: u64| (down..up_again).contains(&arrival);
    let mut obs = Vec::new();
    let msgs = 500u64;
    // (first send, arrival over path A) of each message.
    let mut a_copies: Vec<(u64, u64)> = Vec::new();
    let mut last_alive_a = 0;
    for i in 0..msgs {
        let t = start + i * GAP;
        for p in 0..2usize {
            let sn = i as u32;
            if p == 0 && lost(t + DELAY[0]) {
                a_copies.push((t, up_again + (i % 10) * MS + DELAY[0]));
                // Seen leaving the T-Box, lost; sent again and delivered after the outage.
                obs.push(kcp(t, LABELS[0].0, 0, 0, KcpCmd::Push, sn, Some(i)));
                let again = up_again + (i % 10) * MS;
                both_ends(&mut obs, 0, again, true, |ts, l, c| {
                    kcp(ts, l, c, 0, KcpCmd::Push, sn, Some(i))
                });
                continue;
            }
            both_ends(&mut obs, p, t, true, |ts, l, c| {
                kcp(ts, l, c, p, KcpCmd::Push, sn, Some(i))
            });
            let ack = t + DELAY[p] + MS;
            if p == 0 {
                a_copies.push((t, t + DELAY[0]));
                let before = |a: u64| if a < down { a } else { 0 };
                last_alive_a = last_alive_a.max(before(t + DELAY[0]));
                if lost(ack + DELAY[0]) {
                    obs.push(kcp(ack, LABELS[0].1, 1, 0, KcpCmd::Ack, sn, None));
                    continue;
                }
                last_alive_a = last_alive_a.max(before(ack + DELAY[0]));
            }
            both_ends(&mut obs, p, ack, false, |ts, l, c| {
                kcp(ts, l, c, p, KcpCmd::Ack, sn, None)
            });
        }
    }
    let idle = start + msgs * GAP + 500 * MS;
    for k in 0..6u64 {
        for p in 0..2usize {
            let t = idle + k * 1_050 * MS + p as u64 * 300 * MS;
            if k == 2 && p == 1 {
                // One keep-alive lost: path B silent for 2.1 s, one send unanswered.
                obs.push(kcp(t, LABELS[1].0, 2, 1, KcpCmd::Wask, 0, None));
                continue;
            }
            both_ends(&mut obs, p, t, true, |ts, l, c| {
                kcp(ts, l, c, p, KcpCmd::Wask, 0, None)
            });
            both_ends(&mut obs, p, t + DELAY[p] + MS, false, |ts, l, c| {
                kcp(ts, l, c, p, KcpCmd::Wins, 0, None)
            });
        }
    }
    let s = run(
        obs,
        Config {
            emit_messages: false,
            message_timeout_ns: 14_000_000_000,
            ..Config::default()
        },
    );
    assert_eq!(s.outages.len(), 1, "{:#?}", s.outages);
    let o = &s.outages[0];
    assert_eq!(o.path, "eth0");
    // From the last arrival before the outage to the first after it.
    assert_eq!(o.start_ns, last_alive_a);
    // The copy sent 40 ms before the path came back is the first to arrive.
    assert_eq!(o.end_ns, Some(up_again));
    // Every message that came up meanwhile was carried by path B only: path A's copy came
    // after the outage (held through it, or sent just before the path came back).
    let end = up_again;
    let during = a_copies
        .iter()
        .filter(|(t, a)| (o.start_ns..=end).contains(t) && *a > end)
        .count() as u64;
    assert!(during >= 245, "{during}");
    assert_eq!(o.carried_by_others, during);
    assert_eq!(o.lost, 0);
    let f = s.flows.iter().find(|f| f.messages > 0).unwrap();
    assert_eq!((f.messages, f.duplication), (msgs, 1.0));
}
