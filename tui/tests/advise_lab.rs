#![expect(clippy::unwrap_used)]
//! `advise` on real lab runs: the lab's scenarios run with the real KCP, QUIC and redundant
//! QUIC peers, captured by tboxscope at both ends of both paths; the advice made from that
//! capture must give the seed table's answer (S1, light loss without handovers: KCP; S4, a
//! 5 s handover: redundant sending), and each option's prediction must come within a stated
//! error of what the real transport then measured in the same run (the peers' own ground
//! truth, application to application). `tboxscope advise` of the run's four pcap files gives
//! the same recommendation. (The advice is taken from `tboxscope advise` of the run's pcap
//! files, the product's path; `lab run`'s own, from its live capture, is checked to exist.)
//! Beside the presets, scenarios of their own: S2 with a tight
//! uplink, 7.5 % random loss, and congestion loss under a rate limit. Needs root (network namespaces): `#[ignore]`d, run by `.ci/run`.
//!
//! The errors allowed, and why:
//! - P50: within 35 % + 10 ms. The replay draws each path's delay from the capture's own
//!   copies, so the centre is close; KCP's update interval and the peers' wake-ups add a few
//!   ms either way.
//! - P99 without an outage: within a factor of 3 (plus 20 ms) for KCP and redundant sending:
//!   1000 messages hold 10 samples above it, and the lab's loss is drawn afresh each run.
//!   QUIC on one path within a factor of 4 (plus 20 ms): quinn's own P99 on S2 was 210 ms in
//!   one run, 381, 542 and 594 ms in others (the prediction 172–176 ms): how far a run's
//!   losses cut quinn's window decides how long messages then wait in the sender, and that
//!   spread between runs of the same scenario is wider than 3× around any one figure. The
//!   prediction stays under quinn's typical tail on S2 (the model's known gap). QUIC's
//!   prediction keeps quinn's congestion window: without it S1's P99 came out at 62 ms
//!   against quinn's 163–207 ms (the window, cut by real losses and by packets the delay
//!   line's jitter reorders, holds messages in the sender); with it 104 ms against 164 ms,
//!   S2 176 ms against 234 ms.
//! - With the outage, single path: both the prediction and the truth hold a quarter of the
//!   messages for seconds; the prediction must say so (P99 ≥ 2 s) and stay within a factor of
//!   4 of the truth.
use std::path::Path;
use std::process::Command;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use probe_user::engine::advice::{self, Advice, Evidence, Limits, LossKind, OptionPrediction};
use tboxscope::labcap::{analyze_args, LabCapture};
use tboxscope_lab::peers::Transport;
use tboxscope_lab::report::TransportReport;
use tboxscope_lab::run::{run, RunOptions};
use tboxscope_lab::{LabNames, Scenario};

const RUN_S: u64 = 20;
const DRAIN_S: u64 = 20;

/// Runs `scenario` with KCP, QUIC and redundant QUIC, captured (pcaps into `dir`); returns the
/// truth rows, the evidence from the capture, and the run's options.
fn lab_run(
    tag: &str,
    scenario: &Scenario,
    dir: &Path,
) -> (Vec<TransportReport>, Evidence, RunOptions) {
    lab_run_for(tag, scenario, dir, RUN_S)
}

/// [`lab_run`] with `run_s` seconds of messages.
fn lab_run_for(
    tag: &str,
    scenario: &Scenario,
    dir: &Path,
    run_s: u64,
) -> (Vec<TransportReport>, Evidence, RunOptions) {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let names = LabNames::for_test(tag).unwrap();
    let mut opts = RunOptions::new(names.clone());
    opts.duration = Duration::from_secs(run_s);
    opts.drain = Duration::from_secs(DRAIN_S);
    opts.transports = vec![Transport::Kcp, Transport::Quic, Transport::QuicRedundant];
    let mut capture = LabCapture::new(Some(dir.to_path_buf()));
    let result = run(scenario, &opts, &mut capture);
    let _ = tboxscope_lab::down(&names);
    let report = result.unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let measured = capture.take_measured().unwrap();
    println!("{report}");
    // `lab run` prints the advice from its own capture: there is one.
    let own = advice::advise(measured.evidence.clone(), Limits::default());
    assert!(own.is_some(), "{:?}", measured.evidence);
    (report.transports, measured.evidence, opts)
}

/// [`lab_run`] of a preset, and `tboxscope advise` of its captures without limits.
fn advise_run(tag: &str, preset: &str, dir: &Path) -> (Vec<TransportReport>, Advice) {
    let (rows, _, opts) = lab_run(tag, &Scenario::preset(preset).unwrap(), dir);
    (rows, advise_cli(dir, &opts, &[]))
}

