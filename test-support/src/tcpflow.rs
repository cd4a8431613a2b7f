//! Synthetic TCP captures with a known truth: bulk connections (or a control channel's small
//! messages) as the sender's capture shows them (data one way, ACKs back, timestamps and SACK
//! on), with losses repaired by fast retransmit, tail loss probe and RTO (some with a second,
//! backed-off timeout), written straight to a classic pcap. The truth is counted as the traffic is generated, so tests can
//! check the wire matcher against it and benchmarks can time it on ~1 M segments.

use std::path::Path;

use crate::pcap::PcapFile;

/// What to generate.
#[derive(Clone, Copy, Debug)]
pub struct TcpTraffic {
    /// Bulk connections, interleaved in time.
    pub connections: u16,
    /// Frames to write (the last round of each connection may end a little past it).
    pub frames: u64,
    /// Lost data segments per thousand sent.
    pub loss_per_mille: u32,
    /// Seed of the deterministic choices.
    pub seed: u64,
    /// Payload bytes of each data segment: [`FULL_SEGMENT`] for bulk transfer, a few hundred
    /// for a control channel's messages.
    pub segment_bytes: u32,
}

/// A full segment's payload (MSS 1448: Ethernet MTU with the timestamps option).
pub const FULL_SEGMENT: u32 = 1448;

/// The retransmissions generated, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpTruth {
    /// Frames written.
    pub frames: u64,
    /// Data segments sent for the first time.
    pub data_segments: u64,
    /// Fast retransmissions (after three duplicate ACKs with SACK).
    pub fast: u64,
    /// Tail loss probes.
    pub loss_probe: u64,
    /// RTO retransmissions at backoff level 0.
    pub rto_level0: u64,
    /// RTO retransmissions at backoff level 1 (the first one was lost too).
    pub rto_level1: u64,
}

impl TcpTruth {
    /// Every retransmission.
    #[must_use]
    pub fn retransmissions(&self) -> u64 {
        self.fast + self.loss_probe + self.rto_level0 + self.rto_level1
    }
}

/// Segments per round (one flight).
const FLIGHT: u32 = 10;
/// Spacing of the segments of a flight, µs.
const PACING_US: u64 = 100;

/// One frame before it is written.
#[derive(Clone, Copy, Debug)]
struct Seg {
    ts_us: u64,
    conn: u16,
    /// Client → server (data) or back (ACKs).
    to_server: bool,
    seq: u32,
    ack: u32,
    /// TCP flags byte.
    flags: u8,
    len: u32,
    tsval: u32,
    tsecr: u32,
    sack: Option<(u32, u32)>,
}

const SYN: u8 = 0x02;
const PSH: u8 = 0x08;
const ACK: u8 = 0x10;

/// A small deterministic generator (SplitMix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// How the lost segment of a round is repaired.
enum Loss {
    Fast(u32),
    Probe,
    Rto { twice: bool },
}

/// One connection's frames, generated round by round.
struct Conn {
    idx: u16,
    /// Payload bytes per data segment.
    len: u32,
    rtt_us: u64,
    t_us: u64,
    seq: u32,
    /// Receiver's last TSval seen in order (echoed in its ACKs).
    recent: u32,
}

impl Conn {
    fn ms(t_us: u64) -> u32 {
        (t_us / 1000) as u32
    }

    fn data(&self, ts_us: u64, seq: u32) -> Seg {
        Seg {
            ts_us,
            conn: self.idx,
            to_server: true,
            seq,
            ack: 1,
            flags: ACK | PSH,
            len: self.len,
            tsval: Self::ms(ts_us),
            tsecr: 0,
            sack: None,
        }
    }

    fn ack(&self, ts_us: u64, ack: u32, tsecr: u32, sack: Option<(u32, u32)>) -> Seg {
        Seg {
            ts_us,
            conn: self.idx,
            to_server: false,
            seq: 1,
            ack,
            flags: ACK,
            len: 0,
            tsval: Self::ms(ts_us),
            tsecr,
            sack,
        }
    }

    fn handshake(&mut self, out: &mut Vec<Seg>) {
        let t = self.t_us;
        let isn = self.seq.wrapping_sub(1);
        let mut syn = self.data(t, isn);
        (syn.flags, syn.len, syn.ack) = (SYN, 0, 0);
        let mut syn_ack = self.ack(t + self.rtt_us, isn.wrapping_add(1), syn.tsval, None);
        syn_ack.flags = SYN | ACK;
        syn_ack.seq = 0;
        let mut ack = self.data(t + self.rtt_us + 20, self.seq);
        (ack.flags, ack.len) = (ACK, 0);
        ack.tsecr = syn_ack.tsval;
        self.recent = syn.tsval;
        out.extend([syn, syn_ack, ack]);
        self.t_us = t + self.rtt_us + 100;
    }

