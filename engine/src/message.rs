//! Messages in flight: every sighting of a copy (path, capture, time, fragments) until the
//! message is complete or times out; then it is resolved into copies with send/arrival times.
//! Bounded: past `max_open` the oldest message is closed early and counted.

use std::collections::hash_map::Entry as MapEntry;

use crate::capture::{CaptureTable, Dir};
use crate::flow::FlowRef;
use crate::input::CaptureId;
use crate::paths::PathIdx;
use crate::snapshot::LatencyKind;
use crate::FastMap;

/// How a message is named in records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MsgId {
    /// Payload / content hash.
    Hash(u64),
    /// KCP: direction and sn of the message's last fragment.
    Kcp {
        /// Client → server.
        up: bool,
        /// sn of the last fragment (frg 0).
        sn: u32,
    },
    /// QUIC stream byte range.
    Stream {
        /// Client → server.
        up: bool,
        /// Stream id.
        stream: u64,
        /// First byte.
        start: u64,
        /// One past the last byte.
        end: u64,
    },
    /// Application message id.
    App(u64),
    /// A TCP byte range (a message the capture cut from the byte stream by its framing).
    Tcp {
        /// Client → server.
        up: bool,
        /// Sequence number of its first byte.
        seq: u32,
        /// Its length.
        len: u32,
    },
}

impl MsgId {
    /// The id as its records write it ([`std::fmt::Display`]), made in one allocation (the
    /// longest, a QUIC stream range, is under 80 bytes).
    pub fn text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::with_capacity(80);
        let _ = write!(s, "{self}");
        s
    }
}

impl std::fmt::Display for MsgId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = |up: bool| if up { "up" } else { "down" };
        match self {
            MsgId::Hash(h) => write!(f, "hash {h:016x}"),
            MsgId::Kcp { up, sn } => write!(f, "{} sn {sn}", d(*up)),
            // A whole unidirectional stream.
            MsgId::Stream {
                up,
                stream,
                start: 0,
                end: u64::MAX,
            } => write!(f, "{} stream {stream}", d(*up)),
            MsgId::Stream {
                up,
                stream,
                start,
                end,
            } => write!(f, "{} stream {stream} @ {start}..{end}", d(*up)),
            MsgId::App(id) => write!(f, "app id {id}"),
            MsgId::Tcp { up, seq, len } => {
                write!(f, "{} seq {seq}..{}", d(*up), seq.wrapping_add(*len))
            }
        }
    }
}

/// One capture's sighting of a copy.
#[derive(Clone, Copy, Debug)]
pub struct Sighting {
    /// Capture.
    pub capture: CaptureId,
    /// Direction at that capture.
    pub dir: Dir,
    /// First time (capture clock).
    pub first_ns: u64,
    /// When the last missing fragment was first seen (capture clock).
    pub complete_ns: u64,
    /// Fragments seen (bit per frg).
    pub frags: u64,
    /// Times seen (retransmissions + 1 for the first fragment).
    pub count: u32,
    /// Hash of (src, dst) to pair captures.
    pub tuple: u64,
    /// Client → server, when known (to re-judge the direction after inferences).
    pub up: Option<bool>,
}

impl Sighting {
    /// Direction as judged now.
    pub fn dir_now(&self, caps: &CaptureTable) -> Dir {
        caps.dir_by_role(self.capture, self.up).unwrap_or(self.dir)
    }
}

/// A copy's sightings, one per capture: inline up to the two ends of a path.
pub type Sightings = smallvec::SmallVec<[Sighting; 2]>;

/// One path's copy.
#[derive(Clone, Debug)]
pub struct CopyState {
    /// Path.
    pub path: PathIdx,
    /// Sightings per capture (usually one or two, held inline).
    pub sightings: Sightings,
    /// First acknowledgment (engine clock, ack_delay removed).
    pub ack_ns: Option<u64>,
}

/// A message not yet closed.
#[derive(Clone, Debug)]
pub struct OpenMessage {
    /// Flow.
    pub flow: FlowRef,
    /// Key within the flow.
    pub key: u64,
    /// Name.
    pub id: MsgId,
    /// First sighting (engine clock).
    pub first_ns: u64,
    /// Payload bytes (each fragment once).
    pub bytes: u64,
    /// Fragments the message has (max frg + 1).
    pub nfrag: u8,
    /// Fragments seen on any path.
    pub frag_union: u64,
    /// Copies.
    pub copies: Vec<CopyState>,
    /// Its flow remembers its closure (see [`PastClosure::FlowKnows`]), not the store.
    pub flow_remembers: bool,
    /// The content of its first fragment seen, where a KCP session on its own may later turn
    /// out to be one of several per-path sessions (its messages are then named by content).
    pub content: Option<ContentName>,
    /// It waited past its timeout for a path in (or after) an outage.
    pub held: bool,
}

/// The content a message's first fragment seen carried, and where: what names the message
/// among per-path sessions matched by content.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContentName {
    /// Content hash of the fragment's payload.
    pub hash: u64,
    /// The fragment's countdown.
    pub frg: u8,
    /// The fragment's sn.
    pub sn: u32,
}

/// One sighting to add.
#[derive(Clone, Copy, Debug)]
pub struct SightArgs {
    /// Flow.
    pub flow: FlowRef,
    /// Key.
    pub key: u64,
    /// Name.
    pub id: MsgId,
    /// Path.
    pub path: PathIdx,
    /// Capture.
    pub capture: CaptureId,
    /// Direction at the capture.
    pub dir: Dir,
    /// Capture-clock time.
    pub raw_ns: u64,
    /// Engine-clock time.
    pub ts_ns: u64,
    /// Fragment countdown (0 for single-fragment messages).
    pub frg: u8,
    /// Payload bytes of this fragment.
    pub bytes: u64,
    /// Hash of (src, dst).
    pub tuple: u64,
    /// Client → server, when known.
    pub up: Option<bool>,
    /// What the caller knows of an earlier closure of this key.
    pub past: PastClosure,
    /// The fragment's content, where the message may later be named by it.
    pub content: Option<ContentName>,
}

