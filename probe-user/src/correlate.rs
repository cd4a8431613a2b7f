//! The glue between the decoders and the sans-IO engine: each decoded unit (KCP segment, QUIC
//! packet, unrecognised UDP datagram) becomes one engine [`Observation`], stamped with the
//! packet's own capture time and its path label. Paths are announced to the engine as capture
//! points the first time they appear.
use std::collections::HashMap;
use std::sync::Arc;

use tboxscope_decode::kcp::Cmd;
use tboxscope_decode::quic::{FrameSummary, PacketSummary};
use tboxscope_engine::{
    CaptureId, CapturePoint, Config, Datagram, Engine, Host, KcpCmd, KcpSegment, Observation,
    Overhead, OverheadKind, PacketMeta, QuicAck, QuicAcks, QuicPacket, QuicStreams, StreamRange,
};

use crate::analyze::Record;
use crate::dissect::{Decoded, DecodedPacket, KcpSegmentRecord};

/// QUIC's default `ack_delay_exponent` (RFC 9000 §18.2): the transport parameter is encrypted
/// and rarely changed, so ACK delays are decoded with it.
const DEFAULT_ACK_DELAY_EXPONENT: u32 = 3;

/// Path labels kept for sharing (a capture has a handful; past this, labels are copied).
const MAX_LABELS: usize = 256;
/// QUIC connection labels kept for sharing (forgotten all at once past this many).
const MAX_QUIC_LABELS: usize = 4096;

/// What the user states about one capture, named by its path label, instead of what the
/// engine would infer from the traffic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CaptureHint {
    /// The host the capture was taken on.
    pub host: Option<Host>,
    /// Offset added to the capture's timestamps to bring them onto the reference clock.
    pub clock_offset_ns: Option<i64>,
    /// Path label of the capture at the other end of the same path.
    pub pair_with: Option<String>,
}

/// The labels `statements` name (a capture, or the partner it is paired with) that none of
/// the captures `labels` has, sorted: statements that cannot apply.
pub fn unmet_statements<'a>(
    statements: &'a [(String, CaptureHint)],
    labels: &[String],
) -> Vec<&'a str> {
    let mut v: Vec<&str> = statements
        .iter()
        .flat_map(|(l, h)| std::iter::once(l.as_str()).chain(h.pair_with.as_deref()))
        .filter(|l| !labels.iter().any(|c| c == l))
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Where a [`Correlator`] hands its observations: the engine itself, or the engine's own
/// thread ([`crate::pipeline::EngineThread`]).
pub trait ObservationSink {
    /// Takes one observation, in order.
    fn handle(&mut self, obs: Observation);

    /// Takes the observation `make` makes, in order: a sink that gets its observations back
    /// lets it write over one it is done with, else has it made where it keeps it.
    #[inline]
    fn handle_made(&mut self, make: impl MakeObservation)
    where
        Self: Sized,
    {
        self.handle(make.make());
    }
}

/// An observation to be made for an [`ObservationSink`].
pub trait MakeObservation {
    /// Writes the observation over `old` (one the sink is done with), reusing its allocation
    /// and labels, if `old` is of its kind; whether it did.
    fn write_over(&mut self, old: &mut Observation) -> bool;

    /// The observation, made new.
    fn make(self) -> Observation;
}

impl MakeObservation for Observation {
    fn write_over(&mut self, _old: &mut Observation) -> bool {
        false
    }

    fn make(self) -> Observation {
        self
    }
}

impl ObservationSink for Engine {
    fn handle(&mut self, obs: Observation) {
        Engine::handle(self, obs);
    }
}

/// Feeds decoded packets to an [`Engine`] (or to another [`ObservationSink`]).
pub struct Correlator<S = Engine> {
    sink: S,
    /// Path label → capture id announced to the engine (a few labels: searched in order).
    captures: Vec<(Arc<str>, CaptureId)>,
    /// Labels handed to the engine, one shared copy each.
    labels: Vec<Arc<str>>,
    /// QUIC connection number → its label, one shared copy each.
    quic_labels: HashMap<u64, Arc<str>>,
    /// The previous QUIC packet's connection number (if the decoder numbered it) and label
    /// (packets come in runs).
    last_quic_label: Option<(Option<u64>, Arc<str>)>,
    /// Path labels announced by [`Correlator::expect_paths`], declared with the next packet.
    expected: Vec<String>,
    /// What the user stated about captures, by path label ([`Correlator::state`]).
    hints: Vec<(String, CaptureHint)>,
    /// The label and capture of the previous [`Correlator::observation`] (packets come in runs
    /// from one capture: no search), with the caller's key for the label if it gave one.
    last_capture: Option<(Arc<str>, CaptureId, Option<usize>)>,
}

