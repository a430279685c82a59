//! Addresses to function names: kernel addresses from /proc/kallsyms,
//! user addresses through the process's /proc/PID/maps to a mapped file
//! and that ELF file's symbol tables (.symtab, else .dynsym).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The kernel's text symbols, sorted by address.
#[derive(Clone, Debug, Default)]
pub struct KernelSymbols {
    syms: Vec<(u64, String)>,
}

impl KernelSymbols {
    /// From /proc/kallsyms (readable with addresses as root, kptr_restrict < 2).
    pub fn load() -> Result<Self> {
        let text = std::fs::read_to_string("/proc/kallsyms").context("reading /proc/kallsyms")?;
        let k = Self::parse(&text);
        anyhow::ensure!(!k.syms.is_empty(), "/proc/kallsyms shows no addresses (kernel.kptr_restrict hides them): run as root");
        Ok(k)
    }

    /// Text symbols (t, T, w, W) of kallsyms-formatted `text`; a module's
    /// symbols keep their name (the module is the fourth column).
    pub fn parse(text: &str) -> Self {
        let mut syms: Vec<(u64, String)> = text
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let (addr, kind, name) = (f.next()?, f.next()?, f.next()?);
                let addr = u64::from_str_radix(addr, 16).ok().filter(|&a| a != 0)?;
                matches!(kind, "t" | "T" | "w" | "W").then(|| (addr, name.to_string()))
            })
            .collect();
        syms.sort_by_key(|s| s.0);
        Self { syms }
    }

    /// The function `addr` is in: the last symbol at or below it.
    pub fn resolve(&self, addr: u64) -> Option<&str> {
        let i = self.syms.partition_point(|s| s.0 <= addr);
        (i > 0).then(|| self.syms[i - 1].1.as_str())
    }
}

/// One mapped file's functions: (start, end, name) by virtual address, and
/// how its file offsets map to virtual addresses.
#[derive(Debug, Default)]
struct ElfSymbols {
    funcs: Vec<(u64, u64, String)>,
    /// (file offset, size, virtual address) of each loadable segment.
    segments: Vec<(u64, u64, u64)>,
}

impl ElfSymbols {
    fn load(path: &Path) -> Option<Self> {
        use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};
        let data = std::fs::read(path).ok()?;
        let file = object::File::parse(&*data).ok()?;
        let mut funcs: Vec<(u64, u64, String)> = file
            .symbols()
            .chain(file.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0)
            .filter_map(|s| Some((s.address(), s.address() + s.size(), demangle(s.name().ok()?))))
            .collect();
        funcs.sort_by_key(|f| f.0);
        funcs.dedup_by_key(|f| f.0);
        let segments = file.segments().filter_map(|s| s.file_range().1.gt(&0).then(|| (s.file_range().0, s.file_range().1, s.address()))).collect();
        Some(Self { funcs, segments })
    }

    fn resolve(&self, file_offset: u64) -> Option<&str> {
        let (off, _, vaddr) = self.segments.iter().find(|(o, n, _)| (*o..o + n).contains(&file_offset))?;
        let a = vaddr + (file_offset - off);
        let i = self.funcs.partition_point(|f| f.0 <= a);
        let f = self.funcs.get(i.checked_sub(1)?)?;
        (a < f.1).then_some(f.2.as_str())
    }
}

/// Rust names readable (hash suffix dropped); others as they are.
fn demangle(name: &str) -> String {
    format!("{:#}", rustc_demangle::demangle(name))
}

/// One mapping of /proc/PID/maps.
#[derive(Debug, Clone)]
struct Mapping {
    start: u64,
    end: u64,
    offset: u64,
    path: Option<PathBuf>,
}

fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (range, _perms, offset) = (f.next()?, f.next()?, f.next()?);
            let (_dev, _inode) = (f.next()?, f.next()?);
            let path = f.next().filter(|p| p.starts_with('/')).map(PathBuf::from);
            let (a, b) = range.split_once('-')?;
            Some(Mapping { start: u64::from_str_radix(a, 16).ok()?, end: u64::from_str_radix(b, 16).ok()?, offset: u64::from_str_radix(offset, 16).ok()?, path })
        })
        .collect()
}

/// User-space symbolisation, with each process's maps and each file's
/// symbols read once.
#[derive(Default)]
pub struct UserSymbols {
    maps: HashMap<u32, Vec<Mapping>>,
    files: HashMap<PathBuf, Option<ElfSymbols>>,
}

impl UserSymbols {
    /// `addr` in process `pid`: a function name, `file+0xOFF` when the file
    /// has no symbol there, `[unknown]` when the process or mapping is gone.
    pub fn resolve(&mut self, pid: u32, addr: u64) -> String {
        let maps = self.maps.entry(pid).or_insert_with(|| std::fs::read_to_string(format!("/proc/{pid}/maps")).map(|t| parse_maps(&t)).unwrap_or_default());
        let Some(m) = maps.iter().find(|m| (m.start..m.end).contains(&addr)).cloned() else { return "[unknown]".into() };
        let Some(path) = m.path else { return "[anon]".into() };
        let file_offset = addr - m.start + m.offset;
        // The file as the process sees it (its mount namespace).
        let seen = PathBuf::from(format!("/proc/{pid}/root")).join(path.strip_prefix("/").unwrap_or(&path));
        let syms = self.files.entry(path.clone()).or_insert_with(|| ElfSymbols::load(&seen).or_else(|| ElfSymbols::load(&path)));
        match syms.as_ref().and_then(|s| s.resolve(file_offset)) {
            Some(name) => name.to_string(),
            None => format!("{}+{file_offset:#x}", path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KALLSYMS: &str = "ffffffff81000000 T _stext\n\
ffffffff81000100 t helper\n\
ffffffff81000200 D some_data\n\
ffffffff81000300 T do_syscall_64\n\
ffffffffc0000000 t veth_poll\t[veth]\n\
0000000000000000 T hidden\n";

    #[test]
    fn kallsyms_resolve_at_between_and_after_symbols() {
        let k = KernelSymbols::parse(KALLSYMS);
        assert_eq!(k.resolve(0xffffffff81000000), Some("_stext"));
        assert_eq!(k.resolve(0xffffffff81000150), Some("helper"));
        // Data symbols are not functions: the text symbol before them holds.
        assert_eq!(k.resolve(0xffffffff81000250), Some("helper"));
        assert_eq!(k.resolve(0xffffffff81000301), Some("do_syscall_64"));
        assert_eq!(k.resolve(0xffffffffc0000010), Some("veth_poll"));
        assert_eq!(k.resolve(0x1000), None);
    }

    #[test]
    fn this_process_resolves_its_own_function() {
        let mut u = UserSymbols::default();
        let addr = this_process_resolves_its_own_function as *const () as u64;
        let name = u.resolve(std::process::id(), addr + 1);
        assert!(name.contains("this_process_resolves_its_own_function"), "{name}");
        assert_eq!(u.resolve(u32::MAX - 1, addr), "[unknown]");
    }

    #[test]
    fn maps_lines_parse() {
        let m = parse_maps("55d0c0000000-55d0c0001000 r-xp 00002000 08:01 1234 /usr/bin/x\n7ffd0000-7ffd1000 rw-p 00000000 00:00 0 [stack]\n");
        assert_eq!((m[0].start, m[0].offset, m[0].path.as_deref()), (0x55d0c0000000, 0x2000, Some(Path::new("/usr/bin/x"))));
        assert!(m[1].path.is_none());
    }
}
