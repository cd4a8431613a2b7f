//! The ABI shared by the eBPF programs (`probe-ebpf`) and user space (`probe-user`).
//!
//! Everything here is `#[repr(C)]`, `Copy`, made of fixed-width integers with explicit padding,
//! so the kernel writes and user space reads the same bytes. Tags are plain integers (no Rust
//! enums cross the boundary). `aya::Pod` is implemented only with the `user` feature.
#![no_std]

/// Name of the ring buffer carrying [`TcpEvent`]s.
pub const MAP_EVENTS: &str = "EVENTS";
/// Name of the per-CPU array of [`DROP_REASONS`] counters.
pub const MAP_DROPS: &str = "DROPS";
/// Name of the hash map of watched ports (key `u16` host order, value `u8` = 1).
pub const MAP_FILTER_PORTS: &str = "FILTER_PORTS";
/// Name of the hash map of watched addresses (key `[u8; 16]`, IPv4 as `::ffff:a.b.c.d`).
pub const MAP_FILTER_ADDRS: &str = "FILTER_ADDRS";
/// Name of the per-socket LRU map used to thin out `tcp_probe` samples.
pub const MAP_CWND_LAST: &str = "CWND_LAST";
/// Name of the global [`ProbeConfig`] the programs read.
pub const GLOBAL_CONFIG: &str = "CONFIG";
/// Benchmark load generator: a program on `syscalls:sys_enter_getppid` that pushes one
/// synthetic cwnd event per call of the process `ProbeConfig::load_tgid` through the same ring
/// buffer, so the ring buffer and the reader can be driven faster than real TCP traffic can.
pub const LOAD_PROGRAM: &str = "ring_load";
/// Tracepoint category of [`LOAD_PROGRAM`].
pub const LOAD_CATEGORY: &str = "syscalls";
/// Tracepoint of [`LOAD_PROGRAM`].
pub const LOAD_TRACEPOINT: &str = "sys_enter_getppid";
/// Socket id of the synthetic events (no kernel socket has this address).
pub const LOAD_SOCK_ID: u64 = 1;

/// Size in bytes of the event ring buffer.
pub const RING_BYTES: u32 = 4 << 20;
/// Frequent events (cwnd samples, socket states) are submitted without waking the reader
/// (each wakeup is an interrupt, several microseconds in a VM) until this many bytes wait in
/// the ring; then they force one. User space also drains the ring on a short timer.
pub const RING_WAKE_BYTES: u64 = 256 << 10;
/// Entries of the per-socket `tcp_probe` thinning map.
pub const CWND_LAST_ENTRIES: u32 = 16384;
/// Entries of each filter map.
pub const FILTER_ENTRIES: u32 = 64;

/// [`TcpEvent::kind`]: a segment was retransmitted (`tcp:tcp_retransmit_skb`).
pub const KIND_RETRANSMIT: u8 = 1;
/// [`TcpEvent::kind`]: a cwnd/ssthresh/srtt sample (`tcp:tcp_probe`, thinned in the kernel).
pub const KIND_CWND: u8 = 2;
/// [`TcpEvent::kind`]: congestion state change (`tcp:tcp_cong_state_set`).
pub const KIND_CONG_STATE: u8 = 3;
/// [`TcpEvent::kind`]: socket state change (`sock:inet_sock_set_state`).
pub const KIND_SOCK_STATE: u8 = 4;

/// [`TcpEvent::detail`] of a retransmit: the RTO timer fired (socket in Loss, no timer pending).
pub const RETRANS_RTO: u8 = 1;
/// Retransmit while in Recovery (fast retransmit / RACK) or Disorder/CWR.
pub const RETRANS_FAST: u8 = 2;
/// Retransmit by the tail loss probe timer (`icsk_pending` = loss probe, not in Loss/Recovery).
pub const RETRANS_LOSS_PROBE: u8 = 3;
/// Retransmit while in Loss but ACK-driven (after an RTO, the rest of the window is resent).
pub const RETRANS_LOSS_RECOVERY: u8 = 4;
/// Anything else (e.g. an Open-state retransmit the kernel gave no reason for).
pub const RETRANS_OTHER: u8 = 5;

/// `icsk_ca_state` values (include/net/tcp.h `enum tcp_ca_state`).
pub const CA_OPEN: u8 = 0;
/// Disorder.
pub const CA_DISORDER: u8 = 1;
/// CWR.
pub const CA_CWR: u8 = 2;
/// Recovery.
pub const CA_RECOVERY: u8 = 3;
/// Loss.
pub const CA_LOSS: u8 = 4;

/// `icsk_pending` values (include/net/inet_connection_sock.h): retransmission timer.
pub const ICSK_TIME_RETRANS: u8 = 1;
/// Zero-window probe timer.
pub const ICSK_TIME_PROBE0: u8 = 3;
/// Tail loss probe timer.
pub const ICSK_TIME_LOSS_PROBE: u8 = 5;

