//! The reference model of the lb: what `lb.bpf.c` must do with a frame, written from its documentation (the header comment
//! of lb.bpf.c, the counters of lb.h, what encap.h says it writes, the service file's rules in config.rs) and not from its
//! code. The frame is read as the kernel reads it (`xnf_testrun::kernel::view`, which the shared parser is fuzzed against
//! on its own); the flow hash is `Flow::hash` (flow.rs, the documented twin of flowhash.h) and a service's table is the
//! control plane's Maglev table (`Table::of`), mapped to backend ids as the apply's `Ids` hand them out.
//!
//! The network is the fuzz test's: every backend sits on a connected subnet of the ingress interface (MTU [`MTU`]) with a
//! permanent neighbour entry, so the route to a backend always leaves by the ingress (XDP_TX) unless the encapsulated
//! packet exceeds the MTU (so no DSR backend is reached through a gateway: `dsr-not-onlink` is the packet table's).
//! The ingress interface's own MAC is [`Model::new`]'s: a VIP's frame sent to any other (unicast, broadcast, multicast)
//! is not the lb's (`not-our-mac`). No lb stage is attached anywhere in that namespace, so a family without an `[encap]` prefix has
//! no outer source at all (config.rs: the fallback is an lb interface's own address).
//!
//! Choices where the documentation leaves room, taken as the program does because they are reasonable:
//! - ICMP of the other family's protocol number (58 in IPv4, 1 in IPv6) to a VIP is "ICMP that is not a too-big error of
//!   a service flow" (icmp-other), not "no ports";
//! - an ICMP error's quoted packet is read in the outer packet's family, and the service is the quoted source's (the outer
//!   destination must be some VIP; it need not be that one);
//! - the DSR frame, too, leaves without its Ethernet trailer (the kernel would trim it before forwarding);
//! - a stale entry, or a SYN's, that the table cannot replace (every backend drained) is left as it was;
//! - a routed ICMP error that does not fit once encapsulated is no routable error (icmp-other, left to the kernel), and
//!   `icmp-routed` counts only errors the lb did something with (sent, or passed for want of an outer source): the
//!   comment in `send`, since the README only says errors are never answered with errors.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use xnf_lb::config::Encap;
use xnf_lb::flow::Flow;
use xnf_lb::program::{BackendCounters, Counter, ServiceCounters};
use xnf_lb::tables::Ids;
use xnf_lb::{Config, Mode, Proto, Service, Table, NO_BACKEND};
use xnf_packet::checksum::{checksum, transport_v6};
use xnf_packet::MacAddr;
use xnf_testrun::kernel::{view, Frag, Ip, Ports, L2, L3, MAX_EXT};
use xnf_testrun::Verdict;

/// The egress MTU toward every backend (the veth's).
pub const MTU: usize = 1500;
/// Bytes of the too-big packet that the ICMP answer quotes (lb.h: XNF_LB_QUOTE4 / XNF_LB_QUOTE6).
pub const QUOTE4: usize = 64;
pub const QUOTE6: usize = 128;
/// TTL / hop limit of every header the lb writes (lb.h: XNF_LB_OUTER_TTL).
pub const OUTER_TTL: u8 = 64;
/// The longest trailer the program can cut (common.h: XNF_MAX_OFF); a longer one is an `error`.
const MAX_TRAILER: usize = 0x3fff;

/// What the program must do with one frame.
#[derive(Clone, Debug)]
pub struct Expect {
    pub verdict: Verdict,
    /// Global counters that grow by one each (`rx` included); every other one stays still.
    pub counters: Vec<Counter>,
    /// The frame as it leaves; `None`: exactly as it came.
    pub frame: Option<Vec<u8>>,
    /// The flow whose connection-table entry the frame looked at, for resynchronising after a mismatch.
    pub flow: Option<Flow>,
}

impl Expect {
    /// Not a service's: the next stage, which in the test is the kernel (an empty stage array).
    fn next(&mut self, why: Counter) {
        self.counters.extend([why, Counter::Continue]);
        self.verdict = Verdict::Pass;
    }

