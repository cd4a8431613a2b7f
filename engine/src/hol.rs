//! Head-of-line incidents: a receive-side gap tracker (KCP sn, QUIC stream offsets) and the
//! bounded book of incidents (open and closed) with their evidence timelines.

use std::collections::{BTreeMap, VecDeque};

use crate::paths::PathIdx;
use crate::record::{Evidence, HolIncident, HolProtocol, Recovery};
use crate::snapshot::HolTotals;

/// Evidence entries kept per incident.
pub const MAX_EVIDENCE: usize = 24;
/// Out-of-order pieces buffered per tracker.
const MAX_BUFFERED: usize = 4096;
/// Units whose retransmissions wait for an incident, per tracker.
const MAX_PENDING: usize = 1024;
/// Retransmission times kept per unit while waiting for an incident.
const PENDING_EVIDENCE: usize = 4;

/// A piece delivered beyond a gap.
#[derive(Clone, Copy, Debug)]
struct Held {
    end: u64,
    ts_ns: u64,
    bytes: u64,
    msg_end: bool,
    path: PathIdx,
}

/// The gap currently holding data back: the units missing in front of the first held piece
/// when the stall began. It stays one gap until all of them are filled, however many pieces
/// that takes (several consecutive units lost, or pieces of the run arriving out of order and
/// releasing some of it).
#[derive(Clone, Copy, Debug)]
pub struct OpenGap {
    /// Incident id.
    pub incident: u64,
    /// End (exclusive) of the missing run when the gap opened.
    pub missing_end: u64,
    /// Path of the piece that revealed the gap.
    pub revealed_on: PathIdx,
    /// Retransmissions of the missing units whose kind is not known.
    pub unknown_resends: u32,
    /// Message ends and bytes released so far by partial fills.
    pub released: (u64, u64),
    /// Which transmissions filled missing units so far ([`filled_by`] bits).
    pub filled_by: u8,
}

/// Which transmission of a unit a delivered piece is, as the sender's capture tells (KCP: by
/// the segment's `ts`, the sender's clock when it sent that copy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transmission {
    /// The first transmission.
    Original,
    /// A retransmission of this kind.
    Retransmission(Resend),
}

/// Which transmissions filled a gap's missing units (bits).
pub mod filled_by {
    /// A first transmission (late: reordering).
    pub const ORIGINAL: u8 = 1;
    /// A fast resend.
    pub const FAST: u8 = 2;
    /// A timeout retransmission.
    pub const TIMEOUT: u8 = 4;
    /// A piece whose transmission is not known (no sender record, or an acknowledgment).
    pub const UNKNOWN: u8 = 8;

    /// The bit of a filling piece.
    pub fn bit(t: Option<super::Transmission>) -> u8 {
        use super::{Resend, Transmission};
        match t {
            Some(Transmission::Original) => ORIGINAL,
            Some(Transmission::Retransmission(Resend::Fast)) => FAST,
            Some(Transmission::Retransmission(Resend::Timeout)) => TIMEOUT,
            Some(Transmission::Retransmission(Resend::Unknown)) | None => UNKNOWN,
        }
    }
}

/// How a sender's retransmission was triggered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resend {
    /// Fast resend: later units acknowledged.
    Fast,
    /// Retransmission timeout.
    Timeout,
    /// Not known (the previous transmission was not seen).
    Unknown,
}

/// Retransmissions of one unit seen at the sender before an incident could take them (the
/// receiver had not seen the gap yet, or the unit is missing behind another gap).
#[derive(Clone, Debug, Default)]
pub struct PendingResends {
    /// When, on which path, which kind (the first few).
    pub seen: smallvec::SmallVec<[(u64, PathIdx, Resend); PENDING_EVIDENCE]>,
    /// Fast resends.
    pub fast: u32,
    /// Timeout retransmissions.
    pub timeout: u32,
    /// Retransmissions of unknown kind.
    pub unknown: u32,
}

/// What a delivery did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Already delivered.
    Duplicate,
    /// Next in order, nothing was waiting.
    InOrder,
    /// Beyond a gap; `opened` when this revealed a new gap.
    Buffered {
        /// A new gap.
        opened: bool,
    },
    /// Filled part of the gap (units of the missing run still missing): the stall goes on.
    Narrowed {
        /// Message ends released (pieces that had arrived inside the run).
        messages: u64,
        /// Bytes released.
        bytes: u64,
    },
    /// Filled the gap: pieces released behind it.
    Filled {
        /// Message ends released.
        messages: u64,
        /// Bytes released.
        bytes: u64,
        /// Earliest arrival among pieces still buffered (another gap remains).
        still_gapped_since: Option<u64>,
        /// Which transmissions filled the gap's missing units ([`filled_by`] bits).
        filled_by: u8,
    },
}

