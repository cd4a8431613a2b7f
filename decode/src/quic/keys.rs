//! Packet protection keys (RFC 9001 §5, RFC 9369 §3.3): initial secrets, HKDF-Expand-Label,
//! AEAD and header-protection keys, and key updates ("quic ku").

use super::header::Version;
use ring::aead::{self, quic as hp, Aad, LessSafeKey, Nonce, UnboundKey};
use ring::hkdf::{self, KeyType, Prk, Salt};
use serde::Serialize;
use thiserror::Error;

/// Errors from key derivation or packet protection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum CryptoError {
    /// A secret of the wrong length for its cipher suite.
    #[error("secret of {got} bytes, cipher suite needs {want}")]
    SecretLength {
        /// Bytes given.
        got: usize,
        /// Bytes required.
        want: usize,
    },
    /// HKDF or key setup refused its input.
    #[error("key derivation failed")]
    Derivation,
    /// The header-protection sample did not fit in the packet.
    #[error("packet too short for the header-protection sample")]
    SampleTooShort,
    /// AEAD authentication failed (wrong keys, or corrupted packet).
    #[error("AEAD authentication failed")]
    Authentication,
}

/// TLS 1.3 cipher suites QUIC uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CipherSuite {
    /// TLS_AES_128_GCM_SHA256 (0x1301).
    Aes128GcmSha256,
    /// TLS_AES_256_GCM_SHA384 (0x1302).
    Aes256GcmSha384,
    /// TLS_CHACHA20_POLY1305_SHA256 (0x1303).
    ChaCha20Poly1305Sha256,
}

impl CipherSuite {
    /// The suite with TLS code point `v`, if QUIC can use it.
    pub fn from_u16(v: u16) -> Option<Self> {
        match v {
            0x1301 => Some(Self::Aes128GcmSha256),
            0x1302 => Some(Self::Aes256GcmSha384),
            0x1303 => Some(Self::ChaCha20Poly1305Sha256),
            _ => None,
        }
    }

    /// Length of the hash, and so of traffic secrets.
    pub fn hash_len(self) -> usize {
        match self {
            Self::Aes256GcmSha384 => 48,
            _ => 32,
        }
    }

    fn hkdf(self) -> hkdf::Algorithm {
        match self {
            Self::Aes256GcmSha384 => hkdf::HKDF_SHA384,
            _ => hkdf::HKDF_SHA256,
        }
    }

    fn aead(self) -> &'static aead::Algorithm {
        match self {
            Self::Aes128GcmSha256 => &aead::AES_128_GCM,
            Self::Aes256GcmSha384 => &aead::AES_256_GCM,
            Self::ChaCha20Poly1305Sha256 => &aead::CHACHA20_POLY1305,
        }
    }

    fn hp(self) -> &'static hp::Algorithm {
        match self {
            Self::Aes128GcmSha256 => &hp::AES_128,
            Self::Aes256GcmSha384 => &hp::AES_256,
            Self::ChaCha20Poly1305Sha256 => &hp::CHACHA20,
        }
    }

    fn key_len(self) -> usize {
        match self {
            Self::Aes128GcmSha256 => 16,
            _ => 32,
        }
    }
}

/// Version-specific HKDF labels and initial salt.
struct Labels {
    key: &'static [u8],
    iv: &'static [u8],
    hp: &'static [u8],
    ku: &'static [u8],
    salt: [u8; 20],
}

