//! `tboxscope`: the command-line entry point. Each subcommand lives in `cmd/`.
mod cli;
mod cmd;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = cli::Cli::parse();
    match cmd::run(cli) {
        Ok(code) => code,
        // The reader of the output went away (`tboxscope analyze … | head`): it has what it
        // wanted; stop quietly, as other command-line tools do.
        Err(err) if closed_pipe(&err) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("tboxscope: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Whether `err` comes from writing to a pipe whose reader has gone.
fn closed_pipe(err: &anyhow::Error) -> bool {
    use probe_user::capture::CaptureError;
    use probe_user::output::jsonl::OutputError;
    use std::io::ErrorKind::BrokenPipe;
    let output = |o: &OutputError| matches!(o, OutputError::Io(e) if e.kind() == BrokenPipe);
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == BrokenPipe)
            || cause.downcast_ref::<OutputError>().is_some_and(output)
            // `capture` wraps the output's error transparently (no source to follow).
            || cause
                .downcast_ref::<CaptureError>()
                .is_some_and(|c| matches!(c, CaptureError::Output(o) if output(o)))
    })
}
