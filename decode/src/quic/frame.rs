//! QUIC frames (RFC 9000 §19, RFC 9221 DATAGRAM, multipath drafts): zero-copy, stop at the first
//! malformed or unknown frame and say which and where.

use super::multipath as mp;
use super::varint::{Reader, Truncated};
use thiserror::Error;

/// ECN counts of an ACK frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct EcnCounts {
    /// ECT(0) count.
    pub ect0: u64,
    /// ECT(1) count.
    pub ect1: u64,
    /// ECN-CE count.
    pub ce: u64,
}

/// An ACK, PATH_ACK or ACK_MP frame; ranges are validated and read lazily.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack<'a> {
    /// The frame type on the wire (0x02/0x03, or a multipath code point).
    pub frame_type: u64,
    /// Path ID (PATH_ACK) or destination CID sequence number (ACK_MP of drafts -04 to -06).
    pub path_id: Option<u64>,
    /// Largest acknowledged packet number.
    pub largest: u64,
    /// ACK Delay field (unscaled).
    pub delay: u64,
    /// First ACK Range field.
    pub first_range: u64,
    /// Number of additional ranges.
    pub range_count: u64,
    raw_ranges: &'a [u8],
    /// ECN counts (ACK_ECN types).
    pub ecn: Option<EcnCounts>,
}

impl<'a> Ack<'a> {
    /// The kind of ACK frame: `ack`, `path_ack` (current multipath draft), `path_ack_old`
    /// (0x15228c00: PATH_ACK of drafts -07 to -19, or ACK_MP of -05/-06) or `ack_mp`
    /// (draft-04, 0xbaba00).
    pub fn kind(&self) -> &'static str {
        match self.frame_type {
            mp::PATH_ACK | mp::PATH_ACK_ECN => "path_ack",
            mp::PATH_ACK_OLD | mp::PATH_ACK_ECN_OLD => "path_ack_old",
            mp::ACK_MP_04 | mp::ACK_MP_ECN_04 => "ack_mp",
            _ => "ack",
        }
    }

    /// Acknowledged ranges, highest first, as inclusive `(smallest, largest)` pairs.
    pub fn ranges(&self) -> AckRanges<'a> {
        AckRanges {
            r: Reader::new(self.raw_ranges),
            next_high: Some(self.largest),
            first: Some(self.first_range),
            left: self.range_count,
        }
    }
}

/// Iterator over ACK ranges.
#[derive(Debug, Clone)]
pub struct AckRanges<'a> {
    r: Reader<'a>,
    next_high: Option<u64>,
    first: Option<u64>,
    left: u64,
}

impl AckRanges<'_> {
    fn step(&mut self) -> Result<Option<(u64, u64)>, &'static str> {
        let Some(high) = self.next_high else {
            return Ok(None);
        };
        let len = if let Some(f) = self.first.take() {
            f
        } else {
            if self.left == 0 {
                return Ok(None);
            }
            self.left -= 1;
            let gap = self
                .r
                .varint("ack gap")
                .map_err(|_| "truncated ack range")?;
            let len = self
                .r
                .varint("ack range length")
                .map_err(|_| "truncated ack range")?;
            let high = high.checked_sub(gap).ok_or("ack gap below zero")?;
            self.next_high = Some(high);
            len
        };
        let high = self.next_high.ok_or("ack range")?;
        let low = high.checked_sub(len).ok_or("ack range below zero")?;
        // The next range's largest is (low - gap - 2); store low - 2 and subtract gap on use.
        self.next_high = low.checked_sub(2);
        if self.next_high.is_none() && self.left > 0 {
            return Err("ack range below zero");
        }
        Ok(Some((low, high)))
    }
}

impl Iterator for AckRanges<'_> {
    type Item = (u64, u64);

    fn next(&mut self) -> Option<(u64, u64)> {
        self.step().ok().flatten()
    }
}

