//! Differential fuzzing of the router (`router.bpf.c`) against its
//! reference model (`model.rs`): a million frames, valid and mutated, on
//! every kind of ingress and in both FIB modes. Each must get the model's
//! verdict, its reason (and no other counter may move), and the model's
//! bytes; and whatever happens, the program never aborts, and a forwarded
//! frame has a valid IPv4 header checksum and one hop less.

#[path = "../fixture/mod.rs"]
mod fixture;
mod model;

use fixture::{dst, Fixture, Ingress, POLICY_SRC4, SRC4, SRC6, VLAN200_SRC4};
use model::Model;
use xnf_router::program::{Reason, Stats};
use xnf_testrun::frames::{frame, World};
use xnf_testrun::fuzz::{Fuzz, DEFAULT_FRAMES};
use xnf_testrun::{run_xdp, Verdict, XdpContext};

/// The router instances frames arrive at (ingress, direct FIB lookups),
/// with how often: mostly where forwarding happens.
const INGRESSES: [(Ingress, bool, u8); 5] = [
    (Ingress::In0, false, 40),
    (Ingress::In0, true, 25),
    (Ingress::In0Generic, false, 20),
    (Ingress::In1, false, 10),
    (Ingress::In0Unconfigured, false, 5),
];

fn pick(rng: &mut fastrand::Rng) -> usize {
    let mut n = rng.u8(..100);
    INGRESSES.iter().position(|(_, _, w)| n < *w || { n -= w; false }).expect("weights add up to 100")
}

/// The addresses, VLANs and ports frames aim at, to the MAC of the
/// interface they arrive on.
fn world(f: &Fixture, ingress: Ingress) -> World {
    use std::net::IpAddr;
    let v4 = [SRC4, VLAN200_SRC4, POLICY_SRC4, dst::FWD4, dst::NO_NEIGH4, dst::UNMANAGED4, dst::BLACKHOLE4, dst::UNREACHABLE4, dst::PROHIBIT4, dst::SMALL_MTU4, dst::VLAN100_4, dst::LOCAL4, dst::NO_ROUTE4, dst::SKB4];
    let v6 = [SRC6, dst::FWD6, dst::NO_NEIGH6, dst::UNMANAGED6, dst::BLACKHOLE6, dst::UNREACHABLE6, dst::SMALL_MTU6, dst::VLAN100_6, dst::LOCAL6, dst::SKB6];
    let mut addrs: Vec<IpAddr> = v4.iter().map(|a| IpAddr::V4(*a)).chain(v6.iter().map(|a| IpAddr::V6(*a))).collect();
    // Next hops, the interfaces' own, network and broadcast addresses.
    for a in ["198.18.1.2", "198.18.0.255", "198.18.0.0", "198.18.1.1", "198.18.3.5", "2001:db8:1::2", "2001:db8:1::1", "fe80::1"] {
        addrs.push(a.parse().unwrap());
    }
    let mac = if ingress == Ingress::In1 { f.in1_mac } else { f.in0_mac };
    World { macs: vec![mac], addrs, vids: vec![0, 100, 200, 300], ports: vec![9, 53, 80] }
}

#[test]
fn the_router_does_what_the_kernel_rules_say_on_every_frame() {
    let f = Fixture::new().expect("fixture namespace (run as root)");
    f.dut
        .run(|| {
            let model = Model::new(&f);
            let worlds: Vec<_> = INGRESSES.iter().map(|(i, _, _)| world(&f, *i)).collect();
            let loaded: Vec<_> = INGRESSES.iter().map(|(i, direct, _)| f.load(*i, *direct).expect("router loads")).collect();
            let mut seen = [0u64; Reason::ALL.len()];
            let fuzz = Fuzz::from_env("router", DEFAULT_FRAMES);
            fuzz.run(|rng| {
                let which = pick(rng);
                let (ingress, direct, _) = INGRESSES[which];
                let (prog, maps, slot) = &loaded[which];
                let input = frame(rng, &worlds[which]);
                let want = model.decide(&input, ingress, direct);
                seen[want.reason as usize] += 1;
                let before = maps.stats(*slot).unwrap();
                let got = match run_xdp(prog.prog(), &input, XdpContext { ingress_ifindex: f.ifindex(ingress), rx_queue_index: 0 }) {
                    Ok(r) => r,
                    Err(e) => return (input, Err(format!("test run failed: {e:#}"))),
                };
                let delta = maps.stats(*slot).unwrap().delta(&before);
                let mut want_delta = Stats::default();
                want_delta.packets[want.verdict as usize] = 1;
                want_delta.bytes[want.verdict as usize] = input.len() as u64;
                want_delta.reasons[want.reason as usize] = 1;
                let mut problems = Vec::new();
                if got.verdict == Verdict::Aborted {
                    problems.push("XDP_ABORTED".to_string());
                }
                if got.verdict != want.verdict || delta != want_delta {
                    let reasons: Vec<_> = Reason::ALL.iter().filter(|r| delta.reason(**r) > 0).map(|r| r.name()).collect();
                    problems.push(format!("{} with {reasons:?}; the model says {} with {}", got.verdict.name(), want.verdict.name(), want.reason.name()));
                }
                let want_frame = want.frame.as_deref().unwrap_or(&input);
                if got.frame != want_frame {
                    problems.push(format!("sent {}\n    model  {}", xnf_testrun::frames::hex(&got.frame), xnf_testrun::frames::hex(want_frame)));
                }
                let verdict = if problems.is_empty() { Ok(()) } else { Err(format!("{ingress:?}{}: {}", if direct { " direct" } else { "" }, problems.join("; "))) };
                (input, verdict)
            });
            let histogram: Vec<_> = Reason::ALL.iter().map(|r| format!("{} {}", r.name(), seen[*r as usize])).collect();
            eprintln!("fuzz router: frames per reason: {}", histogram.join(", "));
            // The frames must reach every reason but the one no frame can
            // cause (a tag push without headroom): a generator that stops
            // reaching one tests nothing there.
            if fuzz.frames >= DEFAULT_FRAMES {
                let missed: Vec<_> = Reason::ALL.iter().filter(|r| **r != Reason::NoHeadroom && seen[**r as usize] == 0).map(|r| r.name()).collect();
                assert!(missed.is_empty(), "no frame got {missed:?}");
            }
        })
        .unwrap();
}
