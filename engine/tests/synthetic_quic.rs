//! Modes 3 and 4 for QUIC: one multipath connection whose paths split the same stream bytes
//! differently (partial overlaps), seen from the T-Box with PATH_ACKs (ack_delay removed);
//! per-stream HOL (a gap on one stream does not hold another); two separate connections
//! matched by content hash.

#[expect(dead_code, reason = "each test uses some of the shared helpers")]
mod common;

use common::*;
use tboxscope_engine::snapshot::LatencyKind;
use tboxscope_engine::{
    Config, ConnId, HolProtocol, Host, MatchMode, Observation, QuicAck, QuicPacket, Record,
    StreamRange,
};

const N: u64 = 400;
const GAP: u64 = 20_000_000;
const MSG: u64 = 600;
const ACK_DELAY_US: u64 = 2_000;

#[expect(clippy::too_many_arguments)]
fn pkt(
    ts: u64,
    path: &str,
    cap: u16,
    src: &str,
    dst: &str,
    conn: u64,
    path_id: u64,
    pn: u64,
) -> QuicPacket {
    QuicPacket {
        meta: meta(ts, path, cap, addr(src), addr(dst), 0),
        conn: ConnId(conn),
        path_id,
        pn,
        streams: Default::default(),
        acks: Default::default(),
        ack_only: false,
    }
}

fn range(stream_id: u64, offset: u64, len: u64) -> StreamRange {
    StreamRange {
        stream_id,
        offset,
        len,
        fin: false,
        data_hash: None,
        app_msg_id: None,
        framed: None,
    }
}

#[test]
fn multipath_quic_partial_overlaps_and_ack_delay() {
    let labels = ["eth0", "eth1"];
    let tbox = ["10.0.0.2:50000", "10.1.0.2:50001"];
    let gw = "192.0.2.1:443";
    let mut obs = vec![
        capture(0, "t-eth0", "eth0", Host::Tbox, None),
        capture(1, "t-eth1", "eth1", Host::Tbox, None),
    ];
    // Path 0 sends each 600-byte message in its own packet; path 1 sends two messages per
    // packet once both exist. (send, ack − ack_delay) per path per message.
    let mut truth: Vec<[(u64, u64); 2]> = vec![[(0, 0); 2]; N as usize];
    let mut pn = [0u64; 2];
    for i in 0..N {
        let base = T0 + 1_000_000_000 + i * GAP;
        let mut p0 = pkt(base, labels[0], 0, tbox[0], gw, 1, 0, pn[0]);
        p0.meta.wire_len = 700;
        p0.streams.push(range(0, i * MSG, MSG));
        obs.push(Observation::Quic(Box::new(p0)));
        let acked = base + 40_000_000 + (i * 7919 % 3000) * 1000;
        let mut a = pkt(
            acked + ACK_DELAY_US * 1000,
            labels[0],
            0,
            gw,
            tbox[0],
            1,
            0,
            0,
        );
        a.meta.wire_len = 60;
        a.acks.push(QuicAck {
            path_id: 0,
            ranges: smallvec::smallvec![(pn[0], pn[0])],
            ack_delay_us: ACK_DELAY_US,
        });
        obs.push(Observation::Quic(Box::new(a)));
        truth[i as usize][0] = (base, acked);
        pn[0] += 1;
        if i % 2 == 1 {
            let send = base + 50_000;
            let mut p1 = pkt(send, labels[1], 1, tbox[1], gw, 1, 1, pn[1]);
            p1.meta.wire_len = 1300;
            p1.streams.push(range(0, (i - 1) * MSG, 2 * MSG));
            obs.push(Observation::Quic(Box::new(p1)));
            let acked = send + 30_000_000 + (i * 104_729 % 20_000) * 1000;
            let mut a = pkt(
                acked + ACK_DELAY_US * 1000,
                labels[1],
                1,
                gw,
                tbox[1],
                1,
                0,
                0,
            );
            a.meta.wire_len = 60;
            a.acks.push(QuicAck {
                path_id: 1,
                ranges: smallvec::smallvec![(pn[1], pn[1])],
                ack_delay_us: ACK_DELAY_US,
            });
            obs.push(Observation::Quic(Box::new(a)));
            truth[i as usize - 1][1] = (send, acked);
            truth[i as usize][1] = (send, acked);
            pn[1] += 1;
        }
    }
    let obs = sorted(obs);
    let end = obs.last().unwrap().ts_ns();
    let mut e = engine(Config::default());
    for o in obs {
        e.handle(o);
    }
    let s = e.finish(end + 1);
    let red = &s.redundancy[0];
    assert_eq!(red.mode, Some(MatchMode::QuicStream));
    assert_eq!(red.messages, N);
    assert_eq!(red.on_all_paths, N);
    assert_eq!(s.latency.kind, LatencyKind::AckRtt);
    let mut combined: Vec<u64> = truth
        .iter()
        .map(|t| (t[0].1.min(t[1].1) - t[0].0.min(t[1].0)) / 1000)
        .collect();
    combined.sort_unstable();
    assert_eq!(s.latency.combined.count, N);
    assert_eq!(s.latency.combined.min_us, combined[0]);
    assert_eq!(s.latency.combined.p50_us, expected_quantile(&combined, 0.5));
    assert_eq!(
        s.latency.combined.p99_us,
        expected_quantile(&combined, 0.99)
    );
    let mut eth1: Vec<u64> = truth.iter().map(|t| (t[1].1 - t[1].0) / 1000).collect();
    eth1.sort_unstable();
    let (_, p1) = s
        .latency
        .per_path
        .iter()
        .find(|(l, _)| l == "eth1")
        .unwrap();
    assert_eq!(p1.count, N);
    assert_eq!(p1.p90_us, expected_quantile(&eth1, 0.9));
    assert_eq!(p1.max_us, *eth1.last().unwrap());
    let amp = &s.amplification[0];
    assert_eq!(amp.wire_bytes, N * 700 + (N / 2) * 1300 + (N + N / 2) * 60);
    assert_eq!(amp.unique_payload_bytes, N * MSG);
    assert_eq!(amp.ack_bytes, (N + N / 2) * 60);
}

