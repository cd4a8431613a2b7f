//! tboxscope's own capture of a `lab run`: libpcap on both ends of both paths (each handle
//! opened inside its lab namespace), QUIC decrypted with the run's key log, every packet fed to
//! the engine, and per transport the figures the engine measured, for the comparison table
//! next to the peers' ground truth.
//!
//! Packets are collected while the run goes and decoded when the traffic has ended: the QUIC
//! key log is complete only then (a live decoder would have to follow the file as it grows).
//! The four captures are declared to the engine as what they are (host, path, the capture at
//! the path's other end, local addresses); all namespaces share one kernel clock, so the clock
//! offset between the ends is stated as 0 rather than estimated.
use std::collections::HashMap;
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::Duration;

use probe_user::correlate::Correlator;
use probe_user::decode::net::LinkType;
use probe_user::decode::quic::Keylog;
use probe_user::dissect::{Decoded, DecodedPacket, DissectConfig, Dissector};
use probe_user::engine::flow::FlowKey;
use probe_user::engine::{AppIdRule, CapturePoint, Config, Host, Summary};
use probe_user::source::pcap::{InterfaceSpec, LiveCapture, LiveConfig, LiveEvent, PathStats};
use serde::Serialize;
use tboxscope_lab::error::{LabError, Result as LabResult};
use tboxscope_lab::peers::Transport;
use tboxscope_lab::run::{CapturePlan, RunObserver, RunReport};
use tboxscope_lab::PathId;

/// Where the lab's messages carry their id: bytes 8..16, little-endian (see
/// `tboxscope_lab::peers::message`). Copies of one message sent on separate sessions (one per
/// path) are matched by it.
pub const LAB_APP_ID: AppIdRule = AppIdRule {
    offset: 8,
    width: 8,
    little_endian: true,
};

/// How long packets still in flight are waited for after the traffic ended.
const SETTLE: Duration = Duration::from_millis(300);

/// One captured frame.
#[derive(Debug, Clone)]
struct Frame {
    point: usize,
    ts_ns: u64,
    orig_len: u32,
    link: LinkType,
    data: Vec<u8>,
}

/// What the collector thread gathered.
#[derive(Debug, Default)]
struct Collected {
    frames: Vec<Frame>,
    stats: Vec<PathStats>,
    problems: Vec<String>,
}

/// What tboxscope measured for one transport.
#[derive(Debug, Clone, Serialize)]
pub struct MeasuredTransport {
    /// Transport name.
    pub transport: &'static str,
    /// Messages the engine counted (closed messages of the transport's flows).
    pub messages: u64,
    /// Per-message latency (first send → first arrival), ms.
    pub p50_ms: Option<f64>,
    /// 99th percentile, ms.
    pub p99_ms: Option<f64>,
    /// 99.9th percentile, ms.
    pub p999_ms: Option<f64>,
    /// Messages carried on both paths, percent (redundant transports only).
    pub duplication_pct: Option<f64>,
    /// Wire bytes (all copies, retransmissions, ACKs, both directions) per unique payload byte.
    pub amplification: Option<f64>,
    /// The engine's flows that make up this transport.
    pub flows: Vec<String>,
    /// Why a figure is missing, if one is.
    pub note: Option<String>,
}

/// An outage the engine detected.
#[derive(Debug, Clone, Serialize)]
pub struct MeasuredOutage {
    /// Path label.
    pub path: String,
    /// Last sign of life before the silence (Unix ns, the capture clock).
    pub start_unix_ns: u64,
    /// Duration, seconds (None: still open at the end).
    pub duration_s: Option<f64>,
    /// Messages only the other path carried meanwhile.
    pub carried_by_others: u64,
    /// Messages no path carried meanwhile.
    pub lost: u64,
}

/// Everything tboxscope measured in a run.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    /// One row per transport of the run.
    pub transports: Vec<MeasuredTransport>,
    /// Outages the engine detected.
    pub outages: Vec<MeasuredOutage>,
    /// Frames captured per capture point (`side-interface`).
    pub frames: Vec<(String, u64)>,
    /// libpcap drop counters per capture point.
    pub pcap: Vec<(String, PathStats)>,
    /// What the engine inferred and warned about.
    pub inferences: Vec<String>,
    /// Capture problems (an interface that went away, a key log that did not load).
    pub problems: Vec<String>,
    /// The engine's whole-run summary.
    #[serde(skip)]
    pub summary: Summary,
}

