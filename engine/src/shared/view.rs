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
            // Filled by the engine from its TCP wire matcher and kernel/wire join.
            tcp_wire: Default::default(),
            tcp_join: Default::default(),
            advice: None,
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
            // Filled by the engine from its TCP wire matcher and kernel/wire join.
            tcp_wire: Default::default(),
            tcp_join: Default::default(),
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
                not_sent_while_out: c.not_sent_while_out,
                out_ns: c.out_ns,
                not_sent_while_unused: c.not_sent_while_unused,
                unused_ns: c.unused_ns,
                not_sent_while_in_use: c.not_sent_while_in_use,
                wins: c.wins,
                win_rate: ratio(c.wins, with_winner),
            })
            .collect();
        paths.sort_by(|a, b| a.path.cmp(&b.path));
        let dup = ratio(f.on_all, f.messages);
        let n = f.path_count();
        let mut verdict = redundancy_verdict(f.messages, dup, n, &paths, f.sent_on_all, f.mode);
        add_late_copies(&mut verdict, f.late_copies);
        Some(RedundancyView {
            flow: f.key.name(),
            mode: f.mode,
            mode_forced: f.forced,
            messages: f.messages,
            on_all_paths: f.on_all,
            duplication: dup,
            sent_on_all_paths: f.sent_on_all,
            late_copies: f.late_copies,
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
            evicted_streams: self.evicted_streams,
            held_messages: self.msgs.held,
            held_too_long: self.msgs.hold_limit,
            late_copies: self.late_copies,
            regrouped_messages: self.regrouped,
            evicted_incidents: self.incidents.evicted + self.outages.evicted,
            dropped_records: self.dropped_records,
            clamped_latencies: self.clamped,
            // Source counters: the engine never sees them; the capture driver fills them in.
            pcap_dropped: 0,
            ring_buffer_dropped: 0,
            tcp_events_dropped: 0,
            tcp_hook_runs_skipped: 0,
            tcp_retrans_unrecorded: 0,
            tcp_cong_changes_late: 0,
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

/// Adds to a flow's verdict the copies that came after their message closed, if any.
pub fn add_late_copies(verdict: &mut String, late_copies: u64) {
    match late_copies {
        0 => {}
        1 => verdict.push_str("; 1 copy came after its message closed (a late copy)"),
        n => verdict.push_str(&format!(
            "; {n} copies came after their message closed (late copies)"
        )),
    }
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
    // Messages sent on some paths only: explained by an outage of the others, or by the
    // sender not using them at the time, a redundant sender still sends on the paths it has;
    // sent on a path in use but not this message, it is not redundant.
    let out: u64 = paths.iter().map(|p| p.not_sent_while_out).sum();
    let unused: u64 = paths.iter().map(|p| p.not_sent_while_unused).sum();
    let in_use: u64 = paths.iter().map(|p| p.not_sent_while_in_use).sum();
    let mut verdict = if dup < 0.99
        && sent_on_all * 100 < messages * 99
        && out + unused > 0
        && in_use * 100 <= messages
        && (sent_on_all + out + unused) * 100 >= messages * 99
    {
        format!(
            "redundant sending: {:.1}% of {messages} messages sent on all {npaths} paths; {}{}; {carried} (within the message timeout)",
            ratio(sent_on_all, messages) * 100.0,
            not_sent_reasons(paths, npaths, false),
            if in_use > 0 {
                format!("; {in_use} not sent on a path in use")
            } else {
                String::new()
            }
        )
    } else if dup < 0.99 && sent_on_all * 100 >= messages * 99 {
        // Every message was sent on every path: the copies that did not arrive in time were
        // lost or held (an outage), not left unsent.
        format!(
            "redundant sending confirmed: {:.1}% of {messages} messages sent on all {npaths} paths; {carried} (within the message timeout)",
            ratio(sent_on_all, messages) * 100.0
        )
    } else if in_use > 0 {
        // Not redundant: say where the sender left messages off a path it used.
        format!("{carried}; {}", not_sent_reasons(paths, npaths, true))
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

/// Why paths lacked copies, per path in the user's words ("eth0 down 5.0 s: 250 messages on
/// eth1 only; eth0 unused by the sender for 3.2 s: 160 on eth1 only"); with `in_use`, also the
/// messages the sender left off a path it used.
fn not_sent_reasons(paths: &[PathShare], npaths: u32, in_use: bool) -> String {
    let secs = |ns: u64| ns as f64 / 1e9;
    let mut parts = Vec::new();
    for p in paths {
        let others = match paths.iter().find(|o| o.path != p.path) {
            Some(o) if npaths == 2 => o.path.as_str(),
            _ => "the other paths",
        };
        if p.not_sent_while_out > 0 {
            parts.push(format!(
                "{} down {:.1} s: {} messages on {others} only",
                p.path,
                secs(p.out_ns),
                p.not_sent_while_out
            ));
        }
        if p.not_sent_while_unused > 0 {
            parts.push(format!(
                "{} unused by the sender for {:.1} s: {} on {others} only",
                p.path,
                secs(p.unused_ns),
                p.not_sent_while_unused
            ));
        }
        if in_use && p.not_sent_while_in_use > 0 {
            parts.push(format!(
                "{} in use: {} messages sent on {others} and not on it",
                p.path, p.not_sent_while_in_use
            ));
        }
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(path: &str, only: u64) -> PathShare {
        PathShare {
            path: path.to_owned(),
            only,
            ..PathShare::default()
        }
    }

    /// eth0 lacking copies of messages sent on eth1: `out` in an outage of `out_s` seconds,
    /// `unused` while the sender left it unused for `unused_s` seconds, `in_use` while used.
    fn lacking(out: u64, out_s: f64, unused: u64, unused_s: f64, in_use: u64) -> [PathShare; 2] {
        let eth0 = PathShare {
            not_sent_while_out: out,
            out_ns: (out_s * 1e9) as u64,
            not_sent_while_unused: unused,
            unused_ns: (unused_s * 1e9) as u64,
            not_sent_while_in_use: in_use,
            ..share("eth0", 0)
        };
        [eth0, share("eth1", out + unused + in_use)]
    }

    /// A redundant sender through an outage: a third of the messages sent on both paths, the
    /// rest on eth1 while eth0 was down (the field capture).
    #[test]
    fn messages_not_sent_on_a_path_in_an_outage_are_redundant_sending() {
        let v = redundancy_verdict(900, 0.32, 2, &lacking(600, 12.0, 0, 0.0, 0), 300, None);
        assert_eq!(
            v,
            "redundant sending: 33.3% of 900 messages sent on all 2 paths; eth0 down 12.0 s: \
             600 messages on eth1 only; not redundant: only 32.0% of 900 messages on both \
             paths; 600 only on eth1 (within the message timeout)"
        );
    }

    /// tquic after a handover: eth0 down, then left unused while the sender re-validates it.
    #[test]
    fn messages_not_sent_on_a_path_the_sender_left_unused_are_redundant_sending() {
        let v = redundancy_verdict(1000, 0.59, 2, &lacking(250, 5.0, 160, 3.2, 0), 590, None);
        assert!(
            v.starts_with(
                "redundant sending: 59.0% of 1000 messages sent on all 2 paths; eth0 down 5.0 s: \
                 250 messages on eth1 only; eth0 unused by the sender for 3.2 s: 160 on eth1 only; "
            ),
            "{v}"
        );
    }

    /// Messages left off a path the sender was using: not redundant, whatever else explains
    /// the others (one in a hundred is let through: a copy at an outage's edge).
    #[test]
    fn messages_not_sent_on_a_path_in_use_are_not_redundant() {
        let v = redundancy_verdict(1000, 0.3, 2, &lacking(250, 5.0, 100, 2.0, 350), 300, None);
        assert_eq!(
            v,
            "not redundant: only 30.0% of 1000 messages on both paths; 700 only on eth1; eth0 \
             down 5.0 s: 250 messages on eth1 only; eth0 unused by the sender for 2.0 s: 100 on \
             eth1 only; eth0 in use: 350 messages sent on eth1 and not on it"
        );
        let v = redundancy_verdict(1000, 0.64, 2, &lacking(250, 5.0, 100, 2.0, 20), 640, None);
        assert!(v.starts_with("partial redundancy: 64.0%"), "{v}");
        let v = redundancy_verdict(1000, 0.64, 2, &lacking(250, 5.0, 105, 2.0, 5), 640, None);
        assert!(v.ends_with("; 5 not sent on a path in use; partial redundancy: 64.0% of 1000 messages on both paths; 360 only on eth1 (within the message timeout)"), "{v}");
    }
}
