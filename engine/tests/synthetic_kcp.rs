//! Mode 2 (KCP conv+sn): dual-sent KCP seen from the T-Box alone (time to first ACK, losses
//! retransmitted on one path), and a receiver-side sn gap that becomes one HOL incident.

#[expect(dead_code, reason = "each test uses some of the shared helpers")]
mod common;

use common::*;
use tboxscope_engine::snapshot::LatencyKind;
use tboxscope_engine::{
    Config, Engine, HolProtocol, Host, KcpCmd, KcpHeader, KcpSegment, Observation, Record, Recovery,
};

const N: u32 = 1000;
const GAP: u64 = 20_000_000;

#[expect(clippy::too_many_arguments)]
fn seg(
    ts: u64,
    path: &str,
    cap: u16,
    src: &str,
    dst: &str,
    cmd: KcpCmd,
    sn: u32,
    kts: u32,
    len: u32,
) -> Observation {
    Observation::Kcp(KcpSegment {
        meta: meta(ts, path, cap, addr(src), addr(dst), 24 + len + 28),
        header: KcpHeader {
            conv: 7,
            cmd,
            sn,
            una: 0,
            frg: 0,
            wnd: 128,
            len,
            ts: kts,
        },
        app_msg_id: None,
        content_hash: None,
    })
}

fn rtt(p: usize, i: u32) -> u64 {
    let i = u64::from(i);
    match p {
        0 => 60_000_000 + (i * 7919 % 9000) * 1000,
        _ => 50_000_000 + (i * 104_729 % 30_000) * 1000,
    }
}

/// Path labels, the T-Box's address on each path, and the gateway's, of the dual-send traces.
const LABELS: [&str; 2] = ["eth0", "eth1"];
const TBOX: [&str; 2] = ["10.0.0.2:40000", "10.1.0.2:40001"];
const GW: &str = "192.0.2.1:4000";

/// A segment of a dual-send trace as the T-Box's capture of path `p` sees it: data out to the
/// gateway, ACKs back from it.
fn at_tbox(p: usize, ts: u64, cmd: KcpCmd, sn: u32, kts: u32, len: u32) -> Observation {
    let (src, dst) = match cmd {
        KcpCmd::Ack => (GW, TBOX[p]),
        _ => (TBOX[p], GW),
    };
    seg(ts, LABELS[p], p as u16, src, dst, cmd, sn, kts, len)
}

