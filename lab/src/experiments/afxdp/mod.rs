//! `xnf lab afxdp`: user-space packet I/O over AF_XDP against the kernel's
//! own ways of getting packets to user space, on the line topology's dut,
//! variants alternated within each run:
//!
//! - `afxdp-rxdrop`: xnf's AF_XDP runtime (copy mode on veth) receives
//!   every frame on dut's ingress and drops it, counted by the runtime;
//! - `linux-udp`: the kernel delivers the same UDP datagrams to a UDP
//!   socket (recvmmsg, 64 at a time); dut owns the destination address for
//!   this variant, counted by the reader;
//! - `afxdp-l2fwd`: the runtime swaps the MACs and sends every frame back
//!   out of dut's ingress, counted by an XDP sink on gen;
//! - `linux-afpacket`: the same l2fwd over an AF_PACKET socket (recvmmsg,
//!   swap, sendmmsg), counted the same way.
//!
//! The user-space side of every variant runs on one thread pinned to the
//! CPU the generator does not use: the kernel's receive work happens in
//! softirq on the generator's CPU (veth), the application's on the other —
//! so, unlike the other veth experiments, frames can be lost here when the
//! application falls behind (its ring or socket buffer overflows).
//!
//! With `--queues N`, N generators fill N queues and every variant has a
//! socket and a thread per queue ([`app`]; the kernel's sockets in groups
//! that pick by the receiving CPU, [`sockets`]).

use anyhow::{ensure, Context, Result};
use clap::Args;
use serde::Serialize;
use xnf_afxdp::nfs::{L2Fwd, RxDrop};
use xnf_afxdp::Mode;

use crate::engine::driver::{variant_name, Cpus, Experiment, Running};
use crate::engine::measure::{self, Received};
use crate::engine::params::{self, Param, Point, Value};
use crate::engine::progress::Progress;
use crate::engine::results::{Results, Sample};
use crate::engine::topology::BuiltTopology;
use crate::engine::LabAttachment;
use crate::experiments::router::parse_size;
use app::{afxdp_app, zero_copy, App};
use sockets::{afpacket_app, udp_app};
use xnf_netns::Netns;

mod app;
mod sockets;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// AF_XDP receive and drop (xnf's runtime).
    AfxdpRxdrop,
    /// The kernel's UDP receive path to a socket.
    LinuxUdp,
    /// AF_XDP MAC swap back out (xnf's runtime).
    AfxdpL2fwd,
    /// The same MAC swap over an AF_PACKET socket.
    LinuxAfpacket,
    /// afxdp-rxdrop with the socket bound in zero-copy mode.
    AfxdpRxdropZc,
    /// afxdp-l2fwd with the socket bound in zero-copy mode.
    AfxdpL2fwdZc,
}

impl Variant {
    fn forwards(self) -> bool {
        matches!(self, Variant::AfxdpL2fwd | Variant::LinuxAfpacket | Variant::AfxdpL2fwdZc)
    }
}

/// `xnf lab afxdp`: its own options.
#[derive(Args, Clone, Debug, Serialize)]
pub struct Afxdp {
    /// Frame sizes on the wire, FCS included (64..=1518); a list sweeps.
    #[arg(long = "size", default_value = "64", value_delimiter = ',', value_parser = parse_size, value_name = "BYTES[,...]")]
    pub sizes: Vec<u32>,
    /// Variants to compare. The -zc ones bind their socket in zero-copy
    /// mode: a driver without it (veth) is said once and they are skipped.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "afxdp-rxdrop,linux-udp,afxdp-l2fwd,linux-afpacket,afxdp-rxdrop-zc,afxdp-l2fwd-zc")]
    pub variants: Vec<Variant>,
    /// The application spins instead of sleeping (poll(), blocking recvmmsg) when idle.
    #[arg(long)]
    pub spin: bool,
    /// Packets per batch: AF_XDP RX batch, recvmmsg/sendmmsg vector.
    #[arg(long, default_value_t = 64)]
    pub batch: u32,
    /// RX/TX queues per veth = generator CPUs (CPUs 0..N); the application
    /// has a socket and a thread per queue (the container-NF thesis Tables
    /// 7–9: scaling over cores); a list sweeps.
    #[arg(long, default_value = "1", value_delimiter = ',', value_parser = crate::experiments::router::parse_item::<u32>, value_name = "N[,N...]")]
    pub queues: Vec<u32>,
    /// Flows (distinct UDP source ports). veth puts each generator CPU's
    /// frames on its own queue whatever the flows; a NIC spreads them by
    /// RSS, which needs a few flows per queue.
    #[arg(long, default_value_t = 1)]
    pub flows: u32,
    /// Queues that handled much less than their share, said in the notes.
    #[arg(skip)]
    uneven: std::cell::RefCell<Vec<String>>,
}

