//! `lab run`: testbed up, every transport sending together, the scenario's outages switched on
//! schedule, ground truth from the receivers, wire bytes from per-port nftables counters.
//!
//! Seam for tboxscope's own capture: a [`RunObserver`] gets the [`CapturePlan`] (namespaces and
//! interfaces on both ends of both paths, ports per transport, key log path) after the testbed
//! is up and before the first message, and again when the traffic has ended; the
//! [`RunReport`]'s timeline has the outage times in both clocks, so a capture analysed by the
//! engine can be compared against the peers' ground truth.
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::delayline::LineStats;
use crate::error::{LabError, Result};
use crate::names::{LabNames, PathId, NFT_TABLE};
use crate::peers::{self, GroundTruth, Profile, Receivers, SendOptions, Transport};
use crate::report::{self, TransportReport};
use crate::scenario::Scenario;
use crate::sys;
use crate::testbed::{DelayBackend, DelayChoice, Testbed, UpOptions};

/// Options of a run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Names of the instance (tests use unique ones).
    pub names: LabNames,
    /// How long messages are generated.
    pub duration: Duration,
    /// How long connections stay open after the last message.
    pub drain: Duration,
    /// The traffic profile.
    pub profile: Profile,
    /// Which transports run (together).
    pub transports: Vec<Transport>,
    /// Where the QUIC client writes its TLS key log.
    pub keylog: PathBuf,
    /// Delay backend choice.
    pub delay: DelayChoice,
    /// Seed of the delay generators.
    pub seed: u64,
    /// Set to end the run early: message generation and the drain stop within 20 ms, and the
    /// run still captures, reports what happened so far and tears down.
    pub stop: Arc<AtomicBool>,
}

