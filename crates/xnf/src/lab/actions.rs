//! `xnf lab actions`: the raw XDP verdicts on dut's ingress — drop, pass,
//! TX, redirect to another port, redirect to another CPU — the xdp-bench /
//! seed 003 §4 set, with the Linux stack dropping the same frames as the
//! baseline. They are the upper bounds every network function is compared
//! against.
//!
//! Where each variant's frames are counted:
//! - xdp-drop, xdp-pass: by the program (pass then costs the stack's
//!   receive of a UDP datagram nobody listens to, on the same CPU);
//! - xdp-tx: at gen's interface, which the frames come back to;
//! - xdp-redirect: at the sink, behind dut's other port;
//! - xdp-cpumap: by a CPUMAP program on the other CPU, which drops them;
//! - linux-drop: by an nftables rule in prerouting at raw priority (the
//!   earliest the IP stack can drop), dut's ingress passing frames up.

use std::net::IpAddr;

use anyhow::{ensure, Context, Result};
use serde::Serialize;
use xnf_bpf::gen::GenConfig;
use xnf_packet::PacketBuilder;

use super::measure::{self, Generators, Labels, Probe, Received, Timing};
use super::progress::Progress;
use super::results::{Point, Results};
use super::topology::{BuiltTopology, TopologySpec};
use super::{ActionKind, LabAttachment};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    XdpDrop,
    XdpPass,
    XdpTx,
    XdpRedirect,
    XdpCpumap,
    LinuxDrop,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::XdpDrop => "xdp-drop",
            Variant::XdpPass => "xdp-pass",
            Variant::XdpTx => "xdp-tx",
            Variant::XdpRedirect => "xdp-redirect",
            Variant::XdpCpumap => "xdp-cpumap",
            Variant::LinuxDrop => "linux-drop",
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Options {
    pub topology: String,
    pub runs: u32,
    pub timing: Timing,
    pub sizes: Vec<u32>,
    pub flows: u32,
    pub ipv6: bool,
    pub variants: Vec<Variant>,
    /// The generator's CPU; xdp-cpumap sends to the next one.
    pub cpu: usize,
    pub zero_loss: Option<f64>,
    pub load_steps: u32,
}

impl Options {
    pub fn validate(&self, ncpu: usize) -> Result<()> {
        ensure!(self.runs >= 1, "--runs must be at least 1");
        ensure!(self.timing.seconds > 0.0 && self.timing.warmup >= 0.0, "--seconds must be positive and --warmup not negative");
        ensure!(self.timing.trial_seconds > 0.0, "--trial-seconds must be positive");
        for &s in &self.sizes {
            ensure!(s == 0 || (64..=1518).contains(&s), "--size {s}: sizes must be 64..=1518 bytes (wire size with FCS) or imix");
            ensure!(!self.ipv6 || s == 0 || s >= 66, "--size {s}: IPv6 UDP needs at least 66 bytes on the wire");
        }
        ensure!((1..=64511).contains(&self.flows), "--flows {}: flows must be 1..=64511 (distinct UDP source ports)", self.flows);
        ensure!(self.cpu < ncpu, "--cpu {} does not exist (this machine has {ncpu})", self.cpu);
        ensure!(!self.variants.contains(&Variant::XdpCpumap) || ncpu >= 2, "xdp-cpumap needs a second CPU");
        ensure!(!self.variants.is_empty(), "--variants: name at least one");
        if let Some(tol) = self.zero_loss {
            ensure!((0.0..100.0).contains(&tol), "--zero-loss tolerance must be in [0, 100) percent");
        }
        if self.variants.contains(&Variant::LinuxDrop) {
            ensure!(
                std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()).chain(["/usr/sbin".into()]).any(|d| d.join("nft").is_file()),
                "linux-drop needs nft (apt-get install nftables; `make deps` installs it)"
            );
        }
        Ok(())
    }
}

/// The nftables rule of linux-drop, and how to read its counter.
const LINUX_DROP: &str = "table inet xnfraw {\n\tcounter dropped { }\n\tchain pre {\n\t\ttype filter hook prerouting priority raw; policy accept;\n\t\tudp dport 9 counter name \"dropped\" drop\n\t}\n}\n";