impl Correlator {
    /// A correlator around a fresh engine.
    pub fn new(config: Config) -> Self {
        Self::with_sink(Engine::new(config))
    }

    /// The engine (for snapshots, records and the summary).
    pub fn engine(&self) -> &Engine {
        &self.sink
    }

    /// The engine, mutably (to drain records or finish).
    pub fn engine_mut(&mut self) -> &mut Engine {
        &mut self.sink
    }
}

impl<S: ObservationSink> Correlator<S> {
    /// A correlator handing its observations to `sink`.
    pub fn with_sink(sink: S) -> Self {
        Self {
            sink,
            captures: Vec::new(),
            labels: Vec::new(),
            quic_labels: HashMap::new(),
            last_quic_label: None,
            expected: Vec::new(),
            hints: Vec::new(),
            last_capture: None,
        }
    }

    /// [`Correlator::state`] for each of `statements` (capture label, what is stated).
    pub fn state_all(&mut self, statements: &[(String, CaptureHint)]) {
        for (label, hint) in statements {
            self.state(label, hint.clone());
        }
    }

    /// The sink, mutably.
    pub fn sink_mut(&mut self) -> &mut S {
        &mut self.sink
    }

    /// Gives the sink back (the correlator is done).
    pub fn into_sink(self) -> S {
        self.sink
    }

    /// States facts about the capture whose path label is `label` (host, clock offset, the
    /// capture at the other end of its path), for captures not yet met; a later statement
    /// about the same capture adds to the earlier ones.
    pub fn state(&mut self, label: &str, hint: CaptureHint) {
        let known = match self.hints.iter_mut().find(|(l, _)| l == label) {
            Some((_, h)) => h,
            None => {
                self.hints.push((label.to_owned(), CaptureHint::default()));
                let last = self.hints.len() - 1;
                &mut self.hints[last].1
            }
        };
        known.host = hint.host.or(known.host);
        known.clock_offset_ns = hint.clock_offset_ns.or(known.clock_offset_ns);
        known.pair_with = hint.pair_with.or(known.pair_with.take());
    }

    /// Declares a capture point explicitly (host, local addresses, clock offset); packets on
    /// `point.path` then use its id.
    pub fn declare(&mut self, point: CapturePoint) {
        let label = self.label(&point.path);
        match self.captures.iter_mut().find(|(l, _)| *l == label) {
            Some(c) => c.1 = point.capture,
            None => self.captures.push((label, point.capture)),
        }
        self.last_capture = None;
        self.sink.handle(Observation::Capture(point));
    }

    /// Path labels the input will carry (every file's interfaces, every live interface), so
    /// that the engine knows from the first packet on that a flow may show a second path;
    /// declared with the next packet's time.
    pub fn expect_paths<L: AsRef<str>>(&mut self, labels: &[L]) {
        for l in labels {
            let l = l.as_ref();
            let known = self.captures.iter().any(|(c, _)| **c == *l);
            if !known && !self.expected.iter().any(|e| e == l) {
                self.expected.push(l.to_owned());
            }
        }
    }

    /// The shared copy of path label `path` (no allocation once the label is known).
    pub fn label(&mut self, path: &str) -> Arc<str> {
        if let Some(l) = self.labels.iter().find(|l| ***l == *path) {
            return Arc::clone(l);
        }
        let l: Arc<str> = Arc::from(path);
        if self.labels.len() < MAX_LABELS {
            self.labels.push(Arc::clone(&l));
        }
        l
    }

    /// Feeds one decoded unit seen on `path`. `frame_len` is the frame's length on the wire; it
    /// is attributed to the first unit of the frame (`first_in_frame`) for amplification.
    pub fn observe(
        &mut self,
        path: &str,
        frame_len: u32,
        first_in_frame: bool,
        packet: &DecodedPacket,
    ) {
        let obs = self.observation(path, frame_len, first_in_frame, packet);
        self.sink.handle(obs);
    }

