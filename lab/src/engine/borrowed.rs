//! Interfaces that exist before the lab — NIC ports, veths made beforehand
//! — as ends of a topology's links (`a_existing`, `b_existing`). The lab
//! borrows one: it records everything about it that it may change
//! (addresses, routes, MTU, MAC, up or down, its per-device sysctls,
//! channels, rings, coalescing, offloads, the RSS table and its
//! interrupts' CPUs), writes that record to
//! `/run/xnf/lab-borrowed/` *before* changing anything, renames it to the
//! link's logical name and moves it into the lab's namespace; afterwards
//! it moves it back and restores every recorded setting.
//!
//! Why the record is a file: deleting a namespace destroys a veth in it
//! (a NIC falls back to the host's namespace, under the lab's name). A
//! run that was killed leaves its namespaces and its records; the next
//! run gives every recorded interface back before it removes them
//! ([`restore_stale`]), and Ctrl-C gives them back before the namespaces
//! go ([`restore_pending`]).
//!
//! What moving between namespaces does by itself, and so what must be
//! restored by hand: the kernel removes a device's addresses and routes
//! and resets its per-device sysctls to the new namespace's defaults;
//! ifindex, MAC, MTU, queues and ethtool settings travel with the device.
//! An IPv6 link-local address is made again by the kernel and is not
//! recorded. An interface with an XDP program or a master (bridge, bond)
//! is refused: the lab would have to take it apart.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use xnf_netns::devsettings::DevSettings;
use xnf_netns::Netns;

/// Where the records of borrowed interfaces are kept while borrowed.
const RECORDS: &str = "/run/xnf/lab-borrowed";

/// An existing interface: `DEV` in the lab's own namespace (the host's),
/// or `NETNS:DEV` in a named namespace (`ip netns`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Existing {
    pub netns: Option<String>,
    pub dev: String,
}

impl Existing {
    pub fn parse(s: &str) -> Result<Existing> {
        let (netns, dev) = match s.split_once(':') {
            Some((n, d)) => (Some(n.to_string()), d),
            None => (None, s),
        };
        ensure!(!dev.is_empty() && dev.len() < 16 && !dev.contains(['/', ' ']), "`{s}`: not an interface name (give DEV or NETNS:DEV)");
        if let Some(n) = &netns {
            ensure!(Path::new(xnf_netns::NETNS_DIR).join(n).exists(), "`{s}`: no network namespace `{n}` (see `ip netns list`)");
        }
        Ok(Existing { netns, dev: dev.to_string() })
    }

    /// Runs `f` in the interface's namespace.
    fn run<R: Send>(&self, f: impl FnOnce() -> Result<R> + Send) -> Result<R> {
        match &self.netns {
            Some(n) => xnf_netns::run_in(&Path::new(xnf_netns::NETNS_DIR).join(n), f)?,
            None => f(),
        }
    }

    /// `ip` in the interface's namespace; its stdout.
    fn ip(&self, args: &[&str]) -> Result<String> {
        let mut cmd = std::process::Command::new("ip");
        if let Some(n) = &self.netns {
            cmd.args(["-n", n]);
        }
        let out = cmd.args(args).output().context("running ip (iproute2)")?;
        ensure!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The `ip` argument naming this interface's namespace as a target.
    /// `DEV` is in the lab's own namespace, which is not PID 1's under
    /// `ip netns exec` or on a host the lab reaches over SSH into a
    /// namespace (the lab's hosts test): named by this process, as `ip`
    /// runs in the lab's namespace and cannot name its own.
    fn netns_arg(&self) -> String {
        self.netns.as_ref().map_or_else(|| format!("/proc/{}/ns/net", std::process::id()), |n| n.clone())
    }
}

impl std::fmt::Display for Existing {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match &self.netns {
            Some(n) => write!(f, "{}:{}", n, self.dev),
            None => write!(f, "{}", self.dev),
        }
    }
}

