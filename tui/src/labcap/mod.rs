//! tboxscope's own capture of a `lab run`: libpcap on both ends of both paths (each handle
//! opened inside its lab namespace), the eBPF TCP probes (the ones `tboxscope capture` loads)
//! for the TCP baseline's socket, QUIC decrypted with the run's key log, every packet and
//! kernel event fed to the engine, and per transport the figures the engine measured, for the
//! comparison table next to the peers' ground truth.
//!
//! Packets are collected while the run goes and decoded again when the traffic has ended: the
//! QUIC key log is complete only then. With a live feed ([`LabCapture::live`], `lab run
//! --tui`), they are also decoded as they arrive for the terminal UI, which follows the key
//! log as the peers append to it. The four captures are declared to the engine as what they
//! are (host, path, the capture at the path's other end, local addresses); all namespaces
//! share one kernel clock, so the clock offset between the ends is stated as 0 rather than
//! estimated. The TCP baseline's messages are cut from its byte stream by the engine, as
//! `analyze`, `replay` and the live UI cut them (the lab's framing: `fixed:` its message size).

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use probe_user::capture::clock::WallClock;
use probe_user::correlate::Correlator;
use probe_user::decode::net::tcp_segment;
use probe_user::decode::quic::Keylog;
use probe_user::dissect::{Decoded, DecodedPacket, DissectConfig};
use probe_user::engine::advice::Evidence;
use probe_user::engine::input::{RetransmitKind, TcpEvent, TcpEventKind};
use probe_user::engine::{units, AppIdRule, CapturePoint, Config, Framing, Host, Summary};
use probe_user::engine::{ConnId, FlowKey};
use probe_user::source::ebpf::{ProbeOptions, TcpFilter};
use probe_user::source::pcap::live::LivePacket;
use probe_user::source::pcap::{InterfaceSpec, LiveCapture, LiveConfig, LiveEvent, PathStats};
use serde::Serialize;
use tboxscope_lab::error::{LabError, Result as LabResult};
use tboxscope_lab::peers::Transport;
use tboxscope_lab::run::{CapturePlan, RunObserver, RunOptions, RunReport};
use tboxscope_lab::PathId;

use crate::feed::EngineFeed;
use crate::kerneltcp::{KernelTcp, TcpDrops, TcpMessage};
use crate::report::ReportData;
use crate::source::SnapshotFeed;

/// The TCP baseline's sockets (client, server) the T-Box's captures saw.
type LabSockets = HashSet<(SocketAddr, SocketAddr)>;

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

/// How often the live feed publishes a snapshot.
const PUBLISH_EVERY: Duration = Duration::from_millis(200);
/// Kernel events kept while their socket is not yet known from the capture.
const MAX_PENDING: usize = 4096;

/// What the collector thread gathered.
#[derive(Debug, Default)]
struct Collected {
    frames: Vec<LivePacket>,
    stats: Vec<PathStats>,
    problems: Vec<String>,
    /// Kernel TCP events of every socket the probes' filter let through.
    tcp_events: Vec<TcpEvent>,
    /// The probes' last status line.
    tcp_status: Option<String>,
    /// Kernel events lost (ring buffer full, failed reads, not given to the engine).
    tcp_dropped: TcpDrops,
}

/// What tboxscope measured for one transport.
#[derive(Debug, Clone, Serialize)]
pub struct MeasuredTransport {
    /// Transport name.
    pub transport: &'static str,
    /// Messages the engine counted (closed messages of the transport's flows; for TCP, those
    /// cut from the byte stream of the baseline's socket).
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
    /// The kernel's view of the TCP baseline's socket (TCP only).
    pub tcp: Option<MeasuredTcp>,
    /// Why a figure is missing, if one is.
    pub note: Option<String>,
}