fn nft(ns: &xnf_netns::Netns, args: &[&str], stdin: Option<&str>) -> Result<String> {
    use std::io::Write;
    let mut c = ns.command("nft");
    c.args(args).stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let mut child = c.spawn().context("running nft")?;
    if let Some(text) = stdin {
        child.stdin.take().context("nft stdin")?.write_all(text.as_bytes())?;
    }
    drop(child.stdin.take());
    let out = child.wait_with_output()?;
    ensure!(out.status.success(), "nft {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Packets of `counter dropped { packets N bytes M }` in `nft list counter` output.
fn nft_packets(text: &str) -> Result<u64> {
    let mut words = text.split_whitespace();
    while let Some(w) = words.next() {
        if w == "packets" {
            return words.next().and_then(|n| n.parse().ok()).context("nft counter: no number after `packets`");
        }
    }
    anyhow::bail!("nft counter output has no packet count: {text}")
}

/// A variant set up on dut, removed when dropped.
struct Setup<'a> {
    attachment: LabAttachment,
    nft_in: Option<&'a xnf_netns::Netns>,
}

impl Drop for Setup<'_> {
    fn drop(&mut self) {
        if let Some(ns) = self.nft_in {
            let _ = nft(ns, &["delete", "table", "inet", "xnfraw"], None);
        }
    }
}

fn setup<'a>(t: &'a BuiltTopology, v: Variant, cpu: usize) -> Result<Setup<'a>> {
    let roles = t.roles()?;
    let (dut, din) = t.endpoint(&roles.dut_in)?;
    let (_, dout) = t.endpoint(&roles.dut_out)?;
    let remote = (cpu as u32 + 1) % super::cpu::sample()?.len() as u32;
    let act = |k| LabAttachment::action(dut, &din, k, &dout, remote);
    Ok(match v {
        Variant::XdpDrop => Setup { attachment: act(ActionKind::Drop)?, nft_in: None },
        Variant::XdpPass => Setup { attachment: act(ActionKind::Pass)?, nft_in: None },
        Variant::XdpTx => Setup { attachment: act(ActionKind::Tx)?, nft_in: None },
        Variant::XdpRedirect => Setup { attachment: act(ActionKind::Redirect)?, nft_in: None },
        Variant::XdpCpumap => Setup { attachment: act(ActionKind::Cpumap)?, nft_in: None },
        Variant::LinuxDrop => {
            let attachment = LabAttachment::pass(dut, &din)?;
            nft(dut, &["-f", "-"], Some(LINUX_DROP))?;
            Setup { attachment, nft_in: Some(dut) }
        }
    })
}

fn template(t: &BuiltTopology, p: &Point) -> Result<GenConfig> {
    let roles = t.roles()?;
    let (src, dst): (IpAddr, IpAddr) = (t.addr(&roles.gen, p.ipv6)?, t.addr(&roles.sink, p.ipv6)?);
    let (len, sizes) = match p.size {
        0 => (1514, xnf_bpf::gen::imix_sequence(if p.ipv6 { 62 } else { 60 })),
        s => (s as usize - 4, Vec::new()),
    };
    let frame = PacketBuilder::ethernet(t.mac(&roles.gen)?, t.mac(&roles.dut_in)?).ip(src, dst).udp(1024, 9).frame_len(len).try_build()?;
    Ok(GenConfig { template: frame, ipv6: p.ipv6, flows: p.flows, base_sport: 1024, sizes, ..Default::default() })
}

