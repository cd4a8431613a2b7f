//! White-box tests of the engine's internals (the black-box ones, through the public API,
//! are in `engine/tests/`).

mod kcp_closed_runs;
