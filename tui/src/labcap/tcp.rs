//! The lab's TCP messages rebuilt from the captures at both ends of the path: the byte stream
//! from the T-Box to the gateway as the T-Box's capture shows it (every transmission, lost
//! ones included), split into messages by the lab's framing (each message starts with `TBXM`
//! and its whole length, little-endian u16 at bytes 6..8, and carries its id at bytes 8..16);
//! each message is timed from the first capture of its first byte at the T-Box to the moment
//! the gateway's capture has seen every one of its bytes (the first arrival on the wire).
//!
//! Head-of-line stalls: a segment the T-Box had to send again holds every byte behind it at
//! the receiver from its first transmission (T-Box capture) until a copy of it reaches the
//! gateway (gateway capture). The longest such hold is the longest stall; holds that overlap
//! make one stall period (an outage's backed-off retransmissions are one).
use std::collections::HashMap;
use std::net::SocketAddr;

use probe_user::decode::net::TcpSegment;
use probe_user::engine::snapshot::Percentiles;
use probe_user::engine::LatencyHist;

/// Stream bytes kept per connection (a run of 60 s at 50 × 600 B is 1.8 MB).
const MAX_STREAM: usize = 64 << 20;
/// Connections followed.
const MAX_CONNECTIONS: usize = 64;
/// Longest latency recorded, µs (longer ones are clamped and counted).
const MAX_LATENCY_US: u64 = 600_000_000;

/// Length of the lab message header (magic, transport, path, length, id, two send times).
const HEADER_LEN: usize = 32;
const MAGIC: &[u8; 4] = b"TBXM";

/// Which end captured a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The T-Box (the sender).
    Tbox,
    /// The gateway (the receiver).
    Gateway,
}

#[derive(Debug, Default)]
struct Conn {
    /// Sequence number of the first stream byte (the client's SYN + 1).
    base: Option<u32>,
    /// The stream as sent; `sent_at[i]` is when byte i was first captured at the T-Box.
    stream: Vec<u8>,
    have: Vec<bool>,
    sent_at: Vec<u64>,
    /// Gateway data segments: (time, stream offset, length), in capture order.
    arrivals: Vec<(u64, usize, usize)>,
    /// First stream offsets of the segments the T-Box sent again.
    resent: Vec<usize>,
    /// T-Box data segments whose bytes had all been sent before.
    retransmitted: u64,
    /// Bytes past [`MAX_STREAM`] or before the stream start.
    out_of_range: u64,
}

/// The fields of a captured segment the message rebuild reads.
struct Seg<'a> {
    src: SocketAddr,
    dst: SocketAddr,
    seq: u32,
    syn: bool,
    payload: &'a [u8],
}

/// Follows the lab's TCP connections to one server port.
#[derive(Debug)]
pub struct TcpMessages {
    port: u16,
    conns: HashMap<(SocketAddr, SocketAddr), Conn>,
}

/// What the stream of one connection held.
#[derive(Debug, Clone, Default)]
pub struct StreamFigures {
    /// Client and server.
    pub connection: Option<(SocketAddr, SocketAddr)>,
    /// Messages framed in the stream the T-Box sent.
    pub messages: u64,
    /// Of those, messages whose every byte reached the gateway.
    pub delivered: u64,
    /// Per-message latency, first byte sent → last missing byte arrived.
    pub latency: Percentiles,
    /// T-Box data segments that carried only bytes sent before (retransmissions on the wire).
    pub retransmitted_segments: u64,
    /// Head-of-line stall periods (overlapping holds merged).
    pub hol_stalls: u64,
    /// The longest hold of one resent segment (first send → first arrival), ns.
    pub longest_hol_stall_ns: u64,
    /// Time during which some resent segment held the stream, ns.
    pub total_hol_stall_ns: u64,
    /// Why the framing stopped early, if it did.
    pub framing_problem: Option<String>,
}

impl TcpMessages {
    /// Follows connections whose server listens on `port`.
    pub fn new(port: u16) -> Self {
        Self {
            port,
            conns: HashMap::new(),
        }
    }

    /// The connections seen so far (client, server).
    pub fn connections(&self) -> impl Iterator<Item = &(SocketAddr, SocketAddr)> {
        self.conns.keys()
    }

    /// Takes one captured segment (client → server data only; the rest is ignored).
    pub fn segment(&mut self, end: End, ts_ns: u64, seg: &TcpSegment<'_>) {
        self.data(
            end,
            ts_ns,
            &Seg {
                src: seg.src,
                dst: seg.dst,
                seq: seg.tcp.seq(),
                syn: seg.tcp.flags().syn(),
                payload: seg.tcp.payload(),
            },
        );
    }

