//! kcp-go framing (xtaci/kcp-go, as used by kcptun): the optional crypto header and FEC header
//! placed before the KCP segments.
//!
//! ```text
//! with a block cipher (also `crypt none`):   | nonce 16 | crc32 4 | FEC? | KCP segments |
//! with FEC (data shard):                     | seqid 4 | type 2 = 0xf1 | size 2 | KCP segments |
//! with FEC (parity shard):                   | seqid 4 | type 2 = 0xf2 | Reed-Solomon parity |
//! out-of-band packet:                        | seqid 4 = 0xffffffff | type 2 = 0xf3 | size 2 | data |
//! ```
//!
//! All integers little-endian. The CRC-32 (IEEE) covers every byte after the CRC field and is
//! computed *before* encryption, so it verifies on the wire only for `crypt none` (kcp-go's
//! `noneBlockCrypt` copies bytes unchanged; the nonce stays random). Any real cipher encrypts the
//! whole packet, nonce included: such packets are indistinguishable from random bytes and are
//! reported as [`KcpGoError::CrcMismatch`]. The FEC `size` field counts itself plus the bytes
//! after it. FEC is recognised the way kcp-go's receiver does it: by the type at bytes 4..6,
//! which cannot collide with a KCP header (byte 4 would be the `cmd`, 81..=84).

use serde::{Deserialize, Serialize};

use super::segment::{DatagramError, Segments};

/// Random nonce length of kcp-go's crypto header.
pub const NONCE_LEN: usize = 16;
/// CRC-32 field length of kcp-go's crypto header.
pub const CRC_LEN: usize = 4;
/// Whole crypto header (nonce + CRC-32).
pub const CRYPT_HEADER_LEN: usize = NONCE_LEN + CRC_LEN;
/// FEC header (seqid + type), without the size field.
pub const FEC_HEADER_LEN: usize = 6;
/// FEC header with the 2-byte size field of data and out-of-band packets.
pub const FEC_HEADER_WITH_SIZE_LEN: usize = FEC_HEADER_LEN + 2;
/// FEC type of a data shard.
pub const FEC_TYPE_DATA: u16 = 0xf1;
/// FEC type of a Reed-Solomon parity shard.
pub const FEC_TYPE_PARITY: u16 = 0xf2;
/// FEC type of an out-of-band (unreliable, outside KCP) packet.
pub const FEC_TYPE_OOB: u16 = 0xf3;
/// Seqid kcp-go writes into every out-of-band packet.
pub const OOB_SEQID: u32 = 0xffff_ffff;

/// The kind of an FEC packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FecKind {
    /// Data shard: carries KCP segments.
    Data,
    /// Parity shard: Reed-Solomon parity of the group's data shards.
    Parity,
    /// Out-of-band packet: application bytes outside KCP.
    Oob,
}

/// Which part of the kcp-go framing an error is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KcpGoField {
    /// Nonce, bytes 0..16 of the crypto header.
    Nonce,
    /// CRC-32, bytes 16..20 of the crypto header.
    Crc,
    /// FEC seqid (4 bytes).
    FecSeqid,
    /// FEC type (2 bytes).
    FecType,
    /// FEC size (2 bytes, data and out-of-band packets).
    FecSize,
}

impl std::fmt::Display for KcpGoField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Nonce => "nonce",
            Self::Crc => "crc",
            Self::FecSeqid => "fec seqid",
            Self::FecType => "fec type",
            Self::FecSize => "fec size",
        })
    }
}

