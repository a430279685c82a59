//! `xnf lab latency`: which AF_XDP settings give the lowest delay on this
//! machine (the AF_XDP delays paper). A pinger and a forwarder in two namespaces joined by
//! a veth pair bounce 64-byte probes; every round-trip time is recorded.
//!
//! 1. Every combination of the seed's §VI parameters — zero-copy (where the
//!    driver has it; veth has not, so the matrix says so and runs copy
//!    mode), busy poll, need_wakeup, poll() or spin on the forwarder,
//!    poll() or spin on the receiver, batch size — repeated, in shuffled
//!    order, with the kernel UDP and AF_PACKET baselines in the same run.
//! 2. The runs are grouped with k-means on their mean, median, standard
//!    deviation and quartiles (not min and max, which single outliers
//!    decide), standardised; k is the one with the best mean silhouette.
//! 3. The clusters are reported like the seed's Table I: mean and standard
//!    deviation of the RTT, and the parameters every member shares; the
//!    HTML report draws each cluster's RTT density.
//! 4. A saturation sweep raises the probe rate for the fastest settings
//!    of each method until probes are lost.
//!
//! What the timestamps themselves cost is measured and stated: a clock
//! read, and the pinger's bookkeeping around an RTT over an in-memory path.

pub mod kmeans;
pub mod pingpong;
pub mod profiled;
pub mod report;
pub mod stats;

use anyhow::{ensure, Context, Result};
use serde::{Deserialize, Serialize};

use crate::engine::profiling::ProfileArgs;
use crate::engine::progress::Progress;
use crate::engine::results::Machine;
use pingpong::{Config, Method, Overhead, Path};
use stats::Summary;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Options {
    /// Probes per second of the matrix runs (one probe in flight at a time
    /// when the RTT is below the interval).
    pub rate: u64,
    /// Probes per run.
    pub count: u64,
    /// Runs of every configuration.
    pub repeats: u32,
    /// Batch sizes in the matrix.
    pub batches: Vec<u32>,
    /// Largest k tried.
    pub max_k: usize,
    /// Probe rates of the saturation sweep (empty: none).
    pub saturation_rates: Vec<u64>,
    pub ping_cpu: usize,
    pub fwd_cpu: usize,
    /// Seed of the run order and of k-means.
    pub seed: u64,
    /// `--profile`: each method's best configuration once more, profiled.
    #[serde(default)]
    pub profiling: ProfileArgs,
}

impl Options {
    pub fn validate(&self, ncpu: usize) -> Result<()> {
        ensure!((1..=1_000_000).contains(&self.rate), "--rate {}: use 1..=1000000 probes per second", self.rate);
        ensure!((10..=10_000_000).contains(&self.count), "--count {}: use 10..=10000000 probes per run", self.count);
        ensure!(self.repeats >= 1, "--repeats {}: at least 1", self.repeats);
        ensure!(!self.batches.is_empty(), "--batch: give at least one batch size");
        for &b in &self.batches {
            ensure!((1..=512).contains(&b), "--batch {b}: use 1..=512");
        }
        ensure!((2..=20).contains(&self.max_k), "--max-k {}: use 2..=20", self.max_k);
        for &r in &self.saturation_rates {
            ensure!((1..=10_000_000).contains(&r), "--saturation {r}: rates are 1..=10000000 probes per second");
        }
        ensure!(self.ping_cpu < ncpu && self.fwd_cpu < ncpu, "--ping-cpu {} / --fwd-cpu {}: this machine has {ncpu} CPUs", self.ping_cpu, self.fwd_cpu);
        self.profiling.check()
    }

    /// The matrix: every AF_XDP combination (copy mode: veth has no
    /// zero-copy), then the kernel baselines sleeping and spinning.
    pub fn matrix(&self) -> Vec<Config> {
        let mut v = Vec::new();
        for busy_poll in [false, true] {
            for need_wakeup in [false, true] {
                for poll_fwd in [false, true] {
                    for poll_recv in [false, true] {
                        for &batch in &self.batches {
                            v.push(Config { method: Method::Afxdp, zero_copy: false, busy_poll, need_wakeup, poll_fwd, poll_recv, batch });
                        }
                    }
                }
            }
        }
        for method in [Method::Udp, Method::AfPacket] {
            for sleep in [true, false] {
                v.push(Config { method, zero_copy: false, busy_poll: false, need_wakeup: false, poll_fwd: sleep, poll_recv: sleep, batch: 1 });
            }
        }
        v
    }
}

