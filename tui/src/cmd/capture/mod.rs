//! `tboxscope capture`: headless live capture to JSON Lines. Packets of the paths (`-i`, default
//! eth0 and eth1) go through the live UI's feed ([`EngineFeed`]: the same dissector, engine and
//! key-log following), and the engine's records (`message`, `window` every second, `outage`,
//! `hol_incident`) are written as `analyze --json` writes them, beside the kernel's TCP records
//! from the eBPF probes (the UI's probe thread, [`KernelTcp`]). The run ends on SIGINT, SIGTERM
//! or `--duration` with a `summary`; lines are whole and reach the file at least once per
//! second; a failed write (full disk) ends the run with a count of what was not written.
mod out;
mod pcapng;

use std::net::IpAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use crossbeam_channel::Receiver;
use probe_user::analyze::{write_record, Record as PacketRecord};
use probe_user::capture::clock::WallClock;
use probe_user::capture::records::{DropsRecord, Record as KernelRecord};
use probe_user::correlate::write_engine_records;
use probe_user::dissect::DissectConfig;
use probe_user::engine::Config as EngineConfig;
use probe_user::output::{JsonLinesWriter, OutputError};
use probe_user::source::ebpf::{denied_hooks, HookStatus, ProbeOptions, TcpFilter};
use probe_user::source::pcap::live::{
    check_filter, interface_addresses, InterfaceSpec, LiveCapture, LiveConfig, LiveEvent,
    LivePacket, PathStats,
};
use serde::Serialize;
use tboxscope::feed::{EngineFeed, Reorder};
use tboxscope::kerneltcp::{KernelTcp, TcpMessage};

use crate::cli::CaptureArgs;
use out::LineOut;
use pcapng::{KeylogTail, PcapngFile};

/// How often the engine's clock is moved on and its records written.
const TICK: Duration = Duration::from_millis(100);
/// How often collected lines are written to the file (at least).
const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// How often the metrics outputs get a new snapshot.
const METRICS_EVERY: Duration = Duration::from_secs(1);
/// How long the probes may take to load before the capture starts without them.
const PROBES_WAIT: Duration = Duration::from_secs(20);

/// Parses `30s`, `2m`, `500ms`, `1h`, `1.5s`.
pub fn parse_duration(s: &str) -> anyhow::Result<Duration> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| anyhow::anyhow!("bad duration {s:?}: use e.g. 30s, 2m, 500ms"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" | "" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => anyhow::bail!("bad duration unit in {s:?}: use ms, s, m or h"),
    };
    if !secs.is_finite() || secs <= 0.0 || secs > 365.0 * 86400.0 {
        anyhow::bail!("duration {s:?} out of range");
    }
    Ok(Duration::from_secs_f64(secs))
}

/// What ended the capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum StopReason {
    /// `--duration` elapsed.
    Duration,
    /// SIGINT.
    Sigint,
    /// SIGTERM.
    Sigterm,
    /// The JSON Lines output could not be written (full disk, unwritable).
    WriteFailed,
    /// The reader of standard output went away.
    ReaderGone,
}

/// SIGINT and SIGTERM as flags the loop polls.
struct Signals {
    int: Arc<AtomicBool>,
    term: Arc<AtomicBool>,
    ids: Vec<signal_hook::SigId>,
}

impl Signals {
    fn install() -> anyhow::Result<Self> {
        let int = Arc::new(AtomicBool::new(false));
        let term = Arc::new(AtomicBool::new(false));
        let ids = vec![
            signal_hook::flag::register(signal_hook::consts::SIGINT, Arc::clone(&int))?,
            signal_hook::flag::register(signal_hook::consts::SIGTERM, Arc::clone(&term))?,
        ];
        Ok(Self { int, term, ids })
    }

