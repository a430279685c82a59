//! The differential fuzzing driver: runs a check on a stream of frames,
//! each from its own seed, and reports failures with what reproduces them.
//!
//! `make test` runs every program's fuzzer for a fixed number of frames
//! from a fixed seed. For longer runs, or to reproduce one failure:
//!
//! ```text
//! XNF_FUZZ_FRAMES=100000000 XNF_FUZZ_SEED=$RANDOM cargo test -p xnf-router --test fuzz -- --nocapture
//! XNF_FUZZ_SEED=7 XNF_FUZZ_FIRST=123456 XNF_FUZZ_FRAMES=1 cargo test -p xnf-router --test fuzz
//! ```

use std::time::Instant;

/// Frames each program's fuzzer runs in `make test`.
pub const DEFAULT_FRAMES: u64 = 1_000_000;

/// One fuzz run: which frames, from which seed.
#[derive(Clone, Debug)]
pub struct Fuzz {
    pub name: String,
    pub seed: u64,
    /// The index of the first frame (to reproduce one failure).
    pub first: u64,
    pub frames: u64,
}

/// The seed of frame `index` of a run seeded with `seed`: every frame can
/// be regenerated on its own.
fn frame_seed(seed: u64, index: u64) -> u64 {
    seed ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(17)
}

fn env_u64(key: &str) -> Option<u64> {
    let v = std::env::var(key).ok()?;
    Some(v.parse().unwrap_or_else(|_| panic!("{key}={v:?} is not a number")))
}

impl Fuzz {
    /// A run named `name`: XNF_FUZZ_SEED (default 1), XNF_FUZZ_FIRST
    /// (default 0) and XNF_FUZZ_FRAMES (default `frames`) from the environment.
    pub fn from_env(name: &str, frames: u64) -> Fuzz {
        Fuzz {
            name: name.to_string(),
            seed: env_u64("XNF_FUZZ_SEED").unwrap_or(1),
            first: env_u64("XNF_FUZZ_FIRST").unwrap_or(0),
            frames: env_u64("XNF_FUZZ_FRAMES").unwrap_or(frames),
        }
    }

    /// Runs `check` on frame after frame; `check` gets a generator seeded
    /// for that frame and returns the frame it made with its verdict (`Err`:
    /// what went wrong). Stops after ten failures; panics with all of them,
    /// each with the frame as hex and the environment that reproduces it.
    /// Prints the frames per second reached.
    pub fn run(&self, mut check: impl FnMut(&mut fastrand::Rng) -> (Vec<u8>, Result<(), String>)) {
        let t0 = Instant::now();
        let mut failures = Vec::new();
        let mut ran = 0u64;
        for i in self.first..self.first + self.frames {
            ran += 1;
            let mut rng = fastrand::Rng::with_seed(frame_seed(self.seed, i));
            let (frame, verdict) = check(&mut rng);
            if let Err(why) = verdict {
                failures.push(format!(
                    "frame {i} (XNF_FUZZ_SEED={} XNF_FUZZ_FIRST={i} XNF_FUZZ_FRAMES=1): {why}\n    frame {}",
                    self.seed,
                    crate::frames::hex(&frame)
                ));
                if failures.len() == 10 {
                    break;
                }
            }
        }
        let secs = t0.elapsed().as_secs_f64();
        eprintln!("fuzz {}: {ran} frames from seed {} in {secs:.1} s ({:.0} frames/s)", self.name, self.seed, ran as f64 / secs);
        assert!(failures.is_empty(), "fuzz {}: {} failure(s):\n{}", self.name, failures.len(), failures.join("\n"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_frame_has_its_own_reproducible_seed() {
        assert_ne!(frame_seed(1, 0), frame_seed(1, 1));
        assert_ne!(frame_seed(1, 5), frame_seed(2, 5));
        let a = fastrand::Rng::with_seed(frame_seed(9, 42)).u64(..);
        let b = fastrand::Rng::with_seed(frame_seed(9, 42)).u64(..);
        assert_eq!(a, b);
    }

    #[test]
    fn frames_are_reproducible_and_of_many_kinds() {
        let w = crate::frames::World::default();
        let make = |seed| crate::frames::frame(&mut fastrand::Rng::with_seed(seed), &w);
        assert_eq!(make(3), make(3));
        let views: Vec<_> = (0..2000).map(|s| crate::kernel::view(&make(s))).collect();
        let v4 = views.iter().filter(|v| v.ip().is_some_and(|ip| !ip.v6)).count();
        let v6 = views.iter().filter(|v| v.ip().is_some_and(|ip| ip.v6)).count();
        let bad = views.iter().filter(|v| v.l3 == crate::kernel::L3::Malformed).count();
        assert!(v4 > 300 && v6 > 300 && bad > 100, "v4 {v4}, v6 {v6}, malformed {bad}");
    }
}
