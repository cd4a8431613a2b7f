//! Outputs: the schema-versioned JSON Lines writer shared by `capture`, `analyze` and `lab run`,
//! and the metrics (Prometheus/OpenMetrics text, the textfile) of live modes and `analyze`.
pub mod jsonl;
pub mod metrics;

pub use jsonl::{format_ts, JsonLinesWriter, OutputError, SCHEMA};
