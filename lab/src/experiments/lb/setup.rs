//! What `xnf lab lb` puts into dut: the addresses of the service and its backends, `xnf lb` attached and given a
//! service file (and detached again), the nftables rulesets that balance the same VIP in the kernel, and the
//! conntrack flush that keeps one kernel variant's NAT bindings from deciding the next one's backends.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, ensure, Context, Result};
use xnf_core::xdp::XdpMode;
use xnf_lb::program::{Counter, Counters};
use xnf_netns::Netns;

/// The service's virtual address: in the lab's range, on no interface (dut takes it by its service or rule).
pub const VIP: Ipv4Addr = Ipv4Addr::new(198, 18, 5, 10);
/// Outer source prefix of ipip and gue: each flow takes the address whose host bits are its hash.
pub const ENCAP_SOURCES: &str = "198.18.254.0/24";
/// The same for IPv6 backends.
pub const ENCAP_SOURCES6: &str = "2001:db8:fe::/64";
/// The IPv6 service's virtual address.
pub const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 5, 0, 0, 0, 0, 0x10);
/// Most backends of the throughput experiment: one veth pair and one /24 each (198.18.11.0 … 198.18.74.0).
pub const MAX_BACKENDS: u32 = 64;
/// Most client addresses; more flows are made by source ports.
pub const MAX_SOURCES: u32 = 1024;
/// Where the clients' addresses start (198.19.1.0 …): behind gen, routed there by dut.
pub const CLIENTS: Ipv4Addr = Ipv4Addr::new(198, 19, 1, 0);
/// The clients' prefix, routed by dut back to gen (so no reverse-path check can drop the traffic).
pub const CLIENT_PREFIX: &str = "198.19.0.0/16";

/// How the service's packets reach a backend: `xnf lb`'s three modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Ipip,
    Gue,
    Dsr,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Ipip => "ipip",
            Mode::Gue => "gue",
            Mode::Dsr => "dsr",
        }
    }
}

/// The transport protocol of the service and of the generated traffic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    #[default]
    Tcp,
    Udp,
}

impl Proto {
    /// The IP protocol number.
    pub fn number(self) -> u8 {
        if self == Proto::Tcp {
            6
        } else {
            17
        }
    }

    pub fn name(self) -> &'static str {
        if self == Proto::Tcp {
            "tcp"
        } else {
            "udp"
        }
    }
}

/// The address family of the throughput part's VIP, backends and clients.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    #[default]
    Ipv4,
    Ipv6,
}

impl Family {
    pub fn v6(self) -> bool {
        self == Family::Ipv6
    }

    pub fn vip(self) -> IpAddr {
        if self.v6() {
            IpAddr::V6(VIP6)
        } else {
            IpAddr::V4(VIP)
        }
    }

    /// Backend `i` (1-based): 198.18.(10+i).2, or 2001:db8:(100+i hex)::2, on its own link from dut.
    pub fn backend(self, i: u32) -> IpAddr {
        if self.v6() {
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0x100 + i as u16, 0, 0, 0, 0, 2))
        } else {
            IpAddr::V4(backend(i))
        }
    }

    /// Backend `i`'s prefix (its link's, or the route's on the tx path).
    pub fn backend_net(self, i: u32) -> String {
        if self.v6() {
            format!("2001:db8:{:x}::/64", 0x100 + i)
        } else {
            format!("198.18.{}.0/24", 10 + i)
        }
    }

    /// dut's address on backend `i`'s link, with its prefix length.
    pub fn gateway_cidr(self, i: u32) -> String {
        if self.v6() {
            format!("2001:db8:{:x}::1/64", 0x100 + i)
        } else {
            format!("{}/24", backend_gateway(i))
        }
    }

    /// Client `k` (0-based, below 65,280): 198.19.1.0 + k, or 2001:db8:c000:: + k.
    pub fn client(self, k: u32) -> IpAddr {
        if self.v6() {
            IpAddr::V6(Ipv6Addr::from(u128::from(Ipv6Addr::new(0x2001, 0xdb8, 0xc000, 0, 0, 0, 0, 0)) + u128::from(k)))
        } else {
            IpAddr::V4(client(k))
        }
    }

    /// The clients' prefix, routed by dut back to gen.
    pub fn client_prefix(self) -> &'static str {
        if self.v6() {
            "2001:db8:c000::/48"
        } else {
            CLIENT_PREFIX
        }
    }

    /// nftables' name of the family (table family, address expressions).
    fn nft(self) -> &'static str {
        if self.v6() {
            "ip6"
        } else {
            "ip"
        }
    }
}

