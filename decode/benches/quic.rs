//! QUIC decode throughput: 1-RTT header-protection removal, packet-number reconstruction,
//! AES-128-GCM decryption and frame parsing on a realistic packet mix, one core.
//!
//! Baselines measured in the same run: the bare AEAD open of the same packets with `ring`
//! (the cryptographic floor) and a copy of the packet bytes.
#![expect(clippy::unwrap_used)]

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use std::net::SocketAddr;
use tboxscope_decode::quic::{DatagramInfo, Frame, Keylog, QuicDecoder};
use tboxscope_test_support::quic::{
    directions, rfc9001_keylog, unhex, v1_keys, OneRttMix, RFC9001_SERVER_CID,
};

const PACKETS: usize = 4096;

fn data(name: &str) -> Vec<u8> {
    let p = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    unhex(&std::fs::read_to_string(p).unwrap())
}

struct Setup {
    dec: QuicDecoder,
    packets: Vec<(Vec<u8>, DatagramInfo)>,
}

/// A connection set up by the RFC 9001 Initials and a keylog, then a mix of 1-RTT packets:
/// 55% full-size STREAM data (1200 B) client to server, 35% ACK-only from the server (~40 B),
/// 10% mid-size packets with ACK + two STREAM frames (~300 B).
fn setup() -> Setup {
    let ca: SocketAddr = "[2001:db8::1]:50000".parse().unwrap();
    let sa: SocketAddr = "[2001:db8::2]:443".parse().unwrap();
    let (up, down) = directions(ca, sa);
    let mut dec = QuicDecoder::new(
        Default::default(),
        Some(Keylog::parse(rfc9001_keylog().as_bytes()).unwrap()),
    );
    dec.decode(&data("rfc9001-client-initial.hex"), &up);
    dec.decode(&data("rfc9001-server-initial.hex"), &down);
    let mut mix = OneRttMix::new();
    let packets = (0..PACKETS as u64)
        .map(|i| match mix.packet(i) {
            (true, p) => (p, up),
            (false, p) => (p, down),
        })
        .collect();
    Setup { dec, packets }
}

fn bench(c: &mut Criterion) {
    let mut s = setup();
    let mut g = c.benchmark_group("quic_decode");
    g.throughput(Throughput::Elements(PACKETS as u64));
    g.sample_size(20);
    g.measurement_time(std::time::Duration::from_secs(4));

    g.bench_function("baseline_copy", |b| {
        let mut buf = Vec::with_capacity(1500);
        b.iter(|| {
            for (p, _) in &s.packets {
                buf.clear();
                buf.extend_from_slice(black_box(p));
            }
            black_box(buf.len())
        });
    });

    // The AEAD alone on the same bytes (headers left protected: the tag fails, but `ring` does
    // the full GHASH + AES-CTR work before comparing; this is the crypto floor per packet).
    let k = v1_keys(&[0x11; 32]);
    g.bench_function("baseline_aead_open", |b| {
        let mut buf = Vec::with_capacity(1500);
        b.iter(|| {
            for (p, _) in &s.packets {
                buf.clear();
                buf.extend_from_slice(p);
                let hdr = if p.len() > 9 && p[1..9] == RFC9001_SERVER_CID {
                    11
                } else {
                    3
                };
                let (aad, body) = buf.split_at_mut(hdr);
                let _ = black_box(k.open([0; 12], aad, body));
            }
        });
    });

    g.bench_function("decrypt_and_parse_frames", |b| {
        b.iter(|| {
            let mut stream_bytes = 0usize;
            for (p, info) in &s.packets {
                s.dec.decode_with(p, info, |pkt| {
                    for f in pkt.frames().flatten() {
                        if let Frame::Stream { data, .. } = f {
                            stream_bytes += data.len();
                        }
                    }
                });
            }
            black_box(stream_bytes)
        });
    });

    g.bench_function("decrypt_parse_and_owned_summary", |b| {
        b.iter(|| {
            let mut n = 0;
            for (p, info) in &s.packets {
                n += s.dec.decode(p, info).len();
            }
            black_box(n)
        });
    });
    g.finish();

    // The machine is shared: wall-clock figures above include time other processes held the
    // core. Also report throughput per second of this thread's own CPU time (schedstat, ns).
    let rounds = 60;
    let (cpu0, wall0) = (thread_cpu_ns(), std::time::Instant::now());
    for _ in 0..rounds {
        for (p, info) in &s.packets {
            s.dec.decode_with(p, info, |pkt| {
                black_box(pkt.frames().count());
            });
        }
    }
    let (cpu, wall) = (thread_cpu_ns() - cpu0, wall0.elapsed().as_nanos() as u64);
    let n = (rounds * PACKETS) as f64;
    let mut buf = Vec::with_capacity(1500);
    let cpu1 = thread_cpu_ns();
    for _ in 0..rounds {
        for (p, _) in &s.packets {
            buf.clear();
            buf.extend_from_slice(p);
            let hdr = if p.len() > 9 && p[1..9] == [0xf0, 0x67, 0xa5, 0x50, 0x2a, 0x42, 0x62, 0xb5]
            {
                11
            } else {
                3
            };
            let (aad, body) = buf.split_at_mut(hdr);
            let _ = black_box(k.open([0; 12], aad, body));
        }
    }
    let aead_cpu = thread_cpu_ns() - cpu1;
    println!(
        "quic_decode cpu-time: decrypt_and_parse_frames {:.0} packets/s of CPU ({:.0} wall), \
         baseline_aead_open {:.0} packets/s of CPU, ratio {:.2}",
        n / (cpu as f64 / 1e9),
        n / (wall as f64 / 1e9),
        n / (aead_cpu as f64 / 1e9),
        aead_cpu as f64 / cpu as f64
    );
    assert_eq!(s.dec.stats.not_decrypted.len(), 0, "{:?}", s.dec.stats);
}

/// CPU time of this thread in ns (Linux schedstat); 0 elsewhere.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

criterion_group!(benches, bench);
criterion_main!(benches);
