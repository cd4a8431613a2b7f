//! The kernel's TCP view for the live UIs: the eBPF TCP probes (the same ones `tboxscope
//! capture` loads) read on a thread of their own, each record turned into an engine
//! [`TcpEvent`] by [`Record::engine_event`] (as replay turns a recorded one: live, replay and
//! `lab run` read TCP alike), with the socket's path named by its local address. Every event
//! lost on the way is counted ([`TcpDrops`]) and reported with the others.
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use probe_user::capture::records::{DropsRecord, Record};
use probe_user::capture::tracker::ConnTotals;
use probe_user::capture::watch::TcpWatch;
use probe_user::source::ebpf::{HookState, HookStatus, KernelDrops, ProbeOptions, SkippedByKernel};
use tboxscope_engine::input::TcpEvent;

/// What the TCP probe thread reports.
#[derive(Debug)]
pub enum TcpMessage {
    /// A kernel TCP event for the engine.
    Event(Box<TcpEvent>),
    /// The probes' state, for the health panel (`TCP probes: 4/4 hooks attached`).
    Status(String),
    /// Events lost so far.
    Dropped(TcpDrops),
    /// The probes are attached (recording mode only): each hook's state and CONFIG_HZ.
    Started {
        /// Each hook's outcome.
        hooks: Vec<HookStatus>,
        /// The kernel's CONFIG_HZ, when known.
        config_hz: Option<u32>,
    },
    /// A kernel record as `capture --json` writes it, at Unix time `ts_ns` (recording mode
    /// only; its engine event follows as [`TcpMessage::Event`]).
    Record {
        /// Unix time, ns.
        ts_ns: u64,
        /// The record.
        record: Box<Record>,
        /// The path its socket's local address belongs to, when it is one of the paths'.
        path: Option<String>,
    },
    /// The kernel side's drop counters, when they changed (recording mode only).
    KernelDrops(DropsRecord),
    /// Per-connection totals when the probes stop (recording mode only).
    Connections(Vec<ConnTotals>),
}

/// Kernel TCP events lost on their way to the engine, counted since the probes started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpDrops {
    /// Lost in the kernel: ring buffer full, failed reads.
    pub ring_buffer: u64,
    /// Read but not given to the engine: refused by the decoder, not convertible to an
    /// engine event, or the queue to the UI full.
    pub undelivered: u64,
    /// Hook runs the kernel skipped (the same hook already running on that CPU), per hook:
    /// each may have been an event of any socket.
    pub skipped_by_kernel: SkippedByKernel,
    /// Retransmitted segments the kernel counted that no record shows (skipped runs of the
    /// retransmit hook among them; not part of [`TcpDrops::total`]).
    pub unrecorded_retrans: u64,
    /// Congestion-state changes no hook run reported, seen in a later snapshot (written then;
    /// not part of [`TcpDrops::total`]).
    pub unrecorded_cong_changes: u64,
}

impl TcpDrops {
    /// Every event lost, each skipped hook run counted as one.
    pub fn total(&self) -> u64 {
        self.ring_buffer
            .saturating_add(self.undelivered)
            .saturating_add(self.skipped_by_kernel.total())
    }
}

/// The health panel's line for kernel TCP events the probes missed, when there were any: hook
/// runs the kernel skipped (or hooks whose count could not be read), and retransmitted
/// segments the kernel counted that no record shows, and congestion-state changes seen only in
/// a later snapshot: `TCP probes: 3 hook runs skipped by the kernel (retransmit 2,
/// cong_state 1); their events are missing; 4 retransmitted segments counted by the kernel
/// have no record; 1 congestion-state changes seen only in a later sample`.
pub fn probes_missed_line(
    s: &SkippedByKernel,
    unrecorded_retrans: u64,
    unrecorded_cong_changes: u64,
) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    if s.total() > 0 {
        let per: Vec<String> = [
            ("retransmit", s.retransmit),
            ("cwnd", s.cwnd),
            ("cong_state", s.cong_state),
            ("state", s.state),
        ]
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(name, n)| format!("{name} {n}"))
        .collect();
        parts.push(format!(
            "{} hook runs skipped by the kernel ({}); their events are missing",
            s.total(),
            per.join(", ")
        ));
    }
    if s.unread_hooks > 0 {
        parts.push(format!(
            "runs skipped by the kernel not counted for {} hook(s) (kernel before 5.12?)",
            s.unread_hooks
        ));
    }
    if unrecorded_retrans > 0 {
        parts.push(format!(
            "{unrecorded_retrans} retransmitted segments counted by the kernel have no record"
        ));
    }
    if unrecorded_cong_changes > 0 {
        parts.push(format!(
            "{unrecorded_cong_changes} congestion-state changes seen only in a later sample"
        ));
    }
    (!parts.is_empty()).then(|| format!("TCP probes: {}", parts.join("; ")))
}

/// How often the kernel drop counters are read: each reading is a map lookup per CPU and a
/// program-info call per hook, not worth making per poll.
pub const DROPS_EVERY: Duration = Duration::from_secs(1);

