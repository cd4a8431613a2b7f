//! Real traffic peers (implementations nobody here wrote: kernel TCP, `tokio_kcp`, `quinn`)
//! sending the control-signal profile from the T-Box namespace to the gateway namespace, and
//! receivers there that keep the ground truth (first copy wins).
//!
//! All transports run *together* in one run: they then meet exactly the same network
//! conditions at the same moments (the same outage window, the same loss regime) and a run
//! takes its duration once, not five times. The per-transport wire bytes still separate, since
//! each transport has its own port and the lab counts bytes per port (nftables counters).
//!
//! Redundant transports: `kcp-dual` runs two independent KCP sessions (conv ids), one per path,
//! and sends every message on both; `quic-redundant` runs one quinn connection per path (quinn
//! has no multipath) and sends every message on both. The receiver keeps the first copy.
//! `mpquic` is the seed's own design: ONE multipath QUIC connection (tquic, draft-05, Redundant
//! scheduler) over both paths; its receiver drops second copies by stream offsets.
//! QUIC sends one unidirectional stream per message (no head-of-line blocking between
//! messages); TCP and KCP carry messages back to back on one connection/session.
//! `quic-stream` (not in the default set: `lab run --transports quic-stream`) is
//! `quic-redundant` as most QUIC applications send a message stream: the same bytes back to
//! back on ONE bidirectional stream per connection (message i at the same offset on both).
pub mod kcp;
pub mod message;
#[cfg(all(feature = "mpquic", target_arch = "x86_64"))]
pub mod mpquic;
pub mod quic;
pub mod tcp;
pub mod truth;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::mpsc;

use crate::error::{LabError, Result};
use crate::names::{LabNames, PathId};
use crate::sys;
pub use message::Message;
pub use truth::GroundTruth;

/// The congestion-control algorithm of the lab's TCP baseline: the kernel's default, or one
/// set on the socket (`TCP_CONGESTION`) for `lab run --tcp-cc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum TcpCc {
    /// The namespace's default (`net.ipv4.tcp_congestion_control`).
    Default,
    /// Reno.
    Reno,
    /// CUBIC.
    Cubic,
    /// BBR.
    Bbr,
}

impl TcpCc {
    /// The algorithms `--tcp-cc` takes, in table order.
    pub const SET: [TcpCc; 3] = [TcpCc::Cubic, TcpCc::Bbr, TcpCc::Reno];

    /// The kernel's name (`None` for the default).
    pub fn kernel_name(self) -> Option<&'static str> {
        match self {
            TcpCc::Default => None,
            TcpCc::Reno => Some("reno"),
            TcpCc::Cubic => Some("cubic"),
            TcpCc::Bbr => Some("bbr"),
        }
    }

    /// Parses a kernel name of [`TcpCc::SET`].
    pub fn parse(s: &str) -> Option<TcpCc> {
        Self::SET.into_iter().find(|c| c.kernel_name() == Some(s))
    }
}

/// The transports the lab compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Transport {
    /// Kernel TCP on path A (baseline), with the kernel's default congestion control or the
    /// one named.
    Tcp(TcpCc),
    /// KCP (tokio_kcp; nodelay=1, interval=10, resend=2, nc=1) on path A.
    Kcp,
    /// The same messages on two KCP sessions, one per path.
    KcpDual,
    /// QUIC (quinn) on path A.
    Quic,
    /// The same messages on two QUIC connections, one per path.
    QuicRedundant,
    /// One multipath QUIC connection (tquic, Redundant scheduler) over both paths.
    Mpquic,
    /// The same byte stream on one bidirectional stream of each of two QUIC connections, one
    /// per path.
    QuicStream,
}

/// Whether this build has the `mpquic` peer (tquic: the `mpquic` feature, on x86_64).
pub const HAS_MPQUIC: bool = cfg!(all(feature = "mpquic", target_arch = "x86_64"));

impl Transport {
    /// Every transport, in table order.
    pub const ALL: [Transport; 10] = [
        Transport::Tcp(TcpCc::Default),
        Transport::Tcp(TcpCc::Cubic),
        Transport::Tcp(TcpCc::Bbr),
        Transport::Tcp(TcpCc::Reno),
        Transport::Kcp,
        Transport::KcpDual,
        Transport::Quic,
        Transport::QuicRedundant,
        Transport::Mpquic,
        Transport::QuicStream,
    ];

    /// The transports this build can run ([`Transport::ALL`] less `mpquic` without tquic).
    pub fn available() -> Vec<Transport> {
        Self::ALL
            .into_iter()
            .filter(|t| HAS_MPQUIC || *t != Transport::Mpquic)
            .collect()
    }

