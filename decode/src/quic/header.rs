//! Long and short packet headers (RFC 9000 §17, RFC 9369 §3, draft-29): validated zero-copy views.

use super::varint::{Reader, Truncated};
use serde::Serialize;
use thiserror::Error;

/// QUIC version 1 (RFC 9000).
pub const VERSION_1: u32 = 0x0000_0001;
/// QUIC version 2 (RFC 9369).
pub const VERSION_2: u32 = 0x6b33_43cf;
/// draft-29 (also used by drafts 30–32, which share its salt and labels).
pub const VERSION_DRAFT_29: u32 = 0xff00_001d;

/// The version families this decoder knows the packet layout and keys of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Version {
    /// RFC 9000.
    V1,
    /// RFC 9369.
    V2,
    /// draft-29 to draft-32.
    Draft29,
}

impl Version {
    /// The family of a wire version number, if known.
    pub fn from_wire(v: u32) -> Option<Self> {
        match v {
            VERSION_1 => Some(Self::V1),
            VERSION_2 => Some(Self::V2),
            0xff00_001d..=0xff00_0020 => Some(Self::Draft29),
            _ => None,
        }
    }
}

/// Packet type, from the header form, the version and the long-header type bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PacketType {
    /// Initial (long header).
    Initial,
    /// 0-RTT (long header).
    ZeroRtt,
    /// Handshake (long header).
    Handshake,
    /// Retry (long header).
    Retry,
    /// Version Negotiation (long header with version 0).
    VersionNegotiation,
    /// 1-RTT (short header).
    OneRtt,
    /// A long header of a version this decoder does not know; only the invariant fields are read.
    UnknownVersion,
}

impl PacketType {
    fn from_long_bits(version: Version, bits: u8) -> Self {
        match (version, bits & 3) {
            (Version::V2, 0) => Self::Retry,
            (Version::V2, 1) => Self::Initial,
            (Version::V2, 2) => Self::ZeroRtt,
            (Version::V2, _) => Self::Handshake,
            (_, 0) => Self::Initial,
            (_, 1) => Self::ZeroRtt,
            (_, 2) => Self::Handshake,
            (_, _) => Self::Retry,
        }
    }
}

/// Why a packet header was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum HeaderError {
    /// A field did not fit in the datagram.
    #[error(transparent)]
    Truncated(#[from] Truncated),
    /// The fixed bit (0x40) was 0 in a packet that must set it (strict mode only).
    #[error("fixed bit is 0")]
    FixedBitClear,
    /// A connection ID longer than the 20 bytes QUIC v1/v2 allow.
    #[error("{which} length {len} exceeds 20")]
    CidTooLong {
        /// `"dcid"` or `"scid"`.
        which: &'static str,
        /// Declared length.
        len: u8,
    },
    /// The Length field runs past the end of the datagram (strict mode only).
    #[error("length field {declared} exceeds the {available} bytes left in the datagram")]
    LengthExceedsDatagram {
        /// Declared length (packet number + payload).
        declared: u64,
        /// Bytes left after the Length field.
        available: usize,
    },
    /// A Version Negotiation packet whose version list is empty, not a multiple of 4 bytes or
    /// names version 0: a look-alike (an LLMNR query, zero padding), not QUIC.
    #[error("version negotiation list of {len} bytes is empty, ragged or names version 0")]
    BadVersionList {
        /// Length of the list.
        len: usize,
    },
}

impl HeaderError {
    /// Short stable reason name for counters.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Truncated(_) => "header_truncated",
            Self::FixedBitClear => "fixed_bit_clear",
            Self::CidTooLong { .. } => "cid_too_long",
            Self::LengthExceedsDatagram { .. } => "length_exceeds_datagram",
            Self::BadVersionList { .. } => "bad_version_list",
        }
    }
}

/// Parser options.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ParseOptions {
    /// Lax mode: accept a clear fixed bit, a Length past the datagram end (the packet is marked
    /// `truncated`, e.g. a capture cut by snaplen); keep what parsed. Version Negotiation is
    /// strict in both modes.
    pub lax: bool,
}