fn labels(v: Version) -> Labels {
    match v {
        Version::V1 => Labels {
            key: b"quic key",
            iv: b"quic iv",
            hp: b"quic hp",
            ku: b"quic ku",
            salt: [
                0x38, 0x76, 0x2c, 0xf7, 0xf5, 0x59, 0x34, 0xb3, 0x4d, 0x17, 0x9a, 0xe6, 0xa4, 0xc8,
                0x0c, 0xad, 0xcc, 0xbb, 0x7f, 0x0a,
            ],
        },
        Version::V2 => Labels {
            key: b"quicv2 key",
            iv: b"quicv2 iv",
            hp: b"quicv2 hp",
            ku: b"quicv2 ku",
            salt: [
                0x0d, 0xed, 0xe3, 0xde, 0xf7, 0x00, 0xa6, 0xdb, 0x81, 0x93, 0x81, 0xbe, 0x6e, 0x26,
                0x9d, 0xcb, 0xf9, 0xbd, 0x2e, 0xd9,
            ],
        },
        Version::Draft29 => Labels {
            key: b"quic key",
            iv: b"quic iv",
            hp: b"quic hp",
            ku: b"quic ku",
            salt: [
                0xaf, 0xbf, 0xec, 0x28, 0x99, 0x93, 0xd2, 0x4c, 0x9e, 0x97, 0x86, 0xf1, 0x9c, 0x61,
                0x11, 0xe0, 0x43, 0x90, 0xa8, 0x99,
            ],
        },
    }
}

struct Len(usize);

impl KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

/// TLS 1.3 HKDF-Expand-Label with an empty context, writing `out.len()` bytes.
fn expand_label(prk: &Prk, label: &[u8], out: &mut [u8]) -> Result<(), CryptoError> {
    let out_len = u16::try_from(out.len())
        .map_err(|_| CryptoError::Derivation)?
        .to_be_bytes();
    let label_len = [u8::try_from(label.len() + 6).map_err(|_| CryptoError::Derivation)?];
    let info: [&[u8]; 5] = [&out_len, &label_len, b"tls13 ", label, &[0]];
    prk.expand(&info, Len(out.len()))
        .and_then(|okm| okm.fill(out))
        .map_err(|_| CryptoError::Derivation)
}

/// One direction's traffic secret together with its suite and version.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    suite: CipherSuite,
    version: Version,
    bytes: Vec<u8>,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secret")
            .field("suite", &self.suite)
            .field("version", &self.version)
            .finish()
    }
}

impl Secret {
    /// A traffic secret (from a keylog) for `suite` and `version`.
    pub fn new(suite: CipherSuite, version: Version, bytes: &[u8]) -> Result<Self, CryptoError> {
        if bytes.len() != suite.hash_len() {
            return Err(CryptoError::SecretLength {
                got: bytes.len(),
                want: suite.hash_len(),
            });
        }
        Ok(Self {
            suite,
            version,
            bytes: bytes.to_vec(),
        })
    }

    /// Initial secrets (client, server) for the client's first Destination Connection ID.
    pub fn initial(version: Version, dcid: &[u8]) -> Result<(Self, Self), CryptoError> {
        let l = labels(version);
        let prk = Salt::new(hkdf::HKDF_SHA256, &l.salt).extract(dcid);
        let mut client = vec![0u8; 32];
        let mut server = vec![0u8; 32];
        expand_label(&prk, b"client in", &mut client)?;
        expand_label(&prk, b"server in", &mut server)?;
        let suite = CipherSuite::Aes128GcmSha256;
        Ok((
            Self {
                suite,
                version,
                bytes: client,
            },
            Self {
                suite,
                version,
                bytes: server,
            },
        ))
    }

    /// The secret's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Cipher suite.
    pub fn suite(&self) -> CipherSuite {
        self.suite
    }

    fn prk(&self) -> Prk {
        Prk::new_less_safe(self.suite.hkdf(), &self.bytes)
    }

    /// The next generation's secret after a key update (RFC 9001 §6.1).
    pub fn next_generation(&self) -> Result<Self, CryptoError> {
        let mut next = vec![0u8; self.bytes.len()];
        expand_label(&self.prk(), labels(self.version).ku, &mut next)?;
        Ok(Self {
            suite: self.suite,
            version: self.version,
            bytes: next,
        })
    }

