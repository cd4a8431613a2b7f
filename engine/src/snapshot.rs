//! The engine's state as a plain value for the UI (one per frame) and the summary: paths,
//! redundancy, latency, amplification, capture health, flows, incidents, outages, events.
//! Every list is bounded; times are Unix epoch ns, durations/latencies µs unless named `_ns`.

use serde::{Deserialize, Serialize};

use crate::config::MatchMode;
use crate::input::{CaptureId, CongState, Host, RetransmitKind, TcpFigures};
use crate::record::{HolIncident, HolProtocol, OutageRecord};

/// Latency percentiles of one distribution (µs, hdrhistogram-quantized, see `latency`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Samples.
    pub count: u64,
    /// Smallest sample.
    pub min_us: u64,
    /// Median.
    pub p50_us: u64,
    /// 90th percentile.
    pub p90_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// 99.9th percentile.
    pub p999_us: u64,
    /// Largest sample.
    pub max_us: u64,
    /// Mean.
    pub mean_us: f64,
}

/// What kind of latency a figure is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LatencyKind {
    /// Arrival at the far end − send (both ends observed).
    #[default]
    OneWay,
    /// Send → first acknowledgment (one end observed; ack_delay removed for QUIC).
    AckRtt,
}

/// One point of a recent series (one window).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SeriesPoint {
    /// Window end.
    pub ts_ns: u64,
    /// Median in that window (µs), 0 without samples.
    pub p50_us: u64,
    /// 99th percentile in that window (µs), 0 without samples.
    pub p99_us: u64,
    /// Samples in that window.
    pub count: u64,
}

/// The upper bounds (µs) at which latency distributions are also given as cumulative counts
/// (`latency_buckets`): 1 ms to 30 s, a few per decade, for histograms in other tools.
pub const LATENCY_BUCKETS_US: [u64; 22] = [
    1_000, 2_000, 5_000, 10_000, 15_000, 20_000, 30_000, 50_000, 75_000, 100_000, 150_000, 200_000,
    300_000, 500_000, 750_000, 1_000_000, 2_000_000, 3_000_000, 5_000_000, 10_000_000, 20_000_000,
    30_000_000,
];

/// Kernel TCP retransmissions by kind (the eBPF probes' `tcp_retransmit` events).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpRetransmitCounts {
    /// Fast retransmits.
    pub fast: u64,
    /// After a retransmission timeout.
    pub rto: u64,
    /// Tail loss probes.
    pub tlp: u64,
    /// The queue resent in the Loss state after a timeout.
    pub loss_recovery: u64,
    /// Of unknown kind.
    pub unknown: u64,
}

impl TcpRetransmitCounts {
    /// Counts one retransmission of `kind`.
    pub fn add(&mut self, kind: RetransmitKind) {
        *self.slot(kind) += 1;
    }

    /// Adds `other`'s counts.
    pub fn add_all(&mut self, other: &Self) {
        for (kind, n) in other.by_kind() {
            *self.slot(kind) += n;
        }
    }

    /// The counts with their kinds.
    pub fn by_kind(&self) -> [(RetransmitKind, u64); 5] {
        [
            (RetransmitKind::Fast, self.fast),
            (RetransmitKind::Rto, self.rto),
            (RetransmitKind::Tlp, self.tlp),
            (RetransmitKind::LossRecovery, self.loss_recovery),
            (RetransmitKind::Unknown, self.unknown),
        ]
    }

    fn slot(&mut self, kind: RetransmitKind) -> &mut u64 {
        match kind {
            RetransmitKind::Fast => &mut self.fast,
            RetransmitKind::Rto => &mut self.rto,
            RetransmitKind::Tlp => &mut self.tlp,
            RetransmitKind::LossRecovery => &mut self.loss_recovery,
            RetransmitKind::Unknown => &mut self.unknown,
        }
    }
}

