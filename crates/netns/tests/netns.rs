//! Integration tests; they create real namespaces and need root.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use xnf_netns::{cleanup_stale, ifname, veth, Family, LineConfig, LineTopology, Mac, Netns, Offload, Topology};

/// Names from `ip netns list`.
fn listed() -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().expect("run ip netns list");
    assert!(out.status.success(), "ip netns list: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.split_whitespace().next().map(str::to_owned)).collect()
}

fn exists(name: &str) -> bool {
    listed().iter().any(|n| n == name)
}

#[test]
fn drop_removes_namespace() {
    let ns = Netns::new("drop").unwrap();
    let name = ns.name().to_owned();
    assert!(name.starts_with(&format!("xnf-{}-", std::process::id())), "{name}");
    assert!(name.ends_with("-drop"), "{name}");
    assert!(exists(&name));
    assert!(ns.path().exists());
    assert!(xnf_netns::live_namespaces().contains(&name));
    drop(ns);
    assert!(!exists(&name), "{name} still listed after drop");
    assert!(!xnf_netns::live_namespaces().contains(&name));

    let ns = Netns::new("delete").unwrap();
    let name = ns.name().to_owned();
    ns.delete().unwrap();
    assert!(!exists(&name));
}

#[test]
fn panic_still_removes_namespaces() {
    let names = Mutex::new(Vec::new());
    let result = catch_unwind(AssertUnwindSafe(|| {
        let ns = Netns::new("panic").unwrap();
        names.lock().unwrap().push(ns.name().to_owned());
        let line = LineTopology::new(&LineConfig::default()).unwrap();
        names.lock().unwrap().extend(line.topology().nodes().iter().map(|n| n.name().to_owned()));
        for n in names.lock().unwrap().iter() {
            assert!(exists(n), "{n} should exist before the panic");
        }
        panic!("deliberate");
    }));
    assert!(result.is_err());
    let names = names.into_inner().unwrap();
    assert_eq!(names.len(), 4);
    for n in &names {
        assert!(!exists(n), "{n} left behind after panic");
    }
}

#[test]
fn topology_drops_all() {
    let mut topo = Topology::new();
    topo.add("a").unwrap();
    topo.add("b").unwrap();
    let names: Vec<String> = topo.nodes().iter().map(|n| n.name().to_owned()).collect();
    assert_eq!(topo.node("b").unwrap().name(), names[1]);
    assert!(topo.node("c").is_none());
    drop(topo);
    for n in &names {
        assert!(!exists(n), "{n}");
    }
}

#[test]
fn run_is_inside_namespace() {
    let ns = Netns::new("run").unwrap();
    let peer = Netns::new("peer").unwrap();
    let (a, b) = (ifname("a"), ifname("b"));
    let pair = veth(&ns, &a, &peer, &b, Some(3)).unwrap();
    assert_eq!((pair.a.as_str(), pair.b_ns.as_str()), (a.as_str(), peer.name()));

    // The veth end is visible in the namespace, not in the host.
    let dev = ns.run(|| std::fs::read_to_string("/proc/thread-self/net/dev").unwrap()).unwrap();
    assert!(dev.contains(&format!("{a}:")), "{dev}");
    assert!(!dev.contains(&format!("{b}:")), "{dev}");
    let host = Command::new("ip").args(["link", "show", "dev", &a]).output().unwrap();
    assert!(!host.status.success(), "{a} must not exist in the host namespace");
    let detail = ns.ip(&["-d", "link", "show", "dev", &a]).unwrap();
    let detail = String::from_utf8_lossy(&detail.stdout);
    assert!(detail.contains("numtxqueues 3") && detail.contains("numrxqueues 3"), "{detail}");

    assert_eq!(ns.ifindex("lo").unwrap(), 1);
    assert!(ns.ifindex(&a).unwrap() > 1);
    assert!(ns.ifindex("nope").is_err());

    let mac: Mac = "02:00:00:00:00:0a".parse().unwrap();
    ns.set_mac(&a, mac).unwrap();
    assert_eq!(ns.mac(&a).unwrap(), mac);
    ns.set_mtu(&a, 1400).unwrap();
    let shown = ns.ip(&["link", "show", "dev", &a]).unwrap();
    assert!(String::from_utf8_lossy(&shown.stdout).contains("mtu 1400"));
    // Up and down, as netlink reports them.
    let up = || ns.run(|| xnf_netns::netlink::link_by_name(&a).unwrap().up).unwrap();
    ns.link_up(&a).unwrap();
    assert!(up());
    ns.link_down(&a).unwrap();
    assert!(!up());

    // Panics propagate to the caller.
    let caught = catch_unwind(AssertUnwindSafe(|| ns.run(|| panic!("inside"))));
    assert!(caught.is_err());
}

