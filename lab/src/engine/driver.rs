//! The one experiment driver. An experiment ([`Experiment`]) states its
//! parameters and the values it sweeps, its variants, what it sets up at a
//! point and for each variant, how that variant's frames are counted, and
//! which ratios matter; [`run`] does the rest, the same for every
//! experiment:
//!
//! ```text
//! options checked (common + the experiment's)
//! topology loaded, adapted, built (again when the point's queues change)
//! for each point (the product of the sweeps and the --nic knobs):
//!     knobs set on dut's interfaces (skipped, said once, if missing)
//!     point set-up (routes, a ruleset), the generator's frames (if any)
//!     for each run, variants alternated:
//!         variant set-up -> dut's NAPI placed -> generator -> probe: full speed, load steps,
//!         zero-loss search (intervals, each read after a drain) -> samples
//!           (or the variant's own measurement: a latency distribution,
//!           the window of a route change, the flows a change moved)
//!         generator paused and stopped -> variant finished (checks, teardown)
//! summaries, ratios, notes -> Results (JSON / CSV -> report)
//! ```

use std::path::PathBuf;

use anyhow::{ensure, Context, Result};
use clap::{Args, ValueEnum};
use serde::Serialize;

use super::across::At;
use super::hosts::{Hosts, HostsFile};
use super::knobs::{self, Knob};
use super::measure::{self, Counters, Labels, Probe, Timing};
use super::params::{self, Param, Point, Value};
use super::placement::{DutCpu, Placed, Placement};
use super::profiling::ProfileArgs;
pub use super::profiling::ProfileLevel;
use super::progress::Progress;
use super::results::{Results, Sample};
use super::topology::{BuiltTopology, TopologySpec};
use super::Unavailable;
use crate::programs::gen::GenConfig;

/// Options every experiment shares, checked once by [`run`].
#[derive(Args, Clone, Debug, Serialize)]
pub struct Common {
    /// Topology: a built-in scenario (line, pair) or a TOML file with [roles].
    #[arg(long, default_value = "line", value_name = "NAME|FILE")]
    pub topology: String,
    /// Run some of the topology's namespaces on other hosts over SSH: a
    /// TOML file of [[host]] tables (name, ssh destination, namespaces,
    /// optional ssh_options and xnf path). The lab runs on dut's host
    /// (router, actions and chain).
    #[arg(long, value_name = "FILE")]
    pub hosts: Option<PathBuf>,
    /// Repetitions; variants alternate within each.
    #[arg(long, default_value_t = 3)]
    pub runs: u32,
    /// Measured seconds per variant and run at full speed.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Seconds of traffic before each measured interval (discarded).
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// CPU the generator runs on with one queue (default: the last one).
    #[arg(long)]
    pub cpu: Option<usize>,
    /// CPUs serving dut's ingress (threaded NAPI, pinned), one per queue:
    /// auto (the CPUs the generators leave, if any), shared (wherever the
    /// kernel runs it: on veth, the sending CPU), or CPU numbers. With a
    /// CPU of its own, dut's CPU per packet is measured apart and frames
    /// are lost in front of dut when it falls behind, as on a NIC.
    #[arg(long, default_value = "auto", value_parser = DutCpu::parse, value_name = "auto|shared|CPU[,CPU...]")]
    pub dut_cpu: DutCpu,
    /// A NIC or host knob swept at every point, set on both of dut's
    /// interfaces (repeatable): rx-ring, tx-ring (ethtool -G), rx-channels,
    /// tx-channels, combined-channels (-L), rx-usecs, rx-frames, tx-usecs,
    /// adaptive-rx (-C), gro, lro, rxvlan, txvlan, tso, gso (-K: on/off),
    /// defer-hard-irqs, gro-flush-timeout (busy polling, sysfs), irq-cpu
    /// (queue i's interrupt on CPU N+i), rss-queues (ethtool -X equal N),
    /// cpu-dma-latency (µs: the C-state limit), governor (cpufreq, by
    /// name: performance, powersave, ...). A knob the driver lacks is
    /// said in one line and its points skipped.
    #[arg(long = "nic", value_parser = Knob::parse, value_name = "KNOB=V[,V...]")]
    pub nic: Vec<Knob>,
    /// Also search each variant's highest rate with at most PCT % loss
    /// (RFC 2544 style: step halved on each change of direction, the first
    /// interval after a rate change discarded).
    #[arg(long, value_name = "PCT", num_args = 0..=1, default_missing_value = "0")]
    pub zero_loss: Option<f64>,
    /// Also measure CPU and loss at STEPS offered rates up to each variant's
    /// full-speed rate (the CPU-vs-offered-load curve).
    #[arg(long, value_name = "STEPS", num_args = 0..=1, default_missing_value = "10", default_value_t = 0)]
    pub load_curve: u32,
    /// Offered rates of the load curve in packets per second, the same for
    /// every variant (instead of --load-curve's steps up to each variant's
    /// maximum).
    #[arg(long, value_delimiter = ',', value_name = "PPS[,PPS...]")]
    pub load_rates: Vec<f64>,
    /// Measured seconds per offered-rate step or search trial.
    #[arg(long, default_value_t = 2.0)]
    pub trial_seconds: f64,
    #[command(flatten)]
    #[serde(flatten)]
    pub profiling: ProfileArgs,
    /// Write every sample, the summary, ratios and the machine as JSON
    /// (input of `xnf lab report`).
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    pub json: Option<PathBuf>,
    /// Write every sample as CSV (one row per sample, machine included).
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    pub csv: Option<PathBuf>,
}

