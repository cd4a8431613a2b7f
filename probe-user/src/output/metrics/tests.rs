use tboxscope_engine::snapshot::HolTotals;
use tboxscope_engine::snapshot::{
    AmplificationView, PathShare, PathView, Percentiles, RedundancyView, Snapshot,
    TcpRetransmitCounts, TcpSocketView,
};
use tboxscope_engine::{HolProtocol, TcpFigures};

use super::*;

fn snapshot(flows: usize) -> Snapshot {
    let mut s = Snapshot {
        ts_ns: 1_700_000_000_500_000_000,
        ..Snapshot::default()
    };
    for (label, up) in [("eth0", false), ("eth1", true)] {
        s.paths.push(PathView {
            label: label.to_owned(),
            up,
            packets: 10,
            bytes: 6000,
            latency: Percentiles {
                count: 4,
                mean_us: 30_000.0,
                ..Percentiles::default()
            },
            latency_buckets: vec![(1_000, 0), (20_000, 1), (50_000, 4)],
            outages: 1,
            outage_total_ns: 5_016_000_000,
            tcp_retransmits: TcpRetransmitCounts {
                fast: 29,
                rto: 5,
                ..TcpRetransmitCounts::default()
            },
            ..PathView::default()
        });
    }
    for i in 0..flows {
        let flow = format!("kcp conv {i}");
        s.redundancy.push(RedundancyView {
            flow: flow.clone(),
            messages: 100 + i as u64,
            on_all_paths: 50,
            paths: vec![PathShare {
                path: "eth1".to_owned(),
                wins: 7,
                ..PathShare::default()
            }],
            ..RedundancyView::default()
        });
        s.amplification.push(AmplificationView {
            flow,
            wire_bytes: 400,
            unique_payload_bytes: 100,
            ..AmplificationView::default()
        });
    }
    s.flows.tcp.push(TcpSocketView {
        socket: "10.0.0.1:40000 → 10.0.1.1:443".to_owned(),
        path: "eth0".to_owned(),
        figures: TcpFigures {
            rto_us: 3_200_000,
            backoff: 4,
            ..TcpFigures::default()
        },
        ..TcpSocketView::default()
    });
    s.health.pcap_dropped = 3;
    s.health.tcp_hook_runs_skipped = 2;
    s.health.tcp_retrans_unrecorded = 3;
    s.health.tcp_cong_changes_late = 1;
    s.health.late_copies = 54;
    s.health.held_messages = 87;
    s.health.held_too_long = 2;
    s.health.regrouped_messages = 1;
    s.hol = vec![(
        HolProtocol::Tcp,
        HolTotals {
            stalls: 8,
            stall_ns: 10_651_000_000,
        },
    )];
    s
}

fn text(s: &Snapshot, format: Format, max_flows: usize) -> String {
    let opts = MetricsOptions {
        max_flows,
        tbox_id: Some("vin-\"7\"".to_owned()),
        version: "0.1.0".to_owned(),
    };
    render(&families(&Figures::from(s), &opts), format)
}

