//! Output shape and the smaller paths: JSON of each record type, a forced matching mode, and an
//! outage seen from the sender alone (ACKs stop while it keeps sending).

#[expect(dead_code, reason = "each test uses some of the shared helpers")]
mod common;

use common::*;
use tboxscope_engine::{
    Config, Datagram, FlowSelector, Host, KcpCmd, KcpHeader, KcpSegment, MatchMode, ModeOverride,
    Observation, Record,
};

fn kcp(ts: u64, p: usize, cmd: KcpCmd, sn: u32) -> Observation {
    let t = [addr("10.0.0.2:40000"), addr("10.1.0.2:40001")][p];
    let g = addr("192.0.2.1:4000");
    let (src, dst) = if cmd == KcpCmd::Push { (t, g) } else { (g, t) };
    Observation::Kcp(KcpSegment {
        meta: meta(ts, ["eth0", "eth1"][p], p as u16, src, dst, 100),
        header: KcpHeader {
            conv: 1,
            cmd,
            sn,
            una: 0,
            frg: 0,
            wnd: 32,
            len: if cmd == KcpCmd::Push { 48 } else { 0 },
            ts: (ts / 1_000_000) as u32,
        },
        app_msg_id: None,
        content_hash: None,
    })
}

#[test]
fn sender_alone_sees_an_outage_when_acks_stop() {
    let mut obs = vec![
        capture(0, "t-eth0", "eth0", Host::Tbox, None),
        capture(1, "t-eth1", "eth1", Host::Tbox, None),
    ];
    let base = T0 + 1_000_000_000;
    let mut last_ack_before = 0;
    let mut first_ack_after = 0;
    for i in 0..500u32 {
        let t = base + u64::from(i) * 20_000_000;
        for p in 0..2 {
            obs.push(kcp(t, p, KcpCmd::Push, i));
            // eth1's ACKs stop for messages 100..250 (3 s) while it keeps sending.
            if p == 1 && (100..250).contains(&i) {
                continue;
            }
            let at = t + 40_000_000;
            if p == 1 && i == 99 {
                last_ack_before = at;
            }
            if p == 1 && i == 250 {
                first_ack_after = at;
            }
            obs.push(kcp(at, p, KcpCmd::Ack, i));
        }
    }
    let obs = sorted(obs);
    let end = obs.last().unwrap().ts_ns();
    let mut e = engine(Config::default());
    for o in obs {
        e.handle(o);
    }
    let s = e.finish(end + 1);
    assert_eq!(s.outages_total, 1, "{:?}", s.outages);
    let o = &s.outages[0];
    assert_eq!(o.path, "eth1");
    assert_eq!(o.start_ns, last_ack_before);
    assert_eq!(o.end_ns, Some(first_ack_after));
    assert!(
        o.evidence
            .contains("nothing arrived over eth1 while eth0 delivered"),
        "{}",
        o.evidence
    );
    // Messages 100..250 were acknowledged on eth0 only; those first sent inside the outage
    // (from the last eth1 ACK, 40 ms after message 99 = message 101's send) are attributed:
    // 101..=249. So are 251 and 252: sent on eth1 before its first ACK after the outage
    // reached the T-Box (the observed end, message 252's send), acknowledged only after it.
    assert_eq!(o.carried_by_others, 149 + 2, "{o:?}");
    assert_eq!(o.lost, 0);
}

