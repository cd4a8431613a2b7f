//! QUIC decoder fuzz target. The first byte picks the layer; the rest is the input:
//! 0 headers and coalesced packets (strict and lax), 1 frames and their summaries,
//! 2 the stateful decoder over several datagrams, 3 keylog text, 4 CRYPTO reassembly and
//! ClientHello/ServerHello parsing. Run: `cargo +nightly fuzz run quic -- -max_total_time=60`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tboxscope_decode::quic::header::{parse_header, CoalescedPackets, ParseOptions};
use tboxscope_decode::quic::tls::{parse_hello, CryptoStream};
use tboxscope_decode::quic::{DatagramInfo, FrameSummary, Frames, Keylog, QuicDecoder};

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else { return };
    match sel % 5 {
        0 => {
            let dcid_len = usize::from(rest.first().copied().unwrap_or(0) % 21);
            for lax in [false, true] {
                let opts = ParseOptions { lax };
                if let Ok(h) = parse_header(rest, dcid_len, opts) {
                    assert!(h.packet_len() <= rest.len());
                    assert!(h.pn_offset <= rest.len());
                }
                let mut total = 0;
                for p in CoalescedPackets::new(rest, dcid_len, opts).flatten() {
                    total += p.packet_len();
                }
                assert!(total <= rest.len());
            }
        }
        1 => {
            for f in Frames::new(rest).flatten() {
                let _ = FrameSummary::from_frame(&f);
            }
        }
        2 => {
            let mut dec = QuicDecoder::new(Default::default(), Some(Keylog::default()));
            for (i, d) in rest.split(|&b| b == 0xa5).enumerate() {
                let info = DatagramInfo { from_client: Some(i % 2 == 0), ..Default::default() };
                for s in dec.decode(d, &info) {
                    assert!(s.size <= d.len());
                }
            }
        }
        3 => {
            let _ = Keylog::parse(rest);
        }
        _ => {
            let mut s = CryptoStream::default();
            for chunk in rest.chunks(7) {
                let off = u64::from(chunk.first().copied().unwrap_or(0));
                s.insert(off, chunk);
            }
            let _ = parse_hello(s.contiguous());
            let _ = parse_hello(rest);
        }
    }
});
