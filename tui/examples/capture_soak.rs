//! Soak benchmark of headless capture (`cargo xtask bench soak`): `tboxscope capture --json`
//! on two interfaces for a long run at a T-Box's rate, its resident memory sampled.
//!
//! Two network namespaces (`tbxsoak-tPID`, `tbxsoak-cPID`; deleted by a guard whatever
//! happens) joined by veth pairs named `eth0` and `eth1` on both sides. On each path the T-Box
//! side sends KCP PUSH segments at `--rate` per second (the same message on both paths, as a
//! dual-sending T-Box does) and the far side answers each with an ACK, so each interface
//! carries twice `--rate` packets per second. Every `--flow-every` seconds the sender starts a
//! new conversation from a new source port: flows come and go as they do when a T-Box
//! reconnects. The capture writes JSON Lines rotated at 50 MB with 2 files kept, on a
//! 256 MiB tmpfs of the soak's own (a full shared disk cannot end the run).
//!
//! The capture runs with `--no-tcp` unless `--tcp`: the eBPF TCP probes see every TCP socket
//! of the host, not only the namespace's, so on a shared machine the figure would depend on
//! what else runs; the packet side is what grows with the traffic under test.
//!
//! With `--ui` the live terminal UI (`tboxscope -i eth0 -i eth1`) runs instead of `capture`, on a
//! pseudo-terminal of 140×45 whose output is read and discarded, as a user's terminal would.
//!
//! With `--callgrind` tboxscope runs under valgrind's callgrind, which counts the instructions
//! it executes (RSS and CPU time are then valgrind's: use it for a few minutes, apart).
//!
//! Prints one line per sample (RSS, peak, CPU time, packets) and, at the end, the table's
//! verdict: flat when the largest RSS of the second half of the run exceeds that of the
//! first half after warm-up by at most 1 MiB.
#![expect(clippy::unwrap_used, clippy::expect_used)] // a benchmark driver, not product code

use std::fs::File;
use std::io::Read;
use std::net::UdpSocket;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tboxscope_test_support::netns::{ip, ip_in, spawn_in};
use tboxscope_test_support::pcap::kcp_segment;
use tboxscope_test_support::peers::answer_kcp_pushes;

const PORT: u16 = 7240;

/// Set by SIGINT/SIGTERM: the run ends early and the guard still cleans up.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
}
const PUSH: u8 = 81;

#[derive(Clone)]
struct Options {
    bin: PathBuf,
    minutes: u64,
    interval: Duration,
    rate: u64,
    flow_every: Duration,
    warmup_samples: usize,
    tcp: bool,
    ui: bool,
    callgrind: bool,
}

fn options() -> Options {
    let mut o = Options {
        bin: PathBuf::from("target/release/tboxscope"),
        minutes: 60,
        interval: Duration::from_secs(60),
        rate: 100,
        flow_every: Duration::from_secs(30),
        warmup_samples: 5,
        tcp: false,
        ui: false,
        callgrind: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--bin" => o.bin = PathBuf::from(val()),
            "--minutes" => o.minutes = val().parse().expect("--minutes N"),
            "--interval-s" => o.interval = Duration::from_secs(val().parse().expect("seconds")),
            "--rate" => o.rate = val().parse().expect("--rate N"),
            "--flow-every-s" => {
                o.flow_every = Duration::from_secs(val().parse().expect("seconds"));
            }
            "--warmup-samples" => o.warmup_samples = val().parse().expect("N"),
            "--tcp" => o.tcp = true,
            "--ui" => o.ui = true,
            "--callgrind" => o.callgrind = true,
            other => panic!(
                "unknown option {other}; options: --bin PATH --minutes N --interval-s N \
                 --rate N --flow-every-s N --warmup-samples N --tcp --ui --callgrind"
            ),
        }
    }
    o
}

/// The namespaces, the traffic threads and the capture; all stopped and deleted on drop.
struct Bed {
    tbox: String,
    cloud: String,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    capture: Option<Child>,
    dir: PathBuf,
}

