//! The engine on its own thread gives exactly what it gives on the decoding thread: every record
//! and the summary, on captures of two paths long enough for many hand-overs between the threads,
//! and on the QUIC fixture; an error while handling records stops decoding and is returned.
#![allow(clippy::unwrap_used)]
mod pcap_common;

use std::path::{Path, PathBuf};

use etherparse::PacketBuilder;
use pcap_common::{kcp_segment, pcap};
use probe_user::analyze::Analyzer;
use probe_user::dissect::DissectConfig;
use probe_user::pipeline::decode_and_match;
use tboxscope_engine::{Config, Engine};

const QUIC_FIXTURE: &str = "../../shared/fixtures/chrome-cloudflare-quic-with-secrets.pcapng";

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
        |engine, records: &mut Vec<String>| {
            for r in engine.drain_records() {
                records.push(serde_json::to_string(&r).map_err(std::io::Error::other)?);
            }
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
        let udp = |from: [u8; 4], to: [u8; 4], sport: u16, dport: u16, payload: &[u8]| {
            let mut frame = Vec::new();
            PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
                .ipv4(from, to, 64)
                .udp(sport, dport)
                .write(&mut frame, payload)
                .unwrap();
            frame
        };
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
            let push = udp(tbox, server, 40000, 9000, &push);
            frames.push((sent, push.len() as u32, push));
            let ack = kcp_segment(7, 82, 0, 128, ts, sn, sn + 1, &[]);
            let ack = udp(server, tbox, 9000, 40000, &ack);
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
fn an_error_on_the_engine_thread_stops_decoding_and_is_returned() {
    let dir = tempfile::tempdir().unwrap();
    let files = two_path_captures(dir.path(), 6000);
    let mut analyzer = Analyzer::new(DissectConfig::default());
    let result = decode_and_match(
        &mut analyzer,
        &files,
        &[],
        Engine::new(Config::default()),
        0u64,
        |_, seen| {
            *seen += 1;
            match *seen {
                100 => Err(std::io::Error::other("disk full")),
                _ => Ok(()),
            }
        },
        true,
    );
    let Err(e) = result else {
        panic!("the error was not returned");
    };
    assert_eq!(e.to_string(), "disk full");
    // Decoding stopped soon after (within a few batches in flight), not at the end.
    assert!(
        analyzer.stats().frames < 12_000,
        "{} frames decoded",
        analyzer.stats().frames
    );
}
