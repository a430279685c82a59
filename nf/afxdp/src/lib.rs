//! xnf-afxdp: user-space network functions over AF_XDP.
//!
//! - [`Umem`]: the frame area user space and the kernel share, and where
//!   each frame is.
//! - [`Socket`]: one AF_XDP socket on one queue, over the kernel ABI
//!   (`<linux/if_xdp.h>`): ring sizes, copy or zero-copy, need_wakeup, busy
//!   polling, with errors that name the setting the kernel refused.
//! - [`XskSet`]: several sockets sharing one UMEM, driven by one thread:
//!   FILL kept stocked, RX in batches, verdicts applied, TX completions
//!   reaped, `poll()` or spinning when idle.
//! - [`NetworkFunction`]: what a user writes — a function over batches that
//!   drops, modifies, answers or forwards each packet — and the bundled
//!   [`nfs`]: `rxdrop`, `txonly`, `l2fwd`, `echo`.
//!
//! - [`selector`]: the XDP program in front of the sockets (`afxdp.bpf.c`:
//!   which traffic goes to user space, and which keeps the kernel path).
//! - [`run`]: `xnf afxdp run`, a bundled NF on sockets of chosen queues
//!   behind the selector, with live statistics.

pub mod cli;
pub mod nf;
pub mod nfs;
pub mod ring;
pub mod run;
pub mod runner;
pub mod selector;
pub mod socket;
pub mod umem;

pub use nf::{Batch, Emit, NetworkFunction, Verdict};
pub use runner::{Accounting, Binding, Counters, RunConfig, Snapshot, Wait, XskSet};
pub use socket::{kernel_stats, BusyPoll, KernelStats, Mode, Socket, SocketConfig, ZeroCopyUnsupported};
pub use umem::{Umem, UmemConfig};

mod skel {
    //! Generated skeleton.
    #![allow(clippy::all, missing_docs, non_camel_case_types, unused)]
    pub mod afxdp {
        include!(concat!(env!("OUT_DIR"), "/afxdp.skel.rs"));
    }
}

#[cfg(test)]
mod tests {
    use super::nfs;
    use xnf_packet::{parse, MacAddr, PacketBuilder};

    fn mac(b: u8) -> MacAddr {
        MacAddr([2, 0, 0, 0, 0, b])
    }

    #[test]
    fn echo_answers_udp_and_pings_with_valid_checksums() {
        let a4 = ("198.18.0.1".parse().unwrap(), "198.18.0.2".parse().unwrap());
        let a6 = ("2001:db8::1".parse().unwrap(), "2001:db8::2".parse().unwrap());
        let cases = [
            (
                PacketBuilder::ethernet(mac(1), mac(2)).ipv4(a4.0, a4.1).udp(1000, 7).payload(b"hi").build(),
                PacketBuilder::ethernet(mac(2), mac(1)).ipv4(a4.1, a4.0).udp(7, 1000).payload(b"hi").build(),
            ),
            (
                PacketBuilder::ethernet(mac(1), mac(2)).vlan(5).ipv4(a4.0, a4.1).icmpv4_echo(9, 3).payload(b"ping").build(),
                PacketBuilder::ethernet(mac(2), mac(1)).vlan(5).ipv4(a4.1, a4.0).icmpv4_echo_reply(9, 3).payload(b"ping").build(),
            ),
            (
                PacketBuilder::ethernet(mac(1), mac(2)).ipv6(a6.0, a6.1).udp(1000, 7).payload(b"hi").build(),
                PacketBuilder::ethernet(mac(2), mac(1)).ipv6(a6.1, a6.0).udp(7, 1000).payload(b"hi").build(),
            ),
            (
                PacketBuilder::ethernet(mac(1), mac(2)).ipv6(a6.0, a6.1).icmpv6_echo(9, 3).payload(b"ping").build(),
                PacketBuilder::ethernet(mac(2), mac(1)).ipv6(a6.1, a6.0).icmpv6_echo_reply(9, 3).payload(b"ping").build(),
            ),
        ];
        for (i, (mut q, want)) in cases.into_iter().enumerate() {
            assert!(nfs::answer(&mut q), "case {i}");
            assert_eq!(q, want, "case {i}: the answer differs from a reply built from scratch");
            assert!(parse(&q).is_ok(), "case {i}");
        }
    }

    #[test]
    fn echo_refuses_what_it_does_not_answer() {
        let a4 = ("198.18.0.1".parse().unwrap(), "198.18.0.2".parse().unwrap());
        let mut not = vec![
            PacketBuilder::ethernet(mac(1), mac(2)).ipv4(a4.0, a4.1).icmpv4_echo_reply(1, 1).build(),
            PacketBuilder::ethernet(mac(1), mac(2)).ipv4(a4.0, a4.1).fragment(10, false).udp(1, 2).build(),
            PacketBuilder::ethernet(mac(1), mac(2)).ipv4(a4.0, a4.1).ipv4_options(&[1, 1, 1, 1]).udp(1, 2).build(),
            PacketBuilder::ethernet(mac(1), mac(2)).arp_request(mac(1), a4.0, a4.1).build(),
            vec![0u8; 13],
        ];
        let full = PacketBuilder::ethernet(mac(1), mac(2)).ipv4(a4.0, a4.1).udp(1, 2).payload(&[0; 30]).build();
        for cut in 0..34 {
            not.push(full[..cut].to_vec());
        }
        for (i, mut p) in not.into_iter().enumerate() {
            let before = p.clone();
            assert!(!nfs::answer(&mut p), "case {i}");
            assert_eq!(p, before, "case {i}: a refused frame must be left as it was");
        }
    }

    #[test]
    fn accounting_balances_only_when_every_frame_is_placed() {
        let a = super::Accounting { total: 100, free: 40, fill: 50, rx: 4, tx: 3, completion: 3, kernel_pool: 0, kernel_dropped: false };
        assert!(a.balanced());
        let lost = super::Accounting { free: 39, kernel_pool: 1, ..a };
        assert!(!lost.balanced(), "a frame missing without receive drops is a leak");
        assert!(super::Accounting { kernel_dropped: true, ..lost }.balanced(), "after drops the kernel's pool may keep one");
        let many = super::Accounting { free: 0, kernel_pool: 40, kernel_dropped: true, ..a };
        assert!(!many.balanced(), "more than one per CPU is a leak even after drops");
    }

    #[test]
    fn l2fwd_swaps_macs() {
        let mut f = PacketBuilder::ethernet(mac(1), mac(2)).ethertype(0x88b5).payload(&[7; 50]).build();
        nfs::swap_macs(&mut f);
        // Built from mac(1) to mac(2): after the swap it goes to mac(1).
        assert_eq!((&f[..6], &f[6..12]), (&mac(1).0[..], &mac(2).0[..]));
    }
}
