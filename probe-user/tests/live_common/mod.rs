//! Live captures started inside a network namespace of [`tboxscope_test_support::netns`].

use std::time::{Duration, Instant};

use probe_user::source::pcap::{LiveCapture, LiveConfig, LiveEvent};
use tboxscope_test_support::netns::spawn_in;

/// Starts a live capture of `cfg` inside namespace `ns` and waits (at most 5 s) until each of
/// its interfaces is up; returns it with the events so far.
pub fn capture_in(ns: &str, cfg: LiveConfig) -> (LiveCapture, Vec<LiveEvent>) {
    let interfaces = cfg.interfaces.len();
    let cap = spawn_in(ns, move || LiveCapture::start(cfg))
        .join()
        .unwrap()
        .unwrap();
    let mut events = Vec::new();
    let (mut up, until) = (0, Instant::now() + Duration::from_secs(5));
    while up < interfaces && Instant::now() < until {
        if let Ok(ev) = cap.events().recv_timeout(Duration::from_millis(20)) {
            up += usize::from(matches!(ev, LiveEvent::PathUp { .. }));
            events.push(ev);
        }
    }
    (cap, events)
}

/// Lets the last packets in (100 ms), stops `cap` and adds the rest of its events to `events`.
pub fn stop_capture(mut cap: LiveCapture, events: &mut Vec<LiveEvent>) {
    std::thread::sleep(Duration::from_millis(100));
    cap.stop();
    while let Ok(ev) = cap.events().try_recv() {
        events.push(ev);
    }
}
