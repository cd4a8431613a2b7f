//! Engine throughput: observations per second through matching + histograms, for three
//! traces, each against a baseline measured in the same run (a pass over the same
//! observations that only clones and hashes them, i.e. the cost of handing them over).
//!
//! Run: `cargo bench -p tboxscope-engine --bench engine_throughput`

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::hint::black_box;
use std::net::SocketAddr;
use std::time::Instant;

use tboxscope_engine::{
    Config, ConnId, Datagram, Engine, KcpCmd, KcpHeader, KcpSegment, Observation, PacketMeta,
    PathId, PathName, QuicAck, QuicPacket, StreamRange,
};

const T0: u64 = 1_796_000_000_000_000_000;

fn addr(s: &str) -> SocketAddr {
    s.parse()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
}

fn meta(ts: u64, p: usize, cap: u16, up: bool) -> PacketMeta {
    let t = [addr("10.0.0.2:40000"), addr("10.1.0.2:40001")][p];
    let g = addr("192.0.2.1:9000");
    let (src, dst) = if up { (t, g) } else { (g, t) };
    PacketMeta {
        ts_ns: ts,
        path: PathId(p as u16),
        capture: cap,
        src,
        dst,
        wire_len: 652,
        ttl: 64,
    }
}

/// Dual-sent datagrams captured at both ends (4 sightings per message).
fn datagram_trace(n: u64) -> Vec<Observation> {
    let mut v = Vec::new();
    for i in 0..n {
        let base = T0 + i * 1_000_000;
        for p in 0..2 {
            let d = |ts, cap| {
                Observation::Datagram(Datagram {
                    meta: meta(ts, p, cap, true),
                    payload_hash: i,
                    payload_len: 600,
                    app_msg_id: None,
                })
            };
            v.push(d(base + p as u64 * 1000, p as u16));
            v.push(d(
                base + 30_000_000 + (i * 7919 % 5000) * 1000,
                2 + p as u16,
            ));
        }
    }
    v.sort_by_key(Observation::ts_ns);
    v
}

/// Dual-sent KCP from the T-Box with ACKs.
fn kcp_trace(n: u64) -> Vec<Observation> {
    let mut v = Vec::new();
    for i in 0..n {
        let base = T0 + i * 1_000_000;
        for p in 0..2 {
            let s = |ts, cmd, up| {
                Observation::Kcp(KcpSegment {
                    meta: meta(ts, p, p as u16, up),
                    header: KcpHeader {
                        conv: 7,
                        cmd,
                        sn: i as u32,
                        una: 0,
                        frg: 0,
                        wnd: 128,
                        len: 600,
                        ts: (ts / 1_000_000) as u32,
                    },
                    app_msg_id: None,
                    content_hash: None,
                })
            };
            v.push(s(base, KcpCmd::Push, true));
            v.push(s(
                base + 50_000_000 + (i * 7919 % 9000) * 1000,
                KcpCmd::Ack,
                false,
            ));
        }
    }
    v.sort_by_key(Observation::ts_ns);
    v
}

/// Multipath QUIC, one connection, with PATH_ACKs.
fn quic_trace(n: u64) -> Vec<Observation> {
    let mut v = Vec::new();
    for i in 0..n {
        let base = T0 + i * 1_000_000;
        for p in 0..2 {
            v.push(Observation::from(QuicPacket {
                meta: meta(base, p, p as u16, true),
                conn: ConnId(1),
                path_id: p as u64,
                pn: i,
                streams: smallvec::smallvec![StreamRange {
                    stream_id: 0,
                    offset: i * 600,
                    len: 600,
                    fin: false,
                    data_hash: None,
                    app_msg_id: None,
                    framed: None,
                }],
                acks: Default::default(),
                ack_only: false,
            }));
            v.push(Observation::from(QuicPacket {
                meta: meta(base + 40_000_000, p, p as u16, false),
                conn: ConnId(1),
                path_id: p as u64,
                pn: i,
                streams: Default::default(),
                acks: smallvec::smallvec![QuicAck {
                    path_id: p as u64,
                    ranges: smallvec::smallvec![(i, i)],
                    ack_delay_us: 1000,
                }],
                ack_only: true,
            }));
        }
    }
    v.sort_by_key(Observation::ts_ns);
    v
}

/// CPU time of this thread (ns) from /proc/thread-self/schedstat, so that other processes on a
/// shared machine do not distort the figures; falls back to wall time.
struct Clock(Option<u64>, Instant);

fn cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

impl Clock {
    fn start() -> Self {
        Clock(cpu_ns(), Instant::now())
    }
    fn secs(&self) -> f64 {
        match (self.0, cpu_ns()) {
            (Some(a), Some(b)) => b.saturating_sub(a) as f64 / 1e9,
            _ => self.1.elapsed().as_secs_f64(),
        }
    }
}

fn baseline(obs: &[Observation]) -> f64 {
    let t = Clock::start();
    let mut h = DefaultHasher::new();
    for o in obs {
        let c = black_box(o.clone());
        c.ts_ns().hash(&mut h);
    }
    black_box(h.finish());
    t.secs()
}

fn engine(obs: &[Observation]) -> (f64, u64) {
    let cfg = Config {
        emit_messages: true,
        ..Config::default()
    };
    let mut e = Engine::new(cfg);
    for (p, label) in ["eth0", "eth1"].into_iter().enumerate() {
        e.handle(Observation::PathName(PathName {
            ts_ns: T0,
            id: PathId(p as u16),
            label: label.to_owned(),
        }));
    }
    let t = Clock::start();
    let mut records = 0u64;
    for (i, o) in obs.iter().enumerate() {
        e.handle(o.clone());
        if i % 4096 == 0 {
            records += e.drain_records().count() as u64;
        }
    }
    let s = e.finish(e.now_ns() + 10_000_000_000);
    records += e.drain_records().count() as u64;
    black_box(&s);
    (t.secs(), records)
}

fn main() {
    let n = std::env::var("ENGINE_BENCH_MESSAGES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000u64);
    println!("engine throughput, {n} messages per trace (best of 3, thread CPU time)");
    println!(
        "{:<34} {:>12} {:>14} {:>14} {:>8}",
        "trace", "observations", "baseline obs/s", "engine obs/s", "ratio"
    );
    for (name, obs) in [
        ("datagram, 2 paths, both ends", datagram_trace(n)),
        ("kcp dual-send, T-Box + ACKs", kcp_trace(n)),
        ("multipath quic, T-Box + ACKs", quic_trace(n)),
    ] {
        let mut b = f64::MAX;
        let mut eng = f64::MAX;
        for _ in 0..3 {
            b = b.min(baseline(&obs));
            eng = eng.min(engine(&obs).0);
        }
        let len = obs.len() as f64;
        println!(
            "{:<34} {:>12} {:>14.0} {:>14.0} {:>7.1}×",
            name,
            obs.len(),
            len / b,
            len / eng,
            eng / b
        );
    }
}
