//! Each CPU's service cache (lb.bpf.c: `svc_cache`, validated by `lb_gen`)
//! answers only while the control plane has written nothing since it was
//! filled: a service removed, written again, or an interface's MAC changed
//! is seen by the very next frame, as without the cache. And the cache is
//! really used: with the generation put back by hand, a stale slot answers.

mod common;

use std::net::{IpAddr, Ipv4Addr};

use common::{Fixture, GEN_MAC};
use libbpf_rs::{MapCore, MapFlags};
use xnf_lb::program::{Counter, LbMaps};
use xnf_packet::{MacAddr, PacketBuilder, TcpFlags};
use xnf_testrun::{run_xdp, Verdict, XdpContext};

/// The generation the control plane last wrote.
fn generation(maps: &LbMaps) -> u64 {
    let v = maps.lb_gen.lookup(&0u32.to_ne_bytes(), MapFlags::ANY).unwrap().expect("lb_gen has its entry");
    u64::from_ne_bytes(v.try_into().unwrap())
}

fn set_generation(maps: &LbMaps, g: u64) {
    maps.lb_gen.update(&0u32.to_ne_bytes(), &g.to_ne_bytes(), MapFlags::ANY).unwrap();
}

#[test]
fn the_service_cache_follows_every_write_of_services_and_macs() {
    let f = Fixture::new().expect("fixture namespace (run as root)");
    let steps = f
        .dut
        .run(|| {
            let (prog, maps) = f.load().expect("the lb loads");
            let s = f.svc("ipip4");
            let client = IpAddr::V4(Ipv4Addr::new(198, 18, 200, 7));
            let frame = PacketBuilder::ethernet(GEN_MAC, f.in0_mac).ip(client, s.vip).tcp(1024, s.spec.port, TcpFlags::ACK).seq(1).ack(1).try_build().unwrap();
            let ctx = XdpContext { ingress_ifindex: f.in0, rx_queue_index: 0 };
            // What a frame came to: sent to a backend, or which counter moved.
            let outcome = || -> String {
                let before = maps.counters().unwrap();
                let r = run_xdp(prog.prog(), &frame, ctx).expect("test run");
                let after = maps.counters().unwrap();
                if matches!(r.verdict, Verdict::Tx | Verdict::Redirect) {
                    return "sent".into();
                }
                let moved: Vec<&str> =
                    [Counter::NotService, Counter::NotOurMac].iter().filter(|&&c| after[c as usize] > before[c as usize]).map(|c| c.name()).collect();
                format!("{} {}", r.verdict.name(), moved.join(","))
            };
            let mut steps = vec![("filled", outcome()), ("from the cache", outcome())];
            let g = generation(&maps);
            let raw = maps.service(&s.key()).unwrap().expect("the service is written");
            maps.delete_service(&s.key()).unwrap();
            steps.push(("service deleted", outcome()));
            // The deletion moved the generation on; put back, the slot filled
            // before it answers again: the cache was in use.
            assert!(generation(&maps) > g, "deleting a service did not move the generation on");
            set_generation(&maps, g);
            steps.push(("generation put back", outcome()));
            maps.set_service(&s.key(), &raw).unwrap();
            steps.push(("service written again", outcome()));
            maps.set_own_mac(f.in0, MacAddr([2, 0, 0, 0, 0xfe, 0x77]).0).unwrap();
            steps.push(("own MAC changed", outcome()));
            maps.set_own_mac(f.in0, f.in0_mac.0).unwrap();
            steps.push(("own MAC back", outcome()));
            maps.remove_own_mac(f.in0).unwrap();
            steps.push(("own MAC removed", outcome()));
            steps
        })
        .unwrap();
    let want = [
        ("filled", "sent"),
        ("from the cache", "sent"),
        ("service deleted", "pass not-service"),
        ("generation put back", "sent"),
        ("service written again", "sent"),
        ("own MAC changed", "pass not-our-mac"),
        ("own MAC back", "sent"),
        ("own MAC removed", "pass not-our-mac"),
    ];
    let got: Vec<(&str, &str)> = steps.iter().map(|(s, o)| (*s, o.as_str())).collect();
    assert_eq!(got, want);
}
