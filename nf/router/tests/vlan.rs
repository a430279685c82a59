//! The router's four VLAN cases through real 802.1Q devices, with real
//! traffic counted on both sides, and the follower picking up a VLAN device
//! added and removed while the router is attached (the xdp-forward thesis §4.3).
//!
//! Needs a kernel with 802.1Q, which this project's development host lacks:
//! the target has `test = false` (Cargo.toml), so a plain `cargo test` does
//! not build it, and the kernel matrix builds and runs it in its Debian
//! guests (`scripts/kernels.sh test 6.1 router-vlan`). On a kernel without
//! 802.1Q it fails, naming what is missing.
//!
//! ```text
//!  gen [g]─────────────[dg] dut [ds]─────────────[s] sink     untagged
//!   └ [g200] VID 200 ─[dg200]   [ds100]─ VID 100 [s100] ┘     tagged
//!  198.18.20.0/24 2001:db8:20::/64   198.18.21.0/24 2001:db8:21::/64
//! ```

use std::net::{IpAddr, SocketAddr, UdpSocket};

use xnf_core::features::{load_module, Feature};
use xnf_netns::{ifname, Netns, Offload};
use xnf_testrun::cli::{count_received, send_paced, udp_receiver, wait_for, xnf_ok, RoutedLine};

const N: usize = 200;

struct VlanLine {
    r: RoutedLine,
    g200: String,
    dg200: String,
    ds100: String,
    s100: String,
}

/// `ip link add link PARENT name NAME type vlan id VID`, up.
fn add_vlan(ns: &Netns, parent: &str, name: &str, vid: u16) {
    ns.ip(&["link", "add", "link", parent, "name", name, "type", "vlan", "id", &vid.to_string()]).unwrap();
    ns.link_up(name).unwrap();
}

fn ip(ns: &Netns, args: &[&str]) {
    let out = ns.ip(args).unwrap();
    assert!(out.status.success(), "ip {args:?} in {}: {}", ns.name(), String::from_utf8_lossy(&out.stderr));
}

fn addr(ns: &Netns, dev: &str, cidr: &str) {
    ip(ns, &["addr", "add", cidr, "dev", dev, "nodad"]);
}

impl VlanLine {
    /// The line with VLAN 200 between gen and dut and VLAN 100 between dut
    /// and sink; the router attached before dut's VLAN devices exist when
    /// `attach_first`, so that only the follower can have told it of them.
    fn new(attach_first: bool) -> VlanLine {
        Feature::Vlan.require().expect("802.1Q");
        load_module("8021q").expect("loading 8021q");
        let r = RoutedLine::new(&[]);
        // Tags in the frame, not in skb metadata, so that they cross the
        // veth as a NIC puts them on the wire.
        r.line.gen().set_offload(&r.line.gen_if, Offload::TxVlan, false).unwrap();
        r.dut().set_offload(&r.line.dut_sink_if, Offload::TxVlan, false).unwrap();
        let mut me = VlanLine { g200: ifname("g200"), dg200: ifname("dg200"), ds100: ifname("ds100"), s100: ifname("s100"), r };
        if attach_first {
            me.r.attach(&[]);
        }
        let l = &me.r.line;
        let (gen, sink) = (l.gen(), l.sink());
        add_vlan(gen, &l.gen_if, &me.g200, 200);
        add_vlan(sink, &l.sink_if, &me.s100, 100);
        addr(gen, &me.g200, "198.18.20.1/24");
        addr(gen, &me.g200, "2001:db8:20::1/64");
        addr(sink, &me.s100, "198.18.21.2/24");
        addr(sink, &me.s100, "198.18.21.3/24");
        addr(sink, &me.s100, "2001:db8:21::2/64");
        addr(sink, &me.s100, "2001:db8:21::3/64");
        addr(sink, &l.sink_if, "198.18.1.3/24");
        addr(sink, &l.sink_if, "2001:db8:1::3/64");
        me.add_dut_vlans();
        // Which way gen sends: untagged to .2 of VLAN 100, tagged to .3 of
        // VLAN 100 and to .3 of sink's untagged subnet.
        for (dst, via, dev) in [
            ("198.18.21.2", "198.18.0.2", &l.gen_if),
            ("2001:db8:21::2", "2001:db8::2", &l.gen_if),
            ("198.18.21.3", "198.18.20.2", &me.g200),
            ("2001:db8:21::3", "2001:db8:20::2", &me.g200),
            ("198.18.1.3", "198.18.20.2", &me.g200),
            ("2001:db8:1::3", "2001:db8:20::2", &me.g200),
        ] {
            ip(gen, &["route", "add", dst, "via", via, "dev", dev]);
        }
        for dst in ["198.18.20.0/24", "2001:db8:20::/64"] {
            ip(sink, &["route", "add", dst, "via", if dst.contains(':') { "2001:db8:1::1" } else { "198.18.1.1" }]);
        }
        if !attach_first {
            me.r.attach(&[]);
        }
        me
    }

