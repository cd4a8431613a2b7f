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
}

impl AddressPairs {
    /// Empty, holding at most `max` pairs.
    pub(crate) fn new(max: usize) -> Self {
        Self {
            flows: HashMap::default(),
            max,
        }
    }

    fn full(&self) -> bool {
        self.flows.len() >= self.max
    }

    /// Remembers that `tuple` belongs to the flow `key` (the first flow seen on it stays).
    #[inline]
    pub(crate) fn remember(&mut self, tuple: u64, key: &FlowKey) {
        if self.full() {
            self.flows.clear();
        }
        self.flows.entry(tuple).or_insert_with(|| key.clone());
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
