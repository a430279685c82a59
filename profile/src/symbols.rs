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

/// Where Debian's `*-dbg` and `*-dbgsym` packages put the symbols of
/// stripped files, by build ID.
const DEBUG_DIR: &str = "/usr/lib/debug/.build-id";

impl ElfSymbols {
    /// The functions of the ELF file at `path`; a stripped file's (no
    /// .symtab: libc, most packaged libraries) come from its separate debug
    /// file when one is installed, else from .dynsym alone.
    fn load(path: &Path) -> Option<Self> {
        use object::{Object, ObjectSegment};
        let data = std::fs::read(path).ok()?;
        let file = object::File::parse(&*data).ok()?;
        let mut funcs = Vec::new();
        functions(&file, &mut funcs);
        if file.symbol_table().is_none() {
            if let Some(debug) = file.build_id().ok().flatten().filter(|id| id.len() > 1).map(debug_path) {
                if let Ok(d) = std::fs::read(debug) {
                    if let Ok(d) = object::File::parse(&*d) {
                        functions(&d, &mut funcs);
                    }
                }
            }
        }
        // One name per address: the best-ranked of its aliases.
        funcs.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
        funcs.dedup_by_key(|f| f.0);
        // The debug file's segments have no contents: offsets are the file's own.
        let segments = file.segments().filter_map(|s| s.file_range().1.gt(&0).then(|| (s.file_range().0, s.file_range().1, s.address()))).collect();
        Some(Self { funcs: funcs.into_iter().map(|(a, _, (end, name))| (a, end, name)).collect(), segments })
    }

    fn resolve(&self, file_offset: u64) -> Option<&str> {
        let (off, _, vaddr) = self.segments.iter().find(|(o, n, _)| (*o..o + n).contains(&file_offset))?;
        let a = vaddr + (file_offset - off);
        let i = self.funcs.partition_point(|f| f.0 <= a);
        let f = self.funcs.get(i.checked_sub(1)?)?;
        (a < f.1).then_some(f.2.as_str())
    }
}

/// How good a name is among the aliases at one address (lower is better):
/// exported before local, fewer leading underscores (`getppid` rather than
/// `__GI___getppid`).
type Rank = (bool, usize);

/// The sized function symbols of `file` (.symtab and .dynsym), demangled,
/// as (address, rank, (end, name)).
fn functions(file: &object::File, out: &mut Vec<(u64, Rank, (u64, String))>) {
    use object::{Object, ObjectSymbol, SymbolKind};
    for s in file.symbols().chain(file.dynamic_symbols()) {
        if s.kind() != SymbolKind::Text || s.size() == 0 {
            continue;
        }
        let Ok(name) = s.name() else { continue };
        let rank = (s.is_local(), name.len() - name.trim_start_matches('_').len());
        out.push((s.address(), rank, (s.address() + s.size(), demangle(name))));
    }
}

/// The separate debug file of build ID `id`.
fn debug_path(id: &[u8]) -> PathBuf {
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    PathBuf::from(format!("{DEBUG_DIR}/{}/{}.debug", &hex[..2], &hex[2..]))
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
    /// Device and inode: which file, whatever its path or mount namespace.
    file: (String, u64),
    path: Option<PathBuf>,
}

fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines()
        .filter_map(|l| {
            // Five fields one space apart, then padding and the path, which
            // may hold spaces and ends in " (deleted)" once unlinked.
            let mut f = l.splitn(6, ' ');
            let (range, _perms, offset, dev, inode) = (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
            let path = f.next().map(str::trim_start).filter(|p| p.starts_with('/')).map(|p| PathBuf::from(p.strip_suffix(" (deleted)").unwrap_or(p)));
            let (a, b) = range.split_once('-')?;
            Some(Mapping {
                start: u64::from_str_radix(a, 16).ok()?,
                end: u64::from_str_radix(b, 16).ok()?,
                offset: u64::from_str_radix(offset, 16).ok()?,
                file: (dev.to_string(), inode.parse().ok()?),
                path,
            })
        })
        .collect()
}

/// User-space symbolisation, with each process's maps and each file's
/// symbols read once.
#[derive(Default)]
pub struct UserSymbols {
    maps: HashMap<u32, Vec<Mapping>>,
    files: HashMap<(String, u64), Option<ElfSymbols>>,
}

