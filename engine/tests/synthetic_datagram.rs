//! Mode 1 (identical datagram on both paths), both ends captured, known losses and one
//! 5-second outage on eth1: counts, latencies, percentiles, win rates, the outage and its
//! messages must match the ground truth exactly (percentiles up to hdrhistogram quantization).

#[expect(dead_code, reason = "each test uses some of the shared helpers")]
mod common;

use common::*;
use tboxscope_engine::{Config, Datagram, Observation, Record};

const N: u64 = 3000;
const GAP: u64 = 20_000_000; // 50 messages per second
const GW_CLOCK_ERROR: i64 = 3_700_000; // gateway clock runs 3.7 ms ahead (given as an offset)

struct Truth {
    send: [u64; 2],
    arrive: [Option<u64>; 2],
}

fn lat(path: usize, i: u64) -> u64 {
    match path {
        0 => 30_000_000 + (i * 7919 % 5000) * 1000,
        _ => 25_000_000 + (i * 104_729 % 20_000) * 1000,
    }
}

fn lost(path: usize, i: u64) -> bool {
    match path {
        0 => i % 100 == 7,
        _ => i % 150 == 11 || (1000..1250).contains(&i),
    }
}

fn build() -> (Vec<Observation>, Vec<Truth>) {
    let tbox = [addr("10.0.0.2:40000"), addr("10.1.0.2:40001")];
    let gw = addr("192.0.2.1:9000");
    let labels = ["eth0", "eth1"];
    let mut obs = two_ends_of_two_paths(Some(-GW_CLOCK_ERROR));
    let mut truth = Vec::new();
    for i in 0..N {
        let base = T0 + 1_000_000_000 + i * GAP;
        let mut t = Truth {
            send: [0; 2],
            arrive: [None; 2],
        };
        for p in 0..2 {
            let send = base + p as u64 * 100_000;
            t.send[p] = send;
            let d = |ts: u64, cap: u16| {
                Observation::Datagram(Datagram {
                    meta: meta(ts, labels[p], cap, tbox[p], gw, 628),
                    payload_hash: 0xabc0_0000 + i,
                    payload_len: 600,
                    app_msg_id: None,
                })
            };
            obs.push(d(send, p as u16));
            if !lost(p, i) {
                let arrive = send + lat(p, i);
                t.arrive[p] = Some(arrive);
                obs.push(d((arrive as i64 + GW_CLOCK_ERROR) as u64, 2 + p as u16));
            }
        }
        truth.push(t);
    }
    (sorted(obs), truth)
}

