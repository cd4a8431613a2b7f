//! Per-conversation KCP analysis, sans-IO: fed decoded segments with their capture time, the
//! direction they travel and the path (interface) they were seen on; returns events.
//!
//! # What is derived, and the rules
//! - **Copies.** A PUSH seen again with the same `sn` *and* the same `ts` is the same
//!   transmission seen twice (a redundant copy on the other path, or a network duplicate):
//!   [`ConvEvent::Copy`], never a retransmission. ikcp and kcp-go stamp `ts` anew on every
//!   transmission, so `ts` tells transmissions apart.
//! - **Retransmissions.** The same `sn` with a *different* (later) `ts`:
//!   [`ConvEvent::Retransmission`]. Classified as
//!   - [`ResendKind::Fast`] when, between the previous transmission and this one, at least
//!     [`ConvTrackerConfig::fast_resend_min_acks`] ACKs for *higher* sequence numbers came back
//!     from the peer (ikcp's fast-resend trigger: segments acknowledged past this one) **and** the
//!     `ts` gap is below the sender's timeout floor: the gap of the latest *certain* timeout in
//!     this direction (a first retransmission with no such ACK before it — nothing but the timer
//!     can have caused it), or, before one was seen, twice the smoothed RTT (ikcp's RTO is at
//!     least `srtt` + its update interval), at least 30 ms; with neither, the ACKs alone decide;
//!   - [`ResendKind::Timeout`] otherwise (no skipping ACKs, or a gap of a full RTO or more).
//!     Successive timeouts of one `sn` show the sender's backoff in `ts_gap_ms`.
//!
//!   When the sender's RTO is barely above the RTT (no-delay mode on a steady link), a fast
//!   resend and a timeout fire at nearly the same moment and the sender itself races them; the
//!   rule then says "timeout" once a certain timeout has shown how short the RTO is.
//! - **RTT.** An ACK echoes the `sn` and the `ts` of the transmission it acknowledges. The echoed
//!   `ts` picks the exact transmission (original or which retransmission: no ambiguity), and
//!   `rtt_ns` = capture time of the ACK − capture time of that transmission's first copy. Taken
//!   at the sender, this is the sender's RTT; elsewhere it is the RTT from the capture point.
//! - **Messages.** PUSH segments are put in `sn` order per direction (as the receiver does); a
//!   message is a run whose `frg` counts down to 0. [`ConvEvent::Message`] says whether its
//!   start was seen and all fragments arrived.
//! - **Window.** WASK / WINS are reported as probes; a `wnd` of 0 advertised by one side starts a
//!   receive-window stall of the other direction's data, ended by the first `wnd > 0`.
//!
//! Memory is bounded: per conversation and direction at most
//! [`ConvTrackerConfig::max_tracked_sns`] sequence numbers (oldest evicted and counted), at most
//! [`ConvTrackerConfig::max_convs`] conversations (least recently active evicted and counted).
//! A tracked `sn` costs about 120 bytes, so the defaults (1024 `sn`s, 512 conversations) bound
//! the tracker to about 130 MB in the worst case; typical use is far below (KCP windows are
//! 32–1024 segments and acknowledged `sn`s are forgotten).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::conv_store::{
    before, Fragment, IntMap, MessageInProgress, Transmission, Transmissions, TxRecord, TxWindow,
};
use super::segment::{Cmd, KcpSegment};

/// Which way a segment travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// From the T-Box to the gateway.
    Up,
    /// From the gateway to the T-Box.
    Down,
}

impl Direction {
    /// The other direction.
    pub const fn opposite(self) -> Self {
        match self {
            Self::Up => Self::Down,
            Self::Down => Self::Up,
        }
    }
    const fn index(self) -> usize {
        match self {
            Self::Up => 0,
            Self::Down => 1,
        }
    }
}

/// How a retransmission was triggered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResendKind {
    /// Fast resend: later segments were acknowledged, within one RTO.
    Fast,
    /// Timeout: the retransmission timer ran out.
    Timeout,
}

