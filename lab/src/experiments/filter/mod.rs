//! `xnf lab filter`: the XDP paper §5.1, Fig. 5 — a victim's TCP transactions
//! per second under a UDP flood of rising rate, with no filter and with
//! each filter dropping the flood.
//!
//! **Where things are** (the built-in `line`, gen → dut → sink):
//! - the victim is the sink namespace: its stack serves TCP
//!   request/response ([`rr`], netperf TCP_RR style) on its address; the
//!   sink's counting XDP program is replaced by XDP_PASS for this;
//! - the client is in gen, so its requests take the flood's path;
//! - the flood comes from the lab's in-kernel generator on gen: 64-byte
//!   UDP from many sources in 198.19.0.0/16 (or spread over a blocklist)
//!   to a port the victim does not serve, paced at each rate of `--rates`,
//!   then as fast as it goes (`max`);
//! - **the filters sit on dut's ingress**, dut standing for the host or
//!   hypervisor in front of the victim (the XDP paper §5.1: "the filter can even
//!   be installed on the hypervisor"). On the victim's own ingress every
//!   flood frame would first cost dut a kernel forward (about 1 µs on the
//!   generator's CPU), a cost no filter behind it can remove: every
//!   variant would stop at dut's forwarding rate and look alike. Without a
//!   filter (`none`) dut forwards the flood and the victim's UDP stack
//!   drops it (no socket on the port), as the seed's unprotected server does.
//!
//! **CPUs**, as the seed's machines: the generator has a CPU of its own
//! (`--cpu`, default the last one) — the attacking machine. The victim's
//! side is the other CPU (`--app-cpu`, default the first): dut's ingress
//! is served there by its NAPI loop, threaded and pinned at real-time
//! priority (`--rx-cpu`, see [`napi`]: the receive queue whose interrupt
//! is on that core), and the server and its client run there too, blocking
//! in `read`; whatever dut forwards to the victim is received on that CPU
//! as well. So the flood and the victim's requests share one receive ring
//! and one core, as on the seed's server (one receive queue, "all packets
//! are processed by the same CPU core"); the flood takes from the victim
//! exactly the CPU its filtering costs, and what overflows the ring
//! (requests included) is lost.
//!
//! **Measured** per variant, run and flood rate (one interval after a
//! warm-up; see [`probe`] for the sample's fields): the flood rate actually
//! sent, the victim's transactions per second, the flood frames discarded
//! and where, CPU time per discarded frame. Per variant: transactions vs
//! flood rate (the figure), the rate at which they fall to half of the
//! unflooded rate, drops per second and CPU per dropped frame at the
//! maximum rate; ratios of the drop rates at the maximum (xnf over each
//! other variant). Variants alternate within each run (reversed every
//! other run). Results are the lab's (`--json` → `xnf lab report`).
//!
//! **`--flood syn`**: TCP SYNs to a port the victim listens on (never
//! accepting), answered with SYN cookies by the victim's kernel (`none`),
//! xnf's syn-cookie rule in XDP, or dut's kernel SYNPROXY; the answers
//! are dropped in XDP on gen's interface, the same for every variant.

pub mod flood;
pub mod napi;
pub mod probe;
pub mod rr;
pub mod summary;
pub mod variants;

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{ensure, Context, Result};
use clap::Args;
use serde::Serialize;

use crate::engine::driver::{alternated, variant_name};
use crate::engine::params::{Axis, Param, Point};
use crate::engine::profiling::{ProfileArgs, ProfiledRun};
use crate::engine::progress::Progress;
use crate::engine::results::{Labels, Results};
use crate::engine::topology::{BuiltTopology, RouteSpec, TopologySpec};
use crate::engine::{nft, LabAttachment, NfGuard};
use flood::Flood;
use variants::{Setup, Variant};

/// The victim's service port (TCP).
const SERVICE_PORT: u16 = 5001;

/// What the flood is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum FloodKind {
    /// 64-byte UDP to a port the victim does not serve: filters drop it.
    #[default]
    Udp,
    /// TCP SYNs to a port the victim listens on (and never accepts from):
    /// the victim's kernel, dut's SYNPROXY or xnf's syn-cookie rule answers
    /// each with a SYN cookie.
    Syn,
}

/// A flood rate: frames per second, or as fast as the generator goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rate {
    Pps(u64),
    Max,
}

impl Rate {
    /// As the command line and the results write it: `250000`, `max`.
    pub fn text(self) -> String {
        match self {
            Rate::Max => "max".into(),
            Rate::Pps(r) => r.to_string(),
        }
    }
}

