//! What the engine is fed: observations, each stamped with its own time (`ts_ns`, Unix epoch
//! nanoseconds) and the path it was seen on. Plain structs so a decoder glue can fill them.
//!
//! A capture point describes where packets were seen (which host, which path). Packet
//! observations name their capture point by a small number (`capture`); without any capture
//! description every capture id is a separate capture whose path is the observation's `path`.
//!
//! Paths and QUIC connections are named by small numbers too ([`PathId`], [`ConnId`]): a path's
//! label is declared once ([`Observation::PathName`]) and used only in outputs.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
pub use tboxscope_decode::tcp::{TcpFlags, TcpOptions};

/// Identifies one capture (an interface or a file) within a run.
pub type CaptureId = u16;

/// Names the path of a packet observation; its label is declared with
/// [`Observation::PathName`] (an id never named is called `path#N`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PathId(pub u16);

/// Names one QUIC connection, equal on all paths of the connection (e.g. the decoder's
/// connection number); shown as `quic#N`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ConnId(pub u64);

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "quic#{}", self.0)
    }
}

/// One input to the engine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Observation {
    /// Describes a capture point; send it before that capture's packets.
    Capture(CapturePoint),
    /// Gives a path id its label; send it before the packets that carry the id (a declaration,
    /// not counted as an observation).
    PathName(PathName),
    /// A UDP datagram (any protocol) seen on a path; matched by payload hash.
    Datagram(Datagram),
    /// One KCP segment (a datagram may carry several).
    Kcp(KcpSegment),
    /// One decrypted QUIC packet with its STREAM and ACK frames (boxed: its frames are held
    /// inline, and the other observations stay small).
    Quic(Box<QuicPacket>),
    /// A TCP segment seen in a capture.
    TcpSegment(TcpSegment),
    /// A router's ICMP "fragmentation needed" / "packet too big" about a TCP segment.
    PathMtu(PathMtuSignal),
    /// A TCP event reported by the kernel (eBPF).
    Tcp(TcpEvent),
    /// Bytes on the wire that carry no message (FEC parity, padding, undecodable packets).
    Overhead(Overhead),
}

impl Observation {
    /// The observation's own timestamp (Unix epoch nanoseconds).
    pub fn ts_ns(&self) -> u64 {
        match self {
            Observation::Capture(c) => c.ts_ns,
            Observation::PathName(n) => n.ts_ns,
            Observation::Datagram(d) => d.meta.ts_ns,
            Observation::Kcp(k) => k.meta.ts_ns,
            Observation::Quic(q) => q.meta.ts_ns,
            Observation::TcpSegment(t) => t.meta.ts_ns,
            Observation::PathMtu(m) => m.meta.ts_ns,
            Observation::Tcp(t) => t.ts_ns,
            Observation::Overhead(o) => o.meta.ts_ns,
        }
    }
}

/// Which host a capture was taken on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Host {
    /// The T-Box (the end that duplicates messages onto several paths).
    Tbox,
    /// The cloud gateway.
    Gateway,
    /// Not stated; the engine infers it where it can.
    #[default]
    Unknown,
}

/// Where a capture was taken: which host and which path.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CapturePoint {
    /// When the capture started (or when this description was made); 0 when unknown (the
    /// declaration then does not start the engine's clock: its first packet does).
    pub ts_ns: u64,
    /// Id used by packet observations of this capture.
    pub capture: CaptureId,
    /// Human name, e.g. a file name or `eth0`.
    pub name: String,
    /// Path label, e.g. `eth0` (4G) or `eth1` (5G); captures at the two ends of one path may use
    /// different labels (the engine pairs them and keeps the first label).
    pub path: String,
    /// Host the capture was taken on.
    pub host: Host,
    /// Addresses local to that host on this capture, when known (decide who sent a packet).
    pub local_addrs: Vec<IpAddr>,
    /// Offset to add to this capture's timestamps to bring them onto the reference clock; when
    /// `None` the engine estimates it from traffic seen at both ends.
    pub clock_offset_ns: Option<i64>,
    /// Forces this capture to be paired with another capture (same path, other end).
    pub pair_with: Option<CaptureId>,
}

