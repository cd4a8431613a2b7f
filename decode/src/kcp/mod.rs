//! KCP: raw ikcp segments, kcp-go framing and port-free detection. What the segments mean for
//! messages, copies across paths and latency is the correlation engine's business.
//!
//! - [`segment`]: zero-copy [`Segment`] views, the [`Segments`] walk of a datagram, strict and
//!   lax decoding, the owned [`KcpSegment`] summary.
//! - [`kcpgo`]: kcp-go's `crypt none` header (CRC-32 verified) and FEC header.
//! - [`detect`]: [`Detector`], which decides whether a UDP payload is KCP without port
//!   configuration (optional forced ports) and counts every rejection by reason.

pub mod detect;
pub mod kcpgo;
pub mod segment;

pub use detect::{
    Detection, Detector, DetectorConfig, DetectorStats, KcpDatagram, RejectReason, ValidSegments,
};
pub use kcpgo::{FecKind, KcpGoError, KcpGoFraming, KcpGoPacket};
pub use segment::{
    decode_lax, decode_strict, Cmd, DatagramError, Field, KcpSegment, LaxDatagram, Segment,
    SegmentError, Segments, HEADER_LEN,
};
