//! Latency distributions: hdrhistogram with microsecond resolution and bounded memory, plus
//! sliding windows.
//!
//! Precision: a histogram with `sigfig` significant digits keeps every value below
//! 2·10^sigfig rounded up to a power of two (2048 µs for 3 digits, 256 µs for 2) exact; above,
//! values share buckets whose width is at most 10^-sigfig of the value. A reported percentile
//! is the *upper edge* of the bucket holding the sample of rank ⌈q·n⌉ (hdrhistogram's
//! `value_at_quantile`), so it equals `highest_equivalent(exact sample)`. `min_us`/`max_us`
//! and `mean_us` are exact. Samples above `max_latency_us` are clamped to it and counted.

use hdrhistogram::Histogram;

use crate::snapshot::{Percentiles, SeriesPoint};

/// Significant digits of per-path and combined histograms (≤0.1% error, exact below 2048 µs).
pub const PATH_SIGFIG: u8 = 3;
/// Significant digits of per-flow histograms (≤1% error, exact below 256 µs), to keep many
/// flows cheap.
pub const FLOW_SIGFIG: u8 = 2;

/// A bounded latency distribution in µs with exact min/max/mean.
#[derive(Clone, Debug)]
pub struct LatencyHist {
    hist: Histogram<u64>,
    max_us: u64,
    exact_min: u64,
    exact_max: u64,
    sum: u128,
    clamped: u64,
}

impl LatencyHist {
    /// A histogram from 1 µs to `max_us` (at least 2) with `sigfig` (1..=5) digits.
    pub fn new(max_us: u64, sigfig: u8) -> Self {
        let max_us = max_us.max(2);
        let sigfig = sigfig.clamp(1, 5);
        let hist = Histogram::new_with_bounds(1, max_us, sigfig)
            .expect("valid bounds: low 1, high >= 2, sigfig 1..=5");
        Self {
            hist,
            max_us,
            exact_min: u64::MAX,
            exact_max: 0,
            sum: 0,
            clamped: 0,
        }
    }

    /// Records one sample; returns true if it had to be clamped.
    pub fn record(&mut self, us: u64) -> bool {
        let clamped = us > self.max_us;
        let v = us.min(self.max_us);
        self.hist.saturating_record(v);
        self.exact_min = self.exact_min.min(v);
        self.exact_max = self.exact_max.max(v);
        self.sum += u128::from(v);
        if clamped {
            self.clamped += 1;
        }
        clamped
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// Samples that were clamped.
    pub fn clamped(&self) -> u64 {
        self.clamped
    }

    /// Value at quantile `q` (0..=1), hdrhistogram-quantized; 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.hist.is_empty() {
            return 0;
        }
        self.hist.value_at_quantile(q)
    }

    /// Number of samples strictly greater than `t_us`.
    pub fn count_above(&self, t_us: u64) -> u64 {
        if self.hist.is_empty() || t_us >= self.exact_max {
            return 0;
        }
        // Samples in the bucket of t count as ≤ t (quantization documented above).
        let edge = self.hist.highest_equivalent(t_us);
        self.hist.count_between(edge.saturating_add(1), self.max_us)
    }

    /// The summary of this distribution.
    pub fn percentiles(&self) -> Percentiles {
        let count = self.count();
        if count == 0 {
            return Percentiles::default();
        }
        Percentiles {
            count,
            min_us: self.exact_min,
            p50_us: self.quantile(0.5),
            p90_us: self.quantile(0.9),
            p99_us: self.quantile(0.99),
            p999_us: self.quantile(0.999),
            max_us: self.exact_max,
            mean_us: self.sum as f64 / count as f64,
        }
    }

    /// Forgets every sample (keeps the allocation).
    pub fn reset(&mut self) {
        self.hist.reset();
        self.exact_min = u64::MAX;
        self.exact_max = 0;
        self.sum = 0;
        self.clamped = 0;
    }

    /// The bucket's upper edge for `us` (what a percentile equal to `us` reports).
    pub fn quantized(&self, us: u64) -> u64 {
        self.hist.highest_equivalent(us.min(self.max_us))
    }
}

/// The samples of a distribution (`whole`) that another (`part`) did not get, where every
/// sample of `part` is also in `whole` (e.g. latencies outside outages, `part` holding those
/// during outages): counts, count and mean come from the difference of the two, so a sample
/// is recorded once; only the exact minimum and maximum are kept here.
#[derive(Clone, Copy, Debug)]
pub struct Remainder {
    min: u64,
    max: u64,
}

impl Default for Remainder {
    fn default() -> Self {
        Self {
            min: u64::MAX,
            max: 0,
        }
    }
}

