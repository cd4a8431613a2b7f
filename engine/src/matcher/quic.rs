//! Modes 3 and 4 for QUIC. One multipath connection: the same STREAM (id, offset range) carried
//! in packets of two paths; partial overlaps are split into ranges (a later frame is a copy of
//! every message range it overlaps; uncovered bytes become new messages). Separate connections
//! (one per path, same server port): the same content hash or application message id.
//! One end observed: ACK / PATH_ACK frames (ack_delay removed) give the time to first
//! acknowledgment. Per-stream receive gaps give HOL incidents (and show other streams moved).

use std::collections::VecDeque;

use crate::FastMap as HashMap;

use crate::capture::Dir;
use crate::config::MatchMode;
use crate::flow::{FlowKey, FlowRef, Proto};
use crate::hol::GapTracker;
use crate::input::{ConnId, QuicPacket};
use crate::matcher::gaps::GapSel;
use crate::matcher::streams::StreamTable;
use crate::matcher::{forced_mode, mix, server_port, ContentOrder};
use crate::message::{GroupName, MsgId, PastClosure, SightArgs};
use crate::paths::PathIdx;
use crate::sent::SentQueue;
use crate::shared::{Pkt, Shared};

/// Message ranges remembered per stream.
const MAX_RANGES_PER_STREAM: usize = 4096;
/// Connections remembered per server port for per-path detection.
const MAX_CONNS_PER_PORT: usize = 64;

/// The message ranges of one stream: (start, end, message key), disjoint, sorted by start.
pub type StreamRanges = VecDeque<(u64, u64, u64)>;

/// A STREAM frame of a sent packet: (message key, stream, offset, len, the slot the message
/// was held in when sent).
pub type SentItem = (u64, u64, u64, u64, u32);

/// A sent packet waiting for its acknowledgment.
#[derive(Clone, Debug)]
pub struct Unacked {
    /// Send time (engine clock).
    pub ts_ns: u64,
    /// Path it was sent on.
    pub path: PathIdx,
    /// What it carried (inline for up to two STREAM frames).
    pub items: smallvec::SmallVec<[SentItem; 2]>,
}

/// Per-connection (or per-group) QUIC state.
#[derive(Debug, Default)]
pub struct QuicState {
    /// Packets seen.
    pub packets: u64,
    /// Stream bytes seen again on the same path.
    pub retransmitted_bytes: u64,
    /// (up, stream) → its message ranges.
    pub ranges: StreamTable<(bool, u64), StreamRanges>,
    /// (up, packet number space), pn → what the packet carried.
    pub unacked: SentQueue<(bool, u64), Unacked>,
    /// (up, stream) → receive tracker and last delivery time.
    pub rx: StreamTable<(bool, u64), (GapTracker, u64)>,
    /// In a group of per-path connections: (connection tag, up, stream) → the message its
    /// id-carrying frame named (bounded, recent streams only).
    pub stream_msgs: HashMap<(u64, bool, u64), u64>,
    /// Frames of grouped connections whose stream's message was never named (head not seen).
    pub unmatched_frames: u64,
    /// In a group matched by content: the order of each connection's messages by content
    /// (starts are (stream, offset)).
    pub content: ContentOrder,
    /// The group of per-path connections this connection joined after its first packets
    /// (`None`: it has not, or this is the group).
    pub group: Option<FlowRef>,
    /// In a group: (connection tag, up, stream) → the message ranges the capture cut the
    /// stream into ([`crate::Framing`]), each keyed by its range and content.
    pub framed: StreamTable<(u64, bool, u64), StreamRanges>,
    /// Streams forgotten by the message index, by the receive trackers, and as reported.
    forgotten_streams: (u64, u64, u64),
}

/// A frame's share of one message: (message key, name, bytes of the frame in it, whether the
/// message is new: its range starts past every range the stream had).
pub(crate) type Part = (u64, MsgId, u64, bool);

/// Streams remembered per group for frames that continue a message.
const MAX_STREAM_MSGS: usize = 8192;

/// A stable tag of a connection (keeps connections of a group apart).
fn conn_hash(conn: ConnId) -> u64 {
    mix(&[7, conn.0])
}

