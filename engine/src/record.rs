//! Output records for JSON Lines: `message`, `window`, `outage`, `hol_incident`, `summary`.
//! Serialize a record's body with serde and write it with [`Record::kind`] and [`Record::ts_ns`]
//! as the line's `type` and `ts`.

use serde::{Deserialize, Serialize};

use crate::snapshot::{
    AmplificationView, CaptureHealth, LatencyKind, LatencyView, PathView, Percentiles,
    RedundancyView,
};

/// One copy of a message on one path.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CopyRecord {
    /// Path label.
    pub path: String,
    /// First send seen (reference clock), if the sending end was observed.
    pub sent: Option<u64>,
    /// First arrival seen at the far end, or first acknowledgment when one end is observed.
    pub arrived: Option<u64>,
    /// arrived − sent (µs), exact (not quantized).
    pub latency_us: Option<u64>,
    /// Times this copy was (re)sent on this path.
    pub transmissions: u32,
}

/// One message and its copies.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MessageRecord {
    /// Message id within its flow (e.g. `sn 17`, `stream 0 @ 1200..1800`, payload hash).
    pub id: String,
    /// Flow name.
    pub flow: String,
    /// First sighting (reference clock).
    pub first_seen_ns: u64,
    /// Payload bytes (once).
    pub bytes: u64,
    /// Copies, one per path that carried it; paths that did not carry it are absent.
    pub copies: Vec<CopyRecord>,
    /// Path whose copy arrived first.
    pub winner: Option<String>,
    /// First arrival − first send (µs).
    pub latency_us: Option<u64>,
    /// What latency measures.
    pub latency_kind: LatencyKind,
    /// Closed because memory was full rather than complete or timed out.
    pub evicted: bool,
    /// Sent on some of its flow's paths only: why each other path had no copy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_sent_on: Vec<NotSent>,
    /// For TCP: `wire` (a message cut from the byte stream a capture saw).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<TcpSource>,
}

/// A path of a message's flow that had no copy of it while another path did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotSent {
    /// Path label.
    pub path: String,
    /// Why.
    pub cause: NotSentCause,
    /// The stretch that explains it (the outage, the time the path was unused): start (ns).
    pub from_ns: u64,
    /// Its end, or the message's time while it went on (ns); `from_ns` for `in_use`.
    pub to_ns: u64,
}

/// Why a path had no copy of a message sent on another path of its flow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotSentCause {
    /// The path was in an outage.
    Outage,
    /// The sender put no copy of the flow on the path for a while around the message.
    Unused,
    /// The sender used the path and did not send this message on it: not redundant.
    #[default]
    InUse,
}

/// A copy that arrived (or was acknowledged) on a path after its message closed without one
/// there: its message's `message` record is already written, so the late copy has its own.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LateCopyRecord {
    /// Message id within its flow, as in its `message` record.
    pub id: String,
    /// Flow name.
    pub flow: String,
    /// Path that carried the late copy.
    pub path: String,
    /// When the copy arrived or was acknowledged (reference clock).
    pub seen_ns: u64,
    /// Time from the message's closing to the copy (µs; the closing kept to the millisecond).
    pub after_close_us: u64,
}

impl LateCopyRecord {
    /// How the live and replayed Events logs say it.
    pub fn describe(&self) -> String {
        format!(
            "late copy of {} on {}, {:.1} ms after the message closed without it ({})",
            self.id,
            self.path,
            self.after_close_us as f64 / 1000.0,
            self.flow
        )
    }
}

/// Figures for one sliding window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WindowRecord {
    /// Window start.
    pub start_ns: u64,
    /// Window end (the record's ts).
    pub end_ns: u64,
    /// Per path label: latency of copies closed in the window.
    pub per_path: Vec<(String, Percentiles)>,
    /// Combined latency of messages closed in the window.
    pub combined: Percentiles,
    /// Messages closed in the window.
    pub messages: u64,
    /// Of those, carried on every path.
    pub on_all_paths: u64,
    /// on_all_paths / messages.
    pub duplication: f64,
    /// Per path label: first-arrival win rate in the window.
    pub win_rates: Vec<(String, f64)>,
    /// Wire bytes / unique payload bytes in the window (all flows).
    pub amplification: f64,
}

