//! Per-stream state of a QUIC connection, bounded. A connection that opens a stream per message
//! opens thousands in an hour: past the bound, the stream used least recently is forgotten (and
//! counted) so that the newest streams are always tracked.

use std::collections::VecDeque;
use std::hash::Hash;

use crate::FastMap;

/// Streams of one table, at most.
pub const MAX_STREAMS: usize = 1024;

/// A map of stream → state holding at most [`MAX_STREAMS`] streams. A new stream past the bound
/// forgets the stream used least recently. Recency is kept to within half the bound of new
/// streams: a stream's place in the order moves back only when it is used after that many new
/// streams came, so a stream per message costs one push per stream, not one per use.
#[derive(Debug)]
pub(crate) struct StreamTable<K, V> {
    /// Stream → (state, the count of streams seen when its place in `order` was last taken).
    map: FastMap<K, (V, u64)>,
    /// (stream, count when queued), least recent first; an entry whose count is not the
    /// stream's own is stale (the stream was queued again later) and skipped.
    order: VecDeque<(K, u64)>,
    /// Streams seen (the clock of recency).
    seen: u64,
    /// Streams forgotten to stay bounded, not yet collected by [`StreamTable::take_forgotten`].
    forgotten: u64,
}

impl<K, V> Default for StreamTable<K, V> {
    fn default() -> Self {
        Self {
            map: FastMap::default(),
            order: VecDeque::new(),
            seen: 0,
            forgotten: 0,
        }
    }
}

impl<K: Copy + Eq + Hash, V> StreamTable<K, V> {
    /// Streams held.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// The state of `stream`, if held (noted as used).
    pub(crate) fn get_mut(&mut self, stream: &K) -> Option<&mut V> {
        let (v, queued) = self.map.get_mut(stream)?;
        Self::used(&mut self.order, self.seen, *stream, queued);
        Some(v)
    }

    /// The state of `stream`, made by `new` if not held (forgetting one past the bound).
    pub(crate) fn get_or_insert_with(&mut self, stream: K, new: impl FnOnce() -> V) -> &mut V {
        if !self.map.contains_key(&stream) {
            self.make_room();
            self.seen += 1;
            self.order.push_back((stream, self.seen));
        }
        let seen = self.seen;
        let (v, queued) = self.map.entry(stream).or_insert_with(|| (new(), seen));
        Self::used(&mut self.order, seen, stream, queued);
        v
    }

    /// Notes a use of `stream` (queued at `queued`): queued again when it has been there for
    /// more than half the bound of new streams.
    fn used(order: &mut VecDeque<(K, u64)>, seen: u64, stream: K, queued: &mut u64) {
        if seen.saturating_sub(*queued) > (MAX_STREAMS / 2) as u64 {
            *queued = seen;
            order.push_back((stream, seen));
        }
    }

    /// Streams and their state, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.map.iter().map(|(k, (v, _))| (k, v))
    }

    /// Streams forgotten since the last call.
    pub(crate) fn take_forgotten(&mut self) -> u64 {
        std::mem::take(&mut self.forgotten)
    }

    /// Forgets the least recently used streams until one more fits.
    fn make_room(&mut self) {
        while self.map.len() >= MAX_STREAMS {
            let Some((oldest, queued)) = self.order.pop_front() else {
                return;
            };
            if self.map.get(&oldest).is_some_and(|(_, q)| *q == queued) {
                self.map.remove(&oldest);
                self.forgotten += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_bound_the_least_recently_used_stream_is_forgotten_and_counted() {
        let mut t: StreamTable<u64, u64> = StreamTable::default();
        for s in 0..MAX_STREAMS as u64 {
            *t.get_or_insert_with(s, || 0) += 1;
            assert!(t.get_mut(&0).is_some());
        }
        assert_eq!((t.len(), t.take_forgotten()), (MAX_STREAMS, 0));
        // Stream 0 stays in use (one long stream beside a stream per message); every stream
        // opened after the bound still gets its state.
        for s in MAX_STREAMS as u64..10 * MAX_STREAMS as u64 {
            *t.get_or_insert_with(s, || 0) += 1;
            assert!(t.get_mut(&0).is_some(), "stream 0 forgotten at {s}");
            assert_eq!(t.get_mut(&s), Some(&mut 1));
        }
        assert_eq!(t.len(), MAX_STREAMS);
        assert_eq!(t.take_forgotten(), 9 * MAX_STREAMS as u64);
        assert_eq!(t.take_forgotten(), 0);
        assert!(t.order.len() <= 3 * MAX_STREAMS, "{}", t.order.len());
    }
}
