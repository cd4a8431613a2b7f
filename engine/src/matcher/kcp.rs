//! Mode 2: KCP. A message is a run of fragments (frg n-1 … 0) named by the sn of its last
//! fragment; copies on two paths match by conv + sn even when they travel in different
//! datagrams. One end observed: ACK segments (which echo sn) give the time to first
//! acknowledgment. The receiver's in-order delivery (sn gaps) gives HOL incidents.
//! Separate sessions, one per path, that carry the same messages (application-level
//! duplication, each session with its own conv) are matched by an application message id
//! ([`crate::KcpSegment::app_msg_id`]) or, without one, once sessions to the server port are
//! seen on two paths, by content ([`crate::KcpSegment::content_hash`], the n-th message of a
//! content on one session with the n-th on another): their messages go to one group flow per
//! server port, while each session keeps its own sn state (ACKs, HOL incidents).

use std::collections::VecDeque;

use crate::capture::Dir;
use crate::config::MatchMode;
use crate::flow::{Flow, FlowKey, FlowRef, Proto};
use crate::hol::{GapTracker, Resend, Transmission};
use crate::input::{KcpCmd, KcpSegment};
use crate::matcher::gaps::GapSel;
use crate::matcher::{forced_mode, mix, server_port, ContentOrder};
use crate::message::{ContentName, MsgId, PastClosure, SightArgs};
use crate::paths::PathIdx;
use crate::sent::SentQueue;
use crate::shared::{Pkt, Shared};

/// ACK datagrams acknowledging later sns since a segment was last sent that make ikcp
/// fast-resend it (`resend` of the common fast profile, `ikcp_nodelay(kcp, 1, 10, 2, 1)`).
const FAST_RESEND_ACKS: u32 = 2;
/// A fast resend leaves with the flush that follows the ACK datagram that triggered it:
/// within one flush interval of the fast profile.
const FAST_RESEND_WINDOW_NS: u64 = 10_000_000;
/// ikcp fast-resends a segment sent at most this many times (`fastlimit`).
const FAST_RESEND_LIMIT: u32 = 5;
/// ACK datagrams remembered per direction for telling fast resends from timeouts.
const ACK_HISTORY: usize = 128;
/// Latest retransmissions remembered per segment (to name the copy that reaches the receiver).
const RESENDS_KEPT: usize = 3;

/// The name of a KCP message kept with its unacknowledged segments: the [`MsgId`] kinds KCP
/// uses, in 16 bytes instead of 32 (one entry per segment in flight).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KcpMsgName {
    /// Direction and sn of the message's last fragment ([`MsgId::Kcp`]).
    Sn {
        /// Client → server.
        up: bool,
        /// sn of the last fragment.
        sn: u32,
    },
    /// Application message id ([`MsgId::App`]).
    App(u64),
    /// Content hash ([`MsgId::Hash`]).
    Hash(u64),
}

impl From<KcpMsgName> for MsgId {
    fn from(n: KcpMsgName) -> Self {
        match n {
            KcpMsgName::Sn { up, sn } => Self::Kcp { up, sn },
            KcpMsgName::App(a) => Self::App(a),
            KcpMsgName::Hash(h) => Self::Hash(h),
        }
    }
}

/// A data segment sent and not yet acknowledged, seen at the sender (64 bytes: one per
/// segment in flight, touched on every send and acknowledgment).
#[derive(Clone, Copy, Debug)]
pub struct Unacked {
    /// Message key.
    pub mkey: u64,
    /// Latest transmission.
    pub last_ns: u64,
    /// Message name (for the record of a late copy).
    pub id: KcpMsgName,
    /// The message's slot when sent.
    pub slot: u32,
    /// Transmissions so far.
    pub sends: u32,
    /// KCP `ts` of the first transmission.
    pub first_ts: u32,
    /// KCP `ts` of the latest retransmissions (the newest at `(sends - 2) % 3`).
    resend_ts: [u32; RESENDS_KEPT],
    /// Their kinds, at the same places.
    resend_kind: [Resend; RESENDS_KEPT],
}

impl Unacked {
    /// A segment first sent at `at` (KCP `ts` `first_ts`), of message `mkey` named `id` in
    /// slot `slot`.
    fn first(mkey: u64, id: KcpMsgName, slot: u32, at: u64, first_ts: u32) -> Self {
        Self {
            mkey,
            last_ns: at,
            id,
            slot,
            sends: 1,
            first_ts,
            resend_ts: [0; RESENDS_KEPT],
            resend_kind: [Resend::Unknown; RESENDS_KEPT],
        }
    }

    /// Which transmission a copy stamped `ts` is, if it is one seen at the sender.
    pub fn transmission(&self, ts: u32) -> Option<Transmission> {
        let kept = (self.sends.saturating_sub(1) as usize).min(RESENDS_KEPT);
        // Newest first: a later retransmission in the same millisecond counts as that one.
        (0..kept)
            .map(|back| (self.sends as usize + 2 * RESENDS_KEPT - 2 - back) % RESENDS_KEPT)
            .find(|&i| self.resend_ts[i] == ts)
            .map(|i| Transmission::Retransmission(self.resend_kind[i]))
            .or((ts == self.first_ts).then_some(Transmission::Original))
    }

