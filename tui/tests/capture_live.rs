//! `tboxscope capture --json` with packets, in namespaces this test creates: KCP
//! segments sent on both paths of a veth pair each (plain UDP sockets, the far end answering
//! each segment with a KCP ACK), one path's ACKs dropped for two seconds (an outage). The
//! capture's `message` and `outage` records must equal what `analyze --json` finds in
//! tcpdump's captures of the same interfaces; SIGTERM ends with a summary; SIGKILL leaves whole
//! lines; a full disk stops writing with a clear error and counts; an interface deleted and
//! recreated mid-capture is reopened and the gap recorded.
#![expect(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::collections::BTreeMap;
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;
use tboxscope_test_support::netns::{spawn_in, Lab};
use tboxscope_test_support::pcap::kcp_segment;
use tboxscope_test_support::peers::answer_kcp_pushes;

const BIN: &str = env!("CARGO_BIN_EXE_tboxscope");
const CONV: u32 = 0x2323_0001;
const PORT: u16 = 7230;
const PUSH: u8 = 81;

/// The lab, the far end's ACK threads, and processes to end; all stopped on drop.
struct Bed {
    lab: Lab,
    stop: Arc<AtomicBool>,
    responders: Vec<JoinHandle<()>>,
    children: Vec<Child>,
    dir: tempfile::TempDir,
}

