//! `xnf lab fib-change`: how long after a route change frames still follow
//! the old decision — the invalidation window of `xnf router --fib cache`,
//! against full lookups and the kernel's own forwarding, with real
//! traffic. With `--change nexthop-mac`, how long traffic takes to reach a
//! next hop that changed its MAC without telling anyone (the kernel's
//! neighbour state machine, or nothing, finds it).
//!
//! A sender in gen streams UDP datagrams to sink, each stamped with its
//! send time (CLOCK_MONOTONIC, one clock for the whole machine). At T0 the
//! lab replaces the sink's /32 (/128) route on dut with one back out of
//! the ingress (a hairpin: those frames never reach the sink), through
//! netlink from its own thread, then restores it. The window is the send
//! time of the last datagram that still reached the sink, minus T0 (0 if
//! none did); stale frames are those datagrams.
//!
//! On the lab's one driver ([`crate::engine::driver`]): the topology is
//! the driver's (`--topology`, default `line`: its roles gen, dut_in,
//! dut_out and sink), the point starts the stamped stream instead of the
//! generator, and every variant measures itself ([`Running::measure`]):
//! one change per variant and run. `--changes` is the driver's `--runs`
//! (either name, default 20), so the variants alternate change by change
//! (the order reversed every other change) and each is attached afresh
//! for every change — no variant's changes bunch together in time, and no
//! change starts from what an earlier one left in a cache. The windows,
//! stale counts and recoveries are the results' `details.changes`.

use std::cell::RefCell;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};
use xnf_netns::{Netns, Offload};
use xnf_router::program::FibMode;

use super::latency::pingpong::now_ns;
use super::latency::stats::quantile;
use crate::engine::attach::router_options;
use crate::engine::driver::{self, variant_name, AtPoint, Cpus, Experiment, Measuring, Running};
use crate::engine::eventargs::{EventArgs, EventOptions};
use crate::engine::measure::{Measured, Plan, Timing};
use crate::engine::params::{self, Param, Point, Value};
use crate::engine::peers::{self, Peer, PeerGuard};
use crate::engine::progress::Progress;
use crate::engine::results::Results;
use crate::engine::stream::Stream;
use crate::engine::topology::{BuiltTopology, FunctionKind, FunctionSpec, TopologySpec};
use crate::engine::NfGuard;

/// The stream's UDP port at the sink.
const PORT: u16 = 9999;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// The kernel forwards.
    Kernel,
    /// What `xnf router attach` attaches: the route cache, with its follower.
    Xnf,
    /// `xnf router attach --fib full`.
    XnfFull,
    /// xdp-tools' xdp-forward (`--fib-mode full`), as in `xnf lab router`.
    XdpForward,
}

impl Variant {
    /// How the router variants look routes up: `xnf` as `xnf router
    /// attach` does by default (the router's own default), `xnf-full` by
    /// the FIB for every packet.
    pub fn fib(self) -> Option<FibMode> {
        match self {
            Variant::Xnf => Some(FibMode::default()),
            Variant::XnfFull => Some(FibMode::Full),
            Variant::Kernel | Variant::XdpForward => None,
        }
    }
}

/// `--variants`' values ([`Variant`]), and the route cache's old name
/// refused in one line with its new one ([`super::router::renamed`]; an
/// old name whose new one is not a variant here is just not a variant).
#[derive(Clone)]
pub struct VariantParser;

impl clap::builder::TypedValueParser for VariantParser {
    type Value = Variant;

    fn parse_ref(&self, cmd: &clap::Command, arg: Option<&clap::Arg>, value: &std::ffi::OsStr) -> Result<Variant, clap::Error> {
        if let Some((new, refusal)) = value.to_str().and_then(super::router::renamed) {
            if <Variant as clap::ValueEnum>::from_str(new, false).is_ok() {
                return Err(clap::Error::raw(clap::error::ErrorKind::InvalidValue, refusal).with_cmd(cmd));
            }
        }
        clap::builder::EnumValueParser::<Variant>::new().parse_ref(cmd, arg, value)
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(<Variant as clap::ValueEnum>::value_variants().iter().filter_map(clap::ValueEnum::to_possible_value)))
    }
}

