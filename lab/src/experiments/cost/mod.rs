//! `xnf lab cost`: a program's own cost per frame, by `BPF_PROG_TEST_RUN`
//! (issue 39). Rates through veths fall into regimes that differ from
//! machine to machine (a ratio of xnf's filter to xdp-filter changed sign
//! between two of this project's machines); the time a program takes over
//! one frame does not, so it compares filters on any machine.
//!
//! Each variant is attached for real, as a user attaches it, to dut's
//! ingress veth (`--topology`, default the built-in line): `empty` (the
//! lab's raw-verdict program), `xnf` (`xnf filter` through its library,
//! its rules applied), `xdp-filter` (xdp-tools' binary, its ports added).
//! Then the program attached to that interface is found by asking the
//! kernel ([`testrun::attached`]), opened by its id and run over one fixed
//! frame `--repeat` times (by default sized to about half a second) on one
//! CPU (`--cpu`, default the last); the kernel's mean ns per run is the
//! figure. A first, shorter call warms caches and sizes the measured one;
//! both must return the frame's verdict (XDP_DROP for the flood, XDP_PASS
//! for the passed frame), or the run fails: the cost of a program that did
//! not do the job is not the cost asked for.
//!
//! On the lab's one driver ([`crate::engine::driver`]): the points are
//! `--rules` × `--frame`, no generator; each variant is set up afresh per
//! run, variants alternated (reversed every other run), and measures
//! itself ([`Running::measure`]): one sample per call, `ns_per_packet` the
//! kernel's ns, `mpps` its inverse (the rate of the program alone). With
//! `xnf`, the filter stage alone (`xnf-stage`, the stage the entry
//! tail-calls) is measured in the same set-up. Medians, spreads and the
//! differences between variants are in [`summary`] (the results'
//! `details`, the terminal, `xnf lab report`).

pub mod summary;

use std::cell::RefCell;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use serde::Serialize;
use xnf_netns::netlink::link_by_name;
use xnf_netns::Netns;

use super::filter::flood::Flood;
use super::filter::variants::{self as filter_variants, xdp_filter_binary};
use crate::engine::driver::{self, variant_name, AtPoint, Cpus, Experiment, Measuring, Running, VariantName};
use crate::engine::eventargs::{EventArgs, EventOptions};
use crate::engine::measure::{Measured, Plan, Timing};
use crate::engine::params::{self, Axis, Param, Point, Value};
use crate::engine::progress::Progress;
use crate::engine::results::Results;
use crate::engine::testrun::{self, Program, TestRun, Verdict, XdpContext};
use crate::engine::topology::{BuiltTopology, TopologySpec};
use crate::engine::{ActionKind, LabAttachment, NfGuard};

/// The flood's UDP port: the rule that drops it is the last of the set.
pub const FLOOD_PORT: u16 = 9;
/// The passed frame's UDP port: no rule takes it (the rules' other ports
/// start at 10000), so every rule is looked at and the default passes it.
pub const PASS_PORT: u16 = 7;
/// Rules at most without the filter: each a UDP port from 10000 up.
const MAX_PORT_RULES: u32 = 50_000;
/// `--rules`' default, before the filter's limit.
const DEFAULT_RULES: [u32; 4] = [1, 10, 100, 1000];
/// How long a measured call takes unless `--repeat` says.
const CALL: Duration = Duration::from_millis(500);
/// Runs of the first, unmeasured call (and the least of a measured one).
const WARM_UP: u32 = 100_000;
/// The name of the filter stage's samples, measured with `xnf`.
pub const XNF_STAGE: &str = "xnf-stage";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// The lab's raw-verdict program, returning the frame's verdict after
    /// one per-CPU counter: the floor of a test run.
    Empty,
    /// `xnf filter` with the rules applied: the interface's entry program,
    /// which tail-calls the filter stage (and `xnf-stage`, that stage alone).
    Xnf,
    /// xdp-tools' xdp-filter (`--mode native --features udp`), the rules'
    /// ports in its port bitmap.
    XdpFilter,
}

impl VariantName for Variant {
    fn name(&self) -> String {
        variant_name(self)
    }
}

