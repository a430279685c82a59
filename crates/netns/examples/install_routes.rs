//! Measures installing and removing big route tables in dut of a
//! `LineTopology`, with batched rtnetlink and, for comparison, `ip -batch`.
//!
//! ```sh
//! cargo run --release -p xnf-netns --example install_routes -- \
//!     [--v4 N] [--v6 N] [--ip-batch N] [--sweep N] [--seed S]
//! ```
//!
//! `--v4`/`--v6`: install N synthetic routes of that family, count them by a
//! dump, remove them (default 1,000,000 IPv4, no IPv6). `--ip-batch N`:
//! install and remove N IPv4 routes with `ip -batch` and with netlink.
//! `--sweep N`: N IPv4 routes with several batch sizes and ack modes.
//! Needs root.

use std::net::IpAddr;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use xnf_netns::{BatchConfig, Family, LineConfig, LineTopology, Netns, RouteReport, RouteSet, XNF_RTPROT};

const USAGE: &str = "\
usage: install_routes [--v4 N] [--v6 N] [--ip-batch N] [--sweep N] [--seed S]   (as root)

  --v4 N        install N synthetic IPv4 routes in dut, count them by a dump,
                remove them (default 1000000; 0 skips)
  --v6 N        the same with IPv6 (default 0)
  --ip-batch N  install and remove N IPv4 routes with `ip -batch`, then with
                netlink batches, for comparison (default 0)
  --sweep N     install N IPv4 routes with several batch sizes and ack modes
                (default 0)
  --seed S      seed of the synthetic tables (default 1)";

struct Args {
    v4: usize,
    v6: usize,
    ip_batch: usize,
    sweep: usize,
    seed: u64,
}

fn parse() -> Result<Args> {
    let mut a = Args { v4: 1_000_000, v6: 0, ip_batch: 0, sweep: 0, seed: 1 };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--help" || flag == "-h" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let value: u64 =
            it.next().with_context(|| format!("{flag} needs a number"))?.replace('_', "").parse().with_context(|| format!("{flag} needs a number"))?;
        match flag.as_str() {
            "--v4" => a.v4 = value as usize,
            "--v6" => a.v6 = value as usize,
            "--ip-batch" => a.ip_batch = value as usize,
            "--sweep" => a.sweep = value as usize,
            "--seed" => a.seed = value,
            _ => bail!("unknown option {flag} (see --help)"),
        }
    }
    Ok(a)
}

/// Kernel memory that routes take (slab + per-CPU), in MiB.
fn kernel_mib() -> f64 {
    let info = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let kib =
        |key: &str| info.lines().find(|l| l.starts_with(key)).and_then(|l| l.split_whitespace().nth(1)).and_then(|kb| kb.parse::<f64>().ok()).unwrap_or(0.0);
    (kib("Slab:") + kib("Percpu:")) / 1024.0
}

fn show(what: &str, r: &RouteReport) {
    println!("  {what:<8} {:>9} routes in {:>7.3} s = {:>9.0} routes/s ({} sends)", r.routes, r.seconds, r.rate(), r.sends);
}

fn full_cycle(dut: &Netns, set: &RouteSet, gateway: IpAddr, dev: &str) -> Result<()> {
    let family = set.family();
    println!("{family}: {} prefixes", set.len());
    let before = dut.route_count(family, None)?;
    let mem = kernel_mib();
    let add = dut.install_routes(set, gateway, dev)?;
    show("install", &add);
    let t = Instant::now();
    let count = dut.route_count(family, Some(XNF_RTPROT))?;
    println!("  dump     {count:>9} routes in {:>7.3} s; kernel memory (slab + per-CPU) +{:.0} MiB", t.elapsed().as_secs_f64(), kernel_mib() - mem);
    if count != set.len() {
        bail!("dump found {count} routes, installed {}", set.len());
    }
    let del = dut.remove_routes(set)?;
    show("remove", &del);
    let after = dut.route_count(family, None)?;
    if after != before {
        bail!("{after} {family} routes left, {before} before");
    }
    Ok(())
}

/// `v` in a pseudo-random order (any fixed shuffle will do).
fn shuffled<T: Clone>(v: &[T]) -> Vec<T> {
    let mut out = v.to_vec();
    fastrand::Rng::with_seed(0x2545_f491_4f6c_dd1d).shuffle(&mut out);
    out
}

