//! Folds a recording's output records back into the engine's [`Snapshot`] at a replay time:
//! `message` records give per-path and combined latency (in the engine's own histograms, with
//! its bounds and precision),
//! duplication, win rates and copy spacing; `window` records the recent series; `outage` and
//! `hol_incident` records are shown from their start, open until their end; `tcp_*` events
//! go through the real engine, which provides the TCP sockets; the `summary`, once reached, is
//! the authority for the whole-run figures.
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use tboxscope_engine::input::Observation;
use tboxscope_engine::record::{HolIncident, MessageRecord, OutageRecord, Summary};
use tboxscope_engine::snapshot::{
    AmplificationView, EventLine, LatencyKind, LatencyView, PathShare, PathView, RedundancyView,
    SeriesPoint, Severity, Snapshot, TailPoint,
};
use tboxscope_engine::Config;
use tboxscope_engine::{
    add_late_copies, redundancy_verdict, tail_prediction, CombinedTail, Engine, NotSentCause,
    PathTail, Spans,
};
use tboxscope_engine::{LatencyHist, FLOW_SIGFIG, PATH_SIGFIG};

use probe_user::source::ebpf::SkippedByKernel;

use super::load::{Item, Timed};
use crate::view::format;

/// Most recent series points and event lines kept.
const HISTORY: usize = 120;
const EVENTS: usize = 500;
/// Rates are over the last second of replay time.
const RATE_WINDOW_NS: u64 = 1_000_000_000;
/// A per-path or combined latency histogram, as the engine keeps one.
fn histogram() -> LatencyHist {
    LatencyHist::new(Config::default().max_latency_us, PATH_SIGFIG)
}

struct PathAcc {
    latency: LatencyHist,
    recent: VecDeque<SeriesPoint>,
    carried: u64,
    expected: u64,
    transmissions: u64,
    retransmissions: u64,
    bytes: u64,
    last_alive_ns: u64,
    rate: VecDeque<(u64, u64, u64)>,
    /// This path's part of redundant flows' messages.
    tail: PathTail,
}

impl PathAcc {
    fn new() -> Self {
        Self {
            latency: histogram(),
            recent: VecDeque::new(),
            carried: 0,
            expected: 0,
            transmissions: 0,
            retransmissions: 0,
            bytes: 0,
            last_alive_ns: 0,
            rate: VecDeque::new(),
            tail: PathTail::new(Config::default().max_latency_us),
        }
    }
}

#[derive(Default)]
struct Share {
    carried: u64,
    only: u64,
    wins: u64,
    /// Messages sent on other paths but not this one, by why (the message records say), and
    /// the outages and unused stretches that explain them, each counted once as the engine
    /// counts them.
    not_sent_while_out: u64,
    out: Spans,
    out_ns: u64,
    not_sent_while_unused: u64,
    unused: Spans,
    unused_ns: u64,
    not_sent_while_in_use: u64,
}

struct FlowAcc {
    messages: u64,
    /// Some copy of a message of this flow arrived.
    delivered_any: bool,
    on_all: u64,
    sent_on_all: u64,
    paths: BTreeMap<String, Share>,
    spacing: LatencyHist,
    /// Copies seen after their message closed without them (`late_copy` records).
    late_copies: u64,
}

/// The replay state at the current position.
pub struct Fold {
    start_ns: u64,
    paths: BTreeMap<String, PathAcc>,
    flows: BTreeMap<String, FlowAcc>,
    combined: LatencyHist,
    during_outage: LatencyHist,
    outside_outage: LatencyHist,
    combined_recent: VecDeque<SeriesPoint>,
    kind: LatencyKind,
    amplification: Option<f64>,
    outages: Vec<OutageRecord>,
    incidents: Vec<HolIncident>,
    events: VecDeque<EventLine>,
    ring_buffer_dropped: u64,
    /// Hook runs the kernel skipped (the recording's last `drops` line).
    skipped_by_kernel: SkippedByKernel,
    /// Retransmitted segments the kernel counted with no record (latest `drops` line).
    unrecorded_retrans: u64,
    /// Congestion-state changes seen only in a later snapshot (latest `drops` line).
    unrecorded_cong_changes: u64,
    tcp_events_dropped: u64,
    /// Latencies above the engine's bound, recorded at the bound (as the engine counts them).
    clamped: u64,
    /// Copies seen after their message closed without them.
    late_copies: u64,
    /// Redundant flows' messages, for the independent-paths prediction.
    redundant: CombinedTail,
    summary: Option<(u64, Box<Summary>)>,
    engine: Engine,
    notes: Vec<String>,
}

