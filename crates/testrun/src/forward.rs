//! The kernel's forwarding rules: what Linux does with an IP packet it has
//! received and may forward (`ip_route_input`, `fib_validate_source`,
//! `ip_forward`, `ipv6_rcv`, `ip6_forward`), with the kernel itself as the
//! oracle for routes (`ip route get DST from SRC iif DEV` through netlink,
//! the main table for direct lookups, the neighbour table). The common
//! ground of the reference models of every xnf program that forwards with
//! the kernel FIB (the router, the chain's exit); what comes out is the
//! programs' documented contract (`xnf_core::fwd::Reason`, `fib.h`).
//!
//! A model reads the frame with [`crate::kernel::view`], decides what is
//! its own (MACs, tags, its tables), and asks [`Kernel::forward`] the rest.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use xnf_core::fwd::Reason;
use xnf_netns::netlink::{ipv4_addresses, links, main_routes, neighbours, route_get, table_routes, Neighbour, RouteGet, TableRoute};

use crate::kernel::{Ip, L2};

/// IPv6 sources and destinations the kernel refuses to forward whatever
/// the routes say (ipv6_rcv, ip6_forward; RFC 4291 2.5.3, 2.7, errata 3480,
/// the v4-mapped rule).
pub fn ipv6_martian(src: Ipv6Addr, dst: Ipv6Addr) -> bool {
    let mc_scope = |a: Ipv6Addr| a.segments()[0] & 0x000f;
    src.is_loopback()
        || dst.is_loopback()
        || src.is_multicast()
        || src.to_ipv4_mapped().is_some()
        || (dst.is_multicast() && mc_scope(dst) <= 1)
        || src.is_unspecified()
        || (src.segments()[0] & 0xffc0) == 0xfe80
}

/// IPv4 destinations that are never unicast-forwarded: loopback,
/// multicast, the limited broadcast, "this network" (0/8).
pub fn ipv4_not_unicast(dst: Ipv4Addr) -> bool {
    dst.is_loopback() || dst.is_multicast() || dst.is_broadcast() || dst.octets()[0] == 0
}

/// IPv4 sources the kernel refuses before any route (ip_route_input_slow):
/// multicast, the limited broadcast, loopback (route_localnet is off), 0/8.
pub fn ipv4_martian_source(src: Ipv4Addr) -> bool {
    src.is_multicast() || src.is_broadcast() || src.is_loopback() || src.octets()[0] == 0
}

/// Addresses the kernel never forwards between, whatever the routes: the
/// IPv6 receive and forwarding rules, IPv4 destinations that are not
/// unicast and the sources ip_route_input refuses before any route.
pub fn martian(ip: &Ip) -> bool {
    match (ip.src, ip.dst) {
        (IpAddr::V6(s), IpAddr::V6(d)) => ipv6_martian(s, d),
        (IpAddr::V4(s), IpAddr::V4(d)) => ipv4_not_unicast(d) || ipv4_martian_source(s),
        _ => unreachable!("one family per header"),
    }
}

/// Reverse-path filter modes (net.ipv4.conf.*.rp_filter), as in effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rpf {
    Off,
    Strict,
    Loose,
}

/// How a program looks routes up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Policy rules and every table (bpf_fib_lookup with flags 0): the
    /// kernel's own input route.
    Full,
    /// The main table only (BPF_FIB_LOOKUP_DIRECT).
    Direct,
}

/// Where a forwarded packet leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Out {
    pub oif: u32,
    /// The egress's MAC and the next hop's.
    pub smac: [u8; 6],
    pub dmac: [u8; 6],
}

/// One interface as forwarding sees it.
#[derive(Clone, Debug)]
struct Dev {
    name: String,
    mac: [u8; 6],
    mtu: usize,
    rpf: Rpf,
    forwarding4: bool,
    forwarding6: bool,
}

fn sysctl(path: &str) -> String {
    std::fs::read_to_string(format!("/proc/sys/net/{path}")).unwrap_or_else(|e| panic!("reading {path}: {e}")).trim().to_string()
}

fn sysctl_u32(path: &str) -> u32 {
    let v = sysctl(path);
    v.parse().unwrap_or_else(|_| panic!("{path} holds {v:?}"))
}

/// The kernel's network state of one namespace, read once (the fuzzers'
/// networks do not change while they run), and its route lookups, asked
/// once per (source, destination, ingress).
pub struct Kernel {
    devs: HashMap<u32, Dev>,
    neigh: Vec<Neighbour>,
    main: Vec<TableRoute>,
    /// The /32 local and broadcast routes of the kernel's local table.
    locals: BTreeSet<Ipv4Addr>,
    routes: RefCell<HashMap<(IpAddr, IpAddr, u32), RouteGet>>,
}