/// What tboxscope saw of the TCP baseline's socket: the eBPF probes' retransmissions and RTO
/// backoff, the engine's head-of-line incidents, and the retransmissions on the wire.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MeasuredTcp {
    /// The socket (client → server).
    pub connection: Option<String>,
    /// Messages seen sent at the T-Box and complete at the gateway (timed one way).
    pub delivered: u64,
    /// The probes' state (`TCP probes: 4/4 hooks attached`, or why not).
    pub probes: String,
    /// Kernel events of this socket.
    pub kernel_events: u64,
    /// Kernel events lost (all sockets): in the ring buffer, or read but not given to the
    /// engine.
    pub kernel_dropped: u64,
    /// Retransmissions the kernel reported, by kind.
    pub retransmits: u64,
    /// Of those, after a retransmission timeout (RTO, and the Loss-state queue after one).
    pub timeout_retransmits: u64,
    /// Of those, fast retransmits and tail-loss probes.
    pub fast_retransmits: u64,
    /// Highest RTO backoff level (`icsk_backoff`) of the socket's events.
    pub max_backoff: u8,
    /// Largest RTO seen, ms.
    pub max_rto_ms: f64,
    /// Data segments the T-Box's capture shows carrying only bytes sent before.
    pub wire_retransmits: u64,
    /// The kernel's retransmissions joined with those of the capture that saw most of them:
    /// how many each side saw that the other did too, and what it did not.
    pub join: Option<probe_user::engine::record::TcpJoinDirection>,
    /// Head-of-line stall periods of the flow: the engine's incidents, the kernel's (a
    /// retransmitted segment from its first send to the ACK past it) and the wire's (a hole at
    /// the gateway's capture), overlapping ones merged.
    pub hol_stalls: u64,
    /// The longest stall, ms.
    pub longest_hol_stall_ms: Option<f64>,
    /// Time during which some stall held the stream, ms.
    pub total_hol_stall_ms: f64,
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
    /// How the engine told the path was down.
    pub evidence: String,
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
    /// What the capture measured of the paths, for `advise`.
    #[serde(skip)]
    pub evidence: Evidence,
    /// What the picture report (`lab run --report`) draws.
    #[serde(skip)]
    pub pictures: ReportData,
}

/// The [`RunObserver`] that captures a lab run with tboxscope itself.
pub struct LabCapture {
    pcap_dir: Option<PathBuf>,
    live_feed: Option<SnapshotFeed>,
    live: Option<LiveCapture>,
    kernel: Option<KernelTcp>,
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
            live_feed: None,
            live: None,
            kernel: None,
            collector: None,
            labels: Vec::new(),
            measured: None,
        }
    }

    /// Also decodes the run as it goes and publishes snapshots to `feed` (the terminal UI).
    pub fn live(mut self, feed: SnapshotFeed) -> Self {
        self.live_feed = Some(feed);
        self
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

/// The label of a capture point: `tbox-eth0`, `gateway-g1` (also its pcap file's name).
pub fn point_label(side: &str, interface: &str) -> String {
    format!("{side}-{interface}")
}

fn lab_err(what: &str, e: impl std::fmt::Display) -> LabError {
    LabError::Config(format!("tboxscope capture: {what}: {e}"))
}

/// The TCP baselines' server ports (one per congestion-control algorithm run).
fn tcp_ports(plan: &CapturePlan) -> impl Iterator<Item = u16> + '_ {
    plan.transports
        .iter()
        .filter(|(t, ..)| t.is_tcp())
        .map(|(_, port, _)| *port)
}

/// How long a lab run's messages stay open (seconds): until the run ends, so that a copy
/// held back (through an outage, behind a backlog) and delivered late counts as delivered, as
/// it does in the peers' ground truth.
pub fn message_timeout_s(duration_s: f64, drain_s: f64) -> f64 {
    duration_s + drain_s + 1.0
}

/// How the lab's messages are cut from a byte stream: `quic-stream` writes them back to back
/// on one stream, `tcp` on its socket, each `message_size` bytes (the other transports'
/// messages, one per stream or datagram, are that size too, so the same framing cuts them as
/// they are).
pub fn lab_framing(transports: &[Transport], message_size: usize) -> Option<Framing> {
    transports
        .iter()
        .any(|t| *t == Transport::QuicStream || t.is_tcp())
        .then(|| u32::try_from(message_size).ok())
        .flatten()
        .map(Framing::Fixed)
}

/// The `tboxscope analyze` options that analyze a lab run's captures as the run itself did:
/// the lab messages' application id, the run's message timeout, the gateway captures' clock
/// offset, zero (the lab's namespaces share one clock), and the framing of its stream
/// messages ([`lab_framing`]), if any.
pub fn analyze_options(duration_s: f64, drain_s: f64, framing: Option<Framing>) -> String {
    let r = LAB_APP_ID;
    let clocks: Vec<String> = PathId::BOTH
        .iter()
        .map(|p| {
            format!(
                "--clock-offset {}=0",
                point_label("gateway", p.gateway_iface())
            )
        })
        .collect();
    let framing = framing
        .map(|f| format!(" --framing {f}"))
        .unwrap_or_default();
    format!(
        "--app-id {}:{}{} --message-timeout {} {}{framing}",
        r.offset,
        r.width,
        if r.little_endian { ":le" } else { "" },
        message_timeout_s(duration_s, drain_s).ceil(),
        clocks.join(" ")
    )
}