    /// Records a retransmission stamped `ts`.
    fn resent(&mut self, ts: u32, kind: Resend, at: u64) {
        let i = (self.sends as usize + RESENDS_KEPT - 1) % RESENDS_KEPT;
        self.resend_ts[i] = ts;
        self.resend_kind[i] = kind;
        self.sends = self.sends.saturating_add(1);
        self.last_ns = at;
    }
}

/// How ikcp decided to retransmit a segment last sent at `last_ns` (`sends` times so far),
/// from the ACK datagrams the sender received (`acks`: arrival, highest sn acknowledged, oldest
/// first): a fast resend follows, within a flush interval, the ACK datagram that made
/// [`FAST_RESEND_ACKS`] acknowledging later sns since that transmission; anything else is the
/// retransmission timeout.
fn resend_kind(acks: &VecDeque<(u64, u32)>, sn: u32, last_ns: u64, sends: u32, now: u64) -> Resend {
    let mut skipping = 0u32;
    let mut newest = None;
    for &(at, max_sn) in acks.iter().rev() {
        if at <= last_ns {
            break;
        }
        if at <= now && (max_sn.wrapping_sub(sn) as i32) > 0 {
            skipping += 1;
            newest = newest.or(Some(at));
        }
    }
    let recent = newest.is_some_and(|at| now.saturating_sub(at) <= FAST_RESEND_WINDOW_NS);
    if sends <= FAST_RESEND_LIMIT && skipping >= FAST_RESEND_ACKS && recent {
        Resend::Fast
    } else {
        Resend::Timeout
    }
}

/// Runs of closed message sns remembered per direction (the oldest are forgotten first).
const MAX_CLOSED_RUNS: usize = 256;

/// Message sns that closed, as sorted disjoint runs `(first, last)`: messages mostly close in
/// sn order, so this is usually one run. Bounded by [`MAX_CLOSED_RUNS`]; past it the oldest
/// run is forgotten (a copy of one of its messages seen later counts as a new message).
#[derive(Clone, Debug, Default)]
pub struct ClosedRuns(smallvec::SmallVec<[(u32, u32); 2]>);

impl ClosedRuns {
    /// Whether message `sn` closed (and is still remembered).
    pub fn contains(&self, sn: u32) -> bool {
        let i = self.0.partition_point(|r| r.1 < sn);
        self.0.get(i).is_some_and(|r| r.0 <= sn)
    }

    /// Notes that message `sn` closed.
    #[inline]
    pub fn insert(&mut self, sn: u32) {
        let runs = self.0.as_mut_slice();
        // The first run ending at or after sn-1 is where sn goes.
        let i = runs.partition_point(|r| r.1.saturating_add(1) < sn);
        match runs.get(i).copied() {
            Some((first, last)) if first <= sn.saturating_add(1) => {
                if sn >= first && sn <= last {
                    return;
                }
                let merged = (first.min(sn), last.max(sn));
                // Joining the next run.
                match runs.get(i + 1).copied() {
                    Some(next) if merged.1.checked_add(1) == Some(next.0) => {
                        runs[i] = (merged.0, next.1);
                        self.0.remove(i + 1);
                    }
                    _ => runs[i] = merged,
                }
            }
            _ => {
                self.0.insert(i, (sn, sn));
                if self.0.len() > MAX_CLOSED_RUNS {
                    self.0.remove(0);
                }
            }
        }
    }
}

/// Per-conversation KCP state.
#[derive(Debug, Default)]
pub struct KcpState {
    /// Data segments seen.
    pub segments: u64,
    /// Retransmitted data segments.
    pub retransmissions: u64,
    /// Highest sn seen.
    pub max_sn: u32,
    /// Latest una.
    pub una: u32,
    /// Latest window.
    pub wnd: u16,
    /// Sent, not yet acknowledged, by (up, path) and sn.
    pub unacked: SentQueue<(bool, PathIdx), Unacked>,
    /// ACK datagrams received by the sender per data direction (index: up as usize): arrival
    /// and highest sn acknowledged, oldest first (bounded by [`ACK_HISTORY`]).
    pub acks_at_sender: [VecDeque<(u64, u32)>; 2],
    /// Whether the receiver's arrivals are observed, per data direction: its ACKs then add
    /// nothing to the receiver's in-order delivery.
    pub receiver_seen: [bool; 2],
    /// Newest message sn (sn of the last fragment) of this conversation's own messages, per
    /// direction (index: up as usize): a message past it was never seen.
    pub newest_msg_sn: [Option<u32>; 2],
    /// The conversation's own messages closed so far, per direction (index: up as usize), by
    /// message sn: a copy of one of them seen later is late, not a new message.
    pub closed_msgs: [ClosedRuns; 2],
    /// Receiver in-order delivery, per direction (index: up as usize).
    pub rx: [GapTracker; 2],
    /// Per direction, at a receiver's capture begun mid-session: the segments delivered from
    /// the first one seen until the receiver's first ACK leaving the capture says (by its
    /// una) whether they lay past a hole.
    begun: [Option<Box<Begun>>; 2],
    /// Newest KCP `ts` seen on data per direction (receiver-side retransmission heuristic).
    pub newest_ts: [Option<u32>; 2],
    /// The flow this conversation's messages belong to when it is one of several per-path
    /// sessions matched by application id or content (`None`: its own).
    pub group: Option<FlowRef>,
    /// In a group matched by content: the order of each session's messages by content
    /// (starts are (0, sn)).
    pub content: ContentOrder,
    /// In a group matched by content: (conv, up, message sn) → the message's key, so that
    /// every fragment of a message and every retransmission is the same message.
    pub content_msgs: crate::FastMap<(u32, bool, u32), u64>,
    /// When the conversation was last found alone (no session to its server port on another
    /// path), remembered on its path: the answer stands while neither the sessions seen nor
    /// the path table changed, and the per-segment look-up is skipped.
    alone: Option<Alone>,
}

