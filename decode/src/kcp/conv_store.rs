//! Storage behind the conversation tracker: compact per-`sn` transmission records in an O(1)
//! window, reassembly fragments, and a cheap hasher for the tracker's integer keys.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

/// True if sequence number (or timestamp) `a` comes before `b`, modulo 2³².
#[inline]
pub(super) fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// Multiply-rotate hasher for the tracker's integer keys (sequence numbers, conversation keys):
/// much cheaper than SipHash; the maps it serves are bounded in size.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct IntHasher(u64);

pub(super) const HASH_K: u64 = 0x517c_c1b7_2722_0a95;

impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(HASH_K);
        }
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i));
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(HASH_K);
    }
}

pub(super) type IntMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;

/// One transmission of an `sn`.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Transmission {
    pub(super) time_ns: u64,
    pub(super) ts: u32,
    /// Transmission number (1 = original; 0 = unknown, a late sighting of an older one).
    pub(super) attempt: u16,
    pub(super) path: u16,
}

/// Most transmissions of one `sn` remembered for RTT matching.
pub(super) const MAX_TRANSMISSIONS: usize = 4;

/// The latest transmissions of one `sn`, oldest first, stored inline.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Transmissions {
    pub(super) slots: [Transmission; MAX_TRANSMISSIONS],
    pub(super) head: u8,
    pub(super) filled: u8,
}

impl Transmissions {
    pub(super) fn one(t: Transmission) -> Self {
        let mut s = Self::default();
        s.push(t);
        s
    }
    pub(super) fn push(&mut self, t: Transmission) {
        let (head, filled) = (usize::from(self.head), usize::from(self.filled));
        if filled < MAX_TRANSMISSIONS {
            if let Some(slot) = self.slots.get_mut((head + filled) % MAX_TRANSMISSIONS) {
                *slot = t;
            }
            self.filled = self.filled.saturating_add(1);
        } else {
            if let Some(slot) = self.slots.get_mut(head) {
                *slot = t;
            }
            self.head = ((head + 1) % MAX_TRANSMISSIONS) as u8;
        }
    }
    pub(super) fn find(&self, ts: u32) -> Option<Transmission> {
        let head = usize::from(self.head);
        (0..usize::from(self.filled))
            .filter_map(|i| self.slots.get((head + i) % MAX_TRANSMISSIONS))
            .find(|t| t.ts == ts)
            .copied()
    }
}

#[derive(Clone, Debug)]
pub(super) struct TxRecord {
    /// Latest transmissions.
    pub(super) transmissions: Transmissions,
    /// Latest `ts` (newest transmission).
    pub(super) ts: u32,
    /// Capture time of the newest transmission.
    pub(super) last_ns: u64,
    pub(super) attempts: u32,
    /// Index in the ACK log when the newest transmission was seen.
    pub(super) ack_mark: u64,
    /// `ts` of the transmission already acknowledged, if any.
    pub(super) acked_ts: Option<u32>,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Fragment {
    pub(super) frg: u8,
    pub(super) len: u32,
    pub(super) time_ns: u64,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct MessageInProgress {
    pub(super) first_sn: u32,
    pub(super) last_frg: u8,
    pub(super) fragments: u32,
    pub(super) bytes: u64,
    pub(super) first_ns: u64,
    pub(super) complete_ns: u64,
    pub(super) start_seen: bool,
}

/// Transmission records of consecutive sequence numbers from `base` on: O(1) lookup by `sn`,
/// oldest evicted first.
#[derive(Clone, Debug, Default)]
pub(super) struct TxWindow {
    pub(super) base: u32,
    pub(super) slots: VecDeque<Option<TxRecord>>,
}

impl TxWindow {
    pub(super) fn get_mut(&mut self, sn: u32) -> Option<&mut TxRecord> {
        let offset = usize::try_from(sn.wrapping_sub(self.base)).ok()?;
        self.slots.get_mut(offset).and_then(Option::as_mut)
    }

    /// Stores the record of a new `sn`; returns how many tracked records were evicted to keep at
    /// most `cap` slots. An `sn` before the window is not stored.
    pub(super) fn insert(&mut self, sn: u32, record: TxRecord, cap: usize) -> u64 {
        let cap = cap.max(1);
        if self.slots.is_empty() {
            self.base = sn;
        }
        if before(sn, self.base) {
            return 0;
        }
        let mut evicted = 0u64;
        let mut offset = usize::try_from(sn.wrapping_sub(self.base)).unwrap_or(usize::MAX);
        if offset >= cap {
            let drop = offset.saturating_add(1).saturating_sub(cap);
            if drop >= self.slots.len() {
                evicted = self.slots.iter().filter(|s| s.is_some()).count() as u64;
                self.slots.clear();
                self.base = sn;
                offset = 0;
            } else {
                for _ in 0..drop {
                    if let Some(Some(_)) = self.slots.pop_front() {
                        evicted += 1;
                    }
                    self.base = self.base.wrapping_add(1);
                }
                offset = offset.saturating_sub(drop);
            }
        }
        while self.slots.len() <= offset {
            self.slots.push_back(None);
        }
        if let Some(slot) = self.slots.get_mut(offset) {
            *slot = Some(record);
        }
        evicted
    }

    /// Forgets every `sn` before `una`.
    pub(super) fn forget_below(&mut self, una: u32) {
        while !self.slots.is_empty() && before(self.base, una) {
            self.slots.pop_front();
            self.base = self.base.wrapping_add(1);
        }
    }
}
