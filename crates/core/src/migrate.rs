//! Copying the entries of a pinned map into a map of another layout, for
//! an upgrade ([`Lifecycle::upgrade`](crate::lifecycle::Lifecycle::upgrade)).
//!
//! Both maps are in the kernel with their BTF, so how an old value becomes
//! a new one is derived from the two types, member by member and by name:
//! a member of the same name and the same type is copied, a new member
//! starts at zero, a removed one is dropped, and a member whose type
//! changed under the same name is refused (its bytes would be misread: a
//! developer who changes a field's meaning gives it a new name). Types
//! that are the same on both sides are copied whole.
//!
//! An upgrade copies, swaps the programs, and then catches up with what
//! the old programs wrote in between ([`Migration::catch_up`]): entries of
//! hash maps that the new map lacks (connections the old program opened),
//! and in arrays what changed since the copy — counters (every 8-byte
//! integer) by their increase, added to what the new program counted,
//! other fields by their new value.

use anyhow::{bail, Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType};
use libbpf_sys as sys;

use crate::layout::{Walker, BTF_KIND_ARRAY, BTF_KIND_INT, BTF_KIND_STRUCT};

/// A run of bytes copied from an old value into a new one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Leaf {
    from: usize,
    to: usize,
    len: usize,
    /// An 8-byte integer: caught up by its increase.
    counter: bool,
}

/// How a key or value of the old layout becomes one of the new.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    new_size: usize,
    leaves: Vec<Leaf>,
}

impl Plan {
    /// The same bytes: for keys and values without BTF of the same size.
    fn identity(size: usize) -> Plan {
        Plan { new_size: size, leaves: vec![Leaf { from: 0, to: 0, len: size, counter: false }] }
    }

    /// The new value made from `old`.
    pub fn apply(&self, old: &[u8]) -> Vec<u8> {
        let mut out = vec![0u8; self.new_size];
        for l in &self.leaves {
            out[l.to..l.to + l.len].copy_from_slice(&old[l.from..l.from + l.len]);
        }
        out
    }

    /// Brings `new` up to date with the old value going from `then` to
    /// `now`: counters by their increase, the rest where it changed.
    fn catch_up(&self, new: &mut [u8], then: &[u8], now: &[u8]) {
        for l in &self.leaves {
            let (a, b) = (&then[l.from..l.from + l.len], &now[l.from..l.from + l.len]);
            if a == b {
                continue;
            }
            let dst = &mut new[l.to..l.to + l.len];
            if l.counter {
                let word = |s: &[u8]| u64::from_ne_bytes(s.try_into().expect("8 bytes"));
                let v = word(dst).wrapping_add(word(b).wrapping_sub(word(a)));
                dst.copy_from_slice(&v.to_ne_bytes());
            } else {
                dst.copy_from_slice(b);
            }
        }
    }
}

/// A BTF the kernel holds (a map's), freed on drop.
struct KernelBtf(*mut sys::btf);

impl KernelBtf {
    fn load(id: u32) -> Result<KernelBtf> {
        // SAFETY: loads a copy of the kernel's BTF, freed on drop.
        let btf = unsafe { sys::btf__load_from_kernel_by_id(id) };
        if btf.is_null() {
            bail!("reading BTF {id} from the kernel: {}", std::io::Error::last_os_error());
        }
        Ok(KernelBtf(btf))
    }

    fn walker(&self) -> Walker {
        Walker { btf: self.0 }
    }
}

impl Drop for KernelBtf {
    fn drop(&mut self) {
        // SAFETY: loaded in load(), used by no one else.
        unsafe { sys::btf__free(self.0) };
    }
}

/// Plans from one BTF's types to another's.
struct Pair<'a> {
    old: &'a Walker,
    new: &'a Walker,
}

