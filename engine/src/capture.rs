//! Capture points: which host and path each capture shows, which captures show the same path at
//! its two ends, who sent each packet, and the clock offset between the two hosts.
//!
//! Inference rules (each one is reported as a sentence in the snapshot):
//! - Pairing: two captures that saw the same copy (of a message, or a TCP segment's new
//!   bytes) with the same addresses and ports, on different hosts or labels, three times, show
//!   the same path at its two ends (unless stated with `pair_with`, or two captures share one
//!   path label).
//! - Host: when not stated, the capture that saw client→server copies first (the client is the
//!   side with the higher port) is the T-Box; an unpaired capture is at the end of a
//!   connection (the client's: the T-Box; the server's: the gateway) that the first of two
//!   signs tells: its packets' TTLs (any protocol: the clients' or the servers' leave at an
//!   initial TTL, 64, 128 or 255, the other side's arrive lower, less by the routers they
//!   passed), or the gaps of a TCP handshake it saw whole; it is assumed to be on the T-Box
//!   until then or without either.
//! - Direction: from `local_addrs` when given, else the T-Box is the higher-port side.
//! - Clock offset: with copies in both directions, the gateway capture's offset is half the
//!   difference between the smallest uplink and downlink delays (symmetric minimum delay
//!   assumed); with one direction only it stays at the given value or 0.

use crate::FastMap as HashMap;
use std::net::SocketAddr;

use crate::input::{CaptureId, CapturePoint, Host, PathId};
use crate::paths::PathIdx;
use crate::snapshot::CaptureView;

/// Which way a packet went relative to the capture's host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// Sent by this host.
    Out,
    /// Received by this host.
    In,
    /// Not known.
    Unknown,
}

/// Client → server (uplink, from the T-Box) or the reverse, by the port heuristic.
pub fn is_uplink(src: &SocketAddr, dst: &SocketAddr) -> Option<bool> {
    uplink_by_ports(src.port(), dst.port())
}

/// [`is_uplink`] of a packet from port `src` to port `dst`.
#[inline]
pub(crate) fn uplink_by_ports(src: u16, dst: u16) -> Option<bool> {
    match src.cmp(&dst) {
        std::cmp::Ordering::Greater => Some(true),
        std::cmp::Ordering::Less => Some(false),
        std::cmp::Ordering::Equal => None,
    }
}

/// [`CaptureTable::dir_by_role`] at capture `c`.
#[inline]
fn role_dir(c: &CaptureState, up: Option<bool>) -> Option<Dir> {
    if !c.point.local_addrs.is_empty() {
        return None;
    }
    let up = up?;
    let host = match c.host {
        Host::Unknown if c.paired.is_none() => Host::Tbox,
        h => h,
    };
    match host {
        Host::Tbox => Some(if up { Dir::Out } else { Dir::In }),
        Host::Gateway => Some(if up { Dir::In } else { Dir::Out }),
        Host::Unknown => None,
    }
}

/// What tells which end of a connection a capture is at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndEvidence {
    /// The handshake's two gaps (ns): SYN → SYN-ACK (`first`), SYN-ACK → the client's next
    /// (`second`); at the client the first is a round trip, at the server the second.
    Handshake { first: u64, second: u64 },
    /// The TTLs (IPv6: hop limits) each side's packets had there: one side's an initial value
    /// (64, 128, 255: sent by this host), the other's lower (routed to it).
    Ttl { client: u8, server: u8 },
}

/// One capture.
#[derive(Clone, Debug)]
pub struct CaptureState {
    /// What was stated (or defaults).
    pub point: CapturePoint,
    /// Path index of its own label.
    pub path: PathIdx,
    /// Host in use (stated or inferred).
    pub host: Host,
    /// Whether `host` was inferred.
    pub host_inferred: bool,
    /// The capture at the other end of the same path.
    pub paired: Option<CaptureId>,
    /// Offset added to its timestamps.
    pub offset_ns: i64,
    /// Whether the offset was estimated.
    pub offset_estimated: bool,
    /// Packets seen.
    pub packets: u64,
    /// The path id whose label is this capture's own label, once a packet carried it.
    pub own_path: Option<PathId>,
    /// While it is not placed: the TTL of the latest packet from a server (index 0) and from
    /// a client (1) it saw, 0 before one.
    pub ttls: [u8; 2],
    /// Packets whose TTL, with the other side's known, did not tell where the capture is (it
    /// stops asking after [`TTL_TRIES`]).
    pub ttl_untold: u16,
}