/// Counters are read from files opened once inside the namespace: later
/// readings, from other threads, still show that namespace as it is now.
#[test]
fn counters_read_again_show_the_namespace_now() {
    let ns = Netns::new("counters").unwrap();
    let peer = Netns::new("cpeer").unwrap();
    assert!(ns.all_link_stats().unwrap().contains_key("lo"));
    let before = ns.snmp().unwrap().value("Udp", "NoPorts").unwrap();
    let (a, b) = (ifname("a"), ifname("b"));
    veth(&ns, &a, &peer, &b, None).unwrap();
    ns.ip_batch(&["addr add 198.18.0.1/24 dev lo".to_string()]).unwrap();
    let seen = std::thread::scope(|s| s.spawn(|| ns.all_link_stats().unwrap()).join().unwrap());
    assert!(seen.contains_key(&a) && !seen.contains_key(&b), "{seen:?}");
    // A datagram to a port nobody listens on moves the namespace's NoPorts.
    let sock = ns.run(|| UdpSocket::bind("198.18.0.1:0").unwrap()).unwrap();
    sock.send_to(b"x", "198.18.0.1:9").unwrap();
    assert_eq!(ns.snmp().unwrap().value("Udp", "NoPorts").unwrap(), before + 1);
    assert_eq!(peer.snmp().unwrap().value("Udp", "NoPorts").unwrap(), 0);
}

/// A socket closed and bound again on the same port while another thread
/// spawns processes: each child holds a copy of the old socket until its
/// exec, so a plain bind fails now and then with EADDRINUSE (within a few
/// hundred binds here); `Netns::bind` waits that out. Mutation: `ns.run(..)`
/// in place of `ns.bind(..)` failed at bind 5, 44 and 166 of the 20,000.
#[test]
fn bind_waits_out_a_copy_held_by_a_child_being_spawned() {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    let ns = Netns::new("rebind").unwrap();
    ns.ip_batch(&["link set lo up".to_string(), "addr add 198.18.0.1/32 dev lo".to_string()]).unwrap();
    let (stop, spawned) = (AtomicBool::new(false), AtomicU32::new(0));
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                Command::new("true").status().unwrap();
                spawned.fetch_add(1, Ordering::Relaxed);
            }
        });
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
            for i in 0..20_000 {
                let sock = ns.bind(|| UdpSocket::bind("198.18.0.1:9000")).unwrap_or_else(|e| panic!("bind {i}: {e:#}"));
                drop(sock);
            }
        }));
        stop.store(true, Ordering::Relaxed);
        result.unwrap();
    });
    assert!(spawned.load(Ordering::Relaxed) > 0, "no process was spawned meanwhile: the race was not tried");
}

