//! The state every matcher shares, and the shared steps on it: the packet prelude, sightings,
//! closing messages, windows, outages and records. The KCP and QUIC matchers own their state
//! of their own ([`crate::matcher::kcp::KcpMatcher`], [`crate::matcher::quic::QuicMatcher`]) and
//! are handed this for the rest; datagram and TCP matching keep all their state per flow, so
//! their handlers are further steps on it (`matcher/datagram.rs`, `matcher/tcp.rs`).

use std::collections::VecDeque;

use crate::capture::{CaptureTable, Dir};
use crate::config::{Config, MatchMode};
use crate::flow::{FlowKey, FlowRef, FlowTable};
use crate::hol::IncidentBook;
use crate::input::{CaptureId, Host, PacketMeta};
use crate::latency::{LatencyHist, Remainder, WindowedHist, PATH_SIGFIG};
use crate::message::{
    MessageStore, MsgId, OpenMessage, PastClosure, ResolvedCopy, SightArgs, SightResult,
};
use crate::outage::OutageBook;
use crate::pairs::{side_map_max, AddressPairs};
use crate::paths::{PathIdx, PathTable};
use crate::record::{
    CopyRecord, LateCopyRecord, MessageRecord, NotSent, NotSentCause, Record, WindowRecord,
};
use crate::snapshot::{EventLine, LatencyKind, Severity};
use crate::tail::CombinedTail;
use crate::unsent::{self, Cause};
use crate::FastMap as HashMap;

pub(crate) mod view;

/// Sends left unanswered before silence on a path whose sends are observed is an outage.
const MIN_UNANSWERED_SENDS: u32 = 3;
/// ACKs remembered until seen at the other end of their path.
const MAX_ECHOES: usize = 4096;

/// Accumulators for the current window.
#[derive(Clone, Debug, Default)]
pub(crate) struct WindowAcc {
    pub start: u64,
    pub end: u64,
    pub messages: u64,
    pub on_all: u64,
    pub with_winner: u64,
    /// First arrivals per path index.
    pub wins: Vec<u64>,
    pub wire: u64,
    pub unique: u64,
}

/// A packet's common facts after the prelude (its addresses stay in its [`PacketMeta`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pkt {
    pub path: PathIdx,
    pub capture: CaptureId,
    pub dir: Dir,
    pub raw_ns: u64,
    pub ts_ns: u64,
    pub wire: u64,
    /// Count these wire bytes (not the receiving end's view of a packet already counted).
    pub count_wire: bool,
    /// The capture is paired with the one at the path's other end.
    pub paired: bool,
    pub tuple: u64,
    pub up: Option<bool>,
}

/// What a packet's capture `c` says of it (`up`: client → server): the capture's path, the
/// packet's direction there, the capture's clock offset, whether it is paired, and whether
/// the packet's TTL may place it.
#[inline(always)]
fn capture_facts(
    c: &crate::capture::CaptureState,
    meta: &PacketMeta,
    up: Option<bool>,
) -> (PathIdx, Dir, i64, bool, bool) {
    let dir = c.dir_of_pair(&meta.src, &meta.dst, up);
    (
        c.path,
        dir,
        c.offset_ns,
        c.paired.is_some(),
        c.ttl_may_place(),
    )
}

impl Pkt {
    /// The sighting of the copy of a message this packet carries: `bytes` of message `key`
    /// (named `id`) of flow `flow`; one fragment, nothing known of an earlier closure (set
    /// `frg` and `past` where more is known).
    #[inline]
    pub(crate) fn sighting(&self, flow: FlowRef, key: u64, id: MsgId, bytes: u64) -> SightArgs {
        SightArgs {
            flow,
            key,
            id,
            path: self.path,
            capture: self.capture,
            dir: self.dir,
            raw_ns: self.raw_ns,
            ts_ns: self.ts_ns,
            frg: 0,
            bytes,
            tuple: self.tuple,
            up: self.up,
            past: PastClosure::Unknown,
            content: None,
        }
    }
}

/// The state every matcher shares (see the module documentation); the fields the matchers
/// read and write are `pub(crate)`, the rest only the shared steps here and the views touch.
pub(crate) struct Shared {
    pub(crate) cfg: Config,
    now: u64,
    started: Option<u64>,
    pub(crate) paths: PathTable,
    pub(crate) caps: CaptureTable,
    pub(crate) flows: FlowTable,
    pub(crate) msgs: MessageStore,
    pub(crate) incidents: IncidentBook,
    outages: OutageBook,
    combined: WindowedHist,
    during_outage: LatencyHist,
    /// The combined latencies outside outages: the whole run's less `during_outage`.
    outside_outage: Remainder,
    /// Request → response times (replies carrying the request's application id).
    pub(crate) request_response: LatencyHist,
    one_way_messages: u64,
    ack_messages: u64,
    /// Messages no path delivered, in flows where delivery is observable.
    lost_all: u64,
    /// Redundant flows' messages, for the independent-paths prediction.
    redundant: CombinedTail,
    win: WindowAcc,
    records: VecDeque<Record>,
    dropped_records: u64,
    events: VecDeque<EventLine>,
    observations: u64,
    out_of_order: u64,
    pub(crate) clamped: u64,
    orphan_messages: u64,
    pub(crate) evicted_unacked: u64,
    /// QUIC streams forgotten to stay within a connection's stream bound.
    pub(crate) evicted_streams: u64,
    /// Copies seen (or acknowledged) on a path after their message closed without one there.
    pub(crate) late_copies: u64,
    /// Open messages moved into the group of per-path sessions or connections theirs turned
    /// out to be one of.
    pub(crate) regrouped: u64,
    /// No path can open an outage before this engine time (every path that could is alive
    /// until then): the per-path check is skipped below it.
    outage_check_at: u64,
    /// Scratch space for the copies of the message being closed.
    resolved: Vec<ResolvedCopy>,
    /// Address pair → flow, to attribute overhead packets.
    pairs: AddressPairs,
    /// Packets that carry no message (ACKs) seen at one end of a paired path, by identity:
    /// (capture, capture-clock time), to time them at the other end (bounded).
    echoes: HashMap<u64, (CaptureId, u64)>,
    /// TCP connections whose SYN showed the client on the lower port (the port guess turned
    /// round), by the guessed key; pruned to the flows still tracked.
    pub(crate) tcp_turned: crate::FastSet<FlowKey>,
    /// What `advise` is made from, when collected ([`Config::collect_evidence`]).
    pub(crate) evidence: Option<Box<crate::advice::EvidenceBuilder>>,
}

