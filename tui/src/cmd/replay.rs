//! `tboxscope replay FILE`: the terminal UI over a recorded capture, with play/pause, speed and
//! seek.
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use tboxscope::replay::{self, PacketSettings, PlayOptions};

use super::live::{self, LiveOptions};
use crate::cli::{files_engine_config, refuse_repeated_files, ReplayArgs};

/// CPU time (user + system) of the whole process.
fn process_cpu() -> Duration {
    // SAFETY: getrusage writes into the zeroed struct we own.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: see above.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    if rc != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// Runs `tboxscope replay`.
pub fn run(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    if !(args.speed.is_finite() && args.speed > 0.0) {
        anyhow::bail!("--speed must be a positive number, not {}", args.speed);
    }
    refuse_repeated_files(&args.files)?;
    // Load before touching the terminal: a bad file is a plain error on a normal screen (and
    // one that is not a terminal is refused before anything is written to it).
    let options = PlayOptions {
        speed: args.speed,
        paused: args.paused,
        ..PlayOptions::default()
    };
    let packet_only = args.packet_only_flags();
    if let Some(first) = args.files.first() {
        if !packet_only.is_empty() && !replay::packets::is_packet_capture(first)? {
            anyhow::bail!(
                "{} appl{} to packet captures only: {} is a JSON Lines recording, whose \
                 messages were decoded and matched when it was recorded",
                packet_only.join(", "),
                if packet_only.len() == 1 { "ies" } else { "y" },
                first.display()
            );
        }
    }
    let settings = PacketSettings {
        decode: args.decode.dissect_config()?,
        engine: files_engine_config(&args.decode, &args.timeout, &args.stated)?,
        captures: args.stated.captures(),
    };
    let (player, mut source) = replay::start(&args.files, options, settings)?;
    let stats = live::run(
        &mut source,
        LiveOptions {
            replay: true,
            ..LiveOptions::default()
        },
    )?;
    drop(player);
    if let Some(path) = &args.stats {
        let wall = stats.wall.as_secs_f64().max(1e-9);
        let report = serde_json::json!({
            "frames": stats.frames,
            "wall_s": wall,
            "ui_thread_cpu_s": stats.ui_cpu.as_secs_f64(),
            "process_cpu_s": process_cpu().as_secs_f64(),
            "ui_cpu_share_of_one_core": stats.ui_cpu.as_secs_f64() / wall,
            "process_cpu_share_of_one_core": process_cpu().as_secs_f64() / wall,
        });
        std::fs::write(path, format!("{report}\n"))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
