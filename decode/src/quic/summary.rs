//! Owned, serialisable per-packet summaries and the decoder's counters.

use super::frame::{EcnCounts, Frame, FrameError, Frames};
use super::header::PacketType;
use serde::Serialize;
use std::collections::BTreeMap;

/// Lower-case hex of `b`.
pub fn hex(b: &[u8]) -> String {
    // A table, not `write!`: this runs for every packet's connection IDs.
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        s.push(char::from(DIGITS[usize::from(x >> 4)]));
        s.push(char::from(DIGITS[usize::from(x & 0x0f)]));
    }
    s
}

/// One frame in a packet summary; fields that do not apply are omitted from JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FrameSummary {
    /// Frame name (`stream`, `ack`, `crypto`, `path_ack`, …).
    #[serde(rename = "type")]
    pub frame_type: &'static str,
    /// Stream ID (STREAM, RESET_STREAM, STOP_SENDING, MAX_STREAM_DATA, STREAM_DATA_BLOCKED).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_id: Option<u64>,
    /// Offset (STREAM, CRYPTO).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// Data length (STREAM, CRYPTO, DATAGRAM, PADDING run; reliable size of RESET_STREAM_AT).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub length: Option<u64>,
    /// FIN bit (STREAM).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fin: Option<bool>,
    /// Acknowledged ranges, highest first, inclusive `[smallest, largest]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ack_ranges: Option<Vec<[u64; 2]>>,
    /// ACK Delay field (unscaled).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ack_delay: Option<u64>,
    /// ECN counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ecn: Option<EcnCounts>,
    /// Path ID (multipath frames).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path_id: Option<u64>,
    /// Sequence number (NEW/RETIRE_CONNECTION_ID, PATH_STATUS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// Connection ID (NEW_CONNECTION_ID), hex.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cid: Option<String>,
    /// Error code (RESET_STREAM, STOP_SENDING, CONNECTION_CLOSE, PATH_ABANDON).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_code: Option<u64>,
    /// Limit value (MAX_*, *_BLOCKED, final size of RESET_STREAM(_AT), TIME_STAMP's timestamp).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<u64>,
    /// Reason phrase (CONNECTION_CLOSE), lossy UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Bidirectional streams (MAX_STREAMS, STREAMS_BLOCKED) rather than unidirectional.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bidi: Option<bool>,
    /// Retire Prior To (NEW_CONNECTION_ID, PATH_NEW_CONNECTION_ID).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retire_prior_to: Option<u64>,
    /// An application close (CONNECTION_CLOSE 0x1d) rather than a transport one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub application: Option<bool>,
    /// The path is available rather than a backup (PATH_STATUS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available: Option<bool>,
}

impl FrameSummary {
    /// Whether this frame asks the peer for an acknowledgment (RFC 9002: every frame but
    /// ACK — of any multipath draft — PADDING and CONNECTION_CLOSE).
    pub fn ack_eliciting(&self) -> bool {
        !matches!(
            self.frame_type,
            "ack" | "path_ack" | "path_ack_old" | "ack_mp" | "padding" | "connection_close"
        )
    }

    /// The owned summary of a frame.
    pub fn from_frame(f: &Frame<'_>) -> Self {
        let mut s = Self {
            frame_type: f.name(),
            ..Self::default()
        };
        match f {
            Frame::Padding { len } => s.length = Some(*len as u64),
            Frame::Ping | Frame::HandshakeDone | Frame::ImmediateAck => {}
            Frame::Ack(a) => {
                s.path_id = a.path_id;
                s.ack_delay = Some(a.delay);
                s.ack_ranges = Some(a.ranges().map(|(l, h)| [l, h]).collect());
                s.ecn = a.ecn;
            }
            Frame::ResetStream {
                stream_id,
                error_code,
                final_size,
            } => {
                s.stream_id = Some(*stream_id);
                s.error_code = Some(*error_code);
                s.value = Some(*final_size);
            }
            Frame::StopSending {
                stream_id,
                error_code,
            } => {
                s.stream_id = Some(*stream_id);
                s.error_code = Some(*error_code);
            }
            Frame::Crypto { offset, data } => {
                s.offset = Some(*offset);
                s.length = Some(data.len() as u64);
            }
            Frame::NewToken { token } => s.length = Some(token.len() as u64),
            Frame::Stream {
                stream_id,
                offset,
                fin,
                data,
                ..
            } => {
                s.stream_id = Some(*stream_id);
                s.offset = Some(*offset);
                s.length = Some(data.len() as u64);
                s.fin = Some(*fin);
            }
            Frame::MaxData(v)
            | Frame::DataBlocked(v)
            | Frame::MaxPathId(v)
            | Frame::PathsBlocked(v) => s.value = Some(*v),
            Frame::MaxStreamData { stream_id, max } => {
                s.stream_id = Some(*stream_id);
                s.value = Some(*max);
            }
            Frame::MaxStreams { bidi, max } => {
                s.bidi = Some(*bidi);
                s.value = Some(*max);
            }
            Frame::StreamDataBlocked { stream_id, limit } => {
                s.stream_id = Some(*stream_id);
                s.value = Some(*limit);
            }
            Frame::StreamsBlocked { bidi, limit } => {
                s.bidi = Some(*bidi);
                s.value = Some(*limit);
            }
            Frame::NewConnectionId {
                path_id,
                seq,
                retire_prior_to,
                cid,
                ..
            } => {
                s.path_id = *path_id;
                s.seq = Some(*seq);
                s.retire_prior_to = Some(*retire_prior_to);
                s.cid = Some(hex(cid));
            }
            Frame::RetireConnectionId { path_id, seq } => {
                s.path_id = *path_id;
                s.seq = Some(*seq);
            }
            Frame::PathChallenge(d) | Frame::PathResponse(d) => s.cid = Some(hex(d)),
            Frame::ConnectionClose {
                application,
                error_code,
                reason,
                frame_type,
            } => {
                s.application = Some(*application);
                s.error_code = Some(*error_code);
                s.value = *frame_type;
                s.reason = Some(String::from_utf8_lossy(reason).into_owned());
            }
            Frame::Datagram { data } => s.length = Some(data.len() as u64),
            Frame::PathAbandon {
                path_id,
                error_code,
            } => {
                s.path_id = Some(*path_id);
                s.error_code = Some(*error_code);
            }
            Frame::PathStatus {
                path_id,
                seq,
                available,
            } => {
                s.path_id = Some(*path_id);
                s.seq = Some(*seq);
                s.available = Some(*available);
            }
            Frame::PathCidsBlocked { path_id, next_seq } => {
                s.path_id = Some(*path_id);
                s.seq = Some(*next_seq);
            }
            Frame::AckFrequency { seq, .. } => s.seq = Some(*seq),
            Frame::TimeStamp(v) => s.value = Some(*v),
            Frame::ResetStreamAt {
                stream_id,
                error_code,
                final_size,
                reliable_size,
            } => {
                s.stream_id = Some(*stream_id);
                s.error_code = Some(*error_code);
                s.value = Some(*final_size);
                s.length = Some(*reliable_size);
            }
        }
        s
    }
}