    fn stop(&self) -> Option<StopReason> {
        if self.int.load(Ordering::Relaxed) {
            Some(StopReason::Sigint)
        } else if self.term.load(Ordering::Relaxed) {
            Some(StopReason::Sigterm)
        } else {
            None
        }
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}

/// Runs `tboxscope capture`.
pub fn run(args: CaptureArgs) -> anyhow::Result<ExitCode> {
    // Validate everything the user typed before touching the kernel.
    let filter = TcpFilter::parse(&args.filter.ports, &args.filter.hosts)?;
    let duration = args.duration.as_deref().map(parse_duration).transpose()?;
    let cwnd_interval = parse_duration(&args.cwnd_interval)?;
    let deny = denied_hooks(&args.deny_hooks)?;
    if let Some(f) = &args.pcap_filter {
        check_filter(f)?;
    }
    let interfaces = packet_interfaces(&args)?;
    if interfaces.is_empty() && args.no_tcp {
        bail!(
            "nothing to capture: --no-tcp, and no interface (name the paths with -i \
             IFACE[=LABEL])"
        );
    }
    // Open the output before attaching anything, so an unwritable path fails fast.
    let rotation = args
        .rotate
        .as_deref()
        .map(|r| out::Rotation::parse(r, args.keep))
        .transpose()?;
    let out = if args.json == "-" {
        if rotation.is_some() && args.pcap.is_none() {
            bail!("--rotate rotates files: --json - writes to standard output (add --pcap DIR)");
        }
        LineOut::stdout()
    } else {
        let f = out::create(std::path::Path::new(&args.json), rotation)
            .with_context(|| format!("cannot write the JSON output {:?}", args.json))?;
        let mut out = LineOut::file(f);
        if let Some(r) = rotation {
            out.rotate_as(std::path::Path::new(&args.json), r);
        }
        out
    };
    let metrics = super::metrics::LiveMetrics::start(&args.metrics)?;
    let signals = Signals::install().context("installing the signal handlers")?;
    let probe = (!args.no_tcp).then(|| ProbeOptions {
        filter,
        cwnd_interval_ns: u64::try_from(cwnd_interval.as_nanos()).unwrap_or(u64::MAX),
        deny,
        ..ProbeOptions::default()
    });
    let started = Instant::now();
    let mut run = Run::start(&args, interfaces, probe, out, rotation)?;
    run.metrics = metrics;
    let stopped_by = run.capture(&signals, started, duration)?;
    run.finish(stopped_by, started)
}

/// The interfaces to capture packets on: those `-i` names (each must exist), or those of eth0
/// and eth1 that exist (none: the kernel's TCP view only, said on standard error).
fn packet_interfaces(args: &CaptureArgs) -> anyhow::Result<Vec<InterfaceSpec>> {
    if args.no_packets {
        return Ok(Vec::new());
    }
    let specs = super::watch::interface_specs(&args.interfaces)?;
    let missing = super::watch::missing_interfaces(&specs);
    if args.interfaces.is_empty() {
        let present: Vec<InterfaceSpec> = specs
            .iter()
            .filter(|s| !missing.contains(&s.name.as_str()))
            .cloned()
            .collect();
        if present.is_empty() {
            eprintln!(
                "tboxscope: no eth0 or eth1 here: capturing the kernel's TCP view only (name \
                 the paths with -i IFACE[=LABEL]; --no-packets says so without this note)"
            );
        }
        return Ok(present);
    }
    if !missing.is_empty() {
        bail!("{}", super::watch::missing_interfaces_message(&missing));
    }
    Ok(specs)
}

/// A kernel record as written: the record's fields and, when its socket's local address is
/// one of the paths', that path (so `replay` shows each socket on its path as the UI did).
#[derive(Serialize)]
struct KernelLine<'a> {
    #[serde(flatten)]
    record: &'a KernelRecord,
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<&'a str>,
}

/// A path as the summary reports it: libpcap's counters and the times it was lost.
#[derive(Debug, Clone, Default, Serialize)]
struct PathReport {
    interface: String,
    label: String,
    #[serde(flatten)]
    stats: PathStats,
    /// Times the interface went away (and was reopened, or not, when it came back).
    lost: u64,
    /// Seconds without capture on it.
    gap_s: f64,
    #[serde(skip)]
    down_since: Option<u64>,
}

/// The first JSON line of a capture.
#[derive(Serialize)]
struct Header<'a> {
    command: &'a str,
    args: Vec<String>,
    filter: serde_json::Value,
    /// The captured interfaces and their path labels.
    interfaces: Vec<String>,
    pcap_filter: Option<&'a str>,
    keylog: Option<&'a std::path::Path>,
    /// The TCP probes' state (`TCP probes: 4/4 hooks attached`, off, or why not).
    tcp_probes: &'a str,
    hooks: &'a [HookStatus],
    config_hz: Option<u32>,
}