impl Serialize for Rate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text())
    }
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Rate::Max => f.write_str("max"),
            Rate::Pps(r) => write!(f, "{:.2} Mpps", *r as f64 / 1e6),
        }
    }
}

/// `max`, or frames per second with an optional k / M suffix (250k, 1.5M).
pub fn parse_rate(s: &str) -> Result<Rate, String> {
    if s.eq_ignore_ascii_case("max") {
        return Ok(Rate::Max);
    }
    let (num, mult) = match s.char_indices().last() {
        Some((i, 'k' | 'K')) => (&s[..i], 1e3),
        Some((i, 'm' | 'M')) => (&s[..i], 1e6),
        _ => (s, 1.0),
    };
    match num.parse::<f64>() {
        Ok(v) if v >= 0.0 && (v * mult).is_finite() => Ok(Rate::Pps((v * mult).round() as u64)),
        _ => Err(format!("`{s}` is not a rate: frames per second (250000, 250k, 1.5M) or max")),
    }
}

/// `xnf lab filter`.
#[derive(Args, Clone, Debug, Serialize)]
pub struct FilterArgs {
    /// Flood rates in frames per second (k and M suffixes), in the order
    /// measured; `max` is as fast as the generator goes.
    #[arg(long, value_delimiter = ',', default_value = "0,250k,500k,1M,2M,max", value_parser = parse_rate, value_name = "PPS|max[,...]")]
    pub rates: Vec<Rate>,
    /// The flood: udp, or syn (a SYN flood; variants none, xnf, nft-synproxy).
    #[arg(long, value_enum, default_value_t = FloodKind::Udp)]
    pub flood: FloodKind,
    /// Variants to compare [default: none,xnf,nft-ingress,nft-raw, and
    /// xdp-filter when scripts/peers.sh has built it; with --flood syn:
    /// none,xnf,nft-synproxy].
    #[arg(long, value_enum, value_delimiter = ',')]
    pub variants: Option<Vec<Variant>>,
    /// Blocklist sizes (a list sweeps): 0 drops the flood by its UDP port;
    /// N > 0 drops by a list of N prefixes shaped like the BGP table, the
    /// flood's sources spread over it (xnf: an LPM list; nftables: an
    /// interval set).
    #[arg(long, value_delimiter = ',', default_value = "0", value_name = "N[,N...]")]
    pub blocklist: Vec<u64>,
    /// Paced flood frames sent back to back (1..=64; 1: evenly spaced).
    /// On veth the receiver runs on the sending CPU: evenly spaced frames
    /// are polled one at a time, at a cost per frame a NIC's batches do not
    /// have, and the rates asked for are not reached.
    #[arg(long, default_value_t = 32)]
    pub burst: u64,
    /// Flood source addresses (one flow each).
    #[arg(long, default_value_t = 1024)]
    pub sources: u32,
    /// The flood's UDP destination port (one the victim does not serve).
    #[arg(long, default_value_t = 9)]
    pub port: u16,
    /// Repetitions; variants alternate within each.
    #[arg(long, default_value_t = 3)]
    pub runs: u32,
    /// Measured seconds per flood rate.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Seconds at each rate before it is measured (discarded).
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// The generator's CPU (the flood is received on it too) [default: the last].
    #[arg(long)]
    pub cpu: Option<usize>,
    /// The CPU of the victim's server and its client [default: the first
    /// one other than the generator's].
    #[arg(long)]
    pub app_cpu: Option<usize>,
    /// The CPU that serves dut's ingress (its threaded NAPI loop, at
    /// real-time priority: the receive queue's core) [default: the
    /// application's, so the flood is received where the victim runs].
    #[arg(long)]
    pub rx_cpu: Option<usize>,
    /// xdp-filter's binary [default: $XNF_PEERS/sbin/xdp-filter, XNF_PEERS
    /// defaulting to /opt/xnf/peers, where scripts/peers.sh builds it].
    #[arg(long, value_name = "PATH")]
    pub xdp_filter: Option<PathBuf>,
    #[command(flatten)]
    #[serde(flatten)]
    pub profiling: ProfileArgs,
    /// Write every sample, the summary, ratios and the curves as JSON (input of `xnf lab report`).
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    pub json: Option<PathBuf>,
    /// Write every sample as CSV.
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    pub csv: Option<PathBuf>,
}

/// The CPUs of the experiment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cpus {
    pub gen: usize,
    pub app: usize,
    pub rx: usize,
}

