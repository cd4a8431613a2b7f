//! Kernel CLOCK_MONOTONIC → wall-clock UTC, applied only at the output edge.

/// Offset between CLOCK_REALTIME and CLOCK_MONOTONIC, measured once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WallClock {
    offset_ns: i128,
}

fn now(clock: libc::clockid_t) -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec; the clocks exist on Linux.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        return 0;
    }
    i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
}

impl WallClock {
    /// Measures the offset (the tightest of three reads).
    pub fn measure() -> Self {
        let mut best: Option<(i128, i128)> = None;
        for _ in 0..3 {
            let m1 = now(libc::CLOCK_MONOTONIC);
            let r = now(libc::CLOCK_REALTIME);
            let m2 = now(libc::CLOCK_MONOTONIC);
            let width = m2 - m1;
            let off = r - (m1 + width / 2);
            if best.is_none_or(|(w, _)| width < w) {
                best = Some((width, off));
            }
        }
        Self {
            offset_ns: best.map_or(0, |(_, o)| o),
        }
    }

    /// A fixed offset (tests).
    pub fn with_offset(offset_ns: i128) -> Self {
        Self { offset_ns }
    }

    /// Kernel monotonic ns → Unix-epoch ns (clamped to the u64 range).
    pub fn to_unix_ns(&self, mono_ns: u64) -> u64 {
        let v = i128::from(mono_ns) + self.offset_ns;
        v.clamp(0, i128::from(u64::MAX)) as u64
    }

    /// Now, as Unix-epoch ns (CLOCK_REALTIME; the edges' clock: file headers, a live engine's
    /// idle time).
    pub fn unix_now() -> u64 {
        now(libc::CLOCK_REALTIME).clamp(0, i128::from(u64::MAX)) as u64
    }

    /// Now, as kernel monotonic ns.
    pub fn mono_now() -> u64 {
        now(libc::CLOCK_MONOTONIC).clamp(0, i128::from(u64::MAX)) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_with_offset_and_clamps() {
        let c = WallClock::with_offset(1_000);
        assert_eq!(c.to_unix_ns(5), 1_005);
        assert_eq!(WallClock::with_offset(-10).to_unix_ns(5), 0);
        let m = WallClock::measure();
        // Real clocks: realtime is after 2020 here.
        assert!(m.to_unix_ns(WallClock::mono_now()) > 1_577_836_800_000_000_000);
    }
}
