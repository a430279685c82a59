//! The variants of `xnf lab disrupt` that are not xnf, doing the same job
//! on the same dut, each with the change its own operator makes: the
//! kernel's route replaced with a changed attribute, an nftables ruleset
//! replaced with `nft -f` (one transaction), xdp-forward and xdp-filter
//! unloaded and loaded again (their way to a new version).

use std::cell::{Cell, RefCell};
use std::path::Path;

use anyhow::{bail, Context, Result};
use xnf_netns::Netns;

use super::Event;
use crate::engine::nft;
use crate::engine::peers::{Peer, PeerGuard};

/// The nftables table of the nft variant.
const TABLE: &str = "xnfdisrupt";

/// The nft variant's ruleset: forwarding filtered in the kernel; the
/// change adds a rule.
fn ruleset(changed: bool) -> String {
    let extra = if changed { "\t\ttcp dport 23 counter drop\n" } else { "" };
    format!(
        "table inet {TABLE}\nflush table inet {TABLE}\ntable inet {TABLE} {{\n\tchain forward {{\n\t\ttype filter hook forward priority 0; policy accept;\n\
         \t\tudp dport 9 counter drop\n{extra}\t}}\n}}\n"
    )
}

/// xdp-filter as a peer: loaded on dut's ingress dropping UDP to port 9,
/// passing the rest to the kernel, which forwards it.
pub fn xdp_filter_peer(bin: &Path) -> Peer {
    let b = bin.to_string_lossy().replace('{', "{{").replace('}', "}}");
    Peer {
        name: "xdp-filter".into(),
        attach: format!("{b} load {{in}} --mode native --features udp && {b} port 9 --proto udp"),
        detach: format!("{b} unload {{in}}"),
    }
}

/// A peer variant set up on dut; removed when dropped.
pub enum PeerOn<'a> {
    /// The sink's /32 on dut, whose `initcwnd` the change toggles.
    Kernel {
        dut: &'a Netns,
        dst: String,
        dev: String,
        flip: Cell<bool>,
    },
    Nft {
        dut: &'a Netns,
        flip: Cell<bool>,
    },
    /// xdp-forward or xdp-filter; the event detaches and attaches again.
    Tool {
        dut: &'a Netns,
        peer: Peer,
        din: String,
        dout: String,
        guard: RefCell<Option<PeerGuard>>,
    },
}

impl<'a> PeerOn<'a> {
    pub fn kernel(dut: &'a Netns, sink: &str, dev: &str) -> Result<PeerOn<'a>> {
        let on = PeerOn::Kernel { dut, dst: format!("{sink}/32"), dev: dev.into(), flip: Cell::new(false) };
        on.route(10)?;
        Ok(on)
    }

    pub fn nft(dut: &'a Netns) -> Result<PeerOn<'a>> {
        nft::require("the nft variant")?;
        nft::nft(dut, &["-f", "-"], Some(&ruleset(false))).context("loading the nft variant's ruleset")?;
        Ok(PeerOn::Nft { dut, flip: Cell::new(false) })
    }

    pub fn tool(dut: &'a Netns, peer: Peer, din: &str, dout: &str) -> Result<PeerOn<'a>> {
        let guard = PeerGuard::attach(&peer, dut, din, dout)?;
        Ok(PeerOn::Tool { dut, peer, din: din.into(), dout: dout.into(), guard: RefCell::new(Some(guard)) })
    }

    fn route(&self, initcwnd: u32) -> Result<()> {
        let PeerOn::Kernel { dut, dst, dev, .. } = self else { bail!("not the kernel variant") };
        dut.ip(&["route", "replace", dst, "dev", dev, "initcwnd", &initcwnd.to_string()]).context("replacing the sink's route on dut")?;
        Ok(())
    }

    /// Runs `e`; what it said, in a few words.
    pub fn event(&self, e: Event) -> Result<String> {
        match (self, e) {
            (PeerOn::Kernel { flip, .. }, Event::RouteChange) => {
                flip.set(!flip.get());
                let cwnd = if flip.get() { 11 } else { 10 };
                self.route(cwnd)?;
                Ok(format!("replaced with initcwnd {cwnd}"))
            }
            (PeerOn::Nft { dut, flip }, Event::RulesetChange) => {
                flip.set(!flip.get());
                nft::nft(dut, &["-f", "-"], Some(&ruleset(flip.get())))?;
                Ok("replaced in one transaction".into())
            }
            (PeerOn::Tool { dut, peer, din, dout, guard }, Event::Reload) => {
                let old = guard.borrow_mut().take().context("not attached")?;
                old.detach()?;
                *guard.borrow_mut() = Some(PeerGuard::attach(peer, dut, din, dout)?);
                Ok("unloaded and loaded".into())
            }
            _ => bail!("{} is no event of this variant", e.name()),
        }
    }
}

impl Drop for PeerOn<'_> {
    fn drop(&mut self) {
        let done = match self {
            PeerOn::Kernel { dut, dst, .. } => dut.route_del(dst),
            PeerOn::Nft { dut, .. } => nft::nft(dut, &["delete", "table", "inet", TABLE], None).map(drop),
            // The guard detaches when dropped.
            PeerOn::Tool { .. } => Ok(()),
        };
        if let Err(e) = done {
            eprintln!("xnf lab: {e:#}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ruleset_change_is_one_file_that_replaces_the_table() {
        let (a, b) = (ruleset(false), ruleset(true));
        assert!(a.starts_with("table inet xnfdisrupt\nflush table inet xnfdisrupt\n") && !a.contains("dport 23"));
        assert!(b.contains("tcp dport 23 counter drop"));
        let p = xdp_filter_peer(Path::new("/opt/x/xdp-filter"));
        assert_eq!(p.detach, "/opt/x/xdp-filter unload {in}");
    }
}
