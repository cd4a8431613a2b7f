//! The JSON Lines records of `capture` (field names are part of the schema `tboxscope/1`):
//! written by `capture --json`, read back by `replay` ([`Record::deserialize_as`]), and turned
//! into the engine's [`TcpEvent`] by [`Record::engine_event`] (live and replay alike).
use std::net::SocketAddr;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize};
use tboxscope_engine::input::{
    self as engine, CongestionControl, TcpEvent, TcpEventKind, TcpFigures,
};
use tboxscope_engine::record::TcpSource;

use crate::source::ebpf::event::{jiffies_to_ms, CaState, SocketState, TcpSnapshot};
use crate::source::ebpf::{KernelDrops, RetransmitKind};

/// Identity of a connection in every TCP record (shared text: a record costs no copy of it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoints {
    /// Connection number in this capture (stable while the socket lives).
    pub conn: u64,
    /// Local endpoint `addr:port`.
    pub src: Arc<str>,
    /// Remote endpoint `addr:port`.
    pub dst: Arc<str>,
}

/// The socket's TCP state as the kernel had it when the event happened. Its names and units
/// are the schema's (`rto_ms`, `total_retrans`, and `retransmits` for `icsk_retransmits`), so it
/// does not embed the engine's [`TcpFigures`]: [`SockFields::figures`] is the one conversion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SockFields {
    /// Retransmission timeout (`icsk_rto`) in ms; absent when CONFIG_HZ is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
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
    pub ca_state: CaState,
    /// TCP state (ESTABLISHED, ...).
    pub state: SocketState,
    /// Congestion-control algorithm (cubic, bbr, reno, ...), when the probe could read it;
    /// recordings made before the field existed read without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion_control: Option<CongestionControl>,
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
            ca_state: CaState::from_kernel(s.ca_state),
            state: SocketState::from_kernel(s.state),
            congestion_control: s.congestion_control,
        }
    }

    /// The engine's figures: RTO in µs (0 when unknown), the connection's retransmission
    /// total.
    pub fn figures(&self) -> TcpFigures {
        TcpFigures {
            congestion_control: self.congestion_control,
            cwnd: self.cwnd,
            ssthresh: self.ssthresh,
            srtt_us: self.srtt_us,
            rto_us: self.rto_ms.map_or(0, |ms| {
                u32::try_from(ms.saturating_mul(1000)).unwrap_or(u32::MAX)
            }),
            backoff: self.backoff,
            retransmits: self.total_retrans,
        }
    }
}

/// `tcp_retransmit`: one retransmission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetransmitRecord {
    /// Who saw it: always `kernel` here (`wire` records come from the engine's TCP wire
    /// matcher); recordings made before the field existed read as `kernel`.
    #[serde(default)]
    pub source: TcpSource,
    /// Connection.
    #[serde(flatten)]
    pub ends: Endpoints,
    /// rto (RTO timer), fast, loss_probe, loss_recovery, path_mtu (the wire's only), other.
    pub kind: RetransmitKind,
    /// Segments resent by this call, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segs: Option<u16>,
    /// Kernel error of the resend (0 = sent; non-zero = not sent, e.g. a local drop).
    pub err: i32,
    /// First sequence number resent, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u32>,
    /// Sequence space resent (bytes; SYN and FIN count one), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub len: Option<u32>,
    /// Socket state before this retransmission.
    #[serde(flatten)]
    pub sock: SockFields,
}

/// `tcp_rto`: the retransmission timer expired.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RtoRecord {
    /// Who saw it: always `kernel` here (`wire` records come from the engine's TCP wire
    /// matcher); recordings made before the field existed read as `kernel`.
    #[serde(default)]
    pub source: TcpSource,
    /// Connection.
    #[serde(flatten)]
    pub ends: Endpoints,
    /// Timeouts so far in this backoff episode (1 for the first), from the kernel's backoff:
    /// an expiry whose hook run was missed still counts.
    pub timeout: u32,
    /// Socket state when the timer fired: `rto_ms` is the timeout that just expired and
    /// `backoff` its backoff level (0 for the first); the kernel then doubles the RTO and
    /// increments backoff.
    #[serde(flatten)]
    pub sock: SockFields,
}

/// `tcp_cwnd`: a cwnd/ssthresh/srtt sample (on change, or at most every N ms per socket).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CwndRecord {
    /// Connection.
    #[serde(flatten)]
    pub ends: Endpoints,
    /// State.
    #[serde(flatten)]
    pub sock: SockFields,
}

