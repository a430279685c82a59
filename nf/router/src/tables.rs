//! Keeping the router's tables in step with the kernel's interfaces: VLAN
//! devices on attached ports, MAC changes, attached interfaces that
//! disappear, and the source check (local addresses, rp_filter). `attach`
//! and `detach` sync once; the follower (`follow`) on every rtnetlink
//! event for links, addresses and device settings, and once a second.

use std::collections::BTreeSet;

use anyhow::Result;
use xnf_core::entry::{self, Stage};
use xnf_core::sources::Sources;
use xnf_netns::netlink::{self, Link};

use crate::program::{IfaceEntry, RouterMaps, Rpf, VlanEntry, PROG_NAME};

/// The VLAN table the kernel's links call for: every 802.1Q device whose
/// parent is an attached interface, with its reverse-path filter.
pub fn wanted_vlans(links: &[Link], attached: &[u32], rpf: impl Fn(&Link) -> Result<Rpf>) -> Result<BTreeSet<VlanEntry>> {
    let mut out = BTreeSet::new();
    for l in links {
        let Some((parent, vid)) = l.vlan() else { continue };
        if attached.contains(&parent) {
            out.insert(VlanEntry { vlan_ifindex: l.ifindex, phys_ifindex: parent, vid, rpf: rpf(l)? });
        }
    }
    Ok(out)
}

/// What changed in one sync, for the follower's log.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SyncReport {
    pub vlans_added: Vec<VlanEntry>,
    pub vlans_removed: Vec<VlanEntry>,
    pub macs_updated: Vec<u32>,
    pub rpf_updated: Vec<u32>,
    pub ifaces_gone: Vec<u32>,
    pub locals_changed: bool,
}

impl SyncReport {
    pub fn is_empty(&self) -> bool {
        *self == SyncReport::default()
    }
}

/// Brings the maps in line with the current links.
pub fn sync(maps: &RouterMaps) -> Result<SyncReport> {
    let links = netlink::links()?;
    let sources = Sources::read()?;
    let mut report = SyncReport::default();
    let locals = sources.locals();
    if maps.locals() != locals {
        maps.set_locals(&locals)?;
        report.locals_changed = true;
    }
    let mut attached = Vec::new();
    for (slot, entry) in maps.ifaces()? {
        match links.iter().find(|l| l.ifindex == entry.ifindex) {
            None => {
                // The device is gone (and with it the kernel's link): drop our state.
                entry::remove_if_held_or_gone(entry.ifindex, Stage::Forward, PROG_NAME)?;
                maps.forget_iface(entry.ifindex)?;
                report.ifaces_gone.push(entry.ifindex);
            }
            Some(link) => {
                let mac = link.mac.unwrap_or(entry.mac);
                let rpf = sources.rpf(link.ifindex, &link.name)?;
                if mac != entry.mac || rpf != entry.rpf {
                    maps.update_iface(slot, IfaceEntry { mac, rpf, ..entry })?;
                    if mac != entry.mac {
                        report.macs_updated.push(entry.ifindex);
                    }
                    if rpf != entry.rpf {
                        report.rpf_updated.push(entry.ifindex);
                    }
                }
                attached.push(entry.ifindex);
            }
        }
    }
    let want = wanted_vlans(&links, &attached, |l| sources.rpf(l.ifindex, &l.name))?;
    let have: BTreeSet<VlanEntry> = maps.vlans()?.into_iter().collect();
    for v in have.difference(&want) {
        maps.del_vlan(*v)?;
        report.vlans_removed.push(*v);
    }
    for v in want.difference(&have) {
        maps.set_vlan(*v)?;
        report.vlans_added.push(*v);
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vlan(ifindex: u32, parent: u32, vid: u16) -> Link {
        Link { ifindex, name: format!("v{vid}"), kind: Some("vlan".into()), vlan_id: Some(vid), parent: Some(parent), ethernet: true, ..Default::default() }
    }

    #[test]
    fn only_vlans_on_attached_parents_are_wanted() {
        let mut veth = vlan(9, 1, 0);
        veth.kind = Some("veth".into());
        let links = vec![vlan(10, 2, 100), vlan(11, 3, 200), vlan(12, 2, 300), veth];
        let strict_on_v300 = |l: &Link| Ok(if l.vlan_id == Some(300) { Rpf::Strict } else { Rpf::Off });
        let want = wanted_vlans(&links, &[2], strict_on_v300).unwrap();
        let got: Vec<_> = want.iter().map(|v| (v.vlan_ifindex, v.phys_ifindex, v.vid, v.rpf)).collect();
        assert_eq!(got, vec![(10, 2, 100, Rpf::Off), (12, 2, 300, Rpf::Strict)]);
        assert!(wanted_vlans(&links, &[], strict_on_v300).unwrap().is_empty());
    }
}