/// Backend `i` (1-based) of the throughput topology: its address, on its own link from dut (`dut:bkI`, 198.18.(10+i).0/24).
pub fn backend(i: u32) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, (10 + i) as u8, 2)
}

/// dut's address on backend `i`'s link.
pub fn backend_gateway(i: u32) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, (10 + i) as u8, 1)
}

/// Client address `k` (0-based, below 65,536 - 256).
pub fn client(k: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(CLIENTS) + k)
}

/// A service file of one service (`lab`) on `vip`:`port` over `backends`, in `mode`, with a table of `table_size`.
pub fn service_file(vip: IpAddr, proto: Proto, port: u16, mode: Mode, table_size: u32, backends: &[IpAddr]) -> String {
    let mut s = format!(
        "[encap]\nsource_v4 = \"{ENCAP_SOURCES}\"\nsource_v6 = \"{ENCAP_SOURCES6}\"\n\n[[service]]\nname = \"lab\"\nvip = \"{vip}\"\nproto = \"{}\"\nport = {port}\nmode = \"{}\"\ntable_size = {table_size}\n",
        proto.name(),
        mode.name()
    );
    for b in backends {
        s += &format!("\n[[service.backend]]\naddress = \"{b}\"\n");
    }
    s
}

/// How the kernel picks a backend for a new connection: `nft … dnat to jhash …` or `numgen inc …`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pick {
    /// A hash of the client's address and port (stateless per flow, like the lb's table).
    Jhash,
    /// Round robin over new connections.
    Numgen,
}

/// The nftables table that balances `VIP:port` over `backends` by DNAT in prerouting; dut's kernel then forwards the
/// packet to the backend. NAT rules see only a connection's first packet: the rest follow its conntrack entry.
pub fn nft_ruleset(family: Family, proto: Proto, port: u16, pick: Pick, backends: &[IpAddr]) -> String {
    let map: Vec<String> = backends.iter().enumerate().map(|(i, b)| format!("{i} : {b}")).collect();
    let n = backends.len();
    let (p, f, vip) = (proto.name(), family.nft(), family.vip());
    let expr = match pick {
        Pick::Jhash => format!("jhash {f} saddr . {p} sport mod {n} seed 0x786e666c"),
        Pick::Numgen => format!("numgen inc mod {n}"),
    };
    format!(
        "table {f} {NFT_TABLE} {{\n\tchain pre {{\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n\t\t{f} daddr {vip} {p} dport {port} dnat to {expr} map {{ {} }}\n\t}}\n}}\n",
        map.join(", ")
    )
}

/// The nftables table the kernel variants load in dut.
pub const NFT_TABLE: &str = "xnflb";

/// `xnf lb` attached to interfaces of a lab namespace and given a service file, through its library on a thread
/// inside that namespace (where its state lives); detached when dropped, which removes its maps and run files with
/// the last interface, so every variant and run starts from an empty data plane.
pub struct LbGuard {
    ns: PathBuf,
    name: String,
    ifaces: Vec<String>,
    /// The route cache's keeper, a thread in the namespace as the daemon runs one (`xnf_lb::cache::keep`).
    keeper: Option<(Arc<AtomicBool>, std::thread::JoinHandle<Result<()>>)>,
}

impl LbGuard {
    /// Attaches the lb to `ifaces` in `ns` and applies `file`; returns the guard and the apply's warnings. If the
    /// apply fails, the lb is detached again before the error is returned.
    pub fn new(ns: &Netns, ifaces: &[String], file: &str) -> Result<(Self, Vec<String>)> {
        let names = ifaces.to_vec();
        ns.run(move || xnf_lb::attach(&names, XdpMode::Native))?.with_context(|| format!("attaching xnf lb in {}", ns.name()))?;
        let mut guard = LbGuard { ns: ns.path(), name: ns.name().to_string(), ifaces: ifaces.to_vec(), keeper: None };
        let text = file.to_string();
        let out = ns.run(move || xnf_lb::apply_text(&text, "lab.toml"))?.with_context(|| format!("applying the lab's service file in {}", ns.name()))?;
        let (stop, path) = (Arc::new(AtomicBool::new(false)), ns.path());
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("xnf-lb-cache".into())
            .spawn(move || xnf_netns::run_in(&path, move || xnf_lb::cache::keep(&flag))?)
            .context("starting the lb's route cache keeper")?;
        guard.keeper = Some((stop, thread));
        Ok((guard, out.warnings))
    }

