//! Sans-IO bookkeeping of `capture`: a bounded connection table, RTO backoff episodes and
//! per-connection totals. Fed decoded kernel observations (with their kernel timestamps), it
//! returns the records to write; it never reads a clock.
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;

use serde::Serialize;

use super::records::*;
use crate::source::ebpf::event::{CaState, SocketState, TcpEventKind, TcpObservation, TCP_CLOSE};
use crate::source::ebpf::RetransmitKind;
use tboxscope_engine::record::TcpSource;

const CA_LOSS: u8 = probe_common::CA_LOSS;

/// Per-connection totals, as in the `summary` record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConnTotals {
    /// Connection.
    #[serde(flatten)]
    pub ends: Endpoints,
    /// Retransmission events that were sent (err = 0).
    pub retransmits: u64,
    /// Segments in those (sum of `segs`, or 1 per event when unknown).
    pub retrans_segs: u64,
    /// Retransmission attempts the kernel failed to send (err != 0).
    pub retransmit_failures: u64,
    /// By kind: RTO timer, fast, loss probe, loss recovery, other.
    pub by_kind: [u64; 5],
    /// RTO expiries.
    pub rto_timeouts: u64,
    /// Highest backoff level seen.
    pub max_backoff: u8,
    /// Backoff episodes ended.
    pub backoff_episodes: u64,
    /// Longest stall of an episode (ms).
    pub max_stall_ms: u64,
    /// The kernel's own count of retransmitted segments at the last event.
    pub last_total_retrans: u32,
    /// Retransmitted segments the kernel counted (its `total_retrans` grew between two events
    /// of the connection) that no `tcp_retransmit` record shows: the hook did not run for
    /// them (skips the kernel counts in `skipped_by_kernel`, and some it does not), or a
    /// SYN-ACK resent by a Fast Open server.
    pub unrecorded_retrans: u64,
    /// Congestion-state changes no `tcp_cong_state` hook run reported, seen in a later
    /// snapshot of the socket (its `ca_state` not the one the records left it in): each is
    /// written then, marked `seen_late`.
    pub unrecorded_cong_changes: u64,
    /// Last cwnd seen.
    pub last_cwnd: u32,
    /// Closed during the capture.
    pub closed: bool,
}

#[derive(Debug, Clone)]
struct Episode {
    first_ns: u64,
    first_rto_ms: Option<u64>,
    timeouts: u32,
    max_backoff: u8,
}

#[derive(Debug, Clone)]
struct Conn {
    totals: ConnTotals,
    /// Its two ends as the kernel last gave them.
    addrs: (SocketAddr, SocketAddr),
    /// `total_retrans` at the connection's last event with a socket snapshot.
    last_total: Option<u32>,
    /// The congestion state the connection's records leave it in (kernel `ca_state`).
    ca_state: Option<u8>,
    last_ns: u64,
    episode: Option<Episode>,
}

impl Conn {
    /// Whether `o` is about this connection: the same ends, or ends not yet bound (port 0)
    /// on either side.
    fn is_of(&self, o: &TcpObservation) -> bool {
        let unbound = |(a, b): (SocketAddr, SocketAddr)| a.port() == 0 || b.port() == 0;
        self.addrs == (o.src, o.dst) || unbound(self.addrs) || unbound((o.src, o.dst))
    }
}

/// The bounded connection table.
pub struct Tracker {
    hz: Option<u32>,
    live: HashMap<u64, Conn>,
    closed: VecDeque<ConnTotals>,
    max_live: usize,
    max_closed: usize,
    next_conn: u64,
    /// Connections dropped from the tables to keep them bounded.
    pub evicted: u64,
    /// [`ConnTotals::unrecorded_retrans`] summed over every connection seen.
    pub unrecorded_retrans: u64,
    /// [`ConnTotals::unrecorded_cong_changes`] summed over every connection seen.
    pub unrecorded_cong_changes: u64,
}

fn kind_index(k: RetransmitKind) -> usize {
    match k {
        RetransmitKind::Rto => 0,
        RetransmitKind::Fast => 1,
        RetransmitKind::LossProbe => 2,
        RetransmitKind::LossRecovery => 3,
        // The kernel's probes never say path MTU (see tcp_simple_retransmit: loss recovery).
        RetransmitKind::PathMtu | RetransmitKind::Other => 4,
    }
}

