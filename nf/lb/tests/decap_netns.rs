//! `xnf lb decap` on a real veth: a balancer namespace sends tunnelled
//! datagrams, built by hand and written to an AF_PACKET socket (this
//! kernel has no ipip or fou module to make them), to a backend namespace
//! where decap is attached; sockets bound to VIPs on the backend's loopback
//! must receive the inner datagrams. Also attach, status (the GUE port read
//! back from the kernel), refresh after an address is added, and detach
//! removing every pin. Through the library, inside the backend namespace.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use xnf_core::xdp::XdpMode;
use xnf_lb::decap::{self, DecapCounter};
use xnf_netns::{ifname, packet_socket, send_frame, veth, Netns};
use xnf_packet::{IpProtocol, MacAddr, PacketBuilder};

const BAL4: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 1);
const BACKEND4: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 2);
/// Added to the backend after attach: decap's only after a refresh.
const LATE4: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 3);
const BAL6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1);
const BACKEND6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 2);
const CLIENT4: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 7);
const CLIENT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xc, 0, 0, 0, 0, 7);
const VIP4: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 10);
const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xf, 0, 0, 0, 0, 0x10);
const PORT: u16 = 5000;
const GUE_PORT: u16 = 6081;

struct Pair {
    bal: Netns,
    be: Netns,
    bal_if: String,
    be_if: String,
    bal_mac: MacAddr,
    be_mac: MacAddr,
}

fn pair() -> Pair {
    let bal = Netns::new("decap-bal").unwrap();
    let be = Netns::new("decap-be").unwrap();
    let (bal_if, be_if) = (ifname("bal"), ifname("be"));
    veth(&bal, &bal_if, &be, &be_if, None).unwrap();
    bal.batch().addr_add(&bal_if, "198.18.1.1/24").unwrap().addr_add(&bal_if, "2001:db8:1::1/64").unwrap().link_up(&bal_if).unwrap().apply().unwrap();
    be.batch()
        .addr_add(&be_if, "198.18.1.2/24")
        .unwrap()
        .addr_add(&be_if, "2001:db8:1::2/64")
        .unwrap()
        .link_up(&be_if)
        .unwrap()
        .addr_add("lo", "198.18.100.10/32")
        .unwrap()
        .addr_add("lo", "2001:db8:f::10/128")
        .unwrap()
        .apply()
        .unwrap();
    // The clients are reached through the balancer's side (the reverse-path
    // check asks for a route back to the inner source).
    be.route_add("198.19.0.0/24", Some("198.18.1.1"), None).unwrap();
    be.route_add("2001:db8:c::/64", Some("2001:db8:1::1"), None).unwrap();
    be.wait_links_ready(&[&be_if]).unwrap();
    bal.wait_links_ready(&[&bal_if]).unwrap();
    let (bal_mac, be_mac) = (bal.mac(&bal_if).unwrap(), be.mac(&be_if).unwrap());
    Pair { bal, be, bal_if, be_if, bal_mac, be_mac }
}

impl Pair {
    fn eth(&self) -> PacketBuilder {
        PacketBuilder::ethernet(self.bal_mac, self.be_mac)
    }

    /// A client's UDP datagram to the VIP of `v6`'s family carrying `payload`: its IP packet.
    fn inner(&self, v6: bool, payload: &[u8]) -> Vec<u8> {
        let b = if v6 { self.eth().ipv6(CLIENT6, VIP6) } else { self.eth().ipv4(CLIENT4, VIP4) };
        b.udp(40000, PORT).payload(payload).build()[14..].to_vec()
    }

    /// `inner` in IP from the balancer to `dst` (protocol 4 or 41 by the inner version).
    fn ipip(&self, dst: IpAddr, inner: &[u8]) -> Vec<u8> {
        let proto = if inner[0] >> 4 == 6 { IpProtocol(41) } else { IpProtocol(4) };
        self.outer(dst).protocol(proto).payload(inner).build()
    }

    /// `inner` in UDP to the GUE port.
    fn gue(&self, dst: IpAddr, inner: &[u8]) -> Vec<u8> {
        self.outer(dst).udp(50123, GUE_PORT).payload(inner).l4_checksum(0).build()
    }

