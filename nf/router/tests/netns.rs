//! `xnf router` on real veths between namespaces (gen -> dut -> sink),
//! with real traffic, checking counters on both sides.

use std::net::UdpSocket;
use std::path::Path;

use xnf_testrun::cli::{count_received, follower_running, send_paced, wait_for, xnf, xnf_err, xnf_ok, RoutedLine};

#[test]
fn forwards_ipv4_and_ipv6_in_xdp_while_kernel_counters_stay_still() {
    let mut r = RoutedLine::new(&[]);
    r.attach(&[]);
    r.resolve_sink();
    let (fw4, fw6, redir) = (r.forw_v4(), r.forw_v6(), r.redirected());

    assert_eq!(r.send_udp(false, 1000), 1000, "IPv4 datagrams lost");
    assert_eq!(r.send_udp(true, 1000), 1000, "IPv6 datagrams lost");

    assert_eq!(r.redirected() - redir, 2000, "xnf should have redirected every datagram");
    assert_eq!(r.forw_v4(), fw4, "kernel Ip ForwDatagrams moved: the kernel forwarded");
    assert_eq!(r.forw_v6(), fw6, "kernel Ip6 OutForwDatagrams moved: the kernel forwarded");
}

#[test]
fn neighbour_miss_goes_to_the_kernel_once_then_xdp() {
    let mut r = RoutedLine::new(&[]);
    r.attach(&[]);
    let fw4 = r.forw_v4();
    // No neighbour entry for sink yet: the kernel forwards and resolves it.
    assert_eq!(r.send_udp(false, 1), 1);
    assert_eq!(r.reason("no-neigh"), 1);
    assert_eq!(r.forw_v4(), fw4 + 1, "the kernel should have forwarded the first packet");
    r.resolve_sink(); // one IPv6 packet: its own neighbour miss
    assert_eq!(r.reason("no-neigh"), 2);
    let redir = r.redirected();
    assert_eq!(r.send_udp(false, 100), 100);
    assert_eq!(r.redirected() - redir, 100);
    assert_eq!(r.reason("no-neigh"), 2, "a neighbour miss after resolution");
    assert_eq!(r.forw_v4(), fw4 + 1, "later packets went through the kernel");
}

#[test]
fn route_change_mid_stream_is_followed_at_once() {
    let mut r = RoutedLine::new(&[]);
    r.attach(&[]);
    r.resolve_sink();
    let sink = format!("{}/32", r.line.sink_v4);
    assert_eq!(r.send_udp(false, 10), 10);

    r.dut().ip(&["route", "add", "blackhole", &sink]).unwrap();
    let drops = r.reason("blackhole");
    assert_eq!(r.send_udp(false, 10), 0, "blackholed traffic arrived");
    assert_eq!(r.reason("blackhole") - drops, 10, "the router did not see the new route");

    r.dut().ip(&["route", "del", "blackhole", &sink]).unwrap();
    let redir = r.redirected();
    assert_eq!(r.send_udp(false, 10), 10);
    assert_eq!(r.redirected() - redir, 10);
}

#[test]
fn detach_restores_kernel_forwarding_with_no_state_left() {
    let mut r = RoutedLine::new(&[]);
    r.attach(&[]);
    r.resolve_sink();
    let pins = Path::new("/sys/fs/bpf/xnf").join(r.dut().run(netns_key).unwrap());
    assert!(pins.exists(), "attach pinned nothing at {}", pins.display());
    r.detach();

    assert!(!pins.exists(), "pins left after detach: {}", pins.display());
    for dev in [&r.line.dut_gen_if, &r.line.dut_sink_if] {
        let out = r.dut().ip(&["link", "show", "dev", dev]).unwrap();
        assert!(!String::from_utf8_lossy(&out.stdout).contains("prog/xdp"), "{dev} still has XDP");
    }
    let fw4 = r.forw_v4();
    assert_eq!(r.send_udp(false, 100), 100);
    assert_eq!(r.forw_v4() - fw4, 100, "the kernel should forward again");
    let err = xnf_err(r.dut(), &["router", "status"]);
    assert!(err.contains("not attached"), "{err}");
    wait_for("the follower to exit", || !follower_running(r.dut()));
}

