//! As root: real kernel TCP through a router namespace that loses data on its way to the
//! receiver (3 % dropped by nftables in the forward hook, and a 20 Mbit/s token bucket's
//! queue that the bulk sender fills and overflows), tcpdump before the loss (the sender's
//! veth) and after it (the receiver's veth). At the receiver's capture the original of a lost
//! segment was never seen, so its resend is the first copy there: `tboxscope analyze` of that
//! capture alone must still call it a retransmission — its TSval or its TSecr is newer than
//! that of the first segment seen above it, which a reordered original's never is — except
//! when the two left within one tick of both clocks (counted by the oracle: a round trip
//! through the idle path, rare); with timestamps off it cannot know and says out of order.
//! The oracle is the sender's capture: a packet there is a resend when its sequence was sent
//! before, and the resends that reached the receiver are found in its capture by (sequence,
//! length, TSval, TSecr).
//!
//! The two captures given together pair by the segments both saw (no `--framing`), and the
//! receiver's capture alone, with nothing stated, is placed at the server's end by its TTLs
//! (the server's packets leave at 64, the client's arrive through the router at 63): the same
//! HOL stalls, from the receiver's arrivals, each said to be filled by a resend. So does the
//! receiver's capture begun mid-connection (its first third cut off: no handshake), for the
//! holes after its start, also when it begins with a segment past a hole.
#![expect(clippy::unwrap_used)] // test helpers outside #[test] fns
#[expect(dead_code, reason = "each test uses some of the shared helpers")]
mod tcp_common;

use std::collections::HashSet;
use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use tcp_common::{
    analyze_json, connect_from, epoch_ns, sh, spawn_receiver, stalls_end_as_the_receiver_acks,
    tshark_fields, wire_direction, Routed, Tcpdump,
};

/// A data packet: (raw sequence, length, (TSval, TSecr) or zeros).
type Data = (u32, u32, (u32, u32));

/// The data packets to `port` in `pcap`, in order.
fn data_packets(pcap: &Path, port: u16) -> Vec<Data> {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(pcap)
        .args(["-Y", &format!("tcp.dstport == {port} && tcp.len > 0")])
        .args(["-T", "fields", "-e", "tcp.seq_raw", "-e", "tcp.len"])
        .args(["-e", "tcp.options.timestamp.tsval"])
        .args(["-e", "tcp.options.timestamp.tsecr"])
        .output()
        .expect("tshark runs (cargo xtask setup installs it)");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let f: Vec<u32> = l.split('\t').map(|x| x.parse().unwrap_or(0)).collect();
            let field = |i: usize| f.get(i).copied().unwrap_or(0);
            (f[0], f[1], (field(2), field(3)))
        })
        .collect()
}

/// `seq` relative to the first packet's `first`: negative below it (at a capture after the
/// loss, the first packet seen may be the second sent, its predecessor's resend comes later).
fn offset(seq: u32, first: u32) -> i64 {
    i64::from(seq.wrapping_sub(first) as i32)
}

/// Packets of `packets` (in order) whose sequence starts below the highest seen before them:
/// every resend and reordered original, as the capture shows them.
fn below_highest(packets: &[Data]) -> u64 {
    below_highest_where(packets, |_| true)
}

/// [`below_highest`] of the packets `pick` chooses (all of them still raise the highest).
fn below_highest_where(packets: &[Data], pick: impl Fn(&Data) -> bool) -> u64 {
    let Some(&(first, _, _)) = packets.first() else {
        return 0;
    };
    let mut high = i64::MIN;
    let mut n = 0;
    for p @ &(seq, len, _) in packets {
        let start = offset(seq, first);
        n += u64::from(start < high && pick(p));
        high = high.max(start + i64::from(len));
    }
    n
}

