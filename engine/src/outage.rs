//! Path outages: a path with no sign of life (nothing arrived over it) for longer than the
//! threshold while the other paths still deliver, or while it keeps sending what asks for an
//! answer (data, probes; not bare ACKs), is in outage until something arrives over it again;
//! known from its sends alone, the outage starts at the first one left unanswered (the
//! silence before may be an idle path). Records are emitted once the messages of the outage
//! had time to close (end + message timeout), so `carried_by_others` is complete.

use std::collections::VecDeque;

use crate::paths::PathIdx;
use crate::record::OutageRecord;

/// Most recent outages of a path looked at when attributing a message.
const LOOKBACK: usize = 8;

#[derive(Clone, Debug)]
struct OutageState {
    path: PathIdx,
    rec: OutageRecord,
    emitted: bool,
}

/// Bounded outage history.
#[derive(Debug, Default)]
pub struct OutageBook {
    history: VecDeque<OutageState>,
    next_id: u64,
    max: usize,
    /// Closed outages in `history` not emitted yet (what `due` looks for).
    closed_waiting: usize,
    /// Outages ever opened.
    pub total: u64,
    /// Outages dropped from history.
    pub evicted: u64,
    /// The longest closed outage so far (ns), whether still in history or not.
    longest_closed_ns: u64,
    /// Open outages (in history).
    open: usize,
    /// Paths whose capture ended early: (label, last frame, outage threshold).
    capture_ends: Vec<(String, u64, u64)>,
}

impl OutageBook {
    /// Keeps `max` outages.
    pub fn new(max: usize) -> Self {
        Self {
            max: max.max(1),
            ..Self::default()
        }
    }

