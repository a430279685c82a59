//! `xnf lab gen`'s command line: the common options as gen takes them,
//! its own, and their parsers, which refuse what is not a size, count,
//! rate or CPU list.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Mutex;

use clap::builder::ArgPredicate;
use clap::{Arg, Args, ValueEnum};
use serde::Serialize;

use super::{Plan, Report};
use crate::engine::driver::Common;

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
    /// `xnf router` forwards in XDP, attached as `xnf router attach`
    /// attaches it (the route cache, with its follower).
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

/// `xnf lab gen`: the options every experiment takes and its own.
#[derive(Args, Debug)]
#[command(after_long_help = AFTER_HELP, mut_args(tune))]
pub struct GenArgs {
    #[command(flatten)]
    pub common: Common,
    #[command(flatten)]
    pub gen: Gen,
}

/// The common options as gen takes them: one run; the topology gen ->
/// sink, or the line with --through-dut; no warm-up (every frame sent is
/// counted); with --count, no time limit unless --seconds gives one. What
/// gen cannot use is hidden from its help (and refused when given, see
/// `plan`).
fn tune(a: Arg) -> Arg {
    match a.get_id().as_str() {
        "runs" => a.default_value("1").help("Runs: the generator sends this many times, each checked on its own"),
        "topology" => a
            .default_value("pair")
            .default_value_if("through_dut", ArgPredicate::IsPresent, Some("line"))
            .hide_default_value(true)
            .help("Topology: a built-in scenario or a TOML file with [roles] [default: pair; line with --through-dut]"),
        "seconds" => a
            .default_value_if("count", ArgPredicate::IsPresent, Some("inf"))
            .hide_default_value(true)
            .help("Stop after this many seconds [default: 5 without --count; with --count, whichever comes first]"),
        "warmup" => a.default_value("0").hide(true),
        "profile" => a.help(
            "Profile the run itself with `xnf profile` attached (all CPUs, stacks sampled): there is no unprofiled twin, its rates are with the profiler attached (`counts`: nothing that runs per packet)",
        ),
        "cpu" => a.help("The generator's CPU [default: the last one]; --cpus gives several"),
        "trial_seconds" | "zero_loss" | "load_curve" | "load_rates" => a.hide(true),
        _ => a,
    }
}

/// `xnf lab gen`'s own options (and, once planned, what it measured).
#[derive(Args, Debug, Serialize)]
pub struct Gen {
    /// IPv6 instead of IPv4.
    #[arg(long)]
    pub ipv6: bool,
    /// TCP segments instead of UDP datagrams: plain ACKs (the default) or SYNs.
    #[arg(long, value_enum, value_name = "ack|syn", num_args = 0..=1, default_missing_value = "ack")]
    pub tcp: Option<TcpKind>,
    /// Frame size on the wire with FCS (64..=1518), or `imix`: the AMS-IX
    /// mix of the xdp-forward thesis §5.3.7 (64, 128, 256, 512, 1024, 1518 B in shares
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
    /// First source address [default: gen's in the topology, 198.18.0.1 / 2001:db8::1].
    #[arg(long, value_name = "ADDR")]
    pub src_base: Option<IpAddr>,
    /// Destination addresses: --dst-base + i * --dst-stride.
    #[arg(long, value_name = "N", value_parser = parse_count, allow_hyphen_values = true)]
    pub dsts: Option<u64>,
    /// First destination address [default: the sink's in the topology
    /// (the line's 198.18.1.2 / 2001:db8:1::2), for one destination;
    /// 198.19.0.0 / 2001:db8:ff:: for more].
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
    /// Generator CPUs, one thread pinned to each, e.g. 0,1 or 0-3 [default:
    /// --cpu's, the last CPU]. With several, the veth gets one queue per thread.
    #[arg(long, value_name = "LIST", value_parser = parse_cpus, conflicts_with = "cpu")]
    pub cpus: Option<CpuList>,
    /// Send through the topology's dut forwarding with the kernel or with
    /// `xnf router` [default: straight into the sink].
    #[arg(long, value_enum, value_name = "kernel|xnf")]
    pub through_dut: Option<Dut>,
    /// Copy every frame at the sink to user space, parse it and check sizes,
    /// flows and checksums against what was sent (frames the capture ring
    /// cannot hold at high rates are counted, not checked).
    #[arg(long)]
    pub verify: bool,
    /// What is sent, checked (made by `super::run` before the driver runs).
    #[arg(skip)]
    #[serde(skip)]
    pub plan: Option<Plan>,
    /// Each run's outcome.
    #[arg(skip)]
    #[serde(skip)]
    pub reports: Mutex<Vec<Report>>,
}

const AFTER_HELP: &str = "\
Flows: every combination of source port, destination port, source address \
and destination address is a flow (source port turning fastest), so \
--sports 100 --dsts 50 makes 5000 flows. Every thread cycles through all \
flows and sizes from the first.

Topology: without --through-dut, the built-in pair: one veth pair gen -> \
sink, IPv6 off (so the sink sees only generated frames). On a veth the \
receiver runs in softirq on the sending CPU, so each CPU's rate is \
generator + sink together. The sink drops in XDP and counts per CPU. With \
--through-dut, the line: dut routes the lab's ranges to the sink.

Examples:
  xnf lab gen                                  64 B UDP, as fast as possible, 5 s
  xnf lab gen --cpus 0,1 --size imix           IMIX from two CPUs
  xnf lab gen --tcp syn --ipv6 --flows 1000    IPv6 SYNs from 1000 source ports
  xnf lab gen --rate 100000 --count 1000000    exactly 1e6 frames at 100 kpps
  xnf lab gen --dst-list targets.txt --verify  the route-table targets, checked";