/// The arguments of the `tboxscope analyze` command (after `analyze`) that analyzes the
/// captures a run with `opts` wrote to `dir` (`lab run --pcap DIR` prints it).
pub fn analyze_args(dir: &Path, opts: &RunOptions) -> Vec<String> {
    let options = analyze_options(
        opts.duration.as_secs_f64(),
        opts.drain.as_secs_f64(),
        lab_framing(&opts.transports, opts.message_size()),
    );
    let mut args: Vec<String> = options.split(' ').map(str::to_owned).collect();
    args.push("--keylog".into());
    args.push(dir.join("quic-keylog.txt").display().to_string());
    for p in PathId::BOTH {
        for label in [
            point_label("tbox", p.tbox_iface()),
            point_label("gateway", p.gateway_iface()),
        ] {
            args.push(dir.join(format!("{label}.pcap")).display().to_string());
        }
    }
    args
}

/// The engine's and the dissector's configuration for a lab run.
fn engine_feed(plan: &CapturePlan, keylog: Option<Keylog>, follow: Option<PathBuf>) -> EngineFeed {
    let config = Config {
        app_id: Some(LAB_APP_ID),
        // After the run, each message for the picture report; the live view needs none.
        emit_messages: follow.is_none(),
        // What the advice after the tables is made from.
        collect_evidence: true,
        message_timeout_ns: (message_timeout_s(plan.duration_s, plan.drain_s) * 1e9) as u64,
        ..Config::default()
    };
    let transports: Vec<Transport> = plan.transports.iter().map(|(t, ..)| *t).collect();
    let framing = lab_framing(&transports, plan.message_size);
    EngineFeed::new(
        DissectConfig {
            keylog,
            app_id: Some(LAB_APP_ID),
            framing,
            ..DissectConfig::default()
        },
        config,
        follow,
        plan.points.len(),
    )
}

/// Declares the four capture points at `at_ns` (the run's first packet, or now): ids are the
/// points' indices; each T-Box capture is paired with the gateway capture of the same path.
fn declare_points(correlator: &mut Correlator, plan: &CapturePlan, labels: &[String], at_ns: u64) {
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
            ts_ns: at_ns,
            capture: u16::try_from(i).unwrap_or(u16::MAX),
            name: labels.get(i).cloned().unwrap_or_default(),
            path: labels.get(i).cloned().unwrap_or_default(),
            host: if tbox { Host::Tbox } else { Host::Gateway },
            local_addrs: vec![IpAddr::V4(addr)],
            clock_offset_ns: Some(0),
            pair_with: other.and_then(|o| u16::try_from(o).ok()),
        });
    }
}

/// Whether point `i` is at the T-Box.
fn at_tbox(plan: &CapturePlan, i: usize) -> bool {
    plan.points.get(i).is_some_and(|p| p.side == "tbox")
}

/// Notes the TCP baseline's socket of a segment the T-Box's capture saw going to its port.
fn note_socket(
    sockets: &mut LabSockets,
    plan: &CapturePlan,
    p: &LivePacket,
    seg: &probe_user::decode::net::TcpSegment<'_>,
) {
    if at_tbox(plan, p.path)
        && tcp_ports(plan).any(|port| port == seg.dst.port())
        && sockets.len() < MAX_LAB_SOCKETS
    {
        sockets.insert((seg.src, seg.dst));
    }
}

/// The baseline's sockets followed (the lab opens one; a reconnection makes another).
const MAX_LAB_SOCKETS: usize = 64;

/// Feeds one frame: a TCP segment to the engine (its messages cut by the feed's dissector),
/// anything else through the dissector. Returns the decoded UDP units.
fn feed_frame<'a>(
    engine: &'a mut EngineFeed,
    sockets: &mut LabSockets,
    plan: &CapturePlan,
    labels: &[String],
    p: &LivePacket,
) -> &'a [DecodedPacket] {
    let label = labels.get(p.path).map_or("?", String::as_str);
    let capture = u16::try_from(p.path).unwrap_or(u16::MAX);
    if let Ok(seg) = tcp_segment(p.link, &p.data) {
        note_socket(sockets, plan, p, &seg);
        engine.tcp_segment(capture, label, p, &seg);
        return &[];
    }
    engine.frame(Some(capture), label, p)
}

/// The kernel events of the TCP baseline's socket: the probes see every namespace's TCP, so
/// only the sockets the lab's own capture saw (client address and port as the T-Box sent)
/// are kept.
fn is_lab_socket(known: &HashSet<(SocketAddr, SocketAddr)>, e: &TcpEvent) -> bool {
    known.contains(&(e.local, e.remote))
}

/// The live side of the collector: decodes as packets arrive and publishes snapshots.
struct LiveSide {
    plan: CapturePlan,
    labels: Vec<String>,
    feed: SnapshotFeed,
    engine: EngineFeed,
    sockets: LabSockets,
    pending: Vec<TcpEvent>,
    started: Instant,
    next_publish: Instant,
    title: String,
}