#[test]
fn kcp_dual_send_seen_from_tbox_gives_time_to_first_ack() {
    let mut obs = vec![
        capture(0, "t-eth0", "eth0", Host::Tbox, None),
        capture(1, "t-eth1", "eth1", Host::Tbox, None),
    ];
    // (first send, first ack) per path per message.
    let mut truth: Vec<[(u64, u64); 2]> = Vec::new();
    let mut retrans = 0u64;
    for i in 0..N {
        let base = T0 + 1_000_000_000 + u64::from(i) * GAP;
        let mut t = [(0, 0); 2];
        for (p, tp) in t.iter_mut().enumerate() {
            let send = base + p as u64 * 50_000;
            let kts = (send / 1_000_000) as u32;
            obs.push(at_tbox(p, send, KcpCmd::Push, i, kts, 600));
            let mut acked_send = send;
            if p == 0 && i % 50 == 3 {
                // Lost on eth0; KCP retransmits on eth0 after 200 ms.
                acked_send = send + 200_000_000;
                obs.push(at_tbox(p, acked_send, KcpCmd::Push, i, kts + 200, 600));
                retrans += 1;
            }
            let ack = acked_send + rtt(p, i);
            obs.push(at_tbox(p, ack, KcpCmd::Ack, i, kts, 0));
            *tp = (send, ack);
        }
        truth.push(t);
    }
    let obs = sorted(obs);
    let end = obs.last().unwrap().ts_ns();
    let mut e = engine(Config::default());
    for o in obs {
        e.handle(o);
    }
    let snap = e.snapshot();
    assert_eq!(snap.flows.kcp.len(), 1);
    assert_eq!(snap.flows.kcp[0].retransmissions, retrans);
    let s = e.finish(end + 1);
    assert_eq!(s.latency.kind, LatencyKind::AckRtt);
    let mut combined: Vec<u64> = truth
        .iter()
        .map(|t| (t[0].1.min(t[1].1) - t[0].0.min(t[1].0)) / 1000)
        .collect();
    combined.sort_unstable();
    assert_eq!(s.latency.combined.count, u64::from(N));
    assert_eq!(s.latency.combined.p50_us, expected_quantile(&combined, 0.5));
    assert_eq!(
        s.latency.combined.p99_us,
        expected_quantile(&combined, 0.99)
    );
    assert_eq!(s.latency.combined.max_us, *combined.last().unwrap());
    let mut eth0: Vec<u64> = truth.iter().map(|t| (t[0].1 - t[0].0) / 1000).collect();
    eth0.sort_unstable();
    let (_, p0) = s
        .latency
        .per_path
        .iter()
        .find(|(l, _)| l == "eth0")
        .unwrap();
    assert_eq!(p0.p999_us, expected_quantile(&eth0, 0.999));
    assert_eq!(p0.max_us, *eth0.last().unwrap());
    let red = &s.redundancy[0];
    assert_eq!(red.messages, u64::from(N));
    assert_eq!(red.on_all_paths, u64::from(N));
    assert!(
        red.verdict
            .starts_with("redundancy confirmed: 100.0% of 1000 messages on both paths"),
        "{}",
        red.verdict
    );
    let wins1 = truth.iter().filter(|t| t[1].1 < t[0].1).count() as u64;
    assert_eq!(
        red.paths.iter().find(|p| p.path == "eth1").unwrap().wins,
        wins1
    );
    let eth0_path = s.paths.iter().find(|p| p.label == "eth0").unwrap();
    // 20 of 1020 eth0 data transmissions were retransmissions.
    assert!(
        (eth0_path.retransmission_rate - retrans as f64 / (u64::from(N) + retrans) as f64).abs()
            < 1e-12
    );
    let amp = &s.amplification[0];
    // Wire: all pushes (copies + retransmissions) and ACKs; unique: 600 bytes per message.
    let pushes = 2 * u64::from(N) + retrans;
    assert_eq!(amp.wire_bytes, pushes * 652 + 2 * u64::from(N) * 52);
    assert_eq!(amp.unique_payload_bytes, u64::from(N) * 600);
    assert_eq!(amp.retransmit_bytes, retrans * 652);
    assert_eq!(s.incidents_total, 0, "{:?}", s.hol_incidents);
}

/// Seen from the T-Box alone, every message goes out on both paths, but eth0 swallows 200 of
/// them (no ACK ever comes back): 80 % arrived on both paths, 100 % were sent on both — the
/// T-Box does duplicate, and the verdict says so before what became of the copies.
#[test]
fn copies_sent_on_both_paths_are_told_from_copies_that_arrived() {
    let mut obs = vec![
        capture(0, "t-eth0", "eth0", Host::Tbox, None),
        capture(1, "t-eth1", "eth1", Host::Tbox, None),
    ];
    let swallowed = 300..500;
    for i in 0..N {
        let send = T0 + 1_000_000_000 + u64::from(i) * GAP;
        let kts = (send / 1_000_000) as u32;
        for p in 0..2 {
            let at = send + p as u64 * 50_000;
            obs.push(at_tbox(p, at, KcpCmd::Push, i, kts, 600));
            if p == 0 && swallowed.contains(&i) {
                continue;
            }
            obs.push(at_tbox(p, at + rtt(p, i), KcpCmd::Ack, i, kts, 0));
        }
    }
    let s = run(obs, Config::default());
    let red = &s.redundancy[0];
    assert_eq!(red.messages, u64::from(N));
    assert_eq!(red.on_all_paths, u64::from(N) - 200);
    assert_eq!(red.sent_on_all_paths, u64::from(N));
    assert_eq!(
        red.verdict,
        "redundant sending confirmed: 100.0% of 1000 messages sent on all 2 paths; partial \
         redundancy: 80.0% of 1000 messages on both paths; 200 only on eth1 (within the \
         message timeout)"
    );
}