/// The HOL incidents of `obs` (handled in time order).
fn hol_incidents(obs: Vec<Observation>) -> Vec<tboxscope_engine::HolIncident> {
    let mut e = engine(Config::default());
    for o in sorted(obs) {
        e.handle(o);
    }
    e.drain_records()
        .filter_map(|r| match r {
            Record::HolIncident(h) => Some(h),
            _ => None,
        })
        .collect()
}

#[test]
fn quic_gap_on_one_stream_does_not_hold_the_other() {
    // Gateway capture, one path: stream 0 loses the range at offset 1200 for 150 ms while
    // stream 4 keeps delivering.
    let mut obs = vec![capture(3, "gw-g0", "g0", Host::Gateway, None)];
    let cli = "10.0.0.2:50000";
    let srv = "192.0.2.1:443";
    let base = T0 + 1_000_000_000;
    let mut pn = 0;
    let mut push = |obs: &mut Vec<Observation>, ts: u64, stream: u64, off: u64| {
        let mut p = pkt(ts, "g0", 3, cli, srv, 9, 0, pn);
        pn += 1;
        p.streams.push(range(stream, off, MSG));
        obs.push(Observation::Quic(Box::new(p)));
    };
    for k in 0..10u64 {
        let ts = base + k * GAP;
        if k != 2 {
            push(&mut obs, ts, 0, k * MSG);
        }
        push(&mut obs, ts + 1_000_000, 4, k * MSG);
    }
    let fill = base + 2 * GAP + 150_000_000;
    push(&mut obs, fill, 0, 2 * MSG);
    let incs = hol_incidents(obs);
    assert_eq!(incs.len(), 1, "{incs:?}");
    let h = &incs[0];
    assert_eq!(h.protocol, HolProtocol::Quic);
    assert_eq!(h.stream, Some(0));
    assert_eq!(h.missing, "offset 1200");
    assert_eq!(h.start_ns, base + 3 * GAP);
    assert_eq!(h.end_ns, Some(fill));
    assert_eq!(h.messages_held, 7);
    assert_eq!(h.bytes_held, 7 * MSG);
    assert_eq!(h.streams_not_held, vec![4]);
}