/// The [`RunObserver`] that captures a lab run with tboxscope itself.
pub struct LabCapture {
    pcap_dir: Option<PathBuf>,
    live: Option<LiveCapture>,
    collector: Option<JoinHandle<Collected>>,
    labels: Vec<String>,
    measured: Option<Measured>,
}

impl LabCapture {
    /// A capture; with `pcap_dir`, the four captures are also written there as pcap files
    /// (with the key log next to them) for `tboxscope analyze`.
    pub fn new(pcap_dir: Option<PathBuf>) -> Self {
        Self {
            pcap_dir,
            live: None,
            collector: None,
            labels: Vec::new(),
            measured: None,
        }
    }

    /// The figures, once the run's traffic has ended.
    pub fn measured(&self) -> Option<&Measured> {
        self.measured.as_ref()
    }

    /// Takes the figures.
    pub fn take_measured(&mut self) -> Option<Measured> {
        self.measured.take()
    }
}

/// The label of a capture point: `tbox-eth0`, `gateway-g1`.
fn point_label(side: &str, interface: &str) -> String {
    format!("{side}-{interface}")
}

fn lab_err(what: &str, e: impl std::fmt::Display) -> LabError {
    LabError::Config(format!("tboxscope capture: {what}: {e}"))
}

impl RunObserver for LabCapture {
    fn before_traffic(&mut self, plan: &CapturePlan) -> LabResult<()> {
        let specs: Vec<InterfaceSpec> = plan
            .points
            .iter()
            .map(|p| InterfaceSpec {
                name: p.interface.clone(),
                label: point_label(p.side, &p.interface),
                namespace: Some(p.namespace.clone()),
            })
            .collect();
        self.labels = specs.iter().map(|s| s.label.clone()).collect();
        let config = LiveConfig {
            interfaces: specs,
            filter: Some("udp".into()),
            ..LiveConfig::default()
        };
        let live = LiveCapture::start(config).map_err(|e| lab_err("libpcap", e))?;
        let events = live.events().clone();
        let n = self.labels.len();
        let collector = std::thread::Builder::new()
            .name("lab-capture".into())
            .spawn(move || {
                let mut c = Collected {
                    stats: vec![PathStats::default(); n],
                    ..Collected::default()
                };
                // Ends when every capture thread has ended (the channel disconnects).
                while let Ok(ev) = events.recv() {
                    match ev {
                        LiveEvent::Packets(batch) => {
                            c.frames.extend(batch.into_iter().map(|p| Frame {
                                point: p.path,
                                ts_ns: p.ts_ns,
                                orig_len: p.orig_len,
                                link: p.link,
                                data: p.data,
                            }))
                        }
                        LiveEvent::Stats { path, stats, .. } => {
                            if let Some(s) = c.stats.get_mut(path) {
                                *s = stats;
                            }
                        }
                        LiveEvent::PathDown { path, reason, .. } => {
                            c.problems
                                .push(format!("capture {path} went down: {reason}"));
                        }
                        LiveEvent::PathUp { .. } => {}
                    }
                }
                c
            })
            .map_err(|e| lab_err("collector thread", e))?;
        self.live = Some(live);
        self.collector = Some(collector);
        // The handles are open and capturing: traffic may start.
        Ok(())
    }

    fn after_traffic(&mut self, plan: &CapturePlan) -> LabResult<()> {
        std::thread::sleep(SETTLE);
        if let Some(mut live) = self.live.take() {
            live.stop();
        }
        let collected = self
            .collector
            .take()
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default();
        if let Some(dir) = &self.pcap_dir {
            write_pcaps(dir, &self.labels, &collected.frames, &plan.keylog)
                .map_err(|e| lab_err(&format!("writing captures to {}", dir.display()), e))?;
        }
        self.measured = Some(analyse(plan, &self.labels, collected));
        Ok(())
    }
}

