//! Matching copies across paths, one file per duplication mode: identical datagrams
//! (`datagram`), KCP conv+sn (`kcp`), QUIC STREAM ranges of one connection or content/app id
//! across separate connections (`quic`), plus TCP sockets (`tcp`, no duplication; HOL only) and TCP retransmissions on the wire
//! (`tcpwire`) and their join with the kernel's (`tcpjoin`).

pub mod datagram;
pub mod gaps;
pub mod kcp;
pub mod quic;
pub mod streams;
pub mod tcp;
pub mod tcpjoin;
pub mod tcpmsg;
pub mod tcpwire;

use std::net::SocketAddr;

use crate::config::{Config, MatchMode};
use crate::input::ConnId;
use crate::FastMap;

/// Message starts remembered per session and content.
const MAX_SAME_CONTENT: usize = 4096;
/// (session, direction, content) entries remembered.
const MAX_CONTENTS: usize = 8192;

/// Where messages started: (stream or 0, offset or sn) each, in order (inline for one).
pub type MessageStarts = smallvec::SmallVec<[(u64, u64); 1]>;

/// The order of the messages with the same content on each session (connection) of a group of
/// per-path sessions matched by content: the n-th message with a content on one session is a
/// copy of the n-th on another, so identical messages (keep-alives) stay apart.
#[derive(Debug, Default)]
pub struct ContentOrder {
    /// (session tag, up, content hash) → where those messages started, in order (bounded).
    starts: FastMap<(u64, bool, u64), MessageStarts>,
}

impl ContentOrder {
    /// Which occurrence of `content` on `session` the message starting at `start` is; a
    /// retransmitted start is the same occurrence again.
    pub fn occurrence(&mut self, session: u64, up: bool, content: u64, start: (u64, u64)) -> u64 {
        let key = (session, up, content);
        if self.starts.len() >= MAX_CONTENTS && !self.starts.contains_key(&key) {
            self.starts.clear();
        }
        let starts = self.starts.entry(key).or_default();
        let n = match starts.iter().position(|s| *s == start) {
            Some(n) => n,
            None => {
                if starts.len() >= MAX_SAME_CONTENT {
                    starts.remove(0);
                }
                starts.push(start);
                starts.len() - 1
            }
        };
        n as u64
    }
}

/// Whether 32-bit counter `a` (a TCP sequence number, a TSval) is after `b`, modulo 2^32
/// (RFC 1982 serial-number arithmetic, as TCP compares both).
pub(crate) fn after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// Mixes values into a 64-bit key (splitmix64 finalizer over a running state).
pub fn mix(parts: &[u64]) -> u64 {
    use crate::draw::{finalize, GAMMA};
    let mut h = GAMMA;
    for p in parts {
        h = finalize((h ^ *p).wrapping_add(GAMMA));
    }
    h
}

/// Hash of an address pair (pairing captures that saw the same packet).
#[inline]
pub fn tuple_hash(src: &SocketAddr, dst: &SocketAddr) -> u64 {
    pair_facts(src, dst).1
}

/// [`crate::capture::is_uplink`] and [`tuple_hash`] of a packet from `src` to `dst`, each
/// address read once.
#[inline]
pub fn pair_facts(src: &SocketAddr, dst: &SocketAddr) -> (Option<bool>, u64) {
    // Each address with its port in one word (exact for IPv4: 32 + 16 bits), and the port.
    let word = |a: &SocketAddr| match a {
        SocketAddr::V4(v) => (
            (u64::from(u32::from(*v.ip())) << 16) | u64::from(v.port()),
            v.port(),
        ),
        SocketAddr::V6(v) => {
            let x = u128::from(*v.ip());
            let w = ((x as u64) ^ ((x >> 64) as u64)).rotate_left(16) ^ u64::from(v.port());
            (w, v.port())
        }
    };
    let ((ws, ps), (wd, pd)) = (word(src), word(dst));
    // One folded multiply of the two words (each offset by its own constant, so that the
    // reverse pair hashes apart): the pair's hash is only compared, never shown.
    let (a, b) = (ws ^ 0x243f_6a88_85a3_08d3, wd ^ 0x1319_8a2e_0370_7344);
    let p = u128::from(a) * u128::from(b);
    (
        crate::capture::uplink_by_ports(ps, pd),
        (p as u64) ^ ((p >> 64) as u64),
    )
}

/// The server side's port (the lower one).
pub fn server_port(src: &SocketAddr, dst: &SocketAddr) -> u16 {
    src.port().min(dst.port())
}

/// The configured mode for a flow, if any override matches.
pub fn forced_mode(
    cfg: &Config,
    (src, dst): (&SocketAddr, &SocketAddr),
    conv: Option<u32>,
    conn: Option<ConnId>,
) -> Option<MatchMode> {
    cfg.mode_overrides
        .iter()
        .find(|o| {
            let s = &o.selector;
            s.port.is_none_or(|p| p == src.port() || p == dst.port())
                && s.conv.is_none_or(|c| Some(c) == conv)
                && s.conn
                    .as_deref()
                    .is_none_or(|c| conn.is_some_and(|n| n.to_string() == c))
                && (s.port.is_some() || s.conv.is_some() || s.conn.is_some())
        })
        .map(|o| o.mode)
}