    /// dut's VLAN devices with addresses and permanent neighbours for sink
    /// (so that no first packet takes the kernel path to resolve them).
    fn add_dut_vlans(&self) {
        let l = &self.r.line;
        let dut = l.dut();
        self.add_dut_vlan200();
        add_vlan(dut, &l.dut_sink_if, &self.ds100, 100);
        addr(dut, &self.ds100, "198.18.21.1/24");
        addr(dut, &self.ds100, "2001:db8:21::1/64");
        let mac = l.sink_mac.to_string();
        for (a, dev) in [
            ("198.18.21.2", &self.ds100),
            ("198.18.21.3", &self.ds100),
            ("2001:db8:21::2", &self.ds100),
            ("2001:db8:21::3", &self.ds100),
            ("198.18.1.3", &l.dut_sink_if),
            ("2001:db8:1::3", &l.dut_sink_if),
        ] {
            ip(dut, &["neigh", "replace", a, "lladdr", &mac, "nud", "permanent", "dev", dev]);
        }
    }

    /// dut's VLAN 200 device, facing gen, with its addresses.
    fn add_dut_vlan200(&self) {
        let l = &self.r.line;
        add_vlan(l.dut(), &l.dut_gen_if, &self.dg200, 200);
        addr(l.dut(), &self.dg200, "198.18.20.2/24");
        addr(l.dut(), &self.dg200, "2001:db8:20::2/64");
    }

    fn vlan_table(&self) -> Vec<(String, String, u64)> {
        let out = xnf_ok(self.r.dut(), &["router", "status", "--json"]);
        let s: serde_json::Value = serde_json::from_str(&out).unwrap();
        s["vlans"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| (v["vlan"].as_str().unwrap().to_owned(), v["parent"].as_str().unwrap().to_owned(), v["vid"].as_u64().unwrap()))
            .collect()
    }

    /// A receiver in sink bound to device `dev` (so it receives only what
    /// came through it: on the VLAN device, only frames tagged 100) and a
    /// sender in gen, after one datagram went through, so that gen has
    /// resolved dut (its own ARP or ND goes to dut's kernel, as it must).
    fn sockets(&self, to: SocketAddr, dev: &str) -> (UdpSocket, UdpSocket) {
        let l = &self.r.line;
        let rx = udp_receiver(l.sink(), to);
        bind_to_device(&rx, dev);
        let any: IpAddr = if to.is_ipv6() { "::".parse().unwrap() } else { "0.0.0.0".parse().unwrap() };
        let tx: UdpSocket = l.gen().run(move || UdpSocket::bind(SocketAddr::new(any, 0))).unwrap().unwrap();
        wait_for(&format!("a first datagram to {to} through sink's {dev}"), || {
            tx.send_to(b"warm", to).unwrap();
            count_received(&rx, 1) >= 1
        });
        let _ = count_received(&rx, 0); // a late second warm-up datagram
        (rx, tx)
    }

