//! Property tests: every header at every truncation length yields the exact error; random and
//! mutated input never panics.
#![expect(clippy::unwrap_used)]

use proptest::prelude::*;
use tboxscope_decode::quic::frame::{Frame, FrameError, Frames};
use tboxscope_decode::quic::header::{parse_header, HeaderError, ParseOptions};
use tboxscope_decode::quic::varint::Truncated;
use tboxscope_decode::quic::{DatagramInfo, QuicDecoder};
use tboxscope_test_support::quic::unhex;

/// A header described field by field: (name, length, is a varint).
struct Layout {
    bytes: Vec<u8>,
    fields: Vec<(&'static str, usize, bool)>,
    /// Declared Length and where the packet number starts (long headers with a Length field).
    length: Option<(u64, usize)>,
    short_dcid_len: usize,
}

fn long(
    first: u8,
    version: [u8; 4],
    dcid: &[u8],
    scid: &[u8],
    token: Option<&[u8]>,
    length: u64,
) -> Layout {
    let mut b = vec![first];
    b.extend_from_slice(&version);
    let mut fields = vec![("first byte", 1, false), ("version", 4, false)];
    b.push(dcid.len() as u8);
    b.extend_from_slice(dcid);
    fields.push(("dcid length", 1, false));
    fields.push(("dcid", dcid.len(), false));
    b.push(scid.len() as u8);
    b.extend_from_slice(scid);
    fields.push(("scid length", 1, false));
    fields.push(("scid", scid.len(), false));
    if let Some(t) = token {
        let mut v = Vec::new();
        tboxscope_decode::quic::varint::encode_varint(t.len() as u64, &mut v).unwrap();
        fields.push(("token length", v.len(), true));
        b.extend(v);
        b.extend_from_slice(t);
        fields.push(("token", t.len(), false));
    }
    let mut v = Vec::new();
    tboxscope_decode::quic::varint::encode_varint(length, &mut v).unwrap();
    fields.push(("length", v.len(), true));
    b.extend(v);
    let pn_offset = b.len();
    b.extend(std::iter::repeat_n(0xab, length as usize));
    Layout {
        bytes: b,
        fields,
        length: Some((length, pn_offset)),
        short_dcid_len: 0,
    }
}

fn expected(l: &Layout, n: usize) -> Result<(), HeaderError> {
    let mut start = 0;
    for &(field, len, varint) in &l.fields {
        if n < start + len.max(1) && !(len == 0 && n >= start) {
            let needed = if varint && n == start { 1 } else { len };
            return Err(HeaderError::Truncated(Truncated {
                field,
                offset: start,
                needed,
                available: n - start,
            }));
        }
        start += len;
    }
    if let Some((declared, pn_offset)) = l.length {
        if (n - pn_offset) < declared as usize {
            return Err(HeaderError::LengthExceedsDatagram {
                declared,
                available: n - pn_offset,
            });
        }
    }
    Ok(())
}

fn layouts() -> Vec<Layout> {
    let dcid = unhex("8394c8f03e515708");
    let scid = unhex("f067a5502a4262b5");
    let mut v = vec![
        long(0xc3, [0, 0, 0, 1], &dcid, &scid, Some(b"retry-token"), 30),
        long(0xc0, [0, 0, 0, 1], &dcid, &[], Some(&[]), 200),
        long(0xe1, [0, 0, 0, 1], &[], &scid, None, 70),
        long(0xd2, [0, 0, 0, 1], &dcid, &scid, None, 20),
        long(
            0xd0,
            [0x6b, 0x33, 0x43, 0xcf],
            &dcid,
            &scid,
            Some(&[7; 70]),
            17000,
        ),
        long(0xc0, [0xff, 0, 0, 0x1d], &dcid, &scid, Some(&[]), 21),
    ];
    let mut short = vec![0x41];
    short.extend_from_slice(&dcid);
    short.extend_from_slice(&[0x55; 30]);
    v.push(Layout {
        bytes: short,
        fields: vec![("first byte", 1, false), ("dcid", 8, false)],
        length: None,
        short_dcid_len: 8,
    });
    v
}

#[test]
fn every_truncation_of_every_header_gives_the_exact_error() {
    let mut checked = 0;
    for l in layouts() {
        for n in 0..=l.bytes.len() {
            let got = parse_header(&l.bytes[..n], l.short_dcid_len, ParseOptions::default());
            let want = expected(&l, n);
            match (&got, &want) {
                (Ok(h), Ok(())) => {
                    assert!(h.packet_len() <= n);
                    assert_eq!(
                        h.pn_offset,
                        l.length.map_or(1 + l.short_dcid_len, |(_, o)| o)
                    );
                }
                (Err(g), Err(w)) => assert_eq!(g, w, "prefix {n} of {:02x?}", &l.bytes[..8]),
                _ => panic!("prefix {n}: got {got:?}, want {want:?}"),
            }
            // Lax mode keeps a packet whose Length runs past the end.
            if let Err(HeaderError::LengthExceedsDatagram { .. }) = want {
                let h = parse_header(&l.bytes[..n], 0, ParseOptions { lax: true }).unwrap();
                assert!(h.truncated && h.packet_len() == n);
            }
            checked += 1;
        }
    }
    assert!(checked > 17000);
}

#[test]
fn retry_and_version_negotiation_truncations() {
    let retry = unhex("ff000000010008f067a5502a4262b5746f6b656e04a265ba2eff4d829058fb3f0f2496ba");
    // first byte, version, dcid len, scid len + 8 = 15 header bytes, then token + 16-byte tag.
    for n in 0..=retry.len() {
        let got = parse_header(&retry[..n], 0, ParseOptions::default());
        match n {
            0..=14 => assert!(matches!(got, Err(HeaderError::Truncated(_))), "{n}"),
            15..=30 => assert_eq!(
                got.unwrap_err(),
                HeaderError::Truncated(Truncated {
                    field: "retry integrity tag",
                    offset: 15,
                    needed: 16,
                    available: n - 15
                })
            ),
            _ => assert_eq!(got.unwrap().token.len(), n - 31),
        }
    }
    let vn = unhex("ea00000000089aac5a49ba87a84908f92f4336fa951ba14547471600000001");
    for n in 23..=vn.len() {
        let got = parse_header(&vn[..n], 0, ParseOptions::default());
        if (n - 23) % 4 == 0 && n > 23 {
            assert_eq!(got.unwrap().supported_versions.len(), n - 23);
        } else {
            assert_eq!(
                got.unwrap_err(),
                HeaderError::BadVersionList { len: n - 23 }
            );
        }
    }
}

/// LLMNR queries (id 0xa0 00: a long-header byte, then a zero "version") and zero-filled blobs
/// are no Version Negotiation: the list is empty, ragged or names version 0, even in lax mode.
#[test]
fn version_negotiation_look_alikes_are_rejected() {
    let llmnr = unhex("a000 0000 0001 0000 0000 0000 0477706164 00 0001 0001");
    let mut zeros = vec![0u8; 64];
    zeros[0] = 0x80;
    let empty = unhex("80 00000000 04 01020304 04 05060708");
    for lax in [false, true] {
        for (name, b) in [("llmnr", &llmnr), ("zeros", &zeros), ("empty", &empty)] {
            let got = parse_header(b, 0, ParseOptions { lax });
            assert!(
                matches!(got, Err(HeaderError::BadVersionList { .. })),
                "{name} lax={lax}: {got:?}"
            );
        }
    }
    let mut dec = QuicDecoder::new(Default::default(), None);
    for b in [&llmnr, &zeros, &empty] {
        assert!(dec.decode(b, &DatagramInfo::default()).is_empty());
    }
    assert_eq!(dec.stats.packets, 0);
    assert!(dec.stats.not_decrypted.is_empty());
    // A real one of no connection seen parses but is not counted as QUIC.
    let vn = unhex("ea00000000089aac5a49ba87a84908f92f4336fa951ba14547471600000001");
    assert_eq!(dec.decode(&vn, &DatagramInfo::default()).len(), 1);
    assert_eq!(dec.stats.packets, 0);
    assert_eq!(dec.stats.not_quic.get("unknown_connection"), Some(&1));
    assert!(dec.stats.not_decrypted.is_empty());
    // A version-negotiation exchange: a long header of an unknown version (DCID 8 bytes, SCID
    // 8 bytes) answered by a Version Negotiation echoing the IDs swapped counts as QUIC.
    let client: std::net::SocketAddr = "10.0.0.1:5000".parse().unwrap();
    let server: std::net::SocketAddr = "10.0.0.2:443".parse().unwrap();
    let probe = unhex("c0 1a2a3a4a 08 0102030405060708 08 1112131415161718 00 00 00 00");
    let answer = unhex("80 00000000 08 1112131415161718 08 0102030405060708 00000001 6b3343cf");
    let way = |src, dst| DatagramInfo {
        src: Some(src),
        dst: Some(dst),
        from_client: None,
    };
    let mut dec = QuicDecoder::new(Default::default(), None);
    dec.decode(&probe, &way(client, server));
    let mut counted = false;
    dec.decode_with(&answer, &way(server, client), |p| counted = p.is_quic());
    assert!(counted);
    assert_eq!(dec.stats.packets, 1);
    // The same answer from another address answers nothing.
    let other: std::net::SocketAddr = "10.0.0.3:443".parse().unwrap();
    dec.decode_with(&answer, &way(other, client), |p| counted = p.is_quic());
    assert!(!counted);
}

#[test]
fn every_truncation_of_every_frame_is_a_truncation_error() {
    let frames: Vec<Vec<u8>> = vec![
        unhex("020a0501020001"),       // ACK with one more range
        unhex("03070201000102060708"), // ACK_ECN
        unhex("04040506"),             // RESET_STREAM
        unhex("050405"),               // STOP_SENDING
        unhex("060003414243"),         // CRYPTO
        unhex("0702aabb"),             // NEW_TOKEN
        unhex("0e04401003616263"),     // STREAM OFF|LEN
        unhex("0b0403616263"),         // STREAM LEN|FIN
        unhex("104400"),               // MAX_DATA
        unhex("110405"),               // MAX_STREAM_DATA
        unhex("1205"),                 // MAX_STREAMS
        unhex("180201041122334400112233445566778899aabbccddeeff"), // NEW_CONNECTION_ID
        unhex("1903"),                 // RETIRE_CONNECTION_ID
        unhex("1a0102030405060708"),   // PATH_CHALLENGE
        unhex("1c0a06026f6b"),         // CONNECTION_CLOSE
        unhex("1d0a026f6b"),           // CONNECTION_CLOSE (application)
        unhex("3103616263"),           // DATAGRAM with length
        unhex("3e0105000000"),         // PATH_ACK
        unhex("7e750102"),             // PATH_ABANDON
        unhex("7e78010200041122334400112233445566778899aabbccddeeff"), // PATH_NEW_CONNECTION_ID
        unhex("80baba000105000000"),   // ACK_MP (draft-04)
        unhex("80baba0501020474697265"), // PATH_ABANDON (draft-04) with reason
        unhex("80baba06010202"),       // PATH_STATUS (draft-04)
        unhex("95228c06010202"),       // PATH_STATUS (draft-05, tquic)
        unhex("95228c000105000000"),   // ACK_MP (drafts -05/-06) = PATH_ACK (-07 to -19)
        unhex("7e76010a"),             // PATH_STATUS_BACKUP
        unhex("7e7a04"),               // MAX_PATH_ID
        unhex("7e7c0103"),             // PATH_CIDS_BLOCKED
        unhex("42f5c000000102030405"), // TIME_STAMP (8-byte varint)
        unhex("40240405407b06"),       // RESET_STREAM_AT
        unhex("40af0102406403"),       // ACK_FREQUENCY
    ];
    for f in &frames {
        let whole: Vec<_> = Frames::new(f).collect();
        assert!(whole.len() == 1 && whole[0].is_ok(), "{f:02x?}: {whole:?}");
        for n in 1..f.len() {
            let got: Vec<_> = Frames::new(&f[..n]).collect();
            assert_eq!(got.len(), 1, "{f:02x?}[..{n}]");
            assert!(
                matches!(got[0], Err(FrameError::Truncated { .. })),
                "{f:02x?}[..{n}]: {got:?}"
            );
        }
    }
}

/// Draft-05's PATH_STATUS (0x15228c06, as tquic 1.6 reads it; drafts -06 on split it in two)
/// is decoded, so the frames after it in the packet are not lost; its ACK_MP (0x15228c00)
/// names the DCID sequence number in the field a PATH_ACK of drafts -07 to -19 names the path.
#[test]
fn draft05_path_status_and_ack_mp_keep_the_frames_after_them() {
    let packet = unhex("95228c0601070295228c000105000000080401ff");
    let got: Vec<_> = Frames::new(&packet).collect::<Result<_, _>>().unwrap();
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(
        got[0],
        Frame::PathStatus {
            path_id: 1,
            seq: 7,
            available: true
        }
    );
    let Frame::Ack(a) = &got[1] else {
        panic!("{got:?}")
    };
    assert_eq!(
        (a.path_id, a.largest, a.kind()),
        (Some(1), 5, "path_ack_old")
    );
    assert_eq!(got[2].name(), "stream");
}

#[test]
fn malformed_and_unknown_frames_stop_and_report() {
    let ack_underflow = unhex("02050001020500");
    let e: Vec<_> = Frames::new(&ack_underflow).collect();
    assert!(
        matches!(e[0], Err(FrameError::Malformed { frame_type: 2, .. })),
        "{e:?}"
    );
    let unknown = unhex("01402101");
    let e: Vec<_> = Frames::new(&unknown).collect();
    assert_eq!(e.len(), 2);
    assert_eq!(
        e[1],
        Err(FrameError::UnknownType {
            frame_type: 0x21,
            offset: 1
        })
    );
}

/// quinn bundles IMMEDIATE_ACK (0x1f) with data and PMTU probes and may send ACK_FREQUENCY
/// (0xaf): both are decoded, so the STREAM frames after them are not lost.
#[test]
fn ack_frequency_frames_do_not_hide_the_frames_after_them() {
    // IMMEDIATE_ACK (old and current type), ACK_FREQUENCY {1, 2, 25 000 µs, 3}, STREAM 2 "hi" FIN.
    let payload = unhex("1f 40ac 40af 01 02 800061a8 03 0b 02 02 6869");
    let frames: Vec<_> = Frames::new(&payload).collect::<Result<_, _>>().unwrap();
    let names: Vec<&str> = frames.iter().map(Frame::name).collect();
    assert_eq!(
        names,
        ["immediate_ack", "immediate_ack", "ack_frequency", "stream"]
    );
    assert!(matches!(
        frames[2],
        Frame::AckFrequency {
            seq: 1,
            ack_eliciting_threshold: 2,
            request_max_ack_delay_us: 25_000,
            reordering_threshold: 3
        }
    ));
    assert!(matches!(
        frames[3],
        Frame::Stream {
            stream_id: 2,
            data: b"hi",
            fin: true,
            ..
        }
    ));
}

/// TIME_STAMP (draft-huitema-quic-ts, as picoquic sends it before its STREAM frames),
/// RESET_STREAM_AT and DATAGRAM are decoded, so the frames after them are kept.
#[test]
fn extension_frames_do_not_hide_the_frames_after_them() {
    // TIME_STAMP 0x12345, ACK, RESET_STREAM_AT {4, 5, 100, 60}, DATAGRAM "ab" (with length),
    // STREAM 0 off 7 "xyz", DATAGRAM "q" (to the end).
    let payload = unhex(
        "42f5 80012345 02 05 00 00 00 4024 04 05 4064 403c 31 02 6162 0e 00 07 03 78797a 30 71",
    );
    let frames: Vec<_> = Frames::new(&payload).collect::<Result<_, _>>().unwrap();
    let names: Vec<&str> = frames
        .iter()
        .map(tboxscope_decode::quic::Frame::name)
        .collect();
    assert_eq!(
        names,
        [
            "time_stamp",
            "ack",
            "reset_stream_at",
            "datagram",
            "stream",
            "datagram"
        ]
    );
    assert_eq!(frames[0], Frame::TimeStamp(0x12345));
    assert_eq!(
        frames[2],
        Frame::ResetStreamAt {
            stream_id: 4,
            error_code: 5,
            final_size: 100,
            reliable_size: 60
        }
    );
    assert_eq!(frames[3], Frame::Datagram { data: b"ab" });
    assert!(matches!(
        frames[4],
        Frame::Stream {
            stream_id: 0,
            offset: 7,
            data: b"xyz",
            ..
        }
    ));
    assert_eq!(frames[5], Frame::Datagram { data: b"q" });
    // A reliable size beyond the final size is malformed; the frames before it are kept.
    let bad = unhex("01 4024 04 05 0a 0b");
    let e: Vec<_> = Frames::new(&bad).collect();
    assert_eq!(e.len(), 2);
    assert!(
        matches!(
            e[1],
            Err(FrameError::Malformed {
                frame_type: 0x24,
                offset: 1,
                ..
            })
        ),
        "{e:?}"
    );
    // An unknown type still ends the walk after the frames before it.
    let unknown = unhex("42f5 05 0b 00 01 61 4042 00 01");
    let e: Vec<_> = Frames::new(&unknown).collect();
    assert_eq!(e.len(), 3, "{e:?}");
    assert!(e[0].is_ok() && e[1].is_ok());
    assert_eq!(
        e[2],
        Err(FrameError::UnknownType {
            frame_type: 0x42,
            offset: 7
        })
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_headers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200), dcid_len in 0usize..21, lax: bool) {
        if let Ok(h) = parse_header(&bytes, dcid_len, ParseOptions { lax }) {
            prop_assert!(h.packet_len() <= bytes.len());
            prop_assert!(h.pn_offset <= bytes.len());
        }
    }

    #[test]
    fn random_frames_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let n = Frames::new(&bytes).count();
        prop_assert!(n <= bytes.len());
        for f in Frames::new(&bytes).flatten() {
            let _ = tboxscope_decode::quic::FrameSummary::from_frame(&f);
        }
    }

    #[test]
    fn random_datagrams_never_panic(dgrams in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..1300), 1..6)) {
        let mut dec = QuicDecoder::new(Default::default(), None);
        for d in &dgrams {
            let _ = dec.decode(d, &DatagramInfo::default());
        }
    }

    #[test]
    fn mutated_initials_never_panic(pos in 0usize..1200, val: u8, cut in 0usize..1200) {
        let p = format!("{}/tests/data/rfc9001-client-initial.hex", env!("CARGO_MANIFEST_DIR"));
        let mut pkt = unhex(&std::fs::read_to_string(p).unwrap());
        pkt[pos] = val;
        pkt.truncate(cut.max(1));
        let mut dec = QuicDecoder::new(Default::default(), None);
        let _ = dec.decode(&pkt, &DatagramInfo::default());
        let _ = dec.decode(&pkt, &DatagramInfo { from_client: Some(false), ..Default::default() });
    }
}
