//! Captures that begin after the QUIC handshake, from a real third-party peer:
//! an aioquic client and server (tests/aioquic/stream_peer.py) on loopback write messages on one
//! bidirectional stream, tcpdump (not tboxscope) records them, and the capture is cut with
//! `editcap` after the handshake, or at half time after key updates. `tboxscope analyze --keylog`
//! must then decrypt every 1-RTT packet that is left, with the packet numbers tshark decrypts on
//! the FULL capture for those frames. Needs root (tcpdump): `#[ignore]`d, run by `cargo xtask
//! test` (by hand: `flock /tmp/tbx-root.lock cargo test -p tboxscope --test quic_midconn --
//! --include-ignored`). tcpdump is stopped by a Drop guard, also when a check fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tboxscope");

/// tcpdump on `lo` writing `file`; stopped (SIGINT) on drop.
struct Tcpdump(Child);

impl Tcpdump {
    fn start(file: &Path, port: u16) -> Self {
        let mut child = Command::new("tcpdump")
            .args(["-i", "lo", "-U", "--immediate-mode", "-n", "-w"])
            .arg(file)
            .args(["udp", "port", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpdump (cargo xtask setup installs it)");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(l) if l.contains("listening on") => break,
                Ok(_) => {}
                Err(e) => panic!("tcpdump did not start: {e}"),
            }
        }
        Self(child)
    }
}

impl Drop for Tcpdump {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-INT", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

struct Run {
    _dir: tempfile::TempDir,
    capture: PathBuf,
    keylog: PathBuf,
}

/// aioquic peers exchanging `n` messages (one every `interval_ms`) with `key_updates` key
/// updates, captured whole.
fn capture(n: u32, interval_ms: u32, key_updates: u32) -> Run {
    // A port of its own per run (tests run in parallel).
    let port = 40_000 + (std::process::id() % 10_000) as u16 * 2 + u16::from(key_updates > 0);
    let dir = tempfile::tempdir().unwrap();
    let capture = dir.path().join("whole.pcap");
    let keylog = dir.path().join("keys.log");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/aioquic/stream_peer.py");
    {
        let _tcpdump = Tcpdump::start(&capture, port);
        let out = Command::new("timeout")
            .arg("40")
            .arg("python3")
            .arg(&script)
            .arg(port.to_string())
            .arg(&keylog)
            .arg(n.to_string())
            .arg(format!("{}", f64::from(interval_ms) / 1000.0))
            .arg(key_updates.to_string())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "aioquic peer (pip install aioquic; cargo xtask setup does): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    Run {
        _dir: dir,
        capture,
        keylog,
    }
}

/// tshark's decryption of the whole capture: (frame, header form, packet numbers) per frame.
fn tshark(run: &Run) -> Vec<(u64, bool, Vec<u64>)> {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(&run.capture)
        .arg("-o")
        .arg(format!("tls.keylog_file:{}", run.keylog.display()))
        .args(["-Y", "quic", "-T", "fields", "-e", "frame.number"])
        .args(["-e", "quic.header_form", "-e", "quic.packet_number"])
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            let nums =
                |s: &str| -> Vec<u64> { s.split(',').filter_map(|x| x.parse().ok()).collect() };
            (
                f[0].parse().unwrap(),
                nums(f.get(1).copied().unwrap_or("")).contains(&1),
                nums(f.get(2).copied().unwrap_or("")),
            )
        })
        .collect()
}

/// Frames `first..` of the capture, with editcap.
fn cut(run: &Run, first: u64) -> PathBuf {
    let out = run.capture.with_file_name(format!("from-{first}.pcap"));
    let st = Command::new("editcap")
        .arg("-r")
        .arg(&run.capture)
        .arg(&out)
        .arg(format!("{first}-{}", u32::MAX))
        .status()
        .unwrap();
    assert!(st.success());
    out
}

/// `analyze --packets --keylog` on `file`: (frame, decrypted, pn) of each 1-RTT packet, and the
/// summary's QUIC counters.
fn analyze(file: &Path, keylog: &Path) -> (Vec<(u64, bool, Option<u64>)>, serde_json::Value) {
    let out = Command::new(BIN)
        .arg("analyze")
        .arg("--keylog")
        .arg(keylog)
        .arg("--packets")
        .arg("--json")
        .arg("-")
        .arg(file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut packets = Vec::new();
    let mut summary = serde_json::Value::Null;
    for l in String::from_utf8(out.stdout).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        if v["type"] == "quic_packet" && v["packet_type"] == "one_rtt" {
            packets.push((
                v["frame"].as_u64().unwrap(),
                v["decrypted"].as_bool().unwrap(),
                v["pn"].as_u64(),
            ));
        }
        if v["type"] == "summary" {
            summary = v["quic"].clone();
        }
    }
    (packets, summary)
}

/// Checks that the capture cut at `first` decrypts as tshark decrypts the whole one.
fn check(run: &Run, first: u64) -> serde_json::Value {
    let whole = tshark(run);
    let want: Vec<(u64, bool, Option<u64>)> = whole
        .iter()
        .filter(|(f, long, _)| *f >= first && !long)
        .map(|(f, _, pns)| (*f - first + 1, true, pns.first().copied()))
        .collect();
    assert!(want.len() > 20, "{whole:?}");
    let (got, quic) = analyze(&cut(run, first), &run.keylog);
    assert_eq!(got, want, "{quic}");
    assert!(quic["hunt"]["recovered"].as_u64().unwrap() >= 1, "{quic}");
    assert_eq!(quic["not_decrypted"], serde_json::json!({}), "{quic}");
    quic
}

#[test]
#[ignore = "needs root"]
fn aioquic_capture_cut_after_the_handshake_decrypts_every_one_rtt_packet() {
    let run = capture(60, 10, 0);
    let whole = tshark(&run);
    let last_long = whole
        .iter()
        .filter(|(_, long, _)| *long)
        .map(|(f, ..)| *f)
        .max();
    let quic = check(&run, last_long.unwrap() + 1);
    // Both directions were found (client and server DCIDs), nothing given up.
    assert_eq!(quic["hunt"]["recovered"], 2, "{quic}");
    assert_eq!(quic["hunt"]["given_up"], 0, "{quic}");
}

#[test]
#[ignore = "needs root"]
fn aioquic_second_half_after_key_updates_decrypts_every_one_rtt_packet() {
    // Key updates after messages 20 and 40: the second half starts in the second generation.
    let run = capture(60, 10, 2);
    let whole = tshark(&run);
    let half = whole.last().unwrap().0 / 2;
    let quic = check(&run, half);
    assert_eq!(quic["hunt"]["given_up"], 0, "{quic}");
    assert!(quic["key_updates"].as_u64().unwrap() >= 1, "{quic}");
}
