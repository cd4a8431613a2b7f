//! As root: real kernel TCP into a zero window. The receiver stops reading, its window
//! closes, and the sender's persist timer sends window probes until the receiver reads again.
//! `tboxscope analyze` of the sender's capture must count each probe as a window probe — as
//! many as the kernel's `TcpExtTCPWinProbe` — and none as a retransmission (the kernel's
//! `TcpRetransSegs` does not count them either).
#[expect(dead_code, reason = "each test uses some of the shared helpers")]
mod tcp_common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use tcp_common::{
    analyze_json, connect_from, in_netns, mss_segments, nstat, wire_direction, NetnsPair, Tcpdump,
};

#[test]
#[ignore = "needs root"]
fn probes_into_a_zero_window_are_window_probes_not_retransmissions() {
    let net = NetnsPair::new();
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("sender.pcap");
    let server = net.server();
    let (probes_before, retrans_before) = (
        nstat(&net.a, "TcpExtTCPWinProbe"),
        nstat(&net.a, "TcpRetransSegs"),
    );
    let dump = Tcpdump::start(&net.a, &net.dev_a, net.port, &pcap);
    // The receiver: a small buffer, nothing read for 3 s (the window closes and stays shut
    // through several persist timeouts), then everything.
    let (tx, rx) = std::sync::mpsc::channel();
    let receiver = in_netns(&net.b, move || {
        let l = TcpListener::bind(server).unwrap();
        tx.send(()).unwrap();
        let (mut c, _) = l.accept().unwrap();
        std::thread::sleep(Duration::from_secs(3));
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut n = 0u64;
        let mut buf = vec![0u8; 1 << 16];
        while let Ok(k) = c.read(&mut buf) {
            if k == 0 {
                break;
            }
            n += k as u64;
        }
        n
    });
    rx.recv_timeout(Duration::from_secs(5)).unwrap();
    let mut s = connect_from(&net.a, server);
    let local = s.local_addr().unwrap().to_string();
    let mss = net.ss().expect("ss sees the connection").mss;
    assert!(mss > 1000, "ss mss {mss}");
    let total = 16 * 1024 * 1024;
    let chunk = vec![0x5au8; 64 * 1024];
    for _ in 0..total / chunk.len() {
        s.write_all(&chunk).unwrap();
    }
    drop(s);
    assert_eq!(receiver.join().unwrap(), total as u64);
    std::thread::sleep(Duration::from_millis(300));
    drop(dump);
    let probes = nstat(&net.a, "TcpExtTCPWinProbe") - probes_before;
    let retrans = nstat(&net.a, "TcpRetransSegs") - retrans_before;

    let lines = analyze_json(&[&pcap]);
    let direction = wire_direction(&lines, &local).expect("the sender's direction");
    // Retransmitted segments as the kernel counts them: a resent GSO packet (one frame in
    // the capture) counts its MSS-sized segments: CI saw 4 resent packets of 136 segments
    // here, and runs on this machine 1, 4 of 125, 16 of 676.
    let resent: Vec<u64> = lines
        .iter()
        .filter(|r| {
            r["type"] == "tcp_retransmit" && r["source"] == "wire" && r["src"] == local.as_str()
        })
        .map(|r| r["len"].as_u64().unwrap())
        .collect();
    let wire_retrans: u64 = resent.iter().map(|len| mss_segments(*len, mss)).sum();
    let line = format!(
        "kernel: {probes} window probes, {retrans} retransmitted segments; wire: {} window \
         probes, {} retransmissions of {wire_retrans} segments (mss {mss})",
        direction["window_probes"],
        resent.len()
    );
    eprintln!("{line}");
    assert!(probes >= 2, "the window stayed shut long enough: {line}");
    assert_eq!(direction["window_probes"].as_u64(), Some(probes), "{line}");
    assert_eq!(wire_retrans, retrans, "{line}");
}
