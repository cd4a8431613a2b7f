//! TCP from the wire: per connection seen by one capture, both directions, every
//! retransmission found and classified (fast, RTO with its backoff level, tail loss probe,
//! loss recovery, resent smaller after a router's path MTU signal; spurious by D-SACK, by an
//! earlier acknowledgment or by timestamps), RTT samples (Karn's rule; the timestamps option
//! when present) and the RTO estimate of RFC 6298
//! with Linux's 200 ms floor. Emits `tcp_retransmit` and `tcp_rto` records with
//! `"source": "wire"`, the same types the kernel's probes write.
//!
//! Sequence numbers are unwrapped to 64 bits per direction. Memory is bounded: at most
//! [`MAX_CONNECTIONS`] connections (the least recently active evicted in batches), and per
//! direction [`MAX_SEGMENTS`] sent segments and [`MAX_PENDING`] retransmissions awaiting their
//! verdict; every eviction is counted in [`TcpWireSummary`].

use std::collections::VecDeque;
use std::net::SocketAddr;

use tboxscope_decode::tcp::TcpOptions;

use crate::capture::Dir;
use crate::flow::{FlowRef, Proto};
use crate::input::{CaptureId, PathMtuSignal, TcpSegment};
use crate::matcher::after;
use crate::matcher::tcpmsg::{self, Acked, BegunPastHole, Facts, FillVerdict, Outstanding};
use crate::paths::PathIdx;
use crate::record::{
    Record, Spurious, TcpRetransmitKind, TcpRetransmitRecord, TcpRtoRecord, TcpSource,
    TcpWireDirection, TcpWireSummary,
};
use crate::shared::{Pkt, Shared};
use crate::FastMap;

/// Connections followed at once.
pub const MAX_CONNECTIONS: usize = 4096;
/// Sent segments remembered per direction.
pub const MAX_SEGMENTS: usize = 4096;
/// Retransmissions awaiting their verdict per direction.
pub const MAX_PENDING: usize = 256;
/// Timestamps (TSval → first send) remembered per direction for RTT samples.
const MAX_TSVALS: usize = 64;
/// Arrivals awaiting the receiver's ACK per direction (more are not judged, counted): those a
/// receiver may hold unlisted, or out of order without SACK, wait for the cumulative ACK, a
/// round trip or a timeout.
const MAX_ARRIVED: usize = 1024;
/// Arrivals remembered per direction at a receiver's capture, taken or not, from the oldest
/// still awaiting the receiver's ACK on: behind one its receiver dropped, those after it are
/// redone as held (see [`stalls_behind_drops`]).
const MAX_RECENT_ARRIVALS: usize = 256;
/// How long after an arrival the receiver's ACK not taking it says it was dropped past the
/// capture point: its own ACK leaves within microseconds, in the softirq that takes the
/// segment; one its application's thread sends meanwhile may not show the segment yet (seen
/// leaving after the next arrival, on a two-core host), well within this.
pub(crate) const NOT_TAKEN_AFTER_NS: u64 = 5_000_000;
/// Linux's minimum RTO (`TCP_RTO_MIN`).
pub const RTO_MIN_NS: u64 = 200_000_000;
/// Linux's maximum RTO (`TCP_RTO_MAX`).
const RTO_MAX_NS: u64 = 120_000_000_000;
/// The RTO before any RTT sample (RFC 6298 2.1).
const RTO_INITIAL_NS: u64 = 1_000_000_000;
/// Backoff levels counted in the ladder.
const MAX_LEVEL: u8 = 15;

/// One connection at one capture: (capture, lower endpoint, higher endpoint). A capture
/// shows one path, whose index changes when the capture pairs with the far end's: the
/// connection stays one.
type ConnKey = (u16, SocketAddr, SocketAddr);

/// The key of the connection of `sender` and `receiver` at `capture`, and the index of the
/// half that carries `sender`'s data (0: the lower endpoint's).
#[inline]
fn conn_key(capture: u16, sender: &SocketAddr, receiver: &SocketAddr) -> (ConnKey, usize) {
    if sender <= receiver {
        ((capture, *sender, *receiver), 0)
    } else {
        ((capture, *receiver, *sender), 1)
    }
}

/// A segment sent: its end, when it was first and last sent, and how often.
#[derive(Debug, Clone, Copy)]
struct Sent {
    end: u64,
    first_ns: u64,
    last_ns: u64,
    /// TSval and TSecr of its first copy, when it carried timestamps.
    timestamps: Option<(u32, u32)>,
    retransmitted: bool,
}

/// Sent segments in order of their start. New data arrives at the end (an original filling a
/// hole is the rare insert in the middle) and acknowledged data leaves from the front, so a
/// sorted ring does with binary searches what a tree map would with node walks.
#[derive(Debug, Default)]
struct SentSegments(VecDeque<(u64, Sent)>);

impl SentSegments {
    fn len(&self) -> usize {
        self.0.len()
    }

    /// Index of the first segment starting at or after `seq`.
    fn index_from(&self, seq: u64) -> usize {
        match self.0.back() {
            // The common case: `seq` beyond everything remembered.
            Some(&(last, _)) if last < seq => self.0.len(),
            // The next: an ACK's, near the front (acknowledged segments leave from there).
            _ => match self.0.iter().take(4).position(|&(start, _)| start >= seq) {
                Some(i) => i,
                None => self.0.partition_point(|&(start, _)| start < seq),
            },
        }
    }

    /// Remembers `s` as starting at `start` (replacing a segment starting there).
    fn insert(&mut self, start: u64, s: Sent) {
        if self.0.back().is_none_or(|&(last, _)| last < start) {
            // New data, the common case.
            self.0.push_back((start, s));
            return;
        }
        let i = self.index_from(start);
        match self.0.get_mut(i) {
            Some(slot) if slot.0 == start => slot.1 = s,
            _ => self.0.insert(i, (start, s)),
        }
    }

    fn first(&self) -> Option<&(u64, Sent)> {
        self.0.front()
    }

    fn pop_first(&mut self) -> Option<(u64, Sent)> {
        self.0.pop_front()
    }

    /// The last segment starting before `seq`.
    fn last_before(&self, seq: u64) -> Option<&(u64, Sent)> {
        self.index_from(seq)
            .checked_sub(1)
            .and_then(|i| self.0.get(i))
    }

    /// [`SentSegments::last_before`], to change.
    fn last_before_mut(&mut self, seq: u64) -> Option<&mut (u64, Sent)> {
        self.index_from(seq)
            .checked_sub(1)
            .and_then(|i| self.0.get_mut(i))
    }

    /// The first segment starting at or after `seq`.
    fn first_from(&self, seq: u64) -> Option<&(u64, Sent)> {
        self.0.get(self.index_from(seq))
    }
}

/// A retransmission waiting for the ACK that says whether it was needed.
#[derive(Debug, Clone)]
struct Pending {
    record: TcpRetransmitRecord,
    start: u64,
    end: u64,
    /// TSval the retransmission carried (Eifel detection).
    tsval: Option<u32>,
    /// Its record is written from this capture (not when the sender's capture writes it).
    write: bool,
}

/// The timeouts of one backoff episode on the same data.
#[derive(Debug, Clone, Copy)]
struct RtoChain {
    last_ns: u64,
    last_gap_ns: u64,
    level: u8,
    timeouts: u32,
}

/// What routers said did not fit the path (ICMP "fragmentation needed" / "packet too big",
/// each quoting a segment that carried too much).
#[derive(Debug, Clone, Copy)]
struct TooBig {
    /// The newest such message (reference clock).
    at_ns: u64,
    /// The sequence space of the segments quoted, from the first to the end of the last.
    from: u64,
    until: u64,
    /// The smallest MTU named (0: none named).
    mtu: u32,
    /// The end of the bytes resent for it so far: the sender resends them once, in order; what
    /// it sends again below is resent for another reason.
    resent_to: u64,
}

/// IPv4 and TCP headers without options: a segment whose payload and these exceed the path
/// MTU did not fit it.
const MIN_HEADERS: u64 = 40;

