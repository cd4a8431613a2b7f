//! From a captured frame to owned decoded records: L2–L4 ([`tboxscope_decode::net`]), then the
//! UDP payload through the KCP detector (and the QUIC decoder), counting every frame under
//! exactly one outcome.
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;

use serde::Serialize;
use tboxscope_decode::icmp::{path_mtu_signal, PathMtuReject};
use tboxscope_decode::kcp::{
    Cmd, Detection, Detector, DetectorConfig, DetectorStats, KcpSegment, ValidSegments,
};
use tboxscope_decode::net::{
    cut_udp, tcp_segment, transport_direct, FragmentStats, LinkType, NetParser, NetReject,
    TcpSegment, Transport, UdpDatagram,
};
use tboxscope_decode::quic::{
    DatagramInfo, DecoderConfig, Frame, Keylog, KeylogError, PacketSummary, ParseOptions,
    QuicDecoder, QuicStats, Undecrypted,
};
use tboxscope_decode::tcp::{TcpFlags, TcpOptions, TcpReject};
use tboxscope_engine::{AppIdRule, Delimited, Delimiter, Framing};

/// What the dissector looks for.
#[derive(Debug, Clone, Default)]
pub struct DissectConfig {
    /// UDP ports whose payloads are KCP by configuration (`--kcp-port`); KCP is also recognised
    /// without them.
    pub kcp_ports: Vec<u16>,
    /// Also emit a record for UDP datagrams no decoder recognised.
    pub unknown_udp: bool,
    /// TLS secrets for QUIC (from `--keylog`); embedded pcapng secrets are added as found.
    pub keylog: Option<Keylog>,
    /// Where an application message id sits in each message (KCP segment payload, QUIC stream
    /// data from offset 0, UDP payload), to match copies sent on separate sessions per path.
    pub app_id: Option<AppIdRule>,
    /// How applications cut a QUIC stream into messages (`--framing`). Without it, each
    /// STREAM frame of a bidirectional stream is a message, and a unidirectional stream is
    /// one message.
    pub framing: Option<Framing>,
}

/// How a KCP segment was carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KcpFraming {
    /// Plain ikcp segments in the UDP payload.
    Raw,
    /// kcp-go framing (`crypt none` header and/or FEC header) around the segments.
    Kcpgo,
}

/// One KCP segment and where it was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct KcpSegmentRecord {
    /// Raw or kcp-go.
    pub framing: KcpFraming,
    /// Position of the segment in its datagram (0 = first).
    pub index: u16,
    /// The segment's header fields.
    #[serde(flatten)]
    pub header: KcpSegment,
    /// Where the segment's payload starts in the frame, so a consumer can read or hash the
    /// message bytes without a copy (`None` for datagrams reassembled from IP fragments).
    #[serde(skip)]
    pub payload_at: Option<u32>,
}

/// A UDP datagram no decoder recognised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct UdpRecord {
    /// Payload length.
    pub len: usize,
    /// Hash of the payload ([`tboxscope_engine::payload_hash`]), to match identical datagrams
    /// sent on several paths.
    #[serde(skip)]
    pub payload_hash: u64,
}

/// One TCP segment's header fields (the payload stays in the frame).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TcpSegmentRecord {
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number (meaningful with the ACK flag).
    pub ack: u32,
    /// Control bits.
    pub flags: TcpFlags,
    /// The window field as sent (unscaled).
    pub window: u16,
    /// Payload length.
    pub len: u32,
    /// MSS, window scale, SACK permitted and blocks, timestamps.
    pub options: TcpOptions,
}

/// A router's ICMP "fragmentation needed" / "packet too big" about a TCP segment (the
/// packet's own ends are the router and the segment's sender).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PathMtuRecord {
    /// The largest packet the path carries, bytes (0: not said).
    pub mtu: u32,
    /// The quoted segment's sender.
    pub segment_src: SocketAddr,
    /// The quoted segment's receiver.
    pub segment_dst: SocketAddr,
    /// The quoted segment's sequence number.
    pub seq: u32,
}

/// What was decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// A TCP segment.
    TcpSegment(TcpSegmentRecord),
    /// A path MTU signal about a TCP segment.
    PathMtu(PathMtuRecord),
    /// A KCP segment.
    KcpSegment(KcpSegmentRecord),
    /// A QUIC packet (one of possibly several coalesced in a datagram).
    QuicPacket(Box<PacketSummary>),
    /// Unrecognised UDP (only with [`DissectConfig::unknown_udp`]).
    UdpDatagram(UdpRecord),
}

impl Decoded {
    /// The record type name used in JSON (`kcp_segment`, `quic_packet`, `udp_datagram`).
    pub fn record_type(&self) -> &'static str {
        match self {
            Decoded::KcpSegment(_) => "kcp_segment",
            Decoded::QuicPacket(_) => "quic_packet",
            Decoded::UdpDatagram(_) => "udp_datagram",
            Decoded::TcpSegment(_) => "tcp_segment",
            Decoded::PathMtu(_) => "path_mtu",
        }
    }
}

/// A decoded unit (segment or packet) of one frame, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedPacket {
    /// Capture time, ns since the Unix epoch.
    pub ts_ns: u64,
    /// UDP sender.
    pub src: SocketAddr,
    /// UDP receiver.
    pub dst: SocketAddr,
    /// The IP packet's TTL (IPv6: hop limit) as captured; 0 where not read (a router's path
    /// MTU signal).
    pub ttl: u8,
    /// The decoded content.
    pub decoded: Decoded,
    /// Application message id read with [`DissectConfig::app_id`] from a KCP segment's or UDP
    /// datagram's payload.
    pub app_msg_id: Option<u64>,
    /// For a KCP data segment: [`tboxscope_engine::content_hash`] of its payload.
    pub content_hash: Option<u64>,
    /// For a decrypted QUIC packet: what names the messages its STREAM frames start.
    pub stream_heads: Vec<StreamHead>,
    /// For a TCP segment of a byte stream cut into messages ([`DissectConfig::framing`]): the
    /// messages it completes at its capture, each as (first sequence number, sequence number
    /// past its end).
    pub tcp_messages: Vec<(u32, u32)>,
}

/// Takes what [`Dissector::dissect_each`] decodes, in order. Any `FnMut(DecodedPacket)` is
/// one.
pub trait UnitSink {
    /// One decoded unit.
    fn unit(&mut self, packet: DecodedPacket);

    /// A TCP segment of a stream not cut into messages, captured at `ts_ns`, offered before
    /// its [`DecodedPacket`] is made: true when taken as it is (no unit follows), false to
    /// have it made and handed to [`UnitSink::unit`]. (The engine's feed builds its
    /// observation from the headers directly.)
    #[inline]
    fn tcp_segment(&mut self, ts_ns: u64, segment: &TcpSegment<'_>) -> bool {
        let _ = (ts_ns, segment);
        false
    }
}

impl<F: FnMut(DecodedPacket)> UnitSink for F {
    #[inline]
    fn unit(&mut self, packet: DecodedPacket) {
        self(packet);
    }
}

/// How a QUIC STREAM frame at a stream's start names its message, for matching copies sent on
/// separate connections per path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamHead {
    /// Stream id.
    pub stream_id: u64,
    /// The frame's offset in the stream.
    pub offset: u64,
    /// Application message id (with [`DissectConfig::app_id`]), if the frame's data holds it.
    pub app_msg_id: Option<u64>,
    /// [`tboxscope_engine::content_hash`] of the message's first bytes, for a frame at
    /// offset 0.
    pub content_hash: Option<u64>,
    /// For a stream cut into messages ([`DissectConfig::framing`]): the stream range of the
    /// message this frame completes (several heads of one frame: several messages).
    pub framed: Option<(u64, u64)>,
}

