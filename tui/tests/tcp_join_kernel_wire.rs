//! As root: real kernel TCP between two namespaces, `tboxscope capture --json` recording the
//! kernel's view (eBPF) while two packet captures run: tcpdump on the sender's veth (before
//! the loss) and an NFLOG capture in the receiver's namespace of what passed its input filter
//! (behind the loss: nftables drops at priority 0, logs what is left at priority 10).
//! `tboxscope capture --json` in the sender's namespace joins its packets with the probes' events
//! live; `tboxscope analyze CAPTURE kernel.jsonl` joins them: the sender-side capture agrees with
//! the kernel on every retransmission; the capture behind the loss misses exactly the resends
//! the blackout swallowed (`not_on_wire`) and sees the one that got through as a first copy
//! (`original_not_captured`).
#![expect(clippy::unwrap_used)] // test helpers outside #[test] fns
#[expect(dead_code, reason = "each test uses some of the shared helpers")]
mod tcp_common;

use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use tcp_common::*;

const NFLOG_GROUP: u16 = 7;

/// Waits until the sender has nothing unacknowledged and no backoff.
fn wait_acked(net: &NetnsPair, limit: Duration) {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        let out = Command::new("ip")
            .args(["netns", "exec", &net.a, "ss", "-tinH", "dport", "="])
            .arg(net.port.to_string())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let unacked = text
            .split_whitespace()
            .find_map(|t| t.strip_prefix("unacked:"))
            .is_some();
        if SsInfo::parse(&text).is_some_and(|i| i.backoff == 0) && !unacked {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `tboxscope analyze CAPTURE KERNEL --json -`: every line.
fn analyze(capture: &Path, kernel: &Path) -> Vec<Value> {
    analyze_json(&[capture, kernel])
}

/// The join's figures for the data sent from `local`, and its disagreement records.
fn joined<'a>(lines: &'a [Value], local: &str) -> (Value, Vec<&'a Value>) {
    let summary = lines.iter().rfind(|l| l["type"] == "summary").unwrap();
    let dirs = summary["tcp_join"]["directions"].as_array().unwrap();
    let mine: Vec<&Value> = dirs.iter().filter(|d| d["src"] == local).collect();
    assert_eq!(mine.len(), 1, "{dirs:?}");
    let records = lines
        .iter()
        .filter(|l| l["type"] == "tcp_disagreement" && l["src"] == local)
        .collect();
    (mine[0].clone(), records)
}

fn n(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"))
}

/// The only disagreements of a capture before the loss: the resends with no kernel record.
fn assert_only_unrecorded(disagreements: &[&Value], missed: u64) {
    assert_eq!(disagreements.len() as u64, missed, "{disagreements:?}");
    assert!(
        disagreements
            .iter()
            .all(|r| r["disagreement"] == "not_in_kernel"),
        "{disagreements:?}"
    );
}

#[test]
#[ignore = "needs root"]
fn analyze_joins_the_kernel_recording_with_captures_before_and_behind_the_loss() {
    let net = NetnsPair::new();
    let port = net.port;
    let dir = tempfile::tempdir().unwrap();
    let before = dir.path().join("sender.pcap");
    let behind = dir.path().join("behind.pcap");
    let cut = dir.path().join("cut.pcap");
    let cut_any = dir.path().join("cut-any.pcap");
    let kernel = dir.path().join("kernel.jsonl");
    // What the receiver's input filter let through (after the loss rule at priority 0), and
    // what the receiver sends, logged to an NFLOG group that tcpdump captures.
    let log = format!(
        "table inet tbxlog {{ chain i {{ type filter hook input priority 10; tcp dport {port} log group {NFLOG_GROUP} queue-threshold 1; }}; \
         chain o {{ type filter hook output priority 0; tcp sport {port} log group {NFLOG_GROUP} queue-threshold 1; }}; }}"
    );
    let ok = Command::new("ip")
        .args(["netns", "exec", &net.b, "nft", &log])
        .status()
        .unwrap();
    assert!(ok.success(), "nft {log}");
    // The live join: capture --json with the probes and the sender's interface, in its
    // namespace (its recording is also the kernel's for analyze: its tcp_* kernel lines).
    // 2 MB go out in one burst over a veth while four tcpdumps run beside it: with tcpdump's
    // 2 MiB buffer a loaded two-core CI machine once dropped 12 packets, among them the
    // original of a resend (then no resend on the wire to match the kernel's).
    let iface = format!("{}=t-eth0", net.dev_a);
    let cap = Capture::start_in(
        Some(&net.a),
        "join",
        &[
            "--port",
            &port.to_string(),
            "-i",
            &iface,
            "--buffer-size",
            "32MiB",
        ],
    );
    let before_dump = Tcpdump::start(&net.a, &net.dev_a, port, &before);
    let behind_dump = Tcpdump::start_on(&net.b, &format!("nflog:{NFLOG_GROUP}"), "", &behind);
    // The sender's frames cut to their headers (tcpdump -s 96): lengths from the IP header.
    let cut_dump = Tcpdump::start_cut(&net.a, &net.dev_a, &format!("tcp port {port}"), &cut, 96);
    // And as `tcpdump -i any -s 128` writes them: Linux cooked v2 headers, cut.
    let cut_any_dump =
        Tcpdump::start_cut(&net.a, "any", &format!("tcp port {port}"), &cut_any, 128);

    let receiver = spawn_receiver(&net.b, net.server());
    let mut s = connect_from(&net.a, net.server());
    let local = s.local_addr().unwrap().to_string();
    // 2% loss on the receiver's input: fast retransmits, loss probes, RTOs.
    net.set_receiver_rule(&format!(
        "tcp dport {port} numgen random mod 1000 < 20 drop"
    ));
    let chunk = vec![0x5au8; 64 * 1024];
    for _ in 0..32 {
        s.write_all(&chunk).unwrap();
    }
    wait_acked(&net, Duration::from_secs(10));
    // A blackout: one message, resent by a loss probe and timeouts until the path is back.
    net.set_receiver_rule(&format!("tcp dport {port} drop"));
    s.write_all(b"control message during the outage!").unwrap();
    std::thread::sleep(Duration::from_millis(1700));
    net.set_receiver_rule("");
    wait_acked(&net, Duration::from_secs(8));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut k = [0u8; 1];
    s.read_exact(&mut k).unwrap();
    drop(s);
    receiver.join().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop(before_dump);
    drop(behind_dump);
    drop(cut_dump);
    drop(cut_any_dump);
    let all = cap.stop_keeping(&kernel);
    if let Ok(keep) = std::env::var("TBX_KEEP_PCAP") {
        for f in [&before, &behind, &cut, &cut_any, &kernel] {
            let name = f.file_name().unwrap().to_string_lossy();
            std::fs::copy(f, format!("{keep}.{name}")).unwrap();
        }
    }

    // Resends the kernel counted with no record (the hook did not run for them: skips the
    // kernel counts, and on this kind of machine some it does not): each went on the wire
    // without a record. Only this test's socket retransmits here, so each is one of its
    // resends, on the wire and not in the kernel's records.
    let summary = all.iter().rfind(|l| l["type"] == "summary").unwrap();
    let skipped_by_kernel = &summary["drops"]["skipped_by_kernel"];
    assert_eq!(skipped_by_kernel["unread_hooks"], 0, "{skipped_by_kernel}");
    let conn = summary["connections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["src"] == local.as_str())
        .unwrap_or_else(|| panic!("{}", summary["connections"]));
    // One segment a resend: the messages are small.
    let missed = n(conn, "unrecorded_retrans");
    eprintln!(
        "hook runs skipped by the kernel: {skipped_by_kernel}; resends with no record: {missed}"
    );
    assert!(n(skipped_by_kernel, "retransmit") <= missed, "{conn}");

    let resends = records(&all, "tcp_retransmit", &local);
    let sent: Vec<&&Value> = resends.iter().filter(|r| r["err"] == 0).collect();
    let kernel_total = sent.len() as u64;
    assert!(
        kernel_total + missed >= 4,
        "kernel retransmissions (no record: {missed}): {resends:?}"
    );
    // The blackout's message: the last data resent; every resend of it but the last lost.
    let last_seq = sent.last().unwrap()["seq"].as_u64().unwrap();
    let blackout = sent.iter().filter(|r| r["seq"] == last_seq).count() as u64;
    assert!(
        blackout + missed >= 3,
        "loss probe and timeouts of the message: {blackout} (no record: {missed})"
    );

    // Live, capture --json joined the probes' events with its own packets as they came.
    let live = summary["tcp_join"]["directions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["src"] == local)
        .unwrap_or_else(|| panic!("{}", summary["tcp_join"]));
    eprintln!("capture --json, live: {live}");
    assert_eq!(
        (n(live, "kernel"), n(live, "matched")),
        (kernel_total, kernel_total),
        "{live}"
    );
    assert_eq!(summary["tcp_join"]["totals"]["not_on_wire"], 0);
    let live_disagreements: Vec<&Value> = all
        .iter()
        .filter(|l| l["type"] == "tcp_disagreement")
        .collect();
    // What the kernel said around a resend it did not report: each retransmission and
    // congestion-state change with the socket's retransmission total then.
    let kernel_said: Vec<String> = all
        .iter()
        .filter(|l| l["type"] == "tcp_retransmit" || l["type"] == "tcp_cong_state")
        .filter(|l| l["src"] == local)
        .map(|l| {
            format!(
                "{} {} seq {} err {} total_retrans {}",
                l["ts"], l["type"], l["seq"], l["err"], l["total_retrans"]
            )
        })
        .collect();
    assert_eq!(
        n(&summary["tcp_join"]["totals"], "not_in_kernel"),
        missed,
        "resends on the wire without a record = resends the kernel counted with no record; \
         disagreements \
         {live_disagreements:#?}; the kernel's records {kernel_said:#?}; drops {}",
        summary["drops"]
    );
    assert_eq!(
        live_disagreements.len() as u64,
        missed,
        "{live_disagreements:?}"
    );
    assert!(
        live_disagreements
            .iter()
            .all(|l| l["disagreement"] == "not_in_kernel"),
        "{live_disagreements:?}"
    );

    // Before the loss: every kernel retransmission on the wire, nothing else.
    // (The resends with no kernel record are on the wire only: `not_in_kernel`.)
    let lines = analyze(&before, &kernel);
    let (d, disagreements) = joined(&lines, &local);
    eprintln!("sender's capture: {d}");
    assert_only_unrecorded(&disagreements, missed);
    assert_eq!(
        (n(&d, "kernel"), n(&d, "matched"), n(&d, "wire")),
        (kernel_total, kernel_total, kernel_total + missed),
        "{d}"
    );
    assert_eq!(n(&d, "not_in_kernel"), missed, "{d}");

    // Cut to 96 bytes a frame, or to 128 on `-i any`, the same capture tells the same: every
    // payload length is the IP header's (the frames cut are counted, none rejected).
    for (file, how) in [
        (&cut, "cut to 96 bytes"),
        (&cut_any, "on any, cut to 128 bytes"),
    ] {
        let lines = analyze(file, &kernel);
        let (d, disagreements) = joined(&lines, &local);
        eprintln!("sender's capture {how}: {d}");
        assert_only_unrecorded(&disagreements, missed);
        assert_eq!(
            (n(&d, "kernel"), n(&d, "matched"), n(&d, "wire")),
            (kernel_total, kernel_total, kernel_total + missed),
            "{how}: {d}"
        );
        assert_eq!(n(&d, "not_in_kernel"), missed, "{how}: {d}");
        let frames = &lines.iter().rfind(|l| l["type"] == "summary").unwrap()["frames"];
        // At least a frame per 64 KiB written.
        assert!(n(frames, "tcp_cut") >= 32, "{how}: {frames}");
        assert_eq!(
            n(&frames["net_rejected"], "truncated"),
            0,
            "{how}: {frames}"
        );
        assert_eq!(
            n(&frames["tcp_rejected"], "truncated"),
            0,
            "{how}: {frames}"
        );
    }

    // Behind the loss: the blackout's resends but the last never reached the capture, the last
    // is the first copy it saw; the rest of the kernel's resends are seen or not, never both.
    let lines = analyze(&behind, &kernel);
    let (d, disagreements) = joined(&lines, &local);
    eprintln!("capture behind the loss: {d}");
    assert_eq!(n(&d, "kernel"), kernel_total, "{d}");
    assert_eq!(
        n(&d, "matched") + n(&d, "not_on_wire") + n(&d, "original_not_captured"),
        kernel_total,
        "{d}"
    );
    // A resend with no kernel record is seen behind the loss only if it got through.
    assert!(n(&d, "not_in_kernel") <= missed, "{d}");
    let of_message: Vec<&str> = disagreements
        .iter()
        .filter(|r| r["seq"] == last_seq)
        .map(|r| r["disagreement"].as_str().unwrap())
        .collect();
    let mut expected = vec!["not_on_wire"; blackout as usize - 1];
    expected.push("original_not_captured");
    assert_eq!(of_message, expected);
    assert_eq!(
        disagreements.len() as u64,
        n(&d, "not_on_wire") + n(&d, "original_not_captured") + n(&d, "not_in_kernel")
    );

    // The report says it in words.
    let out = Command::new(env!("CARGO_BIN_EXE_tboxscope"))
        .arg("analyze")
        .arg(&behind)
        .arg(&kernel)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("{} not on the wire", n(&d, "not_on_wire")))
            && text.contains("TCP, kernel and wire together"),
        "{text}"
    );
}