/// The CPUs an experiment runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cpus {
    /// The generator's CPU with one queue (more queues use CPUs 0..queues).
    pub gen: usize,
    /// CPUs this machine has.
    pub count: usize,
}

impl Common {
    pub fn timing(&self) -> Timing {
        Timing { warmup: self.warmup, seconds: self.seconds, trial_seconds: self.trial_seconds }
    }

    /// What is measured of each variant besides full speed.
    pub fn plan(&self) -> measure::Plan {
        let profile = self.profiling.options();
        measure::Plan { load: measure::Load { steps: self.load_curve, pps: self.load_rates.clone(), shares: Vec::new() }, zero_loss: self.zero_loss, profile }
    }

    /// Checks the options, naming the flag at fault; returns the CPUs.
    pub fn validate(&self, ncpu: usize) -> Result<Cpus> {
        ensure!(self.runs >= 1, "--runs must be at least 1");
        ensure!(self.seconds > 0.0 && self.warmup >= 0.0, "--seconds must be positive and --warmup not negative");
        ensure!(self.trial_seconds > 0.0, "--trial-seconds must be positive");
        if let Some(tol) = self.zero_loss {
            ensure!((0.0..100.0).contains(&tol), "--zero-loss tolerance must be in [0, 100) percent");
        }
        ensure!(self.load_curve <= 50, "--load-curve: at most 50 steps");
        ensure!(self.load_rates.is_empty() || self.load_curve == 0, "--load-rates and --load-curve: give one of them");
        ensure!(self.load_rates.iter().all(|r| (1.0..=1e9).contains(r)), "--load-rates: rates are packets per second, 1..=1e9");
        ensure!(self.load_rates.len() <= 50, "--load-rates: at most 50 rates");
        self.profiling.check()?;
        let gen = self.cpu.unwrap_or(ncpu.saturating_sub(1));
        ensure!(gen < ncpu, "--cpu {gen} does not exist (this machine has {ncpu})");
        self.dut_cpu.place(&[gen], ncpu)?;
        knobs::check(&self.nic)?;
        Ok(Cpus { gen, count: ncpu })
    }

    /// The options as the results record them: these and the experiment's own.
    fn record(&self, cpus: Cpus, own: &impl Serialize) -> serde_json::Value {
        let mut o = serde_json::json!({
            "topology": self.topology, "hosts": self.hosts, "runs": self.runs, "timing": self.timing(), "cpu": cpus.gen, "dut_cpu": self.dut_cpu, "nic": self.nic,
            "zero_loss": self.zero_loss, "load_steps": self.load_curve, "load_rates": self.load_rates, "profile": self.profiling.profile,
        });
        if let (Some(o), Ok(serde_json::Value::Object(own))) = (o.as_object_mut(), serde_json::to_value(own)) {
            o.extend(own);
        }
        o
    }

