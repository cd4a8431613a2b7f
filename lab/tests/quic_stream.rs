//! `quic-stream`: quinn writes every message back to back on one bidirectional stream of each
//! of two connections (one per path), the same bytes on both; the gateway cuts each stream
//! back into messages. Under S2 (city loss on both paths) every message arrives, over both
//! paths, and nothing fails to decode. Needs root.
use std::time::Duration;

use tboxscope_lab::names::existing_namespaces;
use tboxscope_lab::peers::Transport;
use tboxscope_lab::run::{run, NoObserver, RunOptions};
use tboxscope_lab::{LabNames, Scenario};

#[test]
fn quic_stream_delivers_every_message_over_both_paths() {
    let names = LabNames::for_test("qstream").unwrap();
    let mut opts = RunOptions::new(names.clone());
    opts.duration = Duration::from_secs(4);
    opts.drain = Duration::from_secs(3);
    opts.transports = vec![Transport::QuicStream];
    let r = run(&Scenario::preset("S2").unwrap(), &opts, &mut NoObserver).unwrap();
    eprintln!("{r}");
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let t = &r.transports[0];
    assert_eq!(t.transport, "quic-stream");
    assert_eq!(t.sent, 200, "{t:?}");
    assert_eq!((t.delivered, t.lost, t.rejected), (200, 0, 0), "{t:?}");
    // QUIC retransmits on each connection: both copies of every message arrive.
    assert!(t.duplication_pct >= 99.0, "{t:?}");
    assert!(existing_namespaces(names.prefix()).unwrap().is_empty());
}
