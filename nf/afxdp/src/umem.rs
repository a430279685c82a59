//! The UMEM: one memory area of equal frames, shared by user space and the
//! kernel, and the record of which frames user space owns right now.
//!
//! A frame is always in exactly one place: our free list, the FILL ring
//! (the kernel may receive into it), the RX ring (received, not yet taken),
//! a batch the network function holds, the TX ring, or the COMPLETION ring
//! (sent, not yet taken back). [`Umem::free_frames`] plus what the rings
//! hold must always be the frame count — the tests check that nothing leaks.

use std::io;
use std::ptr::NonNull;

use anyhow::{ensure, Result};

/// The UMEM's geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UmemConfig {
    /// Bytes per frame (power of two, 2048 up to the page size).
    pub frame_size: u32,
    pub frame_count: u32,
    /// Bytes the kernel leaves free before each received packet.
    pub headroom: u32,
}

impl Default for UmemConfig {
    fn default() -> Self {
        UmemConfig { frame_size: 4096, frame_count: 8192, headroom: 0 }
    }
}

impl UmemConfig {
    /// Checks what the kernel would refuse with a bare EINVAL, naming the setting.
    pub fn validate(&self) -> Result<()> {
        let page = page_size();
        ensure!(
            self.frame_size.is_power_of_two() && (2048..=page as u32).contains(&self.frame_size),
            "--frame-size {}: AF_XDP frames are a power of two from 2048 to the page size ({page})",
            self.frame_size
        );
        ensure!(self.frame_count >= 2, "--frames {}: a UMEM needs at least 2 frames", self.frame_count);
        // The kernel keeps XDP_PACKET_HEADROOM (256) before the headroom and
        // needs room for a frame after it.
        ensure!(self.headroom + 256 + 128 <= self.frame_size, "--headroom {}: leaves no room for a packet in a {}-byte frame", self.headroom, self.frame_size);
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.frame_size as usize * self.frame_count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// The mapped area and its free list.
pub struct Umem {
    area: NonNull<u8>,
    cfg: UmemConfig,
    free: Vec<u64>,
}

// SAFETY: the area is plain memory; one thread drives a Umem at a time.
unsafe impl Send for Umem {}

impl Umem {
    /// Maps the area (anonymous, populated, so the kernel's pinning does
    /// not fault pages in one by one). Every frame starts on the free list.
    pub fn new(cfg: UmemConfig) -> Result<Self> {
        cfg.validate()?;
        // SAFETY: anonymous private mapping of cfg.len() bytes.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), cfg.len(), libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE, -1, 0)
        };
        if p == libc::MAP_FAILED {
            return Err(anyhow::anyhow!("mapping a UMEM of {} MiB: {}", cfg.len() >> 20, io::Error::last_os_error()));
        }
        let free = (0..cfg.frame_count as u64).rev().map(|i| i * cfg.frame_size as u64).collect();
        Ok(Umem { area: NonNull::new(p as *mut u8).unwrap(), cfg, free })
    }

    pub fn config(&self) -> &UmemConfig {
        &self.cfg
    }

    pub(crate) fn reg(&self) -> libc::xdp_umem_reg {
        libc::xdp_umem_reg {
            addr: self.area.as_ptr() as u64,
            len: self.cfg.len() as u64,
            chunk_size: self.cfg.frame_size,
            headroom: self.cfg.headroom,
            flags: 0,
            tx_metadata_len: 0,
        }
    }

    /// Takes a free frame (its base address), if any.
    pub fn alloc(&mut self) -> Option<u64> {
        self.free.pop()
    }

    /// Gives a frame back. `addr` may point anywhere inside the frame (RX
    /// descriptors point past the headroom): the frame's base is kept.
    pub fn free(&mut self, addr: u64) {
        debug_assert!(addr < self.cfg.len() as u64, "frame address {addr} outside the UMEM");
        self.free.push(addr - addr % self.cfg.frame_size as u64);
    }

    pub fn free_frames(&self) -> usize {
        self.free.len()
    }

    /// The bytes of a packet at `addr` of `len` bytes.
    pub fn data(&self, addr: u64, len: u32) -> &[u8] {
        self.check(addr, len);
        // SAFETY: checked to lie inside the area.
        unsafe { std::slice::from_raw_parts(self.area.as_ptr().add(addr as usize), len as usize) }
    }

    pub fn data_mut(&mut self, addr: u64, len: u32) -> &mut [u8] {
        self.check(addr, len);
        // SAFETY: checked to lie inside the area; &mut self is exclusive on our side.
        unsafe { std::slice::from_raw_parts_mut(self.area.as_ptr().add(addr as usize), len as usize) }
    }

    /// The largest packet that fits a frame when it starts at `addr`.
    pub fn room(&self, addr: u64) -> u32 {
        self.cfg.frame_size - (addr % self.cfg.frame_size as u64) as u32
    }

    fn check(&self, addr: u64, len: u32) {
        let fs = self.cfg.frame_size as u64;
        assert!(addr + len as u64 <= self.cfg.len() as u64 && addr % fs + len as u64 <= fs, "packet at {addr}+{len} crosses its {fs}-byte frame");
    }
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what new() mapped; sockets using it are
        // closed first (they are dropped before the Umem by XskSet).
        unsafe { libc::munmap(self.area.as_ptr() as *mut _, self.cfg.len()) };
    }
}