    /// Opens an outage on `path` that started at `start_ns`.
    pub fn open(&mut self, path: PathIdx, label: &str, start_ns: u64, evidence: String) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.total += 1;
        self.history.push_back(OutageState {
            path,
            rec: OutageRecord {
                id,
                path: label.to_owned(),
                start_ns,
                end_ns: None,
                duration_ns: 0,
                evidence,
                carried_by_others: 0,
                lost: 0,
            },
            emitted: false,
        });
        self.open += 1;
        while self.history.len() > self.max {
            if let Some(o) = self.history.pop_front() {
                if o.rec.end_ns.is_some() && !o.emitted {
                    self.closed_waiting -= 1;
                }
                if o.rec.end_ns.is_none() {
                    self.open -= 1;
                }
            }
            self.evicted += 1;
        }
        id
    }

    /// Closes outage `id` at `end_ns`.
    pub fn close(&mut self, id: u64, end_ns: u64) {
        if let Some(o) = self.history.iter_mut().rev().find(|o| o.rec.id == id) {
            if o.rec.end_ns.is_none() && !o.emitted {
                self.closed_waiting += 1;
            }
            if o.rec.end_ns.is_none() {
                self.open -= 1;
            }
            o.rec.end_ns = Some(end_ns);
            o.rec.duration_ns = end_ns.saturating_sub(o.rec.start_ns);
            self.longest_closed_ns = self.longest_closed_ns.max(o.rec.duration_ns);
        }
    }

    /// The longest outage seen by `now`, open ones as long as they lasted so far (ns): how
    /// much longer than the message timeout a copy held through one may take.
    pub fn longest(&self, now: u64) -> u64 {
        let open = if self.open == 0 {
            0
        } else {
            self.history
                .iter()
                .filter(|o| o.rec.end_ns.is_none())
                .map(|o| now.saturating_sub(o.rec.start_ns))
                .max()
                .unwrap_or(0)
        };
        self.longest_closed_ns.max(open)
    }

    /// The outage of `path` covering time `t`, if any.
    pub fn covering(&mut self, path: PathIdx, t: u64) -> Option<&mut OutageRecord> {
        self.history
            .iter_mut()
            .rev()
            .filter(|o| o.path == path)
            .take(LOOKBACK)
            .find(|o| o.rec.start_ns <= t && o.rec.end_ns.is_none_or(|e| t <= e))
            .map(|o| &mut o.rec)
    }

    /// The outage of `path` at `t`: its start and its end (`t` while it is open).
    pub fn span_at(&self, path: PathIdx, t: u64) -> Option<(u64, u64)> {
        self.history
            .iter()
            .rev()
            .filter(|o| o.path == path)
            .take(LOOKBACK)
            .find(|o| o.rec.start_ns <= t && o.rec.end_ns.is_none_or(|e| t <= e))
            .map(|o| (o.rec.start_ns, o.rec.end_ns.unwrap_or(t)))
    }

    /// The latest end of an outage of `path` between `from` and `to`.
    pub fn last_end_between(&self, path: PathIdx, from: u64, to: u64) -> Option<u64> {
        self.history
            .iter()
            .rev()
            .filter(|o| o.path == path)
            .take(LOOKBACK)
            .filter_map(|o| o.rec.end_ns)
            .filter(|&e| from < e && e < to)
            .max()
    }

    /// Whether any path was in outage at `t`.
    #[inline]
    pub fn any_covering(&self, t: u64) -> bool {
        self.history
            .iter()
            .rev()
            .take(LOOKBACK * 4)
            .any(|o| o.rec.start_ns <= t && o.rec.end_ns.is_none_or(|e| t <= e))
    }

    /// Whether closed outages wait to be emitted ([`OutageBook::due`] has something to check).
    #[inline]
    pub fn any_waiting(&self) -> bool {
        self.closed_waiting > 0
    }

    /// Closed outages whose end is older than `now − settle_ns`, not yet emitted.
    pub fn due(&mut self, now: u64, settle_ns: u64) -> Vec<OutageRecord> {
        let mut v = Vec::new();
        if self.closed_waiting == 0 {
            return v;
        }
        for o in self.history.iter_mut() {
            if let Some(e) = o.rec.end_ns {
                if !o.emitted && e.saturating_add(settle_ns) <= now {
                    o.emitted = true;
                    self.closed_waiting -= 1;
                    v.push(o.rec.clone());
                }
            }
        }
        v
    }

    /// The capture of the path labelled `label` ended at `last_ns` (its last frame), before
    /// the others: applied by [`OutageBook::finish`] if that is before the end of the run.
    pub fn capture_ended(&mut self, label: &str, last_ns: u64, threshold_ns: u64) {
        self.capture_ends
            .push((label.to_owned(), last_ns, threshold_ns));
    }

    /// An outage still open on `label` ends at `last_ns`, and one opened on a silence shorter
    /// than `threshold_ns` before that end (the capture stopped, the path may not have) is
    /// dropped. Returns how many were dropped.
    fn bound_to_capture(&mut self, label: &str, last_ns: u64, threshold_ns: u64) -> u64 {
        let before = self.history.len();
        self.history.retain(|o| {
            o.emitted
                || o.rec.end_ns.is_some()
                || o.rec.path != label
                || o.rec.start_ns.saturating_add(threshold_ns) < last_ns
        });
        let dropped = (before - self.history.len()) as u64;
        self.total = self.total.saturating_sub(dropped);
        let open: Vec<u64> = self
            .history
            .iter()
            .filter(|o| o.rec.end_ns.is_none() && o.rec.path == label)
            .map(|o| o.rec.id)
            .collect();
        for id in open {
            self.close(id, last_ns);
        }
        dropped
    }

    /// Everything not yet emitted, closing open outages at `end_ns`.
    pub fn finish(&mut self, end_ns: u64) -> Vec<OutageRecord> {
        for (label, last, threshold) in std::mem::take(&mut self.capture_ends) {
            if last < end_ns {
                self.bound_to_capture(&label, last, threshold);
            }
        }
        let mut v = Vec::new();
        for o in self.history.iter_mut() {
            if o.rec.end_ns.is_none() {
                o.rec.duration_ns = end_ns.saturating_sub(o.rec.start_ns);
            }
            if !o.emitted {
                o.emitted = true;
                v.push(o.rec.clone());
            }
        }
        self.closed_waiting = 0;
        v
    }

    /// Newest first, open ones with their duration so far.
    pub fn newest_first(&self, now: u64) -> Vec<OutageRecord> {
        self.history
            .iter()
            .rev()
            .map(|o| {
                let mut r = o.rec.clone();
                if r.end_ns.is_none() {
                    r.duration_ns = now.saturating_sub(r.start_ns);
                }
                r
            })
            .collect()
    }

    /// Outages overlapping `[from, to]`.
    pub fn overlapping(&self, from: u64, to: u64) -> u64 {
        self.history
            .iter()
            .filter(|o| o.rec.start_ns <= to && o.rec.end_ns.is_none_or(|e| e >= from))
            .count() as u64
    }
}
