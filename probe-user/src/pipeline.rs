//! The engine on a thread of its own: decoding hands it observations in batches, in order, so
//! that decoding and matching run on two cores and a file's throughput is the slower of the
//! two instead of their sum. The engine sees exactly the sequence it would see on one thread.
//! The records it finishes come back to the decoding thread with the batches it is done with,
//! in order, and are handled (written, collected) there, which shares the work between the
//! two threads more evenly.

use std::collections::VecDeque;
use std::mem::MaybeUninit;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tboxscope_engine::{Engine, Observation, Record, TcpSegment};

use crate::analyze::{Analyzer, FrameAt, Record as AnalyzedRecord, RecordSink};
use crate::correlate::{CaptureHint, Correlator, FrameFeed, ObservationSink};
use crate::source::pcap::FileError;

/// Observations per batch handed to the engine's thread: large enough that hand-overs (a
/// wake-up each, dear on a shared machine) are rare, small enough to stay in the caches.
const BATCH: usize = 1024;
/// Batches on their way to the engine's thread before decoding waits.
const IN_FLIGHT: usize = 8;
/// Decoding, once it waited for room, is woken when the engine's thread has left this many
/// batches on their way or fewer: one wake-up per several batches, not one per batch (each
/// costs the engine's thread, the slower one, a few microseconds of a shared machine's CPU).
const WAKE_DECODING_AT: usize = IN_FLIGHT / 2;

/// The batches between the two threads.
#[derive(Default)]
struct Handoff {
    state: Mutex<HandoffState>,
    /// The engine's thread waits here for a batch.
    filled: Condvar,
    /// Decoding waits here for room.
    room: Condvar,
}

#[derive(Default)]
struct HandoffState {
    /// Batches for the engine's thread, oldest first.
    full: VecDeque<Vec<Observation>>,
    /// Batches the engine's thread is done with, observations still in them: they are freed
    /// by decoding, where they were allocated (freed on the engine's thread, every QUIC packet
    /// is a remote free for the allocator and decoding keeps taking fresh memory), and reused.
    spent: Vec<Vec<Observation>>,
    /// The records the engine finished, per batch, oldest first: for decoding to handle.
    records: VecDeque<Vec<Record>>,
    /// Lists of records decoding has handled, records still in them: they are freed on the
    /// engine's thread, where they were allocated (freed by decoding, the engine's thread
    /// never gets its memory back and takes every record's from the allocator's slow path),
    /// and the lists reused.
    handled: Vec<Vec<Record>>,
    /// Decoding is done (or gave up): no more batches come.
    closed: bool,
    /// The engine's thread is gone: batches handed over now are dropped.
    stopped: bool,
    engine_waits: bool,
    decoding_waits: bool,
}

impl Handoff {
    fn lock(&self) -> MutexGuard<'_, HandoffState> {
        // Neither side panics while holding the lock; if one did, the state is still whole.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The engine's thread: the next batch, `None` once decoding closed and all are taken;
    /// gives back the last one (`spent`) and the records it finished, and takes the lists of
    /// records decoding handled into `handled`.
    fn take(
        &self,
        spent: Option<Vec<Observation>>,
        records: Vec<Record>,
        handled: &mut Vec<Vec<Record>>,
    ) -> Option<Vec<Observation>> {
        let mut st = self.lock();
        if !records.is_empty() {
            st.records.push_back(records);
        }
        handled.append(&mut st.handled);
        if let Some(b) = spent {
            if st.spent.len() < IN_FLIGHT + 2 {
                st.spent.push(b);
            }
        }
        loop {
            if let Some(b) = st.full.pop_front() {
                if st.decoding_waits && st.full.len() <= WAKE_DECODING_AT {
                    st.decoding_waits = false;
                    self.room.notify_one();
                }
                return Some(b);
            }
            if st.closed {
                return None;
            }
            st.engine_waits = true;
            st = self.filled.wait(st).unwrap_or_else(PoisonError::into_inner);
            st.engine_waits = false;
        }
    }

