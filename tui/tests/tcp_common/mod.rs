//! Shared by the root-only TCP tests: a pair of network namespaces joined by veth (removed on
//! drop, also when a test fails), nftables rules in the receiver's namespace, threads that enter
//! a namespace with setns(2), `ss -tin` parsing, and a `tboxscope capture` child process.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

static SEQ: AtomicU32 = AtomicU32::new(0);

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Two namespaces `a` (sender) and `b` (receiver) joined by veth, with unique names.
pub struct NetnsPair {
    /// Sender namespace.
    pub a: String,
    /// Receiver namespace.
    pub b: String,
    /// Sender address.
    pub addr_a: Ipv4Addr,
    /// Receiver address.
    pub addr_b: Ipv4Addr,
    /// A port unique to this test (pid-derived).
    pub port: u16,
    /// The sender's veth interface (inside `a`).
    pub dev_a: String,
    /// The receiver's veth interface (inside `b`).
    pub dev_b: String,
}

impl NetnsPair {
    /// Creates the pair; `ns` and interface names carry the pid and a sequence number.
    pub fn new() -> Self {
        let pid = std::process::id();
        let n = SEQ.fetch_add(1, Ordering::SeqCst);
        let tag = format!("{}{}", pid % 100_000, n);
        let a = format!("tbxa{tag}");
        let b = format!("tbxb{tag}");
        let va = format!("tva{tag}");
        let vb = format!("tvb{tag}");
        let pair = Self {
            a: a.clone(),
            b: b.clone(),
            addr_a: Ipv4Addr::new(10, 201, (n % 250) as u8, 1),
            addr_b: Ipv4Addr::new(10, 201, (n % 250) as u8, 2),
            port: 20_000 + (pid % 20_000) as u16 + (n as u16) * 7,
            dev_a: va.clone(),
            dev_b: vb.clone(),
        };
        run(Command::new("ip").args(["netns", "add", &a]));
        run(Command::new("ip").args(["netns", "add", &b]));
        run(Command::new("ip").args(["link", "add", &va, "type", "veth", "peer", "name", &vb]));
        run(Command::new("ip").args(["link", "set", &va, "netns", &a]));
        run(Command::new("ip").args(["link", "set", &vb, "netns", &b]));
        for (ns, dev, addr) in [(&a, &va, pair.addr_a), (&b, &vb, pair.addr_b)] {
            run(Command::new("ip").args([
                "-n",
                ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                dev,
            ]));
            run(Command::new("ip").args(["-n", ns, "link", "set", dev, "up"]));
            run(Command::new("ip").args(["-n", ns, "link", "set", "lo", "up"]));
        }
        pair
    }

    /// Adds IPv6 addresses ([`NetnsPair::V6_A`], [`NetnsPair::V6_B`], no duplicate address
    /// detection) to the veth pair.
    pub fn add_ipv6(&self) {
        for (ns, dev, addr) in [
            (&self.a, &self.dev_a, Self::V6_A),
            (&self.b, &self.dev_b, Self::V6_B),
        ] {
            run(Command::new("ip").args([
                "-n",
                ns,
                "addr",
                "add",
                &format!("{addr}/64"),
                "dev",
                dev,
                "nodad",
            ]));
        }
    }

    /// The sender's IPv6 address (after [`NetnsPair::add_ipv6`]).
    pub const V6_A: std::net::Ipv6Addr = std::net::Ipv6Addr::new(0xfd42, 0, 0, 0, 0, 0, 0, 1);
    /// The receiver's IPv6 address (after [`NetnsPair::add_ipv6`]).
    pub const V6_B: std::net::Ipv6Addr = std::net::Ipv6Addr::new(0xfd42, 0, 0, 0, 0, 0, 0, 2);

    /// Sets `key=value` with sysctl(8) in both namespaces (per-namespace TCP settings).
    pub fn sysctl(&self, key: &str, value: &str) {
        for ns in [&self.a, &self.b] {
            run(Command::new("ip").args([
                "netns",
                "exec",
                ns,
                "sysctl",
                "-qw",
                &format!("{key}={value}"),
            ]));
        }
    }