fn ip_batch_compare(dut: &Netns, set: &RouteSet, gateway: IpAddr, dev: &str) -> Result<()> {
    println!("ip -batch vs netlink, {} IPv4 routes:", set.len());
    let n = set.len() as f64;
    let mut best_ip = (f64::MAX, f64::MAX);
    for (order, prefixes) in [("address", set.prefixes().to_vec()), ("shuffled", shuffled(set.prefixes()))] {
        let adds: Vec<String> = prefixes.iter().map(|p| format!("route add {p} via {gateway} dev {dev} proto {XNF_RTPROT}")).collect();
        let dels: Vec<String> = prefixes.iter().map(|p| format!("route del {p} proto {XNF_RTPROT}")).collect();
        let t = Instant::now();
        dut.ip_batch(&adds)?;
        let ip_add = t.elapsed().as_secs_f64();
        let count = dut.route_count(Family::V4, Some(XNF_RTPROT))?;
        if count != set.len() {
            bail!("ip -batch installed {count} routes, not {}", set.len());
        }
        let t = Instant::now();
        dut.ip_batch(&dels)?;
        let ip_del = t.elapsed().as_secs_f64();
        println!("  ip -batch, {order:<8} order: install {ip_add:>7.3} s ({:>8.0}/s), remove {ip_del:>7.3} s ({:>8.0}/s)", n / ip_add, n / ip_del);
        best_ip = (best_ip.0.min(ip_add), best_ip.1.min(ip_del));
    }
    let add = dut.install_routes(set, gateway, dev)?;
    let del = dut.remove_routes(set)?;
    println!("  netlink batches:          install {:>7.3} s ({:>8.0}/s), remove {:>7.3} s ({:>8.0}/s)", add.seconds, add.rate(), del.seconds, del.rate(),);
    println!("  netlink vs the better ip -batch: {:.1}x faster to install, {:.1}x to remove", best_ip.0 / add.seconds, best_ip.1 / del.seconds);
    Ok(())
}

fn sweep(dut: &Netns, set: &RouteSet, gateway: IpAddr, dev: &str) -> Result<()> {
    println!("batching sweep, {} IPv4 routes (install, best of 3):", set.len());
    for ack_every in [false, true] {
        for kib in [4, 16, 64, 256, 1024] {
            let config = BatchConfig { send_bytes: kib << 10, ack_every };
            let mut best = f64::MAX;
            for _ in 0..3 {
                let r = dut.install_routes_with(set, gateway, dev, config)?;
                best = best.min(r.seconds);
                dut.remove_routes(set)?;
            }
            println!("  {:>5} KiB per send, ack {:<10} {best:>7.3} s ({:>8.0}/s)", kib, if ack_every { "every" } else { "last only" }, set.len() as f64 / best);
        }
    }
    Ok(())
}

fn main() -> Result<()> {
    let args = parse()?;
    let t = LineTopology::new(&LineConfig::default())?;
    let dut = t.dut();
    let (gw4, gw6): (IpAddr, IpAddr) = (t.sink_v4.into(), t.sink_v6.into());
    let dev = t.dut_sink_if.clone();
    println!("kernel {}, {} CPUs", std::fs::read_to_string("/proc/sys/kernel/osrelease")?.trim(), std::thread::available_parallelism().map_or(0, |n| n.get()));
    if args.sweep > 0 {
        sweep(dut, &RouteSet::synthetic_v4(args.sweep, args.seed)?, gw4, &dev)?;
    }
    if args.ip_batch > 0 {
        let set = RouteSet::synthetic_v4(args.ip_batch, args.seed)?;
        ip_batch_compare(dut, &set, gw4, &dev)?;
    }
    for (family, n) in [(Family::V4, args.v4), (Family::V6, args.v6)] {
        if n == 0 {
            continue;
        }
        let t0 = Instant::now();
        let set = match family {
            Family::V4 => RouteSet::synthetic_v4(n, args.seed)?,
            Family::V6 => RouteSet::synthetic_v6(n, args.seed)?,
        };
        println!("generated {n} {family} prefixes in {:.2} s", t0.elapsed().as_secs_f64());
        let gw = if family == Family::V4 { gw4 } else { gw6 };
        full_cycle(dut, &set, gw, &dev)?;
    }
    Ok(())
}
