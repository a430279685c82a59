//! Measuring one variant on a built topology: counters along the path
//! (generator, dut ingress, dut egress, receiver) and per-CPU time, read at
//! interval boundaries; intervals at full speed, at offered rates (the
//! CPU-vs-load curve) and as zero-loss search trials.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::programs::gen::GenConfig;
use anyhow::{ensure, Context, Result};
use xnf_netns::Netns;
use xnf_packet::PacketBuilder;

use super::across::At;
use super::cpu::{self, CpuTimes};
use super::placement::Placed;
use super::progress::Progress;
pub use super::results::Labels;
use super::results::{Loss, Point, Results, Sample, SampleKind};
use super::search::{search, SearchOptions, SearchResult};
use super::topology::BuiltTopology;
use super::{GenOptions, Generator};

/// The experiments' generator: one thread per CPU of `cpus`, each sending
/// its share of `rate` (0: as fast as possible), thread i as if on queue i.
/// On a multi-queue veth each CPU's frames land on a different queue of the
/// peer (veth picks the peer's queue by the sending CPU).
pub fn start_generators(ns: &Netns, dev: &str, cfg: &GenConfig, cpus: &[usize], rate: u64) -> Result<Generator> {
    let o = GenOptions { cpus: cpus.to_vec(), rate, count: None, queues: cpus.len() as u32, seconds: None };
    Generator::start_on(ns, dev, cfg.clone(), &o)
}

/// Reads the frames that completed the path (a sink counter, an XDP
/// program's count, an interface counter).
pub type Received<'a> = Box<dyn Fn() -> Result<u64> + 'a>;

/// Where a variant's frames are counted along the path.
pub struct Counters<'a> {
    /// dut's ingress interface: its rx counter.
    pub dut_in: (&'a Netns, String),
    /// dut's egress interface: its tx counter (None when dut does not send).
    pub dut_out: Option<(&'a Netns, String)>,
    pub received: Received<'a>,
    /// Called at every reading, after the counters: an experiment's own
    /// counters taken at the same instants (None: nothing more).
    pub on_read: Option<Box<dyn Fn() -> Result<()> + 'a>>,
    /// A CPU-bound co-runner's progress (work units done), read with the
    /// counters: its rate per interval is what the traffic left it
    /// (`xnf lab stack`, the receive-path profiling paper's inference).
    pub corunner: Option<Received<'a>>,
    /// What runs through every measured interval while the generator
    /// sends, instead of sleeping (None: sleep): a measurement that needs
    /// that interval's traffic around it, such as `xnf lab fwd-latency`'s
    /// probes. Not run in profiled twins or search trials' discarded time.
    pub during: Option<During<'a>>,
}

/// Runs for a measured interval of this kind and length (seconds); must
/// take at least that long.
pub type During<'a> = Box<dyn Fn(SampleKind, f64) -> Result<()> + 'a>;

/// The counters of one measured path, and the generator that feeds it.
pub struct Probe<'a> {
    pub gens: &'a Generator,
    pub counters: Counters<'a>,
    /// dut's NAPI threads when it has CPUs of its own: their run time is
    /// read with the counters.
    pub placed: &'a Placed,
    /// Interfaces along the path whose driver counters (`ethtool -S`) are
    /// read with the others: their drops and errors go into each sample.
    pub nics: &'a [(At<'a>, String)],
}

/// Counters at one instant.
#[derive(Clone, Debug)]
pub struct Counts {
    sent: u64,
    dut_rx: u64,
    dut_tx: Option<u64>,
    received: u64,
    corunner: Option<u64>,
    dut_ns: Option<u64>,
    /// `ns-role:dev:counter` of the path's NIC counters that count loss.
    nic: Vec<(String, u64)>,
    cpus: Vec<CpuTimes>,
}

