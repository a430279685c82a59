//! `xnf router attach --fib cache` on real veths (gen -> dut -> sink), with
//! real traffic: the cache answers, and after every kind of change the
//! kernel can make — a route, a neighbour's MAC, a deleted neighbour, a
//! policy rule, the egress going down, a multipath route — the next
//! frames follow the kernel's new decision as soon as the follower has
//! seen it; a follower killed with -9 leaves a cache that is no longer
//! used once its lease runs out. Each change is timed from the netlink
//! acknowledgement to the follower's generation bump (printed, not
//! asserted: timing is the lab's business).

use std::time::{Duration, Instant};

use xnf_testrun::cli::{follower_running, wait_for, xnf_ok, RoutedLine};

/// CPUs that may have handled frames: each fills its own region of the
/// cache, so each may miss once per destination.
fn cpus() -> u64 {
    libbpf_rs::num_possible_cpus().expect("counting the possible CPUs") as u64
}

/// The line with the router attached in cache mode, the sink resolved and
/// the cache in use.
fn cached_line() -> RoutedLine {
    let mut r = RoutedLine::new(&[]);
    r.attach(&["--fib", "cache"]);
    r.resolve_sink();
    wait_for("the follower's lease on the route cache", || r.cache_status()["leased"] == true);
    r
}

fn generation(r: &RoutedLine) -> u64 {
    r.cache_status()["generation"].as_u64().unwrap()
}

fn kernel_generation(r: &RoutedLine) -> u64 {
    r.cache_status()["kernel_generation"].as_u64().unwrap()
}

/// Runs `ip ARGS` in dut: the kernel's bump (the follower's socket filter)
/// has retired the cache's entries by the time `ip` returns — no waiting;
/// then waits until the follower has read the change too and returns how
/// long that took after `ip` returned.
fn change(r: &RoutedLine, args: &[&str]) -> Duration {
    let (before, kbefore) = (generation(r), kernel_generation(r));
    r.dut().ip(args).unwrap_or_else(|e| panic!("ip {}: {e:#}", args.join(" ")));
    assert!(kernel_generation(r) > kbefore, "`ip {}` returned before the kernel's bump", args.join(" "));
    let t0 = Instant::now();
    wait_for(&format!("the follower to see `ip {}`", args.join(" ")), || generation(r) != before);
    t0.elapsed()
}

