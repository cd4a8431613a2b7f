//! Building the snapshot and the summary from engine state, including redundancy verdicts and
//! the independent-paths prediction.

use super::{ratio, Shared};
use crate::config::MatchMode;
use crate::flow::{Amp, Flow, FlowRef, Proto};
use crate::paths::PathIdx;
use crate::record::{FlowSummary, Record, Summary};
use crate::snapshot::{
    AmplificationView, CaptureHealth, DatagramFlowView, FlowsView, KcpConvView, LatencyKind,
    LatencyView, PathShare, PathView, Percentiles, QuicConnView, RedundancyView, Snapshot,
    TailPoint, TcpSocketView, LATENCY_BUCKETS_US,
};
use crate::tail::{tail_prediction, PathTail};
use crate::{FastMap as HashMap, FastSet as HashSet};

/// Flows reported as part of their group, and what each group gains from its members.
#[derive(Debug, Default)]
struct GroupMembers {
    /// Uids of member flows not listed on their own.
    folded: HashSet<u64>,
    /// Group uid → (members' HOL incidents, members' bytes).
    extra: HashMap<u64, (u64, Amp)>,
}

impl GroupMembers {
    /// A flow's HOL incidents and bytes with those of its members.
    fn totals(&self, f: &Flow) -> (u64, Amp) {
        let mut amp = f.amp;
        let mut incidents = f.incidents;
        if let Some((i, a)) = self.extra.get(&f.uid) {
            incidents += i;
            amp.add(a);
        }
        (incidents, amp)
    }
}

/// Flows listed per protocol in a snapshot (most recently active first).
const MAX_FLOWS_SHOWN: usize = 256;
/// Incidents listed in a snapshot.
const MAX_INCIDENTS_SHOWN: usize = 64;

impl Shared {
    /// [`crate::Engine::snapshot`].
    pub(crate) fn snapshot(&self) -> Snapshot {
        let now = self.now;
        Snapshot {
            ts_ns: now,
            started_ns: self.started.unwrap_or(0),
            paths: self.path_views(now),
            redundancy: self
                .recent_flows()
                .iter()
                .filter_map(|f| self.redundancy(f))
                .collect(),
            latency: self.latency_view(),
            amplification: {
                let members = self.group_members();
                self.recent_flows()
                    .iter()
                    .filter(|f| !members.folded.contains(&f.uid))
                    .map(|f| Self::amplification(f, &members.totals(f).1))
                    .collect()
            },
            health: self.health(),
            flows: self.flows_view(),
            incidents: self.incidents.newest_first(now, MAX_INCIDENTS_SHOWN),
            outages: self.outages.newest_first(now),
            events: self.events.iter().cloned().collect(),
            outages_total: self.outages.total,
            incidents_total: self.incidents.total,
            hol: self.incidents.totals(now),
        }
    }

    /// [`crate::Engine::finish`].
    pub(crate) fn finish(&mut self, ts_ns: u64) -> Summary {
        self.advance(ts_ns);
        for m in self.msgs.drain_all() {
            self.close_message(m, false);
        }
        let end = self.now;
        for id in self.incidents.open_ids() {
            if let Some(inc) = self.incidents.close(id, end) {
                let mut inc = inc;
                inc.end_ns = None;
                self.push_record(Record::HolIncident(inc));
            }
        }
        for o in self.outages.finish(end) {
            self.push_record(Record::Outage(o));
        }
        let members = self.group_members();
        let flows: Vec<&Flow> = {
            let mut v: Vec<&Flow> = self
                .flows
                .iter()
                .filter(|f| !members.folded.contains(&f.uid) && !is_ghost_socket(f))
                .collect();
            v.sort_by(|a, b| b.messages.cmp(&a.messages).then(a.uid.cmp(&b.uid)));
            v
        };
        let flow_summaries = flows
            .iter()
            .map(|f| {
                let (incidents, amp) = members.totals(f);
                FlowSummary {
                    flow: f.key.name(),
                    protocol: f.key.protocol().to_owned(),
                    mode: f.mode,
                    latency: f
                        .latency
                        .as_ref()
                        .map(|h| h.percentiles())
                        .unwrap_or_default(),
                    duplication: ratio(f.on_all, f.messages),
                    messages: f.messages,
                    amplification: amp.ratio(),
                    outages: self.outages.overlapping(f.first_ns, f.last_ns),
                    hol_incidents: incidents,
                }
            })
            .collect();
        Summary {
            start_ns: self.started.unwrap_or(0),
            end_ns: end,
            flows: flow_summaries,
            paths: self.path_views(end),
            redundancy: flows.iter().filter_map(|f| self.redundancy(f)).collect(),
            latency: self.latency_view(),
            amplification: flows
                .iter()
                .map(|f| Self::amplification(f, &members.totals(f).1))
                .collect(),
            outages: self.outages.newest_first(end).into_iter().rev().collect(),
            hol_incidents: {
                let mut v = self.incidents.newest_first(end, usize::MAX);
                v.reverse();
                v
            },
            outages_total: self.outages.total,
            incidents_total: self.incidents.total,
            hol: self.incidents.totals(end),
            health: self.health(),
        }
    }

