//! Each of S1–S3 briefly with every transport: everything is delivered, the redundant
//! transports duplicate every message, and teardown leaves nothing behind. Needs root.
use std::time::Duration;

use tboxscope_lab::names::existing_namespaces;
use tboxscope_lab::run::{run, NoObserver, RunOptions};
use tboxscope_lab::{LabNames, Scenario};

#[test]
fn s1_s2_s3_deliver_everything_and_redundant_transports_duplicate() {
    let threads = || std::fs::read_dir("/proc/self/task").unwrap().count();
    let before = threads();
    for preset in ["S1", "S2", "S3"] {
        let names = LabNames::for_test(&preset.to_lowercase()).unwrap();
        let mut opts = RunOptions::new(names.clone());
        opts.duration = Duration::from_secs(5);
        opts.drain = Duration::from_secs(4);
        let r = run(&Scenario::preset(preset).unwrap(), &opts, &mut NoObserver).unwrap();
        eprintln!("{r}");
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        for t in &r.transports {
            assert_eq!(t.sent, 250, "{preset} {}", t.transport);
            assert_eq!(t.lost, 0, "{preset} {}: {t:?}", t.transport);
            assert_eq!(t.rejected, 0, "{preset} {}", t.transport);
            // Reliable transports deliver each message once to the application.
            if t.paths.len() == 1 {
                assert_eq!(t.duplication_pct, 0.0, "{preset} {}", t.transport);
                assert!(
                    t.amplification > 1.0,
                    "{preset} {}: {}",
                    t.transport,
                    t.amplification
                );
            } else {
                // One session per path retransmits on its own path; one multipath connection
                // (tquic) does not send a copy lost on one path again once the other path's copy
                // was acknowledged: a message then went on one path, as often as a path loses;
                // and after losses it may keep off a path for a while (S3, 5 s: 82 % once,
                // path B carrying 74 %).
                let min_dup = if t.transport == "mpquic" { 75.0 } else { 99.0 };
                assert!(
                    t.duplication_pct >= min_dup,
                    "{preset} {}: {t:?}",
                    t.transport
                );
                // Two copies of every message: at least twice the payload on the wire.
                assert!(
                    t.amplification > 2.0,
                    "{preset} {}: {}",
                    t.transport,
                    t.amplification
                );
                // Both paths carried first copies (B is faster, A wins sometimes via jitter).
                assert!(t.first_on_b_pct > 50.0 && t.first_on_b_pct < 100.0, "{t:?}");
            }
        }
        // Every delay line carried frames, and the kernel refused none beyond the path's random
        // loss (dropped at the line's egress, which the line sees as a refused send): at most
        // three times the expected loss, plus a few.
        assert_eq!(r.lines.len(), 2);
        for (p, s) in &r.lines {
            assert!(s.up_frames > 250 && s.down_frames > 0, "{s:?}");
            let frames = (s.up_frames + s.down_frames + s.send_failures) as f64;
            let loss = r.scenario.path(*p).loss_pct / 100.0;
            assert!(s.send_failures as f64 <= frames * loss * 3.0 + 5.0, "{s:?}");
        }
        assert!(existing_namespaces(names.prefix()).unwrap().is_empty());
    }
    // Delay lines, peers' runtimes and the timeline thread are all gone.
    assert_eq!(threads(), before);
}
