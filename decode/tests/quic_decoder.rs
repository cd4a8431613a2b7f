//! The stateful decoder: keylog selection, key updates, multipath (current draft and draft-05),
//! reasons for undecrypted packets, bounded connection table.
#![expect(clippy::unwrap_used)]

use std::net::SocketAddr;
use tboxscope_decode::quic::keys::{CipherSuite, PacketKeys, Secret};
use tboxscope_decode::quic::multipath::MultipathMode;
use tboxscope_decode::quic::varint::encode_varint;
use tboxscope_decode::quic::{
    DatagramInfo, DecoderConfig, Keylog, PacketSummary, QuicDecoder, Version,
};
use tboxscope_test_support::quic::{directions, seal_short, unhex};

const RANDOM: &str = "ebf8fa56f12939b9584a3896472ec40bb863cfd3e86804fe3a47f06a2b69484c";
const CLIENT_SECRET: [u8; 32] = [0x11; 32];
const SERVER_SECRET: [u8; 32] = [0x22; 32];
const SERVER_CID: &str = "f067a5502a4262b5";

fn data(name: &str) -> Vec<u8> {
    let p = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    unhex(&std::fs::read_to_string(p).unwrap())
}

struct Lab {
    dec: QuicDecoder,
    to_server: DatagramInfo,
    to_client: DatagramInfo,
}

fn keylog(random: &str) -> Keylog {
    let text = format!(
        "CLIENT_TRAFFIC_SECRET_0 {random} {}\nSERVER_TRAFFIC_SECRET_0 {random} {}\n",
        hex(&CLIENT_SECRET),
        hex(&SERVER_SECRET)
    );
    Keylog::parse(text.as_bytes()).unwrap()
}

fn hex(b: &[u8]) -> String {
    tboxscope_decode::quic::summary::hex(b)
}

/// A connection set up by the RFC 9001 client and server Initials (client random `RANDOM`,
/// TLS_AES_128_GCM_SHA256, server CID f067a5502a4262b5, empty client CID).
fn lab(log: Option<Keylog>) -> Lab {
    let ca: SocketAddr = "[2001:db8::1]:50000".parse().unwrap();
    let sa: SocketAddr = "[2001:db8::2]:443".parse().unwrap();
    let (to_server, to_client) = directions(ca, sa);
    let mut l = Lab {
        dec: QuicDecoder::new(DecoderConfig::default(), log),
        to_server,
        to_client,
    };
    assert!(
        l.dec
            .decode(&data("rfc9001-client-initial.hex"), &l.to_server)[0]
            .decrypted
    );
    assert!(
        l.dec
            .decode(&data("rfc9001-server-initial.hex"), &l.to_client)[0]
            .decrypted
    );
    l
}

fn keys(secret: &[u8], generation: usize) -> PacketKeys {
    let mut s = Secret::new(CipherSuite::Aes128GcmSha256, Version::V1, secret).unwrap();
    for _ in 0..generation {
        s = s.next_generation().unwrap();
    }
    s.keys().unwrap()
}

fn ping_padding() -> Vec<u8> {
    vec![0x01, 0, 0, 0]
}

fn one(l: &mut Lab, pkt: &[u8], to_server: bool) -> PacketSummary {
    let info = if to_server { l.to_server } else { l.to_client };
    let mut v = l.dec.decode(pkt, &info);
    assert_eq!(v.len(), 1);
    v.remove(0)
}

#[test]
fn one_rtt_both_directions_with_keylog() {
    let mut l = lab(Some(keylog(RANDOM)));
    let ck = keys(&CLIENT_SECRET, 0);
    let sk = keys(&SERVER_SECRET, 0);
    // STREAM 0, offset 7, length 3, FIN.
    let stream = [0x0f, 0x00, 0x07, 0x03, b'a', b'b', b'c'];
    let p = seal_short(&ck, &ck, &unhex(SERVER_CID), 0, 1, false, 0, &stream);
    let s = one(&mut l, &p, true);
    assert!(s.decrypted, "{:?}", s.undecrypted_reason);
    assert_eq!(
        (s.pn, s.from_client, s.dcid.as_str()),
        (Some(0), Some(true), SERVER_CID)
    );
    let f = &s.frames[0];
    assert_eq!(
        (f.stream_id, f.offset, f.length, f.fin),
        (Some(0), Some(7), Some(3), Some(true))
    );
    // Server to client: zero-length DCID, found by addresses.
    let p = seal_short(&sk, &sk, &[], 0, 2, false, 0, &ping_padding());
    let s = one(&mut l, &p, false);
    assert!(s.decrypted, "{:?}", s.undecrypted_reason);
    assert_eq!(
        (s.pn, s.from_client, s.dcid.as_str()),
        (Some(0), Some(false), "")
    );
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["packet_type"], "one_rtt");
    assert_eq!(json["frames"][0]["type"], "ping");
}

