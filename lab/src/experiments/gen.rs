//! `xnf lab gen`: the traffic generator on its own, against an XDP sink.
//!
//! By default it builds the shortest path there is, one veth pair gen ->
//! sink, so what it measures is the generator's own ceiling (and the sink's
//! receive, which on a veth runs on the sending CPU). `--through-dut kernel`
//! or `--through-dut xnf` puts the standard dut namespace in between.
//!
//! Everything the frames carry is decided up front and checked before
//! anything is built: protocol, sizes (fixed or the AMS-IX IMIX of seed 001
//! §5.3.7), flows (source and destination ports and addresses, or a list of
//! destinations), rate, count, CPUs. With `--verify` the sink copies every
//! frame to user space, which parses it and compares the counts per size
//! and per flow with what the generator must have sent.

use std::collections::{BTreeMap, HashMap};
use std::io::{IsTerminal, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use clap::{Args, ValueEnum};
use serde::Serialize;
use crate::programs::gen::{imix_sequence, Flow, GenConfig};
use crate::programs::sink::{Captured, SinkCounts, SinkOptions};
use xnf_netns::{ifname, is_test_ip, veth, LineConfig, LineTopology, Mac, Netns, Topology};
use xnf_packet::{parse, PacketBuilder, TcpFlags};

use crate::engine::cpu;
use crate::engine::results::{Loss, Point, Results, Sample, SampleKind};
use crate::engine::search::loss_pct;
use crate::engine::{GenOptions, Generator, LabAttachment, RouterGuard};

/// First source port; flows by source port count up from here.
pub const BASE_SPORT: u16 = 1024;
/// First destination port (discard); flows by destination port count up.
pub const BASE_DPORT: u16 = 9;
/// Capture ring of `--verify`: what the sink can hold while user space reads.
const VERIFY_RING: u32 = 64 << 20;
/// Most flows whose counts `--verify` checks one by one.
const VERIFY_MAX_FLOWS: u64 = 1 << 22;

// Addresses of the two ends, the same in the direct pair and the line.
const GEN_V4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const SINK_V4: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 2);
const GEN_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
const SINK_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 2);
/// Where several destinations start by default: outside both ends' subnets,
/// so dut (with --through-dut) routes them all to the sink.
const DSTS_V4: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 0);
const DSTS_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xff, 0, 0, 0, 0, 0);

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TcpKind {
    /// A plain ACK (seq 1, ack 1).
    Ack,
    /// A connection request (SYN, seq 0).
    Syn,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dut {
    /// The kernel forwards (XDP_PASS on dut's ingress so the frames are received).
    Kernel,
    /// `xnf router` forwards in XDP.
    Xnf,
}

/// A frame size: fixed wire size with FCS, or the IMIX.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Size {
    Fixed(u16),
    Imix,
}

fn parse_size(s: &str) -> std::result::Result<Size, String> {
    if s.eq_ignore_ascii_case("imix") {
        return Ok(Size::Imix);
    }
    match s.parse::<i64>() {
        Ok(n) if (64..=1518).contains(&n) => Ok(Size::Fixed(n as u16)),
        Ok(n) => Err(format!("{n} bytes is not an Ethernet frame size: 64..=1518 on the wire with FCS, or imix")),
        Err(_) => Err("a number of bytes 64..=1518 (wire size with FCS) or imix".into()),
    }
}

/// A count of at least 1, with a message that says so for 0 and negatives.
fn parse_count(s: &str) -> std::result::Result<u64, String> {
    match s.parse::<i128>() {
        Ok(n) if n >= 1 && n <= u64::MAX as i128 => Ok(n as u64),
        Ok(_) => Err("must be a whole number of at least 1".into()),
        Err(_) => Err("not a whole number".into()),
    }
}

/// `--rate`: 0 and negatives are errors (omitting the option means as fast
/// as possible).
fn parse_rate(s: &str) -> std::result::Result<u64, String> {
    match s.parse::<i128>() {
        Ok(0) => Err("0 frames per second is not a rate: omit --rate to send as fast as possible".into()),
        Ok(n) if n >= 1 && n <= u64::MAX as i128 => Ok(n as u64),
        Ok(_) => Err("must be a positive number of frames per second (omit --rate for as fast as possible)".into()),
        Err(_) => Err("not a whole number of frames per second".into()),
    }
}