impl Probe<'_> {
    pub fn read(&self) -> Result<Counts> {
        let p = &self.counters;
        let c = Ok(Counts {
            sent: self.gens.sent()?,
            dut_rx: p.dut_in.0.link_stats(&p.dut_in.1)?.rx_packets,
            dut_tx: match &p.dut_out {
                Some((ns, dev)) => Some(ns.link_stats(dev)?.tx_packets),
                None => None,
            },
            received: (p.received)().context("reading the receive counter")?,
            corunner: p.corunner.as_ref().map(|c| c()).transpose()?,
            dut_ns: self.placed.dut_runtime_ns()?,
            nic: nic_losses(self.nics)?,
            cpus: cpu::sample()?,
        });
        if let Some(hook) = &p.on_read {
            hook()?;
        }
        c
    }

    /// Waits, the generator paused, until the path has drained: the receive
    /// counter unchanged for 40 ms (at most a second). A kernel path drains
    /// in microseconds; a user-space receiver may still be working through
    /// its socket buffer or RX ring, which would otherwise count frames of
    /// this interval into the next one.
    fn drain(&self) -> Result<()> {
        until_still(&self.counters.received, Duration::from_secs(1))
    }

    /// Pauses the generator, lets the path drain and reads the counters, so
    /// frames in flight never count as lost.
    fn pause_and_read(&self) -> Result<Counts> {
        self.gens.set_rate(PAUSED)?;
        self.drain()?;
        self.read()
    }

    /// Resumes the generator at `rate` (0: full speed); returns when, on
    /// the generator's host's clock.
    fn resume(&self, rate: u64) -> Result<f64> {
        self.gens.set_rate(rate)?;
        Ok(self.gens.changed_at())
    }

    /// One interval: pause and read, resume at `rate` for `secs`, pause and
    /// read. The rate is over the time the generator was sending.
    fn interval(&self, l: &Labels, kind: SampleKind, rate: u64, secs: f64) -> Result<Sample> {
        Ok(self.interval_with(l, kind, rate, secs, None)?.0)
    }

    /// [`interval`](Self::interval), with `xnf profile` attached while the
    /// generator sends when `profile` is given (loaded and read while it is
    /// paused).
    fn interval_with(
        &self,
        l: &Labels,
        kind: SampleKind,
        rate: u64,
        secs: f64,
        profile: Option<&xnf_profile::Options>,
    ) -> Result<(Sample, Option<xnf_profile::Profile>)> {
        let a = self.pause_and_read()?;
        let session = profile.map(xnf_profile::Session::start).transpose()?;
        let t0 = self.resume(rate)?;
        match (&self.counters.during, profile) {
            (Some(during), None) => during(kind, secs)?,
            _ => std::thread::sleep(Duration::from_secs_f64(secs)),
        }
        self.gens.set_rate(PAUSED)?;
        // On the generator's clock: across hosts, a step there takes a
        // round trip this host's clock would add.
        let sending = self.gens.changed_at() - t0;
        self.drain()?;
        let prof = session.map(xnf_profile::Session::stop).transpose()?;
        let b = self.read()?;
        self.gens.set_rate(rate)?;
        Ok((sample(l, kind, &a, &b, sending), prof))
    }
}

/// The driver counters of `nics` that count frames lost or refused
/// (names with drop, miss, err, no_buf, discard or fifo: a NIC's
/// `rx_missed_errors` and `rx_no_buffer_count`, XDP drops, a veth's
/// `tx_queue_N_xdp_xmit_errors` — its peer's ring was full), keyed
/// `role:dev:name`. An interface whose driver keeps none adds nothing.
fn nic_losses(nics: &[(At, String)]) -> Result<Vec<(String, u64)>> {
    let lossy = |n: &str| ["drop", "miss", "err", "no_buf", "discard", "fifo"].iter().any(|w| n.contains(w));
    let mut out = Vec::new();
    for (at, dev) in nics {
        for (name, v) in at.ethtool_stats(dev)?.into_iter().filter(|(n, _)| lossy(n)) {
            out.push((format!("{}:{dev}:{name}", at.role()), v));
        }
    }
    Ok(out)
}

/// Waits 50 ms, then until `count` reads the same three times 20 ms apart
/// (at most `max` longer): what was in flight has arrived. One unchanged
/// read is not enough on a busy 2-CPU machine: a user-space receiver
/// descheduled for 20 ms still has its socket buffer to read, and those
/// frames would count into the next interval (seen in CI: 28 more
/// received than sent).
pub fn until_still(count: &dyn Fn() -> Result<u64>, max: Duration) -> Result<()> {
    std::thread::sleep(Duration::from_millis(50));
    let t0 = Instant::now();
    let (mut last, mut still) = (count()?, 0);
    while still < 2 && t0.elapsed() <= max {
        std::thread::sleep(Duration::from_millis(20));
        let now = count()?;
        still = if now == last { still + 1 } else { 0 };
        last = now;
    }
    Ok(())
}

