//! `tboxscope doctor`.
use std::process::ExitCode;

use crate::cli::DoctorArgs;

/// Runs `tboxscope doctor`.
pub fn run(_args: DoctorArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`tboxscope doctor` is not built yet")
}
