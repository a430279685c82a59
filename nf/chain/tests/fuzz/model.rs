//! The reference model of the chain program: what `chain.bpf.c` must do
//! with a frame arriving on one of its ports, given the tables the control
//! plane wrote (a `dataplane::Plan`). Written from the documented contract
//! (chain.h, the program's comments, README) and the kernel's rules: the
//! frame is read as the kernel reads it (`xnf_testrun::kernel::view`), a
//! class matches as `class_match` says (three-valued), and what leaves the
//! last NF is forwarded as the kernel would forward it
//! (`xnf_testrun::forward`, the router's forwarding decision).

use std::collections::BTreeMap;
use std::net::IpAddr;

use xnf_chain::program::Plan;
use xnf_chain::program::{Counters, IngressReason, Port, Reason};
use xnf_testrun::forward::{forwarded, Kernel, Lookup};
use xnf_testrun::kernel::{class_match, view, ClassMatch, L2, L3};
use xnf_testrun::Verdict;

/// Every counter by name, for reports.
fn named(c: &Counters) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (slot, s) in c.ingress.iter().enumerate() {
        for r in IngressReason::ALL {
            out.insert(format!("ingress {slot} {}", r.name()), s.get(r));
        }
    }
    for (slot, (p, b)) in c.chains.iter().enumerate() {
        out.insert(format!("chain {slot} packets"), *p);
        out.insert(format!("chain {slot} bytes"), *b);
    }
    for (slot, s) in c.nfs.iter().enumerate() {
        for (k, v) in [("in_packets", s.in_packets), ("in_bytes", s.in_bytes), ("out_packets", s.out_packets), ("out_bytes", s.out_bytes), ("gone", s.gone)] {
            out.insert(format!("nf {slot} {k}"), v);
        }
        for r in Reason::ALL {
            out.insert(format!("nf {slot} exit {}", r.name()), s.exit(r));
        }
    }
    out
}

/// The counters of `got` that differ from `want`, with both values.
pub fn diff(got: &Counters, want: &Counters) -> Vec<String> {
    let (got, want) = (named(got), named(want));
    got.iter().filter(|(k, v)| want[*k] != **v).map(|(k, v)| format!("{k} {v} (model {})", want[k])).collect()
}

/// What the frame got, for the histogram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Seen {
    Ingress(IngressReason),
    /// Out of an NF into its successor.
    Next,
    /// Out of an NF whose successor is gone: dropped.
    NextGone,
    /// Out of the last NF, and how it left the chain.
    Exit(Reason),
}

impl Seen {
    pub fn name(self) -> String {
        match self {
            Seen::Ingress(r) => format!("ingress {}", r.name()),
            Seen::Next => "into the next NF".into(),
            Seen::NextGone => "next NF gone".into(),
            Seen::Exit(r) => format!("exit {}", r.name()),
        }
    }
}

/// What the program must do with a frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expect {
    pub verdict: Verdict,
    /// The frame sent (redirects), or `None`: unchanged.
    pub frame: Option<Vec<u8>>,
    pub seen: Seen,
}

pub struct Model<'a> {
    plan: &'a Plan,
    kernel: &'a Kernel,
    /// A source the kernel accepts from each NF port (default: any other).
    good_sources: &'a BTreeMap<u32, IpAddr>,
    default_source: IpAddr,
}

impl<'a> Model<'a> {
    pub fn new(plan: &'a Plan, kernel: &'a Kernel, good_sources: &'a BTreeMap<u32, IpAddr>, default_source: IpAddr) -> Self {
        Model { plan, kernel, good_sources, default_source }
    }

    /// What a frame arriving on `ifindex` gets; the counters it moves are
    /// added to `c`.
    pub fn decide(&self, frame: &[u8], ifindex: u32, c: &mut Counters) -> Expect {
        match self.plan.ports.get(&ifindex) {
            Some(Port::Ingress { mac, slot }) => self.ingress(frame, ifindex, *mac, *slot as usize, c),
            Some(Port::Nf { slot, .. }) => self.out_of_nf(frame, ifindex, *slot as usize, c),
            None => panic!("the fuzzer sends frames to the chain's ports only"),
        }
    }