impl LiveSide {
    fn new(feed: SnapshotFeed, plan: &CapturePlan, labels: &[String]) -> Self {
        let mut engine = engine_feed(plan, None, Some(plan.keylog.clone()));
        declare_points(engine.correlator_mut(), plan, labels, WallClock::unix_now());
        Self {
            plan: plan.clone(),
            labels: labels.to_vec(),
            feed,
            engine,
            sockets: LabSockets::new(),
            pending: Vec::new(),
            started: Instant::now(),
            next_publish: Instant::now(),
            title: format!("{} ({})", plan.scenario.name, plan.scenario.description),
        }
    }

    fn packets(&mut self, batch: &[LivePacket]) {
        // The QUIC peers write a connection's secrets just before its first packets.
        self.engine.follow_keylog();
        let before = self.sockets.len();
        for p in batch {
            feed_frame(
                &mut self.engine,
                &mut self.sockets,
                &self.plan,
                &self.labels,
                p,
            );
        }
        if self.sockets.len() != before && !self.pending.is_empty() {
            let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending)
                .into_iter()
                .partition(|e| is_lab_socket(&self.sockets, e));
            self.pending = rest;
            for e in mine {
                self.engine.tcp(TcpMessage::Event(Box::new(e)));
            }
        }
    }

    fn tcp(&mut self, message: &TcpMessage) {
        match message {
            TcpMessage::Event(e) => {
                if is_lab_socket(&self.sockets, e) {
                    self.engine.tcp(TcpMessage::Event(e.clone()));
                } else if self.pending.len() < MAX_PENDING {
                    self.pending.push((**e).clone());
                }
            }
            TcpMessage::Status(s) => self.engine.tcp(TcpMessage::Status(s.clone())),
            TcpMessage::Dropped(d) => self.engine.tcp(TcpMessage::Dropped(*d)),
            // Sent only to `capture --json` (the lab's probes do not record).
            TcpMessage::Started { .. }
            | TcpMessage::Record { .. }
            | TcpMessage::KernelDrops(_)
            | TcpMessage::Connections(_) => {}
        }
    }

    fn publish_due(&mut self) {
        let plan = &self.plan;
        self.engine.requests(&self.feed);
        if Instant::now() < self.next_publish {
            return;
        }
        self.next_publish = Instant::now() + PUBLISH_EVERY;
        let t = self.started.elapsed().as_secs_f64();
        let phase = if t < plan.duration_s {
            format!("{t:.0}/{:.0} s", plan.duration_s)
        } else {
            let drained = (t - plan.duration_s).min(plan.drain_s);
            format!("drain {drained:.0}/{:.0} s", plan.drain_s)
        };
        self.feed
            .set_position(Some(format!("lab {} {phase}", self.title)));
        self.engine.publish(&self.feed);
    }
}

/// Gathers the frames and kernel events of the run (and, live, decodes them as they come)
/// until every capture thread has ended; the kernel messages still queued are taken too.
fn collect(
    packets: &Receiver<LiveEvent>,
    kernel: Option<Receiver<TcpMessage>>,
    mut live: Option<LiveSide>,
    points: usize,
) -> (Collected, Option<LiveSide>) {
    let mut c = Collected {
        stats: vec![PathStats::default(); points],
        ..Collected::default()
    };
    let mut tcp = kernel.clone().unwrap_or_else(crossbeam_channel::never);
    loop {
        crossbeam_channel::select! {
            recv(packets) -> ev => match ev {
                Ok(LiveEvent::Packets(batch)) => {
                    if let Some(side) = live.as_mut() {
                        side.packets(&batch);
                    }
                    c.frames.extend(batch);
                }
                Ok(LiveEvent::Stats { path, stats, .. }) => {
                    if let Some(s) = c.stats.get_mut(path) {
                        *s = stats;
                    }
                    if let Some(side) = live.as_mut() {
                        side.engine
                            .pcap_dropped(path, stats.dropped.saturating_add(stats.if_dropped));
                    }
                }
                Ok(LiveEvent::PathDown { path, reason, .. }) => {
                    c.problems.push(format!("capture {path} went down: {reason}"));
                }
                Ok(LiveEvent::PathUp { .. }) => {}
                // Every capture thread has ended.
                Err(_) => break,
            },
            recv(tcp) -> m => match m {
                Ok(m) => take(&mut c, live.as_mut(), m),
                Err(_) => tcp = crossbeam_channel::never(),
            },
            default(PUBLISH_EVERY) => {}
        }
        if let Some(side) = live.as_mut() {
            side.publish_due();
        }
    }
    if let Some(rx) = kernel {
        for m in rx.try_iter() {
            take(&mut c, live.as_mut(), m);
        }
    }
    (c, live)
}