    /// What [`Correlator::observe`] hands the engine, without handing it (capture points are
    /// declared to the engine as they are met).
    pub fn observation(
        &mut self,
        path: &str,
        frame_len: u32,
        first_in_frame: bool,
        packet: &DecodedPacket,
    ) -> Observation {
        self.observation_keyed(None, path, frame_len, first_in_frame, packet)
    }

    /// [`Correlator::observation`] where the caller names each path label by a key of its own
    /// (e.g. its place in a list): the same key always names the same label, so a run of
    /// packets from one capture is recognised without comparing labels.
    pub fn observation_keyed(
        &mut self,
        key: Option<usize>,
        path: &str,
        frame_len: u32,
        first_in_frame: bool,
        packet: &DecodedPacket,
    ) -> Observation {
        let capture = self.note_capture(key, path, packet.ts_ns);
        self.split_last(capture, frame_len, first_in_frame, packet)
            .1
            .make()
    }

    /// [`Correlator::observation_keyed`] handed to the sink, built where the sink keeps it.
    #[inline]
    pub fn observe_keyed(
        &mut self,
        key: Option<usize>,
        path: &str,
        frame_len: u32,
        first_in_frame: bool,
        packet: &DecodedPacket,
    ) {
        let capture = self.note_capture(key, path, packet.ts_ns);
        let (sink, obs) = self.split_last(capture, frame_len, first_in_frame, packet);
        sink.handle_made(obs);
    }

    /// The sink, and the observation of `packet` seen by `capture` on the path of the last
    /// capture noted ([`Correlator::note_capture`]).
    #[inline]
    fn split_last<'a>(
        &'a mut self,
        capture: CaptureId,
        frame_len: u32,
        first_in_frame: bool,
        packet: &'a DecodedPacket,
    ) -> (&'a mut S, UnitObservation<'a>) {
        let Correlator {
            sink,
            quic_labels,
            last_quic_label,
            last_capture,
            ..
        } = self;
        let Some((label, ..)) = last_capture.as_ref() else {
            unreachable!("note_capture sets the last capture");
        };
        let facts = UnitFacts {
            capture,
            path: label,
            frame_len,
            first_in_frame,
            packet,
        };
        let obs = UnitObservation {
            facts,
            quic_labels,
            last_quic_label,
        };
        (sink, obs)
    }

    /// The capture id of a unit seen on `path` (named by the caller's `key`, if any), kept
    /// with its shared label as the last capture; capture points met first are declared here.
    #[inline]
    fn note_capture(&mut self, key: Option<usize>, path: &str, ts_ns: u64) -> CaptureId {
        if !self.expected.is_empty() {
            for l in std::mem::take(&mut self.expected) {
                self.capture_id(&l, ts_ns);
            }
        }
        match &self.last_capture {
            Some((label, capture, last_key))
                if (key.is_some() && *last_key == key) || **label == *path =>
            {
                *capture
            }
            _ => {
                let capture = self.capture_id(path, ts_ns);
                let label = self.label(path);
                self.last_capture = Some((label, capture, key));
                capture
            }
        }
    }

    /// Feeds one decoded unit seen by capture `capture` (declared with [`Correlator::declare`]),
    /// whose path label is `path`; for several captures that share a label (both ends of a
    /// path).
    pub fn observe_capture(
        &mut self,
        capture: CaptureId,
        path: &str,
        frame_len: u32,
        first_in_frame: bool,
        packet: &DecodedPacket,
    ) {
        let label = self.label(path);
        let facts = UnitFacts {
            capture,
            path: &label,
            frame_len,
            first_in_frame,
            packet,
        };
        let obs = UnitObservation {
            facts,
            quic_labels: &mut self.quic_labels,
            last_quic_label: &mut self.last_quic_label,
        };
        self.sink.handle(obs.make());
    }

    fn capture_id(&mut self, path: &str, ts_ns: u64) -> CaptureId {
        if let Some((_, id)) = self.captures.iter().find(|(l, _)| **l == *path) {
            return *id;
        }
        let id = CaptureId::try_from(self.captures.len()).unwrap_or(CaptureId::MAX);
        let hint = self
            .hints
            .iter()
            .find(|(l, _)| l == path)
            .map(|(_, h)| h.clone())
            .unwrap_or_default();
        // The id is taken before the stated partner is declared (which may state this one).
        let label = self.label(path);
        self.captures.push((label, id));
        let pair_with = hint.pair_with.map(|other| self.capture_id(&other, ts_ns));
        self.declare(CapturePoint {
            ts_ns,
            capture: id,
            name: path.to_owned(),
            path: path.to_owned(),
            host: hint.host.unwrap_or(Host::Unknown),
            local_addrs: Vec::new(),
            clock_offset_ns: hint.clock_offset_ns,
            pair_with,
        });
        id
    }
}

