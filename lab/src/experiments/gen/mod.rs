//! `xnf lab gen`: the traffic generator on its own, against an XDP sink.
//!
//! By default it runs on the shortest path there is, the built-in `pair`
//! (one veth pair gen -> sink), so what it measures is the generator's own
//! ceiling (and the sink's receive, which on a veth runs on the sending
//! CPU). `--through-dut kernel` or `--through-dut xnf` sends through the
//! dut of the `line` instead.
//!
//! Everything the frames carry is decided up front and checked before
//! anything is built: protocol, sizes (fixed or the AMS-IX IMIX of the xdp-forward thesis
//! §5.3.7), flows (source and destination ports and addresses, or a list of
//! destinations), rate, count, CPUs. With `--verify` the sink copies every
//! frame to user space, which parses it and compares the counts per size
//! and per flow with what the generator must have sent.
//!
//! It runs on the lab's driver: the topology is the driver's, and each run
//! measures itself ([`Running::measure`]): the generator started with the
//! plan's CPUs, rate, count and time, a sample every second, the
//! verification and the totals per CPU kept for [`Experiment::finish`],
//! which writes them to the results' `details.runs`.
//!
//! [`args`] is the command line, [`plan`] what it asks for, checked,
//! [`path`] what the topology needs, [`verify`] the check of every frame;
//! this file measures a run and prints what came of it.

pub mod args;
pub mod path;
pub mod plan;
#[cfg(test)]
mod tests;
pub mod verify;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;
use xnf_netns::Netns;

use crate::engine::cpu;
use crate::engine::driver::{self, AtPoint, Cpus, Experiment, Measuring, Running, VariantName};
use crate::engine::measure::{self, Measured, Timing};
use crate::engine::params::{self, Param, Point, Value};
use crate::engine::progress::Progress;
use crate::engine::results::{Labels, Loss, Results, Sample, SampleKind};
use crate::engine::search::loss_pct;
use crate::engine::topology::{BuiltTopology, TopologySpec};
use crate::engine::{GenOptions, Generator, LabAttachment};
use crate::programs::gen::GenConfig;
use crate::programs::sink::{SinkCounter, SinkCounts, SinkOptions};

pub use args::{CpuList, Dut, Gen, GenArgs, Size, TcpKind};
pub use path::Forwarder;
pub use plan::{plan, Ends, Plan, BASE_DPORT, BASE_SPORT};
pub use verify::{expected, Counts, Tally, Verification};

/// Capture ring of `--verify`: what the sink can hold while user space reads.
const VERIFY_RING: u32 = 64 << 20;

/// Per-CPU outcome of a run.
#[derive(Clone, Debug, Serialize)]
pub struct CpuReport {
    pub cpu: usize,
    pub sent: u64,
    /// Counted by the sink on this CPU (on a veth: frames this CPU sent).
    pub received: u64,
    pub loss_pct: f64,
    pub sent_mpps: f64,
    pub received_mpps: f64,
}

/// What a run did.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The driver's run (0-based).
    pub run: u32,
    pub description: String,
    pub seconds: f64,
    pub sent: u64,
    pub received: u64,
    /// Bytes received (frames without FCS).
    pub received_bytes: u64,
    pub loss_pct: f64,
    pub per_cpu: Vec<CpuReport>,
    pub verification: Option<Verification>,
    /// With --profile: the run's profile (its stacks in the flame graph).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<xnf_profile::Profile>,
    /// The flame graph written, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flame: Option<String>,
}

/// gen's one variant: the generator itself.
#[derive(Clone, Copy, Debug)]
pub struct TheGenerator;

impl VariantName for TheGenerator {
    fn name(&self) -> String {
        "gen".into()
    }
}

impl Gen {
    fn planned(&self) -> Result<&Plan> {
        self.plan.as_ref().context("gen's plan is made by `xnf lab gen` before the driver runs")
    }
}

impl Experiment for Gen {
    type Variant = TheGenerator;
    const NAME: &'static str = "gen";

    fn params(&self) -> Vec<Param> {
        vec![params::size(), params::flows(), params::ipv6(), params::queues()]
    }

    /// One point: what the plan sends, on one veth queue per generator CPU.
    fn sweep(&self) -> Vec<(&'static str, Vec<Value>)> {
        let Some(p) = &self.plan else { return Vec::new() };
        let size = match p.size {
            Size::Fixed(n) => u32::from(n),
            Size::Imix => 0,
        };
        vec![
            ("size", params::values(&[size])),
            ("flows", params::values(&[p.flows()])),
            ("ipv6", params::values(&[p.ipv6])),
            ("queues", params::values(&[p.threads() as u32])),
        ]
    }