impl Fold {
    /// An empty state for a recording starting at `start_ns`; `notes` go into the health panel.
    pub fn new(start_ns: u64, notes: Vec<String>) -> Self {
        Self {
            start_ns,
            paths: BTreeMap::new(),
            flows: BTreeMap::new(),
            combined: histogram(),
            during_outage: histogram(),
            outside_outage: histogram(),
            combined_recent: VecDeque::new(),
            kind: LatencyKind::default(),
            amplification: None,
            outages: Vec::new(),
            incidents: Vec::new(),
            events: VecDeque::new(),
            ring_buffer_dropped: 0,
            skipped_by_kernel: SkippedByKernel::default(),
            unrecorded_retrans: 0,
            unrecorded_cong_changes: 0,
            tcp_events_dropped: 0,
            clamped: 0,
            late_copies: 0,
            redundant: CombinedTail::new(Config::default().max_latency_us),
            summary: None,
            engine: Engine::new(Config::default()),
            notes,
        }
    }

    fn event(&mut self, ts_ns: u64, severity: Severity, text: String) {
        self.events.push_front(EventLine {
            ts_ns,
            severity,
            text,
        });
        self.events.truncate(EVENTS);
    }

    /// Drops the sliding-window series (the `r` key).
    pub fn reset_windows(&mut self) {
        self.combined_recent.clear();
        for path in self.paths.values_mut() {
            path.recent.clear();
            path.rate.clear();
        }
    }

    /// Applies one item.
    pub fn apply(&mut self, timed: &Timed) {
        let ts = timed.ts_ns;
        match &timed.item {
            Item::Message(m) => self.message(m),
            Item::Window(w) => {
                for (path, p) in &w.per_path {
                    let acc = self.paths.entry(path.clone()).or_insert_with(PathAcc::new);
                    push_bounded(
                        &mut acc.recent,
                        SeriesPoint {
                            ts_ns: w.end_ns,
                            p50_us: p.p50_us,
                            p99_us: p.p99_us,
                            count: p.count,
                        },
                    );
                }
                push_bounded(
                    &mut self.combined_recent,
                    SeriesPoint {
                        ts_ns: w.end_ns,
                        p50_us: w.combined.p50_us,
                        p99_us: w.combined.p99_us,
                        count: w.combined.count,
                    },
                );
                self.amplification = Some(w.amplification);
            }
            Item::Outage(o) => {
                self.event(
                    ts,
                    Severity::Alert,
                    format!("outage on {} began ({})", o.path, o.evidence),
                );
                self.outages.push((**o).clone());
            }
            Item::Hol(h) => {
                self.event(
                    ts,
                    Severity::Warn,
                    format!("HOL incident on {}: {} missing", h.flow, h.missing),
                );
                self.incidents.push((**h).clone());
            }
            Item::Summary(s) => {
                self.event(ts, Severity::Info, "end of capture: summary".to_owned());
                self.summary = Some((ts, s.clone()));
            }
            Item::Tcp(e) => {
                if let tboxscope_engine::input::TcpEventKind::Retransmit { kind, seq, .. } = &e.kind
                {
                    self.event(
                        ts,
                        Severity::Info,
                        format!(
                            "tcp {} → {} retransmit seq {seq} ({}, backoff {}, RTO {})",
                            e.local,
                            e.remote,
                            retransmit_name(*kind),
                            e.figures.backoff,
                            format::micros(u64::from(e.figures.rto_us))
                        ),
                    );
                }
                self.engine.handle(Observation::Tcp((**e).clone()));
            }
            Item::Drops(d) => {
                self.ring_buffer_dropped = self.ring_buffer_dropped.max(d.kernel.total());
                // Cumulative: the latest line has the highest counts.
                self.skipped_by_kernel = d.kernel.skipped_by_kernel;
                self.unrecorded_retrans = d.unrecorded_retrans;
                self.unrecorded_cong_changes = d.unrecorded_cong_changes;
                self.tcp_events_dropped = self.tcp_events_dropped.max(d.decode_rejected);
            }
            Item::CaptureNote(text) => self.event(ts, Severity::Warn, text.clone()),
            Item::LateCopy(l) => {
                self.event(ts, Severity::Info, l.describe());
                self.late_copies += 1;
                if let Some(f) = self.flows.get_mut(&l.flow) {
                    f.late_copies += 1;
                }
            }
        }
    }