#[test]
fn separate_connections_match_by_content_hash() {
    let mut obs = vec![
        capture(2, "gw-g0", "eth0", Host::Gateway, None),
        capture(3, "gw-g1", "eth1", Host::Gateway, None),
    ];
    let base = T0 + 1_000_000_000;
    let mut lost_on_1 = 0;
    let conns = [(2u16, "10.0.0.2:50000", 10u64), (3, "10.1.0.2:50001", 11)];
    // Each connection's handshake comes before its messages: a connection is matched by
    // content once another one to the same server port is seen on another path.
    for (p, (cap, cli, conn)) in conns.iter().enumerate() {
        let ts = base - 100_000_000 + p as u64 * 1_000_000;
        let q = pkt(
            ts,
            ["eth0", "eth1"][p],
            *cap,
            cli,
            "192.0.2.1:443",
            *conn,
            0,
            1000,
        );
        obs.push(Observation::Quic(Box::new(q)));
    }
    for i in 0..200u64 {
        for (p, (cap, cli, conn)) in conns.iter().enumerate() {
            if p == 1 && i % 40 == 0 {
                lost_on_1 += 1;
                continue;
            }
            let ts = base + i * GAP + 30_000_000 + p as u64 * 4_000_000;
            let mut q = pkt(
                ts,
                ["eth0", "eth1"][p],
                *cap,
                cli,
                "192.0.2.1:443",
                *conn,
                0,
                i,
            );
            // Connection b frames its stream at different offsets: only the content matches.
            let mut r = range(0, i * MSG + p as u64 * 17, MSG);
            // Every tenth message is the same keep-alive: the n-th on one connection is a
            // copy of the n-th on the other.
            r.data_hash = Some(if i % 10 == 5 { 0x4b41 } else { 0x5eed_0000 + i });
            q.streams.push(r);
            obs.push(Observation::Quic(Box::new(q)));
        }
    }
    let mut e = engine(Config::default());
    let end = obs.last().unwrap().ts_ns();
    for o in sorted(obs) {
        e.handle(o);
    }
    let s = e.finish(end + 1);
    assert_eq!(s.redundancy.len(), 1, "{:?}", s.redundancy);
    // Connection a's handshake, before b was seen, is reported in the group's row.
    assert_eq!(s.flows.len(), 1, "{:#?}", s.flows);
    let red = &s.redundancy[0];
    assert_eq!(red.mode, Some(MatchMode::Content));
    assert_eq!(red.messages, 200);
    assert_eq!(red.on_all_paths, 200 - lost_on_1);
    let eth0 = red.paths.iter().find(|p| p.path == "eth0").unwrap();
    assert_eq!(eth0.only, lost_on_1);
    assert_eq!(eth0.wins, 200);
    // Per-flow histograms keep 2 significant digits: 4000 µs reports as its bucket's edge,
    // or as the largest spacing where that is lower.
    let q = quantized(4_000, 2);
    assert_eq!(red.copy_spacing.p50_us, q.min(red.copy_spacing.max_us));
    assert_eq!(red.copy_spacing.min_us, 4_000);
}