/// Head-of-line stalls of one protocol over the whole run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolTotals {
    /// Stalls ever opened.
    pub stalls: u64,
    /// Time streams were held: the closed stalls, and the open ones so far (ns); stalls that
    /// overlap in time each count.
    pub stall_ns: u64,
}

/// One path (e.g. `eth0`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PathView {
    /// Path label.
    pub label: String,
    /// False while the path is in outage.
    pub up: bool,
    /// How long the current outage has lasted (ns), when down.
    pub outage_for_ns: Option<u64>,
    /// Last time anything proved the path delivers.
    pub last_alive_ns: u64,
    /// Packets per second over the last window.
    pub packets_per_s: f64,
    /// Wire bytes per second over the last window.
    pub bytes_per_s: f64,
    /// Packets seen so far.
    pub packets: u64,
    /// Wire bytes seen so far.
    pub bytes: u64,
    /// Messages never carried: the share of closed messages this path should have carried
    /// but did not (0..1). Not the packet loss on the wire: a lost packet that a
    /// retransmission replaced still carried its message (see `retransmission_rate`).
    pub loss_rate: f64,
    /// Packets lost on the wire as the sender saw them: the share of data sends that were
    /// retransmissions (0..1), spurious ones included.
    pub retransmission_rate: f64,
    /// Latency of this path's copies over the whole run.
    pub latency: Percentiles,
    /// What the latency measures.
    pub latency_kind: LatencyKind,
    /// Recent windows, oldest first.
    pub recent: Vec<SeriesPoint>,
    /// The latency as `(bound µs, samples at or below it)` at [`LATENCY_BUCKETS_US`].
    #[serde(default)]
    pub latency_buckets: Vec<(u64, u64)>,
    /// Outages ever opened on this path.
    #[serde(default)]
    pub outages: u64,
    /// Time spent in outage so far: the closed outages and the current one (ns).
    #[serde(default)]
    pub outage_total_ns: u64,
    /// Kernel TCP retransmissions of the sockets on this path.
    #[serde(default)]
    pub tcp_retransmits: TcpRetransmitCounts,
}

/// One path's share of a flow's messages.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PathShare {
    /// Path label.
    pub path: String,
    /// Messages this path carried.
    pub carried: u64,
    /// Messages only this path carried.
    pub only: u64,
    /// Messages sent on other paths but not on this one while it was in an outage.
    #[serde(default)]
    pub not_sent_while_out: u64,
    /// How long those outages lasted (ns).
    #[serde(default)]
    pub out_ns: u64,
    /// Messages sent on other paths but not on this one while the sender was not using it
    /// (no copy of the flow on it for a while around them).
    #[serde(default)]
    pub not_sent_while_unused: u64,
    /// How long the sender left this path unused around those messages (ns).
    #[serde(default)]
    pub unused_ns: u64,
    /// Messages sent on other paths but not on this one while the sender used it.
    #[serde(default)]
    pub not_sent_while_in_use: u64,
    /// Messages whose first arrival was on this path.
    pub wins: u64,
    /// wins / messages with a winner.
    pub win_rate: f64,
}

/// Redundancy of one flow: is every message really duplicated?
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RedundancyView {
    /// Flow name.
    pub flow: String,
    /// Matching mode in use.
    pub mode: Option<MatchMode>,
    /// Whether the mode was forced by configuration.
    pub mode_forced: bool,
    /// Closed messages.
    pub messages: u64,
    /// Messages carried on every path of the flow (at least two).
    pub on_all_paths: u64,
    /// on_all_paths / messages (0..1).
    pub duplication: f64,
    /// Messages seen sent on every path (where the sending end is captured): whether the
    /// T-Box duplicates, whatever became of the copies.
    #[serde(default)]
    pub sent_on_all_paths: u64,
    /// Copies that arrived (or were acknowledged) on a path after their message closed
    /// without one there: carried late, not counted in `on_all_paths`.
    #[serde(default)]
    pub late_copies: u64,
    /// Per path.
    pub paths: Vec<PathShare>,
    /// Time between the first and the last copy of a message (µs).
    pub copy_spacing: Percentiles,
    /// One sentence, e.g. "redundancy confirmed: 99.8% of 3000 messages on both paths".
    pub verdict: String,
}

