//! `xnf lab fib-change`: how long after a route change frames still follow
//! the old decision — the invalidation window of `xnf router --fib cache`,
//! against full lookups and the kernel's own forwarding, on the `line`
//! topology with real traffic. With `--change nexthop-mac`, how long
//! traffic takes to reach a next hop that changed its MAC without telling
//! anyone (the kernel's neighbour state machine, or nothing, finds it).
//!
//! A sender in gen streams UDP datagrams to sink, each stamped with its
//! send time (CLOCK_MONOTONIC, one clock for the whole machine). At T0 the
//! lab replaces the sink's /32 (/128) route on dut with one back out of
//! the ingress (a hairpin: those frames never reach the sink), through
//! netlink from its own thread, then restores it. The window is the send
//! time of the last datagram that still reached the sink, minus T0 (0 if
//! none did); stale frames are those datagrams. Variants alternate
//! change by change, each attached afresh.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use clap::Args;
use serde::Serialize;
use xnf_netns::{LineConfig, LineTopology, Offload};
use xnf_router::program::FibMode;

use super::latency::pingpong::now_ns;
use super::latency::stats::quantile;
use crate::engine::attach::router_options;
use crate::engine::peers::{self, Peer, PeerGuard};
use crate::engine::stream::Stream;
use crate::engine::{LabAttachment, NfGuard};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// The kernel forwards.
    Kernel,
    /// What `xnf router attach` attaches: the route cache, with its follower.
    Xnf,
    /// `xnf router attach --fib full`.
    XnfFull,
    /// xdp-tools' xdp-forward (`--fib-mode full`), as in `xnf lab router`.
    XdpForward,
}

impl Variant {
    /// How the router variants look routes up: `xnf` as `xnf router
    /// attach` does by default (the router's own default), `xnf-full` by
    /// the FIB for every packet.
    pub fn fib(self) -> Option<FibMode> {
        match self {
            Variant::Xnf => Some(FibMode::default()),
            Variant::XnfFull => Some(FibMode::Full),
            Variant::Kernel | Variant::XdpForward => None,
        }
    }
}

/// `--variants`' values ([`Variant`]), and the route cache's old name
/// refused in one line with its new one ([`super::router::renamed`]; an
/// old name whose new one is not a variant here is just not a variant).
#[derive(Clone)]
pub struct VariantParser;

impl clap::builder::TypedValueParser for VariantParser {
    type Value = Variant;

    fn parse_ref(&self, cmd: &clap::Command, arg: Option<&clap::Arg>, value: &std::ffi::OsStr) -> Result<Variant, clap::Error> {
        if let Some((new, refusal)) = value.to_str().and_then(super::router::renamed) {
            if <Variant as clap::ValueEnum>::from_str(new, false).is_ok() {
                return Err(clap::Error::raw(clap::error::ErrorKind::InvalidValue, refusal).with_cmd(cmd));
            }
        }
        clap::builder::EnumValueParser::<Variant>::new().parse_ref(cmd, arg, value)
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(<Variant as clap::ValueEnum>::value_variants().iter().filter_map(clap::ValueEnum::to_possible_value)))
    }
}

/// What changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Change {
    /// The sink's route on dut is replaced (a hairpin), then restored.
    Route,
    /// The sink takes another MAC and tells nobody; dut's entry for it is
    /// made STALE (what its reachable timer does after 30 s of traffic
    /// that only XDP forwards), then both are restored.
    NexthopMac,
}