impl Shared {
    /// The shared state of a new engine.
    pub(crate) fn new(cfg: Config) -> Self {
        Self {
            paths: PathTable::new(cfg.max_latency_us, cfg.window_history),
            caps: CaptureTable::default(),
            flows: FlowTable::new(cfg.max_flows),
            msgs: MessageStore::new(cfg.max_open_messages, cfg.message_timeout_ns),
            incidents: IncidentBook::new(cfg.max_incidents),
            outages: OutageBook::new(cfg.max_incidents),
            combined: WindowedHist::new(cfg.max_latency_us, PATH_SIGFIG, cfg.window_history),
            during_outage: LatencyHist::new(cfg.max_latency_us, PATH_SIGFIG),
            outside_outage: Remainder::default(),
            request_response: LatencyHist::new(cfg.max_latency_us, PATH_SIGFIG),
            one_way_messages: 0,
            ack_messages: 0,
            lost_all: 0,
            redundant: CombinedTail::new(cfg.max_latency_us),
            now: 0,
            started: None,
            win: WindowAcc::default(),
            records: VecDeque::new(),
            dropped_records: 0,
            events: VecDeque::new(),
            observations: 0,
            out_of_order: 0,
            clamped: 0,
            orphan_messages: 0,
            evicted_unacked: 0,
            evicted_streams: 0,
            late_copies: 0,
            regrouped: 0,
            outage_check_at: 0,
            resolved: Vec::new(),
            pairs: AddressPairs::new(side_map_max(&cfg)),
            echoes: HashMap::default(),
            tcp_turned: crate::FastSet::default(),
            evidence: cfg.collect_evidence.then(Box::default),
            cfg,
        }
    }

    /// Counts an observation fed to the engine.
    pub(crate) fn observed(&mut self) {
        self.observations += 1;
    }

    /// The oldest record not yet taken.
    pub(crate) fn next_record(&mut self) -> Option<Record> {
        self.records.pop_front()
    }

    /// Engine time: the newest observation's timestamp (clock offsets applied).
    pub(crate) fn now_ns(&self) -> u64 {
        self.now
    }

    /// [`crate::Engine::tick`].
    pub(crate) fn tick(&mut self, ts_ns: u64) {
        if ts_ns > self.now {
            self.advance(ts_ns);
        }
    }

    /// [`crate::Engine::reset_windows`].
    pub(crate) fn reset_windows(&mut self) {
        for ps in self.paths.live_mut() {
            ps.latency.clear_windows();
            ps.packets_per_s = 0.0;
            ps.bytes_per_s = 0.0;
            ps.win_packets = 0;
            ps.win_bytes = 0;
        }
        self.combined.clear_windows();
        if self.started.is_some() {
            self.open_window(self.now);
        }
    }

    /// Starts a fresh window at `start`.
    fn open_window(&mut self, start: u64) {
        self.win = WindowAcc {
            start,
            end: start.saturating_add(self.cfg.window_ns.max(1)),
            ..WindowAcc::default()
        };
    }

    /// A capture point declared.
    pub(crate) fn on_capture(&mut self, c: crate::input::CapturePoint) {
        // A declaration without a time does not start the clock at the epoch.
        if c.ts_ns != 0 {
            self.advance(c.ts_ns);
        }
        let Some(path) = self.paths.intern(&c.path) else {
            return;
        };
        self.caps.declare(c, path);
        self.apply_stated_pairs();
    }

    pub(crate) fn apply_stated_pairs(&mut self) {
        for (keep, other) in self.caps.stated_pairs() {
            self.pair_paths(keep, other);
        }
    }

    /// Makes the path of capture `other` an alias of the path of capture `keep`.
    pub(crate) fn pair_paths(&mut self, keep: CaptureId, other: CaptureId) {
        let (Some(k), Some(o)) = (self.caps.get(keep), self.caps.get(other)) else {
            return;
        };
        let target = self.paths.canonical(k.path);
        let alias = self.paths.canonical(o.path);
        if target == alias {
            return;
        }
        self.paths.merge(alias, target);
        self.outage_check_at = 0;
        self.msgs.merge_paths(alias, target);
        for (sender, receiver) in self.msgs.seen_at_both(keep, other, &self.caps) {
            self.delay_sample(sender, receiver);
        }
        for f in self.flows.iter_mut() {
            if alias < 64 && f.paths_mask & (1 << alias) != 0 {
                f.paths_mask &= !(1 << alias);
                if target < 64 {
                    f.paths_mask |= 1 << target;
                }
            }
            for c in f.per_path.iter_mut() {
                if c.path == alias {
                    c.path = target;
                }
            }
        }
        let ts = self.now;
        let (a, t) = (
            self.paths.label(alias).to_owned(),
            self.paths.label(target).to_owned(),
        );
        self.event(ts, Severity::Info, || {
            format!("path `{a}` is the far end of `{t}`")
        });
        self.recheck_open_messages();
    }

    /// See [`crate::Engine::capture_ended`].
    pub(crate) fn capture_ended(&mut self, label: &str, last_ns: u64) {
        let threshold = self.cfg.outage_threshold_ns;
        self.outages.capture_ended(label, last_ns, threshold);
    }

