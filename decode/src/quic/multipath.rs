//! Multipath QUIC: frame type code points and the per-path AEAD nonce.
//!
//! Three dialects are recognised:
//! - the current IETF draft (draft-ietf-quic-multipath-21 code points, `0x3e…`);
//! - the earlier IETF drafts (-07 to -19) that used the provisional `0x15228c…` code points with
//!   the same frame layouts;
//! - drafts -04 to -06, where paths are named by the sequence number of their destination
//!   connection ID: -04 with the `0xbaba…` code points (xquic's `MULTIPATH_04`), -05 and -06
//!   (tquic, xquic's `MULTIPATH_05`) with the `0x15228c…` ones that later drafts kept for
//!   PATH_ACK and PATH_ABANDON. An ACK_MP of -05/-06 (0x15228c00) is laid out as a PATH_ACK
//!   of -07 to -19, its first field the DCID sequence number: which one it names is the
//!   connection's [`MultipathMode`], which the AEAD nonce proves.
//!
//! In every dialect the nonce of a 1-RTT packet is the IV xor a 96-bit value made of a 32-bit
//! path identifier (the Path ID, or in draft-05 the DCID sequence number) in network byte order,
//! two zero bits and the 62-bit packet number; single-path QUIC is the special case path 0.

/// PATH_ACK (current draft).
pub const PATH_ACK: u64 = 0x3e;
/// PATH_ACK with ECN counts (current draft).
pub const PATH_ACK_ECN: u64 = 0x3f;
/// PATH_ABANDON (current draft).
pub const PATH_ABANDON: u64 = 0x3e75;
/// PATH_STATUS_BACKUP (current draft).
pub const PATH_STATUS_BACKUP: u64 = 0x3e76;
/// PATH_STATUS_AVAILABLE (current draft).
pub const PATH_STATUS_AVAILABLE: u64 = 0x3e77;
/// PATH_NEW_CONNECTION_ID (current draft).
pub const PATH_NEW_CONNECTION_ID: u64 = 0x3e78;
/// PATH_RETIRE_CONNECTION_ID (current draft).
pub const PATH_RETIRE_CONNECTION_ID: u64 = 0x3e79;
/// MAX_PATH_ID (current draft).
pub const MAX_PATH_ID: u64 = 0x3e7a;
/// PATHS_BLOCKED (current draft).
pub const PATHS_BLOCKED: u64 = 0x3e7b;
/// PATH_CIDS_BLOCKED (current draft).
pub const PATH_CIDS_BLOCKED: u64 = 0x3e7c;

/// PATH_ACK (drafts -07 to -19); ACK_MP in drafts -05/-06 (first field the DCID sequence
/// number).
pub const PATH_ACK_OLD: u64 = 0x1522_8c00;
/// PATH_ACK_ECN (drafts -07 to -19).
pub const PATH_ACK_ECN_OLD: u64 = 0x1522_8c01;
/// PATH_ABANDON (drafts -05 to -19; read without the reason phrase that -05/-06 add).
pub const PATH_ABANDON_OLD: u64 = 0x1522_8c05;
/// PATH_STATUS_BACKUP (drafts -07 to -19).
pub const PATH_STATUS_BACKUP_OLD: u64 = 0x1522_8c07;
/// PATH_STATUS_AVAILABLE (drafts -07 to -19).
pub const PATH_STATUS_AVAILABLE_OLD: u64 = 0x1522_8c08;
/// PATH_NEW_CONNECTION_ID (drafts -07 to -19).
pub const PATH_NEW_CONNECTION_ID_OLD: u64 = 0x1522_8c09;
/// PATH_RETIRE_CONNECTION_ID (drafts -07 to -19).
pub const PATH_RETIRE_CONNECTION_ID_OLD: u64 = 0x1522_8c0a;
/// MAX_PATH_ID (drafts -07 to -19).
pub const MAX_PATH_ID_OLD: u64 = 0x1522_8c0c;
/// PATHS_BLOCKED (drafts -07 to -19).
pub const PATHS_BLOCKED_OLD: u64 = 0x1522_8c0d;
/// PATH_CIDS_BLOCKED (drafts -07 to -19).
pub const PATH_CIDS_BLOCKED_OLD: u64 = 0x1522_8c0e;

/// ACK_MP (draft-04): ACK fields preceded by the DCID sequence number.
pub const ACK_MP_04: u64 = 0xbaba00;
/// ACK_MP with ECN counts (draft-04).
pub const ACK_MP_ECN_04: u64 = 0xbaba01;
/// PATH_ABANDON (draft-04): DCID sequence number, error code, reason phrase.
pub const PATH_ABANDON_04: u64 = 0xbaba05;
/// PATH_STATUS (draft-04): DCID sequence number, status sequence number, status (1 standby,
/// 2 available).
pub const PATH_STATUS_04: u64 = 0xbaba06;
/// PATH_STATUS (draft-05, as tquic 1.6 reads it): the layout of [`PATH_STATUS_04`]. Drafts
/// -06 on split it into PATH_STANDBY/PATH_AVAILABLE (0x15228c07/08) and never reused it.
pub const PATH_STATUS_05: u64 = 0x1522_8c06;

/// Which multipath rules a connection follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MultipathMode {
    /// Single-path QUIC (RFC 9000): one application packet-number space.
    #[default]
    None,
    /// Current IETF draft: Path IDs from PATH_NEW_CONNECTION_ID, a PN space per path.
    PathId,
    /// Drafts -04 to -06 (tquic): a PN space per destination connection ID sequence number.
    CidSequence,
}