impl TooBig {
    /// Whether a resend of `[start, …)`, whose original of `original_len` bytes was first sent
    /// at `first_ns`, sends again what did not fit: bytes of a quoted segment sent before the
    /// router spoke, or of any original too big for the MTU it named and sent within
    /// `slack_ns` (an RTO) of its newest message: the sender's kernel marks all of those lost
    /// at once, some before their own ICMP message comes back, and a full-sized segment sent
    /// that soon after is one the sender sent before taking the message in (or itself too
    /// big for the path still).
    fn covers(&self, start: u64, first_ns: u64, original_len: u64, slack_ns: u64) -> bool {
        if start < self.resent_to {
            return false;
        }
        let quoted = start >= self.from && start < self.until && first_ns <= self.at_ns;
        let too_long = self.mtu > 0
            && original_len + MIN_HEADERS > u64::from(self.mtu)
            && first_ns <= self.at_ns.saturating_add(slack_ns);
        quoted || too_long
    }
}

/// One direction: the data one end sends, and what the other end acknowledges of it.
#[derive(Debug, Default)]
struct Half {
    /// Retransmission and RTO records not written: the sender's capture writes them.
    left_to_sender: u64,
    /// When this capture last noted its data leaving (for [`sender_writes`]; noted at most
    /// every [`NOTE_EVERY_NS`]).
    noted_ns: u64,
    /// The last 32-bit sequence number seen and its unwrapped value.
    anchor: Option<(u32, u64)>,
    /// Highest sequence end sent.
    nxt: u64,
    /// Highest cumulative ACK from the peer.
    una: u64,
    /// When `una` last advanced.
    una_ns: u64,
    /// Duplicate ACKs since `una` last advanced.
    dupacks: u32,
    /// Highest SACKed sequence end above `una`.
    sacked: u64,
    /// Sent segments by start (not overlapping: resends are not inserted).
    sent: SentSegments,
    /// Below this, sequence space counts as seen (the end of the segments evicted from
    /// `sent`, or the first sequence seen: what was sent before the capture began).
    seen_floor: u64,
    /// The first sequence seen: below it, the history is unknown (capture begun
    /// mid-connection).
    history_from: u64,
    /// The receiver's last ACK advertised a zero window.
    zero_window: bool,
    /// The newest TSval and the newest TSecr on a data segment (each on its own).
    max_timestamps: Option<(u32, u32)>,
    /// Last retransmission time.
    last_retx_ns: u64,
    /// Loss recovery after an RTO, until `una` reaches this.
    loss_until: Option<u64>,
    /// Fast recovery, until `una` reaches this.
    recovery_until: Option<u64>,
    /// The last recovery the receiver's ACKs ended (fast, or after a timeout), or the last
    /// loss they signalled (duplicate ACKs, SACK blocks) before acknowledging it all, and
    /// when: a sender that had not yet read those ACKs may still resend what they
    /// acknowledged.
    recovery_ended: Option<(u64, TcpRetransmitKind)>,
    /// The current backoff episode.
    rto: Option<RtoChain>,
    /// What routers said was too big for the path.
    too_big: Option<TooBig>,
    /// TSvals sent and when first.
    tsvals: VecDeque<(u32, u64)>,
    /// The newest TSval put in `tsvals` (none in it is after it).
    newest_tsval: Option<u32>,
    /// RFC 6298 state (ns).
    srtt: Option<u64>,
    rttvar: u64,
    pending: VecDeque<Pending>,
    stats: TcpWireDirection,
    /// Messages sent and not yet acknowledged ([`tcpmsg`]).
    msgs: Outstanding,
    /// The first data byte, when this capture saw the SYN.
    first_byte: Option<u64>,
    /// With the SYN seen: the end of the data seen from the first byte on with no gap.
    contiguous_to: u64,
    /// Where this capture, begun after the stream's start, first saw its data (unwrapped
    /// sequence, when), until the first ACK leaving the capture says whether a hole lay below.
    begun_at: Option<(u64, u64)>,
    /// At the receiver's capture: data seen arriving that no ACK of the receiver's has taken
    /// yet, oldest first (see [`judge_arrivals`]).
    arrived: VecDeque<Arrival>,
    /// The latest arrivals, taken or not, in order, from the oldest in `arrived` on (at most
    /// [`MAX_RECENT_ARRIVALS`]), each with whether it was judged not taken.
    recent: VecDeque<(Arrival, bool)>,
    /// Arrivals just judged not taken, each with the cumulative ACK then and the number of
    /// the last arrival seen before the judgment: the stalls behind them are yet to be made
    /// ([`stalls_behind_drops`]).
    not_taken_now: Vec<(Arrival, u64, u64)>,
    /// The receiver of this data sent SACK blocks: an ACK of its holds every piece it took
    /// past its cumulative ACK (the newest first, the rest as room allows).
    sack_seen: bool,
    /// The receiver may hold data below this (unwrapped) sequence that its ACKs do not list:
    /// one of them filled the SACK option's room (3 blocks beside timestamps, else 4) while
    /// Linux keeps 4 ranges and forgets the oldest for a fifth; 0 when none. An arrival below
    /// it and above the cumulative ACK is not judged by the blocks (see [`judge_arrivals`]).
    unlisted_below: u64,
    /// Arrivals seen here (numbering [`Arrival::no`]).
    arrivals: u64,
    /// The newest arrival an ACK of the receiver's took ([`Arrival::no`], 0: none).
    newest_taken: u64,
    /// The receiver's ACKs of this data are seen leaving this capture.
    receiver_acks_here: bool,
    /// At the receiver's capture: the arrival that fills the hole, waiting for those ACKs.
    fill: Option<tcpmsg::HoleFill>,
}

/// What the receiver's ACKs of a half's data can show of an arrival, at cumulative ACK `ack`.
#[derive(Clone, Copy, Debug)]
struct AckSight {
    ack: u64,
    sack_seen: bool,
    unlisted_below: u64,
}

impl AckSight {
    /// An arrival from `start` the ACKs would show if taken: at the cumulative ACK, or past it
    /// with SACK in use and the receiver not perhaps holding it unlisted.
    fn shows(self, start: u64) -> bool {
        start <= self.ack || (self.sack_seen && start >= self.unlisted_below)
    }

    /// Past the cumulative ACK where the receiver may hold it unlisted.
    fn maybe_unlisted(self, start: u64) -> bool {
        start > self.ack && start < self.unlisted_below
    }

    /// Past the cumulative ACK without SACK: only that ACK can show it, once the hole below
    /// it is filled (the receiver then acknowledges all it holds in order, at once).
    fn waits_for_the_ack(self, start: u64) -> bool {
        !self.sack_seen && start > self.ack
    }
}

/// Data seen arriving at the receiver's capture, for the receiver's ACKs to take.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Arrival {
    /// Unwrapped sequence of the first byte.
    pub(crate) start: u64,
    /// Unwrapped sequence past the last byte.
    pub(crate) end: u64,
    /// When it arrived.
    pub(crate) at_ns: u64,
    /// Its place among the half's arrivals (1, 2, ...).
    no: u64,
    /// Messages the capture's framing completed with it.
    pub(crate) messages: u32,
}

impl Half {
    /// The unwrapped value of `seq`, near the last one seen.
    fn unwrap(&mut self, seq: u32) -> u64 {
        let v = match self.anchor {
            None => (1u64 << 32) + u64::from(seq),
            Some((s, u)) => u.saturating_add_signed(i64::from(seq.wrapping_sub(s) as i32)),
        };
        if self.anchor.is_none_or(|(_, u)| v > u) {
            self.anchor = Some((seq, v));
        }
        v
    }

    /// The unwrapped value of `seq` without moving the anchor (ACK and SACK numbers).
    fn peek(&self, seq: u32) -> Option<u64> {
        self.anchor
            .map(|(s, u)| u.saturating_add_signed(i64::from(seq.wrapping_sub(s) as i32)))
    }

