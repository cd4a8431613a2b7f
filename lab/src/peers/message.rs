//! The control-signal message every peer sends: a fixed header with the message id and send
//! timestamps, padded to the profile's size.
//!
//! ```text
//! 0      4          5     6        8        16            24            32
//! "TBXM" transport  path  len u16  id u64   send unix ns  send mono ns  padding…
//! ```
//! All integers little-endian. `len` is the whole message length, so stream transports (TCP)
//! can split the byte stream back into messages.

/// Length of the fixed header.
pub const HEADER_LEN: usize = 32;
/// Magic at the start of every message.
pub const MAGIC: [u8; 4] = *b"TBXM";

/// A decoded message header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message {
    /// Transport index (see `Transport::index`).
    pub transport: u8,
    /// Path the copy was sent on: 0 = A, 1 = B.
    pub path: u8,
    /// Whole message length in bytes.
    pub len: u16,
    /// Message id (per transport, from 0).
    pub id: u64,
    /// Send time, CLOCK_REALTIME ns.
    pub send_unix_ns: u64,
    /// Send time, CLOCK_MONOTONIC ns.
    pub send_mono_ns: u64,
}

/// Why bytes are not a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    /// Fewer bytes than the header.
    #[error("message truncated: {actual} bytes, need {required}")]
    Truncated {
        /// Bytes needed.
        required: usize,
        /// Bytes present.
        actual: usize,
    },
    /// The magic is wrong.
    #[error("not a lab message (bad magic)")]
    BadMagic,
    /// The length field is shorter than the header.
    #[error("bad length field {0}")]
    BadLength(u16),
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    if let Some(s) = b.get(at..at + 8) {
        a.copy_from_slice(s);
    }
    u64::from_le_bytes(a)
}

impl Message {
    /// Encodes into a buffer of `len` bytes (at least the header).
    pub fn encode(&self) -> Vec<u8> {
        let len = usize::from(self.len).max(HEADER_LEN);
        let mut b = vec![0u8; len];
        b[0..4].copy_from_slice(&MAGIC);
        b[4] = self.transport;
        b[5] = self.path;
        b[6..8].copy_from_slice(&(len as u16).to_le_bytes());
        b[8..16].copy_from_slice(&self.id.to_le_bytes());
        b[16..24].copy_from_slice(&self.send_unix_ns.to_le_bytes());
        b[24..32].copy_from_slice(&self.send_mono_ns.to_le_bytes());
        for (i, x) in b[HEADER_LEN..].iter_mut().enumerate() {
            *x = (i % 251) as u8;
        }
        b
    }

    /// Decodes the header of `b` (the padding is not checked).
    pub fn decode(b: &[u8]) -> Result<Message, MessageError> {
        if b.len() < HEADER_LEN {
            return Err(MessageError::Truncated {
                required: HEADER_LEN,
                actual: b.len(),
            });
        }
        if b[0..4] != MAGIC {
            return Err(MessageError::BadMagic);
        }
        let len = u16::from_le_bytes([b[6], b[7]]);
        if usize::from(len) < HEADER_LEN {
            return Err(MessageError::BadLength(len));
        }
        Ok(Message {
            transport: b[4],
            path: b[5],
            len,
            id: u64_at(b, 8),
            send_unix_ns: u64_at(b, 16),
            send_mono_ns: u64_at(b, 24),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_every_truncation() {
        let m = Message {
            transport: 3,
            path: 1,
            len: 600,
            id: 42,
            send_unix_ns: 7,
            send_mono_ns: 9,
        };
        let b = m.encode();
        assert_eq!(b.len(), 600);
        assert_eq!(Message::decode(&b).unwrap(), m);
        for n in 0..HEADER_LEN {
            assert!(matches!(
                Message::decode(&b[..n]),
                Err(MessageError::Truncated { .. })
            ));
        }
        let mut bad = b.clone();
        bad[0] = b'X';
        assert_eq!(Message::decode(&bad), Err(MessageError::BadMagic));
        let mut bad = b;
        bad[6] = 5;
        bad[7] = 0;
        assert_eq!(Message::decode(&bad), Err(MessageError::BadLength(5)));
    }
}