#[test]
fn forced_app_id_mode_and_record_json_shape() {
    let cfg = Config {
        mode_overrides: vec![ModeOverride {
            selector: FlowSelector {
                port: Some(9000),
                ..FlowSelector::default()
            },
            mode: MatchMode::AppId,
        }],
        ..Config::default()
    };
    let mut e = engine(cfg);
    let gw = addr("192.0.2.1:9000");
    let tbox = [addr("10.0.0.2:40000"), addr("10.1.0.2:40001")];
    e.handle(capture(2, "gw-g0", "eth0", Host::Gateway, None));
    e.handle(capture(3, "gw-g1", "eth1", Host::Gateway, None));
    let base = T0 + 1_000_000_000;
    for i in 0..50u64 {
        for p in 0..2 {
            // The two copies differ in bytes (different hash) but carry the same message id.
            e.handle(Observation::Datagram(Datagram {
                meta: meta(
                    base + i * 20_000_000 + p as u64 * 3_000_000,
                    ["eth0", "eth1"][p],
                    2 + p as u16,
                    tbox[p],
                    gw,
                    100,
                ),
                payload_hash: i * 2 + p as u64,
                payload_len: 60,
                app_msg_id: Some(1000 + i),
            }));
        }
    }
    let s = e.finish(base + 10_000_000_000);
    let red = &s.redundancy[0];
    assert_eq!(red.mode, Some(MatchMode::AppId));
    assert!(red.mode_forced);
    assert_eq!(red.on_all_paths, 50);
    let records: Vec<Record> = e.drain_records().collect();
    let msg = records.iter().find(|r| r.kind() == "message").unwrap();
    let v = serde_json::to_value(msg).unwrap();
    for k in ["id", "flow", "copies", "winner"] {
        assert!(v.get(k).is_some(), "{k} in {v}");
    }
    let copy = &v["copies"][0];
    for k in ["path", "sent", "arrived", "latency_us"] {
        assert!(copy.get(k).is_some(), "{k} in {copy}");
    }
    assert_eq!(v["id"], "app id 1000");
    assert_eq!(v["winner"], "eth0");
    let win = records.iter().find(|r| r.kind() == "window").unwrap();
    let w = serde_json::to_value(win).unwrap();
    for k in [
        "per_path",
        "combined",
        "duplication",
        "win_rates",
        "amplification",
    ] {
        assert!(w.get(k).is_some(), "{k} in {w}");
    }
    let summary = serde_json::to_value(&s).unwrap();
    for k in [
        "flows",
        "paths",
        "redundancy",
        "latency",
        "amplification",
        "outages",
        "hol_incidents",
        "health",
    ] {
        assert!(summary.get(k).is_some(), "{k}");
    }
    let snap = serde_json::to_string(&e.snapshot()).unwrap();
    assert!(snap.contains("\"verdict\""));
}

#[test]
fn request_response_time_from_the_tbox_alone() {
    let cfg = Config {
        mode_overrides: vec![ModeOverride {
            selector: FlowSelector {
                port: Some(9000),
                ..FlowSelector::default()
            },
            mode: MatchMode::AppId,
        }],
        ..Config::default()
    };
    let mut e = engine(cfg);
    e.handle(capture(0, "t-eth0", "eth0", Host::Tbox, None));
    let (t, g) = (addr("10.0.0.2:40000"), addr("192.0.2.1:9000"));
    let base = T0 + 1_000_000_000;
    let mut rtts = Vec::new();
    let mut obs = Vec::new();
    for i in 0..200u64 {
        let sent = base + i * 20_000_000;
        let rtt = 70_000 + (i * 7919 % 30_000); // µs
        rtts.push(rtt);
        for (ts, src, dst) in [(sent, t, g), (sent + rtt * 1000, g, t)] {
            obs.push(Observation::Datagram(Datagram {
                meta: meta(ts, "eth0", 0, src, dst, 100),
                payload_hash: ts,
                payload_len: 60,
                app_msg_id: Some(i),
            }));
        }
    }
    for o in sorted(obs) {
        e.handle(o);
    }
    let s = e.finish(base + 10_000_000_000);
    rtts.sort_unstable();
    let rr = &s.latency.request_response;
    assert_eq!(rr.count, 200);
    assert_eq!(rr.min_us, rtts[0]);
    assert_eq!(rr.max_us, *rtts.last().unwrap());
    assert_eq!(rr.p50_us, expected_quantile(&rtts, 0.5));
    assert_eq!(rr.p99_us, expected_quantile(&rtts, 0.99));
    assert!(tboxscope_engine::report::render(&s).contains("request → response"));
}