/// The label of a path id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathName {
    /// When the name was given (the first packet's time, or the capture's start).
    pub ts_ns: u64,
    /// The id packet observations carry.
    pub id: PathId,
    /// Path label, e.g. `eth0` (4G) or `eth1` (5G), as in [`CapturePoint::path`].
    pub label: String,
}

/// Fields every packet observation carries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PacketMeta {
    /// Capture timestamp, Unix epoch nanoseconds, as the capture clock gave it.
    pub ts_ns: u64,
    /// The path (its label, such as the interface name `eth0`, declared with
    /// [`Observation::PathName`]).
    pub path: PathId,
    /// Capture point id (0 when there is only one capture per path).
    pub capture: CaptureId,
    /// Source address and port.
    pub src: SocketAddr,
    /// Destination address and port.
    pub dst: SocketAddr,
    /// Bytes on the wire attributed to this observation (IP header included). When one datagram
    /// carries several segments, attribute the datagram to its first segment and 0 to the rest.
    pub wire_len: u32,
    /// The IP packet's TTL (IPv6: hop limit) as captured, 0 when not known: a sender's
    /// initial value (64, 128, 255) at its own host, less by each router passed.
    #[serde(default, skip_serializing_if = "crate::units::is_zero")]
    pub ttl: u8,
}

impl Default for PacketMeta {
    fn default() -> Self {
        let unspecified = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);
        Self {
            ts_ns: 0,
            path: PathId::default(),
            capture: 0,
            src: unspecified,
            dst: unspecified,
            wire_len: 0,
            ttl: 0,
        }
    }
}

/// A UDP datagram whose payload identifies it (dual-send of identical datagrams).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Datagram {
    /// Common packet fields.
    pub meta: PacketMeta,
    /// Hash of the UDP payload ([`payload_hash`]).
    pub payload_hash: u64,
    /// UDP payload length.
    pub payload_len: u32,
    /// Application message id read at the configured offset ([`AppIdRule::extract`]), if any.
    pub app_msg_id: Option<u64>,
}

/// The command of a KCP segment (the decoder's own type).
pub use tboxscope_decode::kcp::Cmd as KcpCmd;
/// The header fields of a KCP segment: conv, command, sn (for an ACK: the acknowledged sn),
/// una, frg (a message of n segments has frg n-1 … 0), window, data length and the sender's
/// ms timestamp, echoed by ACKs (the decoder's owned summary).
pub use tboxscope_decode::kcp::KcpSegment as KcpHeader;

/// One KCP segment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KcpSegment {
    /// Common packet fields.
    pub meta: PacketMeta,
    /// The segment's header fields, as decoded.
    pub header: KcpHeader,
    /// Application message id in the data (with [`crate::Config::app_id`]): copies sent on
    /// separate KCP sessions (one per path) are matched by it.
    #[serde(default)]
    pub app_msg_id: Option<u64>,
    /// [`content_hash`] of the data (data segments): copies sent on separate KCP sessions
    /// (one per path) are matched by it when no application id is configured.
    #[serde(default)]
    pub content_hash: Option<u64>,
}

/// A byte range of one QUIC stream carried in a packet.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamRange {
    /// Stream id.
    pub stream_id: u64,
    /// Offset of the first byte.
    pub offset: u64,
    /// Number of bytes.
    pub len: u64,
    /// FIN bit.
    pub fin: bool,
    /// [`content_hash`] of the message's first bytes, given for a frame that starts its
    /// message (at the stream's offset 0), for matching separate connections by content.
    pub data_hash: Option<u64>,
    /// Application message id read at the configured offset, if any.
    pub app_msg_id: Option<u64>,
    /// The stream range `[start, end)` of the message this frame (or piece of a frame)
    /// completes, when the capture cut the stream into messages ([`crate::Framing`]); then
    /// `data_hash` and `app_msg_id` name that message.
    #[serde(default)]
    pub framed: Option<(u64, u64)>,
}

