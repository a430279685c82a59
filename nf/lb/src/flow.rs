//! Flows and the flow hash: which table entry a flow takes.
//!
//! The data plane (`flowhash.h`) and this module compute the same hash, Bob
//! Jenkins' lookup3 `hashword` over the flow's 32-bit words in host order
//! with a fixed seed; every instance behind ECMP, given the same file,
//! sends a flow to the same backend.

use std::net::IpAddr;

use crate::config::{HashFields, Proto, Service};
use crate::plan::Table;

/// The seed of the flow hash (`"xnfl"`); changing it moves every flow.
pub const SEED: u32 = 0x786e_666c;

/// A flow as the data plane sees it: client to VIP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Flow {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub proto: Proto,
    pub sport: u16,
    pub dport: u16,
}

fn mix(a: &mut u32, b: &mut u32, c: &mut u32) {
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(4);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(6);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(8);
    *b = b.wrapping_add(*a);
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(16);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(19);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(4);
    *b = b.wrapping_add(*a);
}

fn finish(a: &mut u32, b: &mut u32, c: &mut u32) {
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(14));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(11));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(25));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(16));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(4));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(14));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(24));
}

/// lookup3's `hashword(k, k.len(), seed)`.
pub fn hashword(k: &[u32], seed: u32) -> u32 {
    let init = 0xdead_beef_u32.wrapping_add((k.len() as u32) << 2).wrapping_add(seed);
    let (mut a, mut b, mut c) = (init, init, init);
    let mut rest = k;
    while rest.len() > 3 {
        a = a.wrapping_add(rest[0]);
        b = b.wrapping_add(rest[1]);
        c = c.wrapping_add(rest[2]);
        mix(&mut a, &mut b, &mut c);
        rest = &rest[3..];
    }
    match rest.len() {
        0 => return c,
        3 => {
            c = c.wrapping_add(rest[2]);
            b = b.wrapping_add(rest[1]);
            a = a.wrapping_add(rest[0]);
        }
        2 => {
            b = b.wrapping_add(rest[1]);
            a = a.wrapping_add(rest[0]);
        }
        _ => a = a.wrapping_add(rest[0]),
    }
    finish(&mut a, &mut b, &mut c);
    c
}

fn words(a: IpAddr) -> Vec<u32> {
    match a {
        IpAddr::V4(v4) => vec![u32::from(v4)],
        IpAddr::V6(v6) => v6.octets().chunks(4).map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]])).collect(),
    }
}

impl Flow {
    /// The flow hash under `fields` (a 3-tuple leaves the ports out).
    pub fn hash(&self, fields: HashFields) -> u32 {
        let ports = match fields {
            HashFields::FiveTuple => (u32::from(self.sport) << 16) | u32::from(self.dport),
            HashFields::ThreeTuple => 0,
        };
        let mut k = words(self.src);
        k.extend(words(self.dst));
        k.push(ports);
        k.push(u32::from(self.proto.number()));
        hashword(&k, SEED)
    }

    /// The table entry the flow takes in a table of `size` entries.
    pub fn entry(&self, fields: HashFields, size: u32) -> u32 {
        self.hash(fields) % size
    }

    /// The backend a new flow of `service` goes to (built from `table`),
    /// or `None` when no backend takes new flows.
    pub fn backend(&self, service: &Service, table: &Table) -> Option<IpAddr> {
        table.owner(self.entry(service.hash, table.size()) as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hash of one flow, pinned: a change to the hash (which moves
    /// every flow behind ECMP) must be deliberate. The packet tests check
    /// that the data plane computes the same.
    const PINNED: u32 = 2_608_608_837;

    #[test]
    fn the_hash_is_pinned() {
        assert_eq!(hashword(&[], 0), 0xdead_beef);
        let f = Flow { src: "198.18.0.1".parse().unwrap(), dst: "198.18.0.10".parse().unwrap(), proto: Proto::Tcp, sport: 40000, dport: 80 };
        let pinned = f.hash(HashFields::FiveTuple);
        assert_eq!(pinned, PINNED, "the flow hash changed: every flow behind ECMP moves (update flowhash.h and this test together, on purpose)");
        assert_ne!(pinned, f.hash(HashFields::ThreeTuple));
        let g = Flow { sport: 40001, ..f };
        assert_ne!(pinned, g.hash(HashFields::FiveTuple));
        assert_eq!(f.hash(HashFields::ThreeTuple), g.hash(HashFields::ThreeTuple), "a 3-tuple ignores the ports");
    }

    /// Two instances behind ECMP, given the same file (here with its
    /// backends listed in another order), send each of 100,000 random
    /// flows to the same backend: nothing is shared but the file.
    #[test]
    fn two_instances_agree_on_every_flow() {
        let text = |order: &[usize]| {
            let mut t = String::from("[[service]]\nname = \"web\"\nvip = \"2001:db8::10\"\nproto = \"tcp\"\nport = 443\n");
            for &i in order {
                t += &format!("[[service.backend]]\naddress = \"2001:db8:1::{i:x}\"\nweight = {}\n", 1 + i % 3);
            }
            t
        };
        let forward: Vec<usize> = (1..=50).collect();
        let backward: Vec<usize> = forward.iter().rev().copied().collect();
        let (a, _) = crate::Config::parse(&text(&forward), "a").unwrap();
        let (b, _) = crate::Config::parse(&text(&backward), "b").unwrap();
        let (ta, tb) = (Table::of(&a.services[0]).unwrap(), Table::of(&b.services[0]).unwrap());
        let mut rng = fastrand::Rng::with_seed(15);
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..100_000 {
            let src = IpAddr::from(std::net::Ipv6Addr::from(rng.u128(..)));
            let f = Flow { src, dst: a.services[0].vip, proto: Proto::Tcp, sport: rng.u16(..), dport: 443 };
            let (x, y) = (f.backend(&a.services[0], &ta), f.backend(&b.services[0], &tb));
            assert!(x.is_some() && x == y, "{f:?}: {x:?} and {y:?}");
            seen.insert(x);
        }
        assert_eq!(seen.len(), 50, "every backend takes flows");
    }
}
