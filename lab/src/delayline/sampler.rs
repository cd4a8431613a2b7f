//! Per-frame delay samples: a normal distribution (mean, standard deviation) truncated at zero,
//! from a small seeded generator so runs are repeatable.

use tboxscope_engine::SplitMix64;

/// Draws one-way delays in nanoseconds.
#[derive(Debug, Clone)]
pub struct DelaySampler {
    mean_ns: f64,
    sd_ns: f64,
    draw: SplitMix64,
    spare: Option<f64>,
}

impl DelaySampler {
    /// A sampler with mean and standard deviation in milliseconds.
    pub fn new(mean_ms: f64, sd_ms: f64, seed: u64) -> Self {
        DelaySampler {
            mean_ns: mean_ms.max(0.0) * 1e6,
            sd_ns: sd_ms.max(0.0) * 1e6,
            draw: SplitMix64::new(seed ^ 0x9E37_79B9_7F4A_7C15),
            spare: None,
        }
    }

    /// A standard normal deviate (Marsaglia's polar method; the second value is kept).
    fn standard_normal(&mut self) -> f64 {
        if let Some(z) = self.spare.take() {
            return z;
        }
        loop {
            let u = 2.0 * self.draw.unit() - 1.0;
            let v = 2.0 * self.draw.unit() - 1.0;
            let s = u * u + v * v;
            if s > 0.0 && s < 1.0 {
                let m = (-2.0 * s.ln() / s).sqrt();
                self.spare = Some(v * m);
                return u * m;
            }
        }
    }

    /// One delay in nanoseconds (never negative).
    pub fn sample_ns(&mut self) -> u64 {
        if self.sd_ns == 0.0 {
            return self.mean_ns as u64;
        }
        let d = self.mean_ns + self.sd_ns * self.standard_normal();
        if d <= 0.0 {
            0
        } else {
            d as u64
        }
    }

    /// Draws a value in [0, 1000) — used for per-mille decisions.
    pub fn per_mille(&mut self) -> u32 {
        (self.draw.next_u64() % 1000) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moments_match() {
        let mut s = DelaySampler::new(40.0, 10.0, 7);
        let n = 200_000;
        let xs: Vec<f64> = (0..n).map(|_| s.sample_ns() as f64 / 1e6).collect();
        let mean = xs.iter().sum::<f64>() / f64::from(n);
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / f64::from(n);
        assert!((mean - 40.0).abs() < 0.1, "mean {mean}");
        assert!((var.sqrt() - 10.0).abs() < 0.1, "sd {}", var.sqrt());
        let mut c = DelaySampler::new(5.0, 0.0, 1);
        assert_eq!(c.sample_ns(), 5_000_000);
        assert!(c.per_mille() < 1000);
    }
}