    /// A service's frame left to the kernel, unchanged.
    fn pass(&mut self, why: Counter) {
        self.counters.extend([why, Counter::Pass]);
        self.verdict = Verdict::Pass;
    }

    fn tx(&mut self, frame: Vec<u8>) {
        self.counters.push(Counter::Tx);
        self.verdict = Verdict::Tx;
        self.frame = Some(frame);
    }
}

/// A live backend record: its generation, where it is, the MAC the file gives (dsr).
#[derive(Clone, Copy, Debug)]
struct Record {
    gen: u32,
    addr: IpAddr,
    mac: Option<[u8; 6]>,
}

/// A service of the live file with its id and its table as backend ids.
struct Svc {
    cfg: Service,
    id: u32,
    /// Per table entry, the backend id (or NO_BACKEND).
    entries: Vec<u32>,
}

pub struct Model {
    in_mac: MacAddr,
    neigh: HashMap<IpAddr, MacAddr>,
    services: Vec<Svc>,
    encap: Encap,
    records: HashMap<u32, Record>,
    /// The connection table: flow -> (backend id, generation).
    ct: HashMap<Flow, (u32, u32)>,
    /// Per service id and per backend id, what the frames since [`Model::reset_stats`] must have added.
    pub service_stats: HashMap<u32, ServiceCounters>,
    pub backend_stats: HashMap<u32, BackendCounters>,
}

fn be16(f: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([f[at], f[at + 1]])
}

fn addr(f: &[u8], at: usize, v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&f[at..at + 16]).expect("16 bytes")))
    } else {
        IpAddr::V4(Ipv4Addr::new(f[at], f[at + 1], f[at + 2], f[at + 3]))
    }
}

fn octets(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    }
}

/// Where the L4 header starts: after the IPv4 header and its options, or after the IPv6 extension headers as the kernel
/// walks them. Only meaningful when the view found the protocol; never reads beyond the IP packet.
pub fn l4_offset(f: &[u8], ip: &Ip) -> usize {
    let at = ip.l3_off;
    if !ip.v6 {
        return at + usize::from(f[at] & 0xf) * 4;
    }
    let end = at + ip.ip_len;
    let (mut nh, mut off) = (f[at + 6], at + 40);
    for _ in 0..MAX_EXT {
        if !matches!(nh, 0 | 43 | 44 | 60 | 51) || off + 8 > end {
            break;
        }
        let len = match nh {
            44 => 8,
            51 => (usize::from(f[off + 1]) + 2) * 4,
            _ => (usize::from(f[off + 1]) + 1) * 8,
        };
        nh = f[off];
        off += len;
    }
    off
}

/// DSCP and ECN of the packet: IPv4's TOS byte, IPv6's traffic class.
fn inner_tos(f: &[u8], ip: &Ip) -> u8 {
    let at = ip.l3_off;
    if ip.v6 {
        ((f[at] & 0x0f) << 4) | (f[at + 1] >> 4)
    } else {
        f[at + 1]
    }
}

fn eth(dst: [u8; 6], src: [u8; 6], ethertype: u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(1600);
    out.extend(dst);
    out.extend(src);
    out.extend(ethertype.to_be_bytes());
    out
}

/// An IPv4 header of 20 bytes with its checksum: TOS, total length, id 0, flags/offset, TTL 64, protocol, addresses.
fn ipv4_header(tos: u8, total: usize, frag: u16, proto: u8, src: IpAddr, dst: IpAddr) -> Vec<u8> {
    let mut h = vec![0x45, tos];
    h.extend((total as u16).to_be_bytes());
    h.extend([0, 0]);
    h.extend(frag.to_be_bytes());
    h.extend([OUTER_TTL, proto, 0, 0]);
    h.extend(octets(src));
    h.extend(octets(dst));
    let c = checksum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h
}

/// An IPv6 header: traffic class, flow label, payload length, next header, hop limit 64, addresses.
fn ipv6_header(tc: u8, label: u32, payload: usize, nh: u8, src: IpAddr, dst: IpAddr) -> Vec<u8> {
    let mut h = (0x6000_0000u32 | (u32::from(tc) << 20) | (label & 0xf_ffff)).to_be_bytes().to_vec();
    h.extend((payload as u16).to_be_bytes());
    h.extend([nh, OUTER_TTL]);
    h.extend(octets(src));
    h.extend(octets(dst));
    h
}

