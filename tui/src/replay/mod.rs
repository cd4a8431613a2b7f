//! Replay of a recorded capture through the same UI: a player thread owns the recording and
//! the folded state and publishes snapshots at the replay position, with play/pause, speed and
//! seek driven by the UI's requests.
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::app::Request;
use crate::source::{snapshot_channel, ChannelSource, SnapshotFeed};
use crate::view::format;

pub mod fold;
pub mod load;
pub mod packets;
pub mod tcp;

pub use load::{load, LoadError, Recording};
pub use packets::{PacketRecording, PacketSettings};

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

/// The replay clock: position in capture time, speed and pause, moved by wall time and by the
/// UI's requests. Shared by the JSON Lines and the packet-capture players.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayClock {
    start_ns: u64,
    end_ns: u64,
    /// Replay time (Unix epoch ns).
    now_ns: u64,
    speed: f64,
    paused: bool,
}

impl ReplayClock {
    /// A clock at `start_ns` of a recording ending at `end_ns`.
    pub fn new(start_ns: u64, end_ns: u64, options: PlayOptions) -> Self {
        Self {
            start_ns,
            end_ns: end_ns.max(start_ns),
            now_ns: start_ns,
            speed: options.speed.clamp(SPEEDS.0, SPEEDS.1),
            paused: options.paused,
        }
    }

    /// The replay position (Unix epoch ns).
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// Replay speed (1.0 = as recorded).
    pub fn speed(&self) -> f64 {
        self.speed
    }

    /// Playing (not paused).
    pub fn playing(&self) -> bool {
        !self.paused
    }

    /// Moves the position to `target_ns`, within the recording.
    pub fn set(&mut self, target_ns: u64) {
        self.now_ns = target_ns.clamp(self.start_ns, self.end_ns);
    }

    /// The position after `wall` of real time at the current speed (unchanged when paused);
    /// pauses at the end.
    pub fn advance(&mut self, wall: Duration) -> u64 {
        if !self.paused {
            let step = (wall.as_nanos() as f64 * self.speed).min(u64::MAX as f64 / 2.0) as u64;
            self.set(self.now_ns.saturating_add(step));
            if self.at_end() {
                self.paused = true;
            }
        }
        self.now_ns
    }

    /// At the end of the recording.
    pub fn at_end(&self) -> bool {
        self.now_ns >= self.end_ns
    }

    /// Carries out a play request; returns the position to move to when it moves the
    /// position (seek, restart, play again from the end). `ResetWindows` is not the clock's.
    pub fn request(&mut self, request: Request) -> Option<u64> {
        match request {
            Request::ReplayPause => {
                let restart = self.paused && self.at_end();
                self.paused = !self.paused;
                restart.then_some(self.start_ns)
            }
            Request::ReplayFaster => {
                self.speed = (self.speed * 2.0).min(SPEEDS.1);
                None
            }
            Request::ReplaySlower => {
                self.speed = (self.speed / 2.0).max(SPEEDS.0);
                None
            }
            Request::ReplaySeek(secs) => {
                let delta = u64::from(secs.unsigned_abs()) * 1_000_000_000;
                let target = if secs < 0 {
                    self.now_ns.saturating_sub(delta)
                } else {
                    self.now_ns.saturating_add(delta)
                };
                Some(target.clamp(self.start_ns, self.end_ns))
            }
            Request::ReplayRestart => {
                self.paused = false;
                Some(self.start_ns)
            }
            Request::ResetWindows => None,
        }
    }

    /// `▶ 2x 00:12.3/01:30.0` (or `⏸`, `end`); `done` says everything has been applied.
    pub fn position(&self, done: bool) -> String {
        let state = if done && self.at_end() {
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
            format::nanos(self.now_ns.saturating_sub(self.start_ns)),
            format::nanos(self.end_ns.saturating_sub(self.start_ns))
        )
    }
}

/// The replay position of a JSON Lines recording: which items are applied, and the clock.
pub struct Player {
    recording: Recording,
    fold: fold::Fold,
    next: usize,
    clock: ReplayClock,
}