    /// Data `range` seen arriving here at `ts_ns`, to be taken by the receiver's ACKs (see
    /// [`judge_arrivals`]).
    fn arrival(&mut self, range: Option<(u64, u64)>, ts_ns: u64, messages: usize) {
        let Some((start, end)) = range else {
            return;
        };
        // Earlier copies of these bytes no ACK of the receiver's took before this resend came
        // (a taken segment is acknowledged within the delayed-ACK time, which the sender's
        // timers wait out): not taken, where the receiver had them in hand and its ACKs would
        // show them. Not judged where it may not have had them in hand yet (a duplicate right
        // behind a reordered original), or may hold them unlisted (its report of the resend
        // as a duplicate, D-SACK, names one range per ACK: not enough to tell).
        if !self.arrived.is_empty() {
            let sight = AckSight {
                ack: self.una,
                sack_seen: self.sack_seen,
                unlisted_below: self.unlisted_below,
            };
            let (newest_taken, seen) = (self.newest_taken, self.arrivals);
            let (mut not_taken, mut not_judged) = (0, 0);
            let dropped = &mut self.not_taken_now;
            self.arrived.retain(|a| {
                if !(a.start < end && start < a.end) {
                    return true;
                }
                // In hand: the receiver took an arrival after it (it takes them in order), or
                // had time enough to.
                let in_hand =
                    a.no < newest_taken || ts_ns >= a.at_ns.saturating_add(NOT_TAKEN_AFTER_NS);
                if sight.shows(a.start) && in_hand {
                    not_taken += 1;
                    dropped.push((*a, sight.ack, seen));
                    false
                } else if sight.sack_seen || a.start <= sight.ack {
                    not_judged += 1;
                    false
                } else {
                    true
                }
            });
            self.stats.arrivals_not_taken += not_taken;
            self.stats.arrivals_not_judged += not_judged;
        }
        if self.arrived.len() >= MAX_ARRIVED {
            self.arrived.pop_front();
            self.stats.arrivals_not_judged += 1;
        }
        self.arrivals += 1;
        let a = Arrival {
            start,
            end,
            at_ns: ts_ns,
            no: self.arrivals,
            messages: u32::try_from(messages).unwrap_or(u32::MAX),
        };
        self.arrived.push_back(a);
        if self.recent.len() >= MAX_RECENT_ARRIVALS {
            self.recent.pop_front();
        }
        self.recent.push_back((a, false));
    }

    /// Forgets the arrivals no drop can need any more: those before the oldest still awaiting
    /// the receiver's ACK (only an arrival judged later has a stall behind it to make).
    fn forget_settled_arrivals(&mut self) {
        let oldest = self.arrived.front().map_or(u64::MAX, |a| a.no);
        while self.recent.front().is_some_and(|(a, _)| a.no < oldest) {
            self.recent.pop_front();
        }
    }

    /// The capture ends, or the connection is forgotten, with arrivals no ACK judged yet:
    /// counted as not judged.
    fn arrivals_left_unjudged(&mut self) {
        self.stats.arrivals_not_judged += self.arrived.len() as u64;
        self.arrived.clear();
        self.recent.clear();
    }

    fn rto_ns(&self) -> u64 {
        match self.srtt {
            None => RTO_INITIAL_NS,
            Some(srtt) => srtt
                .saturating_add((4 * self.rttvar).max(RTO_MIN_NS))
                .min(RTO_MAX_NS),
        }
    }

    /// Remembers `[start, end)` as first seen at `ts_ns`; returns the segments forgotten to
    /// stay within [`MAX_SEGMENTS`] (their space stays seen below `seen_floor`).
    fn remember(
        &mut self,
        start: u64,
        end: u64,
        ts_ns: u64,
        timestamps: Option<(u32, u32)>,
    ) -> u64 {
        self.sent.insert(
            start,
            Sent {
                end,
                first_ns: ts_ns,
                last_ns: ts_ns,
                timestamps,
                retransmitted: false,
            },
        );
        let mut evicted = 0;
        while self.sent.len() > MAX_SEGMENTS {
            let Some((_, s)) = self.sent.pop_first() else {
                break;
            };
            self.seen_floor = self.seen_floor.max(s.end);
            evicted += 1;
        }
        evicted
    }

    /// A router's word at `at_ns` that the segment this direction sent at `seq` was too big
    /// for a path of `mtu` bytes (0: not said); false when no such segment was seen.
    fn too_big(&mut self, at_ns: u64, seq: u32, mtu: u32) -> bool {
        let Some(start) = self.peek(seq) else {
            return false;
        };
        let Some(end) = self
            .sent
            .last_before(start + 1)
            .filter(|(s, x)| *s == start && x.end > start)
            .map(|(_, x)| x.end)
        else {
            return false;
        };
        self.stats.path_mtu_signals += 1;
        if mtu > 0 && (self.stats.path_mtu == 0 || mtu < self.stats.path_mtu) {
            self.stats.path_mtu = mtu;
        }
        self.too_big = Some(match self.too_big {
            Some(b) => TooBig {
                at_ns: b.at_ns.max(at_ns),
                from: b.from.min(start),
                until: b.until.max(end),
                mtu: match (b.mtu, mtu) {
                    (0, m) | (m, 0) => m,
                    (a, m) => a.min(m),
                },
                // A smaller MTU than before: everything goes again, smaller still.
                resent_to: if mtu > 0 && mtu < b.mtu {
                    0
                } else {
                    b.resent_to
                },
            },
            None => TooBig {
                at_ns,
                from: start,
                until: end,
                mtu,
                resent_to: 0,
            },
        });
        true
    }

    /// Remembers when `tsval` was first sent (its echo times a round trip).
    #[inline]
    fn note_tsval(&mut self, tsval: u32, ts_ns: u64) {
        // Segments sent within a tick share the newest TSval: checked first; one after every
        // TSval remembered is new.
        let known = self.tsvals.back().is_some_and(|(v, _)| *v == tsval)
            || (self.newest_tsval.is_some_and(|n| !after(tsval, n))
                && self.tsvals.iter().any(|(v, _)| *v == tsval));
        if !known {
            if self.newest_tsval.is_none_or(|n| after(tsval, n)) {
                self.newest_tsval = Some(tsval);
            }
            if self.tsvals.len() >= MAX_TSVALS {
                self.tsvals.pop_front();
            }
            self.tsvals.push_back((tsval, ts_ns));
        }
    }

    /// A round trip timed from this capture's ACKs to the data that echoes them, for a half
    /// that sends no data of its own (the receiver's, at its capture): its ACK's TSval left
    /// here, the sender's next new segment echoes it. (The sender may have waited for data
    /// to send: a control channel's samples are longer by that wait, well under the RTO's
    /// 200 ms floor.) Each TSval times one round trip, its first echo.
    fn sample_echo(&mut self, tsecr: u32, ts_ns: u64) {
        if let Some(i) = self.tsvals.iter().rposition(|(v, _)| *v == tsecr) {
            let at = self.tsvals[i].1;
            self.tsvals.drain(..=i);
            self.sample(ts_ns.saturating_sub(at));
        }
    }

    /// One RTT sample (RFC 6298 2.2–2.3).
    fn sample(&mut self, r: u64) {
        self.stats.rtt_samples += 1;
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(srtt) => {
                self.rttvar = (3 * self.rttvar + srtt.abs_diff(r)) / 4;
                self.srtt = Some((7 * srtt + r) / 8);
            }
        }
    }
}

/// One connection at one capture.
#[derive(Debug)]
struct Conn {
    key: ConnKey,
    /// The engine's flow it was last found for (with the capture and path in `key`, it names
    /// the connection while that flow lives).
    flow: FlowRef,
    /// [0]: data from the lower endpoint; [1]: from the higher.
    halves: [Half; 2],
    last_ns: u64,
}

/// Connections found recently, direct-mapped by their flow's slot: the segments of a capture
/// mostly belong to a few connections, found then without hashing their addresses.
const RECENT_CONNS: usize = 32;

/// The TCP wire matcher's state.
#[derive(Debug, Default)]
pub struct TcpWireMatcher {
    /// The connections followed, in no order.
    conns: Vec<Conn>,
    /// Where each connection is in `conns`.
    index: FastMap<ConnKey, usize>,
    /// Positions in `conns` of connections found recently, by [`RECENT_CONNS`] slot (a
    /// position, 0 at first, is used only if its connection has the flow, capture and path
    /// sought).
    recent: [usize; RECENT_CONNS],
    seen: u64,
    evicted_connections: u64,
    evicted_segments: u64,
    evicted_pending: u64,
    /// Path MTU signals about no segment of a connection followed here.
    path_mtu_unmatched: u64,
    /// Directions of evicted connections, kept for the summary (bounded like the table).
    retired: Vec<TcpWireDirection>,
    /// Records made at a capture not yet paired while another capture could still be the
    /// other end of its path, oldest first (see [`TcpWireMatcher::release_held`]).
    held: VecDeque<Held>,
    /// Records not written: made where the data arrived, at a capture paired with the
    /// sender's (which writes them).
    left_to_sender: u64,
}

