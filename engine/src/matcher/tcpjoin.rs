//! The kernel's TCP retransmissions (eBPF `tcp_retransmit` events) joined with the ones the
//! captures saw (the TCP wire matcher's), per connection direction and capture: each kernel
//! retransmission is matched with the capture's copy of the same sequence number within
//! [`MATCH_WINDOW_NS`]; what stays alone is a disagreement, written as a `tcp_disagreement`
//! record and counted per direction ([`TcpJoinSummary`]):
//! - the kernel resent a segment and no copy reached the capture (`not_on_wire`);
//! - the kernel resent a segment the capture saw as a first copy: its original never reached
//!   the capture (`original_not_captured`);
//! - a capture saw a resend the kernel, which followed the sender's socket, did not report
//!   (`not_in_kernel`).
//!
//! Both sides are judged only where the other could have seen them: a kernel retransmission
//! by the captures that were running then and saw the connection, a wire one when its sender
//! is a socket the probes reported, while they ran. Verdicts wait [`JUDGE_AFTER_NS`] (the
//! other side's events may come later: the live UI holds packets to put them in order) and
//! are all given at the end. Memory is bounded like the wire matcher's; what is forgotten is
//! counted.

use std::collections::VecDeque;
use std::net::SocketAddr;

use crate::input::{CaptureId, RetransmitKind, TcpEvent, TcpEventKind, TcpSegment};
use crate::paths::PathIdx;
use crate::record::{
    Record, TcpDisagreement, TcpDisagreementRecord, TcpJoinDirection, TcpJoinSummary,
    TcpRetransmitKind,
};
use crate::shared::{Pkt, Shared};
use crate::FastMap;

/// How far apart the kernel's event and the capture's copy of one retransmission may be (the
/// tracepoint fires just before the segment leaves; a capture further on sees it later by the
/// path's delay). Linux resends the same data at most every 200 ms (`TCP_RTO_MIN`).
pub const MATCH_WINDOW_NS: u64 = 100_000_000;
/// A first copy on the wire may precede the kernel's event by this much (clock reading).
const FIRST_COPY_SKEW_NS: u64 = 2_000_000;
/// How long an unmatched retransmission waits for the other side before its verdict.
pub const JUDGE_AFTER_NS: u64 = 2_000_000_000;
/// How long a verdict waits at most for a capture or the probes to cover its time.
const JUDGE_MAX_NS: u64 = 30_000_000_000;
/// Connection directions followed at once.
const MAX_DIRECTIONS: usize = 4096;
/// Retransmissions awaiting their verdict per direction (kernel) and per capture (wire).
const MAX_PENDING: usize = 256;
/// Captures compared per direction.
const MAX_CAPTURES: usize = 8;

/// A kernel retransmission awaiting its verdict.
#[derive(Debug, Clone, Copy)]
struct KernelResend {
    ts_ns: u64,
    seq: u32,
    len: u32,
    kind: RetransmitKind,
    /// Per capture slot: matched with a retransmission on the wire.
    matched: u8,
    /// Per capture slot: seen there as a first copy.
    first_copy: u8,
}

/// A retransmission on the wire awaiting its verdict.
#[derive(Debug, Clone, Copy)]
struct WireResend {
    ts_ns: u64,
    seq: u32,
    len: u32,
    kind: TcpRetransmitKind,
}

/// One capture's view of a direction.
#[derive(Debug)]
struct CaptureSide {
    capture: CaptureId,
    pending: VecDeque<WireResend>,
    stats: TcpJoinDirection,
}

/// One connection direction (sender → receiver).
#[derive(Debug, Default)]
struct Direction {
    /// The sender is a socket the kernel's probes reported.
    kernel_known: bool,
    kernel: VecDeque<KernelResend>,
    captures: Vec<CaptureSide>,
    last_ns: u64,
}

/// Where a capture ran: its first and last TCP segment.
#[derive(Debug, Clone, Copy)]
struct CaptureSpan {
    capture: CaptureId,
    first_ns: u64,
    last_ns: u64,
}

