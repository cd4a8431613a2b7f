//! Testbed up/down, addressing, routing, nftables loss and outages. Needs root.
#![expect(clippy::unwrap_used)]
use std::time::Duration;

use tboxscope_lab::names::{existing_namespaces, PathId};
use tboxscope_lab::probe::{probe_path, Direction};
use tboxscope_lab::scenario::Scenario;
use tboxscope_lab::{status, sys, DelayChoice, LabNames, Testbed, UpOptions};

fn arrived(names: &LabNames, path: PathId, dir: Direction, n: u64) -> usize {
    probe_path(names, path, dir, n, 100, 100, Duration::from_millis(300))
        .unwrap()
        .delays_ns
        .len()
}

#[test]
fn up_down_is_idempotent_and_leaves_nothing() {
    let names = LabNames::for_test("updown").unwrap();
    let mut sc = Scenario::preset("S1").unwrap();
    sc.path.a.loss_pct = 0.0;
    sc.path.b.loss_pct = 0.0;
    let opts = UpOptions {
        delay: DelayChoice::Line,
        ..Default::default()
    };
    let first = Testbed::up(names.clone(), &sc, &opts).unwrap();
    first.keep();
    // Up again over the first instance: rebuilt from scratch, still one instance.
    let bed = Testbed::up(names.clone(), &sc, &opts).unwrap();
    let st = status::status(&names).unwrap();
    assert!(st.is_up(&names), "{st}");
    assert_eq!(st.namespaces.len(), 4, "{st}");
    for p in PathId::BOTH {
        assert_eq!(arrived(&names, p, Direction::Up, 10), 10);
        assert_eq!(arrived(&names, p, Direction::Down, 10), 10);
    }
    let route = sys::run_in(&names.tbox_ns(), "ip", &["route", "get", "10.40.0.1"]).unwrap();
    assert!(route.contains("dev eth0"), "{route}");
    let route = sys::run_in(&names.tbox_ns(), "ip", &["route", "get", "10.50.0.1"]).unwrap();
    assert!(route.contains("dev eth1"), "{route}");
    let route = sys::run_in(
        &names.tbox_ns(),
        "ip",
        &["route", "get", "192.0.2.1", "from", "10.50.0.2"],
    )
    .unwrap();
    assert!(route.contains("dev eth1"), "{route}");
    // Outage on path A: nothing crosses A in either direction, B is untouched.
    bed.set_outage(PathId::A, true).unwrap();
    assert_eq!(arrived(&names, PathId::A, Direction::Up, 10), 0);
    assert_eq!(arrived(&names, PathId::A, Direction::Down, 10), 0);
    assert_eq!(arrived(&names, PathId::B, Direction::Up, 10), 10);
    let st = status::status(&names).unwrap();
    assert!(
        st.paths[0].outage_on && st.paths[0].outage_drops >= 20,
        "{st}"
    );
    bed.set_outage(PathId::A, false).unwrap();
    assert_eq!(arrived(&names, PathId::A, Direction::Up, 10), 10);
    let stats = bed.teardown().unwrap();
    assert!(stats.iter().all(|(_, s)| s.up_frames >= 10), "{stats:?}");
    assert!(existing_namespaces(names.prefix()).unwrap().is_empty());
    tboxscope_lab::down(&names).unwrap();
}

#[test]
fn random_loss_happens_before_the_receiver() {
    let names = LabNames::for_test("loss").unwrap();
    let mut sc = Scenario::preset("S1").unwrap();
    sc.path.a.loss_pct = 20.0;
    sc.path.a.jitter_ms = 0.0;
    sc.path.a.delay_ms = 1.0;
    let opts = UpOptions {
        delay: DelayChoice::Line,
        ..Default::default()
    };
    let bed = Testbed::up(names.clone(), &sc, &opts).unwrap();
    let n = 1000;
    let got = probe_path(
        &names,
        PathId::A,
        Direction::Up,
        n,
        1000,
        100,
        Duration::from_millis(300),
    )
    .unwrap();
    let lost = n as f64 - got.delays_ns.len() as f64;
    // 20 % of 1000: binomial sd ≈ 12.6; allow 5 sd.
    assert!((lost - 200.0).abs() < 65.0, "lost {lost}");
    // The drops are counted by the path's loss rule at the line's egress toward the receiver,
    // after every probe crossed the delay line (the line sees each drop as a refused send).
    // A probe may also be refused by the line's full queue or come after the wait: at most 2.
    let st = status::status(&names).unwrap();
    let drops = st.paths[0].loss_drops as f64;
    assert!(drops <= lost && lost - drops <= 2.0, "lost {lost}: {st}");
    let lines = bed.line_stats();
    let s = lines[0].1;
    assert!(s.up_frames + s.send_failures >= n, "{lines:?}");
    assert!(s.send_failures >= st.paths[0].loss_drops, "{lines:?}");
}

#[test]
fn rate_limit_caps_throughput() {
    let names = LabNames::for_test("rate").unwrap();
    let mut sc = Scenario::preset("S1").unwrap();
    sc.path.a.loss_pct = 0.0;
    sc.path.a.jitter_ms = 0.0;
    sc.path.a.delay_ms = 1.0;
    sc.path.a.rate_kbit = Some(1000);
    let opts = UpOptions {
        delay: DelayChoice::Line,
        ..Default::default()
    };
    let _bed = Testbed::up(names.clone(), &sc, &opts).unwrap();
    let qdisc = sys::run_in(&names.line_ns(PathId::A), "tc", &["qdisc", "show"]).unwrap();
    assert!(qdisc.contains("tbf") && qdisc.contains("1Mbit"), "{qdisc}");
    // 1000 × 1000 B in one second is 8 Mbit/s offered into 1 Mbit/s: the token bucket passes
    // about 1 Mbit/s (plus its queue of at most 400 ms and its burst) and drops the rest.
    let r = probe_path(
        &names,
        PathId::A,
        Direction::Up,
        1000,
        1000,
        1000,
        Duration::from_millis(600),
    )
    .unwrap();
    let got = r.delays_ns.len();
    assert!(got > 50 && got < 400, "{got} of {} arrived", r.sent);
}