    fn variants(&self) -> Vec<TheGenerator> {
        vec![TheGenerator]
    }

    fn ratios(&self) -> Vec<(&str, &str)> {
        Vec::new()
    }

    fn check(&self, _: Cpus) -> Result<()> {
        self.planned().map(|_| ())
    }

    /// The time it sends: --seconds, or what --count takes at --rate.
    fn planned_seconds(&self, _: &Timing, _: &measure::Plan) -> f64 {
        let Some(p) = &self.plan else { return 1.0 };
        let by_count = p.count.zip(p.rate).map(|(c, r)| c as f64 / r as f64);
        match (p.seconds, by_count) {
            (Some(s), Some(c)) => s.min(c),
            (Some(s), None) => s,
            (None, Some(c)) => c,
            (None, None) => 1.0,
        }
    }

    fn adapt(&self, spec: &mut TopologySpec) -> Result<()> {
        path::adapt(spec, self.planned()?.through_dut)
    }

    /// The capturing sink for --verify; dut's routes through a dut.
    fn built(&mut self, t: &mut BuiltTopology, _: &Progress) -> Result<()> {
        let p = self.planned()?;
        if p.verify {
            let sink = t.roles()?.sink.clone();
            t.replace_function(&sink, |ns, dev| LabAttachment::sink_with(ns, dev, SinkOptions { capture_ring: Some(VERIFY_RING), ..Default::default() }))?;
        }
        if p.through_dut.is_some() {
            path::route_to_sink(t)?;
        }
        Ok(())
    }

    /// The generator is gen's own, started by each run.
    fn at_point<'a>(&'a self, _: &'a BuiltTopology, _: &Point, _: &Progress) -> Result<AtPoint<'a>> {
        Ok(AtPoint::without_traffic(()))
    }

    fn set_up<'a>(&'a self, t: &'a BuiltTopology, _: &Point, _: TheGenerator, _: Cpus, _: &Progress) -> Result<Box<dyn Running + 'a>> {
        let fwd = self.planned()?.through_dut.map(|kind| Forwarder::attach(t, kind)).transpose()?;
        Ok(Box::new(Sending { exp: self, t, _fwd: fwd }))
    }

    fn finish(&mut self, _: Cpus, res: &mut Results) -> Result<()> {
        let p = self.planned()?;
        res.notes.push(format!("{}; generator threads pinned to CPUs {:?}", p.describe(), p.cpus));
        res.notes.push("veth: the sink receives in softirq on the sending CPU, so a CPU's rate is generator + sink".into());
        let reports = self.reports.lock().map_err(|_| anyhow::anyhow!("a run panicked"))?;
        res.details.insert("runs".into(), serde_json::to_value(&*reports)?);
        Ok(())
    }

    fn print(&self, _: &Results) {
        let reports = self.reports.lock().unwrap_or_else(|e| e.into_inner());
        for r in reports.iter() {
            print(r, reports.len());
        }
    }
}

/// One run: the path set up (dut's forwarder, if any).
struct Sending<'a> {
    exp: &'a Gen,
    t: &'a BuiltTopology,
    _fwd: Option<Forwarder>,
}