/// An ACK (or multipath PATH_ACK) frame.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuicAck {
    /// Path whose packet numbers are acknowledged (0 without multipath).
    pub path_id: u64,
    /// Acknowledged packet numbers as inclusive ranges `(smallest, largest)`.
    pub ranges: AckRanges,
    /// ack_delay decoded to microseconds (exponent applied).
    pub ack_delay_us: u64,
}

/// One decrypted QUIC packet.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuicPacket {
    /// Common packet fields.
    pub meta: PacketMeta,
    /// The connection, equal on all paths of one connection.
    pub conn: ConnId,
    /// Multipath path id (0 without multipath).
    pub path_id: u64,
    /// Packet number.
    pub pn: u64,
    /// STREAM frames.
    pub streams: QuicStreams,
    /// ACK / PATH_ACK frames.
    pub acks: QuicAcks,
    /// It carries only ACK, PADDING or CONNECTION_CLOSE frames: it asks for no answer (not
    /// ack-eliciting, RFC 9002).
    #[serde(default)]
    pub ack_only: bool,
}

impl From<QuicPacket> for Observation {
    fn from(q: QuicPacket) -> Self {
        Observation::Quic(Box::new(q))
    }
}

/// The STREAM frames of a QUIC packet (up to two held without an allocation).
pub type QuicStreams = SmallVec<[StreamRange; 2]>;

/// The ACK frames of a QUIC packet (one held without an allocation).
pub type QuicAcks = SmallVec<[QuicAck; 1]>;

/// The acknowledged ranges of an ACK frame (up to two held without an allocation).
pub type AckRanges = SmallVec<[(u64, u64); 2]>;

/// A TCP segment seen in a capture.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpSegment {
    /// Common packet fields.
    pub meta: PacketMeta,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number (valid when `flags.ack()`).
    pub ack: u32,
    /// Control bits (SYN, ACK, FIN, RST, ...).
    pub flags: TcpFlags,
    /// The window field as sent (unscaled).
    pub window: u16,
    /// Payload length.
    pub len: u32,
    /// Options: MSS, window scale, SACK permitted and blocks, timestamps.
    pub options: TcpOptions,
    /// The messages this segment completes at its capture, each as (first sequence number,
    /// sequence number past its end), when the capture cuts the byte stream into messages
    /// (`--framing`).
    #[serde(default, skip_serializing_if = "SmallVec::is_empty")]
    pub messages: SmallVec<[(u32, u32); 1]>,
}

/// A router's word that a TCP segment was too big for the path (ICMP "fragmentation needed"
/// or "packet too big", quoting the segment): its sender sends those bytes again in smaller
/// segments.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathMtuSignal {
    /// The ICMP packet (from the router to the segment's sender; ports 0).
    pub meta: PacketMeta,
    /// The largest packet the path carries, bytes (0: the router did not say).
    pub mtu: u32,
    /// The quoted segment's sender.
    pub segment_src: SocketAddr,
    /// The quoted segment's receiver.
    pub segment_dst: SocketAddr,
    /// The quoted segment's sequence number.
    pub seq: u32,
}

/// Why the kernel retransmitted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetransmitKind {
    /// Fast retransmit / recovery (duplicate ACKs, SACK).
    Fast,
    /// Retransmission timeout.
    Rto,
    /// Tail loss probe.
    Tlp,
    /// The rest of the queue resent in the Loss state an RTO started (go-back-N).
    LossRecovery,
    /// Not known.
    #[default]
    Unknown,
}

/// TCP congestion state (Linux `tcp_ca_state`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CongState {
    /// Normal.
    #[default]
    Open,
    /// Duplicate ACKs / SACK seen.
    Disorder,
    /// ECN or local congestion signal.
    Cwr,
    /// Fast recovery.
    Recovery,
    /// RTO loss recovery.
    Loss,
}

