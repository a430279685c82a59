//! `xnf pass`: attach the XDP_PASS program to a veth end so that frames
//! redirected into its peer are received (see pass.bpf.c).

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use xnf_core::state;
use xnf_core::xdp::{XdpLink, XdpMode};
use xnf_netns::netlink;

use crate::PassProgram;

fn pin(ifindex: u32) -> Result<PathBuf> {
    Ok(state::pin_dir("pass")?.join(format!("link-{ifindex}")))
}

/// Unpins pass links whose device is gone (the kernel detached them).
fn forget_defunct() -> Result<()> {
    let Ok(rd) = std::fs::read_dir(state::pin_dir("pass")?) else { return Ok(()) };
    for pin in rd.flatten().map(|e| e.path()) {
        if XdpLink::open(&pin).and_then(|l| l.info()).is_ok_and(|(ifindex, _)| ifindex == 0) {
            std::fs::remove_file(&pin)?;
        }
    }
    Ok(())
}

pub fn attach(name: &str, mode: XdpMode) -> Result<()> {
    state::ensure_bpffs()?;
    forget_defunct()?;
    let link = netlink::link_by_name(name)?;
    let pin = pin(link.ifindex)?;
    if pin.exists() {
        bail!("{name} already has xnf's pass program");
    }
    std::fs::create_dir_all(pin.parent().unwrap()).context("creating the pin folder")?;
    let prog = PassProgram::load()?;
    let l = XdpLink::create(prog.prog(), link.ifindex, name, mode)?;
    l.pin(&pin)
}

pub fn detach(name: &str) -> Result<()> {
    let link = netlink::link_by_name(name)?;
    let pin = pin(link.ifindex)?;
    if !pin.exists() {
        bail!("{name} has no pass program attached by xnf");
    }
    XdpLink::open(&pin)?.detach()?;
    std::fs::remove_file(&pin)?;
    state::remove_empty_dirs(pin.parent().unwrap());
    Ok(())
}