/// Identifies a conversation: the caller's scope (e.g. the peer pair, path-independent so that
/// copies on both paths meet) and the KCP `conv`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ConvKey {
    /// Caller-defined grouping; 0 if one scope is enough.
    pub scope: u64,
    /// KCP conversation id.
    pub conv: u32,
}

/// Where and when a segment was seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observation {
    /// Capture time in nanoseconds (any epoch, monotonic within the input).
    pub time_ns: u64,
    /// Which way the segment travels.
    pub direction: Direction,
    /// Path (interface) index, as labelled by the caller.
    pub path: u16,
    /// Conversation scope (see [`ConvKey::scope`]).
    pub scope: u64,
}

/// Tracker settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConvTrackerConfig {
    /// Most conversations tracked at once.
    pub max_convs: usize,
    /// Most sequence numbers tracked per conversation and direction.
    pub max_tracked_sns: usize,
    /// ACKs of higher sequence numbers needed to call a retransmission fast.
    pub fast_resend_min_acks: u32,
    /// Recent ACKs remembered per direction for the fast-resend rule.
    pub ack_log_len: usize,
    /// How long a cumulatively acknowledged `sn` is kept (to recognise late copies and duplicate
    /// ACKs on the slower path) before it is forgotten.
    pub linger_ns: u64,
}

impl Default for ConvTrackerConfig {
    fn default() -> Self {
        Self {
            max_convs: 512,
            max_tracked_sns: 1024,
            fast_resend_min_acks: 1,
            ack_log_len: 1024,
            linger_ns: 2_000_000_000,
        }
    }
}

/// Something the tracker found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ConvEvent {
    /// A whole message (or what arrived of it) in sequence order.
    Message {
        /// Conversation.
        key: ConvKey,
        /// Direction of the data.
        direction: Direction,
        /// Sequence number of the first fragment.
        first_sn: u32,
        /// Fragments in the message.
        fragments: u32,
        /// Payload bytes.
        bytes: u64,
        /// First sighting of the first fragment seen.
        first_ns: u64,
        /// Time the last missing fragment was first seen.
        complete_ns: u64,
        /// Start seen and every fragment present (false: capture began mid-message, or a
        /// fragment never arrived and the tracker gave up on it).
        complete: bool,
    },
    /// The same transmission seen again (same `sn` and `ts`), e.g. the copy on the other path.
    Copy {
        /// Conversation.
        key: ConvKey,
        /// Direction of the data.
        direction: Direction,
        /// Sequence number.
        sn: u32,
        /// Path of this sighting.
        path: u16,
        /// Path of the first sighting.
        first_path: u16,
        /// Time since the first sighting.
        delay_ns: u64,
        /// Capture time of this sighting.
        time_ns: u64,
    },
    /// A new transmission of an `sn` already sent.
    Retransmission {
        /// Conversation.
        key: ConvKey,
        /// Direction of the data.
        direction: Direction,
        /// Sequence number.
        sn: u32,
        /// Transmission number (2 = first retransmission).
        attempt: u32,
        /// Fast resend or timeout.
        kind: ResendKind,
        /// Sender clock difference to the previous transmission (ms, from `ts`).
        ts_gap_ms: u32,
        /// Capture time since the previous transmission was first seen.
        gap_ns: u64,
        /// ACKs of higher sequence numbers seen in between.
        skip_acks: u32,
        /// Path of this transmission.
        path: u16,
        /// Capture time.
        time_ns: u64,
    },
    /// An RTT sample from an ACK.
    Rtt {
        /// Conversation.
        key: ConvKey,
        /// Direction of the acknowledged data.
        direction: Direction,
        /// Acknowledged sequence number.
        sn: u32,
        /// Which transmission the echoed `ts` names (1 = original, 0 = unknown).
        attempt: u32,
        /// ACK capture time − first capture of that transmission.
        rtt_ns: u64,
        /// Path the data went on (first copy).
        data_path: u16,
        /// Path the ACK came back on.
        ack_path: u16,
        /// Capture time of the ACK.
        time_ns: u64,
    },
    /// A window probe (WASK) or answer (WINS).
    WindowProbe {
        /// Conversation.
        key: ConvKey,
        /// Direction of the probe segment.
        direction: Direction,
        /// WASK or WINS.
        cmd: Cmd,
        /// Window the sender advertises in it.
        wnd: u16,
        /// Capture time.
        time_ns: u64,
    },
    /// One side advertised a zero receive window: data towards it (`stalled`) must stop.
    StallStart {
        /// Conversation.
        key: ConvKey,
        /// Direction of the data that is blocked.
        stalled: Direction,
        /// Capture time.
        time_ns: u64,
    },
    /// The window reopened.
    StallEnd {
        /// Conversation.
        key: ConvKey,
        /// Direction of the data that was blocked.
        stalled: Direction,
        /// How long the window stayed closed.
        duration_ns: u64,
        /// Window advertised on reopening.
        wnd: u16,
        /// Capture time.
        time_ns: u64,
    },
}