    /// The lb's counters summed over CPUs (indexed by [`Counter`]).
    pub fn counters(&self) -> Result<Counters> {
        xnf_netns::run_in(&self.ns, xnf_lb::counters)?
    }

    /// Entries in the lb's connection table (one hash, LRU lists per CPU).
    pub fn ct_entries(&self) -> Result<u64> {
        xnf_netns::run_in(&self.ns, || xnf_lb::open_maps().map(|m| m.conntrack_fill()))?
    }
}

impl Drop for LbGuard {
    fn drop(&mut self) {
        if let Some((stop, thread)) = self.keeper.take() {
            stop.store(true, Ordering::Relaxed);
            match thread.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => eprintln!("xnf lab: the lb's route cache keeper in {}: {e:#}", self.name),
                Err(_) => eprintln!("xnf lab: the lb's route cache keeper in {} panicked", self.name),
            }
        }
        let names = std::mem::take(&mut self.ifaces);
        match xnf_netns::run_in(&self.ns, move || xnf_lb::detach(&names)) {
            Ok(Ok(())) => {}
            Ok(Err(e)) | Err(e) => eprintln!("xnf lab: detaching xnf lb in {}: {e:#}", self.name),
        }
    }
}

/// What the lb handed to dut's kernel instead of sending it in XDP, by reason (`no-neigh 12, not-managed 3`).
pub fn passed_reasons(c: &Counters) -> String {
    let reasons = [
        Counter::NoRoute,
        Counter::FwdDisabled,
        Counter::NoNeigh,
        Counter::NotManaged,
        Counter::NoSource,
        Counter::Error,
        Counter::NoPorts,
        Counter::DsrNotOnlink,
    ];
    let parts: Vec<String> = reasons.iter().filter(|&&r| c[r as usize] > 0).map(|&r| format!("{} {}", r.name(), c[r as usize])).collect();
    if parts.is_empty() {
        "no reason counted".into()
    } else {
        parts.join(", ")
    }
}

/// xnf lb's counters that are not zero, in brackets (`(rx 1, ct-miss 1, pass 1, no-neigh 1)`).
pub fn nonzero(c: &Counters) -> String {
    let parts: Vec<String> = Counter::ALL.iter().filter(|&&k| c[k as usize] > 0).map(|&k| format!("{} {}", k.name(), c[k as usize])).collect();
    format!("({})", parts.join(", "))
}

/// An nftables ruleset loaded in dut for as long as it lives; conntrack is flushed when it is loaded and again when
/// it goes, so each kernel variant picks its own backends for every flow (a NAT binding made under another rule
/// would otherwise decide them) and the xnf variants find no entries.
pub struct NftGuard<'a> {
    ns: &'a Netns,
    family: Family,
}

impl<'a> NftGuard<'a> {
    pub fn load(ns: &'a Netns, family: Family, ruleset: &str) -> Result<Self> {
        ns.run(flush_conntrack)?.context("flushing dut's conntrack table before the nftables variant")?;
        crate::engine::nft::nft(ns, &["-f", "-"], Some(ruleset)).context("loading the nftables load-balancing table")?;
        Ok(NftGuard { ns, family })
    }
}

impl Drop for NftGuard<'_> {
    fn drop(&mut self) {
        let _ = crate::engine::nft::nft(self.ns, &["delete", "table", self.family.nft(), NFT_TABLE], None);
        match self.ns.run(flush_conntrack) {
            Ok(Ok(())) => {}
            Ok(Err(e)) | Err(e) => eprintln!("xnf lab: flushing conntrack in {}: {e:#}", self.ns.name()),
        }
    }
}

