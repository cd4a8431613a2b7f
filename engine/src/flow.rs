//! Flows: one logical conversation whose messages may travel on several paths (a KCP conv, a
//! QUIC connection, a group of per-path connections, a UDP service, a TCP socket). Bounded: past
//! `max_flows` the least recently active flows are evicted in batches, and counted.

use crate::FastMap as HashMap;
use std::net::SocketAddr;

use crate::config::MatchMode;
use crate::input::ConnId;
use crate::latency::{LatencyHist, FLOW_SIGFIG};
use crate::matcher::kcp::KcpState;
use crate::matcher::quic::QuicState;
use crate::matcher::tcp::TcpState;
use crate::paths::PathIdx;
use crate::unsent::PathSends;

/// What identifies a flow.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum FlowKey {
    /// Identical datagrams to one server port.
    Datagram {
        /// Server (lower) port.
        server_port: u16,
    },
    /// A KCP conversation.
    Kcp {
        /// conv.
        conv: u32,
    },
    /// Separate KCP sessions (one per path) to one server port, matched by application id.
    KcpGroup {
        /// Server port.
        server_port: u16,
    },
    /// One (possibly multipath) QUIC connection.
    Quic {
        /// Connection.
        conn: ConnId,
    },
    /// Separate QUIC connections (one per path) to one server port, matched by content or id.
    QuicGroup {
        /// Server port.
        server_port: u16,
    },
    /// A TCP connection (client: the side that sent the SYN; without one seen, the higher
    /// port's side).
    Tcp {
        /// Client address.
        client: SocketAddr,
        /// Server address.
        server: SocketAddr,
    },
}

/// Recently looked-up flows remembered by [`FlowTable`].
const RECENT_FLOWS: usize = 32;

impl FlowKey {
    /// A cheap number from the key, to spread recently used flows (not a hash, and equal keys
    /// may give different numbers: a remembered flow is used only if it has the key).
    fn quick(&self) -> usize {
        match self {
            FlowKey::Datagram { server_port } | FlowKey::KcpGroup { server_port } => {
                usize::from(*server_port)
            }
            FlowKey::Kcp { conv } => *conv as usize,
            FlowKey::Quic { conn } => conn.0 as usize,
            FlowKey::QuicGroup { server_port } => usize::from(*server_port),
            FlowKey::Tcp { client, .. } => Self::tcp_quick(client),
        }
    }

    /// [`FlowKey::quick`] of the TCP connection of `client`.
    pub(crate) fn tcp_quick(client: &SocketAddr) -> usize {
        usize::from(client.port())
    }

    /// Protocol name.
    pub fn protocol(&self) -> &'static str {
        match self {
            FlowKey::Datagram { .. } => "udp",
            FlowKey::Kcp { .. } | FlowKey::KcpGroup { .. } => "kcp",
            FlowKey::Quic { .. } | FlowKey::QuicGroup { .. } => "quic",
            FlowKey::Tcp { .. } => "tcp",
        }
    }

    /// Human name.
    pub fn name(&self) -> String {
        match self {
            FlowKey::Datagram { server_port } => format!("udp :{server_port}"),
            FlowKey::Kcp { conv } => format!("kcp conv {conv}"),
            FlowKey::KcpGroup { server_port } => {
                format!("kcp :{server_port} (per-path sessions)")
            }
            FlowKey::Quic { conn } => format!("quic {conn}"),
            FlowKey::QuicGroup { server_port } => {
                format!("quic :{server_port} (per-path connections)")
            }
            FlowKey::Tcp { client, server } => format!("tcp {client} → {server}"),
        }
    }
}

/// A path's share of a flow's messages.
#[derive(Clone, Copy, Debug, Default)]
pub struct PathCounters {
    /// Path.
    pub path: PathIdx,
    /// Messages it carried.
    pub carried: u64,
    /// Messages only it carried.
    pub only: u64,
    /// Messages sent on other paths but not this one while it was in an outage.
    pub not_sent_while_out: u64,
    /// How long those outages lasted (ns).
    pub out_ns: u64,
    /// Messages sent on other paths but not this one while the sender was not using it.
    pub not_sent_while_unused: u64,
    /// How long the sender left it unused around those messages (ns).
    pub unused_ns: u64,
    /// Messages sent on other paths but not this one while the sender used it.
    pub not_sent_while_in_use: u64,
    /// First arrivals.
    pub wins: u64,
}

/// Byte counters for amplification.
#[derive(Clone, Copy, Debug, Default)]
pub struct Amp {
    /// All wire bytes.
    pub wire: u64,
    /// Unique payload bytes delivered.
    pub unique: u64,
    /// Retransmitted bytes (wire).
    pub retransmit: u64,
    /// ACK-only packets (wire).
    pub ack: u64,
    /// FEC parity / other overhead (wire).
    pub overhead: u64,
}

