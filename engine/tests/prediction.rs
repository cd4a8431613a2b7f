//! Independent-paths prediction vs the observed combined tail: paths that are slow at the same
//! moments are reported as failing together; paths slow at different moments are not.

#[expect(dead_code, reason = "each test uses some of the shared helpers")]
mod common;

use common::*;
use tboxscope_engine::{Config, Datagram, Observation};

fn run(slow: impl Fn(usize, u64) -> bool) -> tboxscope_engine::Summary {
    run_beside(slow, false)
}

/// With `single_path_beside`, a single-path flow on eth0 runs beside the redundant one, one
/// message in five of it 2 s late (a TCP or KCP flow through an outage).
fn run_beside(
    slow: impl Fn(usize, u64) -> bool,
    single_path_beside: bool,
) -> tboxscope_engine::Summary {
    let tbox = ["10.0.0.2:40000", "10.1.0.2:40001"];
    let gw = "192.0.2.1:9000";
    let labels = ["eth0", "eth1"];
    let mut obs = two_ends_of_two_paths(Some(0));
    for i in 0..2000u64 {
        let base = T0 + 1_000_000_000 + i * 20_000_000;
        for p in 0..2usize {
            let d = |ts: u64, cap: u16| {
                Observation::Datagram(Datagram {
                    meta: meta(ts, labels[p], cap, addr(tbox[p]), addr(gw), 628),
                    payload_hash: i,
                    payload_len: 600,
                    app_msg_id: None,
                })
            };
            let lat =
                30_000_000 + (i * 7919 % 4000) * 1000 + if slow(p, i) { 300_000_000 } else { 0 };
            obs.push(d(base, p as u16));
            obs.push(d(base + lat, 2 + p as u16));
        }
        if single_path_beside {
            let d = |ts: u64, cap: u16| {
                Observation::Datagram(Datagram {
                    meta: meta(
                        ts,
                        "eth0",
                        cap,
                        addr("10.0.0.2:40010"),
                        addr("192.0.2.1:9001"),
                        628,
                    ),
                    payload_hash: 1_000_000 + i,
                    payload_len: 600,
                    app_msg_id: None,
                })
            };
            let lat = if i % 5 == 0 {
                2_000_000_000
            } else {
                30_000_000
            };
            obs.push(d(base + 5_000_000, 0));
            obs.push(d(base + 5_000_000 + lat, 2));
        }
    }
    let obs = sorted(obs);
    let end = obs.last().expect("trace is not empty").ts_ns();
    let mut e = engine(Config::default());
    for o in obs {
        e.handle(o);
    }
    e.finish(end + 1)
}

#[test]
fn simultaneous_slowness_is_a_shared_cause() {
    let s = run(|_, i| i % 50 == 0);
    assert!(
        s.latency
            .verdict
            .starts_with("paths fail together (shared cause)"),
        "{}",
        s.latency.verdict
    );
    // At the paths' P99 (the slow 2%), about 2% are slow on both vs 0.04% predicted.
    assert!(
        s.latency
            .tail
            .iter()
            .any(|t| t.observed > 0.015 && t.observed > 10.0 * t.predicted),
        "{:?}",
        s.latency.tail
    );
}

#[test]
fn slowness_at_different_moments_is_independent() {
    let s = run(|p, i| i % 50 == if p == 0 { 0 } else { 25 });
    assert!(
        !s.latency.verdict.contains("shared cause"),
        "{}",
        s.latency.verdict
    );
    // Redundancy hides every slow copy: the combined maximum stays at the fast distribution.
    assert!(
        s.latency.combined.max_us < 40_000,
        "{:?}",
        s.latency.combined
    );
}

#[test]
fn single_path_flows_do_not_enter_the_verdict() {
    // The redundant flow's paths are slow at different moments; a single-path flow beside it
    // has a long tail of its own. Its slow messages were on one path only: they say nothing of
    // whether the paths fail together.
    let s = run_beside(|p, i| i % 50 == if p == 0 { 0 } else { 25 }, true);
    assert!(
        s.latency.verdict.starts_with("paths look independent"),
        "{}",
        s.latency.verdict
    );
    let alone = run(|p, i| i % 50 == if p == 0 { 0 } else { 25 });
    assert_eq!(s.latency.tail, alone.latency.tail);
    assert_eq!(s.latency.verdict, alone.latency.verdict);
    // The single-path flow's tail is still in the combined figures.
    assert!(
        s.latency.combined.max_us > 1_900_000,
        "{:?}",
        s.latency.combined
    );
}
