//! The engine's figures as metric families, one conversion for every metrics output: the
//! Prometheus/OpenMetrics text of the live `/metrics` endpoint and of `analyze --metrics`
//! (node_exporter's textfile collector), and OTLP. Names and units follow the Prometheus
//! conventions (`tboxscope_…_seconds`, `_bytes`, counters exposed with `_total`); label values
//! are path labels, flow and socket names, and a few fixed words, and the flows and sockets
//! given a label of their own are bounded ([`MetricsOptions::max_flows`]): the others are
//! folded into one series labelled [`FOLDED`], and how many were folded is itself a metric.
pub mod text;

use tboxscope_engine::record::{HolIncident, HolProtocol, Summary};
use tboxscope_engine::snapshot::{
    AmplificationView, CaptureHealth, HolTotals, LatencyView, PathView, RedundancyView, Snapshot,
    TcpSocketView,
};

pub use text::{render, write_textfile, Format};

/// The label value of the series that sums the flows (or sockets) beyond the limit.
pub const FOLDED: &str = "_folded";

/// Flows and TCP sockets given a label of their own by default.
pub const DEFAULT_MAX_FLOWS: usize = 32;

/// What kind of metric a family is (the OpenMetrics types tboxscope uses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricKind {
    /// Monotonic total since the start (samples exposed as `NAME_total`).
    Counter,
    /// A value that goes up and down.
    Gauge,
    /// A distribution in cumulative buckets.
    Histogram,
    /// Constant 1 with descriptive labels (exposed as `NAME_info`).
    Info,
}

/// The unit of a family (the last word of its name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// A count, or a level.
    None,
    /// Seconds.
    Seconds,
    /// Bytes.
    Bytes,
    /// A fraction 0..1.
    Ratio,
}

impl Unit {
    /// The unit's name as OpenMetrics and OTLP write it (empty for none).
    pub fn name(self) -> &'static str {
        match self {
            Unit::None => "",
            Unit::Seconds => "seconds",
            Unit::Bytes => "bytes",
            Unit::Ratio => "ratio",
        }
    }

    /// The UCUM unit OTLP carries (none for counts and levels).
    pub fn ucum(self) -> &'static str {
        match self {
            Unit::None => "",
            Unit::Seconds => "s",
            Unit::Bytes => "By",
            Unit::Ratio => "1",
        }
    }
}

/// A distribution: cumulative counts at upper bounds (seconds, ascending), all samples and
/// their sum.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Histogram {
    /// `(upper bound in seconds, samples at or below it)`.
    pub buckets: Vec<(f64, u64)>,
    /// Samples.
    pub count: u64,
    /// Sum of the samples (seconds).
    pub sum: f64,
}

/// A sample's value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// Counter, gauge or info value.
    Number(f64),
    /// Histogram.
    Histogram(Histogram),
}

/// One series of a family: its labels and value.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Label names and values.
    pub labels: Vec<(&'static str, String)>,
    /// The value.
    pub value: Value,
}

/// A named metric with its series.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricFamily {
    /// Family name (for counters without `_total`, for info without `_info`).
    pub name: &'static str,
    /// One sentence.
    pub help: &'static str,
    /// Counter, gauge, histogram or info.
    pub kind: MetricKind,
    /// Unit (the end of `name`).
    pub unit: Unit,
    /// Series.
    pub samples: Vec<Sample>,
}

impl MetricFamily {
    fn new(name: &'static str, kind: MetricKind, unit: Unit, help: &'static str) -> Self {
        Self {
            name,
            help,
            kind,
            unit,
            samples: Vec::new(),
        }
    }