impl Pair<'_> {
    /// Old type `o` at offset `at.0` into new type `n` at `at.1`.
    fn plan(&self, (o, n): (u32, u32), at: (usize, usize), path: &str, out: &mut Vec<Leaf>) -> Result<()> {
        let (to, tn) = (self.old.text(o)?, self.new.text(n)?);
        if to == tn {
            return leaves(self.new, n, at, out, 0);
        }
        let ((o, ko, _), (n, kn, vn)) = (self.old.strip(o)?, self.new.strip(n)?);
        if ko != BTF_KIND_STRUCT || kn != BTF_KIND_STRUCT {
            bail!("{path} is {to} in the pinned map and {tn} in this xnf: a field whose type changes needs a new name");
        }
        let (_, _, vo) = self.old.strip(o)?;
        let olds = Walker::records::<sys::btf_member>(self.old.ty(o)?, vo);
        let kflag = |w: &Walker, id: u32| w.ty(id).map(|t| t.info >> 31 == 1);
        let (kfo, kfn) = (kflag(self.old, o)?, kflag(self.new, n)?);
        for m in Walker::records::<sys::btf_member>(self.new.ty(n)?, vn) {
            let name = self.new.name(m.name_off);
            let field = format!("{path}.{name}");
            let bits = |kf: bool, off: u32| if kf { (off >> 24, off & 0xff_ffff) } else { (0, off) };
            let (nbits, noff) = bits(kfn, m.offset);
            let Some(om) = olds.iter().find(|om| self.old.name(om.name_off) == name) else {
                if name.is_empty() {
                    bail!("{path} has an unnamed member that changed: name it, so that it can be matched");
                }
                continue;
            };
            let (obits, ooff) = bits(kfo, om.offset);
            if nbits > 0 || obits > 0 || noff % 8 != 0 || ooff % 8 != 0 {
                bail!("{field} is a bit field in a changed struct: move it into a member of its own");
            }
            self.plan((om.type_, m.type_), (at.0 + ooff as usize / 8, at.1 + noff as usize / 8), &field, out)?;
        }
        Ok(())
    }
}

/// The runs of bytes of type `id` at `at`, the same on both sides: one per
/// 8-byte integer (a counter), one per other member.
fn leaves(w: &Walker, id: u32, at: (usize, usize), out: &mut Vec<Leaf>, depth: u32) -> Result<()> {
    let (id, kind, vlen) = w.strip(id)?;
    let size = w.size(id)?;
    let whole = Leaf { from: at.0, to: at.1, len: size, counter: false };
    match kind {
        BTF_KIND_INT if size == 8 => out.push(Leaf { counter: true, ..whole }),
        BTF_KIND_STRUCT if depth < 8 => {
            let t = w.ty(id)?;
            let members = Walker::records::<sys::btf_member>(t, vlen);
            if t.info >> 31 == 1 && members.iter().any(|m| m.offset >> 24 != 0) {
                out.push(whole);
                return Ok(());
            }
            let (start, mut end) = (out.len(), 0);
            for m in members {
                let off = m.offset as usize / 8;
                if off < end {
                    // Overlapping members (an anonymous union): whole.
                    out.truncate(start);
                    out.push(whole);
                    return Ok(());
                }
                leaves(w, m.type_, (at.0 + off, at.1 + off), out, depth + 1)?;
                end = off + w.size(m.type_)?;
            }
        }
        BTF_KIND_ARRAY => {
            let a = Walker::records::<sys::btf_array>(w.ty(id)?, 1)[0];
            let (elem, ek, _) = w.strip(a.type_)?;
            if ek == BTF_KIND_INT && w.size(elem)? == 8 && a.nelems <= 4096 {
                for i in 0..a.nelems as usize {
                    out.push(Leaf { from: at.0 + 8 * i, to: at.1 + 8 * i, len: 8, counter: true });
                }
            } else {
                out.push(whole);
            }
        }
        _ => out.push(whole),
    }
    Ok(())
}

/// The plans for a map's key and value, from its old map to its new one.
fn plans(name: &str, old: &MapHandle, new: &MapHandle) -> Result<(Plan, Plan)> {
    let (oi, ni) = (old.info()?.info, new.info()?.info);
    let sized = |size: u32| Plan::identity(size as usize);
    if oi.btf_id == 0 || ni.btf_id == 0 || oi.btf_value_type_id == 0 || ni.btf_value_type_id == 0 {
        if (oi.key_size, oi.value_size) != (ni.key_size, ni.value_size) {
            bail!("map {name} changed size and has no BTF to say how its entries move: it cannot be migrated");
        }
        return Ok((sized(oi.key_size), sized(oi.value_size)));
    }
    let (ob, nb) = (KernelBtf::load(oi.btf_id)?, KernelBtf::load(ni.btf_id)?);
    let (ow, nw) = (ob.walker(), nb.walker());
    let pair = Pair { old: &ow, new: &nw };
    let plan = |o: u32, n: u32, size: u32, what: &str| -> Result<Plan> {
        if o == 0 || n == 0 {
            return Ok(sized(size));
        }
        let mut leaves = Vec::new();
        pair.plan((o, n), (0, 0), &format!("{name}'s {what}"), &mut leaves)?;
        Ok(Plan { new_size: nw.size(n)?, leaves })
    };
    Ok((plan(oi.btf_key_type_id, ni.btf_key_type_id, ni.key_size, "key")?, plan(oi.btf_value_type_id, ni.btf_value_type_id, ni.value_size, "value")?))
}

