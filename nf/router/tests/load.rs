//! The programs pass the verifier of the running kernel.

use xnf_pass::PassProgram;
use xnf_router::program::{FibMode, IfaceEntry, RouterConfig, RouterProgram, Rpf, VlanEntry};

#[test]
fn router_loads_in_every_fib_mode() {
    for (i, fib) in [FibMode::Full, FibMode::Direct, FibMode::Cache].into_iter().enumerate() {
        let r = RouterProgram::load(RouterConfig { fib, no_bytes: i == 1, slot: 3, generic: i == 1 }, None).expect("router loads");
        let maps = r.maps().unwrap();
        let e = IfaceEntry { ifindex: 7, mac: [2, 0, 0, 0, 0, 1], flags: 1, rpf: Rpf::Loose };
        maps.set_iface(3, e).unwrap();
        assert_eq!(maps.ifaces().unwrap(), vec![(3, e)]);
        let v = VlanEntry { vlan_ifindex: 9, phys_ifindex: 7, vid: 100, rpf: Rpf::Strict };
        maps.set_vlan(v).unwrap();
        assert_eq!(maps.vlans().unwrap(), vec![v]);
        let locals = ["198.18.0.1".parse().unwrap(), "198.18.0.255".parse().unwrap()].into();
        maps.set_locals(&locals).unwrap();
        assert_eq!(maps.locals(), locals);
        maps.set_locals(&Default::default()).unwrap();
        assert!(maps.locals().is_empty());
        assert_eq!(maps.free_slot().unwrap(), 0);
        assert_eq!(maps.stats(3).unwrap().total_packets(), 0);
        // The route cache starts unleased and empty: unused until a follower renews it.
        let ctl = maps.cache_ctl().unwrap();
        assert_eq!((ctl.lease_until, ctl.gen, ctl.aside, maps.cache_len().unwrap()), (0, 0, 0, 0));
        r.renew_lease().unwrap();
        assert!(maps.cache_ctl().unwrap().lease_until > 0, "the lease program ran");
        maps.set_cache_ctl(7, 3).unwrap();
        let ctl = maps.cache_ctl().unwrap();
        assert!(ctl.lease_until > 0 && ctl.gen == 7 && ctl.aside == 3, "{ctl:?}");
        maps.end_lease().unwrap();
        assert_eq!(maps.cache_ctl().unwrap().lease_until, 0);
    }
}

#[test]
fn pass_loads() {
    PassProgram::load().expect("pass program loads");
}