#[test]
fn undecrypted_reasons() {
    let ck = keys(&CLIENT_SECRET, 0);
    let p = seal_short(
        &ck,
        &ck,
        &unhex(SERVER_CID),
        0,
        1,
        false,
        0,
        &ping_padding(),
    );

    let mut l = lab(None);
    let s = one(&mut l, &p, true);
    assert_eq!(
        s.undecrypted_reason.as_deref(),
        Some("not decrypted: no keylog")
    );
    assert_eq!(s.dcid, SERVER_CID);
    assert_eq!(s.spin_bit, Some(false));

    let other = "00".repeat(32);
    let mut l = lab(Some(keylog(&other)));
    let s = one(&mut l, &p, true);
    assert_eq!(
        s.undecrypted_reason.unwrap(),
        format!("not decrypted: no keys for client random {RANDOM} (keylog lacks CLIENT_TRAFFIC_SECRET_0)")
    );
    assert_eq!(
        l.dec.stats.not_decrypted.get("no_keys_for_client_random"),
        Some(&1)
    );

    let mut l = lab(Some(keylog(RANDOM)));
    let wrong = keys(&[0x33; 32], 0);
    let bad = seal_short(
        &wrong,
        &ck,
        &unhex(SERVER_CID),
        0,
        1,
        false,
        0,
        &ping_padding(),
    );
    let s = one(&mut l, &bad, true);
    assert!(s
        .undecrypted_reason
        .unwrap()
        .contains("authentication failed"));

    let mut dec = QuicDecoder::new(DecoderConfig::default(), None);
    let s = dec.decode(&p, &DatagramInfo::default());
    assert_eq!(
        s[0].undecrypted_reason.as_deref(),
        Some("not decrypted: unknown connection (no Initial or known connection ID)")
    );
}

#[test]
fn key_updates_are_followed_and_reordered_packets_use_previous_keys() {
    let mut l = lab(Some(keylog(RANDOM)));
    let hp = keys(&CLIENT_SECRET, 0);
    let dcid = unhex(SERVER_CID);
    let send = |l: &mut Lab, gen: usize, pn: u64| {
        let p = seal_short(
            &keys(&CLIENT_SECRET, gen),
            &hp,
            &dcid,
            pn,
            1,
            gen % 2 == 1,
            0,
            &ping_padding(),
        );
        one(l, &p, true)
    };
    for (gen, pn) in [
        (0, 0),
        (0, 1),
        (1, 4),
        (1, 5),
        (0, 3),
        (2, 6),
        (2, 7),
        (3, 8),
    ] {
        let s = send(&mut l, gen, pn);
        assert!(s.decrypted, "gen {gen} pn {pn}: {:?}", s.undecrypted_reason);
        assert_eq!((s.pn, s.key_phase), (Some(pn), Some(gen % 2 == 1)));
    }
    assert_eq!(l.dec.stats.key_updates, 3);
}

fn frame_bytes(parts: &[u64], raw: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    for &p in parts {
        encode_varint(p, &mut v).unwrap();
    }
    v.extend_from_slice(raw);
    v
}

