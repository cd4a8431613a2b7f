//! Writes a synthetic two-path capture as tboxscope JSON Lines, with exactly known content:
//! a message flow dual-sent on eth0 (4G) and eth1 (5G) at a given rate, a 5 s outage of eth1,
//! TCP/KCP/QUIC head-of-line incidents, a TCP socket going through an RTO backoff ladder
//! (204 → 408 → 816 ms) and a fast retransmit, and a ring-buffer drop. Used for the UI's
//! snapshot tests (the checked-in fixture) and its CPU benchmark.
//!
//! `cargo run -p tboxscope --example synth_capture -- OUT.jsonl [MSG_PER_S] [SECONDS]`
use std::io::BufWriter;

use probe_user::capture::records::{
    CongStateRecord, CwndRecord, DropsRecord, Endpoints, Record, RetransmitRecord, RtoRecord,
    SockFields,
};
use probe_user::output::JsonLinesWriter;
use probe_user::source::ebpf::event::{CaState, SocketState};
use probe_user::source::ebpf::{KernelDrops, RetransmitKind, SkippedByKernel};
use serde_json::json;
use tboxscope_engine::record::{
    CopyRecord, Evidence, HolIncident, HolProtocol, MessageRecord, OutageRecord, Recovery,
    WindowRecord,
};
use tboxscope_engine::snapshot::Percentiles;

const BASE: u64 = 1_796_000_400_000_000_000; // 2026-11-30T01:00:00Z
const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    /// Latency around `base_us` with a tail.
    fn latency(&mut self, base_us: u64) -> u64 {
        let r = self.next() % 1000;
        let jitter = self.next() % (base_us / 2);
        if r >= 995 {
            base_us * 4 + jitter
        } else if r >= 950 {
            base_us * 2 + jitter
        } else {
            base_us + jitter
        }
    }
}

fn pct(mut v: Vec<u64>) -> Percentiles {
    if v.is_empty() {
        return Percentiles::default();
    }
    v.sort_unstable();
    let at = |q: f64| v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1];
    Percentiles {
        count: v.len() as u64,
        min_us: v[0],
        p50_us: at(0.5),
        p90_us: at(0.9),
        p99_us: at(0.99),
        p999_us: at(0.999),
        max_us: v[v.len() - 1],
        mean_us: v.iter().sum::<u64>() as f64 / v.len() as f64,
    }
}

/// The socket's figures in one TCP record; what the scenario leaves unset is 0 (no RTO).
#[derive(Clone, Copy, Default)]
struct Figures {
    rto_ms: Option<u64>,
    backoff: u8,
    cwnd: u32,
    ssthresh: u32,
    srtt_us: u32,
}

/// What a TCP record is, besides the socket's state.
enum Tcp {
    Cwnd,
    Rto { timeout: u32 },
    Retransmit { kind: RetransmitKind, seq: u32 },
    Cong { from: CaState, to: CaState },
}

/// Writes one `tcp_*` record as `capture --json` does, with the path the socket is on.
fn tcp(
    w: &mut JsonLinesWriter<impl std::io::Write>,
    ts: u64,
    what: Tcp,
    ca_state: CaState,
    f: Figures,
) -> anyhow::Result<()> {
    // The kernel's retransmission total at `ts` (the scenario's four retransmissions).
    let rel = ts.saturating_sub(BASE);
    let total = [3_204 * MS, 3_612 * MS, 4_428 * MS, 9 * S + MS]
        .iter()
        .filter(|at| rel >= **at)
        .count();
    let ends = Endpoints {
        conn: 1,
        src: "10.0.0.2:40000".into(),
        dst: "198.51.100.1:443".into(),
    };
    let sock = SockFields {
        rto_ms: f.rto_ms,
        backoff: f.backoff,
        retransmits: f.backoff,
        total_retrans: u32::try_from(total)?,
        cwnd: f.cwnd,
        ssthresh: f.ssthresh,
        srtt_us: f.srtt_us,
        packets_out: 0,
        lost_out: 0,
        retrans_out: 0,
        ca_state,
        state: SocketState::Established,
        congestion_control: "cubic".parse().ok(),
    };
    let record = match what {
        Tcp::Cwnd => Record::Cwnd(CwndRecord { ends, sock }),
        Tcp::Rto { timeout } => Record::Rto(RtoRecord {
            source: tboxscope_engine::TcpSource::Kernel,
            ends,
            timeout,
            sock,
        }),
        Tcp::Retransmit { kind, seq } => Record::Retransmit(RetransmitRecord {
            source: tboxscope_engine::TcpSource::Kernel,
            ends,
            kind,
            segs: Some(1),
            err: 0,
            seq: Some(seq),
            len: None,
            sock,
        }),
        Tcp::Cong { from, to } => Record::CongState(CongStateRecord {
            ends,
            from,
            to,
            seen_late: false,
            sock,
        }),
    };
    let line = OnPath {
        record: &record,
        path: "eth0",
    };
    w.write(record.type_name(), ts, &line)?;
    Ok(())
}