/// What changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Change {
    /// The sink's route on dut is replaced (a hairpin), then restored.
    Route,
    /// The sink takes another MAC and tells nobody; dut's entry for it is
    /// made STALE (what its reachable timer does after 30 s of traffic
    /// that only XDP forwards), then both are restored.
    NexthopMac,
}

/// `xnf lab fib-change`: its own options.
#[derive(Args, Serialize)]
pub struct FibChange {
    /// Variants, alternated change by change.
    #[arg(long, value_parser = VariantParser, value_delimiter = ',', default_value = "kernel,xnf,xnf-full")]
    pub variants: Vec<Variant>,
    /// What changes: the route, or the next hop's MAC.
    #[arg(long, value_enum, default_value = "route")]
    pub change: Change,
    /// With `--change nexthop-mac`: seconds to wait for traffic to reach
    /// the new MAC before the change counts as never followed.
    #[arg(long, default_value_t = 30)]
    pub timeout: u64,
    /// IPv6 instead of IPv4.
    #[arg(long)]
    pub ipv6: bool,
    /// Datagrams per second the sender offers at most (it sleeps between
    /// datagrams; the sleeps overshoot).
    #[arg(long, default_value_t = 20_000)]
    pub rate: u32,
    /// xdp-forward's binary (default: where scripts/peers.sh builds it).
    #[arg(long, value_name = "PATH")]
    pub xdp_forward: Option<PathBuf>,
    /// The point's stamped stream, gen -> sink through dut.
    #[arg(skip)]
    #[serde(skip)]
    stream: RefCell<Option<Stream>>,
    /// Every change measured, per variant in the order first measured.
    #[arg(skip)]
    #[serde(skip)]
    measured: RefCell<Vec<VariantResult>>,
}

/// `xnf lab fib-change`'s command line: the driver's common options, its
/// `--runs` named `--changes` (default 20), and the experiment's own.
pub type FibChangeArgs = EventArgs<FibChange>;

impl EventOptions for FibChange {
    const RUNS: (&'static str, &'static str, &'static str, u32, &'static str) =
        ("changes", "N", "20", 1000, "Changes per variant, one per run: the variants alternate change by change, each attached afresh");
    /// (--zero-loss, the load curve and --profile are refused by
    /// [`FibChange::plan`].)
    const UNUSED: &'static [(&'static str, &'static str, &'static str)] = &[
        ("seconds", "--seconds", "fib-change times route changes, not intervals of traffic"),
        ("warmup", "--warmup", "fib-change times route changes, not intervals of traffic (traffic flows before every change)"),
        ("trial_seconds", "--trial-seconds", "fib-change times route changes, not intervals of traffic"),
        ("cpu", "--cpu", "fib-change's sender is a paced socket thread, not the generator"),
        ("csv", "--csv", "fib-change has no samples; its changes are in --json's details"),
    ];
    const OUTPUTS: (&'static str, Option<&'static str>) = ("Write the results as JSON, the changes in its details.changes (input of `xnf lab report`)", None);
}

/// One variant's changes (the results' `details.changes`), in the order of
/// the runs.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct VariantResult {
    pub variant: String,
    /// Per change: µs from T0 to the send time of the last datagram that
    /// followed the old route (0: none did).
    pub windows_us: Vec<f64>,
    /// Per change: datagrams sent after T0 that reached the sink.
    pub stale: Vec<u64>,
    /// Per change: µs from the kernel's acknowledgement of the change to
    /// the send time of the last datagram that followed the old route (0:
    /// none sent after the acknowledgement did) — what a forwarder adds to
    /// the kernel's own change.
    pub after_ack_us: Vec<f64>,
    /// `--change nexthop-mac`, per change: µs from the MAC change to the
    /// send time of the first datagram that reached the new MAC (null:
    /// none within `--timeout`).
    pub recovered_us: Vec<Option<f64>>,
}

