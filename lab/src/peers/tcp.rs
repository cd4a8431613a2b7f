//! Kernel TCP peer: one connection on path A, messages back to back, Nagle off.
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use super::{message::HEADER_LEN, record, GroundTruth, Transport};
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

/// Connects from the T-Box side.
pub async fn connect(t: Transport, path: PathId) -> Result<TcpStream> {
    let s = TcpStream::connect(t.gateway(path))
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
