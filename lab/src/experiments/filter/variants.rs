//! The filters compared, each set up on dut's ingress for one run and
//! removed when its [`Setup`] is dropped. Every variant leaves an XDP
//! program on that interface — the filter itself, or XDP_PASS in front of
//! the kernel's filters — so the flood and the victim's requests share one
//! veth receive ring served by one NAPI loop, as the seed's single receive
//! queue does; only what drops the flood differs.

use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context, Result};
use serde::Serialize;
use xnf_netns::Netns;

use super::flood::Flood;
use crate::engine::{nft, peers, LabAttachment, NfGuard};

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
    /// xdp-tools' xdp-filter (XDP) on dut's ingress.
    XdpFilter,
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
            Variant::NftSynproxy => "nft-synproxy",
        }
    }
}

/// The nftables table the nft variants load.
const NFT_TABLE: &str = "xnffilter";

/// xdp-filter's binary ([`peers::binary`]).
pub fn xdp_filter_binary(given: Option<&Path>) -> Result<PathBuf> {
    peers::binary("xdp-filter", "--xdp-filter", given)
}

/// Runs xdp-filter with only the network namespace switched
/// ([`peers::run_in_net`]): it keeps its maps pinned in bpffs between
/// commands, and under `ip netns exec` they would vanish.
fn xdp_filter(bin: &Path, ns: &Netns, args: &[&str]) -> Result<String> {
    run_xdp_filter(bin, ns, args, true)
}

/// [`xdp_filter`], its exit status checked only if `check`: `status`
/// prints everything and still exits with ENOENT for the maps of the
/// features not loaded (1.6.3).
fn run_xdp_filter(bin: &Path, ns: &Netns, args: &[&str], check: bool) -> Result<String> {
    let out = peers::run_in_net(&ns.path(), bin, args)?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if check && !out.status.success() {
        bail!("xdp-filter {}: {}", args.join(" "), peers::last_line(&out.stderr));
    }
    Ok(text)
}

/// The XDP_DROP count in `xdp-filter status` output.
fn xdp_filter_drops(status: &str) -> Result<u64> {
    let line = status.lines().find(|l| l.trim_start().starts_with("XDP_DROP")).context("xdp-filter status shows no XDP_DROP line")?;
    line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).with_context(|| format!("xdp-filter status: no count in `{}`", line.trim()))
}

/// A variant set up on dut's ingress; dropping it removes it.
pub struct Setup<'a> {
    /// XDP_PASS in front of the kernel's filters (dropped last).
    _pass: Option<LabAttachment>,
    _xnf: Option<NfGuard>,
    nft: Option<(&'a Netns, &'static str)>,
    xdp_filter: Option<(PathBuf, &'a Netns, String)>,
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
                let bin = xdp_filter_binary(xdp_filter_bin)?;
                xdp_filter(&bin, dut, &["load", dev, "--mode", "native", "--features", "udp"])?;
                s.xdp_filter = Some((bin.clone(), dut, dev.to_string()));
                xdp_filter(&bin, dut, &["port", &flood.port.to_string(), "--proto", "udp"])?;
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
        if let Some((bin, ns, _)) = &self.xdp_filter {
            return xdp_filter_drops(&run_xdp_filter(bin, ns, &["status"], false)?).map(Some);
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
        if let Some((bin, ns, dev)) = &self.xdp_filter {
            if let Err(e) = xdp_filter(bin, ns, &["unload", dev]) {
                eprintln!("xnf lab: {e:#}");
            }
        }
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

    #[test]
    fn reads_xdp_filters_drop_count() {
        let status = "CURRENT XDP-FILTER STATUS:\n\nAggregate per-action statistics:\n  XDP_ABORTED    0 pkts   0 KiB\n  XDP_DROP    1234 pkts   77 KiB\n  XDP_PASS   5 pkts  0 KiB\n";
        assert_eq!(xdp_filter_drops(status).unwrap(), 1234);
        assert!(xdp_filter_drops("nothing here").is_err());
    }

    #[test]
    fn a_missing_xdp_filter_says_how_to_build_it() {
        let e = xdp_filter_binary(Some(Path::new("/nonexistent/xdp-filter"))).unwrap_err().to_string();
        assert!(e.contains("scripts/peers.sh") && !e.contains('\n'), "{e}");
    }
}
