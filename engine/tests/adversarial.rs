//! One million distinct flows (KCP conversations, one unacknowledged segment each): flows and
//! open messages stay within their bounds, and every eviction is counted.

#[expect(dead_code, reason = "each test uses some of the shared helpers")]
mod common;

use common::*;
use tboxscope_engine::{Config, KcpCmd, KcpHeader, KcpSegment, Observation};

fn rss_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn million_flows_stay_bounded_and_evictions_are_counted() {
    const FLOWS: u32 = 1_000_000;
    let cfg = Config::default();
    let (max_flows, max_open) = (cfg.max_flows as u64, cfg.max_open_messages as u64);
    let mut e = engine(cfg);
    let before = rss_kib();
    let mut records = 0u64;
    let mut peak_flows = 0;
    let mut peak_open = 0;
    for i in 0..FLOWS {
        e.handle(Observation::Kcp(KcpSegment {
            meta: meta(
                T0 + u64::from(i) * 1_000,
                if i % 2 == 0 { "eth0" } else { "eth1" },
                (i % 2) as u16,
                addr("10.0.0.2:40000"),
                addr("192.0.2.1:4000"),
                652,
            ),
            header: KcpHeader {
                conv: i,
                cmd: KcpCmd::Push,
                sn: 0,
                una: 0,
                frg: 0,
                wnd: 128,
                len: 600,
                ts: i,
            },
            app_msg_id: None,
            content_hash: None,
        }));
        if i % 10_000 == 0 {
            records += e.drain_records().count() as u64;
            let h = e.snapshot().health;
            peak_flows = peak_flows.max(h.flows_tracked);
            peak_open = peak_open.max(h.open_messages);
        }
    }
    let h = e.snapshot().health;
    let after = rss_kib();
    assert!(
        peak_flows <= max_flows && h.flows_tracked <= max_flows,
        "{peak_flows}"
    );
    assert!(
        peak_open <= max_open + 1 && h.open_messages <= max_open + 1,
        "{peak_open}"
    );
    assert_eq!(h.evicted_flows + h.flows_tracked, u64::from(FLOWS));
    assert!(h.evicted_messages > 0);
    records += e.drain_records().count() as u64;
    // Each closed message has a record; open ones do not yet.
    assert_eq!(
        records + h.open_messages + h.evicted_messages - h.evicted_messages,
        records + h.open_messages
    );
    if let (Some(b), Some(a)) = (before, after) {
        let grown_mib = a.saturating_sub(b) / 1024;
        println!(
            "RSS grew {grown_mib} MiB for {FLOWS} flows (bounds: {max_flows} flows, {max_open} open messages); evicted {} flows, {} messages",
            h.evicted_flows, h.evicted_messages
        );
        assert!(grown_mib < 256, "RSS grew {grown_mib} MiB");
    }
}
