//! k-means over the runs' summary features, and the choice of k.
//!
//! Features are standardised (z-scores per feature) so microseconds of
//! mean and of standard deviation weigh alike; k-means++ seeding from a
//! fixed seed makes results repeatable; the best of several restarts (by
//! within-cluster sum of squares) is kept. The number of clusters is the k
//! in 2..=max_k with the highest mean silhouette — how much closer each run
//! is to its own cluster than to the next one (Rousseeuw 1987).

use fastrand::Rng;

fn dist2(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x - y).powi(2)).sum()
}

/// Each feature scaled to mean 0 and standard deviation 1. A feature that
/// barely varies (its standard deviation under 1 % of its mean) is divided
/// by that 1 % instead: blown up to unit variance, its rounding noise would
/// decide the clusters.
pub fn standardise(rows: &[Vec<f64>]) -> Vec<Vec<f64>> {
    if rows.is_empty() {
        return Vec::new();
    }
    let d = rows[0].len();
    let n = rows.len() as f64;
    let mut out = rows.to_vec();
    for j in 0..d {
        let mean = rows.iter().map(|r| r[j]).sum::<f64>() / n;
        let std = (rows.iter().map(|r| (r[j] - mean).powi(2)).sum::<f64>() / n).sqrt();
        for r in out.iter_mut() {
            let scale = std.max(0.01 * mean.abs());
            r[j] = if scale > 0.0 { (r[j] - mean) / scale } else { 0.0 };
        }
    }
    out
}

/// One clustering: a label per row and the within-cluster sum of squares.
#[derive(Clone, Debug)]
pub struct Clustering {
    pub k: usize,
    pub labels: Vec<usize>,
    pub inertia: f64,
}

/// k-means (Lloyd's algorithm, k-means++ seeding), best of `restarts`.
pub fn kmeans(x: &[Vec<f64>], k: usize, restarts: usize, rng: &mut Rng) -> Clustering {
    let n = x.len();
    assert!(k >= 1 && k <= n, "k = {k} for {n} rows");
    let mut best: Option<Clustering> = None;
    for _ in 0..restarts.max(1) {
        // k-means++: each next centre drawn with probability ∝ squared distance.
        let mut centres = vec![x[rng.usize(..n)].clone()];
        while centres.len() < k {
            let d: Vec<f64> = x.iter().map(|p| centres.iter().map(|c| dist2(p, c)).fold(f64::INFINITY, f64::min)).collect();
            let total: f64 = d.iter().sum();
            let pick = if total > 0.0 {
                let mut r = rng.f64() * total;
                d.iter()
                    .position(|&w| {
                        r -= w;
                        r <= 0.0
                    })
                    .unwrap_or(n - 1)
            } else {
                rng.usize(..n)
            };
            centres.push(x[pick].clone());
        }
        let mut labels = vec![0; n];
        for _ in 0..100 {
            let mut changed = false;
            for (i, p) in x.iter().enumerate() {
                let l = (0..k).min_by(|&a, &b| dist2(p, &centres[a]).total_cmp(&dist2(p, &centres[b]))).unwrap();
                changed |= l != labels[i];
                labels[i] = l;
            }
            for (c, centre) in centres.iter_mut().enumerate() {
                let members: Vec<&Vec<f64>> = x.iter().zip(&labels).filter(|(_, &l)| l == c).map(|(p, _)| p).collect();
                if !members.is_empty() {
                    for (j, v) in centre.iter_mut().enumerate() {
                        *v = members.iter().map(|m| m[j]).sum::<f64>() / members.len() as f64;
                    }
                }
            }
            if !changed {
                break;
            }
        }
        let inertia = x.iter().zip(&labels).map(|(p, &l)| dist2(p, &centres[l])).sum();
        if best.as_ref().is_none_or(|b| inertia < b.inertia) {
            best = Some(Clustering { k, labels, inertia });
        }
    }
    best.unwrap()
}