/// A path outage.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OutageRecord {
    /// Sequential id.
    pub id: u64,
    /// Path label.
    pub path: String,
    /// Last sign of life before the silence.
    pub start_ns: u64,
    /// First sign of life after it (None while open).
    pub end_ns: Option<u64>,
    /// end − start (or so far), ns.
    pub duration_ns: u64,
    /// How it was detected ("no arrivals at the far end", "no ACKs while sending", …).
    pub evidence: String,
    /// Messages only other paths carried meanwhile.
    pub carried_by_others: u64,
    /// Messages lost on every path meanwhile.
    pub lost: u64,
}

/// Protocol of a HOL incident.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HolProtocol {
    /// TCP (kernel events, packets where captured).
    #[default]
    Tcp,
    /// KCP (sn gap at the receiver).
    Kcp,
    /// QUIC (gap on one stream).
    Quic,
}

impl HolProtocol {
    /// The protocol's name as the user writes it: `tcp`, `kcp`, `quic`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Tcp => "tcp",
            Self::Kcp => "kcp",
            Self::Quic => "quic",
        }
    }
}

/// How the loss was recovered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Recovery {
    /// Fast retransmit (duplicate ACKs / SACK / KCP fast resend).
    Fast,
    /// Retransmission timeout, with backoff.
    Timeout,
    /// Filled by a copy on another path.
    OtherPath,
    /// Filled by the original transmission arriving late (reordering): the sender's capture
    /// shows no retransmission.
    Reordered,
    /// Not known (yet).
    #[default]
    Unknown,
}

impl Recovery {
    /// How the gap was filled, in words: `fast retransmit`, `not known`, ….
    pub fn describe(self) -> &'static str {
        match self {
            Self::Fast => "fast retransmit",
            Self::Timeout => "timeout retransmit",
            Self::OtherPath => "filled by the other path",
            Self::Reordered => "filled by the late original (reordering)",
            Self::Unknown => "not known",
        }
    }
}

/// One piece of evidence on an incident's timeline.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// When.
    pub ts_ns: u64,
    /// Path.
    pub path: String,
    /// What was seen, e.g. "retransmit seq 1000 (rto, backoff 2)", "sn 41 arrived".
    pub what: String,
}

/// A head-of-line blocking incident.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HolIncident {
    /// Sequential id.
    pub id: u64,
    /// Protocol.
    pub protocol: HolProtocol,
    /// Flow (socket, conv, connection).
    pub flow: String,
    /// Stream, for QUIC.
    pub stream: Option<u64>,
    /// What was missing: "seq 1000", "sn 41", "offset 1200".
    pub missing: String,
    /// Gap opened.
    pub start_ns: u64,
    /// Gap filled (None while open).
    pub end_ns: Option<u64>,
    /// Stall duration so far (ns).
    pub stall_ns: u64,
    /// How it was recovered.
    pub recovery: Recovery,
    /// Highest RTO backoff level seen (TCP).
    pub backoff: u8,
    /// Retransmissions involved: fast.
    pub fast_retransmits: u32,
    /// Retransmissions involved: timeout.
    pub timeout_retransmits: u32,
    /// Bytes held behind the gap (0 when unknown).
    pub bytes_held: u64,
    /// Messages held behind the gap (0 when unknown).
    pub messages_held: u64,
    /// Other streams of the same connection that kept delivering during the gap (QUIC).
    pub streams_not_held: Vec<u64>,
    /// Timeline, oldest first (bounded).
    pub evidence: Vec<Evidence>,
    /// For TCP: `kernel` (the eBPF probes' events) or `wire` (a capture's segments).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<TcpSource>,
    /// For TCP from the wire: what the stall is measured between.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall_from: Option<HolStallFrom>,
}

/// What a TCP stall seen on the wire is measured between.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HolStallFrom {
    /// Arrivals at the receiver's capture: from the first segment held behind the hole to
    /// the one that filled it (the receiver's own stall, as far as its capture point).
    ReceiverArrivals,
    /// The sender's capture alone: from the hole's bytes' first transmission to the
    /// cumulative ACK passing their retransmission (an estimate: longer than the receiver's
    /// stall by about one round trip).
    SentToAcked,
}

/// Whole-run figures per flow for the headline table.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FlowSummary {
    /// Flow name.
    pub flow: String,
    /// Protocol.
    pub protocol: String,
    /// Matching mode.
    pub mode: Option<crate::config::MatchMode>,
    /// Combined latency.
    pub latency: Percentiles,
    /// Duplication (0..1).
    pub duplication: f64,
    /// Messages.
    pub messages: u64,
    /// Amplification ratio.
    pub amplification: f64,
    /// Outages seen while this flow was active.
    pub outages: u64,
    /// HOL incidents of this flow.
    pub hol_incidents: u64,
}