/// [`TcpEvent::flags`]: the socket fields (rto, backoff, cwnd, ...) were read successfully.
pub const FLAG_SOCK_READ: u8 = 1;
/// [`TcpEvent::flags`]: `segs` was read from the skb control block.
pub const FLAG_SEGS_READ: u8 = 2;
/// [`TcpEvent::flags`]: `seq`/`end_seq` were read from the skb control block.
pub const FLAG_SEQ_READ: u8 = 4;

/// Index in the `DROPS` per-CPU array: ring buffer full (reserve failed).
pub const DROP_RING_FULL: u32 = 0;
/// Index: reading a tracepoint field or socket field failed.
pub const DROP_READ_FAILED: u32 = 1;
/// Number of drop counters.
pub const DROP_REASONS: u32 = 2;

/// AF_INET.
pub const AF_INET: u16 = 2;
/// AF_INET6.
pub const AF_INET6: u16 = 10;

/// One observation from the kernel: what happened, to which socket, and the socket's TCP state
/// at that moment (values as the kernel had them *before* it updated them for this event).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpEvent {
    /// `bpf_ktime_get_ns()` (CLOCK_MONOTONIC).
    pub ts_ns: u64,
    /// Kernel socket address, used only as an identity while the socket lives.
    pub sock_id: u64,
    /// Local address (IPv4 in the first 4 bytes).
    pub saddr: [u8; 16],
    /// Remote address (IPv4 in the first 4 bytes).
    pub daddr: [u8; 16],
    /// Local port, host order.
    pub sport: u16,
    /// Remote port, host order.
    pub dport: u16,
    /// AF_INET or AF_INET6.
    pub family: u16,
    /// `KIND_*`.
    pub kind: u8,
    /// Per kind: `RETRANS_*` for retransmits, the new ca_state for cong-state events, the new
    /// TCP state for socket-state events.
    pub detail: u8,
    /// `icsk_rto` in jiffies.
    pub rto_jiffies: u32,
    /// `icsk_backoff`.
    pub backoff: u8,
    /// `icsk_retransmits`.
    pub retransmits: u8,
    /// `icsk_ca_state` (before the change for cong-state events).
    pub ca_state: u8,
    /// `icsk_pending` (which timer is armed).
    pub pending: u8,
    /// `tp->total_retrans`.
    pub total_retrans: u32,
    /// `tp->snd_cwnd`.
    pub snd_cwnd: u32,
    /// `tp->snd_ssthresh`.
    pub snd_ssthresh: u32,
    /// `tp->srtt_us >> 3` (microseconds).
    pub srtt_us: u32,
    /// `tp->packets_out`.
    pub packets_out: u32,
    /// `tp->lost_out`.
    pub lost_out: u32,
    /// `tp->retrans_out`.
    pub retrans_out: u32,
    /// TCP state (`skc_state`) at the event (old state for socket-state events).
    pub state: u8,
    /// `FLAG_*`.
    pub flags: u8,
    /// Segments in the retransmitted skb (`tcp_gso_segs`), 0 if unknown.
    pub segs: u16,
    /// Retransmit: the tracepoint's `err` (0 = sent).
    pub err: i32,
    /// Retransmit: first sequence number of the resent skb (`tcp_skb_cb.seq`), with
    /// [`FLAG_SEQ_READ`].
    pub seq: u32,
    /// Retransmit: one past its last (`tcp_skb_cb.end_seq`, SYN/FIN count one).
    pub end_seq: u32,
    /// The socket's congestion-control algorithm (`icsk_ca_ops->name`, NUL-padded); all zero
    /// when unknown.
    pub ca_name: [u8; 16],
    /// Explicit tail padding; always zero.
    pub _pad: u32,
}

