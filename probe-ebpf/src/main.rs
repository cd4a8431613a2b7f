//! tboxscope's kernel programs: TCP tracepoints that read the socket's state through offsets
//! resolved from the running kernel's BTF (handed over in the `CONFIG` global) and push
//! [`TcpEvent`]s into a ring buffer. Every failed reserve or read is counted in `DROPS`.
#![no_std]
#![no_main]

mod sock;

use sock::{Ident, Snap};

use aya_ebpf::{
    helpers::bpf_ktime_get_ns,
    macros::{map, tracepoint},
    maps::{HashMap, LruHashMap, PerCpuArray, RingBuf},
    programs::TracePointContext,
};
use probe_common::{
    CwndLast, ProbeConfig, TcpEvent, CA_CWR, CA_DISORDER, CA_LOSS, CA_RECOVERY,
    CWND_LAST_ENTRIES, DROP_READ_FAILED, DROP_REASONS, DROP_RING_FULL, FILTER_ENTRIES,
    FLAG_SEGS_READ, FLAG_SOCK_READ, ICSK_TIME_LOSS_PROBE, KIND_CONG_STATE, KIND_CWND, KIND_RETRANSMIT,
    KIND_SOCK_STATE, RETRANS_FAST, RETRANS_LOSS_PROBE, RETRANS_LOSS_RECOVERY, RETRANS_OTHER,
    RETRANS_RTO, RING_BYTES,
};

/// Offsets and settings from user space (read-only data, set before load).
#[no_mangle]
static CONFIG: ProbeConfig = unsafe { core::mem::zeroed() };

#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(RING_BYTES, 0);

#[map]
static DROPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(DROP_REASONS, 0);

#[map]
static FILTER_PORTS: HashMap<u16, u8> = HashMap::with_max_entries(FILTER_ENTRIES, 0);

#[map]
static FILTER_ADDRS: HashMap<[u8; 16], u8> = HashMap::with_max_entries(FILTER_ENTRIES, 0);

#[map]
static CWND_LAST: LruHashMap<u64, CwndLast> = LruHashMap::with_max_entries(CWND_LAST_ENTRIES, 0);

/// Reads one field of the `CONFIG` global without letting the compiler fold the zero default.
macro_rules! conf {
    ($($f:ident).+) => {
        unsafe { core::ptr::read_volatile(&CONFIG.$($f).+) }
    };
}
pub(crate) use conf;

/// TCP state CLOSE.
const TCP_CLOSE: u8 = 7;
/// IPPROTO_TCP.
const IPPROTO_TCP: u16 = 6;

#[inline(always)]
fn count_drop(reason: u32) {
    if let Some(p) = DROPS.get_ptr_mut(reason) {
        // Per-CPU slot: no other writer.
        unsafe { *p += 1 };
    }
}

/// Kind-specific fields of an event.
struct Extra {
    kind: u8,
    detail: u8,
    flags: u8,
    segs: u16,
    err: i32,
}

