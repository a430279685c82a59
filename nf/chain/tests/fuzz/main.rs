//! Differential fuzzing of the chain program (`chain.bpf.c`) against its
//! reference model (`model.rs`): a million frames, valid and mutated, on
//! the ingresses of two rule sets and out of the NFs. Each must get the
//! model's verdict and bytes, and move exactly the model's counters (every
//! counter of every ingress, chain and NF slot in use is compared after
//! every frame); whatever happens, the program never aborts, and a frame
//! routed out after the last NF has a valid IPv4 header checksum and one
//! hop less.

#[path = "../fixture/mod.rs"]
mod fixture;
mod model;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use fixture::{dst, Fixture, DOWN_SRC4, NFA_MAC, NFB_MAC, NFC_MAC, NFD_MAC, NFE_MAC, NFG_MAC, OTHER4, SRC4, SRC6};
use model::{diff, Model, Seen};
use xnf_chain::program::Plan;
use xnf_chain::program::{ChainMaps, ChainProgram, CounterReader, Counters, IngressReason, NfEntry, Port, Reason, Rule, MAX_RULES};
use xnf_core::class::Class;
use xnf_core::sources::Sources;
use xnf_packet::MacAddr;
use xnf_testrun::forward::Kernel;
use xnf_testrun::frames::{frame, hex, World};
use xnf_testrun::fuzz::{Fuzz, DEFAULT_FRAMES};
use xnf_testrun::{run_xdp, Verdict, XdpContext};

/// Counter slots in use: ingresses, chains, NFs (slot 6 is one no NF holds).
const INGRESS_SLOTS: u32 = 2;
const CHAIN_SLOTS: u32 = 10;
const NF_SLOTS: u32 = 7;
/// The NF slot a rule of set B points at, which no NF holds.
const EMPTY_NF: u32 = 6;

fn pfx(s: &str) -> Option<ipnet::IpNet> {
    Some(s.parse().expect("a prefix"))
}

/// The tables both rule sets share, as `xnf chain` plans them: NF a -> NF
/// b, NF c (strict source check), NF d (loose), NF e -> NF g, whose port
/// left the devmap (its namespace is gone); egresses in0, in1, out0, not
/// oth0.
fn base(f: &Fixture) -> Plan {
    let sources = Sources::read().expect("the host's addresses");
    let mut p = Plan::default();
    p.ports.insert(f.in0, Port::Ingress { mac: f.in0_mac.octets(), slot: 0 });
    p.ports.insert(f.in1, Port::Ingress { mac: f.in1_mac.octets(), slot: 1 });
    let nfs: [(u32, u32, Option<u32>, MacAddr); 6] = [
        (0, f.nfa, Some(1), NFA_MAC),
        (1, f.nfb, None, NFB_MAC),
        (2, f.nfc, None, NFC_MAC),
        (3, f.nfd, None, NFD_MAC),
        (4, f.nfe, Some(5), NFE_MAC),
        (5, f.nfg, None, NFG_MAC),
    ];
    for (slot, ifindex, next, nf_mac) in nfs {
        let rpf = sources.rpf(ifindex, &f.name(ifindex)).expect("rp_filter");
        p.ports.insert(ifindex, Port::Nf { slot, rpf });
        p.nfs.insert(slot, NfEntry { ifindex, next, host_mac: f.mac(ifindex).octets(), nf_mac: nf_mac.octets() });
        if ifindex != f.nfg {
            p.tx.insert(ifindex);
        }
    }
    p.tx.extend([f.in0, f.in1, f.out0]);
    p
}

fn rule(ifindex: u32, chain: u32, first_nf: Option<u32>, class: Class, unsure_drop: bool) -> Rule {
    Rule { ifindex, chain, first_nf, class, unsure_drop }
}

/// Rule set A: prefixes, ports with unsure frames dropped or steered, a
/// VLAN, a chain that is down, one into a gone NF, one into NF e (whose
/// successor is gone), and rules of in1 between those of in0.
fn plan_a(f: &Fixture) -> Plan {
    let (udp, tcp) = (Some(17), Some(6));
    let mut p = base(f);
    p.rules = vec![
        rule(f.in1, 7, Some(1), Class { dst: pfx("198.18.16.0/24"), ..Default::default() }, false),
        rule(f.in0, 3, Some(1), Class { proto: udp, dport: Some((7, 7)), dst: pfx("198.18.17.0/24"), ..Default::default() }, true),
        rule(f.in0, 0, Some(0), Class { dst: pfx("198.18.16.0/24"), ..Default::default() }, false),
        rule(f.in0, 1, Some(1), Class { vid: Some(100), ..Default::default() }, false),
        rule(f.in0, 2, Some(0), Class { proto: udp, dport: Some((5000, 5001)), dst: pfx("2001:db8:16::/64"), ..Default::default() }, false),
        rule(f.in0, 4, None, Class { src: pfx("198.18.0.77/32"), ..Default::default() }, false),
        rule(f.in0, 5, Some(5), Class { dst: pfx("198.18.30.0/24"), ..Default::default() }, false),
        rule(f.in0, 6, Some(2), Class { src: pfx("2001:db8::/48"), dst: pfx("2001:db8:20::/60"), ..Default::default() }, false),
        rule(f.in0, 8, Some(4), Class { proto: tcp, sport: Some((1000, 2000)), ..Default::default() }, false),
        rule(f.in1, 9, Some(3), Class { vid: Some(200), proto: tcp, ..Default::default() }, false),
    ];
    p
}