pub fn run(mut a: FibChangeArgs) -> Result<()> {
    a.refuse()?;
    let r = driver::run(&mut a.experiment, &a.common, &mut |line| eprintln!("xnf lab: {line}"))?;
    a.experiment.print(&r);
    a.common.write(&r)
}

/// What changes, as a parameter of the point.
fn change_param() -> Param {
    let mut p = Param::plain("change", &Value::from("route"));
    p.title = "what changes".into();
    p.names = vec![(Value::from("route"), "route change".into()), (Value::from("nexthop-mac"), "next hop's MAC change".into())];
    p
}

impl Experiment for FibChange {
    type Variant = Variant;
    const NAME: &'static str = "fib-change";

    fn params(&self) -> Vec<Param> {
        vec![change_param(), params::ipv6()]
    }

    fn sweep(&self) -> Vec<(&'static str, Vec<Value>)> {
        vec![("change", vec![Value::from(variant_name(&self.change).as_str())]), ("ipv6", params::values(&[self.ipv6]))]
    }

    fn variants(&self) -> Vec<Variant> {
        self.variants.clone()
    }

    fn ratios(&self) -> Vec<(&str, &str)> {
        Vec::new()
    }

    fn check(&self, _: Cpus) -> Result<()> {
        ensure!((1000..=1_000_000).contains(&self.rate), "--rate {}: 1000 to 1000000 datagrams/s", self.rate);
        ensure!((1..=600).contains(&self.timeout), "--timeout {}: 1 to 600 seconds", self.timeout);
        for (i, v) in self.variants.iter().enumerate() {
            ensure!(!self.variants[..i].contains(v), "--variants: {} named twice", variant_name(v));
        }
        if self.variants.contains(&Variant::XdpForward) {
            peers::xdp_forward_binary(self.xdp_forward.as_deref())?;
        }
        Ok(())
    }

    /// Nothing of the driver's own measurement: the common options for it are refused.
    fn plan(&self, common: Plan) -> Result<Plan> {
        ensure!(common.zero_loss.is_none(), "--zero-loss: fib-change measures no rates (xnf lab router does)");
        ensure!(common.load.count() == 0, "--load-curve / --load-rates: fib-change offers no load but its stream (--rate)");
        ensure!(common.profile.is_none(), "--profile: fib-change profiles nothing");
        Ok(Plan::default())
    }

    /// Attaching a variant and a route change take well under a second; a
    /// MAC change the kernel's timers (about 8 s), or `--timeout`.
    fn planned_seconds(&self, _: &Timing, _: &Plan) -> f64 {
        match self.change {
            Change::Route => 0.5,
            Change::NexthopMac => (self.timeout as f64).min(9.0),
        }
    }

    /// The stream's ends pass frames to their kernels (frames redirected
    /// into a veth need an XDP program on its peer too), and dut resolves
    /// the sink itself, as a router does: the topology's static entries on
    /// dut's egress are left out (a MAC change needs an entry the kernel
    /// manages, and every variant then starts the same).
    fn adapt(&self, spec: &mut TopologySpec) -> Result<()> {
        let r = spec.roles.clone().context("fib-change needs a topology with [roles]")?;
        let split = |ep: &str| ep.split_once(':').map(|(n, d)| (n.to_string(), d.to_string())).with_context(|| format!("the role `{ep}` is no ns:dev"));
        let ((gen, gen_if), (dut, _), (out_ns, out), (sink, sink_if)) = (split(&r.gen)?, split(&r.dut_in)?, split(&r.dut_out)?, split(&r.sink)?);
        ensure!(
            out_ns == dut && r.dut_in != r.dut_out && gen != dut && sink != dut,
            "--topology: fib-change needs a dut between gen and sink (roles dut_in and dut_out: two interfaces of a namespace of their own)"
        );
        for f in &mut spec.functions {
            f.interfaces.retain(|d| !((f.ns == gen && *d == gen_if) || (f.ns == sink && *d == sink_if)));
        }
        spec.functions.retain(|f| !f.interfaces.is_empty());
        for (ns, dev) in [(gen, gen_if), (sink, sink_if)] {
            spec.functions.push(FunctionSpec { ns, kind: FunctionKind::Pass, interfaces: vec![dev] });
        }
        spec.neighbours.retain(|n| !(n.ns == dut && n.dev == out));
        Ok(())
    }

