//! `xnf upgrade`: the entry programs, and every network function's pinned
//! state and programs in this network namespace, moved to this build's in
//! place ([`entry::upgrade`], and [`Lifecycle::upgrade`] says how). The
//! package's maintainer scripts restart `xnf daemon`, which runs it before
//! anything else.

use anyhow::Result;
use xnf_core::entry;
use xnf_core::lifecycle::Lifecycle;
use xnf_core::upgrade::UpgradeReport;

/// Upgrades each network function that has state here, one after the
/// other; what each did (none: all were this build's already).
pub fn upgrade() -> Result<Vec<UpgradeReport>> {
    let links = xnf_netns::netlink::links()?;
    let entries = entry::upgrade()?;
    let steps: [fn() -> Result<Option<UpgradeReport>>; 5] = [
        Lifecycle::<xnf_filter::Filter>::upgrade,
        Lifecycle::<xnf_lb::Lb>::upgrade,
        Lifecycle::<xnf_lb::Decap>::upgrade,
        Lifecycle::<xnf_router::Router>::upgrade,
        Lifecycle::<xnf_chain::program::Chain>::upgrade,
    ];
    let mut out = Vec::new();
    if !entries.is_empty() {
        let name = |i: &u32| links.iter().find(|l| l.ifindex == *i).map(|l| l.name.clone()).unwrap_or_else(|| i.to_string());
        let names = entries.iter().map(name).collect();
        out.push(UpgradeReport { nf: "entry", swapped: names, ..Default::default() });
    }
    for step in steps {
        out.extend(step()?);
    }
    Ok(out)
}

/// One line per network function upgraded.
pub fn lines(reports: &[UpgradeReport]) -> Vec<String> {
    if reports.is_empty() {
        return vec!["every network function runs this build already: nothing to upgrade".into()];
    }
    reports
        .iter()
        .map(|r| {
            let maps: Vec<String> = r.migrated.iter().map(|m| format!("{} ({} entries, {} caught up)", m.name, m.copied, m.caught_up)).collect();
            let mut maps = if maps.is_empty() { "no map changed layout".into() } else { format!("maps moved to this build's layout: {}", maps.join(", ")) };
            if !r.fresh.is_empty() {
                maps += &format!("; made afresh: {}", r.fresh.join(", "));
            }
            let resumed = if r.resumed { " (finished an upgrade left half done)" } else { "" };
            format!("{}: {} interface(s) swapped to this build's program [{}]; {maps}{resumed}", r.nf, r.swapped.len(), r.swapped.join(" "))
        })
        .collect()
}
