//! Latency distributions: HDR-style histograms with microsecond resolution and bounded memory,
//! plus sliding windows.
//!
//! Precision: a histogram with `sigfig` significant digits keeps every value below
//! 2·10^sigfig rounded up to a power of two (2048 µs for 3 digits, 256 µs for 2) exact; above,
//! values share buckets whose width is at most 10^-sigfig of the value. A reported percentile
//! is the *upper edge* of the bucket holding the sample of rank ⌈q·n⌉ (hdrhistogram's
//! `value_at_quantile`), so it equals `highest_equivalent(exact sample)`, except that no
//! percentile is ever above `max_us`: see [`summarize`]. `min_us`/`max_us` and `mean_us` are
//! exact. Samples above `max_latency_us` are clamped to it and counted.
//!
//! The counts are laid out exactly as hdrhistogram lays out a histogram with bounds
//! `1..=max_us` and the same significant digits (same buckets, same edges, same number of
//! counters), so every figure is the one hdrhistogram would report; recording a sample is one
//! index computation and one increment.

use crate::snapshot::{Percentiles, SeriesPoint};

/// Significant digits of per-path and combined histograms (≤0.1% error, exact below 2048 µs).
pub const PATH_SIGFIG: u8 = 3;
/// Significant digits of per-flow histograms (≤1% error, exact below 256 µs), to keep many
/// flows cheap.
pub const FLOW_SIGFIG: u8 = 2;

/// Where a value's counter sits: `2^sub_magnitude` unit-wide counters for values below
/// `2^sub_magnitude` (bucket 0), then for each further power of two a bucket of
/// `2^(sub_magnitude-1)` counters, each twice as wide as the previous bucket's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    /// log2 of the counters per bucket past bucket 0.
    half_magnitude: u32,
    /// The values of bucket 0 (`2^sub_magnitude - 1`).
    bucket0_mask: u64,
    /// `64 - sub_magnitude`: leading zeros of a value at the top of bucket 0.
    lz_base: u32,
}

impl Layout {
    /// The layout for `sigfig` digits: unit resolution up to 2·10^sigfig rounded up to a power
    /// of two.
    fn new(sigfig: u8) -> Self {
        let exact_up_to = 2 * 10_u64.pow(u32::from(sigfig));
        let sub_magnitude = 64 - (exact_up_to - 1).leading_zeros();
        Self {
            half_magnitude: sub_magnitude - 1,
            bucket0_mask: (1 << sub_magnitude) - 1,
            lz_base: 64 - sub_magnitude,
        }
    }

    /// The bucket holding `v`: how many powers of two `v` is past bucket 0.
    #[inline]
    fn bucket(self, v: u64) -> u32 {
        // `| 1` tells the compiler the operand is never zero (the mask is odd anyway).
        self.lz_base - (v | self.bucket0_mask | 1).leading_zeros()
    }

    /// The counter holding `v`.
    #[inline]
    fn index(self, v: u64) -> usize {
        let b = self.bucket(v);
        ((b << self.half_magnitude) as usize) + (v >> b) as usize
    }

    /// The lowest value of counter `index`.
    fn value_at(self, index: usize) -> u64 {
        let half = 1_usize << self.half_magnitude;
        match (index >> self.half_magnitude).checked_sub(1) {
            None | Some(0) => index as u64,
            Some(b) => (((index & (half - 1)) + half) as u64) << b,
        }
    }

    /// The highest value sharing `v`'s counter.
    fn highest_equivalent(self, v: u64) -> u64 {
        if v == u64::MAX {
            return u64::MAX;
        }
        let b = self.bucket(v);
        ((v >> b) << b).saturating_add(1 << b) - 1
    }

    /// Counters needed for values up to `max`: bucket 0's, then half a bucket per further
    /// power of two.
    fn len(self, max: u64) -> usize {
        (self.bucket(max) as usize + 2) << self.half_magnitude
    }
}

/// Values at ascending quantiles `qs` of the distribution with counters `counts` and `n`
/// samples, as hdrhistogram's `value_at_quantile` gives them one by one: the upper edge of the
/// counter holding the sample of rank ⌈q·n⌉ (at least 1), its lower edge for q = 0; 0 when no
/// counter reaches the rank.
fn values_at_quantiles<const N: usize>(
    layout: Layout,
    counts: impl Iterator<Item = u64>,
    n: u64,
    qs: [f64; N],
) -> [u64; N] {
    // Capped as hdrhistogram caps it (a NaN stays NaN and asks for rank 1).
    let qs = qs.map(|q| if q > 1.0 { 1.0 } else { q });
    let ranks = qs.map(|q| ((q * n as f64).ceil() as u64).max(1));
    let mut out = [0; N];
    let mut next = 0;
    let mut below = 0_u64;
    for (index, c) in counts.enumerate() {
        below = below.saturating_add(c);
        while next < N && below >= ranks[next] {
            let low = layout.value_at(index);
            out[next] = if qs[next] == 0.0 {
                low
            } else {
                layout.highest_equivalent(low)
            };
            next += 1;
        }
        if next == N {
            break;
        }
    }
    out
}