/// Whether a message key not open now was closed before, as far as the caller knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PastClosure {
    /// Unknown: the store remembers recently closed keys and looks this one up.
    Unknown,
    /// No message of this key was ever seen in the flow (e.g. a KCP sn past the
    /// conversation's newest): it cannot be among the recently closed keys.
    NeverSeen,
    /// The flow remembers its own closed keys (the store then does not): whether this key's
    /// message closed.
    FlowKnows(bool),
}

/// What a sighting was.
#[derive(Clone, Copy, Debug, Default)]
pub struct SightResult {
    /// It started a new message.
    pub new_message: bool,
    /// This capture had already seen this fragment: a retransmission (or duplicate).
    pub repeat: bool,
    /// The message was already closed (late copy or retransmission after close).
    pub late: bool,
    /// First sighting of this copy at a second capture: the other capture and its first time.
    pub other_end: Option<(CaptureId, u64, Dir)>,
    /// Another capture saw the same copy with the same addresses (pairing evidence).
    pub same_tuple_elsewhere: Option<(CaptureId, u64)>,
    /// Where the open message is held ([`MessageStore::at`]), unless the sighting was late.
    pub slot: Option<u32>,
    /// Late, and the first copy of the closed message seen on its path: a late copy, with
    /// when its message closed (engine clock, to the millisecond).
    pub late_copy: Option<u64>,
    /// It paired its capture with the far end's: the packet's path, direction and clock are
    /// the pair's from now on.
    pub paired_now: bool,
}

/// A resolved copy.
#[derive(Clone, Copy, Debug)]
pub struct ResolvedCopy {
    /// Path.
    pub path: PathIdx,
    /// Send time (engine clock).
    pub sent: Option<u64>,
    /// Arrival time (engine clock) or acknowledgment time.
    pub arrived: Option<u64>,
    /// Whether `arrived` is an acknowledgment.
    pub by_ack: bool,
    /// Transmissions seen.
    pub transmissions: u32,
}

impl ResolvedCopy {
    /// Copy `c` sent and arrived at these times; without an arrival, the copy's first
    /// acknowledgment stands for it (if it was seen sent).
    fn of(c: &CopyState, sent: Option<u64>, arrived: Option<u64>, transmissions: u32) -> Self {
        let by_ack = arrived.is_none() && sent.is_some() && c.ack_ns.is_some();
        ResolvedCopy {
            path: c.path,
            sent,
            arrived: if by_ack { c.ack_ns } else { arrived },
            by_ack,
            transmissions,
        }
    }

    /// arrived − sent in µs (exact, truncated).
    pub fn latency_us(&self) -> Option<u64> {
        Some(self.arrived?.checked_sub(self.sent?)? / 1000)
    }
}

fn shifted(raw: u64, off: i64) -> u64 {
    raw.saturating_add_signed(off)
}

/// The key and name a message of a connection on its own has in the group of per-path
/// connections that connection may later join, and the stream range it covers there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupName {
    /// Key within the group.
    pub key: u64,
    /// Name within the group.
    pub id: MsgId,
    /// Client → server.
    pub up: bool,
    /// Stream id.
    pub stream: u64,
    /// The message's stream range `[start, end)`.
    pub range: (u64, u64),
    /// Named by its head frame's content (a stream per message): its key is made when the
    /// connection joins the group (the n-th message with that content on the connection), and
    /// the stream's later frames continue it.
    pub content: Option<u64>,
}

impl OpenMessage {
    /// Takes in the copies and fragments of `other`, the same message under another name.
    fn merge(&mut self, other: OpenMessage) {
        self.first_ns = self.first_ns.min(other.first_ns);
        self.nfrag = self.nfrag.max(other.nfrag);
        if self.frag_union & other.frag_union == 0 {
            self.bytes += other.bytes;
        }
        self.frag_union |= other.frag_union;
        self.held |= other.held;
        for c in other.copies {
            match self.copies.iter_mut().find(|x| x.path == c.path) {
                Some(x) => {
                    for s in c.sightings {
                        match x.sightings.iter_mut().find(|y| y.capture == s.capture) {
                            Some(y) => {
                                y.first_ns = y.first_ns.min(s.first_ns);
                                y.complete_ns = y.complete_ns.max(s.complete_ns);
                                y.frags |= s.frags;
                                y.count = y.count.saturating_add(s.count);
                            }
                            None => x.sightings.push(s),
                        }
                    }
                    x.ack_ns = match (x.ack_ns, c.ack_ns) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                }
                None => self.copies.push(c),
            }
        }
    }

    fn frags_full(&self) -> u64 {
        if self.nfrag >= 64 {
            u64::MAX
        } else {
            (1u64 << self.nfrag) - 1
        }
    }

