//! The command line (clap). Options are grouped per subcommand; shared groups are flattened.
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// tboxscope: watch TCP, KCP and redundant multipath QUIC on two-path (4G/5G) T-Box control
/// links — retransmissions and RTO backoff from eBPF, message copies and latency from packets.
#[derive(Debug, Parser)]
#[command(
    name = "tboxscope",
    version,
    about,
    long_about = None,
    after_help = "Without a subcommand, `sudo tboxscope` opens the live terminal UI on the paths \
                  (-i, default eth0 and eth1). No T-Box interfaces here? `sudo tboxscope lab run S2` \
                  runs the built-in two-path lab."
)]
pub struct Cli {
    /// Log level for diagnostics (error, warn, info, debug, trace); RUST_LOG overrides it.
    #[arg(long, global = true, default_value = "warn")]
    pub log_level: String,
    /// Write diagnostics to this file instead of standard error.
    #[arg(long, global = true)]
    pub log_file: Option<PathBuf>,
    #[command(flatten)]
    pub watch: WatchArgs,
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Options of the live terminal UI (`tboxscope` without a subcommand).
#[derive(Debug, Args, Clone, Default)]
pub struct WatchArgs {
    /// Interface to capture, as IFACE or IFACE=LABEL (repeatable; default eth0 and eth1).
    #[arg(short = 'i', long = "interface", value_name = "IFACE[=LABEL]")]
    pub interfaces: Vec<String>,
    /// libpcap capture filter (tcpdump syntax), e.g. `udp port 7101`.
    #[arg(long, value_name = "EXPR")]
    pub filter: Option<String>,
    /// TLS key log (SSLKEYLOGFILE format) to decrypt QUIC; re-read while it grows.
    #[arg(long, value_name = "FILE")]
    pub keylog: Option<PathBuf>,
    /// UDP port whose payloads are KCP by configuration (repeatable), as for `analyze`.
    #[arg(long = "kcp-port", value_name = "N")]
    pub kcp_ports: Vec<u16>,
    /// Which TCP connections the kernel probes report (TCP screen); all by default.
    #[command(flatten)]
    pub tcp: TcpFilterArgs,
    /// Do not load the eBPF TCP probes (packets only).
    #[arg(long)]
    pub no_tcp: bool,
    /// Kernel capture buffer of each interface (tcpdump's -B): `2MiB`, `512KiB`, `4MB`; a bare
    /// number is KiB as for tcpdump; default 2MiB. Packets the buffer cannot hold are counted
    /// as libpcap drops.
    #[arg(long = "buffer-size", value_name = "SIZE", value_parser = parse_buffer_size)]
    pub buffer_size: Option<i32>,
    /// Most flows kept at once (default 512, about 6 kB each); beyond, the least recently
    /// active flow is dropped and counted as evicted in the health figures.
    #[arg(long = "max-flows", value_name = "N", value_parser = clap::value_parser!(u32).range(16..))]
    pub max_flows: Option<u32>,
    #[command(flatten)]
    pub ids: MessageIdArgs,
    #[command(flatten)]
    pub metrics: LiveMetricsArgs,
}

/// Metrics of a live mode for Prometheus and OpenTelemetry.
#[derive(Debug, Args, Clone, Default, PartialEq)]
pub struct LiveMetricsArgs {
    /// Serve the figures at http://ADDR/metrics for Prometheus (OpenMetrics when the scraper
    /// asks for it), e.g. 127.0.0.1:9464.
    #[arg(long = "metrics-listen", value_name = "ADDR")]
    pub listen: Option<std::net::SocketAddr>,
    /// How often --otlp pushes (e.g. 10s, 1m).
    #[arg(long, value_name = "DURATION", requires = "otlp")]
    pub otlp_interval: Option<String>,
    #[command(flatten)]
    pub otlp: OtlpArgs,
}

/// Pushing the figures to an OpenTelemetry collector.
#[derive(Debug, Args, Clone, Default, PartialEq)]
pub struct OtlpArgs {
    /// Push the figures over OTLP/HTTP (protobuf) to this collector, e.g.
    /// http://127.0.0.1:4318 (`/v1/metrics` is added to a URL without a path): every
    /// --otlp-interval (default 10s) in live modes, once at the end for `analyze`.
    #[arg(long, value_name = "URL")]
    pub otlp: Option<String>,
    /// This T-Box's id: the `tbox.id` resource attribute of OTLP and a label of
    /// tboxscope_build_info.
    #[arg(long, value_name = "ID")]
    pub tbox_id: Option<String>,
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
    /// The two-path T-Box testbed in network namespaces: build it, watch it, run the field
    /// scenarios with real KCP/QUIC/TCP peers, remove it.
    Lab(LabArgs),
    /// The terminal UI over a recorded capture (JSON Lines from `capture`/`analyze --json`, or
    /// .pcap/.pcapng files decoded as they play): p play/pause, +/- speed, ←/→ seek.
    Replay(ReplayArgs),
    /// Which transport this link wants — KCP, QUIC or redundant sending on both paths — from
    /// what captures of it measured: each option's latency and bandwidth predicted, the
    /// choice with its reasons.
    Advise(AdviseArgs),
}

impl Command {
    /// The subcommand's name as typed.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Doctor(_) => "doctor",
            Command::Capture(_) => "capture",
            Command::Analyze(_) => "analyze",
            Command::Lab(_) => "lab",
            Command::Replay(_) => "replay",
            Command::Advise(_) => "advise",
        }
    }
}

