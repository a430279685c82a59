//! `xnf lb` on real veths with real TCP: a client, a balancer and three
//! backends, each in its own namespace. The balancer's lb stage sits on
//! every one of its interfaces (the client's, to take the VIP's packets,
//! and the backends', so it can redirect to them); each backend holds the
//! VIP on its loopback and runs `xnf lb decap`; the client's TCP
//! connections go through the VIP and the backends answer it directly
//! (their replies take the kernel's path through the balancer's namespace,
//! which routes between the segments, never through the lb stage: they
//! are not for a VIP).
//!
//!   client c0 ── b0 balancer b1 ── k0 backend 1      VIP on lo, decap on k0
//!                          b2 ── k0 backend 2
//!                          b3 ── k0 backend 3

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use serde_json::Value;
use xnf_netns::{ifname, packet_socket, send_frame, veth, Netns, Offload};
use xnf_packet::{MacAddr, PacketBuilder, TcpFlags};
use xnf_testrun::cli::{wait_for, xnf, xnf_errs, xnf_ip_netns_exec_ok, xnf_ok, TempFiles};

const VIP4: &str = "198.18.100.1";
const VIP6: &str = "2001:db8:100::1";
const BACKENDS: usize = 3;

fn backend4(i: usize) -> String {
    format!("198.18.{}.2", 10 + i)
}

fn backend6(i: usize) -> String {
    format!("2001:db8:{}::2", 10 + i)
}

/// The service file: TCP port 80 on both VIPs and UDP on every port of the
/// IPv4 VIP, `mode`, backend `i` of weight `weights[i]`.
fn services(mode: &str, weights: &[u16]) -> String {
    let mut t = String::from("[encap]\nsource_v4 = \"198.18.255.0/24\"\nsource_v6 = \"2001:db8:ff::/64\"\n");
    let ports = ["proto = \"tcp\"\nport = 80", "proto = \"tcp\"\nport = 80", "proto = \"udp\""];
    for ((name, vip, addr), ports) in
        [("web4", VIP4, backend4 as fn(usize) -> String), ("web6", VIP6, backend6), ("udp4", VIP4, backend4)].into_iter().zip(ports)
    {
        t += &format!("\n[[service]]\nname = \"{name}\"\nvip = \"{vip}\"\n{ports}\nmode = \"{mode}\"\n");
        for (i, w) in weights.iter().enumerate() {
            t += &format!("\n[[service.backend]]\naddress = \"{}\"\nweight = {w}\n", addr(i));
        }
    }
    t
}

struct Lab {
    client: Netns,
    lb: Netns,
    backends: Vec<Netns>,
    /// The backends' interfaces, one each (`k0` above).
    backend_ifs: Vec<String>,
    client_if: String,
    lb_ifs: Vec<String>,
    files: TempFiles,
    /// Backend `i`'s listener threads answer each connection with `i`.
    _servers: Vec<std::thread::JoinHandle<()>>,
}