/// The application's CPUs, queue i's first: those after the generators'
/// (with one queue, the one after the generator's), around the machine.
fn app_cpus(cpus: Cpus, queues: u32) -> Vec<usize> {
    let gens = measure::gen_cpus(cpus.gen, queues);
    let after = gens.last().expect("one generator at least") + 1;
    (0..queues as usize).map(|i| (after + i) % cpus.count).collect()
}

impl crate::engine::driver::VariantName for Variant {
    fn name(&self) -> String {
        crate::engine::driver::variant_name(self)
    }
}

impl Experiment for Afxdp {
    type Variant = Variant;
    const NAME: &'static str = "afxdp";

    fn params(&self) -> Vec<Param> {
        vec![params::size(), params::flows(), params::ipv6(), params::queues()]
    }

    /// IPv4 UDP datagrams to one port: a socket application sees them all.
    /// Queues change slowest: the topology is rebuilt once per count.
    fn sweep(&self) -> Vec<(&'static str, Vec<Value>)> {
        vec![
            ("queues", params::values(&self.queues)),
            ("size", params::values(&self.sizes)),
            ("flows", params::values(&[self.flows])),
            ("ipv6", params::values(&[false])),
        ]
    }

    fn variants(&self) -> Vec<Variant> {
        self.variants.clone()
    }

    fn ratios(&self) -> Vec<(&'static str, &'static str)> {
        vec![("afxdp-rxdrop", "linux-udp"), ("afxdp-l2fwd", "linux-afpacket"), ("afxdp-rxdrop-zc", "linux-udp"), ("afxdp-l2fwd-zc", "linux-afpacket")]
    }

    fn check(&self, cpus: Cpus) -> Result<()> {
        ensure!(!self.sizes.contains(&0), "--size imix: this experiment takes fixed sizes");
        measure::check_sizes(&self.sizes, false)?;
        let ncpu = cpus.count;
        ensure!(ncpu >= 2, "xnf lab afxdp needs 2 CPUs: the generator's and the application's (this machine has {ncpu})");
        ensure!((1..=1024).contains(&self.batch), "--batch {}: use 1..=1024", self.batch);
        measure::check_generator(&[self.flows], &self.queues, ncpu)
    }

    /// Frames sent back to gen are counted there by an XDP sink.
    fn built(&mut self, t: &mut BuiltTopology, _: &Progress) -> Result<()> {
        let gen = t.roles()?.gen.clone();
        t.replace_function(&gen, LabAttachment::sink)
    }

    fn set_up<'a>(&'a self, t: &'a BuiltTopology, p: &Point, v: Variant, cpus: Cpus, _: &Progress) -> Result<Box<dyn Running + 'a>> {
        let roles = t.roles()?;
        let (dut, din) = t.endpoint(&roles.dut_in)?;
        let on = &app_cpus(cpus, p.u32("queues")?)[..];
        let mut setup = Setup { dut, _pass: None, local_addr: None, forwarding_off: false };
        let app = match v {
            Variant::AfxdpRxdrop => afxdp_app(dut, &din, on, self, || Box::new(RxDrop), Mode::Copy)?,
            Variant::AfxdpL2fwd => afxdp_app(dut, &din, on, self, || Box::new(L2Fwd), Mode::Copy)?,
            Variant::AfxdpRxdropZc => zero_copy(afxdp_app(dut, &din, on, self, || Box::new(RxDrop), Mode::ZeroCopy))?,
            Variant::AfxdpL2fwdZc => zero_copy(afxdp_app(dut, &din, on, self, || Box::new(L2Fwd), Mode::ZeroCopy))?,
            Variant::LinuxUdp => {
                // dut owns the generator's destination: the kernel delivers locally.
                let a = format!("{}/32", t.addr(&roles.sink, false)?);
                dut.ip(&["addr", "add", &a, "dev", "lo"])?;
                setup.local_addr = Some(a);
                setup._pass = Some(LabAttachment::pass(dut, &din)?);
                udp_app(dut, on, self)?
            }
            Variant::LinuxAfpacket => {
                // The stack sees every frame too; with forwarding off it drops
                // them after its route lookup instead of forwarding to the sink.
                dut.sysctl_set("net.ipv4.ip_forward", "0")?;
                setup.forwarding_off = true;
                setup._pass = Some(LabAttachment::pass(dut, &din)?);
                afpacket_app(dut, &din, on, self)?
            }
        };
        Ok(Box::new(Set { v, t, app, setup, exp: self }))
    }