impl Model {
    /// A model of an lb whose ingress has MAC `in_mac` and whose backends resolve to `neigh`.
    pub fn new(in_mac: MacAddr, neigh: HashMap<IpAddr, MacAddr>) -> Model {
        Model {
            in_mac,
            neigh,
            services: Vec::new(),
            encap: Encap::default(),
            records: HashMap::new(),
            ct: HashMap::new(),
            service_stats: HashMap::new(),
            backend_stats: HashMap::new(),
        }
    }

    /// The file `config` applied with `ids`: its services, and a live record for each of its backends (drained ones
    /// included: they keep their flows); every other record is free, so entries naming one go stale.
    pub fn set_config(&mut self, config: &Config, ids: &Ids) {
        self.records.clear();
        self.encap = config.encap;
        self.services = config
            .services
            .iter()
            .map(|s| {
                let sid = &ids.services[&s.name];
                for b in &s.backends {
                    let k = sid.backends[&b.address];
                    self.records.insert(k.id, Record { gen: k.gen, addr: b.address, mac: b.mac });
                }
                let table = Table::of(s).expect("a checked service has a table");
                let id_of = |i: u32| if i == NO_BACKEND { NO_BACKEND } else { sid.backends[&table.backends()[i as usize].0].id };
                Svc { cfg: s.clone(), id: sid.id, entries: table.entries().iter().map(|&i| id_of(i)).collect() }
            })
            .collect();
    }

    pub fn reset_stats(&mut self) {
        self.service_stats.clear();
        self.backend_stats.clear();
    }

    pub fn ct_len(&self) -> usize {
        self.ct.len()
    }

    pub fn ct_clear(&mut self) {
        self.ct.clear();
    }

    /// Makes the model's entry for `flow` the program's (after a mismatch, so later frames are judged on their own).
    pub fn set_entry(&mut self, flow: Flow, entry: Option<(u32, u32)>) {
        match entry {
            Some(e) => self.ct.insert(flow, e),
            None => self.ct.remove(&flow),
        };
    }

    /// The record of backend `id` if it is live and, when `gen` is given, of that generation.
    fn live(&self, id: u32, gen: Option<u32>) -> Option<Record> {
        self.records.get(&id).copied().filter(|r| gen.is_none_or(|g| g == r.gen))
    }

    /// Whether the frame was sent to the ingress interface's own MAC (a promiscuous interface sees other hosts' frames).
    fn to_us(&self, f: &[u8]) -> bool {
        f[..6] == self.in_mac.0
    }

    fn is_vip(&self, a: IpAddr) -> bool {
        self.services.iter().any(|s| s.cfg.vip == a)
    }

    /// The service taking (VIP, protocol, port): the port-specific one first, else the VIP's all-ports one.
    fn find(&self, vip: IpAddr, proto: Proto, port: u16) -> Option<usize> {
        let on = |p: Option<u16>| self.services.iter().position(|s| s.cfg.vip == vip && s.cfg.proto == proto && s.cfg.port == p);
        on(Some(port)).or_else(|| on(None))
    }

    /// The backend id of the flow's table entry, if that backend is live.
    fn pick(&self, s: &Svc, hash: u32) -> Option<(u32, Record)> {
        let id = s.entries[(hash % s.cfg.table_size) as usize];
        self.live(id, None).map(|r| (id, r))
    }

    fn count_service(&mut self, id: u32, len: usize, flow: bool, no_backend: bool) {
        let s = self.service_stats.entry(id).or_default();
        s.packets += 1;
        s.bytes += len as u64;
        s.flows += u64::from(flow);
        s.no_backend += u64::from(no_backend);
    }

    fn count_backend(&mut self, id: u32, len: usize) {
        let b = self.backend_stats.entry(id).or_default();
        b.packets += 1;
        b.bytes += len as u64;
    }