/// The key and name, in a group of per-path connections, of the message a frame (or piece)
/// of a stream the capture cut into messages completes: by its application id (`by_app`),
/// else by its stream range and content. `None`: the frame completes no message.
fn framed_name(up: bool, sr: &crate::input::StreamRange, by_app: bool) -> Option<GroupName> {
    let (start, end) = sr.framed?;
    let stream = sr.stream_id;
    let (key, id) = match sr.app_msg_id.filter(|_| by_app) {
        Some(app) => (mix(&[6, u64::from(up), app]), MsgId::App(app)),
        None => (
            mix(&[
                10,
                u64::from(up),
                stream,
                start,
                end,
                sr.data_hash.unwrap_or(0),
            ]),
            MsgId::Stream {
                up,
                stream,
                start,
                end,
            },
        ),
    };
    Some(GroupName {
        key,
        id,
        up,
        stream,
        range: (start, end),
        content: None,
    })
}

/// The name, in a group of per-path connections matched by content, of the message a stream's
/// head frame starts (a stream per message, not cut by a framing): named by its content, its
/// key made when the connection joins. `None`: not such a frame.
fn head_name(up: bool, sr: &crate::input::StreamRange) -> Option<GroupName> {
    let h = sr
        .data_hash
        .filter(|_| sr.framed.is_none() && sr.offset == 0)?;
    Some(GroupName {
        key: 0,
        id: MsgId::Hash(h),
        up,
        stream: sr.stream_id,
        range: (0, sr.len),
        content: Some(h),
    })
}

impl QuicState {
    /// Notes that the grouped connection `conn_tag`'s stream carries message `k` at
    /// `[start, end)` (the stream's ranges bounded).
    fn note_framed(&mut self, key: (u64, bool, u64), start: u64, end: u64, k: u64) {
        let ring = self.framed.get_or_insert_with(key, StreamRanges::new);
        let at = ring.partition_point(|r| r.0 < start);
        if ring.get(at).is_none_or(|r| r.0 != start) {
            ring.insert(at, (start, end, k));
        }
        while ring.len() > MAX_RANGES_PER_STREAM {
            ring.pop_front();
        }
    }

    /// In a group, a frame (or piece) of a stream the capture cut into messages: the message
    /// it completes (keyed by its stream range and content, or by its application id), or
    /// the messages it carries again. `false`: the stream is not cut into messages.
    fn framed_parts(
        &mut self,
        conn_tag: u64,
        up: bool,
        sr: &crate::input::StreamRange,
        by_app: bool,
        out: &mut Vec<Part>,
    ) -> bool {
        let (stream, key) = (sr.stream_id, (conn_tag, up, sr.stream_id));
        let name = |start, end| MsgId::Stream {
            up,
            stream,
            start,
            end,
        };
        if let Some(g) = framed_name(up, sr, by_app) {
            self.note_framed(key, g.range.0, g.range.1, g.key);
            out.push((g.key, g.id, sr.len, false));
            return true;
        }
        let Some(ring) = self.framed.get_mut(&key) else {
            return false;
        };
        // A piece of a message not complete yet, or bytes sent again: the messages it overlaps.
        let end = sr.offset.saturating_add(sr.len);
        let upto = ring.partition_point(|r| r.0 < end);
        let mut from = upto;
        while from > 0 && ring[from - 1].1 > sr.offset {
            from -= 1;
        }
        for &(s, e, k) in ring.range(from..upto) {
            let bytes = e.min(end).saturating_sub(s.max(sr.offset));
            out.push((k, name(s, e), bytes, false));
        }
        true
    }

    /// Remembers which message a grouped connection's stream carries.
    /// Streams forgotten by this connection's stream tables since the last call. The message
    /// index and the receive trackers hold mostly the same streams: a stream counts once, as
    /// the larger of the two tables' totals.
    pub(crate) fn take_forgotten_streams(&mut self) -> u64 {
        let f = &mut self.forgotten_streams;
        f.0 += self.ranges.take_forgotten() + self.framed.take_forgotten();
        f.1 += self.rx.take_forgotten();
        let total = f.0.max(f.1);
        total - std::mem::replace(&mut f.2, total)
    }

    fn remember_stream(&mut self, key: (u64, bool, u64), msg: u64) {
        if self.stream_msgs.len() >= MAX_STREAM_MSGS && !self.stream_msgs.contains_key(&key) {
            self.stream_msgs.clear();
        }
        self.stream_msgs.insert(key, msg);
    }