/// Independent-paths prediction vs the observed combined tail at one threshold.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TailPoint {
    /// Threshold t (µs).
    pub t_us: u64,
    /// Π over paths of P(path > t).
    pub predicted: f64,
    /// Observed P(combined > t).
    pub observed: f64,
}

/// Latency per path and for the redundant combination (min over paths).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyView {
    /// What the figures measure.
    pub kind: LatencyKind,
    /// Per path label.
    pub per_path: Vec<(String, Percentiles)>,
    /// Per message: first arrival − first send.
    pub combined: Percentiles,
    /// `combined` as `(bound µs, samples at or below it)` at [`LATENCY_BUCKETS_US`].
    #[serde(default)]
    pub combined_buckets: Vec<(u64, u64)>,
    /// Combined latency of messages during an outage of some path.
    pub during_outage: Percentiles,
    /// Combined latency of messages outside outages.
    pub outside_outage: Percentiles,
    /// Request → response time seen from one end (reply with the request's application id).
    pub request_response: Percentiles,
    /// Recent combined windows, oldest first.
    pub combined_recent: Vec<SeriesPoint>,
    /// Prediction vs observation at a few thresholds.
    pub tail: Vec<TailPoint>,
    /// Words: "paths look independent" / "paths fail together (shared cause)" / …
    pub verdict: String,
}

/// Bandwidth cost of one flow.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AmplificationView {
    /// Flow name.
    pub flow: String,
    /// Protocol (`kcp`, `quic`, `udp`, `tcp`).
    pub protocol: String,
    /// All wire bytes: copies, retransmissions, ACKs, FEC parity.
    pub wire_bytes: u64,
    /// Unique payload bytes delivered (each message once).
    pub unique_payload_bytes: u64,
    /// wire / unique (0 when nothing delivered).
    pub ratio: f64,
    /// Of the wire bytes: retransmissions.
    pub retransmit_bytes: u64,
    /// Of the wire bytes: ACK-only packets.
    pub ack_bytes: u64,
    /// Of the wire bytes: FEC parity and other overhead.
    pub overhead_bytes: u64,
}

