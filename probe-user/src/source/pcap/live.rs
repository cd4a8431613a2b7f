//! Live capture with libpcap on several interfaces at once: one thread per interface, events on
//! one channel. An interface that fails (a modem reset deletes it) is reported as its path going
//! down and is reopened when it comes back; the other paths' captures go on.
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use tboxscope_decode::net::LinkType;

use crate::capture::clock::WallClock;

/// One interface to capture on, and the path label it stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceSpec {
    /// The interface name (`eth0`).
    pub name: String,
    /// The path label used in every output (`4G`); the interface name when not given.
    pub label: String,
    /// Network namespace the interface lives in (`/run/netns/NAME`); `None`: the caller's.
    pub namespace: Option<String>,
}

impl InterfaceSpec {
    /// Parses `IFACE` or `IFACE=LABEL`.
    pub fn parse(spec: &str) -> Result<Self, LiveError> {
        let (name, label) = match spec.split_once('=') {
            Some((n, l)) => (n.trim(), l.trim()),
            None => (spec.trim(), spec.trim()),
        };
        if name.is_empty() || label.is_empty() {
            return Err(LiveError::BadSpec(spec.to_owned()));
        }
        Ok(Self {
            name: name.to_owned(),
            label: label.to_owned(),
            namespace: None,
        })
    }

    /// The same interface inside network namespace `ns` (`/run/netns/NS`).
    pub fn in_namespace(mut self, ns: &str) -> Self {
        self.namespace = Some(ns.to_owned());
        self
    }

    /// The default: `eth0` and `eth1` (4G and 5G on the T-Box).
    pub fn defaults() -> Vec<Self> {
        ["eth0", "eth1"]
            .iter()
            .map(|n| Self {
                name: (*n).to_owned(),
                label: (*n).to_owned(),
                namespace: None,
            })
            .collect()
    }
}

/// Settings applied to every interface.
#[derive(Debug, Clone)]
pub struct LiveConfig {
    /// The interfaces (paths).
    pub interfaces: Vec<InterfaceSpec>,
    /// A BPF capture filter (tcpdump syntax), compiled by libpcap.
    pub filter: Option<String>,
    /// Bytes kept of each packet.
    pub snaplen: i32,
    /// Kernel buffer per interface, bytes.
    pub buffer_size: i32,
    /// Deliver packets as they arrive instead of in blocks the kernel hands over when full or
    /// after the read timeout (off by default: one wake-up per packet cannot keep up with
    /// 100k packets/s and more).
    pub immediate: bool,
    /// Most packets per [`LiveEvent::Packets`] batch.
    pub batch: usize,
    /// How often libpcap's drop counters are reported.
    pub stats_interval: Duration,
    /// How often a lost interface is tried again.
    pub reopen_interval: Duration,
    /// Events (batches) that may wait in the channel before capture threads block (the kernel
    /// buffer then fills and libpcap counts drops, which are reported).
    pub channel_capacity: usize,
}

/// How long a block of packets may wait in the kernel before libpcap hands it over when
/// immediate mode is off (`pcap_set_timeout`): the added latency bound.
pub const READ_TIMEOUT_MS: i32 = 50;

impl Default for LiveConfig {
    fn default() -> Self {
        Self {
            interfaces: InterfaceSpec::defaults(),
            filter: None,
            snaplen: 65_535,
            buffer_size: 32 << 20,
            immediate: false,
            batch: 256,
            stats_interval: Duration::from_secs(1),
            reopen_interval: Duration::from_millis(200),
            channel_capacity: 1 << 10,
        }
    }
}