/// A kernel TCP record with the path its socket's traffic takes, as replay reads it.
#[derive(serde::Serialize)]
struct OnPath<'a> {
    #[serde(flatten)]
    record: &'a Record,
    path: &'a str,
}

/// Per message of the current window: eth0 latency, eth1 latency if carried, combined, winner.
type WindowEntry = (u64, Option<u64>, u64, String);

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let Some(out) = args.get(1) else {
        anyhow::bail!("usage: synth_capture OUT.jsonl [MSG_PER_S] [SECONDS]");
    };
    let rate: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(50);
    let seconds: u64 = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(16);
    let file = BufWriter::new(std::fs::File::create(out)?);
    let mut w = JsonLinesWriter::new(file, BASE, &json!({"command": "synth_capture"}))?;
    let mut rng = Lcg(7);
    let interval = S / rate.max(1);
    let outage = (BASE + 6 * S, BASE + 11 * S);
    let mut window: Vec<WindowEntry> = Vec::new();
    let mut next_window = BASE + S;
    let mut tcp_next = BASE;
    let mut cwnd = 10u32;
    let mut ssthresh = u32::MAX >> 1;
    let end = BASE + seconds * S;
    let mut t = BASE;
    let mut sn = 0u64;
    while t < end {
        // TCP socket samples every 250 ms, and its loss episodes.
        while tcp_next <= t {
            let rel = tcp_next - BASE;
            if rel == 3 * S {
                ssthresh = cwnd / 2;
                cwnd = 1;
                tcp(
                    &mut w,
                    tcp_next + 204 * MS,
                    Tcp::Cong {
                        from: CaState::Open,
                        to: CaState::Loss,
                    },
                    CaState::Open,
                    Figures::default(),
                )?;
                for (i, (at, rto)) in [(204u64, 204u64), (612, 408), (1428, 816)]
                    .into_iter()
                    .enumerate()
                {
                    let ts = tcp_next + at * MS;
                    let figures = Figures {
                        rto_ms: Some(rto),
                        backoff: u8::try_from(i)?,
                        cwnd: 1,
                        ssthresh,
                        srtt_us: 52000,
                    };
                    let timeout = u32::try_from(i + 1)?;
                    tcp(&mut w, ts, Tcp::Rto { timeout }, CaState::Loss, figures)?;
                    let kind = RetransmitKind::Rto;
                    let seq = 1000;
                    tcp(
                        &mut w,
                        ts,
                        Tcp::Retransmit { kind, seq },
                        CaState::Loss,
                        figures,
                    )?;
                }
                tcp(
                    &mut w,
                    tcp_next + 1480 * MS,
                    Tcp::Cong {
                        from: CaState::Loss,
                        to: CaState::Open,
                    },
                    CaState::Loss,
                    Figures {
                        cwnd: 2,
                        ssthresh,
                        ..Figures::default()
                    },
                )?;
            } else if rel == 9 * S {
                ssthresh = cwnd * 7 / 10;
                cwnd = ssthresh;
                let figures = Figures {
                    cwnd,
                    ssthresh,
                    ..Figures::default()
                };
                tcp(
                    &mut w,
                    tcp_next,
                    Tcp::Cong {
                        from: CaState::Open,
                        to: CaState::Recovery,
                    },
                    CaState::Open,
                    figures,
                )?;
                tcp(
                    &mut w,
                    tcp_next + MS,
                    Tcp::Retransmit {
                        kind: RetransmitKind::Fast,
                        seq: 91000,
                    },
                    CaState::Recovery,
                    Figures {
                        rto_ms: Some(204),
                        backoff: 0,
                        srtt_us: 50000,
                        ..figures
                    },
                )?;
                tcp(
                    &mut w,
                    tcp_next + 60 * MS,
                    Tcp::Cong {
                        from: CaState::Recovery,
                        to: CaState::Open,
                    },
                    CaState::Recovery,
                    figures,
                )?;
            } else if !(3 * S..3 * S + 1500 * MS).contains(&rel) {
                cwnd = (cwnd + 2).min(60);
            }
            let srtt_us = 50000 + u32::try_from(rng.next() % 4000)?;
            let in_loss = (3 * S + 204 * MS..3 * S + 1480 * MS).contains(&rel);
            let ca = if in_loss {
                CaState::Loss
            } else {
                CaState::Open
            };
            tcp(
                &mut w,
                tcp_next,
                Tcp::Cwnd,
                ca,
                Figures {
                    rto_ms: Some(204),
                    backoff: 0,
                    cwnd,
                    ssthresh,
                    srtt_us,
                },
            )?;
            tcp_next += 250 * MS;
        }
        if rate <= 1000 && t == BASE + 10 * S {
            let drops = DropsRecord {
                kernel: KernelDrops {
                    ring_full: 3,
                    read_failed: 0,
                    skipped_by_kernel: SkippedByKernel::default(),
                },
                decode_rejected: 0,
                evicted: 0,
                unrecorded_retrans: 0,
                unrecorded_cong_changes: 0,
            };
            w.write("drops", t, &drops)?;
        }
        // One message dual-sent on both paths.
        let in_outage = (outage.0..outage.1).contains(&t);
        let retx = sn % 97 == 41;
        let mut copies = Vec::new();
        let l0 = rng.latency(38_000) + if retx { 204_000 } else { 0 };
        copies.push(CopyRecord {
            path: "eth0".into(),
            sent: Some(t),
            arrived: Some(t + l0 * 1000),
            latency_us: Some(l0),
            transmissions: if retx { 2 } else { 1 },
        });
        let l1 = rng.latency(24_000);
        if !in_outage {
            copies.push(CopyRecord {
                path: "eth1".into(),
                sent: Some(t + 200_000),
                arrived: Some(t + 200_000 + l1 * 1000),
                latency_us: Some(l1),
                transmissions: 1,
            });
        }
        // eth1's copy leaves 200 µs after eth0's.
        let eth1_first = !in_outage && 200 + l1 < l0;
        let latency = if eth1_first { 200 + l1 } else { l0 };
        let winner = if eth1_first { "eth1" } else { "eth0" }.to_owned();
        window.push((l0, (!in_outage).then_some(l1), latency, winner.clone()));
        w.write(
            "message",
            t,
            &MessageRecord {
                id: format!("sn {sn}"),
                flow: "kcp conv 7".into(),
                first_seen_ns: t,
                bytes: 600,
                copies,
                winner: Some(winner),
                latency_us: Some(latency),
                ..MessageRecord::default()
            },
        )?;
        sn += 1;
        t += interval;
        if t >= next_window {
            let eth0: Vec<u64> = window.iter().map(|m| m.0).collect();
            let eth1: Vec<u64> = window.iter().filter_map(|m| m.1).collect();
            let combined: Vec<u64> = window.iter().map(|m| m.2).collect();
            let n = window.len() as u64;
            let both = window.iter().filter(|m| m.1.is_some()).count() as u64;
            let wins0 = window.iter().filter(|m| m.3 == "eth0").count() as f64 / n as f64;
            w.write(
                "window",
                next_window,
                &WindowRecord {
                    start_ns: next_window - S,
                    end_ns: next_window,
                    per_path: vec![("eth0".into(), pct(eth0)), ("eth1".into(), pct(eth1))],
                    combined: pct(combined),
                    messages: n,
                    on_all_paths: both,
                    duplication: both as f64 / n as f64,
                    win_rates: vec![("eth0".into(), wins0), ("eth1".into(), 1.0 - wins0)],
                    amplification: 2.0 + 0.08 * (1.0 - both as f64 / n as f64) + 0.12,
                },
            )?;
            window.clear();
            next_window += S;
        }
        if t >= outage.1 && t < outage.1 + interval {
            w.write(
                "outage",
                outage.1,
                &OutageRecord {
                    id: 1,
                    path: "eth1".into(),
                    start_ns: outage.0,
                    end_ns: Some(outage.1),
                    duration_ns: outage.1 - outage.0,
                    evidence: "no arrivals at the far end".into(),
                    carried_by_others: 5 * rate,
                    lost: 0,
                },
            )?;
        }
    }
    let ev = |ts: u64, what: &str| Evidence {
        ts_ns: ts,
        path: "eth0".into(),
        what: what.into(),
    };
    let s = BASE + 3 * S;
    let incidents = [
        HolIncident {
            id: 1,
            protocol: HolProtocol::Tcp,
            flow: "tcp 10.0.0.2:40000 → 198.51.100.1:443".into(),
            missing: "seq 1000".into(),
            start_ns: s,
            end_ns: Some(s + 1480 * MS),
            stall_ns: 1480 * MS,
            recovery: Recovery::Timeout,
            backoff: 2,
            timeout_retransmits: 3,
            bytes_held: 7200,
            messages_held: 12,
            evidence: vec![
                ev(s, "seq 1000 sent (1448 B), lost"),
                ev(
                    s + 204 * MS,
                    "retransmit seq 1000 (rto, backoff 0, RTO 204ms)",
                ),
                ev(
                    s + 612 * MS,
                    "retransmit seq 1000 (rto, backoff 1, RTO 408ms)",
                ),
                ev(
                    s + 1428 * MS,
                    "retransmit seq 1000 (rto, backoff 2, RTO 816ms)",
                ),
                ev(s + 1480 * MS, "ACK 2448 arrives: gap filled"),
            ],
            ..HolIncident::default()
        },
        HolIncident {
            id: 2,
            protocol: HolProtocol::Kcp,
            flow: "kcp conv 7".into(),
            missing: "sn 642".into(),
            start_ns: BASE + 13 * S,
            end_ns: Some(BASE + 13 * S + 45 * MS),
            stall_ns: 45 * MS,
            recovery: Recovery::Fast,
            fast_retransmits: 1,
            bytes_held: 1200,
            messages_held: 2,
            evidence: vec![
                ev(BASE + 13 * S + 20 * MS, "fast resend sn 642"),
                ev(BASE + 13 * S + 45 * MS, "sn 642 arrived"),
            ],
            ..HolIncident::default()
        },
        HolIncident {
            id: 3,
            protocol: HolProtocol::Quic,
            flow: "quic 5f1c9a".into(),
            stream: Some(4),
            missing: "offset 1200".into(),
            start_ns: BASE + 15 * S,
            end_ns: Some(BASE + 15 * S + 30 * MS),
            stall_ns: 30 * MS,
            recovery: Recovery::OtherPath,
            bytes_held: 600,
            messages_held: 1,
            streams_not_held: vec![0, 8],
            evidence: vec![ev(BASE + 15 * S + 30 * MS, "offset 1200 arrived on eth1")],
            ..HolIncident::default()
        },
    ];
    for h in incidents {
        let ts = h.end_ns.unwrap_or(h.start_ns);
        if h.start_ns < end {
            w.write("hol_incident", ts, &h)?;
        }
    }
    w.flush()?;
    Ok(())
}
