//! Real captures decoded exactly as tshark decodes them.
#![expect(clippy::unwrap_used)]

use std::process::Command;
use tboxscope_decode::quic::{DatagramInfo, Frame, Keylog, PacketType, QuicDecoder};
use tboxscope_test_support::quic::read_pcapng;

const CHROME: &str = "../../shared/fixtures/chrome-cloudflare-quic-with-secrets.pcapng";
const HANDSHAKE: &str = "../../shared/fixtures/quic-tls-handshake.pcapng";
const TSHARK_FIELDS: [&str; 6] = [
    "frame.number",
    "quic.packet_number",
    "quic.stream.stream_id",
    "quic.stream.offset",
    "quic.stream.length",
    "quic.decryption_failed",
];

fn fixture(name: &str) -> String {
    // Tests run with the crate dir as cwd; the fixtures live in /work/shared beside the repo.
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(name);
    if p.exists() {
        return p.to_string_lossy().into_owned();
    }
    format!("/work/shared/fixtures/{}", name.rsplit('/').next().unwrap())
}

fn tshark_available() -> bool {
    Command::new("tshark")
        .arg("-v")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn tshark(file: &str, filter: &str, fields: &[&str]) -> String {
    let mut cmd = Command::new("tshark");
    cmd.args(["-r", file, "-Y", filter, "-T", "fields"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

fn join(v: &[u64]) -> String {
    v.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn chrome_cloudflare_packet_numbers_and_streams_match_tshark() {
    let file = fixture(CHROME);
    let expected = include_str!("data/chrome-cloudflare-quic.tsv");
    if tshark_available() {
        assert_eq!(
            tshark(&file, "quic", &TSHARK_FIELDS),
            expected,
            "checked-in tshark output is stale"
        );
    }
    let cap = read_pcapng(&file);
    assert!(
        !cap.secrets.is_empty(),
        "fixture has a Decryption Secrets Block"
    );
    let mut log = Keylog::default();
    for s in &cap.secrets {
        log.extend(s, "decryption secrets block").unwrap();
    }
    let mut dec = QuicDecoder::new(Default::default(), Some(log));
    let mut ours = std::collections::BTreeMap::new();
    for u in &cap.udp {
        let info = DatagramInfo {
            src: Some(u.src),
            dst: Some(u.dst),
            from_client: None,
        };
        let pad_before = dec.stats.padding_bytes;
        let (mut pns, mut ids, mut offs, mut lens) = (vec![], vec![], vec![], vec![]);
        dec.decode_with(&u.payload, &info, |p| {
            assert!(
                p.payload.is_some(),
                "frame {}: {:?}",
                u.frame,
                p.undecrypted
            );
            pns.extend(p.pn);
            for f in p.frames() {
                if let Frame::Stream {
                    stream_id,
                    offset,
                    has_offset,
                    has_length,
                    data,
                    ..
                } = f.unwrap()
                {
                    ids.push(stream_id);
                    if has_offset {
                        offs.push(offset);
                    }
                    if has_length {
                        lens.push(data.len() as u64);
                    }
                }
            }
        });
        ours.insert(
            u.frame,
            (pns, ids, offs, lens, dec.stats.padding_bytes > pad_before),
        );
    }
    let mut rows = 0;
    for line in expected.lines() {
        let c: Vec<&str> = line.split('\t').collect();
        let frame: usize = c[0].parse().unwrap();
        let (pns, ids, offs, lens, padded) = ours
            .get(&frame)
            .unwrap_or_else(|| panic!("frame {frame} not decoded"));
        let mut want_pns: Vec<&str> = c[1].split(',').filter(|s| !s.is_empty()).collect();
        if c[5].contains('1') && want_pns.len() == pns.len() + 1 {
            // tshark dissects the all-zero datagram padding after a coalesced Initial as a short
            // header packet and reports the packet number of its failed decryption; the decoder
            // reports it as padding.
            assert!(
                padded,
                "frame {frame}: extra tshark packet without datagram padding"
            );
            want_pns.pop();
        }
        assert_eq!(
            join(pns),
            want_pns.join(","),
            "frame {frame} packet numbers"
        );
        assert_eq!(join(ids), c[2], "frame {frame} stream ids");
        assert_eq!(join(offs), c[3], "frame {frame} stream offsets");
        assert_eq!(join(lens), c[4], "frame {frame} stream lengths");
        rows += 1;
    }
    assert_eq!(rows, 34);
    assert_eq!(
        ours.len(),
        34,
        "the decoder saw QUIC in exactly the frames tshark did"
    );
    assert!(dec.stats.not_decrypted.is_empty(), "{:?}", dec.stats);
    assert!(dec.stats.frame_errors.is_empty(), "{:?}", dec.stats);
    assert_eq!(dec.stats.connections, 1);
    let info = dec.connection_info(0).unwrap();
    assert_eq!(
        info.cipher_suite,
        Some(tboxscope_decode::quic::keys::CipherSuite::Aes128GcmSha256)
    );
}

#[test]
fn chrome_cloudflare_without_keys_says_why() {
    let cap = read_pcapng(&fixture(CHROME));
    let mut dec = QuicDecoder::new(Default::default(), None);
    let mut reasons = std::collections::BTreeSet::new();
    for u in &cap.udp {
        let info = DatagramInfo {
            src: Some(u.src),
            dst: Some(u.dst),
            from_client: None,
        };
        for s in dec.decode(&u.payload, &info) {
            if s.packet_type == PacketType::Initial {
                assert!(s.decrypted, "Initials need no keys");
            } else {
                assert!(!s.decrypted);
                reasons.insert(s.undecrypted_reason.unwrap());
            }
        }
    }
    assert_eq!(
        reasons.into_iter().collect::<Vec<_>>(),
        vec!["not decrypted: no keylog".to_string()]
    );
}

#[test]
fn quic_tls_handshake_initial_decrypts_without_keys() {
    let file = fixture(HANDSHAKE);
    let expected = include_str!("data/quic-tls-handshake-sni.tsv");
    if tshark_available() {
        assert_eq!(
            tshark(
                &file,
                "quic",
                &["frame.number", "tls.handshake.extensions_server_name"]
            ),
            expected
        );
    }
    let want_sni = expected.lines().next().unwrap().split('\t').nth(1).unwrap();
    let cap = read_pcapng(&file);
    let mut dec = QuicDecoder::new(Default::default(), None);
    let u = &cap.udp[0];
    let out = dec.decode(
        &u.payload,
        &DatagramInfo {
            src: Some(u.src),
            dst: Some(u.dst),
            from_client: None,
        },
    );
    assert_eq!(out[0].packet_type, PacketType::Initial);
    assert!(out[0].decrypted, "{:?}", out[0].undecrypted_reason);
    assert!(out[0].frames.iter().any(|f| f.frame_type == "crypto"));
    let info = dec.connection_info(out[0].connection.unwrap()).unwrap();
    assert_eq!(info.sni.as_deref(), Some(want_sni));
}

#[test]
fn chrome_cloudflare_ack_eliciting_frames_by_their_summaries() {
    // RFC 9002: a packet of only ACK, PADDING and CONNECTION_CLOSE frames elicits no ACK. The
    // summaries' names (what the engine sees) must say so for each frame the decoder makes.
    let cap = read_pcapng(&fixture(CHROME));
    let mut log = Keylog::default();
    for s in &cap.secrets {
        log.extend(s, "decryption secrets block").unwrap();
    }
    let mut dec = QuicDecoder::new(Default::default(), Some(log));
    let (mut eliciting, mut not) = (0, 0);
    for u in &cap.udp {
        let info = DatagramInfo {
            src: Some(u.src),
            dst: Some(u.dst),
            from_client: None,
        };
        dec.decode_with(&u.payload, &info, |p| {
            for f in p.frames() {
                let f = f.unwrap();
                let by_kind = !matches!(
                    f,
                    Frame::Ack(_) | Frame::Padding { .. } | Frame::ConnectionClose { .. }
                );
                let summary = tboxscope_decode::quic::FrameSummary::from_frame(&f);
                assert_eq!(summary.ack_eliciting(), by_kind, "{summary:?}");
                if by_kind {
                    eliciting += 1;
                } else {
                    not += 1;
                }
            }
        });
    }
    assert!(
        eliciting > 10 && not > 10,
        "{eliciting} eliciting, {not} not"
    );
}