#[test]
fn ttl_1_makes_the_sender_receive_time_exceeded() {
    let mut r = RoutedLine::new(&[]);
    r.attach(&[]);
    r.resolve_sink();
    for v6 in [false, true] {
        let (proto, counter) = if v6 { ("Icmp6", "InTimeExcds") } else { ("Icmp", "InTimeExcds") };
        let before = r.line.gen().snmp().unwrap().value(proto, counter).unwrap();
        let ttl_before = r.reason("ttl");
        let tx: UdpSocket = r.gen_socket(v6);
        if v6 {
            set_hop_limit_v6(&tx, 1);
        } else {
            tx.set_ttl(1).unwrap();
        }
        tx.send_to(b"expire", r.sink_addr(v6, 9)).unwrap();
        wait_for("an ICMP time-exceeded at gen", || r.line.gen().snmp().unwrap().value(proto, counter).unwrap() > before);
        assert_eq!(r.reason("ttl") - ttl_before, 1, "the router should have passed it with reason ttl");
    }
}

#[test]
fn keeps_forwarding_after_the_attaching_process_exited() {
    let mut r = RoutedLine::new(&[]);
    // --no-follow: no xnf process of any kind remains after this returns.
    r.attach(&["--no-follow"]);
    assert!(!follower_running(r.dut()));
    r.resolve_sink();
    let redir = r.redirected();
    assert_eq!(r.send_udp(false, 200), 200);
    assert_eq!(r.redirected() - redir, 200, "nothing forwarded once xnf exited");
}

#[test]
fn changing_the_fib_mode_replaces_the_program_without_a_gap() {
    let mut r = RoutedLine::new(&[]);
    r.attach(&[]);
    r.resolve_sink();
    let fw4 = r.forw_v4();
    let rx = r.sink_socket(false, 9100);
    let tx = r.gen_socket(false);
    let to = r.sink_addr(false, 9100);
    let received = std::thread::scope(|s| {
        let receiver = s.spawn(|| count_received(&rx, 6000));
        let sender = s.spawn(|| send_paced(&tx, to, 6000));
        for fib in ["direct", "full", "direct"] {
            let (g, si) = (r.line.dut_gen_if.clone(), r.line.dut_sink_if.clone());
            let out = xnf_ok(r.dut(), &["router", "attach", &g, &si, "--fib", fib]);
            assert!(out.contains("replaced"), "{out}");
        }
        sender.join().unwrap();
        receiver.join().unwrap()
    });
    assert_eq!(received, 6000, "packets lost while replacing the program");
    assert_eq!(r.forw_v4(), fw4, "packets took the kernel path while replacing the program");
    let status = xnf_ok(r.dut(), &["router", "status", "--json"]);
    assert!(status.contains("\"fib\": \"direct\""), "{status}");
}

#[test]
fn follower_tracks_mac_changes_and_vanished_interfaces() {
    let mut r = RoutedLine::new(&[]);
    r.attach(&[]);
    r.resolve_sink();
    wait_for("the follower to start", || follower_running(r.dut()));

    // New MAC on dut's ingress: frames to it must still be routed in XDP.
    let mac = "02:00:00:00:99:01";
    r.dut().ip(&["link", "set", "dev", &r.line.dut_gen_if, "address", mac]).unwrap();
    r.line.gen().ip(&["neigh", "replace", &r.line.dut_gen_v4.to_string(), "lladdr", mac, "nud", "permanent", "dev", &r.line.gen_if]).unwrap();
    wait_for("the follower to learn the new MAC", || {
        let redir = r.redirected();
        r.send_udp(false, 5) == 5 && r.redirected() - redir == 5
    });

    // An attached interface deleted under the router: its state goes.
    let extra = xnf_netns::ifname("x");
    xnf_netns::veth(r.dut(), &extra, r.line.sink(), &xnf_netns::ifname("y"), None).unwrap();
    xnf_ok(r.dut(), &["router", "attach", &extra]);
    assert!(xnf_ok(r.dut(), &["router", "status"]).contains(&extra));
    r.dut().ip(&["link", "del", &extra]).unwrap();
    wait_for("the follower to forget the deleted interface", || !xnf_ok(r.dut(), &["router", "status"]).contains(&extra));
}

