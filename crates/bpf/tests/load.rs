//! The programs pass the verifier of the running kernel.

use xnf_bpf::pass::PassProgram;
use xnf_bpf::router::{RouterConfig, RouterProgram};

#[test]
fn router_loads_in_both_fib_modes() {
    for fib_direct in [false, true] {
        let r = RouterProgram::load(RouterConfig { fib_direct, slot: 3 }, None).expect("router loads");
        let maps = r.maps().unwrap();
        maps.set_iface(3, 7, [2, 0, 0, 0, 0, 1]).unwrap();
        assert_eq!(maps.ifaces().unwrap(), vec![(3, 7, [2, 0, 0, 0, 0, 1])]);
        assert_eq!(maps.stats(3).unwrap().total_packets(), 0);
    }
}

#[test]
fn pass_loads() {
    PassProgram::load().expect("pass program loads");
}
