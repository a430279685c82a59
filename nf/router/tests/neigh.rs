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
//! The entries are made STALE by hand (`ip neigh change … nud stale`):
//! the state the kernel's reachable timer (30 s by default) would give
//! them while only XDP sends to them, without the wait. dut's first probe
//! comes 1 s after the check starts and probes 0.2 s apart, so that the
//! whole cycle takes seconds; the mechanism does not depend on them.
//! Without the follower's part, the entries stay STALE for ever and the
//! test times out.

use std::time::{Duration, Instant};

use xnf_testrun::cli::RoutedLine;

const NEW_MAC: &str = "02:00:00:00:5e:11";

fn neigh_line(r: &RoutedLine, addr: &str) -> String {
    neigh_on(r, addr, &r.line.dut_sink_if)
}

fn neigh_on(r: &RoutedLine, addr: &str, dev: &str) -> String {
    let out = r.dut().ip(&["neigh", "show", addr, "dev", dev]).expect("ip neigh show");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn silent_mac_change_is_followed(fib: &str) {
    let mut r = RoutedLine::new(&[]);
    let dev = r.line.dut_sink_if.clone();
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
    let old_mac = r.line.sink_mac.to_string();
    r.line.sink().ip(&["link", "set", "dev", &r.line.sink_if, "address", NEW_MAC]).unwrap();
    let (v4, v6) = (r.line.sink_v4.to_string(), r.line.sink_v6.to_string());
    for addr in [&v4, &v6] {
        r.dut().ip(&["neigh", "change", addr, "dev", &dev, "nud", "stale"]).unwrap();
        let entry = neigh_line(&r, addr);
        assert!(entry.contains(&old_mac) && entry.contains("STALE"), "dut's entry is not the old MAC, STALE: {entry}");
    }

    // A STALE neighbour the router does not send to (gen: the traffic
    // goes one way) is left alone, as the kernel would leave it.
    let (gen4, gen_dev) = (r.line.gen_v4.to_string(), r.line.dut_gen_if.clone());
    r.dut().ip(&["neigh", "replace", &gen4, "dev", &gen_dev, "lladdr", &r.line.gen_mac.to_string(), "nud", "stale"]).unwrap();

    // Traffic keeps flowing: the router's frames must get the kernel to
    // check the entry and learn the new MAC, as its own frames would.
    for (v6_family, addr) in [(false, &v4), (true, &v6)] {
        let t0 = Instant::now();
        while !(r.send_udp(v6_family, 5) == 5 && neigh_line(&r, addr).contains(NEW_MAC)) {
            assert!(t0.elapsed() < Duration::from_secs(30), "{fib}: dut did not learn {addr}'s new MAC while forwarding to it in 30 s: its entry is [{}]", neigh_line(&r, addr));
        }
        eprintln!("{fib}: {addr}'s new MAC learnt after {:?}", t0.elapsed());
        assert_eq!(r.send_udp(v6_family, 20), 20, "{fib}: traffic to {addr} after its new MAC was learnt");
    }
    assert!(neigh_on(&r, &gen4, &gen_dev).ends_with("STALE"), "{fib}: a neighbour the router does not send to was checked: {}", neigh_on(&r, &gen4, &gen_dev));
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
