//! TCP: no duplication across paths (one socket is one path); what matters is head-of-line
//! blocking. Kernel events (retransmit with kind, RTO expiry, congestion state, backoff end)
//! open and close incidents; captured segments add wire bytes, the original send time of the
//! lost segment, the bytes sent behind it, and the ACK that ends the stall.

use std::collections::VecDeque;
use std::net::SocketAddr;

use crate::capture::{is_uplink, Dir, EndEvidence};
use crate::flow::{FlowKey, FlowRef, Proto};
use crate::hol::push_evidence;
use crate::input::{CongState, RetransmitKind, TcpEvent, TcpEventKind, TcpFigures, TcpSegment};
use crate::matcher::after;
use crate::record::{HolIncident, HolProtocol, Record};
use crate::shared::{Pkt, Shared};
use crate::snapshot::{Severity, TcpRetransmission, TcpSample};

/// Samples, retransmissions and state changes kept per socket for the UI.
pub const MAX_HISTORY: usize = 256;

fn push_bounded<T>(q: &mut VecDeque<T>, item: T) {
    if q.len() >= MAX_HISTORY {
        q.pop_front();
    }
    q.push_back(item);
}

/// Per-socket TCP state.
#[derive(Debug, Default)]
pub struct TcpState {
    /// Path label of the socket.
    pub path: String,
    /// Latest kernel figures.
    pub figures: TcpFigures,
    /// Congestion state.
    pub cong_state: CongState,
    /// Connection state name.
    pub state: String,
    /// Last event.
    pub last_event_ns: u64,
    /// Recent samples for the UI's cwnd chart (bounded by [`MAX_HISTORY`]).
    pub history: VecDeque<TcpSample>,
    /// Recent retransmissions for the UI's backoff ladder (bounded by [`MAX_HISTORY`]).
    pub retransmission_log: VecDeque<TcpRetransmission>,
    /// Recent congestion-state changes (bounded by [`MAX_HISTORY`]).
    pub cong_changes: VecDeque<(u64, CongState)>,
    /// Open incident: id, missing seq, direction of the data (1 = client → server), its length.
    pub incident: Option<(u64, u32, usize, u32)>,
    /// Highest sequence end sent (captured segments), client→server and reverse.
    pub snd_end: [Option<u32>; 2],
    /// The receiver's view of each direction's byte stream from the wire (index 1:
    /// client → server): holes and the data held behind them.
    pub rx: [crate::hol::GapTracker; 2],
    /// Data of each direction was seen arriving at the receiver's capture (its stalls are
    /// then seen there, not inferred from ACKs at the sender's).
    pub rx_arrivals: [Arrivals; 2],
    /// The (at most two) captures that last saw data of each direction leave, and when
    /// (engine clock): paired with the receiver's, such a capture writes the direction's
    /// retransmissions.
    pub sent_at_sender: [[Option<(crate::input::CaptureId, u64)>; 2]; 2],
    /// The handshake so far at the (at most two) captures that saw its SYN last: the two
    /// ends of its path each place their own capture.
    handshakes: [Option<Handshake>; 2],
}

/// Whether a direction's data was seen arriving at a receiver's capture.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Arrivals {
    /// Not (yet).
    #[default]
    None,
    /// Only at this capture, before anything placed it: its direction there a guess (the
    /// T-Box's, by the ports), undone if it turns out to be the data's sender.
    Guessed(crate::input::CaptureId),
    /// At a capture placed or paired.
    Seen,
}

/// A handshake seen at one capture: its SYN and SYN-ACK (capture clock).
#[derive(Clone, Copy, Debug)]
struct Handshake {
    capture: crate::input::CaptureId,
    syn_ns: u64,
    syn_ack_ns: Option<u64>,
}

/// Which end of a connection a capture is at, from its handshake's two gaps (`first`: SYN →
/// SYN-ACK, `second`: SYN-ACK → the client's next segment): at the client the first is a
/// round trip and the second a turnaround, at the server the reverse. `Some(true)`: the
/// client's end; `None` when neither gap is clearly the round trip (four times the other and
/// 100 µs more: on one machine, or with a slow turnaround, they are alike).
fn capture_end(first: u64, second: u64) -> Option<bool> {
    const MARGIN_NS: u64 = 100_000;
    let clearly = |rtt: u64, turn: u64| rtt >= turn.saturating_mul(4).saturating_add(MARGIN_NS);
    if clearly(first, second) {
        Some(true)
    } else if clearly(second, first) {
        Some(false)
    } else {
        None
    }
}

