//! kcp-go framing built by construction (FEC data + parity, out-of-band, `crypt none` CRC) and
//! decoded back; encrypted kcp-go is recognised on a forced port and never misparsed.
#![expect(clippy::unwrap_used)]

#[expect(dead_code, reason = "each test uses some of the shared helpers")]
mod kcp_common;

use kcp_common::encode;

use tboxscope_decode::kcp::kcpgo::{
    self, CryptHeader, FecPacket, KcpGoError, KcpGoField, CRYPT_HEADER_LEN,
};
use tboxscope_decode::kcp::{Detection, Detector, DetectorConfig, FecKind, RejectReason};

/// Bitwise CRC-32 (IEEE 802.3, reflected, poly 0xEDB88320): test-side reference.
fn crc32_reference(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for b in bytes {
        crc ^= u32::from(*b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// FEC data shard: seqid, type 0xf1, size (= 2 + segments), segments.
fn fec_data(seqid: u32, segments: &[u8]) -> Vec<u8> {
    let mut v = seqid.to_le_bytes().to_vec();
    v.extend_from_slice(&0xf1u16.to_le_bytes());
    v.extend_from_slice(&((segments.len() + 2) as u16).to_le_bytes());
    v.extend_from_slice(segments);
    v
}

/// FEC parity shard over `shards` (XOR of size+segments, zero-padded: what a 1-parity code
/// would carry; the decoder treats parity bytes as opaque anyway).
fn fec_parity(seqid: u32, shards: &[Vec<u8>]) -> Vec<u8> {
    let max = shards.iter().map(|s| s.len() - 6).max().unwrap();
    let mut parity = vec![0u8; max];
    for s in shards {
        for (p, b) in parity.iter_mut().zip(&s[6..]) {
            *p ^= b;
        }
    }
    let mut v = seqid.to_le_bytes().to_vec();
    v.extend_from_slice(&0xf2u16.to_le_bytes());
    v.extend_from_slice(&parity);
    v
}

/// `crypt none`: random nonce, CRC-32 of everything after the CRC field.
fn crypt_none(nonce_seed: u8, body: &[u8]) -> Vec<u8> {
    let mut v: Vec<u8> = (0..16u8)
        .map(|i| i.wrapping_mul(37).wrapping_add(nonce_seed))
        .collect();
    v.extend_from_slice(&crc32_reference(body).to_le_bytes());
    v.extend_from_slice(body);
    v
}

#[test]
fn crc32_is_ieee() {
    assert_eq!(crc32_reference(b"123456789"), 0xCBF4_3926);
    let framed = crypt_none(1, b"123456789");
    let h = CryptHeader::from_slice(&framed).unwrap();
    assert_eq!(h.crc(), 0xCBF4_3926);
    assert_eq!(h.body(), b"123456789");
    assert_eq!(&framed[16..20], &[0x26, 0x39, 0xf4, 0xcb]);
}

#[test]
fn fec_data_and_parity_without_crypt() {
    let seg1 = encode(0x1234, 81, 0, 128, 100, 0, 0, b"first message");
    let mut seg2 = encode(0x1234, 82, 0, 128, 90, 3, 1, b"");
    seg2.extend(encode(0x1234, 81, 0, 128, 101, 1, 1, b"second"));
    let d0 = fec_data(30, &seg1);
    let d1 = fec_data(31, &seg2);
    let p = fec_parity(32, &[d0.clone(), d1.clone()]);

    let mut det = Detector::default();
    // A parity shard before any data shard on this port pair is not enough evidence.
    assert_eq!(
        det.classify(5000, 6000, &p),
        Detection::NotKcp(RejectReason::FecParityUnconfirmed)
    );

    let Detection::KcpGo { packet, datagram } = det.classify(5000, 6000, &d0) else {
        panic!()
    };
    let fec = packet.fec.unwrap();
    assert_eq!((fec.seqid(), fec.kind()), (30, FecKind::Data));
    assert!(packet.crypt.is_none());
    let s: Vec<_> = datagram.segments().map(|s| s.summary()).collect();
    assert_eq!(s.len(), 1);
    assert_eq!((s[0].conv, s[0].sn, s[0].len), (0x1234, 0, 13));

    let Detection::KcpGo { datagram, .. } = det.classify(5000, 6000, &d1) else {
        panic!()
    };
    assert_eq!(datagram.segment_count(), 2);

    // Now the port pair (either direction) is known to carry FEC: parity is accepted.
    let Detection::KcpGo { packet, datagram } = det.classify(6000, 5000, &p) else {
        panic!()
    };
    assert_eq!(packet.fec.unwrap().kind(), FecKind::Parity);
    assert_eq!(packet.fec.unwrap().seqid(), 32);
    assert_eq!(datagram.segment_count(), 0);
    assert_eq!(det.stats().kcpgo, 2);
    assert_eq!(det.stats().kcpgo_parity, 1);
    assert_eq!(det.stats().segments, 3);

    // kcpgo::decode gives the same view.
    let pkt = kcpgo::decode(&d1, false).unwrap();
    assert_eq!(pkt.iter_segments().count(), 2);
    assert_eq!(pkt.summary().fec_seqid, Some(31));
}

#[test]
fn crypt_none_with_and_without_fec() {
    let seg = encode(99, 81, 0, 256, 7, 5, 4, b"payload");
    let plain = crypt_none(3, &seg);
    let with_fec = crypt_none(4, &fec_data(0, &seg));
    let parity = crypt_none(5, &fec_parity(1, &[fec_data(0, &seg)]));
    let mut det = Detector::default();
    for (bytes, fec) in [
        (&plain, None),
        (&with_fec, Some(FecKind::Data)),
        (&parity, Some(FecKind::Parity)),
    ] {
        let Detection::KcpGo { packet, datagram } = det.classify(1, 2, bytes) else {
            panic!("{bytes:?}")
        };
        assert!(packet.framing().crypt_none);
        assert_eq!(packet.fec.map(|f| f.kind()), fec);
        assert_eq!(
            datagram.segment_count(),
            usize::from(fec != Some(FecKind::Parity))
        );
        assert_eq!(packet.crypt.unwrap().crc(), crc32_reference(&bytes[20..]));
    }
    // One flipped bit anywhere after the CRC field breaks the CRC: never decoded as kcp-go.
    for i in CRYPT_HEADER_LEN..plain.len() {
        let mut bad = plain.clone();
        bad[i] ^= 0x10;
        assert!(!det.classify(1, 2, &bad).is_kcp(), "byte {i}");
        assert!(matches!(
            kcpgo::decode(&bad, true),
            Err(KcpGoError::CrcMismatch { .. })
        ));
    }
}

#[test]
fn out_of_band_packet() {
    let mut oob = 0xffff_ffffu32.to_le_bytes().to_vec();
    oob.extend_from_slice(&0xf3u16.to_le_bytes());
    oob.extend_from_slice(&7u16.to_le_bytes());
    oob.extend_from_slice(b"hello");
    let Detection::KcpGo { packet, .. } = Detector::default().classify(1, 2, &oob) else {
        panic!()
    };
    assert_eq!(packet.fec.unwrap().kind(), FecKind::Oob);
    assert_eq!(packet.fec.unwrap().payload(), b"hello");
    oob[0] = 0;
    assert_eq!(
        FecPacket::from_slice(&oob),
        Err(KcpGoError::OobSeqid(0xffff_ff00))
    );
}

#[test]
fn encrypted_kcpgo_is_recognised_on_a_forced_port_only() {
    // Stand-in for a block cipher's output: a keyed pseudo-random permutation of the bytes.
    let seg = encode(99, 81, 0, 256, 7, 5, 4, &[0x55; 300]);
    let mut enc = crypt_none(9, &fec_data(12, &seg));
    let mut x = 0x9e37_79b9u32;
    for b in enc.iter_mut() {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        *b ^= x as u8;
    }
    let mut det = Detector::new(DetectorConfig {
        forced_ports: vec![29900],
        ..DetectorConfig::default()
    });
    assert!(matches!(
        det.classify(40000, 29900, &enc),
        Detection::EncryptedOrUnknown { .. }
    ));
    assert!(matches!(
        det.classify(40000, 29901, &enc),
        Detection::NotKcp(_)
    ));
    assert_eq!(det.stats().encrypted_or_unknown, 1);
    assert!(matches!(
        kcpgo::decode(&enc, true),
        Err(KcpGoError::CrcMismatch { .. })
    ));
}

#[test]
fn every_truncation_gives_the_exact_kcpgo_error() {
    let seg = encode(1, 82, 0, 32, 1, 2, 3, b"");
    let data = fec_data(5, &seg);
    for n in 0..data.len() {
        let got = FecPacket::from_slice(&data[..n]);
        let want = match n {
            0..=3 => KcpGoError::Truncated {
                field: KcpGoField::FecSeqid,
                required: 4,
                actual: n,
            },
            4..=5 => KcpGoError::Truncated {
                field: KcpGoField::FecType,
                required: 6,
                actual: n,
            },
            6..=7 => KcpGoError::Truncated {
                field: KcpGoField::FecSize,
                required: 8,
                actual: n,
            },
            _ => KcpGoError::FecSizeMismatch {
                declared: 26,
                actual: n - 6,
            },
        };
        assert_eq!(got, Err(want), "cut to {n}");
    }
    let framed = crypt_none(0, &data);
    for n in 0..CRYPT_HEADER_LEN {
        let want = if n < 16 {
            KcpGoError::Truncated {
                field: KcpGoField::Nonce,
                required: 16,
                actual: n,
            }
        } else {
            KcpGoError::Truncated {
                field: KcpGoField::Crc,
                required: 20,
                actual: n,
            }
        };
        assert_eq!(
            CryptHeader::from_slice(&framed[..n]),
            Err(want),
            "cut to {n}"
        );
    }
    for n in CRYPT_HEADER_LEN..framed.len() {
        assert!(matches!(
            kcpgo::decode(&framed[..n], true),
            Err(KcpGoError::CrcMismatch { .. })
        ));
    }
    assert!(kcpgo::decode(&framed, true).is_ok());
    // Unknown FEC type.
    let mut bad = data.clone();
    bad[4] = 0xf4;
    assert_eq!(
        FecPacket::from_slice(&bad),
        Err(KcpGoError::UnknownFecType(0xf4))
    );
    // Data shard with a malformed segment inside.
    let mut inner = data.clone();
    inner[8 + 4] = 0x10;
    assert!(matches!(
        kcpgo::decode(&inner, false),
        Err(KcpGoError::Kcp(_))
    ));
}
