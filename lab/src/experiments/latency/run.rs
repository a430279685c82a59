//! `xnf lab latency` on the lab's driver. The matrix's configurations are
//! the variants — in an order shuffled by `--seed`, which the driver
//! reverses every other run — and each measures itself: the forwarder
//! started, `--count` probes sent at `--rate`, every RTT kept. The pinger
//! and the forwarder are the two ends of the driver's topology (the
//! built-in `pair`: roles.gen and roles.sink). There are two points
//! (`stage`): `matrix`, every configuration in every run (`--repeats`);
//! then `best`, in the first run only: each method's best configuration of
//! the matrix at the `--saturation` rates, and with `--profile` once more,
//! profiled. When the driver finishes, the runs are clustered and
//! everything goes to the results' `details` ([`super::Details`]).

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use anyhow::{ensure, Context, Result};
use clap::{Arg, Args};
use serde::Serialize;

use super::pingpong::{self, Config, Method, Overhead, Path};
use super::profiled::{self, LatencyProfile};
use super::{best_per_method, by_config, cluster, one_run, Details, LatencyResults, Probes, Run};
use crate::engine::driver::{self, AtPoint, Common, Cpus, Experiment, Measuring, Running, VariantName};
use crate::engine::measure::{self, Measured, Timing};
use crate::engine::params::{Param, Point, Value};
use crate::engine::profiling::ProfileArgs;
use crate::engine::progress::Progress;
use crate::engine::results::Results;
use crate::engine::topology::{ifname, BuiltTopology, TopologySpec};

/// `xnf lab latency`: the options every experiment takes and its own.
#[derive(Args, Debug)]
#[command(mut_args(tune))]
pub struct LatencyArgs {
    #[command(flatten)]
    pub common: Common,
    #[command(flatten)]
    pub latency: Latency,
}

/// The common options as latency takes them: `--repeats` (as before the
/// driver; `--runs` too), the topology `pair`; what it cannot use is
/// hidden from its help (and refused when given: [`refuse`]).
fn tune(a: Arg) -> Arg {
    match a.get_id().as_str() {
        "runs" => a.long("repeats").visible_alias("runs").value_name("N").help("Runs of every configuration (in an order shuffled by --seed, reversed every other run)"),
        "topology" => a
            .default_value("pair")
            .help("Topology: the pinger at its roles.gen and the forwarder at its roles.sink, the two ends of one veth pair (a built-in scenario or a TOML file)"),
        "json" => a.help("Write every RTT, the summaries and the clusters as JSON (input of `xnf lab report`)"),
        "profile" => a.help(
            "Each method's best configuration runs once more with `xnf profile` attached: where a probe's CPU time went and what the profiler added to the RTT (`counts`: nothing that runs per packet)",
        ),
        "seconds" | "warmup" | "trial_seconds" | "cpu" | "zero_loss" | "load_curve" | "load_rates" | "csv" => a.hide(true),
        _ => a,
    }
}

/// The common options latency cannot use, refused when given (those with
/// a default, when not at it); --zero-loss and the load curve are refused
/// by [`Experiment::plan`].
pub fn refuse(c: &Common) -> Result<()> {
    ensure!(c.runs >= 1, "--repeats {}: at least 1", c.runs);
    ensure!(c.seconds == 5.0, "--seconds: latency sends --count probes at --rate, not for a time");
    ensure!(c.warmup == 1.0, "--warmup: latency keeps every probe of a run (no warm-up)");
    ensure!(c.trial_seconds == 2.0, "--trial-seconds: latency has no load steps or search trials (see --saturation)");
    ensure!(c.cpu.is_none(), "--cpu: latency has no generator; the pinger's CPU is --ping-cpu, the forwarder's --fwd-cpu");
    ensure!(c.csv.is_none(), "--csv: latency has no samples (its RTTs, summaries and clusters are in --json)");
    Ok(())
}

