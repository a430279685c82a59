//! The filters compared, each set up on dut's ingress for one run and
//! removed when its [`Setup`] is dropped. Every variant leaves an XDP
//! program on that interface — the filter itself, or XDP_PASS in front of
//! the kernel's filters — so the flood and the victim's requests share one
//! veth receive ring served by one NAPI loop, as the seed's single receive
//! queue does; only what drops the flood differs.

use std::path::{Path, PathBuf};

use anyhow::{ensure, Context, Result};
use serde::Serialize;
use xnf_netns::Netns;

use super::blocklist::BlocklistKind;
use super::flood::Flood;
use super::xdpfilter::{self, XdpFilter};
use crate::engine::{nft, LabAttachment, NfGuard};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// No filter: dut forwards the flood, the victim's UDP stack drops it.
    None,
    /// `xnf filter` (XDP) on dut's ingress.
    Xnf,
    /// nftables, netdev family, ingress hook of dut's ingress.
    NftIngress,
    /// nftables, ip family, prerouting at raw priority.
    NftRaw,
    /// xdp-tools' xdp-filter (XDP) on dut's ingress, by the flood's port.
    XdpFilter,
    /// xdp-filter by the flood's source addresses (`--blocklist-kind
    /// addresses`): `--features ipv4`, each address in src mode.
    XdpFilterIp,
    /// `--flood syn`: the kernel's SYNPROXY on dut answers the SYNs (the
    /// nftables table `xnf filter` installs for syn-cookie rules, without
    /// the XDP program in front of it).
    NftSynproxy,
}

impl Variant {
    /// Its name, as the command line writes it (the results' variant).
    pub fn as_str(self) -> &'static str {
        match self {
            Variant::None => "none",
            Variant::Xnf => "xnf",
            Variant::NftIngress => "nft-ingress",
            Variant::NftRaw => "nft-raw",
            Variant::XdpFilter => "xdp-filter",
            Variant::XdpFilterIp => "xdp-filter-ip",
            Variant::NftSynproxy => "nft-synproxy",
        }
    }
}

/// The nftables table the nft variants load.
const NFT_TABLE: &str = "xnffilter";

/// xdp-filter's binary (scripts/peers.sh's, or `--xdp-filter PATH`).
pub fn xdp_filter_binary(given: Option<&Path>) -> Result<PathBuf> {
    xdpfilter::binary(given)
}

/// A variant set up on dut's ingress; dropping it removes it.
pub struct Setup<'a> {
    /// XDP_PASS in front of the kernel's filters (dropped last).
    _pass: Option<LabAttachment>,
    _xnf: Option<NfGuard>,
    nft: Option<(&'a Netns, &'static str)>,
    xdp_filter: Option<XdpFilter<'a>>,
    synproxy: Option<&'a Netns>,
}

impl<'a> Setup<'a> {
    /// Sets `v` up on `dev` in `dut` to drop `flood`.
    pub fn new(v: Variant, dut: &'a Netns, dev: &str, flood: &Flood, xdp_filter_bin: Option<&Path>) -> Result<Setup<'a>> {
        let mut s = Setup { _pass: None, _xnf: None, nft: None, xdp_filter: None, synproxy: None };
        match v {
            Variant::None => s._pass = Some(LabAttachment::pass(dut, dev)?),
            Variant::Xnf => s._xnf = Some(NfGuard::filter(dut, &[dev.to_string()], &flood.xnf_rules(), "xnf lab filter's rules")?),
            Variant::NftIngress | Variant::NftRaw => {
                s._pass = Some(LabAttachment::pass(dut, dev)?);
                let (family, hook) = match v {
                    Variant::NftIngress => ("netdev", format!("ingress device \"{dev}\" priority -500")),
                    _ => ("ip", "prerouting priority raw".to_string()),
                };
                nft::nft(dut, &["-f", "-"], Some(&flood.nft_table(family, NFT_TABLE, &hook)))?;
                s.nft = Some((dut, family));
            }
            Variant::NftSynproxy => {
                ensure!(flood.syn, "nft-synproxy answers SYNs: use it with --flood syn");
                s._pass = Some(LabAttachment::pass(dut, dev)?);
                let rules = xnf_filter::rules::RuleSet::parse(&flood.xnf_rules(), "xnf lab filter's SYNPROXY rule")?;
                dut.run(move || xnf_filter::synproxy_converge(&rules))?.context("installing the SYNPROXY table in dut")?;
                s.synproxy = Some(dut);
            }
            Variant::XdpFilter => {
                ensure!(flood.blocklist.is_none(), "xdp-filter matches single addresses, not prefixes: leave it out of --variants with --blocklist");
                let x = s.xdp_filter.insert(XdpFilter::load(xdp_filter_binary(xdp_filter_bin)?, dut, dev, "udp")?);
                // The flood's port by xdp-filter's own command; the rules the
                // flood does not meet are ports of its bitmap too: one array
                // lookup per frame whatever their number.
                let ports: Vec<u16> = [flood.port].into_iter().chain(flood.other_ports.iter().copied()).collect();
                x.udp_ports(&ports)?;
            }
            Variant::XdpFilterIp => {
                let list = flood.blocklist.as_ref().filter(|b| b.kind == BlocklistKind::Addresses);
                let list = list.context("xdp-filter-ip drops by a list of addresses: use --blocklist N --blocklist-kind addresses")?;
                // ipv4 alone is xdp-filter's IP program; with ports too, its
                // full one (xdpfilt_alw_all), at every point of a run that
                // sweeps --rules.
                let features = if flood.rules_swept { "ipv4,udp" } else { "ipv4" };
                let x = s.xdp_filter.insert(XdpFilter::load(xdp_filter_binary(xdp_filter_bin)?, dut, dev, features)?);
                x.udp_ports(&flood.other_ports)?;
                x.src_addresses(&list.addresses().collect::<Vec<_>>())?;
            }
        }
        Ok(s)
    }

    /// The filter's own count of dropped frames, where it keeps one
    /// (nftables' counter, xdp-filter's XDP_DROP); a cross-check of the
    /// lab's count from the interfaces.
    pub fn own_drops(&self) -> Result<Option<u64>> {
        if let Some((ns, family)) = self.nft {
            let text = nft::nft(ns, &["list", "counter", family, NFT_TABLE, "dropped"], None)?;
            return nft::counter_packets(&text).map(Some);
        }
        if let Some(x) = &self.xdp_filter {
            return x.drops().map(Some);
        }
        Ok(None)
    }
}

impl Drop for Setup<'_> {
    fn drop(&mut self) {
        if let Some(ns) = self.synproxy {
            match ns.run(xnf_filter::synproxy_remove) {
                Ok(Ok(())) => {}
                Ok(Err(e)) | Err(e) => eprintln!("xnf lab: removing the SYNPROXY table: {e:#}"),
            }
        }
        if let Some((ns, family)) = self.nft {
            if let Err(e) = nft::nft(ns, &["delete", "table", family, NFT_TABLE], None) {
                eprintln!("xnf lab: removing the nftables table: {e:#}");
            }
        }
        // xdp-filter unloads itself when its field is dropped, after this.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_command_lines() {
        use clap::ValueEnum;
        for v in Variant::value_variants() {
            assert_eq!(v.as_str(), crate::engine::driver::variant_name(v));
        }
    }
}