/// Owned summary of one QUIC packet, for JSON output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PacketSummary {
    /// Packet type.
    pub packet_type: PacketType,
    /// Wire version as `0x…` hex (long headers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Full packet number (after header-protection removal and reconstruction).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pn: Option<u64>,
    /// Destination connection ID, hex.
    pub dcid: String,
    /// Source connection ID, hex (long headers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scid: Option<String>,
    /// Length field (long headers with one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub length: Option<u64>,
    /// Bytes of the packet in the datagram.
    pub size: usize,
    /// Spin bit (short headers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spin_bit: Option<bool>,
    /// Key phase bit (decrypted short headers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_phase: Option<bool>,
    /// Multipath path identifier used for the nonce and packet-number space.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path_id: Option<u64>,
    /// Multipath: the packet-number space its plain ACK frames acknowledge (draft-05 / tquic:
    /// the space of the other endpoint's packets on the same path; current drafts: path 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ack_space: Option<u64>,
    /// Decoder's connection number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connection: Option<u64>,
    /// True when sent by the client.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_client: Option<bool>,
    /// Payload decrypted (and frames parsed).
    pub decrypted: bool,
    /// Why the payload was not decrypted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub undecrypted_reason: Option<String>,
    /// Frames, in order (consecutive PADDING bytes are one entry).
    pub frames: Vec<FrameSummary>,
    /// Why frame parsing stopped early.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frame_error: Option<String>,
}

/// Frame summaries of a payload and the error that stopped parsing, if any.
pub fn summarize_frames(payload: &[u8]) -> (Vec<FrameSummary>, Option<FrameError>) {
    let mut out = Vec::new();
    for f in Frames::new(payload) {
        match f {
            Ok(f) => out.push(FrameSummary::from_frame(&f)),
            Err(e) => return (out, Some(e)),
        }
    }
    (out, None)
}

/// Decoder counters; every rejection and decryption failure is counted by reason.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct QuicStats {
    /// Datagrams fed.
    pub datagrams: u64,
    /// Packets whose header parsed and that count as QUIC ([`super::DecodedPacket::is_quic`]).
    pub packets: u64,
    /// Packets whose header parsed but that do not count as QUIC, by reason: `unknown_version`
    /// (a long header of a version the decoder does not know), `unknown_connection` (a short,
    /// Handshake, 0-RTT, Retry or Version Negotiation header of no connection it follows: any
    /// UDP payload may look like one). Neither is a decryption failure.
    pub not_quic: BTreeMap<&'static str, u64>,
    /// Packets decrypted.
    pub decrypted: u64,
    /// Header rejections by reason.
    pub rejected: BTreeMap<&'static str, u64>,
    /// Packets not decrypted, by reason.
    pub not_decrypted: BTreeMap<&'static str, u64>,
    /// Frame-parsing stops by reason.
    pub frame_errors: BTreeMap<&'static str, u64>,
    /// 1-RTT packets found as segments of a datagram captured before UDP segmentation
    /// offload (GSO) cut it: several short-header packets back to back in one UDP payload.
    pub gso_segments: u64,
    /// ACK frames read in decrypted packets, by kind: `ack` (0x02/0x03), `path_ack` (current
    /// multipath draft, 0x3e/0x3f), `path_ack_old` (0x15228c00/01: drafts -07 to -19, and ACK_MP of
    /// drafts -05/-06), `ack_mp` (draft-04, 0xbaba00/01).
    pub ack_frames: BTreeMap<&'static str, u64>,
    /// Trailing zero bytes after coalesced packets (datagram padding).
    pub padding_bytes: u64,
    /// Connections created.
    pub connections: u64,
    /// Connections evicted from the bounded table.
    pub evictions: u64,
    /// Key updates followed.
    pub key_updates: u64,
    /// The search for connections whose handshake was not captured.
    pub hunt: super::hunt::HuntStats,
}

impl QuicStats {
    /// Packets not decrypted, whatever the reason.
    #[must_use]
    pub fn not_decrypted_total(&self) -> u64 {
        self.not_decrypted.values().sum()
    }

    pub(crate) fn bump(map: &mut BTreeMap<&'static str, u64>, reason: &'static str) {
        *map.entry(reason).or_insert(0) += 1;
    }
}
