//! TCP from the wire, at the receiver: holes in each direction's byte stream and the data held
//! behind them (HOL incidents, through the engine's one gap tracker, [`crate::hol`]), and the
//! messages a capture cut from the byte stream by its framing (`--framing`).
//!
//! - Receiver captured: each data segment arriving there is a delivery; a segment past a hole
//!   opens a stall that the segment filling the hole ends (`stall_from: receiver_arrivals`).
//! - Sender captured alone: the receiver's stall is inferred from the ACKs. When a cumulative
//!   ACK passes a retransmission and data sent behind it, that data was held at the receiver
//!   from (at the latest) the hole's first transmission until the retransmission arrived
//!   (`stall_from: sent_to_acked`: first send → that ACK, about a round trip longer).
//! - A receiver's capture sees segments before its kernel takes them: where the receiver's
//!   ACKs are seen there, the arrival that fills a hole ends the stall only once an ACK takes
//!   it ([`HoleFill`]); one its kernel dropped leaves the stall open for the next copy.
//! - Either way, the retransmissions the sender's capture classified are counted on the stall
//!   they were sent for, and say how it was filled.
//! - Messages: sighted where the capture completed them (at the sender: its last byte first
//!   sent; at the receiver: its last missing byte arrived); with both ends captured the copy's
//!   latency is one way, with the sender alone it ends at the cumulative ACK passing it.

use std::collections::VecDeque;

use smallvec::SmallVec;

use crate::capture::Dir;
use crate::flow::{FlowRef, Proto};
use crate::hol::{GapTracker, IncidentBook, Resend, Transmission};
use crate::input::TcpSegment;
use crate::matcher::gaps::{withdraw_stall, GapSel};
use crate::matcher::mix;
use crate::matcher::tcp::Arrivals;
use crate::matcher::tcpwire::{Arrival, NOT_TAKEN_AFTER_NS};
use crate::message::MsgId;
use crate::record::TcpRetransmitKind;
use crate::shared::{Pkt, Shared};

/// An arrival `[start, end)` (unwrapped) at the receiver's capture that fills the hole
/// starting at `hole`, as [`data`] would have delivered it: it waits for the receiver's ACKs
/// (seen leaving that capture) to take it before it ends the stall ([`HoleFill::verdict`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct HoleFill {
    /// Its direction (client → server).
    up: bool,
    hole: u64,
    start: u64,
    end: u64,
    ts_ns: u64,
    path: crate::paths::PathIdx,
    behind: u64,
    arriving: Option<Transmission>,
}

/// What an ACK of the receiver's says of a [`HoleFill`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FillVerdict {
    /// Taken: the stall ends at its arrival.
    Taken,
    /// Dropped past the capture point: the stall goes on.
    Dropped,
    /// Not told yet.
    Waiting,
}

impl HoleFill {
    /// What the receiver's ACK at `ts_ns`, acknowledging up to `ack` (unwrapped), says of it:
    /// taken if it passes the hole's first byte; dropped if it does not and comes
    /// [`NOT_TAKEN_AFTER_NS`] or more after the fill (the receiver ACKs a fill at once).
    pub(crate) fn verdict(&self, ack: Option<u64>, ts_ns: u64) -> FillVerdict {
        match ack {
            Some(a) if a > self.hole => FillVerdict::Taken,
            Some(_) if ts_ns >= self.ts_ns.saturating_add(NOT_TAKEN_AFTER_NS) => {
                FillVerdict::Dropped
            }
            _ => FillVerdict::Waiting,
        }
    }

    /// Delivers it (to flow `fr`) at its arrival.
    pub(crate) fn deliver(self, shared: &mut Shared, fr: FlowRef) {
        let up = self.up;
        if let Some(t) = tracker(shared, fr, up) {
            t.behind = self.behind;
            t.arriving = self.arriving;
        }
        let len = self.end - self.start;
        shared.gap_deliver(
            fr,
            at_receiver(up),
            self.start,
            len,
            len,
            false,
            self.path,
            self.ts_ns,
        );
    }
}

/// Messages awaiting their cumulative ACK, per direction at one capture.
pub const MAX_OUTSTANDING: usize = 4096;
/// Retransmissions whose acknowledgment one ACK passes on (more are still classified and
/// counted by the wire matcher; only their part in a stall is not).
pub(crate) const MAX_RESENDS_PER_ACK: usize = 16;