#[test]
fn datagram_two_ends_match_ground_truth() {
    let (obs, truth) = build();
    let mut e = engine(Config::default());
    let end = obs.last().unwrap().ts_ns();
    for o in obs {
        e.handle(o);
    }
    let summary = e.finish(end + 10_000_000_000);
    let records: Vec<Record> = e.drain_records().collect();

    // Ground truth.
    let both = truth
        .iter()
        .filter(|t| t.arrive[0].is_some() && t.arrive[1].is_some())
        .count() as u64;
    let only0 = truth
        .iter()
        .filter(|t| t.arrive[0].is_some() && t.arrive[1].is_none())
        .count() as u64;
    let only1 = truth
        .iter()
        .filter(|t| t.arrive[0].is_none() && t.arrive[1].is_some())
        .count() as u64;
    let wins0 = truth
        .iter()
        .filter(|t| match (t.arrive[0], t.arrive[1]) {
            (Some(a), Some(b)) => a <= b, // a tie goes to the copy seen first (eth0)
            (Some(_), None) => true,
            _ => false,
        })
        .count() as u64;
    let mut combined: Vec<u64> = truth
        .iter()
        .filter_map(|t| {
            let first = t.arrive.iter().flatten().min()?;
            Some((first - t.send[0]) / 1000)
        })
        .collect();
    combined.sort_unstable();
    let mut per_path: Vec<Vec<u64>> = (0..2)
        .map(|p| {
            let mut v: Vec<u64> = truth
                .iter()
                .filter_map(|t| t.arrive[p].map(|a| (a - t.send[p]) / 1000))
                .collect();
            v.sort_unstable();
            v
        })
        .collect();

    let red = &summary.redundancy[0];
    assert_eq!(red.messages, N);
    assert_eq!(red.on_all_paths, both);
    let share = |l: &str| red.paths.iter().find(|p| p.path == l).unwrap().clone();
    assert_eq!(share("eth0").only, only0);
    assert_eq!(share("eth1").only, only1);
    assert_eq!(share("eth0").wins, wins0);
    let delivered_any = truth
        .iter()
        .filter(|t| t.arrive.iter().any(Option::is_some))
        .count() as u64;
    assert_eq!(share("eth1").wins, delivered_any - wins0);
    // Every copy was sent (both ends captured): the losses and the outage are what became of
    // them.
    assert_eq!(red.sent_on_all_paths, N);
    assert!(
        red.verdict.starts_with(
            "redundant sending confirmed: 100.0% of 3000 messages sent on all 2 paths; partial \
             redundancy"
        ),
        "{}",
        red.verdict
    );

    let c = &summary.latency.combined;
    assert_eq!(c.count, combined.len() as u64);
    assert_eq!(c.min_us, combined[0]);
    assert_eq!(c.max_us, *combined.last().unwrap());
    for (q, got) in [
        (0.5, c.p50_us),
        (0.9, c.p90_us),
        (0.99, c.p99_us),
        (0.999, c.p999_us),
    ] {
        assert_eq!(got, expected_quantile(&combined, q), "combined q{q}");
    }
    for (p, label) in ["eth0", "eth1"].iter().enumerate() {
        let (_, got) = summary
            .latency
            .per_path
            .iter()
            .find(|(l, _)| l == label)
            .unwrap();
        let v = &mut per_path[p];
        assert_eq!(got.count, v.len() as u64, "{label}");
        assert_eq!(got.p99_us, expected_quantile(v, 0.99), "{label} p99");
        assert_eq!(got.p50_us, expected_quantile(v, 0.5), "{label} p50");
        assert_eq!(got.max_us, *v.last().unwrap());
    }

    // One outage on eth1: from the last arrival before the silence to the first after it.
    assert_eq!(summary.outages_total, 1, "{:?}", summary.outages);
    let o = &summary.outages[0];
    assert_eq!(o.path, "eth1");
    let start = truth[999].arrive[1].unwrap();
    let end_ns = truth[1250].arrive[1].unwrap();
    assert_eq!(o.start_ns, start);
    assert_eq!(o.end_ns, Some(end_ns));
    assert_eq!(o.duration_ns, end_ns - start);
    // Messages that came up during the outage whose eth1 copy never arrived, or arrived only
    // after the outage ended (in flight when the path came back).
    let in_window = |t: &Truth| {
        t.send[0] >= start && t.send[0] <= end_ns && t.arrive[1].is_none_or(|a| a > end_ns)
    };
    let others = truth
        .iter()
        .filter(|t| in_window(t) && t.arrive[0].is_some())
        .count() as u64;
    let lost_both = truth
        .iter()
        .filter(|t| in_window(t) && t.arrive[0].is_none())
        .count() as u64;
    assert_eq!(o.carried_by_others, others);
    assert_eq!(o.lost, lost_both);

    // Records: one message record per message, exact per-copy latency.
    let msgs = messages(&records);
    assert_eq!(msgs.len() as u64, N);
    let m = msgs
        .iter()
        .find(|m| m.id == format!("hash {:016x}", 0xabc0_0000u64 + 5))
        .unwrap();
    let eth0 = m.copies.iter().find(|c| c.path == "eth0").unwrap();
    assert_eq!(eth0.sent, Some(truth[5].send[0]));
    assert_eq!(eth0.arrived, truth[5].arrive[0]);
    assert_eq!(eth0.latency_us, Some(lat(0, 5) / 1000));
    assert!(records.iter().any(|r| matches!(r, Record::Outage(_))));
    assert!(
        records
            .iter()
            .filter(|r| matches!(r, Record::Window(_)))
            .count()
            >= 60
    );

    // Amplification: every copy's wire bytes / unique payload delivered.
    let amp = &summary.amplification[0];
    let sent_copies = 2 * N;
    assert_eq!(amp.wire_bytes, sent_copies * 628);
    let delivered = truth
        .iter()
        .filter(|t| t.arrive.iter().any(Option::is_some))
        .count() as u64;
    assert_eq!(amp.unique_payload_bytes, delivered * 600);

    let text = tboxscope_engine::report::render(&summary);
    assert!(text.contains("udp :9000"), "{text}");
    println!("{text}");
}