/// A running capture: its sources, the feed, the output.
struct Run {
    live: Option<LiveCapture>,
    kernel: Option<KernelTcp>,
    tcp: Receiver<TcpMessage>,
    feed: EngineFeed,
    /// Packets put back in time order across paths before the engine sees them.
    reorder: Reorder,
    labels: Vec<String>,
    paths: Vec<PathReport>,
    /// Frames seen per path (the `frame` of per-packet records).
    frames: Vec<u64>,
    packets: bool,
    /// `--pcap`: each path's pcapng file, and the key log lines still to embed.
    pcaps: Vec<PcapngFile>,
    keylog_tail: Option<KeylogTail>,
    out: JsonLinesWriter<LineOut>,
    target: String,
    last_packet_ns: u64,
    kernel_drops: DropsRecord,
    connections: Vec<probe_user::capture::tracker::ConnTotals>,
    kernel_records: u64,
    tcp_status: String,
    /// `--metrics-listen`, `--otlp`: given a snapshot every [`METRICS_EVERY`].
    metrics: Option<super::metrics::LiveMetrics>,
}

impl Run {
    fn start(
        args: &CaptureArgs,
        interfaces: Vec<InterfaceSpec>,
        probe: Option<ProbeOptions>,
        out: LineOut,
        rotation: Option<out::Rotation>,
    ) -> anyhow::Result<Self> {
        let labels: Vec<String> = interfaces.iter().map(|i| i.label.clone()).collect();
        let live = if interfaces.is_empty() {
            None
        } else {
            let config = LiveConfig {
                interfaces: interfaces.clone(),
                filter: args.pcap_filter.clone(),
                buffer_size: args.buffer_size.unwrap_or(crate::cli::DEFAULT_BUFFER_SIZE),
                ..LiveConfig::default()
            };
            // SAFETY: geteuid has no preconditions and cannot fail.
            let root = unsafe { libc::geteuid() } == 0;
            Some(LiveCapture::start(config).context(if root {
                "cannot start live capture"
            } else {
                "cannot start live capture (run as root: sudo tboxscope capture …)"
            })?)
        };
        let (kernel, tcp, tcp_status, hooks, config_hz) = match probe {
            Some(options) => {
                let local: Vec<(IpAddr, String)> = interfaces
                    .iter()
                    .flat_map(|i| {
                        interface_addresses(&i.name)
                            .into_iter()
                            .map(|a| (a, i.label.clone()))
                    })
                    .collect();
                let kernel = KernelTcp::spawn_recording(options, local)
                    .context("starting the TCP probe thread")?;
                let rx = kernel.messages.clone();
                let (status, hooks, hz) = wait_for_probes(&rx);
                if hooks.is_empty() && interfaces.is_empty() {
                    bail!("{status}");
                }
                (Some(kernel), rx, status, hooks, hz)
            }
            None => (
                None,
                crossbeam_channel::never(),
                "TCP probes: off (--no-tcp)".to_owned(),
                Vec::new(),
                None,
            ),
        };
        let mut feed = EngineFeed::new(
            DissectConfig {
                kcp_ports: args.kcp_ports.clone(),
                unknown_udp: false,
                keylog: None,
                app_id: args.ids.app_id,
                framing: args.ids.framing,
            },
            EngineConfig {
                app_id: args.ids.app_id,
                emit_messages: true,
                max_flows: crate::cli::live_max_flows(args.max_flows),
                ..EngineConfig::default()
            },
            args.keylog.clone(),
            labels.len(),
        );
        // Every interface is a path from the first packet on, also one that stays silent.
        feed.correlator_mut().expect_paths(&labels);
        feed.tcp(TcpMessage::Status(tcp_status.clone()));
        let header = Header {
            command: "capture",
            args: std::env::args().skip(1).collect(),
            filter: serde_json::json!({"ports": args.filter.ports, "hosts": args.filter.hosts}),
            interfaces: interfaces
                .iter()
                .map(|i| format!("{}={}", i.name, i.label))
                .collect(),
            pcap_filter: args.pcap_filter.as_deref(),
            keylog: args.keylog.as_deref(),
            tcp_probes: &tcp_status,
            hooks: &hooks,
            config_hz,
        };
        let mut out = JsonLinesWriter::new(out, WallClock::unix_now(), &header)?;
        // Every file of a rotated recording starts with the header.
        out.get_mut().keep_pending_as_preamble();
        let mut pcaps = Vec::new();
        if let Some(dir) = &args.pcap {
            let cannot = || format!("cannot write pcapng files in {}", dir.display());
            std::fs::create_dir_all(dir).with_context(cannot)?;
            for label in &labels {
                let snaplen = args.pcap_snaplen;
                pcaps.push(PcapngFile::create(dir, label, rotation, snaplen).with_context(cannot)?);
            }
        }
        let keylog_tail = (!pcaps.is_empty())
            .then(|| args.keylog.clone().map(KeylogTail::new))
            .flatten();
        let paths = interfaces
            .iter()
            .map(|i| PathReport {
                interface: i.name.clone(),
                label: i.label.clone(),
                ..PathReport::default()
            })
            .collect();
        Ok(Self {
            live,
            kernel,
            tcp,
            feed,
            reorder: Reorder::default(),
            frames: vec![0; labels.len()],
            labels,
            paths,
            packets: args.packets,
            pcaps,
            keylog_tail,
            out,
            target: args.json.clone(),
            last_packet_ns: 0,
            kernel_drops: DropsRecord::default(),
            connections: Vec::new(),
            kernel_records: 0,
            tcp_status,
            metrics: None,
        })
    }