/// The frame every run is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Frame {
    /// 64-byte UDP from 198.19.0.1 to the victim's port 9, as `xnf lab
    /// filter`'s flood: the last rule drops it.
    Flood,
    /// The same to port 7, which no rule takes: passed by the default.
    Pass,
}

impl Frame {
    fn port(self) -> u16 {
        match self {
            Frame::Flood => FLOOD_PORT,
            Frame::Pass => PASS_PORT,
        }
    }

    /// The verdict every variant must return for it.
    pub fn verdict(self) -> Verdict {
        match self {
            Frame::Flood => Verdict::Drop,
            Frame::Pass => Verdict::Pass,
        }
    }

    fn of(p: &Point) -> Result<Frame> {
        match p.get("frame") {
            Some(Value::Text(t)) => <Frame as clap::ValueEnum>::from_str(t, false).map_err(anyhow::Error::msg),
            v => bail!("the point has no frame (it has {v:?})"),
        }
    }
}

/// `xnf lab cost`: its own options, and the calls it measured.
#[derive(Args)]
pub struct Cost {
    /// Variants to compare [default: empty,xnf, and xdp-filter when
    /// scripts/peers.sh has built it].
    #[arg(long, value_enum, value_delimiter = ',')]
    pub variants: Option<Vec<Variant>>,
    /// Rules in the set (a list sweeps): N-1 rules dropping UDP to ports
    /// the frame does not have (10000 up), then the one dropping UDP to
    /// port 9; xdp-filter gets the same N ports [default: 1,10,100,1000,
    /// those above the filter's limit replaced by the limit].
    #[arg(long, value_delimiter = ',', value_name = "N[,N...]")]
    pub rules: Option<Vec<u32>>,
    /// Frames (a list sweeps): flood (dropped by the last rule), pass (no
    /// rule takes it).
    #[arg(long = "frame", value_enum, value_delimiter = ',', default_value = "flood")]
    pub frames: Vec<Frame>,
    /// Runs per measured test-run call [default: as many as take about
    /// 0.5 s, from a first call of 100,000].
    #[arg(long, value_name = "N")]
    pub repeat: Option<u32>,
    /// xdp-filter's binary [default: $XNF_PEERS/sbin/xdp-filter, XNF_PEERS
    /// defaulting to /opt/xnf/peers, where scripts/peers.sh builds it].
    #[arg(long, value_name = "PATH")]
    pub xdp_filter: Option<PathBuf>,
    /// Whether the notes on the defaults were printed.
    #[arg(skip)]
    told: bool,
    /// Every measured call, for the results' details.
    #[arg(skip)]
    calls: RefCell<Vec<summary::Call>>,
}

/// `xnf lab cost`'s command line: the driver's common options (those it
/// has no use for hidden and refused) and its own.
pub type CostArgs = EventArgs<Cost>;

impl EventOptions for Cost {
    const RUNS: (&'static str, &'static str, &'static str, u32, &'static str) =
        ("runs", "N", "5", 1000, "Calls per variant and point, each variant attached afresh; variants alternate run by run");
    /// (--zero-loss, the load curve and --profile are refused by [`Cost::plan`].)
    const UNUSED: &'static [(&'static str, &'static str, &'static str)] = &[
        ("seconds", "--seconds", "cost runs programs by test run, not intervals of traffic (see --repeat)"),
        ("warmup", "--warmup", "cost runs programs by test run, not intervals of traffic (a shorter call warms each up)"),
        ("trial_seconds", "--trial-seconds", "cost runs programs by test run, not intervals of traffic"),
    ];
    const OUTPUTS: (&'static str, Option<&'static str>) = (
        "Write the results as JSON, every call in its details.calls (input of `xnf lab report`)",
        Some("Write every call as CSV (one row per call: ns_per_packet is the kernel's ns per run)"),
    );
    const SHOWN: &'static [(&'static str, &'static str)] = &[("cpu", "CPU the test runs run on [default: the last one]")];
}

pub fn run(mut a: CostArgs) -> Result<()> {
    a.refuse()?;
    let r = driver::run(&mut a.experiment, &a.common, &mut |line| eprintln!("xnf lab: {line}"))?;
    a.experiment.print(&r);
    a.common.write(&r)
}

