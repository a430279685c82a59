//! `xnf lab scrape`: what one Prometheus scrape of `xnf daemon` costs on a
//! large box — by default 256 filter rules, 100 lb services of 10 backends,
//! 4 chains each through its own NF, the router on two interfaces — built
//! in namespaces of its own from one box file (`xnf apply`'s code), then
//! scraped over and over in dut (`/metrics`' code without the socket: the
//! maps read at scrape time, the text encoded). The goal is under 50 ms.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{ensure, Context, Result};
use clap::Args;
use serde::Serialize;
use xnf_netns::Netns;

#[derive(Args, Debug, Serialize)]
pub struct ScrapeArgs {
    /// Filter rules (at most 1024).
    #[arg(long, default_value_t = 256)]
    pub rules: usize,
    /// lb services.
    #[arg(long, default_value_t = 100)]
    pub services: usize,
    /// Backends of each service.
    #[arg(long, default_value_t = 10)]
    pub backends: usize,
    /// Chains, each through an NF of its own.
    #[arg(long, default_value_t = 4)]
    pub chains: usize,
    /// Scrapes measured (after one discarded).
    #[arg(long, default_value_t = 50)]
    pub scrapes: usize,
    /// Write the results as JSON.
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    pub json: Option<PathBuf>,
}

#[derive(Serialize)]
struct Scraped {
    options: serde_json::Value,
    samples: usize,
    bytes: usize,
    /// Milliseconds per scrape, in the order measured.
    ms: Vec<f64>,
    min_ms: f64,
    median_ms: f64,
    p90_ms: f64,
    max_ms: f64,
}

/// The box file: the filter and the lb on `a`, the router on `a` and `b`,
/// the chains from `c` through NFs in `nfs`.
fn box_file(x: &ScrapeArgs, nfs: &[Netns]) -> String {
    let mut t = String::from("[router]\ninterfaces = [\"xnfsc0\", \"xnfsc1\"]\n\n[filter]\ninterfaces = [\"xnfsc0\"]\n[filter.rules]\n");
    for i in 0..x.rules {
        let _ = write!(t, "[[filter.rules.rule]]\nname = \"r{i}\"\nproto = \"udp\"\ndport = {}\naction = \"drop\"\n", 1000 + i);
    }
    t.push_str("\n[lb]\ninterfaces = [\"xnfsc0\"]\n[lb.services.encap]\nsource_v4 = \"198.18.200.0/24\"\n");
    for s in 0..x.services {
        let _ = write!(
            t,
            "[[lb.services.service]]\nname = \"s{s}\"\nvip = \"198.18.{}.{}\"\nproto = \"tcp\"\nport = 80\ntable_size = 1021\n",
            100 + s / 250,
            1 + s % 250
        );
        for b in 0..x.backends {
            let _ = write!(t, "[[lb.services.service.backend]]\naddress = \"198.19.{}.{}\"\n", s % 256, 1 + b);
        }
    }
    for (i, nf) in nfs.iter().enumerate() {
        let _ = write!(t, "\n[[nf]]\nname = \"f{i}\"\nnetns = \"{}\"\n", nf.path().display());
        let _ = write!(t, "[[chain]]\nname = \"c{i}\"\ningress = \"xnfsc2\"\nnfs = [\"f{i}\"]\n[[chain.match]]\ndst = \"198.18.{}.0/24\"\n", 20 + i);
    }
    t
}

pub fn run(x: ScrapeArgs) -> Result<()> {
    ensure!(x.scrapes >= 1, "--scrapes: at least 1");
    let dut = Netns::new("dut")?;
    for (a, b) in [("xnfsc0", "xnfsc1"), ("xnfsc2", "xnfsc3")] {
        dut.ip(&["link", "add", a, "type", "veth", "peer", "name", b])?;
        dut.link_up(a)?;
        dut.link_up(b)?;
    }
    let nfs = (0..x.chains).map(|i| Netns::new(&format!("nf{i}"))).collect::<Result<Vec<_>>>()?;
    let text = box_file(&x, &nfs);
    eprintln!("xnf lab: scrape: applying a box of {} rules, {} services x {} backends, {} chains", x.rules, x.services, x.backends, x.chains);
    let cfg = xnf_config::parse(&text, "xnf lab scrape's box", Path::new("/")).map_err(|e| anyhow::anyhow!("{}", e.join("; ")))?;
    let (options, scrapes) = (serde_json::to_value(&x)?, x.scrapes);
    let r = dut.run(move || -> Result<Scraped> {
        xnf_config::apply(&cfg, xnf_config::ApplyOptions { own_follower: true, ..Default::default() }).context("applying the box")?;
        let first = xnf_daemon::scrape()?;
        let mut ms = Vec::with_capacity(scrapes);
        for _ in 0..scrapes {
            let t0 = Instant::now();
            std::hint::black_box(xnf_daemon::scrape()?);
            ms.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        let empty = xnf_config::parse("", "empty", Path::new("/")).map_err(|e| anyhow::anyhow!("{}", e.join("; ")))?;
        xnf_config::apply(&empty, Default::default()).context("removing the box")?;
        let mut sorted = ms.clone();
        sorted.sort_by(f64::total_cmp);
        let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
        let samples = first.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).count();
        Ok(Scraped { options, samples, bytes: first.len(), min_ms: at(0.0), median_ms: at(0.5), p90_ms: at(0.9), max_ms: at(1.0), ms })
    })??;
    println!(
        "scrape of a box with {} rules, {} services x {} backends, {} chains: {} samples, {} bytes",
        x.rules, x.services, x.backends, x.chains, r.samples, r.bytes
    );
    println!("ms per scrape over {}: min {:.2}, median {:.2}, p90 {:.2}, max {:.2} (goal: under 50)", x.scrapes, r.min_ms, r.median_ms, r.p90_ms, r.max_ms);
    if let Some(p) = &x.json {
        std::fs::write(p, serde_json::to_vec_pretty(&r)?).with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}