/// Segments delivered at a receiver's capture from the first one seen on, before the
/// receiver's first ACK: (sn, bytes, last fragment, when, path) each.
#[derive(Debug, Default)]
struct Begun {
    pieces: Vec<(u64, u64, bool, u64, PathIdx)>,
    /// More were delivered than [`BEGUN_PIECES`]: the start is left as it is.
    overflow: bool,
}

/// Segments kept per direction until the receiver's first ACK.
const BEGUN_PIECES: usize = 16;

/// What [`KcpState::alone`] was found under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Alone {
    server: u16,
    path: PathIdx,
    /// [`Sessions::changes`] then.
    sessions: u64,
    /// [`crate::paths::PathTable::changes`] then.
    paths: u64,
}

/// Messages remembered per group matched by content.
const MAX_CONTENT_MSGS: usize = 8192;

impl KcpState {
    /// Keeps segment `sn` sent on (direction, path) `at` until acknowledged, the oldest kept
    /// segments evicted beyond `max`; returns how many were.
    fn track_unacked(&mut self, at: (bool, PathIdx), sn: u32, u: Unacked, max: usize) -> u64 {
        self.unacked.insert(at, u64::from(sn), u);
        let mut evicted = 0;
        while self.unacked.len() > max {
            self.unacked.pop_first();
            evicted += 1;
        }
        evicted
    }

    /// In a group matched by content: the key of message `msg_sn` of session `conv` in
    /// direction `up`, whose first fragment seen is `name` (the same key for every fragment
    /// and retransmission of the message; the n-th message of a content on one session is a
    /// copy of the n-th on another).
    fn content_message(&mut self, conv: u32, up: bool, msg_sn: u32, name: ContentName) -> u64 {
        let msg = (conv, up, msg_sn);
        if let Some(key) = self.content_msgs.get(&msg) {
            return *key;
        }
        let n = self
            .content
            .occurrence(u64::from(conv), up, name.hash, (0, u64::from(name.sn)));
        let key = mix(&[5, u64::from(up), name.hash, u64::from(name.frg), n]);
        if self.content_msgs.len() >= MAX_CONTENT_MSGS {
            self.content_msgs.clear();
        }
        self.content_msgs.insert(msg, key);
        key
    }
}
/// Sessions remembered per server port for per-path detection.
const MAX_SESSIONS_PER_PORT: usize = 64;

/// The KCP matcher's own state; each conversation's state is kept with its flow
/// ([`KcpState`] in [`Proto::Kcp`]).
#[derive(Debug, Default)]
pub(crate) struct KcpMatcher {
    /// KCP sessions seen per server port, to detect per-path sessions.
    sessions: Sessions,
    /// Scratch for segments acknowledged by una (sn, segment).
    una_done: Vec<(u64, Unacked)>,
}

/// An ACK leaving the receiver of the `data_up` direction (`una`: the first sn it has not
/// received in order). The first one after the capture began mid-session tells where the
/// receiver's in-order data ended when the capture began: below `una`, the sns not seen
/// since had arrived before, and the run of sns seen just below `una` after. So the first
/// segment seen lay past a hole when that point is below it, and the first sns seen were
/// resends of data the receiver had when the point is above them; the receive tracking
/// starts over there, what was seen since delivered again from its arrival.
fn begun_past_hole(shared: &mut Shared, fr: FlowRef, data_up: bool, una: u64) {
    let d = usize::from(data_up);
    let Some(Proto::Kcp(s)) = shared.flows.get_mut(fr).map(|f| &mut f.proto) else {
        return;
    };
    let Some(b) = s.begun[d].take() else {
        return;
    };
    let Some(&(origin, ..)) = b.pieces.first() else {
        return;
    };
    let mut from = una;
    while from > 0 && b.pieces.iter().any(|p| p.0 == from - 1) {
        from -= 1;
    }
    let behind = s.rx[d].next().is_some_and(|n| n < from);
    if b.overflow || !(from < origin || behind) {
        return;
    }
    let sel = GapSel::Kcp { up: data_up };
    shared.gap_restart(fr, sel, from);
    for &(sn, bytes, msg_end, ts_ns, path) in b.pieces.iter().filter(|p| p.0 >= from) {
        shared.gap_deliver(fr, sel, sn, 1, bytes, msg_end, path, ts_ns);
    }
}

