//! The network and the lb instance the lb's packet tests run in, shared by
//! the packet table (tests/packets.rs) and the fuzz test: one namespace
//! ("dut") whose FIB has a route of every kind the lb meets on the way to a
//! backend, the services of [`SERVICES`] written to the maps as `xnf lb
//! apply` would write them, and the expected frames built from scratch
//! (outer headers, DSR's MACs), so that nothing expected comes from
//! `encap.h`'s own arithmetic.

// Shared by several test crates; each uses part of it.
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use anyhow::{Context, Result};
use ipnet::IpNet;
use libbpf_rs::{MapCore, MapFlags};
use xnf_lb::flow::Flow;
use xnf_lb::program::{addr_words, raw_flow, LbMaps, LbProgram, RawBackend, RawConfig, RawService, RawServiceKey};
use xnf_lb::{HashFields, Mode, Proto, Table, NO_BACKEND};
use xnf_netns::{ifname, veth, Netns};
use xnf_packet::checksum::checksum;
use xnf_packet::MacAddr;
use Proto::{Tcp, Udp};

/// The client's MAC: every ingress frame comes from it, and ICMP errors go back to it.
pub const GEN_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x01]);
/// The next hop toward the backends behind in0 (the frame leaves the way it came: XDP_TX).
pub const NH_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0x01, 0xfe]);
/// The next hop on out0, an interface with the lb stage (XDP_REDIRECT).
pub const OUT_NH_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0x02, 0x02]);
/// The next hop on oth0, an interface without it.
pub const OTH_NH_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0x03, 0x02]);
/// DSR backends on in0's segment: the file gives .10's MAC (which the
/// lb must prefer to the neighbour table's), .11 is known to the
/// neighbour table only.
pub const DSR_FILE_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0x10, 0x10]);
pub const DSR_NEIGH_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0x10, 0xee]);

pub const CLIENT4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
pub const CLIENT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
pub const GUE: Mode = Mode::Gue { port: 6080 };

/// Outer source prefixes (198.18.200.0/24, 2001:db8:200::/112): the flow
/// hash fills their host bits.
pub const SRC4: Ipv4Addr = Ipv4Addr::new(198, 18, 200, 0);
pub const HOST4: u32 = 0xff;
pub const SRC6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x200, 0, 0, 0, 0, 0);
pub const HOST6: u32 = 0xffff;

/// dut's interfaces, in this order: in0 (ingress, and egress toward the
/// backends behind NH), out0 (in tx_ports), oth0 (not), each with a fixed MAC.
const DEVS: [(&str, [&str; 2]); 3] =
    [("in0", ["198.18.0.2/24", "2001:db8::2/64"]), ("out0", ["198.18.1.1/24", "2001:db8:1::1/64"]), ("oth0", ["198.18.2.1/24", "2001:db8:2::1/64"])];

/// Neighbours: device (index in DEVS), address, MAC. 198.18.0.50 and the
/// next hops 198.18.0.99 / 2001:db8::99 have none.
const NEIGHS: &[(usize, &str, MacAddr)] = &[
    (0, "198.18.0.254", NH_MAC),
    (0, "2001:db8::fe", NH_MAC),
    (0, "198.18.0.10", DSR_NEIGH_MAC),
    (0, "198.18.0.11", DSR_NEIGH_MAC),
    (0, "2001:db8::10", DSR_NEIGH_MAC),
    (0, "2001:db8::11", DSR_NEIGH_MAC),
    (1, "198.18.1.2", OUT_NH_MAC),
    (1, "2001:db8:1::2", OUT_NH_MAC),
    (2, "198.18.2.2", OTH_NH_MAC),
    (2, "2001:db8:2::2", OTH_NH_MAC),
];

/// Routes toward the backends, one network per kind of path. A route MTU
/// must be locked: forwarding (and bpf_fib_lookup) ignores an unlocked one.
const ROUTES: &[&str] = &[
    "198.18.16.0/24 via 198.18.0.254",
    "2001:db8:16::/64 via 2001:db8::fe",
    "198.18.17.0/24 via 198.18.1.2",
    "2001:db8:17::/64 via 2001:db8:1::2",
    "198.18.18.0/24 via 198.18.2.2",
    "2001:db8:18::/64 via 2001:db8:2::2",
    "198.18.19.0/24 via 198.18.0.99",
    "2001:db8:19::/64 via 2001:db8::99",
    "unreachable 198.18.20.0/24",
    "unreachable 2001:db8:20::/64",
    "198.18.22.0/24 via 198.18.0.254 mtu lock 1000",
    "2001:db8:22::/64 via 2001:db8::fe mtu lock 1400",
];