/// Keeps a kernel message for the analysis (and shows it live).
fn take(c: &mut Collected, live: Option<&mut LiveSide>, m: TcpMessage) {
    if let Some(side) = live {
        side.tcp(&m);
    }
    match m {
        TcpMessage::Event(e) => c.tcp_events.push(*e),
        TcpMessage::Status(s) => c.tcp_status = Some(s),
        TcpMessage::Dropped(d) => c.tcp_dropped = d,
        TcpMessage::Started { .. }
        | TcpMessage::Record { .. }
        | TcpMessage::KernelDrops(_)
        | TcpMessage::Connections(_) => {}
    }
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
        // The TCP baseline's socket, through the probes `tboxscope capture` uses: the
        // tracepoints are global, so the filter (its server port and address) and the
        // capture's own sockets pick the lab's connection out of the machine's TCP.
        let ports: Vec<u16> = tcp_ports(plan).collect();
        if !ports.is_empty() {
            let filter = TcpFilter {
                ports,
                hosts: vec![IpAddr::V4(PathId::A.gateway_addr())],
            };
            let local = PathId::BOTH
                .iter()
                .map(|p| {
                    (
                        IpAddr::V4(p.tbox_addr()),
                        point_label("tbox", p.tbox_iface()),
                    )
                })
                .collect();
            let options = ProbeOptions {
                filter,
                ..ProbeOptions::default()
            };
            self.kernel =
                Some(KernelTcp::spawn(options, local).map_err(|e| lab_err("TCP probes", e))?);
        }
        let config = LiveConfig {
            interfaces: specs,
            filter: Some("udp or tcp".into()),
            ..LiveConfig::default()
        };
        let live = LiveCapture::start(config).map_err(|e| lab_err("libpcap", e))?;
        let events = live.events().clone();
        let kernel = self.kernel.as_ref().map(|k| k.messages.clone());
        let side = self
            .live_feed
            .take()
            .map(|feed| LiveSide::new(feed, plan, &self.labels));
        let n = self.labels.len();
        let collector = std::thread::Builder::new()
            .name("lab-capture".into())
            .spawn(move || {
                let (collected, side) = collect(&events, kernel, side, n);
                if let Some(side) = side {
                    side.feed
                        .set_position(Some(format!("lab {} over", side.title)));
                    side.feed.set_problem(Some(
                        "run over: q quits and prints the comparison table".into(),
                    ));
                }
                collected
            })
            .map_err(|e| lab_err("collector thread", e))?;
        self.live = Some(live);
        self.collector = Some(collector);
        // The handles are open and capturing: traffic may start.
        Ok(())
    }

    fn after_traffic(&mut self, plan: &CapturePlan) -> LabResult<()> {
        std::thread::sleep(SETTLE);
        if let Some(k) = self.kernel.as_mut() {
            k.stop();
        }
        if let Some(mut live) = self.live.take() {
            live.stop();
        }
        let collected = self
            .collector
            .take()
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default();
        self.kernel = None;
        if let Some(dir) = &self.pcap_dir {
            write_pcaps(dir, &self.labels, &collected.frames, &plan.keylog)
                .map_err(|e| lab_err(&format!("writing captures to {}", dir.display()), e))?;
        }
        self.measured = Some(analyse(plan, &self.labels, collected));
        Ok(())
    }
}

