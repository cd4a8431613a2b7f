//! Benchmark of the eBPF TCP probes (BENCHMARKS.md, "TCP probes"). Needs root.
//!
//! `cargo run --release -p probe-user --example tcp_probes_bench`
//!
//! Over a veth pair between two namespaces it measures, in one run:
//! 1. bulk TCP throughput without probes, with all probes attached (capture running, JSON to
//!    a sink), and without again; ratio = with / median(without);
//! 2. request/response latency (64-byte ping-pong) P50/P99 without vs with;
//! 3. the ring-buffer event rate with `tcp_probe` thinning off (every ACK an event), and the
//!    drops; kernel ns/event from `bpftool prog show` (run_time_ns / run_cnt) with
//!    `kernel.bpf_stats_enabled=1`.
// A benchmark harness, like a test: any failure should stop it loudly.
#![allow(clippy::unwrap_used)]

use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use probe_user::capture::{self, CaptureOptions, Summary};
use probe_user::source::ebpf::{ProbeOptions, TcpFilter};

const BULK_BYTES: u64 = 1 << 30;
const PINGS: usize = 20_000;

struct Net {
    a: String,
    b: String,
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn sh(args: &[&str]) {
    let st = Command::new(args[0])
        .args(&args[1..])
        .status()
        .expect("spawn");
    assert!(st.success(), "{args:?}");
}

fn net() -> Net {
    let pid = std::process::id();
    let n = Net {
        a: format!("tbxba{pid}"),
        b: format!("tbxbb{pid}"),
    };
    let (va, vb) = (format!("bva{pid}"), format!("bvb{pid}"));
    sh(&["ip", "netns", "add", &n.a]);
    sh(&["ip", "netns", "add", &n.b]);
    sh(&[
        "ip", "link", "add", &va, "type", "veth", "peer", "name", &vb,
    ]);
    sh(&["ip", "link", "set", &va, "netns", &n.a]);
    sh(&["ip", "link", "set", &vb, "netns", &n.b]);
    for (ns, dev, ip) in [(&n.a, &va, "10.203.0.1/24"), (&n.b, &vb, "10.203.0.2/24")] {
        sh(&["ip", "-n", ns, "addr", "add", ip, "dev", dev]);
        sh(&["ip", "-n", ns, "link", "set", dev, "up"]);
        sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
    }
    n
}

fn in_ns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> JoinHandle<T> {
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = File::open(&path).expect("netns");
        // SAFETY: valid netns fd; affects this thread only.
        assert_eq!(
            unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) },
            0
        );
        f()
    })
}

const SERVER: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::new(10, 203, 0, 2)), 5301);

/// Server in `b`: for each connection, a byte 'B' = sink until EOF, 'P' = echo 64-byte pings.
fn server(n: &Net) -> JoinHandle<()> {
    let (tx, rx) = std::sync::mpsc::channel();
    let h = in_ns(&n.b, move || {
        let l = TcpListener::bind(SERVER).expect("bind");
        tx.send(()).ok();
        for c in l.incoming() {
            let Ok(mut c) = c else { break };
            let mut mode = [0u8; 1];
            if c.read_exact(&mut mode).is_err() {
                continue;
            }
            match mode[0] {
                b'B' => {
                    let mut buf = vec![0u8; 1 << 18];
                    while matches!(c.read(&mut buf), Ok(k) if k > 0) {}
                }
                b'P' => {
                    c.set_nodelay(true).ok();
                    let mut m = [0u8; 64];
                    while c.read_exact(&mut m).is_ok() {
                        if c.write_all(&m).is_err() {
                            break;
                        }
                    }
                }
                _ => return,
            }
        }
    });
    rx.recv().expect("server up");
    h
}

fn connect(n: &Net) -> TcpStream {
    in_ns(&n.a, || TcpStream::connect(SERVER).expect("connect"))
        .join()
        .expect("join")
}

fn bulk(n: &Net) -> f64 {
    let mut s = connect(n);
    s.write_all(b"B").unwrap();
    let buf = vec![7u8; 1 << 18];
    let t0 = Instant::now();
    let mut sent = 0u64;
    while sent < BULK_BYTES {
        s.write_all(&buf).unwrap();
        sent += buf.len() as u64;
    }
    s.shutdown(std::net::Shutdown::Write).ok();
    let mut x = [0u8; 1];
    let _ = s.read(&mut x); // waits for the server's close: all data consumed
    sent as f64 * 8.0 / t0.elapsed().as_secs_f64() / 1e9
}

