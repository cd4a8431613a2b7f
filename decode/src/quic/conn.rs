//! Per-connection state: keys by packet-number space and direction, key phase, largest packet
//! numbers per space (and per path), CRYPTO reassembly and the connection-ID table.

use super::header::Version;
use super::keylog::Keylog;
use super::keys::{CipherSuite, CryptoError, PacketKeys, Secret};
use super::multipath::MultipathMode;
use super::summary::hex;
use super::tls::{ClientHello, CryptoStream};
use std::fmt;
use std::net::SocketAddr;

/// Index of the client as sender.
pub const CLIENT: usize = 0;
/// Index of the server as sender.
pub const SERVER: usize = 1;

/// Most application packet-number spaces (paths × directions) tracked per connection.
pub const MAX_PATH_SPACES: usize = 64;
/// Most connection IDs indexed per connection.
pub const MAX_CIDS_PER_CONNECTION: usize = 64;

/// Why a packet's payload was not decrypted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Undecrypted {
    /// Retry and Version Negotiation packets carry no encrypted payload.
    NoPayload,
    /// A version whose packet protection this decoder does not know.
    UnknownVersion,
    /// Handshake/0-RTT/1-RTT keys need a TLS keylog and none was given.
    NoKeylog,
    /// The keylog has no secrets (or not this one) for the connection's client random.
    NoKeysForClientRandom {
        /// The connection's client random.
        client_random: [u8; 32],
        /// Keylog label that was needed.
        label: &'static str,
    },
    /// The ClientHello (and so the client random) of this connection was not seen.
    ClientRandomUnknown,
    /// No Initial packet or known connection ID leads to a connection for this packet.
    UnknownConnection,
    /// The packet is too short for the header-protection sample.
    TooShort,
    /// The packet was cut short in the capture (lax mode).
    Truncated,
    /// AEAD authentication failed with every candidate key.
    Authentication,
    /// A keylog secret does not fit the negotiated cipher suite.
    BadSecret,
    /// A Retry whose integrity tag does not verify against the client's original Destination
    /// Connection ID (RFC 9001 §5.8): the client discards it, and so does the decoder.
    RetryIntegrity,
}

impl Undecrypted {
    /// Short stable reason name for counters.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NoPayload => "no_payload",
            Self::UnknownVersion => "unknown_version",
            Self::NoKeylog => "no_keylog",
            Self::NoKeysForClientRandom { .. } => "no_keys_for_client_random",
            Self::ClientRandomUnknown => "client_random_unknown",
            Self::UnknownConnection => "unknown_connection",
            Self::TooShort => "too_short_for_sample",
            Self::Truncated => "truncated_in_capture",
            Self::Authentication => "authentication_failed",
            Self::BadSecret => "secret_suite_mismatch",
            Self::RetryIntegrity => "retry_integrity_failed",
        }
    }
}

impl fmt::Display for Undecrypted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoPayload => f.write_str("no encrypted payload"),
            Self::UnknownVersion => f.write_str("not decrypted: unknown version"),
            Self::NoKeylog => f.write_str("not decrypted: no keylog"),
            Self::NoKeysForClientRandom {
                client_random,
                label,
            } => write!(
                f,
                "not decrypted: no keys for client random {} (keylog lacks {label})",
                hex(client_random)
            ),
            Self::ClientRandomUnknown => {
                f.write_str("not decrypted: client random unknown (ClientHello not seen)")
            }
            Self::UnknownConnection => {
                f.write_str("not decrypted: unknown connection (no Initial or known connection ID)")
            }
            Self::TooShort => f.write_str("not decrypted: packet too short for header protection"),
            Self::Truncated => f.write_str("not decrypted: packet truncated in capture"),
            Self::Authentication => {
                f.write_str("not decrypted: authentication failed (wrong keys or corrupted packet)")
            }
            Self::BadSecret => {
                f.write_str("not decrypted: keylog secret does not fit the cipher suite")
            }
            Self::RetryIntegrity => {
                f.write_str("retry integrity tag does not verify (the client discards this Retry)")
            }
        }
    }
}