    fn in_outage(&self, ts_ns: u64) -> bool {
        self.outages
            .iter()
            .any(|o| ts_ns >= o.start_ns && o.end_ns.is_none_or(|end| ts_ns < end))
    }

    fn message(&mut self, m: &MessageRecord) {
        self.kind = m.latency_kind;
        if let Some(latency) = m.latency_us {
            self.clamped += u64::from(self.combined.record(latency));
            if self.in_outage(m.first_seen_ns) {
                self.during_outage.record(latency);
            } else {
                self.outside_outage.record(latency);
            }
        }
        let flow = self.flows.entry(m.flow.clone()).or_insert_with(|| FlowAcc {
            messages: 0,
            on_all: 0,
            sent_on_all: 0,
            delivered_any: false,
            paths: BTreeMap::new(),
            spacing: LatencyHist::new(Config::default().max_latency_us, FLOW_SIGFIG),
            late_copies: 0,
        });
        flow.messages += 1;
        // As the engine counts them: a message no path delivered, in a flow that has
        // delivered before (or now), is slower than any threshold on every path.
        let delivered = m.copies.iter().any(|c| c.arrived.is_some());
        flow.delivered_any |= delivered;
        for copy in &m.copies {
            flow.paths.entry(copy.path.clone()).or_default().carried += 1;
        }
        let known: BTreeSet<&String> = flow.paths.keys().collect();
        let carried: BTreeSet<&String> = m.copies.iter().map(|c| &c.path).collect();
        if known.len() >= 2 && carried.len() == known.len() {
            flow.on_all += 1;
        }
        let sent = m.copies.iter().filter(|c| c.sent.is_some()).count();
        if known.len() >= 2 && sent == known.len() {
            flow.sent_on_all += 1;
        }
        if carried.len() == 1 && known.len() >= 2 {
            if let Some(share) = m.copies.first().and_then(|c| flow.paths.get_mut(&c.path)) {
                share.only += 1;
            }
        }
        if let Some(winner) = m.winner.as_ref().and_then(|w| flow.paths.get_mut(w)) {
            winner.wins += 1;
        }
        for n in &m.not_sent_on {
            let share = flow.paths.entry(n.path.clone()).or_default();
            match n.cause {
                NotSentCause::Outage => {
                    share.not_sent_while_out += 1;
                    share.out_ns += share.out.add(n.from_ns, n.to_ns);
                }
                NotSentCause::Unused => {
                    share.not_sent_while_unused += 1;
                    share.unused_ns += share.unused.add(n.from_ns, n.to_ns);
                }
                NotSentCause::InUse => share.not_sent_while_in_use += 1,
            }
        }
        let arrivals: Vec<u64> = m.copies.iter().filter_map(|c| c.arrived).collect();
        if arrivals.len() >= 2 {
            let (lo, hi) = (
                arrivals.iter().min().copied().unwrap_or(0),
                arrivals.iter().max().copied().unwrap_or(0),
            );
            flow.spacing.record((hi - lo) / 1_000);
        }
        let flow_paths: Vec<String> = flow.paths.keys().cloned().collect();
        let redundant = flow_paths.len() >= 2;
        if redundant {
            self.redundant
                .record(m.latency_us, flow.delivered_any && !delivered);
        }
        for path in flow_paths {
            let acc = self.paths.entry(path.clone()).or_insert_with(PathAcc::new);
            acc.expected += 1;
            let copy = m.copies.iter().find(|c| c.path == path);
            if redundant {
                acc.tail
                    .record(copy.is_some(), copy.and_then(|c| c.latency_us));
            }
            let Some(copy) = copy else {
                continue;
            };
            acc.carried += 1;
            let sends = u64::from(copy.transmissions.max(1));
            acc.transmissions += sends;
            acc.retransmissions += sends - 1;
            acc.bytes = acc.bytes.saturating_add(m.bytes.saturating_mul(sends));
            if let Some(latency) = copy.latency_us {
                self.clamped += u64::from(acc.latency.record(latency));
            }
            let seen = copy.arrived.or(copy.sent).unwrap_or(m.first_seen_ns);
            acc.last_alive_ns = acc.last_alive_ns.max(seen);
            acc.rate
                .push_back((m.first_seen_ns, sends, m.bytes.saturating_mul(sends)));
        }
    }

