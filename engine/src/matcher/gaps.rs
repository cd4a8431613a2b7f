//! Engine glue for receive-side gaps (KCP sn, QUIC stream offsets): opening, annotating and
//! closing HOL incidents.

use crate::engine::Engine;
use crate::flow::{FlowRef, Proto};
use crate::hol::{push_evidence, Delivery, GapTracker};
use crate::paths::PathIdx;
use crate::record::{HolIncident, HolProtocol, Recovery};
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
}

impl GapSel {
    fn unit(self) -> &'static str {
        match self {
            GapSel::Kcp { .. } => "sn",
            GapSel::Quic { .. } => "offset",
        }
    }
}

fn tracker(proto: &mut Proto, sel: GapSel) -> Option<&mut GapTracker> {
    match (proto, sel) {
        (Proto::Kcp(k), GapSel::Kcp { up }) => k.rx.get_mut(usize::from(up)),
        (Proto::Quic(q), GapSel::Quic { up, stream }) => q.stream_rx(up, stream),
        _ => None,
    }
}

impl Engine {
    /// Records that the receiver got `[start, start+len)`; opens/closes HOL incidents.
    #[allow(clippy::too_many_arguments)]
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
        let label = self.paths.label(path);
        let Some(f) = self.flows.get_mut(fr) else {
            return;
        };
        let key = &f.key;
        let incidents = &mut self.incidents;
        let Some(t) = tracker(&mut f.proto, sel) else {
            return;
        };
        let (protocol, stream) = match sel {
            GapSel::Kcp { .. } => (HolProtocol::Kcp, None),
            GapSel::Quic { stream, .. } => (HolProtocol::Quic, Some(stream)),
        };
        let unit = sel.unit();
        let gap_before = t.gap;
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
                let mut inc = HolIncident {
                    protocol,
                    flow: key.name(),
                    stream,
                    missing: format!("{unit} {missing}"),
                    start_ns: ts,
                    ..HolIncident::default()
                };
                push_evidence(
                    &mut inc,
                    ts,
                    label,
                    format!("{unit} {start} arrived while {unit} {missing} was missing"),
                );
                incidents.open(inc)
            },
        );
        match d {
            Delivery::Buffered { .. } => {
                if !opened {
                    if let Some(g) = t.gap {
                        if let Some(inc) = incidents.get_mut(g.incident) {
                            let (m, b) = t.held();
                            inc.messages_held = m;
                            inc.bytes_held = b;
                        }
                    }
                } else {
                    f.incidents += 1;
                }
            }
            Delivery::Filled {
                messages,
                bytes: held_bytes,
                still_gapped_since,
            } => {
                let Some(g) = gap_before else { return };
                let other_path = g.revealed_on != path;
                if let Some(inc) = incidents.get_mut(g.incident) {
                    inc.messages_held = messages;
                    inc.bytes_held = held_bytes;
                    if inc.fast_retransmits == 0 && inc.timeout_retransmits == 0 && other_path {
                        inc.recovery = Recovery::OtherPath;
                    }
                    push_evidence(
                        inc,
                        ts,
                        label,
                        format!(
                            "{unit} {} arrived; {messages} message(s), {held_bytes} bytes released",
                            g.missing
                        ),
                    );
                }
                let reopen = still_gapped_since.map(|since| {
                    let next = t.next().unwrap_or(0);
                    let mut inc = HolIncident {
                        protocol,
                        flow: f.key.name(),
                        stream,
                        missing: format!("{unit} {next}"),
                        start_ns: since,
                        ..HolIncident::default()
                    };
                    push_evidence(
                        &mut inc,
                        since,
                        label,
                        format!("{unit} {next} still missing"),
                    );
                    incidents.open(inc)
                });
                if let Some(id) = reopen {
                    t.reopen(id);
                    f.incidents += 1;
                }
                if let Some(mut inc) = incidents.close(g.incident, ts) {
                    if let (GapSel::Quic { up, stream }, Proto::Quic(q)) = (sel, &f.proto) {
                        inc.streams_not_held = q.streams_active_since(up, stream, inc.start_ns);
                    }
                    let text = format!(
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
                    );
                    self.event(ts, Severity::Warn, text);
                    self.push_record(crate::record::Record::HolIncident(inc));
                }
            }
            Delivery::Duplicate | Delivery::InOrder => {}
        }
    }

    /// A retransmission of `unit` was seen: if it is the missing piece, count it as fast (at
    /// least two later pieces had arrived) or timeout.
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
        let Some(t) = tracker(&mut f.proto, sel) else {
            return;
        };
        let Some(g) = t.gap else { return };
        if g.missing != unit {
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
}
