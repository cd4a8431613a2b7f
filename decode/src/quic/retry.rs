//! Retry Integrity Tag (RFC 9001 §5.8; RFC 9369 §3.3.3 for v2): AES-128-GCM with a fixed,
//! version-specific key and nonce over the Retry pseudo-packet (the client's original
//! Destination Connection ID, length-prefixed, followed by the Retry packet without its tag).
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM};

use super::header::Version;

/// Length of the Retry Integrity Tag.
pub const TAG_LEN: usize = 16;

/// The fixed key and nonce of each version.
fn key_and_nonce(version: Version) -> ([u8; 16], [u8; 12]) {
    match version {
        Version::V1 => (
            [
                0xbe, 0x0c, 0x69, 0x0b, 0x9f, 0x66, 0x57, 0x5a, 0x1d, 0x76, 0x6b, 0x54, 0xe3, 0x68,
                0xc8, 0x4e,
            ],
            [
                0x46, 0x15, 0x99, 0xd3, 0x5d, 0x63, 0x2b, 0xf2, 0x23, 0x98, 0x25, 0xbb,
            ],
        ),
        Version::V2 => (
            [
                0x8f, 0xb4, 0xb0, 0x1b, 0x56, 0xac, 0x48, 0xe2, 0x60, 0xfb, 0xcb, 0xce, 0xad, 0x7c,
                0xcc, 0x92,
            ],
            [
                0xd8, 0x69, 0x69, 0xbc, 0x2d, 0x7c, 0x6d, 0x99, 0x90, 0xef, 0xb0, 0x4a,
            ],
        ),
        Version::Draft29 => (
            [
                0xcc, 0xce, 0x18, 0x7e, 0xd0, 0x9a, 0x09, 0xd0, 0x57, 0x28, 0x15, 0x5a, 0x6c, 0xb9,
                0x6b, 0xe1,
            ],
            [
                0xe5, 0x49, 0x30, 0xf9, 0x7f, 0x21, 0x36, 0xf0, 0x53, 0x0a, 0x8c, 0x1c,
            ],
        ),
    }
}

/// The Retry Integrity Tag of `retry_without_tag` (the Retry packet's bytes before its tag)
/// sent in answer to a client Initial whose Destination Connection ID was `original_dcid`.
/// `None` if `original_dcid` is longer than 255 bytes (no valid packet has such an ID).
pub fn integrity_tag(
    version: Version,
    original_dcid: &[u8],
    retry_without_tag: &[u8],
) -> Option<[u8; TAG_LEN]> {
    let odcid_len = u8::try_from(original_dcid.len()).ok()?;
    let (key, nonce) = key_and_nonce(version);
    let key = LessSafeKey::new(UnboundKey::new(&AES_128_GCM, &key).ok()?);
    let mut pseudo = Vec::with_capacity(1 + original_dcid.len() + retry_without_tag.len());
    pseudo.push(odcid_len);
    pseudo.extend_from_slice(original_dcid);
    pseudo.extend_from_slice(retry_without_tag);
    let tag = key
        .seal_in_place_separate_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(&pseudo[..]),
            &mut [],
        )
        .ok()?;
    tag.as_ref().try_into().ok()
}

/// True when `retry` (a whole Retry packet, tag last) carries the right integrity tag for a
/// client whose first Initial had Destination Connection ID `original_dcid`.
pub fn verify(version: Version, original_dcid: &[u8], retry: &[u8]) -> bool {
    let Some(split) = retry.len().checked_sub(TAG_LEN) else {
        return false;
    };
    let (body, tag) = retry.split_at(split);
    integrity_tag(version, original_dcid, body).is_some_and(|t| tags_equal(&t, tag))
}

/// Compares two tags without stopping at the first difference.
fn tags_equal(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len() / 2)
            .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap_or(0))
            .collect()
    }

    const ODCID: &str = "8394c8f03e515708";

    #[test]
    fn rfc9001_a4_and_rfc9369_a4_retry_packets_verify() {
        // RFC 9001 Appendix A.4 (v1) and RFC 9369 Appendix A.4 (v2).
        for (version, packet) in [
            (
                Version::V1,
                "ff000000010008f067a5502a4262b5746f6b656e04a265ba2eff4d829058fb3f0f2496ba",
            ),
            (
                Version::V2,
                "cf6b3343cf0008f067a5502a4262b5746f6b656ec8646ce8bfe33952d955543665dcc7b6",
            ),
        ] {
            let packet = unhex(packet);
            let odcid = unhex(ODCID);
            assert!(verify(version, &odcid, &packet), "{version:?}");
            // Another original DCID, another version's key, or any flipped bit: refused.
            assert!(!verify(version, &odcid[1..], &packet));
            let other = if version == Version::V1 {
                Version::V2
            } else {
                Version::V1
            };
            assert!(!verify(other, &odcid, &packet));
            for i in 0..packet.len() {
                let mut bad = packet.clone();
                bad[i] ^= 0x01;
                assert!(!verify(version, &odcid, &bad), "{version:?} byte {i}");
            }
            assert!(!verify(version, &odcid, &packet[..TAG_LEN - 1]));
        }
    }
}