/// Packets a capture's TTLs may fail to place it by before it stops asking them (on one
/// network, or in the middle, they never tell).
pub const TTL_TRIES: u16 = 1024;

impl CaptureState {
    /// Whether nothing says where this capture is yet: no host stated or inferred, no pair,
    /// no local addresses.
    #[inline]
    pub fn unplaced(&self) -> bool {
        self.host == Host::Unknown && self.paired.is_none() && self.point.local_addrs.is_empty()
    }

    /// Whether the TTLs of its packets may still place this capture: it is not placed, and
    /// they have not failed to [`TTL_TRIES`] times.
    #[inline]
    pub fn ttl_may_place(&self) -> bool {
        self.unplaced() && self.ttl_untold < TTL_TRIES
    }

    /// A packet from a client (`from_client`) or a server seen here with `ttl`, while the
    /// capture is not placed: once both sides' are known, which end of a connection the TTLs
    /// place it at — `true` the client's, where the client's packets leave at an initial TTL
    /// (64, 128, 255) and the server's arrive lower; none when both or neither look sent from
    /// here (one network without routers, or a capture in the middle).
    pub fn note_ttl(&mut self, from_client: bool, ttl: u8) -> Option<(bool, EndEvidence)> {
        self.ttls[usize::from(from_client)] = ttl;
        let [server, client] = self.ttls;
        if server == 0 || client == 0 {
            return None;
        }
        let sent_here = |ttl: u8| matches!(ttl, 64 | 128 | 255);
        if sent_here(client) == sent_here(server) {
            self.ttl_untold += 1;
            return None;
        }
        Some((sent_here(client), EndEvidence::Ttl { client, server }))
    }

    /// Direction of a packet at this capture, whose [`is_uplink`] is `up`.
    #[inline]
    pub fn dir_of_pair(&self, src: &SocketAddr, dst: &SocketAddr, up: Option<bool>) -> Dir {
        if !self.point.local_addrs.is_empty() {
            if self.point.local_addrs.contains(&src.ip()) {
                return Dir::Out;
            }
            if self.point.local_addrs.contains(&dst.ip()) {
                return Dir::In;
            }
            return Dir::Unknown;
        }
        let host = match self.host {
            // Unpaired and not stated: assumed to be the T-Box (see module doc).
            Host::Unknown if self.paired.is_none() => Host::Tbox,
            h => h,
        };
        match (host, up) {
            (Host::Tbox, Some(up)) => {
                if up {
                    Dir::Out
                } else {
                    Dir::In
                }
            }
            (Host::Gateway, Some(up)) => {
                if up {
                    Dir::In
                } else {
                    Dir::Out
                }
            }
            _ => Dir::Unknown,
        }
    }
}

#[derive(Clone, Debug, Default)]
struct PairVotes {
    n: u32,
    // Index 0: the lower capture id of the pair saw it first; 1: the higher.
    up_first: [u32; 2],
    down_first: [u32; 2],
}

#[derive(Clone, Copy, Debug, Default)]
struct Delays {
    min_up: Option<i64>,
    min_down: Option<i64>,
}

/// All captures and what was inferred.
#[derive(Clone, Debug, Default)]
pub struct CaptureTable {
    caps: CaptureMap,
    votes: HashMap<(CaptureId, CaptureId), PairVotes>,
    delays: HashMap<(CaptureId, CaptureId), Delays>,
    /// Sentences describing inferences, oldest first (bounded).
    pub inferences: Vec<String>,
}