impl Running for Sending<'_> {
    /// Sends as planned, a sample every second; the run's report is kept.
    fn measure(&self, m: Measuring) -> Result<Measured> {
        let p = self.exp.planned()?;
        let t = self.t;
        let roles = t.roles()?;
        let (gen_ns, gen_if) = t.endpoint(&roles.gen)?;
        let cfg = p.gen_config(t.mac(&roles.gen)?, t.mac(&roles.dut_in)?)?;
        let counter = t.attachment(&roles.sink)?.sink_counter()?;
        let (total0, cpus0) = (counter.total()?, counter.per_cpu()?);
        // One step: every second at the same offered rate.
        let kind = match p.rate {
            Some(r) => SampleKind::Load { offered_pps: r as f64, step: 1 },
            None => SampleKind::Max,
        };
        let mut samples = Vec::new();
        let capture_done = AtomicBool::new(false);
        let (ipv6, tcp) = (p.ipv6, p.tcp.is_some());
        let pg = &*m.pg;
        let (outcome, tally, profile) = std::thread::scope(|s| -> Result<_> {
            let reader = p.verify.then(|| {
                s.spawn(|| -> Result<Tally> {
                    let mut t = Tally::default();
                    counter.read_capture(&|| capture_done.load(Ordering::Relaxed), &mut |c| t.add(&c, ipv6, tcp))?;
                    Ok(t)
                })
            });
            let session = p.profile.as_ref().map(xnf_profile::Session::start).transpose()?;
            let sent = send(p, (gen_ns, &gen_if), &cfg, counter, (m.labels, kind), &mut samples, &mut |l| pg.message(l));
            let profile = session.map(xnf_profile::Session::stop).transpose();
            // Frames in flight reach the sink before the capture stops.
            // (The reader stops only when told: told before any error returns.)
            let settled = measure::until_still(&|| Ok(counter.total()?.packets), Duration::from_secs(2));
            capture_done.store(true, Ordering::Relaxed);
            let tally = match reader {
                Some(h) => Some(h.join().map_err(|_| anyhow::anyhow!("capture reader panicked"))??),
                None => None,
            };
            settled?;
            Ok((sent?, tally, profile?))
        })?;
        let (per_thread, secs) = outcome;
        let run = m.labels.run;
        let (profile, flame) = match profile {
            Some(mut prof) => {
                let flame = match (&p.flame, prof.stacks.take()) {
                    (Some(dir), Some(stacks)) => {
                        let name = if run == 0 { format!("gen-{}", std::process::id()) } else { format!("gen-{}-{}", std::process::id(), run + 1) };
                        Some(crate::engine::profiling::write_flame(dir, &name, &format!("xnf lab gen: {}", p.describe()), &stacks.busy())?)
                    }
                    _ => None,
                };
                (Some(prof), flame)
            }
            None => (None, None),
        };
        // This run's counts: the sink counts from its attachment on.
        let (t1, rx) = (counter.total()?, counter.per_cpu()?);
        let total = SinkCounts {
            packets: t1.packets - total0.packets,
            bytes: t1.bytes - total0.bytes,
            capture_lost: t1.capture_lost - total0.capture_lost,
            reflected: t1.reflected - total0.reflected,
        };
        let rx_of = |cpu: usize| rx.get(cpu).map_or(0, |c| c.packets) - cpus0.get(cpu).map_or(0, |c| c.packets);
        let sent: u64 = per_thread.iter().map(|t| t.1).sum();
        let per_cpu = per_thread
            .iter()
            .map(|&(cpu, s)| {
                let r = rx_of(cpu);
                CpuReport { cpu, sent: s, received: r, loss_pct: loss_pct(s, r), sent_mpps: s as f64 / secs / 1e6, received_mpps: r as f64 / secs / 1e6 }
            })
            .collect();
        let verification = match &tally {
            Some(t) => Some(verify::verify(&cfg, &per_thread.iter().map(|t| t.1).collect::<Vec<_>>(), t, total, sent)?),
            None => None,
        };
        let report = Report {
            run,
            description: p.describe(),
            seconds: secs,
            sent,
            received: total.packets,
            received_bytes: total.bytes,
            loss_pct: loss_pct(sent, total.packets),
            per_cpu,
            verification,
            profile,
            flame,
        };
        self.exp.reports.lock().map_err(|_| anyhow::anyhow!("a run panicked"))?.push(report);
        Ok(Measured { samples, zero_loss: None, profiled: Vec::new() })
    }
}