impl Lab {
    fn new(tag: &str, mode: &str) -> Lab {
        let client = Netns::new("lb-client").unwrap();
        let lb = Netns::new("lb-dut").unwrap();
        let (c0, b0) = (ifname("c"), ifname("b"));
        veth(&client, &c0, &lb, &b0, None).unwrap();
        let mut c = client.batch();
        c.link_up(&c0).unwrap().addr_add(&c0, "198.18.0.2/24").unwrap().addr_add(&c0, "2001:db8::2/64").unwrap();
        c.route_add("198.18.0.0/15", Some("198.18.0.1"), None).unwrap().route_add("2001:db8::/32", Some("2001:db8::1"), None).unwrap();
        c.apply().unwrap();
        // A veth hands XDP partially checksummed segments unless the sender
        // computes them: encapsulated, they would arrive broken.
        client.set_offload(&c0, Offload::TxChecksum, false).unwrap();
        let mut l = lb.batch();
        l.link_up(&b0).unwrap().addr_add(&b0, "198.18.0.1/24").unwrap().addr_add(&b0, "2001:db8::1/64").unwrap();
        l.apply().unwrap();
        lb.enable_forwarding().unwrap();
        let mut lb_ifs = vec![b0];
        let mut backends = Vec::new();
        let mut backend_ifs = Vec::new();
        let mut servers = Vec::new();
        for i in 0..BACKENDS {
            let ns = Netns::new(&format!("lb-backend{i}")).unwrap();
            let (bi, k0) = (ifname("b"), ifname("k"));
            veth(&lb, &bi, &ns, &k0, None).unwrap();
            let mut l = lb.batch();
            l.link_up(&bi).unwrap().addr_add(&bi, &format!("198.18.{}.1/24", 10 + i)).unwrap().addr_add(&bi, &format!("2001:db8:{}::1/64", 10 + i)).unwrap();
            l.apply().unwrap();
            let mut b = ns.batch();
            b.link_up(&k0).unwrap().addr_add(&k0, &format!("{}/24", backend4(i))).unwrap().addr_add(&k0, &format!("{}/64", backend6(i))).unwrap();
            b.addr_add("lo", &format!("{VIP4}/32")).unwrap().addr_add("lo", &format!("{VIP6}/128")).unwrap();
            b.route_add("default", Some(&format!("198.18.{}.1", 10 + i)), None)
                .unwrap()
                .route_add("::/0", Some(&format!("2001:db8:{}::1", 10 + i)), None)
                .unwrap();
            b.apply().unwrap();
            ns.set_offload(&k0, Offload::TxChecksum, false).unwrap();
            // The backends' replies to the client leave from the VIP on lo.
            ns.sysctl_set("net.ipv4.conf.all.rp_filter", "0").unwrap();
            xnf_ok(&ns, &["lb", "decap", "attach", &k0]);
            for vip in [VIP4, VIP6] {
                let addr = SocketAddr::new(vip.parse().unwrap(), 80);
                let listener = ns.run(move || TcpListener::bind(addr)).unwrap().unwrap();
                servers.push(std::thread::spawn(move || serve(listener, i)));
            }
            lb_ifs.push(bi);
            backend_ifs.push(k0);
            backends.push(ns);
        }
        // The client receives the ICMP errors the lb sends with XDP_TX only
        // if its veth end runs XDP (machine-facts); decap is a harmless one.
        xnf_ok(&client, &["lb", "decap", "attach", &c0]);
        let files = TempFiles::new(&format!("lb-{tag}"));
        let lab = Lab { client, lb, backends, backend_ifs, client_if: c0, lb_ifs, files, _servers: servers };
        lab.apply(&services(mode, &[1; BACKENDS]));
        let mut args = vec!["lb", "attach"];
        args.extend(lab.lb_ifs.iter().map(String::as_str));
        xnf_ok(&lab.lb, &args);
        lab.resolve();
        lab
    }

    fn apply(&self, text: &str) -> String {
        xnf_ok(&self.lb, &["lb", "apply", &self.files.write("services.toml", text)])
    }

    /// Neighbours of the backends, so that the first connections take XDP
    /// too (a miss goes to the kernel, which resolves it): a datagram to
    /// each makes the kernel resolve it.
    fn resolve(&self) {
        for i in 0..BACKENDS {
            for a in [backend4(i), backend6(i)] {
                let to = SocketAddr::new(a.parse().unwrap(), 9);
                self.lb.run(move || UdpSocket::bind(if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }).and_then(|u| u.send_to(b"x", to))).unwrap().unwrap();
                wait_for(&format!("the balancer's neighbour entry of {a}"), || {
                    let out = self.lb.exec(&["ip", "neigh", "show", &a]).unwrap();
                    String::from_utf8_lossy(&out.stdout).contains("lladdr")
                });
            }
        }
    }

    fn stats(&self) -> Value {
        serde_json::from_str(&xnf_ok(&self.lb, &["lb", "stats", "--json"])).unwrap()
    }

    fn counter(&self, name: &str) -> u64 {
        self.stats()["counters"][name].as_u64().unwrap()
    }

    /// Opens a connection from the client to `vip`:80 and returns it with
    /// the number of the backend that took it.
    fn connect(&self, vip: &str) -> (TcpStream, usize) {
        let to = SocketAddr::new(vip.parse().unwrap(), 80);
        let mut s =
            self.client.run(move || TcpStream::connect_timeout(&to, Duration::from_secs(5))).unwrap().unwrap_or_else(|e| panic!("connecting to {to}: {e}"));
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let who = ask(&mut s);
        (s, who)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let mut args = vec!["lb", "detach"];
        args.extend(self.lb_ifs.iter().map(String::as_str));
        let _ = xnf(&self.lb, &args);
        for (b, k) in self.backends.iter().zip(&self.backend_ifs) {
            let _ = xnf(b, &["lb", "decap", "detach", k]);
        }
        let _ = xnf(&self.client, &["lb", "decap", "detach", &self.client_if]);
    }
}