/// Counters: every frame lands in exactly one of `unsupported_link`, `net_rejected`,
/// `tcp_rejected`, `tcp`, `path_mtu`, `path_mtu_rejected` or `udp`;
/// every UDP datagram in exactly one of `kcp_datagrams`, `kcp_other`, `quic_datagrams` or
/// `other_udp`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DissectStats {
    /// Frames seen.
    pub frames: u64,
    /// Frames on an interface whose link type is not decoded.
    pub unsupported_link: u64,
    /// Frames without a UDP datagram or a TCP segment, by reason (fragments waiting for
    /// reassembly included; `not_udp` counts IP carrying neither UDP nor TCP).
    pub net_rejected: NetRejects,
    /// TCP segments decoded.
    pub tcp: u64,
    /// Of those, segments whose frame the capture cut short (its snap length): their payload
    /// length is the IP header's, not the bytes captured.
    pub tcp_cut: u64,
    /// IP packets of protocol TCP without a usable segment, by reason.
    pub tcp_rejected: TcpRejects,
    /// ICMP "fragmentation needed" / "packet too big" quoting a TCP segment.
    pub path_mtu: u64,
    /// ICMP "fragmentation needed" / "packet too big" that quote no readable TCP segment, by
    /// reason.
    pub path_mtu_rejected: PathMtuRejects,
    /// UDP datagrams (reassembled ones included).
    pub udp: u64,
    /// Of those, datagrams whose frame the capture cut short (its snap length): KCP decoded
    /// from its segment headers as far as captured (QUIC and other UDP need the whole
    /// datagram: such frames count as truncated in `net_rejected`).
    pub udp_cut: u64,
    /// KCP data segments cut before the bytes that name their message (the application id's,
    /// or the content hash's [`tboxscope_engine::CONTENT_PREFIX`]): matched by conv and sn
    /// within a session, but not across separate sessions.
    pub kcp_cut_unnamed: u64,
    /// Cut KCP datagrams with bytes past the last segment seen: segments whose headers the
    /// capture cut, not decoded.
    pub kcp_cut_unseen: u64,
    /// UDP datagrams decoded as KCP (raw or kcp-go).
    pub kcp_datagrams: u64,
    /// UDP datagrams recognised as kcp-go without KCP segments (FEC parity, out of band), or
    /// encrypted kcp-go / unknown on a `--kcp-port`.
    pub kcp_other: u64,
    /// KCP segments decoded.
    pub kcp_segments: u64,
    /// UDP datagrams holding at least one QUIC packet.
    pub quic_datagrams: u64,
    /// QUIC packets whose header parsed (decrypted or not).
    pub quic_packets: u64,
    /// Short headers of no known QUIC connection (not counted as QUIC: without the handshake
    /// or a NEW_CONNECTION_ID they cannot be told from other UDP).
    pub quic_unknown_short: u64,
    /// Long headers of a known version but no known QUIC connection that are not Initials
    /// (Handshake, 0-RTT, Retry, Version Negotiation): not counted as QUIC, for the same reason.
    pub quic_unknown_long: u64,
    /// UDP GSO batches (several datagrams captured as one on the sending host) split for QUIC.
    pub gso_batches: u64,
    /// Long headers of versions the QUIC decoder does not know (not counted as QUIC; their
    /// datagrams count as other UDP unless they also hold a known packet).
    pub quic_unknown_version: u64,
    /// UDP datagrams no decoder recognised.
    pub other_udp: u64,
}

/// Frames without UDP, by [`NetReject`] reason.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct NetRejects {
    /// See [`NetReject::Truncated`].
    pub truncated: u64,
    /// See [`NetReject::Malformed`].
    pub malformed: u64,
    /// See [`NetReject::NotIp`].
    pub not_ip: u64,
    /// See [`NetReject::NotUdp`].
    pub not_udp: u64,
    /// See [`NetReject::Fragment`].
    pub fragment: u64,
    /// See [`NetReject::BadFragment`].
    pub bad_fragment: u64,
}

impl NetRejects {
    fn count(&mut self, r: NetReject) {
        let c = match r {
            NetReject::Truncated => &mut self.truncated,
            NetReject::Malformed => &mut self.malformed,
            NetReject::NotIp => &mut self.not_ip,
            NetReject::NotUdp => &mut self.not_udp,
            NetReject::Fragment => &mut self.fragment,
            NetReject::BadFragment => &mut self.bad_fragment,
        };
        *c += 1;
    }

    /// Sum over all reasons.
    pub fn total(&self) -> u64 {
        self.truncated
            + self.malformed
            + self.not_ip
            + self.not_udp
            + self.fragment
            + self.bad_fragment
    }
}

/// A reason a decoder gives for yielding nothing, counted in [`ByReason`].
pub trait Reason: Copy + PartialEq + 'static {
    /// Every reason, in a stable order.
    const ALL: &'static [Self];
    /// The reason's name as written in JSON.
    fn name(self) -> &'static str;
}

impl Reason for TcpReject {
    const ALL: &'static [Self] = &TcpReject::ALL;
    fn name(self) -> &'static str {
        self.as_str()
    }
}

impl Reason for PathMtuReject {
    const ALL: &'static [Self] = &PathMtuReject::ALL;
    fn name(self) -> &'static str {
        self.as_str()
    }
}

/// Counts by reason (in `R::ALL`'s order), written as a map by reason name.
#[derive(Debug, Clone, Copy)]
pub struct ByReason<R, const N: usize>(pub [u64; N], std::marker::PhantomData<R>);

impl<R, const N: usize> Default for ByReason<R, N> {
    fn default() -> Self {
        Self([0; N], std::marker::PhantomData)
    }
}

impl<R: Reason, const N: usize> ByReason<R, N> {
    fn count(&mut self, r: R) {
        if let Some(n) = R::ALL
            .iter()
            .position(|x| *x == r)
            .and_then(|i| self.0.get_mut(i))
        {
            *n += 1;
        }
    }

    /// Sum over all reasons.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// The reasons counted, each as `"N name"`.
    pub fn listed(&self) -> Vec<String> {
        R::ALL
            .iter()
            .zip(self.0)
            .filter(|(_, n)| *n > 0)
            .map(|(r, n)| format!("{n} {}", r.name()))
            .collect()
    }
}

impl<R: Reason, const N: usize> Serialize for ByReason<R, N> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(N))?;
        for (r, n) in R::ALL.iter().zip(self.0) {
            m.serialize_entry(r.name(), &n)?;
        }
        m.end()
    }
}

/// TCP packets without a segment, by [`TcpReject`] reason (`not_tcp` stays 0: such frames are
/// in [`DissectStats::net_rejected`]).
pub type TcpRejects = ByReason<TcpReject, { TcpReject::ALL.len() }>;

/// ICMP "fragmentation needed" / "packet too big" about no readable TCP segment, by
/// [`PathMtuReject`] reason.
pub type PathMtuRejects = ByReason<PathMtuReject, { PathMtuReject::ALL.len() }>;

/// Decodes frames into [`DecodedPacket`]s.
pub struct Dissector {
    config: DissectConfig,
    net: NetParser,
    kcp: Detector,
    quic: QuicDecoder,
    stats: DissectStats,
    /// The first bytes of QUIC streams, until they name their message.
    starts: StreamStarts,
    /// Application message ids read (see [`Dissector::app_ids_read`]).
    app_ids: u64,
    /// TCP byte streams cut into messages.
    tcp_cuts: TcpCuts,
}

/// Streams whose start is being gathered or was named, at most this many each.
const MAX_STREAM_STARTS: usize = 8192;

/// Pieces of a stream's start held past a hole, per stream (the oldest dropped beyond).
const MAX_HELD_PIECES: usize = 8;

/// A stream's start being gathered.
#[derive(Debug, Default)]
struct Gathered {
    /// Its bytes from offset 0, contiguous.
    bytes: Vec<u8>,
    /// Pieces past a hole: (offset, bytes).
    ahead: Vec<(usize, Vec<u8>)>,
    /// Its final size, once its FIN was seen.
    final_size: Option<usize>,
}

impl Gathered {
    /// Appends what `piece` at `offset` (not past the gathered bytes) adds.
    fn append(&mut self, offset: usize, piece: &[u8]) {
        let have = self.bytes.len();
        if let Some(new) = piece.get(have.saturating_sub(offset)..) {
            self.bytes.extend_from_slice(new);
        }
    }
}

/// Which QUIC stream, one way, at which capture: (capture label's hash, connection, stream id,
/// sender's port).
type StreamKey = (u64, u64, u64, u16);

