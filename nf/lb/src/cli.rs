//! `xnf lb`: the commands, their arguments and their output.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Subcommand;
use xnf_core::runtime::watch_period;
use xnf_core::xdp::XdpMode;

use crate::config::Config;
use crate::plan::{plan, Change, ServicePlan};

#[derive(Subcommand)]
pub enum LbCmd {
    /// Attach the lb to interfaces, after the filter and before the router or chain.
    Attach {
        #[arg(required = true, value_name = "IFACE")]
        ifaces: Vec<String>,
        /// XDP mode: native (in the driver) or skb (generic, any device, slow).
        #[arg(long, value_enum, default_value = "native")]
        mode: XdpMode,
    },
    /// Detach the lb; with the last interface, its services and connection table go too.
    Detach {
        #[arg(required = true, value_name = "IFACE")]
        ifaces: Vec<String>,
    },
    /// Converge the services to a TOML file (checked whole first; prints what moved).
    Apply { file: PathBuf },
    /// Interfaces, services, backends, outer sources, the connection table's fill.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// On backends: strip what balancers encapsulated for this host (IPIP, IPv6-in-IPv6, GUE) in XDP.
    #[command(subcommand)]
    Decap(crate::decap::DecapCommand),
    /// Packets, bytes and new flows per service and backend; the reasons.
    Stats {
        #[arg(long)]
        json: bool,
        /// Show live rates, refreshed every SECS seconds (default 1).
        #[arg(long, value_name = "SECS", num_args = 0..=1, default_missing_value = "1")]
        watch: Option<f64>,
    },
    /// What FILE would change, before anything changes: per service, the
    /// share of flows that would go to another backend, the collateral
    /// (flows that move although their backend stays), and the balance.
    Plan {
        /// The service file to plan for (see nf/lb/README.md).
        file: PathBuf,
        /// Compare with this file [default: the applied one, else no services].
        #[arg(long, value_name = "OLD")]
        from: Option<PathBuf>,
        /// Also list every backend's share of its table against its weight.
        #[arg(long)]
        shares: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: LbCmd) -> Result<()> {
    match cmd {
        LbCmd::Attach { ifaces, mode } => {
            for name in crate::attach(&ifaces, mode)? {
                println!("attached lb to {name}");
            }
            Ok(())
        }
        LbCmd::Detach { ifaces } => {
            crate::detach(&ifaces)?;
            for name in &ifaces {
                println!("detached lb from {name}");
            }
            Ok(())
        }
        LbCmd::Apply { file } => {
            let o = crate::apply_file(&file)?;
            for w in &o.warnings {
                eprintln!("xnf: warning: {w}");
            }
            print!("{}", render(&o.plans, false));
            println!("{}: applied", file.display());
            Ok(())
        }
        LbCmd::Status { json } => crate::report::status(json),
        LbCmd::Decap(c) => crate::decap::run(c),
        LbCmd::Stats { json, watch } => crate::report::stats(json, watch_period(watch)?),
        LbCmd::Plan { file, from, shares, json } => {
            let new = load(&file)?;
            let old = match &from {
                Some(p) => load(p)?,
                None => crate::attach::applied().ok().flatten().map(|a| a.config).unwrap_or_default(),
            };
            let plans = plan(&old, &new)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&plans)?);
            } else {
                print!("{}", render(&plans, shares));
            }
            Ok(())
        }
    }
}

/// Reads and checks a service file; its warnings go to stderr.
fn load(path: &Path) -> Result<Config> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let (config, warnings) = Config::parse(&text, &path.display().to_string())?;
    for w in warnings {
        eprintln!("xnf: warning: {w}");
    }
    Ok(config)
}

fn pct(x: f64) -> String {
    format!("{:.3} %", x * 100.0)
}

/// The plan as text: a block per service.
pub fn render(plans: &[ServicePlan], shares: bool) -> String {
    let mut out = String::new();
    if plans.is_empty() {
        out.push_str("no services in either file\n");
    }
    for p in plans {
        let change = match p.change {
            Change::Added => "added",
            Change::Removed => "removed",
            Change::Changed => "changed",
            Change::Unchanged => "unchanged",
        };
        let _ = writeln!(out, "service {}: {change}", p.name);
        for n in &p.notes {
            let _ = writeln!(out, "  {n}");
        }
        if let Some(d) = &p.disruption {
            let how = if d.exact { "entry by entry" } else { "expected: flows land on other entries" };
            let _ = writeln!(
                out,
                "  flows to another backend: {}; collateral: {} of all flows, {} of those whose backend stays ({how})",
                pct(d.moved),
                pct(d.collateral),
                pct(d.collateral_of_kept())
            );
        }
        if let Some(b) = &p.balance {
            let _ = writeln!(out, "  balance: shares from {:.4} to {:.4} of their weight's ({} backends)", b.min, b.max, p.shares.len());
        }
        if shares {
            for s in &p.shares {
                let _ = writeln!(out, "    {:<40} weight {:>5}  {:>8} entries  {}  (weight's: {})", s.address, s.weight, s.entries, pct(s.share), pct(s.ideal));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: &str = r#"
[[service]]
name = "web"
vip = "198.18.0.10"
proto = "tcp"
port = 80
table_size = 1009
[[service.backend]]
address = "198.18.1.1"
[[service.backend]]
address = "198.18.1.2"
[[service.backend]]
address = "198.18.1.3"

[[service]]
name = "dns"
vip = "198.18.0.11"
proto = "udp"
port = 53
[[service.backend]]
address = "198.18.1.1"
"#;

    #[test]
    fn a_removed_backend_shows_its_share_moving_and_the_collateral() {
        let (old, _) = Config::parse(OLD, "old.toml").unwrap();
        let new_text =
            OLD.replace("[[service.backend]]\naddress = \"198.18.1.3\"\n", "").replace("[[service]]\nname = \"dns\"", "[[service]]\nname = \"dns2\"");
        let (new, _) = Config::parse(&new_text, "new.toml").unwrap();
        let text = render(&plan(&old, &new).unwrap(), true);
        assert!(text.contains("service web: changed\n  backend 198.18.1.3: removed\n"), "{text}");
        assert!(text.contains("service dns2: added\n  takes 198.18.0.11 udp port 53\n"), "{text}");
        assert!(text.contains("service dns: removed\n  no longer takes 198.18.0.11 udp port 53\n"), "{text}");
        // A third of the table belonged to the removed backend: at least
        // that moves, and it is exact (same size, same hashing).
        let web = text.lines().find(|l| l.starts_with("  flows to another backend")).unwrap();
        let moved: f64 = web.split_whitespace().nth(4).unwrap().parse().unwrap();
        assert!((33.0..40.0).contains(&moved), "{web}");
        assert!(web.ends_with("(entry by entry)"), "{web}");
        assert_eq!(text.matches(" entries  ").count(), 2 + 1, "a share line per backend of web and dns2: {text}");
    }

    #[test]
    fn without_from_every_service_is_new_and_nothing_moves() {
        let (new, _) = Config::parse(OLD, "new.toml").unwrap();
        let text = render(&plan(&Config::default(), &new).unwrap(), false);
        assert_eq!(text.matches(": added\n").count(), 2, "{text}");
        assert!(!text.contains("flows to another backend"), "{text}");
        assert!(text.contains("balance: shares from"), "{text}");
        assert_eq!(render(&[], false), "no services in either file\n");
    }
}