    /// The outer source for a backend of family `v6`: the `[encap]` prefix with its host bits from the hash (IPv6: the
    /// host bits of the last 32 bits only, the hash's width).
    fn source(&self, v6: bool, hash: u32) -> Option<IpAddr> {
        if v6 {
            self.encap.source_v6.map(|n| {
                let host = u128::from(n.hostmask()) & 0xffff_ffff;
                IpAddr::V6(Ipv6Addr::from(u128::from(n.network()) | (u128::from(hash) & host)))
            })
        } else {
            self.encap.source_v4.map(|n| IpAddr::V4(Ipv4Addr::from(u32::from(n.network()) | (hash & u32::from(n.hostmask())))))
        }
    }

    /// What the program must do with `f`; the model's connection table and statistics follow.
    pub fn decide(&mut self, f: &[u8]) -> Expect {
        let mut e = Expect { verdict: Verdict::Pass, counters: vec![Counter::Rx], frame: None, flow: None };
        let v = view(f);
        let ip = match (v.l2, &v.l3) {
            (L2::Stacked, _) => {
                e.next(Counter::Qinq);
                return e;
            }
            (L2::Truncated, _) | (_, L3::Malformed) => {
                e.next(Counter::Malformed);
                return e;
            }
            (_, L3::NonIp(_)) => {
                e.next(Counter::NonIp);
                return e;
            }
            (_, L3::Ip(ip)) => ip,
        };
        let tagged = matches!(v.l2, L2::Tagged { .. });
        let l4 = l4_offset(f, ip);
        match ip.ports {
            Ports::Known(sport, dport) if !tagged && ip.frag == Frag::None && !ip.options && !ip.hbh => self.service_packet(f, ip, l4, (sport, dport), &mut e),
            _ => self.special(f, ip, tagged, l4, &mut e),
        }
        e
    }

    /// A frame that shows no ports or that the fast path leaves alone: the kernel's if it is for a VIP (with the first
    /// reason that applies), the next stage's otherwise; a too-big error of a service flow goes to the flow's backend.
    fn special(&mut self, f: &[u8], ip: &Ip, tagged: bool, l4: usize, e: &mut Expect) {
        if !self.is_vip(ip.dst) {
            return e.next(Counter::NotService);
        }
        if !self.to_us(f) {
            return e.next(Counter::NotOurMac);
        }
        let why = if tagged {
            Counter::Vlan
        } else if ip.frag != Frag::None {
            Counter::Fragment
        } else if ip.options {
            Counter::IpOptions
        } else if ip.hbh {
            Counter::Ipv6Hbh
        } else if matches!(ip.proto, Some(1 | 58)) {
            if self.icmp_error(f, ip, l4, e) {
                return;
            }
            Counter::IcmpOther
        } else {
            Counter::NoPorts
        };
        e.pass(why)
    }

    /// An ICMP frag-needed (IPv4: type 3 code 4) or packet-too-big (IPv6: type 2 code 0) quoting a packet from a VIP to a
    /// client: sent to the backend of the flow client -> VIP, by its connection-table entry if live, else by the table,
    /// never making an entry. False when it is no such error (or no backend takes the flow).
    fn icmp_error(&mut self, f: &[u8], ip: &Ip, l4: usize, e: &mut Expect) -> bool {
        let end = ip.l3_off + ip.ip_len;
        let (hdr, proto, kind) = if ip.v6 { (40, 58, (2, 0)) } else { (20, 1, (3, 4)) };
        // The error's 8 bytes, the quoted IP header and the quoted ports, all inside the IP packet.
        if ip.proto != Some(proto) || l4 + 8 + hdr + 4 > end || (f[l4], f[l4 + 1]) != kind {
            return false;
        }
        let q = l4 + 8;
        // A quoted IPv4 header with options moves the ports; a later fragment has none.
        if !ip.v6 && (f[q] != 0x45 || be16(f, q + 6) & 0x1fff != 0) {
            return false;
        }
        let (qproto, from, to) = if ip.v6 { (f[q + 6], q + 8, q + 24) } else { (f[q + 9], q + 12, q + 16) };
        let proto = match qproto {
            6 => Proto::Tcp,
            17 => Proto::Udp,
            _ => return false,
        };
        let (vport, cport) = (be16(f, q + hdr), be16(f, q + hdr + 2));
        let flow = Flow { src: addr(f, to, ip.v6), dst: addr(f, from, ip.v6), proto, sport: cport, dport: vport };
        let Some(si) = self.find(flow.dst, proto, vport) else { return false };
        let hash = flow.hash(self.services[si].cfg.hash);
        let owner = self.ct.get(&flow).and_then(|&(id, gen)| self.live(id, Some(gen)).map(|r| (id, r)));
        let Some((_, b)) = owner.or_else(|| self.pick(&self.services[si], hash)) else { return false };
        e.flow = Some(flow);
        if !self.send(f, ip, (si, b, hash), true, e) {
            return false;
        }
        e.counters.push(Counter::IcmpRouted);
        true
    }