/// The first bytes of each QUIC stream (a message), gathered across STREAM frames until they
/// name the message — the application id's bytes and [`tboxscope_engine::CONTENT_PREFIX`]
/// bytes for the content hash, or the whole message if shorter — so that a message whose
/// first frame was cut short (a packet nearly full) is named like its copy that was not.
#[derive(Debug, Default)]
struct StreamStarts {
    /// Streams whose start is incomplete.
    gathering: HashMap<StreamKey, Gathered>,
    /// Streams already named (their start again, retransmitted, names nothing).
    named: HashSet<StreamKey>,
    /// Streams cut into messages, each by its delimiter (looked up for every STREAM frame of
    /// a bidirectional stream: a fast hash).
    delimiters: tboxscope_engine::FastMap<StreamKey, Delimiter>,
    /// Per capture, connection, sender's port and stream type (the id's two low bits): the
    /// lowest stream id seen from its first byte. Streams of higher ids were opened after it,
    /// within the capture: they begin at offset 0 whatever piece of them is seen first.
    opened: tboxscope_engine::FastMap<(u64, u64, u16, u8), u64>,
    /// Delimited streams cut to their end (a FIN and every byte before it): their later
    /// pieces are copies of bytes seen, not the start of a stream joined mid-way.
    finished: HashSet<StreamKey>,
    /// Delimited streams forgotten to keep [`MAX_DELIMITED_STREAMS`].
    forgotten: u64,
    /// Holes given up on by the delimiters forgotten so far.
    holes_given_up: u64,
}

/// Streams cut into messages at once (each holds at most
/// [`tboxscope_engine::framing::MAX_AHEAD`] bytes past a hole); beyond, all are forgotten and
/// counted (their next pieces start them again, as a capture joined mid-stream).
pub const MAX_DELIMITED_STREAMS: usize = 1024;

impl StreamStarts {
    /// Bytes of a stream's start that name its message: the application id's, and the
    /// content hash's.
    fn need(rule: Option<AppIdRule>) -> usize {
        rule.map_or(0, |r| r.offset.saturating_add(r.width))
            .max(tboxscope_engine::CONTENT_PREFIX)
    }

    /// A STREAM frame of stream `key`; the head it completes, if it does (named on this frame).
    fn frame(
        &mut self,
        key: StreamKey,
        offset: u64,
        data: &[u8],
        fin: bool,
        rule: Option<AppIdRule>,
    ) -> Option<StreamHead> {
        let need = Self::need(rule);
        let start = usize::try_from(offset).ok().filter(|o| *o < need)?;
        if data.is_empty() && !fin || self.named.contains(&key) {
            return None;
        }
        let whole = start == 0 && (data.len() >= need || fin);
        let named = if whole {
            self.gathering.remove(&key);
            Self::name(data, rule)
        } else {
            if self.gathering.len() >= MAX_STREAM_STARTS && !self.gathering.contains_key(&key) {
                self.gathering.clear();
            }
            let g = self.gathering.entry(key).or_default();
            if fin {
                g.final_size = Some(start + data.len());
            }
            let piece = data.get(..need.min(start + data.len()) - start)?;
            if start > g.bytes.len() {
                // Past a hole (its first piece lost or late): held until the hole fills.
                if g.ahead.len() >= MAX_HELD_PIECES {
                    g.ahead.remove(0);
                }
                g.ahead.push((start, piece.to_vec()));
            } else {
                g.append(start, piece);
                while let Some(i) = g.ahead.iter().position(|(o, _)| *o <= g.bytes.len()) {
                    let (o, p) = g.ahead.swap_remove(i);
                    g.append(o, &p);
                }
            }
            let done = g.bytes.len() >= need || g.final_size.is_some_and(|f| g.bytes.len() >= f);
            if !done {
                return None;
            }
            let g = self.gathering.remove(&key)?;
            Self::name(&g.bytes, rule)
        };
        if self.named.len() >= MAX_STREAM_STARTS {
            self.named.clear();
        }
        self.named.insert(key);
        let (app_msg_id, content_hash) = named;
        Some(StreamHead {
            stream_id: key.2,
            offset,
            app_msg_id,
            content_hash,
            framed: None,
        })
    }

    /// A STREAM frame of a stream cut into messages by `framing` (`fin`: it ends the stream):
    /// a head for each message it completes. A stream cut to its end leaves the bound on
    /// streams cut at once to those still open.
    #[expect(
        clippy::too_many_arguments,
        reason = "one STREAM frame's fields and the cut's settings"
    )]
    fn delimit(
        &mut self,
        key: StreamKey,
        offset: u64,
        data: &[u8],
        fin: bool,
        framing: Framing,
        rule: Option<AppIdRule>,
        out: &mut Vec<StreamHead>,
    ) {
        if !self.finished.is_empty() && self.finished.contains(&key) {
            return;
        }
        if self.delimiters.len() >= MAX_DELIMITED_STREAMS && !self.delimiters.contains_key(&key) {
            self.forgotten += self.delimiters.len() as u64;
            self.holes_given_up += self
                .delimiters
                .values()
                .map(|d| d.holes_given_up)
                .sum::<u64>();
            self.delimiters.clear();
        }
        let kind = (key.0, key.1, key.3, (key.2 & 3) as u8);
        if offset == 0 {
            if self.opened.len() >= MAX_STREAM_STARTS && !self.opened.contains_key(&kind) {
                self.opened.clear();
            }
            let lowest = self.opened.entry(kind).or_insert(key.2);
            *lowest = (*lowest).min(key.2);
        }
        let opened = &self.opened;
        let d = self.delimiters.entry(key).or_insert_with(|| {
            // Opened within the capture: cut from its first byte. Otherwise it may have been
            // open before the capture began: joined at the first piece seen.
            if offset == 0 || opened.get(&kind).is_some_and(|&lowest| key.2 > lowest) {
                Delimiter::from_start(framing)
            } else {
                Delimiter::new(framing)
            }
        });
        d.push(offset, data, |m, head| {
            out.push(StreamHead {
                stream_id: key.2,
                offset,
                app_msg_id: rule.and_then(|r| r.extract(head)),
                content_hash: Some(tboxscope_engine::content_hash(head)),
                framed: Some((m.start, m.end)),
            });
        });
        if fin {
            d.end_at(offset.saturating_add(data.len() as u64));
        }
        if d.is_finished() {
            if let Some(d) = self.delimiters.remove(&key) {
                self.holes_given_up += d.holes_given_up;
            }
            if self.finished.len() >= MAX_STREAM_STARTS {
                self.finished.clear();
            }
            self.finished.insert(key);
        }
    }

    /// Whether stream `stream_id`'s bytes are cut into messages: all streams with a stated
    /// framing; else bidirectional ones (a long-lived stream of messages), by frame.
    fn delimited(framing: Option<Framing>, stream_id: u64) -> Option<Framing> {
        framing.or((stream_id & 2 == 0).then_some(Framing::Frames))
    }

    /// (application id, content hash) of a message starting with `start`.
    fn name(start: &[u8], rule: Option<AppIdRule>) -> (Option<u64>, Option<u64>) {
        let app = rule.and_then(|r| r.extract(start));
        let content = (!start.is_empty()).then(|| tboxscope_engine::content_hash(start));
        (app, content)
    }
}

impl Dissector {
    /// A dissector with the given settings.
    pub fn new(config: DissectConfig) -> Self {
        let kcp = Detector::new(DetectorConfig {
            forced_ports: config.kcp_ports.clone(),
            ..DetectorConfig::default()
        });
        // Lax header parsing: captures cut by a snap length keep their headers, and peers that
        // grease the fixed bit (RFC 9287; quinn does by default) still decode. Random UDP
        // does not become QUIC through this: see the unknown-connection rule in `dissect`.
        let quic_config = DecoderConfig {
            parse: ParseOptions { lax: true },
            ..DecoderConfig::default()
        };
        let quic = QuicDecoder::new(quic_config, config.keylog.clone());
        Self {
            config,
            net: NetParser::new(),
            kcp,
            quic,
            stats: DissectStats::default(),
            starts: StreamStarts::default(),
            app_ids: 0,
            tcp_cuts: TcpCuts::default(),
        }
    }

