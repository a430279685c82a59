//! The four AF_XDP rings, mapped from the kernel: single-producer,
//! single-consumer arrays of a power-of-two size, with a producer and a
//! consumer index the two sides publish to each other.
//!
//! User space produces into FILL (frames the kernel may receive into) and
//! TX (frames to send), and consumes from RX (received frames) and
//! COMPLETION (sent frames whose memory is ours again). The indices are
//! free-running u32s; entry `i` lives at `i & mask`. Each side caches the
//! other's index and reads the shared one (acquire) only when the cache
//! says the ring is full or empty, and publishes its own (release) once per
//! batch, which is what keeps the rings cheap.

use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

/// One mapped ring of entries `T` (`u64` frame addresses for FILL and
/// COMPLETION, `xdp_desc` for RX and TX).
pub struct Ring<T> {
    map: NonNull<u8>,
    map_len: usize,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    descs: *mut T,
    mask: u32,
    size: u32,
    /// Our side's index, published by `submit` / `release`.
    local: u32,
    /// The other side's index as last read.
    cached: u32,
    _t: PhantomData<T>,
}

// SAFETY: the ring is only used from one thread at a time (&mut self); the
// mapping stays valid while the Ring lives.
unsafe impl<T> Send for Ring<T> {}

impl<T: Copy> Ring<T> {
    /// Maps the ring of `size` entries at page offset `pgoff` of the socket.
    pub(crate) fn map(fd: BorrowedFd<'_>, off: &libc::xdp_ring_offset, size: u32, pgoff: i64, producer_side: bool) -> io::Result<Self> {
        let map_len = off.desc as usize + size as usize * std::mem::size_of::<T>();
        // SAFETY: mmap of a region the kernel sized for this socket's ring.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), map_len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED | libc::MAP_POPULATE, fd.as_raw_fd(), pgoff)
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = p as *mut u8;
        // SAFETY: offsets come from XDP_MMAP_OFFSETS and lie inside the map.
        let (producer, consumer, flags, descs) = unsafe {
            (
                base.add(off.producer as usize) as *const AtomicU32,
                base.add(off.consumer as usize) as *const AtomicU32,
                base.add(off.flags as usize) as *const AtomicU32,
                base.add(off.desc as usize) as *mut T,
            )
        };
        let mut r =
            Ring { map: NonNull::new(base).unwrap(), map_len, producer, consumer, flags, descs, mask: size - 1, size, local: 0, cached: 0, _t: PhantomData };
        // SAFETY: valid pointers into the mapping.
        unsafe {
            if producer_side {
                r.local = (*producer).load(Ordering::Relaxed);
                r.cached = (*consumer).load(Ordering::Acquire);
            } else {
                r.local = (*consumer).load(Ordering::Relaxed);
                r.cached = (*producer).load(Ordering::Acquire);
            }
        }
        Ok(r)
    }

    pub fn size(&self) -> u32 {
        self.size
    }

    /// The kernel asks to be woken (`XDP_RING_NEED_WAKEUP`, with
    /// `XDP_USE_NEED_WAKEUP` bound): on FILL by a receive-side syscall, on TX
    /// by `sendto`.
    pub fn needs_wakeup(&self) -> bool {
        // SAFETY: valid pointer into the mapping.
        unsafe { (*self.flags).load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0 }
    }

    // ---- producer side (FILL, TX) ----

    /// Free slots, reading the consumer's index only when the cache runs short of `want`.
    pub fn free(&mut self, want: u32) -> u32 {
        let free = self.cached.wrapping_add(self.size).wrapping_sub(self.local);
        if free >= want {
            return free;
        }
        // SAFETY: valid pointer into the mapping.
        self.cached = unsafe { (*self.consumer).load(Ordering::Acquire) };
        self.cached.wrapping_add(self.size).wrapping_sub(self.local)
    }

    /// Writes entry `i` of the batch being produced (not yet visible).
    pub fn write(&mut self, i: u32, v: T) {
        let idx = self.local.wrapping_add(i) & self.mask;
        // SAFETY: idx <= mask, inside the descriptor array.
        unsafe { self.descs.add(idx as usize).write_volatile(v) }
    }

    /// Publishes `n` written entries to the kernel.
    pub fn submit(&mut self, n: u32) {
        self.local = self.local.wrapping_add(n);
        // SAFETY: valid pointer; release orders the entries before the index.
        unsafe { (*self.producer).store(self.local, Ordering::Release) }
    }

    // ---- consumer side (RX, COMPLETION) ----

    /// Entries ready, up to `max`, reading the producer's index when the cache is empty.
    pub fn available(&mut self, max: u32) -> u32 {
        let mut n = self.cached.wrapping_sub(self.local);
        if n == 0 {
            // SAFETY: valid pointer into the mapping.
            self.cached = unsafe { (*self.producer).load(Ordering::Acquire) };
            n = self.cached.wrapping_sub(self.local);
        }
        n.min(max)
    }

    /// Reads entry `i` of the ready batch.
    pub fn read(&self, i: u32) -> T {
        let idx = self.local.wrapping_add(i) & self.mask;
        // SAFETY: idx <= mask, inside the descriptor array.
        unsafe { self.descs.add(idx as usize).read_volatile() }
    }

    /// Hands `n` consumed entries back to the kernel.
    pub fn release(&mut self, n: u32) {
        self.local = self.local.wrapping_add(n);
        // SAFETY: valid pointer; release orders our reads before the index.
        unsafe { (*self.consumer).store(self.local, Ordering::Release) }
    }

    /// Entries between the two published indices right now (for accounting).
    pub fn occupied(&self) -> u32 {
        // SAFETY: valid pointers into the mapping.
        unsafe { (*self.producer).load(Ordering::Acquire).wrapping_sub((*self.consumer).load(Ordering::Acquire)) }
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what map() mapped.
        unsafe { libc::munmap(self.map.as_ptr() as *mut _, self.map_len) };
    }
}