fn measure_variant(t: &BuiltTopology, o: &Options, l: &Labels, v: Variant, res: &mut Results, zl: &mut Vec<(String, Point, f64)>, pg: &mut Progress) -> Result<()> {
    let roles = t.roles()?;
    let setup = setup(t, v, o.cpu)?;
    let (gen_ns, gen_if) = t.endpoint(&roles.gen)?;
    let (dut, din) = t.endpoint(&roles.dut_in)?;
    let (_, dout) = t.endpoint(&roles.dut_out)?;
    let gens = Generators::start(gen_ns, &gen_if, &template(t, &l.point)?, &[o.cpu], 0)?;
    let a = &setup.attachment;
    let received: Received = match v {
        Variant::XdpDrop | Variant::XdpPass => Box::new(|| Ok(a.action_counts()?.0)),
        Variant::XdpCpumap => Box::new(|| Ok(a.action_counts()?.1)),
        Variant::XdpTx => Box::new(|| Ok(gen_ns.link_stats(&gen_if)?.rx_packets)),
        Variant::XdpRedirect => {
            let sink = t.attachment(&roles.sink)?;
            Box::new(|| sink.packets())
        }
        Variant::LinuxDrop => Box::new(|| nft_packets(&nft(dut, &["list", "counter", "inet", "xnfraw", "dropped"], None)?)),
    };
    let probe = Probe { gens: &gens, dut_in: (dut, din), dut_out: (v == Variant::XdpRedirect).then_some((dut, dout)), received };
    pg.message("full speed");
    let max = measure::at_full_speed(&probe, l, &o.timing)?;
    let top = max.sent as f64 / max.seconds;
    res.samples.push(max);
    if o.load_steps > 0 {
        res.samples.extend(measure::load_curve(&probe, l, &o.timing, top, o.load_steps, &mut |m| pg.message(m))?);
    }
    if let Some(tol) = o.zero_loss {
        let (r, s) = measure::zero_loss(&probe, l, &o.timing, top, tol, &mut |m| pg.message(m))?;
        res.samples.extend(s);
        zl.push((l.variant.clone(), l.point.clone(), r.rate));
    }
    drop(probe);
    gens.stop()?;
    Ok(())
}

pub fn run(o: &Options, lines: &mut dyn FnMut(&str)) -> Result<Results> {
    let ncpu = super::cpu::sample()?.len();
    o.validate(ncpu)?;
    let spec = TopologySpec::load(&o.topology)?;
    spec.roles.as_ref().context("the topology needs a [roles] table (gen, dut_in, dut_out, sink)")?;
    for name in xnf_netns::cleanup_stale()? {
        lines(&format!("removed {name}, left by a lab or test run that was killed"));
    }
    let points: Vec<Point> = o.sizes.iter().map(|&size| Point { size, flows: o.flows, ipv6: o.ipv6, routes: 0, queues: 1, netfilter: false }).collect();
    let per_variant = measure::planned_seconds(&o.timing, o.load_steps, o.zero_loss.is_some());
    let mut pg = Progress::new(per_variant * (points.len() * o.variants.len() * o.runs as usize) as f64);
    pg.message(&format!("building topology `{}`", o.topology));
    let t = BuiltTopology::build(&spec, &mut |m| pg.message(m))?;
    let mut res = Results::new("actions", o);
    let mut zl = Vec::new();
    for (pi, point) in points.iter().enumerate() {
        for run in 0..o.runs {
            let mut order = o.variants.clone();
            if run % 2 == 1 {
                order.reverse();
            }
            for v in order {
                let l = Labels { variant: v.name().into(), point: point.clone(), run };
                pg.set_prefix(format!("point {}/{} ({}), run {}/{}, {}", pi + 1, points.len(), point.label(), run + 1, o.runs, v.name()));
                measure_variant(&t, o, &l, v, &mut res, &mut zl, &mut pg)?;
                pg.advance(per_variant);
            }
        }
    }
    drop(t);
    pg.finish();
    res.summarize(&zl);
    for v in ["xdp-drop", "xdp-pass", "xdp-tx", "xdp-redirect", "xdp-cpumap"] {
        res.add_ratios(v, "linux-drop");
    }
    res.notes.push(format!(
        "veth: the generator, dut's XDP program and the action's receiver share CPU {} (softirq on the sending CPU); xdp-cpumap hands frames to CPU {}.",
        o.cpu,
        (o.cpu + 1) % ncpu
    ));
    Ok(res)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_nft_counter() {
        let text = "table inet xnfraw {\n\tcounter dropped {\n\t\tpackets 1234 bytes 5678\n\t}\n}\n";
        assert_eq!(nft_packets(text).unwrap(), 1234);
        assert!(nft_packets("table inet x {}").is_err());
    }
}
