//! The glue between the decoders and the sans-IO engine: each decoded unit (KCP segment, QUIC
//! packet, unrecognised UDP datagram) becomes one engine [`Observation`], stamped with the
//! packet's own capture time and its path. Paths are announced to the engine as capture points
//! and named (a small id each) the first time they appear.
use std::net::SocketAddr;

use tboxscope_decode::quic::{FrameSummary, PacketSummary};
use tboxscope_engine::{
    CaptureId, CapturePoint, Config, ConnId, Datagram, Engine, Host, KcpSegment, Observation,
    Overhead, OverheadKind, PacketMeta, PathId, PathMtuSignal, PathName, QuicAck, QuicAcks,
    QuicPacket, QuicStreams, StreamRange, TcpSegment,
};

use crate::analyze::{FrameAt, Record};
use crate::dissect::{Decoded, DecodedPacket, KcpSegmentRecord, StreamHead, TcpSegmentRecord};

/// QUIC's default `ack_delay_exponent` (RFC 9000 §18.2): the transport parameter is encrypted
/// and rarely changed, so ACK delays are decoded with it.
const DEFAULT_ACK_DELAY_EXPONENT: u32 = 3;

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

    /// Takes the observation `build` makes, in order: a sink that stores observations builds
    /// it where it keeps it (no copy of a large value).
    #[inline]
    fn handle_built(&mut self, build: impl FnOnce() -> Observation) {
        self.handle(build());
    }

    /// Takes a TCP segment observation that `fill` sets, field by field, in a default one: a
    /// sink that stores observations has it filled where it keeps it (no value built aside
    /// and copied in, whose copy reads back in wide pieces what was just written in narrow
    /// ones: a store-forwarding stall per segment).
    #[inline]
    fn handle_tcp(&mut self, fill: impl FnOnce(&mut TcpSegment)) {
        let mut t = TcpSegment::default();
        fill(&mut t);
        self.handle(Observation::TcpSegment(t));
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
    captures: Vec<(String, CaptureId)>,
    /// Path labels named to the engine, by path id (a few: searched in order).
    paths: Vec<String>,
    /// Path labels announced by [`Correlator::expect_paths`], declared with the next packet.
    expected: Vec<String>,
    /// What the user stated about captures, by path label ([`Correlator::state`]).
    hints: Vec<(String, CaptureHint)>,
    /// The capture and path of the previous unit (packets come in runs from one capture: no
    /// search), with the caller's key for its label if it gave one.
    last_capture: Option<(CaptureId, PathId, Option<usize>)>,
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
            paths: Vec::new(),
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
        match self.captures.iter_mut().find(|(l, _)| *l == point.path) {
            Some(c) => c.1 = point.capture,
            None => self.captures.push((point.path.clone(), point.capture)),
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
            let known = self.captures.iter().any(|(c, _)| c == l);
            if !known && !self.expected.iter().any(|e| e == l) {
                self.expected.push(l.to_owned());
            }
        }
    }

    /// The id of path label `path`, named to the engine (at `ts_ns`) the first time.
    pub fn path_id(&mut self, path: &str, ts_ns: u64) -> PathId {
        if let Some(i) = self.paths.iter().position(|l| l == path) {
            return PathId(u16::try_from(i).unwrap_or(u16::MAX));
        }
        // Past u16::MAX labels (never in practice), the last id names them all.
        let id = PathId(u16::try_from(self.paths.len()).unwrap_or(u16::MAX));
        self.paths.push(path.to_owned());
        self.sink.handle(Observation::PathName(PathName {
            ts_ns,
            id,
            label: path.to_owned(),
        }));
        id
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
        self.observe_keyed(None, path, frame_len, first_in_frame, packet);
    }

    /// What [`Correlator::observe`] hands the engine, without handing it (capture points and
    /// path names are declared to the engine as they are met).
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
        let (capture, path) = self.note_capture(key, path, packet.ts_ns);
        observation(
            unit_meta(capture, path, frame_len, first_in_frame, packet),
            packet,
        )
    }

    /// [`Correlator::observation_keyed`] handed to the sink.
    pub fn observe_keyed(
        &mut self,
        key: Option<usize>,
        path: &str,
        frame_len: u32,
        first_in_frame: bool,
        packet: &DecodedPacket,
    ) {
        let (capture, path) = self.note_capture(key, path, packet.ts_ns);
        let meta = || unit_meta(capture, path, frame_len, first_in_frame, packet);
        match &packet.decoded {
            // The common unit spelled out here so that it is built in place (through
            // `observation`, which does not inline, it is built aside and copied in).
            Decoded::TcpSegment(t) if packet.tcp_messages.is_empty() => self
                .sink
                .handle_built(|| Observation::TcpSegment(tcp_segment(meta(), t))),
            _ => self.sink.handle_built(|| observation(meta(), packet)),
        }
    }

    /// The capture id and path id of a unit seen on `path` (named by the caller's `key`, if
    /// any), kept as the last capture; capture points met first are declared here.
    fn note_capture(&mut self, key: Option<usize>, path: &str, ts_ns: u64) -> (CaptureId, PathId) {
        if !self.expected.is_empty() {
            for l in std::mem::take(&mut self.expected) {
                self.capture_id(&l, ts_ns);
            }
        }
        match self.last_capture {
            Some((capture, id, last_key))
                if (key.is_some() && last_key == key)
                    || self.paths.get(usize::from(id.0)).is_some_and(|l| l == path) =>
            {
                (capture, id)
            }
            _ => {
                let capture = self.capture_id(path, ts_ns);
                let id = self.path_id(path, ts_ns);
                self.last_capture = Some((capture, id, key));
                (capture, id)
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
        let id = self.path_id(path, packet.ts_ns);
        let meta = unit_meta(capture, id, frame_len, first_in_frame, packet);
        self.sink.handle(observation(meta, packet));
    }

    fn capture_id(&mut self, path: &str, ts_ns: u64) -> CaptureId {
        if let Some((_, id)) = self.captures.iter().find(|(l, _)| l == path) {
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
        self.captures.push((path.to_owned(), id));
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
/// Kernel TCP events recorded beside the captures go in between, in time order.
#[derive(Debug, Default)]
pub struct FrameFeed {
    last_frame: Option<(usize, u64)>,
    last_ts: u64,
    /// Path labels of the analyzer already announced to the correlator.
    paths_known: usize,
    /// Kernel events not fed yet, oldest first.
    kernel: std::collections::VecDeque<tboxscope_engine::TcpEvent>,
    /// With kernel events: the path label each address pair was last captured on (bounded),
    /// given to the events of a socket whose recording names no capture's path.
    sockets: std::collections::HashMap<(SocketAddr, SocketAddr), usize>,
}

/// What [`FrameFeed`] notes of a unit: its frame, time, path and endpoints.
struct Seen<'a> {
    file: &'a str,
    frame: u64,
    ts_ns: u64,
    wire_len: u32,
    path_index: usize,
    paths: &'a [String],
    src: &'a SocketAddr,
    dst: &'a SocketAddr,
}

impl<'a> Seen<'a> {
    #[inline]
    fn of(r: &Record<'a>) -> Self {
        Self {
            file: r.file,
            frame: r.frame,
            ts_ns: r.packet.ts_ns,
            wire_len: r.wire_len,
            path_index: r.path_index,
            paths: r.paths,
            src: &r.packet.src,
            dst: &r.packet.dst,
        }
    }
}

/// Address pairs remembered to name kernel events' paths.
const MAX_SOCKETS: usize = 4096;

impl FrameFeed {
    /// A feed that puts `kernel` (the kernel's TCP events of a recording, in time order)
    /// before the first packet captured after each.
    pub fn with_kernel(kernel: Vec<tboxscope_engine::TcpEvent>) -> Self {
        Self {
            kernel: kernel.into(),
            ..Self::default()
        }
    }

    /// Feeds the kernel events up to record `r`'s time. An event whose path is none of the
    /// captures' (a recording of other interfaces, or none) takes the path its socket was
    /// captured on, or the only capture's.
    fn feed_kernel<S: ObservationSink>(&mut self, correlator: &mut Correlator<S>, r: &Seen<'_>) {
        if self.sockets.len() >= MAX_SOCKETS {
            self.sockets.clear();
        }
        self.sockets.insert((*r.src, *r.dst), r.path_index);
        while self.kernel.front().is_some_and(|e| e.ts_ns <= r.ts_ns) {
            let Some(mut e) = self.kernel.pop_front() else {
                break;
            };
            if !r.paths.contains(&e.path) {
                let seen = self
                    .sockets
                    .get(&(e.local, e.remote))
                    .or_else(|| self.sockets.get(&(e.remote, e.local)))
                    .copied()
                    .or((r.paths.len() == 1).then_some(0));
                if let Some(label) = seen.and_then(|i| r.paths.get(i)) {
                    label.clone_into(&mut e.path);
                }
            }
            correlator.sink_mut().handle(Observation::Tcp(e));
        }
    }

    /// Feeds the kernel events left (those after the last packet).
    pub fn flush_kernel<S: ObservationSink>(&mut self, correlator: &mut Correlator<S>) {
        for e in self.kernel.drain(..) {
            correlator.sink_mut().handle(Observation::Tcp(e));
        }
    }

    /// Feeds one record.
    pub fn observe<S: ObservationSink>(&mut self, correlator: &mut Correlator<S>, r: &Record<'_>) {
        let (frame_len, first) = self.note(correlator, &Seen::of(r));
        correlator.observe_keyed(Some(r.path_index), r.path, frame_len, first, r.packet);
    }

    /// Feeds TCP segment `seg` of frame `at`, offered without its record
    /// ([`crate::analyze::RecordSink`]): the same observation as [`FrameFeed::observe`] of its
    /// record, built from the headers.
    #[inline]
    pub fn observe_tcp<S: ObservationSink>(
        &mut self,
        correlator: &mut Correlator<S>,
        at: &FrameAt<'_>,
        seg: &tboxscope_decode::net::TcpSegment<'_>,
    ) {
        let seen = Seen {
            file: at.file,
            frame: at.frame,
            ts_ns: at.ts_ns,
            wire_len: at.wire_len(),
            path_index: at.path_index,
            paths: at.paths,
            src: &seg.src,
            dst: &seg.dst,
        };
        let (frame_len, first) = self.note(correlator, &seen);
        let (capture, path) = correlator.note_capture(Some(at.path_index), at.path, at.ts_ns);
        let h = &seg.tcp;
        correlator.sink.handle_tcp(|t| {
            t.meta.ts_ns = at.ts_ns;
            t.meta.path = path;
            t.meta.capture = capture;
            // Rebuilt from their parts: copied whole, the addresses just written piece by
            // piece by the decoder are read back in wider pieces (a store-forwarding stall).
            t.meta.src = SocketAddr::new(seg.src.ip(), seg.src.port());
            t.meta.dst = SocketAddr::new(seg.dst.ip(), seg.dst.port());
            t.meta.wire_len = if first { frame_len } else { 0 };
            t.meta.ttl = seg.ttl;
            t.seq = h.seq();
            t.ack = h.ack();
            t.flags = h.flags();
            t.window = h.window();
            t.len = seg.payload_len;
            t.options.read(h.option_bytes());
        });
    }

    /// What [`FrameFeed::observe`] hands the engine, without handing it.
    pub fn observation<S: ObservationSink>(
        &mut self,
        correlator: &mut Correlator<S>,
        r: &Record<'_>,
    ) -> Observation {
        let (frame_len, first) = self.note(correlator, &Seen::of(r));
        correlator.observation_keyed(Some(r.path_index), r.path, frame_len, first, r.packet)
    }

    /// Notes record `r`: its frame's wire length and whether it is the frame's first unit,
    /// paths newly met announced to `correlator`.
    #[inline]
    fn note<S: ObservationSink>(
        &mut self,
        correlator: &mut Correlator<S>,
        r: &Seen<'_>,
    ) -> (u32, bool) {
        // Records of one frame come together; the file name's address tells files apart.
        if !self.kernel.is_empty() {
            self.feed_kernel(correlator, r);
        }
        let key = (r.file.as_ptr() as usize, r.frame);
        let first = self.last_frame != Some(key);
        self.last_frame = Some(key);
        self.last_ts = self.last_ts.max(r.ts_ns);
        let frame_len = r.wire_len;
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

/// The engine's facts about a decoded unit seen by `capture` on path `path`: its frame's wire
/// length `frame_len` goes to the frame's first unit.
#[inline]
fn unit_meta(
    capture: CaptureId,
    path: PathId,
    frame_len: u32,
    first_in_frame: bool,
    packet: &DecodedPacket,
) -> PacketMeta {
    PacketMeta {
        ts_ns: packet.ts_ns,
        path,
        capture,
        src: packet.src,
        dst: packet.dst,
        wire_len: if first_in_frame { frame_len } else { 0 },
        ttl: packet.ttl,
    }
}

/// The engine observation for one decoded unit.
pub fn observation(meta: PacketMeta, packet: &DecodedPacket) -> Observation {
    // A decrypted packet is its decoder's connection's (whose keys decrypted it); without
    // keys it still costs bandwidth but carries no matchable message.
    let quic_connection = |p: &PacketSummary| p.connection.filter(|_| p.decrypted);
    match &packet.decoded {
        Decoded::KcpSegment(seg) => Observation::Kcp(kcp_segment(meta, seg, packet)),
        Decoded::QuicPacket(p) => match quic_connection(p) {
            Some(n) => Observation::Quic(Box::new(quic_packet(meta, ConnId(n), p, packet))),
            None => Observation::Overhead(Overhead {
                meta,
                kind: OverheadKind::Other,
            }),
        },
        Decoded::TcpSegment(t) => {
            let mut seg = tcp_segment(meta, t);
            if !packet.tcp_messages.is_empty() {
                seg.messages = packet.tcp_messages.iter().copied().collect();
            }
            Observation::TcpSegment(seg)
        }
        Decoded::PathMtu(m) => Observation::PathMtu(PathMtuSignal {
            meta,
            mtu: m.mtu,
            segment_src: m.segment_src,
            segment_dst: m.segment_dst,
            seq: m.seq,
        }),
        Decoded::UdpDatagram(d) => Observation::Datagram(Datagram {
            meta,
            payload_hash: d.payload_hash,
            payload_len: u32::try_from(d.len).unwrap_or(u32::MAX),
            app_msg_id: packet.app_msg_id,
        }),
    }
}

/// The TCP segment `t`, seen as `meta`.
#[inline]
pub fn tcp_segment(meta: PacketMeta, t: &TcpSegmentRecord) -> TcpSegment {
    TcpSegment {
        meta,
        seq: t.seq,
        ack: t.ack,
        flags: t.flags,
        window: t.window,
        len: t.len,
        options: t.options,
        messages: Default::default(),
    }
}

/// The KCP segment `seg` of `packet`, seen as `meta`.
fn kcp_segment(meta: PacketMeta, seg: &KcpSegmentRecord, packet: &DecodedPacket) -> KcpSegment {
    KcpSegment {
        meta,
        header: seg.header,
        app_msg_id: packet.app_msg_id,
        content_hash: packet.content_hash,
    }
}

/// The QUIC packet `p` of connection `conn` (decoded as `packet`), seen as `meta`: STREAM
/// frames with what names their messages, ACK frames.
fn quic_packet(
    meta: PacketMeta,
    conn: ConnId,
    p: &PacketSummary,
    packet: &DecodedPacket,
) -> QuicPacket {
    let mut q = QuicPacket {
        meta,
        conn,
        path_id: p.path_id.unwrap_or(0),
        pn: p.pn.unwrap_or(0),
        streams: QuicStreams::new(),
        acks: QuicAcks::new(),
        ack_only: !p.frames.is_empty(),
    };
    for f in &p.frames {
        q.ack_only &= !f.ack_eliciting();
        match f.frame_type {
            "stream" => {
                if let Some(range) = stream_range(f) {
                    push_pieces(&mut q.streams, range, &packet.stream_heads);
                }
            }
            "ack" | "path_ack" => q.acks.push(ack(f, p.ack_space)),
            _ => {}
        }
    }
    q
}

/// The STREAM frame `range` as the engine takes it: named by the head its start completes,
/// or, in a stream cut into messages, cut into pieces at the ends of the messages it
/// completes (each such piece naming its message; bytes after the last end are a piece of
/// the next message).
fn push_pieces(out: &mut QuicStreams, mut range: StreamRange, heads: &[StreamHead]) {
    let (stream_id, offset) = (range.stream_id, range.offset);
    let mine = |h: &&StreamHead| h.stream_id == stream_id && h.offset == offset;
    if !heads.iter().filter(mine).any(|h| h.framed.is_some()) {
        if let Some(h) = heads.iter().find(mine) {
            range.app_msg_id = h.app_msg_id;
            range.data_hash = h.content_hash;
        }
        out.push(range);
        return;
    }
    let frame_end = range.offset.saturating_add(range.len);
    let mut cursor = range.offset;
    for h in heads.iter().filter(mine) {
        let Some((start, end)) = h.framed else {
            continue;
        };
        // A message completed past this frame (its hole was filled here) or before the
        // frame's remaining bytes: a piece of its own range.
        let (from, to) = if cursor < frame_end && end > cursor {
            (cursor, end.min(frame_end))
        } else {
            (start, end)
        };
        out.push(StreamRange {
            offset: from,
            len: to - from,
            fin: range.fin && to == frame_end,
            data_hash: h.content_hash,
            app_msg_id: h.app_msg_id,
            framed: Some((start, end)),
            ..range.clone()
        });
        if from == cursor {
            cursor = to;
        }
    }
    if cursor < frame_end {
        out.push(StreamRange {
            offset: cursor,
            len: frame_end - cursor,
            ..range
        });
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
        framed: None,
    })
}

/// An ACK frame as the engine takes it: the space it names (PATH_ACK, ACK_MP), else the one the
/// decoder found for the packet's plain ACK frames (`plain_space`, multipath), else 0.
fn ack(f: &FrameSummary, plain_space: Option<u64>) -> QuicAck {
    QuicAck {
        path_id: f.path_id.or(plain_space).unwrap_or(0),
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
    engine
        .drain_records()
        .try_for_each(|r| writer.write(r.kind(), r.ts_ns(), &r))
}