/// The generator's rate while paused (1 frame per second per CPU: the
/// program drops every frame that is not due, so nearly nothing goes).
pub const PAUSED: u64 = 1;

/// The sample of the interval between two readings, the generator having
/// sent for `secs` of it.
pub fn sample(l: &Labels, kind: SampleKind, a: &Counts, b: &Counts, secs: f64) -> Sample {
    let sent = b.sent - a.sent;
    let received = b.received - a.received;
    let dut_rx = (b.dut_rx - a.dut_rx) as i64;
    let loss = match (a.dut_tx, b.dut_tx) {
        (Some(t0), Some(t1)) => {
            let dut_tx = (t1 - t0) as i64;
            Loss { gen_to_dut: sent as i64 - dut_rx, in_dut: dut_rx - dut_tx, dut_to_sink: dut_tx - received as i64 }
        }
        _ => Loss { gen_to_dut: sent as i64 - dut_rx, in_dut: dut_rx - received as i64, dut_to_sink: 0 },
    };
    let mut s = Sample::of(l, kind, secs, (sent, received), loss, &cpu::delta(&b.cpus, &a.cpus));
    if let (Some(x), Some(y)) = (a.corunner, b.corunner) {
        s.corunner_per_s = Some(y.saturating_sub(x) as f64 / secs);
    }
    s.nic_drops = b.nic.iter().filter_map(|(k, v)| Some((k.clone(), v.checked_sub(a.nic.iter().find(|(j, _)| j == k)?.1)?))).filter(|(_, d)| *d > 0).collect();
    if let (Some(x), Some(y), true) = (a.dut_ns, b.dut_ns, dut_rx > 0) {
        s.dut_ns_per_packet = Some(y.saturating_sub(x) as f64 / dut_rx as f64);
    }
    s
}

/// Timing of measurements.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Timing {
    /// Seconds of traffic before each measured interval (discarded).
    pub warmup: f64,
    /// Measured seconds at full speed.
    pub seconds: f64,
    /// Measured seconds per offered-rate step or search trial.
    pub trial_seconds: f64,
}

/// The generator at full speed: warm up, then one interval.
pub fn at_full_speed(p: &Probe, l: &Labels, t: &Timing) -> Result<Sample> {
    p.gens.set_rate(0)?;
    std::thread::sleep(Duration::from_secs_f64(t.warmup));
    p.interval(l, SampleKind::Max, 0, t.seconds)
}

/// One interval at `rate` frames per second, after a discarded one.
fn at_rate(p: &Probe, l: &Labels, t: &Timing, rate: f64, kind: SampleKind) -> Result<Sample> {
    let rate = rate.max(1.0) as u64;
    p.gens.set_rate(rate)?;
    // The first interval after a rate change is discarded (the xdp-forward thesis §5.3.8).
    std::thread::sleep(Duration::from_secs_f64(t.warmup.max(0.5)));
    p.interval(l, kind, rate, t.trial_seconds)
}

/// The CPU-vs-offered-load curve (the xdp-forward thesis §5.3.6): `steps` rates evenly
/// spaced up to `top.0` (the rate the generator sent at full speed), shares
/// of `top.1` (the rate the variant delivered at full speed), or the given
/// `rates` (the same for every variant), one interval each.
pub fn load_curve(p: &Probe, l: &Labels, t: &Timing, top: (f64, f64), load: &Load, progress: &mut dyn FnMut(&str)) -> Result<Vec<Sample>> {
    load.rates(top)
        .into_iter()
        .enumerate()
        .map(|(i, rate)| {
            let step = i as u32 + 1;
            progress(&format!("offered load {:.3} Mpps ({step}/{})", rate / 1e6, load.count()));
            at_rate(p, l, t, rate, SampleKind::Load { offered_pps: rate, step })
        })
        .collect()
}

/// The offered rates of a load curve: `steps` up to each variant's
/// full-speed rate, or fixed `pps`, or `shares` of what each variant
/// delivered at full speed (0.5: half of it; 0: the generator paused).
#[derive(Clone, Debug, Default)]
pub struct Load {
    pub steps: u32,
    pub pps: Vec<f64>,
    pub shares: Vec<f64>,
}