fn cpus(a: &FilterArgs, ncpu: usize) -> Result<Cpus> {
    let gen = a.cpu.unwrap_or(ncpu.saturating_sub(1));
    ensure!(gen < ncpu, "--cpu {gen} does not exist (this machine has {ncpu})");
    let app = a.app_cpu.unwrap_or(if gen == 0 { 1 % ncpu } else { 0 });
    ensure!(app < ncpu, "--app-cpu {app} does not exist (this machine has {ncpu})");
    let rx = a.rx_cpu.unwrap_or(app);
    ensure!(rx < ncpu, "--rx-cpu {rx} does not exist (this machine has {ncpu})");
    Ok(Cpus { gen, app, rx })
}

impl FilterArgs {
    /// The variants asked for, or the default ones; `say` gets why
    /// xdp-filter is left out of the default.
    fn variants(&self, say: &mut dyn FnMut(&str)) -> Vec<Variant> {
        if let Some(v) = &self.variants {
            return v.clone();
        }
        if self.flood == FloodKind::Syn {
            return vec![Variant::None, Variant::Xnf, Variant::NftSynproxy];
        }
        let mut v = vec![Variant::None, Variant::Xnf, Variant::NftIngress, Variant::NftRaw];
        let unlisted = self.blocklist.iter().all(|&b| b == 0);
        match variants::xdp_filter_binary(self.xdp_filter.as_deref()) {
            Ok(_) if unlisted => v.push(Variant::XdpFilter),
            Ok(_) => say("xdp-filter left out of the default variants: it has no prefix lists (--blocklist)"),
            Err(e) => say(&format!("xdp-filter left out of the default variants: {e}")),
        }
        v
    }

    /// Checks the options before anything is built.
    fn check(&self, variants: &[Variant]) -> Result<()> {
        ensure!(!variants.is_empty(), "--variants: name at least one");
        ensure!(!self.rates.is_empty(), "--rates: give at least one (e.g. 0,1M,max)");
        ensure!(self.runs >= 1, "--runs must be at least 1");
        ensure!((1..=64).contains(&self.burst), "--burst {}: use 1..=64 frames (64 is a live-frame batch)", self.burst);
        ensure!(self.seconds > 0.0 && self.warmup >= 0.0, "--seconds must be positive and --warmup not negative");
        ensure!(self.port != SERVICE_PORT, "--port {}: that is the victim's service port; the flood must go to a port it does not serve", self.port);
        if variants.iter().any(|v| matches!(v, Variant::NftIngress | Variant::NftRaw)) {
            nft::require("nft-ingress and nft-raw")?;
        }
        let syn = self.flood == FloodKind::Syn;
        if syn {
            ensure!(self.blocklist.iter().all(|&b| b == 0), "--flood syn: syn-cookie rules match by port, not by a --blocklist");
            if let Some(v) = variants.iter().find(|v| matches!(v, Variant::NftIngress | Variant::NftRaw | Variant::XdpFilter)) {
                anyhow::bail!("--flood syn: {} would drop the SYNs of real clients too; compare none, xnf and nft-synproxy", variant_name(v));
            }
        }
        if variants.contains(&Variant::NftSynproxy) {
            ensure!(syn, "nft-synproxy answers SYNs: use it with --flood syn");
            nft::require("nft-synproxy")?;
        }
        if variants.contains(&Variant::XdpFilter) {
            ensure!(self.blocklist.iter().all(|&b| b == 0), "xdp-filter matches single addresses, not prefixes: leave it out of --variants with --blocklist");
            variants::xdp_filter_binary(self.xdp_filter.as_deref())?;
        }
        Flood::by_port(self.port, self.sources)?;
        self.profiling.check()
    }
}

/// The parameter of this experiment's points: the blocklist's size.
pub fn blocklist_param() -> Param {
    let mut p = Param::plain("blocklist", &0u64.into());
    p.title = "blocklist size".into();
    p.axis = "prefixes in the blocklist (log scale)".into();
    p.scale = Axis::Log;
    p.unit = ("prefix".into(), "prefixes".into());
    p.names = vec![(0u64.into(), "by port".into())];
    p
}

/// The line with what this experiment needs: routes back to the flood's
/// sources in dut and in the victim (so neither drops them as unroutable
/// and the victim's stack sees them), and the victim's stack receiving.
fn topology(say: &mut dyn FnMut(&str)) -> Result<BuiltTopology> {
    crate::engine::remove_stale(say)?;
    let mut spec = TopologySpec::load("line")?;
    spec.routes.push(RouteSpec { ns: "dut".into(), to: "198.18.0.0/15".into(), via: Some("198.18.0.1".into()), dev: None, count: None });
    spec.routes.push(RouteSpec { ns: "sink".into(), to: "198.18.0.0/15".into(), via: Some("198.18.1.1".into()), dev: None, count: None });
    let mut t = BuiltTopology::build(&spec, say)?;
    let sink = t.roles()?.sink.clone();
    t.replace_function(&sink, LabAttachment::pass)?;
    Ok(t)
}

