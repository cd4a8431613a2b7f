//! `tboxscope capture`.
use std::process::ExitCode;

use crate::cli::CaptureArgs;

/// Runs `tboxscope capture`.
pub fn run(_args: CaptureArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`tboxscope capture` is not built yet")
}