    /// A UDP or TCP packet with ports, untagged, unfragmented, without options: its service's, or the next stage's.
    fn service_packet(&mut self, f: &[u8], ip: &Ip, l4: usize, (sport, dport): (u16, u16), e: &mut Expect) {
        let proto = if ip.proto == Some(6) { Proto::Tcp } else { Proto::Udp };
        let Some(si) = self.find(ip.dst, proto, dport) else { return e.next(Counter::NotService) };
        if !self.to_us(f) {
            return e.next(Counter::NotOurMac);
        }
        let flow = Flow { src: ip.src, dst: ip.dst, proto, sport, dport };
        e.flow = Some(flow);
        let (sid, hash) = (self.services[si].id, flow.hash(self.services[si].cfg.hash));
        // A SYN without ACK opens a connection, whatever an old entry says; its flags byte must lie inside the IP packet.
        let end = ip.l3_off + ip.ip_len;
        let syn = proto == Proto::Tcp && l4 + 14 <= end && f[l4 + 13] & 0x12 == 0x02;
        let len = f.len();
        let kept = match self.ct.get(&flow).copied() {
            Some((id, gen)) if !syn => match self.live(id, Some(gen)) {
                Some(r) => Some((id, r)),
                None => {
                    e.counters.push(Counter::CtStale);
                    None
                }
            },
            Some(_) => {
                e.counters.push(Counter::CtSyn);
                None
            }
            None => {
                e.counters.push(Counter::CtMiss);
                None
            }
        };
        let (id, b) = match kept {
            Some(k) => {
                e.counters.push(Counter::CtHit);
                self.count_service(sid, len, false, false);
                k
            }
            None => {
                let picked = self.pick(&self.services[si], hash);
                self.count_service(sid, len, true, picked.is_none());
                let Some((id, b)) = picked else {
                    e.counters.extend([Counter::NoBackend, Counter::Drop]);
                    e.verdict = Verdict::Drop;
                    return;
                };
                self.ct.insert(flow, (id, b.gen));
                (id, b)
            }
        };
        self.count_backend(id, len);
        self.send(f, ip, (si, b, hash), false, e);
    }

