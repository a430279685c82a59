//! Summary statistics of a run's round-trip times, and the density
//! estimate the report draws.

use serde::{Deserialize, Serialize};

/// The summary of one run's RTTs, in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub n: usize,
    pub mean: f64,
    pub median: f64,
    pub std: f64,
    pub q1: f64,
    pub q3: f64,
    pub p99: f64,
    pub p999: f64,
    pub min: f64,
    pub max: f64,
}

/// The `q` quantile (0..=1) of sorted values, linearly interpolated.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

impl Summary {
    /// From RTTs in nanoseconds (every sample: no histogram bucketing).
    pub fn of_ns(rtts_ns: &[u64]) -> Summary {
        let mut v: Vec<f64> = rtts_ns.iter().map(|&x| x as f64 / 1000.0).collect();
        v.sort_by(|a, b| a.total_cmp(b));
        let n = v.len();
        if n == 0 {
            return Summary::default();
        }
        let mean = v.iter().sum::<f64>() / n as f64;
        let var = if n > 1 { v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64 } else { 0.0 };
        Summary {
            n,
            mean,
            median: quantile(&v, 0.5),
            std: var.sqrt(),
            q1: quantile(&v, 0.25),
            q3: quantile(&v, 0.75),
            p99: quantile(&v, 0.99),
            p999: quantile(&v, 0.999),
            min: v[0],
            max: v[n - 1],
        }
    }

    /// What the clustering looks at: mean, median, standard deviation and
    /// the quartiles — not min and max, which single outliers decide (seed
    /// 002 §VI) — on a log scale: RTTs here are right-skewed with rare
    /// millisecond tails (a shared 2-vCPU guest), so a 2× difference should
    /// weigh the same at 6 µs as at 30 µs, and one 3 ms outlier should not
    /// decide a run's standard deviation, and with it its cluster, alone.
    pub fn features(&self) -> [f64; 5] {
        [self.mean, self.median, self.std, self.q1, self.q3].map(|x| x.max(1e-3).ln())
    }
}

/// A Gaussian kernel density estimate of `xs` at `points` points from `lo`
/// to `hi`, with Silverman's rule-of-thumb bandwidth. Returns (x, density).
pub fn kde(xs: &[f64], lo: f64, hi: f64, points: usize) -> Vec<(f64, f64)> {
    let n = xs.len();
    if n < 2 || hi <= lo || points < 2 {
        return Vec::new();
    }
    let mean = xs.iter().sum::<f64>() / n as f64;
    let std = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt();
    let mut sorted = xs.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let iqr = quantile(&sorted, 0.75) - quantile(&sorted, 0.25);
    let spread = if iqr > 0.0 { std.min(iqr / 1.34) } else { std };
    let h = (0.9 * spread * (n as f64).powf(-0.2)).max((hi - lo) / points as f64 / 4.0).max(1e-9);
    let norm = 1.0 / (n as f64 * h * (2.0 * std::f64::consts::PI).sqrt());
    (0..points)
        .map(|i| {
            let x = lo + (hi - lo) * i as f64 / (points - 1) as f64;
            // Only samples within 5 bandwidths matter: a window over the sorted samples.
            let a = sorted.partition_point(|&s| s < x - 5.0 * h);
            let b = sorted.partition_point(|&s| s <= x + 5.0 * h);
            let d: f64 = sorted[a..b].iter().map(|s| (-0.5 * ((x - s) / h).powi(2)).exp()).sum();
            (x, d * norm)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_known_samples() {
        // 1..=100 µs.
        let ns: Vec<u64> = (1..=100).map(|x| x * 1000).collect();
        let s = Summary::of_ns(&ns);
        assert_eq!(s.n, 100);
        assert!((s.mean - 50.5).abs() < 1e-9);
        assert!((s.median - 50.5).abs() < 1e-9);
        assert!((s.q1 - 25.75).abs() < 1e-9 && (s.q3 - 75.25).abs() < 1e-9);
        assert!((s.std - 29.011491975882016).abs() < 1e-9);
        assert_eq!((s.min, s.max), (1.0, 100.0));
        assert!((s.p99 - 99.01).abs() < 1e-9);
        assert_eq!(Summary::of_ns(&[]).n, 0);
    }

    #[test]
    fn kde_integrates_to_one_and_peaks_at_the_modes() {
        let mut xs: Vec<f64> = (0..500).map(|i| 10.0 + (i % 7) as f64 * 0.1).collect();
        xs.extend((0..500).map(|i| 30.0 + (i % 5) as f64 * 0.1));
        let d = kde(&xs, 0.0, 40.0, 801);
        let dx = 40.0 / 800.0;
        let area: f64 = d.iter().map(|p| p.1 * dx).sum();
        assert!((area - 1.0).abs() < 0.02, "area {area}");
        let peak = |lo: f64, hi: f64| d.iter().filter(|p| p.0 >= lo && p.0 <= hi).map(|p| p.1).fold(0.0, f64::max);
        assert!(peak(9.0, 11.5) > 10.0 * peak(18.0, 22.0), "a mode near 10");
        assert!(peak(29.0, 31.0) > 10.0 * peak(18.0, 22.0), "a mode near 30");
    }
}
