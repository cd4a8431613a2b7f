//! kcp-go framing: crypto header, FEC header and the detector's kcp-go paths must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tboxscope_decode::kcp::kcpgo::{self, CryptHeader, FecPacket};
use tboxscope_decode::kcp::Detector;

fuzz_target!(|data: &[u8]| {
    let _ = CryptHeader::from_slice(data);
    let _ = FecPacket::from_slice(data);
    for crypt in [false, true] {
        if let Ok(packet) = kcpgo::decode(data, crypt) {
            assert_eq!(packet.framing().crypt_none, crypt);
            for s in packet.iter_segments() {
                assert!(s.is_ok());
            }
        }
    }
    // Let the fuzzer reach the CRC-verified path: prepend a valid crypt-none header.
    let mut framed = vec![0u8; 16];
    framed.extend_from_slice(&crc32(data).to_le_bytes());
    framed.extend_from_slice(data);
    let mut detector = Detector::default();
    let _ = detector.classify(1, 2, data);
    let _ = detector.classify(1, 2, &framed);
    if let Ok(packet) = kcpgo::decode(&framed, true) {
        assert!(packet.crypt.is_some());
    }
});

/// CRC-32 (IEEE), bitwise: independent of the decoder's implementation.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for b in bytes {
        crc ^= u32::from(*b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}