    /// Moves engine time forward: closes windows, times out messages, detects outages.
    #[inline(always)]
    pub(crate) fn advance(&mut self, ts: u64) {
        if self.started.is_none() {
            self.started = Some(ts);
            self.open_window(ts);
        }
        if ts > self.now {
            self.now = ts;
        } else if ts.saturating_add(self.cfg.message_timeout_ns) < self.now {
            self.out_of_order += 1;
        }
        let now = self.now;
        // Mostly none of the steps below is due.
        if now >= self.win.end
            || self.msgs.any_due(now)
            || now >= self.outage_check_at
            || self.outages.any_waiting()
        {
            self.advance_due(now);
        }
    }

    /// The steps of [`Shared::advance`] due at `now`, in order.
    #[inline(never)]
    fn advance_due(&mut self, now: u64) {
        if now >= self.win.end {
            self.roll_window();
        }
        if self.msgs.any_due(now) {
            self.close_due(now);
        }
        if now >= self.outage_check_at {
            self.check_outages(now);
        }
        if self.outages.any_waiting() {
            // An outage's record waits for the messages of its time to close: those held for
            // it close up to the longest outage later than the timeout.
            let timeout = self.cfg.message_timeout_ns;
            let settle = timeout
                .saturating_add(self.outages.longest(now))
                .min(self.cfg.max_message_hold_ns.max(timeout));
            for o in self.outages.due(now, settle) {
                self.push_record(Record::Outage(o));
            }
        }
    }

    /// Closes the messages whose timeout passed at `now`, but for those that wait on for a
    /// copy held through an outage: once a path had an outage, a message of a flow on several
    /// paths that misses a copy waits longer than the timeout by the longest outage seen (an
    /// open one as long as it lasted so far, re-checked at least an outage threshold later),
    /// up to `max_message_hold_ns` after its first sighting (closed there, counted).
    #[inline(never)]
    fn close_due(&mut self, now: u64) {
        let stretch = self.outages.longest(now);
        let cfg = &self.cfg;
        let (timeout, step) = (cfg.message_timeout_ns, cfg.outage_threshold_ns.max(1));
        let limit_after = cfg.max_message_hold_ns.max(timeout);
        let mut gave_up = 0u64;
        loop {
            let (flows, caps) = (&self.flows, &self.caps);
            let mut hold = |m: &OpenMessage| -> Option<u64> {
                if stretch == 0 {
                    return None;
                }
                let mask = flows.peek(m.flow)?.paths_mask;
                if mask.count_ones() < 2 || m.complete(mask, caps) {
                    return None;
                }
                let until = m.first_ns.saturating_add(timeout).saturating_add(stretch);
                if until <= now {
                    return None;
                }
                let limit = m.first_ns.saturating_add(limit_after);
                if limit <= now {
                    gave_up += 1;
                    return None;
                }
                Some(until.max(now.saturating_add(step)).min(limit))
            };
            let Some((m, evicted)) = self.msgs.pop_due(now, &mut hold) else {
                break;
            };
            self.close_message(m, evicted);
        }
        self.msgs.hold_limit += gave_up;
    }

    /// The path and reference-clock time of a packet about the traffic rather than of it (a
    /// router's ICMP message), by its capture, when that capture is known; nothing counted.
    pub(crate) fn place_of(&self, meta: &PacketMeta) -> Option<(PathIdx, u64)> {
        let c = self.caps.get(meta.capture)?;
        Some((
            self.paths.canonical(c.path),
            meta.ts_ns.saturating_add_signed(c.offset_ns),
        ))
    }

    /// The common prelude of every packet observation; `None` if the path table is full.
    /// (Inlined in each handler, its result stays in registers.)
    #[inline(always)]
    pub(crate) fn packet(&mut self, meta: &PacketMeta) -> Option<Pkt> {
        self.packet_turned(meta, false, true)
    }

    /// [`Shared::packet`] of a packet whose client is known to hold the lower port when
    /// `turned` (the port guess of its direction turned round); a send that does not
    /// `awaits_answer` (a bare TCP ACK) leaves no answer owed on its path.
    #[inline(always)]
    pub(crate) fn packet_turned(
        &mut self,
        meta: &PacketMeta,
        turned: bool,
        awaits_answer: bool,
    ) -> Option<Pkt> {
        // The capture's facts, in one lookup: a known capture whose own label the packet's
        // path carries (compared once per path id).
        let (up, tuple) = crate::matcher::pair_facts(&meta.src, &meta.dst);
        let up = if turned { up.map(|u| !u) } else { up };
        let paths = &mut self.paths;
        let known = match self.caps.get_mut(meta.capture) {
            Some(c) if c.own_path == Some(meta.path) => Some(c),
            Some(c) if c.point.path == paths.label_of(meta.path) => {
                c.own_path = Some(meta.path);
                Some(c)
            }
            _ => None,
        };
        let (cap_path, mut dir, off, paired, ttl_may_place) = match known {
            Some(c) => {
                c.packets += 1;
                capture_facts(c, meta, up)
            }
            None => {
                let label = self.paths.label_of(meta.path).to_owned();
                let label_path = self.paths.intern(&label)?;
                capture_facts(self.caps.touch(meta.capture, &label, label_path), meta, up)
            }
        };
        if ttl_may_place && meta.ttl != 0 {
            if let Some(d) = self.place_by_ttl(meta, up) {
                dir = d;
            }
        }
        let path = self.paths.canonical(cap_path);
        let ts = meta.ts_ns.saturating_add_signed(off);
        self.advance(ts);
        let count_wire = dir != Dir::In || !paired;
        let wire = u64::from(meta.wire_len);
        if let Some(p) = self.paths.get_mut(path) {
            if count_wire {
                p.packets += 1;
                p.bytes += wire;
                p.win_packets += 1;
                p.win_bytes += wire;
            }
            match dir {
                Dir::Out => {
                    p.last_sent_ns = Some(p.last_sent_ns.map_or(ts, |x| x.max(ts)));
                    if awaits_answer {
                        p.answer_owed(ts);
                    }
                }
                Dir::In | Dir::Unknown => {}
            }
        }
        if count_wire {
            self.win.wire += wire;
        }
        if dir != Dir::Out {
            self.path_alive(path, ts);
        }
        Some(Pkt {
            path,
            capture: meta.capture,
            dir,
            raw_ns: meta.ts_ns,
            ts_ns: ts,
            wire,
            count_wire,
            paired,
            tuple,
            up,
        })
    }

