//! Reading and writing BPF maps: byte views of the plain C structs the
//! skeletons generate, per-CPU sums, and deletes that tolerate absence.

/// The bytes of a `#[repr(C)]` value with no padding holes that matter.
pub fn as_bytes<T: Copy>(v: &T) -> &[u8] {
    // SAFETY: T is Copy plain data generated from the BPF object's BTF; we
    // only read size_of::<T>() initialised bytes of it.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
}

/// A value read back from a map; short input is zero-extended.
pub fn from_bytes<T: Copy + Default>(b: &[u8]) -> T {
    let mut v = T::default();
    let n = b.len().min(std::mem::size_of::<T>());
    // SAFETY: T is plain data (integers and arrays of them); any bit pattern is valid.
    unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), (&mut v as *mut T).cast::<u8>(), n) };
    v
}

/// Sums the first `N` u64 words of a per-CPU map value over all CPUs
/// (counters laid out as consecutive `__u64` fields).
pub fn sum_percpu<const N: usize>(map: &impl libbpf_rs::MapCore, key: u32) -> anyhow::Result<[u64; N]> {
    let per_cpu = map.lookup_percpu(&key.to_ne_bytes(), libbpf_rs::MapFlags::ANY)?.unwrap_or_default();
    let mut sum = [0u64; N];
    for v in per_cpu {
        for (i, s) in sum.iter_mut().enumerate() {
            *s += u64::from_ne_bytes(v[i * 8..i * 8 + 8].try_into()?);
        }
    }
    Ok(sum)
}

/// Storage for a skeleton's object. A skeleton borrows it for its whole
/// life and a loaded program lives until the process ends or detaches it,
/// so the few bytes are leaked on purpose rather than tied to a lifetime.
pub fn object_storage() -> &'static mut std::mem::MaybeUninit<libbpf_rs::OpenObject> {
    Box::leak(Box::new(std::mem::MaybeUninit::uninit()))
}

/// Deletes `key`, succeeding when it is already gone.
pub fn delete_if_present(map: &impl libbpf_rs::MapCore, key: &[u8]) -> anyhow::Result<()> {
    match map.delete(key) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == libbpf_rs::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(anyhow::Error::from(e).context("deleting a map entry")),
    }
}

/// Adds up the per-CPU values of `slot`, each read as a `T`.
pub fn percpu_sum<T: Copy + Default>(map: &impl libbpf_rs::MapCore, slot: u32, mut add: impl FnMut(&T)) -> anyhow::Result<()> {
    if let Some(per_cpu) = map.lookup_percpu(&slot.to_ne_bytes(), libbpf_rs::MapFlags::ANY)? {
        for v in per_cpu {
            add(&from_bytes::<T>(&v));
        }
    }
    Ok(())
}

/// Slots `0..n` of a per-CPU array of counters (a `T` made of `u64`
/// counters only), each added up over the CPUs. Every [`PercpuSums::read`]
/// is one batch lookup (libbpf-rs offers none for per-CPU maps) where
/// [`percpu_sum`] takes a system call per slot, and only the slots whose
/// values changed since the last read are added up again: for readers that
/// look at many slots often (the fuzzers, after every frame).
pub struct PercpuSums<T> {
    n: u32,
    words: usize,
    ncpu: usize,
    keys: Vec<u32>,
    /// Every CPU's value of every slot, as the kernel lays them out.
    raw: Vec<u64>,
    prev: Vec<u64>,
    sum: Vec<u64>,
    sums: Vec<T>,
}

impl<T: Copy + Default> PercpuSums<T> {
    pub fn new(n: u32) -> anyhow::Result<Self> {
        let size = std::mem::size_of::<T>();
        anyhow::ensure!(size.is_multiple_of(8), "per-CPU sums of {size}-byte values: not u64 counters");
        let (words, ncpu) = (size / 8, libbpf_rs::num_possible_cpus()?);
        let raw = vec![0u64; n as usize * ncpu * words];
        Ok(PercpuSums { n, words, ncpu, keys: vec![0; n as usize], prev: raw.clone(), raw, sum: vec![0; words], sums: vec![T::default(); n as usize] })
    }