/// Decodes the captured frames in time order through the dissector and the engine.
fn analyse(plan: &CapturePlan, labels: &[String], mut collected: Collected) -> Measured {
    let mut problems = std::mem::take(&mut collected.problems);
    let keylog = match Keylog::from_file(&plan.keylog) {
        Ok(k) => Some(k),
        Err(e) => {
            problems.push(format!(
                "QUIC key log not loaded ({e}): QUIC is not decrypted"
            ));
            None
        }
    };
    let mut dissector = Dissector::new(DissectConfig {
        keylog,
        app_id: Some(LAB_APP_ID),
        ..DissectConfig::default()
    });
    // Transports hold messages back (through an outage, behind a backlog) and deliver them
    // late: a message stays open until the run ends, so that a late copy counts as delivered
    // as it does in the peers' ground truth.
    let config = Config {
        app_id: Some(LAB_APP_ID),
        emit_messages: false,
        message_timeout_ns: ((plan.duration_s + plan.drain_s + 1.0) * 1e9) as u64,
        ..Config::default()
    };
    let mut correlator = Correlator::new(config);
    // Capture ids are the points' indices; each T-Box capture is paired with the gateway
    // capture of the same path.
    for (i, p) in plan.points.iter().enumerate() {
        let other = plan
            .points
            .iter()
            .position(|q| q.path == p.path && q.side != p.side);
        let tbox = p.side == "tbox";
        let addr = if tbox {
            p.path.tbox_addr()
        } else {
            p.path.gateway_addr()
        };
        correlator.declare(CapturePoint {
            ts_ns: 0,
            capture: u16::try_from(i).unwrap_or(u16::MAX),
            name: labels.get(i).cloned().unwrap_or_default(),
            path: labels.get(i).cloned().unwrap_or_default(),
            host: if tbox { Host::Tbox } else { Host::Gateway },
            local_addrs: vec![IpAddr::V4(addr)],
            clock_offset_ns: Some(0),
            pair_with: other.and_then(|o| u16::try_from(o).ok()),
        });
    }
    collected.frames.sort_by_key(|f| (f.ts_ns, f.point));
    let mut scratch: Vec<DecodedPacket> = Vec::with_capacity(16);
    let mut flow_ports: HashMap<String, u16> = HashMap::new();
    let mut frames_per_point = vec![0u64; labels.len()];
    let mut last_ts = 0;
    for f in &collected.frames {
        if let Some(n) = frames_per_point.get_mut(f.point) {
            *n += 1;
        }
        last_ts = last_ts.max(f.ts_ns);
        scratch.clear();
        dissector.dissect(Some(f.link), &f.data, f.ts_ns, &mut scratch);
        let label = labels.get(f.point).map_or("?", String::as_str);
        for (i, d) in scratch.iter().enumerate() {
            remember_flow(&mut flow_ports, d);
            correlator.observe_capture(
                u16::try_from(f.point).unwrap_or(u16::MAX),
                label,
                f.orig_len,
                i == 0,
                d,
            );
        }
        correlator.engine_mut().drain_records().for_each(drop);
    }
    let summary = correlator.engine_mut().finish(last_ts);
    let transports = plan
        .transports
        .iter()
        .map(|(t, port, _)| measured_transport(*t, *port, &summary, &flow_ports))
        .collect();
    let outages = summary
        .outages
        .iter()
        .map(|o| MeasuredOutage {
            path: o.path.clone(),
            start_unix_ns: o.start_ns,
            duration_s: o.end_ns.map(|_| o.duration_ns as f64 / 1e9),
            carried_by_others: o.carried_by_others,
            lost: o.lost,
        })
        .collect();
    Measured {
        transports,
        outages,
        frames: labels.iter().cloned().zip(frames_per_point).collect(),
        pcap: labels.iter().cloned().zip(collected.stats).collect(),
        inferences: summary.health.inferences.clone(),
        problems,
        summary,
    }
}

