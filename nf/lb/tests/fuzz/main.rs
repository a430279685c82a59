//! Differential fuzzing of the lb (`lb.bpf.c`) against its reference model (`model.rs`): a million frames by default,
//! valid and mutated (`xnf_testrun::frames`) aimed at the VIPs, clients, backends and ports of a fixed service file, plus
//! frames of the file's own flows (TCP with every kind of flags, sizes up to beyond the MTU) and ICMP too-big errors
//! quoting a VIP's packet to a client, which the generic generator almost never makes valid. Each frame must get the
//! model's verdict and the model's bytes (the encapsulated packet or the ICMP answer built by the model), and move exactly
//! the model's global counters, every other one staying still.
//!
//! Every [`EPOCH`] frames the service file changes (backends removed, drained, reweighted or added, services drained or
//! removed, table sizes, GUE ports and outer-source prefixes changed), applied with the control plane's own
//! `allocate`/`converge` as `xnf lb apply` would; the connection table carries over, so entries of removed backends go
//! stale. At the end of each file every service and backend id ever used must have moved by exactly the model's totals.
//!
//! Frames come from their own seeds and a file from the run's seed and its number, but the connection table is state:
//! a failure names the run's first frame, from which `XNF_FUZZ_FIRST`/`XNF_FUZZ_FRAMES` replay it exactly.
//!
//! The lb runs in a namespace of its own where every backend sits on the ingress veth's subnets (MTU 1500) with a
//! permanent neighbour entry: the route to any backend leaves by the ingress (XDP_TX), and large packets take the
//! too-big path (IPv4 with and without DF). Frames to other MACs than the ingress's come from the generic generator.
//! Counters that this network cannot reach (redirect, no-route, fwd-disabled, no-neigh, not-managed, dsr-not-onlink,
//! error) are the packet table's (tests/packets.rs); here they must stay still.

mod model;

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write;
use std::net::IpAddr;

use fastrand::Rng;
use libbpf_rs::MapCore;
use model::{l4_offset, Model};
use xnf_lb::program::{raw_flow, BackendCounters, Counter, Counters, LbMaps, LbProgram, ServiceCounters, CT_ENTRIES};
use xnf_lb::tables::{allocate, converge, file_sources, Ids};
use xnf_lb::{Config, Table};
use xnf_netns::{ifname, veth, Netns};
use xnf_packet::{MacAddr, PacketBuilder, TcpFlags};
use xnf_testrun::frames::{frame, hex, World};
use xnf_testrun::fuzz::{Fuzz, DEFAULT_FRAMES};
use xnf_testrun::kernel::{view, Ports};
use xnf_testrun::{run_xdp, XdpContext};

/// Frames under one service file. An apply swaps a table per service (an RCU grace period each) and walks every backend
/// record: a few thousand frames keep changes frequent without the applies taking the run's time.
const EPOCH: u64 = 5000;
/// The ingress interface's MAC.
const IN_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0xfe, 0x01]);

/// A backend of the file: address, weight, the MAC the file gives (dsr).
type B = (&'static str, u16, Option<&'static str>);

/// A service of the file: its fields, its backends and a spare backend that changes of the file may add.
struct Spec {
    name: &'static str,
    vip: &'static str,
    proto: &'static str,
    port: Option<u16>,
    /// Table size and the prime a change may switch to.
    sizes: (u32, u32),
    mode: &'static str,
    gue_port: Option<u16>,
    hash3: bool,
    drain: bool,
    backends: &'static [B],
    spare: &'static str,
}

/// `name`, `vip`, `proto`, `port` and `mode` of a service; the rest as the common case has it.
const fn spec(fields: (&'static str, &'static str, &'static str, Option<u16>, &'static str), backends: &'static [B], spare: &'static str) -> Spec {
    let (name, vip, proto, port, mode) = fields;
    Spec { name, vip, proto, port, sizes: (251, 257), mode, gue_port: None, hash3: false, drain: false, backends, spare }
}