    /// A packet (`up`: client → server) seen at a capture its TTLs may still place: its TTL
    /// noted; when the capture's TTLs place it ([`crate::capture::CaptureState::note_ttl`]),
    /// that is said and the packet's direction there returned.
    #[inline(never)]
    fn place_by_ttl(&mut self, meta: &PacketMeta, up: Option<bool>) -> Option<Dir> {
        let from_client = up?;
        let (at_client, evidence) = self
            .caps
            .get_mut(meta.capture)?
            .note_ttl(from_client, meta.ttl)?;
        self.caps
            .infer_end(meta.capture, at_client, (meta.src, meta.dst, up), evidence)
    }

    /// Something arrived over `path` at `ts`: it is alive; an open outage ends (out of line:
    /// rare).
    #[inline]
    pub(crate) fn path_alive(&mut self, path: PathIdx, ts: u64) {
        let Some(p) = self.paths.get_mut(path) else {
            return;
        };
        p.last_alive_ns = Some(p.last_alive_ns.map_or(ts, |x| x.max(ts)));
        let silent_from = ts
            .saturating_add(self.cfg.outage_threshold_ns)
            .saturating_add(1);
        self.outage_check_at = self.outage_check_at.min(silent_from);
        if p.unanswered_since_ns.is_some_and(|u| u <= ts) {
            p.unanswered_since_ns = None;
            p.unanswered_sends = 0;
        }
        if p.outage.is_some() {
            self.end_outage(path, ts);
        }
    }

    /// The open outage of `path` ends at `ts`, when something arrived over it.
    #[cold]
    #[inline(never)]
    fn end_outage(&mut self, path: PathIdx, ts: u64) {
        let Some(p) = self.paths.get_mut(path) else {
            return;
        };
        if let Some(id) = p.outage.take() {
            let label = p.label.clone();
            self.outages.close(id, ts);
            let dur = self
                .outages
                .newest_first(ts)
                .into_iter()
                .find(|o| o.id == id)
                .map_or(0, |o| o.duration_ns);
            if let Some(p) = self.paths.get_mut(path) {
                p.outage_closed_ns = p.outage_closed_ns.saturating_add(dur);
            }
            self.event(ts, Severity::Warn, || {
                format!(
                    "path {label} back after {:.3} s of outage",
                    dur as f64 / 1e9
                )
            });
        }
    }

    /// Opens an outage on each path silent past the threshold (see below), and notes when
    /// the next check is due: when the path heard from least recently could first be silent
    /// that long (now again if one already is without an outage yet).
    fn check_outages(&mut self, now: u64) {
        let threshold = self.cfg.outage_threshold_ns;
        let mut next = u64::MAX;
        for p in 0..self.paths.paths.len() {
            let Some(st) = self.paths.paths.get(p) else {
                continue;
            };
            if st.alias_of.is_some() || st.outage.is_some() {
                continue;
            }
            let Some(alive) = st.last_alive_ns else {
                continue;
            };
            if now.saturating_sub(alive) <= threshold {
                next = next.min(alive.saturating_add(threshold).saturating_add(1));
                continue;
            }
            // Silent long enough: checked again at every step until an outage opens or it
            // is heard from.
            next = now;
            let other = self.paths.paths.iter().enumerate().find_map(|(q, s)| {
                let ok = q != p
                    && s.alias_of.is_none()
                    && s.outage.is_none()
                    && s.last_alive_ns
                        .is_some_and(|a| now.saturating_sub(a) <= threshold);
                ok.then_some(q)
            });
            // Where the path's sending end is observed, silence alone is no outage (an idle
            // path is silent too): something must have been sent on it and left unanswered —
            // no arrival at the far end, no reply — for the threshold, or it must have stopped
            // carrying copies while another path carries new messages (not a lagging path
            // catching up on old ones).
            let sends_observed = st.last_sent_ns.is_some();
            // (One lost packet on an idle path — a keep-alive — is not an outage: at least
            // three sends must have gone unanswered.)
            let sending = st.unanswered_sends >= MIN_UNANSWERED_SENDS
                && st
                    .unanswered_since_ns
                    .is_some_and(|u| now.saturating_sub(u) > threshold);
            let stopped_copies = st.last_copy_ns.is_some_and(|last| {
                now.saturating_sub(last) > threshold
                    && self.paths.paths.iter().enumerate().any(|(q, s)| {
                        q != p
                            && s.alias_of.is_none()
                            && s.carries_new_traffic(last, now.saturating_sub(threshold))
                    })
            });
            if sends_observed && !sending && !stopped_copies {
                continue;
            }
            let evidence = match (other, sending) {
                (Some(q), _) => format!(
                    "nothing arrived over {} while {} delivered",
                    st.label,
                    self.paths.label(q)
                ),
                (None, true) => format!(
                    "nothing came back over {} (no ACKs) while it kept sending",
                    st.label
                ),
                (None, false) => continue,
            };
            // Without another path delivering, the silence before the first send left
            // unanswered may be an idle path: the outage is known from that send on.
            let start = match (other, st.unanswered_since_ns) {
                (None, Some(since)) => since.max(alive),
                _ => alive,
            };
            let label = st.label.clone();
            let id = self.outages.open(p, &label, start, evidence.clone());
            if let Some(s) = self.paths.get_mut(p) {
                s.outage = Some(id);
                s.outages += 1;
            }
            self.event(now, Severity::Alert, || {
                format!("outage on {label}: {evidence}")
            });
        }
        self.outage_check_at = next;
    }