    /// Whether every path in `mask` has a finished copy (both ends seen where the path is
    /// captured at both ends; acknowledged where only the sender is captured).
    #[inline(always)]
    pub fn complete(&self, mask: u64, caps: &CaptureTable) -> bool {
        let full = self.frags_full();
        let mut seen = 0u64;
        for c in &self.copies {
            let done_frags = |s: &Sighting| s.frags & full == full;
            let ok = match c.sightings.as_slice() {
                [] => false,
                [s] => {
                    let (paired, _, dir) = caps.sighting_facts(s.capture, s.up, s.dir);
                    Self::one_done(c, s, full, (!paired).then_some(dir))
                }
                // Both ends: once the far end's clock is known (its offset given or
                // estimated), so that the copy's latency is on one clock.
                many => {
                    many.iter().filter(|s| done_frags(s)).count() >= 2
                        && many.iter().all(|s| caps.clock_settled(s.capture))
                }
            };
            if ok && c.path < 64 {
                seen |= 1 << c.path;
            }
        }
        mask != 0 && seen & mask == mask
    }

    /// Whether copy `c`, seen at one capture only (`s`), is finished: all its fragments seen
    /// there, and, at the sending end, acknowledged (`unpaired_dir`: the sighting's direction
    /// where the capture is not paired; a paired capture waits for the other end).
    #[inline(always)]
    fn one_done(c: &CopyState, s: &Sighting, full: u64, unpaired_dir: Option<Dir>) -> bool {
        s.frags & full == full && unpaired_dir.is_some_and(|d| d != Dir::Out || c.ack_ns.is_some())
    }

    /// [`OpenMessage::complete`], and if so the copies resolved into `out`
    /// ([`OpenMessage::resolve_into`]); a copy seen at one capture (the common case) looks
    /// its capture up once for both.
    #[inline]
    pub fn resolve_if_complete(
        &self,
        mask: u64,
        caps: &CaptureTable,
        out: &mut Vec<ResolvedCopy>,
    ) -> bool {
        if let [c] = self.copies.as_slice() {
            if let [s] = c.sightings.as_slice() {
                let full = self.frags_full();
                let (paired, off, dir) = caps.sighting_facts(s.capture, s.up, s.dir);
                let done = Self::one_done(c, s, full, (!paired).then_some(dir));
                let seen = if done && c.path < 64 { 1 << c.path } else { 0 };
                if mask == 0 || seen & mask != mask {
                    return false;
                }
                out.clear();
                out.push(Self::resolved_one(c, s, full, off, dir));
                return true;
            }
        }
        if !self.complete(mask, caps) {
            return false;
        }
        self.resolve_into(caps, out);
        true
    }

    /// Resolves copies into `out` (cleared first): send = first outgoing sighting, arrival =
    /// first complete incoming one (clock offsets applied); with two sightings of unknown
    /// direction the earlier is the send.
    #[inline]
    pub fn resolve_into(&self, caps: &CaptureTable, out: &mut Vec<ResolvedCopy>) {
        out.clear();
        // The common case (inlined where it is called): one copy, seen at one capture.
        if let [c] = self.copies.as_slice() {
            if let [s] = c.sightings.as_slice() {
                out.push(Self::resolve_one(c, s, self.frags_full(), caps));
                return;
            }
        }
        self.resolve_all(caps, out);
    }

    /// [`OpenMessage::resolve_into`] of every copy into `out` (empty).
    #[inline(never)]
    fn resolve_all(&self, caps: &CaptureTable, out: &mut Vec<ResolvedCopy>) {
        let full = self.frags_full();
        out.extend(self.copies.iter().map(|c| {
            if let [s] = c.sightings.as_slice() {
                return Self::resolve_one(c, s, full, caps);
            }
            let mut sent: Option<u64> = None;
            let mut arrived: Option<u64> = None;
            let mut unknown: Vec<(u64, u64, bool)> = Vec::new();
            let mut transmissions = 0u32;
            for s in &c.sightings {
                let off = caps.offset(s.capture);
                let first = shifted(s.first_ns, off);
                let done = shifted(s.complete_ns, off);
                let complete = s.frags & full == full;
                match s.dir_now(caps) {
                    Dir::Out => {
                        sent = Some(sent.map_or(first, |x| x.min(first)));
                        transmissions = transmissions.max(s.count);
                    }
                    Dir::In => {
                        if complete {
                            arrived = Some(arrived.map_or(done, |x| x.min(done)));
                        }
                    }
                    Dir::Unknown => unknown.push((first, done, complete)),
                }
            }
            if !unknown.is_empty() {
                unknown.sort_by_key(|u| u.0);
                if unknown.len() >= 2 || (sent.is_none() && arrived.is_some()) {
                    if sent.is_none() {
                        sent = Some(unknown[0].0);
                    }
                    if arrived.is_none() {
                        if let Some(u) = unknown.iter().skip(1).find(|u| u.2) {
                            arrived = Some(u.1);
                        }
                    }
                } else if sent.is_none() && arrived.is_none() {
                    sent = Some(unknown[0].0);
                }
            }
            if transmissions == 0 {
                transmissions = c.sightings.iter().map(|s| s.count).max().unwrap_or(1);
            }
            ResolvedCopy::of(c, sent, arrived, transmissions)
        }));
    }

    /// [`OpenMessage::resolve_into`] for a copy seen at one capture (the common case): the
    /// same result, with one lookup of the capture.
    #[inline]
    fn resolve_one(c: &CopyState, s: &Sighting, full: u64, caps: &CaptureTable) -> ResolvedCopy {
        let (_, off, dir) = caps.sighting_facts(s.capture, s.up, s.dir);
        Self::resolved_one(c, s, full, off, dir)
    }

    /// [`OpenMessage::resolve_one`] with the capture's offset and the sighting's direction.
    #[inline(always)]
    fn resolved_one(c: &CopyState, s: &Sighting, full: u64, off: i64, dir: Dir) -> ResolvedCopy {
        let first = shifted(s.first_ns, off);
        let (sent, arrived) = match dir {
            Dir::Out => (Some(first), None),
            Dir::In => (
                None,
                (s.frags & full == full).then(|| shifted(s.complete_ns, off)),
            ),
            // Alone, a copy of unknown direction is a send.
            Dir::Unknown => (Some(first), None),
        };
        ResolvedCopy::of(c, sent, arrived, s.count)
    }
}

