//! Four captures nobody described (T-Box eth0/eth1, gateway g0/g1, gateway clock 7 ms ahead):
//! the engine works out which captures show the same path at its two ends, which end sent each
//! copy, and the clock offset, says so, and then measures one-way latency exactly.

#[expect(dead_code, reason = "each test uses some of the shared helpers")]
mod common;

use common::*;
use tboxscope_engine::{Config, Datagram, Host, Observation, Record};

const N: u64 = 300;
const GAP: u64 = 20_000_000;
const GW_AHEAD: u64 = 7_000_000;

fn delay(dir: u64, p: u64, i: u64) -> u64 {
    // Smallest delay (exactly 20 ms) in both directions at message 150 on both paths.
    if i == 150 {
        return 20_000_000;
    }
    20_000_000 + 1_000 + ((i * 7919 + p * 31 + dir * 17) % 9000) * 1000
}

#[test]
fn pairs_captures_infers_sender_end_and_estimates_clock_offset() {
    let tbox = ["10.0.0.2:40000", "10.1.0.2:40001"];
    let gw = "192.0.2.1:9000";
    let (t_labels, g_labels) = (["eth0", "eth1"], ["g0", "g1"]);
    let mut obs = Vec::new();
    // (up send, up arrival) per path, true time.
    let mut truth = vec![[(0u64, 0u64); 2]; N as usize];
    for i in 0..N {
        let base = T0 + 1_000_000_000 + i * GAP;
        for p in 0..2u64 {
            let pu = p as usize;
            let d = |ts: u64, path: &str, cap: u16, src: &str, dst: &str, h: u64| {
                Observation::Datagram(Datagram {
                    meta: meta(ts, path, cap, addr(src), addr(dst), 628),
                    payload_hash: h,
                    payload_len: 600,
                    app_msg_id: None,
                })
            };
            let send = base + p * 100_000;
            let arrive = send + delay(0, p, i);
            truth[i as usize][pu] = (send, arrive);
            obs.push(d(send, t_labels[pu], pu as u16, tbox[pu], gw, i));
            obs.push(d(
                arrive + GW_AHEAD,
                g_labels[pu],
                2 + pu as u16,
                tbox[pu],
                gw,
                i,
            ));
            // The gateway's reply on the same path.
            let rsend = arrive + 5_000_000;
            let rarrive = rsend + delay(1, p, i);
            obs.push(d(
                rsend + GW_AHEAD,
                g_labels[pu],
                2 + pu as u16,
                gw,
                tbox[pu],
                1_000_000 + i,
            ));
            obs.push(d(
                rarrive,
                t_labels[pu],
                pu as u16,
                gw,
                tbox[pu],
                1_000_000 + i,
            ));
        }
    }
    let obs = sorted(obs);
    let end = obs.last().unwrap().ts_ns();
    let mut e = engine(Config::default());
    for o in obs {
        e.handle(o);
    }
    let snap = e.snapshot();
    let caps = &snap.health.captures;
    assert_eq!(caps.len(), 4);
    for c in caps {
        match c.capture {
            0 | 1 => {
                assert_eq!(c.paired_with, Some(c.capture + 2), "{c:?}");
                assert_eq!(c.clock_offset_ns, 0);
            }
            _ => {
                assert_eq!(c.host, Host::Gateway, "{c:?}");
                assert!(c.clock_offset_estimated);
                assert_eq!(c.clock_offset_ns, -(GW_AHEAD as i64), "{c:?}");
            }
        }
    }
    assert_eq!(snap.paths.len(), 2, "g0/g1 merged into eth0/eth1");
    let said = snap.health.inferences.join("\n");
    assert!(
        said.contains("`capture 0 (eth0)` and `capture 2 (g0)` show the same path"),
        "{said}"
    );
    assert!(
        said.contains("clock offset of `capture 2 (g0)` estimated"),
        "{said}"
    );
    let _ = e.finish(end + 10_000_000_000);
    let msgs: Vec<_> = e
        .drain_records()
        .filter_map(|r| match r {
            Record::Message(m) => Some(m),
            _ => None,
        })
        .collect();
    assert_eq!(msgs.len() as u64, 2 * N, "up and down messages");
    // Every uplink copy after the estimate settled has its exact one-way latency.
    for i in 151..N {
        let m = msgs
            .iter()
            .find(|m| m.id == format!("hash {i:016x}"))
            .unwrap();
        for (pu, label) in ["eth0", "eth1"].iter().enumerate() {
            let c = m.copies.iter().find(|c| c.path == *label).unwrap();
            let (s, a) = truth[i as usize][pu];
            assert_eq!(c.sent, Some(s), "message {i} {label}");
            assert_eq!(c.arrived, Some(a), "message {i} {label}");
        }
    }
}
