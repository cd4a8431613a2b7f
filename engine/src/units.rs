//! Durations as text for the report, the lab tables and the UI's summaries, each figure with
//! its own unit so that a sub-millisecond latency is never printed as `0.0 ms`.

/// A latency or other duration given in µs: `480 µs` below a millisecond (where the
/// histograms are exact to the µs), else milliseconds with one decimal (`12.3 ms`,
/// `3620.9 ms`). Milliseconds stay milliseconds up to any size so that the figures of one
/// column or line compare at a glance and match earlier reports digit for digit.
pub fn latency(us: u64) -> String {
    if us < 1_000 {
        format!("{us} µs")
    } else {
        format!("{:.1} ms", us as f64 / 1_000.0)
    }
}

/// [`latency`] of a duration given in ms (the lab's ground truth); `-` when not a number.
pub fn latency_ms(ms: f64) -> String {
    if !ms.is_finite() || ms < 0.0 {
        return "-".to_owned();
    }
    // Rounded to the µs, as the engine's figures are.
    latency((ms * 1_000.0).round() as u64)
}

/// [`latency`] of a duration given in ns, rounded to the µs.
pub fn latency_ns(ns: u64) -> String {
    latency(ns.saturating_add(500) / 1_000)
}

/// Whether `v` is zero (its type's default): serde leaves such fields out.
pub(crate) fn is_zero<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_millisecond_in_microseconds_else_milliseconds() {
        assert_eq!(latency(0), "0 µs");
        assert_eq!(latency(480), "480 µs");
        assert_eq!(latency(999), "999 µs");
        assert_eq!(latency(1_000), "1.0 ms");
        assert_eq!(latency(12_345), "12.3 ms");
        assert_eq!(latency(3_620_900), "3620.9 ms");
        assert_eq!(latency_ms(0.48), "480 µs");
        assert_eq!(latency_ms(172.94), "172.9 ms");
        assert_eq!(latency_ms(f64::NAN), "-");
        assert_eq!(latency_ns(700_400), "700 µs");
        assert_eq!(latency_ns(5_997_400_000), "5997.4 ms");
    }
}