/// One input of the analysis, in time order.
enum Item<'a> {
    Frame(&'a LivePacket),
    Kernel(&'a TcpEvent),
}

/// Decodes the captured frames and the kernel events in time order through the engine.
fn analyse(plan: &CapturePlan, labels: &[String], mut collected: Collected) -> Measured {
    let mut problems = std::mem::take(&mut collected.problems);
    let quic = plan.transports.iter().any(|(t, ..)| {
        matches!(
            t,
            Transport::Quic | Transport::QuicRedundant | Transport::Mpquic | Transport::QuicStream
        )
    });
    let keylog = match Keylog::from_file(&plan.keylog) {
        Ok(k) => Some(k),
        Err(_) if !quic => None,
        Err(e) => {
            problems.push(format!(
                "QUIC key log not loaded ({e}): QUIC is not decrypted"
            ));
            None
        }
    };
    let mut engine = engine_feed(plan, keylog, None);
    // The lab's own TCP sockets: what the T-Box's capture saw connect.
    let mut known = LabSockets::new();
    for f in &collected.frames {
        if let Ok(seg) = tcp_segment(f.link, &f.data) {
            note_socket(&mut known, plan, f, &seg);
        }
    }
    let mut sockets = LabSockets::new();
    let kernel: Vec<&TcpEvent> = collected
        .tcp_events
        .iter()
        .filter(|e| is_lab_socket(&known, e))
        .collect();
    let mut pictures = ReportData::default();
    kernel.iter().for_each(|e| pictures.tcp_event(e));
    let mut items: Vec<(u64, Item)> = collected
        .frames
        .iter()
        .map(|f| (f.ts_ns, Item::Frame(f)))
        .chain(kernel.iter().map(|e| (e.ts_ns, Item::Kernel(e))))
        .collect();
    items.sort_by_key(|(ts, item)| {
        (
            *ts,
            match item {
                Item::Frame(f) => f.path,
                Item::Kernel(_) => usize::MAX,
            },
        )
    });
    let first_ts = items.first().map_or(0, |(ts, _)| *ts);
    declare_points(engine.correlator_mut(), plan, labels, first_ts);
    let mut flow_ports: HashMap<String, u16> = HashMap::new();
    let mut frames_per_point = vec![0u64; labels.len()];
    let mut last_ts = 0;
    for (ts, item) in &items {
        last_ts = last_ts.max(*ts);
        match item {
            Item::Frame(f) => {
                if let Some(n) = frames_per_point.get_mut(f.path) {
                    *n += 1;
                }
                for d in feed_frame(&mut engine, &mut sockets, plan, labels, f) {
                    remember_flow(&mut flow_ports, d);
                }
            }
            Item::Kernel(e) => engine.tcp(TcpMessage::Event(Box::new((*e).clone()))),
        }
        engine
            .correlator_mut()
            .engine_mut()
            .drain_records()
            .for_each(|r| pictures.record(&r));
    }
    let summary = engine.correlator_mut().engine_mut().finish(last_ts);
    engine
        .correlator_mut()
        .engine_mut()
        .drain_records()
        .for_each(|r| pictures.record(&r));
    let evidence = engine
        .correlator_mut()
        .engine_mut()
        .evidence(&summary)
        .unwrap_or_default();
    let tcp = TcpSide {
        sockets: &known,
        kernel: &kernel,
        status: collected.tcp_status.clone().unwrap_or_else(|| {
            if tcp_ports(plan).next().is_some() {
                "TCP probes not started".into()
            } else {
                String::new()
            }
        }),
        dropped: collected.tcp_dropped.total(),
    };
    let transports = plan
        .transports
        .iter()
        .map(|(t, port, _)| measured_transport(*t, *port, &summary, &flow_ports, &tcp))
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
            evidence: o.evidence.clone(),
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
        evidence,
        pictures,
    }
}

/// What the analysis knows of the TCP baseline besides the engine's summary.
struct TcpSide<'a> {
    sockets: &'a LabSockets,
    kernel: &'a [&'a TcpEvent],
    status: String,
    dropped: u64,
}