/// A service of the test file.
pub struct Spec {
    pub name: &'static str,
    pub vip: &'static str,
    pub proto: Proto,
    /// 0: all ports.
    pub port: u16,
    pub mode: Mode,
    pub hash: HashFields,
    pub size: u32,
    pub backends: &'static [&'static str],
}

const fn svc(name: &'static str, vip: &'static str, proto: Proto, port: u16, mode: Mode, backends: &'static [&'static str]) -> Spec {
    let size = if backends.len() > 1 { 65_537 } else { 251 };
    Spec { name, vip, proto, port, mode, hash: HashFields::FiveTuple, size, backends }
}

const B44: &[&str] = &["198.18.16.1", "198.18.16.2", "198.18.16.3", "198.18.16.4"];
const B66: &[&str] = &["2001:db8:16::1", "2001:db8:16::2", "2001:db8:16::3", "2001:db8:16::4"];
const G44: &[&str] = &["198.18.16.11", "198.18.16.12", "198.18.16.13"];
const G64: &[&str] = &["198.18.16.21", "198.18.16.22", "198.18.16.23"];
const G46: &[&str] = &["2001:db8:16::11", "2001:db8:16::12", "2001:db8:16::13"];
const G66: &[&str] = &["2001:db8:16::21", "2001:db8:16::22", "2001:db8:16::23"];
const D4: &[&str] = &["198.18.0.10", "198.18.0.11"];
const D6: &[&str] = &["2001:db8::10", "2001:db8::11"];
/// DSR backends the route reaches through a gateway (198.18.0.254 /
/// 2001:db8::fe): not on-link, whatever MAC the file gives.
const DGW4: &[&str] = &["198.18.16.71"];
const DGW6: &[&str] = &["2001:db8:16::71"];