    fn finish(&mut self, cpus: Cpus, res: &mut Results) -> Result<()> {
        let place = |q: u32| {
            let list = |c: Vec<usize>| c.iter().map(usize::to_string).collect::<Vec<_>>().join(", ");
            format!("with {q} queue(s), on CPU(s) {} and the application's threads on CPU(s) {}", list(measure::gen_cpus(cpus.gen, q)), list(app_cpus(cpus, q)))
        };
        res.notes.push(format!(
            "veth: the generator and the kernel's receive work (XDP, the copy into the UMEM, the UDP or AF_PACKET delivery) run in softirq on the generating CPU, one queue each: {} ({}; one socket per queue, queue i's thread the i-th CPU). AF_XDP on veth is copy mode only (the -zc variants need a driver with zero-copy).",
            self.queues.iter().map(|&q| place(q)).collect::<Vec<_>>().join("; "),
            if self.spin { "spinning" } else { "sleeping in poll()/recvmmsg when idle" }
        ));
        res.notes.extend(self.uneven.take());
        Ok(())
    }
}

/// What a variant put on dut besides its application; removed when dropped.
struct Setup<'a> {
    dut: &'a Netns,
    _pass: Option<LabAttachment>,
    local_addr: Option<String>,
    forwarding_off: bool,
}

impl Drop for Setup<'_> {
    fn drop(&mut self) {
        if let Some(a) = &self.local_addr {
            let _ = self.dut.ip(&["addr", "del", a, "dev", "lo"]);
        }
        if self.forwarding_off {
            let _ = self.dut.sysctl_set("net.ipv4.ip_forward", "1");
        }
    }
}

/// A variant's application and what it put on dut.
struct Set<'a> {
    v: Variant,
    t: &'a BuiltTopology,
    app: App,
    // Dropped after the application.
    setup: Setup<'a>,
    exp: &'a Afxdp,
}

impl Running for Set<'_> {
    /// Forwarded frames are counted by the sink on gen, received ones by
    /// the application.
    fn counters(&self) -> Result<measure::Counters<'_>> {
        let roles = self.t.roles()?;
        let (dut, din) = self.t.endpoint(&roles.dut_in)?;
        let received: Received = if self.v.forwards() {
            let back = self.t.attachment(&roles.gen)?;
            Box::new(move || back.packets())
        } else {
            Box::new(|| Ok(self.app.handled()))
        };
        Ok(measure::Counters {
            dut_in: (dut, din.clone()),
            dut_out: self.v.forwards().then_some((dut, din)),
            received,
            on_read: None,
            corunner: None,
            during: None,
        })
    }

    fn finish(self: Box<Self>, _: &[Sample]) -> Result<()> {
        let Set { app, setup, v, exp, .. } = *self;
        if let Some(line) = uneven(&variant_name(&v), &app.per_queue()) {
            let mut said = exp.uneven.borrow_mut();
            if !said.contains(&line) {
                said.push(line);
            }
        }
        app.finish().with_context(|| format!("{}: the application", variant_name(&v)))?;
        drop(setup);
        Ok(())
    }
}

/// A line when some queue handled under a quarter of its share of the
/// frames: a NIC's RSS spreads flows, not frames, and one flow lands on
/// one queue.
fn uneven(variant: &str, per_queue: &[u64]) -> Option<String> {
    let total: u64 = per_queue.iter().sum();
    let n = per_queue.len() as u64;
    let (q, least) = per_queue.iter().enumerate().min_by_key(|(_, c)| **c)?;
    (n > 1 && total > 0 && least * n * 4 < total).then(|| {
        format!(
            "{variant} with {n} queues: queue {q} handled {:.1} % of the frames (a NIC's RSS spreads flows, not frames: give --flows a few times --queues)",
            *least as f64 * 100.0 / total as f64
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_application_runs_after_the_generators() {
        let two = Cpus { gen: 1, count: 2 };
        assert_eq!(app_cpus(two, 1), [0], "one queue: the CPU the generator leaves");
        assert_eq!(app_cpus(two, 2), [0, 1], "two queues on two CPUs: each queue's thread beside its generator");
        assert_eq!(app_cpus(Cpus { gen: 3, count: 8 }, 1), [4]);
        assert_eq!(app_cpus(Cpus { gen: 7, count: 8 }, 4), [4, 5, 6, 7], "generators on CPUs 0..4, the application after them");
    }

    #[test]
    fn a_queue_far_below_its_share_is_said() {
        assert_eq!(uneven("x", &[100]), None, "one queue");
        assert_eq!(uneven("x", &[0, 0]), None, "nothing handled");
        assert_eq!(uneven("x", &[60, 40]), None);
        assert_eq!(uneven("x", &[20, 100]), None, "20 of 120: above a quarter of its share");
        let line = uneven("afxdp-rxdrop", &[1000, 0]).unwrap();
        assert!(line.starts_with("afxdp-rxdrop with 2 queues: queue 1 handled 0.0 %") && line.contains("--flows"), "{line}");
    }
}
