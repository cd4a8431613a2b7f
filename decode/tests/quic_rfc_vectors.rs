//! RFC 9001 Appendix A (QUIC v1) and RFC 9369 Appendix A (QUIC v2) test vectors.
#![expect(clippy::unwrap_used)]

use std::net::SocketAddr;
use tboxscope_decode::quic::header::{parse_header, PacketType, ParseOptions, Version};
use tboxscope_decode::quic::keys::{CipherSuite, Secret};
use tboxscope_decode::quic::protection::{decode_packet_number, decrypt_into, unprotect_header};
use tboxscope_decode::quic::{DatagramInfo, QuicDecoder};
use tboxscope_test_support::quic::{directions, unhex};

const RANDOM: &str = "ebf8fa56f12939b9584a3896472ec40bb863cfd3e86804fe3a47f06a2b69484c";

fn data(name: &str) -> Vec<u8> {
    let p = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    unhex(&std::fs::read_to_string(p).unwrap())
}

fn addrs() -> (SocketAddr, SocketAddr) {
    (
        "192.0.2.1:50000".parse().unwrap(),
        "198.51.100.7:443".parse().unwrap(),
    )
}

fn check_keys(s: &Secret, secret: &str, key: &str, iv: &str, hp: &str) {
    assert_eq!(hex(s.as_bytes()), secret);
    assert_eq!(hex(&s.aead_key().unwrap()), key);
    assert_eq!(hex(&s.iv().unwrap()), iv);
    assert_eq!(hex(&s.hp_key().unwrap()), hp);
}

fn hex(b: &[u8]) -> String {
    tboxscope_decode::quic::summary::hex(b)
}

#[test]
fn rfc9001_a1_initial_keys() {
    let (c, s) = Secret::initial(Version::V1, &unhex("8394c8f03e515708")).unwrap();
    check_keys(
        &c,
        "c00cf151ca5be075ed0ebfb5c80323c42d6b7db67881289af4008f1f6c357aea",
        "1f369613dd76d5467730efcbe3b1a22d",
        "fa044b2f42a3fd3b46fb255c",
        "9f50449e04a0e810283a1e9933adedd2",
    );
    check_keys(
        &s,
        "3c199828fd139efd216c155ad844cc81fb82fa8d7446fa7d78be803acdda951b",
        "cf3a5331653c364c88f0f379b6067e37",
        "0ac1493ca1905853b0bba03e",
        "c206b8d9b9f0f37644430b490eeaa314",
    );
}

#[test]
fn rfc9369_a1_initial_keys() {
    let (c, s) = Secret::initial(Version::V2, &unhex("8394c8f03e515708")).unwrap();
    check_keys(
        &c,
        "14ec9d6eb9fd7af83bf5a668bc17a7e283766aade7ecd0891f70f9ff7f4bf47b",
        "8b1a0bc121284290a29e0971b5cd045d",
        "91f73e2351d8fa91660e909f",
        "45b95e15235d6f45a6b19cbcb0294ba9",
    );
    check_keys(
        &s,
        "0263db1782731bf4588e7e4d93b7463907cb8cd8200b5da55a8bd488eafc37c1",
        "82db637861d55e1d011f19ea71d5d2a7",
        "dd13c276499c0249d3310652",
        "edf6d05c83121201b436e16877593c3a",
    );
}

/// Client Initial then server Initial through the decoder, with no keys at all.
fn handshake_initials(client: &str, server: &str, version: &str) {
    let (ca, sa) = addrs();
    let mut dec = QuicDecoder::new(Default::default(), None);
    let (to_server, to_client) = directions(ca, sa);

    let c = dec.decode(&data(client), &to_server);
    assert_eq!(c.len(), 1);
    let c = &c[0];
    assert_eq!(c.packet_type, PacketType::Initial);
    assert_eq!(c.version.as_deref(), Some(version));
    assert_eq!(c.dcid, "8394c8f03e515708");
    assert_eq!(
        (c.pn, c.decrypted, c.from_client),
        (Some(2), true, Some(true))
    );
    let types: Vec<_> = c
        .frames
        .iter()
        .map(|f| (f.frame_type, f.offset, f.length))
        .collect();
    assert_eq!(
        types,
        vec![("crypto", Some(0), Some(241)), ("padding", None, Some(917))]
    );

    let s = dec.decode(&data(server), &to_client);
    assert_eq!(s.len(), 1);
    let s = &s[0];
    assert_eq!(s.packet_type, PacketType::Initial);
    assert_eq!(
        (s.dcid.as_str(), s.scid.as_deref()),
        ("", Some("f067a5502a4262b5"))
    );
    assert_eq!(
        (s.pn, s.decrypted, s.from_client),
        (Some(1), true, Some(false))
    );
    assert_eq!(s.frames[0].frame_type, "ack");
    assert_eq!(s.frames[0].ack_ranges, Some(vec![[0, 0]]));
    assert_eq!(
        (s.frames[1].frame_type, s.frames[1].length),
        ("crypto", Some(90))
    );

    let info = dec.connection_info(0).unwrap();
    assert_eq!(info.sni.as_deref(), Some("example.com"));
    assert_eq!(info.alpn, vec!["alpn".to_string()]);
    assert_eq!(info.client_random.as_deref(), Some(RANDOM));
    assert_eq!(info.cipher_suite, Some(CipherSuite::Aes128GcmSha256));
    assert_eq!(dec.stats.decrypted, 2);
}