/// Whole-run figures.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// First observation.
    pub start_ns: u64,
    /// Finish time.
    pub end_ns: u64,
    /// Per flow, for the headline table.
    pub flows: Vec<FlowSummary>,
    /// Per path.
    pub paths: Vec<PathView>,
    /// Redundancy per flow.
    pub redundancy: Vec<RedundancyView>,
    /// Latency per path and combined, prediction vs observed.
    pub latency: LatencyView,
    /// Amplification per flow.
    pub amplification: Vec<AmplificationView>,
    /// All outages (bounded history; see totals).
    pub outages: Vec<OutageRecord>,
    /// All HOL incidents (bounded history; see totals).
    pub hol_incidents: Vec<HolIncident>,
    /// Outages ever opened.
    pub outages_total: u64,
    /// HOL incidents ever opened.
    pub incidents_total: u64,
    /// HOL stalls and their time, per protocol.
    #[serde(default)]
    pub hol: Vec<(HolProtocol, crate::snapshot::HolTotals)>,
    /// Health counters and inferences.
    pub health: CaptureHealth,
    /// TCP seen on the wire: retransmissions by kind and the RTO backoff ladder per
    /// connection and direction.
    #[serde(default)]
    pub tcp_wire: TcpWireSummary,
    /// The kernel's TCP retransmissions joined with the captures': where they disagree.
    #[serde(default)]
    pub tcp_join: TcpJoinSummary,
}

/// Who saw a TCP retransmission or timeout: the kernel's probes or a packet capture.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TcpSource {
    /// The eBPF probes on the sending host's kernel.
    #[default]
    Kernel,
    /// A packet capture (the engine's TCP wire matcher).
    Wire,
}

/// Why a TCP segment was sent again, in the kernel's words (`tcp_retransmit`'s `kind`), for
/// the kernel's records and the wire's alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TcpRetransmitKind {
    /// The retransmission timer expired (RTO).
    Rto,
    /// Fast retransmit / RACK: duplicate ACKs or SACK showed later data arriving.
    Fast,
    /// Tail loss probe.
    LossProbe,
    /// ACK-driven resend of the window after an RTO (still in Loss).
    LossRecovery,
    /// Bytes a router said were too big for the path (ICMP "fragmentation needed" / "packet
    /// too big"), sent again in smaller segments (Linux's `tcp_simple_retransmit`).
    PathMtu,
    /// Not classified.
    Other,
}

impl TcpRetransmitKind {
    /// Every kind, in a stable order (for reports).
    pub const ALL: [TcpRetransmitKind; 6] = [
        Self::Rto,
        Self::Fast,
        Self::LossProbe,
        Self::LossRecovery,
        Self::PathMtu,
        Self::Other,
    ];

    /// The kind's name as written in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Rto => "rto",
            Self::Fast => "fast",
            Self::LossProbe => "loss_probe",
            Self::LossRecovery => "loss_recovery",
            Self::PathMtu => "path_mtu",
            Self::Other => "other",
        }
    }
}

/// Why a retransmission seen on the wire was not needed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Spurious {
    /// The receiver reported the data twice with a D-SACK (RFC 2883).
    Dsack,
    /// The original was acknowledged (cumulatively or by SACK) before the retransmission
    /// was seen.
    AckedBefore,
    /// The ACK of the data echoed the original's timestamp, not the retransmission's
    /// (Eifel, RFC 3522).
    Timestamp,
}

/// `tcp_retransmit` from the wire: one retransmitted segment (the kernel's records of the same
/// type carry `"source": "kernel"` and the socket's figures instead of the wire's).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TcpRetransmitRecord {
    /// Always [`TcpSource::Wire`].
    pub source: TcpSource,
    /// Path label of the capture.
    pub path: String,
    /// Sender of the data `addr:port`.
    pub src: String,
    /// Receiver `addr:port`.
    pub dst: String,
    /// What made the sender resend.
    pub kind: TcpRetransmitKind,
    /// First sequence number resent.
    pub seq: u32,
    /// Sequence space resent (bytes; SYN and FIN count one).
    pub len: u32,
    /// RTO backoff level (for `rto`: inferred from the spacing of timeouts on the same data;
    /// otherwise the level the connection was at).
    pub backoff: u8,
    /// The retransmission timeout estimated from the RTT samples seen (RFC 6298, Linux's
    /// 200 ms floor), ms; at the receiver's capture, from the round trips it timed on its own
    /// sends (the path's, in the other direction).
    pub rto_ms: u64,
    /// Time since the data was first sent, ms.
    pub since_first_ms: u64,
    /// Set when the retransmission proved unnecessary, and how that was seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spurious: Option<Spurious>,
    /// When it was seen (reference clock, ns).
    #[serde(skip)]
    pub ts_ns: u64,
}