/// The file: every mode and family mix, precedence of a port over all ports (on both families), a 3-tuple UDP service,
/// a drained one, weights 0, 1 and 3, and DSR backends with and without a MAC in the file.
const SPECS: &[Spec] = &[
    spec(("web4", "198.18.100.1", "tcp", Some(80), "ipip"), &[("198.18.0.11", 1, None), ("198.18.0.12", 3, None), ("198.18.0.13", 0, None)], "198.18.0.14"),
    Spec {
        sizes: (1009, 1013),
        ..spec(
            ("all6", "2001:db8:100::1", "udp", None, "ipip"),
            &[("2001:db8::11", 1, None), ("2001:db8::12", 1, None), ("2001:db8::13", 3, None)],
            "2001:db8::14",
        )
    },
    spec(("dns6", "2001:db8:100::1", "udp", Some(53), "ipip"), &[("2001:db8::15", 1, None)], "2001:db8::16"),
    spec(("any4", "198.18.100.2", "tcp", None, "ipip"), &[("198.18.0.21", 1, None), ("198.18.0.22", 1, None)], "198.18.0.25"),
    spec(("ssh4", "198.18.100.2", "tcp", Some(22), "ipip"), &[("198.18.0.23", 1, None), ("198.18.0.24", 3, None)], "198.18.0.26"),
    Spec {
        gue_port: Some(7000),
        ..spec(
            ("gue46", "198.18.100.3", "tcp", Some(443), "gue"),
            &[("2001:db8::31", 1, None), ("2001:db8::32", 3, None), ("2001:db8::33", 0, None)],
            "2001:db8::34",
        )
    },
    Spec {
        sizes: (1009, 1013),
        ..spec(
            ("gue64", "2001:db8:100::3", "udp", Some(53), "gue"),
            &[("198.18.0.41", 1, None), ("198.18.0.42", 1, None), ("198.18.0.43", 1, None)],
            "198.18.0.44",
        )
    },
    spec(
        ("dsr4", "198.18.100.4", "tcp", None, "dsr"),
        &[("198.18.0.51", 1, Some("02:00:00:00:aa:51")), ("198.18.0.52", 1, None), ("198.18.0.53", 0, None)],
        "198.18.0.54",
    ),
    spec(("dsr6", "2001:db8:100::4", "udp", Some(80), "dsr"), &[("2001:db8::51", 1, Some("02:00:00:00:bb:51")), ("2001:db8::52", 3, None)], "2001:db8::54"),
    Spec {
        hash3: true,
        ..spec(("udp3", "198.18.100.5", "udp", None, "ipip"), &[("198.18.0.61", 1, None), ("198.18.0.62", 1, None), ("198.18.0.63", 3, None)], "198.18.0.64")
    },
    Spec {
        drain: true,
        ..spec(("drained", "2001:db8:100::6", "tcp", Some(80), "ipip"), &[("2001:db8::71", 1, None), ("2001:db8::72", 3, None)], "2001:db8::73")
    },
];

const CLIENTS: [&str; 6] = ["198.18.50.1", "198.18.50.2", "198.18.51.7", "2001:db8:50::1", "2001:db8:50::2", "2001:db8:51::7"];
/// Routers on the way back to clients, which send the too-big errors.
const ROUTERS: [&str; 2] = ["198.18.60.1", "2001:db8:60::1"];
const CLIENT_PORTS: [u16; 4] = [1024, 40000, 40001, 55555];
const VIP_PORTS: [u16; 6] = [22, 53, 80, 443, 8080, 6080];
/// TCP flags of the file's flows: SYNs, segments of a connection, SYN-ACKs (not a SYN), nothing.
const FLAGS: [u8; 9] = [0x02, 0x02, 0x10, 0x10, 0x18, 0x11, 0x04, 0x12, 0x00];