/// A record held until its capture pairs or [`HOLD_NS`] passes: whether it is the receiver's
/// view of a retransmission the sender's capture also writes is told by the pair.
#[derive(Debug)]
struct Held {
    capture: crate::input::CaptureId,
    /// The ends of the data's direction (sender first), and whether it is client → server.
    ends: (SocketAddr, SocketAddr),
    up: Option<bool>,
    since_ns: u64,
    record: Record,
}

/// How long a record made at a capture not yet paired waits for the pair (captures pair on
/// the third new segment both saw).
const HOLD_NS: u64 = 2_000_000_000;
/// Records held at most (the oldest is then decided as if its wait were over).
const MAX_HELD: usize = 4096;

impl TcpWireMatcher {
    /// Feeds one segment of flow `fr`, seen as `pkt` (its time on the reference clock, its
    /// path, its direction at the capture); for a segment carrying sequence space, returns its
    /// length and, when it was sent before, the kind of retransmission.
    pub(crate) fn on_segment(
        &mut self,
        shared: &mut Shared,
        t: &TcpSegment,
        pkt: &mut Pkt,
        fr: FlowRef,
    ) -> Option<(u32, Option<TcpRetransmitKind>)> {
        let (ts_ns, path) = (pkt.ts_ns, pkt.path);
        let (src, dst) = (&t.meta.src, &t.meta.dst);
        let i = self.find(fr, t.meta.capture, || conn_key(t.meta.capture, src, dst).0);
        let conn = self.conns.get_mut(i)?;
        // Its key holds the lower endpoint first.
        let from_low = *src == conn.key.1;
        conn.last_ns = ts_ns;
        let [low, high] = &mut conn.halves;
        let (data, peer) = if from_low { (low, high) } else { (high, low) };
        let mut out = Vec::new();
        let mut facts = Facts::default();
        if t.flags.ack() {
            if pkt.dir == Dir::Out && pkt.paired {
                // The ACK leaves here: the data it answers arrived here (its verdicts are the
                // sender's capture's to write, if that capture saw the data).
                peer.stats.sender_captured = sender_writes(shared, fr, pkt, pkt.up.map(|u| !u));
            }
            facts.acked = ack(peer, t, ts_ns, &mut out);
            if pkt.dir == Dir::Out {
                if let Some(begun) = peer.begun_at.take() {
                    begun_past_hole(shared, fr, pkt, peer, t.ack, begun);
                }
                if !peer.arrived.is_empty() {
                    judge_arrivals(peer, t, ts_ns);
                    if !peer.not_taken_now.is_empty() {
                        stalls_behind_drops(shared, fr, pkt, peer, !pkt.up.unwrap_or(true));
                    }
                    peer.forget_settled_arrivals();
                }
                peer.receiver_acks_here = true;
                if let Some(fill) = peer.fill {
                    // The fill waiting for this ACK ends its stall, or was dropped.
                    match fill.verdict(peer.peek(t.ack), ts_ns) {
                        FillVerdict::Taken => {
                            peer.fill = None;
                            fill.deliver(shared, fr);
                        }
                        FillVerdict::Dropped => peer.fill = None,
                        FillVerdict::Waiting => {}
                    }
                }
            }
        }
        // Records before this index are of the other direction's data (its verdicts).
        let acked_records = out.len();
        let seq_len = t
            .len
            .wrapping_add(u32::from(t.flags.syn()))
            .wrapping_add(u32::from(t.flags.fin()));
        let mut sent = None;
        if seq_len == 0
            && !t.flags.rst()
            && data.zero_window
            && data.una > 0
            && data.peek(t.seq) == Some(data.una - 1)
        {
            // Linux's zero-window probe: no data, the sequence number just below the
            // acknowledged one.
            data.stats.window_probes += 1;
        }
        if seq_len > 0 && !t.flags.rst() {
            // As the capture is placed now (a capture not yet placed is taken to be the
            // T-Box's at first: its view of the last data segment stands).
            data.stats.at_receiver = pkt.dir == Dir::In;
            data.stats.sender_captured = match pkt.dir {
                Dir::In => sender_writes(shared, fr, pkt, pkt.up),
                Dir::Out => {
                    if ts_ns.saturating_sub(data.noted_ns) >= NOTE_EVERY_NS {
                        data.noted_ns = ts_ns;
                        note_sent(shared, fr, pkt);
                    }
                    false
                }
                Dir::Unknown => false,
            };
            let label = || shared_label(shared, path);
            // Data arriving here: the sender's timer is the round trip this capture times on
            // its own sends (the other direction's), not data to ACK here (the ACK delay).
            let rto_est = match pkt.dir {
                Dir::In if peer.srtt.is_some() => Some(peer.rto_ns()),
                _ => data.srtt.map(|_| data.rto_ns()),
            };
            let (segments, pending) = send(
                data,
                t,
                (seq_len, ts_ns),
                rto_est,
                (src, dst),
                &label,
                &mut out,
                &mut facts,
            );
            self.evicted_segments += segments;
            self.evicted_pending += pending;
            if !t.messages.is_empty() {
                facts.messages = t
                    .messages
                    .iter()
                    .filter_map(|&(a, b)| Some((data.peek(a)?, data.peek(b)?)))
                    .filter(|(a, b)| a < b)
                    .collect();
            }
            sent = Some((seq_len, facts.resent));
            if pkt.dir == Dir::In {
                facts.fill_waits = data.receiver_acks_here;
                data.arrival(facts.data, ts_ns, facts.messages.len());
                if !data.not_taken_now.is_empty() {
                    stalls_behind_drops(shared, fr, pkt, data, pkt.up.unwrap_or(true));
                    data.forget_settled_arrivals();
                }
                if let (None, Some((_, ecr))) = (facts.resent, t.options.timestamps) {
                    if peer.stats.segments == 0 {
                        peer.sample_echo(ecr, ts_ns);
                    }
                }
            }
        } else if pkt.dir == Dir::Out && data.stats.segments == 0 && !t.flags.rst() {
            // An ACK leaving a receiver that sends no data: its echo times the round trip.
            if let Some((tsval, _)) = t.options.timestamps {
                data.note_tsval(tsval, ts_ns);
            }
        }
        if !out.is_empty() {
            write_or_hold(&mut self.held, shared, out, acked_records, t, pkt);
        }
        if let Some(fill) =
            tcpmsg::follow(shared, fr, pkt, t, &facts, &mut data.msgs, &mut peer.msgs)
        {
            data.fill = Some(fill);
        }
        if !self.held.is_empty() {
            self.release_held(shared, ts_ns, false);
        }
        sent
    }

    /// When the data at `seq` that `sender` sends `receiver` first left a capture that sees
    /// it leave (engine clock): the earliest over `captures`, from the segments each holds
    /// (sent and not yet acknowledged there).
    pub(crate) fn first_sent(
        &self,
        captures: impl Iterator<Item = CaptureId>,
        (sender, receiver): (&SocketAddr, &SocketAddr),
        seq: u32,
    ) -> Option<u64> {
        captures
            .filter_map(|capture| {
                let (key, half) = conn_key(capture, sender, receiver);
                let conn = self.conns.get(*self.index.get(&key)?)?;
                let half = conn.halves.get(half)?;
                if half.stats.at_receiver {
                    return None;
                }
                let seq = half.peek(seq)?;
                let (_, s) = half.sent.last_before(seq.checked_add(1)?)?;
                (seq < s.end).then_some(s.first_ns)
            })
            .min()
    }

