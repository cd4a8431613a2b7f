//! QUIC from `quinn` (rustls, `KeyLogFile` writing to SSLKEYLOGFILE) between two network
//! namespaces, captured live with tboxscope's libpcap source and decoded back through the
//! analyze driver (decrypted with the key log) to exactly the streams, offsets and bytes sent.
#![expect(clippy::unwrap_used)]

mod live_common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Barrier, OnceLock};
use std::time::Duration;

use live_common::{capture_in, stop_capture};
use probe_user::analyze::Analyzer;
use probe_user::correlate::{Correlator, FrameFeed};
use probe_user::decode::net::NetParser;
use probe_user::decode::quic::{
    DatagramInfo, DecoderConfig, Frame, Keylog, ParseOptions, QuicDecoder,
};
use probe_user::dissect::{gso_segment_size, Decoded, DissectConfig};
use probe_user::engine::{Config as EngineConfig, MatchMode};
use probe_user::source::pcap::{InterfaceSpec, LiveConfig, LiveEvent};
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use tboxscope_test_support::netns::{spawn_in, Lab};
use tboxscope_test_support::pcap::Ng;

const NAME: &str = "gateway.test";

/// The known messages, one per unidirectional stream: small and multi-packet sizes.
fn messages() -> Vec<Vec<u8>> {
    [10usize, 1000, 5000, 20_000, 3, 64_000]
        .iter()
        .enumerate()
        .map(|(i, &n)| (0..n).map(|j| (j * 31 + i * 7) as u8).collect())
        .collect()
}

/// The key log every connection of this test binary writes to (rustls appends to the file
/// named by SSLKEYLOGFILE, set once before any test starts a connection).
fn key_log_file() -> PathBuf {
    static FILE: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let (_, path) = FILE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sslkeys.log");
        std::env::set_var("SSLKEYLOGFILE", &path);
        (dir, path)
    });
    path.clone()
}

/// The server certificate (DER) and its PKCS#8 key.
type Identity = (rustls::pki_types::CertificateDer<'static>, Vec<u8>);

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Server: accepts `conns` connections, reads every uni stream of each to the end (`n` per
/// connection), returns them by id, per connection in the order accepted.
fn server(addr: SocketAddr, cert: Identity, conns: usize, n: usize) -> Vec<BTreeMap<u64, Vec<u8>>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
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
                    let mut got = BTreeMap::new();
                    while got.len() < n {
                        let mut s = conn.accept_uni().await.unwrap();
                        let id = s.id().index() * 4 + 2;
                        got.insert(id, s.read_to_end(1 << 20).await.unwrap());
                    }
                    conn.close(0u32.into(), b"done");
                    got
                }));
            }
            let mut all = Vec::new();
            for r in readers {
                all.push(r.await.unwrap());
            }
            ep.wait_idle().await;
            all
        };
        tokio::time::timeout(Duration::from_secs(20), work)
            .await
            .expect("server timed out")
    })
}

/// Client: connects, waits at `ready` (if given) until the other clients are connected too,
/// opens one uni stream per message, writes it, finishes (`pace` apart); waits for the server
/// to close.
fn client(
    local: SocketAddr,
    server: SocketAddr,
    cert: Identity,
    msgs: Vec<Vec<u8>>,
    pace: Duration,
    ready: Option<Arc<Barrier>>,
) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.0).unwrap();
        let mut tls = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        tls.alpn_protocols = vec![b"tbox".to_vec()];
        // rustls writes the secrets to the file named by SSLKEYLOGFILE.
        tls.key_log = Arc::new(rustls::KeyLogFile::new());
        let crypto = QuicClientConfig::try_from(tls).unwrap();
        let ep = quinn::Endpoint::client(local).unwrap();
        let work = async {
            let conn = ep
                .connect_with(quinn::ClientConfig::new(Arc::new(crypto)), server, NAME)
                .unwrap()
                .await
                .unwrap();
            if let Some(b) = ready {
                b.wait();
            }
            for m in &msgs {
                let mut s = conn.open_uni().await.unwrap();
                s.write_all(m).await.unwrap();
                s.finish().unwrap();
                tokio::time::sleep(pace).await;
            }
            conn.closed().await;
            ep.wait_idle().await;
        };
        tokio::time::timeout(Duration::from_secs(20), work)
            .await
            .expect("client timed out");
    });
}