/// `tcp_cong_state`: congestion state change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CongStateRecord {
    /// Connection.
    #[serde(flatten)]
    pub ends: Endpoints,
    /// Old state.
    pub from: CaState,
    /// New state.
    pub to: CaState,
    /// The hook did not report the change: a later snapshot showed it, and `ts` and the
    /// socket's figures are that snapshot's (counted in `unrecorded_cong_changes`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub seen_late: bool,
    /// State before the change (`ca_state` = `from`), or the later snapshot's when
    /// `seen_late`.
    #[serde(flatten)]
    pub sock: SockFields,
}

/// `tcp_state`: socket state change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateRecord {
    /// Connection.
    #[serde(flatten)]
    pub ends: Endpoints,
    /// Old TCP state.
    pub from: SocketState,
    /// New TCP state.
    pub to: SocketState,
    /// Socket state (`state` = `from`).
    #[serde(flatten)]
    pub sock: SockFields,
}

/// `tcp_backoff_end`: the end of an RTO backoff episode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackoffEndRecord {
    /// Connection.
    #[serde(flatten)]
    pub ends: Endpoints,
    /// What ended it.
    pub ended_by: EndedBy,
    /// RTO expiries in the episode.
    pub timeouts: u32,
    /// Highest backoff level reached.
    pub max_backoff: u8,
    /// The RTO that expired first (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_rto_ms: Option<u64>,
    /// From the first expiry to the end (ms).
    pub episode_ms: u64,
    /// Total stall: `first_rto_ms + episode_ms`, i.e. from when the timer for the lost segment
    /// was armed (≈ when it was sent or last ACK arrived) to the end.
    pub stall_ms: u64,
}

/// What ended an RTO backoff episode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndedBy {
    /// The congestion state left Loss: new data was acknowledged.
    Ack,
    /// A cwnd sample with backoff 0 (when the cong-state hook is missing).
    AckSample,
    /// The connection closed.
    Close,
}

/// `drops`: events the kernel or the decoder could not deliver (cumulative since start).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DropsRecord {
    /// Kernel side.
    #[serde(flatten)]
    pub kernel: KernelDrops,
    /// Records rejected by the decoder.
    pub decode_rejected: u64,
    /// Connections evicted from the bounded tables.
    pub evicted: u64,
    /// Retransmitted segments the kernel counted with no record, over every connection
    /// ([`super::tracker::ConnTotals::unrecorded_retrans`]); absent in older recordings.
    #[serde(default)]
    pub unrecorded_retrans: u64,
    /// Congestion-state changes with no hook run, seen in a later snapshot, over every
    /// connection ([`super::tracker::ConnTotals::unrecorded_cong_changes`]); absent in older
    /// recordings.
    #[serde(default)]
    pub unrecorded_cong_changes: u64,
}

/// The path of an engine event whose path is not known.
pub const NO_PATH: &str = "-";

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

/// Why a record gives no engine event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotAnEvent {
    /// An endpoint that is not `addr:port`.
    #[error("endpoint {0} is not addr:port")]
    Endpoint(Arc<str>),
    /// A congestion-state change to a state the kernel does not define.
    #[error("congestion state unknown")]
    UnknownCongState,
}

fn socket(text: &Arc<str>) -> Result<SocketAddr, NotAnEvent> {
    text.parse()
        .map_err(|_| NotAnEvent::Endpoint(Arc::clone(text)))
}

fn retransmit_kind(k: RetransmitKind) -> engine::RetransmitKind {
    match k {
        RetransmitKind::Rto => engine::RetransmitKind::Rto,
        RetransmitKind::Fast => engine::RetransmitKind::Fast,
        RetransmitKind::LossProbe => engine::RetransmitKind::Tlp,
        RetransmitKind::LossRecovery => engine::RetransmitKind::LossRecovery,
        // A kind only the wire gives: the kernel's own records never carry it.
        RetransmitKind::PathMtu | RetransmitKind::Other => engine::RetransmitKind::Unknown,
    }
}

fn cong_state(s: CaState) -> Result<engine::CongState, NotAnEvent> {
    Ok(match s {
        CaState::Open => engine::CongState::Open,
        CaState::Disorder => engine::CongState::Disorder,
        CaState::Cwr => engine::CongState::Cwr,
        CaState::Recovery => engine::CongState::Recovery,
        CaState::Loss => engine::CongState::Loss,
        CaState::Unknown => return Err(NotAnEvent::UnknownCongState),
    })
}

