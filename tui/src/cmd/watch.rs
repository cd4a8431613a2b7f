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
use crossbeam_channel::Receiver;
use probe_user::capture::clock::WallClock;
use probe_user::dissect::DissectConfig;
use probe_user::engine::Config as EngineConfig;
use probe_user::source::ebpf::{denied_hooks, ProbeOptions, TcpFilter};
use probe_user::source::pcap::live::{
    check_filter, interface_addresses, InterfaceSpec, LiveCapture, LiveConfig, LiveEvent,
};
use tboxscope::feed::{EngineFeed, Reorder};
use tboxscope::kerneltcp::{KernelTcp, TcpMessage};
use tboxscope::source::{snapshot_channel, SnapshotFeed};

use crate::cli::{MessageIdArgs, WatchArgs};
use crate::cmd::live;

/// How often the capture thread publishes a snapshot.
const PUBLISH_EVERY: Duration = Duration::from_millis(200);

/// Runs the live UI.
pub fn run(args: WatchArgs) -> anyhow::Result<ExitCode> {
    if let Some(filter) = &args.filter {
        check_filter(filter)?;
    }
    let interfaces = interface_specs(&args.interfaces)?;
    // Fail before the terminal is taken over, so the message stays readable.
    let missing = missing_interfaces(&interfaces);
    if !missing.is_empty() {
        bail!("{}", missing_interfaces_message(&missing));
    }
    // Before the probes are loaded: the UI cannot draw into a pipe or a file.
    tboxscope::terminal::require_terminal()?;
    let metrics = super::metrics::LiveMetrics::start(&args.metrics)?;
    let keylog = args.keylog.clone();
    let max_flows = crate::cli::live_max_flows(args.max_flows);
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
        buffer_size: args.buffer_size.unwrap_or(crate::cli::DEFAULT_BUFFER_SIZE),
        ..LiveConfig::default()
    };
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let capture = LiveCapture::start(config).context(if root {
        "cannot start live capture"
    } else {
        "cannot start live capture (run as root: sudo tboxscope)"
    })?;
    let names: Vec<String> = interfaces
        .iter()
        .map(|i| format!("{}={}", i.name, i.label))
        .collect();
    let (feed, mut source) = snapshot_channel(format!("live {}", names.join(" + ")));
    let feed = feed.with_metrics(metrics.as_ref().map(|m| m.hub.clone()));
    let labels: Vec<String> = interfaces.iter().map(|i| i.label.clone()).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let (off_tx, off_rx) = crossbeam_channel::bounded::<TcpMessage>(1);
    let mut kernel = match tcp {
        Some(options) => {
            let local: Vec<(IpAddr, String)> = interfaces
                .iter()
                .flat_map(|i| {
                    interface_addresses(&i.name)
                        .into_iter()
                        .map(|a| (a, i.label.clone()))
                })
                .collect();
            Some(KernelTcp::spawn(options, local).context("starting the TCP probe thread")?)
        }
        None => {
            let _ = off_tx.send(TcpMessage::Status("TCP probes: off (--no-tcp)".into()));
            None
        }
    };
    let tcp_rx = kernel.as_ref().map_or(off_rx, |k| k.messages.clone());
    let worker_stop = Arc::clone(&stop);
    let worker = thread::Builder::new()
        .name("tboxscope-capture".into())
        .spawn(move || {
            capture_loop(
                capture,
                labels,
                keylog,
                feed_configs(args.ids, &args.kcp_ports, max_flows),
                tcp_rx,
                feed,
                &worker_stop,
            );
        })
        .context("starting the capture thread")?;
    let ui = live::run(&mut source, live::LiveOptions::default());
    stop.store(true, Ordering::Relaxed);
    let _ = worker.join();
    if let Some(k) = kernel.as_mut() {
        k.stop();
    }
    drop(off_tx);
    drop(metrics);
    ui?;
    Ok(ExitCode::SUCCESS)
}

/// The interfaces `-i` names (IFACE or IFACE=LABEL), or the default eth0 and eth1.
pub fn interface_specs(given: &[String]) -> anyhow::Result<Vec<InterfaceSpec>> {
    if given.is_empty() {
        return Ok(InterfaceSpec::defaults());
    }
    Ok(given
        .iter()
        .map(|s| InterfaceSpec::parse(s))
        .collect::<Result<Vec<_>, _>>()?)
}

/// The interfaces of `interfaces` this host does not have. libpcap's pseudo-devices `any`
/// (every interface, Linux cooked) and `nflog[:GROUP]` (netfilter log) are always there.
pub fn missing_interfaces(interfaces: &[InterfaceSpec]) -> Vec<&str> {
    interfaces
        .iter()
        .filter(|i| {
            let pseudo = i.name == "any" || i.name == "nflog" || i.name.starts_with("nflog:");
            !pseudo
                && !std::path::Path::new("/sys/class/net")
                    .join(&i.name)
                    .exists()
        })
        .map(|i| i.name.as_str())
        .collect()
}