impl KcpMatcher {
    /// One KCP segment: matched by conv + sn, or within the group of per-path sessions its
    /// conversation joined; ACKs and una acknowledge, arrivals feed the receiver's gaps.
    pub(crate) fn on_segment(&mut self, shared: &mut Shared, k: &KcpSegment) {
        // Data and window probes ask for an answer; an ACK or a window size told asks for
        // nothing (an idle session's last ACK is no unanswered send).
        let asks = matches!(k.header.cmd, KcpCmd::Push | KcpCmd::Wask);
        let Some(pkt) = shared.packet_turned(&k.meta, false, asks) else {
            return;
        };
        let key = FlowKey::Kcp {
            conv: k.header.conv,
        };
        let fr = shared
            .flows
            .get_or_insert(&key, pkt.ts_ns, || Proto::Kcp(Box::default()));
        let up = pkt.up.unwrap_or(true);
        // Separate sessions per path (application-level duplication): a segment carrying an
        // application id, or an app-id override, puts the conversation's messages into the
        // group of its server port, where copies on other sessions match by that id.
        let forced = forced_mode(
            &shared.cfg,
            (&k.meta.src, &k.meta.dst),
            Some(k.header.conv),
            None,
        );
        shared.remember_tuple(pkt.tuple, || key.clone());
        let seg = Segment {
            push: k.header.cmd == KcpCmd::Push,
            msg_sn: k.header.sn.wrapping_add(u32::from(k.header.frg)),
            up,
            forced: forced.is_some(),
        };
        // The group the session is in, and the group's mode (a session joins by application
        // id, or, without one, by content once sessions to one server port were seen on two
        // paths); a session on its own matches by sn. On its own (mostly), one lookup of the
        // conversation settles it and notes the segment.
        let sessions = &mut self.sessions;
        let paths = &shared.paths;
        // (Whether it joins a group, where that was looked at.)
        let mut joins = None;
        let mut group = None;
        let mut past = PastClosure::Unknown;
        let own = match shared.flows.get_mut(fr) {
            Some(f) => {
                let mut no_note = None;
                let alone = match &mut f.proto {
                    Proto::Kcp(s) => {
                        group = s.group;
                        &mut s.alone
                    }
                    _ => &mut no_note,
                };
                if group.is_none() {
                    joins = Some(joins_group(forced, k, paths, sessions, pkt.path, alone));
                }
                let own = matches!(joins, Some(None));
                if own {
                    past = seg.note(f, MatchMode::KcpSn, true, k, &pkt);
                }
                own
            }
            None => false,
        };
        let (mfr, mode) = if own {
            (fr, MatchMode::KcpSn)
        } else {
            let known_group = group.and_then(|g| Some((g, shared.flows.get_mut(g)?.mode?)));
            let joins = match (known_group, joins) {
                (Some(_), _) => None,
                (None, Some(j)) => j,
                (None, None) => {
                    let (sessions, paths) = (&mut self.sessions, &shared.paths);
                    joins_group(forced, k, paths, sessions, pkt.path, &mut None)
                }
            };
            let (group, mode) = match (known_group, joins) {
                (Some((g, m)), _) => (Some(g), m),
                (None, Some(m)) => {
                    let gkey = FlowKey::KcpGroup {
                        server_port: server_port(&k.meta.src, &k.meta.dst),
                    };
                    let g = shared
                        .flows
                        .get_or_insert(&gkey, pkt.ts_ns, || Proto::Kcp(Box::default()));
                    // A group keeps the mode it was formed with.
                    let mode = shared
                        .flows
                        .get_mut(g)
                        .map_or(m, |f| *f.mode.get_or_insert(m));
                    if let Some(Proto::Kcp(s)) = shared.flows.get_mut(fr).map(|f| &mut f.proto) {
                        s.group = Some(g);
                    }
                    if mode == MatchMode::Content {
                        let server = server_port(&k.meta.src, &k.meta.dst);
                        self.regroup(shared, server, fr, g);
                    }
                    (Some(g), mode)
                }
                (None, None) => (None, MatchMode::KcpSn),
            };
            let mfr = group.unwrap_or(fr);
            if let Some(f) = shared.flows.get_mut(fr) {
                past = seg.note(f, mode, mfr == fr, k, &pkt);
            }
            if mfr != fr {
                if let Some(f) = shared.flows.get_mut(mfr) {
                    f.mode = Some(mode);
                    count_wire(f, k.header.cmd, &pkt);
                }
            }
            (mfr, mode)
        };
        match k.header.cmd {
            KcpCmd::Push => self.push(shared, fr, (mfr, mode), k, &pkt, past),
            KcpCmd::Ack => {
                let identity = || {
                    mix(&[
                        8,
                        u64::from(k.header.conv),
                        u64::from(k.header.sn),
                        u64::from(k.header.una),
                        u64::from(k.header.ts),
                        pkt.tuple,
                    ])
                };
                shared.echo(identity, &pkt, false);
                if pkt.dir == Dir::In {
                    self.ack_at_sender(shared, fr, k, &pkt, !up);
                } else if pkt.dir == Dir::Out {
                    begun_past_hole(shared, fr, !up, u64::from(k.header.una));
                }
            }
            KcpCmd::Wask | KcpCmd::Wins => {}
        }
    }