    /// Captures until a signal, the deadline or a failed write.
    fn capture(
        &mut self,
        signals: &Signals,
        started: Instant,
        duration: Option<Duration>,
    ) -> anyhow::Result<StopReason> {
        let events = self
            .live
            .as_ref()
            .map_or_else(crossbeam_channel::never, |l| l.events().clone());
        let mut next_tick = Instant::now() + TICK;
        let mut next_flush = Instant::now() + FLUSH_EVERY;
        let mut next_metrics = Instant::now();
        loop {
            if let Some(reason) = signals.stop() {
                return Ok(reason);
            }
            if duration.is_some_and(|d| started.elapsed() >= d) {
                return Ok(StopReason::Duration);
            }
            if let Some(reason) = self.write_failed() {
                return Ok(reason);
            }
            let wait = next_tick.saturating_duration_since(Instant::now());
            crossbeam_channel::select! {
                recv(events) -> event => match event {
                    Ok(e) => self.live_event(e)?,
                    Err(_) => bail!("the packet capture threads ended"),
                },
                recv(self.tcp) -> message => match message {
                    Ok(m) => self.tcp_message(m)?,
                    // The probe thread ended (its status says why): stop polling it.
                    Err(_) => self.tcp = crossbeam_channel::never(),
                },
                default(wait) => {}
            }
            self.release(WallClock::unix_now())?;
            let now = Instant::now();
            if now >= next_tick {
                next_tick = now + TICK;
                self.feed.advance();
                write_engine_records(&mut self.out, self.feed.correlator_mut().engine_mut())?;
                self.out.get_mut().rotate_if_due();
                self.pcaps.iter_mut().for_each(PcapngFile::rotate_if_due);
            }
            if now >= next_metrics {
                next_metrics = now + METRICS_EVERY;
                self.publish_metrics();
            }
            if now >= next_flush {
                next_flush = now + FLUSH_EVERY;
                self.out.flush()?;
                self.pcaps.iter_mut().for_each(PcapngFile::flush);
            }
        }
    }

    /// Hands the metrics outputs a snapshot with the capture's health.
    fn publish_metrics(&mut self) {
        let Some(hub) = self.metrics.as_ref().map(|m| m.hub.clone()) else {
            return;
        };
        let mut snapshot = self.feed.correlator_mut().engine_mut().snapshot();
        self.feed.fill_health(&mut snapshot.health);
        hub.publish(Arc::new(snapshot));
    }

    /// Why the run must end because of its output, if it must.
    fn write_failed(&self) -> Option<StopReason> {
        if self.pcaps.iter().any(|p| p.failure().is_some()) {
            return Some(StopReason::WriteFailed);
        }
        let e = self.out.get_ref().failure()?;
        Some(if e.kind() == std::io::ErrorKind::BrokenPipe {
            StopReason::ReaderGone
        } else {
            StopReason::WriteFailed
        })
    }

