//! Names and addresses of one lab instance. Every namespace carries the instance prefix, so
//! several instances (tests run in parallel) never collide, and leftovers of a crashed run are
//! found by name. Interfaces live only inside the lab's own namespaces; the host's are never
//! touched.
use std::net::Ipv4Addr;

use serde::Serialize;

use crate::error::{LabError, Result};

/// The default prefix of `tboxscope lab up`.
pub const DEFAULT_PREFIX: &str = "tbx-";
/// Name of the nftables table the lab creates in its namespaces.
pub const NFT_TABLE: &str = "tboxscope_lab";

/// One of the two radio paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord)]
pub enum PathId {
    /// Path A: the 4G modem, `eth0` on the T-Box.
    A,
    /// Path B: the 5G modem, `eth1` on the T-Box.
    B,
}

impl PathId {
    /// Both paths, A first.
    pub const BOTH: [PathId; 2] = [PathId::A, PathId::B];

    /// Lower-case letter, as used in names.
    pub fn letter(self) -> &'static str {
        match self {
            PathId::A => "a",
            PathId::B => "b",
        }
    }

    /// The T-Box interface of this path.
    pub fn tbox_iface(self) -> &'static str {
        match self {
            PathId::A => "eth0",
            PathId::B => "eth1",
        }
    }

    /// The gateway interface of this path.
    pub fn gateway_iface(self) -> &'static str {
        match self {
            PathId::A => "g0",
            PathId::B => "g1",
        }
    }

    /// The path's /24 subnet third octet base: 10.40.0.0/24 for A, 10.50.0.0/24 for B.
    fn second_octet(self) -> u8 {
        match self {
            PathId::A => 40,
            PathId::B => 50,
        }
    }

    /// The T-Box address on this path.
    pub fn tbox_addr(self) -> Ipv4Addr {
        Ipv4Addr::new(10, self.second_octet(), 0, 2)
    }

    /// The gateway address on this path.
    pub fn gateway_addr(self) -> Ipv4Addr {
        Ipv4Addr::new(10, self.second_octet(), 0, 1)
    }

    /// Display name used in reports: "A (4G, eth0)".
    pub fn label(self) -> &'static str {
        match self {
            PathId::A => "A (4G, eth0)",
            PathId::B => "B (5G, eth1)",
        }
    }
}

/// Interface of the delay-line namespace that faces the T-Box.
pub const LINE_TBOX_SIDE: &str = "to-tbox";
/// Interface of the delay-line namespace that faces the gateway.
pub const LINE_GATEWAY_SIDE: &str = "to-gw";

/// The names of one lab instance.
#[derive(Debug, Clone, Serialize)]
pub struct LabNames {
    prefix: String,
}

impl LabNames {
    /// Names with `prefix` (letters, digits, `-`, `_`; at most 40 characters).
    pub fn new(prefix: &str) -> Result<Self> {
        let ok = !prefix.is_empty()
            && prefix.len() <= 40
            && prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !ok {
            return Err(LabError::Config(format!(
                "lab prefix {prefix:?} must be 1-40 characters of [A-Za-z0-9_-]"
            )));
        }
        Ok(LabNames {
            prefix: prefix.to_string(),
        })
    }

    /// A unique prefix for a test instance: includes the process id and a tag.
    pub fn for_test(tag: &str) -> Result<Self> {
        Self::new(&format!("tbxlab{}-{tag}-", std::process::id()))
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The T-Box namespace.
    pub fn tbox_ns(&self) -> String {
        format!("{}tbox", self.prefix)
    }

    /// The gateway namespace.
    pub fn gateway_ns(&self) -> String {
        format!("{}gateway", self.prefix)
    }

    /// The delay-line namespace of `path` (between the T-Box and the gateway).
    pub fn line_ns(&self, path: PathId) -> String {
        format!("{}path{}", self.prefix, path.letter())
    }

    /// All namespaces of this instance.
    pub fn all_ns(&self) -> Vec<String> {
        vec![
            self.tbox_ns(),
            self.gateway_ns(),
            self.line_ns(PathId::A),
            self.line_ns(PathId::B),
        ]
    }

    /// Directory for this instance's state (pid files, key log, logs).
    pub fn state_dir(&self) -> std::path::PathBuf {
        std::path::PathBuf::from(format!("/run/tboxscope-lab/{}", self.prefix))
    }
}

/// Lists existing namespaces whose name starts with `prefix`.
pub fn existing_namespaces(prefix: &str) -> Result<Vec<String>> {
    let out = crate::sys::run("ip", &["netns", "list"])?;
    Ok(out
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(prefix))
        .map(str::to_string)
        .collect())
}
