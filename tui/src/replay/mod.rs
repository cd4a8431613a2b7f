//! Replay of a recorded capture through the same UI: a player thread owns the recording and
//! the folded state and publishes snapshots at the replay position, with play/pause, speed and
//! seek driven by the UI's requests.
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::app::Request;
use crate::source::{snapshot_channel, ChannelSource, SnapshotFeed};
use crate::view::format;

pub mod fold;
pub mod load;
pub mod tcp;

pub use load::{load, LoadError, Recording};

/// How the player starts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlayOptions {
    /// Replay speed (1.0 = as recorded).
    pub speed: f64,
    /// Start paused.
    pub paused: bool,
    /// Snapshots published per second of wall time.
    pub snapshots_per_s: u32,
}

impl Default for PlayOptions {
    fn default() -> Self {
        Self {
            speed: 1.0,
            paused: false,
            snapshots_per_s: 5,
        }
    }
}

/// Slowest and fastest replay speeds.
pub const SPEEDS: (f64, f64) = (1.0 / 16.0, 1024.0);

/// The replay position: which items are applied and the replay clock.
pub struct Player {
    recording: Recording,
    fold: fold::Fold,
    next: usize,
    /// Replay time (Unix epoch ns).
    now_ns: u64,
    speed: f64,
    paused: bool,
}

impl Player {
    /// A player at the start of `recording`.
    pub fn new(recording: Recording, options: PlayOptions) -> Self {
        let start = recording.start_ns();
        let fold = fold::Fold::new(start, notes(&recording));
        Self {
            recording,
            fold,
            next: 0,
            now_ns: start,
            speed: options.speed.clamp(SPEEDS.0, SPEEDS.1),
            paused: options.paused,
        }
    }

    /// Moves the replay clock to `target_ns`, applying every item up to it (rebuilding from the
    /// start when moving back).
    pub fn seek_to(&mut self, target_ns: u64) {
        let target = target_ns.clamp(self.recording.start_ns(), self.recording.end_ns());
        if target < self.now_ns {
            self.fold = fold::Fold::new(self.recording.start_ns(), notes(&self.recording));
            self.next = 0;
        }
        while let Some(item) = self.recording.items.get(self.next) {
            if item.ts_ns > target {
                break;
            }
            self.fold.apply(item);
            self.next += 1;
        }
        self.now_ns = target;
    }

    /// Advances the replay clock by `wall` of real time at the current speed (nothing when
    /// paused).
    pub fn advance(&mut self, wall: Duration) {
        if self.paused {
            return;
        }
        let step = (wall.as_nanos() as f64 * self.speed).min(u64::MAX as f64 / 2.0) as u64;
        self.seek_to(self.now_ns.saturating_add(step));
        if self.at_end() {
            self.paused = true;
        }
    }

    /// All items applied.
    pub fn at_end(&self) -> bool {
        self.next >= self.recording.items.len() && self.now_ns >= self.recording.end_ns()
    }

    /// Carries out a UI request.
    pub fn request(&mut self, request: Request) {
        match request {
            Request::ReplayPause => {
                if self.paused && self.at_end() {
                    self.seek_to(self.recording.start_ns());
                }
                self.paused = !self.paused;
            }
            Request::ReplayFaster => self.speed = (self.speed * 2.0).min(SPEEDS.1),
            Request::ReplaySlower => self.speed = (self.speed / 2.0).max(SPEEDS.0),
            Request::ReplaySeek(secs) => {
                let delta = u64::from(secs.unsigned_abs()) * 1_000_000_000;
                let target = if secs < 0 {
                    self.now_ns.saturating_sub(delta)
                } else {
                    self.now_ns.saturating_add(delta)
                };
                self.seek_to(target);
            }
            Request::ReplayRestart => self.seek_to(self.recording.start_ns()),
            Request::ResetWindows => self.fold.reset_windows(),
        }
    }

    /// The snapshot at the current position.
    pub fn snapshot(&mut self) -> tboxscope_engine::snapshot::Snapshot {
        self.fold.snapshot(self.now_ns)
    }

    /// `▶ 2x 00:12.3/01:30.0` (or `⏸`, `end`).
    pub fn position(&self) -> String {
        let start = self.recording.start_ns();
        let state = if self.at_end() {
            "end"
        } else if self.paused {
            "⏸"
        } else {
            "▶"
        };
        let speed = if self.speed >= 1.0 {
            format!("{}x", self.speed)
        } else {
            format!("1/{}x", (1.0 / self.speed).round())
        };
        format!(
            "{state} {speed} {}/{}",
            format::nanos(self.now_ns.saturating_sub(start)),
            format::nanos(self.recording.end_ns().saturating_sub(start))
        )
    }
}

fn notes(recording: &Recording) -> Vec<String> {
    let mut notes = vec![format!(
        "replay: {} records; skipped {}",
        recording.items.len(),
        recording.skipped_text()
    )];
    if let Some(header) = &recording.header {
        if let Some(version) = header.get("schema").and_then(|v| v.as_str()) {
            notes.push(format!("recorded with schema {version}"));
        }
    }
    notes
}

/// A running player thread; dropping it stops the thread.
pub struct PlayerThread {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Drop for PlayerThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

/// Loads `path` and starts a player thread; returns the source for the UI loop.
pub fn start(
    path: &Path,
    options: PlayOptions,
) -> Result<(PlayerThread, ChannelSource), LoadError> {
    let recording = load(path)?;
    let name = format!(
        "replay {}",
        path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned()
        )
    );
    let (feed, source) = snapshot_channel(name);
    let stop = Arc::new(AtomicBool::new(false));
    let thread_stop = Arc::clone(&stop);
    let player = Player::new(recording, options);
    let period = Duration::from_millis(1000 / u64::from(options.snapshots_per_s.max(1)));
    let handle = std::thread::Builder::new()
        .name("tboxscope-replay".to_owned())
        .spawn(move || run(player, &feed, period, &thread_stop))
        .map_err(|source| LoadError::Io {
            path: "replay thread".to_owned(),
            source,
        })?;
    Ok((
        PlayerThread {
            stop,
            handle: Some(handle),
        },
        source,
    ))
}

fn run(mut player: Player, feed: &SnapshotFeed, period: Duration, stop: &AtomicBool) {
    let mut last = Instant::now();
    let mut changed = true;
    while !stop.load(Ordering::SeqCst) {
        for request in feed.requests() {
            player.request(request);
            changed = true;
        }
        let now = Instant::now();
        let was_playing = !player.paused;
        player.advance(now - last);
        last = now;
        if changed || was_playing {
            feed.publish(player.snapshot());
            feed.set_position(Some(player.position()));
        }
        changed = false;
        std::thread::sleep(period);
    }
}
