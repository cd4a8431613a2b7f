//! Wire decoders: each takes `&[u8]`, validates once, never panics, and names every rejection.
//!
//! A separate crate from `probe-user` so that fuzz targets and benchmarks link only the decoders
//! (no libpcap, aya or tokio).

pub mod icmp;
pub mod kcp;
pub mod net;
pub mod quic;
pub mod tcp;
