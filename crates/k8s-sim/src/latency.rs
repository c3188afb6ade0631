//! The fleet workload's apply latency: log-normal, median 0.25 s, p99 under 0.5 s,
//! clamped to [0.2 s, 1.6 s] (docs/benchmarks.md#the-workload).

use rand::Rng;
use rand_distr::{Distribution, LogNormal};
use std::time::Duration;

/// A latency distribution, optionally scaled (tests run the same shape faster).
#[derive(Debug, Clone, Copy)]
pub struct LatencyModel {
    dist: Option<LogNormal<f64>>,
    min: f64,
    max: f64,
    scale: f64,
}

impl LatencyModel {
    /// σ = 0.25 puts p99 at 0.25·e^(2.326·0.25) ≈ 0.45 s.
    pub const SIGMA: f64 = 0.25;

    /// The hive-fleet distribution.
    pub fn hive_fleet() -> Self {
        Self::hive_fleet_scaled(1.0)
    }

    /// The hive-fleet distribution with every sample multiplied by `scale`.
    pub fn hive_fleet_scaled(scale: f64) -> Self {
        let dist = LogNormal::new(0.25f64.ln(), Self::SIGMA).ok();
        Self { dist, min: 0.2, max: 1.6, scale }
    }

    /// No latency at all (engine-only runs).
    pub fn zero() -> Self {
        Self { dist: None, min: 0.0, max: 0.0, scale: 0.0 }
    }

    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> Duration {
        match &self.dist {
            None => Duration::ZERO,
            Some(d) => Duration::from_secs_f64(d.sample(rng).clamp(self.min, self.max) * self.scale),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hive_fleet_shape() {
        let m = LatencyModel::hive_fleet();
        let mut rng = rand::rng();
        let mut v: Vec<f64> = (0..20_000).map(|_| m.sample(&mut rng).as_secs_f64()).collect();
        v.sort_by(f64::total_cmp);
        let q = |p: f64| v[((v.len() - 1) as f64 * p) as usize];
        assert!((q(0.5) - 0.25).abs() < 0.01, "median {}", q(0.5));
        assert!(q(0.99) < 0.5, "p99 {}", q(0.99));
        assert!(v[0] >= 0.2 && v[v.len() - 1] <= 1.6);
    }

    #[test]
    fn scaled_and_zero() {
        let mut rng = rand::rng();
        let d = LatencyModel::hive_fleet_scaled(0.01).sample(&mut rng);
        assert!(d >= Duration::from_millis(2) && d <= Duration::from_millis(16), "{d:?}");
        assert_eq!(LatencyModel::zero().sample(&mut rng), Duration::ZERO);
    }
}