    /// Adds a sighting of a message copy; handles pairing evidence, clock offsets, retransmission
    /// counters and closes the message when complete.
    pub(crate) fn sight(&mut self, a: SightArgs) -> SightResult {
        let mut r = self.msgs.sight(&a);
        let mut redundant = false;
        if let Some(f) = self.flows.get_mut(a.flow) {
            if a.path < 64 {
                f.paths_mask |= 1 << a.path;
            }
            f.last_ns = f.last_ns.max(a.ts_ns);
            if r.new_message {
                f.opened += 1;
            }
            if a.dir != Dir::In {
                let opened = f.opened;
                f.path_sends(a.path).sent(a.ts_ns, opened);
            }
            // Sessions per path matched by id or content are redundant once a message was
            // carried on every path (before, their copies may not match at all).
            let grouped = matches!(f.mode, Some(MatchMode::AppId | MatchMode::Content));
            redundant = f.paths_mask.count_ones() >= 2 && (!grouped || f.on_all > 0);
        }
        // Copies of flows sent on several paths: a path that stops carrying them while
        // another goes on is silent for a reason (single-path flows say nothing about that).
        if redundant {
            if let Some(p) = self.paths.get_mut(a.path) {
                p.last_copy_ns = Some(p.last_copy_ns.map_or(a.ts_ns, |x| x.max(a.ts_ns)));
                if r.new_message {
                    p.note_new_copy(a.ts_ns);
                }
            }
        }
        if r.late {
            if let Some(closed_ns) = r.late_copy {
                self.late_copy(a.flow, a.path, &a.id, a.ts_ns, closed_ns);
            }
            return r;
        }
        // TCP's data sends are its segments, counted where they are seen (not its messages).
        if a.dir != Dir::In && !matches!(a.id, MsgId::Tcp { .. }) {
            if let Some(p) = self.paths.get_mut(a.path) {
                p.data_sends += 1;
                if r.repeat {
                    p.retransmissions += 1;
                }
            }
        }
        if let Some((other, other_raw)) = r.same_tuple_elsewhere {
            if self.caps.paired(a.capture).is_none() && self.caps.paired(other).is_none() {
                if let Some((keep, alias)) =
                    self.caps
                        .vote((other, other_raw), (a.capture, a.raw_ns), a.up)
                {
                    self.pair_paths(keep, alias);
                    r.paired_now = true;
                }
            }
        }
        if let Some((other, other_raw, other_dir)) = r.other_end {
            if self.caps.paired(a.capture) == Some(other) {
                let (sender, receiver) = match (other_dir, a.dir) {
                    (Dir::Out, _) | (_, Dir::In) => ((other, other_raw), (a.capture, a.raw_ns)),
                    _ => ((a.capture, a.raw_ns), (other, other_raw)),
                };
                self.delay_sample(sender, receiver);
            }
        }
        // A message just opened by an outgoing copy waits at least for that copy's
        // acknowledgment or arrival: it cannot be complete yet.
        let just_sent = r.new_message && a.dir == Dir::Out;
        if let Some(slot) = r.slot.filter(|_| !just_sent) {
            self.maybe_complete(a.flow, slot);
        }
        r
    }

    /// A copy on `path` of message `id` of `flow` seen (or acknowledged) at `ts_ns`, after the
    /// message closed (at `closed_ns`) without a copy there: counted, and recorded where
    /// messages are.
    pub(crate) fn late_copy(
        &mut self,
        flow: FlowRef,
        path: PathIdx,
        id: &MsgId,
        ts_ns: u64,
        closed_ns: u64,
    ) {
        self.late_copies += 1;
        let Some(f) = self.flows.get_mut(flow) else {
            return;
        };
        f.late_copies += 1;
        let rec = LateCopyRecord {
            id: id.text(),
            flow: f.name().to_owned(),
            path: self.paths.label(path).to_owned(),
            seen_ns: ts_ns,
            after_close_us: ts_ns.saturating_sub(closed_ns) / 1_000,
        };
        self.event(ts_ns, Severity::Info, || rec.describe());
        if self.cfg.emit_messages {
            self.push_record(Record::LateCopy(rec));
        }
    }

    /// One delay sample of a paired path; with the first estimate of its clock offset, the
    /// messages that waited for it close.
    fn delay_sample(&mut self, sender: (CaptureId, u64), receiver: (CaptureId, u64)) {
        if self.caps.record_delay(sender, receiver) {
            self.recheck_open_messages();
        }
    }

    /// Closes the open messages that are complete now (after what they waited for: pairing,
    /// a clock offset).
    fn recheck_open_messages(&mut self) {
        for (flow, slot) in self.msgs.open_slots() {
            self.maybe_complete(flow, slot);
        }
    }

    /// A packet that carries no message copy (an ACK, a TCP segment's bytes), named by
    /// `identity` (the same at both ends of a path; computed only where it can count): seen at
    /// both ends of a paired path, its delay is a sample for the clock offset like a copy's
    /// (ACKs travel the other way than data: with data alone there would be samples in one
    /// direction only, and no estimate). With `votes` (a first copy, never a resend, whose
    /// identity no other packet of its connection shares) it is also evidence, as a copy is,
    /// that two captures not yet paired show the same path at its two ends: true when it
    /// paired the packet's own capture (see [`Shared::repaired`]).
    pub(crate) fn echo(&mut self, identity: impl FnOnce() -> u64, pkt: &Pkt, votes: bool) -> bool {
        if !(pkt.paired || votes && self.caps.several_unpaired()) {
            return false;
        }
        let other_end = self.caps.paired(pkt.capture);
        let identity = identity();
        match self.echoes.remove(&identity) {
            Some((first, first_raw)) if other_end.is_none() && first != pkt.capture => {
                if self.caps.paired(first).is_none() {
                    if let Some((keep, alias)) =
                        self.caps
                            .vote((first, first_raw), (pkt.capture, pkt.raw_ns), pkt.up)
                    {
                        self.pair_paths(keep, alias);
                        return true;
                    }
                }
            }
            Some((first, first_raw)) if Some(first) == other_end => {
                let host = |c| self.caps.get(c).map(|s| s.host);
                // The sender: the T-Box for client-to-server packets, the gateway otherwise.
                let sender_host = match pkt.up {
                    Some(true) => Host::Tbox,
                    _ => Host::Gateway,
                };
                let (sender, receiver) = if host(first) == Some(sender_host) {
                    ((first, first_raw), (pkt.capture, pkt.raw_ns))
                } else {
                    ((pkt.capture, pkt.raw_ns), (first, first_raw))
                };
                self.delay_sample(sender, receiver);
            }
            _ => {
                if self.echoes.len() >= MAX_ECHOES {
                    self.echoes.clear();
                }
                self.echoes.insert(identity, (pkt.capture, pkt.raw_ns));
            }
        }
        false
    }