/// A value as the map holds it: one per CPU for per-CPU maps.
type Values = Vec<Vec<u8>>;

/// One map's entries moving from its old layout to its new one.
pub struct Migration {
    pub name: String,
    old: MapHandle,
    new: MapHandle,
    key: Plan,
    value: Plan,
    /// Arrays: every old value at the copy, for the catch-up.
    then: Vec<(Vec<u8>, Values)>,
}

fn is_array(t: MapType) -> bool {
    matches!(t, MapType::Array | MapType::PercpuArray)
}

fn read(map: &MapHandle, key: &[u8]) -> Result<Option<Values>> {
    if map.map_type().is_percpu() {
        Ok(map.lookup_percpu(key, MapFlags::ANY)?)
    } else {
        Ok(map.lookup(key, MapFlags::ANY)?.map(|v| vec![v]))
    }
}

fn write(map: &MapHandle, key: &[u8], values: &[Vec<u8>], flags: MapFlags) -> libbpf_rs::Result<()> {
    if map.map_type().is_percpu() {
        map.update_percpu(key, values, flags)
    } else {
        map.update(key, &values[0], flags)
    }
}

impl Migration {
    /// Plans moving map `name` from `old` to `new`; a change that cannot be
    /// moved without misreading is refused in one line naming the field.
    pub fn new(name: &str, old: MapHandle, new: MapHandle) -> Result<Migration> {
        let (ot, nt) = (old.map_type(), new.map_type());
        let data = |t: MapType| crate::layout::typed(t as u32);
        if !data(ot) || !data(nt) || is_array(ot) != is_array(nt) || ot.is_percpu() != nt.is_percpu() {
            bail!("map {name} changed from {ot:?} to {nt:?}: xnf migrates hash, array and trie maps into maps of the same kind");
        }
        let (key, value) = plans(name, &old, &new)?;
        Ok(Migration { name: name.into(), old, new, key, value, then: Vec::new() })
    }

    /// The keys of the old map: every index of an array, every key of a
    /// hash (bounded: a hash that changes under the walk restarts it).
    fn keys(&self) -> Vec<Vec<u8>> {
        if is_array(self.old.map_type()) {
            return (0..self.old.max_entries().min(self.new.max_entries())).map(|i| i.to_ne_bytes().to_vec()).collect();
        }
        self.old.keys().take(2 * self.old.max_entries() as usize + 16).collect()
    }

    /// Copies every entry; returns how many.
    pub fn copy(&mut self) -> Result<usize> {
        let mut n = 0;
        for k in self.keys() {
            let Some(v) = read(&self.old, &k)? else { continue };
            let nv: Values = v.iter().map(|c| self.value.apply(c)).collect();
            write(&self.new, &self.key.apply(&k), &nv, MapFlags::ANY)
                .with_context(|| format!("copying an entry of map {} (is the new map big enough?)", self.name))?;
            if is_array(self.old.map_type()) {
                self.then.push((k, v));
            }
            n += 1;
        }
        Ok(n)
    }

    /// After the swap: what the old programs wrote since [`copy`](Self::copy).
    /// Returns how many entries changed.
    pub fn catch_up(&mut self) -> Result<usize> {
        if !is_array(self.old.map_type()) {
            return self.catch_up_hash();
        }
        let mut n = 0;
        for (k, then) in std::mem::take(&mut self.then) {
            let (Some(now), Some(mut new)) = (read(&self.old, &k)?, read(&self.new, &k)?) else { continue };
            if now == then {
                continue;
            }
            for ((new, then), now) in new.iter_mut().zip(&then).zip(&now) {
                self.value.catch_up(new, then, now);
            }
            write(&self.new, &k, &new, MapFlags::ANY).with_context(|| format!("catching up map {}", self.name))?;
            n += 1;
        }
        Ok(n)
    }