impl Load {
    pub fn count(&self) -> usize {
        self.rates((1.0, 1.0)).len()
    }

    /// The rates, given (sent, delivered) at full speed.
    fn rates(&self, (sent, delivered): (f64, f64)) -> Vec<f64> {
        if !self.pps.is_empty() {
            self.pps.clone()
        } else if !self.shares.is_empty() {
            self.shares.iter().map(|s| delivered * s).collect()
        } else {
            (1..=self.steps).map(|i| sent * i as f64 / self.steps as f64).collect()
        }
    }
}

/// The zero-loss search up to `top` with `tolerance` % loss; every trial is
/// also returned as a `Search` sample (the loss-vs-rate chart).
pub fn zero_loss(p: &Probe, l: &Labels, t: &Timing, top: f64, tolerance: f64, progress: &mut dyn FnMut(&str)) -> Result<(SearchResult, Vec<Sample>)> {
    let so = SearchOptions { low: top / 100.0, high: top, loss_tolerance_pct: tolerance, resolution: top / 100.0, max_trials: 20 };
    let mut samples = Vec::new();
    let mut n = 0;
    let result = search(&so, |rate| {
        n += 1;
        progress(&format!("zero-loss search: trial {n} at {:.3} Mpps", rate / 1e6));
        let s = at_rate(p, l, t, rate, SampleKind::Search { offered_pps: rate })?;
        let r = (s.sent, s.received);
        samples.push(s);
        Ok(r)
    })?;
    Ok((result, samples))
}

/// What is measured of each variant besides its full-speed interval.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    pub load: Load,
    /// The zero-loss search's loss tolerance, in percent.
    pub zero_loss: Option<f64>,
    /// Profile the full-speed interval and each load step in a twin interval.
    pub profile: Option<xnf_profile::Options>,
}

/// Everything measured of one variant at one point.
pub struct Measured {
    pub samples: Vec<Sample>,
    pub zero_loss: Option<f64>,
    /// Each profiled twin: the unprofiled sample, the profiled one, its profile.
    pub profiled: Vec<(Sample, Sample, xnf_profile::Profile)>,
}

/// Everything measured of one variant at one point: the full-speed
/// interval, then the load curve and the zero-loss search when asked for;
/// with a profile, each full-speed and load interval again, profiled.
pub fn variant(p: &Probe, l: &Labels, t: &Timing, plan: &Plan, pg: &mut Progress) -> Result<Measured> {
    pg.message("full speed");
    let max = at_full_speed(p, l, t)?;
    let top = max.sent as f64 / max.seconds;
    let mut samples = vec![max];
    if plan.load.count() > 0 {
        let delivered = samples[0].received as f64 / samples[0].seconds;
        samples.extend(load_curve(p, l, t, (top, delivered), &plan.load, &mut |m| pg.message(m))?);
    }
    let mut profiled = Vec::new();
    if let Some(o) = &plan.profile {
        for s in &samples {
            let (rate, secs) = match s.kind {
                SampleKind::Load { offered_pps, .. } => (offered_pps as u64, t.trial_seconds),
                _ => (0, t.seconds),
            };
            pg.message(&format!("profiling ({})", if rate == 0 { "full speed".to_string() } else { format!("{:.3} Mpps", rate as f64 / 1e6) }));
            p.gens.set_rate(rate.max(1))?;
            std::thread::sleep(Duration::from_secs_f64(t.warmup.max(0.5)));
            let (twin, prof) = p.interval_with(l, s.kind, rate, secs, Some(o))?;
            profiled.push((s.clone(), twin, prof.expect("profiled")));
        }
    }
    let mut zero_loss = None;
    if let Some(tol) = plan.zero_loss {
        let (r, s) = self::zero_loss(p, l, t, top, tol, &mut |m| pg.message(m))?;
        samples.extend(s);
        zero_loss = Some(r.rate);
    }
    Ok(Measured { samples, zero_loss, profiled })
}