/// One frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A run of PADDING bytes.
    Padding {
        /// Bytes in the run.
        len: usize,
    },
    /// PING.
    Ping,
    /// ACK / ACK_ECN, PATH_ACK / PATH_ACK_ECN, or ACK_MP (drafts -04 to -06).
    Ack(Ack<'a>),
    /// RESET_STREAM.
    ResetStream {
        /// Stream ID.
        stream_id: u64,
        /// Application error code.
        error_code: u64,
        /// Final size.
        final_size: u64,
    },
    /// STOP_SENDING.
    StopSending {
        /// Stream ID.
        stream_id: u64,
        /// Application error code.
        error_code: u64,
    },
    /// CRYPTO.
    Crypto {
        /// Offset in the crypto stream.
        offset: u64,
        /// Handshake data.
        data: &'a [u8],
    },
    /// NEW_TOKEN.
    NewToken {
        /// Token.
        token: &'a [u8],
    },
    /// STREAM (types 0x08–0x0f).
    Stream {
        /// Stream ID.
        stream_id: u64,
        /// Offset (0 when the OFF bit is clear).
        offset: u64,
        /// The OFF bit was set (offset on the wire).
        has_offset: bool,
        /// The LEN bit was set (length on the wire).
        has_length: bool,
        /// FIN bit.
        fin: bool,
        /// Stream data.
        data: &'a [u8],
    },
    /// MAX_DATA.
    MaxData(u64),
    /// MAX_STREAM_DATA.
    MaxStreamData {
        /// Stream ID.
        stream_id: u64,
        /// Maximum stream data.
        max: u64,
    },
    /// MAX_STREAMS (bidirectional or unidirectional).
    MaxStreams {
        /// Bidirectional streams.
        bidi: bool,
        /// Maximum streams.
        max: u64,
    },
    /// DATA_BLOCKED.
    DataBlocked(u64),
    /// STREAM_DATA_BLOCKED.
    StreamDataBlocked {
        /// Stream ID.
        stream_id: u64,
        /// Limit.
        limit: u64,
    },
    /// STREAMS_BLOCKED.
    StreamsBlocked {
        /// Bidirectional streams.
        bidi: bool,
        /// Limit.
        limit: u64,
    },
    /// NEW_CONNECTION_ID, or PATH_NEW_CONNECTION_ID (with a path ID).
    NewConnectionId {
        /// Path ID (multipath only).
        path_id: Option<u64>,
        /// Sequence number.
        seq: u64,
        /// Retire Prior To.
        retire_prior_to: u64,
        /// Connection ID.
        cid: &'a [u8],
        /// Stateless reset token.
        reset_token: &'a [u8],
    },
    /// RETIRE_CONNECTION_ID, or PATH_RETIRE_CONNECTION_ID (with a path ID).
    RetireConnectionId {
        /// Path ID (multipath only).
        path_id: Option<u64>,
        /// Sequence number.
        seq: u64,
    },
    /// PATH_CHALLENGE.
    PathChallenge(&'a [u8]),
    /// PATH_RESPONSE.
    PathResponse(&'a [u8]),
    /// CONNECTION_CLOSE (transport 0x1c or application 0x1d).
    ConnectionClose {
        /// Application close (0x1d).
        application: bool,
        /// Error code.
        error_code: u64,
        /// Frame type that caused the error (transport close only).
        frame_type: Option<u64>,
        /// Reason phrase.
        reason: &'a [u8],
    },
    /// HANDSHAKE_DONE.
    HandshakeDone,
    /// DATAGRAM (0x30 without, 0x31 with length).
    Datagram {
        /// Payload.
        data: &'a [u8],
    },
    /// PATH_ABANDON (current draft, or draft-04 with a reason phrase).
    PathAbandon {
        /// Path ID (or DCID sequence number in drafts -04 to -06).
        path_id: u64,
        /// Error code.
        error_code: u64,
    },
    /// PATH_STATUS_BACKUP / PATH_STATUS_AVAILABLE (or PATH_STATUS of drafts -04/-05).
    PathStatus {
        /// Path ID (or DCID sequence number in drafts -04/-05).
        path_id: u64,
        /// Path status sequence number.
        seq: u64,
        /// True for available, false for backup/standby.
        available: bool,
    },
    /// MAX_PATH_ID.
    MaxPathId(u64),
    /// PATHS_BLOCKED.
    PathsBlocked(u64),
    /// PATH_CIDS_BLOCKED.
    PathCidsBlocked {
        /// Path ID.
        path_id: u64,
        /// Next sequence number.
        next_seq: u64,
    },
    /// ACK_FREQUENCY (0xaf, draft-ietf-quic-ack-frequency): how often the peer should ACK.
    AckFrequency {
        /// Sequence number (a larger one replaces the values of a smaller one).
        seq: u64,
        /// Ack-eliciting packets received before an ACK is due.
        ack_eliciting_threshold: u64,
        /// Requested max_ack_delay, µs.
        request_max_ack_delay_us: u64,
        /// Out-of-order packets tolerated before an immediate ACK (0: never).
        reordering_threshold: u64,
    },
    /// IMMEDIATE_ACK (0x1f in the drafts quinn implements, 0xac since): ACK right away.
    ImmediateAck,
    /// TIME_STAMP (0x2f5, draft-huitema-quic-ts): the sender's clock when the packet left.
    TimeStamp(u64),
    /// RESET_STREAM_AT (0x24, draft-ietf-quic-reliable-stream-reset): a reset that still
    /// delivers the stream's first `reliable_size` bytes.
    ResetStreamAt {
        /// Stream ID.
        stream_id: u64,
        /// Application error code.
        error_code: u64,
        /// Final size.
        final_size: u64,
        /// Bytes delivered despite the reset.
        reliable_size: u64,
    },
}

/// ACK_FREQUENCY frame type.
const ACK_FREQUENCY: u64 = 0xaf;
/// IMMEDIATE_ACK frame type, as draft-ietf-quic-ack-frequency-04 to -10 (and quinn) send it.
const IMMEDIATE_ACK_OLD: u64 = 0x1f;
/// IMMEDIATE_ACK frame type since draft-ietf-quic-ack-frequency-11.
const IMMEDIATE_ACK: u64 = 0xac;
/// TIME_STAMP frame type (draft-huitema-quic-ts).
const TIME_STAMP: u64 = 0x2f5;
/// RESET_STREAM_AT frame type (draft-ietf-quic-reliable-stream-reset).
const RESET_STREAM_AT: u64 = 0x24;

impl Frame<'_> {
    /// Short name for summaries.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Padding { .. } => "padding",
            Self::Ping => "ping",
            Self::Ack(a) if a.path_id.is_some() => "path_ack",
            Self::Ack(_) => "ack",
            Self::ResetStream { .. } => "reset_stream",
            Self::StopSending { .. } => "stop_sending",
            Self::Crypto { .. } => "crypto",
            Self::NewToken { .. } => "new_token",
            Self::Stream { .. } => "stream",
            Self::MaxData(_) => "max_data",
            Self::MaxStreamData { .. } => "max_stream_data",
            Self::MaxStreams { .. } => "max_streams",
            Self::DataBlocked(_) => "data_blocked",
            Self::StreamDataBlocked { .. } => "stream_data_blocked",
            Self::StreamsBlocked { .. } => "streams_blocked",
            Self::NewConnectionId {
                path_id: Some(_), ..
            } => "path_new_connection_id",
            Self::NewConnectionId { .. } => "new_connection_id",
            Self::RetireConnectionId {
                path_id: Some(_), ..
            } => "path_retire_connection_id",
            Self::RetireConnectionId { .. } => "retire_connection_id",
            Self::PathChallenge(_) => "path_challenge",
            Self::PathResponse(_) => "path_response",
            Self::ConnectionClose { .. } => "connection_close",
            Self::HandshakeDone => "handshake_done",
            Self::Datagram { .. } => "datagram",
            Self::PathAbandon { .. } => "path_abandon",
            Self::PathStatus { .. } => "path_status",
            Self::MaxPathId(_) => "max_path_id",
            Self::PathsBlocked(_) => "paths_blocked",
            Self::PathCidsBlocked { .. } => "path_cids_blocked",
            Self::AckFrequency { .. } => "ack_frequency",
            Self::ImmediateAck => "immediate_ack",
            Self::TimeStamp(_) => "time_stamp",
            Self::ResetStreamAt { .. } => "reset_stream_at",
        }
    }
}

