//! tboxscope's own libpcap source on the link types the field captures with: the
//! `nflog:N` pseudo-device behind an nftables `log group N` rule (LINKTYPE_NFLOG, refused as
//! an unsupported link before), the `any` pseudo-device (Linux cooked) and a tun device (raw
//! IP). KCP segments sent inside a namespace of the test are all decoded. Needs root:
//! `#[ignore]`d, run by `cargo xtask test` (by hand under `flock /tmp/tbx-root.lock`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod live_common;

use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::time::Duration;

use live_common::{capture_in, stop_capture};
use probe_user::decode::net::LinkType;
use probe_user::dissect::{Decoded, DissectConfig, Dissector};
use probe_user::source::pcap::{InterfaceSpec, LiveConfig, LiveEvent};
use tboxscope_test_support::netns::{ip, ip_in, spawn_in};

const SEGMENTS: u32 = 30;

/// A namespace of this test with loopback up; deleted on drop.
struct Ns(String);

impl Ns {
    fn new(tag: &str) -> Self {
        let name = format!("tbxll{tag}{}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        ip(&["netns", "add", &name]);
        let ns = Self(name);
        ip_in(&ns.0, &["link", "set", "lo", "up"]);
        ns
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

/// Captures `iface` live inside `ns` while [`SEGMENTS`] KCP segments go to `to`; returns the
/// link type and the KCP sequence numbers decoded (`settle`: how long to wait for the last).
fn capture_kcp(ns: &Ns, iface: &str, to: &'static str, settle: Duration) -> (LinkType, Vec<u32>) {
    let cfg = LiveConfig {
        interfaces: vec![InterfaceSpec::parse(iface).unwrap()],
        immediate: true,
        ..LiveConfig::default()
    };
    let (cap, mut events) = capture_in(&ns.0, cfg);
    spawn_in(&ns.0, move || {
        let sock = UdpSocket::bind("0.0.0.0:0").unwrap();
        for sn in 0..SEGMENTS {
            let seg =
                tboxscope_test_support::pcap::kcp_segment(78, 81, 0, 128, sn, sn, 0, &[0x33; 100]);
            let _ = sock.send_to(&seg, to);
            std::thread::sleep(Duration::from_millis(5));
        }
    })
    .join()
    .unwrap();
    std::thread::sleep(settle);
    stop_capture(cap, &mut events);
    let mut dissector = Dissector::new(DissectConfig::default());
    let (mut link, mut sns) = (None, Vec::new());
    for ev in &events {
        if let LiveEvent::Packets(batch) = ev {
            for p in batch {
                link = Some(p.link);
                let mut out = Vec::new();
                dissector.dissect(Some(p.link), iface, &p.data, p.ts_ns, &mut out);
                for d in out {
                    if let Decoded::KcpSegment(r) = &d.decoded {
                        let k = &r.header;
                        if k.conv == 78 && d.dst.port() == 7101 {
                            sns.push(k.sn);
                        }
                    }
                }
            }
        }
    }
    let rejected = dissector.stats().net_rejected.not_ip + dissector.stats().unsupported_link;
    assert_eq!(rejected, 0, "{iface}: {:?}", dissector.stats());
    (link.unwrap_or_else(|| panic!("{iface}: no packet")), sns)
}

#[test]
#[ignore = "needs root"]
fn nflog_pseudo_device() {
    let ns = Ns::new("nf");
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.0, "nft"])
        .arg("table inet tbxll { chain out { type filter hook output priority 0; udp dport 7101 log group 6; }; }")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The kernel hands NFLOG messages over in batches, at the latest after 1 s.
    let (link, sns) = capture_kcp(
        &ns,
        "nflog:6",
        "127.0.0.1:7101",
        Duration::from_millis(1500),
    );
    assert_eq!(link, LinkType::Nflog);
    assert_eq!(sns, (0..SEGMENTS).collect::<Vec<_>>());
}

#[test]
#[ignore = "needs root"]
fn any_pseudo_device() {
    let ns = Ns::new("any");
    let (link, sns) = capture_kcp(&ns, "any", "127.0.0.1:7101", Duration::from_millis(300));
    assert!(
        matches!(link, LinkType::LinuxSll | LinkType::LinuxSll2),
        "{link:?}"
    );
    assert_eq!(sns, (0..SEGMENTS).collect::<Vec<_>>());
}

#[test]
#[ignore = "needs root"]
fn tun_device_raw_ip() {
    let ns = Ns::new("tun");
    let name = format!("tbxllt{}", std::process::id() % 10_000);
    let tun = {
        let name = name.clone();
        spawn_in(&ns.0, move || open_tun(&name)).join().unwrap()
    };
    ip_in(&ns.0, &["addr", "add", "10.78.0.1/24", "dev", &name]);
    ip_in(&ns.0, &["link", "set", &name, "up"]);
    let (link, sns) = capture_kcp(&ns, &name, "10.78.0.2:7101", Duration::from_millis(300));
    drop(tun);
    assert_eq!(link, LinkType::RawIp);
    assert_eq!(sns, (0..SEGMENTS).collect::<Vec<_>>());
}

/// Opens `/dev/net/tun` as tun device `name` (no packet information header); the device
/// lives while the file is open.
fn open_tun(name: &str) -> std::fs::File {
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
