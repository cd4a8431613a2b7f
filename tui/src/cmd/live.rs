//! The UI loop: draws the newest snapshot of a [`SnapshotSource`] at a fixed rate and turns
//! keys into actions. It never waits for the capture: the source is read without blocking,
//! and a key is handled as soon as it arrives.
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use ratatui::crossterm::event::{self, Event};
use tboxscope::app::{Action, App};
use tboxscope::input;
use tboxscope::source::SnapshotSource;
use tboxscope::terminal::TerminalGuard;
use tboxscope::view::{self, Theme};
use tboxscope_engine::snapshot::Snapshot;

/// How the loop runs.
#[derive(Debug, Clone, Copy)]
pub struct LiveOptions {
    /// Frames per second when nothing happens (≥ 4).
    pub fps: u32,
    /// Offer the replay keys.
    pub replay: bool,
}

impl Default for LiveOptions {
    fn default() -> Self {
        Self {
            fps: 5,
            replay: false,
        }
    }
}

/// What a UI run cost, for the benchmark.
#[derive(Debug, Clone, Copy, Default)]
pub struct UiStats {
    /// Frames drawn.
    pub frames: u64,
    /// Wall time the UI ran.
    pub wall: Duration,
    /// CPU time of the UI thread (user + system).
    pub ui_cpu: Duration,
}

/// CPU time (user + system) of the calling thread.
pub fn thread_cpu() -> Duration {
    // SAFETY: getrusage writes into the zeroed struct we own; RUSAGE_THREAD is valid on Linux.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: see above; the pointer is to a live, properly aligned rusage.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    if rc != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// Runs the UI over `source` until the user quits or a signal arrives. The terminal is
/// restored before this returns, whatever happened.
pub fn run(source: &mut dyn SnapshotSource, options: LiveOptions) -> anyhow::Result<UiStats> {
    let theme = Theme::from_env();
    let (guard, mut tty) = TerminalGuard::enter()?;
    let started = Instant::now();
    let cpu_start = thread_cpu();
    let mut app = App::new(options.replay);
    let mut latest: Arc<Snapshot> = Arc::new(Snapshot::default());
    let mut shown = Arc::clone(&latest);
    let tick = Duration::from_millis(1000 / u64::from(options.fps.max(4)));
    let mut frames = 0u64;
    let mut dirty = true;
    let mut next_tick = Instant::now();
    while !app.quit && !guard.stopped() {
        if let Some(snapshot) = source.poll() {
            latest = snapshot;
            dirty = true;
        }
        if !app.frozen {
            shown = Arc::clone(&latest);
        }
        if dirty {
            let status = source.status();
            let mut drawn = view::Drawn::default();
            tty.draw(|frame| drawn = view::render(frame, &app, &shown, &status, &theme))
                .context("drawing the terminal")?;
            app.clamp(app.screen, drawn.rows);
            frames += 1;
            dirty = false;
        }
        let now = Instant::now();
        if now >= next_tick {
            next_tick = now + tick;
            // Redraw at least at the tick rate: timers (outage for …) move on their own.
            dirty = true;
        }
        if guard.stopped() {
            break;
        }
        // Wait in our own poll, not crossterm's: on a hung-up terminal crossterm's poll spins
        // without returning, and the hang-up must end the UI.
        if !event::poll(Duration::ZERO).context("reading the terminal")? {
            let wait = next_tick.saturating_duration_since(Instant::now());
            tboxscope::terminal::wait_for_input(wait);
            continue;
        }
        {
            match event::read().context("reading the terminal")? {
                Event::Key(key) => {
                    if let Some(action) = input::action_for(&key, app.editing_filter, app.replay) {
                        let action = match action {
                            Action::Enter => match view::selected_key(&app, &shown) {
                                Some(key) => Action::Open(key),
                                None => Action::Enter,
                            },
                            other => other,
                        };
                        app.apply(action);
                        for request in app.take_requests() {
                            source.request(request);
                        }
                        dirty = true;
                    }
                }
                Event::Resize(_, _) => dirty = true,
                _ => {}
            }
        }
    }
    let stats = UiStats {
        frames,
        wall: started.elapsed(),
        ui_cpu: thread_cpu().saturating_sub(cpu_start),
    };
    drop(guard);
    Ok(stats)
}