/// In-order delivery over a u64 sequence space (KCP sn, stream offsets).
#[derive(Clone, Debug, Default)]
pub struct GapTracker {
    next: Option<u64>,
    buffered: BTreeMap<u64, Held>,
    /// Message ends and bytes among `buffered` (kept as pieces come and go).
    held_messages: u64,
    held_bytes: u64,
    /// The open gap.
    pub gap: Option<OpenGap>,
    /// Buffered pieces forgotten to stay bounded.
    pub dropped: u64,
    /// Sender retransmissions waiting for the incident of the gap their unit is in.
    pending: BTreeMap<u64, PendingResends>,
    /// Paths (bit per path) on which the sender's transmissions are observed: a gap filled
    /// there with no retransmission was filled by the original, late.
    pub sender_paths: u64,
    /// Which transmission the next delivered piece is, when known (set just before
    /// [`GapTracker::deliver`], which takes it).
    pub arriving: Option<Transmission>,
    /// Messages the next delivered piece releases behind itself, when the caller knows them
    /// (a TCP byte stream cut by its framing: the messages complete once the hole is
    /// filled); added to those held when it narrows or fills the gap, and taken like
    /// `arriving`.
    pub behind: u64,
}

impl GapTracker {
    /// Units buffered behind the gap.
    #[cfg(test)]
    pub fn held(&self) -> (u64, u64) {
        (self.held_messages, self.held_bytes)
    }

    /// Message ends and bytes held by the open gap so far: released by partial fills and still
    /// buffered.
    pub fn held_by_gap(&self) -> (u64, u64) {
        let r = self.gap.map_or((0, 0), |g| g.released);
        (r.0 + self.held_messages, r.1 + self.held_bytes)
    }

    fn hold(&mut self, start: u64, h: Held) {
        self.held_messages += u64::from(h.msg_end);
        self.held_bytes += h.bytes;
        self.buffered.insert(start, h);
    }

    fn unhold(&mut self, h: &Held) {
        self.held_messages -= u64::from(h.msg_end);
        self.held_bytes -= h.bytes;
    }

    /// Number of pieces waiting.
    pub fn waiting(&self) -> usize {
        self.buffered.len()
    }

    /// Next expected unit.
    pub fn next(&self) -> Option<u64> {
        self.next
    }

    /// Sets the first unit expected (a stream's start seen before any of it arrived), unless
    /// something was delivered already.
    pub fn start_at(&mut self, unit: u64) {
        self.next.get_or_insert(unit);
    }

    /// The receiver says its in-order data ends at `unit`, below `origin`, where the first
    /// delivery seen set the start (a capture begun after the stream's start): forgets the
    /// deliveries since and returns them as `[origin, end)` to deliver again, now past a hole.
    /// `None`, with nothing changed, once a gap opened or a piece is held.
    pub fn restart_below(&mut self, origin: u64, unit: u64) -> Option<(u64, u64)> {
        let end = self.next?;
        if unit >= origin || end <= origin || self.gap.is_some() || !self.buffered.is_empty() {
            return None;
        }
        self.next = Some(unit);
        Some((origin, end))
    }

    /// The receiver says its in-order data ends at `unit` (a capture begun after the stream's
    /// start saw it otherwise): forgets what was delivered and held since, to be delivered
    /// again from `unit` on; returns the incident of the gap it had open, which was none.
    pub fn restart_at(&mut self, unit: u64) -> Option<u64> {
        self.next = Some(unit);
        self.buffered.clear();
        (self.held_messages, self.held_bytes) = (0, 0);
        self.untold();
        self.gap.take().map(|g| g.incident)
    }

    /// The next delivery is by a transmission this capture cannot name, with no messages
    /// known behind it (clears what [`GapTracker::arriving`] and [`GapTracker::behind`] said).
    pub fn untold(&mut self) {
        self.arriving = None;
        self.behind = 0;
    }

    /// Whether `unit` was already delivered in order or is buffered.
    pub fn has(&self, unit: u64) -> bool {
        self.next.is_some_and(|n| unit < n) || self.buffered.contains_key(&unit)
    }

