//! The kernel's TCP view for the live UIs: the eBPF TCP probes (the same ones `tboxscope
//! capture` loads) read on a thread of their own, each record turned into an engine
//! [`TcpEvent`] by [`Record::engine_event`] (as replay turns a recorded one: live, replay and
//! `lab run` read TCP alike), with the socket's path named by its local address.
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use probe_user::capture::records::Record;
use probe_user::capture::watch::TcpWatch;
use probe_user::source::ebpf::{HookState, ProbeOptions};
use tboxscope_engine::input::TcpEvent;

/// What the TCP probe thread reports.
#[derive(Debug)]
pub enum TcpMessage {
    /// A kernel TCP event for the engine.
    Event(Box<TcpEvent>),
    /// The probes' state, for the health panel (`TCP probes: 4/4 hooks attached`).
    Status(String),
    /// Kernel events lost so far.
    Dropped(u64),
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
        let (tx, rx) = crossbeam_channel::bounded::<TcpMessage>(65_536);
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = Arc::clone(&stop);
        let thread = thread::Builder::new()
            .name("tboxscope-tcp".into())
            .spawn(move || tcp_loop(&options, &local, &tx, &thread_stop))?;
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
    let path_of = |ip: IpAddr| {
        local
            .iter()
            .find(|(local, _)| *local == ip)
            .map(|(_, label)| label.clone())
    };
    let mut last_dropped = 0;
    while !stop.load(Ordering::Relaxed) {
        let polled = watch.poll(Duration::from_millis(100), &mut |ts, record: &Record| {
            if let Ok(mut event) = record.engine_event(ts) {
                if let Some(path) = path_of(event.local.ip()) {
                    event.path = path;
                }
                let _ = tx.try_send(TcpMessage::Event(Box::new(event)));
            }
        });
        if let Err(e) = polled {
            let _ = tx.send(TcpMessage::Status(format!("TCP probes stopped: {e}")));
            return;
        }
        let drops = watch.drops();
        let dropped = drops.ring_full.saturating_add(drops.read_failed);
        if dropped != last_dropped {
            last_dropped = dropped;
            let _ = tx.try_send(TcpMessage::Dropped(dropped));
        }
    }
}
