//! What a run of `xnf lab gen` sends, decided and checked before anything
//! is built: protocol, sizes, the flows' ports and addresses (all in the
//! lab's ranges; by default the topology's gen and sink), rate, count,
//! CPUs; and the common options gen cannot use, refused.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use anyhow::{bail, ensure, Context, Result};
use xnf_netns::{is_test_ip, Mac};
use xnf_packet::{PacketBuilder, TcpFlags};

use super::args::{Dut, GenArgs, Size, TcpKind};
use crate::engine::cpu;
use crate::engine::topology::{ifname, TopologySpec};
use crate::programs::gen::{imix_sequence, GenConfig};

/// First source port; flows by source port count up from here.
pub const BASE_SPORT: u16 = 1024;
/// First destination port (discard); flows by destination port count up.
pub const BASE_DPORT: u16 = 9;

// Addresses of the line's two ends, where a topology has none of the family.
const GEN_V4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const SINK_V4: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 2);
const GEN_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
const SINK_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 2);
/// Where several destinations start by default: outside both ends' subnets,
/// so dut (with --through-dut) routes them all to the sink.
const DSTS_V4: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 0);
const DSTS_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xff, 0, 0, 0, 0, 0);

/// The topology's addresses a plan's defaults and checks come from.
#[derive(Clone, Debug, Default)]
pub struct Ends {
    /// roles.gen's addresses.
    pub gen: Vec<IpAddr>,
    /// roles.sink's addresses.
    pub sink: Vec<IpAddr>,
    /// dut's (roles.dut_in's and dut_out's) addresses and prefix lengths.
    pub dut: Vec<(IpAddr, u8)>,
}

impl Ends {
    /// The built-in line's.
    pub fn line() -> Ends {
        let dut = [("198.18.0.2", 24), ("2001:db8::2", 64), ("198.18.1.1", 24), ("2001:db8:1::1", 64)];
        Ends {
            gen: vec![GEN_V4.into(), GEN_V6.into()],
            sink: vec![SINK_V4.into(), SINK_V6.into()],
            dut: dut.iter().map(|(a, l)| (a.parse().expect("an address"), *l)).collect(),
        }
    }

    /// Those of a topology's roles.
    pub fn of(spec: &TopologySpec) -> Result<Ends> {
        let roles = spec.roles.as_ref().context("the topology needs a [roles] table (gen, dut_in, dut_out, sink)")?;
        let addrs = |ep: &str| cidrs(spec, ep).into_iter().map(|c| c.0).collect::<Vec<_>>();
        let mut dut = cidrs(spec, &roles.dut_in);
        if roles.dut_out != roles.dut_in {
            dut.extend(cidrs(spec, &roles.dut_out));
        }
        Ok(Ends { gen: addrs(&roles.gen), sink: addrs(&roles.sink), dut })
    }

    fn first(v: &[IpAddr], ipv6: bool, or: IpAddr) -> IpAddr {
        v.iter().copied().find(|a| a.is_ipv6() == ipv6).unwrap_or(or)
    }
}

/// The addresses (and prefix lengths) a topology configures on `ns:dev`.
pub fn cidrs(spec: &TopologySpec, ep: &str) -> Vec<(IpAddr, u8)> {
    let Some((ns, dev)) = ep.split_once(':') else { return Vec::new() };
    let at = |end: &str| end.split_once(':').is_some_and(|(n, d)| n == ns && ifname(d) == ifname(dev));
    spec.links
        .iter()
        .flat_map(|l| [(&l.a, &l.a_addr), (&l.b, &l.b_addr)])
        .filter(|(end, _)| at(end))
        .flat_map(|(_, addrs)| addrs.iter())
        .filter_map(|c| {
            let (a, len) = c.split_once('/')?;
            Some((a.parse().ok()?, len.parse().ok()?))
        })
        .collect()
}