/// Two connections, one per path, carrying the same stream (message i at offset 600·i on
/// both), seen from the T-Box: connection b sends each message in two packets (the first
/// piece completes nothing), connection a loses every tenth packet and sends its bytes again
/// without the message's name. Messages are matched by stream range and content, each
/// connection's own ACKs give each path's latency, and nothing is taken for a lost message.
#[test]
fn per_path_connections_match_stream_framed_messages() {
    let mut obs = vec![
        capture(0, "t-eth0", "eth0", Host::Tbox, None),
        capture(1, "t-eth1", "eth1", Host::Tbox, None),
    ];
    let base = T0 + 1_000_000_000;
    let gw = "192.0.2.1:443";
    let conns = [(0u16, "10.0.0.2:50000", 10u64), (1, "10.1.0.2:50001", 11)];
    let ack = |ts: u64, p: usize, pn: u64| {
        let (cap, cli, conn) = conns[p];
        let mut a = pkt(ts, ["eth0", "eth1"][p], cap, gw, cli, conn, 0, 5000 + pn);
        a.acks.push(QuicAck {
            path_id: 0,
            ranges: smallvec::smallvec![(pn, pn)],
            ack_delay_us: 0,
        });
        Observation::Quic(Box::new(a))
    };
    let framed = |i: u64, off: u64, len: u64| {
        let mut r = range(0, off, len);
        if off + len == (i + 1) * MSG {
            r.framed = Some((i * MSG, (i + 1) * MSG));
            r.data_hash = Some(0x5eed_0000 + i % 7);
        }
        r
    };
    // Each connection's handshake comes first (no STREAM frames).
    for (p, (cap, cli, conn)) in conns.iter().enumerate() {
        let q = pkt(
            base - 100_000_000,
            ["eth0", "eth1"][p],
            *cap,
            cli,
            gw,
            *conn,
            0,
            9000,
        );
        obs.push(Observation::Quic(Box::new(q)));
    }
    let (mut pn_a, mut pn_b, mut resent) = (0, 0, 0);
    for i in 0..N {
        let ts = base + i * GAP;
        // Connection a: one packet per message; every tenth is lost and sent again 30 ms on.
        let (cap, cli, conn) = conns[0];
        let mut q = pkt(ts, "eth0", cap, cli, gw, conn, 0, pn_a);
        q.streams.push(framed(i, i * MSG, MSG));
        obs.push(Observation::Quic(Box::new(q)));
        if i % 10 == 3 {
            pn_a += 1;
            let mut q = pkt(ts + 30_000_000, "eth0", cap, cli, gw, conn, 0, pn_a);
            q.streams.push(range(0, i * MSG, MSG));
            obs.push(Observation::Quic(Box::new(q)));
            resent += 1;
        }
        obs.push(ack(ts + 45_000_000, 0, pn_a));
        pn_a += 1;
        // Connection b: the message in two pieces, 200 then 400 bytes.
        let (cap, cli, conn) = conns[1];
        for (k, (off, len)) in [(i * MSG, 200), (i * MSG + 200, 400)]
            .into_iter()
            .enumerate()
        {
            let mut q = pkt(
                ts + 1_000_000 + k as u64,
                "eth1",
                cap,
                cli,
                gw,
                conn,
                0,
                pn_b,
            );
            q.streams.push(framed(i, off, len));
            obs.push(Observation::Quic(Box::new(q)));
            obs.push(ack(ts + 20_000_000 + k as u64, 1, pn_b));
            pn_b += 1;
        }
    }
    let mut e = engine(Config::default());
    let end = obs.iter().map(Observation::ts_ns).max().unwrap();
    for o in sorted(obs) {
        e.handle(o);
    }
    let s = e.finish(end + 1);
    let red: Vec<_> = s.redundancy.iter().filter(|r| r.messages > 0).collect();
    assert_eq!(red.len(), 1, "{:#?}", s.redundancy);
    assert_eq!(red[0].mode, Some(MatchMode::Content));
    assert_eq!((red[0].messages, red[0].on_all_paths), (N, N));
    for p in &s.paths {
        assert_eq!(p.latency_kind, LatencyKind::AckRtt, "{p:?}");
        assert_eq!(p.latency.count, N, "{}", p.label);
        assert_eq!(p.loss_rate, 0.0, "{}", p.label);
    }
    let eth0 = s.paths.iter().find(|p| p.label == "eth0").unwrap();
    // From the message's first send to the ACK of the packet that carried it (again): 45 ms.
    assert_eq!(eth0.latency.min_us, 45_000, "{eth0:?}");
    assert!(eth0.latency.max_us <= 45_100, "{eth0:?}");
    assert!(resent > 0 && eth0.retransmission_rate > 0.0, "{eth0:?}");
}