#[test]
fn multipath_current_draft_path_ids_and_pn_spaces() {
    let mut l = lab(Some(keylog(RANDOM)));
    let ck = keys(&CLIENT_SECRET, 0);
    let sk = keys(&SERVER_SECRET, 0);
    let path1_cid = [0x11u8; 8];
    // Server announces a CID for path 1: PATH_NEW_CONNECTION_ID(path 1, seq 0, retire 0).
    let mut ncid = frame_bytes(&[0x3e78, 1, 0, 0], &[8]);
    ncid.extend_from_slice(&path1_cid);
    ncid.extend_from_slice(&[0xee; 16]);
    let p = seal_short(&sk, &sk, &[], 0, 1, false, 0, &ncid);
    let s = one(&mut l, &p, false);
    assert!(s.decrypted);
    assert_eq!(
        (s.frames[0].frame_type, s.frames[0].path_id),
        ("path_new_connection_id", Some(1))
    );

    let dcid0 = unhex(SERVER_CID);
    // Path 1 starts at pn 1000 (2-byte encoding), path 0 continues at 3: with one shared space
    // the 1-byte packet numbers would reconstruct wrongly.
    let path_ack = frame_bytes(&[0x3e, 0, 3, 0, 0, 3], &[]);
    let plan: [(u32, u64, usize, &[u8]); 5] = [
        (0, 3, 1, &[1, 0, 0, 0]),
        (1, 1000, 2, &path_ack),
        (1, 1001, 1, &[1, 0, 0, 0]),
        (0, 4, 1, &[1, 0, 0, 0]),
        (1, 1002, 1, &[1, 0, 0, 0]),
    ];
    for (path, pn, pn_len, payload) in plan {
        let cid: &[u8] = if path == 0 { &dcid0 } else { &path1_cid };
        let p = seal_short(&ck, &ck, cid, pn, pn_len, false, path, payload);
        let s = one(&mut l, &p, true);
        assert!(
            s.decrypted,
            "path {path} pn {pn}: {:?}",
            s.undecrypted_reason
        );
        assert_eq!(s.pn, Some(pn), "path {path}");
        if path == 1 {
            assert_eq!(s.path_id, Some(1));
        }
        if pn == 1000 {
            assert_eq!(s.frames[0].frame_type, "path_ack");
            assert_eq!(
                (s.frames[0].path_id, s.frames[0].ack_ranges.clone()),
                (Some(0), Some(vec![[0, 3]]))
            );
        }
    }
    assert_eq!(
        l.dec.connection_info(0).unwrap().multipath,
        MultipathMode::PathId
    );
}