/// Why frame parsing stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum FrameError {
    /// A field did not fit in the payload.
    #[error("frame type {frame_type:#x}: {cause}")]
    Truncated {
        /// Frame type being parsed (u64::MAX when the type itself was truncated).
        frame_type: u64,
        /// Which field.
        cause: Truncated,
    },
    /// A frame type this decoder does not know; the rest of the payload is not parsed.
    #[error("unknown frame type {frame_type:#x} at offset {offset}")]
    UnknownType {
        /// The type.
        frame_type: u64,
        /// Offset in the payload.
        offset: usize,
    },
    /// A frame whose fields are inconsistent.
    #[error("malformed frame type {frame_type:#x} at offset {offset}: {why}")]
    Malformed {
        /// The type.
        frame_type: u64,
        /// Offset in the payload.
        offset: usize,
        /// What is wrong.
        why: &'static str,
    },
}

impl FrameError {
    /// Short stable reason name for counters.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Truncated { .. } => "frame_truncated",
            Self::UnknownType { .. } => "frame_unknown_type",
            Self::Malformed { .. } => "frame_malformed",
        }
    }
}

/// Iterator over the frames of a decrypted payload; yields one error and then stops.
#[derive(Debug, Clone)]
pub struct Frames<'a> {
    r: Reader<'a>,
    done: bool,
}

