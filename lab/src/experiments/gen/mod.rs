//! `xnf lab gen`: the traffic generator on its own, against an XDP sink.
//!
//! By default it builds the shortest path there is, one veth pair gen ->
//! sink, so what it measures is the generator's own ceiling (and the sink's
//! receive, which on a veth runs on the sending CPU). `--through-dut kernel`
//! or `--through-dut xnf` puts the standard dut namespace in between.
//!
//! Everything the frames carry is decided up front and checked before
//! anything is built: protocol, sizes (fixed or the AMS-IX IMIX of the xdp-forward thesis
//! §5.3.7), flows (source and destination ports and addresses, or a list of
//! destinations), rate, count, CPUs. With `--verify` the sink copies every
//! frame to user space, which parses it and compares the counts per size
//! and per flow with what the generator must have sent.
//!
//! [`args`] is the command line, [`plan`] what it asks for, checked,
//! [`path`] the namespaces, [`verify`] the check of every frame; this file
//! runs a plan and prints what came of it.

pub mod args;
pub mod path;
pub mod plan;
#[cfg(test)]
mod tests;
pub mod verify;

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;
use xnf_netns::Netns;

use crate::engine::cpu;
use crate::engine::params;
use crate::engine::results::{Labels, Loss, Point, Results, Sample, SampleKind};
use crate::engine::search::loss_pct;
use crate::engine::{GenOptions, Generator, LabAttachment};
use crate::programs::gen::GenConfig;
use crate::programs::sink::{SinkCounts, SinkOptions};

pub use args::{CpuList, Dut, GenArgs, Size, TcpKind};
pub use path::Path;
pub use plan::{plan, Plan, BASE_DPORT, BASE_SPORT};
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
    #[serde(skip)]
    pub results: Option<Results>,
}

/// Runs the plan: builds the path, sends, reports. `status` gets a one-line
/// status every second.
pub fn run_plan(p: &Plan, args: &impl Serialize, status: &mut dyn FnMut(&str)) -> Result<Report> {
    let path = Path::build(p)?;
    let (gen_ns, gen_if, src_mac, dst_mac) = path.gen();
    let cfg = p.gen_config(src_mac, dst_mac)?;
    let (sink_ns, sink_if) = path.sink();
    let sink_opts = if p.verify { SinkOptions { capture_ring: Some(VERIFY_RING), ..Default::default() } } else { SinkOptions::default() };
    let sink = LabAttachment::sink_with(sink_ns, sink_if, sink_opts)?;
    let counter = sink.sink_counter()?;

    let mut results = Results::new("gen", args, vec![params::size(), params::flows(), params::ipv6(), params::queues()]);
    results.notes.push(format!("{}; generator threads pinned to CPUs {:?}", p.describe(), p.cpus));
    results.notes.push("veth: the sink receives in softirq on the sending CPU, so a CPU's rate is generator + sink".into());
    let size = match p.size {
        Size::Fixed(n) => n as u32,
        Size::Imix => 0,
    };
    let point = Point::default().with("size", size).with("flows", p.flows()).with("ipv6", p.ipv6).with("queues", p.threads() as u32);
    // One step: every second at the same offered rate.
    let kind = match p.rate {
        Some(r) => SampleKind::Load { offered_pps: r as f64, step: 1 },
        None => SampleKind::Max,
    };

    let capture_done = AtomicBool::new(false);
    let (ipv6, tcp) = (p.ipv6, p.tcp.is_some());
    let (outcome, tally, profile) = std::thread::scope(|s| -> Result<_> {
        let reader = p.verify.then(|| {
            s.spawn(|| -> Result<Tally> {
                let mut t = Tally::default();
                counter.read_capture(&|| capture_done.load(Ordering::Relaxed), &mut |c| t.add(&c, ipv6, tcp))?;
                Ok(t)
            })
        });
        let session = p.profile.as_ref().map(xnf_profile::Session::start).transpose()?;
        let sent = send(p, gen_ns, gen_if, &cfg, counter, &point, kind, &mut results, status);
        let profile = session.map(xnf_profile::Session::stop).transpose();
        // Frames in flight reach the sink before the capture stops.
        // (The reader stops only when told: told before any error returns.)
        let settled = crate::engine::measure::until_still(&|| Ok(counter.total()?.packets), Duration::from_secs(2));
        capture_done.store(true, Ordering::Relaxed);
        let tally = match reader {
            Some(h) => Some(h.join().map_err(|_| anyhow::anyhow!("capture reader panicked"))??),
            None => None,
        };
        settled?;
        Ok((sent?, tally, profile?))
    })?;
    let (per_thread, secs) = outcome;
    let (profile, flame) = match profile {
        Some(mut prof) => {
            let flame = match (&p.flame, prof.stacks.take()) {
                (Some(dir), Some(stacks)) => {
                    let name = format!("gen-{}", std::process::id());
                    Some(crate::engine::profiling::write_flame(dir, &name, &format!("xnf lab gen: {}", p.describe()), &stacks.busy())?)
                }
                _ => None,
            };
            (Some(prof), flame)
        }
        None => (None, None),
    };

    let rx = counter.per_cpu()?;
    let total: SinkCounts = counter.total()?;
    let sent: u64 = per_thread.iter().map(|t| t.1).sum();
    let per_cpu = per_thread
        .iter()
        .map(|&(cpu, s)| {
            let r = rx.get(cpu).map(|c| c.packets).unwrap_or(0);
            CpuReport { cpu, sent: s, received: r, loss_pct: loss_pct(s, r), sent_mpps: s as f64 / secs / 1e6, received_mpps: r as f64 / secs / 1e6 }
        })
        .collect();
    let verification = match &tally {
        Some(t) => Some(verify::verify(&cfg, &per_thread.iter().map(|t| t.1).collect::<Vec<_>>(), t, total, sent)?),
        None => None,
    };
    results.summarize(&[]);
    let mut report = Report {
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
        results: None,
    };
    // The outcome in the JSON too: totals per CPU and the verification.
    results.details.insert("run".into(), serde_json::to_value(&report)?);
    report.results = Some(results);
    Ok(report)
}

