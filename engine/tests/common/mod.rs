//! Helpers for synthetic traces with exactly known ground truth.

use std::net::SocketAddr;

use tboxscope_engine::{
    CaptureId, Config, Engine, HolIncident, Host, MessageRecord, Observation, PacketMeta, PathId,
    PathName, Record, Summary, TcpRetransmitRecord, TcpRtoRecord,
};

pub const T0: u64 = 1_796_000_000_000_000_000;

/// The path labels packets of these tests carry, each named by its place here.
pub const LABELS: [&str; 8] = [
    "eth0", "eth1", "g0", "g1", "gw-g0", "gw-g1", "t-eth0", "t-eth1",
];

/// The id of path label `label` (one of [`LABELS`]).
pub fn path(label: &str) -> PathId {
    let i = LABELS.iter().position(|l| *l == label);
    PathId(i.expect("a label of LABELS") as u16)
}

/// A fresh engine with [`LABELS`] named.
pub fn engine(cfg: Config) -> Engine {
    let mut e = Engine::new(cfg);
    for label in LABELS {
        e.handle(Observation::PathName(PathName {
            ts_ns: T0,
            id: path(label),
            label: label.to_owned(),
        }));
    }
    e
}

pub fn addr(s: &str) -> SocketAddr {
    s.parse().expect("valid address literal")
}

pub fn meta(
    ts: u64,
    path: &str,
    capture: CaptureId,
    src: SocketAddr,
    dst: SocketAddr,
    wire: u32,
) -> PacketMeta {
    PacketMeta {
        ts_ns: ts,
        path: self::path(path),
        capture,
        src,
        dst,
        wire_len: wire,
        ttl: 0,
    }
}

pub fn capture(
    capture: CaptureId,
    name: &str,
    path: &str,
    host: Host,
    offset: Option<i64>,
) -> Observation {
    Observation::Capture(tboxscope_engine::CapturePoint {
        ts_ns: T0,
        capture,
        name: name.to_owned(),
        path: path.to_owned(),
        host,
        local_addrs: Vec::new(),
        clock_offset_ns: offset,
        pair_with: None,
    })
}

/// Capture points at both ends of two paths: the T-Box's `t-eth0`/`t-eth1` (ids 0, 1) and the
/// gateway's `gw-g0`/`gw-g1` (ids 2, 3), whose clock offset is `gateway_offset`.
pub fn two_ends_of_two_paths(gateway_offset: Option<i64>) -> Vec<Observation> {
    vec![
        capture(0, "t-eth0", "eth0", Host::Tbox, None),
        capture(1, "t-eth1", "eth1", Host::Tbox, None),
        capture(2, "gw-g0", "eth0", Host::Gateway, gateway_offset),
        capture(3, "gw-g1", "eth1", Host::Gateway, gateway_offset),
    ]
}

/// The percentile the engine must report for exact samples: hdrhistogram's rank rule
/// (sample of rank ceil(q·n), at least 1) and its bucket upper edge (3 significant digits),
/// never above the largest sample.
pub fn expected_quantile(sorted_us: &[u64], q: f64) -> u64 {
    let n = sorted_us.len() as u64;
    let mut rank = (q * n as f64).ceil() as u64;
    if rank == 0 {
        rank = 1;
    }
    let v = sorted_us[(rank - 1) as usize];
    let max = sorted_us.last().copied().unwrap_or(v);
    quantized(v, 3).min(max)
}

/// The bucket upper edge hdrhistogram reports for `us` (what a percentile equal to `us` is
/// reported as) with `sigfig` significant digits, up to 60 s as the engine keeps them.
pub fn quantized(us: u64, sigfig: u8) -> u64 {
    const MAX_US: u64 = 60_000_000;
    let h =
        hdrhistogram::Histogram::<u64>::new_with_bounds(1, MAX_US, sigfig).expect("valid bounds");
    h.highest_equivalent(us.min(MAX_US))
}

/// Sorts observations by timestamp (stable), as a capture merger would deliver them.
pub fn sorted(mut v: Vec<Observation>) -> Vec<Observation> {
    v.sort_by_key(Observation::ts_ns);
    v
}

/// The `message` records among `records`.
pub fn messages(records: &[Record]) -> Vec<&MessageRecord> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::Message(m) => Some(m),
            _ => None,
        })
        .collect()
}

/// The `hol_incident` records among `records`.
pub fn incidents(records: &[Record]) -> Vec<&HolIncident> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::HolIncident(h) => Some(h),
            _ => None,
        })
        .collect()
}

/// The `tcp_retransmit` records among `records`.
pub fn retransmits(records: &[Record]) -> Vec<&TcpRetransmitRecord> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::TcpRetransmit(x) => Some(x),
            _ => None,
        })
        .collect()
}

/// The `tcp_rto` records among `records`.
pub fn timeouts(records: &[Record]) -> Vec<&TcpRtoRecord> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::TcpRto(x) => Some(x),
            _ => None,
        })
        .collect()
}

/// Feeds `obs` in time order to a fresh engine and finishes the run just after the last one.
pub fn run(obs: Vec<Observation>, cfg: Config) -> Summary {
    let mut e = engine(cfg);
    let end = obs.iter().map(Observation::ts_ns).max().unwrap_or(T0);
    for o in sorted(obs) {
        e.handle(o);
    }
    e.finish(end + 1)
}

/// Feeds `engine` a TCP segment from `src` to `dst` on eth0 at `T0 + ms` (ACK flag, no options).
pub fn feed_segment(
    engine: &mut Engine,
    ms: u64,
    (src, dst): (SocketAddr, SocketAddr),
    (seq, ack): (u32, u32),
    window: u16,
    len: u32,
) {
    engine.handle(Observation::TcpSegment(tboxscope_engine::TcpSegment {
        meta: meta(T0 + ms * 1_000_000, "eth0", 0, src, dst, 40 + len),
        seq,
        ack,
        flags: tboxscope_engine::TcpFlags(0x10),
        window,
        len,
        options: tboxscope_engine::TcpOptions::default(),
        messages: Default::default(),
    }));
}
