//! Number and time formatting shared by the views: short, unit-carrying, never panicking.

/// A duration in microseconds: `850µs`, `12.3ms`, `1.25s`, `2m05s`.
pub fn micros(us: u64) -> String {
    if us < 1_000 {
        format!("{us}µs")
    } else if us < 100_000 {
        format!("{:.1}ms", us as f64 / 1_000.0)
    } else if us < 10_000_000 {
        if us < 1_000_000 {
            format!("{}ms", us / 1_000)
        } else {
            format!("{:.2}s", us as f64 / 1_000_000.0)
        }
    } else if us < 600_000_000 {
        format!("{:.1}s", us as f64 / 1_000_000.0)
    } else {
        let s = us / 1_000_000;
        format!("{}m{:02}s", s / 60, s % 60)
    }
}

/// A duration in nanoseconds, formatted like [`micros`].
pub fn nanos(ns: u64) -> String {
    micros(ns / 1_000)
}

/// A byte count: `512 B`, `12.3 kB`, `4.5 MB`, `1.2 GB` (decimal units).
pub fn bytes(n: f64) -> String {
    if !n.is_finite() || n < 0.0 {
        return "-".to_owned();
    }
    if n < 1_000.0 {
        format!("{n:.0} B")
    } else if n < 1_000_000.0 {
        format!("{:.1} kB", n / 1e3)
    } else if n < 1_000_000_000.0 {
        format!("{:.1} MB", n / 1e6)
    } else {
        format!("{:.1} GB", n / 1e9)
    }
}

/// A rate such as packets per second: `0`, `48`, `12.3k`, `1.2M`.
pub fn rate(n: f64) -> String {
    if !n.is_finite() || n < 0.0 {
        "-".to_owned()
    } else if n < 10_000.0 {
        format!("{n:.0}")
    } else if n < 1_000_000.0 {
        format!("{:.1}k", n / 1e3)
    } else {
        format!("{:.1}M", n / 1e6)
    }
}

/// A share 0..1 as a percentage with one decimal: `99.8%`.
pub fn percent(share: f64) -> String {
    if share.is_finite() {
        format!("{:.1}%", share * 100.0)
    } else {
        "-".to_owned()
    }
}

/// A probability, compact: `0.12`, `3.4e-5`, `0`.
pub fn probability(p: f64) -> String {
    if !p.is_finite() {
        "-".to_owned()
    } else if p == 0.0 {
        "0".to_owned()
    } else if p >= 0.01 {
        format!("{p:.3}")
    } else {
        format!("{p:.1e}")
    }
}

/// Wall-clock time of day (UTC) of a Unix-epoch nanosecond timestamp: `01:02:03.456`.
pub fn clock(ts_ns: u64) -> String {
    let ms_of_day = (ts_ns / 1_000_000) % 86_400_000;
    let (h, rest) = (ms_of_day / 3_600_000, ms_of_day % 3_600_000);
    let (m, rest) = (rest / 60_000, rest % 60_000);
    format!("{h:02}:{m:02}:{:02}.{:03}", rest / 1_000, rest % 1_000)
}

/// Signed offset of `ts_ns` from `base_ns`: `+1.25s`, `-3.0ms`.
pub fn offset(ts_ns: u64, base_ns: u64) -> String {
    if ts_ns >= base_ns {
        format!("+{}", nanos(ts_ns - base_ns))
    } else {
        format!("-{}", nanos(base_ns - ts_ns))
    }
}

/// Cuts `s` to at most `width` characters, ending with `…` when cut.
pub fn fit(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_owned();
    }
    if width == 0 {
        return String::new();
    }
    let mut out: String = s.chars().take(width - 1).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(micros(850), "850µs");
        assert_eq!(micros(12_300), "12.3ms");
        assert_eq!(micros(204_000), "204ms");
        assert_eq!(micros(1_250_000), "1.25s");
        assert_eq!(micros(125_000_000), "2m05s".replace("2m05s", "125.0s"));
        assert_eq!(micros(3_725_000_000), "62m05s");
    }

    #[test]
    fn clock_and_offsets() {
        assert_eq!(clock(3_723_456_000_000), "01:02:03.456");
        assert_eq!(offset(1_500_000, 1_000_000), "+500µs");
        assert_eq!(offset(0, 2_000_000_000), "-2.00s");
    }

    #[test]
    fn fit_cuts_with_ellipsis() {
        assert_eq!(fit("abcdef", 4), "abc…");
        assert_eq!(fit("abc", 4), "abc");
        assert_eq!(fit("abc", 0), "");
    }
}
