//! The readable text report of a [`Summary`]: a headline table per protocol/flow (P50, P99,
//! P999, duplication %, amplification, outages, HOL incidents) — the table an engineer pastes
//! into an incident review — followed by paths, latency, redundancy verdicts, outages,
//! incidents and what was inferred about the captures.

use std::fmt::Write;

use crate::record::Summary;
use crate::snapshot::{LatencyKind, Percentiles};
use crate::units;

/// Incidents listed in the report.
const MAX_INCIDENTS_LISTED: usize = 20;

/// A latency with its unit (`480 µs`, `12.3 ms`).
fn ms(us: u64) -> String {
    units::latency(us)
}

fn pct_line(p: &Percentiles) -> String {
    if p.count == 0 {
        return "no samples".to_owned();
    }
    format!(
        "n={} P50 {} P90 {} P99 {} P999 {} max {}",
        p.count,
        ms(p.p50_us),
        ms(p.p90_us),
        ms(p.p99_us),
        ms(p.p999_us),
        ms(p.max_us)
    )
}

/// An incident's flow, led by its protocol unless the flow's name already says it
/// (`kcp conv 7`, not `Kcp kcp conv 7`).
fn incident_flow(i: &crate::record::HolIncident) -> String {
    let proto = i.protocol.name();
    if i.flow.split_whitespace().next() == Some(proto) {
        i.flow.clone()
    } else {
        format!("{proto} {}", i.flow)
    }
}

/// Renders the report.
pub fn render(s: &Summary) -> String {
    let mut o = String::new();
    let secs = s.end_ns.saturating_sub(s.start_ns) as f64 / 1e9;
    let _ = writeln!(o, "tboxscope report — {secs:.1} s of traffic");
    let _ = writeln!(o);
    let headers = [
        "flow", "proto", "mode", "msgs", "P50", "P99", "P999", "dup %", "ampl", "outages", "HOL",
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
            "  P(slower than {}): observed {:.4}%, independent-paths prediction {:.4}%",
            ms(t.t_us),
            t.observed * 100.0,
            t.predicted * 100.0
        );
    }
    let _ = writeln!(o, "  → {}", s.latency.verdict);
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "Paths (messages never carried: closed messages the path did not deliver; data sends retransmitted: packets lost on the wire, or taken for lost, and sent again):"
    );
    for p in &s.paths {
        let _ = writeln!(
            o,
            "  {:<10} {} packets, {} bytes, messages never carried {:.2}%, data sends retransmitted {:.2}%",
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
                        "    {}; copy spacing P50 {}, P99 {}",
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
            "  #{} {}{}: {} stalled {}, {} message(s)/{} bytes held, recovery: {}{}",
            i.id,
            incident_flow(i),
            i.stream.map_or(String::new(), |s| format!(" stream {s}")),
            i.missing,
            units::latency_ns(i.stall_ns),
            i.messages_held,
            i.bytes_held,
            i.recovery.describe(),
            if i.backoff > 0 {
                format!(", backoff {}", i.backoff)
            } else {
                String::new()
            }
        );
    }
    tcp_wire(&mut o, &s.tcp_wire);
    tcp_join(&mut o, &s.tcp_join);
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
        "Health: {} observations, {} out of order, evicted: {} flows, {} messages, {} unacked packets, {} streams, {} incidents; {} records dropped, {} latencies clamped",
        h.observations,
        h.out_of_order,
        h.evicted_flows,
        h.evicted_messages,
        h.evicted_unacked,
        h.evicted_streams,
        h.evicted_incidents,
        h.dropped_records,
        h.clamped_latencies
    );
    if h.held_messages + h.held_too_long + h.late_copies + h.regrouped_messages > 0 {
        let _ = writeln!(
            o,
            "Messages: {} held past the timeout for an outage ({} closed at the longest wait), {} late copies, {} moved into their per-path group",
            h.held_messages, h.held_too_long, h.late_copies, h.regrouped_messages
        );
    }
    o
}

/// Directions listed in the TCP section.
const MAX_TCP_LISTED: usize = 20;