    /// Application message ids read with [`DissectConfig::app_id`] so far (KCP segments, QUIC
    /// stream starts, unrecognised datagrams): 0 means the rule reaches beyond every message.
    pub fn app_ids_read(&self) -> u64 {
        self.app_ids
    }

    /// Cutting QUIC streams into messages ([`DissectConfig::framing`]): (holes given up on —
    /// bytes past them waited beyond the bound and cutting started again after them —,
    /// streams forgotten to keep the bound on streams cut at once).
    pub fn framing_evictions(&self) -> (u64, u64) {
        let live: u64 = self
            .starts
            .delimiters
            .values()
            .map(|d| d.holes_given_up)
            .sum();
        (self.starts.holes_given_up + live, self.starts.forgotten)
    }

    /// Adds TLS key-log text (e.g. a pcapng Decryption Secrets Block) for QUIC decryption;
    /// errors name `source` and the line.
    pub fn add_keylog_text(&mut self, text: &[u8], source: &str) -> Result<(), KeylogError> {
        // Validate first so a bad block adds nothing and is reported with its own name.
        let log = Keylog::parse_named(text, source)?;
        self.quic.add_keylog(&log, text)
    }

    /// The QUIC decoder's counters (rejections and undecrypted packets by reason).
    pub fn quic_stats(&self) -> &QuicStats {
        &self.quic.stats
    }

    /// Frame-level counters.
    pub fn stats(&self) -> &DissectStats {
        &self.stats
    }

    /// The KCP detector's counters (rejections by reason).
    pub fn kcp_stats(&self) -> &DetectorStats {
        self.kcp.stats()
    }

    /// IP fragmentation counters.
    pub fn fragment_stats(&self) -> FragmentStats {
        self.net.fragment_stats()
    }

    /// Decodes one frame (link layer `link`, `None` if unsupported) captured by `capture` (its
    /// path label: the same stream seen by two captures is followed at each), appending what
    /// it holds to `out` (not cleared). Returns the number of records appended.
    pub fn dissect(
        &mut self,
        link: Option<LinkType>,
        capture: &str,
        frame: &[u8],
        ts_ns: u64,
        out: &mut Vec<DecodedPacket>,
    ) -> usize {
        self.dissect_each(link, capture, frame, ts_ns, |p| out.push(p))
    }

    /// [`Dissector::dissect`] handing each record to `each` as it is decoded, in the same order
    /// (no vector to fill, move and clear per frame). Returns the number of records.
    pub fn dissect_each(
        &mut self,
        link: Option<LinkType>,
        capture: &str,
        frame: &[u8],
        ts_ns: u64,
        mut each: impl UnitSink,
    ) -> usize {
        self.stats.frames += 1;
        let Some(link) = link else {
            self.stats.unsupported_link += 1;
            return 0;
        };
        let udp = match transport_direct(link, frame) {
            // The common frame: its headers read once, whichever it carries.
            Some(Transport::Tcp(ref seg)) => return self.segment(capture, seg, ts_ns, each),
            Some(Transport::Udp(u)) => Ok(u),
            None => self.net.udp(link, frame, ts_ns),
        };
        let udp = match udp {
            Ok(u) => u,
            Err(NetReject::NotUdp) => return self.tcp(link, capture, frame, ts_ns, each, false),
            // A TCP segment whose frame the snap length cut (its headers are whole), or a
            // router's "too big" quoting one; anything else cut is counted as truncated.
            // A UDP datagram cut there: KCP as far as captured.
            Err(NetReject::Truncated) => match cut_udp(link, frame) {
                Some(udp) => return self.cut_datagram(&udp, frame, ts_ns, each),
                None => return self.tcp(link, capture, frame, ts_ns, each, true),
            },
            Err(r) => {
                self.stats.net_rejected.count(r);
                return 0;
            }
        };
        self.stats.udp += 1;
        let (src, dst) = (udp.src, udp.dst);
        let detection = self.kcp.classify(src.port(), dst.port(), udp.payload);
        let framing = match detection {
            Detection::Raw(_) => Some(KcpFraming::Raw),
            Detection::KcpGo { .. } => Some(KcpFraming::Kcpgo),
            Detection::EncryptedOrUnknown { .. } => {
                self.stats.kcp_other += 1;
                return 0;
            }
            Detection::NotKcp(_) => None,
        };
        if let (Some(framing), Some(segments)) = (framing, detection.segments()) {
            let source = KcpSource {
                framing,
                src,
                dst,
                ttl: udp.ttl,
                frame,
                ts_ns,
            };
            let rule = self.config.app_id;
            return kcp_records(
                &mut self.stats,
                &mut self.app_ids,
                rule,
                source,
                segments,
                each,
            );
        }
        let mut quic_records = 0usize;
        let info = DatagramInfo {
            src: Some(src),
            dst: Some(dst),
            from_client: None,
        };
        let mut unknown_version = 0u64;
        let mut unknown_short = 0u64;
        let mut unknown_long = 0u64;
        let app_rule = self.config.app_id;
        let framing = self.config.framing;
        let mut app_ids = 0u64;
        // A capture taken on the sending host sees a UDP GSO batch before the NIC splits it:
        // one "datagram" holding several equal-sized QUIC datagrams. Decode them one by one.
        let segment = gso_segment_size(udp.payload);
        if segment.is_some() {
            self.stats.gso_batches += 1;
        }
        let chunk = segment.unwrap_or(udp.payload.len()).max(1);
        let starts = &mut self.starts;
        for datagram in udp.payload.chunks(chunk) {
            self.quic.decode_with(datagram, &info, |p| {
                // Any byte pattern with the top bit set parses as a long header of *some*
                // version; only versions the decoder knows count as QUIC.
                if p.undecrypted == Some(Undecrypted::UnknownVersion) {
                    unknown_version += 1;
                    return;
                }
                // A short header whose connection ID no handshake or NEW_CONNECTION_ID
                // announced is indistinguishable from random bytes; so is a long header other
                // than an Initial outside a connection (an LLMNR query parses as Version
                // Negotiation).
                if !p.is_quic() {
                    if p.header.is_long() {
                        unknown_long += 1;
                    } else {
                        unknown_short += 1;
                    }
                    return;
                }
                let summary = p.summary();
                // The frames are parsed again for their data only where a message starts.
                let need = StreamStarts::need(app_rule);
                let starting = summary.frames.iter().any(|f| {
                    f.frame_type == "stream"
                        && (f.offset.unwrap_or(0) < need as u64
                            || StreamStarts::delimited(framing, f.stream_id.unwrap_or(0)).is_some())
                });
                let stream_heads = if starting {
                    stream_heads(p, (app_rule, framing), capture, src.port(), starts)
                } else {
                    Vec::new()
                };
                if app_rule.is_some() {
                    app_ids += stream_heads
                        .iter()
                        .filter(|h| h.app_msg_id.is_some())
                        .count() as u64;
                }
                quic_records += 1;
                each.unit(DecodedPacket {
                    ts_ns,
                    src,
                    dst,
                    ttl: udp.ttl,
                    app_msg_id: None,
                    content_hash: None,
                    stream_heads,
                    tcp_messages: Vec::new(),
                    decoded: Decoded::QuicPacket(Box::new(summary)),
                });
            });
        }
        self.app_ids += app_ids;
        self.stats.quic_unknown_version += unknown_version;
        self.stats.quic_unknown_short += unknown_short;
        self.stats.quic_unknown_long += unknown_long;
        if quic_records > 0 {
            self.stats.quic_datagrams += 1;
            self.stats.quic_packets += quic_records as u64;
            return quic_records;
        }
        self.stats.other_udp += 1;
        if self.config.unknown_udp {
            let app_msg_id = self.config.app_id.and_then(|r| r.extract(udp.payload));
            self.app_ids += u64::from(app_msg_id.is_some());
            each.unit(DecodedPacket {
                ts_ns,
                src,
                dst,
                ttl: udp.ttl,
                app_msg_id,
                content_hash: None,
                stream_heads: Vec::new(),
                tcp_messages: Vec::new(),
                decoded: Decoded::UdpDatagram(UdpRecord {
                    len: udp.payload.len(),
                    payload_hash: tboxscope_engine::payload_hash(udp.payload),
                }),
            });
            return 1;
        }
        0
    }
}

