//! Captures as the field takes them: tcpdump (not tboxscope) records
//! KCP traffic sent inside a network namespace this test creates, on loopback (`-i lo`,
//! Ethernet), `-i any` (Linux cooked v2), `-i any -y LINUX_SLL` (cooked v1, loopback hardware
//! type 772), a tun device (raw IP) and `-i nflog:N` behind an nftables `log group N` rule;
//! then `tboxscope analyze` must decode every segment sent, with no frame rejected for its link
//! layer. Needs root (namespaces, tcpdump, nftables): `#[ignore]`d, run by `cargo xtask test`
//! (by hand: `flock /tmp/tbx-root.lock cargo test -p tboxscope --test link_captures --
//! --include-ignored`). The namespace is deleted by a Drop guard, also when a check fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tboxscope_test_support::netns;

const BIN: &str = env!("CARGO_BIN_EXE_tboxscope");
/// KCP segments sent per capture.
const SEGMENTS: u32 = 40;

/// A network namespace of this test, with loopback up; deleted on drop.
struct Ns {
    name: String,
}

impl Ns {
    fn new(tag: &str) -> Self {
        let name = format!("tbxlk{tag}{}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        netns::ip(&["netns", "add", &name]);
        let ns = Self { name };
        netns::ip_in(&ns.name, &["link", "set", "lo", "up"]);
        ns
    }

    fn run(&self, program: &str, args: &[&str]) {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.name, program])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// tcpdump writing `file` inside the namespace; stopped (SIGINT) on drop.
struct Tcpdump {
    child: Child,
}

impl Tcpdump {
    /// Starts tcpdump and waits (at most 10 s) until it says it is listening.
    fn start(ns: &Ns, args: &[&str], file: &Path) -> Self {
        let mut child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns.name,
                "tcpdump",
                "-U",
                "--immediate-mode",
                "-n",
                "-w",
            ])
            .arg(file)
            .args(args)
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
        let mut said = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) if line.contains("listening on") => break,
                Ok(line) => said.push(line),
                Err(_) => {
                    let _ = child.kill();
                    panic!("tcpdump {args:?} did not start: {said:?}");
                }
            }
        }
        Self { child }
    }

    /// Stops tcpdump (SIGINT: it flushes and closes the file) and waits at most 10 s.
    fn stop(mut self) {
        self.interrupt();
    }

    fn interrupt(&mut self) {
        let pid = libc::pid_t::try_from(self.child.id()).unwrap();
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(pid, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Tcpdump {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.interrupt();
        }
    }
}

/// Sends [`SEGMENTS`] KCP push segments (conv 77, sn 0..) from inside `ns` to `to`, 5 ms apart,
/// then waits `settle` for the capture to write the last ones.
fn send_kcp(ns: &Ns, to: &'static str, settle: Duration) {
    netns::spawn_in(&ns.name, move || {
        let sock = UdpSocket::bind("0.0.0.0:0").unwrap();
        let payload = [0x5au8; 200];
        for sn in 0..SEGMENTS {
            let seg =
                tboxscope_test_support::pcap::kcp_segment(77, 81, 0, 128, sn * 5, sn, 0, &payload);
            // A refused datagram (no listener: ICMP port unreachable) still went out.
            let _ = sock.send_to(&seg, to);
            std::thread::sleep(Duration::from_millis(5));
        }
    })
    .join()
    .unwrap();
    std::thread::sleep(settle);
}