/// The join's state.
#[derive(Debug, Default)]
pub struct TcpJoin {
    dirs: FastMap<(SocketAddr, SocketAddr), Direction>,
    spans: Vec<CaptureSpan>,
    /// First and last kernel event.
    kernel_first_ns: Option<u64>,
    kernel_last_ns: u64,
    /// The kernel's recording ended here (a file); `None` while the probes run.
    kernel_end_ns: Option<u64>,
    now_ns: u64,
    last_sweep_ns: u64,
    kernel_outside: u64,
    wire_not_probed: u64,
    evicted: u64,
    /// Directions forgotten, kept for the summary (bounded like the table).
    retired: Vec<TcpJoinDirection>,
}

/// Whether the kernel's retransmission of `k` and the wire's `w` are the same data.
fn same_data(k_seq: u32, k_len: u32, w_seq: u32, w_len: u32) -> bool {
    k_seq == w_seq
        || (w_len > 0 && k_seq.wrapping_sub(w_seq) < w_len)
        || (k_len > 0 && w_seq.wrapping_sub(k_seq) < k_len)
}

/// Whether the kernel and the wire gave a retransmission the same kind. The kernel's probes
/// read the kind from the congestion state; Linux resends what a router said was too big
/// (`tcp_simple_retransmit`) in the state the connection is in: Loss with the timer armed
/// (loss recovery), or Recovery when the resends' reordering already had it recovering (fast)
/// — both measured on this kernel through a router namespace (`tui/tests/tcp_path_mtu.rs`).
fn same_kind(k: RetransmitKind, w: TcpRetransmitKind) -> bool {
    matches!(
        (k, w),
        (RetransmitKind::Rto, TcpRetransmitKind::Rto)
            | (
                RetransmitKind::Fast,
                TcpRetransmitKind::Fast | TcpRetransmitKind::PathMtu
            )
            | (RetransmitKind::Tlp, TcpRetransmitKind::LossProbe)
            | (
                RetransmitKind::LossRecovery,
                TcpRetransmitKind::LossRecovery | TcpRetransmitKind::PathMtu
            )
            | (RetransmitKind::Unknown, TcpRetransmitKind::Other)
    )
}

impl TcpJoin {
    /// A kernel event: notes the socket, and joins a retransmission with the captures'.
    pub(crate) fn on_kernel(&mut self, shared: &mut Shared, e: &TcpEvent) {
        self.kernel_first_ns = Some(self.kernel_first_ns.map_or(e.ts_ns, |f| f.min(e.ts_ns)));
        self.kernel_last_ns = self.kernel_last_ns.max(e.ts_ns);
        self.now_ns = self.now_ns.max(e.ts_ns);
        let key = (e.local, e.remote);
        if !self.dirs.contains_key(&key) {
            self.make_room(shared);
        }
        let dir = self.dirs.entry(key).or_default();
        dir.kernel_known = true;
        dir.last_ns = dir.last_ns.max(e.ts_ns);
        if let TcpEventKind::Retransmit { kind, seq, len } = e.kind {
            let mut k = KernelResend {
                ts_ns: e.ts_ns,
                seq,
                len,
                kind,
                matched: 0,
                first_copy: 0,
            };
            for (slot, side) in dir.captures.iter_mut().enumerate() {
                let best = nearest(&side.pending, e.ts_ns, |w| {
                    same_data(seq, len, w.seq, w.len)
                });
                if let Some(i) = best {
                    if let Some(w) = side.pending.remove(i) {
                        count_match(&mut side.stats, kind, w.kind);
                        k.matched |= 1 << slot;
                    }
                }
            }
            dir.kernel.push_back(k);
            if dir.kernel.len() > MAX_PENDING {
                dir.kernel.pop_front();
                self.evicted += 1;
            }
        }
        self.maybe_sweep(shared, key);
    }

    /// Data segment `t` (`seq_len` of sequence space) seen as `pkt`: a retransmission of kind
    /// `kind`, or a first copy (`None`).
    #[inline(always)]
    pub(crate) fn on_wire(
        &mut self,
        shared: &mut Shared,
        t: &TcpSegment,
        pkt: &Pkt,
        seq_len: u32,
        kind: Option<TcpRetransmitKind>,
    ) {
        let (capture, ts_ns) = (t.meta.capture, pkt.ts_ns);
        self.now_ns = self.now_ns.max(ts_ns);
        // Segments come in runs from one capture: the last span's is checked first.
        let span = match self.spans.last_mut() {
            Some(s) if s.capture == capture => Some(s),
            _ => self.spans.iter_mut().find(|s| s.capture == capture),
        };
        match span {
            Some(s) => {
                s.first_ns = s.first_ns.min(ts_ns);
                s.last_ns = s.last_ns.max(ts_ns);
            }
            None => self.spans.push(CaptureSpan {
                capture,
                first_ns: ts_ns,
                last_ns: ts_ns,
            }),
        }
        if self.kernel_first_ns.is_none() {
            // No kernel event yet (none at all without probes): nothing to join with, and
            // what the wire saw before the probes ran is not held against them.
            if kind.is_some() {
                self.wire_not_probed += 1;
            }
            return;
        }
        let ends = (t.meta.src, t.meta.dst);
        self.join_wire(shared, ends, capture, pkt.path, t.seq, seq_len, ts_ns, kind);
    }

