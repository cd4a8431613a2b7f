//! Everything in tboxscope that is not UI: sources → decode → engine → outputs.
pub mod capture;
pub mod output;
pub mod source;

pub use tboxscope_decode as decode;
pub use tboxscope_engine as engine;
