//! One-way delay probes: timestamped UDP datagrams from the T-Box to the gateway (or back) on
//! one path, to measure what the path really does (delay distribution, loss).
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use serde::Serialize;

use crate::error::{LabError, Result};
use crate::names::{LabNames, PathId};
use crate::sys;

/// Which way the probes travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// T-Box → gateway.
    Up,
    /// Gateway → T-Box.
    Down,
}

/// What a probe run measured.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeResult {
    /// Probes sent.
    pub sent: u64,
    /// One-way delays of the probes that arrived, nanoseconds, in arrival order.
    pub delays_ns: Vec<u64>,
}

/// Summary statistics of a set of delays, in milliseconds.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct DelaySummary {
    /// Number of samples.
    pub n: usize,
    /// Mean.
    pub mean_ms: f64,
    /// Standard deviation.
    pub sd_ms: f64,
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
}

/// Percentile `q` (0..=1) of sorted values (nearest rank).
pub fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

impl DelaySummary {
    /// Summarises delays given in nanoseconds.
    pub fn of(delays_ns: &[u64]) -> Self {
        let n = delays_ns.len();
        let mut sorted = delays_ns.to_vec();
        sorted.sort_unstable();
        let mean = sorted.iter().map(|d| *d as f64).sum::<f64>() / n.max(1) as f64;
        let var = sorted
            .iter()
            .map(|d| (*d as f64 - mean).powi(2))
            .sum::<f64>()
            / n.max(1) as f64;
        let ms = |ns: u64| ns as f64 / 1e6;
        DelaySummary {
            n,
            mean_ms: mean / 1e6,
            sd_ms: var.sqrt() / 1e6,
            p50_ms: ms(percentile(&sorted, 0.5)),
            p99_ms: ms(percentile(&sorted, 0.99)),
            p999_ms: ms(percentile(&sorted, 0.999)),
        }
    }
}

/// Sends `count` probes of `size` bytes at `rate_pps` over `path` in `dir`, waits `drain` for
/// the last ones, and returns the one-way delays (CLOCK_MONOTONIC is shared by the namespaces).
pub fn probe_path(
    names: &LabNames,
    path: PathId,
    dir: Direction,
    count: u64,
    rate_pps: u64,
    size: usize,
    drain: Duration,
) -> Result<ProbeResult> {
    let port = 9000;
    let (rx_ns, rx_addr, tx_ns) = match dir {
        Direction::Up => (names.gateway_ns(), path.gateway_addr(), names.tbox_ns()),
        Direction::Down => (names.tbox_ns(), path.tbox_addr(), names.gateway_ns()),
    };
    let dst = SocketAddr::from((rx_addr, port));
    let size = size.max(24);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let send_time = Duration::from_nanos(count.saturating_mul(1_000_000_000) / rate_pps.max(1));
    let deadline = send_time + drain;
    let receiver = std::thread::spawn(move || -> Result<Vec<u64>> {
        sys::enter_netns(&rx_ns)?;
        let sock = UdpSocket::bind(dst).map_err(|e| LabError::io("bind probe receiver", e))?;
        sys::enable_rx_timestamps(std::os::fd::AsRawFd::as_raw_fd(&sock))?;
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .map_err(|e| LabError::io("probe timeout", e))?;
        let _ = ready_tx.send(());
        let start = sys::mono_ns();
        let end = start.saturating_add(deadline.as_nanos() as u64 + 200_000_000);
        let mut delays = Vec::new();
        let mut buf = vec![0u8; 65536];
        while sys::mono_ns() < end && (delays.len() as u64) < count {
            let fd = std::os::fd::AsRawFd::as_raw_fd(&sock);
            if let Ok(Some((n, stamp))) = sys::recv_timestamped(fd, &mut buf, 0) {
                // Kernel receive time (CLOCK_REALTIME) against the sender's realtime stamp;
                // without a kernel stamp, this thread's monotonic clock against the sender's.
                let (sent_at, now) = match stamp {
                    Some(rt) => (buf.get(16..24), rt),
                    None => (buf.get(8..16), sys::mono_ns()),
                };
                if let Some(ts) = sent_at.filter(|_| n >= 24) {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(ts);
                    delays.push(now.saturating_sub(u64::from_le_bytes(b)));
                }
            }
        }
        Ok(delays)
    });
    ready_rx
        .recv()
        .map_err(|_| LabError::Config("probe receiver failed to start".into()))?;
    let sender = std::thread::spawn(move || -> Result<u64> {
        sys::enter_netns(&tx_ns)?;
        sys::fine_timer_slack();
        let sock =
            UdpSocket::bind("0.0.0.0:0").map_err(|e| LabError::io("bind probe sender", e))?;
        let mut payload = vec![0u8; size];
        let gap = 1_000_000_000 / rate_pps.max(1);
        let start = sys::mono_ns();
        let mut sent = 0;
        for i in 0..count {
            let due = start + i * gap;
            let now = sys::mono_ns();
            if due > now {
                std::thread::sleep(Duration::from_nanos(due - now));
            }
            payload[..8].copy_from_slice(&i.to_le_bytes());
            payload[8..16].copy_from_slice(&sys::mono_ns().to_le_bytes());
            payload[16..24].copy_from_slice(&sys::unix_ns().to_le_bytes());
            if sock.send_to(&payload, dst).is_ok() {
                sent += 1;
            }
        }
        Ok(sent)
    });
    let sent = sender
        .join()
        .map_err(|_| LabError::Config("probe sender panicked".into()))??;
    let delays_ns = receiver
        .join()
        .map_err(|_| LabError::Config("probe receiver panicked".into()))??;
    Ok(ProbeResult { sent, delays_ns })
}
