//! Benchmark of the eBPF TCP probes (BENCHMARKS.md, "TCP probes"). Needs root.
//!
//! `cargo run --release -p probe-user --example tcp_probes_bench [-- ROUNDS]`
//!
//! Over veth pairs between namespaces it measures, in one run:
//! 1. overhead: rounds of bulk TCP throughput and 64-byte ping-pong latency without probes and
//!    with all probes attached (a capture writing JSON to a sink, default thinning), the two
//!    modes interleaved (ABBA order) so drift hits both; medians, spread and per-round ratios;
//! 2. kernel cost per program run (`bpftool prog show` run_time_ns / run_cnt with
//!    `kernel.bpf_stats_enabled=1`, only while measuring it, since the stats cost time too);
//! 3. capacity: `tcp_probe` thinning off (`--cwnd-interval 0`: an event per incoming segment),
//!    parallel flows of small TCP_NODELAY writes (many segments and ACKs); events per second
//!    delivered to user space (the capture's own count), ring drops, the reader's CPU time
//!    per event, and how much CPU other (niced) processes took meanwhile.
//!    `CAP_FLOWS`, `CAP_WRITE`, `CAP_MSS`, `CAP_GSO` change the traffic; `ROUNDS` = 0 skips 1-2;
//! 4. ring buffer capacity (alone: `tcp_probes_bench ring`): the real TCP stack of a 2-vCPU VM
//!    cannot make enough segments to find the ring buffer's limit, so one thread calls
//!    `getppid()` at offered rates and the `ring_load` program (attached for this only) turns
//!    each call into a synthetic cwnd event through the same `emit`, ring buffer, reader,
//!    decoder, tracker and JSON encoding; per rate: events made, delivered, dropped, and the
//!    reader's CPU per event.
// A benchmark harness, like a test: any failure should stop it loudly.
#![expect(clippy::unwrap_used)]

use std::fs::File;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use probe_user::capture::{self, CaptureOptions, Summary};
use probe_user::source::ebpf::{HookState, ProbeOptions, TcpFilter};

const BULK_BYTES: u64 = 1 << 30;
const PINGS: usize = 20_000;
const DEFAULT_ROUNDS: usize = 6;
/// Parallel flows of the capacity phase (`CAP_FLOWS`).
const FLOWS: u64 = 8;
/// Bytes per write in the capacity phase (`CAP_WRITE`): small writes with TCP_NODELAY and
/// autocorking off, so segments (and ACKs) are many. Measured here, this gives more segments
/// per second than a small MSS with GSO off (`CAP_MSS`, `CAP_GSO`), which collapses.
const SMALL_WRITE: u64 = 64;
const CAPACITY_SECS: u64 = 8;
const PROGRAMS: [&str; 5] = [
    "tcp_retransmit_",
    "tcp_probe",
    "tcp_cong_state_",
    "inet_sock_set_s",
    "ring_load",
];
/// Seconds per rate step of the ring-buffer phase.
const RING_STEP_SECS: u64 = 3;
/// Offered rates of the ring-buffer phase (events/s); 0 = as fast as one thread can.
const RING_RATES: [u64; 6] = [250_000, 500_000, 750_000, 1_000_000, 1_500_000, 0];

struct Net {
    a: String,
    b: String,
    server: SocketAddr,
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

/// Two namespaces joined by a veth pair on `10.20<n>.0.0/24`; `gso_segs` caps the segments per
/// packet the sender may build (1 = every segment its own packet).
fn net(n: u8, gso_segs: Option<u32>) -> Net {
    let pid = std::process::id();
    let net = Net {
        a: format!("tbxb{n}a{pid}"),
        b: format!("tbxb{n}b{pid}"),
        server: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 203 + n, 0, 2)), 5301),
    };
    let (va, vb) = (format!("b{n}va{pid}"), format!("b{n}vb{pid}"));
    sh(&["ip", "netns", "add", &net.a]);
    sh(&["ip", "netns", "add", &net.b]);
    sh(&[
        "ip", "link", "add", &va, "type", "veth", "peer", "name", &vb,
    ]);
    sh(&["ip", "link", "set", &va, "netns", &net.a]);
    sh(&["ip", "link", "set", &vb, "netns", &net.b]);
    for (ns, dev, ip) in [
        (&net.a, &va, format!("10.{}.0.1/24", 203 + n)),
        (&net.b, &vb, format!("10.{}.0.2/24", 203 + n)),
    ] {
        sh(&["ip", "-n", ns, "addr", "add", &ip, "dev", dev]);
        if let Some(segs) = gso_segs {
            sh(&[
                "ip",
                "-n",
                ns,
                "link",
                "set",
                dev,
                "gso_max_segs",
                &segs.to_string(),
            ]);
        }
        sh(&["ip", "-n", ns, "link", "set", dev, "up"]);
        sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
    }
    net
}

