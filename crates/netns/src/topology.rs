//! veth pairs, the [`Topology`] guard and the standard gen ↔ dut ↔ sink line.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{bail, Context, Result};

use crate::addr::{check_ifname, Mac};
use crate::netlink;
use crate::netns::Netns;

static NEXT_IF: AtomicU32 = AtomicU32::new(0);

/// A fresh interface name `xnf<id><role>` (at most 15 bytes; `role` is cut to
/// fit), where `<id>` is a per-process counter in base 36.
pub fn ifname(role: &str) -> String {
    let mut n = NEXT_IF.fetch_add(1, Ordering::Relaxed);
    let mut id = Vec::new();
    loop {
        id.push(char::from_digit(n % 36, 36).unwrap_or('0'));
        n /= 36;
        if n == 0 {
            break;
        }
    }
    let mut name: String = "xnf".chars().chain(id.into_iter().rev()).collect();
    name.extend(role.chars().filter(char::is_ascii_alphanumeric).take(15 - name.len()));
    name
}

/// The two ends of a veth pair: `a` in namespace `a_ns`, `b` in `b_ns`.
/// It needs no guard: deleting either namespace destroys the pair.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VethPair {
    pub a_ns: String,
    pub a: String,
    pub b_ns: String,
    pub b: String,
}

/// Creates a veth pair directly inside the namespaces (never in the host's):
/// end `a_name` in `a`, end `b_name` in `b` (which may be the same namespace).
///
/// Names are used as given: they must start with `xnf`, be at most 15 bytes
/// and be unused in their namespace; [`ifname`] makes such names. With
/// `queues`, both ends get that many rx and tx queues. Links start down.
pub fn veth(a: &Netns, a_name: &str, b: &Netns, b_name: &str, queues: Option<u32>) -> Result<VethPair> {
    for name in [a_name, b_name] {
        check_ifname(name)?;
        if !name.starts_with("xnf") {
            bail!("interface name {name} must start with `xnf` (project policy); use xnf_netns::ifname()");
        }
    }
    // Created from inside `a`, so the pair never exists in the host's
    // namespace, not even for a moment; `b` is reached by its file.
    let b_path = b.path();
    a.run(|| -> Result<()> {
        let b_file = std::fs::File::open(&b_path).with_context(|| format!("opening namespace {} (was it deleted?)", b_path.display()))?;
        netlink::create_veth(a_name, b_name, b_file.as_fd(), queues)
    })?
    .with_context(|| format!("in namespace {} (peer in {})", a.name(), b.name()))?;
    Ok(VethPair { a_ns: a.name().to_owned(), a: a_name.to_owned(), b_ns: b.name().to_owned(), b: b_name.to_owned() })
}

/// Several [`Netns`] guards, dropped in reverse order of creation.
#[derive(Debug, Default)]
pub struct Topology {
    nodes: Vec<Netns>,
}

impl Topology {
    /// An empty topology.
    pub fn new() -> Topology {
        Topology::default()
    }

    /// Creates a namespace with `role` and keeps its guard.
    pub fn add(&mut self, role: &str) -> Result<&Netns> {
        self.nodes.push(Netns::new(role)?);
        Ok(&self.nodes[self.nodes.len() - 1])
    }

    /// The first namespace created with `role`.
    pub fn node(&self, role: &str) -> Option<&Netns> {
        self.nodes.iter().find(|n| n.role() == role)
    }

    /// All namespaces, in creation order.
    pub fn nodes(&self) -> &[Netns] {
        &self.nodes
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        while let Some(ns) = self.nodes.pop() {
            drop(ns);
        }
    }
}

/// Options for [`LineTopology::new`]; start from `LineConfig::default()`.
#[derive(Clone, Debug, Default)]
pub struct LineConfig {
    /// rx/tx queues of every veth end (`None`: the kernel's default, 1).
    pub queues: Option<u32>,
}

/// The standard three-namespace line, `gen ↔ dut ↔ sink`:
///
/// ```text
///  gen [gen_if] ---- [dut_gen_if] dut [dut_sink_if] ---- [sink_if] sink
///  198.18.0.1/24     198.18.0.2/24    198.18.1.1/24      198.18.1.2/24
///  2001:db8::1/64    2001:db8::2/64   2001:db8:1::1/64   2001:db8:1::2/64
/// ```
///
/// All links up and settled (see [`Netns::wait_links_ready`]), forwarding
/// on in dut, routes in gen and sink to each other's subnet via dut.
/// Dropping it deletes all three namespaces.
#[derive(Debug)]
pub struct LineTopology {
    topo: Topology,
    /// Queue count used for every veth end.
    pub queues: Option<u32>,
    pub gen_if: String,
    pub dut_gen_if: String,
    pub dut_sink_if: String,
    pub sink_if: String,
    /// ifindexes, each inside its own namespace.
    pub gen_ifindex: u32,
    pub dut_gen_ifindex: u32,
    pub dut_sink_ifindex: u32,
    pub sink_ifindex: u32,
    pub gen_mac: Mac,
    pub dut_gen_mac: Mac,
    pub dut_sink_mac: Mac,
    pub sink_mac: Mac,
    pub gen_v4: Ipv4Addr,
    pub dut_gen_v4: Ipv4Addr,
    pub dut_sink_v4: Ipv4Addr,
    pub sink_v4: Ipv4Addr,
    pub gen_v6: Ipv6Addr,
    pub dut_gen_v6: Ipv6Addr,
    pub dut_sink_v6: Ipv6Addr,
    pub sink_v6: Ipv6Addr,
}

