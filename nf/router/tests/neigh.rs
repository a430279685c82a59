//! A next hop that changes its MAC without telling anyone (no gratuitous
//! ARP or unsolicited NA: a replaced machine, an address moved to another
//! host), on real veths with real traffic (gen -> dut -> sink).
//!
//! When the kernel forwards, its entry for the next hop goes STALE, the
//! next frame sent to it starts the kernel's check (DELAY, then unicast
//! probes to the old MAC that go unanswered, FAILED), and the next frame
//! after that asks by broadcast and learns the new MAC. bpf_fib_lookup()
//! starts none of that: it answers with the STALE entry. With `xnf router`
//! forwarding in XDP, the follower starts it instead for the neighbours
//! the router sends to (neigh_use.h); so traffic reaches the new MAC, and
//! dut's entry holds it, in both FIB modes and both families.
//!
//! The entries are made STALE by hand (`ip neigh replace … nud stale`):
//! the state the kernel's reachable timer (30 s by default) would give
//! them while only XDP sends to them, without the wait. dut's first probe
//! comes 1 s after the check starts and probes 0.2 s apart, so that the
//! whole cycle takes seconds; the mechanism does not depend on them.
//! Without the follower's part, the entries stay STALE for ever and the
//! test times out.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use xnf_netns::netlink::{self, Neighbour};
use xnf_netns::Mac;
use xnf_testrun::cli::RoutedLine;

const NEW_MAC: Mac = Mac([0x02, 0, 0, 0, 0x5e, 0x11]);

/// dut's entry for `addr` on `ifindex`, as the follower reads it.
fn entry(r: &RoutedLine, addr: IpAddr, ifindex: u32) -> Option<Neighbour> {
    let all = r.dut().run(netlink::neighbours).unwrap().expect("dut's neighbour table");
    all.into_iter().find(|n| n.ifindex == ifindex && n.addr == addr)
}

fn silent_mac_change_is_followed(fib: &str) {
    let mut r = RoutedLine::new(&[]);
    let (dev, sink_ifindex) = (r.line.dut_sink_if.clone(), r.line.dut_sink_ifindex);
    for family in ["ipv4", "ipv6"] {
        for (key, value) in [("delay_first_probe_time", "1"), ("retrans_time_ms", "200")] {
            r.dut().sysctl_set(&format!("net.{family}.neigh.{dev}.{key}"), value).unwrap();
        }
    }
    r.attach(&["--fib", fib]);
    r.resolve_sink();
    assert_eq!(r.send_udp(false, 20), 20);
    assert_eq!(r.send_udp(true, 20), 20);

    // The sink takes another MAC and says nothing: dut's entries keep the
    // old one, and frames sent there are dropped by the sink's kernel (for
    // another host).
    let old_mac = r.line.sink_mac;
    r.line.sink().ip(&["link", "set", "dev", &r.line.sink_if, "address", &NEW_MAC.to_string()]).unwrap();
    let (v4, v6): (IpAddr, IpAddr) = (r.line.sink_v4.into(), r.line.sink_v6.into());

    // A STALE neighbour the router does not send to (gen: the traffic
    // goes one way) is left alone, as the kernel would leave it.
    let (gen4, gen_ifindex) = (IpAddr::from(r.line.gen_v4), r.line.dut_gen_ifindex);
    r.dut().ip(&["neigh", "replace", &gen4.to_string(), "dev", &r.line.dut_gen_if, "lladdr", &r.line.gen_mac.to_string(), "nud", "stale"]).unwrap();

    // Traffic keeps flowing: the router's frames must get the kernel to
    // check the entry and learn the new MAC, as its own frames would. One
    // family at a time, its entry set to the old MAC and STALE only then:
    // both addresses share the sink's slot (egress, MAC), so frames of one
    // family would have the other's entry checked too, and the second
    // family's half would show nothing of its own.
    for (v6_family, addr) in [(false, v4), (true, v6)] {
        r.dut().ip(&["neigh", "replace", &addr.to_string(), "dev", &dev, "lladdr", &old_mac.to_string(), "nud", "stale"]).unwrap();
        let e = entry(&r, addr, sink_ifindex);
        assert!(e.as_ref().is_some_and(|e| e.stale && e.mac == Some(old_mac.0)), "dut's entry is not the old MAC, STALE: {e:?}");
        let t0 = Instant::now();
        while !(r.send_udp(v6_family, 5) == 5 && entry(&r, addr, sink_ifindex).is_some_and(|e| e.mac == Some(NEW_MAC.0))) {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "{fib}: dut did not learn {addr}'s new MAC while forwarding to it in 30 s: its entry is {:?}",
                entry(&r, addr, sink_ifindex)
            );
        }
        eprintln!("{fib}: {addr}'s new MAC learnt after {:?}", t0.elapsed());
        assert_eq!(r.send_udp(v6_family, 20), 20, "{fib}: traffic to {addr} after its new MAC was learnt");
    }
    let gen = entry(&r, gen4, gen_ifindex);
    assert!(gen.as_ref().is_some_and(|e| e.stale), "{fib}: a neighbour the router does not send to was checked: {gen:?}");
    let redirected = r.redirected();
    assert_eq!(r.send_udp(false, 20), 20);
    assert_eq!(r.redirected() - redirected, 20, "{fib}: the traffic to the new MAC went through the kernel, not XDP");
}

#[test]
fn a_next_hop_that_changes_its_mac_silently_is_learnt_again_with_the_cache() {
    silent_mac_change_is_followed("cache");
}

#[test]
fn a_next_hop_that_changes_its_mac_silently_is_learnt_again_with_full_lookups() {
    silent_mac_change_is_followed("full");
}
