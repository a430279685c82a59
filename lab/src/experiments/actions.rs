//! `xnf lab actions`: the raw XDP verdicts on dut's ingress — drop, pass,
//! TX, redirect to another port, redirect to another CPU — the xdp-bench /
//! seed 003 §4 set, with the Linux stack dropping the same frames as the
//! baseline. They are the upper bounds every network function is compared
//! against.
//!
//! Where each variant's frames are counted:
//! - xdp-drop, xdp-pass: by the program (pass then costs the stack's
//!   receive up to its route lookup, which drops the frame: dut does not
//!   forward in this experiment);
//! - xdp-tx: by an XDP sink on gen's interface, which the frames come back
//!   to (it replaces gen's pass program for this variant, so the bound is
//!   not lowered by gen's stack receiving frames addressed elsewhere);
//! - xdp-redirect: at the sink, behind dut's other port;
//! - xdp-cpumap: by a CPUMAP program on the other CPU, which drops them;
//! - linux-drop: by an nftables rule in prerouting at raw priority (the
//!   earliest the IP stack can drop), dut's ingress passing frames up.


use anyhow::{ensure, Context, Result};
use serde::Serialize;

use crate::engine::measure::{self, Labels, Probe, Received, Timing};
use crate::engine::progress::Progress;
use crate::engine::results::{Point, Results};
use crate::engine::topology::BuiltTopology;
use crate::engine::{nft, ActionKind, LabAttachment};

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
        measure::check_options(self.runs, &self.timing, &self.sizes, self.ipv6, self.zero_loss, self.load_steps)?;
        measure::check_generator(&[self.flows], &[], self.cpu, ncpu)?;
        ensure!(!self.variants.contains(&Variant::XdpCpumap) || ncpu >= 2, "xdp-cpumap needs a second CPU");
        ensure!(!self.variants.is_empty(), "--variants: name at least one");
        if self.variants.contains(&Variant::LinuxDrop) {
            nft::require("linux-drop")?;
        }
        Ok(())
    }
}

/// The nftables rule of linux-drop, and how to read its counter.
const LINUX_DROP: &str = "table inet xnfraw {\n\tcounter dropped { }\n\tchain pre {\n\t\ttype filter hook prerouting priority raw; policy accept;\n\t\tudp dport 9 counter name \"dropped\" drop\n\t}\n}\n";

/// A variant set up on dut, removed when dropped.
struct Setup<'a> {
    attachment: LabAttachment,
    nft_in: Option<&'a xnf_netns::Netns>,
}

impl Drop for Setup<'_> {
    fn drop(&mut self) {
        if let Some(ns) = self.nft_in {
            let _ = nft::nft(ns, &["delete", "table", "inet", "xnfraw"], None);
        }
    }
}

fn setup<'a>(t: &'a BuiltTopology, v: Variant, cpu: usize) -> Result<Setup<'a>> {
    let roles = t.roles()?;
    let (dut, din) = t.endpoint(&roles.dut_in)?;
    let (_, dout) = t.endpoint(&roles.dut_out)?;
    let remote = (cpu as u32 + 1) % crate::engine::cpu::sample()?.len() as u32;
    let act = |k| LabAttachment::action(dut, &din, k, &dout, remote);
    Ok(match v {
        Variant::XdpDrop => Setup { attachment: act(ActionKind::Drop)?, nft_in: None },
        Variant::XdpPass => Setup { attachment: act(ActionKind::Pass)?, nft_in: None },
        Variant::XdpTx => Setup { attachment: act(ActionKind::Tx)?, nft_in: None },
        Variant::XdpRedirect => Setup { attachment: act(ActionKind::Redirect)?, nft_in: None },
        Variant::XdpCpumap => Setup { attachment: act(ActionKind::Cpumap)?, nft_in: None },
        Variant::LinuxDrop => {
            let attachment = LabAttachment::pass(dut, &din)?;
            nft::nft(dut, &["-f", "-"], Some(LINUX_DROP))?;
            Setup { attachment, nft_in: Some(dut) }
        }
    })
}

