//! The command line (clap). Options are grouped per subcommand; shared groups are flattened.
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// tboxscope: watch TCP, KCP and redundant multipath QUIC on two-path (4G/5G) T-Box control
/// links — retransmissions and RTO backoff from eBPF, message copies and latency from packets.
#[derive(Debug, Parser)]
#[command(name = "tboxscope", version, about, long_about = None)]
pub struct Cli {
    /// Log level for diagnostics (error, warn, info, debug, trace); RUST_LOG overrides it.
    #[arg(long, global = true, default_value = "warn")]
    pub log_level: String,
    /// Write diagnostics to this file instead of standard error.
    #[arg(long, global = true)]
    pub log_file: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The subcommands; without one, `tboxscope` starts the live terminal UI.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check what live mode can use here: kernel, BTF, each eBPF hook, privileges, libpcap,
    /// interfaces. Exits 0 when live mode can run.
    Doctor(DoctorArgs),
    /// Headless live capture to JSON Lines (eBPF TCP probes and packets).
    Capture(CaptureArgs),
    /// Decode and analyse .pcap/.pcapng files offline.
    Analyze(AnalyzeArgs),
    /// The terminal UI over a recorded capture (JSON Lines from `capture`/`analyze --json`):
    /// p play/pause, +/- speed, ←/→ seek.
    Replay(ReplayArgs),
}

/// `tboxscope replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The recording: JSON Lines written by tboxscope.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Replay speed (1 = as recorded, 2 = twice as fast).
    #[arg(long, default_value_t = 1.0)]
    pub speed: f64,
    /// Start paused (p plays).
    #[arg(long)]
    pub paused: bool,
    /// On exit, write the UI's cost (frames, wall time, UI-thread and process CPU) as JSON here.
    #[arg(long, value_name = "PATH", hide = true)]
    pub stats: Option<PathBuf>,
}

/// `tboxscope doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Filters applied in the kernel, so one control link can be watched on a busy host.
#[derive(Debug, Args, Clone, Default)]
pub struct TcpFilterArgs {
    /// Only TCP connections with this local or remote port (repeatable).
    #[arg(long = "port", value_name = "N")]
    pub ports: Vec<u16>,
    /// Only TCP connections with this local or remote address, IPv4 or IPv6 (repeatable).
    #[arg(long = "host", value_name = "ADDR")]
    pub hosts: Vec<String>,
}

/// `tboxscope capture`.
#[derive(Debug, Args)]
pub struct CaptureArgs {
    /// Where to write JSON Lines: a file path, or `-` for standard output.
    #[arg(long, value_name = "PATH|-")]
    pub json: String,
    /// Stop after this long (e.g. 30s, 2m, 500ms); default: until SIGINT/SIGTERM.
    #[arg(long, value_name = "DURATION")]
    pub duration: Option<String>,
    #[command(flatten)]
    pub filter: TcpFilterArgs,
}

/// `tboxscope analyze`.
#[derive(Debug, Args)]
pub struct AnalyzeArgs {
    /// Capture files (.pcap or .pcapng); two files are two paths.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// TLS key log (SSLKEYLOGFILE format) to decrypt QUIC.
    #[arg(long, value_name = "FILE")]
    pub keylog: Option<PathBuf>,
    /// Write JSON Lines here (a path, or `-` for standard output) instead of the report.
    #[arg(long, value_name = "PATH|-")]
    pub json: Option<String>,
    /// Emit one JSON line per decoded packet.
    #[arg(long)]
    pub packets: bool,
}