/// The latency kind of a message's copies: the time to acknowledgment when some copy's
/// arrival is its acknowledgment and no copy has a one-way latency, else one-way.
pub(crate) fn latency_kind(any_by_ack: bool, any_one_way: bool) -> LatencyKind {
    if any_by_ack && !any_one_way {
        LatencyKind::AckRtt
    } else {
        LatencyKind::OneWay
    }
}

/// Spare allocations kept for new messages.
const MAX_SPARE: usize = 256;

/// Keys of recently closed messages (so that late copies are not new messages), as seeded
/// 64-bit fingerprints of (flow uid, key) in two generations of `per_generation` closures each,
/// each with one word: the paths (bit per path below [`CLOSED_PATHS`]) whose copy arrived (or
/// was acknowledged) and, above them, when the message closed (ms after the first closure). A
/// key is remembered for at least `per_generation` and at most twice that many closures.
#[derive(Debug, Default)]
struct ClosedKeys {
    current: Fingerprints,
    previous: Fingerprints,
    per_generation: usize,
    fingerprint: foldhash::fast::RandomState,
    /// The engine time of the first closure (the origin of the closing times kept).
    origin_ns: Option<u64>,
}

/// A copy of a remembered closed message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AfterClose {
    /// Only sent, or on a path where a copy had arrived already.
    Again,
    /// The first copy to arrive on its path: a late copy of the message closed at `closed_ns`.
    LateCopy {
        /// When the message closed (engine clock, to the millisecond).
        closed_ns: u64,
    },
}

/// Paths whose late copies are recognised (the low bits of a closed message's word; a copy on
/// a later path of a closed message is still not a new message, only not counted late).
const CLOSED_PATHS: usize = 24;

/// The paths part of a closed message's word.
const CLOSED_PATH_BITS: u64 = (1 << CLOSED_PATHS) - 1;

impl ClosedKeys {
    fn fingerprint(&self, k: (u64, u64)) -> u64 {
        use std::hash::BuildHasher;
        self.fingerprint.hash_one(k)
    }

    /// The paths of the closed message `fp`, if it is remembered.
    fn paths_mut(&mut self, fp: u64) -> Option<&mut u64> {
        match self.current.get_mut(&fp) {
            Some(m) => Some(m),
            None => self.previous.get_mut(&fp),
        }
    }

    /// Notes a copy of the closed message `fp` on `path` (`arrived`: seen arriving or
    /// acknowledged, not only sent): what it is, `None` if the message is not remembered.
    fn copy_on(&mut self, fp: u64, path: PathIdx, arrived: bool) -> Option<AfterClose> {
        let origin = self.origin_ns.unwrap_or(0);
        let word = self.paths_mut(fp)?;
        let bit = if path < CLOSED_PATHS && arrived {
            1u64 << path
        } else {
            0
        };
        let first = bit != 0 && *word & bit == 0;
        *word |= bit;
        let closed_ns = origin.saturating_add((*word >> CLOSED_PATHS).saturating_mul(1_000_000));
        Some(if first {
            AfterClose::LateCopy { closed_ns }
        } else {
            AfterClose::Again
        })
    }

    /// Remembers the message `fp` closed at `closed_ns` with copies arrived on `paths`.
    fn insert(&mut self, fp: u64, paths: u64, closed_ns: u64) {
        let origin = *self.origin_ns.get_or_insert(closed_ns);
        let ms = (closed_ns.saturating_sub(origin) / 1_000_000).min(u64::MAX >> CLOSED_PATHS);
        let word = (ms << CLOSED_PATHS) | (paths & CLOSED_PATH_BITS);
        if self.current.len() >= self.per_generation {
            std::mem::swap(&mut self.current, &mut self.previous);
            self.current.clear();
        }
        if self.current.capacity() == 0 {
            // A generation's room at once, not grown (and placed again) from empty.
            self.current
                .reserve(self.per_generation.min(MAX_FIRST_ROOM));
        }
        self.current.insert(fp, word);
    }
}

/// Fingerprints a generation makes room for at once.
const MAX_FIRST_ROOM: usize = 1 << 19;

/// Fingerprints with the paths of their messages' copies: already random, so they place
/// themselves (no hashing again).
type Fingerprints = std::collections::HashMap<u64, u64, std::hash::BuildHasherDefault<Itself>>;

/// The hasher of [`Fingerprints`]: a fingerprint is its own hash.
#[derive(Debug, Default)]
struct Itself(u64);

