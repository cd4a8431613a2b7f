//! `tboxscope` without a subcommand: the live terminal UI over libpcap captures of the paths
//! (default eth0 = 4G, eth1 = 5G) and the kernel's TCP probes. Capture, decoding and the engine
//! run on their own thread (the eBPF ring buffer on another) and publish a snapshot five times
//! a second; the UI only reads snapshots.
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use crossbeam_channel::{Receiver, Sender};
use probe_user::capture::clock::WallClock;
use probe_user::capture::watch::TcpWatch;
use probe_user::correlate::Correlator;
use probe_user::dissect::{DissectConfig, Dissector};
use probe_user::engine::{Config as EngineConfig, Observation};
use probe_user::source::ebpf::{denied_hooks, HookState, ProbeOptions, TcpFilter};
use probe_user::source::pcap::live::{
    interface_addresses, InterfaceSpec, LiveCapture, LiveConfig, LiveEvent,
};
use tboxscope::app::Request;
use tboxscope::replay::tcp as tcp_record;
use tboxscope::source::{snapshot_channel, SnapshotFeed};
use tboxscope_engine::input::TcpEvent;

use crate::cli::WatchArgs;
use crate::cmd::live;

/// How often the capture thread publishes a snapshot.
const PUBLISH_EVERY: Duration = Duration::from_millis(200);
/// How far the idle clock stays behind the wall clock (packets still buffered by libpcap).
const SETTLE_NS: u64 = 500_000_000;

/// Runs the live UI.
pub fn run(args: WatchArgs) -> anyhow::Result<ExitCode> {
    let interfaces = if args.interfaces.is_empty() {
        InterfaceSpec::defaults()
    } else {
        args.interfaces
            .iter()
            .map(|s| InterfaceSpec::parse(s))
            .collect::<Result<Vec<_>, _>>()?
    };
    // Fail before the terminal is taken over, so the message stays readable.
    let missing: Vec<&str> = interfaces
        .iter()
        .filter(|i| {
            !std::path::Path::new("/sys/class/net")
                .join(&i.name)
                .exists()
        })
        .map(|i| i.name.as_str())
        .collect();
    if !missing.is_empty() {
        bail!(
            "no interface {} here. Name the paths with -i IFACE[=LABEL] (e.g. -i wwan0=4G -i wwan1=5G), \
             or watch the built-in two-path lab: `sudo tboxscope lab run S2 --duration 20s` \
             (`cargo xtask demo`)",
            missing.join(", ")
        );
    }
    let keylog = args.keylog.clone();
    let tcp = if args.no_tcp {
        None
    } else {
        Some(ProbeOptions {
            filter: TcpFilter::parse(&args.tcp.ports, &args.tcp.hosts)?,
            deny: denied_hooks(&[])?,
            ..ProbeOptions::default()
        })
    };
    let config = LiveConfig {
        interfaces: interfaces.clone(),
        filter: args.filter.clone(),
        ..LiveConfig::default()
    };
    let capture = LiveCapture::start(config)
        .context("cannot start live capture (run as root: sudo tboxscope)")?;
    let names: Vec<String> = interfaces
        .iter()
        .map(|i| format!("{}={}", i.name, i.label))
        .collect();
    let (feed, mut source) = snapshot_channel(format!("live {}", names.join(" + ")));
    let labels: Vec<String> = interfaces.iter().map(|i| i.label.clone()).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let (tcp_tx, tcp_rx) = crossbeam_channel::bounded::<TcpMessage>(65_536);
    let tcp_thread = match tcp {
        Some(options) => {
            let local: Vec<(IpAddr, String)> = interfaces
                .iter()
                .flat_map(|i| {
                    interface_addresses(&i.name)
                        .into_iter()
                        .map(|a| (a, i.label.clone()))
                })
                .collect();
            let tcp_stop = Arc::clone(&stop);
            Some(
                thread::Builder::new()
                    .name("tboxscope-tcp".into())
                    .spawn(move || tcp_loop(&options, &local, &tcp_tx, &tcp_stop))
                    .context("starting the TCP probe thread")?,
            )
        }
        None => {
            let _ = tcp_tx.send(TcpMessage::Status("TCP probes: off (--no-tcp)".into()));
            None
        }
    };
    let worker_stop = Arc::clone(&stop);
    let worker = thread::Builder::new()
        .name("tboxscope-capture".into())
        .spawn(move || capture_loop(capture, labels, keylog, tcp_rx, feed, &worker_stop))
        .context("starting the capture thread")?;
    let ui = live::run(&mut source, live::LiveOptions::default());
    stop.store(true, Ordering::Relaxed);
    let _ = worker.join();
    if let Some(t) = tcp_thread {
        let _ = t.join();
    }
    ui?;
    Ok(ExitCode::SUCCESS)
}

