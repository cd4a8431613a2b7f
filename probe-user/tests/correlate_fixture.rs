//! Decoded fixture packets reach the engine as observations.
use std::path::Path;

use probe_user::analyze::Analyzer;
use probe_user::correlate::Correlator;
use probe_user::dissect::DissectConfig;
use tboxscope_engine::Config;

const KCP_FIXTURE: &str = "../../shared/fixtures/ndpi-kcp.pcap";

#[test]
fn kcp_fixture_segments_become_engine_flows() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(KCP_FIXTURE);
    let mut analyzer = Analyzer::new(DissectConfig::default());
    let mut correlator = Correlator::new(Config::default());
    let mut last = (0u64, 0u64);
    let mut fed = 0u64;
    analyzer
        .run_file(&path, &mut |r| {
            let first = (r.file.len() as u64, r.frame) != last;
            last = (r.file.len() as u64, r.frame);
            correlator.observe(r.path, r.data.len() as u32, first, r.packet);
            fed += 1;
            Ok::<(), ()>(())
        })
        .unwrap()
        .unwrap();
    assert_eq!(fed, analyzer.stats().kcp_segments);
    let end = correlator.engine().now_ns();
    let summary = correlator.engine_mut().finish(end);
    let text = tboxscope_engine::report::render(&summary);
    println!("{text}");
    assert!(text.contains("kcp"), "{text}");
}