/// Everything recorded of a borrowed interface.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Borrowed {
    pub existing: Existing,
    /// Its name inside the lab's namespace, and that namespace's name.
    pub lab_name: String,
    pub lab_ns: String,
    /// The lab run that borrowed it (its record's file name).
    pid: u32,
    mtu: u64,
    mac: String,
    up: bool,
    /// `ip -j addr` entries, the kernel's IPv6 link-local left out.
    addrs: Vec<Value>,
    /// `ip -j route` entries of tables other than local, not made by the kernel.
    routes: Vec<(bool, Value)>,
    sysctls: Vec<(String, String)>,
    settings: DevSettings,
    /// The device's interrupts and the CPUs each may run on (a NIC's; a veth has none).
    #[serde(default)]
    irqs: Vec<(u32, String)>,
    /// For `DEV`: the lab's namespace it came from (`net:[INODE]`), which
    /// only a lab run in that namespace may give it back to.
    #[serde(default)]
    home: Option<String>,
}

/// This process's network namespace, as `net:[INODE]`.
fn this_netns() -> Option<String> {
    std::fs::read_link("/proc/self/ns/net").ok().map(|p| p.display().to_string())
}

/// Records of interfaces this process has borrowed and not given back.
static PENDING: Mutex<Vec<Borrowed>> = Mutex::new(Vec::new());

/// Borrows `e` for the lab: records it, then renames it `lab_name` and
/// moves it into `lab`. Refused, before anything changes, for an interface
/// that has an XDP program or a master.
pub fn borrow(e: &Existing, lab: &Netns, lab_name: &str) -> Result<BorrowGuard> {
    let b = record(e, lab, lab_name)?;
    let file = record_file(&b);
    std::fs::create_dir_all(RECORDS).with_context(|| format!("creating {RECORDS}"))?;
    std::fs::write(&file, serde_json::to_vec_pretty(&b)?).with_context(|| format!("writing {}", file.display()))?;
    PENDING.lock().expect("pending records").push(b.clone());
    let guard = BorrowGuard(Some(b));
    e.ip(&["link", "set", "dev", &e.dev, "down"])?;
    e.ip(&["link", "set", "dev", &e.dev, "name", lab_name])?;
    let moved = Existing { netns: e.netns.clone(), dev: lab_name.into() };
    moved.ip(&["link", "set", "dev", lab_name, "netns", lab.name()]).with_context(|| format!("moving {e} into the lab's namespace"))?;
    Ok(guard)
}

/// `e`'s link as `ip -d -j link` shows it, if the lab can borrow it:
/// refused in one line for an interface that is missing, has an XDP
/// program or a master. Called for every existing interface of a topology
/// before anything is built.
pub fn check(e: &Existing) -> Result<Value> {
    let link: Value = serde_json::from_str(&e.ip(&["-d", "-j", "link", "show", "dev", &e.dev]).with_context(|| format!("existing interface {e}"))?)?;
    let link = link.get(0).context("ip -j link: no interface")?.clone();
    if let Some(xdp) = link.get("xdp") {
        let prog = &xdp["prog"];
        bail!("{e} has an XDP program attached ({} id {}): detach it (ip link set dev {} xdp off) and run again", prog["name"], prog["id"], e.dev);
    }
    if let Some(m) = link.get("master") {
        bail!("{e} is a port of {m}: the lab needs it on its own; take it out first");
    }
    Ok(link)
}