impl LineTopology {
    /// Subnet between gen and dut.
    pub const GEN_NET_V4: &'static str = "198.18.0.0/24";
    /// Subnet between dut and sink.
    pub const SINK_NET_V4: &'static str = "198.18.1.0/24";
    /// Subnet between gen and dut.
    pub const GEN_NET_V6: &'static str = "2001:db8::/64";
    /// Subnet between dut and sink.
    pub const SINK_NET_V6: &'static str = "2001:db8:1::/64";

    /// Builds the line; on any failure everything created so far is removed.
    pub fn new(config: &LineConfig) -> Result<LineTopology> {
        let mut topo = Topology::new();
        for role in ["gen", "dut", "sink"] {
            topo.add(role)?;
        }
        let [gen, dut, sink] = [0, 1, 2].map(|i| &topo.nodes()[i]);
        let [gen_if, dut_gen_if, dut_sink_if, sink_if] = ["gen", "dutg", "duts", "sink"].map(ifname);
        let q = config.queues;
        veth(gen, &gen_if, dut, &dut_gen_if, q)?;
        veth(dut, &dut_sink_if, sink, &sink_if, q)?;

        let v4 = |net: u8, host: u8| Ipv4Addr::new(198, 18, net, host);
        let v6 = |net: u16, host: u16| Ipv6Addr::new(0x2001, 0xdb8, net, 0, 0, 0, 0, host);
        let (gen_v4, dut_gen_v4, dut_sink_v4, sink_v4) = (v4(0, 1), v4(0, 2), v4(1, 1), v4(1, 2));
        let (gen_v6, dut_gen_v6, dut_sink_v6, sink_v6) = (v6(0, 1), v6(0, 2), v6(1, 1), v6(1, 2));

        // Links first, everywhere, so IPv6 sees carrier when routes are added.
        gen.link_up(&gen_if)?;
        dut.batch().link_up(&dut_gen_if)?.link_up(&dut_sink_if)?.apply()?;
        sink.link_up(&sink_if)?;

        gen.batch()
            .addr_add(&gen_if, &format!("{gen_v4}/24"))?
            .addr_add(&gen_if, &format!("{gen_v6}/64"))?
            .route_add(Self::SINK_NET_V4, Some(&dut_gen_v4.to_string()), None)?
            .route_add(Self::SINK_NET_V6, Some(&dut_gen_v6.to_string()), None)?
            .apply()?;
        dut.batch()
            .addr_add(&dut_gen_if, &format!("{dut_gen_v4}/24"))?
            .addr_add(&dut_gen_if, &format!("{dut_gen_v6}/64"))?
            .addr_add(&dut_sink_if, &format!("{dut_sink_v4}/24"))?
            .addr_add(&dut_sink_if, &format!("{dut_sink_v6}/64"))?
            .apply()?;
        dut.enable_forwarding()?;
        // Configuring by netlink takes microseconds, the kernel settles the
        // links (IPv6, operational state) up to a second after they come
        // up: wait, so that what runs right after `new` (traffic, route
        // counts, snapshots of `ip link`) sees the finished topology.
        gen.wait_links_ready(&[&gen_if])?;
        dut.wait_links_ready(&[&dut_gen_if, &dut_sink_if])?;
        sink.wait_links_ready(&[&sink_if])?;
        sink.batch()
            .addr_add(&sink_if, &format!("{sink_v4}/24"))?
            .addr_add(&sink_if, &format!("{sink_v6}/64"))?
            .route_add(Self::GEN_NET_V4, Some(&dut_sink_v4.to_string()), None)?
            .route_add(Self::GEN_NET_V6, Some(&dut_sink_v6.to_string()), None)?
            .apply()?;

        Ok(LineTopology {
            queues: q,
            gen_ifindex: gen.ifindex(&gen_if)?,
            dut_gen_ifindex: dut.ifindex(&dut_gen_if)?,
            dut_sink_ifindex: dut.ifindex(&dut_sink_if)?,
            sink_ifindex: sink.ifindex(&sink_if)?,
            gen_mac: gen.mac(&gen_if)?,
            dut_gen_mac: dut.mac(&dut_gen_if)?,
            dut_sink_mac: dut.mac(&dut_sink_if)?,
            sink_mac: sink.mac(&sink_if)?,
            gen_if,
            dut_gen_if,
            dut_sink_if,
            sink_if,
            gen_v4,
            dut_gen_v4,
            dut_sink_v4,
            sink_v4,
            gen_v6,
            dut_gen_v6,
            dut_sink_v6,
            sink_v6,
            topo,
        })
    }

    /// The traffic generator's namespace.
    pub fn gen(&self) -> &Netns {
        &self.topo.nodes()[0]
    }

    /// The device under test's namespace (forwards between its two links).
    pub fn dut(&self) -> &Netns {
        &self.topo.nodes()[1]
    }

    /// The receiver's namespace.
    pub fn sink(&self) -> &Netns {
        &self.topo.nodes()[2]
    }

    /// The underlying guard of all three namespaces.
    pub fn topology(&self) -> &Topology {
        &self.topo
    }
}