    fn recent_flows(&self) -> Vec<&Flow> {
        let mut v: Vec<&Flow> = self.flows.iter().filter(|f| !is_ghost_socket(f)).collect();
        v.sort_by(|a, b| b.last_ns.cmp(&a.last_ns).then(a.uid.cmp(&b.uid)));
        v.truncate(MAX_FLOWS_SHOWN);
        v
    }

    fn path_views(&self, now: u64) -> Vec<PathView> {
        self.paths
            .live()
            .filter_map(|i| self.paths.paths.get(i))
            .map(|p| PathView {
                label: p.label.clone(),
                up: p.outage.is_none(),
                outage_for_ns: p.outage.and(p.last_alive_ns).map(|a| now.saturating_sub(a)),
                last_alive_ns: p.last_alive_ns.unwrap_or(0),
                packets_per_s: p.packets_per_s,
                bytes_per_s: p.bytes_per_s,
                packets: p.packets,
                bytes: p.bytes,
                loss_rate: ratio(p.missing, p.expected),
                retransmission_rate: ratio(p.retransmissions, p.data_sends),
                latency: p.latency.total.percentiles(),
                latency_kind: p.latency_kind(),
                recent: p.latency.series.iter().cloned().collect(),
                latency_buckets: p.latency.total.cumulative_at(&LATENCY_BUCKETS_US),
                outages: p.outages,
                outage_total_ns: p.outage_closed_ns.saturating_add(
                    p.outage
                        .and(p.last_alive_ns)
                        .map_or(0, |a| now.saturating_sub(a)),
                ),
                tcp_retransmits: p.tcp_retransmits,
            })
            .collect()
    }

    fn redundancy(&self, f: &Flow) -> Option<RedundancyView> {
        if f.messages == 0 {
            return None;
        }
        let with_winner: u64 = f.per_path.iter().map(|c| c.wins).sum();
        let mut paths: Vec<PathShare> = f
            .per_path
            .iter()
            .map(|c| PathShare {
                path: self.paths.label(c.path).to_owned(),
                carried: c.carried,
                only: c.only,
                wins: c.wins,
                win_rate: ratio(c.wins, with_winner),
            })
            .collect();
        paths.sort_by(|a, b| a.path.cmp(&b.path));
        let dup = ratio(f.on_all, f.messages);
        let n = f.path_count();
        let verdict = redundancy_verdict(f.messages, dup, n, &paths, f.sent_on_all, f.mode);
        Some(RedundancyView {
            flow: f.key.name(),
            mode: f.mode,
            mode_forced: f.forced,
            messages: f.messages,
            on_all_paths: f.on_all,
            duplication: dup,
            sent_on_all_paths: f.sent_on_all,
            paths,
            copy_spacing: f
                .spacing
                .as_ref()
                .map(|h| h.percentiles())
                .unwrap_or_default(),
            verdict,
        })
    }

    /// The amplification of flow `f` from its byte counts `amp` (its own, with those of its
    /// group's members: [`GroupMembers::totals`]).
    fn amplification(f: &Flow, amp: &Amp) -> AmplificationView {
        AmplificationView {
            flow: f.key.name(),
            protocol: f.key.protocol().to_owned(),
            wire_bytes: amp.wire,
            unique_payload_bytes: amp.unique,
            ratio: amp.ratio(),
            retransmit_bytes: amp.retransmit,
            ack_bytes: amp.ack,
            overhead_bytes: amp.overhead,
        }
    }

