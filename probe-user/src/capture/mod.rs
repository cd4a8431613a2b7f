//! Headless live capture: eBPF TCP probes → bookkeeping → JSON Lines, until a signal or a
//! deadline, always ending with a flushed `summary` line.
//!
//! Sources deliver [`CaptureEvent`]s; the eBPF ring buffer is read in place (it cannot leave
//! its thread), other sources (packets) can feed the same loop through a channel.
pub mod clock;
pub mod records;
pub mod tracker;
pub mod watch;

use std::io::Write;
use std::time::Duration;

use aya::maps::{MapData, RingBuf};
use serde::Serialize;
use tokio::io::unix::AsyncFd;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;

use crate::output::{JsonLinesWriter, OutputError};
use crate::source::ebpf::{
    decode, DecodeStats, HookStatus, KernelDrops, ProbeError, ProbeOptions, TcpObservation,
    TcpProbes,
};
use clock::WallClock;
use records::DropsRecord;
use tracker::{ConnTotals, Tracker};

/// How often the ring buffer is read without a wakeup from the kernel.
pub const DRAIN_EVERY: Duration = Duration::from_millis(10);
/// Records read from the ring buffer before the loop looks at signals and timers again.
const DRAIN_BATCH: usize = 16_384;

/// An observation from any source.
#[derive(Debug, Clone)]
pub enum CaptureEvent {
    /// From the eBPF TCP probes.
    Tcp(TcpObservation),
}

/// How to run a capture.
#[derive(Debug)]
pub struct CaptureOptions {
    /// Probe settings (filters, denied hooks).
    pub probe: ProbeOptions,
    /// Stop after this long; `None` = until SIGINT/SIGTERM.
    pub duration: Option<Duration>,
    /// How often drop counters are checked (a `drops` line is written when they change).
    pub drops_every: Duration,
    /// Bound of the open-connection table.
    pub max_connections: usize,
    /// Bound of the finished-connection list kept for the summary.
    pub max_closed: usize,
    /// Extra sources (e.g. packet capture) feeding the same output.
    pub extra: Option<mpsc::Receiver<CaptureEvent>>,
    /// Ends the capture when it fires or its sender is dropped (embedding callers, benches).
    pub stop: Option<tokio::sync::oneshot::Receiver<()>>,
}

impl Default for CaptureOptions {
    fn default() -> Self {
        Self {
            probe: ProbeOptions::default(),
            duration: None,
            drops_every: Duration::from_secs(1),
            max_connections: 4096,
            max_closed: 4096,
            extra: None,
            stop: None,
        }
    }
}

/// Why a capture failed.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The probes could not be loaded.
    #[error(transparent)]
    Probe(#[from] ProbeError),
    /// Writing the output failed.
    #[error(transparent)]
    Output(#[from] OutputError),
    /// The async runtime or a signal handler could not be set up.
    #[error("runtime: {0}")]
    Runtime(std::io::Error),
}

// Its message says the inner error; `source()` is left empty so that a printed chain names it
// once.
impl From<std::io::Error> for CaptureError {
    fn from(e: std::io::Error) -> Self {
        CaptureError::Runtime(e)
    }
}

/// What ended the capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// `--duration` elapsed.
    Duration,
    /// SIGINT.
    Sigint,
    /// SIGTERM.
    Sigterm,
    /// The caller's stop channel ([`CaptureOptions::stop`]).
    Requested,
}

/// The final `summary` record.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// What ended the run.
    pub stopped_by: StopReason,
    /// Wall time covered (s).
    pub duration_s: f64,
    /// Kernel events decoded.
    pub events: u64,
    /// Records written (header and summary included).
    pub records: u64,
    /// Connections seen.
    pub connections_seen: u64,
    /// Per-connection totals.
    pub connections: Vec<ConnTotals>,
    /// Kernel drop counters.
    pub drops: KernelDrops,
    /// Decoder rejections by reason.
    pub decode_rejected: DecodeStats,
    /// Connections evicted from the bounded tables.
    pub evicted: u64,
    /// Retransmitted segments the kernel counted with no record (see
    /// [`ConnTotals::unrecorded_retrans`]), over every connection.
    pub unrecorded_retrans: u64,
    /// Congestion-state changes no hook run reported, seen in a later snapshot (see
    /// [`ConnTotals::unrecorded_cong_changes`]), over every connection.
    pub unrecorded_cong_changes: u64,
    /// Each hook's state.
    pub hooks: Vec<HookStatus>,
}

