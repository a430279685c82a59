//! The one BPF parser (`bpf/include/xnf/parse.h`) run on its own through
//! `parse_probe.bpf.c`, and what it must find in a frame by the kernel's
//! rules ([`crate::kernel`]): the parser's differential fuzzing compares
//! the two field by field.

use anyhow::{Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags};
use xnf_core::maps::{from_bytes, object_storage};
use xnf_core::xdp::XdpContext;

use crate::kernel::{Frag, Ports, View, L2, L3};

mod skel {
    #![allow(clippy::all, missing_docs, non_camel_case_types, unused)]
    include!(concat!(env!("OUT_DIR"), "/parse_probe.skel.rs"));
}
use skel::types;

/// The parser loaded on its own.
pub struct ParseProbe {
    skel: skel::ParseProbeSkel<'static>,
}

/// The fields of `struct xnf_pkt` the parser's contract fixes, with the
/// parse result; fields that mean nothing in a case are left at zero.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Found {
    pub result: u32,
    pub tagged: bool,
    pub vid: u16,
    pub tci: u16,
    pub l3_proto: u16,
    pub l3_off: u16,
    pub ip_end: u16,
    pub family: u8,
    pub ip_proto: u8,
    /// Only when the protocol is known.
    pub proto: u8,
    pub frag: u8,
    pub l4: u8,
    /// Only with ports.
    pub l4_off: u16,
    pub sport: u16,
    pub dport: u16,
    pub ttl: u8,
    pub tos: u8,
    pub flowinfo: u32,
    pub src: [u32; 4],
    pub dst: [u32; 4],
    pub ip_options: bool,
    pub hbh: bool,
}

use xnf_core::abi::types::{xnf_frag as frag, xnf_l4 as l4, xnf_parse_result as res};

impl ParseProbe {
    pub fn load() -> Result<Self> {
        let open = skel::ParseProbeSkelBuilder::default().open(object_storage()).context("opening the parse probe")?;
        Ok(Self { skel: open.load().context("loading the parse probe")? })
    }

    /// What the parser finds in `frame`.
    pub fn parse(&self, frame: &[u8]) -> Result<Found> {
        let r = crate::run_xdp(&self.skel.progs.xnf_parse_probe, frame, XdpContext::default())?;
        anyhow::ensure!(r.verdict == crate::Verdict::Pass && r.frame == frame, "the probe changed the frame or failed: {:?}", r.verdict);
        let v = self.skel.maps.out.lookup(&0u32.to_ne_bytes(), MapFlags::ANY)?.context("the probe left no result")?;
        let o: types::probe_out = from_bytes(&v);
        let p = o.pkt;
        let mut f = Found { result: o.result, ..Found::default() };
        if o.result == res::XNF_PARSE_QINQ.0 || o.result == res::XNF_PARSE_MALFORMED.0 {
            return Ok(f);
        }
        (f.tagged, f.vid, f.tci, f.l3_proto) = (p.tagged != 0, p.vid, u16::from_be(p.tci), u16::from_be(p.l3_proto));
        if !f.tagged {
            f.tci = 0;
        }
        if o.result != res::XNF_PARSE_OK.0 {
            return Ok(f);
        }
        (f.l3_off, f.ip_end, f.family, f.ip_proto, f.frag, f.l4) = (p.l3_off, p.ip_end, p.family, p.ip_proto, p.frag, p.l4);
        if p.l4 != l4::XNF_L4_UNKNOWN.0 as u8 {
            f.proto = p.proto;
        }
        if p.l4 == l4::XNF_L4_PORTS.0 as u8 {
            (f.l4_off, f.sport, f.dport) = (p.l4_off, p.sport, p.dport);
        }
        (f.ttl, f.tos, f.flowinfo, f.src, f.dst) = (p.ttl, p.tos, u32::from_be(p.flowinfo), p.src, p.dst);
        (f.ip_options, f.hbh) = (p.ip_options != 0, p.hbh != 0);
        Ok(f)
    }
}

