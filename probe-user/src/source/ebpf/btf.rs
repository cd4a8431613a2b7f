//! A small reader for the kernel's BTF (`/sys/kernel/btf/vmlinux`): enough to find a struct by
//! name and the byte/bit placement of a (possibly nested, possibly anonymous-union) member.
//!
//! Format: a header (magic 0xEB9F), a type section of variable-size records whose type ids start
//! at 1, and a string section. The blob is validated once in [`Btf::parse`]; lookups cannot read
//! out of bounds afterwards.
use std::collections::HashMap;

/// Why a BTF blob or a lookup was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BtfError {
    /// Fewer bytes than a header or a section needs.
    #[error("BTF truncated: {what} needs {needed} bytes, {available} available")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Bytes needed.
        needed: usize,
        /// Bytes available.
        available: usize,
    },
    /// Not BTF, or big-endian BTF on a little-endian reader.
    #[error("bad BTF magic {0:#06x}")]
    BadMagic(u16),
    /// A type kind this reader does not know (newer kernel format).
    #[error("unknown BTF kind {kind} at type id {id}")]
    UnknownKind {
        /// The kind number.
        kind: u32,
        /// The type id.
        id: u32,
    },
    /// No struct of that name.
    #[error("struct {0} not found in BTF")]
    NoStruct(String),
    /// The struct has no member of that name.
    #[error("{owner} has no member {member}")]
    NoMember {
        /// Struct (path) searched.
        owner: String,
        /// Member name.
        member: String,
    },
    /// A type id points outside the type table, or a chain of modifiers loops.
    #[error("bad BTF type id {0}")]
    BadTypeId(u32),
    /// A string offset outside the string section.
    #[error("bad BTF string offset {0}")]
    BadString(u32),
}

const MAGIC: u16 = 0xEB9F;
const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_FWD: u32 = 7;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC: u32 = 12;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_FLOAT: u32 = 16;
const KIND_DECL_TAG: u32 = 17;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

/// One type record, with the position of its trailing data.
#[derive(Debug, Clone, Copy)]
struct Type {
    name_off: u32,
    kind: u32,
    vlen: u32,
    kind_flag: bool,
    size_or_type: u32,
    /// Offset of the kind-specific data in `types`.
    extra: usize,
}

/// A member's placement inside the outermost struct.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldLocation {
    /// Byte offset of the byte (or first byte) holding the member.
    pub byte_offset: u32,
    /// For bitfields: bit position inside that byte (0 = least significant); 0 otherwise.
    pub bit_shift: u32,
    /// For bitfields: width in bits; 0 for ordinary members.
    pub bit_size: u32,
    /// Size of the member's type in bytes (0 when unsized, e.g. a flexible array).
    pub size: u32,
}

/// A parsed, validated BTF blob.
pub struct Btf {
    types_sec: Vec<u8>,
    strings: Vec<u8>,
    types: Vec<Type>,
    by_name: HashMap<String, Vec<u32>>,
}

fn u32_at(b: &[u8], off: usize, what: &'static str) -> Result<u32, BtfError> {
    let end = off.checked_add(4).ok_or(BtfError::Truncated {
        what,
        needed: usize::MAX,
        available: b.len(),
    })?;
    match b.get(off..end) {
        Some(s) => Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]])),
        None => Err(BtfError::Truncated {
            what,
            needed: end,
            available: b.len(),
        }),
    }
}

fn section<'a>(
    b: &'a [u8],
    base: usize,
    off: u32,
    len: u32,
    what: &'static str,
) -> Result<&'a [u8], BtfError> {
    let start = base.checked_add(off as usize);
    let end = start.and_then(|s| s.checked_add(len as usize));
    match (start, end) {
        (Some(s), Some(e)) if e <= b.len() => Ok(&b[s..e]),
        _ => Err(BtfError::Truncated {
            what,
            needed: end.unwrap_or(usize::MAX),
            available: b.len(),
        }),
    }
}

impl Btf {
    /// Reads the running kernel's BTF.
    pub fn from_sys() -> std::io::Result<Vec<u8>> {
        std::fs::read("/sys/kernel/btf/vmlinux")
    }

