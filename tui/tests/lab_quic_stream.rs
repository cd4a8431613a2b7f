//! tboxscope measures the lab's `quic-stream` transport (quinn, every message back to back on
//! one bidirectional stream of each of two connections, one per path) as its peers saw it:
//! libpcap on both ends of both paths, QUIC decrypted with the run's key log, messages cut by
//! the lab's stated framing (`fixed:600`) and matched across the two connections. Checked
//! against the peers' ground truth. Needs root (network namespaces).
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
    let mut capture = LabCapture::new(None);
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
}