/// Every address a backend ever has: the specs' backends and spares.
fn backend_addrs() -> impl Iterator<Item = IpAddr> {
    SPECS.iter().flat_map(|s| s.backends.iter().map(|b| b.0).chain([s.spare])).map(|a| a.parse().expect("an address"))
}

/// Each backend's neighbour MAC, distinct per address and from the MACs the file gives.
fn neigh_mac(a: IpAddr) -> MacAddr {
    match a {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            MacAddr([0x02, 0x44, 0, o[1], o[2], o[3]])
        }
        IpAddr::V6(v6) => {
            let o = v6.octets();
            MacAddr([0x02, 0x66, 0, o[13], o[14], o[15]])
        }
    }
}

/// Service file number `epoch`: the specs as they are for the first, changed at random (from the run's seed and the
/// number) for the others, always a file `xnf lb apply` accepts.
fn service_file(seed: u64, epoch: u64) -> String {
    let mut rng = Rng::with_seed(seed ^ (epoch + 1).wrapping_mul(0xa076_1d64_78bd_642f));
    let change = |rng: &mut Rng, one_in: u8| epoch > 0 && rng.u8(..one_in) == 0;
    let mut t = String::from("[encap]\n");
    if !change(&mut rng, 10) {
        writeln!(t, "source_v4 = \"198.18.200.0/{}\"", if change(&mut rng, 4) { 28 } else { 24 }).unwrap();
    }
    if !change(&mut rng, 10) {
        writeln!(t, "source_v6 = \"2001:db8:200::/{}\"", if change(&mut rng, 4) { 112 } else { 64 }).unwrap();
    }
    for s in SPECS {
        if change(&mut rng, 12) {
            continue;
        }
        let size = if change(&mut rng, 10) { s.sizes.1 } else { s.sizes.0 };
        write!(t, "\n[[service]]\nname = \"{}\"\nvip = \"{}\"\nproto = \"{}\"\ntable_size = {size}\nmode = \"{}\"\n", s.name, s.vip, s.proto, s.mode).unwrap();
        if let Some(p) = s.port {
            writeln!(t, "port = {p}").unwrap();
        }
        if s.hash3 {
            t.push_str("hash = \"3-tuple\"\n");
        }
        let gue_port = if change(&mut rng, 10) { [None, Some(6081)][rng.usize(..2)] } else { s.gue_port };
        if let (Some(p), "gue") = (gue_port, s.mode) {
            writeln!(t, "gue_port = {p}").unwrap();
        }
        let drain = s.drain != change(&mut rng, 8);
        if drain {
            t.push_str("drain = true\n");
        }
        let mut backends: Vec<B> = s.backends.iter().filter(|_| !change(&mut rng, 10)).copied().collect();
        for b in backends.iter_mut() {
            if change(&mut rng, 6) {
                b.1 = [0, 1, 3][rng.usize(..3)];
            }
        }
        if change(&mut rng, 5) {
            backends.push((s.spare, [1, 3][rng.usize(..2)], None));
        }
        if backends.is_empty() {
            backends.push(s.backends[0]);
        }
        if !drain && backends.iter().all(|b| b.1 == 0) {
            backends[0].1 = 1;
        }
        for (address, weight, mac) in backends {
            write!(t, "\n[[service.backend]]\naddress = \"{address}\"\nweight = {weight}\n").unwrap();
            if let Some(m) = mac {
                writeln!(t, "mac = \"{m}\"").unwrap();
            }
        }
    }
    t
}

/// The namespace: the ingress veth with both families' subnets, every backend's neighbour entry, forwarding on.
struct Net {
    ns: Netns,
    _peer: Netns,
    ifindex: u32,
    neigh: HashMap<IpAddr, MacAddr>,
}

