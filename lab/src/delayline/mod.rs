//! The delay line: a forwarder that bridges the two veth ends of a path's middle namespace
//! (`to-tbox` ↔ `to-gw`) and holds every frame for its own sampled one-way delay.
//!
//! It stands in for `sch_netem`, which this kernel lacks. Each frame read from one side gets a
//! delay drawn from the path's normal distribution (truncated at 0) and is queued in a binary
//! heap ordered by release time on CLOCK_MONOTONIC; the thread sleeps in `ppoll` (1 ns timer
//! slack) until the earliest release or the next arriving frame, then sends everything due.
//!
//! Reordering policy (per scenario path, `reorder`): with `reorder = true` (the default, and
//! what netem does with jitter) every frame gets exactly its own sample, so frames whose samples
//! cross overtake each other and the achieved delay distribution is the configured one. With
//! `reorder = false` a frame never leaves before the one that arrived before it in the same
//! direction (release = max(arrival + sample, previous release)); order is kept, and the
//! delay distribution is skewed upward at high packet rates.
//!
//! Frames are forwarded unchanged at layer 2 (ARP included), so the T-Box and the gateway see
//! one plain Ethernet link per path and the IP addressing does not depend on the line.
mod packet;
mod sampler;

use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use serde::Serialize;

pub use packet::PacketSocket;
pub use sampler::DelaySampler;

use crate::error::{LabError, Result};
use crate::names::{LINE_GATEWAY_SIDE, LINE_TBOX_SIDE};
use crate::scenario::PathSpec;
use crate::sys;

/// Largest frame the line carries (offloads are off, so frames are at most MTU + header).
const MAX_FRAME: usize = 9216;
/// Longest single sleep, so a stop request is seen promptly.
const MAX_SLEEP_NS: u64 = 50_000_000;

/// Settings of one delay line (one path, both directions).
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct LineConfig {
    /// Mean one-way delay, milliseconds.
    pub delay_ms: f64,
    /// Standard deviation, milliseconds.
    pub jitter_ms: f64,
    /// Whether frames may overtake each other (see the module docs).
    pub reorder: bool,
    /// Seed of the delay generator.
    pub seed: u64,
    /// Busy-wait this many microseconds before a release instead of sleeping (0 = never).
    pub spin_us: u64,
    /// Run the forwarder thread with real-time priority (SCHED_FIFO) when allowed.
    #[serde(default = "yes")]
    pub realtime: bool,
}

fn yes() -> bool {
    true
}

impl LineConfig {
    /// The delay settings of a scenario path.
    pub fn from_spec(spec: &PathSpec, seed: u64) -> Self {
        LineConfig {
            delay_ms: spec.delay_ms,
            jitter_ms: spec.jitter_ms,
            reorder: spec.reorder,
            seed,
            spin_us: 0,
            realtime: true,
        }
    }
}

/// Counters of a running line.
#[derive(Debug, Default)]
pub struct LineCounters {
    /// Frames forwarded toward the gateway.
    pub up_frames: AtomicU64,
    /// Frames forwarded toward the T-Box.
    pub down_frames: AtomicU64,
    /// Frames the kernel refused to send (queue full, or dropped by the path's loss or outage
    /// rule at the line's egress).
    pub send_failures: AtomicU64,
    /// Frames released later than their due time by more than 1 ms.
    pub late_frames: AtomicU64,
    /// Sum of release lateness in nanoseconds (for the mean added error).
    pub lateness_ns_sum: AtomicU64,
    /// Largest release lateness in nanoseconds.
    pub lateness_ns_max: AtomicU64,
}

/// A snapshot of [`LineCounters`].
#[derive(Debug, Clone, Copy, Serialize, Default)]
pub struct LineStats {
    /// Frames forwarded toward the gateway.
    pub up_frames: u64,
    /// Frames forwarded toward the T-Box.
    pub down_frames: u64,
    /// Frames the kernel refused to send (including the path's loss and outage drops).
    pub send_failures: u64,
    /// Frames released more than 1 ms late.
    pub late_frames: u64,
    /// Mean release lateness in microseconds.
    pub mean_lateness_us: f64,
    /// Largest release lateness in microseconds.
    pub max_lateness_us: f64,
}