/// Answers every line on every connection with backend number `i`.
fn serve(listener: TcpListener, i: usize) {
    for conn in listener.incoming() {
        let Ok(conn) = conn else { return };
        std::thread::spawn(move || {
            let mut r = BufReader::new(conn.try_clone().unwrap());
            let mut w = conn;
            let mut line = String::new();
            while r.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
                if w.write_all(format!("{i}\n").as_bytes()).is_err() {
                    return;
                }
                line.clear();
            }
        });
    }
}

/// Which backend answers on `s`.
fn ask(s: &mut TcpStream) -> usize {
    s.write_all(b"who\n").unwrap();
    let mut buf = [0u8; 8];
    let n = s.read(&mut buf).unwrap_or_else(|e| panic!("no answer through the VIP: {e}"));
    std::str::from_utf8(&buf[..n]).unwrap().trim().parse().unwrap()
}

fn connections_reach_every_backend(mode: &str) {
    let lab = Lab::new(&format!("reach-{mode}"), mode);
    for vip in [VIP4, VIP6] {
        let mut per_backend = [0usize; BACKENDS];
        let conns: Vec<(TcpStream, usize)> = (0..30).map(|_| lab.connect(vip)).collect();
        for (_, who) in &conns {
            per_backend[*who] += 1;
        }
        // 30 connections over 3 equal backends: each takes some (all on
        // two of them has odds of 1 in 70,000).
        assert!(per_backend.iter().all(|&n| n > 0), "{mode} {vip}: connections per backend {per_backend:?}");
        for (mut s, who) in conns {
            assert_eq!(ask(&mut s), who, "{mode} {vip}: a connection changed backend");
        }
    }
    let s = lab.stats();
    let c = &s["counters"];
    assert!(c["ct-miss"].as_u64().unwrap() + c["ct-syn"].as_u64().unwrap() >= 60, "{s}");
    assert!(c["ct-hit"].as_u64().unwrap() > 0, "{s}");
    assert!(c["redirect"].as_u64().unwrap() >= 60 * 3, "the lb sent fewer packets than three per connection: {s}");
    assert_eq!(c["no-neigh"], 0, "{s}");
    assert_eq!(c["error"], 0, "{s}");
    for b in &lab.backends {
        let d: Value = serde_json::from_str(&xnf_ok(b, &["lb", "decap", "status", "--json"])).unwrap();
        let n = |k: &str| d["counters"][k].as_u64().unwrap_or_else(|| panic!("no counter {k} in {d}"));
        let stripped = if mode == "gue" { n("gue") } else { n("ipip") + n("ip6ip6") };
        assert!(stripped > 0, "backend {} decapsulated nothing: {d}", b.name());
    }
}

#[test]
fn tcp_through_the_vip_with_ipip_reaches_every_backend_and_replies_reach_the_client() {
    connections_reach_every_backend("ipip");
}

#[test]
fn tcp_through_the_vip_with_gue_reaches_every_backend_and_replies_reach_the_client() {
    connections_reach_every_backend("gue");
}