/// Writes one event straight into a ring-buffer slot, field by field; counts a drop when the
/// ring is full.
#[inline(always)]
fn emit(sk: u64, id: &Ident, s: &Snap, x: &Extra) {
    let Some(mut entry) = EVENTS.reserve::<TcpEvent>(0) else {
        count_drop(DROP_RING_FULL);
        return;
    };
    let p = entry.as_mut_ptr();
    // SAFETY: `p` points to a reserved, exclusively owned slot of size_of::<TcpEvent>() bytes;
    // every field is written before submit.
    unsafe {
        (*p).ts_ns = bpf_ktime_get_ns();
        (*p).sock_id = sk;
        let sa = (&raw mut (*p).saddr).cast::<u64>();
        sa.write(id.saddr[0]);
        sa.add(1).write(id.saddr[1]);
        let da = (&raw mut (*p).daddr).cast::<u64>();
        da.write(id.daddr[0]);
        da.add(1).write(id.daddr[1]);
        (*p).sport = id.sport;
        (*p).dport = id.dport;
        (*p).family = id.family;
        (*p).kind = x.kind;
        (*p).detail = x.detail;
        (*p).rto_jiffies = s.rto;
        (*p).backoff = s.backoff;
        (*p).retransmits = s.retransmits;
        (*p).ca_state = s.ca_state;
        (*p).pending = s.pending;
        (*p).total_retrans = s.total_retrans;
        (*p).snd_cwnd = s.cwnd;
        (*p).snd_ssthresh = s.ssthresh;
        (*p).srtt_us = s.srtt_us;
        (*p).packets_out = s.packets_out;
        (*p).lost_out = s.lost_out;
        (*p).retrans_out = s.retrans_out;
        (*p).state = s.state;
        (*p).flags = x.flags | FLAG_SOCK_READ;
        (*p).segs = x.segs;
        (*p).err = x.err;
        (*p)._pad = 0;
    }
    entry.submit(0);
}

#[inline(always)]
fn read_tp<T>(ctx: &TracePointContext, off: u32) -> Result<T, i32> {
    unsafe { ctx.read_at::<T>(off as usize) }
}

#[inline(always)]
fn read_failed(ctx: &TracePointContext, code: i32) -> u32 {
    count_drop(DROP_READ_FAILED);
    aya_log_ebpf::debug!(ctx, "tboxscope probe read failed: {}", code);
    0
}

#[tracepoint]
pub fn tcp_retransmit_skb(ctx: TracePointContext) -> u32 {
    match try_retransmit(&ctx) {
        Ok(()) => 0,
        Err(code) => read_failed(&ctx, code),
    }
}

#[inline(always)]
fn try_retransmit(ctx: &TracePointContext) -> Result<(), i32> {
    let sk: u64 = read_tp(ctx, conf!(tp.retrans_skaddr))?;
    let Some(id) = sock::ident(sk)? else {
        return Ok(());
    };
    let s = sock::snap(sk)?;
    let err_off = conf!(tp.retrans_err);
    let err: i32 = if err_off != u32::MAX {
        read_tp(ctx, err_off)?
    } else {
        0
    };
    let mut flags = 0u8;
    let mut segs = 0u16;
    let segs_off = conf!(sock.skb_gso_segs);
    if segs_off != u32::MAX {
        let skb: u64 = read_tp(ctx, conf!(tp.retrans_skbaddr))?;
        if let Ok(n) = sock::read::<u16>(skb, segs_off) {
            segs = n;
            flags |= FLAG_SEGS_READ;
        }
    }
    // How the kernel got here, from the state it is in (see probe-user/src/source/ebpf/README.md):
    // the RTO timer enters Loss and clears icsk_pending before resending the head; ACK-driven
    // resends after an RTO stay in Loss with the timer re-armed; the tail loss probe runs with
    // the probe timer pending outside Recovery/Loss; fast retransmit happens in Recovery.
    let detail = if s.ca_state == CA_LOSS {
        if s.pending == 0 {
            RETRANS_RTO
        } else {
            RETRANS_LOSS_RECOVERY
        }
    } else if s.pending == ICSK_TIME_LOSS_PROBE && s.ca_state < CA_RECOVERY {
        RETRANS_LOSS_PROBE
    } else if s.ca_state == CA_RECOVERY || s.ca_state == CA_DISORDER || s.ca_state == CA_CWR {
        RETRANS_FAST
    } else {
        RETRANS_OTHER
    };
    emit(
        sk,
        &id,
        &s,
        &Extra {
            kind: KIND_RETRANSMIT,
            detail,
            flags,
            segs,
            err,
        },
    );
    Ok(())
}

#[tracepoint]
pub fn tcp_probe(ctx: TracePointContext) -> u32 {
    match try_probe(&ctx) {
        Ok(()) => 0,
        Err(code) => read_failed(&ctx, code),
    }
}

