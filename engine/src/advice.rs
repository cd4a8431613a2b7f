//! The transport decision (`tboxscope advise`): what a capture measured on each path (the
//! delay of copies that went through at their first transmission, the loss, the outages, the
//! message rate and size) replayed through each option's recovery rules — KCP as the lab runs
//! it (nodelay 1, interval 10 ms, fast resend after 2, no congestion window; in order), QUIC per
//! RFC 9002 (packet/time thresholds, PTO doubling per connection; a stream per message; the
//! congestion window as quinn's CUBIC keeps it, which holds messages in the sender),
//! redundant sending as QUIC on both paths, each message as early as its first copy — and the
//! seed study's decision table applied to those predictions within the user's SLA and uplink.
//!
//! Sans-IO like the rest of the engine: fed message records and the run's [`Summary`], it
//! reads no clock; the replay draws from a seeded generator, so the same evidence gives the
//! same advice.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::record::{OutageRecord, Summary};
use crate::snapshot::LatencyKind;
use crate::snapshot::{PathView, TailPoint};
use crate::thinned::Thinned;
use crate::SplitMix64;

/// How often a live view's advice is remade (engine time, ns).
pub const ADVICE_EVERY_NS: u64 = 10_000_000_000;
/// Messages replayed per option (the capture's timeline repeated with fresh draws).
const REPLAYED: usize = 20_000;
/// Replays per option, to say how much the prediction moves between draws.
const SEEDS: u64 = 5;
/// Delay samples kept per path (an even thinning beyond).
const MAX_SAMPLES: usize = 50_000;
/// KCP's update interval (ms), as the lab's peers and the seed run it.
const KCP_INTERVAL_MS: f64 = 10.0;
/// KCP's minimum RTO in nodelay mode (ms).
const KCP_RTO_MIN_MS: f64 = 30.0;
/// KCP gives a segment up after this many transmissions (`dead_link`).
const KCP_DEAD_LINK: u32 = 20;
/// QUIC's max_ack_delay (ms, RFC 9000 default).
const QUIC_MAX_ACK_DELAY_MS: f64 = 25.0;
/// QUIC gives a message up after this many transmissions (the idle timeout in practice).
const QUIC_GIVE_UP: u32 = 16;
/// IPv4 + UDP header bytes.
const IP_UDP: f64 = 28.0;
/// KCP segment header bytes.
const KCP_HEADER: f64 = 24.0;
/// QUIC short header, AEAD tag and STREAM frame header bytes (8-byte connection id).
const QUIC_OVERHEAD: f64 = 1.0 + 8.0 + 2.0 + 16.0 + 6.0;
/// QUIC ACK packet bytes on the wire (IP/UDP included).
const QUIC_ACK_BYTES: f64 = IP_UDP + 1.0 + 8.0 + 2.0 + 16.0 + 8.0;

/// A transport option.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    /// KCP on one path.
    Kcp,
    /// QUIC on one path.
    Quic,
    /// Every message on both paths (a QUIC connection per path), the first copy wins.
    Redundant,
}

impl Transport {
    /// The name as written in JSON and on screen.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Kcp => "kcp",
            Transport::Quic => "quic",
            Transport::Redundant => "redundant",
        }
    }
}

/// Whether a path's loss follows its queue (congestion) or not (random).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LossKind {
    /// Too few losses to say.
    Unknown,
    /// Losses independent of the queueing delay.
    Random,
    /// Losses where the queueing delay had risen (to twice its usual), or a standing queue:
    /// the link is loaded beyond its rate.
    Congestion,
}

/// What a capture measured on one path.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PathEvidence {
    /// Path label.
    pub path: String,
    /// One-way delay of copies that went through at their first transmission (ms).
    pub delay_p50_ms: f64,
    /// Their 99th percentile (ms).
    pub delay_p99_ms: f64,
    /// How many such copies.
    pub delay_samples: u64,
    /// How the delay was measured: `one_way` (both ends captured) or `ack_rtt` halved.
    pub delay_from: LatencyKind,
    /// Packet loss (0..1).
    pub loss: f64,
    /// Where `loss` comes from.
    pub loss_from: String,
    /// Random or congestion loss.
    pub loss_kind: LossKind,
    /// Median queueing delay (delay above the path's lowest) just before losses, and
    /// overall (ms): what `loss_kind` was judged by.
    pub queue_at_loss_ms: Option<f64>,
    /// Median queueing delay of all copies (ms): the median delay above the floor.
    pub queue_ms: f64,
    /// The path's floor: the 1st percentile of the delay (ms).
    pub floor_ms: f64,
    /// Outages: (start s after the capture's first packet, length s).
    pub outages: Vec<(f64, f64)>,
    /// Delay samples (µs), for the replay.
    #[serde(skip)]
    samples_us: Vec<u64>,
}

impl PathEvidence {
    /// The longest outage (s).
    pub fn longest_outage_s(&self) -> f64 {
        self.outages.iter().map(|o| o.1).fold(0.0, f64::max)
    }
}

/// What the advice is made from.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// Length of the capture (s).
    pub duration_s: f64,
    /// The flow whose messages set the rate and size (the one with the most messages).
    pub flow: String,
    /// Its messages per second.
    pub messages_per_s: f64,
    /// Their mean size (bytes).
    pub message_bytes: f64,
    /// Its messages.
    pub messages: u64,
    /// Per path.
    pub paths: Vec<PathEvidence>,
    /// Redundant flows' combined latency as observed (first copy, ms): P50, P99, P999 and
    /// the messages behind them.
    pub observed_redundant: Option<(f64, f64, f64, u64)>,
    /// The independence prediction at the observed P99 (Π P(path > t)) and the observed
    /// share above it.
    pub independence_at_p99: Option<(f64, f64)>,
}

/// What the user allows.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Limits {
    /// Largest acceptable P99 (ms).
    pub sla_p99_ms: Option<f64>,
    /// Uplink capacity (kbit/s).
    pub uplink_kbps: Option<f64>,
}

/// One option's prediction on this link.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OptionPrediction {
    /// Transport.
    pub transport: Transport,
    /// Paths it sends on.
    pub paths: Vec<String>,
    /// Predicted message latency, application to application (ms).
    pub predicted_p50_ms: f64,
    /// 99th percentile (ms).
    pub predicted_p99_ms: f64,
    /// 99.9th percentile (ms).
    pub predicted_p999_ms: f64,
    /// The lowest and highest P99 over the replays (how much the prediction moves).
    pub p99_range_ms: (f64, f64),
    /// Messages replayed.
    pub samples: u64,
    /// Messages the replay never delivered (per million).
    pub lost_per_million: f64,
    /// Wire bytes (both directions) per payload byte.
    pub bandwidth_factor: f64,
    /// Uplink bytes (data copies and retransmissions) per payload byte.
    pub uplink_factor: f64,
    /// Share of `--uplink-kbps` the option would use (%).
    pub uplink_use_pct: Option<f64>,
    /// Whether the predicted P99 is within `--sla-p99`.
    pub meets_sla: Option<bool>,
    /// The observed combined latency where the capture measured it (redundant only).
    pub observed_p99_ms: Option<f64>,
    /// What the figures come from.
    pub basis: String,
}

impl OptionPrediction {
    fn name(&self) -> String {
        match self.transport {
            Transport::Redundant => "redundant".to_owned(),
            t => format!("{} on {}", t.as_str(), self.paths.join("+")),
        }
    }

