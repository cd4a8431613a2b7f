//! The capture-file reader: arbitrary bytes as a pcap or pcapng file, every frame read until the
//! end or the first error. It must never panic, and what it hands out must be consistent.
#![no_main]

use std::io::Cursor;

use libfuzzer_sys::fuzz_target;
use probe_user::source::pcap::file::{CaptureReader, MAX_RECORD};

fuzz_target!(|data: &[u8]| {
    let Ok(mut reader) = CaptureReader::new(Cursor::new(data), "fuzz", "fuzz") else {
        return;
    };
    let mut frames = 0u64;
    while let Ok(Some(packet)) = reader.next_packet() {
        frames += 1;
        assert_eq!(packet.frame, frames, "frames are numbered 1, 2, 3, …");
        assert!(packet.data.len() <= MAX_RECORD);
        assert!(packet.offset < data.len() as u64);
        let interface = packet.interface;
        assert!(interface < reader.interfaces().len(), "a packet names a known interface");
    }
    assert_eq!(reader.frames(), frames);
    for secrets in reader.secrets() {
        assert!(secrets.offset < data.len() as u64);
    }
});