#[test]
fn kcp_sn_gap_at_receiver_is_one_hol_incident() {
    // Gateway capture only: data arrives; sn 40 is lost and retransmitted after 41..45 arrived.
    let mut obs = vec![capture(5, "gw-g0", "g0", Host::Gateway, None)];
    let base = T0 + 1_000_000_000;
    let mut t_fill = 0;
    let mut t_first_later = 0;
    for sn in 0..100u32 {
        let sent = base + u64::from(sn) * GAP;
        let kts = (sent / 1_000_000) as u32;
        if sn == 40 {
            continue;
        }
        let arrive = sent + 30_000_000;
        if sn == 41 {
            t_first_later = arrive;
        }
        obs.push(seg(
            arrive,
            "g0",
            5,
            "10.0.0.2:40000",
            "192.0.2.1:4000",
            KcpCmd::Push,
            sn,
            kts,
            500,
        ));
        if sn == 45 {
            // Fast resend of sn 40 arrives right after sn 45.
            t_fill = arrive + 1_000_000;
            obs.push(seg(
                t_fill,
                "g0",
                5,
                "10.0.0.2:40000",
                "192.0.2.1:4000",
                KcpCmd::Push,
                40,
                kts + 1,
                500,
            ));
        }
    }
    let obs = sorted(obs);
    let mut e = engine(Config::default());
    for o in obs {
        e.handle(o);
    }
    let records: Vec<Record> = e.drain_records().collect();
    let incs = incidents(&records);
    assert_eq!(incs.len(), 1, "{incs:?}");
    let h = incs[0];
    assert_eq!(h.protocol, HolProtocol::Kcp);
    assert_eq!(h.missing, "sn 40");
    assert_eq!(h.start_ns, t_first_later);
    assert_eq!(h.end_ns, Some(t_fill));
    assert_eq!(h.stall_ns, t_fill - t_first_later);
    assert_eq!(h.messages_held, 5);
    assert_eq!(h.bytes_held, 5 * 500);
    assert_eq!(h.fast_retransmits, 1);
    assert_eq!(h.recovery, Recovery::Fast);
    assert!(h.evidence.len() >= 3, "{:?}", h.evidence);
    let snap = e.snapshot();
    assert_eq!(snap.incidents_total, 1);
    assert_eq!(snap.incidents[0].missing, "sn 40");
}

/// One T-Box path seen alone: 30 PUSH segments, acknowledged in batches of three by ACK
/// datagrams that name the two newest segments and leave the oldest to `una` (as ikcp may).
fn one_path_acked_by_una(declare_second_path: bool) -> (Engine, Vec<(u64, u64)>) {
    let mut obs = vec![capture(0, "t-eth0", "eth0", Host::Tbox, None)];
    if declare_second_path {
        obs.push(capture(1, "t-eth1", "eth1", Host::Tbox, None));
    }
    let (tbox, gw) = ("10.0.0.2:40000", "192.0.2.1:4000");
    let base = T0 + 1_000_000_000;
    // (send, acknowledgment) per sn.
    let mut truth = Vec::new();
    for sn in 0..30u32 {
        let sent = base + u64::from(sn) * GAP;
        let kts = (sent / 1_000_000) as u32;
        obs.push(seg(sent, "eth0", 0, tbox, gw, KcpCmd::Push, sn, kts, 500));
        truth.push((sent, 0));
        if sn % 3 == 2 {
            let acked = sent + 40_000_000;
            for (i, a) in [sn - 1, sn].into_iter().enumerate() {
                let mut o = seg(acked, "eth0", 0, gw, tbox, KcpCmd::Ack, a, kts, 0);
                if let Observation::Kcp(k) = &mut o {
                    k.header.una = sn + 1;
                    k.header.ts = (truth[a as usize].0 / 1_000_000) as u32;
                }
                obs.push(o);
                if i == 0 {
                    // una reaches the oldest of the three with the first ACK segment.
                    truth[(sn - 2) as usize].1 = acked;
                }
                truth[a as usize].1 = acked;
            }
        }
    }
    let mut e = engine(Config::default());
    for o in sorted(obs) {
        e.handle(o);
    }
    (e, truth)
}

