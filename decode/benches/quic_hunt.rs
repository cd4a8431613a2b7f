//! Cost of hunting the connection of 1-RTT packets whose handshake was not captured
//! (`quic::hunt`): packets per second while trying, per key-log size and packet size, for
//! packets that are given up (not QUIC, or keys not in the log: the whole per-packet budget is
//! spent) and for packets that are found. One core; wall and this thread's CPU time.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::net::SocketAddr;
use std::time::Instant;
use tboxscope_decode::quic::hunt::HuntConfig;
use tboxscope_decode::quic::{DatagramInfo, DecoderConfig, Keylog, QuicDecoder};
use tboxscope_test_support::quic::{seal_short, v1_keys};

/// A key log of `entries` connections (the first with the 0x11…/0x22… secrets).
fn keylog(entries: usize) -> Keylog {
    let mut text = String::new();
    for i in 0..entries {
        let random = format!("{:064x}", i + 1);
        let (c, s) = if i == 0 {
            ("11".repeat(32), "22".repeat(32))
        } else {
            (format!("{:064x}", 1000 + i), format!("{:064x}", 2000 + i))
        };
        text += &format!(
            "CLIENT_TRAFFIC_SECRET_0 {random} {c}\nSERVER_TRAFFIC_SECRET_0 {random} {s}\n"
        );
    }
    Keylog::parse(text.as_bytes()).unwrap()
}

fn info(i: u32) -> DatagramInfo {
    let src: SocketAddr = format!(
        "10.{}.{}.1:{}",
        (i >> 8) & 0xff,
        i & 0xff,
        40000 + (i % 1000)
    )
    .parse()
    .unwrap();
    DatagramInfo {
        src: Some(src),
        dst: Some("10.255.0.2:443".parse().unwrap()),
        from_client: None,
    }
}

fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn report(what: &str, n: usize, cpu: u64, wall: u64, attempts: u64) {
    println!(
        "{what}: {:.0} packets/s of CPU ({:.0} wall), {:.1} µs/packet, {} AEAD attempts/packet",
        n as f64 / (cpu as f64 / 1e9),
        n as f64 / (wall as f64 / 1e9),
        cpu as f64 / 1e3 / n as f64,
        attempts / n as u64
    );
}

fn main() {
    let cfg = HuntConfig::default();
    println!(
        "bounds: {} packets per 4-tuple, {} AEAD attempts per packet, {} generations, {} paths",
        cfg.packets_per_tuple, cfg.opens_per_packet, cfg.generations, cfg.paths
    );
    // Given up: noise with a short-header first byte, every packet from its own 4-tuple.
    for entries in [1usize, 16] {
        for size in [40usize, 1200] {
            let n = if size > 100 { 60 } else { 200 };
            let mut dec = QuicDecoder::new(DecoderConfig::default(), Some(keylog(entries)));
            let mut x = 0x9e37_79b9u32;
            let packets: Vec<Vec<u8>> = (0..n)
                .map(|_| {
                    (0..size)
                        .map(|_| {
                            x ^= x << 13;
                            x ^= x >> 17;
                            x ^= x << 5;
                            (x >> 5) as u8 & 0x7f | 0x40
                        })
                        .collect()
                })
                .collect();
            let (c0, w0) = (thread_cpu_ns(), Instant::now());
            for (i, p) in packets.iter().enumerate() {
                black_box(dec.decode(p, &info(i as u32)));
            }
            let (cpu, wall) = (thread_cpu_ns() - c0, w0.elapsed().as_nanos() as u64);
            assert_eq!(dec.stats.hunt.recovered, 0);
            report(
                &format!("not found, {entries} key-log entries, {size} B"),
                n,
                cpu,
                wall,
                dec.stats.hunt.attempts,
            );
        }
    }
    // Found: the first packet of a connection in generation 2, packet number 70 000 (2 bytes),
    // 16 key-log entries; a fresh decoder each time.
    let (ck0, ck2) = (v1_keys(&[0x11; 32]), {
        let s = tboxscope_decode::quic::keys::Secret::new(
            tboxscope_decode::quic::keys::CipherSuite::Aes128GcmSha256,
            tboxscope_decode::quic::Version::V1,
            &[0x11; 32],
        )
        .unwrap();
        s.next_generation()
            .unwrap()
            .next_generation()
            .unwrap()
            .keys()
            .unwrap()
    });
    let dcid = [7u8; 8];
    for (label, keys, pn, pn_len) in [
        ("generation 0, pn 5", &ck0, 5u64, 1usize),
        ("generation 2, pn 70 000", &ck2, 70_000, 2),
    ] {
        let p = seal_short(keys, &ck0, &dcid, pn, pn_len, false, 0, &[1u8; 1100]);
        let log = keylog(16);
        let n = 50;
        let mut attempts = 0;
        let (c0, w0) = (thread_cpu_ns(), Instant::now());
        for i in 0..n {
            let mut dec = QuicDecoder::new(DecoderConfig::default(), Some(log.clone()));
            let s = dec.decode(&p, &info(i));
            assert!(s[0].decrypted && s[0].pn == Some(pn));
            attempts += dec.stats.hunt.attempts;
        }
        let (cpu, wall) = (thread_cpu_ns() - c0, w0.elapsed().as_nanos() as u64);
        report(
            &format!("found, {label}, 16 key-log entries, 1128 B (incl. key derivation)"),
            n as usize,
            cpu,
            wall,
            attempts,
        );
    }
}
