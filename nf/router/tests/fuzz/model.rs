//! The reference model of the router: what `router.bpf.c` must do with a
//! frame arriving on the fixture's dut. It reads the frame as the kernel
//! does (`xnf_testrun::kernel`), takes routing decisions from the kernel
//! itself (`ip route get DST from SRC iif DEV` through netlink, and the main
//! table for direct lookups), and adds the kernel's receive and forwarding
//! rules that a route lookup does not show (ipv6_rcv, ip6_forward). The
//! reasons are the router's documented contract (README).

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr};

use xnf_netns::netlink::{main_routes, neighbours, route_get, table_routes, Neighbour, RouteGet, TableRoute};
use xnf_router::program::Reason;
use xnf_testrun::kernel::{view, Ip, L2, L3};
use xnf_testrun::Verdict;

use crate::fixture::{Fixture, Ingress, SRC4, VLAN200_SRC4};

/// What the router must do with a frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expect {
    pub verdict: Verdict,
    pub reason: Reason,
    /// The frame sent (redirects), or `None`: unchanged.
    pub frame: Option<Vec<u8>>,
}

fn pass(reason: Reason) -> Expect {
    Expect { verdict: Verdict::Pass, reason, frame: None }
}

/// The MTU of every device of the fixture (it sets none).
const DEV_MTU: usize = 1500;

pub struct Model<'f> {
    f: &'f Fixture,
    neigh: Vec<Neighbour>,
    main: Vec<TableRoute>,
    /// The /32 local and broadcast routes of the kernel's local table.
    locals: BTreeSet<Ipv4Addr>,
    kernel: RefCell<HashMap<(IpAddr, IpAddr, u32), RouteGet>>,
}

/// Reverse-path filter modes (net.ipv4.conf.*.rp_filter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rpf {
    Off,
    Strict,
    Loose,
}

fn sysctl(path: &str) -> String {
    std::fs::read_to_string(format!("/proc/sys/net/{path}")).unwrap_or_else(|e| panic!("reading {path}: {e}")).trim().to_string()
}

/// IPv6 sources and destinations the kernel refuses to forward whatever
/// the routes say (ipv6_rcv, ip6_forward; RFC 4291 2.5.3, 2.7, errata 3480,
/// the v4-mapped rule) — `egress_other` when the packet would leave by
/// another interface than it came in (ip6_forward checks the source then).
fn ipv6_martian(src: std::net::Ipv6Addr, dst: std::net::Ipv6Addr) -> bool {
    let mc_scope = |a: std::net::Ipv6Addr| a.segments()[0] & 0x000f;
    src.is_loopback()
        || dst.is_loopback()
        || src.is_multicast()
        || src.to_ipv4_mapped().is_some()
        || (dst.is_multicast() && mc_scope(dst) <= 1)
        || src.is_unspecified()
        || (src.segments()[0] & 0xffc0) == 0xfe80
}

/// IPv6 multicast destinations of a wider scope: delivered or routed by the
/// kernel's multicast path, never unicast-forwarded.
fn ipv6_multicast(dst: std::net::Ipv6Addr) -> bool {
    dst.is_multicast()
}

/// IPv4 destinations that are never unicast-forwarded: loopback,
/// multicast, the limited broadcast, "this network" (0/8).
fn ipv4_not_unicast(dst: Ipv4Addr) -> bool {
    dst.is_loopback() || dst.is_multicast() || dst.is_broadcast() || dst.octets()[0] == 0
}

/// IPv4 sources the kernel refuses before any route (ip_route_input_slow):
/// multicast, the limited broadcast, loopback (route_localnet is off), 0/8.
fn ipv4_martian_source(src: Ipv4Addr) -> bool {
    src.is_multicast() || src.is_broadcast() || src.is_loopback() || src.octets()[0] == 0
}