/// The options as resolved: variants, rule counts, and why the defaults
/// differ from the documented ones, if they do.
struct Resolved {
    variants: Vec<Variant>,
    rules: Vec<u32>,
    notes: Vec<String>,
}

impl Cost {
    fn resolve(&self) -> Resolved {
        let mut notes = Vec::new();
        let variants = self.variants.clone().unwrap_or_else(|| {
            let mut v = vec![Variant::Empty, Variant::Xnf];
            match xdp_filter_binary(self.xdp_filter.as_deref()) {
                Ok(_) => v.push(Variant::XdpFilter),
                Err(e) => notes.push(format!("xdp-filter left out of the default variants: {e}")),
            }
            v
        });
        let limit = xnf_filter::program::MAX_RULES;
        let rules = self.rules.clone().unwrap_or_else(|| {
            let mut r: Vec<u32> = DEFAULT_RULES.to_vec();
            if variants.contains(&Variant::Xnf) && r.iter().any(|&n| n > limit) {
                let over: Vec<String> = r.iter().filter(|&&n| n > limit).map(u32::to_string).collect();
                r.retain(|&n| n <= limit);
                r.push(limit);
                notes.push(format!(
                    "--rules: {} left out of the default: this build's filter takes at most {limit} rules; {limit} measured instead",
                    over.join(", ")
                ));
            }
            r
        });
        Resolved { variants, rules, notes }
    }
}

/// The rule set's size, as a parameter of the points.
fn rules_param() -> Param {
    let mut p = Param::plain("rules", &1u32.into());
    p.title = "rule-set size".into();
    p.axis = "rules in the set (log scale)".into();
    p.scale = Axis::Log;
    p.unit = ("rule".into(), "rules".into());
    p
}

/// The frame, as a parameter of the points.
fn frame_param() -> Param {
    let mut p = Param::plain("frame", &Value::from("flood"));
    p.title = "frame".into();
    p.names = vec![(Value::from("flood"), "flood frame (dropped)".into()), (Value::from("pass"), "passed frame".into())];
    p
}

impl Experiment for Cost {
    type Variant = Variant;
    const NAME: &'static str = "cost";

    fn params(&self) -> Vec<Param> {
        vec![rules_param(), frame_param()]
    }

    fn sweep(&self) -> Vec<(&'static str, Vec<Value>)> {
        let frames = self.frames.iter().map(|f| Value::from(variant_name(f).as_str())).collect();
        vec![("frame", frames), ("rules", params::values(&self.resolve().rules))]
    }

    fn variants(&self) -> Vec<Variant> {
        self.resolve().variants
    }

    /// Rates are not what it compares: its differences in ns are its own
    /// ([`summary::differences`]).
    fn ratios(&self) -> Vec<(&str, &str)> {
        Vec::new()
    }

    fn check(&self, _: Cpus) -> Result<()> {
        let r = self.resolve();
        for (i, v) in r.variants.iter().enumerate() {
            ensure!(!r.variants[..i].contains(v), "--variants: {} named twice", variant_name(v));
        }
        ensure!(!r.rules.is_empty(), "--rules: give at least one count");
        let limit = xnf_filter::program::MAX_RULES;
        for &n in &r.rules {
            ensure!((1..=MAX_PORT_RULES).contains(&n), "--rules {n}: 1 to {MAX_PORT_RULES} (one UDP port each)");
            ensure!(!r.variants.contains(&Variant::Xnf) || n <= limit, "--rules {n}: this build's xnf filter takes at most {limit} rules");
        }
        for (i, f) in self.frames.iter().enumerate() {
            ensure!(!self.frames[..i].contains(f), "--frame: {} named twice", variant_name(f));
        }
        if let Some(n) = self.repeat {
            ensure!((1..=i32::MAX as u32).contains(&n), "--repeat {n}: 1 to {}", i32::MAX);
        }
        if r.variants.contains(&Variant::XdpFilter) {
            xdp_filter_binary(self.xdp_filter.as_deref())?;
        }
        Ok(())
    }