fn in_ns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> JoinHandle<T> {
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = File::open(&path).expect("netns");
        // SAFETY: valid netns fd; affects this thread only.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0);
        f()
    })
}

/// Server in `b`: for each connection, a byte 'B' = sink until EOF, 'P' = echo 64-byte pings.
fn server(n: &Net) {
    let (tx, rx) = std::sync::mpsc::channel();
    let addr = n.server;
    // Detached: ends with the process (the namespace is deleted on drop).
    let _ = in_ns(&n.b, move || {
        let l = TcpListener::bind(addr).expect("bind");
        tx.send(()).ok();
        for c in l.incoming() {
            let Ok(mut c) = c else { break };
            std::thread::spawn(move || {
                let mut mode = [0u8; 1];
                if c.read_exact(&mut mode).is_err() {
                    return;
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
                    _ => {}
                }
            });
        }
    });
    rx.recv().expect("server up");
}

fn connect(n: &Net, mss: Option<i32>) -> TcpStream {
    let addr = n.server;
    in_ns(&n.a, move || {
        let s = socket2_connect(addr, mss);
        s.expect("connect")
    })
    .join()
    .expect("join")
}

/// Connects, setting TCP_MAXSEG before the handshake when asked.
fn socket2_connect(addr: SocketAddr, mss: Option<i32>) -> std::io::Result<TcpStream> {
    let Some(mss) = mss else {
        return TcpStream::connect(addr);
    };
    // SAFETY: plain socket syscalls on a fresh fd owned below by TcpStream.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let s = <TcpStream as std::os::fd::FromRawFd>::from_raw_fd(fd);
        let v: libc::c_int = mss;
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_MAXSEG,
            (&raw const v).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        let IpAddr::V4(ip) = addr.ip() else {
            unreachable!("IPv4 bench")
        };
        let sin = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: addr.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes(ip.octets()),
            },
            sin_zero: [0; 8],
        };
        if libc::connect(
            fd,
            (&raw const sin).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        Ok(s)
    }
}

fn bulk(n: &Net) -> f64 {
    let mut s = connect(n, None);
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

/// 64-byte ping-pong; returns (P50, P99) in µs.
fn pings(n: &Net) -> (f64, f64) {
    let mut s = connect(n, None);
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
    lat.sort_by(f64::total_cmp);
    (lat[lat.len() / 2], lat[lat.len() * 99 / 100])
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let k = v.len();
    if k % 2 == 1 {
        v[k / 2]
    } else {
        (v[k / 2 - 1] + v[k / 2]) / 2.0
    }
}

fn spread(v: &[f64]) -> (f64, f64) {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lo, hi)
}

/// A capture running in the background until [`Capture::stop`].
struct Capture {
    stop: tokio::sync::oneshot::Sender<()>,
    thread: JoinHandle<Summary>,
    /// Kernel thread id of the capture's (single) thread.
    tid: i32,
}

impl Capture {
    fn start(cwnd_interval_ns: u64) -> Self {
        Self::start_with(cwnd_interval_ns, None)
    }

    /// With `load_generator`: the probes also turn this process's `getppid()` calls into
    /// synthetic events.
    fn start_with(cwnd_interval_ns: u64, load_generator: Option<u32>) -> Self {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (up_tx, up_rx) = std::sync::mpsc::channel::<()>();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel::<i32>();
        let thread = std::thread::spawn(move || {
            // SAFETY: no preconditions.
            tid_tx.send(unsafe { libc::gettid() }).ok();
            let opts = CaptureOptions {
                probe: ProbeOptions {
                    filter: TcpFilter::default(),
                    cwnd_interval_ns,
                    deny: Vec::new(),
                    load_generator,
                },
                stop: Some(rx),
                ..CaptureOptions::default()
            };
            // The header is written once the probes are attached.
            let out = Ready {
                tx: Some(up_tx),
                inner: std::io::sink(),
            };
            capture::run(opts, out, &serde_json::json!({"bench": true})).expect("capture")
        });
        up_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("capture attached");
        let tid = tid_rx.recv().expect("capture thread id");
        Self {
            stop: tx,
            thread,
            tid,
        }
    }