/// `tboxscope lab`.
#[derive(Debug, Args)]
pub struct LabArgs {
    /// Name prefix of the lab's namespaces, so several labs can coexist.
    #[arg(long, global = true, default_value = "tbx-")]
    pub prefix: String,
    #[command(subcommand)]
    pub action: LabAction,
}

/// How the lab delays packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LabDelay {
    /// The kernel's netem where it exists, else tboxscope's delay line.
    Auto,
    /// Always tboxscope's delay line.
    Line,
}

/// What `tboxscope lab` does.
#[derive(Debug, Subcommand)]
#[expect(
    clippy::large_enum_variant,
    reason = "parsed once per process; `run` has many options"
)]
pub enum LabAction {
    /// Build the testbed (namespaces `<prefix>tbox`, `<prefix>gateway`, one per path) with a
    /// scenario's impairments; replaces an earlier instance of the same prefix.
    Up(LabUpArgs),
    /// Remove the testbed and end its delay lines (also the leftovers of a crashed run).
    Down,
    /// Show what exists: namespaces, interfaces, delay, outage switches, drop counters.
    Status {
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Switch a path's outage (drop everything, both directions) on or off by hand.
    Outage {
        /// Path: a (4G, eth0) or b (5G, eth1).
        path: String,
        /// on or off.
        state: String,
    },
    /// Bring the testbed up, run every transport together for a while, print the comparison
    /// table (latency percentiles, duplication, bandwidth amplification, loss, outage), tear down.
    Run(LabRunArgs),
    /// Internal: the delay-line process that `lab up` leaves running.
    #[command(hide = true)]
    DelayLine {
        /// Namespace to forward in.
        #[arg(long)]
        ns: String,
        /// Line settings (JSON).
        #[arg(long)]
        config: String,
    },
}

/// `tboxscope lab up`.
#[derive(Debug, Args)]
pub struct LabUpArgs {
    /// A preset (S1 mild, S2 city, S3 weak signal, S4 handover) or a scenario TOML file.
    #[arg(long, default_value = "S2")]
    pub scenario: String,
    /// How packets are delayed.
    #[arg(long, value_enum, default_value = "auto")]
    pub delay: LabDelay,
}

/// `tboxscope lab run`.
#[derive(Debug, Args)]
pub struct LabRunArgs {
    /// A preset (S1, S2, S3, S4) or a scenario TOML file.
    #[arg(default_value = "S2")]
    pub scenario: String,
    /// How long messages are sent (e.g. 20s, 2m).
    #[arg(long, default_value = "60s")]
    pub duration: String,
    /// How long connections stay open after the last message, for retransmissions; `auto` is
    /// 4 s plus twice the scenario's total outage time (transports back off during outages).
    #[arg(long, default_value = "auto")]
    pub drain: String,
    /// Write the result as JSON Lines here (a path, or `-` for standard output).
    #[arg(long, value_name = "PATH|-")]
    pub json: Option<String>,
    /// Transports to run, comma-separated: tcp, tcp-cubic, tcp-bbr, tcp-reno (the baseline with
    /// that congestion control), kcp, kcp-dual, quic, quic-redundant, mpquic
    /// (multipath QUIC, x86_64 builds), quic-stream (quic-redundant with every message back to
    /// back on one bidirectional stream per connection), or `all` (every one this build has,
    /// TCP once). By default every one this build has but quic-stream and tcp-ALG.
    #[arg(long, value_delimiter = ',')]
    pub transports: Vec<String>,
    /// Run the TCP baseline once per congestion-control algorithm named, comma-separated:
    /// cubic, bbr, reno. Each is its own connection on path A at the same time (set with
    /// TCP_CONGESTION on the T-Box's socket), a row of its own in the table (tcp-cubic, …) and
    /// a congestion-window chart of its own in the report, so they meet the same outages and
    /// loss. They share the path: under a rate limit they compete for it.
    #[arg(long, value_delimiter = ',', value_name = "ALG,…")]
    pub tcp_cc: Vec<String>,
    /// Messages per second.
    #[arg(long, default_value_t = 50.0)]
    pub rate: f64,
    /// Bytes per message (at least 32).
    #[arg(long, default_value_t = 600)]
    pub size: usize,
    /// Where the QUIC client writes its TLS key log (default /tmp/<prefix>quic-keylog.txt).
    #[arg(long, value_name = "FILE")]
    pub keylog: Option<PathBuf>,
    /// How packets are delayed.
    #[arg(long, value_enum, default_value = "auto")]
    pub delay: LabDelay,
    /// Also write tboxscope's four captures (both ends of both paths) as pcap files here, with
    /// the QUIC key log, for `tboxscope analyze`.
    #[arg(long, value_name = "DIR")]
    pub pcap: Option<PathBuf>,
    /// Do not capture with tboxscope (the table then shows the peers' ground truth only).
    #[arg(long, conflicts_with = "tui")]
    pub no_capture: bool,
    /// Also write the picture report of tboxscope's capture of the run here: `DIR/report.html`
    /// (one self-contained page: latency CDF and tail with the independent-paths prediction,
    /// timeline with outages, HOL stalls and RTO backoffs, copies won per path,
    /// amplification, the kernel's TCP congestion window, the advice) and each plot as
    /// `DIR/NAME.svg`.
    #[arg(long, value_name = "DIR", conflicts_with = "no_capture")]
    pub report: Option<PathBuf>,
    /// Watch the run live in the terminal UI (the views of `sudo tboxscope`) over the lab's
    /// captures and TCP probes; `q` ends the run early. The comparison table is printed when
    /// the UI closes.
    #[arg(long)]
    pub tui: bool,
    #[command(flatten)]
    pub metrics: LiveMetricsArgs,
}

/// `tboxscope doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Interface live mode would capture, as IFACE or IFACE=LABEL (repeatable; default eth0
    /// and eth1), checked as `sudo tboxscope -i …` checks it.
    #[arg(short = 'i', long = "interface", value_name = "IFACE[=LABEL]")]
    pub interfaces: Vec<String>,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Refuse to attach this hook, to see (and test) how tboxscope degrades (repeatable;
    /// also TBOXSCOPE_DENY_HOOK=a,b).
    #[arg(long = "deny-hook", value_name = "NAME", hide = true)]
    pub deny_hooks: Vec<String>,
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
    /// Emit an unchanged cwnd/ssthresh/srtt sample at most this often per connection (changes
    /// are always emitted).
    #[arg(long, value_name = "DURATION", default_value = "100ms")]
    pub cwnd_interval: String,
    /// Refuse to attach this hook, to see (and test) how tboxscope degrades (repeatable;
    /// also TBOXSCOPE_DENY_HOOK=a,b).
    #[arg(long = "deny-hook", value_name = "NAME", hide = true)]
    pub deny_hooks: Vec<String>,
    /// Interface to capture packets on, as IFACE or IFACE=LABEL (repeatable; default eth0
    /// and eth1, those of them that exist). Its messages, windows, outages and incidents are
    /// written as `analyze --json` writes them.
    #[arg(short = 'i', long = "interface", value_name = "IFACE[=LABEL]")]
    pub interfaces: Vec<String>,
    /// libpcap capture filter (tcpdump syntax), e.g. `udp port 7101`.
    #[arg(long = "filter", value_name = "EXPR")]
    pub pcap_filter: Option<String>,
    /// Kernel capture buffer of each interface (tcpdump's -B): `2MiB`, `512KiB`, `4MB`; a bare
    /// number is KiB as for tcpdump; default 2MiB. Packets the buffer cannot hold are counted
    /// as libpcap drops.
    #[arg(long = "buffer-size", value_name = "SIZE", value_parser = parse_buffer_size, conflicts_with = "no_packets")]
    pub buffer_size: Option<i32>,
    /// Most flows kept at once (default 512, about 6 kB each); beyond, the least recently
    /// active flow is dropped and counted as evicted in the health figures.
    #[arg(long = "max-flows", value_name = "N", value_parser = clap::value_parser!(u32).range(16..))]
    pub max_flows: Option<u32>,
    /// TLS key log (SSLKEYLOGFILE format) to decrypt QUIC; re-read while it grows.
    #[arg(long, value_name = "FILE")]
    pub keylog: Option<PathBuf>,
    /// UDP port whose payloads are KCP by configuration (repeatable), as for `analyze`.
    #[arg(long = "kcp-port", value_name = "N")]
    pub kcp_ports: Vec<u16>,
    #[command(flatten)]
    pub ids: MessageIdArgs,
    /// Do not load the eBPF TCP probes (packets only).
    #[arg(long)]
    pub no_tcp: bool,
    /// Capture no packets (the kernel's TCP view only).
    #[arg(long, conflicts_with_all = ["interfaces", "pcap_filter", "keylog", "no_tcp"])]
    pub no_packets: bool,
    /// Also write one record per decoded packet (`kcp_segment`, `quic_packet`, ...).
    #[arg(long)]
    pub packets: bool,
    /// Keep the raw packets: one pcapng file per interface in this directory (`LABEL.pcapng`),
    /// the key log embedded as it grows, so `analyze DIR/*.pcapng` decrypts alone.
    #[arg(long, value_name = "DIR", conflicts_with = "no_packets")]
    pub pcap: Option<PathBuf>,
    /// Keep only the first BYTES of each packet in the `--pcap` files, its length on the wire
    /// written beside (the live analysis still sees whole packets): `analyze` reads TCP and
    /// KCP from the headers kept. 130 keeps a KCP message's first 64 bytes behind Ethernet,
    /// IPv4 and UDP, enough to match copies sent on separate sessions; QUIC cut short
    /// cannot be decrypted.
    #[arg(long, value_name = "BYTES", requires = "pcap",
          value_parser = clap::value_parser!(u32).range(64..))]
    pub pcap_snaplen: Option<u32>,
    /// Start a new JSON Lines file and new pcapng files at this size or age: `100MB`, `1h`,
    /// or both (`100MB,1h`); the closed ones are renamed `STEM.N.EXT`.
    #[arg(long, value_name = "SIZE|AGE")]
    pub rotate: Option<String>,
    /// Closed files kept per output when rotating (the oldest are deleted).
    #[arg(long, value_name = "N", default_value_t = 10, requires = "rotate")]
    pub keep: usize,
    #[command(flatten)]
    pub metrics: LiveMetricsArgs,
}