/// Byte offsets (and bitfield placement) of kernel struct fields, resolved from the running
/// kernel's BTF in user space and handed to the programs in [`ProbeConfig`]. Offsets are from
/// the start of `struct sock` / `struct tcp_sock` (they share their start).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SockOffsets {
    /// `sock_common.skc_family` (u16).
    pub family: u32,
    /// `skc_state` (u8).
    pub state: u32,
    /// `skc_num` local port, host order (u16).
    pub num: u32,
    /// `skc_dport` remote port, network order (u16).
    pub dport: u32,
    /// `skc_rcv_saddr` (u32).
    pub rcv_saddr: u32,
    /// `skc_daddr` (u32).
    pub daddr: u32,
    /// `skc_v6_rcv_saddr` (16 bytes).
    pub v6_rcv_saddr: u32,
    /// `skc_v6_daddr` (16 bytes).
    pub v6_daddr: u32,
    /// `icsk_rto` (u32, jiffies).
    pub icsk_rto: u32,
    /// `icsk_backoff` (u8).
    pub icsk_backoff: u32,
    /// `icsk_retransmits` (u8).
    pub icsk_retransmits: u32,
    /// `icsk_pending` (u8).
    pub icsk_pending: u32,
    /// Byte holding the `icsk_ca_state` bitfield.
    pub ca_state_byte: u32,
    /// Right shift of `icsk_ca_state` inside that byte.
    pub ca_state_shift: u32,
    /// Mask of `icsk_ca_state` after the shift.
    pub ca_state_mask: u32,
    /// `tp->total_retrans` (u32).
    pub total_retrans: u32,
    /// `tp->snd_cwnd` (u32).
    pub snd_cwnd: u32,
    /// `tp->snd_ssthresh` (u32).
    pub snd_ssthresh: u32,
    /// `tp->srtt_us` (u32, << 3).
    pub srtt_us: u32,
    /// `tp->packets_out` (u32).
    pub packets_out: u32,
    /// `tp->lost_out` (u32).
    pub lost_out: u32,
    /// `tp->retrans_out` (u32).
    pub retrans_out: u32,
    /// `sk_buff.cb` + `tcp_skb_cb.tcp_gso_segs` (u16); `u32::MAX` when unknown.
    pub skb_gso_segs: u32,
    /// `sk_buff.cb` + `tcp_skb_cb.seq` (u32); `u32::MAX` when unknown.
    pub skb_seq: u32,
    /// `sk_buff.cb` + `tcp_skb_cb.end_seq` (u32); `u32::MAX` when unknown.
    pub skb_end_seq: u32,
    /// `icsk_ca_ops` (pointer to the socket's `tcp_congestion_ops`); `u32::MAX` when unknown.
    pub icsk_ca_ops: u32,
    /// `tcp_congestion_ops.name` (16 bytes) from the start of that struct; `u32::MAX` when
    /// unknown.
    pub ca_ops_name: u32,
    /// `sk_protocol` (the IPPROTO_* `inet_sock_set_state` filters on).
    pub protocol: u32,
    /// Its width: 2 (a u16), or 1 on kernels where it is an 8-bit bitfield on a byte boundary.
    pub protocol_bytes: u32,
    /// Explicit padding.
    pub _pad: u32,
}

/// Everything the programs need from user space, set as one read-only global before load.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeConfig {
    /// Kernel struct field offsets from BTF.
    pub sock: SockOffsets,
    /// Minimum spacing of `tcp_probe` samples per socket when nothing changed (ns).
    pub cwnd_interval_ns: u64,
    /// 1 when `FILTER_PORTS` holds the only ports to report.
    pub filter_ports: u8,
    /// 1 when `FILTER_ADDRS` holds the only addresses to report.
    pub filter_addrs: u8,
    /// Explicit padding.
    pub _pad: [u8; 2],
    /// Benchmarks only: the process whose `getppid()` calls [`LOAD_PROGRAM`] turns into
    /// synthetic events (0: none).
    pub load_tgid: u32,
}

/// Per-socket memory of `tcp_probe` (value of `CWND_LAST`): the last emitted sample, the
/// socket's identity (read once, so a sample that is not due costs no identity reads) and
/// whether the user's filters exclude it. The key is the socket's address; `inet_sock_set_state`
/// removes the entry when the socket closes, and `ports` tells a reused address from the
/// connection it belonged to when that hook is missing. `ts_ns` = 0 asks for a sample at the next segment (set on retransmissions and
/// congestion-state changes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CwndLast {
    /// Time of the last emitted sample.
    pub ts_ns: u64,
    /// Local address as two words (IPv4 in the first 4 bytes).
    pub saddr: [u64; 2],
    /// Remote address as two words.
    pub daddr: [u64; 2],
    /// cwnd then.
    pub snd_cwnd: u32,
    /// `skc_portpair` as read (remote port in network order, then local port).
    pub ports: u32,
    /// AF_INET or AF_INET6.
    pub family: u16,
    /// Local port, host order.
    pub sport: u16,
    /// Remote port, host order.
    pub dport: u16,
    /// 1 when the user's filters exclude this socket (nothing is emitted for it).
    pub excluded: u8,
    /// Explicit padding.
    pub _pad: [u8; 9],
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: the struct is repr(C) and Copy, with only integer fields and explicit
    // padding fields, so every bit pattern is valid and there are no implicit padding bytes.
    unsafe impl aya::Pod for super::TcpEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::SockOffsets {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::ProbeConfig {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::CwndLast {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{align_of, size_of};

    #[test]
    fn sizes_are_pinned() {
        assert_eq!(size_of::<TcpEvent>(), 128);
        assert_eq!(align_of::<TcpEvent>(), 8);
        assert_eq!(size_of::<SockOffsets>(), 30 * 4);
        assert_eq!(size_of::<ProbeConfig>(), 120 + 8 + 8);
        assert_eq!(size_of::<CwndLast>(), 64);
    }

    #[test]
    fn no_implicit_padding_in_event() {
        // The sum of field sizes equals the struct size.
        let fields =
            8 + 8 + 16 + 16 + 2 + 2 + 2 + 1 + 1 + 4 + 4 + 7 * 4 + 1 + 1 + 2 + 4 + 4 + 4 + 16 + 4;
        assert_eq!(fields, size_of::<TcpEvent>());
    }
}