    /// The snapshot at replay time `now_ns`.
    pub fn snapshot(&mut self, now_ns: u64) -> Snapshot {
        let mut snap = self.engine.snapshot();
        let tcp = std::mem::take(&mut snap.flows.tcp);
        let engine_events = std::mem::take(&mut snap.events);
        snap = Snapshot {
            ts_ns: now_ns,
            started_ns: self.start_ns,
            ..snap
        };
        snap.flows.tcp = tcp;
        snap.paths = self.path_views(now_ns);
        snap.redundancy = self.redundancy();
        snap.latency = self.latency();
        if let Some(ratio) = self.amplification {
            snap.amplification = vec![AmplificationView {
                flow: "all flows, last window".to_owned(),
                protocol: "all".to_owned(),
                ratio,
                ..AmplificationView::default()
            }];
        }
        snap.outages = self
            .outages
            .iter()
            .rev()
            .map(|o| outage_at(o, now_ns))
            .collect();
        snap.incidents = self
            .incidents
            .iter()
            .rev()
            .map(|h| incident_at(h, now_ns))
            .collect();
        snap.outages_total = self.outages.len() as u64;
        snap.incidents_total = self.incidents.len() as u64;
        let mut events: Vec<EventLine> = self.events.iter().cloned().collect();
        events.extend(engine_events);
        events.sort_by_key(|e| std::cmp::Reverse(e.ts_ns));
        snap.events = events;
        snap.health.ring_buffer_dropped = self.ring_buffer_dropped;
        snap.health.tcp_events_dropped = self.tcp_events_dropped;
        snap.health.tcp_hook_runs_skipped = self.skipped_by_kernel.total();
        snap.health.tcp_retrans_unrecorded = self.unrecorded_retrans;
        snap.health.tcp_cong_changes_late = self.unrecorded_cong_changes;
        snap.health.clamped_latencies = self.clamped;
        snap.health.late_copies = self.late_copies;
        snap.health.inferences.extend(self.notes.iter().cloned());
        if let Some(line) = crate::kerneltcp::probes_missed_line(
            &self.skipped_by_kernel,
            self.unrecorded_retrans,
            self.unrecorded_cong_changes,
        ) {
            snap.health.inferences.push(line);
        }
        if let Some((_, summary)) = &self.summary {
            apply_summary(&mut snap, summary);
        }
        snap
    }

    fn path_views(&mut self, now_ns: u64) -> Vec<PathView> {
        let outages = &self.outages;
        self.paths
            .iter_mut()
            .map(|(label, acc)| {
                while acc
                    .rate
                    .front()
                    .is_some_and(|(ts, _, _)| ts.saturating_add(RATE_WINDOW_NS) < now_ns)
                {
                    acc.rate.pop_front();
                }
                let outage = outages.iter().rev().find(|o| {
                    &o.path == label
                        && o.start_ns <= now_ns
                        && o.end_ns.is_none_or(|end| now_ns < end)
                });
                let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
                PathView {
                    label: label.clone(),
                    up: outage.is_none(),
                    outage_for_ns: outage.map(|o| now_ns - o.start_ns),
                    last_alive_ns: acc.last_alive_ns,
                    packets_per_s: acc.rate.iter().map(|r| r.1).sum::<u64>() as f64,
                    bytes_per_s: acc.rate.iter().map(|r| r.2).sum::<u64>() as f64,
                    packets: acc.transmissions,
                    bytes: acc.bytes,
                    loss_rate: 1.0 - ratio(acc.carried, acc.expected).min(1.0),
                    retransmission_rate: ratio(acc.retransmissions, acc.transmissions),
                    latency: acc.latency.percentiles(),
                    latency_kind: self.kind,
                    recent: acc.recent.iter().cloned().collect(),
                    // Replay shows these from the records, not as metrics.
                    ..PathView::default()
                }
            })
            .map(|mut p| {
                if p.packets == 0 {
                    p.loss_rate = 0.0;
                }
                p
            })
            .collect()
    }