/// Follows connection `s`'s handshake with segment `t` (seen as `pkt`, from the client when
/// `from_client`); when the client's first segment after the SYN-ACK completes it at the
/// capture that saw all three: which end that capture is at, and the two gaps.
fn handshake(
    s: &mut TcpState,
    t: &TcpSegment,
    pkt: &Pkt,
    from_client: bool,
) -> Option<(bool, EndEvidence)> {
    let at = pkt.capture;
    let here = |h: &Option<Handshake>| h.is_some_and(|h| h.capture == at);
    match (t.flags.syn(), t.flags.ack(), from_client) {
        (true, false, true) => {
            // This capture's, a free one, or the older capture's (the newer kept first).
            let i = match s.handshakes.iter().position(here) {
                Some(i) => i,
                None => match s.handshakes.iter().position(Option::is_none) {
                    Some(i) => i,
                    None => {
                        s.handshakes.swap(0, 1);
                        1
                    }
                },
            };
            if let Some(slot) = s.handshakes.get_mut(i) {
                *slot = Some(Handshake {
                    capture: at,
                    syn_ns: pkt.raw_ns,
                    syn_ack_ns: None,
                });
            }
            None
        }
        (true, true, false) => {
            if let Some(h) = s.handshakes.iter_mut().flatten().find(|h| h.capture == at) {
                h.syn_ack_ns = Some(pkt.raw_ns);
            }
            None
        }
        (false, _, true) => {
            let h = s.handshakes.iter_mut().find(|h| here(h))?.take()?;
            let syn_ack = h.syn_ack_ns?;
            let (first, second) = (
                syn_ack.saturating_sub(h.syn_ns),
                pkt.raw_ns.saturating_sub(syn_ack),
            );
            capture_end(first, second).map(|end| (end, EndEvidence::Handshake { first, second }))
        }
        _ => None,
    }
}

impl TcpState {
    /// Exchanges what is kept per direction (client → server and reverse): the connection's
    /// client turned out to be the other side.
    fn turn_round(&mut self) {
        self.snd_end.swap(0, 1);
        self.rx.swap(0, 1);
        self.rx_arrivals.swap(0, 1);
        self.sent_at_sender.swap(0, 1);
        if let Some(inc) = &mut self.incident {
            inc.2 = 1 - inc.2.min(1);
        }
    }
}

/// Whether `a`, talking with `b`, is the client as guessed from the ports (the higher one's
/// side).
fn guessed_client(a: &SocketAddr, b: &SocketAddr) -> bool {
    is_uplink(a, b).unwrap_or(true)
}

/// The flow key of the connection of `a` and `b`, `a` its client when `a_is_client`.
fn tcp_key(a: SocketAddr, b: SocketAddr, a_is_client: bool) -> FlowKey {
    let (client, server) = if a_is_client { (a, b) } else { (b, a) };
    FlowKey::Tcp { client, server }
}

/// The key turned round: client and server exchanged.
fn turned_key(key: &FlowKey) -> FlowKey {
    match key {
        FlowKey::Tcp { client, server } => FlowKey::Tcp {
            client: *server,
            server: *client,
        },
        k => k.clone(),
    }
}