    /// Reads the slots again from `map`.
    pub fn read(&mut self, map: &impl libbpf_rs::MapCore) -> anyhow::Result<&[T]> {
        use anyhow::Context;
        use std::os::fd::AsRawFd;
        anyhow::ensure!(map.value_size() as usize == self.words * 8, "a map of {}-byte values", map.value_size());
        let mut next = 0u32;
        let mut count = self.n;
        let opts = libbpf_sys::bpf_map_batch_opts { sz: std::mem::size_of::<libbpf_sys::bpf_map_batch_opts>() as _, ..Default::default() };
        std::mem::swap(&mut self.raw, &mut self.prev);
        // SAFETY: the buffers hold `n` keys and `n` per-CPU values of the
        // map's value size (checked above; the kernel lays them out 8-byte
        // aligned), and `next` one array key.
        let rc = unsafe {
            libbpf_sys::bpf_map_lookup_batch(
                map.as_fd().as_raw_fd(),
                std::ptr::null_mut(),
                (&mut next as *mut u32).cast(),
                self.keys.as_mut_ptr().cast(),
                self.raw.as_mut_ptr().cast(),
                &mut count,
                &opts,
            )
        };
        // ENOENT: the array ended before `n` slots (count says how many came).
        if rc < 0 && rc != -libc::ENOENT {
            return Err(std::io::Error::from_raw_os_error(-rc)).context("batch lookup of per-CPU counters");
        }
        anyhow::ensure!(self.keys.iter().take(count as usize).enumerate().all(|(i, k)| *k as usize == i), "batch lookup out of order");
        let per_slot = self.ncpu * self.words;
        for slot in 0..count as usize {
            let span = slot * per_slot..(slot + 1) * per_slot;
            if self.raw[span.clone()] == self.prev[span.clone()] {
                continue;
            }
            self.sum.fill(0);
            for cpu in self.raw[span].chunks_exact(self.words) {
                for (s, v) in self.sum.iter_mut().zip(cpu) {
                    *s += v;
                }
            }
            // SAFETY: `sum` holds size_of::<T>() initialised bytes.
            self.sums[slot] = from_bytes(unsafe { std::slice::from_raw_parts(self.sum.as_ptr().cast::<u8>(), self.words * 8) });
        }
        Ok(&self.sums)
    }
}

/// Zeroes the per-CPU values of `slot` (a `T` on every CPU).
pub fn zero_percpu<T>(map: &impl libbpf_rs::MapCore, slot: u32) -> anyhow::Result<()> {
    use anyhow::Context;
    let ncpu = libbpf_rs::num_possible_cpus()?;
    let zero = vec![vec![0u8; std::mem::size_of::<T>()]; ncpu];
    map.update_percpu(&slot.to_ne_bytes(), &zero, libbpf_rs::MapFlags::ANY).context("zeroing counters")
}