    fn push(&mut self, labels: Vec<(&'static str, String)>, value: f64) {
        self.samples.push(Sample {
            labels,
            value: Value::Number(value),
        });
    }
}

/// How the figures become metrics.
#[derive(Clone, Debug)]
pub struct MetricsOptions {
    /// Flows (and TCP sockets) given a label of their own; the rest are folded.
    pub max_flows: usize,
    /// This T-Box's id (`--tbox-id`), a label of `tboxscope_build_info`.
    pub tbox_id: Option<String>,
    /// tboxscope's version, a label of `tboxscope_build_info`.
    pub version: String,
}

impl Default for MetricsOptions {
    fn default() -> Self {
        Self {
            max_flows: DEFAULT_MAX_FLOWS,
            tbox_id: None,
            version: String::new(),
        }
    }
}

/// The engine's figures the metrics are made of: a live [`Snapshot`] or a run's [`Summary`].
#[derive(Clone, Copy, Debug)]
pub struct Figures<'a> {
    /// Engine time (newest observation), Unix epoch ns.
    pub ts_ns: u64,
    /// Per path.
    pub paths: &'a [PathView],
    /// Per flow.
    pub redundancy: &'a [RedundancyView],
    /// Latency per path and combined.
    pub latency: &'a LatencyView,
    /// Per flow.
    pub amplification: &'a [AmplificationView],
    /// Capture health.
    pub health: &'a CaptureHealth,
    /// Kernel TCP sockets (live modes only).
    pub tcp: &'a [TcpSocketView],
    /// HOL incidents known (open ones have no end).
    pub incidents: &'a [HolIncident],
    /// HOL stalls and their time, per protocol.
    pub hol: &'a [(HolProtocol, HolTotals)],
}

impl<'a> From<&'a Snapshot> for Figures<'a> {
    fn from(s: &'a Snapshot) -> Self {
        Self {
            ts_ns: s.ts_ns,
            paths: &s.paths,
            redundancy: &s.redundancy,
            latency: &s.latency,
            amplification: &s.amplification,
            health: &s.health,
            tcp: &s.flows.tcp,
            incidents: &s.incidents,
            hol: &s.hol,
        }
    }
}

impl<'a> From<&'a Summary> for Figures<'a> {
    fn from(s: &'a Summary) -> Self {
        Self {
            ts_ns: s.end_ns,
            paths: &s.paths,
            redundancy: &s.redundancy,
            latency: &s.latency,
            amplification: &s.amplification,
            health: &s.health,
            tcp: &[],
            incidents: &s.hol_incidents,
            hol: &s.hol,
        }
    }
}

fn label(name: &'static str, value: &str) -> (&'static str, String) {
    (name, value.to_owned())
}

