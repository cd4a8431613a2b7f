//! A small HTTP/1.1 server for Prometheus: `GET /metrics` answers the newest figures in the
//! Prometheus text format, or OpenMetrics when the `Accept` header asks for it. One thread,
//! one connection at a time, each bounded in size and time; it only reads the [`MetricsHub`].
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use probe_user::output::metrics::{render, Format};

use super::MetricsHub;

/// Largest request head read.
const MAX_REQUEST: usize = 16 * 1024;
/// How long a client may take to send its request, and to take the answer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the accept loop looks whether it should stop.
const POLL: Duration = Duration::from_millis(50);

/// The running endpoint; stopped when dropped.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Listens on `addr` (port 0: any free port) and serves `hub` from a thread of its own.
    pub fn start(addr: SocketAddr, hub: MetricsHub) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("tboxscope-metrics".into())
            .spawn(move || accept_loop(&listener, &hub, &flag))?;
        Ok(Self {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, hub: &MetricsHub, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, peer)) => {
                if let Err(e) = answer(stream, hub) {
                    log::debug!("metrics: request from {peer} failed: {e}");
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(POLL),
            Err(e) => {
                log::warn!("metrics: accept failed: {e}");
                std::thread::sleep(POLL);
            }
        }
    }
}

/// The request head: method, target and `Accept`, once the blank line has arrived.
fn read_head(stream: &mut TcpStream) -> std::io::Result<Option<(String, String, String)>> {
    let deadline = Instant::now() + CLIENT_TIMEOUT;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0_u8; 2048];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        if buf.len() > MAX_REQUEST || Instant::now() > deadline {
            return Ok(None);
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
    }
    let text = String::from_utf8_lossy(&buf);
    let mut lines = text.split("\r\n");
    let mut first = lines.next().unwrap_or_default().split(' ');
    let method = first.next().unwrap_or_default().to_owned();
    let target = first.next().unwrap_or_default().to_owned();
    let accept = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("accept"))
        .map(|(_, v)| v.trim().to_owned())
        .unwrap_or_default();
    Ok(Some((method, target, accept)))
}

fn answer(mut stream: TcpStream, hub: &MetricsHub) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    stream.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    let Some((method, target, accept)) = read_head(&mut stream)? else {
        return respond(
            &mut stream,
            "400 Bad Request",
            "text/plain",
            b"bad request\n",
            true,
        );
    };
    let path = target.split('?').next().unwrap_or_default();
    let head_only = method == "HEAD";
    if method != "GET" && !head_only {
        return respond(
            &mut stream,
            "405 Method Not Allowed",
            "text/plain",
            b"GET /metrics\n",
            true,
        );
    }
    match path {
        "/metrics" => {
            let format = Format::from_accept(&accept);
            let body = render(&hub.families(), format);
            respond(
                &mut stream,
                "200 OK",
                format.content_type(),
                body.as_bytes(),
                !head_only,
            )
        }
        "/" => respond(
            &mut stream,
            "200 OK",
            "text/plain; charset=utf-8",
            b"tboxscope: the figures are at /metrics\n",
            !head_only,
        ),
        _ => respond(
            &mut stream,
            "404 Not Found",
            "text/plain",
            b"not found: try /metrics\n",
            !head_only,
        ),
    }
}

fn respond(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &[u8],
    with_body: bool,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    if with_body {
        stream.write_all(body)?;
    }
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use probe_user::output::metrics::MetricsOptions;
    use tboxscope_engine::snapshot::{PathView, Snapshot};

    fn get(addr: SocketAddr, request: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn serves_the_newest_snapshot_in_either_format() {
        let hub = MetricsHub::new(MetricsOptions::default(), true);
        let server = MetricsServer::start("127.0.0.1:0".parse().unwrap(), hub.clone()).unwrap();
        let addr = server.local_addr();
        hub.publish(Arc::new(Snapshot {
            paths: vec![PathView {
                label: "4G".to_owned(),
                packets: 12,
                ..PathView::default()
            }],
            ..Snapshot::default()
        }));
        let plain = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(plain.starts_with("HTTP/1.1 200 OK\r\n"), "{plain}");
        assert!(
            plain.contains("Content-Type: text/plain; version=0.0.4"),
            "{plain}"
        );
        assert!(
            plain.contains("tboxscope_path_packets_total{path=\"4G\"} 12\n"),
            "{plain}"
        );
        assert!(
            plain.contains("tboxscope_otlp_dropped_total 0\n"),
            "{plain}"
        );
        let om = get(
            addr,
            "GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text;version=1.0.0\r\n\r\n",
        );
        assert!(
            om.contains("Content-Type: application/openmetrics-text"),
            "{om}"
        );
        assert!(om.ends_with("# EOF\n"), "{om}");
        assert!(get(addr, "GET /nope HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        assert!(get(addr, "POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
        // A client that sends half a request and goes away does not stop the server.
        drop(TcpStream::connect(addr).unwrap());
        assert!(get(addr, "GET /metrics HTTP/1.0\r\n\r\n").contains("200 OK"));
        drop(server);
        assert!(TcpStream::connect(addr).is_err(), "stopped when dropped");
    }
}
