//! tboxscope's kernel programs: raw TCP tracepoints that read the socket's state through
//! offsets resolved from the running kernel's BTF (handed over in the `CONFIG` global) and push
//! [`TcpEvent`]s into a ring buffer. Every failed reserve or read is counted in `DROPS`.
//!
//! Raw tracepoints, not perf tracepoints: the kernel runs a perf tracepoint's program only when
//! the task's perf recursion slot (else skipped uncounted) and the CPU's `bpf_prog_active` (else
//! counted) are free. A raw tracepoint runs the program directly; its only skip is this same
//! program already running on the CPU, counted in the program's `recursion_misses`. Runs the
//! kernel misses without counting remain on some machines; user space counts the
//! retransmissions among them from `total_retrans` (probe-user/src/source/ebpf/README.md).
#![no_std]
#![no_main]

mod sock;

use sock::{Ident, Snap};

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::{classifier, fentry, kprobe, map, raw_tracepoint, sock_ops, tracepoint},
    maps::{HashMap, LruHashMap, PerCpuArray, RingBuf},
    programs::{
        FEntryContext, ProbeContext, RawTracePointContext, SockOpsContext, TcContext,
        TracePointContext,
    },
    EbpfContext,
};
use probe_common::{
    CwndLast, ProbeConfig, TcpEvent, AF_INET, CA_CWR, CA_DISORDER, CA_LOSS, CA_RECOVERY,
    CWND_LAST_ENTRIES, DROP_READ_FAILED, DROP_REASONS, DROP_RING_FULL, FILTER_ENTRIES,
    FLAG_SEGS_READ, FLAG_SEQ_READ, FLAG_SOCK_READ, ICSK_TIME_LOSS_PROBE, KIND_CONG_STATE,
    KIND_CWND, KIND_RETRANSMIT, KIND_SOCK_STATE, LOAD_SOCK_ID, RETRANS_FAST, RETRANS_LOSS_PROBE,
    RETRANS_LOSS_RECOVERY, RETRANS_OTHER, RETRANS_RTO, RING_BYTES, RING_WAKE_BYTES,
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
    /// `bpf_ktime_get_ns()` at the event.
    ts_ns: u64,
    kind: u8,
    detail: u8,
    flags: u8,
    segs: u16,
    err: i32,
    seq: u32,
    end_seq: u32,
}

/// `bpf_ringbuf_submit` flags.
const RB_NO_WAKEUP: u64 = 1;
const RB_FORCE_WAKEUP: u64 = 2;
/// `bpf_ringbuf_query`: bytes not yet consumed.
const RB_AVAIL_DATA: u64 = 0;

/// How a submitted event wakes the reader.
#[derive(Clone, Copy)]
enum Wake {
    /// Rare events the user waits for (retransmits, congestion states): the kernel's default,
    /// a wakeup when the reader has caught up.
    Now,
    /// Frequent events: no wakeup until `RING_WAKE_BYTES` wait in the ring (the reader also
    /// drains on a timer).
    Batched,
}

/// Writes one event straight into a ring-buffer slot, field by field; counts a drop when the
/// ring is full.
#[inline(always)]
fn emit(sk: u64, id: &Ident, s: &Snap, x: &Extra, wake: Wake) {
    let Some(mut entry) = EVENTS.reserve::<TcpEvent>(0) else {
        count_drop(DROP_RING_FULL);
        return;
    };
    let p = entry.as_mut_ptr();
    // SAFETY: `p` points to a reserved, exclusively owned slot of size_of::<TcpEvent>() bytes;
    // every field is written before submit.
    unsafe {
        (*p).ts_ns = x.ts_ns;
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
        (*p).seq = x.seq;
        (*p).end_seq = x.end_seq;
        let ca = (&raw mut (*p).ca_name).cast::<[u8; 8]>();
        ca.write_unaligned(s.ca_name[0].to_ne_bytes());
        ca.add(1).write_unaligned(s.ca_name[1].to_ne_bytes());
        (*p)._pad = 0;
    }
    let flags = match wake {
        Wake::Now => 0,
        Wake::Batched => {
            if EVENTS.query(RB_AVAIL_DATA) >= RING_WAKE_BYTES {
                RB_FORCE_WAKEUP
            } else {
                RB_NO_WAKEUP
            }
        }
    };
    entry.submit(flags);
}