#[test]
fn bad_input_gives_one_line_errors_and_leaves_nothing_half_attached() {
    let mut r = RoutedLine::new(&[]);
    let dut = r.line.dut();
    let g = r.line.dut_gen_if.clone();
    assert!(xnf_err(dut, &["router", "attach", "xnfnope0"]).contains("no interface named"));
    assert!(xnf_err(dut, &["router", "attach", "lo"]).contains("loopback"));
    assert!(xnf_err(dut, &["router", "detach", &g]).contains("not attached"));
    // One bad name in a list: nothing is attached.
    assert!(xnf_err(dut, &["router", "attach", &g, "xnfnope0"]).contains("no interface named"));
    assert!(xnf_err(dut, &["router", "status"]).contains("not attached"));
    let out = xnf(dut, &["router", "attach", &g, "--frobnicate"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--frobnicate"));
    assert!(xnf_err(dut, &["router", "attach", &g, "--fib", "sideways"]).contains("sideways"));
    let out = std::process::Command::new(xnf_testrun::cli::xnf_bin()).args(["--netns", "xnf-no-such-ns", "router", "status"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("no network namespace") && err.lines().count() == 1, "{err}");

    r.attach(&[]);
    assert!(xnf_err(r.dut(), &["router", "attach", &g]).contains("already attached"));
    assert!(xnf_err(r.dut(), &["router", "attach", &g, "--mode", "skb"]).contains("detach"));
    let dut = r.line.dut();
    assert!(xnf_err(dut, &["router", "stats", "--watch", "0"]).contains("positive"));
}

fn netns_key() -> String {
    use std::os::unix::fs::MetadataExt;
    format!("net-{}", std::fs::metadata("/proc/thread-self/ns/net").unwrap().ino())
}

fn set_hop_limit_v6(s: &UdpSocket, hops: i32) {
    use std::os::fd::AsRawFd;
    // SAFETY: setsockopt with a valid fd and an int option.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_IPV6,
            libc::IPV6_UNICAST_HOPS,
            (&hops as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0);
}

#[test]
fn pins_of_a_deleted_namespace_are_collected() {
    let ns = xnf_netns::Netns::new("gc").unwrap();
    let other = xnf_netns::Netns::new("gc2").unwrap();
    let (a, b) = (xnf_netns::ifname("a"), xnf_netns::ifname("b"));
    xnf_netns::veth(&ns, &a, &other, &b, None).unwrap();
    ns.link_up(&a).unwrap();
    xnf_ok(&ns, &["router", "attach", &a, "--no-follow"]);
    let pins = Path::new("/sys/fs/bpf/xnf").join(ns.run(netns_key).unwrap());
    assert!(pins.exists());
    ns.delete().unwrap(); // deleted while attached, as a crashed test would leave it

    // The next attach anywhere notices and removes them.
    let (c, d) = (xnf_netns::ifname("c"), xnf_netns::ifname("d"));
    xnf_netns::veth(&other, &c, &other, &d, None).unwrap();
    xnf_ok(&other, &["pass", "attach", &c]);
    assert!(!pins.exists(), "pins of the deleted namespace are still at {}", pins.display());
    xnf_ok(&other, &["pass", "detach", &c]);
}

/// Followers of `xnf router` whose network namespace is `ns`.
fn followers_in(ns: &xnf_netns::Netns) -> usize {
    use std::os::unix::fs::MetadataExt;
    let ino = |p: &str| std::fs::metadata(p).map(|m| m.ino()).ok();
    let target = ino(&ns.path().display().to_string());
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            let pid = e.file_name().to_string_lossy().to_string();
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmd).contains("router\0follow") && ino(&format!("/proc/{pid}/ns/net")) == target
        })
        .count()
}