/// The resends in the sender's capture (a packet whose sequence was sent before), by
/// (sequence, length, TSval).
fn resends(sent: &[Data]) -> HashSet<Data> {
    let mut out = HashSet::new();
    let Some(&(isn, _, _)) = sent.first() else {
        return out;
    };
    let mut high = 0u64;
    for &(seq, len, ts) in sent {
        let start = u64::from(seq.wrapping_sub(isn));
        if start < high {
            out.insert((seq, len, ts));
        }
        high = high.max(start + u64::from(len));
    }
    out
}

/// Of the resends in `arrived` (a capture's data packets, in order) that are the first copy
/// of their bytes there, those whose TSval and TSecr are both not newer than the first
/// segment seen above them: sent within the same tick of both clocks, they cannot be told
/// from a reordered original.
fn same_tick_resends(arrived: &[Data], resent: &HashSet<Data>) -> u64 {
    let Some(&(first, _, _)) = arrived.first() else {
        return 0;
    };
    // Start → (end, TSval of the first copy), relative to the first packet.
    let mut seen: std::collections::BTreeMap<i64, (i64, (u32, u32))> = Default::default();
    let newer = |a: u32, b: u32| (a.wrapping_sub(b) as i32) > 0;
    let mut n = 0;
    for p @ &(seq, len, ts) in arrived {
        let start = offset(seq, first);
        let end = start + i64::from(len);
        let overlaps = seen
            .range(..end)
            .next_back()
            .is_some_and(|(_, &(e, _))| e > start);
        if resent.contains(p) && !overlaps {
            let above = seen.range(end..).next().map(|(_, &(_, v))| v);
            if above.is_some_and(|(v, e)| !newer(ts.0, v) && !newer(ts.1, e)) {
                n += 1;
            }
        }
        seen.entry(start).or_insert((end, ts));
    }
    n
}

/// `tboxscope analyze --json` of `pcap`: (retransmissions, out-of-order first copies) of the
/// data sent from `local`.
fn analyze(pcap: &Path, local: &str) -> (u64, u64) {
    let lines = analyze_json(&[pcap]);
    let retransmissions = lines
        .iter()
        .filter(|r| r["type"] == "tcp_retransmit" && r["source"] == "wire" && r["src"] == local)
        .count() as u64;
    let out_of_order = wire_direction(&lines, local)
        .and_then(|d| d["out_of_order"].as_u64())
        .unwrap_or(0);
    (retransmissions, out_of_order)
}

/// The wire's HOL incidents among `lines`: (stall_from, recovery, missing, start_ns) of each.
fn stalls(lines: &[serde_json::Value]) -> Vec<(String, String, String, u64)> {
    lines
        .iter()
        .filter(|r| r["type"] == "hol_incident" && r["source"] == "wire")
        .map(|r| {
            let text = |k: &str| r[k].as_str().unwrap_or_default().to_owned();
            let start = r["start_ns"].as_u64().unwrap_or(0);
            (text("stall_from"), text("recovery"), text("missing"), start)
        })
        .collect()
}

/// The amplification of the one TCP flow in `lines`' summary.
fn amplification(lines: &[serde_json::Value]) -> f64 {
    lines
        .iter()
        .filter(|r| r["type"] == "summary")
        .flat_map(|r| r["flows"].as_array().cloned().unwrap_or_default())
        .find_map(|f| f["amplification"].as_f64())
        .unwrap()
}