#[test]
fn quinn_peers_captured_live_decode_to_the_sent_streams() {
    let dir = tempfile::tempdir().unwrap();
    let keylog = key_log_file();

    let lab = Lab::new("q", 1);
    let (t_if, _, t_addr, c_addr) = lab.links[0].clone();
    let cfg = LiveConfig {
        interfaces: vec![InterfaceSpec::parse(&format!("{t_if}=5G")).unwrap()],
        filter: Some("udp port 4433".to_owned()),
        ..LiveConfig::default()
    };
    let (cap, mut events) = capture_in(&lab.tbox, cfg);

    let sent = messages();
    let ck = rcgen::generate_simple_self_signed(vec![NAME.to_owned()]).unwrap();
    let cert: Identity = (ck.cert.der().clone(), ck.key_pair.serialize_der());
    let server_addr: SocketAddr = format!("{c_addr}:4433").parse().unwrap();
    let client_addr: SocketAddr = format!("{t_addr}:0").parse().unwrap();
    let (cert2, n) = (cert.clone(), sent.len());
    let srv = spawn_in(&lab.cloud, move || server(server_addr, cert2, 1, n));
    std::thread::sleep(Duration::from_millis(100));
    let msgs = sent.clone();
    spawn_in(&lab.tbox, move || {
        client(client_addr, server_addr, cert, msgs, Duration::ZERO, None);
    })
    .join()
    .unwrap();
    let received = srv.join().unwrap().remove(0);
    // Client uni streams are 2, 6, 10, ... in the order opened.
    let expected: BTreeMap<u64, Vec<u8>> = sent
        .iter()
        .enumerate()
        .map(|(i, m)| (i as u64 * 4 + 2, m.clone()))
        .collect();
    assert_eq!(received, expected, "quinn itself delivered the streams");

    stop_capture(cap, &mut events);
    let mut ng = Ng::new(false);
    ng.idb(1, 65535, Some("5G"), Some(9));
    let mut frames = Vec::new();
    for ev in &events {
        if let LiveEvent::Packets(batch) = ev {
            for p in batch {
                ng.epb(0, p.ts_ns, p.orig_len, &p.data);
                frames.push(p.clone());
            }
        }
    }
    let file = dir.path().join("quic-live.pcapng");
    std::fs::write(&file, &ng.bytes).unwrap();
    let keys = Keylog::from_file(&keylog).unwrap();
    assert!(!keys.is_empty(), "rustls wrote the key log");

    // Through the analyze driver: every client STREAM frame's id, offset, length and FIN.
    let mut analyzer = Analyzer::new(DissectConfig {
        keylog: Some(keys.clone()),
        ..DissectConfig::default()
    });
    // stream id → covered [offset, end) ranges, and the final size from FIN.
    let mut ranges: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
    let mut fin: BTreeMap<u64, u64> = BTreeMap::new();
    let mut undecrypted = Vec::new();
    let mut packets = 0;
    let mut emit = |r: probe_user::analyze::Record<'_>| -> Result<(), ()> {
        let Decoded::QuicPacket(q) = &r.packet.decoded else {
            panic!("unexpected record {:?}", r.packet);
        };
        assert_eq!(r.path, "5G");
        packets += 1;
        if !q.decrypted {
            undecrypted.push((r.frame, r.data.len(), q.pn, q.undecrypted_reason.clone()));
        }
        if r.packet.dst == server_addr {
            for f in q.frames.iter().filter(|f| f.frame_type == "stream") {
                let (id, off, len) = (f.stream_id.unwrap(), f.offset.unwrap(), f.length.unwrap());
                ranges.entry(id).or_default().push((off, off + len));
                if f.fin == Some(true) {
                    assert_eq!(fin.insert(id, off + len).unwrap_or(off + len), off + len);
                }
            }
        }
        Ok(())
    };
    analyzer.run_file(&file, &mut emit).unwrap().unwrap();
    assert_eq!(
        undecrypted,
        vec![],
        "every packet decrypted with the key log"
    );
    assert!(packets > 20);
    let stats = analyzer.stats();
    assert_eq!(
        stats.udp, stats.quic_datagrams,
        "every captured datagram is QUIC"
    );
    let expected_fin: BTreeMap<u64, u64> = expected
        .iter()
        .map(|(id, m)| (*id, m.len() as u64))
        .collect();
    assert_eq!(fin, expected_fin, "stream ids and final sizes");
    for (id, rs) in &mut ranges {
        // The ranges (retransmissions included) cover exactly [0, size) without holes.
        rs.sort_unstable();
        let mut covered = 0;
        for &(a, b) in rs.iter() {
            assert!(a <= covered, "stream {id}: hole at {covered}");
            covered = covered.max(b);
        }
        assert_eq!(covered, expected_fin[id], "stream {id}");
    }

    // And the bytes at those offsets, through the same decoder, are the bytes sent.
    let mut net = NetParser::new();
    let lax = DecoderConfig {
        parse: ParseOptions { lax: true },
        ..DecoderConfig::default()
    };
    let mut quic = QuicDecoder::new(lax, Some(keys.clone()));
    let mut rebuilt: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    for p in &frames {
        let udp = net.udp(p.link, &p.data, p.ts_ns).unwrap();
        let info = DatagramInfo {
            src: Some(udp.src),
            dst: Some(udp.dst),
            from_client: None,
        };
        let to_server = udp.dst == server_addr;
        let size = gso_segment_size(udp.payload).unwrap_or(udp.payload.len());
        for datagram in udp.payload.chunks(size) {
            quic.decode_with(datagram, &info, |pkt| {
                for f in pkt.frames().flatten() {
                    if let (
                        true,
                        Frame::Stream {
                            stream_id,
                            offset,
                            data,
                            ..
                        },
                    ) = (to_server, f)
                    {
                        let buf = rebuilt.entry(stream_id).or_default();
                        let end = offset as usize + data.len();
                        if buf.len() < end {
                            buf.resize(end, 0);
                        }
                        buf[offset as usize..end].copy_from_slice(data);
                    }
                }
            });
        }
    }
    assert_eq!(rebuilt, expected);

    // Issue 18 item 3: the same quinn capture begun after the handshake (every datagram up to
    // the last long header dropped). Its short headers are found by key-log trial, and every
    // one decrypts, with the packet numbers of the whole capture's decoding.
    let payloads: Vec<(Vec<u8>, DatagramInfo)> = frames
        .iter()
        .flat_map(|p| {
            let udp = net.udp(p.link, &p.data, p.ts_ns).unwrap();
            let info = DatagramInfo {
                src: Some(udp.src),
                dst: Some(udp.dst),
                from_client: None,
            };
            let size = gso_segment_size(udp.payload).unwrap_or(udp.payload.len());
            udp.payload
                .chunks(size)
                .map(|d| (d.to_vec(), info))
                .collect::<Vec<_>>()
        })
        .collect();
    let last_long = payloads
        .iter()
        .rposition(|(d, _)| d.first().is_some_and(|b| b & 0x80 != 0))
        .unwrap();
    let pns = |dec: &mut QuicDecoder, from: usize| -> Vec<(usize, Option<u64>, bool)> {
        let mut out = Vec::new();
        for (i, (d, info)) in payloads.iter().enumerate().skip(from) {
            dec.decode_with(d, info, |pkt| {
                if !pkt.header.is_long() {
                    out.push((i, pkt.pn, pkt.payload.is_some()));
                }
            });
        }
        out
    };
    let whole = pns(&mut QuicDecoder::new(lax, Some(keys.clone())), 0);
    let mut mid = QuicDecoder::new(lax, Some(keys.clone()));
    let cut = pns(&mut mid, last_long + 1);
    let want: Vec<_> = whole.into_iter().filter(|(i, ..)| *i > last_long).collect();
    assert!(want.len() > 10 && want.iter().all(|p| p.2), "{want:?}");
    assert_eq!(cut, want, "{:?}", mid.stats.hunt);
    assert!(mid.stats.hunt.recovered >= 1);
    eprintln!(
        "after the handshake: {} short headers decrypted; {:?}",
        cut.len(),
        mid.stats.hunt
    );
    drop(lab);
}