    fn redundancy(&self) -> Vec<RedundancyView> {
        self.flows
            .iter()
            .map(|(name, f)| {
                let duplication = if f.messages == 0 {
                    0.0
                } else {
                    f.on_all as f64 / f.messages as f64
                };
                let winners: u64 = f.paths.values().map(|s| s.wins).sum();
                let paths: Vec<PathShare> = f
                    .paths
                    .iter()
                    .map(|(path, s)| PathShare {
                        path: path.clone(),
                        carried: s.carried,
                        only: s.only,
                        not_sent_while_out: s.not_sent_while_out,
                        out_ns: s.out_ns,
                        not_sent_while_unused: s.not_sent_while_unused,
                        unused_ns: s.unused_ns,
                        not_sent_while_in_use: s.not_sent_while_in_use,
                        wins: s.wins,
                        win_rate: if winners == 0 {
                            0.0
                        } else {
                            s.wins as f64 / winners as f64
                        },
                    })
                    .collect();
                let npaths = u32::try_from(f.paths.len()).unwrap_or(u32::MAX);
                let mut verdict = redundancy_verdict(
                    f.messages,
                    duplication,
                    npaths,
                    &paths,
                    f.sent_on_all,
                    None,
                );
                add_late_copies(&mut verdict, f.late_copies);
                RedundancyView {
                    flow: name.clone(),
                    mode: None,
                    mode_forced: false,
                    messages: f.messages,
                    on_all_paths: f.on_all,
                    duplication,
                    sent_on_all_paths: f.sent_on_all,
                    late_copies: f.late_copies,
                    paths,
                    copy_spacing: f.spacing.percentiles(),
                    verdict,
                }
            })
            .collect()
    }

    /// The independent-paths prediction as the engine makes it.
    fn prediction(&self) -> (Vec<TailPoint>, String) {
        let paths: Vec<&PathTail> = self.paths.values().map(|p| &p.tail).collect();
        tail_prediction(
            &paths,
            &self.redundant,
            Config::default().shared_cause_ratio,
        )
    }

    fn latency(&self) -> LatencyView {
        let combined = self.combined.percentiles();
        let (tail, verdict) = self.prediction();
        LatencyView {
            kind: self.kind,
            per_path: self
                .paths
                .iter()
                .map(|(label, p)| (label.clone(), p.latency.percentiles()))
                .collect(),
            combined,
            combined_buckets: Vec::new(),
            during_outage: self.during_outage.percentiles(),
            outside_outage: self.outside_outage.percentiles(),
            // Output records carry no request → response samples.
            request_response: Default::default(),
            combined_recent: self.combined_recent.iter().cloned().collect(),
            tail,
            verdict,
        }
    }
}

fn push_bounded(series: &mut VecDeque<SeriesPoint>, point: SeriesPoint) {
    series.push_back(point);
    while series.len() > HISTORY {
        series.pop_front();
    }
}

/// An outage as it looked at `now_ns`: still open if it ends later.
fn outage_at(o: &OutageRecord, now_ns: u64) -> OutageRecord {
    let mut o = o.clone();
    if o.end_ns.is_none_or(|end| end > now_ns) {
        o.end_ns = None;
        o.duration_ns = now_ns.saturating_sub(o.start_ns);
    }
    o
}

/// A HOL incident as it looked at `now_ns`: evidence up to now, open if it ends later.
fn incident_at(h: &HolIncident, now_ns: u64) -> HolIncident {
    let mut h = h.clone();
    if h.end_ns.is_none_or(|end| end > now_ns) {
        h.end_ns = None;
        h.stall_ns = now_ns.saturating_sub(h.start_ns);
        h.evidence.retain(|e| e.ts_ns <= now_ns);
    }
    h
}