    /// `pkt` again, after its own capture was paired while it was being handled: the path,
    /// direction, clock and pairing the pair gives it (its wire bytes stay counted as they were).
    pub(crate) fn repaired(&self, pkt: &mut Pkt, meta: &PacketMeta) {
        let Some(c) = self.caps.get(pkt.capture) else {
            return;
        };
        pkt.path = self.paths.canonical(c.path);
        pkt.dir = c.dir_of_pair(&meta.src, &meta.dst, pkt.up);
        pkt.ts_ns = pkt.raw_ns.saturating_add_signed(c.offset_ns);
        pkt.paired = c.paired.is_some();
    }

    /// Closes the message held in `slot` (of flow `flow`) now if every path of its flow has a
    /// finished copy.
    pub(crate) fn maybe_complete(&mut self, flow: FlowRef, slot: u32) {
        let mask = match self.flows.get_mut(flow) {
            // A flow seen on one path so far may still show its second path, if the run has
            // another, and captures not yet paired may still turn out to be the two ends of a
            // path (until then a copy seen at one end looks finished by its ACK): while the
            // flow is younger than the message timeout, its messages wait (they close by
            // timeout). With a single path (one capture, or both ends of one path, paired)
            // there is none to wait for.
            Some(f)
                if self.now.saturating_sub(f.first_ns) < self.cfg.message_timeout_ns
                    && ((f.paths_mask.count_ones() < 2 && self.paths.several_live())
                        || (self.cfg.await_pairing && self.caps.several_unpaired())) =>
            {
                return
            }
            Some(f) => f.paths_mask,
            None => return,
        };
        let (caps, resolved) = (&self.caps, &mut self.resolved);
        if let Some(m) = self.msgs.take_at_if(slot, |m| {
            m.flow == flow && m.resolve_if_complete(mask, caps, resolved)
        }) {
            self.close_resolved(m, false);
        }
    }

    /// Resolves and accounts a closed message.
    pub(crate) fn close_message(&mut self, m: OpenMessage, evicted: bool) {
        m.resolve_into(&self.caps, &mut self.resolved);
        self.close_resolved(m, evicted);
    }

    /// Accounts a closed message whose copies were resolved into `self.resolved`.
    #[inline(never)]
    fn close_resolved(&mut self, m: OpenMessage, evicted: bool) {
        let copies = std::mem::take(&mut self.resolved);
        self.account_message(&m, &copies, evicted);
        self.resolved = copies;
        self.msgs.recycle(m.copies);
    }