    /// Nothing of the driver's own measurement: the common options for it are refused.
    fn plan(&self, common: Plan) -> Result<Plan> {
        ensure!(common.zero_loss.is_none(), "--zero-loss: cost measures no rates (xnf lab filter does)");
        ensure!(common.load.count() == 0, "--load-curve / --load-rates: cost offers no load: it runs programs by test run");
        ensure!(common.profile.is_none(), "--profile: cost profiles nothing (the test run is the measurement)");
        Ok(Plan::default())
    }

    /// A set-up, a warm-up call and the measured one (two with xnf).
    fn planned_seconds(&self, _: &Timing, _: &Plan) -> f64 {
        let call = self.repeat.map_or(CALL.as_secs_f64(), |n| n as f64 * 30e-9);
        0.3 + 1.5 * call
    }

    /// dut's ingress is the variants' alone: a function the topology puts
    /// there (the `pair`'s sink) is left out.
    fn adapt(&self, spec: &mut TopologySpec) -> Result<()> {
        let r = spec.roles.clone().context("--topology: cost needs a [roles] table (dut_in: where the variants attach)")?;
        let (ns, dev) = r.dut_in.split_once(':').with_context(|| format!("the role `{}` is no ns:dev", r.dut_in))?;
        for f in &mut spec.functions {
            if f.ns == ns {
                f.interfaces.retain(|d| d != dev);
            }
        }
        spec.functions.retain(|f| !f.interfaces.is_empty());
        Ok(())
    }

    fn built(&mut self, _: &mut BuiltTopology, pg: &Progress) -> Result<()> {
        if !self.told {
            for n in self.resolve().notes {
                pg.println(&n);
            }
        }
        self.told = true;
        Ok(())
    }

    /// No generator: the variants run their programs themselves.
    fn at_point<'a>(&'a self, _: &'a BuiltTopology, _: &Point, _: &Progress) -> Result<AtPoint<'a>> {
        Ok(AtPoint::without_traffic(()))
    }

    fn set_up<'a>(&'a self, t: &'a BuiltTopology, p: &Point, v: Variant, cpus: Cpus, _: &Progress) -> Result<Box<dyn Running + 'a>> {
        let roles = t.roles()?;
        let (dut, din) = t.endpoint(&roles.dut_in)?;
        let (_, dout) = t.endpoint(&roles.dut_out)?;
        let frame_kind = Frame::of(p)?;
        let rules = p.u32("rules")?;
        // The filter experiment's flood, its rule set sized to the point's.
        let flood = Flood::by_port(FLOOD_PORT, 1)?.with_rules(rules, PASS_PORT);
        let victim = t.addr(&roles.sink, false)?;
        let frame = Flood::by_port(frame_kind.port(), 1)?.traffic(t, victim)?.template;
        let on = match v {
            Variant::Empty => {
                let verdict = if frame_kind == Frame::Flood { ActionKind::Drop } else { ActionKind::Pass };
                On::Empty(LabAttachment::action(dut, &din, verdict, &dout, 0)?)
            }
            Variant::Xnf => On::Xnf(NfGuard::filter(dut, std::slice::from_ref(&din), &flood.xnf_rules(), "xnf lab cost's rules")?),
            // As `xnf lab filter` loads it: every port of the rule set in its bitmap.
            Variant::XdpFilter => {
                On::XdpFilter(Box::new(filter_variants::Setup::new(filter_variants::Variant::XdpFilter, dut, &din, &flood, self.xdp_filter.as_deref())?))
            }
        };
        Ok(Box::new(Set { exp: self, dut, dev: din, frame, frame_kind, variant: v, cpu: cpus.gen, _on: on }))
    }

    fn finish(&mut self, cpus: Cpus, res: &mut Results) -> Result<()> {
        summary::finish(res, &self.calls.borrow(), cpus.gen)?;
        res.notes.extend(self.resolve().notes);
        Ok(())
    }

    fn print(&self, r: &Results) {
        summary::print(r);
    }
}

