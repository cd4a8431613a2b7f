//! The readable text report of a [`Summary`]: a headline table per protocol/flow (P50, P99,
//! P999, duplication %, amplification, outages, HOL incidents) — the table an engineer pastes
//! into an incident review — followed by paths, latency, redundancy verdicts, outages,
//! incidents and what was inferred about the captures.

use std::fmt::Write;

use crate::record::Summary;
use crate::snapshot::{LatencyKind, Percentiles};

/// Incidents listed in the report.
const MAX_INCIDENTS_LISTED: usize = 20;

fn ms(us: u64) -> String {
    format!("{:.1}", us as f64 / 1000.0)
}

fn pct_line(p: &Percentiles) -> String {
    if p.count == 0 {
        return "no samples".to_owned();
    }
    format!(
        "n={} P50 {} P90 {} P99 {} P999 {} max {} ms",
        p.count,
        ms(p.p50_us),
        ms(p.p90_us),
        ms(p.p99_us),
        ms(p.p999_us),
        ms(p.max_us)
    )
}

/// Renders the report.
pub fn render(s: &Summary) -> String {
    let mut o = String::new();
    let secs = s.end_ns.saturating_sub(s.start_ns) as f64 / 1e9;
    let _ = writeln!(o, "tboxscope report — {secs:.1} s of traffic");
    let _ = writeln!(o);
    let headers = [
        "flow", "proto", "mode", "msgs", "P50 ms", "P99 ms", "P999 ms", "dup %", "ampl", "outages",
        "HOL",
    ];
    let rows: Vec<[String; 11]> = s
        .flows
        .iter()
        .map(|f| {
            let lat = |v: u64| {
                if f.latency.count == 0 {
                    "-".to_owned()
                } else {
                    ms(v)
                }
            };
            [
                f.flow.clone(),
                f.protocol.clone(),
                f.mode.map_or("-", |m| m.name()).to_owned(),
                f.messages.to_string(),
                lat(f.latency.p50_us),
                lat(f.latency.p99_us),
                lat(f.latency.p999_us),
                if f.messages == 0 {
                    "-".to_owned()
                } else {
                    format!("{:.1}", f.duplication * 100.0)
                },
                if f.amplification > 0.0 {
                    format!("{:.2}×", f.amplification)
                } else {
                    "-".to_owned()
                },
                f.outages.to_string(),
                f.hol_incidents.to_string(),
            ]
        })
        .collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r.iter()) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| -> String {
        cells
            .iter()
            .zip(widths.iter())
            .enumerate()
            .map(|(i, (c, w))| {
                let pad = w.saturating_sub(c.chars().count());
                if i < 3 {
                    format!("{c}{}", " ".repeat(pad))
                } else {
                    format!("{}{c}", " ".repeat(pad))
                }
            })
            .collect::<Vec<_>>()
            .join("  ")
    };
    let _ = writeln!(o, "{}", line(headers.to_vec()));
    let _ = writeln!(
        o,
        "{}",
        widths
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .join("  ")
    );
    for r in &rows {
        let _ = writeln!(o, "{}", line(r.iter().map(String::as_str).collect()));
    }
    if rows.is_empty() {
        let _ = writeln!(o, "(no flows)");
    }
    let kind = match s.latency.kind {
        LatencyKind::OneWay => "one-way (first arrival − first send)",
        LatencyKind::AckRtt => "send → first acknowledgment (one end observed)",
    };
    let _ = writeln!(o);
    let _ = writeln!(o, "Latency, {kind}:");
    for (p, l) in &s.latency.per_path {
        let _ = writeln!(o, "  {p:<10} {}", pct_line(l));
    }
    let _ = writeln!(o, "  {:<10} {}", "combined", pct_line(&s.latency.combined));
    if s.latency.during_outage.count > 0 {
        let _ = writeln!(
            o,
            "  during outages: {}",
            pct_line(&s.latency.during_outage)
        );
        let _ = writeln!(
            o,
            "  outside:        {}",
            pct_line(&s.latency.outside_outage)
        );
    }
    if s.latency.request_response.count > 0 {
        let _ = writeln!(
            o,
            "  request → response: {}",
            pct_line(&s.latency.request_response)
        );
    }
    for t in &s.latency.tail {
        let _ = writeln!(
            o,
            "  P(slower than {} ms): observed {:.4}%, independent-paths prediction {:.4}%",
            ms(t.t_us),
            t.observed * 100.0,
            t.predicted * 100.0
        );
    }
    let _ = writeln!(o, "  → {}", s.latency.verdict);
    let _ = writeln!(o);
    let _ = writeln!(o, "Paths:");
    for p in &s.paths {
        let _ = writeln!(
            o,
            "  {:<10} {} packets, {} bytes, loss {:.2}%, retransmissions {:.2}%",
            p.label,
            p.packets,
            p.bytes,
            p.loss_rate * 100.0,
            p.retransmission_rate * 100.0
        );
    }
    if !s.redundancy.is_empty() {
        let _ = writeln!(o);
        let _ = writeln!(o, "Redundancy:");
        for r in &s.redundancy {
            let wins: Vec<String> = r
                .paths
                .iter()
                .map(|p| format!("{} wins {:.1}%", p.path, p.win_rate * 100.0))
                .collect();
            let _ = writeln!(o, "  {}: {}", r.flow, r.verdict);
            // Copy spacing exists only where a message had two copies.
            match (wins.is_empty(), r.copy_spacing.count) {
                (true, _) => {}
                (false, 0) => {
                    let _ = writeln!(o, "    {}", wins.join(", "));
                }
                (false, _) => {
                    let _ = writeln!(
                        o,
                        "    {}; copy spacing P50 {} ms, P99 {} ms",
                        wins.join(", "),
                        ms(r.copy_spacing.p50_us),
                        ms(r.copy_spacing.p99_us)
                    );
                }
            }
        }
    }
    let _ = writeln!(o);
    let _ = writeln!(o, "Outages: {}", s.outages_total);
    for out in &s.outages {
        let _ = writeln!(
            o,
            "  #{} {}: {:.3} s{}, {} message(s) carried only by other paths, {} lost — {}",
            out.id,
            out.path,
            out.duration_ns as f64 / 1e9,
            if out.end_ns.is_none() {
                " (still open)"
            } else {
                ""
            },
            out.carried_by_others,
            out.lost,
            out.evidence
        );
    }
    let _ = writeln!(o, "HOL incidents: {}", s.incidents_total);
    for i in s.hol_incidents.iter().rev().take(MAX_INCIDENTS_LISTED) {
        let _ = writeln!(
            o,
            "  #{} {:?} {}{}: {} stalled {:.1} ms, {} message(s)/{} bytes held, recovery {:?}{}",
            i.id,
            i.protocol,
            i.flow,
            i.stream.map_or(String::new(), |s| format!(" stream {s}")),
            i.missing,
            i.stall_ns as f64 / 1e6,
            i.messages_held,
            i.bytes_held,
            i.recovery,
            if i.backoff > 0 {
                format!(", backoff {}", i.backoff)
            } else {
                String::new()
            }
        );
    }
    if !s.health.inferences.is_empty() {
        let _ = writeln!(o);
        let _ = writeln!(o, "Captures (stated or inferred):");
        for l in &s.health.inferences {
            let _ = writeln!(o, "  {l}");
        }
    }
    let h = &s.health;
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "Health: {} observations, {} out of order, evicted: {} flows, {} messages, {} unacked packets, {} incidents; {} records dropped, {} latencies clamped",
        h.observations,
        h.out_of_order,
        h.evicted_flows,
        h.evicted_messages,
        h.evicted_unacked,
        h.evicted_incidents,
        h.dropped_records,
        h.clamped_latencies
    );
    o
}
