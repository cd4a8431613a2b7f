//! The engine: fed one observation at a time with its own timestamp; time advances only from
//! inputs. It hands each observation to its matcher: the KCP and QUIC matchers own their state
//! of their own, and every matcher works on the state they share ([`Shared`]).

use crate::config::Config;
use crate::input::{Observation, TcpEventKind};
use crate::matcher::kcp::KcpMatcher;
use crate::matcher::quic::QuicMatcher;
use crate::matcher::tcpjoin::TcpJoin;
use crate::matcher::tcpwire::TcpWireMatcher;
use crate::record::{Record, Summary};
use crate::shared::Shared;
use crate::snapshot::Snapshot;

/// The sans-IO correlation engine.
pub struct Engine {
    /// Paths, captures, flows, open messages, incidents, outages, figures and records.
    shared: Shared,
    /// KCP sessions per server port and the matcher's scratch.
    kcp: KcpMatcher,
    /// QUIC connections per server port, the modes of grouped connections, scratch.
    quic: QuicMatcher,
    /// TCP connections seen on the wire: retransmissions, RTT, RTO.
    tcp_wire: TcpWireMatcher,
    /// The kernel's TCP retransmissions joined with the wire's.
    tcp_join: TcpJoin,
    /// The last advice made for a snapshot, and when (engine time).
    advice: Option<(u64, Box<crate::advice::Advice>)>,
}

impl Engine {
    /// A new engine.
    pub fn new(cfg: Config) -> Self {
        Self {
            kcp: KcpMatcher::default(),
            quic: QuicMatcher::new(&cfg),
            tcp_wire: TcpWireMatcher::default(),
            tcp_join: TcpJoin::default(),
            advice: None,
            shared: Shared::new(cfg),
        }
    }

    /// The configuration in use.
    pub fn config(&self) -> &Config {
        &self.shared.cfg
    }

    /// Feeds one observation.
    pub fn handle(&mut self, obs: Observation) {
        match obs {
            Observation::Capture(c) => {
                self.shared.observed();
                self.shared.on_capture(c);
            }
            // A path's name is a declaration, not an observation.
            Observation::PathName(n) => self.shared.paths.name(n.id, n.label),
            other => self.handle_ref(&other),
        }
    }

    /// Feeds one observation, leaving it with the caller (e.g. to free its memory on the
    /// thread that made it).
    pub fn handle_ref(&mut self, obs: &Observation) {
        let shared = &mut self.shared;
        if !matches!(obs, Observation::PathName(_)) {
            shared.observed();
        }
        match obs {
            Observation::Capture(c) => shared.on_capture(c.clone()),
            Observation::PathName(n) => shared.paths.name(n.id, n.label.clone()),
            Observation::Datagram(d) => shared.on_datagram(d),
            Observation::Kcp(k) => self.kcp.on_segment(shared, k),
            Observation::Quic(q) => self.quic.on_packet(shared, q),
            Observation::TcpSegment(t) => {
                if let Some((mut pkt, fr)) = shared.on_tcp_segment(t) {
                    let sent = self.tcp_wire.on_segment(shared, t, &mut pkt, fr);
                    if let Some((_, kind)) = sent.filter(|_| t.len > 0 && pkt.count_wire) {
                        // The path's data sends, and those sent again, as the wire shows them
                        // (the kernel's events count only for connections no capture sees).
                        if let Some(p) = shared.paths.get_mut(pkt.path) {
                            p.data_sends += 1;
                            p.retransmissions += u64::from(kind.is_some());
                        }
                    }
                    if let Some((seq_len, kind)) = sent {
                        self.tcp_join.on_wire(shared, t, &pkt, seq_len, kind);
                    }
                }
            }
            Observation::PathMtu(m) => self.tcp_wire.on_path_mtu(shared, m),
            Observation::Tcp(t) => {
                // A retransmission's data as the captures saw it first leave.
                let first_sent = match t.kind {
                    TcpEventKind::Retransmit { seq, .. } => {
                        self.tcp_wire
                            .first_sent(shared.caps.ids(), (&t.local, &t.remote), seq)
                    }
                    _ => None,
                };
                shared.on_tcp_event(t, first_sent);
                self.tcp_join.on_kernel(shared, t);
            }
            Observation::Overhead(o) => shared.on_overhead(o),
        }
    }

