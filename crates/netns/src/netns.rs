//! The [`Netns`] guard, the registry of live namespaces, and stale cleanup.

use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use anyhow::{bail, Context, Result};
use nix::sched::CloneFlags;

use crate::addr::{check_ifname, Mac};
use crate::cmd;
use crate::config::Batch;
use crate::ethtool::{self, Offload};
use crate::netlink;
use crate::stats::{parse_dev, parse_dev_all, LinkStats, Snmp};

/// Prefix of every namespace this crate creates: `xnf-<pid>-<counter>-<role>`.
pub const NS_PREFIX: &str = "xnf-";
/// Where iproute2 keeps named namespaces.
pub const NETNS_DIR: &str = "/run/netns";

static NEXT_NS: AtomicU32 = AtomicU32::new(0);
/// Names of the namespaces this process created and has not removed yet.
static LIVE: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
/// Serialises `ip netns add`: the first one mounts /run/netns, and two racing
/// mounts would stack and hide each other's namespaces.
static ADD_LOCK: Mutex<()> = Mutex::new(());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A network namespace named `xnf-<pid>-<counter>-<role>`, deleted on drop
/// (which also destroys every interface inside it, e.g. veth pairs).
///
/// Configuration goes through netlink inside the namespace (the typed
/// helpers below, [`Netns::batch`], routes); code runs inside it with
/// [`Netns::run`], programs with [`Netns::exec`] / [`Netns::command`].
/// Only creating and deleting it runs `ip netns`.
#[derive(Debug)]
pub struct Netns {
    name: String,
    role: String,
    /// Its counter files, opened inside it on first use.
    counters: OnceLock<Mutex<CounterFiles>>,
}

/// A namespace's counter files under /proc/net, opened once from inside
/// it. A /proc/net file stays bound to the namespace it was opened in, so
/// it is read again (seek to 0, read) from any thread in microseconds;
/// entering the namespace costs a fresh thread, which a loaded machine may
/// leave waiting for tens of milliseconds, and readings of several
/// namespaces meant to be taken together then were not (under a flood a
/// lab test saw gen's interval 13 % longer than dut's).
#[derive(Debug)]
struct CounterFiles {
    dev: File,
    snmp: File,
    /// None without IPv6.
    snmp6: Option<File>,
    netstat: File,
}

impl CounterFiles {
    fn open() -> std::io::Result<CounterFiles> {
        let open = |f: &str| File::open(format!("/proc/thread-self/net/{f}"));
        Ok(CounterFiles { dev: open("dev")?, snmp: open("snmp")?, snmp6: open("snmp6").ok(), netstat: open("netstat")? })
    }
}

/// The whole of a /proc file opened earlier, as it reads now.
fn read_again(mut f: &File) -> std::io::Result<String> {
    use std::io::{Read, Seek};
    f.seek(std::io::SeekFrom::Start(0))?;
    let mut text = String::new();
    f.read_to_string(&mut text)?;
    Ok(text)
}

impl Netns {
    /// Creates a fresh namespace and brings its `lo` up. IPv6 duplicate
    /// address detection is off in it (`accept_dad=0` for all and default),
    /// so addresses, link-local ones included, are usable at once.
    ///
    /// `role` (e.g. "dut") ends the name; characters other than ASCII letters,
    /// digits, `-` and `_` become `_`, and it is cut to 32 characters.
    pub fn new(role: &str) -> Result<Netns> {
        let role: String = role.chars().take(32).map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
        let n = NEXT_NS.fetch_add(1, Ordering::Relaxed);
        let name = format!("{NS_PREFIX}{}-{n}-{role}", std::process::id());
        {
            let _serial = lock(&ADD_LOCK);
            cmd::run(Command::new("ip").args(["netns", "add", &name]), None).context("creating a network namespace (needs root and iproute2)")?;
        }
        lock(&LIVE).insert(name.clone());
        // From here on the guard owns the namespace, even if `lo` fails.
        let ns = Netns { name, role, counters: OnceLock::new() };
        ns.link_up("lo")?;
        ns.sysctl_set("net.ipv6.conf.default.accept_dad", "0")?;
        ns.sysctl_set("net.ipv6.conf.all.accept_dad", "0")?;
        Ok(ns)
    }