    /// The transports a run compares unless told otherwise: every available one but
    /// `quic-stream` and TCP with a named algorithm, which run only when asked for.
    pub fn defaults() -> Vec<Transport> {
        Self::available()
            .into_iter()
            .filter(|t| {
                !matches!(
                    t,
                    Transport::QuicStream | Transport::Tcp(TcpCc::Reno | TcpCc::Cubic | TcpCc::Bbr)
                )
            })
            .collect()
    }

    /// Whether it is the kernel TCP baseline (any algorithm).
    pub fn is_tcp(self) -> bool {
        matches!(self, Transport::Tcp(_))
    }

    /// Name on the command line and in tables.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Tcp(TcpCc::Default) => "tcp",
            Transport::Tcp(TcpCc::Cubic) => "tcp-cubic",
            Transport::Tcp(TcpCc::Bbr) => "tcp-bbr",
            Transport::Tcp(TcpCc::Reno) => "tcp-reno",
            Transport::Kcp => "kcp",
            Transport::KcpDual => "kcp-dual",
            Transport::Quic => "quic",
            Transport::QuicRedundant => "quic-redundant",
            Transport::Mpquic => "mpquic",
            Transport::QuicStream => "quic-stream",
        }
    }

    /// Parses a name given by [`Transport::name`].
    pub fn parse(s: &str) -> Option<Transport> {
        Self::ALL.into_iter().find(|t| t.name() == s)
    }

    /// Position in [`Transport::ALL`] (also the transport byte in messages).
    pub fn index(self) -> usize {
        Self::ALL.iter().position(|t| *t == self).unwrap_or(0)
    }

    /// Gateway port (the same on both paths).
    pub fn port(self) -> u16 {
        match self {
            Transport::Tcp(TcpCc::Default) => 7001,
            Transport::Tcp(TcpCc::Cubic) => 7002,
            Transport::Tcp(TcpCc::Bbr) => 7003,
            Transport::Tcp(TcpCc::Reno) => 7004,
            Transport::Kcp => 7101,
            Transport::KcpDual => 7201,
            Transport::Quic => 7301,
            Transport::QuicRedundant => 7401,
            Transport::Mpquic => 7501,
            Transport::QuicStream => 7601,
        }
    }

    /// Whether it runs over UDP.
    pub fn is_udp(self) -> bool {
        !self.is_tcp()
    }

    /// The paths every message is sent on.
    pub fn paths(self) -> &'static [PathId] {
        match self {
            Transport::KcpDual
            | Transport::QuicRedundant
            | Transport::Mpquic
            | Transport::QuicStream => &PathId::BOTH,
            _ => &[PathId::A],
        }
    }

    /// The paths on which a session of its own is opened: one per path, but for `mpquic`,
    /// whose one connection starts on path A and adds path B itself.
    pub fn sessions(self) -> &'static [PathId] {
        match self {
            Transport::Mpquic => &[PathId::A],
            t => t.paths(),
        }
    }

    /// Whether it sends each message on both paths.
    pub fn is_redundant(self) -> bool {
        self.paths().len() > 1
    }

    fn gateway(self, path: PathId) -> SocketAddr {
        SocketAddr::from((path.gateway_addr(), self.port()))
    }
}

/// The traffic profile: how often and how big.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Profile {
    /// Messages per second.
    pub rate_hz: f64,
    /// Bytes per message (at least the 32-byte header).
    pub size: usize,
}

impl Default for Profile {
    fn default() -> Self {
        Profile {
            rate_hz: 50.0,
            size: 600,
        }
    }
}

/// Running gateway-side receivers; stopped on drop.
#[derive(Debug)]
pub struct Receivers {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    handle: Option<std::thread::JoinHandle<Result<()>>>,
}