    /// Writes or drops the held records whose wait is over (`all`: every one): once their
    /// capture is paired, those of data that arrived there are the receiver's copies of the
    /// sender's capture's records, and are dropped (counted); the others are written, and so
    /// is every record whose capture did not pair within [`HOLD_NS`] or can no longer pair.
    fn release_held(&mut self, shared: &mut Shared, now_ns: u64, all: bool) {
        while let Some(h) = self.held.front() {
            let capture = shared.caps.get(h.capture);
            let paired = capture.is_some_and(|c| c.paired.is_some());
            let over = all
                || paired
                || !shared.caps.may_yet_pair(h.capture)
                || now_ns.saturating_sub(h.since_ns) >= HOLD_NS
                || self.held.len() > MAX_HELD;
            if !over {
                break;
            }
            let Some(h) = self.held.pop_front() else {
                break;
            };
            let arrived = paired
                && capture.is_some_and(|c| c.dir_of_pair(&h.ends.0, &h.ends.1, h.up) == Dir::In);
            if arrived {
                self.left_to_sender += 1;
            } else {
                shared.push_record(h.record);
            }
        }
    }

    /// Takes a router's path MTU signal `m` about a segment of a connection followed at the
    /// same capture: that segment's bytes sent again after it are resent for the path MTU.
    pub(crate) fn on_path_mtu(&mut self, shared: &Shared, m: &PathMtuSignal) {
        let matched = shared.place_of(&m.meta).is_some_and(|(_, ts_ns)| {
            let (key, half) = conn_key(m.meta.capture, &m.segment_src, &m.segment_dst);
            let conns = &mut self.conns;
            self.index
                .get(&key)
                .and_then(|&i| conns.get_mut(i))
                .and_then(|c| c.halves.get_mut(half))
                .is_some_and(|h| h.too_big(ts_ns, m.seq, m.mtu))
        });
        if !matched {
            self.path_mtu_unmatched += 1;
        }
    }

    /// The position in `conns` of the connection of flow `fr` at `capture`, made when new
    /// (its key from `key`).
    fn find(&mut self, fr: FlowRef, capture: u16, key: impl FnOnce() -> ConnKey) -> usize {
        let r = (fr.slot ^ usize::from(capture)) % RECENT_CONNS;
        let i = self.recent[r];
        if self
            .conns
            .get(i)
            .is_some_and(|c| c.flow == fr && c.key.0 == capture)
        {
            return i;
        }
        let key = key();
        let i = match self.index.get(&key) {
            Some(&i) => i,
            None => {
                if self.conns.len() >= MAX_CONNECTIONS {
                    self.evict();
                }
                self.seen += 1;
                self.index.insert(key, self.conns.len());
                self.conns.push(Conn {
                    key,
                    flow: fr,
                    halves: Default::default(),
                    last_ns: 0,
                });
                self.conns.len() - 1
            }
        };
        if let Some(c) = self.conns.get_mut(i) {
            c.flow = fr;
        }
        self.recent[r] = i;
        i
    }

    /// Forgets the least recently active eighth of the connections.
    fn evict(&mut self) {
        let mut times: Vec<u64> = self.conns.iter().map(|c| c.last_ns).collect();
        let cut = times.len() / 8;
        let (_, horizon, _) = times.select_nth_unstable(cut);
        let horizon = *horizon;
        let before = self.conns.len();
        let (retired, left) = (&mut self.retired, &mut self.left_to_sender);
        self.conns.retain_mut(|c| {
            if c.last_ns > horizon {
                return true;
            }
            for h in &mut c.halves {
                *left += h.left_to_sender;
                h.arrivals_left_unjudged();
                if h.stats.retransmits_total() > 0 && retired.len() < MAX_CONNECTIONS {
                    retired.push(std::mem::take(&mut h.stats));
                }
            }
            false
        });
        self.evicted_connections += (before - self.conns.len()) as u64;
        // Positions moved: the index is made afresh (a recent position found moved fails its
        // check and is looked up again).
        self.index = self
            .conns
            .iter()
            .enumerate()
            .map(|(i, c)| (c.key, i))
            .collect();
    }

    /// Ends the run: every retransmission still awaiting its verdict is written as it
    /// stands, and arrivals still awaiting the receiver's ACK are counted as not judged.
    pub(crate) fn finish(&mut self, shared: &mut Shared) {
        for c in &mut self.conns {
            // Fills no ACK judged: taken, at their arrival (where the capture is still the
            // receiver's).
            for h in &mut c.halves {
                if let Some(fill) = h.fill.take().filter(|_| h.stats.at_receiver) {
                    fill.deliver(shared, c.flow);
                }
            }
        }
        self.release_held(shared, u64::MAX, true);
        for c in &mut self.conns {
            for h in &mut c.halves {
                h.arrivals_left_unjudged();
                let here = !h.stats.sender_captured;
                for p in h.pending.drain(..) {
                    if p.write && here {
                        shared.push_record(Record::TcpRetransmit(p.record));
                    } else {
                        h.left_to_sender += 1;
                    }
                }
            }
        }
    }

    /// The run's figures: per direction that sent data, busiest (most retransmissions) first.
    pub(crate) fn summary(&self) -> TcpWireSummary {
        let mut directions: Vec<TcpWireDirection> = self
            .conns
            .iter()
            .flat_map(|c| c.halves.iter())
            .filter(|h| h.stats.segments > 0)
            .map(|h| {
                let mut s = h.stats.clone();
                s.srtt_us = h.srtt.unwrap_or(0) / 1000;
                s.rto_ms = h.rto_ns() / 1_000_000;
                s
            })
            .chain(self.retired.iter().cloned())
            .collect();
        directions.sort_by(|a, b| {
            b.retransmits_total()
                .cmp(&a.retransmits_total())
                .then(b.segments.cmp(&a.segments))
                .then_with(|| (&a.path, &a.src, &a.dst).cmp(&(&b.path, &b.src, &b.dst)))
        });
        TcpWireSummary {
            directions,
            connections: self.seen,
            evicted_connections: self.evicted_connections,
            evicted_segments: self.evicted_segments,
            evicted_pending: self.evicted_pending,
            path_mtu_unmatched: self.path_mtu_unmatched,
            left_to_sender: self.left_to_sender
                + self
                    .conns
                    .iter()
                    .flat_map(|c| &c.halves)
                    .map(|h| h.left_to_sender)
                    .sum::<u64>(),
        }
    }
}

/// Writes the records `out` made on segment `t` (seen as `pkt`; those before
/// `acked_records` are of the other direction's data), or holds them while its capture is
/// not yet paired and another could still be the other end of its path (in `held`; see
/// [`crate::capture::CaptureTable::may_yet_pair`]).
#[inline(never)]
fn write_or_hold(
    held: &mut VecDeque<Held>,
    shared: &mut Shared,
    out: Vec<Record>,
    acked_records: usize,
    t: &TcpSegment,
    pkt: &Pkt,
) {
    if pkt.paired || !shared.caps.may_yet_pair(t.meta.capture) {
        for record in out {
            shared.push_record(record);
        }
        return;
    }
    let (src, dst) = (t.meta.src, t.meta.dst);
    for (i, record) in out.into_iter().enumerate() {
        let (ends, up) = if i < acked_records {
            ((dst, src), pkt.up.map(|u| !u))
        } else {
            ((src, dst), pkt.up)
        };
        held.push_back(Held {
            capture: t.meta.capture,
            ends,
            up,
            since_ns: pkt.ts_ns,
            record,
        });
    }
}

/// How long after the sender's capture last saw a direction's data a copy arriving at the
/// receiver's capture may have left the sender (a one-way delay, bufferbloat included).
const SENDER_LAG_NS: u64 = 5_000_000_000;

/// Whether the sender's capture writes the retransmission records of flow `fr`'s data in
/// direction `up` (client → server when true), which arrives at `pkt`'s capture: the two are
/// paired, and the other saw this direction's data leave within [`SENDER_LAG_NS`] of `pkt`
/// (the sender's kinds, timers and backoff levels are the ones to write; this capture only
/// counts them).
fn sender_writes(shared: &mut Shared, fr: FlowRef, pkt: &Pkt, up: Option<bool>) -> bool {
    if !pkt.paired {
        return false;
    }
    let Some(Proto::Tcp(s)) = shared.flows.get_mut(fr).map(|f| &mut f.proto) else {
        return false;
    };
    s.sent_at_sender[usize::from(up.unwrap_or(true))]
        .iter()
        .flatten()
        .any(|&(capture, at)| {
            capture != pkt.capture && pkt.ts_ns.saturating_sub(at) <= SENDER_LAG_NS
        })
}

