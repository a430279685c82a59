//! A pinned map replaced by one another version of xnf could have left:
//! the same type, sizes, entries and flags, but other key and value types
//! in its BTF (what `xnf_core::layout` must refuse to read or write).

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use anyhow::{bail, Context, Result};
use libbpf_rs::{MapCore, MapHandle};
use libbpf_sys as sys;

/// A struct of `size` bytes: one byte array named `field`.
fn add_struct(btf: *mut sys::btf, name: &str, field: &str, size: u32, u8_id: i32, u32_id: i32) -> Result<i32> {
    let (name, field) = (CString::new(name)?, CString::new(field)?);
    // SAFETY: libbpf's BTF writer on a BTF this module owns.
    unsafe {
        let arr = sys::btf__add_array(btf, u32_id, u8_id, size);
        let s = sys::btf__add_struct(btf, name.as_ptr(), size);
        if arr < 0 || s < 0 || sys::btf__add_field(btf, field.as_ptr(), arr, 0, 0) < 0 {
            bail!("writing BTF for struct {}", name.to_string_lossy());
        }
        Ok(s)
    }
}

/// Replaces the map pinned at `path` by an empty one alike in type,
/// sizes, entries and flags, whose key and value are other structs;
/// returns the map it replaced, for [`restore`].
pub fn pin_foreign_layout(path: &Path) -> Result<MapHandle> {
    let old = MapHandle::from_pinned_path(path).with_context(|| format!("opening {}", path.display()))?;
    let i = old.info()?.info;
    // SAFETY: a BTF made, loaded and freed here; the map keeps its own reference.
    let fd = unsafe {
        let btf = sys::btf__new_empty();
        let (u8n, u32n) = (CString::new("u8")?, CString::new("u32")?);
        let u8_id = sys::btf__add_int(btf, u8n.as_ptr(), 1, 0);
        let u32_id = sys::btf__add_int(btf, u32n.as_ptr(), 4, 0);
        let key = add_struct(btf, "xnf_other_key", "other_key", i.key_size, u8_id, u32_id)?;
        let value = add_struct(btf, "xnf_other_value", "other_value", i.value_size, u8_id, u32_id)?;
        if sys::btf__load_into_kernel(btf) < 0 {
            bail!("loading BTF: {}", std::io::Error::last_os_error());
        }
        let opts = sys::bpf_map_create_opts {
            sz: std::mem::size_of::<sys::bpf_map_create_opts>() as _,
            btf_fd: sys::btf__fd(btf) as u32,
            btf_key_type_id: key as u32,
            btf_value_type_id: value as u32,
            map_flags: i.map_flags,
            ..Default::default()
        };
        let name = CString::new("xnf_foreign")?;
        let fd = sys::bpf_map_create(i.type_, name.as_ptr(), i.key_size, i.value_size, i.max_entries, &opts);
        sys::btf__free(btf);
        if fd < 0 {
            bail!("creating a map like {}: {}", path.display(), std::io::Error::from_raw_os_error(-fd));
        }
        OwnedFd::from_raw_fd(fd)
    };
    std::fs::remove_file(path).with_context(|| format!("unpinning {}", path.display()))?;
    let cpath = CString::new(path.as_os_str().as_encoded_bytes())?;
    // SAFETY: pins a map this function made at a path it owns.
    if unsafe { sys::bpf_obj_pin(fd.as_raw_fd(), cpath.as_ptr()) } < 0 {
        bail!("pinning at {}: {}", path.display(), std::io::Error::last_os_error());
    }
    Ok(old)
}

/// Pins `original` at `path` again, in place of what is pinned there.
pub fn restore(path: &Path, original: &MapHandle) -> Result<()> {
    std::fs::remove_file(path).with_context(|| format!("unpinning {}", path.display()))?;
    let cpath = CString::new(path.as_os_str().as_encoded_bytes())?;
    // SAFETY: pins a map the caller holds at a path it owns.
    if unsafe { sys::bpf_obj_pin(original.as_fd().as_raw_fd(), cpath.as_ptr()) } < 0 {
        bail!("pinning at {}: {}", path.display(), std::io::Error::last_os_error());
    }
    Ok(())
}