/// Runs the experiment; `say` gets what is said before measuring starts.
pub fn run(a: &FilterArgs, say: &mut dyn FnMut(&str)) -> Result<Results> {
    // Why xdp-filter is left out is said once the options are accepted: a
    // refusal stays one line.
    let mut left_out = Vec::new();
    let variants = a.variants(&mut |s| left_out.push(s.to_string()));
    a.check(&variants)?;
    let ncpu = crate::engine::cpu::sample()?.len();
    let c = cpus(a, ncpu)?;
    left_out.iter().for_each(|s| say(s));
    let (gen_cpu, app_cpu) = (c.gen, c.app);
    let mut t = topology(say)?;
    let roles = t.roles()?.clone();
    if a.flood == FloodKind::Syn {
        // gen's interface gets the SYN-ACK sink below instead.
        t.remove_function(&roles.gen)?;
    }
    let victim_ip = t.addr(&roles.sink, false)?;
    let (victim, _) = t.endpoint(&roles.sink)?;
    let (gen_ns, gen_if) = t.endpoint(&roles.gen)?;
    let (dut, din) = t.endpoint(&roles.dut_in)?;
    let (_, dout) = t.endpoint(&roles.dut_out)?;
    let rr = rr::RrService::start(victim, SocketAddr::new(victim_ip, SERVICE_PORT), gen_ns, app_cpu, app_cpu)?;
    let dir = TempDir::new()?;
    let mut options = serde_json::to_value(a)?;
    options["variants"] = serde_json::json!(variants.iter().map(variant_name).collect::<Vec<_>>());
    options["cpu"] = gen_cpu.into();
    options["app_cpu"] = app_cpu.into();
    options["rx_cpu"] = c.rx.into();
    let mut res = Results::new("filter", &options, vec![blocklist_param()]);
    let profiled = if a.profiling.profile.is_some() { a.rates.iter().filter(|&&r| r != Rate::Pps(0)).count() as f64 * (a.seconds + 0.5) } else { 0.0 };
    let per_variant = a.rates.len() as f64 * (a.warmup + a.seconds + 0.2) + profiled;
    let profile = a.profiling.options();
    let mut pg = Progress::new(per_variant * (a.blocklist.len() * variants.len() * a.runs as usize) as f64);
    let mut extras = Vec::new();
    for &size in &a.blocklist {
        let point = Point::default().with("blocklist", size);
        let label = res.label(&point);
        pg.message(&format!("preparing the flood ({label})"));
        let mut flood = if size == 0 { Flood::by_port(a.port, a.sources)? } else { Flood::by_blocklist(a.port, size, a.sources, &dir.0)? };
        flood.syn = a.flood == FloodKind::Syn;
        // The SYN flood's port has a listener that never accepts: its
        // queue fills and the victim's kernel answers with cookies.
        let (_listener, _replies) = if flood.syn {
            let at = SocketAddr::new(victim_ip, a.port);
            let l = victim.run(move || std::net::TcpListener::bind(at))?.with_context(|| format!("listening on {at} in the victim"))?;
            let g = NfGuard::filter(gen_ns, std::slice::from_ref(&gen_if), &Flood::reply_sink_rules(), "xnf lab filter's SYN-ACK sink")?;
            (Some(l), Some(g))
        } else {
            (None, None)
        };
        let traffic = flood.traffic(&t, victim_ip)?;
        let path = probe::Path {
            gen: (gen_ns, gen_if.clone()),
            gen_cpu,
            burst: a.burst,
            dut: (dut, din.clone(), dout.clone()),
            victim,
            rr: &rr,
            traffic: &traffic,
            syn: flood.syn,
        };
        for run in 0..a.runs {
            for v in alternated(&variants, run) {
                let l = Labels { variant: variant_name(&v), point: point.clone(), run };
                pg.set_prefix(format!("{label}, run {}/{}, {}", run + 1, a.runs, l.variant));
                pg.message("setting up");
                let setup = Setup::new(v, dut, &din, &flood, a.xdp_filter.as_deref()).with_context(|| l.variant.clone())?;
                // Threaded NAPI needs the NAPI an XDP program brings, and
                // every XDP change makes its thread again.
                napi::threaded(dut, &din)?;
                napi::pin(&din, c.rx)?;
                let say = &mut |i: usize, twin: bool| pg.message(&format!("flood {}{}", a.rates[i], if twin { ", profiling" } else { "" }));
                let measured = path.measure(&l, &setup, &a.rates, (a.warmup, a.seconds), profile.as_ref(), say)?;
                drop(setup);
                for (i, m) in measured.into_iter().enumerate() {
                    if let Some((twin, prof)) = m.twin {
                        res.profiles.push(ProfiledRun::new("filter", &label, &m.sample, &twin, prof, a.profiling.flame.as_deref())?);
                    }
                    extras.push(summary::Interval::of(&m.sample, i, a.rates[i], m.extra));
                    res.samples.push(m.sample);
                }
                pg.advance(per_variant);
            }
        }
    }
    pg.finish();
    rr.stop().context("the victim's request/response service")?;
    summary::finish(&mut res, &variants, extras, c);
    if a.flood == FloodKind::Syn {
        res.notes.push("--flood syn: a discarded frame is a SYN answered with a cookie (by xnf in XDP, by dut's SYNPROXY, or by the victim's kernel; counted at the victim as TcpExt SyncookiesSent + ListenDrops), so drop Mpps is SYNs answered per second and ns/drop the CPU per answer".into());
    }
    Ok(res)
}