/// Application-level redundancy over two QUIC connections, one per path: the T-Box sends every
/// message on both (byte-identical copies, one uni stream each, 5 ms apart; every tenth is
/// the same keep-alive). Captured live on both T-Box interfaces and analyzed with nothing
/// configured (no application id), the engine matches the copies by content: one flow, every
/// message on both paths, the keep-alives paired in order.
#[test]
fn two_connections_one_per_path_match_by_content() {
    const N: usize = 60;
    let keylog = key_log_file();
    let lab = Lab::new("m", 2);
    let labels = ["eth0", "eth1"];
    let cfg = LiveConfig {
        interfaces: lab
            .links
            .iter()
            .zip(labels)
            .map(|(l, name)| InterfaceSpec::parse(&format!("{}={name}", l.0)).unwrap())
            .collect(),
        filter: Some("udp port 4433".to_owned()),
        ..LiveConfig::default()
    };
    let (cap, mut events) = capture_in(&lab.tbox, cfg);

    let sent: Vec<Vec<u8>> = (0..N)
        .map(|i| {
            let mut m = vec![0x6b; 600];
            if i % 10 != 5 {
                m[..8].copy_from_slice(&(i as u64).to_be_bytes());
            }
            m
        })
        .collect();
    let ck = rcgen::generate_simple_self_signed(vec![NAME.to_owned()]).unwrap();
    let cert: Identity = (ck.cert.der().clone(), ck.key_pair.serialize_der());
    let any: SocketAddr = "0.0.0.0:4433".parse().unwrap();
    let cert2 = cert.clone();
    let srv = spawn_in(&lab.cloud, move || server(any, cert2, 2, N));
    std::thread::sleep(Duration::from_millis(100));
    // The connections are up before the messages start (as a T-Box opens both at start).
    let ready = Arc::new(Barrier::new(2));
    let clients: Vec<_> = lab
        .links
        .iter()
        .map(|(_, _, t_addr, c_addr)| {
            let local: SocketAddr = format!("{t_addr}:0").parse().unwrap();
            let remote: SocketAddr = format!("{c_addr}:4433").parse().unwrap();
            let (cert, msgs, ready) = (cert.clone(), sent.clone(), ready.clone());
            spawn_in(&lab.tbox, move || {
                client(
                    local,
                    remote,
                    cert,
                    msgs,
                    Duration::from_millis(5),
                    Some(ready),
                );
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    let received = srv.join().unwrap();
    assert_eq!(received.len(), 2);
    for got in &received {
        assert_eq!(
            got.values().cloned().collect::<Vec<_>>(),
            sent,
            "quinn delivered"
        );
    }

    stop_capture(cap, &mut events);
    let mut ng = Ng::new(false);
    for name in labels {
        ng.idb(1, 65535, Some(name), Some(9));
    }
    // The file holds both interfaces' packets in time order (as `capture` writes them).
    let mut packets: Vec<_> = events
        .iter()
        .filter_map(|ev| match ev {
            LiveEvent::Packets(batch) => Some(batch.iter()),
            _ => None,
        })
        .flatten()
        .collect();
    packets.sort_by_key(|p| p.ts_ns);
    for p in packets {
        ng.epb(p.path as u32, p.ts_ns, p.orig_len, &p.data);
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("two-connections.pcapng");
    std::fs::write(&file, &ng.bytes).unwrap();

    let mut analyzer = Analyzer::new(DissectConfig {
        keylog: Some(Keylog::from_file(&keylog).unwrap()),
        ..DissectConfig::default()
    });
    let mut correlator = Correlator::new(EngineConfig::default());
    correlator.expect_paths(&labels);
    let mut feed = FrameFeed::default();
    analyzer
        .run_file(&file, &mut |r| {
            feed.observe(&mut correlator, &r);
            correlator.engine_mut().drain_records().for_each(drop);
            Ok::<(), ()>(())
        })
        .unwrap()
        .unwrap();
    let summary = correlator.engine_mut().finish(feed.last_ts() + 1);
    assert_eq!(summary.flows.len(), 1, "{:#?}", summary.flows);
    let red = &summary.redundancy[0];
    let ctx = format!("{red:#?}");
    assert_eq!(red.mode, Some(MatchMode::Content), "{ctx}");
    assert_eq!(red.messages, N as u64, "{ctx}");
    assert_eq!(red.on_all_paths, N as u64, "{ctx}");
    for p in &red.paths {
        assert_eq!(p.carried, N as u64, "{ctx}");
    }
    drop(lab);
}
