//! A KCP conversation remembers which of its messages closed: a copy seen after its message
//! closed is late (a retransmission), not a new message, while a message first seen below the
//! newest sn (its earlier copies missed by the capture) is a new one.

#[expect(dead_code, reason = "each test uses some of the shared helpers")]
mod common;

use common::*;
use tboxscope_engine::{Config, Host, KcpCmd, KcpHeader, KcpSegment, Observation, Record};

const MS: u64 = 1_000_000;

fn seg(ts: u64, cmd: KcpCmd, sn: u32, una: u32) -> Observation {
    let (src, dst) = match cmd {
        KcpCmd::Ack => ("192.0.2.1:4000", "10.0.0.2:40000"),
        _ => ("10.0.0.2:40000", "192.0.2.1:4000"),
    };
    Observation::Kcp(KcpSegment {
        meta: meta(ts, "eth0", 0, addr(src), addr(dst), 600),
        header: KcpHeader {
            conv: 9,
            cmd,
            sn,
            una,
            frg: 0,
            wnd: 128,
            len: if cmd == KcpCmd::Push { 548 } else { 0 },
            ts: (ts / MS) as u32,
        },
        app_msg_id: None,
        content_hash: None,
    })
}

/// Sends `sn` at `t` and has it acknowledged 50 ms later (una: everything below `una`).
fn sent_and_acked(obs: &mut Vec<Observation>, t: u64, sn: u32, una: u32) {
    obs.push(seg(t, KcpCmd::Push, sn, 0));
    obs.push(seg(t + 50 * MS, KcpCmd::Ack, sn, una));
}

#[test]
fn copies_after_close_are_late_and_unseen_sns_below_the_newest_are_new() {
    let mut obs = vec![capture(0, "t-eth0", "eth0", Host::Tbox, None)];
    let mut t = T0 + 1_000 * MS;
    for sn in 0..10 {
        sent_and_acked(&mut obs, t, sn, sn + 1);
        t += 100 * MS;
    }
    // sn 3 again, long after its message closed: a retransmission, late.
    obs.push(seg(t, KcpCmd::Push, 3, 0));
    t += 100 * MS;
    // sn 15, then sn 12 (never seen: the capture missed its earlier copies), then 12 again.
    sent_and_acked(&mut obs, t, 15, 10);
    t += 100 * MS;
    sent_and_acked(&mut obs, t, 12, 10);
    t += 100 * MS;
    obs.push(seg(t, KcpCmd::Push, 12, 0));
    let mut e = engine(Config::default());
    for o in obs {
        e.handle(o);
    }
    let snap = e.snapshot();
    assert_eq!(snap.flows.kcp.len(), 1);
    assert_eq!(snap.flows.kcp[0].retransmissions, 2);
    let _ = e.finish(t + 10_000 * MS);
    let records: Vec<Record> = e.drain_records().collect();
    let ids: Vec<String> = messages(&records).iter().map(|m| m.id.clone()).collect();
    let mut expected: Vec<String> = (0..10).map(|sn| format!("up sn {sn}")).collect();
    expected.push("up sn 15".to_owned());
    expected.push("up sn 12".to_owned());
    assert_eq!(ids, expected);
}
