//! The comparison table of `lab run`, computed from the peers' ground truth.
use std::fmt;

use serde::Serialize;
// Latency cells carry their unit (`480 µs` on a lab without delay, `172.9 ms`), as in the
// report and tboxscope's own table.
use tboxscope_engine::units::latency_ms;

use crate::names::PathId;
use crate::peers::truth::TransportTruth;
use crate::peers::Transport;
use crate::probe::percentile;
use crate::run::{RunReport, TimelineEvent};

/// IP bytes on the wire of one transport (nftables counters at the sending interface, so lost
/// packets count too).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct WireBytes {
    /// T-Box → gateway, per path (A, B).
    pub up: [u64; 2],
    /// Gateway → T-Box, per path (A, B).
    pub down: [u64; 2],
}

impl WireBytes {
    /// Adds the counters of one path.
    pub fn add(&mut self, p: PathId, up: u64, down: u64) {
        let i = usize::from(p == PathId::B);
        self.up[i] = self.up[i].saturating_add(up);
        self.down[i] = self.down[i].saturating_add(down);
    }

    /// Both directions, both paths.
    pub fn total(&self) -> u64 {
        self.up
            .iter()
            .chain(self.down.iter())
            .fold(0u64, |a, b| a.saturating_add(*b))
    }
}

/// What a transport did during an outage.
#[derive(Debug, Clone, Serialize)]
pub struct OutageReport {
    /// The path that was down.
    pub path: PathId,
    /// Seconds after the first message.
    pub start_s: f64,
    /// Seconds after the first message.
    pub end_s: f64,
    /// Messages generated while the path was down.
    pub sent: u64,
    /// Of those, delivered at all.
    pub delivered: u64,
    /// Largest latency among them, ms.
    pub max_latency_ms: f64,
    /// Median latency among them, ms.
    pub p50_latency_ms: f64,
    /// How long after the path came back the last of them arrived, ms (0: none was held
    /// back past the outage).
    pub backlog_cleared_after_ms: f64,
}