/// As noq (n0-computer's quinn with QUIC Multipath) sends the current draft: every path's
/// packets acknowledged by PATH_ACK frames (path 0's too, never a plain ACK in 1-RTT), those
/// of path 1 in a packet on path 0; and several 1-RTT packets of one path sent with UDP GSO,
/// captured as one datagram before segmentation (equal segments, the last one shorter).
#[test]
fn noq_path_acks_on_another_path_and_gso_segments() {
    let mut l = lab(Some(keylog(RANDOM)));
    let ck = keys(&CLIENT_SECRET, 0);
    let sk = keys(&SERVER_SECRET, 0);
    let path1_cid = [0x11u8; 8];
    let mut ncid = frame_bytes(&[0x3e78, 1, 0, 0], &[8]);
    ncid.extend_from_slice(&path1_cid);
    ncid.extend_from_slice(&[0xee; 16]);
    assert!(
        one(
            &mut l,
            &seal_short(&sk, &sk, &[], 0, 1, false, 0, &ncid),
            false
        )
        .decrypted
    );
    // Client data on path 1, pn 0..=2: the first alone, the others one GSO send of two
    // segments, then three segments (10, 10 and 4 bytes of frames) for pn 3..=5.
    let stream = |n: usize| {
        let mut f = vec![0x0a, 0x02, n as u8];
        f.extend(std::iter::repeat_n(b'm', n));
        f
    };
    let p0 = seal_short(&ck, &ck, &path1_cid, 0, 1, false, 1, &stream(5));
    assert!(one(&mut l, &p0, true).decrypted);
    let seg = |pn: u64, payload: &[u8]| seal_short(&ck, &ck, &path1_cid, pn, 1, false, 1, payload);
    let two = [seg(1, &stream(5)), seg(2, &stream(5))].concat();
    let three = [
        seg(3, &stream(7)),
        seg(4, &stream(7)),
        seg(5, &[1, 0, 0, 0]),
    ]
    .concat();
    for (datagram, pns) in [(two, vec![1, 2]), (three, vec![3, 4, 5])] {
        let v = l.dec.decode(&datagram, &l.to_server);
        let got: Vec<_> = v.iter().map(|s| (s.decrypted, s.pn, s.path_id)).collect();
        let want: Vec<_> = pns.iter().map(|&pn| (true, Some(pn), Some(1))).collect();
        assert_eq!(got, want);
    }
    assert_eq!(l.dec.stats.gso_segments, 3);
    assert!(l.dec.stats.not_decrypted.is_empty(), "{:?}", l.dec.stats);
    // The server, on path 0 (to the client's zero-length CID): PATH_ACK for path 1 (0..=5) and
    // PATH_ACK_ECN for path 0; then the old code point and a plain ACK for the counters.
    let mut acks = frame_bytes(&[0x3e, 1, 5, 0, 0, 5], &[]);
    acks.extend(frame_bytes(&[0x3f, 0, 0, 0, 0, 0, 0, 0, 0], &[]));
    let s = one(
        &mut l,
        &seal_short(&sk, &sk, &[], 1, 1, false, 0, &acks),
        false,
    );
    assert!(s.decrypted, "{:?}", s.undecrypted_reason);
    let named: Vec<_> = s
        .frames
        .iter()
        .map(|f| (f.frame_type, f.path_id, f.ack_ranges.clone()))
        .collect();
    assert_eq!(
        named,
        [
            ("path_ack", Some(1), Some(vec![[0, 5]])),
            ("path_ack", Some(0), Some(vec![[0, 0]]))
        ]
    );
    let old_and_plain = [
        frame_bytes(&[0x1522_8c00, 1, 5, 0, 0, 5], &[]),
        frame_bytes(&[0x02, 0, 0, 0, 0], &[]),
    ]
    .concat();
    assert!(
        one(
            &mut l,
            &seal_short(&sk, &sk, &[], 2, 1, false, 0, &old_and_plain),
            false
        )
        .decrypted
    );
    let counted: Vec<_> = l
        .dec
        .stats
        .ack_frames
        .iter()
        .map(|(k, v)| (*k, *v))
        .collect();
    // (The RFC 9001 server Initial holds the other plain ACK.)
    assert_eq!(counted, [("ack", 2), ("path_ack", 2), ("path_ack_old", 1)]);
}

/// A datagram that only looks like GSO segments (its DCID again inside, not at a segment
/// boundary of every segment) stays one packet, failed and counted.
#[test]
fn gso_split_needs_every_segment_to_start_with_the_dcid() {
    let mut l = lab(Some(keylog(RANDOM)));
    let ck = keys(&CLIENT_SECRET, 0);
    let dcid = unhex(SERVER_CID);
    let a = seal_short(&ck, &ck, &dcid, 0, 1, false, 0, &[1, 0, 0, 0, 0, 0]);
    // The segment repeated with garbage after it: 30 + 30 + 40 bytes, the last one longer.
    let mut d = [a.clone(), a.clone()].concat();
    d.extend_from_slice(&[0x40; 40]);
    let v = l.dec.decode(&d, &l.to_server);
    assert_eq!(v.len(), 1);
    assert!(!v[0].decrypted);
    assert_eq!(l.dec.stats.gso_segments, 0);
    assert_eq!(l.dec.stats.not_decrypted.values().sum::<u64>(), 1);
}

#[test]
fn multipath_draft05_nonce_uses_cid_sequence_number() {
    let mut l = lab(Some(keylog(RANDOM)));
    let ck = keys(&CLIENT_SECRET, 0);
    let sk = keys(&SERVER_SECRET, 0);
    let cid = [0x22u8; 8];
    // NEW_CONNECTION_ID(seq 1, retire 0) from the server.
    let mut ncid = frame_bytes(&[0x18, 1, 0], &[8]);
    ncid.extend_from_slice(&cid);
    ncid.extend_from_slice(&[0xdd; 16]);
    assert!(
        one(
            &mut l,
            &seal_short(&sk, &sk, &[], 0, 1, false, 0, &ncid),
            false
        )
        .decrypted
    );
    // ACK_MP (0xbaba00) for DCID sequence 1, on the second path.
    let ack_mp = frame_bytes(&[0xbaba00, 1, 0, 0, 0, 0], &[]);
    for (pn, payload) in [(0u64, &ack_mp[..]), (1, &[1, 0, 0, 0][..])] {
        let p = seal_short(&ck, &ck, &cid, pn, 1, false, 1, payload);
        let s = one(&mut l, &p, true);
        assert!(s.decrypted, "pn {pn}: {:?}", s.undecrypted_reason);
        assert_eq!((s.pn, s.path_id), (Some(pn), Some(1)));
    }
    assert_eq!(
        l.dec.connection_info(0).unwrap().multipath,
        MultipathMode::CidSequence
    );
}