    /// The group flow `f` is part of: a KCP session that is one of several per-path sessions
    /// matched by application id or content, or a QUIC connection (as first seen, before it
    /// joined) of a group of per-path connections.
    fn group_of(f: &Flow) -> Option<FlowRef> {
        match &f.proto {
            Proto::Kcp(s) => s.group,
            Proto::Quic(s) => s.group,
            _ => None,
        }
    }

    /// Which flows are reported as part of their group ([`Engine::group_of`]): the members
    /// that carry no message of their own are folded into their group's row, which gains
    /// their HOL incidents (sn order is per session) and their bytes on the wire.
    fn group_members(&self) -> GroupMembers {
        let mut m = GroupMembers::default();
        for f in self.flows.iter() {
            let Some(g) = Self::group_of(f) else {
                continue;
            };
            let (incidents, amp) = m.extra.entry(g.uid).or_default();
            *incidents += f.incidents;
            amp.add(&f.amp);
            if f.messages == 0 {
                m.folded.insert(f.uid);
            }
        }
        m
    }

    fn latency_view(&self) -> LatencyView {
        let kind = if self.ack_messages > self.one_way_messages {
            LatencyKind::AckRtt
        } else {
            LatencyKind::OneWay
        };
        let live: Vec<PathIdx> = self.paths.live().collect();
        let per_path: Vec<(String, Percentiles)> = live
            .iter()
            .filter_map(|i| self.paths.paths.get(*i))
            .map(|p| (p.label.clone(), p.latency.total.percentiles()))
            .collect();
        let (tail, verdict) = self.prediction(&live);
        LatencyView {
            kind,
            per_path,
            combined: self.combined.total.percentiles(),
            combined_buckets: self.combined.total.cumulative_at(&LATENCY_BUCKETS_US),
            during_outage: self.during_outage.percentiles(),
            outside_outage: self
                .outside_outage
                .percentiles(&self.combined.total, &self.during_outage),
            request_response: self.request_response.percentiles(),
            combined_recent: self.combined.series.iter().cloned().collect(),
            tail,
            verdict,
        }
    }

    /// The independent-paths prediction over the live paths, from redundant flows' messages.
    fn prediction(&self, live: &[PathIdx]) -> (Vec<TailPoint>, String) {
        let used: Vec<&PathTail> = live
            .iter()
            .filter_map(|i| self.paths.paths.get(*i))
            .map(|p| &p.tail)
            .collect();
        tail_prediction(&used, &self.redundant, self.cfg.shared_cause_ratio)
    }

    fn health(&self) -> CaptureHealth {
        CaptureHealth {
            observations: self.observations,
            out_of_order: self.out_of_order,
            flows_tracked: self.flows.len() as u64,
            open_messages: self.msgs.len() as u64,
            evicted_flows: self.flows.evicted,
            evicted_messages: self.msgs.evicted + self.orphan_messages,
            evicted_unacked: self.evicted_unacked,
            regrouped_messages: self.regrouped,
            evicted_incidents: self.incidents.evicted + self.outages.evicted,
            dropped_records: self.dropped_records,
            clamped_latencies: self.clamped,
            // Source counters: the engine never sees them; the capture driver fills them in.
            pcap_dropped: 0,
            ring_buffer_dropped: 0,
            tcp_events_dropped: 0,
            decrypt_failures: 0,
            captures: self
                .caps
                .views(|i| self.paths.label(self.paths.canonical(i)).to_owned()),
            inferences: self.caps.inferences.clone(),
        }
    }