#[inline(always)]
fn try_probe(ctx: &TracePointContext) -> Result<(), i32> {
    let sk: u64 = read_tp(ctx, conf!(tp.probe_skaddr))?;
    let Some(id) = sock::ident(sk)? else {
        return Ok(());
    };
    let s = sock::snap(sk)?;
    let now = unsafe { bpf_ktime_get_ns() };
    let interval = conf!(cwnd_interval_ns);
    if let Some(last) = CWND_LAST.get_ptr_mut(sk) {
        // SAFETY: map value pointer from a successful lookup.
        let last = unsafe { &mut *last };
        let changed = last.snd_cwnd != s.cwnd
            || last.snd_ssthresh != s.ssthresh
            || last.ca_state != s.ca_state
            || last.backoff != s.backoff;
        if !changed && now.wrapping_sub(last.ts_ns) < interval {
            return Ok(());
        }
        last.ts_ns = now;
        last.snd_cwnd = s.cwnd;
        last.snd_ssthresh = s.ssthresh;
        last.ca_state = s.ca_state;
        last.backoff = s.backoff;
    } else {
        let last = CwndLast {
            ts_ns: now,
            snd_cwnd: s.cwnd,
            snd_ssthresh: s.ssthresh,
            ca_state: s.ca_state,
            backoff: s.backoff,
            _pad: [0; 6],
        };
        // A full LRU evicts the oldest socket; a failed insert only means an extra sample.
        let _ = CWND_LAST.insert(sk, last, 0);
    }
    emit(
        sk,
        &id,
        &s,
        &Extra {
            kind: KIND_CWND,
            detail: 0,
            flags: 0,
            segs: 0,
            err: 0,
        },
    );
    Ok(())
}

#[tracepoint]
pub fn tcp_cong_state_set(ctx: TracePointContext) -> u32 {
    match try_cong(&ctx) {
        Ok(()) => 0,
        Err(code) => read_failed(&ctx, code),
    }
}

#[inline(always)]
fn try_cong(ctx: &TracePointContext) -> Result<(), i32> {
    let sk: u64 = read_tp(ctx, conf!(tp.cong_skaddr))?;
    let Some(id) = sock::ident(sk)? else {
        return Ok(());
    };
    let s = sock::snap(sk)?;
    let new: u8 = read_tp(ctx, conf!(tp.cong_state))?;
    emit(
        sk,
        &id,
        &s,
        &Extra {
            kind: KIND_CONG_STATE,
            detail: new,
            flags: 0,
            segs: 0,
            err: 0,
        },
    );
    Ok(())
}

#[tracepoint]
pub fn inet_sock_set_state(ctx: TracePointContext) -> u32 {
    match try_sock_state(&ctx) {
        Ok(()) => 0,
        Err(code) => read_failed(&ctx, code),
    }
}

#[inline(always)]
fn try_sock_state(ctx: &TracePointContext) -> Result<(), i32> {
    let proto: u16 = read_tp(ctx, conf!(tp.state_protocol))?;
    if proto != IPPROTO_TCP {
        return Ok(());
    }
    let sk: u64 = read_tp(ctx, conf!(tp.state_skaddr))?;
    let old: i32 = read_tp(ctx, conf!(tp.state_old))?;
    let new: i32 = read_tp(ctx, conf!(tp.state_new))?;
    if new as u8 == TCP_CLOSE {
        let _ = CWND_LAST.remove(sk);
    }
    let Some(id) = sock::ident(sk)? else {
        return Ok(());
    };
    let mut s = sock::snap(sk)?;
    s.state = old as u8;
    emit(
        sk,
        &id,
        &s,
        &Extra {
            kind: KIND_SOCK_STATE,
            detail: new as u8,
            flags: 0,
            segs: 0,
            err: 0,
        },
    );
    Ok(())
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[link_section = "license"]
#[no_mangle]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
