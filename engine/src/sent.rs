//! Packets sent and not yet acknowledged, per sender group (direction and path, or packet
//! number space), ordered like a `BTreeMap<(group, sequence number), _>`. Sequence numbers
//! mostly grow and acknowledgments mostly come in order, so each group is a sorted ring:
//! appending a new packet and removing the oldest are O(1), with no node allocations.

use std::collections::VecDeque;
use std::ops::{Bound, RangeBounds};

/// Past this many groups, groups with nothing waiting are dropped when a new one comes.
const MAX_EMPTY_GROUPS: usize = 16;

/// Unacknowledged packets by (group, sequence number).
#[derive(Debug)]
pub struct SentQueue<G, V> {
    /// Sorted by group; each ring sorted by sequence number.
    groups: Vec<(G, VecDeque<(u64, V)>)>,
    len: usize,
}

impl<G, V> Default for SentQueue<G, V> {
    fn default() -> Self {
        Self {
            groups: Vec::new(),
            len: 0,
        }
    }
}

impl<G: Ord + Copy, V> SentQueue<G, V> {
    /// Packets waiting.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The position of group `g` in `groups`: mostly one group is in use.
    #[inline]
    fn find(&self, g: G) -> Result<usize, usize> {
        match self.groups.first() {
            Some(x) if self.groups.len() == 1 && x.0 == g => Ok(0),
            _ => self.groups.binary_search_by(|x| x.0.cmp(&g)),
        }
    }

    #[inline]
    fn ring(&mut self, g: G) -> Option<&mut VecDeque<(u64, V)>> {
        let i = self.find(g).ok()?;
        self.groups.get_mut(i).map(|x| &mut x.1)
    }

    /// Every packet waiting, in no particular order.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.groups
            .iter_mut()
            .flat_map(|(_, ring)| ring.iter_mut().map(|(_, v)| v))
    }

    /// Adds (or replaces) the packet `seq` of group `g`.
    #[inline]
    pub fn insert(&mut self, g: G, seq: u64, v: V) -> Option<V> {
        // The common case first: a new packet past the newest of a known group.
        if let Ok(gi) = self.find(g) {
            if let Some((_, ring)) = self.groups.get_mut(gi) {
                if ring.back().is_none_or(|b| b.0 < seq) {
                    ring.push_back((seq, v));
                    self.len += 1;
                    return None;
                }
            }
        }
        self.insert_slow(g, seq, v)
    }

    /// [`SentQueue::insert`] into a new group, or of a packet not past the newest.
    #[cold]
    fn insert_slow(&mut self, g: G, seq: u64, v: V) -> Option<V> {
        let gi = match self.find(g) {
            Ok(i) => i,
            Err(_) => {
                if self.groups.len() > MAX_EMPTY_GROUPS {
                    self.groups.retain(|x| !x.1.is_empty());
                }
                let i = self.groups.partition_point(|x| x.0 < g);
                self.groups.insert(i, (g, VecDeque::new()));
                i
            }
        };
        let ring = &mut self.groups[gi].1;
        if ring.back().is_none_or(|b| b.0 < seq) {
            ring.push_back((seq, v));
            self.len += 1;
            return None;
        }
        match ring.binary_search_by(|x| x.0.cmp(&seq)) {
            Ok(i) => Some(std::mem::replace(&mut ring[i].1, v)),
            Err(i) => {
                ring.insert(i, (seq, v));
                self.len += 1;
                None
            }
        }
    }

    /// Removes the packet with the smallest (group, sequence number).
    pub fn pop_first(&mut self) -> Option<(G, u64, V)> {
        let (g, ring) = self.groups.iter_mut().find(|x| !x.1.is_empty())?;
        let (seq, v) = ring.pop_front()?;
        self.len -= 1;
        Some((*g, seq, v))
    }

    /// The packet `seq` of group `g`.
    pub fn get_mut(&mut self, g: G, seq: u64) -> Option<&mut V> {
        let ring = self.ring(g)?;
        let i = position(ring, seq)?;
        ring.get_mut(i).map(|x| &mut x.1)
    }

    /// Removes the packet `seq` of group `g`.
    pub fn remove(&mut self, g: G, seq: u64) -> Option<V> {
        let ring = self.ring(g)?;
        let i = position(ring, seq)?;
        let (_, v) = ring.remove(i)?;
        self.len -= 1;
        Some(v)
    }

    /// Removes the packets of group `g` whose sequence numbers are in `range`, in order,
    /// appending them to `out`.
    pub fn take_range(&mut self, g: G, range: impl RangeBounds<u64>, out: &mut Vec<(u64, V)>) {
        let Some(ring) = self.ring(g) else {
            return;
        };
        let (Some(first), Some(last)) = (ring.front().map(|x| x.0), ring.back().map(|x| x.0))
        else {
            return;
        };
        // (Ranges mostly start at or before the oldest, and often end past the newest.)
        let start = match range.start_bound() {
            Bound::Included(s) if *s <= first => 0,
            Bound::Excluded(s) if *s < first => 0,
            Bound::Included(s) => ring.partition_point(|x| x.0 < *s),
            Bound::Excluded(s) => ring.partition_point(|x| x.0 <= *s),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(e) if *e >= last => ring.len(),
            Bound::Excluded(e) if *e > last => ring.len(),
            Bound::Included(e) if *e < first => 0,
            Bound::Excluded(e) if *e <= first => 0,
            Bound::Included(e) => ring.partition_point(|x| x.0 <= *e),
            Bound::Excluded(e) => ring.partition_point(|x| x.0 < *e),
            Bound::Unbounded => ring.len(),
        };
        if start >= end {
            return;
        }
        // (From the oldest, the drain moves nothing else.)
        out.extend(ring.drain(start..end));
        self.len -= end - start;
    }
}