/// What the wire matcher made of one segment.
#[derive(Debug, Default)]
pub(crate) struct Facts {
    /// Its payload, as unwrapped sequence numbers `[start, end)`.
    pub data: Option<(u64, u64)>,
    /// When the capture saw the SYN: where the receiver's delivery starts if not followed yet
    /// (unwrapped; its sender's first data byte, past what the capture saw arrive in order).
    pub first_byte: Option<u64>,
    /// It resent data, of this kind.
    pub resent: Option<TcpRetransmitKind>,
    /// It moved the cumulative ACK of the other direction's data.
    pub acked: Option<Acked>,
    /// The messages it completes at its capture, unwrapped.
    pub messages: SmallVec<[(u64, u64); 1]>,
    /// It arrived at the receiver's capture, where the receiver's ACKs are seen leaving: an
    /// arrival that fills a hole waits for them ([`HoleFill`]).
    pub fill_waits: bool,
}

/// A capture begun after a stream's start, whose first data seen arriving lay past a hole
/// (lost before the capture began, or on its way): the receiver's first ACK leaving it says
/// its in-order data ends below (all unwrapped sequence numbers).
#[derive(Debug)]
pub(crate) struct BegunPastHole {
    /// The receiver's cumulative ACK: the hole's start.
    pub from: u64,
    /// The first data seen: the hole's end.
    pub origin: u64,
    /// The end of the data seen since.
    pub seen_end: u64,
    /// When the first data was seen.
    pub at_ns: u64,
}

/// A cumulative ACK that moved.
#[derive(Debug)]
pub(crate) struct Acked {
    /// The cumulative ACK before.
    pub from: u64,
    /// And now.
    pub to: u64,
    /// When the segment holding `from` was first sent, if remembered.
    pub first_sent_ns: Option<u64>,
    /// The (not spurious) retransmissions it acknowledged: range and kind, oldest first.
    pub resends: SmallVec<[(u64, u64, TcpRetransmitKind); 2]>,
}

/// Messages sent and not yet acknowledged (one direction, one capture): end, key, slot.
#[derive(Debug, Default)]
pub(crate) struct Outstanding {
    queue: VecDeque<(u64, u64, u32)>,
}

/// The engine's name of a retransmission kind in a stall.
fn resend_of(kind: TcpRetransmitKind) -> Resend {
    match kind {
        TcpRetransmitKind::Rto | TcpRetransmitKind::LossRecovery => Resend::Timeout,
        TcpRetransmitKind::Fast | TcpRetransmitKind::LossProbe => Resend::Fast,
        // Neither a timer nor the receiver's ACKs: a router's word (the stall's resend counts
        // with those of no known kind).
        TcpRetransmitKind::PathMtu | TcpRetransmitKind::Other => Resend::Unknown,
    }
}

/// The receive tracker of flow `fr`'s data in direction `up`.
fn tracker(shared: &mut Shared, fr: FlowRef, up: bool) -> Option<&mut GapTracker> {
    match shared.flows.get_mut(fr).map(|f| &mut f.proto) {
        Some(Proto::Tcp(s)) => s.rx.get_mut(usize::from(up)),
        _ => None,
    }
}

/// What packet `pkt` shows of the receiver of flow `fr`'s data in direction `up`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shows {
    /// Nothing.
    Nothing,
    /// The data arriving at `pkt`'s capture (its receiver's).
    Arriving,
    /// `pkt`'s capture at the data's sender (the data leaving, its ACK arriving).
    Sender,
}

/// Forgets what tracker `t` was told under a guess shown wrong, and the stall it had open
/// (withdrawn from `book` and from its flow's count of `incidents`).
#[cold]
fn undo_guess(t: &mut GapTracker, book: &mut IncidentBook, incidents: &mut u64) {
    if let Some(g) = std::mem::take(t).gap {
        withdraw_stall(book, incidents, g.incident);
    }
}