/// One row of the table.
#[derive(Debug, Clone, Serialize)]
pub struct TransportReport {
    /// Transport name.
    pub transport: &'static str,
    /// Paths every message was sent on.
    pub paths: Vec<PathId>,
    /// Messages generated.
    pub sent: u64,
    /// Messages delivered (at least one copy).
    pub delivered: u64,
    /// Messages never delivered.
    pub lost: u64,
    /// Per-message latency (generation → first copy), ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// 99.9th percentile, ms.
    pub p999_ms: f64,
    /// Largest, ms.
    pub max_ms: f64,
    /// Delivered messages of which a second copy also arrived, percent.
    pub duplication_pct: f64,
    /// First copies that came over path B, percent.
    pub first_on_b_pct: f64,
    /// Messages generated of which a copy arrived over each path (A, B), percent.
    pub carried_pct: [f64; 2],
    /// Wire bytes (both directions, all paths) per payload byte generated.
    pub amplification: f64,
    /// Wire bytes.
    pub wire: WireBytes,
    /// Longest time without any delivery, ms (a stall).
    pub longest_stall_ms: f64,
    /// Per outage, when the scenario has one.
    pub outages: Vec<OutageReport>,
    /// Received byte strings that were not lab messages.
    pub rejected: u64,
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// Computes one row from the ground truth.
pub fn analyse(
    t: Transport,
    rec: &TransportTruth,
    wire: &WireBytes,
    size: usize,
    timeline: &[TimelineEvent],
    start_mono: u64,
) -> TransportReport {
    let sent = rec.sent_mono_ns.len() as u64;
    let mut lat = Vec::new();
    let mut arrivals = Vec::new();
    let (mut dup, mut on_b) = (0u64, 0u64);
    let mut carried = [0u64; 2];
    for (id, a) in &rec.arrivals {
        let Some(&s) = usize::try_from(*id)
            .ok()
            .and_then(|i| rec.sent_mono_ns.get(i))
        else {
            continue;
        };
        lat.push(a.first_mono_ns.saturating_sub(s));
        arrivals.push(a.first_mono_ns);
        if a.copies[0].saturating_add(a.copies[1]) >= 2 {
            dup += 1;
        }
        if a.first_path == Some(PathId::B) {
            on_b += 1;
        }
        for (c, n) in carried.iter_mut().zip(a.copies) {
            *c += u64::from(n > 0);
        }
    }
    let delivered = lat.len() as u64;
    lat.sort_unstable();
    arrivals.sort_unstable();
    let mut stall = arrivals.first().map_or(0, |f| f.saturating_sub(start_mono));
    for w in arrivals.windows(2) {
        stall = stall.max(w[1].saturating_sub(w[0]));
    }
    let pct = |n: u64| {
        if delivered == 0 {
            0.0
        } else {
            n as f64 * 100.0 / delivered as f64
        }
    };
    let mut outages = Vec::new();
    for start in timeline.iter().filter(|e| e.kind == "outage_start") {
        let end = timeline
            .iter()
            .find(|e| e.kind == "outage_end" && e.path == start.path && e.mono_ns >= start.mono_ns)
            .map_or((u64::MAX, f64::INFINITY), |e| (e.mono_ns, e.at_s));
        let mut in_lat = Vec::new();
        let mut in_sent = 0;
        let mut last_arrival = 0u64;
        for (id, &s) in rec.sent_mono_ns.iter().enumerate() {
            if s >= start.mono_ns && s < end.0 {
                in_sent += 1;
                if let Some(a) = rec.arrivals.get(&(id as u64)) {
                    in_lat.push(a.first_mono_ns.saturating_sub(s));
                    last_arrival = last_arrival.max(a.first_mono_ns);
                }
            }
        }
        in_lat.sort_unstable();
        outages.push(OutageReport {
            path: start.path,
            start_s: start.at_s,
            end_s: end.1,
            sent: in_sent,
            delivered: in_lat.len() as u64,
            max_latency_ms: ms(in_lat.last().copied().unwrap_or(0)),
            p50_latency_ms: ms(percentile(&in_lat, 0.5)),
            backlog_cleared_after_ms: if end.0 == u64::MAX {
                0.0
            } else {
                ms(last_arrival.saturating_sub(end.0))
            },
        });
    }
    let payload = (sent as f64) * size as f64;
    TransportReport {
        transport: t.name(),
        paths: t.paths().to_vec(),
        sent,
        delivered,
        lost: sent.saturating_sub(delivered),
        p50_ms: ms(percentile(&lat, 0.5)),
        p99_ms: ms(percentile(&lat, 0.99)),
        p999_ms: ms(percentile(&lat, 0.999)),
        max_ms: ms(lat.last().copied().unwrap_or(0)),
        duplication_pct: pct(dup),
        first_on_b_pct: pct(on_b),
        carried_pct: carried.map(|n| {
            if sent == 0 {
                0.0
            } else {
                n as f64 * 100.0 / sent as f64
            }
        }),
        amplification: if payload > 0.0 {
            wire.total() as f64 / payload
        } else {
            0.0
        },
        wire: *wire,
        longest_stall_ms: ms(stall),
        outages,
        rejected: rec.rejected,
    }
}

impl fmt::Display for RunReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.scenario;
        writeln!(
            f,
            "scenario {} ({}): {:.0} s, {} msg/s × {} B, delay by {:?}",
            s.name,
            s.description,
            self.duration_s,
            self.profile.rate_hz,
            self.profile.size,
            self.backend
        )?;
        for p in PathId::BOTH {
            let sp = s.path(p);
            writeln!(
                f,
                "  path {:<13} {}±{} ms one-way, {}% loss{}",
                p.label(),
                sp.delay_ms,
                sp.jitter_ms,
                sp.loss_pct,
                sp.rate_kbit
                    .map(|r| format!(", {r} kbit/s"))
                    .unwrap_or_default()
            )?;
        }
        for e in &self.timeline {
            writeln!(f, "  {} path {:?} at {:.3} s", e.kind, e.path, e.at_s)?;
        }
        writeln!(f)?;
        writeln!(
            f,
            "{:<15} {:>5} {:>6} {:>5} {:>11} {:>11} {:>11} {:>11} {:>6} {:>6} {:>7} {:>9}",
            "transport",
            "paths",
            "sent",
            "lost",
            "P50",
            "P99",
            "P999",
            "max",
            "dup %",
            "B 1st%",
            "amplif",
            "stall ms"
        )?;
        for r in &self.transports {
            let paths: String = r
                .paths
                .iter()
                .map(|p| p.letter().to_ascii_uppercase())
                .collect::<Vec<_>>()
                .join("+");
            writeln!(
                f,
                "{:<15} {:>5} {:>6} {:>5} {:>11} {:>11} {:>11} {:>11} {:>6.1} {:>6.1} {:>6.2}x {:>9.0}",
                r.transport,
                paths,
                r.sent,
                r.lost,
                latency_ms(r.p50_ms),
                latency_ms(r.p99_ms),
                latency_ms(r.p999_ms),
                latency_ms(r.max_ms),
                r.duplication_pct,
                r.first_on_b_pct,
                r.amplification,
                r.longest_stall_ms
            )?;
        }
        if !self.timeline.is_empty() {
            writeln!(f)?;
            writeln!(
                f,
                "during the outage (messages generated while the path was down):"
            )?;
            for r in &self.transports {
                for o in &r.outages {
                    writeln!(
                        f,
                        "  {:<15} path {:?} down {:.1}–{:.1} s: {} sent, {} delivered, P50 {:.0} ms, max {:.0} ms, backlog cleared {:.0} ms after the path came back",
                        r.transport,
                        o.path,
                        o.start_s,
                        o.end_s,
                        o.sent,
                        o.delivered,
                        o.p50_latency_ms,
                        o.max_latency_ms,
                        o.backlog_cleared_after_ms
                    )?;
                }
            }
        }
        for (what, e) in &self.errors {
            writeln!(f, "error: {what}: {e}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::truth::Arrival;

    const MS: u64 = 1_000_000;

    #[test]
    fn analyse_counts_latency_copies_stalls_and_the_outage() {
        // 10 messages every 20 ms from t=0; #3 never arrives; #5 arrives on both paths;
        // messages 6..8 are held until 1000 ms.
        let mut rec = TransportTruth {
            sent_mono_ns: (0..10).map(|i| i * 20 * MS).collect(),
            ..Default::default()
        };
        for id in 0..10u64 {
            if id == 3 {
                continue;
            }
            let held = (6..=8).contains(&id);
            let at = if held {
                1000 * MS
            } else {
                id * 20 * MS + 40 * MS
            };
            let mut a = Arrival {
                first_mono_ns: at,
                first_path: Some(PathId::A),
                copies: [1, 0],
            };
            if id == 5 {
                a.copies = [1, 1];
                a.first_path = Some(PathId::B);
            }
            rec.arrivals.insert(id, a);
        }
        let timeline = vec![
            TimelineEvent {
                kind: "outage_start",
                path: PathId::A,
                at_s: 0.11,
                mono_ns: 110 * MS,
                unix_ns: 0,
            },
            TimelineEvent {
                kind: "outage_end",
                path: PathId::A,
                at_s: 0.17,
                mono_ns: 170 * MS,
                unix_ns: 0,
            },
        ];
        let mut wire = WireBytes::default();
        wire.add(PathId::A, 6000, 1200);
        let r = analyse(Transport::KcpDual, &rec, &wire, 600, &timeline, 0);
        assert_eq!((r.sent, r.delivered, r.lost), (10, 9, 1));
        assert_eq!(r.p50_ms, 40.0);
        assert_eq!(r.max_ms, 1000.0 - 120.0);
        assert!((r.duplication_pct - 100.0 / 9.0).abs() < 1e-9);
        assert!((r.first_on_b_pct - 100.0 / 9.0).abs() < 1e-9);
        assert!((r.amplification - 7200.0 / 6000.0).abs() < 1e-9);
        // Deliveries: 40, 60, 80, 140(#5), 220(#9)… then 1000: the longest gap is 780 ms.
        assert_eq!(r.longest_stall_ms, 780.0);
        let o = &r.outages[0];
        // Generated in [110, 170) ms: #6 (120), #7 (140), #8 (160).
        assert_eq!((o.sent, o.delivered), (3, 3));
        assert_eq!(o.max_latency_ms, 880.0);
        assert_eq!(o.backlog_cleared_after_ms, 830.0);
    }
}
