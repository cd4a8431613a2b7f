//! Kernel TCP peer: one connection on path A, messages back to back, Nagle off.
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::mpsc;

use super::{message::HEADER_LEN, record, GroundTruth, TcpCc, Transport};
use crate::error::{LabError, Result};
use crate::names::PathId;

/// Listens on the gateway side and records every message.
pub async fn listen(t: Transport, path: PathId, truth: GroundTruth) -> Result<()> {
    let l = TcpListener::bind(t.gateway(path))
        .await
        .map_err(|e| LabError::peer(t.name(), e))?;
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let truth = truth.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                loop {
                    if s.read_exact(&mut buf[..8]).await.is_err() {
                        break;
                    }
                    let len = usize::from(u16::from_le_bytes([buf[6], buf[7]]));
                    if len < HEADER_LEN || s.read_exact(&mut buf[8..len]).await.is_err() {
                        truth.rejected(t.index());
                        break;
                    }
                    record(&truth, t, path, &buf[..len]);
                }
            });
        }
    });
    Ok(())
}

/// Connects from the T-Box side, with congestion control `cc` on the socket (set before
/// the handshake; the sender's algorithm is the one that shapes the uplink).
pub async fn connect(t: Transport, path: PathId, cc: TcpCc) -> Result<TcpStream> {
    let to = t.gateway(path);
    let socket = TcpSocket::new_v4().map_err(|e| LabError::peer(t.name(), e))?;
    if let Some(name) = cc.kernel_name() {
        socket2::SockRef::from(&socket)
            .set_tcp_congestion(name.as_bytes())
            .map_err(|e| {
                let offered =
                    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
                        .unwrap_or_default();
                LabError::peer(
                    t.name(),
                    format!(
                        "congestion control {name} refused ({e}); this kernel offers: {}",
                        offered.trim()
                    ),
                )
            })?;
    }
    let s = socket
        .connect(to)
        .await
        .map_err(|e| LabError::peer(t.name(), e))?;
    s.set_nodelay(true)
        .map_err(|e| LabError::peer(t.name(), e))?;
    Ok(s)
}

/// Writes queued messages until the queue closes.
pub async fn pump(mut s: TcpStream, mut rx: mpsc::UnboundedReceiver<Vec<u8>>) -> Result<()> {
    while let Some(m) = rx.recv().await {
        s.write_all(&m)
            .await
            .map_err(|e| LabError::peer("tcp", e))?;
    }
    // Keep the connection open (retransmissions) until the run aborts this task.
    std::future::pending::<()>().await;
    Ok(())
}
