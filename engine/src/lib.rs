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

pub mod capture;
pub mod config;
mod engine;
pub mod flow;
pub mod hol;
pub mod input;
pub mod latency;
pub mod matcher;
pub mod message;
pub mod outage;
pub mod paths;
pub mod record;
pub mod report;
pub mod snapshot;
mod view;

pub use config::{Config, FlowSelector, MatchMode, ModeOverride};
pub use engine::Engine;
pub use input::{
    payload_hash, AppIdRule, CaptureId, CapturePoint, CongState, Datagram, Host, KcpCmd,
    KcpSegment, Observation, Overhead, OverheadKind, PacketMeta, QuicAck, QuicPacket,
    RetransmitKind, StreamRange, TcpEvent, TcpEventKind, TcpSegment,
};
pub use record::{
    CopyRecord, Evidence, FlowSummary, HolIncident, HolProtocol, MessageRecord, OutageRecord,
    Record, Recovery, Summary, WindowRecord,
};
pub use snapshot::Snapshot;