/// The services; the id of each is its index (and its table slot). Each
/// mode and family has a TCP service on port 80 and a UDP one on all ports.
pub const SERVICES: &[Spec] = &[
    svc("ipip4", "198.18.100.1", Tcp, 80, Mode::Ipip, B44),
    svc("ipip4-udp", "198.18.100.1", Udp, 0, Mode::Ipip, B44),
    svc("ipip6", "2001:db8:100::1", Tcp, 80, Mode::Ipip, B66),
    svc("ipip6-udp", "2001:db8:100::1", Udp, 0, Mode::Ipip, B66),
    svc("gue44", "198.18.100.2", Tcp, 80, GUE, G44),
    svc("gue44-udp", "198.18.100.2", Udp, 0, GUE, G44),
    svc("gue64", "2001:db8:100::2", Tcp, 80, GUE, G64),
    svc("gue64-udp", "2001:db8:100::2", Udp, 0, GUE, G64),
    svc("gue46", "198.18.100.3", Tcp, 80, GUE, G46),
    svc("gue46-udp", "198.18.100.3", Udp, 0, GUE, G46),
    svc("gue66", "2001:db8:100::3", Tcp, 80, GUE, G66),
    svc("gue66-udp", "2001:db8:100::3", Udp, 0, GUE, G66),
    svc("dsr4", "198.18.100.4", Tcp, 80, Mode::Dsr, D4),
    svc("dsr4-udp", "198.18.100.4", Udp, 0, Mode::Dsr, D4),
    svc("dsr6", "2001:db8:100::4", Tcp, 80, Mode::Dsr, D6),
    svc("dsr6-udp", "2001:db8:100::4", Udp, 0, Mode::Dsr, D6),
    Spec { hash: HashFields::ThreeTuple, ..svc("udp3", "198.18.100.5", Udp, 0, Mode::Ipip, &["198.18.16.31", "198.18.16.32", "198.18.16.33", "198.18.16.34"]) },
    svc("any-port", "198.18.100.6", Tcp, 0, Mode::Ipip, &["198.18.16.41", "198.18.16.42"]),
    svc("port-443", "198.18.100.6", Tcp, 443, Mode::Ipip, &["198.18.16.43"]),
    svc("drain", "198.18.100.7", Tcp, 80, Mode::Ipip, &["198.18.16.51", "198.18.16.52"]),
    svc("stale", "198.18.100.15", Tcp, 80, Mode::Ipip, &["198.18.16.61", "198.18.16.62"]),
    svc("redirect4", "198.18.100.8", Tcp, 80, Mode::Ipip, &["198.18.17.1"]),
    svc("redirect6", "2001:db8:100::8", Tcp, 80, Mode::Ipip, &["2001:db8:17::1"]),
    svc("unmanaged", "198.18.100.9", Tcp, 80, Mode::Ipip, &["198.18.18.1"]),
    svc("no-neigh4", "198.18.100.10", Tcp, 80, Mode::Ipip, &["198.18.19.1"]),
    svc("no-neigh6", "2001:db8:100::10", Tcp, 80, Mode::Ipip, &["2001:db8:19::1"]),
    svc("no-neigh-dsr", "198.18.100.11", Tcp, 80, Mode::Dsr, &["198.18.0.50"]),
    svc("no-route4", "198.18.100.12", Tcp, 80, Mode::Ipip, &["198.18.20.1"]),
    svc("no-route6", "2001:db8:100::12", Tcp, 80, Mode::Ipip, &["2001:db8:20::1"]),
    svc("mtu4", "198.18.100.13", Tcp, 80, Mode::Ipip, &["198.18.22.1"]),
    svc("mtu6", "2001:db8:100::13", Tcp, 80, Mode::Ipip, &["2001:db8:22::1"]),
    svc("mtu-gue64", "2001:db8:100::14", Tcp, 80, GUE, &["198.18.22.2"]),
    svc("dsr-gw4", "198.18.100.16", Tcp, 80, Mode::Dsr, DGW4),
    svc("dsr-gw6", "2001:db8:100::16", Tcp, 80, Mode::Dsr, DGW6),
];

/// DSR backends whose MAC the file gives.
const FILE_MACS: &[(&str, MacAddr)] = &[("198.18.0.10", DSR_FILE_MAC), ("2001:db8::10", DSR_FILE_MAC), ("198.18.16.71", DSR_FILE_MAC)];

/// One backend record: its id in the data plane and what it holds.
#[derive(Clone, Copy, Debug)]
pub struct Backend {
    pub id: u32,
    pub addr: IpAddr,
    pub mac: Option<MacAddr>,
}

/// A service as loaded: its spec, id, backends and the Rust model's table.
pub struct Svc {
    pub spec: &'static Spec,
    pub id: u32,
    pub vip: IpAddr,
    pub backends: Vec<Backend>,
    pub table: Table,
}

impl Svc {
    pub fn hash(&self, f: &Flow) -> u32 {
        f.hash(self.spec.hash)
    }
    /// The backend (index in `backends`) the model's table gives a new flow.
    pub fn pick(&self, f: &Flow) -> usize {
        let i = self.table.entries()[f.entry(self.spec.hash, self.table.size()) as usize];
        assert_ne!(i, NO_BACKEND, "service {} has backends", self.spec.name);
        i as usize
    }
    pub fn key(&self) -> RawServiceKey {
        let (vip, family) = addr_words(self.vip);
        RawServiceKey { vip, port: self.spec.port, family, proto: self.spec.proto.number() }
    }
}

pub struct Fixture {
    pub dut: Netns,
    _peer: Netns,
    pub in0: u32,
    pub out0: u32,
    pub in0_mac: MacAddr,
    pub out0_mac: MacAddr,
    pub services: Vec<Svc>,
}