    fn flows_view(&self) -> FlowsView {
        let mut v = FlowsView::default();
        let labels = |f: &Flow| -> Vec<String> {
            (0..64usize)
                .filter(|i| f.paths_mask & (1 << i) != 0)
                .map(|i| self.paths.label(i).to_owned())
                .collect()
        };
        for f in self.recent_flows() {
            match (&f.proto, &f.key) {
                (Proto::Kcp(s), crate::flow::FlowKey::Kcp { conv }) => v.kcp.push(KcpConvView {
                    conv: *conv,
                    paths: labels(f),
                    segments: s.segments,
                    retransmissions: s.retransmissions,
                    max_sn: s.max_sn,
                    una: s.una,
                    wnd: s.wnd,
                    unacked: s.unacked.len() as u64,
                }),
                (Proto::Quic(s), _) => v.quic.push(QuicConnView {
                    conn: f.key.name(),
                    paths: labels(f),
                    packets: s.packets,
                    streams: s.ranges.len().max(s.rx.len()) as u64,
                    retransmitted_bytes: s.retransmitted_bytes,
                    unacked: s.unacked.len() as u64,
                }),
                (Proto::Tcp(s), _) => v.tcp.push(TcpSocketView {
                    socket: f.key.name(),
                    path: s.path.clone(),
                    figures: s.figures,
                    cong_state: s.cong_state,
                    state: s.state.clone(),
                    last_event_ns: s.last_event_ns,
                    history: s.history.iter().cloned().collect(),
                    retransmissions: s.retransmission_log.iter().cloned().collect(),
                    cong_changes: s.cong_changes.iter().copied().collect(),
                }),
                (Proto::Datagram { datagrams, .. }, _) => v.datagram.push(DatagramFlowView {
                    flow: f.key.name(),
                    paths: labels(f),
                    datagrams: *datagrams,
                }),
                _ => {}
            }
        }
        v
    }
}

/// A TCP socket that is not a connection and is not listed as a flow: one without a remote
/// end (a listening socket, or one not yet connected: `127.0.0.1:47010 → 0.0.0.0:0`), or one
/// listening or closed with nothing to show: no retransmission and no message. A closed
/// socket that retransmitted stays listed: its backoff ladder is what the TCP screen is for.
fn is_ghost_socket(f: &Flow) -> bool {
    let (crate::flow::FlowKey::Tcp { client, server }, Proto::Tcp(s)) = (&f.key, &f.proto) else {
        return false;
    };
    let nowhere = |a: &std::net::SocketAddr| a.port() == 0 || a.ip().is_unspecified();
    if nowhere(client) || nowhere(server) {
        return true;
    }
    matches!(s.state.as_str(), "LISTEN" | "CLOSE")
        && s.figures.retransmits == 0
        && s.retransmission_log.is_empty()
        && f.messages == 0
}

/// The verdict line of a flow's redundancy: how many of its messages were carried on every
/// path, and which were carried on one path only; where every message was seen sent on every
/// path (`sent_on_all`) but some copies did not arrive in time, that the sending is
/// redundant; where copies matched by content (`mode`) never matched, what to try instead.
pub fn redundancy_verdict(
    messages: u64,
    dup: f64,
    npaths: u32,
    paths: &[PathShare],
    sent_on_all: u64,
    mode: Option<MatchMode>,
) -> String {
    let pct = dup * 100.0;
    let where_ = if npaths == 2 {
        "both paths".to_owned()
    } else {
        format!("all {npaths} paths")
    };
    if npaths < 2 {
        let p = paths.first().map_or("one path", |p| p.path.as_str());
        return format!("single path ({p}): no redundancy, {messages} messages");
    }
    let only: Vec<String> = paths
        .iter()
        .filter(|p| p.only > 0)
        .map(|p| format!("{} only on {}", p.only, p.path))
        .collect();
    let tail = if only.is_empty() {
        String::new()
    } else {
        format!("; {}", only.join(", "))
    };
    let carried = if dup >= 0.99 {
        format!("redundancy confirmed: {pct:.1}% of {messages} messages on {where_}{tail}")
    } else if dup >= 0.5 {
        format!("partial redundancy: {pct:.1}% of {messages} messages on {where_}{tail}")
    } else {
        format!("not redundant: only {pct:.1}% of {messages} messages on {where_}{tail}")
    };
    let mut verdict = if dup < 0.99 && sent_on_all * 100 >= messages * 99 {
        // Every message was sent on every path: the copies that did not arrive in time were
        // lost or held (an outage), not left unsent.
        format!(
            "redundant sending confirmed: {:.1}% of {messages} messages sent on all {npaths} paths; {carried} (within the message timeout)",
            ratio(sent_on_all, messages) * 100.0
        )
    } else {
        carried
    };
    if dup == 0.0 && mode == Some(MatchMode::Content) {
        // Sessions per path whose copies differ in their bytes (a per-copy header, a send
        // time) are matched by an application id instead.
        verdict.push_str(
            " — no copy matched by content: if the copies differ in their bytes but carry a \
             message id, match by it (--app-id OFFSET:WIDTH)",
        );
    }
    verdict
}