impl Net {
    fn new() -> anyhow::Result<Net> {
        let ns = Netns::new("lb-fuzz")?;
        let peer = Netns::new("lb-fuzz-peer")?;
        let (dev, peer_dev) = (ifname("in"), ifname("p"));
        veth(&ns, &dev, &peer, &peer_dev, None)?;
        let addrs = ["198.18.0.2/24", "2001:db8::2/64 nodad"].map(|a| format!("addr add {a} dev {dev}"));
        ns.ip_batch(&[[format!("link set dev {dev} address {IN_MAC} mtu 1500")].as_slice(), &addrs].concat())?;
        ns.link_up(&dev)?;
        peer.link_up(&peer_dev)?;
        let neigh: HashMap<IpAddr, MacAddr> = backend_addrs().map(|a| (a, neigh_mac(a))).collect();
        let lines: Vec<String> = neigh.iter().map(|(a, m)| format!("neigh replace {a} lladdr {m} nud permanent dev {dev}")).collect();
        ns.ip_batch(&lines)?;
        ns.enable_forwarding()?;
        anyhow::ensure!(ns.mac(&dev)? == IN_MAC, "the ingress MAC did not take");
        Ok(Net { ifindex: ns.ifindex(&dev)?, ns, _peer: peer, neigh })
    }
}

/// Where generated frames aim: the VIPs (twice as often as the rest), the clients, some backends, the services' ports.
fn world() -> World {
    let vips = SPECS.iter().flat_map(|s| [s.vip, s.vip]);
    let others = CLIENTS.iter().copied().chain(SPECS.iter().map(|s| s.backends[0].0));
    let addrs = vips.chain(others).map(|a| a.parse().expect("an address")).collect();
    World { macs: vec![IN_MAC], addrs, vids: vec![0, 7], ports: vec![22, 53, 80, 443, 1024, 40000] }
}

fn client_mac(rng: &mut Rng) -> MacAddr {
    MacAddr([0x02, 0xcc, 0, 0, 0, rng.u8(..4)])
}

/// One to two changes of a byte, a bit or the length: enough to break one check the program makes.
fn mutate(rng: &mut Rng, f: &mut Vec<u8>) {
    for _ in 0..rng.usize(1..3) {
        let head = f.len().min(120);
        if head <= 14 {
            return;
        }
        match rng.u8(..4) {
            0 | 1 => f[rng.usize(14..head)] ^= 1 << rng.u8(..8),
            2 => f[rng.usize(14..head)] = rng.u8(..),
            _ => f.truncate(rng.usize(14..=f.len())),
        }
    }
}

/// Other TCP flags than the generator's SYN, written in place (the lb checks no TCP checksum).
fn vary_tcp(rng: &mut Rng, f: &mut [u8]) {
    let v = view(f);
    let Some(ip) = v.ip().filter(|ip| ip.proto == Some(6) && matches!(ip.ports, Ports::Known(..))) else { return };
    let at = l4_offset(f, ip) + 13;
    if at < ip.l3_off + ip.ip_len && rng.u8(..10) < 6 {
        f[at] = FLAGS[rng.usize(..FLAGS.len())];
    }
}

/// A flow of the file's: a client of the VIP's family and one of few ports, so that flows come back (hits, SYNs over
/// entries, stale entries); the VIP's port mostly the service's.
fn file_flow(rng: &mut Rng) -> (&'static Spec, IpAddr, IpAddr, u16, u16) {
    let s = &SPECS[rng.usize(..SPECS.len())];
    let vip: IpAddr = s.vip.parse().expect("an address");
    let clients: Vec<IpAddr> = CLIENTS.iter().map(|c| c.parse().expect("an address")).filter(|c: &IpAddr| c.is_ipv6() == vip.is_ipv6()).collect();
    let client = clients[rng.usize(..clients.len())];
    let vport = s.port.filter(|_| rng.u8(..10) > 0).unwrap_or_else(|| VIP_PORTS[rng.usize(..VIP_PORTS.len())]);
    (s, vip, client, CLIENT_PORTS[rng.usize(..CLIENT_PORTS.len())], vport)
}

fn random_bytes(rng: &mut Rng, n: usize) -> Vec<u8> {
    let mut p = vec![0u8; n];
    rng.fill(&mut p);
    p
}

