//! Captured frames and kernel TCP events into the engine, for the live UI and `lab run`: the
//! decoding (UDP through the dissector, TCP segments as segments), the QUIC key log followed as
//! the peers append to it, and the snapshot published to the UI with the capture's health.
use std::collections::BinaryHeap;
use std::path::{Path, PathBuf};

use probe_user::capture::clock::WallClock;
use probe_user::correlate::Correlator;
use probe_user::decode::net::TcpSegment as WireSegment;
use probe_user::dissect::{DecodedPacket, DissectConfig, Dissector};
use probe_user::engine::{CaptureId, Config as EngineConfig, Observation};
use probe_user::source::pcap::live::LivePacket;
use tboxscope_engine::input::{PacketMeta, TcpSegment};
use tboxscope_engine::snapshot::CaptureHealth;

use crate::app::Request;
use crate::kerneltcp::{TcpDrops, TcpMessage};
use crate::source::SnapshotFeed;

/// How far the idle clock stays behind the wall clock (packets still buffered by libpcap).
pub const SETTLE_NS: u64 = 500_000_000;
/// How long a captured packet is held so that the other paths' packets captured before it
/// (delivered by their own capture threads, up to a libpcap read timeout later) reach the
/// engine first; well under [`SETTLE_NS`], so held packets are never behind the engine's clock.
pub const REORDER_NS: u64 = 200_000_000;
/// Packets held at most (beyond, the oldest go on at once, counted).
const REORDER_MAX: usize = 1 << 16;

/// Packets of several captures put back in timestamp order before the engine sees them, as
/// `analyze` merges capture files: each path's capture thread delivers its packets in
/// batches, so without this one path's packets could overtake the other's by a batch.
#[derive(Default)]
pub struct Reorder {
    heap: BinaryHeap<Held>,
    seq: u64,
    /// Packets let through before their time because too many were held.
    pub overflowed: u64,
}

struct Held {
    ts_ns: u64,
    seq: u64,
    packet: LivePacket,
}

impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        (self.ts_ns, self.seq) == (other.ts_ns, other.seq)
    }
}

impl Eq for Held {}

impl PartialOrd for Held {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Held {
    // The heap is a max-heap: the earliest packet (then the first arrived) is the greatest.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.ts_ns, other.seq).cmp(&(self.ts_ns, self.seq))
    }
}

impl Reorder {
    /// Holds `packet`.
    pub fn push(&mut self, packet: LivePacket) {
        self.seq += 1;
        self.heap.push(Held {
            ts_ns: packet.ts_ns,
            seq: self.seq,
            packet,
        });
    }

    /// The earliest packet held, if its time is [`REORDER_NS`] before `now_ns` (Unix ns) or
    /// too many are held; `now_ns` = `u64::MAX` lets every packet go.
    pub fn pop_ready(&mut self, now_ns: u64) -> Option<LivePacket> {
        let top = self.heap.peek()?;
        let full = self.heap.len() > REORDER_MAX;
        if top.ts_ns.saturating_add(REORDER_NS) <= now_ns || full {
            if full && now_ns != u64::MAX {
                self.overflowed += 1;
            }
            return self.heap.pop().map(|h| h.packet);
        }
        None
    }
}

/// A dissector and an engine fed frame by frame.
pub struct EngineFeed {
    dissector: Dissector,
    correlator: Correlator,
    keylog: Option<PathBuf>,
    keylog_len: u64,
    decoded: Vec<DecodedPacket>,
    pcap_dropped: Vec<u64>,
    tcp_dropped: TcpDrops,
    tcp_status: String,
}

impl EngineFeed {
    /// A feed over `points` captures; with `keylog`, the file is read again before each
    /// snapshot for what was appended (clients append as they connect).
    pub fn new(
        dissect: DissectConfig,
        engine: EngineConfig,
        keylog: Option<PathBuf>,
        points: usize,
    ) -> Self {
        Self {
            dissector: Dissector::new(dissect),
            correlator: Correlator::new(engine),
            keylog,
            keylog_len: 0,
            decoded: Vec::with_capacity(16),
            pcap_dropped: vec![0; points],
            tcp_dropped: TcpDrops::default(),
            tcp_status: String::new(),
        }
    }

    /// The correlator (to declare capture points, drain records, finish).
    pub fn correlator_mut(&mut self) -> &mut Correlator {
        &mut self.correlator
    }

    /// Decodes a frame through the dissector and feeds each unit seen on path `label` (by
    /// capture `capture` when the captures were declared); returns the units.
    pub fn frame(
        &mut self,
        capture: Option<CaptureId>,
        label: &str,
        p: &LivePacket,
    ) -> &[DecodedPacket] {
        self.decoded.clear();
        self.dissector
            .dissect(Some(p.link), label, &p.data, p.ts_ns, &mut self.decoded);
        for (i, unit) in self.decoded.iter().enumerate() {
            match capture {
                Some(c) => self
                    .correlator
                    .observe_capture(c, label, p.orig_len, i == 0, unit),
                None => self.correlator.observe(label, p.orig_len, i == 0, unit),
            }
        }
        &self.decoded
    }