    /// Replaces the receiver's nftables table with one `input` chain holding `rule`.
    pub fn set_receiver_rule(&self, rule: &str) {
        let _ = Command::new("ip")
            .args([
                "netns", "exec", &self.b, "nft", "delete", "table", "inet", "tbx",
            ])
            .stderr(Stdio::null())
            .status();
        if rule.is_empty() {
            return;
        }
        let ruleset = format!(
            "table inet tbx {{ chain c {{ type filter hook input priority 0; {rule}; }}; }}"
        );
        run(Command::new("ip").args(["netns", "exec", &self.b, "nft", &ruleset]));
    }

    /// Packets the receiver's rule counted (its `counter`s), 0 without one.
    pub fn receiver_rule_counted(&self) -> u64 {
        nft_counted(&self.b, "tbx")
    }

    /// `ss -tin` in the sender's namespace for this test's connection.
    pub fn ss(&self) -> Option<SsInfo> {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.a,
                "ss",
                "-tinH",
                "dport",
                "=",
                &self.port.to_string(),
            ])
            .output()
            .ok()?;
        SsInfo::parse(&String::from_utf8_lossy(&out.stdout))
    }

    /// `nstat -az TcpRetransSegs` in the sender's namespace (absolute, history untouched).
    pub fn nstat_retrans_segs(&self) -> u64 {
        let out = run(Command::new("ip").args([
            "netns",
            "exec",
            &self.a,
            "nstat",
            "-azs",
            "TcpRetransSegs",
        ]));
        out.lines()
            .find_map(|l| {
                let mut f = l.split_whitespace();
                (f.next()? == "TcpRetransSegs").then(|| f.next()?.parse().ok())?
            })
            .unwrap_or(0)
    }

    /// The receiver's listening address.
    pub fn server(&self) -> SocketAddr {
        SocketAddr::new(self.addr_b.into(), self.port)
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        // Deleting a namespace removes its veth end (and so the peer) and its nft tables.
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// Runs `f` on a new thread that first joins network namespace `ns`.
pub fn in_netns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = File::open(&path).expect("open netns");
        // SAFETY: valid fd of a netns file; affects only this thread.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
        f()
    })
}

/// A receiver: accepts one connection and reads until EOF (bounded by a timeout); whenever a
/// read ends with `!` it answers `k`.
pub fn spawn_receiver(ns: &str, addr: SocketAddr) -> std::thread::JoinHandle<u64> {
    let (tx, rx) = std::sync::mpsc::channel();
    let h = in_netns(ns, move || {
        let l = TcpListener::bind(addr).expect("bind");
        tx.send(()).ok();
        let (mut c, _) = l.accept().expect("accept");
        c.set_read_timeout(Some(Duration::from_secs(30))).ok();
        let mut n = 0u64;
        let mut buf = vec![0u8; 1 << 16];
        loop {
            match std::io::Read::read(&mut c, &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(k) => {
                    n += k as u64;
                    if buf[k - 1] == b'!' && std::io::Write::write_all(&mut c, b"k").is_err() {
                        break;
                    }
                }
            }
        }
        n
    });
    rx.recv_timeout(Duration::from_secs(5))
        .expect("receiver listening");
    h
}

/// Connects from namespace `ns` (returns the stream to the caller's thread: the socket keeps
/// its namespace).
pub fn connect_from(ns: &str, to: SocketAddr) -> TcpStream {
    let s = in_netns(ns, move || {
        TcpStream::connect_timeout(&to, Duration::from_secs(5))
    })
    .join()
    .expect("join")
    .expect("connect");
    s.set_write_timeout(Some(Duration::from_secs(30))).ok();
    s
}

/// Segments of `len` bytes at `mss` as the kernel counts them (`TcpRetransSegs` adds a GSO
/// packet's segment count; the capture sees it as one packet).
pub fn mss_segments(len: u64, mss: u64) -> u64 {
    len.div_ceil(mss).max(1)
}