/// Keeps what [`variant`] measured: its samples, its zero-loss rate for
/// the summary, its profiles.
pub fn record(res: &mut Results, zl: &mut Vec<(String, Point, f64)>, l: &Labels, m: Measured, flame: Option<&std::path::Path>) -> Result<()> {
    res.samples.extend(m.samples);
    zl.extend(m.zero_loss.map(|r| (l.variant.clone(), l.point.clone(), r)));
    for (plain, twin, prof) in m.profiled {
        let run = super::profiling::ProfiledRun::new(&res.experiment, &res.label(&l.point), &plain, &twin, prof, flame)?;
        res.profiles.push(run);
    }
    Ok(())
}

/// Checks frame sizes (0 = IMIX), naming the flag at fault.
pub fn check_sizes(sizes: &[u32], ipv6: bool) -> Result<()> {
    for &s in sizes {
        ensure!(s == 0 || (64..=1518).contains(&s), "--size {s}: sizes must be 64..=1518 bytes (wire size with FCS) or imix");
        ensure!(!ipv6 || s == 0 || s >= 66, "--size {s}: IPv6 UDP needs at least 66 bytes on the wire (14 + 40 + 8 + FCS)");
    }
    Ok(())
}

/// Checks flows (distinct UDP source ports) and veth queues (one
/// generator CPU each).
pub fn check_generator(flows: &[u32], queues: &[u32], ncpu: usize) -> Result<()> {
    for &f in flows {
        ensure!((1..=64511).contains(&f), "--flows {f}: flows must be 1..=64511 (distinct UDP source ports 1024..65535)");
    }
    check_queues(queues, ncpu)
}

/// Checks veth queue counts: one generator CPU each, so 1..=CPUs.
pub fn check_queues(queues: &[u32], ncpu: usize) -> Result<()> {
    for &q in queues {
        ensure!(q >= 1 && q as usize <= ncpu, "--queues {q}: must be 1..={ncpu} (one generator CPU per queue; this machine has {ncpu} CPUs)");
    }
    Ok(())
}

/// The generator's CPUs for `queues` queues: `cpu` alone with one, CPUs
/// 0..queues with more (a veth puts a frame on the queue of the CPU sending it).
pub fn gen_cpus(cpu: usize, queues: u32) -> Vec<usize> {
    if queues == 1 {
        vec![cpu]
    } else {
        (0..queues as usize).collect()
    }
}

/// The experiments' traffic at `p`: UDP to port 9 from gen's address to
/// the sink's, addressed to dut's ingress MAC, `flows` source ports (1
/// when the point has no `flows`), IPv6 when its `ipv6` is on; `size` 0 is
/// the AMS-IX IMIX.
pub fn udp_traffic(t: &BuiltTopology, p: &Point) -> Result<GenConfig> {
    let (size, flows, ipv6) = (p.u32("size")?, if p.get("flows").is_some() { p.u32("flows")? } else { 1 }, p.get("ipv6").is_some() && p.flag("ipv6")?);
    let roles = t.roles()?;
    let (src, dst): (IpAddr, IpAddr) = (t.addr(&roles.gen, ipv6)?, t.addr(&roles.sink, ipv6)?);
    // A tagged ingress (`xnf lab router --vlan`): the tag is inside the
    // frame's size, as on the wire; IMIX's smallest IPv6 frames grow by it.
    let vid = super::vlan::Pattern::of(p)?.ingress_vid();
    let (len, sizes) = match size {
        0 => (1514, crate::programs::gen::imix_sequence(if ipv6 { 62 + 4 * usize::from(vid.is_some()) } else { 60 })),
        s => (s as usize - 4, Vec::new()),
    };
    let mut b = PacketBuilder::ethernet(t.mac(&roles.gen)?, t.mac(&roles.dut_in)?);
    if let Some(vid) = vid {
        b = b.vlan(vid);
    }
    let frame = b.ip(src, dst).udp(1024, 9).frame_len(len).try_build()?;
    Ok(GenConfig { template: frame, ipv6, flows, base_sport: 1024, sizes, ..Default::default() })
}

/// Planned seconds of one variant's measurement, for the progress bar.
pub fn planned_seconds(t: &Timing, plan: &Plan) -> f64 {
    let step = t.warmup.max(0.5) + t.trial_seconds + 0.1;
    let once = t.warmup + t.seconds + plan.load.count() as f64 * step;
    let profiled = if plan.profile.is_some() { once + 0.5 * (1 + plan.load.count()) as f64 } else { 0.0 };
    once + profiled + if plan.zero_loss.is_some() { 8.0 * step } else { 0.0 }
}