/// Segments a resend carried: its `segs`, or 1 when the kernel's figure was not read.
fn resent_segs(segs: Option<u16>) -> u64 {
    u64::from(segs.unwrap_or(1).max(1))
}

/// Segments the kernel counted as retransmitted between the connection's previous snapshot
/// (`total_retrans` = `prev`) and this event's that no record shows. The kernel reads
/// `total_retrans` after counting the resend a `tcp_retransmit` reports, so that resend's own
/// segments are part of the growth: all of them when it went out, and those of a failed one
/// only as far as the growth covers them (the kernel counts an attempt that fails in the
/// transmit path, not one it gives up before: busy, no route, no memory).
fn unrecorded_since(prev: Option<u32>, o: &TcpObservation) -> u64 {
    let Some(prev) = prev else { return 0 };
    // A count that went down is another socket at the same address: a new baseline.
    let grown = u64::from(o.snap.total_retrans.saturating_sub(prev));
    let own = match o.kind {
        TcpEventKind::Retransmit { segs, err: 0, .. } => resent_segs(segs),
        TcpEventKind::Retransmit { segs, .. } => resent_segs(segs).min(grown),
        _ => 0,
    };
    grown.saturating_sub(own)
}

impl Tracker {
    /// A tracker holding at most `max_live` open and `max_closed` finished connections.
    pub fn new(hz: Option<u32>, max_live: usize, max_closed: usize) -> Self {
        Self {
            hz,
            live: HashMap::new(),
            closed: VecDeque::new(),
            max_live: max_live.max(1),
            max_closed,
            next_conn: 1,
            evicted: 0,
            unrecorded_retrans: 0,
            unrecorded_cong_changes: 0,
        }
    }

    fn conn(&mut self, o: &TcpObservation) -> &mut Conn {
        let known = match self.live.get(&o.sock_id) {
            Some(c) if c.is_of(o) => true,
            None => false,
            // The socket's memory reused by another connection, the old one's close with no
            // record (a missed run of the state hook): the old one is finished.
            Some(_) => {
                if let Some(mut c) = self.live.remove(&o.sock_id) {
                    c.totals.closed = true;
                    self.push_closed(c.totals);
                }
                false
            }
        };
        if !known && self.live.len() >= self.max_live {
            // Evict the least recently active connection.
            if let Some(old) = self
                .live
                .iter()
                .min_by_key(|(_, c)| c.last_ns)
                .map(|(k, _)| *k)
            {
                if let Some(c) = self.live.remove(&old) {
                    self.evicted += 1;
                    self.push_closed(c.totals);
                }
            }
        }
        let next = &mut self.next_conn;
        let c = self.live.entry(o.sock_id).or_insert_with(|| {
            let id = *next;
            *next += 1;
            Conn {
                totals: ConnTotals {
                    ends: Endpoints {
                        conn: id,
                        src: o.src.to_string().into(),
                        dst: o.dst.to_string().into(),
                    },
                    retransmits: 0,
                    retrans_segs: 0,
                    retransmit_failures: 0,
                    by_kind: [0; 5],
                    rto_timeouts: 0,
                    max_backoff: 0,
                    backoff_episodes: 0,
                    max_stall_ms: 0,
                    last_total_retrans: 0,
                    unrecorded_retrans: 0,
                    unrecorded_cong_changes: 0,
                    last_cwnd: 0,
                    closed: false,
                },
                addrs: (o.src, o.dst),
                last_total: None,
                ca_state: None,
                last_ns: o.mono_ns,
                episode: None,
            }
        });
        c.last_ns = o.mono_ns;
        // A socket seen before its port was bound/connected (SYN_SENT with port 0): refresh.
        if c.addrs.0.port() == 0 || c.addrs.1.port() == 0 {
            c.addrs = (o.src, o.dst);
            c.totals.ends.src = o.src.to_string().into();
            c.totals.ends.dst = o.dst.to_string().into();
        }
        c
    }