/// 1-RTT keys of one direction with key-phase tracking (RFC 9001 §6).
#[derive(Debug)]
pub struct AppKeys {
    /// Header protection never changes with key updates.
    pub hp: PacketKeys,
    secret: Secret,
    /// Keys of the current phase.
    pub current: PacketKeys,
    /// Current key phase bit.
    pub phase: bool,
    next: Option<(Secret, PacketKeys)>,
    /// Keys of the previous phase (for reordered packets).
    pub previous: Option<PacketKeys>,
}

impl AppKeys {
    /// Keys from the first traffic secret.
    pub fn new(secret: Secret) -> Result<Self, CryptoError> {
        Ok(Self {
            hp: secret.keys()?,
            current: secret.keys()?,
            secret,
            phase: false,
            next: None,
            previous: None,
        })
    }

    /// Keys of the next phase, derived on first use.
    pub fn next_keys(&mut self) -> Result<&PacketKeys, CryptoError> {
        if self.next.is_none() {
            let s = self.secret.next_generation()?;
            let k = s.keys()?;
            self.next = Some((s, k));
        }
        self.next
            .as_ref()
            .map(|(_, k)| k)
            .ok_or(CryptoError::Derivation)
    }

    /// Keys at key-phase generation `generation` of `secret` (generation 0 is the first 1-RTT
    /// key), with the previous generation's kept for reordered packets.
    pub fn at_generation(secret: Secret, generation: u32) -> Result<Self, CryptoError> {
        let mut k = Self::new(secret)?;
        for _ in 0..generation {
            k.next_keys()?;
            k.advance();
        }
        Ok(k)
    }

    /// Moves to the next phase (after a packet decrypted with its keys).
    pub fn advance(&mut self) {
        if let Some((s, k)) = self.next.take() {
            self.previous = Some(std::mem::replace(&mut self.current, k));
            self.secret = s;
            self.phase = !self.phase;
        }
    }
}

/// One QUIC connection as seen on the wire.
#[derive(Debug)]
pub struct Connection {
    /// Decoder-assigned number.
    pub id: u64,
    /// Version of the client's first Initial.
    pub version: Version,
    /// The client's first Destination Connection ID.
    pub original_dcid: Vec<u8>,
    /// Client address, when known.
    pub client_addr: Option<SocketAddr>,
    /// Server address, when known.
    pub server_addr: Option<SocketAddr>,
    /// Initial keys by sender, with the version and DCID they were derived for.
    pub initial: Option<(Version, Vec<u8>, [PacketKeys; 2])>,
    /// Handshake keys by sender.
    pub handshake: [Option<PacketKeys>; 2],
    /// 0-RTT keys.
    pub early: Option<PacketKeys>,
    /// 1-RTT keys by sender.
    pub app: [Option<AppKeys>; 2],
    /// Cipher suite from the ServerHello.
    pub suite: Option<CipherSuite>,
    /// The ClientHello.
    pub client_hello: Option<ClientHello>,
    /// TLS keys were looked up in the keylog (successfully or not).
    pub tls_keys_tried: bool,
    /// CRYPTO streams: `[space][sender]`, space 0 Initial, 1 Handshake.
    pub crypto: [[CryptoStream; 2]; 2],
    /// Largest packet numbers: `[space][sender]` for Initial and Handshake.
    pub largest: [[Option<u64>; 2]; 2],
    /// Largest application packet numbers by (sender, path).
    pub app_largest: PnSpaces,
    /// Multipath rules, once a packet proved them.
    pub multipath: MultipathMode,
    /// The path of each endpoint's latest 1-RTT packet per address pair (multipath ACK
    /// attribution).
    pub path_addrs: PathAddrs,
    /// SCID of a Retry, which the client then uses as DCID (and for Initial keys).
    pub retry_scid: Option<Vec<u8>>,
    /// Connection IDs of this connection in the decoder's index.
    pub cids: Vec<Vec<u8>>,
    /// By sender: packets from this endpoint carry a zero-length DCID (the peer chose an empty
    /// SCID), so only addresses lead to the connection.
    pub empty_dcid_from: [bool; 2],
    /// Client random of the key-log entry whose keys authenticated a packet of this
    /// connection, when its handshake was not seen.
    pub hunted_random: Option<[u8; 32]>,
}

