//! Everything in tboxscope that is not UI: sources → decode → engine → outputs.
pub mod analyze;
pub mod capture;
pub mod correlate;
pub mod dissect;
pub mod output;
pub mod pipeline;
pub mod source;

pub use tboxscope_decode as decode;
pub use tboxscope_engine as engine;