    /// [`TcpJoin::on_wire`] once the kernel's events have begun: `seq_len` of sequence space
    /// from `src` to `dst` seen by `capture` on `path` at `ts_ns`.
    #[expect(clippy::too_many_arguments, reason = "one segment's facts")]
    #[inline(never)]
    fn join_wire(
        &mut self,
        shared: &mut Shared,
        (src, dst): (SocketAddr, SocketAddr),
        capture: CaptureId,
        path: PathIdx,
        seq: u32,
        seq_len: u32,
        ts_ns: u64,
        kind: Option<TcpRetransmitKind>,
    ) {
        let key = (src, dst);
        if !self.dirs.contains_key(&key) {
            self.make_room(shared);
        }
        let dir = self.dirs.entry(key).or_default();
        dir.last_ns = dir.last_ns.max(ts_ns);
        let slot = match dir.captures.iter().position(|c| c.capture == capture) {
            Some(s) => s,
            None if dir.captures.len() < MAX_CAPTURES => {
                dir.captures.push(CaptureSide {
                    capture,
                    pending: VecDeque::new(),
                    stats: TcpJoinDirection {
                        path: shared.paths.label(path).to_owned(),
                        src: src.to_string(),
                        dst: dst.to_string(),
                        ..TcpJoinDirection::default()
                    },
                });
                dir.captures.len() - 1
            }
            None => return,
        };
        let bit = 1u8 << slot;
        let side = &mut dir.captures[slot];
        match kind {
            Some(kind) => {
                let best = nearest(&dir.kernel, ts_ns, |k| {
                    k.matched & bit == 0 && same_data(k.seq, k.len, seq, seq_len)
                });
                match best.and_then(|i| dir.kernel.get_mut(i)) {
                    Some(k) => {
                        k.matched |= bit;
                        k.first_copy &= !bit;
                        count_match(&mut side.stats, k.kind, kind);
                    }
                    None => {
                        side.pending.push_back(WireResend {
                            ts_ns,
                            seq,
                            len: seq_len,
                            kind,
                        });
                        if side.pending.len() > MAX_PENDING {
                            side.pending.pop_front();
                            self.evicted += 1;
                        }
                    }
                }
            }
            None => {
                // A first copy of data the kernel resent just before: its original never
                // reached this capture (a later resend on the wire still takes precedence).
                if let Some(k) = dir.kernel.iter_mut().rev().find(|k| {
                    k.matched & bit == 0
                        && k.ts_ns <= ts_ns.saturating_add(FIRST_COPY_SKEW_NS)
                        && ts_ns <= k.ts_ns.saturating_add(MATCH_WINDOW_NS)
                        && same_data(k.seq, k.len, seq, seq_len)
                }) {
                    k.first_copy |= bit;
                }
            }
        }
        self.maybe_sweep(shared, key);
    }

    /// The kernel's recording ended at `ts_ns` (a file read to its end): wire retransmissions
    /// after it are not judged.
    pub(crate) fn kernel_ended(&mut self, ts_ns: u64) {
        self.kernel_end_ns = Some(ts_ns);
    }

    /// Engine time moved to `ts_ns` with nothing observed.
    pub(crate) fn tick(&mut self, shared: &mut Shared, ts_ns: u64) {
        self.now_ns = self.now_ns.max(ts_ns);
        if self.now_ns >= self.last_sweep_ns.saturating_add(1_000_000_000) {
            self.sweep(shared, false);
        }
    }

    /// Gives every verdict still waiting.
    pub(crate) fn finish(&mut self, shared: &mut Shared) {
        self.sweep(shared, true);
    }