    /// Writes the files asked for.
    pub fn write(&self, r: &Results) -> Result<()> {
        if let Some(path) = &self.json {
            r.write_json(path)?;
            super::results::wrote(path);
        }
        if let Some(path) = &self.csv {
            let mut f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
            r.write_csv(&mut f)?;
            eprintln!("xnf lab: wrote {}", path.display());
        }
        Ok(())
    }
}

/// Held while it lives; dropping it tears down what it stands for.
pub trait Guard {}
impl<T> Guard for T {}

/// What an experiment sets up at a point, for all of that point's runs.
pub struct AtPoint<'a> {
    /// Dropped after the point's last run (routes, a ruleset).
    pub guard: Box<dyn Guard + 'a>,
    /// The generator's frames at this point (None: no generator; the
    /// variants measure themselves, [`Running::measure`]).
    pub traffic: Option<GenConfig>,
    /// Notes on the point (the driver prefixes its label).
    pub notes: Vec<String>,
}

impl AtPoint<'_> {
    /// Nothing to set up, only the generator's frames.
    pub fn traffic(traffic: GenConfig) -> AtPoint<'static> {
        AtPoint { guard: Box::new(()), traffic: Some(traffic), notes: Vec::new() }
    }

    /// `guard` held for the point's runs, no generator.
    pub fn without_traffic<'a>(guard: impl Guard + 'a) -> AtPoint<'a> {
        AtPoint { guard: Box::new(guard), traffic: None, notes: Vec::new() }
    }
}

/// What a variant's measurement is given.
pub struct Measuring<'m> {
    /// The point's generator, sending at full speed (None: the point has no traffic).
    pub gens: Option<&'m super::Generator>,
    pub labels: &'m Labels,
    pub timing: &'m Timing,
    pub plan: &'m measure::Plan,
    pub pg: &'m mut Progress,
    /// Where dut's ingress is served at this point ([`super::placement`]).
    pub placed: &'m Placed,
    /// The path's interfaces whose driver counters are read ([`Probe::nics`]).
    pub nics: &'m [(At<'m>, String)],
}

/// A variant set up at a point for one run.
pub trait Running {
    /// Where its frames are counted; may borrow from the set-up (only
    /// asked by the default [`measure`](Self::measure)).
    fn counters(&self) -> Result<Counters<'_>> {
        anyhow::bail!("this variant measures itself and has no counters")
    }

    /// Measures the variant: by default full speed, the load curve and the
    /// zero-loss search at its [`counters`](Self::counters). An experiment
    /// whose quantity is not a rate at a counter (a latency distribution,
    /// the window of a route change, the flows a change moved) measures
    /// here itself, returning its samples (maybe none) and keeping the
    /// rest for [`Experiment::finish`].
    fn measure(&self, m: Measuring) -> Result<measure::Measured> {
        let gens = m.gens.context("the point has no traffic to measure this variant's counters with")?;
        let probe = Probe { gens, counters: self.counters()?, placed: m.placed, nics: m.nics };
        measure::variant(&probe, m.labels, m.timing, m.plan, m.pg)
    }

    /// Called once the generator has stopped, with the run's samples (the
    /// full-speed one first): checks that refuse the run, teardown that can
    /// fail. Dropping the set-up tears it down too, on errors.
    fn finish(self: Box<Self>, _samples: &[Sample]) -> Result<()> {
        Ok(())
    }
}

/// A variant as the driver runs it: set up once per run, named in the
/// results. A clap value enum names its variants as the command line does
/// ([`variant_name`]); the router's also has peers, named at run time.
pub trait VariantName: Clone {
    fn name(&self) -> String;
}

/// An experiment as the driver runs it.
pub trait Experiment: Serialize {
    type Variant: VariantName;

    /// The results' `experiment`.
    const NAME: &'static str;

    /// Whether it runs across hosts (`--hosts`): its steps on the
    /// generator's and the sink's ends go through what the built topology
    /// reads there ([`BuiltTopology::start_generators`],
    /// [`BuiltTopology::received`]), not through their namespaces.
    const ACROSS_HOSTS: bool = false;

    /// The parameters of its points, in the order of labels and JSON.
    fn params(&self) -> Vec<Param>;

