//! One variant measured along the flood rates (its
//! [`Running::measure`](crate::engine::driver::Running::measure): the
//! flood is this experiment's own generator, paced in bursts, not the
//! driver's): the generator is started at the first non-zero rate and
//! re-paced for each next one; every interval
//! is read between two readings of the counters while the flood keeps
//! going (the victim lives under a steady flood, so nothing is paused).
//!
//! A sample of this experiment is one interval at one flood rate:
//! `sent` the flood frames the generator sent, `received` those discarded
//! anywhere (dropped in dut by the filter, or, having reached the victim,
//! by its UDP stack: no socket on the port; a SYN flood's SYNs answered
//! with a cookie, in dut or by the victim), `loss` where they ended
//! (`gen_to_dut`: lost before dut's ingress; `in_dut`: dropped in dut;
//! `dut_to_sink`: reached the victim), `ns_per_packet` and
//! `softirq_ns_per_packet` CPU time per discarded frame, and
//! `transactions_per_s` the victim's TCP transactions per second.

use std::time::{Duration, Instant};

use anyhow::Result;
use xnf_netns::Netns;

use super::rr::RrService;
use super::variants::Setup;
use super::Rate;
use crate::engine::cpu::{self, CpuTimes};
use crate::engine::measure::{self, Labels, Timing, PAUSED};
use crate::engine::results::{Loss, Sample, SampleKind};
use crate::engine::Generator;
use crate::programs::gen::GenConfig;

/// Where the flood comes from and where it is counted.
pub struct Path<'a> {
    pub gen: (&'a Netns, String),
    /// One generator per queue.
    pub gen_cpus: &'a [usize],
    /// Paced frames per burst (see `Generator::set_burst`).
    pub burst: u64,
    /// dut's ingress (rx) and egress (tx).
    pub dut: (&'a Netns, String, String),
    pub victim: &'a Netns,
    pub rr: &'a RrService,
    pub traffic: &'a GenConfig,
    /// A SYN flood: what reaches the victim is counted by the SYNs its
    /// kernel answers with cookies or drops, not by UDP's NoPorts.
    pub syn: bool,
}

/// The counters at one instant.
struct Reading {
    at: Instant,
    sent: u64,
    dut_rx: u64,
    dut_tx: u64,
    /// Flood frames the victim's kernel took: UDP to no socket, or SYNs
    /// answered with a cookie or dropped from a full queue.
    victim_took: u64,
    /// Frames gen's interface received: with a SYN flood, the answers
    /// (and one reply per transaction).
    gen_rx: u64,
    transactions: u64,
    /// The filter's own count, and when the command that read it started
    /// and ended: it may take tens to hundreds of milliseconds on a busy
    /// machine and reads the counter somewhere in between, so its interval
    /// is its own, known within those bounds.
    own_drops: Option<(u64, Instant, Instant)>,
    cpus: Vec<CpuTimes>,
}

/// What an interval found besides its sample: for the results' details.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Extra {
    pub dropped_in_dut: i64,
    pub reached_victim: u64,
    /// A SYN flood's SYN-ACKs that came back to gen (where they are
    /// dropped): whoever answered, the answers were sent.
    pub answers: Option<u64>,
    /// The filter's own drop count (nftables, xdp-filter), when it has one.
    pub own_drops: Option<u64>,
    /// The same per second, over the interval between the middles of the
    /// commands that read it.
    pub own_drops_per_s: Option<f64>,
    /// The shortest and longest interval the own count can cover: from the
    /// end of the first reading command to the start of the second, and
    /// from the start of the first to the end of the second.
    pub own_secs_min: Option<f64>,
    pub own_secs_max: Option<f64>,
}