/// Counters of one conversation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConvStats {
    /// Segments by direction (up, down).
    pub segments: [u64; 2],
    /// PUSH segments (first sightings of new `sn`s) by direction.
    pub pushes: [u64; 2],
    /// Payload bytes of new PUSH segments by direction.
    pub bytes: [u64; 2],
    /// ACK segments by direction.
    pub acks: [u64; 2],
    /// Copies (same transmission seen again) by direction of the data.
    pub copies: [u64; 2],
    /// Fast retransmissions by direction of the data.
    pub fast_resends: [u64; 2],
    /// Timeout retransmissions by direction of the data.
    pub timeout_resends: [u64; 2],
    /// Late first sightings of an older transmission (after a newer one) by direction.
    pub reordered_transmissions: [u64; 2],
    /// Messages delivered by direction.
    pub messages: [u64; 2],
    /// Messages delivered incomplete by direction.
    pub incomplete_messages: [u64; 2],
    /// RTT samples by direction of the data.
    pub rtt_samples: [u64; 2],
    /// ACKs whose `sn`/`ts` matched no tracked transmission, by direction of the data.
    pub unmatched_acks: [u64; 2],
    /// ACKs seen again for an already acknowledged transmission, by direction of the data.
    pub duplicate_acks: [u64; 2],
    /// Window probes (WASK + WINS) by direction of the probe.
    pub window_probes: [u64; 2],
    /// Receive-window stalls by blocked direction.
    pub stalls: [u64; 2],
    /// Tracked sequence numbers evicted for the memory bound, by direction.
    pub evicted_sns: [u64; 2],
    /// Fragments dropped from reassembly because a gap never filled, by direction.
    pub reassembly_dropped: [u64; 2],
    /// PUSH segments for `sn`s already cumulatively acknowledged and forgotten (spurious or
    /// very late retransmissions), by direction.
    pub resends_after_ack: [u64; 2],
}

/// Tracker-wide counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrackerStats {
    /// Segments fed in.
    pub segments: u64,
    /// Conversations evicted for the memory bound.
    pub evicted_convs: u64,
}

/// State of the data travelling in one direction (sender side and receiver reassembly).
#[derive(Clone, Debug, Default)]
struct Side {
    tx: TxWindow,
    /// Recent ACKed `sn`s from the peer, with `ack_base` the index of the first.
    ack_log: VecDeque<u32>,
    ack_base: u64,
    /// Advances of the peer's cumulative ACK (una, capture time), applied after the linger time.
    pending_una: VecDeque<(u32, u64)>,
    /// RTT estimator (ns).
    srtt: Option<u64>,
    rttvar: u64,
    // Reassembly.
    rcv_nxt: Option<u32>,
    pending: IntMap<u32, Fragment>,
    message: Option<MessageInProgress>,
    start_known: bool,
    /// Receive-window stall of this direction's data: start time.
    stall_since: Option<u64>,
    /// Highest cumulative ACK applied: `sn`s below it are forgotten.
    acked_floor: Option<u32>,
    /// `ts` gap of the latest certain timeout (first retransmission, no skipping ACK).
    last_timeout_gap_ms: Option<u32>,
}

impl Side {
    fn ack_index(&self) -> u64 {
        self.ack_base.saturating_add(self.ack_log.len() as u64)
    }