#[test]
fn una_fills_the_receiver_gap_and_single_path_runs_close_messages_when_acknowledged() {
    let (mut e, truth) = one_path_acked_by_una(false);
    let records: Vec<Record> = e.drain_records().collect();
    // No HOL incident: una says the receiver holds the segments the ACKs do not name.
    assert!(
        !records.iter().any(|r| matches!(r, Record::HolIncident(_))),
        "{records:?}"
    );
    // The run has one path: each message closed when acknowledged, long before the message
    // timeout (the last acknowledgment is 0.6 s after the first send), with its exact RTT.
    let msgs = messages(&records);
    assert_eq!(msgs.len(), truth.len(), "{msgs:?}");
    for m in msgs {
        let sn: usize = m.id.trim_start_matches("up sn ").parse().unwrap();
        let (sent, acked) = truth[sn];
        assert_eq!(m.latency_kind, LatencyKind::AckRtt);
        assert_eq!(m.latency_us, Some((acked - sent) / 1000), "{m:?}");
        assert!(!m.evicted);
    }
}

/// The T-Box's and the gateway's address on the path of [`pushed_on_one_path`].
const ONE_PATH: (&str, &str) = ("10.0.0.2:40000", "192.0.2.1:4000");

/// The T-Box's capture of path `eth0` alone, and PUSH segments sn 0..`n` it sent there, one
/// every [`GAP`] from `base`.
fn pushed_on_one_path(base: u64, n: u32) -> Vec<Observation> {
    let (tbox, gw) = ONE_PATH;
    let mut obs = vec![capture(0, "t-eth0", "eth0", Host::Tbox, None)];
    for sn in 0..n {
        let sent = base + u64::from(sn) * GAP;
        let kts = (sent / 1_000_000) as u32;
        obs.push(seg(sent, "eth0", 0, tbox, gw, KcpCmd::Push, sn, kts, 500));
    }
    obs
}

/// Seen from the T-Box alone, ACKs in order only move the receiver's next sn on (the path that
/// skips the incident machinery); an ACK that then skips ahead, in a segment whose una changes
/// nothing, still opens an incident, ACKs inside the gap narrow it, and the una that reaches
/// past it closes it.
#[test]
fn an_ack_skipping_ahead_after_in_order_acks_is_still_an_incident() {
    let (tbox, gw) = ONE_PATH;
    let base = T0 + 1_000_000_000;
    let mut obs = pushed_on_one_path(base, 8);
    // (ACK sn, una) in arrival order: 0 and 1 in order; 4 and 5 while 2 and 3 are missing; 2
    // (the gap narrows); 3 with una 6 (the gap is filled).
    let acks = [(0, 1), (1, 2), (4, 2), (5, 2), (2, 3), (3, 6)];
    let at = |i: usize| base + 8 * GAP + i as u64 * 1_000_000;
    for (i, (sn, una)) in acks.into_iter().enumerate() {
        let mut o = seg(at(i), "eth0", 0, gw, tbox, KcpCmd::Ack, sn, 0, 0);
        if let Observation::Kcp(k) = &mut o {
            k.header.una = una;
        }
        obs.push(o);
    }
    let mut e = engine(Config::default());
    for o in sorted(obs) {
        e.handle(o);
    }
    let records: Vec<Record> = e.drain_records().collect();
    let incs = incidents(&records);
    assert_eq!(incs.len(), 1, "{incs:?}");
    assert_eq!(incs[0].missing, "sn 2–3");
    assert_eq!(incs[0].start_ns, at(2));
    assert_eq!(incs[0].end_ns, Some(at(5)));
    assert!(
        incs[0]
            .evidence
            .iter()
            .any(|ev| ev.what.contains("sn 3 still missing")),
        "{:?}",
        incs[0].evidence
    );
}

/// An ACK naming an sn below its una acknowledges that sn first, then the others below una in
/// order (the sn is taken with them, not on its own): the messages close in that order, once
/// each.
#[test]
fn the_sn_an_ack_names_is_acknowledged_before_the_rest_of_its_una() {
    let (tbox, gw) = ONE_PATH;
    let base = T0 + 1_000_000_000;
    let mut obs = pushed_on_one_path(base, 4);
    let acked = base + 4 * GAP;
    let mut o = seg(acked, "eth0", 0, gw, tbox, KcpCmd::Ack, 2, 0, 0);
    if let Observation::Kcp(k) = &mut o {
        k.header.una = 3;
    }
    obs.push(o);
    let mut e = engine(Config::default());
    for o in sorted(obs) {
        e.handle(o);
    }
    let records: Vec<Record> = e.drain_records().collect();
    let ids: Vec<&str> = messages(&records).iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["up sn 2", "up sn 0", "up sn 1"], "{records:?}");
}