/// One run of one configuration.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Run {
    pub config: Config,
    pub label: String,
    pub rate_pps: u64,
    pub repeat: u32,
    pub sent: u64,
    pub lost: u64,
    pub summary: Summary,
    /// Every RTT, in nanoseconds.
    pub rtts_ns: Vec<u64>,
    /// The k-means cluster (AF_XDP matrix runs only).
    pub cluster: Option<usize>,
}

/// A cluster as the seed's Table I shows it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Cluster {
    pub id: usize,
    pub runs: usize,
    /// Mean of the members' mean RTT, µs.
    pub mean_us: f64,
    /// Standard deviation of all the members' RTTs pooled, µs.
    pub std_us: f64,
    pub median_us: f64,
    pub p99_us: f64,
    /// Parameters with the same value in every member.
    pub always: Vec<(String, String)>,
    /// Parameters with the same value in at least 80 % of the members (and
    /// the share), those in `always` left out.
    #[serde(default)]
    pub mostly: Vec<(String, String, f64)>,
}

impl Cluster {
    /// What its members share, as shown: the parameters every member has
    /// (`name=value`) and those most have (`name=value (84 %)`); the method
    /// and zero-copy, the same for every AF_XDP run here, left out.
    pub fn shared(&self) -> (Vec<String>, Vec<String>) {
        let always = self.always.iter().filter(|(n, _)| n != "method" && n != "zero_copy").map(|(n, v)| format!("{n}={v}")).collect();
        let mostly = self.mostly.iter().map(|(n, v, f)| format!("{n}={v} ({:.0} %)", f * 100.0)).collect();
        (always, mostly)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Clustering {
    pub features: Vec<String>,
    pub criterion: String,
    pub k: usize,
    pub silhouette: f64,
    /// The silhouette of every k tried.
    #[serde(default)]
    pub scores: Vec<(usize, f64)>,
    /// Best (lowest mean) first.
    pub clusters: Vec<Cluster>,
}

/// How one setting moves the delay: the median of the run medians of the
/// AF_XDP runs with each of its values.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Effect {
    pub param: String,
    /// (value, runs, median of their medians in µs)
    pub values: Vec<(String, usize, f64)>,
}

/// Every matrix setting's effect, the largest spread first.
pub fn effects(runs: &[Run]) -> Vec<Effect> {
    let afxdp: Vec<&Run> = runs.iter().filter(|r| r.config.method == Method::Afxdp && r.summary.n > 0).collect();
    let mut out = Vec::new();
    for param in ["busy_poll", "need_wakeup", "poll_fwd", "poll_recv", "batch"] {
        let mut values: Vec<String> = afxdp.iter().filter_map(|r| r.config.params().into_iter().find(|(k, _)| *k == param).map(|(_, v)| v)).collect();
        values.sort();
        values.dedup();
        if values.len() < 2 {
            continue;
        }
        let values = values
            .into_iter()
            .map(|v| {
                let mut m: Vec<f64> =
                    afxdp.iter().filter(|r| r.config.params().iter().any(|(k, x)| *k == param && *x == v)).map(|r| r.summary.median).collect();
                m.sort_by(|a, b| a.total_cmp(b));
                let n = m.len();
                (v, n, stats::quantile(&m, 0.5))
            })
            .collect();
        out.push(Effect { param: param.into(), values });
    }
    let spread = |e: &Effect| {
        let m: Vec<f64> = e.values.iter().map(|v| v.2).collect();
        m.iter().copied().fold(f64::MIN, f64::max) - m.iter().copied().fold(f64::MAX, f64::min)
    };
    out.sort_by(|a, b| spread(b).total_cmp(&spread(a)));
    out
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LatencyResults {
    pub experiment: String,
    pub machine: Machine,
    pub started_unix: u64,
    pub options: Options,
    pub overhead: Overhead,
    pub runs: Vec<Run>,
    pub clustering: Option<Clustering>,
    pub saturation: Vec<Run>,
    /// With --profile: each method's best configuration, profiled.
    #[serde(default)]
    pub profiles: Vec<profiled::LatencyProfile>,
    pub notes: Vec<String>,
}

impl LatencyResults {
    pub fn write_json(&self, path: &std::path::Path) -> Result<()> {
        std::fs::write(path, serde_json::to_string(self)?).with_context(|| format!("writing {}", path.display()))
    }

    pub fn read(path: &std::path::Path) -> Result<LatencyResults> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("{}: not a latency results file", path.display()))
    }
}