/// Notes which server port a KCP conversation or QUIC connection talks to (flow → transport).
fn remember_flow(ports: &mut HashMap<String, u16>, d: &DecodedPacket) {
    let port = d.src.port().min(d.dst.port());
    let key = match &d.decoded {
        Decoded::KcpSegment(s) => FlowKey::Kcp { conv: s.conv },
        Decoded::QuicPacket(p) => match p.connection {
            Some(n) => FlowKey::Quic {
                conn: format!("quic#{n}"),
            },
            None => return,
        },
        Decoded::UdpDatagram(_) => return,
    };
    if ports.len() < 4096 {
        ports.entry(key.name()).or_insert(port);
    }
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// The row of one transport: its flows are the ones on its port (a group of per-path
/// sessions, or single sessions).
fn measured_transport(
    t: Transport,
    port: u16,
    summary: &Summary,
    flow_ports: &HashMap<String, u16>,
) -> MeasuredTransport {
    let group_names = [
        FlowKey::QuicGroup { server_port: port }.name(),
        FlowKey::KcpGroup { server_port: port }.name(),
    ];
    let flows: Vec<_> = summary
        .flows
        .iter()
        .filter(|f| {
            f.messages > 0
                && (group_names.contains(&f.flow) || flow_ports.get(&f.flow) == Some(&port))
        })
        .collect();
    let mut row = MeasuredTransport {
        transport: t.name(),
        messages: flows.iter().map(|f| f.messages).sum(),
        p50_ms: None,
        p99_ms: None,
        p999_ms: None,
        duplication_pct: None,
        amplification: None,
        flows: flows.iter().map(|f| f.flow.clone()).collect(),
        note: None,
    };
    if t == Transport::Tcp {
        row.note = Some(
            "TCP payload is not decoded from packets (tboxscope sees TCP through eBPF)".into(),
        );
        return row;
    }
    match flows.as_slice() {
        [] => row.note = Some("no flow of this transport was decoded".into()),
        [f] => {
            if f.latency.count > 0 {
                row.p50_ms = Some(ms(f.latency.p50_us));
                row.p99_ms = Some(ms(f.latency.p99_us));
                row.p999_ms = Some(ms(f.latency.p999_us));
            } else {
                row.note = Some("no one-way latency sample".into());
            }
            if t.is_redundant() {
                row.duplication_pct = Some(f.duplication * 100.0);
            }
            row.amplification = (f.amplification > 0.0).then_some(f.amplification);
        }
        many => {
            row.note = Some(format!(
                "{} separate flows: copies were not matched across paths",
                many.len()
            ));
        }
    }
    row
}

/// Writes one classic pcap (nanosecond) file per capture point, and the key log beside them.
fn write_pcaps(
    dir: &Path,
    labels: &[String],
    frames: &[Frame],
    keylog: &Path,
) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (i, label) in labels.iter().enumerate() {
        let mine: Vec<&Frame> = frames.iter().filter(|f| f.point == i).collect();
        let link = mine.first().map_or(1, |f| f.link.linktype());
        let file = std::fs::File::create(dir.join(format!("{label}.pcap")))?;
        let mut w = std::io::BufWriter::new(file);
        w.write_all(&0xa1b2_3c4du32.to_le_bytes())?;
        w.write_all(&2u16.to_le_bytes())?;
        w.write_all(&4u16.to_le_bytes())?;
        w.write_all(&0i32.to_le_bytes())?;
        w.write_all(&0u32.to_le_bytes())?;
        w.write_all(&65_535u32.to_le_bytes())?;
        w.write_all(&link.to_le_bytes())?;
        for f in mine {
            let secs = u32::try_from(f.ts_ns / 1_000_000_000).unwrap_or(u32::MAX);
            let nanos = (f.ts_ns % 1_000_000_000) as u32;
            let caplen = u32::try_from(f.data.len()).unwrap_or(u32::MAX);
            w.write_all(&secs.to_le_bytes())?;
            w.write_all(&nanos.to_le_bytes())?;
            w.write_all(&caplen.to_le_bytes())?;
            w.write_all(&f.orig_len.to_le_bytes())?;
            w.write_all(&f.data)?;
        }
        w.flush()?;
    }
    if keylog.exists() {
        std::fs::copy(keylog, dir.join("quic-keylog.txt"))?;
    }
    Ok(())
}

