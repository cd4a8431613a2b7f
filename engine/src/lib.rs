//! The sans-IO correlation engine: fed observations with their own timestamps, it never reads
//! the clock. `handle(observation)` in, `snapshot()` out; `drain_records()` for JSON Lines;
//! `finish(ts)` for the whole-run summary and `report::render` for the text report.
//!
//! ```
//! use tboxscope_engine::{Config, Engine, Observation};
//! let mut engine = Engine::new(Config::default());
//! # let observations: Vec<Observation> = Vec::new();
//! for obs in observations {
//!     engine.handle(obs);
//! }
//! let snapshot = engine.snapshot();
//! let records: Vec<_> = engine.drain_records().collect();
//! let summary = engine.finish(snapshot.ts_ns);
//! println!("{}", tboxscope_engine::report::render(&summary));
//! # let _ = records;
//! ```
//!
//! # What the figures mean
//! - A **message** is one unit the application sent (a datagram payload, a KCP fragment run, a
//!   QUIC stream range, an application id); a **copy** is its transmission on one **path**.
//!   A path *carried* a message when its copy arrived at the far end (or was acknowledged);
//!   where no arrival can be observed, when the copy was seen at all.
//! - Latency per copy is arrival − send when both ends are captured (clock offsets applied),
//!   else send → first acknowledgment; per message it is first arrival − first send.
//! - A message closes when every path of its flow has a finished copy, or
//!   `message_timeout_ns` after it was first seen; a young flow seen on one path so far waits
//!   for the timeout, in case its second path shows up.
//! - Percentiles are hdrhistogram values (the engine's histograms give exactly hdrhistogram's figures at its settings).
//!
//! # Memory
//! Bounded by configuration: `max_flows` flows (least recently active evicted in batches),
//! `max_open_messages` open messages (oldest closed early), `max_unacked_per_flow` packets
//! waiting for an ACK per flow, 256 runs of closed messages per KCP conversation and
//! direction, 4096 out-of-order pieces per receive tracker, `max_incidents` outages and HOL
//! incidents (4× that many open incidents), `window_history` windows, `max_pending_records`
//! undrained records, 64 paths. Every eviction is counted in
//! [`snapshot::CaptureHealth`]. With the defaults, one million distinct flows grow the
//! process by about 46 MiB (see `tests/adversarial.rs`).

pub mod advice;
mod capture;
mod config;
mod draw;
mod engine;
mod flow;
pub mod framing;
mod hol;
pub mod input;
mod latency;
mod matcher;
mod message;
mod outage;
mod pairs;
mod paths;
pub mod record;
pub mod report;
mod sent;
mod shared;
pub mod snapshot;
mod tail;
#[cfg(test)]
mod tests;
pub mod thinned;
pub mod units;
mod unsent;

/// The hash map of the engine's tables. Their keys come from the wire (ports, conv, sn,
/// stream offsets, connection ids), so the hash is keyed: foldhash's `RandomState` draws its
/// seed at random per process (from the standard library's random source), so colliding keys
/// cannot be computed in advance; an attacker would have to learn the seed from the timing of
/// a passive analyzer it cannot observe. Every table is also bounded in size (see Memory).
/// foldhash is several times faster than SipHash on the engine's small integer keys.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
/// The set counterpart of [`FastMap`].
pub type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

pub use config::{Config, FlowSelector, MatchMode, ModeOverride};
pub use draw::SplitMix64;
pub use engine::Engine;
pub use flow::FlowKey;
pub use framing::{Delimited, Delimiter, Framing, FramingError};
pub use input::{
    content_hash, payload_hash, AckRanges, AppIdRule, CaptureId, CapturePoint, CongState,
    CongestionControl, ConnId, Datagram, Host, KcpCmd, KcpHeader, KcpSegment, Observation,
    Overhead, OverheadKind, PacketMeta, PathId, PathMtuSignal, PathName, QuicAck, QuicAcks,
    QuicPacket, QuicStreams, RetransmitKind, StreamRange, TcpEvent, TcpEventKind, TcpFigures,
    TcpFlags, TcpOptions, TcpSegment, CONTENT_PREFIX,
};
pub use latency::{LatencyHist, FLOW_SIGFIG, PATH_SIGFIG};
pub use record::{
    CopyRecord, Evidence, FlowSummary, HolIncident, HolProtocol, HolStallFrom, LateCopyRecord,
    MessageRecord, NotSent, NotSentCause, OutageRecord, Record, Recovery, Spurious, Summary,
    TcpDisagreement, TcpDisagreementRecord, TcpJoinDirection, TcpJoinSummary, TcpRetransmitKind,
    TcpRetransmitRecord, TcpRtoRecord, TcpSource, TcpWireDirection, TcpWireSummary, WindowRecord,
};
pub use shared::view::{add_late_copies, redundancy_verdict};
pub use snapshot::Snapshot;
pub use tail::{tail_prediction, CombinedTail, PathTail};
pub use unsent::Spans;