/// A validated view of one packet's header inside a datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PacketHeader<'a> {
    /// The packet bytes (header and payload) this header belongs to.
    pub packet: &'a [u8],
    /// Packet type.
    pub packet_type: PacketType,
    /// First byte as on the wire (its low bits are still header-protected).
    pub first_byte: u8,
    /// Wire version (`None` for short headers).
    pub version: Option<u32>,
    /// Destination connection ID.
    pub dcid: &'a [u8],
    /// Source connection ID (empty for short headers).
    pub scid: &'a [u8],
    /// Token (Initial and Retry).
    pub token: &'a [u8],
    /// Supported versions of a Version Negotiation packet (4 bytes each).
    pub supported_versions: &'a [u8],
    /// Retry integrity tag.
    pub retry_integrity_tag: &'a [u8],
    /// Length field (packet number + payload) of Initial, 0-RTT and Handshake packets.
    pub length: Option<u64>,
    /// Offset of the (protected) packet number from the start of the packet.
    pub pn_offset: usize,
    /// The packet was cut short (lax mode): `packet` ends before its Length says.
    pub truncated: bool,
}

impl<'a> PacketHeader<'a> {
    /// Bytes this packet occupies in its datagram.
    pub fn packet_len(&self) -> usize {
        self.packet.len()
    }

    /// True for a long header.
    pub fn is_long(&self) -> bool {
        self.first_byte & 0x80 != 0
    }

    /// The known version family, if any.
    pub fn version_family(&self) -> Option<Version> {
        self.version.and_then(Version::from_wire)
    }

    /// Fixed bit (0x40).
    pub fn fixed_bit(&self) -> bool {
        self.first_byte & 0x40 != 0
    }

    /// Spin bit of a short header (not header-protected).
    pub fn spin_bit(&self) -> Option<bool> {
        (!self.is_long()).then_some(self.first_byte & 0x20 != 0)
    }

    /// True when the packet carries an encrypted payload with a packet number.
    pub fn has_packet_number(&self) -> bool {
        matches!(
            self.packet_type,
            PacketType::Initial | PacketType::ZeroRtt | PacketType::Handshake | PacketType::OneRtt
        )
    }
}

fn read_cid<'a>(
    r: &mut Reader<'a>,
    which: &'static str,
    limit: bool,
) -> Result<&'a [u8], HeaderError> {
    let len_field = if which == "dcid" {
        "dcid length"
    } else {
        "scid length"
    };
    let len = r.u8(len_field)?;
    if limit && len > 20 {
        return Err(HeaderError::CidTooLong { which, len });
    }
    Ok(r.bytes(usize::from(len), which)?)
}

