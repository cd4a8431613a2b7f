//! The lab's error type.
use std::io;

/// Everything that can go wrong while building, running or tearing down the lab.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// An external tool (`ip`, `nft`, `tc`) failed.
    #[error("`{command}` failed: {stderr}")]
    Command {
        /// The command line that was run.
        command: String,
        /// What it printed on standard error.
        stderr: String,
    },
    /// A system call failed.
    #[error("{what}: {cause}")]
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        cause: io::Error,
    },
    /// The scenario file or preset name is not valid.
    #[error("scenario: {0}")]
    Scenario(String),
    /// A name or option given to the lab is not valid.
    #[error("invalid lab configuration: {0}")]
    Config(String),
    /// A traffic peer failed.
    #[error("peer {transport}: {message}")]
    Peer {
        /// The transport the peer runs.
        transport: String,
        /// What happened.
        message: String,
    },
}

impl LabError {
    /// Wraps an `io::Error` with what was being done.
    pub fn io(what: impl Into<String>, cause: io::Error) -> Self {
        LabError::Io {
            what: what.into(),
            cause,
        }
    }

    /// A peer error for `transport`.
    pub fn peer(transport: impl Into<String>, message: impl std::fmt::Display) -> Self {
        LabError::Peer {
            transport: transport.into(),
            message: message.to_string(),
        }
    }
}

/// Result alias for the lab.
pub type Result<T> = std::result::Result<T, LabError>;
