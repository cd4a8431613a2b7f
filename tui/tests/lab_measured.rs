#![expect(clippy::unwrap_used)]
//! tboxscope measures a real lab run itself — libpcap on both ends of both paths inside the
//! lab's namespaces, QUIC decrypted with the run's key log, the eBPF TCP probes on the TCP
//! baseline's socket, the engine — and its figures are checked against the peers' own ground
//! truth: S4 (city loss, path A down for 5 s in the middle), 12 s of messages, once with every
//! UDP transport and once with the TCP baseline (one run after the other: two labs at once on
//! a small machine would measure the machine). Needs root (network namespaces, eBPF).
//!
//! Why tolerances where there are any:
//! - Latency: the peers time a message from the application's send call to the receiving
//!   application; tboxscope from the first copy on the wire to the first arrival on the wire.
//!   The wire figure is never larger (same kernel clock); it is smaller by the time a message
//!   waits in the transport before its first transmission — up to KCP's 10 ms update
//!   interval on each end for KCP, about a millisecond for QUIC — and, for single-path
//!   transports, by any backlog queued behind the outage (not visible on the wire at all).
//! - Amplification: the lab counts IP bytes with nftables, tboxscope whole frames (14 more
//!   bytes per packet), over the messages delivered.
//!
//! The TCP run's gateway capture is also analysed alone with nothing stated: its handshake
//! must place it at the server's end, and its stalls be those the live run found.
use std::path::Path;
use std::process::Command;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tboxscope::labcap::{LabCapture, Measured};
use tboxscope_lab::peers::{TcpCc, Transport};
use tboxscope_lab::run::{run, RunOptions, RunReport};
use tboxscope_lab::{LabNames, Scenario};

/// Seconds of messages, and of draining after them, in each run. The drain covers one lost
/// retransmission after the outage: TCP's RTO is backed off to ~4.5 s when path A comes back
/// (retry near 12 s); if that retry is lost too (2 % loss), the next comes ~9 s later, near
/// 21 s. With 8 s of drain the run ended before it (seen once in CI: 174 of 600 delivered).
const RUN_S: u64 = 12;
const DRAIN_S: u64 = 20;

/// Runs S4 for 12 s with `transports`, captured by tboxscope (the four captures also written
/// to `pcap_dir`); one run at a time.
fn run_s4(tag: &str, transports: Vec<Transport>, pcap_dir: Option<&Path>) -> (RunReport, Measured) {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let names = LabNames::for_test(tag).unwrap();
    let mut opts = RunOptions::new(names.clone());
    opts.duration = Duration::from_secs(RUN_S);
    opts.drain = Duration::from_secs(DRAIN_S);
    opts.transports = transports;
    // The 5 s outage is centred: from 3.5 s to 8.5 s.
    let scenario = Scenario::preset("S4").unwrap();
    let mut capture = LabCapture::new(pcap_dir.map(Path::to_path_buf));
    let result = run(&scenario, &opts, &mut capture);
    let _ = tboxscope_lab::down(&names);
    let report = result.unwrap();
    let measured = capture.take_measured().unwrap();
    println!("{report}");
    println!(
        "{}",
        tboxscope::labcap::render_comparison(&report, &measured)
    );
    (report, measured)
}