/// Everything a run needs, checked before anything is built.
#[derive(Clone, Debug)]
pub struct Plan {
    pub ipv6: bool,
    pub tcp: Option<TcpKind>,
    pub size: Size,
    pub sports: u32,
    pub dports: u32,
    pub srcs: Vec<IpAddr>,
    pub dsts: Vec<IpAddr>,
    pub rate: Option<u64>,
    pub count: Option<u64>,
    pub seconds: Option<f64>,
    pub cpus: Vec<usize>,
    pub through_dut: Option<Dut>,
    pub verify: bool,
    /// `xnf profile` attached while sending, and where its flame graph goes.
    pub profile: Option<xnf_profile::Options>,
    pub flame: Option<std::path::PathBuf>,
}

impl Plan {
    /// Length of the headers (no FCS).
    pub fn hdr_len(&self) -> usize {
        14 + if self.ipv6 { 40 } else { 20 } + if self.tcp.is_some() { 20 } else { 8 }
    }

    pub fn what(&self) -> String {
        format!(
            "{} {}",
            if self.ipv6 { "IPv6" } else { "IPv4" },
            match self.tcp {
                None => "UDP",
                Some(TcpKind::Ack) => "TCP ACK",
                Some(TcpKind::Syn) => "TCP SYN",
            }
        )
    }

    /// Frame lengths without FCS, in the order sent.
    pub fn sizes(&self) -> Vec<u16> {
        match self.size {
            Size::Fixed(n) => vec![n - 4],
            Size::Imix => imix_sequence(self.hdr_len().max(60)),
        }
    }

    pub fn flows(&self) -> u64 {
        self.sports as u64 * self.dports as u64 * self.srcs.len() as u64 * self.dsts.len() as u64
    }

    pub fn threads(&self) -> usize {
        self.cpus.len()
    }

    pub fn describe(&self) -> String {
        let size = match self.size {
            Size::Fixed(n) => format!("{n} B"),
            Size::Imix => "IMIX".into(),
        };
        let path = match self.through_dut {
            None => "gen -> sink",
            Some(Dut::Kernel) => "gen -> dut (kernel) -> sink",
            Some(Dut::Xnf) => "gen -> dut (xnf router) -> sink",
        };
        let rate = self.rate.map(|r| format!("{r} frames/s")).unwrap_or("as fast as possible".into());
        let cpus: Vec<String> = self.cpus.iter().map(|c| c.to_string()).collect();
        format!(
            "{size} {}, {} flow{}, {path}, CPU{} {}, {rate}",
            self.what(),
            self.flows(),
            if self.flows() == 1 { "" } else { "s" },
            if self.cpus.len() == 1 { "" } else { "s" },
            cpus.join(",")
        )
    }