/// How captured packets are decoded (`analyze`, `replay`).
#[derive(Debug, Args, Clone, Default)]
pub struct DecodeArgs {
    /// TLS key log (SSLKEYLOGFILE format) to decrypt QUIC; pcapng-embedded secrets are used too.
    #[arg(long, value_name = "FILE")]
    pub keylog: Option<PathBuf>,
    /// UDP port whose payloads are KCP by configuration (repeatable); KCP is also recognised
    /// without it. Needed for encrypted kcp-go, which is otherwise indistinguishable from noise.
    #[arg(long = "kcp-port", value_name = "N")]
    pub kcp_ports: Vec<u16>,
    #[command(flatten)]
    pub ids: MessageIdArgs,
}

impl MessageIdArgs {
    /// These options given before a subcommand (`tboxscope --framing F analyze …`) taken into
    /// the subcommand's own `into`; the same option given both ways with different values is
    /// an error.
    pub fn take_into(self, into: &mut MessageIdArgs, name: &str) -> anyhow::Result<()> {
        fn one<T: PartialEq + Copy>(
            before: Option<T>,
            after: &mut Option<T>,
            flag: &str,
            name: &str,
        ) -> anyhow::Result<()> {
            match (before, *after) {
                (Some(b), Some(a)) if a != b => {
                    anyhow::bail!("{flag} given twice, before and after `{name}`")
                }
                (Some(b), _) => *after = Some(b),
                (None, _) => {}
            }
            Ok(())
        }
        one(self.app_id, &mut into.app_id, "--app-id", name)?;
        one(self.framing, &mut into.framing, "--framing", name)
    }
}