/// Rule set B: a tagged port class dropping unsure frames, protocol and
/// family classes, a source port, an empty NF slot, a catch-all; the table
/// full (rules of a port no frame arrives on fill it), its last rule in1's.
fn plan_b(f: &Fixture) -> Plan {
    let (udp, tcp) = (Some(17), Some(6));
    let mut p = base(f);
    p.rules = vec![
        rule(f.in0, 0, Some(1), Class { vid: Some(200), proto: tcp, dport: Some((80, 80)), ..Default::default() }, true),
        rule(f.in0, 1, Some(0), Class { ipv6: Some(true), proto: Some(58), ..Default::default() }, false),
        rule(f.in0, 2, Some(2), Class { proto: udp, sport: Some((53, 53)), src: pfx("198.18.0.0/16"), ..Default::default() }, false),
        rule(f.in0, 3, Some(3), Class { proto: tcp, ..Default::default() }, true),
        rule(f.in0, 4, None, Class { src: pfx("198.18.41.0/24"), ..Default::default() }, false),
        rule(f.in0, 5, Some(EMPTY_NF), Class { vid: Some(300), ..Default::default() }, false),
        rule(f.in1, 7, Some(3), Class { ipv6: Some(true), dst: pfx("2001:db8:3::/64"), ..Default::default() }, false),
        rule(f.in0, 6, Some(1), Class::default(), false),
    ];
    while p.rules.len() < MAX_RULES as usize - 1 {
        p.rules.push(rule(f.out0, 9, Some(1), Class::default(), false));
    }
    p.rules.push(rule(f.in1, 8, Some(4), Class { proto: udp, dport: Some((1500, 5000)), ..Default::default() }, true));
    p
}

/// Loads an instance of the program with `plan`'s tables.
fn load(plan: &Plan) -> (ChainProgram, ChainMaps) {
    let prog = ChainProgram::load(None).expect("the chain program loads");
    let m = prog.maps().unwrap();
    m.set_locals(&Sources::read().unwrap().locals()).unwrap();
    for (ifindex, port) in &plan.ports {
        m.set_port(*ifindex, *port).unwrap();
    }
    for (slot, nf) in &plan.nfs {
        m.set_nf(*slot, *nf).unwrap();
    }
    for ifindex in &plan.tx {
        m.add_tx(*ifindex).unwrap();
    }
    m.set_rules(&plan.rules).unwrap();
    (prog, m)
}

fn reader() -> CounterReader {
    CounterReader::new(INGRESS_SLOTS, CHAIN_SLOTS, NF_SLOTS).expect("a counter reader")
}

/// The addresses, VLANs and ports frames aim at (the rules' and the
/// routes'), to the MAC of the port they arrive on.
fn world(f: &Fixture, ifindex: u32) -> World {
    let v4 = [
        SRC4,
        DOWN_SRC4,
        OTHER4,
        dst::FWD4,
        fixture::CHAIN3_4,
        dst::NO_NEIGH4,
        dst::UNMANAGED4,
        dst::BLACKHOLE4,
        dst::UNREACHABLE4,
        dst::PROHIBIT4,
        dst::SMALL_MTU4,
        dst::NFC_NET4,
        dst::NFC_ADDR4,
        dst::LOCAL4,
        dst::NO_ROUTE4,
    ];
    let v6 = [SRC6, dst::FWD6, dst::NO_NEIGH6, dst::UNMANAGED6, dst::BLACKHOLE6, dst::UNREACHABLE6, dst::SMALL_MTU6, dst::LOCAL6, dst::NO_ROUTE6];
    let mut addrs: Vec<IpAddr> = v4.iter().map(|a| IpAddr::V4(*a)).chain(v6.iter().map(|a| IpAddr::V6(*a))).collect();
    // NF d's network and own address, broadcast and own addresses, in1's
    // networks, a next hop, a link-local address.
    for a in ["198.18.41.7", "198.18.41.1", "198.18.0.255", "198.18.1.1", "198.18.3.5", "2001:db8:3::5", "2001:db8:1::2", "fe80::1"] {
        addrs.push(a.parse().unwrap());
    }
    World { macs: vec![f.mac(ifindex)], addrs, vids: vec![0, 100, 200, 300], ports: vec![7, 53, 80, 1000, 1500, 2000, 5000, 5001, 5002] }
}

