//! Scenarios: per-path impairments (delay, jitter, loss, rate, outages), from the presets S1–S4
//! or a TOML file.
//!
//! ```toml
//! name = "my-road"
//! [path.a]            # 4G, eth0
//! delay_ms = 40.0     # mean one-way delay, each direction
//! jitter_ms = 10.0    # standard deviation of a normal distribution
//! loss_pct = 2.0      # random loss, each direction, dropped at the far end of the line
//! rate_kbit = 2000    # optional rate limit, each direction
//! reorder = true      # optional: frames may overtake each other (netem's behaviour, default)
//! [[path.a.outage]]
//! start_s = 10.0      # optional: seconds after the run starts; omitted = middle of the run
//! duration_s = 5.0
//! [path.b]            # 5G, eth1
//! delay_ms = 25.0
//! jitter_ms = 8.0
//! loss_pct = 1.5
//! ```
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{LabError, Result};
use crate::names::PathId;

/// Impairments of one path (applied the same way in both directions).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathSpec {
    /// Mean one-way delay in milliseconds.
    pub delay_ms: f64,
    /// Standard deviation of the one-way delay (normal distribution), in milliseconds.
    #[serde(default)]
    pub jitter_ms: f64,
    /// Random loss in percent (resolution 0.1 %).
    #[serde(default)]
    pub loss_pct: f64,
    /// Rate limit in kbit/s; none when absent.
    #[serde(default)]
    pub rate_kbit: Option<u32>,
    /// Whether frames may overtake each other when their sampled delays cross (netem does
    /// this); when false, a frame waits for the one before it (FIFO), which skews the delay up.
    #[serde(default = "default_true")]
    pub reorder: bool,
    /// Outages: the path drops everything for a while.
    #[serde(default)]
    pub outage: Vec<Outage>,
}

fn default_true() -> bool {
    true
}

/// A window in which a path drops every packet in both directions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outage {
    /// Seconds after the start of the run; absent means centred in the run.
    #[serde(default)]
    pub start_s: Option<f64>,
    /// How long the path is down, in seconds.
    pub duration_s: f64,
}

impl Outage {
    /// Start and end (seconds after the run start) for a run of `run_s` seconds.
    pub fn window(&self, run_s: f64) -> (f64, f64) {
        let start = self
            .start_s
            .unwrap_or(((run_s - self.duration_s) / 2.0).max(0.0));
        (start, start + self.duration_s)
    }
}

/// Both paths.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Paths {
    /// Path A (4G, eth0).
    pub a: PathSpec,
    /// Path B (5G, eth1).
    pub b: PathSpec,
}

/// A named set of per-path impairments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Short name (S1…S4 or the file's own).
    pub name: String,
    /// One line saying what it models.
    #[serde(default)]
    pub description: String,
    /// The paths.
    pub path: Paths,
}

fn spec(delay_ms: f64, jitter_ms: f64, loss_pct: f64) -> PathSpec {
    PathSpec {
        delay_ms,
        jitter_ms,
        loss_pct,
        rate_kbit: None,
        reorder: true,
        outage: Vec::new(),
    }
}

/// Names of the built-in presets.
pub const PRESETS: [&str; 4] = ["S1", "S2", "S3", "S4"];

impl Scenario {
    /// A built-in field scenario: S1 mild, S2 city, S3 weak signal, S4 handover.
    pub fn preset(name: &str) -> Option<Scenario> {
        let (description, a, b) = match name.to_ascii_uppercase().as_str() {
            "S1" => (
                "mild: light loss",
                spec(40.0, 8.0, 0.5),
                spec(25.0, 5.0, 0.3),
            ),
            "S2" => (
                "city: moderate loss",
                spec(40.0, 10.0, 2.0),
                spec(25.0, 8.0, 1.5),
            ),
            "S3" => (
                "weak signal: heavy loss",
                spec(50.0, 15.0, 5.0),
                spec(30.0, 10.0, 2.5),
            ),
            "S4" => {
                let mut a = spec(40.0, 10.0, 2.0);
                a.outage.push(Outage {
                    start_s: None,
                    duration_s: 5.0,
                });
                (
                    "handover: S2 with path A down for 5 s in the middle",
                    a,
                    spec(25.0, 8.0, 1.5),
                )
            }
            _ => return None,
        };
        Some(Scenario {
            name: name.to_ascii_uppercase(),
            description: description.to_string(),
            path: Paths { a, b },
        })
    }