    /// Validates and indexes a little-endian BTF blob.
    pub fn parse(b: &[u8]) -> Result<Self, BtfError> {
        if b.len() < 24 {
            return Err(BtfError::Truncated {
                what: "header",
                needed: 24,
                available: b.len(),
            });
        }
        let magic = u16::from_le_bytes([b[0], b[1]]);
        if magic != MAGIC {
            return Err(BtfError::BadMagic(magic));
        }
        let hdr_len = u32_at(b, 4, "header")? as usize;
        let type_off = u32_at(b, 8, "header")?;
        let type_len = u32_at(b, 12, "header")?;
        let str_off = u32_at(b, 16, "header")?;
        let str_len = u32_at(b, 20, "header")?;
        let types_sec = section(b, hdr_len, type_off, type_len, "type section")?.to_vec();
        let strings = section(b, hdr_len, str_off, str_len, "string section")?.to_vec();
        let mut btf = Self {
            types_sec,
            strings,
            types: Vec::new(),
            by_name: HashMap::new(),
        };
        btf.index()?;
        Ok(btf)
    }

    fn index(&mut self) -> Result<(), BtfError> {
        let mut pos = 0usize;
        let t = &self.types_sec;
        while pos < t.len() {
            let id = (self.types.len() + 1) as u32;
            let name_off = u32_at(t, pos, "type record")?;
            let info = u32_at(t, pos + 4, "type record")?;
            let size_or_type = u32_at(t, pos + 8, "type record")?;
            let vlen = info & 0xffff;
            let kind = (info >> 24) & 0x1f;
            let kind_flag = info >> 31 == 1;
            let extra = pos + 12;
            let extra_len = match kind {
                KIND_INT | KIND_VAR | KIND_DECL_TAG => 4,
                KIND_PTR | KIND_FWD | KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT
                | KIND_FUNC | KIND_FLOAT | KIND_TYPE_TAG => 0,
                KIND_ARRAY => 12,
                KIND_STRUCT | KIND_UNION | KIND_DATASEC | KIND_ENUM64 => 12 * vlen as usize,
                KIND_ENUM | KIND_FUNC_PROTO => 8 * vlen as usize,
                _ => return Err(BtfError::UnknownKind { kind, id }),
            };
            let next = extra + extra_len;
            if next > t.len() {
                return Err(BtfError::Truncated {
                    what: "type data",
                    needed: next,
                    available: t.len(),
                });
            }
            self.types.push(Type {
                name_off,
                kind,
                vlen,
                kind_flag,
                size_or_type,
                extra,
            });
            pos = next;
        }
        for (i, ty) in self.types.iter().enumerate() {
            if matches!(ty.kind, KIND_STRUCT | KIND_UNION) && ty.name_off != 0 {
                let name = self.str_at(ty.name_off)?.to_owned();
                self.by_name.entry(name).or_default().push(i as u32 + 1);
            }
        }
        Ok(())
    }

    fn str_at(&self, off: u32) -> Result<&str, BtfError> {
        let s = self
            .strings
            .get(off as usize..)
            .ok_or(BtfError::BadString(off))?;
        let end = s
            .iter()
            .position(|c| *c == 0)
            .ok_or(BtfError::BadString(off))?;
        std::str::from_utf8(&s[..end]).map_err(|_| BtfError::BadString(off))
    }

    fn ty(&self, id: u32) -> Result<Type, BtfError> {
        id.checked_sub(1)
            .and_then(|i| self.types.get(i as usize))
            .copied()
            .ok_or(BtfError::BadTypeId(id))
    }

    /// Number of types.
    pub fn len(&self) -> usize {
        self.types.len()
    }

    /// True when the blob holds no types.
    pub fn is_empty(&self) -> bool {
        self.types.is_empty()
    }

