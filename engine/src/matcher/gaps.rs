//! Engine glue for receive-side gaps (KCP sn, QUIC stream offsets): opening, annotating and
//! closing HOL incidents. One incident is one stall at the receiver: from the first piece held
//! behind a gap until the pieces that fill it release the held data, however many units were
//! missing; its retransmissions are those of the missing units, seen at the sender before or
//! during the stall.

use crate::flow::{FlowRef, Proto};
use crate::hol::{
    filled_by, push_evidence, Delivery, GapTracker, IncidentBook, OpenGap, PendingResends, Resend,
};
use crate::paths::{PathIdx, PathTable};
use crate::record::{HolIncident, HolProtocol, HolStallFrom, Recovery, TcpSource};
use crate::shared::Shared;
use crate::snapshot::Severity;

/// Which tracker.
#[derive(Clone, Copy, Debug)]
pub enum GapSel {
    /// KCP, per direction.
    Kcp {
        /// Client → server data.
        up: bool,
    },
    /// QUIC stream, per direction.
    Quic {
        /// Client → server data.
        up: bool,
        /// Stream id.
        stream: u64,
    },
    /// TCP byte stream seen on the wire, per direction (units: sequence numbers unwrapped
    /// to 64 bits).
    Tcp {
        /// Client → server data.
        up: bool,
        /// Deliveries inferred from the receiver's ACKs at the sender's capture (the
        /// receiver not captured), not arrivals seen at the receiver.
        from_acks: bool,
    },
}

impl GapSel {
    fn unit(self) -> &'static str {
        match self {
            GapSel::Kcp { .. } => "sn",
            GapSel::Quic { .. } => "offset",
            GapSel::Tcp { .. } => "seq",
        }
    }

    /// A unit as the user reads it: TCP sequence numbers as on the wire (32 bits).
    fn shown(self, unit: u64) -> u64 {
        match self {
            GapSel::Tcp { .. } => u64::from(unit as u32),
            _ => unit,
        }
    }

    fn protocol(self) -> HolProtocol {
        match self {
            GapSel::Kcp { .. } => HolProtocol::Kcp,
            GapSel::Quic { .. } => HolProtocol::Quic,
            GapSel::Tcp { .. } => HolProtocol::Tcp,
        }
    }

    /// A stall of this tracker's stream, of flow `flow`, missing `[from, to)`, from
    /// `start_ns` (TCP from the wire says so, and what its stall is measured between).
    fn stall(self, flow: &str, (from, to): (u64, u64), start_ns: u64) -> HolIncident {
        let stream = match self {
            GapSel::Quic { stream, .. } => Some(stream),
            _ => None,
        };
        let (source, stall_from) = match self {
            GapSel::Tcp { from_acks, .. } => (
                Some(TcpSource::Wire),
                Some(if from_acks {
                    HolStallFrom::SentToAcked
                } else {
                    HolStallFrom::ReceiverArrivals
                }),
            ),
            _ => (None, None),
        };
        HolIncident {
            protocol: self.protocol(),
            flow: flow.to_owned(),
            stream,
            missing: missing_name(self, from, to),
            start_ns,
            source,
            stall_from,
            ..HolIncident::default()
        }
    }
}

/// Withdraws open stall `incident`, shown to be none, from `book` and from its flow's count
/// of `incidents` (as if never opened).
pub(crate) fn withdraw_stall(book: &mut IncidentBook, incidents: &mut u64, incident: u64) {
    if book.withdraw(incident) {
        *incidents = incidents.saturating_sub(1);
    }
}

/// Opens stall `inc` of the hole now in front of `t`'s held pieces (no gap open), counted in
/// its flow's `counted`, with the retransmissions of its missing units seen before it (units
/// named `unit`): its id.
fn open_in_front(
    t: &mut GapTracker,
    book: &mut IncidentBook,
    counted: &mut u64,
    paths: &PathTable,
    unit: &str,
    inc: HolIncident,
) -> u64 {
    let since = inc.start_ns;
    let id = book.open(inc);
    t.reopen(id);
    *counted += 1;
    if let Some(end) = t.hole().map(|h| h.1) {
        let pending = t.take_pending(end);
        if let (Some(inc), Some(g)) = (book.get_mut(id), t.gap.as_mut()) {
            attach_pending(inc, &mut g.unknown_resends, unit, pending, paths, since);
        }
    }
    id
}