/// Why bytes are not a valid kcp-go packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KcpGoError {
    /// The bytes end inside `field`.
    #[error("kcp-go packet truncated in {field}: {required} bytes required, {actual} present")]
    Truncated {
        /// The field the bytes end in.
        field: KcpGoField,
        /// Bytes needed up to the end of that field.
        required: usize,
        /// Bytes present.
        actual: usize,
    },
    /// The CRC-32 in the crypto header does not match the bytes (encrypted, or not kcp-go).
    #[error("kcp-go CRC-32 mismatch: header says {expected:#010x}, bytes give {computed:#010x}")]
    CrcMismatch {
        /// CRC-32 stored in the header.
        expected: u32,
        /// CRC-32 computed over the bytes after the header.
        computed: u32,
    },
    /// The FEC type is none of 0xf1, 0xf2, 0xf3.
    #[error("unknown kcp-go FEC type {0:#06x}")]
    UnknownFecType(u16),
    /// The FEC size field disagrees with the packet length.
    #[error("kcp-go FEC size field says {declared} bytes, packet has {actual}")]
    FecSizeMismatch {
        /// Value of the size field.
        declared: u16,
        /// Size field plus the bytes after it.
        actual: usize,
    },
    /// An out-of-band packet whose seqid is not 0xffffffff.
    #[error("kcp-go out-of-band packet with seqid {0:#010x} (expected 0xffffffff)")]
    OobSeqid(u32),
    /// The KCP segments inside are malformed.
    #[error("KCP inside kcp-go framing: {0}")]
    Kcp(DatagramError),
}

// Its message says the inner error; `source()` is left empty so that a printed chain names it
// once.
impl From<DatagramError> for KcpGoError {
    fn from(e: DatagramError) -> Self {
        KcpGoError::Kcp(e)
    }
}

/// A validated view of kcp-go's crypto header with a verified CRC-32 (so: `crypt none`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CryptHeader<'a> {
    nonce: &'a [u8; NONCE_LEN],
    crc: u32,
    body: &'a [u8],
}

impl<'a> CryptHeader<'a> {
    /// Validates the crypto header and its CRC-32 over the rest of `bytes`.
    pub fn from_slice(bytes: &'a [u8]) -> Result<Self, KcpGoError> {
        let (nonce, after) =
            bytes
                .split_first_chunk::<NONCE_LEN>()
                .ok_or(KcpGoError::Truncated {
                    field: KcpGoField::Nonce,
                    required: NONCE_LEN,
                    actual: bytes.len(),
                })?;
        let (crc, body) = after
            .split_first_chunk::<CRC_LEN>()
            .ok_or(KcpGoError::Truncated {
                field: KcpGoField::Crc,
                required: CRYPT_HEADER_LEN,
                actual: bytes.len(),
            })?;
        let expected = u32::from_le_bytes(*crc);
        let computed = crc32fast::hash(body);
        if expected != computed {
            return Err(KcpGoError::CrcMismatch { expected, computed });
        }
        Ok(Self {
            nonce,
            crc: expected,
            body,
        })
    }

    /// The 16-byte nonce.
    pub fn nonce(&self) -> &'a [u8; NONCE_LEN] {
        self.nonce
    }
    /// The verified CRC-32.
    pub fn crc(&self) -> u32 {
        self.crc
    }
    /// The bytes after the header (FEC header or KCP segments).
    pub fn body(&self) -> &'a [u8] {
        self.body
    }
}

/// A validated view of an FEC packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FecPacket<'a> {
    seqid: u32,
    kind: FecKind,
    payload: &'a [u8],
}

impl<'a> FecPacket<'a> {
    /// True when bytes 4..6 hold an FEC type (how kcp-go's receiver tells FEC from bare KCP).
    #[inline]
    pub fn looks_like_fec(bytes: &[u8]) -> bool {
        matches!(bytes.get(4..6), Some([0xf1..=0xf3, 0x00]))
    }

    /// Validates the FEC header (and, for data and out-of-band packets, the size field).
    pub fn from_slice(bytes: &'a [u8]) -> Result<Self, KcpGoError> {
        let actual = bytes.len();
        let (seqid, after) = bytes
            .split_first_chunk::<4>()
            .ok_or(KcpGoError::Truncated {
                field: KcpGoField::FecSeqid,
                required: 4,
                actual,
            })?;
        let (kind, after) = after
            .split_first_chunk::<2>()
            .ok_or(KcpGoError::Truncated {
                field: KcpGoField::FecType,
                required: FEC_HEADER_LEN,
                actual,
            })?;
        let seqid = u32::from_le_bytes(*seqid);
        let kind = match u16::from_le_bytes(*kind) {
            FEC_TYPE_DATA => FecKind::Data,
            FEC_TYPE_PARITY => FecKind::Parity,
            FEC_TYPE_OOB => FecKind::Oob,
            other => return Err(KcpGoError::UnknownFecType(other)),
        };
        if kind == FecKind::Parity {
            return Ok(Self {
                seqid,
                kind,
                payload: after,
            });
        }
        if kind == FecKind::Oob && seqid != OOB_SEQID {
            return Err(KcpGoError::OobSeqid(seqid));
        }
        let (size, payload) = after
            .split_first_chunk::<2>()
            .ok_or(KcpGoError::Truncated {
                field: KcpGoField::FecSize,
                required: FEC_HEADER_WITH_SIZE_LEN,
                actual,
            })?;
        let declared = u16::from_le_bytes(*size);
        let sized = after.len();
        if usize::from(declared) != sized {
            return Err(KcpGoError::FecSizeMismatch {
                declared,
                actual: sized,
            });
        }
        Ok(Self {
            seqid,
            kind,
            payload,
        })
    }