    /// Decoding: hands `full` over, waiting while `IN_FLIGHT` are on their way; returns an
    /// empty batch to fill next (a spent one when there is one), or `None` when the engine's
    /// thread is gone. The records that came back are added to `records`; the lists of
    /// records decoding `handled` go to the engine's thread.
    fn give(
        &self,
        full: Vec<Observation>,
        records: &mut VecDeque<Vec<Record>>,
        handled: &mut Vec<Vec<Record>>,
    ) -> Option<Vec<Observation>> {
        let mut st = self.lock();
        st.handled.append(handled);
        while st.full.len() >= IN_FLIGHT && !st.stopped {
            st.decoding_waits = true;
            st = self.room.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
        if st.stopped {
            return None;
        }
        st.full.push_back(full);
        if st.engine_waits {
            self.filled.notify_one();
        }
        let next = st.spent.pop();
        records.append(&mut st.records);
        drop(st);
        let mut next = next.unwrap_or_else(|| Vec::with_capacity(BATCH));
        next.clear();
        Some(next)
    }

    /// Decoding is done: the engine's thread ends after the batches on their way.
    fn close(&self) {
        self.lock().closed = true;
        self.filled.notify_one();
    }

    /// Decoding gave up: the engine's thread ends without the batches on their way.
    fn abandon(&self) {
        let mut st = self.lock();
        st.full.clear();
        st.closed = true;
        self.filled.notify_one();
    }

    /// The records that came back and were not handed to decoding yet.
    fn records_left(&self) -> VecDeque<Vec<Record>> {
        std::mem::take(&mut self.lock().records)
    }

    /// The engine's thread ends early: decoding stops waiting for room.
    fn stop(&self) {
        let mut st = self.lock();
        st.stopped = true;
        st.full.clear();
        self.room.notify_one();
    }
}

/// How long each thread of a pipelined run waited for the other: the one that waited less set
/// the pace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Waits {
    /// The engine's thread, for the next batch of observations (decoding was slower).
    pub engine: Duration,
    /// The decoding thread, for room to hand a batch over (the engine was slower).
    pub decoding: Duration,
}

/// Runs on the decoding thread for each record the engine finished, in the engine's order,
/// with the caller's state (e.g. to write it); its first error stops decoding.
pub type OnRecord<T, E> = fn(&Record, &mut T) -> Result<(), E>;

/// Whether this machine has a second core for the engine's thread.
pub fn worth_a_thread() -> bool {
    std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2)
}