impl Connection {
    /// A connection started by a client Initial.
    pub fn new(id: u64, version: Version, dcid: &[u8]) -> Self {
        Self {
            id,
            version,
            original_dcid: dcid.to_vec(),
            client_addr: None,
            server_addr: None,
            initial: None,
            handshake: [None, None],
            early: None,
            app: [None, None],
            suite: None,
            client_hello: None,
            tls_keys_tried: false,
            crypto: Default::default(),
            largest: [[None; 2]; 2],
            app_largest: PnSpaces::default(),
            multipath: MultipathMode::None,
            path_addrs: PathAddrs::default(),
            retry_scid: None,
            cids: Vec::new(),
            empty_dcid_from: [false; 2],
            hunted_random: None,
        }
    }

    /// Initial keys for `version` and the DCID the client used, derived when they change.
    pub fn initial_keys(
        &mut self,
        version: Version,
        dcid: &[u8],
    ) -> Result<&[PacketKeys; 2], CryptoError> {
        let stale = match &self.initial {
            Some((v, d, _)) => *v != version || d != dcid,
            None => true,
        };
        if stale {
            let (c, s) = Secret::initial(version, dcid)?;
            self.initial = Some((version, dcid.to_vec(), [c.keys()?, s.keys()?]));
        }
        self.initial
            .as_ref()
            .map(|(_, _, k)| k)
            .ok_or(CryptoError::Derivation)
    }

    /// Looks the connection's secrets up in the keylog (once) and derives Handshake, 0-RTT and
    /// 1-RTT keys. Returns why keys of `label` are missing, if they are.
    pub fn ensure_tls_keys(
        &mut self,
        keylog: Option<&Keylog>,
        label: &'static str,
    ) -> Option<Undecrypted> {
        if self.tls_keys_tried && self.has_keys(label) && keylog.is_some() {
            return None;
        }
        let Some(keylog) = keylog else {
            return Some(Undecrypted::NoKeylog);
        };
        let Some(hello) = &self.client_hello else {
            return Some(Undecrypted::ClientRandomUnknown);
        };
        let client_random = hello.random;
        let missing = Some(Undecrypted::NoKeysForClientRandom {
            client_random,
            label,
        });
        let Some(secrets) = keylog.get(&client_random) else {
            return missing;
        };
        if !self.tls_keys_tried {
            self.tls_keys_tried = true;
            let suite_for = |len: usize| match len {
                48 => CipherSuite::Aes256GcmSha384,
                _ => CipherSuite::Aes128GcmSha256,
            };
            let v = self.version;
            let mk = |s: &Option<Vec<u8>>, suite: Option<CipherSuite>| {
                s.as_ref()
                    .and_then(|b| Secret::new(suite.unwrap_or(suite_for(b.len())), v, b).ok())
            };
            let suite = self.suite;
            self.handshake[CLIENT] =
                mk(&secrets.client_handshake, suite).and_then(|s| s.keys().ok());
            self.handshake[SERVER] =
                mk(&secrets.server_handshake, suite).and_then(|s| s.keys().ok());
            self.early = mk(&secrets.client_early, None).and_then(|s| s.keys().ok());
            self.app[CLIENT] =
                mk(&secrets.client_traffic_0, suite).and_then(|s| AppKeys::new(s).ok());
            self.app[SERVER] =
                mk(&secrets.server_traffic_0, suite).and_then(|s| AppKeys::new(s).ok());
        }
        let (present, derived) = match label {
            "CLIENT_HANDSHAKE_TRAFFIC_SECRET" => (
                secrets.client_handshake.is_some(),
                self.handshake[CLIENT].is_some(),
            ),
            "SERVER_HANDSHAKE_TRAFFIC_SECRET" => (
                secrets.server_handshake.is_some(),
                self.handshake[SERVER].is_some(),
            ),
            "CLIENT_EARLY_TRAFFIC_SECRET" => (secrets.client_early.is_some(), self.early.is_some()),
            "CLIENT_TRAFFIC_SECRET_0" => (
                secrets.client_traffic_0.is_some(),
                self.app[CLIENT].is_some(),
            ),
            _ => (
                secrets.server_traffic_0.is_some(),
                self.app[SERVER].is_some(),
            ),
        };
        match (present, derived) {
            (_, true) => None,
            (true, false) => Some(Undecrypted::BadSecret),
            (false, false) => missing,
        }
    }
}

