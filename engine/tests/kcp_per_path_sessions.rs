//! One KCP session per path (each with its own conv) carrying the same messages, matched by
//! content, seen from the T-Box alone (its two interfaces) and with the capture started in
//! the middle of the sessions: the first message is one message of the group, not a
//! single-path flow of its own; copies held through a 6 s outage of a path (longer than the
//! 5 s message timeout) and delivered by KCP's retransmission are copies of their messages,
//! and a copy acknowledged after its message closed is counted as a late copy.
//!
//! The segment sequences are what ikcp sends: each session numbers its own segments from
//! where it stands, the receiver acknowledges each segment with an ACK (sn, una past it), and
//! a segment not acknowledged is retransmitted with its `ts` renewed.

#[expect(dead_code, reason = "each test uses some of the shared helpers")]
mod common;

use common::*;
use tboxscope_engine::{
    Config, Host, KcpCmd, KcpHeader, KcpSegment, LateCopyRecord, Observation, Record, Summary,
};

const MS: u64 = 1_000_000;
const N: u64 = 500;
/// Time between messages.
const GAP: u64 = 20 * MS;
/// Round trip per path (A = eth0, B = eth1).
const RTT: [u64; 2] = [80 * MS, 50 * MS];
const TBOX: [&str; 2] = ["10.40.0.2:50000", "10.50.0.2:50001"];
const GW: [&str; 2] = ["10.40.0.1:7401", "10.50.0.1:7401"];
const LABEL: [&str; 2] = ["eth0", "eth1"];

/// A segment of path `p`'s session seen at the T-Box's capture of that path (capture `p`).
fn seg(ts: u64, p: usize, cmd: KcpCmd, sn: u32, una: u32, content: Option<u64>) -> Observation {
    let push = cmd == KcpCmd::Push;
    let (src, dst) = if push {
        (TBOX[p], GW[p])
    } else {
        (GW[p], TBOX[p])
    };
    Observation::Kcp(KcpSegment {
        meta: meta(
            ts,
            LABEL[p],
            p as u16,
            addr(src),
            addr(dst),
            if push { 652 } else { 52 },
        ),
        header: KcpHeader {
            conv: 0x1000 + p as u32,
            cmd,
            sn,
            una,
            frg: 0,
            wnd: 128,
            len: if push { 600 } else { 0 },
            ts: (ts / MS) as u32,
        },
        app_msg_id: None,
        content_hash: content,
    })
}

/// What the T-Box sees of `N` messages sent on both sessions, the sessions' sns starting at
/// `sn0[p]` (mid-connection), path B cut during `cut` (nothing gets through either way): a
/// segment sent into the cut is retransmitted every `rto` until one gets through (or, with
/// `queued`, as when KCP's send window is full, first sent when the cut ends), and its ACK
/// comes one round trip later.
fn trace(sn0: [u32; 2], cut: Option<(u64, u64)>, rto: u64, queued: bool) -> Vec<Observation> {
    let mut obs = vec![
        capture(0, "t-eth0", "eth0", Host::Tbox, None),
        capture(1, "t-eth1", "eth1", Host::Tbox, None),
    ];
    let start = T0 + 1_000 * MS;
    let blocked = |p: usize, t: u64| p == 1 && cut.is_some_and(|(a, b)| t >= a && t < b);
    for i in 0..N {
        let t = start + i * GAP;
        let content = 0xc0_0000 + i;
        for p in 0..2usize {
            let sn = sn0[p] + i as u32;
            // Path A's copy leaves first (the application writes to session A, then B).
            let mut sent = t + p as u64 * MS;
            if let Some((_, end)) = cut.filter(|_| queued && blocked(p, sent)) {
                sent = end + u64::from(sn - sn0[p]) % 50 * 100_000;
            }
            obs.push(seg(sent, p, KcpCmd::Push, sn, sn0[1 - p], Some(content)));
            while blocked(p, sent) || blocked(p, sent + RTT[p] / 2) {
                sent += rto;
                obs.push(seg(sent, p, KcpCmd::Push, sn, sn0[1 - p], Some(content)));
            }
            obs.push(seg(sent + RTT[p], p, KcpCmd::Ack, sn, sn + 1, None));
        }
    }
    obs
}

fn cfg() -> Config {
    Config {
        emit_messages: false,
        ..Config::default()
    }
}

/// The flows with messages, and the one group flow's (messages, on both paths).
fn group(s: &Summary) -> (usize, u64, u64) {
    let with_messages: Vec<_> = s.flows.iter().filter(|f| f.messages > 0).collect();
    let red = s
        .redundancy
        .iter()
        .find(|r| r.messages > 1)
        .unwrap_or_else(|| panic!("a group flow: {:#?}", s.redundancy));
    (with_messages.len(), red.messages, red.on_all_paths)
}

#[test]
fn the_first_message_of_per_path_sessions_is_a_message_of_their_group() {
    // From the sessions' start, and from the middle of them (sns already far along).
    for sn0 in [[0, 0], [1_000, 37_001]] {
        let s = run(trace(sn0, None, 0, false), cfg());
        assert_eq!(group(&s), (1, N, N), "sns from {sn0:?}: {:#?}", s.flows);
        assert_eq!(s.health.regrouped_messages, 1, "{:#?}", s.health);
    }
}

