//! Differential fuzzing of the router (`router.bpf.c`) against its
//! reference model (`model.rs`): a million frames, valid and mutated, on
//! every kind of ingress and in every FIB mode. Each must get the model's
//! verdict, its reason (and no other counter may move), and the model's
//! bytes; and whatever happens, the program never aborts, and a forwarded
//! frame has a valid IPv4 header checksum and one hop less.
//!
//! The route cache (`--fib cache`) must be invisible: the same decisions
//! as full lookups. Its instances are also checked against a shadow of
//! what it can hold ([`Shadow`]): a hit only on an entry filled in the
//! current generation, never a miss on one its slot surely holds, a bypass
//! exactly for a family stepping aside. The FIB changes twice in the run,
//! at fixed frame numbers (so any frame still reproduces alone): the
//! policy rule goes (IPv4 stops stepping aside), then the next hop gets a
//! new MAC; each change is followed by a generation bump, as the follower
//! does, and the model is read from the kernel again.

#[path = "../fixture/mod.rs"]
mod fixture;
mod model;

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

use fixture::{dst, Fixture, Ingress, POLICY_SRC4, SRC4, SRC6, VLAN200_SRC4};
use model::Model;
use xnf_router::program::aside_bits;
use xnf_router::program::{cache_slot_of, CacheOutcome, FibMode, Reason, RouterMaps, RouterProgram, Stats, ASIDE_V4, ASIDE_V6};
use xnf_testrun::frames::{frame, World};
use xnf_testrun::fuzz::{Fuzz, DEFAULT_FRAMES};
use xnf_testrun::kernel::{view, L3};
use xnf_testrun::{run_xdp, Verdict, XdpContext};

/// The router instances frames arrive at (ingress, FIB mode), with how
/// often: mostly where forwarding happens.
const INGRESSES: [(Ingress, FibMode, u8); 7] = [
    (Ingress::In0, FibMode::Full, 30),
    (Ingress::In0, FibMode::Direct, 20),
    (Ingress::In0, FibMode::Cache, 20),
    (Ingress::In0Generic, FibMode::Full, 15),
    (Ingress::In1, FibMode::Full, 5),
    (Ingress::In1, FibMode::Cache, 5),
    (Ingress::In0Unconfigured, FibMode::Full, 5),
];

fn pick(rng: &mut fastrand::Rng) -> usize {
    let mut n = rng.u8(..100);
    INGRESSES
        .iter()
        .position(|(_, _, w)| {
            n < *w || {
                n -= w;
                false
            }
        })
        .expect("weights add up to 100")
}

/// The FIB changes at these fractions of the default run: the policy
/// rule is deleted, then the next hop's MAC changes.
fn phase(frame: u64) -> u8 {
    (frame * 3 / DEFAULT_FRAMES).min(2) as u8
}

/// Brings dut's FIB to `phase` (from any earlier one).
fn enter_phase(f: &Fixture, from: u8, to: u8) {
    if from < 1 && to >= 1 {
        f.dut.ip(&["rule", "del", "pref", "100"]).expect("deleting the policy rule");
    }
    if from < 2 && to >= 2 {
        f.dut
            .ip(&["neigh", "replace", "198.18.1.2", "lladdr", "02:00:00:00:01:03", "nud", "permanent", "dev", &f.name(f.out0)])
            .expect("changing the next hop's MAC");
        f.dut
            .ip(&["neigh", "replace", "2001:db8:1::2", "lladdr", "02:00:00:00:01:03", "nud", "permanent", "dev", &f.name(f.out0)])
            .expect("changing the next hop's MAC");
    }
}

/// What a cache instance can hold, as far as its outcomes have shown. The
/// cache is direct-mapped per CPU (the thread is pinned): a key has one
/// slot, and the last key filled into it is what it holds.
#[derive(Default)]
struct Shadow {
    gen: u32,
    aside: u32,
    /// Keys looked up (and so maybe cached) in this generation.
    maybe: HashSet<Key>,
    /// Slots surely holding a key of this generation: the last lookup on
    /// the slot forwarded (so the helper succeeded and filled it).
    sure: HashMap<u32, Key>,
}