/// Both captures together, and the receiver's alone (placed at the server's end by its TTLs):
/// the stalls the receiver's arrivals show, each filled by a resend of the kind the sender
/// used.
fn stalls_at_the_receiver(
    (sender_pcap, receiver_pcap): (&Path, &Path),
    timestamps: bool,
    (arrived, reordered, receiver_ooo): (u64, u64, u64),
    line: &str,
) {
    let (sender, receiver) = (
        sender_pcap.to_str().unwrap(),
        receiver_pcap.to_str().unwrap(),
    );
    // They pair by the segments both saw (no `--framing` needed), and the wire is counted
    // once: the amplification is the sender's capture's.
    let both_lines = analyze_json(&[sender, receiver]);
    let summary = both_lines.iter().find(|r| r["type"] == "summary").unwrap();
    let inferences = summary["health"]["inferences"].to_string();
    // Each placed by its own TTLs before they pair.
    let label = |p: &Path| p.file_stem().unwrap().to_str().unwrap().to_owned();
    assert!(
        inferences.contains("show the same path at its two ends")
            && inferences.contains(&format!(
                "`{}` is on the T-Box: at the client's end",
                label(sender_pcap)
            ))
            && inferences.contains(&format!(
                "`{}` is on the gateway: at the server's end",
                label(receiver_pcap)
            )),
        "{line}; {inferences}"
    );
    let (amp_both, amp_sender) = (
        amplification(&both_lines),
        amplification(&analyze_json(&[sender])),
    );
    assert!(
        (amp_both / amp_sender - 1.0).abs() < 0.02,
        "{line}; amplification {amp_both} with both, {amp_sender} at the sender"
    );
    let alone_lines = analyze_json(&[receiver]);
    placed_at_the_server(&alone_lines, receiver_pcap, line);
    let (both, alone) = (stalls(&both_lines), stalls(&alone_lines));
    let why = format!("{line}; stalls with both captures {both:?}, at the receiver {alone:?}");
    assert!(!both.is_empty(), "{why}");
    assert!(both.len() as u64 <= arrived + reordered, "{why}");
    // The same stalls, but for those in the first segments: the captures pair on the third
    // segment both saw, and until then the receiver's arrivals are not told from sends (CI
    // once: 152 alone, 151 with both).
    let holes = |v: &[(String, String, String, u64)]| {
        v.iter()
            .map(|s| s.2.clone())
            .collect::<std::collections::BTreeSet<_>>()
    };
    let first_paired = both.iter().map(|s| s.3).min().unwrap_or(0);
    let only_alone: Vec<_> = holes(&alone).difference(&holes(&both)).cloned().collect();
    assert!(holes(&both).is_subset(&holes(&alone)), "{why}");
    assert!(
        alone
            .iter()
            .filter(|s| only_alone.contains(&s.2))
            .all(|s| s.3 < first_paired),
        "{why}; only at the receiver alone: {only_alone:?}"
    );
    assert!(only_alone.len() <= 2, "{why}");
    assert!(
        both.iter()
            .chain(&alone)
            .all(|s| s.0 == "receiver_arrivals"),
        "{why}"
    );
    let resent = |r: &str| r == "fast" || r == "timeout";
    // With both ends the sender's capture names every fill; at the receiver alone its own
    // classification does, but for the fills it could not tell from reordered originals
    // (without timestamps, all of them).
    let odd: Vec<_> = both.iter().filter(|s| !resent(&s.1)).collect();
    assert!(
        odd.is_empty(),
        "{why}; {}",
        odd_stalls(&odd, &both_lines, (sender_pcap, receiver_pcap))
    );
    let unknown = alone.iter().filter(|s| !resent(&s.1)).count() as u64;
    if timestamps {
        assert!(unknown <= receiver_ooo, "{why}");
    }
    begun_mid_connection(receiver_pcap, &alone_lines, line);
}

