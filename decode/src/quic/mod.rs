//! QUIC decoding: headers (v1, v2, draft-29), coalesced packets, Initial decryption without keys,
//! Handshake/0-RTT/1-RTT decryption with a TLS keylog, key updates, frames, connection-ID
//! tracking and multipath QUIC.
//!
//! Layers, each usable alone:
//! - [`header`]: validated zero-copy header views ([`header::parse_header`],
//!   [`header::CoalescedPackets`]).
//! - [`keys`], [`protection`]: key derivation, header protection, packet numbers, AEAD.
//! - [`retry`]: Retry Integrity Tag verification (v1, v2, draft-29).
//! - [`frame`]: zero-copy frame iterator.
//! - [`keylog`], [`tls`]: secrets and the ClientHello/ServerHello fields that select them.
//! - [`decoder::QuicDecoder`]: the stateful sans-IO decoder tying it together.

pub mod conn;
pub mod decoder;
pub mod frame;
pub mod header;
pub mod hunt;
pub mod keylog;
pub mod keys;
pub mod multipath;
pub mod protection;
pub mod retry;
pub mod summary;
pub mod tls;
pub mod varint;

pub use conn::Undecrypted;
pub use decoder::{ConnectionInfo, DatagramInfo, DecodedPacket, DecoderConfig, QuicDecoder};
pub use frame::{Frame, FrameError, Frames};
pub use header::{
    parse_header, CoalescedPackets, HeaderError, PacketHeader, PacketType, ParseOptions, Version,
};
pub use keylog::{Keylog, KeylogError};
pub use summary::{FrameSummary, PacketSummary, QuicStats};