    fn account_message(&mut self, m: &OpenMessage, copies: &[ResolvedCopy], evicted: bool) {
        let max_us = self.cfg.max_latency_us;
        let Some(flow) = self.flows.get_mut(m.flow) else {
            // Its flow was evicted; an early-closed message is already counted as evicted.
            if !evicted {
                self.orphan_messages += 1;
            }
            return;
        };
        if m.flow_remembers {
            flow.remember_closed(m.id);
        }
        let sum = CopySummary::of(copies);
        let kind = sum.kind();
        let arrived_min = sum.arrivals.lo();
        let sent_min = sum.sends.lo();
        let delivered = arrived_min.is_some();
        let observable = flow.delivered_any || delivered;
        let winner = sum.winner;
        let latency_us = match (arrived_min, sent_min) {
            (Some(a), Some(s)) => a.checked_sub(s).map(|d| d / 1000),
            _ => None,
        };
        let mask = flow.paths_mask;
        let npaths = mask.count_ones();
        // A path carried the message if its copy arrived (or, where arrivals cannot be
        // observed in this flow, if the copy was seen at all).
        let got = |c: &ResolvedCopy| c.arrived.is_some() || (!observable && c.sent.is_some());
        let carried = if observable {
            sum.arrived_mask
        } else {
            sum.seen_mask
        };
        let on_all = npaths >= 2 && carried & mask == mask;
        flow.messages += 1;
        if on_all {
            flow.on_all += 1;
        }
        if npaths >= 2 && sum.sent_mask & mask == mask {
            flow.sent_on_all += 1;
        }
        // Sent on some of the flow's paths only: why each other path had no copy.
        let sent = sum.sent_mask & mask;
        let mut not_sent = Vec::new();
        if npaths >= 2 && sent != 0 && sent != mask {
            let mut left = mask & !sent;
            while left != 0 {
                let p = left.trailing_zeros() as usize;
                left &= left - 1;
                let (opened, start) = (flow.opened, flow.first_ns);
                let cause = unsent::classify(
                    &self.outages,
                    flow.path_sends(p),
                    m.first_ns,
                    self.now,
                    opened,
                    start,
                );
                let pc = flow.path_counters(p);
                match cause {
                    Cause::Outage { .. } => pc.not_sent_while_out += 1,
                    Cause::Unused { .. } => pc.not_sent_while_unused += 1,
                    Cause::InUse => pc.not_sent_while_in_use += 1,
                }
                let grown = {
                    let ps = flow.path_sends(p);
                    match cause {
                        Cause::Outage { from_ns, to_ns } => ps.out_spans.add(from_ns, to_ns),
                        Cause::Unused { from_ns, to_ns } => ps.unused_spans.add(from_ns, to_ns),
                        Cause::InUse => 0,
                    }
                };
                let pc = flow.path_counters(p);
                match cause {
                    Cause::Outage { .. } => pc.out_ns += grown,
                    Cause::Unused { .. } => pc.unused_ns += grown,
                    Cause::InUse => {}
                }
                if self.cfg.emit_messages {
                    not_sent.push((p, cause));
                }
            }
        }
        // (The winner's copy arrived: it is one of these.)
        for c in copies.iter().filter(|c| got(c)) {
            let pc = flow.path_counters(c.path);
            pc.carried += 1;
            if npaths >= 2 && carried.count_ones() == 1 {
                pc.only += 1;
            }
            if winner == Some(c.path) {
                pc.wins += 1;
            }
        }
        if let Some(l) = latency_us {
            flow.record_latency(l, max_us);
        }
        // Spacing of the copies: between arrivals when two or more arrived, else between sends.
        let spacing = if sum.arrivals.n >= 2 {
            sum.arrivals
        } else {
            sum.sends
        };
        if spacing.n >= 2 {
            flow.record_spacing(spacing.spread() / 1000, max_us);
        }
        // (A TCP flow counts its unique payload per segment, messages or not.)
        let tcp = matches!(flow.proto, crate::flow::Proto::Tcp(_));
        if delivered || !observable {
            if !tcp {
                flow.amp.unique += m.bytes;
            }
            self.win.unique += m.bytes;
        }
        if delivered {
            flow.delivered_any = true;
        }
        let flow_name = self.cfg.emit_messages.then(|| flow.name().to_owned());
        if let Some(ev) = self.evidence.as_deref_mut() {
            let paths = &self.paths;
            let uid = flow.uid;
            ev.take(
                (uid, || flow.name().to_owned()),
                (m.first_ns, m.bytes),
                (kind, latency_us),
                copies.iter().map(|c| crate::advice::CopySeen {
                    path: paths.label(c.path),
                    sent: c.sent,
                    arrived: c.arrived.is_some(),
                    latency_us: c.latency_us(),
                }),
            );
        }
        // Per path: latency samples, expected/missing, outage attribution.
        let mut paths_left = mask;
        while paths_left != 0 {
            let p = paths_left.trailing_zeros() as usize;
            paths_left &= paths_left - 1;
            let copy = copies.iter().find(|c| c.path == p);
            let got = carried & (1 << p) != 0;
            if let Some(ps) = self.paths.get_mut(p) {
                ps.expected += 1;
                if !got {
                    ps.missing += 1;
                }
                if npaths >= 2 {
                    ps.tail.record(got, copy.and_then(ResolvedCopy::latency_us));
                }
                if let Some(l) = copy.and_then(ResolvedCopy::latency_us) {
                    if ps.latency.record(l) {
                        self.clamped += 1;
                    }
                    if copy.is_some_and(|c| c.by_ack) {
                        ps.ack_samples += 1;
                    } else {
                        ps.one_way_samples += 1;
                    }
                }
            }
            // A message that came up while this path was out, and that it did not carry or
            // carried only after it came back (a copy held through the outage), was carried by
            // the other paths meanwhile, or lost.
            let arrived = copy.and_then(|c| c.arrived);
            if winner != Some(p) && (delivered || !got) {
                if let Some(o) = self.outages.covering(p, m.first_ns) {
                    let after = arrived.is_some_and(|a| o.end_ns.is_some_and(|e| a > e));
                    if !got || after {
                        if delivered {
                            o.carried_by_others += 1;
                        } else {
                            o.lost += 1;
                        }
                    }
                }
            }
        }
        if observable && !delivered {
            self.lost_all += 1;
        }
        if npaths >= 2 {
            self.redundant.record(latency_us, observable && !delivered);
        }
        if let Some(l) = latency_us {
            if self.combined.record(l) {
                self.clamped += 1;
            }
            if self.outages.any_covering(m.first_ns) {
                self.during_outage.record(l);
            } else {
                self.outside_outage.note(&self.combined.total, l);
            }
            match kind {
                LatencyKind::OneWay => self.one_way_messages += 1,
                LatencyKind::AckRtt => self.ack_messages += 1,
            }
        }
        self.win.messages += 1;
        if on_all {
            self.win.on_all += 1;
        }
        if let Some(w) = winner {
            self.win.with_winner += 1;
            if self.win.wins.len() <= w {
                self.win.wins.resize(w + 1, 0);
            }
            self.win.wins[w] += 1;
        }
        if self.cfg.emit_messages {
            let rec = MessageRecord {
                id: m.id.text(),
                flow: flow_name.unwrap_or_default(),
                first_seen_ns: m.first_ns,
                bytes: m.bytes,
                copies: copies
                    .iter()
                    .map(|c| CopyRecord {
                        path: self.paths.label(c.path).to_owned(),
                        sent: c.sent,
                        arrived: c.arrived,
                        latency_us: c.latency_us(),
                        transmissions: c.transmissions,
                    })
                    .collect(),
                winner: winner.map(|w| self.paths.label(w).to_owned()),
                latency_us,
                latency_kind: kind,
                evicted,
                not_sent_on: not_sent
                    .iter()
                    .map(|&(p, cause)| {
                        let (cause, from_ns, to_ns) = match cause {
                            Cause::Outage { from_ns, to_ns } => {
                                (NotSentCause::Outage, from_ns, to_ns)
                            }
                            Cause::Unused { from_ns, to_ns } => {
                                (NotSentCause::Unused, from_ns, to_ns)
                            }
                            Cause::InUse => (NotSentCause::InUse, m.first_ns, m.first_ns),
                        };
                        NotSent {
                            path: self.paths.label(p).to_owned(),
                            cause,
                            from_ns,
                            to_ns,
                        }
                    })
                    .collect(),
                source: tcp.then_some(crate::record::TcpSource::Wire),
            };
            self.push_record(Record::Message(rec));
        }
    }

