//! `tboxscope`: the command-line entry point. Each subcommand lives in `cmd/`.
mod cli;
mod cmd;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = cli::Cli::parse();
    match cmd::run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("tboxscope: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
