//! Byte views of the plain C structs shared with BPF maps.

/// The bytes of a `#[repr(C)]` value with no padding holes that matter.
pub(crate) fn as_bytes<T: Copy>(v: &T) -> &[u8] {
    // SAFETY: T is Copy plain data generated from the BPF object's BTF; we
    // only read size_of::<T>() initialised bytes of it.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
}

/// A value read back from a map; short input is zero-extended.
pub(crate) fn from_bytes<T: Copy + Default>(b: &[u8]) -> T {
    let mut v = T::default();
    let n = b.len().min(std::mem::size_of::<T>());
    // SAFETY: T is plain data (integers and arrays of them); any bit pattern is valid.
    unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), (&mut v as *mut T).cast::<u8>(), n) };
    v
}

/// Sums the first `N` u64 words of a per-CPU map value over all CPUs
/// (counters laid out as consecutive `__u64` fields).
pub(crate) fn sum_percpu<const N: usize>(map: &impl libbpf_rs::MapCore, key: u32) -> anyhow::Result<[u64; N]> {
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
pub(crate) fn object_storage() -> &'static mut std::mem::MaybeUninit<libbpf_rs::OpenObject> {
    Box::leak(Box::new(std::mem::MaybeUninit::uninit()))
}