impl Amp {
    /// Adds `other`'s counts.
    pub fn add(&mut self, other: &Amp) {
        self.wire += other.wire;
        self.unique += other.unique;
        self.retransmit += other.retransmit;
        self.ack += other.ack;
        self.overhead += other.overhead;
    }

    /// wire / unique, 0 when nothing delivered.
    pub fn ratio(&self) -> f64 {
        if self.unique == 0 {
            0.0
        } else {
            self.wire as f64 / self.unique as f64
        }
    }
}

/// Protocol-specific state.
#[derive(Debug)]
pub enum Proto {
    /// Plain datagrams.
    Datagram {
        /// Datagrams seen.
        datagrams: u64,
        /// Requests waiting for their response: application id → first send (engine clock).
        requests: HashMap<u64, u64>,
    },
    /// KCP.
    Kcp(Box<KcpState>),
    /// QUIC (one connection, or a group of per-path connections).
    Quic(Box<QuicState>),
    /// TCP.
    Tcp(Box<TcpState>),
}

/// One flow.
#[derive(Debug)]
pub struct Flow {
    /// Unique id (never reused, also across evictions).
    pub uid: u64,
    /// Key.
    pub key: FlowKey,
    /// Matching mode.
    pub mode: Option<MatchMode>,
    /// Whether the mode was forced.
    pub forced: bool,
    /// First activity.
    pub first_ns: u64,
    /// Last activity.
    pub last_ns: u64,
    /// Paths this flow was seen on (bit per path index).
    pub paths_mask: u64,
    /// Closed messages.
    pub messages: u64,
    /// Carried on every path of the flow (≥ 2 paths).
    pub on_all: u64,
    /// Seen sent on every path of the flow (≥ 2 paths; where sends are captured).
    pub sent_on_all: u64,
    /// Copies seen (or acknowledged) on a path after their message closed without one there.
    pub late_copies: u64,
    /// Per path.
    pub per_path: Vec<PathCounters>,
    /// Messages opened (what the sender's copies per path are counted against).
    pub opened: u64,
    /// The sender's copies per path.
    pub sends: Vec<PathSends>,
    /// Combined latency (lazily allocated).
    pub latency: Option<Box<LatencyHist>>,
    /// Copy spacing (lazily allocated).
    pub spacing: Option<Box<LatencyHist>>,
    /// Bytes.
    pub amp: Amp,
    /// HOL incidents opened.
    pub incidents: u64,
    /// Some copy of some message was ever seen arriving (or acknowledged).
    pub delivered_any: bool,
    /// Protocol state.
    pub proto: Proto,
    /// The key's name, made once (it names every message record and incident of the flow):
    /// read through [`Flow::name`], or filled the same way where the flow's other fields are
    /// borrowed apart.
    pub(crate) name: Option<String>,
}

impl Flow {
    /// The flow's name ([`FlowKey::name`]).
    pub fn name(&mut self) -> &str {
        self.name.get_or_insert_with(|| self.key.name())
    }

    /// The sender's copies on `path`, created on first use.
    pub fn path_sends(&mut self, path: PathIdx) -> &mut PathSends {
        let pos = match self.sends.iter().position(|c| c.path == path) {
            Some(p) => p,
            None => {
                self.sends.push(PathSends::new(path));
                self.sends.len() - 1
            }
        };
        &mut self.sends[pos]
    }

    /// Counters for `path`, created on first use.
    #[inline]
    pub fn path_counters(&mut self, path: PathIdx) -> &mut PathCounters {
        let pos = match self.per_path.iter().position(|c| c.path == path) {
            Some(p) => p,
            None => {
                self.per_path.push(PathCounters {
                    path,
                    ..PathCounters::default()
                });
                self.per_path.len() - 1
            }
        };
        &mut self.per_path[pos]
    }

    /// Notes that its message `id` closed, where the flow remembers its closed messages itself
    /// ([`crate::message::PastClosure::FlowKnows`]: a KCP conversation's own messages).
    #[inline]
    pub fn remember_closed(&mut self, id: crate::message::MsgId) {
        if let (Proto::Kcp(s), crate::message::MsgId::Kcp { up, sn }) = (&mut self.proto, id) {
            s.closed_msgs[usize::from(up)].insert(sn);
        }
    }

    /// Records a combined latency sample.
    #[inline]
    pub fn record_latency(&mut self, us: u64, max_us: u64) {
        record_in(&mut self.latency, us, max_us);
    }

    /// Records a copy-spacing sample.
    pub fn record_spacing(&mut self, us: u64, max_us: u64) {
        record_in(&mut self.spacing, us, max_us);
    }

