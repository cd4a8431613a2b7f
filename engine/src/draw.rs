//! SplitMix64: the small seeded generator behind the advice's replays and the lab's delay
//! line (repeatable runs), and its finalizer, which also mixes the matchers' message keys.

/// The generator's increment (the golden ratio in 64 bits).
pub(crate) const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's output function: a well-mixed 64-bit value from `z`.
#[inline]
pub(crate) fn finalize(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A seeded SplitMix64 generator: the same seed always draws the same sequence.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator whose state starts at `state`.
    pub fn new(state: u64) -> Self {
        Self(state)
    }

    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GAMMA);
        finalize(self.0)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference sequence of SplitMix64 seeded with 0 (as in Vigna's `splitmix64.c`).
    #[test]
    fn draws_the_reference_sequence() {
        let mut g = SplitMix64::new(0);
        assert_eq!(g.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(g.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(g.next_u64(), 0x06c4_5d18_8009_454f);
        let u = SplitMix64::new(0).unit();
        assert!((0.0..1.0).contains(&u));
    }
}