fn pings(n: &Net) -> (f64, f64) {
    let mut s = connect(n);
    s.set_nodelay(true).unwrap();
    s.write_all(b"P").unwrap();
    let mut m = [3u8; 64];
    let mut lat = Vec::with_capacity(PINGS);
    for _ in 0..PINGS {
        let t0 = Instant::now();
        s.write_all(&m).unwrap();
        s.read_exact(&mut m).unwrap();
        lat.push(t0.elapsed().as_nanos() as f64 / 1000.0);
    }
    lat.sort_by(|a, b| a.total_cmp(b));
    (lat[lat.len() / 2], lat[lat.len() * 99 / 100])
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Runs a capture in the background for `secs`, returning its summary.
fn capture_bg(secs: u64, cwnd_interval_ns: u64) -> JoinHandle<Summary> {
    let h = std::thread::spawn(move || {
        let opts = CaptureOptions {
            probe: ProbeOptions {
                filter: TcpFilter::default(),
                cwnd_interval_ns,
                deny: Vec::new(),
            },
            duration: Some(Duration::from_secs(secs)),
            ..CaptureOptions::default()
        };
        capture::run(opts, std::io::sink(), &serde_json::json!({"bench": true})).expect("capture")
    });
    std::thread::sleep(Duration::from_secs(3)); // load + attach
    h
}

fn prog_stats() -> Vec<(String, u64, u64)> {
    let out = Command::new("bpftool")
        .args(["prog", "show", "--json"])
        .output()
        .expect("bpftool");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    v.as_array()
        .map(|a| {
            a.iter()
                .filter(|p| {
                    let n = p["name"].as_str().unwrap_or("");
                    [
                        "tcp_retransmit_",
                        "tcp_probe",
                        "tcp_cong_state_",
                        "inet_sock_set_s",
                    ]
                    .iter()
                    .any(|k| n.starts_with(k))
                })
                .map(|p| {
                    (
                        p["name"].as_str().unwrap_or("").to_owned(),
                        p["run_time_ns"].as_u64().unwrap_or(0),
                        p["run_cnt"].as_u64().unwrap_or(0),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn main() {
    // SAFETY: no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("tcp_probes_bench needs root");
        std::process::exit(2);
    }
    let n = net();
    let _srv = server(&n);
    bulk(&n); // warm-up
    println!("== throughput ({} MiB per round) ==", BULK_BYTES >> 20);
    let mut without = Vec::new();
    let mut with = Vec::new();
    for _ in 0..3 {
        without.push(bulk(&n));
    }
    let cap = capture_bg(25, 100_000_000);
    for _ in 0..3 {
        with.push(bulk(&n));
    }
    let (p50w, p99w) = pings(&n);
    let sum = cap.join().expect("capture thread");
    for _ in 0..3 {
        without.push(bulk(&n));
    }
    let (p50o, p99o) = pings(&n);
    let base = median(without.clone());
    let probed = median(with.clone());
    println!("without probes Gbit/s: {without:.2?}");
    println!("with probes    Gbit/s: {with:.2?}");
    println!(
        "throughput ratio (median with / median without): {:.3}",
        probed / base
    );
    println!(
        "capture during it: {} events, drops {:?}",
        sum.events, sum.drops
    );
    println!("== request/response latency ({PINGS} x 64 B) ==");
    println!("without: p50 {p50o:.1} us  p99 {p99o:.1} us");
    println!("with:    p50 {p50w:.1} us  p99 {p99w:.1} us");
    println!("p99 change: {:+.1}%", (p99w / p99o - 1.0) * 100.0);

    println!("== event rate (tcp_probe thinning off: an event per incoming segment) ==");
    let _ = std::fs::write("/proc/sys/kernel/bpf_stats_enabled", "1");
    let cap = capture_bg(12, 0);
    let before = prog_stats();
    let t0 = Instant::now();
    let mut gbits = Vec::new();
    for _ in 0..3 {
        gbits.push(bulk(&n));
    }
    let (_, _) = pings(&n);
    let secs = t0.elapsed().as_secs_f64();
    let after = prog_stats();
    let sum = cap.join().expect("capture thread");
    let _ = std::fs::write("/proc/sys/kernel/bpf_stats_enabled", "0");
    println!(
        "events {} in {:.2} s of traffic = {:.0} events/s; drops {:?}",
        sum.events,
        secs,
        sum.events as f64 / secs,
        sum.drops
    );
    for (name, t1, c1) in &after {
        let (t0, c0) = before
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, t, c)| (*t, *c))
            .unwrap_or((0, 0));
        let (dt, dc) = (t1.saturating_sub(t0), c1.saturating_sub(c0));
        if dc > 0 {
            println!(
                "kernel {name:<24} runs {dc:>9}  {:.0} ns/run",
                dt as f64 / dc as f64
            );
        }
    }
}