    /// A preset name or the path of a TOML file.
    pub fn load(name_or_file: &str) -> Result<Scenario> {
        if let Some(s) = Self::preset(name_or_file) {
            return Ok(s);
        }
        let path = Path::new(name_or_file);
        let text = std::fs::read_to_string(path).map_err(|e| {
            LabError::Scenario(format!(
                "{name_or_file} is neither a preset ({}) nor a readable file: {e}",
                PRESETS.join(", ")
            ))
        })?;
        Self::from_toml(&text)
    }

    /// Parses and validates a TOML scenario.
    pub fn from_toml(text: &str) -> Result<Scenario> {
        let s: Scenario = toml::from_str(text).map_err(|e| LabError::Scenario(e.to_string()))?;
        s.validate()?;
        Ok(s)
    }

    /// Checks every number is in range.
    pub fn validate(&self) -> Result<()> {
        for p in PathId::BOTH {
            let spec = self.path(p);
            let bad = |what: &str| Err(LabError::Scenario(format!("path {}: {what}", p.letter())));
            if !(0.0..=10_000.0).contains(&spec.delay_ms) {
                return bad("delay_ms must be within 0..=10000");
            }
            if !(0.0..=10_000.0).contains(&spec.jitter_ms) {
                return bad("jitter_ms must be within 0..=10000");
            }
            if !(0.0..=100.0).contains(&spec.loss_pct) {
                return bad("loss_pct must be within 0..=100");
            }
            if spec.rate_kbit == Some(0) {
                return bad("rate_kbit must be positive");
            }
            for o in &spec.outage {
                if !(o.duration_s > 0.0 && o.duration_s < 86_400.0) {
                    return bad("outage duration_s must be positive");
                }
                if o.start_s.is_some_and(|s| !(0.0..86_400.0).contains(&s)) {
                    return bad("outage start_s must be within 0..86400");
                }
            }
        }
        Ok(())
    }

    /// The spec of one path.
    pub fn path(&self, p: PathId) -> &PathSpec {
        match p {
            PathId::A => &self.path.a,
            PathId::B => &self.path.b,
        }
    }

    /// Whether any path has an outage.
    pub fn has_outage(&self) -> bool {
        PathId::BOTH
            .iter()
            .any(|p| !self.path(*p).outage.is_empty())
    }
}

impl PathSpec {
    /// Loss as the per-mille threshold nftables compares `numgen random mod 1000` with.
    pub fn loss_per_mille(&self) -> u32 {
        (self.loss_pct * 10.0).round().clamp(0.0, 1000.0) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_match_the_readme() {
        let s2 = Scenario::preset("S2").unwrap();
        assert_eq!(
            (s2.path.a.delay_ms, s2.path.a.jitter_ms, s2.path.a.loss_pct),
            (40.0, 10.0, 2.0)
        );
        assert_eq!(
            (s2.path.b.delay_ms, s2.path.b.jitter_ms, s2.path.b.loss_pct),
            (25.0, 8.0, 1.5)
        );
        let s4 = Scenario::preset("s4").unwrap();
        assert_eq!(s4.path.a.outage[0].window(60.0), (27.5, 32.5));
        assert!(s4.path.b.outage.is_empty());
        assert_eq!(Scenario::preset("S1").unwrap().path.b.loss_per_mille(), 3);
        assert_eq!(Scenario::preset("S3").unwrap().path.a.loss_per_mille(), 50);
    }

    #[test]
    fn toml_round_trip_and_validation() {
        let text = "name = \"x\"\n[path.a]\ndelay_ms = 40.0\njitter_ms = 10.0\nloss_pct = 2.0\n\
                    [[path.a.outage]]\nstart_s = 10.0\nduration_s = 5.0\n\
                    [path.b]\ndelay_ms = 25.0\nrate_kbit = 1000\n";
        let s = Scenario::from_toml(text).unwrap();
        assert_eq!(s.path.a.outage[0].window(60.0), (10.0, 15.0));
        assert_eq!(s.path.b.rate_kbit, Some(1000));
        assert!(Scenario::from_toml(
            "name=\"x\"\n[path.a]\ndelay_ms=-1.0\n[path.b]\ndelay_ms=1.0\n"
        )
        .is_err());
        assert!(Scenario::from_toml(
            "name=\"x\"\n[path.a]\ndelay_ms=1.0\nbogus=1\n[path.b]\ndelay_ms=1.0\n"
        )
        .is_err());
        assert!(Scenario::load("/nonexistent/file.toml").is_err());
    }
}