/// How often a capture notes its data leaving, at most (well within [`SENDER_LAG_NS`]).
const NOTE_EVERY_NS: u64 = 500_000_000;

/// Notes data of flow `fr` seen leaving at `pkt`'s capture (for [`sender_writes`]).
fn note_sent(shared: &mut Shared, fr: FlowRef, pkt: &Pkt) {
    if let Some(Proto::Tcp(s)) = shared.flows.get_mut(fr).map(|f| &mut f.proto) {
        let notes = &mut s.sent_at_sender[usize::from(pkt.up.unwrap_or(true))];
        // This capture's note, else a free one, else the older one.
        let i = notes
            .iter()
            .position(|n| n.is_some_and(|(c, _)| c == pkt.capture))
            .or_else(|| notes.iter().position(Option::is_none))
            .unwrap_or(usize::from(notes[1].map(|n| n.1) < notes[0].map(|n| n.1)));
        notes[i] = Some((pkt.capture, pkt.ts_ns));
    }
}

/// An ACK leaving the receiver of `h`'s data: the arrivals it acknowledges or SACKs were
/// taken. One it does not take [`NOT_TAKEN_AFTER_NS`] or more after it arrived was dropped
/// past the capture point when the ACK would show it (in order, or SACK in use and the
/// receiver not perhaps holding data it does not list, see [`Half::unlisted_below`]), even if
/// a resend fills its place later (so is one a resend of it reaches first, see
/// [`Half::arrival`]); an arrival out of order without SACK waits for the cumulative ACK to
/// reach it (the hole below filled); one the receiver may hold unlisted that a resend reaches
/// first is not judged (counted).
fn judge_arrivals(h: &mut Half, t: &TcpSegment, ts_ns: u64) {
    let Some(ack) = h.peek(t.ack) else {
        return;
    };
    let blocks: smallvec::SmallVec<[(u64, u64); 4]> = t
        .options
        .sack_blocks()
        .iter()
        .filter_map(|&(l, r)| Some((h.peek(l)?, h.peek(r)?)))
        .collect();
    h.sack_seen |= !blocks.is_empty();
    if ack >= h.unlisted_below {
        h.unlisted_below = 0;
    }
    let room = if t.options.timestamps.is_some() { 3 } else { 4 };
    if t.options.sack_blocks().len() >= room && h.nxt > ack {
        h.unlisted_below = h.unlisted_below.max(h.nxt);
    }
    let sight = AckSight {
        ack,
        sack_seen: h.sack_seen,
        unlisted_below: h.unlisted_below,
    };
    let sacked = |s: u64, e: u64| blocks.iter().any(|&(l, r)| l <= s && e <= r);
    let mut not_taken = 0;
    let (mut newest_taken, seen) = (h.newest_taken, h.arrivals);
    let dropped = &mut h.not_taken_now;
    h.arrived.retain(|a| {
        let (s, e, at) = (a.start, a.end, a.at_ns);
        if e <= ack || sacked(s, e) {
            newest_taken = newest_taken.max(a.no);
            return false;
        }
        // Held unlisted, perhaps, or out of order without SACK: only a cover (or a resend)
        // tells.
        if ts_ns < at.saturating_add(NOT_TAKEN_AFTER_NS)
            || sight.maybe_unlisted(s)
            || sight.waits_for_the_ack(s)
        {
            return true;
        }
        // The ACK would show it: at or past its start (the hole below filled), or SACK in use
        // and the receiver not perhaps holding it unlisted.
        not_taken += 1;
        dropped.push((*a, ack, seen));
        false
    });
    h.newest_taken = newest_taken;
    h.stats.arrivals_not_taken += not_taken;
}

/// The arrivals of `h`'s data (the `data_up` direction) just judged not taken, as `pkt` is
/// seen: each is a hole at the receiver, and the arrivals after it (still remembered, not
/// themselves judged not taken) were held behind it (see [`tcpmsg::dropped_arrival`]).
#[cold]
fn stalls_behind_drops(shared: &mut Shared, fr: FlowRef, pkt: &Pkt, h: &mut Half, data_up: bool) {
    for (x, ack, seen) in std::mem::take(&mut h.not_taken_now) {
        let later = h
            .recent
            .front()
            .and_then(|(first, _)| usize::try_from(x.no.checked_sub(first.no)?).ok())
            .and_then(|i| {
                h.recent.get_mut(i)?.1 = true;
                let later: Vec<Arrival> = h
                    .recent
                    .iter()
                    .skip(i + 1)
                    .filter(|(a, dropped)| !dropped && a.no <= seen)
                    .map(|(a, _)| *a)
                    .collect();
                Some(later)
            });
        let from = x.start.max(ack);
        if !tcpmsg::dropped_arrival(shared, fr, pkt, data_up, (from, x.end), later.as_deref()) {
            h.stats.drops_without_stall += 1;
        }
    }
}

/// The first ACK (`ack`) leaving a capture that began after the start of `h`'s data, first
/// seen at `begun` (unwrapped sequence, when): below it, that data had arrived past a hole.
#[cold]
fn begun_past_hole(
    shared: &mut Shared,
    fr: FlowRef,
    pkt: &Pkt,
    h: &Half,
    ack: u32,
    (origin, at_ns): (u64, u64),
) {
    if let Some(from) = h.peek(ack).filter(|&ack| ack < origin) {
        let hole = BegunPastHole {
            from,
            origin,
            seen_end: h.nxt,
            at_ns,
        };
        tcpmsg::begun_past_hole(shared, fr, pkt, !pkt.up.unwrap_or(true), &hole);
    }
}

fn shared_label(shared: &Shared, path: PathIdx) -> String {
    shared.paths.label(path).to_owned()
}

/// An ACK (with its SACK blocks and timestamps) from the receiver of `h`'s data; what it
/// acknowledged, when it moved the cumulative ACK.
fn ack(h: &mut Half, t: &TcpSegment, ts_ns: u64, out: &mut Vec<Record>) -> Option<Acked> {
    let ack = h.peek(t.ack)?;
    h.zero_window = t.window == 0 && !t.flags.syn() && !t.flags.rst();
    let opts: &TcpOptions = &t.options;
    // D-SACK (RFC 2883): a first block below the cumulative ACK, or inside the second.
    if let Some(&(l, r)) = opts.sack_blocks().first() {
        if let (Some(l), Some(r)) = (h.peek(l), h.peek(r)) {
            let inside_second = opts
                .sack_blocks()
                .get(1)
                .and_then(|&(l2, r2)| Some((h.peek(l2)?, h.peek(r2)?)))
                .is_some_and(|(l2, r2)| l >= l2 && r <= r2);
            if r <= ack || inside_second {
                for p in &mut h.pending {
                    if p.start < r && p.end > l {
                        p.record.spurious = Some(Spurious::Dsack);
                    }
                }
            }
        }
    }
    for &(_, r) in opts.sack_blocks() {
        if let Some(r) = h.peek(r) {
            if r > ack && r <= h.nxt.max(ack) {
                h.sacked = h.sacked.max(r);
            }
        }
    }
    if ack > h.una {
        // RTT: the timestamps option when present, else Karn's rule on the newest segment
        // acknowledged (not from retransmitted data).
        let mut rtt = None;
        if let Some((_, ecr)) = opts.timestamps {
            // Most echoes are of a recent TSval: look from the newest.
            rtt = h
                .tsvals
                .iter()
                .rev()
                .find(|(v, _)| *v == ecr)
                .map(|(_, at)| ts_ns.saturating_sub(*at));
        }
        if rtt.is_none() {
            rtt = h
                .sent
                .last_before(ack)
                .filter(|(_, s)| s.end <= ack && !s.retransmitted)
                .filter(|(start, _)| *start >= h.una)
                .map(|(_, s)| ts_ns.saturating_sub(s.first_ns));
        }
        if let Some(r) = rtt {
            h.sample(r);
        }
        let mut acked = Acked {
            from: h.una,
            to: ack,
            first_sent_ns: h
                .sent
                .last_before(h.una + 1)
                .filter(|(_, s)| s.end > h.una)
                .map(|(_, s)| s.first_ns),
            resends: smallvec::SmallVec::new(),
        };
        // Duplicate ACKs or SACK blocks above the old `una` said a loss: the sender may act
        // on them after this ACK has made them moot.
        let loss_signalled = h.dupacks > 0 || h.sacked > h.una;
        h.una = ack;
        h.una_ns = ts_ns;
        h.nxt = h.nxt.max(ack);
        h.dupacks = 0;
        h.rto = None;
        if h.loss_until.is_some_and(|u| ack >= u) {
            h.loss_until = None;
            h.recovery_ended = Some((ts_ns, TcpRetransmitKind::LossRecovery));
        } else if h.recovery_until.is_some_and(|u| ack >= u) || loss_signalled {
            h.recovery_ended = Some((ts_ns, TcpRetransmitKind::Fast));
        }
        if h.recovery_until.is_some_and(|u| ack >= u) {
            h.recovery_until = None;
        }
        // Forget what is acknowledged.
        while h.sent.first().is_some_and(|(_, s)| s.end <= ack) {
            h.sent.pop_first();
        }
        if h.sacked <= ack {
            h.sacked = 0;
        }
        // Verdicts of the retransmissions now acknowledged.
        while h.pending.front().is_some_and(|p| p.end <= ack) {
            let Some(mut p) = h.pending.pop_front() else {
                break;
            };
            if p.record.spurious.is_none() {
                if let (Some((_, ecr)), Some(tsval)) = (opts.timestamps, p.tsval) {
                    if after(tsval, ecr) {
                        p.record.spurious = Some(Spurious::Timestamp);
                    }
                }
            }
            if p.record.spurious.is_some() {
                h.stats.spurious += 1;
            } else if acked.resends.len() < tcpmsg::MAX_RESENDS_PER_ACK {
                acked.resends.push((p.start, p.end, p.record.kind));
            }
            // Made before the capture was known to be at the receiver of a paired sender's
            // capture, perhaps: told again now.
            if p.write && !h.stats.sender_captured {
                out.push(Record::TcpRetransmit(p.record));
            } else {
                h.left_to_sender += 1;
            }
        }
        return Some(acked);
    } else if ack == h.una && t.len == 0 && !t.flags.syn() && !t.flags.fin() && h.nxt > h.una {
        h.dupacks += 1;
    }
    None
}