#[test]
fn the_chain_does_what_its_contract_and_the_kernel_rules_say_on_every_frame() {
    let f = Fixture::new().expect("fixture namespace (run as root)");
    f.dut
        .run(|| {
            let kernel = Kernel::read();
            let plans = [plan_a(&f), plan_b(&f)];
            let good_sources = BTreeMap::from([(f.nfc, "198.18.40.7".parse().unwrap())]);
            let models: Vec<_> = plans.iter().map(|p| Model::new(p, &kernel, &good_sources, IpAddr::V4(SRC4))).collect();
            let loaded: Vec<_> = plans.iter().map(load).collect();
            let mut readers: Vec<_> = plans.iter().map(|_| reader()).collect();
            let mut want: Vec<Counters> = loaded.iter().zip(&mut readers).map(|((_, m), r)| m.counters(r).unwrap()).collect();
            // Where frames arrive (rule set, port) and how often: mostly at
            // the ingresses, where the classes are.
            let at: [(usize, u32, u8); 9] =
                [(0, f.in0, 28), (0, f.in1, 7), (0, f.nfa, 6), (0, f.nfb, 14), (0, f.nfc, 7), (0, f.nfd, 7), (0, f.nfe, 3), (1, f.in0, 20), (1, f.in1, 8)];
            let worlds: Vec<_> = at.iter().map(|(_, i, _)| world(&f, *i)).collect();
            let mut seen: BTreeMap<Seen, u64> = BTreeMap::new();
            let fuzz = Fuzz::from_env("chain", DEFAULT_FRAMES);
            fuzz.run(|rng| {
                let mut n = rng.u8(..100);
                let which = at
                    .iter()
                    .position(|(_, _, w)| {
                        n < *w || {
                            n -= w;
                            false
                        }
                    })
                    .expect("weights add up to 100");
                let (set, ifindex, _) = at[which];
                let (prog, maps) = &loaded[set];
                let input = frame(rng, &worlds[which]);
                let expect = models[set].decide(&input, ifindex, &mut want[set]);
                *seen.entry(expect.seen).or_default() += 1;
                let got = match run_xdp(prog.prog(), &input, XdpContext { ingress_ifindex: ifindex, rx_queue_index: 0 }) {
                    Ok(r) => r,
                    Err(e) => return (input, Err(format!("test run failed: {e:#}"))),
                };
                let mut problems = Vec::new();
                if got.verdict == Verdict::Aborted {
                    problems.push("XDP_ABORTED".to_string());
                }
                if got.verdict != expect.verdict {
                    problems.push(format!("{}; the model says {} ({})", got.verdict.name(), expect.verdict.name(), expect.seen.name()));
                }
                let now = maps.counters(&mut readers[set]).expect("reading the counters");
                if now != want[set] {
                    problems.push(format!("counters differ: {}; the model says {}", diff(&now, &want[set]).join(", "), expect.seen.name()));
                    want[set] = now;
                }
                let want_frame = expect.frame.as_deref().unwrap_or(&input);
                if got.frame != want_frame {
                    problems.push(format!("sent {}\n    model  {}", hex(&got.frame), hex(want_frame)));
                }
                if got.verdict == Verdict::Redirect && expect.seen == Seen::Exit(Reason::Forwarded) {
                    let (a, b) = (xnf_testrun::kernel::view(&input), xnf_testrun::kernel::view(&got.frame));
                    match (a.ip(), b.ip()) {
                        (Some(a), Some(b)) if b.csum_ok && b.ttl + 1 == a.ttl => {}
                        _ => problems.push("the frame routed out has a bad IPv4 header checksum or not one hop less".into()),
                    }
                }
                let verdict =
                    if problems.is_empty() { Ok(()) } else { Err(format!("rule set {} port {}: {}", ["A", "B"][set], f.name(ifindex), problems.join("; "))) };
                (input, verdict)
            });
            let histogram: Vec<_> = seen.iter().map(|(s, n)| format!("{} {n}", s.name())).collect();
            eprintln!("fuzz chain: frames per outcome: {}", histogram.join(", "));
            // Every outcome a frame can have must have been reached: a
            // generator that stops reaching one tests nothing there. Out of
            // the last NF, a frame cannot be QinQ (any tag is a VLAN without
            // a device), for another MAC, on a port without forwarding (the
            // control plane enables it), short of headroom, on an
            // unconfigured or skb-mode port (the router's reasons).
            if fuzz.frames >= DEFAULT_FRAMES {
                let never = [Reason::Qinq, Reason::NotOurMac, Reason::FwdDisabled, Reason::NoHeadroom, Reason::Unconfigured, Reason::EgressSkbMode];
                let all: BTreeSet<Seen> = IngressReason::ALL
                    .iter()
                    .map(|r| Seen::Ingress(*r))
                    .chain([Seen::Next, Seen::NextGone])
                    .chain(Reason::ALL.iter().filter(|r| !never.contains(r)).map(|r| Seen::Exit(*r)))
                    .collect();
                let missed: Vec<_> = all.iter().filter(|s| !seen.contains_key(s)).map(|s| s.name()).collect();
                assert!(missed.is_empty(), "no frame got {missed:?}");
            }
        })
        .unwrap();
}