impl Receivers {
    /// Starts receivers for `transports` in the gateway namespace; returns when all listen.
    pub fn start(
        names: &LabNames,
        transports: &[Transport],
        truth: GroundTruth,
    ) -> Result<Receivers> {
        let ns = names.gateway_ns();
        let transports = transports.to_vec();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<()>>();
        let handle = std::thread::Builder::new()
            .name("lab-gateway".into())
            .spawn(move || -> Result<()> {
                let setup = || -> Result<tokio::runtime::Runtime> {
                    sys::enter_netns(&ns)?;
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| LabError::io("gateway runtime", e))
                };
                let rt = match setup() {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(LabError::Config(e.to_string())));
                        return Err(e);
                    }
                };
                rt.block_on(async move {
                    let mut started = Ok(());
                    for t in transports {
                        for &p in t.sessions() {
                            let r = match t {
                                Transport::Tcp(_) => tcp::listen(t, p, truth.clone()).await,
                                Transport::Kcp | Transport::KcpDual => {
                                    kcp::listen(t, p, truth.clone()).await
                                }
                                Transport::Quic
                                | Transport::QuicRedundant
                                | Transport::QuicStream => quic::listen(t, p, truth.clone()).await,
                                Transport::Mpquic => listen_mpquic(&ns, truth.clone()).await,
                            };
                            if let Err(e) = r {
                                started = Err(e);
                            }
                        }
                    }
                    let failed = started.is_err();
                    let _ = ready_tx.send(started);
                    if !failed {
                        let _ = stop_rx.await;
                    }
                });
                Ok(())
            })
            .map_err(|e| LabError::io("spawn the gateway thread", e))?;
        let me = Receivers {
            stop: Some(stop_tx),
            handle: Some(handle),
        };
        ready_rx
            .recv()
            .map_err(|_| LabError::Config("gateway thread ended early".into()))??;
        Ok(me)
    }

    /// Stops the receivers (closing their sockets).
    pub fn stop(mut self) -> Result<()> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Result<()> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(h) = self.handle.take() {
            h.join()
                .map_err(|_| LabError::Config("gateway thread panicked".into()))??;
        }
        Ok(())
    }
}

impl Drop for Receivers {
    fn drop(&mut self) {
        if let Err(e) = self.stop_inner() {
            log::warn!("receivers: {e}");
        }
    }
}

/// What the T-Box side did.
#[derive(Debug, Clone, Serialize)]
pub struct SendReport {
    /// CLOCK_MONOTONIC ns when the first message was generated.
    pub start_mono_ns: u64,
    /// CLOCK_REALTIME ns at the same moment.
    pub start_unix_ns: u64,
    /// Messages generated per transport.
    pub generated: u64,
    /// Connection errors per transport (name, error), if any.
    pub errors: Vec<(String, String)>,
}

/// Options of [`run_senders`].
#[derive(Debug, Clone)]
pub struct SendOptions {
    /// The profile.
    pub profile: Profile,
    /// How long messages are generated.
    pub duration: Duration,
    /// How long connections stay open after the last message (retransmissions finish).
    pub drain: Duration,
    /// Where the QUIC client writes its TLS key log.
    pub keylog: PathBuf,
    /// Set to stop generating (and draining) early.
    pub stop: Arc<AtomicBool>,
}

/// How often a stop request is looked at while waiting.
const STOP_POLL: Duration = Duration::from_millis(20);

/// Sleeps `d`, or less when `stop` is set; true when stopped.
async fn sleep_unless_stopped(d: Duration, stop: &AtomicBool) -> bool {
    let end = tokio::time::Instant::now() + d;
    while tokio::time::Instant::now() < end {
        if stop.load(Ordering::Relaxed) {
            return true;
        }
        tokio::time::sleep(STOP_POLL.min(end - tokio::time::Instant::now())).await;
    }
    stop.load(Ordering::Relaxed)
}

/// Connects every transport from the T-Box namespace, generates the profile for `duration`,
/// keeps connections open for `drain`, then closes them. `started` receives the start time
/// (monotonic ns) as soon as generation begins (the run's timeline hangs on it).
pub fn run_senders(
    names: &LabNames,
    transports: &[Transport],
    opts: &SendOptions,
    truth: GroundTruth,
    started: std::sync::mpsc::Sender<u64>,
) -> Result<SendReport> {
    let ns = names.tbox_ns();
    let transports = transports.to_vec();
    let opts = opts.clone();
    std::thread::Builder::new()
        .name("lab-tbox".into())
        .spawn(move || -> Result<SendReport> {
            sys::enter_netns(&ns)?;
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| LabError::io("T-Box runtime", e))?;
            rt.block_on(send_all(transports, opts, truth, started))
        })
        .map_err(|e| LabError::io("spawn the T-Box thread", e))?
        .join()
        .map_err(|_| LabError::Config("T-Box thread panicked".into()))?
}

type Queue = mpsc::UnboundedSender<Vec<u8>>;

