//! Packet tests of the route cache (`--fib cache`, fib_cache.h) through
//! `BPF_PROG_TEST_RUN`: a table run in order, since each row leaves the
//! cache as the next expects. Rows are frames — verdict, reason, the exact
//! frame out, and which cache outcome it must count (the whole counter
//! delta: nothing else moves) — or the control-plane steps the follower
//! takes (a generation bump, a family stepping aside, the lease ending).
//!
//! The fixture's FIB has a policy rule (POLICY_SRC4 → table 100), for
//! which the follower makes IPv4 step aside; here the table drives the
//! control word itself, as the follower would for a FIB without it, and
//! no row comes from POLICY_SRC4. That the follower computes the step
//! aside from real rules is the namespace test's business (cache.rs).

mod fixture;

use std::net::{IpAddr, Ipv4Addr};

use fixture::{dst, Fixture, Ingress, GEN_MAC, NH_MAC, SRC4, SRC6, VLAN200_SRC4, VLAN_NH_MAC};
use xnf_packet::{MacAddr, PacketBuilder};
use xnf_router::program::{CacheOutcome, FibMode, Reason, Stats, ASIDE_V4};
use xnf_testrun::table::{check_run, Out};
use xnf_testrun::{run_xdp, Verdict, XdpContext};

/// A frame and what must become of it.
struct Frame {
    desc: &'static str,
    input: Vec<u8>,
    verdict: Verdict,
    reason: Reason,
    output: Out,
    /// `None`: the frame never reaches the lookup.
    outcome: Option<CacheOutcome>,
}

enum Row {
    Frame(Frame),
    /// The follower saw a change: every entry retires.
    Bump,
    /// The kernel notified a change (the follower's socket filter ran).
    KernelBump,
    /// Families stepping aside (`ASIDE_*` bits).
    Aside(u32),
    /// The follower is gone: the lease ends (and the generation moves on).
    EndLease,
    Renew,
    /// The entry for this destination (from in0) must be cached with this
    /// egress MTU and next-hop MAC, or (None) be absent.
    Entry(IpAddr, Option<(u16, MacAddr)>),
}

const PAYLOAD: &[u8] = b"xnf cache packet test";

struct Rows<'f> {
    f: &'f Fixture,
    rows: Vec<Row>,
}

impl Rows<'_> {
    fn udp(&self, eth: PacketBuilder, src: IpAddr, dst: IpAddr, ttl: u8, len: usize) -> PacketBuilder {
        let payload = if len == 0 { PAYLOAD.to_vec() } else { vec![0x5a; len] };
        eth.ip(src, dst).ttl(ttl).udp(40000, 9).payload(&payload)
    }
    fn frame(&mut self, desc: &'static str, input: Vec<u8>, verdict: Verdict, reason: Reason, output: Out, outcome: Option<CacheOutcome>) {
        self.rows.push(Row::Frame(Frame { desc, input, verdict, reason, output, outcome }));
    }
    /// src -> dst from in0, forwarded to out0's next hop with one hop less.
    fn forward(&mut self, desc: &'static str, src: IpAddr, dst: IpAddr, tos: u8, outcome: CacheOutcome) {
        let (eth_in, eth_out) = (PacketBuilder::ethernet(GEN_MAC, self.f.in0_mac), PacketBuilder::ethernet(self.f.out0_mac, NH_MAC));
        let input = self.udp(eth_in, src, dst, 64, 0).dscp(tos >> 2).ecn(tos & 3).build();
        let output = self.udp(eth_out, src, dst, 63, 0).dscp(tos >> 2).ecn(tos & 3).build();
        self.frame(desc, input, Verdict::Redirect, Reason::Forwarded, Out::Frame(output), Some(outcome));
    }
    fn pass(&mut self, desc: &'static str, input: Vec<u8>, reason: Reason, outcome: Option<CacheOutcome>) {
        self.frame(desc, input, Verdict::Pass, reason, Out::Unchanged, outcome);
    }
}