    /// Whether `unit` is one of the open gap's missing units, not received yet.
    pub fn blocks(&self, unit: u64) -> bool {
        self.gap.is_some_and(|g| unit < g.missing_end)
            && self.next.is_some_and(|n| unit >= n)
            && !self.buffered.contains_key(&unit)
    }

    /// Keeps a retransmission of `unit` for the incident of the gap it will be found in.
    pub fn note_resend(&mut self, unit: u64, ts_ns: u64, path: PathIdx, kind: Resend) {
        if self.has(unit) {
            // The receiver already has it: not part of any stall.
            return;
        }
        let p = self.pending.entry(unit).or_default();
        match kind {
            Resend::Fast => p.fast += 1,
            Resend::Timeout => p.timeout += 1,
            Resend::Unknown => p.unknown += 1,
        }
        if p.seen.len() < PENDING_EVIDENCE {
            p.seen.push((ts_ns, path, kind));
        }
        while self.pending.len() > MAX_PENDING {
            self.pending.pop_first();
        }
    }

    /// Takes the waiting retransmissions of units below `end`.
    pub fn take_pending(&mut self, end: u64) -> Vec<(u64, PendingResends)> {
        let rest = self.pending.split_off(&end);
        let taken = std::mem::replace(&mut self.pending, rest);
        taken.into_iter().collect()
    }

    /// Forgets waiting retransmissions of units delivered with no gap (the original or an
    /// earlier copy got through).
    fn forget_pending_below(&mut self, end: u64) {
        if self
            .pending
            .first_key_value()
            .is_some_and(|(&u, _)| u < end)
        {
            self.pending = self.pending.split_off(&end);
        }
    }

    /// [`GapTracker::deliver`] of `[start, end)` where it changes nothing but the next unit
    /// expected (no gap open, nothing buffered: a duplicate or an in-order piece); false, with
    /// nothing done, otherwise.
    #[inline]
    pub fn deliver_plain(&mut self, start: u64, end: u64) -> bool {
        let Some(next) = self.next else {
            return false;
        };
        if end <= start || end <= next {
            self.arriving = None;
            self.behind = 0;
            return true;
        }
        if start > next || self.gap.is_some() || !self.buffered.is_empty() {
            return false;
        }
        self.arriving = None;
        self.behind = 0;
        self.next = Some(end);
        self.forget_pending_below(end);
        true
    }

