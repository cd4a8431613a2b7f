//! The benchmark load generator (`ring_load`): every `getppid()` of this process becomes exactly
//! one synthetic cwnd event, decoded by the real reader into a `tcp_cwnd` record, with no drop.
//! Needs root (CI runs as root); the probes detach when the watch is dropped.

use std::time::{Duration, Instant};

use probe_user::capture::records::Record;
use probe_user::capture::watch::TcpWatch;
use probe_user::source::ebpf::{HookState, ProbeOptions, TcpFilter};

const CALLS: u64 = 20_000;

#[test]
#[ignore = "needs root"]
fn every_getppid_call_is_one_event_through_the_ring_buffer() {
    // SAFETY: no preconditions.
    let me = unsafe { libc::getpid() } as u32;
    let mut watch = TcpWatch::start(&ProbeOptions {
        // A port no test uses: real TCP traffic on the machine adds no records.
        filter: TcpFilter::parse(&[9], &[]).unwrap(),
        load_generator: Some(me),
        ..ProbeOptions::default()
    })
    .unwrap();
    for _ in 0..CALLS {
        // SAFETY: no preconditions.
        unsafe { libc::getppid() };
    }
    let mut cwnd = 0u64;
    let mut wrong = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while cwnd < CALLS && Instant::now() < deadline {
        watch
            .poll(Duration::from_millis(50), &mut |_, r| match r {
                Record::Cwnd(c)
                    if &*c.ends.src == "192.0.2.1:1" && &*c.ends.dst == "192.0.2.2:2" =>
                {
                    cwnd += 1;
                }
                other => wrong.push(other.type_name()),
            })
            .unwrap();
    }
    assert_eq!(cwnd, CALLS, "synthetic events delivered");
    assert!(wrong.is_empty(), "other records: {wrong:?}");
    let drops = watch.drops();
    assert_eq!((drops.ring_full, drops.read_failed), (0, 0));
    // recursion_misses read from each attached hook's program: every one of them readable
    // on this kernel, and no getppid() of ours went unreported while the counts were zero.
    assert_eq!(drops.skipped_by_kernel.unread_hooks, 0, "{drops:?}");
    assert!(watch.hooks().iter().any(|h| h.state == HookState::Attached));
    assert_eq!(watch.rejected(), 0);
}
