//! Multipath QUIC peer (`tquic`, draft-05 multipath, Redundant scheduler): ONE connection over
//! both paths, every packet sent on each path. One unidirectional stream per message; the
//! receiver's tquic reassembles each stream by offsets, so a message's second copy is dropped
//! there (dedup by stream offsets) and the first complete copy is the arrival.
//!
//! tquic is driven the way its API asks (an event loop): one thread per end, one UDP socket per
//! path bound to that path's address inside the lab namespace, `poll(2)` on both, the
//! endpoint's timer, and the message queue looked at every few milliseconds.
//!
//! Which paths carried copies is not visible through tquic's stream API; the receiver reads it
//! from tquic's own qlog: every received packet's STREAM frames are logged while the driver
//! feeds that packet, and the driver knows which path's socket it came from. A packet carrying
//! a message's first byte (offset 0) counts as a copy on its path.
use std::cell::RefCell;
use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tquic::{
    Config, Connection, Endpoint, MultipathAlgorithm, PacketInfo, PacketSendHandler, TlsConfig,
    TransportHandler,
};

use super::{GroundTruth, Message, Transport};
use crate::error::{LabError, Result};
use crate::names::PathId;
use crate::sys;

const ALPN: &[u8] = b"tboxscope-lab";
/// Longest sleep of the event loop (the queue and the stop flag are looked at this often).
const TICK: Duration = Duration::from_millis(2);
/// How long the client waits for the handshake and path B's validation: a lost Initial costs
/// tquic a probe timeout of 1 s, then 2 s, 4 s, 8 s (a PATH_CHALLENGE is retried 8 times from
/// 25 ms, doubling), so a lossy preset (or a loaded machine, as in CI once) can need more than
/// 5 s, and S3 (5 % loss on path A, where the handshake runs) went past 15 s twice in CI.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// How much longer than [`HANDSHAKE_TIMEOUT`] the caller waits for the T-Box thread's own
/// verdict before giving up on the thread itself.
const VERDICT_GRACE: Duration = Duration::from_secs(5);
/// Largest UDP datagram read.
const MAX_DATAGRAM: usize = 65_535;

fn err(e: impl std::fmt::Display) -> LabError {
    LabError::peer(Transport::Mpquic.name(), e)
}

/// tquic's settings for both ends: multipath with the Redundant scheduler, plenty of streams,
/// and an ACK for every ack-eliciting packet (with the default threshold of 2, the second path
/// fires spurious PTOs at the lab's sub-millisecond RTT).
fn config(tls: TlsConfig) -> Result<Config> {
    let mut c = Config::new().map_err(err)?;
    c.enable_multipath(true);
    c.set_multipath_algorithm(MultipathAlgorithm::Redundant);
    c.set_ack_eliciting_threshold(1);
    c.set_initial_max_streams_uni(1_000_000);
    c.set_initial_max_streams_bidi(16);
    c.set_max_idle_timeout(60_000);
    c.set_active_connection_id_limit(4);
    c.set_tls_config(tls);
    Ok(c)
}

/// The socket of each path on this end, by local address.
struct Sockets {
    socks: Vec<(PathId, UdpSocket)>,
}

impl Sockets {
    fn bind(addrs: &[(PathId, SocketAddr)]) -> Result<Self> {
        let mut socks = Vec::new();
        for &(p, a) in addrs {
            let s = UdpSocket::bind(a).map_err(|e| LabError::io(format!("mpquic bind {a}"), e))?;
            s.set_nonblocking(true)
                .map_err(|e| LabError::io("mpquic nonblocking", e))?;
            socks.push((p, s));
        }
        Ok(Sockets { socks })
    }

    fn local(&self, p: PathId) -> Option<SocketAddr> {
        self.socks
            .iter()
            .find(|(q, _)| *q == p)
            .and_then(|(_, s)| s.local_addr().ok())
    }