    fn push_closed(&mut self, t: ConnTotals) {
        if self.max_closed == 0 {
            self.evicted += 1;
            return;
        }
        if self.closed.len() >= self.max_closed {
            self.closed.pop_front();
            self.evicted += 1;
        }
        self.closed.push_back(t);
    }

    fn end_episode(ep: Episode, now_ns: u64, ended_by: EndedBy, c: &mut Conn) -> BackoffEndRecord {
        let episode_ms = now_ns.saturating_sub(ep.first_ns) / 1_000_000;
        let stall_ms = episode_ms.saturating_add(ep.first_rto_ms.unwrap_or(0));
        c.totals.backoff_episodes += 1;
        c.totals.max_stall_ms = c.totals.max_stall_ms.max(stall_ms);
        BackoffEndRecord {
            ends: c.totals.ends.clone(),
            ended_by,
            timeouts: ep.timeouts,
            max_backoff: ep.max_backoff,
            first_rto_ms: ep.first_rto_ms,
            episode_ms,
            stall_ms,
        }
    }

    /// Takes one observation; returns the records it produces, in order.
    pub fn handle(&mut self, o: &TcpObservation) -> Vec<Record> {
        let mut out = Vec::with_capacity(2);
        self.handle_into(o, &mut out);
        out
    }

    /// [`Tracker::handle`] appending to `out` (a buffer the caller reuses: no allocation per
    /// event).
    pub fn handle_into(&mut self, o: &TcpObservation, out: &mut Vec<Record>) {
        let hz = self.hz;
        let sock = SockFields::new(&o.snap, hz);
        let mut unrecorded = 0;
        let mut cong_unrecorded = 0;
        let c = self.conn(o);
        let ends = c.totals.ends.clone();
        if o.snap.valid {
            c.totals.last_total_retrans = o.snap.total_retrans;
            c.totals.last_cwnd = o.snap.cwnd;
            c.totals.max_backoff = c.totals.max_backoff.max(o.snap.backoff);
            unrecorded = unrecorded_since(c.last_total, o);
            c.last_total = Some(o.snap.total_retrans);
            c.totals.unrecorded_retrans += unrecorded;
            // Every change of `ca_state` runs the cong-state hook before it is made, under the
            // socket's lock as every other hook here: a snapshot showing another state than
            // the records left is a run that did not happen (or did not reach the ring).
            if let Some(known) = c.ca_state.filter(|k| *k != o.snap.ca_state) {
                cong_unrecorded = 1;
                c.totals.unrecorded_cong_changes += 1;
                out.push(Record::CongState(CongStateRecord {
                    ends: ends.clone(),
                    from: CaState::from_kernel(known),
                    to: CaState::from_kernel(o.snap.ca_state),
                    seen_late: true,
                    sock: sock.clone(),
                }));
            }
            c.ca_state = Some(match o.kind {
                TcpEventKind::CongState { new } => new,
                _ => o.snap.ca_state,
            });
        }
        let start = out.len();
        match o.kind {
            TcpEventKind::Retransmit {
                kind,
                segs,
                err,
                seq,
                len,
            } => {
                if err == 0 {
                    c.totals.retransmits += 1;
                    c.totals.retrans_segs += resent_segs(segs);
                    c.totals.by_kind[kind_index(kind)] += 1;
                } else {
                    c.totals.retransmit_failures += 1;
                }
                out.push(Record::Retransmit(RetransmitRecord {
                    source: TcpSource::Kernel,
                    ends: ends.clone(),
                    kind,
                    segs,
                    err,
                    seq,
                    len,
                    sock: sock.clone(),
                }));
                if kind == RetransmitKind::Rto {
                    // The backoff level after this expiry.
                    let after = o.snap.backoff.saturating_add(1);
                    c.totals.max_backoff = c.totals.max_backoff.max(after);
                    let ep = c.episode.get_or_insert(Episode {
                        first_ns: o.mono_ns,
                        first_rto_ms: sock.rto_ms,
                        timeouts: 0,
                        max_backoff: 0,
                    });
                    // The kernel's backoff counts the episode's expiries: one whose hook run
                    // was missed (its resend is in `unrecorded_retrans`) still counts.
                    let timeout = (ep.timeouts + 1).max(u32::from(after));
                    c.totals.rto_timeouts += u64::from(timeout - ep.timeouts);
                    ep.timeouts = timeout;
                    ep.max_backoff = ep.max_backoff.max(after);
                    out.push(Record::Rto(RtoRecord {
                        source: TcpSource::Kernel,
                        ends,
                        timeout,
                        sock,
                    }));
                }
            }
            TcpEventKind::Cwnd => {
                // Fallback end-of-episode signal when the cong-state hook is missing: the
                // kernel resets backoff on the first valid RTT sample of new data.
                let ended = c.episode.is_some()
                    && o.snap.valid
                    && o.snap.backoff == 0
                    && o.snap.ca_state != CA_LOSS;
                if ended {
                    if let Some(ep) = c.episode.take() {
                        out.push(Record::BackoffEnd(Self::end_episode(
                            ep,
                            o.mono_ns,
                            EndedBy::AckSample,
                            c,
                        )));
                    }
                }
                out.insert(start, Record::Cwnd(CwndRecord { ends, sock }));
            }
            TcpEventKind::CongState { new } => {
                let from = CaState::from_kernel(o.snap.ca_state);
                out.push(Record::CongState(CongStateRecord {
                    ends,
                    from,
                    to: CaState::from_kernel(new),
                    seen_late: false,
                    sock,
                }));
                if o.snap.ca_state == CA_LOSS && new != CA_LOSS {
                    if let Some(ep) = c.episode.take() {
                        out.push(Record::BackoffEnd(Self::end_episode(
                            ep,
                            o.mono_ns,
                            EndedBy::Ack,
                            c,
                        )));
                    }
                }
            }
            TcpEventKind::SockState { new } => {
                out.push(Record::State(StateRecord {
                    ends,
                    from: SocketState::from_kernel(o.snap.state),
                    to: SocketState::from_kernel(new),
                    sock,
                }));
                if new == TCP_CLOSE {
                    if let Some(ep) = c.episode.take() {
                        out.push(Record::BackoffEnd(Self::end_episode(
                            ep,
                            o.mono_ns,
                            EndedBy::Close,
                            c,
                        )));
                    }
                    c.totals.closed = true;
                    if let Some(c) = self.live.remove(&o.sock_id) {
                        self.push_closed(c.totals);
                    }
                }
            }
        }
        self.unrecorded_retrans += unrecorded;
        self.unrecorded_cong_changes += cong_unrecorded;
    }

