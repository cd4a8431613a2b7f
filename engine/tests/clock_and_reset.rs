//! The engine's clock moved without packets (`tick`, as a live capture's idle clock or a replay
//! position does) and the UI's "reset windows" (`r`).

#[expect(dead_code, reason = "each test uses some of the shared helpers")]
mod common;

use common::*;
use tboxscope_engine::{Config, Datagram, Engine, Observation, Record};

const GAP: u64 = 20_000_000; // 50 messages per second

/// Two ends of two paths, `n` messages dual-sent from T0 + 1 s, 30 ms (eth0) / 20 ms (eth1).
fn traffic(e: &mut Engine, n: u64) -> u64 {
    let tbox = [addr("10.0.0.2:40000"), addr("10.1.0.2:40001")];
    let gw = addr("192.0.2.1:9000");
    let labels = ["eth0", "eth1"];
    let mut obs = two_ends_of_two_paths(Some(0));
    for i in 0..n {
        let send = T0 + 1_000_000_000 + i * GAP;
        for p in 0..2u16 {
            let d = |ts: u64, cap: u16| {
                Observation::Datagram(Datagram {
                    meta: meta(ts, labels[p as usize], cap, tbox[p as usize], gw, 628),
                    payload_hash: 0x5eed_0000 + i,
                    payload_len: 600,
                    app_msg_id: None,
                })
            };
            obs.push(d(send, p));
            obs.push(d(send + 30_000_000 - u64::from(p) * 10_000_000, 2 + p));
        }
    }
    let obs = sorted(obs);
    let last = obs.last().map_or(T0, Observation::ts_ns);
    for o in obs {
        e.handle(o);
    }
    last
}

#[test]
fn tick_moves_time_without_packets_and_never_back() {
    let mut e = engine(Config::default());
    let last = traffic(&mut e, 100);
    e.drain_records().for_each(drop);
    assert_eq!(e.now_ns(), last);
    e.tick(last - 5_000_000_000);
    assert_eq!(e.now_ns(), last, "a tick into the past is ignored");
    e.tick(last + 3_000_000_000);
    assert_eq!(e.now_ns(), last + 3_000_000_000);
    let records: Vec<Record> = e.drain_records().collect();
    let windows = records
        .iter()
        .filter(|r| matches!(r, Record::Window(_)))
        .count();
    assert_eq!(windows, 1, "the open window closes; empty ones are skipped");
    let snap = e.snapshot();
    assert_eq!(snap.ts_ns, last + 3_000_000_000);
    assert!(snap.paths.iter().all(|p| p.packets_per_s == 0.0));
}

#[test]
fn reset_windows_clears_series_and_rates_but_keeps_the_run() {
    let mut e = engine(Config::default());
    let last = traffic(&mut e, 250);
    let before = e.snapshot();
    assert!(before.paths.iter().all(|p| !p.recent.is_empty()));
    assert!(!before.latency.combined_recent.is_empty());
    assert!(before.paths.iter().all(|p| p.packets_per_s > 0.0));

    e.reset_windows();
    let after = e.snapshot();
    assert!(after.paths.iter().all(|p| p.recent.is_empty()));
    assert!(after.latency.combined_recent.is_empty());
    assert!(after.paths.iter().all(|p| p.packets_per_s == 0.0));
    // Whole-run figures stay.
    assert_eq!(after.latency.combined.count, before.latency.combined.count);
    for (a, b) in after.paths.iter().zip(&before.paths) {
        assert_eq!((a.packets, a.latency.count), (b.packets, b.latency.count));
    }
    // Windows start again from the reset: the next one closes a window length later.
    e.drain_records().for_each(drop);
    e.tick(last + 999_000_000);
    assert_eq!(
        e.drain_records()
            .filter(|r| matches!(r, Record::Window(_)))
            .count(),
        0
    );
    e.tick(last + 1_001_000_000);
    let windows: Vec<Record> = e
        .drain_records()
        .filter(|r| matches!(r, Record::Window(_)))
        .collect();
    assert_eq!(windows.len(), 1);
    if let Some(Record::Window(w)) = windows.first() {
        assert_eq!(w.start_ns, last);
    }
}

#[test]
fn a_capture_declared_without_a_time_does_not_start_the_clock() {
    let mut e = engine(Config::default());
    for o in two_ends_of_two_paths(Some(0)) {
        if let Observation::Capture(mut c) = o {
            c.ts_ns = 0;
            e.handle(Observation::Capture(c));
        }
    }
    assert_eq!(e.now_ns(), 0);
    let first = T0 + 1_000_000_000;
    e.handle(Observation::Datagram(Datagram {
        meta: meta(
            first,
            "eth0",
            0,
            addr("10.0.0.2:40000"),
            addr("192.0.2.1:9000"),
            628,
        ),
        payload_hash: 1,
        payload_len: 600,
        app_msg_id: None,
    }));
    let summary = e.finish(first + 2_000_000_000);
    assert_eq!(summary.start_ns, first, "the first packet starts the clock");
    assert!(e
        .drain_records()
        .all(|r| !matches!(r, Record::Window(w) if w.start_ns < first)));
}