    fn data(&mut self, end: End, ts_ns: u64, seg: &Seg<'_>) {
        if seg.dst.port() != self.port {
            return;
        }
        let key = (seg.src, seg.dst);
        if !self.conns.contains_key(&key) && self.conns.len() >= MAX_CONNECTIONS {
            return;
        }
        let conn = self.conns.entry(key).or_default();
        if seg.syn {
            if end == End::Tbox && conn.base.is_none() {
                conn.base = Some(seg.seq.wrapping_add(1));
            }
            return;
        }
        if seg.payload.is_empty() {
            return;
        }
        // Without the SYN the stream starts at the first data byte captured.
        let base = *conn.base.get_or_insert(seg.seq);
        let offset = seg.seq.wrapping_sub(base) as usize;
        if offset >= MAX_STREAM || offset.saturating_add(seg.payload.len()) > MAX_STREAM {
            conn.out_of_range += 1;
            return;
        }
        let range = offset..offset + seg.payload.len();
        match end {
            End::Tbox => {
                if conn.stream.len() < range.end {
                    conn.stream.resize(range.end, 0);
                    conn.have.resize(range.end, false);
                    conn.sent_at.resize(range.end, u64::MAX);
                }
                let mut new = false;
                for (i, b) in range.clone().zip(seg.payload) {
                    if !conn.have[i] {
                        conn.have[i] = true;
                        conn.stream[i] = *b;
                        conn.sent_at[i] = ts_ns;
                        new = true;
                    }
                }
                if !new {
                    conn.retransmitted += 1;
                }
                if conn.sent_at[range.start] < ts_ns && conn.resent.len() < MAX_STREAM / 64 {
                    conn.resent.push(range.start);
                }
            }
            End::Gateway => conn.arrivals.push((ts_ns, range.start, range.len())),
        }
    }

    /// The figures of the connection that carried the most messages.
    pub fn figures(&self) -> StreamFigures {
        self.conns
            .iter()
            .map(|(k, c)| {
                let mut f = c.figures();
                f.connection = Some(*k);
                f
            })
            .max_by_key(|f| (f.messages, f.delivered))
            .unwrap_or_default()
    }
}

impl Conn {
    fn figures(&self) -> StreamFigures {
        // Messages: (start, length) from the framing, up to the first gap or bad header.
        let mut messages: Vec<(usize, usize)> = Vec::new();
        let mut problem = None;
        let mut at = 0usize;
        while at < self.stream.len() {
            let Some(header) = self.stream.get(at..at + 8) else {
                break;
            };
            if !self.have[at..at + 8].iter().all(|h| *h) {
                problem = Some(format!("stream byte {at}: not captured at the T-Box"));
                break;
            }
            let len = usize::from(u16::from_le_bytes([header[6], header[7]]));
            if &header[..4] != MAGIC || len < HEADER_LEN {
                problem = Some(format!("stream byte {at}: no lab message header"));
                break;
            }
            if at + len > self.stream.len() {
                break;
            }
            messages.push((at, len));
            at += len;
        }
        // Arrivals: bytes seen at the gateway, each message complete when its last missing
        // byte arrived.
        let mut missing: Vec<usize> = messages.iter().map(|m| m.1).collect();
        let mut arrived: Vec<Option<u64>> = vec![None; messages.len()];
        let mut got = vec![false; self.stream.len()];
        // First arrival of each resent segment's first byte.
        let mut resent: HashMap<usize, Option<u64>> =
            self.resent.iter().map(|s| (*s, None)).collect();
        let mut order: Vec<&(u64, usize, usize)> = self.arrivals.iter().collect();
        order.sort_by_key(|a| a.0);
        for &&(ts, start, len) in &order {
            let end = (start + len).min(got.len());
            if start >= end {
                continue;
            }
            let mut m = messages.partition_point(|x| x.0 + x.1 <= start);
            for (i, g) in got.iter_mut().enumerate().take(end).skip(start) {
                if *g {
                    continue;
                }
                *g = true;
                if let Some(slot @ None) = resent.get_mut(&i) {
                    *slot = Some(ts);
                }
                while m < messages.len() && messages[m].0 + messages[m].1 <= i {
                    m += 1;
                }
                if let Some(left) = missing.get_mut(m) {
                    if messages[m].0 <= i {
                        *left -= 1;
                        if *left == 0 {
                            arrived[m] = Some(ts);
                        }
                    }
                }
            }
        }
        let mut hist = LatencyHist::new(MAX_LATENCY_US, probe_user::engine::PATH_SIGFIG);
        let mut delivered = 0;
        for (m, a) in messages.iter().zip(&arrived) {
            let (Some(arrival), Some(&sent)) = (a, self.sent_at.get(m.0)) else {
                continue;
            };
            delivered += 1;
            hist.record(arrival.saturating_sub(sent) / 1_000);
        }
        // A segment that never arrived holds the stream until the last capture.
        let last = order.last().map_or(0, |a| a.0);
        let holds: Vec<(u64, u64)> = resent
            .iter()
            .filter_map(|(start, arrived)| {
                let first = *self.sent_at.get(*start)?;
                Some((first, arrived.unwrap_or(last).max(first)))
            })
            .collect();
        let periods = merge(holds.clone());
        StreamFigures {
            connection: None,
            messages: messages.len() as u64,
            delivered,
            latency: hist.percentiles(),
            retransmitted_segments: self.retransmitted,
            hol_stalls: periods.len() as u64,
            longest_hol_stall_ns: holds.iter().map(|s| s.1 - s.0).max().unwrap_or(0),
            total_hol_stall_ns: periods.iter().map(|s| s.1 - s.0).sum(),
            framing_problem: problem,
        }
    }
}

