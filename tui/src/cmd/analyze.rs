//! `tboxscope analyze`.
use std::process::ExitCode;

use crate::cli::AnalyzeArgs;

/// Runs `tboxscope analyze`.
pub fn run(_args: AnalyzeArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`tboxscope analyze` is not built yet")
}