impl std::hash::Hasher for Itself {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u64 fingerprints are hashed; anything else is folded in.
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// A slot of the store: the open message (if any), the stamp of its opening (the order the
/// open messages opened in), its timeout, and its neighbours in that order.
#[derive(Debug, Default)]
struct Slot {
    stamp: u64,
    msg: Option<OpenMessage>,
    /// What the open message is named in a group of per-path connections, should its own
    /// connection turn out to be one of them ([`MessageStore::name_for_group`]).
    group_name: Option<GroupName>,
    /// When the open message times out (engine clock).
    deadline: u64,
    /// The open message that opened just before it, and just after.
    older: Option<u32>,
    newer: Option<u32>,
}

/// All open messages: in slots reused as messages close, found by (flow uid, key) through an
/// index of the open ones; recently closed keys are remembered apart (so late copies are not
/// new messages), which keeps the index as small as the open set.
#[derive(Debug, Default)]
pub struct MessageStore {
    slots: Vec<Slot>,
    free: Vec<u32>,
    index: FastMap<(u64, u64), u32>,
    closed: ClosedKeys,
    /// The open messages in the order they opened (their timeouts mostly come in that order):
    /// the ends of the chain through [`Slot::older`] and [`Slot::newer`].
    oldest: Option<u32>,
    newest: Option<u32>,
    open: usize,
    stamps: u64,
    /// Allocations of closed messages, reused by new ones (bounded).
    spare_copies: Vec<Vec<CopyState>>,
    max_open: usize,
    timeout_ns: u64,
    /// The newest engine time the store was told of (sightings, acknowledgments, timeouts):
    /// when a message closing now closed.
    clock_ns: u64,
    /// Messages closed early to stay within bounds.
    pub evicted: u64,
    /// Sightings of already closed messages.
    pub late: u64,
    /// Messages that waited past their timeout for a path in (or after) an outage.
    pub held: u64,
    /// Messages closed at the longest wait allowed while still waiting for a copy.
    pub hold_limit: u64,
}

/// Pairing evidence for sighting `a`: the last sighting of the same copy with the same
/// addresses at another capture (on any path).
fn same_tuple_elsewhere(msg: &OpenMessage, a: &SightArgs) -> Option<(CaptureId, u64)> {
    msg.copies
        .iter()
        .flat_map(|c| c.sightings.iter())
        .rev()
        .find(|s| s.capture != a.capture && s.tuple == a.tuple)
        .map(|s| (s.capture, s.first_ns))
}

impl MessageStore {
    /// Empty store.
    pub fn new(max_open: usize, timeout_ns: u64) -> Self {
        let max_open = max_open.max(1);
        Self {
            max_open,
            timeout_ns,
            closed: ClosedKeys {
                per_generation: max_open,
                ..ClosedKeys::default()
            },
            ..Self::default()
        }
    }

    /// Puts the message just opened in slot `i` at the newest end of the opening order.
    #[inline]
    fn link_newest(&mut self, i: u32) {
        let older = self.newest;
        match older.and_then(|o| self.slots.get_mut(o as usize)) {
            Some(o) => o.newer = Some(i),
            None => self.oldest = Some(i),
        }
        if let Some(s) = self.slots.get_mut(i as usize) {
            s.older = older;
            s.newer = None;
        }
        self.newest = Some(i);
    }

    /// Takes the message of slot `i` (closing) out of the opening order.
    #[inline]
    fn unlink(&mut self, i: u32) {
        let Some(s) = self.slots.get(i as usize) else {
            return;
        };
        let (older, newer) = (s.older, s.newer);
        match older.and_then(|o| self.slots.get_mut(o as usize)) {
            Some(o) => o.newer = newer,
            None => self.oldest = newer,
        }
        match newer.and_then(|n| self.slots.get_mut(n as usize)) {
            Some(n) => n.older = older,
            None => self.newest = older,
        }
    }

    fn slot_of(&self, k: (u64, u64)) -> Option<usize> {
        self.index.get(&k).map(|i| *i as usize)
    }

    /// Adds a sighting.
    pub fn sight(&mut self, a: &SightArgs) -> SightResult {
        let k = (a.flow.uid, a.key);
        self.clock_ns = self.clock_ns.max(a.ts_ns);
        let mut r = SightResult::default();
        let frg = a.frg.min(63);
        let bit = 1u64 << frg;
        let sighting = Sighting {
            capture: a.capture,
            dir: a.dir,
            first_ns: a.raw_ns,
            complete_ns: a.raw_ns,
            frags: bit,
            count: 1,
            tuple: a.tuple,
            up: a.up,
        };
        let entry = self.index.entry(k);
        let slot = match entry {
            MapEntry::Occupied(e) => *e.get() as usize,
            MapEntry::Vacant(entry) => {
                let late = match a.past {
                    PastClosure::Unknown => {
                        let fp = self.closed.fingerprint(k);
                        let arrived = a.dir == Dir::In;
                        self.closed.copy_on(fp, a.path, arrived).map(|c| {
                            if let AfterClose::LateCopy { closed_ns } = c {
                                r.late_copy = Some(closed_ns);
                            }
                        })
                    }
                    PastClosure::NeverSeen => None,
                    PastClosure::FlowKnows(closed) => closed.then_some(()),
                };
                if late.is_some() {
                    self.late += 1;
                    r.late = true;
                    return r;
                }
                r.new_message = true;
                let i = match self.free.pop() {
                    Some(i) => i as usize,
                    None => {
                        self.slots.push(Slot::default());
                        self.slots.len() - 1
                    }
                };
                self.stamps += 1;
                let stamp = self.stamps;
                // Made whole at once: its first copy with its first sighting.
                let mut copies = self
                    .spare_copies
                    .pop()
                    .unwrap_or_else(|| Vec::with_capacity(2));
                copies.push(CopyState {
                    path: a.path,
                    sightings: smallvec::smallvec![sighting],
                    ack_ns: None,
                });
                let deadline = a.ts_ns.saturating_add(self.timeout_ns);
                let s = &mut self.slots[i];
                s.stamp = stamp;
                s.deadline = deadline;
                // (A free slot holds none: with that settled first, the message is made in
                // its place.)
                s.msg = None;
                s.group_name = None;
                s.msg = Some(OpenMessage {
                    flow: a.flow,
                    key: a.key,
                    id: a.id,
                    first_ns: a.ts_ns,
                    bytes: a.bytes,
                    nfrag: frg + 1,
                    frag_union: bit,
                    copies,
                    flow_remembers: matches!(a.past, PastClosure::FlowKnows(_)),
                    content: a.content,
                    held: false,
                });
                let slot = u32::try_from(i).unwrap_or(u32::MAX);
                entry.insert(slot);
                self.open += 1;
                self.link_newest(slot);
                r.slot = u32::try_from(i).ok();
                return r;
            }
        };
        let Some(msg) = self.slots.get_mut(slot).and_then(|s| s.msg.as_mut()) else {
            return r;
        };
        r.slot = u32::try_from(slot).ok();
        msg.first_ns = msg.first_ns.min(a.ts_ns);
        msg.nfrag = msg.nfrag.max(frg + 1);
        if msg.frag_union & bit == 0 {
            msg.frag_union |= bit;
            msg.bytes += a.bytes;
        }
        r.same_tuple_elsewhere = same_tuple_elsewhere(msg, a);
        let Some(ci) = msg.copies.iter().position(|c| c.path == a.path) else {
            // A new copy: its first sighting, with nothing to compare it to on its path.
            msg.copies.push(CopyState {
                path: a.path,
                sightings: smallvec::smallvec![sighting],
                ack_ns: None,
            });
            return r;
        };
        let copy = &mut msg.copies[ci];
        match copy.sightings.iter_mut().find(|s| s.capture == a.capture) {
            Some(s) => {
                if s.frags & bit != 0 {
                    r.repeat = true;
                    s.count += 1;
                } else {
                    s.frags |= bit;
                    s.complete_ns = a.raw_ns;
                }
            }
            None => {
                if let Some(o) = copy.sightings.first() {
                    r.other_end = Some((o.capture, o.first_ns, o.dir));
                }
                copy.sightings.push(sighting);
            }
        }
        r
    }