impl LineCounters {
    /// A snapshot.
    pub fn stats(&self) -> LineStats {
        let up = self.up_frames.load(Ordering::Relaxed);
        let down = self.down_frames.load(Ordering::Relaxed);
        let total = up.saturating_add(down).max(1);
        LineStats {
            up_frames: up,
            down_frames: down,
            send_failures: self.send_failures.load(Ordering::Relaxed),
            late_frames: self.late_frames.load(Ordering::Relaxed),
            mean_lateness_us: self.lateness_ns_sum.load(Ordering::Relaxed) as f64
                / total as f64
                / 1e3,
            max_lateness_us: self.lateness_ns_max.load(Ordering::Relaxed) as f64 / 1e3,
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
struct Pending {
    due_ns: u64,
    seq: u64,
    /// 0 = toward the gateway, 1 = toward the T-Box.
    dir: usize,
    buf: usize,
    len: usize,
}

impl Ord for Pending {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        // BinaryHeap is a max-heap: the earliest due (then the earliest arrival) is greatest.
        other
            .due_ns
            .cmp(&self.due_ns)
            .then(other.seq.cmp(&self.seq))
    }
}

impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}

/// Runs the forwarder in the calling thread's namespace until `stop` is set.
pub fn run_forwarder(cfg: &LineConfig, stop: &AtomicBool, counters: &LineCounters) -> Result<()> {
    sys::fine_timer_slack();
    if cfg.realtime {
        if let Err(e) = sys::set_realtime(50) {
            log::warn!("delay line without real-time priority (wake-ups may be late): {e}");
        }
    }
    // Index 0 receives from the T-Box side and sends toward the gateway; 1 the reverse.
    let socks = [
        PacketSocket::open(LINE_TBOX_SIDE)?,
        PacketSocket::open(LINE_GATEWAY_SIDE)?,
    ];
    let mut samplers = [
        DelaySampler::new(cfg.delay_ms, cfg.jitter_ms, cfg.seed),
        DelaySampler::new(cfg.delay_ms, cfg.jitter_ms, cfg.seed.wrapping_add(0x5151)),
    ];
    let mut heap: BinaryHeap<Pending> = BinaryHeap::new();
    let mut buffers: Vec<Vec<u8>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut last_due = [0u64; 2];
    let mut seq = 0u64;
    let spin_ns = cfg.spin_us.saturating_mul(1000);
    let mut pfds = [
        libc::pollfd {
            fd: socks[0].raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: socks[1].raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    while !stop.load(Ordering::Relaxed) {
        // Release everything that is due.
        let mut now = sys::mono_ns();
        while let Some(top) = heap.peek() {
            if top.due_ns > now {
                if top.due_ns - now <= spin_ns {
                    std::hint::spin_loop();
                    now = sys::mono_ns();
                    continue;
                }
                break;
            }
            let Some(p) = heap.pop() else { break };
            let frame = buffers
                .get(p.buf)
                .and_then(|b| b.get(..p.len))
                .unwrap_or(&[]);
            let out = &socks[1 - p.dir];
            if out.send(frame) {
                let c = if p.dir == 0 {
                    &counters.up_frames
                } else {
                    &counters.down_frames
                };
                c.fetch_add(1, Ordering::Relaxed);
            } else {
                counters.send_failures.fetch_add(1, Ordering::Relaxed);
            }
            let late = now.saturating_sub(p.due_ns);
            counters.lateness_ns_sum.fetch_add(late, Ordering::Relaxed);
            counters.lateness_ns_max.fetch_max(late, Ordering::Relaxed);
            if late > 1_000_000 {
                counters.late_frames.fetch_add(1, Ordering::Relaxed);
            }
            free.push(p.buf);
            now = sys::mono_ns();
        }
        // Sleep until the next release (minus the spin window) or the next frame.
        let wait = heap
            .peek()
            .map_or(MAX_SLEEP_NS, |t| {
                t.due_ns.saturating_sub(now).saturating_sub(spin_ns)
            })
            .min(MAX_SLEEP_NS);
        let ts = libc::timespec {
            tv_sec: (wait / 1_000_000_000) as libc::time_t,
            tv_nsec: (wait % 1_000_000_000) as libc::c_long,
        };
        for p in pfds.iter_mut() {
            p.revents = 0;
        }
        // SAFETY: ppoll on two pollfds we own, a timeout we own, no signal mask.
        let rc = unsafe { libc::ppoll(pfds.as_mut_ptr(), 2, &ts, std::ptr::null()) };
        if rc < 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(LabError::io("ppoll in the delay line", err));
        }
        for dir in 0..2 {
            if pfds[dir].revents & libc::POLLIN == 0 {
                continue;
            }
            // Drain what is waiting (bounded, so releases are not starved).
            for _ in 0..256 {
                let idx = match free.pop() {
                    Some(i) => i,
                    None => {
                        buffers.push(vec![0u8; MAX_FRAME]);
                        buffers.len() - 1
                    }
                };
                let Some(buf) = buffers.get_mut(idx) else {
                    break;
                };
                match socks[dir].recv(buf)? {
                    Some((len, stamp)) if len > 0 && len <= MAX_FRAME => {
                        // The kernel's receive time, moved to the monotonic clock: the delay
                        // counts from when the frame reached the line, not from when this
                        // thread woke up.
                        let (mono, unix) = (sys::mono_ns(), sys::unix_ns());
                        let arrival =
                            stamp.map_or(mono, |rt| mono.saturating_sub(unix.saturating_sub(rt)));
                        let mut due = arrival.saturating_add(samplers[dir].sample_ns());
                        if !cfg.reorder {
                            due = due.max(last_due[dir]);
                        }
                        last_due[dir] = due;
                        seq = seq.wrapping_add(1);
                        heap.push(Pending {
                            due_ns: due,
                            seq,
                            dir,
                            buf: idx,
                            len,
                        });
                    }
                    Some(_) => free.push(idx),
                    None => {
                        free.push(idx);
                        break;
                    }
                }
            }
        }
    }
    Ok(())
}

/// A delay line running on its own thread inside a path namespace; stopped and joined on drop.
#[derive(Debug)]
pub struct DelayLine {
    stop: Arc<AtomicBool>,
    counters: Arc<LineCounters>,
    handle: Option<JoinHandle<Result<()>>>,
}

impl DelayLine {
    /// Starts a line in namespace `ns` (its interfaces must exist).
    pub fn spawn(ns: &str, cfg: LineConfig) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(LineCounters::default());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<()>>();
        let ns_owned = ns.to_string();
        let (s, c) = (stop.clone(), counters.clone());
        let handle = std::thread::Builder::new()
            .name(format!("delay-{ns}"))
            .spawn(move || {
                if let Err(e) = sys::enter_netns(&ns_owned) {
                    let msg = e.to_string();
                    let _ = ready_tx.send(Err(e));
                    return Err(LabError::Config(msg));
                }
                let _ = ready_tx.send(Ok(()));
                run_forwarder(&cfg, &s, &c)
            })
            .map_err(|e| LabError::io("spawn the delay line thread", e))?;
        ready_rx
            .recv()
            .map_err(|_| LabError::Config("the delay line thread ended early".into()))??;
        Ok(DelayLine {
            stop,
            counters,
            handle: Some(handle),
        })
    }

    /// Current counters.
    pub fn stats(&self) -> LineStats {
        self.counters.stats()
    }

    /// Whether the forwarder thread is still running.
    pub fn is_running(&self) -> bool {
        self.handle.as_ref().is_some_and(|h| !h.is_finished())
    }

    /// Stops the line and returns its final counters and any error it hit.
    pub fn stop(mut self) -> Result<LineStats> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Result<LineStats> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.join()
                .map_err(|_| LabError::Config("the delay line thread panicked".into()))??;
        }
        Ok(self.counters.stats())
    }
}

impl Drop for DelayLine {
    fn drop(&mut self) {
        if let Err(e) = self.stop_inner() {
            log::warn!("delay line: {e}");
        }
    }
}