/// One `ss -tin` line's numbers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SsInfo {
    /// `rto:` ms.
    pub rto_ms: f64,
    /// `backoff:` (0 when absent).
    pub backoff: u32,
    /// `retrans:a/b` → b (total).
    pub retrans_total: u64,
    /// `cwnd:`.
    pub cwnd: u64,
    /// `ssthresh:` (None when absent = infinite).
    pub ssthresh: Option<u64>,
    /// srtt in µs from `rtt:srtt/var` (ms).
    pub srtt_us: f64,
    /// `mss:` (the sender's current MSS).
    pub mss: u64,
    /// The congestion-control algorithm (a bare token, one of the kernel's available ones).
    pub congestion_control: Option<String>,
}

impl SsInfo {
    /// Parses `ss -tinH` output (first connection).
    pub fn parse(text: &str) -> Option<Self> {
        let mut info = SsInfo::default();
        let mut seen = false;
        let available =
            std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
                .unwrap_or_default();
        for tok in text.split_whitespace() {
            let Some((k, v)) = tok.split_once(':') else {
                if available.split_whitespace().any(|a| a == tok) {
                    info.congestion_control = Some(tok.to_owned());
                }
                continue;
            };
            match k {
                "rto" => {
                    info.rto_ms = v.parse().ok()?;
                    seen = true;
                }
                "backoff" => info.backoff = v.parse().ok()?,
                "retrans" => {
                    info.retrans_total = v.split('/').nth(1)?.parse().ok()?;
                }
                "cwnd" => info.cwnd = v.parse().ok()?,
                "mss" => info.mss = v.parse().ok()?,
                "ssthresh" => info.ssthresh = v.parse().ok(),
                "rtt" => info.srtt_us = v.split('/').next()?.parse::<f64>().ok()? * 1000.0,
                _ => {}
            }
        }
        seen.then_some(info)
    }
}

/// A running `tboxscope capture`, stopped with SIGINT on [`Capture::stop`] or on drop.
pub struct Capture {
    child: Option<Child>,
    /// The JSON Lines file.
    pub path: PathBuf,
}

impl Capture {
    /// Starts `tboxscope capture --json FILE <args>` and waits until the probes are attached
    /// (the header line is written).
    pub fn start(name: &str, args: &[&str]) -> Self {
        Self::start_in(None, name, args)
    }

    /// [`Capture::start`] inside network namespace `ns` (`ip netns exec` execs the binary:
    /// the child is tboxscope itself), to capture that namespace's interfaces.
    pub fn start_in(ns: Option<&str>, name: &str, args: &[&str]) -> Self {
        let path = std::env::temp_dir().join(format!("tbx-{name}-{}.jsonl", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let mut command = match ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, env!("CARGO_BIN_EXE_tboxscope")]);
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_tboxscope")),
        };
        let child = command
            .arg("capture")
            .arg("--json")
            .arg(&path)
            .args(args)
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn tboxscope");
        let cap = Self {
            child: Some(child),
            path,
        };
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(60) {
            if std::fs::metadata(&cap.path).is_ok_and(|m| m.len() > 0) {
                // BufWriter: the header appears at the first flush (1 s tick) — wait for it.
                return cap;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("tboxscope capture did not start");
    }

    /// [`Capture::stop`], keeping a copy of the file at `keep`.
    pub fn stop_keeping(mut self, keep: &std::path::Path) -> Vec<Value> {
        self.interrupt();
        std::fs::copy(&self.path, keep).expect("copy the recording");
        self.lines()
    }

    /// SIGINT, wait, and parse every line.
    pub fn stop(mut self) -> Vec<Value> {
        self.interrupt();
        self.lines()
    }

    fn interrupt(&mut self) {
        let mut child = self.child.take().expect("child");
        // SAFETY: signalling our own child by pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        let status = child.wait().expect("wait");
        assert!(status.success(), "capture exited with {status}");
    }

    fn lines(&self) -> Vec<Value> {
        let f = File::open(&self.path).expect("output");
        BufReader::new(f)
            .lines()
            .map(|l| serde_json::from_str(&l.expect("line")).expect("every line is JSON"))
            .collect()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: our own child.
            unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
            let _ = c.wait();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The kernel's records of `type` for the socket whose local endpoint is `endpoint` (not the
/// wire matcher's records of the same type).
pub fn records<'a>(all: &'a [Value], ty: &str, endpoint: &str) -> Vec<&'a Value> {
    all.iter()
        .filter(|r| r["type"] == ty && r["src"] == endpoint && r["source"] != "wire")
        .collect()
}

/// tcpdump in a namespace, stopped with SIGINT (its file then ends whole) on drop.
pub struct Tcpdump(Child);

impl Tcpdump {
    /// Captures TCP port `port` on `dev` in `ns` into `file` (its log beside it).
    pub fn start(ns: &str, dev: &str, port: u16, file: &std::path::Path) -> Self {
        Self::start_on(ns, dev, &format!("tcp port {port}"), file)
    }