    fn open_mut(&mut self, k: (u64, u64)) -> Option<&mut OpenMessage> {
        let i = self.slot_of(k)?;
        self.slots.get_mut(i)?.msg.as_mut()
    }

    /// The open message of key `k`, looked for first in slot `hint` (where it was held when
    /// last seen), then through the index.
    fn open_hinted(&mut self, k: (u64, u64), hint: u32) -> Option<(u32, &mut OpenMessage)> {
        let hit = self
            .slots
            .get(hint as usize)
            .and_then(|s| s.msg.as_ref())
            .is_some_and(|m| m.flow.uid == k.0 && m.key == k.1);
        let i = if hit {
            hint
        } else {
            u32::try_from(self.slot_of(k)?).ok()?
        };
        let m = self.slots.get_mut(i as usize)?.msg.as_mut()?;
        Some((i, m))
    }

    /// Sets the acknowledgment time of a copy (first one wins); `hint` is the slot the message
    /// was held in when the acknowledged packet was seen ([`SightResult::slot`]). Returns the
    /// message's slot if it is open and has a copy on `path`.
    pub fn ack(
        &mut self,
        flow_uid: u64,
        key: u64,
        hint: u32,
        path: PathIdx,
        ack_ns: u64,
    ) -> Option<u32> {
        self.clock_ns = self.clock_ns.max(ack_ns);
        let (i, m) = self.open_hinted((flow_uid, key), hint)?;
        let c = m.copies.iter_mut().find(|c| c.path == path)?;
        c.ack_ns = Some(c.ack_ns.map_or(ack_ns, |x| x.min(ack_ns)));
        Some(i)
    }

    /// A later piece of an open message's data reaches `end` bytes into it (pieces that carry
    /// no name of their own); the message's size is the furthest end seen on any path.
    pub fn extend_to(&mut self, flow_uid: u64, key: u64, end: u64) {
        if let Some(m) = self.open_mut((flow_uid, key)) {
            m.bytes = m.bytes.max(end);
        }
    }

    #[cfg(test)]
    /// Removes a message to close it.
    pub fn take(&mut self, flow_uid: u64, key: u64) -> Option<OpenMessage> {
        let i = self.slot_of((flow_uid, key))?;
        self.take_at(u32::try_from(i).ok()?)
    }

    /// Removes the message held in `slot` to close it.
    #[inline]
    pub fn take_at(&mut self, slot: u32) -> Option<OpenMessage> {
        self.take_at_if(slot, |_| true)
    }

    /// [`MessageStore::take_at`] if the message held in `slot` is `done` (one lookup of it).
    #[inline]
    pub fn take_at_if(
        &mut self,
        slot: u32,
        done: impl FnOnce(&OpenMessage) -> bool,
    ) -> Option<OpenMessage> {
        let held = &mut self.slots.get_mut(slot as usize)?.msg;
        if !held.as_ref().is_some_and(done) {
            return None;
        }
        let m = held.take()?;
        self.unlink(slot);
        let k = (m.flow.uid, m.key);
        self.index.remove(&k);
        if !m.flow_remembers {
            // The paths whose copy arrived or was acknowledged (as far as the store knows
            // directions: a copy seen at two captures arrived).
            let paths = m
                .copies
                .iter()
                .filter(|c| {
                    c.path < CLOSED_PATHS
                        && (c.ack_ns.is_some()
                            || c.sightings.len() >= 2
                            || c.sightings.iter().any(|s| s.dir == Dir::In))
                })
                .fold(0u64, |acc, c| acc | 1 << c.path);
            self.closed
                .insert(self.closed.fingerprint(k), paths, self.clock_ns);
        }
        self.open -= 1;
        self.free.push(slot);
        Some(m)
    }

    /// Takes back the allocation of a closed message's copies for the next messages.
    #[inline]
    pub fn recycle(&mut self, mut copies: Vec<CopyState>) {
        if self.spare_copies.len() < MAX_SPARE {
            copies.clear();
            self.spare_copies.push(copies);
        }
    }