impl Bed {
    fn new() -> Bed {
        let pid = std::process::id();
        let bed = Bed {
            tbox: format!("tbxsoak-t{pid}"),
            cloud: format!("tbxsoak-c{pid}"),
            stop: Arc::new(AtomicBool::new(false)),
            threads: Vec::new(),
            capture: None,
            dir: std::env::temp_dir().join(format!("tbxsoak-{pid}")),
        };
        std::fs::create_dir_all(&bed.dir).unwrap();
        // The files on a tmpfs of their own: on a shared machine a disk filled by others
        // would end the run (the first hour-long attempt stopped so at minute 8). Rotation
        // keeps them under 3 × 50 MB.
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=256m", "tbxsoak"])
            .arg(&bed.dir)
            .status()
            .unwrap();
        assert!(mounted.success(), "mount a tmpfs on {}", bed.dir.display());
        ip(&["netns", "add", &bed.tbox]);
        ip(&["netns", "add", &bed.cloud]);
        for ns in [&bed.tbox, &bed.cloud] {
            ip_in(ns, &["link", "set", "lo", "up"]);
        }
        for i in 0..2 {
            let name = format!("eth{i}");
            ip_in(
                &bed.tbox,
                &[
                    "link", "add", &name, "type", "veth", "peer", "name", &name, "netns",
                    &bed.cloud,
                ],
            );
            let (t, c) = Bed::addrs(i);
            ip_in(
                &bed.tbox,
                &["addr", "add", &format!("{t}/24"), "dev", &name],
            );
            ip_in(
                &bed.cloud,
                &["addr", "add", &format!("{c}/24"), "dev", &name],
            );
            ip_in(&bed.tbox, &["link", "set", &name, "up"]);
            ip_in(&bed.cloud, &["link", "set", &name, "up"]);
        }
        bed
    }