    /// The generator's configuration for frames from `src_mac` to `dst_mac`.
    pub fn gen_config(&self, src_mac: Mac, dst_mac: Mac) -> Result<GenConfig> {
        let sizes = self.sizes();
        let largest = *sizes.iter().max().unwrap_or(&60) as usize;
        let b = PacketBuilder::ethernet(src_mac, dst_mac).ip(self.srcs[0], self.dsts[0]);
        let b = match self.tcp {
            None => b.udp(BASE_SPORT, BASE_DPORT),
            Some(TcpKind::Ack) => b.tcp(BASE_SPORT, BASE_DPORT, TcpFlags::ACK).seq(1).ack(1),
            Some(TcpKind::Syn) => b.tcp(BASE_SPORT, BASE_DPORT, TcpFlags::SYN),
        };
        let cfg = GenConfig {
            template: b.frame_len(largest).try_build()?,
            ipv6: self.ipv6,
            flows: self.sports,
            base_sport: BASE_SPORT,
            sizes,
            dst_ports: self.dports,
            src_addrs: if self.srcs.len() > 1 { self.srcs.clone() } else { Vec::new() },
            dst_addrs: if self.dsts.len() > 1 { self.dsts.clone() } else { Vec::new() },
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

fn add_to(a: IpAddr, n: u128) -> Option<IpAddr> {
    match a {
        IpAddr::V4(a) => u32::try_from(u32::from(a) as u128 + n).ok().map(|x| IpAddr::V4(x.into())),
        IpAddr::V6(a) => (u128::from(a)).checked_add(n).map(|x| IpAddr::V6(x.into())),
    }
}

fn family(ipv6: bool) -> &'static str {
    if ipv6 {
        "IPv6"
    } else {
        "IPv4"
    }
}

/// `count` addresses from `base`, `stride` apart, all in the lab's ranges.
fn address_range(what: &str, base: IpAddr, count: u64, stride: u64) -> Result<Vec<IpAddr>> {
    let mut v = Vec::with_capacity(count as usize);
    for i in 0..count {
        match add_to(base, i as u128 * stride as u128).filter(|a| is_test_ip(*a)) {
            Some(a) => v.push(a),
            None => bail!("{count} {what} addresses from {base} (stride {stride}) leave the lab's ranges 198.18.0.0/15 and 2001:db8::/32 at the {}th", i + 1),
        }
    }
    Ok(v)
}

fn read_dst_list(path: &std::path::Path, ipv6: bool) -> Result<Vec<IpAddr>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading --dst-list {}", path.display()))?;
    let mut v = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let a: IpAddr = line.parse().with_context(|| format!("{}:{}: {line:?} is not an IP address", path.display(), i + 1))?;
        ensure!(a.is_ipv6() == ipv6, "{}:{}: {a} is not {} (use --ipv6 for IPv6 destinations)", path.display(), i + 1, family(ipv6));
        v.push(a);
    }
    ensure!(!v.is_empty(), "--dst-list {} holds no address", path.display());
    Ok(v)
}