/// `xnf lab latency`'s own options (and, while it runs, what it measured).
#[derive(Args, Debug, Serialize)]
pub struct Latency {
    /// Probes per second in the matrix runs (64-byte frames, one at a time
    /// while the RTT is below the interval).
    #[arg(long, default_value_t = 5000)]
    pub rate: u64,
    /// Probes per run.
    #[arg(long, default_value_t = 2000)]
    pub count: u64,
    /// Batch sizes in the matrix.
    #[arg(long = "batch", value_delimiter = ',', default_value = "1,64", value_name = "N[,N...]")]
    pub batches: Vec<u32>,
    /// Largest number of clusters tried.
    #[arg(long, default_value_t = 8)]
    pub max_k: usize,
    /// Probe rates of the saturation sweep (empty string: no sweep).
    #[arg(long, value_delimiter = ',', default_value = "10000,50000,100000,200000,400000", value_name = "PPS[,PPS...]")]
    #[serde(rename = "saturation_rates", serialize_with = "as_rates")]
    pub saturation: Vec<String>,
    /// CPU of the pinger (sender and receiver) [default: the last one].
    #[arg(long)]
    pub ping_cpu: Option<usize>,
    /// CPU of the forwarder [default: the first one].
    #[arg(long, default_value_t = 0)]
    pub fwd_cpu: usize,
    /// AF_XDP zero-copy as an axis of the matrix: auto (every AF_XDP
    /// configuration in both modes where the driver has zero-copy; on a
    /// driver without it, said once and its configurations skipped), off
    /// (copy mode only).
    #[arg(long, default_value = "auto", value_parser = ["auto", "off"])]
    pub zero_copy: String,
    /// Seed of the run order and of k-means.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Measure nothing: cluster the runs of a results file again (with this
    /// --max-k and --seed) and print them (--json writes them).
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    pub from: Option<PathBuf>,
    /// --repeats and --profile/--flame, from the common options.
    #[arg(skip)]
    #[serde(skip)]
    repeats: u32,
    #[arg(skip)]
    #[serde(skip)]
    profiling: ProfileArgs,
    #[arg(skip)]
    #[serde(skip)]
    state: Mutex<State>,
}

/// What the runs measured, until the driver finishes.
#[derive(Debug, Default)]
struct State {
    overhead: Overhead,
    runs: Vec<Run>,
    saturation: Vec<Run>,
    profiles: Vec<LatencyProfile>,
    /// Why zero-copy configurations were skipped, and how many runs.
    zero_copy_skipped: Option<(String, usize)>,
}

/// The saturation rates, refusing what is not one.
fn rates(v: &[String]) -> Result<Vec<u64>> {
    let rates = v
        .iter()
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<u64>().map_err(|_| anyhow::anyhow!("--saturation {s}: not a rate in probes per second")))
        .collect::<Result<Vec<_>>>()?;
    for &r in &rates {
        ensure!((1..=10_000_000).contains(&r), "--saturation {r}: rates are 1..=10000000 probes per second");
    }
    Ok(rates)
}

fn as_rates<S: serde::Serializer>(v: &[String], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(rates(v).unwrap_or_default())
}

/// The parameter of latency's points: the matrix, then each method's best.
pub fn stage() -> Param {
    let mut p = Param::plain("stage", &Value::from("matrix"));
    p.names = vec![(Value::from("matrix"), "the matrix".into()), (Value::from("best"), "each method's best".into())];
    p
}

impl VariantName for Config {
    fn name(&self) -> String {
        self.label()
    }
}

impl Latency {
    /// The matrix: every AF_XDP combination, in copy mode and (with
    /// `--zero-copy auto`) zero-copy, then the kernel baselines sleeping
    /// and spinning.
    pub fn matrix(&self) -> Vec<Config> {
        let mut v = Vec::new();
        let modes: &[bool] = if self.zero_copy == "off" { &[false] } else { &[false, true] };
        for &zero_copy in modes {
            self.afxdp_matrix(zero_copy, &mut v);
        }
        for method in [Method::Udp, Method::AfPacket] {
            for sleep in [true, false] {
                v.push(Config { method, zero_copy: false, busy_poll: false, need_wakeup: false, poll_fwd: sleep, poll_recv: sleep, batch: 1 });
            }
        }
        v
    }

