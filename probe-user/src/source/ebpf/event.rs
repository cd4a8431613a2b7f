//! Decoding ring-buffer records into owned, typed observations.
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use tboxscope_engine::input::CongestionControl;

use probe_common::{
    TcpEvent, AF_INET, AF_INET6, FLAG_SEGS_READ, FLAG_SEQ_READ, FLAG_SOCK_READ, KIND_CONG_STATE,
    KIND_CWND, KIND_RETRANSMIT, KIND_SOCK_STATE, RETRANS_FAST, RETRANS_LOSS_PROBE,
    RETRANS_LOSS_RECOVERY, RETRANS_OTHER, RETRANS_RTO,
};

/// Why a ring-buffer record was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The record is not exactly one `TcpEvent`.
    #[error("record is {0} bytes, expected {expected}", expected = std::mem::size_of::<TcpEvent>())]
    Length(usize),
    /// Unknown `kind` tag.
    #[error("unknown event kind {0}")]
    Kind(u8),
    /// Unknown address family.
    #[error("unknown address family {0}")]
    Family(u16),
}

/// Rejected records, by reason.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct DecodeStats {
    /// Wrong length.
    pub bad_length: u64,
    /// Unknown kind.
    pub bad_kind: u64,
    /// Unknown family.
    pub bad_family: u64,
}

impl DecodeStats {
    /// Counts one rejection.
    pub fn count(&mut self, e: DecodeError) {
        match e {
            DecodeError::Length(_) => self.bad_length += 1,
            DecodeError::Kind(_) => self.bad_kind += 1,
            DecodeError::Family(_) => self.bad_family += 1,
        }
    }

    /// Rejections of every reason.
    pub fn total(&self) -> u64 {
        self.bad_length + self.bad_kind + self.bad_family
    }
}

/// How the kernel came to retransmit (see `docs/tcp-probes.md` for how it is told apart): the
/// engine's type, shared with the retransmissions seen on the wire.
pub use tboxscope_engine::record::TcpRetransmitKind as RetransmitKind;

/// TCP congestion-avoidance state (`icsk_ca_state`), named as the records write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CaState {
    /// Normal.
    Open,
    /// Duplicate ACKs or SACK seen.
    Disorder,
    /// ECN or local congestion signal.
    Cwr,
    /// Fast recovery.
    Recovery,
    /// RTO loss recovery.
    Loss,
    /// A value the kernel does not define.
    Unknown,
}

impl CaState {
    /// From the kernel's number.
    pub fn from_kernel(s: u8) -> Self {
        match s {
            0 => Self::Open,
            1 => Self::Disorder,
            2 => Self::Cwr,
            3 => Self::Recovery,
            4 => Self::Loss,
            _ => Self::Unknown,
        }
    }
}

/// TCP socket state (`sk_state`), named as the records write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SocketState {
    /// `ESTABLISHED`.
    Established,
    /// `SYN_SENT`.
    SynSent,
    /// `SYN_RECV`.
    SynRecv,
    /// `FIN_WAIT1`.
    FinWait1,
    /// `FIN_WAIT2`.
    FinWait2,
    /// `TIME_WAIT`.
    TimeWait,
    /// `CLOSE`.
    Close,
    /// `CLOSE_WAIT`.
    CloseWait,
    /// `LAST_ACK`.
    LastAck,
    /// `LISTEN`.
    Listen,
    /// `CLOSING`.
    Closing,
    /// `NEW_SYN_RECV`.
    NewSynRecv,
    /// A value the kernel does not define.
    Unknown,
}

impl SocketState {
    /// From the kernel's number.
    pub fn from_kernel(s: u8) -> Self {
        match s {
            1 => Self::Established,
            2 => Self::SynSent,
            3 => Self::SynRecv,
            4 => Self::FinWait1,
            5 => Self::FinWait2,
            6 => Self::TimeWait,
            7 => Self::Close,
            8 => Self::CloseWait,
            9 => Self::LastAck,
            10 => Self::Listen,
            11 => Self::Closing,
            12 => Self::NewSynRecv,
            _ => Self::Unknown,
        }
    }