impl Bed {
    fn new(tag: &str) -> Bed {
        let lab = Lab::new(tag, 2);
        let stop = Arc::new(AtomicBool::new(false));
        let responders = (0..2)
            .map(|i| {
                let addr = format!("{}:{PORT}", lab.links[i].3);
                let stop = Arc::clone(&stop);
                spawn_in(&lab.cloud, move || answer_kcp_pushes(&addr, &stop))
            })
            .collect();
        Bed {
            lab,
            stop,
            responders,
            children: Vec::new(),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `-i IFACE=ethN` for both paths.
    fn interfaces(&self) -> Vec<String> {
        (0..2)
            .flat_map(|i| ["-i".to_owned(), format!("{}=eth{i}", self.lab.links[i].0)])
            .collect()
    }

    /// Starts `tboxscope capture ARGS` in the T-Box namespace; returns its index.
    fn capture(&mut self, args: &[String]) -> usize {
        let child = Command::new("ip")
            .args(["netns", "exec", &self.lab.tbox, BIN, "capture"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        self.children.push(child);
        self.children.len() - 1
    }

    /// tcpdump of path `i` into `file`, nanosecond timestamps, each packet written at once.
    fn tcpdump(&mut self, i: usize, file: &Path) -> usize {
        let child = Command::new("ip")
            .args(["netns", "exec", &self.lab.tbox, "tcpdump", "-i"])
            .arg(&self.lab.links[i].0)
            .args(["-U", "--time-stamp-precision=nano", "-w"])
            .arg(file)
            .arg("udp")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.children.push(child);
        self.children.len() - 1
    }

    /// Sends `signal` to process `i` and waits (at most 20 s) for it; returns its exit and
    /// standard error.
    fn end(&mut self, i: usize, signal: i32) -> (Option<i32>, String) {
        let child = &mut self.children[i];
        let pid = libc::pid_t::try_from(child.id()).unwrap();
        // SAFETY: kill has no memory preconditions; the pid is our child's.
        unsafe { libc::kill(pid, signal) };
        let deadline = Instant::now() + Duration::from_secs(20);
        while child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "process {pid} did not end");
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            std::io::Read::read_to_string(&mut e, &mut err).unwrap();
        }
        (child.wait().unwrap().code(), err)
    }

    /// A UDP socket on each path in the T-Box namespace, from a new port, to the far end.
    fn sockets(&self) -> Vec<UdpSocket> {
        (0..2)
            .map(|i| {
                let (_, _, ta, ca) = self.lab.links[i].clone();
                spawn_in(&self.lab.tbox, move || {
                    let s = UdpSocket::bind(format!("{ta}:0")).unwrap();
                    s.connect(format!("{ca}:{PORT}")).unwrap();
                    s
                })
                .join()
                .unwrap()
            })
            .collect()
    }

    /// Sends KCP segments `sns` on both paths, 20 ms apart, path 1's ACKs dropped at the far
    /// end while `sn` is in `outage`.
    fn traffic(&self, sns: std::ops::Range<u32>, outage: std::ops::Range<u32>) {
        let socks = self.sockets();
        let start = Instant::now();
        for sn in sns {
            if sn == outage.start {
                nft(&self.lab.cloud, Some(&self.lab.links[1].1));
            }
            if sn == outage.end {
                nft(&self.lab.cloud, None);
            }
            let ts = u32::try_from(start.elapsed().as_millis()).unwrap();
            let payload: Vec<u8> = (0..120u32).map(|j| (sn * 3 + j) as u8).collect();
            let seg = kcp_segment(CONV, PUSH, 0, 128, ts, sn, sn, &payload);
            for s in &socks {
                s.send(&seg).unwrap();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        nft(&self.lab.cloud, None);
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.stop.store(true, Ordering::Relaxed);
        for r in self.responders.drain(..) {
            let _ = r.join();
        }
    }
}

/// Drops everything arriving on `iface` in namespace `ns` (None: drop nothing any more).
fn nft(ns: &str, iface: Option<&str>) {
    let _ = Command::new("ip")
        .args([
            "netns", "exec", ns, "nft", "delete", "table", "inet", "tbxcap",
        ])
        .stderr(Stdio::null())
        .status();
    if let Some(iface) = iface {
        let rules = format!(
            "table inet tbxcap {{ chain c {{ type filter hook input priority 0; iifname \"{iface}\" drop; }}; }}"
        );
        let ok = Command::new("ip")
            .args(["netns", "exec", ns, "nft", &rules])
            .status()
            .unwrap();
        assert!(ok.success());
    }
}

/// Waits until `file` holds a line (the capture is running), at most 30 s.
fn wait_for_header(file: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read(file).map_or(true, |b| !b.contains(&b'\n')) {
        assert!(Instant::now() < deadline, "capture did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn lines(file: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(file).unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn of_type<'a>(lines: &'a [Value], kind: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| l["type"] == kind).collect()
}

/// A copy: its path, transmissions and latency (µs).
type Copy = (String, u64, Option<u64>);

/// Messages by (flow, id): their copies.
fn messages(lines: &[Value]) -> BTreeMap<(String, String), Vec<Copy>> {
    of_type(lines, "message")
        .into_iter()
        .map(|m| {
            let mut copies: Vec<Copy> = m["copies"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| {
                    (
                        c["path"].as_str().unwrap().to_owned(),
                        c["transmissions"].as_u64().unwrap(),
                        c["latency_us"].as_u64(),
                    )
                })
                .collect();
            copies.sort();
            let key = (
                m["flow"].as_str().unwrap().to_owned(),
                m["id"].as_str().unwrap().to_owned(),
            );
            (key, copies)
        })
        .collect()
}

/// Outages as (path, start, end).
fn outages(lines: &[Value]) -> Vec<(String, u64, Option<u64>)> {
    let mut v: Vec<_> = of_type(lines, "outage")
        .into_iter()
        .map(|o| {
            (
                o["path"].as_str().unwrap().to_owned(),
                o["start_ns"].as_u64().unwrap(),
                o["end_ns"].as_u64(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
#[ignore = "needs root"]
fn capture_json_equals_analyze_of_the_same_packets_and_sigterm_ends_with_a_summary() {
    let mut bed = Bed::new("cj");
    let out = bed.path("out.jsonl");
    let dumps = [bed.path("eth0.pcap"), bed.path("eth1.pcap")];
    let d0 = bed.tcpdump(0, &dumps[0]);
    let d1 = bed.tcpdump(1, &dumps[1]);
    let pcaps = bed.path("pcap");
    // The files keep each frame's headers and 34 bytes of the KCP payload (of 120).
    let mut args = vec![
        "--json".to_owned(),
        out.display().to_string(),
        "--pcap".to_owned(),
        pcaps.display().to_string(),
        "--pcap-snaplen".to_owned(),
        "100".to_owned(),
    ];
    args.extend(bed.interfaces());
    let cap = bed.capture(&args);
    wait_for_header(&out);
    std::thread::sleep(Duration::from_millis(500));
    bed.traffic(0..300, 100..200);
    // Let the last ACKs and the message timeout pass before the stop.
    std::thread::sleep(Duration::from_secs(3));
    let (code, err) = bed.end(cap, libc::SIGTERM);
    assert_eq!(code, Some(0), "{err}");
    bed.end(d0, libc::SIGTERM);
    bed.end(d1, libc::SIGTERM);

    let captured = lines(&out);
    assert_eq!(captured[0]["type"], "header");
    let summary = captured.last().unwrap();
    assert_eq!(summary["type"], "summary");
    assert_eq!(summary["stopped_by"], "sigterm");
    assert!(summary["redundancy"].is_array() && summary["latency"].is_object());
    assert!(summary["health"].is_object() && summary["amplification"].is_array());
    // A window every second, messages or not.
    let windows = of_type(&captured, "window").len();
    assert!(windows >= 8, "{windows} windows");

    // `replay` reads every record but the capture's own gap records.
    let recording = tboxscope::replay::load(&out).unwrap();
    assert!(recording.skipped.is_empty(), "{:?}", recording.skipped);
    assert!(recording
        .items
        .iter()
        .any(|t| matches!(t.item, tboxscope::replay::load::Item::Summary(_))));

    // The write-through files, and tcpdump's captures as an independent check of them.
    let written = [pcaps.join("eth0.pcapng"), pcaps.join("eth1.pcapng")];
    let analyzed = analyze(&bed, "written.jsonl", &written);
    let dumped = analyze(&bed, "dumped.jsonl", &dumps);
    let (live, offline) = (messages(&captured), messages(&analyzed));
    assert_eq!(live.len(), 300, "{live:?}");
    let both = live.values().filter(|c| c.len() == 2).count();
    assert!(both >= 290, "{both} messages on both paths");
    assert_eq!(live, offline);
    assert_eq!(offline, messages(&dumped));
    // Cut, the files tell the wire's bytes, as tcpdump's whole captures do.
    let summary_of = |lines: &[Value]| lines.last().unwrap().clone();
    let (cut, whole) = (summary_of(&analyzed), summary_of(&dumped));
    assert!(
        cut["frames"]["udp_cut"].as_u64().unwrap() >= 600,
        "{}",
        cut["frames"]
    );
    assert_eq!(cut["frames"]["net_rejected"]["truncated"], 0);
    let bytes = |s: &Value| -> Vec<(Value, Value)> {
        let paths = s["paths"].as_array().unwrap();
        paths
            .iter()
            .map(|p| (p["label"].clone(), p["bytes"].clone()))
            .collect()
    };
    assert_eq!(bytes(&cut), bytes(&whole));
    // (pcapng spends 16 bytes more per packet than pcap: whole, the files would be larger.)
    for (w, d) in written.iter().zip(&dumps) {
        let size = |f: &PathBuf| std::fs::metadata(f).unwrap().len();
        assert!(size(w) < size(d), "{w:?} {} vs {d:?} {}", size(w), size(d));
    }
    let (live, offline) = (outages(&captured), outages(&analyzed));
    assert!(
        live.iter().any(|o| o.0 == "eth1"),
        "no outage of eth1: {live:?}"
    );
    assert_eq!(live, offline);
    assert_eq!(offline, outages(&dumped));
}

#[test]
#[ignore = "needs root"]
fn flows_beyond_max_flows_are_evicted_and_counted() {
    let mut bed = Bed::new("cf");
    let out = bed.path("out.jsonl");
    let mut args = vec![
        "--json".to_owned(),
        out.display().to_string(),
        "--no-tcp".to_owned(),
        "--max-flows".to_owned(),
        "16".to_owned(),
    ];
    args.extend(bed.interfaces());
    let cap = bed.capture(&args);
    wait_for_header(&out);
    // 40 conversations (a flow each, its copies on both paths), each from new ports, 3
    // segments each.
    for k in 0..40u32 {
        let socks = bed.sockets();
        for sn in 0..3u32 {
            let payload: Vec<u8> = (0..64u32).map(|j| (k * 7 + sn * 3 + j) as u8).collect();
            let seg = kcp_segment(CONV + 1 + k, PUSH, 0, 128, sn, sn, sn, &payload);
            for s in &socks {
                s.send(&seg).unwrap();
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    let (code, err) = bed.end(cap, libc::SIGTERM);
    assert_eq!(code, Some(0), "{err}");
    let captured = lines(&out);
    let summary = captured.last().unwrap();
    assert_eq!(summary["type"], "summary");
    let evicted = summary["health"]["evicted_flows"].as_u64().unwrap();
    assert!(
        evicted >= 24,
        "{evicted} flows evicted of 40 with --max-flows 16"
    );
    let kept = summary["flows"].as_array().unwrap().len();
    assert!(kept <= 16, "{kept} flows in the summary");
}

/// `analyze --json` of `files` into `name`; its records.
fn analyze(bed: &Bed, name: &str, files: &[PathBuf]) -> Vec<Value> {
    let file = bed.path(name);
    let status = Command::new(BIN)
        .args(["analyze", "--json"])
        .arg(&file)
        .args(files)
        .status()
        .unwrap();
    assert!(status.success(), "analyze {files:?}");
    let got = lines(&file);
    let summary = got.last().unwrap();
    assert_eq!(summary["errors"], serde_json::json!([]), "{files:?}");
    got
}

#[test]
#[ignore = "needs root"]
fn sigkill_leaves_whole_lines() {
    let mut bed = Bed::new("ck");
    let out = bed.path("out.jsonl");
    let pcaps = bed.path("pcap");
    let mut args = vec![
        "--json".to_owned(),
        out.display().to_string(),
        "--packets".to_owned(),
        "--no-tcp".to_owned(),
        "--pcap".to_owned(),
        pcaps.display().to_string(),
    ];
    args.extend(bed.interfaces());
    let cap = bed.capture(&args);
    wait_for_header(&out);
    bed.traffic(0..120, 0..0);
    bed.end(cap, libc::SIGKILL);
    // Each pcapng file reads to its end without an error: it ends at a whole block.
    let written = [pcaps.join("eth0.pcapng"), pcaps.join("eth1.pcapng")];
    for f in &written {
        let got = analyze(&bed, "written.jsonl", std::slice::from_ref(f));
        let frames = got.last().unwrap()["files"][0]["frames"].as_u64().unwrap();
        // 240 frames in 2.4 s, written at least once per second.
        assert!(frames >= 100, "{f:?}: {frames} frames");
    }
    let text = std::fs::read(&out).unwrap();
    assert_eq!(text.last(), Some(&b'\n'));
    let got = lines(&out);
    assert!(
        of_type(&got, "kcp_segment").len() > 100,
        "packets written within a second of arriving"
    );
}

/// A tmpfs mounted for the test, unmounted on drop.
struct Tmpfs(PathBuf);

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
#[ignore = "needs root"]
fn a_full_disk_stops_writing_with_counts() {
    let mut bed = Bed::new("cf");
    let mount = bed.path("small");
    std::fs::create_dir(&mount).unwrap();
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=48k", "tbxcap"])
        .arg(&mount)
        .status()
        .unwrap();
    assert!(ok.success());
    let _mounted = Tmpfs(mount.clone());
    let out = mount.join("out.jsonl");
    let pcaps = mount.join("pcap");
    let mut args = vec![
        "--json".to_owned(),
        out.display().to_string(),
        "--packets".to_owned(),
        "--no-tcp".to_owned(),
        "--pcap".to_owned(),
        pcaps.display().to_string(),
        "--duration".to_owned(),
        "20s".to_owned(),
    ];
    args.extend(bed.interfaces());
    let cap = bed.capture(&args);
    wait_for_header(&out);
    bed.traffic(0..200, 0..0);
    let child = &mut bed.children[cap];
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "capture did not stop on a full disk"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (code, err) = bed.end(cap, 0);
    assert_eq!(code, Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    assert!(err.contains("not written"), "{err}");
    let text = std::fs::read(&out).unwrap();
    assert_eq!(text.last(), Some(&b'\n'), "the file ends at a whole line");
    lines(&out);
    // The pcapng files end at a whole block: they read without an error.
    for f in [pcaps.join("eth0.pcapng"), pcaps.join("eth1.pcapng")] {
        analyze(&bed, "written.jsonl", std::slice::from_ref(&f));
    }
}

#[test]
#[ignore = "needs root"]
fn an_interface_deleted_and_recreated_is_reopened_and_the_gap_recorded() {
    let mut bed = Bed::new("cr");
    let out = bed.path("out.jsonl");
    let mut args = vec!["--json".to_owned(), out.display().to_string()];
    args.push("--no-tcp".to_owned());
    args.extend(bed.interfaces());
    let cap = bed.capture(&args);
    wait_for_header(&out);
    bed.traffic(0..50, 0..0);
    bed.lab.delete_pair(1);
    std::thread::sleep(Duration::from_secs(2));
    bed.lab.add_pair(1);
    std::thread::sleep(Duration::from_secs(1));
    bed.traffic(50..100, 0..0);
    std::thread::sleep(Duration::from_secs(2));
    let (code, err) = bed.end(cap, libc::SIGINT);
    assert_eq!(code, Some(0), "{err}");
    let got = lines(&out);
    let lost = of_type(&got, "capture_lost");
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert_eq!(lost[0]["path"], "eth1");
    let gaps = of_type(&got, "capture_gap");
    assert_eq!(gaps.len(), 1, "{gaps:?}");
    let gap = gaps[0]["gap_s"].as_f64().unwrap();
    assert!((1.5..10.0).contains(&gap), "gap {gap} s");
    // Replay shows them among the events, as the live UI's status line showed them.
    let recording = tboxscope::replay::load(&out).unwrap();
    assert!(recording.skipped.is_empty(), "{:?}", recording.skipped);
    let notes = recording
        .items
        .iter()
        .filter(|t| matches!(t.item, tboxscope::replay::load::Item::CaptureNote(_)))
        .count();
    assert_eq!(notes, 2);
    let summary = got.last().unwrap();
    assert_eq!(summary["stopped_by"], "sigint");
    assert_eq!(summary["capture"][1]["lost"], 1);
    // Packets of the second burst reached the engine on the reopened path too.
    let late = messages(&got)
        .into_iter()
        .filter(|((_, id), copies)| {
            id.rsplit(' ')
                .next()
                .and_then(|sn| sn.parse::<u32>().ok())
                .is_some_and(|sn| sn >= 50)
                && copies.iter().any(|c| c.0 == "eth1")
        })
        .count();
    assert!(late >= 45, "{late} late messages with a copy on eth1");
}

#[test]
#[ignore = "needs root"]
fn json_and_pcapng_files_rotate_by_size_and_a_few_are_kept() {
    let mut bed = Bed::new("co");
    let out = bed.path("out.jsonl");
    let pcaps = bed.path("pcap");
    let mut args = vec![
        "--json".to_owned(),
        out.display().to_string(),
        "--packets".to_owned(),
        "--no-tcp".to_owned(),
        "--pcap".to_owned(),
        pcaps.display().to_string(),
        "--rotate".to_owned(),
        "20kB".to_owned(),
        "--keep".to_owned(),
        "2".to_owned(),
    ];
    args.extend(bed.interfaces());
    let cap = bed.capture(&args);
    wait_for_header(&out);
    bed.traffic(0..200, 0..0);
    std::thread::sleep(Duration::from_secs(1));
    let (code, err) = bed.end(cap, libc::SIGTERM);
    assert_eq!(code, Some(0), "{err}");
    let names = |dir: &Path, ext: &str| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == ext))
            .collect();
        v.sort();
        v
    };
    // 200 segments and ACKs on two paths with --packets: well over 3 × 20 kB of lines.
    let json = names(bed.dir.path(), "jsonl");
    assert_eq!(json.len(), 3, "{json:?}");
    for f in &json {
        let got = lines(f);
        assert_eq!(got[0]["type"], "header", "{f:?}");
    }
    assert_eq!(lines(&out).last().unwrap()["type"], "summary");
    let written = names(&pcaps, "pcapng");
    // eth0 and eth1, each the current file and 2 kept.
    assert_eq!(written.len(), 6, "{written:?}");
    for f in &written {
        let got = analyze(&bed, "rotated.jsonl", std::slice::from_ref(f));
        let frames = got.last().unwrap()["files"][0]["frames"].as_u64().unwrap();
        assert!(frames > 0, "{f:?}");
    }
}

#[test]
#[ignore = "needs root"]
fn json_and_pcapng_files_rotate_by_age_and_a_few_are_kept() {
    let mut bed = Bed::new("ca");
    let out = bed.path("out.jsonl");
    let pcaps = bed.path("pcap");
    let mut args: Vec<String> = ["--json", &out.display().to_string(), "--no-tcp"]
        .into_iter()
        .chain(["--pcap", &pcaps.display().to_string()])
        .chain(["--rotate", "2s", "--keep", "2"])
        .map(str::to_owned)
        .collect();
    args.extend(bed.interfaces());
    let cap = bed.capture(&args);
    wait_for_header(&out);
    // 9 s of traffic: four or more rotations at 2 s, far too few bytes for a size to matter.
    bed.traffic(0..450, 0..0);
    let (code, err) = bed.end(cap, libc::SIGTERM);
    assert_eq!(code, Some(0), "{err}");
    // `STEM.N.EXT`, N counting the closed files from 1.
    let numbered = |dir: &Path, ext: &str| -> Vec<(u64, PathBuf)> {
        let mut v: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == ext))
            .filter_map(|p| {
                let n = p.file_stem()?.to_str()?.rsplit_once('.')?.1.parse().ok()?;
                Some((n, p))
            })
            .collect();
        v.sort();
        v
    };
    let closed = numbered(bed.dir.path(), "jsonl");
    assert_eq!(closed.len(), 2, "2 closed files kept: {closed:?}");
    assert!(closed[1].0 >= 4, "4 or more rotations in 9 s: {closed:?}");
    for (_, f) in &closed {
        let got = lines(f);
        assert_eq!(got[0]["type"], "header", "{f:?}");
        // Windows close every second: a file closed by age holds about two, all within its
        // 2 s (and the second the lines may wait before being written).
        let ends: Vec<u64> = of_type(&got, "window")
            .iter()
            .map(|w| w["end_ns"].as_u64().unwrap())
            .collect();
        assert!(!ends.is_empty(), "{f:?} holds no window");
        let span = ends.iter().max().unwrap() - ends.iter().min().unwrap();
        assert!(span <= 3_000_000_000, "{f:?} spans {span} ns of windows");
        assert!(
            !of_type(&got, "message").is_empty(),
            "{f:?} holds no message"
        );
    }
    assert_eq!(lines(&out).last().unwrap()["type"], "summary");
    let closed_pcaps = numbered(&pcaps, "pcapng");
    // eth0 and eth1, 2 kept each, beside the current file of each.
    assert_eq!(closed_pcaps.len(), 4, "{closed_pcaps:?}");
    assert!(
        closed_pcaps.iter().all(|(n, _)| *n >= 3),
        "{closed_pcaps:?}"
    );
    for (_, f) in &closed_pcaps {
        let got = analyze(&bed, "rotated.jsonl", std::slice::from_ref(f));
        let frames = got.last().unwrap()["files"][0]["frames"].as_u64().unwrap();
        // 2 s of 50 segments/s and their ACKs, give or take the boundaries.
        assert!((100..=320).contains(&frames), "{f:?}: {frames} frames");
    }
}

/// Bulk TCP from the T-Box to the far end over path 0 while 10 % of the segments arriving
/// there are dropped (nftables in the far end's input: the kernel retransmits), beside the KCP
/// traffic of [`Bed::traffic`] (eth1's ACKs cut for 2 s: an outage), under `capture --json`
/// with the TCP probes on (`--port` keeps them to this connection). Returns the recording and
/// the T-Box namespace's TcpRetransSegs.
fn record_tcp_under_loss(bed: &mut Bed, tcp_port: u16) -> (PathBuf, u64) {
    let out = bed.path("out.jsonl");
    let mut args = vec![
        "--json".to_owned(),
        out.display().to_string(),
        "--port".to_owned(),
        tcp_port.to_string(),
    ];
    args.extend(bed.interfaces());
    let cap = bed.capture(&args);
    wait_for_header(&out);
    let (_, cloud_if, tbox_addr, cloud_addr) = bed.lab.links[0].clone();
    let rules = format!(
        "table inet tbxloss {{ chain c {{ type filter hook input priority 0; \
         iifname \"{cloud_if}\" tcp dport {tcp_port} numgen random mod 100 < 10 drop; }}; }}"
    );
    let ok = Command::new("ip")
        .args(["netns", "exec", &bed.lab.cloud, "nft", &rules])
        .status()
        .unwrap();
    assert!(ok.success());
    let listen = format!("{cloud_addr}:{tcp_port}");
    let server = spawn_in(&bed.lab.cloud, move || {
        let l = std::net::TcpListener::bind(&listen).unwrap();
        let (mut s, _) = l.accept().unwrap();
        let mut sink = Vec::new();
        std::io::Read::read_to_end(&mut s, &mut sink).unwrap();
        sink.len()
    });
    std::thread::sleep(Duration::from_millis(200));
    let client = spawn_in(&bed.lab.tbox, move || {
        let sock = std::net::TcpStream::connect((cloud_addr.as_str(), tcp_port)).unwrap();
        assert_eq!(sock.local_addr().unwrap().ip().to_string(), tbox_addr);
        let chunk = vec![0x5au8; 16 << 10];
        let end = Instant::now() + Duration::from_secs(5);
        let mut sent = 0;
        while Instant::now() < end {
            std::io::Write::write_all(&mut &sock, &chunk).unwrap();
            sent += chunk.len();
            std::thread::sleep(Duration::from_millis(5));
        }
        sock.shutdown(std::net::Shutdown::Write).unwrap();
        sent
    });
    bed.traffic(0..300, 100..200);
    let sent = client.join().unwrap();
    assert_eq!(
        server.join().unwrap(),
        sent,
        "every byte arrived in the end"
    );
    let retrans = nstat_retrans(&bed.lab.tbox);
    std::thread::sleep(Duration::from_secs(3));
    let (code, err) = bed.end(cap, libc::SIGTERM);
    assert_eq!(code, Some(0), "{err}");
    (out, retrans)
}

/// `nstat -azs TcpRetransSegs` in namespace `ns`.
fn nstat_retrans(ns: &str) -> u64 {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "nstat", "-azs", "TcpRetransSegs"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| {
            let mut f = l.split_whitespace();
            (f.next()? == "TcpRetransSegs").then(|| f.next()?.parse().ok())?
        })
        .unwrap_or(0)
}

#[test]
#[ignore = "needs root"]
fn tcp_under_loss_is_recorded_beside_the_packets_and_replays_whole() {
    let mut bed = Bed::new("ct");
    let port = 21_000 + (std::process::id() % 20_000) as u16;
    let (out, kernel_retrans) = record_tcp_under_loss(&mut bed, port);
    let got = lines(&out);
    let port_s = format!(":{port}");
    let retransmits: Vec<&Value> = of_type(&got, "tcp_retransmit")
        .into_iter()
        .filter(|r| r["source"] != "wire" && r["dst"].as_str().unwrap().ends_with(&port_s))
        .collect();
    assert!(
        !retransmits.is_empty(),
        "no tcp_retransmit of the lossy connection ({kernel_retrans} in the kernel)"
    );
    let off_path = retransmits.iter().filter(|r| r["path"] != "eth0").count();
    assert_eq!(off_path, 0, "records not named by eth0, the socket's path");
    let last_total = retransmits
        .iter()
        .filter_map(|r| r["total_retrans"].as_u64())
        .max()
        .unwrap();
    assert!(
        last_total <= kernel_retrans && retransmits.len() as u64 <= kernel_retrans,
        "{} records, total_retrans {last_total}, kernel {kernel_retrans}",
        retransmits.len()
    );
    // The packet side beside it: the KCP messages, eth1's outage.
    let messages = messages(&got);
    assert_eq!(messages.len(), 300);
    assert!(outages(&got).iter().any(|o| o.0 == "eth1"));
    assert_eq!(got.last().unwrap()["type"], "summary");
    let recording = tboxscope::replay::load(&out).unwrap();
    assert!(recording.skipped.is_empty(), "{:?}", recording.skipped);
    assert_eq!(recording.skipped_text(), "none");
}

/// The figures of a path, flow or outage the screens show, as comparable text.
fn screen_figures(snap: &tboxscope_engine::snapshot::Snapshot) -> Vec<String> {
    let p = |q: &tboxscope_engine::snapshot::Percentiles| {
        format!(
            "n={} min={} p50={} p90={} p99={} p999={} max={}",
            q.count, q.min_us, q.p50_us, q.p90_us, q.p99_us, q.p999_us, q.max_us
        )
    };
    let mut v = Vec::new();
    for path in &snap.paths {
        // The retransmission rate is compared apart (see the test).
        v.push(format!(
            "path {}: latency {} loss {:.4}",
            path.label,
            p(&path.latency),
            path.loss_rate,
        ));
    }
    for r in &snap.redundancy {
        let shares: Vec<String> = r
            .paths
            .iter()
            .map(|s| format!("{} carried {} only {}", s.path, s.carried, s.only))
            .collect();
        v.push(format!(
            "redundancy {}: {} messages, {} on all paths, {} sent on all, {:?}, spacing {}, {}",
            r.flow,
            r.messages,
            r.on_all_paths,
            r.sent_on_all_paths,
            shares,
            p(&r.copy_spacing),
            r.verdict
        ));
    }
    for (path, q) in &snap.latency.per_path {
        v.push(format!("latency {path}: {}", p(q)));
    }
    v.push(format!("latency combined: {}", p(&snap.latency.combined)));
    v.push(format!("latency verdict: {}", snap.latency.verdict));
    let mut outages: Vec<String> = snap
        .outages
        .iter()
        .map(|o| format!("outage {} {} {:?}", o.path, o.start_ns, o.end_ns))
        .collect();
    outages.sort();
    v.extend(outages);
    v.push(format!(
        "totals: {} outages, {} incidents ({} listed)",
        snap.outages_total,
        snap.incidents_total,
        snap.incidents.len()
    ));
    v
}

#[test]
#[ignore = "needs root"]
fn replay_of_a_capture_shows_what_the_live_engine_ended_with() {
    use tboxscope::replay::load::Item;
    use tboxscope::replay::{PlayOptions, Player};
    let mut bed = Bed::new("cr");
    let port = 22_000 + (std::process::id() % 20_000) as u16;
    let (out, _) = record_tcp_under_loss(&mut bed, port);
    let recording = tboxscope::replay::load(&out).unwrap();
    assert!(recording.skipped.is_empty(), "{:?}", recording.skipped);
    let end = recording.end_ns();
    // The live engine's figures at the end: the capture's summary (the feed's engine, the one
    // the live UI draws from).
    let summary = recording
        .items
        .iter()
        .find_map(|t| match &t.item {
            Item::Summary(s) => Some(s.as_ref().clone()),
            _ => None,
        })
        .unwrap();
    let live = tboxscope_engine::snapshot::Snapshot {
        paths: summary.paths.clone(),
        redundancy: summary.redundancy.clone(),
        latency: summary.latency.clone(),
        outages: summary.outages.clone(),
        incidents: summary.hol_incidents.clone(),
        outages_total: summary.outages_total,
        incidents_total: summary.incidents_total,
        ..Default::default()
    };
    // What replay shows before it reaches the summary: folded from the messages, windows,
    // outages and incidents alone.
    let mut folded_only = recording.clone();
    folded_only
        .items
        .retain(|t| !matches!(t.item, Item::Summary(_)));
    let paused = || PlayOptions {
        paused: true,
        ..PlayOptions::default()
    };
    let mut player = Player::new(folded_only, paused());
    player.seek_to(end);
    let folded = player.snapshot();
    let (want, got) = (screen_figures(&live), screen_figures(&folded));
    for (w, g) in want.iter().zip(&got) {
        if w != g {
            eprintln!("live:   {w}\nreplay: {g}");
        }
    }
    assert_eq!(want, got);
    // The one figure a recording without --packets cannot give before its summary: eth0's
    // share of data sends retransmitted counts the TCP segments the kernel sent again (seen
    // live as packets); the KCP messages, sent once, are all the fold has. From the summary
    // on (the end of the recording), replay shows the live figure.
    let rate = |s: &tboxscope_engine::snapshot::Snapshot, path: &str| {
        s.paths
            .iter()
            .find(|p| p.label == path)
            .map(|p| p.retransmission_rate)
            .unwrap()
    };
    assert!(rate(&live, "eth0") > 0.0);
    assert!(rate(&folded, "eth0").abs() < f64::EPSILON);
    assert!((rate(&live, "eth1") - rate(&folded, "eth1")).abs() < f64::EPSILON);

    // The TCP screen: the socket on eth0 with the kernel's last figures and every
    // retransmission the capture recorded.
    let mut player = Player::new(recording, paused());
    player.seek_to(end);
    let snap = player.snapshot();
    assert_eq!(screen_figures(&snap), want, "at the end, the live figures");
    assert!((rate(&snap, "eth0") - rate(&live, "eth0")).abs() < f64::EPSILON);
    let port_s = format!(":{port}");
    // Both ends of the connection run on this one kernel (two namespaces) and the probes see
    // both; the engine keys a socket by its address pair, so the far end's records land on
    // the same socket (not the listener's). The connection's kernel records (not the wire
    // matcher's of the same types) in replay's (time) order.
    let is_port = |r: &Value, k: &str| r[k].as_str().is_some_and(|d| d.ends_with(&port_s));
    let is_any = |r: &Value, k: &str| r[k].as_str().is_some_and(|d| d.starts_with("0.0.0.0"));
    let mut records: Vec<Value> = lines(&out)
        .into_iter()
        .filter(|r| {
            (is_port(r, "dst") || is_port(r, "src"))
                && !is_any(r, "dst")
                && !is_any(r, "src")
                && r["source"] != "wire"
        })
        .collect();
    records.sort_by(|a, b| a["ts"].as_str().cmp(&b["ts"].as_str()));
    let sockets: Vec<_> = snap
        .flows
        .tcp
        .iter()
        .filter(|s| s.socket.contains(&port_s))
        .collect();
    assert_eq!(sockets.len(), 1, "one socket: {:?}", snap.flows.tcp.len());
    let socket = sockets[0];
    assert_eq!(socket.path, "eth0");
    // A resend the kernel failed to send (`err` ≠ 0: -EBUSY while the original still sits in
    // a queue below, as on a loaded two-core machine in CI) is recorded but is no
    // retransmission: live and replay both take it as a sample of the socket's figures.
    let retransmits: Vec<&Value> = records
        .iter()
        .filter(|r| r["type"] == "tcp_retransmit" && r["err"] == 0)
        .collect();
    // The backoff ladder holds the newest retransmissions (bounded, as live).
    let ladder = &socket.retransmissions;
    assert!(!ladder.is_empty() && ladder.len() <= retransmits.len());
    let newest = retransmits[retransmits.len() - ladder.len()..]
        .iter()
        .map(|r| r["seq"].as_u64().unwrap())
        .collect::<Vec<_>>();
    let shown: Vec<u64> = ladder.iter().map(|r| u64::from(r.seq)).collect();
    assert_eq!(shown, newest);
    // The socket's figures are its last record's. (A `tcp_backoff_end` carries none, and the
    // engine then shows zeros, live as in replay; the figures are checked when the last record
    // carries them.)
    let last = records.last().unwrap();
    if !last["cwnd"].is_u64() {
        assert_eq!(last["type"], "tcp_backoff_end");
        return;
    }
    let figures = &socket.figures;
    assert_eq!(u64::from(figures.cwnd), last["cwnd"].as_u64().unwrap());
    assert_eq!(
        u64::from(figures.ssthresh),
        last["ssthresh"].as_u64().unwrap()
    );
    assert_eq!(
        u64::from(figures.srtt_us),
        last["srtt_us"].as_u64().unwrap()
    );
}