impl DecodeArgs {
    /// The decoders' settings; a bad key log is an error naming its file and line.
    pub fn dissect_config(&self) -> anyhow::Result<probe_user::dissect::DissectConfig> {
        let keylog = match &self.keylog {
            Some(path) => Some(probe_user::decode::quic::Keylog::from_file(path)?),
            None => None,
        };
        Ok(probe_user::dissect::DissectConfig {
            kcp_ports: self.kcp_ports.clone(),
            unknown_udp: false,
            keylog,
            app_id: self.ids.app_id,
            framing: self.ids.framing,
        })
    }
}

/// What tells one message from another where the transport does not (live UI, `capture`,
/// `analyze`, `replay`: the same identity live and offline).
#[derive(Debug, Args, Clone, Copy, Default, PartialEq, Eq)]
pub struct MessageIdArgs {
    /// Where each message carries an application id, `OFFSET:WIDTH[:le]` (bytes; big-endian
    /// unless `le`): copies sent on separate sessions per path are matched by it (the lab's
    /// messages: `8:8:le`). Without it, separate QUIC connections or KCP sessions per path
    /// are matched by each message's content (byte-identical copies).
    #[arg(long = "app-id", value_name = "OFFSET:WIDTH[:le]", value_parser = parse_app_id)]
    pub app_id: Option<probe_user::engine::AppIdRule>,
    /// How the application cuts a QUIC stream into messages when it writes them back to back
    /// on one long-lived stream: `fixed:N` (every message N bytes), `len:u16be@K` or
    /// `len:u32le@K` (a length field at byte K of each message gives the bytes after the
    /// field; also u16le, u32be), `line` (each message ends with a newline). Messages may
    /// then span STREAM frames or share one. Without it, each STREAM frame of a bidirectional
    /// stream is a message, and a unidirectional stream is one message. Copies sent on
    /// separate connections per path are matched by stream, offset range and content. A TCP
    /// byte stream is cut by it too (its messages timed one way with both ends captured, to
    /// the cumulative ACK with the sender's alone); a capture that began after the SYN joins
    /// at the first data segment it sees, taken to start a message.
    #[arg(long = "framing", value_name = "FRAMING", value_parser = parse_framing)]
    pub framing: Option<probe_user::engine::Framing>,
}