/// The receiver's tracker of flow `fr`'s data in direction `up`, once that data was seen
/// arriving at a receiver's capture (`shows` may say it is now); `None` before. Arrivals seen
/// at a capture not placed yet (their direction a guess) are undone when a later packet shows
/// that capture at the data's sender.
fn seen_arriving<'a>(
    shared: &'a mut Shared,
    fr: FlowRef,
    up: bool,
    pkt: &Pkt,
    shows: Shows,
) -> Option<&'a mut GapTracker> {
    let guessed = shows == Shows::Arriving
        && !pkt.paired
        && shared
            .caps
            .get(pkt.capture)
            .is_some_and(crate::capture::CaptureState::unplaced);
    let f = shared.flows.get_mut(fr)?;
    let Proto::Tcp(s) = &mut f.proto else {
        return None;
    };
    let seen = &mut s.rx_arrivals[usize::from(up)];
    match (shows, *seen) {
        (Shows::Arriving, Arrivals::Seen) | (Shows::Nothing, _) => {}
        (Shows::Arriving, _) if guessed => *seen = Arrivals::Guessed(pkt.capture),
        (Shows::Arriving, _) => *seen = Arrivals::Seen,
        (Shows::Sender, Arrivals::Guessed(c)) if c == pkt.capture => {
            // What the guess delivered was sent, not received (a hole among it is bytes
            // sent before the capture began, no stall): the receiver's stream is followed
            // from the ACKs instead, from scratch.
            *seen = Arrivals::None;
            undo_guess(
                &mut s.rx[usize::from(up)],
                &mut shared.incidents,
                &mut f.incidents,
            );
        }
        (Shows::Sender, _) => {}
    }
    if *seen == Arrivals::None {
        None
    } else {
        s.rx.get_mut(usize::from(up))
    }
}

/// Whether flow `fr`'s `up` stream is followed by its arrivals at a receiver's capture (also
/// under the ports' guess).
fn followed(shared: &Shared, fr: FlowRef, up: bool) -> bool {
    matches!(
        shared.flows.peek(fr).map(|f| &f.proto),
        Some(Proto::Tcp(s)) if s.rx_arrivals[usize::from(up)] != Arrivals::None
    )
}

/// The receive tracker of the `up` direction as its receiver's capture follows it (deliveries
/// seen there, not inferred from ACKs at the sender's).
fn at_receiver(up: bool) -> GapSel {
    GapSel::Tcp {
        up,
        from_acks: false,
    }
}

/// Whether the kernel's probes report on flow `fr`: they then make its stalls' incidents from
/// the socket itself, and the wire does not infer a second one from the sender's capture.
fn kernel_follows(shared: &mut Shared, fr: FlowRef) -> bool {
    matches!(shared.flows.get_mut(fr).map(|f| &f.proto), Some(Proto::Tcp(s)) if s.last_event_ns > 0)
}

/// Segment `t` of flow `fr`, seen as `pkt`, as the wire matcher read it (`facts`); `sent`
/// holds the messages its sender sent at this capture, `acked` those of the other direction.
/// Returns the arrival that fills a hole at the receiver's capture, to wait for the
/// receiver's ACKs ([`HoleFill`]).
pub(crate) fn follow(
    shared: &mut Shared,
    fr: FlowRef,
    pkt: &mut Pkt,
    t: &TcpSegment,
    facts: &Facts,
    sent: &mut Outstanding,
    acked: &mut Outstanding,
) -> Option<HoleFill> {
    let up = pkt.up.unwrap_or(true);
    let mut fill = None;
    let (tsval, tsecr) = t.options.timestamps.unwrap_or((0, 0));
    let tuple = pkt.tuple;
    let identity = |tag: u64| {
        mix(&[
            tag,
            tuple,
            u64::from(t.seq),
            u64::from(t.ack),
            u64::from(t.len),
            u64::from(t.window),
            u64::from(tsval),
            u64::from(tsecr),
        ])
    };
    if let Some(range) = facts.data {
        if facts.resent.is_none() {
            // New bytes seen at two captures not yet paired: evidence that they show one
            // path at its two ends (a capture's data is its own evidence, with or without
            // `--framing`); at both ends of a paired path, a delay sample. A resend is
            // left out: its copies look alike. The segment that pairs its capture goes on as
            // the pair places it (its path is the far end's now).
            if shared.echo(|| identity(16), pkt, true) {
                shared.repaired(pkt, &t.meta);
            }
        }
        fill = data(shared, fr, pkt, up, range, facts);
    } else if !t.flags.syn() && !t.flags.fin() {
        // A bare ACK seen at both ends of a paired path: a delay sample the other way than
        // data, for the far end's clock offset.
        shared.echo(|| identity(15), pkt, false);
    }
    for &(a, b) in &facts.messages {
        if message(shared, fr, pkt, up, (a, b), sent) {
            shared.repaired(pkt, &t.meta);
        }
    }
    if let Some(a) = &facts.acked {
        acknowledged(shared, fr, pkt, !up, a, acked);
    }
    fill
}