    /// The namespace name, e.g. `xnf-4242-0-dut`, as used by `ip -n` / `ip netns exec`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The role given to [`Netns::new`] (after sanitising).
    pub fn role(&self) -> &str {
        &self.role
    }

    /// The bind mount that keeps the namespace alive: `/run/netns/NAME`.
    pub fn path(&self) -> PathBuf {
        Path::new(NETNS_DIR).join(&self.name)
    }

    /// Deletes the namespace now and reports failure (drop only logs it).
    pub fn delete(self) -> Result<()> {
        // Taking the name out of the registry makes the following drop a no-op.
        lock(&LIVE).remove(&self.name);
        delete_ns(&self.name)
    }

    /// Runs `f` on a fresh OS thread that has joined this namespace and
    /// returns its result. Sockets made inside stay in this namespace even
    /// after they are returned. A panic in `f` is resumed in the caller.
    ///
    /// Inside, use `/proc/thread-self/net/...` (plain `/proc/net` follows the
    /// main thread); `/proc/sys/net/...` already shows this namespace.
    pub fn run<F, R>(&self, f: F) -> Result<R>
    where
        F: FnOnce() -> R + Send,
        R: Send,
    {
        run_in(&self.path(), f).with_context(|| format!("running in namespace {}", self.name))
    }