#[test]
fn connection_table_is_bounded_and_evictions_counted() {
    let cfg = DecoderConfig {
        max_connections: 2,
        ..DecoderConfig::default()
    };
    let mut dec = QuicDecoder::new(cfg, None);
    let base = data("rfc9001-client-initial.hex");
    for i in 0..5u8 {
        let mut p = base.clone();
        p[6] ^= i; // a different original DCID per connection
        let s = dec.decode(&p, &DatagramInfo::default());
        assert_eq!(s[0].decrypted, i == 0);
    }
    assert_eq!(dec.connection_count(), 2);
    assert_eq!(dec.stats.connections, 5);
    assert_eq!(dec.stats.evictions, 3);
    assert_eq!(
        dec.stats.not_decrypted.get("authentication_failed"),
        Some(&4)
    );
}

#[test]
fn coalesced_initial_and_one_rtt_with_trailing_padding() {
    let mut l = lab(Some(keylog(RANDOM)));
    let ck = keys(&CLIENT_SECRET, 0);
    let mut dgram = data("rfc9001-client-initial.hex");
    dgram.extend(seal_short(
        &ck,
        &ck,
        &unhex(SERVER_CID),
        0,
        1,
        false,
        0,
        &ping_padding(),
    ));
    let out = l.dec.decode(&dgram, &l.to_server);
    assert_eq!(out.len(), 2);
    assert!(out[1].decrypted);
    let mut dgram = data("rfc9001-server-initial.hex");
    dgram.extend([0u8; 40]);
    let out = l.dec.decode(&dgram, &l.to_client);
    assert_eq!(out.len(), 1);
    assert_eq!(l.dec.stats.padding_bytes, 40);
}

/// A capture that begins after the handshake: short headers of no known connection are tried
/// against the key log (DCID length, key generation, path, packet-number high bits); the first
/// that authenticates binds the connection, the rest decode as usual, in both directions.
#[test]
fn mid_connection_packets_are_found_by_trial() {
    let ca: SocketAddr = "10.0.0.1:50000".parse().unwrap();
    let sa: SocketAddr = "10.0.0.2:443".parse().unwrap();
    let (to_server, to_client) = directions(ca, sa);
    let mut dec = QuicDecoder::new(DecoderConfig::default(), Some(keylog(RANDOM)));
    let dcid = unhex("c0ffee0011223344556677");
    let (chp, shp) = (keys(&CLIENT_SECRET, 0), keys(&SERVER_SECRET, 0));
    // Generation 2 (two key updates before the capture), packet 70 000 sent with 2 bytes.
    let stream = [0x0f, 0x00, 0x07, 0x03, b'a', b'b', b'c'];
    let p = seal_short(
        &keys(&CLIENT_SECRET, 2),
        &chp,
        &dcid,
        70_000,
        2,
        false,
        0,
        &stream,
    );
    let s = dec.decode(&p, &to_server).remove(0);
    assert!(s.decrypted, "{:?}", s.undecrypted_reason);
    assert_eq!((s.pn, s.from_client), (Some(70_000), Some(true)));
    assert_eq!(s.dcid, hex(&dcid));
    assert_eq!(s.frames[0].stream_id, Some(0));
    // The next client packets decode through the bound DCID, with 1-byte packet numbers.
    for pn in [70_001u64, 70_003, 70_002] {
        let p = seal_short(
            &keys(&CLIENT_SECRET, 2),
            &chp,
            &dcid,
            pn,
            1,
            false,
            0,
            &ping_padding(),
        );
        let s = dec.decode(&p, &to_server).remove(0);
        assert_eq!((s.decrypted, s.pn), (true, Some(pn)));
    }
    // The server's packets (empty DCID, generation 2 too) are found on their own 4-tuple and
    // bound to the same connection.
    let p = seal_short(
        &keys(&SERVER_SECRET, 2),
        &shp,
        &[],
        900,
        2,
        false,
        0,
        &ping_padding(),
    );
    let s = dec.decode(&p, &to_client).remove(0);
    assert!(s.decrypted, "{:?}", s.undecrypted_reason);
    assert_eq!(
        (s.pn, s.from_client, s.connection),
        (Some(900), Some(false), Some(0))
    );
    let p = seal_short(
        &keys(&SERVER_SECRET, 3),
        &shp,
        &[],
        901,
        1,
        true,
        0,
        &ping_padding(),
    );
    let s = dec.decode(&p, &to_client).remove(0);
    assert_eq!((s.decrypted, s.pn), (true, Some(901)));
    assert_eq!(dec.stats.hunt.recovered, 2);
    assert_eq!(dec.stats.connections, 1);
    assert_eq!(dec.stats.not_decrypted.len(), 0);
}

