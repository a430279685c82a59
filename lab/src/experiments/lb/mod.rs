//! `xnf lab lb`: the load balancer of the XDP paper §5.3 (issue 15) measured two ways.
//!
//! - [`throughput`]: gen → dut → the backends (behind ports of their own, or behind dut's ingress with `--path
//!   tx`), dut balancing one VIP (IPv4 or IPv6): `xnf lb` in each mode (ipip, gue, dsr) against Katran's data plane
//!   ([`katran`]) and the kernel (nftables DNAT over `jhash` or `numgen`, then forwarding), variants alternated
//!   within each run by the lab's driver; Mpps delivered to the backends, CPU per packet, the zero-loss rate and
//!   each program's own cost by test run when asked, the balance over backends, the ratios.
//! - [`disruption`]: one backend of N removed under F established flows; the share of flows that change backend,
//!   the removed one's and the collateral, with the connection table and without it (the variants `with-table`,
//!   `without-table`, alternated within each run by the same driver), against `xnf lb plan`.
//!   Decided by test runs of the lb program on the applied maps, and with real TCP connections through the
//!   attached data plane to a namespace per backend ([`disruption_tcp`]: which connections break).
//!
//! Both run by default, one after the other, with the same common options; `--part` picks one. The results file
//! is the lab's (`--json`, `xnf lab report`): the throughput part's, the disruption in its `details.disruption`.

pub mod balance;
pub mod conns;
pub mod disruption;
pub mod disruption_tcp;
pub mod katran;
pub mod setup;
pub mod throughput;

use anyhow::Result;
use clap::{Args, ValueEnum};
use serde::Serialize;

use crate::engine::driver::{Common, Experiment};

/// Which parts run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Part {
    Both,
    Throughput,
    Disruption,
}

/// `xnf lab lb`: the common options, the throughput part's and the disruption part's.
#[derive(Args)]
pub struct LbArgs {
    #[command(flatten)]
    pub common: Common,
    #[command(flatten)]
    pub throughput: throughput::Throughput,
    #[command(flatten)]
    pub disruption: disruption::DisruptionArgs,
    /// Which part to run: both, throughput (the variants' rates) or disruption (one backend removed).
    #[arg(long, value_enum, default_value_t = Part::Both)]
    pub part: Part,
}

/// Refuses the throughput part's `--queues` with the disruption part alone: it runs frames through the program one by
/// one on a single CPU, with no generator to spread over queues.
fn check_part(a: &LbArgs) -> Result<()> {
    if a.part == Part::Disruption {
        if let Some(q) = a.throughput.queues.iter().find(|&&q| q != 1) {
            anyhow::bail!("--queues {q}: the disruption part runs no generator (one CPU runs every flow's frames through the program); --queues is the throughput part's (--part throughput or both)");
        }
    }
    Ok(())
}

/// Runs `xnf lab lb`: every option checked first, then the parts, tables on the terminal, files when asked.
pub fn main(mut a: LbArgs) -> Result<()> {
    let (thr, dis) = (a.part != Part::Disruption, a.part != Part::Throughput);
    check_part(&a)?;
    let mut lines = |line: &str| eprintln!("xnf lab: {line}");
    let mut part = if dis { Some(disruption::Part::new(a.disruption.clone(), a.throughput.table_size, !thr, &a.common.topology)?) } else { None };
    let mut r = if thr { Some(crate::engine::driver::run(&mut a.throughput, &a.common, &mut lines)?) } else { None };
    if let Some(part) = &mut part {
        let d = crate::engine::driver::run(part, &a.common, &mut lines)?;
        match &mut r {
            Some(r) => disruption::merge(r, d),
            None => r = Some(d),
        }
        if let Some(o) = r.as_mut().and_then(|r| r.options.as_object_mut()) {
            o.insert("part".into(), serde_json::to_value(a.part)?);
            o.insert("disruption".into(), serde_json::to_value(&a.disruption)?);
        }
    }
    let r = r.expect("a part ran");
    if thr {
        crate::engine::table::print(&r);
        a.throughput.print(&r);
    } else {
        for n in &r.notes {
            println!("note: {n}");
        }
    }
    if let Some(d) = r.details.get("disruption").and_then(|v| serde_json::from_value::<disruption::Disruption>(v.clone()).ok()) {
        disruption::print(&d);
    }
    a.common.write(&r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::driver;

    #[test]
    fn queues_are_refused_with_the_disruption_part_alone() {
        let args = |a: &[&str]| driver::parse_options::<LbArgs>(a).unwrap();
        let e = format!("{:#}", check_part(&args(&["--part", "disruption", "--queues", "2"])).unwrap_err());
        assert!(e.starts_with("--queues 2: the disruption part runs no generator") && !e.contains('\n'), "{e}");
        for ok in [&["--part", "disruption"][..], &["--queues", "1,2"][..], &["--part", "throughput", "--queues", "2"][..]] {
            check_part(&args(ok)).unwrap();
        }
    }
}