/// Where a KCP datagram's segments were seen: framing, endpoints, frame and capture time.
struct KcpSource<'f> {
    framing: KcpFraming,
    src: SocketAddr,
    dst: SocketAddr,
    ttl: u8,
    frame: &'f [u8],
    ts_ns: u64,
}

/// The records of a KCP datagram's `segments` (counted in `stats`, application ids read in
/// `app_ids`).
fn kcp_records(
    stats: &mut DissectStats,
    app_ids: &mut u64,
    rule: Option<AppIdRule>,
    source: KcpSource<'_>,
    segments: ValidSegments<'_>,
    mut each: impl UnitSink,
) -> usize {
    let KcpSource {
        framing,
        src,
        dst,
        ttl,
        frame,
        ts_ns,
    } = source;
    let frame_start = frame.as_ptr() as usize;
    let frame_end = frame_start + frame.len();
    stats.kcp_datagrams += 1;
    let mut records = 0;
    for (i, seg) in segments.enumerate() {
        records += 1;
        stats.kcp_segments += 1;
        let payload = seg.payload();
        let at = payload.as_ptr() as usize;
        let payload_at = (at >= frame_start && at + payload.len() <= frame_end)
            .then(|| u32::try_from(at - frame_start).ok())
            .flatten();
        let app_msg_id = rule.and_then(|r| r.extract(payload));
        *app_ids += u64::from(app_msg_id.is_some());
        // A segment the capture cut is named by content only if the bytes hashed are there.
        let hashed = payload.len() >= tboxscope_engine::CONTENT_PREFIX || !seg.is_cut();
        let content_hash = (seg.cmd() == Cmd::Push && !seg.is_empty() && hashed)
            .then(|| tboxscope_engine::content_hash(payload));
        if seg.is_cut() && content_hash.is_none() && app_msg_id.is_none() {
            stats.kcp_cut_unnamed += 1;
        }
        each.unit(DecodedPacket {
            ts_ns,
            src,
            dst,
            ttl,
            app_msg_id,
            content_hash,
            stream_heads: Vec::new(),
            tcp_messages: Vec::new(),
            decoded: Decoded::KcpSegment(KcpSegmentRecord {
                framing,
                index: u16::try_from(i).unwrap_or(u16::MAX),
                header: seg.summary(),
                payload_at,
            }),
        });
    }
    if records == 0 {
        // kcp-go parity shard or out-of-band packet: KCP, but no segment to show.
        stats.kcp_datagrams -= 1;
        stats.kcp_other += 1;
    }
    records
}

impl Dissector {
    /// A UDP datagram the capture's snap length cut short: raw KCP is decoded as far as
    /// captured; anything else (QUIC cannot be decrypted cut) is a truncated frame.
    fn cut_datagram(
        &mut self,
        udp: &UdpDatagram<'_>,
        frame: &[u8],
        ts_ns: u64,
        each: impl UnitSink,
    ) -> usize {
        let declared = udp.payload_len as usize;
        let detection =
            self.kcp
                .classify_cut(udp.src.port(), udp.dst.port(), udp.payload, declared);
        match detection {
            Detection::Raw(datagram) => {
                self.stats.udp += 1;
                self.stats.udp_cut += 1;
                self.stats.kcp_cut_unseen += u64::from(datagram.unseen_bytes() > 0);
                let source = KcpSource {
                    framing: KcpFraming::Raw,
                    src: udp.src,
                    dst: udp.dst,
                    ttl: udp.ttl,
                    frame,
                    ts_ns,
                };
                let (rule, segments) = (self.config.app_id, datagram.segments());
                kcp_records(
                    &mut self.stats,
                    &mut self.app_ids,
                    rule,
                    source,
                    segments,
                    each,
                )
            }
            Detection::EncryptedOrUnknown { .. } => {
                self.stats.udp += 1;
                self.stats.udp_cut += 1;
                self.stats.kcp_other += 1;
                0
            }
            Detection::KcpGo { .. } | Detection::NotKcp(_) => {
                self.stats.net_rejected.count(NetReject::Truncated);
                0
            }
        }
    }

    /// A frame [`NetParser::udp`] found no UDP in: its TCP segment, or the reason (a frame
    /// the capture `cut` short and no segment or signal is counted as truncated, as there).
    fn tcp(
        &mut self,
        link: LinkType,
        capture: &str,
        frame: &[u8],
        ts_ns: u64,
        each: impl UnitSink,
        cut: bool,
    ) -> usize {
        let seg = match tcp_segment(link, frame) {
            Ok(s) => s,
            Err(TcpReject::NotTcp) => return self.path_mtu(link, frame, ts_ns, each, cut),
            Err(_) if cut => {
                self.stats.net_rejected.count(NetReject::Truncated);
                return 0;
            }
            Err(r) => {
                self.stats.tcp_rejected.count(r);
                return 0;
            }
        };
        self.segment(capture, &seg, ts_ns, each)
    }

    /// A TCP segment read from a frame of `capture`.
    #[inline(always)]
    fn segment(
        &mut self,
        capture: &str,
        seg: &TcpSegment<'_>,
        ts_ns: u64,
        mut each: impl UnitSink,
    ) -> usize {
        self.stats.tcp += 1;
        if seg.cut() {
            self.stats.tcp_cut += 1;
        }
        if self.config.framing.is_none() && each.tcp_segment(ts_ns, seg) {
            return 1;
        }
        let tcp_messages = self.tcp_messages(capture, seg);
        let t = &seg.tcp;
        each.unit(DecodedPacket {
            ts_ns,
            src: seg.src,
            dst: seg.dst,
            ttl: seg.ttl,
            decoded: Decoded::TcpSegment(TcpSegmentRecord {
                seq: t.seq(),
                ack: t.ack(),
                flags: t.flags(),
                window: t.window(),
                len: seg.payload_len,
                options: t.options(),
            }),
            app_msg_id: None,
            content_hash: None,
            stream_heads: Vec::new(),
            tcp_messages,
        });
        1
    }

    /// A frame of neither UDP nor TCP: a path MTU signal about a TCP segment, or counted as
    /// neither (as truncated when `cut`).
    fn path_mtu(
        &mut self,
        link: LinkType,
        frame: &[u8],
        ts_ns: u64,
        mut each: impl UnitSink,
        cut: bool,
    ) -> usize {
        let s = match path_mtu_signal(link, frame) {
            Some(Ok(s)) => s,
            Some(Err(r)) if !cut => {
                self.stats.path_mtu_rejected.count(r);
                return 0;
            }
            Some(Err(_)) | None => {
                let reason = if cut {
                    NetReject::Truncated
                } else {
                    NetReject::NotUdp
                };
                self.stats.net_rejected.count(reason);
                return 0;
            }
        };
        self.stats.path_mtu += 1;
        each.unit(DecodedPacket {
            ts_ns,
            src: SocketAddr::new(s.router, 0),
            dst: SocketAddr::new(s.to, 0),
            ttl: 0,
            decoded: Decoded::PathMtu(PathMtuRecord {
                mtu: s.mtu,
                segment_src: s.segment_src,
                segment_dst: s.segment_dst,
                seq: s.seq,
            }),
            app_msg_id: None,
            content_hash: None,
            stream_heads: Vec::new(),
            tcp_messages: Vec::new(),
        });
        1
    }

    /// The messages TCP segment `seg`, seen by `capture` (its label), completes in its
    /// direction's byte stream cut by [`DissectConfig::framing`] (none without one).
    ///
    /// Stream offsets count from the SYN when the capture saw it. A capture that began in the
    /// middle of the connection joins at the first data segment it sees, taken to start a
    /// message (counted in [`Dissector::tcp_framing`]): right where the sender writes whole
    /// messages with pauses between them; otherwise the first messages are cut wrong
    /// (length-prefixed: until a hole is given up on; `fixed:N`: throughout).
    #[inline(always)]
    pub fn tcp_messages(&mut self, capture: &str, seg: &TcpSegment<'_>) -> Vec<(u32, u32)> {
        match self.config.framing {
            // Most runs: no call for each segment.
            None => Vec::new(),
            Some(_) => self.tcp_messages_framed(capture, seg),
        }
    }