/// The receive tracker `sel` names; `delivered_at`, for a delivery, its time (a QUIC stream
/// notes it as its latest delivery, which shows that a gap on another stream did not hold it).
fn tracker(proto: &mut Proto, sel: GapSel, delivered_at: Option<u64>) -> Option<&mut GapTracker> {
    match (proto, sel) {
        (Proto::Kcp(k), GapSel::Kcp { up }) => k.rx.get_mut(usize::from(up)),
        (Proto::Quic(q), GapSel::Quic { up, stream }) => q.stream_rx(up, stream, delivered_at),
        (Proto::Tcp(t), GapSel::Tcp { up, .. }) => t.rx.get_mut(usize::from(up)),
        _ => None,
    }
}

/// The name of a missing run `[from, to)`: `sn 41`, `sn 41–42` (KCP counts units), or
/// `offset 1200` (QUIC: a byte offset).
fn missing_name(sel: GapSel, from: u64, to: u64) -> String {
    match sel {
        GapSel::Kcp { .. } if to > from.saturating_add(1) => {
            format!("sn {from}–{}", to - 1)
        }
        _ => format!("{} {}", sel.unit(), sel.shown(from)),
    }
}

fn resend_name(kind: Resend) -> &'static str {
    match kind {
        Resend::Fast => "fast",
        Resend::Timeout => "timeout",
        Resend::Unknown => "kind unknown",
    }
}

/// Counts one retransmission of a missing unit on an incident, with its evidence.
fn count_resend(
    inc: &mut HolIncident,
    unknown: &mut u32,
    unit_name: &str,
    unit: u64,
    kind: Resend,
    ts: u64,
    label: &str,
) {
    match kind {
        Resend::Fast => inc.fast_retransmits += 1,
        Resend::Timeout => inc.timeout_retransmits += 1,
        Resend::Unknown => *unknown += 1,
    }
    // TCP sequence numbers are shown as on the wire (32 bits).
    let tcp = GapSel::Tcp {
        up: false,
        from_acks: false,
    };
    let unit = if unit_name == tcp.unit() {
        unit & u64::from(u32::MAX)
    } else {
        unit
    };
    push_evidence(
        inc,
        ts,
        label,
        format!(
            "{unit_name} {unit} retransmitted on {label} ({})",
            resend_name(kind)
        ),
    );
}

/// Retransmissions that waited for an incident listed one by one in its evidence, per
/// attachment (the rest are counted and summed up in one line): the gap's own entries keep
/// their place in the bounded timeline.
const PENDING_SHOWN: usize = 6;

/// Moves retransmissions that waited for this incident onto it: all counted, the first few
/// from `not_before` on listed in the evidence.
fn attach_pending(
    inc: &mut HolIncident,
    unknown: &mut u32,
    unit_name: &str,
    pending: Vec<(u64, PendingResends)>,
    paths: &PathTable,
    not_before: u64,
) {
    let mut shown = 0usize;
    let mut more = 0u32;
    let mut more_from: Option<(u64, PathIdx)> = None;
    for (unit, p) in pending {
        let mut listed = (0u32, 0u32, 0u32);
        for &(ts, path, kind) in &p.seen {
            if shown >= PENDING_SHOWN || ts < not_before {
                continue;
            }
            shown += 1;
            count_resend(inc, unknown, unit_name, unit, kind, ts, paths.label(path));
            match kind {
                Resend::Fast => listed.0 += 1,
                Resend::Timeout => listed.1 += 1,
                Resend::Unknown => listed.2 += 1,
            }
        }
        let rest = (
            p.fast.saturating_sub(listed.0),
            p.timeout.saturating_sub(listed.1),
            p.unknown.saturating_sub(listed.2),
        );
        inc.fast_retransmits += rest.0;
        inc.timeout_retransmits += rest.1;
        *unknown += rest.2;
        let n = rest.0 + rest.1 + rest.2;
        if n > 0 {
            more += n;
            if let Some(&(ts, path, _)) = p.seen.iter().find(|s| s.0 >= not_before) {
                more_from = Some(more_from.map_or((ts, path), |m| m.min((ts, path))));
            }
        }
    }
    if more > 0 {
        let (ts, path) = more_from.unwrap_or((not_before, 0));
        push_evidence(
            inc,
            ts.max(not_before),
            paths.label(path),
            format!("{more} more retransmission(s) of missing {unit_name}s"),
        );
    }
}