/// Why live capture could not start.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// An `-i` value that is not `IFACE` or `IFACE=LABEL`.
    #[error("bad interface `{0}`: expected IFACE or IFACE=LABEL")]
    BadSpec(String),
    /// libpcap refused the interface.
    #[error("interface {interface}: {message}")]
    Open {
        /// The interface.
        interface: String,
        /// libpcap's message.
        message: String,
    },
    /// libpcap refused the filter.
    #[error("interface {interface}: capture filter `{filter}`: {message}")]
    Filter {
        /// The interface.
        interface: String,
        /// The filter.
        filter: String,
        /// libpcap's message.
        message: String,
    },
    /// The capture filter does not compile, whatever the interface.
    #[error("invalid capture filter `{filter}` (tcpdump syntax, e.g. `udp port 7101`): {message}")]
    BadFilter {
        /// The filter.
        filter: String,
        /// libpcap's message.
        message: String,
    },
    /// The link type of the interface is not one tboxscope decodes.
    #[error(
        "interface {interface}: link type {linktype} is not supported (tboxscope decodes {})",
        LinkType::SUPPORTED
    )]
    LinkType {
        /// The interface.
        interface: String,
        /// The `DLT_*` number.
        linktype: i32,
    },
    /// The OS refused a thread.
    #[error("starting capture thread: {0}")]
    Thread(std::io::Error),
    /// The interface's network namespace could not be entered.
    #[error("interface {interface}: network namespace {namespace}: {cause}")]
    Namespace {
        /// The interface.
        interface: String,
        /// The namespace name.
        namespace: String,
        /// Why.
        cause: std::io::Error,
    },
}

/// A packet captured live (owned: it crosses threads).
#[derive(Debug, Clone)]
pub struct LivePacket {
    /// Index of the path in [`LiveConfig::interfaces`].
    pub path: usize,
    /// Kernel timestamp, nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// Length on the wire.
    pub orig_len: u32,
    /// The interface's link layer.
    pub link: LinkType,
    /// The captured bytes.
    pub data: Vec<u8>,
}

/// libpcap's counters for one path, cumulative over the whole run (across reopens).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PathStats {
    /// Packets libpcap received.
    pub received: u64,
    /// Packets dropped because the kernel buffer was full (`ps_drop`).
    pub dropped: u64,
    /// Packets dropped by the interface or driver (`ps_ifdrop`).
    pub if_dropped: u64,
}

/// What the capture threads report.
#[derive(Debug, Clone)]
pub enum LiveEvent {
    /// Packets of one path, in capture order (up to [`LiveConfig::batch`]; one channel message
    /// for many packets).
    Packets(Vec<LivePacket>),
    /// The path's interface is open: at start, and again after it came back.
    PathUp {
        /// Path index.
        path: usize,
        /// True when this is a reopen after [`LiveEvent::PathDown`].
        reopened: bool,
        /// True when the kernel gives nanosecond timestamps (else microseconds).
        nanosecond: bool,
        /// When (wall clock, ns since the epoch).
        at_ns: u64,
    },
    /// The path's interface failed or disappeared; it is tried again every reopen interval.
    PathDown {
        /// Path index.
        path: usize,
        /// libpcap's message.
        reason: String,
        /// When (wall clock, ns since the epoch).
        at_ns: u64,
    },
    /// libpcap's drop counters, every stats interval and when the path goes down or stops.
    Stats {
        /// Path index.
        path: usize,
        /// The counters.
        stats: PathStats,
        /// When (wall clock, ns since the epoch).
        at_ns: u64,
    },
}

/// A running live capture; dropping it stops and joins the capture threads.
pub struct LiveCapture {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    events: Receiver<LiveEvent>,
    specs: Vec<InterfaceSpec>,
}

type Active = pcap::Capture<pcap::Active>;

extern "C" {
    // Part of libpcap ≥ 1.5 but not wrapped by the `pcap` crate.
    fn pcap_get_tstamp_precision(p: *mut std::ffi::c_void) -> std::ffi::c_int;
}

/// Longest wait for packets before the stop flag and the stats timer are checked again.
const WAIT_MS: i32 = 100;

/// Waits until `fd` is readable (or has an error to report), at most `ms` milliseconds.
fn wait_readable(fd: std::os::fd::RawFd, ms: i32) -> std::io::Result<()> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd on the stack, count 1; the fd is owned by the open capture.
    let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
    if rc < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(())
}

