//! The engine on its own thread gives exactly what it gives on the decoding thread: every record
//! and the summary, on captures of two paths long enough for many hand-overs between the threads,
//! on the QUIC fixture, and on decrypted QUIC mixed with KCP (batches returned to decoding with
//! observations of every kind in them), and on TCP captures (whose segments reach the engine's
//! thread from their headers, without a decoded packet or record, and on the decoding thread
//! through their records); an error while handling records stops decoding and is returned, and
//! so does a panic.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use etherparse::PacketBuilder;
use probe_user::analyze::Analyzer;
use probe_user::dissect::DissectConfig;
use probe_user::pipeline::{decode_and_match, OnRecord};
use tboxscope_decode::quic::Keylog;
use tboxscope_engine::{Config, Engine};
use tboxscope_test_support::pcap::{kcp_segment, pcap};
use tboxscope_test_support::quic::{rfc9001_keylog, unhex, OneRttMix};
use tboxscope_test_support::tcpflow::{write_tcp_capture, TcpTraffic};

const QUIC_FIXTURE: &str = "../../shared/fixtures/chrome-cloudflare-quic-with-secrets.pcapng";
const SMTP_FIXTURE: &str = "../tui/tests/fixtures/smtp.pcap";

/// Every record (as JSON) and the summary of one run over `files`.
fn run(files: &[PathBuf], config: &DissectConfig, own_thread: bool) -> (Vec<String>, String) {
    let mut analyzer = Analyzer::new(config.clone());
    let engine = Engine::new(Config {
        emit_messages: true,
        await_pairing: true,
        ..Config::default()
    });
    let matched = decode_and_match(
        &mut analyzer,
        files,
        &[],
        engine,
        Vec::new(),
        |r, records: &mut Vec<String>| {
            records.push(serde_json::to_string(r).map_err(std::io::Error::other)?);
            Ok::<(), std::io::Error>(())
        },
        own_thread,
    )
    .unwrap();
    assert!(matched.file_errors.is_empty());
    let (mut engine, mut records) = (matched.engine, matched.state);
    let summary = engine.finish(matched.last_ts);
    records.extend(
        engine
            .drain_records()
            .map(|r| serde_json::to_string(&r).unwrap()),
    );
    (records, serde_json::to_string(&summary).unwrap())
}

/// An Ethernet frame of a UDP datagram from `from` to `to` (IPv4 address, port).
fn udp(from: ([u8; 4], u16), to: ([u8; 4], u16), payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(from.0, to.0, 64)
        .udp(from.1, to.1)
        .write(&mut frame, payload)
        .unwrap();
    frame
}

/// Two captures, one per path, of one KCP conversation sent on both: `n` messages 2 ms apart,
/// each acknowledged on its path 30 ms (4G) or 12 ms (5G) later; 5G loses every 50th message and
/// carries nothing for 1.5 s in the middle.
fn two_path_captures(dir: &Path, n: u32) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let server = [192, 0, 2, 9];
    for (name, tbox, rtt_ms, lossy) in [
        ("4G.pcap", [10, 4, 0, 2], 30u64, false),
        ("5G.pcap", [10, 5, 0, 2], 12, true),
    ] {
        let mut frames: Vec<(u64, u32, Vec<u8>)> = Vec::new();
        let start = 1_700_000_000_000_000_000u64;
        for sn in 0..n {
            let sent = start + u64::from(sn) * 2_000_000;
            let outage = (1000..1750).contains(&sn);
            if lossy && (sn % 50 == 49 || outage) {
                continue;
            }
            let ts = (sent / 1_000_000) as u32;
            let push = kcp_segment(7, 81, 0, 128, ts, sn, sn, &[sn as u8; 200]);
            let push = udp((tbox, 40000), (server, 9000), &push);
            frames.push((sent, push.len() as u32, push));
            let ack = kcp_segment(7, 82, 0, 128, ts, sn, sn + 1, &[]);
            let ack = udp((server, 9000), (tbox, 40000), &ack);
            frames.push((sent + rtt_ms * 1_000_000, ack.len() as u32, ack));
        }
        frames.sort_by_key(|f| f.0);
        let path = dir.join(name);
        std::fs::write(&path, pcap(1, true, false, &frames)).unwrap();
        files.push(path);
    }
    files
}

