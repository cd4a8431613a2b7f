//! Segment parsing: exact errors at every truncation length, strict and lax datagram decoding.
#![expect(clippy::unwrap_used)]

#[expect(dead_code, reason = "each test uses some of the shared helpers")]
mod kcp_common;

use kcp_common::encode;

use proptest::prelude::*;
use tboxscope_decode::kcp::{
    decode_lax, decode_strict, Cmd, DatagramError, Field, Segment, SegmentError, Segments,
    HEADER_LEN,
};

/// The error the decoder must give for a valid segment (cmd ok) cut to `n` bytes.
fn expected_truncation(n: usize, len: usize) -> SegmentError {
    if n < HEADER_LEN {
        let field = match n {
            0..=3 => Field::Conv,
            4 => Field::Cmd,
            5 => Field::Frg,
            6..=7 => Field::Wnd,
            8..=11 => Field::Ts,
            12..=15 => Field::Sn,
            16..=19 => Field::Una,
            _ => Field::Len,
        };
        let required = [4, 5, 6, 8, 12, 16, 20, 24][[
            Field::Conv,
            Field::Cmd,
            Field::Frg,
            Field::Wnd,
            Field::Ts,
            Field::Sn,
            Field::Una,
            Field::Len,
        ]
        .iter()
        .position(|f| *f == field)
        .unwrap()];
        SegmentError::Truncated {
            field,
            required,
            actual: n,
        }
    } else {
        SegmentError::Truncated {
            field: Field::Payload,
            required: HEADER_LEN + len,
            actual: n,
        }
    }
}

#[test]
fn accessors_read_every_field() {
    let bytes = encode(0x0a0b0c0d, 81, 3, 0x1234, 0xdeadbeef, 77, 66, b"hello");
    let s = Segment::from_slice(&bytes).unwrap();
    assert_eq!(s.conv(), 0x0a0b0c0d);
    assert_eq!(s.cmd(), Cmd::Push);
    assert_eq!(s.frg(), 3);
    assert_eq!(s.wnd(), 0x1234);
    assert_eq!(s.ts(), 0xdeadbeef);
    assert_eq!(s.sn(), 77);
    assert_eq!(s.una(), 66);
    assert_eq!(s.len(), 5);
    assert_eq!(s.payload(), b"hello");
    assert_eq!(s.wire_len(), 29);
    let json = serde_json::to_string(&s.summary()).unwrap();
    assert_eq!(
        json,
        r#"{"conv":168496141,"cmd":"push","sn":77,"una":66,"frg":3,"wnd":4660,"len":5,"kcp_ts":3735928559}"#
    );
}

#[test]
fn every_truncation_of_a_valid_segment_gives_the_exact_error() {
    for cmd in 81..=84u8 {
        let payload: Vec<u8> = if cmd == 81 {
            (0..40).collect()
        } else {
            Vec::new()
        };
        let bytes = encode(10, cmd, 0, 128, 1, 2, 3, &payload);
        for n in 0..bytes.len() {
            assert_eq!(
                Segment::from_slice(&bytes[..n]),
                Err(expected_truncation(n, payload.len())),
                "cmd {cmd} cut to {n}"
            );
        }
        assert!(Segment::from_slice(&bytes).is_ok());
    }
}

#[test]
fn unknown_cmd_is_reported_as_soon_as_the_byte_is_there() {
    let bytes = encode(10, 0x01, 0, 128, 1, 2, 3, b"");
    for n in 0..=4 {
        assert!(matches!(
            Segment::from_slice(&bytes[..n]),
            Err(SegmentError::Truncated { .. })
        ));
    }
    for n in 5..=bytes.len() {
        assert_eq!(
            Segment::from_slice(&bytes[..n]),
            Err(SegmentError::UnknownCmd(1))
        );
    }
}