impl Fixture {
    pub fn new() -> Result<Self> {
        let dut = Netns::new("lb-dut")?;
        let peer = Netns::new("lb-peer")?;
        let names = DEVS.map(|(role, _)| ifname(role));
        let mut lines = Vec::new();
        for (i, n) in names.iter().enumerate() {
            veth(&dut, n, &peer, &ifname("p"), None)?;
            lines.push(format!("link set dev {n} address 02:00:00:00:fe:{:02x}", i + 1));
            lines.extend(DEVS[i].1.iter().map(|a| format!("addr add {a} dev {n}{}", if a.contains(':') { " nodad" } else { "" })));
        }
        dut.ip_batch(&lines)?;
        for n in &names {
            dut.link_up(n)?;
        }
        let mut lines: Vec<String> = NEIGHS.iter().map(|(d, ip, mac)| format!("neigh replace {ip} lladdr {mac} nud permanent dev {}", names[*d])).collect();
        lines.extend(ROUTES.iter().map(|r| format!("route add {r}")));
        dut.ip_batch(&lines)?;
        dut.enable_forwarding()?;
        let mut services = Vec::new();
        let mut next_id = 0u32;
        for (id, spec) in SERVICES.iter().enumerate() {
            let backends: Vec<Backend> = spec
                .backends
                .iter()
                .map(|a| {
                    next_id += 1;
                    let mac = FILE_MACS.iter().find(|(m, _)| m == a).map(|(_, mac)| *mac);
                    Backend { id: next_id, addr: a.parse().unwrap(), mac }
                })
                .collect();
            let weights: Vec<(IpAddr, u32)> = backends.iter().map(|b| (b.addr, 1)).collect();
            let table = Table::build(&weights, spec.size).with_context(|| format!("table of {}", spec.name))?;
            services.push(Svc { spec, id: id as u32, vip: spec.vip.parse().unwrap(), backends, table });
        }
        Ok(Fixture {
            in0: dut.ifindex(&names[0])?,
            out0: dut.ifindex(&names[1])?,
            in0_mac: dut.mac(&names[0])?,
            out0_mac: dut.mac(&names[1])?,
            services,
            dut,
            _peer: peer,
        })
    }

    pub fn svc(&self, name: &str) -> &Svc {
        self.services.iter().find(|s| s.spec.name == name).unwrap_or_else(|| panic!("no service {name}"))
    }

    /// Every backend record over all services.
    pub fn backends(&self) -> impl Iterator<Item = &Backend> {
        self.services.iter().flat_map(|s| &s.backends)
    }

    /// Loads an unpinned instance and fills its maps as `xnf lb apply` and
    /// `xnf lb attach IN0 OUT0` would. Run it inside dut: tx_ports resolves
    /// ifindexes in the caller's namespace.
    pub fn load(&self) -> Result<(LbProgram, LbMaps)> {
        self.load_at(None)
    }

    /// The same with the maps pinned in `dir` (for the route cache's keeper).
    pub fn load_at(&self, dir: Option<&std::path::Path>) -> Result<(LbProgram, LbMaps)> {
        let prog = LbProgram::load(dir, None)?;
        let maps = prog.maps()?;
        set_sources(&maps, true)?;
        for s in &self.services {
            for b in &s.backends {
                set_backend(&maps, b, 1)?;
            }
            let ids: Vec<u32> = s.table.entries().iter().map(|&i| s.backends[i as usize].id).collect();
            maps.set_table(s.id, &ids)?;
            let mode = match s.spec.mode {
                Mode::Ipip => 0,
                Mode::Gue { .. } => 1,
                Mode::Dsr => 2,
            };
            let gue_port = if let Mode::Gue { port } = s.spec.mode { port.to_be() } else { 0 };
            let raw = RawService { slot: s.id, table_size: s.table.size(), id: s.id, gue_port, mode, hash3: u8::from(s.spec.hash == HashFields::ThreeTuple) };
            maps.set_service(&s.key(), &raw)?;
            maps.add_vip(s.vip)?;
        }
        maps.add_port(self.in0)?;
        maps.add_port(self.out0)?;
        maps.set_own_mac(self.in0, self.in0_mac.0)?;
        maps.set_own_mac(self.out0, self.out0_mac.0)?;
        Ok((prog, maps))
    }

    /// Source MAC, destination MAC and whether the frame is redirected
    /// (leaves by out0) when backend `b` is reachable.
    pub fn l2(&self, b: &Backend) -> (MacAddr, MacAddr, bool) {
        if let Some(mac) = b.mac {
            return (self.in0_mac, mac, false);
        }
        let within = |net: &str| net.parse::<IpNet>().unwrap().contains(&b.addr);
        if within("198.18.17.0/24") || within("2001:db8:17::/64") {
            return (self.out0_mac, OUT_NH_MAC, true);
        }
        if let Some((_, _, mac)) = NEIGHS.iter().find(|(_, ip, _)| ip.parse::<IpAddr>().unwrap() == b.addr) {
            return (self.in0_mac, *mac, false);
        }
        (self.in0_mac, NH_MAC, false)
    }
}