/// The lab's path id of a capture label's interface, for readers of [`Measured::outages`].
pub fn path_of_label(label: &str) -> Option<PathId> {
    PathId::BOTH
        .into_iter()
        .find(|p| label.ends_with(p.tbox_iface()) || label.ends_with(p.gateway_iface()))
}

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "n/a".to_owned(), |x| format!("{x:.prec$}"))
}

/// The table of tboxscope's figures next to the peers' ground truth, per transport, and the
/// outages (injected vs detected).
pub fn render_comparison(report: &RunReport, m: &Measured) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "tboxscope's own capture (libpcap on both ends of both paths → engine) vs ground truth (the peers):"
    );
    let _ = writeln!(
        s,
        "latency: tboxscope first copy on the wire → first arrival on the wire; truth application → application (adds the wait in the sender's queue)"
    );
    let _ = writeln!(
        s,
        "{:<15} {:<9} {:>6} {:>8} {:>8} {:>8} {:>6} {:>7}",
        "transport", "source", "msgs", "P50 ms", "P99 ms", "P999 ms", "dup %", "amplif"
    );
    for t in &report.transports {
        let redundant = t.paths.len() > 1;
        let _ = writeln!(
            s,
            "{:<15} {:<9} {:>6} {:>8.1} {:>8.1} {:>8.1} {:>6} {:>6.2}x",
            t.transport,
            "truth",
            t.sent,
            t.p50_ms,
            t.p99_ms,
            t.p999_ms,
            if redundant {
                format!("{:.1}", t.duplication_pct)
            } else {
                "-".into()
            },
            t.amplification
        );
        let Some(r) = m.transports.iter().find(|r| r.transport == t.transport) else {
            continue;
        };
        let _ = writeln!(
            s,
            "{:<15} {:<9} {:>6} {:>8} {:>8} {:>8} {:>6} {:>7}",
            "",
            "tboxscope",
            r.messages,
            opt(r.p50_ms, 1),
            opt(r.p99_ms, 1),
            opt(r.p999_ms, 1),
            if redundant {
                opt(r.duplication_pct, 1)
            } else {
                "-".into()
            },
            r.amplification
                .map_or_else(|| "n/a".to_owned(), |a| format!("{a:.2}x"))
        );
        if let Some(n) = &r.note {
            let _ = writeln!(s, "{:<15} {:<9} note: {n}", "", "");
        }
    }
    let injected: Vec<_> = report
        .timeline
        .iter()
        .filter(|e| e.kind == "outage_start")
        .collect();
    for e in &injected {
        let end = report
            .timeline
            .iter()
            .find(|x| x.kind == "outage_end" && x.path == e.path && x.mono_ns >= e.mono_ns);
        let _ = writeln!(
            s,
            "outage injected on path {:?}: {:.3} s from {:.3} s",
            e.path,
            end.map_or(f64::NAN, |x| x.unix_ns.saturating_sub(e.unix_ns) as f64
                / 1e9),
            e.at_s
        );
    }
    if m.outages.is_empty() {
        let _ = writeln!(s, "tboxscope detected no outage");
    }
    for o in &m.outages {
        let _ = writeln!(
            s,
            "tboxscope detected an outage on {}: {} from {:.3} s; {} messages carried only by the other path, {} lost",
            o.path,
            o.duration_s
                .map_or_else(|| "still open at the end".to_owned(), |d| format!("{d:.3} s")),
            o.start_unix_ns.saturating_sub(report.start_unix_ns) as f64 / 1e9,
            o.carried_by_others,
            o.lost
        );
    }
    for (label, st) in &m.pcap {
        if st.dropped > 0 || st.if_dropped > 0 {
            let _ = writeln!(
                s,
                "warning: libpcap dropped {} packets on {label} ({} by the interface)",
                st.dropped, st.if_dropped
            );
        }
    }
    for p in &m.problems {
        let _ = writeln!(s, "warning: {p}");
    }
    s
}