/// The summary of a distribution given by its counters and exact figures.
///
/// Percentiles are clamped to the exact maximum. A bucket's upper edge can lie above the
/// largest sample in it (`P99 18799 µs` beside `max 18784 µs`), and a percentile above the
/// maximum is a figure no reader can believe. Clamping keeps every percentile an upper bound of
/// its sample (the sample of that rank is never above the maximum) and only ever makes it more
/// exact; reporting the maximum as its bucket's upper edge instead would make the one exactly
/// known figure inexact. So `p50 ≤ p90 ≤ p99 ≤ p999 ≤ max` holds in the snapshot, the records,
/// the report and the lab tables, which all take their figures from here.
fn summarize(
    layout: Layout,
    counts: impl Iterator<Item = u64>,
    count: u64,
    (min_us, max_us, sum): (u64, u64, u128),
) -> Percentiles {
    if count == 0 {
        return Percentiles::default();
    }
    let [p50_us, p90_us, p99_us, p999_us] =
        values_at_quantiles(layout, counts, count, [0.5, 0.9, 0.99, 0.999]).map(|v| v.min(max_us));
    Percentiles {
        count,
        min_us,
        p50_us,
        p90_us,
        p99_us,
        p999_us,
        max_us,
        mean_us: sum as f64 / count as f64,
    }
}

/// A bounded latency distribution in µs with exact min/max/mean.
#[derive(Clone, Debug)]
pub struct LatencyHist {
    /// Samples per counter (see [`Layout`]), covering `0..=max_us`.
    counts: Box<[u64]>,
    layout: Layout,
    max_us: u64,
    count: u64,
    exact_min: u64,
    exact_max: u64,
    sum: u128,
    clamped: u64,
}

impl LatencyHist {
    /// A histogram from 1 µs to `max_us` (at least 2) with `sigfig` (1..=5) digits.
    pub fn new(max_us: u64, sigfig: u8) -> Self {
        let max_us = max_us.max(2);
        let layout = Layout::new(sigfig.clamp(1, 5));
        Self {
            counts: vec![0; layout.len(max_us)].into_boxed_slice(),
            layout,
            max_us,
            count: 0,
            exact_min: u64::MAX,
            exact_max: 0,
            sum: 0,
            clamped: 0,
        }
    }