#[test]
fn tboxscope_measures_what_the_peers_saw() {
    let dir = tempfile::tempdir().unwrap();
    let (report, m) = &run_s4(
        "measured",
        vec![
            Transport::Kcp,
            Transport::KcpDual,
            Transport::Quic,
            Transport::QuicRedundant,
        ],
        Some(dir.path()),
    );
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    for t in &report.transports {
        let r = m
            .transports
            .iter()
            .find(|r| r.transport == t.transport)
            .unwrap();
        let redundant = t.paths.len() > 1;
        let ctx = format!("{}: truth {t:?}\nmeasured {r:?}", t.transport);
        // Messages: every message reached the wire and was counted once (a redundant message's
        // two copies are one message; a QUIC message whose first STREAM frame was cut short,
        // or came after quinn's IMMEDIATE_ACK, is named all the same).
        assert_eq!(r.messages, t.sent, "{ctx}");
        if redundant {
            assert_eq!(r.flows.len(), 1, "{ctx}");
        }
        // Per-message latency: on the wire, never above the application's, and for the
        // redundant transports (no backlog) close to it.
        let p50 = r.p50_ms.unwrap_or(0.0);
        assert!(p50 > 5.0 && p50 <= t.p50_ms + 1.0, "{ctx}");
        if redundant {
            let slack = if t.transport.starts_with("kcp") {
                12.0
            } else {
                6.0
            };
            assert!(p50 >= t.p50_ms - slack, "{ctx}");
            // Duplication: every message was carried on both paths (copies held through the
            // outage arrive after it, as the peers saw).
            let dup = r.duplication_pct.unwrap();
            assert!(dup >= 99.0, "{ctx}");
        }
        // Amplification: the same bytes counted two ways.
        let amp = r.amplification.unwrap();
        assert!(
            (amp - t.amplification).abs() <= 0.10 * t.amplification,
            "{ctx}"
        );
        if t.transport == "quic-redundant" {
            assert!((1.8..=3.2).contains(&amp), "{ctx}");
        }
    }
    // The outage: one, on path A, as long as the injected one.
    let injected = injected_outage_s(report);
    assert_eq!(m.outages.len(), 1, "{:#?}", m.outages);
    let o = &m.outages[0];
    assert_eq!(o.path, "tbox-eth0");
    let d = o.duration_s.unwrap();
    assert!(
        (d - injected).abs() <= 0.3,
        "detected {d} s, injected {injected} s"
    );
    // Each redundant transport's messages of those 5 s came over path B alone (50/s each).
    assert!(o.carried_by_others >= 2 * 240, "{o:?}");
    offline_analysis_agrees(dir.path(), m);
    kcp_begun_past_a_hole(dir.path());
}

/// The gateway's capture of path A (stated to be the gateway's: the lab's namespaces are one
/// hop apart, their TTLs alike) cut to begin at the first KCP segment that arrived past a
/// hole and opened a stall of 20 ms or more, with no stall of its conversation under way:
/// the cut capture has
/// the same stall (missing sn, start, end, messages and bytes held), which only the
/// receiver's first ACK (its una) shows.
fn kcp_begun_past_a_hole(dir: &Path) {
    let whole_pcap = dir.join("gateway-g0.pcap");
    let mid_pcap = dir.join("gateway-mid.pcap");
    let host = |label: &str| vec!["--host".to_owned(), format!("{label}=gateway")];
    let mut args = host("gateway-g0");
    args.push(whole_pcap.display().to_string());
    let whole = analyze(&args);
    let stall = |v: &serde_json::Value| {
        (
            v["flow"].as_str().unwrap_or_default().to_owned(),
            v["missing"].as_str().unwrap_or_default().to_owned(),
            v["start_ns"].as_u64().unwrap_or(0),
            v["end_ns"].as_u64(),
            v["messages_held"].as_u64(),
            v["bytes_held"].as_u64(),
        )
    };
    let kcp: Vec<_> = whole
        .iter()
        .filter(|v| v["type"] == "hol_incident" && v["protocol"] == "kcp")
        .map(stall)
        .collect();
    // Frame numbers by capture time (ns).
    let out = Command::new("tshark")
        .arg("-r")
        .arg(&whole_pcap)
        .args([
            "-T",
            "fields",
            "-e",
            "frame.number",
            "-e",
            "frame.time_epoch",
        ])
        .output()
        .expect("tshark runs (cargo xtask setup installs it)");
    let frames: Vec<(u64, u64)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (n, t) = l.split_once('\t')?;
            let (s, f) = t.trim().split_once('.')?;
            let f = format!("{f:0<9}");
            Some((
                n.parse().ok()?,
                s.parse::<u64>().ok()? * 1_000_000_000 + f[..9].parse::<u64>().ok()?,
            ))
        })
        .collect();
    let under_way = |s: &(String, String, u64, Option<u64>, Option<u64>, Option<u64>)| {
        kcp.iter()
            .any(|o| o.0 == s.0 && o.2 < s.2 && o.3.is_none_or(|e| e >= s.2))
    };
    // Long enough for the receiver's first ACK to leave before it ends (KCP acknowledges at
    // its 10 ms update interval): a shorter one, reordering, is over before any ACK says so.
    let long = |s: &(String, String, u64, Option<u64>, Option<u64>, Option<u64>)| {
        s.3.is_some_and(|e| e >= s.2 + 20_000_000)
    };
    let (target, frame) = kcp
        .iter()
        .filter(|s| !under_way(s) && long(s))
        .find_map(|s| Some((s.clone(), frames.iter().find(|f| f.1 == s.2)?.0)))
        .unwrap_or_else(|| panic!("no KCP stall to cut at: {kcp:#?}"));
    let cut = Command::new("editcap")
        .arg("-r")
        .arg(&whole_pcap)
        .arg(&mid_pcap)
        .arg(format!("{frame}-{}", frames.len()))
        .status()
        .unwrap();
    assert!(cut.success());
    let mut args = host("gateway-mid");
    args.push(mid_pcap.display().to_string());
    let mid: Vec<_> = analyze(&args)
        .iter()
        .filter(|v| v["type"] == "hol_incident" && v["protocol"] == "kcp")
        .map(stall)
        .collect();
    assert!(
        mid.contains(&target),
        "cut at frame {frame}: {target:?} not among {mid:#?}"
    );
}