/// Opens one interface with the configured settings. An interface in another network
/// namespace is opened from a short-lived thread that has entered that namespace: a packet
/// socket belongs to the namespace it was created in, so the handle then captures there from
/// any thread, while this process's other threads stay where they are.
fn open(spec: &InterfaceSpec, cfg: &LiveConfig) -> Result<(Active, LinkType, bool), LiveError> {
    let Some(ns) = spec.namespace.clone() else {
        return open_here(spec, cfg);
    };
    let (spec2, cfg2) = (spec.clone(), cfg.clone());
    std::thread::Builder::new()
        .name(format!("pcap-open-{}", spec.name))
        .spawn(move || {
            enter_netns(&ns).map_err(|cause| LiveError::Namespace {
                interface: spec2.name.clone(),
                namespace: ns.clone(),
                cause,
            })?;
            open_here(&spec2, &cfg2)
        })
        .map_err(LiveError::Thread)?
        .join()
        .unwrap_or_else(|_| {
            Err(LiveError::Thread(std::io::Error::other(
                "capture open thread panicked",
            )))
        })
}

/// Moves the calling thread into network namespace `name` (`/run/netns/NAME`).
fn enter_netns(name: &str) -> std::io::Result<()> {
    let file = std::fs::File::open(format!("/run/netns/{name}"))?;
    // SAFETY: setns on a valid namespace fd we own; it changes only this thread's namespace.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Opens one interface in the calling thread's network namespace.
fn open_here(
    spec: &InterfaceSpec,
    cfg: &LiveConfig,
) -> Result<(Active, LinkType, bool), LiveError> {
    let open_err = |e: pcap::Error| LiveError::Open {
        interface: spec.name.clone(),
        message: e.to_string(),
    };
    let mut cap = pcap::Capture::from_device(spec.name.as_str())
        .map_err(open_err)?
        .precision(pcap::Precision::Nano)
        .snaplen(cfg.snaplen)
        .buffer_size(cfg.buffer_size)
        .immediate_mode(cfg.immediate)
        .timeout(READ_TIMEOUT_MS)
        .open()
        .map_err(open_err)?
        // Non-blocking, waited on with our own poll(2): libpcap's blocking read may sleep
        // forever on an idle interface, and the thread must notice a stop and report stats.
        .setnonblock()
        .map_err(open_err)?;
    if let Some(filter) = &cfg.filter {
        cap.filter(filter, true).map_err(|e| LiveError::Filter {
            interface: spec.name.clone(),
            filter: filter.clone(),
            message: e.to_string(),
        })?;
    }
    let dlt = cap.get_datalink().0;
    let link = u32::try_from(dlt)
        .ok()
        .and_then(LinkType::from_linktype)
        .ok_or(LiveError::LinkType {
            interface: spec.name.clone(),
            linktype: dlt,
        })?;
    // SAFETY: the handle is a live, activated pcap_t owned by `cap`; the call only reads it.
    let nano = unsafe { pcap_get_tstamp_precision(cap.as_ptr().cast()) } == 1;
    Ok((cap, link, nano))
}

/// Whether `e` only says that a non-blocking read found nothing: libpcap's netfilter reader
/// (`nflog:N`, libpcap 1.10) returns that as an error, "Can't receive packet: " followed by
/// the text of EAGAIN, where its other readers return no packet.
fn would_block(e: &pcap::Error) -> bool {
    let pcap::Error::PcapError(message) = e else {
        return false;
    };
    let eagain = std::io::Error::from_raw_os_error(libc::EAGAIN).to_string();
    let text = eagain.split(" (os error").next().unwrap_or(&eagain);
    message.ends_with(text)
}

/// Compiles `filter` as libpcap would on an Ethernet interface, without opening any: a
/// syntax error is found before privileges or interfaces matter.
pub fn check_filter(filter: &str) -> Result<(), LiveError> {
    let bad = |e: pcap::Error| LiveError::BadFilter {
        filter: filter.to_owned(),
        message: e.to_string(),
    };
    pcap::Capture::dead(pcap::Linktype::ETHERNET)
        .map_err(bad)?
        .compile(filter, true)
        .map_err(bad)?;
    Ok(())
}

impl LiveCapture {
    /// Opens every interface (any failure is returned before anything runs) and starts one
    /// capture thread per interface.
    pub fn start(config: LiveConfig) -> Result<Self, LiveError> {
        let mut opened = Vec::with_capacity(config.interfaces.len());
        for spec in &config.interfaces {
            opened.push(open(spec, &config)?);
        }
        let (tx, rx) = crossbeam_channel::bounded(config.channel_capacity.max(1));
        let stop = Arc::new(AtomicBool::new(false));
        let cfg = Arc::new(config);
        let mut threads = Vec::new();
        for (path, (cap, link, nano)) in opened.into_iter().enumerate() {
            let worker = Worker {
                path,
                cfg: Arc::clone(&cfg),
                tx: tx.clone(),
                stop: Arc::clone(&stop),
                base: PathStats::default(),
            };
            let name = format!("pcap-{}", cfg.interfaces[path].name);
            let handle = std::thread::Builder::new()
                .name(name)
                .spawn(move || worker.run(cap, link, nano))
                .map_err(LiveError::Thread)?;
            threads.push(handle);
        }
        Ok(Self {
            stop,
            threads,
            events: rx,
            specs: cfg.interfaces.clone(),
        })
    }

    /// The event channel.
    pub fn events(&self) -> &Receiver<LiveEvent> {
        &self.events
    }

    /// The interfaces, indexed by path.
    pub fn interfaces(&self) -> &[InterfaceSpec] {
        &self.specs
    }

    /// Asks the threads to stop without waiting. Each first delivers the packets the kernel
    /// still holds, so that its final [`LiveEvent::Stats`] counts no undelivered packet (drops
    /// aside); that takes up to two read timeouts plus slack (at most 2 s).
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Stops and joins the threads; events still queued stay readable from `events()`.
    pub fn stop(&mut self) {
        self.request_stop();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for LiveCapture {
    fn drop(&mut self) {
        self.stop();
    }
}

struct Worker {
    path: usize,
    cfg: Arc<LiveConfig>,
    tx: Sender<LiveEvent>,
    stop: Arc<AtomicBool>,
    /// Counters of previous openings of this interface.
    base: PathStats,
}

enum Ended {
    Stopped,
    Failed(String),
}

/// What one [`Worker::read_batch`] found.
enum Read {
    /// The batch is full; more may wait.
    Full,
    /// libpcap has nothing more for now.
    Empty,
    /// The interface failed.
    Failed(String),
}

/// At stop, how long the capture waits for the kernel's last block with no packet coming:
/// the kernel hands a partly filled block over at most two read timeouts after its last
/// packet; the rest is slack for a loaded machine.
const DRAIN_QUIET: Duration = Duration::from_millis(4 * READ_TIMEOUT_MS as u64);
/// At stop, the longest the capture goes on delivering what the kernel holds.
const DRAIN_MAX: Duration = Duration::from_secs(2);

/// Makes the packet socket `fd` take no more packets (a classic BPF filter that accepts none),
/// without touching libpcap's state: what it already holds stays readable.
fn accept_nothing(fd: std::os::fd::RawFd) -> std::io::Result<()> {
    let mut reject = [libc::sock_filter {
        // BPF_RET | BPF_K: return 0 bytes, i.e. drop.
        code: 0x06,
        jt: 0,
        jf: 0,
        k: 0,
    }];
    let program = libc::sock_fprog {
        len: 1,
        filter: reject.as_mut_ptr(),
    };
    // SAFETY: `program` points at one valid instruction that lives across the call; the
    // kernel copies the program; `fd` is the open capture's socket.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&program as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

impl Worker {
    /// Sends an event, waiting while the channel is full; false once stopped or nobody listens.
    fn emit(&self, mut ev: LiveEvent) -> bool {
        loop {
            match self.tx.send_timeout(ev, Duration::from_millis(100)) {
                Ok(()) => return true,
                Err(crossbeam_channel::SendTimeoutError::Disconnected(_)) => return false,
                Err(crossbeam_channel::SendTimeoutError::Timeout(back)) => {
                    if self.stop.load(Ordering::Relaxed) {
                        return false;
                    }
                    ev = back;
                }
            }
        }
    }

    fn run(mut self, cap: Active, link: LinkType, nano: bool) {
        let mut current = Some((cap, link, nano));
        let mut reopened = false;
        while !self.stop.load(Ordering::Relaxed) {
            let Some((mut cap, link, nano)) = current.take() else {
                match self.wait_for_interface() {
                    Some(c) => {
                        current = Some(c);
                        reopened = true;
                        continue;
                    }
                    None => break,
                }
            };
            let up = LiveEvent::PathUp {
                path: self.path,
                reopened,
                nanosecond: nano,
                at_ns: WallClock::unix_now(),
            };
            if !self.emit(up) {
                return;
            }
            let ended = self.capture(&mut cap, link, nano);
            let last = self.stats(&mut cap);
            self.base = last;
            drop(cap);
            self.emit(LiveEvent::Stats {
                path: self.path,
                stats: last,
                at_ns: WallClock::unix_now(),
            });
            match ended {
                Ended::Stopped => return,
                Ended::Failed(reason) => {
                    let down = LiveEvent::PathDown {
                        path: self.path,
                        reason,
                        at_ns: WallClock::unix_now(),
                    };
                    if !self.emit(down) {
                        return;
                    }
                }
            }
        }
    }

    /// Cumulative counters: this opening's plus the previous ones'.
    fn stats(&self, cap: &mut Active) -> PathStats {
        match cap.stats() {
            Ok(s) => PathStats {
                received: self.base.received + u64::from(s.received),
                dropped: self.base.dropped + u64::from(s.dropped),
                if_dropped: self.base.if_dropped + u64::from(s.if_dropped),
            },
            Err(_) => self.base,
        }
    }

    fn capture(&mut self, cap: &mut Active, link: LinkType, nano: bool) -> Ended {
        let mut next_stats = Instant::now() + self.cfg.stats_interval;
        let batch_max = self.cfg.batch.max(1);
        let mut batch = Vec::with_capacity(batch_max);
        // Packets delivered by this opening of the interface.
        let mut delivered = 0u64;
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return self.drain(cap, link, nano, delivered);
            }
            // Take what libpcap has (a kernel block at a time) up to one batch, then send it.
            let read = self.read_batch(cap, link, nano, &mut batch, batch_max);
            delivered += batch.len() as u64;
            if !batch.is_empty() {
                let full = std::mem::replace(&mut batch, Vec::with_capacity(batch_max));
                // Deliver what was captured before a failure too.
                if !self.emit(LiveEvent::Packets(full)) {
                    return Ended::Stopped;
                }
            }
            match read {
                Read::Full => {}
                Read::Empty => {
                    if let Err(e) = wait_readable(cap.as_raw_fd(), WAIT_MS) {
                        return Ended::Failed(format!("waiting for packets: {e}"));
                    }
                }
                Read::Failed(e) => return Ended::Failed(e),
            }
            if Instant::now() >= next_stats {
                next_stats += self.cfg.stats_interval;
                let stats = self.stats(cap);
                let ev = LiveEvent::Stats {
                    path: self.path,
                    stats,
                    at_ns: WallClock::unix_now(),
                };
                if !self.emit(ev) {
                    return Ended::Stopped;
                }
            }
        }
    }

    /// Moves the packets libpcap has now into `batch`, up to `batch_max`.
    fn read_batch(
        &self,
        cap: &mut Active,
        link: LinkType,
        nano: bool,
        batch: &mut Vec<LivePacket>,
        batch_max: usize,
    ) -> Read {
        while batch.len() < batch_max {
            match cap.next_packet() {
                Ok(p) => {
                    let ts = p.header.ts;
                    let sub = u64::try_from(ts.tv_usec).unwrap_or(0);
                    let ts_ns = u64::try_from(ts.tv_sec)
                        .unwrap_or(0)
                        .saturating_mul(1_000_000_000)
                        .saturating_add(if nano { sub } else { sub * 1_000 });
                    batch.push(LivePacket {
                        path: self.path,
                        ts_ns,
                        orig_len: p.header.len,
                        link,
                        data: p.data.to_vec(),
                    });
                }
                Err(pcap::Error::TimeoutExpired) => return Read::Empty,
                Err(e) if would_block(&e) => return Read::Empty,
                Err(e) => return Read::Failed(e.to_string()),
            }
        }
        Read::Full
    }

    /// At stop: delivers the packets the kernel still holds. With immediate mode off the last
    /// ones sit in a partly filled block that the kernel hands over only after the read
    /// timeout; closing the socket before would lose them although libpcap counted them
    /// (`ps_recv`). The socket first stops taking packets (a filter that accepts none), then
    /// is read until every counted packet was delivered, or nothing came for
    /// [`DRAIN_QUIET`] (packets libpcap itself discarded are never delivered), at most
    /// [`DRAIN_MAX`].
    fn drain(&mut self, cap: &mut Active, link: LinkType, nano: bool, mut delivered: u64) -> Ended {
        if let Err(e) = accept_nothing(cap.as_raw_fd()) {
            log::warn!(
                "interface {}: packets arriving during the stop are counted but not delivered: {e}",
                self.cfg.interfaces[self.path].name
            );
        }
        let batch_max = self.cfg.batch.max(1);
        let mut batch = Vec::with_capacity(batch_max);
        let start = Instant::now();
        let mut last_packet = start;
        loop {
            let read = self.read_batch(cap, link, nano, &mut batch, batch_max);
            if !batch.is_empty() {
                delivered += batch.len() as u64;
                last_packet = Instant::now();
                let full = std::mem::replace(&mut batch, Vec::with_capacity(batch_max));
                if !self.emit(LiveEvent::Packets(full)) {
                    return Ended::Stopped;
                }
            }
            match read {
                Read::Full => continue,
                Read::Failed(e) => return Ended::Failed(e),
                Read::Empty => {}
            }
            let counted = match cap.stats() {
                Ok(s) => u64::from(s.received).saturating_sub(u64::from(s.dropped)),
                Err(_) => return Ended::Stopped,
            };
            let now = Instant::now();
            if delivered >= counted || now >= start + DRAIN_MAX || now >= last_packet + DRAIN_QUIET
            {
                return Ended::Stopped;
            }
            if let Err(e) = wait_readable(cap.as_raw_fd(), READ_TIMEOUT_MS) {
                return Ended::Failed(format!("waiting for packets: {e}"));
            }
        }
    }

    /// Polls until the interface opens again, or the capture stops (`None`).
    fn wait_for_interface(&self) -> Option<(Active, LinkType, bool)> {
        let spec = &self.cfg.interfaces[self.path];
        while !self.stop.load(Ordering::Relaxed) {
            std::thread::sleep(self.cfg.reopen_interval);
            if let Ok(c) = open(spec, &self.cfg) {
                return Some(c);
            }
        }
        None
    }
}

/// The IP addresses of interface `name`, as libpcap lists them (empty when it has none or the
/// list cannot be read): tells which path a local socket address belongs to.
pub fn interface_addresses(name: &str) -> Vec<std::net::IpAddr> {
    pcap::Device::list()
        .unwrap_or_default()
        .into_iter()
        .filter(|d| d.name == name)
        .flat_map(|d| d.addresses.into_iter().map(|a| a.addr))
        .collect()
}