impl<'a> Frames<'a> {
    /// Frames of a decrypted packet payload.
    pub fn new(payload: &'a [u8]) -> Self {
        Self {
            r: Reader::new(payload),
            done: false,
        }
    }
}

impl<'a> Iterator for Frames<'a> {
    type Item = Result<Frame<'a>, FrameError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.r.is_empty() {
            return None;
        }
        let res = parse_frame(&mut self.r);
        if res.is_err() {
            self.done = true;
        }
        Some(res)
    }
}

const MAX_VARINT: u64 = (1 << 62) - 1;

fn len_usize(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

fn parse_frame<'a>(r: &mut Reader<'a>) -> Result<Frame<'a>, FrameError> {
    let offset = r.pos();
    let ty = r
        .varint("frame type")
        .map_err(|cause| FrameError::Truncated {
            frame_type: u64::MAX,
            cause,
        })?;
    let t = |cause| FrameError::Truncated {
        frame_type: ty,
        cause,
    };
    let bad = |why| FrameError::Malformed {
        frame_type: ty,
        offset,
        why,
    };
    let f = match ty {
        0x00 => {
            let run = r.rest().iter().take_while(|&&b| b == 0).count();
            r.bytes(run, "padding").map_err(t)?;
            Frame::Padding { len: run + 1 }
        }
        0x01 => Frame::Ping,
        0x02 | 0x03 => {
            Frame::Ack(parse_ack(r, ty, None, ty == 0x03).map_err(|e| e.at(ty, offset))?)
        }
        mp::PATH_ACK
        | mp::PATH_ACK_ECN
        | mp::PATH_ACK_OLD
        | mp::PATH_ACK_ECN_OLD
        | mp::ACK_MP_04
        | mp::ACK_MP_ECN_04 => {
            let path_id = r.varint("path id").map_err(t)?;
            let ecn = matches!(
                ty,
                mp::PATH_ACK_ECN | mp::PATH_ACK_ECN_OLD | mp::ACK_MP_ECN_04
            );
            Frame::Ack(parse_ack(r, ty, Some(path_id), ecn).map_err(|e| e.at(ty, offset))?)
        }
        0x04 => Frame::ResetStream {
            stream_id: r.varint("stream id").map_err(t)?,
            error_code: r.varint("error code").map_err(t)?,
            final_size: r.varint("final size").map_err(t)?,
        },
        0x05 => Frame::StopSending {
            stream_id: r.varint("stream id").map_err(t)?,
            error_code: r.varint("error code").map_err(t)?,
        },
        0x06 => {
            let off = r.varint("offset").map_err(t)?;
            let len = r.varint("length").map_err(t)?;
            if off.checked_add(len).is_none_or(|end| end > MAX_VARINT) {
                return Err(bad("crypto offset + length exceeds 2^62-1"));
            }
            Frame::Crypto {
                offset: off,
                data: r.bytes(len_usize(len), "crypto data").map_err(t)?,
            }
        }
        0x07 => {
            let len = r.varint("token length").map_err(t)?;
            if len == 0 {
                return Err(bad("empty token"));
            }
            Frame::NewToken {
                token: r.bytes(len_usize(len), "token").map_err(t)?,
            }
        }
        0x08..=0x0f => {
            let stream_id = r.varint("stream id").map_err(t)?;
            let has_offset = ty & 0x04 != 0;
            let has_length = ty & 0x02 != 0;
            let off = if has_offset {
                r.varint("offset").map_err(t)?
            } else {
                0
            };
            let data = if has_length {
                let len = r.varint("length").map_err(t)?;
                r.bytes(len_usize(len), "stream data").map_err(t)?
            } else {
                let rest = r.rest();
                r.bytes(rest.len(), "stream data").map_err(t)?
            };
            if off
                .checked_add(data.len() as u64)
                .is_none_or(|end| end > MAX_VARINT)
            {
                return Err(bad("stream offset + length exceeds 2^62-1"));
            }
            Frame::Stream {
                stream_id,
                offset: off,
                has_offset,
                has_length,
                fin: ty & 1 != 0,
                data,
            }
        }
        0x10 => Frame::MaxData(r.varint("maximum data").map_err(t)?),
        0x11 => Frame::MaxStreamData {
            stream_id: r.varint("stream id").map_err(t)?,
            max: r.varint("maximum stream data").map_err(t)?,
        },
        0x12 | 0x13 => Frame::MaxStreams {
            bidi: ty == 0x12,
            max: r.varint("maximum streams").map_err(t)?,
        },
        0x14 => Frame::DataBlocked(r.varint("maximum data").map_err(t)?),
        0x15 => Frame::StreamDataBlocked {
            stream_id: r.varint("stream id").map_err(t)?,
            limit: r.varint("maximum stream data").map_err(t)?,
        },
        0x16 | 0x17 => Frame::StreamsBlocked {
            bidi: ty == 0x16,
            limit: r.varint("maximum streams").map_err(t)?,
        },
        0x18 | mp::PATH_NEW_CONNECTION_ID | mp::PATH_NEW_CONNECTION_ID_OLD => {
            let path_id = if ty == 0x18 {
                None
            } else {
                Some(r.varint("path id").map_err(t)?)
            };
            let seq = r.varint("sequence number").map_err(t)?;
            let retire_prior_to = r.varint("retire prior to").map_err(t)?;
            if retire_prior_to > seq {
                return Err(bad("retire prior to exceeds sequence number"));
            }
            let len = r.u8("connection id length").map_err(t)?;
            if !(1..=20).contains(&len) {
                return Err(bad("connection id length not in 1..=20"));
            }
            let cid = r.bytes(usize::from(len), "connection id").map_err(t)?;
            let reset_token = r.bytes(16, "stateless reset token").map_err(t)?;
            Frame::NewConnectionId {
                path_id,
                seq,
                retire_prior_to,
                cid,
                reset_token,
            }
        }
        0x19 | mp::PATH_RETIRE_CONNECTION_ID | mp::PATH_RETIRE_CONNECTION_ID_OLD => {
            let path_id = if ty == 0x19 {
                None
            } else {
                Some(r.varint("path id").map_err(t)?)
            };
            Frame::RetireConnectionId {
                path_id,
                seq: r.varint("sequence number").map_err(t)?,
            }
        }
        0x1a => Frame::PathChallenge(r.bytes(8, "data").map_err(t)?),
        0x1b => Frame::PathResponse(r.bytes(8, "data").map_err(t)?),
        0x1c | 0x1d => {
            let error_code = r.varint("error code").map_err(t)?;
            let frame_type = if ty == 0x1c {
                Some(r.varint("frame type").map_err(t)?)
            } else {
                None
            };
            let len = r.varint("reason phrase length").map_err(t)?;
            let reason = r.bytes(len_usize(len), "reason phrase").map_err(t)?;
            Frame::ConnectionClose {
                application: ty == 0x1d,
                error_code,
                frame_type,
                reason,
            }
        }
        0x1e => Frame::HandshakeDone,
        0x30 => {
            let rest = r.rest();
            Frame::Datagram {
                data: r.bytes(rest.len(), "datagram data").map_err(t)?,
            }
        }
        0x31 => {
            let len = r.varint("length").map_err(t)?;
            Frame::Datagram {
                data: r.bytes(len_usize(len), "datagram data").map_err(t)?,
            }
        }
        mp::PATH_ABANDON | mp::PATH_ABANDON_OLD => Frame::PathAbandon {
            path_id: r.varint("path id").map_err(t)?,
            error_code: r.varint("error code").map_err(t)?,
        },
        mp::PATH_ABANDON_04 => {
            let path_id = r.varint("dcid sequence number").map_err(t)?;
            let error_code = r.varint("error code").map_err(t)?;
            let len = r.varint("reason phrase length").map_err(t)?;
            r.bytes(len_usize(len), "reason phrase").map_err(t)?;
            Frame::PathAbandon {
                path_id,
                error_code,
            }
        }
        mp::PATH_STATUS_BACKUP
        | mp::PATH_STATUS_AVAILABLE
        | mp::PATH_STATUS_BACKUP_OLD
        | mp::PATH_STATUS_AVAILABLE_OLD => Frame::PathStatus {
            path_id: r.varint("path id").map_err(t)?,
            seq: r.varint("path status sequence number").map_err(t)?,
            available: matches!(
                ty,
                mp::PATH_STATUS_AVAILABLE | mp::PATH_STATUS_AVAILABLE_OLD
            ),
        },
        mp::PATH_STATUS_04 | mp::PATH_STATUS_05 => {
            let path_id = r.varint("dcid sequence number").map_err(t)?;
            let seq = r.varint("path status sequence number").map_err(t)?;
            let status = r.varint("path status").map_err(t)?;
            Frame::PathStatus {
                path_id,
                seq,
                available: status == 2,
            }
        }
        mp::MAX_PATH_ID | mp::MAX_PATH_ID_OLD => {
            Frame::MaxPathId(r.varint("maximum path id").map_err(t)?)
        }
        mp::PATHS_BLOCKED | mp::PATHS_BLOCKED_OLD => {
            Frame::PathsBlocked(r.varint("maximum path id").map_err(t)?)
        }
        mp::PATH_CIDS_BLOCKED | mp::PATH_CIDS_BLOCKED_OLD => Frame::PathCidsBlocked {
            path_id: r.varint("path id").map_err(t)?,
            next_seq: r.varint("next sequence number").map_err(t)?,
        },
        ACK_FREQUENCY => Frame::AckFrequency {
            seq: r.varint("sequence number").map_err(t)?,
            ack_eliciting_threshold: r.varint("ack-eliciting threshold").map_err(t)?,
            request_max_ack_delay_us: r.varint("request max ack delay").map_err(t)?,
            reordering_threshold: r.varint("reordering threshold").map_err(t)?,
        },
        IMMEDIATE_ACK | IMMEDIATE_ACK_OLD => Frame::ImmediateAck,
        TIME_STAMP => Frame::TimeStamp(r.varint("timestamp").map_err(t)?),
        RESET_STREAM_AT => {
            let stream_id = r.varint("stream id").map_err(t)?;
            let error_code = r.varint("error code").map_err(t)?;
            let final_size = r.varint("final size").map_err(t)?;
            let reliable_size = r.varint("reliable size").map_err(t)?;
            if reliable_size > final_size {
                return Err(bad("reliable size exceeds final size"));
            }
            Frame::ResetStreamAt {
                stream_id,
                error_code,
                final_size,
                reliable_size,
            }
        }
        _ => {
            return Err(FrameError::UnknownType {
                frame_type: ty,
                offset,
            })
        }
    };
    Ok(f)
}