    fn allowed(&self) -> bool {
        self.meets_sla != Some(false) && self.uplink_use_pct.is_none_or(|u| u <= 100.0)
    }
}

/// The advice: a recommendation, its reasons, the options compared and the evidence.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Advice {
    /// `kcp`, `quic` or `redundant`.
    pub recommendation: Transport,
    /// The path(s) of the recommended option.
    pub paths: Vec<String>,
    /// Why, each citing evidence.
    pub reasons: Vec<String>,
    /// What would change the recommendation.
    pub would_change: Vec<String>,
    /// The options compared.
    pub options: Vec<OptionPrediction>,
    /// What it was made from.
    pub evidence: Evidence,
}

/// A copy as the evidence keeps it: its first send (ns), its delay to its first arrival (µs;
/// `None` if it never arrived), its flow's index.
type Sighted = (u64, Option<u64>, usize);

/// One copy of a closed message, as the evidence takes it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CopySeen<'a> {
    /// Its path's label.
    pub path: &'a str,
    /// First send (ns), where seen.
    pub sent: Option<u64>,
    /// Arrived (or acknowledged).
    pub arrived: bool,
    /// Its latency (µs).
    pub latency_us: Option<u64>,
}

/// One path's copies.
#[derive(Debug, Default)]
struct PathCopies {
    label: String,
    copies: Thinned<Sighted>,
    /// The delays are ACK round trips.
    ack: bool,
}

/// Collects the evidence from the messages the engine closes ([`crate::Config::collect_evidence`]),
/// then takes the run's summary. Memory is bounded: per path at most [`MAX_KEPT`](crate::thinned::MAX_KEPT) copies,
/// evenly thinned beyond.
#[derive(Debug, Default)]
pub struct EvidenceBuilder {
    paths: Vec<PathCopies>,
    /// Per flow: (name, messages, bytes, first ns, last ns).
    flows: Vec<(String, u64, u64, u64, u64)>,
    /// Flow key (the engine's flow uid, or a hash of a record's flow name) → index.
    flow_index: std::collections::HashMap<u64, usize>,
    /// Redundant flows' combined latency (µs).
    combined_us: Thinned<u64>,
}