fn parse_seconds(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x > 0.0 && x.is_finite() => Ok(x),
        _ => Err("must be a positive number of seconds".into()),
    }
}

/// A CPU list such as `0,1` or `0-3,6`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CpuList(pub Vec<usize>);

fn parse_cpus(s: &str) -> std::result::Result<CpuList, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim) {
        let num = |x: &str| x.trim().parse::<usize>().map_err(|_| format!("{x:?} is not a CPU number (a list looks like 0,1 or 0-3)"));
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(format!("{part}: empty range"));
                }
                out.extend(a..=b);
            }
            None => out.push(num(part)?),
        }
    }
    let mut sorted = out.clone();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted.len() != out.len() {
        return Err("a CPU is listed twice".into());
    }
    Ok(CpuList(out))
}

/// `xnf lab gen`.
#[derive(Args, Clone, Debug, Serialize)]
#[command(after_long_help = AFTER_HELP)]
pub struct GenArgs {
    /// IPv6 instead of IPv4.
    #[arg(long)]
    pub ipv6: bool,
    /// TCP segments instead of UDP datagrams: plain ACKs (the default) or SYNs.
    #[arg(long, value_enum, value_name = "ack|syn", num_args = 0..=1, default_missing_value = "ack")]
    pub tcp: Option<TcpKind>,
    /// Frame size on the wire with FCS (64..=1518), or `imix`: the AMS-IX
    /// mix of seed 001 §5.3.7 (64, 128, 256, 512, 1024, 1518 B in shares
    /// 27.8, 5.5, 2.8, 3.5, 37, 23 %, interleaved, repeating every 996 frames).
    #[arg(long, default_value = "64", value_parser = parse_size, value_name = "BYTES|imix", allow_hyphen_values = true)]
    pub size: Size,
    /// Flows by source port (1024, 1025, ...): the same as --sports N.
    #[arg(long, value_name = "N", value_parser = parse_count, conflicts_with = "sports", allow_hyphen_values = true)]
    pub flows: Option<u64>,
    /// Source ports 1024 .. 1024+N-1 (at most 64512).
    #[arg(long, value_name = "N", value_parser = parse_count, allow_hyphen_values = true)]
    pub sports: Option<u64>,
    /// Destination ports 9 .. 9+N-1.
    #[arg(long, value_name = "N", value_parser = parse_count, default_value = "1", allow_hyphen_values = true)]
    pub dports: u64,
    /// Source addresses: --src-base, then one up each.
    #[arg(long, value_name = "N", value_parser = parse_count, default_value = "1", allow_hyphen_values = true)]
    pub srcs: u64,
    /// First source address [default: gen's, 198.18.0.1 / 2001:db8::1].
    #[arg(long, value_name = "ADDR")]
    pub src_base: Option<IpAddr>,
    /// Destination addresses: --dst-base + i * --dst-stride.
    #[arg(long, value_name = "N", value_parser = parse_count, allow_hyphen_values = true)]
    pub dsts: Option<u64>,
    /// First destination address [default: the sink's, 198.18.1.2 /
    /// 2001:db8:1::2, for one destination; 198.19.0.0 / 2001:db8:ff:: for more].
    #[arg(long, value_name = "ADDR")]
    pub dst_base: Option<IpAddr>,
    /// Distance between consecutive destination addresses.
    #[arg(long, value_name = "K", value_parser = parse_count, default_value = "1", allow_hyphen_values = true)]
    pub dst_stride: u64,
    /// Destination addresses from FILE, one per line (`#` starts a comment),
    /// e.g. the targets of a route-table experiment.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["dsts", "dst_base"])]
    pub dst_list: Option<PathBuf>,
    /// Frames per second, all CPUs together [default: as fast as possible].
    #[arg(long, value_name = "PPS", value_parser = parse_rate, allow_hyphen_values = true)]
    pub rate: Option<u64>,
    /// Send exactly N frames, then stop (split evenly over the CPUs).
    #[arg(long, value_name = "N", value_parser = parse_count, allow_hyphen_values = true)]
    pub count: Option<u64>,
    /// Stop after this many seconds [default: 5 without --count; with
    /// --count, whichever comes first].
    #[arg(long, value_name = "S", value_parser = parse_seconds, allow_hyphen_values = true)]
    pub seconds: Option<f64>,
    /// Generator CPUs, one thread pinned to each, e.g. 0,1 or 0-3 [default:
    /// the last CPU]. With several, the veth gets one queue per thread.
    #[arg(long, value_name = "LIST", value_parser = parse_cpus)]
    pub cpus: Option<CpuList>,
    /// Send through a dut namespace forwarding with the kernel or with
    /// `xnf router` [default: straight into the sink].
    #[arg(long, value_enum, value_name = "kernel|xnf")]
    pub through_dut: Option<Dut>,
    /// Copy every frame at the sink to user space, parse it and check sizes,
    /// flows and checksums against what was sent (frames the capture ring
    /// cannot hold at high rates are counted, not checked).
    #[arg(long)]
    pub verify: bool,
    /// Write one sample per second and the summary as JSON (experiment
    /// "gen", variant "gen"; input of `xnf lab report`).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

const AFTER_HELP: &str = "\
Flows: every combination of source port, destination port, source address \
and destination address is a flow (source port turning fastest), so \
--sports 100 --dsts 50 makes 5000 flows. Every thread cycles through all \
flows and sizes from the first.

Topology: without --through-dut, one veth pair gen -> sink with no IP \
configuration (IPv6 off, so the sink sees only generated frames). On a veth \
the receiver runs in softirq on the sending CPU, so each CPU's rate is \
generator + sink together. The sink drops in XDP and counts per CPU.

Examples:
  xnf lab gen                                  64 B UDP, as fast as possible, 5 s
  xnf lab gen --cpus 0,1 --size imix           IMIX from two CPUs
  xnf lab gen --tcp syn --ipv6 --flows 1000    IPv6 SYNs from 1000 source ports
  xnf lab gen --rate 100000 --count 1000000    exactly 1e6 frames at 100 kpps
  xnf lab gen --dst-list targets.txt --verify  the route-table targets, checked";

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
}