/// TCP on the wire: per connection direction, retransmissions by kind and the RTO backoff
/// ladder (timeouts per level).
fn tcp_wire(o: &mut String, t: &crate::record::TcpWireSummary) {
    if t.directions.is_empty() {
        return;
    }
    let _ = writeln!(o);
    let names: Vec<&str> = crate::record::TcpRetransmitKind::ALL
        .iter()
        .map(|k| k.as_str())
        .collect();
    let _ = writeln!(
        o,
        "TCP on the wire: {} connection(s); retransmissions per sender (kinds: {}):",
        t.connections,
        names.join(", ")
    );
    for d in t.directions.iter().take(MAX_TCP_LISTED) {
        let kinds: Vec<String> = crate::record::TcpRetransmitKind::ALL
            .iter()
            .zip(d.retransmits)
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| format!("{n} {}", k.as_str()))
            .collect();
        let ladder = if d.rto_ladder.is_empty() {
            String::new()
        } else {
            let steps: Vec<String> = d
                .rto_ladder
                .iter()
                .enumerate()
                .map(|(level, n)| format!("L{level}×{n}"))
                .collect();
            format!(
                "; RTO backoff ladder {} (longest timeout {} ms)",
                steps.join(" "),
                d.max_rto_ms
            )
        };
        let _ = writeln!(
            o,
            "  {} {} → {}: {} segments, {} retransmitted{}{}{}{}{}{}; {}",
            d.path,
            d.src,
            d.dst,
            d.segments,
            d.retransmits_total(),
            if kinds.is_empty() {
                String::new()
            } else {
                format!(" ({})", kinds.join(", "))
            },
            if d.spurious > 0 {
                format!(", {} spurious", d.spurious)
            } else {
                String::new()
            },
            if d.out_of_order > 0 {
                format!(", {} out of order (not retransmissions)", d.out_of_order)
            } else {
                String::new()
            },
            if d.unknown_history + d.window_probes > 0 {
                format!(
                    ", {} of data sent before the capture began (needed or not: unknown), {} window probes (not retransmissions)",
                    d.unknown_history, d.window_probes
                )
            } else {
                String::new()
            },
            match (d.path_mtu_signals, d.path_mtu) {
                (0, _) => String::new(),
                (n, 0) => format!(", {n} ICMP too-big signals from routers"),
                (n, m) => format!(", {n} ICMP too-big signals from routers (path MTU {m} bytes)"),
            },
            ladder,
            if d.at_receiver {
                // Data to ACK at the receiver's end is its ACK delay, not a round trip.
                format!(
                    "at the receiver: ACK delay {} ({} samples){}{}{}",
                    ms(d.srtt_us),
                    d.rtt_samples,
                    if d.sender_captured {
                        "; its retransmissions recorded at the sender's capture"
                    } else {
                        ""
                    },
                    d.not_taken_note()
                        .map(|n| format!("; {n}"))
                        .unwrap_or_default(),
                    if d.arrivals_not_judged > 0 {
                        format!(
                            "; {} arrivals not judged (resent before the receiver's ACKs could \
                             tell, or still waiting for an ACK when the capture ended)",
                            d.arrivals_not_judged
                        )
                    } else {
                        String::new()
                    }
                )
            } else {
                format!(
                    "srtt {}, RTO {} ms ({} RTT samples)",
                    ms(d.srtt_us),
                    d.rto_ms,
                    d.rtt_samples
                )
            }
        );
    }
    if t.directions.len() > MAX_TCP_LISTED {
        let _ = writeln!(o, "  … {} more", t.directions.len() - MAX_TCP_LISTED);
    }
    if t.path_mtu_unmatched > 0 {
        let _ = writeln!(
            o,
            "  {} ICMP too-big signals about segments of no connection followed",
            t.path_mtu_unmatched
        );
    }
    if t.left_to_sender > 0 {
        let _ = writeln!(
            o,
            "  {} retransmission and timeout records of data seen arriving at a capture paired with its sender's: written once, from the sender's",
            t.left_to_sender
        );
    }
    if t.evicted_connections + t.evicted_segments + t.evicted_pending > 0 {
        let _ = writeln!(
            o,
            "  evicted to stay bounded: {} connections, {} sent segments, {} verdicts given early",
            t.evicted_connections, t.evicted_segments, t.evicted_pending
        );
    }
}

