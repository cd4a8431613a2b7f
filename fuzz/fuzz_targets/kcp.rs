//! Raw KCP: segment walk (strict and lax) and detection (port-free and forced, its state kept
//! across datagrams) must never panic; the lax walk must account for every byte it accepts, and
//! every segment a detection hands out must read the same through each view and on its own;
//! a datagram cut short must read as its segments as far as captured.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tboxscope_decode::kcp::{
    decode_lax, decode_strict, Detection, Detector, DetectorConfig, Segment, HEADER_LEN,
};

fuzz_target!(|data: &[u8]| {
    let _ = Segment::from_slice(data);
    let lax = decode_lax(data);
    let used: usize = lax.segments.iter().map(|s| s.wire_len()).sum();
    match lax.stopped {
        Some(e) => assert_eq!(e.offset, used),
        None => assert_eq!(used, data.len()),
    }
    assert_eq!(decode_strict(data).is_ok(), lax.stopped.is_none() && !data.is_empty());

    let mut detector = Detector::new(DetectorConfig {
        forced_ports: vec![4000],
        ..DetectorConfig::default()
    });
    // Split the input into datagrams at a marker byte so one input exercises a flow over time.
    for datagram in data.split(|b| *b == 0xa5) {
        for forced in [0u16, 4000] {
            let detection = detector.classify(forced, 1, datagram);
            let (Detection::Raw(kcp) | Detection::KcpGo { datagram: kcp, .. }) = detection else {
                continue;
            };
            let (mut count, mut bytes) = (0, 0);
            for s in kcp.segments() {
                count += 1;
                bytes += s.wire_len();
                assert_eq!(s.wire_len(), HEADER_LEN + s.payload().len());
                let summary = s.summary();
                assert_eq!(
                    (summary.conv, summary.cmd, summary.sn, summary.una),
                    (s.conv(), s.cmd(), s.sn(), s.una())
                );
                assert_eq!(
                    (summary.ts, summary.frg, summary.wnd, summary.len as usize),
                    (s.ts(), s.frg(), s.wnd(), s.payload().len())
                );
                // The segment alone decodes strictly to the same fields.
                let mut alone = s.header().to_vec();
                alone.extend_from_slice(s.payload());
                let again = decode_strict(&alone).expect("a detected segment decodes alone");
                assert_eq!(again.len(), 1);
                assert_eq!(again[0].summary(), summary);
            }
            assert_eq!((count, bytes), (kcp.segment_count(), kcp.bytes().len()));
        }
        // The datagram as a capture cut at a quarter, half and three quarters would hold it:
        // only the last segment seen may be cut, and the lengths the headers give plus what
        // is past the last one account for the whole datagram.
        for (quarter, forced) in (1..4).flat_map(|q| [(q, 0u16), (q, 4000)]) {
            let cut = &datagram[..datagram.len() * quarter / 4];
            let Detection::Raw(kcp) = detector.classify_cut(forced, 1, cut, datagram.len()) else {
                continue;
            };
            let seen: Vec<_> = kcp.segments().collect();
            assert_eq!(seen.len(), kcp.segment_count());
            let declared: usize = seen.iter().map(|s| HEADER_LEN + s.len() as usize).sum();
            assert_eq!(declared + kcp.unseen_bytes(), datagram.len());
            for (i, s) in seen.iter().enumerate() {
                assert!(s.payload().len() <= s.len() as usize);
                assert!(!s.is_cut() || i + 1 == seen.len(), "only the last is cut");
            }
        }
    }
});
