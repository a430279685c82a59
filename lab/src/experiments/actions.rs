//! `xnf lab actions`: the raw XDP verdicts on dut's ingress — drop, pass,
//! TX, redirect to another port, redirect to another CPU — the xdp-bench /
//! the XDP paper §4 set, with the Linux stack dropping the same frames as the
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

use anyhow::{ensure, Result};
use clap::Args;
use serde::Serialize;

use crate::engine::driver::{Cpus, Experiment, Running};
use crate::engine::measure::{self, Counters, Received};
use crate::engine::params::{self, Param, Point, Value};
use crate::engine::progress::Progress;
use crate::engine::results::Results;
use crate::engine::topology::BuiltTopology;
use crate::engine::{nft, ActionKind, LabAttachment};
use crate::experiments::router::parse_size;

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

/// `xnf lab actions`: its own options.
#[derive(Args, Clone, Debug, Serialize)]
pub struct Actions {
    /// Frame sizes on the wire, FCS included (64..=1518), or imix; a list sweeps.
    #[arg(long = "size", default_value = "64", value_delimiter = ',', value_parser = parse_size, value_name = "BYTES|imix[,...]")]
    pub sizes: Vec<u32>,
    /// Flows (distinct UDP source ports).
    #[arg(long, default_value_t = 4)]
    pub flows: u32,
    /// IPv6 instead of IPv4.
    #[arg(long)]
    pub ipv6: bool,
    /// RX/TX queues per veth = generator CPUs (CPUs 0..N), each queue's
    /// NAPI on a CPU of dut's own where the machine has them (the XDP
    /// paper's Fig. 3: the actions over cores); a list sweeps.
    #[arg(long, default_value = "1", value_delimiter = ',', value_parser = crate::experiments::router::parse_item::<u32>, value_name = "N[,N...]")]
    pub queues: Vec<u32>,
    /// Variants to compare.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "xdp-drop,xdp-pass,xdp-tx,xdp-redirect,xdp-cpumap,linux-drop")]
    pub variants: Vec<Variant>,
}

/// The nftables rule of linux-drop, and how to read its counter.
const LINUX_DROP: &str = "table inet xnfraw {\n\tcounter dropped { }\n\tchain pre {\n\t\ttype filter hook prerouting priority raw; policy accept;\n\t\tudp dport 9 counter name \"dropped\" drop\n\t}\n}\n";

impl crate::engine::driver::VariantName for Variant {
    fn name(&self) -> String {
        crate::engine::driver::variant_name(self)
    }
}

impl Experiment for Actions {
    type Variant = Variant;
    const NAME: &'static str = "actions";
    const ACROSS_HOSTS: bool = true;

    fn places_dut(&self) -> bool {
        true
    }

    fn params(&self) -> Vec<Param> {
        vec![params::size(), params::flows(), params::ipv6(), params::queues()]
    }

    /// Queues change slowest: the topology is rebuilt once per count.
    fn sweep(&self) -> Vec<(&'static str, Vec<Value>)> {
        vec![
            ("queues", params::values(&self.queues)),
            ("size", params::values(&self.sizes)),
            ("flows", params::values(&[self.flows])),
            ("ipv6", params::values(&[self.ipv6])),
        ]
    }

    fn variants(&self) -> Vec<Variant> {
        self.variants.clone()
    }

    fn ratios(&self) -> Vec<(&'static str, &'static str)> {
        ["xdp-drop", "xdp-pass", "xdp-tx", "xdp-redirect", "xdp-cpumap"].map(|v| (v, "linux-drop")).to_vec()
    }

    fn check(&self, cpus: Cpus) -> Result<()> {
        measure::check_sizes(&self.sizes, self.ipv6)?;
        measure::check_generator(&[self.flows], &self.queues, cpus.count)?;
        ensure!(!self.variants.contains(&Variant::XdpCpumap) || cpus.count >= 2, "xdp-cpumap needs a second CPU");
        if self.variants.contains(&Variant::LinuxDrop) {
            nft::require("linux-drop")?;
        }
        Ok(())
    }

