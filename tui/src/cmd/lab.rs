//! `tboxscope lab`: the two-path testbed (crate `tboxscope-lab`).
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use probe_user::engine::advice::{advise, Limits};
use tboxscope::app::Request;
use tboxscope::report::Page;
use tboxscope::source::{snapshot_channel, ChannelSource, SnapshotSource};
use tboxscope::view::SourceStatus;
use tboxscope_engine::snapshot::Snapshot;
use tboxscope_lab::peers::{Profile, TcpCc, Transport};
use tboxscope_lab::run::{NoObserver, RunOptions};
use tboxscope_lab::testbed::{run_detached_line, set_outage};
use tboxscope_lab::{
    status, DelayChoice, LabNames, LineHost, PathId, Scenario, Testbed, UpOptions,
};

use crate::cli::{LabAction, LabArgs, LabDelay, LabRunArgs};
use crate::cmd::live;
use tboxscope::labcap::{self, LabCapture, Measured};

/// Runs `tboxscope lab …`.
pub fn run(args: LabArgs) -> anyhow::Result<ExitCode> {
    let names = LabNames::new(&args.prefix)?;
    match args.action {
        LabAction::Up(up) => {
            let scenario = Scenario::load(&up.scenario)?;
            let exe = std::env::current_exe().context("cannot find the tboxscope executable")?;
            let opts = UpOptions {
                delay: delay_choice(up.delay),
                host: LineHost::Detached {
                    exe,
                    args: vec![
                        "lab".into(),
                        "--prefix".into(),
                        args.prefix.clone(),
                        "delay-line".into(),
                    ],
                },
                teardown_on_drop: false,
                ..UpOptions::default()
            };
            let bed = Testbed::up(names.clone(), &scenario, &opts)?;
            writeln!(
                std::io::stdout(),
                "lab {} up with scenario {} ({})",
                names.prefix(),
                scenario.name,
                scenario.description
            )?;
            if scenario.has_outage() {
                writeln!(std::io::stdout(), "note: outages are scheduled by `tboxscope lab run`; switch one by hand with `tboxscope lab outage a on`")?;
            }
            bed.keep();
            write!(std::io::stdout(), "{}", status::status(&names)?)?;
            Ok(ExitCode::SUCCESS)
        }
        LabAction::Down => {
            tboxscope_lab::down(&names)?;
            writeln!(std::io::stdout(), "lab {} down", names.prefix())?;
            Ok(ExitCode::SUCCESS)
        }
        LabAction::Status { json } => {
            let st = status::status(&names)?;
            if json {
                writeln!(std::io::stdout(), "{}", serde_json::to_string(&st)?)?;
            } else {
                write!(std::io::stdout(), "{st}")?;
            }
            Ok(if st.is_up(&names) {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(3)
            })
        }
        LabAction::Outage { path, state } => {
            let p = match path.to_ascii_lowercase().as_str() {
                "a" | "eth0" => PathId::A,
                "b" | "eth1" => PathId::B,
                _ => bail!("path must be a or b, not {path:?}"),
            };
            let down = match state.as_str() {
                "on" => true,
                "off" => false,
                _ => bail!("state must be on or off, not {state:?}"),
            };
            set_outage(&names, p, down)?;
            Ok(ExitCode::SUCCESS)
        }
        LabAction::Run(run_args) => lab_run(names, run_args),
        LabAction::DelayLine { ns, config } => {
            run_detached_line(&ns, &config)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn delay_choice(d: LabDelay) -> DelayChoice {
    match d {
        LabDelay::Auto => DelayChoice::Auto,
        LabDelay::Line => DelayChoice::Line,
    }
}

/// Parses `500ms`, `20s`, `2m`, or a plain number of seconds.
fn parse_duration(s: &str) -> anyhow::Result<Duration> {
    let s = s.trim();
    let (num, scale) = if let Some(v) = s.strip_suffix("ms") {
        (v, 1e-3)
    } else if let Some(v) = s.strip_suffix('s') {
        (v, 1.0)
    } else if let Some(v) = s.strip_suffix('m') {
        (v, 60.0)
    } else {
        (s, 1.0)
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| anyhow!("bad duration {s:?} (try 20s, 2m, 500ms)"))?;
    if !(v.is_finite() && v >= 0.0 && v * scale < 86_400.0) {
        bail!("duration {s:?} out of range");
    }
    Ok(Duration::from_secs_f64(v * scale))
}

fn lab_run(names: LabNames, a: LabRunArgs) -> anyhow::Result<ExitCode> {
    if a.tui && !a.no_capture {
        // Before the lab is built: the run would otherwise end at the first frame drawn.
        tboxscope::terminal::require_terminal()?;
    }
    let scenario = Scenario::load(&a.scenario)?;
    let mut opts = RunOptions::new(names);
    opts.duration = parse_duration(&a.duration)?;
    opts.drain = if a.drain == "auto" {
        let outage: f64 = PathId::BOTH
            .iter()
            .flat_map(|p| scenario.path(*p).outage.iter().map(|o| o.duration_s))
            .sum();
        Duration::from_secs_f64(4.0 + 2.0 * outage)
    } else {
        parse_duration(&a.drain)?
    };
    if !(a.rate > 0.0 && a.rate <= 10_000.0) {
        bail!("--rate must be within (0, 10000] messages per second");
    }
    if !(32..=60_000).contains(&a.size) {
        bail!("--size must be within 32..=60000 bytes");
    }
    opts.profile = Profile {
        rate_hz: a.rate,
        size: a.size,
    };
    opts.transports = if a.transports.is_empty() {
        Transport::defaults()
    } else if a.transports.iter().any(|t| t.trim() == "all") {
        // Every one, TCP once (with the kernel's default algorithm; --tcp-cc for others).
        Transport::available()
            .into_iter()
            .filter(|t| !t.is_tcp() || *t == Transport::Tcp(TcpCc::Default))
            .collect()
    } else {
        a.transports
            .iter()
            .map(|t| Transport::parse(t.trim()).ok_or_else(|| anyhow!("unknown transport {t:?}")))
            .collect::<anyhow::Result<_>>()?
    };
    if !a.tcp_cc.is_empty() {
        opts.transports = with_tcp_algorithms(&opts.transports, &a.tcp_cc)?;
    }
    if let Some(k) = a.keylog {
        opts.keylog = k;
    }
    opts.delay = delay_choice(a.delay);
    eprintln!(
        "running {} for {:.0} s (+{:.0} s drain) with {} …",
        scenario.name,
        opts.duration.as_secs_f64(),
        opts.drain.as_secs_f64(),
        opts.transports
            .iter()
            .map(|t| t.name())
            .collect::<Vec<_>>()
            .join(", ")
    );
    if a.no_capture && a.metrics != crate::cli::LiveMetricsArgs::default() {
        bail!("--metrics-listen and --otlp show tboxscope's capture of the run: not with --no-capture");
    }
    let metrics = super::metrics::LiveMetrics::start(&a.metrics)?;
    let hub = metrics.as_ref().map(|m| m.hub.clone());
    let (report, measured) = if a.no_capture {
        (
            tboxscope_lab::run::run(&scenario, &opts, &mut NoObserver)?,
            None,
        )
    } else if a.tui {
        let outcome = watch_run(&scenario, &opts, LabCapture::new(a.pcap.clone()), hub)?;
        if let Some(at) = outcome.ended_early_s {
            writeln!(std::io::stdout(), "run ended early (UI closed after {at:.1} s): the tables cover what happened until then")?;
        }
        outcome.result?
    } else {
        let mut capture = LabCapture::new(a.pcap.clone());
        if hub.is_some() {
            // Decoded as it goes too, for the metrics (the UI's feed without a UI).
            let (feed, _) = snapshot_channel("lab run");
            capture = capture.live(feed.with_metrics(hub));
        }
        let report = tboxscope_lab::run::run(&scenario, &opts, &mut capture)?;
        (report, capture.take_measured())
    };
    write!(std::io::stdout(), "{report}")?;
    if let Some(m) = &measured {
        writeln!(std::io::stdout())?;
        write!(
            std::io::stdout(),
            "{}",
            labcap::render_comparison(&report, m)
        )?;
    }
    let advice = measured
        .as_ref()
        .and_then(|m| advise(m.evidence.clone(), Limits::default()));
    if let Some(a) = &advice {
        writeln!(
            std::io::stdout(),
            "\nthe transport this link wants, from tboxscope's capture of it \
             (as `tboxscope advise` of the captures):"
        )?;
        write!(
            std::io::stdout(),
            "{}",
            probe_user::engine::advice::render(a)
        )?;
    }
    writeln!(std::io::stdout(), "QUIC key log: {}", opts.keylog.display())?;
    if let Some(dir) = &a.pcap {
        writeln!(
            std::io::stdout(),
            "captures: tboxscope analyze {}",
            labcap::analyze_args(dir, &opts).join(" ")
        )?;
    }
    if let (Some(dir), Some(m)) = (&a.report, &measured) {
        let page = Page {
            title: format!(
                "lab run {} ({})",
                report.scenario.name,
                report
                    .transports
                    .iter()
                    .map(|t| t.transport)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            summary: &m.summary,
            collected: &m.pictures,
            advice: advice.as_ref(),
        };
        let path = tboxscope::report::write(dir, &page)?;
        writeln!(std::io::stdout(), "picture report: {}", path.display())?;
    }
    if let Some(path) = a.json {
        write_json(&path, &report, measured.as_ref(), advice.as_ref())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// What a run watched in the terminal UI gave.
struct Watched {
    /// The report and tboxscope's figures, or why the run failed.
    result: anyhow::Result<(tboxscope_lab::run::RunReport, Option<Measured>)>,
    /// When the user ended the run before its end (seconds after the UI started).
    ended_early_s: Option<f64>,
}

/// Runs the lab on a thread of its own while the terminal UI shows tboxscope's live capture of
/// it; when the UI closes (q, a signal, the terminal gone) the run is told to stop, and it
/// captures, reports and tears down before this returns.
fn watch_run(
    scenario: &Scenario,
    opts: &RunOptions,
    capture: LabCapture,
    metrics: Option<tboxscope::metrics::MetricsHub>,
) -> anyhow::Result<Watched> {
    let title = format!(
        "lab {}: tbox {}=4G {}=5G ⇄ gateway {} {}",
        scenario.name,
        PathId::A.tbox_iface(),
        PathId::B.tbox_iface(),
        PathId::A.gateway_iface(),
        PathId::B.gateway_iface()
    );
    let (feed, source) = snapshot_channel(title);
    let feed = feed.with_metrics(metrics);
    let failed: Arc<Mutex<Option<String>>> = Arc::default();
    let lab = {
        let (scenario, opts, failed) = (scenario.clone(), opts.clone(), Arc::clone(&failed));
        let mut capture = capture.live(feed);
        std::thread::Builder::new()
            .name("lab-run".into())
            .spawn(move || {
                let result = tboxscope_lab::run::run(&scenario, &opts, &mut capture);
                if let Err(e) = &result {
                    *failed.lock().unwrap_or_else(PoisonError::into_inner) =
                        Some(format!("lab run failed: {e}; q quits"));
                }
                result.map(|report| (report, capture.take_measured()))
            })
            .context("starting the lab run")?
    };
    let started = Instant::now();
    let mut source = LabSource { source, failed };
    let ui = live::run(&mut source, live::LiveOptions::default());
    let ended_early = !lab.is_finished();
    opts.stop.store(true, Ordering::Relaxed);
    let result = lab
        .join()
        .map_err(|_| anyhow!("the lab run panicked"))?
        .map_err(anyhow::Error::from);
    ui?;
    Ok(Watched {
        result,
        ended_early_s: ended_early.then(|| started.elapsed().as_secs_f64()),
    })
}

/// The live capture's snapshots, and the run's failure in the status bar.
struct LabSource {
    source: ChannelSource,
    failed: Arc<Mutex<Option<String>>>,
}

impl SnapshotSource for LabSource {
    fn poll(&mut self) -> Option<Arc<Snapshot>> {
        self.source.poll()
    }

    fn request(&mut self, request: Request) {
        self.source.request(request);
    }

    fn status(&self) -> SourceStatus {
        let mut status = self.source.status();
        if let Some(f) = self
            .failed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
        {
            status.problem = Some(f);
        }
        status
    }
}

fn write_json(
    path: &str,
    report: &tboxscope_lab::run::RunReport,
    measured: Option<&Measured>,
    advice: Option<&probe_user::engine::advice::Advice>,
) -> anyhow::Result<()> {
    use probe_user::output::JsonLinesWriter;
    #[derive(serde::Serialize)]
    struct Header<'a> {
        command: &'a str,
        scenario: &'a Scenario,
    }
    let out: Box<dyn std::io::Write> = if path == "-" {
        Box::new(std::io::stdout().lock())
    } else {
        Box::new(std::fs::File::create(path).with_context(|| format!("cannot create {path}"))?)
    };
    let ts = report.start_unix_ns;
    let mut w = JsonLinesWriter::new(
        out,
        ts,
        &Header {
            command: "lab run",
            scenario: &report.scenario,
        },
    )?;
    for e in &report.timeline {
        w.write("lab_event", e.unix_ns, e)?;
    }
    for t in &report.transports {
        w.write("lab_transport", ts, t)?;
    }
    w.write("lab_run", ts, report)?;
    if let Some(m) = measured {
        w.write("lab_measured", ts, m)?;
    }
    if let Some(a) = advice {
        w.write("advice", ts, a)?;
    }
    w.flush()?;
    Ok(())
}

/// The transports with the TCP baseline run once per algorithm of `--tcp-cc`, where `tcp`
/// stood.
fn with_tcp_algorithms(
    transports: &[Transport],
    names: &[String],
) -> anyhow::Result<Vec<Transport>> {
    let mut algorithms = Vec::new();
    for name in names {
        let cc = TcpCc::parse(name.trim()).ok_or_else(|| {
            let known: Vec<&str> = TcpCc::SET.iter().filter_map(|c| c.kernel_name()).collect();
            anyhow!(
                "--tcp-cc {name:?}: not one of {} (this kernel offers: {})",
                known.join(", "),
                std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
                    .unwrap_or_default()
                    .trim()
            )
        })?;
        if !algorithms.contains(&Transport::Tcp(cc)) {
            algorithms.push(Transport::Tcp(cc));
        }
    }
    let Some(at) = transports.iter().position(|t| t.is_tcp()) else {
        bail!("--tcp-cc runs the TCP baseline once per algorithm: tcp is not among --transports");
    };
    let mut out: Vec<Transport> = transports.iter().copied().filter(|t| !t.is_tcp()).collect();
    for (i, t) in algorithms.into_iter().enumerate() {
        out.insert(at + i, t);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::{parse_duration, with_tcp_algorithms};
    use std::time::Duration;
    use tboxscope_lab::peers::Transport;

    #[test]
    fn tcp_cc_runs_the_baseline_once_per_algorithm_where_tcp_stood() {
        let names = |v: &[Transport]| v.iter().map(|t| t.name()).collect::<Vec<_>>().join(",");
        let ts: Vec<Transport> = ["kcp", "tcp", "quic"]
            .iter()
            .filter_map(|n| Transport::parse(n))
            .collect();
        let cc = |s: &str| s.split(',').map(str::to_owned).collect::<Vec<_>>();
        let out = with_tcp_algorithms(&ts, &cc("cubic,bbr,reno,bbr")).unwrap();
        assert_eq!(names(&out), "kcp,tcp-cubic,tcp-bbr,tcp-reno,quic");
        assert!(with_tcp_algorithms(&ts, &cc("vegas"))
            .unwrap_err()
            .to_string()
            .contains("not one of cubic, bbr, reno"));
        assert!(
            with_tcp_algorithms(&ts[..1], &cc("bbr")).is_err(),
            "no tcp to run"
        );
        // Each its own port and message slot.
        let mut ports: Vec<u16> = out.iter().map(|t| t.port()).collect();
        ports.dedup();
        assert_eq!(ports.len(), out.len());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("20s").unwrap(), Duration::from_secs(20));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert!(parse_duration("x").is_err());
        assert!(parse_duration("-1s").is_err());
    }
}