/// One configuration over its repeats.
pub struct ConfigRow<'a> {
    pub label: &'a str,
    /// Of every RTT of every repeat.
    pub summary: Summary,
    pub lost: u64,
    pub cluster: Option<usize>,
}

/// The runs by configuration (repeats pooled), lowest median first.
pub fn by_config(runs: &[Run]) -> Vec<ConfigRow<'_>> {
    let mut labels: Vec<&str> = Vec::new();
    for run in runs {
        if !labels.contains(&run.label.as_str()) {
            labels.push(&run.label);
        }
    }
    let mut rows: Vec<ConfigRow> = labels
        .into_iter()
        .map(|label| {
            let of: Vec<&Run> = runs.iter().filter(|x| x.label == label).collect();
            let all: Vec<u64> = of.iter().flat_map(|x| x.rtts_ns.iter().copied()).collect();
            ConfigRow { label, summary: Summary::of_ns(&all), lost: of.iter().map(|x| x.lost).sum(), cluster: of[0].cluster }
        })
        .collect();
    rows.sort_by(|a, b| a.summary.median.total_cmp(&b.summary.median));
    rows
}

/// Pooled RTTs (µs) of some runs.
pub fn pooled_us<'a>(runs: impl Iterator<Item = &'a Run>) -> Vec<f64> {
    runs.flat_map(|r| r.rtts_ns.iter().map(|&n| n as f64 / 1000.0)).collect()
}