/// A capture begun mid-connection: connection a (path eth0) carries its copies of the first
/// messages before connection b (path eth1) is seen at all; a sends each message in two
/// pieces (the first completes nothing). When b appears, a's messages opened on its own move
/// into the group (pieces and all, with their packets awaiting ACKs): one flow, every
/// message on both paths, each acknowledged on both.
#[test]
fn per_path_connections_seen_mid_connection_keep_their_first_messages() {
    let mut obs = vec![
        capture(0, "t-eth0", "eth0", Host::Tbox, None),
        capture(1, "t-eth1", "eth1", Host::Tbox, None),
    ];
    let base = T0 + 1_000_000_000;
    let gw = "192.0.2.1:443";
    let conns = [(0u16, "10.0.0.2:50000", 10u64), (1, "10.1.0.2:50001", 11)];
    // b's copies come this much later: a's first four messages are seen before b exists.
    let lag = 3 * GAP + 5_000_000;
    let framed = |i: u64, off: u64, len: u64| {
        let mut r = range(0, off, len);
        if off + len == (i + 1) * MSG {
            r.framed = Some((i * MSG, (i + 1) * MSG));
            r.data_hash = Some(0x5eed_0000 + i % 7);
        }
        r
    };
    let ack = |ts: u64, p: usize, pn: u64| {
        let (cap, cli, conn) = conns[p];
        let mut a = pkt(ts, ["eth0", "eth1"][p], cap, gw, cli, conn, 0, 5000 + pn);
        a.acks.push(QuicAck {
            path_id: 0,
            ranges: smallvec::smallvec![(pn, pn)],
            ack_delay_us: 0,
        });
        Observation::Quic(Box::new(a))
    };
    let (mut pn_a, mut pn_b) = (0, 0);
    for i in 0..N {
        let ts = base + i * GAP;
        let (cap, cli, conn) = conns[0];
        for (k, (off, len)) in [(i * MSG, 200), (i * MSG + 200, 400)]
            .into_iter()
            .enumerate()
        {
            let mut q = pkt(ts + k as u64, "eth0", cap, cli, gw, conn, 0, pn_a);
            q.streams.push(framed(i, off, len));
            obs.push(Observation::Quic(Box::new(q)));
            obs.push(ack(ts + 30_000_000 + k as u64, 0, pn_a));
            pn_a += 1;
        }
        let (cap, cli, conn) = conns[1];
        let mut q = pkt(ts + lag, "eth1", cap, cli, gw, conn, 0, pn_b);
        q.streams.push(framed(i, i * MSG, MSG));
        obs.push(Observation::Quic(Box::new(q)));
        obs.push(ack(ts + lag + 25_000_000, 1, pn_b));
        pn_b += 1;
    }
    let mut e = engine(Config::default());
    let end = obs.iter().map(Observation::ts_ns).max().unwrap();
    for o in sorted(obs) {
        e.handle(o);
    }
    let s = e.finish(end + 1);
    let red: Vec<_> = s.redundancy.iter().filter(|r| r.messages > 0).collect();
    assert_eq!(red.len(), 1, "{:#?}", s.redundancy);
    assert_eq!(red[0].mode, Some(MatchMode::Content));
    assert_eq!((red[0].messages, red[0].on_all_paths), (N, N));
    assert_eq!(s.health.regrouped_messages, 4, "{:?}", s.health);
    for p in &s.paths {
        assert_eq!(p.latency_kind, LatencyKind::AckRtt, "{p:?}");
        assert_eq!(p.latency.count, N, "{}", p.label);
        assert_eq!(p.loss_rate, 0.0, "{}", p.label);
    }
    let eth0 = s.paths.iter().find(|p| p.label == "eth0").unwrap();
    // From the message's first piece to the ACK of its second: 30 ms.
    assert_eq!(eth0.latency.min_us, 30_000, "{eth0:?}");
    assert!(eth0.latency.max_us <= 30_100, "{eth0:?}");
}

/// One stream per message, more streams than a connection's stream tables hold: path 0 sends
/// each message in one frame, path 1 in two pieces (228 + 372 bytes, in two packets, as tquic
/// does when a packet fills up), before path 0's frame for every other message. Every message
/// (a unidirectional stream) stays one message on both paths, and the streams forgotten to
/// stay bounded are counted.
#[test]
fn a_stream_per_message_past_the_stream_bound_stays_one_message_per_stream() {
    const STREAMS: u64 = 3000;
    let tbox = ["10.0.0.2:50000", "10.1.0.2:50001"];
    let gw = "192.0.2.1:443";
    let mut obs = vec![
        capture(0, "t-eth0", "eth0", Host::Tbox, None),
        capture(1, "t-eth1", "eth1", Host::Tbox, None),
    ];
    let mut pn = [0u64; 2];
    for i in 0..STREAMS {
        let base = T0 + 1_000_000_000 + i * GAP;
        let stream = 4 * i + 2;
        let mut p0 = pkt(base + 25_000, "eth0", 0, tbox[0], gw, 1, 0, pn[0]);
        p0.streams.push(range(stream, 0, MSG));
        obs.push(Observation::Quic(Box::new(p0)));
        pn[0] += 1;
        for (at, (off, len)) in [(0, 228), (228, MSG - 228)].into_iter().enumerate() {
            let mut p1 = pkt(
                base + 50_000 * (i % 2) + at as u64,
                "eth1",
                1,
                tbox[1],
                gw,
                1,
                1,
                pn[1],
            );
            p1.streams.push(range(stream, off, len));
            obs.push(Observation::Quic(Box::new(p1)));
            pn[1] += 1;
        }
    }
    let obs = sorted(obs);
    let end = obs.last().unwrap().ts_ns();
    let mut e = engine(Config::default());
    for o in obs {
        e.handle(o);
    }
    let s = e.finish(end + 1);
    let red = &s.redundancy[0];
    assert_eq!((red.messages, red.on_all_paths), (STREAMS, STREAMS));
    assert_eq!(s.health.evicted_streams, STREAMS - 1024);
}