/// Checks the options and turns them into a plan; nothing is built yet.
/// `ends` are the topology's addresses.
pub fn plan(args: &GenArgs, ends: &Ends) -> Result<Plan> {
    let (c, a) = (&args.common, &args.gen);
    let ncpu = cpu::sample()?.len();
    let gen_cpu = c.validate(ncpu)?.gen;
    ensure!(c.warmup == 0.0, "--warmup: gen counts every frame it sends, from the first: it has no warm-up");
    ensure!(c.zero_loss.is_none(), "--zero-loss: gen sends at --rate or as fast as it can; it does not search");
    ensure!(c.load_curve == 0 && c.load_rates.is_empty(), "--load-curve / --load-rates: gen sends at one --rate");
    ensure!(c.trial_seconds == 2.0, "--trial-seconds: gen has no load steps or search trials (--seconds is its time)");
    let cpus = a.cpus.clone().map(|c| c.0).unwrap_or_else(|| vec![gen_cpu]);
    ensure!(!cpus.is_empty(), "--cpus needs at least one CPU");
    if let Some(c) = cpus.iter().find(|&&c| c >= ncpu) {
        bail!("--cpus: CPU {c} does not exist (this machine has {ncpu}: 0-{})", ncpu - 1);
    }
    let min_wire = (14 + if a.ipv6 { 40 } else { 20 } + if a.tcp.is_some() { 20 } else { 8 } + 4).max(64);
    if let Size::Fixed(n) = a.size {
        ensure!(
            n as usize >= min_wire,
            "--size {n} is too small for {} {}: at least {min_wire} bytes on the wire (headers + FCS)",
            family(a.ipv6),
            if a.tcp.is_some() { "TCP" } else { "UDP" }
        );
    }
    let room = 65536 - BASE_SPORT as u64;
    let sports = a.flows.or(a.sports).unwrap_or(1);
    if sports > room {
        let opt = if a.flows.is_some() { "--flows" } else { "--sports" };
        bail!("{opt} {sports}: more flows than the source-port range allows ({room} ports, {BASE_SPORT}..65535); vary addresses or destination ports too (--srcs, --dsts, --dports)");
    }
    let droom = 65536 - BASE_DPORT as u64;
    ensure!(a.dports <= droom, "--dports {}: more than the destination-port range allows ({droom} ports, {BASE_DPORT}..65535)", a.dports);
    let (gen, sink, many): (IpAddr, IpAddr, IpAddr) = if a.ipv6 {
        (Ends::first(&ends.gen, true, GEN_V6.into()), Ends::first(&ends.sink, true, SINK_V6.into()), DSTS_V6.into())
    } else {
        (Ends::first(&ends.gen, false, GEN_V4.into()), Ends::first(&ends.sink, false, SINK_V4.into()), DSTS_V4.into())
    };
    for (opt, addr) in [("--src-base", a.src_base), ("--dst-base", a.dst_base)] {
        if let Some(addr) = addr {
            ensure!(addr.is_ipv6() == a.ipv6, "{opt} {addr} is not {}", family(a.ipv6));
        }
    }
    let max = crate::programs::gen::MAX_ADDRS as u64;
    ensure!(a.srcs <= max, "--srcs {}: at most {max}", a.srcs);
    let srcs = address_range("source", a.src_base.unwrap_or(gen), a.srcs, 1)?;
    let dsts = match (&a.dst_list, a.dsts.unwrap_or(1)) {
        (Some(path), _) => read_dst_list(path, a.ipv6)?,
        (None, n) => {
            ensure!(n <= max, "--dsts {n}: at most {max}");
            let base = a.dst_base.unwrap_or(if n == 1 { sink } else { many });
            address_range("destination", base, n, a.dst_stride)?
        }
    };
    ensure!(dsts.len() as u64 <= max, "{} destination addresses: at most {max}", dsts.len());
    if let Some(d) = dsts.iter().find(|d| !is_test_ip(**d)) {
        bail!("destination {d} is outside the lab's ranges 198.18.0.0/15 and 2001:db8::/32");
    }
    if a.through_dut.is_some() {
        // dut owns these; the kernel drops packets from its own addresses
        // and resolves (in vain: the sink drops ARP/ND) its connected subnets.
        if let Some(s) = srcs.iter().find(|s| ends.dut.iter().any(|(d, _)| d == *s)) {
            bail!("source {s} is dut's own address: dut would drop it (choose --src-base elsewhere)");
        }
        if let Some(d) = dsts.iter().find(|d| **d != sink && ends.dut.iter().any(|(n, len)| in_prefix(**d, *n, *len))) {
            let nets: Vec<String> = ends.dut.iter().filter(|(n, _)| n.is_ipv6() == a.ipv6).map(|(n, len)| format!("{n}/{len}")).collect();
            bail!("destination {d} is in a subnet dut is connected to, where only {sink} answers: choose destinations outside {}", nets.join(" and "));
        }
    }
    let p = Plan {
        ipv6: a.ipv6,
        tcp: a.tcp,
        size: a.size,
        sports: sports as u32,
        dports: a.dports as u32,
        srcs,
        dsts,
        rate: a.rate,
        count: a.count,
        seconds: c.seconds.is_finite().then_some(c.seconds),
        cpus,
        through_dut: a.through_dut,
        verify: a.verify,
        profile: c.profiling.options(),
        flame: c.profiling.flame.clone(),
    };
    ensure!(p.flows() <= u32::MAX as u64, "{} flows (ports × addresses): at most {}", p.flows(), u32::MAX);
    let n = p.threads() as u64;
    if let Some(r) = p.rate {
        ensure!(r >= n, "--rate {r} is less than one frame per second per generator CPU ({n} CPUs)");
    }
    if let Some(c) = p.count {
        ensure!(c >= n, "--count {c} is less than one frame per generator CPU ({n} CPUs)");
    }
    // The template must build and the program accept it.
    p.gen_config(Mac([2, 0, 0, 0, 0, 1]), Mac([2, 0, 0, 0, 0, 2]))?;
    Ok(p)
}

fn in_prefix(a: IpAddr, net: IpAddr, len: u8) -> bool {
    match (a, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => (u32::from(a) ^ u32::from(n)).checked_shr(32 - len as u32).unwrap_or(0) == 0,
        (IpAddr::V6(a), IpAddr::V6(n)) => (u128::from(a) ^ u128::from(n)).checked_shr(128 - len as u32).unwrap_or(0) == 0,
        _ => false,
    }
}