pub fn set_backend(maps: &LbMaps, b: &Backend, gen: u32) -> Result<()> {
    let (addr, family) = addr_words(b.addr);
    let mac = b.mac.map(|m| m.0).unwrap_or_default();
    maps.set_backend(b.id, &RawBackend { addr, gen, family, has_mac: u8::from(b.mac.is_some()), mac })
}

/// Writes the outer source prefixes, or none.
pub fn set_sources(maps: &LbMaps, on: bool) -> Result<()> {
    let c = if on {
        let (src6, _) = addr_words(SRC6.into());
        RawConfig { src4: u32::from_ne_bytes(SRC4.octets()), host4: HOST4.to_be(), src6, host6: HOST6.to_be() }
    } else {
        RawConfig::default()
    };
    maps.set_config(&c)
}

/// Points a flow's connection-table entry at backend `b` (generation 1).
pub fn pin(maps: &LbMaps, f: &Flow, b: &Backend) -> Result<()> {
    let key = raw_flow(f);
    // Hash 0: not kept, as an entry copied by an upgrade from a build without it; the program computes it.
    let value: Vec<u8> = [b.id, 1, 0].iter().flat_map(|w| w.to_ne_bytes()).collect();
    maps.conntrack.update(xnf_core::maps::as_bytes(&key), &value, MapFlags::ANY).context("pinning a flow")
}

/// The outer source of a flow of hash `hash` toward a backend of family v4 / v6.
pub fn outer_source(v4: bool, hash: u32) -> IpAddr {
    if v4 {
        Ipv4Addr::from(u32::from(SRC4) | (hash & HOST4)).into()
    } else {
        Ipv6Addr::from(u128::from(SRC6) | u128::from(hash & HOST6)).into()
    }
}

/// The DSCP/ECN byte of an IP packet: IPv4's TOS, IPv6's traffic class.
pub fn ip_tos(ip: &[u8]) -> u8 {
    if ip[0] >> 4 == 4 {
        ip[1]
    } else {
        (ip[0] << 4) | (ip[1] >> 4)
    }
}

fn ethertype(ip: &[u8]) -> [u8; 2] {
    if ip[0] >> 4 == 4 {
        [0x08, 0x00]
    } else {
        [0x86, 0xdd]
    }
}

/// The frame the lb must send for IP packet `ip` of a flow of hash `hash`
/// to `backend` in `mode`, written from the RFCs rather than from encap.h:
/// outer IPv4 (DF, id 0, TTL 64, TOS the inner's) or IPv6 (traffic class
/// the inner's, flow label from the hash, hop limit 64), GUE's UDP header
/// (source port from the hash, checksum 0), DSR's frame with new MACs only.
pub fn expected_frame(ip: &[u8], mode: Mode, hash: u32, backend: IpAddr, smac: MacAddr, dmac: MacAddr) -> Vec<u8> {
    let mut f = [dmac.0, smac.0].concat();
    if mode == Mode::Dsr {
        f.extend(ethertype(ip));
        f.extend(ip);
        return f;
    }
    let (udp, proto) = match mode {
        Mode::Gue { port } => {
            let mut u = [0u8; 8];
            u[0..2].copy_from_slice(&(0xc000 | (hash & 0x3fff) as u16).to_be_bytes());
            u[2..4].copy_from_slice(&port.to_be_bytes());
            u[4..6].copy_from_slice(&(ip.len() as u16 + 8).to_be_bytes());
            (u.to_vec(), 17)
        }
        _ => (Vec::new(), if backend.is_ipv4() { 4 } else { 41 }),
    };
    let tos = ip_tos(ip);
    let src = outer_source(backend.is_ipv4(), hash);
    match (src, backend) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let mut h = vec![0x45, tos];
            h.extend(((20 + udp.len() + ip.len()) as u16).to_be_bytes());
            h.extend([0, 0, 0x40, 0, 64, proto, 0, 0]);
            h.extend(s.octets());
            h.extend(d.octets());
            let c = checksum(&h);
            h[10..12].copy_from_slice(&c.to_be_bytes());
            f.extend([0x08, 0x00]);
            f.extend(h);
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            f.extend([0x86, 0xdd]);
            f.extend((0x6000_0000 | (u32::from(tos) << 20) | (hash & 0xfffff)).to_be_bytes());
            f.extend(((udp.len() + ip.len()) as u16).to_be_bytes());
            f.extend([proto, 64]);
            f.extend(s.octets());
            f.extend(d.octets());
        }
        _ => unreachable!("source and backend of one family"),
    }
    f.extend(udp);
    f.extend(ip);
    f
}

