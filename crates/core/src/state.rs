//! Where xnf keeps the state that outlives its process: pins under
//! `/sys/fs/bpf/xnf/net-<inode>/` (one folder per network namespace, since
//! bpffs is shared by all of them) and run files under `/run/xnf/`, and the
//! one lock every control plane takes before it changes that state.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

const BPFFS: &str = "/sys/fs/bpf";
const BPF_FS_MAGIC: i64 = 0xcafe4a11;

/// Identifies the current network namespace: the inode of its nsfs file.
pub fn netns_key() -> Result<String> {
    let ino = std::fs::metadata("/proc/thread-self/ns/net").context("reading /proc/thread-self/ns/net")?.ino();
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

/// `SO_NETNS_COOKIE` (Linux 5.14): a 64-bit ID of the network namespace
/// that, unlike its inode number, is never reused.
fn netns_cookie() -> Option<u64> {
    const SO_NETNS_COOKIE: libc::c_int = 71;
    // SAFETY: plain socket/getsockopt/close with valid buffers.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0);
        if fd < 0 {
            return None;
        }
        let mut v = 0u64;
        let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
        let rc = libc::getsockopt(fd, libc::SOL_SOCKET, SO_NETNS_COOKIE, (&mut v as *mut u64).cast(), &mut len);
        libc::close(fd);
        (rc == 0).then_some(v)
    }
}

/// A namespace's inode number is reused once it is gone, so state keyed by
/// it may belong to a dead namespace that nothing cleaned up. The run
/// folder records the namespace cookie; when it differs, the pins and run
/// files are a dead namespace's and are removed before anyone trusts them.
fn forget_if_stale() -> Result<()> {
    let Some(cookie) = netns_cookie() else { return Ok(()) };
    let key = netns_key()?;
    let run = Path::new("/run/xnf").join(&key);
    let marker = run.join("netns-cookie");
    if std::fs::read_to_string(&marker).is_ok_and(|s| s.trim() == cookie.to_string()) {
        return Ok(());
    }
    // Stale or missing: decided again under a lock on /run/xnf itself (the
    // namespace's own lock lives in the folder that may be removed). Why:
    // commands started together in a new namespace all read the dead one's
    // marker; without it, one that decided late would remove the state —
    // the very folder, pins made since — of one that had already renewed it.
    let _lock = RunLock::acquire()?;
    match std::fs::read_to_string(&marker) {
        Ok(s) if s.trim() == cookie.to_string() => return Ok(()),
        Ok(_) => {
            let pins = Path::new(BPFFS).join("xnf").join(&key);
            let _ = std::fs::remove_dir_all(&pins);
            let _ = std::fs::remove_dir_all(&run);
            eprintln!("xnf: removed state of a deleted network namespace whose inode this one reuses");
        }
        Err(_) => {}
    }
    std::fs::create_dir_all(&run).with_context(|| format!("creating {}", run.display()))?;
    // Written whole under another name, then renamed: a concurrent command
    // never reads a half-written marker (an empty one would look stale and
    // make it remove this namespace's live state).
    let tmp = run.join(format!(".netns-cookie.{}.{:?}", std::process::id(), std::thread::current().id()));
    std::fs::write(&tmp, cookie.to_string()).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &marker).with_context(|| format!("writing {}", marker.display()))
}

/// flock on /run/xnf, for the brief check of [`forget_if_stale`].
struct RunLock {
    _dir: std::fs::File,
}

impl RunLock {
    fn acquire() -> Result<RunLock> {
        use std::os::fd::AsRawFd;
        std::fs::create_dir_all("/run/xnf").context("creating /run/xnf")?;
        let dir = std::fs::File::open("/run/xnf").context("opening /run/xnf")?;
        // SAFETY: flock on a valid fd.
        if unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error()).context("locking /run/xnf");
        }
        Ok(RunLock { _dir: dir })
    }
}

/// The parent of process `pid` (from /proc/PID/stat), if readable.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

/// Joins the mount namespace of the nearest ancestor process that is in
/// another one, when this process's hides bpffs. `ip netns exec` unshares
/// the mount namespace and remounts /sys for the target network namespace,
/// so /sys/fs/bpf there is an empty sysfs folder: pins made in it vanish
/// with the command, and the pins of every other xnf command are invisible.
/// The shell that ran `ip netns exec` is in the host's mount namespace;
/// joining it (the network namespace stays the same) makes every command
/// behave as it does from the host or with `xnf --netns`. xnf touches /sys
/// only through its own private mounts, so the host's /sys does no harm.
///
/// Must run before the process starts any thread (setns of a mount
/// namespace refuses a process whose threads share its filesystem).
pub fn join_host_mount_ns() -> Result<()> {
    if is_bpffs(BPFFS) {
        return Ok(());
    }
    let ino = |pid: u32| std::fs::metadata(format!("/proc/{pid}/ns/mnt")).map(|m| m.ino()).ok();
    let Some(mine) = ino(std::process::id()) else { return Ok(()) };
    // The nearest ancestor in another mount namespace (one whose namespace
    // cannot be read, like a sandbox's init, is passed over).
    let mut pid = std::process::id();
    let host = loop {
        let Some(parent) = parent_of(pid).filter(|p| *p > 0) else { return Ok(()) };
        pid = parent;
        if ino(pid).is_some_and(|ns| ns != mine) {
            break pid;
        }
        if pid == 1 {
            return Ok(());
        }
    };
    let cwd = std::fs::File::open(".").ok();
    let ns = std::fs::File::open(format!("/proc/{host}/ns/mnt")).with_context(|| format!("opening the mount namespace of process {host}"))?;
    nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNS).with_context(|| {
        format!(
            "bpffs is hidden in this mount namespace (`ip netns exec` remounts /sys) and joining the host's (of process {host}) \
             failed: run `xnf --netns NAME ...` from the host instead"
        )
    })?;
    // setns moved the working directory to the namespace's root; relative
    // paths on the command line mean the one the user was in.
    if let Some(dir) = cwd {
        nix::unistd::fchdir(&dir).context("returning to the working directory")?;
    }
    Ok(())
}