/// What a failure needs to be understood from its log alone (the captures are gone with the
/// test's directory): each stall of `odd` as written, and the segments of its missing
/// sequence number at both captures.
fn odd_stalls(
    odd: &[&(String, String, String, u64)],
    lines: &[serde_json::Value],
    (sender_pcap, receiver_pcap): (&Path, &Path),
) -> String {
    let mut text = String::new();
    for (_, _, missing, start) in odd {
        if let Some(r) = lines
            .iter()
            .find(|r| r["type"] == "hol_incident" && r["start_ns"].as_u64() == Some(*start))
        {
            text.push_str(&format!("\nstall: {r}"));
        }
        let seq = missing.trim_start_matches("seq ");
        // Its copies, and the first ACKs taking it (raw numbers: a wrap would only lose them).
        let filters = [
            (format!("tcp.seq_raw == {seq} && tcp.len > 0"), 10),
            (format!("tcp.ack_raw > {seq} && tcp.len == 0"), 2),
        ];
        for pcap in [sender_pcap, receiver_pcap] {
            text.push_str(&format!("\n{}:", pcap.display()));
            for (filter, rows) in &filters {
                let fields = [
                    "frame.number",
                    "frame.time_epoch",
                    "tcp.srcport",
                    "tcp.seq_raw",
                    "tcp.ack_raw",
                    "tcp.len",
                    "tcp.options.sack_le",
                    "tcp.options.sack_re",
                    "tcp.options.timestamp.tsval",
                    "tcp.analysis.flags",
                ];
                for r in tshark_fields(pcap, filter, &fields).iter().take(*rows) {
                    text.push_str(&format!("\n  {}", r.join(" ")));
                }
            }
        }
    }
    text
}

/// `lines` (of `pcap` analysed alone) say it is at the server's end, told by the TTLs.
fn placed_at_the_server(lines: &[serde_json::Value], pcap: &Path, line: &str) {
    let label = pcap.file_stem().unwrap().to_str().unwrap();
    let summary = lines.iter().find(|r| r["type"] == "summary").unwrap();
    let said = summary["health"]["inferences"].to_string();
    assert!(
        said.contains(&format!("`{label}` is on the gateway: at the server's end"))
            && said.contains("the client's packets have TTL 63, the server's 64"),
        "{line}; {said}"
    );
}

/// The receiver's capture begun mid-connection (no handshake, the connection under way: the
/// client told by its higher port), analysed alone, cut twice: from a third of its frames on,
/// and from the first segment after that which arrived past a hole and opened one of the
/// whole capture's stalls, with none under way (the hole lost before the cut: only the
/// receiver's ACK says it is there). Each is placed at the server's end by its TTLs, with the stalls the whole capture
/// (`whole_lines`) has after its start, from the same arrivals — once a stall under way when
/// it begins is over (seen from its middle, its holes are stalls of their own); the second
/// also with the stall its first segment opened.
fn begun_mid_connection(receiver_pcap: &Path, whole_lines: &[serde_json::Value], line: &str) {
    let frames = Command::new("capinfos")
        .args(["-M", "-c", "-T", "-r"])
        .arg(receiver_pcap)
        .output()
        .expect("capinfos runs (it comes with tshark)");
    let frames: usize = String::from_utf8_lossy(&frames.stdout)
        .split_whitespace()
        .last()
        .and_then(|n| n.parse().ok())
        .unwrap();
    let whole = stalls(whole_lines);
    // Whether a stall of the whole capture was under way at `ns` (begun before, not over).
    let under_way = |ns: u64| {
        whole_lines.iter().any(|r| {
            r["type"] == "hol_incident"
                && r["start_ns"].as_u64().is_some_and(|s| s < ns)
                && r["end_ns"].as_u64().is_none_or(|e| e >= ns)
        })
    };
    // The first frame past a third in that arrived past a hole and opened a stall, none
    // under way (inside one, the receiver's ACKs show the older hole).
    let past_hole = tshark_fields(
        receiver_pcap,
        &format!("frame.number > {} && tcp.analysis.lost_segment", frames / 3),
        &["frame.number", "frame.time_epoch"],
    )
    .into_iter()
    .map(|r| (r[0].parse::<usize>().unwrap(), epoch_ns(&r[1])))
    .find(|&(_, ns)| whole.iter().any(|s| s.3 == ns) && !under_way(ns));
    let past_hole = past_hole.unwrap_or_else(|| {
        panic!(
            "{line}: no stall opened after frame {} {whole:?}",
            frames / 3
        )
    });
    for (cut, name) in [(frames / 3 + 1, "third"), (past_hole.0, "hole")] {
        let mid = receiver_pcap.with_file_name(format!(
            "{}-{name}.pcap",
            receiver_pcap.file_stem().unwrap().to_str().unwrap()
        ));
        sh(&[
            "editcap",
            "-r",
            receiver_pcap.to_str().unwrap(),
            mid.to_str().unwrap(),
            &format!("{cut}-{frames}"),
        ]);
        let lines = analyze_json(&[&mid]);
        placed_at_the_server(&lines, &mid, line);
        let mid_stalls = stalls(&lines);
        // The capture's start (its first frame), or the end of the whole capture's stall
        // under way then.
        let first = first_frame_ns(&mid);
        let start = whole_lines
            .iter()
            .filter(|r| r["type"] == "hol_incident" && r["start_ns"].as_u64() <= Some(first))
            .filter_map(|r| r["end_ns"].as_u64())
            .fold(first, u64::max);
        let holes = |v: &[(String, String, String, u64)]| {
            v.iter()
                .filter(|s| s.3 > start)
                .map(|s| s.2.clone())
                .collect::<std::collections::BTreeSet<_>>()
        };
        let why = format!(
            "{line}; {frames} frames, from frame {cut} analysed, compared from {start}: stalls \
             {mid_stalls:?}, of the whole capture {whole:?}"
        );
        assert!(!mid_stalls.is_empty(), "{why}");
        assert!(
            mid_stalls.iter().all(|s| s.0 == "receiver_arrivals"),
            "{why}"
        );
        assert_eq!(holes(&mid_stalls), holes(&whole), "{why}");
        if name == "hole" {
            let opened = |v: &[(String, String, String, u64)]| {
                v.iter()
                    .filter(|s| s.3 == first)
                    .map(|s| s.2.clone())
                    .collect::<Vec<_>>()
            };
            assert_eq!(opened(&mid_stalls), opened(&whole), "{why}");
        }
    }
}