impl RunOptions {
    /// Defaults: 60 s, 50 msg/s × 600 B, every transport, key log in /tmp.
    pub fn new(names: LabNames) -> Self {
        RunOptions {
            keylog: PathBuf::from(format!("/tmp/{}quic-keylog.txt", names.prefix())),
            names,
            duration: Duration::from_secs(60),
            drain: Duration::from_secs(4),
            profile: Profile::default(),
            transports: Transport::defaults(),
            delay: DelayChoice::Auto,
            seed: 0x7b0c_5c09,
            stop: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Bytes of every message: the profile's size, at least the header.
    pub fn message_size(&self) -> usize {
        self.profile.size.max(crate::peers::message::HEADER_LEN)
    }
}

/// Where a capture can watch one end of one path.
#[derive(Debug, Clone, Serialize)]
pub struct CapturePoint {
    /// Network namespace (`ip netns exec NAME …`, or `/run/netns/NAME`).
    pub namespace: String,
    /// Interface inside it.
    pub interface: String,
    /// Which path.
    pub path: PathId,
    /// "tbox" (sender side of uplink) or "gateway".
    pub side: &'static str,
}

/// What tboxscope needs to capture a run.
#[derive(Debug, Clone, Serialize)]
pub struct CapturePlan {
    /// Both ends of both paths.
    pub points: Vec<CapturePoint>,
    /// Transports with their gateway port and paths.
    pub transports: Vec<(Transport, u16, Vec<PathId>)>,
    /// The QUIC key log.
    pub keylog: PathBuf,
    /// The scenario.
    pub scenario: Scenario,
    /// The run length (generation).
    pub duration_s: f64,
    /// How long the connections stay open after the last message.
    pub drain_s: f64,
    /// Bytes of every message (the profile's size, at least the header).
    pub message_size: usize,
}

/// Hooks around the traffic of a run (tboxscope's capture attaches here).
pub trait RunObserver {
    /// Called after the testbed is up and the receivers listen, before any message.
    fn before_traffic(&mut self, _plan: &CapturePlan) -> Result<()> {
        Ok(())
    }
    /// Called when the traffic (and its drain) has ended, before teardown.
    fn after_traffic(&mut self, _plan: &CapturePlan) -> Result<()> {
        Ok(())
    }
}

/// An observer that does nothing.
#[derive(Debug, Default)]
pub struct NoObserver;
impl RunObserver for NoObserver {}

/// A scheduled event that happened.
#[derive(Debug, Clone, Serialize)]
pub struct TimelineEvent {
    /// What: "outage_start" or "outage_end".
    pub kind: &'static str,
    /// Which path.
    pub path: PathId,
    /// Seconds after the first message.
    pub at_s: f64,
    /// CLOCK_MONOTONIC ns.
    pub mono_ns: u64,
    /// CLOCK_REALTIME ns (compare with capture timestamps).
    pub unix_ns: u64,
}

/// The result of a run.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// The scenario.
    pub scenario: Scenario,
    /// Delay backend used.
    pub backend: DelayBackend,
    /// The profile.
    pub profile: Profile,
    /// Generation time in seconds.
    pub duration_s: f64,
    /// CLOCK_REALTIME ns of the first message.
    pub start_unix_ns: u64,
    /// Outage switches as they happened.
    pub timeline: Vec<TimelineEvent>,
    /// One row per transport.
    pub transports: Vec<TransportReport>,
    /// Delay-line counters per path.
    pub lines: Vec<(PathId, LineStats)>,
    /// Connection errors.
    pub errors: Vec<(String, String)>,
}

fn counter_name(t: Transport, p: PathId, dir: &str) -> String {
    format!("{}_{}_{dir}", t.name().replace('-', "_"), p.letter())
}

fn install_accounting(names: &LabNames, transports: &[Transport]) -> Result<()> {
    for (ns, up) in [(names.tbox_ns(), true), (names.gateway_ns(), false)] {
        let mut s = String::new();
        for &t in transports {
            let proto = if t.is_udp() { "udp" } else { "tcp" };
            let port_match = if up { "dport" } else { "sport" };
            for &p in t.paths() {
                let iface = if up {
                    p.tbox_iface()
                } else {
                    p.gateway_iface()
                };
                let name = counter_name(t, p, if up { "up" } else { "down" });
                s.push_str(&format!(
                    "add counter inet {NFT_TABLE} {name}\nadd rule inet {NFT_TABLE} account oifname \"{iface}\" {proto} {port_match} {} counter name \"{name}\"\n",
                    t.port()
                ));
            }
        }
        sys::nft_script(&ns, &s)?;
    }
    Ok(())
}

fn read_bytes(ns: &str, name: &str) -> u64 {
    sys::run_in(ns, "nft", &["list", "counter", "inet", NFT_TABLE, name])
        .ok()
        .and_then(|o| {
            o.split_whitespace()
                .skip_while(|w| *w != "bytes")
                .nth(1)
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Runs `scenario` end to end and returns the comparison.
pub fn run(
    scenario: &Scenario,
    opts: &RunOptions,
    observer: &mut dyn RunObserver,
) -> Result<RunReport> {
    if opts.transports.is_empty() {
        return Err(LabError::Config("no transports to run".into()));
    }
    let names = opts.names.clone();
    let up = UpOptions {
        delay: opts.delay,
        seed: opts.seed,
        ..UpOptions::default()
    };
    let bed = Testbed::up(names.clone(), scenario, &up)?;
    install_accounting(&names, &opts.transports)?;
    let _ = std::fs::remove_file(&opts.keylog);
    let truth = GroundTruth::new(Transport::ALL.len());
    let receivers = Receivers::start(&names, &opts.transports, truth.clone())?;
    let plan = CapturePlan {
        points: PathId::BOTH
            .iter()
            .flat_map(|&p| {
                [
                    CapturePoint {
                        namespace: names.tbox_ns(),
                        interface: p.tbox_iface().into(),
                        path: p,
                        side: "tbox",
                    },
                    CapturePoint {
                        namespace: names.gateway_ns(),
                        interface: p.gateway_iface().into(),
                        path: p,
                        side: "gateway",
                    },
                ]
            })
            .collect(),
        transports: opts
            .transports
            .iter()
            .map(|t| (*t, t.port(), t.paths().to_vec()))
            .collect(),
        keylog: opts.keylog.clone(),
        scenario: scenario.clone(),
        duration_s: opts.duration.as_secs_f64(),
        drain_s: opts.drain.as_secs_f64(),
        message_size: opts.message_size(),
    };
    observer.before_traffic(&plan)?;

    // The outage schedule, relative to the first message.
    let mut schedule: Vec<(f64, PathId, bool)> = Vec::new();
    for p in PathId::BOTH {
        for o in &scenario.path(p).outage {
            let (a, b) = o.window(opts.duration.as_secs_f64());
            schedule.push((a, p, true));
            schedule.push((b, p, false));
        }
    }
    schedule.sort_by(|x, y| x.0.total_cmp(&y.0));
    let (start_tx, start_rx) = std::sync::mpsc::channel::<u64>();
    let cancel = Arc::new(AtomicBool::new(false));
    let timeline = {
        let names = names.clone();
        let cancel = cancel.clone();
        let stop = opts.stop.clone();
        std::thread::spawn(move || -> Result<Vec<TimelineEvent>> {
            let mut events = Vec::new();
            let Ok(start) = start_rx.recv() else {
                return Ok(events);
            };
            for (at, p, down) in schedule {
                let due = start.saturating_add((at * 1e9) as u64);
                while sys::mono_ns() < due {
                    if cancel.load(Ordering::Relaxed) || stop.load(Ordering::Relaxed) {
                        return Ok(events);
                    }
                    let left = due.saturating_sub(sys::mono_ns()).min(20_000_000);
                    std::thread::sleep(Duration::from_nanos(left));
                }
                crate::testbed::set_outage(&names, p, down)?;
                let mono = sys::mono_ns();
                events.push(TimelineEvent {
                    kind: if down { "outage_start" } else { "outage_end" },
                    path: p,
                    at_s: mono.saturating_sub(start) as f64 / 1e9,
                    mono_ns: mono,
                    unix_ns: sys::unix_ns(),
                });
            }
            Ok(events)
        })
    };
    let send_opts = SendOptions {
        profile: opts.profile,
        duration: opts.duration,
        drain: opts.drain,
        keylog: opts.keylog.clone(),
        stop: opts.stop.clone(),
    };
    let sent = peers::run_senders(
        &names,
        &opts.transports,
        &send_opts,
        truth.clone(),
        start_tx,
    );
    cancel.store(true, Ordering::Relaxed);
    let events = timeline
        .join()
        .map_err(|_| LabError::Config("timeline thread panicked".into()))?;
    let sent = sent?;
    let events = events?;
    receivers.stop()?;
    observer.after_traffic(&plan)?;

    let mut rows = Vec::new();
    let records = truth.snapshot();
    for &t in &opts.transports {
        let mut bytes = report::WireBytes::default();
        for &p in t.paths() {
            let up = read_bytes(&names.tbox_ns(), &counter_name(t, p, "up"));
            let down = read_bytes(&names.gateway_ns(), &counter_name(t, p, "down"));
            bytes.add(p, up, down);
        }
        let rec = records.get(t.index()).cloned().unwrap_or_default();
        rows.push(report::analyse(
            t,
            &rec,
            &bytes,
            opts.profile.size,
            &events,
            sent.start_mono_ns,
        ));
    }
    let backend = bed.backend();
    let lines = bed.teardown()?;
    Ok(RunReport {
        scenario: scenario.clone(),
        backend,
        profile: opts.profile,
        duration_s: opts.duration.as_secs_f64(),
        start_unix_ns: sent.start_unix_ns,
        timeline: events,
        transports: rows,
        lines,
        errors: sent.errors,
    })
}