    /// Number of paths seen.
    pub fn path_count(&self) -> u32 {
        self.paths_mask.count_ones()
    }

    /// Moves the messages this flow closed on its own into `group`, the group of per-path
    /// sessions (or connections) it turned out to be one of: the group's row counts them
    /// (those of a flow seen on one path as carried only by it), and this flow, left without
    /// messages of its own, is reported as part of the group.
    pub fn move_closed_into(&mut self, group: &mut Flow) {
        if self.messages == 0 {
            return;
        }
        let single_path = self.path_count() == 1;
        group.messages += std::mem::take(&mut self.messages);
        group.on_all += std::mem::take(&mut self.on_all);
        group.sent_on_all += std::mem::take(&mut self.sent_on_all);
        group.late_copies += std::mem::take(&mut self.late_copies);
        group.delivered_any |= self.delivered_any;
        for mut c in std::mem::take(&mut self.per_path) {
            if single_path {
                c.only = c.carried;
            }
            let PathCounters {
                path,
                carried,
                only,
                not_sent_while_out,
                out_ns,
                not_sent_while_unused,
                unused_ns,
                not_sent_while_in_use,
                wins,
            } = c;
            let g = group.path_counters(path);
            for (sum, n) in [
                (&mut g.carried, carried),
                (&mut g.only, only),
                (&mut g.not_sent_while_out, not_sent_while_out),
                (&mut g.out_ns, out_ns),
                (&mut g.not_sent_while_unused, not_sent_while_unused),
                (&mut g.unused_ns, unused_ns),
                (&mut g.not_sent_while_in_use, not_sent_while_in_use),
                (&mut g.wins, wins),
            ] {
                *sum += n;
            }
        }
        for (mine, theirs) in [
            (self.latency.take(), &mut group.latency),
            (self.spacing.take(), &mut group.spacing),
        ] {
            match (mine, theirs) {
                (Some(h), Some(g)) => {
                    g.merge(&h);
                }
                (Some(h), slot) => *slot = Some(h),
                (None, _) => {}
            }
        }
    }
}

/// All flows, bounded.
#[derive(Debug, Default)]
pub struct FlowTable {
    slab: Vec<Option<Flow>>,
    free: Vec<usize>,
    index: HashMap<FlowKey, usize>,
    next_uid: u64,
    max: usize,
    /// Slots of flows looked up recently, direct-mapped by [`FlowKey::quick`]: consecutive
    /// packets mostly belong to a few flows (a slot is used only if its flow has the key; a
    /// QUIC connection's label, shared by its packets, compares by pointer).
    recent: [usize; RECENT_FLOWS],
    /// Flows evicted so far.
    pub evicted: u64,
}

/// Where a flow lives: slab slot plus uid to detect reuse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowRef {
    /// Slot.
    pub slot: usize,
    /// Uid.
    pub uid: u64,
}

impl FlowTable {
    /// Empty, holding at most `max` flows.
    pub fn new(max: usize) -> Self {
        Self {
            max: max.max(1),
            ..Self::default()
        }
    }

    /// The recent flow of slot `quick` if its key passes `is`, its activity time moved to `now`.
    #[inline]
    fn recent_hit(
        &mut self,
        quick: usize,
        now: u64,
        is: impl Fn(&FlowKey) -> bool,
    ) -> Option<FlowRef> {
        let slot = self.recent[quick];
        match self.slab.get_mut(slot) {
            Some(Some(f)) if is(&f.key) => {
                f.last_ns = f.last_ns.max(now);
                Some(FlowRef { slot, uid: f.uid })
            }
            _ => None,
        }
    }

    /// The flow whose key passes `is`, found among the recent ones by `quick` (its key's
    /// [`FlowKey::quick`]), else the flow for `key()`, created with `proto()` if new: the key
    /// is made only when the flow was not looked up recently.
    pub(crate) fn get_or_insert_with(
        &mut self,
        quick: usize,
        is: impl Fn(&FlowKey) -> bool,
        key: impl FnOnce() -> FlowKey,
        now: u64,
        proto: impl FnOnce() -> Proto,
    ) -> FlowRef {
        match self.recent_hit(quick % RECENT_FLOWS, now, is) {
            Some(r) => r,
            None => self.get_or_insert(&key(), now, proto),
        }
    }