/// Stops the hand-over when the engine's thread ends.
struct StopOnDrop(Arc<Handoff>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// An [`Engine`] running on its own thread, fed through [`ObservationSink::handle`]; the
/// records it finishes are handled on the feeding thread, by `on_record` with `state`.
pub struct EngineThread<T, E> {
    /// The batch being filled.
    batch: Vec<Observation>,
    handoff: Arc<Handoff>,
    worker: Worker,
    stopped: bool,
    /// Time spent waiting to hand a batch over.
    waited: Duration,
    /// Records that came back, to handle.
    records: VecDeque<Vec<Record>>,
    /// Lists of records handled, to give back to the engine's thread.
    handled: Vec<Vec<Record>>,
    state: T,
    on_record: OnRecord<T, E>,
    /// The first error of `on_record`: nothing is handed over or handled after it.
    error: Option<E>,
}

impl<T, E> EngineThread<T, E> {
    /// Starts `engine` on a thread of its own; `on_record` handles each record it finishes,
    /// with `state`, on the thread that feeds it.
    pub fn spawn(engine: Engine, state: T, on_record: OnRecord<T, E>) -> std::io::Result<Self> {
        let handoff = Arc::new(Handoff::default());
        let theirs = Arc::clone(&handoff);
        let worker = std::thread::Builder::new()
            .name("engine".to_owned())
            .spawn(move || {
                // However the thread ends (a panic), decoding stops waiting for it.
                let _stop = StopOnDrop(Arc::clone(&theirs));
                let mut engine = engine;
                let mut waited = Duration::ZERO;
                let (mut spent, mut records) = (None, Vec::new());
                let mut handled = Vec::new();
                loop {
                    let asked = Instant::now();
                    let Some(batch) =
                        theirs.take(spent.take(), std::mem::take(&mut records), &mut handled)
                    else {
                        break;
                    };
                    waited += asked.elapsed();
                    for mut list in handled.drain(..) {
                        list.clear();
                        if list.capacity() > records.capacity() {
                            records = list;
                        }
                    }
                    for obs in &batch {
                        engine.handle_ref(obs);
                    }
                    records.extend(engine.drain_records());
                    spent = Some(batch);
                }
                (engine, waited)
            })?;
        Ok(Self {
            batch: Vec::with_capacity(BATCH),
            worker: Worker {
                handoff: Arc::clone(&handoff),
                thread: Some(worker),
            },
            handoff,
            stopped: false,
            waited: Duration::ZERO,
            records: VecDeque::new(),
            handled: Vec::new(),
            state,
            on_record,
            error: None,
        })
    }

    /// Whether feeding has stopped (`on_record` failed, or the engine's thread panicked): what
    /// is handed over now is dropped; [`EngineThread::finish`] says why.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Hands over what is left, waits for the engine's thread, handles the records left and
    /// gives back the engine, the state and how long each thread waited for the other, or the
    /// first error of `on_record`. A panic on the engine's thread goes on here.
    pub fn finish(mut self) -> Result<(Engine, T, Waits), E> {
        self.hand_over();
        match self.error {
            Some(_) => self.handoff.abandon(),
            None => self.handoff.close(),
        }
        let Some(thread) = self.worker.thread.take() else {
            unreachable!("the thread is taken only here and in drop");
        };
        let (engine, waited) = match thread.join() {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        self.records.append(&mut self.handoff.records_left());
        self.handle_records();
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        let waits = Waits {
            engine: waited,
            decoding: self.waited,
        };
        Ok((engine, self.state, waits))
    }

    /// Handles the records that came back, in order, until `on_record` fails.
    fn handle_records(&mut self) {
        while let Some(batch) = self.records.pop_front() {
            if self.error.is_some() {
                return;
            }
            for r in &batch {
                if let Err(e) = (self.on_record)(r, &mut self.state) {
                    self.error = Some(e);
                    self.stopped = true;
                    return;
                }
            }
            self.handled.push(batch);
        }
    }

    fn hand_over(&mut self) {
        if self.batch.is_empty() || self.stopped {
            return;
        }
        let full = std::mem::take(&mut self.batch);
        let asked = Instant::now();
        let next = self
            .handoff
            .give(full, &mut self.records, &mut self.handled);
        self.waited += asked.elapsed();
        match next {
            Some(next) => self.batch = next,
            None => self.stopped = true,
        }
        self.handle_records();
    }
}

impl<T, E> ObservationSink for EngineThread<T, E> {
    fn handle(&mut self, obs: Observation) {
        self.handle_built(|| obs);
    }

    #[inline]
    fn handle_built(&mut self, build: impl FnOnce() -> Observation) {
        self.push_in_place(|slot| slot.write(build()));
    }

    #[inline]
    fn handle_tcp(&mut self, fill: impl FnOnce(&mut TcpSegment)) {
        self.push_in_place(|slot| {
            let obs = slot.write(Observation::TcpSegment(TcpSegment::default()));
            if let Observation::TcpSegment(t) = &mut *obs {
                fill(t);
            }
            obs
        });
    }
}

impl<T, E> EngineThread<T, E> {
    /// Adds the observation `write` puts in the batch's free slot (built there, not on the
    /// stack and copied in), handing the batch over when it is full.
    #[inline]
    fn push_in_place(
        &mut self,
        write: impl FnOnce(&mut MaybeUninit<Observation>) -> &mut Observation,
    ) {
        if self.stopped {
            return;
        }
        // Room for one is always there (a full batch is handed over at once); `reserve` makes
        // sure.
        self.batch.reserve(1);
        let len = self.batch.len();
        if let Some(slot) = self.batch.spare_capacity_mut().first_mut() {
            write(slot);
            // SAFETY: `write` returned the slot past the batch's length written.
            unsafe { self.batch.set_len(len + 1) };
        }
        if self.batch.len() >= BATCH {
            self.hand_over();
        }
    }
}

/// The engine's thread, ended and waited for if the feeding side goes away without
/// [`EngineThread::finish`] (an early return): it ends without what is on its way.
struct Worker {
    handoff: Arc<Handoff>,
    thread: Option<JoinHandle<(Engine, Duration)>>,
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.handoff.abandon();
            let _ = t.join();
        }
    }
}

/// Decoded units on their way to the engine's thread.
struct Feeding<'a, T, E> {
    feed: &'a mut FrameFeed,
    correlator: &'a mut Correlator<EngineThread<T, E>>,
}