    /// The receive tracker of a stream (created); `delivered_at` is noted as the stream's
    /// latest delivery when later than the one noted.
    pub fn stream_rx(
        &mut self,
        up: bool,
        stream: u64,
        delivered_at: Option<u64>,
    ) -> Option<&mut GapTracker> {
        let e = self.rx.get_or_insert_with((up, stream), Default::default);
        if let Some(ts) = delivered_at {
            e.1 = e.1.max(ts);
        }
        Some(&mut e.0)
    }

    /// Other streams (same direction) that delivered since `since`.
    pub fn streams_active_since(&self, up: bool, stream: u64, since: u64) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .rx
            .iter()
            .filter(|((u, s), (_, last))| *u == up && *s != stream && *last >= since)
            .map(|((_, s), _)| *s)
            .collect();
        v.sort_unstable();
        v.truncate(16);
        v
    }

    /// Splits `[off, off+len)` into message ranges: existing ones it overlaps and new ones,
    /// appended to `out` as (message key, name, bytes of this frame in it, new).
    /// A frame of a unidirectional stream not cut by a framing: the stream is one message
    /// (however its sender cut it into frames, on each path), appended to `out`.
    fn whole_stream(&mut self, up: bool, stream: u64, off: u64, len: u64, out: &mut Vec<Part>) {
        let k = mix(&[4, u64::from(up), stream, 0]);
        let ring = self
            .ranges
            .get_or_insert_with((up, stream), StreamRanges::new);
        let new = ring.is_empty();
        if new {
            ring.push_back((0, u64::MAX, k));
        }
        let id = MsgId::Stream {
            up,
            stream,
            start: 0,
            end: u64::MAX,
        };
        out.push((k, id, len, new && off == 0));
    }

    fn split(&mut self, up: bool, stream: u64, off: u64, len: u64, out: &mut Vec<Part>) {
        let end = off.saturating_add(len);
        let name = |start, end| MsgId::Stream {
            up,
            stream,
            start,
            end,
        };
        let ring = self
            .ranges
            .get_or_insert_with((up, stream), StreamRanges::new);
        // Ranges only leave from the front, so the last one ends furthest: a range starting
        // there or later is new (its key was never made).
        let highest = ring.back().map_or(0, |r| r.1);
        if off >= highest {
            // In-order data: no overlap, appended.
            if off < end {
                let k = mix(&[4, u64::from(up), stream, off]);
                ring.push_back((off, end, k));
                out.push((k, name(off, end), len, true));
                if ring.len() > MAX_RANGES_PER_STREAM {
                    ring.pop_front();
                }
            }
            return;
        }
        // Ranges are disjoint and sorted, so those overlapping [off, end) are consecutive:
        // the ones starting before `end`, back to the first that ends after `off`.
        let upto = ring.partition_point(|r| r.0 < end);
        let mut from = upto;
        while from > 0 && ring[from - 1].1 > off {
            from -= 1;
        }
        let first = out.len();
        for &(s, e, k) in ring.range(from..upto) {
            out.push((k, name(s, e), e.min(end).saturating_sub(s.max(off)), false));
        }
        // Uncovered bytes become new messages: before each overlapped range, and after the last.
        let hits = out.len() - first;
        let mut cursor = off;
        for i in 0..=hits {
            let (gap_end, hit_end) = match out.get(first + i) {
                Some(&(_, MsgId::Stream { start, end: e, .. }, _, _)) if i < hits => {
                    (start, Some(e))
                }
                _ => (end, None),
            };
            if cursor < gap_end {
                let k = mix(&[4, u64::from(up), stream, cursor]);
                let at = ring.partition_point(|r| r.0 < cursor);
                ring.insert(at, (cursor, gap_end, k));
                out.push((
                    k,
                    name(cursor, gap_end),
                    gap_end - cursor,
                    cursor >= highest,
                ));
            }
            if let Some(e) = hit_end {
                cursor = cursor.max(e);
            }
        }
        while ring.len() > MAX_RANGES_PER_STREAM {
            ring.pop_front();
        }
    }
}