    /// Every AF_XDP combination of busy poll, need_wakeup, poll or spin on
    /// either side and batch, in one mode.
    fn afxdp_matrix(&self, zero_copy: bool, v: &mut Vec<Config>) {
        for busy_poll in [false, true] {
            for need_wakeup in [false, true] {
                for poll_fwd in [false, true] {
                    for poll_recv in [false, true] {
                        for &batch in &self.batches {
                            v.push(Config { method: Method::Afxdp, zero_copy, busy_poll, need_wakeup, poll_fwd, poll_recv, batch });
                        }
                    }
                }
            }
        }
    }

    fn probes(&self, cpus: Cpus) -> Probes {
        Probes { rate: self.rate, count: self.count, ping_cpu: self.ping_cpu.unwrap_or(cpus.count.saturating_sub(1)), fwd_cpu: self.fwd_cpu }
    }

    fn state(&self) -> Result<MutexGuard<'_, State>> {
        self.state.lock().map_err(|_| anyhow::anyhow!("a run panicked"))
    }
}

impl Experiment for Latency {
    type Variant = Config;
    const NAME: &'static str = "latency";

    fn params(&self) -> Vec<Param> {
        vec![stage()]
    }

    /// The matrix; then each method's best, with a saturation sweep or a profile.
    fn sweep(&self) -> Vec<(&'static str, Vec<Value>)> {
        let best = !rates(&self.saturation).unwrap_or_default().is_empty() || self.profiling.profile.is_some();
        let stages: &[&str] = if best { &["matrix", "best"] } else { &["matrix"] };
        vec![("stage", stages.iter().map(|s| Value::from(*s)).collect())]
    }

    /// The matrix, shuffled by --seed.
    fn variants(&self) -> Vec<Config> {
        let mut m = self.matrix();
        fastrand::Rng::with_seed(self.seed).shuffle(&mut m);
        m
    }

    fn ratios(&self) -> Vec<(&str, &str)> {
        Vec::new()
    }

    fn check(&self, cpus: Cpus) -> Result<()> {
        ensure!((1..=1_000_000).contains(&self.rate), "--rate {}: use 1..=1000000 probes per second", self.rate);
        ensure!((10..=10_000_000).contains(&self.count), "--count {}: use 10..=10000000 probes per run", self.count);
        ensure!(!self.batches.is_empty(), "--batch: give at least one batch size");
        for &b in &self.batches {
            ensure!((1..=512).contains(&b), "--batch {b}: use 1..=512");
        }
        ensure!((2..=20).contains(&self.max_k), "--max-k {}: use 2..=20", self.max_k);
        rates(&self.saturation)?;
        let (p, ncpu) = (self.probes(cpus), cpus.count);
        ensure!(p.ping_cpu < ncpu && p.fwd_cpu < ncpu, "--ping-cpu {} / --fwd-cpu {}: this machine has {ncpu} CPUs", p.ping_cpu, p.fwd_cpu);
        Ok(())
    }

    fn plan(&self, common: measure::Plan) -> Result<measure::Plan> {
        ensure!(common.zero_loss.is_none(), "--zero-loss: latency measures round trips, not a rate");
        ensure!(common.load.count() == 0, "--load-curve / --load-rates: latency sends probes at --rate (and at the --saturation rates)");
        Ok(common)
    }

    /// The whole plan spread evenly over every variant, point and run.
    fn planned_seconds(&self, _: &Timing, plan: &measure::Plan) -> f64 {
        let per_run = self.count as f64 / self.rate.max(1) as f64 + 0.15;
        let (n, repeats) = (self.matrix().len().max(1) as f64, self.repeats.max(1) as f64);
        let sat = rates(&self.saturation).unwrap_or_default().len() as f64;
        let best = 3.0 * (sat * 1.2 + if plan.profile.is_some() { per_run } else { 0.0 });
        let points = self.sweep()[0].1.len() as f64;
        (n * per_run * repeats + best) / (points * n * repeats)
    }