/// `tcp_rto` from the wire: a retransmission the timer made, with its backoff level.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TcpRtoRecord {
    /// Always [`TcpSource::Wire`].
    pub source: TcpSource,
    /// Path label of the capture.
    pub path: String,
    /// Sender of the data `addr:port`.
    pub src: String,
    /// Receiver `addr:port`.
    pub dst: String,
    /// Timeouts so far in this backoff episode (1 for the first).
    pub timeout: u32,
    /// The timeout that expired (ms): the silence before the retransmission.
    pub rto_ms: u64,
    /// Its backoff level (0 for the first), from the spacing of the timeouts.
    pub backoff: u8,
    /// First sequence number resent.
    pub seq: u32,
    /// When it was seen (reference clock, ns).
    #[serde(skip)]
    pub ts_ns: u64,
}

/// One direction of one TCP connection seen on the wire, by one capture.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TcpWireDirection {
    /// Path label of the capture.
    pub path: String,
    /// Sender `addr:port`.
    pub src: String,
    /// Receiver `addr:port`.
    pub dst: String,
    /// Data segments (SYN and FIN included), first transmissions and retransmissions.
    pub segments: u64,
    /// Retransmitted segments, per kind (in [`TcpRetransmitKind::ALL`]'s order; a recording
    /// made before a kind was added reads with none of it).
    #[serde(deserialize_with = "counts_per_kind")]
    pub retransmits: [u64; TcpRetransmitKind::ALL.len()],
    /// Of those, spurious.
    pub spurious: u64,
    /// Segments below the highest sequence seen that no earlier copy at this capture
    /// covered: reordered on the way (or, without timestamps, resent after a loss before a
    /// receiver-side capture point). Not retransmissions.
    #[serde(default)]
    pub out_of_order: u64,
    /// Of the retransmissions, those of data sent before the capture began (below the first
    /// sequence number it saw): their originals were not seen, so whether they were needed
    /// is unknown (never called spurious for want of an ACK seen before).
    #[serde(default)]
    pub unknown_history: u64,
    /// Window probes: a zero-length segment just below the acknowledged sequence (Linux) or
    /// one byte resent while the receiver's window is zero (persist timer). Not
    /// retransmissions: the kernel does not count them in TcpRetransSegs.
    #[serde(default)]
    pub window_probes: u64,
    /// Timeouts per backoff level (index = level, up to 15).
    pub rto_ladder: Vec<u64>,
    /// The longest timeout seen (ms).
    pub max_rto_ms: u64,
    /// RTT samples taken (Karn's rule; timestamps when present).
    pub rtt_samples: u64,
    /// Smoothed RTT at the end (µs).
    pub srtt_us: u64,
    /// The RTO estimate at the end (ms).
    pub rto_ms: u64,
    /// ICMP "fragmentation needed" / "packet too big" received about its segments.
    #[serde(default)]
    pub path_mtu_signals: u64,
    /// The smallest path MTU they named (bytes; 0 when none named one).
    #[serde(default)]
    pub path_mtu: u32,
    /// Its data was seen arriving at this capture (the receiver's end): its RTT samples time
    /// the receiver's ACKs (the ACK delay), not a round trip, and `rto_ms` estimates no timer
    /// of the sender's.
    #[serde(default)]
    pub at_receiver: bool,
    /// At the receiver, with the capture at the sender's end given too (the two paired): the
    /// retransmission and RTO records of this direction are the sender's capture's (its
    /// kinds, timers and backoff levels), not written again from here; counted here all the
    /// same.
    #[serde(default)]
    pub sender_captured: bool,
    /// At the receiver: data segments seen arriving that its ACKs then did not take (neither
    /// acknowledged nor SACKed 5 ms on, or before a resend of them came once the receiver had
    /// them in hand): dropped past the capture point, by the receiver's kernel (its memory,
    /// its window, its firewall). A lower bound: the arrivals its ACKs cannot tell are not
    /// judged. Each is a hole at the receiver, stalling the arrivals behind it.
    #[serde(default)]
    pub arrivals_not_taken: u64,
    /// At the receiver: arrivals not judged (resent while the receiver may have held them
    /// without listing them, its SACK option full, or before it had them in hand; beyond the
    /// bound of those awaiting an ACK; or still awaiting one when the capture ended, such as
    /// one out of order without SACK whose hole below was never filled).
    #[serde(default)]
    pub arrivals_not_judged: u64,
    /// At the receiver: arrivals not taken whose stall could not be made (the arrivals after
    /// them no longer remembered, or held merged with another piece): the stall they caused
    /// is missing from the records.
    #[serde(default)]
    pub drops_without_stall: u64,
}