/// Captures by id: states in a dense vector behind a direct index by id (ids are small
/// numbers, and every packet looks its capture up several times).
#[derive(Clone, Debug, Default)]
struct CaptureMap {
    /// Position + 1 in `states` by capture id (0: absent).
    pos: Vec<u32>,
    states: Vec<CaptureState>,
}

impl CaptureMap {
    fn get(&self, id: &CaptureId) -> Option<&CaptureState> {
        let i = *self.pos.get(usize::from(*id))?;
        self.states.get((i as usize).checked_sub(1)?)
    }

    fn get_mut(&mut self, id: &CaptureId) -> Option<&mut CaptureState> {
        let i = *self.pos.get(usize::from(*id))?;
        self.states.get_mut((i as usize).checked_sub(1)?)
    }

    fn get_or_insert_with(
        &mut self,
        id: CaptureId,
        new: impl FnOnce() -> CaptureState,
    ) -> &mut CaptureState {
        let at = usize::from(id);
        if self.pos.len() <= at {
            self.pos.resize(at + 1, 0);
        }
        if self.pos[at] == 0 {
            self.states.push(new());
            self.pos[at] = u32::try_from(self.states.len()).unwrap_or(u32::MAX);
        }
        let i = self.pos[at] as usize - 1;
        &mut self.states[i]
    }

    fn insert(&mut self, id: CaptureId, st: CaptureState) {
        match self.get_mut(&id) {
            Some(slot) => *slot = st,
            None => {
                self.get_or_insert_with(id, || st);
            }
        }
    }

    fn values(&self) -> impl Iterator<Item = &CaptureState> + '_ {
        self.states.iter()
    }

    /// Ids in the order the captures were first met.
    fn keys(&self) -> impl Iterator<Item = &CaptureId> + '_ {
        self.states.iter().map(|s| &s.point.capture)
    }
}

const PAIR_VOTES: u32 = 3;
const MAX_INFERENCES: usize = 64;

impl CaptureTable {
    fn say(&mut self, s: String) {
        if self.inferences.len() < MAX_INFERENCES {
            self.inferences.push(s);
        }
    }

    /// Records a stated capture point.
    pub fn declare(&mut self, point: CapturePoint, path: PathIdx) {
        let host = point.host;
        let offset = point.clock_offset_ns.unwrap_or(0);
        if offset != 0 {
            self.say(format!(
                "clock offset of `{}` given: {:+.3} ms",
                point.name,
                offset as f64 / 1e6
            ));
        }
        let st = CaptureState {
            path,
            host,
            host_inferred: false,
            paired: None,
            offset_ns: offset,
            offset_estimated: false,
            packets: self.caps.get(&point.capture).map_or(0, |c| c.packets),
            own_path: None,
            ttls: [0; 2],
            ttl_untold: 0,
            point,
        };
        self.caps.insert(st.point.capture, st);
    }

    /// Makes sure a capture exists (undeclared ones get defaults); counts a packet.
    pub fn touch(&mut self, id: CaptureId, label: &str, path: PathIdx) -> &mut CaptureState {
        let st = self.caps.get_or_insert_with(id, || CaptureState {
            point: CapturePoint {
                ts_ns: 0,
                capture: id,
                name: format!("capture {id} ({label})"),
                path: label.to_owned(),
                host: Host::Unknown,
                local_addrs: Vec::new(),
                clock_offset_ns: None,
                pair_with: None,
            },
            path,
            host: Host::Unknown,
            host_inferred: false,
            paired: None,
            offset_ns: 0,
            offset_estimated: false,
            packets: 0,
            own_path: None,
            ttls: [0; 2],
            ttl_untold: 0,
        });
        st.packets += 1;
        st
    }