/// Makes sure bpffs is mounted at /sys/fs/bpf, mounting it if needed, and
/// clears pins left by network namespaces that are gone.
pub fn ensure_bpffs() -> Result<()> {
    forget_if_stale()?;
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
    forget_if_stale()?;
    let dir = Path::new("/run/xnf").join(netns_key()?);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// A run file of `dir` (`run_dir()` joined with a network function's
/// name), read as JSON; `None` if it is not there.
pub fn read_json<T: for<'de> serde::Deserialize<'de>>(dir: &Path, name: &str) -> Result<Option<T>> {
    let path = dir.join(name);
    match std::fs::read_to_string(&path) {
        Ok(s) => Ok(Some(serde_json::from_str(&s).with_context(|| format!("reading {}", path.display()))?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Writes a run file of `dir` as JSON: under another name, then renamed,
/// so that a reader (or a kill -9) never meets half a file.
pub fn write_json<T: serde::Serialize>(dir: &Path, name: &str, v: &T) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let tmp = dir.join(format!(".{name}.{}", std::process::id()));
    std::fs::write(&tmp, serde_json::to_vec_pretty(v)?).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, dir.join(name)).with_context(|| format!("writing {}", dir.join(name).display()))
}

/// Which build each interface's program is, per ifindex: the program id
/// in its slot or link and the build it was loaded from (for upgrades).
pub type Builds = std::collections::BTreeMap<u32, (u32, String)>;

/// Reads run file `name` of `dir` (or the default when it is absent or
/// unreadable: a record to rebuild, not to trust), changes it with `f` and
/// writes it back whole.
pub fn update_json<T>(dir: &Path, name: &str, f: impl FnOnce(&mut T)) -> Result<()>
where
    T: Default + serde::Serialize + for<'de> serde::Deserialize<'de>,
{
    let mut v: T = read_json(dir, name).ok().flatten().unwrap_or_default();
    f(&mut v);
    write_json(dir, name, &v)
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

/// The `net-<inode>` folders under `root` and their inodes.
fn netns_folders(root: &Path) -> Vec<(PathBuf, u64)> {
    let Ok(rd) = std::fs::read_dir(root) else { return Vec::new() };
    rd.flatten()
        .map(|e| e.path())
        .filter_map(|dir| {
            let ino = dir.file_name()?.to_str()?.strip_prefix("net-")?.parse().ok()?;
            Some((dir, ino))
        })
        .collect()
}

/// Removes the pin folders of network namespaces that no longer exist
/// (deleted while something was attached): their links are defunct and
/// their maps unused. Returns the folders removed.
///
/// The folders are listed before the live namespaces are: a folder is
/// made by a command running in its namespace, so one listed whose
/// namespace is not alive afterwards is a dead one's (listed after, a
/// folder made by a namespace born since the snapshot would look dead:
/// another command's state removed as it is made). And all of it under
/// the lock [`forget_if_stale`] takes, so a new namespace reusing a dead
/// one's inode cannot renew that folder between the two.
pub fn gc_dead_namespaces() -> Vec<PathBuf> {
    let Ok(_lock) = RunLock::acquire() else { return Vec::new() };
    let runs = netns_folders(Path::new("/run/xnf"));
    let pins = netns_folders(&Path::new(BPFFS).join("xnf"));
    let live = live_netns_inodes();
    // Run files of dead namespaces (registries, locks) go quietly.
    for (dir, ino) in &runs {
        if !live.contains(ino) {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    let mut removed = Vec::new();
    for (dir, ino) in pins {
        if !live.contains(&ino) && std::fs::remove_dir_all(&dir).is_ok() {
            removed.push(dir);
        }
    }
    removed
}

/// An exclusive lock on one network function's state in this network
/// namespace (`/run/xnf/net-<inode>/<name>.lock`, flock): every command,
/// process or thread that changes that state holds it, so two concurrent
/// commands (two `attach`es, a CNI runtime starting pods in parallel, a
/// follower resyncing) see each other's changes instead of racing. Held
/// until dropped; the kernel releases it if the process dies.
///
/// flock belongs to the open file: a second `acquire` of the same name
/// in the same process waits like any other, so never nest them.
pub struct StateLock {
    _file: std::fs::File,
}

impl StateLock {
    /// Waits for the lock.
    pub fn acquire(name: &str) -> Result<StateLock> {
        Self::lock(name, true).map(|l| l.expect("a blocking flock returns holding the lock"))
    }

    /// The lock if nobody holds it, else None.
    pub fn try_acquire(name: &str) -> Result<Option<StateLock>> {
        Self::lock(name, false)
    }

    fn lock(name: &str, wait: bool) -> Result<Option<StateLock>> {
        use std::os::fd::AsRawFd;
        let path = run_dir()?.join(format!("{name}.lock"));
        let file = std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        let op = if wait { libc::LOCK_EX } else { libc::LOCK_EX | libc::LOCK_NB };
        // SAFETY: flock on a valid fd.
        if unsafe { libc::flock(file.as_raw_fd(), op) } != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                return Ok(None);
            }
            return Err(e).with_context(|| format!("locking {}", path.display()));
        }
        Ok(Some(StateLock { _file: file }))
    }
}