    /// CPU time the capture thread has used so far (user + system), in seconds.
    fn cpu_s(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{}/stat", self.tid))
            .unwrap_or_default();
        // Fields after the ")" closing the command name: state is field 3, utime 14, stime 15.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        // SAFETY: no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        (ticks(11) + ticks(12)) / hz
    }

    fn stop(self) -> Summary {
        self.stop.send(()).ok();
        let s = self.thread.join().expect("capture thread");
        for h in &s.hooks {
            assert!(
                matches!(h.state, HookState::Attached),
                "hook {} not attached: {:?}",
                h.name,
                h.state
            );
        }
        s
    }
}

/// A writer that signals on its first write (the capture's header: probes attached).
struct Ready<W> {
    tx: Option<std::sync::mpsc::Sender<()>>,
    inner: W,
}

impl<W: Write> Write for Ready<W> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if let Some(tx) = self.tx.take() {
            tx.send(()).ok();
        }
        self.inner.write(b)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// One loaded TCP program: (id, name, run_time_ns, run_cnt).
type ProgStat = (u64, String, u64, u64);

/// Every loaded program with a tboxscope TCP hook's name (this process's and any other's).
fn prog_stats() -> Vec<ProgStat> {
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
                    PROGRAMS.iter().any(|k| n.starts_with(k))
                })
                .map(|p| {
                    (
                        p["id"].as_u64().unwrap_or(0),
                        p["name"].as_str().unwrap_or("").to_owned(),
                        p["run_time_ns"].as_u64().unwrap_or(0),
                        p["run_cnt"].as_u64().unwrap_or(0),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Ids of TCP programs loaded now (to tell a capture's own programs from other processes').
fn prog_ids() -> Vec<u64> {
    prog_stats().into_iter().map(|p| p.0).collect()
}

/// Per program: (name, ours, runs, ns/run) between two readings; `ours` = not loaded before
/// our capture started (`earlier` ids).
fn stats_delta(
    before: &[ProgStat],
    after: &[ProgStat],
    earlier: &[u64],
) -> Vec<(String, bool, u64, f64)> {
    after
        .iter()
        .filter_map(|(id, name, t1, c1)| {
            let (t0, c0) = before
                .iter()
                .find(|p| p.0 == *id)
                .map_or((0, 0), |p| (p.2, p.3));
            let (dt, dc) = (t1.saturating_sub(t0), c1.saturating_sub(c0));
            (dc > 0).then(|| {
                (
                    name.clone(),
                    !earlier.contains(id),
                    dc,
                    dt as f64 / dc as f64,
                )
            })
        })
        .collect()
}

fn print_stats(stats: &[(String, bool, u64, f64)], secs: f64) {
    for (name, ours, runs, ns) in stats {
        let whose = if *ours {
            "this capture"
        } else {
            "ANOTHER PROCESS's copy"
        };
        println!(
            "kernel {name:<20} {whose:<22} runs {runs:>9} ({:>7.0}/s)  {ns:>5.0} ns/run",
            *runs as f64 / secs
        );
    }
}

fn bpf_stats(on: bool) {
    let _ = std::fs::write(
        "/proc/sys/kernel/bpf_stats_enabled",
        if on { "1" } else { "0" },
    );
}

/// Prints warnings (and with `RUST_LOG=debug`, the verifier's full log) to stderr.
struct StderrLog;

impl log::Log for StderrLog {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::max_level()
    }
    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) {
            eprintln!("{} {}: {}", r.level(), r.target(), r.args());
        }
    }
    fn flush(&self) {}
}