/// What happened to a TCP socket.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum TcpEventKind {
    /// A segment was retransmitted.
    Retransmit {
        /// Why.
        kind: RetransmitKind,
        /// Sequence number of the retransmitted segment.
        seq: u32,
        /// Its length in bytes (0 when unknown).
        len: u32,
    },
    /// The retransmission timer fired.
    RtoExpired,
    /// Congestion state changed.
    CongState {
        /// New state.
        state: CongState,
    },
    /// Connection state changed (Linux TCP states by name, e.g. `ESTABLISHED`).
    StateChange {
        /// Old state.
        old: String,
        /// New state.
        new: String,
    },
    /// The backoff was reset: data got through after an RTO. Its figures are not read: the
    /// socket keeps its latest ones, with backoff 0.
    BackoffEnd,
    /// Periodic sample of the socket (tcp_probe).
    Sample,
}

/// A TCP congestion-control algorithm by its kernel name (`cubic`, `bbr`, `reno`, …): what
/// `ss -i` shows and `TCP_CONGESTION` sets. At most 15 bytes (the kernel's `TCP_CA_NAME_MAX`
/// less its NUL), so it is kept inline.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CongestionControl {
    /// The name, NUL-padded.
    name: [u8; 16],
}

impl CongestionControl {
    /// From the kernel's `tcp_congestion_ops.name` (NUL-terminated) or a user's text: `None`
    /// unless 1..=15 bytes of lowercase letters, digits, `_` or `-`.
    pub fn new(bytes: &[u8]) -> Option<Self> {
        let len = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        let text = &bytes[..len];
        let valid = (1..16).contains(&len)
            && text
                .iter()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_' || *b == b'-');
        valid.then(|| {
            let mut name = [0; 16];
            name[..len].copy_from_slice(text);
            Self { name }
        })
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        let len = self.name.iter().position(|&b| b == 0).unwrap_or(16);
        // Only ASCII is ever stored (checked in `new`).
        std::str::from_utf8(&self.name[..len]).unwrap_or("?")
    }
}

impl fmt::Display for CongestionControl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for CongestionControl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl std::str::FromStr for CongestionControl {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::new(s.as_bytes()).ok_or_else(|| {
            format!("{s:?} is no congestion-control name (1-15 lowercase letters, digits, _ or -)")
        })
    }
}

impl Serialize for CongestionControl {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for CongestionControl {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The kernel's figures of a TCP socket at one moment: what a kernel event carries, what the
/// engine keeps per socket and what the snapshot shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpFigures {
    /// The socket's congestion-control algorithm, when the probe could read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion_control: Option<CongestionControl>,
    /// Congestion window (segments).
    pub cwnd: u32,
    /// Slow-start threshold (segments).
    pub ssthresh: u32,
    /// Smoothed RTT (µs).
    pub srtt_us: u32,
    /// Current retransmission timeout (µs).
    pub rto_us: u32,
    /// RTO backoff level (`icsk_backoff`).
    pub backoff: u8,
    /// Retransmissions so far (`total_retrans`).
    pub retransmits: u32,
}

/// A TCP event from the kernel with the socket's state at that moment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpEvent {
    /// Event time, Unix epoch ns.
    pub ts_ns: u64,
    /// Path the socket's traffic goes over (by its local address / interface).
    pub path: String,
    /// Local address and port.
    pub local: SocketAddr,
    /// Remote address and port.
    pub remote: SocketAddr,
    /// What happened.
    pub kind: TcpEventKind,
    /// The socket's figures when it happened.
    #[serde(flatten)]
    pub figures: TcpFigures,
}

/// What an overhead packet is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OverheadKind {
    /// Forward-error-correction parity shard (kcp-go).
    FecParity,
    /// Anything else (undecodable, padding, keep-alive).
    #[default]
    Other,
}

