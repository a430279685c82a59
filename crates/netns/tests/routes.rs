//! Route tables installed with batched rtnetlink in a real namespace; needs root.

use std::net::IpAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::Command;

use ipnet::IpNet;
use xnf_netns::{Family, InstalledRoutes, LineConfig, LineTopology, Netns, RouteSet, XNF_RTPROT};

fn line() -> LineTopology {
    LineTopology::new(&LineConfig::default()).expect("build the gen-dut-sink line")
}

/// `ip route get ADDR` in `ns`: Ok(output) or Err(what ip said).
fn route_get(ns: &Netns, addr: IpAddr) -> Result<String, String> {
    let family = if addr.is_ipv4() { "-4" } else { "-6" };
    ns.ip(&[family, "route", "get", &addr.to_string()]).map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).map_err(|e| format!("{e:#}"))
}

fn count(ns: &Netns, family: Family, protocol: Option<u8>) -> usize {
    ns.route_count(family, protocol).expect("route dump")
}

#[test]
fn big_tables_install_resolve_and_remove() {
    let t = line();
    let dut = t.dut();
    let v4_before = count(dut, Family::V4, None);
    let v6_before = count(dut, Family::V6, None);
    assert!(v4_before >= 2, "the topology's connected routes: {v4_before}");
    assert_eq!(count(dut, Family::V4, Some(XNF_RTPROT)), 0);

    let v4 = RouteSet::synthetic_v4(50_000, 42).unwrap();
    let v6 = RouteSet::synthetic_v6(10_000, 42).unwrap();
    let v4_targets = v4.lookup_targets(8).unwrap();
    let v6_targets = v6.lookup_targets(8).unwrap();
    for target in v4_targets.iter().chain(&v6_targets) {
        let before = route_get(dut, *target);
        assert!(before.is_err(), "{target} routed before install: {before:?}");
    }

    let v4_routes = InstalledRoutes::new(dut, v4, t.sink_v4.into(), &t.dut_sink_if).unwrap();
    let v6_routes = InstalledRoutes::new(dut, v6, t.sink_v6.into(), &t.dut_sink_if).unwrap();
    assert_eq!(v4_routes.report().routes, 50_000);
    assert!(v4_routes.report().sends > 1, "{:?}", v4_routes.report());

    assert_eq!(count(dut, Family::V4, Some(XNF_RTPROT)), 50_000);
    assert_eq!(count(dut, Family::V4, None), v4_before + 50_000);
    assert_eq!(count(dut, Family::V6, Some(XNF_RTPROT)), 10_000);
    assert_eq!(count(dut, Family::V6, None), v6_before + 10_000);

    // The longest match of every target is a distinct prefix of the set,
    // via the sink.
    let mut matched = Vec::new();
    for (set, targets, gateway) in [(v4_routes.routes(), &v4_targets, IpAddr::from(t.sink_v4)), (v6_routes.routes(), &v6_targets, IpAddr::from(t.sink_v6))] {
        for target in targets {
            let out = route_get(dut, *target).unwrap();
            let want = format!("via {gateway} dev {} ", t.dut_sink_if);
            assert!(out.contains(&want), "{target}: {out}");
            let family = if target.is_ipv4() { "-4" } else { "-6" };
            let out = dut.ip(&[family, "route", "get", "fibmatch", &target.to_string()]).unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let prefix: IpNet = text.split_whitespace().next().unwrap().parse().unwrap();
            assert!(set.prefixes().contains(&prefix), "{target}: {text}");
            assert!(prefix.contains(target));
            assert!(text.contains(&format!("proto {XNF_RTPROT}")), "{target}: {text}");
            assert!(!matched.contains(&prefix), "{prefix} matched twice");
            matched.push(prefix);
        }
    }
    // The kernel's view of a few prefixes matches the set exactly.
    for p in v4_routes.routes().prefixes().iter().step_by(9_999) {
        let out = dut.ip(&["-4", "route", "show", "exact", &p.to_string()]).unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.starts_with(&format!("{p} via {} ", t.sink_v4)), "{p}: {text}");
    }

    let removed = v4_routes.remove().unwrap();
    assert_eq!(removed.routes, 50_000);
    assert_eq!(count(dut, Family::V4, None), v4_before);
    assert_eq!(count(dut, Family::V4, Some(XNF_RTPROT)), 0);
    assert!(route_get(dut, v4_targets[0]).is_err());
    // Dropping the guard removes the IPv6 routes.
    drop(v6_routes);
    assert_eq!(count(dut, Family::V6, None), v6_before);
    assert!(route_get(dut, v6_targets[0]).is_err());
}

