//! KCP peer (`tokio_kcp`, message mode) with the fast profile: nodelay=1, interval=10 ms,
//! resend=2, nc=1 (no congestion window).
use tokio::sync::mpsc;
use tokio_kcp::{KcpConfig, KcpListener, KcpNoDelayConfig, KcpStream};

use super::{record, GroundTruth, Transport};
use crate::error::{LabError, Result};
use crate::names::PathId;

/// The KCP configuration both ends use.
pub fn config() -> KcpConfig {
    KcpConfig {
        nodelay: KcpNoDelayConfig {
            nodelay: true,
            interval: 10,
            resend: 2,
            nc: true,
        },
        stream: false,
        ..KcpConfig::default()
    }
}

/// Listens on the gateway side and records every message.
pub async fn listen(t: Transport, path: PathId, truth: GroundTruth) -> Result<()> {
    let mut l = KcpListener::bind(config(), t.gateway(path))
        .await
        .map_err(|e| LabError::peer(t.name(), e))?;
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let truth = truth.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                while let Ok(n) = s.recv(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    record(&truth, t, path, buf.get(..n).unwrap_or(&[]));
                }
            });
        }
    });
    Ok(())
}

/// Connects from the T-Box side (a new session with a random conv id).
pub async fn connect(t: Transport, path: PathId) -> Result<KcpStream> {
    KcpStream::connect(&config(), t.gateway(path))
        .await
        .map_err(|e| LabError::peer(t.name(), e))
}

/// Sends queued messages until the queue closes, then keeps the session alive.
pub async fn pump(mut s: KcpStream, mut rx: mpsc::UnboundedReceiver<Vec<u8>>) -> Result<()> {
    while let Some(m) = rx.recv().await {
        s.send(&m).await.map_err(|e| LabError::peer("kcp", e))?;
    }
    std::future::pending::<()>().await;
    Ok(())
}