/// Capture health: what the engine could not use or had to drop.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CaptureHealth {
    /// Observations handled.
    pub observations: u64,
    /// Observations older than the engine's time by more than the message timeout.
    pub out_of_order: u64,
    /// Flows tracked now (bounded by `max_flows`).
    pub flows_tracked: u64,
    /// Messages open now (bounded by `max_open_messages`).
    pub open_messages: u64,
    /// Flows evicted to stay under `max_flows`.
    pub evicted_flows: u64,
    /// Messages closed early to stay under `max_open_messages`.
    pub evicted_messages: u64,
    /// Unacknowledged packets forgotten to stay under `max_unacked_per_flow`.
    pub evicted_unacked: u64,
    /// QUIC streams forgotten (the least recently used) to stay within a connection's bound of
    /// tracked streams.
    #[serde(default)]
    pub evicted_streams: u64,
    /// Messages that waited past the message timeout for a copy held through an outage.
    #[serde(default)]
    pub held_messages: u64,
    /// Messages closed at `max_message_hold_ns` while still waiting for such a copy.
    #[serde(default)]
    pub held_too_long: u64,
    /// Copies that arrived (or were acknowledged) on a path after their message closed
    /// without one there.
    #[serde(default)]
    pub late_copies: u64,
    /// Open messages of a KCP session or QUIC connection moved into the group of per-path
    /// sessions or connections it turned out to be one of (seen before the other path's).
    #[serde(default)]
    pub regrouped_messages: u64,
    /// Incidents/outages dropped from history (still counted in the totals).
    pub evicted_incidents: u64,
    /// Records dropped because nobody drained them.
    pub dropped_records: u64,
    /// Latency samples clamped to `max_latency_us`.
    pub clamped_latencies: u64,
    /// Packets the capture library dropped (libpcap `ps_drop`); the engine leaves it 0, the
    /// capture driver fills it in.
    #[serde(default)]
    pub pcap_dropped: u64,
    /// Kernel events lost because the eBPF ring buffer was full; filled by the capture driver.
    #[serde(default)]
    pub ring_buffer_dropped: u64,
    /// Kernel TCP events read but not given to the engine (refused by the decoder, not
    /// convertible, or the queue to the UI full); filled by the capture driver.
    #[serde(default, skip_serializing_if = "crate::units::is_zero")]
    pub tcp_events_dropped: u64,
    /// Runs of the eBPF TCP hooks the kernel skipped (the same hook already running on that
    /// CPU): their events never existed; filled by the capture driver.
    #[serde(default, skip_serializing_if = "crate::units::is_zero")]
    pub tcp_hook_runs_skipped: u64,
    /// Retransmitted segments the kernel counted (`total_retrans`) that no kernel TCP record
    /// shows, whatever the cause (skipped runs of the retransmit hook among them); filled by
    /// the capture driver.
    #[serde(default, skip_serializing_if = "crate::units::is_zero")]
    pub tcp_retrans_unrecorded: u64,
    /// Congestion-state changes of kernel TCP sockets no hook run reported, seen in a later
    /// snapshot of the socket (written then); filled by the capture driver.
    #[serde(default, skip_serializing_if = "crate::units::is_zero")]
    pub tcp_cong_changes_late: u64,
    /// QUIC packets that could not be decrypted; filled by the decode glue.
    #[serde(default)]
    pub decrypt_failures: u64,
    /// Captures known, with what was inferred about them.
    pub captures: Vec<CaptureView>,
    /// Sentences describing inferences (pairing, sender end, clock offset).
    pub inferences: Vec<String>,
}

/// One capture point and what the engine inferred about it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CaptureView {
    /// Capture id.
    pub capture: CaptureId,
    /// Name.
    pub name: String,
    /// Path label it belongs to (after pairing).
    pub path: String,
    /// Host (stated or inferred).
    pub host: Host,
    /// Capture at the other end of the same path, if paired.
    pub paired_with: Option<CaptureId>,
    /// Clock offset applied (ns).
    pub clock_offset_ns: i64,
    /// Whether the offset was estimated (true) or given/zero (false).
    pub clock_offset_estimated: bool,
    /// Packets seen.
    pub packets: u64,
}

/// A KCP conversation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KcpConvView {
    /// Conversation id.
    pub conv: u32,
    /// Paths it was seen on.
    pub paths: Vec<String>,
    /// Data segments seen (copies and retransmissions included).
    pub segments: u64,
    /// Retransmitted segments (same sn again on the same path).
    pub retransmissions: u64,
    /// Highest sn seen.
    pub max_sn: u32,
    /// Latest una seen.
    pub una: u32,
    /// Latest window advertised.
    pub wnd: u16,
    /// Segments sent but not yet acknowledged.
    pub unacked: u64,
}

/// A QUIC connection.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QuicConnView {
    /// Connection label.
    pub conn: String,
    /// Paths it was seen on.
    pub paths: Vec<String>,
    /// Packets seen.
    pub packets: u64,
    /// Streams seen.
    pub streams: u64,
    /// Stream bytes re-sent (ranges seen again on the same path).
    pub retransmitted_bytes: u64,
    /// Packets sent but not yet acknowledged.
    pub unacked: u64,
}