    /// T-Box and far-end address of path `i`.
    fn addrs(i: usize) -> (String, String) {
        (format!("10.{}.77.1", 60 + i), format!("10.{}.77.2", 60 + i))
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        if let Some(c) = &mut self.capture {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        for ns in [&self.tbox, &self.cloud] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
        let _ = Command::new("umount").arg(&self.dir).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The T-Box side: the same PUSH on both paths at `rate` per second, a new conversation and
/// new source ports every `flow_every`.
fn send(o: &Options, stop: &AtomicBool, sent: &AtomicU64) {
    let period = Duration::from_secs_f64(1.0 / o.rate as f64);
    let start = Instant::now();
    let mut next = start;
    let mut conv = 0x50a4_0000u32;
    while !stop.load(Ordering::Relaxed) {
        conv += 1;
        let socks: Vec<UdpSocket> = (0..2)
            .map(|i| {
                let (t, c) = Bed::addrs(i);
                let s = UdpSocket::bind(format!("{t}:0")).unwrap();
                s.connect(format!("{c}:{PORT}")).unwrap();
                s
            })
            .collect();
        let flow_end = Instant::now() + o.flow_every;
        let mut sn = 0u32;
        while Instant::now() < flow_end && !stop.load(Ordering::Relaxed) {
            let ts = u32::try_from(start.elapsed().as_millis() % (1 << 31)).unwrap();
            // Each conversation's payloads are its own (as real messages are): a flow whose
            // messages repeat an earlier flow's bytes would be taken for copies of them.
            let payload: Vec<u8> = conv
                .to_le_bytes()
                .into_iter()
                .chain(sn.to_le_bytes())
                .chain((0..192u32).map(|j| (sn * 7 + j) as u8))
                .collect();
            let seg = kcp_segment(conv, PUSH, 0, 128, ts, sn, sn, &payload);
            for s in &socks {
                let _ = s.send(&seg);
            }
            sent.fetch_add(2, Ordering::Relaxed);
            sn += 1;
            next += period;
            if let Some(wait) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
    }
}

/// A pseudo-terminal of 140×45 for the live UI: returns the UI's side, and drains the other
/// side on a thread of its own (counting the bytes drawn) until the UI closes it.
fn pty(drawn: Arc<AtomicU64>) -> OwnedFd {
    let (mut main_side, mut ui_side) = (0, 0);
    let size = libc::winsize {
        ws_row: 45,
        ws_col: 140,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: the out-pointers are live locals; name and termios may be null.
    let rc = unsafe {
        libc::openpty(
            &raw mut main_side,
            &raw mut ui_side,
            std::ptr::null_mut(),
            std::ptr::null(),
            &raw const size,
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: openpty returned two open descriptors that nothing else owns.
    let (mut terminal, ui_side) =
        unsafe { (File::from_raw_fd(main_side), OwnedFd::from_raw_fd(ui_side)) };
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 16];
        // Ends with EIO once the UI and every copy of its side are closed.
        while let Ok(n @ 1..) = terminal.read(&mut buf) {
            drawn.fetch_add(n as u64, Ordering::Relaxed);
        }
    });
    ui_side
}

/// A field of /proc/PID/status in kB (`VmRSS`, `VmHWM`).
fn status_kb(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// CPU time (user + system) of process `pid`.
fn cpu_time(pid: u32) -> Option<Duration> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = text.rsplit_once(')')?.1;
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no memory preconditions.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok()?;
    Some(Duration::from_secs_f64(ticks as f64 / hz as f64))
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir).map_or(0, |d| {
        d.filter_map(Result::ok)
            .filter_map(|e| e.metadata().ok())
            .map(|m| m.len())
            .sum()
    })
}

fn main() {
    let o = options();
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert!(euid == 0, "the soak builds network namespaces: run as root");
    let bin = std::fs::canonicalize(&o.bin)
        .unwrap_or_else(|e| panic!("{}: {e} (build it first)", o.bin.display()));
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            libc::signal(
                sig,
                on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
            )
        };
    }
    let mut bed = Bed::new();
    for i in 0..2 {
        let stop = Arc::clone(&bed.stop);
        let addr = format!("{}:{PORT}", Bed::addrs(i).1);
        bed.threads.push(spawn_in(&bed.cloud, move || {
            answer_kcp_pushes(&addr, &stop);
        }));
    }
    let json = bed.dir.join("soak.jsonl");
    let drawn = Arc::new(AtomicU64::new(0));
    let callgrind_out = bed.dir.join("callgrind.out");
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &bed.tbox]);
    if o.callgrind {
        // Instructions, not seconds: a count that carries over to a T-Box's A55 better than
        // this machine's time. valgrind runs the program in its own process (same pid).
        let mut out = std::ffi::OsString::from("--callgrind-out-file=");
        out.push(&callgrind_out);
        cmd.args(["valgrind", "--tool=callgrind"]).arg(out);
    }
    cmd.arg(&bin);
    let what = if o.ui {
        cmd.args(["-i", "eth0", "-i", "eth1"]);
        "-i eth0 -i eth1 (the live UI on a 140×45 pseudo-terminal)"
    } else {
        cmd.args(["capture", "--json"]).arg(&json).args([
            "-i", "eth0", "-i", "eth1", "--rotate", "50MB", "--keep", "2",
        ]);
        "capture --json … -i eth0 -i eth1 --rotate 50MB --keep 2"
    };
    if !o.tcp {
        cmd.arg("--no-tcp");
    }
    if o.ui {
        let terminal = pty(Arc::clone(&drawn));
        cmd.env("TERM", "xterm-256color")
            .stdin(Stdio::from(terminal.try_clone().unwrap()))
            .stdout(Stdio::from(terminal.try_clone().unwrap()))
            .stderr(Stdio::from(terminal));
        // SAFETY: between fork and exec the closure only calls setsid and ioctl, both
        // async-signal-safe, and allocates nothing.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    } else {
        cmd.stdin(Stdio::null()).stdout(Stdio::null());
    }
    let child = cmd.spawn().unwrap();
    drop(cmd);
    // `ip netns exec` execs the program: the child's pid is tboxscope's.
    let pid = child.id();
    bed.capture = Some(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    let started = || {
        if o.ui {
            drawn.load(Ordering::Relaxed) > 0
        } else {
            std::fs::read(&json).is_ok_and(|b| b.contains(&b'\n'))
        }
    };
    while !started() {
        assert!(Instant::now() < deadline, "tboxscope did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The UI's first frame comes before its capture opens: give it a moment to settle.
    std::thread::sleep(Duration::from_secs(2));
    let rss0 = status_kb(pid, "VmRSS").unwrap_or(0);
    println!(
        "soak: {} {what}{}",
        bin.display(),
        if o.tcp { "" } else { " --no-tcp" }
    );
    println!(
        "soak: {} min, KCP PUSH {} /s per path + one ACK each ({} packets/s per interface), \
         new conversation and ports every {} s; RSS before the first packet {} kB",
        o.minutes,
        o.rate,
        2 * o.rate,
        o.flow_every.as_secs(),
        rss0
    );
    let sent = Arc::new(AtomicU64::new(0));
    {
        let (stop, sent) = (Arc::clone(&bed.stop), Arc::clone(&sent));
        let o2 = o.clone();
        bed.threads
            .push(spawn_in(&bed.tbox.clone(), move || send(&o2, &stop, &sent)));
    }
    println!(
        "| minute | RSS kB | peak RSS kB | CPU s | PUSH sent (both paths) | {} |",
        if o.ui {
            "terminal bytes drawn"
        } else {
            "JSON bytes on disk"
        }
    );
    println!("|---|---|---|---|---|---|");
    let start = Instant::now();
    let total = Duration::from_secs(o.minutes * 60);
    let mut samples: Vec<u64> = Vec::new();
    let mut k = 1u32;
    while start.elapsed() < total {
        let at = o.interval * k;
        while start.elapsed() < at && !INTERRUPTED.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(200));
        }
        if INTERRUPTED.load(Ordering::Relaxed) {
            println!("soak: interrupted");
            break;
        }
        k += 1;
        if let Some(Ok(Some(status))) = bed.capture.as_mut().map(Child::try_wait) {
            panic!("capture ended early: {status}");
        }
        let rss = status_kb(pid, "VmRSS").unwrap_or(0);
        samples.push(rss);
        println!(
            "| {:.1} | {} | {} | {:.2} | {} | {} |",
            start.elapsed().as_secs_f64() / 60.0,
            rss,
            status_kb(pid, "VmHWM").unwrap_or(0),
            cpu_time(pid).unwrap_or_default().as_secs_f64(),
            sent.load(Ordering::Relaxed),
            if o.ui {
                drawn.load(Ordering::Relaxed)
            } else {
                dir_bytes(&bed.dir)
            }
        );
    }
    let cpu = cpu_time(pid).unwrap_or_default();
    bed.stop.store(true, Ordering::Relaxed);
    let mut child = bed.capture.take().unwrap();
    // SAFETY: kill has no memory preconditions; the pid is our child's.
    unsafe { libc::kill(libc::pid_t::try_from(pid).unwrap(), libc::SIGTERM) };
    let status = child.wait().unwrap();
    let text = std::fs::read_to_string(&json).unwrap_or_default();
    let summary = text
        .lines()
        .rev()
        .find(|l| l.contains("\"type\":\"summary\""))
        .map_or_else(
            || "no summary line".into(),
            |l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap_or_default();
                format!(
                    "records {}, capture {}",
                    v["records"],
                    serde_json::to_string(&v["capture"]).unwrap_or_default()
                )
            },
        );
    if o.ui {
        println!(
            "soak: the UI ended {status}; {} terminal bytes drawn",
            drawn.load(Ordering::Relaxed)
        );
    } else {
        println!("soak: capture ended {status}; {summary}");
    }
    let packets = 2 * sent.load(Ordering::Relaxed);
    let instructions = std::fs::read_to_string(&callgrind_out).ok().and_then(|t| {
        t.lines()
            .find_map(|l| l.strip_prefix("totals: "))
            .and_then(|n| n.trim().parse::<u64>().ok())
    });
    println!(
        "soak: CPU {:.2} s for {packets} packets on the interfaces = {:.1} µs per packet{}",
        cpu.as_secs_f64(),
        cpu.as_secs_f64() * 1e6 / packets.max(1) as f64,
        if o.callgrind { " (under valgrind)" } else { "" }
    );
    match instructions {
        Some(n) => println!(
            "soak: callgrind: {n} instructions for {packets} packets = {:.0} per packet, \
             start-up and idle work included",
            n as f64 / packets.max(1) as f64
        ),
        None if o.callgrind => println!("soak: callgrind wrote no totals"),
        None => println!(
            "soak: instructions per packet: {}",
            if perf_counts_instructions() {
                "run perf stat -e instructions -p PID beside the soak, or --callgrind"
            } else {
                "perf has no instructions counter on this machine; run with --callgrind"
            }
        ),
    }
    let warm = o.warmup_samples.min(samples.len());
    let after = &samples[warm..];
    if after.len() >= 2 {
        let (first, second) = after.split_at(after.len() / 2);
        let (a, b) = (
            first.iter().max().copied().unwrap_or(0),
            second.iter().max().copied().unwrap_or(0),
        );
        let growth = b.saturating_sub(a);
        println!(
            "soak: after {warm} warm-up samples, max RSS first half {a} kB, second half {b} kB: \
             growth {growth} kB → {}",
            if growth <= 1024 {
                "FLAT (≤ 1 MiB)"
            } else {
                "GROWING (> 1 MiB)"
            }
        );
    } else {
        println!("soak: too few samples after warm-up for a verdict");
    }
}

/// Whether `perf stat` counts instructions here (not in most virtual machines).
fn perf_counts_instructions() -> bool {
    Command::new("perf")
        .args(["stat", "-x,", "-e", "instructions", "true"])
        .stdout(Stdio::null())
        .output()
        .is_ok_and(|out| {
            let err = String::from_utf8_lossy(&out.stderr);
            out.status.success() && !err.contains("not supported")
        })
}