    fn log_ack(&mut self, sn: u32, cap: usize) {
        if cap == 0 {
            return;
        }
        if self.ack_log.len() >= cap {
            self.ack_log.pop_front();
            self.ack_base = self.ack_base.saturating_add(1);
        }
        self.ack_log.push_back(sn);
    }

    /// ACKs of sequence numbers after `sn` logged since index `mark`.
    fn skip_acks_since(&self, mark: u64, sn: u32) -> u32 {
        let start = usize::try_from(mark.saturating_sub(self.ack_base)).unwrap_or(usize::MAX);
        let n = self
            .ack_log
            .iter()
            .skip(start)
            .filter(|&&acked| before(sn, acked))
            .count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// The `ts` gap below which a retransmission cannot be the sender's timeout: the gap of the
    /// latest certain timeout (a first retransmission with no ACK of a later segment before it),
    /// else twice the smoothed RTT (ikcp's RTO is at least srtt + its update interval, and its
    /// minimum RTO 30 or 100 ms), at least 30 ms; unknown without either.
    fn timeout_floor_ms(&self) -> Option<u64> {
        self.last_timeout_gap_ms
            .map(u64::from)
            .or_else(|| self.srtt.map(|s| (s.saturating_mul(2) / 1_000_000).max(30)))
    }

    fn rtt_sample(&mut self, rtt: u64) {
        match self.srtt {
            None => {
                self.srtt = Some(rtt);
                self.rttvar = rtt / 2;
            }
            Some(s) => {
                let delta = s.abs_diff(rtt);
                self.rttvar = (self.rttvar.saturating_mul(3).saturating_add(delta)) / 4;
                self.srtt = Some((s.saturating_mul(7).saturating_add(rtt)) / 8);
            }
        }
    }

    /// Records an advance of the peer's cumulative ACK.
    fn note_una(&mut self, una: u32, time_ns: u64) {
        let newest = self
            .pending_una
            .back()
            .map(|(u, _)| *u)
            .or(self.acked_floor);
        if newest.is_some_and(|n| !before(n, una)) {
            return;
        }
        if self.pending_una.len() >= MAX_PENDING_UNA {
            if let Some((old, _)) = self.pending_una.pop_front() {
                self.forget_below(old);
            }
        }
        self.pending_una.push_back((una, time_ns));
    }

    /// Forgets the `sn`s acknowledged cumulatively more than `linger_ns` before `now`.
    fn apply_una(&mut self, now: u64, linger_ns: u64) {
        while let Some(&(una, at)) = self.pending_una.front() {
            if now.saturating_sub(at) < linger_ns {
                break;
            }
            self.pending_una.pop_front();
            self.forget_below(una);
        }
    }

    fn forget_below(&mut self, una: u32) {
        if self.acked_floor.is_none_or(|f| before(f, una)) {
            self.acked_floor = Some(una);
        }
        self.tx.forget_below(una);
    }
}

/// Most cumulative-ACK advances waiting for their linger time per direction.
const MAX_PENDING_UNA: usize = 256;

/// One conversation.
#[derive(Clone, Debug, Default)]
struct Conv {
    sides: [Side; 2],
    stats: ConvStats,
    last_ns: u64,
}

/// Tracks KCP conversations from decoded segments; never reads a clock.
#[derive(Clone, Debug, Default)]
pub struct ConvTracker {
    config: ConvTrackerConfig,
    convs: IntMap<ConvKey, Conv>,
    stats: TrackerStats,
}

fn bump(counter: &mut [u64; 2], dir: Direction) {
    if let Some(c) = counter.get_mut(dir.index()) {
        *c = c.saturating_add(1);
    }
}

fn add(counter: &mut [u64; 2], dir: Direction, n: u64) {
    if let Some(c) = counter.get_mut(dir.index()) {
        *c = c.saturating_add(n);
    }
}

impl ConvTracker {
    /// A tracker with `config`.
    pub fn new(config: ConvTrackerConfig) -> Self {
        Self {
            config,
            convs: IntMap::default(),
            stats: TrackerStats::default(),
        }
    }

    /// Tracker-wide counters.
    pub fn stats(&self) -> &TrackerStats {
        &self.stats
    }