    /// Feeds a TCP segment of frame `p` seen by declared capture `capture` on path `label`.
    pub fn tcp_segment(
        &mut self,
        capture: CaptureId,
        label: &str,
        p: &LivePacket,
        seg: &WireSegment<'_>,
    ) {
        let segment = TcpSegment {
            meta: PacketMeta {
                ts_ns: p.ts_ns,
                path: self.correlator.path_id(label, p.ts_ns),
                capture,
                src: seg.src,
                dst: seg.dst,
                wire_len: p.orig_len,
                ttl: seg.ttl,
            },
            seq: seg.tcp.seq(),
            ack: seg.tcp.ack(),
            flags: seg.tcp.flags(),
            window: seg.tcp.window(),
            len: seg.payload_len,
            options: seg.tcp.options(),
            messages: self
                .dissector
                .tcp_messages(label, seg)
                .into_iter()
                .collect(),
        };
        self.correlator
            .engine_mut()
            .handle(Observation::TcpSegment(segment));
    }

    /// Handles a message of the TCP probe thread.
    pub fn tcp(&mut self, message: TcpMessage) {
        match message {
            TcpMessage::Event(e) => self.correlator.engine_mut().handle(Observation::Tcp(*e)),
            TcpMessage::Status(s) => self.tcp_status = s,
            TcpMessage::Dropped(d) => self.tcp_dropped = d,
            // What `capture --json` writes beside the engine's records: nothing for the engine.
            TcpMessage::Started { .. }
            | TcpMessage::Record { .. }
            | TcpMessage::KernelDrops(_)
            | TcpMessage::Connections(_) => {}
        }
    }

    /// Records libpcap's drop counters of capture `point`.
    pub fn pcap_dropped(&mut self, point: usize, dropped: u64) {
        if let Some(d) = self.pcap_dropped.get_mut(point) {
            *d = dropped;
        }
    }

    /// The TCP probes' last status line (empty before the first).
    pub fn tcp_status(&self) -> &str {
        &self.tcp_status
    }

    /// Applies the UI's requests (reset windows).
    pub fn requests(&mut self, feed: &SnapshotFeed) {
        for request in feed.requests() {
            if request == Request::ResetWindows {
                self.correlator.engine_mut().reset_windows();
            }
        }
    }

    /// Loads the key log's new lines and moves the engine's clock to now (less [`SETTLE_NS`]:
    /// time passes for silent paths too, windows close every second). The records this
    /// produces stay in the engine for the caller to drain.
    pub fn advance(&mut self) {
        self.follow_keylog();
        self.correlator
            .engine_mut()
            .tick(WallClock::unix_now().saturating_sub(SETTLE_NS));
    }

    /// [`EngineFeed::advance`], then publishes a snapshot with the capture's health (the
    /// engine's records are dropped: the UI shows snapshots).
    pub fn publish(&mut self, feed: &SnapshotFeed) {
        self.advance();
        let engine = self.correlator.engine_mut();
        engine.drain_records().for_each(drop);
        let mut snapshot = engine.snapshot_advised();
        self.fill_health(&mut snapshot.health);
        feed.publish(snapshot);
    }

    /// Adds what the engine does not know to its health figures: libpcap's and the kernel's
    /// drops, QUIC packets not decrypted, the probes' state, the key log's.
    pub fn fill_health(&self, health: &mut CaptureHealth) {
        health.pcap_dropped = self.pcap_dropped.iter().sum();
        health.ring_buffer_dropped = self.tcp_dropped.ring_buffer;
        health.tcp_events_dropped = self.tcp_dropped.undelivered;
        health.tcp_hook_runs_skipped = self.tcp_dropped.skipped_by_kernel.total();
        health.tcp_retrans_unrecorded = self.tcp_dropped.unrecorded_retrans;
        health.tcp_cong_changes_late = self.tcp_dropped.unrecorded_cong_changes;
        health.decrypt_failures = self.dissector.quic_stats().not_decrypted_total();
        if !self.tcp_status.is_empty() {
            health.inferences.push(self.tcp_status.clone());
        }
        if let Some(line) = crate::kerneltcp::probes_missed_line(
            &self.tcp_dropped.skipped_by_kernel,
            self.tcp_dropped.unrecorded_retrans,
            self.tcp_dropped.unrecorded_cong_changes,
        ) {
            health.inferences.push(line);
        }
        if let Some(note) = self.keylog_note(health.decrypt_failures) {
            health.inferences.push(note);
        }
        if let Some(note) = hunt_line(&self.dissector.quic_stats().hunt) {
            health.inferences.push(note);
        }
        if let Some(note) = framing_line(&self.dissector) {
            health.inferences.push(note);
        }
    }