impl Path<'_> {
    fn read(&self, gens: Option<&Generator>, setup: &Setup) -> Result<Reading> {
        let (dut, din, dout) = &self.dut;
        let own = |start: Instant| setup.own_drops().map(|n| n.map(|n| (n, start, Instant::now())));
        Ok(Reading {
            at: Instant::now(),
            sent: gens.map_or(Ok(0), Generator::sent)?,
            dut_rx: dut.link_stats(din)?.rx_packets,
            dut_tx: dut.link_stats(dout)?.tx_packets,
            victim_took: self.victim_took()?,
            gen_rx: self.gen.0.link_stats(&self.gen.1)?.rx_packets,
            transactions: self.rr.transactions(),
            own_drops: own(Instant::now())?,
            cpus: cpu::sample()?,
        })
    }

    fn victim_took(&self) -> Result<u64> {
        let s = self.victim.snmp()?;
        if self.syn {
            Ok(s.value("TcpExt", "SyncookiesSent")? + s.value("TcpExt", "ListenDrops")?)
        } else {
            s.value("Udp", "NoPorts")
        }
    }

    /// Paces (or starts) the flood at `rate`.
    fn pace(&self, gens: &mut Option<Generator>, rate: Rate) -> Result<()> {
        let pps = match rate {
            Rate::Pps(0) => {
                // No flood: nothing started yet, or held back.
                return gens.as_ref().map_or(Ok(()), |g| g.set_rate(PAUSED));
            }
            Rate::Pps(r) => r,
            Rate::Max => 0,
        };
        match gens {
            Some(g) => g.set_rate(pps),
            None => {
                let g = measure::start_generators(self.gen.0, &self.gen.1, self.traffic, self.gen_cpus, pps)?;
                g.set_burst(self.burst)?;
                *gens = Some(g);
                Ok(())
            }
        }
    }

    /// Every rate of `rates` in turn under `setup`: `t.warmup` seconds,
    /// then an interval of the rate's seconds ([`Rate::seconds`]), and
    /// with `profile` a twin interval with `xnf profile` attached (not at
    /// rate 0: no flood, nothing to divide by); `each` is told which step
    /// is measured.
    pub fn measure(
        &self,
        l: &Labels,
        setup: &Setup,
        rates: &[Rate],
        t: &Timing,
        profile: Option<&xnf_profile::Options>,
        each: &mut dyn FnMut(usize, bool),
    ) -> Result<Vec<Measured>> {
        let mut gens: Option<Generator> = None;
        let mut out = Vec::new();
        for (i, &rate) in rates.iter().enumerate() {
            each(i, false);
            self.pace(&mut gens, rate)?;
            std::thread::sleep(Duration::from_secs_f64(t.warmup));
            let seconds = rate.seconds(t);
            let (sample, extra) = self.interval(l, kind(rate, i), gens.as_ref(), setup, seconds)?;
            let twin = match profile {
                Some(o) if rate != Rate::Pps(0) => {
                    each(i, true);
                    let session = xnf_profile::Session::start(o)?;
                    let (twin, _) = self.interval(l, kind(rate, i), gens.as_ref(), setup, seconds)?;
                    Some((twin, session.stop()?))
                }
                _ => None,
            };
            out.push(Measured { sample, extra, twin });
        }
        if let Some(g) = gens {
            // Paused first: a stop waits for the live-frame call in progress.
            g.set_rate(PAUSED)?;
            g.stop()?;
        }
        Ok(out)
    }

    fn interval(&self, l: &Labels, kind: SampleKind, gens: Option<&Generator>, setup: &Setup, seconds: f64) -> Result<(Sample, Extra)> {
        let a = self.read(gens, setup)?;
        std::thread::sleep(Duration::from_secs_f64(seconds));
        let b = self.read(gens, setup)?;
        anyhow::ensure!(self.rr.alive(), "the victim's request/response service stopped (its error follows when it is stopped)");
        Ok(sample(l, kind, &a, &b, self.syn))
    }
}

/// One flood rate's interval, and its profiled twin with the profile.
pub struct Measured {
    pub sample: Sample,
    pub extra: Extra,
    pub twin: Option<(Sample, xnf_profile::Profile)>,
}

/// Paced rates (and no flood) are steps of a load curve, step i+1;
/// the generator's maximum is the experiment's `Max` sample, the one the
/// summary and the ratios are made of.
fn kind(rate: Rate, i: usize) -> SampleKind {
    match rate {
        Rate::Pps(r) => SampleKind::Load { offered_pps: r as f64, step: i as u32 + 1 },
        Rate::Max => SampleKind::Max,
    }
}

fn sample(l: &Labels, kind: SampleKind, a: &Reading, b: &Reading, syn: bool) -> (Sample, Extra) {
    let secs = b.at.duration_since(a.at).as_secs_f64();
    let sent = b.sent - a.sent;
    let transactions = b.transactions - a.transactions;
    let reached = b.victim_took - a.victim_took;
    // Frames that entered dut and did not leave towards the victim: the
    // filter's drops (dut's own traffic, ARP and ND, is a handful).
    let in_dut = (b.dut_rx - a.dut_rx) as i64 - (b.dut_tx - a.dut_tx) as i64;
    // Only flood frames count: without a flood, what dut kept of its own
    // traffic (a few ARP or ND frames) is no drop.
    let dropped = (in_dut.max(0) as u64 + reached).min(sent);
    // Each transaction puts one request into dut's ingress.
    let flood_in = (b.dut_rx - a.dut_rx) as i64 - transactions as i64;
    let loss = Loss { gen_to_dut: sent as i64 - flood_in, in_dut, dut_to_sink: reached as i64 };
    let mut s = Sample::of(l, kind, secs, (sent, dropped), loss, &cpu::delta(&b.cpus, &a.cpus));
    // Without a flood nothing is dropped: no cost per frame (JSON has no NaN).
    for v in [&mut s.ns_per_packet, &mut s.softirq_ns_per_packet] {
        if !v.is_finite() {
            *v = 0.0;
        }
    }
    s.loss_pct = if sent > 0 { s.loss_pct.max(0.0) } else { 0.0 };
    s.transactions_per_s = Some(transactions as f64 / secs);
    let own = a.own_drops.zip(b.own_drops);
    let secs = |from: Instant, to: Instant| to.saturating_duration_since(from).as_secs_f64();
    let own_secs_min = own.map(|((_, _, a_end), (_, b_start, _))| secs(a_end, b_start));
    let own_secs_max = own.map(|((_, a_start, _), (_, _, b_end))| secs(a_start, b_end));
    let mid = |start: Instant, end: Instant| start + end.saturating_duration_since(start) / 2;
    let own_drops_per_s = own.map(|((x, a0, a1), (y, b0, b1))| (y - x) as f64 / secs(mid(a0, a1), mid(b0, b1)));
    let answers = syn.then(|| (b.gen_rx - a.gen_rx).saturating_sub(transactions));
    let own_drops = own.map(|((x, ..), (y, ..))| y - x);
    (s, Extra { dropped_in_dut: in_dut, reached_victim: reached, answers, own_drops, own_drops_per_s, own_secs_min, own_secs_max })
}
