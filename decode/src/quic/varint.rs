//! Bounds-checked cursor over a byte slice with QUIC variable-length integers (RFC 9000 §16).

use thiserror::Error;

/// Not enough bytes for a field: which field, where it starts, how many bytes it needs and how
/// many were left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("truncated {field} at offset {offset}: needs {needed} bytes, {available} left")]
pub struct Truncated {
    /// Name of the field that did not fit.
    pub field: &'static str,
    /// Offset of the field from the start of the parsed unit.
    pub offset: usize,
    /// Bytes the field needs.
    pub needed: usize,
    /// Bytes that were left.
    pub available: usize,
}

/// A cursor that never reads past the end of its slice.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A cursor at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    /// Current offset from the start.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes left after the cursor.
    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// True when nothing is left.
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// The bytes left after the cursor, without consuming them.
    pub fn rest(&self) -> &'a [u8] {
        self.buf.get(self.pos..).unwrap_or(&[])
    }

    fn short(&self, field: &'static str, needed: usize) -> Truncated {
        Truncated {
            field,
            offset: self.pos,
            needed,
            available: self.remaining(),
        }
    }

    /// Takes `n` bytes.
    pub fn bytes(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], Truncated> {
        let end = self
            .pos
            .checked_add(n)
            .ok_or_else(|| self.short(field, n))?;
        let out = self
            .buf
            .get(self.pos..end)
            .ok_or_else(|| self.short(field, n))?;
        self.pos = end;
        Ok(out)
    }

    /// Takes one byte.
    pub fn u8(&mut self, field: &'static str) -> Result<u8, Truncated> {
        let b = *self.buf.get(self.pos).ok_or_else(|| self.short(field, 1))?;
        self.pos += 1;
        Ok(b)
    }

    /// Takes a big-endian u16.
    pub fn u16(&mut self, field: &'static str) -> Result<u16, Truncated> {
        let b = self.bytes(2, field)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// Takes a big-endian 24-bit integer.
    pub fn u24(&mut self, field: &'static str) -> Result<u32, Truncated> {
        let b = self.bytes(3, field)?;
        Ok(u32::from_be_bytes([0, b[0], b[1], b[2]]))
    }

    /// Takes a big-endian u32.
    pub fn u32(&mut self, field: &'static str) -> Result<u32, Truncated> {
        let b = self.bytes(4, field)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// Takes a QUIC variable-length integer (1, 2, 4 or 8 bytes).
    pub fn varint(&mut self, field: &'static str) -> Result<u64, Truncated> {
        let first = *self.buf.get(self.pos).ok_or_else(|| self.short(field, 1))?;
        let len = 1usize << (first >> 6);
        let b = self.bytes(len, field)?;
        let mut v = u64::from(first & 0x3f);
        for &x in b.iter().skip(1) {
            v = (v << 8) | u64::from(x);
        }
        Ok(v)
    }
}

/// Encodes `v` as a QUIC varint (shortest form); `None` when `v` ≥ 2^62.
pub fn encode_varint(v: u64, out: &mut Vec<u8>) -> Option<()> {
    if v < 1 << 6 {
        out.push(v as u8);
    } else if v < 1 << 14 {
        out.extend_from_slice(&((v as u16) | 0x4000).to_be_bytes());
    } else if v < 1 << 30 {
        out.extend_from_slice(&((v as u32) | 0x8000_0000).to_be_bytes());
    } else if v < 1 << 62 {
        out.extend_from_slice(&(v | 0xc000_0000_0000_0000).to_be_bytes());
    } else {
        return None;
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc9000_varint_examples() {
        let cases: [(&[u8], u64); 4] = [
            (
                &[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c],
                151_288_809_941_952_652,
            ),
            (&[0x9d, 0x7f, 0x3e, 0x7d], 494_878_333),
            (&[0x7b, 0xbd], 15_293),
            (&[0x25], 37),
        ];
        for (bytes, v) in cases {
            assert_eq!(Reader::new(bytes).varint("v").unwrap(), v);
            let mut out = Vec::new();
            encode_varint(v, &mut out).unwrap();
            assert_eq!(out, bytes);
        }
        assert_eq!(Reader::new(&[0x40, 0x25]).varint("v").unwrap(), 37);
        let e = Reader::new(&[0x9d, 0x7f]).varint("v").unwrap_err();
        assert_eq!(
            e,
            Truncated {
                field: "v",
                offset: 0,
                needed: 4,
                available: 2
            }
        );
    }
}
