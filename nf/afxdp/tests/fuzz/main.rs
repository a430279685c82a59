//! Differential fuzzing of the AF_XDP selector (`afxdp.bpf.c`) against its
//! reference model (`model.rs`): a million frames, valid and mutated, on
//! selectors with several class sets (none; protocols and ports; IPv4 and
//! IPv6 prefixes; VLANs and families; protocols alone; tables of random
//! classes, one of them full), with and without `unsure_drop`, on a queue
//! with a socket and one without. Each frame must get the model's verdict
//! and reason, no other counter may move, and it must leave unchanged;
//! whatever happens, the program never aborts.

#[path = "../fixture/mod.rs"]
mod fixture;
mod model;

use std::net::IpAddr;

use fixture::{Bench, QUEUE_NONE, QUEUE_SOCKET};
use model::{decide, Selector};
use xnf_afxdp::selector::{Reason, Stats, MAX_RULES};
use xnf_core::class::{Class, MatchSpec};
use xnf_testrun::frames::{frame, hex, World};
use xnf_testrun::fuzz::{Fuzz, DEFAULT_FRAMES};
use xnf_testrun::{run_xdp, Verdict, XdpContext};

const V4_NETS: [&str; 7] = ["198.18.0.0/24", "198.18.0.0/15", "198.19.1.0/31", "198.18.0.1/32", "0.0.0.0/0", "224.0.0.0/4", "198.18.0.128/25"];
const V6_NETS: [&str; 7] = ["2001:db8:1::/48", "2001:db8::/32", "2001:db8::/120", "fe80::/10", "::/0", "ff00::/8", "2001:db8:8000::/33"];
const PROTOS: [&str; 10] = ["udp", "tcp", "udp", "tcp", "icmp", "icmpv6", "50", "47", "132", "44"];
const PORTS: [&str; 7] = ["53", "80", "443", "5000-5010", "1024-65535", "0-1023", "65535"];
const VIDS: [u16; 4] = [100, 200, 300, 7];

fn class(spec: &str) -> Class {
    MatchSpec::parse(spec).and_then(|m| m.class()).unwrap_or_else(|e| panic!("class {spec:?}: {e:#}"))
}

fn classes(specs: &[&str]) -> Vec<Class> {
    specs.iter().map(|s| class(s)).collect()
}

/// A class as a user may write it (what `--match` accepts).
fn random_class(rng: &mut fastrand::Rng) -> Class {
    let mut keys = Vec::new();
    let v6 = rng.bool();
    if rng.u8(..100) < 25 {
        keys.push(format!("vlan={}", VIDS[rng.usize(..VIDS.len())]));
    }
    if rng.u8(..100) < 15 {
        keys.push(format!("family={}", if v6 { "ipv6" } else { "ipv4" }));
    }
    for key in ["src", "dst"] {
        if rng.u8(..100) < 30 {
            let net = if v6 { V6_NETS[rng.usize(..V6_NETS.len())] } else { V4_NETS[rng.usize(..V4_NETS.len())] };
            keys.push(format!("{key}={net}"));
        }
    }
    if rng.u8(..100) < 50 {
        let proto = PROTOS[rng.usize(..PROTOS.len())];
        keys.push(format!("proto={proto}"));
        if matches!(proto, "udp" | "tcp") {
            for key in ["sport", "dport"] {
                if rng.u8(..100) < 40 {
                    keys.push(format!("{key}={}", PORTS[rng.usize(..PORTS.len())]));
                }
            }
        }
    }
    class(&keys.join(","))
}

/// The selectors' classes, with how often frames meet each (weights add up to 100).
/// The random tables come from the run's seed.
fn selectors(seed: u64) -> Vec<(Selector, u8)> {
    let sel = |name: &str, classes: Vec<Class>, unsure_drop| Selector { name: name.to_string(), classes, unsure_drop };
    // A class that needs ports before one that does not: a frame hiding
    // its ports may be in the first and surely be in the second.
    let ports = classes(&["proto=udp,dport=5000-5010", "proto=tcp,sport=80", "proto=tcp,dport=443,sport=1024-65535", "src=198.18.0.0/24"]);
    let mut rng = fastrand::Rng::with_seed(seed ^ 0x5e1e_c70e);
    let full = (0..MAX_RULES).map(|_| random_class(&mut rng)).collect();
    let n = rng.usize(1..=MAX_RULES);
    let some = (0..n).map(|_| random_class(&mut rng)).collect();
    vec![
        (sel("no classes", vec![], false), 10),
        (sel("ports", ports.clone(), false), 15),
        (sel("ports, unsure dropped", ports, true), 10),
        (
            sel(
                "prefixes",
                classes(&["src=198.18.0.0/24", "dst=2001:db8:1::/48", "src=2001:db8::/120,dst=2001:db8::/32", "dst=198.19.1.0/31,proto=udp,dport=53"]),
                false,
            ),
            15,
        ),
        (sel("vlans", classes(&["vlan=100", "vlan=200,family=ipv6", "vlan=300,proto=tcp,dport=80", "family=ipv4,proto=icmp"]), false), 15),
        (sel("protocols, unsure dropped", classes(&["proto=icmpv6", "proto=50", "proto=udp,src=198.18.0.0/15"]), true), 10),
        (sel("16 random classes", full, false), 15),
        (sel("random classes, unsure dropped", some, true), 10),
    ]
}