    /// Whether [`MessageStore::pop_due`] may have a message for `now` (cheap, inlined).
    #[inline]
    pub fn any_due(&self, now: u64) -> bool {
        self.open > self.max_open
            || self
                .oldest
                .and_then(|i| self.slots.get(i as usize))
                .is_some_and(|s| s.deadline <= now)
    }

    /// Next message whose timeout passed at `now`, or the oldest one while over the bound
    /// (the flag says which). A message whose timeout passed waits on where `hold` gives it a
    /// later deadline (counted once per message in [`MessageStore::held`]).
    pub fn pop_due(
        &mut self,
        now: u64,
        mut hold: impl FnMut(&OpenMessage) -> Option<u64>,
    ) -> Option<(OpenMessage, bool)> {
        self.clock_ns = self.clock_ns.max(now);
        loop {
            let i = self.oldest?;
            let deadline = self.slots.get(i as usize)?.deadline;
            let over = self.open > self.max_open;
            if deadline > now && !over {
                return None;
            }
            if over && deadline > now {
                let m = self.take_at(i)?;
                self.evicted += 1;
                return Some((m, true));
            }
            // (Over the bound, nothing waits on.)
            let later = self
                .slots
                .get(i as usize)
                .and_then(|s| s.msg.as_ref())
                .filter(|_| !over)
                .and_then(&mut hold)
                .filter(|d| *d > now);
            let Some(later) = later else {
                return Some((self.take_at(i)?, false));
            };
            // Waits on, behind the messages opened since (their deadlines mostly come first).
            self.unlink(i);
            if let Some(s) = self.slots.get_mut(i as usize) {
                s.deadline = later;
                if let Some(m) = s.msg.as_mut() {
                    if !m.held {
                        m.held = true;
                        self.held += 1;
                    }
                }
            }
            self.link_newest(i);
        }
    }

    /// Names the open message held in `slot` anew: key `key` (named `id`) of flow `flow`
    /// (a KCP session's or QUIC connection's message moved into the group of per-path sessions
    /// or connections it turned out to be one of), merged into the open message of that key if
    /// there is one. Returns where the message is held now.
    pub fn rename(&mut self, slot: u32, flow: FlowRef, key: u64, id: MsgId) -> Option<u32> {
        let old = {
            let m = self.slots.get(slot as usize)?.msg.as_ref()?;
            (m.flow.uid, m.key)
        };
        let new = (flow.uid, key);
        if old == new {
            return Some(slot);
        }
        match self.slot_of(new) {
            None => {
                self.index.remove(&old);
                self.index.insert(new, slot);
                let m = self.slots.get_mut(slot as usize)?.msg.as_mut()?;
                m.flow = flow;
                m.key = key;
                m.id = id;
                m.flow_remembers = false;
                Some(slot)
            }
            Some(target) => {
                // Taken out without being remembered as closed: it lives on in the target.
                let m = self.slots.get_mut(slot as usize)?.msg.take()?;
                self.unlink(slot);
                self.index.remove(&old);
                self.open -= 1;
                self.free.push(slot);
                let t = self.slots.get_mut(target)?.msg.as_mut()?;
                t.merge(m);
                u32::try_from(target).ok()
            }
        }
    }