/// Reads everything [`Borrowed`] holds of `e`.
fn record(e: &Existing, lab: &Netns, lab_name: &str) -> Result<Borrowed> {
    let link = check(e)?;
    let addrs: Vec<Value> = serde_json::from_str::<Value>(&e.ip(&["-j", "addr", "show", "dev", &e.dev])?)?
        .get(0)
        .and_then(|l| l.get("addr_info"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|a| !(a["family"] == "inet6" && a["scope"] == "link"))
        .collect();
    let mut routes = Vec::new();
    for v6 in [false, true] {
        let fam = if v6 { "-6" } else { "-4" };
        let all: Value = serde_json::from_str(&e.ip(&[fam, "-j", "route", "show", "table", "all", "dev", &e.dev])?)?;
        for r in all.as_array().cloned().unwrap_or_default() {
            if r["table"] != "local" && r["protocol"] != "kernel" && r["type"] != "multicast" {
                routes.push((v6, r));
            }
        }
    }
    Ok(Borrowed {
        existing: e.clone(),
        lab_name: lab_name.into(),
        lab_ns: lab.name().into(),
        pid: std::process::id(),
        mtu: link["mtu"].as_u64().context("ip -j link: no mtu")?,
        mac: link["address"].as_str().unwrap_or_default().into(),
        up: link["flags"].as_array().is_some_and(|f| f.iter().any(|x| x == "UP")),
        addrs,
        routes,
        sysctls: e.run(|| sysctls_of(&e.dev))?,
        settings: e.run(|| DevSettings::read(&e.dev))?,
        irqs: irq_affinity(e)?,
        home: if e.netns.is_none() { this_netns() } else { None },
    })
}

/// The CPUs each of `e`'s interrupts may run on (`smp_affinity_list`).
fn irq_affinity(e: &Existing) -> Result<Vec<(u32, String)>> {
    let mut irqs = Vec::new();
    for irq in super::knobs::irqs_of(e.netns.as_deref(), &e.dev)? {
        let cpus = std::fs::read_to_string(format!("/proc/irq/{irq}/smp_affinity_list")).with_context(|| format!("reading IRQ {irq}'s CPUs"))?;
        irqs.push((irq, cpus.trim().to_string()));
    }
    Ok(irqs)
}

/// The interface's own sysctls (`net/ipv{4,6}/{conf,neigh}/DEV/*`) that
/// can be read and written.
fn sysctls_of(dev: &str) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for dir in ["ipv4/conf", "ipv6/conf", "ipv4/neigh", "ipv6/neigh"] {
        let path = Path::new("/proc/sys/net").join(dir).join(dev);
        let Ok(entries) = std::fs::read_dir(&path) else { continue };
        for f in entries.flatten() {
            let writable = f.metadata().is_ok_and(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o200 != 0);
            if let (true, Ok(v)) = (writable, std::fs::read_to_string(f.path())) {
                out.push((format!("{dir}/{{dev}}/{}", f.file_name().to_string_lossy()), v.trim_end().to_string()));
            }
        }
    }
    out.sort();
    Ok(out)
}

fn record_file(b: &Borrowed) -> PathBuf {
    Path::new(RECORDS).join(format!("{}-{}.json", b.pid, b.lab_name))
}

/// Gives a borrowed interface back when dropped.
pub struct BorrowGuard(Option<Borrowed>);

impl Drop for BorrowGuard {
    fn drop(&mut self) {
        if let Some(b) = self.0.take() {
            if let Err(e) = give_back(&b) {
                eprintln!("xnf lab: giving back {}: {e:#} (its record stays in {RECORDS})", b.existing);
            }
        }
    }
}

/// Moves `b` back where it was and restores what was recorded; then
/// forgets its record.
fn give_back(b: &Borrowed) -> Result<()> {
    let e = &b.existing;
    let lab_path = Path::new(xnf_netns::NETNS_DIR).join(&b.lab_ns);
    let in_lab = Existing { netns: Some(b.lab_ns.clone()), dev: b.lab_name.clone() };
    let back = Existing { netns: e.netns.clone(), dev: b.lab_name.clone() };
    if e.ip(&["link", "show", "dev", &e.dev]).is_ok() {
        // Never moved (borrowing failed half way): only settings to restore.
    } else if lab_path.exists() && in_lab.ip(&["link", "show", "dev", &b.lab_name]).is_ok() {
        in_lab.ip(&["link", "set", "dev", &b.lab_name, "down"])?;
        in_lab.ip(&["link", "set", "dev", &b.lab_name, "netns", &e.netns_arg()])?;
    } else {
        // Its namespace went without it: a NIC is back in the host's
        // namespace under the lab's name; a veth is gone with it.
        back.ip(&["link", "show", "dev", &b.lab_name]).with_context(|| format!("{e} is gone: a veth is destroyed with the namespace it was in"))?;
        back.ip(&["link", "set", "dev", &b.lab_name, "down"])?;
    }
    if back.ip(&["link", "show", "dev", &b.lab_name]).is_ok() {
        back.ip(&["link", "set", "dev", &b.lab_name, "name", &e.dev])?;
    }
    restore(b)?;
    PENDING.lock().expect("pending records").retain(|p| p.lab_name != b.lab_name || p.lab_ns != b.lab_ns);
    let _ = std::fs::remove_file(record_file(b));
    Ok(())
}

