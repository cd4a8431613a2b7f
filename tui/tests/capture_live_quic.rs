//! `tboxscope capture --keylog F --pcap DIR` over real QUIC (`quinn`, rustls writing the key log
//! as it connects), one connection per path carrying the same messages: the write-through
//! pcapng files decrypt alone (the key log embedded as Decryption Secrets Blocks), and the
//! capture's `message` records equal `analyze --json` of those files without a key log.
//!
//! And through a router: a capture at either end analysed alone is placed there by its TTLs.
#![expect(clippy::unwrap_used)]
#[expect(dead_code, reason = "each test uses some of the shared helpers")]
mod tcp_common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use serde_json::Value;
use tboxscope_lab::peers::quic::FileKeyLog;
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

/// Connects from `local` and sends the messages, one uni stream each, 50 ms apart; the TLS
/// secrets go to the file SSLKEYLOGFILE names, or to `keys`.
fn client(local: SocketAddr, server: SocketAddr, cert: Identity, keys: Option<PathBuf>) {
    runtime().block_on(async move {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.0).unwrap();
        let mut tls = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        tls.alpn_protocols = vec![b"tbox".to_vec()];
        tls.key_log = match keys {
            Some(file) => Arc::new(FileKeyLog::append_to(&file).unwrap()),
            // rustls appends the secrets to the file SSLKEYLOGFILE names.
            None => Arc::new(rustls::KeyLogFile::new()),
        };
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
            spawn_in(&lab.tbox, move || client(local, remote, cert, None))
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

/// Through a router (the client's packets reach the server one TTL lower, and the reverse),
/// quinn's connection captured at both ends, each capture analysed alone with the key log and
/// nothing stated: the gateway's is placed at the server's end and the T-Box's at the client's
/// by their TTLs, and each gives exactly what it gives with its host stated (`--host`).
#[test]
#[ignore = "needs root"]
fn a_capture_alone_is_placed_by_its_ttls_as_if_stated() {
    let chain = tcp_common::Routed::new(0);
    chain.sysctl("net.ipv4.ip_local_port_range", "55000 60999");
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.log");
    let port = 4433;
    let filter = format!("udp port {port}");
    let (gw_pcap, tbox_pcap) = (dir.path().join("gw.pcap"), dir.path().join("tbox.pcap"));
    let gw_dump = tcp_common::Tcpdump::start_on(&chain.b, &chain.dev_b, &filter, &gw_pcap);
    let tbox_dump = tcp_common::Tcpdump::start_on(&chain.a, &chain.dev_a, &filter, &tbox_pcap);
    let ck = rcgen::generate_simple_self_signed(vec![NAME.to_owned()]).unwrap();
    let cert: Identity = (ck.cert.der().clone(), ck.key_pair.serialize_der());
    let server_addr = SocketAddr::new(chain.server.ip(), port);
    let srv_cert = cert.clone();
    let srv = spawn_in(&chain.b, move || server(server_addr, srv_cert, 1));
    std::thread::sleep(Duration::from_millis(200));
    let client_keys = keys.clone();
    let any: SocketAddr = "0.0.0.0:0".parse().unwrap();
    spawn_in(&chain.a, move || {
        client(any, server_addr, cert, Some(client_keys));
    })
    .join()
    .unwrap();
    srv.join().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop((gw_dump, tbox_dump));

    for (pcap, label, host, end) in [
        (&gw_pcap, "gw", "gateway", "server's"),
        (&tbox_pcap, "tbox", "T-Box", "client's"),
    ] {
        let file = pcap.as_os_str();
        let keylog = [std::ffi::OsStr::new("--keylog"), keys.as_os_str()];
        let mut args = vec![file];
        args.extend(keylog);
        let inferred = tcp_common::analyze_json(&args);
        let stated_host = format!("{label}={}", if label == "gw" { "gateway" } else { "tbox" });
        args.extend([std::ffi::OsStr::new("--host"), stated_host.as_ref()]);
        let stated = tcp_common::analyze_json(&args);
        let summary = |lines: &[Value]| {
            lines
                .iter()
                .find(|r| r["type"] == "summary")
                .cloned()
                .unwrap()
        };
        let (mut a, mut b) = (summary(&inferred), summary(&stated));
        let said = a["health"]["inferences"].to_string();
        let (ttl_here, ttl_there) = (64, 63);
        let (client_ttl, server_ttl) = if label == "gw" {
            (ttl_there, ttl_here)
        } else {
            (ttl_here, ttl_there)
        };
        assert!(
            said.contains(&format!(
                "capture `{label}` is on the {host}: at the {end} end of "
            )) && said.contains(&format!(
                "(the client's packets have TTL {client_ttl}, the server's {server_ttl}"
            )),
            "{said}"
        );
        assert!(
            a["quic"]["decrypted"].as_u64().unwrap() > 40,
            "{}",
            a["quic"]
        );
        // All else alike: the records, and the summary but for the inference said.
        a["health"]["inferences"] = Value::Null;
        b["health"]["inferences"] = Value::Null;
        assert_eq!(a, b, "{label}: placed by its TTLs against stated");
        let records = |lines: &[Value]| -> Vec<Value> {
            lines
                .iter()
                .filter(|r| r["type"] != "summary" && r["type"] != "header")
                .cloned()
                .collect()
        };
        assert_eq!(records(&inferred), records(&stated), "{label}");
        assert_eq!(
            inferred.iter().filter(|r| r["type"] == "message").count(),
            MESSAGES,
            "{label}"
        );
    }
}