    /// One flight, its losses and repairs, and the ACKs that come back.
    fn round(
        &mut self,
        rng: &mut Rng,
        loss_per_mille: u32,
        truth: &mut TcpTruth,
        out: &mut Vec<Seg>,
    ) {
        let start = self.seq;
        let len = self.len;
        let end_of = |k: u32| start.wrapping_add((k + 1) * len);
        let sent: Vec<Seg> = (0..FLIGHT)
            .map(|k| {
                self.data(
                    self.t_us + u64::from(k) * PACING_US,
                    start.wrapping_add(k * len),
                )
            })
            .collect();
        truth.data_segments += u64::from(FLIGHT);
        out.extend(&sent);
        let send_t = |k: u32| sent[k as usize].ts_us;
        let tsval = |k: u32| sent[k as usize].tsval;
        let rtt = self.rtt_us;
        let loss = if rng.below(1000) < u64::from(loss_per_mille) * u64::from(FLIGHT) {
            Some(match rng.below(10) {
                0..=5 => Loss::Fast(rng.below(u64::from(FLIGHT - 3)) as u32),
                6 | 7 => Loss::Probe,
                _ => Loss::Rto {
                    twice: rng.below(3) == 0,
                },
            })
        } else {
            None
        };
        let done_t = match loss {
            None => {
                for k in (1..FLIGHT).step_by(2) {
                    out.push(self.ack(send_t(k) + rtt, end_of(k), tsval(k), None));
                }
                send_t(FLIGHT - 1) + rtt
            }
            Some(Loss::Fast(lost)) => {
                // In order before the hole: delayed ACKs, the odd one out acknowledged at once.
                for k in 0..lost {
                    if k % 2 == 1 || k + 1 == lost {
                        out.push(self.ack(send_t(k) + rtt, end_of(k), tsval(k), None));
                    }
                }
                let recent = if lost == 0 {
                    self.recent
                } else {
                    tsval(lost - 1)
                };
                let hole = start.wrapping_add(lost * len);
                let mut retx_t = 0;
                for k in lost + 1..FLIGHT {
                    let t = send_t(k) + rtt;
                    let sack = (start.wrapping_add((lost + 1) * len), end_of(k));
                    out.push(self.ack(t, hole, recent, Some(sack)));
                    if k == lost + 3 {
                        retx_t = t + 30;
                        out.push(self.data(retx_t, hole));
                        truth.fast += 1;
                    }
                }
                let retx_tsval = Conn::ms(retx_t);
                out.push(self.ack(retx_t + rtt, end_of(FLIGHT - 1), retx_tsval, None));
                retx_t + rtt
            }
            Some(Loss::Probe | Loss::Rto { .. }) => {
                let last = FLIGHT - 1;
                for k in (1..last).step_by(2) {
                    out.push(self.ack(send_t(k) + rtt, end_of(k), tsval(k), None));
                }
                // The odd one out before the hole, acknowledged at once.
                if !last.is_multiple_of(2) {
                    out.push(self.ack(
                        send_t(last - 1) + rtt,
                        end_of(last - 1),
                        tsval(last - 1),
                        None,
                    ));
                }
                let hole = start.wrapping_add(last * len);
                let (mut retx_t, wait) = match loss {
                    Some(Loss::Probe) => {
                        truth.loss_probe += 1;
                        (send_t(last) + 2 * rtt + 2_000, 0)
                    }
                    _ => {
                        // Linux: srtt + max(4·rttvar, 200 ms), restarted by the last ACK.
                        truth.rto_level0 += 1;
                        let rto = 200_000 + rtt;
                        (send_t(last - 1) + rtt + rto, rto)
                    }
                };
                out.push(self.data(retx_t, hole));
                if let Some(Loss::Rto { twice: true }) = loss {
                    truth.rto_level1 += 1;
                    retx_t += 2 * wait;
                    out.push(self.data(retx_t, hole));
                }
                out.push(self.ack(retx_t + rtt, end_of(last), Conn::ms(retx_t), None));
                retx_t + rtt
            }
        };
        self.recent = Conn::ms(done_t);
        self.seq = end_of(FLIGHT - 1);
        self.t_us = done_t + 100;
    }
}