    /// Records the delivery of `[start, end)` at `ts_ns`. The first delivery sets the origin.
    /// Opening a gap needs an incident id, given by `open` when called.
    #[expect(
        clippy::too_many_arguments,
        reason = "one delivery's figures, read at one call site"
    )]
    pub fn deliver(
        &mut self,
        start: u64,
        end: u64,
        ts_ns: u64,
        bytes: u64,
        msg_end: bool,
        path: PathIdx,
        open: impl FnOnce(u64) -> u64,
    ) -> Delivery {
        let arriving = self.arriving.take();
        let behind = std::mem::take(&mut self.behind);
        if end <= start {
            return Delivery::Duplicate;
        }
        let next = *self.next.get_or_insert(start);
        if end <= next {
            return Delivery::Duplicate;
        }
        if start <= next {
            let mut n = end;
            let (mut messages, mut released) = (0u64, 0u64);
            if self.gap.is_some() {
                messages += behind;
            }
            while let Some((&s, h)) = self.buffered.first_key_value() {
                if s > n {
                    break;
                }
                n = n.max(h.end);
                messages += u64::from(h.msg_end);
                released += h.bytes;
                if let Some((_, h)) = self.buffered.pop_first() {
                    self.unhold(&h);
                }
            }
            self.next = Some(n);
            if let Some(g) = self.gap.as_mut() {
                g.filled_by |= filled_by::bit(arriving);
                if n < g.missing_end && !self.buffered.is_empty() {
                    // Part of the missing run filled, the rest still holds the data behind
                    // it: the same stall.
                    g.released.0 += messages;
                    g.released.1 += released;
                    return Delivery::Narrowed {
                        messages,
                        bytes: released,
                    };
                }
            }
            if let Some(g) = self.gap.take() {
                let (messages, released) = (messages + g.released.0, released + g.released.1);
                let still = self.buffered.values().map(|h| h.ts_ns).min();
                return Delivery::Filled {
                    messages,
                    bytes: released,
                    still_gapped_since: still,
                    filled_by: g.filled_by,
                };
            }
            self.forget_pending_below(n);
            return Delivery::InOrder;
        }
        if let Some(h) = self.buffered.get_mut(&start) {
            if end > h.end {
                h.end = end;
            }
            return Delivery::Duplicate;
        }
        self.hold(
            start,
            Held {
                end,
                ts_ns,
                bytes,
                msg_end,
                path,
            },
        );
        while self.buffered.len() > MAX_BUFFERED {
            if let Some((_, h)) = self.buffered.pop_last() {
                self.unhold(&h);
            }
            self.dropped += 1;
        }
        if self.gap.is_none() {
            self.gap = Some(OpenGap {
                incident: open(next),
                missing_end: start,
                revealed_on: path,
                unknown_resends: 0,
                released: (0, 0),
                filled_by: 0,
            });
            return Delivery::Buffered { opened: true };
        }
        Delivery::Buffered { opened: false }
    }

    /// Takes back the piece `[start, end)` held behind the open gap (its receiver dropped it
    /// past the capture point); false, with nothing done, when no such piece is held.
    pub fn withdraw(&mut self, start: u64, end: u64) -> bool {
        if self.gap.is_none() || self.buffered.get(&start).is_none_or(|h| h.end != end) {
            return false;
        }
        if let Some(h) = self.buffered.remove(&start) {
            self.unhold(&h);
        }
        true
    }

    /// Moves the next unit expected back to `unit` (what was delivered in order from it on
    /// was not taken after all), when no gap is open (the caller closes one first: its pieces
    /// stay held, to be held behind the hole at `unit` once a delivery past it opens the gap
    /// there); false, with nothing done, otherwise.
    pub fn rewind(&mut self, unit: u64) -> bool {
        match self.next {
            Some(n) if n > unit && self.gap.is_none() => {
                self.next = Some(unit);
                true
            }
            _ => false,
        }
    }

    /// Messages held behind the open gap that no held piece carries (a TCP capture's framing
    /// completed them as their bytes arrived, before the gap was known).
    pub fn held_behind_gap(&mut self, messages: u64) {
        if let Some(g) = self.gap.as_mut() {
            g.released.0 += messages;
        }
    }

    /// The missing run in front of the first held piece, `[next, first held)`.
    pub fn hole(&self) -> Option<(u64, u64)> {
        let n = self.next?;
        let (&s, _) = self.buffered.first_key_value()?;
        Some((n, s))
    }

    /// Starts tracking a remaining gap after a fill (another piece is still missing).
    pub fn reopen(&mut self, incident: u64) {
        if let (Some(_), Some((&s, h))) = (self.next, self.buffered.first_key_value()) {
            self.gap = Some(OpenGap {
                incident,
                missing_end: s,
                revealed_on: h.path,
                unknown_resends: 0,
                released: (0, 0),
                filled_by: 0,
            });
        }
    }
}

/// Bounded store of HOL incidents.
#[derive(Debug, Default)]
pub struct IncidentBook {
    open: BTreeMap<u64, HolIncident>,
    closed: VecDeque<HolIncident>,
    next_id: u64,
    max: usize,
    /// Incidents ever opened.
    pub total: u64,
    /// Incidents dropped from memory (history bound).
    pub evicted: u64,
    /// Per protocol (tcp, kcp, quic): incidents ever opened, and the stall time of those
    /// closed or evicted while open (ns).
    by_protocol: [HolTotals; 3],
}

fn protocol_index(p: HolProtocol) -> usize {
    match p {
        HolProtocol::Tcp => 0,
        HolProtocol::Kcp => 1,
        HolProtocol::Quic => 2,
    }
}

impl IncidentBook {
    /// Empty book keeping `max` closed incidents (and up to 4× as many open).
    pub fn new(max: usize) -> Self {
        Self {
            max: max.max(1),
            ..Self::default()
        }
    }