#[test]
fn draining_a_backend_keeps_its_connections_while_new_ones_go_elsewhere() {
    let lab = Lab::new("drain", "ipip");
    let old: Vec<(TcpStream, usize)> = (0..30).map(|_| lab.connect(VIP4)).collect();
    let on_zero = old.iter().filter(|(_, w)| *w == 0).count();
    assert!(on_zero > 0, "no connection landed on backend 0");
    let out = lab.apply(&services("ipip", &[0, 1, 1]));
    assert!(out.contains("weight 0 (was 1)"), "apply did not say what changed: {out}");
    for (mut s, who) in old {
        assert_eq!(ask(&mut s), who, "an established connection moved when its backend was drained");
    }
    for _ in 0..30 {
        let (_, who) = lab.connect(VIP4);
        assert_ne!(who, 0, "a new connection went to the drained backend");
    }
    // Removed instead of drained: its connections' entries stop matching,
    // and their packets go where the table says (a reset, for TCP).
    let (mut kept, _) = (0..60).map(|_| lab.connect(VIP4)).find(|(_, w)| *w == 1).expect("a connection on backend 1");
    let stale = lab.counter("ct-stale");
    let text = services("ipip", &[1, 1, 1]).replace(&format!("\n[[service.backend]]\naddress = \"{}\"\nweight = 1\n", backend4(1)), "");
    lab.apply(&text);
    let _ = kept.write_all(b"who\n");
    wait_for("a packet of a removed backend's connection meeting its stale entry", || lab.counter("ct-stale") > stale);
}

#[test]
fn a_packet_too_big_once_encapsulated_is_answered_with_frag_needed_and_the_client_lowers_its_mtu() {
    let lab = Lab::new("mtu", "ipip");
    // The backends' segment takes 1400 bytes: 1380 are left inside IPIP.
    for i in 0..BACKENDS {
        lab.lb.set_mtu(&lab.lb_ifs[i + 1], 1400).unwrap();
        lab.backends[i].set_mtu(&lab.backend_ifs[i], 1400).unwrap();
    }
    let sent = lab.counter("icmp-sent");
    let to: SocketAddr = SocketAddr::new(VIP4.parse().unwrap(), 5300);
    let sock = lab.client.run(|| UdpSocket::bind("198.18.0.2:0")).unwrap().unwrap();
    // IP_PMTUDISC_DO: DF set, and the kernel's path MTU cache consulted.
    let fd = std::os::fd::AsRawFd::as_raw_fd(&sock);
    let on: libc::c_int = libc::IP_PMTUDISC_DO;
    // SAFETY: a valid socket and option of the right size.
    assert_eq!(unsafe { libc::setsockopt(fd, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, (&on as *const libc::c_int).cast(), 4) }, 0);
    let _ = sock.send_to(&[0u8; 1450 - 28], to);
    wait_for("the lb's frag-needed", || lab.counter("icmp-sent") > sent);
    // The kernel took the error: its path MTU to the VIP is what is left
    // inside IPIP, and a datagram that no longer fits is refused at once.
    wait_for("the client's path MTU of 1380", || String::from_utf8_lossy(&lab.client.exec(&["ip", "route", "get", VIP4]).unwrap().stdout).contains("mtu 1380"));
    let e = sock.send_to(&[0u8; 1450 - 28], to).expect_err("the client sent a datagram beyond its path MTU");
    assert_eq!(e.raw_os_error(), Some(libc::EMSGSIZE), "{e}");
    assert_eq!(lab.counter("icmp-sent"), sent + 1, "one error, for the one datagram that went out");
}

