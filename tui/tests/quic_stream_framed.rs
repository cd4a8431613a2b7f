//! Redundant sending on one long-lived stream per path, from a real third-party peer: an
//! aioquic client (tests/aioquic/two_path_peer.py) opens one connection per path (two veth
//! pairs between namespaces this test creates) and writes the same messages back to back on ONE
//! bidirectional stream of each (message i at the same offset on both), as aioquic, quiche and
//! tquic applications send a message stream. tcpdump (not tboxscope) records both ends of both
//! paths; `tboxscope analyze --keylog` must find every message on both paths, pair the T-Box
//! and gateway captures, and, from the T-Box side alone, see no loss in each connection's own
//! ACKs; from a capture begun mid-connection, the messages from the cut on; with
//! `--framing len:u16be@0`, messages cut by their length prefix across STREAM frames.
//! Needs root (namespaces, tcpdump): `#[ignore]`d (by hand: `flock /tmp/tbx-root.lock cargo
//! test -p tboxscope --test quic_stream_framed -- --include-ignored`). Namespaces, tcpdump and
//! the peers are removed by Drop guards, also when a check fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tboxscope_test_support::netns;

const BIN: &str = env!("CARGO_BIN_EXE_tboxscope");
/// Messages sent per run.
const N: u64 = 200;
/// The server port of both connections.
const PORT: &str = "4433";

/// A child process killed on drop; its first stdout/stderr lines are read by `wait_for`.
struct Proc(Child);

impl Proc {
    /// Spawns `args` inside namespace `ns`.
    fn spawn(ns: &str, args: &[&str]) -> Self {
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Self(child)
    }

