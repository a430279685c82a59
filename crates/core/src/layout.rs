//! Layout versions of pinned maps: what a map's key and value mean, so
//! that state written by another xnf is never misread.
//!
//! Pins outlive the process that made them, and an xnf of another version
//! may find them: a value whose fields moved but whose size did not would
//! be read as garbage and written back as worse (libbpf, reusing a pin,
//! compares only type, sizes, entries and flags). So every pinned map
//! carries a layout version, derived rather than declared: a hash of the
//! BTF of its key and value types as the kernel keeps them with the map
//! (every member's name, offset, size and type, all the way down; enum
//! values; typedef names do not count), with the map's type and sizes.
//! The version this xnf expects is the same hash of its own object's BTF.
//! Before anything reads or writes a pin ([`PinnedMaps`]'s opening, and
//! every load that reuses pins), the two are compared; a difference is
//! one line naming the map, the version found and the version expected.
//!
//! A developer changing a map's key or value type changes its version by
//! doing so; nothing is to be bumped by hand. Inner maps of a
//! map-in-map have no BTF of their own in the kernel: the kernel checks
//! them against the outer map's template (type and sizes).
//!
//! [`PinnedMaps`]: crate::lifecycle::PinnedMaps

use std::collections::HashMap;
use std::ffi::CStr;
use std::fmt;
use std::mem::MaybeUninit;
use std::sync::Mutex;

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{AsRawLibbpf, MapCore, MapHandle, OpenObject};
use libbpf_sys as sys;

/// A map's layout version: 32 bits of a hash of its canonical layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Layout(pub u32);

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:08x}", self.0)
    }
}

/// FNV-1a, 64 bits, folded: stable across builds and machines (the
/// standard library's hasher is not).
fn hash(text: &str) -> Layout {
    let h = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3));
    Layout((h ^ (h >> 32)) as u32)
}

/// Renders types of one BTF (a loop in a malformed one is refused by
/// depth, never followed for ever).
pub(crate) struct Walker {
    pub(crate) btf: *const sys::btf,
}

pub(crate) const BTF_KIND_INT: u32 = 1;
const BTF_KIND_PTR: u32 = 2;
pub(crate) const BTF_KIND_ARRAY: u32 = 3;
pub(crate) const BTF_KIND_STRUCT: u32 = 4;
const BTF_KIND_UNION: u32 = 5;
const BTF_KIND_ENUM: u32 = 6;
const BTF_KIND_FWD: u32 = 7;
const BTF_KIND_TYPEDEF: u32 = 8;
const BTF_KIND_VOLATILE: u32 = 9;
const BTF_KIND_CONST: u32 = 10;
const BTF_KIND_RESTRICT: u32 = 11;
const BTF_KIND_TYPE_TAG: u32 = 18;
const BTF_KIND_ENUM64: u32 = 19;

impl Walker {
    pub(crate) fn ty(&self, id: u32) -> Result<&sys::btf_type> {
        // SAFETY: libbpf returns a pointer into the BTF it owns, or null.
        let t = unsafe { sys::btf__type_by_id(self.btf, id) };
        unsafe { t.as_ref() }.with_context(|| format!("BTF type {id} does not exist"))
    }