/// Kernel ring-buffer items → capture records: each item is decoded (rejections counted by
/// reason), goes through the connection table, and its records are stamped with Unix time.
/// The headless capture and the live UI ([`watch::TcpWatch`]) both read the kernel through it.
pub struct KernelRecords {
    tracker: Tracker,
    clock: WallClock,
    decode: DecodeStats,
    events: u64,
    /// Records of the current event (reused).
    records: Vec<records::Record>,
}

impl KernelRecords {
    /// Empty, with `tracker`'s bounds and `clock`'s conversion to Unix time.
    pub fn new(tracker: Tracker, clock: WallClock) -> Self {
        Self {
            tracker,
            clock,
            decode: DecodeStats::default(),
            events: 0,
            records: Vec::with_capacity(4),
        }
    }

    /// Decodes one ring-buffer item and hands each record it produces, with its Unix time in
    /// ns, to `emit`; an item that does not decode is counted, not an error.
    pub fn item<E>(
        &mut self,
        bytes: &[u8],
        emit: &mut dyn FnMut(u64, &records::Record) -> Result<(), E>,
    ) -> Result<(), E> {
        match decode(bytes) {
            Ok(o) => self.observation(&o, emit),
            Err(e) => {
                self.decode.count(e);
                Ok(())
            }
        }
    }

    /// [`KernelRecords::item`] for an observation already decoded (another source).
    pub fn observation<E>(
        &mut self,
        o: &TcpObservation,
        emit: &mut dyn FnMut(u64, &records::Record) -> Result<(), E>,
    ) -> Result<(), E> {
        self.events += 1;
        let ts = self.clock.to_unix_ns(o.mono_ns);
        self.records.clear();
        self.tracker.handle_into(o, &mut self.records);
        for r in &self.records {
            emit(ts, r)?;
        }
        Ok(())
    }

    /// Kernel events decoded so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Items the decoder refused, by reason.
    pub fn rejected(&self) -> DecodeStats {
        self.decode
    }
}

struct Sink<W: Write> {
    out: JsonLinesWriter<W>,
    kernel: KernelRecords,
}

impl<W: Write> Sink<W> {
    fn tcp(&mut self, o: &TcpObservation) -> Result<(), OutputError> {
        let out = &mut self.out;
        self.kernel
            .observation(o, &mut |ts, r| out.write(r.type_name(), ts, r))
    }

    fn raw(&mut self, bytes: &[u8]) -> Result<(), OutputError> {
        let out = &mut self.out;
        self.kernel
            .item(bytes, &mut |ts, r| out.write(r.type_name(), ts, r))
    }

    /// Reads the records waiting in the ring buffer, at most `limit` (so a flood cannot starve
    /// signals and timers); true when the ring was emptied.
    fn drain(&mut self, rb: &mut RingBuf<MapData>, limit: usize) -> Result<bool, OutputError> {
        for _ in 0..limit {
            match rb.next() {
                Some(item) => self.raw(&item)?,
                None => return Ok(true),
            }
        }
        Ok(false)
    }

    fn drops_record(&self, kernel: KernelDrops) -> DropsRecord {
        DropsRecord {
            kernel,
            decode_rejected: self.kernel.decode.total(),
            evicted: self.kernel.tracker.evicted,
            unrecorded_retrans: self.kernel.tracker.unrecorded_retrans,
            unrecorded_cong_changes: self.kernel.tracker.unrecorded_cong_changes,
        }
    }
}

/// Loads the probes and runs a capture to `out`, on a tokio runtime of its own.
/// `header` fields (e.g. the command line) go into the first line.
pub fn run<W: Write, H: Serialize>(
    opts: CaptureOptions,
    out: W,
    header: &H,
) -> Result<Summary, CaptureError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(run_async(opts, out, header))
}

/// The first JSON line of a capture: the caller's fields, then what the probes could attach.
#[derive(Serialize)]
struct Header<'a, H: Serialize> {
    #[serde(flatten)]
    fields: &'a H,
    hooks: &'a [HookStatus],
    config_hz: Option<u32>,
}