    /// Takes the records produced so far (messages, windows, outages, HOL incidents), oldest
    /// first; those the iterator has not reached when dropped stay for the next call. Cheap
    /// when there are none (it runs after every observation).
    pub fn drain_records(&mut self) -> impl Iterator<Item = Record> + '_ {
        std::iter::from_fn(move || self.shared.next_record())
    }

    /// Engine time: the newest observation's timestamp (clock offsets applied).
    pub fn now_ns(&self) -> u64 {
        self.shared.now_ns()
    }

    /// Time has reached `ts_ns` with nothing observed (a live capture's idle clock, a replay
    /// position): windows close, messages time out and silent paths open outages as they would
    /// if a packet had arrived then. Never moves engine time backwards.
    pub fn tick(&mut self, ts_ns: u64) {
        self.shared.tick(ts_ns);
        self.tcp_join.tick(&mut self.shared, ts_ns);
    }

    /// The kernel's TCP events end at `ts_ns` (a recording read to its end): retransmissions
    /// seen on the wire after that are not held against the kernel.
    pub fn kernel_ended(&mut self, ts_ns: u64) {
        self.tcp_join.kernel_ended(ts_ns);
    }

    /// Starts the sliding windows afresh at the current time (the UI's `r`): per-path and
    /// combined window series, packet and byte rates and the open window's counters are
    /// cleared; whole-run figures, flows, outages and incidents stay.
    pub fn reset_windows(&mut self) {
        self.shared.reset_windows();
    }

    /// The current state for the UI.
    pub fn snapshot(&self) -> Snapshot {
        let mut snapshot = self.shared.snapshot();
        snapshot.tcp_wire = self.tcp_wire.summary();
        snapshot.tcp_join = self.tcp_join.summary();
        snapshot.advice = self.advice.as_ref().map(|a| a.1.clone());
        snapshot
    }

    /// [`Engine::snapshot`] with the advice remade from the evidence so far when the last one
    /// is [`crate::advice::ADVICE_EVERY_NS`] old (engine time), for live views.
    pub fn snapshot_advised(&mut self) -> Snapshot {
        let mut snapshot = self.snapshot();
        let now = snapshot.ts_ns;
        let due = self
            .advice
            .as_ref()
            .is_none_or(|a| now >= a.0.saturating_add(crate::advice::ADVICE_EVERY_NS));
        if due {
            if let Some(ev) = self.shared.evidence.as_deref() {
                let evidence = ev.finish_with(
                    (&snapshot.paths, &snapshot.outages),
                    snapshot.started_ns,
                    &snapshot.latency.tail,
                );
                self.advice = crate::advice::advise(evidence, crate::advice::Limits::default())
                    .map(|a| (now, Box::new(a)));
                snapshot.advice = self.advice.as_ref().map(|a| a.1.clone());
            }
        }
        snapshot
    }

    /// The capture of the path labelled `label` ended at `last_ns` (its last frame; call before
    /// [`Engine::finish`] when captures end at different times): no outage on it outlasts
    /// that, and a silence only its end made is no outage.
    pub fn capture_ended(&mut self, label: &str, last_ns: u64) {
        self.shared.capture_ended(label, last_ns);
    }

    /// What `advise` is made from, with the run's `summary` (its paths and outages); `None`
    /// unless [`Config::collect_evidence`].
    pub fn evidence(&self, summary: &Summary) -> Option<crate::advice::Evidence> {
        Some(self.shared.evidence.as_deref()?.finish(summary))
    }

    /// Ends the run at `ts_ns`: closes every open message, outage and incident (their records
    /// become available from `drain_records`) and returns the whole-run figures.
    pub fn finish(&mut self, ts_ns: u64) -> Summary {
        self.tcp_wire.finish(&mut self.shared);
        self.tcp_join.finish(&mut self.shared);
        let mut summary = self.shared.finish(ts_ns);
        summary.tcp_wire = self.tcp_wire.summary();
        summary.tcp_join = self.tcp_join.summary();
        summary
    }
}