    /// Sends the IP packet of `f` to backend `b` of service `si`: encapsulated (ipip, gue) or with new MACs (dsr), out of
    /// the ingress; answered with an ICMP too-big error when the encapsulated packet exceeds the MTU (dropped instead when
    /// it is IPv4 without DF), unless the packet is
    /// itself an ICMP error (never an error about an error, RFC 1122 3.2.2, RFC 4443 2.4(e)): then false, and the caller
    /// leaves it to the kernel.
    fn send(&self, f: &[u8], ip: &Ip, (si, b, hash): (usize, Record, u32), icmp_error: bool, e: &mut Expect) -> bool {
        let mode = self.services[si].cfg.mode;
        let v6 = b.addr.is_ipv6();
        let outer = if v6 { 40 } else { 20 };
        let extra = match mode {
            Mode::Dsr => 0,
            Mode::Ipip => outer,
            Mode::Gue { .. } => outer + 8,
        };
        let src = match mode {
            Mode::Dsr => None,
            _ => match self.source(v6, hash) {
                Some(a) => Some(a),
                None => {
                    e.pass(Counter::NoSource);
                    return true;
                }
            },
        };
        if ip.ip_len + extra > MTU {
            if icmp_error {
                return false;
            }
            // IPv4 without DF: no frag-needed (RFC 1191 is for DF packets), and XDP cannot fragment: dropped.
            if !ip.v6 && f[ip.l3_off + 6] & 0x40 == 0 {
                e.counters.extend([Counter::TooBig, Counter::Drop]);
                e.verdict = Verdict::Drop;
                return true;
            }
            self.too_big(f, ip, MTU - extra, e);
            return true;
        }
        let end = ip.l3_off + ip.ip_len;
        if f.len() - end > MAX_TRAILER {
            e.pass(Counter::Error);
            return true;
        }
        let inner = &f[ip.l3_off..end];
        let dmac = b.mac.unwrap_or_else(|| self.neigh.get(&b.addr).unwrap_or_else(|| panic!("no neighbour for backend {}", b.addr)).0);
        let smac = self.in_mac.0;
        // DSR: the frame as it came, to the backend's MAC.
        let Some(src) = src else {
            let mut out = eth(dmac, smac, if ip.v6 { 0x86dd } else { 0x0800 });
            out.extend(inner);
            e.tx(out);
            return true;
        };
        let mut out = eth(dmac, smac, if v6 { 0x86dd } else { 0x0800 });
        let proto = match mode {
            Mode::Gue { .. } => 17,
            _ if v6 => 41,
            _ => 4,
        };
        let tos = inner_tos(f, ip);
        if v6 {
            out.extend(ipv6_header(tos, hash, inner.len() + extra - 40, proto, src, b.addr));
        } else {
            // DF: the decap cannot reassemble, so a packet too big on the way must be answered, not fragmented.
            out.extend(ipv4_header(tos, inner.len() + extra, 0x4000, proto, src, b.addr));
        }
        if let Mode::Gue { port } = mode {
            out.extend((0xc000 | (hash & 0x3fff) as u16).to_be_bytes());
            out.extend(port.to_be_bytes());
            out.extend(((inner.len() + 8) as u16).to_be_bytes());
            out.extend([0, 0]);
        }
        out.extend(inner);
        e.tx(out);
        true
    }

    /// The answer to a packet that would exceed the MTU once encapsulated: ICMP frag-needed (IPv4) or packet-too-big
    /// (IPv6) from the VIP to the client, back to the MAC it came from, with the room left for the packet (at least the
    /// family's minimum MTU) and the packet's first bytes.
    fn too_big(&self, f: &[u8], ip: &Ip, mtu: usize, e: &mut Expect) {
        let quote_len = if ip.v6 { QUOTE6 } else { QUOTE4 };
        if ip.ip_len < quote_len {
            return e.pass(Counter::Error);
        }
        let quote = &f[ip.l3_off..ip.l3_off + quote_len];
        let (to_mac, from_mac) = (f[6..12].try_into().expect("6 bytes"), f[..6].try_into().expect("6 bytes"));
        let mut out;
        if ip.v6 {
            let mut icmp = vec![2, 0, 0, 0];
            icmp.extend((mtu.max(1280) as u32).to_be_bytes());
            icmp.extend(quote);
            let (IpAddr::V6(vip), IpAddr::V6(client)) = (ip.dst, ip.src) else { unreachable!("an IPv6 packet") };
            let c = transport_v6(vip, client, 58, &icmp);
            icmp[2..4].copy_from_slice(&c.to_be_bytes());
            out = eth(to_mac, from_mac, 0x86dd);
            out.extend(ipv6_header(0, 0, icmp.len(), 58, ip.dst, ip.src));
            out.extend(icmp);
        } else {
            let mut icmp = vec![3, 4, 0, 0, 0, 0];
            icmp.extend((mtu.max(68) as u16).to_be_bytes());
            icmp.extend(quote);
            let c = checksum(&icmp);
            icmp[2..4].copy_from_slice(&c.to_be_bytes());
            out = eth(to_mac, from_mac, 0x0800);
            out.extend(ipv4_header(0, 20 + icmp.len(), 0, 1, ip.dst, ip.src));
            out.extend(icmp);
        }
        e.counters.push(Counter::IcmpSent);
        e.tx(out)
    }
}