#[inline(always)]
fn now_ns() -> u64 {
    unsafe { bpf_ktime_get_ns() }
}

/// A raw tracepoint's argument `n` (its `TP_PROTO` order) as a 64-bit word.
#[inline(always)]
fn arg(ctx: &RawTracePointContext, n: usize) -> u64 {
    ctx.arg::<u64>(n)
}

#[inline(always)]
fn read_failed<C: EbpfContext>(ctx: &C, code: i32) -> i32 {
    count_drop(DROP_READ_FAILED);
    aya_log_ebpf::debug!(ctx, "tboxscope probe read failed: {}", code);
    0
}

/// Benchmark load generator (attached only when user space asks, to
/// `syscalls:sys_enter_getppid`): each `getppid()` of the process `CONFIG.load_tgid` pushes one
/// synthetic cwnd event through `emit`, exactly as `tcp_probe` does when a sample is due, so the
/// ring buffer and the reader can be driven faster than this machine's TCP stack can.
#[tracepoint]
pub fn ring_load(_ctx: TracePointContext) -> u32 {
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    let want = conf!(load_tgid);
    if want == 0 || tgid != want {
        return 0;
    }
    let ts_ns = now_ns();
    // TEST-NET-1 addresses (RFC 5737): never a real peer.
    let id = Ident {
        family: AF_INET,
        sport: 1,
        dport: 2,
        saddr: [u64::from(u32::from_ne_bytes([192, 0, 2, 1])), 0],
        daddr: [u64::from(u32::from_ne_bytes([192, 0, 2, 2])), 0],
    };
    let s = Snap {
        state: 1,
        backoff: 0,
        retransmits: 0,
        pending: 0,
        ca_state: 0,
        rto: 51,
        total_retrans: 0,
        cwnd: 10 + (ts_ns & 0xf) as u32,
        ssthresh: u32::MAX >> 1,
        srtt_us: 100,
        packets_out: 1,
        lost_out: 0,
        retrans_out: 0,
        ca_name: [0, 0],
    };
    let x = Extra {
        ts_ns,
        kind: KIND_CWND,
        detail: 0,
        flags: 0,
        segs: 0,
        err: 0,
        seq: 0,
        end_seq: 0,
    };
    emit(LOAD_SOCK_ID, &id, &s, &x, Wake::Batched);
    0
}

/// `tcp:tcp_retransmit_skb(sk, skb, err)`: every attempt, `err` its outcome (kernels whose
/// tracepoint has `err`).
#[raw_tracepoint(tracepoint = "tcp_retransmit_skb")]
pub fn tcp_retransmit_skb(ctx: RawTracePointContext) -> i32 {
    let err = arg(&ctx, 2) as i32;
    match try_retransmit(&ctx, err) {
        Ok(()) => 0,
        Err(code) => read_failed(&ctx, code),
    }
}

/// `tcp:tcp_retransmit_skb(sk, skb)` on kernels before the `err` argument, which fire only for
/// retransmissions that went out. A separate program: the kernel refuses to attach one that
/// reads an argument the tracepoint does not have.
#[raw_tracepoint(tracepoint = "tcp_retransmit_skb")]
pub fn tcp_retransmit_skb_sent(ctx: RawTracePointContext) -> i32 {
    match try_retransmit(&ctx, 0) {
        Ok(()) => 0,
        Err(code) => read_failed(&ctx, code),
    }
}

#[inline(always)]
fn try_retransmit(ctx: &RawTracePointContext, err: i32) -> Result<(), i32> {
    let sk = arg(ctx, 0);
    let Some(id) = sock::ident(sk)? else {
        return Ok(());
    };
    let s = sock::snap(sk)?;
    force_sample(sk);
    let mut flags = 0u8;
    let mut segs = 0u16;
    let (mut seq, mut end_seq) = (0u32, 0u32);
    let segs_off = conf!(sock.skb_gso_segs);
    let (seq_off, end_off) = (conf!(sock.skb_seq), conf!(sock.skb_end_seq));
    if segs_off != u32::MAX || (seq_off != u32::MAX && end_off != u32::MAX) {
        let skb = arg(ctx, 1);
        if segs_off != u32::MAX {
            if let Ok(n) = sock::read::<u16>(skb, segs_off) {
                segs = n;
                flags |= FLAG_SEGS_READ;
            }
        }
        // Which bytes are resent: the skb's control block names its sequence range.
        if seq_off != u32::MAX && end_off != u32::MAX {
            if let (Ok(s), Ok(e)) = (
                sock::read::<u32>(skb, seq_off),
                sock::read::<u32>(skb, end_off),
            ) {
                seq = s;
                end_seq = e;
                flags |= FLAG_SEQ_READ;
            }
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
            ts_ns: now_ns(),
            kind: KIND_RETRANSMIT,
            detail,
            flags,
            segs,
            err,
            seq,
            end_seq,
        },
        Wake::Now,
    );
    Ok(())
}