impl Remainder {
    /// Notes a sample recorded in `whole` and not in the part.
    #[inline]
    pub fn note(&mut self, whole: &LatencyHist, us: u64) {
        let v = us.min(whole.max_us);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    /// The distribution of the samples of `whole` not in `part`.
    pub fn percentiles(&self, whole: &LatencyHist, part: &LatencyHist) -> Percentiles {
        let mut counts = whole.hist.clone();
        if counts.subtract(&part.hist).is_err() {
            // Cannot happen: `part`'s samples are all in `whole`, with the same bounds.
            return Percentiles::default();
        }
        LatencyHist {
            hist: counts,
            max_us: whole.max_us,
            exact_min: self.min,
            exact_max: self.max,
            sum: whole.sum.saturating_sub(part.sum),
            clamped: 0,
        }
        .percentiles()
    }
}

/// A distribution over the whole run plus the current window and a bounded series of past
/// windows. Each sample is recorded once, in the whole-run histogram: the window's counts are
/// what it gained since the window opened (a copy of its counts is kept then).
#[derive(Clone, Debug)]
pub struct WindowedHist {
    /// Whole run.
    pub total: LatencyHist,
    /// The whole-run counts when the current window opened.
    window_start: Histogram<u64>,
    /// The current window's exact figures: (min, max, sum), over samples as recorded.
    window_exact: (u64, u64, u128),
    /// Past windows, oldest first (bounded).
    pub series: std::collections::VecDeque<SeriesPoint>,
    history: usize,
}

impl WindowedHist {
    /// Empty, with `history` windows kept.
    pub fn new(max_us: u64, sigfig: u8, history: usize) -> Self {
        let total = LatencyHist::new(max_us, sigfig);
        Self {
            window_start: total.hist.clone(),
            total,
            window_exact: (u64::MAX, 0, 0),
            series: std::collections::VecDeque::new(),
            history,
        }
    }

    /// Records a sample in the run and the window; true if clamped.
    pub fn record(&mut self, us: u64) -> bool {
        let v = us.min(self.total.max_us);
        let w = &mut self.window_exact;
        w.0 = w.0.min(v);
        w.1 = w.1.max(v);
        w.2 += u128::from(v);
        self.total.record(us)
    }

    /// The current window's distribution.
    fn window(&self) -> Percentiles {
        let mut counts = self.total.hist.clone();
        if counts.subtract(&self.window_start).is_err() {
            // Cannot happen: the window's start is an earlier state of the same histogram.
            return Percentiles::default();
        }
        let (min, max, sum) = self.window_exact;
        LatencyHist {
            hist: counts,
            max_us: self.total.max_us,
            exact_min: min,
            exact_max: max,
            sum,
            clamped: 0,
        }
        .percentiles()
    }

    /// Starts a new window at the current state.
    fn restart_window(&mut self) {
        self.window_start.clone_from(&self.total.hist);
        self.window_exact = (u64::MAX, 0, 0);
    }

    /// Closes the current window at `end_ns`, returning its percentiles.
    pub fn roll(&mut self, end_ns: u64) -> Percentiles {
        let p = self.window();
        self.series.push_back(SeriesPoint {
            ts_ns: end_ns,
            p50_us: p.p50_us,
            p99_us: p.p99_us,
            count: p.count,
        });
        while self.series.len() > self.history {
            self.series.pop_front();
        }
        self.restart_window();
        p
    }

    /// Forgets the current window and the past ones; the whole-run distribution stays.
    pub fn clear_windows(&mut self) {
        self.restart_window();
        self.series.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_values_are_exact_and_large_ones_bucketed_upwards() {
        let mut h = LatencyHist::new(60_000_000, 3);
        for v in 1..=1000u64 {
            h.record(v);
        }
        let p = h.percentiles();
        assert_eq!(p.count, 1000);
        assert_eq!(p.p50_us, 500);
        assert_eq!(p.p99_us, 990);
        assert_eq!(p.p999_us, 999);
        assert_eq!(p.max_us, 1000);
        assert_eq!(p.min_us, 1);
        let mut big = LatencyHist::new(60_000_000, 3);
        big.record(123_456);
        let q = big.percentiles().p50_us;
        assert_eq!(q, big.quantized(123_456));
        assert!((123_456..=123_456 + 123).contains(&q));
    }

    #[test]
    fn clamps_above_the_bound_and_counts_it() {
        let mut h = LatencyHist::new(1000, 3);
        assert!(h.record(5000));
        assert!(!h.record(10));
        assert_eq!(h.clamped(), 1);
        assert_eq!(h.percentiles().max_us, 1000);
        assert_eq!(h.count_above(10), 1);
        assert_eq!(h.count_above(1000), 0);
    }

    /// A window's figures (from the difference of whole-run counts) equal those of a
    /// histogram fed the window's samples alone, window after window.
    #[test]
    fn windows_are_what_the_run_gained_in_them() {
        let mut w = WindowedHist::new(50_000, 3, 4);
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for round in 0..6u64 {
            let mut alone = LatencyHist::new(50_000, 3);
            for _ in 0..(round * 700) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let us = x % (20_000 * (round + 1));
                w.record(us);
                alone.record(us);
            }
            assert_eq!(w.roll(round), alone.percentiles(), "window {round}");
        }
        assert_eq!(w.series.len(), 4);
        assert_eq!(w.total.count(), 15 * 700);
    }

    /// The remainder of a distribution equals a histogram fed the remaining samples alone.
    #[test]
    fn a_remainder_is_what_the_part_did_not_get() {
        let (mut whole, mut part, mut alone) = (
            LatencyHist::new(50_000, 3),
            LatencyHist::new(50_000, 3),
            LatencyHist::new(50_000, 3),
        );
        let mut rest = Remainder::default();
        assert_eq!(rest.percentiles(&whole, &part), alone.percentiles());
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for i in 0..5000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let us = x % 80_000;
            whole.record(us);
            if i % 7 == 3 || us > 60_000 {
                part.record(us);
            } else {
                rest.note(&whole, us);
                alone.record(us);
            }
        }
        assert_eq!(rest.percentiles(&whole, &part), alone.percentiles());
    }
}