fn measure_variant(t: &BuiltTopology, o: &Options, l: &Labels, v: Variant, res: &mut Results, zl: &mut Vec<(String, Point, f64)>, pg: &mut Progress) -> Result<()> {
    let roles = t.roles()?;
    let setup = setup(t, v, o.cpu)?;
    let (gen_ns, gen_if) = t.endpoint(&roles.gen)?;
    let (dut, din) = t.endpoint(&roles.dut_in)?;
    let (_, dout) = t.endpoint(&roles.dut_out)?;
    let gens = measure::start_generators(gen_ns, &gen_if, &measure::udp_traffic(t, &l.point)?, &[o.cpu], 0)?;
    let a = &setup.attachment;
    let received: Received = match v {
        Variant::XdpDrop | Variant::XdpPass => Box::new(|| Ok(a.action_counts()?.0)),
        Variant::XdpCpumap => Box::new(|| Ok(a.action_counts()?.1)),
        Variant::XdpTx => {
            let back = t.attachment(&roles.gen)?;
            Box::new(|| back.packets())
        }
        Variant::XdpRedirect => {
            let sink = t.attachment(&roles.sink)?;
            Box::new(|| sink.packets())
        }
        Variant::LinuxDrop => Box::new(|| nft::counter_packets(&nft::nft(dut, &["list", "counter", "inet", "xnfraw", "dropped"], None)?)),
    };
    let probe = Probe { gens: &gens, dut_in: (dut, din), dut_out: (v == Variant::XdpRedirect).then_some((dut, dout)), received, on_read: None };
    measure::record(res, zl, l, measure::variant(&probe, l, &o.timing, o.load_steps, o.zero_loss, pg)?);
    drop(probe);
    gens.stop()?;
    Ok(())
}

pub fn run(o: &Options, lines: &mut dyn FnMut(&str)) -> Result<Results> {
    let ncpu = crate::engine::cpu::sample()?.len();
    o.validate(ncpu)?;
    let spec = crate::engine::experiment_topology(&o.topology, lines)?;
    let points: Vec<Point> = o.sizes.iter().map(|&size| Point { size, flows: o.flows, ipv6: o.ipv6, routes: 0, queues: 1, netfilter: false }).collect();
    let per_variant = measure::planned_seconds(&o.timing, o.load_steps, o.zero_loss.is_some());
    let mut pg = Progress::new(per_variant * (points.len() * o.variants.len() * o.runs as usize) as f64);
    pg.message(&format!("building topology `{}`", o.topology));
    let mut t = BuiltTopology::build(&spec, &mut |m| pg.message(m))?;
    let gen_ep = spec.roles.as_ref().map(|r| r.gen.clone()).unwrap_or_default();
    // No variant needs dut's kernel to forward, and with forwarding on
    // xdp-pass would measure kernel forwarding: off, the stack drops the
    // passed frames after its route lookup (not for this host), as it does
    // under xdp-bench's pass.
    let (dut, _) = t.endpoint(&spec.roles.as_ref().context("no [roles]")?.dut_in)?;
    dut.sysctl_set("net.ipv4.ip_forward", "0")?;
    dut.sysctl_set("net.ipv6.conf.all.forwarding", "0")?;
    let mut res = Results::new("actions", o);
    let mut zl = Vec::new();
    for (pi, point) in points.iter().enumerate() {
        for run in 0..o.runs {
            for v in measure::alternated(&o.variants, run) {
                let l = Labels { variant: v.name().into(), point: point.clone(), run };
                pg.set_prefix(format!("point {}/{} ({}), run {}/{}, {}", pi + 1, points.len(), point.label(), run + 1, o.runs, v.name()));
                if v == Variant::XdpTx {
                    t.replace_function(&gen_ep, LabAttachment::sink)?;
                }
                measure_variant(&t, o, &l, v, &mut res, &mut zl, &mut pg)?;
                if v == Variant::XdpTx {
                    t.replace_function(&gen_ep, LabAttachment::pass)?;
                }
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