    /// The pinger's and the forwarder's ends must be one veth pair, with
    /// no program of the topology's on them.
    fn adapt(&self, spec: &mut TopologySpec) -> Result<()> {
        let roles = spec.roles.clone().context("the topology needs a [roles] table (gen, dut_in, dut_out, sink)")?;
        let end = |ep: &str| ep.split_once(':').map(|(n, d)| (n.to_string(), ifname(d)));
        let (ping, fwd) = (end(&roles.gen), end(&roles.sink));
        let joined = spec.links.iter().any(|l| {
            let (a, b) = (end(&l.a), end(&l.b));
            (a == ping && b == fwd) || (a == fwd && b == ping)
        });
        ensure!(
            joined && ping != fwd,
            "--topology: latency's pinger (roles.gen `{}`) and forwarder (roles.sink `{}`) must be the two ends of one veth pair, as in `pair`",
            roles.gen,
            roles.sink
        );
        for f in &mut spec.functions {
            f.interfaces.retain(|d| {
                let e = Some((f.ns.clone(), ifname(d)));
                e != ping && e != fwd
            });
        }
        spec.functions.retain(|f| !f.interfaces.is_empty());
        Ok(())
    }

    /// The ends' neighbours and checksums; what timestamps cost, at the start.
    fn built(&mut self, t: &mut BuiltTopology, pg: &Progress) -> Result<()> {
        Path::prepare(t)?;
        pg.message("measuring what timestamps cost");
        self.state()?.overhead = pingpong::measure_overhead();
        Ok(())
    }

    /// Nothing at a point: no generator, the probes are the pinger's.
    fn at_point<'a>(&'a self, _: &'a BuiltTopology, _: &Point, _: &Progress) -> Result<AtPoint<'a>> {
        Ok(AtPoint::without_traffic(()))
    }

    fn set_up<'a>(&'a self, t: &'a BuiltTopology, p: &Point, v: Config, cpus: Cpus, _: &Progress) -> Result<Box<dyn Running + 'a>> {
        let best = p.get("stage") == Some(&Value::from("best"));
        Ok(Box::new(Probing { exp: self, path: Path::on(t)?, config: v, probes: self.probes(cpus), best }))
    }

    /// The runs clustered; everything to `details`, with the notes.
    fn finish(&mut self, _: Cpus, res: &mut Results) -> Result<()> {
        let State { overhead, mut runs, mut saturation, mut profiles, zero_copy_skipped } = std::mem::take(&mut *self.state()?);
        if let Some((why, n)) = zero_copy_skipped {
            res.notes.push(format!("{why}: its {n} zero-copy run(s) skipped (--zero-copy off measures copy mode only)"));
        }
        let clustering = cluster(&mut runs, self.max_k, self.seed);
        // Measured in the order the variants came; shown by method.
        let method = |c: &Config| [Method::Afxdp, Method::Udp, Method::AfPacket].iter().position(|m| *m == c.method);
        saturation.sort_by_key(|r| (method(&r.config), r.rate_pps));
        profiles.sort_by_key(|p| runs.iter().find(|r| r.label == p.label).map(|r| method(&r.config)));
        let lost: u64 = runs.iter().map(|r| r.lost).sum();
        res.notes.extend([
            format!(
                "veth: busy polling does not engage on it: the busy-poll runs add the syscalls, not a driver poll loop. Pinger on CPU {}, forwarder on CPU {}; a frame sent into a veth is received in softirq on the sender's CPU.",
                self.ping_cpu.map_or("?".into(), |c| c.to_string()),
                self.fwd_cpu
            ),
            "poll = the side sleeps in poll() and is woken by the frame (an idle vCPU halts: waking it costs tens of µs); spin = it never sleeps.".into(),
            format!("timestamps: a clock read costs {:.0} ns; the pinger's bookkeeping adds {:.0} ns to every RTT (an RTT over an in-memory path).", overhead.clock_read_ns, overhead.loop_rtt_ns),
        ]);
        if lost > 0 {
            res.notes.push(format!("{lost} probe(s) lost over the matrix runs (no answer within 200 ms of the last send)."));
        }
        let details = Details { overhead, runs, clustering, saturation, profiles };
        let serde_json::Value::Object(d) = serde_json::to_value(&details)? else { anyhow::bail!("latency's details are not an object") };
        res.details.extend(d);
        Ok(())
    }