impl Record {
    /// The connection the record is about.
    pub fn ends(&self) -> &Endpoints {
        match self {
            Record::Retransmit(r) => &r.ends,
            Record::Rto(r) => &r.ends,
            Record::Cwnd(r) => &r.ends,
            Record::CongState(r) => &r.ends,
            Record::State(r) => &r.ends,
            Record::BackoffEnd(r) => &r.ends,
        }
    }

    /// The engine's event for this record at `ts_ns` (Unix ns), on path [`NO_PATH`] (the
    /// caller names the path when it knows it). A backoff end carries no figures (zero).
    pub fn engine_event(&self, ts_ns: u64) -> Result<TcpEvent, NotAnEvent> {
        let (kind, figures) = match self {
            // A resend the kernel failed to send (err != 0: e.g. the original still queued
            // below TCP) put nothing on the wire and is left out of the kernel's own
            // retransmission counters: only its figures count.
            Record::Retransmit(r) if r.err != 0 => (TcpEventKind::Sample, r.sock.figures()),
            Record::Retransmit(r) => (
                TcpEventKind::Retransmit {
                    kind: retransmit_kind(r.kind),
                    seq: r.seq.unwrap_or(0),
                    len: r.len.unwrap_or(0),
                },
                r.sock.figures(),
            ),
            Record::Rto(r) => (TcpEventKind::RtoExpired, r.sock.figures()),
            Record::Cwnd(r) => (TcpEventKind::Sample, r.sock.figures()),
            Record::CongState(r) => (
                TcpEventKind::CongState {
                    state: cong_state(r.to)?,
                },
                r.sock.figures(),
            ),
            Record::State(r) => (
                TcpEventKind::StateChange {
                    old: r.from.name().to_owned(),
                    new: r.to.name().to_owned(),
                },
                r.sock.figures(),
            ),
            Record::BackoffEnd(_) => (TcpEventKind::BackoffEnd, TcpFigures::default()),
        };
        let ends = self.ends();
        Ok(TcpEvent {
            ts_ns,
            path: NO_PATH.to_owned(),
            local: socket(&ends.src)?,
            remote: socket(&ends.dst)?,
            kind,
            figures,
        })
    }

    /// Reads the fields of a line of type `type_name` as `capture --json` writes them;
    /// `None` when the type is not a TCP record's.
    pub fn deserialize_as<'de, D: Deserializer<'de>>(
        type_name: &str,
        fields: D,
    ) -> Result<Option<Self>, D::Error> {
        Ok(Some(match type_name {
            "tcp_retransmit" => Record::Retransmit(RetransmitRecord::deserialize(fields)?),
            "tcp_rto" => Record::Rto(RtoRecord::deserialize(fields)?),
            "tcp_cwnd" => Record::Cwnd(CwndRecord::deserialize(fields)?),
            "tcp_cong_state" => Record::CongState(CongStateRecord::deserialize(fields)?),
            "tcp_state" => Record::State(StateRecord::deserialize(fields)?),
            "tcp_backoff_end" => Record::BackoffEnd(BackoffEndRecord::deserialize(fields)?),
            _ => return Ok(None),
        }))
    }

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

#[cfg(test)]
mod drops_tests {
    use super::*;
    use crate::source::ebpf::SkippedByKernel;

    #[test]
    fn drops_line_names_the_skipped_runs_per_hook_and_reads_older_lines() {
        let d = DropsRecord {
            kernel: KernelDrops {
                ring_full: 1,
                read_failed: 0,
                skipped_by_kernel: SkippedByKernel {
                    retransmit: 2,
                    cong_state: 1,
                    ..SkippedByKernel::default()
                },
            },
            decode_rejected: 0,
            evicted: 0,
            unrecorded_retrans: 5,
            unrecorded_cong_changes: 1,
        };
        let v = serde_json::to_value(d).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "ring_full": 1, "read_failed": 0,
                "skipped_by_kernel": {
                    "retransmit": 2, "cwnd": 0, "cong_state": 1, "state": 0, "unread_hooks": 0
                },
                "decode_rejected": 0, "evicted": 0, "unrecorded_retrans": 5,
                "unrecorded_cong_changes": 1
            })
        );
        assert_eq!(serde_json::from_value::<DropsRecord>(v).unwrap(), d);
        // Recordings made before the count existed.
        let old: DropsRecord = serde_json::from_str(
            r#"{"ring_full":3,"read_failed":0,"decode_rejected":0,"evicted":0}"#,
        )
        .unwrap();
        assert_eq!(old.kernel.ring_full, 3);
        assert_eq!(old.kernel.skipped_by_kernel, SkippedByKernel::default());
        assert_eq!(old.unrecorded_retrans, 0);
        assert_eq!(old.unrecorded_cong_changes, 0);
    }
}
