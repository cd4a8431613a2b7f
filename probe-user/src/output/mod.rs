//! Outputs: the schema-versioned JSON Lines writer shared by `capture`, `analyze` and `lab run`,
//! the metrics (Prometheus/OpenMetrics text, the textfile) of live modes and `analyze`, and the
//! qlog export of decrypted QUIC connections (`analyze --qlog`).
pub mod jsonl;
pub mod metrics;
pub mod qlog;

pub use jsonl::{format_ts, JsonLinesWriter, OutputError, SCHEMA};