#[test]
fn with_a_second_path_in_the_run_single_path_messages_wait_for_it() {
    let (mut e, _) = one_path_acked_by_una(true);
    // The other path may still carry copies: nothing closes before the message timeout.
    let records: Vec<Record> = e.drain_records().collect();
    assert!(
        !records.iter().any(|r| matches!(r, Record::Message(_))),
        "{records:?}"
    );
}

#[test]
fn the_report_gives_copy_spacing_only_where_messages_had_two_copies() {
    let (mut e, truth) = one_path_acked_by_una(false);
    let end = truth.last().map_or(T0, |t| t.1) + 1_000_000_000;
    let text = tboxscope_engine::report::render(&e.finish(end));
    assert!(text.contains("eth0 wins 100.0%"), "{text}");
    assert!(!text.contains("copy spacing"), "{text}");
}

const MS: u64 = 1_000_000;
/// One-way delay of the path, both ways.
const DELAY: u64 = 40 * MS;

/// How the sender recovers the lost segments in [`lost_pair_seen_at_both_ends`].
#[derive(Clone, Copy, PartialEq)]
enum Resend {
    /// 1 ms after the second ACK datagram acknowledging a later sn reaches it (ikcp's fast
    /// resend, resend=2).
    Fast,
    /// 110 ms after the first transmission, before any later sn is acknowledged.
    Timeout,
}

/// What the receiver lived through, from the trace's construction.
#[derive(Debug)]
struct Stall {
    missing: &'static str,
    start: u64,
    end: u64,
    held: u64,
}

