//! Helpers shared by the workspace's tests, examples and benches (a dev-dependency only):
//! capture files and frames written byte by byte from the format specs ([`pcap`]), network
//! namespaces joined by veth pairs ([`netns`]), protected QUIC traffic ([`quic`]) and far ends
//! that answer it ([`peers`]). They panic
//! on any failure: that is a failed test.

pub mod netns;
pub mod pcap;
pub mod peers;
pub mod quic;
pub mod tcpflow;

/// The public capture `name` in the shared fixtures beside the repository
/// (`../shared/fixtures`, see its README).
#[must_use]
pub fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures")
        .join(name)
}