/// The summary's whole-run figures replace the folded ones; live state (up/down, series)
/// stays.
fn apply_summary(snap: &mut Snapshot, summary: &Summary) {
    let live: BTreeMap<String, PathView> =
        snap.paths.drain(..).map(|p| (p.label.clone(), p)).collect();
    snap.paths = summary
        .paths
        .iter()
        .map(|p| {
            let mut p = p.clone();
            if let Some(l) = live.get(&p.label) {
                p.up = l.up;
                p.outage_for_ns = l.outage_for_ns;
                if p.recent.is_empty() {
                    p.recent = l.recent.clone();
                }
            }
            p
        })
        .collect();
    if snap.paths.is_empty() {
        snap.paths = live.into_values().collect();
    }
    if !summary.redundancy.is_empty() {
        snap.redundancy = summary.redundancy.clone();
    }
    if summary.latency.combined.count > 0 {
        let recent = std::mem::take(&mut snap.latency.combined_recent);
        snap.latency = summary.latency.clone();
        if snap.latency.combined_recent.is_empty() {
            snap.latency.combined_recent = recent;
        }
    }
    if !summary.amplification.is_empty() {
        snap.amplification = summary.amplification.clone();
    }
    snap.outages_total = snap.outages_total.max(summary.outages_total);
    snap.incidents_total = snap.incidents_total.max(summary.incidents_total);
    let h = &summary.health;
    let mine = &mut snap.health;
    mine.observations = mine.observations.max(h.observations);
    mine.out_of_order = mine.out_of_order.max(h.out_of_order);
    mine.evicted_flows = mine.evicted_flows.max(h.evicted_flows);
    mine.evicted_messages = mine.evicted_messages.max(h.evicted_messages);
    mine.evicted_unacked = mine.evicted_unacked.max(h.evicted_unacked);
    mine.evicted_streams = mine.evicted_streams.max(h.evicted_streams);
    mine.held_messages = mine.held_messages.max(h.held_messages);
    mine.held_too_long = mine.held_too_long.max(h.held_too_long);
    mine.late_copies = mine.late_copies.max(h.late_copies);
    mine.regrouped_messages = mine.regrouped_messages.max(h.regrouped_messages);
    mine.evicted_incidents = mine.evicted_incidents.max(h.evicted_incidents);
    mine.dropped_records = mine.dropped_records.max(h.dropped_records);
    mine.clamped_latencies = mine.clamped_latencies.max(h.clamped_latencies);
    mine.pcap_dropped = mine.pcap_dropped.max(h.pcap_dropped);
    mine.ring_buffer_dropped = mine.ring_buffer_dropped.max(h.ring_buffer_dropped);
    mine.tcp_events_dropped = mine.tcp_events_dropped.max(h.tcp_events_dropped);
    mine.decrypt_failures = mine.decrypt_failures.max(h.decrypt_failures);
    if mine.captures.is_empty() {
        mine.captures = h.captures.clone();
    }
    mine.inferences.extend(h.inferences.iter().cloned());
}

fn retransmit_name(kind: tboxscope_engine::input::RetransmitKind) -> &'static str {
    use tboxscope_engine::input::RetransmitKind;
    match kind {
        RetransmitKind::Fast => "fast retransmit",
        RetransmitKind::Rto => "timeout",
        RetransmitKind::Tlp => "tail loss probe",
        RetransmitKind::LossRecovery => "loss recovery after a timeout",
        RetransmitKind::Unknown => "cause unknown",
    }
}

#[cfg(test)]
mod tests {
    use tboxscope_engine::record::{CopyRecord, LateCopyRecord};

    use super::*;

    #[test]
    fn latencies_are_bounded_and_counted_as_the_engine_does() {
        let max_us = Config::default().max_latency_us;
        let mut fold = Fold::new(0, Vec::new());
        for (i, latency_us) in [40_000, 2 * max_us].into_iter().enumerate() {
            let sent = i as u64 * 1_000_000_000;
            let message = MessageRecord {
                id: format!("sn {i}"),
                flow: "kcp conv 7".to_owned(),
                first_seen_ns: sent,
                bytes: 100,
                copies: vec![CopyRecord {
                    path: "eth0".to_owned(),
                    sent: Some(sent),
                    arrived: Some(sent + latency_us * 1000),
                    latency_us: Some(latency_us),
                    transmissions: 1,
                }],
                latency_us: Some(latency_us),
                ..MessageRecord::default()
            };
            fold.apply(&Timed {
                ts_ns: sent,
                item: Item::Message(Box::new(message)),
            });
        }
        let snap = fold.snapshot(10_000_000_000);
        assert_eq!(snap.latency.combined.max_us, max_us);
        assert_eq!(snap.latency.per_path[0].1.max_us, max_us);
        assert_eq!(
            snap.latency.combined.min_us, 40_000,
            "exact, as the engine's"
        );
        assert_eq!(snap.health.clamped_latencies, 2, "combined and per path");
    }