    /// [`Dissector::tcp_messages`] with a framing.
    #[inline(never)]
    fn tcp_messages_framed(&mut self, capture: &str, seg: &TcpSegment<'_>) -> Vec<(u32, u32)> {
        let t = &seg.tcp;
        if t.flags().ack() && self.tcp_cuts.joined_mid_stream > 0 {
            let reverse = (
                tboxscope_engine::payload_hash(capture.as_bytes()),
                seg.dst,
                seg.src,
            );
            self.tcp_acked(&reverse, t.ack());
        }
        let key = || {
            (
                tboxscope_engine::payload_hash(capture.as_bytes()),
                seg.src,
                seg.dst,
            )
        };
        self.tcp_cut(key, t.seq(), t.flags().syn(), t.payload())
    }

    /// The cumulative ACK `ack` of the stream `key` names, from its receiver: in a stream
    /// joined mid-connection, bytes below it that this capture never saw (sent before it
    /// began) will not come; its next piece cuts on without them.
    fn tcp_acked(&mut self, key: &(u64, SocketAddr, SocketAddr), ack: u32) {
        let Some(cut) = self.tcp_cuts.streams.get_mut(key) else {
            return;
        };
        if let (true, Some((seq0, off0))) = (cut.joined_mid_stream, cut.anchor) {
            let offset =
                i64::try_from(off0).unwrap_or(i64::MAX) + i64::from(ack.wrapping_sub(seq0) as i32);
            if let Ok(offset) = u64::try_from(offset) {
                cut.acked = cut.acked.max(Some(offset));
            }
        }
    }

    /// [`Dissector::tcp_messages`] of a segment of the stream `key` names (made only for a
    /// segment that may complete a message) starting at `seq`.
    fn tcp_cut(
        &mut self,
        key: impl FnOnce() -> (u64, SocketAddr, SocketAddr),
        seq: u32,
        syn: bool,
        payload: &[u8],
    ) -> Vec<(u32, u32)> {
        let Some(framing) = self.config.framing else {
            return Vec::new();
        };
        if !syn && payload.is_empty() {
            return Vec::new();
        }
        let key = key();
        let cuts = &mut self.tcp_cuts;
        if cuts.streams.len() >= MAX_DELIMITED_STREAMS && !cuts.streams.contains_key(&key) {
            cuts.forgotten += cuts.streams.len() as u64;
            cuts.holes_given_up += cuts
                .streams
                .values()
                .map(|c| c.delimiter.holes_given_up)
                .sum::<u64>();
            cuts.streams.clear();
            cuts.held = 0;
        }
        let mut joined = false;
        let cut = cuts.streams.entry(key).or_insert_with(|| TcpCut {
            // Seen from its SYN, the stream starts there: a first data segment lost or
            // reordered leaves a hole like any later one.
            delimiter: if syn {
                Delimiter::from_start(framing)
            } else {
                Delimiter::new(framing)
            }
            .holding(MAX_TCP_AHEAD),
            ..TcpCut::default()
        });
        if syn && cut.anchor.is_none() {
            cut.anchor = Some((seq.wrapping_add(1), 0));
        }
        let data_seq = seq.wrapping_add(u32::from(syn));
        let (seq0, off0) = *cut.anchor.get_or_insert_with(|| {
            joined = true;
            (data_seq, 0)
        });
        cut.joined_mid_stream |= joined;
        let mut out = Vec::new();
        // Unwrapped near the newest offset seen; bytes before the stream's start are skipped.
        let offset =
            i64::try_from(off0).unwrap_or(i64::MAX) + i64::from(data_seq.wrapping_sub(seq0) as i32);
        let skip = usize::try_from(offset.min(0).unsigned_abs()).unwrap_or(usize::MAX);
        if let (Ok(offset), Some(data)) = (u64::try_from(offset.max(0)), payload.get(skip..)) {
            if offset >= off0 {
                cut.anchor = Some((data_seq.wrapping_add(skip as u32), offset));
            }
            let base = data_seq
                .wrapping_add(skip as u32)
                .wrapping_sub(offset as u32);
            let mut emit = |m: Delimited, _: &[u8]| {
                out.push((
                    base.wrapping_add(m.start as u32),
                    base.wrapping_add(m.end as u32),
                ));
            };
            let before = cut.delimiter.held();
            if let Some(acked) = cut.acked.take() {
                cuts.rejoined += u64::from(cut.delimiter.skip_unseen(acked, &mut emit));
            }
            cut.delimiter.push(offset, data, &mut emit);
            cuts.held = (cuts.held + cut.delimiter.held()).saturating_sub(before);
            if cuts.held > MAX_TCP_HELD {
                cuts.held = cuts.held.saturating_sub(cut.delimiter.held());
                cut.delimiter.give_up(&mut emit);
            }
        }
        cuts.joined_mid_stream += u64::from(joined);
        out
    }

    /// Cutting TCP byte streams into messages: what it had to guess or give up.
    pub fn tcp_framing(&self) -> TcpFraming {
        let c = &self.tcp_cuts;
        let live: u64 = c.streams.values().map(|s| s.delimiter.holes_given_up).sum();
        TcpFraming {
            joined_mid_stream: c.joined_mid_stream,
            rejoined: c.rejoined,
            holes_given_up: c.holes_given_up + live,
            forgotten: c.forgotten,
        }
    }
}

/// What cutting TCP byte streams into messages had to guess or give up ([`Dissector::tcp_framing`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpFraming {
    /// Streams whose capture began after their SYN, cut from their first data segment seen.
    pub joined_mid_stream: u64,
    /// Times such a stream cut on past bytes its receiver acknowledged but the capture never
    /// saw (sent before it began), from its next data.
    pub rejoined: u64,
    /// Holes given up on (bytes past them waited beyond the bounds).
    pub holes_given_up: u64,
    /// Streams forgotten to keep the bound.
    pub forgotten: u64,
}

/// One direction of a TCP connection at one capture, cut into messages.
#[derive(Debug, Default)]
struct TcpCut {
    /// A sequence number and its stream offset (the SYN's next, offset 0; or, joined
    /// mid-connection, the first data byte seen), moved to the newest data to unwrap.
    anchor: Option<(u32, u64)>,
    delimiter: Delimiter,
    /// The capture began after the SYN.
    joined_mid_stream: bool,
    /// Joined mid-stream: the stream offset the receiver's cumulative ACK reached since the
    /// last piece (bytes below it not seen by then never will be).
    acked: Option<u64>,
}

/// The TCP byte streams being cut into messages.
#[derive(Debug, Default)]
struct TcpCuts {
    /// By (capture label's hash, sender, receiver).
    streams: tboxscope_engine::FastMap<(u64, SocketAddr, SocketAddr), TcpCut>,
    /// Streams whose capture began after their SYN.
    joined_mid_stream: u64,
    /// Cuts resumed past bytes acknowledged but never seen ([`TcpFraming::rejoined`]).
    rejoined: u64,
    /// Holes given up on by the streams forgotten so far.
    holes_given_up: u64,
    /// Streams forgotten to stay within [`MAX_DELIMITED_STREAMS`].
    forgotten: u64,
    /// Bytes all streams hold past holes now (at most [`MAX_TCP_HELD`]).
    held: usize,
}

/// Bytes one TCP stream's cutting holds past a hole, waiting for the retransmission: a
/// receiver holds out-of-order data up to its receive window, and the burst that clears a
/// handover's backlog (5 s of a control channel's messages) runs hundreds of KiB past the
/// hole its first lost segment leaves.
pub const MAX_TCP_AHEAD: usize = 1 << 20;
/// Bytes all TCP streams' cutting holds past holes at once; beyond, the stream that went over
/// gives up on its hole (counted with the holes given up on).
pub const MAX_TCP_HELD: usize = 4 << 20;