/// Restores `b`'s recorded settings on the interface, back in its namespace.
fn restore(b: &Borrowed) -> Result<()> {
    let e = &b.existing;
    e.run(|| b.settings.restore(&e.dev))?;
    e.ip(&["link", "set", "dev", &e.dev, "mtu", &b.mtu.to_string(), "address", &b.mac])?;
    e.run(|| {
        for (key, value) in &b.sysctls {
            let path = Path::new("/proc/sys/net").join(key.replace("{dev}", &e.dev));
            if std::fs::read_to_string(&path).is_ok_and(|now| now.trim_end() != value) {
                std::fs::write(&path, value).with_context(|| format!("restoring {}", path.display()))?;
            }
        }
        Ok(())
    })?;
    for (irq, cpus) in &b.irqs {
        std::fs::write(format!("/proc/irq/{irq}/smp_affinity_list"), cpus).with_context(|| format!("restoring IRQ {irq}'s CPUs to {cpus}"))?;
    }
    if b.up {
        e.ip(&["link", "set", "dev", &e.dev, "up"])?;
    }
    // One already there (an interface never moved) is as recorded.
    let ip = |args: Vec<String>| match e.ip(&args.iter().map(String::as_str).collect::<Vec<_>>()) {
        Err(err) if format!("{err}").contains("File exists") => Ok(String::new()),
        r => r,
    };
    for a in &b.addrs {
        ip(addr_args(a, &e.dev)).with_context(|| format!("restoring address {a} on {e}"))?;
    }
    for (v6, r) in &b.routes {
        ip(route_args(r, &e.dev, *v6)).with_context(|| format!("restoring route {r} on {e}"))?;
    }
    settle(e)
}

/// `ip addr add` for an `ip -j addr` entry.
fn addr_args(a: &Value, dev: &str) -> Vec<String> {
    let mut args: Vec<String> = vec!["addr".into(), "add".into(), format!("{}/{}", a["local"].as_str().unwrap_or_default(), a["prefixlen"])];
    args.extend(["dev".into(), dev.into()]);
    for (key, flag) in [("broadcast", "broadcast"), ("scope", "scope"), ("label", "label")] {
        if let Some(v) = a.get(key).and_then(Value::as_str) {
            args.extend([flag.into(), v.into()]);
        }
    }
    for flag in ["noprefixroute", "nodad", "home", "mngtmpaddr", "optimistic"] {
        if a.get(flag).and_then(Value::as_bool) == Some(true) {
            args.push(flag.into());
        }
    }
    for key in ["valid_life_time", "preferred_life_time"] {
        if let Some(t) = a.get(key).and_then(Value::as_u64).filter(|t| *t != u64::from(u32::MAX)) {
            args.extend([key.replace("_life_time", "_lft"), t.to_string()]);
        }
    }
    args
}

/// `ip route add` for an `ip -j route` entry.
fn route_args(r: &Value, dev: &str, v6: bool) -> Vec<String> {
    let s = |k: &str| r.get(k).and_then(|v| v.as_str().map(str::to_string).or_else(|| v.as_u64().map(|n| n.to_string())));
    let mut args = vec![if v6 { "-6" } else { "-4" }.to_string(), "route".into(), "add".into()];
    if let Some(t) = s("type").filter(|t| t != "unicast") {
        args.push(t);
    }
    args.push(s("dst").unwrap_or_else(|| "default".into()));
    for (key, word) in [("gateway", "via"), ("protocol", "proto"), ("scope", "scope"), ("metric", "metric"), ("prefsrc", "src"), ("table", "table")] {
        if let Some(v) = s(key) {
            args.extend([word.into(), v]);
        }
    }
    args.extend(["dev".into(), dev.into()]);
    if r["flags"].as_array().is_some_and(|f| f.iter().any(|x| x == "onlink")) {
        args.push("onlink".into());
    }
    args
}