    /// One case: N datagrams to `to` arrive through the sink device they
    /// must (its VLAN device exactly when the egress is tagged), every one
    /// redirected by XDP on dut and none forwarded by the kernel.
    fn case(&self, what: &str, to: &str, tagged_out: bool) {
        let to = SocketAddr::new(to.parse().unwrap(), 9100);
        let dev = if tagged_out { self.s100.clone() } else { self.r.line.sink_if.clone() };
        let (rx, tx) = self.sockets(to, &dev);
        let (fw4, fw6) = (self.r.forw_v4(), self.r.forw_v6());
        let redir = self.r.redirected();
        let got = std::thread::scope(|s| {
            let receiver = s.spawn(|| count_received(&rx, N));
            send_paced(&tx, to, N);
            receiver.join().unwrap()
        });
        assert_eq!(got, N, "{what}: {got} of {N} datagrams arrived through sink's {dev}");
        let redirected = self.r.redirected() - redir;
        assert_eq!(redirected, N as u64, "{what}: XDP redirected {redirected} of {N} (reasons {})", self.r.ingress_stats()["reasons"]);
        assert_eq!((self.r.forw_v4(), self.r.forw_v6()), (fw4, fw6), "{what}: the kernel forwarded some");
    }
}

/// SO_BINDTODEVICE: the socket receives only what arrives through `dev`.
fn bind_to_device(s: &UdpSocket, dev: &str) {
    use std::os::fd::AsRawFd;
    // SAFETY: setsockopt on an open socket with a buffer of the given length.
    let rc = unsafe { libc::setsockopt(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_BINDTODEVICE, dev.as_ptr().cast(), dev.len() as libc::socklen_t) };
    assert_eq!(rc, 0, "SO_BINDTODEVICE {dev}: {}", std::io::Error::last_os_error());
}

#[test]
fn all_four_vlan_cases_through_real_8021q_devices() {
    let v = VlanLine::new(false);
    let table = v.vlan_table();
    let l = &v.r.line;
    assert!(table.contains(&(v.dg200.clone(), l.dut_gen_if.clone(), 200)), "{table:?}");
    assert!(table.contains(&(v.ds100.clone(), l.dut_sink_if.clone(), 100)), "{table:?}");
    for (what, to, tagged_out) in [
        ("untagged -> untagged", "198.18.1.2", false),
        ("untagged -> untagged, IPv6", "2001:db8:1::2", false),
        ("untagged -> tagged (tag 100 pushed)", "198.18.21.2", true),
        ("untagged -> tagged, IPv6", "2001:db8:21::2", true),
        ("tagged -> tagged (VID 200 rewritten to 100)", "198.18.21.3", true),
        ("tagged -> tagged, IPv6", "2001:db8:21::3", true),
        ("tagged -> untagged (tag 200 popped)", "198.18.1.3", false),
        ("tagged -> untagged, IPv6", "2001:db8:1::3", false),
    ] {
        v.case(what, to, tagged_out);
    }
}

#[test]
fn the_follower_picks_up_vlan_devices_added_and_removed_while_attached() {
    let v = VlanLine::new(true);
    let l = &v.r.line;
    wait_for("the follower to add both VLAN devices", || v.vlan_table().len() == 2);
    v.case("tagged -> tagged after the devices were added", "198.18.21.3", true);

    // Removed: the table forgets it, and its VID is unknown to the router.
    let dut = l.dut();
    ip(dut, &["link", "del", &v.dg200]);
    wait_for("the follower to remove VLAN 200", || v.vlan_table().len() == 1);
    let unknown = v.r.reason("vlan-unknown");
    let tx: UdpSocket = l.gen().run(|| UdpSocket::bind("198.18.20.1:0")).unwrap().unwrap();
    send_paced(&tx, "198.18.21.3:9100".parse().unwrap(), 10);
    wait_for("ten frames of the removed VLAN counted as vlan-unknown", || v.r.reason("vlan-unknown") - unknown >= 10);

    // Added again (a new ifindex): forwarded in XDP again.
    v.add_dut_vlan200();
    wait_for("the follower to add VLAN 200 again", || v.vlan_table().len() == 2);
    v.case("tagged -> tagged after the device came back", "198.18.21.3", true);
}