/// The packet-number space that a plain ACK frame (type 0x02/0x03) of a multipath packet
/// acknowledges, for a packet on `path` whose opposite direction on the same addresses was last
/// seen on `opposite` (the other endpoint's path identifier there).
///
/// - draft-05 as tquic sends it: an endpoint acknowledges a path's packets with plain ACK
///   frames sent on that same path (tquic 1.6 `Connection::try_write_ack_frame` takes the space
///   of the path it writes on, and a received ACK is applied to the space of the path it came
///   on). The space is named by the DCID sequence number the acknowledged packets carry, which
///   need not be the one the ACK's own packet carries: the opposite direction's, when seen,
///   else the packet's own. ACK_MP frames name their space themselves.
/// - Current drafts (Path IDs): ACK frames acknowledge path 0; PATH_ACK frames name their path.
/// - Single-path QUIC: `None` (the one application space, 0).
pub fn plain_ack_space(mode: MultipathMode, path: u64, opposite: Option<u64>) -> Option<u64> {
    match mode {
        MultipathMode::None => None,
        MultipathMode::PathId => Some(0),
        MultipathMode::CidSequence => Some(opposite.unwrap_or(path)),
    }
}

/// The multipath AEAD nonce: `iv` xor (32-bit `path_id` ‖ 2 zero bits ‖ 62-bit `pn`).
/// With `path_id` 0 this equals the single-path nonce of RFC 9001 §5.3.
pub fn nonce(iv: &[u8; 12], path_id: u32, pn: u64) -> [u8; 12] {
    let mut v = [0u8; 12];
    v[..4].copy_from_slice(&path_id.to_be_bytes());
    v[4..].copy_from_slice(&(pn & ((1 << 62) - 1)).to_be_bytes());
    let mut n = *iv;
    for (d, s) in n.iter_mut().zip(v) {
        *d ^= s;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plain ACK frames per dialect: draft-05 (tquic) the space of the acknowledged packets on
    /// the same path (the opposite direction's DCID sequence, else the packet's own), current
    /// drafts path 0, single path none (the one space).
    #[test]
    fn plain_ack_space_per_dialect() {
        use MultipathMode::{CidSequence, None as Single, PathId};
        assert_eq!(plain_ack_space(CidSequence, 1, Some(2)), Some(2));
        assert_eq!(plain_ack_space(CidSequence, 1, None), Some(1));
        assert_eq!(plain_ack_space(CidSequence, 0, Some(0)), Some(0));
        assert_eq!(plain_ack_space(PathId, 3, Some(3)), Some(0));
        assert_eq!(plain_ack_space(Single, 0, None), None);
    }

    /// The latest path per (addresses, sender), bounded.
    #[test]
    fn path_addrs_keep_the_latest_path_per_direction() {
        use crate::quic::conn::{PathAddrs, CLIENT, MAX_PATH_SPACES, SERVER};
        let a = |p: u16| -> std::net::SocketAddr { ([10, 0, 0, 1], p).into() };
        let mut t = PathAddrs::default();
        t.record((a(1), a(2)), CLIENT, 0);
        t.record((a(3), a(2)), CLIENT, 1);
        t.record((a(2), a(3)), SERVER, 4);
        assert_eq!(t.get((a(3), a(2)), CLIENT), Some(1));
        assert_eq!(t.get((a(2), a(3)), SERVER), Some(4));
        assert_eq!(t.get((a(2), a(3)), CLIENT), None);
        t.record((a(3), a(2)), CLIENT, 2);
        assert_eq!(t.get((a(3), a(2)), CLIENT), Some(2));
        for p in 0..MAX_PATH_SPACES as u16 {
            t.record((a(100 + p), a(2)), CLIENT, u64::from(p));
        }
        assert_eq!(t.get((a(1), a(2)), CLIENT), None);
        assert_eq!(
            t.get((a(99 + MAX_PATH_SPACES as u16), a(2)), CLIENT),
            Some(63)
        );
    }

    #[test]
    fn nonce_layout() {
        // Worked from the draft's definition: IV bytes 0..4 are xored with the path ID, bytes
        // 4..12 with the packet number (top two bits zero).
        let iv = [
            0x6b, 0x26, 0x11, 0x4b, 0x9c, 0xba, 0x2b, 0x63, 0xa9, 0xe8, 0xdd, 0x4f,
        ];
        assert_eq!(
            nonce(&iv, 0, 0x0123_4567),
            [0x6b, 0x26, 0x11, 0x4b, 0x9c, 0xba, 0x2b, 0x63, 0xa8, 0xcb, 0x98, 0x28]
        );
        assert_eq!(
            nonce(&iv, 3, 0x0123_4567),
            [0x6b, 0x26, 0x11, 0x48, 0x9c, 0xba, 0x2b, 0x63, 0xa8, 0xcb, 0x98, 0x28]
        );
        assert_eq!(
            nonce(&iv, 0xdead_beef, 1),
            [0xb5, 0x8b, 0xaf, 0xa4, 0x9c, 0xba, 0x2b, 0x63, 0xa9, 0xe8, 0xdd, 0x4e]
        );
        // 2^62 - 1 is the largest packet number; the two bits above it stay zero.
        assert_eq!(
            nonce(&[0; 12], 1, (1 << 62) - 1),
            [0, 0, 0, 1, 0x3f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]
        );
        assert_eq!(
            nonce(&iv, 0, 0x0123_4567),
            crate::quic::keys::nonce(&iv, 0x0123_4567)
        );
    }
}
