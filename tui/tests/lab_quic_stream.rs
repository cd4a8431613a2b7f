//! tboxscope measures the lab's `quic-stream` transport (quinn, every message back to back on
//! one bidirectional stream of each of two connections, one per path) as its peers saw it:
//! libpcap on both ends of both paths, QUIC decrypted with the run's key log, messages cut by
//! the lab's stated framing (`fixed:600`) and matched across the two connections. Checked
//! against the peers' ground truth; and the `tboxscope analyze` command `lab run --pcap`
//! prints for the run's captures gives the same figures. Needs root (network namespaces).
use std::process::Command;
use std::time::Duration;

use tboxscope::labcap::LabCapture;
use tboxscope_lab::peers::Transport;
use tboxscope_lab::run::{run, RunOptions};
use tboxscope_lab::{LabNames, Scenario};

#[test]
fn tboxscope_measures_quic_stream_as_its_peers_saw_it() {
    let names = LabNames::for_test("qsmeas").unwrap();
    let mut opts = RunOptions::new(names.clone());
    opts.duration = Duration::from_secs(4);
    opts.drain = Duration::from_secs(3);
    opts.transports = vec![Transport::QuicStream];
    let dir = tempfile::tempdir().unwrap();
    let mut capture = LabCapture::new(Some(dir.path().to_path_buf()));
    let result = run(&Scenario::preset("S2").unwrap(), &opts, &mut capture);
    let _ = tboxscope_lab::down(&names);
    let report = result.unwrap();
    let m = capture.take_measured().unwrap();
    println!("{report}");
    println!("{}", tboxscope::labcap::render_comparison(&report, &m));
    let t = &report.transports[0];
    let r = m
        .transports
        .iter()
        .find(|r| r.transport == "quic-stream")
        .unwrap();
    let ctx = format!("truth {t:?}\nmeasured {r:?}");
    assert_eq!(t.delivered, t.sent, "{ctx}");
    assert_eq!(r.messages, t.sent, "{ctx}");
    assert_eq!(r.flows.len(), 1, "{ctx}");
    assert!(r.duplication_pct.unwrap() >= 99.0, "{ctx}");
    // On the wire, never above the application's latency.
    let p50 = r.p50_ms.unwrap();
    assert!(p50 > 5.0 && p50 <= t.p50_ms + 1.0, "{ctx}");
    // The command `lab run --pcap DIR` prints for the captures: the same figures offline.
    let args = tboxscope::labcap::analyze_args(dir.path(), &opts);
    assert!(args.join(" ").contains("--framing fixed:600"), "{args:?}");
    let out = Command::new(env!("CARGO_BIN_EXE_tboxscope"))
        .arg("analyze")
        .args(&args)
        .args(["--json", "-"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let summary: serde_json::Value = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["type"] == "summary")
        .unwrap();
    let flows = summary["flows"].as_array().unwrap();
    let f = flows
        .iter()
        .find(|f| f["flow"] == r.flows[0].as_str())
        .unwrap_or_else(|| panic!("{:?} not in {flows:#?}", r.flows));
    let ctx = format!("offline {f}\nlive {r:?}");
    assert_eq!(f["messages"].as_u64(), Some(r.messages), "{ctx}");
    let dup = f["duplication"].as_f64().unwrap() * 100.0;
    assert!((dup - r.duplication_pct.unwrap()).abs() <= 0.5, "{ctx}");
    let offline_p50 = f["latency"]["p50_us"].as_f64().unwrap() / 1000.0;
    assert!((offline_p50 - p50).abs() <= 0.01 * p50 + 0.1, "{ctx}");
}