/// Sends until the count is reached or the time is up, sampling every
/// second; returns frames sent per (cpu) and the seconds it took.
#[allow(clippy::too_many_arguments)]
fn send(
    p: &Plan,
    ns: &Netns,
    dev: &str,
    cfg: &GenConfig,
    counter: &crate::programs::sink::SinkCounter,
    point: &Point,
    kind: SampleKind,
    results: &mut Results,
    status: &mut dyn FnMut(&str),
) -> Result<(Vec<(usize, u64)>, f64)> {
    let seconds = p.seconds.or(if p.count.is_some() { None } else { Some(5.0) });
    let opts = GenOptions { cpus: p.cpus.clone(), rate: p.rate.unwrap_or(0), count: p.count, queues: p.threads() as u32, seconds };
    let (c0, r0) = (cpu::sample()?, counter.total()?.packets);
    let gen = Generator::start_on(ns, dev, cfg.clone(), &opts)?;
    let t0 = Instant::now();
    let (mut last_t, mut last_s, mut last_r, mut last_c) = (t0, 0u64, r0, c0);
    let mut next = t0 + Duration::from_secs(1);
    let mut run = 0;
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
                let l = Labels { variant: "gen".into(), point: point.clone(), run };
                results.samples.push(Sample::of(&l, kind, dt, (ds, dr), loss, &delta));
                run += 1;
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

fn print(r: &Report) {
    println!("\nxnf lab gen — {}", r.description);
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

/// `xnf lab gen` from the command line.
pub fn run(a: GenArgs) -> Result<()> {
    let p = plan(&a)?;
    crate::engine::remove_stale(&mut |line| eprintln!("xnf lab: {line}"))?;
    let tty = std::io::stderr().is_terminal();
    let mut status = |line: &str| {
        if tty {
            eprint!("\r\x1b[Kxnf lab gen: {line}");
            let _ = std::io::stderr().flush();
        } else {
            eprintln!("xnf lab gen: {line}");
        }
    };
    let r = run_plan(&p, &a, &mut status);
    if tty {
        eprintln!();
    }
    let r = r?;
    print(&r);
    if let (Some(path), Some(res)) = (&a.json, &r.results) {
        res.write_json(path)?;
        crate::engine::results::wrote(path);
    }
    Ok(())
}