    /// The values it sweeps, slowest-changing first; the points are their
    /// product. A parameter with one value is still recorded in every point.
    fn sweep(&self) -> Vec<(&'static str, Vec<Value>)>;

    /// The variants to compare, in the order of the first run.
    fn variants(&self) -> Vec<Self::Variant>;

    /// (numerator, denominator) variant names of the ratios it reports.
    fn ratios(&self) -> Vec<(&str, &str)>;

    /// Checks its own options before anything is built.
    fn check(&self, cpus: Cpus) -> Result<()>;

    /// What is measured of each variant besides full speed: the common
    /// options' plan, or the experiment's own (refusing common options it
    /// does not take).
    fn plan(&self, common: measure::Plan) -> Result<measure::Plan> {
        Ok(common)
    }

    /// Planned seconds of one variant's measurement at one point and run,
    /// for the progress bar.
    fn planned_seconds(&self, t: &Timing, plan: &measure::Plan) -> f64 {
        measure::planned_seconds(t, plan)
    }

    /// Whether the driver serves dut's ingress where `--dut-cpu` says at
    /// points with the driver's generator: the rate experiments (router,
    /// actions, chain, lb) say yes. The others keep the kernel's
    /// placement: they place their own threads (the filter's victim, the
    /// stack's co-runner, a latency probe's CPU) or count every frame lost
    /// as the disruption they measure, which a generator outrunning dut
    /// would swamp.
    fn places_dut(&self) -> bool {
        false
    }

    /// Changes the topology before it is built.
    fn adapt(&self, _spec: &mut TopologySpec) -> Result<()> {
        Ok(())
    }

    /// After every build of the topology (the first, and each change of queues).
    fn built(&mut self, _t: &mut BuiltTopology, _pg: &Progress) -> Result<()> {
        Ok(())
    }

    /// What is set up at `p` for all its runs, and the generator's frames.
    fn at_point<'a>(&'a self, t: &'a BuiltTopology, p: &Point, _pg: &Progress) -> Result<AtPoint<'a>> {
        Ok(AtPoint::traffic(measure::udp_traffic(t, p)?))
    }

    /// `v` set up at `p` for one run.
    fn set_up<'a>(&'a self, t: &'a BuiltTopology, p: &Point, v: Self::Variant, cpus: Cpus, pg: &Progress) -> Result<Box<dyn Running + 'a>>;

    /// After everything is measured and the topology removed: notes and
    /// details for the results.
    fn finish(&mut self, _cpus: Cpus, _res: &mut Results) -> Result<()> {
        Ok(())
    }

    /// Anything it prints after the common tables.
    fn print(&self, _r: &Results) {}
}

/// A variant's name: the command line's (`dut-drop`, `xnf-linux-nf`).
pub fn variant_name<V: ValueEnum>(v: &V) -> String {
    v.to_possible_value().map(|p| p.get_name().to_string()).unwrap_or_default()
}

/// The variants in the order to measure them in `run`: reversed on every
/// other run, so drift over time favours no variant.
pub fn alternated<V: Clone>(variants: &[V], run: u32) -> Vec<V> {
    let mut order = variants.to_vec();
    if run % 2 == 1 {
        order.reverse();
    }
    order
}

/// The queues (= generator CPUs) at `p`: its `queues`, else 1.
fn queues_of(p: &Point) -> Result<u32> {
    if p.get("queues").is_some() {
        p.u32("queues")
    } else {
        Ok(1)
    }
}

/// The points of `e`: the product of its sweeps.
pub fn points<E: Experiment>(e: &E) -> Vec<Point> {
    params::product(&e.params(), &e.sweep())
}

/// An experiment's topology: loaded (built-in name or TOML file) and
/// checked to have the roles experiments measure by, with its hosts
/// connected (`--hosts`; refused for an experiment that does not run
/// across hosts), after removing what killed runs left behind.
fn topology(c: &Common, across: (&str, bool), lines: &mut dyn FnMut(&str)) -> Result<(TopologySpec, Hosts)> {
    let spec = TopologySpec::load(&c.topology)?;
    spec.roles.as_ref().context("the topology needs a [roles] table (gen, dut_in, dut_out, sink)")?;
    let hosts = match &c.hosts {
        Some(path) => {
            ensure!(across.1, "--hosts: xnf lab {} does not run across hosts yet (router, actions and chain do)", across.0);
            let file = HostsFile::load(path)?;
            file.check(&spec).with_context(|| format!("{}: does not fit topology `{}`", path.display(), c.topology))?;
            Hosts::connect(&file, lines)?
        }
        None => Hosts::default(),
    };
    super::remove_stale(lines)?;
    Ok((spec, hosts))
}

/// Runs `e` with the common options `c`: points × runs × alternated
/// variants, each measured at full speed and, when asked, along the load
/// curve and by the zero-loss search. `lines` gets what is said before the
/// progress view starts.
pub fn run<E: Experiment>(e: &mut E, c: &Common, lines: &mut dyn FnMut(&str)) -> Result<Results> {
    let cpus = c.validate(super::cpu::sample()?.len())?;
    e.check(cpus)?;
    let variants = e.variants();
    ensure!(!variants.is_empty(), "--variants: name at least one");
    let (mut spec, hosts) = topology(c, (E::NAME, E::ACROSS_HOSTS), lines)?;
    e.adapt(&mut spec)?;
    let points = knobs::sweep(points(e), &c.nic);
    let timing = c.timing();
    let plan = e.plan(c.plan())?;
    let per_variant = e.planned_seconds(&timing, &plan);
    let mut pg = Progress::new(per_variant * (points.len() * variants.len() * c.runs as usize) as f64);
    let mut res = Results::new(E::NAME, &c.record(cpus, e), e.params().into_iter().chain(c.nic.iter().map(Knob::param)).collect());
    let mut zl = Vec::new();
    let mut built: Option<(u32, BuiltTopology)> = None;
    for (pi, point) in points.iter().enumerate() {
        let queues = queues_of(point)?;
        if built.as_ref().is_none_or(|(q, _)| *q != queues) {
            drop(built.take());
            let mut s = spec.clone();
            s.set_queues(queues);
            pg.message(&format!("building topology `{}` with {queues} queue(s)", c.topology));
            let mut t = BuiltTopology::build_across(&s, &hosts, &mut |m| pg.message(m))?;
            e.built(&mut t, &pg)?;
            res.machine.nics = nics_of(&t)?;
            built = Some((queues, t));
        }
        let t = &built.as_ref().expect("built above").1;
        let label = res.label(point);
        let Some(_knobs) = set_knobs(&c.nic, t, point, &label, &mut res, &mut pg)? else { continue };
        let at = e.at_point(t, point, &pg)?;
        res.notes.extend(at.notes.iter().map(|n| format!("{label}: {n}")));
        let gen_ep = &t.roles()?.gen;
        let nics = path_nics(t)?;
        let gen_cpus = measure::gen_cpus(cpus.gen, queues);
        let placement = match at.traffic.is_some() && e.places_dut() {
            true => c.dut_cpu.place(&gen_cpus, cpus.count)?,
            false => Placement::Shared { gen: gen_cpus.clone() },
        };
        if at.traffic.is_some() {
            res.notes.push(format!("{label}: {}", placement.describe(t.host_of(gen_ep)?.map(|h| h.name.as_str()))));
        }
        for run in 0..c.runs {
            for v in alternated(&variants, run) {
                let l = Labels { variant: v.name(), point: point.clone(), run };
                pg.set_prefix(format!("point {}/{} ({label}), run {}/{}, {}", pi + 1, points.len(), run + 1, c.runs, l.variant));
                let running = match e.set_up(t, point, v, cpus, &pg) {
                    Err(err) if err.downcast_ref::<Unavailable>().is_some() => {
                        let line = format!("{}: {err}: its runs skipped", l.variant);
                        if !res.notes.contains(&line) {
                            pg.message(&line);
                            res.notes.push(line);
                        }
                        pg.advance(per_variant);
                        continue;
                    }
                    r => r?,
                };
                let placed = placement.apply(t).with_context(|| format!("{}: serving dut's ingress on its own CPU (--dut-cpu shared does not)", l.variant))?;
                if placed.gro_for_napi && run == 0 {
                    res.notes.push(format!("{label}: {}: GRO turned on at dut's ingress to give the veth NAPI (no native XDP program there)", l.variant));
                }
                let gens = at.traffic.as_ref().map(|tr| t.start_generators(gen_ep, tr, &gen_cpus, 0)).transpose()?;
                let measured =
                    running.measure(Measuring { gens: gens.as_ref(), labels: &l, timing: &timing, plan: &plan, pg: &mut pg, placed: &placed, nics: &nics })?;
                if let Some(gens) = gens {
                    // Paused before stopping: a live-frame call sized while
                    // paused (cheap tries) would otherwise run its many
                    // tries at full speed before the stop flag is seen,
                    // tens of seconds on a slow path.
                    gens.set_rate(measure::PAUSED)?;
                    gens.stop()?;
                }
                running.finish(&measured.samples).with_context(|| l.variant.clone())?;
                measure::record(&mut res, &mut zl, &l, measured, c.profiling.flame.as_deref())?;
                pg.advance(per_variant);
            }
        }
        drop(at);
    }
    drop(built);
    pg.finish();
    res.summarize(&zl);
    for (n, d) in e.ratios() {
        res.add_ratios(n, d);
    }
    e.finish(cpus, &mut res)?;
    Ok(res)
}

/// The path's interfaces, each once: gen's, dut's two, the sink's.
fn path_nics(t: &BuiltTopology) -> Result<Vec<(At<'_>, String)>> {
    Ok(path_ends(t)?.into_iter().map(|(_, at, dev)| (at, dev)).collect())
}

/// The path's interfaces by role, each once (a role sharing another's
/// interface, as the lb's tx path's sink shares gen's, keeps the first).
fn path_ends(t: &BuiltTopology) -> Result<Vec<(&'static str, At<'_>, String)>> {
    let r = t.roles()?;
    let mut out: Vec<(&'static str, &str, At, String)> = Vec::new();
    for (role, ep) in [("gen", &r.gen), ("dut_in", &r.dut_in), ("dut_out", &r.dut_out), ("sink", &r.sink)] {
        let ns = ep.split(':').next().unwrap_or_default();
        let (at, dev) = t.at(ep)?;
        if !out.iter().any(|(_, n, _, d)| *n == ns && *d == dev) {
            out.push((role, ns, at, dev));
        }
    }
    Ok(out.into_iter().map(|(role, _, at, dev)| (role, at, dev)).collect())
}

/// What the path's interfaces are: driver, firmware, bus, NUMA node.
fn nics_of(t: &BuiltTopology) -> Result<Vec<super::results::Nic>> {
    path_ends(t)?.into_iter().map(|(role, at, dev)| at.nic(role, &dev)).collect()
}

/// The point's knobs set on dut's interfaces; None, said in one line and
/// noted, when one is missing on this driver or machine (the point is skipped).
fn set_knobs(knobs: &[Knob], t: &BuiltTopology, p: &Point, label: &str, res: &mut Results, pg: &mut Progress) -> Result<Option<knobs::Applied>> {
    if knobs.is_empty() {
        return Ok(Some(knobs::Applied::default()));
    }
    let roles = t.roles()?;
    let (ns, din) = t.endpoint(&roles.dut_in)?;
    let (_, dout) = t.endpoint(&roles.dut_out)?;
    let devs = if din == dout { vec![din] } else { vec![din, dout] };
    match knobs::apply(knobs, p, ns, &devs) {
        Ok(a) => Ok(Some(a)),
        Err(e) => match e.downcast_ref::<Unavailable>() {
            Some(skip) => {
                // Once per knob the driver lacks, not once per point.
                let line = format!("{skip}: every point with it skipped (first: {label})");
                if !res.notes.iter().any(|n| n.starts_with(&format!("{skip}: "))) {
                    pg.message(&line);
                    res.notes.push(line);
                }
                Ok(None)
            }
            None => Err(e.context(format!("setting --nic knobs at {label}"))),
        },
    }
}

/// Options of type `T` parsed from `args` as the command line would parse
/// them (for the experiments' unit tests).
#[cfg(test)]
pub fn parse_options<T: Args>(args: &[&str]) -> Result<T, clap::Error> {
    #[derive(clap::Parser)]
    struct Cli<T: Args> {
        #[command(flatten)]
        options: T,
    }
    <Cli<T> as clap::Parser>::try_parse_from(std::iter::once("xnf-lab").chain(args.iter().copied())).map(|c| c.options)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_alternate_their_order_between_runs() {
        assert_eq!(alternated(&["a", "b", "c"], 0), ["a", "b", "c"]);
        assert_eq!(alternated(&["a", "b", "c"], 1), ["c", "b", "a"]);
        assert_eq!(alternated(&["a", "b", "c"], 2), ["a", "b", "c"]);
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
    enum V {
        Kernel,
        DutDrop,
    }

    impl VariantName for V {
        fn name(&self) -> String {
            variant_name(self)
        }
    }

    /// An experiment of nothing but its sweep.
    #[derive(Serialize)]
    struct Sweep;

    impl Experiment for Sweep {
        type Variant = V;
        const NAME: &'static str = "sweep";
        fn params(&self) -> Vec<Param> {
            vec![params::size(), params::flows(), params::nfs()]
        }
        fn sweep(&self) -> Vec<(&'static str, Vec<Value>)> {
            vec![("nfs", params::values(&[1u32, 2])), ("size", params::values(&[64u32, 0])), ("flows", params::values(&[4u32]))]
        }
        fn variants(&self) -> Vec<V> {
            vec![V::Kernel, V::DutDrop]
        }
        fn ratios(&self) -> Vec<(&'static str, &'static str)> {
            Vec::new()
        }
        fn check(&self, _: Cpus) -> Result<()> {
            Ok(())
        }
        fn set_up<'a>(&'a self, _: &'a BuiltTopology, _: &Point, _: V, _: Cpus, _: &Progress) -> Result<Box<dyn Running + 'a>> {
            anyhow::bail!("not measured")
        }
    }

    #[test]
    fn points_are_the_product_of_the_sweeps_labelled_by_the_parameters() {
        let p = points(&Sweep);
        let labels: Vec<String> = p.iter().map(|p| params::label(&Sweep.params(), p)).collect();
        assert_eq!(labels, ["64 B, 4 flows, 1 NF", "IMIX, 4 flows, 1 NF", "64 B, 4 flows, 2 NFs", "IMIX, 4 flows, 2 NFs"]);
        assert_eq!(queues_of(&p[0]).unwrap(), 1, "no queues: one");
        assert_eq!(queues_of(&p[0].clone().with("queues", 2u32)).unwrap(), 2);
    }

    #[test]
    fn variant_names_are_the_command_lines() {
        assert_eq!(variant_name(&V::DutDrop), "dut-drop");
    }

    fn common(args: &[&str]) -> Common {
        parse_options(args).unwrap()
    }

    #[test]
    fn common_options_are_checked_once_naming_the_flag() {
        assert_eq!(common(&[]).validate(2).unwrap(), Cpus { gen: 1, count: 2 });
        assert_eq!(common(&["--cpu", "0"]).validate(2).unwrap().gen, 0);
        for (args, want) in [
            (&["--runs", "0"][..], "--runs"),
            (&["--seconds", "0"][..], "--seconds"),
            (&["--trial-seconds", "0"][..], "--trial-seconds"),
            (&["--zero-loss", "100"][..], "--zero-loss"),
            (&["--load-curve", "51"][..], "--load-curve"),
            (&["--cpu", "2"][..], "--cpu 2"),
        ] {
            let e = format!("{:#}", common(args).validate(2).unwrap_err());
            assert!(e.contains(want), "{args:?}: {e}");
        }
    }

    #[test]
    fn the_results_record_both_kinds_of_options() {
        #[derive(Serialize)]
        struct Own {
            sizes: Vec<u32>,
        }
        let o = common(&["--load-curve"]).record(Cpus { gen: 1, count: 2 }, &Own { sizes: vec![64] });
        assert_eq!((o["load_steps"].as_u64(), o["cpu"].as_u64(), o["sizes"][0].as_u64()), (Some(10), Some(1), Some(64)));
        assert_eq!(o["timing"]["seconds"].as_f64(), Some(5.0));
    }
}