    fn outer(&self, dst: IpAddr) -> PacketBuilder {
        match dst {
            IpAddr::V4(d) => self.eth().ipv4(BAL4, d),
            IpAddr::V6(d) => self.eth().ipv6(BAL6, d),
        }
    }

    fn send(&self, frames: &[Vec<u8>]) {
        let frames = frames.to_vec();
        let dev = self.bal_if.clone();
        self.bal
            .run(move || {
                let s = packet_socket(&dev).unwrap();
                for f in &frames {
                    send_frame(&s, f).unwrap();
                }
            })
            .unwrap();
    }

    /// A UDP socket on the backend bound to the VIP of `v6`'s family.
    fn vip_socket(&self, v6: bool) -> UdpSocket {
        let addr = if v6 { SocketAddr::new(IpAddr::V6(VIP6), PORT) } else { SocketAddr::new(IpAddr::V4(VIP4), PORT) };
        let s = self.be.bind(move || UdpSocket::bind(addr)).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(1500))).unwrap();
        s
    }

    fn counters(&self) -> decap::DecapCounters {
        self.be.run(decap::counters).unwrap().unwrap()
    }
}

/// The payloads `s` receives until it has been quiet for its timeout.
fn received(s: &UdpSocket) -> BTreeSet<Vec<u8>> {
    let mut out = BTreeSet::new();
    let mut buf = [0u8; 2048];
    while let Ok(n) = s.recv(&mut buf) {
        out.insert(buf[..n].to_vec());
    }
    out
}

fn set(items: &[&[u8]]) -> BTreeSet<Vec<u8>> {
    items.iter().map(|i| i.to_vec()).collect()
}

fn delta(after: &decap::DecapCounters, before: &decap::DecapCounters, c: DecapCounter) -> u64 {
    after[c as usize] - before[c as usize]
}

#[test]
fn tunnelled_datagrams_reach_vips_on_the_loopback() {
    let p = pair();
    let be_if = p.be_if.clone();
    let attached = p.be.run(move || decap::attach(&[be_if], XdpMode::Native, GUE_PORT)).unwrap().unwrap();
    assert_eq!((attached.attached, attached.replaced), (vec![p.be_if.clone()], vec![]));

    let status = p.be.run(decap::status).unwrap().unwrap();
    assert_eq!(status.interfaces.len(), 1, "{status:?}");
    let i = &status.interfaces[0];
    assert_eq!((i.name.as_str(), i.gue_port, i.mode), (p.be_if.as_str(), Some(GUE_PORT), "native"));
    assert_eq!(i.stages, vec![format!("lb:{}#{}", decap::PROG_NAME, i.prog_id)]);
    for a in [IpAddr::V4(BACKEND4), IpAddr::V6(BACKEND6), IpAddr::V4(VIP4), IpAddr::V4(Ipv4Addr::LOCALHOST)] {
        assert!(status.locals.contains(&a), "{a} not among decap's local addresses: {status:?}");
    }
    assert!(status.missing.is_empty() && status.stale.is_empty(), "{status:?}");

    let (rx4, rx6) = (p.vip_socket(false), p.vip_socket(true));
    let before = p.counters();
    let (b4, b6) = (IpAddr::V4(BACKEND4), IpAddr::V6(BACKEND6));
    p.send(&[
        p.ipip(b4, &p.inner(false, b"4in4")),
        p.ipip(b6, &p.inner(false, b"4in6")),
        p.ipip(b4, &p.inner(true, b"6in4")),
        p.ipip(b6, &p.inner(true, b"6in6")),
        p.gue(b4, &p.inner(false, b"gue 4 in 4")),
        p.gue(b6, &p.inner(true, b"gue 6 in 6")),
    ]);
    assert_eq!(received(&rx4), set(&[b"4in4", b"4in6", b"gue 4 in 4"]));
    assert_eq!(received(&rx6), set(&[b"6in4", b"6in6", b"gue 6 in 6"]));
    let after = p.counters();
    use DecapCounter::{BadInner, Error, Fragment, Gue, Ip6ip6, Ipip};
    assert_eq!([Ipip, Ip6ip6, Gue, BadInner, Error, Fragment].map(|c| delta(&after, &before, c)), [2, 2, 2, 0, 0, 0]);

    // An address added after attach is not decap's until a refresh.
    p.be.addr_add(&p.be_if, "198.18.1.3/24").unwrap();
    let status = p.be.run(decap::status).unwrap().unwrap();
    assert_eq!(status.missing, vec![IpAddr::V4(LATE4)]);
    let before = p.counters();
    p.send(&[p.ipip(IpAddr::V4(LATE4), &p.inner(false, b"too early"))]);
    assert!(received(&rx4).is_empty());
    assert_eq!(delta(&p.counters(), &before, DecapCounter::Ipip), 0);
    let change = p.be.run(decap::refresh).unwrap().unwrap();
    assert_eq!((change.added, change.removed), (vec![IpAddr::V4(LATE4)], vec![]));
    p.send(&[p.ipip(IpAddr::V4(LATE4), &p.inner(false, b"after refresh"))]);
    assert_eq!(received(&rx4), set(&[b"after refresh"]));

    let be_if = p.be_if.clone();
    p.be.run(move || decap::detach(&[be_if])).unwrap().unwrap();
    let (status, pins) = p.be.run(|| (decap::status().unwrap(), decap::pin_dir().unwrap())).unwrap();
    assert!(status.interfaces.is_empty(), "{status:?}");
    assert!(!pins.exists(), "{} left behind", pins.display());
    let link = p.be.run({
        let n = p.be_if.clone();
        move || xnf_netns::netlink::link_by_name(&n).unwrap()
    });
    assert_eq!(link.unwrap().xdp_prog_id, None, "the entry program stayed attached");
}

