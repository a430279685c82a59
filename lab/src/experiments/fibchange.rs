//! `xnf lab fib-change`: how long after a route change frames still follow
//! the old decision — the invalidation window of `xnf router --fib cache`,
//! against full lookups and the kernel's own forwarding, on the `line`
//! topology with real traffic.
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
use crate::engine::stream::Stream;
use crate::engine::{LabAttachment, NfGuard};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// The kernel forwards.
    Kernel,
    /// `xnf router --fib full`.
    XnfFull,
    /// `xnf router --fib cache` with its follower.
    XnfCache,
}

/// `xnf lab fib-change`.
#[derive(Args, Clone, Debug, Serialize)]
pub struct FibChangeArgs {
    /// Route changes per variant.
    #[arg(long, default_value_t = 20)]
    pub changes: u32,
    /// Variants, alternated change by change.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "kernel,xnf-full,xnf-cache")]
    pub variants: Vec<Variant>,
    /// IPv6 instead of IPv4.
    #[arg(long)]
    pub ipv6: bool,
    /// Datagrams per second the sender offers at most (it sleeps between
    /// datagrams; the sleeps overshoot).
    #[arg(long, default_value_t = 20_000)]
    pub rate: u32,
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
}

pub fn run(a: FibChangeArgs) -> Result<()> {
    ensure!(a.changes >= 1 && a.changes <= 1000, "--changes {}: 1 to 1000", a.changes);
    ensure!((1000..=1_000_000).contains(&a.rate), "--rate {}: 1000 to 1000000 datagrams/s", a.rate);
    ensure!(!a.variants.is_empty(), "--variants: name at least one");
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
            let (window, stale, after_ack) = one_change(&line, a.variants[j], a.ipv6, &stream)?;
            results[j].windows_us.push(window);
            results[j].stale.push(stale);
            results[j].after_ack_us.push(after_ack);
        }
        eprint!("\rxnf lab fib-change: {} of {} changes per variant", i + 1, a.changes);
    }
    eprintln!();
    stream.stop();
    print_table(&results, a.rate);
    if let Some(path) = &a.json {
        let doc = serde_json::json!({ "experiment": "fib-change", "options": a, "results": results });
        std::fs::write(path, serde_json::to_string_pretty(&doc)?).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn name(v: Variant) -> &'static str {
    match v {
        Variant::Kernel => "kernel",
        Variant::XnfFull => "xnf-full",
        Variant::XnfCache => "xnf-cache",
    }
}

/// The variant on dut (nothing for the kernel).
fn attach(line: &LineTopology, v: Variant) -> Result<Option<NfGuard>> {
    let fib = match v {
        Variant::Kernel => return Ok(None),
        Variant::XnfFull => FibMode::Full,
        Variant::XnfCache => FibMode::Cache,
    };
    let ifaces = [line.dut_gen_if.clone(), line.dut_sink_if.clone()];
    Ok(Some(NfGuard::router(line.dut(), &ifaces, router_options(fib))?))
}

/// One change with `v` on dut: (window µs, stale datagrams, window after the ack µs).
fn one_change(line: &LineTopology, v: Variant, ipv6: bool, stream: &Stream) -> Result<(f64, u64, f64)> {
    let _on = attach(line, v)?;
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


fn print_table(results: &[VariantResult], rate: u32) {
    println!("route replaced on dut while {rate} datagrams/s flow gen -> sink; window: T0 to the send time of the last datagram that followed the old route");
    println!("{:<10} {:>8} {:>12} {:>12} {:>12} {:>14} {:>16} {:>14}", "variant", "changes", "median µs", "p90 µs", "max µs", "stale/change", "after ack: med", "max µs");
    let q = |v: &[f64], p: f64| {
        let mut w = v.to_vec();
        w.sort_by(|a, b| a.total_cmp(b));
        quantile(&w, p)
    };
    for r in results {
        let (w, a) = (&r.windows_us, &r.after_ack_us);
        let stale = r.stale.iter().sum::<u64>() as f64 / r.stale.len().max(1) as f64;
        println!("{:<10} {:>8} {:>12.0} {:>12.0} {:>12.0} {:>14.1} {:>16.0} {:>14.0}", r.variant, w.len(), q(w, 0.5), q(w, 0.9), q(w, 1.0), stale, q(a, 0.5), q(a, 1.0));
    }
}
