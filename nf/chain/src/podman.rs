//! A private podman: containers started by Debian's podman (CNI backend,
//! runc) with their configuration, storage, CNI networks and a busybox
//! image under one temporary folder, so the host's containers, networks and
//! global configuration are never touched. The podman tests, `xnf lab
//! chain`'s container variants and `make demo-containers` use it.
//!
//! Podman runs in a network namespace given by path (setns between fork
//! and exec), as a runtime on that host would: its CNI plugins — the real
//! `ptp` or `bridge`, then `xnf-cni` — run there. The mount namespace stays
//! the caller's (`ip netns exec` would hide the host's cgroups, where
//! podman must make the container's).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

use anyhow::{bail, ensure, Context, Result};
use serde_json::{json, Value};

/// Where Debian's containernetworking-plugins installs ptp, bridge, host-local.
pub const CNI_PLUGINS: &str = "/usr/lib/cni";

/// The image every container runs: busybox-static and its applets.
pub const IMAGE: &str = "localhost/xnf-busybox";

/// What a private podman needs, and the Debian package that has it.
const NEEDS: [(&str, &str); 4] =
    [("podman", "/usr/bin/podman"), ("runc", "/usr/bin/runc"), ("busybox-static", "/bin/busybox"), ("containernetworking-plugins", "/usr/lib/cni/ptp")];

/// A podman of its own; every container it started is removed on drop
/// (which runs each one's CNI DEL), then its folder.
pub struct Podman {
    dir: PathBuf,
    host: PathBuf,
}

impl Podman {
    /// Podman in the network namespace at `host`, its root in a new
    /// temporary folder named after `tag`, `xnf_cni` in its plugin path
    /// ahead of Debian's plugins; imports the busybox image.
    pub fn new(host: &Path, tag: &str, xnf_cni: &Path) -> Result<Podman> {
        for (package, path) in NEEDS {
            ensure!(Path::new(path).exists(), "{path} is missing: install {package} (scripts/deps.sh does)");
        }
        let dir = std::env::temp_dir().join(format!("{ROOT_PREFIX}{tag}-{}", std::process::id()));
        let pm = Podman { dir, host: host.to_path_buf() };
        LIVE.lock().unwrap_or_else(|e| e.into_inner()).push((pm.dir.clone(), pm.host.clone()));
        for sub in ["bin", "net.d", "ipam", "img/bin"] {
            std::fs::create_dir_all(pm.dir.join(sub)).with_context(|| format!("creating {}", pm.dir.join(sub).display()))?;
        }
        std::os::unix::fs::symlink(xnf_cni, pm.dir.join("bin/xnf-cni")).context("linking xnf-cni into podman's plugin folder")?;
        let d = pm.dir.display();
        // The CNI backend explicitly (Debian's podman 4.3 prefers netavark when
        // it is installed); runc, which works with cgroup v1, v2 and hybrid
        // hierarchies (crun refuses hybrid ones); limits no higher than this
        // process's (without CAP_SYS_RESOURCE podman's defaults are refused).
        let (nofile, nproc) = (hard_limit(libc::RLIMIT_NOFILE)?, hard_limit(libc::RLIMIT_NPROC)?.min(32768));
        pm.write(
            "containers.conf",
            &format!(
                "[containers]\ndefault_ulimits = [\"nofile={nofile}:{nofile}\", \"nproc={nproc}:{nproc}\"]\n\
                 [network]\nnetwork_backend = \"cni\"\ncni_plugin_dirs = [\"{d}/bin\", \"{CNI_PLUGINS}\"]\n\
                 network_config_dir = \"{d}/net.d\"\ndefault_network = \"xnfdefault\"\n\
                 [engine]\nruntime = \"runc\"\ncgroup_manager = \"cgroupfs\"\nevents_logger = \"file\"\n\
                 events_logfile_path = \"{d}/events.log\"\ntmp_dir = \"{d}/tmp\"\n"
            ),
        )?;
        pm.write("storage.conf", &format!("[storage]\ndriver = \"vfs\"\ngraphroot = \"{d}/root\"\nrunroot = \"{d}/runroot\"\n"))?;
        pm.import_busybox()?;
        let backend = pm.ok(&["info", "--format", "{{.Host.NetworkBackend}}"])?;
        ensure!(backend.trim() == "cni", "podman took the {} network backend, not cni: xnf-cni needs the CNI backend", backend.trim());
        Ok(pm)
    }