    /// An ACK segment for `data_up` data received by the data's sender: the sn it names and
    /// those below its una are acknowledged and, where the receiver's arrivals are not observed,
    /// delivered at the receiver (which may fill a gap there).
    fn ack_at_sender(
        &mut self,
        shared: &mut Shared,
        fr: FlowRef,
        k: &KcpSegment,
        pkt: &Pkt,
        data_up: bool,
    ) {
        let d = usize::from(data_up);
        let (path, ts) = (pkt.path, pkt.ts_ns);
        let (sn, una) = (u64::from(k.header.sn), u64::from(k.header.una));
        let mut done = std::mem::take(&mut self.una_done);
        done.clear();
        let mut acked = None;
        let mut msg_flow = fr;
        let mut receiver_seen = true;
        if let Some(Proto::Kcp(s)) = shared.flows.get_mut(fr).map(|f| &mut f.proto) {
            receiver_seen = s.receiver_seen[d];
            let acks = &mut s.acks_at_sender[d];
            // The segments of one ACK datagram share its arrival time.
            match acks.back_mut() {
                Some((at, max_sn)) if *at == ts => {
                    if (k.header.sn.wrapping_sub(*max_sn) as i32) > 0 {
                        *max_sn = k.header.sn;
                    }
                }
                _ => {
                    if acks.len() >= ACK_HISTORY {
                        acks.pop_front();
                    }
                    acks.push_back((ts, k.header.sn));
                }
            }
            msg_flow = s.group.unwrap_or(fr);
            // The sn named is acknowledged first, then those below una.
            acked = s.unacked.remove((data_up, path), sn);
            s.unacked.take_range((data_up, path), 0..una, &mut done);
        }
        if let Some(u) = acked {
            Self::acknowledge(shared, msg_flow, &u, path, ts);
        }
        // Seen at the sender, an ACK says the receiver holds the sn (and, by una, every sn
        // below in order: an ACK datagram may name only its newest segments and leave the
        // older ones to una); where the receiver's own capture shows its arrivals, those are
        // the better clock.
        let sel = GapSel::Kcp { up: data_up };
        if una > 0 && !receiver_seen {
            shared.gap_deliver(fr, sel, 0, una, 0, false, path, ts);
        }
        self.acknowledge_all(shared, msg_flow, done, path, ts);
        // (An sn below una was delivered with those below una just above.)
        if !receiver_seen && sn >= una {
            shared.gap_deliver(fr, sel, sn, 1, 0, false, path, ts);
        }
    }

