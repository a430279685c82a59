//! Zero-loss throughput search (RFC 2544 style, as in the xdp-forward thesis §5.3.8):
//! offer a rate, measure the loss, move up after a pass and down after a
//! failure, halving the step each time the direction changes, until the step
//! is below the resolution. The answer is the highest rate that passed.
//!
//! Beyond the seed: a step never leaves the bracket of what is known (above
//! the highest pass, below the lowest failure); one that would is replaced
//! by the bracket's midpoint. Without that, repeated steps the same way can
//! land back on rates already settled and the search stalls.

use anyhow::{ensure, Result};
use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
pub struct SearchOptions {
    /// Lowest and highest rate to try, frames per second.
    pub low: f64,
    pub high: f64,
    /// Loss allowed for a pass, in percent (0 = none).
    pub loss_tolerance_pct: f64,
    /// Stop once the step is smaller than this, frames per second.
    pub resolution: f64,
    /// Give up after this many trials.
    pub max_trials: u32,
}

/// One offered rate and what came of it.
#[derive(Clone, Debug, Serialize)]
pub struct Trial {
    pub rate: f64,
    pub sent: u64,
    pub received: u64,
    pub loss_pct: f64,
    pub passed: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct SearchResult {
    /// Highest passing rate (0 if none passed).
    pub rate: f64,
    pub trials: Vec<Trial>,
}

pub fn loss_pct(sent: u64, received: u64) -> f64 {
    if sent == 0 {
        0.0
    } else {
        100.0 * sent.saturating_sub(received) as f64 / sent as f64
    }
}

/// Runs the search until the highest pass and the lowest failure are less
/// than the resolution apart (or `max_trials`); `trial(rate)` offers `rate` frames per second (after
/// discarding the first interval at that rate) and returns (sent, received).
pub fn search(o: &SearchOptions, mut trial: impl FnMut(f64) -> Result<(u64, u64)>) -> Result<SearchResult> {
    ensure!(o.low > 0.0 && o.high >= o.low, "search range must satisfy 0 < low <= high");
    ensure!(o.resolution > 0.0, "search resolution must be positive");
    ensure!((0.0..100.0).contains(&o.loss_tolerance_pct), "loss tolerance must be in [0, 100) percent");
    let mut trials = Vec::new();
    let mut best: f64 = 0.0; // highest pass
    let mut lowest_fail = f64::INFINITY;
    let mut rate = o.high;
    let mut step = (o.high - o.low) / 2.0;
    let mut last_up: Option<bool> = None;
    while (trials.len() as u32) < o.max_trials {
        let (sent, received) = trial(rate)?;
        let loss = loss_pct(sent, received);
        let passed = loss <= o.loss_tolerance_pct;
        trials.push(Trial { rate, sent, received, loss_pct: loss, passed });
        if passed {
            best = best.max(rate);
            if rate >= o.high {
                break; // the top of the range passes: nothing above to find
            }
        } else {
            lowest_fail = lowest_fail.min(rate);
            if rate <= o.low {
                break; // even the bottom fails
            }
        }
        if last_up.is_some_and(|up| up != passed) {
            step /= 2.0;
        }
        last_up = Some(passed);
        let floor = if best > 0.0 { best } else { o.low };
        if lowest_fail - floor < o.resolution {
            break; // the answer is known to within the resolution
        }
        let next = if passed { rate + step } else { rate - step };
        rate = if step >= o.resolution && next > floor && next < lowest_fail {
            next
        } else if best == 0.0 && next <= o.low {
            o.low // nothing passed yet: try the bottom of the range
        } else {
            step /= 2.0;
            (floor + lowest_fail) / 2.0
        };
    }
    Ok(SearchResult { rate: best, trials })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(tol: f64) -> SearchOptions {
        SearchOptions { low: 10_000.0, high: 10_000_000.0, loss_tolerance_pct: tol, resolution: 10_000.0, max_trials: 64 }
    }

    /// A sink that receives everything up to `cap` frames per second and
    /// loses the excess, plus a small constant loss fraction below it.
    fn sink(cap: f64, base_loss: f64) -> impl FnMut(f64) -> Result<(u64, u64)> {
        move |rate| {
            let sent = rate.floor() as u64;
            let got = rate.min(cap) * (1.0 - base_loss);
            Ok((sent, got.floor() as u64))
        }
    }

    #[test]
    fn converges_on_the_rate_where_loss_starts() {
        for cap in [37_000.0, 1_234_567.0, 4_000_000.0, 9_990_000.0] {
            let r = search(&opts(0.0), sink(cap, 0.0)).unwrap();
            assert!(r.rate <= cap, "{cap}: answered {} above the capacity", r.rate);
            assert!(cap - r.rate <= 2.0 * opts(0.0).resolution, "{cap}: answered {}, too far below", r.rate);
            assert!(r.trials.iter().all(|t| t.passed == (t.rate <= cap)));
        }
    }

    #[test]
    fn tolerance_admits_small_constant_loss() {
        // 0.05 % loss everywhere: fails a 0 % search, passes a 0.1 % one.
        let strict = search(&opts(0.0), sink(2_000_000.0, 0.0005)).unwrap();
        assert_eq!(strict.rate, 0.0);
        let tolerant = search(&opts(0.1), sink(2_000_000.0, 0.0005)).unwrap();
        // Above the capacity loss grows with rate: 0.1 % more is allowed.
        assert!(tolerant.rate >= 2_000_000.0 - 20_000.0 && tolerant.rate <= 2_000_000.0 * 1.0011, "{}", tolerant.rate);
    }

    #[test]
    fn a_sink_faster_than_the_range_ends_at_once() {
        let r = search(&opts(0.0), sink(f64::INFINITY, 0.0)).unwrap();
        assert_eq!((r.rate, r.trials.len()), (10_000_000.0, 1));
    }

    #[test]
    fn step_halves_only_on_a_change_of_direction() {
        let r = search(&opts(0.0), sink(9_000_000.0, 0.0)).unwrap();
        let rates: Vec<f64> = r.trials.iter().map(|t| t.rate).collect();
        // high fails, then the first step down passes, then up by half.
        assert_eq!(rates[0], 10_000_000.0);
        assert_eq!(rates[1], 10_000_000.0 - 4_995_000.0);
        assert_eq!(rates[2], rates[1] + 4_995_000.0 / 2.0);
    }

    #[test]
    fn bad_options_are_refused() {
        let mut o = opts(0.0);
        o.low = 0.0;
        assert!(search(&o, sink(1.0, 0.0)).is_err());
        let mut o = opts(0.0);
        o.loss_tolerance_pct = 100.0;
        assert!(search(&o, sink(1.0, 0.0)).is_err());
    }
}
