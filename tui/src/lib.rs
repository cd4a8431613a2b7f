//! The `tboxscope` terminal UI as a library: pure UI state, the key table, terminal handling,
//! the views, the snapshot sources the UI loop reads, and replay of recorded captures. The
//! binary (`main.rs`) adds the command line.
pub mod app;
pub mod feed;
pub mod input;
pub mod kerneltcp;
pub mod labcap;
pub mod metrics;
pub mod options;
pub mod replay;
pub mod report;
pub mod source;
pub mod terminal;
pub mod view;
