//! The JSON Lines records of `capture` (field names are part of the schema `tboxscope/1`).
use std::sync::Arc;

use serde::Serialize;

use crate::source::ebpf::event::{ca_state_name, jiffies_to_ms, tcp_state_name, TcpSnapshot};
use crate::source::ebpf::{KernelDrops, RetransmitKind};

/// Identity of a connection in every TCP record (shared text: a record costs no copy of it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Endpoints {
    /// Connection number in this capture (stable while the socket lives).
    pub conn: u64,
    /// Local endpoint `addr:port`.
    pub src: Arc<str>,
    /// Remote endpoint `addr:port`.
    pub dst: Arc<str>,
}

/// The socket's TCP state as the kernel had it when the event happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SockFields {
    /// Retransmission timeout (`icsk_rto`) in ms; absent when CONFIG_HZ is unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rto_ms: Option<u64>,
    /// Exponential backoff count (`icsk_backoff`).
    pub backoff: u8,
    /// Consecutive timeouts (`icsk_retransmits`).
    pub retransmits: u8,
    /// Retransmitted segments over the connection's life (`total_retrans`).
    pub total_retrans: u32,
    /// Congestion window (segments).
    pub cwnd: u32,
    /// Slow-start threshold (segments).
    pub ssthresh: u32,
    /// Smoothed RTT (µs).
    pub srtt_us: u32,
    /// Segments in flight.
    pub packets_out: u32,
    /// Segments marked lost.
    pub lost_out: u32,
    /// Retransmitted segments not yet acknowledged.
    pub retrans_out: u32,
    /// Congestion state (open, disorder, cwr, recovery, loss).
    pub ca_state: &'static str,
    /// TCP state (ESTABLISHED, ...).
    pub state: &'static str,
}

impl SockFields {
    /// From a snapshot; `hz` converts jiffies.
    pub fn new(s: &TcpSnapshot, hz: Option<u32>) -> Self {
        Self {
            rto_ms: hz.map(|hz| jiffies_to_ms(s.rto_jiffies, hz)),
            backoff: s.backoff,
            retransmits: s.retransmits,
            total_retrans: s.total_retrans,
            cwnd: s.cwnd,
            ssthresh: s.ssthresh,
            srtt_us: s.srtt_us,
            packets_out: s.packets_out,
            lost_out: s.lost_out,
            retrans_out: s.retrans_out,
            ca_state: ca_state_name(s.ca_state),
            state: tcp_state_name(s.state),
        }
    }
}

/// `tcp_retransmit`: one retransmission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RetransmitRecord {
    /// Connection.
    #[serde(flatten)]
    pub ends: Endpoints,
    /// rto (RTO timer), fast, loss_probe, loss_recovery, other.
    pub kind: RetransmitKind,
    /// Segments resent by this call, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segs: Option<u16>,
    /// Kernel error of the resend (0 = sent; non-zero = not sent, e.g. a local drop).
    pub err: i32,
    /// First sequence number resent, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq: Option<u32>,
    /// Sequence space resent (bytes; SYN and FIN count one), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub len: Option<u32>,
    /// Socket state before this retransmission.
    #[serde(flatten)]
    pub sock: SockFields,
}

/// `tcp_rto`: the retransmission timer expired.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RtoRecord {
    /// Connection.
    #[serde(flatten)]
    pub ends: Endpoints,
    /// Timeouts so far in this backoff episode (1 for the first).
    pub timeout: u32,
    /// Socket state when the timer fired: `rto_ms` is the timeout that just expired and
    /// `backoff` its backoff level (0 for the first); the kernel then doubles the RTO and
    /// increments backoff.
    #[serde(flatten)]
    pub sock: SockFields,
}

/// `tcp_cwnd`: a cwnd/ssthresh/srtt sample (on change, or at most every N ms per socket).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CwndRecord {
    /// Connection.
    #[serde(flatten)]
    pub ends: Endpoints,
    /// State.
    #[serde(flatten)]
    pub sock: SockFields,
}

/// `tcp_cong_state`: congestion state change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CongStateRecord {
    /// Connection.
    #[serde(flatten)]
    pub ends: Endpoints,
    /// Old state.
    pub from: &'static str,
    /// New state.
    pub to: &'static str,
    /// State before the change (`ca_state` = `from`).
    #[serde(flatten)]
    pub sock: SockFields,
}

/// `tcp_state`: socket state change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StateRecord {
    /// Connection.
    #[serde(flatten)]
    pub ends: Endpoints,
    /// Old TCP state.
    pub from: &'static str,
    /// New TCP state.
    pub to: &'static str,
    /// Socket state (`state` = `from`).
    #[serde(flatten)]
    pub sock: SockFields,
}

/// `tcp_backoff_end`: the end of an RTO backoff episode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BackoffEndRecord {
    /// Connection.
    #[serde(flatten)]
    pub ends: Endpoints,
    /// `ack` (congestion state left Loss: new data acknowledged), `ack_sample` (seen from a
    /// cwnd sample with backoff 0, when the cong-state hook is missing) or `close`.
    pub ended_by: &'static str,
    /// RTO expiries in the episode.
    pub timeouts: u32,
    /// Highest backoff level reached.
    pub max_backoff: u8,
    /// The RTO that expired first (ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_rto_ms: Option<u64>,
    /// From the first expiry to the end (ms).
    pub episode_ms: u64,
    /// Total stall: `first_rto_ms + episode_ms`, i.e. from when the timer for the lost segment
    /// was armed (≈ when it was sent or last ACK arrived) to the end.
    pub stall_ms: u64,
}

/// `drops`: events the kernel or the decoder could not deliver (cumulative since start).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DropsRecord {
    /// Kernel side.
    #[serde(flatten)]
    pub kernel: KernelDrops,
    /// Records rejected by the decoder.
    pub decode_rejected: u64,
    /// Connections evicted from the bounded tables.
    pub evicted: u64,
}

/// A record and its type name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// `tcp_retransmit`.
    Retransmit(RetransmitRecord),
    /// `tcp_rto`.
    Rto(RtoRecord),
    /// `tcp_cwnd`.
    Cwnd(CwndRecord),
    /// `tcp_cong_state`.
    CongState(CongStateRecord),
    /// `tcp_state`.
    State(StateRecord),
    /// `tcp_backoff_end`.
    BackoffEnd(BackoffEndRecord),
}

impl Record {
    /// The `"type"` of the JSON line.
    pub fn type_name(&self) -> &'static str {
        match self {
            Record::Retransmit(_) => "tcp_retransmit",
            Record::Rto(_) => "tcp_rto",
            Record::Cwnd(_) => "tcp_cwnd",
            Record::CongState(_) => "tcp_cong_state",
            Record::State(_) => "tcp_state",
            Record::BackoffEnd(_) => "tcp_backoff_end",
        }
    }
}

impl Serialize for Record {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Record::Retransmit(r) => r.serialize(s),
            Record::Rto(r) => r.serialize(s),
            Record::Cwnd(r) => r.serialize(s),
            Record::CongState(r) => r.serialize(s),
            Record::State(r) => r.serialize(s),
            Record::BackoffEnd(r) => r.serialize(s),
        }
    }
}