impl TcpWireDirection {
    /// The arrivals the receiver did not take, in words, when there are some.
    pub fn not_taken_note(&self) -> Option<String> {
        let missing = match self.drops_without_stall {
            0 => String::new(),
            n => format!(
                "; for {n} of them the stall is missing: what came after them could not be \
                 redone"
            ),
        };
        (self.arrivals_not_taken > 0).then(|| {
            format!(
                "{} arrived here but were not taken by the receiver (dropped past the capture \
                 point: each a hole there, stalling the arrivals behind it{missing})",
                self.arrivals_not_taken
            )
        })
    }
}

/// Counts per [`TcpRetransmitKind`] from a list that may be shorter (made before the last kinds
/// were added, which come before `other`: its count stays the list's last).
fn counts_per_kind<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<[u64; TcpRetransmitKind::ALL.len()], D::Error> {
    let v: Vec<u64> = Deserialize::deserialize(d)?;
    let mut out = [0; TcpRetransmitKind::ALL.len()];
    if v.len() > out.len() {
        return Err(serde::de::Error::invalid_length(
            v.len(),
            &"a count per kind",
        ));
    }
    if let Some((&other, rest)) = v.split_last() {
        out[..rest.len()].copy_from_slice(rest);
        out[out.len() - 1] = other;
    }
    Ok(out)
}

impl TcpWireDirection {
    /// Retransmissions of every kind.
    pub fn retransmits_total(&self) -> u64 {
        self.retransmits.iter().sum()
    }
}

/// What the TCP wire matcher saw over the run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TcpWireSummary {
    /// Per connection direction that sent data, busiest first.
    pub directions: Vec<TcpWireDirection>,
    /// Connections followed.
    pub connections: u64,
    /// Connections forgotten to stay within the bound (least recently active first).
    pub evicted_connections: u64,
    /// Sent segments forgotten per direction to stay within the bound (their retransmission
    /// is then classified without the original's send time).
    pub evicted_segments: u64,
    /// Retransmissions whose verdict (spurious or not) was given early to stay within the
    /// bound.
    pub evicted_pending: u64,
    /// ICMP "fragmentation needed" / "packet too big" about no segment of a connection
    /// followed at its capture (sent before the capture began, or forgotten).
    #[serde(default)]
    pub path_mtu_unmatched: u64,
    /// Retransmission and RTO records of data as it arrived at a receiver's capture paired
    /// with its sender's, not written: the sender's capture writes each once.
    #[serde(default)]
    pub left_to_sender: u64,
}

/// Where the kernel's and the wire's views of one TCP retransmission disagree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TcpDisagreement {
    /// The kernel resent the segment; no copy of it reached the capture around that time
    /// (lost before the capture point, not sent after a local error, or dropped by the
    /// capture).
    NotOnWire,
    /// The kernel resent the segment; the capture saw that copy as the first one: the
    /// original never reached the capture (lost before the capture point).
    OriginalNotCaptured,
    /// Seen resent on the wire by a sender whose socket the kernel's probes followed; the
    /// probes did not report it (events lost, or a resend outside the probed call sites).
    NotInKernel,
}

impl TcpDisagreement {
    /// The name as written in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotOnWire => "not_on_wire",
            Self::OriginalNotCaptured => "original_not_captured",
            Self::NotInKernel => "not_in_kernel",
        }
    }
}