/// The cache's key: FIB ingress, destination, IPv4 DSCP.
type Key = (u32, IpAddr, u8);

impl Shadow {
    /// Checks `outcome` for a frame with `key` whose model verdict is
    /// `want`, and learns from it.
    fn check(&mut self, key: Option<Key>, outcome: Option<CacheOutcome>, want: Verdict) -> Result<(), String> {
        let Some(key) = key else {
            return match outcome {
                None => Ok(()),
                Some(o) => Err(format!("cache {} for a frame the model never looks up", o.name())),
            };
        };
        let aside = if key.1.is_ipv4() { ASIDE_V4 } else { ASIDE_V6 };
        match outcome {
            None if want == Verdict::Redirect => Err("forwarded without a lookup counted".into()),
            None => Ok(()),
            Some(CacheOutcome::Bypass) if self.aside & aside == 0 => Err("bypass while the family is cached".into()),
            Some(o) if o != CacheOutcome::Bypass && self.aside & aside != 0 => Err(format!("{} while the family steps aside", o.name())),
            Some(CacheOutcome::Bypass) => Ok(()),
            Some(CacheOutcome::Hit) if !self.maybe.contains(&key) => Err("hit on an entry not filled in this generation".into()),
            Some(CacheOutcome::Hit) => Ok(()),
            Some(CacheOutcome::Miss) => {
                let slot = cache_slot_of(key.0, key.1, key.2);
                if self.sure.get(&slot) == Some(&key) {
                    return Err("miss on a destination its slot holds in this generation".into());
                }
                self.maybe.insert(key);
                // A lookup that did not forward may have succeeded (and
                // filled the slot) or not: the slot is then unknown.
                if want == Verdict::Redirect {
                    self.sure.insert(slot, key);
                } else {
                    self.sure.remove(&slot);
                }
                Ok(())
            }
        }
    }

    /// A new generation (and step-aside bits) written to the instance.
    fn publish(&mut self, maps: &RouterMaps, aside: u32) {
        self.gen += 1;
        self.aside = aside;
        self.maybe.clear();
        self.sure.clear();
        maps.set_cache_ctl(self.gen, aside).expect("writing the cache's control word");
    }
}

/// The cache key of a frame that reaches the lookup on `fib_iif`, if the
/// model's view of it is IP.
fn key_of(input: &[u8], fib_iif: u32) -> Option<Key> {
    let v = view(input);
    let L3::Ip(ip) = &v.l3 else { return None };
    Some((fib_iif, ip.dst, if ip.v6 { 0 } else { ip.tos & 0xfc }))
}

