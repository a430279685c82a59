//! `xnf lab latency`: which AF_XDP settings give the lowest delay on this
//! machine (the AF_XDP delays paper). A pinger and a forwarder in two namespaces joined by
//! a veth pair bounce 64-byte probes; every round-trip time is recorded.
//!
//! 1. Every combination of the seed's §VI parameters — zero-copy (where the
//!    driver has it; veth has not, so the matrix says so and runs copy
//!    mode), busy poll, need_wakeup, poll() or spin on the forwarder,
//!    poll() or spin on the receiver, batch size — repeated, in a seeded
//!    shuffled order, with the kernel UDP and AF_PACKET baselines in the
//!    same run.
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
//!
//! It runs on the lab's driver ([`run`]): each configuration is a variant
//! that measures itself; this file holds what is done with the RTTs (the
//! clusters, the effects, the terminal tables) and the results' form: the
//! driver's, the RTTs in `details` ([`LatencyResults`] reads it, and files
//! written before in a shape of their own).

pub mod kmeans;
pub mod pingpong;
pub mod profiled;
pub mod report;
pub mod run;
pub mod stats;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::engine::results::{Machine, Results};
use pingpong::{Config, Method, Overhead, Path};
use stats::Summary;

pub use run::{Latency, LatencyArgs};

/// How probes are sent: the matrix's rate and count, and the CPUs of the
/// pinger and the forwarder.
#[derive(Clone, Copy, Debug)]
pub struct Probes {
    pub rate: u64,
    pub count: u64,
    pub ping_cpu: usize,
    pub fwd_cpu: usize,
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

/// What `xnf lab latency` measured besides the driver's samples (it has
/// none): its results' `details`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Details {
    pub overhead: Overhead,
    pub runs: Vec<Run>,
    pub clustering: Option<Clustering>,
    pub saturation: Vec<Run>,
    /// With --profile: each method's best configuration, profiled.
    pub profiles: Vec<profiled::LatencyProfile>,
}

/// A latency results file as the tables and the report read it: the
/// driver's results (experiment "latency", [`Details`] in `details`), or a
/// file written before latency ran on the driver, whose top level held
/// these fields itself.
#[derive(Clone, Debug, Deserialize)]
pub struct LatencyResults {
    pub machine: Machine,
    pub started_unix: u64,
    /// The options as given (common and latency's own).
    pub options: serde_json::Value,
    #[serde(flatten)]
    pub details: Details,
    #[serde(default)]
    pub notes: Vec<String>,
}

impl LatencyResults {
    /// From the driver's results.
    pub fn of(r: &Results) -> Result<LatencyResults> {
        let details = serde_json::from_value(serde_json::Value::Object(r.details.clone())).context("the results' details are not latency's")?;
        Ok(LatencyResults { machine: r.machine.clone(), started_unix: r.started_unix, options: r.options.clone(), details, notes: r.notes.clone() })
    }

    /// As the driver's results (what `--json` writes).
    pub fn results(&self) -> Result<Results> {
        let mut r = Results::new("latency", &self.options, vec![run::stage()]);
        (r.machine, r.started_unix, r.notes) = (self.machine.clone(), self.started_unix, self.notes.clone());
        let serde_json::Value::Object(d) = serde_json::to_value(&self.details)? else { anyhow::bail!("latency's details are not an object") };
        r.details = d;
        Ok(r)
    }