/// `tboxscope analyze FILE --json -`: its summary line.
fn analyze(file: &Path) -> serde_json::Value {
    let out = Command::new(BIN)
        .arg("analyze")
        .arg(file)
        .args(["--json", "-"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "analyze: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    serde_json::from_str(text.lines().last().unwrap()).unwrap()
}

/// Checks that every segment sent was decoded once per time the capture saw it
/// (`copies`) and that no frame was refused for its link layer.
fn assert_decoded(summary: &serde_json::Value, linktype_name: &str, copies: u64) {
    let frames = &summary["frames"];
    assert_eq!(frames["unsupported_link"], 0, "{linktype_name}: {frames}");
    assert_eq!(
        frames["net_rejected"]["not_ip"], 0,
        "{linktype_name}: {frames}"
    );
    assert_eq!(
        frames["kcp_segments"].as_u64(),
        Some(u64::from(SEGMENTS) * copies),
        "{linktype_name}: {frames}"
    );
}

/// The link type number of a classic pcap file (tcpdump writes classic pcap).
fn linktype(file: &Path) -> u32 {
    let b = std::fs::read(file).unwrap();
    u32::from_le_bytes([b[20], b[21], b[22], b[23]]) & 0xffff
}

fn capture_loopback(tag: &str, tcpdump_args: &[&str], want_linktype: u32) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(format!("{tag}.pcap"));
    let ns = Ns::new(tag);
    let cap = Tcpdump::start(&ns, tcpdump_args, &file);
    send_kcp(&ns, "127.0.0.1:7101", Duration::from_millis(300));
    cap.stop();
    assert_eq!(linktype(&file), want_linktype, "{tcpdump_args:?}");
    assert_decoded(&analyze(&file), tag, 1);
}

#[test]
#[ignore = "needs root"]
fn loopback_ethernet_capture() {
    capture_loopback("lo", &["-i", "lo", "udp port 7101"], 1);
}

#[test]
#[ignore = "needs root"]
fn any_interface_cooked_v2_capture() {
    capture_loopback("any2", &["-i", "any", "udp port 7101"], 276);
}

/// Cooked v1 of loopback (hardware type 772): every frame was "not IP" before.
#[test]
#[ignore = "needs root"]
fn any_interface_cooked_v1_capture() {
    capture_loopback(
        "any1",
        &["-i", "any", "-y", "LINUX_SLL", "udp port 7101"],
        113,
    );
}

/// NFLOG: the nftables rule logs each datagram to group 5, tcpdump reads that group.
#[test]
#[ignore = "needs root"]
fn nflog_capture() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nflog.pcap");
    let ns = Ns::new("nfl");
    ns.run(
        "nft",
        &["table inet tbxlk { chain out { type filter hook output priority 0; udp dport 7101 log group 5; }; }"],
    );
    let cap = Tcpdump::start(&ns, &["-i", "nflog:5"], &file);
    // The kernel hands NFLOG messages over in batches, at the latest after 1 s.
    send_kcp(&ns, "127.0.0.1:7101", Duration::from_millis(1500));
    cap.stop();
    assert_eq!(linktype(&file), 239);
    assert_decoded(&analyze(&file), "nflog", 1);
}

/// A tun device (raw IP, as wwan modems and VPNs present themselves): the datagrams routed
/// into it are captured without any link header.
#[test]
#[ignore = "needs root"]
fn tun_raw_ip_capture() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tun.pcap");
    let ns = Ns::new("tun");
    let name = format!("tbxtun{}", std::process::id() % 10_000);
    // The device lives while this descriptor is open (a reader keeps its carrier on).
    let tun = {
        let name = name.clone();
        netns::spawn_in(&ns.name, move || open_tun(&name))
            .join()
            .unwrap()
    };
    netns::ip_in(&ns.name, &["addr", "add", "10.77.0.1/24", "dev", &name]);
    netns::ip_in(&ns.name, &["link", "set", &name, "up"]);
    let cap = Tcpdump::start(&ns, &["-i", &name], &file);
    send_kcp(&ns, "10.77.0.2:7101", Duration::from_millis(300));
    cap.stop();
    drop(tun);
    assert_eq!(linktype(&file), 101);
    assert_decoded(&analyze(&file), "tun", 1);
}

/// Opens `/dev/net/tun` as tun device `name` (no packet information header).
fn open_tun(name: &str) -> File {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
        .expect("/dev/net/tun");
    // SAFETY: a zeroed ifreq is valid; the name fits (checked) and stays NUL-terminated.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    assert!(name.len() < req.ifr_name.len());
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    req.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
    // SAFETY: TUNSETIFF takes a pointer to an ifreq, which lives for the call.
    let rc = unsafe { libc::ioctl(f.as_raw_fd(), libc::TUNSETIFF, &mut req) };
    assert_eq!(rc, 0, "TUNSETIFF: {}", std::io::Error::last_os_error());
    f
}