    fn print(&self, r: &Results) {
        match LatencyResults::of(r) {
            Ok(l) => super::print(&l),
            Err(e) => eprintln!("xnf lab: {e:#}"),
        }
    }
}

/// One configuration set up for one run at one stage.
struct Probing<'a> {
    exp: &'a Latency,
    path: Path<'a>,
    config: Config,
    probes: Probes,
    /// The `best` stage: the saturation sweep and the profile.
    best: bool,
}

impl Running for Probing<'_> {
    fn measure(&self, m: Measuring) -> Result<Measured> {
        let (e, p) = (self.exp, &self.probes);
        let measured = Measured { samples: Vec::new(), zero_loss: None, profiled: Vec::new() };
        if !self.best {
            let r = match one_run(&self.path, &self.config, p, p.rate, p.count, m.labels.run) {
                Err(err) if self.config.zero_copy && err.downcast_ref::<xnf_afxdp::ZeroCopyUnsupported>().is_some() => {
                    // Said once at the end: the driver has no zero-copy.
                    let mut st = e.state()?;
                    let skipped = st
                        .zero_copy_skipped
                        .get_or_insert_with(|| (err.downcast_ref::<xnf_afxdp::ZeroCopyUnsupported>().map(|z| z.0.clone()).unwrap_or_default(), 0));
                    skipped.1 += 1;
                    return Ok(measured);
                }
                r => r?,
            };
            e.state()?.runs.push(r);
            return Ok(measured);
        }
        // Once, for each method's best configuration of the matrix.
        let label = self.config.label();
        let best = best_per_method(&e.state()?.runs).into_iter().find(|r| r.label == label).cloned();
        let Some(best) = best.filter(|_| m.labels.run == 0) else { return Ok(measured) };
        for rate in rates(&e.saturation)? {
            m.pg.message(&format!("saturation at {rate} probes/s"));
            let r = one_run(&self.path, &best.config, p, rate, (rate / 2).clamp(1000, 200_000), 0)?;
            let lossy = r.lost * 100 > r.sent;
            e.state()?.saturation.push(r);
            if lossy {
                break;
            }
        }
        if let Some(opts) = &m.plan.profile {
            m.pg.message("profiling");
            let median = by_config(&e.state()?.runs).iter().find(|c| c.label == label).map_or(best.summary.median, |c| c.summary.median);
            let prof = profiled::profile(&self.path, &best, median, opts, e.profiling.flame.as_deref(), p)?;
            e.state()?.profiles.push(prof);
        }
        Ok(measured)
    }
}

/// `xnf lab latency` from the command line.
pub fn main(mut a: LatencyArgs) -> Result<()> {
    if let Some(from) = a.latency.from.clone() {
        return again(&a, &from);
    }
    refuse(&a.common)?;
    let ncpu = crate::engine::cpu::sample()?.len();
    let l = &mut a.latency;
    l.ping_cpu.get_or_insert(ncpu.saturating_sub(1));
    (l.repeats, l.profiling) = (a.common.runs, a.common.profiling.clone());
    let r = driver::run(&mut a.latency, &a.common, &mut |line| eprintln!("xnf lab: {line}"))?;
    a.latency.print(&r);
    a.common.write(&r)
}