#[test]
fn concurrent_attaches_of_different_interfaces_all_get_their_own_slot_and_mac() {
    use xnf_netns::{ifname, veth, Netns};
    const N: usize = 6;
    let dut = Netns::new("lock-dut").unwrap();
    let peer = Netns::new("lock-peer").unwrap();
    let names: Vec<String> = (0..N).map(|i| ifname(&format!("c{i}"))).collect();
    for (i, n) in names.iter().enumerate() {
        veth(&dut, n, &peer, &ifname(&format!("p{i}")), None).unwrap();
        dut.link_up(n).unwrap();
    }
    // Several rounds: without the lock, attaches racing for the first free
    // slot (or for creating the shared maps) lose now and then.
    for round in 0..4 {
        let follow = round % 2 == 1;
        let children: Vec<_> = names
            .iter()
            .map(|n| {
                let mut c = std::process::Command::new(xnf_testrun::cli::xnf_bin());
                c.args(["--netns", dut.name(), "router", "attach", n]);
                if !follow {
                    c.arg("--no-follow");
                }
                c.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap()
            })
            .collect();
        for c in children {
            let out = c.wait_with_output().unwrap();
            assert!(out.status.success(), "round {round}: {}", String::from_utf8_lossy(&out.stderr));
        }
        let status: serde_json::Value = serde_json::from_str(&xnf_ok(&dut, &["router", "status", "--json"])).unwrap();
        let ifaces = status["interfaces"].as_array().unwrap();
        assert_eq!(ifaces.len(), N, "round {round}: {status}");
        let mut slots: Vec<u64> = ifaces.iter().map(|i| i["slot"].as_u64().unwrap()).collect();
        slots.sort();
        slots.dedup();
        assert_eq!(slots.len(), N, "round {round}: two interfaces share a slot: {status}");
        for i in ifaces {
            let name = i["name"].as_str().unwrap();
            assert_eq!(i["mac"].as_str().unwrap(), dut.mac(name).unwrap().to_string(), "round {round}: {name} holds another MAC");
        }
        if follow {
            wait_for("the follower to register", || followers_in(&dut) >= 1);
            assert_eq!(followers_in(&dut), 1, "round {round}: concurrent attaches started more than one follower");
        }
        let mut args = vec!["router", "detach"];
        args.extend(names.iter().map(String::as_str));
        xnf_ok(&dut, &args);
        wait_for("the follower to exit", || followers_in(&dut) == 0);
    }
}

