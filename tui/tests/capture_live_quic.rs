//! `tboxscope capture --keylog F --pcap DIR` over real QUIC (`quinn`, rustls writing the key log
//! as it connects), one connection per path carrying the same messages: the write-through
//! pcapng files decrypt alone (the key log embedded as Decryption Secrets Blocks), and the
//! capture's `message` records equal `analyze --json` of those files without a key log.
#![expect(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use serde_json::Value;
use tboxscope_test_support::netns::{spawn_in, Lab};

const BIN: &str = env!("CARGO_BIN_EXE_tboxscope");
const NAME: &str = "gateway.test";
const MESSAGES: usize = 20;

type Identity = (rustls::pki_types::CertificateDer<'static>, Vec<u8>);

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Accepts `conns` connections and reads `MESSAGES` uni streams of each, then closes them.
fn server(addr: SocketAddr, cert: Identity, conns: usize) {
    runtime().block_on(async move {
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.1.into());
        let mut tls = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.0], key)
            .unwrap();
        tls.alpn_protocols = vec![b"tbox".to_vec()];
        let crypto = QuicServerConfig::try_from(tls).unwrap();
        let ep = quinn::Endpoint::server(quinn::ServerConfig::with_crypto(Arc::new(crypto)), addr)
            .unwrap();
        let work = async {
            let mut readers = Vec::new();
            for _ in 0..conns {
                let conn = ep.accept().await.unwrap().await.unwrap();
                readers.push(tokio::spawn(async move {
                    for _ in 0..MESSAGES {
                        let mut s = conn.accept_uni().await.unwrap();
                        s.read_to_end(1 << 16).await.unwrap();
                    }
                    conn.close(0u32.into(), b"done");
                }));
            }
            for r in readers {
                r.await.unwrap();
            }
            ep.wait_idle().await;
        };
        tokio::time::timeout(Duration::from_secs(30), work)
            .await
            .unwrap();
    });
}

/// Connects from `local` and sends the messages, one uni stream each, 50 ms apart.
fn client(local: SocketAddr, server: SocketAddr, cert: Identity) {
    runtime().block_on(async move {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.0).unwrap();
        let mut tls = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        tls.alpn_protocols = vec![b"tbox".to_vec()];
        // rustls appends the secrets to the file SSLKEYLOGFILE names.
        tls.key_log = Arc::new(rustls::KeyLogFile::new());
        let crypto = QuicClientConfig::try_from(tls).unwrap();
        let ep = quinn::Endpoint::client(local).unwrap();
        let work = async {
            let conn = ep
                .connect_with(quinn::ClientConfig::new(Arc::new(crypto)), server, NAME)
                .unwrap()
                .await
                .unwrap();
            for i in 0..MESSAGES {
                let m: Vec<u8> = (0..400).map(|j| (i * 13 + j) as u8).collect();
                let mut s = conn.open_uni().await.unwrap();
                s.write_all(&m).await.unwrap();
                s.finish().unwrap();
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            conn.closed().await;
            ep.wait_idle().await;
        };
        tokio::time::timeout(Duration::from_secs(30), work)
            .await
            .unwrap();
    });
}

/// A process ended on every way out of the test (the lab's Drop removes the namespaces).
struct Kill(std::process::Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn lines(file: &Path) -> Vec<Value> {
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Messages by (flow, id): the paths of their copies.
fn messages(lines: &[Value]) -> BTreeMap<(String, String), Vec<String>> {
    lines
        .iter()
        .filter(|l| l["type"] == "message")
        .map(|m| {
            let mut paths: Vec<String> = m["copies"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["path"].as_str().unwrap().to_owned())
                .collect();
            paths.sort();
            (
                (
                    m["flow"].as_str().unwrap().to_owned(),
                    m["id"].as_str().unwrap().to_owned(),
                ),
                paths,
            )
        })
        .collect()
}

#[test]
#[ignore = "needs root"]
fn write_through_pcapng_decrypts_alone_and_matches_the_capture() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("sslkeys.log");
    // Set before any thread starts a connection (the only use of the environment here).
    std::env::set_var("SSLKEYLOGFILE", &keys);
    let lab = Lab::new("cq", 2);
    let out = dir.path().join("out.jsonl");
    let pcaps = dir.path().join("pcap");
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &lab.tbox, BIN, "capture", "--no-tcp"])
        .arg("--json")
        .arg(&out)
        .arg("--pcap")
        .arg(&pcaps)
        .arg("--keylog")
        .arg(&keys);
    for i in 0..2 {
        cmd.args(["-i", &format!("{}=eth{i}", lab.links[i].0)]);
    }
    let mut capture = Kill(cmd.stdin(Stdio::null()).spawn().unwrap());
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read(&out).map_or(true, |b| !b.contains(&b'\n')) {
        assert!(Instant::now() < deadline, "capture did not start");
        std::thread::sleep(Duration::from_millis(100));
    }

    let ck = rcgen::generate_simple_self_signed(vec![NAME.to_owned()]).unwrap();
    let cert: Identity = (ck.cert.der().clone(), ck.key_pair.serialize_der());
    let any: SocketAddr = "0.0.0.0:4433".parse().unwrap();
    let srv_cert = cert.clone();
    let srv = spawn_in(&lab.cloud, move || server(any, srv_cert, 2));
    std::thread::sleep(Duration::from_millis(200));
    let clients: Vec<_> = (0..2)
        .map(|i| {
            let local: SocketAddr = format!("{}:0", lab.links[i].2).parse().unwrap();
            let remote: SocketAddr = format!("{}:4433", lab.links[i].3).parse().unwrap();
            let cert = cert.clone();
            spawn_in(&lab.tbox, move || client(local, remote, cert))
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    srv.join().unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let pid = libc::pid_t::try_from(capture.0.id()).unwrap();
    // SAFETY: kill has no memory preconditions; the pid is our child's.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let status = capture.0.wait().unwrap();
    assert!(status.success());

    let analyzed_file = dir.path().join("analyzed.jsonl");
    let ok = Command::new(BIN)
        .args(["analyze", "--json"])
        .arg(&analyzed_file)
        .arg(pcaps.join("eth0.pcapng"))
        .arg(pcaps.join("eth1.pcapng"))
        .status()
        .unwrap();
    assert!(ok.success());
    let analyzed = lines(&analyzed_file);
    let summary = analyzed.last().unwrap();
    let quic = &summary["quic"];
    assert!(
        quic["decrypted"].as_u64().unwrap() > 40,
        "the embedded key log decrypts: {quic}"
    );
    let captured = lines(&out);
    let (live, offline) = (messages(&captured), messages(&analyzed));
    let only_live: Vec<_> = live
        .iter()
        .filter(|(k, v)| offline.get(*k) != Some(v))
        .collect();
    let only_offline: Vec<_> = offline
        .iter()
        .filter(|(k, v)| live.get(*k) != Some(v))
        .collect();
    assert!(
        only_live.is_empty() && only_offline.is_empty(),
        "capture only: {only_live:?}; analyze only: {only_offline:?}"
    );
    // (The first message may be taken before the second path's connection is met.)
    let both = live.values().filter(|p| p.len() == 2).count();
    assert!(
        both >= MESSAGES - 2,
        "{both} messages on both paths: {live:?}"
    );
}