/// `tboxscope analyze`.
#[derive(Debug, Args)]
pub struct AnalyzeArgs {
    /// Capture files (.pcap or .pcapng), merged in time order: each file (each pcapng
    /// interface) is a capture labelled by its name, a path of its own unless two captures
    /// turn out to show the two ends of one path (`t-eth0.pcap gw-g0.pcap …`). A `capture
    /// --json` recording among them (`t-eth0.pcap kernel.jsonl`) adds the kernel's TCP events,
    /// joined with the captures per connection: what the kernel resent that never reached a
    /// capture, and what a capture saw resent that the kernel did not report. Frames cut by
    /// the capture's snap length (`tcpdump -s 130`) are read from the TCP and KCP headers
    /// kept, with the lengths and wire bytes sent; KCP messages need their first 64 bytes
    /// kept to be matched across separate sessions; cut QUIC cannot be decrypted.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    #[command(flatten)]
    pub decode: DecodeArgs,
    /// Write JSON Lines here (a path, or `-` for standard output) instead of the report.
    #[arg(long, value_name = "PATH|-")]
    pub json: Option<String>,
    /// Emit one JSON line per decoded packet (to standard output unless --json names a file).
    #[arg(long)]
    pub packets: bool,
    /// With --packets, also emit a `udp_datagram` line for UDP that no decoder recognised.
    #[arg(long, requires = "packets")]
    pub unknown_udp: bool,
    /// Also write a qlog file (JSON-SEQ, `quic:packet_sent`/`quic:packet_received` with
    /// frames and multipath path ids, for qvis) per decrypted QUIC connection and capture end
    /// into this directory.
    #[arg(long, value_name = "DIR")]
    pub qlog: Option<PathBuf>,
    /// Also write the picture report here: `DIR/report.html` (one self-contained page that
    /// opens in any browser without a server: latency CDF and tail with the
    /// independent-paths prediction, timeline with outages, HOL stalls and RTO backoffs,
    /// copies won per path, amplification per flow, the TCP congestion window when a
    /// `capture --json` recording is given, the advice) and each plot as `DIR/NAME.svg`.
    #[arg(long, value_name = "DIR")]
    pub report: Option<PathBuf>,
    #[command(flatten)]
    pub timeout: TimeoutArgs,
    #[command(flatten)]
    pub stated: StatedArgs,
    /// Also write the run's figures as metrics to this file for node_exporter's textfile
    /// collector (Prometheus text format; replaced whole, never half-written).
    #[arg(long, value_name = "FILE")]
    pub metrics: Option<PathBuf>,
    #[command(flatten)]
    pub otlp: OtlpArgs,
}

/// `tboxscope advise`.
#[derive(Debug, Args)]
#[command(after_help = "\
How it decides: each path's delay (copies that went through at their first transmission; \
one-way with both ends captured, half the ACK round trip with one), its loss and its outages \
are replayed through each option's recovery rules — KCP as the seed runs it (nodelay, 10 ms \
interval, fast resend after 2, in order), QUIC per RFC 9002 (a stream per message, PTO \
doubling), redundant sending as QUIC on both paths with the first copy winning — at the \
capture's message rate and size. Then the seed's table: handovers → redundant; random loss \
under 0.5 % → KCP; 0.5–5 % → redundant where the uplink allows it, else KCP; 5–10 % → KCP \
(QUIC on a tight uplink); above 10 % or congestion loss → QUIC. An option that misses \
--sla-p99 or does not fit --uplink-kbps is never recommended.

Example: tboxscope advise t-eth0.pcap t-eth1.pcap gw-g0.pcap gw-g1.pcap --keylog keys.log \
--sla-p99 200 --uplink-kbps 500")]
pub struct AdviseArgs {
    /// Capture files (.pcap or .pcapng) of the link, as for `analyze`: both ends of both paths
    /// give one-way delays, the T-Box's alone ACK round trips.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    #[command(flatten)]
    pub decode: DecodeArgs,
    #[command(flatten)]
    pub timeout: TimeoutArgs,
    #[command(flatten)]
    pub stated: StatedArgs,
    /// The largest acceptable P99 message latency, in milliseconds.
    #[arg(long = "sla-p99", value_name = "MS")]
    pub sla_p99_ms: Option<f64>,
    /// The uplink's capacity in kbit/s: an option whose copies would not fit is ruled out.
    #[arg(long = "uplink-kbps", value_name = "N")]
    pub uplink_kbps: Option<f64>,
    /// Write the `advice` record as a JSON line here (a path, or `-` for standard output)
    /// instead of the report.
    #[arg(long, value_name = "PATH|-")]
    pub json: Option<String>,
}

