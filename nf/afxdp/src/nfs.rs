//! The bundled network functions: `rxdrop`, `txonly`, `l2fwd`, `echo`.

use crate::nf::{Batch, Emit, NetworkFunction, Verdict};

/// Receives and drops everything (the receive path's cost alone).
#[derive(Default)]
pub struct RxDrop;

impl NetworkFunction for RxDrop {
    fn name(&self) -> &str {
        "rxdrop"
    }

    fn process(&mut self, _batch: &mut Batch<'_>) {}
}

/// Swaps the Ethernet addresses and sends every frame back out (xdpsock's l2fwd).
#[derive(Default)]
pub struct L2Fwd;

pub fn swap_macs(p: &mut [u8]) {
    if p.len() >= 12 {
        let (dst, rest) = p.split_at_mut(6);
        dst.swap_with_slice(&mut rest[..6]);
    }
}

impl NetworkFunction for L2Fwd {
    fn name(&self) -> &str {
        "l2fwd"
    }

    fn process(&mut self, batch: &mut Batch<'_>) {
        for i in 0..batch.len() {
            swap_macs(batch.packet_mut(i));
        }
        batch.set_all(Verdict::Tx);
    }
}

/// Answers: UDP datagrams go back to their sender (addresses and ports
/// swapped), ICMP and ICMPv6 echo requests get their replies; anything
/// else is dropped. An untagged or single-tagged frame, IPv4 without
/// options or IPv6 with UDP/ICMPv6 right after the fixed header.
#[derive(Default)]
pub struct Echo;

/// Turns `p` into its answer in place; false when `p` is not something Echo answers.
pub fn answer(p: &mut [u8]) -> bool {
    let mut l3 = 14;
    if p.len() < 14 {
        return false;
    }
    let mut ethertype = u16::from_be_bytes([p[12], p[13]]);
    if ethertype == 0x8100 {
        if p.len() < 18 {
            return false;
        }
        ethertype = u16::from_be_bytes([p[16], p[17]]);
        l3 = 18;
    }
    let ok = match ethertype {
        0x0800 => answer_ipv4(&mut p[l3..]),
        0x86dd => answer_ipv6(&mut p[l3..]),
        _ => false,
    };
    if ok {
        swap_macs(p);
    }
    ok
}

fn swap(p: &mut [u8], a: usize, b: usize, n: usize) {
    for k in 0..n {
        p.swap(a + k, b + k);
    }
}

fn answer_ipv4(ip: &mut [u8]) -> bool {
    if ip.len() < 20 || ip[0] != 0x45 {
        return false;
    }
    let tot = u16::from_be_bytes([ip[2], ip[3]]) as usize;
    if tot < 20 || tot > ip.len() || u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0 {
        return false; // bad length, or a fragment
    }
    // Swapping the addresses leaves the IPv4 and UDP checksums as they
    // are: both are sums in which the two addresses are symmetric.
    let l4 = &mut ip[..tot];
    match l4[9] {
        17 if tot >= 28 => {
            swap(l4, 12, 16, 4);
            swap(l4, 20, 22, 2);
            true
        }
        1 if tot >= 28 && l4[20] == 8 && l4[21] == 0 => {
            swap(l4, 12, 16, 4);
            l4[20] = 0; // echo reply: type 8 -> 0, so the checksum grows by 0x0800 (RFC 1624)
            let c = ones_add(u16::from_be_bytes([l4[22], l4[23]]), 0x0800);
            l4[22..24].copy_from_slice(&c.to_be_bytes());
            true
        }
        _ => false,
    }
}

fn answer_ipv6(ip: &mut [u8]) -> bool {
    if ip.len() < 48 || ip[0] >> 4 != 6 {
        return false;
    }
    let plen = u16::from_be_bytes([ip[4], ip[5]]) as usize;
    if 40 + plen > ip.len() || plen < 8 {
        return false;
    }
    match ip[6] {
        17 => {
            swap(ip, 8, 24, 16);
            swap(ip, 40, 42, 2);
            true
        }
        58 if ip[40] == 128 && ip[41] == 0 => {
            swap(ip, 8, 24, 16);
            ip[40] = 129; // echo reply: type 128 -> 129, so the checksum drops by 0x0100 (RFC 1624)
            let new = ones_add(u16::from_be_bytes([ip[42], ip[43]]), !0x0100);
            ip[42..44].copy_from_slice(&new.to_be_bytes());
            true
        }
        _ => false,
    }
}

/// One's-complement addition of two 16-bit words.
fn ones_add(a: u16, b: u16) -> u16 {
    let s = a as u32 + b as u32;
    ((s & 0xffff) + (s >> 16)) as u16
}

impl NetworkFunction for Echo {
    fn name(&self) -> &str {
        "echo"
    }

    fn process(&mut self, batch: &mut Batch<'_>) {
        for i in 0..batch.len() {
            let v = if answer(batch.packet_mut(i)) { Verdict::Tx } else { Verdict::Drop };
            batch.set(i, v);
        }
    }
}

/// A generator: sends copies of one frame, as fast as the TX ring takes
/// them or up to `count`, with a sequence number in the 4 bytes at
/// `seq_offset` (the start of the UDP payload of a frame from
/// [`xnf_packet::PacketBuilder`], say) so the receiver can check order and loss.
pub struct TxOnly {
    frame: Vec<u8>,
    seq_offset: Option<usize>,
    pub sent: u64,
    pub count: Option<u64>,
}

impl TxOnly {
    pub fn new(frame: Vec<u8>, seq_offset: Option<usize>, count: Option<u64>) -> TxOnly {
        TxOnly { frame, seq_offset, sent: 0, count }
    }
}

impl NetworkFunction for TxOnly {
    fn name(&self) -> &str {
        "txonly"
    }

    fn process(&mut self, _batch: &mut Batch<'_>) {}

    fn receives(&self) -> bool {
        false
    }

    fn emit(&mut self, out: &mut Emit<'_>) {
        let len = self.frame.len() as u32;
        while self.count.is_none_or(|c| self.sent < c) {
            let seq = self.sent as u32;
            let (frame, off) = (&self.frame, self.seq_offset);
            if !out.push_with(len, |b| {
                b.copy_from_slice(frame);
                if let Some(o) = off {
                    if o + 4 <= b.len() {
                        b[o..o + 4].copy_from_slice(&seq.to_be_bytes());
                    }
                }
            }) {
                break;
            }
            self.sent += 1;
        }
    }
}