/// Capture records → engine events on the queue to the UI, counting each one that does not
/// get there (not convertible, queue full).
pub struct Forward<'a> {
    tx: &'a Sender<TcpMessage>,
    local: &'a [(IpAddr, String)],
    /// Also queue each record itself ([`TcpMessage::Record`]).
    recording: bool,
    /// Events not converted or not queued.
    pub undelivered: u64,
}

impl<'a> Forward<'a> {
    /// Forwards to `tx`, naming each socket's path by its local address in `local`.
    pub fn new(tx: &'a Sender<TcpMessage>, local: &'a [(IpAddr, String)]) -> Self {
        Self {
            tx,
            local,
            recording: false,
            undelivered: 0,
        }
    }

    /// Converts `record` (at Unix time `ts_ns`) and queues it without waiting.
    pub fn record(&mut self, ts_ns: u64, record: &Record) {
        let event = record.engine_event(ts_ns);
        let path = event.as_ref().ok().and_then(|e| {
            let ip = e.local.ip();
            self.local
                .iter()
                .find(|(local, _)| *local == ip)
                .map(|(_, label)| label.clone())
        });
        if self.recording {
            let message = TcpMessage::Record {
                ts_ns,
                record: Box::new(record.clone()),
                path: path.clone(),
            };
            if self.tx.try_send(message).is_err() {
                self.undelivered += 1;
            }
        }
        let Ok(mut event) = event else {
            self.undelivered += 1;
            return;
        };
        if let Some(label) = path {
            event.path = label;
        }
        if self
            .tx
            .try_send(TcpMessage::Event(Box::new(event)))
            .is_err()
        {
            self.undelivered += 1;
        }
    }
}

