//! Finding the connection of a 1-RTT packet whose handshake was not captured.
//!
//! A capture that starts after the handshake (or shows a path that never carried one) has short
//! headers of no known connection. With a key log, each is tried against the log's 1-RTT secrets:
//! both directions, QUIC v1 and v2 labels, each key-phase generation up to
//! [`HuntConfig::generations`], every DCID length 0–20, multipath path identifiers (draft-05:
//! the DCID sequence number) and the packet number's high bits in a window from 0. Header
//! protection removal is cheap and its two reserved bits must come out zero, which discards
//! three wrong candidates in four before any AEAD work. The work is bounded: so many AEAD
//! attempts per packet, so many packets per unknown 4-tuple, then the 4-tuple is given up.

use super::header::Version;
use super::keylog::Keylog;
use super::keys::{CipherSuite, PacketKeys, Secret};
use super::multipath;
use super::protection::{decrypt_into, unprotect_header, Unprotected};
use std::collections::HashMap;
use std::net::SocketAddr;

/// Bounds of the search for the connection of an unknown short header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HuntConfig {
    /// Packets of one unknown 4-tuple tried before it is given up.
    pub packets_per_tuple: u32,
    /// AEAD attempts per packet.
    pub opens_per_packet: u32,
    /// Key-phase generations tried (0 is the first 1-RTT key).
    pub generations: u32,
    /// Multipath path identifiers tried (0 is every single-path connection).
    pub paths: u32,
    /// Unknown 4-tuples followed at once; packets of further ones are not tried.
    pub max_tuples: usize,
}

impl Default for HuntConfig {
    fn default() -> Self {
        Self {
            packets_per_tuple: 8,
            opens_per_packet: 4096,
            generations: 4,
            paths: 4,
            max_tuples: 1024,
        }
    }
}

/// What the search did, for the health figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct HuntStats {
    /// Unknown 4-tuples whose short headers were tried.
    pub tuples: u64,
    /// Packets tried.
    pub packets_tried: u64,
    /// AEAD attempts made.
    pub attempts: u64,
    /// Packets that authenticated, binding their 4-tuple and DCID to a connection.
    pub recovered: u64,
    /// 4-tuples given up after [`HuntConfig::packets_per_tuple`] packets.
    pub given_up: u64,
    /// Packets not tried because [`HuntConfig::max_tuples`] 4-tuples were already followed.
    pub over_limit: u64,
}

/// One direction's 1-RTT keys of one key-log entry, under one version's labels.
#[derive(Debug)]
struct Candidate {
    client_random: [u8; 32],
    /// [`super::conn::CLIENT`] or [`super::conn::SERVER`].
    sender: usize,
    version: Version,
    /// Generation 0 secrets of both directions (client, server), to set up the connection.
    secrets: [Option<Secret>; 2],
    /// Packet keys by generation (header protection uses generation 0's).
    keys: Vec<PacketKeys>,
}

/// A packet that authenticated.
#[derive(Debug, Clone)]
pub struct Found {
    /// Key-log entry.
    pub client_random: [u8; 32],
    /// Sender of the packet.
    pub sender: usize,
    /// Version whose labels derived the keys.
    pub version: Version,
    /// Generation 0 secrets (client, server).
    pub secrets: [Option<Secret>; 2],
    /// Key-phase generation of the packet.
    pub generation: u32,
    /// DCID length.
    pub dcid_len: usize,
    /// Path identifier of the nonce (0 single-path).
    pub path: u32,
    /// Full packet number.
    pub pn: u64,
    /// Key phase bit.
    pub key_phase: bool,
    /// Plaintext position in the scratch buffer (start, length).
    pub plaintext: (usize, usize),
}

/// The search state: candidate keys (derived once per key-log size) and tries per 4-tuple.
#[derive(Debug, Default)]
pub struct Hunter {
    cfg: HuntConfig,
    cands: Vec<Candidate>,
    /// 1-RTT secrets in the key log when the candidates were derived.
    keylog_len: usize,
    tries: HashMap<(SocketAddr, SocketAddr), u32>,
    /// Counters.
    pub stats: HuntStats,
}

fn suite_for(len: usize) -> &'static [CipherSuite] {
    match len {
        48 => &[CipherSuite::Aes256GcmSha384],
        _ => &[
            CipherSuite::Aes128GcmSha256,
            CipherSuite::ChaCha20Poly1305Sha256,
        ],
    }
}

impl Hunter {
    /// A hunter with `cfg`.
    pub fn new(cfg: HuntConfig) -> Self {
        Self {
            cfg,
            ..Self::default()
        }
    }

