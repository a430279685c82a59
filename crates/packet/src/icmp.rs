//! The 8-byte header ICMPv4 and ICMPv6 share (type, code, checksum, four
//! "rest of header" bytes): one definition of its accessors for both views.

/// Implements the shared ICMP header accessors for a view type made by `view!`.
macro_rules! icmp_header {
    ($name:ident) => {
        impl<T: AsRef<[u8]>> $name<T> {
            /// Length of the header (type, code, checksum, rest of header).
            pub const HEADER_LEN: usize = 8;

            /// Ok if the 8-byte header fits.
            pub fn check_len(&self) -> $crate::Result<()> {
                if self.b().len() < Self::HEADER_LEN {
                    return Err($crate::Error::Truncated);
                }
                Ok(())
            }

            /// Message type.
            pub fn msg_type(&self) -> u8 {
                self.b()[0]
            }

            /// Message code.
            pub fn code(&self) -> u8 {
                self.b()[1]
            }

            /// Checksum field.
            pub fn checksum(&self) -> u16 {
                $crate::be16(self.b(), 2)
            }

            /// Bytes 4..8 (echo id/seq, MTU, unused...).
            pub fn rest(&self) -> [u8; 4] {
                self.b()[4..8].try_into().unwrap()
            }

            /// Echo identifier.
            pub fn echo_ident(&self) -> u16 {
                $crate::be16(self.b(), 4)
            }

            /// Echo sequence number.
            pub fn echo_seq(&self) -> u16 {
                $crate::be16(self.b(), 6)
            }
        }

        impl<'a, T: AsRef<[u8]> + ?Sized> $name<&'a T> {
            /// Bytes after the 8-byte header (echo data, or the quoted packet of an error).
            pub fn payload(&self) -> &'a [u8] {
                let b: &'a [u8] = self.buffer.as_ref();
                $crate::clamp(b, Self::HEADER_LEN, b.len())
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            /// Sets the message type.
            pub fn set_msg_type(&mut self, t: u8) {
                self.bm()[0] = t;
            }

            /// Sets the code.
            pub fn set_code(&mut self, c: u8) {
                self.bm()[1] = c;
            }

            /// Sets the checksum field.
            pub fn set_checksum(&mut self, c: u16) {
                $crate::put16(self.bm(), 2, c);
            }

            /// Sets bytes 4..8.
            pub fn set_rest(&mut self, r: [u8; 4]) {
                self.bm()[4..8].copy_from_slice(&r);
            }

            /// Sets the echo identifier.
            pub fn set_echo_ident(&mut self, id: u16) {
                $crate::put16(self.bm(), 4, id);
            }

            /// Sets the echo sequence number.
            pub fn set_echo_seq(&mut self, seq: u16) {
                $crate::put16(self.bm(), 6, seq);
            }

            /// Mutable payload.
            pub fn payload_mut(&mut self) -> &mut [u8] {
                &mut self.bm()[Self::HEADER_LEN..]
            }
        }
    };
}
pub(crate) use icmp_header;
