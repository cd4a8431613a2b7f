//! `tboxscope analyze` end to end on the shared fixtures: JSON Lines per packet, the summary,
//! paths, the readable report, and errors that name the file and the line or offset.
#![expect(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;
use tboxscope_test_support::fixture;

fn tboxscope(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tboxscope"))
        .args(args)
        .output()
        .unwrap()
}

/// `tboxscope ARGS` writing to a full disk (`/dev/full`) fails and says why, once.
fn says_once_that_the_disk_is_full(args: &[&str]) {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tboxscope"))
        .args(args)
        .stdout(full)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.matches("No space left on device").count(), 1, "{err}");
    assert!(err.contains("writing JSON output"), "{err}");
}

fn lines(out: &Output) -> Vec<Value> {
    String::from_utf8(out.stdout.clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn kcp_fixture_decodes_segment_by_segment() {
    let f = fixture("ndpi-kcp.pcap");
    let out = tboxscope(&["analyze", "--packets", f.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let recs = lines(&out);
    assert_eq!(recs[0]["type"], "header");
    assert_eq!(recs.last().unwrap()["type"], "summary");
    let segs: Vec<&Value> = recs.iter().filter(|r| r["type"] == "kcp_segment").collect();
    assert_eq!(segs.len(), 28);
    for s in &segs {
        assert_eq!(s["conv"], 10);
        assert_eq!(s["path"], "ndpi-kcp");
        assert_eq!(s["file"], f.to_str().unwrap());
        assert!(s["ts"].as_str().unwrap().starts_with("2024-01-11T18:14:"));
    }
    // A message split in three fragments (frg 2, 1, 0), then its ACKs.
    let first: Vec<(u64, &str, u64, u64, u64)> = segs[..5]
        .iter()
        .map(|s| {
            (
                s["frame"].as_u64().unwrap(),
                s["cmd"].as_str().unwrap(),
                s["sn"].as_u64().unwrap(),
                s["frg"].as_u64().unwrap(),
                s["len"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        first,
        vec![
            (1, "push", 0, 2, 1448),
            (2, "ack", 0, 0, 0),
            (3, "push", 1, 1, 1448),
            (4, "push", 2, 0, 1104),
            (5, "ack", 1, 0, 0),
        ]
    );
    // The 24 frames of 64-byte UDP payloads (f0 0f f0 0f ...) are not KCP; every other frame,
    // including the late retransmissions from other source ports, is.
    let tsv = include_str!("../../probe-user/tests/data/ndpi-kcp.pcap.frames.tsv");
    let not_kcp: Vec<u64> = tsv
        .lines()
        .map(|l| l.split('\t').collect::<Vec<_>>())
        .filter(|c| c[7] == "64")
        .map(|c| c[0].parse().unwrap())
        .collect();
    assert_eq!(not_kcp.len(), 24);
    let mut kcp_frames: Vec<u64> = segs.iter().map(|s| s["frame"].as_u64().unwrap()).collect();
    kcp_frames.dedup();
    let all_others: Vec<u64> = (1..=50).filter(|f| !not_kcp.contains(f)).collect();
    assert_eq!(kcp_frames, all_others);
    let summary = recs.last().unwrap();
    assert_eq!(summary["frames"]["frames"], 50);
    assert_eq!(summary["frames"]["kcp_segments"], 28);
    assert_eq!(summary["kcp"]["segments"], 28);
    assert_eq!(summary["files"][0]["frames"], 50);
    let rejected = summary["kcp"]["rejected"].as_object().unwrap();
    assert_eq!(
        rejected.values().map(|v| v.as_u64().unwrap()).sum::<u64>(),
        24
    );
}

/// Packet numbers and STREAM ids/offsets of the Chrome↔Cloudflare capture, with the secrets
/// embedded in the file, against tshark's decode (checked in; re-run when tshark is present).
#[test]
fn quic_fixture_matches_tshark_with_embedded_secrets() {
    let f = fixture("chrome-cloudflare-quic-with-secrets.pcapng");
    let expected_tsv = include_str!("data/chrome-quic-tshark.tsv");
    if let Ok(o) = Command::new("tshark")
        .arg("-r")
        .arg(&f)
        .args(["-Y", "quic", "-T", "fields", "-e", "frame.number"])
        .args(["-e", "quic.packet_number", "-e", "quic.stream.stream_id"])
        .args(["-e", "quic.stream.offset"])
        .output()
    {
        if o.status.success() {
            assert_eq!(String::from_utf8(o.stdout).unwrap(), expected_tsv);
        }
    }
    // frame → (first packet number, [(stream id, offset)])
    let mut expected: BTreeMap<u64, (u64, Vec<(u64, u64)>)> = BTreeMap::new();
    for line in expected_tsv.lines() {
        let c: Vec<&str> = line.split('\t').collect();
        let pn = c[1].split(',').next().unwrap().parse().unwrap();
        let ids: Vec<u64> = c[2]
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().unwrap())
            .collect();
        let mut offs: Vec<u64> = c[3]
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().unwrap())
            .collect();
        // tshark leaves the offset out for frames without the OFF bit: offset 0.
        offs.resize(ids.len(), 0);
        let mut streams: Vec<(u64, u64)> = ids.into_iter().zip(offs).collect();
        streams.sort_unstable();
        expected.insert(c[0].parse().unwrap(), (pn, streams));
    }
    let out = tboxscope(&["analyze", "--packets", f.to_str().unwrap()]);
    assert!(out.status.success());
    let mut got: BTreeMap<u64, (u64, Vec<(u64, u64)>)> = BTreeMap::new();
    for r in lines(&out).iter().filter(|r| r["type"] == "quic_packet") {
        let frame = r["frame"].as_u64().unwrap();
        let entry = got
            .entry(frame)
            .or_insert_with(|| (r["pn"].as_u64().unwrap(), Vec::new()));
        for fr in r["frames"].as_array().unwrap() {
            if fr["type"] == "stream" {
                entry.1.push((
                    fr["stream_id"].as_u64().unwrap(),
                    fr["offset"].as_u64().unwrap(),
                ));
            }
        }
        entry.1.sort_unstable();
    }
    // Mark order-independence in the frame's stream list (tshark lists a frame's streams in
    // packet order; both lists are sorted here).
    for v in expected.values_mut() {
        v.1.sort_unstable();
    }
    assert_eq!(got, expected);
}

#[test]
fn two_files_are_two_paths_and_the_report_is_readable() {
    let a = fixture("ndpi-kcp.pcap");
    let b = Path::new(env!("CARGO_MANIFEST_DIR")).join("../probe-user/tests/data/ndpi-kcp.pcapng");
    let out = tboxscope(&[
        "analyze",
        "--json",
        "-",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let recs = lines(&out);
    let summary = recs.last().unwrap();
    assert_eq!(
        summary["path_labels"],
        serde_json::json!(["ndpi-kcp", "ndpi-kcp.pcapng:ndpi-kcp"])
    );
    // Without --packets no per-packet lines: the header, the engine's records, the advice,
    // the summary.
    assert_eq!(recs[0]["type"], "header");
    assert!(recs.iter().all(|r| [
        "header",
        "message",
        "window",
        "outage",
        "hol_incident",
        "advice",
        "summary"
    ]
    .contains(&r["type"].as_str().unwrap())));
    // The engine's whole-run figures are in the same summary line.
    assert!(summary["flows"].is_array() && summary["health"].is_object());
    assert_eq!(summary["frames"]["kcp_segments"], 56);

    let out = tboxscope(&["analyze", a.to_str().unwrap()]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("ndpi-kcp.pcap (pcap_micro): 50 frames, paths: ndpi-kcp"),
        "{text}"
    );
    assert!(text.contains("28 segments"), "{text}");
}

#[test]
fn json_to_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.jsonl");
    let f = fixture("quic-tls-handshake.pcapng");
    let out = tboxscope(&[
        "analyze",
        "--packets",
        "--json",
        path.to_str().unwrap(),
        f.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    assert!(out.stdout.is_empty());
    let text = std::fs::read_to_string(&path).unwrap();
    let recs: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let q: Vec<&Value> = recs.iter().filter(|r| r["type"] == "quic_packet").collect();
    assert_eq!(q.len(), 1);
    assert_eq!(q[0]["packet_type"], "initial");
    assert_eq!(q[0]["decrypted"], true);
    assert_eq!(q[0]["frame"], 1);
}

#[test]
fn bad_keylog_names_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let keylog = dir.path().join("keys.log");
    std::fs::write(&keylog, "# comment\nCLIENT_TRAFFIC_SECRET_0 zz 00\n").unwrap();
    let f = fixture("ndpi-kcp.pcap");
    let out = tboxscope(&[
        "analyze",
        "--keylog",
        keylog.to_str().unwrap(),
        f.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains(&format!("{} line 2", keylog.display())),
        "{err}"
    );
    let out = tboxscope(&[
        "analyze",
        "--keylog",
        "/nonexistent/keys.log",
        f.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8(out.stderr)
        .unwrap()
        .contains("/nonexistent/keys.log"));
}

#[test]
fn unreadable_and_truncated_files_are_named_and_fail_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("cut.pcap");
    let bytes = std::fs::read(fixture("ndpi-kcp.pcap")).unwrap();
    std::fs::write(&cut, &bytes[..2000]).unwrap();
    let good = fixture("ndpi-kcp.pcap");
    let out = tboxscope(&[
        "analyze",
        "--packets",
        cut.to_str().unwrap(),
        "/nonexistent/x.pcapng",
        good.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr.clone()).unwrap();
    assert!(
        err.contains(&format!(
            "{}: offset 1676: truncated pcap record",
            cut.display()
        )),
        "{err}"
    );
    assert!(err.contains("/nonexistent/x.pcapng: cannot open"), "{err}");
    // What came before the cut, and the good file after it, were still decoded.
    let recs = lines(&out);
    let summary = recs.last().unwrap();
    assert_eq!(summary["files"][0]["frames"], 2);
    assert_eq!(summary["files"][2]["kcp_segments"], 28);
    assert_eq!(summary["errors"].as_array().unwrap().len(), 2);
}

#[test]
fn a_write_error_is_said_once_and_a_closed_pipe_ends_quietly() {
    use std::io::Read;
    use std::process::Stdio;
    let f = fixture("ndpi-kcp.pcap");
    // A full disk: the run fails and says why, once.
    says_once_that_the_disk_is_full(&["analyze", "--json", "-", "--packets", f.to_str().unwrap()]);

    // A reader that stops after its first byte (`| head -c 1`): no error, success. The pipe
    // holds 4 KiB and each output is larger (JSON per packet ~9 KB; the report of 30 files
    // ~6 KB), so the child meets the closed pipe whichever way the race goes.
    let file = f.to_str().unwrap();
    let json = vec!["analyze", "--json", "-", "--packets", file];
    // 30 copies (the same file given twice is refused).
    let dir = tempfile::tempdir().unwrap();
    let copies: Vec<String> = (0..30)
        .map(|i| {
            let c = dir.path().join(format!("kcp{i}.pcap"));
            std::fs::copy(&f, &c).unwrap();
            c.display().to_string()
        })
        .collect();
    let mut report = vec!["analyze"];
    report.extend(copies.iter().map(String::as_str));
    for args in [json, report] {
        let (mut stdout, writer) = std::io::pipe().unwrap();
        // SAFETY: F_SETPIPE_SZ on a pipe this test owns, before anything is written to it; no
        // memory is passed.
        let set = unsafe {
            libc::fcntl(
                std::os::fd::AsRawFd::as_raw_fd(&writer),
                libc::F_SETPIPE_SZ,
                4096,
            )
        };
        assert!(
            set >= 4096,
            "F_SETPIPE_SZ: {}",
            std::io::Error::last_os_error()
        );
        let child = Command::new(env!("CARGO_BIN_EXE_tboxscope"))
            .args(&args)
            .stdout(writer)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = [0u8; 1];
        stdout.read_exact(&mut first).unwrap();
        // Our end, the only reading one, closes.
        drop(stdout);
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(out.status.success(), "{args:?}: {:?} {err}", out.status);
        assert!(err.is_empty(), "{args:?}: {err}");
    }
}

/// The KCP fixture as a capture cut by a snap length would hold it (each frame's first
/// `snaplen` bytes, its length on the wire kept).
fn cut_fixture(dir: &Path, snaplen: usize) -> std::path::PathBuf {
    let bytes = std::fs::read(fixture("ndpi-kcp.pcap")).unwrap();
    assert_eq!(bytes[..4], [0xd4, 0xc3, 0xb2, 0xa1], "LE microsecond pcap");
    let le = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let mut packets = Vec::new();
    let mut at = 24;
    while at < bytes.len() {
        let ts = u64::from(le(at)) * 1_000_000_000 + u64::from(le(at + 4)) * 1000;
        let (caplen, orig) = (le(at + 8) as usize, le(at + 12));
        let frame = &bytes[at + 16..at + 16 + caplen];
        packets.push((ts, orig, frame[..caplen.min(snaplen)].to_vec()));
        at += 16 + caplen;
    }
    let out = dir.join(format!("kcp-s{snaplen}.pcap"));
    std::fs::write(
        &out,
        tboxscope_test_support::pcap::pcap(1, false, false, &packets),
    )
    .unwrap();
    out
}

/// Cut by a snap length (this capture is IPv6 on Ethernet: the KCP header ends at byte 86),
/// the KCP fixture reads as from the segment headers the cut keeps: the whole capture's
/// segments whose header is in sight, and the same messages, latency, bytes on the wire and
/// amplification; cut before the first header, its frames are truncated, not other UDP.
#[test]
fn a_kcp_capture_cut_by_its_snap_length_reads_from_the_headers() {
    let dir = tempfile::tempdir().unwrap();
    let summary = |file: &Path| -> (Value, Vec<Value>) {
        let out = tboxscope(&[
            "analyze",
            "--packets",
            "--json",
            "-",
            file.to_str().unwrap(),
        ]);
        assert!(out.status.success());
        let mut recs = lines(&out);
        let summary = recs.pop().unwrap();
        (summary, recs)
    };
    let (whole, whole_recs) = summary(&fixture("ndpi-kcp.pcap"));
    let results = |s: &Value| {
        let a = &s["amplification"][0];
        (
            s["latency"]["combined"].clone(),
            s["redundancy"][0]["messages"].clone(),
            s["paths"][0]["bytes"].clone(),
            (a["wire_bytes"].clone(), a["unique_payload_bytes"].clone()),
            (a["retransmit_bytes"].clone(), a["ack_bytes"].clone()),
            s["outages_total"].clone(),
        )
    };
    // Each segment of the whole capture, with where its header ends in its frame.
    let mut header_ends = Vec::new();
    let mut end = 62; // Ethernet, IPv6, UDP
    for r in whole_recs.iter().filter(|r| r["type"] == "kcp_segment") {
        if r["index"] == 0 {
            end = 62;
        }
        header_ends.push(end + 24);
        end += 24 + r["len"].as_u64().unwrap() as usize;
    }
    assert_eq!(header_ends.len(), 28);
    for snaplen in [86, 96, 130, 200] {
        let (cut, recs) = summary(&cut_fixture(dir.path(), snaplen));
        let in_sight = header_ends.iter().filter(|e| **e <= snaplen).count();
        let segs = recs.iter().filter(|r| r["type"] == "kcp_segment").count();
        let f = &cut["frames"];
        assert_eq!(
            (segs, &f["kcp_segments"]),
            (in_sight, &in_sight.into()),
            "{f}"
        );
        assert!(f["udp_cut"].as_u64().unwrap() >= 22, "{f}");
        assert_eq!(results(&cut), results(&whole), "cut to {snaplen} bytes");
    }
    // Cut inside the first KCP header: nothing decoded, every frame counted as truncated.
    let (cut, _) = summary(&cut_fixture(dir.path(), 80));
    let f = &cut["frames"];
    assert_eq!(
        (&f["udp"], &f["kcp_segments"]),
        (&0.into(), &0.into()),
        "{f}"
    );
    assert_eq!(f["net_rejected"]["truncated"], 50, "{f}");
}

/// With two cores the engine runs, and writes its records, on a thread of its own: the same
/// lines in the same order as on one core, and a write error there is said once, as on the
/// main thread.
#[test]
fn records_written_on_the_engines_thread_are_the_same_and_a_write_error_is_said_once() {
    use tboxscope_test_support::tcpflow::{write_tcp_capture, TcpTraffic};
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ctl.pcap");
    write_tcp_capture(
        &file,
        &TcpTraffic {
            connections: 4,
            frames: 20_000,
            loss_per_mille: 20,
            seed: 3,
            segment_bytes: 160,
        },
    );
    let f = file.to_str().unwrap();
    let args = ["analyze", "--framing", "fixed:160", "--json", "-", f];
    // The header's wall-clock time differs between runs (a failed run writes no records).
    let body = |out: &Output| -> Vec<Value> { lines(out).into_iter().skip(1).collect() };
    let two_cores = body(&tboxscope(&args));
    // One core (`taskset`): decoding, matching and writing on one thread.
    let one_core = Command::new("taskset")
        .args(["-c", "0", env!("CARGO_BIN_EXE_tboxscope")])
        .args(args)
        .output()
        .unwrap();
    let one_core = body(&one_core);
    let messages = two_cores.iter().filter(|l| l["type"] == "message").count();
    assert!(messages > 10_000, "{messages} message records");
    assert_eq!(two_cores.len(), one_core.len());
    assert!(
        two_cores == one_core,
        "records differ between one and two cores"
    );
    says_once_that_the_disk_is_full(&args);
}