/// The addresses, VLANs and ports frames aim at, to the MAC of the
/// interface they arrive on.
fn world(f: &Fixture, ingress: Ingress) -> World {
    use std::net::IpAddr;
    let v4 = [
        SRC4,
        VLAN200_SRC4,
        POLICY_SRC4,
        dst::FWD4,
        dst::NO_NEIGH4,
        dst::UNMANAGED4,
        dst::BLACKHOLE4,
        dst::UNREACHABLE4,
        dst::PROHIBIT4,
        dst::SMALL_MTU4,
        dst::VLAN100_4,
        dst::LOCAL4,
        dst::NO_ROUTE4,
        dst::SKB4,
    ];
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
            // The route cache is per CPU: every run on one CPU meets one region.
            xnf_testrun::pin_to_current_cpu();
            let fuzz = Fuzz::from_env("router", DEFAULT_FRAMES);
            let mut at = phase(fuzz.first);
            enter_phase(&f, 0, at);
            let mut model = Model::new(&f);
            let worlds: Vec<_> = INGRESSES.iter().map(|(i, _, _)| world(&f, *i)).collect();
            let loaded: Vec<(RouterProgram, RouterMaps, u32)> = INGRESSES.iter().map(|(i, fib, _)| f.load(*i, *fib).expect("router loads")).collect();
            let mut shadows: Vec<Shadow> = INGRESSES.iter().map(|_| Shadow::default()).collect();
            // As the follower would: the FIB's shape decides which family
            // steps aside; every change bumps the generation.
            let publish = |shadows: &mut Vec<Shadow>| {
                let aside = aside_bits(&xnf_netns::netlink::FibShape::scan().expect("reading the FIB's shape").shape());
                for (i, (_, fib, _)) in INGRESSES.iter().enumerate() {
                    if *fib == FibMode::Cache {
                        shadows[i].publish(&loaded[i].1, aside);
                        loaded[i].0.renew_lease().expect("renewing the lease");
                    }
                }
                aside
            };
            let first_aside = publish(&mut shadows);
            assert_eq!(first_aside & ASIDE_V4 != 0, at == 0, "the policy rule makes IPv4 step aside, and only it");
            let mut seen = [0u64; Reason::ALL.len()];
            let mut outcomes = [0u64; CacheOutcome::ALL.len()];
            let mut index = fuzz.first;
            let mut renewed = std::time::Instant::now();
            fuzz.run(|rng| {
                let now = phase(index);
                index += 1;
                if now != at {
                    enter_phase(&f, at, now);
                    at = now;
                    model = Model::new(&f);
                    publish(&mut shadows);
                }
                let which = pick(rng);
                let (ingress, fib, _) = INGRESSES[which];
                let (prog, maps, slot) = &loaded[which];
                // The lease (256 jiffies, 1 s at HZ=250) renewed as the
                // follower does, every 100 ms, however slow the run.
                if renewed.elapsed() > std::time::Duration::from_millis(100) {
                    for (i, (_, fib, _)) in INGRESSES.iter().enumerate() {
                        if *fib == FibMode::Cache {
                            loaded[i].0.renew_lease().unwrap();
                        }
                    }
                    renewed = std::time::Instant::now();
                }
                let input = frame(rng, &worlds[which]);
                let want = model.decide(&input, ingress, fib == FibMode::Direct);
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
                if fib == FibMode::Cache {
                    let counted: Vec<CacheOutcome> = CacheOutcome::ALL.into_iter().filter(|o| delta.cache(*o) > 0).collect();
                    if delta.cache.iter().sum::<u64>() > 1 {
                        problems.push(format!("cache counted {counted:?} for one frame"));
                    }
                    let outcome = counted.first().copied();
                    if let Some(o) = outcome {
                        want_delta.cache[o as usize] = 1;
                        outcomes[o as usize] += 1;
                    }
                    let key = model.fib_ingress(&input, ingress).and_then(|iif| key_of(&input, iif));
                    if let Err(e) = shadows[which].check(key, outcome, want.verdict) {
                        problems.push(format!("route cache: {e}"));
                    }
                }
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
                let verdict = if problems.is_empty() { Ok(()) } else { Err(format!("{ingress:?} {} (phase {at}): {}", fib.name(), problems.join("; "))) };
                (input, verdict)
            });
            let histogram: Vec<_> = Reason::ALL.iter().map(|r| format!("{} {}", r.name(), seen[*r as usize])).collect();
            eprintln!("fuzz router: frames per reason: {}", histogram.join(", "));
            let cache: Vec<_> = CacheOutcome::ALL.iter().map(|o| format!("{} {}", o.name(), outcomes[*o as usize])).collect();
            eprintln!("fuzz router: route cache lookups: {}", cache.join(", "));
            // The frames must reach every reason but the one no frame can
            // cause (a tag push without headroom), and the cache every
            // outcome: a generator that stops reaching one tests nothing there.
            if fuzz.frames >= DEFAULT_FRAMES {
                let missed: Vec<_> = Reason::ALL.iter().filter(|r| **r != Reason::NoHeadroom && seen[**r as usize] == 0).map(|r| r.name()).collect();
                assert!(missed.is_empty(), "no frame got {missed:?}");
                assert!(outcomes.iter().all(|n| *n > 1000), "route cache outcomes too rare: {cache:?}");
            }
        })
        .unwrap();
}