/// The QUIC matcher's own state; each connection's (or group's) state is kept with its flow
/// ([`QuicState`] in [`Proto::Quic`]).
#[derive(Debug)]
pub(crate) struct QuicMatcher {
    /// Server port → QUIC connections seen (connection, path, address pair), to detect
    /// per-path connections.
    conns: HashMap<u16, Vec<(ConnId, PathIdx, u64)>>,
    /// Connections that joined a group of per-path connections, with the group's mode
    /// (bounded: a full map is cleared before the next entry).
    conn_modes: HashMap<ConnId, MatchMode>,
    /// Entries `conn_modes` holds at most.
    max_conn_modes: usize,
    /// Scratch for the messages one STREAM frame carries.
    parts: Vec<Part>,
    /// Scratch for the packets acknowledged by one ACK packet, and each one's ACK delay.
    acked: (Vec<(u64, Unacked)>, Vec<u64>),
}

impl QuicMatcher {
    /// A matcher with nothing seen, its side maps bounded as `cfg`'s flows.
    pub(crate) fn new(cfg: &crate::config::Config) -> Self {
        Self {
            conns: HashMap::default(),
            conn_modes: HashMap::default(),
            max_conn_modes: crate::pairs::side_map_max(cfg),
            parts: Vec::new(),
            acked: (Vec::new(), Vec::new()),
        }
    }
}

