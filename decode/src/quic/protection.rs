//! Header-protection removal, packet-number reconstruction and payload decryption.

use super::keys::{CryptoError, PacketKeys, TAG_LEN};

/// Header fields recovered by removing header protection (RFC 9001 §5.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unprotected {
    /// First byte with its protected bits restored.
    pub first_byte: u8,
    /// Packet number length in bytes (1–4).
    pub pn_len: usize,
    /// The truncated packet number as sent.
    pub truncated_pn: u64,
}

impl Unprotected {
    /// Key phase bit of a short header.
    pub fn key_phase(&self) -> bool {
        self.first_byte & 0x04 != 0
    }

    /// Reserved bits (must be 0 after removal of protection).
    pub fn reserved_bits(&self, long: bool) -> u8 {
        if long {
            (self.first_byte >> 2) & 3
        } else {
            (self.first_byte >> 3) & 3
        }
    }
}

/// Removes header protection from `packet` whose packet number starts at `pn_offset`.
pub fn unprotect_header(
    packet: &[u8],
    pn_offset: usize,
    keys: &PacketKeys,
) -> Result<Unprotected, CryptoError> {
    let first = *packet.first().ok_or(CryptoError::SampleTooShort)?;
    let sample_start = pn_offset
        .checked_add(4)
        .ok_or(CryptoError::SampleTooShort)?;
    let sample_end = sample_start
        .checked_add(16)
        .ok_or(CryptoError::SampleTooShort)?;
    let sample = packet
        .get(sample_start..sample_end)
        .ok_or(CryptoError::SampleTooShort)?;
    let mask = keys.header_mask(sample)?;
    let bits = if first & 0x80 != 0 { 0x0f } else { 0x1f };
    let first_byte = first ^ (mask[0] & bits);
    let pn_len = usize::from(first_byte & 3) + 1;
    let pn_bytes = packet
        .get(pn_offset..pn_offset + pn_len)
        .ok_or(CryptoError::SampleTooShort)?;
    let mut truncated_pn = 0u64;
    for (b, m) in pn_bytes.iter().zip(&mask[1..]) {
        truncated_pn = (truncated_pn << 8) | u64::from(b ^ m);
    }
    Ok(Unprotected {
        first_byte,
        pn_len,
        truncated_pn,
    })
}

/// Full packet number from its truncated form and the largest packet number received so far in
/// the same space (RFC 9000 Appendix A.3).
pub fn decode_packet_number(largest: Option<u64>, truncated: u64, pn_len: usize) -> u64 {
    let expected = largest.map_or(0, |l| l.saturating_add(1));
    let bits = (pn_len.clamp(1, 4) * 8) as u32;
    let win = 1u64 << bits;
    let hwin = win / 2;
    let mask = win - 1;
    let candidate = (expected & !mask) | (truncated & mask);
    if candidate.saturating_add(hwin) <= expected && candidate < (1u64 << 62) - win {
        candidate + win
    } else if candidate > expected.saturating_add(hwin) && candidate >= win {
        candidate - win
    } else {
        candidate
    }
}

/// Copies `packet` into `scratch` with header protection removed and decrypts the payload in
/// place under `nonce`. Returns the header length; the plaintext is
/// `scratch[header_len..header_len + plaintext_len]` with its length as the second value.
pub fn decrypt_into(
    packet: &[u8],
    pn_offset: usize,
    un: &Unprotected,
    keys: &PacketKeys,
    nonce: [u8; 12],
    scratch: &mut Vec<u8>,
) -> Result<(usize, usize), CryptoError> {
    let header_len = pn_offset + un.pn_len;
    if packet.len() < header_len + TAG_LEN {
        return Err(CryptoError::SampleTooShort);
    }
    scratch.clear();
    scratch.extend_from_slice(packet);
    scratch[0] = un.first_byte;
    let pn_be = un.truncated_pn.to_be_bytes();
    scratch[pn_offset..header_len].copy_from_slice(&pn_be[8 - un.pn_len..]);
    let (aad, payload) = scratch.split_at_mut(header_len);
    let n = keys.open(nonce, aad, payload)?;
    Ok((header_len, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc9000_a3_example() {
        assert_eq!(
            decode_packet_number(Some(0xa82f30ea), 0x9b32, 2),
            0xa82f9b32
        );
        assert_eq!(decode_packet_number(None, 0, 1), 0);
        assert_eq!(decode_packet_number(Some(0xff), 0x01, 1), 0x101);
        assert_eq!(decode_packet_number(Some(0x101), 0xff, 1), 0xff);
        assert_eq!(
            decode_packet_number(Some((1 << 62) - 2), 0xff, 1),
            (1 << 62) - 1
        );
    }
}