impl EvidenceBuilder {
    /// Takes one closed message: its flow (key, name made on first sight), when it was first
    /// seen and its size, its latency and kind, its copies.
    pub(crate) fn take<'a>(
        &mut self,
        (key, name): (u64, impl FnOnce() -> String),
        (t, bytes): (u64, u64),
        (kind, latency_us): (LatencyKind, Option<u64>),
        copies: impl Iterator<Item = CopySeen<'a>> + Clone,
    ) {
        let flow = match self.flow_index.get(&key) {
            Some(&i) => i,
            None => {
                self.flows.push((name(), 0, 0, t, t));
                self.flow_index.insert(key, self.flows.len() - 1);
                self.flows.len() - 1
            }
        };
        if let Some(f) = self.flows.get_mut(flow) {
            f.1 += 1;
            f.2 += bytes;
            f.3 = f.3.min(t);
            f.4 = f.4.max(t);
        }
        let ack = kind == LatencyKind::AckRtt;
        let (n, carried) = copies
            .clone()
            .fold((0, 0), |(n, k), c| (n + 1, k + usize::from(c.arrived)));
        if n >= 2 && carried >= 1 {
            if let Some(l) = latency_us {
                self.combined_us.push(if ack { l / 2 } else { l });
            }
        }
        for c in copies {
            let Some(sent) = c.sent else { continue };
            let delay = c
                .latency_us
                .filter(|_| c.arrived)
                .map(|l| if ack { l / 2 } else { l });
            let slot = match self.paths.iter().position(|p| p.label == c.path) {
                Some(i) => i,
                None => {
                    self.paths.push(PathCopies {
                        label: c.path.to_owned(),
                        ack,
                        ..PathCopies::default()
                    });
                    self.paths.len() - 1
                }
            };
            if let Some(p) = self.paths.get_mut(slot) {
                p.copies.push((sent, delay, flow));
            }
        }
    }

    /// The evidence, with the run's summary (paths, outages, loss).
    pub fn finish(&self, summary: &Summary) -> Evidence {
        self.finish_with(
            (&summary.paths, &summary.outages),
            summary.start_ns,
            &summary.latency.tail,
        )
    }

    /// [`EvidenceBuilder::finish`] from the parts of a summary or a snapshot: the paths and
    /// outages, the first observation, the independence prediction's points.
    pub fn finish_with(
        &self,
        (path_views, outage_records): (&[PathView], &[OutageRecord]),
        first_ns: u64,
        tail: &[TailPoint],
    ) -> Evidence {
        // The busiest flow sets the rate, the size and the span replayed (its first to its
        // last message); outages are placed from its first message.
        let busiest = self
            .flows
            .iter()
            .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)));
        let (flow, messages_per_s, message_bytes, messages, start, duration_s) = match busiest {
            Some((name, n, bytes, first, last)) => {
                let span = (last.saturating_sub(*first) as f64 / 1e9).max(1e-3);
                let rate = if *n > 1 { (*n - 1) as f64 / span } else { 1.0 };
                let per = *bytes as f64 / *n as f64;
                (name.clone(), rate, per, *n, *first, span)
            }
            None => (String::new(), 0.0, 0.0, 0, first_ns, 1e-3),
        };
        let mut paths = Vec::new();
        for pv in path_views {
            let (mut seen, ack) = self
                .paths
                .iter()
                .find(|c| c.label == pv.label)
                .map(|c| (c.copies.kept().to_vec(), c.ack))
                .unwrap_or_default();
            let outages: Vec<(f64, f64)> = outage_records
                .iter()
                .filter(|o| o.path == pv.label)
                .map(|o| {
                    (
                        o.start_ns.saturating_sub(start) as f64 / 1e9,
                        o.duration_ns as f64 / 1e9,
                    )
                })
                .collect();
            // Copies sent in an outage, or within a second after it (behind its backlog), say
            // nothing of the path's delay and loss: the outage is replayed by itself.
            let in_outage = |t: u64| {
                let s = t.saturating_sub(start) as f64 / 1e9;
                outages.iter().any(|o| s >= o.0 && s < o.0 + o.1 + 1.0)
            };
            seen.retain(|s| !in_outage(s.0));
            seen.sort_unstable_by_key(|s| s.0);
            // A copy whose first transmission was lost arrived a round trip or more late (a
            // retransmission), or never: later than the path's median delay by four times its
            // spread to the 90th percentile and by that median again (jitter stays within it;
            // a recovery takes at least a round trip). The flows' own counts of transmissions
            // are not enough: a spurious resend (KCP's, at a short RTO) is no loss, and not
            // every flow shows its resends.
            let mut all: Vec<u64> = seen.iter().filter_map(|s| s.1).collect();
            all.sort_unstable();
            let (p50, p90) = (quantile(&all, 0.5), quantile(&all, 0.9));
            let late = p50.saturating_add((4 * p90.saturating_sub(p50)).max(p50));
            // (first send, delay if its first transmission went through, flow)
            let sends: Vec<(u64, Option<u64>, usize)> = seen
                .iter()
                .map(|&(t, d, f)| (t, d.filter(|&d| d <= late), f))
                .collect();
            let mut samples: Vec<u64> = sends.iter().filter_map(|s| s.1).collect();
            if samples.is_empty() {
                continue;
            }
            samples.sort_unstable();
            // The path's floor: its 1st percentile (a stray sample below it says nothing).
            let lowest = quantile(&samples, 0.01);
            let queue_ms = quantile(&samples, 0.5).saturating_sub(lowest) as f64 / 1000.0;
            let lost = sends.iter().filter(|s| s.1.is_none()).count();
            // Per flow, of the flows with 100 copies or more.
            let mut per_flow: Vec<(usize, usize, usize)> = Vec::new();
            for s in &sends {
                match per_flow.iter_mut().find(|f| f.0 == s.2) {
                    Some(f) => {
                        f.1 += 1;
                        f.2 += usize::from(s.1.is_none());
                    }
                    None => per_flow.push((s.2, 1, usize::from(s.1.is_none()))),
                }
            }
            // The flows that show their losses (a flow whose copies are never counted as sent
            // again — TCP cut by framing — says nothing), of 100 copies or more where there
            // are such: the median flow's share (a flow that resends spuriously counts high).
            let enough = per_flow.iter().any(|f| f.1 >= 100 && f.2 > 0);
            let mut showing: Vec<(usize, usize, usize)> = per_flow
                .iter()
                .filter(|f| f.2 > 0 && (!enough || f.1 >= 100))
                .copied()
                .collect();
            showing.sort_by(|a, b| (a.2 * b.1).cmp(&(b.2 * a.1)));
            let (loss, loss_from) = match showing.get(showing.len().saturating_sub(1) / 2) {
                Some(&(fl, n, l)) => (
                    l as f64 / n.max(1) as f64,
                    format!(
                        "{l} of the {n} copies of {} sent on {} outside outages were lost \
                         (never arrived, or only by a retransmission; the median of {} flows)",
                        self.flows.get(fl).map_or("", |f| f.0.as_str()),
                        pv.label,
                        showing.len()
                    ),
                ),
                None => (
                    0.0,
                    format!(
                        "none of the {} copies sent on {} outside outages was lost",
                        sends.len(),
                        pv.label
                    ),
                ),
            };
            // Queueing before each loss outside outages: the median delay above the lowest of
            // the clean copies sent in the 500 ms before it.
            let mut before_loss = Vec::new();
            let mut from = 0usize;
            for (i, s) in sends.iter().enumerate() {
                if s.1.is_some() {
                    continue;
                }
                while from < i && sends[from].0 + 500_000_000 < s.0 {
                    from += 1;
                }
                let mut w: Vec<u64> = sends[from..i].iter().filter_map(|x| x.1).collect();
                if !w.is_empty() {
                    w.sort_unstable();
                    before_loss.push(quantile(&w, 0.5).saturating_sub(lowest));
                }
            }
            before_loss.sort_unstable();
            let queue_at_loss_ms =
                (!before_loss.is_empty()).then(|| quantile(&before_loss, 0.5) as f64 / 1000.0);
            let floor_ms = lowest as f64 / 1000.0;
            // A standing queue: the median copy waits at least 50 ms, and as long again as the
            // path's own floor, above that floor (a link loaded beyond its rate).
            let standing = queue_ms >= 50.0 && queue_ms >= floor_ms;
            let loss_kind = match queue_at_loss_ms {
                _ if standing => LossKind::Congestion,
                Some(q) if before_loss.len() >= 5 && lost >= 5 => {
                    // Losses after the queue had grown to twice its usual (and 10 ms).
                    if q >= 10.0 && q >= 2.0 * queue_ms.max(1.0) {
                        LossKind::Congestion
                    } else {
                        LossKind::Random
                    }
                }
                _ => LossKind::Unknown,
            };
            if samples.len() > MAX_SAMPLES {
                let step = samples.len() as f64 / MAX_SAMPLES as f64;
                samples = (0..MAX_SAMPLES)
                    .filter_map(|i| samples.get((i as f64 * step) as usize).copied())
                    .collect();
            }
            paths.push(PathEvidence {
                path: pv.label.clone(),
                delay_p50_ms: quantile(&samples, 0.5) as f64 / 1000.0,
                delay_p99_ms: quantile(&samples, 0.99) as f64 / 1000.0,
                delay_samples: samples.len() as u64,
                delay_from: if ack {
                    LatencyKind::AckRtt
                } else {
                    LatencyKind::OneWay
                },
                loss,
                loss_from,
                loss_kind,
                queue_at_loss_ms,
                queue_ms,
                floor_ms,
                outages,
                samples_us: samples,
            });
        }
        let mut combined = self.combined_us.kept().to_vec();
        combined.sort_unstable();
        let observed = self.combined_us.seen();
        let observed_redundant = (combined.len() >= 100).then(|| {
            let q = |p| quantile(&combined, p) as f64 / 1000.0;
            (q(0.5), q(0.99), q(0.999), observed)
        });
        let independence_at_p99 = observed_redundant.and_then(|(_, p99, _, _)| {
            let t = (p99 * 1000.0) as u64;
            let tail = tail.iter().min_by_key(|p| p.t_us.abs_diff(t))?;
            Some((tail.predicted, tail.observed))
        });
        Evidence {
            duration_s,
            flow,
            messages_per_s,
            message_bytes,
            messages,
            paths,
            observed_redundant,
            independence_at_p99,
        }
    }
}