impl Shared {
    /// Takes a captured segment; returns the packet's facts (its time on the reference clock,
    /// its path, its direction at the capture) and its flow, for the wire matcher (`None`
    /// when the path table is full).
    pub(crate) fn on_tcp_segment(&mut self, t: &TcpSegment) -> Option<(Pkt, FlowRef)> {
        let (src, dst) = (&t.meta.src, &t.meta.dst);
        let src_high = guessed_client(src, dst);
        // A SYN names the client: its sender, or the receiver of a SYN-ACK. (The guessed key
        // is made only when asked for: most segments need only the key they belong to.)
        let syn_from_client = t.flags.syn().then(|| !t.flags.ack());
        let turned = match syn_from_client {
            Some(from_client) => {
                self.tcp_roles(&tcp_key(*src, *dst, src_high), from_client != src_high)
            }
            None => !self.tcp_turned.is_empty() && self.is_turned(&tcp_key(*src, *dst, src_high)),
        };
        // Data, a SYN or a FIN asks for an ACK; a bare ACK asks for nothing (an idle
        // connection's last ACK is no unanswered send).
        let asks = t.len > 0 || t.flags.syn() || t.flags.fin();
        let mut pkt = self.packet_turned(&t.meta, turned, asks)?;
        let src_is_client = src_high != turned;
        // The key is made only for a flow not looked up recently or a pair not known yet.
        let (client, server) = if src_is_client {
            (src, dst)
        } else {
            (dst, src)
        };
        let key = || FlowKey::Tcp {
            client: *client,
            server: *server,
        };
        self.remember_tuple(pkt.tuple, key);
        let paths = &self.paths;
        let is_key = |k: &FlowKey| match k {
            FlowKey::Tcp {
                client: c,
                server: s,
            } => c == client && s == server,
            _ => false,
        };
        let quick = FlowKey::tcp_quick(client);
        let fr = self
            .flows
            .get_or_insert_with(quick, is_key, key, pkt.ts_ns, || {
                Proto::Tcp(Box::new(TcpState {
                    path: paths.label(pkt.path).to_owned(),
                    ..TcpState::default()
                }))
            });
        let mut close_at: Option<u64> = None;
        let mut retrans = false;
        let mut keepalive = false;
        let mut end_of_capture = None;
        if let Some(f) = self.flows.get_mut(fr) {
            if pkt.path < 64 {
                f.paths_mask |= 1 << pkt.path;
            }
            let d = usize::from(src_is_client);
            let mut new_bytes = 0u64;
            if let Proto::Tcp(s) = &mut f.proto {
                if t.flags.syn() || s.handshakes.iter().any(Option::is_some) {
                    end_of_capture = handshake(s, t, &pkt, src_is_client);
                }
                if t.len == 0
                    && !asks
                    && !t.flags.rst()
                    && pkt.dir == Dir::Out
                    && s.snd_end[d] == Some(t.seq.wrapping_add(1))
                {
                    // A keep-alive (the sequence number just below the next one): it asks
                    // for an ACK.
                    keepalive = true;
                }
                if t.len > 0 {
                    let end = t.seq.wrapping_add(t.len);
                    match s.snd_end[d] {
                        Some(e) if !after(end, e) => retrans = true,
                        Some(e) if after(t.seq, e) || t.seq == e => {
                            new_bytes = u64::from(t.len);
                            s.snd_end[d] = Some(end);
                        }
                        Some(e) => {
                            new_bytes = u64::from(end.wrapping_sub(e));
                            s.snd_end[d] = Some(end);
                        }
                        None => {
                            new_bytes = u64::from(t.len);
                            s.snd_end[d] = Some(end);
                        }
                    }
                }
                // An ACK from the other side beyond the missing seq ends the stall.
                if t.flags.ack() {
                    if let Some((_, missing, dir, _)) = s.incident {
                        if after(t.ack, missing) && d != dir {
                            close_at = Some(pkt.ts_ns);
                        }
                    }
                }
            }
            if pkt.count_wire {
                f.amp.wire += pkt.wire;
                if t.len == 0 {
                    f.amp.ack += pkt.wire;
                } else if retrans {
                    f.amp.retransmit += pkt.wire;
                }
                f.amp.unique += new_bytes;
            }
            f.delivered_any = true;
        }
        if keepalive {
            if let Some(p) = self.paths.get_mut(pkt.path) {
                p.answer_owed(pkt.ts_ns);
            }
        }
        if let Some((at_client, evidence)) = end_of_capture {
            // The segment that told (the client's first after the SYN-ACK, often its first
            // data) goes the way the capture's end now says.
            let ends = (t.meta.src, t.meta.dst, pkt.up);
            if let Some(dir) = self.caps.infer_end(pkt.capture, at_client, ends, evidence) {
                pkt.dir = dir;
            }
        }
        if let Some(at) = close_at {
            self.tcp_close_incident(fr, at, "ACK past the missing segment");
        }
        Some((pkt, fr))
    }

