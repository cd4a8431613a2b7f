//! Outputs: the schema-versioned JSON Lines writer shared by `capture`, `analyze` and `lab run`.
pub mod jsonl;

pub use jsonl::{format_ts, JsonLinesWriter, OutputError, SCHEMA};