    fn write(&self, name: &str, text: &str) -> Result<()> {
        std::fs::write(self.dir.join(name), text).with_context(|| format!("writing {}", self.dir.join(name).display()))
    }

    /// An image with nothing but busybox-static and its applets, imported
    /// from a tarball: no registry, no network.
    fn import_busybox(&self) -> Result<()> {
        let img = self.dir.join("img");
        std::fs::copy("/bin/busybox", img.join("bin/busybox")).context("copying /bin/busybox into the image")?;
        for applet in ["sh", "sleep", "ip", "cat", "sysctl"] {
            std::os::unix::fs::symlink("busybox", img.join("bin").join(applet))?;
        }
        let tar = self.dir.join("busybox.tar");
        let st = Command::new("tar").arg("-C").arg(&img).arg("-cf").arg(&tar).arg(".").status().context("running tar")?;
        ensure!(st.success(), "tar of the busybox image failed");
        self.ok(&["import", "--quiet", &tar.display().to_string(), IMAGE]).map(drop)
    }

    /// The environment that makes podman (and `xnf nf create --container`,
    /// which asks podman) use this private root.
    pub fn env(&self) -> [(&'static str, String); 2] {
        [("CONTAINERS_CONF", self.path("containers.conf")), ("CONTAINERS_STORAGE_CONF", self.path("storage.conf"))]
    }

    /// `name` in the private folder.
    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// The plugin folders, as a runtime gives them in CNI_PATH.
    pub fn cni_path(&self) -> String {
        format!("{}:{CNI_PLUGINS}", self.path("bin"))
    }

    /// Runs podman with `args` in the host namespace; refused once an
    /// interrupt is removing this process's roots ([`remove_live`]).
    pub fn run(&self, args: &[&str]) -> Result<Output> {
        let closed = COMMANDS.lock().unwrap_or_else(|e| e.into_inner());
        ensure!(!*closed, "interrupted: this process's podman roots are being removed");
        let mut c = Command::new("podman");
        c.args(args).envs(self.env());
        in_netns(&mut c, &self.host)?;
        c.output().context("running podman")
    }

    /// Runs podman; its stdout, or an error with its stderr.
    pub fn ok(&self, args: &[&str]) -> Result<String> {
        let out = self.run(args)?;
        if !out.status.success() {
            bail!("podman {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(String::from_utf8_lossy(&out.stdout).to_string())
    }

    /// A CNI network: `main` (the real plugin's config) with `xnf-cni`
    /// after it when `chained` (NFs that forward with the container's stack).
    pub fn network(&self, name: &str, main: Value, chained: bool) -> Result<()> {
        let mut plugins = vec![main];
        if chained {
            plugins.push(json!({"type": "xnf-cni", "function": "pass", "forward": true}));
        }
        let conf = json!({"cniVersion": "1.0.0", "name": name, "plugins": plugins});
        self.write(&format!("net.d/{name}.conflist"), &conf.to_string())
    }

    /// host-local addresses from `subnet`, its state in this folder.
    pub fn ipam(&self, subnet: &str) -> Value {
        json!({"type": "host-local", "subnet": subnet, "dataDir": self.path("ipam"), "routes": [{"dst": "0.0.0.0/0"}]})
    }

    /// Starts a busybox container `name` on `network` ("none": a network
    /// namespace with only loopback).
    pub fn start(&self, name: &str, network: &str) -> Result<()> {
        self.ok(&["run", "-d", "--name", name, "--network", network, IMAGE, "sleep", "3600"]).map(drop)
    }

    /// `podman inspect --format FORMAT name`, trimmed.
    pub fn inspect(&self, name: &str, format: &str) -> Result<String> {
        Ok(self.ok(&["inspect", "--format", format, name])?.trim().to_string())
    }

    /// IPv4 datagrams the container's kernel forwarded (`Ip ForwDatagrams`).
    pub fn forwarded(&self, name: &str) -> Result<u64> {
        self.snmp(name, "Ip", "ForwDatagrams")
    }

    /// Counter `key` of group `group` (`Ip`, `Icmp`, ...) of the
    /// container's /proc/net/snmp.
    pub fn snmp(&self, name: &str, group: &str, key: &str) -> Result<u64> {
        let pid = self.inspect(name, "{{.State.Pid}}")?;
        let snmp = std::fs::read_to_string(format!("/proc/{pid}/net/snmp")).with_context(|| format!("reading container {name}'s /proc/{pid}/net/snmp"))?;
        let prefix = format!("{group}:");
        let mut lines = snmp.lines().filter(|l| l.starts_with(&prefix));
        let (h, v) = lines.next().zip(lines.next()).with_context(|| format!("no {group} lines in net/snmp"))?;
        let i = h.split_whitespace().position(|k| k == key).with_context(|| format!("no {group} {key} in net/snmp"))?;
        v.split_whitespace()
            .nth(i)
            .with_context(|| format!("short {group} line in net/snmp"))?
            .parse()
            .with_context(|| format!("{group} {key} is not a number"))
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        LIVE.lock().unwrap_or_else(|e| e.into_inner()).retain(|(d, _)| d != &self.dir);
        remove_root(&self.dir, &self.host);
    }
}

/// Private roots are temporary folders `xnf-podman-TAG-PID`.
const ROOT_PREFIX: &str = "xnf-podman-";

/// The private roots of this process and the namespace each podman runs in.
static LIVE: Mutex<Vec<(PathBuf, PathBuf)>> = Mutex::new(Vec::new());

/// Removes every container of the root at `dir` (their CNI DEL run in the
/// namespace at `host`; for a stale root, a scratch namespace of the
/// caller's, since theirs is gone), then the folder.
pub fn remove_root(dir: &Path, host: &Path) {
    let mut c = Command::new("podman");
    c.args(["rm", "--all", "--force", "--time", "0"]);
    c.env("CONTAINERS_CONF", dir.join("containers.conf")).env("CONTAINERS_STORAGE_CONF", dir.join("storage.conf"));
    if in_netns(&mut c, host).is_ok() {
        let _ = c.output();
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Held while a podman command of this process runs; true once an
/// interrupt closed it for good.
static COMMANDS: Mutex<bool> = Mutex::new(false);

/// Removes the containers and roots of every private podman of this
/// process: for an interrupt handler, before it deletes the namespaces
/// they run in (the containers' own namespaces would outlive them). It
/// first waits for a podman command another thread runs and refuses the
/// next ones: one still running would make its root again (its storage's
/// lock files) after the removal, and the root would be left.
pub fn remove_live() {
    *COMMANDS.lock().unwrap_or_else(|e| e.into_inner()) = true;
    let all = std::mem::take(&mut *LIVE.lock().unwrap_or_else(|e| e.into_inner()));
    for (dir, host) in all {
        remove_root(&dir, &host);
    }
}

/// The private roots whose process is gone (killed with -9).
pub fn stale_roots() -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(std::env::temp_dir()) else { return Vec::new() };
    rd.flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let pid = name.strip_prefix(ROOT_PREFIX).and_then(|r| r.rsplit('-').next()).and_then(|p| p.parse::<u32>().ok());
            pid.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists())
        })
        .map(|e| e.path())
        .collect()
}

/// Makes `c` start in the network namespace at `netns` (setns between
/// fork and exec, as a runtime running in that namespace starts its
/// plugins); the mount namespace stays the caller's.
pub fn in_netns(c: &mut Command, netns: &Path) -> Result<()> {
    let ns = std::fs::File::open(netns).with_context(|| format!("opening network namespace {}", netns.display()))?;
    // SAFETY: only setns(2) between fork and exec, on an fd opened before.
    unsafe {
        c.pre_exec(move || nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).map_err(std::io::Error::from));
    }
    Ok(())
}

fn hard_limit(resource: libc::__rlimit_resource_t) -> Result<u64> {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit fills the struct it is given.
    ensure!(unsafe { libc::getrlimit(resource, &mut r) } == 0, "getrlimit: {}", std::io::Error::last_os_error());
    Ok(r.rlim_max)
}