    /// Takes a kernel event; `first_sent` is when a retransmission's data first left a
    /// capture, if one saw it.
    pub(crate) fn on_tcp_event(&mut self, e: &TcpEvent, first_sent: Option<u64>) {
        self.advance(e.ts_ns);
        let Some(path) = self.paths.intern(&e.path) else {
            return;
        };
        let path = self.paths.canonical(path);
        let guess = tcp_key(e.local, e.remote, guessed_client(&e.local, &e.remote));
        let key = if self.is_turned(&guess) {
            turned_key(&guess)
        } else {
            guess
        };
        let label = self.paths.label(path).to_owned();
        let fr = self.flows.get_or_insert(&key, e.ts_ns, || {
            Proto::Tcp(Box::new(TcpState {
                path: label.clone(),
                ..TcpState::default()
            }))
        });
        let mut open: Option<(u32, RetransmitKind, u32)> = None;
        let mut close_reason: Option<&'static str> = None;
        let mut note: Option<String> = None;
        if let Some(f) = self.flows.get_mut(fr) {
            if path < 64 {
                f.paths_mask |= 1 << path;
            }
            if let Proto::Tcp(s) = &mut f.proto {
                if e.kind == TcpEventKind::BackoffEnd {
                    // Carries no figures of its own: the socket's stay, without backoff.
                    s.figures.backoff = 0;
                } else {
                    s.figures = e.figures;
                }
                s.last_event_ns = e.ts_ns;
                push_bounded(
                    &mut s.history,
                    TcpSample {
                        ts_ns: e.ts_ns,
                        figures: s.figures,
                    },
                );
                if let TcpEventKind::Retransmit { kind, seq, .. } = &e.kind {
                    push_bounded(
                        &mut s.retransmission_log,
                        TcpRetransmission {
                            ts_ns: e.ts_ns,
                            kind: *kind,
                            seq: *seq,
                            rto_us: e.figures.rto_us,
                            backoff: e.figures.backoff,
                        },
                    );
                }
                match &e.kind {
                    TcpEventKind::Retransmit { kind, seq, len } => match s.incident {
                        None => open = Some((*seq, *kind, *len)),
                        Some(_) => {
                            note = Some(format!(
                                "retransmit seq {seq} ({kind:?}, backoff {})",
                                e.figures.backoff
                            ));
                        }
                    },
                    TcpEventKind::RtoExpired => {
                        if s.incident.is_some() {
                            note = Some(format!(
                                "RTO expired (rto {} ms, backoff {})",
                                e.figures.rto_us / 1000,
                                e.figures.backoff
                            ));
                        }
                    }
                    TcpEventKind::CongState { state } => {
                        s.cong_state = *state;
                        push_bounded(&mut s.cong_changes, (e.ts_ns, *state));
                        if *state == CongState::Open {
                            close_reason = Some("congestion state back to Open");
                        } else if s.incident.is_some() {
                            note = Some(format!("congestion state {state:?}"));
                        }
                    }
                    TcpEventKind::StateChange { new, .. } => {
                        s.state = new.clone();
                        if new == "CLOSE" || new == "TIME_WAIT" {
                            close_reason = Some("connection closed");
                        }
                    }
                    TcpEventKind::BackoffEnd => {
                        close_reason = Some("backoff reset: data got through");
                    }
                    TcpEventKind::Sample => {}
                }
            }
        }
        if let TcpEventKind::Retransmit { kind, .. } = &e.kind {
            // A connection a capture sees has its data sends counted from its packets.
            let on_the_wire = self.flows.get_mut(fr).is_some_and(|f| f.delivered_any);
            if let Some(p) = self.paths.get_mut(path) {
                p.tcp_retransmits.add(*kind);
                if !on_the_wire {
                    p.retransmissions += 1;
                    p.data_sends += 1;
                }
                p.last_sent_ns = Some(p.last_sent_ns.map_or(e.ts_ns, |x| x.max(e.ts_ns)));
            }
            if let Some((id, ..)) = self.tcp_incident(fr) {
                let fast = matches!(kind, RetransmitKind::Fast | RetransmitKind::Tlp);
                if let Some(inc) = self.incidents.get_mut(id) {
                    if fast {
                        inc.fast_retransmits += 1;
                    } else {
                        inc.timeout_retransmits += 1;
                    }
                    inc.backoff = inc.backoff.max(e.figures.backoff);
                }
            }
        }
        if let Some((seq, kind, len)) = open {
            self.tcp_open_incident(fr, e, (seq, len, first_sent), kind, &label);
        } else if let Some(n) = note {
            if let Some((id, ..)) = self.tcp_incident(fr) {
                if let Some(inc) = self.incidents.get_mut(id) {
                    push_evidence(inc, e.ts_ns, &label, n);
                }
            }
        }
        if let Some(r) = close_reason {
            self.tcp_close_incident(fr, e.ts_ns, r);
        }
    }

    /// Whether the connection of guessed key `guess` was seen turned round by its SYN.
    #[inline]
    fn is_turned(&self, guess: &FlowKey) -> bool {
        !self.tcp_turned.is_empty() && self.tcp_turned.contains(guess)
    }

