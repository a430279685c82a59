//! Typed packet views and frame builders for xnf, in the style of smoltcp's `wire` module.
//!
//! * Views (`EthernetFrame`, `VlanTag`, `ArpPacket`, `Ipv4Packet`, `Ipv6Packet`, `UdpPacket`,
//!   `TcpPacket`, `Icmpv4Packet`, `Icmpv6Packet`) wrap any `T: AsRef<[u8]>` and read header
//!   fields; setters are available when `T: AsMut<[u8]>` too. Build them with `new_checked`,
//!   which validates lengths so that no accessor can panic afterwards. `new_unchecked` skips the
//!   check; fixed-field accessors may then panic on a short buffer. As in smoltcp,
//!   `payload()`/`options()` live on views over a reference (`View<&[u8]>`, `View<&Vec<u8>>`)
//!   and return slices that outlive the view; `payload_mut()` works on any mutable buffer.
//! * [`PacketBuilder`] emits whole Ethernet frames with every length and checksum filled in.
//! * [`parse()`] summarises a frame layer by layer without panicking on malformed input.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod arp;
pub mod builder;
pub mod checksum;
pub mod ethernet;
mod icmp;
pub mod icmpv4;
pub mod icmpv6;
pub mod ipv4;
pub mod ipv6;
pub mod parse;
pub mod tcp;
pub mod udp;
pub mod vlan;

pub use arp::{ArpPacket, ArpRepr};
pub use builder::PacketBuilder;
pub use ethernet::{EtherType, EthernetFrame, MacAddr};
pub use icmpv4::Icmpv4Packet;
pub use icmpv6::Icmpv6Packet;
pub use ipv4::{IpProtocol, Ipv4Packet};
pub use ipv6::{ExtHeader, ExtHeaders, Ipv6Fragment, Ipv6Packet};
pub use parse::{parse, Ipv4Info, Ipv6Info, L3Info, L4Info, Parsed, VlanInfo};
pub use tcp::{TcpFlags, TcpPacket};
pub use udp::UdpPacket;
pub use vlan::VlanTag;

use std::fmt;

/// Errors returned by views, [`parse()`] and [`PacketBuilder::try_build`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The buffer is shorter than a header or a length field says.
    Truncated,
    /// A field holds a value that makes the packet invalid.
    Malformed(&'static str),
    /// A valid packet this crate does not handle (e.g. ARP for non-Ethernet/IPv4).
    Unsupported(&'static str),
    /// `frame_len` asked for a frame shorter than its headers and payload.
    FrameTooShort {
        /// Bytes the headers and payload need.
        needed: usize,
        /// Frame length requested.
        requested: usize,
    },
    /// The builder was used inconsistently (e.g. `.ttl()` before `.ipv4()`).
    Build(&'static str),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Truncated => f.write_str("packet truncated"),
            Error::Malformed(what) => write!(f, "malformed packet: {what}"),
            Error::Unsupported(what) => write!(f, "unsupported packet: {what}"),
            Error::FrameTooShort { needed, requested } => {
                write!(f, "frame length {requested} is shorter than the {needed} bytes needed")
            }
            Error::Build(what) => write!(f, "packet builder: {what}"),
        }
    }
}

impl std::error::Error for Error {}

/// Result type of this crate.
pub type Result<T> = core::result::Result<T, Error>;

pub(crate) fn be16(b: &[u8], i: usize) -> u16 {
    u16::from_be_bytes([b[i], b[i + 1]])
}

pub(crate) fn be32(b: &[u8], i: usize) -> u32 {
    u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

pub(crate) fn put16(b: &mut [u8], i: usize, v: u16) {
    b[i..i + 2].copy_from_slice(&v.to_be_bytes());
}

pub(crate) fn put32(b: &mut [u8], i: usize, v: u32) {
    b[i..i + 4].copy_from_slice(&v.to_be_bytes());
}

/// Source and destination addresses of one IP version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Addrs {
    V4(std::net::Ipv4Addr, std::net::Ipv4Addr),
    V6(std::net::Ipv6Addr, std::net::Ipv6Addr),
}

/// `&b[from..to]`, clamped to the buffer so it never panics.
pub(crate) fn clamp(b: &[u8], from: usize, to: usize) -> &[u8] {
    let to = to.min(b.len());
    &b[from.min(to)..to]
}

/// Declares a view struct with the constructors every view shares.
macro_rules! view {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<T> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Wraps `buffer` without checking it; accessors may panic if it is too short.
            pub const fn new_unchecked(buffer: T) -> Self {
                Self { buffer }
            }

            /// Wraps `buffer` after `check_len`, so that accessors cannot panic.
            pub fn new_checked(buffer: T) -> $crate::Result<Self> {
                let view = Self::new_unchecked(buffer);
                view.check_len()?;
                Ok(view)
            }

            /// Returns the wrapped buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }

            #[allow(dead_code)]
            fn b(&self) -> &[u8] {
                self.buffer.as_ref()
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            #[allow(dead_code)]
            fn bm(&mut self) -> &mut [u8] {
                self.buffer.as_mut()
            }
        }
    };
}
pub(crate) use view;

#[cfg(test)]
pub(crate) mod testutil {
    /// `n` random bytes.
    pub fn bytes(rng: &mut fastrand::Rng, n: usize) -> Vec<u8> {
        let mut v = vec![0; n];
        rng.fill(&mut v);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_display() {
        assert_eq!(Error::Truncated.to_string(), "packet truncated");
        assert_eq!(Error::Malformed("x").to_string(), "malformed packet: x");
        let e: Box<dyn std::error::Error> = Box::new(Error::FrameTooShort { needed: 64, requested: 60 });
        assert!(e.to_string().contains("64"));
    }
}
