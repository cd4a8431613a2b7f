//! Head-of-line incidents: a receive-side gap tracker (KCP sn, QUIC stream offsets) and the
//! bounded book of incidents (open and closed) with their evidence timelines.

use std::collections::{BTreeMap, VecDeque};

use crate::paths::PathIdx;
use crate::record::{Evidence, HolIncident, Recovery};

/// Evidence entries kept per incident.
pub const MAX_EVIDENCE: usize = 24;
/// Out-of-order pieces buffered per tracker.
const MAX_BUFFERED: usize = 4096;

/// A piece delivered beyond a gap.
#[derive(Clone, Copy, Debug)]
struct Held {
    end: u64,
    ts_ns: u64,
    bytes: u64,
    msg_end: bool,
    path: PathIdx,
}

/// The gap currently holding data back.
#[derive(Clone, Copy, Debug)]
pub struct OpenGap {
    /// Incident id.
    pub incident: u64,
    /// First missing unit.
    pub missing: u64,
    /// Path of the piece that revealed the gap.
    pub revealed_on: PathIdx,
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
    /// Filled the gap: pieces released behind it.
    Filled {
        /// Message ends released.
        messages: u64,
        /// Bytes released.
        bytes: u64,
        /// Earliest arrival among pieces still buffered (another gap remains).
        still_gapped_since: Option<u64>,
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
}

impl GapTracker {
    /// Units buffered behind the gap.
    pub fn held(&self) -> (u64, u64) {
        (self.held_messages, self.held_bytes)
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

    /// Whether `unit` was already delivered in order or is buffered.
    pub fn has(&self, unit: u64) -> bool {
        self.next.is_some_and(|n| unit < n) || self.buffered.contains_key(&unit)
    }

    /// Records the delivery of `[start, end)` at `ts_ns`. The first delivery sets the origin.
    /// Opening a gap needs an incident id, given by `open` when called.
    #[allow(clippy::too_many_arguments)]
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
            if self.gap.take().is_some() {
                let still = self.buffered.values().map(|h| h.ts_ns).min();
                return Delivery::Filled {
                    messages,
                    bytes: released,
                    still_gapped_since: still,
                };
            }
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
                missing: next,
                revealed_on: path,
            });
            return Delivery::Buffered { opened: true };
        }
        Delivery::Buffered { opened: false }
    }

    /// Starts tracking a remaining gap after a fill (another piece is still missing).
    pub fn reopen(&mut self, incident: u64) {
        if let (Some(n), Some(h)) = (self.next, self.buffered.values().next()) {
            self.gap = Some(OpenGap {
                incident,
                missing: n,
                revealed_on: h.path,
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
        self.open.insert(id, inc);
        while self.open.len() > self.max * 4 {
            self.open.pop_first();
            self.evicted += 1;
        }
        id
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

/// Appends evidence, keeping the first half and the latest entries when over the bound.
pub fn push_evidence(inc: &mut HolIncident, ts_ns: u64, path: &str, what: String) {
    if inc.evidence.len() >= MAX_EVIDENCE {
        inc.evidence.remove(MAX_EVIDENCE / 2);
    }
    inc.evidence.push(Evidence {
        ts_ns,
        path: path.to_owned(),
        what,
    });
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
        assert_eq!(g.gap.map(|x| x.missing), Some(1));
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
                still_gapped_since: None
            }
        );
        assert_eq!(g.next(), Some(4));
        assert_eq!(g.held(), (0, 0));
        assert_eq!(
            g.deliver(0, 1, 50, 100, true, 0, &mut open),
            Delivery::Duplicate
        );
    }
}