    /// Records one sample; returns true if it had to be clamped.
    #[inline]
    pub fn record(&mut self, us: u64) -> bool {
        let clamped = us > self.max_us;
        let v = us.min(self.max_us);
        // Always present: the counters cover 0..=max_us.
        if let Some(c) = self.counts.get_mut(self.layout.index(v)) {
            *c += 1;
        }
        self.count += 1;
        self.exact_min = self.exact_min.min(v);
        self.exact_max = self.exact_max.max(v);
        self.sum += u128::from(v);
        self.clamped += u64::from(clamped);
        clamped
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Adds the samples of `other` (made with the same bounds and digits; otherwise, which
    /// cannot happen within one engine, nothing is added and `false` is returned).
    pub fn merge(&mut self, other: &LatencyHist) -> bool {
        if self.layout != other.layout || self.counts.len() != other.counts.len() {
            return false;
        }
        for (c, o) in self.counts.iter_mut().zip(other.counts.iter()) {
            *c += o;
        }
        self.count += other.count;
        self.exact_min = self.exact_min.min(other.exact_min);
        self.exact_max = self.exact_max.max(other.exact_max);
        self.sum += other.sum;
        self.clamped += other.clamped;
        true
    }

    #[cfg(test)]
    /// Samples that were clamped.
    pub fn clamped(&self) -> u64 {
        self.clamped
    }

    /// Value at quantile `q` (0..=1), hdrhistogram-quantized and never above the exact maximum
    /// (as in [`summarize`]); 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let [v] = values_at_quantiles(self.layout, self.counts.iter().copied(), self.count, [q]);
        v.min(self.exact_max)
    }

    /// Number of samples strictly greater than `t_us`.
    pub fn count_above(&self, t_us: u64) -> u64 {
        if self.count == 0 || t_us >= self.exact_max {
            return 0;
        }
        // Samples in the bucket of t count as ≤ t (quantization documented above).
        let edge = self.layout.highest_equivalent(t_us);
        let last = self.counts.len() - 1;
        let from = self.layout.index(edge.saturating_add(1)).min(last);
        let to = self.layout.index(self.max_us).min(last);
        self.counts
            .get(from..=to)
            .unwrap_or_default()
            .iter()
            .fold(0, |n, &c| n.saturating_add(c))
    }

    /// Cumulative sample counts at ascending upper bounds (µs): for each bound, the samples
    /// at or below it, a sample sharing the bound's counter counted as below it (the
    /// quantization of [`LatencyHist::count_above`]); `(bound, count)` pairs.
    pub fn cumulative_at(&self, bounds_us: &[u64]) -> Vec<(u64, u64)> {
        let mut out = Vec::with_capacity(bounds_us.len());
        let (mut below, mut next) = (0_u64, 0_usize);
        let last = self.counts.len() - 1;
        for &b in bounds_us {
            if b >= self.max_us {
                out.push((b, self.count));
                continue;
            }
            let to = self.layout.index(b).min(last);
            if to >= next {
                let part = self.counts.get(next..=to).unwrap_or_default();
                below = part.iter().fold(below, |n, &c| n.saturating_add(c));
                next = to + 1;
            }
            out.push((b, below));
        }
        out
    }

    /// The summary of this distribution.
    pub fn percentiles(&self) -> Percentiles {
        summarize(
            self.layout,
            self.counts.iter().copied(),
            self.count,
            (self.exact_min, self.exact_max, self.sum),
        )
    }

    #[cfg(test)]
    /// The bucket's upper edge for `us` (what a percentile equal to `us` reports).
    pub fn quantized(&self, us: u64) -> u64 {
        self.layout.highest_equivalent(us.min(self.max_us))
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
        if whole.layout != part.layout || whole.counts.len() != part.counts.len() {
            // Cannot happen: both are made with the same bounds and digits.
            return Percentiles::default();
        }
        let counts = (whole.counts.iter())
            .zip(part.counts.iter())
            .map(|(w, p)| w.saturating_sub(*p));
        summarize(
            whole.layout,
            counts,
            whole.count.saturating_sub(part.count),
            (self.min, self.max, whole.sum.saturating_sub(part.sum)),
        )
    }
}

/// A distribution over the whole run plus the current window and a bounded series of past
/// windows. Each sample is recorded once, in the whole-run histogram: the window's counts and
/// sum are what it gained since the window opened (a copy of its counts is kept then).
#[derive(Clone, Debug)]
pub struct WindowedHist {
    /// Whole run.
    pub total: LatencyHist,
    /// The whole-run counters when the current window opened.
    window_start: Box<[u64]>,
    /// The whole-run sample count when the current window opened.
    window_start_count: u64,
    /// The whole-run sum when the current window opened.
    window_start_sum: u128,
    /// The current window's exact minimum and maximum, over samples as recorded.
    window_exact: (u64, u64),
    /// Past windows, oldest first (bounded).
    pub series: std::collections::VecDeque<SeriesPoint>,
    history: usize,
}

impl WindowedHist {
    /// Empty, with `history` windows kept.
    pub fn new(max_us: u64, sigfig: u8, history: usize) -> Self {
        let total = LatencyHist::new(max_us, sigfig);
        Self {
            window_start: total.counts.clone(),
            window_start_count: 0,
            window_start_sum: 0,
            total,
            window_exact: (u64::MAX, 0),
            series: std::collections::VecDeque::new(),
            history,
        }
    }

    /// Records a sample in the run and the window; true if clamped.
    #[inline]
    pub fn record(&mut self, us: u64) -> bool {
        let v = us.min(self.total.max_us);
        let w = &mut self.window_exact;
        w.0 = w.0.min(v);
        w.1 = w.1.max(v);
        self.total.record(us)
    }

    /// The current window's distribution.
    fn window(&self) -> Percentiles {
        let counts = (self.total.counts.iter())
            .zip(self.window_start.iter())
            .map(|(now, start)| now.saturating_sub(*start));
        summarize(
            self.total.layout,
            counts,
            self.total.count.saturating_sub(self.window_start_count),
            (
                self.window_exact.0,
                self.window_exact.1,
                self.total.sum - self.window_start_sum,
            ),
        )
    }

