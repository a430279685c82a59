//! The path a run of `xnf lab gen` sends over: the driver's topology
//! (`--topology`: the built-in pair gen -> sink, or with `--through-dut`
//! the line gen -> dut -> sink), adapted before it is built — IPv6 off in
//! gen and the sink without a dut, so the sink sees nothing but generated
//! frames — and, through a dut, dut routing the lab's ranges to the sink
//! and forwarding with the kernel or `xnf router` for each run.

use anyhow::{ensure, Context, Result};

use super::args::Dut;
use crate::engine::attach::default_router_options;
use crate::engine::topology::{BuiltTopology, TopologySpec};
use crate::engine::{LabAttachment, NfGuard};

/// The namespace of an endpoint (`ns:dev`).
fn ns_of(ep: &str) -> &str {
    ep.split_once(':').map_or(ep, |(ns, _)| ns)
}

/// Checks that the topology has a dut exactly when frames go through one,
/// and turns IPv6 off in gen and the sink when they do not (their IPv6
/// addresses, routes and neighbours left out: the kernel refuses them then).
pub fn adapt(spec: &mut TopologySpec, through: Option<Dut>) -> Result<()> {
    let roles = spec.roles.clone().context("the topology needs a [roles] table (gen, dut_in, dut_out, sink)")?;
    let has_dut = roles.dut_in != roles.sink;
    if through.is_some() {
        ensure!(has_dut, "--through-dut: the topology has no dut (its roles.dut_in is the sink): use --topology line, or a topology with a dut");
        return Ok(());
    }
    ensure!(
        !has_dut,
        "--topology: this one has a dut (roles.dut_in `{}` is not the sink): give --through-dut kernel|xnf, or a topology without one (pair)",
        roles.dut_in
    );
    let ends = [ns_of(&roles.gen).to_string(), ns_of(&roles.sink).to_string()];
    let ours = |ns: &str| ends.iter().any(|e| e == ns);
    for n in spec.namespaces.iter_mut().filter(|n| ours(&n.name)) {
        for key in ["net.ipv6.conf.default.disable_ipv6", "net.ipv6.conf.all.disable_ipv6"] {
            n.sysctl.insert(key.into(), "1".into());
        }
    }
    for l in &mut spec.links {
        for (end, addrs) in [(&l.a, &mut l.a_addr), (&l.b, &mut l.b_addr)] {
            if ours(ns_of(end)) {
                addrs.retain(|a| !a.contains(':'));
            }
        }
    }
    spec.routes.retain(|r| !(ours(&r.ns) && (r.to.contains(':') || r.to == "synthetic-ipv6")));
    spec.neighbours.retain(|n| !(ours(&n.ns) && n.ip.contains(':')));
    Ok(())
}

/// Through a dut: dut routes the lab's ranges (not on a connected subnet)
/// to the sink, whose MAC it knows up front, and takes frames from
/// addresses it has no route back to.
pub fn route_to_sink(t: &BuiltTopology) -> Result<()> {
    let roles = t.roles()?;
    let ((dut, din), (_, dout)) = (t.endpoint(&roles.dut_in)?, t.endpoint(&roles.dut_out)?);
    let mac = t.mac(&roles.sink)?;
    let mut b = dut.batch();
    for (ipv6, range) in [(false, "198.18.0.0/15"), (true, "2001:db8::/32")] {
        if let Ok(sink) = t.addr(&roles.sink, ipv6) {
            b.route_replace(range, Some(&sink.to_string()), None)?;
            b.neigh_add(&sink.to_string(), mac, &dout)?;
        }
    }
    b.apply().context("dut's routes to the sink")?;
    for key in ["net.ipv4.conf.all.rp_filter".to_string(), format!("net/ipv4/conf/{din}/rp_filter")] {
        dut.sysctl_set(&key, "0")?;
    }
    Ok(())
}

/// What forwards on dut for one run; detached when dropped.
pub enum Forwarder {
    /// XDP_PASS on dut's ingress, so the kernel receives the frames.
    Kernel(#[allow(dead_code)] LabAttachment),
    /// `xnf router` on both of dut's ports, as `xnf router attach` attaches it.
    Xnf(#[allow(dead_code)] NfGuard),
}

impl Forwarder {
    pub fn attach(t: &BuiltTopology, kind: Dut) -> Result<Forwarder> {
        let roles = t.roles()?;
        let ((dut, din), (_, dout)) = (t.endpoint(&roles.dut_in)?, t.endpoint(&roles.dut_out)?);
        Ok(match kind {
            Dut::Kernel => Forwarder::Kernel(LabAttachment::pass(dut, &din)?),
            Dut::Xnf => Forwarder::Xnf(NfGuard::router(dut, &[din, dout], default_router_options())?),
        })
    }
}