    /// A data segment of conversation `fr`, whose messages `held` holds: (that flow, its
    /// mode).
    fn push(
        &mut self,
        shared: &mut Shared,
        fr: FlowRef,
        held: (FlowRef, MatchMode),
        k: &KcpSegment,
        pkt: &Pkt,
        past: PastClosure,
    ) {
        let mut pkt = *pkt;
        let (mfr, mode) = held;
        let up = pkt.up.unwrap_or(true);
        let msg_sn = k.header.sn.wrapping_add(u32::from(k.header.frg));
        let content = match (mode, k.content_hash) {
            (MatchMode::Content, Some(h)) if mfr != fr => Self::content_key(shared, mfr, k, up, h),
            _ => None,
        };
        let (mkey, id) = match (content, k.app_msg_id) {
            (Some(named), _) => named,
            (None, Some(app)) if mfr != fr => (mix(&[6, u64::from(up), app]), KcpMsgName::App(app)),
            // In a group, a segment without the id (a later fragment) stays within its session.
            _ if mfr != fr => (
                mix(&[
                    3,
                    u64::from(k.header.conv),
                    u64::from(up),
                    u64::from(msg_sn),
                ]),
                KcpMsgName::Sn { up, sn: msg_sn },
            ),
            // On its own, the conversation's keys are all of this form: direction and sn are
            // the key as they are (the message store hashes it with the flow).
            _ => (
                (u64::from(up) << 32) | u64::from(msg_sn),
                KcpMsgName::Sn { up, sn: msg_sn },
            ),
        };
        // On its own, the message keeps its content, in case the session turns out to be one
        // of several per-path sessions (its open messages then move into their group).
        let named = k
            .content_hash
            .filter(|_| mfr == fr)
            .map(|hash| ContentName {
                hash,
                frg: k.header.frg,
                sn: k.header.sn,
            });
        let r = shared.sight(SightArgs {
            frg: k.header.frg,
            past,
            content: named,
            ..pkt.sighting(mfr, mkey, id.into(), u64::from(k.header.len))
        });
        if r.paired_now {
            shared.repaired(&mut pkt, &k.meta);
        }
        let max_unacked = shared.cfg.max_unacked_per_flow;
        let mut evicted = 0u64;
        let retrans = (r.repeat || r.late) && pkt.dir != Dir::In;
        let mut resent: Option<Resend> = None;
        let retransmitted_wire = retrans && pkt.count_wire;
        if mfr != fr && retransmitted_wire {
            if let Some(f) = shared.flows.get_mut(mfr) {
                f.amp.retransmit += pkt.wire;
            }
        }
        if let Some(f) = shared.flows.get_mut(fr) {
            if mfr == fr && retransmitted_wire {
                f.amp.retransmit += pkt.wire;
            }
            if let Proto::Kcp(s) = &mut f.proto {
                s.segments += 1;
                s.max_sn = s.max_sn.max(k.header.sn);
                if retrans {
                    s.retransmissions += 1;
                }
                if pkt.dir == Dir::Out {
                    if pkt.path < 64 {
                        s.rx[usize::from(up)].sender_paths |= 1 << pkt.path;
                    }
                    let first_send = |slot| Unacked::first(mkey, id, slot, pkt.ts_ns, k.header.ts);
                    if !r.repeat && !r.late {
                        let u = first_send(r.slot.unwrap_or(u32::MAX));
                        evicted += s.track_unacked((up, pkt.path), k.header.sn, u, max_unacked);
                    } else {
                        // A retransmission seen at the sender: what triggered it.
                        let acks = &s.acks_at_sender[usize::from(up)];
                        resent = Some(
                            match s.unacked.get_mut((up, pkt.path), u64::from(k.header.sn)) {
                                Some(u) => {
                                    let kind = resend_kind(
                                        acks,
                                        k.header.sn,
                                        u.last_ns,
                                        u.sends,
                                        pkt.ts_ns,
                                    );
                                    u.resent(k.header.ts, kind, pkt.ts_ns);
                                    kind
                                }
                                None => {
                                    if r.late {
                                        // First seen here after its message closed: its
                                        // acknowledgment may still show a late copy.
                                        evicted += s.track_unacked(
                                            (up, pkt.path),
                                            k.header.sn,
                                            first_send(u32::MAX),
                                            max_unacked,
                                        );
                                    }
                                    Resend::Unknown
                                }
                            },
                        );
                    }
                }
            }
        }
        shared.evicted_unacked += evicted;
        if let Some(kind) = resent {
            shared.gap_resent(
                fr,
                GapSel::Kcp { up },
                u64::from(k.header.sn),
                kind,
                pkt.path,
                pkt.ts_ns,
            );
        } else if retrans {
            // Retransmission seen where the capture's direction is not known.
            shared.gap_retransmit(
                fr,
                GapSel::Kcp { up },
                u64::from(k.header.sn),
                pkt.path,
                pkt.ts_ns,
                "sn",
            );
        }
        if pkt.dir != Dir::Out {
            let msg_end = k.header.frg == 0;
            // Seen only at the receiver: the piece that fills a gap was retransmitted if the
            // sender stamped it after the pieces that overtook it (KCP ts is the send time).
            let unpaired = shared.caps.paired(pkt.capture).is_none();
            let mut retransmitted_fill = false;
            // Whether the receiver of the other direction's data is observed.
            let mut other_seen = false;
            if let Some(f) = shared.flows.get_mut(fr) {
                if let Proto::Kcp(s) = &mut f.proto {
                    let d = usize::from(up);
                    s.receiver_seen[d] = true;
                    other_seen = s.receiver_seen[usize::from(!up)];
                    // Which of the sender's transmissions this copy is (its ts names it).
                    s.rx[d].arriving = s
                        .unacked
                        .get_mut((up, pkt.path), u64::from(k.header.sn))
                        .and_then(|u| u.transmission(k.header.ts));
                    let newest = s.newest_ts[d];
                    let filling = s.rx[d].blocks(u64::from(k.header.sn));
                    retransmitted_fill = unpaired
                        && filling
                        && newest.is_some_and(|n| (k.header.ts.wrapping_sub(n) as i32) > 0);
                    s.newest_ts[d] = Some(match newest {
                        Some(n) if (k.header.ts.wrapping_sub(n) as i32) <= 0 => n,
                        _ => k.header.ts,
                    });
                    if s.rx[d].next().is_none() && s.begun[d].is_none() {
                        // The first segment seen: the session's start, unless the receiver's
                        // first ACK says a hole lay below it.
                        s.begun[d] = Some(Box::default());
                    }
                    if let Some(b) = s.begun[d].as_mut() {
                        if b.pieces.len() < BEGUN_PIECES {
                            let (sn, len) = (u64::from(k.header.sn), u64::from(k.header.len));
                            b.pieces.push((sn, len, msg_end, pkt.ts_ns, pkt.path));
                        } else {
                            b.overflow = true;
                        }
                    }
                }
            }
            if retransmitted_fill {
                shared.gap_retransmit(
                    fr,
                    GapSel::Kcp { up },
                    u64::from(k.header.sn),
                    pkt.path,
                    pkt.ts_ns,
                    "sn",
                );
            }
            let (sn, bytes) = (u64::from(k.header.sn), u64::from(k.header.len));
            let sel = GapSel::Kcp { up };
            shared.gap_deliver(fr, sel, sn, 1, bytes, msg_end, pkt.path, pkt.ts_ns);
            // A data segment's una acknowledges the other direction's data.
            self.una(shared, fr, !up, &pkt, k.header.una, !other_seen);
        }
    }

    /// The key of the message a data segment of a session in group `mfr` (matched by content)
    /// belongs to: its message's first fragment seen names it by content and order.
    fn content_key(
        shared: &mut Shared,
        mfr: FlowRef,
        k: &KcpSegment,
        up: bool,
        content: u64,
    ) -> Option<(u64, KcpMsgName)> {
        let Some(Proto::Kcp(g)) = shared.flows.get_mut(mfr).map(|f| &mut f.proto) else {
            return None;
        };
        let msg_sn = k.header.sn.wrapping_add(u32::from(k.header.frg));
        let name = ContentName {
            hash: content,
            frg: k.header.frg,
            sn: k.header.sn,
        };
        let key = g.content_message(k.header.conv, up, msg_sn, name);
        Some((key, KcpMsgName::Hash(content)))
    }

    /// The group `g` of per-path sessions to server port `server` formed (matched by
    /// content), with session `fr` in it: every session to that port seen so far on its own
    /// joins it, and their open messages move into it, named by content (the first messages
    /// of a session seen before the other path's session are messages of the group, not of a
    /// single-path flow of their own). Counted in [`Shared::regrouped`].
    fn regroup(&mut self, shared: &mut Shared, server: u16, fr: FlowRef, g: FlowRef) {
        let convs: Vec<u32> = self
            .sessions
            .by_port
            .get(&server)
            .map(|v| v.iter().map(|(c, _)| *c).collect())
            .unwrap_or_default();
        let mut members = vec![fr];
        for conv in convs {
            let Some(m) = shared.flows.find(&FlowKey::Kcp { conv }) else {
                continue;
            };
            if m == fr || members.contains(&m) {
                continue;
            }
            if let Some(f) = shared.flows.get_mut(m) {
                if let Proto::Kcp(s) = &mut f.proto {
                    if s.group.is_some() {
                        continue;
                    }
                    s.group = Some(g);
                    members.push(m);
                }
            }
        }
        for m in members {
            Self::move_open_messages(shared, m, g);
            shared.flows.move_closed(m, g);
        }
    }