/// Tables the data plane reads through a one-slot `ARRAY_OF_MAPS`: a
/// change builds a new inner `ARRAY`, fills it, and then points the outer
/// slot at it in one update. A packet sees the old table or the new one
/// whole, never a mix (a CPU still scanning the old table keeps it alive;
/// the kernel frees it once every reader is done, off the data path).
pub mod swap {
    use anyhow::{Context, Result};
    use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType};
    use std::os::fd::{AsFd, AsRawFd};

    /// Replaces the table behind `outer` with one holding `entries` (each
    /// a value of `value_size` bytes; index = position) in an inner array
    /// of `max_entries`, the size the program's template declares.
    pub fn replace(outer: &impl MapCore, value_size: u32, max_entries: u32, entries: &[Vec<u8>]) -> Result<()> {
        anyhow::ensure!(entries.len() <= max_entries as usize, "{} entries: the table holds {max_entries}", entries.len());
        let at: Vec<(u32, Vec<u8>)> = entries.iter().enumerate().map(|(i, v)| (i as u32, v.clone())).collect();
        replace_at(outer, value_size, max_entries, &at)
    }

    /// [`replace`] with the entries at the given indexes (the others zero).
    pub fn replace_at(outer: &impl MapCore, value_size: u32, max_entries: u32, entries: &[(u32, Vec<u8>)]) -> Result<()> {
        let opts = libbpf_sys::bpf_map_create_opts { sz: std::mem::size_of::<libbpf_sys::bpf_map_create_opts>() as _, ..Default::default() };
        let inner = MapHandle::create(MapType::Array, Some("xnf_table"), 4, value_size, max_entries, &opts).context("creating a table for the data plane")?;
        for chunk in entries.chunks(1024) {
            let keys: Vec<u8> = chunk.iter().flat_map(|(i, _)| i.to_ne_bytes()).collect();
            let values: Vec<u8> = chunk.iter().flat_map(|(_, v)| v.iter().copied()).collect();
            anyhow::ensure!(chunk.iter().all(|(i, v)| *i < max_entries && v.len() == value_size as usize), "an entry beyond the table or of the wrong size");
            // Batched where the kernel has it (5.6), else one at a time.
            if inner.update_batch(&keys, &values, chunk.len() as u32, MapFlags::ANY, MapFlags::ANY).is_err() {
                for (i, v) in chunk {
                    inner.update(&i.to_ne_bytes(), v, MapFlags::ANY).context("filling a table")?;
                }
            }
        }
        let fd = inner.as_fd().as_raw_fd() as u32;
        outer.update(&0u32.to_ne_bytes(), &fd.to_ne_bytes(), MapFlags::ANY).context("switching the data plane to the new table")
    }

    /// Removes the table: the program then finds none.
    pub fn clear(outer: &impl MapCore) -> Result<()> {
        super::delete_if_present(outer, &0u32.to_ne_bytes())
    }

    /// The live table, if there is one.
    pub fn current(outer: &impl MapCore) -> Result<Option<MapHandle>> {
        let Some(v) = outer.lookup(&0u32.to_ne_bytes(), MapFlags::ANY)? else { return Ok(None) };
        let id = u32::from_ne_bytes(v[..4].try_into().context("map id")?);
        Ok(Some(MapHandle::from_map_id(id).context("opening the live table")?))
    }
}

/// A read-only shared mapping of an array map made with `BPF_F_MMAPABLE`:
/// what the programs write shows through at once, with no syscall per
/// read. Elements lie `value_size` rounded up to 8 bytes apart, as the
/// kernel lays out an array map.
pub struct MappedArray {
    ptr: *const u8,
    /// Bytes mapped.
    bytes: usize,
    value_size: usize,
    stride: usize,
    n: usize,
}

impl MappedArray {
    pub fn new(map: &impl libbpf_rs::MapCore, what: &str) -> anyhow::Result<Self> {
        use std::os::fd::AsRawFd;
        let info = map.info().map_err(|e| anyhow::anyhow!("reading the map info of {what}: {e}"))?.info;
        let (n, value_size) = (info.max_entries as usize, info.value_size as usize);
        let stride = value_size.next_multiple_of(8);
        let bytes = n * stride;
        // SAFETY: a shared read-only mapping of the map's fd, `bytes` long
        // (the array's size); unmapped on drop.
        let ptr = unsafe { libc::mmap(std::ptr::null_mut(), bytes, libc::PROT_READ, libc::MAP_SHARED, map.as_fd().as_raw_fd(), 0) };
        anyhow::ensure!(ptr != libc::MAP_FAILED, "mapping {what}: {}", std::io::Error::last_os_error());
        Ok(MappedArray { ptr: ptr as *const u8, bytes, value_size, stride, n })
    }

    /// The map's value size, as the kernel has it.
    pub fn value_size(&self) -> usize {
        self.value_size
    }

    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Element `i` as a `T` (plain data no larger than the element), read
    /// once: a program may be writing it meanwhile.
    pub fn get<T: Copy>(&self, i: usize) -> T {
        assert!(i < self.n && std::mem::size_of::<T>() <= self.stride, "element {i} of {} as {} bytes", self.n, std::mem::size_of::<T>());
        // SAFETY: element i lies inside the mapping (checked above); T is
        // plain data, and read_volatile of possibly unaligned bytes is
        // avoided by the 8-byte stride from a page-aligned start.
        unsafe { std::ptr::read_volatile(self.ptr.add(i * self.stride) as *const T) }
    }
}

impl Drop for MappedArray {
    fn drop(&mut self) {
        // SAFETY: the mapping made in new(), no longer referenced.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.bytes) };
    }
}