    pub(crate) fn name(&self, off: u32) -> String {
        // SAFETY: a name offset of this BTF; libbpf returns a C string it owns, or null.
        let p = unsafe { sys::btf__name_by_offset(self.btf, off) };
        if p.is_null() {
            return String::new();
        }
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// The `n` records of type `R` that follow `t` in the BTF.
    pub(crate) fn records<R: Copy>(t: &sys::btf_type, n: usize) -> Vec<R> {
        // SAFETY: BTF puts a kind's records right after its btf_type, as
        // many as its vlen says (libbpf validated the BTF when loading it).
        let first = unsafe { (t as *const sys::btf_type).add(1) as *const R };
        (0..n).map(|i| unsafe { first.add(i).read_unaligned() }).collect()
    }

    /// Type `id` with typedefs and qualifiers looked through: its id, kind
    /// and record count.
    pub(crate) fn strip(&self, mut id: u32) -> Result<(u32, u32, usize)> {
        for _ in 0..32 {
            let t = self.ty(id)?;
            let kind = (t.info >> 24) & 0x1f;
            if !matches!(kind, BTF_KIND_TYPEDEF | BTF_KIND_VOLATILE | BTF_KIND_CONST | BTF_KIND_RESTRICT | BTF_KIND_TYPE_TAG) {
                return Ok((id, kind, (t.info & 0xffff) as usize));
            }
            // SAFETY: a modifier's union holds the type it modifies.
            id = unsafe { t.__bindgen_anon_1.type_ };
        }
        bail!("BTF type {id} is a chain of more than 32 typedefs")
    }

    /// The size in bytes of type `id`.
    pub(crate) fn size(&self, id: u32) -> Result<usize> {
        // SAFETY: a valid BTF; libbpf resolves the size or returns an error.
        let n = unsafe { sys::btf__resolve_size(self.btf, id) };
        usize::try_from(n).map_err(|_| anyhow::anyhow!("BTF type {id} has no size"))
    }

    /// The canonical text of `id` on its own.
    pub(crate) fn text(&self, id: u32) -> Result<String> {
        let mut s = String::new();
        self.render(id, 0, &mut s)?;
        Ok(s)
    }

    /// The canonical text of type `id`: what a reader needs to agree on.
    pub(crate) fn render(&self, id: u32, depth: u32, out: &mut String) -> Result<()> {
        if depth > 32 {
            bail!("BTF type {id} nests more than 32 deep");
        }
        if id == 0 {
            out.push_str("void");
            return Ok(());
        }
        let t = self.ty(id)?;
        let (kind, vlen, kflag) = ((t.info >> 24) & 0x1f, (t.info & 0xffff) as usize, t.info >> 31 == 1);
        // SAFETY: the union holds a size for sized kinds, a type otherwise.
        let (size, target) = unsafe { (t.__bindgen_anon_1.size, t.__bindgen_anon_1.type_) };
        match kind {
            BTF_KIND_TYPEDEF | BTF_KIND_VOLATILE | BTF_KIND_CONST | BTF_KIND_RESTRICT | BTF_KIND_TYPE_TAG => self.render(target, depth + 1, out)?,
            BTF_KIND_INT => {
                let enc = Self::records::<u32>(t, 1)[0];
                out.push_str(&format!("int{size}:{:x}", enc));
            }
            BTF_KIND_PTR => {
                // A pointer in a map is a number to user space; what it
                // points to is the kernel's.
                out.push_str("ptr");
            }
            BTF_KIND_ARRAY => {
                let a = Self::records::<sys::btf_array>(t, 1)[0];
                out.push_str(&format!("[{}]", a.nelems));
                self.render(a.type_, depth + 1, out)?;
            }
            BTF_KIND_STRUCT | BTF_KIND_UNION => {
                out.push_str(&format!("{}{size}{{", if kind == BTF_KIND_STRUCT { "s" } else { "u" }));
                for m in Self::records::<sys::btf_member>(t, vlen) {
                    let (bits, at) = if kflag { (m.offset >> 24, m.offset & 0xff_ffff) } else { (0, m.offset) };
                    out.push_str(&format!("{}@{at}", self.name(m.name_off)));
                    if bits > 0 {
                        out.push_str(&format!(":{bits}"));
                    }
                    out.push(' ');
                    self.render(m.type_, depth + 1, out)?;
                    out.push(';');
                }
                out.push('}');
            }
            BTF_KIND_ENUM => {
                out.push_str(&format!("e{size}{{"));
                for e in Self::records::<sys::btf_enum>(t, vlen) {
                    out.push_str(&format!("{}={};", self.name(e.name_off), e.val));
                }
                out.push('}');
            }
            BTF_KIND_ENUM64 => {
                out.push_str(&format!("e{size}{{"));
                for e in Self::records::<[u32; 3]>(t, vlen) {
                    out.push_str(&format!("{}={};", self.name(e[0]), (e[2] as u64) << 32 | e[1] as u64));
                }
                out.push('}');
            }
            BTF_KIND_FWD => out.push_str(&format!("fwd {}", self.name(t.name_off))),
            other => bail!("BTF type {id} is of kind {other}, which a map's key or value does not have"),
        }
        Ok(())
    }

    /// The layout of a map of `map_type` with these sizes and key and
    /// value types (0: none in BTF, then the sizes alone).
    fn layout(&self, map_type: u32, (key_size, value_size): (u32, u32), (key, value): (u32, u32)) -> Result<Layout> {
        let mut text = format!("type {map_type} key {key_size} value {value_size} ");
        if typed(map_type) && (key != 0 || value != 0) {
            self.render(key, 0, &mut text)?;
            text.push_str(" -> ");
            self.render(value, 0, &mut text)?;
        }
        Ok(hash(&text))
    }
}

/// Whether maps of this type hold data whose meaning their BTF gives:
/// hash, array, their per-CPU and LRU kinds, and LPM tries. The kernel
/// keeps no key and value types for the others (program, device, socket
/// and map arrays hold references; libbpf creates them without), so
/// their sizes alone are compared, on both sides alike.
pub(crate) fn typed(map_type: u32) -> bool {
    matches!(map_type, 1 | 2 | 5 | 6 | 9 | 10 | 11)
}

/// Layouts already read, by (BTF id, key type, value type, map type, sizes):
/// a BTF in the kernel is never changed, and its id is not reused while a
/// map holds it; a long-lived process (the daemon's scrapes) reads each once.
type Known = HashMap<(u32, u32, u32, u32, u32, u32), Layout>;
static KNOWN: Mutex<Option<Known>> = Mutex::new(None);

/// The layout of a map in the kernel (a pinned one), from the BTF the
/// kernel keeps with it.
pub fn of_map(map: &MapHandle) -> Result<Layout> {
    let i = map.info().context("reading the map's info")?.info;
    let key = (i.btf_id, i.btf_key_type_id, i.btf_value_type_id, i.type_, i.key_size, i.value_size);
    if let Some(l) = KNOWN.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(HashMap::new).get(&key) {
        return Ok(*l);
    }
    let l = if i.btf_id == 0 {
        Walker { btf: std::ptr::null() }.layout(i.type_, (i.key_size, i.value_size), (0, 0))?
    } else {
        // SAFETY: loads a copy of the kernel's BTF, freed below.
        let btf = unsafe { sys::btf__load_from_kernel_by_id(i.btf_id) };
        if btf.is_null() {
            bail!("reading BTF {} of the map from the kernel: {}", i.btf_id, std::io::Error::last_os_error());
        }
        let l = Walker { btf }.layout(i.type_, (i.key_size, i.value_size), (i.btf_key_type_id, i.btf_value_type_id));
        unsafe { sys::btf__free(btf) };
        l?
    };
    KNOWN.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(HashMap::new).insert(key, l);
    Ok(l)
}

/// The layouts of the maps named `names` in an opened (not loaded) object.
pub fn of_object(open: &OpenObject, names: &[&str]) -> Result<Vec<(String, Layout)>> {
    // SAFETY: the object outlives this call; libbpf owns its BTF.
    let btf = unsafe { sys::bpf_object__btf(open.as_libbpf_object().as_ptr()) };
    let w = Walker { btf };
    let mut out = Vec::new();
    for m in open.maps() {
        let name = m.name().to_string_lossy().into_owned();
        if !names.contains(&name.as_str()) {
            continue;
        }
        let p = m.as_libbpf_object().as_ptr();
        // SAFETY: a map of the object above.
        let types = unsafe { (sys::bpf_map__btf_key_type_id(p), sys::bpf_map__btf_value_type_id(p)) };
        let (types, w) = if btf.is_null() { ((0, 0), &Walker { btf: std::ptr::null() }) } else { (types, &w) };
        let sizes = (m.key_size(), m.value_size());
        let l = w.layout(m.map_type().into(), sizes, types).with_context(|| format!("the layout of map {name}"))?;
        out.push((name, l));
    }
    Ok(out)
}

/// The layouts of the maps named `names` in the object of skeleton `B`,
/// opened for the purpose (no kernel object is made).
pub fn of_skeleton<B>(names: &[&str]) -> Result<Vec<(String, Layout)>>
where
    B: for<'a> SkelBuilder<'a> + Default,
{
    let mut storage = MaybeUninit::uninit();
    let open = B::default().open(&mut storage).context("opening the BPF object")?;
    of_object(open.open_object(), names)
}

/// Checks the map pinned at `path` against the layout `want`: one line
/// naming the map and both versions when they differ.
pub fn check(path: &std::path::Path, map: &MapHandle, want: Layout) -> Result<()> {
    let found = of_map(map).with_context(|| format!("reading the layout of pinned map {}", path.display()))?;
    if found != want {
        bail!(
            "pinned map {} has layout {found}, this xnf expects {want}: it was written by another version of xnf: `xnf upgrade` moves it to this one's",
            path.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_stable_and_tells_texts_apart() {
        // Fixed: pins written by one build are read by the next.
        assert_eq!(hash("type 2 key 4 value 8 int4:1 -> int8:0").to_string().len(), 8);
        assert_eq!(hash("a"), hash("a"));
        assert_ne!(hash("s8{a@0 int4:1;b@32 int4:1;}"), hash("s8{b@0 int4:1;a@32 int4:1;}"));
    }
}
