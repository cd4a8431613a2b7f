//! One module per subcommand; `run` dispatches.
use std::process::ExitCode;

use crate::cli::{Cli, Command, LabAction, LiveMetricsArgs, WatchArgs};

mod advise;
mod analyze;
mod capture;
mod doctor;
mod lab;
pub mod live;
mod metrics;
mod replay;
mod watch;

/// Runs the parsed command line.
pub fn run(mut cli: Cli) -> anyhow::Result<ExitCode> {
    leading_options(&mut cli)?;
    init_logging(&cli)?;
    match cli.command {
        Some(Command::Doctor(args)) => doctor::run(args),
        Some(Command::Capture(args)) => capture::run(args),
        Some(Command::Analyze(args)) => analyze::run(args),
        Some(Command::Replay(args)) => replay::run(args),
        Some(Command::Lab(args)) => lab::run(args),
        Some(Command::Advise(args)) => advise::run(args),
        None => watch::run(cli.watch),
    }
}

fn init_logging(cli: &Cli) -> anyhow::Result<()> {
    let env = env_logger::Env::default().default_filter_or(cli.log_level.clone());
    let mut builder = env_logger::Builder::from_env(env);
    // The live UI owns the terminal: its diagnostics go to a file unless one is named.
    let ui = match &cli.command {
        None => true,
        Some(Command::Lab(lab)) => matches!(&lab.action, LabAction::Run(run) if run.tui),
        Some(_) => false,
    };
    let default_log = ui.then(|| std::env::temp_dir().join("tboxscope-live.log"));
    if let Some(path) = cli.log_file.as_ref().or(default_log.as_ref()) {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| anyhow::anyhow!("cannot open log file {}: {e}", path.display()))?;
        builder.target(env_logger::Target::Pipe(Box::new(file)));
    }
    // A second init (tests calling run twice) is harmless: keep the first logger.
    let _ = builder.try_init();
    Ok(())
}

/// The live UI's options written before a subcommand (`tboxscope --keylog K analyze F`): moved
/// into the subcommand where it has the same option (`--keylog` for analyze and replay,
/// `--port`/`--host` for capture, `-i` for doctor), refused with the reason otherwise. Never
/// ignored.
fn leading_options(cli: &mut Cli) -> anyhow::Result<()> {
    let Some(command) = cli.command.as_mut() else {
        return Ok(());
    };
    let WatchArgs {
        interfaces,
        filter,
        keylog,
        kcp_ports,
        tcp,
        no_tcp,
        buffer_size,
        max_flows,
        ids,
        metrics,
    } = std::mem::take(&mut cli.watch);
    let (name, mut refused) = (command.name(), Vec::new());
    let had_keylog = keylog.is_some();
    let take_keylog = |into: &mut Option<std::path::PathBuf>| -> anyhow::Result<()> {
        match (keylog, into.as_ref()) {
            (Some(k), Some(other)) if k != *other => anyhow::bail!(
                "--keylog given twice, before and after `{name}` ({} and {})",
                k.display(),
                other.display()
            ),
            (Some(k), _) => *into = Some(k),
            (None, _) => {}
        }
        Ok(())
    };
    match command {
        Command::Analyze(a) => take_keylog(&mut a.decode.keylog)?,
        Command::Replay(r) => take_keylog(&mut r.decode.keylog)?,
        Command::Advise(a) => take_keylog(&mut a.decode.keylog)?,
        Command::Capture(c) => take_keylog(&mut c.keylog)?,
        _ if had_keylog => refused.push("--keylog"),
        _ => {}
    }
    match command {
        Command::Capture(c) => {
            c.filter.ports.extend(tcp.ports);
            c.filter.hosts.extend(tcp.hosts);
        }
        _ => {
            if !tcp.ports.is_empty() {
                refused.push("--port");
            }
            if !tcp.hosts.is_empty() {
                refused.push("--host");
            }
        }
    }
    match command {
        Command::Analyze(a) => ids.take_into(&mut a.decode.ids, name)?,
        Command::Replay(r) => ids.take_into(&mut r.decode.ids, name)?,
        Command::Advise(a) => ids.take_into(&mut a.decode.ids, name)?,
        Command::Capture(c) => ids.take_into(&mut c.ids, name)?,
        _ => {
            if ids.app_id.is_some() {
                refused.push("--app-id");
            }
            if ids.framing.is_some() {
                refused.push("--framing");
            }
        }
    }
    match command {
        Command::Analyze(a) => a.decode.kcp_ports.extend(kcp_ports),
        Command::Replay(r) => r.decode.kcp_ports.extend(kcp_ports),
        Command::Advise(a) => a.decode.kcp_ports.extend(kcp_ports),
        Command::Capture(c) => c.kcp_ports.extend(kcp_ports),
        _ if !kcp_ports.is_empty() => refused.push("--kcp-port"),
        _ => {}
    }
    match command {
        Command::Doctor(d) => d.interfaces.extend(interfaces),
        Command::Capture(c) => c.interfaces.extend(interfaces),
        _ if !interfaces.is_empty() => refused.push("-i/--interface"),
        _ => {}
    }
    match command {
        Command::Capture(c) => {
            if let Some(f) = filter {
                if c.pcap_filter.as_ref().is_some_and(|other| *other != f) {
                    anyhow::bail!("--filter given twice, before and after `capture`");
                }
                c.pcap_filter = Some(f);
            }
            c.no_tcp |= no_tcp;
            if let Some(b) = buffer_size {
                if c.buffer_size.is_some_and(|other| other != b) {
                    anyhow::bail!("--buffer-size given twice, before and after `capture`");
                }
                c.buffer_size = Some(b);
            }
            if let Some(m) = max_flows {
                if c.max_flows.is_some_and(|other| other != m) {
                    anyhow::bail!("--max-flows given twice, before and after `capture`");
                }
                c.max_flows = Some(m);
            }
        }
        _ => {
            if filter.is_some() {
                refused.push("--filter");
            }
            if buffer_size.is_some() {
                refused.push("--buffer-size");
            }
            if max_flows.is_some() {
                refused.push("--max-flows");
            }
            if no_tcp {
                refused.push("--no-tcp");
            }
        }
    }
    if metrics != LiveMetricsArgs::default() {
        match command {
            Command::Capture(c) if c.metrics == LiveMetricsArgs::default() => c.metrics = metrics,
            Command::Capture(_) => {
                anyhow::bail!("metrics options given both before and after `capture`")
            }
            _ => refused.push("--metrics-listen/--otlp/--otlp-interval/--tbox-id"),
        }
    }
    if !refused.is_empty() {
        let why = match command {
            Command::Analyze(_) | Command::Replay(_) | Command::Advise(_) => {
                "it reads capture files, it captures nothing live"
            }
            // Not reached: capture takes every live UI option.
            Command::Capture(_) => "it has no option of that name",
            Command::Doctor(_) => "it checks this host for live mode with the paths of -i",
            Command::Lab(_) => "the lab chooses its own interfaces and captures",
        };
        let (is, them) = if refused.len() == 1 {
            ("is an option", "it")
        } else {
            ("are options", "them")
        };
        anyhow::bail!(
            "{} {is} of the live UI (`tboxscope` without a subcommand), written before \
             `{name}`, which does not take {them}: {why}. See `tboxscope {name} --help`",
            refused.join(", "),
        );
    }
    Ok(())
}