/// A packet of a file's flow: any TCP flags, DSCP/ECN and flow label, a size up to beyond the MTU once encapsulated (and
/// beyond it as it is, for DSR), sometimes a trailer, sometimes mutated.
fn flow_frame(rng: &mut Rng) -> Vec<u8> {
    let (s, vip, client, cport, vport) = file_flow(rng);
    let b = PacketBuilder::ethernet(client_mac(rng), IN_MAC).ip(client, vip).dscp(rng.u8(..64)).ecn(rng.u8(..4));
    let b = if vip.is_ipv6() { b.flow_label(rng.u32(..1 << 20)) } else { b.dont_frag(rng.bool()).ident(u32::from(rng.u16(..))) };
    let b = if s.proto == "tcp" { b.tcp(cport, vport, TcpFlags(FLAGS[rng.usize(..FLAGS.len())])).seq(rng.u32(..)) } else { b.udp(cport, vport) };
    let len = match rng.u8(..10) {
        0..=5 => rng.usize(..64),
        6 | 7 => rng.usize(64..1380),
        _ => rng.usize(1380..1500),
    };
    let mut f = b.payload(&random_bytes(rng, len)).build();
    if rng.u8(..10) == 0 {
        let n = rng.usize(1..40);
        f.extend(random_bytes(rng, n));
    }
    if rng.u8(..10) == 0 {
        mutate(rng, &mut f);
    }
    f
}

/// An ICMP frag-needed / packet-too-big to a VIP quoting a packet the VIP's backend sent to a client of a file's flow:
/// mostly whole and well-formed, sometimes another type, a short quote, a large one (so that the error is itself too big
/// to encapsulate), another VIP as destination, or mutated.
fn icmp_frame(rng: &mut Rng) -> Vec<u8> {
    let (s, vip, client, cport, vport) = file_flow(rng);
    let v6 = vip.is_ipv6();
    let q = PacketBuilder::ethernet(IN_MAC, IN_MAC).ip(vip, client);
    let q = if v6 { q } else { q.dont_frag(rng.bool()) };
    let q = if s.proto == "tcp" { q.tcp(vport, cport, TcpFlags::ACK) } else { q.udp(vport, cport) };
    let n = rng.usize(..64);
    let mut quote = q.payload(&random_bytes(rng, n)).build().split_off(14);
    match rng.u8(..20) {
        0..=1 => quote.truncate(rng.usize(..quote.len())),
        2 => {
            let n = rng.usize(1300..1460);
            quote.extend(random_bytes(rng, n));
        }
        _ => {}
    }
    let dst = if rng.u8(..10) == 0 { SPECS[rng.usize(..SPECS.len())].vip.parse().expect("an address") } else { vip };
    let src: IpAddr = if rng.bool() { client } else { ROUTERS[usize::from(v6)].parse().expect("an address") };
    let (kind, other) = if v6 { ((2, 0), [(1, 4), (2, 1), (3, 0), (128, 0)]) } else { ((3, 4), [(3, 3), (3, 1), (11, 0), (8, 0)]) };
    let (t, c) = if rng.u8(..10) == 0 { other[rng.usize(..4)] } else { kind };
    let mtu = [1280u32, 1400, 1480, 576][rng.usize(..4)];
    let b = PacketBuilder::ethernet(client_mac(rng), IN_MAC);
    let mut f = if dst.is_ipv6() != v6 {
        // Another family's VIP: the quote is then read in the wrong family.
        b.ip(dst, dst).protocol(xnf_packet::IpProtocol(if dst.is_ipv6() { 58 } else { 1 })).payload(&quote).build()
    } else if v6 {
        b.ip(src, dst).icmpv6(t, c, mtu.to_be_bytes()).payload(&quote).build()
    } else {
        b.ip(src, dst).icmpv4(t, c, [0, 0, (mtu >> 8) as u8, mtu as u8]).payload(&quote).build()
    };
    if rng.u8(..8) == 0 {
        mutate(rng, &mut f);
    }
    f
}

