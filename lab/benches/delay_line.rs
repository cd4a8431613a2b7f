//! Delay-line fidelity and cost (needs root): `cargo bench -p tboxscope-lab --bench delay_line`.
//!
//! 1. Fidelity: probes through path A configured as S2 (40 ± 10 ms): achieved mean, standard
//!    deviation and percentiles against the normal distribution's.
//! 2. Added error vs packet rate: a constant 10 ms line; the error of a probe is its achieved
//!    one-way delay minus 10 ms minus the baseline (the same probes over a plain veth pair
//!    without the line, measured in the same run). Prints the highest rate at which the line's
//!    P99 added error stays below 1 ms.
use std::time::Duration;

use tboxscope_lab::names::PathId;
use tboxscope_lab::probe::{percentile, probe_path, DelaySummary, Direction};
use tboxscope_lab::scenario::Scenario;
use tboxscope_lab::{sys, DelayChoice, LabNames, Testbed, UpOptions};

fn bed(tag: &str, delay_ms: f64, jitter_ms: f64, spin_us: u64) -> (LabNames, Testbed) {
    let names = LabNames::new(&format!("tbxbench{}-{tag}-", std::process::id())).expect("names");
    let mut sc = Scenario::preset("S2").expect("preset");
    for p in [&mut sc.path.a, &mut sc.path.b] {
        p.delay_ms = delay_ms;
        p.jitter_ms = jitter_ms;
        p.loss_pct = 0.0;
    }
    let opts = UpOptions {
        delay: DelayChoice::Line,
        spin_us,
        ..Default::default()
    };
    let b = Testbed::up(names.clone(), &sc, &opts).expect("testbed up (run as root)");
    (names, b)
}

/// A plain veth pair between two namespaces: the baseline without any delay line.
struct Baseline {
    names: LabNames,
}

impl Baseline {
    fn up() -> Baseline {
        let names = LabNames::new(&format!("tbxbench{}-base-", std::process::id())).expect("names");
        tboxscope_lab::down(&names).expect("down");
        let (t, g) = (names.tbox_ns(), names.gateway_ns());
        for ns in [&t, &g] {
            sys::run("ip", &["netns", "add", ns]).expect("netns");
            sys::run_in(ns, "ip", &["link", "set", "lo", "up"]).expect("lo");
        }
        sys::run(
            "ip",
            &[
                "link", "add", "eth0", "netns", &t, "type", "veth", "peer", "name", "g0", "netns",
                &g,
            ],
        )
        .expect("veth");
        sys::run_in(&t, "ip", &["addr", "add", "10.40.0.2/24", "dev", "eth0"]).expect("addr");
        sys::run_in(&g, "ip", &["addr", "add", "10.40.0.1/24", "dev", "g0"]).expect("addr");
        sys::run_in(&t, "ip", &["link", "set", "eth0", "up"]).expect("up");
        sys::run_in(&g, "ip", &["link", "set", "g0", "up"]).expect("up");
        std::thread::sleep(Duration::from_millis(1500));
        Baseline { names }
    }
}

impl Drop for Baseline {
    fn drop(&mut self) {
        let _ = tboxscope_lab::down(&self.names);
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn run_probes(names: &LabNames, count: u64, rate: u64) -> (Vec<u64>, u64, f64) {
    let t0 = sys::mono_ns();
    let r = probe_path(
        names,
        PathId::A,
        Direction::Up,
        count,
        rate,
        100,
        Duration::from_millis(300),
    )
    .expect("probes");
    let secs = (sys::mono_ns() - t0) as f64 / 1e9;
    let mut d = r.delays_ns;
    d.sort_unstable();
    (d, r.sent, secs)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    println!("## lab delay line\n");
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "Machine load average at start: {}\n",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    // 1. Fidelity.
    {
        let (names, _b) = bed("fid", 40.0, 10.0, 0);
        let (d, sent, _) = run_probes(&names, 4000, 400);
        let s = DelaySummary::of(&d);
        println!(
            "Fidelity, path configured 40 ± 10 ms (normal), {} of {sent} probes at 400/s:\n",
            s.n
        );
        println!("| statistic | configured | achieved | achieved / configured |");
        println!("|---|---|---|---|");
        for (what, want, got) in [
            ("mean", 40.0, s.mean_ms),
            ("standard deviation", 10.0, s.sd_ms),
            ("P50", 40.0, s.p50_ms),
            ("P99", 40.0 + 2.326 * 10.0, s.p99_ms),
            ("P99.9", 40.0 + 3.090 * 10.0, s.p999_ms),
        ] {
            println!(
                "| {what} | {want:.2} ms | {got:.2} ms | {:.3} |",
                got / want
            );
        }
        println!();
    }
    // 2. Added error vs rate.
    let rates = [100u64, 1000, 5000, 10000, 20000];
    let base = Baseline::up();
    let mut base_p50 = Vec::new();
    for &rate in &rates {
        let (d, _, _) = run_probes(&base.names, (rate * 2).max(400), rate);
        base_p50.push(percentile(&d, 0.5));
    }
    drop(base);
    println!("Added error of a constant 10 ms line (error = achieved − 10 ms − baseline P50 of a plain veth pair at the same rate):\n");
    println!("| spin | rate (probes/s, achieved) | baseline P50 | P50 error | P99 error | max error | > 1 ms |");
    println!("|---|---|---|---|---|---|---|");
    for spin in [0u64, 200] {
        let (names, b) = bed(&format!("rate{spin}"), 10.0, 0.0, spin);
        let mut best = None;
        let mut failed = false;
        for (i, &rate) in rates.iter().enumerate() {
            if spin > 0 && rate > 1000 {
                break;
            }
            let (d, sent, secs) = run_probes(&names, (rate * 2).max(400), rate);
            let base = base_p50[i];
            let err: Vec<i64> = d
                .iter()
                .map(|x| *x as i64 - 10_000_000 - base as i64)
                .collect();
            let over = err.iter().filter(|e| **e > 1_000_000).count();
            let p = |q: f64| {
                let mut s = err.clone();
                s.sort_unstable();
                let k = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len().max(1));
                s.get(k - 1).copied().unwrap_or(0) as f64 / 1e6
            };
            let p99 = p(0.99);
            println!(
                "| {} µs | {rate} ({:.0}) | {:.3} ms | {:.3} ms | {:.3} ms | {:.3} ms | {:.2} % ({} of {} lost) |",
                spin,
                sent as f64 / secs,
                ms(base),
                p(0.5),
                p99,
                p(1.0),
                over as f64 * 100.0 / d.len().max(1) as f64,
                sent - d.len() as u64,
                sent
            );
            if p99 < 1.0 && d.len() as u64 * 100 >= sent * 99 && !failed {
                best = Some(rate);
            } else {
                failed = true;
            }
        }
        let stats = b.line_stats();
        drop(b);
        if spin == 0 {
            println!();
            println!(
                "Highest tested rate up to which every rate kept P99 added error < 1 ms (spin 0): {}",
                best.map_or("none".into(), |r| r.to_string())
            );
            println!("Line counters: {stats:?}\n");
        }
    }
}
