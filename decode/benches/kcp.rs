//! KCP decode throughput on one core, on a realistic datagram mix, as ratios against a baseline
//! measured in the same run (touching every datagram without decoding it).
//!
//! Run: `cargo bench -p tboxscope-decode --bench kcp` (add `-- --quick` for a short run).
#![expect(clippy::too_many_arguments)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use tboxscope_decode::kcp::{Detector, Segments};

/// Deterministic xorshift generator (no dependency, same mix every run).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn segment(
    out: &mut Vec<u8>,
    conv: u32,
    cmd: u8,
    frg: u8,
    wnd: u16,
    ts: u32,
    sn: u32,
    una: u32,
    len: usize,
) {
    out.extend_from_slice(&conv.to_le_bytes());
    out.push(cmd);
    out.push(frg);
    out.extend_from_slice(&wnd.to_le_bytes());
    out.extend_from_slice(&ts.to_le_bytes());
    out.extend_from_slice(&sn.to_le_bytes());
    out.extend_from_slice(&una.to_le_bytes());
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.extend(std::iter::repeat_n(0x5a, len));
}

/// The mix laid out back to back in one buffer, as datagrams sit in a capture file read
/// sequentially: (offset, length).
struct Laid {
    buf: Vec<u8>,
    index: Vec<(usize, usize)>,
}

impl Laid {
    fn new(mix: &[Vec<u8>]) -> Self {
        let mut buf = Vec::new();
        let mut index = Vec::with_capacity(mix.len());
        for d in mix {
            // 16-byte record header + 62 bytes of Ethernet/IPv6/UDP headers, as in a pcap file.
            buf.extend_from_slice(&[0u8; 78]);
            index.push((buf.len(), d.len()));
            buf.extend_from_slice(d);
        }
        Self { buf, index }
    }
    fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.index.iter().map(|&(at, len)| &self.buf[at..at + len])
    }
}

/// The mix: 8 conversations; per direction, 1376-byte PUSH runs (frg countdowns), small control
/// PUSHes, ACK datagrams batching 1–8 ACKs, ~1% retransmissions, rare WASK/WINS; plus 10%
/// non-KCP UDP (DNS-like and random QUIC-like payloads).
fn build_mix(count: usize) -> (Vec<Vec<u8>>, u64) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut sn = [[0u32; 2]; 8];
    let mut out = Vec::with_capacity(count);
    let mut segments = 0u64;
    let mut time_ns = 0u64;
    while out.len() < count {
        time_ns += 500 + rng.below(1000);
        let conv = rng.below(8) as usize;
        let up = rng.below(2) == 0;
        let dir = usize::from(up);
        let ts = (time_ns / 1_000_000) as u32;
        let una = sn[conv][1 - dir];
        let mut bytes = Vec::with_capacity(1400);
        let kind = rng.below(100);
        let n = if kind < 10 {
            // Not KCP.
            if rng.below(2) == 0 {
                bytes.extend_from_slice(&[0x1a, 0x2b, 0x01, 0x00, 0x00, 0x01, 0, 0, 0, 0, 0, 0]);
                bytes.extend_from_slice(b"\x07example\x03com\x00\x00\x01\x00\x01");
            } else {
                let len = 40 + rng.below(1300) as usize;
                bytes.extend((0..len).map(|_| rng.next() as u8));
                bytes[0] = 0x40 | (bytes[0] & 0x3f);
            }
            0
        } else if kind < 45 {
            // A message of 1-3 full fragments, one datagram per fragment.
            let frags = 1 + rng.below(3) as u8;
            for f in (0..frags).rev() {
                let mut d = Vec::with_capacity(1400);
                let s = sn[conv][dir];
                sn[conv][dir] = s.wrapping_add(1);
                segment(&mut d, conv as u32, 81, f, 128, ts, s, una, 1376);
                out.push(d);
                segments += 1;
            }
            continue;
        } else if kind < 65 {
            let s = sn[conv][dir];
            sn[conv][dir] = s.wrapping_add(1);
            segment(
                &mut bytes,
                conv as u32,
                81,
                0,
                128,
                ts,
                s,
                una,
                60 + rng.below(200) as usize,
            );
            1
        } else if kind < 66 {
            let s = sn[conv][dir].wrapping_sub(1 + rng.below(4) as u32);
            segment(&mut bytes, conv as u32, 81, 0, 128, ts, s, una, 1376);
            1
        } else if kind < 67 {
            segment(
                &mut bytes,
                conv as u32,
                83 + rng.below(2) as u8,
                0,
                128,
                ts,
                0,
                una,
                0,
            );
            1
        } else {
            let acks = 1 + rng.below(8) as u32;
            let peer = sn[conv][1 - dir];
            for i in 0..acks {
                let acked = peer.wrapping_sub(acks - i);
                segment(
                    &mut bytes,
                    conv as u32,
                    82,
                    0,
                    128,
                    ts.wrapping_sub(20),
                    acked,
                    una,
                    0,
                );
            }
            u64::from(acks)
        };
        segments += n;
        out.push(bytes);
    }
    out.truncate(count);
    (out, segments)
}