/// The input of one check: mostly the generic generator's frames, then the file's flows and too-big errors.
fn input(rng: &mut Rng, world: &World) -> Vec<u8> {
    match rng.u8(..100) {
        0..=74 => {
            let mut f = frame(rng, world);
            vary_tcp(rng, &mut f);
            f
        }
        75..=91 => flow_frame(rng),
        _ => icmp_frame(rng),
    }
}

/// The live service file and the statistics its frames started from.
struct Epoch {
    n: u64,
    text: String,
    shown: bool,
    services: HashMap<u32, ServiceCounters>,
    backends: HashMap<u32, BackendCounters>,
}

/// The fuzz run's state across frames.
struct Run {
    seed: u64,
    first: u64,
    ifindex: u32,
    prog: LbProgram,
    maps: LbMaps,
    model: Model,
    ids: Ids,
    epoch: Option<Epoch>,
    /// The program's global counters after the last frame.
    counters: Counters,
    /// Every service and backend id ever handed out: none may move unless the model says so.
    service_ids: BTreeSet<u32>,
    backend_ids: BTreeSet<u32>,
    /// Frames that moved each counter.
    seen: HashMap<Counter, u64>,
    /// Connection-table entries after which both tables are emptied: the per-CPU LRU never evicts below it.
    ct_limit: usize,
    flushes: u64,
}

fn sub_service(a: ServiceCounters, b: ServiceCounters) -> ServiceCounters {
    ServiceCounters { packets: a.packets - b.packets, bytes: a.bytes - b.bytes, flows: a.flows - b.flows, no_backend: a.no_backend - b.no_backend }
}

fn sub_backend(a: BackendCounters, b: BackendCounters) -> BackendCounters {
    BackendCounters { packets: a.packets - b.packets, bytes: a.bytes - b.bytes }
}

fn show_counters(c: &[Counter]) -> String {
    let mut names: Vec<&str> = c.iter().map(|c| c.name()).collect();
    names.sort_unstable();
    names.join(" ")
}

impl Run {
    fn new(seed: u64, first: u64, net: &Net) -> Run {
        let prog = LbProgram::load(None, None).expect("the lb loads");
        let maps = prog.maps().expect("the lb's maps");
        // As `xnf lb attach` writes it: the frames the lb takes are those sent to this MAC.
        maps.set_own_mac(net.ifindex, IN_MAC.0).expect("writing the ingress MAC");
        let counters = maps.counters().expect("the lb's counters");
        // Per-CPU LRU lists split the entries over the possible CPUs and the thread is pinned, so one CPU's share holds
        // every entry: half of it, less a file's worth of new flows, never meets an eviction the model cannot know.
        let cpus = libbpf_rs::num_possible_cpus().expect("possible CPUs");
        let ct_limit = (CT_ENTRIES as usize / cpus / 2).saturating_sub(EPOCH as usize);
        let model = Model::new(IN_MAC, net.neigh.clone());
        Run {
            seed,
            first,
            ifindex: net.ifindex,
            prog,
            maps,
            model,
            ids: Ids::default(),
            epoch: None,
            counters,
            service_ids: BTreeSet::new(),
            backend_ids: BTreeSet::new(),
            seen: HashMap::new(),
            ct_limit,
            flushes: 0,
        }
    }

