//! The delay line's achieved one-way delay distribution matches the scenario's. Needs root.
#![allow(clippy::unwrap_used)]
use std::time::Duration;

use tboxscope_lab::names::PathId;
use tboxscope_lab::probe::{probe_path, DelaySummary, Direction};
use tboxscope_lab::scenario::Scenario;
use tboxscope_lab::{DelayChoice, LabNames, Testbed, UpOptions};

#[test]
fn achieved_delay_distribution_matches_s2() {
    let names = LabNames::for_test("delay").unwrap();
    let mut sc = Scenario::preset("S2").unwrap();
    sc.path.a.loss_pct = 0.0;
    sc.path.b.loss_pct = 0.0;
    let opts = UpOptions {
        delay: DelayChoice::Line,
        ..Default::default()
    };
    let _bed = Testbed::up(names.clone(), &sc, &opts).unwrap();
    for (p, dir) in [(PathId::A, Direction::Up), (PathId::B, Direction::Down)] {
        let spec = sc.path(p);
        let r = probe_path(&names, p, dir, 1500, 300, 200, Duration::from_millis(400)).unwrap();
        assert!(
            r.delays_ns.len() as u64 * 1000 >= r.sent * 995,
            "{} of {}",
            r.delays_ns.len(),
            r.sent
        );
        let s = DelaySummary::of(&r.delays_ns);
        // 1500 samples: standard error of the mean ≈ sd/39 ≈ 0.26 ms, of the sd ≈ 0.18 ms;
        // the tolerances leave room for scheduling noise on a loaded machine.
        assert!(
            (s.mean_ms - spec.delay_ms).abs() < 1.5,
            "path {p:?}: {s:?} vs {spec:?}"
        );
        assert!(
            (s.sd_ms - spec.jitter_ms).abs() < 1.5,
            "path {p:?}: {s:?} vs {spec:?}"
        );
        eprintln!(
            "path {p:?} {dir:?}: configured {}±{} ms, achieved {s:?}",
            spec.delay_ms, spec.jitter_ms
        );
    }
}
