//! Real KCP peers (the `kcp` crate, a port of ikcp) run as the seed runs KCP over two paths:
//! one session per path, each with its own conv, carrying the same 300 messages, in network
//! namespaces this test creates. Path B is cut for 6 s (longer than the 5 s message timeout;
//! the T-Box's segments leave and are lost on the way, as when a modem loses its cell), and
//! KCP's retransmission
//! delivers the copies it held once the path is back. tcpdump records both ends of both paths,
//! and the T-Box's interfaces again from 0.7 s into the run (a capture started mid-session).
//! `tboxscope analyze --json` of each set must give what the peers themselves say they sent
//! and received: every message once (the first one not split off as a flow of its own), every
//! message on both paths (the held copies too), the messages whose copy came after more than
//! the timeout counted as held, and no late copy left over.
#![expect(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::io::{self, Write};
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tboxscope_test_support::netns::{ip_in, spawn_in, Lab};

const BIN: &str = env!("CARGO_BIN_EXE_tboxscope");
/// Messages, one every `GAP`.
const N: usize = 300;
const GAP: Duration = Duration::from_millis(30);
/// Path B is cut from `CUT_AT` after the first message, for `CUT`.
const CUT_AT: Duration = Duration::from_millis(1_500);
const CUT: Duration = Duration::from_secs(6);
/// The mid-session captures start this long after the first message.
const LATE_START: Duration = Duration::from_millis(700);
/// The gateway's KCP port, and each session's conv (path A, path B).
const PORT: u16 = 7411;
const CONV: [u32; 2] = [0x5a00_0a01, 0x5a00_0b02];
/// The message timeout `analyze` uses by default.
const TIMEOUT_NS: u64 = 5_000_000_000;
/// Time to spare either side of the timeout when counting held messages from the truth.
const SPARE: u64 = 50_000_000;

/// kcp's output callback: one datagram per write on the connected socket. A datagram the
/// kernel refuses is lost like one lost on the way (KCP retransmits it).
struct UdpOut(UdpSocket);