    /// Waits until a socket is readable or `timeout` passed.
    fn wait(&self, timeout: Duration) {
        let mut fds: Vec<libc::pollfd> = self
            .socks
            .iter()
            .map(|(_, s)| libc::pollfd {
                fd: s.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let ms = i32::try_from(timeout.as_millis().max(1)).unwrap_or(i32::MAX);
        // SAFETY: `fds` is a live, correctly sized array of pollfd for the duration of the call.
        unsafe {
            libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms);
        }
    }
}

/// Sends tquic's packets out of the socket of the path whose local address they name.
struct Sender(Rc<Sockets>);

impl PacketSendHandler for Sender {
    fn on_packets_send(&self, pkts: &[(Vec<u8>, PacketInfo)]) -> tquic::Result<usize> {
        let mut sent = 0;
        for (data, info) in pkts {
            let sock = self
                .0
                .socks
                .iter()
                .find(|(_, s)| s.local_addr().ok() == Some(info.src))
                .map(|(_, s)| s);
            if let Some(s) = sock {
                match s.send_to(data, info.dst) {
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    // A path that is down (no route) loses the packet, as the network would.
                    Err(_) => {}
                }
            }
            sent += 1;
        }
        Ok(sent)
    }
}

/// Reads every datagram waiting on each socket into the endpoint; `current` is set to the
/// datagram's path while the endpoint processes it.
fn receive(ep: &mut Endpoint, socks: &Sockets, buf: &mut [u8], current: &AtomicU8) {
    for (p, s) in &socks.socks {
        let Ok(local) = s.local_addr() else { continue };
        while let Ok((n, from)) = s.recv_from(buf) {
            current.store(u8::from(*p == PathId::B), Ordering::Relaxed);
            let info = PacketInfo {
                src: from,
                dst: local,
                time: Instant::now(),
            };
            if let Some(b) = buf.get_mut(..n) {
                let _ = ep.recv(b, &info);
            }
        }
    }
}

/// Runs the endpoint's timers and sends what it has.
fn drive(ep: &mut Endpoint) {
    ep.on_timeout(Instant::now());
    let _ = ep.process_connections();
}

/// A peer's event-loop thread: stopped and joined when dropped (its owning task was aborted,
/// or its runtime ended); the loop looks at the flag every [`TICK`].
struct PeerThread {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Drop for PeerThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            if h.join().is_err() {
                log::warn!("mpquic: a peer thread panicked");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Receiver (gateway side)

/// What the gateway learns of each stream: the message it carries (once complete) and the
/// copies each path brought before that.
#[derive(Default)]
struct RxState {
    /// stream id → (message id once known, copies per path not yet recorded).
    streams: HashMap<u64, (Option<u64>, [u32; 2])>,
}

struct RxShared {
    truth: GroundTruth,
    current: AtomicU8,
    state: Mutex<RxState>,
}

impl RxShared {
    fn path(&self) -> PathId {
        if self.current.load(Ordering::Relaxed) == 1 {
            PathId::B
        } else {
            PathId::A
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut RxState) -> R) -> R {
        let mut g = match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        f(&mut g)
    }

    /// A packet of the current path carried the first byte of `stream`.
    fn copy(&self, stream: u64) {
        let p = self.path();
        let t = Transport::Mpquic.index();
        let known = self.with(|s| {
            let e = s.streams.entry(stream).or_default();
            if e.0.is_none() {
                e.1[usize::from(p == PathId::B)] += 1;
            }
            e.0
        });
        if let Some(id) = known {
            self.truth.copy(t, id, p);
        }
    }