/// Why live mode cannot start without these interfaces, and what to do instead.
pub fn missing_interfaces_message(missing: &[&str]) -> String {
    format!(
        "no interface {} here. Name the paths with -i IFACE[=LABEL] (e.g. -i wwan0=4G -i wwan1=5G), \
         or watch the built-in two-path lab: `sudo tboxscope lab run S2 --duration 20s` \
         (`cargo xtask demo`)",
        missing.join(", ")
    )
}

/// The live UI's decoding and engine settings: messages told apart by `ids` as `capture` and
/// `analyze` tell them apart, KCP recognised on `kcp_ports` as they recognise it.
fn feed_configs(
    ids: MessageIdArgs,
    kcp_ports: &[u16],
    max_flows: usize,
) -> (DissectConfig, EngineConfig) {
    (
        DissectConfig {
            app_id: ids.app_id,
            framing: ids.framing,
            kcp_ports: kcp_ports.to_vec(),
            ..DissectConfig::default()
        },
        EngineConfig {
            app_id: ids.app_id,
            emit_messages: false,
            // The Advice screen.
            collect_evidence: true,
            max_flows,
            ..EngineConfig::default()
        },
    )
}

/// Decodes captured packets and kernel TCP events into the engine and publishes snapshots
/// until the UI goes away.
fn capture_loop(
    mut capture: LiveCapture,
    labels: Vec<String>,
    keylog: Option<PathBuf>,
    (dissect, config): (DissectConfig, EngineConfig),
    mut tcp: Receiver<TcpMessage>,
    feed: SnapshotFeed,
    stop: &AtomicBool,
) {
    let mut engine = EngineFeed::new(dissect, config, keylog, labels.len());
    // Every interface is a path from the first packet on, also one that stays silent.
    engine.correlator_mut().expect_paths(&labels);
    let mut next_publish = Instant::now();
    let mut reorder = Reorder::default();
    let packets = capture.events().clone();
    while !stop.load(Ordering::Relaxed) {
        let deadline = next_publish.saturating_duration_since(Instant::now());
        crossbeam_channel::select! {
            recv(packets) -> event => match event {
                Ok(LiveEvent::Packets(batch)) => batch.into_iter().for_each(|p| reorder.push(p)),
                Ok(LiveEvent::Stats { path, stats, .. }) => {
                    engine.pcap_dropped(path, stats.dropped.saturating_add(stats.if_dropped));
                }
                Ok(LiveEvent::PathDown { path, reason, .. }) => {
                    let label = labels.get(path).map_or("?", String::as_str);
                    feed.set_problem(Some(format!("{label}: capture lost ({reason}); reopening")));
                }
                Ok(LiveEvent::PathUp { .. }) => feed.set_problem(None),
                Err(_) => break,
            },
            recv(tcp) -> message => match message {
                Ok(m) => engine.tcp(m),
                // The probe thread ended (its status says why): stop polling it.
                Err(_) => tcp = crossbeam_channel::never(),
            },
            default(deadline) => {}
        }
        while let Some(p) = reorder.pop_ready(WallClock::unix_now()) {
            let label = labels.get(p.path).map_or("?", String::as_str);
            engine.frame(None, label, &p);
        }
        engine.requests(&feed);
        if Instant::now() >= next_publish {
            next_publish = Instant::now() + PUBLISH_EVERY;
            engine.publish(&feed);
        }
    }
    capture.stop();
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::Cli;

    /// `--app-id`, `--framing` and `--kcp-port` of the live UI reach its decoder and engine.
    #[test]
    fn the_live_ui_tells_messages_apart_as_analyze_does() {
        let cli = Cli::try_parse_from([
            "tboxscope",
            "--app-id",
            "8:8:le",
            "--framing",
            "fixed:600",
            "--kcp-port",
            "7401",
        ])
        .map_err(|e| e.to_string());
        let Ok(cli) = cli else {
            panic!("{cli:?}");
        };
        let (dissect, engine) = super::feed_configs(cli.watch.ids, &cli.watch.kcp_ports, 512);
        assert_eq!(dissect.kcp_ports, vec![7401]);
        let rule = probe_user::engine::AppIdRule {
            offset: 8,
            width: 8,
            little_endian: true,
        };
        assert_eq!(dissect.app_id, Some(rule));
        assert_eq!(engine.app_id, Some(rule));
        assert_eq!(
            dissect.framing,
            Some(probe_user::engine::Framing::Fixed(600))
        );
        assert_eq!(engine.max_flows, 512);
    }
}