/// Hands [`Record`]s of [`crate::analyze::Analyzer`] to a [`Correlator`]: the frame's wire
/// length goes to its first decoded unit, and the newest packet time is kept (to end the run).
#[derive(Debug, Default)]
pub struct FrameFeed {
    last_frame: Option<(usize, u64)>,
    last_ts: u64,
    /// Path labels of the analyzer already announced to the correlator.
    paths_known: usize,
}

impl FrameFeed {
    /// Feeds one record.
    pub fn observe<S: ObservationSink>(&mut self, correlator: &mut Correlator<S>, r: &Record<'_>) {
        let (frame_len, first) = self.note(correlator, r);
        correlator.observe_keyed(Some(r.path_index), r.path, frame_len, first, r.packet);
    }

    /// What [`FrameFeed::observe`] hands the engine, without handing it.
    pub fn observation<S: ObservationSink>(
        &mut self,
        correlator: &mut Correlator<S>,
        r: &Record<'_>,
    ) -> Observation {
        let (frame_len, first) = self.note(correlator, r);
        correlator.observation_keyed(Some(r.path_index), r.path, frame_len, first, r.packet)
    }

    /// Notes record `r`: its frame's wire length and whether it is the frame's first unit,
    /// paths newly met announced to `correlator`.
    #[inline]
    fn note<S: ObservationSink>(
        &mut self,
        correlator: &mut Correlator<S>,
        r: &Record<'_>,
    ) -> (u32, bool) {
        // Records of one frame come together; the file name's address tells files apart.
        let key = (r.file.as_ptr() as usize, r.frame);
        let first = self.last_frame != Some(key);
        self.last_frame = Some(key);
        self.last_ts = self.last_ts.max(r.packet.ts_ns);
        let frame_len = u32::try_from(r.data.len()).unwrap_or(u32::MAX);
        if r.paths.len() > self.paths_known {
            correlator.expect_paths(&r.paths[self.paths_known..]);
            self.paths_known = r.paths.len();
        }
        (frame_len, first)
    }

    /// The newest packet time fed (Unix epoch ns; 0 before the first).
    pub fn last_ts(&self) -> u64 {
        self.last_ts
    }
}

/// The observation of a decoded unit, made by [`Correlator::observe_keyed`]'s sink.
struct UnitObservation<'a> {
    facts: UnitFacts<'a>,
    quic_labels: &'a mut HashMap<u64, Arc<str>>,
    last_quic_label: &'a mut Option<(Option<u64>, Arc<str>)>,
}

impl MakeObservation for UnitObservation<'_> {
    /// A QUIC packet is written over one in its allocation, a KCP segment over one in its
    /// place (the labels they hold kept where they are the same).
    #[inline]
    fn write_over(&mut self, old: &mut Observation) -> bool {
        match (&self.facts.packet.decoded, old) {
            (Decoded::KcpSegment(seg), Observation::Kcp(k)) => {
                write_kcp_segment(k, &self.facts, seg);
                true
            }
            (Decoded::QuicPacket(p), Observation::Quic(q)) if p.decrypted => {
                let conn = quic_label(self.quic_labels, self.last_quic_label, p);
                write_quic_packet(q, &self.facts, p, conn);
                true
            }
            _ => false,
        }
    }

    #[inline]
    fn make(self) -> Observation {
        let (labels, last) = (self.quic_labels, self.last_quic_label);
        let conn = &mut |p: &PacketSummary| Arc::clone(quic_label(labels, last, p));
        observation_labeled(self.facts.meta(), self.facts.packet, conn)
    }
}

/// What the engine is told about a decoded unit besides its content: the capture that saw it,
/// its path label and its frame's wire length (attributed to the frame's first unit).
struct UnitFacts<'a> {
    capture: CaptureId,
    path: &'a Arc<str>,
    frame_len: u32,
    first_in_frame: bool,
    packet: &'a DecodedPacket,
}