    fn roll_window(&mut self) {
        let end = self.win.end;
        let secs = (end.saturating_sub(self.win.start)) as f64 / 1e9;
        let mut per_path = Vec::new();
        let mut win_rates = Vec::new();
        let live: Vec<PathIdx> = self.paths.live().collect();
        for p in live {
            let wins = self.win.wins.get(p).copied().unwrap_or(0);
            let Some(ps) = self.paths.get_mut(p) else {
                continue;
            };
            let pct = ps.latency.roll(end);
            if secs > 0.0 {
                ps.packets_per_s = ps.win_packets as f64 / secs;
                ps.bytes_per_s = ps.win_bytes as f64 / secs;
            }
            ps.win_packets = 0;
            ps.win_bytes = 0;
            per_path.push((ps.label.clone(), pct));
            let rate = if self.win.with_winner > 0 {
                wins as f64 / self.win.with_winner as f64
            } else {
                0.0
            };
            win_rates.push((ps.label.clone(), rate));
        }
        let combined = self.combined.roll(end);
        let rec = WindowRecord {
            start_ns: self.win.start,
            end_ns: end,
            per_path,
            combined,
            messages: self.win.messages,
            on_all_paths: self.win.on_all,
            duplication: ratio(self.win.on_all, self.win.messages),
            win_rates,
            amplification: ratio(self.win.wire, self.win.unique),
        };
        self.push_record(Record::Window(rec));
        let w = self.cfg.window_ns.max(1);
        let skipped = (self.now.saturating_sub(end)) / w;
        if skipped > 0 {
            // Whole windows passed with nothing observed: the current rates are zero.
            for ps in self.paths.live_mut() {
                ps.packets_per_s = 0.0;
                ps.bytes_per_s = 0.0;
            }
        }
        self.open_window(end.saturating_add(skipped.saturating_mul(w)));
    }

    pub(crate) fn push_record(&mut self, r: Record) {
        if self.records.len() >= self.cfg.max_pending_records.max(1) {
            self.records.pop_front();
            self.dropped_records += 1;
        }
        self.records.push_back(r);
    }

    pub(crate) fn event(&mut self, ts_ns: u64, severity: Severity, text: impl FnOnce() -> String) {
        if self.cfg.max_events == 0 {
            return;
        }
        self.events.push_front(EventLine {
            ts_ns,
            severity,
            text: text(),
        });
        self.events.truncate(self.cfg.max_events);
    }

    /// Remembers which flow an address pair belongs to (for overhead packets); `tuple` is the
    /// pair's [`crate::matcher::tuple_hash`].
    #[inline]
    pub(crate) fn remember_tuple(&mut self, tuple: u64, key: impl FnOnce() -> FlowKey) {
        self.pairs.remember(tuple, key);
    }

    /// A packet that carries no message of a known protocol: counted on the flow of its
    /// address pair.
    pub(crate) fn on_overhead(&mut self, o: &crate::input::Overhead) {
        let Some(pkt) = self.packet(&o.meta) else {
            return;
        };
        let key = self
            .pairs
            .flow_of(pkt.tuple, || {
                crate::matcher::tuple_hash(&o.meta.dst, &o.meta.src)
            })
            .cloned();
        if let Some(r) = key.and_then(|k| self.flows.find(&k)) {
            if let Some(f) = self.flows.get_mut(r) {
                if pkt.count_wire {
                    f.amp.wire += pkt.wire;
                    f.amp.overhead += pkt.wire;
                }
            }
        }
    }
}

/// How many copies have a time (of sending, or of arrival), the earliest and the latest.
#[derive(Clone, Copy, Debug)]
struct Times {
    n: u32,
    lo: u64,
    hi: u64,
}

impl Times {
    const NONE: Times = Times {
        n: 0,
        lo: u64::MAX,
        hi: 0,
    };

    fn add(&mut self, t: u64) {
        self.n += 1;
        self.lo = self.lo.min(t);
        self.hi = self.hi.max(t);
    }

    /// The earliest, if any.
    fn lo(&self) -> Option<u64> {
        (self.n > 0).then_some(self.lo)
    }

    /// Between the earliest and the latest.
    fn spread(&self) -> u64 {
        self.hi.saturating_sub(self.lo)
    }
}

/// What a closed message's copies add up to, in one pass over them.
struct CopySummary {
    arrivals: Times,
    sends: Times,
    /// The path whose copy arrived first (the first such copy on a tie).
    winner: Option<PathIdx>,
    /// Paths (below 64) whose copy arrived; seen at all; seen sent.
    arrived_mask: u64,
    seen_mask: u64,
    sent_mask: u64,
    /// Some copy's arrival is its acknowledgment; some other copy has a one-way latency.
    any_by_ack: bool,
    any_one_way: bool,
}

impl CopySummary {
    fn of(copies: &[ResolvedCopy]) -> Self {
        let mut s = CopySummary {
            arrivals: Times::NONE,
            sends: Times::NONE,
            winner: None,
            arrived_mask: 0,
            seen_mask: 0,
            sent_mask: 0,
            any_by_ack: false,
            any_one_way: false,
        };
        for c in copies {
            let bit = if c.path < 64 { 1u64 << c.path } else { 0 };
            if let Some(a) = c.arrived {
                if s.arrivals.lo().is_none_or(|lo| a < lo) {
                    s.winner = Some(c.path);
                }
                s.arrivals.add(a);
                s.arrived_mask |= bit;
            }
            if let Some(t) = c.sent {
                s.sends.add(t);
                s.sent_mask |= bit;
            }
            if c.arrived.is_some() || c.sent.is_some() {
                s.seen_mask |= bit;
            }
            s.any_by_ack |= c.by_ack;
            s.any_one_way |= !c.by_ack && c.latency_us().is_some();
        }
        s
    }

    /// The latency kind of the copies (by acknowledgment or one-way).
    fn kind(&self) -> LatencyKind {
        crate::message::latency_kind(self.any_by_ack, self.any_one_way)
    }
}

/// a / b, 0 when b is 0.
pub(crate) fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}