    /// Applies service file `n` as `xnf lb apply` does, and has the model follow.
    fn open(&mut self, n: u64) {
        let text = service_file(self.seed, n);
        let (config, _) = Config::parse(&text, "fuzz").unwrap_or_else(|e| panic!("the fuzzer wrote a bad service file: {e:#}\n{text}"));
        let tables: Vec<Table> = config.services.iter().map(|s| Table::of(s).expect("a table")).collect();
        self.ids = allocate(&self.ids, &config).expect("ids");
        converge(&self.maps, &config, &tables, &self.ids, &file_sources(&config.encap)).expect("the apply converges");
        self.model.set_config(&config, &self.ids);
        for s in self.ids.services.values() {
            self.service_ids.insert(s.id);
            self.backend_ids.extend(s.backends.values().map(|b| b.id));
        }
        if self.model.ct_len() > self.ct_limit {
            let keys: Vec<Vec<u8>> = self.maps.conntrack.keys().collect();
            for k in keys {
                self.maps.conntrack.delete(&k).expect("deleting a connection-table entry");
            }
            self.model.ct_clear();
            self.flushes += 1;
        }
        let (services, backends) = self.stats();
        self.epoch = Some(Epoch { n, text, shown: false, services, backends });
        self.model.reset_stats();
    }

    /// The program's statistics of every id ever handed out.
    fn stats(&self) -> (HashMap<u32, ServiceCounters>, HashMap<u32, BackendCounters>) {
        let s = self.service_ids.iter().map(|&id| (id, self.maps.service_counters(id).expect("service counters"))).collect();
        let b = self.backend_ids.iter().map(|&id| (id, self.maps.backend_counters(id).expect("backend counters"))).collect();
        (s, b)
    }

    /// The service and backend statistics the live file's frames (up to frame `i`, excluded) moved, against the model's.
    fn close(&mut self, i: u64) -> Vec<String> {
        let Some(epoch) = self.epoch.take() else { return vec![] };
        let (services, backends) = self.stats();
        let mut wrong = Vec::new();
        for (id, now) in services {
            let got = sub_service(now, epoch.services.get(&id).copied().unwrap_or_default());
            let want = self.model.service_stats.get(&id).copied().unwrap_or_default();
            if got != want {
                wrong.push(format!("service {id}: {got:?}, the model says {want:?}"));
            }
        }
        for (id, now) in backends {
            let got = sub_backend(now, epoch.backends.get(&id).copied().unwrap_or_default());
            let want = self.model.backend_stats.get(&id).copied().unwrap_or_default();
            if got != want {
                wrong.push(format!("backend {id}: {got:?}, the model says {want:?}"));
            }
        }
        if wrong.is_empty() {
            return wrong;
        }
        let replay = format!("XNF_FUZZ_SEED={} XNF_FUZZ_FIRST={} XNF_FUZZ_FRAMES={} replays the run up to its end", self.seed, self.first, i - self.first);
        let (n, text, wrong) = (epoch.n, epoch.text, wrong.join("\n    "));
        vec![format!(
            "at the end of service file {n} (frames {}..{i}), statistics differ ({replay}):\n    {wrong}\n--- service file {n} ---\n{text}---",
            n * EPOCH
        )]
    }

    /// Frame `i`: what differs from the model.
    fn check(&mut self, i: u64, input: &[u8]) -> Vec<String> {
        let mut problems = Vec::new();
        let n = i / EPOCH;
        if self.epoch.as_ref().is_none_or(|e| e.n != n) {
            problems.extend(self.close(i));
            self.open(n);
        }
        let want = self.model.decide(input);
        for c in &want.counters[1..] {
            *self.seen.entry(*c).or_default() += 1;
        }
        let got = match run_xdp(self.prog.prog(), input, XdpContext { ingress_ifindex: self.ifindex, rx_queue_index: 0 }) {
            Ok(r) => r,
            Err(e) => return vec![format!("test run failed: {e:#}")],
        };
        let now = self.maps.counters().expect("the lb's counters");
        let delta = |c: Counter| (now[c as usize] - self.counters[c as usize]) as usize;
        let moved: Vec<Counter> = Counter::ALL.iter().flat_map(|&c| std::iter::repeat_n(c, delta(c))).collect();
        self.counters = now;
        let mut want_counters = want.counters.clone();
        want_counters.sort_unstable_by_key(|c| *c as usize);
        if got.verdict != want.verdict || moved != want_counters {
            let (got_c, want_c) = (show_counters(&moved), show_counters(&want.counters));
            problems.push(format!("{} with [{got_c}]; the model says {} with [{want_c}]", got.verdict.name(), want.verdict.name()));
        }
        let want_frame = want.frame.as_deref().unwrap_or(input);
        if got.frame != want_frame {
            problems.push(format!("the frame came out as\n    {}\n  the model says\n    {}", hex(&got.frame), hex(want_frame)));
        }
        if !problems.is_empty() {
            problems.push(self.resync(i, want.flow));
        }
        problems
    }