    /// Waits (10 s at most) for a line containing `text` on stdout (`err`: stderr).
    fn wait_for(&mut self, text: &str, err: bool) {
        let (tx, rx) = std::sync::mpsc::channel();
        let lines: Box<dyn std::io::Read + Send> = if err {
            Box::new(self.0.stderr.take().unwrap())
        } else {
            Box::new(self.0.stdout.take().unwrap())
        };
        std::thread::spawn(move || {
            for line in BufReader::new(lines).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(l) if l.contains(text) => return,
                Ok(_) => {}
                Err(e) => panic!("{text:?} never came: {e}"),
            }
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // SIGINT first (tcpdump then writes out what it holds), then wait.
        let _ = Command::new("kill")
            .args(["-INT", &self.0.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One run's captures: `tbox-eth0`, `tbox-eth1` (T-Box side), `gw-g0`, `gw-g1` (gateway side).
struct Run {
    dir: tempfile::TempDir,
    keylog: PathBuf,
}

impl Run {
    fn file(&self, label: &str) -> PathBuf {
        self.dir.path().join(format!("{label}.pcap"))
    }
}

/// The aioquic peers over two paths sending `N` messages with `framing` (`plain` or `len`).
fn record(tag: &str, framing: &str) -> Run {
    let lab = netns::Lab::new(tag, 2);
    let dir = tempfile::tempdir().unwrap();
    let keylog = dir.path().join("keys.log");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/aioquic/two_path_peer.py");
    let script = script.to_str().unwrap();
    let (addr_a, addr_b) = (lab.links[0].3.clone(), lab.links[1].3.clone());
    {
        let mut captures = Vec::new();
        for (i, (t, c, ..)) in lab.links.iter().enumerate() {
            for (ns, iface, label) in [
                (&lab.tbox, t, format!("tbox-eth{i}")),
                (&lab.cloud, c, format!("gw-g{i}")),
            ] {
                let file = dir.path().join(format!("{label}.pcap"));
                let mut p = Proc::spawn(
                    ns,
                    &[
                        "tcpdump",
                        "-i",
                        iface,
                        "-U",
                        "--immediate-mode",
                        "-n",
                        "-w",
                        file.to_str().unwrap(),
                        "udp",
                    ],
                );
                p.wait_for("listening on", true);
                captures.push(p);
            }
        }
        let n = N.to_string();
        let mut server = Proc::spawn(
            &lab.cloud,
            &[
                "timeout", "40", "python3", script, "server", &addr_a, &addr_b, PORT, &n, framing,
            ],
        );
        server.wait_for("listening", false);
        let client = Command::new("ip")
            .args(["netns", "exec", &lab.tbox])
            .args([
                "timeout", "40", "python3", script, "client", &addr_a, &addr_b,
            ])
            .args([PORT, &n, framing, keylog.to_str().unwrap(), "0.005"])
            .output()
            .unwrap();
        assert!(
            client.status.success(),
            "aioquic client (pip install aioquic; cargo xtask setup does): {}",
            String::from_utf8_lossy(&client.stderr)
        );
        let status = server.0.wait().unwrap();
        assert!(status.success(), "aioquic server: {status}");
        std::thread::sleep(Duration::from_millis(300));
    }
    Run { dir, keylog }
}

/// `analyze --keylog ARGS FILES --json -`: the message records and the summary.
fn analyze(
    run: &Run,
    files: &[PathBuf],
    args: &[&str],
) -> (Vec<serde_json::Value>, serde_json::Value) {
    let out = Command::new(BIN)
        .arg("analyze")
        .arg("--keylog")
        .arg(&run.keylog)
        .args(args)
        .args(files)
        .args(["--json", "-"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let (mut messages, mut summary) = (Vec::new(), serde_json::Value::Null);
    for l in String::from_utf8(out.stdout).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        match v["type"].as_str() {
            Some("message") => messages.push(v),
            Some("summary") => summary = v,
            _ => {}
        }
    }
    (messages, summary)
}

/// The path labels of the summary, and each path's `loss_rate`.
fn paths(summary: &serde_json::Value) -> Vec<(String, f64)> {
    summary["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["label"].as_str().unwrap().to_owned(),
                p["loss_rate"].as_f64().unwrap(),
            )
        })
        .collect()
}

/// The redundancy view of the per-path connections' flow.
fn redundancy(summary: &serde_json::Value) -> &serde_json::Value {
    let r = summary["redundancy"].as_array().unwrap();
    let group: Vec<_> = r
        .iter()
        .filter(|f| f["flow"].as_str().unwrap().contains("per-path connections"))
        .collect();
    assert_eq!(group.len(), 1, "{r:?}");
    group[0]
}

/// Messages of flows other than the per-path connections' one.
fn elsewhere(summary: &serde_json::Value) -> u64 {
    summary["redundancy"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| !f["flow"].as_str().unwrap().contains("per-path connections"))
        .map(|f| f["messages"].as_u64().unwrap())
        .sum()
}

/// The stream range `[start, end)` a message record names (`up stream 0 @ 40..477`).
fn range(m: &serde_json::Value) -> (u64, u64) {
    let id = m["id"].as_str().unwrap();
    let (_, r) = id.split_once(" @ ").unwrap_or_else(|| panic!("{id}"));
    let (a, b) = r.split_once("..").unwrap();
    (a.parse().unwrap(), b.parse().unwrap())
}

/// The `len` framing's message ranges, as two_path_peer.py writes them.
fn len_ranges() -> Vec<(u64, u64)> {
    let mut at = 0;
    (0..N)
        .map(|i| {
            let size = 40 + (i * 397) % 1461;
            at += size;
            (at - size, at)
        })
        .collect()
}

#[test]
#[ignore = "needs root"]
fn one_stream_per_path_both_ends_and_tbox_side_alone() {
    let run = record("fa", "plain");
    let all: Vec<PathBuf> = ["tbox-eth0", "tbox-eth1", "gw-g0", "gw-g1"]
        .iter()
        .map(|l| run.file(l))
        .collect();
    // Both ends: every message once, on both paths; the ends of each path paired.
    let (messages, summary) = analyze(&run, &all, &[]);
    let r = redundancy(&summary);
    assert_eq!(r["messages"], N, "{r}");
    assert_eq!(r["on_all_paths"], N, "{r}");
    assert_eq!(elsewhere(&summary), 0, "{}", summary["redundancy"]);
    let p = paths(&summary);
    assert_eq!(
        p.iter().map(|(l, _)| l.as_str()).collect::<Vec<_>>(),
        ["tbox-eth0", "tbox-eth1"],
        "{p:?}"
    );
    assert!(p.iter().all(|(_, loss)| *loss == 0.0), "{p:?}");
    let mut ranges: Vec<(u64, u64)> = messages.iter().map(range).collect();
    ranges.sort_unstable();
    let want: Vec<(u64, u64)> = (0..N).map(|i| (600 * i, 600 * (i + 1))).collect();
    assert_eq!(ranges, want);
    // The T-Box side alone: each connection's own ACKs give the latency and show no loss.
    let (_, summary) = analyze(&run, &all[..2], &[]);
    let r = redundancy(&summary);
    assert_eq!(r["messages"], N, "{r}");
    for path in r["paths"].as_array().unwrap() {
        assert_eq!(path["carried"], N, "{r}");
    }
    for path in summary["paths"].as_array().unwrap() {
        assert_eq!(path["loss_rate"], 0.0, "{path}");
        assert_eq!(path["latency"]["count"], N, "{path}");
        assert_eq!(path["latency_kind"], "ack_rtt", "{path}");
    }
}

/// The first frame of `file` at or after `ts` (seconds since the epoch), with tshark.
fn first_frame_at(file: &Path, ts: f64) -> u64 {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(file)
        .args([
            "-T",
            "fields",
            "-e",
            "frame.number",
            "-e",
            "frame.time_epoch",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .find_map(|l| {
            let (n, t) = l.split_once('\t')?;
            (t.parse::<f64>().ok()? >= ts).then(|| n.parse().ok())?
        })
        .unwrap()
}

#[test]
#[ignore = "needs root"]
fn capture_begun_mid_connection_gives_the_messages_from_the_cut_on() {
    let run = record("fb", "plain");
    let (messages, _) = analyze(&run, &[run.file("tbox-eth0")], &[]);
    let times: Vec<u64> = messages
        .iter()
        .map(|m| m["first_seen_ns"].as_u64().unwrap())
        .collect();
    // Half way through the messages: every capture cut there (the handshake left behind).
    let mid = times[times.len() / 2] as f64 / 1e9;
    let mut cut = Vec::new();
    for label in ["tbox-eth0", "tbox-eth1", "gw-g0", "gw-g1"] {
        let file = run.file(label);
        let first = first_frame_at(&file, mid);
        let out = run.dir.path().join(format!("cut/{label}.pcap"));
        std::fs::create_dir_all(out.parent().unwrap()).unwrap();
        let st = Command::new("editcap")
            .arg("-r")
            .arg(&file)
            .arg(&out)
            .arg(format!("{first}-{}", u32::MAX))
            .status()
            .unwrap();
        assert!(st.success());
        cut.push(out);
    }
    let (messages, summary) = analyze(&run, &cut, &[]);
    let r = redundancy(&summary);
    let n = r["messages"].as_u64().unwrap();
    // A copy sent before the other path's connection was first seen moves into the group
    // when it forms: no message is split between the group and a flow of its own.
    assert_eq!(elsewhere(&summary), 0, "{}", summary["redundancy"]);
    println!(
        "moved into the group: {}",
        summary["health"]["regrouped_messages"]
    );
    // The messages from the cut on (those in flight at the cut may be seen on one path only).
    assert!((N / 2 - 3..=N / 2 + 3).contains(&n), "{r}");
    assert!(r["on_all_paths"].as_u64().unwrap() + 3 >= n, "{r}");
    for m in &messages {
        let (s, e) = range(m);
        assert!(
            s % 600 == 0 && e == s + 600 && s >= 600 * (N / 2 - 3),
            "{m}"
        );
    }
    assert_eq!(
        paths(&summary).len(),
        2,
        "ends paired: {}",
        summary["paths"]
    );
}

#[test]
#[ignore = "needs root"]
fn length_prefixed_messages_cut_across_frames() {
    let run = record("fc", "len");
    let all: Vec<PathBuf> = ["tbox-eth0", "tbox-eth1", "gw-g0", "gw-g1"]
        .iter()
        .map(|l| run.file(l))
        .collect();
    let (messages, summary) = analyze(&run, &all, &["--framing", "len:u16be@0"]);
    let r = redundancy(&summary);
    assert_eq!(r["messages"], N, "{r}");
    assert_eq!(r["on_all_paths"], N, "{r}");
    let mut ranges: Vec<(u64, u64)> = messages.iter().map(range).collect();
    ranges.sort_unstable();
    assert_eq!(ranges, len_ranges());
    for m in &messages {
        let (s, e) = range(m);
        assert_eq!(m["bytes"], e - s, "{m}");
    }
    assert_eq!(paths(&summary).len(), 2, "{}", summary["paths"]);
    // Three messages a write: without the framing, STREAM frames are the messages.
    let (_, summary) = analyze(&run, &all, &[]);
    assert!(redundancy(&summary)["messages"].as_u64().unwrap() < N);
}

#[test]
fn a_framing_that_is_not_one_is_refused_saying_what_is_expected() {
    for bad in ["len:u24@0", "fixed:0", "lines"] {
        let out = Command::new(BIN)
            .args(["analyze", "--framing", bad, "none.pcap"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--framing") && err.contains("expected fixed:N, len:u16be@K"),
            "{bad}: {err}"
        );
    }
}
