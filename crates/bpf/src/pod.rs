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