    /// gen's datagrams carry whole checksums (a veth sender's partial ones
    /// would arrive bad through XDP).
    fn built(&mut self, t: &mut BuiltTopology, _: &Progress) -> Result<()> {
        let (gen, gen_if) = t.endpoint(&t.roles()?.gen.clone())?;
        gen.set_offload(&gen_if, Offload::TxChecksum, false)
    }

    /// The stamped stream, running for all of the point's changes.
    fn at_point<'a>(&'a self, t: &'a BuiltTopology, _: &Point, pg: &Progress) -> Result<AtPoint<'a>> {
        let l = Line::of(t, self.ipv6)?;
        pg.message(&format!("stamped stream gen -> sink, at most {} datagrams/s", self.rate));
        let to = SocketAddr::new(l.sink_ip, PORT);
        *self.stream.borrow_mut() = Some(Stream::start(l.gen, l.gen_ip, l.sink, to, vec![to], self.rate)?);
        Ok(AtPoint::without_traffic(Streaming(&self.stream)))
    }

    fn set_up<'a>(&'a self, t: &'a BuiltTopology, _: &Point, v: Variant, _: Cpus, _: &Progress) -> Result<Box<dyn Running + 'a>> {
        let line = Line::of(t, self.ipv6)?;
        let on = attach(&line, v, self.xdp_forward.as_deref())?;
        Ok(Box::new(Set { exp: self, line, variant: v, _on: on }))
    }

    fn finish(&mut self, _: Cpus, res: &mut Results) -> Result<()> {
        res.details.insert("changes".into(), serde_json::to_value(&*self.measured.borrow())?);
        res.notes.push(format!(
            "the sender sleeps between datagrams (at most {} per second; the sleeps overshoot): one gap is the resolution of a window",
            self.rate
        ));
        Ok(())
    }

    fn print(&self, r: &Results) {
        let rows: Vec<VariantResult> = r.details.get("changes").and_then(|v| serde_json::from_value(v.clone()).ok()).unwrap_or_default();
        match self.change {
            Change::Route => print_table(&rows, self.rate),
            Change::NexthopMac => print_mac_table(&rows, self.rate, self.timeout),
        }
        for n in &r.notes {
            println!("note: {n}");
        }
    }
}

/// Stops the point's stream when dropped.
struct Streaming<'a>(&'a RefCell<Option<Stream>>);

impl Drop for Streaming<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.0.borrow_mut().take() {
            s.stop();
        }
    }
}

/// The topology's roles as fib-change uses them.
struct Line<'a> {
    gen: &'a Netns,
    dut: &'a Netns,
    sink: &'a Netns,
    /// dut's ingress (from gen) and egress (to the sink).
    din: String,
    dout: String,
    sink_if: String,
    gen_ip: IpAddr,
    sink_ip: IpAddr,
}