/// The message heads the STREAM frames of a decrypted QUIC packet sent from `port` and seen by
/// `capture` complete ([`StreamStarts`]).
fn stream_heads(
    p: &tboxscope_decode::quic::DecodedPacket<'_>,
    (rule, framing): (Option<AppIdRule>, Option<Framing>),
    capture: &str,
    port: u16,
    starts: &mut StreamStarts,
) -> Vec<StreamHead> {
    let Some(conn) = p.connection else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let capture = tboxscope_engine::payload_hash(capture.as_bytes());
    for frame in p.frames() {
        if let Ok(Frame::Stream {
            stream_id,
            offset,
            data,
            fin,
            ..
        }) = frame
        {
            let key = (capture, conn, stream_id, port);
            match StreamStarts::delimited(framing, stream_id) {
                Some(f) => starts.delimit(key, offset, data, fin, f, rule, &mut out),
                None => out.extend(starts.frame(key, offset, data, fin, rule)),
            }
        }
    }
    out
}

/// Payloads up to this size are single datagrams on a 1500-byte MTU (IPv4 header and UDP).
const MAX_PLAIN_PAYLOAD: usize = 1472;
/// Smallest segment size considered (QUIC's minimum datagram size for Initials).
const MIN_SEGMENT: usize = 1200;
/// Header bytes after the first byte that must repeat at each segment start: a short-header
/// packet's destination connection ID (8 bytes or more for quinn, Chrome and most servers).
const SEGMENT_MATCH: usize = 8;