fn main() {
    let debug = std::env::var("RUST_LOG").is_ok_and(|v| v.contains("debug"));
    log::set_max_level(if debug {
        log::LevelFilter::Debug
    } else {
        log::LevelFilter::Warn
    });
    let _ = log::set_logger(&StderrLog);
    // SAFETY: no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("tcp_probes_bench needs root");
        std::process::exit(2);
    }
    if std::env::args().nth(1).as_deref() == Some("ring") {
        ring_capacity();
        return;
    }
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(DEFAULT_ROUNDS);
    let env = |k: &str, d: u64| -> u64 {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let flows = env("CAP_FLOWS", FLOWS) as usize;
    let mss = env("CAP_MSS", 0) as i32;
    let gso = env("CAP_GSO", 0) as u32;
    let write = env("CAP_WRITE", SMALL_WRITE) as usize;
    bpf_stats(false);
    let n = net(0, None);
    server(&n);
    bulk(&n); // warm-up
    pings(&n);

    if rounds > 0 {
        println!(
        "== overhead: {rounds} rounds, each {} MiB bulk + {PINGS} x 64 B ping-pong per mode, ABBA order ==",
        BULK_BYTES >> 20
    );
        let (mut tw, mut to, mut pw, mut po) = (vec![], vec![], vec![], vec![]);
        let mut ratios = vec![];
        let mut events = 0u64;
        let mut ring_drops = 0u64;
        for r in 0..rounds {
            let mut round = [(0.0, 0.0); 2]; // [without, with] (Gbit/s, p99)
            let order: [bool; 2] = if r % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for with in order {
                let cap = with.then(|| Capture::start(100_000_000));
                let g = bulk(&n);
                let (_, p99) = pings(&n);
                if let Some(c) = cap {
                    let s = c.stop();
                    events += s.events;
                    ring_drops += s.drops.ring_full + s.drops.read_failed;
                }
                round[usize::from(with)] = (g, p99);
            }
            println!(
                "round {r}: without {:.2} Gbit/s p99 {:.1} us | with {:.2} Gbit/s p99 {:.1} us",
                round[0].0, round[0].1, round[1].0, round[1].1
            );
            to.push(round[0].0);
            tw.push(round[1].0);
            po.push(round[0].1);
            pw.push(round[1].1);
            ratios.push(round[1].0 / round[0].0);
        }
        let (tol, toh) = spread(&to);
        let (twl, twh) = spread(&tw);
        let (rl, rh) = spread(&ratios);
        println!(
            "throughput without: median {:.2} Gbit/s ({tol:.2}-{toh:.2})",
            median(&to)
        );
        println!(
            "throughput with:    median {:.2} Gbit/s ({twl:.2}-{twh:.2})",
            median(&tw)
        );
        println!(
        "throughput ratio: median(with)/median(without) {:.3}; per-round ratios median {:.3} ({rl:.3}-{rh:.3})",
        median(&tw) / median(&to),
        median(&ratios)
    );
        let (pol, poh) = spread(&po);
        let (pwl, pwh) = spread(&pw);
        println!(
        "ping-pong p99 without: median {:.1} us ({pol:.1}-{poh:.1}); with: median {:.1} us ({pwl:.1}-{pwh:.1}); change {:+.1}%",
        median(&po),
        median(&pw),
        (median(&pw) / median(&po) - 1.0) * 100.0
    );
        println!("captures during it: {events} events, {ring_drops} dropped");

        println!("== kernel cost per run (default thinning, bulk + ping-pong, bpf_stats on) ==");
        let earlier = prog_ids();
        let cap = Capture::start(100_000_000);
        bpf_stats(true);
        let before = prog_stats();
        let t0 = Instant::now();
        bulk(&n);
        pings(&n);
        let after = prog_stats();
        let secs = t0.elapsed().as_secs_f64();
        bpf_stats(false);
        cap.stop();
        print_stats(&stats_delta(&before, &after, &earlier), secs);
    }
    drop(n);

    println!(
        "== capacity: tcp_probe thinning off, {flows} flows, MSS {mss}, gso_max_segs {gso}, writes of {write} B, {CAPACITY_SECS} s =="
    );
    let n = net(1, (gso > 0).then_some(gso));
    if write < 1 << 16 {
        // Small writes with TCP_NODELAY: each write its own segment, no autocorking.
        sh(&[
            "ip",
            "netns",
            "exec",
            &n.a,
            "sysctl",
            "-qw",
            "net.ipv4.tcp_autocorking=0",
        ]);
    }
    server(&n);
    let earlier = prog_ids();
    let cap = Capture::start(0);
    bpf_stats(true);
    let before = prog_stats();
    let cpu0 = cap.cpu_s();
    let other0 = other_cpu();
    let stop = Arc::new(AtomicBool::new(false));
    let senders: Vec<JoinHandle<u64>> = (0..flows)
        .map(|_| {
            let mut s = connect(&n, (mss > 0).then_some(mss));
            let stop = stop.clone();
            std::thread::spawn(move || {
                s.write_all(b"B").unwrap();
                if write < 1 << 16 {
                    s.set_nodelay(true).unwrap();
                }
                let buf = vec![5u8; write];
                let mut sent = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    s.write_all(&buf).unwrap();
                    sent += buf.len() as u64;
                }
                sent
            })
        })
        .collect();
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(CAPACITY_SECS));
    stop.store(true, Ordering::Relaxed);
    let bytes: u64 = senders.into_iter().map(|h| h.join().unwrap()).sum();
    let secs = t0.elapsed().as_secs_f64();
    let after = prog_stats();
    bpf_stats(false);
    let consumer_cpu = cap.cpu_s() - cpu0;
    let other = other_cpu() - other0;
    // Let the reader catch up with what is queued, then stop.
    std::thread::sleep(Duration::from_millis(300));
    let sum = cap.stop();
    println!(
        "traffic: {:.3} Gbit/s over {secs:.2} s ({:.0} writes/s of {write} B)",
        bytes as f64 * 8.0 / secs / 1e9,
        bytes as f64 / write as f64 / secs
    );
    print_stats(&stats_delta(&before, &after, &earlier), secs);
    println!(
        "delivered to user space: {} events = {:.0} events/s; ring full {}, read failed {}",
        sum.events,
        sum.events as f64 / secs,
        sum.drops.ring_full,
        sum.drops.read_failed
    );
    println!(
        "reader (capture thread, JSON to a sink): {:.0}% of one CPU, {:.2} us per event; niced processes (other work on the machine) took {:.0}% of the {} CPUs",
        consumer_cpu / secs * 100.0,
        consumer_cpu / sum.events.max(1) as f64 * 1e6,
        other / secs / cpus() * 100.0,
        cpus()
    );
    ring_capacity();
}

