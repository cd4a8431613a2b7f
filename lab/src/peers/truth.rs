//! Ground truth kept by the peers themselves: when each message was generated and when each
//! copy arrived at the gateway (first copy wins), independent of tboxscope's capture.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::names::PathId;

/// One message as the receiver saw it.
#[derive(Debug, Clone, Default)]
pub struct Arrival {
    /// CLOCK_MONOTONIC ns of the first copy.
    pub first_mono_ns: u64,
    /// Path of the first copy.
    pub first_path: Option<PathId>,
    /// Copies received, per path (A, B).
    pub copies: [u32; 2],
}

/// Records of one transport.
#[derive(Debug, Clone, Default)]
pub struct TransportTruth {
    /// Generation time (CLOCK_MONOTONIC ns) of each message id, in id order.
    pub sent_mono_ns: Vec<u64>,
    /// Arrivals by message id.
    pub arrivals: HashMap<u64, Arrival>,
    /// Bytes that did not decode as a message.
    pub rejected: u64,
}

/// Shared, thread-safe ground truth of all transports (indexed by `Transport::index`).
#[derive(Debug, Clone, Default)]
pub struct GroundTruth {
    inner: Arc<Mutex<Vec<TransportTruth>>>,
}

impl GroundTruth {
    /// Empty records for `n` transports.
    pub fn new(n: usize) -> Self {
        GroundTruth {
            inner: Arc::new(Mutex::new(vec![TransportTruth::default(); n])),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Vec<TransportTruth>) -> R) -> R {
        let mut g = match self.inner.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut g)
    }

    /// Records that message `id` of `transport` was generated at `mono_ns`.
    pub fn sent(&self, transport: usize, id: u64, mono_ns: u64) {
        self.with(|t| {
            if let Some(tt) = t.get_mut(transport) {
                if tt.sent_mono_ns.len() as u64 == id {
                    tt.sent_mono_ns.push(mono_ns);
                }
            }
        });
    }

    /// Records a copy of message `id` arriving on `path` at `mono_ns`.
    pub fn arrived(&self, transport: usize, id: u64, path: PathId, mono_ns: u64) {
        self.first_arrival(transport, id, path, mono_ns);
        self.copy(transport, id, path);
    }

    /// Records the first complete copy of message `id`, on `path` at `mono_ns`, without counting
    /// a copy (a receiver that sees copies apart from completions counts them with
    /// [`GroundTruth::copy`]).
    pub fn first_arrival(&self, transport: usize, id: u64, path: PathId, mono_ns: u64) {
        self.with(|t| {
            if let Some(tt) = t.get_mut(transport) {
                let a = tt.arrivals.entry(id).or_default();
                if a.first_path.is_none() {
                    a.first_mono_ns = mono_ns;
                    a.first_path = Some(path);
                }
            }
        });
    }

    /// Counts a copy of message `id` received on `path` (its first arrival recorded apart).
    pub fn copy(&self, transport: usize, id: u64, path: PathId) {
        self.with(|t| {
            if let Some(tt) = t.get_mut(transport) {
                let a = tt.arrivals.entry(id).or_default();
                let i = usize::from(path == PathId::B);
                a.copies[i] = a.copies[i].saturating_add(1);
            }
        });
    }

    /// Counts bytes that were not a lab message.
    pub fn rejected(&self, transport: usize) {
        self.with(|t| {
            if let Some(tt) = t.get_mut(transport) {
                tt.rejected += 1;
            }
        });
    }

    /// A copy of everything recorded so far.
    pub fn snapshot(&self) -> Vec<TransportTruth> {
        self.with(|t| t.clone())
    }
}
