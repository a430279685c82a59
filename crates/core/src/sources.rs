//! The source check the kernel makes before it forwards an IPv4 packet
//! (`fib_validate_source`, which `bpf_fib_lookup()` skips), as the
//! programs that forward hold it (`fib_check_source` in
//! `bpf/include/xnf/fib.h`): the host's own and broadcast addresses, which
//! are never a forwarded packet's source, and each ingress's reverse-path
//! filter.
//!
//! Where the kernel's rule depends on more than this (`accept_local`,
//! routing realms, local routes added by hand), the programs err towards
//! the kernel: such a source is handed to it, or checked as above.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use anyhow::{bail, Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle};
use xnf_netns::netlink::{ipv4_addresses, Ipv4Address};

use crate::abi::types;

crate::c_enum! {
    /// The reverse-path filter of an ingress (`net.ipv4.conf.*.rp_filter`).
    #[derive(Default)]
    pub enum Rpf: types::xnf_rpf {
        #[default]
        Off = XNF_RPF_OFF => "off",
        Strict = XNF_RPF_STRICT => "strict",
        Loose = XNF_RPF_LOOSE => "loose",
    }
}

/// Local and broadcast addresses a program's source check holds.
pub const MAX_LOCALS: u32 = types::xnf_fib_limits::XNF_MAX_LOCALS.0;

/// Bits of the filter in front of the table (`struct xnf_locals_filter`).
const FILTER_BITS: u32 = types::xnf_fib_limits::XNF_LOCALS_FILTER_BITS.0;
const FILTER_WORDS: usize = types::xnf_fib_limits::XNF_LOCALS_FILTER_WORDS.0 as usize;

/// An address's bit in the filter: `xnf_locals_bit` in fib.h, on the
/// address as it sits in a header (network order, read as a native word).
fn locals_bit(a: Ipv4Addr) -> u32 {
    u32::from_ne_bytes(a.octets()).wrapping_mul(0x9e37_79b1) >> (32 - FILTER_BITS)
}

fn write_filter<'a>(filter: &MapHandle, addrs: impl Iterator<Item = &'a Ipv4Addr>) -> Result<()> {
    let mut words = [0u64; FILTER_WORDS];
    for a in addrs {
        let b = locals_bit(*a);
        words[(b / 64) as usize] |= 1 << (b % 64);
    }
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    filter.update(&0u32.to_ne_bytes(), &bytes, MapFlags::ANY).context("writing the filter of local addresses")
}

/// Makes a program's table of local and broadcast addresses (a hash of
/// `__be32`) exactly `want`, and its filter (`locals_filter`) cover it at
/// every moment: first the bits of the old and the new addresses, then the
/// table, then the new bits alone.
pub fn write_locals(map: &MapHandle, filter: &MapHandle, want: &BTreeSet<Ipv4Addr>) -> Result<()> {
    if want.len() > MAX_LOCALS as usize {
        bail!("the host has {} local and broadcast IPv4 addresses; the source check holds {MAX_LOCALS}", want.len());
    }
    let old = read_locals(map);
    write_filter(filter, old.iter().chain(want))?;
    for a in old.difference(want) {
        crate::maps::delete_if_present(map, &a.octets())?;
    }
    for a in want {
        map.update(&a.octets(), &1u32.to_ne_bytes(), MapFlags::ANY).context("writing the table of local addresses")?;
    }
    write_filter(filter, want.iter())
}

/// The addresses in a program's table of local and broadcast addresses.
pub fn read_locals(map: &MapHandle) -> BTreeSet<Ipv4Addr> {
    map.keys().filter(|k| k.len() == 4).map(|k| Ipv4Addr::new(k[0], k[1], k[2], k[3])).collect()
}

/// The kernel's IPv4 addresses and per-device settings, read once.
pub struct Sources {
    addrs: Vec<Ipv4Address>,
    all_rpf: u32,
}

fn rp_filter(dev: &str) -> Result<u32> {
    let path = format!("/proc/sys/net/ipv4/conf/{dev}/rp_filter");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    text.trim().parse().with_context(|| format!("{path} holds {text:?}"))
}

impl Sources {
    /// Reads the addresses and `net.ipv4.conf.all.rp_filter` of the
    /// calling thread's network namespace.
    pub fn read() -> Result<Sources> {
        Ok(Sources { addrs: ipv4_addresses()?, all_rpf: rp_filter("all")? })
    }

    /// The sources the kernel never forwards from: every local address and
    /// every broadcast address the kernel puts into its local table for
    /// them (the explicit `brd`, and the subnet's last address for
    /// prefixes shorter than /31; fib_add_ifaddr). A local source is
    /// refused always, a broadcast one whenever the way back is checked:
    /// both are left to the kernel.
    pub fn locals(&self) -> BTreeSet<Ipv4Addr> {
        let mut out = BTreeSet::new();
        for a in &self.addrs {
            out.insert(a.net.addr());
            if let Some(b) = a.broadcast.filter(|b| !b.is_broadcast()) {
                out.insert(b);
            }
            if a.net.prefix_len() < 31 && a.net.network().octets()[0] != 0 {
                out.insert(a.net.broadcast());
            }
        }
        out
    }

    /// The reverse-path filter on interface `name` (`ifindex`): the larger
    /// of `all` and its own setting. Loose mode on an interface without an
    /// IPv4 address is strict in effect: the kernel then accepts only a way
    /// back through that interface.
    pub fn rpf(&self, ifindex: u32, name: &str) -> Result<Rpf> {
        let mode = self.all_rpf.max(rp_filter(name)?);
        let has_addr = self.addrs.iter().any(|a| a.ifindex == ifindex);
        Ok(match mode {
            0 => Rpf::Off,
            1 => Rpf::Strict,
            _ if !has_addr => Rpf::Strict,
            _ => Rpf::Loose,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(ifindex: u32, net: &str, brd: Option<&str>) -> Ipv4Address {
        Ipv4Address { ifindex, net: net.parse().unwrap(), broadcast: brd.map(|b| b.parse().unwrap()) }
    }

    #[test]
    fn locals_hold_addresses_and_the_broadcast_addresses_of_their_subnets() {
        let s =
            Sources { addrs: vec![addr(2, "198.18.0.2/24", Some("198.18.0.255")), addr(3, "198.18.1.1/31", None), addr(4, "198.18.2.1/32", None)], all_rpf: 0 };
        let want: BTreeSet<Ipv4Addr> = ["198.18.0.2", "198.18.0.255", "198.18.1.1", "198.18.2.1"].iter().map(|a| a.parse().unwrap()).collect();
        assert_eq!(s.locals(), want);
    }
}