fn rows(f: &Fixture) -> Vec<Row> {
    use CacheOutcome::{Bypass, Hit, Miss};
    let mut t = Rows { f, rows: vec![Row::Renew, Row::Aside(0)] };
    let (src4, src6, fwd4, fwd6): (IpAddr, IpAddr, IpAddr, IpAddr) = (SRC4.into(), SRC6.into(), dst::FWD4.into(), dst::FWD6.into());
    let eth_in = || PacketBuilder::ethernet(GEN_MAC, f.in0_mac);

    t.rows.push(Row::Entry(fwd4, None));
    t.forward("first packet to a destination asks the FIB", src4, fwd4, 0, Miss);
    t.rows.push(Row::Entry(fwd4, Some((1500, NH_MAC))));
    t.forward("the next is answered by the cache, same bytes out", src4, fwd4, 0, Hit);
    t.forward("another source, same destination: a hit (the key is the destination)", Ipv4Addr::new(198, 18, 0, 10).into(), fwd4, 0, Hit);
    t.forward("ECN bits are not part of the key", src4, fwd4, 0x01, Hit);
    t.forward("another DSCP is another key (TOS routes)", src4, fwd4, 0x10, Miss);
    t.forward("... and then cached too", src4, fwd4, 0x10, Hit);
    let ttl1 = t.udp(eth_in(), src4, fwd4, 1, 0).build();
    t.pass("TTL 1 to a cached destination: the cache answers, the kernel sends time-exceeded", ttl1, Reason::Ttl, Some(Hit));
    let martian = t.udp(eth_in(), Ipv4Addr::new(198, 18, 0, 2).into(), fwd4, 64, 0).build();
    t.pass("dut's own address as source, cached destination: still refused", martian, Reason::Martian, Some(Hit));

    // MTU: FRAG_NEEDED is not cached; a cached entry still checks the size.
    let small: IpAddr = dst::SMALL_MTU4.into();
    let big = t.udp(eth_in(), src4, small, 64, 1100).build();
    t.pass("too big for the route's MTU 1000, uncached: FRAG_NEEDED, nothing cached", big.clone(), Reason::Mtu, Some(Miss));
    t.rows.push(Row::Entry(small, None));
    t.forward("small enough: forwarded and cached with the route's MTU", src4, small, 0, Miss);
    t.rows.push(Row::Entry(small, Some((1000, NH_MAC))));
    t.pass("too big, cached: the cache's MTU says FRAG_NEEDED", big, Reason::Mtu, Some(Hit));

    // What the kernel must handle is never cached: each asks again.
    for _ in 0..2 {
        let nn = t.udp(eth_in(), src4, dst::NO_NEIGH4.into(), 64, 0).build();
        t.pass("no neighbour: not cached, the kernel resolves", nn, Reason::NoNeigh, Some(Miss));
        let bh = t.udp(eth_in(), src4, dst::BLACKHOLE4.into(), 64, 0).build();
        t.frame("blackhole: not cached, dropped", bh, Verdict::Drop, Reason::Blackhole, Out::Unchanged, Some(Miss));
    }
    let other = t.udp(PacketBuilder::ethernet(GEN_MAC, MacAddr([2, 0, 0, 0, 0, 0x77])), src4, fwd4, 64, 0).build();
    t.pass("not our MAC: never reaches the lookup", other, Reason::NotOurMac, None);

    // IPv6, VLANs.
    t.forward("IPv6: asks the FIB", src6, fwd6, 0, Miss);
    t.forward("IPv6: cached", src6, fwd6, 0, Hit);
    let v100: IpAddr = dst::VLAN100_4.into();
    for outcome in [Miss, Hit] {
        let input = t.udp(eth_in(), src4, v100, 64, 0).build();
        let output = t.udp(PacketBuilder::ethernet(f.v100_mac, VLAN_NH_MAC).vlan(100), src4, v100, 63, 0).build();
        t.frame(
            "egress on a VLAN device: the tag is pushed whether cached or not",
            input,
            Verdict::Redirect,
            Reason::Forwarded,
            Out::Frame(output),
            Some(outcome),
        );
    }
    let tagged = t.udp(eth_in().vlan(200), VLAN200_SRC4.into(), fwd4, 64, 0).build();
    let untagged = t.udp(PacketBuilder::ethernet(f.out0_mac, NH_MAC), VLAN200_SRC4.into(), fwd4, 63, 0).build();
    t.frame(
        "tagged ingress: the VLAN device is the key's ingress, a miss",
        tagged.clone(),
        Verdict::Redirect,
        Reason::Forwarded,
        Out::Frame(untagged.clone()),
        Some(Miss),
    );
    t.frame("tagged ingress again: a hit", tagged, Verdict::Redirect, Reason::Forwarded, Out::Frame(untagged), Some(Hit));

    // The follower's steps.
    t.rows.push(Row::Bump);
    t.forward("after a generation bump: a miss", src4, fwd4, 0, Miss);
    t.forward("... then cached again", src4, fwd4, 0, Hit);
    t.rows.push(Row::KernelBump);
    t.forward("after the kernel's bump (a notification, before the follower reads it): a miss", src4, fwd4, 0, Miss);
    t.forward("... then cached again, with the kernel's generation", src4, fwd4, 0, Hit);
    t.rows.push(Row::Aside(ASIDE_V4));
    t.forward("IPv4 stepping aside: the FIB answers", src4, fwd4, 0, Bypass);
    t.forward("IPv6 still cached", src6, fwd6, 0, Miss);
    t.forward("IPv6 still cached, hit", src6, fwd6, 0, Hit);
    t.rows.push(Row::Aside(0));
    t.rows.push(Row::EndLease);
    t.forward("no lease (the follower died): the FIB answers", src4, fwd4, 0, Bypass);
    t.forward("no lease: IPv6 too", src6, fwd6, 0, Bypass);
    t.rows.push(Row::Renew);
    t.forward("a new lease starts a new generation: a miss", src4, fwd4, 0, Miss);
    t.forward("... then a hit", src4, fwd4, 0, Hit);
    t.rows
}