#[test]
fn rfc9001_a2_a3_initials_decrypt_without_keys() {
    handshake_initials(
        "rfc9001-client-initial.hex",
        "rfc9001-server-initial.hex",
        "0x00000001",
    );
}

#[test]
fn rfc9369_a2_a3_initials_decrypt_without_keys() {
    handshake_initials(
        "rfc9369-client-initial.hex",
        "rfc9369-server-initial.hex",
        "0x6b3343cf",
    );
}

fn chacha_short(version: Version, packet: &str, key: &str, iv: &str, hp: &str) {
    let secret = unhex("9ac312a7f877468ebe69422748ad00a15443f18203a07d6060f688f30f21632b");
    let s = Secret::new(CipherSuite::ChaCha20Poly1305Sha256, version, &secret).unwrap();
    assert_eq!(hex(&s.aead_key().unwrap()), key);
    assert_eq!(hex(&s.iv().unwrap()), iv);
    assert_eq!(hex(&s.hp_key().unwrap()), hp);
    let keys = s.keys().unwrap();
    let pkt = unhex(packet);
    let h = parse_header(&pkt, 0, ParseOptions::default()).unwrap();
    assert_eq!((h.packet_type, h.pn_offset), (PacketType::OneRtt, 1));
    let un = unprotect_header(&pkt, 1, &keys).unwrap();
    assert_eq!(
        (un.first_byte, un.pn_len, un.truncated_pn),
        (0x42, 3, 0x00bff4)
    );
    let pn = decode_packet_number(Some(654_360_563), un.truncated_pn, un.pn_len);
    assert_eq!(pn, 654_360_564);
    let mut scratch = Vec::new();
    let nonce = tboxscope_decode::quic::keys::nonce(&keys.iv(), pn);
    let (start, n) = decrypt_into(&pkt, 1, &un, &keys, nonce, &mut scratch).unwrap();
    assert_eq!(hex(&scratch[..start]), "4200bff4");
    assert_eq!(&scratch[start..start + n], &[0x01]);
}

#[test]
fn rfc9001_a5_chacha20_short_header() {
    chacha_short(
        Version::V1,
        "4cfe4189655e5cd55c41f69080575d7999c25a5bfb",
        "c6d98ff3441c3fe1b2182094f69caa2ed4b716b65488960a7a984979fb23e1c8",
        "e0459b3474bdd0e44a41c144",
        "25a282b9e82f06f21f488917a4fc8f1b73573685608597d0efcb076b0ab7a7a4",
    );
    let secret = unhex("9ac312a7f877468ebe69422748ad00a15443f18203a07d6060f688f30f21632b");
    let s = Secret::new(CipherSuite::ChaCha20Poly1305Sha256, Version::V1, &secret).unwrap();
    assert_eq!(
        hex(s.next_generation().unwrap().as_bytes()),
        "1223504755036d556342ee9361d253421a826c9ecdf3c7148684b36b714881f9"
    );
}

#[test]
fn rfc9369_a5_chacha20_short_header() {
    chacha_short(
        Version::V2,
        "5558b1c60ae7b6b932bc27d786f4bc2bb20f2162ba",
        "3bfcddd72bcf02541d7fa0dd1f5f9eeea817e09a6963a0e6c7df0f9a1bab90f2",
        "a6b5bc6ab7dafce30ffff5dd",
        "d659760d2ba434a226fd37b35c69e2da8211d10c4f12538787d65645d5d1b8e2",
    );
}