/// Checks what `check_run` cannot for an encapsulated frame (xnf_packet's
/// parser stops at the outer header, and takes GUE's zero UDP checksum
/// over IPv6 for a wrong one): the outer IPv4 header checksum, and every
/// checksum of the inner packet, parsed behind an Ethernet header of its own.
pub fn check_encapsulated(frame: &[u8]) -> Result<(), String> {
    let (outer, ipv4) = match frame.get(12..14) {
        Some([0x08, 0x00]) => (20, true),
        Some([0x86, 0xdd]) => (40, false),
        _ => return Err("no IP ethertype".into()),
    };
    let proto = frame.get(14 + if ipv4 { 9 } else { 6 }).copied().ok_or("short frame")?;
    if ipv4 && !xnf_packet::checksum::verify(&frame[14..34]) {
        return Err("outer IPv4 header checksum".into());
    }
    let inner = &frame[(14 + outer + if proto == 17 { 8 } else { 0 }).min(frame.len())..];
    let fake = [&[0u8; 12][..], &ethertype(inner), inner].concat();
    match xnf_packet::parse(&fake) {
        Ok(p) if p.checksums_ok() => Ok(()),
        other => Err(format!("inner packet checksums do not verify: {other:?}")),
    }
}

/// A bpffs folder for a test's pinned maps, removed with everything in it
/// when dropped (also when the test fails).
pub struct PinDir(pub std::path::PathBuf);

impl PinDir {
    pub fn new(tag: &str) -> Self {
        let dir = std::path::PathBuf::from(format!("/sys/fs/bpf/xnf-test-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("making a bpffs folder (bpffs mounted at /sys/fs/bpf, run as root)");
        PinDir(dir)
    }
}

impl Drop for PinDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The route cache's keeper over the maps pinned in a folder, as the
/// daemon runs it (`xnf_lb::cache::keep`), stepped by the test.
pub struct Keeping {
    events: xnf_netns::netlink::Events,
    keeper: xnf_core::route_cache::Keeper<LbProgram>,
}

impl Keeping {
    pub fn start(dir: &std::path::Path, maps: &LbMaps) -> Result<Self> {
        use xnf_core::route_cache::{CacheMaps, Keeper};
        let events = xnf_netns::netlink::Events::subscribe(&xnf_netns::netlink::group::FORWARDING)?;
        let cache = CacheMaps { fib_ctl: &maps.fib_ctl, fib_kgen: &maps.fib_kgen }.to_owned()?;
        let keeper = Keeper::start(LbProgram::load_lease(dir)?, cache, &events)?;
        Ok(Keeping { events, keeper })
    }

    /// What changed since the last call, followed; the lease renewed.
    pub fn follow(&mut self) -> Result<()> {
        while self.events.wait(std::time::Duration::ZERO)? {
            let batch = self.events.drain()?;
            self.keeper.changed(&batch)?;
        }
        self.keeper.renew()
    }
}

/// Filled slots of the route cache pinned in `dir`, over every CPU.
pub fn cache_filled(dir: &std::path::Path) -> Result<usize> {
    let m = libbpf_rs::MapHandle::from_pinned_path(dir.join("fib_cache"))?;
    let mut n = 0;
    for i in 0..m.max_entries() {
        if let Some(v) = m.lookup(&i.to_ne_bytes(), MapFlags::ANY)? {
            n += usize::from(v[..4] != [0; 4]);
        }
    }
    Ok(n)
}