/// The probe thread: its messages, and a stop flag that ends it within 100 ms.
pub struct KernelTcp {
    /// Events, status and drop counts, in the order they happened.
    pub messages: Receiver<TcpMessage>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl KernelTcp {
    /// Loads and attaches the probes on a new thread. `local` names the path of each local
    /// address (a socket's events carry the path its source address belongs to).
    pub fn spawn(options: ProbeOptions, local: Vec<(IpAddr, String)>) -> std::io::Result<Self> {
        Self::spawn_with(options, local, false)
    }

    /// [`KernelTcp::spawn`] for `capture --json`: the thread also sends what the JSON Lines
    /// output holds ([`TcpMessage::Started`], [`TcpMessage::Record`],
    /// [`TcpMessage::KernelDrops`]).
    pub fn spawn_recording(
        options: ProbeOptions,
        local: Vec<(IpAddr, String)>,
    ) -> std::io::Result<Self> {
        Self::spawn_with(options, local, true)
    }

    fn spawn_with(
        options: ProbeOptions,
        local: Vec<(IpAddr, String)>,
        recording: bool,
    ) -> std::io::Result<Self> {
        let (tx, rx) = crossbeam_channel::bounded::<TcpMessage>(65_536);
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = Arc::clone(&stop);
        let thread = thread::Builder::new()
            .name("tboxscope-tcp".into())
            .spawn(move || tcp_loop(&options, &local, recording, &tx, &thread_stop))?;
        Ok(Self {
            messages: rx,
            stop,
            thread: Some(thread),
        })
    }

    /// Detaches the probes and waits for the thread; the messages already sent stay readable.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for KernelTcp {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Loads the eBPF TCP probes and turns their records into engine events until `stop`.
fn tcp_loop(
    options: &ProbeOptions,
    local: &[(IpAddr, String)],
    recording: bool,
    tx: &Sender<TcpMessage>,
    stop: &AtomicBool,
) {
    let mut watch = match TcpWatch::start(options) {
        Ok(w) => w,
        Err(e) => {
            log::warn!("TCP probes not loaded: {e}");
            let _ = tx.send(TcpMessage::Status(format!("TCP probes off: {e}")));
            return;
        }
    };
    let hooks = watch.hooks();
    let attached = hooks
        .iter()
        .filter(|h| h.state == HookState::Attached)
        .count();
    let missing: Vec<&str> = hooks
        .iter()
        .filter(|h| h.state != HookState::Attached)
        .map(|h| h.name)
        .collect();
    let mut status = format!("TCP probes: {attached}/{} hooks attached", hooks.len());
    if !missing.is_empty() {
        status.push_str(&format!(
            " (not: {}; see tboxscope doctor)",
            missing.join(", ")
        ));
    }
    let _ = tx.send(TcpMessage::Status(status));
    if recording {
        let _ = tx.send(TcpMessage::Started {
            hooks: hooks.to_vec(),
            config_hz: watch.config_hz(),
        });
    }
    let mut forward = Forward::new(tx, local);
    forward.recording = recording;
    let mut kernel_reported = DropsRecord::default();
    let mut reported = TcpDrops::default();
    let mut report = |watch: &TcpWatch, kernel: KernelDrops, undelivered: u64| {
        let drops = TcpDrops {
            ring_buffer: kernel.total(),
            undelivered: undelivered.saturating_add(watch.rejected()),
            skipped_by_kernel: kernel.skipped_by_kernel,
            unrecorded_retrans: watch.unrecorded_retrans(),
            unrecorded_cong_changes: watch.unrecorded_cong_changes(),
        };
        // The counts are cumulative: when the queue is full, the next turn sends them again.
        if drops != reported && tx.try_send(TcpMessage::Dropped(drops)).is_ok() {
            reported = drops;
        }
    };
    let mut kernel = watch.drops();
    let mut read_at = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let polled = watch.poll(Duration::from_millis(100), &mut |ts, record| {
            forward.record(ts, record);
        });
        if let Err(e) = polled {
            let _ = tx.send(TcpMessage::Status(format!("TCP probes stopped: {e}")));
            break;
        }
        if read_at.elapsed() >= DROPS_EVERY {
            kernel = watch.drops();
            read_at = Instant::now();
        }
        report(&watch, kernel, forward.undelivered);
        if recording {
            report_kernel(&watch, kernel, tx, &mut kernel_reported);
        }
    }
    // The final figures, exact.
    let kernel = watch.drops();
    report(&watch, kernel, forward.undelivered);
    if recording {
        report_kernel(&watch, kernel, tx, &mut kernel_reported);
        let _ = tx.send(TcpMessage::Connections(watch.connections()));
    }
}

/// Sends the kernel side's drop counters (`kernel`, as last read) when they changed since
/// `reported`.
fn report_kernel(
    watch: &TcpWatch,
    kernel: KernelDrops,
    tx: &Sender<TcpMessage>,
    reported: &mut DropsRecord,
) {
    let now = DropsRecord {
        kernel,
        decode_rejected: watch.rejected(),
        evicted: watch.evicted(),
        unrecorded_retrans: watch.unrecorded_retrans(),
        unrecorded_cong_changes: watch.unrecorded_cong_changes(),
    };
    if now != *reported && tx.try_send(TcpMessage::KernelDrops(now)).is_ok() {
        *reported = now;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use probe_user::capture::records::{CwndRecord, Endpoints, SockFields};
    use probe_user::source::ebpf::event::{CaState, SocketState};

    use super::*;

    fn cwnd(src: &str) -> Record {
        Record::Cwnd(CwndRecord {
            ends: Endpoints {
                conn: 1,
                src: Arc::from(src),
                dst: Arc::from("192.0.2.1:443"),
            },
            sock: SockFields {
                rto_ms: Some(204),
                backoff: 0,
                retransmits: 0,
                total_retrans: 0,
                cwnd: 10,
                ssthresh: 7,
                srtt_us: 50_000,
                packets_out: 0,
                lost_out: 0,
                retrans_out: 0,
                ca_state: CaState::Open,
                state: SocketState::Established,
                congestion_control: None,
            },
        })
    }

    #[test]
    fn skipped_runs_are_told_per_hook() {
        assert_eq!(probes_missed_line(&SkippedByKernel::default(), 0, 0), None);
        let s = SkippedByKernel {
            retransmit: 2,
            cong_state: 1,
            ..SkippedByKernel::default()
        };
        assert_eq!(
            probes_missed_line(&s, 0, 0).as_deref(),
            Some(
                "TCP probes: 3 hook runs skipped by the kernel (retransmit 2, cong_state 1); \
                 their events are missing"
            )
        );
        assert_eq!(
            probes_missed_line(&s, 4, 1).as_deref(),
            Some(
                "TCP probes: 3 hook runs skipped by the kernel (retransmit 2, cong_state 1); \
                 their events are missing; 4 retransmitted segments counted by the kernel have \
                 no record; 1 congestion-state changes seen only in a later sample"
            )
        );
        assert_eq!(
            probes_missed_line(&SkippedByKernel::default(), 1, 0).as_deref(),
            Some("TCP probes: 1 retransmitted segments counted by the kernel have no record")
        );
        let d = TcpDrops {
            ring_buffer: 1,
            undelivered: 1,
            skipped_by_kernel: s,
            unrecorded_retrans: 4,
            unrecorded_cong_changes: 1,
        };
        assert_eq!(d.total(), 5);
        let unread = SkippedByKernel {
            unread_hooks: 4,
            ..SkippedByKernel::default()
        };
        assert!(probes_missed_line(&unread, 0, 0)
            .is_some_and(|l| l
                .starts_with("TCP probes: runs skipped by the kernel not counted for 4 hook(s)")));
    }

    #[test]
    fn events_not_converted_or_not_queued_are_counted() {
        let (tx, rx) = crossbeam_channel::bounded(2);
        let local = [("10.0.0.2".parse().unwrap(), "eth0".to_owned())];
        let mut forward = Forward::new(&tx, &local);
        forward.record(1, &cwnd("10.0.0.2:40000"));
        forward.record(2, &cwnd("not an address"));
        forward.record(3, &cwnd("10.0.0.3:40000"));
        forward.record(4, &cwnd("10.0.0.2:40001"));
        assert_eq!(
            forward.undelivered, 2,
            "one not converted, one on a full queue"
        );
        let paths: Vec<String> = rx
            .try_iter()
            .filter_map(|m| match m {
                TcpMessage::Event(e) => Some(e.path),
                _ => None,
            })
            .collect();
        assert_eq!(paths, ["eth0", "-"]);
    }
}