#[test]
fn cached_lookups_answer_and_every_change_is_followed() {
    let r = cached_line();
    let (hit, miss) = (r.cache("hit"), r.cache("miss"));
    assert_eq!(r.send_udp(false, 200), 200);
    assert_eq!(r.send_udp(true, 200), 200);
    let (hits, misses) = (r.cache("hit") - hit, r.cache("miss") - miss);
    // One miss per family fills the entry of each CPU the frames met
    // (the cache is per CPU), again after a bump. The hosts' own unicast
    // (a neighbour probe to dut's address: a lookup, local) may add a
    // few lookups, each a miss.
    let (most, extra) = (2 * 3 * cpus(), (hits + misses).saturating_sub(400));
    assert!(
        (400..=410).contains(&(hits + misses)) && (2..=most + extra).contains(&misses),
        "hits {hits}, misses {misses} (2 to {most}, and {extra} not of the 400)"
    );
    assert!(r.cache_status()["entries"].as_u64().unwrap() >= 2);

    let sink4 = format!("{}/32", r.line.sink_v4);
    let dev = r.line.dut_sink_if.clone();
    let mut windows = Vec::new();

    // A route: blackholed at once, then forwarded again.
    windows.push(change(&r, &["route", "add", "blackhole", &sink4]));
    let drops = r.reason("blackhole");
    assert_eq!(r.send_udp(false, 20), 0, "blackholed traffic arrived");
    assert_eq!(r.reason("blackhole") - drops, 20, "frames followed the cached route, not the new one");
    windows.push(change(&r, &["route", "del", "blackhole", &sink4]));
    assert_eq!(r.send_udp(false, 20), 20);

    // The neighbour's MAC: frames leave for the new MAC (which the sink
    // does not have, so its kernel drops them as for another host).
    let sink_mac = r.line.sink_mac.to_string();
    let redir = r.redirected();
    windows.push(change(&r, &["neigh", "replace", &r.line.sink_v4.to_string(), "lladdr", "02:00:00:00:99:99", "nud", "permanent", "dev", &dev]));
    assert_eq!(r.send_udp(false, 20), 0, "frames still went to the old MAC");
    assert_eq!(r.redirected() - redir, 20, "the router should still forward, to the new MAC");
    windows.push(change(&r, &["neigh", "replace", &r.line.sink_v4.to_string(), "lladdr", &sink_mac, "nud", "permanent", "dev", &dev]));
    assert_eq!(r.send_udp(false, 20), 20);

    // The neighbour deleted: the kernel gets the next frame and resolves.
    let no_neigh = r.reason("no-neigh");
    windows.push(change(&r, &["neigh", "del", &r.line.sink_v4.to_string(), "dev", &dev]));
    assert_eq!(r.send_udp(false, 1), 1);
    assert_eq!(r.reason("no-neigh") - no_neigh, 1, "a deleted neighbour was still used");

    // A policy rule sends the sink's traffic to a table that blackholes it:
    // IPv4 lookups step aside from the cache while the rule exists.
    r.dut().ip(&["route", "add", "blackhole", &sink4, "table", "100"]).unwrap();
    windows.push(change(&r, &["rule", "add", "from", &r.line.gen_v4.to_string(), "lookup", "100", "pref", "100"]));
    let (drops, bypass) = (r.reason("blackhole"), r.cache("bypass"));
    assert_eq!(r.send_udp(false, 20), 0, "the policy rule was not obeyed");
    assert_eq!((r.reason("blackhole") - drops, r.cache("bypass") - bypass), (20, 20));
    assert_eq!(r.cache_status()["ipv4_cached"], false);
    assert_eq!(r.cache_status()["ipv6_cached"], true, "IPv6 has no rule: still cached");
    windows.push(change(&r, &["rule", "del", "pref", "100"]));
    wait_for("IPv4 to be cached again", || r.cache_status()["ipv4_cached"] == true);
    let hit = r.cache("hit");
    assert_eq!(r.send_udp(false, 20), 20);
    assert!(r.cache("hit") - hit >= 20 - cpus());

    // An IPv6 multipath route makes IPv6 step aside, IPv4 stays cached.
    let (sink6, gen6) = (r.line.sink_v6.to_string(), r.line.gen_v6.to_string());
    let gen_dev = r.line.dut_gen_if.clone();
    windows.push(change(&r, &["-6", "route", "add", "2001:db8:ff::/64", "nexthop", "via", &sink6, "dev", &dev, "nexthop", "via", &gen6, "dev", &gen_dev]));
    wait_for("IPv6 to step aside", || r.cache_status()["ipv6_cached"] == false);
    assert_eq!(r.cache_status()["ipv4_cached"], true);
    change(&r, &["-6", "route", "del", "2001:db8:ff::/64"]);
    wait_for("IPv6 to be cached again", || r.cache_status()["ipv6_cached"] == true);
    assert_eq!(r.send_udp(true, 20), 20);

    // The egress down: nothing is forwarded out of it; up again, it is.
    // Its IPv6 address must outlive the flap, as IPv4's does, or nothing
    // routes IPv6 to the sink afterwards (the kernel's default drops it).
    r.dut().sysctl_set("net.ipv6.conf.all.keep_addr_on_down", "1").unwrap();
    let redir = r.redirected();
    windows.push(change(&r, &["link", "set", "dev", &dev, "down"]));
    assert_eq!(r.send_udp(false, 10), 0);
    assert_eq!(r.redirected(), redir, "frames were redirected to a device that is down");
    change(&r, &["link", "set", "dev", &dev, "up"]);
    r.resolve_sink();
    assert_eq!(r.send_udp(false, 20), 20);

    windows.sort();
    eprintln!(
        "cache: change -> generation bump after `ip` returned (polled every 50 ms by the test, so an upper bound): median {:?}, max {:?}",
        windows[windows.len() / 2],
        windows.last().unwrap()
    );
}