/// A variant attached to dut's ingress; detached when dropped.
enum On<'a> {
    Empty(#[allow(dead_code)] LabAttachment),
    Xnf(#[allow(dead_code)] NfGuard),
    XdpFilter(#[allow(dead_code)] Box<filter_variants::Setup<'a>>),
}

/// A variant set up at a point for one run.
struct Set<'a> {
    exp: &'a Cost,
    dut: &'a Netns,
    dev: String,
    frame: Vec<u8>,
    frame_kind: Frame,
    variant: Variant,
    cpu: usize,
    _on: On<'a>,
}

impl Running for Set<'_> {
    /// The program attached to the interface (with xnf, the filter stage
    /// too) run by test run; a sample per program, each call kept for the
    /// details.
    fn measure(&self, m: Measuring) -> Result<Measured> {
        let l = m.labels;
        let (dev, frame, expect, cpu, repeat, xnf) =
            (self.dev.clone(), self.frame.clone(), self.frame_kind.verdict(), self.cpu, self.exp.repeat, self.variant == Variant::Xnf);
        m.pg.message(&format!("{}: test runs on CPU {cpu}", l.variant));
        let runs = self
            .dut
            .run(move || -> Result<Vec<(bool, Program, TestRun)>> {
                testrun::pin_thread(cpu)?;
                let ifindex = link_by_name(&dev)?.ifindex;
                let mut programs = vec![(false, Program::open(testrun::attached(ifindex)?)?)];
                if xnf {
                    // The program in the filter's slot, whatever it is named.
                    let stages = xnf_core::entry::info(ifindex).map(|e| e.stages).unwrap_or_default();
                    let (_, stage, _) = stages
                        .into_iter()
                        .find(|(s, ..)| *s == xnf_core::entry::Stage::Filter)
                        .with_context(|| format!("no filter stage on {dev}: is the filter attached there?"))?;
                    programs.push((true, Program::open(stage)?));
                }
                let ctx = XdpContext { ingress_ifindex: ifindex, rx_queue_index: 0 };
                programs.into_iter().map(|(stage, p)| measured(&p, &frame, ctx, expect, repeat).map(|r| (stage, p, r))).collect()
            })?
            .with_context(|| format!("{} at {}", l.variant, params::label(&self.exp.params(), &l.point)))?;
        let mut samples = Vec::new();
        for (stage, p, r) in runs {
            let variant = if stage { XNF_STAGE.to_string() } else { l.variant.clone() };
            let call = summary::Call {
                variant,
                point: l.point.clone(),
                run: l.run,
                prog_id: p.id,
                prog_name: p.name,
                verdict: r.verdict.name().into(),
                repeat: r.repeat,
                ns: r.ns,
                wall_s: r.wall.as_secs_f64(),
            };
            samples.push(call.sample());
            self.exp.calls.borrow_mut().push(call);
        }
        Ok(Measured { samples, zero_loss: None, profiled: Vec::new() })
    }
}

/// A warm-up call that sizes the measured one (unless `repeat` is given),
/// then the measured call; both must return `expect`.
fn measured(p: &Program, frame: &[u8], ctx: XdpContext, expect: Verdict, repeat: Option<u32>) -> Result<TestRun> {
    let check = |r: TestRun| -> Result<TestRun> {
        ensure!(
            r.verdict == expect,
            "program {} ({}) returned XDP_{} for the frame, not XDP_{}: the cost of a program that did not do the job is not the one asked for",
            p.id,
            p.name,
            r.verdict.name().to_uppercase(),
            expect.name().to_uppercase()
        );
        Ok(r)
    };
    let warm = check(p.run(frame, ctx, repeat.unwrap_or(WARM_UP).min(WARM_UP))?)?;
    let n = repeat.unwrap_or_else(|| testrun::sized(warm.ns, CALL, WARM_UP));
    let r = check(p.run(frame, ctx, n)?)?;
    ensure!(r.ns > 0, "program {} ({}): the kernel reported 0 ns per run", p.id, p.name);
    Ok(r)
}