    /// Captures what `filter` selects on `dev` (`nflog:N` too) in `ns` into `file`.
    pub fn start_on(ns: &str, dev: &str, filter: &str, file: &std::path::Path) -> Self {
        Self::start_cut(ns, dev, filter, file, 0)
    }

    /// [`Tcpdump::start_on`] keeping `snaplen` bytes of each frame (0: all).
    pub fn start_cut(
        ns: &str,
        dev: &str,
        filter: &str,
        file: &std::path::Path,
        snaplen: u32,
    ) -> Self {
        let child = Command::new("ip")
            .args(["netns", "exec", ns, "tcpdump", "-i", dev, "-s"])
            .arg(snaplen.to_string())
            .args(["-B", "131072"])
            // Immediate mode: without it libpcap's TPACKET_V3 ring hands packets over in
            // blocks retired up to a second later, and a SIGINT loses the block still open
            // (the capture's last packets, not counted as drops).
            .args(["--immediate-mode", "-U", "-w"])
            .arg(file)
            .args(["-c", "2000000"])
            .args(filter.split_whitespace())
            .stdout(Stdio::null())
            .stderr(File::create(file.with_extension("log")).expect("tcpdump log"))
            .spawn()
            .expect("tcpdump runs (cargo xtask setup installs it)");
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(5)
            && std::fs::metadata(file).map_or(0, |m| m.len()) == 0
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        // The file header is written before the capture starts: let it settle.
        std::thread::sleep(Duration::from_millis(500));
        Self(child)
    }
}

impl Drop for Tcpdump {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.0.id()) {
            // SAFETY: signalling our own child process.
            unsafe { libc::kill(pid, libc::SIGINT) };
        }
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(5) {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `tboxscope analyze <args> --json -`: every line (the run must succeed).
pub fn analyze_json<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Vec<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_tboxscope"))
        .arg("analyze")
        .args(args)
        .args(["--json", "-"])
        .output()
        .expect("tboxscope runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("every line is JSON"))
        .collect()
}

/// The holes the receiver's ACKs (from `port`) show in `pcap` — each time its ACKs go from
/// none held out of order to some (a SACK block above the cumulative ACK; a D-SACK block lies
/// below it), that ACK's number: the first byte missing — and how many of them are the missing
/// sequence of a stall in `lines` (its analysis). Steps of the ACK while blocks stay (a hole
/// filled piece by piece, or the next hole behind it) are the same stall and not counted.
pub fn holes_stalled(pcap: &std::path::Path, port: u16, lines: &[serde_json::Value]) -> (u64, u64) {
    let rows = tshark_fields(
        pcap,
        &format!("tcp.srcport == {port} && tcp.len == 0 && tcp.flags.ack == 1"),
        &["tcp.ack_raw", "tcp.options.sack_le"],
    );
    let mut holes = std::collections::BTreeSet::new();
    let mut held = false;
    for r in &rows {
        let Ok(ack) = r[0].parse::<u32>() else {
            continue;
        };
        let above = r[1]
            .split(',')
            .filter_map(|l| l.parse::<u32>().ok())
            .any(|l| l != ack && l.wrapping_sub(ack) < 1 << 31);
        if above && !held {
            holes.insert(ack);
        }
        held = above;
    }
    let missing: std::collections::BTreeSet<u32> = lines
        .iter()
        .filter(|r| r["type"] == "hol_incident" && r["source"] == "wire")
        .filter_map(|r| r["missing"].as_str()?.strip_prefix("seq ")?.parse().ok())
        .collect();
    let stalled = holes.intersection(&missing).count() as u64;
    (stalled, holes.len() as u64)
}

/// The data packets to `port` a receiver's input rules dropped, and how many of them brought
/// only bytes it already had (every byte came before in a copy let through), from `input`: an
/// nflog capture of every packet at the rules, in the order they came, each logged with the
/// prefix `drop` or `pass`. The receiver's ACKs have nothing to tell of a drop in hand.
pub fn drops_of_data_in_hand(input: &std::path::Path, port: u16) -> (u64, u64) {
    let rows = tshark_fields(
        input,
        &format!("tcp.dstport == {port} && tcp.len > 0"),
        &["nflog.prefix", "tcp.seq_raw", "tcp.len"],
    );
    let mut base = None;
    // Ranges let through so far, in offsets from the first data byte.
    let mut through: Vec<(i64, i64)> = Vec::new();
    let (mut dropped, mut in_hand) = (0, 0);
    for r in &rows {
        let (Ok(seq), Ok(len)) = (r[1].parse::<u32>(), r[2].parse::<u32>()) else {
            panic!("not a data packet: {r:?}");
        };
        let base = *base.get_or_insert(seq);
        let start = i64::from(seq.wrapping_sub(base) as i32);
        let end = start + i64::from(len);
        match r[0].as_str() {
            "pass" => through.push((start, end)),
            "drop" => {
                dropped += 1;
                let mut at = start;
                while let Some(&(_, e)) = through.iter().find(|&&(s, e)| s <= at && at < e) {
                    at = e;
                }
                if at >= end {
                    in_hand += 1;
                }
            }
            other => panic!("a packet logged as {other:?}"),
        }
    }
    (dropped, in_hand)
}

/// tshark's `fields` (tab-separated on its lines) of the frames `filter` selects in `pcap`,
/// sequence numbers raw.
pub fn tshark_fields(pcap: &std::path::Path, filter: &str, fields: &[&str]) -> Vec<Vec<String>> {
    let mut cmd = Command::new("tshark");
    cmd.arg("-r").arg(pcap);
    cmd.args(["-o", "tcp.relative_sequence_numbers:FALSE"]);
    cmd.args(["-Y", filter, "-T", "fields"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    run(&mut cmd)
        .lines()
        .map(|l| l.split('\t').map(str::to_owned).collect())
        .collect()
}

/// Unix epoch ns of tshark's `frame.time_epoch` text (`s.fraction`).
pub fn epoch_ns(text: &str) -> u64 {
    let (s, ns) = text.trim().split_once('.').unwrap_or((text.trim(), "0"));
    let ns = format!("{ns:0<9}");
    s.parse::<u64>().unwrap_or(0) * 1_000_000_000 + ns[..9].parse::<u64>().unwrap_or(0)
}

/// Runs `args` (program first); panics with its standard error when it fails.
pub fn sh(args: &[&str]) {
    run(Command::new(args[0]).args(&args[1..]));
}

/// Packets the `counter`s of nftables table `inet TABLE` in namespace `ns` counted, 0 without
/// the table.
pub fn nft_counted(ns: &str, table: &str) -> u64 {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "list", "table", "inet", table])
        .stderr(Stdio::null())
        .output()
        .expect("nft runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let words: Vec<&str> = text.split_whitespace().collect();
    words
        .windows(3)
        .filter(|w| w[0] == "counter" && w[1] == "packets")
        .filter_map(|w| w[2].parse::<u64>().ok())
        .sum()
}

/// `nstat -azs NAME` in namespace `ns` (absolute, history untouched).
pub fn nstat(ns: &str, name: &str) -> u64 {
    run(Command::new("ip").args(["netns", "exec", ns, "nstat", "-azs", name]))
        .lines()
        .find_map(|l| {
            let mut f = l.split_whitespace();
            (f.next()? == name).then(|| f.next()?.parse().ok())?
        })
        .unwrap_or(0)
}

/// The summary's wire figures (`tcp_wire.directions[]`) for the data sent from `src`.
pub fn wire_direction(lines: &[Value], src: &str) -> Option<Value> {
    lines
        .iter()
        .filter(|r| r["type"] == "summary")
        .flat_map(|r| {
            r["tcp_wire"]["directions"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .find(|d| d["src"] == src)
}

/// Sender `a` — router `r` — receiver `b` (three namespaces, veth between), the router
/// dropping a share of the data segments towards `b` in its forward hook (counted); removed
/// on drop, also when a test fails.
pub struct Routed {
    /// Sender namespace.
    pub a: String,
    /// Router namespace.
    pub r: String,
    /// Receiver namespace.
    pub b: String,
    /// The sender's interface (inside `a`).
    pub dev_a: String,
    /// The receiver's interface (inside `b`).
    pub dev_b: String,
    /// The router's interface towards the receiver (inside `r`).
    pub dev_rb: String,
    /// The receiver's listening address (a port unique to this test).
    pub server: SocketAddr,
}

impl Routed {
    /// Builds the chain; the router drops `per_mille` of the data segments (IP length over
    /// 80 bytes: not bare ACKs, SYNs or FINs) on their way to the receiver.
    pub fn new(per_mille: u32) -> Self {
        let pid = std::process::id();
        let k = SEQ.fetch_add(1, Ordering::SeqCst);
        let tag = format!("{}{k}", pid % 100_000);
        let n = ((pid + k * 37) % 200) as u8 + 20;
        let (a, r, b) = (
            format!("tbxra{tag}"),
            format!("tbxrr{tag}"),
            format!("tbxrb{tag}"),
        );
        let (ra, rb) = (format!("trra{tag}"), format!("trrb{tag}"));
        let net = Self {
            a: a.clone(),
            r: r.clone(),
            b: b.clone(),
            dev_a: format!("tra{tag}"),
            dev_b: format!("trb{tag}"),
            dev_rb: rb.clone(),
            server: SocketAddr::new(
                Ipv4Addr::new(10, 205, n, 1).into(),
                30_000 + (pid % 20_000) as u16 + (k as u16) * 7,
            ),
        };
        for ns in [&a, &r, &b] {
            sh(&["ip", "netns", "add", ns]);
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        for (dev, peer, ns, subnet) in [(&net.dev_a, &ra, &a, 204), (&net.dev_b, &rb, &b, 205)] {
            let (addr, raddr) = (format!("10.{subnet}.{n}.1"), format!("10.{subnet}.{n}.2"));
            sh(&[
                "ip", "link", "add", dev, "type", "veth", "peer", "name", peer,
            ]);
            sh(&["ip", "link", "set", dev, "netns", ns]);
            sh(&["ip", "link", "set", peer, "netns", &r]);
            sh(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                dev,
            ]);
            sh(&[
                "ip",
                "-n",
                &r,
                "addr",
                "add",
                &format!("{raddr}/24"),
                "dev",
                peer,
            ]);
            sh(&["ip", "-n", ns, "link", "set", dev, "up"]);
            sh(&["ip", "-n", &r, "link", "set", peer, "up"]);
            sh(&["ip", "-n", ns, "route", "add", "default", "via", &raddr]);
        }
        sh(&[
            "ip",
            "netns",
            "exec",
            &r,
            "sysctl",
            "-qw",
            "net.ipv4.ip_forward=1",
        ]);
        let rule = format!(
            "table inet tbx {{ chain c {{ type filter hook forward priority 0; \
             ip daddr 10.205.{n}.1 ip length > 80 numgen random mod 1000 < {per_mille} \
             counter drop; }}; }}"
        );
        sh(&["ip", "netns", "exec", &r, "nft", &rule]);
        net
    }

    /// Data segments the router dropped.
    pub fn dropped(&self) -> u64 {
        nft_counted(&self.r, "tbx")
    }

    /// A token bucket of `rate` (tc syntax, e.g. `20mbit`) on the way to the receiver: a bulk
    /// sender fills its queue (round trips of milliseconds, as on a cellular link) and
    /// overflows it (more loss).
    pub fn bottleneck(&self, rate: &str) {
        sh(&[
            "tc",
            "-n",
            &self.r,
            "qdisc",
            "add",
            "dev",
            &self.dev_rb,
            "root",
            "tbf",
            "rate",
            rate,
            "burst",
            "16kb",
            "latency",
            "40ms",
        ]);
    }

    /// One MSS per packet from the sender (no GSO bursts): the loss falls on segments.
    pub fn one_segment_per_packet(&self) {
        sh(&[
            "ip",
            "-n",
            &self.a,
            "link",
            "set",
            &self.dev_a,
            "gso_max_segs",
            "1",
        ]);
    }

    /// Sets `key=value` with sysctl(8) in the sender's and the receiver's namespaces.
    pub fn sysctl(&self, key: &str, value: &str) {
        for ns in [&self.a, &self.b] {
            sh(&[
                "ip",
                "netns",
                "exec",
                ns,
                "sysctl",
                "-qw",
                &format!("{key}={value}"),
            ]);
        }
    }
}

impl Drop for Routed {
    fn drop(&mut self) {
        for ns in [&self.a, &self.r, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// The receiver's capture alone: no stall told from its arrivals ends before the receiver took
/// the data at the start of its hole, as its own ACKs in the capture say: none of them stays at
/// the hole's first byte more than 5 ms after the stall's end (the time an ACK takes to show
/// an arrival, see the engine's `NOT_TAKEN_AFTER_NS`; a filling copy the receiver dropped ends
/// no stall). (Its ACKs may pass that byte before the end: a hole of several segments filled
/// one resend at a time.)
pub fn stalls_end_as_the_receiver_acks(
    receiver_pcap: &std::path::Path,
    port: u16,
    line: &str,
) -> usize {
    const SHOWN_NS: u64 = 5_000_000;
    let lines = analyze_json(&[receiver_pcap]);
    let acks: Vec<(u64, u32)> = tshark_fields(
        receiver_pcap,
        &format!("tcp.srcport == {port} && tcp.flags.ack == 1"),
        &["frame.time_epoch", "tcp.ack_raw"],
    )
    .iter()
    .map(|r| (epoch_ns(&r[0]), r[1].parse().expect("tshark's tcp.ack_raw")))
    .collect();
    let mut checked = 0;
    for r in lines
        .iter()
        .filter(|r| r["type"] == "hol_incident" && r["stall_from"] == "receiver_arrivals")
    {
        let seq: u32 = r["missing"]
            .as_str()
            .and_then(|m| m.strip_prefix("seq ")?.parse().ok())
            .expect("a TCP stall names its hole's first byte: seq N");
        let start = r["start_ns"].as_u64().expect("start_ns");
        let end = start + r["stall_ns"].as_u64().expect("stall_ns");
        let past = |ack: u32| (ack.wrapping_sub(seq) as i32) > 0;
        let last_at_hole = acks
            .iter()
            .filter(|&&(at, a)| at >= start && !past(a))
            .map(|a| a.0)
            .max();
        assert!(
            last_at_hole.is_none_or(|at| at <= end + SHOWN_NS),
            "{line}: stall at seq {seq} {start}..{end} ns; the receiver's ACK stayed at the \
             hole until {last_at_hole:?}"
        );
        checked += 1;
    }
    eprintln!("{line}: {checked} stalls at the receiver end as its ACKs say");
    assert!(checked > 0, "{line}: no stall at the receiver");
    checked
}