/// Whether a tail loss probe could be due at `ts_ns`: its timer (Linux: twice the smoothed
/// RTT and a tick, restarted by each ACK and each new segment) leaves at least a round trip of
/// quiet since then; a resend sooner answers an ACK (a recovery still going on).
fn probe_due(h: &Half, ts_ns: u64) -> bool {
    let last_new_ns = h.sent.last_before(h.nxt).map_or(0, |(_, s)| s.first_ns);
    let quiet = ts_ns.saturating_sub(h.una_ns.max(last_new_ns));
    h.srtt.is_none_or(|srtt| quiet >= srtt)
}

/// Whether `[start, end)`, below the highest sequence seen, fills a hole rather than resends:
/// no byte of it was seen before (nor acknowledged), so this is its first copy at this
/// capture — an original that arrived after a later segment (reordered), or, at a capture
/// after the sender, one whose earlier copy the capture missed. With timestamps the sender's
/// two clocks tell: originals leave in sequence order, and neither their TSvals nor their
/// TSecrs go back (a sender echoes only a TSval not older than the last, RFC 7323 §4.3), so
/// a reordered original is newer by neither than the first segment seen above it. The resend
/// of a segment lost before the capture point (a receiver-side capture) left a round trip of
/// duplicate ACKs or a timeout after that one: a newer TSval, or the echo of a newer ACK,
/// unless the round trip stayed within a tick of both clocks — then the two cannot be told
/// apart and it counts as a fill.
fn is_fill(h: &Half, start: u64, end: u64, t: &TcpSegment) -> bool {
    if start < h.una.max(h.seen_floor) {
        return false;
    }
    let overlaps = h.sent.last_before(end).is_some_and(|(_, s)| s.end > start);
    if overlaps {
        return false;
    }
    let Some((tsval, tsecr)) = t.options.timestamps else {
        return true;
    };
    let sent_after = |(v, e): (u32, u32)| after(tsval, v) || after(tsecr, e);
    if h.max_timestamps.is_some_and(sent_after) {
        return false;
    }
    let above = h.sent.first_from(end).and_then(|(_, s)| s.timestamps);
    !above.is_some_and(sent_after)
}