/// Notes which server port a KCP conversation or QUIC connection talks to (flow → transport).
fn remember_flow(ports: &mut HashMap<String, u16>, d: &DecodedPacket) {
    let port = d.src.port().min(d.dst.port());
    let key = match &d.decoded {
        Decoded::KcpSegment(s) => FlowKey::Kcp {
            conv: s.header.conv,
        },
        Decoded::QuicPacket(p) => match p.connection {
            Some(n) => FlowKey::Quic { conn: ConnId(n) },
            None => return,
        },
        Decoded::UdpDatagram(_) | Decoded::TcpSegment(_) | Decoded::PathMtu(_) => return,
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
    tcp: &TcpSide<'_>,
) -> MeasuredTransport {
    if t.is_tcp() {
        return measured_tcp(t, port, summary, tcp);
    }
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
        tcp: None,
        note: None,
    };
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

/// The TCP baseline's row, all from the engine: messages and latency of the socket's flow
/// (cut from its byte stream at both ends), amplification, head-of-line stalls (the kernel's
/// and the wire's incidents of the flow), retransmissions on the wire at the T-Box's capture,
/// and the kernel's retransmissions and RTO backoff from the eBPF probes.
fn measured_tcp(
    t: Transport,
    port: u16,
    summary: &Summary,
    tcp: &TcpSide<'_>,
) -> MeasuredTransport {
    // The socket to this baseline's port whose flow carried the most messages.
    let best = tcp
        .sockets
        .iter()
        .filter(|(_, server)| server.port() == port)
        .filter_map(|&(client, server)| {
            let name = FlowKey::Tcp { client, server }.name();
            let f = summary.flows.iter().find(|f| f.flow == name)?;
            Some(((client, server), f))
        })
        .max_by_key(|(_, f)| f.messages);
    let connection = best.map(|(c, _)| c);
    let flow = best.map(|(_, f)| f);
    let mine: Vec<&TcpEvent> = tcp
        .kernel
        .iter()
        .copied()
        .filter(|e| connection == Some((e.local, e.remote)))
        .collect();
    // Each capture of the path counts the client's data (both under the path's label once
    // paired): the T-Box's, at the sender, sees every retransmission; the gateway's fewer.
    let wire_retransmits = connection.map_or(0, |(client, _)| {
        summary
            .tcp_wire
            .directions
            .iter()
            .filter(|d| d.src == client.to_string())
            .map(probe_user::engine::TcpWireDirection::retransmits_total)
            .max()
            .unwrap_or(0)
    });
    let join = connection.and_then(|(client, _)| {
        let client = client.to_string();
        summary
            .tcp_join
            .directions
            .iter()
            .filter(|d| d.src == client)
            .max_by_key(|d| (d.matched, d.wire))
            .cloned()
    });
    let mut k = MeasuredTcp {
        connection: connection.map(|(c, s)| format!("{c} → {s}")),
        delivered: flow.map_or(0, |f| f.latency.count),
        probes: tcp.status.clone(),
        kernel_events: mine.len() as u64,
        kernel_dropped: tcp.dropped,
        wire_retransmits,
        join,
        ..MeasuredTcp::default()
    };
    for e in &mine {
        k.max_backoff = k.max_backoff.max(e.figures.backoff);
        k.max_rto_ms = k.max_rto_ms.max(f64::from(e.figures.rto_us) / 1000.0);
        if let TcpEventKind::Retransmit { kind, .. } = e.kind {
            k.retransmits += 1;
            match kind {
                RetransmitKind::Rto | RetransmitKind::LossRecovery => k.timeout_retransmits += 1,
                RetransmitKind::Fast | RetransmitKind::Tlp => k.fast_retransmits += 1,
                RetransmitKind::Unknown => {}
            }
        }
    }
    // Stalls of the flow, overlapping ones (the kernel's and the wire's view of one hole, an
    // outage's backed-off retransmissions) merged into one period.
    let stalls: Vec<(u64, u64)> = flow.map_or_else(Vec::new, |f| {
        summary
            .hol_incidents
            .iter()
            .filter(|i| i.flow == f.flow)
            .map(|i| (i.start_ns, i.start_ns.saturating_add(i.stall_ns)))
            .collect()
    });
    let periods = merge(stalls.clone());
    k.hol_stalls = periods.len() as u64;
    k.longest_hol_stall_ms = stalls
        .iter()
        .map(|s| s.1 - s.0)
        .max()
        .map(|ns| ns as f64 / 1e6);
    k.total_hol_stall_ms = periods.iter().map(|s| s.1 - s.0).sum::<u64>() as f64 / 1e6;
    let mut row = MeasuredTransport {
        transport: t.name(),
        messages: flow.map_or(0, |f| f.messages),
        p50_ms: None,
        p99_ms: None,
        p999_ms: None,
        duplication_pct: None,
        amplification: flow.map(|f| f.amplification).filter(|a| *a > 0.0),
        flows: flow.map(|f| f.flow.clone()).into_iter().collect(),
        tcp: None,
        note: None,
    };
    match flow {
        Some(f) if f.latency.count > 0 => {
            row.p50_ms = Some(ms(f.latency.p50_us));
            row.p99_ms = Some(ms(f.latency.p99_us));
            row.p999_ms = Some(ms(f.latency.p999_us));
        }
        _ => row.note = Some("no TCP message of the baseline was captured at both ends".into()),
    }
    row.tcp = Some(k);
    row
}

/// Intervals (start, end) merged where they overlap, in time order.
fn merge(mut spans: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    spans.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (a, b) in spans {
        match merged.last_mut() {
            Some(m) if a <= m.1 => m.1 = m.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    merged
}

/// Writes one classic pcap (nanosecond) file per capture point, and the key log beside them.
fn write_pcaps(
    dir: &Path,
    labels: &[String],
    frames: &[LivePacket],
    keylog: &Path,
) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (i, label) in labels.iter().enumerate() {
        let mine: Vec<&LivePacket> = frames.iter().filter(|f| f.path == i).collect();
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
    copy_keylog(keylog, &dir.join("quic-keylog.txt"))
}

/// Copies the run's key log to `to`, unless it is that file already (`--keylog
/// DIR/quic-keylog.txt --pcap DIR`: copying a file onto itself truncates it to nothing).
fn copy_keylog(keylog: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let Ok(src) = std::fs::metadata(keylog) else {
        return Ok(());
    };
    if let Ok(dst) = std::fs::metadata(to) {
        if (src.dev(), src.ino()) == (dst.dev(), dst.ino()) {
            return Ok(());
        }
    }
    std::fs::copy(keylog, to).map(|_| ())
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

/// The kernel's view of the TCP baseline under its row: retransmissions, backoff, HOL stalls
/// (next to the peers' longest stall without delivery).
fn tcp_line(truth_stall_ms: f64, k: &MeasuredTcp) -> String {
    if k.kernel_events == 0 {
        return format!(
            "kernel: no event of the socket ({}); {} retransmitted segments on the wire",
            if k.probes.is_empty() {
                "TCP probes off"
            } else {
                &k.probes
            },
            k.wire_retransmits
        );
    }
    format!(
        "kernel (eBPF): {} retransmissions ({} after timeouts, {} fast), RTO backoff up to level {} (RTO {:.0} ms); \
         {} on the wire{}; HOL: {} stall periods, {:.0} ms in all, longest hold {} (truth: longest without delivery {truth_stall_ms:.0} ms)",
        k.retransmits,
        k.timeout_retransmits,
        k.fast_retransmits,
        k.max_backoff,
        k.max_rto_ms,
        k.wire_retransmits,
        k.join.as_ref().map_or_else(String::new, join_words),
        k.hol_stalls,
        k.total_hol_stall_ms,
        k.longest_hol_stall_ms
            .map_or_else(|| "-".to_owned(), |l| format!("{l:.0} ms")),
    )
}

/// The kernel's and a capture's retransmissions of the socket side by side, in words:
/// " (26 seen by both, 1 the kernel did not report, …)".
fn join_words(j: &probe_user::engine::record::TcpJoinDirection) -> String {
    let mut parts = vec![format!("{} seen by both", j.matched)];
    for (n, what) in [
        (j.not_in_kernel, "not reported by the kernel"),
        (j.not_on_wire, "of the kernel's not on the wire"),
        (
            j.original_not_captured,
            "of the kernel's whose original the capture missed",
        ),
    ] {
        if n > 0 {
            parts.push(format!("{n} {what}"));
        }
    }
    format!(" ({})", parts.join(", "))
}

/// The table of tboxscope's figures next to the peers' ground truth, per transport, and the
/// outages (injected vs detected).
pub fn render_comparison(report: &RunReport, m: &Measured) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "tboxscope's own capture (libpcap on both ends of both paths, eBPF TCP probes → engine) vs ground truth (the peers):"
    );
    let _ = writeln!(
        s,
        "latency: tboxscope first copy on the wire → first arrival on the wire; truth application → application (adds the wait in the sender's queue)"
    );
    let _ = writeln!(
        s,
        "{:<15} {:<9} {:>6} {:>11} {:>11} {:>11} {:>6} {:>7}",
        "transport", "source", "msgs", "P50", "P99", "P999", "dup %", "amplif"
    );
    let lat = |v: Option<f64>| v.map_or_else(|| "n/a".to_owned(), units::latency_ms);
    for t in &report.transports {
        let redundant = t.paths.len() > 1;
        let _ = writeln!(
            s,
            "{:<15} {:<9} {:>6} {:>11} {:>11} {:>11} {:>6} {:>6.2}x",
            t.transport,
            "truth",
            t.sent,
            units::latency_ms(t.p50_ms),
            units::latency_ms(t.p99_ms),
            units::latency_ms(t.p999_ms),
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
            "{:<15} {:<9} {:>6} {:>11} {:>11} {:>11} {:>6} {:>7}",
            "",
            "tboxscope",
            r.messages,
            lat(r.p50_ms),
            lat(r.p99_ms),
            lat(r.p999_ms),
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
        if let Some(k) = &r.tcp {
            let _ = writeln!(
                s,
                "{:<15} {:<9} {}",
                "",
                "",
                tcp_line(t.longest_stall_ms, k)
            );
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
            "tboxscope detected an outage on {}: {} from {:.3} s; {} messages carried only by the other path, {} lost ({})",
            o.path,
            o.duration_s
                .map_or_else(|| "still open at the end".to_owned(), |d| format!("{d:.3} s")),
            o.start_unix_ns.saturating_sub(report.start_unix_ns) as f64 / 1e9,
            o.carried_by_others,
            o.lost,
            o.evidence
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

#[cfg(test)]
mod keylog_tests {
    use super::*;

    /// `--keylog DIR/quic-keylog.txt --pcap DIR`: the key log stays as it was; another key
    /// log is copied beside the captures.
    #[test]
    fn the_key_log_in_the_capture_directory_is_not_copied_over_itself() {
        let dir = tempfile::tempdir().unwrap();
        let in_dir = dir.path().join("quic-keylog.txt");
        let line = "CLIENT_TRAFFIC_SECRET_0 00 11\n";
        std::fs::write(&in_dir, line).unwrap();
        write_pcaps(dir.path(), &[], &[], &in_dir).unwrap();
        assert_eq!(std::fs::read_to_string(&in_dir).ok().as_deref(), Some(line));

        let other = tempfile::tempdir().unwrap();
        let out = other.path().join("pcap");
        write_pcaps(&out, &[], &[], &in_dir).unwrap();
        let copied = std::fs::read_to_string(out.join("quic-keylog.txt")).ok();
        assert_eq!(copied.as_deref(), Some(line));
    }
}