/// The receiver's capture began after the `data_up` stream's start, just past a hole (`h`):
/// its receive tracking, begun at the first data seen, starts at the hole instead, and what
/// the capture saw from then on was held behind it from its first arrival.
pub(crate) fn begun_past_hole(
    shared: &mut Shared,
    fr: FlowRef,
    pkt: &Pkt,
    data_up: bool,
    h: &BegunPastHole,
) {
    if !settled(shared, pkt) {
        return;
    }
    let Some(t) = seen_arriving(shared, fr, data_up, pkt, Shows::Arriving) else {
        return;
    };
    let end = if t.next().is_none() {
        // The data seen so far was taken for sent (the capture was not placed yet).
        t.start_at(h.from);
        h.seen_end
    } else if let Some((_, end)) = t.restart_below(h.origin, h.from) {
        end
    } else {
        return;
    };
    t.untold();
    let len = end.saturating_sub(h.origin);
    let sel = at_receiver(data_up);
    shared.gap_deliver(fr, sel, h.origin, len, len, false, pkt.path, h.at_ns);
}

/// An arrival `[from, end)` of the `data_up` stream its receiver did not take (dropped past
/// the capture point), judged as `pkt` is seen: a hole at the receiver. Delivered in order at
/// its arrival, the deliveries after it (`later`, in arrival order; `None` once no longer
/// remembered) are redone behind it, a stall from the first of them that the next copy ends;
/// held behind an open gap, it is taken out of what the gap holds; never delivered (a fill
/// that waited for the receiver's ACK, or the capture not yet placed), nothing is undone.
/// False when its stall cannot be made: delivered, and what followed can no longer be redone
/// (forgotten, or none with a gap open past it, or held merged with another piece).
pub(crate) fn dropped_arrival(
    shared: &mut Shared,
    fr: FlowRef,
    pkt: &Pkt,
    data_up: bool,
    (from, end): (u64, u64),
    later: Option<&[Arrival]>,
) -> bool {
    if !settled(shared, pkt) {
        return true;
    }
    let Some(t) = seen_arriving(shared, fr, data_up, pkt, Shows::Nothing) else {
        return true;
    };
    let Some(next) = t.next() else {
        return true;
    };
    if from >= next {
        // Held behind the gap (taken out of it), or never delivered.
        return t.withdraw(from, end) || !t.has(from);
    }
    let Some(later) = later else {
        return false;
    };
    let mut behind = later.iter().filter(|a| a.end > from).peekable();
    if !rewind_receiver(shared, fr, data_up, from, behind.peek().is_some()) {
        return false;
    }
    let sel = at_receiver(data_up);
    let since = behind.peek().map(|a| a.at_ns);
    let mut messages = 0;
    for a in behind {
        let len = a.end - a.start;
        shared.gap_deliver(fr, sel, a.start, len, len, false, pkt.path, a.at_ns);
        messages += u64::from(a.messages);
    }
    // Pieces held behind a gap past it were held already: the stall in front of them is
    // opened here, from the first arrival after the drop.
    if let Some(since) = since {
        shared.gap_open_in_front(fr, sel, since, pkt.path);
    }
    if let Some(t) = tracker(shared, fr, data_up) {
        t.held_behind_gap(messages);
    }
    true
}

/// Moves the receiver's tracker of flow `fr`'s `data_up` stream back to `unit`. A gap open past
/// it (a hole lost upstream, or another drop) is closed without a stall, its pieces held
/// still: once the deliveries after `unit` are redone (`redone`: there are some), they and
/// those pieces are held behind the hole at `unit`, and when it is filled the hole past it is
/// a stall again, from the earliest of them (as after any fill with data still missing).
/// False, with nothing done, when nothing from `unit` on was delivered, or a gap is open and
/// nothing would be redone.
fn rewind_receiver(
    shared: &mut Shared,
    fr: FlowRef,
    data_up: bool,
    unit: u64,
    redone: bool,
) -> bool {
    let Some(f) = shared.flows.get_mut(fr) else {
        return false;
    };
    let Proto::Tcp(s) = &mut f.proto else {
        return false;
    };
    let Some(t) = s.rx.get_mut(usize::from(data_up)) else {
        return false;
    };
    if t.next().is_none_or(|n| n <= unit) || (t.gap.is_some() && !redone) {
        return false;
    }
    if let Some(g) = t.gap.take() {
        withdraw_stall(&mut shared.incidents, &mut f.incidents, g.incident);
    }
    t.untold();
    t.rewind(unit)
}

