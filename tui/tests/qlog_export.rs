#![expect(clippy::unwrap_used)]
//! `tboxscope analyze --qlog DIR`: one qlog file per decrypted QUIC connection and capture end.
//!
//! Each file is checked two ways:
//! - against the qlog drafts' required fields, by a validator written here from
//!   draft-ietf-quic-qlog-main-schema (JSON-SEQ records, the header, every event's `time`,
//!   `name`, `data`) and draft-ietf-quic-qlog-quic-events-12 (packet header, the frame types
//!   and each one's required fields);
//! - by a qlog reader nobody here wrote: Cloudflare quiche's `qlog` crate reads the header and
//!   every event as its own typed `quic:packet_sent`/`quic:packet_received` (events carrying a
//!   frame of an extension that crate does not model, such as TIME_STAMP, come back as its
//!   generic JSON events, and exactly those).
//!
//! The packet events of all files together are the packets the report says were decrypted.
use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use tboxscope_test_support::fixture;

/// Frame types of draft-ietf-quic-qlog-quic-events-12 (`QuicBaseFrames`) with the members each
/// requires.
const BASE_FRAMES: &[(&str, &[&str])] = &[
    ("padding", &[]),
    ("ping", &[]),
    ("ack", &[]),
    ("reset_stream", &["stream_id", "error", "final_size"]),
    ("stop_sending", &["stream_id", "error"]),
    ("crypto", &["offset", "length"]),
    ("new_token", &["token"]),
    ("stream", &["stream_id", "offset", "length"]),
    ("max_data", &["maximum"]),
    ("max_stream_data", &["stream_id", "maximum"]),
    ("max_streams", &["stream_type", "maximum"]),
    ("data_blocked", &["limit"]),
    ("stream_data_blocked", &["stream_id", "limit"]),
    ("streams_blocked", &["stream_type", "limit"]),
    (
        "new_connection_id",
        &["sequence_number", "retire_prior_to", "connection_id"],
    ),
    ("retire_connection_id", &["sequence_number"]),
    ("path_challenge", &[]),
    ("path_response", &[]),
    ("connection_close", &[]),
    ("handshake_done", &[]),
    ("unknown", &[]),
    ("datagram", &[]),
];

/// Frames of extensions (multipath, ACK frequency, timestamps, reliable reset), which
/// `$QuicFrame` admits under their own names, with the members tboxscope always writes.
const EXTENSION_FRAMES: &[(&str, &[&str])] = &[
    ("path_ack", &["path_id", "acked_ranges"]),
    (
        "path_new_connection_id",
        &[
            "path_id",
            "sequence_number",
            "retire_prior_to",
            "connection_id",
        ],
    ),
    ("path_retire_connection_id", &["path_id", "sequence_number"]),
    ("path_abandon", &["path_id", "error_code"]),
    (
        "path_status_available",
        &["path_id", "path_status_sequence_number"],
    ),
    (
        "path_status_backup",
        &["path_id", "path_status_sequence_number"],
    ),
    ("max_path_id", &["maximum_path_id"]),
    ("paths_blocked", &["maximum_path_id"]),
    ("path_cids_blocked", &["path_id", "next_sequence_number"]),
    ("ack_frequency", &["sequence_number"]),
    ("immediate_ack", &[]),
    ("time_stamp", &["timestamp"]),
    (
        "reset_stream_at",
        &["stream_id", "error", "final_size", "reliable_size"],
    ),
];

const PACKET_TYPES: &[&str] = &[
    "initial",
    "handshake",
    "0RTT",
    "1RTT",
    "retry",
    "version_negotiation",
    "stateless_reset",
    "unknown",
];