impl UnitFacts<'_> {
    /// The engine's facts about the unit.
    #[inline]
    fn meta(&self) -> PacketMeta {
        let packet = self.packet;
        PacketMeta {
            ts_ns: packet.ts_ns,
            path: Arc::clone(self.path),
            capture: self.capture,
            src: packet.src,
            dst: packet.dst,
            wire_len: self.wire_len(),
        }
    }

    /// Overwrites `meta` with the unit's facts; a label that is already the unit's is kept
    /// (its reference count is not touched: the engine's thread reads next to it).
    #[inline]
    fn write_meta(&self, meta: &mut PacketMeta) {
        if !Arc::ptr_eq(&meta.path, self.path) {
            meta.path = Arc::clone(self.path);
        }
        let packet = self.packet;
        meta.ts_ns = packet.ts_ns;
        meta.capture = self.capture;
        meta.src = packet.src;
        meta.dst = packet.dst;
        meta.wire_len = self.wire_len();
    }

    #[inline]
    fn wire_len(&self) -> u32 {
        if self.first_in_frame {
            self.frame_len
        } else {
            0
        }
    }
}

/// The label of a QUIC packet's connection, one shared copy per connection number (`labels`,
/// bounded), kept in `last` (the previous packet's, as packets come in runs).
fn quic_label<'a>(
    labels: &mut HashMap<u64, Arc<str>>,
    last: &'a mut Option<(Option<u64>, Arc<str>)>,
    p: &PacketSummary,
) -> &'a Arc<str> {
    let known = matches!((p.connection, &*last), (Some(n), Some((Some(m), _))) if *m == n);
    if !known {
        *last = None;
    }
    let (_, label) = last.get_or_insert_with(|| {
        let label = match p.connection {
            Some(n) => {
                if labels.len() >= MAX_QUIC_LABELS && !labels.contains_key(&n) {
                    labels.clear();
                }
                Arc::clone(
                    labels
                        .entry(n)
                        .or_insert_with(|| Arc::from(format!("quic#{n}"))),
                )
            }
            None => quic_conn_label(p),
        };
        (p.connection, label)
    });
    label
}

/// The engine observation for one decoded unit.
pub fn observation(meta: PacketMeta, packet: &DecodedPacket) -> Observation {
    observation_labeled(meta, packet, &mut quic_conn_label)
}

/// The engine's label of a QUIC packet's connection: the decoder's connection number, else
/// the destination connection id.
pub fn quic_conn_label(p: &PacketSummary) -> Arc<str> {
    match p.connection {
        Some(n) => Arc::from(format!("quic#{n}")),
        None => Arc::from(format!("dcid:{}", p.dcid)),
    }
}

/// [`observation`], with QUIC connection labels from `conn`.
#[inline]
fn observation_labeled(
    meta: PacketMeta,
    packet: &DecodedPacket,
    conn: &mut dyn FnMut(&PacketSummary) -> Arc<str>,
) -> Observation {
    match &packet.decoded {
        Decoded::KcpSegment(seg) => Observation::Kcp(kcp_segment(meta, seg, packet)),
        Decoded::QuicPacket(p) if p.decrypted => {
            let mut q = new_quic_packet(meta, conn(p));
            quic_content(&mut q, p, packet);
            Observation::Quic(q)
        }
        // Without keys the packet still costs bandwidth but carries no matchable message.
        Decoded::QuicPacket(_) => Observation::Overhead(Overhead {
            meta,
            kind: OverheadKind::Other,
        }),
        Decoded::UdpDatagram(d) => Observation::Datagram(Datagram {
            meta,
            payload_hash: d.payload_hash,
            payload_len: u32::try_from(d.len).unwrap_or(u32::MAX),
            app_msg_id: packet.app_msg_id,
        }),
    }
}

/// The KCP segment `seg` of `packet`, seen as `meta`.
#[inline]
fn kcp_segment(meta: PacketMeta, seg: &KcpSegmentRecord, packet: &DecodedPacket) -> KcpSegment {
    let mut k = KcpSegment {
        meta,
        conv: 0,
        cmd: KcpCmd::Push,
        frg: 0,
        wnd: 0,
        ts: 0,
        sn: 0,
        una: 0,
        len: 0,
        app_msg_id: None,
        content_hash: None,
    };
    write_kcp_fields(&mut k, seg, packet);
    k
}