/// How long messages wait for their copies (`analyze`, `replay`).
#[derive(Debug, Args, Clone, Default)]
pub struct TimeoutArgs {
    /// Seconds a message waits for its copies on other paths before it is closed (a copy held
    /// back through an outage longer than this counts as not carried) [default: 5].
    #[arg(long = "message-timeout", value_name = "SECONDS")]
    pub message_timeout_s: Option<f64>,
}

impl TimeoutArgs {
    /// The message timeout in nanoseconds (5 s unless given); outside (0, 3600] s is an error.
    pub fn message_timeout_ns(&self) -> anyhow::Result<u64> {
        let secs = self.message_timeout_s.unwrap_or(5.0);
        if !(secs > 0.0 && secs <= 3600.0) {
            anyhow::bail!("--message-timeout must be within (0, 3600] seconds");
        }
        Ok((secs * 1e9) as u64)
    }
}

/// The engine's settings for capture files (`analyze`, `replay`): the matching and timeout
/// options and the statements' mode overrides; files may come from both ends of a path, so
/// messages wait for captures to pair.
pub fn files_engine_config(
    decode: &DecodeArgs,
    timeout: &TimeoutArgs,
    stated: &StatedArgs,
) -> anyhow::Result<probe_user::engine::Config> {
    Ok(probe_user::engine::Config {
        app_id: decode.ids.app_id,
        message_timeout_ns: timeout.message_timeout_ns()?,
        mode_overrides: stated.modes.clone(),
        await_pairing: true,
        ..probe_user::engine::Config::default()
    })
}

/// What the user states instead of what tboxscope infers from the traffic. Captures are named
/// by their path label, as the report's first lines name them (a pcap file's name without
/// its extension, a pcapng interface's name).
#[derive(Debug, Args, Clone, Default)]
pub struct StatedArgs {
    /// Two captures that show the same path at its two ends, `LABEL=LABEL` (repeatable);
    /// otherwise inferred from copies seen at both.
    #[arg(long = "pair", value_name = "LABEL=LABEL", value_parser = parse_pair)]
    pub pairs: Vec<(String, String)>,
    /// The host a capture was taken on, `LABEL=tbox` or `LABEL=gateway` (repeatable);
    /// otherwise inferred from which end saw client-to-server copies first; a capture not
    /// (yet) paired with its far end is placed at a connection's end by its packets' TTLs (one
    /// side's leave at 64, 128 or 255, the other's arrive lower) or a TCP handshake it saw
    /// whole (at the server's end: the gateway; each capture by its own), else taken to be the
    /// T-Box's (the client's end).
    #[arg(long = "host", value_name = "LABEL=tbox|gateway", value_parser = parse_host)]
    pub hosts: Vec<(String, probe_user::engine::Host)>,
    /// A capture's clock offset, `LABEL=MS`: milliseconds added to its timestamps to bring
    /// them onto the T-Box's clock (repeatable; e.g. `gw-g0=-12.5`); otherwise estimated from
    /// copies and ACKs seen at both ends, in both directions.
    #[arg(
        long = "clock-offset",
        value_name = "LABEL=MS",
        allow_hyphen_values = true,
        value_parser = parse_clock_offset
    )]
    pub clock_offsets: Vec<(String, i64)>,
    /// The matching mode of the flows a selector picks, `SELECTOR=MODE` (repeatable): SELECTOR
    /// `port:N`, `conv:N` (KCP) or `conn:LABEL` (QUIC, as the report names it); MODE
    /// `datagram`, `kcp-sn`, `quic-stream`, `content` or `app-id`; otherwise chosen per flow.
    #[arg(long = "match", value_name = "SELECTOR=MODE", value_parser = parse_mode_override)]
    pub modes: Vec<probe_user::engine::ModeOverride>,
}

impl StatedArgs {
    /// The statements per capture label, for [`probe_user::correlate::Correlator::state`].
    pub fn captures(&self) -> Vec<(String, probe_user::correlate::CaptureHint)> {
        use probe_user::correlate::CaptureHint;
        let pairs = self.pairs.iter().map(|(a, b)| {
            let hint = CaptureHint {
                pair_with: Some(b.clone()),
                ..CaptureHint::default()
            };
            (a.clone(), hint)
        });
        let hosts = self.hosts.iter().map(|(l, h)| {
            let hint = CaptureHint {
                host: Some(*h),
                ..CaptureHint::default()
            };
            (l.clone(), hint)
        });
        let offsets = self.clock_offsets.iter().map(|(l, ns)| {
            let hint = CaptureHint {
                clock_offset_ns: Some(*ns),
                ..CaptureHint::default()
            };
            (l.clone(), hint)
        });
        pairs.chain(hosts).chain(offsets).collect()
    }
}