/// The capture time of `pcap`'s first frame, Unix epoch ns.
fn first_frame_ns(pcap: &Path) -> u64 {
    let rows = tshark_fields(pcap, "frame.number == 1", &["frame.time_epoch"]);
    epoch_ns(&rows[0][0])
}

fn case(chain: &Routed, port: u16, timestamps: bool, dir: &Path) -> String {
    // The client's port above the server's, as a server's well-known one usually is: a
    // capture begun mid-connection tells the client by it.
    chain.sysctl("net.ipv4.ip_local_port_range", "55000 60999");
    chain.sysctl(
        "net.ipv4.tcp_timestamps",
        if timestamps { "1" } else { "0" },
    );
    let server = SocketAddr::new(chain.server.ip(), port);
    let name = if timestamps { "ts" } else { "no-ts" };
    let sender_pcap = dir.join(format!("{name}-sender.pcap"));
    let receiver_pcap = dir.join(format!("{name}-receiver.pcap"));
    let sender_dump = Tcpdump::start(&chain.a, &chain.dev_a, port, &sender_pcap);
    let receiver_dump = Tcpdump::start(&chain.b, &chain.dev_b, port, &receiver_pcap);
    let receiver = spawn_receiver(&chain.b, server);
    let mut s = connect_from(&chain.a, server);
    let local = s.local_addr().unwrap().to_string();
    let chunk = vec![0x5au8; 64 * 1024];
    for _ in 0..48 {
        s.write_all(&chunk).unwrap();
    }
    drop(s);
    let received = receiver.join().unwrap();
    assert_eq!(received, 48 * 64 * 1024);
    std::thread::sleep(Duration::from_millis(300));
    drop(sender_dump);
    drop(receiver_dump);

    for pcap in [&sender_pcap, &receiver_pcap] {
        let log = std::fs::read_to_string(pcap.with_extension("log")).unwrap_or_default();
        assert!(
            log.lines()
                .any(|l| l.trim() == "0 packets dropped by kernel"),
            "tcpdump lost packets: {log}"
        );
    }
    let at_sender = data_packets(&sender_pcap, port);
    let at_receiver = data_packets(&receiver_pcap, port);
    let resent = resends(&at_sender);
    // Resends that reached the receiver below the highest sequence it had seen (one that
    // arrives as the next in sequence — a lost tail's — is new data there, and rightly so).
    let arrived = below_highest_where(&at_receiver, |p| resent.contains(p));
    // Originals that the path itself reordered (rare: the veths' packets may be handled on
    // either core) reach the receiver below the highest sequence too: out of order there.
    let reordered = below_highest_where(&at_receiver, |p| !resent.contains(p));
    let lost = at_sender.len() - at_receiver.len();
    let (sender_rtx, sender_ooo) = analyze(&sender_pcap, &local);
    let (receiver_rtx, receiver_ooo) = analyze(&receiver_pcap, &local);
    let line = format!(
        "{name}: {} packets sent, {lost} lost on the way; resends at the sender {} \
         (tboxscope {sender_rtx}, out of order {sender_ooo}), reaching the receiver {arrived}, \
         originals reordered on the way {reordered} (tboxscope at the receiver: {receiver_rtx} \
         retransmissions, {receiver_ooo} out of order)",
        at_sender.len(),
        resent.len(),
    );
    eprintln!("{line}");
    if let Ok(keep) = std::env::var("TBX_KEEP_PCAP") {
        for (f, side) in [(&sender_pcap, "sender"), (&receiver_pcap, "receiver")] {
            std::fs::copy(f, format!("{keep}.{name}-{side}.pcap")).unwrap();
        }
    }
    assert!(lost > 10 && arrived > 10, "{line}");
    // The sender's capture sees every transmission: its resends are the retransmissions.
    assert_eq!(
        (sender_rtx, sender_ooo),
        (below_highest(&at_sender), 0),
        "{line}"
    );
    if timestamps {
        // Every resend is one, but for those sent in the same millisecond tick of both
        // clocks as the first segment seen above them (a round trip through the idle path,
        // under a tick: the first window, or after a timeout): their timestamps cannot tell,
        // they may go either way. By the sender's TSval alone CI once had 4 of 66 such; by
        // both clocks, 0 to 1 of 160 to 410 in 8 runs here. At most a tenth, or the test
        // would check little.
        let ambiguous = same_tick_resends(&at_receiver, &resent);
        let why = format!("{line}; {ambiguous} resends in the same tick as the data above them");
        assert_eq!(receiver_rtx + receiver_ooo, arrived + reordered, "{why}");
        assert!(receiver_ooo <= ambiguous + reordered, "{why}");
        assert!(ambiguous * 10 <= arrived, "{why}");
    } else {
        // Without timestamps a first copy below the highest sequence seen is a reordered
        // original or a resend of a segment lost upstream: counted out of order, and resends
        // of segments that had reached the capture are still retransmissions. (Without
        // TSvals a resend cannot be told from its original by its bytes: counted by sequence.)
        assert_eq!(
            receiver_rtx + receiver_ooo,
            below_highest(&at_receiver),
            "{line}"
        );
        assert!(receiver_ooo > 0, "{line}");
    }
    stalls_at_the_receiver(
        (&sender_pcap, &receiver_pcap),
        timestamps,
        (arrived, reordered, receiver_ooo),
        &line,
    );
    stalls_end_as_the_receiver_acks(&receiver_pcap, port, &line);
    line
}

#[test]
#[ignore = "needs root"]
fn resends_after_upstream_loss_are_retransmissions_at_the_receiver() {
    let chain = Routed::new(30);
    chain.bottleneck("20mbit");
    chain.one_segment_per_packet();
    let dir = tempfile::tempdir().unwrap();
    let port = chain.server.port();
    let lines = [
        case(&chain, port, true, dir.path()),
        case(&chain, port + 1, false, dir.path()),
    ];
    eprintln!("{}", lines.join("\n"));
}