    /// Binds a socket in the namespace with `bind` (say `move ||
    /// UdpSocket::bind(addr)`), trying again for up to 5 s while the
    /// address is in use.
    ///
    /// For a caller that closes a socket on a fixed port and binds the
    /// same address again: a process that another thread of this one is
    /// spawning holds a copy of every descriptor (the old socket included)
    /// from its clone until its exec closes them, and until then the
    /// address stays taken. On a slow machine that window is milliseconds
    /// (seen in the emulated guests: EADDRINUSE on a port the test itself
    /// had just closed, while a test in another thread started `ip`).
    pub fn bind<S, F>(&self, bind: F) -> Result<S>
    where
        F: Fn() -> std::io::Result<S> + Send,
        S: Send,
    {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        self.run(move || loop {
            match bind() {
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(1))
                }
                other => return other,
            }
        })?
        .with_context(|| format!("binding a socket in namespace {}", self.name))
    }

    /// A `Command` that runs `program` inside the namespace via
    /// `ip netns exec NAME program`; add arguments and spawn it yourself,
    /// e.g. for long-running processes.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }

    /// Runs `args` (program and arguments) inside the namespace via
    /// `ip netns exec` and returns its output; fails on a non-zero exit.
    pub fn exec(&self, args: &[&str]) -> Result<Output> {
        let (program, rest) = args.split_first().context("Netns::exec needs a program to run")?;
        cmd::run(self.command(program).args(rest), None)
    }

    /// Runs `ip -n NAME args...` and returns its output.
    ///
    /// A free-form escape hatch for test fixtures written in iproute2's
    /// language (policy rules, `mtu lock`, blackhole routes, `ip -j` output
    /// to check...), not a second way to configure: the typed helpers
    /// ([`Netns::addr_add`], [`Netns::batch`], ...) talk netlink directly and
    /// check addresses against the test ranges, which this does not.
    pub fn ip(&self, args: &[&str]) -> Result<Output> {
        cmd::run(Command::new("ip").args(["-n", &self.name]).args(args), None)
    }

    /// Runs many `ip` commands in one process: `ip -n NAME -batch -`, one
    /// command per line without the leading `ip` (e.g. `link set lo up`).
    /// Stops at the first failing line; the error lists the numbered input.
    /// The escape hatch of [`Netns::ip`] for many lines: it does not check
    /// addresses; the typed [`Netns::batch`] does.
    pub fn ip_batch<S: AsRef<str>>(&self, lines: &[S]) -> Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        let mut input = String::new();
        for line in lines {
            input.push_str(line.as_ref());
            input.push('\n');
        }
        cmd::run(Command::new("ip").args(["-n", &self.name, "-batch", "-"]), Some(&input))?;
        Ok(())
    }

    /// Starts a checked batch of configuration commands, sent by netlink; see [`Batch`].
    pub fn batch(&self) -> Batch<'_> {
        Batch::new(self)
    }

    /// Sets a sysctl of this namespace. `key` is dotted (`net.ipv4.ip_forward`)
    /// or a path under /proc/sys (`net/ipv4/conf/xnf1a/forwarding`, needed when
    /// a name contains dots). Only `net.*` keys are accepted, because other
    /// sysctls are global and would change the host.
    pub fn sysctl_set(&self, key: &str, value: &str) -> Result<()> {
        let path = sysctl_path(key)?;
        if !path.starts_with("/proc/sys/net/") {
            bail!("sysctl {key} is not under net.: only per-namespace net.* sysctls may be set from the harness");
        }
        self.run(|| std::fs::write(&path, value))?.with_context(|| format!("setting sysctl {key}={value} in {} (does the key exist?)", self.name))
    }

    /// Reads a sysctl of this namespace (key as for [`Netns::sysctl_set`]), trimmed.
    pub fn sysctl_get(&self, key: &str) -> Result<String> {
        let path = sysctl_path(key)?;
        let value = self.run(|| std::fs::read_to_string(&path))?.with_context(|| format!("reading sysctl {key} in {} (does the key exist?)", self.name))?;
        Ok(value.trim().to_owned())
    }

    /// Turns on IPv4 and IPv6 forwarding (`net.ipv4.ip_forward=1`,
    /// `net.ipv6.conf.all.forwarding=1`).
    pub fn enable_forwarding(&self) -> Result<()> {
        self.sysctl_set("net.ipv4.ip_forward", "1")?;
        self.sysctl_set("net.ipv6.conf.all.forwarding", "1")
    }

    /// The counter files, opened inside the namespace the first time.
    fn counter_files(&self) -> Result<MutexGuard<'_, CounterFiles>> {
        if self.counters.get().is_none() {
            let files = self.run(CounterFiles::open)?.context("opening /proc/net/dev, snmp and netstat")?;
            // Two threads may race here: either's files serve.
            let _ = self.counters.set(Mutex::new(files));
        }
        Ok(lock(self.counters.get().expect("set above")))
    }

    /// Reads the namespace's protocol counters (snmp, snmp6 and netstat).
    pub fn snmp(&self) -> Result<Snmp> {
        let f = self.counter_files()?;
        let mut s = Snmp::default();
        s.add_table(&read_again(&f.snmp).context("reading /proc/net/snmp")?);
        let snmp6 = f.snmp6.as_ref().context("no /proc/net/snmp6 (is IPv6 disabled?)")?;
        s.add_snmp6(&read_again(snmp6).context("reading /proc/net/snmp6")?);
        s.add_table(&read_again(&f.netstat).context("reading /proc/net/netstat")?);
        Ok(s)
    }

    /// Every interface's counters, read at one instant (one read of /proc/net/dev).
    pub fn all_link_stats(&self) -> Result<std::collections::BTreeMap<String, LinkStats>> {
        let text = read_again(&self.counter_files()?.dev).context("reading /proc/net/dev")?;
        Ok(parse_dev_all(&text))
    }

    /// Packet and byte counters of interface `dev` (from /proc/net/dev).
    pub fn link_stats(&self, dev: &str) -> Result<LinkStats> {
        let text = read_again(&self.counter_files()?.dev).context("reading /proc/net/dev")?;
        parse_dev(&text, dev).with_context(|| format!("no interface {dev} in namespace {}", self.name))
    }

    /// The ifindex of `dev` inside this namespace.
    pub fn ifindex(&self, dev: &str) -> Result<u32> {
        check_ifname(dev)?;
        self.run(|| nix::net::if_::if_nametoindex(dev))?.with_context(|| format!("no interface {dev} in namespace {}", self.name))
    }

    /// The MAC address of `dev`.
    pub fn mac(&self, dev: &str) -> Result<Mac> {
        check_ifname(dev)?;
        let link = self.run(|| netlink::link_by_name(dev))?.with_context(|| format!("reading the MAC of {dev} in {}", self.name))?;
        let mac = link.mac.with_context(|| format!("{dev} in {} has no Ethernet address (it is not an Ethernet device)", self.name))?;
        Ok(Mac::from(mac))
    }

    /// Turns an offload feature of `dev` on or off (`ethtool -K DEV NAME
    /// on|off`, through the ioctl; see [`crate::ethtool`]).
    pub fn set_offload(&self, dev: &str, offload: Offload, on: bool) -> Result<()> {
        self.run(|| ethtool::set_offload(dev, offload, on))?.with_context(|| format!("in namespace {}", self.name))
    }

    /// Whether an offload feature of `dev` is on.
    pub fn offload(&self, dev: &str, offload: Offload) -> Result<bool> {
        self.run(|| ethtool::offload(dev, offload))?.with_context(|| format!("in namespace {}", self.name))
    }

    /// The driver's statistics of `dev` by name (`ethtool -S DEV`, through
    /// the ioctl; see [`ethtool::stats`]).
    pub fn ethtool_stats(&self, dev: &str) -> Result<Vec<(String, u64)>> {
        self.run(|| ethtool::stats(dev))?.with_context(|| format!("in namespace {}", self.name))
    }

    /// Waits until each of `devs` is settled, for at most 5 s: operational
    /// state UP and an IPv6 link-local address. When a veth pair's ends come
    /// up, the kernel adds the link-local address a moment later and its
    /// link watcher turns UNKNOWN into UP up to a second later. Until the
    /// former, IPv6 solicits no neighbour for forwarded packets (a
    /// solicitation's source is that address), so their first packets
    /// would wait a second for a retry; the latter shows in what `ip link`
    /// and monitoring report. Fails naming the interfaces not settled.
    pub fn wait_links_ready(&self, devs: &[&str]) -> Result<()> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        self.run(|| -> Result<()> {
            let mut rtnl = netlink::Rtnl::open()?;
            loop {
                let links = netlink::links()?;
                let ipv6 = netlink::ipv6_link_local(&mut rtnl)?;
                let waiting: Vec<&str> = devs
                    .iter()
                    .filter(|d| {
                        let link = links.iter().find(|l| l.name == **d);
                        !link.is_some_and(|l| l.oper_up && ipv6.contains(&l.ifindex))
                    })
                    .copied()
                    .collect();
                if waiting.is_empty() {
                    return Ok(());
                }
                if std::time::Instant::now() > deadline {
                    bail!(
                        "{} in namespace {} not up with an IPv6 link-local address after 5 s: \
                         is the peer down or IPv6 disabled (net.ipv6.conf.*.disable_ipv6)?",
                        waiting.join(", "),
                        self.name
                    );
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        })?
    }

    /// `ip link set dev up`.
    pub fn link_up(&self, dev: &str) -> Result<()> {
        self.batch().link_up(dev)?.apply()
    }

    /// `ip link set dev down`.
    pub fn link_down(&self, dev: &str) -> Result<()> {
        self.batch().link_down(dev)?.apply()
    }

    /// `ip link set dev address MAC`.
    pub fn set_mac(&self, dev: &str, mac: Mac) -> Result<()> {
        self.batch().set_mac(dev, mac)?.apply()
    }

    /// `ip link set dev mtu MTU`.
    pub fn set_mtu(&self, dev: &str, mtu: u32) -> Result<()> {
        self.batch().set_mtu(dev, mtu)?.apply()
    }

    /// Adds a test address with prefix, e.g. `"198.18.0.1/24"` (IPv6 with `nodad`).
    pub fn addr_add(&self, dev: &str, cidr: &str) -> Result<()> {
        self.batch().addr_add(dev, cidr)?.apply()
    }

    /// Adds a route; see [`Batch::route_add`].
    pub fn route_add(&self, dst: &str, via: Option<&str>, dev: Option<&str>) -> Result<()> {
        self.batch().route_add(dst, via, dev)?.apply()
    }

    /// Adds or replaces a route; see [`Batch::route_add`].
    pub fn route_replace(&self, dst: &str, via: Option<&str>, dev: Option<&str>) -> Result<()> {
        self.batch().route_replace(dst, via, dev)?.apply()
    }

    /// Deletes the route to `dst`.
    pub fn route_del(&self, dst: &str) -> Result<()> {
        self.batch().route_del(dst)?.apply()
    }

    /// Adds (or replaces) a permanent neighbour entry `ip` -> `mac` on `dev`.
    pub fn neigh_add(&self, ip: &str, mac: Mac, dev: &str) -> Result<()> {
        self.batch().neigh_add(ip, mac, dev)?.apply()
    }

    /// Deletes the neighbour entry for `ip` on `dev`.
    pub fn neigh_del(&self, ip: &str, dev: &str) -> Result<()> {
        self.batch().neigh_del(ip, dev)?.apply()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Not in the registry any more: already removed by delete()/cleanup_all().
        if !lock(&LIVE).remove(&self.name) {
            return;
        }
        if let Err(e) = delete_ns(&self.name) {
            lock(&LIVE).insert(self.name.clone());
            eprintln!(
                "xnf-netns: could not remove namespace {}: {e:#}\n\
                 remove it with `ip netns del {}` or xnf_netns::cleanup_all()",
                self.name, self.name
            );
        }
    }
}