/// [`run`] inside an existing current-thread runtime.
pub async fn run_async<W: Write, H: Serialize>(
    mut opts: CaptureOptions,
    out: W,
    header: &H,
) -> Result<Summary, CaptureError> {
    // Signals first, so a SIGINT during loading still ends the run cleanly.
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut probes = TcpProbes::load(&opts.probe)?;
    let hooks = probes.hooks().to_vec();
    let clock = WallClock::measure();
    let start_mono = WallClock::mono_now();
    let writer = JsonLinesWriter::new(
        out,
        clock.to_unix_ns(start_mono),
        &Header {
            fields: header,
            hooks: &hooks,
            config_hz: probes.hz(),
        },
    )?;
    let mut sink = Sink {
        out: writer,
        kernel: KernelRecords::new(
            Tracker::new(probes.hz(), opts.max_connections, opts.max_closed),
            clock,
        ),
    };
    let ring = probes.take_events()?;
    // SAFETY: RingBuf and EbpfLogger own their map fd (aya's MapData); it stays open and the
    // same while the AsyncFd owns them.
    let mut ring = unsafe { AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE) }
        .map_err(std::io::Error::from)?;
    let mut logger = match probes.take_logger() {
        Some(l) => Some(
            // SAFETY: as for the ring buffer above.
            unsafe { AsyncFd::register_with_interest(l, tokio::io::Interest::READABLE) }
                .map_err(std::io::Error::from)?,
        ),
        None => None,
    };
    let deadline = async {
        match opts.duration {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(deadline);
    let stop = opts.stop.take();
    let stop = async {
        match stop {
            Some(rx) => {
                let _ = rx.await;
            }
            None => std::future::pending().await,
        }
    };
    tokio::pin!(stop);
    // Frequent events are submitted without a wakeup (probe-common RING_WAKE_BYTES): read
    // what has queued up at this pace even when the kernel does not wake us.
    let mut drain = tokio::time::interval(DRAIN_EVERY);
    drain.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut tick = tokio::time::interval(opts.drops_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_drops = DropsRecord::default();
    let mut extra = opts.extra.take();
    let stopped_by = loop {
        tokio::select! {
            _ = sigint.recv() => break StopReason::Sigint,
            _ = sigterm.recv() => break StopReason::Sigterm,
            () = &mut deadline => break StopReason::Duration,
            () = &mut stop => break StopReason::Requested,
            guard = ring.readable_mut() => {
                let mut guard = guard?;
                if sink.drain(guard.get_inner_mut(), DRAIN_BATCH)? {
                    guard.clear_ready();
                }
            }
            _ = drain.tick() => {
                sink.drain(ring.get_mut(), DRAIN_BATCH)?;
            }
            guard = async {
                match logger.as_mut() {
                    Some(l) => l.readable_mut().await,
                    None => std::future::pending().await,
                }
            } => {
                let mut guard = guard?;
                guard.get_inner_mut().flush();
                guard.clear_ready();
            }
            ev = async {
                match extra.as_mut() {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            } => {
                match ev {
                    Some(CaptureEvent::Tcp(o)) => sink.tcp(&o)?,
                    None => extra = None,
                }
            }
            _ = tick.tick() => {
                let rec = sink.drops_record(probes.drops());
                if rec != last_drops {
                    last_drops = rec;
                    let ts = sink.kernel.clock.to_unix_ns(WallClock::mono_now());
                    sink.out.write("drops", ts, &rec)?;
                }
                sink.out.flush()?;
            }
        }
    };
    // Drain what the kernel already queued.
    sink.drain(ring.get_mut(), usize::MAX)?;
    if let Some(l) = logger.as_mut() {
        l.get_mut().flush();
    }
    let drops = probes.drops();
    let end_mono = WallClock::mono_now();
    let end_ts = sink.kernel.clock.to_unix_ns(end_mono);
    let rec = sink.drops_record(drops);
    sink.out.write("drops", end_ts, &rec)?;
    let summary = Summary {
        stopped_by,
        duration_s: end_mono.saturating_sub(start_mono) as f64 / 1e9,
        events: sink.kernel.events,
        records: sink.out.records() + 1,
        connections_seen: sink.kernel.tracker.seen(),
        connections: sink.kernel.tracker.totals(),
        drops,
        decode_rejected: sink.kernel.decode,
        evicted: sink.kernel.tracker.evicted,
        unrecorded_retrans: sink.kernel.tracker.unrecorded_retrans,
        unrecorded_cong_changes: sink.kernel.tracker.unrecorded_cong_changes,
        hooks,
    };
    sink.out.write("summary", end_ts, &summary)?;
    sink.out.flush()?;
    // Detach before returning (also happens on any early return or panic via Drop).
    drop(ring);
    drop(logger);
    drop(probes);
    Ok(summary)
}
