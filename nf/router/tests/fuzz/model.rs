//! The reference model of the router: what `router.bpf.c` must do with a
//! frame arriving on the fixture's dut. It reads the frame as the kernel
//! does (`xnf_testrun::kernel`), decides what is the router's own (its
//! interfaces, MACs and VLANs), and takes the forwarding decision from the
//! kernel's rules (`xnf_testrun::forward`: routes from the kernel itself,
//! the receive and forwarding rules a route lookup does not show). The
//! reasons are the router's documented contract (README).

use std::net::IpAddr;

use xnf_router::program::Reason;
use xnf_testrun::forward::{forwarded, Kernel, Lookup};
use xnf_testrun::kernel::{view, L2, L3};
use xnf_testrun::Verdict;

use crate::fixture::{Fixture, Ingress, SRC4, VLAN200_SRC4};

/// What the router must do with a frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expect {
    pub verdict: Verdict,
    pub reason: Reason,
    /// The frame sent (redirects), or `None`: unchanged.
    pub frame: Option<Vec<u8>>,
}

fn pass(reason: Reason) -> Expect {
    Expect { verdict: Verdict::Pass, reason, frame: None }
}

pub struct Model<'f> {
    f: &'f Fixture,
    kernel: Kernel,
}

impl<'f> Model<'f> {
    /// Reads the fixture's network (from inside dut).
    pub fn new(f: &'f Fixture) -> Model<'f> {
        Model { f, kernel: Kernel::read() }
    }

    /// A source the kernel accepts on `iif` (one on its subnet).
    fn good_source(&self, iif: u32) -> IpAddr {
        IpAddr::V4(if iif == self.f.v200 { VLAN200_SRC4 } else { SRC4 })
    }

    /// The physical port and VID behind a VLAN device of the fixture.
    fn vlan_egress(&self, ifindex: u32) -> Option<(u32, u16)> {
        if ifindex == self.f.v100 {
            Some((self.f.out0, 100))
        } else if ifindex == self.f.v200 {
            Some((self.f.in0, 200))
        } else {
            None
        }
    }

    /// The ingress the program's FIB lookup would see for `frame` (the
    /// VLAN device of a tag), if the frame gets that far on L2.
    pub fn fib_ingress(&self, frame: &[u8], ingress: Ingress) -> Option<u32> {
        let f = self.f;
        let v = view(frame);
        let our_mac = if ingress == Ingress::In1 { f.in1_mac } else { f.in0_mac };
        if ingress == Ingress::In0Unconfigured || v.to_group() || v.dst_mac != our_mac.octets() {
            return None;
        }
        if matches!((v.l2, &v.l3), (L2::Stacked, _) | (L2::Truncated, _) | (_, L3::Malformed)) {
            return None;
        }
        let in_ifindex = f.ifindex(ingress);
        match v.l2.vid() {
            0 => Some(in_ifindex),
            200 if in_ifindex == f.in0 => Some(f.v200),
            _ => None,
        }
    }

    pub fn decide(&self, frame: &[u8], ingress: Ingress, direct: bool) -> Expect {
        let f = self.f;
        let v = view(frame);
        if ingress == Ingress::In0Unconfigured {
            return pass(Reason::Unconfigured);
        }
        if v.to_group() {
            return pass(Reason::Multicast);
        }
        let our_mac = if ingress == Ingress::In1 { f.in1_mac } else { f.in0_mac };
        if v.dst_mac != our_mac.octets() {
            return pass(Reason::NotOurMac);
        }
        match (v.l2, &v.l3) {
            (L2::Stacked, _) => return pass(Reason::Qinq),
            (L2::Truncated, _) | (_, L3::Malformed) => return pass(Reason::Malformed),
            _ => {}
        }
        let in_ifindex = f.ifindex(ingress);
        let fib_iif = match v.l2.vid() {
            0 => in_ifindex,
            200 if in_ifindex == f.in0 => f.v200,
            _ => return pass(Reason::VlanUnknown),
        };
        let L3::Ip(ip) = &v.l3 else { return pass(Reason::NonIp) };
        let lookup = if direct { Lookup::Direct } else { Lookup::Full };
        let out = match self.kernel.forward(ip, fib_iif, lookup, self.good_source(fib_iif)) {
            Ok(out) => out,
            Err(Reason::Blackhole) => return Expect { verdict: Verdict::Drop, reason: Reason::Blackhole, frame: None },
            Err(r) => return pass(r),
        };
        let (port, out_vid) = self.vlan_egress(out.oif).unwrap_or((out.oif, 0));
        let native = [f.in0, f.in1, f.out0].contains(&port);
        let generic = ingress == Ingress::In0Generic;
        if port == f.skb0 && !generic {
            return pass(Reason::EgressSkbMode);
        }
        if !native && port != f.skb0 {
            return pass(Reason::NotManaged);
        }
        Expect { verdict: Verdict::Redirect, reason: Reason::Forwarded, frame: Some(forwarded(frame, &v.l2, ip, out, out_vid)) }
    }
}