/// Frames come in blocks of this many per selector (each block's from
/// its own seed, so that any frame can be reproduced on its own).
const BLOCK: u64 = 4096;

fn block_seed(seed: u64, frame: u64) -> u64 {
    seed ^ (frame / BLOCK).wrapping_mul(0x2545_f491_4f6c_dd1d).rotate_left(29)
}

fn pick(rng: &mut fastrand::Rng, weights: &[u8]) -> usize {
    let mut n = rng.u8(..100);
    weights
        .iter()
        .position(|w| {
            n < *w || {
                n -= w;
                false
            }
        })
        .expect("weights add up to 100")
}

/// Addresses inside the prefixes above and just outside, VIDs and ports
/// of the classes and their neighbours.
fn world() -> World {
    let addrs = [
        "198.18.0.1",
        "198.18.0.255",
        "198.18.0.128",
        "198.18.1.0",
        "198.19.1.0",
        "198.19.1.1",
        "198.19.1.2",
        "198.17.255.255",
        "198.20.0.0",
        "2001:db8:1::1",
        "2001:db8:1:ffff:ffff:ffff:ffff:ffff",
        "2001:db8:2::1",
        "2001:db8::5",
        "2001:db8::100",
        "2001:db8:8000::1",
        "2001:db8:7fff::1",
        "fe80::1",
    ];
    World {
        macs: vec![xnf_packet::MacAddr([2, 0, 0, 0, 0, 1])],
        addrs: addrs.iter().map(|a| a.parse::<IpAddr>().unwrap()).collect(),
        vids: VIDS.to_vec(),
        ports: vec![53, 80, 443, 1023, 1024, 4999, 5000, 5005, 5010, 5011, 65535],
    }
}

#[test]
fn the_selector_sends_every_frame_where_its_classes_say() {
    let bench = Bench::new("axfz");
    let fuzz = Fuzz::from_env("afxdp selector", DEFAULT_FRAMES);
    let sels = selectors(fuzz.seed);
    for (s, _) in &sels {
        eprintln!("fuzz afxdp selector: {}: {}", s.name, s.classes.iter().map(|c| format!("{c:?}")).collect::<Vec<_>>().join("; "));
    }
    let weights: Vec<u8> = sels.iter().map(|(_, w)| *w).collect();
    let world = world();
    bench
        .ns
        .run(|| {
            let set = bench.socket();
            // One program: loading one costs the verifier half a second;
            // swapping its classes (one new table, as `xnf afxdp` does) an
            // RCU grace period (the kernel waits for running programs after
            // a map-in-map update), so the classes change every block only.
            let prog = bench.selector(&set);
            let mut current = None;
            let mut index = fuzz.first;
            // The program is only ever run here: its counters before a
            // frame are what they were after the last one.
            let mut last = prog.stats().unwrap();
            let mut seen = [0u64; Reason::ALL.len()];
            fuzz.run(|rng| {
                let which = pick(&mut fastrand::Rng::with_seed(block_seed(fuzz.seed, index)), &weights);
                index += 1;
                let sel = &sels[which].0;
                if current != Some(which) {
                    prog.set_rules(&sel.classes, sel.unsure_drop).expect("classes accepted");
                    current = Some(which);
                }
                let socket = rng.u8(..100) < 85;
                let queue = if socket { QUEUE_SOCKET } else { QUEUE_NONE };
                let input = frame(rng, &world);
                let want = decide(sel, &input, socket);
                seen[want.reason as usize] += 1;
                let got = match run_xdp(prog.prog(), &input, XdpContext { ingress_ifindex: bench.ifindex, rx_queue_index: queue }) {
                    Ok(r) => r,
                    Err(e) => return (input, Err(format!("test run failed: {e:#}"))),
                };
                let after = prog.stats().unwrap();
                let delta = Stats(std::array::from_fn(|i| after.0[i] - last.0[i]));
                last = after;
                let mut want_delta = Stats::default();
                want_delta.0[want.reason as usize] = 1;
                let mut problems = Vec::new();
                if got.verdict == Verdict::Aborted {
                    problems.push("XDP_ABORTED".to_string());
                }
                if got.verdict != want.verdict || delta != want_delta {
                    let moved: Vec<_> = Reason::ALL.iter().filter(|r| delta.get(**r) > 0).map(|r| r.name()).collect();
                    problems.push(format!("{} with {moved:?}; the model says {} with {}", got.verdict.name(), want.verdict.name(), want.reason.name()));
                }
                if got.frame != input {
                    problems.push(format!("changed the frame to {}", hex(&got.frame)));
                }
                let verdict = if problems.is_empty() { Ok(()) } else { Err(format!("{} (queue {queue}): {}", sel.name, problems.join("; "))) };
                (input, verdict)
            });
            let histogram: Vec<_> = Reason::ALL.iter().map(|r| format!("{} {}", r.name(), seen[*r as usize])).collect();
            eprintln!("fuzz afxdp selector: frames per reason: {}", histogram.join(", "));
            // A generator that stops reaching a reason tests nothing there.
            if fuzz.frames >= DEFAULT_FRAMES {
                let missed: Vec<_> = Reason::ALL.iter().filter(|r| seen[**r as usize] == 0).map(|r| r.name()).collect();
                assert!(missed.is_empty(), "no frame got {missed:?}");
            }
            drop(prog);
        })
        .unwrap();
}