/// Groups the AF_XDP matrix runs; fills each run's `cluster`.
pub fn cluster(runs: &mut [Run], max_k: usize, seed: u64) -> Option<Clustering> {
    let idx: Vec<usize> = (0..runs.len()).filter(|&i| runs[i].config.method == Method::Afxdp && runs[i].summary.n > 1).collect();
    if idx.len() < 3 {
        return None;
    }
    let rows: Vec<Vec<f64>> = idx.iter().map(|&i| runs[i].summary.features().to_vec()).collect();
    let z = kmeans::standardise(&rows);
    let (best, scores) = kmeans::choose_k_scored(&z, max_k, seed);
    let (c, score) = best?;
    // Renumber clusters by their mean RTT, best first.
    let mut order: Vec<usize> = (0..c.k).collect();
    let mean_of = |k: usize| {
        let m: Vec<f64> = idx.iter().zip(&c.labels).filter(|(_, &l)| l == k).map(|(&i, _)| runs[i].summary.mean).collect();
        m.iter().sum::<f64>() / m.len().max(1) as f64
    };
    order.sort_by(|&a, &b| mean_of(a).total_cmp(&mean_of(b)));
    let rank: Vec<usize> = (0..c.k).map(|k| order.iter().position(|&o| o == k).unwrap()).collect();
    for (&i, &l) in idx.iter().zip(&c.labels) {
        runs[i].cluster = Some(rank[l]);
    }
    let clusters = (0..c.k)
        .map(|id| {
            let members: Vec<&Run> = runs.iter().filter(|r| r.cluster == Some(id)).collect();
            let pooled = pooled_us(members.iter().copied());
            let mut sorted = pooled.clone();
            sorted.sort_by(|a, b| a.total_cmp(b));
            let mean_us = members.iter().map(|r| r.summary.mean).sum::<f64>() / members.len().max(1) as f64;
            let pm = pooled.iter().sum::<f64>() / pooled.len().max(1) as f64;
            let std_us = (pooled.iter().map(|x| (x - pm).powi(2)).sum::<f64>() / pooled.len().saturating_sub(1).max(1) as f64).sqrt();
            let share = |k: &str, v: &str| {
                members.iter().filter(|m| m.config.params().iter().any(|(k2, v2)| *k2 == k && v2 == v)).count() as f64 / members.len() as f64
            };
            let mut values: Vec<(&'static str, String)> = members.iter().flat_map(|m| m.config.params()).collect();
            values.sort();
            values.dedup();
            let always = values.iter().filter(|(k, v)| share(k, v) == 1.0).map(|(k, v)| (k.to_string(), v.clone())).collect();
            let mostly = values
                .iter()
                .map(|(k, v)| (k, v, share(k, v)))
                .filter(|(_, _, f)| *f >= 0.8 && *f < 1.0)
                .map(|(k, v, f)| (k.to_string(), v.clone(), f))
                .collect();
            Cluster {
                id,
                runs: members.len(),
                mean_us,
                std_us,
                median_us: stats::quantile(&sorted, 0.5),
                p99_us: stats::quantile(&sorted, 0.99),
                always,
                mostly,
            }
        })
        .collect();
    Some(Clustering {
        features: ["ln mean", "ln median", "ln std", "ln q1", "ln q3"].map(String::from).to_vec(),
        criterion: "mean silhouette (k-means, k-means++ seeding, 10 restarts, features log-scaled then standardised)".into(),
        k: c.k,
        silhouette: score,
        scores,
        clusters,
    })
}

pub(crate) fn one_run(p: &Path, c: &Config, rate: u64, count: u64, repeat: u32, o: &Options) -> Result<Run> {
    let r = pingpong::run(p, c, rate, count, o.ping_cpu, o.fwd_cpu).with_context(|| format!("{} at {rate} probes/s", c.label()))?;
    Ok(Run {
        config: *c,
        label: c.label(),
        rate_pps: rate,
        repeat,
        sent: r.sent,
        lost: r.lost,
        summary: Summary::of_ns(&r.rtts_ns),
        rtts_ns: r.rtts_ns,
        cluster: None,
    })
}

/// Runs the experiment.
pub fn run(o: &Options, lines: &mut dyn FnMut(&str)) -> Result<LatencyResults> {
    let ncpu = crate::engine::cpu::sample()?.len();
    o.validate(ncpu)?;
    crate::engine::remove_stale(lines)?;
    let overhead = pingpong::measure_overhead();
    let matrix = o.matrix();
    let per_run = o.count as f64 / o.rate as f64 + 0.15;
    let total = per_run * (matrix.len() * o.repeats as usize) as f64 + o.saturation_rates.len() as f64 * 3.0 * 1.2;
    let mut pg = Progress::new(total);
    pg.message("building the pinger and forwarder namespaces");
    let path = Path::build()?;
    // Seeded: the same --seed gives the same run order.
    let mut rng = fastrand::Rng::with_seed(o.seed);
    let mut runs = Vec::new();
    for repeat in 0..o.repeats {
        let mut order = matrix.clone();
        rng.shuffle(&mut order);
        for (i, c) in order.iter().enumerate() {
            pg.set_prefix(format!("repeat {}/{}, run {}/{}: {}", repeat + 1, o.repeats, i + 1, order.len(), c.label()));
            runs.push(one_run(&path, c, o.rate, o.count, repeat, o)?);
            pg.advance(per_run);
        }
    }
    let clustering = cluster(&mut runs, o.max_k, o.seed);
    let saturation = saturation(&path, o, &runs, &mut pg)?;
    let profiles = profiled::best_profiled(&path, o, &runs, &mut pg)?;
    drop(path);
    pg.finish();
    let mut notes = vec![
        format!(
            "veth: copy mode only (no AF_XDP zero-copy), and busy polling does not engage on it: the busy-poll runs add the syscalls, not a driver poll loop. Pinger on CPU {}, forwarder on CPU {}; a frame sent into a veth is received in softirq on the sender's CPU.",
            o.ping_cpu, o.fwd_cpu
        ),
        "poll = the side sleeps in poll() and is woken by the frame (an idle vCPU halts: waking it costs tens of µs); spin = it never sleeps.".into(),
        format!("timestamps: a clock read costs {:.0} ns; the pinger's bookkeeping adds {:.0} ns to every RTT (an RTT over an in-memory path).", overhead.clock_read_ns, overhead.loop_rtt_ns),
    ];
    let lost: u64 = runs.iter().map(|r| r.lost).sum();
    if lost > 0 {
        notes.push(format!("{lost} probe(s) lost over the matrix runs (no answer within 200 ms of the last send)."));
    }
    Ok(LatencyResults {
        experiment: "latency".into(),
        machine: Machine::this(),
        started_unix: crate::engine::results::now_unix(),
        options: o.clone(),
        overhead,
        runs,
        clustering,
        saturation,
        profiles,
        notes,
    })
}

/// For each method, the configuration with the lowest median RTT in the
/// matrix, at rising probe rates until more than 1 % are lost.
fn saturation(p: &Path, o: &Options, runs: &[Run], pg: &mut Progress) -> Result<Vec<Run>> {
    let mut out = Vec::new();
    if o.saturation_rates.is_empty() {
        return Ok(out);
    }
    for best in best_per_method(runs) {
        for &rate in &o.saturation_rates {
            pg.set_prefix(format!("saturation: {} at {rate} probes/s", best.label));
            let count = (rate / 2).clamp(1000, 200_000);
            let r = one_run(p, &best.config, rate, count, 0, o)?;
            pg.advance(1.2);
            let lossy = r.lost * 100 > r.sent;
            out.push(r);
            if lossy {
                break;
            }
        }
    }
    Ok(out)
}

/// For each method, the matrix run with the lowest median RTT.
pub fn best_per_method(runs: &[Run]) -> Vec<&Run> {
    [Method::Afxdp, Method::Udp, Method::AfPacket]
        .into_iter()
        .filter_map(|method| runs.iter().filter(|r| r.config.method == method && r.summary.n > 0).min_by(|a, b| a.summary.median.total_cmp(&b.summary.median)))
        .collect()
}

/// The terminal summary: runs by configuration (median of repeats),
/// the clusters like the seed's Table I, the baselines, the saturation sweep.
pub fn print(r: &LatencyResults) {
    println!("\nxnf lab latency — kernel {}, {} × {}, xnf {}", r.machine.kernel, r.machine.cores, r.machine.cpu_model, r.machine.xnf_version);
    println!("RTT in µs over {} probes per run at {} probes/s; {} repeats\n", r.options.count, r.options.rate, r.options.repeats);
    println!(
        "{:<44} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>8} {:>5}",
        "configuration", "mean", "median", "std", "q1", "q3", "p99", "p99.9", "max", "lost"
    );
    let rows = by_config(&r.runs);
    for ConfigRow { label: l, summary: s, lost, cluster: c } in &rows {
        let l = match c {
            Some(c) => format!("{l} [c{c}]"),
            None => l.to_string(),
        };
        println!(
            "{l:<44} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>9.1} {:>8.1} {lost:>5}",
            s.mean, s.median, s.std, s.q1, s.q3, s.p99, s.p999, s.max
        );
    }
    if let Some(c) = &r.clustering {
        println!("\nclusters of the AF_XDP runs (k = {} by {}; silhouette {:.2}; features: {}):", c.k, c.criterion, c.silhouette, c.features.join(", "));
        println!("{:<8} {:>5} {:>9} {:>8} {:>8} {:>8}  parameters always present; [in most members]", "cluster", "runs", "mean µs", "std", "median", "p99");
        for k in &c.clusters {
            let (always, mostly) = k.shared();
            println!(
                "c{:<7} {:>5} {:>9.1} {:>8.1} {:>8.1} {:>8.1}  {}{}",
                k.id,
                k.runs,
                k.mean_us,
                k.std_us,
                k.median_us,
                k.p99_us,
                if always.is_empty() { "(none)".into() } else { always.join(", ") },
                if mostly.is_empty() { String::new() } else { format!("; [{}]", mostly.join(", ")) }
            );
        }
    }
    let eff = effects(&r.runs);
    if !eff.is_empty() {
        println!("\neffect of each AF_XDP setting (median of the run medians, µs; largest spread first):");
        for e in &eff {
            let v: Vec<String> = e.values.iter().map(|(v, n, m)| format!("{v}: {m:.1} ({n} runs)")).collect();
            println!("  {:<12} {}", e.param, v.join("   "));
        }
    }
    if let Some(c) = &r.clustering {
        let s: Vec<String> = c.scores.iter().map(|(k, s)| format!("k={k}: {s:.2}")).collect();
        if !s.is_empty() {
            println!("silhouette by k: {}", s.join(", "));
        }
    }
    if !r.saturation.is_empty() {
        println!("\nsaturation (the lowest-median configuration of each method at rising rates):");
        for s in &r.saturation {
            println!(
                "{:<44} {:>8} probes/s  median {:>7.1} µs  p99 {:>8.1} µs  lost {}/{}",
                s.label, s.rate_pps, s.summary.median, s.summary.p99, s.lost, s.sent
            );
        }
    }
    profiled::print(&r.profiles);
    for n in &r.notes {
        println!("note: {n}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> Options {
        Options {
            rate: 5000,
            count: 2000,
            repeats: 3,
            batches: vec![1, 64],
            max_k: 8,
            saturation_rates: vec![],
            ping_cpu: 1,
            fwd_cpu: 0,
            seed: 1,
            profiling: ProfileArgs::default(),
        }
    }

    #[test]
    fn the_matrix_has_every_combination_once() {
        let m = opts().matrix();
        let afxdp: Vec<_> = m.iter().filter(|c| c.method == Method::Afxdp).collect();
        assert_eq!(afxdp.len(), 2 * 2 * 2 * 2 * 2);
        let mut labels: Vec<String> = m.iter().map(|c| c.label()).collect();
        labels.sort();
        labels.dedup();
        assert_eq!(labels.len(), m.len(), "labels are unique");
        assert_eq!(m.len() - afxdp.len(), 4, "UDP and AF_PACKET, sleeping and spinning");
    }

    #[test]
    fn bad_options_name_the_flag() {
        let check = |f: &dyn Fn(&mut Options), want: &str| {
            let mut o = opts();
            f(&mut o);
            let e = format!("{:#}", o.validate(2).unwrap_err());
            assert!(e.contains(want), "{e} lacks {want}");
        };
        check(&|o| o.rate = 0, "--rate 0");
        check(&|o| o.count = 1, "--count 1");
        check(&|o| o.repeats = 0, "--repeats 0");
        check(&|o| o.batches = vec![0], "--batch 0");
        check(&|o| o.max_k = 1, "--max-k 1");
        check(&|o| o.ping_cpu = 5, "--ping-cpu 5");
        assert!(opts().validate(2).is_ok());
    }

    fn fake(c: Config, base_us: f64, repeat: u32) -> Run {
        let rtts: Vec<u64> = (0..200).map(|i| ((base_us + (i % 10) as f64 * 0.1) * 1000.0) as u64).collect();
        Run { config: c, label: c.label(), rate_pps: 5000, repeat, sent: 200, lost: 0, summary: Summary::of_ns(&rtts), rtts_ns: rtts, cluster: None }
    }

    #[test]
    fn clusters_follow_the_setting_that_decides_the_delay() {
        // Spinning receivers ~10 µs, sleeping ones ~40 µs, whatever else is set.
        let mut runs = Vec::new();
        let mut rng = fastrand::Rng::with_seed(3);
        for c in opts().matrix().into_iter().filter(|c| c.method == Method::Afxdp) {
            for rep in 0..2 {
                runs.push(fake(c, if c.poll_recv { 40.0 } else { 10.0 } + rng.f64() * 2.0, rep));
            }
        }
        runs.push(fake(opts().matrix().last().copied().unwrap(), 100.0, 0)); // a baseline: not clustered
        let c = cluster(&mut runs, 6, 1).unwrap();
        assert_eq!(c.k, 2, "{c:?}");
        assert!(c.clusters[0].mean_us < c.clusters[1].mean_us, "best first");
        assert!(c.clusters[0].always.contains(&("poll_recv".into(), "false".into())), "{:?}", c.clusters[0].always);
        assert!(c.clusters[1].always.contains(&("poll_recv".into(), "true".into())));
        assert!(runs.last().unwrap().cluster.is_none());
        assert_eq!(c.clusters.iter().map(|k| k.runs).sum::<usize>(), 64);
    }
}