    /// The kernel's name (`ESTABLISHED`, ...), as the records write it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Established => "ESTABLISHED",
            Self::SynSent => "SYN_SENT",
            Self::SynRecv => "SYN_RECV",
            Self::FinWait1 => "FIN_WAIT1",
            Self::FinWait2 => "FIN_WAIT2",
            Self::TimeWait => "TIME_WAIT",
            Self::Close => "CLOSE",
            Self::CloseWait => "CLOSE_WAIT",
            Self::LastAck => "LAST_ACK",
            Self::Listen => "LISTEN",
            Self::Closing => "CLOSING",
            Self::NewSynRecv => "NEW_SYN_RECV",
            Self::Unknown => "UNKNOWN",
        }
    }
}

/// TCP state CLOSE.
pub const TCP_CLOSE: u8 = 7;

/// What the event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpEventKind {
    /// A retransmission.
    Retransmit {
        /// Why.
        kind: RetransmitKind,
        /// Segments resent (from the skb), if known.
        segs: Option<u16>,
        /// The tracepoint's error code (0 = sent).
        err: i32,
        /// First sequence number resent, if known.
        seq: Option<u32>,
        /// Sequence space resent (bytes; SYN and FIN count one), if known.
        len: Option<u32>,
    },
    /// A thinned cwnd/ssthresh/srtt sample.
    Cwnd,
    /// Congestion state change; `snapshot.ca_state` holds the old state.
    CongState {
        /// New state.
        new: u8,
    },
    /// Socket state change; `snapshot.state` holds the old state.
    SockState {
        /// New state.
        new: u8,
    },
}

/// The socket's TCP state when the event happened (before the kernel's update for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpSnapshot {
    /// `icsk_rto` in jiffies.
    pub rto_jiffies: u32,
    /// `icsk_backoff`.
    pub backoff: u8,
    /// `icsk_retransmits`.
    pub retransmits: u8,
    /// `icsk_ca_state`.
    pub ca_state: u8,
    /// `icsk_pending`.
    pub pending: u8,
    /// TCP state.
    pub state: u8,
    /// `total_retrans`.
    pub total_retrans: u32,
    /// cwnd (segments).
    pub cwnd: u32,
    /// ssthresh.
    pub ssthresh: u32,
    /// srtt (µs).
    pub srtt_us: u32,
    /// packets in flight.
    pub packets_out: u32,
    /// packets marked lost.
    pub lost_out: u32,
    /// packets retransmitted and unacked.
    pub retrans_out: u32,
    /// The socket's congestion-control algorithm, when it could be read.
    pub congestion_control: Option<CongestionControl>,
    /// False when the socket fields could not be read (then they are zero).
    pub valid: bool,
}

/// One decoded kernel observation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpObservation {
    /// Kernel CLOCK_MONOTONIC ns.
    pub mono_ns: u64,
    /// Kernel socket identity (valid while the socket lives).
    pub sock_id: u64,
    /// Local endpoint.
    pub src: SocketAddr,
    /// Remote endpoint.
    pub dst: SocketAddr,
    /// What happened.
    pub kind: TcpEventKind,
    /// Socket state at that moment.
    pub snap: TcpSnapshot,
}

/// Decodes one ring-buffer record. Never panics; every rejection has a reason.
pub fn decode(b: &[u8]) -> Result<TcpObservation, DecodeError> {
    if b.len() != std::mem::size_of::<TcpEvent>() {
        return Err(DecodeError::Length(b.len()));
    }
    // SAFETY: length checked; TcpEvent is repr(C) plain integers (any bit pattern is valid);
    // read_unaligned copes with any alignment of the ring-buffer slice.
    let ev: TcpEvent = unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<TcpEvent>()) };
    from_event(&ev)
}