/// Writes `traffic` to `path` as a classic pcap (µs, Ethernet, IPv4, checksums zero as
/// offloaded NICs leave them); returns the file's size and the truth.
pub fn write_tcp_capture(path: &Path, traffic: &TcpTraffic) -> (u64, TcpTruth) {
    let mut rng = Rng(traffic.seed);
    let mut conns: Vec<Conn> = (0..traffic.connections)
        .map(|i| Conn {
            idx: i,
            len: traffic.segment_bytes.clamp(1, FULL_SEGMENT),
            rtt_us: 20_000 + u64::from(i) * 1_000,
            t_us: 1_000 * u64::from(i),
            // Some connections wrap their sequence space within the capture.
            seq: if i % 4 == 0 {
                u32::MAX - 5_000_000 + u32::from(i)
            } else {
                rng.next() as u32
            },
            recent: 0,
        })
        .collect();
    let mut truth = TcpTruth::default();
    let mut segs = Vec::new();
    for c in &mut conns {
        c.handshake(&mut segs);
    }
    let mut w = PcapFile::create(path);
    let mut frame = Vec::with_capacity(1600);
    let mut pending = segs;
    // Rounds in time order across connections: the connection furthest behind goes next, and
    // every frame older than all connections' clocks is final (a round's frames all come at or
    // after its connection's clock, and before its next value).
    while truth.frames + (pending.len() as u64) < traffic.frames {
        let Some(c) = conns.iter_mut().min_by_key(|c| c.t_us) else {
            break;
        };
        c.round(&mut rng, traffic.loss_per_mille, &mut truth, &mut pending);
        let horizon = conns.iter().map(|c| c.t_us).min().unwrap_or(0);
        pending.sort_by_key(|s| s.ts_us);
        let ready = pending.partition_point(|s| s.ts_us < horizon);
        for s in pending.drain(..ready) {
            write_seg(&mut w, &mut frame, &s);
            truth.frames += 1;
        }
    }
    pending.sort_by_key(|s| s.ts_us);
    for s in pending.drain(..) {
        write_seg(&mut w, &mut frame, &s);
        truth.frames += 1;
    }
    (w.finish(), truth)
}

/// Writes one frame.
fn write_seg(w: &mut PcapFile, f: &mut Vec<u8>, s: &Seg) {
    const BASE_US: u64 = 1_700_000_000_000_000;
    f.clear();
    let client = [10, 1 + (s.conn >> 8) as u8, s.conn as u8, 1];
    let server = [10, 0, 0, 2];
    let (src, dst, sport, dport) = if s.to_server {
        (client, server, 40_000 + s.conn, 443)
    } else {
        (server, client, 443, 40_000 + s.conn)
    };
    let mut opts: Vec<u8> = Vec::with_capacity(24);
    if s.flags & SYN != 0 {
        opts.extend([2, 4]);
        opts.extend(1460u16.to_be_bytes());
        opts.extend([4, 2]);
    } else {
        opts.extend([1, 1]);
    }
    opts.extend([8, 10]);
    opts.extend(s.tsval.to_be_bytes());
    opts.extend(s.tsecr.to_be_bytes());
    if s.flags & SYN != 0 {
        opts.extend([1, 3, 3, 7]);
    }
    if let Some((left, right)) = s.sack {
        opts.extend([1, 1, 5, 10]);
        opts.extend(left.to_be_bytes());
        opts.extend(right.to_be_bytes());
    }
    let tcp_len = 20 + opts.len();
    let total = 20 + tcp_len + s.len as usize;
    f.extend([2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00]);
    f.extend([0x45, 0]);
    f.extend((total as u16).to_be_bytes());
    // TTL: the sender's own packets leave at 64, the server's arrive through 12 routers.
    let ttl = if s.to_server { 64 } else { 52 };
    f.extend([0, 0, 0x40, 0, ttl, 6, 0, 0]);
    f.extend(src);
    f.extend(dst);
    f.extend(sport.to_be_bytes());
    f.extend(dport.to_be_bytes());
    f.extend(s.seq.to_be_bytes());
    f.extend(s.ack.to_be_bytes());
    f.push(((tcp_len / 4) as u8) << 4);
    f.push(s.flags);
    f.extend(4096u16.to_be_bytes());
    f.extend([0, 0, 0, 0]);
    f.extend(&opts);
    f.resize(f.len() + s.len as usize, 0);
    w.packet(BASE_US + s.ts_us, f);
}
