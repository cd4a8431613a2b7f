//! Paths (e.g. `eth0`, `eth1`): labels interned to small indices, per-path counters, latency and
//! liveness. Captures at the two ends of one path may carry different labels; once paired, the
//! second label becomes an alias of the first and its counters are folded in.

use crate::FastMap as HashMap;

use crate::input::PathId;
use crate::latency::{WindowedHist, PATH_SIGFIG};
use crate::snapshot::{LatencyKind, TcpRetransmitCounts};
use crate::tail::PathTail;

/// Index of a path in the table.
pub type PathIdx = usize;

/// Most distinct path labels (a flow's paths are a 64-bit mask).
pub const MAX_PATHS: usize = 64;

/// New messages another path must carry while a path carries none before that silence counts
/// toward an outage (a couple of late messages at the end of a run are no traffic).
pub const NEW_COPIES_KEPT: usize = 3;

/// One path's state.
#[derive(Clone, Debug)]
pub struct PathState {
    /// Label.
    pub label: String,
    /// Set when this label was merged into another path.
    pub alias_of: Option<PathIdx>,
    /// Packets seen (sending end only when both ends are captured).
    pub packets: u64,
    /// Wire bytes, same rule.
    pub bytes: u64,
    /// Packets in the current window.
    pub win_packets: u64,
    /// Bytes in the current window.
    pub win_bytes: u64,
    /// Rate over the last closed window.
    pub packets_per_s: f64,
    /// Rate over the last closed window.
    pub bytes_per_s: f64,
    /// Data transmissions (first sends and retransmissions).
    pub data_sends: u64,
    /// Retransmissions among them.
    pub retransmissions: u64,
    /// Closed messages of flows using this path.
    pub expected: u64,
    /// Of those, messages this path did not deliver.
    pub missing: u64,
    /// Latency of this path's copies.
    pub latency: WindowedHist,
    /// This path's part of redundant flows' messages, for the independent-paths prediction.
    pub tail: PathTail,
    /// Samples that were one-way / ack-based.
    pub one_way_samples: u64,
    /// Ack-based samples.
    pub ack_samples: u64,
    /// Last sign of life: something arrived over this path (engine clock).
    pub last_alive_ns: Option<u64>,
    /// Last time something was sent on this path.
    pub last_sent_ns: Option<u64>,
    /// First send since the last arrival: how long the path has left a send unanswered.
    pub unanswered_since_ns: Option<u64>,
    /// Sends since the last arrival.
    pub unanswered_sends: u32,
    /// Last time a copy of a message of a multi-path flow was seen on this path.
    pub last_copy_ns: Option<u64>,
    /// The last times such a copy was the first sighting of its message (new traffic, not a
    /// lagging path catching up), newest first.
    pub new_copies_ns: [Option<u64>; NEW_COPIES_KEPT],
    /// Open outage id.
    pub outage: Option<u64>,
    /// Outages ever opened.
    pub outages: u64,
    /// Duration of the closed outages (ns).
    pub outage_closed_ns: u64,
    /// Kernel TCP retransmissions of the sockets on this path.
    pub tcp_retransmits: TcpRetransmitCounts,
}

impl PathState {
    /// A send at `ts` that asks for an answer (data, a SYN or FIN, a keep-alive): unless
    /// something arrived over the path since, one more send is left unanswered.
    #[inline]
    pub(crate) fn answer_owed(&mut self, ts: u64) {
        if self.last_alive_ns.is_none_or(|a| a < ts) {
            self.unanswered_since_ns.get_or_insert(ts);
            self.unanswered_sends = self.unanswered_sends.saturating_add(1);
        }
    }

    fn new(label: &str, max_latency_us: u64, history: usize) -> Self {
        Self {
            label: label.to_owned(),
            alias_of: None,
            packets: 0,
            bytes: 0,
            win_packets: 0,
            win_bytes: 0,
            packets_per_s: 0.0,
            bytes_per_s: 0.0,
            data_sends: 0,
            retransmissions: 0,
            expected: 0,
            missing: 0,
            latency: WindowedHist::new(max_latency_us, PATH_SIGFIG, history),
            tail: PathTail::new(max_latency_us),
            one_way_samples: 0,
            ack_samples: 0,
            last_alive_ns: None,
            last_sent_ns: None,
            unanswered_since_ns: None,
            unanswered_sends: 0,
            last_copy_ns: None,
            new_copies_ns: [None; NEW_COPIES_KEPT],
            outage: None,
            outages: 0,
            outage_closed_ns: 0,
            tcp_retransmits: TcpRetransmitCounts::default(),
        }
    }

    /// Records a new message first seen on this path at `at`.
    pub fn note_new_copy(&mut self, at: u64) {
        let kept = &mut self.new_copies_ns;
        let i = kept.iter().position(|t| t.is_none_or(|t| t <= at));
        if let Some(i) = i {
            kept[i..].rotate_right(1);
            kept[i] = Some(at);
        }
    }

    /// Whether this path carried at least [`NEW_COPIES_KEPT`] new messages after `since`, the
    /// newest of them at `recent_from` or later: steady new traffic, not a few stragglers.
    pub fn carries_new_traffic(&self, since: u64, recent_from: u64) -> bool {
        self.new_copies_ns[0].is_some_and(|t| t >= recent_from)
            && self.new_copies_ns[NEW_COPIES_KEPT - 1].is_some_and(|t| t > since)
    }