/// Where `seq` is in `ring` (sorted): in order, sequence numbers mostly follow each other, so
/// its distance from the oldest is tried first.
#[inline]
fn position<V>(ring: &VecDeque<(u64, V)>, seq: u64) -> Option<usize> {
    let (first, last) = (ring.front()?.0, ring.back()?.0);
    if seq < first || seq > last {
        return None;
    }
    let guess = seq - first;
    if let Some(x) = usize::try_from(guess).ok().and_then(|i| ring.get(i)) {
        if x.0 == seq {
            return usize::try_from(guess).ok();
        }
    }
    ring.binary_search_by(|x| x.0.cmp(&seq)).ok()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Removes the entries of group `g` in `range` from the map, in order.
    fn take_from_map<G: Ord + Copy>(
        m: &mut BTreeMap<(G, u64), u64>,
        g: G,
        range: impl RangeBounds<u64>,
    ) -> Vec<(u64, u64)> {
        let keys: Vec<_> = m
            .keys()
            .filter(|k| k.0 == g && range.contains(&k.1))
            .copied()
            .collect();
        keys.iter()
            .filter_map(|k| m.remove(k).map(|v| (k.1, v)))
            .collect()
    }

    /// The queue behaves as the ordered map it replaces, whatever the order of operations.
    #[test]
    fn matches_an_ordered_map() {
        let mut q: SentQueue<(bool, usize), u64> = SentQueue::default();
        let mut m: BTreeMap<((bool, usize), u64), u64> = BTreeMap::new();
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..20_000u64 {
            let g = (next() % 2 == 0, (next() % 3) as usize);
            let seq = i / 3 + next() % 8;
            match next() % 6 {
                0 | 1 => assert_eq!(q.insert(g, seq, i), m.insert((g, seq), i)),
                5 => assert_eq!(q.get_mut(g, seq), m.get_mut(&(g, seq))),
                2 => assert_eq!(q.remove(g, seq), m.remove(&(g, seq))),
                3 => {
                    let (lo, hi) = (seq.saturating_sub(6), seq);
                    let mut got = Vec::new();
                    q.take_range(g, lo..=hi, &mut got);
                    assert_eq!(got, take_from_map(&mut m, g, lo..=hi));
                }
                _ => {
                    if q.len() > 40 {
                        let want = m.pop_first().map(|((g, s), v)| (g, s, v));
                        assert_eq!(q.pop_first(), want);
                    }
                }
            }
            assert_eq!(q.len(), m.len());
        }
    }

    /// Sequence numbers that mostly follow each other (the in-order fast paths: a packet found
    /// by its distance from the oldest) with some skipped and some acknowledged out of order,
    /// so that the distance sometimes names another packet: still the ordered map's answers.
    #[test]
    fn in_order_fast_paths_match_an_ordered_map() {
        let mut q: SentQueue<bool, u64> = SentQueue::default();
        let mut m: BTreeMap<(bool, u64), u64> = BTreeMap::new();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut sn = [0u64; 2];
        for i in 0..20_000u64 {
            let g = next() % 4 == 0;
            let s = &mut sn[usize::from(g)];
            let base = s.saturating_sub(6);
            match next() % 7 {
                0..=2 => {
                    // Mostly the next one; now and then one skipped.
                    *s += 1 + u64::from(next() % 10 == 0);
                    assert_eq!(q.insert(g, *s, i), m.insert((g, *s), i));
                }
                3 => {
                    let seq = base + next() % 8;
                    assert_eq!(q.remove(g, seq), m.remove(&(g, seq)));
                }
                4 => {
                    let seq = base + next() % 8;
                    assert_eq!(q.get_mut(g, seq), m.get_mut(&(g, seq)));
                }
                5 => {
                    let una = base + next() % 8;
                    let mut got = Vec::new();
                    q.take_range(g, 0..una, &mut got);
                    assert_eq!(got, take_from_map(&mut m, g, 0..una));
                }
                _ => {
                    // A later packet replaced (a retransmission recorded again).
                    let seq = base + next() % 8;
                    if let Some(v) = m.get_mut(&(g, seq)) {
                        assert_eq!(q.insert(g, seq, i), Some(std::mem::replace(v, i)));
                    }
                }
            }
            assert_eq!(q.len(), m.len());
        }
    }
}
