//! The delay line's achieved one-way delay distribution matches each preset's. Needs root.
use std::time::Duration;

use tboxscope_lab::names::PathId;
use tboxscope_lab::probe::{probe_path, DelaySummary, Direction};
use tboxscope_lab::scenario::{Scenario, PRESETS};
use tboxscope_lab::{DelayChoice, LabNames, Testbed, UpOptions};

#[test]
fn achieved_delay_distribution_matches_every_preset() {
    for preset in PRESETS {
        let names = LabNames::for_test(&format!("delay{preset}")).unwrap();
        let sc = Scenario::preset(preset).unwrap();
        let opts = UpOptions {
            delay: DelayChoice::Line,
            ..Default::default()
        };
        let _bed = Testbed::up(names.clone(), &sc, &opts).unwrap();
        for (p, dir) in [(PathId::A, Direction::Up), (PathId::B, Direction::Down)] {
            let spec = sc.path(p);
            let r = probe_path(&names, p, dir, 1000, 300, 200, Duration::from_millis(400)).unwrap();
            // The scenario's loss applies to the probes too (at the receiver).
            let lost = r.sent as f64 - r.delays_ns.len() as f64;
            let expect = r.sent as f64 * spec.loss_pct / 100.0;
            assert!(
                (lost - expect).abs() < 5.0 * expect.max(1.0).sqrt() + 2.0,
                "{preset} {p:?}: lost {lost}, expected {expect}"
            );
            let s = DelaySummary::of(&r.delays_ns);
            // ~1000 samples: standard error of the mean ≤ 15/31 ≈ 0.5 ms, of the sd ≤ 0.35 ms;
            // the tolerances leave room for scheduling noise on a loaded machine.
            assert!(
                (s.mean_ms - spec.delay_ms).abs() < 2.0,
                "{preset} {p:?}: {s:?} vs {spec:?}"
            );
            assert!(
                (s.sd_ms - spec.jitter_ms).abs() < 2.0,
                "{preset} {p:?}: {s:?} vs {spec:?}"
            );
            eprintln!(
                "{preset} path {p:?} {dir:?}: configured {}±{} ms, achieved {s:?}",
                spec.delay_ms, spec.jitter_ms
            );
        }
    }
}

#[test]
fn fifo_mode_keeps_order() {
    let names = LabNames::for_test("fifo").unwrap();
    let mut sc = Scenario::preset("S2").unwrap();
    sc.path.a.loss_pct = 0.0;
    sc.path.a.reorder = false;
    let opts = UpOptions {
        delay: DelayChoice::Line,
        ..Default::default()
    };
    let _bed = Testbed::up(names.clone(), &sc, &opts).unwrap();
    let r = probe_path(
        &names,
        PathId::A,
        Direction::Up,
        300,
        200,
        100,
        Duration::from_millis(400),
    )
    .unwrap();
    assert_eq!(r.delays_ns.len() as u64, r.sent);
    // Arrival order = send order: send time (arrival − delay) never decreases… within the
    // clock-read noise of a microsecond or so; release times are monotonic by construction.
    let s = DelaySummary::of(&r.delays_ns);
    assert!(s.mean_ms >= 40.0 - 2.0, "{s:?}");
}
