//! Engine configuration: thresholds, window sizes, memory bounds, matching overrides.

use serde::{Deserialize, Serialize};

use crate::input::AppIdRule;

/// How copies of one message are recognised across paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MatchMode {
    /// Identical datagram on both interfaces: payload hash.
    Datagram,
    /// KCP: same conv + sn; a message is a run of fragments (frg n-1 … 0).
    KcpSn,
    /// Multipath QUIC, one connection: same STREAM (id, offset range).
    QuicStream,
    /// Two separate connections: same message content hash.
    Content,
    /// Two separate connections: same application message id at a configured offset.
    AppId,
}

impl MatchMode {
    /// Every mode.
    pub const ALL: [MatchMode; 5] = [
        MatchMode::Datagram,
        MatchMode::KcpSn,
        MatchMode::QuicStream,
        MatchMode::Content,
        MatchMode::AppId,
    ];

    /// Short name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            MatchMode::Datagram => "datagram",
            MatchMode::KcpSn => "kcp-sn",
            MatchMode::QuicStream => "quic-stream",
            MatchMode::Content => "content",
            MatchMode::AppId => "app-id",
        }
    }
}

/// Selects flows for a [`ModeOverride`]; every field given must match.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowSelector {
    /// UDP/TCP port on either side.
    pub port: Option<u16>,
    /// KCP conversation.
    pub conv: Option<u32>,
    /// QUIC connection label.
    pub conn: Option<String>,
}

/// Forces a matching mode on the flows a selector picks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModeOverride {
    /// Which flows.
    pub selector: FlowSelector,
    /// Which mode.
    pub mode: MatchMode,
}

/// Engine settings. `Default` gives values suited to ≈50 messages/s control links.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// A path silent this long (while traffic continues elsewhere) is in outage.
    pub outage_threshold_ns: u64,
    /// A message is closed (its missing copies counted lost) this long after its first
    /// sighting; once a path had an outage, a message missing a copy waits longer by the
    /// longest outage seen (copies held through one arrive after it), up to
    /// `max_message_hold_ns`.
    pub message_timeout_ns: u64,
    /// The longest a message waits for its copies after its first sighting, outages or not
    /// (at least the message timeout; past it the message closes, counted as held too long).
    #[serde(default = "default_max_message_hold_ns")]
    pub max_message_hold_ns: u64,
    /// Length of one sliding window (a `window` record per window).
    pub window_ns: u64,
    /// Windows kept for the recent series in the snapshot.
    pub window_history: usize,
    /// Latency histograms saturate at this value (µs); larger samples are clamped and counted.
    pub max_latency_us: u64,
    /// Most flows tracked at once; beyond, the least recently active is evicted (counted).
    pub max_flows: usize,
    /// Most open (not yet closed) messages; beyond, the oldest is closed early (counted).
    pub max_open_messages: usize,
    /// Most unacknowledged packets remembered per flow for time-to-ACK.
    pub max_unacked_per_flow: usize,
    /// Outages and HOL incidents kept for the snapshot (newest); older ones counted.
    pub max_incidents: usize,
    /// Recent event lines kept for the snapshot (0: none, and none is written: a run that
    /// takes no snapshot).
    pub max_events: usize,
    /// Records waiting for `drain_records` before the oldest are dropped (counted).
    pub max_pending_records: usize,
    /// Emit one `message` record per closed message.
    pub emit_messages: bool,
    /// Collect what `advise` is made from (each path's copies, bounded), for
    /// [`crate::Engine::evidence`].
    pub collect_evidence: bool,
    /// Where the application message id sits, for [`MatchMode::AppId`] (used by the glue with
    /// [`AppIdRule::extract`]).
    pub app_id: Option<AppIdRule>,
    /// Per-flow matching overrides (first match wins).
    pub mode_overrides: Vec<ModeOverride>,
    /// Combined tail observed / predicted above this ratio means "paths fail together".
    pub shared_cause_ratio: f64,
    /// The captures may include both ends of a path, from two hosts (capture files brought
    /// together), not yet paired: a young flow's messages wait for the pairing (up to the
    /// message timeout) instead of closing on a copy seen at one end. Off for captures taken
    /// on one host (live), which cannot show both ends of a path.
    #[serde(default)]
    pub await_pairing: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            outage_threshold_ns: 1_000_000_000,
            message_timeout_ns: 5_000_000_000,
            max_message_hold_ns: default_max_message_hold_ns(),
            window_ns: 1_000_000_000,
            window_history: 120,
            max_latency_us: 60_000_000,
            max_flows: 4096,
            max_open_messages: 65_536,
            max_unacked_per_flow: 4096,
            max_incidents: 256,
            max_events: 200,
            max_pending_records: 100_000,
            emit_messages: true,
            collect_evidence: false,
            app_id: None,
            mode_overrides: Vec::new(),
            shared_cause_ratio: 10.0,
            await_pairing: false,
        }
    }
}

/// 60 s: ikcp's largest retransmission timeout (`IKCP_RTO_MAX`), so a copy KCP keeps
/// retransmitting through an outage comes within it after the outage ends.
fn default_max_message_hold_ns() -> u64 {
    60_000_000_000
}