/// The JSON Lines of `tboxscope analyze ARGS --json -`.
fn analyze(args: &[String]) -> Vec<serde_json::Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_tboxscope"))
        .arg("analyze")
        .args(args)
        .args(["--json", "-"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `tboxscope analyze` of the run's four captures, with the options `lab run` prints for them,
/// finds by itself which captures show the two ends of each path and gives the figures the
/// live capture gave: per transport the same messages and duplication, and the same outage.
fn offline_analysis_agrees(dir: &Path, live: &Measured) {
    let files: Vec<String> = ["tbox-eth0", "gateway-g0", "tbox-eth1", "gateway-g1"]
        .iter()
        .map(|f| dir.join(format!("{f}.pcap")).display().to_string())
        .collect();
    let options = tboxscope::labcap::analyze_options(RUN_S as f64, DRAIN_S as f64, None);
    let keylog = dir.join("quic-keylog.txt").display().to_string();
    let mut args: Vec<String> = options.split(' ').map(str::to_owned).collect();
    args.extend(["--keylog".to_owned(), keylog]);
    args.extend(files);
    let lines = analyze(&args);
    let summary = lines.iter().find(|v| v["type"] == "summary").unwrap();
    let flows = summary["flows"].as_array().unwrap();
    for t in &live.transports {
        for name in &t.flows {
            let f = flows
                .iter()
                .find(|f| f["flow"] == name.as_str())
                .unwrap_or_else(|| panic!("{name} not in {flows:#?}"));
            let ctx = format!("{name}: offline {f}\nlive {t:?}");
            assert_eq!(f["messages"].as_u64(), Some(t.messages), "{ctx}");
            if let Some(dup) = t.duplication_pct {
                let offline = f["duplication"].as_f64().unwrap() * 100.0;
                assert!((offline - dup).abs() <= 0.5, "{ctx}");
            }
            // The same latency (per-flow histograms: 2 significant digits).
            let p50_ms = f["latency"]["p50_us"].as_f64().unwrap() / 1000.0;
            let live_p50 = t.p50_ms.unwrap();
            assert!((p50_ms - live_p50).abs() <= 0.01 * live_p50 + 0.1, "{ctx}");
        }
    }
    let outages = summary["outages"].as_array().unwrap();
    assert_eq!(outages.len(), live.outages.len(), "{outages:#?}");
    let (offline, live) = (&outages[0], &live.outages[0]);
    assert_eq!(offline["path"], live.path.as_str());
    let d = offline["duration_ns"].as_f64().unwrap() / 1e9;
    assert!(
        (d - live.duration_s.unwrap()).abs() <= 0.05,
        "{offline} vs {live:?}"
    );
}

/// The outage injected on path A, seconds.
fn injected_outage_s(report: &RunReport) -> f64 {
    report
        .timeline
        .iter()
        .find(|e| e.kind == "outage_start")
        .zip(report.timeline.iter().find(|e| e.kind == "outage_end"))
        .map(|(a, b)| (b.unix_ns - a.unix_ns) as f64 / 1e9)
        .unwrap()
}

#[test]
fn tboxscope_measures_the_tcp_baseline() {
    let dir = tempfile::tempdir().unwrap();
    let (report, m) = &run_s4(
        "measuredtcp",
        vec![Transport::Tcp(TcpCc::Default)],
        Some(dir.path()),
    );
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let t = report
        .transports
        .iter()
        .find(|t| t.transport == "tcp")
        .unwrap();
    let r = m.transports.iter().find(|r| r.transport == "tcp").unwrap();
    let k = r.tcp.as_ref().unwrap();
    let incidents: Vec<_> = m
        .summary
        .hol_incidents
        .iter()
        .filter(|i| r.flows.contains(&i.flow))
        .collect();
    let ctx = format!("truth {t:?}\nmeasured {r:?}\nHOL incidents {incidents:#?}");
    // Messages: the stream the T-Box sent splits into exactly the messages generated, and
    // every one reached the gateway, as the receiving application saw.
    assert_eq!(r.messages, t.sent, "{ctx}");
    assert_eq!(k.delivered, t.delivered, "{ctx}");
    assert_eq!(r.flows.len(), 1, "{ctx}");
    // Latency on the wire: never above the application's (which adds the backlog queued in
    // the socket during the outage), and the messages held behind the outage make the tail.
    // tboxscope's percentiles are the engine's per-flow histogram's bucket edges, as for the
    // other transports' rows (2 significant digits: at most 1 % above the sample).
    let (p50, p999) = (r.p50_ms.unwrap(), r.p999_ms.unwrap());
    assert!(p50 > 5.0 && p50 <= t.p50_ms * 1.01 + 1.0, "{ctx}");
    let outage = injected_outage_s(report);
    assert!(p999 >= (outage - 1.0) * 1000.0, "{ctx}");
    assert!(p999 <= t.p999_ms * 1.01 + 1.0, "{ctx}");
    // The kernel's view (eBPF): path A down for 5 s makes the RTO back off at least twice
    // (200 → 400 → 800 ms …), with timeout retransmissions the T-Box's capture also shows.
    assert!(k.probes.contains("hooks attached"), "{ctx}");
    assert!(k.max_backoff >= 2, "{ctx}");
    assert!(k.timeout_retransmits >= 2, "{ctx}");
    assert!(k.retransmits >= k.timeout_retransmits, "{ctx}");
    assert!(k.wire_retransmits >= 2, "{ctx}");
    // The kernel's retransmissions and the T-Box's capture's joined: they are the same ones.
    let join = k.join.as_ref().expect("the kernel's and the wire's joined");
    assert!(join.matched >= 2, "{ctx}");
    // The head-of-line stall of the outage: the first segment sent into it holds the stream
    // from its first transmission until a copy reaches the gateway after the path is back.
    // No hold is longer than the message carrying the segment took from application to
    // application (the held message's wire time is inside it), but for the ACK that ends it:
    // the gateway's kernel may send it after handing the data to the application (delayed
    // ACK, 40–200 ms on Linux; seen once 7 ms after the truth's largest latency).
    let stall = k.longest_hol_stall_ms.unwrap();
    assert!(stall >= (outage - 0.5) * 1000.0, "{ctx}");
    assert!(stall <= t.max_ms + 200.0, "{ctx}");
    assert!(k.total_hol_stall_ms >= stall, "{ctx}");
    // Amplification: the same bytes counted two ways (frames vs IP bytes).
    let amp = r.amplification.unwrap();
    assert!(
        (amp - t.amplification).abs() <= 0.10 * t.amplification,
        "{ctx}"
    );
    if let Ok(keep) = std::env::var("TBX_KEEP_PCAP") {
        for l in ["gateway-g0", "gateway-g1", "tbox-eth0", "tbox-eth1"] {
            let _ = std::fs::copy(
                dir.path().join(format!("{l}.pcap")),
                format!("{keep}.{l}.pcap"),
            );
        }
    }
    tcp_stalls_offline(dir.path(), &incidents);
}

/// The TCP baseline's path analysed offline with nothing stated. The gateway's capture alone:
/// its handshake (the SYN-ACK answering at once, the client's ACK a round trip later) places
/// it at the server's end, so the T-Box's data arrives there and its stalls are the ones the
/// live run found from the same arrivals. The path's two ends: each capture placed by the
/// handshake it saw, the same stalls, from the first segment on.
fn tcp_stalls_offline(dir: &Path, live: &[&probe_user::engine::HolIncident]) {
    let label = ["gateway-g0", "gateway-g1"]
        .into_iter()
        .max_by_key(|l| std::fs::metadata(dir.join(format!("{l}.pcap"))).map_or(0, |m| m.len()))
        .unwrap();
    let pcap = |l: &str| dir.join(format!("{l}.pcap")).display().to_string();
    let lines = analyze(&[pcap(label)]);
    let said = inferences(&lines);
    assert!(
        said.contains(&format!("`{label}` is on the gateway: at the server's end")),
        "{said}"
    );
    let mut both: Vec<String> = live
        .iter()
        .filter(|i| i.stall_from == Some(probe_user::engine::HolStallFrom::ReceiverArrivals))
        .map(|i| i.missing.clone())
        .collect();
    both.sort();
    let alone = arrival_stalls(&lines);
    println!("{label} alone: {said}; stalls {alone:?}, live {both:?}");
    assert_eq!(alone, both, "{said}");
    // The same path's two ends, given with nothing stated: each capture is placed by the
    // handshake it saw, and the stalls are the live run's from the first segment on.
    let tbox = if label == "gateway-g0" {
        "tbox-eth0"
    } else {
        "tbox-eth1"
    };
    let lines = analyze(&[pcap(tbox), pcap(label)]);
    let said = inferences(&lines);
    for placed in [
        format!("`{tbox}` is on the T-Box: at the client's end"),
        format!("`{label}` is on the gateway: at the server's end"),
    ] {
        assert!(said.contains(&placed), "{said}");
    }
    let ends = arrival_stalls(&lines);
    println!("{tbox} and {label}: {said}; stalls {ends:?}");
    assert_eq!(ends, both, "{said}");
}

/// What an analysis said it inferred (its summary's health).
fn inferences(lines: &[serde_json::Value]) -> String {
    let summary = lines.iter().find(|r| r["type"] == "summary").unwrap();
    summary["health"]["inferences"].to_string()
}

/// The missing sequence numbers of an analysis's TCP stalls from the wire, sorted; every one
/// measured between the receiver's arrivals.
fn arrival_stalls(lines: &[serde_json::Value]) -> Vec<String> {
    let stalls: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|r| r["type"] == "hol_incident" && r["source"] == "wire")
        .collect();
    assert!(
        stalls
            .iter()
            .all(|i| i["stall_from"] == "receiver_arrivals"),
        "{stalls:#?}"
    );
    let mut v: Vec<String> = stalls
        .iter()
        .map(|i| i["missing"].as_str().unwrap_or_default().to_owned())
        .collect();
    v.sort();
    v
}