/// Waits (at most 5 s) until no address of `e` is tentative: IPv6 DAD
/// runs again after the move, and the interface is not as found until it ends.
fn settle(e: &Existing) -> Result<()> {
    let t0 = Instant::now();
    while !e.ip(&["addr", "show", "dev", &e.dev, "tentative"])?.trim().is_empty() && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Detaches the XDP program on `b` in the lab's namespace, by its link.
fn detach_xdp(b: &Borrowed) -> Result<()> {
    let in_lab = Existing { netns: Some(b.lab_ns.clone()), dev: b.lab_name.clone() };
    let link: Value = serde_json::from_str(&in_lab.ip(&["-j", "link", "show", "dev", &b.lab_name])?)?;
    let (Some(prog), Some(ifindex)) = (link[0]["xdp"]["prog"]["id"].as_u64(), link[0]["ifindex"].as_u64()) else { return Ok(()) };
    match xnf_core::xdp::XdpLink::holding(prog as u32, ifindex as u32)? {
        Some(l) => l.detach(),
        None => in_lab.ip(&["link", "set", "dev", &b.lab_name, "xdp", "off"]).map(drop),
    }
}

/// Gives back every interface this process borrowed (Ctrl-C: before the
/// lab's namespaces are deleted, which would destroy a veth).
pub fn restore_pending() {
    let pending: Vec<Borrowed> = PENDING.lock().map(|p| p.clone()).unwrap_or_default();
    // The lab's programs are still on them (the main thread holds their
    // attachments): off first, on every end, as a veth refuses more TX
    // queues than its peer has RX queues while the peer has XDP.
    for b in &pending {
        if let Err(e) = detach_xdp(b) {
            eprintln!("xnf lab: detaching the lab's XDP program from {}: {e:#}", b.existing);
        }
    }
    for b in pending {
        if let Err(e) = give_back(&b) {
            eprintln!("xnf lab: giving back {}: {e:#}", b.existing);
        }
    }
}

/// Gives back the interfaces that runs which were killed borrowed, before
/// their namespaces are removed; says which through `lines`.
///
/// An interface borrowed from another namespace's `DEV` (a lab run under
/// `ip netns exec`, or on another host sharing this `/run`) is left for a
/// run there: returned to this one it would be in the wrong place. The
/// names of the lab namespaces holding those are returned, to be kept.
pub fn restore_stale(lines: &mut dyn FnMut(&str)) -> Result<Vec<String>> {
    let mut held = Vec::new();
    let Ok(entries) = std::fs::read_dir(RECORDS) else { return Ok(held) };
    for f in entries.flatten() {
        let name = f.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.split('-').next().and_then(|p| p.parse::<u32>().ok()) else { continue };
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() || !name.ends_with(".json") {
            continue;
        }
        let b: Borrowed = serde_json::from_slice(&std::fs::read(f.path())?).with_context(|| format!("reading {}", f.path().display()))?;
        if b.home.is_some() && b.home != this_netns() {
            lines(&format!("left {} in {} for a lab run in its own namespace ({}) to give back", b.existing, b.lab_ns, b.home.as_deref().unwrap_or_default()));
            held.push(b.lab_ns.clone());
            continue;
        }
        match give_back(&b) {
            Ok(()) => lines(&format!("gave back {}, borrowed by a lab run that was killed", b.existing)),
            Err(e) => {
                // Kept for the operator under another name, not tried again.
                let kept = f.path().with_extension("json.failed");
                let _ = std::fs::rename(f.path(), &kept);
                lines(&format!("could not give back {}, borrowed by a lab run that was killed: {e:#} (its record: {})", b.existing, kept.display()));
            }
        }
    }
    Ok(held)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_and_addresses_are_added_back_as_listed() {
        let r: Value =
            serde_json::json!({"dst":"198.18.60.0/24","gateway":"198.18.50.2","dev":"x","protocol":"static","metric":7,"flags":["onlink"],"table":"100"});
        assert_eq!(route_args(&r, "eth9", false).join(" "), "-4 route add 198.18.60.0/24 via 198.18.50.2 proto static metric 7 table 100 dev eth9 onlink");
        let d: Value = serde_json::json!({"type":"unicast","dst":"default","gateway":"2001:db8:50::2","flags":[]});
        assert_eq!(route_args(&d, "eth9", true).join(" "), "-6 route add default via 2001:db8:50::2 dev eth9");
        let a: Value = serde_json::json!({"family":"inet","local":"198.18.50.1","prefixlen":24,"broadcast":"198.18.50.255","scope":"global","label":"eth9","noprefixroute":true,"valid_life_time":4294967295u64});
        assert_eq!(addr_args(&a, "eth9").join(" "), "addr add 198.18.50.1/24 dev eth9 broadcast 198.18.50.255 scope global label eth9 noprefixroute");
    }

    #[test]
    fn existing_interfaces_are_named_with_or_without_a_namespace() {
        assert_eq!(Existing::parse("enp1s0f0").unwrap(), Existing { netns: None, dev: "enp1s0f0".into() });
        assert!(Existing::parse("xnf-nosuch-ns:eth0").unwrap_err().to_string().contains("no network namespace `xnf-nosuch-ns`"));
        assert!(Existing::parse("a-name-far-too-long").is_err());
    }
}