/// Path B's session is first seen 8 s after A's (a capture begun while B was down, or B's
/// session opened late): A's messages closed on their own before then (5 s timeout) are
/// messages of the group too, carried by A only; one flow, every message counted once.
#[test]
fn messages_closed_before_the_other_session_appeared_are_messages_of_the_group() {
    let b_from = T0 + 9_000 * MS;
    let obs: Vec<Observation> = trace([3, 70_000], None, 0, false)
        .into_iter()
        .filter(|o| match o {
            Observation::Kcp(k) => k.header.conv == 0x1000 || k.meta.ts_ns >= b_from,
            _ => true,
        })
        .collect();
    let s = run(obs, cfg());
    // Messages 0..400 were sent before B's session was seen (8 s at 20 ms).
    assert_eq!(group(&s), (1, N, N - 400), "{:#?}", s.flows);
    let red = s.redundancy.iter().find(|r| r.messages > 1).unwrap();
    let a = red.paths.iter().find(|p| p.path == "eth0").unwrap();
    assert_eq!((a.carried, a.only), (N, 400), "{a:?}");
}

#[test]
fn copies_held_through_a_six_second_outage_are_copies_of_their_messages() {
    let start = T0 + 1_000 * MS;
    // Path B cut from 2 s to 8 s into the messages; KCP retransmits every 700 ms.
    let cut = (start + 2_000 * MS, start + 8_000 * MS);
    // Retransmitted into the cut, or (a full send window) first sent when it ends.
    for queued in [false, true] {
        let s = run(trace([5, 900], Some(cut), 700 * MS, queued), cfg());
        assert_eq!(group(&s), (1, N, N), "{:#?}", s.redundancy);
        assert_eq!(s.outages.len(), 1, "{:#?}", s.outages);
        let held = s.health.held_messages;
        // Every message sent into the cut whose copy on B arrived more than 5 s later waited
        // for it: those first sent in its first second or so.
        assert!(held > 0 && held < 300, "{:#?}", s.health);
        assert_eq!((s.health.late_copies, s.health.held_too_long), (0, 0));
    }
}

#[test]
fn a_copy_acknowledged_after_its_message_closed_is_a_late_copy() {
    let start = T0 + 1_000 * MS;
    let cut = (start + 2_000 * MS, start + 8_000 * MS);
    // Messages wait no longer than the timeout: the copies on B that came back more than 5 s
    // after their message was first sent are late copies of closed messages, whether they
    // were sent into the cut or first sent after it (the T-Box saw them leave after their
    // message closed).
    for queued in [false, true] {
        late_copies_counted(queued, cut);
    }
}

fn late_copies_counted(queued: bool, cut: (u64, u64)) {
    let s = run(
        trace([5, 900], Some(cut), 700 * MS, queued),
        Config {
            max_message_hold_ns: 5_000 * MS,
            ..cfg()
        },
    );
    let red = s
        .redundancy
        .iter()
        .find(|r| r.messages > 1)
        .unwrap_or_else(|| panic!("a group flow: {:#?}", s.redundancy));
    assert_eq!(red.messages, N, "{red:#?}");
    let only_a = N - red.on_all_paths;
    assert!(only_a > 0, "{red:#?}");
    assert_eq!(red.late_copies, only_a, "{red:#?}");
    assert_eq!(s.health.late_copies, only_a);
    assert!(
        red.verdict
            .contains(&format!("{only_a} copies came after their message closed")),
        "{}",
        red.verdict
    );
}

#[test]
fn a_late_copy_has_a_record_naming_its_message_path_and_delay() {
    let start = T0 + 1_000 * MS;
    let cut = (start + 2_000 * MS, start + 8_000 * MS);
    for queued in [false, true] {
        let mut e = engine(Config {
            max_message_hold_ns: 5_000 * MS,
            ..Config::default()
        });
        let obs = sorted(trace([5, 900], Some(cut), 700 * MS, queued));
        let end = obs.iter().map(Observation::ts_ns).max().unwrap_or(T0);
        let mut records: Vec<Record> = Vec::new();
        for o in obs {
            e.handle(o);
            records.extend(e.drain_records());
        }
        // The live Events log says each late copy as replay does (newest first, bounded).
        let events = e.snapshot().events;
        let s = e.finish(end + 1);
        records.extend(e.drain_records());
        assert_eq!(s.health.dropped_records, 0);
        let late: Vec<&LateCopyRecord> = records
            .iter()
            .filter_map(|r| match r {
                Record::LateCopy(l) => Some(l),
                _ => None,
            })
            .collect();
        // One record per late copy counted, each of a message whose record has no copy that
        // arrived there.
        assert_eq!(late.len() as u64, s.health.late_copies, "queued {queued}");
        assert!(!late.is_empty());
        let msgs = messages(&records);
        for l in &late {
            assert_eq!(l.path, "eth1", "{l:?}");
            assert_eq!(Record::LateCopy((*l).clone()).kind(), "late_copy");
            let m = msgs
                .iter()
                .find(|m| m.id == l.id && m.flow == l.flow)
                .unwrap_or_else(|| panic!("no message record for {l:?}"));
            assert!(
                m.copies
                    .iter()
                    .all(|c| c.path != "eth1" || c.arrived.is_none()),
                "{m:?}"
            );
            // The message closed at its timeout (5 s after its first copy, when the next
            // packet after it was handled; kept to the millisecond).
            let closed = l.seen_ns - l.after_close_us * 1_000;
            let timeout = m.first_seen_ns + 5_000 * MS;
            assert!(
                closed + MS >= timeout && closed <= timeout + GAP + MS,
                "closed {} ms after the timeout: {l:?}",
                (closed as i64 - timeout as i64) / MS as i64
            );
            assert!(l.after_close_us > 0, "{l:?}");
        }
        let logged: Vec<&str> = events
            .iter()
            .filter(|ev| ev.text.starts_with("late copy of "))
            .map(|ev| ev.text.as_str())
            .collect();
        assert!(!logged.is_empty());
        assert!(
            logged
                .iter()
                .all(|t| late.iter().any(|l| l.describe() == *t)),
            "{logged:?}"
        );
    }
}
