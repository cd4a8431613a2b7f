//! QUIC decode throughput: 1-RTT header-protection removal, packet-number reconstruction,
//! AES-128-GCM decryption and frame parsing on a realistic packet mix, one core.
//!
//! Baselines measured in the same run: the bare AEAD open of the same packets with `ring`
//! (the cryptographic floor) and a copy of the packet bytes.
#![allow(clippy::unwrap_used)]

#[path = "../tests/common/mod.rs"]
mod common;

use common::{seal_short, unhex};
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use std::net::SocketAddr;
use tboxscope_decode::quic::keys::{CipherSuite, PacketKeys, Secret};
use tboxscope_decode::quic::varint::encode_varint;
use tboxscope_decode::quic::{DatagramInfo, Frame, Keylog, QuicDecoder, Version};

const RANDOM: &str = "ebf8fa56f12939b9584a3896472ec40bb863cfd3e86804fe3a47f06a2b69484c";
const PACKETS: usize = 4096;

fn data(name: &str) -> Vec<u8> {
    let p = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    unhex(&std::fs::read_to_string(p).unwrap())
}

fn keys(secret: &[u8]) -> PacketKeys {
    Secret::new(CipherSuite::Aes128GcmSha256, Version::V1, secret)
        .unwrap()
        .keys()
        .unwrap()
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
    let up = DatagramInfo {
        src: Some(ca),
        dst: Some(sa),
        from_client: None,
    };
    let down = DatagramInfo {
        src: Some(sa),
        dst: Some(ca),
        from_client: None,
    };
    let log = format!(
        "CLIENT_TRAFFIC_SECRET_0 {RANDOM} {}\nSERVER_TRAFFIC_SECRET_0 {RANDOM} {}\n",
        "11".repeat(32),
        "22".repeat(32)
    );
    let mut dec = QuicDecoder::new(
        Default::default(),
        Some(Keylog::parse(log.as_bytes()).unwrap()),
    );
    dec.decode(&data("rfc9001-client-initial.hex"), &up);
    dec.decode(&data("rfc9001-server-initial.hex"), &down);
    let (ck, sk) = (keys(&[0x11; 32]), keys(&[0x22; 32]));
    let dcid = unhex("f067a5502a4262b5");
    let mut packets = Vec::with_capacity(PACKETS);
    let (mut cpn, mut spn, mut off) = (0u64, 0u64, 0u64);
    for i in 0..PACKETS {
        let kind = i % 20;
        if kind < 11 {
            let mut f = vec![0x0e];
            encode_varint(4, &mut f);
            encode_varint(off, &mut f);
            encode_varint(1150, &mut f);
            f.extend(std::iter::repeat_n(0x5a, 1150));
            off += 1150;
            packets.push((seal_short(&ck, &ck, &dcid, cpn, 2, false, 0, &f), up));
            cpn += 1;
        } else if kind < 18 {
            let mut f = vec![0x02];
            encode_varint(cpn.saturating_sub(1), &mut f);
            f.extend([0x19, 0x01, 0x00, 0x02]); // delay, 1 range, first range, gap
            f.push(0x03);
            packets.push((seal_short(&sk, &sk, &[], spn, 2, false, 0, &f), down));
            spn += 1;
        } else {
            let mut f = vec![0x02, 0x05, 0x10, 0x00, 0x03];
            for sid in [8u64, 12] {
                f.push(0x0e);
                encode_varint(sid, &mut f);
                encode_varint(off, &mut f);
                encode_varint(120, &mut f);
                f.extend(std::iter::repeat_n(0x33, 120));
            }
            packets.push((seal_short(&ck, &ck, &dcid, cpn, 2, false, 0, &f), up));
            cpn += 1;
        }
    }
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
        })
    });

    // The AEAD alone on the same bytes (headers left protected: the tag fails, but `ring` does
    // the full GHASH + AES-CTR work before comparing; this is the crypto floor per packet).
    let k = keys(&[0x11; 32]);
    g.bench_function("baseline_aead_open", |b| {
        let mut buf = Vec::with_capacity(1500);
        b.iter(|| {
            for (p, _) in &s.packets {
                buf.clear();
                buf.extend_from_slice(p);
                let hdr =
                    if p.len() > 9 && p[1..9] == [0xf0, 0x67, 0xa5, 0x50, 0x2a, 0x42, 0x62, 0xb5] {
                        11
                    } else {
                        3
                    };
                let (aad, body) = buf.split_at_mut(hdr);
                let _ = black_box(k.open([0; 12], aad, body));
            }
        })
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
        })
    });

    g.bench_function("decrypt_parse_and_owned_summary", |b| {
        b.iter(|| {
            let mut n = 0;
            for (p, info) in &s.packets {
                n += s.dec.decode(p, info).len();
            }
            black_box(n)
        })
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