    /// Counters of one conversation.
    pub fn conv_stats(&self, key: ConvKey) -> Option<&ConvStats> {
        self.convs.get(&key).map(|c| &c.stats)
    }

    /// Every tracked conversation with its counters.
    pub fn convs(&self) -> impl Iterator<Item = (ConvKey, &ConvStats)> {
        self.convs.iter().map(|(k, c)| (*k, &c.stats))
    }

    /// Smoothed RTT (ns) of the data going in `direction`, if sampled.
    pub fn srtt_ns(&self, key: ConvKey, direction: Direction) -> Option<u64> {
        self.convs
            .get(&key)
            .and_then(|c| c.sides.get(direction.index()))
            .and_then(|s| s.srtt)
    }

    /// Feeds one segment; events found are appended to `out`.
    pub fn observe(&mut self, obs: Observation, segment: &KcpSegment, out: &mut Vec<ConvEvent>) {
        self.stats.segments = self.stats.segments.saturating_add(1);
        let key = ConvKey {
            scope: obs.scope,
            conv: segment.conv,
        };
        if !self.convs.contains_key(&key) && self.convs.len() >= self.config.max_convs {
            self.evict_idle_conv();
        }
        let config = &self.config;
        let conv = self.convs.entry(key).or_default();
        conv.last_ns = conv.last_ns.max(obs.time_ns);
        let dir = obs.direction;
        bump(&mut conv.stats.segments, dir);
        for side in conv.sides.iter_mut() {
            side.apply_una(obs.time_ns, config.linger_ns);
        }
        // Every segment carries the sender's cumulative ACK of the peer's data and its window.
        if let Some(peer) = conv.sides.get_mut(dir.opposite().index()) {
            peer.note_una(segment.una, obs.time_ns);
        }
        track_window(conv, key, obs, segment, out);
        match segment.cmd {
            Cmd::Push => on_push(conv, config, key, obs, segment, out),
            Cmd::Ack => on_ack(conv, config, key, obs, segment, out),
            Cmd::Wask | Cmd::Wins => {
                bump(&mut conv.stats.window_probes, dir);
                out.push(ConvEvent::WindowProbe {
                    key,
                    direction: dir,
                    cmd: segment.cmd,
                    wnd: segment.wnd,
                    time_ns: obs.time_ns,
                });
            }
        }
    }