/// Runs `f` over the whole mix repeatedly for at least `min`; returns seconds per pass.
fn measure(min: Duration, mut f: impl FnMut() -> u64) -> f64 {
    black_box(f()); // warm-up
    let start = Instant::now();
    let mut passes = 0u32;
    while start.elapsed() < min {
        black_box(f());
        passes += 1;
    }
    start.elapsed().as_secs_f64() / f64::from(passes)
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let min = Duration::from_millis(if quick { 300 } else { 2000 });
    // `--only STAGE` (baseline, walk, detect) runs one stage, e.g. under a profiler.
    let only: Option<String> = std::env::args().skip_while(|a| a != "--only").nth(1);
    // Streaming through a mix far larger than the caches, then a mix that stays in cache (as
    // when the capture reader has just touched the packet).
    let sizes: Vec<usize> = match std::env::var("KCP_BENCH_DATAGRAMS") {
        Ok(v) => v.split(',').filter_map(|n| n.parse().ok()).collect(),
        Err(_) => vec![200_000, 5_000],
    };
    for count in sizes {
        run(count, min, only.as_deref());
    }
}

fn run(count: usize, min: Duration, only: Option<&str>) {
    let min_for = |stage: &str| {
        if only.is_none_or(|o| o == stage) {
            min
        } else {
            Duration::ZERO
        }
    };
    let (mix, kcp_segments) = build_mix(count);
    let laid = Laid::new(&mix);
    let datagrams = mix.len() as f64;
    let bytes: usize = mix.iter().map(Vec::len).sum();
    println!();
    println!(
        "KCP decode mix: {} datagrams, {} KCP segments, {:.1} MB",
        mix.len(),
        kcp_segments,
        bytes as f64 / 1e6
    );

    let baseline = measure(min_for("baseline"), || {
        let mut acc = 0u64;
        for d in laid.iter() {
            let b = black_box(d);
            acc = acc.wrapping_add(b.len() as u64 ^ u64::from(b.first().copied().unwrap_or(0)));
        }
        acc
    });
    let walk = measure(min_for("walk"), || {
        let mut n = 0u64;
        for d in laid.iter() {
            for s in Segments::new(black_box(d)).flatten() {
                n = n.wrapping_add(u64::from(s.sn()));
            }
        }
        n
    });
    let mut detector = Detector::default();
    let detect = measure(min_for("detect"), || {
        let mut n = 0u64;
        for d in laid.iter() {
            if let Some(segments) = detector.classify(40000, 29900, black_box(d)).segments() {
                for s in segments {
                    n = n.wrapping_add(u64::from(s.sn()));
                }
            }
        }
        n
    });

    println!(
        "{:<34} {:>14} {:>14} {:>10}",
        "stage", "datagrams/s", "segments/s", "ns/dgram"
    );
    for (name, secs) in [
        ("baseline (touch each datagram)", baseline),
        ("segment walk (Segments)", walk),
        ("detect (Detector::classify)", detect),
    ] {
        println!(
            "{:<34} {:>14.0} {:>14.0} {:>10.1}",
            name,
            datagrams / secs,
            kcp_segments as f64 / secs,
            secs * 1e9 / datagrams
        );
    }
    println!(
        "ratios to baseline time: walk {:.1}x, detect {:.1}x",
        walk / baseline,
        detect / baseline
    );
}