    /// The dissector (for its counters).
    pub fn dissector(&self) -> &Dissector {
        &self.dissector
    }

    /// What the health line says about the QUIC key log: none given while packets stay
    /// encrypted, or a named one that does not exist (yet).
    fn keylog_note(&self, undecrypted: u64) -> Option<String> {
        match &self.keylog {
            None if undecrypted > 0 => Some(format!(
                "QUIC: {undecrypted} packets not decrypted: no key log given (--keylog FILE, \
                 the SSLKEYLOGFILE the QUIC client writes)"
            )),
            Some(path) if self.keylog_len == 0 && !path.exists() => Some(format!(
                "QUIC key log {} does not exist (yet): QUIC stays encrypted until it does",
                path.display()
            )),
            _ => None,
        }
    }

    /// Loads what the peers appended to the key log since the last look (a `stat` when
    /// nothing was): call it before packets that may need new keys.
    pub fn follow_keylog(&mut self) {
        if let Some(path) = self.keylog.clone() {
            self.reload_keylog(&path);
        }
    }

    fn reload_keylog(&mut self, path: &Path) {
        let Ok(meta) = std::fs::metadata(path) else {
            return;
        };
        if meta.len() <= self.keylog_len {
            return;
        }
        if let Ok(text) = std::fs::read(path) {
            let source = path.display().to_string();
            if self.dissector.add_keylog_text(&text, &source).is_ok() {
                self.keylog_len = meta.len();
            }
        }
    }
}

/// The health line of cutting QUIC streams and TCP byte streams into messages (`--framing`),
/// when it gave up on anything or joined a TCP stream mid-connection.
pub fn framing_line(dissector: &Dissector) -> Option<String> {
    let (holes, forgotten) = dissector.framing_evictions();
    let quic = (holes + forgotten > 0).then(|| {
        format!(
            "QUIC streams cut into messages: {holes} holes given up on (bytes past them waited \
             beyond {} KiB), {forgotten} streams forgotten (over {} at once)",
            probe_user::engine::framing::MAX_AHEAD >> 10,
            probe_user::dissect::MAX_DELIMITED_STREAMS
        )
    });
    let f = dissector.tcp_framing();
    let (joined, rejoined, holes, forgotten) = (
        f.joined_mid_stream,
        f.rejoined,
        f.holes_given_up,
        f.forgotten,
    );
    let tcp = (joined + holes + forgotten > 0).then(|| {
        format!(
            "TCP streams cut into messages: {joined} joined mid-connection (cut from their first \
             data segment seen, and on past bytes acknowledged before the capture began \
             {rejoined} time(s)), {holes} holes given up on (bytes past them waited beyond {} KiB \
             in one stream or {} KiB in all), {forgotten} streams forgotten",
            probe_user::dissect::MAX_TCP_AHEAD >> 10,
            probe_user::dissect::MAX_TCP_HELD >> 10
        )
    });
    match (quic, tcp) {
        (Some(q), Some(t)) => Some(format!("{q}; {t}")),
        (q, t) => q.or(t),
    }
}

/// The health line of the search for QUIC connections whose handshake was not captured: how
/// many were found by their key-log keys, how many 4-tuples were given up (none tried: none).
pub fn hunt_line(h: &probe_user::decode::quic::hunt::HuntStats) -> Option<String> {
    (h.tuples > 0).then(|| {
        format!(
            "QUIC mid-connection: {} connection paths found by key-log trial, {} 4-tuples given up \
             ({} packets tried, {} attempts{})",
            h.recovered,
            h.given_up,
            h.packets_tried,
            h.attempts,
            if h.over_limit > 0 {
                format!(", {} packets past the 4-tuple limit", h.over_limit)
            } else {
                String::new()
            }
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use probe_user::decode::net::LinkType;

    fn packet(path: usize, ts_ns: u64) -> LivePacket {
        LivePacket {
            path,
            ts_ns,
            orig_len: 0,
            link: LinkType::Ethernet,
            data: Vec::new(),
        }
    }

    #[test]
    fn packets_of_two_paths_go_on_in_time_order_once_held_long_enough() {
        let mut r = Reorder::default();
        // Path 0's batch arrives before path 1's, which holds earlier packets.
        for ts in [10, 30, 50] {
            r.push(packet(0, ts));
        }
        for ts in [20, 40] {
            r.push(packet(1, ts));
        }
        assert!(r.pop_ready(REORDER_NS + 9).is_none(), "held");
        let mut out = Vec::new();
        while let Some(p) = r.pop_ready(REORDER_NS + 40) {
            out.push((p.path, p.ts_ns));
        }
        assert_eq!(out, [(0, 10), (1, 20), (0, 30), (1, 40)]);
        assert_eq!(r.pop_ready(u64::MAX).map(|p| p.ts_ns), Some(50));
        assert_eq!(r.overflowed, 0);
    }
}
