//! The independent-paths prediction: whether redundant paths fail independently, from the
//! messages of redundant flows only (a flow whose messages go on two paths or more). A
//! single-path flow's slow messages say nothing of whether the paths fail together, and its
//! tail (a TCP or KCP flow through an outage) would drown the redundant flows' one.
use crate::latency::{LatencyHist, PATH_SIGFIG};
use crate::shared::ratio;
use crate::snapshot::TailPoint;

/// Slow messages needed beyond a threshold before judging the prediction.
const MIN_TAIL_SAMPLES: f64 = 5.0;

/// One path's copies of redundant flows' messages: their latency, and the messages the path
/// did not carry (slower than any threshold there).
#[derive(Clone, Debug)]
pub struct PathTail {
    latency: LatencyHist,
    missing: u64,
}

impl PathTail {
    /// Empty, latencies bounded at `max_latency_us` (as the path's own histogram).
    #[must_use]
    pub fn new(max_latency_us: u64) -> Self {
        Self {
            latency: LatencyHist::new(max_latency_us, PATH_SIGFIG),
            missing: 0,
        }
    }

    /// One message of a redundant flow this path should carry: whether it did, and its
    /// copy's latency when known (a clamped latency is counted where it is first recorded).
    pub fn record(&mut self, carried: bool, latency_us: Option<u64>) {
        if !carried {
            self.missing += 1;
        }
        if let Some(l) = latency_us {
            self.latency.record(l);
        }
    }
}

/// Redundant flows' messages over all paths: the first copy's latency, and the messages no
/// path delivered (slower than any threshold on every path).
#[derive(Clone, Debug)]
pub struct CombinedTail {
    latency: LatencyHist,
    lost_all: u64,
}

impl CombinedTail {
    /// Empty, latencies bounded at `max_latency_us`.
    #[must_use]
    pub fn new(max_latency_us: u64) -> Self {
        Self {
            latency: LatencyHist::new(max_latency_us, PATH_SIGFIG),
            lost_all: 0,
        }
    }

    /// One message of a redundant flow: its latency when delivered, or lost on every path
    /// (a clamped latency is counted where it is first recorded).
    pub fn record(&mut self, latency_us: Option<u64>, lost: bool) {
        if lost {
            self.lost_all += 1;
        }
        if let Some(l) = latency_us {
            self.latency.record(l);
        }
    }
}

/// Independent-paths prediction P(min > t) = Π P(path > t) at thresholds at the smallest path
/// P90, P99 and P999, against the observed share of redundant messages slower than t on
/// every path, and the verdict. Paths without latency samples take no part.
#[must_use]
pub fn tail_prediction(
    paths: &[&PathTail],
    combined: &CombinedTail,
    shared_cause_ratio: f64,
) -> (Vec<TailPoint>, String) {
    let used: Vec<&PathTail> = paths
        .iter()
        .copied()
        .filter(|p| p.latency.count() > 0)
        .collect();
    if used.len() < 2 {
        return (
            Vec::new(),
            "no redundant flow with latencies on two paths yet: no independent-paths prediction"
                .to_owned(),
        );
    }
    let comb_n = combined.latency.count() + combined.lost_all;
    if comb_n == 0 {
        return (Vec::new(), "no messages of redundant flows yet".to_owned());
    }
    let mut ts: Vec<u64> = [0.9, 0.99, 0.999]
        .iter()
        .map(|q| {
            used.iter()
                .map(|p| p.latency.quantile(*q))
                .min()
                .unwrap_or(0)
        })
        .collect();
    ts.dedup();
    let mut points = Vec::new();
    let mut slow_counts = Vec::new();
    for t in ts {
        let predicted: f64 = used
            .iter()
            .map(|p| {
                ratio(
                    p.latency.count_above(t) + p.missing,
                    p.latency.count() + p.missing,
                )
            })
            .product();
        let slow = combined.latency.count_above(t) + combined.lost_all;
        points.push(TailPoint {
            t_us: t,
            predicted,
            observed: ratio(slow, comb_n),
        });
        slow_counts.push(slow);
    }
    let verdict = tail_verdict(&points, &slow_counts, shared_cause_ratio);
    (points, verdict)
}

/// The verdict comparing the observed combined tail with the independent-paths prediction,
/// judged at the last point (highest threshold) with at least five slow messages; `slow[i]` is
/// how many messages were slower than `points[i].t_us` on every path. The observed share far
/// above the predicted one (by more than `shared_cause_ratio`) means the paths fail together.
fn tail_verdict(points: &[TailPoint], slow: &[u64], shared_cause_ratio: f64) -> String {
    let judged = points
        .iter()
        .zip(slow)
        .rfind(|(_, s)| **s as f64 >= MIN_TAIL_SAMPLES);
    let Some((p, _)) = judged else {
        return "too few slow redundant messages yet to compare their tail with the independent-paths prediction".to_owned();
    };
    let (observed, predicted, t) = (p.observed, p.predicted, crate::units::latency(p.t_us));
    if predicted <= 0.0 || observed / predicted > shared_cause_ratio {
        format!(
            "paths fail together (shared cause): {:.3}% of redundant messages took longer than {t} on every path, {} the {:.4}% expected if the paths were independent",
            observed * 100.0,
            if predicted > 0.0 { format!("{:.0}×", observed / predicted) } else { "far above".to_owned() },
            predicted * 100.0
        )
    } else {
        format!(
            "paths look independent: {:.3}% of redundant messages slower than {t} on every path vs {:.4}% predicted",
            observed * 100.0,
            predicted * 100.0
        )
    }
}