#[test]
fn config_helpers_check_and_report() {
    let ns = Netns::new("cfg").unwrap();
    let err = format!("{:#}", ns.addr_add("lo", "10.0.0.1/8").unwrap_err());
    assert!(err.contains("not a test address"), "{err}");
    assert!(ns.route_add("8.8.8.8/32", None, Some("lo")).is_err());

    ns.addr_add("lo", "198.18.200.1/32").unwrap();
    ns.addr_add("lo", "2001:db8:200::1/128").unwrap();
    ns.route_add("198.19.0.0/16", None, Some("lo")).unwrap();
    ns.route_replace("198.19.0.0/16", Some("198.18.200.1"), Some("lo")).unwrap();
    let routes = String::from_utf8_lossy(&ns.ip(&["route"]).unwrap().stdout).into_owned();
    assert!(routes.contains("198.19.0.0/16 via 198.18.200.1"), "{routes}");
    ns.route_del("198.19.0.0/16").unwrap();
    let routes = String::from_utf8_lossy(&ns.ip(&["route"]).unwrap().stdout).into_owned();
    assert!(!routes.contains("198.19.0.0/16"), "{routes}");

    // Failing commands name the command, the namespace and what to check,
    // on one line.
    let err = format!("{:#}", ns.link_up("xnfnope").unwrap_err());
    assert!(err.contains(&format!("`link set dev xnfnope up` in namespace {}", ns.name())), "{err}");
    assert!(err.contains("no interface xnfnope"), "{err}");
    assert!(!err.contains('\n'), "{err}");
    // The kernel's refusal comes with its reason; a batch stops there.
    let mut b = ns.batch();
    b.route_add("198.19.1.0/24", Some("198.18.99.1"), None).unwrap().addr_add("lo", "198.18.201.1/32").unwrap();
    let err = format!("{:#}", b.apply().unwrap_err());
    assert!(err.contains("`route add 198.19.1.0/24 via 198.18.99.1` in namespace") && err.contains("Network is unreachable"), "{err}");
    assert!(!err.contains('\n'), "{err}");
    let addrs = String::from_utf8_lossy(&ns.ip(&["-o", "addr"]).unwrap().stdout).into_owned();
    assert!(!addrs.contains("198.18.201.1"), "the batch went on: {addrs}");
    let err = format!("{:#}", ns.addr_add("lo", "198.18.200.1/32").unwrap_err());
    assert!(err.contains("File exists"), "{err}");
    let err = format!("{:#}", ns.ip_batch(&["link set lo up", "link set xnfnope up"]).unwrap_err());
    assert!(err.contains("-batch") && err.contains("2: link set xnfnope up"), "{err}");
    let err = format!("{:#}", ns.exec(&["false"]).unwrap_err());
    assert!(err.contains(&format!("ip netns exec {} false", ns.name())), "{err}");
    let out = ns.exec(&["ip", "-o", "addr"]).unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("198.18.200.1/32"));

    // sysctls are per namespace; non-net keys are refused.
    let other = Netns::new("cfg2").unwrap();
    ns.enable_forwarding().unwrap();
    assert_eq!(ns.sysctl_get("net.ipv4.ip_forward").unwrap(), "1");
    assert_eq!(ns.sysctl_get("net/ipv6/conf/all/forwarding").unwrap(), "1");
    assert_eq!(other.sysctl_get("net.ipv4.ip_forward").unwrap(), "0");
    assert!(ns.sysctl_set("kernel.hostname", "x").is_err());
    assert!(ns.sysctl_get("net.ipv4.no_such_key").is_err());
}

/// Sends one UDP datagram from gen to sink and checks it arrived unchanged.
fn udp_through(t: &LineTopology, from: IpAddr, to: IpAddr) {
    let rx = t.sink().run(|| UdpSocket::bind(SocketAddr::new(to, 0))).unwrap().unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let dest = rx.local_addr().unwrap();
    t.gen().run(|| UdpSocket::bind(SocketAddr::new(from, 0))?.send_to(b"xnf-hello", dest)).unwrap().unwrap();
    let mut buf = [0u8; 64];
    let (n, src) = rx.recv_from(&mut buf).expect("datagram from gen did not reach sink");
    assert_eq!(&buf[..n], b"xnf-hello");
    assert_eq!(src.ip(), from);
}

