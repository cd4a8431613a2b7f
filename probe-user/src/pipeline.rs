//! The engine on a thread of its own: decoding hands it observations in batches, in order, so
//! that decoding and matching run on two cores and a file's throughput is the slower of the
//! two instead of their sum. The engine sees exactly the sequence it would see on one thread,
//! and whatever runs after each observation (draining records, writing them) runs there too.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tboxscope_engine::{Engine, Observation};

use crate::analyze::Analyzer;
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

    /// The engine's thread: the next batch, `None` once decoding closed and all are taken.
    fn take(&self, spent: Option<Vec<Observation>>) -> Option<Vec<Observation>> {
        let mut st = self.lock();
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
    /// thread is gone.
    fn give(&self, full: Vec<Observation>) -> Option<Vec<Observation>> {
        let mut st = self.lock();
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

/// Runs after each observation on the engine's thread, with the state given to
/// [`EngineThread::spawn`]; its first error stops the thread.
pub type AfterObservation<T, E> = fn(&mut Engine, &mut T) -> Result<(), E>;

/// Whether this machine has a second core for the engine's thread.
pub fn worth_a_thread() -> bool {
    std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2)
}

/// What the engine's thread ends with: the engine, the state and how long it waited for
/// observations, or the first error of `after`.
type WorkerResult<T, E> = Result<(Engine, T, Duration), E>;

/// Stops the hand-over when the engine's thread ends.
struct StopOnDrop(Arc<Handoff>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// An [`Engine`] running on its own thread, fed through [`ObservationSink::handle`].
pub struct EngineThread<T, E> {
    /// The batch being filled.
    batch: Vec<Observation>,
    handoff: Arc<Handoff>,
    worker: Option<JoinHandle<WorkerResult<T, E>>>,
    stopped: bool,
    /// Time spent waiting to hand a batch over.
    waited: Duration,
}

impl<T: Send + 'static, E: Send + 'static> EngineThread<T, E> {
    /// Starts `engine` on a thread of its own; `after` runs there after every observation
    /// with `state` (e.g. to drain the engine's records and write them).
    pub fn spawn(engine: Engine, state: T, after: AfterObservation<T, E>) -> std::io::Result<Self> {
        let handoff = Arc::new(Handoff::default());
        let theirs = Arc::clone(&handoff);
        let worker = std::thread::Builder::new()
            .name("engine".to_owned())
            .spawn(move || {
                // However the thread ends (an error, a panic), decoding stops waiting for it.
                let _stop = StopOnDrop(Arc::clone(&theirs));
                let (mut engine, mut state) = (engine, state);
                let mut waited = Duration::ZERO;
                let mut spent = None;
                loop {
                    let asked = Instant::now();
                    let Some(batch) = theirs.take(spent.take()) else {
                        break;
                    };
                    waited += asked.elapsed();
                    for obs in &batch {
                        engine.handle_ref(obs);
                        after(&mut engine, &mut state)?;
                    }
                    spent = Some(batch);
                }
                Ok((engine, state, waited))
            })?;
        Ok(Self {
            batch: Vec::with_capacity(BATCH),
            handoff,
            worker: Some(worker),
            stopped: false,
            waited: Duration::ZERO,
        })
    }

    /// Whether the engine's thread has stopped (its `after` failed, or it panicked): what is
    /// handed over now is dropped; [`EngineThread::finish`] says why.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Hands over what is left, waits for the engine's thread and gives back the engine, the
    /// state and how long each thread waited for the other, or the first error of `after`. A
    /// panic on the engine's thread goes on here.
    pub fn finish(mut self) -> Result<(Engine, T, Waits), E> {
        self.hand_over();
        self.handoff.close();
        let Some(worker) = self.worker.take() else {
            unreachable!("the worker is taken only here and in drop");
        };
        let decoding = self.waited;
        match worker.join() {
            Ok(r) => r.map(|(engine, state, waited)| {
                let waits = Waits {
                    engine: waited,
                    decoding,
                };
                (engine, state, waits)
            }),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    fn hand_over(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let full = std::mem::take(&mut self.batch);
        let asked = Instant::now();
        let next = self.handoff.give(full);
        self.waited += asked.elapsed();
        match next {
            Some(next) => self.batch = next,
            None => self.stopped = true,
        }
    }
}

impl<T: Send + 'static, E: Send + 'static> ObservationSink for EngineThread<T, E> {
    fn handle(&mut self, obs: Observation) {
        self.handle_built(|| obs);
    }

    #[inline]
    fn handle_built(&mut self, build: impl FnOnce() -> Observation) {
        if self.stopped {
            return;
        }
        // Room for one is always there (a full batch is handed over at once); `reserve` makes
        // sure. Built in the batch's free slot, not on the stack and copied in.
        self.batch.reserve(1);
        let len = self.batch.len();
        if let Some(slot) = self.batch.spare_capacity_mut().first_mut() {
            slot.write(build());
            // SAFETY: the slot past the batch's length was just written.
            unsafe { self.batch.set_len(len + 1) };
        }
        if self.batch.len() >= BATCH {
            self.hand_over();
        }
    }
}

impl<T, E> Drop for EngineThread<T, E> {
    fn drop(&mut self) {
        // Not finished (an early return): close the hand-over and let the thread end.
        self.handoff.close();
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

/// What [`decode_and_match`] ends with.
pub struct Matched<T> {
    /// The engine after the last observation (not finished).
    pub engine: Engine,
    /// The state given to `after`.
    pub state: T,
    /// The files that could not be read, or broke half-way.
    pub file_errors: Vec<FileError>,
    /// The newest packet time fed (to finish the run with).
    pub last_ts: u64,
    /// With the engine on its own thread, how long each thread waited for the other.
    pub waits: Option<Waits>,
}

/// Decodes `files` with `analyzer` and matches what they carry in `engine`, the user's
/// `statements` about captures applied; `after` runs after each observation with `state`.
/// With `own_thread`, the engine runs on a thread of its own ([`EngineThread`]); the engine
/// sees the same observations in the same order either way.
pub fn decode_and_match<T, E>(
    analyzer: &mut Analyzer,
    files: &[PathBuf],
    statements: &[(String, CaptureHint)],
    engine: Engine,
    state: T,
    after: AfterObservation<T, E>,
    own_thread: bool,
) -> Result<Matched<T>, E>
where
    T: Send + 'static,
    E: From<std::io::Error> + Send + 'static,
{
    let feed = FrameFeed::default();
    decode_and_match_fed(
        analyzer, files, statements, engine, state, after, own_thread, feed,
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
    after: AfterObservation<T, E>,
    own_thread: bool,
    mut feed: FrameFeed,
) -> Result<Matched<T>, E>
where
    T: Send + 'static,
    E: From<std::io::Error> + Send + 'static,
{
    if !own_thread {
        let mut correlator = Correlator::with_sink(engine);
        correlator.state_all(statements);
        let mut state = state;
        let file_errors = analyzer.run_files(files, &mut |r| {
            feed.observe(&mut correlator, &r);
            after(correlator.engine_mut(), &mut state)
        })?;
        feed.flush_kernel(&mut correlator);
        after(correlator.engine_mut(), &mut state)?;
        return Ok(Matched {
            engine: correlator.into_sink(),
            state,
            file_errors,
            last_ts: feed.last_ts(),
            waits: None,
        });
    }
    let thread = EngineThread::spawn(engine, state, after)?;
    let mut correlator = Correlator::with_sink(thread);
    correlator.state_all(statements);
    let decoded = analyzer.run_files(files, &mut |r| {
        feed.observe(&mut correlator, &r);
        // The engine's thread stopped on an error: decoding stops too (the error comes
        // from `finish`).
        match correlator.sink_mut().stopped() {
            true => Err(()),
            false => Ok(()),
        }
    });
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