/// The end of a dual-sent run, both ends captured: both paths stop carrying messages, a lagging
/// path-0 sender then delivers `stragglers` messages whose other copies were never seen, and
/// path 1 carries only keep-alives a little over a second apart. Returns the outages.
fn run_end(stragglers: u64) -> Vec<tboxscope_engine::OutageRecord> {
    let tbox = [addr("10.0.0.2:40000"), addr("10.1.0.2:40001")];
    let gw = addr("192.0.2.1:9000");
    let labels = ["eth0", "eth1"];
    let mut obs = two_ends_of_two_paths(Some(0));
    let datagram = |ts: u64, p: usize, cap: u16, src, dst, hash: u64| {
        Observation::Datagram(Datagram {
            meta: meta(ts, labels[p], cap, src, dst, 628),
            payload_hash: hash,
            payload_len: 600,
            app_msg_id: None,
        })
    };
    let start = T0 + 1_000_000_000;
    for i in 0..200u64 {
        for (p, &src) in tbox.iter().enumerate() {
            let send = start + i * GAP;
            obs.push(datagram(send, p, p as u16, src, gw, 0x5000 + i));
            obs.push(datagram(
                send + 30_000_000,
                p,
                2 + p as u16,
                src,
                gw,
                0x5000 + i,
            ));
        }
    }
    let end = start + 200 * GAP;
    // Keep-alives of another exchange on path 1 (each answered), 1.05 s apart, for 6 s.
    let (ka, ka_gw) = (addr("10.1.0.2:40002"), addr("192.0.2.1:9001"));
    for k in 0..6u64 {
        let t = end + 500_000_000 + k * 1_050_000_000;
        obs.push(datagram(t, 1, 1, ka, ka_gw, 0x9000 + 2 * k));
        obs.push(datagram(t + 25_000_000, 1, 3, ka, ka_gw, 0x9000 + 2 * k));
        obs.push(datagram(t + 30_000_000, 1, 3, ka_gw, ka, 0x9001 + 2 * k));
        obs.push(datagram(t + 55_000_000, 1, 1, ka_gw, ka, 0x9001 + 2 * k));
    }
    // The stragglers on path 0, 3 s after the end, 10 ms apart.
    for j in 0..stragglers {
        let send = end + 3_000_000_000 + j * 10_000_000;
        obs.push(datagram(send, 0, 0, tbox[0], gw, 0x7000 + j));
        obs.push(datagram(send + 30_000_000, 0, 2, tbox[0], gw, 0x7000 + j));
    }
    let mut e = engine(Config::default());
    for o in sorted(obs) {
        e.handle(o);
    }
    let s = e.finish(end + 8_000_000_000);
    s.outages
}

#[test]
fn a_few_late_messages_on_one_path_at_the_end_of_a_run_are_no_outage_of_the_other() {
    // Two stragglers while path 1 idles between keep-alives: no outage (was one of ~1 s).
    assert!(run_end(2).is_empty(), "{:#?}", run_end(2));
    // Steady new traffic on path 0 while path 1 carries none: path 1 stopped carrying copies.
    let outages = run_end(40);
    assert_eq!(outages.len(), 1, "{outages:#?}");
    assert_eq!(outages[0].path, "eth1");
}