#[test]
fn line_topology_forwards() {
    let t = LineTopology::new(&LineConfig { queues: Some(2) }).unwrap();
    for name in [&t.gen_if, &t.dut_gen_if, &t.dut_sink_if, &t.sink_if] {
        assert!(name.starts_with("xnf") && name.len() <= 15, "{name}");
    }
    assert_eq!(t.dut().ifindex(&t.dut_gen_if).unwrap(), t.dut_gen_ifindex);
    assert_ne!(t.dut_gen_ifindex, t.dut_sink_ifindex);
    assert_ne!(t.gen_mac, t.dut_gen_mac);
    assert_eq!(t.sink_v4.to_string(), "198.18.1.2");
    assert_eq!(t.gen_v6.to_string(), "2001:db8::1");
    // Settled at once: dut's two subnets and two link-local routes, every
    // end operationally up.
    assert_eq!(t.dut().route_count(Family::V6, None).unwrap(), 4);
    for (ns, dev) in [(t.gen(), &t.gen_if), (t.dut(), &t.dut_gen_if), (t.dut(), &t.dut_sink_if), (t.sink(), &t.sink_if)] {
        let link = ns.run(|| xnf_netns::netlink::link_by_name(dev).unwrap()).unwrap();
        assert!(link.up && link.oper_up, "{link:?}");
    }

    let dut_before = t.dut().snmp().unwrap();
    let gen_before = t.gen().snmp().unwrap();
    let sink_rx_before = t.sink().link_stats(&t.sink_if).unwrap();

    let have_ping = ping_available();
    if have_ping {
        t.gen().exec(&["ping", "-c1", "-W1", &t.sink_v4.to_string()]).unwrap();
        t.gen().exec(&["ping", "-6", "-c1", "-W1", &t.sink_v6.to_string()]).unwrap();
    }
    udp_through(&t, t.gen_v4.into(), t.sink_v4.into());
    udp_through(&t, t.gen_v6.into(), t.sink_v6.into());

    let dut_after = t.dut().snmp().unwrap();
    let gen_after = t.gen().snmp().unwrap();
    let v4 = dut_after.value("Ip", "ForwDatagrams").unwrap() - dut_before.value("Ip", "ForwDatagrams").unwrap();
    let v6 = dut_after.value("Ip6", "OutForwDatagrams").unwrap() - dut_before.value("Ip6", "OutForwDatagrams").unwrap();
    assert!(v4 >= 1, "dut forwarded no IPv4 datagram");
    assert!(v6 >= 1, "dut forwarded no IPv6 datagram");
    // Counters are per namespace: gen forwarded nothing.
    assert_eq!(gen_after.value("Ip", "ForwDatagrams").unwrap(), gen_before.value("Ip", "ForwDatagrams").unwrap());
    assert!(dut_after.get("Icmp", "InTimeExcds").is_some());
    assert!(dut_after.get("Icmp6", "InTimeExcds").is_some());
    assert!(dut_after.get("Ip", "InHdrErrors").is_some());

    let sink_rx = t.sink().link_stats(&t.sink_if).unwrap();
    assert!(sink_rx.rx_packets >= sink_rx_before.rx_packets + 2, "{sink_rx:?}");
    assert!(sink_rx.rx_bytes > sink_rx_before.rx_bytes);

    // A permanent neighbour entry shows up.
    t.gen().neigh_add(&t.dut_gen_v4.to_string(), t.dut_gen_mac, &t.gen_if).unwrap();
    let neigh = t.gen().ip(&["neigh", "show", "dev", &t.gen_if]).unwrap();
    let neigh = String::from_utf8_lossy(&neigh.stdout).into_owned();
    assert!(neigh.contains(&format!("{} lladdr {} PERMANENT", t.dut_gen_v4, t.dut_gen_mac)), "{neigh}");
    t.gen().neigh_del(&t.dut_gen_v4.to_string(), &t.gen_if).unwrap();
}

fn ping_available() -> bool {
    Command::new("ping").arg("-V").output().is_ok()
}

#[test]
fn cleanup_stale_removes_dead_owner() {
    // A pid that certainly existed and is now dead (reaped).
    let mut child = Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let name = format!("xnf-{dead}-0-stale");

    /// Removes the test namespace even if the assertions fail.
    struct Guard(String);
    impl Drop for Guard {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
        }
    }
    let status = Command::new("ip").args(["netns", "add", &name]).status().unwrap();
    assert!(status.success());
    let _guard = Guard(name.clone());
    let mine = Netns::new("alive").unwrap();

    let removed = cleanup_stale().unwrap();
    assert!(removed.contains(&name), "{removed:?}");
    assert!(!exists(&name));
    assert!(!removed.iter().any(|n| n == mine.name()));
    assert!(exists(mine.name()));
}

#[test]
fn offload_toggle() {
    let ns = Netns::new("ethtool").unwrap();
    let (a, b) = (ifname("a"), ifname("b"));
    veth(&ns, &a, &ns, &b, None).unwrap();
    // The ethtool program must see what the ioctls set: an independent
    // reading, so it is required (make test installs it), never skipped.
    Command::new("ethtool").arg("--version").output().expect("this test needs the ethtool program (apt-get install ethtool; make test installs it)");
    let shown = |feature: &str| {
        let k = ns.exec(&["ethtool", "-k", &a]).unwrap();
        let text = String::from_utf8_lossy(&k.stdout).into_owned();
        text.lines().find(|l| l.starts_with(feature)).unwrap_or_default().to_owned()
    };
    for (offload, feature) in [(Offload::Gro, "generic-receive-offload:"), (Offload::TxChecksum, "tx-checksumming:"), (Offload::TxVlan, "tx-vlan-offload:")] {
        for on in [false, true] {
            ns.set_offload(&a, offload, on).unwrap();
            assert_eq!(ns.offload(&a, offload).unwrap(), on, "{}", offload.name());
            let want = if on { "on" } else { "off" };
            assert!(shown(feature).contains(want), "{feature} {}", shown(feature));
        }
    }
    let err = format!("{:#}", ns.set_offload("xnfnosuch", Offload::Gro, true).unwrap_err());
    assert!(err.contains("xnfnosuch") && err.contains(ns.name()), "{err}");
}