/// `tcp_disagreement`: one retransmission the kernel and a capture do not tell alike.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TcpDisagreementRecord {
    /// How they disagree.
    pub disagreement: TcpDisagreement,
    /// Path label of the capture compared with the kernel.
    pub path: String,
    /// Sender of the data `addr:port`.
    pub src: String,
    /// Receiver `addr:port`.
    pub dst: String,
    /// First sequence number resent.
    pub seq: u32,
    /// Sequence space resent (0 when the kernel did not say).
    pub len: u32,
    /// The kernel's kind, when the kernel reported the retransmission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_kind: Option<crate::input::RetransmitKind>,
    /// The wire's kind, when the capture saw it as a retransmission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire_kind: Option<TcpRetransmitKind>,
    /// When (the kernel's time, else the capture's; reference clock, ns).
    #[serde(skip)]
    pub ts_ns: u64,
}

/// The kernel's and one capture's retransmissions of one connection direction, joined.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpJoinDirection {
    /// Path label of the capture.
    pub path: String,
    /// Sender `addr:port` (the kernel socket's local end).
    pub src: String,
    /// Receiver `addr:port`.
    pub dst: String,
    /// Kernel retransmissions judged against this capture.
    pub kernel: u64,
    /// Retransmissions the capture saw from this sender, judged against the kernel.
    pub wire: u64,
    /// Seen by both.
    pub matched: u64,
    /// Of those, classified differently (e.g. the kernel's `rto`, the wire's `fast`).
    pub kinds_differ: u64,
    /// Kernel retransmissions no copy of which reached the capture.
    pub not_on_wire: u64,
    /// Kernel retransmissions the capture saw as first copies (original lost before it).
    pub original_not_captured: u64,
    /// Retransmissions on the wire the kernel did not report.
    pub not_in_kernel: u64,
}

impl TcpJoinDirection {
    /// Disagreements of every kind.
    pub fn disagreements(&self) -> u64 {
        self.not_on_wire + self.original_not_captured + self.not_in_kernel
    }
}

/// The kernel's TCP retransmissions joined with the captures' (connection by connection).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpJoinSummary {
    /// Per connection direction and capture, most disagreements first.
    pub directions: Vec<TcpJoinDirection>,
    /// Sums over `directions` (path, src and dst empty).
    pub totals: TcpJoinDirection,
    /// Kernel retransmissions no capture covered (a connection or a time the captures did not
    /// see): not judged.
    pub kernel_outside_captures: u64,
    /// Retransmissions on the wire whose sender the kernel's probes never reported, or outside
    /// the time they ran (another host's sockets): not judged.
    pub wire_not_probed: u64,
    /// Retransmissions forgotten unjudged to stay within the bounds.
    pub evicted: u64,
}

/// One output record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Record {
    /// A closed message.
    Message(MessageRecord),
    /// A closed window.
    Window(WindowRecord),
    /// An outage that ended (or was open at finish).
    Outage(OutageRecord),
    /// A HOL incident that ended (or was open at finish).
    HolIncident(HolIncident),
    /// A copy that came after its message closed.
    LateCopy(LateCopyRecord),
    /// A TCP retransmission seen on the wire.
    TcpRetransmit(TcpRetransmitRecord),
    /// A TCP retransmission timeout seen on the wire.
    TcpRto(TcpRtoRecord),
    /// A TCP retransmission the kernel and a capture disagree about.
    TcpDisagreement(TcpDisagreementRecord),
}

impl Record {
    /// JSON Lines `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            Record::Message(_) => "message",
            Record::Window(_) => "window",
            Record::Outage(_) => "outage",
            Record::HolIncident(_) => "hol_incident",
            Record::LateCopy(_) => "late_copy",
            Record::TcpRetransmit(_) => "tcp_retransmit",
            Record::TcpRto(_) => "tcp_rto",
            Record::TcpDisagreement(_) => "tcp_disagreement",
        }
    }

    /// JSON Lines `ts`: when the record's subject ended.
    pub fn ts_ns(&self) -> u64 {
        match self {
            Record::Message(m) => m.first_seen_ns,
            Record::Window(w) => w.end_ns,
            Record::Outage(o) => o.end_ns.unwrap_or(o.start_ns.saturating_add(o.duration_ns)),
            Record::HolIncident(h) => h.end_ns.unwrap_or(h.start_ns.saturating_add(h.stall_ns)),
            Record::LateCopy(l) => l.seen_ns,
            Record::TcpRetransmit(r) => r.ts_ns,
            Record::TcpRto(r) => r.ts_ns,
            Record::TcpDisagreement(r) => r.ts_ns,
        }
    }
}