    /// FEC sequence id (data and parity shards of one group are consecutive).
    pub fn seqid(&self) -> u32 {
        self.seqid
    }
    /// Data, parity or out-of-band.
    pub fn kind(&self) -> FecKind {
        self.kind
    }
    /// Bytes after the header: KCP segments (data), parity bytes, or out-of-band data.
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }
}

/// How a kcp-go sender was configured, as far as the wire shows it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KcpGoFraming {
    /// The 20-byte nonce + CRC-32 header is present (`crypt none`, CRC verified).
    pub crypt_none: bool,
    /// An FEC header is present.
    pub fec: bool,
}

/// Summary of a kcp-go packet's framing for output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KcpGoSummary {
    /// Verified CRC-32, when the crypto header is present.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crc: Option<u32>,
    /// FEC seqid, when an FEC header is present.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fec_seqid: Option<u32>,
    /// FEC kind, when an FEC header is present.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fec_kind: Option<FecKind>,
}

/// A validated kcp-go packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KcpGoPacket<'a> {
    /// The crypto header, when the packet carries one.
    pub crypt: Option<CryptHeader<'a>>,
    /// The FEC header, when the packet carries one.
    pub fec: Option<FecPacket<'a>>,
    /// The KCP segments (every one validated; empty for parity and out-of-band packets).
    pub segments: &'a [u8],
}

impl<'a> KcpGoPacket<'a> {
    /// Which framing layers are present.
    pub fn framing(&self) -> KcpGoFraming {
        KcpGoFraming {
            crypt_none: self.crypt.is_some(),
            fec: self.fec.is_some(),
        }
    }

    /// Walks the KCP segments (all valid: checked at decode).
    pub fn iter_segments(&self) -> Segments<'a> {
        Segments::new(self.segments)
    }

    /// Owned framing summary.
    pub fn summary(&self) -> KcpGoSummary {
        KcpGoSummary {
            crc: self.crypt.map(|c| c.crc()),
            fec_seqid: self.fec.map(|f| f.seqid()),
            fec_kind: self.fec.map(|f| f.kind()),
        }
    }
}

/// Validates every KCP segment of `bytes` (at least one, tiling `bytes` exactly).
pub(crate) fn check_segments(bytes: &[u8]) -> Result<(), DatagramError> {
    if bytes.is_empty() {
        // Zero segments: report as a truncated first header.
        return super::segment::decode_strict(bytes).map(|_| ());
    }
    for item in Segments::new(bytes) {
        item?;
    }
    Ok(())
}

/// Decodes a kcp-go packet. `crypt_header` says whether the 20-byte crypto header is expected
/// (a kcp-go session either always or never has it); FEC is recognised from the type field.
pub fn decode(bytes: &[u8], crypt_header: bool) -> Result<KcpGoPacket<'_>, KcpGoError> {
    let (crypt, body) = if crypt_header {
        let c = CryptHeader::from_slice(bytes)?;
        (Some(c), c.body())
    } else {
        (None, bytes)
    };
    if FecPacket::looks_like_fec(body) {
        let fec = FecPacket::from_slice(body)?;
        let segments = match fec.kind() {
            FecKind::Data => {
                check_segments(fec.payload())?;
                fec.payload()
            }
            FecKind::Parity | FecKind::Oob => &[],
        };
        Ok(KcpGoPacket {
            crypt,
            fec: Some(fec),
            segments,
        })
    } else {
        check_segments(body)?;
        Ok(KcpGoPacket {
            crypt,
            fec: None,
            segments: body,
        })
    }
}