    /// Follows typedef/const/volatile/restrict/type-tag to the underlying type id.
    fn resolve(&self, mut id: u32) -> Result<u32, BtfError> {
        for _ in 0..32 {
            let t = self.ty(id)?;
            match t.kind {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    id = t.size_or_type;
                }
                _ => return Ok(id),
            }
        }
        Err(BtfError::BadTypeId(id))
    }

    /// Size in bytes of a type (after modifiers).
    fn size_of(&self, id: u32) -> Result<u32, BtfError> {
        let id = self.resolve(id)?;
        let t = self.ty(id)?;
        Ok(match t.kind {
            KIND_INT | KIND_STRUCT | KIND_UNION | KIND_ENUM | KIND_ENUM64 | KIND_FLOAT => {
                t.size_or_type
            }
            KIND_PTR => 8,
            KIND_ARRAY => {
                let elem = u32_at(&self.types_sec, t.extra, "array")?;
                let n = u32_at(&self.types_sec, t.extra + 8, "array")?;
                self.size_of(elem)?.saturating_mul(n)
            }
            _ => 0,
        })
    }

    /// Finds member `name` in composite `id`, looking into anonymous struct/union members.
    /// Returns (bit offset from the start of `id`, bitfield size, member type id).
    fn find_member(
        &self,
        id: u32,
        name: &str,
        depth: u32,
    ) -> Result<Option<(u32, u32, u32)>, BtfError> {
        if depth > 8 {
            return Ok(None);
        }
        let t = self.ty(self.resolve(id)?)?;
        if !matches!(t.kind, KIND_STRUCT | KIND_UNION) {
            return Ok(None);
        }
        for i in 0..t.vlen as usize {
            let m = t.extra + i * 12;
            let m_name = u32_at(&self.types_sec, m, "member")?;
            let m_type = u32_at(&self.types_sec, m + 4, "member")?;
            let m_off = u32_at(&self.types_sec, m + 8, "member")?;
            let (bit_off, bits) = if t.kind_flag {
                (m_off & 0x00ff_ffff, m_off >> 24)
            } else {
                (m_off, 0)
            };
            if m_name == 0 {
                if let Some((o, b, ty)) = self.find_member(m_type, name, depth + 1)? {
                    return Ok(Some((bit_off + o, b, ty)));
                }
            } else if self.str_at(m_name)? == name {
                return Ok(Some((bit_off, bits, m_type)));
            }
        }
        Ok(None)
    }

    /// Placement of `path` (e.g. `["inet_conn", "icsk_rto"]`) inside `struct owner`.
    pub fn field(&self, owner: &str, path: &[&str]) -> Result<FieldLocation, BtfError> {
        let ids = self
            .by_name
            .get(owner)
            .ok_or_else(|| BtfError::NoStruct(owner.to_owned()))?;
        // Prefer the complete definition (non-zero member count).
        let mut id = ids
            .iter()
            .copied()
            .find(|id| self.ty(*id).is_ok_and(|t| t.vlen > 0))
            .unwrap_or(ids[0]);
        let mut bits_total = 0u32;
        let mut bitfield = 0u32;
        let mut where_ = owner.to_owned();
        for name in path {
            let (off, bits, ty) =
                self.find_member(id, name, 0)?
                    .ok_or_else(|| BtfError::NoMember {
                        owner: where_.clone(),
                        member: (*name).to_owned(),
                    })?;
            bits_total = bits_total.saturating_add(off);
            bitfield = bits;
            id = ty;
            where_.push('.');
            where_.push_str(name);
        }
        let size = self.size_of(id)?;
        Ok(FieldLocation {
            byte_offset: bits_total / 8,
            bit_shift: if bitfield > 0 { bits_total % 8 } else { 0 },
            bit_size: bitfield,
            size,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a BTF blob by hand:
    ///   1: int "u8" (1 byte), 2: int "u32" (4 bytes)
    ///   3: struct inner { u32 a; u32 b; }               (size 8)
    ///   4: union (anonymous) { u32 x; struct inner in; } (size 8)
    ///   5: struct outer (kind_flag) { u32 h; union{...}; u8 f:5 @ bit 96; u8 g:3 @ bit 101 } size 16
    ///   6: typedef outer_t -> 5
    fn blob() -> Vec<u8> {
        let mut strings = vec![0u8];
        let mut s = |name: &str| -> u32 {
            let off = strings.len() as u32;
            strings.extend_from_slice(name.as_bytes());
            strings.push(0);
            off
        };
        let (u8n, u32n, inner, a, b, x, inn, outer, h, f, g, outer_t) = (
            s("u8"),
            s("u32"),
            s("inner"),
            s("a"),
            s("b"),
            s("x"),
            s("in"),
            s("outer"),
            s("h"),
            s("f"),
            s("g"),
            s("outer_t"),
        );
        let mut t: Vec<u8> = Vec::new();
        let mut w = |v: u32| t.extend_from_slice(&v.to_le_bytes());
        let info =
            |kind: u32, vlen: u32, kf: bool| (kind << 24) | vlen | if kf { 1 << 31 } else { 0 };
        // 1 u8
        w(u8n);
        w(info(KIND_INT, 0, false));
        w(1);
        w(8);
        // 2 u32
        w(u32n);
        w(info(KIND_INT, 0, false));
        w(4);
        w(32);
        // 3 struct inner
        w(inner);
        w(info(KIND_STRUCT, 2, false));
        w(8);
        w(a);
        w(2);
        w(0);
        w(b);
        w(2);
        w(32);
        // 4 anonymous union
        w(0);
        w(info(KIND_UNION, 2, false));
        w(8);
        w(x);
        w(2);
        w(0);
        w(inn);
        w(3);
        w(0);
        // 5 struct outer, bitfield encoding
        w(outer);
        w(info(KIND_STRUCT, 4, true));
        w(16);
        w(h);
        w(2);
        w(0);
        w(0);
        w(4);
        w(32);
        w(f);
        w(1);
        w((5 << 24) | 96);
        w(g);
        w(1);
        w((3 << 24) | 101);
        // 6 typedef
        w(outer_t);
        w(info(KIND_TYPEDEF, 0, false));
        w(5);
        let mut out = Vec::new();
        out.extend_from_slice(&MAGIC.to_le_bytes());
        out.push(1);
        out.push(0);
        for v in [
            24u32,
            0,
            t.len() as u32,
            t.len() as u32,
            strings.len() as u32,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&t);
        out.extend_from_slice(&strings);
        out
    }

    #[test]
    fn handcrafted_blob_resolves_nested_anonymous_and_bitfields() {
        let btf = Btf::parse(&blob()).unwrap();
        assert_eq!(btf.len(), 6);
        assert_eq!(
            btf.field("outer", &["h"]).unwrap(),
            FieldLocation {
                byte_offset: 0,
                bit_shift: 0,
                bit_size: 0,
                size: 4
            }
        );
        // Through the anonymous union, then into the struct.
        assert_eq!(btf.field("outer", &["x"]).unwrap().byte_offset, 4);
        assert_eq!(btf.field("outer", &["in", "b"]).unwrap().byte_offset, 8);
        assert_eq!(btf.field("outer", &["in"]).unwrap().size, 8);
        assert_eq!(
            btf.field("outer", &["f"]).unwrap(),
            FieldLocation {
                byte_offset: 12,
                bit_shift: 0,
                bit_size: 5,
                size: 1
            }
        );
        assert_eq!(
            btf.field("outer", &["g"]).unwrap(),
            FieldLocation {
                byte_offset: 12,
                bit_shift: 5,
                bit_size: 3,
                size: 1
            }
        );
        assert!(matches!(
            btf.field("outer", &["zz"]),
            Err(BtfError::NoMember { .. })
        ));
        assert!(matches!(
            btf.field("nope", &["a"]),
            Err(BtfError::NoStruct(_))
        ));
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        let b = blob();
        for len in 0..b.len() {
            assert!(Btf::parse(&b[..len]).is_err(), "length {len}");
        }
        let mut bad = b.clone();
        bad[0] = 0;
        assert!(matches!(Btf::parse(&bad), Err(BtfError::BadMagic(_))));
    }

    #[test]
    #[ignore = "needs the running kernel's BTF (/sys/kernel/btf/vmlinux)"]
    fn running_kernel_btf_has_the_tcp_fields() {
        let raw = Btf::from_sys().unwrap();
        let btf = Btf::parse(&raw).unwrap();
        assert!(btf.len() > 10_000);
        let rto = btf.field("tcp_sock", &["inet_conn", "icsk_rto"]).unwrap();
        assert_eq!(rto.size, 4);
        let backoff = btf
            .field("tcp_sock", &["inet_conn", "icsk_backoff"])
            .unwrap();
        assert_eq!(backoff.size, 1);
        let ca = btf
            .field("inet_connection_sock", &["icsk_ca_state"])
            .unwrap();
        assert_eq!(ca.bit_size, 5);
        let cwnd = btf.field("tcp_sock", &["snd_cwnd"]).unwrap();
        assert_eq!(cwnd.size, 4);
        // skc_state sits in sock_common, reached through an anonymous union-free path.
        let st = btf.field("sock", &["__sk_common", "skc_state"]).unwrap();
        assert_eq!(st.size, 1);
        let segs = btf.field("tcp_skb_cb", &["tcp_gso_segs"]).unwrap();
        assert_eq!((segs.byte_offset, segs.size), (8, 2));
    }
}