    /// Entries the new map lacks; those the new program made stay.
    fn catch_up_hash(&self) -> Result<usize> {
        let mut n = 0;
        for k in self.keys() {
            let Some(v) = read(&self.old, &k)? else { continue };
            let nv: Values = v.iter().map(|c| self.value.apply(c)).collect();
            match write(&self.new, &self.key.apply(&k), &nv, MapFlags::NO_EXIST) {
                Ok(()) => n += 1,
                Err(e) if e.kind() == libbpf_rs::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(anyhow::Error::from(e).context(format!("catching up map {}", self.name))),
            }
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    /// A BTF made in user space holding one struct of `fields` (name,
    /// bytes, byte offset; all unsigned integers); its id.
    fn btf_struct(fields: &[(&str, u32, u32)], size: u32) -> (KernelBtf, u32) {
        let c = |s: &str| CString::new(s).unwrap();
        // SAFETY: a new, empty BTF, freed by KernelBtf's drop; every call
        // below passes it and C strings that outlive the call.
        unsafe {
            let btf = sys::btf__new_empty();
            assert!(!btf.is_null());
            let mut ints = std::collections::HashMap::new();
            for &(_, bytes, _) in fields {
                ints.entry(bytes).or_insert_with(|| sys::btf__add_int(btf, c(&format!("u{}", bytes * 8)).as_ptr(), bytes as _, 0));
            }
            let id = sys::btf__add_struct(btf, c("value").as_ptr(), size);
            for &(name, bytes, off) in fields {
                assert_eq!(sys::btf__add_field(btf, c(name).as_ptr(), ints[&bytes], off * 8, 0), 0);
            }
            (KernelBtf(btf), id as u32)
        }
    }

    fn plan_of(old: (&[(&str, u32, u32)], u32), new: (&[(&str, u32, u32)], u32)) -> Result<Vec<Leaf>> {
        let ((ob, oid), (nb, nid)) = (btf_struct(old.0, old.1), btf_struct(new.0, new.1));
        let (ow, nw) = (ob.walker(), nb.walker());
        let mut out = Vec::new();
        Pair { old: &ow, new: &nw }.plan((oid, nid), (0, 0), "conntrack's value", &mut out)?;
        Ok(out)
    }

    #[test]
    fn members_move_by_name_new_ones_start_at_zero_and_a_changed_type_is_refused() {
        let old: &[(&str, u32, u32)] = &[("id", 4, 0), ("gen", 4, 4)];
        // One more field, and the two swapped: each found by its name.
        let leaves = plan_of((old, 8), (&[("gen", 4, 0), ("id", 4, 4), ("upgraded", 8, 8)], 16)).unwrap();
        assert_eq!(leaves, [Leaf { from: 4, to: 0, len: 4, counter: false }, Leaf { from: 0, to: 4, len: 4, counter: false }]);
        // A field dropped: not copied.
        assert_eq!(plan_of((old, 8), (&[("id", 4, 0)], 4)).unwrap(), [Leaf { from: 0, to: 0, len: 4, counter: false }]);
        // The same name with another type would be misread: refused, named.
        let e = plan_of((old, 8), (&[("id", 4, 0), ("gen", 8, 8)], 16)).unwrap_err().to_string();
        assert!(e.starts_with("conntrack's value.gen is int4"), "{e}");
        assert!(e.ends_with("a field whose type changes needs a new name"), "{e}");
    }

    #[test]
    fn counters_catch_up_by_their_increase_and_the_rest_by_value() {
        let p = Plan { new_size: 16, leaves: vec![Leaf { from: 0, to: 8, len: 8, counter: true }, Leaf { from: 8, to: 0, len: 4, counter: false }] };
        let old = |c: u64, x: u32| [c.to_ne_bytes().to_vec(), x.to_ne_bytes().to_vec(), vec![0; 4]].concat();
        let (then, now) = (old(10, 1), old(15, 2));
        let mut new = p.apply(&then);
        assert_eq!(new[8..16], 10u64.to_ne_bytes());
        // The new program counted 3 more meanwhile: kept, plus the old's 5.
        new[8..16].copy_from_slice(&13u64.to_ne_bytes());
        p.catch_up(&mut new, &then, &now);
        assert_eq!(u64::from_ne_bytes(new[8..16].try_into().unwrap()), 18);
        assert_eq!(new[..4], 2u32.to_ne_bytes());
    }
}