/// `--from FILE`: the runs of a results file (of either form) clustered
/// again and printed; nothing is measured.
fn again(a: &LatencyArgs, from: &std::path::Path) -> Result<()> {
    let l = &a.latency;
    ensure!((2..=20).contains(&l.max_k), "--max-k {}: use 2..=20", l.max_k);
    let mut r = LatencyResults::read(from)?;
    r.details.runs.iter_mut().for_each(|x| x.cluster = None);
    r.details.clustering = cluster(&mut r.details.runs, l.max_k, l.seed);
    super::print(&r);
    if let Some(path) = &a.common.json {
        r.results()?.write_json(path)?;
        crate::engine::results::wrote(path);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> LatencyArgs {
        driver::parse_options(a).unwrap()
    }

    #[test]
    fn the_matrix_has_every_combination_once() {
        let m = args(&[]).latency.matrix();
        let afxdp: Vec<_> = m.iter().filter(|c| c.method == Method::Afxdp).collect();
        assert_eq!(afxdp.len(), 2 * 2 * 2 * 2 * 2 * 2, "copy and zero-copy");
        assert_eq!(afxdp.iter().filter(|c| c.zero_copy).count(), 32);
        assert!(args(&["--zero-copy", "off"]).latency.matrix().iter().all(|c| !c.zero_copy));
        let mut labels: Vec<String> = m.iter().map(|c| c.label()).collect();
        labels.sort();
        labels.dedup();
        assert_eq!(labels.len(), m.len(), "labels are unique");
        assert_eq!(m.len() - afxdp.len(), 4, "UDP and AF_PACKET, sleeping and spinning");
        let (a, b) = (args(&[]).latency.variants(), args(&["--seed", "2"]).latency.variants());
        assert_ne!(a, m, "shuffled");
        assert_ne!(a, b, "by the seed");
        assert_eq!(a, args(&[]).latency.variants(), "the same seed, the same order");
    }

    #[test]
    fn bad_options_name_the_flag() {
        let cpus = Cpus { gen: 1, count: 2 };
        for (a, want) in [
            (&["--rate", "0"][..], "--rate 0"),
            (&["--count", "1"][..], "--count 1"),
            (&["--batch", "0"][..], "--batch 0"),
            (&["--max-k", "1"][..], "--max-k 1"),
            (&["--saturation", "fast"][..], "--saturation fast"),
            (&["--saturation", "0"][..], "--saturation 0"),
            (&["--ping-cpu", "5"][..], "--ping-cpu 5"),
        ] {
            let e = format!("{:#}", args(a).latency.check(cpus).unwrap_err());
            assert!(e.contains(want) && !e.contains('\n'), "{a:?}: {e}");
        }
        assert!(args(&[]).latency.check(cpus).is_ok());
        for (a, want) in [
            (&["--repeats", "0"][..], "--repeats 0"),
            (&["--seconds", "2"][..], "--seconds"),
            (&["--warmup", "0"][..], "--warmup"),
            (&["--trial-seconds", "1"][..], "--trial-seconds"),
            (&["--cpu", "0"][..], "--ping-cpu"),
            (&["--csv", "x.csv"][..], "--csv"),
        ] {
            let e = format!("{:#}", refuse(&args(a).common).unwrap_err());
            assert!(e.contains(want), "{a:?}: {e}");
        }
        let plan = |a: &[&str]| args(a).latency.plan(args(a).common.plan());
        assert!(plan(&["--zero-loss"]).unwrap_err().to_string().contains("--zero-loss"));
        assert!(plan(&["--load-curve"]).unwrap_err().to_string().contains("--load-curve"));
        assert!(plan(&[]).is_ok());
    }

    #[test]
    fn the_common_options_take_latencys_names_and_defaults() {
        let a = args(&["--runs", "2"]);
        assert_eq!((a.common.runs, a.common.topology.as_str()), (2, "pair"));
        assert_eq!(args(&["--repeats", "4"]).common.runs, 4);
        let l = args(&["--saturation", ""]).latency;
        assert_eq!(l.sweep()[0].1, [Value::from("matrix")], "no saturation, no profile: the matrix alone");
        assert_eq!(args(&[]).latency.sweep()[0].1.len(), 2);
        assert_eq!(serde_json::to_value(&args(&["--saturation", "1000,2000"]).latency).unwrap()["saturation_rates"], serde_json::json!([1000, 2000]));
        let mut pair = TopologySpec::load("pair").unwrap();
        l.adapt(&mut pair).unwrap();
        assert!(pair.functions.is_empty(), "the sink's program leaves the forwarder's end: {:?}", pair.functions);
        let e = format!("{:#}", l.adapt(&mut TopologySpec::load("line").unwrap()).unwrap_err());
        assert!(e.contains("one veth pair"), "{e}");
    }
}