#[test]
fn route_cache_packet_table() {
    let f = Fixture::new().expect("fixture namespace (run as root)");
    let failures = f
        .dut
        .run(|| {
            // The cache is per CPU: every frame must meet the same region.
            xnf_testrun::pin_to_current_cpu();
            let (prog, maps, slot) = f.load(Ingress::In0, FibMode::Cache).expect("router loads");
            let ctx = XdpContext { ingress_ifindex: f.in0, rx_queue_index: 0 };
            let mut failures = Vec::new();
            let mut frames = 0u32;
            // The lease renewed as the follower does (every 100 ms) while
            // it runs: an emulated guest can take longer than the lease's
            // 256 jiffies over a few rows. Not after EndLease, until Renew.
            let (mut leased, mut renewed) = (false, std::time::Instant::now());
            for row in rows(&f) {
                if leased && renewed.elapsed() > std::time::Duration::from_millis(100) {
                    prog.renew_lease().unwrap();
                    renewed = std::time::Instant::now();
                }
                let ctl = maps.cache_ctl().unwrap();
                match row {
                    Row::Bump => maps.set_cache_ctl(ctl.gen + 1, ctl.aside).unwrap(),
                    Row::KernelBump => {
                        let k = maps.kernel_gen().unwrap();
                        prog.kernel_bump().unwrap();
                        assert_eq!(maps.kernel_gen().unwrap(), k + 1, "the notification filter counts one change");
                    }
                    Row::Aside(bits) => maps.set_cache_ctl(ctl.gen, bits).unwrap(),
                    Row::EndLease => {
                        maps.end_lease().unwrap();
                        leased = false;
                    }
                    Row::Renew => {
                        maps.set_cache_ctl(ctl.gen + 1, ctl.aside).unwrap();
                        prog.renew_lease().unwrap();
                        (leased, renewed) = (true, std::time::Instant::now());
                    }
                    Row::Entry(dst, want) => {
                        let got =
                            maps.cache_entry(f.in0, dst, 0).unwrap().filter(|e| e.gen == ctl.gen).map(|e| (e.mtu, MacAddr(e.dmac), e.ifindex, MacAddr(e.smac)));
                        let want = want.map(|(mtu, mac)| (mtu, mac, f.out0, f.out0_mac));
                        if got != want {
                            failures.push(format!("cache entry for {dst}: {got:?}, want {want:?}"));
                        }
                    }
                    Row::Frame(c) => {
                        frames += 1;
                        let epoch = frames;
                        maps.set_neigh_epoch(epoch).unwrap();
                        let before = maps.stats(slot).unwrap();
                        let res = match run_xdp(prog.prog(), &c.input, ctx) {
                            Ok(r) => r,
                            Err(e) => {
                                failures.push(format!("{}: test run failed: {e:#}", c.desc));
                                continue;
                            }
                        };
                        let mut problems = check_run(&res, c.verdict, &c.input, &c.output, true);
                        let mut want = Stats::default();
                        want.packets[c.verdict as usize] = 1;
                        want.bytes[c.verdict as usize] = c.input.len() as u64;
                        want.reasons[c.reason as usize] = 1;
                        if let Some(o) = c.outcome {
                            want.cache[o as usize] = 1;
                        }
                        problems.extend(f.neighbour_stamp_problem(&maps, epoch, c.verdict, &c.output));
                        let got = maps.stats(slot).unwrap().delta(&before);
                        if got != want {
                            let reasons: Vec<_> = Reason::ALL.iter().filter(|r| got.reason(**r) > 0).map(|r| r.name()).collect();
                            problems.push(format!(
                                "counters: reasons {reasons:?} cache {:?}; want {} and cache {:?}",
                                got.cache,
                                c.reason.name(),
                                c.outcome.map(|o| o.name())
                            ));
                        }
                        if !problems.is_empty() {
                            failures.push(format!("{}: {}", c.desc, problems.join("; ")));
                        }
                    }
                }
            }
            assert!(frames >= 30, "the table shrank to {frames} frames");
            failures
        })
        .unwrap();
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}