async fn send_all(
    transports: Vec<Transport>,
    opts: SendOptions,
    truth: GroundTruth,
    started: std::sync::mpsc::Sender<u64>,
) -> Result<SendReport> {
    let mut queues: Vec<(Transport, PathId, Queue)> = Vec::new();
    let mut errors = Vec::new();
    let mut tasks = Vec::new();
    for &t in &transports {
        for &p in t.sessions() {
            let (tx, rx) = mpsc::unbounded_channel();
            let r = match t {
                Transport::Tcp(cc) => tcp::connect(t, p, cc)
                    .await
                    .map(|c| tokio::spawn(tcp::pump(c, rx))),
                Transport::Kcp | Transport::KcpDual => kcp::connect(t, p)
                    .await
                    .map(|c| tokio::spawn(kcp::pump(c, rx))),
                Transport::Quic | Transport::QuicRedundant => quic::connect(t, p, &opts.keylog)
                    .await
                    .map(|c| tokio::spawn(quic::pump(c, rx))),
                Transport::QuicStream => quic::connect(t, p, &opts.keylog)
                    .await
                    .map(|c| tokio::spawn(quic::pump_stream(c, rx))),
                Transport::Mpquic => connect_mpquic(&opts.keylog, rx).await,
            };
            match r {
                Ok(task) => {
                    tasks.push((t, p, task));
                    queues.push((t, p, tx));
                }
                Err(e) => errors.push((format!("{} path {:?}", t.name(), p), e.to_string())),
            }
        }
    }
    let gap = Duration::from_secs_f64(1.0 / opts.profile.rate_hz.max(0.001));
    let count = (opts.duration.as_secs_f64() * opts.profile.rate_hz).round() as u64;
    let start_mono = sys::mono_ns();
    let start_unix = sys::unix_ns();
    let _ = started.send(start_mono);
    let mut ticker = tokio::time::interval(gap);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let size = u16::try_from(opts.profile.size.max(message::HEADER_LEN)).unwrap_or(u16::MAX);
    let mut generated = 0;
    for id in 0..count {
        if opts.stop.load(Ordering::Relaxed) {
            break;
        }
        ticker.tick().await;
        generated += 1;
        let (mono, unix) = (sys::mono_ns(), sys::unix_ns());
        for &t in &transports {
            truth.sent(t.index(), id, mono);
        }
        for (t, p, q) in &queues {
            let m = Message {
                transport: t.index() as u8,
                // One byte stream duplicated on both paths: the same bytes on each.
                path: u8::from(*p == PathId::B && *t != Transport::QuicStream),
                len: size,
                id,
                send_unix_ns: unix,
                send_mono_ns: mono,
            };
            let _ = q.send(m.encode());
        }
    }
    drop(queues);
    sleep_unless_stopped(opts.drain, &opts.stop).await;
    for (t, p, task) in tasks {
        if task.is_finished() {
            if let Ok(Err(e)) = task.await {
                errors.push((format!("{} path {:?}", t.name(), p), e.to_string()));
            }
        } else {
            task.abort();
        }
    }
    Ok(SendReport {
        start_mono_ns: start_mono,
        start_unix_ns: start_unix,
        generated,
        errors,
    })
}

/// Starts the `mpquic` receiver in the gateway namespace `ns`.
#[cfg(all(feature = "mpquic", target_arch = "x86_64"))]
async fn listen_mpquic(ns: &str, truth: GroundTruth) -> Result<()> {
    mpquic::listen(ns.to_string(), truth).await
}

/// Without tquic in this build, `mpquic` cannot run.
#[cfg(not(all(feature = "mpquic", target_arch = "x86_64")))]
async fn listen_mpquic(_ns: &str, _truth: GroundTruth) -> Result<()> {
    Err(no_mpquic())
}

/// Connects the `mpquic` sender (in the T-Box namespace this thread is in).
#[cfg(all(feature = "mpquic", target_arch = "x86_64"))]
async fn connect_mpquic(
    keylog: &std::path::Path,
    rx: mpsc::UnboundedReceiver<Vec<u8>>,
) -> Result<tokio::task::JoinHandle<Result<()>>> {
    mpquic::connect(keylog, rx).await
}

/// Without tquic in this build, `mpquic` cannot run.
#[cfg(not(all(feature = "mpquic", target_arch = "x86_64")))]
async fn connect_mpquic(
    _keylog: &std::path::Path,
    _rx: mpsc::UnboundedReceiver<Vec<u8>>,
) -> Result<tokio::task::JoinHandle<Result<()>>> {
    Err(no_mpquic())
}

#[cfg(not(all(feature = "mpquic", target_arch = "x86_64")))]
fn no_mpquic() -> LabError {
    LabError::peer(
        Transport::Mpquic.name(),
        "not in this build (tquic: the lab's `mpquic` feature, x86_64 only)",
    )
}

/// Decodes a received message and records it in the ground truth.
fn record(truth: &GroundTruth, t: Transport, path: PathId, bytes: &[u8]) {
    let now = sys::mono_ns();
    match Message::decode(bytes) {
        Ok(m) if usize::from(m.transport) == t.index() => truth.arrived(t.index(), m.id, path, now),
        _ => truth.rejected(t.index()),
    }
}
