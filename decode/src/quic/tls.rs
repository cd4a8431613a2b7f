//! CRYPTO stream reassembly and the TLS 1.3 ClientHello / ServerHello fields the decoder needs
//! (client random to pick keylog secrets, SNI and ALPN for display, cipher suite for keys).

use super::varint::{Reader, Truncated};
use std::collections::BTreeMap;

/// Bytes of CRYPTO data kept per packet-number space; handshakes are far smaller.
pub const MAX_CRYPTO_BYTES: usize = 64 * 1024;

/// CRYPTO data of one packet-number space and direction, reassembled by offset.
#[derive(Debug, Clone, Default)]
pub struct CryptoStream {
    contiguous: Vec<u8>,
    pending: BTreeMap<u64, Vec<u8>>,
    /// Bytes dropped because they were past [`MAX_CRYPTO_BYTES`].
    pub dropped: u64,
}

impl CryptoStream {
    /// Adds the data of one CRYPTO frame; returns true when new contiguous data became available.
    pub fn insert(&mut self, offset: u64, data: &[u8]) -> bool {
        let Some(end) = offset.checked_add(data.len() as u64) else {
            return false;
        };
        if end > MAX_CRYPTO_BYTES as u64 {
            self.dropped = self.dropped.saturating_add(data.len() as u64);
            return false;
        }
        let have = self.contiguous.len() as u64;
        if end <= have {
            return false;
        }
        if offset > have {
            self.pending.insert(offset, data.to_vec());
            return false;
        }
        let skip = usize::try_from(have - offset).unwrap_or(0);
        self.contiguous
            .extend_from_slice(data.get(skip..).unwrap_or(&[]));
        while let Some((&o, _)) = self.pending.first_key_value() {
            if o > self.contiguous.len() as u64 {
                break;
            }
            if let Some((o, d)) = self.pending.pop_first() {
                let skip = usize::try_from(self.contiguous.len() as u64 - o).unwrap_or(usize::MAX);
                if let Some(tail) = d.get(skip..) {
                    self.contiguous.extend_from_slice(tail);
                }
            }
        }
        true
    }

    /// The reassembled data from offset 0.
    pub fn contiguous(&self) -> &[u8] {
        &self.contiguous
    }
}

/// What the decoder reads from a ClientHello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientHello {
    /// Client random: the keylog key.
    pub random: [u8; 32],
    /// Server name indication.
    pub sni: Option<String>,
    /// ALPN protocols offered.
    pub alpn: Vec<String>,
}

/// What the decoder reads from a ServerHello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerHello {
    /// Server random.
    pub random: [u8; 32],
    /// Chosen cipher suite code point.
    pub cipher_suite: u16,
}

/// One handshake message found in CRYPTO data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeMessage {
    /// ClientHello.
    ClientHello(ClientHello),
    /// ServerHello.
    ServerHello(ServerHello),
}

fn random(r: &mut Reader<'_>) -> Result<[u8; 32], Truncated> {
    let b = r.bytes(32, "random")?;
    let mut out = [0u8; 32];
    out.copy_from_slice(b);
    Ok(out)
}

/// Finds the first ClientHello or ServerHello at the start of reassembled CRYPTO data. Returns
/// `Ok(None)` if the message is not complete yet (or is another type).
pub fn parse_hello(data: &[u8]) -> Result<Option<HandshakeMessage>, Truncated> {
    let mut r = Reader::new(data);
    let Ok(msg_type) = r.u8("handshake type") else {
        return Ok(None);
    };
    let Ok(len) = r.u24("handshake length") else {
        return Ok(None);
    };
    let Ok(body) = r.bytes(len as usize, "handshake body") else {
        return Ok(None);
    };
    let mut b = Reader::new(body);
    match msg_type {
        1 => {
            b.u16("legacy version")?;
            let random = random(&mut b)?;
            let sid = b.u8("session id length")?;
            b.bytes(usize::from(sid), "session id")?;
            let cs = b.u16("cipher suites length")?;
            b.bytes(usize::from(cs), "cipher suites")?;
            let cm = b.u8("compression methods length")?;
            b.bytes(usize::from(cm), "compression methods")?;
            let mut hello = ClientHello {
                random,
                sni: None,
                alpn: Vec::new(),
            };
            if b.is_empty() {
                return Ok(Some(HandshakeMessage::ClientHello(hello)));
            }
            let ext_len = b.u16("extensions length")?;
            let mut ext = Reader::new(b.bytes(usize::from(ext_len), "extensions")?);
            while !ext.is_empty() {
                let ty = ext.u16("extension type")?;
                let len = ext.u16("extension length")?;
                let mut e = Reader::new(ext.bytes(usize::from(len), "extension data")?);
                match ty {
                    0 => {
                        let list = e.u16("server name list length")?;
                        let mut l = Reader::new(e.bytes(usize::from(list), "server name list")?);
                        while !l.is_empty() {
                            let kind = l.u8("server name type")?;
                            let n = l.u16("server name length")?;
                            let name = l.bytes(usize::from(n), "server name")?;
                            if kind == 0 && hello.sni.is_none() {
                                hello.sni = Some(String::from_utf8_lossy(name).into_owned());
                            }
                        }
                    }
                    16 => {
                        let list = e.u16("alpn list length")?;
                        let mut l = Reader::new(e.bytes(usize::from(list), "alpn list")?);
                        while !l.is_empty() {
                            let n = l.u8("alpn protocol length")?;
                            let p = l.bytes(usize::from(n), "alpn protocol")?;
                            hello.alpn.push(String::from_utf8_lossy(p).into_owned());
                        }
                    }
                    _ => {}
                }
            }
            Ok(Some(HandshakeMessage::ClientHello(hello)))
        }
        2 => {
            b.u16("legacy version")?;
            let random = random(&mut b)?;
            let sid = b.u8("session id length")?;
            b.bytes(usize::from(sid), "session id")?;
            let cipher_suite = b.u16("cipher suite")?;
            Ok(Some(HandshakeMessage::ServerHello(ServerHello {
                random,
                cipher_suite,
            })))
        }
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reassembles_out_of_order() {
        let mut s = CryptoStream::default();
        assert!(!s.insert(4, b"efgh"));
        assert!(s.insert(0, b"abcd"));
        assert_eq!(s.contiguous(), b"abcdefgh");
        assert!(!s.insert(2, b"cd"));
        assert!(s.insert(6, b"ghij"));
        assert_eq!(s.contiguous(), b"abcdefghij");
        assert!(!s.insert(u64::MAX, b"x"));
        assert!(!s.insert(MAX_CRYPTO_BYTES as u64, b"x"));
        assert_eq!(s.dropped, 1);
    }
}
