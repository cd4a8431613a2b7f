//! A bounded, evenly thinned series: what a long capture keeps of per-message figures (the
//! advice's copies, the picture report's latencies) without growing with the capture.

/// Items kept at most: beyond it, every other one is dropped and then only every second one
/// kept, and so on (time order and coverage kept, memory bounded).
pub const MAX_KEPT: usize = 1 << 16;

/// A bounded, evenly thinned series of what was pushed, in push order.
#[derive(Clone, Debug)]
pub struct Thinned<T> {
    kept: Vec<T>,
    /// One in `stride` is kept.
    stride: u64,
    seen: u64,
}

impl<T> Default for Thinned<T> {
    fn default() -> Self {
        Self {
            kept: Vec::new(),
            stride: 1,
            seen: 0,
        }
    }
}

impl<T> Thinned<T> {
    /// Offers `x`: kept if it falls on the current stride.
    pub fn push(&mut self, x: T) {
        self.seen += 1;
        if !(self.seen - 1).is_multiple_of(self.stride) {
            return;
        }
        if self.kept.len() >= MAX_KEPT {
            let mut i = 0;
            self.kept.retain(|_| {
                i += 1;
                i % 2 == 1
            });
            self.stride *= 2;
            if !(self.seen - 1).is_multiple_of(self.stride) {
                return;
            }
        }
        self.kept.push(x);
    }

    /// What is kept, in push order.
    pub fn kept(&self) -> &[T] {
        &self.kept
    }

    /// How many were pushed.
    pub fn seen(&self) -> u64 {
        self.seen
    }

    /// One in how many pushed is kept.
    pub fn stride(&self) -> u64 {
        self.stride
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thinning_keeps_an_even_bounded_series() {
        let mut t = Thinned::default();
        for i in 0..3 * MAX_KEPT as u64 {
            t.push(i);
        }
        assert_eq!(t.stride(), 4);
        assert!(t.kept().len() <= MAX_KEPT);
        assert!(t.kept().iter().enumerate().all(|(i, v)| *v == 4 * i as u64));
        assert_eq!(t.seen(), 3 * MAX_KEPT as u64);
    }
}