#[test]
fn retry_and_version_negotiation_recognised() {
    let r = unhex("ff000000010008f067a5502a4262b5746f6b656e04a265ba2eff4d829058fb3f0f2496ba");
    let h = parse_header(&r, 0, ParseOptions::default()).unwrap();
    assert_eq!(h.packet_type, PacketType::Retry);
    assert_eq!(
        (h.dcid, h.scid, h.token),
        (&[][..], &unhex("f067a5502a4262b5")[..], &b"token"[..])
    );
    assert_eq!(
        hex(h.retry_integrity_tag),
        "04a265ba2eff4d829058fb3f0f2496ba"
    );
    assert_eq!(h.packet_len(), r.len());

    let r2 = unhex("cf6b3343cf0008f067a5502a4262b5746f6b656ec8646ce8bfe33952d955543665dcc7b6");
    let h = parse_header(&r2, 0, ParseOptions::default()).unwrap();
    assert_eq!((h.packet_type, h.token), (PacketType::Retry, &b"token"[..]));

    let vn = unhex("ea00000000089aac5a49ba87a84908f92f4336fa951ba14547471600000001");
    let h = parse_header(&vn, 0, ParseOptions::default()).unwrap();
    assert_eq!(h.packet_type, PacketType::VersionNegotiation);
    assert_eq!(hex(h.dcid), "9aac5a49ba87a849");
    assert_eq!(hex(h.supported_versions), "4547471600000001");

    let mut dec = QuicDecoder::new(Default::default(), None);
    let s = dec.decode(&r, &DatagramInfo::default());
    assert_eq!(
        s[0].undecrypted_reason.as_deref(),
        Some("no encrypted payload")
    );
}

#[test]
fn v2_and_draft29_long_header_type_bits() {
    // Same first byte 0xd0: v1 and draft-29 read 0-RTT, v2 reads Initial (RFC 9369 §3.2).
    for (version, want) in [
        ([0, 0, 0, 1], PacketType::ZeroRtt),
        ([0xff, 0, 0, 0x1d], PacketType::ZeroRtt),
        ([0x6b, 0x33, 0x43, 0xcf], PacketType::Initial),
    ] {
        let mut p = vec![0xd0];
        p.extend_from_slice(&version);
        p.extend_from_slice(&[1, 0xaa, 0]);
        if want == PacketType::Initial {
            p.push(0); // token length
        }
        p.extend_from_slice(&[2, 0, 0]);
        let h = parse_header(&p, 0, ParseOptions::default()).unwrap();
        assert_eq!(h.packet_type, want, "{version:?}");
        assert_eq!(h.length, Some(2));
    }
}

#[test]
fn draft29_initial_keys_use_draft29_salt() {
    let (c29, _) = Secret::initial(Version::Draft29, &unhex("8394c8f03e515708")).unwrap();
    let (c1, _) = Secret::initial(Version::V1, &unhex("8394c8f03e515708")).unwrap();
    assert_ne!(c29.as_bytes(), c1.as_bytes());
    // draft-ietf-quic-tls-29 Appendix A.1 client initial secret and key.
    assert_eq!(
        hex(c29.as_bytes()),
        "0088119288f1d866733ceeed15ff9d50902cf82952eee27e9d4d4918ea371d87"
    );
    assert_eq!(
        hex(&c29.aead_key().unwrap()),
        "175257a31eb09dea9366d8bb79ad80ba"
    );
}

#[test]
fn retry_integrity_tags_are_verified_against_the_clients_first_dcid() {
    let (ca, sa) = addrs();
    let (up, down) = directions(ca, sa);
    // RFC 9001 / RFC 9369 Appendix A: the client's Initial (DCID 8394c8f03e515708), then the
    // server's Retry for it.
    for (initial, retry) in [
        (
            "rfc9001-client-initial.hex",
            "ff000000010008f067a5502a4262b5746f6b656e04a265ba2eff4d829058fb3f0f2496ba",
        ),
        (
            "rfc9369-client-initial.hex",
            "cf6b3343cf0008f067a5502a4262b5746f6b656ec8646ce8bfe33952d955543665dcc7b6",
        ),
    ] {
        let retry = unhex(retry);
        // Untouched; a token byte changed; a tag byte changed.
        for tamper in [None, Some(16), Some(retry.len() - 1)] {
            let mut dec = QuicDecoder::new(Default::default(), None);
            dec.decode(&data(initial), &up);
            let mut r = retry.clone();
            if let Some(i) = tamper {
                r[i] ^= 0x40;
            }
            let s = dec.decode(&r, &down);
            let want = if tamper.is_some() {
                "retry integrity tag does not verify (the client discards this Retry)"
            } else {
                "no encrypted payload"
            };
            assert_eq!(s[0].undecrypted_reason.as_deref(), Some(want), "{initial}");
            assert_eq!(s[0].connection, Some(0), "{initial}");
            let refused = dec.stats.not_decrypted.get("retry_integrity_failed");
            assert_eq!(refused, tamper.map(|_| &1), "{initial}");
        }
    }
}
