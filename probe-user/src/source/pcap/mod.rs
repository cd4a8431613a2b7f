//! Packets from libpcap (live, several interfaces) or from `.pcap`/`.pcapng` files.
pub mod file;
pub mod live;
pub mod readahead;

pub use file::{
    CaptureFile, CaptureReader, FileError, FileReading, Format, FormatIssue, Interface, Packet,
    Secrets, SECRETS_TLS_KEY_LOG,
};
pub use live::{
    InterfaceSpec, LiveCapture, LiveConfig, LiveError, LiveEvent, LivePacket, PathStats,
};
pub use readahead::ReadAhead;
