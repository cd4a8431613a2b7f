//! Captured frames and kernel TCP events into the engine, for the live UI and `lab run`: the
//! decoding (UDP through the dissector, TCP segments as segments), the QUIC key log followed as
//! the peers append to it, and the snapshot published to the UI with the capture's health.
use std::path::{Path, PathBuf};

use probe_user::capture::clock::WallClock;
use probe_user::correlate::Correlator;
use probe_user::decode::net::TcpSegmentView;
use probe_user::dissect::{DecodedPacket, DissectConfig, Dissector};
use probe_user::engine::{CaptureId, Config as EngineConfig, Observation};
use probe_user::source::pcap::live::LivePacket;
use tboxscope_engine::input::{PacketMeta, TcpSegment};

use crate::app::Request;
use crate::kerneltcp::{TcpDrops, TcpMessage};
use crate::source::SnapshotFeed;

/// How far the idle clock stays behind the wall clock (packets still buffered by libpcap).
pub const SETTLE_NS: u64 = 500_000_000;

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
        seg: &TcpSegmentView<'_>,
    ) {
        let segment = TcpSegment {
            meta: PacketMeta {
                ts_ns: p.ts_ns,
                path: self.correlator.path_id(label, p.ts_ns),
                capture,
                src: seg.src,
                dst: seg.dst,
                wire_len: p.orig_len,
            },
            seq: seg.seq,
            ack: seg.ack,
            ack_flag: seg.ack_flag,
            len: u32::try_from(seg.payload.len()).unwrap_or(u32::MAX),
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

    /// Loads the key log's new lines, moves the engine's clock to now (less [`SETTLE_NS`]: time
    /// passes for silent paths too) and publishes a snapshot with the capture's health.
    pub fn publish(&mut self, feed: &SnapshotFeed) {
        self.follow_keylog();
        let engine = self.correlator.engine_mut();
        engine.tick(WallClock::unix_now().saturating_sub(SETTLE_NS));
        engine.drain_records().for_each(drop);
        let mut snapshot = engine.snapshot();
        snapshot.health.pcap_dropped = self.pcap_dropped.iter().sum();
        snapshot.health.ring_buffer_dropped = self.tcp_dropped.ring_buffer;
        snapshot.health.tcp_events_dropped = self.tcp_dropped.undelivered;
        snapshot.health.decrypt_failures = self.dissector.quic_stats().not_decrypted.values().sum();
        if !self.tcp_status.is_empty() {
            snapshot.health.inferences.push(self.tcp_status.clone());
        }
        if let Some(note) = self.keylog_note(snapshot.health.decrypt_failures) {
            snapshot.health.inferences.push(note);
        }
        if let Some(note) = hunt_line(&self.dissector.quic_stats().hunt) {
            snapshot.health.inferences.push(note);
        }
        feed.publish(snapshot);
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