    /// Starts a new window at the current state.
    fn restart_window(&mut self) {
        // Counts change only with the count: without a sample since the window opened, the
        // copy taken then still holds (a run without messages rolls empty windows all along).
        if self.total.count != self.window_start_count {
            self.window_start.clone_from(&self.total.counts);
        }
        self.window_start_count = self.total.count;
        self.window_start_sum = self.total.sum;
        self.window_exact = (u64::MAX, 0);
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
    fn cumulative_counts_at_bounds() {
        let mut h = LatencyHist::new(60_000_000, 3);
        for v in [500, 1_000, 1_001, 30_000, 2_000_000, 70_000_000] {
            h.record(v);
        }
        let c = h.cumulative_at(&[1_000, 2_000, 50_000, 2_000_000, 30_000_000, 60_000_000]);
        let counts: Vec<u64> = c.iter().map(|(_, n)| *n).collect();
        assert_eq!(counts, [2, 3, 4, 5, 5, 6]);
        assert_eq!(LatencyHist::new(1000, 3).cumulative_at(&[10]), [(10, 0)]);
    }

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
        big.record(200_000);
        let q = big.percentiles().p50_us;
        assert_eq!(q, big.quantized(123_456));
        assert!((123_456..=123_456 + 123).contains(&q));
    }

