//! The flow each address pair belongs to, for packets that name no flow of their own
//! (overhead: FEC parity, unknown protocols), keyed by the pair's
//! [`crate::matcher::tuple_hash`] that every packet carries. Bounded: a full map is cleared
//! before the next pair.

use crate::flow::FlowKey;
use crate::FastMap as HashMap;

/// Address pair → flow (bounded).
#[derive(Debug)]
pub(crate) struct AddressPairs {
    flows: HashMap<u64, FlowKey>,
    /// Pairs held at most.
    max: usize,
    /// Pairs known to be in `flows`, direct-mapped by their low bits (0: none): most packets
    /// belong to a few pairs, found here without hashing.
    known: [u64; KNOWN],
}

/// Slots of [`AddressPairs::known`].
const KNOWN: usize = 64;

impl AddressPairs {
    /// Empty, holding at most `max` pairs.
    pub(crate) fn new(max: usize) -> Self {
        Self {
            flows: HashMap::default(),
            max,
            known: [0; KNOWN],
        }
    }

    fn full(&self) -> bool {
        self.flows.len() >= self.max
    }

    /// Remembers that `tuple` belongs to the flow of key `key()` (the first flow seen on it
    /// stays; the key is made only for a pair not known yet).
    #[inline]
    pub(crate) fn remember(&mut self, tuple: u64, key: impl FnOnce() -> FlowKey) {
        let slot = (tuple % KNOWN as u64) as usize;
        if tuple != 0 && self.known.get(slot) == Some(&tuple) {
            return;
        }
        if self.full() {
            self.flows.clear();
            self.known = [0; KNOWN];
        }
        self.flows.entry(tuple).or_insert_with(key);
        if let Some(k) = self.known.get_mut(slot) {
            *k = tuple;
        }
    }

    /// The flow of `tuple`, else of `reverse` (the same pair the other way).
    pub(crate) fn flow_of(&self, tuple: u64, reverse: impl FnOnce() -> u64) -> Option<&FlowKey> {
        self.flows
            .get(&tuple)
            .or_else(|| self.flows.get(&reverse()))
    }
}

/// Entries the side maps kept per address pair or per connection ([`AddressPairs`], the QUIC
/// matcher's connection modes) hold at most.
pub(crate) fn side_map_max(cfg: &crate::config::Config) -> usize {
    cfg.max_flows.saturating_mul(4).max(16)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(server_port: u16) -> FlowKey {
        FlowKey::Datagram { server_port }
    }

    #[test]
    fn the_first_flow_of_a_pair_stays_and_a_cleared_map_learns_pairs_again() {
        let mut pairs = AddressPairs::new(2);
        pairs.remember(1, || key(10));
        pairs.remember(1, || key(11));
        assert_eq!(pairs.flow_of(1, || 0), Some(&key(10)));
        pairs.remember(2, || key(20));
        // Full: cleared before the next pair.
        pairs.remember(3, || key(30));
        assert_eq!(pairs.flow_of(1, || 0), None);
        // Pair 1 seen again is remembered again, not taken for known.
        pairs.remember(1, || key(12));
        assert_eq!(pairs.flow_of(1, || 0), Some(&key(12)));
        assert_eq!(pairs.flow_of(4, || 3), Some(&key(30)));
    }
}