    /// Moves the open messages of session `m` (on its own until now) into group `g`, named
    /// by content; its sent segments not yet acknowledged follow them.
    fn move_open_messages(shared: &mut Shared, m: FlowRef, g: FlowRef) {
        let Some((conv, paths)) = shared.flows.get_mut(m).and_then(|f| match f.key {
            FlowKey::Kcp { conv } => Some((conv, f.paths_mask)),
            _ => None,
        }) else {
            return;
        };
        let open = shared.msgs.named_by_content(m.uid);
        if open.is_empty() {
            return;
        }
        // Old key → (new key, slot).
        let mut moved: crate::FastMap<u64, (u64, u32, KcpMsgName)> = crate::FastMap::default();
        for (slot, _, id, name) in open {
            let MsgId::Kcp { up, sn: msg_sn } = id else {
                continue;
            };
            let Some(Proto::Kcp(gs)) = shared.flows.get_mut(g).map(|f| &mut f.proto) else {
                return;
            };
            let key = gs.content_message(conv, up, msg_sn, name);
            if let Some(at) = shared.msgs.rename(slot, g, key, MsgId::Hash(name.hash)) {
                shared.regrouped += 1;
                moved.insert(
                    (u64::from(up) << 32) | u64::from(msg_sn),
                    (key, at, KcpMsgName::Hash(name.hash)),
                );
            }
        }
        if let Some(f) = shared.flows.get_mut(g) {
            f.paths_mask |= paths;
        }
        if let Some(Proto::Kcp(s)) = shared.flows.get_mut(m).map(|f| &mut f.proto) {
            for u in s.unacked.values_mut() {
                if let Some((key, slot, id)) = moved.get(&u.mkey) {
                    u.mkey = *key;
                    u.slot = *slot;
                    u.id = *id;
                }
            }
        }
    }

    /// `una` from the receiver of `data_up` data, in packet `pkt`: acknowledges the sns below
    /// it and, with `fills_gaps` (the receiver's arrivals are not observed), fills its gaps.
    fn una(
        &mut self,
        shared: &mut Shared,
        fr: FlowRef,
        data_up: bool,
        pkt: &Pkt,
        una: u32,
        fills_gaps: bool,
    ) {
        let (path, ts) = (pkt.path, pkt.ts_ns);
        let una = u64::from(una);
        // The receiver holds every sn below una in order: that fills any gap there (an ACK
        // datagram may name only its newest segments and leave the older ones to una).
        if una > 0 && fills_gaps {
            let sel = GapSel::Kcp { up: data_up };
            shared.gap_deliver(fr, sel, 0, una, 0, false, path, ts);
        }
        let mut done = std::mem::take(&mut self.una_done);
        done.clear();
        let mut msg_flow = fr;
        if let Some(Proto::Kcp(s)) = shared.flows.get_mut(fr).map(|f| &mut f.proto) {
            s.unacked.take_range((data_up, path), 0..una, &mut done);
            msg_flow = s.group.unwrap_or(fr);
        }
        self.acknowledge_all(shared, msg_flow, done, path, ts);
    }

    /// The segments `done` (taken below una; the engine's buffer, handed back) acknowledged
    /// on `path` at `ts`, oldest first.
    fn acknowledge_all(
        &mut self,
        shared: &mut Shared,
        msg_flow: FlowRef,
        done: Vec<(u64, Unacked)>,
        path: PathIdx,
        ts: u64,
    ) {
        for (_, u) in &done {
            Self::acknowledge(shared, msg_flow, u, path, ts);
        }
        self.una_done = done;
    }

    /// The segment `u` of a message of flow `msg_flow` acknowledged on `path` at `ts`.
    fn acknowledge(shared: &mut Shared, msg_flow: FlowRef, u: &Unacked, path: PathIdx, ts: u64) {
        if let Some(slot) = shared.msgs.ack(msg_flow.uid, u.mkey, u.slot, path, ts) {
            shared.maybe_complete(msg_flow, slot);
        } else if let Some(closed_ns) =
            shared
                .msgs
                .acked_after_close(msg_flow.uid, u.mkey, path, ts)
        {
            shared.late_copy(msg_flow, path, &u.id.into(), ts, closed_ns);
        }
    }
}

/// KCP sessions seen per server port (conv, path), to detect per-path sessions.
#[derive(Debug, Default)]
struct Sessions {
    by_port: crate::FastMap<u16, Vec<(u32, PathIdx)>>,
    /// Sessions remembered so far (never forgotten): an answer of [`Self::per_path`] stands
    /// while this and the path table stay the same.
    changes: u64,
}

