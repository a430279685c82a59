//! The namespaces a run of `xnf lab gen` sends through: one veth pair gen
//! -> sink, or the line gen -> dut -> sink with dut forwarding.

use anyhow::Result;
use xnf_netns::{ifname, veth, LineConfig, LineTopology, Mac, Netns, Topology};

use super::args::Dut;
use super::plan::Plan;
use crate::engine::attach::default_router_options;
use crate::engine::{LabAttachment, NfGuard};

/// The namespaces a run uses; removed when dropped.
pub enum Path {
    /// One veth pair gen -> sink.
    Direct { topo: Topology, gen_if: String, sink_if: String, gen_mac: Mac, sink_mac: Mac },
    /// gen -> dut -> sink.
    Line(Box<LinePath>),
}

/// The line and what dut runs (fields drop in order: dut's programs first).
pub struct LinePath {
    _dut: Option<LabAttachment>,
    _router: Option<NfGuard>,
    line: LineTopology,
}

impl Path {
    /// Builds the path for `p`; `queues` per veth end.
    pub fn build(p: &Plan) -> Result<Path> {
        let queues = p.threads() as u32;
        match p.through_dut {
            None => {
                let mut topo = Topology::new();
                let (gen_if, sink_if) = (ifname("gen"), ifname("sink"));
                for role in ["gen", "sink"] {
                    let ns = topo.add(role)?;
                    // No IPv6 (no ND, MLD, router solicitations) and no
                    // addresses: nothing but generated frames on the link.
                    ns.sysctl_set("net.ipv6.conf.default.disable_ipv6", "1")?;
                    ns.sysctl_set("net.ipv6.conf.all.disable_ipv6", "1")?;
                }
                let (gen, sink) = (&topo.nodes()[0], &topo.nodes()[1]);
                veth(gen, &gen_if, sink, &sink_if, (queues > 1).then_some(queues))?;
                gen.link_up(&gen_if)?;
                sink.link_up(&sink_if)?;
                let (gen_mac, sink_mac) = (gen.mac(&gen_if)?, sink.mac(&sink_if)?);
                Ok(Path::Direct { gen_if, sink_if, gen_mac, sink_mac, topo })
            }
            Some(kind) => {
                let line = LineTopology::new(&LineConfig { queues: (queues > 1).then_some(queues) })?;
                let dut = line.dut();
                // Everything in the lab's ranges that is not on a connected
                // subnet goes to the sink, whose MAC dut knows up front.
                dut.route_add("198.18.0.0/15", Some(&line.sink_v4.to_string()), None)?;
                dut.route_add("2001:db8::/32", Some(&line.sink_v6.to_string()), None)?;
                dut.neigh_add(&line.sink_v4.to_string(), line.sink_mac, &line.dut_sink_if)?;
                dut.neigh_add(&line.sink_v6.to_string(), line.sink_mac, &line.dut_sink_if)?;
                for key in ["net.ipv4.conf.all.rp_filter".to_string(), format!("net/ipv4/conf/{}/rp_filter", line.dut_gen_if)] {
                    dut.sysctl_set(&key, "0")?;
                }
                let (att, router) = match kind {
                    Dut::Kernel => (Some(LabAttachment::pass(dut, &line.dut_gen_if)?), None),
                    Dut::Xnf => (None, Some(NfGuard::router(dut, &[line.dut_gen_if.clone(), line.dut_sink_if.clone()], default_router_options())?)),
                };
                Ok(Path::Line(Box::new(LinePath { _dut: att, _router: router, line })))
            }
        }
    }

    pub fn gen(&self) -> (&Netns, &str, Mac, Mac) {
        match self {
            Path::Direct { topo, gen_if, gen_mac, sink_mac, .. } => (&topo.nodes()[0], gen_if, *gen_mac, *sink_mac),
            Path::Line(l) => (l.line.gen(), &l.line.gen_if, l.line.gen_mac, l.line.dut_gen_mac),
        }
    }

    pub fn sink(&self) -> (&Netns, &str) {
        match self {
            Path::Direct { topo, sink_if, .. } => (&topo.nodes()[1], sink_if),
            Path::Line(l) => (l.line.sink(), &l.line.sink_if),
        }
    }
}