    /// The open messages of flow `flow_uid` that carry a content name: (slot, first
    /// sighting, id, content), in the order they were first seen.
    pub fn named_by_content(&self, flow_uid: u64) -> Vec<(u32, u64, MsgId, ContentName)> {
        let mut v: Vec<(u32, u64, MsgId, ContentName)> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let m = s.msg.as_ref().filter(|m| m.flow.uid == flow_uid)?;
                Some((u32::try_from(i).ok()?, m.first_ns, m.id, m.content?))
            })
            .collect();
        v.sort_by_key(|x| (x.1, x.3.sn));
        v
    }

    /// A copy on `path` of message `key` of flow `flow_uid` acknowledged at `ack_ns`: if the
    /// message is closed (and remembered by the store) and had no copy on `path`, a late copy
    /// (when its message closed).
    pub fn acked_after_close(
        &mut self,
        flow_uid: u64,
        key: u64,
        path: PathIdx,
        ack_ns: u64,
    ) -> Option<u64> {
        self.clock_ns = self.clock_ns.max(ack_ns);
        let k = (flow_uid, key);
        if self.index.contains_key(&k) {
            return None;
        }
        let fp = self.closed.fingerprint(k);
        match self.closed.copy_on(fp, path, true)? {
            AfterClose::LateCopy { closed_ns } => Some(closed_ns),
            AfterClose::Again => None,
        }
    }

    /// Notes what the open message held in `slot` is named in a group of per-path
    /// connections (the first name noted stands).
    pub fn name_for_group(&mut self, slot: u32, name: GroupName) {
        if let Some(s) = self.slots.get_mut(slot as usize) {
            if s.msg.is_some() && s.group_name.is_none() {
                s.group_name = Some(name);
            }
        }
    }

    /// The open messages of flow `flow_uid`: (slot, key, name, name in a group if noted),
    /// in the order they opened.
    pub fn open_of(&self, flow_uid: u64) -> Vec<(u32, u64, MsgId, Option<GroupName>)> {
        let mut v: Vec<(u64, u32, u64, MsgId, Option<GroupName>)> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let m = s.msg.as_ref().filter(|m| m.flow.uid == flow_uid)?;
                Some((s.stamp, u32::try_from(i).ok()?, m.key, m.id, s.group_name))
            })
            .collect();
        v.sort_unstable_by_key(|x| x.0);
        v.into_iter()
            .map(|(_, i, k, id, g)| (i, k, id, g))
            .collect()
    }

    /// Every open message, for the end of the run, oldest first.
    pub fn drain_all(&mut self) -> Vec<OpenMessage> {
        self.oldest = None;
        self.newest = None;
        let mut v: Vec<(u64, OpenMessage)> = Vec::with_capacity(self.open);
        for (i, s) in self.slots.iter_mut().enumerate() {
            if let Some(m) = s.msg.take() {
                v.push((s.stamp, m));
                self.free.push(u32::try_from(i).unwrap_or(u32::MAX));
            }
        }
        self.index.clear();
        self.open = 0;
        // First seen first; messages first seen at the same time in the order they opened.
        v.sort_by_key(|(stamp, m)| (m.first_ns, *stamp));
        v.into_iter().map(|(_, m)| m).collect()
    }

    /// (flow, slot) of every open message.
    pub fn open_slots(&self) -> Vec<(FlowRef, u32)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((s.msg.as_ref()?.flow, u32::try_from(i).ok()?)))
            .collect()
    }

    fn open_messages(&self) -> impl Iterator<Item = &OpenMessage> {
        self.slots.iter().filter_map(|s| s.msg.as_ref())
    }

    /// Folds copies on path `alias` into `target` in every open message.
    pub fn merge_paths(&mut self, alias: PathIdx, target: PathIdx) {
        for m in self.slots.iter_mut().filter_map(|s| s.msg.as_mut()) {
            if let Some(ai) = m.copies.iter().position(|c| c.path == alias) {
                let a = m.copies.remove(ai);
                match m.copies.iter_mut().find(|c| c.path == target) {
                    Some(t) => {
                        t.sightings.extend(a.sightings);
                        t.ack_ns = match (t.ack_ns, a.ack_ns) {
                            (Some(x), Some(y)) => Some(x.min(y)),
                            (x, y) => x.or(y),
                        };
                    }
                    None => m.copies.push(CopyState { path: target, ..a }),
                }
            }
        }
    }

    /// Copies seen at both captures `a` and `b`: (sender, receiver) first times, judged with
    /// the directions known now (for clock-offset estimation right after pairing).
    pub fn seen_at_both(
        &self,
        a: CaptureId,
        b: CaptureId,
        caps: &CaptureTable,
    ) -> Vec<((CaptureId, u64), (CaptureId, u64))> {
        let mut v = Vec::new();
        for m in self.open_messages() {
            for c in &m.copies {
                let sa = c.sightings.iter().find(|s| s.capture == a);
                let sb = c.sightings.iter().find(|s| s.capture == b);
                if let (Some(x), Some(y)) = (sa, sb) {
                    let pair = if x.dir_now(caps) == Dir::Out || y.dir_now(caps) == Dir::In {
                        ((x.capture, x.first_ns), (y.capture, y.first_ns))
                    } else {
                        ((y.capture, y.first_ns), (x.capture, x.first_ns))
                    };
                    v.push(pair);
                }
            }
        }
        v
    }

    /// Open messages.
    pub fn len(&self) -> usize {
        self.open
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::FlowRef;

    fn args(key: u64, ts_ns: u64) -> SightArgs {
        SightArgs {
            flow: FlowRef { slot: 0, uid: 1 },
            key,
            id: MsgId::Hash(key),
            path: 0,
            capture: 0,
            dir: Dir::Out,
            raw_ns: ts_ns,
            ts_ns,
            frg: 0,
            bytes: 100,
            tuple: 7,
            up: Some(true),
            past: PastClosure::Unknown,
            content: None,
        }
    }

    #[test]
    fn a_late_copy_arriving_knows_when_its_message_closed() {
        const MS: u64 = 1_000_000;
        let mut store = MessageStore::new(4, 5_000 * MS);
        let t0 = 1_796_000_000_000 * MS;
        // Message 1 opens and closes when its timeout passes (at t0 + 5.0004 s).
        assert!(store.sight(&args(1, t0)).new_message);
        assert!(store.pop_due(t0 + 5_000 * MS + 400_000, |_| None).is_some());
        // Its copy on path 1 arrives 2.5 s later: a late copy of a message closed then (the
        // first closure, the origin of the closing times kept); again, late but not a late copy.
        let copy = |ts| SightArgs {
            path: 1,
            dir: Dir::In,
            ..args(1, ts)
        };
        let r = store.sight(&copy(t0 + 7_500 * MS));
        assert!(r.late && !r.new_message);
        assert_eq!(r.late_copy, Some(t0 + 5_000 * MS + 400_000));
        let again = store.sight(&copy(t0 + 7_600 * MS));
        assert!(again.late && again.late_copy.is_none());
    }

    #[test]
    fn closed_keys_are_late_for_at_least_max_open_closures_then_forgotten() {
        let max_open = 4;
        let mut store = MessageStore::new(max_open, 5_000_000_000);
        let close = |store: &mut MessageStore, key: u64| {
            assert!(store.sight(&args(key, key)).new_message);
            assert!(store.take(1, key).is_some());
        };
        close(&mut store, 0);
        // A copy of the closed message is late, not a new message, for `max_open` closures.
        for key in 1..=max_open as u64 {
            let r = store.sight(&args(0, 100));
            assert!(r.late && !r.new_message, "after {key} closures");
            close(&mut store, key);
        }
        // Beyond twice that many, the key is forgotten: a new message.
        for key in max_open as u64 + 1..=2 * max_open as u64 {
            close(&mut store, key);
        }
        assert!(store.sight(&args(0, 200)).new_message);
        assert_eq!(store.late, max_open as u64);
        // Open messages are found again, and closing forgets nothing of the others.
        assert!(!store.sight(&args(0, 300)).new_message);
        assert_eq!(store.len(), 1);
    }
}
