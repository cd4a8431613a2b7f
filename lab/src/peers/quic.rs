//! QUIC peer (`quinn` 0.11 over rustls/ring): one unidirectional stream per message, or
//! (`quic-stream`) every message back to back on one bidirectional stream. The client
//! writes its TLS secrets to a key log (SSLKEYLOGFILE format) so tboxscope and tshark decrypt.
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use tokio::sync::mpsc;

use super::{record, GroundTruth, Transport};
use crate::error::{LabError, Result};
use crate::names::PathId;

const SERVER_NAME: &str = "gateway.lab";
const ALPN: &[u8] = b"tboxscope-lab";

/// The certificate both sides agree on, made once per process.
struct Identity {
    cert: rustls::pki_types::CertificateDer<'static>,
    key: Vec<u8>,
}

fn identity() -> Result<&'static Identity> {
    static ID: std::sync::OnceLock<std::result::Result<Identity, String>> =
        std::sync::OnceLock::new();
    ID.get_or_init(|| {
        let ck = rcgen::generate_simple_self_signed(vec![SERVER_NAME.to_string()])
            .map_err(|e| e.to_string())?;
        Ok(Identity {
            cert: ck.cert.der().clone(),
            key: ck.key_pair.serialize_der(),
        })
    })
    .as_ref()
    .map_err(|e| LabError::peer("quic", e))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn transport_config() -> Arc<quinn::TransportConfig> {
    let mut tc = quinn::TransportConfig::default();
    tc.max_concurrent_uni_streams(10_000u32.into());
    tc.keep_alive_interval(Some(Duration::from_secs(1)));
    if let Ok(idle) = quinn::IdleTimeout::try_from(Duration::from_secs(60)) {
        tc.max_idle_timeout(Some(idle));
    }
    Arc::new(tc)
}

/// Writes TLS secrets in the SSLKEYLOGFILE format to one file.
#[derive(Debug)]
pub struct FileKeyLog(Mutex<std::fs::File>);

impl FileKeyLog {
    /// Secrets appended to the file at `path` (made when missing).
    pub fn append_to(path: &Path) -> Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| LabError::io(format!("open key log {}", path.display()), e))?;
        Ok(Self(Mutex::new(file)))
    }
}

impl rustls::KeyLog for FileKeyLog {
    fn log(&self, label: &str, client_random: &[u8], secret: &[u8]) {
        let mut line = String::with_capacity(200);
        let _ = write!(line, "{label} ");
        for b in client_random {
            let _ = write!(line, "{b:02x}");
        }
        line.push(' ');
        for b in secret {
            let _ = write!(line, "{b:02x}");
        }
        line.push('\n');
        if let Ok(mut f) = self.0.lock() {
            let _ = f.write_all(line.as_bytes());
            let _ = f.flush();
        }
    }
}

/// Listens on the gateway side and records every message.
pub async fn listen(t: Transport, path: PathId, truth: GroundTruth) -> Result<()> {
    let id = identity()?;
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(id.key.clone().into());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| LabError::peer(t.name(), e))?
        .with_no_client_auth()
        .with_single_cert(vec![id.cert.clone()], key)
        .map_err(|e| LabError::peer(t.name(), e))?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let crypto = QuicServerConfig::try_from(tls).map_err(|e| LabError::peer(t.name(), e))?;
    let mut sc = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    sc.transport_config(transport_config());
    let ep =
        quinn::Endpoint::server(sc, t.gateway(path)).map_err(|e| LabError::peer(t.name(), e))?;
    tokio::spawn(async move {
        while let Some(incoming) = ep.accept().await {
            let truth = truth.clone();
            tokio::spawn(async move {
                let Ok(conn) = incoming.await else { return };
                if t == Transport::QuicStream {
                    if let Ok((_send, rs)) = conn.accept_bi().await {
                        read_stream(rs, t, path, &truth).await;
                    }
                    return;
                }
                while let Ok(mut rs) = conn.accept_uni().await {
                    let truth = truth.clone();
                    tokio::spawn(async move {
                        if let Ok(b) = rs.read_to_end(65536).await {
                            record(&truth, t, path, &b);
                        } else {
                            truth.rejected(t.index());
                        }
                    });
                }
            });
        }
    });
    Ok(())
}

/// Reads messages back to back from one stream (each says its length, as on TCP) until it
/// ends.
async fn read_stream(mut rs: quinn::RecvStream, t: Transport, path: PathId, truth: &GroundTruth) {
    let mut buf = vec![0u8; 65536];
    loop {
        if rs.read_exact(&mut buf[..8]).await.is_err() {
            break;
        }
        let len = usize::from(u16::from_le_bytes([buf[6], buf[7]]));
        if len < super::message::HEADER_LEN || rs.read_exact(&mut buf[8..len]).await.is_err() {
            truth.rejected(t.index());
            break;
        }
        record(truth, t, path, &buf[..len]);
    }
}

/// Connects from the T-Box side, logging TLS secrets to `keylog`.
pub async fn connect(t: Transport, path: PathId, keylog: &Path) -> Result<quinn::Connection> {
    let id = identity()?;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(id.cert.clone())
        .map_err(|e| LabError::peer(t.name(), e))?;
    let mut tls = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| LabError::peer(t.name(), e))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![ALPN.to_vec()];
    tls.key_log = Arc::new(FileKeyLog::append_to(keylog)?);
    let crypto = QuicClientConfig::try_from(tls).map_err(|e| LabError::peer(t.name(), e))?;
    let mut cc = quinn::ClientConfig::new(Arc::new(crypto));
    cc.transport_config(transport_config());
    let local = std::net::SocketAddr::from((path.tbox_addr(), 0));
    let ep = quinn::Endpoint::client(local).map_err(|e| LabError::peer(t.name(), e))?;
    let conn = ep
        .connect_with(cc, t.gateway(path), SERVER_NAME)
        .map_err(|e| LabError::peer(t.name(), e))?
        .await
        .map_err(|e| LabError::peer(t.name(), e))?;
    Ok(conn)
}

/// Writes the queued messages back to back on one bidirectional stream until the queue
/// closes, then keeps the connection open.
pub async fn pump_stream(
    conn: quinn::Connection,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
) -> Result<()> {
    let (mut s, _recv) = conn
        .open_bi()
        .await
        .map_err(|e| LabError::peer("quic-stream", e))?;
    while let Some(m) = rx.recv().await {
        s.write_all(&m)
            .await
            .map_err(|e| LabError::peer("quic-stream", e))?;
    }
    std::future::pending::<()>().await;
    Ok(())
}

/// Sends each queued message on its own stream until the queue closes, then keeps the
/// connection open.
pub async fn pump(conn: quinn::Connection, mut rx: mpsc::UnboundedReceiver<Vec<u8>>) -> Result<()> {
    while let Some(m) = rx.recv().await {
        let mut s = conn
            .open_uni()
            .await
            .map_err(|e| LabError::peer("quic", e))?;
        s.write_all(&m)
            .await
            .map_err(|e| LabError::peer("quic", e))?;
        s.finish().map_err(|e| LabError::peer("quic", e))?;
    }
    std::future::pending::<()>().await;
    Ok(())
}