/// A scenario of two paths (A 40 ± 8 ms, B 25 ± 5 ms one-way) with this loss (%) and rate
/// limit (kbit/s) on each.
fn scenario(name: &str, loss: [f64; 2], rate_kbit: [Option<u32>; 2]) -> Scenario {
    let mut s = Scenario::preset("S1").unwrap();
    s.name = name.to_owned();
    s.description = format!("{name}: loss {loss:?} %, rate {rate_kbit:?} kbit/s");
    for (p, (l, r)) in [&mut s.path.a, &mut s.path.b]
        .into_iter()
        .zip(loss.into_iter().zip(rate_kbit))
    {
        p.loss_pct = l;
        p.rate_kbit = r;
    }
    s
}

/// The P50 and P99 of the options on path A (and of redundant sending) against what the real
/// transports measured.
fn predictions_hold(a: &Advice, rows: &[TransportReport]) {
    for (t, name) in [
        (advice::Transport::Kcp, "kcp"),
        (advice::Transport::Quic, "quic"),
        (advice::Transport::Redundant, "quic-redundant"),
    ] {
        let (o, r) = (option(a, t, "tbox-eth0"), truth(rows, name));
        println!(
            "{name}: predicted P50 {} P99 {} ms, measured P50 {} P99 {} ms; bandwidth {}× vs {}×",
            o.predicted_p50_ms,
            o.predicted_p99_ms,
            r.p50_ms,
            r.p99_ms,
            o.bandwidth_factor,
            r.amplification
        );
        p50_close(o, r);
        let factor = if t == advice::Transport::Quic {
            4.0
        } else {
            3.0
        };
        assert!(
            o.predicted_p99_ms <= factor * r.p99_ms + 20.0
                && r.p99_ms <= factor * o.predicted_p99_ms + 20.0,
            "{name}: P99 predicted {} ms, measured {} ms",
            o.predicted_p99_ms,
            r.p99_ms
        );
        assert!(
            (o.bandwidth_factor - r.amplification).abs() <= 0.35 * r.amplification,
            "{name}: bandwidth predicted {}×, measured {}×",
            o.bandwidth_factor,
            r.amplification
        );
    }
}

fn option<'a>(a: &'a Advice, t: advice::Transport, path: &str) -> &'a OptionPrediction {
    a.options
        .iter()
        .find(|o| o.transport == t && (o.paths.len() > 1 || o.paths[0] == path))
        .unwrap()
}

fn truth<'a>(rows: &'a [TransportReport], name: &str) -> &'a TransportReport {
    rows.iter().find(|r| r.transport == name).unwrap()
}

/// The option's P50 against the truth's.
fn p50_close(o: &OptionPrediction, t: &TransportReport) {
    let err = (o.predicted_p50_ms - t.p50_ms).abs();
    assert!(
        err <= 0.35 * t.p50_ms + 10.0,
        "{}: P50 predicted {} ms, measured {} ms",
        t.transport,
        o.predicted_p50_ms,
        t.p50_ms
    );
}

