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

/// Zeroes the per-CPU values of `slot` (a `T` on every CPU).
pub fn zero_percpu<T>(map: &impl libbpf_rs::MapCore, slot: u32) -> anyhow::Result<()> {
    use anyhow::Context;
    let ncpu = libbpf_rs::num_possible_cpus()?;
    let zero = vec![vec![0u8; std::mem::size_of::<T>()]; ncpu];
    map.update_percpu(&slot.to_ne_bytes(), &zero, libbpf_rs::MapFlags::ANY).context("zeroing counters")
}

/// Opens the maps pinned in `dir` under `names`, in order.
pub fn open_pinned<const N: usize>(dir: &std::path::Path, names: [&str; N]) -> anyhow::Result<[libbpf_rs::MapHandle; N]> {
    use anyhow::Context;
    let v = names
        .iter()
        .map(|name| {
            let path = dir.join(name);
            libbpf_rs::MapHandle::from_pinned_path(&path).with_context(|| format!("opening pinned map {}", path.display()))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(v.try_into().unwrap_or_else(|_| unreachable!("one handle per name")))
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
        let opts = libbpf_sys::bpf_map_create_opts { sz: std::mem::size_of::<libbpf_sys::bpf_map_create_opts>() as _, ..Default::default() };
        let inner = MapHandle::create(MapType::Array, Some("xnf_table"), 4, value_size, max_entries, &opts)
            .context("creating a table for the data plane")?;
        for (i, v) in entries.iter().enumerate() {
            inner.update(&(i as u32).to_ne_bytes(), v, MapFlags::ANY).context("filling a table")?;
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