    /// Every connection's totals (finished first, then open), for the summary.
    pub fn totals(&self) -> Vec<ConnTotals> {
        let mut v: Vec<ConnTotals> = self.closed.iter().cloned().collect();
        let mut live: Vec<ConnTotals> = self.live.values().map(|c| c.totals.clone()).collect();
        live.sort_by_key(|t| t.ends.conn);
        v.extend(live);
        v
    }

    /// Open connections in the table.
    pub fn live_len(&self) -> usize {
        self.live.len()
    }

    /// Connections seen so far.
    pub fn seen(&self) -> u64 {
        self.next_conn - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::ebpf::event::TcpSnapshot;

    fn obs(ns: u64, kind: TcpEventKind, rto: u32, backoff: u8, ca: u8) -> TcpObservation {
        TcpObservation {
            mono_ns: ns,
            sock_id: 7,
            src: "10.0.0.1:40000".parse().unwrap(),
            dst: "10.0.0.2:5201".parse().unwrap(),
            kind,
            snap: TcpSnapshot {
                rto_jiffies: rto,
                backoff,
                retransmits: backoff,
                ca_state: ca,
                pending: 0,
                state: 1,
                total_retrans: u32::from(backoff),
                cwnd: 10,
                ssthresh: 7,
                srtt_us: 500,
                packets_out: 1,
                lost_out: 1,
                retrans_out: 0,
                congestion_control: "cubic".parse().ok(),
                valid: true,
            },
        }
    }

    fn rto() -> TcpEventKind {
        TcpEventKind::Retransmit {
            kind: RetransmitKind::Rto,
            segs: Some(1),
            err: 0,
            seq: Some(1000),
            len: Some(1448),
        }
    }

    /// The record types, in order, with the congestion changes' states and `seen_late`.
    fn outline(recs: &[Record]) -> Vec<String> {
        recs.iter()
            .map(|r| match r {
                Record::CongState(c) => format!(
                    "cong {:?}->{:?}{}",
                    c.from,
                    c.to,
                    if c.seen_late { " late" } else { "" }
                ),
                Record::BackoffEnd(e) => format!("end {:?}", e.ended_by),
                r => r.type_name().to_owned(),
            })
            .collect()
    }

    #[test]
    fn a_congestion_change_the_hook_missed_is_written_from_the_next_snapshot() {
        let mut t = Tracker::new(Some(250), 16, 16);
        let ms = 1_000_000u64;
        // Open, then an RTO whose entry into Loss no hook run reported; then the run for
        // Loss → Open is missed too: the next cwnd sample (backoff reset) shows Open.
        let first = t.handle(&obs(900 * ms, TcpEventKind::Cwnd, 51, 0, 0));
        assert_eq!(outline(&first), ["tcp_cwnd"]);
        let mut recs = t.handle(&obs(1000 * ms, rto(), 51, 0, 4));
        recs.extend(t.handle(&obs(1204 * ms, rto(), 102, 1, 4)));
        recs.extend(t.handle(&obs(1500 * ms, TcpEventKind::Cwnd, 102, 0, 0)));
        assert_eq!(
            outline(&recs),
            [
                "cong Open->Loss late",
                "tcp_retransmit",
                "tcp_rto",
                "tcp_retransmit",
                "tcp_rto",
                "cong Loss->Open late",
                "tcp_cwnd",
                "end AckSample",
            ]
        );
        let late = serde_json::to_value(&recs[0]).unwrap();
        assert_eq!(late["seen_late"], true, "{late}");
        // A change the hook reported is not counted, nor is the state it leaves.
        recs = t.handle(&obs(
            1600 * ms,
            TcpEventKind::CongState { new: 1 },
            51,
            0,
            0,
        ));
        recs.extend(t.handle(&obs(1700 * ms, TcpEventKind::Cwnd, 51, 0, 1)));
        assert_eq!(outline(&recs), ["cong Open->Disorder", "tcp_cwnd"]);
        let reported = serde_json::to_value(&recs[0]).unwrap();
        assert!(reported.get("seen_late").is_none(), "{reported}");
        assert_eq!(t.totals()[0].unrecorded_cong_changes, 2);
        assert_eq!(t.unrecorded_cong_changes, 2);
    }

    #[test]
    fn an_expiry_whose_hook_run_was_missed_still_counts() {
        let mut t = Tracker::new(Some(250), 16, 16);
        let ms = 1_000_000u64;
        // Expiries at backoff 0 and 2: the one at backoff 1 left no record.
        let mut recs = t.handle(&obs(1000 * ms, rto(), 51, 0, 4));
        recs.extend(t.handle(&obs(1612 * ms, rto(), 204, 2, 4)));
        recs.extend(t.handle(&obs(
            2000 * ms,
            TcpEventKind::CongState { new: 0 },
            408,
            0,
            4,
        )));
        let timeouts: Vec<u32> = recs
            .iter()
            .filter_map(|r| match r {
                Record::Rto(r) => Some(r.timeout),
                Record::BackoffEnd(e) => Some(e.timeouts),
                _ => None,
            })
            .collect();
        assert_eq!(timeouts, [1, 3, 3]);
        let tot = &t.totals()[0];
        assert_eq!((tot.rto_timeouts, tot.max_backoff), (3, 3));
    }

    #[test]
    fn backoff_episode_doubles_and_ends_on_ack() {
        let mut t = Tracker::new(Some(250), 16, 16);
        let ms = 1_000_000u64;
        let mut recs = Vec::new();
        recs.extend(t.handle(&obs(1000 * ms, rto(), 51, 0, 4)));
        recs.extend(t.handle(&obs(1204 * ms, rto(), 102, 1, 4)));
        recs.extend(t.handle(&obs(1612 * ms, rto(), 204, 2, 4)));
        recs.extend(t.handle(&obs(
            2000 * ms,
            TcpEventKind::CongState { new: 0 },
            408,
            0,
            4,
        )));
        let rtos: Vec<(Option<u64>, u8, u32)> = recs
            .iter()
            .filter_map(|r| match r {
                Record::Rto(r) => Some((r.sock.rto_ms, r.sock.backoff, r.timeout)),
                _ => None,
            })
            .collect();
        assert_eq!(
            rtos,
            vec![(Some(204), 0, 1), (Some(408), 1, 2), (Some(816), 2, 3)]
        );
        let end = recs
            .iter()
            .find_map(|r| match r {
                Record::BackoffEnd(e) => Some(e.clone()),
                _ => None,
            })
            .unwrap();
        assert_eq!(
            (end.timeouts, end.max_backoff, end.episode_ms, end.stall_ms),
            (3, 3, 1000, 1204)
        );
        let tot = &t.totals()[0];
        assert_eq!(
            (tot.retransmits, tot.rto_timeouts, tot.backoff_episodes),
            (3, 3, 1)
        );
    }

    #[test]
    fn retransmissions_the_kernel_counted_without_a_record_are_counted() {
        let mut t = Tracker::new(Some(250), 16, 16);
        let at = |total: u32, kind: TcpEventKind| {
            let mut o = obs(1, kind, 51, 0, 0);
            o.snap.total_retrans = total;
            o
        };
        let resend = |segs: u16, err: i32| TcpEventKind::Retransmit {
            kind: RetransmitKind::Fast,
            segs: Some(segs),
            err,
            seq: None,
            len: None,
        };
        let cwnd = TcpEventKind::Cwnd;
        let steps = [
            // (event, total_retrans after it, unrecorded so far)
            (at(5, cwnd), 0), // the first snapshot is the baseline
            (at(6, resend(1, 0)), 0),
            (at(8, cwnd), 2),             // two resends with no record
            (at(8, resend(1, -16)), 2),   // busy: given up before counting
            (at(9, resend(1, -105)), 2),  // failed in the transmit path, counted
            (at(12, resend(2, 0)), 3),    // a two-segment resend after one unrecorded
            (at(12, resend(1, -113)), 3), // no route: not counted
            (at(2, cwnd), 3),             // a lower count: another socket, new baseline
            (at(3, resend(1, 0)), 3),
        ];
        for (i, (o, want)) in steps.iter().enumerate() {
            t.handle(o);
            assert_eq!(t.unrecorded_retrans, *want, "step {i}");
            assert_eq!(t.totals()[0].unrecorded_retrans, *want, "step {i}");
        }
    }

    #[test]
    fn json_encoding_of_records() {
        let mut t = Tracker::new(Some(250), 16, 16);
        let recs = t.handle(&obs(5, rto(), 51, 0, 4));
        let mut w =
            crate::output::JsonLinesWriter::new(Vec::new(), 0, &serde_json::json!({})).unwrap();
        for r in &recs {
            w.write(r.type_name(), 1_000_000_000, r).unwrap();
        }
        let text = String::from_utf8(w.into_inner().unwrap()).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[1]["type"], "tcp_retransmit");
        assert_eq!(lines[1]["kind"], "rto");
        assert_eq!(lines[1]["src"], "10.0.0.1:40000");
        assert_eq!(lines[1]["dst"], "10.0.0.2:5201");
        assert_eq!(lines[1]["rto_ms"], 204);
        assert_eq!(lines[1]["cwnd"], 10);
        assert_eq!(lines[1]["ssthresh"], 7);
        assert_eq!(lines[1]["srtt_us"], 500);
        assert_eq!(lines[1]["ca_state"], "loss");
        assert_eq!(lines[1]["congestion_control"], "cubic");
        assert_eq!(lines[2]["type"], "tcp_rto");
        assert_eq!(lines[2]["backoff"], 0);
        assert_eq!(lines[2]["timeout"], 1);
        assert_eq!(lines[2]["ts"], "1970-01-01T00:00:01.000000000Z");
    }