    /// Rebuilds the candidates when the key log has grown (and lets given-up 4-tuples try again
    /// with the new keys).
    fn refresh(&mut self, keylog: &Keylog) {
        let secrets = keylog
            .iter()
            .map(|(_, s)| {
                usize::from(s.client_traffic_0.is_some())
                    + usize::from(s.server_traffic_0.is_some())
            })
            .sum();
        if secrets == self.keylog_len {
            return;
        }
        self.keylog_len = secrets;
        self.tries.clear();
        self.cands.clear();
        // In client-random order: the same search (and budget cut) on every run.
        let mut entries: Vec<_> = keylog.iter().collect();
        entries.sort_by_key(|(r, _)| **r);
        for (random, s) in entries {
            let raw = [&s.client_traffic_0, &s.server_traffic_0];
            for version in [Version::V1, Version::V2] {
                for sender in 0..2 {
                    let Some(bytes) = raw[sender] else {
                        continue;
                    };
                    for &suite in suite_for(bytes.len()) {
                        let Ok(secret) = Secret::new(suite, version, bytes) else {
                            continue;
                        };
                        let mut keys = Vec::new();
                        let mut g = secret.clone();
                        for _ in 0..self.cfg.generations.max(1) {
                            let Ok(k) = g.keys() else { break };
                            keys.push(k);
                            let Ok(next) = g.next_generation() else {
                                break;
                            };
                            g = next;
                        }
                        if keys.is_empty() {
                            continue;
                        }
                        let other = raw[1 - sender]
                            .as_ref()
                            .and_then(|b| Secret::new(suite, version, b).ok());
                        let mut secrets = [None, None];
                        secrets[sender] = Some(secret);
                        secrets[1 - sender] = other;
                        self.cands.push(Candidate {
                            client_random: *random,
                            sender,
                            version,
                            secrets,
                            keys,
                        });
                    }
                }
            }
        }
    }

    /// Tries the short-header `packet` (the rest of its datagram) sent from `src` to `dst`
    /// against the key log; `scratch` receives the plaintext of the packet that authenticates.
    pub fn try_packet(
        &mut self,
        keylog: &Keylog,
        packet: &[u8],
        src: SocketAddr,
        dst: SocketAddr,
        scratch: &mut Vec<u8>,
    ) -> Option<Found> {
        self.refresh(keylog);
        if self.cands.is_empty() {
            return None;
        }
        let known = self.tries.contains_key(&(src, dst));
        if !known && self.tries.len() >= self.cfg.max_tuples {
            self.stats.over_limit += 1;
            return None;
        }
        self.stats.tuples += u64::from(!known);
        let tries = self.tries.entry((src, dst)).or_insert(0);
        if *tries >= self.cfg.packets_per_tuple {
            return None;
        }
        *tries += 1;
        let last = *tries == self.cfg.packets_per_tuple;
        self.stats.packets_tried += 1;
        let found = self.search(packet, scratch);
        if found.is_some() {
            self.stats.recovered += 1;
            self.tries.remove(&(src, dst));
        } else if last {
            self.stats.given_up += 1;
        }
        found
    }

    /// The search proper: header protection of every (candidate, DCID length), then AEAD over
    /// the survivors, packet-number high bits outermost so that small numbers come first.
    fn search(&mut self, packet: &[u8], scratch: &mut Vec<u8>) -> Option<Found> {
        // (candidate, dcid length, unprotected header) whose reserved bits are zero.
        let mut live: Vec<(usize, usize, Unprotected)> = Vec::new();
        for (ci, c) in self.cands.iter().enumerate() {
            let Some(hp) = c.keys.first() else { continue };
            for dcid_len in 0..=20usize {
                let pn_offset = 1 + dcid_len;
                let Ok(un) = unprotect_header(packet, pn_offset, hp) else {
                    break;
                };
                if un.reserved_bits(false) == 0 {
                    live.push((ci, dcid_len, un));
                }
            }
        }
        if live.is_empty() {
            return None;
        }
        let budget = u64::from(self.cfg.opens_per_packet);
        let mut spent = 0u64;
        let gens = self.cfg.generations.max(1);
        let paths = self.cfg.paths.max(1);
        // Single-path (path 0) first, over a packet-number window as wide as three quarters of
        // the budget allow; then the other paths, whose numbers start at 0 when they open, over
        // a narrow window.
        let stages = [(0..1, u64::MAX, budget / 4 * 3), (1..paths, 16, budget)];
        for (path_range, high_end, limit) in stages {
            for high in 0..high_end.min(1 << 30) {
                let before = spent;
                for path in path_range.clone() {
                    for &(ci, dcid_len, un) in &live {
                        let c = &self.cands[ci];
                        let bits = 8 * un.pn_len as u32;
                        let Some(pn) = high
                            .checked_shl(bits)
                            .map(|h| h | un.truncated_pn)
                            .filter(|&pn| pn < (1 << 62))
                        else {
                            continue;
                        };
                        let phase = un.key_phase();
                        for generation in (0..gens).filter(|g| (g % 2 == 1) == phase) {
                            let Some(k) = c.keys.get(generation as usize) else {
                                continue;
                            };
                            if spent >= limit {
                                break;
                            }
                            spent += 1;
                            let nonce = multipath::nonce(&k.iv(), path, pn);
                            if let Ok(plaintext) =
                                decrypt_into(packet, 1 + dcid_len, &un, k, nonce, scratch)
                            {
                                self.stats.attempts += spent;
                                return Some(Found {
                                    client_random: c.client_random,
                                    sender: c.sender,
                                    version: c.version,
                                    secrets: c.secrets.clone(),
                                    generation,
                                    dcid_len,
                                    path,
                                    pn,
                                    key_phase: phase,
                                    plaintext,
                                });
                            }
                        }
                    }
                }
                if spent == before || spent >= limit {
                    break;
                }
            }
        }
        self.stats.attempts += spent;
        None
    }
}
