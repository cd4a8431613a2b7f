//! The engine: fed one observation at a time with its own timestamp; time advances only from
//! inputs. It hands each observation to its matcher: the KCP and QUIC matchers own their state
//! of their own, and every matcher works on the state they share ([`Shared`]).

use crate::config::Config;
use crate::input::Observation;
use crate::matcher::kcp::KcpMatcher;
use crate::matcher::quic::QuicMatcher;
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
}

impl Engine {
    /// A new engine.
    pub fn new(cfg: Config) -> Self {
        Self {
            kcp: KcpMatcher::default(),
            quic: QuicMatcher::new(&cfg),
            tcp_wire: TcpWireMatcher::default(),
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
                if let Some((ts_ns, path)) = shared.on_tcp_segment(t) {
                    self.tcp_wire.on_segment(shared, t, ts_ns, path);
                }
            }
            Observation::Tcp(t) => shared.on_tcp_event(t),
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
    }

    /// Starts the sliding windows afresh at the current time (the UI's `r`): per-path and
    /// combined window series, packet and byte rates and the open window's counters are
    /// cleared; whole-run figures, flows, outages and incidents stay.
    pub fn reset_windows(&mut self) {
        self.shared.reset_windows();
    }

    /// The current state for the UI.
    pub fn snapshot(&self) -> Snapshot {
        self.shared.snapshot()
    }

    /// The capture of the path labelled `label` ended at `last_ns` (its last frame; call before
    /// [`Engine::finish`] when captures end at different times): no outage on it outlasts
    /// that, and a silence only its end made is no outage.
    pub fn capture_ended(&mut self, label: &str, last_ns: u64) {
        self.shared.capture_ended(label, last_ns);
    }

    /// Ends the run at `ts_ns`: closes every open message, outage and incident (their records
    /// become available from `drain_records`) and returns the whole-run figures.
    pub fn finish(&mut self, ts_ns: u64) -> Summary {
        self.tcp_wire.finish(&mut self.shared);
        let mut summary = self.shared.finish(ts_ns);
        summary.tcp_wire = self.tcp_wire.summary();
        summary
    }
}
