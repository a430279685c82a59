//! `xnf lab router`: kernel forwarding against `xnf router` on the same
//! gen -> dut -> sink veth line, variants alternated within one run.
//!
//! The generator sends as fast as it can (live frames, XDP_TX into gen's
//! veth); the sink counts in XDP and drops. The forwarded rate is what the
//! sink counts per second. A third variant, "dut-drop", drops every frame at
//! dut's ingress: it is the cost of generating and receiving alone, so
//! (1/rate - 1/rate_drop) estimates what forwarding itself costs.
//!
//! On veth, frames are processed in softirq on the *sending* CPU: the
//! generator, dut's receive and forwarding, and the sink's receive all run
//! on the generator's CPU, so the rate is of the whole chain; the CPU table
//! shows where the time went.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use serde::Serialize;
use xnf_bpf::gen::GenConfig;
use xnf_netns::{LineConfig, LineTopology};
use xnf_packet::PacketBuilder;

use super::cpu::{self, CpuTimes};
use super::search::{loss_pct, search, SearchOptions, SearchResult};
use super::{Generator, LabAttachment};

/// Options of one `xnf lab router` run.
#[derive(Clone, Debug, Serialize)]
pub struct Options {
    pub runs: u32,
    pub seconds: f64,
    pub warmup: f64,
    pub flows: u32,
    /// Frame size on the wire, FCS included (64 = minimum Ethernet).
    pub size: usize,
    pub ipv6: bool,
    pub cpu: usize,
    /// Also search each variant's zero-loss rate, with this loss tolerance (%).
    pub zero_loss: Option<f64>,
    /// Measured seconds per search trial (after a discarded warm-up second).
    pub trial_seconds: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// The kernel forwards (dut ingress has the XDP_PASS program).
    Kernel,
    /// `xnf router` forwards in XDP.
    Xnf,
    /// dut drops at XDP ingress: generator + receive cost only.
    DutDrop,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Kernel => "kernel",
            Variant::Xnf => "xnf",
            Variant::DutDrop => "dut-drop",
        }
    }
}

/// One measured interval.
#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    pub variant: Variant,
    pub run: u32,
    pub seconds: f64,
    pub sent: u64,
    /// Counted at the sink (or at dut's ingress for dut-drop).
    pub received: u64,
    pub sent_mpps: f64,
    pub mpps: f64,
    pub loss_pct: f64,
    /// Per-CPU busy share over the interval, in percent.
    pub cpu_busy_pct: Vec<f64>,
    pub cpu_softirq_pct: Vec<f64>,
    /// All CPUs' busy time divided by packets received.
    pub ns_per_packet: f64,
    /// The zero-loss search, when asked for.
    pub zero_loss: Option<SearchResult>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub variant: Variant,
    pub median_mpps: f64,
    pub min_mpps: f64,
    pub max_mpps: f64,
    pub median_ns_per_packet: f64,
    /// Median zero-loss rate, when searched.
    pub median_zero_loss_mpps: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub options: Options,
    pub kernel_release: String,
    pub cpus: usize,
    pub samples: Vec<Sample>,
    pub summary: Vec<Summary>,
    /// Median xnf rate over median kernel rate.
    pub ratio_xnf_over_kernel: f64,
}

fn template(line: &LineTopology, o: &Options) -> Result<GenConfig> {
    let (src, dst): (IpAddr, IpAddr) =
        if o.ipv6 { (line.gen_v6.into(), line.sink_v6.into()) } else { (line.gen_v4.into(), line.sink_v4.into()) };
    let frame = PacketBuilder::ethernet(line.gen_mac, line.dut_gen_mac)
        .ip(src, dst)
        .udp(1024, 9)
        .frame_len(o.size - 4)
        .try_build()?;
    Ok(GenConfig { template: frame, ipv6: o.ipv6, flows: o.flows, base_sport: 1024 })
}