    /// After a mismatch at frame `i`: the model takes the program's entry for the flow and its statistics, so later frames
    /// are judged on their own. Returns how to replay, and the live file the first time.
    fn resync(&mut self, i: u64, flow: Option<xnf_lb::flow::Flow>) -> String {
        if let Some(f) = flow {
            self.model.set_entry(f, self.maps.conntrack_entry(&raw_flow(&f)).expect("a connection-table lookup"));
        }
        let (services, backends) = self.stats();
        self.model.reset_stats();
        let epoch = self.epoch.as_mut().expect("opened");
        epoch.services = services;
        epoch.backends = backends;
        let (seed, first, frames) = (self.seed, self.first, i - self.first + 1);
        let mut s = format!("  the connection table is state: XNF_FUZZ_SEED={seed} XNF_FUZZ_FIRST={first} XNF_FUZZ_FRAMES={frames} replays the run up to here");
        if !std::mem::replace(&mut epoch.shown, true) {
            write!(s, "\n--- service file {} ---\n{}---", epoch.n, epoch.text).unwrap();
        }
        s
    }
}

#[test]
fn the_lb_does_what_its_documentation_says_on_every_frame() {
    let documented = (model::QUOTE4 as u32, model::QUOTE6 as u32, model::OUTER_TTL);
    assert_eq!(
        documented,
        (xnf_lb::program::QUOTE4, xnf_lb::program::QUOTE6, xnf_lb::program::OUTER_TTL),
        "lb.h changed its quotes or TTL: update the model on purpose"
    );
    let net = Net::new().expect("the fuzz namespace (run as root)");
    net.ns
        .run(|| {
            // One CPU: the connection table's LRU share and the per-CPU statistics all live there.
            xnf_testrun::pin_to_current_cpu();
            let fuzz = Fuzz::from_env("lb", DEFAULT_FRAMES);
            let world = world();
            let mut run = Run::new(fuzz.seed, fuzz.first, &net);
            let mut index = fuzz.first;
            fuzz.run(|rng| {
                let f = input(rng, &world);
                let problems = run.check(index, &f);
                index += 1;
                (f, if problems.is_empty() { Ok(()) } else { Err(problems.join("\n  ")) })
            });
            let last = run.close(index);
            assert!(last.is_empty(), "{}", last.join("\n"));
            let mut histogram: Vec<(Counter, u64)> = run.seen.iter().map(|(c, n)| (*c, *n)).collect();
            histogram.sort_unstable_by_key(|(c, _)| *c as usize);
            let h: Vec<String> = histogram.iter().map(|(c, n)| format!("{} {n}", c.name())).collect();
            let files = index.div_ceil(EPOCH) - fuzz.first / EPOCH;
            eprintln!("fuzz lb: {files} service files, connection table emptied {} times; frames per counter: {}", run.flushes, h.join(", "));
            // Every counter this network can reach must be reached: a generator that stops reaching one tests nothing there.
            if fuzz.frames >= DEFAULT_FRAMES {
                use Counter::*;
                let unreachable = [Redirect, NoRoute, FwdDisabled, NoNeigh, NotManaged, DsrNotOnlink, Error];
                let missed = Counter::ALL.iter().filter(|c| !unreachable.contains(c) && **c != Rx && !run.seen.contains_key(c));
                let missed: Vec<&str> = missed.map(|c| c.name()).collect();
                assert!(missed.is_empty(), "no frame moved {missed:?}");
            }
        })
        .unwrap();
}