/// Splits `LABEL=VALUE` (the label must not be empty).
fn label_and_value(s: &str) -> Result<(String, &str), String> {
    match s.rsplit_once('=') {
        Some((l, v)) if !l.is_empty() => Ok((l.to_owned(), v)),
        _ => Err(format!("expected LABEL=VALUE, got {s:?}")),
    }
}

/// Parses `LABEL=LABEL`.
fn parse_pair(s: &str) -> Result<(String, String), String> {
    let (a, b) = label_and_value(s)?;
    if b.is_empty() || a == b {
        return Err(format!(
            "expected two different labels LABEL=LABEL, got {s:?}"
        ));
    }
    Ok((a, b.to_owned()))
}

/// Parses `LABEL=tbox|gateway`.
fn parse_host(s: &str) -> Result<(String, probe_user::engine::Host), String> {
    use probe_user::engine::Host;
    let (l, v) = label_and_value(s)?;
    let host = match v {
        "tbox" | "t-box" => Host::Tbox,
        "gateway" | "gw" => Host::Gateway,
        _ => return Err(format!("host must be tbox or gateway, got {v:?}")),
    };
    Ok((l, host))
}

/// Parses `LABEL=MS` (signed milliseconds, fractions allowed) into nanoseconds.
fn parse_clock_offset(s: &str) -> Result<(String, i64), String> {
    let (l, v) = label_and_value(s)?;
    let ms: f64 = v
        .trim_start_matches('+')
        .parse()
        .map_err(|_| format!("offset must be milliseconds, got {v:?}"))?;
    if !ms.is_finite() || ms.abs() > 86_400_000.0 {
        return Err(format!("offset must be within a day, got {v:?}"));
    }
    Ok((l, (ms * 1e6).round() as i64))
}

/// Parses `port:N=MODE`, `conv:N=MODE` or `conn:LABEL=MODE`.
fn parse_mode_override(s: &str) -> Result<probe_user::engine::ModeOverride, String> {
    use probe_user::engine::{FlowSelector, MatchMode, ModeOverride};
    let (sel, mode) = label_and_value(s)?;
    let mode = MatchMode::ALL
        .into_iter()
        .find(|m| m.name() == mode)
        .ok_or_else(|| {
            let names: Vec<&str> = MatchMode::ALL.iter().map(|m| m.name()).collect();
            format!("mode must be one of {}, got {mode:?}", names.join(", "))
        })?;
    let bad = || format!("selector must be port:N, conv:N or conn:LABEL, got {sel:?}");
    let (kind, value) = sel.split_once(':').ok_or_else(bad)?;
    let selector = match kind {
        "port" => FlowSelector {
            port: Some(value.parse().map_err(|_| bad())?),
            ..FlowSelector::default()
        },
        "conv" => FlowSelector {
            conv: Some(value.parse().map_err(|_| bad())?),
            ..FlowSelector::default()
        },
        "conn" if !value.is_empty() => FlowSelector {
            conn: Some(value.to_owned()),
            ..FlowSelector::default()
        },
        _ => return Err(bad()),
    };
    Ok(ModeOverride { selector, mode })
}

/// `tboxscope replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The recording: one JSON Lines file written by tboxscope (`capture`, `analyze --json`),
    /// or packet captures (.pcap/.pcapng; several files are several paths, merged in time).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    #[command(flatten)]
    pub decode: DecodeArgs,
    #[command(flatten)]
    pub timeout: TimeoutArgs,
    #[command(flatten)]
    pub stated: StatedArgs,
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

impl ReplayArgs {
    /// The options given that apply to packet captures only (decoding, matching, statements
    /// about captures), by flag name.
    pub fn packet_only_flags(&self) -> Vec<&'static str> {
        let (d, s) = (&self.decode, &self.stated);
        [
            ("--keylog", d.keylog.is_some()),
            ("--kcp-port", !d.kcp_ports.is_empty()),
            ("--app-id", d.ids.app_id.is_some()),
            ("--framing", d.ids.framing.is_some()),
            (
                "--message-timeout",
                self.timeout.message_timeout_s.is_some(),
            ),
            ("--pair", !s.pairs.is_empty()),
            ("--host", !s.hosts.is_empty()),
            ("--clock-offset", !s.clock_offsets.is_empty()),
            ("--match", !s.modes.is_empty()),
        ]
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect()
    }
}