#[test]
fn a_killed_follower_leaves_a_cache_that_is_no_longer_used() {
    let r = cached_line();
    assert_eq!(r.send_udp(false, 20), 20);
    let pid: i32 = xnf_ok(r.dut(), &["router", "status", "--json"]).parse::<serde_json::Value>().unwrap()["follower_pid"].as_i64().unwrap() as i32;
    // SAFETY: kill on a pid we just read; -9, as an operator might.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    wait_for("the follower to die", || !follower_running(r.dut()));
    // Within the lease (256 jiffies) lookups stop taking the cache.
    wait_for("lookups to bypass the cache", || {
        let b = r.cache("bypass");
        r.send_udp(false, 5) == 5 && r.cache("bypass") > b
    });
    let hit = r.cache("hit");
    assert_eq!(r.send_udp(false, 20), 20, "forwarding goes on without the cache");
    assert_eq!(r.cache("hit"), hit, "the cache was used without a follower");
    // A new follower takes over: a new generation, a new lease.
    let gen = r.cache_status()["generation"].as_u64().unwrap();
    let _follow = xnf_testrun::cli::spawn_follower(r.dut());
    wait_for("the new follower's lease", || r.cache_status()["leased"] == true && r.cache_status()["generation"].as_u64().unwrap() > gen);
    let hit = r.cache("hit");
    assert_eq!(r.send_udp(false, 20), 20);
    assert!(r.cache("hit") - hit >= 20 - cpus(), "the new follower's cache is not used");
}

#[test]
fn attached_under_ip_netns_exec_the_cache_gets_one_follower_and_its_lease() {
    let r = RoutedLine::new(&[]);
    let (g, s) = (r.line.dut_gen_if.clone(), r.line.dut_sink_if.clone());
    xnf_testrun::cli::xnf_ip_netns_exec_ok(r.dut(), &["router", "attach", &g, &s, "--fib", "cache"]);
    wait_for("the follower's lease", || r.cache_status()["leased"] == true);
    r.resolve_sink();
    let hit = r.cache("hit");
    assert_eq!(r.send_udp(false, 20), 20);
    assert!(r.cache("hit") - hit >= 20 - cpus(), "the cache is not used");
    // A second follower started by hand sees the first and leaves.
    let second = xnf_testrun::cli::xnf(r.dut(), &["router", "follow"]);
    assert!(second.status.success() && String::from_utf8_lossy(&second.stderr).contains("another follower runs"), "{second:?}");
    assert!(follower_running(r.dut()));
    xnf_testrun::cli::xnf_ip_netns_exec_ok(r.dut(), &["router", "detach", &g, &s]);
    wait_for("the follower to leave with the router", || !follower_running(r.dut()));
}

#[test]
fn a_follower_that_slept_through_a_detach_and_an_attach_follows_the_new_router() {
    let mut r = cached_line();
    let pid: i32 = xnf_ok(r.dut(), &["router", "status", "--json"]).parse::<serde_json::Value>().unwrap()["follower_pid"].as_i64().unwrap() as i32;
    // Stopped while this holds the router's lock, so that it is not
    // stopped holding it (the detach and attach below take it).
    r.dut()
        .run(|| {
            let _lock = xnf_router::lock().unwrap();
            // SAFETY: kill on the follower's pid, read just above.
            assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
        })
        .unwrap();
    // Detached and attached again while it sleeps: new maps under the same
    // pins, and no new follower (one is still running).
    r.detach();
    r.attach(&["--fib", "cache"]);
    assert_eq!(r.cache_status()["leased"], false, "the new router's cache has a lease without a follower of its own");
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    wait_for("the woken follower to lease the new router's cache", || r.cache_status()["leased"] == true);
    assert!(follower_running(r.dut()));
    r.resolve_sink();
    let hit = r.cache("hit");
    assert_eq!(r.send_udp(false, 20), 20);
    assert!(r.cache("hit") - hit >= 20 - cpus(), "the new router's cache is not used");
}