impl<'f> Model<'f> {
    /// Reads the fixture's neighbours and main table (from inside dut).
    pub fn new(f: &'f Fixture) -> Model<'f> {
        let locals = table_routes(255)
            .expect("local table dump")
            .into_iter()
            .filter_map(|r| match (r.dst, r.kind) {
                (ipnet::IpNet::V4(n), RouteGet::Local | RouteGet::Broadcast) if n.prefix_len() == 32 => Some(n.addr()),
                _ => None,
            })
            .collect();
        Model { f, neigh: neighbours().expect("neighbour dump"), main: main_routes().expect("route dump"), locals, kernel: RefCell::default() }
    }

    /// The reverse-path filter on `ifindex`: the larger of "all" and its own.
    fn rpf(&self, ifindex: u32) -> Rpf {
        let dev: u32 = sysctl(&format!("ipv4/conf/{}/rp_filter", self.f.name(ifindex))).parse().unwrap();
        let all: u32 = sysctl("ipv4/conf/all/rp_filter").parse().unwrap();
        match dev.max(all) {
            0 => Rpf::Off,
            1 => Rpf::Strict,
            _ => Rpf::Loose,
        }
    }

    fn forwarding(&self, ifindex: u32) -> bool {
        sysctl(&format!("ipv4/conf/{}/forwarding", self.f.name(ifindex))) != "0"
    }

    /// A source the kernel accepts on `iif` (one on its subnet).
    fn good_source(&self, iif: u32) -> IpAddr {
        IpAddr::V4(if iif == self.f.v200 { VLAN200_SRC4 } else { SRC4 })
    }

    /// The kernel's source check (fib_validate_source) of an IPv4 packet
    /// whose route forwards it out of `oif`; `refused`: the kernel's input
    /// route refused this source (full lookups only). The router hands
    /// every local or broadcast source to the kernel, and, when it must
    /// look the way back up, a packet whose egress has forwarding off
    /// (bpf_fib_lookup will not look up from there).
    fn source_check(&self, ip: &Ip, fib_iif: u32, oif: u32, direct: bool, refused: bool) -> Option<Reason> {
        let IpAddr::V4(src) = ip.src else { return None };
        if self.locals.contains(&src) {
            return Some(Reason::Martian);
        }
        let rpf = self.rpf(fib_iif);
        if rpf != Rpf::Off && !self.forwarding(oif) {
            return Some(Reason::Unsupported);
        }
        if !direct {
            return refused.then_some(Reason::Martian);
        }
        match (rpf, self.main_route(ip.src)) {
            (Rpf::Off, _) => None,
            (Rpf::Strict, RouteGet::Unicast { oif, .. }) if oif != fib_iif => Some(Reason::Martian),
            (_, RouteGet::Unicast { .. }) => None,
            _ => Some(Reason::Martian),
        }
    }

    fn kernel_route(&self, src: IpAddr, dst: IpAddr, iif: u32) -> RouteGet {
        self.kernel.borrow_mut().entry((src, dst, iif)).or_insert_with(|| route_get(src, dst, iif).expect("RTM_GETROUTE")).clone()
    }

    /// The main table's route for `dst` (longest prefix), as a direct lookup finds it.
    fn main_route(&self, dst: IpAddr) -> RouteGet {
        self.main
            .iter()
            .filter(|r| r.dst.contains(&dst))
            .max_by_key(|r| r.dst.prefix_len())
            .map(|r| r.kind.clone())
            .unwrap_or(RouteGet::Error(libc::ENETUNREACH))
    }

    fn mac_of(&self, ifindex: u32) -> [u8; 6] {
        self.f.macs.iter().find(|(i, _)| *i == ifindex).map(|(_, m)| m.octets()).expect("a fixture interface")
    }

    fn neighbour(&self, ifindex: u32, addr: IpAddr) -> Option<[u8; 6]> {
        self.neigh.iter().find(|n| n.ifindex == ifindex && n.addr == addr && n.valid).and_then(|n| n.mac)
    }

    /// The physical port and VID behind a VLAN device of the fixture.
    fn vlan_egress(&self, ifindex: u32) -> Option<(u32, u16)> {
        if ifindex == self.f.v100 {
            Some((self.f.out0, 100))
        } else if ifindex == self.f.v200 {
            Some((self.f.in0, 200))
        } else {
            None
        }
    }

    pub fn decide(&self, frame: &[u8], ingress: Ingress, direct: bool) -> Expect {
        let f = self.f;
        let v = view(frame);
        if ingress == Ingress::In0Unconfigured {
            return pass(Reason::Unconfigured);
        }
        if v.to_group() {
            return pass(Reason::Multicast);
        }
        let our_mac = if ingress == Ingress::In1 { f.in1_mac } else { f.in0_mac };
        if v.dst_mac != our_mac.octets() {
            return pass(Reason::NotOurMac);
        }
        match (v.l2, &v.l3) {
            (L2::Stacked, _) => return pass(Reason::Qinq),
            (L2::Truncated, _) | (_, L3::Malformed) => return pass(Reason::Malformed),
            _ => {}
        }
        let in_ifindex = f.ifindex(ingress);
        let vid = v.l2.vid();
        let fib_iif = match vid {
            0 => in_ifindex,
            200 if in_ifindex == f.in0 => f.v200,
            _ => return pass(Reason::VlanUnknown),
        };
        let ip = match &v.l3 {
            L3::Ip(ip) => ip,
            _ => return pass(Reason::NonIp),
        };
        if !ip.v6 && ip.options {
            return pass(Reason::IpOptions);
        }
        if !ip.v6 && !ip.csum_ok {
            return pass(Reason::BadCsum);
        }
        if ip.v6 && ip.hbh {
            return pass(Reason::Ipv6Hbh);
        }
        if let Some(r) = self.martian(ip) {
            return pass(r);
        }
        if let IpAddr::V6(d) = ip.dst {
            // Multicast goes the kernel's multicast way; link-local
            // destinations are never forwarded (bpf_fib_lookup says so
            // before it looks at the ingress).
            if ipv6_multicast(d) || (d.segments()[0] & 0xffc0) == 0xfe80 {
                return pass(Reason::Local);
            }
        }
        // bpf_fib_lookup refuses every lookup on an ingress without forwarding.
        if ingress == Ingress::In1 {
            return pass(Reason::FwdDisabled);
        }
        let mut route = if direct { self.main_route(ip.dst) } else { self.kernel_route(ip.src, ip.dst, fib_iif) };
        // The kernel refuses a martian source on a route it would forward
        // (EINVAL; EXDEV from rp_filter): what the destination alone gets
        // is what a good source gets.
        let refused = !ip.v6 && matches!(route, RouteGet::Error(libc::EINVAL | libc::EXDEV));
        if refused {
            route = self.kernel_route(self.good_source(fib_iif), ip.dst, fib_iif);
        }
        if let RouteGet::Unicast { oif, .. } = route {
            if let Some(r) = self.source_check(ip, fib_iif, oif, direct, refused) {
                return pass(r);
            }
        }
        let (oif, gateway, locked_mtu) = match route {
            RouteGet::Unicast { oif, gateway, locked_mtu } => (oif, gateway, locked_mtu),
            RouteGet::Local | RouteGet::Broadcast | RouteGet::Multicast | RouteGet::Anycast => return pass(Reason::Local),
            RouteGet::Error(libc::ENETUNREACH) => return pass(Reason::Local),
            RouteGet::Unreachable | RouteGet::Prohibit | RouteGet::Error(libc::EHOSTUNREACH | libc::EACCES) => return pass(Reason::Unreachable),
            // What remains refused is the route itself: a blackhole.
            RouteGet::Blackhole | RouteGet::Error(libc::EINVAL) => return Expect { verdict: Verdict::Drop, reason: Reason::Blackhole, frame: None },
            RouteGet::Error(e) => panic!("the model has no rule for RTM_GETROUTE's {}", std::io::Error::from_raw_os_error(e)),
        };
        let mut mtu = locked_mtu.map_or(DEV_MTU, |m| m as usize);
        if ip.v6 {
            mtu = mtu.max(1280);
        }
        let neigh = self.neighbour(oif, gateway.unwrap_or(ip.dst));
        // The route decided to forward: the TTL is checked before the MTU
        // and the neighbour (ip_forward, ip6_forward).
        if ip.ttl <= 1 {
            return pass(Reason::Ttl);
        }
        if ip.ip_len > mtu {
            return pass(Reason::Mtu);
        }
        let Some(dmac) = neigh else { return pass(Reason::NoNeigh) };
        let (port, out_vid) = self.vlan_egress(oif).unwrap_or((oif, 0));
        let native = [f.in0, f.in1, f.out0].contains(&port);
        let generic = ingress == Ingress::In0Generic;
        if port == f.skb0 && !generic {
            return pass(Reason::EgressSkbMode);
        }
        if !native && port != f.skb0 {
            return pass(Reason::NotManaged);
        }
        Expect { verdict: Verdict::Redirect, reason: Reason::Forwarded, frame: Some(forwarded(frame, &v.l2, ip, self.mac_of(oif), dmac, out_vid)) }
    }

    /// Addresses the kernel never forwards between, whatever the routes:
    /// the IPv6 receive and forwarding rules, IPv4 destinations that are
    /// not unicast and the sources ip_route_input refuses before any route.
    fn martian(&self, ip: &Ip) -> Option<Reason> {
        let bad = match (ip.src, ip.dst) {
            (IpAddr::V6(s), IpAddr::V6(d)) => ipv6_martian(s, d),
            (IpAddr::V4(s), IpAddr::V4(d)) => ipv4_not_unicast(d) || ipv4_martian_source(s),
            _ => unreachable!("one family per header"),
        };
        bad.then_some(Reason::Martian)
    }
}

/// The frame the router sends: new MACs, the tag pushed, popped or
/// rewritten (PCP and DEI kept), TTL / hop limit one less with the IPv4
/// checksum computed afresh, and nothing after the IP packet.
fn forwarded(frame: &[u8], l2: &L2, ip: &Ip, smac: [u8; 6], dmac: [u8; 6], out_vid: u16) -> Vec<u8> {
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
    let mut out = Vec::with_capacity(18 + pkt.len());
    out.extend_from_slice(&dmac);
    out.extend_from_slice(&smac);
    if out_vid != 0 {
        let pcp_dei = match l2 {
            L2::Tagged { tci } => tci & 0xf000,
            _ => 0,
        };
        out.extend_from_slice(&[0x81, 0x00]);
        out.extend_from_slice(&(pcp_dei | out_vid).to_be_bytes());
    }
    out.extend_from_slice(&ethertype);
    out.extend_from_slice(&pkt);
    out
}