#[test]
fn attach_refuses_what_it_cannot_do_and_changes_nothing() {
    let p = pair();
    let be_if = p.be_if.clone();
    let errors =
        p.be.run(move || {
            let one = std::slice::from_ref(&be_if);
            let lo = decap::attach(&["lo".into()], XdpMode::Native, GUE_PORT).unwrap_err();
            let missing = decap::attach(&[be_if.clone(), "xnfnosuchif".into()], XdpMode::Native, GUE_PORT).unwrap_err();
            let nothing = decap::detach(one).unwrap_err();
            let first = decap::attach(one, XdpMode::Native, GUE_PORT);
            let twice = decap::attach(one, XdpMode::Native, GUE_PORT).unwrap_err();
            let mode = decap::attach(one, XdpMode::Skb, 0).unwrap_err();
            let gue = decap::status().unwrap().interfaces.iter().map(|i| i.gue_port).collect::<Vec<_>>();
            decap::detach(one).unwrap();
            first.unwrap();
            (format!("{lo:#}"), format!("{missing:#}"), format!("{nothing:#}"), format!("{twice:#}"), format!("{mode:#}"), gue)
        })
        .unwrap();
    assert!(errors.0.contains("not an Ethernet interface"), "{}", errors.0);
    assert!(errors.1.contains("no interface named \"xnfnosuchif\""), "{}", errors.1);
    assert!(errors.2.contains("not attached to"), "{}", errors.2);
    assert!(errors.3.contains("already attached") && errors.3.contains("with these options"), "{}", errors.3);
    assert!(errors.4.contains("changing the XDP mode cannot be atomic"), "{}", errors.4);
    assert_eq!(errors.5, vec![Some(GUE_PORT)], "a refused attach changed the GUE port");
}

/// Another GUE port is a new instance in the same slot, in one update:
/// the interface never runs without decap, and the locals stay.
#[test]
fn attach_with_another_gue_port_replaces_the_instance_in_place() {
    let p = pair();
    let be_if = p.be_if.clone();
    let (report, before, after) =
        p.be.run(move || {
            let one = std::slice::from_ref(&be_if);
            decap::attach(one, XdpMode::Native, GUE_PORT).unwrap();
            let before = decap::status().unwrap();
            let report = decap::attach(one, XdpMode::Native, 0).unwrap();
            let after = decap::status().unwrap();
            decap::detach(one).unwrap();
            (report, before, after)
        })
        .unwrap();
    assert_eq!((report.attached, report.replaced), (vec![], vec![p.be_if.clone()]));
    let (b, a) = (&before.interfaces[0], &after.interfaces[0]);
    assert_eq!((b.gue_port, a.gue_port), (Some(GUE_PORT), Some(0)));
    assert_ne!(b.prog_id, a.prog_id, "the same program still runs");
    assert_eq!(before.locals, after.locals);
}
