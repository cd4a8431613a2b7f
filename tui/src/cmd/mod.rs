//! One module per subcommand; `run` dispatches.
use std::process::ExitCode;

use crate::cli::{Cli, Command, LabAction};

mod analyze;
mod capture;
mod doctor;
mod lab;
pub mod live;
mod replay;
mod watch;

/// Runs the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    init_logging(&cli)?;
    match cli.command {
        Some(Command::Doctor(args)) => doctor::run(args),
        Some(Command::Capture(args)) => capture::run(args),
        Some(Command::Analyze(args)) => analyze::run(args),
        Some(Command::Replay(args)) => replay::run(args),
        Some(Command::Lab(args)) => lab::run(args),
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