    /// `stream` completed with `bytes` on the current path.
    fn complete(&self, stream: u64, bytes: &[u8]) {
        let t = Transport::Mpquic.index();
        let Ok(m) = Message::decode(bytes) else {
            self.truth.rejected(t);
            return;
        };
        if usize::from(m.transport) != t {
            self.truth.rejected(t);
            return;
        }
        let p = self.path();
        self.truth.first_arrival(t, m.id, p, sys::mono_ns());
        let copies = self.with(|s| {
            let e = s.streams.entry(stream).or_default();
            e.0 = Some(m.id);
            std::mem::take(&mut e.1)
        });
        for (i, n) in copies.iter().enumerate() {
            let path = if i == 1 { PathId::B } else { PathId::A };
            for _ in 0..*n {
                self.truth.copy(t, m.id, path);
            }
        }
    }
}

/// tquic's qlog of the gateway's connection, read as it is written: each received packet's
/// STREAM frames at offset 0 are copies on the path being fed.
struct QlogCopies {
    shared: Arc<RxShared>,
    line: Vec<u8>,
}

impl QlogCopies {
    fn event(&self, line: &[u8]) {
        // JSON-SEQ: a record separator, then one JSON object.
        let json = line.strip_prefix(b"\x1e").unwrap_or(line);
        if !json.windows(15).any(|w| w == b"packet_received") {
            return;
        }
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(json) else {
            return;
        };
        if v.get("name").and_then(|n| n.as_str()) != Some("quic:packet_received") {
            return;
        }
        let frames = v
            .get("data")
            .and_then(|d| d.get("frames"))
            .and_then(|f| f.as_array());
        for f in frames.into_iter().flatten() {
            if f.get("frame_type").and_then(|t| t.as_str()) == Some("stream")
                && f.get("offset").and_then(serde_json::Value::as_u64) == Some(0)
            {
                if let Some(id) = f.get("stream_id").and_then(serde_json::Value::as_u64) {
                    self.shared.copy(id);
                }
            }
        }
    }
}

impl std::io::Write for QlogCopies {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        for &b in buf {
            if b == b'\n' {
                let line = std::mem::take(&mut self.line);
                self.event(&line);
            } else if self.line.len() < 1 << 20 {
                self.line.push(b);
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

struct ServerHandler {
    shared: Arc<RxShared>,
    bufs: HashMap<u64, Vec<u8>>,
}

impl TransportHandler for ServerHandler {
    fn on_conn_created(&mut self, conn: &mut Connection) {
        let w = QlogCopies {
            shared: self.shared.clone(),
            line: Vec::new(),
        };
        conn.set_qlog(Box::new(w), "tboxscope-lab".into(), "gateway".into());
    }
    fn on_conn_established(&mut self, _conn: &mut Connection) {}
    fn on_conn_closed(&mut self, _conn: &mut Connection) {}
    fn on_stream_created(&mut self, _conn: &mut Connection, _stream_id: u64) {}
    fn on_stream_readable(&mut self, conn: &mut Connection, stream_id: u64) {
        let mut chunk = [0u8; 4096];
        loop {
            match conn.stream_read(stream_id, &mut chunk) {
                Ok((n, fin)) => {
                    let b = self.bufs.entry(stream_id).or_default();
                    if b.len() < 65_536 {
                        b.extend_from_slice(chunk.get(..n).unwrap_or(&[]));
                    }
                    if fin {
                        let whole = self.bufs.remove(&stream_id).unwrap_or_default();
                        self.shared.complete(stream_id, &whole);
                        return;
                    }
                    if n == 0 {
                        return;
                    }
                }
                Err(_) => return,
            }
        }
    }
    fn on_stream_writable(&mut self, _conn: &mut Connection, _stream_id: u64) {}
    fn on_stream_closed(&mut self, _conn: &mut Connection, stream_id: u64) {
        self.bufs.remove(&stream_id);
    }
    fn on_new_token(&mut self, _conn: &mut Connection, _token: Vec<u8>) {}
}

/// The self-signed certificate and key as PEM files tquic's BoringSSL can load.
fn identity_files() -> Result<(PathBuf, PathBuf)> {
    let ck = rcgen::generate_simple_self_signed(vec!["gateway.lab".to_string()]).map_err(err)?;
    let dir = std::env::temp_dir().join(format!("tboxscope-lab-mpquic-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| LabError::io("mpquic identity dir", e))?;
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    std::fs::write(&cert, ck.cert.pem()).map_err(|e| LabError::io("mpquic cert", e))?;
    std::fs::write(&key, ck.key_pair.serialize_pem()).map_err(|e| LabError::io("mpquic key", e))?;
    Ok((cert, key))
}

/// Listens on both paths of the gateway (namespace `ns`) and records every message; runs
/// until the returned task is dropped or aborted.
pub async fn listen(ns: String, truth: GroundTruth) -> Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<()>>();
    let flag = stop.clone();
    let handle = std::thread::Builder::new()
        .name("lab-mpquic-gw".into())
        .spawn(move || {
            let setup = || -> Result<(Endpoint, Rc<Sockets>, Arc<RxShared>)> {
                sys::enter_netns(&ns)?;
                let addrs: Vec<_> = PathId::BOTH
                    .iter()
                    .map(|&p| {
                        (
                            p,
                            SocketAddr::from((p.gateway_addr(), Transport::Mpquic.port())),
                        )
                    })
                    .collect();
                let socks = Rc::new(Sockets::bind(&addrs)?);
                let (cert, key) = identity_files()?;
                let tls = TlsConfig::new_server_config(
                    &cert.to_string_lossy(),
                    &key.to_string_lossy(),
                    vec![ALPN.to_vec()],
                    false,
                )
                .map_err(err)?;
                let _ = std::fs::remove_dir_all(cert.parent().unwrap_or(Path::new("/nonexistent")));
                let shared = Arc::new(RxShared {
                    truth,
                    current: AtomicU8::new(0),
                    state: Mutex::new(RxState::default()),
                });
                let handler = ServerHandler {
                    shared: shared.clone(),
                    bufs: HashMap::new(),
                };
                let ep = Endpoint::new(
                    Box::new(config(tls)?),
                    true,
                    Box::new(handler),
                    Rc::new(Sender(socks.clone())),
                );
                Ok((ep, socks, shared))
            };
            let (mut ep, socks, shared) = match setup() {
                Ok(x) => {
                    let _ = ready_tx.send(Ok(()));
                    x
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            let mut buf = vec![0u8; MAX_DATAGRAM];
            while !flag.load(Ordering::Relaxed) {
                receive(&mut ep, &socks, &mut buf, &shared.current);
                drive(&mut ep);
                socks.wait(ep.timeout().unwrap_or(TICK).min(TICK));
            }
            ep.close(true);
        })
        .map_err(|e| LabError::io("spawn the mpquic gateway thread", e))?;
    let thread = PeerThread {
        stop,
        handle: Some(handle),
    };
    ready_rx
        .recv()
        .map_err(|_| err("gateway thread ended early"))??;
    tokio::spawn(async move {
        let _thread = thread;
        std::future::pending::<()>().await;
    });
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Sender (T-Box side)

/// Whether the handshake finished, and the second path was asked for.
#[derive(Default)]
struct ClientStatus {
    established: bool,
    closed: bool,
}

struct ClientHandler {
    keylog: PathBuf,
    second_path: Option<(SocketAddr, SocketAddr)>,
    status: Rc<RefCell<ClientStatus>>,
}

/// The key log, written line by line as tquic hands secrets over.
struct KeylogFile(std::fs::File);

impl std::io::Write for KeylogFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write_all(buf)?;
        self.0.flush()?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl TransportHandler for ClientHandler {
    fn on_conn_created(&mut self, conn: &mut Connection) {
        if let Ok(f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.keylog)
        {
            conn.set_keylog(Box::new(KeylogFile(f)));
        }
    }
    fn on_conn_established(&mut self, conn: &mut Connection) {
        self.status.borrow_mut().established = true;
        if let Some((local, remote)) = self.second_path.take() {
            if let Err(e) = conn.add_path(local, remote) {
                log::warn!("mpquic: adding the second path failed: {e:?}");
            }
        }
    }
    fn on_conn_closed(&mut self, _conn: &mut Connection) {
        self.status.borrow_mut().closed = true;
    }
    fn on_stream_created(&mut self, _conn: &mut Connection, _stream_id: u64) {}
    fn on_stream_readable(&mut self, _conn: &mut Connection, _stream_id: u64) {}
    fn on_stream_writable(&mut self, _conn: &mut Connection, _stream_id: u64) {}
    fn on_stream_closed(&mut self, _conn: &mut Connection, _stream_id: u64) {}
    fn on_new_token(&mut self, _conn: &mut Connection, _token: Vec<u8>) {}
}

/// Connects from the T-Box over path A (the thread's namespace, which the peer's thread
/// inherits), adds path B once established, then sends each queued message on its own stream
/// until the returned task is dropped or aborted. Returns when both paths are active.
pub async fn connect(
    keylog: &Path,
    rx: mpsc::UnboundedReceiver<Vec<u8>>,
) -> Result<tokio::task::JoinHandle<Result<()>>> {
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<()>>();
    let flag = stop.clone();
    let keylog = keylog.to_path_buf();
    let handle = std::thread::Builder::new()
        .name("lab-mpquic-tbox".into())
        .spawn(move || client_loop(keylog, rx, &flag, &ready_tx))
        .map_err(|e| LabError::io("spawn the mpquic T-Box thread", e))?;
    let thread = PeerThread {
        stop,
        handle: Some(handle),
    };
    let ready = tokio::task::spawn_blocking(move || {
        ready_rx.recv_timeout(HANDSHAKE_TIMEOUT + VERDICT_GRACE)
    })
    .await
    .map_err(err)?;
    match ready {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e),
        Err(_) => {
            drop(thread);
            return Err(err(format!(
                "the T-Box thread said nothing in {} s",
                (HANDSHAKE_TIMEOUT + VERDICT_GRACE).as_secs()
            )));
        }
    }
    Ok(tokio::spawn(async move {
        let _thread = thread;
        std::future::pending::<()>().await;
        Ok(())
    }))
}

/// What the T-Box end is still waiting for when its deadline passes: the handshake, or path
/// B's validation (with tquic's state of that path), and the packets lost so far.
fn waiting_for(
    ep: &mut Endpoint,
    idx: u64,
    established: bool,
    (local, remote): (SocketAddr, SocketAddr),
) -> String {
    let Some(conn) = ep.conn_get_mut(idx) else {
        return "the connection is gone".into();
    };
    let lost = conn.stats().lost_count;
    let sent = conn.stats().sent_count;
    if !established {
        return format!("the handshake is not done ({lost} of {sent} packets lost)");
    }
    match conn.get_path(local, remote) {
        Ok(p) => format!(
            "path B is not active (tquic's path state {:?}; {lost} of {sent} packets lost)",
            p.state()
        ),
        Err(e) => format!("path B was never added ({e:?}; {lost} of {sent} packets lost)"),
    }
}

/// The T-Box end once set up: its endpoint, sockets, connection status, connection index and
/// path B's addresses (local, remote).
type ClientEnd = (
    Endpoint,
    Rc<Sockets>,
    Rc<RefCell<ClientStatus>>,
    u64,
    (SocketAddr, SocketAddr),
);

fn client_loop(
    keylog: PathBuf,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
    stop: &AtomicBool,
    ready: &std::sync::mpsc::Sender<Result<()>>,
) {
    let setup = || -> Result<ClientEnd> {
        let addrs: Vec<_> = PathId::BOTH
            .iter()
            .map(|&p| (p, SocketAddr::from((p.tbox_addr(), 0))))
            .collect();
        let socks = Rc::new(Sockets::bind(&addrs)?);
        let (Some(local_a), Some(local_b)) = (socks.local(PathId::A), socks.local(PathId::B))
        else {
            return Err(err("no local address"));
        };
        let remote = |p: PathId| SocketAddr::from((p.gateway_addr(), Transport::Mpquic.port()));
        let mut tls = TlsConfig::new_client_config(vec![ALPN.to_vec()], false).map_err(err)?;
        tls.set_verify(false);
        let status = Rc::new(RefCell::new(ClientStatus::default()));
        let handler = ClientHandler {
            keylog,
            second_path: Some((local_b, remote(PathId::B))),
            status: status.clone(),
        };
        let mut ep = Endpoint::new(
            Box::new(config(tls)?),
            false,
            Box::new(handler),
            Rc::new(Sender(socks.clone())),
        );
        let idx = ep
            .connect(
                local_a,
                remote(PathId::A),
                Some("gateway.lab"),
                None,
                None,
                None,
            )
            .map_err(err)?;
        Ok((ep, socks, status, idx, (local_b, remote(PathId::B))))
    };
    let (mut ep, socks, status, idx, path_b) = match setup() {
        Ok(x) => x,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let current = AtomicU8::new(0);
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut announced = false;
    let mut queue_open = true;
    let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
    while !stop.load(Ordering::Relaxed) {
        receive(&mut ep, &socks, &mut buf, &current);
        if !announced && Instant::now() >= deadline {
            let waiting = waiting_for(&mut ep, idx, status.borrow().established, path_b);
            let _ = ready.send(Err(err(format!(
                "{waiting} after {} s",
                HANDSHAKE_TIMEOUT.as_secs()
            ))));
            break;
        }
        // Ready once path B carries data too: the first messages then go on both paths.
        if !announced
            && status.borrow().established
            && ep
                .conn_get_mut(idx)
                .and_then(|c| c.get_path(path_b.0, path_b.1).ok().map(tquic::Path::active))
                .unwrap_or(false)
        {
            announced = true;
            let _ = ready.send(Ok(()));
        }
        if status.borrow().closed {
            let _ = ready.send(Err(err("connection closed")));
            break;
        }
        while queue_open && announced {
            match rx.try_recv() {
                Ok(m) => {
                    if let Some(conn) = ep.conn_get_mut(idx) {
                        if let Ok(sid) = conn.stream_uni_new(0, false) {
                            let _ = conn.stream_write(sid, m.into(), true);
                        }
                    }
                }
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => queue_open = false,
            }
        }
        drive(&mut ep);
        socks.wait(ep.timeout().unwrap_or(TICK).min(TICK));
    }
    ep.close(true);
}