    /// Opens an incident; returns its id.
    pub fn open(&mut self, mut inc: HolIncident) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.total += 1;
        inc.id = id;
        let at = inc.start_ns;
        if let Some(t) = self.by_protocol.get_mut(protocol_index(inc.protocol)) {
            t.stalls += 1;
        }
        self.open.insert(id, inc);
        while self.open.len() > self.max * 4 {
            // Held until now as far as anyone knows: its stall so far is kept.
            if let Some((_, old)) = self.open.pop_first() {
                if let Some(t) = self.by_protocol.get_mut(protocol_index(old.protocol)) {
                    t.stall_ns = t.stall_ns.saturating_add(at.saturating_sub(old.start_ns));
                }
            }
            self.evicted += 1;
        }
        id
    }

    /// Withdraws open incident `id`, shown to be none (as if never opened); false if it was
    /// not open.
    pub fn withdraw(&mut self, id: u64) -> bool {
        let Some(inc) = self.open.remove(&id) else {
            return false;
        };
        self.total -= 1;
        if let Some(t) = self.by_protocol.get_mut(protocol_index(inc.protocol)) {
            t.stalls -= 1;
        }
        true
    }

    /// An open incident.
    pub fn get_mut(&mut self, id: u64) -> Option<&mut HolIncident> {
        self.open.get_mut(&id)
    }

    /// Closes an incident at `end_ns`; returns a copy for the record.
    pub fn close(&mut self, id: u64, end_ns: u64) -> Option<HolIncident> {
        let mut inc = self.open.remove(&id)?;
        inc.end_ns = Some(end_ns);
        inc.stall_ns = end_ns.saturating_sub(inc.start_ns);
        if let Some(t) = self.by_protocol.get_mut(protocol_index(inc.protocol)) {
            t.stall_ns = t.stall_ns.saturating_add(inc.stall_ns);
        }
        if inc.recovery == Recovery::Unknown {
            inc.recovery = if inc.timeout_retransmits > 0 {
                Recovery::Timeout
            } else if inc.fast_retransmits > 0 {
                Recovery::Fast
            } else {
                Recovery::Unknown
            };
        }
        self.closed.push_back(inc.clone());
        while self.closed.len() > self.max {
            self.closed.pop_front();
            self.evicted += 1;
        }
        Some(inc)
    }

    /// Per protocol, the stalls ever opened and their stall time, the open ones' so far at
    /// `now`.
    pub fn totals(&self, now: u64) -> Vec<(HolProtocol, HolTotals)> {
        let mut totals = self.by_protocol;
        for inc in self.open.values() {
            if let Some(t) = totals.get_mut(protocol_index(inc.protocol)) {
                t.stall_ns = t.stall_ns.saturating_add(now.saturating_sub(inc.start_ns));
            }
        }
        [HolProtocol::Tcp, HolProtocol::Kcp, HolProtocol::Quic]
            .into_iter()
            .zip(totals)
            .collect()
    }

    /// Open ids (to close at the end of the run).
    pub fn open_ids(&self) -> Vec<u64> {
        self.open.keys().copied().collect()
    }

    /// Newest first, open ones (stall so far at `now`) included, at most `limit`.
    pub fn newest_first(&self, now: u64, limit: usize) -> Vec<HolIncident> {
        let mut v: Vec<HolIncident> = self
            .open
            .values()
            .map(|i| {
                let mut i = i.clone();
                i.stall_ns = now.saturating_sub(i.start_ns);
                i
            })
            .chain(self.closed.iter().cloned())
            .collect();
        v.sort_by(|a, b| b.start_ns.cmp(&a.start_ns).then(b.id.cmp(&a.id)));
        v.truncate(limit);
        v
    }
}