impl Kernel {
    /// Reads the interfaces, their settings, neighbours and routes of the
    /// calling thread's namespace.
    pub fn read() -> Kernel {
        let all_rpf = sysctl_u32("ipv4/conf/all/rp_filter");
        let with_addr: BTreeSet<u32> = ipv4_addresses().expect("address dump").iter().map(|a| a.ifindex).collect();
        let devs = links()
            .expect("link dump")
            .into_iter()
            .map(|l| {
                let name = l.name.clone();
                // The larger of "all" and the device's own; loose mode on a
                // device without an IPv4 address is strict in effect (a way
                // back not through it ends in __fib_validate_source's
                // last_resort, which refuses whenever the filter is on).
                let rpf = match all_rpf.max(sysctl_u32(&format!("ipv4/conf/{name}/rp_filter"))) {
                    0 => Rpf::Off,
                    1 => Rpf::Strict,
                    _ if !with_addr.contains(&l.ifindex) => Rpf::Strict,
                    _ => Rpf::Loose,
                };
                let dev = Dev {
                    mac: l.mac.unwrap_or_default(),
                    mtu: l.mtu as usize,
                    rpf,
                    forwarding4: sysctl(&format!("ipv4/conf/{name}/forwarding")) != "0",
                    // A device without IPv6 (tunl0, which the ipip module
                    // puts in every namespace) has no ipv6/conf entry: the
                    // kernel has no inet6_dev for it and forwards no IPv6.
                    forwarding6: std::path::Path::new(&format!("/proc/sys/net/ipv6/conf/{name}")).exists()
                        && sysctl(&format!("ipv6/conf/{name}/forwarding")) != "0",
                    name,
                };
                (l.ifindex, dev)
            })
            .collect();
        let locals = table_routes(255)
            .expect("local table dump")
            .into_iter()
            .filter_map(|r| match (r.dst, r.kind) {
                (ipnet::IpNet::V4(n), RouteGet::Local | RouteGet::Broadcast) if n.prefix_len() == 32 => Some(n.addr()),
                _ => None,
            })
            .collect();
        Kernel { devs, neigh: neighbours().expect("neighbour dump"), main: main_routes().expect("route dump"), locals, routes: RefCell::default() }
    }

    fn dev(&self, ifindex: u32) -> &Dev {
        self.devs.get(&ifindex).unwrap_or_else(|| panic!("no interface {ifindex} in this namespace"))
    }

    pub fn name(&self, ifindex: u32) -> &str {
        &self.dev(ifindex).name
    }

    pub fn mac(&self, ifindex: u32) -> [u8; 6] {
        self.dev(ifindex).mac
    }

    /// The reverse-path filter in effect on `ifindex`.
    pub fn rpf(&self, ifindex: u32) -> Rpf {
        self.dev(ifindex).rpf
    }

    /// Whether `ifindex` forwards packets of the family (conf.DEV.forwarding).
    pub fn forwarding(&self, ifindex: u32, v6: bool) -> bool {
        let d = self.dev(ifindex);
        if v6 {
            d.forwarding6
        } else {
            d.forwarding4
        }
    }

    /// The kernel's input route for a packet from `src` to `dst` arriving on `iif`.
    pub fn route_get(&self, src: IpAddr, dst: IpAddr, iif: u32) -> RouteGet {
        self.routes.borrow_mut().entry((src, dst, iif)).or_insert_with(|| route_get(src, dst, iif).expect("RTM_GETROUTE")).clone()
    }

    /// The main table's route for `dst` (longest prefix), as a direct lookup finds it.
    pub fn main_route(&self, dst: IpAddr) -> RouteGet {
        self.main
            .iter()
            .filter(|r| r.dst.contains(&dst))
            .max_by_key(|r| r.dst.prefix_len())
            .map(|r| r.kind.clone())
            .unwrap_or(RouteGet::Error(libc::ENETUNREACH))
    }

    /// The MAC of a valid neighbour entry.
    pub fn neighbour(&self, ifindex: u32, addr: IpAddr) -> Option<[u8; 6]> {
        self.neigh.iter().find(|n| n.ifindex == ifindex && n.addr == addr && n.valid).and_then(|n| n.mac)
    }

    /// The kernel's source check (fib_validate_source) of an IPv4 packet
    /// whose route forwards it out of `oif`; `refused`: the kernel's input
    /// route refused this source (full lookups only). The programs hand
    /// every local or broadcast source to the kernel, and, when they must
    /// look the way back up, a packet whose egress has forwarding off
    /// (bpf_fib_lookup will not look up from there).
    fn source_check(&self, ip: &Ip, fib_iif: u32, oif: u32, lookup: Lookup, refused: bool) -> Option<Reason> {
        let IpAddr::V4(src) = ip.src else { return None };
        if self.locals.contains(&src) {
            return Some(Reason::Martian);
        }
        let rpf = self.rpf(fib_iif);
        if rpf != Rpf::Off && !self.forwarding(oif, false) {
            return Some(Reason::Unsupported);
        }
        if lookup == Lookup::Full {
            return refused.then_some(Reason::Martian);
        }
        match (rpf, self.main_route(ip.src)) {
            (Rpf::Off, _) => None,
            (Rpf::Strict, RouteGet::Unicast { oif, .. }) if oif != fib_iif => Some(Reason::Martian),
            (_, RouteGet::Unicast { .. }) => None,
            _ => Some(Reason::Martian),
        }
    }