    fn evict_idle_conv(&mut self) {
        let oldest = self
            .convs
            .iter()
            .min_by_key(|(_, c)| c.last_ns)
            .map(|(k, _)| *k);
        if let Some(k) = oldest {
            self.convs.remove(&k);
            self.stats.evicted_convs = self.stats.evicted_convs.saturating_add(1);
        }
    }
}

/// Window stall tracking: `wnd` in a segment is its sender's free receive window.
fn track_window(
    conv: &mut Conv,
    key: ConvKey,
    obs: Observation,
    segment: &KcpSegment,
    out: &mut Vec<ConvEvent>,
) {
    let stalled = obs.direction.opposite();
    let Some(side) = conv.sides.get_mut(stalled.index()) else {
        return;
    };
    match (segment.wnd, side.stall_since) {
        (0, None) => {
            side.stall_since = Some(obs.time_ns);
            bump(&mut conv.stats.stalls, stalled);
            out.push(ConvEvent::StallStart {
                key,
                stalled,
                time_ns: obs.time_ns,
            });
        }
        (wnd, Some(since)) if wnd > 0 => {
            side.stall_since = None;
            out.push(ConvEvent::StallEnd {
                key,
                stalled,
                duration_ns: obs.time_ns.saturating_sub(since),
                wnd,
                time_ns: obs.time_ns,
            });
        }
        _ => {}
    }
}

fn on_push(
    conv: &mut Conv,
    config: &ConvTrackerConfig,
    key: ConvKey,
    obs: Observation,
    seg: &KcpSegment,
    out: &mut Vec<ConvEvent>,
) {
    let dir = obs.direction;
    let Some(side) = conv.sides.get_mut(dir.index()) else {
        return;
    };
    let stats = &mut conv.stats;
    let mut this = Transmission {
        ts: seg.ts,
        attempt: 1,
        time_ns: obs.time_ns,
        path: obs.path,
    };
    let ack_index = side.ack_index();
    let mut retransmission = None;
    if let Some(rec) = side.tx.get_mut(seg.sn) {
        if let Some(first) = rec.transmissions.find(seg.ts) {
            bump(&mut stats.copies, dir);
            out.push(ConvEvent::Copy {
                key,
                direction: dir,
                sn: seg.sn,
                path: obs.path,
                first_path: first.path,
                delay_ns: obs.time_ns.saturating_sub(first.time_ns),
                time_ns: obs.time_ns,
            });
            return;
        }
        if before(seg.ts, rec.ts) {
            // First sighting of an older transmission after a newer one (paths of unequal delay).
            this.attempt = 0;
            rec.transmissions.push(this);
            bump(&mut stats.reordered_transmissions, dir);
            return;
        }
        rec.attempts = rec.attempts.saturating_add(1);
        this.attempt = u16::try_from(rec.attempts).unwrap_or(u16::MAX);
        rec.transmissions.push(this);
        retransmission = Some((
            rec.attempts,
            seg.ts.wrapping_sub(rec.ts),
            obs.time_ns.saturating_sub(rec.last_ns),
            rec.ack_mark,
        ));
        rec.ts = seg.ts;
        rec.last_ns = obs.time_ns;
        rec.ack_mark = ack_index;
    }
    if let Some((attempt, ts_gap_ms, gap_ns, mark)) = retransmission {
        let skip_acks = side.skip_acks_since(mark, seg.sn);
        let early = side
            .timeout_floor_ms()
            .is_none_or(|floor| u64::from(ts_gap_ms) < floor);
        if attempt == 2 && skip_acks == 0 {
            side.last_timeout_gap_ms = Some(ts_gap_ms);
        }
        let kind = if skip_acks >= config.fast_resend_min_acks && early {
            bump(&mut stats.fast_resends, dir);
            ResendKind::Fast
        } else {
            bump(&mut stats.timeout_resends, dir);
            ResendKind::Timeout
        };
        out.push(ConvEvent::Retransmission {
            key,
            direction: dir,
            sn: seg.sn,
            attempt,
            kind,
            ts_gap_ms,
            gap_ns,
            skip_acks,
            path: obs.path,
            time_ns: obs.time_ns,
        });
        return;
    }
    if side.acked_floor.is_some_and(|floor| before(seg.sn, floor)) {
        bump(&mut stats.resends_after_ack, dir);
        return;
    }
    // A new sequence number.
    bump(&mut stats.pushes, dir);
    add(&mut stats.bytes, dir, u64::from(seg.len));
    let record = TxRecord {
        transmissions: Transmissions::one(this),
        ts: seg.ts,
        last_ns: obs.time_ns,
        attempts: 1,
        ack_mark: ack_index,
        acked_ts: None,
    };
    let evicted = side.tx.insert(seg.sn, record, config.max_tracked_sns);
    add(&mut stats.evicted_sns, dir, evicted);
    reassemble(side, stats, config, key, dir, seg, obs.time_ns, out);
}

#[allow(clippy::too_many_arguments)]
fn reassemble(
    side: &mut Side,
    stats: &mut ConvStats,
    config: &ConvTrackerConfig,
    key: ConvKey,
    dir: Direction,
    seg: &KcpSegment,
    time_ns: u64,
    out: &mut Vec<ConvEvent>,
) {
    let rcv_nxt = *side.rcv_nxt.get_or_insert_with(|| {
        side.start_known = seg.sn == 0;
        seg.sn
    });
    if before(seg.sn, rcv_nxt) {
        return;
    }
    let fragment = Fragment {
        frg: seg.frg,
        len: seg.len,
        time_ns,
    };
    if seg.sn == rcv_nxt && side.pending.is_empty() {
        // In order, nothing waiting: deliver straight away.
        side.rcv_nxt = Some(rcv_nxt.wrapping_add(1));
        deliver(side, stats, key, dir, seg.sn, fragment, out);
        return;
    }
    side.pending.insert(seg.sn, fragment);
    // Too many out of order (a gap that never fills): give up on what is waiting and start over
    // at the next segment. Clearing everything keeps this O(1) amortised.
    if side.pending.len() > config.max_tracked_sns {
        if let Some(m) = side.message.take() {
            emit_message(stats, key, dir, m, false, out);
        }
        add(
            &mut stats.reassembly_dropped,
            dir,
            side.pending.len() as u64,
        );
        side.pending.clear();
        side.rcv_nxt = None;
        side.start_known = false;
        return;
    }
    while let Some(sn) = side.rcv_nxt {
        let Some(f) = side.pending.remove(&sn) else {
            break;
        };
        side.rcv_nxt = Some(sn.wrapping_add(1));
        deliver(side, stats, key, dir, sn, f, out);
    }
}

fn deliver(
    side: &mut Side,
    stats: &mut ConvStats,
    key: ConvKey,
    dir: Direction,
    sn: u32,
    f: Fragment,
    out: &mut Vec<ConvEvent>,
) {
    if let Some(m) = side.message {
        if m.last_frg.checked_sub(1) != Some(f.frg) {
            // The countdown broke: the rest of that message never came.
            side.message = None;
            emit_message(stats, key, dir, m, false, out);
            side.start_known = false;
        }
    }
    let m = side.message.get_or_insert(MessageInProgress {
        first_sn: sn,
        last_frg: f.frg,
        fragments: 0,
        bytes: 0,
        first_ns: f.time_ns,
        complete_ns: f.time_ns,
        start_seen: side.start_known,
    });
    m.last_frg = f.frg;
    m.fragments = m.fragments.saturating_add(1);
    m.bytes = m.bytes.saturating_add(u64::from(f.len));
    m.first_ns = m.first_ns.min(f.time_ns);
    m.complete_ns = m.complete_ns.max(f.time_ns);
    if f.frg == 0 {
        let done = *m;
        side.message = None;
        side.start_known = true;
        emit_message(stats, key, dir, done, done.start_seen, out);
    }
}

fn emit_message(
    stats: &mut ConvStats,
    key: ConvKey,
    direction: Direction,
    m: MessageInProgress,
    complete: bool,
    out: &mut Vec<ConvEvent>,
) {
    if complete {
        bump(&mut stats.messages, direction);
    } else {
        bump(&mut stats.incomplete_messages, direction);
    }
    out.push(ConvEvent::Message {
        key,
        direction,
        first_sn: m.first_sn,
        fragments: m.fragments,
        bytes: m.bytes,
        first_ns: m.first_ns,
        complete_ns: m.complete_ns,
        complete,
    });
}

fn on_ack(
    conv: &mut Conv,
    config: &ConvTrackerConfig,
    key: ConvKey,
    obs: Observation,
    seg: &KcpSegment,
    out: &mut Vec<ConvEvent>,
) {
    bump(&mut conv.stats.acks, obs.direction);
    // The ACK acknowledges data that travelled the other way.
    let data_dir = obs.direction.opposite();
    let Some(side) = conv.sides.get_mut(data_dir.index()) else {
        return;
    };
    let stats = &mut conv.stats;
    side.log_ack(seg.sn, config.ack_log_len);
    let Some(rec) = side.tx.get_mut(seg.sn) else {
        bump(&mut stats.unmatched_acks, data_dir);
        return;
    };
    if rec.acked_ts == Some(seg.ts) {
        bump(&mut stats.duplicate_acks, data_dir);
        return;
    }
    let Some(first) = rec.transmissions.find(seg.ts) else {
        bump(&mut stats.unmatched_acks, data_dir);
        return;
    };
    let attempt = u32::from(first.attempt);
    rec.acked_ts = Some(seg.ts);
    let rtt_ns = obs.time_ns.saturating_sub(first.time_ns);
    side.rtt_sample(rtt_ns);
    bump(&mut stats.rtt_samples, data_dir);
    out.push(ConvEvent::Rtt {
        key,
        direction: data_dir,
        sn: seg.sn,
        attempt,
        rtt_ns,
        data_path: first.path,
        ack_path: obs.path,
        time_ns: obs.time_ns,
    });
}