/// Converts a raw event.
pub fn from_event(ev: &TcpEvent) -> Result<TcpObservation, DecodeError> {
    let (sip, dip): (IpAddr, IpAddr) = match ev.family {
        AF_INET => {
            let s = [ev.saddr[0], ev.saddr[1], ev.saddr[2], ev.saddr[3]];
            let d = [ev.daddr[0], ev.daddr[1], ev.daddr[2], ev.daddr[3]];
            (Ipv4Addr::from(s).into(), Ipv4Addr::from(d).into())
        }
        AF_INET6 => {
            let s = Ipv6Addr::from(ev.saddr);
            let d = Ipv6Addr::from(ev.daddr);
            // v4-mapped sockets show as plain IPv4, as users write them.
            (
                s.to_ipv4_mapped().map_or(IpAddr::V6(s), IpAddr::V4),
                d.to_ipv4_mapped().map_or(IpAddr::V6(d), IpAddr::V4),
            )
        }
        f => return Err(DecodeError::Family(f)),
    };
    let kind = match ev.kind {
        KIND_RETRANSMIT => TcpEventKind::Retransmit {
            kind: match ev.detail {
                RETRANS_RTO => RetransmitKind::Rto,
                RETRANS_FAST => RetransmitKind::Fast,
                RETRANS_LOSS_PROBE => RetransmitKind::LossProbe,
                RETRANS_LOSS_RECOVERY => RetransmitKind::LossRecovery,
                RETRANS_OTHER => RetransmitKind::Other,
                _ => RetransmitKind::Other,
            },
            segs: (ev.flags & FLAG_SEGS_READ != 0).then_some(ev.segs),
            err: ev.err,
            seq: (ev.flags & FLAG_SEQ_READ != 0).then_some(ev.seq),
            len: (ev.flags & FLAG_SEQ_READ != 0).then(|| ev.end_seq.wrapping_sub(ev.seq)),
        },
        KIND_CWND => TcpEventKind::Cwnd,
        KIND_CONG_STATE => TcpEventKind::CongState { new: ev.detail },
        KIND_SOCK_STATE => TcpEventKind::SockState { new: ev.detail },
        k => return Err(DecodeError::Kind(k)),
    };
    Ok(TcpObservation {
        mono_ns: ev.ts_ns,
        sock_id: ev.sock_id,
        src: SocketAddr::new(sip, ev.sport),
        dst: SocketAddr::new(dip, ev.dport),
        kind,
        snap: TcpSnapshot {
            rto_jiffies: ev.rto_jiffies,
            backoff: ev.backoff,
            retransmits: ev.retransmits,
            ca_state: ev.ca_state,
            pending: ev.pending,
            state: ev.state,
            total_retrans: ev.total_retrans,
            cwnd: ev.snd_cwnd,
            ssthresh: ev.snd_ssthresh,
            srtt_us: ev.srtt_us,
            packets_out: ev.packets_out,
            lost_out: ev.lost_out,
            retrans_out: ev.retrans_out,
            congestion_control: CongestionControl::new(&ev.ca_name),
            valid: ev.flags & FLAG_SOCK_READ != 0,
        },
    })
}

