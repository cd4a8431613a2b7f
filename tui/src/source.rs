//! Where the UI gets its snapshots. The capture (or replay) runs in its own thread with the
//! engine and publishes a snapshot a few times per second; the UI takes the newest one when it
//! draws and never waits for the capture, and the capture never waits for the UI (publishing
//! replaces the previous snapshot under a short lock).
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};

use tboxscope_engine::snapshot::Snapshot;

use crate::app::Request;
use crate::metrics::MetricsHub;
use crate::view::SourceStatus;

/// What the UI loop reads from.
pub trait SnapshotSource {
    /// The newest snapshot published since the last call, if any. Never blocks for long.
    fn poll(&mut self) -> Option<Arc<Snapshot>>;
    /// Forwards a request from the UI (reset windows, replay controls).
    fn request(&mut self, request: Request);
    /// What to show about the source in the bars.
    fn status(&self) -> SourceStatus;
}

#[derive(Default)]
struct Slot {
    latest: Option<Arc<Snapshot>>,
    status: SourceStatus,
    closed: bool,
}

fn lock(slot: &Mutex<Slot>) -> std::sync::MutexGuard<'_, Slot> {
    // A panic in the other thread while holding the lock leaves a usable value: keep going.
    slot.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The producer side, owned by the capture/engine thread.
pub struct SnapshotFeed {
    slot: Arc<Mutex<Slot>>,
    requests: Receiver<Request>,
    metrics: Option<MetricsHub>,
}

impl SnapshotFeed {
    /// Publishes a snapshot, replacing any the UI has not taken yet (and the metrics').
    pub fn publish(&self, snapshot: Snapshot) {
        let snapshot = Arc::new(snapshot);
        if let Some(hub) = &self.metrics {
            hub.publish(Arc::clone(&snapshot));
        }
        lock(&self.slot).latest = Some(snapshot);
    }

    /// Also hands every snapshot published to `hub` (`--metrics-listen`, `--otlp`).
    pub fn with_metrics(mut self, hub: Option<MetricsHub>) -> Self {
        self.metrics = hub;
        self
    }

    /// Sets the replay position line (`None` for live sources).
    pub fn set_position(&self, position: Option<String>) {
        lock(&self.slot).status.position = position;
    }

    /// Sets or clears a problem to show (the capture lost an interface, ...).
    pub fn set_problem(&self, problem: Option<String>) {
        lock(&self.slot).status.problem = problem;
    }

    /// Requests the UI made since the last call (reset windows, replay controls).
    pub fn requests(&self) -> Vec<Request> {
        self.requests.try_iter().collect()
    }
}

impl Drop for SnapshotFeed {
    fn drop(&mut self) {
        lock(&self.slot).closed = true;
    }
}

/// The consumer side of [`snapshot_channel`], handed to the UI loop.
pub struct ChannelSource {
    slot: Arc<Mutex<Slot>>,
    requests: Sender<Request>,
    name: String,
}

/// A feed for the capture thread and the matching source for the UI. `name` is shown in the
/// top bar (e.g. `live eth0+eth1`).
pub fn snapshot_channel(name: impl Into<String>) -> (SnapshotFeed, ChannelSource) {
    let slot = Arc::new(Mutex::new(Slot::default()));
    let (tx, rx) = mpsc::channel();
    (
        SnapshotFeed {
            slot: Arc::clone(&slot),
            requests: rx,
            metrics: None,
        },
        ChannelSource {
            slot,
            requests: tx,
            name: name.into(),
        },
    )
}

impl SnapshotSource for ChannelSource {
    fn poll(&mut self) -> Option<Arc<Snapshot>> {
        lock(&self.slot).latest.take()
    }

    fn request(&mut self, request: Request) {
        // The feed is gone when the capture stopped; the status line already says so.
        let _ = self.requests.send(request);
    }

    fn status(&self) -> SourceStatus {
        let slot = lock(&self.slot);
        let mut status = slot.status.clone();
        status.source = self.name.clone();
        if slot.closed && status.problem.is_none() {
            status.problem = Some("capture stopped".to_owned());
        }
        status
    }
}

/// A source made of closures: `snapshot` is called once per UI tick and must return quickly
/// (e.g. read a value another thread maintains); `request` receives the UI's requests.
pub struct FnSource<S, R> {
    snapshot: S,
    request: R,
    name: String,
}

impl<S, R> FnSource<S, R>
where
    S: FnMut() -> Option<Snapshot>,
    R: FnMut(Request),
{
    /// Wraps the closures; `name` is shown in the top bar.
    pub fn new(name: impl Into<String>, snapshot: S, request: R) -> Self {
        Self {
            snapshot,
            request,
            name: name.into(),
        }
    }
}

impl<S, R> SnapshotSource for FnSource<S, R>
where
    S: FnMut() -> Option<Snapshot>,
    R: FnMut(Request),
{
    fn poll(&mut self) -> Option<Arc<Snapshot>> {
        (self.snapshot)().map(Arc::new)
    }

    fn request(&mut self, request: Request) {
        (self.request)(request);
    }

    fn status(&self) -> SourceStatus {
        SourceStatus {
            source: self.name.clone(),
            ..SourceStatus::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_snapshot_wins_and_requests_flow_back() {
        let (feed, mut source) = snapshot_channel("test");
        assert!(source.poll().is_none());
        feed.publish(Snapshot {
            ts_ns: 1,
            ..Snapshot::default()
        });
        feed.publish(Snapshot {
            ts_ns: 2,
            ..Snapshot::default()
        });
        assert_eq!(source.poll().map(|s| s.ts_ns), Some(2));
        assert!(source.poll().is_none());
        source.request(Request::ResetWindows);
        assert_eq!(feed.requests(), vec![Request::ResetWindows]);
        drop(feed);
        assert_eq!(source.status().problem.as_deref(), Some("capture stopped"));
    }
}
