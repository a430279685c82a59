//! The API for writing a user-space network function: a function over
//! batches of received packets that decides, per packet, to drop it, send
//! it back out (possibly modified: an answer), or forward it to another
//! socket of the same set; and, for generators, a way to emit new packets.

use crate::umem::Umem;

/// What becomes of one packet of a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Its frame goes back to the FILL ring.
    Drop,
    /// Out of the socket it came in on (after whatever the NF changed).
    Tx,
    /// Out of socket `i` of the set (same UMEM, so no copy).
    Forward(usize),
}

/// One received packet's place in the UMEM.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slot {
    pub addr: u64,
    pub len: u32,
    pub verdict: Verdict,
}

/// The packets one socket received in one round. Every packet starts as
/// [`Verdict::Drop`]; the NF sets what it wants.
pub struct Batch<'a> {
    pub(crate) umem: &'a mut Umem,
    pub(crate) slots: &'a mut [Slot],
    /// The socket (index in the set) the batch came from.
    pub socket: usize,
}

impl Batch<'_> {
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    pub fn packet(&self, i: usize) -> &[u8] {
        let s = self.slots[i];
        self.umem.data(s.addr, s.len)
    }

    pub fn packet_mut(&mut self, i: usize) -> &mut [u8] {
        let s = self.slots[i];
        self.umem.data_mut(s.addr, s.len)
    }

    /// Changes packet `i`'s length (to answer with a shorter or longer
    /// frame); bytes past the old end are whatever the frame held. Returns
    /// false when the frame has no room for `len`.
    pub fn set_len(&mut self, i: usize, len: u32) -> bool {
        let s = &mut self.slots[i];
        if len > self.umem.room(s.addr) {
            return false;
        }
        s.len = len;
        true
    }

    pub fn set(&mut self, i: usize, v: Verdict) {
        self.slots[i].verdict = v;
    }

    /// Sets every packet's verdict.
    pub fn set_all(&mut self, v: Verdict) {
        self.slots.iter_mut().for_each(|s| s.verdict = v);
    }
}

/// Room to emit new packets on one socket: frames come from the UMEM's free list.
pub struct Emit<'a> {
    pub(crate) umem: &'a mut Umem,
    pub(crate) out: &'a mut Vec<(u64, u32)>,
    pub(crate) room: usize,
    pub socket: usize,
}

impl Emit<'_> {
    /// Packets that may still be emitted this round.
    pub fn room(&self) -> usize {
        self.room.min(self.umem.free_frames())
    }

    /// Emits a packet of `len` bytes written by `fill`; false when there is
    /// no frame or no TX room left this round.
    pub fn push_with(&mut self, len: u32, fill: impl FnOnce(&mut [u8])) -> bool {
        if self.room == 0 || len > self.umem.config().frame_size {
            return false;
        }
        let Some(addr) = self.umem.alloc() else { return false };
        fill(self.umem.data_mut(addr, len));
        self.out.push((addr, len));
        self.room -= 1;
        true
    }

    pub fn push(&mut self, data: &[u8]) -> bool {
        self.push_with(data.len() as u32, |b| b.copy_from_slice(data))
    }
}

/// A user-space network function.
pub trait NetworkFunction: Send {
    fn name(&self) -> &str;

    /// Decides each received packet's fate.
    fn process(&mut self, batch: &mut Batch<'_>);

    /// Generators emit packets here when the socket's TX ring has room.
    fn emit(&mut self, _out: &mut Emit<'_>) {}

    /// Whether the NF receives at all: a pure generator keeps no frames in
    /// the FILL ring, leaving them all for sending.
    fn receives(&self) -> bool {
        true
    }
}