    fn maybe_sweep(&mut self, shared: &mut Shared, key: (SocketAddr, SocketAddr)) {
        if self.now_ns >= self.last_sweep_ns.saturating_add(1_000_000_000) {
            self.sweep(shared, false);
            return;
        }
        let ctx = Context {
            now_ns: self.now_ns,
            spans: &self.spans,
            kernel_first_ns: self.kernel_first_ns,
            kernel_end_ns: self.kernel_end_ns,
        };
        if let Some(dir) = self.dirs.get_mut(&key) {
            let c = judge(dir, &ctx, shared, false);
            self.kernel_outside += c.outside;
            self.wire_not_probed += c.not_probed;
        }
    }

    fn sweep(&mut self, shared: &mut Shared, finishing: bool) {
        self.last_sweep_ns = self.now_ns;
        let ctx = Context {
            now_ns: self.now_ns,
            spans: &self.spans,
            kernel_first_ns: self.kernel_first_ns,
            kernel_end_ns: self.kernel_end_ns,
        };
        for dir in self.dirs.values_mut() {
            let c = judge(dir, &ctx, shared, finishing);
            self.kernel_outside += c.outside;
            self.wire_not_probed += c.not_probed;
        }
    }

    /// Keeps the table within [`MAX_DIRECTIONS`]: judges what waits, then forgets the least
    /// recently active half (what still waits there counted as evicted).
    fn make_room(&mut self, shared: &mut Shared) {
        if self.dirs.len() < MAX_DIRECTIONS {
            return;
        }
        self.sweep(shared, false);
        let mut times: Vec<u64> = self.dirs.values().map(|d| d.last_ns).collect();
        let cut = times.len() / 2;
        let (_, horizon, _) = times.select_nth_unstable(cut);
        let horizon = *horizon;
        let (retired, evicted) = (&mut self.retired, &mut self.evicted);
        self.dirs.retain(|_, d| {
            if d.last_ns > horizon {
                return true;
            }
            *evicted += d.kernel.len() as u64;
            for side in d.captures.drain(..) {
                *evicted += side.pending.len() as u64;
                if side.stats.kernel + side.stats.wire > 0 && retired.len() < MAX_DIRECTIONS {
                    retired.push(side.stats);
                }
            }
            false
        });
    }

    /// The join's figures: per direction and capture with retransmissions on either side,
    /// most disagreements first, and their totals.
    pub(crate) fn summary(&self) -> TcpJoinSummary {
        let mut directions: Vec<TcpJoinDirection> = self
            .dirs
            .values()
            .filter(|d| d.kernel_known)
            .flat_map(|d| d.captures.iter().map(|c| c.stats.clone()))
            .chain(self.retired.iter().cloned())
            .filter(|s| s.kernel + s.wire > 0)
            .collect();
        directions.sort_by(|a, b| {
            b.disagreements()
                .cmp(&a.disagreements())
                .then(b.kernel.cmp(&a.kernel))
                .then_with(|| (&a.path, &a.src, &a.dst).cmp(&(&b.path, &b.src, &b.dst)))
        });
        let mut totals = TcpJoinDirection::default();
        for d in &directions {
            totals.kernel += d.kernel;
            totals.wire += d.wire;
            totals.matched += d.matched;
            totals.kinds_differ += d.kinds_differ;
            totals.not_on_wire += d.not_on_wire;
            totals.original_not_captured += d.original_not_captured;
            totals.not_in_kernel += d.not_in_kernel;
        }
        TcpJoinSummary {
            directions,
            totals,
            kernel_outside_captures: self.kernel_outside,
            wire_not_probed: self.wire_not_probed,
            evicted: self.evicted,
        }
    }
}

/// What the verdicts need to know beyond one direction.
struct Context<'a> {
    now_ns: u64,
    spans: &'a [CaptureSpan],
    kernel_first_ns: Option<u64>,
    kernel_end_ns: Option<u64>,
}

impl Context<'_> {
    /// Whether `capture` ran from before `ts_ns` until after the match window: `None` when it
    /// may still (its last segment so far is earlier).
    fn covers(&self, capture: CaptureId, ts_ns: u64) -> Option<bool> {
        let s = self.spans.iter().find(|s| s.capture == capture)?;
        if s.first_ns > ts_ns {
            return Some(false);
        }
        (s.last_ns >= ts_ns.saturating_add(MATCH_WINDOW_NS)).then_some(true)
    }
}