/// Past the stream bound, a new stream's receive gaps are still tracked: a gap on a stream
/// opened after 1100 others gives its HOL incident.
#[test]
fn a_gap_on_a_stream_opened_past_the_stream_bound_is_an_incident() {
    let mut obs = vec![capture(3, "gw-g0", "g0", Host::Gateway, None)];
    let (cli, srv) = ("10.0.0.2:50000", "192.0.2.1:443");
    let base = T0 + 1_000_000_000;
    let mut pn = 0;
    let mut push = |obs: &mut Vec<Observation>, ts: u64, stream: u64, off: u64| {
        let mut p = pkt(ts, "g0", 3, cli, srv, 9, 0, pn);
        pn += 1;
        p.streams.push(range(stream, off, MSG));
        obs.push(Observation::Quic(Box::new(p)));
    };
    for k in 0..1100u64 {
        push(&mut obs, base + k * 1_000_000, 4 * k + 2, 0);
    }
    let base = base + 2_000_000_000;
    for k in 0..10u64 {
        if k != 2 {
            push(&mut obs, base + k * GAP, 8000, k * MSG);
        }
    }
    push(&mut obs, base + 2 * GAP + 150_000_000, 8000, 2 * MSG);
    let incs = hol_incidents(obs);
    assert_eq!(incs.len(), 1, "{incs:?}");
    assert_eq!((incs[0].stream, incs[0].messages_held), (Some(8000), 7));
}

/// Two connections, one per path, each message on a stream of its own (its head frame names
/// it by content), seen from the T-Box; b's copies lag, so a's first messages are seen before
/// b exists. Those messages are messages of the group: one flow, every message on both paths.
#[test]
fn per_path_connections_with_a_stream_per_message_keep_their_first_messages() {
    let mut obs = vec![
        capture(0, "t-eth0", "eth0", Host::Tbox, None),
        capture(1, "t-eth1", "eth1", Host::Tbox, None),
    ];
    let base = T0 + 1_000_000_000;
    let gw = "192.0.2.1:443";
    let conns = [(0u16, "10.0.0.2:50000", 10u64), (1, "10.1.0.2:50001", 11)];
    let lag = 3 * GAP + 5_000_000;
    for i in 0..N {
        for (p, (cap, cli, conn)) in conns.iter().enumerate() {
            let ts = base + i * GAP + if p == 1 { lag } else { 0 };
            let mut q = pkt(ts, ["eth0", "eth1"][p], *cap, cli, gw, *conn, 0, i);
            let mut r = range(4 * i + 2, 0, MSG);
            r.fin = true;
            r.data_hash = Some(0x5eed_0000 + i);
            q.streams.push(r);
            obs.push(Observation::Quic(Box::new(q)));
        }
    }
    let mut e = engine(Config::default());
    let end = obs.iter().map(Observation::ts_ns).max().unwrap();
    for o in sorted(obs) {
        e.handle(o);
    }
    let s = e.finish(end + 1);
    let red: Vec<_> = s.redundancy.iter().filter(|r| r.messages > 0).collect();
    assert_eq!(red.len(), 1, "{:#?}", s.redundancy);
    assert_eq!(
        (red[0].messages, red[0].on_all_paths),
        (N, N),
        "{:#?}",
        red[0]
    );
}