/// A TCP socket as the kernel reports it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TcpSocketView {
    /// "local → remote".
    pub socket: String,
    /// Path.
    pub path: String,
    /// The kernel's latest figures.
    #[serde(flatten)]
    pub figures: TcpFigures,
    /// Congestion state.
    pub cong_state: CongState,
    /// Connection state name.
    pub state: String,
    /// Last event time.
    pub last_event_ns: u64,
    /// Recent kernel samples (cwnd, ssthresh, srtt, RTO, backoff over time), oldest first.
    #[serde(default)]
    pub history: Vec<TcpSample>,
    /// Recent retransmissions, oldest first: the RTO backoff ladder.
    #[serde(default)]
    pub retransmissions: Vec<TcpRetransmission>,
    /// Recent congestion-state changes `(ts_ns, new state)`, oldest first.
    #[serde(default)]
    pub cong_changes: Vec<(u64, CongState)>,
}

/// One kernel sample of a TCP socket's state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpSample {
    /// When.
    pub ts_ns: u64,
    /// The figures then.
    #[serde(flatten)]
    pub figures: TcpFigures,
}

/// One retransmission of a TCP socket, with the timer state at that moment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpRetransmission {
    /// When.
    pub ts_ns: u64,
    /// Why.
    pub kind: RetransmitKind,
    /// Sequence number retransmitted.
    pub seq: u32,
    /// RTO in force (µs).
    pub rto_us: u32,
    /// Backoff level.
    pub backoff: u8,
}

/// A plain datagram flow (matched by payload hash).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DatagramFlowView {
    /// Flow name.
    pub flow: String,
    /// Paths it was seen on.
    pub paths: Vec<String>,
    /// Datagrams seen.
    pub datagrams: u64,
}

/// Flows by protocol.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FlowsView {
    /// KCP conversations.
    pub kcp: Vec<KcpConvView>,
    /// QUIC connections.
    pub quic: Vec<QuicConnView>,
    /// TCP sockets.
    pub tcp: Vec<TcpSocketView>,
    /// Datagram flows.
    pub datagram: Vec<DatagramFlowView>,
}

/// Severity of an event line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Informational.
    #[default]
    Info,
    /// Worth a look.
    Warn,
    /// An outage or incident.
    Alert,
}

/// One line of the recent-events list.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EventLine {
    /// When.
    pub ts_ns: u64,
    /// How bad.
    pub severity: Severity,
    /// What happened, in words.
    pub text: String,
}

/// The whole state for one UI frame.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Engine time (newest observation), Unix epoch ns.
    pub ts_ns: u64,
    /// Time of the first observation.
    pub started_ns: u64,
    /// Paths, by label.
    pub paths: Vec<PathView>,
    /// Redundancy per flow.
    pub redundancy: Vec<RedundancyView>,
    /// Latency per path and combined.
    pub latency: LatencyView,
    /// Amplification per flow.
    pub amplification: Vec<AmplificationView>,
    /// Capture health and inferences.
    pub health: CaptureHealth,
    /// Flows by protocol.
    pub flows: FlowsView,
    /// HOL incidents, newest first (open ones included, `end_ns` = None).
    pub incidents: Vec<HolIncident>,
    /// Outages, newest first (the current one included, `end_ns` = None).
    pub outages: Vec<OutageRecord>,
    /// Recent events, newest first.
    pub events: Vec<EventLine>,
    /// Totals: outages ever opened.
    pub outages_total: u64,
    /// Totals: HOL incidents ever opened.
    pub incidents_total: u64,
    /// Totals: HOL stalls and their time, per protocol.
    #[serde(default)]
    pub hol: Vec<(HolProtocol, HolTotals)>,
    /// TCP seen on the wire: retransmissions by kind and the backoff ladder per direction.
    #[serde(default)]
    pub tcp_wire: crate::record::TcpWireSummary,
    /// The kernel's TCP retransmissions joined with the captures': where they disagree.
    #[serde(default)]
    pub tcp_join: crate::record::TcpJoinSummary,
    /// The transport decision from what was measured so far (`advise`), when evidence is
    /// collected; remade at most every [`crate::advice::ADVICE_EVERY_NS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advice: Option<Box<crate::advice::Advice>>,
}