/// Whether the capture's role at its end of the path is settled: paired with the capture at
/// the other end, no other capture that could be that end, or placed at its end (stated, or
/// inferred from a handshake or TTLs). (Until then each capture is taken to be the T-Box's:
/// the receiver's would see its arrivals as sends.)
fn settled(shared: &Shared, pkt: &Pkt) -> bool {
    pkt.paired
        || !shared.caps.several_unpaired()
        || shared.caps.get(pkt.capture).is_some_and(|c| !c.unplaced())
}

/// A data segment `[s, e)` from the `up` side; at the receiver's capture, an arrival that
/// fills the hole is returned instead of delivered when [`Facts::fill_waits`].
fn data(
    shared: &mut Shared,
    fr: FlowRef,
    pkt: &Pkt,
    up: bool,
    (s, e): (u64, u64),
    f: &Facts,
) -> Option<HoleFill> {
    if !settled(shared, pkt) {
        return None;
    }
    match pkt.dir {
        Dir::In => {
            // Arrived at the receiver's capture: the messages it completes past its own end
            // were held behind a hole it fills.
            let mut fills = None;
            let behind = f.messages.iter().filter(|m| m.1 > e).count() as u64;
            // A resend as this capture tells it (its ACKs and timestamps): what filled the
            // hole, also where the sender is not captured.
            let arriving = f.resent.map(|k| Transmission::Retransmission(resend_of(k)));
            let first_followed = !followed(shared, fr, up);
            if let Some(t) = seen_arriving(shared, fr, up, pkt, Shows::Arriving) {
                // Where the capture saw the SYN, the stream starts after it: a first data
                // segment lost on the way is a hole like any later one (the first arrival
                // would otherwise be taken for the stream's start). At the first arrival
                // followed, what the capture saw arrive in order before (placed late, by
                // pairing) was delivered.
                if let Some(first) = f.first_byte {
                    t.start_at(first);
                    if let Some(next) = t.next().filter(|_| first_followed) {
                        t.deliver_plain(next, first);
                    }
                }
                fills = t
                    .gap
                    .and(t.hole())
                    .map(|(n, _)| n)
                    .filter(|&n| f.fill_waits && s <= n && n < e);
                // A fill that waits tells them when it is delivered.
                (t.behind, t.arriving) = match fills {
                    None => (behind, arriving),
                    Some(_) => (0, None),
                };
            }
            if let Some(hole) = fills {
                // Ends the stall once the receiver's ACK takes it (an earlier fill still
                // waiting was not taken before this copy came).
                return Some(HoleFill {
                    up,
                    hole,
                    start: s,
                    end: e,
                    ts_ns: pkt.ts_ns,
                    path: pkt.path,
                    behind,
                    arriving,
                });
            }
            let sel = at_receiver(up);
            shared.gap_deliver(fr, sel, s, e - s, e - s, false, pkt.path, pkt.ts_ns);
        }
        Dir::Out => {
            if let Some(t) = tracker(shared, fr, up) {
                if pkt.path < 64 {
                    t.sender_paths |= 1 << pkt.path;
                }
            }
            if let Some(kind) = f.resent {
                let sel = GapSel::Tcp {
                    up,
                    from_acks: seen_arriving(shared, fr, up, pkt, Shows::Sender).is_none(),
                };
                shared.gap_resent(fr, sel, s, resend_of(kind), pkt.path, pkt.ts_ns);
            }
        }
        Dir::Unknown => {}
    }
    None
}