impl<T, E> Feeding<'_, T, E> {
    /// Handling a record failed, or the engine's thread is gone: decoding stops (the error,
    /// or the panic, comes from [`EngineThread::finish`]).
    fn go_on(&mut self) -> Result<(), ()> {
        match self.correlator.sink_mut().stopped() {
            true => Err(()),
            false => Ok(()),
        }
    }
}

impl<T, E> RecordSink<()> for Feeding<'_, T, E> {
    fn record(&mut self, r: AnalyzedRecord<'_>) -> Result<(), ()> {
        self.feed.observe(self.correlator, &r);
        self.go_on()
    }

    #[inline]
    fn tcp_segment(
        &mut self,
        at: &FrameAt<'_>,
        seg: &tboxscope_decode::net::TcpSegment<'_>,
    ) -> Option<Result<(), ()>> {
        self.feed.observe_tcp(self.correlator, at, seg);
        Some(self.go_on())
    }
}

/// What [`decode_and_match`] ends with.
pub struct Matched<T> {
    /// The engine after the last observation (not finished).
    pub engine: Engine,
    /// The state given to `on_record`.
    pub state: T,
    /// The files that could not be read, or broke half-way.
    pub file_errors: Vec<FileError>,
    /// The newest packet time fed (to finish the run with).
    pub last_ts: u64,
    /// With the engine on its own thread, how long each thread waited for the other.
    pub waits: Option<Waits>,
}

/// Decodes `files` with `analyzer` and matches what they carry in `engine`, the user's
/// `statements` about captures applied; `on_record` handles each record the engine finishes,
/// in order, with `state`, on the calling thread.
/// With `own_thread`, the engine runs on a thread of its own ([`EngineThread`]); the engine
/// sees the same observations in the same order either way.
pub fn decode_and_match<T, E>(
    analyzer: &mut Analyzer,
    files: &[PathBuf],
    statements: &[(String, CaptureHint)],
    engine: Engine,
    state: T,
    on_record: OnRecord<T, E>,
    own_thread: bool,
) -> Result<Matched<T>, E>
where
    E: From<std::io::Error>,
{
    let feed = FrameFeed::default();
    decode_and_match_fed(
        analyzer, files, statements, engine, state, on_record, own_thread, feed,
    )
}

/// [`decode_and_match`] through `feed` (e.g. one holding the kernel's TCP events recorded
/// beside the captures, [`FrameFeed::with_kernel`]).
#[expect(clippy::too_many_arguments, reason = "decode_and_match's and the feed")]
pub fn decode_and_match_fed<T, E>(
    analyzer: &mut Analyzer,
    files: &[PathBuf],
    statements: &[(String, CaptureHint)],
    engine: Engine,
    state: T,
    on_record: OnRecord<T, E>,
    own_thread: bool,
    mut feed: FrameFeed,
) -> Result<Matched<T>, E>
where
    E: From<std::io::Error>,
{
    let handle_records = |engine: &mut Engine, state: &mut T| {
        engine
            .drain_records()
            .try_for_each(|r| on_record(&r, state))
    };
    if !own_thread {
        let mut correlator = Correlator::with_sink(engine);
        correlator.state_all(statements);
        let mut state = state;
        let file_errors = analyzer.run_files(files, &mut |r| {
            feed.observe(&mut correlator, &r);
            handle_records(correlator.engine_mut(), &mut state)
        })?;
        feed.flush_kernel(&mut correlator);
        handle_records(correlator.engine_mut(), &mut state)?;
        return Ok(Matched {
            engine: correlator.into_sink(),
            state,
            file_errors,
            last_ts: feed.last_ts(),
            waits: None,
        });
    }
    let thread = EngineThread::spawn(engine, state, on_record)?;
    let mut correlator = Correlator::with_sink(thread);
    correlator.state_all(statements);
    let decoded = analyzer.run_files_to(
        files,
        &mut Feeding {
            feed: &mut feed,
            correlator: &mut correlator,
        },
    );
    feed.flush_kernel(&mut correlator);
    let (engine, state, waits) = correlator.into_sink().finish()?;
    let file_errors = decoded
        .map_err(|()| std::io::Error::other("the engine's thread stopped without saying why"))?;
    Ok(Matched {
        engine,
        state,
        file_errors,
        last_ts: feed.last_ts(),
        waits: Some(waits),
    })
}