    /// A SYN of the connection of guessed key `guess` showed whether its client holds the
    /// lower port (`turned`): remembered, and a flow already made the other way round (by the
    /// kernel's events, or segments before the SYN) is turned to match. Returns `turned`.
    fn tcp_roles(&mut self, guess: &FlowKey, turned: bool) -> bool {
        if turned == self.is_turned(guess) {
            return turned;
        }
        let (from, to) = if turned {
            (guess.clone(), turned_key(guess))
        } else {
            (turned_key(guess), guess.clone())
        };
        if let Some(fr) = self.flows.find(&from) {
            if self.flows.rekey(fr, to) {
                if let Some(Proto::Tcp(s)) = self.flows.get_mut(fr).map(|f| &mut f.proto) {
                    s.turn_round();
                }
            }
        }
        if turned {
            if self.tcp_turned.len() >= self.cfg.max_flows {
                // Only connections still tracked keep their place (at most the flow table's).
                let flows = &self.flows;
                self.tcp_turned
                    .retain(|k| flows.find(&turned_key(k)).is_some());
            }
            self.tcp_turned.insert(guess.clone());
        } else {
            self.tcp_turned.remove(guess);
        }
        turned
    }

    fn tcp_incident(&mut self, fr: FlowRef) -> Option<(u64, u32, usize, u32)> {
        match self.flows.get_mut(fr).map(|f| &f.proto) {
            Some(Proto::Tcp(s)) => s.incident,
            _ => None,
        }
    }

    fn tcp_open_incident(
        &mut self,
        fr: FlowRef,
        e: &TcpEvent,
        (seq, len, sent_at): (u32, u32, Option<u64>),
        kind: RetransmitKind,
        label: &str,
    ) {
        let Some(f) = self.flows.get_mut(fr) else {
            return;
        };
        let name = f.key.name();
        let (client, _) = match &f.key {
            FlowKey::Tcp { client, server } => (*client, *server),
            _ => return,
        };
        let d = usize::from(client == e.local);
        let fast = matches!(kind, RetransmitKind::Fast | RetransmitKind::Tlp);
        let mut inc = HolIncident {
            protocol: HolProtocol::Tcp,
            flow: name.clone(),
            missing: format!("seq {seq}"),
            start_ns: sent_at.unwrap_or(e.ts_ns),
            backoff: e.figures.backoff,
            fast_retransmits: u32::from(fast),
            timeout_retransmits: u32::from(!fast),
            source: Some(crate::record::TcpSource::Kernel),
            ..HolIncident::default()
        };
        if let Some(t) = sent_at {
            push_evidence(&mut inc, t, label, format!("seq {seq} first sent"));
        }
        push_evidence(
            &mut inc,
            e.ts_ns,
            label,
            format!(
                "retransmit seq {seq} ({kind:?}, rto {} ms, backoff {}, cwnd {})",
                e.figures.rto_us / 1000,
                e.figures.backoff,
                e.figures.cwnd
            ),
        );
        let id = self.incidents.open(inc);
        if let Some(f) = self.flows.get_mut(fr) {
            f.incidents += 1;
            if let Proto::Tcp(s) = &mut f.proto {
                s.incident = Some((id, seq, d, len));
            }
        }
        self.event(e.ts_ns, Severity::Warn, || {
            format!("TCP {name}: seq {seq} lost, {kind:?} retransmit")
        });
    }

    fn tcp_close_incident(&mut self, fr: FlowRef, at: u64, why: &str) {
        let Some(f) = self.flows.get_mut(fr) else {
            return;
        };
        let (label, held) = match &mut f.proto {
            Proto::Tcp(s) => {
                let Some((id, missing, dir, len)) = s.incident.take() else {
                    return;
                };
                // Bytes sent beyond the missing segment, when segments were captured.
                let held = s
                    .snd_end
                    .get(dir)
                    .copied()
                    .flatten()
                    .map(|e| e.wrapping_sub(missing.wrapping_add(len)))
                    .filter(|d| (*d as i32) > 0)
                    .unwrap_or(0);
                (s.path.clone(), (id, u64::from(held)))
            }
            _ => return,
        };
        let (id, bytes) = held;
        if let Some(inc) = self.incidents.get_mut(id) {
            inc.bytes_held = bytes;
            push_evidence(inc, at, &label, format!("stall over: {why}"));
        }
        if let Some(inc) = self.incidents.close(id, at) {
            self.event(at, Severity::Warn, || {
                format!(
                    "TCP HOL on {}: {} held {:.1} ms, recovery {:?}, backoff {}",
                    inc.flow,
                    inc.missing,
                    inc.stall_ns as f64 / 1e6,
                    inc.recovery,
                    inc.backoff
                )
            });
            self.push_record(Record::HolIncident(inc));
        }
    }
}