/// Retransmissions judged but not counted per direction.
#[derive(Default)]
struct Counts {
    outside: u64,
    not_probed: u64,
}

/// The index of the item nearest `ts_ns` within [`MATCH_WINDOW_NS`] that `fits`.
fn nearest<T: Timed>(q: &VecDeque<T>, ts_ns: u64, fits: impl Fn(&T) -> bool) -> Option<usize> {
    q.iter()
        .enumerate()
        .filter(|(_, x)| x.ts().abs_diff(ts_ns) <= MATCH_WINDOW_NS && fits(x))
        .min_by_key(|(_, x)| x.ts().abs_diff(ts_ns))
        .map(|(i, _)| i)
}

trait Timed {
    fn ts(&self) -> u64;
}

impl Timed for KernelResend {
    fn ts(&self) -> u64 {
        self.ts_ns
    }
}

impl Timed for WireResend {
    fn ts(&self) -> u64 {
        self.ts_ns
    }
}

fn count_match(s: &mut TcpJoinDirection, k: RetransmitKind, w: TcpRetransmitKind) {
    s.kernel += 1;
    s.wire += 1;
    s.matched += 1;
    if !same_kind(k, w) {
        s.kinds_differ += 1;
    }
}

/// Gives the verdicts of `dir` that are due (all when `finishing`).
fn judge(dir: &mut Direction, ctx: &Context<'_>, shared: &mut Shared, finishing: bool) -> Counts {
    let mut counts = Counts::default();
    let due = |ts: u64| finishing || ts.saturating_add(JUDGE_AFTER_NS) <= ctx.now_ns;
    let overdue = |ts: u64| ts.saturating_add(JUDGE_MAX_NS) <= ctx.now_ns;
    while let Some(k) = dir.kernel.front().copied() {
        if !due(k.ts_ns) {
            break;
        }
        let cover: Vec<Option<bool>> = dir
            .captures
            .iter()
            .map(|c| ctx.covers(c.capture, k.ts_ns))
            .collect();
        let waiting = cover
            .iter()
            .enumerate()
            .any(|(slot, c)| c.is_none() && (k.matched | k.first_copy) & (1 << slot) == 0);
        if waiting && !finishing && !overdue(k.ts_ns) {
            break;
        }
        dir.kernel.pop_front();
        let mut judged = k.matched != 0;
        for (slot, side) in dir.captures.iter_mut().enumerate() {
            let bit = 1u8 << slot;
            let what = if k.matched & bit != 0 {
                continue;
            } else if k.first_copy & bit != 0 {
                side.stats.original_not_captured += 1;
                TcpDisagreement::OriginalNotCaptured
            } else if cover.get(slot).copied().flatten() == Some(true) {
                side.stats.not_on_wire += 1;
                TcpDisagreement::NotOnWire
            } else {
                continue;
            };
            judged = true;
            side.stats.kernel += 1;
            shared.push_record(Record::TcpDisagreement(TcpDisagreementRecord {
                disagreement: what,
                path: side.stats.path.clone(),
                src: side.stats.src.clone(),
                dst: side.stats.dst.clone(),
                seq: k.seq,
                len: k.len,
                kernel_kind: Some(k.kind),
                wire_kind: None,
                ts_ns: k.ts_ns,
            }));
        }
        if !judged {
            counts.outside += 1;
        }
    }
    let probed_from = ctx.kernel_first_ns;
    for side in &mut dir.captures {
        while let Some(w) = side.pending.front().copied() {
            if !due(w.ts_ns) {
                break;
            }
            side.pending.pop_front();
            let probed = dir.kernel_known
                && probed_from.is_some_and(|f| f <= w.ts_ns)
                && ctx.kernel_end_ns.is_none_or(|end| w.ts_ns <= end);
            if !probed {
                counts.not_probed += 1;
                continue;
            }
            side.stats.wire += 1;
            side.stats.not_in_kernel += 1;
            shared.push_record(Record::TcpDisagreement(TcpDisagreementRecord {
                disagreement: TcpDisagreement::NotInKernel,
                path: side.stats.path.clone(),
                src: side.stats.src.clone(),
                dst: side.stats.dst.clone(),
                seq: w.seq,
                len: w.len,
                kernel_kind: None,
                wire_kind: Some(w.kind),
                ts_ns: w.ts_ns,
            }));
        }
    }
    counts
}