#[test]
fn huge_len_field_is_a_truncation_not_an_overflow() {
    let mut bytes = encode(10, 81, 0, 128, 1, 2, 3, b"abc");
    bytes[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(
        Segment::from_slice(&bytes),
        Err(SegmentError::Truncated {
            field: Field::Payload,
            required: HEADER_LEN + u32::MAX as usize,
            actual: 27
        })
    );
}

#[test]
fn strict_and_lax_datagram_decoding() {
    let mut dgram = encode(10, 82, 0, 128, 40, 1, 3, b"");
    dgram.extend(encode(10, 82, 0, 128, 40, 2, 3, b""));
    dgram.extend(encode(10, 81, 0, 128, 41, 9, 3, b"xyz"));
    assert_eq!(decode_strict(&dgram).unwrap().len(), 3);
    // Cut inside the third segment's payload.
    let cut = &dgram[..dgram.len() - 1];
    let err = DatagramError {
        index: 2,
        offset: 48,
        error: SegmentError::Truncated {
            field: Field::Payload,
            required: 27,
            actual: 26,
        },
    };
    assert_eq!(decode_strict(cut), Err(err));
    let lax = decode_lax(cut);
    assert_eq!(lax.segments.len(), 2);
    assert_eq!(lax.stopped, Some(err));
    assert_eq!(
        err.to_string(),
        "segment 2 at byte 48: KCP segment truncated in payload: 27 bytes required, 26 present"
    );
    // Trailing garbage after the last segment is reported, not ignored.
    let mut trailing = dgram.clone();
    trailing.extend_from_slice(&[0, 0, 0]);
    let lax = decode_lax(&trailing);
    assert_eq!(lax.segments.len(), 3);
    assert_eq!(lax.stopped.unwrap().offset, dgram.len());
    // Empty datagram.
    assert!(decode_strict(&[]).is_err());
    assert_eq!(Segments::new(&[]).count(), 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any segment cut anywhere gives exactly the truncation error for that length.
    #[test]
    fn truncation_errors_are_exact(
        conv: u32, cmd in 81u8..=84, frg: u8, wnd: u16, ts: u32, sn: u32, una: u32,
        payload in proptest::collection::vec(any::<u8>(), 0..64),
        cut in 0usize..200,
    ) {
        let bytes = encode(conv, cmd, frg, wnd, ts, sn, una, &payload);
        let n = cut.min(bytes.len());
        let got = Segment::from_slice(&bytes[..n]);
        if n == bytes.len() {
            let s = got.unwrap();
            prop_assert_eq!((s.conv(), s.cmd().as_u8(), s.frg(), s.wnd()), (conv, cmd, frg, wnd));
            prop_assert_eq!((s.ts(), s.sn(), s.una(), s.payload()), (ts, sn, una, &payload[..]));
        } else {
            prop_assert_eq!(got, Err(expected_truncation(n, payload.len())));
        }
    }

    /// Arbitrary bytes never panic, and the walk accounts for every byte it accepts.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let lax = decode_lax(&bytes);
        let used: usize = lax.segments.iter().map(Segment::wire_len).sum();
        match lax.stopped {
            Some(e) => prop_assert_eq!(e.offset, used),
            None => prop_assert_eq!(used, bytes.len()),
        }
    }

    /// A datagram of several segments cut anywhere: lax keeps the whole segments before the cut.
    #[test]
    fn lax_keeps_whole_segments_before_a_cut(
        lens in proptest::collection::vec(0usize..50, 1..6),
        cut_from_end in 1usize..40,
    ) {
        let mut dgram = Vec::new();
        let mut ends = Vec::new();
        for (i, l) in lens.iter().enumerate() {
            dgram.extend(encode(7, 81, 0, 32, 1, i as u32, 0, &vec![0xab; *l]));
            ends.push(dgram.len());
        }
        let n = dgram.len().saturating_sub(cut_from_end);
        let lax = decode_lax(&dgram[..n]);
        let whole = ends.iter().filter(|e| **e <= n).count();
        prop_assert_eq!(lax.segments.len(), whole);
        prop_assert_eq!(lax.stopped.is_some(), n > 0 && !ends.contains(&n));
    }
}