/// If `payload` is a UDP GSO batch of QUIC short-header packets, the segment size.
///
/// A batch is recognised when every multiple of one size `s` (1200 ≤ `s`) starts like the
/// payload does: a short header (top bit clear) and the same 8 bytes after the first byte (the
/// connection ID); the last segment may be shorter. Anything else (including
/// connection IDs shorter than 8 bytes) is left whole.
pub fn gso_segment_size(payload: &[u8]) -> Option<usize> {
    let first = *payload.first()?;
    // Short header form (top bit clear); the fixed bit may be greased (RFC 9287).
    if payload.len() <= MAX_PLAIN_PAYLOAD || first & 0x80 != 0 {
        return None;
    }
    let key = payload.get(1..1 + SEGMENT_MATCH)?;
    let starts_like_first = |at: usize| {
        payload.get(at).is_some_and(|b| b & 0x80 == 0)
            && payload.get(at + 1..at + 1 + SEGMENT_MATCH) == Some(key)
    };
    let s = (MIN_SEGMENT..payload.len()).find(|&s| starts_like_first(s))?;
    let mut at = s;
    while at < payload.len() {
        if !starts_like_first(at) {
            return None;
        }
        at += s;
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAB: AppIdRule = AppIdRule {
        offset: 8,
        width: 8,
        little_endian: true,
    };

    fn message(id: u64) -> Vec<u8> {
        let mut m = vec![0x6b; 600];
        m[8..16].copy_from_slice(&id.to_le_bytes());
        m
    }

    /// The head `m` names sent whole in one frame (ends its stream).
    fn sent_whole(m: &[u8], rule: Option<AppIdRule>) -> StreamHead {
        let mut whole = StreamStarts::default();
        whole.frame((0, 1, 2, 5000), 0, m, true, rule).unwrap()
    }

    /// A message cut after `cut` bytes in its first frame is named on the frame that completes
    /// its start exactly as its copy sent whole; its start again (retransmitted) names nothing.
    #[test]
    fn a_start_cut_short_is_named_like_a_whole_one() {
        let m = message(42);
        let named = sent_whole(&m, Some(LAB));
        assert_eq!(named.app_msg_id, Some(42));
        assert!(named.content_hash.is_some());
        for cut in [1usize, 10, 12, 63, 64, 100] {
            let mut starts = StreamStarts::default();
            let key = (0, 7, 2, 6000);
            let first = starts.frame(key, 0, &m[..cut], false, Some(LAB));
            let rest = starts.frame(key, cut as u64, &m[cut..], true, Some(LAB));
            let head = first.or(rest).unwrap();
            assert_eq!(
                (head.app_msg_id, head.content_hash),
                (named.app_msg_id, named.content_hash),
                "cut at {cut}"
            );
            let expect_offset = if cut >= tboxscope_engine::CONTENT_PREFIX {
                0
            } else {
                cut as u64
            };
            assert_eq!(head.offset, expect_offset, "cut at {cut}");
            assert_eq!(
                starts.frame(key, 0, &m, true, Some(LAB)),
                None,
                "cut at {cut}"
            );
        }
    }

    fn tcp_dissector(framing: &str) -> Dissector {
        Dissector::new(DissectConfig {
            framing: framing.parse().ok(),
            ..DissectConfig::default()
        })
    }

    /// A TCP stream cut by its framing: offsets from the SYN (fixed-size messages at their
    /// multiples across the sequence number's wrap), a segment past a hole completing nothing
    /// until the hole is filled, a resend completing nothing again.
    #[test]
    fn tcp_streams_are_cut_from_the_syn_across_holes_and_the_wrap() {
        let key = (
            1,
            "10.0.0.2:4000".parse().unwrap(),
            "10.0.0.1:80".parse().unwrap(),
        );
        let mut d = tcp_dissector("fixed:100");
        let isn = u32::MAX - 120;
        assert!(d.tcp_cut(|| key, isn, true, &[]).is_empty());
        let s0 = isn.wrapping_add(1);
        // 150 bytes, a hole of 100, then 100 past it: one message, then none until the hole
        // is filled (then two; the next waits for its last 50 bytes).
        assert_eq!(
            d.tcp_cut(|| key, s0, false, &[0; 150]),
            [(s0, s0.wrapping_add(100))]
        );
        assert!(d
            .tcp_cut(|| key, s0.wrapping_add(250), false, &[0; 100])
            .is_empty());
        assert_eq!(
            d.tcp_cut(|| key, s0.wrapping_add(150), false, &[0; 100]),
            [
                (s0.wrapping_add(100), s0.wrapping_add(200)),
                (s0.wrapping_add(200), s0.wrapping_add(300)),
            ]
        );
        assert!(d.tcp_cut(|| key, s0, false, &[0; 150]).is_empty());
        assert_eq!(d.tcp_framing(), TcpFraming::default());
    }

    /// The burst that clears a handover's backlog: 300 KiB past the hole its first lost
    /// segment leaves, all cut when the resend fills it (the receiver's capture then times
    /// each message one way). Streams together hold at most [`MAX_TCP_HELD`] past their holes:
    /// the one that goes over gives up on its hole (counted) and cuts on from its held pieces.
    #[test]
    fn a_tcp_stream_holds_a_long_burst_past_a_hole_within_the_shared_bound() {
        let key = |port: u16| {
            (
                1,
                std::net::SocketAddr::from(([10, 0, 0, 2], port)),
                "10.0.0.1:80".parse().unwrap(),
            )
        };
        let mut d = tcp_dissector("fixed:600");
        let isn = 1_000u32;
        let s0 = isn + 1;
        let mss = 1448u32;
        let burst = 300u32 << 10;
        let mut got = d.tcp_cut(|| key(4000), isn, true, &[]);
        let mut seq = mss;
        while seq < burst {
            got.extend(d.tcp_cut(|| key(4000), s0 + seq, false, &[0; 1448]));
            seq += mss;
        }
        assert!(got.is_empty(), "{got:?}");
        let got = d.tcp_cut(|| key(4000), s0, false, &[0; 1448]);
        assert_eq!(got.len(), (seq / 600) as usize);
        assert_eq!(got[0], (s0, s0 + 600));
        assert_eq!(d.tcp_framing(), TcpFraming::default());

        // Five streams each 1 MiB past a hole (more than all may hold): each one that goes
        // over the shared bound gives up, and what is held stays within it.
        let mut d = tcp_dissector("fixed:600");
        for port in 5000..5005u16 {
            let _ = d.tcp_cut(|| key(port), isn, true, &[]);
            let mut seq = mss;
            while seq < 1 << 20 {
                let _ = d.tcp_cut(|| key(port), s0 + seq, false, &[0; 1448]);
                seq += mss;
            }
            assert!(d.tcp_cuts.held <= MAX_TCP_HELD);
        }
        let holes = d.tcp_framing().holes_given_up;
        assert!(holes >= 1, "{holes}");
        let held: usize = d
            .tcp_cuts
            .streams
            .values()
            .map(|c| c.delimiter.held())
            .sum();
        assert_eq!(held, d.tcp_cuts.held);
    }

    /// Joined mid-connection (no SYN): the first data segment starts a message; length
    /// prefixes are read from there on; the join is counted.
    #[test]
    fn a_tcp_stream_joined_mid_connection_starts_at_its_first_data_segment() {
        let key = (
            1,
            "10.0.0.2:4000".parse().unwrap(),
            "10.0.0.1:80".parse().unwrap(),
        );
        let mut d = tcp_dissector("len:u16be@0");
        let mut stream = Vec::new();
        for n in [3u16, 5, 1] {
            stream.extend_from_slice(&n.to_be_bytes());
            stream.extend(std::iter::repeat_n(7u8, usize::from(n)));
        }
        let s = 7_000u32;
        // An earlier byte resent after the join is before the stream's start: skipped.
        assert_eq!(d.tcp_cut(|| key, s, false, &stream[..7]), [(s, s + 5)]);
        assert!(d.tcp_cut(|| key, s - 10, false, &[0; 10]).is_empty());
        assert_eq!(
            d.tcp_cut(|| key, s + 7, false, &stream[7..]),
            [(s + 5, s + 12), (s + 12, s + 15)]
        );
        assert_eq!(
            d.tcp_framing(),
            TcpFraming {
                joined_mid_stream: 1,
                ..TcpFraming::default()
            }
        );
        // No framing: no messages.
        let mut plain = Dissector::new(DissectConfig::default());
        assert!(plain.tcp_cut(|| key, s, false, &stream).is_empty());
    }

    /// Joined mid-connection at a resend of old bytes (a whole message): the next new data
    /// starts past bytes sent before the capture began, which never come. Once the receiver's
    /// ACK passes them the stream cuts on from its next piece (counted), instead of holding
    /// everything behind a hole that will not fill.
    #[test]
    fn a_tcp_stream_joined_at_a_resend_cuts_on_past_the_bytes_acknowledged_unseen() {
        let key = (
            1,
            "10.0.0.2:4000".parse().unwrap(),
            "10.0.0.1:80".parse().unwrap(),
        );
        let message = |n: u16| {
            let mut m = n.to_be_bytes().to_vec();
            m.extend(std::iter::repeat_n(7u8, usize::from(n)));
            m
        };
        let s = 7_000u32;
        let run = |acked: bool| {
            let mut d = tcp_dissector("len:u16be@0");
            let mut got = d.tcp_cut(|| key, s, false, &message(132));
            if acked {
                d.tcp_acked(&key, s + 305);
            }
            let mut burst = message(10);
            burst.extend(message(20));
            got.extend(d.tcp_cut(|| key, s + 305, false, &burst));
            (got, d.tcp_framing().rejoined)
        };
        assert_eq!(
            run(true),
            (
                vec![(s, s + 134), (s + 305, s + 317), (s + 317, s + 339)],
                1
            )
        );
        assert_eq!(run(false), (vec![(s, s + 134)], 0));
    }

    /// A piece past a hole waits for the hole; a short message ends at its FIN; without an id
    /// rule the content alone names it.
    #[test]
    fn holes_wait_and_short_messages_end_at_fin() {
        let m = message(7);
        let mut starts = StreamStarts::default();
        let key = (0, 1, 6, 5000);
        assert_eq!(starts.frame(key, 20, &m[20..40], false, None), None);
        assert_eq!(starts.frame(key, 0, &m[..20], false, None), None);
        let head = starts.frame(key, 20, &m[20..], true, None).unwrap();
        let named = sent_whole(&m, None);
        assert_eq!(head.content_hash, named.content_hash);
        assert_eq!(head.app_msg_id, None);
        let short = b"ping";
        let mut starts = StreamStarts::default();
        assert_eq!(starts.frame(key, 0, &short[..2], false, None), None);
        let head = starts.frame(key, 2, &short[2..], true, None).unwrap();
        assert_eq!(
            head.content_hash,
            Some(tboxscope_engine::content_hash(short))
        );
    }

    /// One message per stream (a QUIC peer's unidirectional streams), cut by a stated
    /// framing, many more streams than are cut at once: each stream cut to its end makes room,
    /// so a message in two frames far apart still completes after thousands of streams (the
    /// bound once dropped its first half, and with it the message); a copy of a finished
    /// stream's bytes completes nothing again.
    #[test]
    fn streams_cut_to_their_end_leave_the_bound_to_open_ones() {
        let mut starts = StreamStarts::default();
        let framing = Framing::Fixed(600);
        let key = |id: u64| (0, 1, 4 * id + 2, 5000);
        let mut heads = Vec::new();
        // Message 0 sends its first 453 bytes, then thousands of whole messages go by.
        let held = message(0);
        starts.delimit(
            key(0),
            0,
            &held[..453],
            false,
            framing,
            Some(LAB),
            &mut heads,
        );
        let many = 3 * MAX_DELIMITED_STREAMS as u64;
        for id in 1..=many {
            let m = message(id);
            starts.delimit(key(id), 0, &m, true, framing, Some(LAB), &mut heads);
        }
        starts.delimit(
            key(0),
            453,
            &held[453..],
            true,
            framing,
            Some(LAB),
            &mut heads,
        );
        let mut ids: Vec<u64> = heads.iter().filter_map(|h| h.app_msg_id).collect();
        ids.sort_unstable();
        assert_eq!(ids, (0..=many).collect::<Vec<_>>());
        assert_eq!(starts.forgotten, 0);
        assert_eq!(starts.delimiters.len(), 0);
        // A retransmission of a finished stream's bytes.
        let m = message(5);
        let before = heads.len();
        starts.delimit(key(5), 0, &m, true, framing, Some(LAB), &mut heads);
        assert_eq!(heads.len(), before);
    }

    /// A stream's first piece lost and resent after the next one: held past the hole, the
    /// start is named when it arrives, as the whole message is; a short message whose FIN
    /// came first ends there too.
    #[test]
    fn a_start_whose_first_piece_comes_last_is_named() {
        let m = message(9);
        let named = sent_whole(&m, Some(LAB));
        let mut starts = StreamStarts::default();
        let key = (0, 1, 6, 5000);
        assert_eq!(starts.frame(key, 30, &m[30..], true, Some(LAB)), None);
        let head = starts.frame(key, 0, &m[..30], false, Some(LAB)).unwrap();
        assert_eq!(
            (head.app_msg_id, head.content_hash),
            (named.app_msg_id, named.content_hash)
        );
        let short = b"ping";
        let mut starts = StreamStarts::default();
        assert_eq!(starts.frame(key, 2, &short[2..], true, None), None);
        let head = starts.frame(key, 0, &short[..2], false, None).unwrap();
        assert_eq!(
            head.content_hash,
            Some(tboxscope_engine::content_hash(short))
        );
    }

    /// Cut by a stated framing, a stream opened after one seen from its first byte begins at
    /// offset 0: its first piece lost and resent after the next, the message is still cut
    /// whole. The first stream seen mid-way may have been open before the capture: joined
    /// where it is first seen (the message it was in is not cut).
    #[test]
    fn a_stream_opened_in_the_capture_is_cut_from_its_first_byte() {
        let framing = Framing::Fixed(600);
        let key = |id: u64| (0, 1, 4 * id + 2, 5000);
        let mut starts = StreamStarts::default();
        let mut heads = Vec::new();
        let (m1, m2, m3) = (message(1), message(2), message(3));
        starts.delimit(
            key(1),
            100,
            &m1[100..],
            true,
            framing,
            Some(LAB),
            &mut heads,
        );
        starts.delimit(key(1), 0, &m1[..100], false, framing, Some(LAB), &mut heads);
        assert!(heads.is_empty(), "{heads:?}");
        starts.delimit(key(2), 0, &m2, true, framing, Some(LAB), &mut heads);
        starts.delimit(
            key(3),
            453,
            &m3[453..],
            true,
            framing,
            Some(LAB),
            &mut heads,
        );
        starts.delimit(key(3), 0, &m3[..453], false, framing, Some(LAB), &mut heads);
        let ids: Vec<u64> = heads.iter().filter_map(|h| h.app_msg_id).collect();
        assert_eq!(ids, [2, 3]);
    }
}