/// A second path's packets (draft-05: the nonce names the DCID sequence number) alone.
#[test]
fn mid_connection_multipath_path_is_found_by_trial() {
    let ca: SocketAddr = "10.0.1.1:50000".parse().unwrap();
    let sa: SocketAddr = "10.0.0.2:443".parse().unwrap();
    let (to_server, _) = directions(ca, sa);
    let mut dec = QuicDecoder::new(DecoderConfig::default(), Some(keylog(RANDOM)));
    let dcid = unhex("0102030405060708");
    let chp = keys(&CLIENT_SECRET, 0);
    for pn in [3u64, 4] {
        let p = seal_short(&chp, &chp, &dcid, pn, 1, false, 1, &ping_padding());
        let s = dec.decode(&p, &to_server).remove(0);
        assert_eq!((s.decrypted, s.pn, s.path_id), (true, Some(pn), Some(1)));
    }
}

/// Random short headers: each 4-tuple is tried a bounded number of times, then given up; none
/// counts as QUIC or as a decryption failure.
#[test]
fn unknown_short_headers_are_given_up_after_a_bounded_search() {
    let mut dec = QuicDecoder::new(DecoderConfig::default(), Some(keylog(RANDOM)));
    let info = DatagramInfo {
        src: Some("10.9.0.1:7000".parse().unwrap()),
        dst: Some("10.9.0.2:7001".parse().unwrap()),
        from_client: None,
    };
    let mut x = 0x1234_5678u32;
    for _ in 0..20 {
        let p: Vec<u8> = (0..120)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x >> 3) as u8 & 0x7f | 0x40
            })
            .collect();
        assert!(dec.decode(&p, &info).iter().all(|s| !s.decrypted));
    }
    let h = dec.stats.hunt;
    let cfg = DecoderConfig::default().hunt;
    assert_eq!(
        (h.tuples, h.packets_tried, h.given_up, h.recovered),
        (1, u64::from(cfg.packets_per_tuple), 1, 0)
    );
    assert!(h.attempts <= u64::from(cfg.packets_per_tuple * cfg.opens_per_packet));
    assert_eq!(dec.stats.packets, 0);
    assert!(dec.stats.not_decrypted.is_empty());
}

/// Past `max_tuples` unknown 4-tuples, packets are not tried at all (counted `over_limit`).
#[test]
fn unknown_tuples_past_the_limit_are_not_tried() {
    let cfg = DecoderConfig {
        hunt: tboxscope_decode::quic::hunt::HuntConfig {
            max_tuples: 2,
            opens_per_packet: 64,
            ..Default::default()
        },
        ..DecoderConfig::default()
    };
    let mut dec = QuicDecoder::new(cfg, Some(keylog(RANDOM)));
    for port in 0..5u16 {
        let info = DatagramInfo {
            src: Some(SocketAddr::from(([10, 9, 0, 1], 7000 + port))),
            dst: Some("10.9.0.2:7001".parse().unwrap()),
            from_client: None,
        };
        dec.decode(&[0x41; 80], &info);
    }
    let h = dec.stats.hunt;
    assert_eq!((h.tuples, h.packets_tried, h.over_limit), (2, 2, 3));
    assert!(h.attempts <= 2 * 64);
}