/// The default `--buffer-size`: tcpdump's default, several seconds of a T-Box's traffic
/// (two paths at 100 packets/s of ≤ 1.5 kB are 300 kB/s), where the 32 MiB libpcap rings used
/// before held 64 MiB for two interfaces, over the T-Box's whole memory budget.
pub const DEFAULT_BUFFER_SIZE: i32 = 2 << 20;

/// The default `--max-flows` of the live modes, which run for days: flows come and go as a
/// T-Box reconnects, and each kept flow holds about 6 kB (measured in the soak benchmark;
/// 512 of them about 3 MB, within a T-Box's budget). `analyze` and `replay` keep the engine's
/// own bound.
pub const LIVE_MAX_FLOWS: u32 = 512;

/// The flow bound of a live mode: `--max-flows` or [`LIVE_MAX_FLOWS`].
#[must_use]
pub fn live_max_flows(given: Option<u32>) -> usize {
    usize::try_from(given.unwrap_or(LIVE_MAX_FLOWS)).unwrap_or(usize::MAX)
}

/// Parses a `--buffer-size`: B, kB, MB (powers of 1000), KiB, MiB, or a bare number of KiB
/// (tcpdump's -B); 64 KiB to 1 GiB.
pub fn parse_buffer_size(s: &str) -> Result<i32, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("expected a size such as 2MiB or 4096 (KiB), got {s:?}"))?;
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "kib" | "k" => 1024,
        "b" => 1,
        "kb" => 1000,
        "mb" => 1_000_000,
        "mib" | "m" => 1 << 20,
        other => {
            return Err(format!(
                "unknown size unit {other:?} in {s:?} (B, kB, MB, KiB, MiB)"
            ))
        }
    };
    n.checked_mul(scale)
        .filter(|b| (64 << 10..=1 << 30).contains(b))
        .and_then(|b| i32::try_from(b).ok())
        .ok_or_else(|| format!("--buffer-size {s:?} out of range (64 KiB to 1 GiB)"))
}

/// Parses `--framing` (`fixed:N`, `len:u16be@K`, `len:u32le@K`, `line`, ...).
fn parse_framing(s: &str) -> Result<probe_user::engine::Framing, String> {
    s.parse()
        .map_err(|e: probe_user::engine::FramingError| e.to_string())
}

/// Parses `OFFSET:WIDTH[:le]`.
fn parse_app_id(s: &str) -> Result<probe_user::engine::AppIdRule, String> {
    let mut parts = s.split(':');
    let bad = || format!("expected OFFSET:WIDTH[:le], got {s:?}");
    let offset: usize = parts.next().and_then(|v| v.parse().ok()).ok_or_else(bad)?;
    let width: usize = parts.next().and_then(|v| v.parse().ok()).ok_or_else(bad)?;
    let little_endian = match parts.next() {
        None | Some("be") => false,
        Some("le") => true,
        Some(_) => return Err(bad()),
    };
    if parts.next().is_some() {
        return Err(bad());
    }
    if !(1..=8).contains(&width) {
        return Err(format!(
            "the id's WIDTH must be 1 to 8 bytes (an integer of up to 64 bits), got {width} in {s:?}"
        ));
    }
    Ok(probe_user::engine::AppIdRule {
        offset,
        width,
        little_endian,
    })
}

/// Refuses a file named twice (the same file by any path): it would be taken for two captures
/// of the same traffic, i.e. the two ends of one path.
pub fn refuse_repeated_files(files: &[PathBuf]) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let mut seen: Vec<((u64, u64), &PathBuf)> = Vec::new();
    for f in files {
        // A file that cannot be read is reported by the reader, with its own reason.
        let Ok(meta) = std::fs::metadata(f) else {
            continue;
        };
        let id = (meta.dev(), meta.ino());
        if let Some((_, first)) = seen.iter().find(|(i, _)| *i == id) {
            anyhow::bail!(
                "{} and {} are the same file: each capture is given once (two captures of one \
                 path are two files, e.g. one taken at each end)",
                first.display(),
                f.display()
            );
        }
        seen.push((id, f));
    }
    Ok(())
}

#[cfg(test)]
mod buffer_size_tests {
    use super::parse_buffer_size;

    #[test]
    fn buffer_sizes_read_as_tcpdump_and_with_units() {
        assert_eq!(parse_buffer_size("2MiB"), Ok(2 << 20));
        assert_eq!(parse_buffer_size("4096"), Ok(4 << 20));
        assert_eq!(parse_buffer_size("512KiB"), Ok(512 << 10));
        assert_eq!(parse_buffer_size("4MB"), Ok(4_000_000));
        for bad in ["", "2 parsecs", "1kB", "4096MiB", "-1"] {
            assert!(parse_buffer_size(bad).is_err(), "{bad}");
        }
    }
}