#[test]
fn a_bad_service_file_changes_nothing_and_two_applies_at_once_leave_one_file_whole() {
    let lab = Lab::new("bad", "ipip");
    let before = xnf_ok(&lab.lb, &["lb", "status", "--json"]);
    let bad = services("ipip", &[1, 1, 1]).replace("weight = 1\n", "weight = 70000\n");
    // Nine backends of three services, each named on a line of its own.
    let errs = xnf_errs(&lab.lb, &["lb", "apply", &lab.files.write("bad.toml", &bad)]);
    assert_eq!(errs.len(), 9, "{errs:#?}");
    assert!(errs.iter().all(|e| e.contains("line ") && e.contains("weight: 70000")), "an error does not name the line and field: {errs:#?}");
    assert_eq!(xnf_ok(&lab.lb, &["lb", "status", "--json"]), before, "a refused file changed the status");
    let (_, who) = lab.connect(VIP4);
    assert!(who < BACKENDS);
    // Two applies at once: the lb's lock takes them one after the other,
    // both succeed, and the data plane holds one file whole, not a mix.
    let one = lab.files.write("one.toml", &services("gue", &[1, 1, 1]));
    let two = lab.files.write("two.toml", &services("ipip", &[1, 0, 1]));
    let (r1, r2) = std::thread::scope(|s| {
        let a = s.spawn(|| xnf(&lab.lb, &["lb", "apply", &one]));
        let b = s.spawn(|| xnf(&lab.lb, &["lb", "apply", &two]));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert!(r1.status.success() && r2.status.success(), "{}{}", String::from_utf8_lossy(&r1.stderr), String::from_utf8_lossy(&r2.stderr));
    let st: Value = serde_json::from_str(&xnf_ok(&lab.lb, &["lb", "status", "--json"])).unwrap();
    let modes: Vec<&str> = st["services"].as_array().unwrap().iter().map(|s| s["mode"].as_str().unwrap()).collect();
    let drained: Vec<bool> = st["services"][0]["backends"].as_array().unwrap().iter().map(|b| b["drained"].as_bool().unwrap()).collect();
    let whole = (modes.iter().all(|m| m.starts_with("gue")) && drained == [false, false, false])
        || (modes.iter().all(|m| *m == "ipip") && drained == [false, true, false]);
    assert!(whole, "after two applies at once the lb holds a mix: {st}");
    let (_, who) = lab.connect(VIP4);
    assert!(who < BACKENDS);
    // Users run tools under `ip netns exec`: the same state is found.
    let seen: Value = serde_json::from_str(&xnf_ip_netns_exec_ok(&lab.lb, &["lb", "status", "--json"])).unwrap();
    assert_eq!(seen["services"].as_array().unwrap().len(), 3, "{seen}");
}

/// A SYN to VIP4:80 in a frame to `dst`, written to the client's veth end
/// as it is (its kernel would only send to the lb's MAC). From an address
/// no one holds: the backend's SYN-ACK finds no client to answer it with
/// a reset, which the lb would balance too.
fn raw_syn(lab: &Lab, dst: MacAddr, sport: u16) {
    let src = lab.client.mac(&lab.client_if).unwrap();
    let frame =
        PacketBuilder::ethernet(src, dst).ip("198.18.0.77".parse().unwrap(), VIP4.parse().unwrap()).tcp(sport, 80, TcpFlags::SYN).seq(1).payload(b"").build();
    let dev = lab.client_if.clone();
    lab.client.run(move || packet_socket(&dev).and_then(|s| send_frame(&s, &frame))).unwrap().unwrap();
}

#[test]
fn on_a_promiscuous_interface_only_frames_to_its_own_mac_are_balanced() {
    let lab = Lab::new("mac", "ipip");
    let b0 = &lab.lb_ifs[0];
    lab.lb.exec(&["ip", "link", "set", "dev", b0, "promisc", "on"]).unwrap();
    let own = lab.lb.mac(b0).unwrap();
    let counters = |names: &[&str]| -> Vec<u64> { names.iter().map(|n| lab.counter(n)).collect() };
    let names = ["not-our-mac", "ct-miss", "redirect", "pass", "drop"];
    // Another host's unicast MAC, broadcast and multicast: not balanced,
    // counted, and nothing else moves.
    for (i, dst) in [MacAddr([0x02, 0, 0, 0, 0x77, 0x01]), MacAddr([0xff; 6]), MacAddr([0x01, 0, 0x5e, 0, 0, 1])].into_iter().enumerate() {
        let before = counters(&names);
        raw_syn(&lab, dst, 41000 + i as u16);
        wait_for(&format!("not-our-mac counting a frame to {dst}"), || lab.counter("not-our-mac") > before[0]);
        assert_eq!(counters(&names), vec![before[0] + 1, before[1], before[2], before[3], before[4]], "a frame to {dst}: {names:?}");
    }
    // dut's own MAC: balanced (a new flow, redirected to a backend).
    let before = counters(&names);
    raw_syn(&lab, own, 42000);
    wait_for("the lb balancing a SYN to its own MAC", || lab.counter("redirect") > before[2]);
    assert_eq!(counters(&names), vec![before[0], before[1] + 1, before[2] + 1, before[3], before[4]], "a frame to dut's MAC: {names:?}");
    // A MAC changed after attach is taken by the next apply (or attach or
    // detach); until then, frames to the new MAC are not balanced.
    let new = MacAddr([0x02, 0, 0, 0, 0x77, 0x02]);
    lab.lb.exec(&["ip", "link", "set", "dev", b0, "address", &new.to_string()]).unwrap();
    let before = counters(&names);
    raw_syn(&lab, new, 43000);
    wait_for("not-our-mac counting a frame to the new MAC before an apply", || lab.counter("not-our-mac") > before[0]);
    lab.apply(&services("ipip", &[1; BACKENDS]));
    let before = counters(&names);
    raw_syn(&lab, new, 43001);
    wait_for("the lb balancing a SYN to its new MAC after an apply", || lab.counter("redirect") > before[2]);
    raw_syn(&lab, own, 43002);
    wait_for("not-our-mac counting a frame to the old MAC", || lab.counter("not-our-mac") > before[0]);
    // The client's kernel, told the new MAC, connects through it.
    lab.client.exec(&["ip", "neigh", "flush", "dev", &lab.client_if]).unwrap();
    let (_, who) = lab.connect(VIP4);
    assert!(who < BACKENDS, "a connection through the new MAC");
}

#[test]
fn a_dsr_backend_routed_through_a_gateway_is_refused_and_nothing_changes() {
    let lab = Lab::new("dsr-onlink", "ipip");
    // 198.18.30.0/24 and 2001:db8:30::/64 lie behind backend 0's address:
    // reachable, but through a gateway.
    let mut l = lab.lb.batch();
    l.route_add("198.18.30.0/24", Some(&backend4(0)), None).unwrap().route_add("2001:db8:30::/64", Some(&backend6(0)), None).unwrap();
    l.apply().unwrap();
    let before = xnf_ok(&lab.lb, &["lb", "status", "--json"]);
    let dsr = |backends: &[&str]| -> String {
        let mut t = services("ipip", &[1; BACKENDS]);
        for (name, vip) in [("dsr4", "198.18.100.2"), ("dsr6", "2001:db8:100::2")] {
            t += &format!("\n[[service]]\nname = \"{name}\"\nvip = \"{vip}\"\nproto = \"tcp\"\nport = 80\nmode = \"dsr\"\n");
            for b in backends.iter().filter(|b| b.contains(':') == vip.contains(':')) {
                t += &format!("\n[[service.backend]]\naddress = \"{b}\"\n");
            }
        }
        t
    };
    let bad = lab.files.write("dsr-bad.toml", &dsr(&[&backend4(1), "198.18.30.5", &backend6(1), "2001:db8:30::5"]));
    let errs = xnf_errs(&lab.lb, &["lb", "apply", &bad]);
    assert_eq!(errs.len(), 2, "one line per backend behind a gateway: {errs:#?}");
    let (gw4, gw6) = (format!("via {}", backend4(0)), format!("via {}", backend6(0)));
    assert!(errs[0].contains("dsr4/198.18.30.5: address: not on-link") && errs[0].contains(&gw4) && errs[0].contains("mode = \"ipip\""), "{errs:#?}");
    assert!(errs[1].contains("dsr6/2001:db8:30::5: address: not on-link") && errs[1].contains(&gw6), "{errs:#?}");
    assert!(errs.iter().all(|e| e.contains("dsr-bad.toml: line ")), "{errs:#?}");
    assert_eq!(xnf_ok(&lab.lb, &["lb", "status", "--json"]), before, "a refused file changed the status");
    // On-link backends of the same services are accepted.
    let good = lab.files.write("dsr-good.toml", &dsr(&[&backend4(1), &backend6(1)]));
    xnf_ok(&lab.lb, &["lb", "apply", &good]);
    let st: Value = serde_json::from_str(&xnf_ok(&lab.lb, &["lb", "status", "--json"])).unwrap();
    assert_eq!(st["services"].as_array().unwrap().len(), 5, "{st}");
}