    /// The flow for `key`, created with `proto()` if new (evicting old flows when full).
    pub fn get_or_insert(
        &mut self,
        key: &FlowKey,
        now: u64,
        proto: impl FnOnce() -> Proto,
    ) -> FlowRef {
        let quick = key.quick() % RECENT_FLOWS;
        if let Some(r) = self.recent_hit(quick, now, |k| k == key) {
            return r;
        }
        if let Some(&slot) = self.index.get(key) {
            if let Some(Some(f)) = self.slab.get_mut(slot) {
                f.last_ns = f.last_ns.max(now);
                self.recent[quick] = slot;
                return FlowRef { slot, uid: f.uid };
            }
        }
        if self.index.len() >= self.max {
            self.evict_batch();
        }
        let uid = self.next_uid;
        self.next_uid += 1;
        let flow = Flow {
            uid,
            key: key.clone(),
            mode: None,
            forced: false,
            first_ns: now,
            last_ns: now,
            paths_mask: 0,
            messages: 0,
            on_all: 0,
            sent_on_all: 0,
            late_copies: 0,
            per_path: Vec::new(),
            opened: 0,
            sends: Vec::new(),
            latency: None,
            spacing: None,
            amp: Amp::default(),
            incidents: 0,
            delivered_any: false,
            proto: proto(),
            name: None,
        };
        let slot = match self.free.pop() {
            Some(s) => {
                self.slab[s] = Some(flow);
                s
            }
            None => {
                self.slab.push(Some(flow));
                self.slab.len() - 1
            }
        };
        self.index.insert(key.clone(), slot);
        FlowRef { slot, uid }
    }

    /// Looks up a flow that may have been evicted since.
    pub fn get_mut(&mut self, r: FlowRef) -> Option<&mut Flow> {
        match self.slab.get_mut(r.slot) {
            Some(Some(f)) if f.uid == r.uid => Some(f),
            _ => None,
        }
    }

    /// [`Flow::move_closed_into`] between two flows of the table (both still tracked).
    pub fn move_closed(&mut self, member: FlowRef, group: FlowRef) {
        if member == group || self.get_mut(member).is_none() || self.get_mut(group).is_none() {
            return;
        }
        let Some(mut m) = self.slab.get_mut(member.slot).and_then(Option::take) else {
            return;
        };
        if let Some(g) = self.get_mut(group) {
            m.move_closed_into(g);
        }
        if let Some(slot) = self.slab.get_mut(member.slot) {
            *slot = Some(m);
        }
    }

    /// [`FlowTable::get_mut`] for reading.
    pub fn peek(&self, r: FlowRef) -> Option<&Flow> {
        match self.slab.get(r.slot) {
            Some(Some(f)) if f.uid == r.uid => Some(f),
            _ => None,
        }
    }

    /// Gives flow `r` the key `key` (its name made anew), unless another flow has it; whether
    /// it did.
    pub fn rekey(&mut self, r: FlowRef, key: FlowKey) -> bool {
        if self.index.contains_key(&key) {
            return false;
        }
        let Some(f) = self.get_mut(r) else {
            return false;
        };
        let old = std::mem::replace(&mut f.key, key.clone());
        f.name = None;
        self.index.remove(&old);
        self.index.insert(key, r.slot);
        true
    }

    /// Looks up by key.
    pub fn find(&self, key: &FlowKey) -> Option<FlowRef> {
        let slot = *self.index.get(key)?;
        let f = self.slab.get(slot)?.as_ref()?;
        Some(FlowRef { slot, uid: f.uid })
    }

    /// Evicts the least recently active eighth (at least one).
    fn evict_batch(&mut self) {
        let mut ages: Vec<(u64, usize)> = self
            .slab
            .iter()
            .enumerate()
            .filter_map(|(i, f)| f.as_ref().map(|f| (f.last_ns, i)))
            .collect();
        if ages.is_empty() {
            return;
        }
        let n = (ages.len() / 8).max(1);
        ages.select_nth_unstable(n - 1);
        for (_, slot) in ages.into_iter().take(n) {
            if let Some(f) = self.slab.get_mut(slot).and_then(Option::take) {
                self.index.remove(&f.key);
                self.free.push(slot);
                self.evicted += 1;
            }
        }
    }

    /// All live flows.
    pub fn iter(&self) -> impl Iterator<Item = &Flow> {
        self.slab.iter().filter_map(Option::as_ref)
    }

    /// All live flows, mutable.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Flow> {
        self.slab.iter_mut().filter_map(Option::as_mut)
    }

    /// Number of live flows.
    pub fn len(&self) -> usize {
        self.index.len()
    }
}

/// Records `us` in a flow histogram, made on its first sample.
#[inline]
fn record_in(slot: &mut Option<Box<LatencyHist>>, us: u64, max_us: u64) {
    match slot {
        Some(h) => h.record(us),
        None => new_hist(slot, max_us).record(us),
    };
}

/// A flow histogram made on its first sample (out of line: once per flow).
#[cold]
fn new_hist(slot: &mut Option<Box<LatencyHist>>, max_us: u64) -> &mut LatencyHist {
    slot.insert(Box::new(LatencyHist::new(max_us, FLOW_SIGFIG)))
}