/// A folder for the blocklists of one run, removed with everything in it.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<TempDir> {
        let p = std::env::temp_dir().join(format!("xnf-lab-filter-{}", std::process::id()));
        std::fs::create_dir_all(&p).with_context(|| format!("creating {}", p.display()))?;
        Ok(TempDir(p))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `xnf lab filter`: runs it, prints the tables, writes the files asked for.
pub fn main(a: FilterArgs) -> Result<()> {
    let r = run(&a, &mut |line| eprintln!("xnf lab: {line}"))?;
    summary::print(&r);
    crate::engine::profiling::print(&r);
    if let Some(path) = &a.json {
        r.write_json(path)?;
        crate::engine::results::wrote(path);
    }
    if let Some(path) = &a.csv {
        let mut f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        r.write_csv(&mut f)?;
        eprintln!("xnf lab: wrote {}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_read_with_suffixes_and_max() {
        assert_eq!(parse_rate("250k"), Ok(Rate::Pps(250_000)));
        assert_eq!(parse_rate("1.5M"), Ok(Rate::Pps(1_500_000)));
        assert_eq!(parse_rate("0"), Ok(Rate::Pps(0)));
        assert_eq!(parse_rate("MAX"), Ok(Rate::Max));
        assert!(parse_rate("fast").unwrap_err().contains("not a rate"));
        assert!(parse_rate("-1").is_err());
    }

    fn args(list: &[&str]) -> FilterArgs {
        crate::engine::driver::parse_options(list).unwrap()
    }

    #[test]
    fn options_are_checked_naming_the_flag() {
        let a = args(&["--variants", "none"]);
        assert_eq!(a.rates, [Rate::Pps(0), Rate::Pps(250_000), Rate::Pps(500_000), Rate::Pps(1_000_000), Rate::Pps(2_000_000), Rate::Max]);
        a.check(&[Variant::None]).unwrap();
        for (list, want) in [(&["--runs", "0"][..], "--runs"), (&["--port", "5001"][..], "--port 5001"), (&["--sources", "0"][..], "--sources")] {
            let e = args(list).check(&[Variant::None]).unwrap_err().to_string();
            assert!(e.contains(want), "{list:?}: {e}");
        }
        let e = args(&["--blocklist", "1000"]).check(&[Variant::XdpFilter]).unwrap_err().to_string();
        assert!(e.contains("not prefixes"), "{e}");
        let syn = args(&["--flood", "syn"]);
        assert_eq!(syn.variants(&mut |_| {}), [Variant::None, Variant::Xnf, Variant::NftSynproxy]);
        let e = syn.check(&[Variant::NftIngress]).unwrap_err().to_string();
        assert!(e.contains("--flood syn") && e.contains("nft-ingress"), "{e}");
        let e = args(&["--flood", "syn", "--blocklist", "1000"]).check(&[Variant::Xnf]).unwrap_err().to_string();
        assert!(e.contains("--blocklist"), "{e}");
        let e = args(&[]).check(&[Variant::NftSynproxy]).unwrap_err().to_string();
        assert!(e.contains("--flood syn"), "{e}");
        assert_eq!(cpus(&args(&[]), 2).unwrap(), Cpus { gen: 1, app: 0, rx: 0 });
        assert_eq!(cpus(&args(&["--cpu", "0"]), 2).unwrap(), Cpus { gen: 0, app: 1, rx: 1 });
        assert!(cpus(&args(&["--app-cpu", "2"]), 2).is_err());
    }
}
