//! `xnf lab lb`: the load balancer of the XDP paper §5.3 (issue 15) measured two ways.
//!
//! - [`throughput`]: gen → dut → N backend namespaces, dut balancing one VIP: `xnf lb` in each mode (ipip, gue,
//!   dsr) against the kernel (nftables DNAT over `jhash` or `numgen`, then forwarding), variants alternated within
//!   each run by the lab's driver; Mpps delivered to the backends, CPU per packet, the zero-loss rate when asked,
//!   the balance over backends, the ratios xnf / nft.
//! - [`disruption`]: one backend of N removed under F established flows; the share of flows that change backend,
//!   the removed one's and the collateral, with and without the connection table, against `xnf lb plan`.
//!
//! Both run by default; `--part` picks one. The results file is the lab's (`--json`, `xnf lab report`), the
//! disruption in its `details.disruption`.

pub mod disruption;
pub mod setup;
pub mod throughput;

use anyhow::Result;
use clap::{Args, ValueEnum};
use serde::Serialize;

use crate::engine::driver::{Common, Experiment};
use crate::engine::results::Results;

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

/// Runs `xnf lab lb`: every option checked first, then the parts, tables on the terminal, files when asked.
pub fn main(mut a: LbArgs) -> Result<()> {
    let (thr, dis) = (a.part != Part::Disruption, a.part != Part::Throughput);
    let mut lines = |line: &str| eprintln!("xnf lab: {line}");
    if dis {
        a.disruption.check()?;
        xnf_lb::maglev::check_size(a.throughput.table_size).map_err(|e| anyhow::anyhow!("--table-size: {e:#}"))?;
        anyhow::ensure!(
            a.disruption.disruption_backends <= a.throughput.table_size,
            "--disruption-backends {}: more than the --table-size {} entries",
            a.disruption.disruption_backends,
            a.throughput.table_size
        );
    }
    let mut r = if thr {
        crate::engine::driver::run(&mut a.throughput, &a.common, &mut lines)?
    } else {
        Results::new(throughput::Throughput::NAME, &serde_json::json!({ "part": a.part, "disruption": &a.disruption }), Vec::new())
    };
    if dis {
        let d = disruption::run(&a.disruption, a.throughput.table_size, &mut lines)?;
        // xnf's run files of the namespaces, which are gone now.
        xnf_core::state::gc_dead_namespaces();
        r.notes.push(format!(
            "disruption: {} flows, {} backends, one removed: with the connection table {:.3} % moved ({} of the removed backend's {} flows, collateral {}); without it {:.3} % ({} collateral, {:.3} % of the kept flows; plan {:.3} %)",
            d.flows,
            d.backends,
            100.0 * d.with_table.moved_share(),
            d.with_table.removed_moved,
            d.with_table.removed_flows,
            d.with_table.collateral,
            100.0 * d.without_table.moved_share(),
            d.without_table.collateral,
            100.0 * d.without_table.collateral_share(),
            100.0 * d.plan.collateral_of_kept
        ));
        r.details.insert("disruption".into(), serde_json::to_value(&d)?);
        if let Some(o) = r.options.as_object_mut() {
            o.insert("disruption".into(), serde_json::to_value(&a.disruption)?);
        }
    }
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