    fn built(&mut self, t: &mut BuiltTopology, _: &Progress) -> Result<()> {
        let roles = t.roles()?.clone();
        // No variant needs dut's kernel to forward, and with forwarding on
        // xdp-pass would measure kernel forwarding: off, the stack drops the
        // passed frames after its route lookup (not for this host), as it does
        // under xdp-bench's pass.
        let (dut, _) = t.endpoint(&roles.dut_in)?;
        dut.sysctl_set("net.ipv4.ip_forward", "0")?;
        dut.sysctl_set("net.ipv6.conf.all.forwarding", "0")?;
        // xdp-tx's frames come back to gen, counted there by an XDP sink
        // instead of gen's pass program, so the bound is not lowered by gen's
        // stack receiving frames addressed elsewhere. No other variant sends
        // anything to gen.
        t.set_function(&roles.gen, crate::engine::topology::FunctionKind::Sink)
    }

    fn set_up<'a>(&'a self, t: &'a BuiltTopology, _: &Point, v: Variant, cpus: Cpus, _: &Progress) -> Result<Box<dyn Running + 'a>> {
        let roles = t.roles()?;
        let (dut, din) = t.endpoint(&roles.dut_in)?;
        let (_, dout) = t.endpoint(&roles.dut_out)?;
        let remote = ((cpus.gen + 1) % cpus.count) as u32;
        let act = |k| LabAttachment::action(dut, &din, k, &dout, remote);
        let (attachment, nft_in) = match v {
            Variant::XdpDrop => (act(ActionKind::Drop)?, None),
            Variant::XdpPass => (act(ActionKind::Pass)?, None),
            Variant::XdpTx => (act(ActionKind::Tx)?, None),
            Variant::XdpRedirect => (act(ActionKind::Redirect)?, None),
            Variant::XdpCpumap => (act(ActionKind::Cpumap)?, None),
            Variant::LinuxDrop => {
                let attachment = LabAttachment::pass(dut, &din)?;
                nft::nft(dut, &["-f", "-"], Some(LINUX_DROP))?;
                (attachment, Some(dut))
            }
        };
        Ok(Box::new(Setup { v, t, attachment, nft_in }))
    }

    fn finish(&mut self, cpus: Cpus, res: &mut Results) -> Result<()> {
        res.notes.push(format!(
            "veth, at points where dut shares the generator's CPU (--dut-cpu shared, or no CPU left for it): the generator, dut's XDP program and the action's receiver share CPU {} (softirq on the sending CPU). xdp-cpumap hands frames to CPU {}, which is dut's own where it has one.",
            cpus.gen,
            (cpus.gen + 1) % cpus.count
        ));
        Ok(())
    }
}

/// A variant set up on dut, removed when dropped.
struct Setup<'a> {
    v: Variant,
    t: &'a BuiltTopology,
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

impl Running for Setup<'_> {
    fn counters(&self) -> Result<Counters<'_>> {
        let (t, a) = (self.t, &self.attachment);
        let roles = t.roles()?;
        let (dut, din) = t.endpoint(&roles.dut_in)?;
        let (_, dout) = t.endpoint(&roles.dut_out)?;
        let received: Received = match self.v {
            Variant::XdpDrop | Variant::XdpPass => Box::new(|| Ok(a.action_counts()?.0)),
            Variant::XdpCpumap => Box::new(|| Ok(a.action_counts()?.1)),
            Variant::XdpTx => t.received(&roles.gen)?,
            Variant::XdpRedirect => t.received(&roles.sink)?,
            Variant::LinuxDrop => Box::new(move || nft::counter_packets(&nft::nft(dut, &["list", "counter", "inet", "xnfraw", "dropped"], None)?)),
        };
        Ok(Counters {
            dut_in: (dut, din),
            dut_out: (self.v == Variant::XdpRedirect).then_some((dut, dout)),
            received,
            on_read: None,
            corunner: None,
            during: None,
        })
    }
}