impl Player {
    /// A player at the start of `recording`.
    pub fn new(recording: Recording, options: PlayOptions) -> Self {
        let start = recording.start_ns();
        let fold = fold::Fold::new(start, notes(&recording));
        let clock = ReplayClock::new(start, recording.end_ns(), options);
        Self {
            recording,
            fold,
            next: 0,
            clock,
        }
    }

    /// Moves the replay clock to `target_ns`, applying every item up to it (rebuilding from the
    /// start when moving back).
    pub fn seek_to(&mut self, target_ns: u64) {
        if target_ns < self.clock.now_ns() {
            self.fold = fold::Fold::new(self.recording.start_ns(), notes(&self.recording));
            self.next = 0;
        }
        self.clock.set(target_ns);
        self.apply_due();
    }

    fn apply_due(&mut self) {
        let target = self.clock.now_ns();
        while let Some(item) = self.recording.items.get(self.next) {
            if item.ts_ns > target {
                break;
            }
            self.fold.apply(item);
            self.next += 1;
        }
    }

    /// Advances the replay clock by `wall` of real time at the current speed (nothing when
    /// paused).
    pub fn advance(&mut self, wall: Duration) {
        self.clock.advance(wall);
        self.apply_due();
    }

    /// All items applied.
    pub fn at_end(&self) -> bool {
        self.next >= self.recording.items.len() && self.clock.at_end()
    }

    /// Carries out a UI request.
    pub fn request(&mut self, request: Request) {
        if request == Request::ResetWindows {
            self.fold.reset_windows();
        } else if let Some(target) = self.clock.request(request) {
            self.seek_to(target);
        }
    }

    /// The snapshot at the current position.
    pub fn snapshot(&mut self) -> tboxscope_engine::snapshot::Snapshot {
        self.fold.snapshot(self.clock.now_ns())
    }

    /// `▶ 2x 00:12.3/01:30.0` (or `⏸`, `end`).
    pub fn position(&self) -> String {
        self.clock.position(self.at_end())
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

/// Opens the recording in `files` (one JSON Lines file, or one or more packet captures decoded
/// and correlated with `settings`) and starts a player thread; returns the source for the UI
/// loop.
pub fn start(
    files: &[PathBuf],
    options: PlayOptions,
    settings: PacketSettings,
) -> Result<(PlayerThread, ChannelSource), LoadError> {
    let Some(first) = files.first() else {
        return Err(LoadError::Empty {
            path: "(no file)".to_owned(),
            skipped: "nothing to replay".to_owned(),
        });
    };
    let name = format!(
        "replay {}",
        files
            .iter()
            .map(|p| p.file_name().map_or_else(
                || p.display().to_string(),
                |n| n.to_string_lossy().into_owned()
            ))
            .collect::<Vec<_>>()
            .join(" + ")
    );
    let (feed, source) = snapshot_channel(name);
    let stop = Arc::new(AtomicBool::new(false));
    let thread_stop = Arc::clone(&stop);
    let builder = std::thread::Builder::new().name("tboxscope-replay".to_owned());
    let spawned = if packets::is_packet_capture(first)? {
        for f in &files[1..] {
            if !packets::is_packet_capture(f)? {
                return Err(LoadError::Mixed {
                    path: f.display().to_string(),
                });
            }
        }
        let recording = PacketRecording::scan(files, settings)?;
        builder.spawn(move || packets::run(&recording, options, &feed, &thread_stop))
    } else {
        if let Some(extra) = files.get(1) {
            return Err(LoadError::Mixed {
                path: extra.display().to_string(),
            });
        }
        let player = Player::new(load(first)?, options);
        let period = Duration::from_millis(1000 / u64::from(options.snapshots_per_s.max(1)));
        builder.spawn(move || run(player, &feed, period, &thread_stop))
    };
    let handle = spawned.map_err(|cause| LoadError::Io {
        path: "replay thread".to_owned(),
        cause,
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
        let was_playing = player.clock.playing();
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