fn is_hex(v: &Value) -> bool {
    v.as_str().is_some_and(|s| {
        s.len() % 2 == 0
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

fn is_uint(v: &Value) -> bool {
    v.as_u64().is_some()
}

/// A file's records, split as RFC 7464 says: each starts with RS and ends with LF.
fn records(path: &Path) -> Vec<Value> {
    let bytes = fs::read(path).unwrap();
    assert_eq!(
        bytes.first(),
        Some(&0x1e),
        "{}: starts with RS",
        path.display()
    );
    bytes[1..]
        .split(|&b| b == 0x1e)
        .enumerate()
        .map(|(i, r)| {
            assert_eq!(
                r.last(),
                Some(&b'\n'),
                "{}: record {i} ends with LF",
                path.display()
            );
            serde_json::from_slice(r)
                .unwrap_or_else(|e| panic!("{}: record {i}: {e}", path.display()))
        })
        .collect()
}

/// Checks one file against the schemas' required fields; returns its events.
fn validate(path: &Path) -> Vec<Value> {
    let ctx = path.display().to_string();
    let mut recs = records(path);
    assert!(!recs.is_empty(), "{ctx}: no header");
    let header = recs.remove(0);
    assert_eq!(
        header["file_schema"], "urn:ietf:params:qlog:file:sequential",
        "{ctx}"
    );
    assert_eq!(
        header["serialization_format"], "application/qlog+json-seq",
        "{ctx}"
    );
    let trace = &header["trace"];
    let vp = &trace["vantage_point"];
    assert_eq!(
        vp["type"], "network",
        "{ctx}: a capture observes the network"
    );
    assert!(
        vp["flow"] == "client" || vp["flow"] == "server",
        "{ctx}: a network vantage point needs its flow: {vp}"
    );
    let common = &trace["common_fields"];
    assert!(
        is_hex(&common["group_id"]),
        "{ctx}: group_id is the ODCID: {common}"
    );
    assert_eq!(common["time_format"], "relative_to_epoch", "{ctx}");
    assert_eq!(common["reference_time"]["clock_type"], "system", "{ctx}");
    assert!(
        common["reference_time"]["epoch"]
            .as_str()
            .unwrap()
            .ends_with('Z'),
        "{ctx}"
    );
    assert!(
        trace["event_schemas"]
            .as_array()
            .unwrap()
            .contains(&Value::from("urn:ietf:params:qlog:events:quic-12")),
        "{ctx}"
    );
    let frame_rules: HashMap<&str, &[&str]> = BASE_FRAMES
        .iter()
        .chain(EXTENSION_FRAMES)
        .copied()
        .collect();
    let mut last = f64::MIN;
    for (i, e) in recs.iter().enumerate() {
        let ctx = format!("{ctx}: event {i}: {e}");
        let time = e["time"].as_f64().unwrap_or_else(|| panic!("{ctx}: time"));
        assert!(time >= last, "{ctx}: events in time order");
        last = time;
        assert!(
            e["name"] == "quic:packet_sent" || e["name"] == "quic:packet_received",
            "{ctx}"
        );
        assert!(is_uint(&e["path_id"]), "{ctx}: path_id");
        let data = &e["data"];
        let h = &data["header"];
        let ty = h["packet_type"].as_str().unwrap();
        assert!(PACKET_TYPES.contains(&ty), "{ctx}");
        assert!(
            is_uint(&h["packet_number"]),
            "{ctx}: decrypted packets have a number"
        );
        assert!(is_hex(&h["dcid"]), "{ctx}");
        if ty != "1RTT" {
            assert!(is_hex(&h["scid"]) && is_hex(&h["version"]), "{ctx}");
        }
        assert!(is_uint(&data["raw"]["length"]), "{ctx}");
        for f in data["frames"].as_array().unwrap() {
            let name = f["frame_type"].as_str().unwrap();
            let required = frame_rules
                .get(name)
                .unwrap_or_else(|| panic!("{ctx}: frame type {name}"));
            for field in *required {
                assert!(!f[field].is_null(), "{ctx}: {name} needs {field}");
            }
            if name == "ack" || name == "path_ack" {
                for r in f["acked_ranges"].as_array().unwrap() {
                    let r = r.as_array().unwrap();
                    assert!((1..=2).contains(&r.len()) && r.iter().all(is_uint), "{ctx}");
                }
                assert!(f["ack_delay"].is_f64(), "{ctx}");
            }
            if name == "stream" {
                assert_eq!(f["raw"]["payload_length"], f["length"], "{ctx}");
            }
            if name == "padding" {
                assert!(is_uint(&f["payload_length"]), "{ctx}");
            }
        }
    }
    recs
}

/// Reads a file with the `qlog` crate; returns (events read as its typed QUIC packet events,
/// events read only as generic JSON).
fn read_with_quiche_qlog(path: &Path) -> (usize, usize) {
    let file = fs::File::open(path).unwrap();
    let reader = qlog::reader::QlogSeqReader::new(Box::new(BufReader::new(file))).unwrap();
    assert_eq!(reader.qlog.file_schema, qlog::QLOGFILESEQ_URI);
    let vp = reader.qlog.trace.vantage_point.clone().unwrap();
    assert_eq!(vp.ty, qlog::VantagePointType::Network);
    let (mut typed, mut generic) = (0, 0);
    for e in reader {
        match e {
            qlog::reader::Event::Qlog(e) => {
                assert!(
                    matches!(
                        e.data,
                        qlog::events::EventData::QuicPacketSent(_)
                            | qlog::events::EventData::QuicPacketReceived(_)
                    ),
                    "{e:?}"
                );
                typed += 1;
            }
            qlog::reader::Event::Json(_) => generic += 1,
        }
    }
    (typed, generic)
}

/// Whether an event has a frame the `qlog` crate does not model.
fn has_extension_frame(e: &Value) -> bool {
    e["data"]["frames"].as_array().unwrap().iter().any(|f| {
        let name = f["frame_type"].as_str().unwrap();
        EXTENSION_FRAMES.iter().any(|(n, _)| *n == name)
    })
}

/// What one `analyze --qlog` run wrote.
struct Exported {
    decrypted: u64,
    /// Each file with its events.
    files: Vec<(PathBuf, Vec<Value>)>,
    stderr: String,
}

/// Runs `tboxscope analyze ARGS --qlog DIR` and validates every file it wrote.
fn analyze_qlog(args: &[&str], dir: &Path) -> Exported {
    let out = Command::new(env!("CARGO_BIN_EXE_tboxscope"))
        .arg("analyze")
        .args(args)
        .arg("--qlog")
        .arg(dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // "QUIC: N packets, M decrypted"
    let decrypted = stdout
        .lines()
        .find_map(|l| l.strip_prefix("QUIC: "))
        .and_then(|l| l.split(", ").nth(1))
        .and_then(|d| d.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no QUIC line in {stdout}"));
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        assert_eq!(path.extension().unwrap(), "sqlog");
        let events = validate(&path);
        let (typed, generic) = read_with_quiche_qlog(&path);
        let with_ext = events.iter().filter(|e| has_extension_frame(e)).count();
        assert_eq!(
            (typed, generic),
            (events.len() - with_ext, with_ext),
            "{}",
            path.display()
        );
        files.push((path, events));
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    Exported {
        decrypted,
        files,
        stderr,
    }
}

fn events(x: &Exported) -> usize {
    x.files.iter().map(|(_, e)| e.len()).sum()
}

#[test]
fn chrome_to_cloudflare_one_file_every_decrypted_packet() {
    let dir = tempfile::tempdir().unwrap();
    let file = fixture("chrome-cloudflare-quic-with-secrets.pcapng");
    let x = analyze_qlog(&[file.to_str().unwrap()], dir.path());
    assert!(x.decrypted > 30, "{}", x.decrypted);
    assert_eq!(events(&x), x.decrypted as usize);
    assert_eq!(
        x.files.len(),
        1,
        "one connection, one capture: {:?}",
        x.files
    );
    assert!(
        x.stderr.contains(&format!("{} packet events", x.decrypted)),
        "{}",
        x.stderr
    );
    let (path, evs) = &x.files[0];
    // Named after the ODCID, the DCID of the client's first Initial.
    let first = &evs[0];
    let odcid = first["data"]["header"]["dcid"].as_str().unwrap();
    assert!(path
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .starts_with(odcid));
    // The capture follows the client's flow: its first Initial is sent, with the start of the
    // ClientHello, and the server's Initial is received.
    assert_eq!(first["name"], "quic:packet_sent");
    assert_eq!(first["data"]["header"]["packet_type"], "initial");
    assert_eq!(first["time"], 0.0);
    let frames = |e: &Value, t: &str| -> Vec<Value> {
        e["data"]["frames"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["frame_type"] == t)
            .cloned()
            .collect()
    };
    // (Chrome sends its ClientHello's CRYPTO frames out of order.)
    assert!(frames(first, "crypto").iter().any(|f| f["offset"] == 0));
    assert!(evs
        .iter()
        .any(|e| e["name"] == "quic:packet_received"
            && e["data"]["header"]["packet_type"] == "initial"));
    // Stream data and acknowledgements in both directions; coalesced packets share a datagram.
    let kinds: BTreeSet<(String, String)> = evs
        .iter()
        .flat_map(|e| {
            frames(e, "stream")
                .into_iter()
                .chain(frames(e, "ack"))
                .map(|f| (e["name"].to_string(), f["frame_type"].to_string()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(kinds.len(), 4, "{kinds:?}");
    let mut per_datagram: HashMap<u64, usize> = HashMap::new();
    for e in evs {
        *per_datagram
            .entry(e["data"]["datagram_id"].as_u64().unwrap())
            .or_default() += 1;
    }
    assert!(per_datagram.values().any(|&n| n > 1), "coalesced packets");
    // Single path: every packet on path 0.
    assert!(evs.iter().all(|e| e["path_id"] == 0));
    // The STREAM frames are tshark's (the reference decode analyze_cli checks in).
    let mut expected: Vec<(u64, u64)> = Vec::new();
    for line in include_str!("data/chrome-quic-tshark.tsv").lines() {
        let c: Vec<&str> = line.split('\t').collect();
        let ids = c[2].split(',').filter(|s| !s.is_empty());
        let mut offs = c[3].split(',').filter(|s| !s.is_empty());
        for id in ids {
            // tshark leaves the offset out for frames without the OFF bit: offset 0.
            let off = offs.next().map_or(0, |o| o.parse().unwrap());
            expected.push((id.parse().unwrap(), off));
        }
    }
    let mut got: Vec<(u64, u64)> = evs
        .iter()
        .flat_map(|e| frames(e, "stream"))
        .map(|f| {
            (
                f["stream_id"].as_u64().unwrap(),
                f["offset"].as_u64().unwrap(),
            )
        })
        .collect();
    expected.sort_unstable();
    got.sort_unstable();
    assert!(!got.is_empty());
    assert_eq!(got, expected);
}

#[test]
fn a_lone_initial_and_quic_v2_with_extension_frames() {
    let dir = tempfile::tempdir().unwrap();
    let file = fixture("quic-tls-handshake.pcapng");
    let x = analyze_qlog(&[file.to_str().unwrap()], dir.path());
    assert_eq!(events(&x), x.decrypted as usize);
    assert_eq!(x.decrypted, 1);
    // QUIC v2 (RFC 9369): its version in the long headers, TIME_STAMP frames as extension
    // frames (the qlog crate reads those events as generic JSON, checked in analyze_qlog).
    let dir = tempfile::tempdir().unwrap();
    let file = fixture("ndpi-quic-v2.pcapng");
    let x = analyze_qlog(&[file.to_str().unwrap()], dir.path());
    assert_eq!(events(&x), x.decrypted as usize);
    assert!(x.decrypted > 0);
    let all: Vec<&Value> = x.files.iter().flat_map(|(_, e)| e).collect();
    assert!(all
        .iter()
        .any(|e| e["data"]["header"]["version"] == "6b3343cf"));
    assert!(all.iter().any(|e| has_extension_frame(e)));
}

fn udp(from: ([u8; 4], u16), to: ([u8; 4], u16), payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::new();
    etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(from.0, to.0, 64)
        .udp(from.1, to.1)
        .write(&mut frame, payload)
        .unwrap();
    frame
}

fn varints(parts: &[u64]) -> Vec<u8> {
    let mut v = Vec::new();
    for &p in parts {
        tboxscope_decode::quic::varint::encode_varint(p, &mut v).unwrap();
    }
    v
}

/// A multipath connection (draft-ietf-quic-multipath, Path IDs) captured at the T-Box on eth0
/// and eth1: the RFC 9001 handshake on path 0, the server's PATH_NEW_CONNECTION_ID for path 1,
/// then the client sending every message on both paths (the same STREAM offsets), each path
/// numbering its packets from 0 in its own space and sealing them with the path's nonce; the
/// server acknowledging both on path 0 (ACK and PATH_ACK). Returns the two captures and the key
/// log.
fn multipath_captures(dir: &Path, messages: u64) -> (PathBuf, PathBuf, PathBuf) {
    use tboxscope_test_support::quic::{rfc9001_keylog, seal_short, unhex, v1_keys};
    let (client0, server0) = (([10, 0, 0, 1], 50000), ([10, 0, 0, 2], 443));
    let (client1, server1) = (([10, 1, 0, 1], 50001), ([10, 1, 0, 2], 443));
    let ck = v1_keys(&[0x11; 32]);
    let sk = v1_keys(&[0x22; 32]);
    let initial = |name: &str| {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../decode/tests/data")
            .join(name);
        unhex(&fs::read_to_string(p).unwrap())
    };
    let server_cid = tboxscope_test_support::quic::RFC9001_SERVER_CID;
    let path1_cid = [0x11u8; 8];
    let t0 = 1_700_000_000_000_000_000u64;
    let ms = 1_000_000;
    let mut eth0 = vec![
        (
            t0,
            udp(client0, server0, &initial("rfc9001-client-initial.hex")),
        ),
        (
            t0 + ms,
            udp(server0, client0, &initial("rfc9001-server-initial.hex")),
        ),
    ];
    let mut eth1 = Vec::new();
    // PATH_NEW_CONNECTION_ID(path 1, seq 0, retire 0, 8-byte CID, token).
    let mut ncid = varints(&[0x3e78, 1, 0, 0]);
    ncid.push(8);
    ncid.extend_from_slice(&path1_cid);
    ncid.extend_from_slice(&[0xee; 16]);
    let mut server_pn = 0;
    eth0.push((
        t0 + 2 * ms,
        udp(
            server0,
            client0,
            &seal_short(&sk, &sk, &[], server_pn, 2, false, 0, &ncid),
        ),
    ));
    server_pn += 1;
    for i in 0..messages {
        // STREAM 0 (OFF and LEN bits), 100 bytes at offset 100 i.
        let mut stream = varints(&[0x0e, 0, 100 * i, 100]);
        stream.extend_from_slice(&[i as u8; 100]);
        let t = t0 + (10 + 10 * i) * ms;
        eth0.push((
            t,
            udp(
                client0,
                server0,
                &seal_short(&ck, &ck, &server_cid, i, 2, false, 0, &stream),
            ),
        ));
        eth1.push((
            t + 2 * ms,
            udp(
                client1,
                server1,
                &seal_short(&ck, &ck, &path1_cid, i, 2, false, 1, &stream),
            ),
        ));
        if i % 4 == 3 {
            // ACK of path 0 and PATH_ACK of path 1, packets 0..=i each.
            let mut acks = varints(&[0x02, i, 0, 0, i]);
            acks.extend(varints(&[0x3e, 1, i, 0, 0, i]));
            // One stamped before the packet written ahead of it in the capture (a host stamps
            // what it sends and receives at different points): the export puts it back in
            // time order.
            let at = if i == 7 { t - 3 * ms } else { t + 5 * ms };
            eth0.push((
                at,
                udp(
                    server0,
                    client0,
                    &seal_short(&sk, &sk, &[], server_pn, 2, false, 0, &acks),
                ),
            ));
            server_pn += 1;
        }
    }
    let write = |name: &str, frames: Vec<(u64, Vec<u8>)>| {
        let frames: Vec<(u64, u32, Vec<u8>)> = frames
            .into_iter()
            .map(|(t, f)| (t, f.len() as u32, f))
            .collect();
        let path = dir.join(name);
        fs::write(
            &path,
            tboxscope_test_support::pcap::pcap(1, true, false, &frames),
        )
        .unwrap();
        path
    };
    let keylog = dir.join("keylog.txt");
    fs::write(&keylog, rfc9001_keylog()).unwrap();
    (
        write("tbox-eth0.pcap", eth0),
        write("tbox-eth1.pcap", eth1),
        keylog,
    )
}

/// The checks every multipath file passes: 1-RTT packets on paths 0 and 1, each path its own
/// packet-number space (no number twice per direction and path, and both start at 0), and the
/// same stream ranges on both paths (redundant sending).
fn check_multipath(path: &Path, evs: &[Value]) {
    let ctx = path.display().to_string();
    let one_rtt: Vec<&Value> = evs
        .iter()
        .filter(|e| e["data"]["header"]["packet_type"] == "1RTT")
        .collect();
    let paths: BTreeSet<u64> = one_rtt
        .iter()
        .map(|e| e["path_id"].as_u64().unwrap())
        .collect();
    assert_eq!(paths, BTreeSet::from([0, 1]), "{ctx}");
    let mut seen = HashSet::new();
    for e in &one_rtt {
        let key = (
            e["name"].to_string(),
            e["path_id"].as_u64().unwrap(),
            e["data"]["header"]["packet_number"].as_u64().unwrap(),
        );
        assert!(seen.insert(key.clone()), "{ctx}: {key:?} twice");
    }
    for path in [0, 1] {
        assert!(
            one_rtt.iter().any(|e| e["path_id"] == path
                && e["name"] == "quic:packet_sent"
                && e["data"]["header"]["packet_number"] == 0),
            "{ctx}: path {path} numbers from 0"
        );
    }
    let ranges = |path: u64| -> BTreeSet<(u64, u64)> {
        one_rtt
            .iter()
            .filter(|e| e["path_id"] == path)
            .flat_map(|e| e["data"]["frames"].as_array().unwrap().iter())
            .filter(|f| f["frame_type"] == "stream")
            .map(|f| {
                (
                    f["stream_id"].as_u64().unwrap(),
                    f["offset"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    let (a, b) = (ranges(0), ranges(1));
    let both = a.intersection(&b).count();
    assert!(
        both > 0 && both * 10 >= a.len().min(b.len()) * 9,
        "{ctx}: {both} of {} / {}",
        a.len(),
        b.len()
    );
}

#[test]
fn multipath_connection_has_both_paths_in_one_file() {
    let caps = tempfile::tempdir().unwrap();
    let (eth0, eth1, keylog) = multipath_captures(caps.path(), 40);
    let dir = tempfile::tempdir().unwrap();
    let x = analyze_qlog(
        &[
            "--keylog",
            keylog.to_str().unwrap(),
            eth0.to_str().unwrap(),
            eth1.to_str().unwrap(),
        ],
        dir.path(),
    );
    // 2 Initials, the PATH_NEW_CONNECTION_ID, 40 messages on each path, 10 ACKs.
    assert_eq!(x.decrypted, 2 + 1 + 80 + 10);
    assert_eq!(events(&x), x.decrypted as usize);
    assert!(!x.stderr.contains("out of time order"), "{}", x.stderr);
    // Both captures are on the T-Box (one host): one file holds both paths.
    assert_eq!(x.files.len(), 1, "{:?}", x.files);
    let (path, evs) = &x.files[0];
    check_multipath(path, evs);
    // The path frames, with their path ids.
    let frames: Vec<&Value> = evs
        .iter()
        .flat_map(|e| e["data"]["frames"].as_array().unwrap())
        .collect();
    assert!(frames
        .iter()
        .any(|f| f["frame_type"] == "path_new_connection_id" && f["path_id"] == 1));
    let path_ack = frames
        .iter()
        .find(|f| f["frame_type"] == "path_ack")
        .unwrap();
    assert_eq!(path_ack["path_id"], 1);
    assert_eq!(path_ack["acked_ranges"], serde_json::json!([[0, 3]]));
    // The server's packets are received at the T-Box; the client's (both paths) sent.
    let sent = evs
        .iter()
        .filter(|e| e["name"] == "quic:packet_sent")
        .count();
    assert_eq!(sent, 1 + 80);
}

/// The lab's redundant QUIC (quinn, the same messages on one connection per path), captured at
/// both ends of both paths: a file per connection and end, the client's packets sent at the
/// T-Box and received, with the same numbers, at the gateway.
#[test]
#[ignore = "needs root"]
fn lab_redundant_quic_files_per_connection_and_end() {
    use std::time::Duration;
    use tboxscope::labcap::LabCapture;
    use tboxscope_lab::peers::Transport;
    use tboxscope_lab::run::{run, RunOptions};
    use tboxscope_lab::{LabNames, Scenario};

    let pcaps = tempfile::tempdir().unwrap();
    let names = LabNames::for_test("qlog").unwrap();
    let mut opts = RunOptions::new(names.clone());
    opts.duration = Duration::from_secs(5);
    opts.drain = Duration::from_secs(2);
    opts.transports = vec![Transport::QuicRedundant];
    let mut capture = LabCapture::new(Some(pcaps.path().to_path_buf()));
    let result = run(&Scenario::preset("S2").unwrap(), &opts, &mut capture);
    let _ = tboxscope_lab::down(&names);
    let report = result.unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);

    let keylog = pcaps.path().join("quic-keylog.txt");
    let mut args: Vec<String> = vec!["--keylog".into(), keylog.display().to_string()];
    for f in ["tbox-eth0", "gateway-g0", "tbox-eth1", "gateway-g1"] {
        args.push(pcaps.path().join(format!("{f}.pcap")).display().to_string());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let dir = tempfile::tempdir().unwrap();
    let x = analyze_qlog(&args, dir.path());
    println!("{}", x.stderr);
    assert!(x.decrypted > 500, "{}", x.decrypted);
    assert_eq!(events(&x), x.decrypted as usize);
    let name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
    let tbox: Vec<_> = x
        .files
        .iter()
        .filter(|(p, _)| name(p).ends_with("_tbox.sqlog"))
        .collect();
    let gateway: Vec<_> = x
        .files
        .iter()
        .filter(|(p, _)| name(p).ends_with("_gateway.sqlog"))
        .collect();
    assert_eq!(
        (tbox.len(), gateway.len(), x.files.len()),
        (2, 2, 4),
        "{:?}",
        x.files
    );
    for (t, evs) in &tbox {
        let group = name(t).trim_end_matches("_tbox.sqlog").to_owned();
        let (_, far) = gateway
            .iter()
            .find(|(g, _)| name(g).starts_with(&group))
            .unwrap();
        let numbers = |evs: &[Value], event: &str| -> BTreeSet<u64> {
            evs.iter()
                .filter(|e| e["name"] == event && e["data"]["header"]["packet_type"] == "1RTT")
                .map(|e| e["data"]["header"]["packet_number"].as_u64().unwrap())
                .collect()
        };
        // Client → server: sent at the T-Box, received (less the lost ones) at the gateway.
        let sent = numbers(evs, "quic:packet_sent");
        let arrived = numbers(far, "quic:packet_received");
        assert!(
            arrived.is_subset(&sent) && arrived.len() * 10 >= sent.len() * 9,
            "{group}"
        );
        assert!(
            evs.iter().chain(far.iter()).all(|e| e["path_id"] == 0),
            "{group}"
        );
    }
}