impl<'a> Line<'a> {
    fn of(t: &'a BuiltTopology, ipv6: bool) -> Result<Line<'a>> {
        let r = t.roles()?;
        let ((gen, _), (dut, din), (_, dout), (sink, sink_if)) = (t.endpoint(&r.gen)?, t.endpoint(&r.dut_in)?, t.endpoint(&r.dut_out)?, t.endpoint(&r.sink)?);
        Ok(Line { gen, dut, sink, din, dout, sink_if, gen_ip: t.addr(&r.gen, ipv6)?, sink_ip: t.addr(&r.sink, ipv6)? })
    }
}

/// The variant attached on dut, detached when dropped.
enum On {
    Kernel,
    Router(#[allow(dead_code)] NfGuard),
    Peer(#[allow(dead_code)] PeerGuard),
}

/// The variant on dut (nothing for the kernel).
fn attach(line: &Line, v: Variant, xdp_forward: Option<&std::path::Path>) -> Result<On> {
    let fib = match v {
        Variant::Kernel => return Ok(On::Kernel),
        Variant::XdpForward => {
            let peer = Peer::built_in("xdp-forward", &peers::xdp_forward_binary(xdp_forward)?).expect("a built-in peer");
            return Ok(On::Peer(PeerGuard::attach(&peer, line.dut, &line.din, &line.dout)?));
        }
        Variant::Xnf | Variant::XnfFull => v.fib().expect("a router variant"),
    };
    let ifaces = [line.din.clone(), line.dout.clone()];
    Ok(On::Router(NfGuard::router(line.dut, &ifaces, router_options(fib))?))
}

/// A variant attached for one change.
struct Set<'a> {
    exp: &'a FibChange,
    line: Line<'a>,
    variant: Variant,
    _on: On,
}

impl Running for Set<'_> {
    /// One change under the point's stream; what it measured is kept for
    /// [`Experiment::finish`], no samples (nothing here is a rate).
    fn measure(&self, m: Measuring) -> Result<Measured> {
        let stream = self.exp.stream.borrow();
        let stream = stream.as_ref().context("the point's stream is not running")?;
        let name = variant_name(&self.variant);
        let mut all = self.exp.measured.borrow_mut();
        let i = match all.iter().position(|r| r.variant == name) {
            Some(i) => i,
            None => {
                all.push(VariantResult { variant: name, ..Default::default() });
                all.len() - 1
            }
        };
        let r = &mut all[i];
        match self.exp.change {
            Change::Route => {
                m.pg.message("the sink's route replaced on dut, then restored");
                let (window, stale, after_ack) = one_change(&self.line, stream)?;
                r.windows_us.push(window);
                r.stale.push(stale);
                r.after_ack_us.push(after_ack);
            }
            Change::NexthopMac => {
                m.pg.message("the sink's MAC changed silently: waiting for traffic to reach it");
                r.recovered_us.push(one_mac_change(&self.line, stream, Duration::from_secs(self.exp.timeout))?);
            }
        }
        Ok(Measured { samples: Vec::new(), zero_loss: None, profiled: Vec::new() })
    }
}

/// One route change: (window µs, stale datagrams, window after the ack µs).
fn one_change(line: &Line, stream: &Stream) -> Result<(f64, u64, f64)> {
    let host = if line.sink_ip.is_ipv6() { 128 } else { 32 };
    let dst = format!("{}/{host}", line.sink_ip);
    // Traffic flows (and, with the cache, is cached) before the change.
    stream.wait_delivered(200)?;
    let t0 = now_ns();
    line.dut.route_replace(&dst, Some(&line.gen_ip.to_string()), Some(&line.din)).context("replacing the sink's route on dut")?;
    let t1 = now_ns();
    std::thread::sleep(Duration::from_millis(50));
    let (last, stale) = stream.after(t0);
    line.dut.route_del(&dst).context("restoring the sink's route on dut")?;
    let us = |from: u64| last.map_or(0.0, |l| l.saturating_sub(from) as f64 / 1000.0);
    Ok((us(t0), stale, us(t1)))
}

/// A locally administered MAC the sink takes for a while.
const OTHER_MAC: &str = "02:00:00:00:5e:11";

/// One silent MAC change of the next hop: µs from the change (both
/// commands done) to the send time of the first datagram that reached the
/// new MAC (None: none within `timeout`). The sink gets its MAC back and dut's
/// entry is deleted afterwards, so the next variant starts from a fresh
/// resolution.
fn one_mac_change(line: &Line, stream: &Stream, timeout: Duration) -> Result<Option<f64>> {
    let sink = line.sink_ip.to_string();
    let mac = line.sink.mac(&line.sink_if)?.to_string();
    stream.wait_delivered(200)?;
    line.sink.ip(&["link", "set", "dev", &line.sink_if, "address", OTHER_MAC]).context("changing the sink's MAC")?;
    line.dut.ip(&["neigh", "change", &sink, "dev", &line.dout, "nud", "stale"]).context("making dut's entry for the sink STALE")?;
    // From here on a datagram that arrives went to the new MAC.
    let t0 = now_ns();
    let deadline = Instant::now() + timeout;
    let first = loop {
        if let Some(t) = stream.first_after(t0) {
            break Some(t.saturating_sub(t0) as f64 / 1000.0);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    line.sink.ip(&["link", "set", "dev", &line.sink_if, "address", &mac]).context("giving the sink its MAC back")?;
    // Absent already if the kernel gave it up (FAILED entries are kept,
    // but a garbage collection may have taken it).
    let _ = line.dut.ip(&["neigh", "del", &sink, "dev", &line.dout]);
    stream.take();
    Ok(first)
}

fn print_mac_table(results: &[VariantResult], rate: u32, timeout: u64) {
    println!("the sink changed its MAC silently while {rate} datagrams/s flow gen -> sink, dut's entry made STALE; recovered: until the first datagram reached the new MAC");
    println!("{:<12} {:>8} {:>14} {:>14} {:>14}", "variant", "changes", "recovered", "median ms", "max ms");
    for r in results {
        let done: Vec<f64> = r.recovered_us.iter().flatten().map(|us| us / 1000.0).collect();
        let ms = |p: f64| if done.is_empty() { "-".to_string() } else { format!("{:.0}", q(&done, p)) };
        let (median, max) = (ms(0.5), ms(1.0));
        println!("{:<12} {:>8} {:>14} {:>14} {:>14}", r.variant, r.recovered_us.len(), format!("{} of {}", done.len(), r.recovered_us.len()), median, max);
    }
    println!("(not recovered: no datagram reached the new MAC within {timeout} s)");
}

fn print_table(results: &[VariantResult], rate: u32) {
    println!("route replaced on dut while {rate} datagrams/s flow gen -> sink; window: T0 to the send time of the last datagram that followed the old route");
    println!(
        "{:<12} {:>8} {:>12} {:>12} {:>12} {:>14} {:>16} {:>14}",
        "variant", "changes", "median µs", "p90 µs", "max µs", "stale/change", "after ack: med", "max µs"
    );
    for r in results {
        let (w, a) = (&r.windows_us, &r.after_ack_us);
        let stale = r.stale.iter().sum::<u64>() as f64 / r.stale.len().max(1) as f64;
        println!(
            "{:<12} {:>8} {:>12.0} {:>12.0} {:>12.0} {:>14.1} {:>16.0} {:>14.0}",
            r.variant,
            w.len(),
            q(w, 0.5),
            q(w, 0.9),
            q(w, 1.0),
            stale,
            q(a, 0.5),
            q(a, 1.0)
        );
    }
}

/// The `p` quantile of values in any order.
fn q(v: &[f64], p: f64) -> f64 {
    let mut w = v.to_vec();
    w.sort_by(|a, b| a.total_cmp(b));
    quantile(&w, p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::driver::parse_options;

    fn parse(a: &[&str]) -> Result<FibChangeArgs, clap::Error> {
        parse_options::<FibChangeArgs>(a)
    }

    #[test]
    fn variants_are_named_after_what_the_commands_attach_and_old_names_say_the_new() {
        assert_eq!(parse(&[]).unwrap().experiment.variants, [Variant::Kernel, Variant::Xnf, Variant::XnfFull]);
        assert_eq!((Variant::Xnf.fib(), Variant::XnfFull.fib(), Variant::Kernel.fib()), (Some(FibMode::default()), Some(FibMode::Full), None));
        let e = parse(&["--variants", "kernel,xnf-cache"]).err().unwrap().to_string();
        assert!(e.contains("--variants: `xnf-cache` is now `xnf` (what `xnf router attach` attaches; `xnf-full` is --fib full)"), "{e}");
        for bad in ["xnf-turbo", "xnf-cache-lean"] {
            let e = parse(&["--variants", bad]).err().unwrap().to_string();
            assert!(e.contains("[possible values: kernel, xnf, xnf-full, xdp-forward]"), "{bad}: {e}");
        }
    }

    #[test]
    fn changes_are_the_drivers_runs_twenty_unless_given() {
        assert_eq!(parse(&[]).unwrap().common.runs, 20);
        assert_eq!(parse(&["--changes", "5"]).unwrap().common.runs, 5);
        assert_eq!(parse(&["--runs", "7"]).unwrap().common.runs, 7);
        assert!(parse(&["--changes", "5", "--runs", "7"]).is_err(), "one count, two names");
    }

    #[test]
    fn options_it_cannot_honour_are_refused_naming_the_flag() {
        for (args, want) in [
            (&["--changes", "0"][..], "--changes 0"),
            (&["--changes", "1001"][..], "--changes 1001"),
            (&["--seconds", "5"][..], "--seconds: "),
            (&["--warmup", "1"][..], "--warmup: "),
            (&["--trial-seconds", "1"][..], "--trial-seconds: "),
            (&["--cpu", "0"][..], "--cpu: "),
            (&["--csv", "x.csv"][..], "--csv: "),
        ] {
            let e = parse(args).unwrap().refuse().unwrap_err().to_string();
            assert!(e.starts_with(want) && !e.contains('\n'), "{args:?}: {e}");
        }
        assert!(parse(&["--changes", "3", "--json", "x.json", "--topology", "line"]).unwrap().refuse().is_ok());
        let cpus = Cpus { gen: 1, count: 2 };
        for (args, want) in [
            (&["--rate", "10"][..], "--rate 10"),
            (&["--timeout", "0"][..], "--timeout 0"),
            (&["--variants", "xnf,kernel,xnf"][..], "--variants: xnf named twice"),
        ] {
            let e = parse(args).unwrap().experiment.check(cpus).unwrap_err().to_string();
            assert!(e.contains(want), "{args:?}: {e}");
        }
        let e = parse(&[]).unwrap().experiment;
        for (plan, want) in [
            (Plan { zero_loss: Some(0.0), ..Default::default() }, "--zero-loss"),
            (Plan { load: crate::engine::measure::Load { steps: 10, ..Default::default() }, ..Default::default() }, "--load-curve"),
        ] {
            assert!(e.plan(plan).unwrap_err().to_string().starts_with(want));
        }
    }

    #[test]
    fn a_topology_without_a_dut_of_its_own_is_refused_and_the_lines_ends_pass() {
        let e = parse(&[]).unwrap().experiment;
        let mut pair = TopologySpec::load("pair").unwrap();
        assert!(e.adapt(&mut pair).unwrap_err().to_string().starts_with("--topology: "));
        let mut line = TopologySpec::load("line").unwrap();
        e.adapt(&mut line).unwrap();
        let kinds: Vec<(&str, FunctionKind)> = line.functions.iter().flat_map(|f| f.interfaces.iter().map(move |d| (d.as_str(), f.kind))).collect();
        assert!(kinds.contains(&("sink", FunctionKind::Pass)) && kinds.contains(&("gen", FunctionKind::Pass)) && kinds.len() == 2, "{kinds:?}");
        assert!(!line.neighbours.iter().any(|n| n.ns == "dut"), "dut resolves the sink itself");
        let points = driver::points(&e);
        assert_eq!(points.len(), 1);
        assert_eq!(params::label(&e.params(), &points[0]), "route change, IPv4");
    }
}