/// One path seen from the T-Box, a message per uni stream and packet: every fifth packet is
/// lost and its STREAM frame sent again in a new packet (a new packet number), and only that
/// one is acknowledged. QUIC never acknowledges a packet number twice, so the retransmission's
/// ACK proves the message delivered: no message lost, one ACK latency sample per message, from
/// the first send; the resent packets' wire bytes are the flow's retransmission bytes.
#[test]
fn quic_retransmission_acknowledged_delivers_its_message() {
    let mut obs = vec![capture(0, "t-eth0", "eth0", Host::Tbox, None)];
    let (cli, srv) = ("10.0.0.2:50000", "192.0.2.1:443");
    let (n, rtt) = (50u64, 30_000_000u64);
    let mut pn = 0;
    let mut latencies = Vec::new();
    for i in 0..n {
        let base = T0 + 1_000_000_000 + i * GAP;
        let stream = 2 + 4 * i;
        let mut send = |ts: u64, obs: &mut Vec<Observation>| {
            let mut p = pkt(ts, "eth0", 0, cli, srv, 7, 0, pn);
            p.meta.wire_len = WIRE;
            p.streams.push(range(stream, 0, MSG));
            obs.push(Observation::Quic(Box::new(p)));
            pn += 1;
            pn - 1
        };
        let first = send(base, &mut obs);
        let (acked_pn, acked_at) = if i % 5 == 0 {
            (send(base + 3 * rtt / 2, &mut obs), base + 5 * rtt / 2)
        } else {
            (first, base + rtt)
        };
        let mut a = pkt(acked_at, "eth0", 0, srv, cli, 7, 0, 0);
        a.acks.push(QuicAck {
            path_id: 0,
            ranges: smallvec::smallvec![(acked_pn, acked_pn)],
            ack_delay_us: 0,
        });
        obs.push(Observation::Quic(Box::new(a)));
        latencies.push((acked_at - base) / 1000);
    }
    let obs = sorted(obs);
    let end = obs.last().unwrap().ts_ns();
    let mut e = engine(Config::default());
    for o in obs {
        e.handle(o);
    }
    let s = e.finish(end + 1);
    let eth0 = s.paths.iter().find(|p| p.label == "eth0").unwrap();
    assert_eq!(eth0.loss_rate, 0.0);
    assert_eq!(eth0.latency.count, n);
    assert_eq!(eth0.latency.max_us, *latencies.iter().max().unwrap());
    assert_eq!(s.redundancy[0].messages, n);
    let amp = &s.amplification[0];
    assert_eq!(amp.retransmit_bytes, n / 5 * u64::from(WIRE), "{amp:?}");
    assert_eq!(amp.wire_bytes, (n + n / 5) * u64::from(WIRE), "{amp:?}");
}

/// A data packet's wire length in [`quic_retransmission_acknowledged_delivers_its_message`].
const WIRE: u32 = 661;

#[test]
fn a_packet_of_acks_before_an_idle_stretch_is_no_send_left_unanswered() {
    // The T-Box acknowledges a message from the gateway, says nothing for 5 s, then sends two
    // packets, acknowledged a round trip later: an idle path, no outage. A packet of ACKs
    // alone asks for no answer; one more frame (a PING) would.
    let ms = 1_000_000;
    let (tbox, gw) = ("10.0.0.2:50000", "192.0.2.1:443");
    let ack = |pn| QuicAck {
        path_id: 0,
        ranges: smallvec::smallvec![(pn, pn)],
        ack_delay_us: 0,
    };
    let mut data_in = pkt(T0, "eth0", 0, gw, tbox, 1, 0, 0);
    data_in.streams.push(range(3, 0, MSG));
    let mut ack_out = pkt(T0 + ms, "eth0", 0, tbox, gw, 1, 0, 0);
    ack_out.acks.push(ack(0));
    ack_out.ack_only = true;
    let mut sends = Vec::new();
    for (i, at) in [5_000, 5_001].into_iter().enumerate() {
        let mut p = pkt(T0 + at * ms, "eth0", 0, tbox, gw, 1, 0, 1 + i as u64);
        p.streams.push(range(4 * i as u64 + 2, 0, MSG));
        sends.push(p);
    }
    let mut ack_in = pkt(T0 + 5_050 * ms, "eth0", 0, gw, tbox, 1, 0, 1);
    ack_in.acks.push(QuicAck {
        path_id: 0,
        ranges: smallvec::smallvec![(1, 2)],
        ack_delay_us: 0,
    });
    let mut e = engine(Config::default());
    e.handle(Observation::from(data_in));
    e.handle(Observation::from(ack_out));
    for p in sends {
        e.handle(Observation::from(p));
    }
    e.handle(Observation::from(ack_in));
    let s = e.finish(T0 + 20_000 * ms);
    assert!(s.outages.is_empty(), "{:?}", s.outages);
}