    fn live_event(&mut self, event: LiveEvent) -> Result<(), OutputError> {
        match event {
            LiveEvent::Packets(batch) => {
                self.feed.follow_keylog();
                if let Some(tail) = self.keylog_tail.as_mut() {
                    let keys = tail.new_lines();
                    if !keys.is_empty() {
                        self.pcaps.iter_mut().for_each(|f| f.secrets(&keys));
                    }
                }
                for p in batch {
                    self.reorder.push(p);
                }
                self.release(WallClock::unix_now())?;
            }
            LiveEvent::Stats { path, stats, .. } => {
                self.feed
                    .pcap_dropped(path, stats.dropped.saturating_add(stats.if_dropped));
                if let Some(r) = self.paths.get_mut(path) {
                    r.stats = stats;
                }
            }
            LiveEvent::PathDown {
                path,
                reason,
                at_ns,
            } => {
                if let Some(r) = self.paths.get_mut(path) {
                    r.lost += 1;
                    r.down_since = Some(at_ns);
                    let rec = Lost {
                        path: &r.label,
                        interface: &r.interface,
                        reason: &reason,
                    };
                    self.out.write("capture_lost", at_ns, &rec)?;
                }
            }
            LiveEvent::PathUp {
                path,
                reopened,
                at_ns,
                ..
            } => {
                if let Some(r) = self.paths.get_mut(path) {
                    let since = r.down_since.take();
                    if let (true, Some(since)) = (reopened, since) {
                        let gap_s = at_ns.saturating_sub(since) as f64 / 1e9;
                        r.gap_s += gap_s;
                        let rec = Gap {
                            path: &r.label,
                            interface: &r.interface,
                            from: probe_user::output::format_ts(since),
                            gap_s,
                        };
                        self.out.write("capture_gap", at_ns, &rec)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Hands the packets held long enough (all with `u64::MAX`) to the pcapng files, the
    /// engine and, with `--packets`, the output.
    fn release(&mut self, now_ns: u64) -> Result<(), OutputError> {
        while let Some(p) = self.reorder.pop_ready(now_ns) {
            self.packet(&p)?;
        }
        Ok(())
    }

    fn packet(&mut self, p: &LivePacket) -> Result<(), OutputError> {
        if let Some(f) = self.pcaps.get_mut(p.path) {
            f.packet(p);
        }
        let Some(label) = self.labels.get(p.path) else {
            return Ok(());
        };
        self.last_packet_ns = self.last_packet_ns.max(p.ts_ns);
        let decoded = self.feed.frame(None, label, p);
        if self.packets {
            let frame = self.frames.get_mut(p.path).map_or(0, |f| {
                *f += 1;
                *f
            });
            let file = self.paths.get(p.path).map_or("?", |r| r.interface.as_str());
            for packet in decoded {
                write_record(
                    &mut self.out,
                    &PacketRecord {
                        file,
                        frame,
                        path: label,
                        path_index: p.path,
                        paths: &self.labels,
                        data: &p.data,
                        wire_len: p.orig_len,
                        packet,
                    },
                )?;
            }
        }
        write_engine_records(&mut self.out, self.feed.correlator_mut().engine_mut())
    }

    fn tcp_message(&mut self, message: TcpMessage) -> Result<(), OutputError> {
        match message {
            TcpMessage::Record {
                ts_ns,
                record,
                path,
            } => {
                self.kernel_records += 1;
                let line = KernelLine {
                    record: &record,
                    path: path.as_deref(),
                };
                self.out.write(record.type_name(), ts_ns, &line)?;
            }
            TcpMessage::KernelDrops(d) => {
                self.kernel_drops = d;
                self.out.write("drops", WallClock::unix_now(), &d)?;
            }
            TcpMessage::Connections(c) => self.connections = c,
            TcpMessage::Status(s) => {
                self.tcp_status.clone_from(&s);
                self.feed.tcp(TcpMessage::Status(s));
            }
            other => self.feed.tcp(other),
        }
        Ok(())
    }

    /// Stops the sources, takes what they still hold, and writes the engine's last records, a
    /// `drops` line and the `summary`.
    fn finish(mut self, stopped_by: StopReason, started: Instant) -> anyhow::Result<ExitCode> {
        if let Some(live) = self.live.as_mut() {
            live.stop();
        }
        if let Some(kernel) = self.kernel.as_mut() {
            kernel.stop();
        }
        let events = self
            .live
            .as_ref()
            .map_or_else(crossbeam_channel::never, |l| l.events().clone());
        for e in events.try_iter() {
            self.live_event(e)?;
        }
        self.release(u64::MAX)?;
        for m in self.tcp.clone().try_iter() {
            self.tcp_message(m)?;
        }
        self.feed.advance();
        let end_ns = WallClock::unix_now().max(self.last_packet_ns);
        let engine = self.feed.correlator_mut().engine_mut();
        let mut engine_summary = engine.finish(end_ns);
        write_engine_records(&mut self.out, engine)?;
        self.feed.fill_health(&mut engine_summary.health);
        if self.kernel.is_some() {
            self.out.write("drops", end_ns, &self.kernel_drops)?;
        }
        for r in &mut self.paths {
            if let Some(since) = r.down_since.take() {
                r.gap_s += end_ns.saturating_sub(since) as f64 / 1e9;
            }
        }
        let dissector = self.feed.dissector();
        let summary = Summary {
            stopped_by,
            duration_s: started.elapsed().as_secs_f64(),
            records: self.out.records(),
            capture: &self.paths,
            tcp_probes: &self.tcp_status,
            kernel_records: self.kernel_records,
            kernel_drops: &self.kernel_drops,
            connections: &self.connections,
            frames: dissector.stats(),
            kcp: super::analyze::kcp_counts(dissector),
            quic: dissector.quic_stats(),
            fragments: dissector.fragment_stats(),
            engine: &engine_summary,
        };
        self.out.write("summary", end_ns, &summary)?;
        let given = self.out.records();
        let mut failed = false;
        for f in &mut self.pcaps {
            f.flush();
            if let Some(e) = f.failure() {
                failed = true;
                eprintln!(
                    "tboxscope: writing {} failed: {e}; capture stopped. {} packets kept, \
                     {} blocks not written",
                    f.path().display(),
                    f.packets.saturating_sub(f.lost()),
                    f.lost()
                );
            }
        }
        let dropped: u64 = self.paths.iter().map(|r| r.stats.dropped).sum();
        if dropped > 0 {
            eprintln!(
                "tboxscope: {dropped} packets dropped because the capture buffer was full \
                 (libpcap drops in the summary); a larger --buffer-size keeps up with more"
            );
        }
        let out = self.out.into_inner()?;
        log::info!(
            "capture ended ({stopped_by:?}): {} records written",
            out.written()
        );
        match out.failure() {
            Some(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
            Some(e) => {
                eprintln!(
                    "tboxscope: writing {} failed: {e}; capture stopped. {} of {given} records \
                     written (whole lines), {} not written (the summary among them)",
                    self.target,
                    out.written(),
                    out.lost()
                );
                Ok(ExitCode::FAILURE)
            }
            None if failed => Ok(ExitCode::FAILURE),
            None => Ok(ExitCode::SUCCESS),
        }
    }
}

/// A `capture_lost` record: an interface went away (a modem reset); it is reopened when it
/// comes back.
#[derive(Serialize)]
struct Lost<'a> {
    path: &'a str,
    interface: &'a str,
    reason: &'a str,
}

/// A `capture_gap` record: an interface lost earlier is captured again.
#[derive(Serialize)]
struct Gap<'a> {
    path: &'a str,
    interface: &'a str,
    /// When the capture was lost (RFC 3339).
    from: String,
    gap_s: f64,
}

/// The final `summary` record: how the run ended, what each source saw, then what
/// `analyze --json` writes (decoder counters and the engine's whole-run figures).
#[derive(Serialize)]
struct Summary<'a> {
    stopped_by: StopReason,
    duration_s: f64,
    /// Records written before this one (header included).
    records: u64,
    capture: &'a [PathReport],
    tcp_probes: &'a str,
    kernel_records: u64,
    /// The kernel side's drop counters (as the last `drops` line).
    #[serde(rename = "drops")]
    kernel_drops: &'a DropsRecord,
    /// Per TCP connection the probes saw: retransmissions by kind, RTOs, backoff, stalls.
    connections: &'a [probe_user::capture::tracker::ConnTotals],
    frames: &'a probe_user::dissect::DissectStats,
    kcp: super::analyze::KcpSummary,
    quic: &'a probe_user::decode::quic::QuicStats,
    fragments: probe_user::decode::net::FragmentStats,
    #[serde(flatten)]
    engine: &'a probe_user::engine::Summary,
}

/// Waits for the probe thread to say whether the probes are attached: their status line,
/// hooks and CONFIG_HZ (no hooks when they could not be loaded).
fn wait_for_probes(rx: &Receiver<TcpMessage>) -> (String, Vec<HookStatus>, Option<u32>) {
    let deadline = Instant::now() + PROBES_WAIT;
    let mut status = "TCP probes: not loaded in time".to_owned();
    while let Ok(m) = rx.recv_deadline(deadline) {
        match m {
            TcpMessage::Status(s) => {
                let off = s.starts_with("TCP probes off");
                status = s;
                if off {
                    break;
                }
            }
            TcpMessage::Started { hooks, config_hz } => return (status, hooks, config_hz),
            _ => {}
        }
    }
    (status, Vec::new(), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert!(parse_duration("abc").is_err());
        assert!(parse_duration("5x").is_err());
        assert!(parse_duration("0s").is_err());
    }
}
