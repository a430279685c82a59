//! Where xnf keeps the state that outlives its process: pins under
//! `/sys/fs/bpf/xnf/net-<inode>/` (one folder per network namespace, since
//! bpffs is shared by all of them) and run files under `/run/xnf/`.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

const BPFFS: &str = "/sys/fs/bpf";
const BPF_FS_MAGIC: i64 = 0xcafe4a11;

/// Identifies the current network namespace: the inode of its nsfs file.
pub fn netns_key() -> Result<String> {
    let ino = std::fs::metadata("/proc/self/ns/net").context("reading /proc/self/ns/net")?.ino();
    Ok(format!("net-{ino}"))
}

fn is_bpffs(path: &str) -> bool {
    nix::sys::statfs::statfs(path).map(|s| s.filesystem_type().0 == BPF_FS_MAGIC).unwrap_or(false)
}

/// False only when we can tell that this mount namespace is not PID 1's
/// (as under `ip netns exec`); in a sandbox that hides PID 1's, assume it is.
fn same_mount_ns_as_init() -> bool {
    let ino = |p: &str| std::fs::metadata(p).map(|m| m.ino()).ok();
    match (ino("/proc/self/ns/mnt"), ino("/proc/1/ns/mnt")) {
        (Some(me), Some(init)) => me == init,
        _ => true,
    }
}

/// Makes sure bpffs is mounted at /sys/fs/bpf, mounting it if needed, and
/// clears pins left by network namespaces that are gone.
pub fn ensure_bpffs() -> Result<()> {
    if is_bpffs(BPFFS) {
        for dir in gc_dead_namespaces() {
            eprintln!("xnf: removed pins of a deleted network namespace: {}", dir.display());
        }
        return Ok(());
    }
    if !same_mount_ns_as_init() {
        bail!(
            "bpffs is not mounted at {BPFFS} in this mount namespace (`ip netns exec` remounts /sys): \
             pins made here would vanish with it. Run `xnf --netns NAME ...` from the host instead"
        );
    }
    std::fs::create_dir_all(BPFFS).with_context(|| format!("creating {BPFFS}"))?;
    nix::mount::mount(Some("bpf"), BPFFS, Some("bpf"), nix::mount::MsFlags::empty(), None::<&str>)
        .with_context(|| format!("mounting bpffs at {BPFFS} (are you root?)"))?;
    Ok(())
}

/// Pin folder of network function `nf` in this namespace (not created).
pub fn pin_dir(nf: &str) -> Result<PathBuf> {
    Ok(Path::new(BPFFS).join("xnf").join(netns_key()?).join(nf))
}

/// Run-file folder of this namespace, created on demand.
pub fn run_dir() -> Result<PathBuf> {
    let dir = Path::new("/run/xnf").join(netns_key()?);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// Removes `dir` and then its parents up to /sys/fs/bpf/xnf while empty.
pub fn remove_empty_dirs(dir: &Path) {
    let stop = Path::new(BPFFS);
    let mut d = Some(dir);
    while let Some(p) = d {
        if p == stop || std::fs::remove_dir(p).is_err() {
            break;
        }
        d = p.parent();
    }
}

/// Inodes of every network namespace still alive: named ones under
/// /run/netns and those of running processes.
fn live_netns_inodes() -> std::collections::HashSet<u64> {
    let mut live = std::collections::HashSet::new();
    let mut add = |p: PathBuf| {
        if let Ok(m) = std::fs::metadata(p) {
            live.insert(m.ino());
        }
    };
    if let Ok(rd) = std::fs::read_dir("/run/netns") {
        rd.flatten().for_each(|e| add(e.path()));
    }
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
                add(e.path().join("ns/net"));
            }
        }
    }
    live
}

/// Removes the pin folders of network namespaces that no longer exist
/// (deleted while something was attached): their links are defunct and
/// their maps unused. Returns the folders removed.
pub fn gc_dead_namespaces() -> Vec<PathBuf> {
    let root = Path::new(BPFFS).join("xnf");
    let Ok(rd) = std::fs::read_dir(&root) else { return Vec::new() };
    let live = live_netns_inodes();
    let mut removed = Vec::new();
    for dir in rd.flatten().map(|e| e.path()) {
        let ino = dir.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_prefix("net-")).and_then(|n| n.parse::<u64>().ok());
        if ino.is_none_or(|i| live.contains(&i)) {
            continue;
        }
        if std::fs::remove_dir_all(&dir).is_ok() {
            removed.push(dir);
        }
    }
    removed
}