impl QuicMatcher {
    /// One decrypted QUIC packet: its connection's per-path detection and mode, its STREAM
    /// frames sighted as message copies, its ACK frames acknowledging sent packets.
    pub(crate) fn on_packet(&mut self, shared: &mut Shared, q: &QuicPacket) {
        // A packet of ACKs alone asks for no answer (an idle connection's last ACK is no
        // unanswered send).
        let Some(mut pkt) = shared.packet_turned(&q.meta, false, !q.ack_only) else {
            return;
        };
        let up = pkt.up.unwrap_or(true);
        let server = server_port(&q.meta.src, &q.meta.dst);
        let paths = &shared.paths;
        // The address pair regardless of direction: the two ends of one path see the same.
        let addrs = if q.meta.src <= q.meta.dst {
            pkt.tuple
        } else {
            crate::matcher::tuple_hash(&q.meta.dst, &q.meta.src)
        };
        let conns = self.conns.entry(server).or_default();
        if !conns
            .iter()
            .any(|(c, p, a)| *p == pkt.path && *a == addrs && *c == q.conn)
            && conns.len() < MAX_CONNS_PER_PORT
        {
            conns.push((q.conn, pkt.path, addrs));
        }
        // One connection on two paths (multipath QUIC) uses other addresses on each path.
        // The same addresses under two path labels are the two ends of one path (their
        // captures are paired later), and paths are compared as they are now (once paired,
        // the far end's label is an alias). Another connection on another path: separate
        // connections, one per path.
        let (mut multipath, mut per_path_conns) = (false, false);
        for (i, (c, p, a)) in conns.iter().enumerate() {
            for (c2, p2, a2) in conns.iter().skip(i + 1) {
                if paths.canonical(*p) != paths.canonical(*p2) {
                    let same = c == c2;
                    multipath |= same && a != a2;
                    per_path_conns |= !same;
                }
            }
        }
        // Separate per-path connections are matched by app id (configured) or by content: a
        // connection not seen on two paths whose frames carry ids is matched by them; by
        // content, once another connection to the same server port is seen on another path
        // (a single connection keeps its stream ranges and per-stream HOL tracking).
        let separate = !multipath;
        let forced = forced_mode(&shared.cfg, (&q.meta.src, &q.meta.dst), None, Some(q.conn));
        let has_app = q.streams.iter().any(|s| s.app_msg_id.is_some());
        let has_hash = per_path_conns && q.streams.iter().any(|s| s.data_hash.is_some());
        // Once a connection joined a group, all its packets stay there (ACK-only packets and
        // frames without the id carry no id of their own), also when it turns out to be one
        // multipath connection (seen on one path until it opened its second): its copies on
        // each path carry the same ids.
        let joined = self.conn_modes.get(&q.conn).copied();
        let mode = match forced {
            Some(m) => m,
            None => match joined {
                Some(m) => m,
                _ if separate && has_app => MatchMode::AppId,
                _ if separate && has_hash => MatchMode::Content,
                // Stream bytes that name no message (a piece of a message a later packet
                // completes) on a port with per-path connections: the group's too, without
                // joining it yet (the frames that name messages choose the group's mode).
                _ if separate && per_path_conns && !q.streams.is_empty() => {
                    if shared.cfg.app_id.is_some() {
                        MatchMode::AppId
                    } else {
                        MatchMode::Content
                    }
                }
                _ => MatchMode::QuicStream,
            },
        };
        let grouped = matches!(mode, MatchMode::Content | MatchMode::AppId);
        let joins = grouped && forced.is_none() && joined != Some(mode) && (has_app || has_hash);
        if joins {
            if self.conn_modes.len() >= self.max_conn_modes {
                self.conn_modes.clear();
            }
            self.conn_modes.insert(q.conn, mode);
        }
        // In a group, packet numbers and stream ids repeat across its connections.
        let conn_tag = if grouped { conn_hash(q.conn) } else { 0 };
        if q.streams.is_empty() {
            // An ACK-only packet: timed at both ends of its path for the clock offset.
            let identity = || mix(&[9, conn_hash(q.conn), q.path_id, q.pn, pkt.tuple]);
            shared.echo(identity, &pkt, false);
        }
        let key = match mode {
            MatchMode::Content | MatchMode::AppId => FlowKey::QuicGroup {
                server_port: server,
            },
            _ => FlowKey::Quic { conn: q.conn },
        };
        shared.remember_tuple(pkt.tuple, || key.clone());
        let fr = shared
            .flows
            .get_or_insert(&key, pkt.ts_ns, || Proto::Quic(Box::default()));
        if joins {
            // The connection's packets before it joined are in a flow of its own: it is
            // reported as part of the group.
            let own = FlowKey::Quic { conn: q.conn };
            if let Some(before) = shared.flows.find(&own) {
                if let Some(Proto::Quic(s)) = shared.flows.get_mut(before).map(|f| &mut f.proto) {
                    s.group = Some(fr);
                }
                Self::regroup(shared, before, fr, conn_tag);
                shared.flows.move_closed(before, fr);
            }
        }
        if let Some(f) = shared.flows.get_mut(fr) {
            f.mode = Some(mode);
            f.forced = forced.is_some();
            if pkt.count_wire {
                f.amp.wire += pkt.wire;
                if q.streams.is_empty() {
                    f.amp.ack += pkt.wire;
                }
            }
            if let Proto::Quic(s) = &mut f.proto {
                s.packets += 1;
            }
        }
        let mut items = smallvec::SmallVec::new();
        // On its own, a connection's messages of cut streams keep their names in a group, in
        // case it turns out to be one of several per-path connections.
        let on_own = mode == MatchMode::QuicStream && forced.is_none();
        // Whether this packet sends stream data its capture saw before: a retransmission,
        // whose wire bytes count as such in the flow's amplification (as for KCP and TCP).
        let mut resent = false;
        for sr in &q.streams {
            let head = match (mode, sr.data_hash, sr.app_msg_id) {
                (MatchMode::AppId, _, Some(app)) => {
                    Some((mix(&[6, u64::from(up), app]), MsgId::App(app)))
                }
                (MatchMode::Content, Some(h), _) => {
                    let n = match shared.flows.get_mut(fr).map(|f| &mut f.proto) {
                        Some(Proto::Quic(s)) => {
                            s.content
                                .occurrence(conn_tag, up, h, (sr.stream_id, sr.offset))
                        }
                        _ => 0,
                    };
                    Some((mix(&[5, u64::from(up), h, n]), MsgId::Hash(h)))
                }
                _ => None,
            };
            let stream_key = (conn_tag, up, sr.stream_id);
            let mut continued = None;
            let mut parts = std::mem::take(&mut self.parts);
            parts.clear();
            let framed = grouped
                && match shared.flows.get_mut(fr).map(|f| &mut f.proto) {
                    Some(Proto::Quic(s)) => {
                        s.framed_parts(conn_tag, up, sr, mode == MatchMode::AppId, &mut parts)
                    }
                    _ => false,
                };
            // A message the capture cut is as long as its range, whatever piece completed it
            // (in a group; on its own, a connection's messages are its frames' ranges).
            let framed_size = sr
                .framed
                .filter(|_| framed)
                .zip(parts.first())
                .map(|((start, end), p)| (p.0, end.saturating_sub(start)));
            match (head, &mut shared.flows.get_mut(fr).map(|f| &mut f.proto)) {
                _ if framed => {}
                (Some((k, id)), Some(Proto::Quic(s))) => {
                    s.remember_stream(stream_key, k);
                    parts.push((k, id, sr.len, false));
                }
                (Some((k, id)), _) => parts.push((k, id, sr.len, false)),
                // In a group, a frame without the id continues the message its stream started:
                // it is no copy of its own (the head frame's sighting stands for the message).
                (None, Some(Proto::Quic(s))) if grouped => {
                    if let Some(k) = s.stream_msgs.get(&stream_key) {
                        continued = Some(*k);
                        if pkt.dir == Dir::Out {
                            items.push((*k, sr.stream_id, sr.offset, sr.len, u32::MAX));
                        }
                    } else {
                        s.unmatched_frames += 1;
                    }
                }
                (None, Some(Proto::Quic(s))) => {
                    if sr.stream_id & 2 != 0 && sr.framed.is_none() {
                        s.whole_stream(up, sr.stream_id, sr.offset, sr.len, &mut parts);
                    } else {
                        s.split(up, sr.stream_id, sr.offset, sr.len, &mut parts);
                    }
                }
                (None, _) => {}
            }
            if let Some(k) = continued {
                shared
                    .msgs
                    .extend_to(fr.uid, k, sr.offset.saturating_add(sr.len));
            }
            let mut repeated = 0u64;
            for &(mkey, id, bytes, new_key) in &parts {
                let r = shared.sight(SightArgs {
                    past: if new_key {
                        PastClosure::NeverSeen
                    } else {
                        PastClosure::Unknown
                    },
                    ..pkt.sighting(fr, mkey, id, bytes)
                });
                if r.paired_now {
                    shared.repaired(&mut pkt, &q.meta);
                }
                if r.repeat || r.late {
                    repeated += bytes;
                }
                resent |= r.repeat;
                if let (true, true, Some(slot)) = (on_own, r.new_message, r.slot) {
                    let g =
                        framed_name(up, sr, sr.app_msg_id.is_some()).or_else(|| head_name(up, sr));
                    if let Some(g) = g {
                        shared.msgs.name_for_group(slot, g);
                    }
                }
                // Bytes sent again (a retransmission after loss): QUIC numbers every packet
                // anew, so their acknowledgment proves the copy delivered, as the first one's
                // would have.
                let acks_it = !r.late;
                if acks_it && pkt.dir == Dir::Out {
                    let slot = r.slot.unwrap_or(u32::MAX);
                    items.push((mkey, sr.stream_id, sr.offset, sr.len, slot));
                }
            }
            self.parts = parts;
            if let Some((k, size)) = framed_size {
                shared.msgs.extend_to(fr.uid, k, size);
            }
            let stream_mode = mode == MatchMode::QuicStream;
            if repeated > 0 && pkt.dir != Dir::In {
                if let Some(f) = shared.flows.get_mut(fr) {
                    if let Proto::Quic(s) = &mut f.proto {
                        s.retransmitted_bytes += repeated;
                    }
                }
                if stream_mode {
                    shared.gap_retransmit(
                        fr,
                        GapSel::Quic {
                            up,
                            stream: sr.stream_id,
                        },
                        sr.offset,
                        pkt.path,
                        pkt.ts_ns,
                        "offset",
                    );
                }
            }
            if stream_mode && pkt.dir != Dir::Out {
                shared.gap_deliver(
                    fr,
                    GapSel::Quic {
                        up,
                        stream: sr.stream_id,
                    },
                    sr.offset,
                    sr.len,
                    sr.len,
                    true,
                    pkt.path,
                    pkt.ts_ns,
                );
            }
        }
        if resent && pkt.count_wire {
            if let Some(f) = shared.flows.get_mut(fr) {
                f.amp.retransmit += pkt.wire;
            }
        }
        let max_unacked = shared.cfg.max_unacked_per_flow;
        if pkt.dir == Dir::Out && !items.is_empty() {
            let mut evicted = 0;
            if let Some(f) = shared.flows.get_mut(fr) {
                if let Proto::Quic(s) = &mut f.proto {
                    s.unacked.insert(
                        (up, conn_tag ^ q.path_id),
                        q.pn,
                        Unacked {
                            ts_ns: pkt.ts_ns,
                            path: pkt.path,
                            items,
                        },
                    );
                    while s.unacked.len() > max_unacked {
                        s.unacked.pop_first();
                        evicted += 1;
                    }
                }
            }
            shared.evicted_unacked += evicted;
        }
        if pkt.dir == Dir::In && !q.acks.is_empty() {
            self.acks(shared, fr, q, &pkt, conn_tag, mode == MatchMode::QuicStream);
        }
        if let Some(Proto::Quic(s)) = shared.flows.get_mut(fr).map(|f| &mut f.proto) {
            shared.evicted_streams += s.take_forgotten_streams();
        }
    }