/// `xnf lab fib-change`.
#[derive(Args, Clone, Debug, Serialize)]
pub struct FibChangeArgs {
    /// Route changes per variant.
    #[arg(long, default_value_t = 20)]
    pub changes: u32,
    /// Variants, alternated change by change.
    #[arg(long, value_parser = VariantParser, value_delimiter = ',', default_value = "kernel,xnf,xnf-full")]
    pub variants: Vec<Variant>,
    /// What changes: the route, or the next hop's MAC.
    #[arg(long, value_enum, default_value = "route")]
    pub change: Change,
    /// With `--change nexthop-mac`: seconds to wait for traffic to reach
    /// the new MAC before the change counts as never followed.
    #[arg(long, default_value_t = 30)]
    pub timeout: u64,
    /// IPv6 instead of IPv4.
    #[arg(long)]
    pub ipv6: bool,
    /// Datagrams per second the sender offers at most (it sleeps between
    /// datagrams; the sleeps overshoot).
    #[arg(long, default_value_t = 20_000)]
    pub rate: u32,
    /// xdp-forward's binary (default: where scripts/peers.sh builds it).
    #[arg(long, value_name = "PATH")]
    pub xdp_forward: Option<std::path::PathBuf>,
    /// Write the results as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<std::path::PathBuf>,
}

/// One variant's changes.
#[derive(Debug, Default, Serialize)]
pub struct VariantResult {
    pub variant: String,
    /// Per change: µs from T0 to the send time of the last datagram that
    /// followed the old route (0: none did).
    pub windows_us: Vec<f64>,
    /// Per change: datagrams sent after T0 that reached the sink.
    pub stale: Vec<u64>,
    /// Per change: µs from the kernel's acknowledgement of the change to
    /// the send time of the last datagram that followed the old route (0:
    /// none sent after the acknowledgement did) — what a forwarder adds to
    /// the kernel's own change.
    pub after_ack_us: Vec<f64>,
    /// `--change nexthop-mac`, per change: µs from the MAC change to the
    /// send time of the first datagram that reached the new MAC (null:
    /// none within `--timeout`).
    pub recovered_us: Vec<Option<f64>>,
}