impl Sessions {
    /// Whether sessions to `server` other than `conv` were seen on another path than `path`
    /// (remembering `conv` on `path`): separate sessions, one per path.
    fn per_path(
        &mut self,
        paths: &crate::paths::PathTable,
        server: u16,
        conv: u32,
        path: PathIdx,
    ) -> bool {
        let sessions = self.by_port.entry(server).or_default();
        if !sessions.contains(&(conv, path)) && sessions.len() < MAX_SESSIONS_PER_PORT {
            sessions.push((conv, path));
            self.changes += 1;
        }
        sessions
            .iter()
            .any(|(c, p)| *c != conv && paths.canonical(*p) != paths.canonical(path))
    }
}

/// The mode in which a session not (or no longer) in a group joins the group of its server
/// port, if it does: by application id (forced, or the segment carries one), or by content
/// (forced, or sessions to the port were seen on two paths, remembering this one; `alone`
/// keeps the conversation's last "no" while nothing it depends on changed).
#[inline]
fn joins_group(
    forced: Option<MatchMode>,
    k: &KcpSegment,
    paths: &crate::paths::PathTable,
    sessions: &mut Sessions,
    path: PathIdx,
    alone: &mut Option<Alone>,
) -> Option<MatchMode> {
    match forced {
        Some(m @ (MatchMode::AppId | MatchMode::Content)) => Some(m),
        Some(_) => None,
        None if k.app_msg_id.is_some() => Some(MatchMode::AppId),
        // (Every session with content is remembered, so that one seen before the other
        // path's joins the group with it.)
        None if k.content_hash.is_some() => {
            let server = server_port(&k.meta.src, &k.meta.dst);
            let now = Alone {
                server,
                path,
                sessions: sessions.changes,
                paths: paths.changes(),
            };
            if *alone == Some(now) {
                return None;
            }
            let per_path = sessions.per_path(paths, server, k.header.conv, path);
            if per_path {
                *alone = None;
                paths.several_live().then_some(MatchMode::Content)
            } else {
                // (Remembering this session may have changed the sessions.)
                *alone = Some(Alone {
                    sessions: sessions.changes,
                    ..now
                });
                None
            }
        }
        None => None,
    }
}

/// What the prelude notes of a segment on its conversation.
#[derive(Clone, Copy)]
struct Segment {
    push: bool,
    /// sn of the last fragment of its message.
    msg_sn: u32,
    up: bool,
    /// The mode was forced by an override.
    forced: bool,
}

impl Segment {
    /// Notes the segment on its conversation `f`, matched in `mode` (`own`: the conversation
    /// holds its messages, not a group): what it knows of the message's earlier closure.
    #[inline(always)]
    fn note(
        self,
        f: &mut Flow,
        mode: MatchMode,
        own: bool,
        k: &KcpSegment,
        pkt: &Pkt,
    ) -> PastClosure {
        // A message past the newest one of the conversation was never seen; the conversation
        // remembers which of its own messages closed (a group's are named by application id or
        // content, and the message store remembers those).
        let mut past = PastClosure::Unknown;
        f.mode = Some(mode);
        f.forced = self.forced;
        if pkt.path < 64 {
            f.paths_mask |= 1 << pkt.path;
        }
        if let Proto::Kcp(s) = &mut f.proto {
            s.wnd = k.header.wnd;
            s.una = k.header.una;
            if self.push && own {
                let d = usize::from(self.up);
                let newest = &mut s.newest_msg_sn[d];
                past = if newest.is_none_or(|n| self.msg_sn > n) {
                    *newest = Some(self.msg_sn);
                    PastClosure::FlowKnows(false)
                } else {
                    PastClosure::FlowKnows(s.closed_msgs[d].contains(self.msg_sn))
                };
            }
        }
        if own {
            count_wire(f, k.header.cmd, pkt);
        }
        past
    }
}

/// Counts a segment's wire bytes on the flow holding its messages.
#[inline]
fn count_wire(f: &mut Flow, cmd: KcpCmd, pkt: &Pkt) {
    if pkt.count_wire {
        f.amp.wire += pkt.wire;
        match cmd {
            KcpCmd::Push => {}
            KcpCmd::Ack => f.amp.ack += pkt.wire,
            KcpCmd::Wask | KcpCmd::Wins => f.amp.overhead += pkt.wire,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One unacknowledged segment's entry in its ring (sn and [`Unacked`]) fills one 64-byte
    /// cache line at most.
    #[test]
    fn unacked_entry_fits_a_cache_line() {
        assert!(std::mem::size_of::<(u64, Unacked)>() <= 72);
        assert!(std::mem::size_of::<Unacked>() <= 64);
    }

    /// The newest of the kept retransmissions names a copy first; the original by its ts.
    #[test]
    fn transmissions_named_by_ts() {
        let mut u = Unacked::first(1, KcpMsgName::Sn { up: true, sn: 7 }, 0, 10, 100);
        assert_eq!(u.transmission(100), Some(Transmission::Original));
        for (ts, kind) in [
            (200, Resend::Fast),
            (300, Resend::Timeout),
            (300, Resend::Fast),
        ] {
            u.resent(ts, kind, ts.into());
        }
        assert_eq!(u.sends, 4);
        assert_eq!(
            u.transmission(300),
            Some(Transmission::Retransmission(Resend::Fast))
        );
        assert_eq!(
            u.transmission(200),
            Some(Transmission::Retransmission(Resend::Fast))
        );
        u.resent(400, Resend::Timeout, 400);
        // Three kept: the one stamped 200 is forgotten.
        assert_eq!(u.transmission(200), None);
        assert_eq!(MsgId::from(u.id), MsgId::Kcp { up: true, sn: 7 });
    }
}