/// The `q` quantile of sorted `v` (rank ⌈q·n⌉; the default when empty).
fn quantile<T: Copy + Default>(v: &[T], q: f64) -> T {
    if v.is_empty() {
        return T::default();
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// One path as the replay sees it (ms).
struct Link<'a> {
    samples_us: &'a [u64],
    loss: f64,
    outages: &'a [(f64, f64)],
    /// The span the outages were captured in (s).
    period_s: f64,
    srtt: f64,
    rttvar: f64,
}

impl<'a> Link<'a> {
    fn of(p: &'a PathEvidence, period_s: f64) -> Self {
        let one_way = p.delay_p50_ms;
        let spread =
            (quantile(&p.samples_us, 0.9) as f64 - quantile(&p.samples_us, 0.1) as f64) / 1000.0;
        Self {
            samples_us: &p.samples_us,
            loss: p.loss.clamp(0.0, 0.95),
            outages: &p.outages,
            period_s: period_s.max(1e-3),
            srtt: 2.0 * one_way,
            rttvar: spread.max(1.0),
        }
    }

    fn up_at(&self, t_ms: f64) -> bool {
        // The captured span repeats, its outages with it.
        let s = (t_ms / 1000.0) % self.period_s;
        !self.outages.iter().any(|o| s >= o.0 && s < o.0 + o.1)
    }

    /// A transmission at `t`: its arrival, if it gets through.
    fn send(&self, t: f64, d: &mut SplitMix64) -> Option<f64> {
        if !self.up_at(t) || d.unit() < self.loss {
            return None;
        }
        let i = (d.next_u64() % self.samples_us.len().max(1) as u64) as usize;
        Some(t + self.samples_us.get(i).copied().unwrap_or(0) as f64 / 1000.0)
    }
}

/// What a replay of one option gave per message.
#[derive(Default)]
struct Replay {
    /// Per message in send order: its latency, or `None` if never delivered.
    latency_ms: Vec<Option<f64>>,
    /// Data transmissions (all paths).
    transmissions: u64,
    /// ACK packets.
    acks: u64,
}

/// KCP on `link`: every message a segment, sent at the next update; a lost one resent after
/// two later ones were acknowledged (fast resend) or at its RTO (×1.5 per timeout, nodelay);
/// delivered to the application in order.
fn replay_kcp(link: &Link, times: &[f64], interval_ms: f64, d: &mut SplitMix64) -> Replay {
    let mut r = Replay::default();
    let rto0 = (link.srtt + (4.0 * link.rttvar).max(KCP_INTERVAL_MS)).max(KCP_RTO_MIN_MS);
    let mut in_order = 0f64;
    for &t in times {
        let mut at = t + d.unit() * KCP_INTERVAL_MS;
        let mut rto = rto0;
        let mut arrived = None;
        for k in 0..KCP_DEAD_LINK {
            r.transmissions += 1;
            if let Some(a) = link.send(at, d) {
                arrived = Some(a);
                break;
            }
            // Fast resend: the acks of the next two messages, once, early on.
            let fast = at + 2.0 * interval_ms + link.srtt;
            let next = if k == 0 && 2.0 * interval_ms < rto && link.up_at(fast) {
                fast
            } else {
                at + rto
            };
            rto *= 1.5;
            // Sent at the next update.
            at = next + d.unit() * KCP_INTERVAL_MS;
        }
        r.latency_ms.push(arrived.map(|a| {
            r.acks += 1;
            in_order = in_order.max(a);
            in_order - t
        }));
    }
    r
}

/// QUIC's congestion window as quinn runs it (RFC 9002 with CUBIC's β = 0.7), in bytes: it
/// starts at ten 1200-byte datagrams, falls by 0.3 at each loss (one cut per round trip),
/// never below two datagrams, and grows only while it holds messages back — an app-limited
/// flow such as a T-Box's never grows it back, so after a few losses a lost packet's bytes
/// keep the next messages waiting for room.
struct Window {
    bytes: f64,
    ssthresh: f64,
    /// When the last cut happened: losses of packets sent before it do not cut again.
    recovery_start: f64,
    in_flight: f64,
    /// Pending acknowledgments and loss declarations, earliest first.
    events: BinaryHeap<Reverse<WindowEvent>>,
    seq: u64,
}

/// Something that happens to the window at a time (µs, then in order of scheduling).
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct WindowEvent {
    at_us: i64,
    seq: u64,
    kind: WindowChange,
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum WindowChange {
    /// A message's last transmission acknowledged (or given up): its bytes leave the
    /// flight; it grows the window when it was sent while the window held messages back.
    Left {
        sent_us: i64,
        bytes: u32,
        grows: bool,
    },
    /// A transmission declared lost.
    Lost { sent_us: i64 },
}

/// QUIC datagrams the window is counted in (bytes).
const QUIC_DATAGRAM: f64 = 1200.0;

impl Window {
    fn new() -> Self {
        Self {
            bytes: 10.0 * QUIC_DATAGRAM,
            ssthresh: f64::INFINITY,
            recovery_start: f64::NEG_INFINITY,
            in_flight: 0.0,
            events: BinaryHeap::new(),
            seq: 0,
        }
    }

    fn schedule(&mut self, at_ms: f64, kind: WindowChange) {
        self.seq += 1;
        self.events.push(Reverse(WindowEvent {
            at_us: (at_ms * 1000.0) as i64,
            seq: self.seq,
            kind,
        }));
    }

    /// Applies the next event if it happens by `until` (ms); its time, if one was applied.
    fn advance(&mut self, until: f64) -> Option<f64> {
        let at_us = self.events.peek()?.0.at_us;
        if at_us as f64 / 1000.0 > until {
            return None;
        }
        let Reverse(e) = self.events.pop()?;
        let at = e.at_us as f64 / 1000.0;
        match e.kind {
            WindowChange::Left {
                sent_us,
                bytes,
                grows,
            } => {
                let bytes = f64::from(bytes);
                self.in_flight = (self.in_flight - bytes).max(0.0);
                if grows && sent_us as f64 / 1000.0 > self.recovery_start {
                    self.bytes += if self.bytes < self.ssthresh {
                        bytes
                    } else {
                        QUIC_DATAGRAM * bytes / self.bytes
                    };
                }
            }
            WindowChange::Lost { sent_us } => {
                if sent_us as f64 / 1000.0 > self.recovery_start {
                    self.recovery_start = at;
                    self.ssthresh = (0.7 * self.bytes).max(2.0 * QUIC_DATAGRAM);
                    self.bytes = self.ssthresh;
                }
            }
        }
        Some(at)
    }

    /// When a packet of `size` bytes ready at `t` may be sent: at once if the window has room,
    /// else once enough of the flight has left.
    fn room_at(&mut self, t: f64, size: f64) -> f64 {
        while self.advance(t).is_some() {}
        let mut at = t;
        while self.in_flight > 0.0 && self.in_flight + size > self.bytes {
            match self.advance(f64::INFINITY) {
                Some(e) => at = at.max(e),
                None => break,
            }
        }
        at
    }
}

/// QUIC on `link`, a stream per message (no head-of-line blocking between messages), each
/// message `size` bytes on the wire: sent when the congestion [`Window`] has room; a lost
/// packet declared lost once a later one is acknowledged (9/8 RTT) and resent; without a
/// later acknowledgment the PTO fires, doubling per consecutive firing of the connection; a
/// packet overtaken by the next one past the time threshold is resent needlessly and cuts the
/// window all the same.
fn replay_quic(
    link: &Link,
    times: &[f64],
    interval_ms: f64,
    size: f64,
    d: &mut SplitMix64,
) -> Replay {
    let mut r = Replay::default();
    let pto0 = link.srtt + (4.0 * link.rttvar).max(1.0) + QUIC_MAX_ACK_DELAY_MS;
    let mut window = Window::new();
    // The connection's probe series: from its first unacknowledged send until a probe got
    // through; and the last probe firing counted (a firing sends one probe for the
    // connection, not one per message).
    let mut series: Option<(f64, f64)> = None;
    let mut probes_counted_to = f64::NEG_INFINITY;
    // The previous message's first transmission, when it got through: (sent, arrival).
    let mut previous: Option<(f64, f64)> = None;
    for (i, &t) in times.iter().enumerate() {
        let sent = window.room_at(t, size);
        let mut at = sent;
        let mut by_probe = false;
        let mut arrived = None;
        for k in 0..QUIC_GIVE_UP {
            let got = link.send(at, d);
            if got.is_some() || !by_probe || at > probes_counted_to {
                r.transmissions += 1;
                if by_probe {
                    probes_counted_to = probes_counted_to.max(at);
                }
            }
            if let Some(a) = got {
                if by_probe {
                    if let Some(s) = &mut series {
                        s.1 = s.1.min(at);
                    }
                }
                arrived = Some(a);
                break;
            }
            let lost_at = at;
            if k == 0 && interval_ms < pto0 && link.up_at(at + interval_ms) {
                // A later packet acknowledged (the receiver may hold its ACK up to
                // max_ack_delay): lost by the packet or time threshold then.
                let acked = at + interval_ms + link.srtt + QUIC_MAX_ACK_DELAY_MS;
                at = acked.max(at + 1.125 * link.srtt);
                by_probe = false;
            } else {
                // The PTO: probes double from the series' first unacknowledged send.
                let since = match series {
                    Some((since, until)) if at < until => since,
                    _ => {
                        series = Some((at, f64::INFINITY));
                        at
                    }
                };
                let (mut fire, mut step) = (since + pto0, pto0);
                while fire <= at {
                    step *= 2.0;
                    fire += step;
                }
                at = fire;
                by_probe = true;
            }
            window.schedule(
                at,
                WindowChange::Lost {
                    sent_us: (lost_at * 1000.0) as i64,
                },
            );
        }
        // Overtaken by this message's first transmission (the paths' jitter reorders
        // packets), the previous one is taken for lost by the time threshold when the
        // receiver's immediate acknowledgment of the gap comes back after 9/8 of the RTT:
        // a needless resend, and a window cut like a real loss.
        let first = arrived.filter(|_| at == sent);
        if let (Some((p_sent, p_arrived)), Some(a)) = (previous, first) {
            let acked = a + link.srtt / 2.0;
            if a < p_arrived && acked - p_sent > 1.125 * link.srtt {
                r.transmissions += 1;
                window.schedule(
                    acked,
                    WindowChange::Lost {
                        sent_us: (p_sent * 1000.0) as i64,
                    },
                );
            }
        }
        previous = first.map(|a| (sent, a));
        // The receiver acknowledges every second packet at once, the other after up to
        // max_ack_delay; the acknowledgment takes half a round trip back.
        let ack_delay = if i % 2 == 1 {
            0.0
        } else {
            interval_ms.min(QUIC_MAX_ACK_DELAY_MS)
        };
        let left = arrived.map_or(at, |a| a + ack_delay + link.srtt / 2.0);
        window.in_flight += size;
        window.schedule(
            left,
            WindowChange::Left {
                sent_us: (at * 1000.0) as i64,
                bytes: size as u32,
                grows: sent > t,
            },
        );
        if arrived.is_some() {
            r.acks += 1;
        }
        r.latency_ms.push(arrived.map(|a| a - t));
    }
    // Acknowledgments every second packet (or after max_ack_delay).
    r.acks = r.acks.div_ceil(2);
    r
}

/// The send times (ms) of `n` messages at the capture's rate (the captured span, and its
/// outages, repeated as often as needed).
fn timeline(ev: &Evidence, n: usize) -> Vec<f64> {
    let gap = 1000.0 / ev.messages_per_s.max(0.1);
    (0..n).map(|i| i as f64 * gap).collect()
}

/// P50, P99 and P999 of `v`.
fn percentiles(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_unstable_by(f64::total_cmp);
    (quantile(&v, 0.5), quantile(&v, 0.99), quantile(&v, 0.999))
}

/// Replays option `t` on `paths` (indices into the evidence's paths).
fn predict(ev: &Evidence, t: Transport, paths: &[usize], limits: &Limits) -> OptionPrediction {
    let times = timeline(ev, REPLAYED / SEEDS as usize);
    let interval = 1000.0 / ev.messages_per_s.max(0.1);
    let quic_packet = ev.message_bytes.max(1.0) + QUIC_OVERHEAD;
    let links: Vec<Link> = paths
        .iter()
        .map(|&i| Link::of(&ev.paths[i], ev.duration_s))
        .collect();
    let (mut all, mut p99s, mut lost, mut tx, mut acks) = (Vec::new(), Vec::new(), 0u64, 0, 0);
    for seed in 0..SEEDS {
        let mut d = SplitMix64::new(0x7b0c_5c0e ^ seed.wrapping_mul(0x9e37_79b9));
        let runs: Vec<Replay> = links
            .iter()
            .map(|l| match t {
                Transport::Kcp => replay_kcp(l, &times, interval, &mut d),
                Transport::Quic | Transport::Redundant => {
                    replay_quic(l, &times, interval, quic_packet, &mut d)
                }
            })
            .collect();
        // Each message as early as its first copy (the paths' draws independent, their
        // outages as captured).
        let mut l = 0u64;
        let mut lat = Vec::with_capacity(times.len());
        for i in 0..times.len() {
            let first = runs
                .iter()
                .filter_map(|r| r.latency_ms.get(i).copied().flatten())
                .reduce(f64::min);
            match first {
                Some(x) => lat.push(x),
                None => l += 1,
            }
        }
        for r in &runs {
            tx += r.transmissions;
            acks += r.acks;
        }
        lost += l;
        p99s.push(percentiles(lat.clone()).1);
        all.extend(lat);
    }
    let n = (times.len() as u64 * SEEDS).max(1);
    let (p50, p99, p999) = percentiles(all);
    let size = ev.message_bytes.max(1.0);
    let overhead = match t {
        Transport::Kcp => IP_UDP + KCP_HEADER,
        _ => IP_UDP + QUIC_OVERHEAD,
    };
    let uplink_factor = tx as f64 * (size + overhead) / (n as f64 * size);
    let ack_bytes = match t {
        // KCP acknowledges each segment: 24 bytes in the receiver's next update packet.
        Transport::Kcp => acks as f64 * (KCP_HEADER + IP_UDP),
        _ => acks as f64 * QUIC_ACK_BYTES,
    };
    let bandwidth_factor = uplink_factor + ack_bytes / (n as f64 * size);
    let uplink_use_pct = limits
        .uplink_kbps
        .map(|k| ev.messages_per_s * size * 8.0 * uplink_factor / (k * 1000.0) * 100.0);
    let observed = match t {
        Transport::Redundant => ev.observed_redundant,
        _ => None,
    };
    let names: Vec<String> = paths.iter().map(|&i| ev.paths[i].path.clone()).collect();
    let basis = match observed {
        Some((_, _, _, m)) => format!(
            "replayed from {}'s delay, loss and outages; the capture's own redundant messages \
             ({m}) beside it",
            names.join(" and ")
        ),
        None => format!(
            "replayed from {}'s delay, loss and outages",
            names.join(" and ")
        ),
    };
    let p99_lo = p99s.iter().copied().fold(f64::INFINITY, f64::min);
    let p99_hi = p99s.iter().copied().fold(0.0, f64::max);
    OptionPrediction {
        transport: t,
        paths: names,
        predicted_p50_ms: round(p50),
        predicted_p99_ms: round(p99),
        predicted_p999_ms: round(p999),
        p99_range_ms: (round(p99_lo), round(p99_hi)),
        samples: n,
        lost_per_million: lost as f64 * 1e6 / n as f64,
        bandwidth_factor: round(bandwidth_factor),
        uplink_factor: round(uplink_factor),
        uplink_use_pct: uplink_use_pct.map(round),
        meets_sla: limits.sla_p99_ms.map(|s| p99 <= s),
        observed_p99_ms: observed.map(|o| o.1),
        basis,
    }
}

fn round(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// The advice for `ev` within `limits`; `None` when the capture measured no path's delay.
pub fn advise(ev: Evidence, limits: Limits) -> Option<Advice> {
    if ev.paths.is_empty() || ev.messages == 0 {
        return None;
    }
    let mut options = Vec::new();
    for t in [Transport::Kcp, Transport::Quic] {
        for i in 0..ev.paths.len() {
            options.push(predict(&ev, t, &[i], &limits));
        }
    }
    if ev.paths.len() >= 2 {
        let all: Vec<usize> = (0..ev.paths.len()).collect();
        options.push(predict(&ev, Transport::Redundant, &all, &limits));
    }
    let (recommendation, paths, reasons, would_change) = decide(&ev, &options, &limits);
    // The delay samples were for the replay: the advice keeps their figures only.
    let mut ev = ev;
    for p in &mut ev.paths {
        p.samples_us = Vec::new();
    }
    Some(Advice {
        recommendation,
        paths,
        reasons,
        would_change,
        options,
        evidence: ev,
    })
}

/// The seed's table, on the predictions: handovers → redundant; random loss below 0.5 % →
/// KCP; 0.5–5 % → redundant where the uplink allows it, else KCP; 5–10 % → KCP, or QUIC where
/// the uplink is tight; above 10 % or congestion loss → QUIC (redundant if QUIC misses the
/// SLA). Options the SLA or the uplink rule out are never recommended.
fn decide(
    ev: &Evidence,
    options: &[OptionPrediction],
    limits: &Limits,
) -> (Transport, Vec<String>, Vec<String>, Vec<String>) {
    let mut reasons = Vec::new();
    let mut would_change = Vec::new();
    let best_single = |t: Transport| {
        options
            .iter()
            .filter(|o| o.transport == t)
            .min_by(|a, b| a.predicted_p99_ms.total_cmp(&b.predicted_p99_ms))
    };
    let (kcp, quic) = (best_single(Transport::Kcp), best_single(Transport::Quic));
    let redundant = options.iter().find(|o| o.transport == Transport::Redundant);
    // The single path: the one KCP does best on.
    let single = kcp.and_then(|k| ev.paths.iter().find(|p| p.path == k.paths[0]));
    let loss = single.map_or(0.0, |p| p.loss);
    let congestion: Vec<&PathEvidence> = ev
        .paths
        .iter()
        .filter(|p| p.loss_kind == LossKind::Congestion)
        .collect();
    let outages: Vec<&PathEvidence> = ev.paths.iter().filter(|p| !p.outages.is_empty()).collect();
    let describe = |o: &OptionPrediction| {
        format!(
            "{}: P99 {:.0} ms, {:.2}× bandwidth",
            o.name(),
            o.predicted_p99_ms,
            o.bandwidth_factor
        )
    };
    let mut wanted: Vec<&OptionPrediction> = Vec::new();
    if !outages.is_empty() {
        for p in &outages {
            let n = p.outages.len();
            reasons.push(format!(
                "{} was down {:.1} s at the longest ({n} outage{} in {:.0} s): a single path \
                 holds every message sent in that window until it comes back",
                p.path,
                p.longest_outage_s(),
                if n == 1 { "" } else { "s" },
                ev.duration_s
            ));
        }
        if let Some(r) = redundant {
            reasons.push(format!(
                "redundant sending carries them over the other path: {}",
                describe(r)
            ));
        } else {
            // One path measured: redundant sending cannot be predicted; of the single-path
            // options, the one that comes back from the outage best.
            reasons.push(
                "only one path carried this traffic: redundant sending, the answer to \
                 handovers, needs the second path measured (capture traffic on both)"
                    .to_owned(),
            );
            let mut singles: Vec<&OptionPrediction> = options.iter().collect();
            singles.sort_by(|a, b| a.predicted_p99_ms.total_cmp(&b.predicted_p99_ms));
            wanted.extend(singles);
            would_change.push(
                "traffic on a second path in the capture: redundant sending over both".to_owned(),
            );
        }
        wanted.extend(redundant);
        if let Some(k) = kcp {
            would_change.push(format!(
                "without handovers, loss of {:.1} % would put KCP first ({})",
                loss * 100.0,
                describe(k)
            ));
        }
    } else if !congestion.is_empty() || loss > 0.10 {
        match congestion.first() {
            Some(p) if p.queue_ms >= 50.0 && p.queue_ms >= p.floor_ms => reasons.push(format!(
                "{} holds a standing queue (the median copy waits {:.0} ms above the path's \
                 floor of {:.0} ms): congestion, where KCP's fast resend adds to the load",
                p.path, p.queue_ms, p.floor_ms
            )),
            Some(p) => reasons.push(format!(
                "{}'s losses come with a full queue ({:.0} ms of queueing before them, \
                 {:.0} ms otherwise): congestion, where KCP's fast resend adds to the load",
                p.path,
                p.queue_at_loss_ms.unwrap_or(0.0),
                p.queue_ms
            )),
            None => reasons.push(format!(
                "loss of {:.1} % on the best path: KCP's fast resend fails under consecutive \
                 losses",
                loss * 100.0
            )),
        }
        wanted.extend(quic);
        wanted.extend(redundant);
    } else if loss < 0.005 {
        reasons.push(format!(
            "no outage and {:.2} % loss on the best path: KCP recovers within a round trip at \
             the least bandwidth",
            loss * 100.0
        ));
        wanted.extend(kcp);
        wanted.extend(redundant);
        would_change.push(
            "an outage (a cell handover) would make redundant sending worth its bandwidth"
                .to_owned(),
        );
    } else if loss <= 0.05 {
        reasons.push(format!(
            "no outage and {:.1} % loss on the best path: redundant sending has the most \
             margin; KCP stays close at half the bandwidth",
            loss * 100.0
        ));
        wanted.extend(redundant);
        wanted.extend(kcp);
        if let (Some(r), Some(k)) = (redundant, kcp) {
            let need = ev.messages_per_s * ev.message_bytes * 8.0 * r.uplink_factor / 1000.0;
            would_change.push(format!(
                "an uplink below {need:.0} kbit/s would not fit redundant sending: KCP then ({})",
                describe(k)
            ));
        }
    } else {
        reasons.push(format!(
            "no outage and {:.1} % loss on the best path: KCP is slightly ahead of QUIC, which \
             costs less bandwidth",
            loss * 100.0
        ));
        wanted.extend(kcp);
        wanted.extend(quic);
        wanted.extend(redundant);
    }
    for o in options {
        if !wanted.iter().any(|w| std::ptr::eq(*w, o)) {
            wanted.push(o);
        }
    }
    let pick = wanted.iter().find(|o| o.allowed()).copied();
    let first = wanted.first().copied();
    if let (Some(f), Some(p)) = (first, pick) {
        if !std::ptr::eq(f, p) {
            let why = match (f.meets_sla, f.uplink_use_pct) {
                (Some(false), _) => format!(
                    "{} would miss the P99 of {:.0} ms ({:.0} ms predicted)",
                    f.name(),
                    limits.sla_p99_ms.unwrap_or(0.0),
                    f.predicted_p99_ms
                ),
                (_, Some(u)) => format!(
                    "{} would use {u:.0} % of the {:.0} kbit/s uplink",
                    f.name(),
                    limits.uplink_kbps.unwrap_or(0.0)
                ),
                _ => format!("{} is ruled out", f.name()),
            };
            reasons.push(why);
            would_change.push(format!(
                "a looser SLA or a wider uplink would allow {}",
                f.name()
            ));
        }
    }
    let chosen = pick.or_else(|| {
        // Nothing fits: the lowest P99 of those that fit the uplink, else of all.
        let fits: Vec<&OptionPrediction> = options
            .iter()
            .filter(|o| o.uplink_use_pct.is_none_or(|u| u <= 100.0))
            .collect();
        let pool: Vec<&OptionPrediction> = if fits.is_empty() {
            options.iter().collect()
        } else {
            fits
        };
        pool.into_iter()
            .min_by(|a, b| a.predicted_p99_ms.total_cmp(&b.predicted_p99_ms))
    });
    let Some(c) = chosen else {
        return (Transport::Redundant, Vec::new(), reasons, would_change);
    };
    if pick.is_none() {
        reasons.push(format!(
            "no option meets the limits: {} comes closest",
            describe(c)
        ));
    } else if !reasons.iter().any(|r| r.contains(&describe(c))) {
        reasons.push(format!("predicted on this link: {}", describe(c)));
    }
    (c.transport, c.paths.clone(), reasons, would_change)
}

/// The advice as the terminal report.
pub fn render(a: &Advice) -> String {
    let mut s = String::new();
    let ev = &a.evidence;
    let _ = writeln!(
        s,
        "advice: {} ({})",
        a.recommendation.as_str(),
        a.paths.join(" + ")
    );
    for r in &a.reasons {
        let _ = writeln!(s, "  because {r}");
    }
    for w in &a.would_change {
        let _ = writeln!(s, "  would change: {w}");
    }
    let _ = writeln!(
        s,
        "\nevidence: {} — {} messages, {:.1}/s × {:.0} B, over {:.1} s of capture",
        ev.flow, ev.messages, ev.messages_per_s, ev.message_bytes, ev.duration_s
    );
    // Columns as wide as the longest label (interface names run to 15 characters).
    let pw = ev
        .paths
        .iter()
        .map(|p| p.path.chars().count())
        .fold(12, usize::max);
    let _ = writeln!(
        s,
        "  {:<pw$} {:>9} {:>9} {:>8} {:<8} {:>7} {:<11} outages",
        "path", "delay P50", "P99", "samples", "from", "loss", "loss kind"
    );
    for p in &ev.paths {
        let outages = match p.outages.len() {
            0 => "none".to_owned(),
            n => format!("{n}, longest {:.1} s", p.longest_outage_s()),
        };
        let kind = match p.loss_kind {
            LossKind::Unknown => "too few".to_owned(),
            LossKind::Random => "random".to_owned(),
            LossKind::Congestion => format!(
                "congestion (queue {:.0} ms before losses, {:.0} ms otherwise)",
                p.queue_at_loss_ms.unwrap_or(0.0),
                p.queue_ms
            ),
        };
        let from = match p.delay_from {
            LatencyKind::OneWay => "one-way",
            LatencyKind::AckRtt => "RTT/2",
        };
        let _ = writeln!(
            s,
            "  {:<pw$} {:>6.1} ms {:>6.1} ms {:>8} {:<8} {:>6.2}% {:<11} {outages}",
            p.path,
            p.delay_p50_ms,
            p.delay_p99_ms,
            p.delay_samples,
            from,
            p.loss * 100.0,
            kind
        );
        let _ = writeln!(s, "  {:<pw$} loss from {}", "", p.loss_from);
    }
    if let Some((p50, p99, p999, n)) = ev.observed_redundant {
        let _ = write!(
            s,
            "  redundant messages in the capture ({n}): P50 {p50:.1} ms, P99 {p99:.1} ms, \
             P999 {p999:.1} ms"
        );
        if let Some((pred, obs)) = ev.independence_at_p99 {
            let _ = write!(
                s,
                "; above the P99 independent paths predict {:.3} %, observed {:.3} %",
                pred * 100.0,
                obs * 100.0
            );
        }
        let _ = writeln!(s);
    }
    let samples = a.options.first().map_or(0, |o| o.samples);
    let _ = writeln!(
        s,
        "\noptions on this link ({samples} messages replayed each, application to application):"
    );
    let names: Vec<String> = a
        .options
        .iter()
        .map(|o| match o.transport {
            Transport::Redundant => format!("redundant {}", o.paths.join("+")),
            t => format!("{} on {}", t.as_str(), o.paths.join("+")),
        })
        .collect();
    let ow = names.iter().map(|n| n.chars().count()).fold(22, usize::max);
    let _ = writeln!(
        s,
        "  {:<ow$} {:>9} {:>9} {:>9} {:>19} {:>9} {:>7} {:>5}",
        "option", "P50", "P99", "P999", "P99 over replays", "bandwidth", "uplink", "SLA"
    );
    for (o, name) in a.options.iter().zip(&names) {
        let uplink = o
            .uplink_use_pct
            .map_or("-".to_owned(), |u| format!("{u:.0}%"));
        let sla = match o.meets_sla {
            Some(true) => "meets",
            Some(false) => "miss",
            None => "-",
        };
        let range = format!("{:.1}–{:.1} ms", o.p99_range_ms.0, o.p99_range_ms.1);
        let _ = writeln!(
            s,
            "  {:<ow$} {:>6.1} ms {:>6.1} ms {:>6.1} ms {:>19} {:>8.2}× {:>7} {:>5}",
            name,
            o.predicted_p50_ms,
            o.predicted_p99_ms,
            o.predicted_p999_ms,
            range,
            o.bandwidth_factor,
            uplink,
            sla
        );
        if let Some(obs) = o.observed_p99_ms {
            let _ = writeln!(s, "  {:<ow$} observed P99 {obs:.1} ms", "");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(
        name: &str,
        one_way_ms: u64,
        jitter_ms: u64,
        loss: f64,
        outages: Vec<(f64, f64)>,
    ) -> PathEvidence {
        let samples_us: Vec<u64> = (0..2000u64)
            .map(|i| {
                (one_way_ms * 1000 + (i * 7919 % (2 * jitter_ms * 1000 + 1)))
                    .saturating_sub(jitter_ms * 1000)
            })
            .collect();
        let mut s = samples_us.clone();
        s.sort_unstable();
        PathEvidence {
            path: name.to_owned(),
            delay_p50_ms: quantile(&s, 0.5) as f64 / 1000.0,
            delay_p99_ms: quantile(&s, 0.99) as f64 / 1000.0,
            delay_samples: 2000,
            delay_from: LatencyKind::OneWay,
            loss,
            loss_from: String::new(),
            loss_kind: LossKind::Random,
            queue_at_loss_ms: None,
            queue_ms: 0.0,
            floor_ms: 0.0,
            outages,
            samples_us: s,
        }
    }

    fn link(a: PathEvidence, b: PathEvidence) -> Evidence {
        Evidence {
            duration_s: 20.0,
            flow: "f".into(),
            messages_per_s: 50.0,
            message_bytes: 600.0,
            messages: 1000,
            paths: vec![a, b],
            observed_redundant: None,
            independence_at_p99: None,
        }
    }

    fn seed(a_loss: f64, b_loss: f64, outage: bool) -> Evidence {
        let o = if outage { vec![(7.5, 5.0)] } else { Vec::new() };
        link(
            path("eth0", 40, 10, a_loss, o),
            path("eth1", 25, 8, b_loss, Vec::new()),
        )
    }

    #[test]
    fn losses_cut_the_window_to_its_floor_and_then_messages_wait_for_room() {
        let mut w = Window::new();
        // Eight losses, each of a packet sent after the previous cut: 0.7⁸ of ten datagrams
        // is below the floor of two.
        for k in 0..8 {
            w.schedule(
                f64::from(k) + 1.0,
                WindowChange::Lost {
                    sent_us: i64::from(k) * 1000 + 500,
                },
            );
        }
        // A loss of a packet sent before the last cut does not cut again.
        w.schedule(9.0, WindowChange::Lost { sent_us: 7_000 });
        assert_eq!(w.room_at(10.0, 1000.0), 10.0);
        assert_eq!(w.bytes, 2.0 * QUIC_DATAGRAM);
        for sent in [10.0, 15.0] {
            w.in_flight += 1000.0;
            w.schedule(
                sent + 100.0,
                WindowChange::Left {
                    sent_us: (sent * 1000.0) as i64,
                    bytes: 1000,
                    grows: false,
                },
            );
        }
        // 2 000 bytes in flight, 2 400 of room: the third waits for the first to leave.
        assert_eq!(w.room_at(20.0, 1000.0), 110.0);
        // It left without growing the window (the flow was not held back when it was sent).
        assert_eq!(w.bytes, 2.0 * QUIC_DATAGRAM);
    }

    #[test]
    fn quic_on_a_lossy_jittery_path_holds_messages_in_the_sender() {
        let replay = |p: &PathEvidence| {
            let link = Link::of(p, 20.0);
            let times: Vec<f64> = (0..4000).map(|i| f64::from(i) * 20.0).collect();
            replay_quic(&link, &times, 20.0, 633.0, &mut SplitMix64::new(1))
        };
        let p50 = |r: &Replay| {
            let v: Vec<f64> = r.latency_ms.iter().flatten().copied().collect();
            percentiles(v).0
        };
        // Without loss or reordering the window never binds: each message takes the delay.
        let calm = replay(&path("eth0", 40, 0, 0.0, Vec::new()));
        assert_eq!(calm.transmissions, 4000);
        assert!((p50(&calm) - 40.0).abs() < 0.01, "{}", p50(&calm));
        // ±30 ms at 20 ms apart reorders packets: needless resends, and with 2 % loss the cut
        // window makes the middle message wait in the sender.
        let rough = replay(&path("eth0", 40, 30, 0.02, Vec::new()));
        assert!(
            rough.transmissions > 4000 + 80 + 40,
            "{}",
            rough.transmissions
        );
        assert!(p50(&rough) > 45.0, "{}", p50(&rough));
    }

    #[test]
    fn the_seed_table() {
        let r = |ev, l| advise(ev, l).map(|a| a.recommendation);
        let none = Limits::default();
        assert_eq!(r(seed(0.004, 0.003, false), none), Some(Transport::Kcp));
        assert_eq!(
            r(seed(0.02, 0.015, false), none),
            Some(Transport::Redundant)
        );
        assert_eq!(r(seed(0.08, 0.07, false), none), Some(Transport::Kcp));
        assert_eq!(r(seed(0.15, 0.12, false), none), Some(Transport::Quic));
        assert_eq!(r(seed(0.02, 0.015, true), none), Some(Transport::Redundant));
        // 2 % loss on a 500 kbit/s uplink: redundancy fits (≈ 2.2 × 240 kbit/s would not).
        let tight = Limits {
            sla_p99_ms: None,
            uplink_kbps: Some(400.0),
        };
        assert_eq!(r(seed(0.02, 0.015, false), tight), Some(Transport::Kcp));
        // 8 % loss with an uplink KCP's resends overflow: QUIC.
        let a = advise(
            seed(0.08, 0.07, false),
            Limits {
                sla_p99_ms: None,
                uplink_kbps: Some(1000.0),
            },
        )
        .unwrap();
        let kcp = a
            .options
            .iter()
            .find(|o| o.transport == Transport::Kcp)
            .unwrap();
        assert!(kcp.uplink_factor > 1.1, "{kcp:?}");
    }

    #[test]
    fn an_outage_holds_single_path_messages_and_not_redundant_ones() {
        let a = advise(seed(0.02, 0.015, true), Limits::default()).unwrap();
        let on = |t: Transport, p: &str| {
            a.options
                .iter()
                .find(|o| o.transport == t && o.paths.iter().any(|x| x == p))
                .unwrap()
        };
        // A 5 s outage in 20 s: a quarter of eth0's messages wait for it to end.
        assert!(
            on(Transport::Kcp, "eth0").predicted_p99_ms > 3000.0,
            "{a:#?}"
        );
        assert!(on(Transport::Quic, "eth0").predicted_p99_ms > 3000.0);
        let r = on(Transport::Redundant, "eth0");
        assert!(r.predicted_p99_ms < 200.0, "{r:?}");
        // Two copies (≈ 1.1× each with headers), and eth0's quarter sent again after it.
        assert!(
            r.bandwidth_factor > 2.2 && r.bandwidth_factor < 3.0,
            "{r:?}"
        );
        assert!(
            a.reasons[0].contains("eth0 was down 5.0 s"),
            "{:?}",
            a.reasons
        );
    }

    #[test]
    fn an_outage_on_the_only_path_measured_picks_the_single_path_that_recovers_best() {
        let mut ev = seed(0.01, 0.01, true);
        ev.paths.truncate(1);
        let a = advise(ev, Limits::default()).unwrap();
        assert!(a
            .options
            .iter()
            .all(|o| o.transport != Transport::Redundant));
        let best = a
            .options
            .iter()
            .min_by(|x, y| x.predicted_p99_ms.total_cmp(&y.predicted_p99_ms))
            .unwrap();
        assert_eq!(a.recommendation, best.transport, "{a:#?}");
        assert!(
            a.reasons.iter().any(|r| r.contains("only one path")),
            "{:?}",
            a.reasons
        );
        assert!(a.would_change.iter().any(|w| w.contains("second path")));
    }

    #[test]
    fn an_sla_no_option_meets_is_said() {
        let a = advise(
            seed(0.02, 0.015, false),
            Limits {
                sla_p99_ms: Some(1.0),
                uplink_kbps: None,
            },
        )
        .unwrap();
        assert!(
            a.reasons.iter().any(|r| r.contains("no option meets")),
            "{:?}",
            a.reasons
        );
    }

    #[test]
    fn the_tables_columns_line_up_with_long_interface_names() {
        let ev = link(
            path("tbox-wwan0-4g", 40, 10, 0.02, Vec::new()),
            path("tbox-wwan1-5g-sa", 25, 8, 0.015, Vec::new()),
        );
        let text = render(&advise(ev, Limits::default()).unwrap());
        let lines: Vec<&str> = text.lines().collect();
        // The character column where `what` ends on `line`.
        let end = |line: &str, what: &str| {
            line.find(what)
                .map(|i| line[..i].chars().count() + what.chars().count())
        };
        for (header, p50) in [("  path ", "delay P50"), ("  option ", "P50")] {
            let h = lines.iter().position(|l| l.starts_with(header)).unwrap();
            let rows: Vec<&str> = lines[h + 1..]
                .iter()
                .copied()
                .take_while(|l| l.starts_with("  "))
                .filter(|l| !l[2..].starts_with(' '))
                .collect();
            assert!(rows.len() >= 2, "{text}");
            for row in rows {
                // Each row's P50 ("40.2 ms") ends under its heading.
                assert_eq!(end(row, " ms"), end(lines[h], p50), "\n{}\n{row}", lines[h]);
            }
        }
    }

    #[test]
    fn replays_are_repeatable() {
        let a = advise(seed(0.02, 0.015, false), Limits::default()).unwrap();
        let b = advise(seed(0.02, 0.015, false), Limits::default()).unwrap();
        assert_eq!(
            serde_json::to_string(&a.options).unwrap(),
            serde_json::to_string(&b.options).unwrap()
        );
    }
}