/// One path captured at both ends (T-Box capture 0, gateway capture 1, paired, same clock):
/// 40 PUSH segments of 600 bytes every 20 ms, each acknowledged by the gateway on arrival
/// (ACK datagram: the sn, `una` = next in order). sn 10 and 11 are lost and retransmitted
/// together in one datagram; sn 22 is lost and retransmitted alone, later; sn 32 is delayed
/// 25 ms and overtaken by sn 33 (no retransmission). Returns the engine's incidents and the
/// stalls the receiver had.
fn lost_pair_seen_at_both_ends(resend: Resend) -> (Vec<tboxscope_engine::HolIncident>, Vec<Stall>) {
    let (tbox, gw) = ("10.40.0.2:50000", "10.40.0.1:7101");
    let at = |c: u16| if c == 0 { "eth0" } else { "g0" };
    let mut obs: Vec<Observation> = (0..2u16)
        .map(|c| {
            Observation::Capture(tboxscope_engine::CapturePoint {
                ts_ns: T0,
                capture: c,
                name: at(c).to_owned(),
                path: at(c).to_owned(),
                host: if c == 0 { Host::Tbox } else { Host::Gateway },
                local_addrs: Vec::new(),
                clock_offset_ns: Some(0),
                pair_with: Some(1 - c),
            })
        })
        .collect();
    let kseg = |ts: u64, c: u16, up: bool, cmd, sn: u32, kts: u32, una: u32| {
        let (src, dst) = if up { (tbox, gw) } else { (gw, tbox) };
        let len = if cmd == KcpCmd::Push { 600 } else { 0 };
        Observation::Kcp(KcpSegment {
            meta: meta(ts, at(c), c, addr(src), addr(dst), 24 + len + 28),
            header: KcpHeader {
                conv: 9,
                cmd,
                sn,
                una,
                frg: 0,
                wnd: 128,
                len,
                ts: kts,
            },
            app_msg_id: None,
            content_hash: None,
        })
    };
    let base = T0 + 1_000_000_000;
    let kts = |t: u64| ((t - T0) / MS) as u32;
    let send = |sn: u32| base + u64::from(sn) * GAP;
    // (arrival at the gateway, sn, the copy's ts) of every copy that gets through.
    let mut arrivals: Vec<(u64, u32, u32)> = Vec::new();
    for sn in 0..40u32 {
        let t = send(sn);
        obs.push(kseg(t, 0, true, KcpCmd::Push, sn, kts(t), 0));
        match sn {
            10 | 11 | 22 => {}
            32 => arrivals.push((t + DELAY + 25 * MS, sn, kts(t))),
            _ => arrivals.push((t + DELAY, sn, kts(t))),
        }
    }
    // The ACK datagram of the gateway for an arrival leaves 0.5 ms later.
    let ack_back = |arrive: u64| arrive + MS / 2 + DELAY;
    // Each loss: the lost sns, and the second later sn to arrive (its ACK datagram is the
    // second to acknowledge a later sn since the loss).
    let resends: Vec<(u64, Vec<u32>)> = [(vec![10u32, 11], 13u32), (vec![22], 24)]
        .into_iter()
        .map(|(sns, second_later)| {
            let t = match resend {
                Resend::Fast => ack_back(send(second_later) + DELAY) + MS,
                Resend::Timeout => send(sns[0]) + 110 * MS,
            };
            (t, sns)
        })
        .collect();
    for (t, sns) in &resends {
        for &sn in sns {
            obs.push(kseg(*t, 0, true, KcpCmd::Push, sn, kts(*t), 0));
            arrivals.push((*t + DELAY, sn, kts(*t)));
        }
    }
    arrivals.sort();
    // The receiver: in-order delivery, its ACKs, and the stalls it had.
    let (mut next, mut held) = (0u32, std::collections::BTreeMap::new());
    let mut stalls = Vec::new();
    let mut open: Option<(u64, &'static str, u64)> = None;
    let mut i = 0;
    while i < arrivals.len() {
        // Copies arriving at the same instant travel in one datagram.
        let t = arrivals[i].0;
        let mut acks = Vec::new();
        while i < arrivals.len() && arrivals[i].0 == t {
            let (_, sn, ts) = arrivals[i];
            obs.push(kseg(t, 1, true, KcpCmd::Push, sn, ts, 0));
            acks.push((sn, ts));
            if sn > next {
                held.insert(sn, t);
                if open.is_none() {
                    let name = match next {
                        10 => "sn 10–11",
                        22 => "sn 22",
                        _ => "sn 32",
                    };
                    open = Some((t, name, 0));
                }
            } else if sn == next {
                next += 1;
                while held.remove(&next).is_some() {
                    next += 1;
                    if let Some(o) = open.as_mut() {
                        o.2 += 1;
                    }
                }
                if held.is_empty() {
                    if let Some((start, missing, n)) = open.take() {
                        stalls.push(Stall {
                            missing,
                            start,
                            end: t,
                            held: n,
                        });
                    }
                }
            }
            i += 1;
        }
        for (sn, ts) in acks {
            let sent = t + MS / 2;
            obs.push(kseg(sent, 1, false, KcpCmd::Ack, sn, ts, next));
            obs.push(kseg(sent + DELAY, 0, false, KcpCmd::Ack, sn, ts, next));
        }
    }
    assert!(open.is_none() && held.is_empty() && next == 40);
    let mut e = engine(Config::default());
    for o in sorted(obs) {
        e.handle(o);
    }
    let incidents = e
        .drain_records()
        .filter_map(|r| match r {
            Record::HolIncident(h) => Some(h),
            _ => None,
        })
        .collect();
    (incidents, stalls)
}

fn check_stalls(resend: Resend, recovery: Recovery, held: [u64; 3]) {
    let (incs, stalls) = lost_pair_seen_at_both_ends(resend);
    // The trace's own account: three stalls, the first holding what arrived behind sn 10–11.
    assert_eq!(
        stalls.iter().map(|s| s.held).collect::<Vec<_>>(),
        held,
        "{stalls:?}"
    );
    // One incident per stall: two segments lost together are one stall, not two.
    assert_eq!(incs.len(), stalls.len(), "{incs:#?}");
    for (h, s) in incs.iter().zip(&stalls) {
        let ctx = format!("{h:#?}\n{s:?}");
        assert_eq!(h.protocol, HolProtocol::Kcp);
        assert_eq!(h.missing, s.missing, "{ctx}");
        assert_eq!(h.start_ns, s.start, "{ctx}");
        assert_eq!(h.end_ns, Some(s.end), "{ctx}");
        assert_eq!(h.stall_ns, s.end - s.start, "{ctx}");
        assert_eq!(h.messages_held, s.held, "{ctx}");
        assert_eq!(h.bytes_held, s.held * 600, "{ctx}");
    }
    // sn 10 and 11, each retransmitted once (seen at the T-Box, before the gateway saw the
    // gap), of the kind the T-Box's own view shows; then sn 22 alone.
    let counts = |h: &tboxscope_engine::HolIncident| (h.fast_retransmits, h.timeout_retransmits);
    let (two, one) = match recovery {
        Recovery::Fast => ((2, 0), (1, 0)),
        _ => ((0, 2), (0, 1)),
    };
    assert_eq!(
        (incs[0].recovery, counts(&incs[0])),
        (recovery, two),
        "{incs:#?}"
    );
    assert_eq!(
        (incs[1].recovery, counts(&incs[1])),
        (recovery, one),
        "{incs:#?}"
    );
    let resent: Vec<&str> = incs[0]
        .evidence
        .iter()
        .filter(|e| e.what.contains("retransmitted"))
        .map(|e| e.what.as_str())
        .collect();
    assert_eq!(resent.len(), 2, "{:#?}", incs[0].evidence);
    assert!(incs[0]
        .evidence
        .windows(2)
        .all(|w| w[0].ts_ns <= w[1].ts_ns));
    // sn 32 overtaken by sn 33: the late original filled it, nothing was retransmitted.
    assert_eq!(
        (incs[2].recovery, counts(&incs[2])),
        (Recovery::Reordered, (0, 0)),
        "{incs:#?}"
    );
}

#[test]
fn two_lost_segments_resent_together_are_one_incident_with_fast_recovery() {
    // sn 12..17 arrive (280..380 ms) before the resent pair (381.5 ms): 6 held.
    check_stalls(Resend::Fast, Recovery::Fast, [6, 6, 1]);
}

#[test]
fn two_lost_segments_resent_together_are_one_incident_with_timeout_recovery() {
    // sn 12..15 arrive (280..340 ms) before the resent pair (350 ms): 4 held.
    check_stalls(Resend::Timeout, Recovery::Timeout, [4, 5, 1]);
}

#[test]
fn an_ack_before_an_idle_stretch_is_no_send_left_unanswered() {
    // The T-Box acknowledges a message from the gateway, says nothing for 5 s, then sends two
    // segments, acknowledged a round trip later: an idle path, no outage.
    let ms = 1_000_000;
    let (tbox, gw) = (TBOX[0], GW);
    let mut e = engine(Config::default());
    for o in [
        seg(T0, "eth0", 0, gw, tbox, KcpCmd::Push, 0, 0, 100),
        seg(T0 + ms, "eth0", 0, tbox, gw, KcpCmd::Ack, 0, 0, 0),
        seg(
            T0 + 5_000 * ms,
            "eth0",
            0,
            tbox,
            gw,
            KcpCmd::Push,
            0,
            5_000,
            100,
        ),
        seg(
            T0 + 5_001 * ms,
            "eth0",
            0,
            tbox,
            gw,
            KcpCmd::Push,
            1,
            5_001,
            100,
        ),
        seg(
            T0 + 5_050 * ms,
            "eth0",
            0,
            gw,
            tbox,
            KcpCmd::Ack,
            1,
            5_001,
            0,
        ),
    ] {
        e.handle(o);
    }
    let s = e.finish(T0 + 20_000 * ms);
    assert!(s.outages.is_empty(), "{:?}", s.outages);
}

/// A 500-byte data segment `sn` arriving at the gateway's capture (5, "g0") at `at_ns`.
fn gateway_push(at_ns: u64, sn: u32) -> Observation {
    seg(
        at_ns,
        "g0",
        5,
        ONE_PATH.0,
        ONE_PATH.1,
        KcpCmd::Push,
        sn,
        sn,
        500,
    )
}

/// The gateway's ACK of `sn` leaving its capture at `at_ns`, with its `una`.
fn gateway_ack(at_ns: u64, sn: u32, una: u32) -> Observation {
    let mut o = seg(
        at_ns,
        "g0",
        5,
        ONE_PATH.1,
        ONE_PATH.0,
        KcpCmd::Ack,
        sn,
        sn,
        0,
    );
    if let Observation::Kcp(k) = &mut o {
        k.header.una = una;
    }
    o
}

/// The gateway's capture begun mid-session just after sn 40 and 41 were lost on the way: the
/// first segments it sees, 42 and 43, lie past the hole, which the gateway's first ACK says
/// (una 40). One stall from 42's arrival to the resends', holding both; a capture whose first
/// segment the first ACK's una passes has none.
#[test]
fn a_capture_begun_just_past_a_hole_sees_the_hole() {
    let begun = |hole: bool| {
        let mut e = engine(Config::default());
        e.handle(capture(5, "gw-g0", "g0", Host::Gateway, None));
        let ms = |m: u64| T0 + m * 1_000_000;
        let (push, ack) = (gateway_push, gateway_ack);
        let first = if hole { 42 } else { 40 };
        let mut obs = Vec::new();
        for sn in first..44 {
            obs.push(push(ms(100 + u64::from(sn)), sn));
        }
        obs.push(ack(ms(150), 43, if hole { 40 } else { 44 }));
        if hole {
            obs.push(push(ms(300), 40));
            obs.push(push(ms(301), 41));
            obs.push(ack(ms(310), 41, 44));
        }
        for o in obs {
            e.handle(o);
        }
        let _ = e.finish(ms(60_000));
        let records: Vec<Record> = e.drain_records().collect();
        incidents(&records).into_iter().cloned().collect::<Vec<_>>()
    };
    let incs = begun(true);
    assert_eq!(incs.len(), 1, "{incs:?}");
    let h = &incs[0];
    assert_eq!(h.missing, "sn 40–41");
    assert_eq!(
        (h.start_ns, h.end_ns),
        (T0 + 142_000_000, Some(T0 + 301_000_000))
    );
    assert_eq!((h.messages_held, h.bytes_held), (2, 1000));
    let none = begun(false);
    assert!(none.is_empty(), "{none:?}");
}

/// The gateway's capture begun mid-session, its first segments not where the receiver's
/// in-order data ended: a resend of sn 20, which the gateway had (with 21–23, never seen),
/// beside sn 25, past sn 24 lost on the way: its first ACK (una 24) shows one hole, sn 24,
/// from 25's arrival; and sn 32 past 30–31, 30 arriving next, before the first ACK (una 31):
/// one hole, sn 30–31, holding 32, as a capture of the whole session has them.
#[test]
fn a_capture_begun_at_a_resend_of_data_the_receiver_had_sees_the_hole_after_it() {
    let begun = |first: &[(u64, u32)], una: u32, fill: &[(u64, u32)]| {
        let mut e = engine(Config::default());
        e.handle(capture(5, "gw-g0", "g0", Host::Gateway, None));
        let ms = |m: u64| T0 + m * 1_000_000;
        let push = |at: u64, sn: u32| gateway_push(ms(at), sn);
        let mut obs: Vec<Observation> = first.iter().map(|&(at, sn)| push(at, sn)).collect();
        obs.push(gateway_ack(ms(150), 0, una));
        obs.extend(fill.iter().map(|&(at, sn)| push(at, sn)));
        for o in obs {
            e.handle(o);
        }
        let summary = e.finish(ms(60_000));
        let records: Vec<Record> = e.drain_records().collect();
        let stalls: Vec<_> = incidents(&records)
            .into_iter()
            .map(|h| (h.missing.clone(), h.start_ns, h.end_ns, h.messages_held))
            .collect();
        // The hole taken for one before the first ACK is not counted either.
        assert_eq!(summary.incidents_total, stalls.len() as u64);
        stalls
    };
    let at = |m: u64| T0 + m * 1_000_000;
    assert_eq!(
        begun(&[(100, 20), (100, 25)], 24, &[(200, 24)]),
        [("sn 24".to_owned(), at(100), Some(at(200)), 1)]
    );
    assert_eq!(
        begun(&[(100, 32), (110, 30)], 31, &[(200, 31)]),
        [("sn 30–31".to_owned(), at(100), Some(at(200)), 1)]
    );
}