/// What the TCP probe thread tells the capture thread.
enum TcpMessage {
    /// A kernel TCP event for the engine.
    Event(Box<TcpEvent>),
    /// The probes' state, for the health panel.
    Status(String),
    /// Kernel events lost so far.
    Dropped(u64),
}

/// Loads the eBPF TCP probes and turns their records into engine events (through the same
/// `tcp_*` schema a `capture --json` file has, so live and replay read TCP alike), until `stop`.
fn tcp_loop(
    options: &ProbeOptions,
    local: &[(IpAddr, String)],
    tx: &Sender<TcpMessage>,
    stop: &AtomicBool,
) {
    let mut watch = match TcpWatch::start(options) {
        Ok(w) => w,
        Err(e) => {
            log::warn!("TCP probes not loaded: {e}");
            let _ = tx.send(TcpMessage::Status(format!("TCP probes off: {e}")));
            return;
        }
    };
    let hooks = watch.hooks();
    let attached = hooks
        .iter()
        .filter(|h| h.state == HookState::Attached)
        .count();
    let missing: Vec<&str> = hooks
        .iter()
        .filter(|h| h.state != HookState::Attached)
        .map(|h| h.name)
        .collect();
    let mut status = format!("TCP probes: {attached}/{} hooks attached", hooks.len());
    if !missing.is_empty() {
        status.push_str(&format!(
            " (not: {}; see tboxscope doctor)",
            missing.join(", ")
        ));
    }
    let _ = tx.send(TcpMessage::Status(status));
    let path_of = |text: Option<&serde_json::Value>| -> Option<String> {
        let addr: std::net::SocketAddr = text?.as_str()?.parse().ok()?;
        local
            .iter()
            .find(|(ip, _)| *ip == addr.ip())
            .map(|(_, label)| label.clone())
    };
    let mut last_dropped = 0;
    while !stop.load(Ordering::Relaxed) {
        let polled = watch.poll(Duration::from_millis(100), &mut |ts, record| {
            let Ok(serde_json::Value::Object(mut map)) = serde_json::to_value(record) else {
                return;
            };
            if let Some(path) = path_of(map.get("src")) {
                map.insert("path".into(), path.into());
            }
            if let Ok(event) = tcp_record::event(record.type_name(), ts, &map) {
                let _ = tx.try_send(TcpMessage::Event(Box::new(event)));
            }
        });
        if let Err(e) = polled {
            let _ = tx.send(TcpMessage::Status(format!("TCP probes stopped: {e}")));
            return;
        }
        let drops = watch.drops();
        let dropped = drops.ring_full.saturating_add(drops.read_failed);
        if dropped != last_dropped {
            last_dropped = dropped;
            let _ = tx.try_send(TcpMessage::Dropped(dropped));
        }
    }
}