impl Serialize for Cost {
    /// The options as resolved (the variants and rule counts measured).
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Recorded<'a> {
            variants: Vec<String>,
            rules: Vec<u32>,
            frames: &'a [Frame],
            repeat: Option<u32>,
            xdp_filter: Option<&'a std::path::Path>,
        }
        let r = self.resolve();
        Recorded {
            variants: r.variants.iter().map(VariantName::name).collect(),
            rules: r.rules,
            frames: &self.frames,
            repeat: self.repeat,
            xdp_filter: self.xdp_filter.as_deref(),
        }
        .serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::driver::parse_options;

    fn parse(a: &[&str]) -> CostArgs {
        parse_options::<CostArgs>(a).unwrap()
    }

    const CPUS: Cpus = Cpus { gen: 1, count: 2 };

    #[test]
    fn defaults_stay_within_the_filters_limit_and_given_counts_above_it_are_refused() {
        let limit = xnf_filter::program::MAX_RULES;
        let a = parse(&["--variants", "empty,xnf"]);
        let r = a.experiment.resolve();
        assert!(r.rules.iter().all(|&n| n <= limit) && r.rules.contains(&limit.min(1000)), "{:?}", r.rules);
        assert_eq!(r.notes.is_empty(), limit >= 1000, "{:?}", r.notes);
        assert_eq!(parse(&["--variants", "empty"]).experiment.resolve().rules, DEFAULT_RULES, "no filter, no limit");
        let over = (limit + 1).to_string();
        let e = parse(&["--variants", "xnf", "--rules", &over]).experiment.check(CPUS).unwrap_err().to_string();
        assert_eq!(e, format!("--rules {over}: this build's xnf filter takes at most {limit} rules"));
        assert!(parse(&["--variants", "empty", "--rules", &over]).experiment.check(CPUS).is_ok());
    }

    #[test]
    fn options_it_cannot_honour_are_refused_naming_the_flag() {
        for (args, want) in [(&["--seconds", "5"][..], "--seconds: "), (&["--warmup", "1"][..], "--warmup: "), (&["--runs", "0"][..], "--runs 0")] {
            let e = parse(args).refuse().unwrap_err().to_string();
            assert!(e.starts_with(want) && !e.contains('\n'), "{args:?}: {e}");
        }
        for (args, want) in [
            (&["--variants", "empty,empty"][..], "--variants: empty named twice"),
            (&["--variants", "empty", "--rules", "0"][..], "--rules 0"),
            (&["--variants", "empty", "--frame", "pass,pass"][..], "--frame: pass named twice"),
            (&["--variants", "empty", "--repeat", "0"][..], "--repeat 0"),
            (&["--variants", "xdp-filter", "--xdp-filter", "/nonexistent/xdp-filter"][..], "scripts/peers.sh"),
        ] {
            let e = parse(args).experiment.check(CPUS).unwrap_err().to_string();
            assert!(e.contains(want) && !e.contains('\n'), "{args:?}: {e}");
        }
        let e = parse(&[]).experiment;
        assert!(e.plan(Plan { zero_loss: Some(0.0), ..Default::default() }).unwrap_err().to_string().starts_with("--zero-loss"));
        assert_eq!(parse(&["--cpu", "0"]).common.cpu, Some(0), "--cpu is honoured: the test runs' CPU");
    }

    #[test]
    fn points_are_rule_counts_by_frame_labelled() {
        let a = parse(&["--variants", "empty", "--rules", "1,10", "--frame", "flood,pass"]);
        let labels: Vec<String> = driver::points(&a.experiment).iter().map(|p| params::label(&a.experiment.params(), p)).collect();
        assert_eq!(labels, ["1 rule, flood frame (dropped)", "10 rules, flood frame (dropped)", "1 rule, passed frame", "10 rules, passed frame"]);
        let p = &driver::points(&a.experiment)[3];
        assert_eq!((Frame::of(p).unwrap(), p.u32("rules").unwrap()), (Frame::Pass, 10));
        assert_eq!((Frame::Flood.verdict(), Frame::Pass.verdict()), (Verdict::Drop, Verdict::Pass));
    }

    #[test]
    fn the_rule_set_drops_the_flood_last_and_takes_neither_frames_port() {
        let f = Flood::by_port(FLOOD_PORT, 1).unwrap().with_rules(10, PASS_PORT);
        assert_eq!(f.other_ports.len(), 9);
        assert!(!f.other_ports.contains(&FLOOD_PORT) && !f.other_ports.contains(&PASS_PORT));
        let set = xnf_filter::rules::RuleSet::parse(&f.xnf_rules(), "test").unwrap();
        assert_eq!(set.rules.len(), 10);
    }
}