pub fn run(a: FibChangeArgs) -> Result<()> {
    ensure!(a.changes >= 1 && a.changes <= 1000, "--changes {}: 1 to 1000", a.changes);
    ensure!((1000..=1_000_000).contains(&a.rate), "--rate {}: 1000 to 1000000 datagrams/s", a.rate);
    ensure!(!a.variants.is_empty(), "--variants: name at least one");
    ensure!((1..=600).contains(&a.timeout), "--timeout {}: 1 to 600 seconds", a.timeout);
    let xdp_forward = match a.variants.contains(&Variant::XdpForward) {
        true => Some(Peer::built_in("xdp-forward", &peers::xdp_forward_binary(a.xdp_forward.as_deref())?).expect("a built-in peer")),
        false => None,
    };
    let line = LineTopology::new(&LineConfig::default()).context("building the line topology")?;
    line.gen().set_offload(&line.gen_if, Offload::TxChecksum, false)?;
    // Redirected frames into a veth need an XDP program on its peer.
    let _sink_pass = LabAttachment::pass(line.sink(), &line.sink_if)?;
    let _gen_pass = LabAttachment::pass(line.gen(), &line.gen_if)?;
    let (from, to): (IpAddr, IpAddr) = if a.ipv6 { (line.gen_v6.into(), line.sink_v6.into()) } else { (line.gen_v4.into(), line.sink_v4.into()) };
    let to = SocketAddr::new(to, 9999);
    let stream = Stream::start(line.gen(), from, line.sink(), to, vec![to], a.rate)?;
    let mut results: Vec<VariantResult> = a.variants.iter().map(|v| VariantResult { variant: name(*v).into(), ..Default::default() }).collect();
    for i in 0..a.changes as usize {
        for k in 0..a.variants.len() {
            let j = (i + k) % a.variants.len();
            let _on = attach(&line, a.variants[j], xdp_forward.as_ref())?;
            if a.change == Change::NexthopMac {
                results[j].recovered_us.push(one_mac_change(&line, a.ipv6, &stream, Duration::from_secs(a.timeout))?);
                continue;
            }
            let (window, stale, after_ack) = one_change(&line, a.ipv6, &stream)?;
            results[j].windows_us.push(window);
            results[j].stale.push(stale);
            results[j].after_ack_us.push(after_ack);
        }
        eprint!("\rxnf lab fib-change: {} of {} changes per variant", i + 1, a.changes);
    }
    eprintln!();
    stream.stop();
    match a.change {
        Change::Route => print_table(&results, a.rate),
        Change::NexthopMac => print_mac_table(&results, a.rate, a.timeout),
    }
    if let Some(path) = &a.json {
        let doc = serde_json::json!({ "experiment": "fib-change", "options": a, "results": results });
        std::fs::write(path, serde_json::to_string_pretty(&doc)?).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn name(v: Variant) -> &'static str {
    match v {
        Variant::Kernel => "kernel",
        Variant::Xnf => "xnf",
        Variant::XnfFull => "xnf-full",
        Variant::XdpForward => "xdp-forward",
    }
}

/// The variant attached on dut, detached when dropped.
enum On {
    Kernel,
    Router(#[allow(dead_code)] NfGuard),
    Peer(#[allow(dead_code)] PeerGuard),
}

/// The variant on dut (nothing for the kernel).
fn attach(line: &LineTopology, v: Variant, xdp_forward: Option<&Peer>) -> Result<On> {
    let fib = match v {
        Variant::Kernel => return Ok(On::Kernel),
        Variant::XdpForward => {
            let peer = xdp_forward.expect("xdp-forward's peer, made when it is a variant");
            return Ok(On::Peer(PeerGuard::attach(peer, line.dut(), &line.dut_gen_if, &line.dut_sink_if)?));
        }
        Variant::Xnf | Variant::XnfFull => v.fib().expect("a router variant"),
    };
    let ifaces = [line.dut_gen_if.clone(), line.dut_sink_if.clone()];
    Ok(On::Router(NfGuard::router(line.dut(), &ifaces, router_options(fib))?))
}

/// One route change: (window µs, stale datagrams, window after the ack µs).
fn one_change(line: &LineTopology, ipv6: bool, stream: &Stream) -> Result<(f64, u64, f64)> {
    let (sink, host) = if ipv6 { (IpAddr::from(line.sink_v6), 128) } else { (IpAddr::from(line.sink_v4), 32) };
    let back = if ipv6 { IpAddr::from(line.gen_v6) } else { IpAddr::from(line.gen_v4) };
    let dst = format!("{sink}/{host}");
    // Traffic flows (and, with the cache, is cached) before the change.
    stream.wait_delivered(200)?;
    let t0 = now_ns();
    line.dut().route_replace(&dst, Some(&back.to_string()), Some(&line.dut_gen_if)).context("replacing the sink's route on dut")?;
    let t1 = now_ns();
    std::thread::sleep(Duration::from_millis(50));
    let (last, stale) = stream.after(t0);
    line.dut().route_del(&dst).context("restoring the sink's route on dut")?;
    let us = |from: u64| last.map_or(0.0, |l| l.saturating_sub(from) as f64 / 1000.0);
    Ok((us(t0), stale, us(t1)))
}

/// A locally administered MAC the sink takes for a while.
const OTHER_MAC: &str = "02:00:00:00:5e:11";

/// One silent MAC change of the next hop: µs from the change (both
/// commands done) to the send time of the first datagram that reached the
/// new MAC (None: none within `timeout`). The sink gets its MAC back and dut's
/// entry is deleted afterwards, so the next variant starts from a fresh
/// resolution.
fn one_mac_change(line: &LineTopology, ipv6: bool, stream: &Stream, timeout: Duration) -> Result<Option<f64>> {
    let sink = if ipv6 { IpAddr::from(line.sink_v6) } else { IpAddr::from(line.sink_v4) }.to_string();
    stream.wait_delivered(200)?;
    line.sink().ip(&["link", "set", "dev", &line.sink_if, "address", OTHER_MAC]).context("changing the sink's MAC")?;
    line.dut().ip(&["neigh", "change", &sink, "dev", &line.dut_sink_if, "nud", "stale"]).context("making dut's entry for the sink STALE")?;
    // From here on a datagram that arrives went to the new MAC.
    let t0 = now_ns();
    let deadline = std::time::Instant::now() + timeout;
    let first = loop {
        if let Some(t) = stream.first_after(t0) {
            break Some(t.saturating_sub(t0) as f64 / 1000.0);
        }
        if std::time::Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    line.sink().ip(&["link", "set", "dev", &line.sink_if, "address", &line.sink_mac.to_string()]).context("giving the sink its MAC back")?;
    // Absent already if the kernel gave it up (FAILED entries are kept,
    // but a garbage collection may have taken it).
    let _ = line.dut().ip(&["neigh", "del", &sink, "dev", &line.dut_sink_if]);
    stream.take();
    Ok(first)
}

fn print_mac_table(results: &[VariantResult], rate: u32, timeout: u64) {
    println!("the sink changed its MAC silently while {rate} datagrams/s flow gen -> sink, dut's entry made STALE; recovered: until the first datagram reached the new MAC");
    println!("{:<12} {:>8} {:>14} {:>14} {:>14}", "variant", "changes", "recovered", "median ms", "max ms");
    for r in results {
        let done: Vec<f64> = r.recovered_us.iter().flatten().map(|us| us / 1000.0).collect();
        let ms = |p: f64| if done.is_empty() { "-".to_string() } else { format!("{:.0}", q(&done, p)) };
        let (median, max) = (ms(0.5), ms(1.0));
        println!("{:<12} {:>8} {:>14} {:>14} {:>14}", r.variant, r.recovered_us.len(), format!("{} of {}", done.len(), r.recovered_us.len()), median, max);
    }
    println!("(not recovered: no datagram reached the new MAC within {timeout} s)");
}

fn print_table(results: &[VariantResult], rate: u32) {
    println!("route replaced on dut while {rate} datagrams/s flow gen -> sink; window: T0 to the send time of the last datagram that followed the old route");
    println!(
        "{:<12} {:>8} {:>12} {:>12} {:>12} {:>14} {:>16} {:>14}",
        "variant", "changes", "median µs", "p90 µs", "max µs", "stale/change", "after ack: med", "max µs"
    );
    for r in results {
        let (w, a) = (&r.windows_us, &r.after_ack_us);
        let stale = r.stale.iter().sum::<u64>() as f64 / r.stale.len().max(1) as f64;
        println!(
            "{:<12} {:>8} {:>12.0} {:>12.0} {:>12.0} {:>14.1} {:>16.0} {:>14.0}",
            r.variant,
            w.len(),
            q(w, 0.5),
            q(w, 0.9),
            q(w, 1.0),
            stale,
            q(a, 0.5),
            q(a, 1.0)
        );
    }
}

/// The `p` quantile of values in any order.
fn q(v: &[f64], p: f64) -> f64 {
    let mut w = v.to_vec();
    w.sort_by(|a, b| a.total_cmp(b));
    quantile(&w, p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::driver::parse_options;

    #[test]
    fn variants_are_named_after_what_the_commands_attach_and_old_names_say_the_new() {
        let parse = |a: &[&str]| parse_options::<FibChangeArgs>(a);
        assert_eq!(parse(&[]).unwrap().variants, [Variant::Kernel, Variant::Xnf, Variant::XnfFull]);
        assert_eq!((Variant::Xnf.fib(), Variant::XnfFull.fib(), Variant::Kernel.fib()), (Some(FibMode::default()), Some(FibMode::Full), None));
        let e = parse(&["--variants", "kernel,xnf-cache"]).unwrap_err().to_string();
        assert!(e.contains("--variants: `xnf-cache` is now `xnf` (what `xnf router attach` attaches; `xnf-full` is --fib full)"), "{e}");
        for bad in ["xnf-turbo", "xnf-cache-lean"] {
            let e = parse(&["--variants", bad]).unwrap_err().to_string();
            assert!(e.contains("[possible values: kernel, xnf, xnf-full, xdp-forward]"), "{bad}: {e}");
        }
    }
}