#[test]
fn the_engine_on_its_own_thread_gives_the_same_records_and_summary() {
    let dir = tempfile::tempdir().unwrap();
    // 2 × ~6 000 observations: several batches, recycled.
    let files = two_path_captures(dir.path(), 3000);
    let config = DissectConfig::default();
    let (records, summary) = run(&files, &config, false);
    assert!(records.len() > 3000, "{} records", records.len());
    // Both paths, the 5G outage and its lost messages are in it.
    assert!(summary.contains("\"on_all_paths\":2205"), "{summary}");
    assert!(summary.contains("\"outages_total\":1"), "{summary}");
    let (threaded_records, threaded_summary) = run(&files, &config, true);
    assert_eq!(records.len(), threaded_records.len());
    for (i, (a, b)) in records.iter().zip(&threaded_records).enumerate() {
        assert_eq!(a, b, "record {i}");
    }
    assert_eq!(summary, threaded_summary);

    let quic = Path::new(env!("CARGO_MANIFEST_DIR")).join(QUIC_FIXTURE);
    // (The key log is in the file.)
    let one = run(std::slice::from_ref(&quic), &config, false);
    assert!(one.0.iter().any(|r| r.contains("stream")), "{:?}", one.0);
    assert_eq!(one, run(&[quic], &config, true));
}

#[test]
fn tcp_segments_taken_from_their_headers_give_what_their_records_give() {
    let dir = tempfile::tempdir().unwrap();
    let synthetic = dir.path().join("ctl.pcap");
    // 16 connections of a control channel, 1 % lost and repaired: ~20 batches, retransmission
    // and HOL records.
    let (_, truth) = write_tcp_capture(
        &synthetic,
        &TcpTraffic {
            connections: 16,
            frames: 20_000,
            loss_per_mille: 10,
            seed: 7,
            segment_bytes: 160,
        },
    );
    assert!(truth.retransmissions() > 50, "{truth:?}");
    let config = DissectConfig::default();
    let (records, summary) = run(std::slice::from_ref(&synthetic), &config, false);
    assert!(
        records.iter().any(|r| r.contains("\"kind\":\"fast\""))
            && records.iter().any(|r| r.contains("\"missing\":\"seq ")),
        "{records:?}"
    );
    assert_eq!((records, summary), run(&[synthetic], &config, true));
    // A public capture made by others: a Windows SMTP client, its path's MTU below its MSS
    // (router signals between the segments), DNS and NetBIOS datagrams among them.
    let smtp = Path::new(env!("CARGO_MANIFEST_DIR")).join(SMTP_FIXTURE);
    let one = run(std::slice::from_ref(&smtp), &config, false);
    assert!(one.1.contains("\"path_mtu\""), "{}", one.1);
    assert_eq!(one, run(&[smtp], &config, true));
}

/// One capture of a decrypted QUIC exchange (the RFC 9001 Initials, then `n` 1-RTT packets of
/// the benches' mix) with a KCP conversation interleaved in runs of varying length, so that
/// observations of each kind land where the other kind was, then `4 n` KCP segments alone (data
/// and ACKs: many batches of them, so that batches of KCP segments come back); and its key log.
fn quic_and_kcp_capture(dir: &Path, n: u64) -> (PathBuf, Keylog) {
    let client = ([10, 0, 0, 1], 50000);
    let server = ([10, 0, 0, 2], 443);
    let initial = |name: &str| {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../decode/tests/data")
            .join(name);
        unhex(&std::fs::read_to_string(p).unwrap())
    };
    let mut frames = vec![
        udp(client, server, &initial("rfc9001-client-initial.hex")),
        udp(server, client, &initial("rfc9001-server-initial.hex")),
    ];
    let mut mix = OneRttMix::new();
    let (tbox, gateway) = (([10, 0, 0, 3], 40000), ([10, 0, 0, 4], 9000));
    let mut sn = 0;
    for i in 2..n {
        frames.push(match mix.packet(i) {
            (true, p) => udp(client, server, &p),
            (false, p) => udp(server, client, &p),
        });
        // In the first 300 packets of every 997, a KCP segment after every 7th.
        if i % 997 < 300 && i % 7 == 0 {
            let push = kcp_segment(9, 81, 0, 128, i as u32, sn, sn, &[sn as u8; 100]);
            frames.push(udp(tbox, gateway, &push));
            sn += 1;
        }
    }
    for i in 0..4 * n as u32 {
        let (sn, ts) = (sn + i / 2, i / 4);
        frames.push(match i % 2 {
            0 => udp(
                tbox,
                gateway,
                &kcp_segment(9, 81, 0, 128, ts, sn, sn, &[i as u8; 100]),
            ),
            _ => udp(
                gateway,
                tbox,
                &kcp_segment(9, 82, 0, 128, ts, sn, sn + 1, &[]),
            ),
        });
    }
    let t0 = 1_700_000_000_000_000_000u64;
    let frames: Vec<(u64, u32, Vec<u8>)> = frames
        .into_iter()
        .enumerate()
        .map(|(i, f)| (t0 + i as u64 * 10_000, f.len() as u32, f))
        .collect();
    let path = dir.join("quic-and-kcp.pcap");
    std::fs::write(&path, pcap(1, true, false, &frames)).unwrap();
    let keylog = Keylog::parse(rfc9001_keylog().as_bytes()).unwrap();
    (path, keylog)
}