#[test]
fn prometheus_text_has_paths_flows_kernel_and_health() {
    let t = text(&snapshot(2), Format::Prometheus, 32);
    for want in [
        "# TYPE tboxscope_path_latency_seconds histogram\n",
        "tboxscope_path_latency_seconds_bucket{path=\"eth0\",le=\"0.001\"} 0\n",
        "tboxscope_path_latency_seconds_bucket{path=\"eth0\",le=\"0.05\"} 4\n",
        "tboxscope_path_latency_seconds_bucket{path=\"eth0\",le=\"+Inf\"} 4\n",
        "tboxscope_path_latency_seconds_sum{path=\"eth0\"} 0.12\n",
        "tboxscope_path_latency_seconds_count{path=\"eth0\"} 4\n",
        "# TYPE tboxscope_path_bytes_total counter\n",
        "tboxscope_path_bytes_total{path=\"eth1\"} 6000\n",
        "tboxscope_path_up{path=\"eth0\"} 0\n",
        "tboxscope_path_outages_total{path=\"eth0\"} 1\n",
        "tboxscope_path_outage_seconds_total{path=\"eth0\"} 5.016\n",
        "tboxscope_flow_duplication_ratio{flow=\"kcp conv 1\"} 0.49504950495049505\n",
        "tboxscope_flow_wins_total{flow=\"kcp conv 0\",path=\"eth1\"} 7\n",
        "tboxscope_flow_amplification_ratio{flow=\"kcp conv 0\"} 4\n",
        "tboxscope_flows_folded 0\n",
        "tboxscope_tcp_retransmits_total{path=\"eth0\",kind=\"rto\"} 5\n",
        "tboxscope_tcp_rto_seconds{path=\"eth0\",socket=\"10.0.0.1:40000 → 10.0.1.1:443\"} 3.2\n",
        "tboxscope_tcp_backoff_level{path=\"eth0\",socket=\"10.0.0.1:40000 → 10.0.1.1:443\"} 4\n",
        "tboxscope_capture_drops_total{stage=\"libpcap\"} 3\n",
        "tboxscope_capture_drops_total{stage=\"tcp_hook_skipped\"} 2\n",
        "# TYPE tboxscope_tcp_retransmits_unrecorded_total counter\n",
        "tboxscope_tcp_retransmits_unrecorded_total 3\n",
        "# TYPE tboxscope_tcp_cong_changes_seen_late_total counter\n",
        "tboxscope_tcp_cong_changes_seen_late_total 1\n",
        "# TYPE tboxscope_late_copies_total counter\n",
        "tboxscope_late_copies_total 54\n",
        "tboxscope_messages_held_total 87\n",
        "tboxscope_messages_held_too_long_total 2\n",
        "tboxscope_messages_regrouped_total 1\n",
        "tboxscope_hol_stalls_total{protocol=\"tcp\"} 8\n",
        "tboxscope_hol_stall_seconds_total{protocol=\"tcp\"} 10.651\n",
        "# TYPE tboxscope_build_info gauge\n",
        "tboxscope_build_info{version=\"0.1.0\",tbox_id=\"vin-\\\"7\\\"\"} 1\n",
        "tboxscope_engine_time_seconds 1700000000.5\n",
    ] {
        assert!(t.contains(want), "{want:?} missing in\n{t}");
    }
    assert!(!t.contains("# EOF"));
}

#[test]
fn openmetrics_names_families_without_suffixes_and_ends_with_eof() {
    let t = text(&snapshot(1), Format::OpenMetrics, 32);
    for want in [
        "# TYPE tboxscope_path_bytes counter\n# UNIT tboxscope_path_bytes bytes\n",
        "tboxscope_path_bytes_total{path=\"eth0\"} 6000\n",
        "# TYPE tboxscope_build info\n",
        "# UNIT tboxscope_path_latency_seconds seconds\n",
    ] {
        assert!(t.contains(want), "{want:?} missing in\n{t}");
    }
    assert!(t.ends_with("# EOF\n"));
    assert_eq!(
        Format::from_accept("application/openmetrics-text;version=1.0.0,text/plain;q=0.5"),
        Format::OpenMetrics
    );
    assert_eq!(Format::from_accept("text/plain"), Format::Prometheus);
}

/// Flows past the limit are one `_folded` series whose ratios are those of their sums, and
/// how many were folded is counted.
#[test]
fn flows_beyond_the_limit_are_folded_and_counted() {
    let t = text(&snapshot(40), Format::Prometheus, 32);
    let flows = t
        .lines()
        .filter(|l| l.starts_with("tboxscope_flow_messages_total{"))
        .count();
    assert_eq!(flows, 33, "{t}");
    assert!(t.contains("tboxscope_flows_folded 8\n"), "{t}");
    // The 8 least busy flows: conv 0..7, 100..107 messages each.
    assert!(
        t.contains("tboxscope_flow_messages_total{flow=\"_folded\"} 828\n"),
        "{t}"
    );
    assert!(
        t.contains("tboxscope_flow_wins_total{flow=\"_folded\",path=\"eth1\"} 56\n"),
        "{t}"
    );
    assert!(
        t.contains("tboxscope_flow_amplification_ratio{flow=\"_folded\"} 4\n"),
        "{t}"
    );
    assert!(!t.contains("flow=\"kcp conv 7\""), "{t}");
    assert!(t.contains("flow=\"kcp conv 8\""), "{t}");
}

#[test]
fn textfile_is_replaced_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tboxscope.prom");
    std::fs::write(&path, "old").unwrap();
    let s = snapshot(1);
    write_textfile(
        &path,
        &families(&Figures::from(&s), &MetricsOptions::default()),
    )
    .unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("# HELP tboxscope_build_info"), "{text}");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["tboxscope.prom"], "no temporary file left");
    assert!(write_textfile(&dir.path().join("missing/x.prom"), &[]).is_err());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}