/// `ip netns exec` gives xnf a private mount namespace whose /sys hides
/// bpffs. Before xnf looked for the host's, an attach under it pinned into
/// a throw-away bpffs: it forwarded, but no later command could see or
/// detach it. Every command must behave as with `--netns`.
#[test]
fn ip_netns_exec_sees_and_changes_the_same_state_as_netns() {
    use xnf_testrun::cli::{xnf_ip_netns_exec, xnf_ip_netns_exec_ok};
    let r = RoutedLine::new(&[]);
    let (g, s) = (r.line.dut_gen_if.clone(), r.line.dut_sink_if.clone());
    xnf_ip_netns_exec_ok(r.dut(), &["router", "attach", &g, &s]);
    r.resolve_sink();
    let before = r.redirected();
    assert_eq!(r.send_udp(false, 100), 100);
    assert_eq!(r.redirected() - before, 100, "attached under ip netns exec, forwarding in XDP: {}", r.ingress_stats());
    for out in [xnf_ok(r.dut(), &["router", "status", "--json"]), xnf_ip_netns_exec_ok(r.dut(), &["router", "status", "--json"])] {
        let status: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(status["interfaces"].as_array().unwrap().len(), 2, "{status}");
    }
    wait_for("the follower started under ip netns exec", || follower_running(r.dut()));
    let stats: serde_json::Value = serde_json::from_str(&xnf_ip_netns_exec_ok(r.dut(), &["router", "stats", "--json"])).unwrap();
    assert_eq!(stats.as_array().unwrap().len(), 2, "{stats}");
    xnf_ip_netns_exec_ok(r.dut(), &["router", "detach", &g, &s]);
    let out = xnf_ip_netns_exec(r.dut(), &["router", "status"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("not attached"));
    assert!(xnf_err(r.dut(), &["router", "status"]).contains("not attached"), "detached under ip netns exec, gone for --netns too");
    assert!(!Path::new(&format!("/sys/fs/bpf/xnf/{}", netns_key_of(r.dut()))).exists(), "pins left behind");
    wait_for("the follower to exit", || !follower_running(r.dut()));
}

fn netns_key_of(ns: &xnf_netns::Netns) -> String {
    use std::os::unix::fs::MetadataExt;
    format!("net-{}", std::fs::metadata(ns.path()).unwrap().ino())
}

/// 100 UDP datagrams of 1,300 bytes in 1,514-byte frames (a 214-byte
/// Ethernet trailer) towards an egress with MTU 1,400: the kernel trims the
/// trailer and delivers them; so must the router. It used to redirect the
/// whole frame, which the egress dropped as too long for its MTU.
#[test]
fn trailers_are_trimmed_so_frames_fit_the_egress_mtu() {
    use xnf_packet::PacketBuilder;
    let r = RoutedLine::new(&["--no-follow"]);
    let l = &r.line;
    r.dut().set_mtu(&l.dut_sink_if, 1400).unwrap();
    l.sink().set_mtu(&l.sink_if, 1400).unwrap();
    r.resolve_sink();
    let rx = r.sink_socket(false, 7000);
    let frames: Vec<Vec<u8>> = (0..100u32)
        .map(|i| {
            let mut f = PacketBuilder::ethernet(l.gen_mac, l.dut_gen_mac)
                .ipv4(l.gen_v4, l.sink_v4)
                .udp(40000, 7000)
                .payload(&i.to_be_bytes())
                .frame_len(14 + 1300)
                .build();
            f.resize(1514, 0xa5);
            f
        })
        .collect();
    let before = r.redirected();
    let dev = l.gen_if.clone();
    let received = std::thread::scope(|s| {
        let counter = s.spawn(|| count_received(&rx, 100));
        l.gen()
            .run(move || {
                let sock = xnf_netns::packet_socket(&dev).unwrap();
                for (i, f) in frames.iter().enumerate() {
                    xnf_netns::send_frame(&sock, f).unwrap();
                    if i % 32 == 31 {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                }
            })
            .unwrap();
        counter.join().unwrap()
    });
    assert_eq!(received, 100, "datagrams delivered to the sink");
    assert_eq!(r.redirected() - before, 100, "forwarded in XDP, not by the kernel");
}

/// A bridge has no XDP transmit: frames redirected into it from a
/// driver-mode hook are lost. Attached in skb mode, it stays out of the
/// driver-mode instances' devmap; the kernel forwards their frames to it
/// (counted egress-skb-mode) and they arrive.
#[test]
fn an_egress_attached_in_skb_mode_gets_its_frames_through_the_kernel() {
    use xnf_netns::{ifname, veth, Netns};
    let r = RoutedLine::new(&[]);
    let l = &r.line;
    let lan = Netns::new("lan").unwrap();
    let (br, port, host) = (ifname("br0"), ifname("bp0"), ifname("lan0"));
    r.dut().ip(&["link", "add", &br, "type", "bridge"]).unwrap();
    veth(r.dut(), &port, &lan, &host, None).unwrap();
    r.dut()
        .ip_batch(&[
            format!("link set {port} master {br}"),
            format!("link set {port} up"),
            format!("link set {br} up"),
            format!("addr add 198.18.60.1/24 dev {br}"),
        ])
        .unwrap();
    lan.ip_batch(&[format!("link set {host} up"), format!("addr add 198.18.60.2/24 dev {host}"), "route add default via 198.18.60.1".to_string()]).unwrap();
    lan.set_offload(&host, xnf_netns::Offload::TxChecksum, false).unwrap();
    l.gen().route_add("198.18.60.0/24", Some(&l.dut_gen_v4.to_string()), None).unwrap();
    xnf_ok(r.dut(), &["router", "attach", &l.dut_gen_if, "--no-follow"]);
    xnf_ok(r.dut(), &["router", "attach", &br, "--mode", "skb", "--no-follow"]);
    let rx = xnf_testrun::cli::udp_receiver(&lan, "198.18.60.2:7001".parse().unwrap());
    let tx = r.gen_socket(false);
    let to: std::net::SocketAddr = "198.18.60.2:7001".parse().unwrap();
    // The first one resolves the neighbour through the kernel.
    send_paced(&tx, to, 1);
    assert_eq!(count_received(&rx, 1), 1);
    let before = r.reason("egress-skb-mode");
    let received = std::thread::scope(|s| {
        let counter = s.spawn(|| count_received(&rx, 100));
        send_paced(&tx, to, 100);
        counter.join().unwrap()
    });
    assert_eq!(received, 100, "datagrams routed to the bridge arrived");
    assert_eq!(r.reason("egress-skb-mode") - before, 100, "left to the kernel, counted why");
    xnf_ok(r.dut(), &["router", "detach", &br]);
}

/// Sends `frames` from gen's raw socket and counts what reaches `rx`.
/// `expected` of them should arrive.
fn send_raw_and_count(r: &RoutedLine, rx: &UdpSocket, frames: Vec<Vec<u8>>, expected: usize) -> usize {
    let dev = r.line.gen_if.clone();
    std::thread::scope(|s| {
        let counter = s.spawn(|| count_received(rx, expected));
        r.line
            .gen()
            .run(move || {
                let sock = xnf_netns::packet_socket(&dev).unwrap();
                for f in &frames {
                    xnf_netns::send_frame(&sock, f).unwrap();
                }
            })
            .unwrap();
        counter.join().unwrap()
    })
}

/// The kernel checks the source of every IPv4 packet it forwards
/// (fib_validate_source); bpf_fib_lookup() does not. A datagram claiming
/// one of dut's own addresses as its source, and, once the ingress filters
/// strictly, one from a source not routed back through it, must not be
/// forwarded. The router used to forward both.
#[test]
fn sources_the_kernel_refuses_are_not_forwarded() {
    use xnf_packet::PacketBuilder;
    let mut r = RoutedLine::new(&[]);
    r.attach(&[]);
    let l = &r.line;
    r.resolve_sink();
    let rx = r.sink_socket(false, 7002);
    let from = |src: std::net::Ipv4Addr, n: u32| -> Vec<Vec<u8>> {
        (0..n).map(|i| PacketBuilder::ethernet(l.gen_mac, l.dut_gen_mac).ipv4(src, l.sink_v4).udp(40000, 7002).payload(&i.to_be_bytes()).build()).collect()
    };
    let unrouted = std::net::Ipv4Addr::new(198, 18, 99, 1);
    let (martians, redirected) = (r.reason("martian"), r.redirected());
    assert_eq!(send_raw_and_count(&r, &rx, from(l.gen_v4, 20), 20), 20, "datagrams from gen's own address");
    assert_eq!(send_raw_and_count(&r, &rx, from(unrouted, 20), 20), 20, "datagrams from a source with no route back, no filter");
    assert_eq!(r.redirected() - redirected, 40, "forwarded in XDP");
    assert_eq!(send_raw_and_count(&r, &rx, from(l.dut_sink_v4, 20), 0), 0, "datagrams from dut's own address were forwarded");
    assert_eq!(r.reason("martian") - martians, 20, "counted as martians");

    // rp_filter set after attach: the follower applies it.
    r.dut().sysctl_set(&format!("net/ipv4/conf/{}/rp_filter", l.dut_gen_if), "1").unwrap();
    wait_for("the follower to apply rp_filter=1", || {
        let status: serde_json::Value = serde_json::from_str(&xnf_ok(r.dut(), &["router", "status", "--json"])).unwrap();
        status["interfaces"].as_array().unwrap().iter().any(|i| i["name"] == l.dut_gen_if.as_str() && i["rpf"] == "strict")
    });
    let martians = r.reason("martian");
    assert_eq!(send_raw_and_count(&r, &rx, from(unrouted, 20), 0), 0, "the strict filter let datagrams through");
    // At least ours: once in a 6.1 guest a 21st frame was counted here,
    // source unknown (see the issue 13 note); none may be forwarded.
    let counted = r.reason("martian") - martians;
    assert!(counted >= 20, "{counted} of the 20 counted as martians");
    assert_eq!(send_raw_and_count(&r, &rx, from(l.gen_v4, 20), 20), 20, "datagrams routed back through the ingress");
}

/// Commands started together in a new namespace whose inode a dead one's
/// state still names (its run folder and pins were never collected): the
/// dead state is removed once, every command succeeds, and nothing of the
/// live namespace is removed by a command that decided late (the race
/// seen as "writing …/.netns-cookie…: No such file or directory").
#[test]
fn concurrent_commands_in_a_namespace_reusing_a_dead_ones_inode() {
    use std::os::unix::fs::MetadataExt;
    let ns = xnf_netns::Netns::new("reuse").expect("a namespace (run as root)");
    let key = format!("net-{}", std::fs::metadata(ns.path()).unwrap().ino());
    let (run, pins) = (Path::new("/run/xnf").join(&key), Path::new("/sys/fs/bpf/xnf").join(&key));
    let _cleanup = Cleanup(vec![run.clone(), pins.clone()]);
    // A dead namespace's state: a marker with a cookie no namespace has (0),
    // and a pin folder.
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(run.join("netns-cookie"), "0").unwrap();
    std::fs::create_dir_all(pins.join("dead-nf")).unwrap();
    let outs: Vec<std::process::Output> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..8).map(|_| s.spawn(|| xnf(&ns, &["chain", "list"]))).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for o in &outs {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let removed = outs.iter().filter(|o| String::from_utf8_lossy(&o.stderr).contains("removed state of a deleted network namespace")).count();
    assert_eq!(removed, 1, "the dead namespace's state should be removed exactly once");
    assert!(!pins.join("dead-nf").exists(), "the dead namespace's pins are left");
    let marker = std::fs::read_to_string(run.join("netns-cookie")).expect("the live namespace's marker");
    assert_ne!(marker.trim(), "0", "the marker is still the dead namespace's");
}

/// Removes folders when dropped.
struct Cleanup(Vec<std::path::PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for d in &self.0 {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}