#[test]
fn decrypted_quic_mixed_with_kcp_gives_the_same_records_on_its_own_thread() {
    let dir = tempfile::tempdir().unwrap();
    let (file, keylog) = quic_and_kcp_capture(dir.path(), 6000);
    let config = DissectConfig {
        keylog: Some(keylog),
        ..DissectConfig::default()
    };
    let mut analyzer = Analyzer::new(config.clone());
    analyzer
        .run_file(&file, &mut |_| Ok::<(), ()>(()))
        .unwrap()
        .unwrap();
    assert!(analyzer.dissector().quic_stats().decrypted > 5900);
    let one = run(std::slice::from_ref(&file), &config, false);
    // Messages of both protocols are in it.
    assert!(one.1.contains("quic#"), "{}", one.1);
    assert!(one.1.contains("kcp"), "{}", one.1);
    let threaded = run(&[file], &config, true);
    assert_eq!(one.0.len(), threaded.0.len());
    for (i, (a, b)) in one.0.iter().zip(&threaded.0).enumerate() {
        assert_eq!(a, b, "record {i}");
    }
    assert_eq!(one.1, threaded.1);
}

/// The two-path captures decoded with the engine on its own thread and `on_record` giving up
/// at the 100th record (a message): what `decode_and_match` ended with (its panic caught).
/// Decoding stopped soon after (within a few batches in flight), not at the end.
fn giving_up_at_the_hundredth(
    on_record: OnRecord<u64, std::io::Error>,
) -> std::thread::Result<Result<(), std::io::Error>> {
    let dir = tempfile::tempdir().unwrap();
    let files = two_path_captures(dir.path(), 6000);
    let mut analyzer = Analyzer::new(DissectConfig::default());
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let engine = Engine::new(Config {
            emit_messages: true,
            ..Config::default()
        });
        decode_and_match(&mut analyzer, &files, &[], engine, 0u64, on_record, true).map(drop)
    }));
    assert!(
        analyzer.stats().frames < 12_000,
        "{} frames decoded",
        analyzer.stats().frames
    );
    result
}

#[test]
fn an_error_while_handling_records_stops_decoding_and_is_returned() {
    let result = giving_up_at_the_hundredth(|_, seen| {
        *seen += 1;
        match *seen {
            100 => Err(std::io::Error::other("disk full")),
            _ => Ok(()),
        }
    });
    let Ok(Err(e)) = result else {
        panic!("the error was not returned");
    };
    assert_eq!(e.to_string(), "disk full");
}

#[test]
fn a_panic_while_handling_records_stops_decoding_and_goes_on_in_the_caller() {
    let result = giving_up_at_the_hundredth(|_, seen| {
        *seen += 1;
        assert!(*seen != 100, "the records' handler gave up");
        Ok(())
    });
    // The engine's thread, left with batches on their way, ended, and the panic reached the
    // caller.
    let Err(panic) = result else {
        panic!("the panic was lost");
    };
    let said = panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str));
    assert_eq!(said, Some("the records' handler gave up"));
}