/// `tcp:tcp_probe(sk, skb)`: every segment a socket receives.
#[raw_tracepoint(tracepoint = "tcp_probe")]
pub fn tcp_probe(ctx: RawTracePointContext) -> i32 {
    match try_probe(arg(&ctx, 0)) {
        Ok(()) => 0,
        Err(code) => read_failed(&ctx, code),
    }
}

/// Runs on every incoming segment of every TCP socket, so the common case (a sample not due)
/// must stay cheap: two reads from the socket (its ports, cwnd), the clock and one map lookup.
/// The socket's entry in `CWND_LAST` (keyed by its address) caches its identity and the
/// filters' verdict; the ports confirm the entry is this connection's and not a closed
/// socket's whose memory was reused. The rest of the socket is read only when a sample is
/// emitted. Due = the interval has passed, cwnd changed, or another program asked for a sample
/// (`ts_ns` = 0: retransmission, congestion state).
#[inline(always)]
fn try_probe(sk: u64) -> Result<(), i32> {
    let ports: u32 = sock::read(sk, conf!(sock.dport))?;
    let Some(last) = CWND_LAST.get_ptr_mut(sk) else {
        return first_probe(sk, ports);
    };
    // SAFETY: map value pointer from a successful lookup; only this socket's softirq path
    // writes it, apart from `force_sample` (a race costs at worst one extra or missing sample).
    let last = unsafe { &mut *last };
    if last.ports != ports {
        return first_probe(sk, ports);
    }
    if last.excluded != 0 {
        return Ok(());
    }
    let cwnd: u32 = sock::read(sk, conf!(sock.snd_cwnd))?;
    let now = now_ns();
    if now.wrapping_sub(last.ts_ns) < conf!(cwnd_interval_ns) && last.snd_cwnd == cwnd {
        return Ok(());
    }
    let id = Ident {
        family: last.family,
        sport: last.sport,
        dport: last.dport,
        saddr: last.saddr,
        daddr: last.daddr,
    };
    let s = probe_snap(sk, cwnd)?;
    last.ts_ns = now;
    last.snd_cwnd = s.cwnd;
    emit_cwnd(sk, &id, &s, now);
    Ok(())
}

/// Asks `tcp_probe` for a sample at the socket's next segment (its state just changed in a way
/// cwnd alone may not show: ssthresh, ca_state, backoff).
#[inline(always)]
fn force_sample(sk: u64) {
    if let Some(last) = CWND_LAST.get_ptr_mut(sk) {
        // SAFETY: map value pointer from a successful lookup.
        unsafe { (*last).ts_ns = 0 };
    }
}

/// The snapshot of a `tcp_probe` sample, cwnd already read.
#[inline(always)]
fn probe_snap(sk: u64, cwnd: u32) -> Result<Snap, i32> {
    let srtt8: u32 = sock::read(sk, conf!(sock.srtt_us))?;
    sock::snap_with(sk, cwnd, srtt8 >> 3)
}

#[inline(always)]
fn emit_cwnd(sk: u64, id: &Ident, s: &Snap, now: u64) {
    emit(
        sk,
        id,
        s,
        &Extra {
            ts_ns: now,
            kind: KIND_CWND,
            detail: 0,
            flags: 0,
            segs: 0,
            err: 0,
            seq: 0,
            end_seq: 0,
        },
        Wake::Batched,
    );
}