impl Connection {
    fn has_keys(&self, label: &str) -> bool {
        match label.as_bytes().get(..8) {
            Some(b"CLIENT_H") => self.handshake[CLIENT].is_some(),
            Some(b"SERVER_H") => self.handshake[SERVER].is_some(),
            Some(b"CLIENT_E") => self.early.is_some(),
            Some(b"CLIENT_T") => self.app[CLIENT].is_some(),
            _ => self.app[SERVER].is_some(),
        }
    }
}

/// Largest packet number per application packet-number space, keyed by (sender, path);
/// at most [`MAX_PATH_SPACES`] spaces (a linear scan beats hashing at this size).
#[derive(Debug, Clone, Default)]
pub struct PnSpaces(Vec<((usize, u64), u64)>);

impl PnSpaces {
    /// Largest packet number of a space.
    pub fn get(&self, key: (usize, u64)) -> Option<u64> {
        self.0.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    /// Records a packet number; returns false when the space is new and the table is full.
    pub fn record(&mut self, key: (usize, u64), pn: u64) -> bool {
        if let Some((_, v)) = self.0.iter_mut().find(|(k, _)| *k == key) {
            *v = (*v).max(pn);
            return true;
        }
        if self.0.len() >= MAX_PATH_SPACES {
            return false;
        }
        self.0.push((key, pn));
        true
    }
}

/// The path (PN space) of each endpoint's latest 1-RTT packet per (source, destination)
/// address pair; at most [`MAX_PATH_SPACES`] pairs (the oldest is replaced).
#[derive(Debug, Clone, Default)]
pub struct PathAddrs(Vec<((SocketAddr, SocketAddr), usize, u64)>);

impl PathAddrs {
    /// The path of `sender`'s latest packet from `addrs.0` to `addrs.1`.
    pub fn get(&self, addrs: (SocketAddr, SocketAddr), sender: usize) -> Option<u64> {
        self.0
            .iter()
            .find(|(a, s, _)| *a == addrs && *s == sender)
            .map(|e| e.2)
    }

    /// Notes that `sender`'s packet from `addrs.0` to `addrs.1` was on `path`.
    pub fn record(&mut self, addrs: (SocketAddr, SocketAddr), sender: usize, path: u64) {
        if let Some(e) = self
            .0
            .iter_mut()
            .find(|(a, s, _)| *a == addrs && *s == sender)
        {
            e.2 = path;
            return;
        }
        if self.0.len() >= MAX_PATH_SPACES {
            self.0.remove(0);
        }
        self.0.push((addrs, sender, path));
    }
}

/// What the connection-ID index knows about one CID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CidEntry {
    /// Connection number.
    pub conn: u64,
    /// Which endpoint sends packets carrying this CID as destination.
    pub sender: usize,
    /// Path ID (current multipath draft; 0 otherwise).
    pub path_id: u64,
    /// Sequence number (0 for handshake CIDs).
    pub seq: u64,
}