    #[test]
    fn every_record_reads_back_as_written() {
        let mut t = Tracker::new(Some(250), 16, 16);
        let mut recs = Vec::new();
        recs.extend(t.handle(&obs(1, TcpEventKind::Cwnd, 51, 0, 0)));
        recs.extend(t.handle(&obs(2, TcpEventKind::CongState { new: 4 }, 51, 0, 0)));
        recs.extend(t.handle(&obs(3, rto(), 51, 0, 4)));
        recs.extend(t.handle(&obs(4, TcpEventKind::CongState { new: 0 }, 102, 1, 4)));
        recs.extend(t.handle(&obs(
            5,
            TcpEventKind::SockState { new: TCP_CLOSE },
            51,
            0,
            0,
        )));
        let mut kinds: Vec<&str> = recs.iter().map(Record::type_name).collect();
        kinds.sort_unstable();
        kinds.dedup();
        assert_eq!(kinds.len(), 6, "every record type: {kinds:?}");
        let mut w =
            crate::output::JsonLinesWriter::new(Vec::new(), 0, &serde_json::json!({})).unwrap();
        for r in &recs {
            w.write(r.type_name(), 1_000_000_000, r).unwrap();
        }
        let text = String::from_utf8(w.into_inner().unwrap()).unwrap();
        for (line, r) in text.lines().skip(1).zip(&recs) {
            let map: serde_json::Map<String, serde_json::Value> =
                serde_json::from_str(line).unwrap();
            let kind = map["type"].as_str().unwrap();
            let back = Record::deserialize_as(kind, &map).unwrap();
            assert_eq!(back.as_ref(), Some(r), "{line}");
        }
        assert_eq!(
            Record::deserialize_as("drops", &serde_json::Map::new()).unwrap(),
            None
        );
    }