#[test]
fn unreachable_gateway_is_refused_naming_the_prefix() {
    let t = line();
    let dut = t.dut();
    let set = RouteSet::synthetic_v4(500, 3).unwrap();
    // 198.18.7.7 is not on dut's sink link (198.18.1.0/24).
    let gateway: IpAddr = "198.18.7.7".parse().unwrap();
    let err = dut.install_routes(&set, gateway, &t.dut_sink_if).unwrap_err();
    let msg = format!("{err:#}");
    let named = set.prefixes().iter().find(|p| msg.contains(&format!("route {p} was refused")));
    assert!(named.is_some(), "no prefix of the set named: {msg}");
    assert!(msg.contains("198.18.7.7") && msg.contains(&t.dut_sink_if), "{msg}");
    assert!(msg.contains("gateway"), "the kernel's reason is missing: {msg}");
    assert!(msg.contains("499 more failed"), "{msg}");
    assert!(msg.contains("no route was installed"), "{msg}");
    assert_eq!(count(dut, Family::V4, Some(XNF_RTPROT)), 0);

    // A device that does not exist, a gateway of the other family or outside
    // the test ranges.
    let err = format!("{:#}", dut.install_routes(&set, t.sink_v4.into(), "xnfnosuchdev").unwrap_err());
    assert!(err.contains("no interface xnfnosuchdev"), "{err}");
    assert!(dut.install_routes(&set, t.sink_v6.into(), &t.dut_sink_if).is_err());
    assert!(dut.install_routes(&set, "192.0.2.1".parse().unwrap(), &t.dut_sink_if).is_err());
    assert_eq!(count(dut, Family::V4, Some(XNF_RTPROT)), 0);
}

#[test]
fn existing_route_fails_the_whole_install_and_only_ours_are_undone() {
    let t = line();
    let dut = t.dut();
    let first = RouteSet::synthetic_v4(2_000, 1).unwrap();
    dut.install_routes(&first, t.sink_v4.into(), &t.dut_sink_if).unwrap();

    // 20,000 new prefixes plus one that is already installed.
    let clash = first.prefixes()[1234];
    let mut second: Vec<IpNet> =
        RouteSet::synthetic_v4(20_000, 2).unwrap().prefixes().iter().copied().filter(|p| !first.prefixes().contains(p)).take(19_999).collect();
    second.insert(10_000, clash);
    let second = RouteSet::from_prefixes(second).unwrap();
    let err = dut.install_routes(&second, t.sink_v4.into(), &t.dut_sink_if).unwrap_err();
    let msg = format!("{err:#}");
    assert!(msg.contains(&format!("route {clash} was refused")), "{msg}");
    assert!(msg.contains("File exists"), "{msg}");
    assert!(msg.contains("removed again"), "{msg}");
    // The first set is intact, nothing of the second is left.
    assert_eq!(count(dut, Family::V4, Some(XNF_RTPROT)), 2_000);
    let out = dut.ip(&["-4", "route", "show", "exact", &clash.to_string()]).unwrap();
    assert!(!out.stdout.is_empty(), "{clash} of the first set was removed");

    // Removing a set that is not installed names a missing prefix.
    let err = format!("{:#}", dut.remove_routes(&second).unwrap_err());
    let n = second.len();
    let want = format!("{} of {n} routes could not be removed", n - 1);
    assert!(err.contains(&want) && err.contains("no such route"), "{err}");
    // ...but removed the one that was (the clash belongs to the first set).
    assert_eq!(count(dut, Family::V4, Some(XNF_RTPROT)), 1_999);
}

#[test]
fn flush_removes_routes_by_protocol() {
    let t = line();
    let dut = t.dut();
    let v4 = RouteSet::synthetic_v4(3_000, 9).unwrap();
    let v6 = RouteSet::synthetic_v6(3_000, 9).unwrap();
    dut.install_routes(&v4, t.sink_v4.into(), &t.dut_sink_if).unwrap();
    dut.install_routes(&v6, t.sink_v6.into(), &t.dut_sink_if).unwrap();
    // A route of another protocol stays (no synthetic prefix is a /31).
    dut.route_add("198.19.250.4/31", Some(&t.sink_v4.to_string()), None).unwrap();
    let v4_all = count(dut, Family::V4, None);
    assert_eq!(dut.flush_routes(Family::V4, XNF_RTPROT).unwrap().routes, 3_000);
    assert_eq!(count(dut, Family::V4, None), v4_all - 3_000);
    assert_eq!(count(dut, Family::V4, Some(XNF_RTPROT)), 0);
    assert!(route_get(dut, "198.19.250.5".parse().unwrap()).is_ok());
    assert_eq!(count(dut, Family::V6, Some(XNF_RTPROT)), 3_000);
    assert_eq!(dut.flush_routes(Family::V6, XNF_RTPROT).unwrap().routes, 3_000);
    assert_eq!(count(dut, Family::V6, Some(XNF_RTPROT)), 0);
    assert_eq!(dut.flush_routes(Family::V6, XNF_RTPROT).unwrap().routes, 0);
}

#[test]
fn namespaces_with_routes_are_removed_on_panic() {
    let mut names = Vec::new();
    let result = catch_unwind(AssertUnwindSafe(|| {
        let t = line();
        names.extend(t.topology().nodes().iter().map(|n| n.name().to_owned()));
        let set = RouteSet::synthetic_v4(5_000, 4).unwrap();
        let _routes = InstalledRoutes::new(t.dut(), set, t.sink_v4.into(), &t.dut_sink_if).unwrap();
        panic!("test panic with routes installed");
    }));
    assert!(result.is_err());
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let listed = String::from_utf8_lossy(&out.stdout);
    assert_eq!(names.len(), 3);
    for name in names {
        assert!(!listed.contains(&name), "{name} left behind: {listed}");
    }
}