    /// An ingress: the kernel's unless a class takes the frame; the first
    /// rule of this ingress whose class takes it (or may) decides.
    fn ingress(&self, frame: &[u8], ifindex: u32, mac: [u8; 6], slot: usize, c: &mut Counters) -> Expect {
        let v = view(frame);
        let mut count = |r: IngressReason| c.ingress[slot].packets[r as usize] += 1;
        let kernels = if v.to_group() {
            Some(IngressReason::Multicast)
        } else if v.dst_mac != mac {
            Some(IngressReason::NotOurMac)
        } else {
            match (v.l2, &v.l3) {
                (L2::Stacked, _) => Some(IngressReason::Qinq),
                (L2::Truncated, _) | (_, L3::Malformed) => Some(IngressReason::Malformed),
                (_, L3::NonIp(_)) => Some(IngressReason::NonIp),
                _ => None,
            }
        };
        if let Some(r) = kernels {
            count(r);
            return Expect { verdict: Verdict::Pass, frame: None, seen: Seen::Ingress(r) };
        }
        let hit = self.plan.rules.iter().filter(|r| r.ifindex == ifindex).find_map(|r| match class_match(&r.class, &v) {
            ClassMatch::No => None,
            m => Some((r, m == ClassMatch::Unsure)),
        });
        let Some((rule, unsure)) = hit else {
            count(IngressReason::NoMatch);
            return Expect { verdict: Verdict::Pass, frame: None, seen: Seen::Ingress(IngressReason::NoMatch) };
        };
        let chain = &mut c.chains[rule.chain as usize];
        chain.0 += 1;
        chain.1 += frame.len() as u64;
        // Never around the NF (it may be a firewall): into it, or dropped.
        let (verdict, frame, reason) = if unsure && rule.unsure_drop {
            (Verdict::Drop, None, IngressReason::UnsureDropped)
        } else if let Some(first) = rule.first_nf {
            // NFs see the frame without the tag the class was read under.
            match self.steer(frame, first, matches!(v.l2, L2::Tagged { .. }), c) {
                Some(out) => (Verdict::Redirect, Some(out), if unsure { IngressReason::UnsureSteered } else { IngressReason::Steered }),
                None => (Verdict::Drop, None, IngressReason::NfGone),
            }
        } else {
            (Verdict::Drop, None, IngressReason::Down)
        };
        c.ingress[slot].packets[reason as usize] += 1;
        Expect { verdict, frame, seen: Seen::Ingress(reason) }
    }

    /// Into NF `slot`: the frame with its MACs (host end to NF end) and
    /// without its tag (`pop`), or `None` when the NF's port is not in the
    /// devmap (or the slot is empty): then it is dropped and counted.
    fn steer(&self, frame: &[u8], slot: u32, pop: bool, c: &mut Counters) -> Option<Vec<u8>> {
        let s = &mut c.nfs[slot as usize];
        let Some(nf) = self.plan.nfs.get(&slot).filter(|n| n.ifindex != 0 && self.plan.tx.contains(&n.ifindex)) else {
            s.gone += 1;
            return None;
        };
        let mut out = Vec::with_capacity(frame.len());
        out.extend_from_slice(&nf.nf_mac);
        out.extend_from_slice(&nf.host_mac);
        out.extend_from_slice(&frame[if pop { 16 } else { 12 }..]);
        s.in_packets += 1;
        s.in_bytes += out.len() as u64;
        Some(out)
    }

    /// The host end of NF `slot`'s veth: whatever the NF sends goes to its
    /// successor as it is, or, after the last NF, is routed out.
    fn out_of_nf(&self, frame: &[u8], ifindex: u32, slot: usize, c: &mut Counters) -> Expect {
        let s = &mut c.nfs[slot];
        s.out_packets += 1;
        s.out_bytes += frame.len() as u64;
        if let Some(next) = self.plan.nfs.get(&(slot as u32)).and_then(|n| n.next) {
            return match self.steer(frame, next, false, c) {
                Some(out) => Expect { verdict: Verdict::Redirect, frame: Some(out), seen: Seen::Next },
                None => Expect { verdict: Verdict::Drop, frame: None, seen: Seen::NextGone },
            };
        }
        let (verdict, reason, out) = self.route_out(frame, ifindex);
        c.nfs[slot].exit[reason as usize] += 1;
        Expect { verdict, frame: out, seen: Seen::Exit(reason) }
    }

    /// After the last NF: forwarded like the router forwards, with the NF's
    /// port as the FIB's ingress, or handed to the kernel with the reason.
    fn route_out(&self, frame: &[u8], ifindex: u32) -> (Verdict, Reason, Option<Vec<u8>>) {
        let pass = |r: Reason| (Verdict::Pass, r, None);
        let v = view(frame);
        // The kernel forwards no frame sent to every host (ip_forward wants
        // PACKET_HOST); a unicast one whatever its destination MAC.
        if v.to_group() {
            return pass(Reason::Multicast);
        }
        // An NF sends untagged frames: a tag (any, a priority tag too) has
        // no VLAN device here.
        let ip = match (v.l2, &v.l3) {
            (L2::Truncated, _) => return pass(Reason::Malformed),
            (L2::Stacked, _) => return pass(Reason::VlanUnknown),
            (_, L3::Malformed) => return pass(Reason::Malformed),
            (L2::Tagged { .. }, _) => return pass(Reason::VlanUnknown),
            (_, L3::NonIp(_)) => return pass(Reason::NonIp),
            (_, L3::Ip(ip)) => ip,
        };
        let good = self.good_sources.get(&ifindex).copied().unwrap_or(self.default_source);
        match self.kernel.forward(ip, ifindex, Lookup::Full, good) {
            Err(Reason::Blackhole) => (Verdict::Drop, Reason::Blackhole, None),
            Err(r) => pass(r),
            Ok(out) if !self.plan.tx.contains(&out.oif) => pass(Reason::NotManaged),
            Ok(out) => (Verdict::Redirect, Reason::Forwarded, Some(forwarded(frame, &v.l2, ip, out, 0))),
        }
    }
}