/// A message `[a, b)` of the `up` direction completed at this capture; true when its copy
/// paired the capture with the far end's.
fn message(
    shared: &mut Shared,
    fr: FlowRef,
    pkt: &Pkt,
    up: bool,
    (a, b): (u64, u64),
    sent: &mut Outstanding,
) -> bool {
    let (seq, len) = (a as u32, u32::try_from(b - a).unwrap_or(u32::MAX));
    let key = mix(&[14, u64::from(up), u64::from(seq), u64::from(len)]);
    let r = shared.sight(pkt.sighting(fr, key, MsgId::Tcp { up, seq, len }, b - a));
    if pkt.dir == Dir::Out && !r.late {
        if sent.queue.len() >= MAX_OUTSTANDING {
            sent.queue.pop_front();
            shared.evicted_unacked += 1;
        }
        sent.queue.push_back((b, key, r.slot.unwrap_or(u32::MAX)));
    }
    r.paired_now
}

/// The cumulative ACK of the `data_up` direction moved (`a`), seen as `pkt`.
fn acknowledged(
    shared: &mut Shared,
    fr: FlowRef,
    pkt: &Pkt,
    data_up: bool,
    a: &Acked,
    msgs: &mut Outstanding,
) {
    if pkt.dir == Dir::Out {
        receiver_acked(shared, fr, pkt, data_up, a);
        return;
    }
    // Only where the ACK reached the data's sender: this capture saw the data sent.
    if pkt.dir != Dir::In {
        return;
    }
    if !pkt.paired
        && settled(shared, pkt)
        && seen_arriving(shared, fr, data_up, pkt, Shows::Sender).is_none()
        && !kernel_follows(shared, fr)
    {
        infer_stall(shared, fr, pkt, data_up, a, msgs);
    }
    while let Some(&(end, key, hint)) = msgs.queue.front() {
        if end > a.to {
            break;
        }
        msgs.queue.pop_front();
        if let Some(slot) = shared.msgs.ack(fr.uid, key, hint, pkt.path, pkt.ts_ns) {
            shared.maybe_complete(fr, slot);
        }
    }
}

/// The receiver's own cumulative ACK (`a`, leaving the receiver's capture): it holds every
/// byte below it, also those this capture never saw arrive (sent before the capture began,
/// or dropped by it), so a hole it passes is filled — by what, this capture cannot say.
fn receiver_acked(shared: &mut Shared, fr: FlowRef, pkt: &Pkt, data_up: bool, a: &Acked) {
    if !settled(shared, pkt) {
        return;
    }
    let Some(t) = seen_arriving(shared, fr, data_up, pkt, Shows::Nothing) else {
        return;
    };
    t.untold();
    // From where the tracker stands, if below (ACKs before the capture was placed moved the
    // cumulative ACK unfollowed).
    let from = t.next().map_or(a.from, |n| n.min(a.from));
    shared.gap_deliver(
        fr,
        at_receiver(data_up),
        from,
        a.to.saturating_sub(from),
        0,
        false,
        pkt.path,
        pkt.ts_ns,
    );
}

/// At the sender's capture alone: the receiver's delivery as its ACKs show it. Data the ACK
/// passes behind a retransmission it also passes was held at the receiver from the hole's
/// first transmission until the ACK.
fn infer_stall(
    shared: &mut Shared,
    fr: FlowRef,
    pkt: &Pkt,
    up: bool,
    a: &Acked,
    msgs: &Outstanding,
) {
    let sel = GapSel::Tcp {
        up,
        from_acks: true,
    };
    let hole_end = a
        .resends
        .iter()
        .filter(|r| r.1 > a.from)
        .map(|r| r.1.min(a.to))
        .max();
    match (hole_end, a.first_sent_ns) {
        (Some(r), Some(first)) if r < a.to && r > a.from => {
            // The retransmission that filled the hole: the last one that resent its start.
            let kind = a
                .resends
                .iter()
                .rev()
                .find(|x| x.0 <= a.from && x.1 > a.from)
                .or(a.resends.last())
                .map(|x| resend_of(x.2));
            let behind = msgs.queue.iter().filter(|m| m.0 > r && m.0 <= a.to).count() as u64;
            shared.gap_deliver(fr, sel, r, a.to - r, a.to - r, false, pkt.path, first);
            if let Some(t) = tracker(shared, fr, up) {
                t.arriving = kind.map(Transmission::Retransmission);
                t.behind = behind;
            }
            shared.gap_deliver(fr, sel, a.from, r - a.from, 0, false, pkt.path, pkt.ts_ns);
        }
        _ => shared.gap_deliver(
            fr,
            sel,
            a.from,
            a.to - a.from,
            a.to - a.from,
            false,
            pkt.path,
            pkt.ts_ns,
        ),
    }
}