/// Mean silhouette of a clustering (rows in singleton clusters count 0).
pub fn silhouette(x: &[Vec<f64>], labels: &[usize], k: usize) -> f64 {
    let n = x.len();
    let mut total = 0.0;
    for i in 0..n {
        let mut sum = vec![0.0; k];
        let mut cnt = vec![0usize; k];
        for j in 0..n {
            if i != j {
                sum[labels[j]] += dist2(&x[i], &x[j]).sqrt();
                cnt[labels[j]] += 1;
            }
        }
        let own = labels[i];
        if cnt[own] == 0 {
            continue;
        }
        let a = sum[own] / cnt[own] as f64;
        let b = (0..k).filter(|&c| c != own && cnt[c] > 0).map(|c| sum[c] / cnt[c] as f64).fold(f64::INFINITY, f64::min);
        if b.is_finite() && a.max(b) > 0.0 {
            total += (b - a) / a.max(b);
        }
    }
    total / n as f64
}

/// The clustering with the best silhouette for k in 2..=max_k (and the score).
pub fn choose_k(x: &[Vec<f64>], max_k: usize, seed: u64) -> Option<(Clustering, f64)> {
    let (best, _) = choose_k_scored(x, max_k, seed);
    best
}

/// The best clustering with its silhouette, and every k's silhouette.
pub type Scored = (Option<(Clustering, f64)>, Vec<(usize, f64)>);

/// [`choose_k`], also returning every k's silhouette.
pub fn choose_k_scored(x: &[Vec<f64>], max_k: usize, seed: u64) -> Scored {
    let mut rng = Rng::with_seed(seed);
    let mut best: Option<(Clustering, f64)> = None;
    let mut scores = Vec::new();
    for k in 2..=max_k.min(x.len().saturating_sub(1)) {
        let c = kmeans(x, k, 10, &mut rng);
        let s = silhouette(x, &c.labels, k);
        scores.push((k, s));
        if best.as_ref().is_none_or(|(_, b)| s > *b) {
            best = Some((c, s));
        }
    }
    (best, scores)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three well-separated blobs in 5 dimensions.
    fn blobs() -> (Vec<Vec<f64>>, Vec<usize>) {
        let mut rng = Rng::with_seed(7);
        let centres = [[10.0, 10.0, 1.0, 9.0, 11.0], [40.0, 38.0, 8.0, 35.0, 45.0], [80.0, 79.0, 2.0, 78.0, 82.0]];
        let mut x = Vec::new();
        let mut truth = Vec::new();
        for (c, centre) in centres.iter().enumerate() {
            for _ in 0..15 {
                x.push(centre.iter().map(|v| v + (rng.f64() - 0.5) * 2.0).collect());
                truth.push(c);
            }
        }
        (x, truth)
    }

    #[test]
    fn finds_three_blobs_and_chooses_k_3() {
        let (x, truth) = blobs();
        let z = standardise(&x);
        let (c, s) = choose_k(&z, 6, 1).unwrap();
        assert_eq!(c.k, 3, "silhouette {s}");
        assert!(s > 0.8, "well separated: {s}");
        // Same partition as the truth, up to the cluster numbering.
        for i in 0..x.len() {
            for j in 0..x.len() {
                assert_eq!(truth[i] == truth[j], c.labels[i] == c.labels[j], "rows {i} and {j}");
            }
        }
    }

    #[test]
    fn repeatable_and_standardised() {
        let (x, _) = blobs();
        let z = standardise(&x);
        let a = choose_k(&z, 5, 42).unwrap();
        let b = choose_k(&z, 5, 42).unwrap();
        assert_eq!(a.0.labels, b.0.labels);
        for j in 0..5 {
            let m: f64 = z.iter().map(|r| r[j]).sum::<f64>() / z.len() as f64;
            let v: f64 = z.iter().map(|r| r[j] * r[j]).sum::<f64>() / z.len() as f64;
            assert!(m.abs() < 1e-9 && (v - 1.0).abs() < 1e-9, "feature {j}: mean {m}, variance {v}");
        }
        // A feature varying by 0.1 % of its value is not blown up to unit variance.
        let near = standardise(&[vec![100.0], vec![100.1], vec![99.9]]);
        assert!(near.iter().all(|r| r[0].abs() < 0.2), "{near:?}");
        assert_eq!(standardise(&[vec![1.0, 5.0], vec![1.0, 7.0]])[0][0], 0.0, "a constant feature");
    }
}