/// Runs this `xnf` binary in network namespace `ns`, as a user would.
fn xnf_cmd(ns: &str, args: &[&str]) -> Result<()> {
    let out = std::process::Command::new(std::env::current_exe()?).arg("--netns").arg(ns).args(args).output()?;
    ensure!(out.status.success(), "xnf {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    Ok(())
}

/// Sets a variant up on dut; the returned guard tears it down.
enum Setup {
    Attachment(LabAttachment),
    Router { line_dut: String, ifaces: [String; 2] },
}

impl Drop for Setup {
    fn drop(&mut self) {
        if let Setup::Router { line_dut, ifaces } = self {
            let _ = xnf_cmd(line_dut, &["router", "detach", &ifaces[0], &ifaces[1]]);
        }
    }
}

fn setup(line: &LineTopology, v: Variant) -> Result<Setup> {
    let dut = line.dut();
    Ok(match v {
        Variant::Kernel => Setup::Attachment(LabAttachment::pass(dut, &line.dut_gen_if)?),
        Variant::DutDrop => Setup::Attachment(LabAttachment::sink(dut, &line.dut_gen_if)?),
        Variant::Xnf => {
            xnf_cmd(dut.name(), &["router", "attach", &line.dut_gen_if, &line.dut_sink_if, "--no-follow"])?;
            Setup::Router { line_dut: dut.name().to_string(), ifaces: [line.dut_gen_if.clone(), line.dut_sink_if.clone()] }
        }
    })
}

fn measure(line: &LineTopology, sink: &LabAttachment, v: Variant, run: u32, o: &Options, progress: &mut dyn FnMut(&str)) -> Result<Sample> {
    let setup = setup(line, v)?;
    let counter = match &setup {
        Setup::Attachment(a) if v == Variant::DutDrop => a,
        _ => sink,
    };
    let gen = Generator::start(line.gen(), &line.gen_if, template(line, o)?, o.cpu, 0)?;
    progress(&format!("run {}/{} {:<8} warming up", run + 1, o.runs, v.name()));
    std::thread::sleep(Duration::from_secs_f64(o.warmup));
    let (c0, s0, r0, t0) = (cpu::sample()?, gen.sent()?, counter.packets()?, Instant::now());
    progress(&format!("run {}/{} {:<8} measuring {:.0} s", run + 1, o.runs, v.name(), o.seconds));
    std::thread::sleep(Duration::from_secs_f64(o.seconds));
    let (c1, s1, r1, secs) = (cpu::sample()?, gen.sent()?, counter.packets()?, t0.elapsed().as_secs_f64());
    let zero_loss = match o.zero_loss {
        Some(tol) => Some(find_zero_loss(&gen, counter, (s1 - s0) as f64 / secs, tol, o, &mut |t| {
            progress(&format!("run {}/{} {:<8} zero-loss search: {t}", run + 1, o.runs, v.name()))
        })?),
        None => None,
    };
    gen.stop()?;
    drop(setup);

    let cpus = cpu::delta(&c1, &c0);
    let pct = |f: fn(&CpuTimes) -> u64| cpus.iter().map(|c| 100.0 * f(c) as f64 / c.total().max(1) as f64).collect::<Vec<_>>();
    let (sent, received) = (s1 - s0, r1 - r0);
    let busy_ns: f64 = cpus.iter().map(|c| c.busy() as f64).sum::<f64>() * 1e9 / clk_tck();
    Ok(Sample {
        variant: v,
        run,
        seconds: secs,
        sent,
        received,
        sent_mpps: sent as f64 / secs / 1e6,
        mpps: received as f64 / secs / 1e6,
        // Frames in flight (at most a veth ring) blur the boundaries slightly.
        loss_pct: loss_pct(sent, received),
        cpu_busy_pct: pct(CpuTimes::busy),
        cpu_softirq_pct: pct(|c| c.softirq),
        ns_per_packet: if received > 0 { busy_ns / received as f64 } else { f64::NAN },
        zero_loss,
    })
}

/// Searches the highest rate up to `top` with at most `tol` % loss, the
/// variant already set up and the generator running.
fn find_zero_loss(gen: &Generator, counter: &LabAttachment, top: f64, tol: f64, o: &Options, progress: &mut dyn FnMut(&str)) -> Result<SearchResult> {
    let so = SearchOptions { low: top / 100.0, high: top, loss_tolerance_pct: tol, resolution: top / 100.0, max_trials: 20 };
    let mut n = 0;
    // Counters are read only while the generator is paused and the path has
    // drained, so frames in flight at a boundary never count as lost.
    let quiet_counts = || -> Result<(u64, u64)> {
        gen.set_rate(1)?;
        std::thread::sleep(Duration::from_millis(50));
        Ok((gen.sent()?, counter.packets()?))
    };
    search(&so, |rate| {
        n += 1;
        progress(&format!("trial {n} at {:.3} Mpps", rate / 1e6));
        // The first interval after a rate change is discarded.
        gen.set_rate(rate as u64)?;
        std::thread::sleep(Duration::from_secs_f64(o.warmup.max(0.5)));
        let (s0, r0) = quiet_counts()?;
        gen.set_rate(rate as u64)?;
        std::thread::sleep(Duration::from_secs_f64(o.trial_seconds));
        let (s1, r1) = quiet_counts()?;
        Ok((s1 - s0, r1 - r0))
    })
}

fn clk_tck() -> f64 {
    // SAFETY: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).max(1) as f64
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

pub fn summarize(samples: &[Sample], v: Variant) -> Summary {
    let mut mpps: Vec<f64> = samples.iter().filter(|s| s.variant == v).map(|s| s.mpps).collect();
    let mut ns: Vec<f64> = samples.iter().filter(|s| s.variant == v).map(|s| s.ns_per_packet).collect();
    let mut zl: Vec<f64> = samples.iter().filter(|s| s.variant == v).filter_map(|s| s.zero_loss.as_ref()).map(|z| z.rate / 1e6).collect();
    Summary {
        median_zero_loss_mpps: (!zl.is_empty()).then(|| median(&mut zl)),
        variant: v,
        min_mpps: mpps.iter().cloned().fold(f64::INFINITY, f64::min),
        max_mpps: mpps.iter().cloned().fold(0.0, f64::max),
        median_mpps: median(&mut mpps),
        median_ns_per_packet: median(&mut ns),
    }
}

/// Runs the experiment; `progress` receives one-line status updates.
pub fn run(o: &Options, progress: &mut dyn FnMut(&str)) -> Result<Report> {
    ensure!(o.runs >= 1, "--runs must be at least 1");
    ensure!(o.size >= 64 && o.size <= 1518, "--size must be 64..=1518 bytes (wire size with FCS)");
    ensure!(!o.ipv6 || o.size >= 66, "IPv6 UDP needs at least 66 bytes on the wire (14 + 40 + 8 + FCS): use --size 66 or more");
    if let Some(tol) = o.zero_loss {
        ensure!((0.0..100.0).contains(&tol), "--zero-loss tolerance must be in [0, 100) percent");
        ensure!(o.trial_seconds > 0.0, "--trial-seconds must be positive");
    }
    ensure!(o.seconds > 0.0 && o.warmup >= 0.0, "--seconds must be positive");
    ensure!(o.flows >= 1 && o.flows <= 64511, "--flows must be 1..=64511 (source ports 1024..65535)");
    let ncpu = cpu::sample()?.len();
    ensure!(o.cpu < ncpu, "--cpu {} does not exist (this machine has {ncpu})", o.cpu);
    for name in xnf_netns::cleanup_stale()? {
        progress(&format!("removed {name}, left by a lab or test run that was killed"));
    }
    progress("building gen -> dut -> sink");
    let line = LineTopology::new(&LineConfig::default())?;
    // dut knows sink's MAC up front: no neighbour resolution while measuring.
    let sink_ip = if o.ipv6 { line.sink_v6.to_string() } else { line.sink_v4.to_string() };
    line.dut().neigh_add(&sink_ip, line.sink_mac, &line.dut_sink_if)?;
    let sink = LabAttachment::sink(line.sink(), &line.sink_if)?;

    let mut samples = Vec::new();
    let variants = [Variant::Kernel, Variant::Xnf, Variant::DutDrop];
    for run in 0..o.runs {
        // Alternate the order so drift over time does not favour one variant.
        let mut order = variants;
        if run % 2 == 1 {
            order.reverse();
        }
        for v in order {
            samples.push(measure(&line, &sink, v, run, o, progress)?);
        }
    }
    let summary: Vec<Summary> = variants.iter().map(|v| summarize(&samples, *v)).collect();
    let ratio = summary[1].median_mpps / summary[0].median_mpps;
    Ok(Report {
        options: o.clone(),
        kernel_release: nix::sys::utsname::uname()?.release().to_string_lossy().into_owned(),
        cpus: ncpu,
        samples,
        summary,
        ratio_xnf_over_kernel: ratio,
    })
}

pub fn print(r: &Report) {
    println!(
        "\nxnf lab router — {}-byte {} UDP, {} flow(s), generator on CPU {}, {} run(s) of {:.0} s, kernel {}",
        r.options.size,
        if r.options.ipv6 { "IPv6" } else { "IPv4" },
        r.options.flows,
        r.options.cpu,
        r.options.runs,
        r.options.seconds,
        r.kernel_release
    );
    println!("\n{:<9} {:>3} {:>10} {:>10} {:>7} {:>9}  CPU busy% (softirq%) per CPU", "variant", "run", "sent Mpps", "fwd Mpps", "loss%", "ns/pkt");
    for s in &r.samples {
        let cpus: Vec<String> = s.cpu_busy_pct.iter().zip(&s.cpu_softirq_pct).map(|(b, si)| format!("{b:.0} ({si:.0})")).collect();
        println!(
            "{:<9} {:>3} {:>10.3} {:>10.3} {:>7.2} {:>9.0}  {}",
            s.variant.name(),
            s.run + 1,
            s.sent_mpps,
            s.mpps,
            s.loss_pct,
            s.ns_per_packet,
            cpus.join("  ")
        );
    }
    println!("\n{:<9} {:>12} {:>10} {:>10} {:>14} {:>16}", "variant", "median Mpps", "min", "max", "median ns/pkt", "zero-loss Mpps");
    for s in &r.summary {
        let zl = s.median_zero_loss_mpps.map(|z| format!("{z:.3}")).unwrap_or("-".into());
        println!("{:<9} {:>12.3} {:>10.3} {:>10.3} {:>14.0} {:>16}", s.variant.name(), s.median_mpps, s.min_mpps, s.max_mpps, s.median_ns_per_packet, zl);
    }
    let ns = |v: Variant| r.summary.iter().find(|s| s.variant == v).map(|s| 1e3 / s.median_mpps).unwrap_or(f64::NAN);
    println!(
        "\nxnf / kernel = {:.2}x   (time per packet: kernel {:.0} ns, xnf {:.0} ns, of which generating + receiving {:.0} ns)",
        r.ratio_xnf_over_kernel,
        ns(Variant::Kernel),
        ns(Variant::Xnf),
        ns(Variant::DutDrop)
    );
    println!(
        "forwarding + sink receive (minus dut-drop): kernel {:.0} ns, xnf {:.0} ns per packet, {:.2}x",
        ns(Variant::Kernel) - ns(Variant::DutDrop),
        ns(Variant::Xnf) - ns(Variant::DutDrop),
        (ns(Variant::Kernel) - ns(Variant::DutDrop)) / (ns(Variant::Xnf) - ns(Variant::DutDrop))
    );
}