/// How a stall ended. When the sender's capture names the transmission of every piece that
/// filled a missing unit, by those (a timeout retransmission among them makes it a timeout, as
/// for TCP; only late originals: reordering, or the other path's copy); otherwise by the
/// retransmissions seen (the incident book's rule when it closes), or, none seen where the
/// sender is observed, the late original.
fn recovery(
    inc: &HolIncident,
    g: &OpenGap,
    fills: u8,
    other_path: bool,
    sender_seen: bool,
) -> Recovery {
    let late_original = if other_path {
        Recovery::OtherPath
    } else {
        Recovery::Reordered
    };
    if fills != 0 && fills & filled_by::UNKNOWN == 0 {
        return if fills & filled_by::TIMEOUT != 0 {
            Recovery::Timeout
        } else if fills & filled_by::FAST != 0 {
            Recovery::Fast
        } else {
            late_original
        };
    }
    let retransmitted =
        inc.fast_retransmits > 0 || inc.timeout_retransmits > 0 || g.unknown_resends > 0;
    if !retransmitted && (other_path || sender_seen) {
        late_original
    } else {
        inc.recovery
    }
}

impl Shared {
    /// Records that the receiver got `[start, start+len)`; opens/closes HOL incidents.
    #[expect(
        clippy::too_many_arguments,
        reason = "a piece's figures, passed through from the matchers"
    )]
    #[inline(always)]
    pub(crate) fn gap_deliver(
        &mut self,
        fr: FlowRef,
        sel: GapSel,
        start: u64,
        len: u64,
        bytes: u64,
        msg_end: bool,
        path: PathIdx,
        ts: u64,
    ) {
        // The common case first, inlined where it is called: in order or a duplicate, with no
        // gap open.
        if let Some(t) = self
            .flows
            .get_mut(fr)
            .and_then(|f| tracker(&mut f.proto, sel, Some(ts)))
        {
            if t.deliver_plain(start, start.saturating_add(len.max(1))) {
                return;
            }
        }
        self.gap_deliver_held(fr, sel, start, len, bytes, msg_end, path, ts);
    }

    /// Opens the stall of the hole in front of tracker `sel`'s held pieces when no gap is open
    /// (the pieces were held behind a gap past it, now closed: an arrival in order there turned
    /// out dropped by the receiver), from `since` (the first arrival held behind the hole), the
    /// hole shown on `path`.
    pub(crate) fn gap_open_in_front(
        &mut self,
        fr: FlowRef,
        sel: GapSel,
        since: u64,
        path: PathIdx,
    ) {
        let Some(f) = self.flows.get_mut(fr) else {
            return;
        };
        let name: &str = f.name.get_or_insert_with(|| f.key.name());
        let Some(t) = tracker(&mut f.proto, sel, None) else {
            return;
        };
        let Some((missing, end)) = t.hole().filter(|_| t.gap.is_none()) else {
            return;
        };
        let mut inc = sel.stall(name, (missing, end), since);
        let (unit, label) = (sel.unit(), self.paths.label(path));
        let what = format!(
            "{unit} {} arrived while {unit} {} was missing",
            sel.shown(end),
            sel.shown(missing)
        );
        push_evidence(&mut inc, since, label, what);
        let book = &mut self.incidents;
        let id = open_in_front(t, book, &mut f.incidents, &self.paths, unit, inc);
        if let Some(inc) = book.get_mut(id) {
            (inc.messages_held, inc.bytes_held) = t.held_by_gap();
        }
    }

    /// [`Shared::gap_deliver`] of a piece that changes more than the next unit expected (a gap
    /// opens, narrows or fills, or pieces are held).
    #[expect(
        clippy::too_many_arguments,
        reason = "a piece's figures, passed through from the matchers"
    )]
    #[inline(never)]
    fn gap_deliver_held(
        &mut self,
        fr: FlowRef,
        sel: GapSel,
        start: u64,
        len: u64,
        bytes: u64,
        msg_end: bool,
        path: PathIdx,
        ts: u64,
    ) {
        let Some(f) = self.flows.get_mut(fr) else {
            return;
        };
        let name: &str = f.name.get_or_insert_with(|| f.key.name());
        let Some(t) = tracker(&mut f.proto, sel, Some(ts)) else {
            return;
        };
        let paths = &self.paths;
        let label = paths.label(path);
        let incidents = &mut self.incidents;
        let protocol = sel.protocol();
        let unit = sel.unit();
        let show = |u: u64| sel.shown(u);
        let gap_before = t.gap;
        // The first unit this piece brings that was not delivered yet.
        let first_new = t.next().map_or(start, |n| start.max(n));
        let mut opened = false;
        let d = t.deliver(
            start,
            start.saturating_add(len.max(1)),
            ts,
            bytes,
            msg_end,
            path,
            |missing| {
                opened = true;
                let mut inc = sel.stall(name, (missing, start), ts);
                let what = if matches!(
                    sel,
                    GapSel::Tcp {
                        from_acks: true,
                        ..
                    }
                ) {
                    format!(
                        "{unit} {} first sent; {unit} {} behind it acknowledged only with it",
                        show(missing),
                        show(start)
                    )
                } else {
                    format!(
                        "{unit} {} arrived while {unit} {} was missing",
                        show(start),
                        show(missing)
                    )
                };
                push_evidence(&mut inc, ts, label, what);
                incidents.open(inc)
            },
        );
        match d {
            Delivery::Buffered { .. } => {
                let Some(g) = t.gap else { return };
                if opened {
                    f.incidents += 1;
                    // Retransmissions the sender made before the receiver showed the gap.
                    let pending = t.take_pending(g.missing_end);
                    if let (Some(inc), Some(g)) = (incidents.get_mut(g.incident), t.gap.as_mut()) {
                        attach_pending(inc, &mut g.unknown_resends, unit, pending, paths, 0);
                    }
                }
                if let Some(inc) = incidents.get_mut(g.incident) {
                    (inc.messages_held, inc.bytes_held) = t.held_by_gap();
                }
            }
            Delivery::Narrowed { messages, bytes } => {
                let (Some(g), Some(next)) = (t.gap, t.next()) else {
                    return;
                };
                if let Some(inc) = incidents.get_mut(g.incident) {
                    (inc.messages_held, inc.bytes_held) = t.held_by_gap();
                    let released = if messages > 0 || bytes > 0 {
                        format!(" ({messages} message(s), {bytes} bytes released)")
                    } else {
                        String::new()
                    };
                    push_evidence(
                        inc,
                        ts,
                        label,
                        format!(
                            "{unit} {} arrived{released}; {unit} {} still missing",
                            show(first_new),
                            show(next)
                        ),
                    );
                }
            }
            Delivery::Filled {
                messages,
                bytes: held_bytes,
                still_gapped_since,
                filled_by: fills,
            } => {
                let Some(mut g) = gap_before else { return };
                let other_path = g.revealed_on != path;
                let next = t.next().unwrap_or(0);
                // Retransmissions of the missing units not counted yet; those of units lost
                // behind the held data and recovered before it was released had no stall of
                // their own and are not this one's.
                let mut pending = t.take_pending(next);
                pending.retain(|(u, _)| *u < g.missing_end);
                let sender_seen = path < 64 && t.sender_paths & (1 << path) != 0;
                if let Some(inc) = incidents.get_mut(g.incident) {
                    let since = inc.start_ns;
                    attach_pending(inc, &mut g.unknown_resends, unit, pending, paths, since);
                    inc.messages_held = messages;
                    inc.bytes_held = held_bytes;
                    inc.recovery = recovery(inc, &g, fills, other_path, sender_seen);
                    push_evidence(
                        inc,
                        ts,
                        label,
                        format!(
                            "{unit} {} arrived, gap filled; {messages} message(s), {held_bytes} bytes were held",
                            show(first_new)
                        ),
                    );
                }
                if let Some(since) = still_gapped_since {
                    let end = t.hole().map_or(next.saturating_add(1), |h| h.1);
                    let mut inc = sel.stall(name, (next, end), since);
                    push_evidence(
                        &mut inc,
                        since,
                        label,
                        format!("{unit} {} still missing", show(next)),
                    );
                    open_in_front(t, incidents, &mut f.incidents, paths, unit, inc);
                }
                if let Some(mut inc) = incidents.close(g.incident, ts) {
                    if let (GapSel::Quic { up, stream, .. }, Proto::Quic(q)) = (sel, &f.proto) {
                        inc.streams_not_held = q.streams_active_since(up, stream, inc.start_ns);
                    }
                    let text = || {
                        format!(
                            "{} HOL on {}: {} held {:.1} ms ({} message(s)), recovery {:?}",
                            match protocol {
                                HolProtocol::Kcp => "KCP",
                                HolProtocol::Quic => "QUIC",
                                HolProtocol::Tcp => "TCP",
                            },
                            inc.flow,
                            inc.missing,
                            inc.stall_ns as f64 / 1e6,
                            inc.messages_held,
                            inc.recovery
                        )
                    };
                    self.event(ts, Severity::Warn, text);
                    self.push_record(crate::record::Record::HolIncident(inc));
                }
            }
            Delivery::Duplicate | Delivery::InOrder => {}
        }
    }

    /// The receiver's own word that its in-order data ends at `unit` (a capture begun
    /// mid-stream): the tracker `sel` starts over there, and a stall it had open, never one,
    /// is withdrawn.
    pub(crate) fn gap_restart(&mut self, fr: FlowRef, sel: GapSel, unit: u64) {
        let Some(f) = self.flows.get_mut(fr) else {
            return;
        };
        let Some(t) = tracker(&mut f.proto, sel, None) else {
            return;
        };
        if let Some(id) = t.restart_at(unit) {
            withdraw_stall(&mut self.incidents, &mut f.incidents, id);
        }
    }

    /// A retransmission of `unit` was seen: if it is missing in front of the held data, count
    /// it as fast (at least two later pieces had arrived) or timeout. Used where the sender's
    /// side is not observed or its timing not interpreted (QUIC, KCP seen at the receiver).
    pub(crate) fn gap_retransmit(
        &mut self,
        fr: FlowRef,
        sel: GapSel,
        unit: u64,
        path: PathIdx,
        ts: u64,
        unit_name: &str,
    ) {
        let label = self.paths.label(path).to_owned();
        let Some(f) = self.flows.get_mut(fr) else {
            return;
        };
        let Some(t) = tracker(&mut f.proto, sel, None) else {
            return;
        };
        let Some(g) = t.gap else { return };
        if !t.blocks(unit) {
            return;
        }
        let fast = t.waiting() >= 2;
        if let Some(inc) = self.incidents.get_mut(g.incident) {
            if fast {
                inc.fast_retransmits += 1;
            } else {
                inc.timeout_retransmits += 1;
            }
            push_evidence(
                inc,
                ts,
                &label,
                format!(
                    "{unit_name} {unit} retransmitted on {label} ({})",
                    if fast { "fast" } else { "timeout" }
                ),
            );
        }
    }

    /// The sender retransmitted `unit` (its kind told from the sender's own view): counted on
    /// the incident whose stall it is missing in, now or when the receiver shows the gap.
    pub(crate) fn gap_resent(
        &mut self,
        fr: FlowRef,
        sel: GapSel,
        unit: u64,
        kind: Resend,
        path: PathIdx,
        ts: u64,
    ) {
        let label = self.paths.label(path);
        let Some(f) = self.flows.get_mut(fr) else {
            return;
        };
        let Some(t) = tracker(&mut f.proto, sel, None) else {
            return;
        };
        let open = t.gap.filter(|_| t.blocks(unit));
        match open.and_then(|g| self.incidents.get_mut(g.incident)) {
            Some(inc) => {
                if let Some(g) = t.gap.as_mut() {
                    count_resend(
                        inc,
                        &mut g.unknown_resends,
                        sel.unit(),
                        unit,
                        kind,
                        ts,
                        label,
                    );
                }
            }
            None => t.note_resend(unit, ts, path, kind),
        }
    }
}