/// Parses the packet at the start of `buf` (a datagram, or what is left of it after earlier
/// coalesced packets). `short_dcid_len` is the DCID length to assume for a short header.
pub fn parse_header(
    buf: &[u8],
    short_dcid_len: usize,
    opts: ParseOptions,
) -> Result<PacketHeader<'_>, HeaderError> {
    let mut r = Reader::new(buf);
    let first = r.u8("first byte")?;
    if first & 0x80 == 0 {
        if !opts.lax && first & 0x40 == 0 {
            return Err(HeaderError::FixedBitClear);
        }
        let dcid = r.bytes(short_dcid_len, "dcid")?;
        return Ok(PacketHeader {
            packet: buf,
            packet_type: PacketType::OneRtt,
            first_byte: first,
            version: None,
            dcid,
            scid: &[],
            token: &[],
            supported_versions: &[],
            retry_integrity_tag: &[],
            length: None,
            pn_offset: r.pos(),
            truncated: false,
        });
    }
    let version = r.u32("version")?;
    let family = Version::from_wire(version);
    let mut h = PacketHeader {
        packet: buf,
        packet_type: PacketType::UnknownVersion,
        first_byte: first,
        version: Some(version),
        dcid: &[],
        scid: &[],
        token: &[],
        supported_versions: &[],
        retry_integrity_tag: &[],
        length: None,
        pn_offset: buf.len(),
        truncated: false,
    };
    let known = version == 0 || family.is_some();
    h.dcid = read_cid(&mut r, "dcid", known)?;
    h.scid = read_cid(&mut r, "scid", known)?;
    if version == 0 {
        h.packet_type = PacketType::VersionNegotiation;
        let rest = r.rest();
        let whole = rest.len() - rest.len() % 4;
        let list = rest.get(..whole).unwrap_or(&[]);
        // A server lists at least one version it supports, and 0 is no version (it marks
        // Version Negotiation itself): bytes of another protocol with a zero "version" field
        // (LLMNR queries, zero-filled blobs) fail here.
        let names_zero = list.chunks_exact(4).any(|v| v == [0, 0, 0, 0]);
        if list.is_empty() || names_zero || whole != rest.len() {
            return Err(HeaderError::BadVersionList { len: rest.len() });
        }
        h.supported_versions = list;
        return Ok(h);
    }
    let Some(family) = family else {
        return Ok(h);
    };
    if !opts.lax && first & 0x40 == 0 {
        return Err(HeaderError::FixedBitClear);
    }
    h.packet_type = PacketType::from_long_bits(family, (first >> 4) & 3);
    match h.packet_type {
        PacketType::Retry => {
            let rest = r.remaining();
            let token_len = rest.checked_sub(16).ok_or(Truncated {
                field: "retry integrity tag",
                offset: r.pos(),
                needed: 16,
                available: rest,
            })?;
            h.token = r.bytes(token_len, "token")?;
            h.retry_integrity_tag = r.bytes(16, "retry integrity tag")?;
            return Ok(h);
        }
        PacketType::Initial => {
            let token_len = r.varint("token length")?;
            let token_len = usize::try_from(token_len).unwrap_or(usize::MAX);
            h.token = r.bytes(token_len, "token")?;
        }
        _ => {}
    }
    let length = r.varint("length")?;
    h.length = Some(length);
    h.pn_offset = r.pos();
    let available = r.remaining();
    match usize::try_from(length).ok().filter(|&l| l <= available) {
        Some(l) => {
            let end = h.pn_offset.checked_add(l).unwrap_or(buf.len());
            h.packet = buf.get(..end).unwrap_or(buf);
        }
        None if opts.lax => h.truncated = true,
        None => {
            return Err(HeaderError::LengthExceedsDatagram {
                declared: length,
                available,
            })
        }
    }
    Ok(h)
}

/// Iterator over the coalesced packets of one datagram (RFC 9000 §12.2). A short-header packet
/// takes the rest of the datagram. Stops after the first error, or at trailing zero padding
/// (reported through [`CoalescedPackets::padding`]).
#[derive(Debug, Clone)]
pub struct CoalescedPackets<'a> {
    rest: &'a [u8],
    short_dcid_len: usize,
    opts: ParseOptions,
    first: bool,
    /// Bytes of trailing all-zero padding found after the last packet.
    pub padding: usize,
}

impl<'a> CoalescedPackets<'a> {
    /// Packets of `datagram`, assuming `short_dcid_len` for a short header.
    pub fn new(datagram: &'a [u8], short_dcid_len: usize, opts: ParseOptions) -> Self {
        Self {
            rest: datagram,
            short_dcid_len,
            opts,
            first: true,
            padding: 0,
        }
    }
}

impl<'a> Iterator for CoalescedPackets<'a> {
    type Item = Result<PacketHeader<'a>, HeaderError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        if !self.first && self.rest.iter().all(|&b| b == 0) {
            self.padding = self.rest.len();
            self.rest = &[];
            return None;
        }
        self.first = false;
        match parse_header(self.rest, self.short_dcid_len, self.opts) {
            Ok(h) => {
                self.rest = self.rest.get(h.packet_len()..).unwrap_or(&[]);
                Some(Ok(h))
            }
            Err(e) => {
                self.rest = &[];
                Some(Err(e))
            }
        }
    }
}