    /// What the kernel does with `ip`, received for forwarding with
    /// `fib_iif` as its ingress (the device whose FIB the program looks up
    /// from: the VLAN device of a tag): `Ok` where it leaves, or why the
    /// program must hand it to the kernel (`Reason::Blackhole`: drop it).
    /// `good_source`: a source the kernel accepts on `fib_iif`, for the
    /// route a refused source's destination has.
    pub fn forward(&self, ip: &Ip, fib_iif: u32, lookup: Lookup, good_source: IpAddr) -> Result<Out, Reason> {
        if !ip.v6 && ip.options {
            return Err(Reason::IpOptions);
        }
        if !ip.v6 && !ip.csum_ok {
            return Err(Reason::BadCsum);
        }
        if ip.v6 && ip.hbh {
            return Err(Reason::Ipv6Hbh);
        }
        if martian(ip) {
            return Err(Reason::Martian);
        }
        if let IpAddr::V6(d) = ip.dst {
            // Multicast goes the kernel's multicast way; link-local
            // destinations are never forwarded (bpf_fib_lookup says so
            // before it looks at the ingress).
            if d.is_multicast() || (d.segments()[0] & 0xffc0) == 0xfe80 {
                return Err(Reason::Local);
            }
        }
        // bpf_fib_lookup refuses every lookup on an ingress without forwarding.
        if !self.forwarding(fib_iif, ip.v6) {
            return Err(Reason::FwdDisabled);
        }
        let mut route = match lookup {
            Lookup::Direct => self.main_route(ip.dst),
            Lookup::Full => self.route_get(ip.src, ip.dst, fib_iif),
        };
        // The kernel refuses a martian source on a route it would forward
        // (EINVAL; EXDEV from rp_filter): what the destination alone gets
        // is what a good source gets.
        let refused = !ip.v6 && matches!(route, RouteGet::Error(libc::EINVAL | libc::EXDEV));
        if refused {
            route = self.route_get(good_source, ip.dst, fib_iif);
        }
        if let RouteGet::Unicast { oif, .. } = route {
            if let Some(r) = self.source_check(ip, fib_iif, oif, lookup, refused) {
                return Err(r);
            }
        }
        let (oif, gateway, locked_mtu) = match route {
            RouteGet::Unicast { oif, gateway, locked_mtu } => (oif, gateway, locked_mtu),
            RouteGet::Local | RouteGet::Broadcast | RouteGet::Multicast | RouteGet::Anycast => return Err(Reason::Local),
            RouteGet::Error(libc::ENETUNREACH) => return Err(Reason::Local),
            RouteGet::Unreachable | RouteGet::Prohibit | RouteGet::Error(libc::EHOSTUNREACH | libc::EACCES) => return Err(Reason::Unreachable),
            // What remains refused is the route itself: a blackhole.
            RouteGet::Blackhole | RouteGet::Error(libc::EINVAL) => return Err(Reason::Blackhole),
            RouteGet::Error(e) => panic!("the model has no rule for RTM_GETROUTE's {}", std::io::Error::from_raw_os_error(e)),
        };
        let mut mtu = locked_mtu.map_or(self.dev(oif).mtu, |m| m as usize);
        if ip.v6 {
            mtu = mtu.max(1280);
        }
        // The route decided to forward: the TTL is checked before the MTU
        // and the neighbour (ip_forward, ip6_forward).
        if ip.ttl <= 1 {
            return Err(Reason::Ttl);
        }
        if ip.ip_len > mtu {
            return Err(Reason::Mtu);
        }
        let Some(dmac) = self.neighbour(oif, gateway.unwrap_or(ip.dst)) else { return Err(Reason::NoNeigh) };
        Ok(Out { oif, smac: self.mac(oif), dmac })
    }
}

/// The frame a forwarder sends: new MACs, the tag pushed, popped or
/// rewritten (`out_vid`; PCP and DEI kept), TTL / hop limit one less with
/// the IPv4 checksum computed afresh, and nothing after the IP packet.
pub fn forwarded(frame: &[u8], l2: &L2, ip: &Ip, out: Out, out_vid: u16) -> Vec<u8> {
    let mut pkt = frame[ip.l3_off..ip.l3_off + ip.ip_len].to_vec();
    if ip.v6 {
        pkt[7] -= 1;
    } else {
        pkt[8] -= 1;
        pkt[10..12].fill(0);
        let ihl = usize::from(pkt[0] & 0xf) * 4;
        let c = xnf_packet::checksum::checksum(&pkt[..ihl]);
        pkt[10..12].copy_from_slice(&c.to_be_bytes());
    }
    let ethertype = if ip.v6 { [0x86, 0xdd] } else { [0x08, 0x00] };
    let mut f = Vec::with_capacity(18 + pkt.len());
    f.extend_from_slice(&out.dmac);
    f.extend_from_slice(&out.smac);
    if out_vid != 0 {
        let pcp_dei = match l2 {
            L2::Tagged { tci } => tci & 0xf000,
            _ => 0,
        };
        f.extend_from_slice(&[0x81, 0x00]);
        f.extend_from_slice(&(pcp_dei | out_vid).to_be_bytes());
    }
    f.extend_from_slice(&ethertype);
    f.extend_from_slice(&pkt);
    f
}