    /// Connection flow `own` (on its own until now) joined group `group` as `conn_tag`: its
    /// open messages of cut streams move into the group under their names there (merged with
    /// the other connections' copies already there; pieces of a message with it), counted in
    /// [`Shared::regrouped`], and its packets not yet acknowledged follow them. The first
    /// messages of a connection seen before the other path's are then messages of the group,
    /// not of a single-path flow of their own.
    fn regroup(shared: &mut Shared, own: FlowRef, group: FlowRef, conn_tag: u64) {
        let open = shared.msgs.open_of(own.uid);
        let mut named: Vec<GroupName> = open.iter().filter_map(|o| o.3).collect();
        if named.is_empty() {
            return;
        }
        // Messages named by their content: their keys in the group, by occurrence.
        if let Some(Proto::Quic(s)) = shared.flows.get_mut(group).map(|f| &mut f.proto) {
            for g in &mut named {
                if let Some(h) = g.content {
                    let n = s
                        .content
                        .occurrence(conn_tag, g.up, h, (g.stream, g.range.0));
                    g.key = mix(&[5, u64::from(g.up), h, n]);
                }
            }
        }
        // Old key → (new key, slot).
        let mut moved: HashMap<u64, (u64, u32)> = HashMap::default();
        for (slot, key, id, own_name) in open {
            // Its own name (with its key in the group); or, a piece that completed nothing:
            // the message whose range it lies in (or, for a message named by its head, that
            // its stream's head started).
            let own_name = own_name.and_then(|o| {
                named
                    .iter()
                    .find(|g| (g.up, g.stream, g.range) == (o.up, o.stream, o.range))
                    .copied()
            });
            let name = own_name.or_else(|| match id {
                MsgId::Stream {
                    up,
                    stream,
                    start,
                    end,
                } => named
                    .iter()
                    .find(|g| {
                        g.up == up
                            && g.stream == stream
                            && g.range.0 < end
                            && (start < g.range.1 || g.content.is_some())
                    })
                    .copied(),
                _ => None,
            });
            let Some(g) = name else {
                continue;
            };
            if let Some(at) = shared.msgs.rename(slot, group, g.key, g.id) {
                // (Counted once per message, not per piece.)
                if !moved.values().any(|m| m.0 == g.key) {
                    shared.regrouped += 1;
                }
                shared
                    .msgs
                    .extend_to(group.uid, g.key, g.range.1.saturating_sub(g.range.0));
                moved.insert(key, (g.key, at));
            }
        }
        let (mask, mut unacked) = match shared.flows.get_mut(own) {
            Some(f) => match &mut f.proto {
                Proto::Quic(s) => (f.paths_mask, std::mem::take(&mut s.unacked)),
                _ => return,
            },
            None => return,
        };
        // Its packets that carried a moved message, now in the group's packet number spaces.
        let (mut stay, mut go) = (SentQueue::default(), Vec::new());
        while let Some(((up, space), pn, mut u)) = unacked.pop_first() {
            let mut any = false;
            for item in &mut u.items {
                if let Some(&(k, slot)) = moved.get(&item.0) {
                    (item.0, item.4) = (k, slot);
                    any = true;
                }
            }
            if any {
                go.push(((up, conn_tag ^ space), pn, u));
            } else {
                stay.insert((up, space), pn, u);
            }
        }
        if let Some(Proto::Quic(s)) = shared.flows.get_mut(own).map(|f| &mut f.proto) {
            s.unacked = stay;
        }
        if let Some(f) = shared.flows.get_mut(group) {
            f.paths_mask |= mask;
            if let Proto::Quic(s) = &mut f.proto {
                for g in &named {
                    let stream = (conn_tag, g.up, g.stream);
                    match g.content {
                        Some(_) => s.remember_stream(stream, g.key),
                        None => s.note_framed(stream, g.range.0, g.range.1, g.key),
                    }
                }
                for (space, pn, u) in go {
                    s.unacked.insert(space, pn, u);
                }
            }
        }
    }