impl UserSymbols {
    /// `addr` in process `pid`: a function name, `file+0xOFF` when the file
    /// has no symbol there, `[unknown]` when the process or mapping is gone,
    /// `[anon]` in memory no file backs (JIT code).
    pub fn resolve(&mut self, pid: u32, addr: u64) -> String {
        let maps = self.maps.entry(pid).or_insert_with(|| std::fs::read_to_string(format!("/proc/{pid}/maps")).map(|t| parse_maps(&t)).unwrap_or_default());
        let Some(m) = maps.iter().find(|m| (m.start..m.end).contains(&addr)).cloned() else { return "[unknown]".into() };
        let Some(path) = m.path else { return "[anon]".into() };
        let file_offset = addr - m.start + m.offset;
        let syms = self.files.entry(m.file).or_insert_with(|| {
            // The mapped file itself (even deleted, even in another mount
            // namespace), else the path as the process sees it, else as we do.
            let mapped = PathBuf::from(format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end));
            let seen = PathBuf::from(format!("/proc/{pid}/root")).join(path.strip_prefix("/").unwrap_or(&path));
            ElfSymbols::load(&mapped).or_else(|| ElfSymbols::load(&seen)).or_else(|| ElfSymbols::load(&path))
        });
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
        // kallsyms has no sizes: past the last symbol is still the last one.
        assert_eq!(k.resolve(0xffffffffc0001000), Some("veth_poll"));
        assert_eq!(k.resolve(0x1000), None, "below the first symbol");
        assert_eq!(k.resolve(0xffffffff80ffffff), None);
        assert_eq!(KernelSymbols::parse("").resolve(0xffffffff81000000), None);
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
        let m = parse_maps(
            "55d0c0000000-55d0c0001000 r-xp 00002000 08:01 1234                       /usr/bin/x\n\
             7ffd0000-7ffd1000 rw-p 00000000 00:00 0                          [stack]\n\
             7f0000000000-7f0000001000 r-xp 0000a000 00:01 1024                       /memfd:a b (deleted)\n\
             7f0000002000-7f0000003000 rw-p 00000000 00:00 0 \n",
        );
        assert_eq!(m.len(), 4);
        assert_eq!((m[0].start, m[0].end, m[0].offset, m[0].path.as_deref()), (0x55d0c0000000, 0x55d0c0001000, 0x2000, Some(Path::new("/usr/bin/x"))));
        assert_eq!(m[0].file, ("08:01".to_string(), 1234));
        assert!(m[1].path.is_none() && m[3].path.is_none(), "[stack] and anonymous memory are no files");
        assert_eq!(m[2].path.as_deref(), Some(Path::new("/memfd:a b")), "spaces kept, (deleted) dropped");
    }

    /// The address of an exported libc function in this process.
    fn libc_fn(name: &std::ffi::CStr) -> u64 {
        // SAFETY: a NUL-terminated name; RTLD_DEFAULT searches the loaded objects.
        let a = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
        assert!(!a.is_null(), "{name:?} not found");
        a as u64
    }

    #[test]
    fn a_libc_function_has_its_plain_name_among_aliases() {
        // libc's debug file names getppid four times (__GI_getppid,
        // __getppid, __GI___getppid, getppid): the exported one wins.
        let mut u = UserSymbols::default();
        assert_eq!(u.resolve(std::process::id(), libc_fn(c"getppid") + 2), "getppid");
        assert_eq!(u.resolve(std::process::id(), libc_fn(c"getpid")), "getpid");
    }

    #[test]
    fn a_stripped_library_gets_its_local_functions_from_the_debug_file() {
        use object::Object;
        let maps = parse_maps(&std::fs::read_to_string("/proc/self/maps").unwrap());
        let libc = maps
            .iter()
            .filter_map(|m| m.path.clone())
            .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("libc.so")))
            .expect("libc mapped");
        let data = std::fs::read(&libc).unwrap();
        let file = object::File::parse(&*data).unwrap();
        assert!(file.symbol_table().is_none(), "{} is not stripped: this test wants a stripped libc", libc.display());
        let debug = debug_path(file.build_id().unwrap().expect("libc has a build ID"));
        let syms = ElfSymbols::load(&libc).unwrap();
        // start_thread is local: only the debug file (libc6-dbg) names it.
        let local = syms.funcs.iter().any(|f| f.2 == "start_thread");
        assert_eq!(local, debug.exists(), "start_thread named: {local}, {} exists: {}", debug.display(), debug.exists());
        assert!(syms.funcs.iter().any(|f| f.2 == "getppid"), ".dynsym read either way");
        assert!(syms.funcs.windows(2).all(|w| w[0].0 < w[1].0), "one name per address, sorted");
    }
}