/// Sends until the count is reached or the time is up, sampling every
/// second; returns frames sent per (cpu) and the seconds it took.
fn send(
    p: &Plan,
    (ns, dev): (&Netns, &str),
    cfg: &GenConfig,
    counter: &SinkCounter,
    (l, kind): (&Labels, SampleKind),
    samples: &mut Vec<Sample>,
    status: &mut dyn FnMut(&str),
) -> Result<(Vec<(usize, u64)>, f64)> {
    let opts = GenOptions { cpus: p.cpus.clone(), rate: p.rate.unwrap_or(0), count: p.count, queues: p.threads() as u32, seconds: p.seconds };
    let (c0, r0) = (cpu::sample()?, counter.total()?.packets);
    let gen = Generator::start_on(ns, dev, cfg.clone(), &opts)?;
    let t0 = Instant::now();
    let (mut last_t, mut last_s, mut last_r, mut last_c) = (t0, 0u64, r0, c0);
    let mut next = t0 + Duration::from_secs(1);
    loop {
        // The threads end by themselves at the count or the deadline.
        let finished = gen.done();
        if finished || Instant::now() >= next {
            let (now, s, r, c) = (Instant::now(), gen.sent()?, counter.total()?.packets, cpu::sample()?);
            let dt = now.duration_since(last_t).as_secs_f64();
            // Intervals under 50 ms make noisy rates, but the last one is
            // always kept: the samples must add up to what was sent, also
            // when the whole run is that short.
            if dt > 0.05 || (finished && dt > 0.0) {
                let (ds, dr) = (s - last_s, r.saturating_sub(last_r));
                let delta = cpu::delta(&c, &last_c);
                let loss = if p.through_dut.is_none() { Loss { gen_to_dut: ds as i64 - dr as i64, ..Loss::default() } } else { Loss::default() };
                samples.push(Sample::of(l, kind, dt, (ds, dr), loss, &delta));
                status(&format!(
                    "{:5.1} s  sent {:>12} ({:7.3} Mpps)  received {:>12} ({:7.3} Mpps)  loss {:6.3} %",
                    now.duration_since(t0).as_secs_f64(),
                    s,
                    ds as f64 / dt / 1e6,
                    r - r0,
                    dr as f64 / dt / 1e6,
                    loss_pct(s, r - r0)
                ));
                (last_t, last_s, last_r, last_c) = (now, s, r, c);
            }
            next += Duration::from_secs(1);
            if finished {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // Frames sent while stopping (the rest of a call) count too.
    let per_cpu = gen.finish()?;
    Ok((per_cpu, t0.elapsed().as_secs_f64()))
}

/// One run's tables: per CPU, the verification, the profile.
fn print(r: &Report, runs: usize) {
    let run = if runs > 1 { format!(" (run {}/{runs})", r.run + 1) } else { String::new() };
    println!("\nxnf lab gen — {}{run}", r.description);
    println!("\n{:>5} {:>14} {:>14} {:>8} {:>10} {:>10}", "CPU", "sent", "received", "loss %", "sent Mpps", "recv Mpps");
    for c in &r.per_cpu {
        println!("{:>5} {:>14} {:>14} {:>8.3} {:>10.3} {:>10.3}", c.cpu, c.sent, c.received, c.loss_pct, c.sent_mpps, c.received_mpps);
    }
    let gbps = (r.received_bytes + 4 * r.received) as f64 * 8.0 / r.seconds / 1e9;
    println!(
        "{:>5} {:>14} {:>14} {:>8.3} {:>10.3} {:>10.3}   in {:.2} s, {:.2} Gbit/s of frames with FCS",
        "all",
        r.sent,
        r.received,
        r.loss_pct,
        r.sent as f64 / r.seconds / 1e6,
        r.received as f64 / r.seconds / 1e6,
        r.seconds,
        gbps
    );
    if let Some(v) = &r.verification {
        println!(
            "\nverification: {} frames captured, {} not captured (ring full), {} bad checksums, {} not generated",
            v.captured, v.capture_lost, v.bad_checksums, v.other_frames
        );
        println!("{:>8} {:>12} {:>12}", "size", "received", "sent");
        for (len, got, want) in &v.sizes {
            println!("{:>8} {:>12} {:>12}{}", len, got, want, if got == want { "" } else { "  <-" });
        }
        match (v.flows_expected, v.flows_wrong) {
            (Some(n), Some(w)) => println!("flows: {} seen of {n}, {w} with a count other than sent", v.flows_seen),
            _ => println!("flows: {} seen (too many to check one by one)", v.flows_seen),
        }
        println!(
            "{}",
            if v.exact { "verified: every frame arrived, parsed, checksums valid, sizes and flows exactly as sent" } else { "NOT exact (see above)" }
        );
    }
    if let Some(prof) = &r.profile {
        println!("\nwhere the time went (xnf profile, attached for the whole run):\n{}", xnf_profile::table::render(prof));
    }
    if let Some(f) = &r.flame {
        println!("flame graph: {f}");
    }
}

/// Plans `a` against its topology's addresses, then runs it on the driver.
pub fn measure(a: &mut GenArgs, lines: &mut dyn FnMut(&str)) -> Result<Results> {
    let spec = TopologySpec::load(&a.common.topology)?;
    a.gen.plan = Some(plan(a, &Ends::of(&spec)?)?);
    driver::run(&mut a.gen, &a.common, lines)
}

/// `xnf lab gen` from the command line.
pub fn run(mut a: GenArgs) -> Result<()> {
    let r = measure(&mut a, &mut |line| eprintln!("xnf lab: {line}"))?;
    a.gen.print(&r);
    a.common.write(&r)
}