    /// Packet protection keys derived from this secret.
    pub fn keys(&self) -> Result<PacketKeys, CryptoError> {
        PacketKeys::from_parts(self.aead_key()?, self.iv()?, self.hp_key()?, self.suite)
    }

    /// The AEAD key bytes.
    pub fn aead_key(&self) -> Result<Vec<u8>, CryptoError> {
        let mut k = vec![0u8; self.suite.key_len()];
        expand_label(&self.prk(), labels(self.version).key, &mut k)?;
        Ok(k)
    }

    /// The IV bytes.
    pub fn iv(&self) -> Result<[u8; 12], CryptoError> {
        let mut iv = [0u8; 12];
        expand_label(&self.prk(), labels(self.version).iv, &mut iv)?;
        Ok(iv)
    }

    /// The header-protection key bytes.
    pub fn hp_key(&self) -> Result<Vec<u8>, CryptoError> {
        let mut k = vec![0u8; self.suite.key_len()];
        expand_label(&self.prk(), labels(self.version).hp, &mut k)?;
        Ok(k)
    }
}

/// AEAD and header-protection keys of one direction and key phase.
pub struct PacketKeys {
    aead: LessSafeKey,
    iv: [u8; 12],
    hp: hp::HeaderProtectionKey,
    suite: CipherSuite,
}

impl std::fmt::Debug for PacketKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketKeys")
            .field("suite", &self.suite)
            .finish()
    }
}

/// Length of the AEAD tag for every QUIC suite.
pub const TAG_LEN: usize = 16;

impl PacketKeys {
    /// Keys from raw key, IV and header-protection key bytes.
    pub fn from_parts(
        key: Vec<u8>,
        iv: [u8; 12],
        hp_key: Vec<u8>,
        suite: CipherSuite,
    ) -> Result<Self, CryptoError> {
        let aead = LessSafeKey::new(
            UnboundKey::new(suite.aead(), &key).map_err(|_| CryptoError::Derivation)?,
        );
        let hp = hp::HeaderProtectionKey::new(suite.hp(), &hp_key)
            .map_err(|_| CryptoError::Derivation)?;
        Ok(Self {
            aead,
            iv,
            hp,
            suite,
        })
    }

    /// Cipher suite.
    pub fn suite(&self) -> CipherSuite {
        self.suite
    }

    /// The IV.
    pub fn iv(&self) -> [u8; 12] {
        self.iv
    }

    /// The 5-byte header-protection mask for a 16-byte sample (RFC 9001 §5.4).
    pub fn header_mask(&self, sample: &[u8]) -> Result<[u8; 5], CryptoError> {
        self.hp
            .new_mask(sample)
            .map_err(|_| CryptoError::SampleTooShort)
    }

    /// Decrypts `payload` (ciphertext and tag) in place under `nonce`; returns the plaintext
    /// length.
    pub fn open(
        &self,
        nonce: [u8; 12],
        aad: &[u8],
        payload: &mut [u8],
    ) -> Result<usize, CryptoError> {
        self.aead
            .open_in_place(Nonce::assume_unique_for_key(nonce), Aad::from(aad), payload)
            .map(|p| p.len())
            .map_err(|_| CryptoError::Authentication)
    }

    /// Encrypts `payload` in place and appends the tag (builds packets for tests and benches).
    pub fn seal(
        &self,
        nonce: [u8; 12],
        aad: &[u8],
        payload: &mut Vec<u8>,
    ) -> Result<(), CryptoError> {
        self.aead
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(aad), payload)
            .map_err(|_| CryptoError::Derivation)
    }
}

/// The single-path nonce: IV xor the 62-bit packet number, left-padded (RFC 9001 §5.3).
pub fn nonce(iv: &[u8; 12], pn: u64) -> [u8; 12] {
    let mut n = *iv;
    for (d, s) in n[4..].iter_mut().zip(pn.to_be_bytes()) {
        *d ^= s;
    }
    n
}