/// Decodes captured packets and kernel TCP events into the engine and publishes snapshots
/// until the UI goes away.
fn capture_loop(
    mut capture: LiveCapture,
    labels: Vec<String>,
    keylog: Option<PathBuf>,
    tcp: Receiver<TcpMessage>,
    feed: SnapshotFeed,
    stop: &AtomicBool,
) {
    let mut dissector = Dissector::new(DissectConfig::default());
    let mut keylog_len = 0u64;
    let mut correlator = Correlator::new(EngineConfig {
        emit_messages: false,
        ..EngineConfig::default()
    });
    let mut decoded = Vec::with_capacity(16);
    let mut pcap_dropped = vec![0u64; labels.len()];
    let mut ring_dropped = 0u64;
    let mut tcp_status = String::new();
    let mut next_publish = Instant::now();
    let packets = capture.events().clone();
    while !stop.load(Ordering::Relaxed) {
        let deadline = next_publish.saturating_duration_since(Instant::now());
        crossbeam_channel::select! {
            recv(packets) -> event => match event {
                Ok(LiveEvent::Packets(batch)) => for p in &batch {
                    decoded.clear();
                    dissector.dissect(Some(p.link), &p.data, p.ts_ns, &mut decoded);
                    let label = labels.get(p.path).map_or("?", String::as_str);
                    for (i, unit) in decoded.iter().enumerate() {
                        correlator.observe(label, p.orig_len, i == 0, unit);
                    }
                }
                Ok(LiveEvent::Stats { path, stats, .. }) => {
                    if let Some(d) = pcap_dropped.get_mut(path) {
                        *d = stats.dropped.saturating_add(stats.if_dropped);
                    }
                }
                Ok(LiveEvent::PathDown { path, reason, .. }) => {
                    let label = labels.get(path).map_or("?", String::as_str);
                    feed.set_problem(Some(format!("{label}: capture lost ({reason}); reopening")));
                }
                Ok(LiveEvent::PathUp { .. }) => feed.set_problem(None),
                Err(_) => break,
            },
            recv(tcp) -> message => match message {
                Ok(TcpMessage::Event(e)) => correlator.engine_mut().handle(Observation::Tcp(*e)),
                Ok(TcpMessage::Status(s)) => tcp_status = s,
                Ok(TcpMessage::Dropped(n)) => ring_dropped = n,
                Err(_) => {}
            },
            default(deadline) => {}
        }
        for request in feed.requests() {
            if request == Request::ResetWindows {
                correlator.engine_mut().reset_windows();
            }
        }
        if Instant::now() >= next_publish {
            next_publish = Instant::now() + PUBLISH_EVERY;
            if let Some(path) = &keylog {
                reload_keylog(&mut dissector, path, &mut keylog_len);
            }
            // Time passes for silent paths too; packets still in libpcap's buffer are at most
            // `SETTLE` old, so the clock stays behind them.
            correlator
                .engine_mut()
                .tick(WallClock::unix_now().saturating_sub(SETTLE_NS));
            correlator.engine_mut().drain_records().for_each(drop);
            let mut snapshot = correlator.engine().snapshot();
            snapshot.health.pcap_dropped = pcap_dropped.iter().sum();
            snapshot.health.ring_buffer_dropped = ring_dropped;
            snapshot.health.decrypt_failures = dissector.quic_stats().not_decrypted.values().sum();
            if !tcp_status.is_empty() {
                snapshot.health.inferences.push(tcp_status.clone());
            }
            feed.publish(snapshot);
        }
    }
    capture.stop();
}

/// Loads what was appended to the key log since the last call (clients append as they connect).
fn reload_keylog(dissector: &mut Dissector, path: &PathBuf, loaded: &mut u64) {
    let Ok(meta) = std::fs::metadata(path) else {
        return;
    };
    if meta.len() <= *loaded {
        return;
    }
    if let Ok(text) = std::fs::read(path) {
        let source = path.display().to_string();
        if dissector.add_keylog_text(&text, &source).is_ok() {
            *loaded = meta.len();
        }
    }
}