/// Empties the calling thread's network namespace's conntrack table, as `conntrack -F` does (ctnetlink
/// `IPCTNL_MSG_CT_DELETE` without a tuple, family unspecified), without the conntrack tool (not installed here).
pub fn flush_conntrack() -> Result<()> {
    const NFNL_SUBSYS_CTNETLINK: u16 = 1;
    const IPCTNL_MSG_CT_DELETE: u16 = 2;
    // SAFETY: a plain socket(2); the fd is owned from here on.
    let raw = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::NETLINK_NETFILTER) };
    ensure!(raw >= 0, "opening a NETLINK_NETFILTER socket: {}", std::io::Error::last_os_error());
    // SAFETY: raw is a fresh, valid fd nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut msg = Vec::with_capacity(20);
    msg.extend_from_slice(&20u32.to_ne_bytes());
    msg.extend_from_slice(&((NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_DELETE).to_ne_bytes());
    msg.extend_from_slice(&((libc::NLM_F_REQUEST | libc::NLM_F_ACK) as u16).to_ne_bytes());
    msg.extend_from_slice(&1u32.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes());
    msg.extend_from_slice(&[libc::AF_UNSPEC as u8, 0, 0, 0]);
    // SAFETY: msg outlives the call; the kernel is the default destination of a netlink socket.
    let sent = unsafe { libc::send(fd.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) };
    ensure!(sent == msg.len() as isize, "sending the conntrack flush: {}", std::io::Error::last_os_error());
    let mut buf = [0u8; 4096];
    // SAFETY: buf outlives the call.
    let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    ensure!(n >= 20, "reading the conntrack flush's answer: {}", std::io::Error::last_os_error());
    let kind = u16::from_ne_bytes([buf[4], buf[5]]);
    let errno = i32::from_ne_bytes([buf[16], buf[17], buf[18], buf[19]]);
    if kind != libc::NLMSG_ERROR as u16 || errno != 0 {
        bail!("flushing conntrack: the kernel answered {}", std::io::Error::from_raw_os_error(-errno));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_file_checks_and_names_every_backend() {
        let bs: Vec<IpAddr> = (1..=3).map(|i| IpAddr::V4(backend(i))).collect();
        for mode in [Mode::Ipip, Mode::Gue, Mode::Dsr] {
            let text = service_file(IpAddr::V4(VIP), Proto::Tcp, 80, mode, 65537, &bs);
            let (c, warnings) = xnf_lb::Config::parse(&text, "lab.toml").unwrap();
            assert!(warnings.is_empty(), "{warnings:?}");
            assert_eq!(c.services[0].backends.len(), 3);
            assert_eq!(c.encap.source_v4.unwrap().to_string(), ENCAP_SOURCES);
        }
        assert_eq!((backend(1).to_string(), backend(64).to_string()), ("198.18.11.2".into(), "198.18.74.2".into()));
        assert_eq!((client(0).to_string(), client(1023).to_string()), ("198.19.1.0".into(), "198.19.4.255".into()));
        let f = Family::Ipv6;
        assert_eq!(
            (f.backend(64).to_string(), f.backend_net(64), f.gateway_cidr(1)),
            ("2001:db8:140::2".into(), "2001:db8:140::/64".into(), "2001:db8:101::1/64".into())
        );
        assert_eq!(f.client(1023).to_string(), "2001:db8:c000::3ff");
        let text = service_file(f.vip(), Proto::Tcp, 80, Mode::Ipip, 65537, &[f.backend(1)]);
        let (c, warnings) = xnf_lb::Config::parse(&text, "lab.toml").unwrap();
        assert!(warnings.is_empty() && c.encap.source_v6.unwrap().to_string() == ENCAP_SOURCES6, "{warnings:?}");
    }

    #[test]
    fn the_kernel_rules_map_every_backend() {
        let bs: Vec<IpAddr> = (1..=2).map(|i| IpAddr::V4(backend(i))).collect();
        let j = nft_ruleset(Family::Ipv4, Proto::Udp, 53, Pick::Jhash, &bs);
        assert!(
            j.contains("ip daddr 198.18.5.10 udp dport 53 dnat to jhash ip saddr . udp sport mod 2 seed 0x786e666c map { 0 : 198.18.11.2, 1 : 198.18.12.2 }"),
            "{j}"
        );
        assert!(nft_ruleset(Family::Ipv4, Proto::Tcp, 80, Pick::Numgen, &bs).contains("tcp dport 80 dnat to numgen inc mod 2 map"));
        let bs6: Vec<IpAddr> = (1..=2).map(|i| Family::Ipv6.backend(i)).collect();
        let j6 = nft_ruleset(Family::Ipv6, Proto::Tcp, 80, Pick::Jhash, &bs6);
        assert!(j6.starts_with("table ip6 xnflb"), "{j6}");
        assert!(j6.contains("ip6 daddr 2001:db8:5::10 tcp dport 80 dnat to jhash ip6 saddr . tcp sport mod 2 seed 0x786e666c map { 0 : 2001:db8:101::2, 1 : 2001:db8:102::2 }"), "{j6}");
    }
}