    /// A bucket's upper edge above the largest sample is not reported: `p99_us 18799` beside
    /// `max_us 18784` was; every percentile stays at or below the exact maximum, in the whole
    /// run, a window and a remainder alike.
    #[test]
    fn percentiles_never_exceed_the_maximum() {
        let mut h = LatencyHist::new(60_000_000, 3);
        let mut w = WindowedHist::new(60_000_000, 3, 4);
        for us in [18_700, 18_784] {
            h.record(us);
            w.record(us);
        }
        assert_eq!(h.quantized(18_784), 18_799);
        let p = h.percentiles();
        assert_eq!((p.p99_us, p.p999_us, p.max_us), (18_784, 18_784, 18_784));
        assert_eq!(p.p50_us, h.quantized(18_700));
        assert_eq!(h.quantile(1.0), 18_784);
        assert_eq!(w.roll(1), p);
        let (whole, part, rest) = (h.clone(), LatencyHist::new(60_000_000, 3), {
            let mut r = Remainder::default();
            r.note(&h, 18_700);
            r.note(&h, 18_784);
            r
        });
        assert_eq!(rest.percentiles(&whole, &part), p);
        assert!(p.p50_us <= p.p90_us && p.p90_us <= p.p99_us);
        assert!(p.p99_us <= p.p999_us && p.p999_us <= p.max_us);
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

    /// Differential check against hdrhistogram itself, for the bounds `1..=max_us` and the
    /// digits in use: same counters, same quantiles, thresholds and bucket edges.
    mod against_hdrhistogram {
        use super::*;
        use hdrhistogram::Histogram;
        use proptest::prelude::*;

        /// Values around powers of two (bucket edges) and near-round decimals.
        fn edgy() -> impl Strategy<Value = u64> {
            (0u32..64, -3i64..=3).prop_map(|(k, d)| (1u64 << k).saturating_add_signed(d))
        }

        fn sample(max_us: u64) -> impl Strategy<Value = u64> {
            prop_oneof![
                0u64..=3,
                edgy(),
                Just(max_us),
                Just(max_us + 1),
                max_us.saturating_sub(3)..=max_us.saturating_add(3),
                0..=max_us.saturating_mul(2),
                0u64..5000,
                any::<u64>(),
            ]
        }

        fn bounds() -> impl Strategy<Value = (u64, u8)> {
            (
                prop_oneof![
                    Just(2u64),
                    Just(3),
                    Just(255),
                    Just(256),
                    Just(1000),
                    Just(2047),
                    Just(2048),
                    Just(60_000_000),
                    2u64..100_000_000,
                ],
                prop_oneof![Just(2u8), Just(3), 1u8..=4],
            )
        }

        /// Bounds, samples, thresholds and one extra quantile.
        fn case() -> impl Strategy<Value = (u64, u8, Vec<u64>, Vec<u64>, f64)> {
            bounds().prop_flat_map(|(max_us, sigfig)| {
                (
                    Just(max_us),
                    Just(sigfig),
                    proptest::collection::vec(sample(max_us), 0..400),
                    proptest::collection::vec(sample(max_us), 1..20),
                    0.0f64..=1.0,
                )
            })
        }

        /// hdrhistogram's figures for `ours`' samples, recorded as the engine used to.
        fn reference(max_us: u64, sigfig: u8, samples: &[u64]) -> Histogram<u64> {
            let mut h = Histogram::<u64>::new_with_bounds(1, max_us, sigfig).unwrap();
            for &us in samples {
                h.saturating_record(us.min(max_us));
            }
            h
        }

        /// The summary hdrhistogram gives for `h` with the exact figures of `samples`.
        fn reference_summary(h: &Histogram<u64>, max_us: u64, samples: &[u64]) -> Percentiles {
            if h.is_empty() {
                return Percentiles::default();
            }
            let clamped = samples.iter().map(|&us| us.min(max_us));
            // Percentiles never above the exact maximum (see `summarize`).
            let max = clamped.clone().max().unwrap();
            Percentiles {
                count: h.len(),
                min_us: clamped.clone().min().unwrap(),
                p50_us: h.value_at_quantile(0.5).min(max),
                p90_us: h.value_at_quantile(0.9).min(max),
                p99_us: h.value_at_quantile(0.99).min(max),
                p999_us: h.value_at_quantile(0.999).min(max),
                max_us: max,
                mean_us: clamped.map(u128::from).sum::<u128>() as f64 / h.len() as f64,
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(200))]

            #[test]
            fn same_counters_quantiles_thresholds_and_edges(
                (max_us, sigfig, samples, probes, q) in case()
            ) {
                let mut ours = LatencyHist::new(max_us, sigfig);
                for &us in &samples {
                    prop_assert_eq!(ours.record(us), us > max_us);
                }
                let hdr = reference(max_us, sigfig, &samples);
                prop_assert_eq!(ours.count(), hdr.len());
                prop_assert_eq!(ours.counts.len(), hdr.distinct_values());
                for (i, &c) in ours.counts.iter().enumerate() {
                    let low = ours.layout.value_at(i);
                    prop_assert_eq!(ours.layout.index(low), i);
                    prop_assert_eq!(low, hdr.lowest_equivalent(low));
                    prop_assert_eq!(c, hdr.count_at(low), "counter {} (from {})", i, low);
                }
                let exact_max = samples.iter().map(|&us| us.min(max_us)).max().unwrap_or(0);
                for q in [0.0, 0.5, 0.9, 0.99, 0.999, 1.0, 1.5, f64::NAN, q] {
                    prop_assert_eq!(
                        ours.quantile(q),
                        hdr.value_at_quantile(q).min(exact_max),
                        "q {}",
                        q
                    );
                }
                prop_assert_eq!(ours.percentiles(), reference_summary(&hdr, max_us, &samples));
                for &t in probes.iter().chain(&samples) {
                    let above = if hdr.is_empty() || t >= exact_max {
                        0
                    } else {
                        hdr.count_between(hdr.highest_equivalent(t).saturating_add(1), max_us)
                    };
                    prop_assert_eq!(ours.count_above(t), above, "t {}", t);
                    prop_assert_eq!(ours.quantized(t), hdr.highest_equivalent(t.min(max_us)));
                    prop_assert_eq!(
                        ours.layout.highest_equivalent(t),
                        hdr.highest_equivalent(t),
                        "t {}",
                        t
                    );
                }
            }

            #[test]
            fn windows_and_remainders_match_subtracted_histograms(
                (max_us, sigfig, samples, probes, _q) in case(),
                split in proptest::collection::vec(any::<bool>(), 400),
            ) {
                let (mut whole, mut part) =
                    (LatencyHist::new(max_us, sigfig), LatencyHist::new(max_us, sigfig));
                let mut window = WindowedHist::new(max_us, sigfig, 2);
                let mut rest = Remainder::default();
                let (mut in_part, mut in_rest) = (Vec::new(), Vec::new());
                let cut = probes[0] as usize % (samples.len() + 1);
                for (i, &us) in samples.iter().enumerate() {
                    if i == cut {
                        window.roll(0);
                    }
                    window.record(us);
                    whole.record(us);
                    if split[i] {
                        part.record(us);
                        in_part.push(us);
                    } else {
                        rest.note(&whole, us);
                        in_rest.push(us);
                    }
                }
                if cut == samples.len() {
                    window.roll(0);
                }
                let mut rest_hdr = reference(max_us, sigfig, &samples);
                rest_hdr.subtract(reference(max_us, sigfig, &in_part)).unwrap();
                prop_assert_eq!(
                    rest.percentiles(&whole, &part),
                    reference_summary(&rest_hdr, max_us, &in_rest)
                );
                let mut window_hdr = reference(max_us, sigfig, &samples);
                window_hdr.subtract(reference(max_us, sigfig, &samples[..cut])).unwrap();
                prop_assert_eq!(
                    window.roll(1),
                    reference_summary(&window_hdr, max_us, &samples[cut..])
                );
            }
        }
    }
}
