//! `lab status`: what of an instance exists right now.
use std::fmt;

use serde::Serialize;

use crate::error::Result;
use crate::names::{existing_namespaces, LabNames, PathId, NFT_TABLE};
use crate::sys;

/// State of one path.
#[derive(Debug, Clone, Serialize)]
pub struct PathStatus {
    /// Which path.
    pub path: PathId,
    /// Whether the T-Box interface exists and is up.
    pub tbox_iface_up: bool,
    /// Whether the gateway interface exists and is up.
    pub gateway_iface_up: bool,
    /// "netem", "delay line (pid N)", or "none".
    pub delay: String,
    /// Whether the outage drop rule is switched on.
    pub outage_on: bool,
    /// Packets dropped by the path's random-loss rule (both directions, in its line namespace).
    pub loss_drops: u64,
    /// Packets dropped by the path's outage rule (both directions, in its line namespace).
    pub outage_drops: u64,
}

/// State of one lab instance.
#[derive(Debug, Clone, Serialize)]
pub struct LabStatus {
    /// The instance prefix.
    pub prefix: String,
    /// Namespaces with that prefix.
    pub namespaces: Vec<String>,
    /// Per path; empty when the lab is down.
    pub paths: Vec<PathStatus>,
}

impl LabStatus {
    /// Whether all four namespaces exist.
    pub fn is_up(&self, names: &LabNames) -> bool {
        names.all_ns().iter().all(|n| self.namespaces.contains(n))
    }
}

fn iface_up(ns: &str, iface: &str) -> bool {
    sys::run_in(ns, "ip", &["-o", "link", "show", "dev", iface])
        .is_ok_and(|o| o.contains("state UP") || o.contains(",UP"))
}

fn counter(ns: &str, name: &str) -> u64 {
    let Ok(out) = sys::run_in(ns, "nft", &["list", "counter", "netdev", NFT_TABLE, name]) else {
        return 0;
    };
    out.split_whitespace()
        .skip_while(|w| *w != "packets")
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Reads the state of the instance `names`.
pub fn status(names: &LabNames) -> Result<LabStatus> {
    let namespaces = existing_namespaces(names.prefix())?;
    let mut paths = Vec::new();
    if namespaces.contains(&names.tbox_ns()) && namespaces.contains(&names.gateway_ns()) {
        for p in PathId::BOTH {
            let line = names.line_ns(p);
            let qdisc = sys::run_in(&line, "tc", &["qdisc", "show"]).unwrap_or_default();
            let pids = sys::run("ip", &["netns", "pids", &line]).unwrap_or_default();
            let delay = if qdisc.contains("netem") {
                "netem".to_string()
            } else if let Some(pid) = pids.split_whitespace().next() {
                format!("delay line (pid {pid})")
            } else {
                "delay line in the running lab process, or none".to_string()
            };
            let (g, t) = (names.gateway_ns(), names.tbox_ns());
            let outage_on = sys::run_in(
                &line,
                "nft",
                &["list", "chain", "netdev", NFT_TABLE, "outage"],
            )
            .is_ok_and(|o| o.contains("drop"));
            paths.push(PathStatus {
                path: p,
                tbox_iface_up: iface_up(&t, p.tbox_iface()),
                gateway_iface_up: iface_up(&g, p.gateway_iface()),
                delay,
                outage_on,
                loss_drops: counter(&line, "loss"),
                outage_drops: counter(&line, "outage"),
            });
        }
    }
    Ok(LabStatus {
        prefix: names.prefix().to_string(),
        namespaces,
        paths,
    })
}

impl fmt::Display for LabStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespaces.is_empty() {
            return writeln!(f, "lab {}: down (no namespaces)", self.prefix);
        }
        writeln!(
            f,
            "lab {}: namespaces {}",
            self.prefix,
            self.namespaces.join(", ")
        )?;
        for p in &self.paths {
            writeln!(
                f,
                "  path {:<13} {}↔{}  tbox {} gateway {}  delay: {}  outage: {}  dropped: loss {} outage {}",
                p.path.label(),
                p.path.tbox_addr(),
                p.path.gateway_addr(),
                if p.tbox_iface_up { "up" } else { "DOWN" },
                if p.gateway_iface_up { "up" } else { "DOWN" },
                p.delay,
                if p.outage_on { "ON" } else { "off" },
                p.loss_drops,
                p.outage_drops
            )?;
        }
        Ok(())
    }
}