/// `tboxscope advise --json - OPTIONS` of the run's captures, with the options `lab run` prints
/// for them: the advice.
fn advise_cli(dir: &Path, opts: &RunOptions, options: &[&str]) -> Advice {
    let out = Command::new(env!("CARGO_BIN_EXE_tboxscope"))
        .arg("advise")
        .args(analyze_args(dir, opts))
        .args(options)
        .args(["--json", "-"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["type"], "advice");
    let a: Advice = serde_json::from_value(v).unwrap();
    print!("{}", advice::render(&a));
    a
}

#[test]
#[ignore = "needs root"]
fn light_loss_without_handovers_is_kcp() {
    let dir = tempfile::tempdir().unwrap();
    // S1's better path loses 0.3 %, near the table's 0.5 %: 1 000 messages would put it
    // above 0.5 % in about one run in five (3 expected losses, 5 seen); 6 000 in one in 250.
    let (rows, _, opts) = lab_run_for("advs1", &Scenario::preset("S1").unwrap(), dir.path(), 120);
    let a = advise_cli(dir.path(), &opts, &[]);
    assert_eq!(a.recommendation, advice::Transport::Kcp, "{:?}", a.reasons);
    predictions_hold(&a, &rows);
}

#[test]
#[ignore = "needs root"]
fn a_handover_is_redundant_sending() {
    let dir = tempfile::tempdir().unwrap();
    let (rows, a) = advise_run("advs4", "S4", dir.path());
    assert_eq!(
        a.recommendation,
        advice::Transport::Redundant,
        "{:?}",
        a.reasons
    );
    assert!(
        a.reasons[0].starts_with("tbox-eth0 was down 5."),
        "{:?}",
        a.reasons
    );
    let red = option(&a, advice::Transport::Redundant, "");
    let r = truth(&rows, "quic-redundant");
    println!(
        "redundant: predicted P50 {} P99 {} ms, measured P50 {} P99 {} ms",
        red.predicted_p50_ms, red.predicted_p99_ms, r.p50_ms, r.p99_ms
    );
    p50_close(red, r);
    assert!(
        red.predicted_p99_ms <= 3.0 * r.p99_ms + 20.0
            && r.p99_ms <= 3.0 * red.predicted_p99_ms + 20.0
    );
    for (t, name) in [
        (advice::Transport::Kcp, "kcp"),
        (advice::Transport::Quic, "quic"),
    ] {
        let (o, r) = (option(&a, t, "tbox-eth0"), truth(&rows, name));
        println!(
            "{name} on path A: predicted P99 {} ms, measured {} ms",
            o.predicted_p99_ms, r.p99_ms
        );
        assert!(o.predicted_p99_ms >= 2000.0, "{name}: {o:?}");
        assert!(
            o.predicted_p99_ms <= 4.0 * r.p99_ms && r.p99_ms <= 4.0 * o.predicted_p99_ms,
            "{name}: P99 predicted {} ms, measured {} ms",
            o.predicted_p99_ms,
            r.p99_ms
        );
    }
}

/// S2 (city: 2 % and 1.5 % loss): redundant sending, unless the uplink cannot carry two
/// copies (500 kbit/s for 50 × 600 B/s, ≈ 2.3× on the wire): then KCP.
#[test]
#[ignore = "needs root"]
fn city_loss_is_redundant_unless_the_uplink_is_tight() {
    let dir = tempfile::tempdir().unwrap();
    let (rows, _, opts) = lab_run("advs2", &Scenario::preset("S2").unwrap(), dir.path());
    let free = advise_cli(dir.path(), &opts, &[]);
    assert_eq!(
        free.recommendation,
        advice::Transport::Redundant,
        "{:?}",
        free.reasons
    );
    predictions_hold(&free, &rows);
    let tight = advise_cli(dir.path(), &opts, &["--uplink-kbps", "500"]);
    assert_eq!(
        tight.recommendation,
        advice::Transport::Kcp,
        "{:?}",
        tight.reasons
    );
    assert!(
        tight
            .reasons
            .iter()
            .any(|r| r.contains("of the 500 kbit/s uplink")),
        "{:?}",
        tight.reasons
    );
}

/// S3 (weak signal: 5 % and 2.5 %): the better path's loss is in the 0.5–5 % band: redundant.
#[test]
#[ignore = "needs root"]
fn weak_signal_is_redundant() {
    let dir = tempfile::tempdir().unwrap();
    let (rows, a) = advise_run("advs3", "S3", dir.path());
    assert_eq!(
        a.recommendation,
        advice::Transport::Redundant,
        "{:?}",
        a.reasons
    );
    let r = option(&a, advice::Transport::Redundant, "");
    p50_close(r, truth(&rows, "quic-redundant"));
}

/// 7.5 % random loss on both paths, no outage: KCP (the seed's 5–10 % row, at its middle: 1 000
/// messages measure a path's loss to ±0.8 % (one standard deviation), and the path KCP does
/// best on tends to be the one that drew fewer losses; at 7 % one CI run measured 4.9 %).
#[test]
#[ignore = "needs root"]
fn heavy_random_loss_is_kcp() {
    let dir = tempfile::tempdir().unwrap();
    let (rows, _, opts) = lab_run(
        "advl6",
        &scenario("L7", [7.5, 7.5], [None, None]),
        dir.path(),
    );
    let a = advise_cli(dir.path(), &opts, &[]);
    assert_eq!(a.recommendation, advice::Transport::Kcp, "{:?}", a.reasons);
    p50_close(
        option(&a, advice::Transport::Kcp, "tbox-eth0"),
        truth(&rows, "kcp"),
    );
}

/// Path A limited to 600 kbit/s under the three transports' ≈ 870 kbit/s (tbf): its copies
/// wait in a standing queue, or are lost when it is full — congestion — and the advice is
/// QUIC.
#[test]
#[ignore = "needs root"]
fn congestion_under_a_rate_limit_is_quic() {
    let dir = tempfile::tempdir().unwrap();
    let (_, _, opts) = lab_run(
        "advcg",
        &scenario("CG", [0.0, 0.0], [Some(600), Some(2000)]),
        dir.path(),
    );
    let a = advise_cli(dir.path(), &opts, &[]);
    let path_a = a
        .evidence
        .paths
        .iter()
        .find(|p| p.path == "tbox-eth0")
        .unwrap();
    assert_eq!(path_a.loss_kind, LossKind::Congestion, "{path_a:?}");
    assert_eq!(a.recommendation, advice::Transport::Quic, "{:?}", a.reasons);
}
