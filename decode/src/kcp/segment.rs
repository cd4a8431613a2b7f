//! Raw ikcp segments: the 24-byte little-endian header and its payload.
//!
//! ```text
//!  0       4     5     6       8         12        16        20        24
//!  | conv  | cmd | frg |  wnd  |   ts    |   sn    |   una   |   len   | payload (len bytes)
//! ```
//!
//! [`Segment::from_slice`] validates once (command known, header and payload present); the
//! accessors then cannot fail. [`Segments`] walks the segments packed into one datagram and stops
//! at the first malformed one, saying where and why.

use serde::{Deserialize, Serialize};

/// Length of the ikcp segment header in bytes.
pub const HEADER_LEN: usize = 24;

/// A KCP command (the `cmd` byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Cmd {
    /// 81: data (`IKCP_CMD_PUSH`).
    Push,
    /// 82: acknowledgement of one segment (`IKCP_CMD_ACK`).
    Ack,
    /// 83: window probe, "tell me your window" (`IKCP_CMD_WASK`).
    Wask,
    /// 84: window size answer (`IKCP_CMD_WINS`).
    Wins,
}

impl Cmd {
    /// The command for a wire value, if it is one of 81..=84.
    pub const fn from_u8(value: u8) -> Option<Self> {
        match value {
            81 => Some(Self::Push),
            82 => Some(Self::Ack),
            83 => Some(Self::Wask),
            84 => Some(Self::Wins),
            _ => None,
        }
    }

    /// The wire value.
    pub const fn as_u8(self) -> u8 {
        match self {
            Self::Push => 81,
            Self::Ack => 82,
            Self::Wask => 83,
            Self::Wins => 84,
        }
    }

    /// Lower-case name as used in JSON output.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Push => "push",
            Self::Ack => "ack",
            Self::Wask => "wask",
            Self::Wins => "wins",
        }
    }
}

impl std::fmt::Display for Cmd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A header field (or the payload), named in truncation errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Field {
    /// Conversation id, bytes 0..4.
    Conv,
    /// Command, byte 4.
    Cmd,
    /// Fragment countdown, byte 5.
    Frg,
    /// Receive window, bytes 6..8.
    Wnd,
    /// Sender timestamp (ms), bytes 8..12.
    Ts,
    /// Sequence number, bytes 12..16.
    Sn,
    /// Cumulative acknowledgement, bytes 16..20.
    Una,
    /// Payload length, bytes 20..24.
    Len,
    /// The `len` payload bytes after the header.
    Payload,
}

impl Field {
    /// Offset one past the field's last byte in the header (payload: the header length).
    pub const fn end(self) -> usize {
        match self {
            Self::Conv => 4,
            Self::Cmd => 5,
            Self::Frg => 6,
            Self::Wnd => 8,
            Self::Ts => 12,
            Self::Sn => 16,
            Self::Una => 20,
            Self::Len | Self::Payload => HEADER_LEN,
        }
    }

    /// The header field that contains byte `offset` (`Payload` from byte 24 on).
    pub const fn at(offset: usize) -> Self {
        match offset {
            0..=3 => Self::Conv,
            4 => Self::Cmd,
            5 => Self::Frg,
            6..=7 => Self::Wnd,
            8..=11 => Self::Ts,
            12..=15 => Self::Sn,
            16..=19 => Self::Una,
            20..=23 => Self::Len,
            _ => Self::Payload,
        }
    }

    /// Lower-case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Conv => "conv",
            Self::Cmd => "cmd",
            Self::Frg => "frg",
            Self::Wnd => "wnd",
            Self::Ts => "ts",
            Self::Sn => "sn",
            Self::Una => "una",
            Self::Len => "len",
            Self::Payload => "payload",
        }
    }
}

impl std::fmt::Display for Field {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why bytes are not a KCP segment. Checks run in wire order, so the error names the first
/// problem a reader meets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SegmentError {
    /// The bytes end inside `field`: `required` bytes are needed to hold it, `actual` are there.
    #[error("KCP segment truncated in {field}: {required} bytes required, {actual} present")]
    Truncated {
        /// The field the bytes end in.
        field: Field,
        /// Bytes needed up to the end of that field (for the payload: header + `len`).
        required: usize,
        /// Bytes present.
        actual: usize,
    },
    /// The `cmd` byte is not one of 81..=84.
    #[error("unknown KCP command {0} (expected 81..=84)")]
    UnknownCmd(u8),
}

/// A validated view of one KCP segment (header and exactly `len` payload bytes, fewer only
/// in a datagram the capture cut: [`Segment::split_from_cut`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment<'a> {
    header: &'a [u8; HEADER_LEN],
    cmd: Cmd,
    payload: &'a [u8],
}

