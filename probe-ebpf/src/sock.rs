//! Reading a `struct sock` / `struct tcp_sock` through the BTF offsets in `CONFIG`.
//! Everything is read into small scalar structs first (no memset/memcpy of whole events, which
//! the BPF backend turns into byte loops), filtered, and only then written to the ring buffer.
use aya_ebpf::helpers::bpf_probe_read_kernel;
use probe_common::{AF_INET, AF_INET6};

use crate::{conf, CONFIG, FILTER_ADDRS, FILTER_PORTS};

/// Reads a `T` at `base + off` in kernel memory.
#[inline(always)]
pub fn read<T>(base: u64, off: u32) -> Result<T, i32> {
    unsafe { bpf_probe_read_kernel((base + off as u64) as *const T) }
}

/// Who the socket is.
pub struct Ident {
    pub family: u16,
    pub sport: u16,
    pub dport: u16,
    /// Addresses as two u64 words each (IPv4 in the first 4 bytes).
    pub saddr: [u64; 2],
    pub daddr: [u64; 2],
}

/// The socket's TCP state.
pub struct Snap {
    pub state: u8,
    pub backoff: u8,
    pub retransmits: u8,
    pub pending: u8,
    pub ca_state: u8,
    pub rto: u32,
    pub total_retrans: u32,
    pub cwnd: u32,
    pub ssthresh: u32,
    pub srtt_us: u32,
    pub packets_out: u32,
    pub lost_out: u32,
    pub retrans_out: u32,
    /// Congestion-control name as two words (zero when unknown).
    pub ca_name: [u64; 2],
}

/// Reads identity; `None` when not IPv4/IPv6 or excluded by the user's filters.
#[inline(always)]
pub fn ident(sk: u64) -> Result<Option<Ident>, i32> {
    let id = ident_any(sk)?;
    Ok((is_inet(&id) && passes_filter(&id)).then_some(id))
}

/// IPv4 or IPv6 (other families carry zero addresses).
#[inline(always)]
pub fn is_inet(id: &Ident) -> bool {
    id.family == AF_INET || id.family == AF_INET6
}

/// Reads identity, no filtering. Every field is always set (addresses zero for families other
/// than IPv4/IPv6): an `Option` here lets LLVM store an undefined payload, which the verifier
/// rejects as a read of an uninitialised register.
#[inline(always)]
pub fn ident_any(sk: u64) -> Result<Ident, i32> {
    let family: u16 = read(sk, conf!(sock.family))?;
    let sport: u16 = read(sk, conf!(sock.num))?;
    let dport = u16::from_be(read(sk, conf!(sock.dport))?);
    let (saddr, daddr) = if family == AF_INET {
        let s: u32 = read(sk, conf!(sock.rcv_saddr))?;
        let d: u32 = read(sk, conf!(sock.daddr))?;
        ([s as u64, 0], [d as u64, 0])
    } else if family == AF_INET6 {
        let s: [u64; 2] = read(sk, conf!(sock.v6_rcv_saddr))?;
        let d: [u64; 2] = read(sk, conf!(sock.v6_daddr))?;
        (s, d)
    } else {
        ([0, 0], [0, 0])
    };
    Ok(Ident {
        family,
        sport,
        dport,
        saddr,
        daddr,
    })
}

/// Whether the user's port/address filters let this socket through.
#[inline(always)]
pub fn passes_filter(id: &Ident) -> bool {
    if conf!(filter_ports) != 0 {
        let hit = unsafe {
            FILTER_PORTS.get(&id.sport).is_some() || FILTER_PORTS.get(&id.dport).is_some()
        };
        if !hit {
            return false;
        }
    }
    if conf!(filter_addrs) != 0 {
        let (s, d) = if id.family == AF_INET {
            (mapped(id.saddr[0]), mapped(id.daddr[0]))
        } else {
            (words_to_bytes(id.saddr), words_to_bytes(id.daddr))
        };
        let hit = unsafe { FILTER_ADDRS.get(&s).is_some() || FILTER_ADDRS.get(&d).is_some() };
        if !hit {
            return false;
        }
    }
    true
}

#[inline(always)]
fn words_to_bytes(w: [u64; 2]) -> [u8; 16] {
    let a = w[0].to_ne_bytes();
    let b = w[1].to_ne_bytes();
    [
        a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], b[0], b[1], b[2], b[3], b[4], b[5], b[6],
        b[7],
    ]
}

/// IPv4 address (low 4 bytes in memory order) as an IPv4-mapped IPv6 address.
#[inline(always)]
fn mapped(v4: u64) -> [u8; 16] {
    let a = (v4 as u32).to_ne_bytes();
    [
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a[0], a[1], a[2], a[3],
    ]
}

/// Reads the TCP state snapshot (rto, backoff, cwnd, ...).
#[inline(always)]
pub fn snap(sk: u64) -> Result<Snap, i32> {
    let cwnd: u32 = read(sk, conf!(sock.snd_cwnd))?;
    let srtt8: u32 = read(sk, conf!(sock.srtt_us))?;
    snap_with(sk, cwnd, srtt8 >> 3)
}

/// The snapshot, with cwnd and srtt (µs) already read.
#[inline(always)]
pub fn snap_with(sk: u64, cwnd: u32, srtt_us: u32) -> Result<Snap, i32> {
    Ok(Snap {
        state: read(sk, conf!(sock.state))?,
        rto: read(sk, conf!(sock.icsk_rto))?,
        backoff: read(sk, conf!(sock.icsk_backoff))?,
        retransmits: read(sk, conf!(sock.icsk_retransmits))?,
        pending: read(sk, conf!(sock.icsk_pending))?,
        ca_state: ca_state(sk)?,
        total_retrans: read(sk, conf!(sock.total_retrans))?,
        cwnd,
        ssthresh: read(sk, conf!(sock.snd_ssthresh))?,
        srtt_us,
        packets_out: read(sk, conf!(sock.packets_out))?,
        lost_out: read(sk, conf!(sock.lost_out))?,
        retrans_out: read(sk, conf!(sock.retrans_out))?,
        ca_name: ca_name(sk),
    })
}

/// `icsk_ca_ops->name` (zero when its offsets are unknown or a read fails: the event goes
/// out without it).
#[inline(always)]
fn ca_name(sk: u64) -> [u64; 2] {
    let (ops_off, name_off) = (conf!(sock.icsk_ca_ops), conf!(sock.ca_ops_name));
    if ops_off == u32::MAX || name_off == u32::MAX {
        return [0, 0];
    }
    match read::<u64>(sk, ops_off) {
        Ok(ops) if ops != 0 => read(ops, name_off).unwrap_or([0, 0]),
        _ => [0, 0],
    }
}

/// `sk_protocol` (IPPROTO_*): a u16, or one byte on kernels where it is an 8-bit bitfield.
#[inline(always)]
pub fn protocol(sk: u64) -> Result<u16, i32> {
    if conf!(sock.protocol_bytes) == 1 {
        Ok(u16::from(read::<u8>(sk, conf!(sock.protocol))?))
    } else {
        read(sk, conf!(sock.protocol))
    }
}

/// `icsk_ca_state` (a bitfield).
#[inline(always)]
pub fn ca_state(sk: u64) -> Result<u8, i32> {
    let ca: u8 = read(sk, conf!(sock.ca_state_byte))?;
    Ok((ca >> (conf!(sock.ca_state_shift) & 7)) & (conf!(sock.ca_state_mask) as u8))
}