    /// Which latency kind dominates this path's samples.
    pub fn latency_kind(&self) -> LatencyKind {
        if self.ack_samples > self.one_way_samples {
            LatencyKind::AckRtt
        } else {
            LatencyKind::OneWay
        }
    }
}

/// All paths.
#[derive(Clone, Debug, Default)]
pub struct PathTable {
    /// By index.
    pub paths: Vec<PathState>,
    by_label: HashMap<String, PathIdx>,
    /// The labels of the path ids packets carry, by id (`None`: not named yet).
    names: Vec<Option<String>>,
    max_latency_us: u64,
    history: usize,
    /// Observations refused because there were already [`MAX_PATHS`] labels.
    pub refused: u64,
    /// Paths that are not aliases.
    live: usize,
    /// Paths added or made aliases so far.
    changes: u64,
}

impl PathTable {
    /// Empty table.
    pub fn new(max_latency_us: u64, history: usize) -> Self {
        Self {
            max_latency_us,
            history,
            ..Self::default()
        }
    }

    /// Names path id `id` (its first name stays: packets already carry it).
    pub fn name(&mut self, id: PathId, label: String) {
        let i = usize::from(id.0);
        if self.names.len() <= i {
            self.names.resize(i + 1, None);
        }
        self.names[i].get_or_insert(label);
    }

    /// The label of path id `id`, named `path#N` if it never was.
    pub fn label_of(&mut self, id: PathId) -> &str {
        let i = usize::from(id.0);
        if self.names.get(i).is_none_or(Option::is_none) {
            self.name(id, format!("path#{}", id.0));
        }
        self.names
            .get(i)
            .and_then(Option::as_deref)
            .unwrap_or_default()
    }

    /// The canonical index for `label`, creating it; `None` when the table is full.
    pub fn intern(&mut self, label: &str) -> Option<PathIdx> {
        let idx = match self.by_label.get(label) {
            Some(i) => *i,
            None => {
                if self.paths.len() >= MAX_PATHS {
                    self.refused += 1;
                    return None;
                }
                let i = self.paths.len();
                self.paths
                    .push(PathState::new(label, self.max_latency_us, self.history));
                self.live += 1;
                self.changes += 1;
                self.by_label.insert(label.to_owned(), i);
                i
            }
        };
        Some(self.canonical(idx))
    }

    /// Follows aliases to the path a label now means.
    pub fn canonical(&self, mut idx: PathIdx) -> PathIdx {
        for _ in 0..MAX_PATHS {
            match self.paths.get(idx).and_then(|p| p.alias_of) {
                Some(next) => idx = next,
                None => break,
            }
        }
        idx
    }

    /// Label of a path.
    pub fn label(&self, idx: PathIdx) -> &str {
        self.paths.get(idx).map_or("?", |p| p.label.as_str())
    }

    /// Mutable access.
    pub fn get_mut(&mut self, idx: PathIdx) -> Option<&mut PathState> {
        self.paths.get_mut(idx)
    }

    /// Makes `alias` mean `target` from now on and folds its counters into `target`.
    pub fn merge(&mut self, alias: PathIdx, target: PathIdx) {
        if alias == target || alias >= self.paths.len() || target >= self.paths.len() {
            return;
        }
        let a = self.paths[alias].clone();
        let t = &mut self.paths[target];
        t.packets += a.packets;
        t.bytes += a.bytes;
        t.win_packets += a.win_packets;
        t.win_bytes += a.win_bytes;
        t.data_sends += a.data_sends;
        t.retransmissions += a.retransmissions;
        t.outages += a.outages;
        t.outage_closed_ns += a.outage_closed_ns;
        t.tcp_retransmits.add_all(&a.tcp_retransmits);
        t.last_alive_ns = t.last_alive_ns.max(a.last_alive_ns);
        t.last_sent_ns = t.last_sent_ns.max(a.last_sent_ns);
        t.last_copy_ns = t.last_copy_ns.max(a.last_copy_ns);
        for at in a.new_copies_ns.into_iter().flatten() {
            t.note_new_copy(at);
        }
        t.unanswered_since_ns = match (t.unanswered_since_ns, a.unanswered_since_ns) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        };
        if t.last_alive_ns
            .zip(t.unanswered_since_ns)
            .is_some_and(|(l, u)| u <= l)
        {
            t.unanswered_since_ns = None;
        }
        if self.paths[alias].alias_of.replace(target).is_none() {
            self.live -= 1;
        }
        self.changes += 1;
    }

    /// Paths added or made aliases so far: what [`Self::canonical`] and
    /// [`Self::several_live`] answer stays the same while this does.
    #[inline]
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// Whether more than one path is not an alias.
    #[inline]
    pub fn several_live(&self) -> bool {
        self.live >= 2
    }

    /// The paths that are not aliases, mutably.
    pub fn live_mut(&mut self) -> impl Iterator<Item = &mut PathState> + '_ {
        self.paths.iter_mut().filter(|p| p.alias_of.is_none())
    }

    /// Indices of paths that are not aliases.
    pub fn live(&self) -> impl Iterator<Item = PathIdx> + '_ {
        (0..self.paths.len()).filter(|i| self.paths[*i].alias_of.is_none())
    }
}