#[inline]
const fn le16(b: &[u8; HEADER_LEN], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

#[inline]
const fn le32(b: &[u8; HEADER_LEN], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl<'a> Segment<'a> {
    /// Validates the segment at the start of `bytes` (which may hold more segments after it).
    #[inline]
    pub fn from_slice(bytes: &'a [u8]) -> Result<Self, SegmentError> {
        Self::split_from(bytes).map(|(segment, _rest)| segment)
    }

    /// [`Segment::split_from`] for bytes the capture cut short: the segment whose payload the
    /// cut ends comes back with its payload as far as captured ([`Segment::len`] still the
    /// header's, [`Segment::is_cut`] true) and nothing after it.
    #[inline]
    pub fn split_from_cut(bytes: &'a [u8]) -> Result<(Self, &'a [u8]), SegmentError> {
        match Self::split_from(bytes) {
            Err(SegmentError::Truncated {
                field: Field::Payload,
                ..
            }) => {
                let Some((header, payload)) = bytes.split_first_chunk::<HEADER_LEN>() else {
                    return Err(SegmentError::Truncated {
                        field: Field::at(bytes.len()),
                        required: HEADER_LEN,
                        actual: bytes.len(),
                    });
                };
                let cmd = Cmd::from_u8(header[4]).ok_or(SegmentError::UnknownCmd(header[4]))?;
                Ok((
                    Self {
                        header,
                        cmd,
                        payload,
                    },
                    &[],
                ))
            }
            other => other,
        }
    }

    /// Validates the segment at the start of `bytes` and returns it with the bytes after it.
    #[inline]
    pub fn split_from(bytes: &'a [u8]) -> Result<(Self, &'a [u8]), SegmentError> {
        let actual = bytes.len();
        let Some((header, after)) = bytes.split_first_chunk::<HEADER_LEN>() else {
            // Report the first field that does not fit, but a known-bad command first.
            if actual > 4 {
                if let Some(&cmd) = bytes.get(4) {
                    if Cmd::from_u8(cmd).is_none() {
                        return Err(SegmentError::UnknownCmd(cmd));
                    }
                }
            }
            let field = Field::at(actual);
            return Err(SegmentError::Truncated {
                field,
                required: field.end(),
                actual,
            });
        };
        let cmd = Cmd::from_u8(header[4]).ok_or(SegmentError::UnknownCmd(header[4]))?;
        let len = le32(header, 20);
        let truncated = SegmentError::Truncated {
            field: Field::Payload,
            required: usize::try_from(len)
                .ok()
                .and_then(|l| l.checked_add(HEADER_LEN))
                .unwrap_or(usize::MAX),
            actual,
        };
        let len = usize::try_from(len).map_err(|_| truncated)?;
        if len > after.len() {
            return Err(truncated);
        }
        let (payload, rest) = after.split_at(len);
        Ok((
            Self {
                header,
                cmd,
                payload,
            },
            rest,
        ))
    }

    /// Conversation id.
    #[inline]
    pub fn conv(&self) -> u32 {
        le32(self.header, 0)
    }
    /// Command.
    #[inline]
    pub fn cmd(&self) -> Cmd {
        self.cmd
    }
    /// Fragment countdown: the number of fragments of this message still to come after it.
    #[inline]
    pub fn frg(&self) -> u8 {
        self.header[5]
    }
    /// The sender's free receive window, in segments.
    #[inline]
    pub fn wnd(&self) -> u16 {
        le16(self.header, 6)
    }
    /// Sender's clock (ms) when sent; in an ACK, the echoed `ts` of the acknowledged PUSH.
    #[inline]
    pub fn ts(&self) -> u32 {
        le32(self.header, 8)
    }
    /// Sequence number (in an ACK: the acknowledged sequence number).
    #[inline]
    pub fn sn(&self) -> u32 {
        le32(self.header, 12)
    }
    /// Cumulative acknowledgement: every sequence number below it has been received.
    #[inline]
    pub fn una(&self) -> u32 {
        le32(self.header, 16)
    }
    /// Payload length field (equal to `payload().len()`).
    #[inline]
    pub fn len(&self) -> u32 {
        le32(self.header, 20)
    }
    /// True when the segment carries no payload (its header's `len` is 0; a segment the
    /// capture cut before its payload still carries one).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The payload bytes.
    /// Whether the capture cut this segment short of the `len` payload bytes its header gives
    /// (only from [`Segment::split_from_cut`]).
    #[inline]
    pub fn is_cut(&self) -> bool {
        (self.payload.len() as u64) < u64::from(self.len())
    }
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }
    /// The raw 24-byte header.
    #[inline]
    pub fn header(&self) -> &'a [u8; HEADER_LEN] {
        self.header
    }
    /// Bytes this segment occupies on the wire (header + payload).
    #[inline]
    pub fn wire_len(&self) -> usize {
        HEADER_LEN + self.payload.len()
    }
    /// Owned summary for output.
    pub fn summary(&self) -> KcpSegment {
        KcpSegment {
            conv: self.conv(),
            cmd: self.cmd,
            sn: self.sn(),
            una: self.una(),
            frg: self.frg(),
            wnd: self.wnd(),
            len: self.len(),
            ts: self.ts(),
        }
    }
}