    /// The captures' ids, in the order they were first met.
    pub fn ids(&self) -> impl Iterator<Item = CaptureId> + '_ {
        self.caps.keys().copied()
    }

    /// The capture's state, mutably.
    pub fn get_mut(&mut self, id: CaptureId) -> Option<&mut CaptureState> {
        self.caps.get_mut(&id)
    }

    /// The capture's state.
    pub fn get(&self, id: CaptureId) -> Option<&CaptureState> {
        self.caps.get(&id)
    }

    /// Whether the capture is paired with another.
    pub fn paired(&self, id: CaptureId) -> Option<CaptureId> {
        self.caps.get(&id).and_then(|c| c.paired)
    }

    /// Offset to add to this capture's timestamps.
    pub fn offset(&self, id: CaptureId) -> i64 {
        self.caps.get(&id).map_or(0, |c| c.offset_ns)
    }

    /// Whether a sighting's capture is paired, its [`CaptureTable::offset`], and the
    /// sighting's [`CaptureTable::dir_by_role`] (or `dir` where that has none), with one lookup
    /// of the capture.
    #[inline]
    pub fn sighting_facts(&self, id: CaptureId, up: Option<bool>, dir: Dir) -> (bool, i64, Dir) {
        match self.caps.get(&id) {
            Some(c) => (
                c.paired.is_some(),
                c.offset_ns,
                role_dir(c, up).unwrap_or(dir),
            ),
            None => (false, 0, dir),
        }
    }

    /// Direction from the capture's host role (stated or inferred) and the packet's uplink
    /// flag, as known now; `None` when the capture uses explicit local addresses or the
    /// direction is unknown. Used to re-judge sightings made before an inference.
    pub fn dir_by_role(&self, id: CaptureId, up: Option<bool>) -> Option<Dir> {
        role_dir(self.caps.get(&id)?, up)
    }

    /// Pairs that are stated or implied by labels, to apply before traffic is matched.
    /// Returns newly formed pairs (keep-label capture first).
    pub fn stated_pairs(&mut self) -> Vec<(CaptureId, CaptureId)> {
        let mut out = Vec::new();
        let ids: Vec<CaptureId> = self.caps.keys().copied().collect();
        for id in &ids {
            let Some(c) = self.caps.get(id) else { continue };
            if c.paired.is_some() {
                continue;
            }
            let other = match c.point.pair_with {
                Some(o) if self.caps.get(&o).is_some_and(|x| x.paired.is_none()) => Some(o),
                _ => {
                    // Same path label on two captures of different (or unknown) hosts.
                    let same: Vec<CaptureId> = ids
                        .iter()
                        .copied()
                        .filter(|o| {
                            *o != *id
                                && self.caps.get(o).is_some_and(|x| {
                                    x.paired.is_none()
                                        && x.path == c.path
                                        && (x.host != c.host || x.host == Host::Unknown)
                                })
                        })
                        .collect();
                    if same.len() == 1 {
                        same.first().copied()
                    } else {
                        None
                    }
                }
            };
            if let Some(o) = other {
                let pair = self.form_pair(*id, o, "stated");
                out.push(pair);
            }
        }
        out
    }

    /// Counts one copy seen at two captures; returns a pair when enough evidence formed it.
    pub fn vote(
        &mut self,
        a: (CaptureId, u64),
        b: (CaptureId, u64),
        uplink: Option<bool>,
    ) -> Option<(CaptureId, CaptureId)> {
        if a.0 == b.0 || self.paired(a.0).is_some() || self.paired(b.0).is_some() {
            return None;
        }
        let (lo, hi) = if a.0 < b.0 { (a, b) } else { (b, a) };
        let v = self.votes.entry((lo.0, hi.0)).or_default();
        v.n += 1;
        let first = usize::from(hi.1 < lo.1);
        match uplink {
            Some(true) => v.up_first[first] += 1,
            Some(false) => v.down_first[first] += 1,
            None => {}
        }
        if v.n < PAIR_VOTES {
            return None;
        }
        Some(self.form_pair(lo.0, hi.0, "same copies with the same addresses"))
    }

    fn form_pair(&mut self, a: CaptureId, b: CaptureId, why: &str) -> (CaptureId, CaptureId) {
        let votes = self
            .votes
            .get(&(a.min(b), a.max(b)))
            .cloned()
            .unwrap_or_default();
        let ha = self.caps.get(&a).map_or(Host::Unknown, |c| c.host);
        let hb = self.caps.get(&b).map_or(Host::Unknown, |c| c.host);
        // Two ends on one host can only come from handshakes read apart (a host that is the
        // client of one connection and the server of another): the pair decides afresh.
        let (ha, hb) = if ha == hb {
            (Host::Unknown, Host::Unknown)
        } else {
            (ha, hb)
        };
        // Decide which side is the T-Box.
        let (tbox, gw, inferred) = match (ha, hb) {
            (Host::Tbox, _) | (_, Host::Gateway) => (a, b, false),
            (Host::Gateway, _) | (_, Host::Tbox) => (b, a, false),
            _ => {
                let lo_is_a = a < b;
                let (lo_score, hi_score) = (
                    votes.up_first[0] + votes.down_first[1],
                    votes.up_first[1] + votes.down_first[0],
                );
                let lo_tbox = lo_score >= hi_score;
                if lo_tbox == lo_is_a {
                    (a, b, true)
                } else {
                    (b, a, true)
                }
            }
        };
        let name = |t: &Self, id: CaptureId| {
            t.caps
                .get(&id)
                .map_or_else(String::new, |c| c.point.name.clone())
        };
        let (tn, gn) = (name(self, tbox), name(self, gw));
        for (id, host, other) in [(tbox, Host::Tbox, gw), (gw, Host::Gateway, tbox)] {
            if let Some(c) = self.caps.get_mut(&id) {
                if c.host == Host::Unknown || (c.host_inferred && c.host != host) {
                    c.host = host;
                    c.host_inferred = inferred;
                }
                c.paired = Some(other);
            }
        }
        self.say(format!(
            "captures `{tn}` and `{gn}` show the same path at its two ends ({why}); `{tn}` is on the T-Box{}",
            if inferred { " (it saw client-to-server copies first)" } else { "" }
        ));
        (tbox, gw)
    }

    /// Capture `id` saw a packet `src` → `dst` (`up`: from the client) of a connection with
    /// `evidence` that places it at the client's end (`at_client`) or the server's: unless
    /// its host is stated, or it is paired (the pair decides), the T-Box's or the gateway's,
    /// said. The first such evidence decides; when this one did, the packet's direction there.
    pub fn infer_end(
        &mut self,
        id: CaptureId,
        at_client: bool,
        (src, dst, up): (SocketAddr, SocketAddr, Option<bool>),
        evidence: EndEvidence,
    ) -> Option<Dir> {
        let c = self.caps.get_mut(&id)?;
        if c.host != Host::Unknown || c.paired.is_some() {
            return None;
        }
        let (host, end, host_name) = if at_client {
            (Host::Tbox, "client's", "the T-Box")
        } else {
            (Host::Gateway, "server's", "the gateway")
        };
        c.host = host;
        c.host_inferred = true;
        let name = c.point.name.clone();
        let dir = c.dir_of_pair(&src, &dst, up);
        let (client, server) = if up.unwrap_or(true) {
            (src, dst)
        } else {
            (dst, src)
        };
        let ms = |ns: u64| ns as f64 / 1e6;
        let (protocol, why) = match evidence {
            EndEvidence::Handshake { first, second } => (
                "TCP ",
                format!(
                    "SYN to SYN-ACK {:.3} ms, SYN-ACK to the client's next {:.3} ms",
                    ms(first),
                    ms(second)
                ),
            ),
            EndEvidence::Ttl { client, server } => (
                "",
                format!(
                    "the client's packets have TTL {client}, the server's {server}: the {} leave \
                 this host at their first TTL",
                    if at_client { "client's" } else { "server's" }
                ),
            ),
        };
        self.say(format!(
            "capture `{name}` is on {host_name}: at the {end} end of {protocol}{client} → \
             {server} ({why})"
        ));
        Some(dir)
    }

    /// Whether two captures or more are not paired (yet): two of them may show the same path
    /// at its two ends.
    pub fn several_unpaired(&self) -> bool {
        self.caps
            .values()
            .filter(|c| c.paired.is_none())
            .nth(1)
            .is_some()
    }

    /// Whether capture `id` is not paired (yet) while another could still be the other end of
    /// its path: unpaired too, and not stated or inferred to be on the same host.
    pub fn may_yet_pair(&self, id: CaptureId) -> bool {
        let Some(me) = self.caps.get(&id).filter(|c| c.paired.is_none()) else {
            return false;
        };
        self.caps.values().any(|c| {
            !std::ptr::eq(c, me)
                && c.paired.is_none()
                && (c.host == Host::Unknown || me.host == Host::Unknown || c.host != me.host)
        })
    }

    /// Whether the clock of capture `id` is settled: its offset given, estimated, or not needed
    /// (it is the reference: unpaired, or the T-Box end of its path).
    pub fn clock_settled(&self, id: CaptureId) -> bool {
        self.caps.get(&id).is_none_or(|c| {
            c.paired.is_none()
                || c.point.clock_offset_ns.is_some()
                || c.offset_estimated
                || c.host == Host::Tbox
        })
    }

    /// Records the delay of one copy seen at both ends of a paired path (raw timestamps) and
    /// re-estimates the clock offset; true if this gave the first estimate.
    pub fn record_delay(&mut self, sender: (CaptureId, u64), receiver: (CaptureId, u64)) -> bool {
        let (Some(s), Some(r)) = (self.caps.get(&sender.0), self.caps.get(&receiver.0)) else {
            return false;
        };
        let (tbox, gw, uplink) = match (s.host, r.host) {
            (Host::Tbox, _) => (sender, receiver, true),
            (_, Host::Tbox) => (receiver, sender, false),
            (Host::Gateway, _) => (receiver, sender, false),
            _ => (sender, receiver, true),
        };
        // Raw arrival − send: uplink = δ_up + e, downlink = δ_down − e (e: gateway clock error).
        let d = i128::from(receiver.1) - i128::from(sender.1);
        let d = d.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
        let e = self.delays.entry((tbox.0, gw.0)).or_default();
        let slot = if uplink {
            &mut e.min_up
        } else {
            &mut e.min_down
        };
        *slot = Some(slot.map_or(d, |m| m.min(d)));
        let e = *e;
        let given = self.caps.get(&gw.0).and_then(|c| c.point.clock_offset_ns);
        if given.is_some() {
            return false;
        }
        if let (Some(up), Some(down)) = (e.min_up, e.min_down) {
            let tbox_off = self.offset(tbox.0);
            let est = tbox_off.saturating_add(down.saturating_sub(up) / 2);
            let first = self.caps.get(&gw.0).is_some_and(|c| !c.offset_estimated);
            if let Some(c) = self.caps.get_mut(&gw.0) {
                c.offset_ns = est;
                c.offset_estimated = true;
            }
            if first {
                let n = self
                    .caps
                    .get(&gw.0)
                    .map_or_else(String::new, |c| c.point.name.clone());
                self.say(format!(
                    "clock offset of `{n}` estimated from copies in both directions: {:+.3} ms (updated as traffic flows)",
                    est as f64 / 1e6
                ));
            }
            return first;
        }
        false
    }

    /// Views for the snapshot.
    pub fn views(&self, path_label: impl Fn(PathIdx) -> String) -> Vec<CaptureView> {
        let mut v: Vec<CaptureView> = self
            .caps
            .values()
            .map(|c| CaptureView {
                capture: c.point.capture,
                name: c.point.name.clone(),
                path: path_label(c.path),
                host: c.host,
                paired_with: c.paired,
                clock_offset_ns: c.offset_ns,
                clock_offset_estimated: c.offset_estimated,
                packets: c.packets,
            })
            .collect();
        v.sort_by_key(|c| c.capture);
        v
    }
}