/// Jiffies to milliseconds with the kernel's CONFIG_HZ (checked; saturates).
pub fn jiffies_to_ms(j: u32, hz: u32) -> u64 {
    if hz == 0 {
        return 0;
    }
    u64::from(j).saturating_mul(1000) / u64::from(hz)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(ev: &TcpEvent) -> Vec<u8> {
        // SAFETY: TcpEvent has no implicit padding (pinned in probe-common's tests).
        unsafe {
            std::slice::from_raw_parts(
                (ev as *const TcpEvent).cast::<u8>(),
                std::mem::size_of::<TcpEvent>(),
            )
        }
        .to_vec()
    }

    fn sample() -> TcpEvent {
        let mut ev = TcpEvent {
            ts_ns: 5,
            sock_id: 0xffff_0000,
            family: AF_INET,
            sport: 40000,
            dport: 5201,
            kind: KIND_RETRANSMIT,
            detail: RETRANS_RTO,
            rto_jiffies: 51,
            backoff: 1,
            ca_state: 4,
            snd_cwnd: 1,
            snd_ssthresh: 7,
            srtt_us: 1234,
            flags: FLAG_SOCK_READ | FLAG_SEGS_READ,
            segs: 1,
            ..Default::default()
        };
        ev.saddr[..4].copy_from_slice(&[10, 0, 0, 1]);
        ev.daddr[..4].copy_from_slice(&[10, 0, 0, 2]);
        ev
    }

    #[test]
    fn decodes_ipv4_retransmit() {
        let o = decode(&bytes(&sample())).unwrap();
        assert_eq!(o.src.to_string(), "10.0.0.1:40000");
        assert_eq!(o.dst.to_string(), "10.0.0.2:5201");
        assert_eq!(
            o.kind,
            TcpEventKind::Retransmit {
                kind: RetransmitKind::Rto,
                segs: Some(1),
                err: 0,
                seq: None,
                len: None,
            }
        );
        assert_eq!(o.snap.backoff, 1);
        assert!(o.snap.valid);
        assert_eq!(jiffies_to_ms(o.snap.rto_jiffies, 250), 204);
    }

    #[test]
    fn congestion_control_name_is_read_when_valid() {
        let mut ev = sample();
        assert_eq!(decode(&bytes(&ev)).unwrap().snap.congestion_control, None);
        ev.ca_name[..5].copy_from_slice(b"cubic");
        let cc = decode(&bytes(&ev)).unwrap().snap.congestion_control;
        assert_eq!(cc.map(|c| c.to_string()), Some("cubic".to_owned()));
        // Not a name (garbage from a failed read): left out, the event kept.
        ev.ca_name = [0xff; 16];
        let o = decode(&bytes(&ev)).unwrap();
        assert_eq!(o.snap.congestion_control, None);
        assert!(o.snap.valid);
    }

    #[test]
    fn decodes_ipv6_and_mapped() {
        let mut ev = sample();
        ev.family = AF_INET6;
        ev.kind = KIND_CWND;
        ev.saddr = "fd00::1".parse::<Ipv6Addr>().unwrap().octets();
        ev.daddr = "::ffff:10.0.0.2".parse::<Ipv6Addr>().unwrap().octets();
        let o = decode(&bytes(&ev)).unwrap();
        assert_eq!(o.src.to_string(), "[fd00::1]:40000");
        assert_eq!(o.dst.to_string(), "10.0.0.2:5201");
        assert_eq!(o.kind, TcpEventKind::Cwnd);
    }

    #[test]
    fn state_names_are_the_kernels() {
        fn json<T: serde::Serialize>(v: &T) -> String {
            serde_json::to_value(v)
                .unwrap()
                .as_str()
                .unwrap()
                .to_owned()
        }
        let names: Vec<String> = (0..=13)
            .map(|s| json(&SocketState::from_kernel(s)))
            .collect();
        assert_eq!(
            names,
            [
                "UNKNOWN",
                "ESTABLISHED",
                "SYN_SENT",
                "SYN_RECV",
                "FIN_WAIT1",
                "FIN_WAIT2",
                "TIME_WAIT",
                "CLOSE",
                "CLOSE_WAIT",
                "LAST_ACK",
                "LISTEN",
                "CLOSING",
                "NEW_SYN_RECV",
                "UNKNOWN"
            ]
        );
        for s in 0..=13 {
            let state = SocketState::from_kernel(s);
            assert_eq!(json(&state), state.name());
        }
        let ca: Vec<String> = (0..=5).map(|s| json(&CaState::from_kernel(s))).collect();
        assert_eq!(
            ca,
            ["open", "disorder", "cwr", "recovery", "loss", "unknown"]
        );
    }

    #[test]
    fn rejects_every_bad_length_kind_and_family() {
        let b = bytes(&sample());
        let mut stats = DecodeStats::default();
        for len in 0..b.len() {
            let e = decode(&b[..len]).unwrap_err();
            stats.count(e);
        }
        assert_eq!(stats.bad_length, b.len() as u64);
        let mut ev = sample();
        ev.kind = 99;
        assert_eq!(decode(&bytes(&ev)), Err(DecodeError::Kind(99)));
        let mut ev = sample();
        ev.family = 1;
        assert_eq!(decode(&bytes(&ev)), Err(DecodeError::Family(1)));
    }
}