enum AckError {
    Truncated(Truncated),
    Malformed(&'static str),
}

impl AckError {
    fn at(self, frame_type: u64, offset: usize) -> FrameError {
        match self {
            Self::Truncated(cause) => FrameError::Truncated { frame_type, cause },
            Self::Malformed(why) => FrameError::Malformed {
                frame_type,
                offset,
                why,
            },
        }
    }
}

impl From<Truncated> for AckError {
    fn from(t: Truncated) -> Self {
        Self::Truncated(t)
    }
}

fn parse_ack<'a>(
    r: &mut Reader<'a>,
    frame_type: u64,
    path_id: Option<u64>,
    ecn: bool,
) -> Result<Ack<'a>, AckError> {
    let largest = r.varint("largest acknowledged")?;
    let delay = r.varint("ack delay")?;
    let range_count = r.varint("ack range count")?;
    let first_range = r.varint("first ack range")?;
    if first_range > largest {
        return Err(AckError::Malformed(
            "first ack range exceeds largest acknowledged",
        ));
    }
    let ranges_start = r.rest();
    let start = r.pos();
    for _ in 0..range_count {
        r.varint("gap")?;
        r.varint("ack range length")?;
    }
    let raw_ranges = ranges_start.get(..r.pos() - start).unwrap_or(&[]);
    let ack = Ack {
        frame_type,
        path_id,
        largest,
        delay,
        first_range,
        range_count,
        raw_ranges,
        ecn: None,
    };
    let mut it = ack.ranges();
    loop {
        match it.step() {
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(why) => return Err(AckError::Malformed(why)),
        }
    }
    let ecn = if ecn {
        Some(EcnCounts {
            ect0: r.varint("ect0 count")?,
            ect1: r.varint("ect1 count")?,
            ce: r.varint("ecn-ce count")?,
        })
    } else {
        None
    };
    Ok(Ack { ecn, ..ack })
}
