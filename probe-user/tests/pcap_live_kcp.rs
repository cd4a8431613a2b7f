//! KCP from the `kcp` crate (ikcp, raw over UDP) between two network namespaces, captured live
//! with tboxscope's libpcap source, written to a pcapng file and decoded back through the
//! analyze driver to exactly the messages the peers sent.
#![expect(clippy::unwrap_used)]

mod live_common;

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use live_common::{capture_in, stop_capture};
use probe_user::analyze::Analyzer;
use probe_user::dissect::{Decoded, DissectConfig};
use probe_user::source::pcap::{InterfaceSpec, LiveConfig, LiveEvent};
use tboxscope_test_support::netns::{spawn_in, Lab};
use tboxscope_test_support::pcap::Ng;

const CONV: u32 = 0x7b0c_5e11;

/// kcp's output callback: each flush writes one datagram to the connected socket.
struct UdpOut(UdpSocket);

impl Write for UdpOut {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.send(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The known messages: short control messages and long ones split into several fragments.
fn messages() -> Vec<Vec<u8>> {
    (0..24u32)
        .map(|i| {
            let len = match i % 4 {
                0 => 12,
                1 => 300,
                2 => 1500,
                _ => 3800,
            };
            (0..len).map(|j| (i * 7 + j) as u8).collect()
        })
        .collect()
}

/// Runs one ikcp peer until `done` is set or the deadline; the sender sends `to_send` first and
/// sets `done` once everything is acknowledged; the receiver returns what it received.
fn peer(
    local: String,
    remote: String,
    to_send: Vec<Vec<u8>>,
    done: Arc<AtomicBool>,
) -> Vec<Vec<u8>> {
    let sock = UdpSocket::bind(&local).unwrap();
    sock.connect(&remote).unwrap();
    sock.set_nonblocking(true).unwrap();
    let mut kcp = kcp::Kcp::new(CONV, UdpOut(sock.try_clone().unwrap()));
    kcp.set_nodelay(true, 10, 2, true);
    kcp.set_wndsize(128, 128);
    let start = Instant::now();
    let now_ms = || start.elapsed().as_millis() as u32;
    for m in &to_send {
        kcp.send(m).unwrap();
    }
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    let deadline = start + Duration::from_secs(20);
    while Instant::now() < deadline && !done.load(Ordering::Relaxed) {
        kcp.update(now_ms()).unwrap();
        while let Ok(n) = sock.recv(&mut buf) {
            kcp.input(&buf[..n]).unwrap();
        }
        while let Ok(n) = kcp.recv(&mut buf) {
            got.push(buf[..n].to_vec());
        }
        kcp.update(now_ms()).unwrap();
        if !to_send.is_empty() && kcp.wait_snd() == 0 {
            // Everything acknowledged: let the last ACKs reach the wire, then stop both.
            std::thread::sleep(Duration::from_millis(50));
            done.store(true, Ordering::Relaxed);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    got
}

#[test]
fn kcp_crate_peers_captured_live_decode_to_the_sent_messages() {
    let lab = Lab::new("k", 1);
    let (t_if, _, t_addr, c_addr) = lab.links[0].clone();
    let cfg = LiveConfig {
        interfaces: vec![InterfaceSpec::parse(&format!("{t_if}=4G")).unwrap()],
        filter: Some("udp".to_owned()),
        ..LiveConfig::default()
    };
    let (cap, mut events) = capture_in(&lab.tbox, cfg);

    let sent = messages();
    let done = Arc::new(AtomicBool::new(false));
    let (d1, d2) = (Arc::clone(&done), Arc::clone(&done));
    let (tx_local, tx_remote) = (format!("{t_addr}:40001"), format!("{c_addr}:9000"));
    let (rx_local, rx_remote) = (tx_remote.clone(), tx_local.clone());
    let receiver = spawn_in(&lab.cloud, move || {
        peer(rx_local, rx_remote, Vec::new(), d1)
    });
    // Give the receiver a moment to bind.
    std::thread::sleep(Duration::from_millis(50));
    let to_send = sent.clone();
    let sender = spawn_in(&lab.tbox, move || peer(tx_local, tx_remote, to_send, d2));
    sender.join().unwrap();
    let received = receiver.join().unwrap();
    assert!(
        done.load(Ordering::Relaxed),
        "the KCP transfer did not finish in time"
    );
    assert_eq!(
        received, sent,
        "the kcp crate itself delivered the messages"
    );

    stop_capture(cap, &mut events);

    // Write what was captured to a pcapng file, as `capture` would, and analyze it.
    let mut ng = Ng::new(false);
    ng.idb(1, 65535, Some("4G"), Some(9));
    let mut drops = None;
    for ev in &events {
        match ev {
            LiveEvent::Packets(batch) => {
                for p in batch {
                    assert_eq!(p.link.linktype(), 1);
                    ng.epb(0, p.ts_ns, p.orig_len, &p.data);
                }
            }
            LiveEvent::Stats { stats, .. } => drops = Some(stats.dropped + stats.if_dropped),
            _ => {}
        }
    }
    assert_eq!(drops, Some(0));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kcp-live.pcapng");
    std::fs::write(&file, &ng.bytes).unwrap();

    // No --kcp-port: KCP is recognised by its structure alone.
    let mut analyzer = Analyzer::new(DissectConfig::default());
    // sn → (frg, payload) of the sender's PUSH segments; retransmissions must repeat the bytes.
    let mut pushes: BTreeMap<u32, (u8, Vec<u8>)> = BTreeMap::new();
    let mut acks = 0;
    let mut emit = |r: probe_user::analyze::Record<'_>| -> Result<(), ()> {
        let Decoded::KcpSegment(k) = &r.packet.decoded else {
            panic!("unexpected record {:?}", r.packet);
        };
        let s = &k.header;
        assert_eq!(s.conv, CONV);
        assert_eq!(r.path, "4G");
        match s.cmd.as_str() {
            "push" => {
                assert_eq!(r.packet.src.port(), 40001);
                let at = k.payload_at.unwrap() as usize;
                let bytes = r.data[at..at + s.len as usize].to_vec();
                if let Some(prev) = pushes.insert(s.sn, (s.frg, bytes.clone())) {
                    assert_eq!(
                        prev,
                        (s.frg, bytes),
                        "retransmission of sn {} differs",
                        s.sn
                    );
                }
            }
            "ack" => acks += 1,
            _ => {}
        }
        Ok(())
    };
    analyzer.run_file(&file, &mut emit).unwrap().unwrap();
    let stats = analyzer.stats().clone();
    assert_eq!(
        stats.udp, stats.kcp_datagrams,
        "every captured datagram is KCP"
    );
    assert!(acks > 0);

    // Reassemble messages from consecutive sn: frg counts down to 0 at a message's last piece.
    // kcp's default MSS is 1376 bytes: 12, 300, 1500 and 3800 bytes take 1, 1, 2 and 3 segments.
    assert_eq!(pushes.len(), 6 * 7);
    let sns: Vec<u32> = pushes.keys().copied().collect();
    assert_eq!(
        sns,
        (0..pushes.len() as u32).collect::<Vec<_>>(),
        "no segment missing"
    );
    let mut decoded = Vec::new();
    let mut current = Vec::new();
    for (frg, bytes) in pushes.values() {
        current.extend_from_slice(bytes);
        if *frg == 0 {
            decoded.push(std::mem::take(&mut current));
        }
    }
    assert!(current.is_empty());
    assert_eq!(decoded, sent);
    drop(lab);
}