/// A segment carrying `seq_len` of sequence space from `ends.0` (path label from `label`), a
/// resend timed against `timed_rto`, the sender's timeout as this capture estimates it from
/// the round trips it timed (`None`: none yet, the initial timeout); returns the sent segments
/// and pending verdicts forgotten to stay within the bounds, and notes its payload's range and
/// its retransmission kind in `facts`.
#[expect(
    clippy::too_many_arguments,
    reason = "one segment's figures and outputs"
)]
fn send(
    h: &mut Half,
    t: &TcpSegment,
    (seq_len, ts_ns): (u32, u64),
    timed_rto: Option<u64>,
    ends: (&SocketAddr, &SocketAddr),
    label: &dyn Fn() -> String,
    out: &mut Vec<Record>,
    facts: &mut Facts,
) -> (u64, u64) {
    let start = h.unwrap(t.seq);
    let end = start + u64::from(seq_len);
    // The records of what this capture sees resent, unless the sender's writes them.
    let write = !h.stats.sender_captured;
    if t.flags.syn() {
        h.first_byte = Some(start + 1);
        h.contiguous_to = start + 1;
    }
    if t.len > 0 {
        let from = start + u64::from(t.flags.syn());
        facts.data = Some((from, from + u64::from(t.len)));
        // Where the receiver's delivery starts if not followed yet: past what this capture
        // saw arrive in order before (a capture placed only now, by pairing, saw that much
        // delivered unfollowed); a first segment lost on the way is a hole.
        facts.first_byte = h.first_byte.map(|f| f.max(h.contiguous_to));
        if h.first_byte.is_some() && from <= h.contiguous_to {
            h.contiguous_to = h.contiguous_to.max(from + u64::from(t.len));
        }
    }
    h.stats.segments += 1;
    if h.stats.segments == 1 {
        // What was acknowledged is not known until the receiver's first ACK; what was sent
        // before this segment (a capture begun mid-connection) counts as seen.
        h.history_from = start;
        h.seen_floor = start;
        if h.first_byte.is_none() && t.len > 0 {
            h.begun_at = Some((start, ts_ns));
        }
        h.una_ns = ts_ns;
        h.stats.path = label();
        // Written once here; every record of this direction takes its copy.
        h.stats.src = ends.0.to_string();
        h.stats.dst = ends.1.to_string();
    }
    if let Some((tsval, _)) = t.options.timestamps {
        h.note_tsval(tsval, ts_ns);
    }
    let timestamps = t.options.timestamps;
    let first_in_direction = h.stats.segments == 1;
    let fill = !first_in_direction && start < h.nxt && is_fill(h, start, end, t);
    if let Some((v, e)) = timestamps {
        h.max_timestamps = Some(match h.max_timestamps {
            Some((mv, me)) => (
                if after(v, mv) { v } else { mv },
                if after(e, me) { e } else { me },
            ),
            None => (v, e),
        });
    }
    if first_in_direction || start >= h.nxt || fill {
        if fill {
            h.stats.out_of_order += 1;
        }
        h.nxt = h.nxt.max(end);
        return (h.remember(start, end, ts_ns, timestamps), 0);
    }
    // One byte resent into a zero window: a window probe (persist timer), not a
    // retransmission (as the kernel counts it).
    if h.zero_window && seq_len == 1 && start >= h.una && end <= h.una.saturating_add(1) {
        h.stats.window_probes += 1;
        return (0, 0);
    }
    if start < h.history_from {
        h.stats.unknown_history += 1;
    }
    // Sequence space sent before: a retransmission.
    let mut first_ns = ts_ns;
    let mut original_len = 0;
    let mut head_sent_ns = 0;
    if let Some((at, s)) = h.sent.last_before_mut(end).filter(|(_, s)| s.end > start) {
        first_ns = s.first_ns;
        original_len = s.end - *at;
        s.retransmitted = true;
        s.last_ns = ts_ns;
    }
    if let Some((_, s)) = h.sent.first() {
        head_sent_ns = s.first_ns;
    }
    let mut evicted = 0;
    if end > h.nxt {
        // Its part above the highest sequence seen is new: remembered as seen.
        evicted = h.remember(h.nxt, end, ts_ns, timestamps);
        h.nxt = end;
    }
    let rto_est = timed_rto.unwrap_or(RTO_INITIAL_NS);
    let timer_start = h.una_ns.max(h.last_retx_ns).max(head_sent_ns);
    let silence = ts_ns.saturating_sub(timer_start);
    let already_acked = end <= h.una;
    // Bytes a router said did not fit, resent smaller.
    let slack = rto_est;
    let too_big = !already_acked
        && h.too_big.as_mut().is_some_and(|b| {
            b.covers(start, first_ns, original_len, slack) && {
                b.resent_to = end;
                true
            }
        });
    let kind = if too_big {
        TcpRetransmitKind::PathMtu
    } else if silence >= rto_est - rto_est / 4 && (!already_acked || h.stats.at_receiver) {
        // Acknowledged data resent after a timeout's silence: at the sender's capture the
        // sender had the ACK (no timer of its own resends it); at the receiver's the ACK may
        // have been lost on its way back, and the sender's timer resent it (spurious).
        TcpRetransmitKind::Rto
    } else if h.loss_until.is_some() {
        TcpRetransmitKind::LossRecovery
    } else if h.dupacks >= 3 || h.sacked > start || h.recovery_until.is_some() {
        h.recovery_until.get_or_insert(h.nxt);
        TcpRetransmitKind::Fast
    } else if end == h.nxt && h.last_retx_ns <= h.una_ns && probe_due(h, ts_ns) {
        TcpRetransmitKind::LossProbe
    } else if h.dupacks > 0 {
        h.recovery_until.get_or_insert(h.nxt);
        TcpRetransmitKind::Fast
    } else if let Some((_, kind)) = h
        .recovery_ended
        .filter(|&(at, _)| ts_ns.saturating_sub(at) < rto_est)
    {
        // Resent just after the ACKs that ended a recovery or signalled a loss: the sender
        // was still acting on them, the newer ACKs not yet read (Linux's RACK marks segments
        // lost from ACKs waiting in the socket's backlog), acknowledged bytes too.
        kind
    } else {
        TcpRetransmitKind::Other
    };
    let label = label();
    let mut backoff = h.rto.map_or(0, |c| c.level);
    if kind == TcpRetransmitKind::Rto {
        let chain = match h.rto {
            Some(c) => {
                let gap = ts_ns.saturating_sub(c.last_ns);
                // Each timeout doubles the last: after timeouts not captured the gap is the
                // sum of m doublings, last_gap × (2^(m+1) − 2).
                let step = if c.last_gap_ns > 0 {
                    ((gap as f64 / c.last_gap_ns as f64 + 2.0).log2() - 1.0).round()
                } else {
                    1.0
                };
                let step = if step.is_finite() && step >= 1.0 {
                    step.min(f64::from(MAX_LEVEL)) as u8
                } else {
                    1
                };
                RtoChain {
                    last_ns: ts_ns,
                    last_gap_ns: if c.last_gap_ns > 0 {
                        c.last_gap_ns.saturating_mul(1 << step.min(20))
                    } else {
                        gap
                    },
                    level: c.level.saturating_add(step).min(MAX_LEVEL),
                    timeouts: c.timeouts + 1,
                }
            }
            _ => {
                // The first timeout seen: level 0 unless the silence holds timeouts not seen
                // (the capture began inside the episode, or their copies were lost before
                // it), the estimate doubled at each: rto × (2^(level+1) − 1).
                let level = if timed_rto.is_some() && silence > rto_est {
                    let l = ((silence as f64 / rto_est as f64 + 1.0).log2() - 1.0).round();
                    if l.is_finite() && l >= 1.0 {
                        l.min(f64::from(MAX_LEVEL)) as u8
                    } else {
                        0
                    }
                } else {
                    0
                };
                RtoChain {
                    last_ns: ts_ns,
                    last_gap_ns: silence,
                    level,
                    timeouts: 1,
                }
            }
        };
        h.rto = Some(chain);
        h.loss_until = Some(h.nxt);
        h.recovery_until = None;
        backoff = chain.level;
        let level = usize::from(chain.level);
        if h.stats.rto_ladder.len() <= level {
            h.stats.rto_ladder.resize(level + 1, 0);
        }
        h.stats.rto_ladder[level] += 1;
        let gap_ms = chain.last_gap_ns / 1_000_000;
        h.stats.max_rto_ms = h.stats.max_rto_ms.max(gap_ms);
        let rto = TcpRtoRecord {
            source: TcpSource::Wire,
            path: label.clone(),
            src: h.stats.src.clone(),
            dst: h.stats.dst.clone(),
            timeout: chain.timeouts,
            rto_ms: gap_ms,
            backoff,
            seq: t.seq,
            ts_ns,
        };
        if write {
            out.push(Record::TcpRto(rto));
        } else {
            h.left_to_sender += 1;
        }
    }
    h.last_retx_ns = ts_ns;
    if let Some(i) = TcpRetransmitKind::ALL.iter().position(|k| *k == kind) {
        h.stats.retransmits[i] += 1;
    }
    facts.resent = Some(kind);
    let record = TcpRetransmitRecord {
        source: TcpSource::Wire,
        path: label,
        src: h.stats.src.clone(),
        dst: h.stats.dst.clone(),
        kind,
        seq: t.seq,
        len: seq_len,
        backoff,
        rto_ms: rto_est / 1_000_000,
        since_first_ms: ts_ns.saturating_sub(first_ns) / 1_000_000,
        spurious: already_acked.then_some(Spurious::AckedBefore),
        ts_ns,
    };
    if already_acked {
        h.stats.spurious += 1;
        if write {
            out.push(Record::TcpRetransmit(record));
        } else {
            h.left_to_sender += 1;
        }
        return (evicted, 0);
    }
    h.pending.push_back(Pending {
        record,
        start,
        end,
        tsval: t.options.timestamps.map(|(v, _)| v),
        write,
    });
    if h.pending.len() > MAX_PENDING {
        if let Some(p) = h.pending.pop_front() {
            if p.write && !h.stats.sender_captured {
                out.push(Record::TcpRetransmit(p.record));
            } else {
                h.left_to_sender += 1;
            }
        }
        return (evicted, 1);
    }
    (evicted, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The first segment starting at or after a sequence number, looked for first among
        /// the oldest, is where a binary search over all of them finds it.
        #[test]
        fn index_from_is_the_partition_point(
            gaps in proptest::collection::vec(1u64..3000, 0..40),
            anywhere in 0u64..60_000,
            near in proptest::option::of((0usize..40, 0u64..3)),
        ) {
            let mut sent = SentSegments(VecDeque::new());
            let mut start = 0;
            for gap in gaps {
                start += gap;
                sent.0.push_back((
                    start,
                    Sent {
                        end: start + 1,
                        first_ns: 0,
                        last_ns: 0,
                        timestamps: None,
                        retransmitted: false,
                    },
                ));
            }
            // Also a segment's start, or one either side of it.
            let seq = match near.and_then(|(i, d)| Some(sent.0.get(i)?.0 + d)) {
                Some(s) => s.saturating_sub(1),
                None => anywhere,
            };
            let expected = sent.0.partition_point(|&(s, _)| s < seq);
            proptest::prop_assert_eq!(sent.index_from(seq), expected);
        }
    }

    #[test]
    fn a_tsval_is_timed_from_its_first_send_also_after_a_reordered_older_one() {
        let mut h = Half::default();
        h.note_tsval(100, 1);
        h.note_tsval(105, 2);
        // Reordered: older than the newest and not seen before, so remembered.
        h.note_tsval(103, 3);
        // Seen before, now behind the reordered one: still known, its first send kept.
        h.note_tsval(105, 4);
        let seen: Vec<(u32, u64)> = h.tsvals.iter().copied().collect();
        assert_eq!(seen, [(100, 1), (105, 2), (103, 3)]);
        // After every one remembered: new.
        h.note_tsval(106, 5);
        assert_eq!(h.tsvals.back(), Some(&(106, 5)));
    }
}