/// Intervals (start, end) merged where they overlap, in time order.
fn merge(mut spans: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    spans.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (a, b) in spans {
        match merged.last_mut() {
            Some(m) if a <= m.1 => m.1 = m.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(id: u64, len: usize) -> Vec<u8> {
        let mut m = vec![0u8; len];
        m[..4].copy_from_slice(MAGIC);
        m[6..8].copy_from_slice(&(len as u16).to_le_bytes());
        m[8..16].copy_from_slice(&id.to_le_bytes());
        m
    }

    fn seg<'a>(seq: u32, syn: bool, payload: &'a [u8]) -> Seg<'a> {
        Seg {
            src: "10.40.0.2:40000".parse().unwrap(),
            dst: "10.40.0.1:7001".parse().unwrap(),
            seq,
            syn,
            payload,
        }
    }

    #[test]
    fn a_lost_segment_delays_its_message_until_the_retransmission_arrives() {
        let mut t = TcpMessages::new(7001);
        let (a, b) = (message(0, 100), message(1, 100));
        t.data(End::Tbox, 0, &seg(999, true, &[]));
        // Message 0 leaves at 1 ms and is lost; message 1 leaves at 2 ms and arrives at 42 ms;
        // message 0's retransmission leaves at 200 ms and arrives at 240 ms.
        t.data(End::Tbox, 1_000_000, &seg(1000, false, &a));
        t.data(End::Tbox, 2_000_000, &seg(1100, false, &b));
        t.data(End::Gateway, 42_000_000, &seg(1100, false, &b));
        t.data(End::Tbox, 200_000_000, &seg(1000, false, &a));
        t.data(End::Gateway, 240_000_000, &seg(1000, false, &a));
        let f = t.figures();
        assert_eq!((f.messages, f.delivered), (2, 2));
        assert_eq!(f.retransmitted_segments, 1);
        // Message 0 held everything behind it from its first send (1 ms) to its arrival at
        // the gateway (240 ms).
        assert_eq!(f.hol_stalls, 1);
        assert_eq!(f.longest_hol_stall_ns, 239_000_000);
        assert_eq!(f.total_hol_stall_ns, 239_000_000);
        assert_eq!(f.latency.min_us, 40_000);
        assert_eq!(f.latency.max_us, 239_000);
        assert!(f.framing_problem.is_none());
    }

    #[test]
    fn a_message_split_over_segments_arrives_with_its_last_byte() {
        let mut t = TcpMessages::new(7001);
        let m = message(7, 600);
        t.data(End::Tbox, 0, &seg(0, true, &[]));
        t.data(End::Tbox, 1_000, &seg(1, false, &m[..300]));
        t.data(End::Tbox, 2_000, &seg(301, false, &m[300..]));
        t.data(End::Gateway, 5_000_000, &seg(301, false, &m[300..]));
        assert_eq!(t.figures().delivered, 0);
        t.data(End::Gateway, 9_000_000, &seg(1, false, &m[..300]));
        let f = t.figures();
        assert_eq!((f.messages, f.delivered), (1, 1));
        assert_eq!(f.latency.max_us, 8_999);
    }

    #[test]
    fn other_ports_and_bad_framing_are_not_messages() {
        let mut t = TcpMessages::new(7001);
        let mut other = seg(0, false, b"TBXM");
        other.dst = "10.40.0.1:22".parse().unwrap();
        t.data(End::Tbox, 0, &other);
        assert_eq!(t.connections().count(), 0);
        t.data(End::Tbox, 0, &seg(0, true, &[]));
        t.data(End::Tbox, 1, &seg(1, false, &[0u8; 64]));
        let f = t.figures();
        assert_eq!(f.messages, 0);
        assert!(f.framing_problem.unwrap().contains("no lab message header"));
    }
}