/// `/proc/sys/...` for a dotted or slashed sysctl key.
fn sysctl_path(key: &str) -> Result<PathBuf> {
    let rel = if key.contains('/') { key.trim_start_matches('/').to_owned() } else { key.replace('.', "/") };
    if rel.is_empty() || rel.split('/').any(|part| part.is_empty() || part == "..") {
        bail!("`{key}` is not a sysctl key like net.ipv4.ip_forward");
    }
    Ok(Path::new("/proc/sys").join(rel))
}

fn delete_ns(name: &str) -> Result<()> {
    cmd::run(Command::new("ip").args(["netns", "del", name]), None)?;
    Ok(())
}

/// Runs `f` on a fresh OS thread that has joined the network namespace at
/// `path` (a file under /run/netns, or /proc/PID/ns/net) and returns its
/// result: threads switch namespaces independently, and this one is thrown
/// away afterwards. A panic in `f` is resumed in the caller.
pub fn run_in<F, R>(path: &std::path::Path, f: F) -> Result<R>
where
    F: FnOnce() -> R + Send,
    R: Send,
{
    let file = File::open(path).with_context(|| format!("opening network namespace {} (was it deleted?)", path.display()))?;
    std::thread::scope(|scope| {
        let thread = std::thread::Builder::new()
            .name("netns".into())
            .spawn_scoped(scope, move || -> Result<R> {
                nix::sched::setns(&file, CloneFlags::CLONE_NEWNET)
                    .with_context(|| format!("entering network namespace {} (needs CAP_SYS_ADMIN: run as root)", path.display()))?;
                drop(file);
                Ok(f())
            })
            .context("spawning a thread to enter a network namespace")?;
        match thread.join() {
            Ok(result) => result,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// Names of the namespaces this process created and still owns.
pub fn live_namespaces() -> Vec<String> {
    lock(&LIVE).iter().cloned().collect()
}

/// Deletes every namespace this process created and still owns; their guards
/// then do nothing on drop. Meant for exit paths such as a Ctrl-C handler.
/// Tries them all, then reports the failures together.
pub fn cleanup_all() -> Result<()> {
    let names = std::mem::take(&mut *lock(&LIVE));
    delete_all(names)
}

/// Deletes `xnf-<pid>-...` namespaces whose creating process `pid` no longer
/// exists (left by a killed test or lab run) and returns their names.
/// Namespaces of living processes, including this one, are never touched.
pub fn cleanup_stale() -> Result<Vec<String>> {
    cleanup_stale_except(&[])
}

/// [`cleanup_stale`], leaving the namespaces named in `keep` (they hold
/// what another run must take out first).
pub fn cleanup_stale_except(keep: &[String]) -> Result<Vec<String>> {
    let entries = match std::fs::read_dir(NETNS_DIR) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        r => r.with_context(|| format!("listing {NETNS_DIR} (run as root)"))?,
    };
    let me = std::process::id();
    let mut stale = Vec::new();
    for entry in entries {
        let name = entry.with_context(|| format!("listing {NETNS_DIR}"))?.file_name();
        let Some(name) = name.to_str() else { continue };
        let pid = name.strip_prefix(NS_PREFIX).and_then(|rest| rest.split('-').next()).and_then(|pid| pid.parse::<u32>().ok());
        if let Some(pid) = pid {
            if pid != me && !Path::new(&format!("/proc/{pid}")).exists() && !keep.iter().any(|k| k == name) {
                stale.push(name.to_owned());
            }
        }
    }
    delete_all(stale.clone())?;
    Ok(stale)
}

fn delete_all(names: impl IntoIterator<Item = String>) -> Result<()> {
    let errors: Vec<String> = names.into_iter().filter_map(|n| delete_ns(&n).err().map(|e| format!("{e:#}"))).collect();
    if !errors.is_empty() {
        bail!("could not remove {} namespace(s):\n{}", errors.len(), errors.join("\n"));
    }
    Ok(())
}
