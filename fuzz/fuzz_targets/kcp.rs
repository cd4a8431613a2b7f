//! Raw KCP: segment walk (strict and lax), detection (port-free and forced) and the conversation
//! tracker must never panic, and the lax walk must account for every byte it accepts.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tboxscope_decode::kcp::{
    decode_lax, decode_strict, ConvTracker, ConvTrackerConfig, Detector, DetectorConfig,
    Direction, Observation, Segment,
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
    let mut tracker = ConvTracker::new(ConvTrackerConfig {
        max_convs: 8,
        max_tracked_sns: 16,
        ..ConvTrackerConfig::default()
    });
    let mut events = Vec::new();
    // Split the input into datagrams at a marker byte so one input exercises a conversation.
    for (i, datagram) in data.split(|b| *b == 0xa5).enumerate() {
        for forced in [0u16, 4000] {
            let detection = detector.classify(forced, 1, datagram);
            if let Some(segments) = detection.segments() {
                for s in segments {
                    let obs = Observation {
                        time_ns: i as u64 * 1_000_000,
                        direction: if s.sn() % 2 == 0 { Direction::Up } else { Direction::Down },
                        path: (i % 2) as u16,
                        scope: 0,
                    };
                    tracker.observe(obs, &s.summary(), &mut events);
                }
            }
        }
    }
});