fn seconds_from_ns(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// A latency distribution (µs bounds and counts from the engine) in seconds.
fn histogram(buckets: &[(u64, u64)], count: u64, mean_us: f64) -> Histogram {
    Histogram {
        buckets: buckets
            .iter()
            .map(|&(us, n)| (us as f64 / 1e6, n))
            .collect(),
        count,
        sum: mean_us * count as f64 / 1e6,
    }
}

/// Every metric family of `f`, in a fixed order.
pub fn families(f: &Figures<'_>, opts: &MetricsOptions) -> Vec<MetricFamily> {
    let mut out = vec![build_info(opts)];
    out.extend(path_families(f));
    out.extend(flow_families(f, opts.max_flows));
    out.extend(tcp_families(f, opts.max_flows));
    out.extend(health_families(f));
    out
}

fn build_info(opts: &MetricsOptions) -> MetricFamily {
    let mut m = MetricFamily::new(
        "tboxscope_build",
        MetricKind::Info,
        Unit::None,
        "tboxscope's version and the T-Box it watches (--tbox-id).",
    );
    let mut labels = vec![label("version", &opts.version)];
    if let Some(id) = &opts.tbox_id {
        labels.push(label("tbox_id", id));
    }
    m.push(labels, 1.0);
    m
}

fn path_families(f: &Figures<'_>) -> Vec<MetricFamily> {
    use MetricKind::{Counter, Gauge, Histogram as Hist};
    let mut latency = MetricFamily::new(
        "tboxscope_path_latency_seconds",
        Hist,
        Unit::Seconds,
        "Latency of each message copy on the path (one-way where both ends are captured, else send to first acknowledgment).",
    );
    let mut packets = MetricFamily::new(
        "tboxscope_path_packets",
        Counter,
        Unit::None,
        "Packets seen on the path.",
    );
    let mut bytes = MetricFamily::new(
        "tboxscope_path_bytes",
        Counter,
        Unit::Bytes,
        "Wire bytes seen on the path.",
    );
    let mut loss = MetricFamily::new(
        "tboxscope_path_message_loss_ratio",
        Gauge,
        Unit::Ratio,
        "Share of the closed messages this path should have carried and did not.",
    );
    let mut retx = MetricFamily::new(
        "tboxscope_path_retransmission_ratio",
        Gauge,
        Unit::Ratio,
        "Share of the path's data sends that were retransmissions (packets lost on the wire as the sender saw them).",
    );
    let mut up = MetricFamily::new(
        "tboxscope_path_up",
        Gauge,
        Unit::None,
        "1 while the path delivers, 0 during an outage.",
    );
    let mut outages = MetricFamily::new(
        "tboxscope_path_outages",
        Counter,
        Unit::None,
        "Outages of the path: nothing arrived over it while another path delivered or while it kept sending.",
    );
    let mut outage_s = MetricFamily::new(
        "tboxscope_path_outage_seconds",
        Counter,
        Unit::Seconds,
        "Time the path spent in outage, the current outage included.",
    );
    for p in f.paths {
        let l = || vec![label("path", &p.label)];
        latency.samples.push(Sample {
            labels: l(),
            value: Value::Histogram(histogram(
                &p.latency_buckets,
                p.latency.count,
                p.latency.mean_us,
            )),
        });
        packets.push(l(), p.packets as f64);
        bytes.push(l(), p.bytes as f64);
        loss.push(l(), p.loss_rate);
        retx.push(l(), p.retransmission_rate);
        up.push(l(), if p.up { 1.0 } else { 0.0 });
        outages.push(l(), p.outages as f64);
        outage_s.push(l(), seconds_from_ns(p.outage_total_ns));
    }
    let mut combined = MetricFamily::new(
        "tboxscope_message_latency_seconds",
        Hist,
        Unit::Seconds,
        "Latency of each message over all its paths: first arrival minus first send.",
    );
    let c = &f.latency.combined;
    combined.samples.push(Sample {
        labels: Vec::new(),
        value: Value::Histogram(histogram(&f.latency.combined_buckets, c.count, c.mean_us)),
    });
    vec![
        latency, combined, packets, bytes, loss, retx, up, outages, outage_s,
    ]
}

/// One flow's figures, summed over folded flows.
#[derive(Default)]
struct FlowFigures {
    messages: u64,
    on_all_paths: u64,
    wins: Vec<(String, u64)>,
    wire_bytes: u64,
    unique_bytes: u64,
}

impl FlowFigures {
    fn add(&mut self, r: Option<&RedundancyView>, a: Option<&AmplificationView>) {
        if let Some(r) = r {
            self.messages += r.messages;
            self.on_all_paths += r.on_all_paths;
            for s in &r.paths {
                match self.wins.iter_mut().find(|(p, _)| *p == s.path) {
                    Some((_, n)) => *n += s.wins,
                    None => self.wins.push((s.path.clone(), s.wins)),
                }
            }
        }
        if let Some(a) = a {
            self.wire_bytes += a.wire_bytes;
            self.unique_bytes += a.unique_payload_bytes;
        }
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

fn flow_families(f: &Figures<'_>, max_flows: usize) -> Vec<MetricFamily> {
    use MetricKind::{Counter, Gauge};
    // Every flow of either list, the busiest first.
    let mut names: Vec<&str> = f.redundancy.iter().map(|r| r.flow.as_str()).collect();
    for a in f.amplification {
        if !names.contains(&a.flow.as_str()) {
            names.push(&a.flow);
        }
    }
    let redundancy = |n: &str| f.redundancy.iter().find(|r| r.flow == n);
    let amplification = |n: &str| f.amplification.iter().find(|a| a.flow == n);
    let weight = |n: &str| {
        (
            redundancy(n).map_or(0, |r| r.messages),
            amplification(n).map_or(0, |a| a.wire_bytes),
        )
    };
    names.sort_by(|a, b| weight(b).cmp(&weight(a)).then(a.cmp(b)));
    let mut shown: Vec<(String, FlowFigures)> = Vec::new();
    let mut folded = FlowFigures::default();
    let mut folded_n = 0_u64;
    for (i, n) in names.iter().enumerate() {
        if i < max_flows {
            let mut fig = FlowFigures::default();
            fig.add(redundancy(n), amplification(n));
            shown.push(((*n).to_owned(), fig));
        } else {
            folded.add(redundancy(n), amplification(n));
            folded_n += 1;
        }
    }
    if folded_n > 0 {
        shown.push((FOLDED.to_owned(), folded));
    }
    let mut messages = MetricFamily::new(
        "tboxscope_flow_messages",
        Counter,
        Unit::None,
        "Closed messages of the flow.",
    );
    let mut dup = MetricFamily::new(
        "tboxscope_flow_duplication_ratio",
        Gauge,
        Unit::Ratio,
        "Share of the flow's messages carried on every one of its paths.",
    );
    let mut wins = MetricFamily::new(
        "tboxscope_flow_wins",
        Counter,
        Unit::None,
        "Messages of the flow whose first arrival was on the path.",
    );
    let mut amp = MetricFamily::new(
        "tboxscope_flow_amplification_ratio",
        Gauge,
        Unit::Ratio,
        "Wire bytes of the flow (copies, retransmissions, ACKs, FEC) per unique payload byte delivered.",
    );
    let mut wire = MetricFamily::new(
        "tboxscope_flow_wire_bytes",
        Counter,
        Unit::Bytes,
        "Wire bytes of the flow: copies, retransmissions, ACKs, FEC parity.",
    );
    let mut unique = MetricFamily::new(
        "tboxscope_flow_payload_bytes",
        Counter,
        Unit::Bytes,
        "Unique payload bytes the flow delivered (each message once).",
    );
    for (name, fig) in &shown {
        let l = || vec![label("flow", name)];
        messages.push(l(), fig.messages as f64);
        dup.push(l(), ratio(fig.on_all_paths, fig.messages));
        for (path, n) in &fig.wins {
            wins.push(vec![label("flow", name), label("path", path)], *n as f64);
        }
        amp.push(l(), ratio(fig.wire_bytes, fig.unique_bytes));
        wire.push(l(), fig.wire_bytes as f64);
        unique.push(l(), fig.unique_bytes as f64);
    }
    let mut count = MetricFamily::new(
        "tboxscope_flows_folded",
        Gauge,
        Unit::None,
        "Flows beyond the label limit, summed into the flow=\"_folded\" series.",
    );
    count.push(Vec::new(), folded_n as f64);
    vec![messages, dup, wins, amp, wire, unique, count]
}

fn tcp_families(f: &Figures<'_>, max_sockets: usize) -> Vec<MetricFamily> {
    use MetricKind::{Counter, Gauge};
    let mut retransmits = MetricFamily::new(
        "tboxscope_tcp_retransmits",
        Counter,
        Unit::None,
        "Kernel TCP retransmissions of the sockets on the path, by kind (fast, rto, tlp, loss_recovery, unknown).",
    );
    for p in f.paths {
        for (kind, n) in p.tcp_retransmits.by_kind() {
            let kind = match kind {
                tboxscope_engine::RetransmitKind::Fast => "fast",
                tboxscope_engine::RetransmitKind::Rto => "rto",
                tboxscope_engine::RetransmitKind::Tlp => "tlp",
                tboxscope_engine::RetransmitKind::LossRecovery => "loss_recovery",
                tboxscope_engine::RetransmitKind::Unknown => "unknown",
            };
            retransmits.push(vec![label("path", &p.label), label("kind", kind)], n as f64);
        }
    }
    let mut rto = MetricFamily::new(
        "tboxscope_tcp_rto_seconds",
        Gauge,
        Unit::Seconds,
        "The socket's current retransmission timeout (the largest of the folded sockets).",
    );
    let mut backoff = MetricFamily::new(
        "tboxscope_tcp_backoff_level",
        Gauge,
        Unit::None,
        "The socket's RTO backoff level, icsk_backoff (the largest of the folded sockets).",
    );
    let mut srtt = MetricFamily::new(
        "tboxscope_tcp_srtt_seconds",
        Gauge,
        Unit::Seconds,
        "The socket's smoothed round-trip time (the largest of the folded sockets).",
    );
    // Most recently active first (the snapshot's order).
    let mut sockets: Vec<&TcpSocketView> = f.tcp.iter().collect();
    sockets.sort_by_key(|s| std::cmp::Reverse(s.last_event_ns));
    let mut folded: Option<(u32, u8, u32)> = None;
    let mut folded_n = 0_u64;
    for (i, s) in sockets.iter().enumerate() {
        let fig = &s.figures;
        if i < max_sockets {
            let l = || vec![label("path", &s.path), label("socket", &s.socket)];
            rto.push(l(), f64::from(fig.rto_us) / 1e6);
            backoff.push(l(), f64::from(fig.backoff));
            srtt.push(l(), f64::from(fig.srtt_us) / 1e6);
        } else {
            folded_n += 1;
            let m = folded.get_or_insert((0, 0, 0));
            m.0 = m.0.max(fig.rto_us);
            m.1 = m.1.max(fig.backoff);
            m.2 = m.2.max(fig.srtt_us);
        }
    }
    if let Some((r, b, t)) = folded {
        let l = || vec![label("path", FOLDED), label("socket", FOLDED)];
        rto.push(l(), f64::from(r) / 1e6);
        backoff.push(l(), f64::from(b));
        srtt.push(l(), f64::from(t) / 1e6);
    }
    let mut sockets_folded = MetricFamily::new(
        "tboxscope_tcp_sockets_folded",
        Gauge,
        Unit::None,
        "TCP sockets beyond the label limit, shown as socket=\"_folded\".",
    );
    sockets_folded.push(Vec::new(), folded_n as f64);
    let mut stalls = MetricFamily::new(
        "tboxscope_hol_stalls",
        Counter,
        Unit::None,
        "Head-of-line stalls by protocol: a gap in a stream holding everything behind it.",
    );
    let mut stall_s = MetricFamily::new(
        "tboxscope_hol_stall_seconds",
        Counter,
        Unit::Seconds,
        "Time streams were held by head-of-line stalls, by protocol (overlapping stalls each count).",
    );
    for (protocol, t) in f.hol {
        let l = || vec![label("protocol", protocol.name())];
        stalls.push(l(), t.stalls as f64);
        stall_s.push(l(), seconds_from_ns(t.stall_ns));
    }
    let mut open = MetricFamily::new(
        "tboxscope_hol_stalls_open",
        Gauge,
        Unit::None,
        "Head-of-line stalls open now.",
    );
    let n_open = f.incidents.iter().filter(|i| i.end_ns.is_none()).count();
    open.push(Vec::new(), n_open as f64);
    vec![
        retransmits,
        rto,
        backoff,
        srtt,
        sockets_folded,
        stalls,
        stall_s,
        open,
    ]
}

fn health_families(f: &Figures<'_>) -> Vec<MetricFamily> {
    use MetricKind::{Counter, Gauge};
    let h = f.health;
    let mut observations = MetricFamily::new(
        "tboxscope_capture_observations",
        Counter,
        Unit::None,
        "Packets and kernel events the engine handled.",
    );
    observations.push(Vec::new(), h.observations as f64);
    let mut drops = MetricFamily::new(
        "tboxscope_capture_drops",
        Counter,
        Unit::None,
        "What the capture lost, by stage: libpcap (buffer full), ring_buffer (eBPF), tcp_hook_skipped (eBPF hook runs the kernel skipped), tcp_events (read, not handled), records (not drained), out_of_order (too late for the engine).",
    );
    for (stage, n) in [
        ("libpcap", h.pcap_dropped),
        ("ring_buffer", h.ring_buffer_dropped),
        ("tcp_hook_skipped", h.tcp_hook_runs_skipped),
        ("tcp_events", h.tcp_events_dropped),
        ("records", h.dropped_records),
        ("out_of_order", h.out_of_order),
    ] {
        drops.push(vec![label("stage", stage)], n as f64);
    }
    let mut unrecorded = MetricFamily::new(
        "tboxscope_tcp_retransmits_unrecorded",
        Counter,
        Unit::None,
        "Retransmitted segments the kernel counted (its total_retrans) that no eBPF record shows, whatever the cause; skipped runs of the retransmit hook are among them.",
    );
    unrecorded.push(Vec::new(), h.tcp_retrans_unrecorded as f64);
    let mut cong_late = MetricFamily::new(
        "tboxscope_tcp_cong_changes_seen_late",
        Counter,
        Unit::None,
        "Congestion-state changes of kernel TCP sockets no eBPF hook run reported, seen in a later snapshot of the socket and recorded then.",
    );
    cong_late.push(Vec::new(), h.tcp_cong_changes_late as f64);
    let mut evictions = MetricFamily::new(
        "tboxscope_capture_evictions",
        Counter,
        Unit::None,
        "Entries the engine forgot to stay within its memory bounds, by table.",
    );
    for (table, n) in [
        ("flows", h.evicted_flows),
        ("messages", h.evicted_messages),
        ("unacked", h.evicted_unacked),
        ("streams", h.evicted_streams),
        ("incidents", h.evicted_incidents),
    ] {
        evictions.push(vec![label("table", table)], n as f64);
    }
    let mut decrypt = MetricFamily::new(
        "tboxscope_quic_decrypt_failures",
        Counter,
        Unit::None,
        "QUIC packets that could not be decrypted (no key, or a wrong one).",
    );
    decrypt.push(Vec::new(), h.decrypt_failures as f64);
    let mut clamped = MetricFamily::new(
        "tboxscope_capture_clamped_latencies",
        Counter,
        Unit::None,
        "Latency samples above the histograms' range, recorded at its top.",
    );
    clamped.push(Vec::new(), h.clamped_latencies as f64);
    let mut late = MetricFamily::new(
        "tboxscope_late_copies",
        Counter,
        Unit::None,
        "Copies that arrived (or were acknowledged) on a path after their message closed without one there.",
    );
    late.push(Vec::new(), h.late_copies as f64);
    let mut held = MetricFamily::new(
        "tboxscope_messages_held",
        Counter,
        Unit::None,
        "Messages that waited past the message timeout for a copy held through an outage.",
    );
    held.push(Vec::new(), h.held_messages as f64);
    let mut held_too_long = MetricFamily::new(
        "tboxscope_messages_held_too_long",
        Counter,
        Unit::None,
        "Messages closed at the longest hold while still waiting for a copy held through an outage.",
    );
    held_too_long.push(Vec::new(), h.held_too_long as f64);
    let mut regrouped = MetricFamily::new(
        "tboxscope_messages_regrouped",
        Counter,
        Unit::None,
        "Open messages of a KCP session moved into the group of per-path sessions it turned out to be one of.",
    );
    regrouped.push(Vec::new(), h.regrouped_messages as f64);
    let mut flows = MetricFamily::new(
        "tboxscope_flows_tracked",
        Gauge,
        Unit::None,
        "Flows the engine tracks now.",
    );
    flows.push(Vec::new(), h.flows_tracked as f64);
    let mut open = MetricFamily::new(
        "tboxscope_messages_open",
        Gauge,
        Unit::None,
        "Messages waiting for their copies now.",
    );
    open.push(Vec::new(), h.open_messages as f64);
    let mut time = MetricFamily::new(
        "tboxscope_engine_time_seconds",
        Gauge,
        Unit::Seconds,
        "The engine's clock: the time of the newest packet or event handled (Unix epoch).",
    );
    time.push(Vec::new(), seconds_from_ns(f.ts_ns));
    vec![
        observations,
        unrecorded,
        cong_late,
        drops,
        evictions,
        decrypt,
        clamped,
        late,
        held,
        held_too_long,
        regrouped,
        flows,
        open,
        time,
    ]
}

#[cfg(test)]
mod tests;