impl Write for UdpOut {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let _ = self.0.send(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        .try_into()
        .unwrap()
}

/// Message `i`: 200 bytes, different for every message (the same on both sessions).
fn message(i: usize) -> Vec<u8> {
    let mut m = format!("telemetry {i:05} ").into_bytes();
    m.resize(200, b'a' + (i % 26) as u8);
    m
}

/// A KCP session on `sock` (connected), set up as the seed's fast profile.
fn session(conv: u32, sock: &UdpSocket) -> kcp::Kcp<UdpOut> {
    let mut k = kcp::Kcp::new(conv, UdpOut(sock.try_clone().unwrap()));
    k.set_nodelay(true, 10, 2, true);
    k.set_wndsize(128, 128);
    k.update(0).unwrap();
    k
}

/// The gateway's end of one session: what it received, as (message index, arrival), until
/// `stop` or 60 s.
fn receiver(local: String, remote: String, conv: u32, stop: Arc<AtomicBool>) -> Vec<(usize, u64)> {
    let sock = UdpSocket::bind(&local).unwrap();
    sock.connect(&remote).unwrap();
    sock.set_nonblocking(true).unwrap();
    let mut k = session(conv, &sock);
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    while start.elapsed() < Duration::from_secs(60) && !stop.load(Ordering::Relaxed) {
        while let Ok(n) = sock.recv(&mut buf) {
            let _ = k.input(&buf[..n]);
        }
        while let Ok(n) = k.recv(&mut buf) {
            let at = wall_ns();
            let i = std::str::from_utf8(&buf[10..15]).unwrap().parse().unwrap();
            assert_eq!(buf[..n], message(i)[..], "message {i} as sent");
            got.push((i, at));
        }
        k.update(start.elapsed().as_millis() as u32).unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    got
}

/// The T-Box's two sessions, one per path (`locals[p]` to `remotes[p]`): message i written to
/// session A then B at `i × GAP`, each flushed at once. Returns, per path, when each message
/// had been handed to the kernel, and whether everything was acknowledged within 60 s.
fn sender(locals: [String; 2], remotes: [String; 2], t0: Instant) -> ([Vec<u64>; 2], bool) {
    let socks: Vec<UdpSocket> = (0..2)
        .map(|p| {
            let s = UdpSocket::bind(&locals[p]).unwrap();
            s.connect(&remotes[p]).unwrap();
            s.set_nonblocking(true).unwrap();
            s
        })
        .collect();
    let mut ks: Vec<_> = (0..2).map(|p| session(CONV[p], &socks[p])).collect();
    let mut sent: [Vec<u64>; 2] = [Vec::new(), Vec::new()];
    let mut buf = vec![0u8; 65536];
    let mut next = 0;
    while t0.elapsed() < Duration::from_secs(60) {
        let now_ms = t0.elapsed().as_millis() as u32;
        for p in 0..2 {
            while let Ok(n) = socks[p].recv(&mut buf) {
                let _ = ks[p].input(&buf[..n]);
            }
            ks[p].update(now_ms).unwrap();
        }
        while next < N && t0.elapsed() >= GAP * next as u32 {
            for p in 0..2 {
                ks[p].send(&message(next)).unwrap();
                ks[p].flush().unwrap();
                sent[p].push(wall_ns());
            }
            next += 1;
        }
        if next == N && ks.iter().all(|k| k.wait_snd() == 0) {
            // The last ACKs on the wire, then done.
            std::thread::sleep(Duration::from_millis(200));
            return (sent, true);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    (sent, false)
}

/// Cuts path B on the way (`on`) or mends it: the gateway's end of the veth pair takes no
/// frame longer than 100 bytes of IP, so the T-Box's data segments (252 bytes) are dropped as
/// they cross the pair — after the T-Box's capture saw them leave, before the gateway's
/// capture or KCP see them arrive (`__dev_forward_skb` refuses them) — as when a modem's
/// cell is lost. The gateway's ACKs (52 bytes) would pass, but it has nothing to acknowledge.
fn cut(ns: &str, iface: &str, on: bool) {
    let mtu = if on { "100" } else { "1500" };
    ip_in(ns, &["link", "set", "dev", iface, "mtu", mtu]);
}

/// tcpdump processes, ended on drop.
struct Dumps(Vec<Child>);

impl Dumps {
    /// Starts tcpdump on `iface` in `ns` into `file`.
    fn start(&mut self, ns: &str, iface: &str, file: &Path) {
        self.start_cut(ns, iface, file, 262_144);
    }

    /// [`Dumps::start`] keeping the first `snaplen` bytes of each frame.
    fn start_cut(&mut self, ns: &str, iface: &str, file: &Path, snaplen: u32) {
        let child = Command::new("ip")
            .args(["netns", "exec", ns, "tcpdump", "-i", iface])
            .arg(format!("--snapshot-length={snaplen}"))
            .args([
                "-U",
                "--immediate-mode",
                "--time-stamp-precision=nano",
                "-w",
            ])
            .arg(file)
            .arg("udp")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.0.push(child);
    }

    /// Ends every tcpdump (SIGTERM: it writes what it holds) and waits, at most 20 s each.
    fn end(&mut self) {
        for c in &mut self.0 {
            let pid = libc::pid_t::try_from(c.id()).unwrap();
            // SAFETY: kill has no memory preconditions; the pid is our child's.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        for c in &mut self.0 {
            let deadline = Instant::now() + Duration::from_secs(20);
            while c.try_wait().unwrap().is_none() {
                assert!(Instant::now() < deadline, "tcpdump did not end");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

impl Drop for Dumps {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The summary of `analyze --json` of `files` (with `args`).
fn analyze(dir: &Path, name: &str, files: &[PathBuf], args: &[&str]) -> Value {
    let out = dir.join(name);
    let status = Command::new(BIN)
        .args(["analyze", "--json"])
        .arg(&out)
        .args(args)
        .args(files)
        .status()
        .unwrap();
    assert!(status.success(), "analyze {files:?}");
    let text = std::fs::read_to_string(&out).unwrap();
    let summary: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(summary["type"], "summary");
    assert_eq!(summary["errors"], serde_json::json!([]), "{files:?}");
    summary
}

/// One KCP segment of a capture, as `analyze --packets` shows it.
struct Seg {
    conv: u64,
    sn: u64,
    push: bool,
    len: usize,
    /// Where it starts in its datagram's payload.
    offset: usize,
}

/// The KCP segments of `files`, each with its offset in its datagram.
fn kcp_segments(dir: &Path, files: &[PathBuf]) -> Vec<Seg> {
    let out = dir.join("segments.jsonl");
    let status = Command::new(BIN)
        .args(["analyze", "--packets", "--json"])
        .arg(&out)
        .args(files)
        .status()
        .unwrap();
    assert!(status.success());
    let text = std::fs::read_to_string(&out).unwrap();
    let mut segs: Vec<Seg> = Vec::new();
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        if v["type"] != "kcp_segment" {
            continue;
        }
        let len = usize::try_from(v["len"].as_u64().unwrap()).unwrap();
        let offset = match (v["index"].as_u64().unwrap(), segs.last()) {
            (0, _) => 0,
            (_, Some(prev)) => prev.offset + 24 + prev.len,
            (_, None) => panic!("a datagram's segment {v} without its first"),
        };
        segs.push(Seg {
            conv: v["conv"].as_u64().unwrap(),
            sn: v["sn"].as_u64().unwrap(),
            push: v["cmd"] == "push",
            len,
            offset,
        });
    }
    segs
}

/// The first packet's time in a pcap file (nanosecond timestamps).
fn first_packet_ns(file: &Path) -> u64 {
    let b = std::fs::read(file).unwrap();
    assert_eq!(b[..4], [0x4d, 0x3c, 0xb2, 0xa1], "nanosecond pcap");
    let w = |at: usize| u64::from(u32::from_le_bytes(b[at..at + 4].try_into().unwrap()));
    w(24) * 1_000_000_000 + w(28)
}

/// What a capture set must show, from the peers' own truth.
struct Expect {
    messages: u64,
    /// Of them, with both copies in the capture.
    on_both: u64,
    /// Bounds of the messages that waited past the timeout for their copy on B: at least
    /// those sent into the cut more than the timeout before it ended (that copy cannot have
    /// crossed in time), at most those the receiver got more than the timeout after they were
    /// first sent (it delivers in order, no earlier than the copy arrived); 50 ms to spare.
    held: (u64, u64),
}

/// Checks the one flow with messages in `summary`.
fn check(summary: &Value, set: &str, e: &Expect) {
    let red: Vec<&Value> = summary["redundancy"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["messages"].as_u64().unwrap() > 0)
        .collect();
    assert_eq!(red.len(), 1, "{set}: one flow with messages: {red:#?}");
    let r = red[0];
    let ctx = format!(
        "{set}: {r:#}\noutages {:#}\nhealth {:#}",
        summary["outages"], summary["health"]
    );
    assert_eq!(r["mode"], "content", "{ctx}");
    assert_eq!(r["messages"], e.messages, "{ctx}");
    assert_eq!(r["on_all_paths"], e.on_both, "{ctx}");
    assert_eq!(r["late_copies"], 0, "{ctx}");
    let h = &summary["health"];
    let held = h["held_messages"].as_u64().unwrap();
    assert!(
        (e.held.0..=e.held.1).contains(&held),
        "{set}: {held} held, the peers say {:?}: {h:#}",
        e.held
    );
    eprintln!(
        "{set}: {} messages, {} on both paths, {held} held past the timeout, {} late copies, {} regrouped",
        r["messages"], r["on_all_paths"], r["late_copies"], h["regrouped_messages"]
    );
    assert_eq!(h["held_too_long"], 0, "{set}: {h:#}");
    assert_eq!(h["evicted_messages"], 0, "{set}: {h:#}");
    let outages: Vec<&Value> = summary["outages"].as_array().unwrap().iter().collect();
    assert_eq!(outages.len(), 1, "{set}: {outages:#?}");
}

#[test]
#[ignore = "needs root"]
fn kcp_session_per_path_through_a_six_second_cut_counts_every_message_once_on_both_paths() {
    let lab = Lab::new("kp", 2);
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str| dir.path().join(format!("{name}.pcap"));
    let (t_if, c_if): (Vec<String>, Vec<String>) =
        lab.links.iter().map(|l| (l.0.clone(), l.1.clone())).unzip();
    let mut dumps = Dumps(Vec::new());
    for (p, side) in ["A", "B"].iter().enumerate() {
        dumps.start(&lab.tbox, &t_if[p], &file(&format!("tbox-{side}")));
        dumps.start(&lab.cloud, &c_if[p], &file(&format!("gw-{side}")));
        // Header-only captures, as field captures often are: the messages' first 64 bytes
        // (what names them by content), and the KCP header with 30 bytes of the message.
        dumps.start_cut(&lab.tbox, &t_if[p], &file(&format!("s130-{side}")), 130);
        dumps.start_cut(&lab.tbox, &t_if[p], &file(&format!("s96-{side}")), 96);
        dumps.start_cut(&lab.cloud, &c_if[p], &file(&format!("gw130-{side}")), 130);
    }
    // (tcpdump needs a moment before it captures.)
    std::thread::sleep(Duration::from_millis(1_500));

    let stop = Arc::new(AtomicBool::new(false));
    let receivers: Vec<_> = (0..2)
        .map(|p| {
            let (_, _, ta, ca) = lab.links[p].clone();
            let stop = Arc::clone(&stop);
            spawn_in(&lab.cloud, move || {
                receiver(
                    format!("{ca}:{PORT}"),
                    format!("{ta}:{}", 50_000 + p),
                    CONV[p],
                    stop,
                )
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    let locals = [0, 1].map(|p| format!("{}:{}", lab.links[p].2, 50_000 + p));
    let remotes = [0, 1].map(|p| format!("{}:{PORT}", lab.links[p].3));
    let t0 = Instant::now();
    let sender = spawn_in(&lab.tbox, move || sender(locals, remotes, t0));

    std::thread::sleep(LATE_START);
    for (p, side) in ["A", "B"].iter().enumerate() {
        dumps.start(&lab.tbox, &t_if[p], &file(&format!("mid-{side}")));
    }
    std::thread::sleep(CUT_AT.saturating_sub(t0.elapsed()));
    cut(&lab.cloud, &c_if[1], true);
    // Nothing crosses path B from here ...
    let cut_on = wall_ns();
    std::thread::sleep(CUT);
    // ... to here at least.
    let cut_off = wall_ns();
    cut(&lab.cloud, &c_if[1], false);

    let (sent, acked) = sender.join().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let got: Vec<Vec<(usize, u64)>> = receivers.into_iter().map(|r| r.join().unwrap()).collect();
    // (What the captures hold reaches their files before they end.)
    std::thread::sleep(Duration::from_secs(1));
    dumps.end();
    assert!(acked, "KCP acknowledged every message on both sessions");

    // The peers' truth: each session delivered every message, in order.
    for (p, g) in got.iter().enumerate() {
        let order: Vec<usize> = g.iter().map(|x| x.0).collect();
        assert_eq!(
            order,
            (0..N).collect::<Vec<_>>(),
            "session {p} delivered all"
        );
    }
    // How long after its first send each message's copy on B was delivered.
    let first = |i: usize| sent[0][i].min(sent[1][i]);
    let delay = |i: usize| got[1][i].1.saturating_sub(first(i));
    let held_from = |msgs: &[usize]| {
        let count = |f: &dyn Fn(usize) -> bool| msgs.iter().filter(|i| f(**i)).count() as u64;
        (
            count(&|i| first(i) >= cut_on + SPARE && first(i) + TIMEOUT_NS + SPARE <= cut_off),
            count(&|i| delay(i) + SPARE > TIMEOUT_NS),
        )
    };
    let all: Vec<usize> = (0..N).collect();
    let everything = Expect {
        messages: N as u64,
        on_both: N as u64,
        held: held_from(&all),
    };
    let longest = all.iter().map(|i| delay(*i)).max().unwrap();
    eprintln!(
        "peers: {N} messages on both sessions; held past 5 s: {:?} (bounds); longest delivery on B {:.2} s",
        everything.held,
        longest as f64 / 1e9
    );
    assert!(
        everything.held.0 > 10,
        "the cut held copies past the timeout"
    );

    let both_ends: Vec<PathBuf> = ["tbox-A", "tbox-B", "gw-A", "gw-B"]
        .iter()
        .map(|n| file(n))
        .collect();
    let stated = [
        "--pair",
        "tbox-A=gw-A",
        "--pair",
        "tbox-B=gw-B",
        "--host",
        "tbox-A=tbox",
        "--host",
        "tbox-B=tbox",
        "--host",
        "gw-A=gateway",
        "--host",
        "gw-B=gateway",
    ];
    let s = analyze(dir.path(), "both.jsonl", &both_ends, &stated);
    check(&s, "both ends", &everything);

    let tbox = [file("tbox-A"), file("tbox-B")];
    let whole = analyze(dir.path(), "tbox.jsonl", &tbox, &[]);
    check(&whole, "T-Box side", &everything);

    // Cut by a snap length, as field captures often are: what the cut left of each datagram
    // is decoded, no more. From the whole capture's segments: those whose header the cut
    // keeps, and for each session the messages with a copy named by content (its first 64
    // bytes kept); KCP bundles the copies it resends after the cut, so most of those on B
    // are past the first segment of their datagram and out of sight.
    let segments = kcp_segments(dir.path(), &tbox);
    let cut_view = |snaplen: usize| {
        let (mut seen, mut unnamed) = (0u64, 0u64);
        let mut named: [std::collections::BTreeSet<u64>; 2] = Default::default();
        for s in &segments {
            // Ethernet, IPv4 and UDP headers: 42 bytes.
            let header_end = 42 + s.offset + 24;
            if header_end > snaplen {
                continue;
            }
            seen += 1;
            let session = CONV.iter().position(|c| u64::from(*c) == s.conv);
            if let (Some(p), true) = (session, s.push) {
                if header_end + s.len.min(64) <= snaplen {
                    named[p].insert(s.sn);
                } else {
                    unnamed += 1;
                }
            }
        }
        (seen, unnamed, named)
    };
    let bytes = |s: &Value| -> Vec<Value> {
        let paths = s["paths"].as_array().unwrap();
        paths.iter().map(|p| p["bytes"].clone()).collect()
    };
    for snaplen in [130, 96] {
        let files = [
            file(&format!("s{snaplen}-A")),
            file(&format!("s{snaplen}-B")),
        ];
        let s = analyze(dir.path(), &format!("s{snaplen}.jsonl"), &files, &[]);
        let frames = &s["frames"];
        let (seen, unnamed, named) = cut_view(snaplen);
        eprintln!(
            "{snaplen} bytes a frame: {seen} segments in sight, {unnamed} data segments unnamed, {} and {} messages named on A and B: {frames}",
            named[0].len(),
            named[1].len()
        );
        assert_eq!(frames["net_rejected"]["truncated"], 0, "{frames}");
        assert_eq!(frames["kcp_segments"], seen, "{frames}");
        assert_eq!(frames["kcp_cut_unnamed"], unnamed, "{frames}");
        assert!(
            frames["udp_cut"].as_u64().unwrap() >= 2 * N as u64,
            "{frames}"
        );
        assert_eq!(bytes(&s), bytes(&whole), "wire bytes, not captured bytes");
        if snaplen == 130 {
            assert_eq!(
                named[0].len(),
                N,
                "every copy on A is alone in its datagram"
            );
            let on_both = named[1].len() as u64;
            let set = "T-Box side, 130 bytes a frame";
            let cut_expect = Expect {
                messages: N as u64,
                on_both,
                held: everything.held,
            };
            check(&s, set, &cut_expect);
            // Both ends cut alike: the gateway sees the datagrams the T-Box sent (those the
            // cut lost aside), so the same copies are in sight.
            let files = ["s130-A", "s130-B", "gw130-A", "gw130-B"].map(file);
            let stated = stated.map(|a| a.replace("tbox-", "s130-").replace("gw-", "gw130-"));
            let s = analyze(
                dir.path(),
                "both130.jsonl",
                &files,
                &stated.each_ref().map(String::as_str),
            );
            assert_eq!(s["frames"]["net_rejected"]["truncated"], 0);
            check(&s, "both ends, 130 bytes a frame", &cut_expect);
        } else {
            // Nothing names a message: each session is followed alone, no copy is matched
            // across them by guesswork.
            assert!(unnamed > 2 * N as u64 - 100);
            let red = s["redundancy"].as_array().unwrap();
            assert!(red.iter().all(|r| r["on_all_paths"] == 0), "{red:#?}");
            let a = red
                .iter()
                .find(|r| r["paths"][0]["path"] == "s96-A")
                .unwrap();
            assert_eq!((&a["mode"], &a["messages"]), (&"kcp_sn".into(), &N.into()));
        }
    }

    // Started mid-session: the messages of which the capture holds a copy sent (the first
    // packet of each file is no earlier than what it shows; each copy was on the wire before
    // its session's flush returned).
    let mid = [file("mid-A"), file("mid-B")];
    let from = [first_packet_ns(&mid[0]), first_packet_ns(&mid[1])];
    let captured = |p: usize, i: usize| sent[p][i] >= from[p];
    let seen: Vec<usize> = (0..N)
        .filter(|i| captured(0, *i) || captured(1, *i))
        .collect();
    let on_both = seen
        .iter()
        .filter(|i| captured(0, **i) && captured(1, **i))
        .count() as u64;
    assert!(
        seen.len() < N - 10 && seen.len() > N / 2,
        "{} seen",
        seen.len()
    );
    let s = analyze(dir.path(), "mid.jsonl", &mid, &[]);
    check(
        &s,
        "mid-session",
        &Expect {
            messages: seen.len() as u64,
            on_both,
            held: held_from(&seen),
        },
    );
}
