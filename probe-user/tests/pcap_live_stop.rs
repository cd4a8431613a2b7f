//! A live capture stopped while traffic still flows delivers every packet libpcap counted: with
//! immediate mode off the kernel holds the last packets in a partly filled TPACKET_V3 block,
//! which the capture drains at stop instead of closing the socket over it.

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::RecvTimeoutError;
use probe_user::source::pcap::{InterfaceSpec, LiveCapture, LiveConfig, LiveEvent, PathStats};
use tboxscope_test_support::netns::{spawn_in, Lab};

/// Counts the packets of `ev` into `delivered` and keeps the latest counters in `stats`.
fn count(ev: LiveEvent, delivered: &mut u64, stats: &mut Option<PathStats>) {
    match ev {
        LiveEvent::Packets(batch) => *delivered += batch.len() as u64,
        LiveEvent::Stats { stats: s, .. } => *stats = Some(s),
        _ => {}
    }
}

#[test]
fn stop_while_traffic_flows_delivers_every_packet_libpcap_counted() {
    let lab = Lab::new("s", 1);
    let link = lab.links[0].clone();
    let cfg = LiveConfig {
        interfaces: vec![InterfaceSpec::parse(&link.0).unwrap()],
        filter: Some("udp dst port 7000".to_owned()),
        stats_interval: Duration::from_millis(200),
        ..LiveConfig::default()
    };
    assert!(!cfg.immediate, "the kernel buffers blocks (TPACKET_V3)");
    let cap = spawn_in(&lab.tbox, move || LiveCapture::start(cfg))
        .join()
        .unwrap()
        .unwrap();

    // Sender: 20 datagrams per millisecond or so, until told to stop (at most 20 s).
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let sender = {
        let (stop, sent) = (Arc::clone(&stop), Arc::clone(&sent));
        let (src, dst) = (format!("{}:0", link.2), format!("{}:7000", link.3));
        spawn_in(&lab.tbox, move || {
            let sock = UdpSocket::bind(&src).unwrap();
            sock.connect(&dst).unwrap();
            let end = Instant::now() + Duration::from_secs(20);
            while !stop.load(Ordering::Relaxed) && Instant::now() < end {
                for _ in 0..20 {
                    if sock.send(&[0x42; 100]).is_ok() {
                        sent.fetch_add(1, Ordering::Relaxed);
                    }
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };

    // Once packets flow, stop the capture with the traffic still running.
    let (mut delivered, mut stats) = (0u64, None);
    let end = Instant::now() + Duration::from_secs(10);
    while delivered < 3_000 && Instant::now() < end {
        if let Ok(ev) = cap.events().recv_timeout(Duration::from_millis(20)) {
            count(ev, &mut delivered, &mut stats);
        }
    }
    assert!(delivered >= 3_000, "only {delivered} packets captured");
    cap.request_stop();
    // Everything the capture thread still hands over, until it has ended (bounded).
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        match cap.events().recv_timeout(Duration::from_millis(100)) {
            Ok(ev) => count(ev, &mut delivered, &mut stats),
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => {
                assert!(Instant::now() < end, "the capture thread did not end");
            }
        }
    }
    let at_stop = sent.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    sender.join().unwrap();
    drop(cap);

    let stats = stats.expect("final libpcap counters");
    assert_eq!(stats.dropped, 0, "{stats:?}");
    assert_eq!(
        stats.received, delivered,
        "libpcap counted {} packets, {delivered} were delivered ({at_stop} sent by the stop)",
        stats.received
    );
    assert!(at_stop > delivered, "traffic still flowed at the stop");
}
