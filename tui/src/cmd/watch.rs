//! `tboxscope` without a subcommand: the live terminal UI over libpcap captures of the paths
//! (default eth0 = 4G, eth1 = 5G). Capture, decoding and the engine run on their own thread
//! and publish a snapshot five times a second; the UI only reads snapshots.
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use probe_user::correlate::Correlator;
use probe_user::dissect::{DissectConfig, Dissector};
use probe_user::engine::Config as EngineConfig;
use probe_user::source::pcap::live::{InterfaceSpec, LiveCapture, LiveConfig, LiveEvent};
use tboxscope::source::{snapshot_channel, SnapshotFeed};

use crate::cli::WatchArgs;
use crate::cmd::live;

/// How often the capture thread publishes a snapshot.
const PUBLISH_EVERY: Duration = Duration::from_millis(200);

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
    let worker_stop = Arc::clone(&stop);
    let worker = thread::Builder::new()
        .name("tboxscope-capture".into())
        .spawn(move || capture_loop(capture, labels, keylog, feed, &worker_stop))
        .context("starting the capture thread")?;
    let ui = live::run(&mut source, live::LiveOptions::default());
    stop.store(true, Ordering::Relaxed);
    let _ = worker.join();
    ui?;
    Ok(ExitCode::SUCCESS)
}

/// Decodes captured packets into the engine and publishes snapshots until the UI goes away.
fn capture_loop(
    mut capture: LiveCapture,
    labels: Vec<String>,
    keylog: Option<PathBuf>,
    feed: SnapshotFeed,
    stop: &AtomicBool,
) {
    let mut dissector = Dissector::new(DissectConfig::default());
    let mut keylog_len = 0u64;
    let mut correlator = Correlator::new(EngineConfig::default());
    let mut decoded = Vec::with_capacity(16);
    let mut pcap_dropped = vec![0u64; labels.len()];
    let mut next_publish = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let deadline = next_publish.saturating_duration_since(Instant::now());
        match capture.events().recv_timeout(deadline) {
            Ok(LiveEvent::Packet(p)) => {
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
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
        }
        if Instant::now() >= next_publish {
            next_publish = Instant::now() + PUBLISH_EVERY;
            if let Some(path) = &keylog {
                reload_keylog(&mut dissector, path, &mut keylog_len);
            }
            correlator.engine_mut().drain_records().for_each(drop);
            let mut snapshot = correlator.engine().snapshot();
            snapshot.health.pcap_dropped = pcap_dropped.iter().sum();
            snapshot.health.decrypt_failures = dissector.quic_stats().not_decrypted.values().sum();
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