/// The ring buffer and its reader driven past what the TCP stack can make: one thread calls
/// `getppid()` at an offered rate; each call's synthetic event goes through the same `emit`,
/// ring buffer, reader, decoder, tracker and JSON encoder as a real `tcp_cwnd` sample.
fn ring_capacity() {
    println!(
        "== ring buffer capacity: synthetic cwnd events from getppid(), {RING_STEP_SECS} s per offered rate =="
    );
    println!("offered/s   made/s  delivered/s  ring full  read failed  reader CPU  us/event  ring_load ns/run");
    // SAFETY: no preconditions.
    let me = unsafe { libc::getpid() } as u32;
    for rate in RING_RATES {
        let earlier = prog_ids();
        let cap = Capture::start_with(100_000_000, Some(me));
        bpf_stats(true);
        let before = prog_stats();
        let cpu0 = cap.cpu_s();
        let t0 = Instant::now();
        let end = t0 + Duration::from_secs(RING_STEP_SECS);
        let mut made = 0u64;
        // Batches of 1000 calls, each batch due at made / rate seconds.
        while Instant::now() < end {
            if rate > 0 {
                let due = t0 + Duration::from_secs_f64(made as f64 / rate as f64);
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
            }
            for _ in 0..1000 {
                // SAFETY: no preconditions.
                unsafe { libc::getppid() };
            }
            made += 1000;
        }
        let secs = t0.elapsed().as_secs_f64();
        let after = prog_stats();
        bpf_stats(false);
        // Let the reader drain what is queued before it stops.
        std::thread::sleep(Duration::from_millis(500));
        let reader_cpu = cap.cpu_s() - cpu0;
        let sum = cap.stop();
        let load_ns = stats_delta(&before, &after, &earlier)
            .into_iter()
            .find(|(name, ours, ..)| *ours && name.starts_with("ring_load"))
            .map_or(f64::NAN, |(.., ns)| ns);
        let offered = if rate == 0 {
            "max".to_owned()
        } else {
            rate.to_string()
        };
        println!(
            "{offered:>9} {:>8.0} {:>12.0} {:>10} {:>12} {:>10.0}% {:>9.2} {:>17.0}",
            made as f64 / secs,
            sum.events as f64 / secs,
            sum.drops.ring_full,
            sum.drops.read_failed,
            reader_cpu / secs * 100.0,
            reader_cpu / sum.events.max(1) as f64 * 1e6,
            load_ns
        );
    }
}

/// CPU seconds spent by niced processes (other builds on a shared machine), from /proc/stat.
fn other_cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let nice: f64 = stat
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(2))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    // SAFETY: no preconditions.
    nice / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

fn cpus() -> f64 {
    std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64)
}