/// Adds evidence in time order (an entry older than the newest, e.g. a retransmission seen
/// before the receiver showed the gap, goes to its place), keeping the first half and the
/// latest entries when over the bound.
pub fn push_evidence(inc: &mut HolIncident, ts_ns: u64, path: &str, what: String) {
    if inc.evidence.len() >= MAX_EVIDENCE {
        inc.evidence.remove(MAX_EVIDENCE / 2);
    }
    let at = inc.evidence.partition_point(|e| e.ts_ns <= ts_ns);
    inc.evidence.insert(
        at,
        Evidence {
            ts_ns,
            path: path.to_owned(),
            what,
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gap_opens_on_skip_and_fills_releasing_held_messages() {
        let mut g = GapTracker::default();
        let mut ids = 0;
        let mut open = |_m: u64| {
            ids += 1;
            ids
        };
        assert_eq!(
            g.deliver(0, 1, 10, 100, true, 0, &mut open),
            Delivery::InOrder
        );
        assert_eq!(
            g.deliver(2, 3, 20, 100, true, 0, &mut open),
            Delivery::Buffered { opened: true }
        );
        assert_eq!(g.gap.map(|_| g.next), Some(Some(1)), "the gap starts at 1");
        assert_eq!(
            g.deliver(3, 4, 30, 100, true, 0, &mut open),
            Delivery::Buffered { opened: false }
        );
        assert_eq!(
            g.deliver(3, 4, 31, 100, true, 0, &mut open),
            Delivery::Duplicate
        );
        assert_eq!(g.held(), (2, 200));
        assert_eq!(
            g.deliver(1, 2, 40, 100, true, 1, &mut open),
            Delivery::Filled {
                messages: 2,
                bytes: 200,
                still_gapped_since: None,
                filled_by: filled_by::UNKNOWN,
            }
        );
        assert_eq!(g.next(), Some(4));
        assert_eq!(g.held(), (0, 0));
        assert_eq!(
            g.deliver(0, 1, 50, 100, true, 0, &mut open),
            Delivery::Duplicate
        );
    }

    #[test]
    fn a_missing_run_is_one_gap_until_all_of_it_is_filled() {
        let mut g = GapTracker::default();
        let mut ids = 0;
        let mut open = |_m: u64| {
            ids += 1;
            ids
        };
        g.deliver(0, 1, 0, 100, true, 0, &mut open);
        // 1..=4 missing: 5 held, then 3 arrives inside the run.
        assert_eq!(
            g.deliver(5, 6, 10, 100, true, 0, &mut open),
            Delivery::Buffered { opened: true }
        );
        g.deliver(3, 4, 11, 100, true, 0, &mut open);
        assert_eq!(g.gap.map(|x| (g.next, x.missing_end)), Some((Some(1), 5)));
        // 1 and 2 release 3, 4 is still missing: the same gap.
        g.arriving = Some(Transmission::Retransmission(Resend::Fast));
        assert_eq!(
            g.deliver(1, 2, 20, 100, true, 0, &mut open),
            Delivery::Narrowed {
                messages: 0,
                bytes: 0
            }
        );
        g.arriving = Some(Transmission::Original);
        assert_eq!(
            g.deliver(2, 3, 21, 100, true, 0, &mut open),
            Delivery::Narrowed {
                messages: 1,
                bytes: 100
            }
        );
        assert_eq!(g.held_by_gap(), (2, 200));
        g.arriving = Some(Transmission::Retransmission(Resend::Timeout));
        assert_eq!(
            g.deliver(4, 5, 30, 100, true, 0, &mut open),
            Delivery::Filled {
                messages: 2,
                bytes: 200,
                still_gapped_since: None,
                filled_by: filled_by::FAST | filled_by::ORIGINAL | filled_by::TIMEOUT,
            }
        );
        assert_eq!(ids, 1);
    }

    /// Stall time per protocol: closed stalls whole, open ones so far, evicted open ones up
    /// to the stall that pushed them out.
    #[test]
    fn totals_per_protocol() {
        let inc = |protocol, start_ns| HolIncident {
            protocol,
            start_ns,
            ..HolIncident::default()
        };
        let mut book = IncidentBook::new(1);
        let a = book.open(inc(HolProtocol::Tcp, 100));
        book.open(inc(HolProtocol::Kcp, 150));
        book.close(a, 400);
        let totals = book.totals(1_000);
        let get = |p| {
            totals
                .iter()
                .find(|(q, _)| *q == p)
                .map(|(_, t)| *t)
                .unwrap()
        };
        assert_eq!(
            get(HolProtocol::Tcp),
            HolTotals {
                stalls: 1,
                stall_ns: 300
            }
        );
        assert_eq!(
            get(HolProtocol::Kcp),
            HolTotals {
                stalls: 1,
                stall_ns: 850
            }
        );
        assert_eq!(get(HolProtocol::Quic), HolTotals::default());
        // Four open at most (4 × max): the fifth evicts the oldest open, KCP's, at 2000.
        for t in [1_100, 1_200, 1_300, 2_000] {
            book.open(inc(HolProtocol::Quic, t));
        }
        assert_eq!(book.evicted, 1);
        let totals = book.totals(2_000);
        let kcp = totals
            .iter()
            .find(|(q, _)| *q == HolProtocol::Kcp)
            .unwrap()
            .1;
        assert_eq!(
            kcp,
            HolTotals {
                stalls: 1,
                stall_ns: 1_850
            }
        );
    }
}
