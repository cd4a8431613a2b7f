//! The two-path T-Box lab: a testbed in network namespaces (`tbox` with eth0 = 4G and eth1 = 5G,
//! a `gateway`, and one delay-line namespace per path), per-path impairments from a scenario,
//! real KCP/QUIC/TCP peers sending a control-signal profile, and `lab run`'s comparison table
//! from the peers' own ground truth.
pub mod delayline;
pub mod error;
pub mod names;
pub mod peers;
pub mod probe;
pub mod report;
pub mod run;
pub mod scenario;
pub mod status;
pub mod sys;
pub mod testbed;

pub use error::{LabError, Result};
pub use names::{LabNames, PathId};
pub use scenario::Scenario;
pub use testbed::{down, DelayBackend, DelayChoice, LineHost, Testbed, UpOptions};