/// Owned summary of one segment, for JSON output (`kcp_segment` lines) and the correlation
/// engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KcpSegment {
    /// Conversation id.
    pub conv: u32,
    /// Command.
    pub cmd: Cmd,
    /// Sequence number.
    pub sn: u32,
    /// Cumulative acknowledgement.
    pub una: u32,
    /// Fragment countdown.
    pub frg: u8,
    /// Advertised free receive window (segments).
    pub wnd: u16,
    /// Payload length.
    pub len: u32,
    /// Sender timestamp (ms) or, in an ACK, the echoed timestamp.
    #[serde(rename = "kcp_ts")]
    pub ts: u32,
}

/// Where and why a datagram's segment walk stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("segment {index} at byte {offset}: {error}")]
pub struct DatagramError {
    /// Index of the malformed segment (0 = first).
    pub index: usize,
    /// Byte offset of the malformed segment in the datagram.
    pub offset: usize,
    /// What is wrong with it.
    pub error: SegmentError,
}

/// Iterator over the segments packed in one datagram; yields one `Err` at the first malformed
/// segment (including trailing bytes too short for a header) and then ends.
#[derive(Clone, Debug)]
pub struct Segments<'a> {
    rest: &'a [u8],
    offset: usize,
    index: usize,
    done: bool,
    /// The datagram was cut by the capture: see [`Segments::new_cut`].
    cut: bool,
}

impl<'a> Segments<'a> {
    /// Walks the segments of `datagram`.
    #[inline]
    pub fn new(datagram: &'a [u8]) -> Self {
        Self {
            rest: datagram,
            offset: 0,
            index: 0,
            done: false,
            cut: false,
        }
    }

    /// Walks the segments of a datagram the capture cut short: the segment whose payload the
    /// cut ends is the last (see [`Segment::split_from_cut`]); a header the cut ends is not
    /// one, and not an error.
    #[inline]
    pub fn new_cut(captured: &'a [u8]) -> Self {
        Self {
            cut: true,
            ..Self::new(captured)
        }
    }

    /// Byte offset of the next segment (after the end: the datagram length).
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Bytes not yet walked.
    pub fn remaining(&self) -> &'a [u8] {
        self.rest
    }
}

impl<'a> Iterator for Segments<'a> {
    type Item = Result<Segment<'a>, DatagramError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.rest.is_empty() || self.cut && self.rest.len() < HEADER_LEN {
            return None;
        }
        let split = if self.cut {
            Segment::split_from_cut(self.rest)
        } else {
            Segment::split_from(self.rest)
        };
        match split {
            Ok((segment, rest)) => {
                self.rest = rest;
                self.offset = self.offset.saturating_add(segment.wire_len());
                self.index = self.index.saturating_add(1);
                Some(Ok(segment))
            }
            Err(error) => {
                self.done = true;
                Some(Err(DatagramError {
                    index: self.index,
                    offset: self.offset,
                    error,
                }))
            }
        }
    }
}

/// Segments of a datagram decoded in lax mode: what parsed, and where decoding stopped if it did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaxDatagram<'a> {
    /// The segments that parsed, in order.
    pub segments: Vec<Segment<'a>>,
    /// The first malformed segment, if any (everything from `offset` on was not decoded).
    pub stopped: Option<DatagramError>,
}

/// Decodes every segment of `datagram`; fails on the first malformed one (strict mode).
pub fn decode_strict(datagram: &[u8]) -> Result<Vec<Segment<'_>>, DatagramError> {
    if datagram.is_empty() {
        return Err(DatagramError {
            index: 0,
            offset: 0,
            error: SegmentError::Truncated {
                field: Field::Conv,
                required: Field::Conv.end(),
                actual: 0,
            },
        });
    }
    Segments::new(datagram).collect()
}

/// Decodes the segments of `datagram`, keeping those before the first malformed one (lax mode).
pub fn decode_lax(datagram: &[u8]) -> LaxDatagram<'_> {
    let mut segments = Vec::new();
    let mut stopped = None;
    for item in Segments::new(datagram) {
        match item {
            Ok(segment) => segments.push(segment),
            Err(error) => stopped = Some(error),
        }
    }
    LaxDatagram { segments, stopped }
}