impl Plan {
    /// Length of the headers (no FCS).
    fn hdr_len(&self) -> usize {
        14 + if self.ipv6 { 40 } else { 20 } + if self.tcp.is_some() { 20 } else { 8 }
    }

    fn what(&self) -> String {
        format!("{} {}", if self.ipv6 { "IPv6" } else { "IPv4" }, match self.tcp {
            None => "UDP",
            Some(TcpKind::Ack) => "TCP ACK",
            Some(TcpKind::Syn) => "TCP SYN",
        })
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

    fn threads(&self) -> usize {
        self.cpus.len()
    }

    fn describe(&self) -> String {
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
            None => bail!(
                "{count} {what} addresses from {base} (stride {stride}) leave the lab's ranges 198.18.0.0/15 and 2001:db8::/32 at the {}th",
                i + 1
            ),
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
pub fn plan(a: &GenArgs) -> Result<Plan> {
    let ncpu = cpu::sample()?.len();
    let cpus = a.cpus.clone().map(|c| c.0).unwrap_or_else(|| vec![ncpu.saturating_sub(1)]);
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
    let (gen, sink, many) = if a.ipv6 { (GEN_V6.into(), SINK_V6.into(), DSTS_V6.into()) } else { (GEN_V4.into(), SINK_V4.into(), DSTS_V4.into()) };
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
        let (gen_net, sink_net, dut_addrs): (u8, u8, [IpAddr; 2]) = if a.ipv6 {
            (64, 64, [Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2).into(), Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1).into()])
        } else {
            (24, 24, [Ipv4Addr::new(198, 18, 0, 2).into(), Ipv4Addr::new(198, 18, 1, 1).into()])
        };
        if let Some(s) = srcs.iter().find(|s| dut_addrs.contains(s)) {
            bail!("source {s} is dut's own address: dut would drop it (choose --src-base elsewhere)");
        }
        if let Some(d) = dsts.iter().find(|d| **d != sink && (in_prefix(**d, gen, gen_net) || in_prefix(**d, sink, sink_net))) {
            bail!("destination {d} is in a subnet dut is connected to, where only {sink} answers: choose destinations outside {gen}/{gen_net} and {sink}/{sink_net}");
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
        seconds: a.seconds,
        cpus,
        through_dut: a.through_dut,
        verify: a.verify,
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

/// The namespaces a run uses; removed when dropped.
pub enum Path {
    /// One veth pair gen -> sink.
    Direct { topo: Topology, gen_if: String, sink_if: String, gen_mac: Mac, sink_mac: Mac },
    /// gen -> dut -> sink.
    Line(Box<LinePath>),
}

/// The line and what dut runs (fields drop in order: dut's programs first).
pub struct LinePath {
    _dut: Option<LabAttachment>,
    _router: Option<RouterGuard>,
    line: LineTopology,
}

impl Path {
    /// Builds the path for `p`; `queues` per veth end.
    pub fn build(p: &Plan) -> Result<Path> {
        let queues = p.threads() as u32;
        match p.through_dut {
            None => {
                let mut topo = Topology::new();
                let (gen_if, sink_if) = (ifname("gen"), ifname("sink"));
                for role in ["gen", "sink"] {
                    let ns = topo.add(role)?;
                    // No IPv6 (no ND, MLD, router solicitations) and no
                    // addresses: nothing but generated frames on the link.
                    ns.sysctl_set("net.ipv6.conf.default.disable_ipv6", "1")?;
                    ns.sysctl_set("net.ipv6.conf.all.disable_ipv6", "1")?;
                }
                let (gen, sink) = (&topo.nodes()[0], &topo.nodes()[1]);
                veth(gen, &gen_if, sink, &sink_if, (queues > 1).then_some(queues))?;
                gen.link_up(&gen_if)?;
                sink.link_up(&sink_if)?;
                let (gen_mac, sink_mac) = (gen.mac(&gen_if)?, sink.mac(&sink_if)?);
                Ok(Path::Direct { gen_if, sink_if, gen_mac, sink_mac, topo })
            }
            Some(kind) => {
                let line = LineTopology::new(&LineConfig { queues: (queues > 1).then_some(queues) })?;
                let dut = line.dut();
                // Everything in the lab's ranges that is not on a connected
                // subnet goes to the sink, whose MAC dut knows up front.
                dut.route_add("198.18.0.0/15", Some(&line.sink_v4.to_string()), None)?;
                dut.route_add("2001:db8::/32", Some(&line.sink_v6.to_string()), None)?;
                dut.neigh_add(&line.sink_v4.to_string(), line.sink_mac, &line.dut_sink_if)?;
                dut.neigh_add(&line.sink_v6.to_string(), line.sink_mac, &line.dut_sink_if)?;
                for key in ["net.ipv4.conf.all.rp_filter".to_string(), format!("net/ipv4/conf/{}/rp_filter", line.dut_gen_if)] {
                    dut.sysctl_set(&key, "0")?;
                }
                let (att, router) = match kind {
                    Dut::Kernel => (Some(LabAttachment::pass(dut, &line.dut_gen_if)?), None),
                    Dut::Xnf => (None, Some(RouterGuard::attach(dut, &[line.dut_gen_if.clone(), line.dut_sink_if.clone()])?)),
                };
                Ok(Path::Line(Box::new(LinePath { _dut: att, _router: router, line })))
            }
        }
    }

    fn gen(&self) -> (&Netns, &str, Mac, Mac) {
        match self {
            Path::Direct { topo, gen_if, gen_mac, sink_mac, .. } => (&topo.nodes()[0], gen_if, *gen_mac, *sink_mac),
            Path::Line(l) => (l.line.gen(), &l.line.gen_if, l.line.gen_mac, l.line.dut_gen_mac),
        }
    }

    fn sink(&self) -> (&Netns, &str) {
        match self {
            Path::Direct { topo, sink_if, .. } => (&topo.nodes()[1], sink_if),
            Path::Line(l) => (l.line.sink(), &l.line.sink_if),
        }
    }
}

/// What the sink saw of the generated frames, from the capture.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Frames per length (without FCS).
    pub sizes: BTreeMap<u16, u64>,
    pub flows: HashMap<Flow, u64>,
    /// Frames of the generator's protocol with a wrong checksum.
    pub bad_checksums: u64,
    /// Frames that are not the generator's (other protocols, unparsable).
    pub other: u64,
    /// Captured frames per receiving CPU.
    pub per_cpu: BTreeMap<u32, u64>,
}

impl Tally {
    pub fn add(&mut self, c: &Captured, ipv6: bool, tcp: bool) {
        *self.per_cpu.entry(c.cpu).or_default() += 1;
        let Ok(p) = parse(&c.data) else {
            self.other += 1;
            return;
        };
        let proto = if tcp { 6 } else { 17 };
        let (Some(src), Some(dst), Some(sport), Some(dport)) = (p.src_ip(), p.dst_ip(), p.src_port(), p.dst_port()) else {
            self.other += 1;
            return;
        };
        if src.is_ipv6() != ipv6 || p.ip_protocol().map(|x| x.0) != Some(proto) || c.len as usize != c.data.len() {
            self.other += 1;
            return;
        }
        if !p.checksums_ok() {
            self.bad_checksums += 1;
        }
        *self.sizes.entry(c.len as u16).or_default() += 1;
        *self.flows.entry(Flow { src, dst, sport, dport }).or_default() += 1;
    }

    pub fn frames(&self) -> u64 {
        self.sizes.values().sum()
    }
}

/// Frames per length, and per flow (when there are not too many flows).
pub type Counts = (BTreeMap<u16, u64>, Option<HashMap<Flow, u64>>);

/// What generator threads that sent `per_thread` frames of `cfg` sent of
/// each size and flow (flows only up to VERIFY_MAX_FLOWS of them).
pub fn expected(cfg: &GenConfig, per_thread: &[u64]) -> Result<Counts> {
    let seq = cfg.size_sequence();
    let mut sizes = BTreeMap::new();
    let nflows = cfg.flow_count();
    let mut flows = (nflows <= VERIFY_MAX_FLOWS).then(HashMap::new);
    for &n in per_thread {
        let l = seq.len() as u64;
        for (i, &len) in seq.iter().enumerate() {
            *sizes.entry(len).or_default() += n / l + u64::from((i as u64) < n % l);
        }
        if let Some(flows) = &mut flows {
            for f in 0..nflows.min(n) {
                *flows.entry(cfg.flow(f)?).or_default() += n / nflows + u64::from(f < n % nflows);
            }
        }
    }
    sizes.retain(|_, n| *n > 0);
    Ok((sizes, flows))
}

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

/// The outcome of `--verify`.
#[derive(Clone, Debug, Serialize)]
pub struct Verification {
    pub captured: u64,
    pub capture_lost: u64,
    pub bad_checksums: u64,
    pub other_frames: u64,
    /// Frames per length: (length with FCS, received, expected).
    pub sizes: Vec<(u16, u64, u64)>,
    pub flows_seen: usize,
    pub flows_expected: Option<usize>,
    /// Flows whose count differs from what was sent.
    pub flows_wrong: Option<usize>,
    /// Frames captured per receiving CPU.
    pub per_cpu: BTreeMap<u32, u64>,
    /// Everything sent arrived, parsed, with valid checksums, in the
    /// expected sizes and flows.
    pub exact: bool,
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
    let sink_opts = if p.verify { SinkOptions { capture_ring: Some(VERIFY_RING), count_sizes: false } } else { SinkOptions::default() };
    let sink = LabAttachment::sink_with(sink_ns, sink_if, sink_opts)?;
    let counter = sink.sink_counter()?;

    let mut results = Results::new("gen", args);
    results.notes.push(format!("{}; generator threads pinned to CPUs {:?}", p.describe(), p.cpus));
    results.notes.push("veth: the sink receives in softirq on the sending CPU, so a CPU's rate is generator + sink".into());
    let point = Point {
        size: match p.size {
            Size::Fixed(n) => n as u32,
            Size::Imix => 0,
        },
        flows: p.flows() as u32,
        ipv6: p.ipv6,
        routes: 0,
        queues: p.threads() as u32,
        netfilter: false,
    };
    let kind = match p.rate {
        Some(r) => SampleKind::Load { offered_pps: r as f64 },
        None => SampleKind::Max,
    };

    let capture_done = AtomicBool::new(false);
    let (ipv6, tcp) = (p.ipv6, p.tcp.is_some());
    let (outcome, tally) = std::thread::scope(|s| -> Result<_> {
        let reader = p.verify.then(|| {
            s.spawn(|| -> Result<Tally> {
                let mut t = Tally::default();
                counter.read_capture(&|| capture_done.load(Ordering::Relaxed), &mut |c| t.add(&c, ipv6, tcp))?;
                Ok(t)
            })
        });
        let sent = send(p, gen_ns, gen_if, &cfg, counter, &point, kind, &mut results, status);
        // Frames in flight reach the sink before the capture stops.
        std::thread::sleep(Duration::from_millis(200));
        capture_done.store(true, Ordering::Relaxed);
        let tally = match reader {
            Some(h) => Some(h.join().map_err(|_| anyhow::anyhow!("capture reader panicked"))??),
            None => None,
        };
        Ok((sent?, tally))
    })?;
    let (per_thread, secs) = outcome;

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
        Some(t) => Some(verify(&cfg, &per_thread.iter().map(|t| t.1).collect::<Vec<_>>(), t, total, sent)?),
        None => None,
    };
    results.summarize(&[]);
    Ok(Report {
        description: p.describe(),
        seconds: secs,
        sent,
        received: total.packets,
        received_bytes: total.bytes,
        loss_pct: loss_pct(sent, total.packets),
        per_cpu,
        verification,
        results: Some(results),
    })
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
            if dt > 0.05 {
                let (ds, dr) = (s - last_s, r.saturating_sub(last_r));
                let delta = cpu::delta(&c, &last_c);
                results.samples.push(Sample {
                    variant: "gen".into(),
                    point: point.clone(),
                    run,
                    kind,
                    seconds: dt,
                    sent: ds,
                    received: dr,
                    sent_mpps: ds as f64 / dt / 1e6,
                    mpps: dr as f64 / dt / 1e6,
                    loss_pct: loss_pct(ds, dr),
                    loss: if p.through_dut.is_none() { Loss { gen_to_dut: ds as i64 - dr as i64, ..Loss::default() } } else { Loss::default() },
                    cpus: cpu::shares(&delta),
                    ns_per_packet: if dr > 0 { cpu::busy_ns(&delta) / dr as f64 } else { f64::NAN },
                    softirq_ns_per_packet: if dr > 0 { cpu::softirq_ns(&delta) / dr as f64 } else { f64::NAN },
                });
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

fn verify(cfg: &GenConfig, per_thread: &[u64], t: &Tally, total: SinkCounts, sent: u64) -> Result<Verification> {
    let (want_sizes, want_flows) = expected(cfg, per_thread)?;
    let mut lens: Vec<u16> = want_sizes.keys().chain(t.sizes.keys()).copied().collect();
    lens.sort_unstable();
    lens.dedup();
    let sizes = lens.iter().map(|l| (l + 4, t.sizes.get(l).copied().unwrap_or(0), want_sizes.get(l).copied().unwrap_or(0))).collect::<Vec<_>>();
    let flows_wrong = want_flows.as_ref().map(|w| {
        let mut wrong = w.iter().filter(|(f, n)| t.flows.get(f).copied().unwrap_or(0) != **n).count();
        wrong += t.flows.keys().filter(|f| !w.contains_key(f)).count();
        wrong
    });
    // Frames that are not the generator's (a dut's own IPv6 chatter) are
    // reported, not held against it: a generated frame that arrived
    // mangled would be missing from the counts.
    let exact = total.capture_lost == 0
        && t.bad_checksums == 0
        && t.frames() == sent
        && sizes.iter().all(|s| s.1 == s.2)
        && flows_wrong == Some(0);
    Ok(Verification {
        captured: t.frames() + t.other,
        capture_lost: total.capture_lost,
        bad_checksums: t.bad_checksums,
        other_frames: t.other,
        sizes,
        flows_seen: t.flows.len(),
        flows_expected: want_flows.as_ref().map(|w| w.len()),
        flows_wrong,
        per_cpu: t.per_cpu.clone(),
        exact,
    })
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
        println!("\nverification: {} frames captured, {} not captured (ring full), {} bad checksums, {} not generated", v.captured, v.capture_lost, v.bad_checksums, v.other_frames);
        println!("{:>8} {:>12} {:>12}", "size", "received", "sent");
        for (len, got, want) in &v.sizes {
            println!("{:>8} {:>12} {:>12}{}", len, got, want, if got == want { "" } else { "  <-" });
        }
        match (v.flows_expected, v.flows_wrong) {
            (Some(n), Some(w)) => println!("flows: {} seen of {n}, {w} with a count other than sent", v.flows_seen),
            _ => println!("flows: {} seen (too many to check one by one)", v.flows_seen),
        }
        println!("{}", if v.exact { "verified: every frame arrived, parsed, checksums valid, sizes and flows exactly as sent" } else { "NOT exact (see above)" });
    }
}

/// `xnf lab gen` from the command line.
pub fn run(a: GenArgs) -> Result<()> {
    let p = plan(&a)?;
    for name in xnf_netns::cleanup_stale()? {
        eprintln!("xnf lab: removed {name}, left by a lab or test run that was killed");
    }
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
        eprintln!("xnf lab: wrote {} (draw it with `xnf lab report {}`)", path.display(), path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! Runs in namespaces (root): the generator sends, the sink captures,
    //! user space parses every frame and compares with what was sent.
    use super::*;
    use clap::Parser;
    use crate::programs::gen::AMS_IX_IMIX;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: GenArgs,
    }

    fn args(a: &[&str]) -> GenArgs {
        Cli::try_parse_from(std::iter::once("gen").chain(a.iter().copied())).unwrap().a
    }

    /// These tests measure time and share the CPUs: one at a time.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn run(a: &[&str]) -> (Plan, Report) {
        let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let p = plan(&args(a)).unwrap();
        let r = run_plan(&p, &serde_json::Value::Null, &mut |_| {}).unwrap();
        (p, r)
    }

    /// Everything sent arrived and was parsed: exact counts per size and
    /// flow, all checksums valid.
    fn assert_exact(what: &str, p: &Plan, r: &Report, count: u64) {
        assert_eq!((r.sent, r.received), (count, count), "{what}: sent / received");
        let v = r.verification.as_ref().unwrap();
        assert_eq!((v.capture_lost, v.bad_checksums, v.other_frames), (0, 0, 0), "{what}");
        for (len, got, want) in &v.sizes {
            assert_eq!(got, want, "{what}: {len}-byte frames");
        }
        assert_eq!(v.sizes.iter().map(|s| s.1).sum::<u64>(), count, "{what}");
        let flows = p.flows().min(count) as usize;
        assert_eq!((v.flows_seen, v.flows_expected, v.flows_wrong), (flows, Some(flows), Some(0)), "{what}: flows");
        assert!(v.exact, "{what}: {v:?}");
    }

    #[test]
    fn sends_exactly_the_count_in_every_size_and_flow_checked_at_the_sink() {
        let list = std::env::temp_dir().join(format!("xnf-gen-test-{}.txt", std::process::id()));
        std::fs::write(&list, "# route-table targets\n2001:db8:ff::1\n2001:db8:ff:1::\n\n2001:db8:abcd::7 # a comment\n").unwrap();
        let cases: Vec<(&str, Vec<&str>, u64)> = vec![
            ("64 B IPv4 UDP, 42 flows", vec!["--flows", "7", "--dports", "2", "--dsts", "3"], 30_000),
            ("1518 B IPv6 TCP ACK, 20 flows", vec!["--ipv6", "--tcp", "--size", "1518", "--srcs", "4", "--flows", "5"], 20_000),
            ("IMIX IPv4 UDP, 3 flows", vec!["--size", "imix", "--flows", "3"], 996 * 40),
            ("IMIX IPv6 TCP SYN, destinations from a list", vec!["--size", "imix", "--ipv6", "--tcp", "syn", "--dst-list", list.to_str().unwrap()], 996 * 40),
            ("IPv4 TCP SYN, 10000 destinations, stride 7", vec!["--tcp", "syn", "--dsts", "10000", "--dst-base", "198.18.2.0", "--dst-stride", "7", "--size", "100"], 25_000),
        ];
        for (what, a, count) in cases {
            let n = count.to_string();
            let a: Vec<&str> = a.into_iter().chain(["--count", &n, "--verify"]).collect();
            let (p, r) = run(&a);
            assert_exact(what, &p, &r, count);
            if p.size == Size::Imix {
                // 40 whole cycles: exactly the AMS-IX shares (per mille).
                let v = r.verification.as_ref().unwrap();
                let min = p.hdr_len().max(60) as u16 + 4;
                for (wire, share) in AMS_IX_IMIX {
                    let got = v.sizes.iter().find(|s| s.0 == wire.max(min)).map(|s| s.1);
                    assert_eq!(got, Some(share as u64 * 40), "{what}: {wire}-byte class");
                }
            }
        }
        std::fs::remove_file(list).unwrap();
    }

    #[test]
    fn two_threads_on_two_cpus_send_their_shares_exactly() {
        let (p, r) = run(&["--cpus", "0,1", "--count", "60001", "--size", "imix", "--flows", "10", "--dsts", "3", "--verify"]);
        assert_exact("2 CPUs", &p, &r, 60_001);
        let per_cpu: Vec<(usize, u64, u64)> = r.per_cpu.iter().map(|c| (c.cpu, c.sent, c.received)).collect();
        // On a veth the sink receives on the sending CPU, on its own queue.
        assert_eq!(per_cpu, vec![(0, 30_001, 30_001), (1, 30_000, 30_000)]);
        let v = r.verification.unwrap();
        assert_eq!(v.per_cpu, BTreeMap::from([(0, 30_001), (1, 30_000)]));
    }

    #[test]
    fn a_rate_with_a_count_sends_the_count_at_the_rate() {
        for cpus in ["1", "0,1"] {
            let t0 = Instant::now();
            let (p, r) = run(&["--cpus", cpus, "--rate", "40000", "--count", "20000", "--tcp", "--flows", "4", "--verify"]);
            let secs = t0.elapsed().as_secs_f64();
            assert_exact("rate + count", &p, &r, 20_000);
            // 0.5 s of sending (other tests may share the CPUs: some slack).
            assert!(r.seconds > 0.45 && r.seconds < 2.0, "CPUs {cpus}: sending took {:.2} s", r.seconds);
            assert!(secs < 10.0, "the whole run took {secs:.1} s");
        }
    }

    #[test]
    fn a_rate_for_some_seconds_holds_the_rate() {
        let (_, r) = run(&["--rate", "200000", "--seconds", "2"]);
        let want = 400_000.0;
        // The last call may end a little after the deadline when other
        // tests share the CPU.
        assert!((r.sent as f64 - want).abs() < want * 0.1, "sent {} in 2 s at 200 kpps", r.sent);
        assert_eq!(r.received, r.sent);
        let samples = &r.results.as_ref().unwrap().samples;
        assert!((2..=3).contains(&samples.len()), "{} one-second samples", samples.len());
        assert!(samples.iter().all(|s| s.variant == "gen" && matches!(s.kind, SampleKind::Load { .. })));
    }

    #[test]
    fn through_a_kernel_dut_every_frame_arrives_forwarded() {
        let (p, r) = run(&["--through-dut", "kernel", "--count", "20000", "--srcs", "3", "--src-base", "198.18.0.100", "--dsts", "5", "--flows", "2", "--verify"]);
        let v = r.verification.as_ref().unwrap();
        assert!(v.exact, "{v:?}");
        assert_eq!((r.sent, v.flows_seen, v.bad_checksums), (20_000, p.flows() as usize, 0));
    }

    #[test]
    fn plans_refuse_what_cannot_be_sent() {
        for (a, want) in [
            (&["--flows", "64513"][..], "more flows than the source-port range allows"),
            (&["--sports", "64513"][..], "more flows than the source-port range allows"),
            (&["--ipv6", "--size", "64"][..], "at least 66 bytes"),
            (&["--ipv6", "--tcp", "--size", "77"][..], "at least 78 bytes"),
            (&["--cpus", "0,99"][..], "CPU 99 does not exist"),
            (&["--count", "1", "--cpus", "0,1"][..], "less than one frame per generator CPU"),
            (&["--dsts", "200000", "--dst-base", "198.19.255.0"][..], "leave the lab's ranges"),
            (&["--dst-base", "2001:db8::1"][..], "is not IPv4"),
            (&["--through-dut", "kernel", "--srcs", "2"][..], "dut's own address"),
            (&["--through-dut", "kernel", "--dst-base", "198.18.1.7"][..], "connected"),
        ] {
            let err = format!("{:#}", plan(&args(a)).unwrap_err());
            assert!(err.contains(want), "{a:?}: {err}");
        }
        assert_eq!(plan(&args(&["--flows", "64512"])).unwrap().flows(), 64512);
    }

    #[test]
    fn expected_counts_follow_the_sequence_and_the_odometer() {
        let p = plan(&args(&["--size", "imix", "--flows", "3", "--dsts", "2"])).unwrap();
        let cfg = p.gen_config(Mac([2, 0, 0, 0, 0, 1]), Mac([2, 0, 0, 0, 0, 2])).unwrap();
        let (sizes, flows) = expected(&cfg, &[996 + 5, 7]).unwrap();
        assert_eq!(sizes.values().sum::<u64>(), 1008);
        let flows = flows.unwrap();
        assert_eq!(flows.len(), 6);
        // 1001 = 166 * 6 + 5, 7 = 1 * 6 + 1: flow 0 gets 167 + 2, flow 5 gets 166 + 1.
        assert_eq!(flows[&cfg.flow(0).unwrap()], 169);
        assert_eq!(flows[&cfg.flow(5).unwrap()], 167);
    }
}