    /// A results file of either form.
    pub fn read(path: &std::path::Path) -> Result<LatencyResults> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let bad = || format!("{}: not a latency results file", path.display());
        let v: serde_json::Value = serde_json::from_str(&text).with_context(bad)?;
        anyhow::ensure!(v.get("experiment").and_then(|e| e.as_str()) == Some("latency"), "{}", bad());
        if v.get("samples").is_some() {
            Self::of(&serde_json::from_value(v).with_context(bad)?).with_context(bad)
        } else {
            serde_json::from_value(v).with_context(bad)
        }
    }

    /// An option as given (`runs` was `repeats` before the driver).
    pub fn option(&self, key: &str) -> String {
        let v = match key {
            "runs" => self.options.get("runs").or_else(|| self.options.get("repeats")),
            k => self.options.get(k),
        };
        v.map_or("?".into(), |v| v.to_string())
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

/// One run of configuration `c`: `count` probes at `rate`, the CPUs of `probes`.
pub(crate) fn one_run(p: &Path, c: &Config, probes: &Probes, rate: u64, count: u64, repeat: u32) -> Result<Run> {
    let r = pingpong::run(p, c, rate, count, probes.ping_cpu, probes.fwd_cpu).with_context(|| format!("{} at {rate} probes/s", c.label()))?;
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
    let d = &r.details;
    println!("\nxnf lab latency — kernel {}, {} × {}, xnf {}", r.machine.kernel, r.machine.cores, r.machine.cpu_model, r.machine.xnf_version);
    println!("RTT in µs over {} probes per run at {} probes/s; {} repeats\n", r.option("count"), r.option("rate"), r.option("runs"));
    println!(
        "{:<44} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>8} {:>5}",
        "configuration", "mean", "median", "std", "q1", "q3", "p99", "p99.9", "max", "lost"
    );
    let rows = by_config(&d.runs);
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
    if let Some(c) = &d.clustering {
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
    let eff = effects(&d.runs);
    if !eff.is_empty() {
        println!("\neffect of each AF_XDP setting (median of the run medians, µs; largest spread first):");
        for e in &eff {
            let v: Vec<String> = e.values.iter().map(|(v, n, m)| format!("{v}: {m:.1} ({n} runs)")).collect();
            println!("  {:<12} {}", e.param, v.join("   "));
        }
    }
    if let Some(c) = &d.clustering {
        let s: Vec<String> = c.scores.iter().map(|(k, s)| format!("k={k}: {s:.2}")).collect();
        if !s.is_empty() {
            println!("silhouette by k: {}", s.join(", "));
        }
    }
    if !d.saturation.is_empty() {
        println!("\nsaturation (the lowest-median configuration of each method at rising rates):");
        for s in &d.saturation {
            println!(
                "{:<44} {:>8} probes/s  median {:>7.1} µs  p99 {:>8.1} µs  lost {}/{}",
                s.label, s.rate_pps, s.summary.median, s.summary.p99, s.lost, s.sent
            );
        }
    }
    profiled::print(&d.profiles);
    for n in &r.notes {
        println!("note: {n}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matrix() -> Vec<Config> {
        crate::engine::driver::parse_options::<Latency>(&["--batch", "1,64", "--zero-copy", "off"]).unwrap().matrix()
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
        for c in matrix().into_iter().filter(|c| c.method == Method::Afxdp) {
            for rep in 0..2 {
                runs.push(fake(c, if c.poll_recv { 40.0 } else { 10.0 } + rng.f64() * 2.0, rep));
            }
        }
        runs.push(fake(matrix().last().copied().unwrap(), 100.0, 0)); // a baseline: not clustered
        let c = cluster(&mut runs, 6, 1).unwrap();
        assert_eq!(c.k, 2, "{c:?}");
        assert!(c.clusters[0].mean_us < c.clusters[1].mean_us, "best first");
        assert!(c.clusters[0].always.contains(&("poll_recv".into(), "false".into())), "{:?}", c.clusters[0].always);
        assert!(c.clusters[1].always.contains(&("poll_recv".into(), "true".into())));
        assert!(runs.last().unwrap().cluster.is_none());
        assert_eq!(c.clusters.iter().map(|k| k.runs).sum::<usize>(), 64);
    }

    /// A file of the driver's form and one written before it read alike,
    /// and render.
    #[test]
    fn both_forms_of_results_files_read_and_render() {
        let m = matrix();
        let mut runs: Vec<Run> = m.iter().enumerate().map(|(i, c)| fake(*c, 10.0 + i as f64, 0)).collect();
        let clustering = cluster(&mut runs, 4, 1);
        let details = Details { overhead: Overhead { clock_read_ns: 30.0, loop_rtt_ns: 40.0 }, runs, clustering, saturation: Vec::new(), profiles: Vec::new() };
        let dir = std::env::temp_dir().join(format!("xnf-latency-forms-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // Before the driver: the fields at the top level, `repeats` among the options.
        let mut old = serde_json::to_value(&details).unwrap();
        let extra = serde_json::json!({
            "experiment": "latency", "machine": Machine::default(), "started_unix": 1_700_000_000u64,
            "options": {"rate": 5000, "count": 200, "repeats": 3}, "notes": ["an old note"],
        });
        old.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        std::fs::write(dir.join("old.json"), old.to_string()).unwrap();
        let o = LatencyResults::read(&dir.join("old.json")).unwrap();
        assert_eq!((o.option("runs").as_str(), o.details.runs.len(), o.notes.len()), ("3", m.len(), 1));
        // The driver's form, written from the old one and read back.
        o.results().unwrap().write_json(&dir.join("new.json")).unwrap();
        let text = std::fs::read_to_string(dir.join("new.json")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!((v["experiment"].as_str(), v["samples"].as_array().map(Vec::len)), (Some("latency"), Some(0)));
        assert_eq!(v["details"]["runs"].as_array().unwrap().len(), m.len());
        let n = LatencyResults::read(&dir.join("new.json")).unwrap();
        assert_eq!(serde_json::to_value(&n.details).unwrap(), serde_json::to_value(&o.details).unwrap());
        for r in [&o, &n] {
            let page = report::render(r);
            assert!(page.contains("Table I") && page.contains("an old note"), "the clusters and the notes");
            assert_eq!(page.matches("<table").count(), page.matches("</table>").count());
        }
        let e = format!("{:#}", LatencyResults::read(&dir.join("nope.json")).unwrap_err());
        assert!(e.contains("nope.json"), "{e}");
        std::fs::write(dir.join("router.json"), r#"{"experiment": "router", "samples": []}"#).unwrap();
        assert!(format!("{:#}", LatencyResults::read(&dir.join("router.json")).unwrap_err()).contains("not a latency results file"));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