fn words(a: std::net::IpAddr) -> [u32; 4] {
    let b = match a {
        std::net::IpAddr::V4(a) => {
            let mut b = [0u8; 16];
            b[..4].copy_from_slice(&a.octets());
            b
        }
        std::net::IpAddr::V6(a) => a.octets(),
    };
    std::array::from_fn(|i| u32::from_ne_bytes(b[i * 4..i * 4 + 4].try_into().expect("4 bytes")))
}

/// What the parser must find in `frame` (read as the kernel reads it).
pub fn expected(frame: &[u8], v: &View) -> Found {
    let mut f = Found::default();
    match (v.l2, &v.l3) {
        (L2::Stacked, _) => {
            f.result = res::XNF_PARSE_QINQ.0;
            return f;
        }
        (L2::Truncated, _) | (_, L3::Malformed) => {
            f.result = res::XNF_PARSE_MALFORMED.0;
            return f;
        }
        _ => {}
    }
    if let L2::Tagged { tci } = v.l2 {
        (f.tagged, f.tci, f.vid) = (true, tci, tci & 0xfff);
    }
    f.l3_proto = u16::from_be_bytes([frame[12 + v.l2.tag_len()], frame[13 + v.l2.tag_len()]]);
    let ip = match &v.l3 {
        L3::NonIp(_) => {
            f.result = res::XNF_PARSE_NON_IP.0;
            return f;
        }
        L3::Ip(ip) => ip,
        L3::Malformed => unreachable!("handled above"),
    };
    f.result = res::XNF_PARSE_OK.0;
    f.l3_off = ip.l3_off as u16;
    f.ip_end = (ip.l3_off + ip.ip_len) as u16;
    f.family = if ip.v6 { libc_af(true) } else { libc_af(false) };
    f.ip_proto = ip.ip_proto;
    f.frag = match ip.frag {
        Frag::None => frag::XNF_FRAG_NONE.0,
        Frag::First => frag::XNF_FRAG_FIRST.0,
        Frag::Later => frag::XNF_FRAG_LATER.0,
    } as u8;
    f.l4 = match (ip.proto, ip.frag, ip.ports) {
        (None, _, _) => l4::XNF_L4_UNKNOWN.0,
        (_, Frag::Later, _) => l4::XNF_L4_LATER_FRAG.0,
        (_, _, Ports::Known(..)) => l4::XNF_L4_PORTS.0,
        (_, _, Ports::None) => l4::XNF_L4_NO_PORTS.0,
        (_, _, Ports::Hidden) => l4::XNF_L4_TRUNCATED.0,
    } as u8;
    if let Some(p) = ip.proto {
        f.proto = p;
    }
    if let Ports::Known(s, d) = ip.ports {
        (f.sport, f.dport) = (s, d);
        f.l4_off = l4_offset(frame, ip) as u16;
    }
    f.ttl = ip.ttl;
    f.tos = ip.tos;
    if ip.v6 {
        let b = &frame[ip.l3_off..];
        f.flowinfo = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x0fff_ffff;
    }
    (f.src, f.dst) = (words(ip.src), words(ip.dst));
    (f.ip_options, f.hbh) = (ip.options, ip.hbh);
    f
}

fn libc_af(v6: bool) -> u8 {
    if v6 {
        10
    } else {
        2
    }
}

/// The offset of the L4 header: after the IPv4 header and its options, or
/// after the IPv6 extension headers (walked again here, as the kernel's
/// flow dissector does, for the ports it read).
fn l4_offset(frame: &[u8], ip: &crate::kernel::Ip) -> usize {
    let b = &frame[ip.l3_off..];
    if !ip.v6 {
        return ip.l3_off + usize::from(b[0] & 0xf) * 4;
    }
    let (mut nh, mut at) = (b[6], 40);
    while matches!(nh, 0 | 43 | 44 | 60 | 51) {
        let len = match nh {
            44 => 8,
            51 => (usize::from(b[at + 1]) + 2) * 4,
            _ => (usize::from(b[at + 1]) + 1) * 8,
        };
        nh = b[at];
        at += len;
    }
    ip.l3_off + at
}