/// The kernel's TCP retransmissions joined with the captures': per connection direction and
/// capture, how many each side saw, how many both, and where they disagree.
fn tcp_join(o: &mut String, j: &crate::record::TcpJoinSummary) {
    if j.directions.is_empty() && j.kernel_outside_captures == 0 {
        return;
    }
    let t = &j.totals;
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "TCP, kernel and wire together: {} kernel retransmissions, {} on the wire, {} seen by both ({} classified differently); disagreements: {} not on the wire, {} original not captured, {} not reported by the kernel",
        t.kernel,
        t.wire,
        t.matched,
        t.kinds_differ,
        t.not_on_wire,
        t.original_not_captured,
        t.not_in_kernel
    );
    for d in j.directions.iter().take(MAX_TCP_LISTED) {
        let _ = writeln!(
            o,
            "  {} {} → {}: kernel {}, wire {}, both {}{}; {} not on the wire, {} original not captured, {} not reported by the kernel",
            d.path,
            d.src,
            d.dst,
            d.kernel,
            d.wire,
            d.matched,
            if d.kinds_differ > 0 {
                format!(" ({} classified differently)", d.kinds_differ)
            } else {
                String::new()
            },
            d.not_on_wire,
            d.original_not_captured,
            d.not_in_kernel
        );
    }
    if j.directions.len() > MAX_TCP_LISTED {
        let _ = writeln!(o, "  … {} more", j.directions.len() - MAX_TCP_LISTED);
    }
    if j.kernel_outside_captures + j.wire_not_probed + j.evicted > 0 {
        let _ = writeln!(
            o,
            "  not judged: {} kernel retransmissions outside the captures, {} wire retransmissions of sockets the probes did not follow; {} forgotten to stay bounded",
            j.kernel_outside_captures, j.wire_not_probed, j.evicted
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{FlowSummary, HolIncident, HolProtocol, Recovery};
    use crate::snapshot::PathView;
    use crate::{Config, Engine};

    fn sub_millisecond() -> Percentiles {
        Percentiles {
            count: 10,
            min_us: 300,
            p50_us: 480,
            p90_us: 700,
            p99_us: 950,
            p999_us: 950,
            max_us: 1_260,
            mean_us: 500.0,
        }
    }

    /// A LAN capture's sub-millisecond latencies read in µs, not `0.5`/`0.0 ms`; milliseconds
    /// keep their unit beside each figure.
    #[test]
    fn sub_millisecond_latencies_in_microseconds() {
        let mut s = Summary::default();
        s.latency
            .per_path
            .push(("eth0".to_owned(), sub_millisecond()));
        s.flows.push(FlowSummary {
            flow: "kcp conv 7".to_owned(),
            protocol: "kcp".to_owned(),
            latency: sub_millisecond(),
            messages: 10,
            ..FlowSummary::default()
        });
        let text = render(&s);
        assert!(
            text.contains(
                "eth0       n=10 P50 480 µs P90 700 µs P99 950 µs P999 950 µs max 1.3 ms"
            ),
            "{text}"
        );
        assert!(text.contains("  480 µs  950 µs  950 µs"), "{text}");
        assert!(
            !text.contains(" 0.5 ") && !text.contains("0.0 ms"),
            "{text}"
        );
    }

    /// Incidents read in words: no `Kcp kcp conv`, no `recovery Timeout`.
    #[test]
    fn incidents_without_debug_names() {
        let mut s = Summary::default();
        s.hol_incidents.push(HolIncident {
            id: 3,
            protocol: HolProtocol::Kcp,
            flow: "kcp conv 7".to_owned(),
            missing: "sn 41".to_owned(),
            stall_ns: 700_000,
            recovery: Recovery::Timeout,
            ..HolIncident::default()
        });
        s.hol_incidents.push(HolIncident {
            id: 4,
            protocol: HolProtocol::Tcp,
            flow: "10.0.0.2:40000 → 10.0.0.1:443".to_owned(),
            missing: "seq 1000".to_owned(),
            stall_ns: 250_000_000,
            recovery: Recovery::Unknown,
            ..HolIncident::default()
        });
        let text = render(&s);
        assert!(
            text.contains("#3 kcp conv 7: sn 41 stalled 700 µs, 0 message(s)/0 bytes held, recovery: timeout retransmit"),
            "{text}"
        );
        assert!(
            text.contains("#4 tcp 10.0.0.2:40000 → 10.0.0.1:443: seq 1000 stalled 250.0 ms"),
            "{text}"
        );
        assert!(text.contains("recovery: not known"), "{text}");
        for debug in ["Kcp", "Tcp", "Timeout", "Unknown"] {
            assert!(!text.contains(debug), "{debug} in {text}");
        }
    }

    /// A path's message loss and its retransmissions on the wire are both shown, each named
    /// for what it counts (`loss 0.0%` beside `retx 65.5%` read as a contradiction).
    #[test]
    fn path_loss_says_what_it_counts() {
        let mut s = Summary::default();
        s.paths.push(PathView {
            label: "eth0".to_owned(),
            loss_rate: 0.0,
            retransmission_rate: 0.655,
            ..PathView::default()
        });
        let text = render(&s);
        assert!(
            text.contains("eth0       0 packets, 0 bytes, messages never carried 0.00%, data sends retransmitted 65.50%"),
            "{text}"
        );
        assert!(text.contains("packets lost on the wire"), "{text}");
    }

    /// A receiver's capture says what its ACKs showed of the arrivals: those not taken, and
    /// those it could not judge.
    #[test]
    fn arrivals_at_the_receiver_in_words() {
        let mut s = Summary::default();
        s.tcp_wire.directions.push(crate::record::TcpWireDirection {
            path: "gw-eth0".to_owned(),
            src: "10.0.0.2:40000".to_owned(),
            dst: "10.0.0.1:443".to_owned(),
            segments: 10,
            at_receiver: true,
            arrivals_not_taken: 2,
            arrivals_not_judged: 1,
            drops_without_stall: 1,
            ..crate::record::TcpWireDirection::default()
        });
        let text = render(&s);
        assert!(
            text.contains("; 2 arrived here but were not taken by the receiver"),
            "{text}"
        );
        assert!(
            text.contains("; for 1 of them the stall is missing"),
            "{text}"
        );
        assert!(
            text.contains("; 1 arrivals not judged (resent before"),
            "{text}"
        );
    }

    /// No latency sample at all says why there is no prediction, and claims no path.
    #[test]
    fn no_samples_is_not_one_path() {
        let text = render(&Engine::new(Config::default()).finish(1));
        assert!(!text.contains("one path with latency samples"), "{text}");
        assert!(
            text.contains("no redundant flow with latencies on two paths yet"),
            "{text}"
        );
    }
}