/// Writes the KCP segment `seg` (the unit of `facts`) over `k`, its label kept if it is the
/// same.
#[inline]
fn write_kcp_segment(k: &mut KcpSegment, facts: &UnitFacts<'_>, seg: &KcpSegmentRecord) {
    facts.write_meta(&mut k.meta);
    write_kcp_fields(k, seg, facts.packet);
}

/// Writes what the segment `seg` of `packet` says (all but the packet's facts) into `k`.
#[inline]
fn write_kcp_fields(k: &mut KcpSegment, seg: &KcpSegmentRecord, packet: &DecodedPacket) {
    k.conv = seg.conv;
    k.cmd = match seg.cmd {
        Cmd::Push => KcpCmd::Push,
        Cmd::Ack => KcpCmd::Ack,
        Cmd::Wask => KcpCmd::WindowAsk,
        Cmd::Wins => KcpCmd::WindowTell,
    };
    k.frg = seg.frg;
    k.wnd = seg.wnd;
    k.ts = seg.kcp_ts;
    k.sn = seg.sn;
    k.una = seg.una;
    k.len = seg.len;
    k.app_msg_id = packet.app_msg_id;
    k.content_hash = packet.content_hash;
}

/// Writes the QUIC packet `p` (the unit of `facts`) of connection `conn` over `q`, the labels
/// `q` holds kept where they are the same.
fn write_quic_packet(
    q: &mut QuicPacket,
    facts: &UnitFacts<'_>,
    p: &PacketSummary,
    conn: &Arc<str>,
) {
    facts.write_meta(&mut q.meta);
    if !Arc::ptr_eq(&q.conn, conn) {
        q.conn = Arc::clone(conn);
    }
    quic_content(q, p, facts.packet);
}

/// A QUIC packet of connection `conn` with no frames yet.
fn new_quic_packet(meta: PacketMeta, conn: Arc<str>) -> Box<QuicPacket> {
    Box::new(QuicPacket {
        meta,
        conn,
        path_id: 0,
        pn: 0,
        streams: QuicStreams::new(),
        acks: QuicAcks::new(),
    })
}

/// Writes the packet number, path and frames of `p` (decoded as `packet`) into `q`: STREAM
/// frames with what names their messages, ACK frames (held inline).
#[inline]
fn quic_content(q: &mut QuicPacket, p: &PacketSummary, packet: &DecodedPacket) {
    q.path_id = p.path_id.unwrap_or(0);
    q.pn = p.pn.unwrap_or(0);
    q.streams.clear();
    q.acks.clear();
    for f in &p.frames {
        match f.frame_type {
            "stream" => {
                if let Some(range) = stream_range(f) {
                    q.streams.push(range);
                }
            }
            "ack" | "path_ack" => q.acks.push(ack(f)),
            _ => {}
        }
    }
    for s in &mut q.streams {
        if let Some(h) = packet
            .stream_heads
            .iter()
            .find(|h| h.stream_id == s.stream_id && h.offset == s.offset)
        {
            s.app_msg_id = h.app_msg_id;
            s.data_hash = h.content_hash;
        }
    }
}

fn stream_range(f: &FrameSummary) -> Option<StreamRange> {
    Some(StreamRange {
        stream_id: f.stream_id?,
        offset: f.offset.unwrap_or(0),
        len: f.length.unwrap_or(0),
        fin: f.fin.unwrap_or(false),
        data_hash: None,
        app_msg_id: None,
    })
}

fn ack(f: &FrameSummary) -> QuicAck {
    QuicAck {
        path_id: f.path_id.unwrap_or(0),
        ranges: f
            .ack_ranges
            .as_deref()
            .unwrap_or_default()
            .iter()
            .map(|[lo, hi]| (*lo, *hi))
            .collect(),
        ack_delay_us: f
            .ack_delay
            .unwrap_or(0)
            .saturating_mul(1 << DEFAULT_ACK_DELAY_EXPONENT),
    }
}

/// Writes the engine's finished records (`message`, `window`, `outage`, `hol_incident`) as
/// JSON Lines, draining them.
pub fn write_engine_records<W: std::io::Write>(
    writer: &mut crate::output::JsonLinesWriter<W>,
    engine: &mut Engine,
) -> Result<(), crate::output::OutputError> {
    for record in engine.drain_records() {
        writer.write(record.kind(), record.ts_ns(), &record)?;
    }
    Ok(())
}