/// First sample of a socket: read and filter its identity once, remember both, and emit.
#[inline(always)]
fn first_probe(sk: u64, ports: u32) -> Result<(), i32> {
    let now = now_ns();
    let id = sock::ident_any(sk)?;
    if !(sock::is_inet(&id) && sock::passes_filter(&id)) {
        let entry = CwndLast {
            ts_ns: now,
            ports,
            excluded: 1,
            ..CwndLast::default()
        };
        // A full LRU evicts the oldest socket; a failed insert only means this is read again.
        let _ = CWND_LAST.insert(sk, entry, 0);
        return Ok(());
    }
    let cwnd: u32 = sock::read(sk, conf!(sock.snd_cwnd))?;
    let s = probe_snap(sk, cwnd)?;
    let entry = CwndLast {
        ts_ns: now,
        saddr: id.saddr,
        daddr: id.daddr,
        snd_cwnd: s.cwnd,
        ports,
        family: id.family,
        sport: id.sport,
        dport: id.dport,
        excluded: 0,
        _pad: [0; 9],
    };
    let _ = CWND_LAST.insert(sk, entry, 0);
    emit_cwnd(sk, &id, &s, now);
    Ok(())
}

/// `tcp:tcp_cong_state_set(sk, ca_state)`.
#[raw_tracepoint(tracepoint = "tcp_cong_state_set")]
pub fn tcp_cong_state_set(ctx: RawTracePointContext) -> i32 {
    match try_cong(&ctx) {
        Ok(()) => 0,
        Err(code) => read_failed(&ctx, code),
    }
}

#[inline(always)]
fn try_cong(ctx: &RawTracePointContext) -> Result<(), i32> {
    let sk = arg(ctx, 0);
    let Some(id) = sock::ident(sk)? else {
        return Ok(());
    };
    let s = sock::snap(sk)?;
    let new = arg(ctx, 1) as u8;
    force_sample(sk);
    emit(
        sk,
        &id,
        &s,
        &Extra {
            ts_ns: now_ns(),
            kind: KIND_CONG_STATE,
            detail: new,
            flags: 0,
            segs: 0,
            err: 0,
            seq: 0,
            end_seq: 0,
        },
        Wake::Now,
    );
    Ok(())
}

/// `sock:inet_sock_set_state(sk, oldstate, newstate)`, for every protocol.
#[raw_tracepoint(tracepoint = "inet_sock_set_state")]
pub fn inet_sock_set_state(ctx: RawTracePointContext) -> i32 {
    match try_sock_state(&ctx) {
        Ok(()) => 0,
        Err(code) => read_failed(&ctx, code),
    }
}

#[inline(always)]
fn try_sock_state(ctx: &RawTracePointContext) -> Result<(), i32> {
    let sk = arg(ctx, 0);
    if sock::protocol(sk)? != IPPROTO_TCP {
        return Ok(());
    }
    let old = arg(ctx, 1) as i32;
    let new = arg(ctx, 2) as i32;
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
            ts_ns: now_ns(),
            kind: KIND_SOCK_STATE,
            detail: new as u8,
            flags: 0,
            segs: 0,
            err: 0,
            seq: 0,
            end_seq: 0,
        },
        Wake::Batched,
    );
    Ok(())
}

// Programs that do nothing: `tboxscope doctor` loads and attaches each (then detaches) to tell
// which hook types this kernel really offers, beyond the four tracepoints above.

/// Doctor's kprobe check.
#[kprobe]
pub fn check_kprobe(_ctx: ProbeContext) -> u32 {
    0
}

/// Doctor's raw tracepoint check.
#[raw_tracepoint(tracepoint = "tcp_probe")]
pub fn check_raw_tracepoint(_ctx: RawTracePointContext) -> i32 {
    0
}

/// Doctor's fentry (BTF tracing) check.
#[fentry(function = "tcp_sendmsg")]
pub fn check_fentry(_ctx: FEntryContext) -> u32 {
    0
}

/// Doctor's sock_ops check (attached to an empty cgroup of its own).
#[sock_ops]
pub fn check_sock_ops(_ctx: SockOpsContext) -> u32 {
    1
}

/// Doctor's TC classifier check (loaded only: attaching needs an interface and a qdisc).
#[classifier]
pub fn check_classifier(_ctx: TcContext) -> i32 {
    0
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[link_section = "license"]
#[no_mangle]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