    #[test]
    fn table_is_bounded_and_close_evicts() {
        let mut t = Tracker::new(None, 2, 1);
        for id in 0..5u64 {
            let mut o = obs(id, TcpEventKind::Cwnd, 51, 0, 0);
            o.sock_id = id;
            t.handle(&o);
        }
        assert_eq!(t.live_len(), 2);
        assert_eq!(t.seen(), 5);
        assert!(t.evicted >= 3);
        let mut o = obs(9, TcpEventKind::SockState { new: TCP_CLOSE }, 51, 0, 0);
        o.sock_id = 4;
        let recs = t.handle(&o);
        assert_eq!(recs[0].type_name(), "tcp_state");
        assert_eq!(t.live_len(), 1);
        // No rto_ms without CONFIG_HZ.
        let Record::State(s) = &recs[0] else { panic!() };
        assert_eq!(s.sock.rto_ms, None);
    }

    #[test]
    fn a_socket_reused_by_another_connection_starts_a_new_one() {
        let mut t = Tracker::new(None, 4, 4);
        // Seen before its port was bound, then bound: one connection.
        let mut o = obs(1, TcpEventKind::Cwnd, 51, 0, 0);
        o.src = "10.0.0.1:0".parse().unwrap();
        t.handle(&o);
        t.handle(&obs(2, TcpEventKind::CongState { new: 4 }, 51, 0, 0));
        assert_eq!(t.seen(), 1);
        // The same socket memory, other ends, its close unseen: a new connection, no late
        // congestion change from the old one's Loss.
        let mut o = obs(3, TcpEventKind::Cwnd, 51, 0, 0);
        o.dst = "10.0.0.3:443".parse().unwrap();
        let recs = t.handle(&o);
        assert_eq!(recs.len(), 1, "{recs:?}");
        assert_eq!(recs[0].ends().conn, 2);
        let totals = t.totals();
        assert_eq!(totals.len(), 2);
        assert_eq!(
            (totals[0].ends.dst.as_ref(), totals[0].closed),
            ("10.0.0.2:5201", true)
        );
        assert_eq!(totals[0].ends.src.as_ref(), "10.0.0.1:40000");
        assert_eq!(
            (totals[1].ends.dst.as_ref(), totals[1].closed),
            ("10.0.0.3:443", false)
        );
        assert_eq!(t.unrecorded_cong_changes, 0);
    }
}
