//! QUIC from `quinn` (rustls, `KeyLogFile` writing to SSLKEYLOGFILE) between two network
//! namespaces, captured live with tboxscope's libpcap source and decoded back through the
//! analyze driver (decrypted with the key log) to exactly the streams, offsets and bytes sent.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod pcap_common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pcap_common::netns::{spawn_in, Lab};
use pcap_common::Ng;
use probe_user::analyze::Analyzer;
use probe_user::decode::net::NetParser;
use probe_user::decode::quic::{
    DatagramInfo, DecoderConfig, Frame, Keylog, ParseOptions, QuicDecoder,
};
use probe_user::dissect::{gso_segment_size, Decoded, DissectConfig};
use probe_user::source::pcap::{InterfaceSpec, LiveCapture, LiveConfig, LiveEvent};
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};

const NAME: &str = "gateway.test";

/// The known messages, one per unidirectional stream: small and multi-packet sizes.
fn messages() -> Vec<Vec<u8>> {
    [10usize, 1000, 5000, 20_000, 3, 64_000]
        .iter()
        .enumerate()
        .map(|(i, &n)| (0..n).map(|j| (j * 31 + i * 7) as u8).collect())
        .collect()
}

/// The server certificate (DER) and its PKCS#8 key.
type Identity = (rustls::pki_types::CertificateDer<'static>, Vec<u8>);

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Server: accepts one connection, reads every uni stream to the end, returns them by id.
fn server(addr: SocketAddr, cert: Identity, n: usize) -> BTreeMap<u64, Vec<u8>> {
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
            let conn = ep.accept().await.unwrap().await.unwrap();
            let mut got = BTreeMap::new();
            while got.len() < n {
                let mut s = conn.accept_uni().await.unwrap();
                let id = s.id().index() * 4 + 2;
                got.insert(id, s.read_to_end(1 << 20).await.unwrap());
            }
            conn.close(0u32.into(), b"done");
            ep.wait_idle().await;
            got
        };
        tokio::time::timeout(Duration::from_secs(20), work)
            .await
            .expect("server timed out")
    })
}

/// Client: opens one uni stream per message, writes it, finishes; waits for the server to close.
fn client(local: SocketAddr, server: SocketAddr, cert: Identity, msgs: Vec<Vec<u8>>) {
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
            for m in &msgs {
                let mut s = conn.open_uni().await.unwrap();
                s.write_all(m).await.unwrap();
                s.finish().unwrap();
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
    let keylog = dir.path().join("sslkeys.log");
    // This test binary runs only this test: setting the variable cannot race another test.
    std::env::set_var("SSLKEYLOGFILE", &keylog);

    let lab = Lab::new("q", 1);
    let (t_if, _, t_addr, c_addr) = lab.links[0].clone();
    let cfg = LiveConfig {
        interfaces: vec![InterfaceSpec::parse(&format!("{t_if}=5G")).unwrap()],
        filter: Some("udp port 4433".to_owned()),
        ..LiveConfig::default()
    };
    let mut cap = spawn_in(&lab.tbox, move || LiveCapture::start(cfg))
        .join()
        .unwrap()
        .unwrap();
    let mut events = Vec::new();
    let up = Instant::now() + Duration::from_secs(5);
    while Instant::now() < up {
        if let Ok(ev) = cap.events().recv_timeout(Duration::from_millis(20)) {
            let is_up = matches!(ev, LiveEvent::PathUp { .. });
            events.push(ev);
            if is_up {
                break;
            }
        }
    }

    let sent = messages();
    let ck = rcgen::generate_simple_self_signed(vec![NAME.to_owned()]).unwrap();
    let cert: Identity = (ck.cert.der().clone(), ck.key_pair.serialize_der());
    let server_addr: SocketAddr = format!("{c_addr}:4433").parse().unwrap();
    let client_addr: SocketAddr = format!("{t_addr}:0").parse().unwrap();
    let (cert2, n) = (cert.clone(), sent.len());
    let srv = spawn_in(&lab.cloud, move || server(server_addr, cert2, n));
    std::thread::sleep(Duration::from_millis(100));
    let msgs = sent.clone();
    spawn_in(&lab.tbox, move || {
        client(client_addr, server_addr, cert, msgs)
    })
    .join()
    .unwrap();
    let received = srv.join().unwrap();
    // Client uni streams are 2, 6, 10, ... in the order opened.
    let expected: BTreeMap<u64, Vec<u8>> = sent
        .iter()
        .enumerate()
        .map(|(i, m)| (i as u64 * 4 + 2, m.clone()))
        .collect();
    assert_eq!(received, expected, "quinn itself delivered the streams");

    std::thread::sleep(Duration::from_millis(100));
    cap.stop();
    while let Ok(ev) = cap.events().try_recv() {
        events.push(ev);
    }
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
    let mut quic = QuicDecoder::new(lax, Some(keys));
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
    drop(lab);
}