    /// The ACK frames of packet `q` (`pkt`) received by the data's sender: the packets they
    /// acknowledge, and with `stream_mode`, their delivery at the receiver.
    fn acks(
        &mut self,
        shared: &mut Shared,
        fr: FlowRef,
        q: &QuicPacket,
        pkt: &Pkt,
        conn_tag: u64,
        stream_mode: bool,
    ) {
        let (data_up, ts) = (!pkt.up.unwrap_or(true), pkt.ts_ns);
        let (mut taken, mut delays) = std::mem::take(&mut self.acked);
        taken.clear();
        delays.clear();
        if let Some(f) = shared.flows.get_mut(fr) {
            if let Proto::Quic(s) = &mut f.proto {
                for a in &q.acks {
                    for &(lo, hi) in &a.ranges {
                        if lo > hi {
                            continue;
                        }
                        let space = conn_tag ^ a.path_id;
                        let before = taken.len();
                        s.unacked.take_range((data_up, space), lo..=hi, &mut taken);
                        delays.extend((before..taken.len()).map(|_| a.ack_delay_us));
                    }
                }
            }
        }
        // Read in place (each acknowledged packet and its items are not moved again).
        for ((_, u), &delay_us) in taken.iter().zip(&delays) {
            let at = ts
                .saturating_sub(delay_us.saturating_mul(1000))
                .max(u.ts_ns);
            for &(mkey, stream, off, len, hint) in &u.items {
                if let Some(slot) = shared.msgs.ack(fr.uid, mkey, hint, u.path, at) {
                    shared.maybe_complete(fr, slot);
                }
                if stream_mode {
                    shared.gap_deliver(
                        fr,
                        GapSel::Quic {
                            up: data_up,
                            stream,
                        },
                        off,
                        len,
                        0,
                        false,
                        u.path,
                        at,
                    );
                }
            }
        }
        taken.clear();
        self.acked = (taken, delays);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// The ranges of a stream as an ordered map start → (end, key), split the obvious way.
    fn split_in_map(
        map: &mut BTreeMap<u64, (u64, u64)>,
        up: bool,
        stream: u64,
        off: u64,
        len: u64,
    ) -> Vec<(u64, MsgId, u64)> {
        let end = off.saturating_add(len);
        let name = |start, end| MsgId::Stream {
            up,
            stream,
            start,
            end,
        };
        let mut hits: Vec<(u64, u64, u64)> = map
            .range(..end)
            .rev()
            .take_while(|(_, (e, _))| *e > off)
            .map(|(s, (e, k))| (*s, *e, *k))
            .collect();
        hits.reverse();
        let (mut out, mut fresh, mut cursor) = (Vec::new(), Vec::new(), off);
        for (s, e, k) in hits {
            if cursor < s {
                fresh.push((cursor, s));
            }
            out.push((k, name(s, e), e.min(end).saturating_sub(s.max(off))));
            cursor = cursor.max(e);
        }
        if cursor < end {
            fresh.push((cursor, end));
        }
        for (s, e) in fresh {
            let k = mix(&[4, u64::from(up), stream, s]);
            map.insert(s, (e, k));
            out.push((k, name(s, e), e - s));
        }
        while map.len() > MAX_RANGES_PER_STREAM {
            map.pop_first();
        }
        out
    }

    /// Overlapping, repeated and out-of-order frames split as with an ordered map; a range
    /// said to be new has a key never made before.
    #[test]
    fn split_matches_an_ordered_map() {
        let mut state = QuicState::default();
        let mut map = BTreeMap::new();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut out = Vec::new();
        let mut made = std::collections::HashSet::new();
        let mut new = 0;
        for i in 0..30_000u64 {
            let off = (i * 100).saturating_sub(next() % 3000);
            let len = next() % 700;
            out.clear();
            state.split(true, 4, off, len, &mut out);
            let parts: Vec<_> = out.iter().map(|p| (p.0, p.1, p.2)).collect();
            assert_eq!(
                parts,
                split_in_map(&mut map, true, 4, off, len),
                "frame {i}"
            );
            for p in &out {
                assert!(
                    !p.3 || !made.contains(&p.0),
                    "frame {i}: key said new was made"
                );
                new += usize::from(p.3);
                made.insert(p.0);
            }
        }
        assert!(new > 1000, "{new} new ranges");
        let ring = state.ranges.get_mut(&(true, 4)).unwrap();
        assert_eq!(ring.len(), map.len());
        assert!(ring
            .iter()
            .zip(&map)
            .all(|(r, (s, (e, k)))| *r == (*s, *e, *k)));
    }
}