/// Bytes that carry no message but count for amplification.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overhead {
    /// Common packet fields.
    pub meta: PacketMeta,
    /// What it is.
    pub kind: OverheadKind,
}

/// Where an application message id sits in a payload (unsigned integer, big-endian unless
/// `little_endian`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppIdRule {
    /// Byte offset in the payload.
    pub offset: usize,
    /// Width in bytes, 1..=8.
    pub width: usize,
    /// The id is stored least significant byte first.
    #[serde(default)]
    pub little_endian: bool,
}

impl AppIdRule {
    /// Reads the id from `payload`; `None` if the payload is too short or the width invalid.
    pub fn extract(&self, payload: &[u8]) -> Option<u64> {
        if self.width == 0 || self.width > 8 {
            return None;
        }
        let end = self.offset.checked_add(self.width)?;
        let bytes = payload.get(self.offset..end)?;
        let fold = |acc: u64, b: &u8| (acc << 8) | u64::from(*b);
        Some(if self.little_endian {
            bytes.iter().rev().fold(0, fold)
        } else {
            bytes.iter().fold(0, fold)
        })
    }
}

/// Bytes of a message's start that [`content_hash`] covers: enough to tell messages apart
/// (copies with the same start are told apart by their order), bounded so that hashing costs
/// the same for any message size.
pub const CONTENT_PREFIX: usize = 64;

/// The hash the engine expects in [`StreamRange::data_hash`] and
/// [`KcpSegment::content_hash`]: of the first [`CONTENT_PREFIX`] bytes of a message's data
/// (foldhash with a fixed seed, stable across runs and processes).
pub fn content_hash(data: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    let prefix = data.get(..CONTENT_PREFIX).unwrap_or(data);
    foldhash::fast::FixedState::with_seed(0x7462_6f78_6d73_6721).hash_one(prefix)
}

/// The payload hash the engine expects in [`Datagram::payload_hash`]: 64-bit FNV-1a. Any
/// stable 64-bit hash works if used consistently.
pub fn payload_hash(payload: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in payload {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    #[test]
    fn congestion_control_names() {
        let cc: CongestionControl = "bbr".parse().unwrap();
        assert_eq!(cc.as_str(), "bbr");
        assert_eq!(serde_json::to_string(&cc).unwrap(), "\"bbr\"");
        let back: CongestionControl = serde_json::from_str("\"bbr\"").unwrap();
        assert_eq!(back, cc);
        assert_eq!(
            CongestionControl::new(b"cubic\0\0\0\0\0\0\0\0\0\0\0").map(|c| c.to_string()),
            Some("cubic".into())
        );
        for bad in [
            &b""[..],
            b"\0cubic",
            b"Cubic",
            b"a b",
            b"0123456789abcdef",
            &[0xff; 16],
        ] {
            assert_eq!(CongestionControl::new(bad), None, "{bad:?}");
        }
        assert!(serde_json::from_str::<CongestionControl>("\"no such\"").is_err());
    }

    use super::*;

    #[test]
    fn app_id_reads_big_endian_and_refuses_short_payloads() {
        let rule = AppIdRule {
            offset: 2,
            width: 4,
            little_endian: false,
        };
        assert_eq!(rule.extract(&[9, 9, 0, 0, 1, 2, 7]), Some(0x0102));
        assert_eq!(rule.extract(&[9, 9, 0, 0, 1]), None);
        let le = AppIdRule {
            little_endian: true,
            ..rule
        };
        assert_eq!(le.extract(&[9, 9, 2, 1, 0, 0, 7]), Some(0x0102));
        let bad = AppIdRule {
            offset: usize::MAX,
            width: 4,
            little_endian: false,
        };
        assert_eq!(bad.extract(&[0; 16]), None);
    }

    #[test]
    fn payload_hash_is_fnv1a() {
        assert_eq!(payload_hash(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(payload_hash(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