    /// The message records say why a path lacked a copy: the replayed verdict counts them as
    /// the engine did (each outage or unused stretch once), not as zeros.
    #[test]
    fn messages_not_sent_on_a_path_are_counted_from_the_records() {
        const S: u64 = 1_000_000_000;
        let mut fold = Fold::new(0, Vec::new());
        let copy = |path: &str, t: u64| CopyRecord {
            path: path.to_owned(),
            sent: Some(t),
            arrived: Some(t + 30_000_000),
            latency_us: Some(30_000),
            transmissions: 1,
        };
        for i in 0..40u64 {
            let t = i * S / 4;
            // 0–2 s on both paths, 2–7 s eth0 down, 7–10 s eth0 unused by the sender.
            let (copies, not_sent_on) = match t {
                t if t < 2 * S => (vec![copy("eth0", t), copy("eth1", t)], vec![]),
                t => {
                    let (cause, from_ns, to_ns) = if t < 7 * S {
                        (NotSentCause::Outage, 2 * S, (t + S).min(7 * S))
                    } else {
                        (NotSentCause::Unused, 7 * S, t)
                    };
                    let n = tboxscope_engine::NotSent {
                        path: "eth0".to_owned(),
                        cause,
                        from_ns,
                        to_ns,
                    };
                    (vec![copy("eth1", t)], vec![n])
                }
            };
            let message = MessageRecord {
                id: format!("sn {i}"),
                flow: "kcp conv 7".to_owned(),
                first_seen_ns: t,
                bytes: 100,
                copies,
                winner: Some("eth1".to_owned()),
                latency_us: Some(30_000),
                not_sent_on,
                ..MessageRecord::default()
            };
            fold.apply(&Timed {
                ts_ns: t,
                item: Item::Message(Box::new(message)),
            });
        }
        let snap = fold.snapshot(11 * S);
        let r = &snap.redundancy[0];
        let eth0 = r.paths.iter().find(|p| p.path == "eth0").unwrap();
        assert_eq!(
            (eth0.not_sent_while_out, eth0.out_ns),
            (20, 5 * S),
            "{eth0:?}"
        );
        assert_eq!(
            (eth0.not_sent_while_unused, eth0.unused_ns),
            (12, 2_750_000_000),
            "{eth0:?}"
        );
        assert!(
            r.verdict.starts_with(
                "redundant sending: 20.0% of 40 messages sent on all 2 paths; eth0 down 5.0 s: 20 \
                 messages on eth1 only; eth0 unused by the sender for 2.8 s: 12 on eth1 only; "
            ),
            "{}",
            r.verdict
        );
    }

    /// A `late_copy` record counts on its flow and in health, is named in the flow's verdict
    /// and is a line of the Events log, as the live view shows it.
    #[test]
    fn late_copies_are_counted_named_and_logged_as_live() {
        let mut fold = Fold::new(0, Vec::new());
        let flow = "kcp :7401 (per-path sessions)";
        let copy = CopyRecord {
            path: "eth1".to_owned(),
            sent: Some(1_000),
            arrived: Some(30_001_000),
            latency_us: Some(30_000),
            transmissions: 1,
        };
        let message = MessageRecord {
            id: "sn 7".to_owned(),
            flow: flow.to_owned(),
            first_seen_ns: 1_000,
            bytes: 100,
            copies: vec![copy],
            winner: Some("eth1".to_owned()),
            latency_us: Some(30_000),
            ..MessageRecord::default()
        };
        let late = LateCopyRecord {
            id: "sn 7".to_owned(),
            flow: flow.to_owned(),
            path: "eth0".to_owned(),
            seen_ns: 7_000_000_000,
            after_close_us: 1_500_000,
        };
        for (ts_ns, item) in [
            (1_000, Item::Message(Box::new(message))),
            (late.seen_ns, Item::LateCopy(Box::new(late.clone()))),
        ] {
            fold.apply(&Timed { ts_ns, item });
        }
        let snap = fold.snapshot(8_000_000_000);
        assert_eq!(snap.health.late_copies, 1);
        let r = &snap.redundancy[0];
        assert_eq!(r.late_copies, 1);
        assert!(r
            .verdict
            .ends_with("; 1 copy came after its message closed (a late copy)"));
        assert_eq!(snap.events[0].text, late.describe());
        assert!(late
            .describe()
            .starts_with("late copy of sn 7 on eth0, 1500.0 ms after"));
    }
}
