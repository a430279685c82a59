//! `xnf nf` and `xnf chain`: network functions in their own network
//! namespaces, joined to the host by veth pairs, and chains that steer
//! classes of traffic through them in XDP and route what comes out.
//!
//! Every command changes the registry under its lock and then reconciles
//! the data plane with it ([`dataplane::sync`]); a failure undoes the
//! registry change and reconciles again, so nothing is left half-built.

mod apply;
pub mod cli;
pub mod cni;
mod dataplane;
pub mod model;
mod ns;
pub mod podman;
pub mod program;
mod registry;
mod report;

pub use apply::{apply_file, changes, running, ChainFile};
pub use ns::xps_per_cpu;
pub use report::{ChainStats, HopStats, Snapshot};

use anyhow::{bail, ensure, Context, Result};

use model::{check_name, successors, ChainSpec, NfSpec, Origin, NF_NAME_MAX};
use registry::{Chain, Locked, Nf, Registry};

use xnf_netns::netlink;

/// Host end of an NF's veth.
pub fn host_ifname(nf: &str) -> String {
    format!("xnf-{nf}")
}

fn default_queues() -> u32 {
    std::thread::available_parallelism().map(|n| n.get() as u32).unwrap_or(1)
}

/// Creates the NF's veth (or finds the existing one), prepares both ends
/// and attaches its function. On error, removes what it created.
fn build_nf(spec: &NfSpec, origin: Origin, slot: u32) -> Result<Nf> {
    check_name("NF", &spec.name, NF_NAME_MAX)?;
    let path = ns::resolve(spec)?;
    let ns_inode = ns::inode(&path)?;
    ensure!(ns_inode != ns::own_inode()?, "NF {}: its namespace is this (the host's) namespace; an NF needs its own", spec.name);
    let host = if spec.existing { None } else { Some(host_ifname(&spec.name)) };
    if let Some(h) = &host {
        ensure!(netlink::link_by_name(h).is_err(), "NF {}: interface {h} already exists here; delete it or choose another NF name", spec.name);
        let queues = spec.queues.unwrap_or_else(default_queues);
        ensure!((1..=4096).contains(&queues), "NF {}: --queues {queues}: use 1..4096", spec.name);
        let exists = {
            let ifname = spec.ifname.clone();
            ns::run_in(&path, move || Ok(netlink::link_by_name(&ifname).is_ok()))?
        };
        ensure!(!exists, "NF {}: its namespace already has an interface {}; choose another with --ifname or pass --existing to use it", spec.name, spec.ifname);
        let fd = std::fs::File::open(ns::reachable(&path)).with_context(|| format!("opening {}", path.display()))?;
        create_nf_veth(h, &spec.ifname, &fd, queues, slot)?;
    }
    let built = (|| {
        let (host_link, (nf_ifindex, nf_mac)) = match &host {
            Some(h) => {
                let l = netlink::link_by_name(h)?;
                let nf_end = ns::prepare_nf_end(&path, &spec.ifname, spec.forward, l.mac.unwrap_or_default(), false)?;
                (l, nf_end)
            }
            None => {
                let (_, _, peer, _) = ns::nf_end(&path, &spec.ifname)?;
                let peer = peer.with_context(|| format!("{} in NF {}'s namespace has no peer", spec.ifname, spec.name))?;
                let l = netlink::links()?
                    .into_iter()
                    .find(|l| l.ifindex == peer && l.is_veth())
                    .with_context(|| format!("the peer of {} (ifindex {peer}) is not a veth in this namespace", spec.ifname))?;
                let nf_end = ns::prepare_nf_end(&path, &spec.ifname, spec.forward, l.mac.unwrap_or_default(), true)?;
                (l, nf_end)
            }
        };
        netlink::set_up(host_link.ifindex, &host_link.name)?;
        ns::offloads_off(&host_link.name)?;
        // The FIB lookup after the last NF uses this port as its ingress,
        // and the kernel forwards what XDP passes from it: both need
        // forwarding on; reverse-path filtering would drop the chain's
        // traffic, whose sources are routed via the ingress.
        for key in [
            format!("net/ipv4/conf/{}/forwarding", host_link.name),
            format!("net/ipv6/conf/{}/forwarding", host_link.name),
            format!("net/ipv4/conf/{}/rp_filter", host_link.name),
        ] {
            let v = if key.ends_with("rp_filter") { "0" } else { "1" };
            ns::sysctl(&key, v)?;
        }
        let nf = Nf {
            spec: spec.clone(),
            origin,
            slot,
            netns_path: path.clone(),
            netns_inode: ns_inode,
            host_ifname: host_link.name.clone(),
            host_ifindex: host_link.ifindex,
            host_mac: host_link.mac.unwrap_or_default(),
            nf_ifindex,
            nf_mac,
            created_veth: host.is_some(),
        };
        dataplane::attach_function(&nf)?;
        Ok(nf)
    })();
    if built.is_err() {
        if let Some(h) = &host {
            if let Ok(l) = netlink::link_by_name(h) {
                let _ = netlink::delete_link(l.ifindex, h);
            }
        }
        let _ = dataplane::detach_function(&spec.name);
    }
    built
}

/// Makes the NF's veth: `host` here, `ifname` in the NF's namespace (open
/// as `ns_fd`), XPS set on the NF's end before it moves there. Why before:
/// XPS is only settable in sysfs, and a container's namespace often has its
/// sysfs mounted read-only (podman, docker), which makes every sysfs mount
/// of that namespace read-only (one superblock per namespace); XPS survives
/// the move. The NF's end is made here under a temporary name (the registry
/// lock is held, so `slot` makes it unique), then moved and renamed.
fn create_nf_veth(host: &str, ifname: &str, ns_fd: &std::fs::File, queues: u32, slot: u32) -> Result<()> {
    let tmp = format!("xnfnew{slot}");
    let here = std::fs::File::open("/proc/thread-self/ns/net").context("opening this namespace")?;
    netlink::create_veth(host, &tmp, std::os::fd::AsFd::as_fd(&here), queues)?;
    let moved = (|| {
        let end = netlink::link_by_name(&tmp)?;
        // A thread of its own: xps_per_cpu changes its thread's mount namespace.
        std::thread::scope(|s| s.spawn(|| ns::xps_per_cpu(&tmp)).join()).map_err(|_| anyhow::anyhow!("setting XPS on {tmp} panicked"))??;
        netlink::move_link(end.ifindex, &tmp, ifname, std::os::fd::AsFd::as_fd(ns_fd))
    })();
    if moved.is_err() {
        if let Ok(l) = netlink::link_by_name(host) {
            let _ = netlink::delete_link(l.ifindex, host);
        }
    }
    moved
}

/// Removes what `build_nf` made: its function, and the veth if xnf created it.
fn unbuild_nf(nf: &Nf) -> Result<()> {
    dataplane::detach_function(&nf.spec.name)?;
    if nf.created_veth {
        if let Ok(l) = netlink::link_by_name(&nf.host_ifname) {
            if l.ifindex == nf.host_ifindex {
                netlink::delete_link(l.ifindex, &nf.host_ifname)?;
            }
        }
    }
    Ok(())
}

/// Runs `sync`; on failure restores `before`, syncs that, and returns the error.
fn commit(l: &mut Locked, before: Registry) -> Result<Vec<String>> {
    match dataplane::sync(&l.reg) {
        Ok(w) => {
            l.save()?;
            Ok(w)
        }
        Err(e) => {
            l.reg = before;
            let _ = dataplane::sync(&l.reg);
            Err(e)
        }
    }
}

pub fn nf_create(spec: NfSpec, origin: Origin) -> Result<Vec<String>> {
    let mut l = Locked::open()?;
    ensure!(!l.reg.nfs.contains_key(&spec.name), "NF {} exists already (`xnf chain list`; `xnf nf delete {}` first)", spec.name, spec.name);
    let before = l.reg.clone();
    let nf = build_nf(&spec, origin, l.reg.free_nf_slot()?)?;
    if let Some(maps) = dataplane::open_maps()? {
        maps.reset_nf_stats(nf.slot)?;
    }
    l.reg.nfs.insert(spec.name.clone(), nf.clone());
    commit(&mut l, before).inspect_err(|_| {
        let _ = unbuild_nf(&nf);
    })
}

/// Deletes an NF. Refused while a chain goes through it unless `force`
/// (then those chains go down and drop their traffic until an NF of that
/// name exists again; the CNI plugin's DEL works this way).
pub fn nf_delete(name: &str, force: bool) -> Result<Vec<String>> {
    let mut l = Locked::open()?;
    let nf = l.reg.nfs.get(name).cloned().with_context(|| format!("no NF named {name:?} (`xnf chain list` shows them)"))?;
    let users = l.reg.chains_with(name);
    if !users.is_empty() && !force {
        bail!(
            "NF {name} is in chain(s) {}: removing it would cut them; delete or change those chains first \
             (or --force: they then drop their traffic until an NF named {name} exists again)",
            users.join(", ")
        );
    }
    let before = l.reg.clone();
    l.reg.nfs.remove(name);
    let w = commit(&mut l, before)?;
    unbuild_nf(&nf)?;
    Ok(w)
}

/// The chain's NFs as registered, checked against every other chain.
fn check_chain(reg: &Registry, spec: &ChainSpec) -> Result<()> {
    let links = netlink::links()?;
    let ingress = links
        .iter()
        .find(|l| l.name == spec.ingress)
        .with_context(|| format!("chain {}: ingress {:?} does not exist in this network namespace (see `ip link`)", spec.name, spec.ingress))?;
    ensure!(!ingress.loopback && ingress.ethernet, "chain {}: ingress {} is not an Ethernet interface", spec.name, spec.ingress);
    ensure!(
        !reg.nfs.values().any(|n| n.host_ifname == spec.ingress),
        "chain {}: ingress {} is an NF's port; traffic enters chains from outside the NFs",
        spec.name,
        spec.ingress
    );
    for e in &spec.egress {
        ensure!(links.iter().any(|l| &l.name == e), "chain {}: egress {e:?} does not exist in this network namespace", spec.name);
    }
    for n in &spec.nfs {
        if let Some(nf) = reg.nfs.get(n) {
            ensure!(
                dataplane::present(nf, &links),
                "chain {}: NF {n}'s namespace is gone (its port {} vanished); `xnf nf delete {n}` and create it again",
                spec.name,
                nf.host_ifname
            );
        }
    }
    let names = reg.nfs.keys().cloned().collect();
    let mut all: Vec<&ChainSpec> = reg.chains.values().filter(|c| c.spec.name != spec.name).map(|c| &c.spec).collect();
    all.push(spec);
    successors(&names, &all)?;
    Ok(())
}

pub fn chain_create(spec: ChainSpec, origin: Origin) -> Result<Vec<String>> {
    let mut l = Locked::open()?;
    ensure!(!l.reg.chains.contains_key(&spec.name), "chain {} exists already (`xnf chain delete {}` first)", spec.name, spec.name);
    check_chain(&l.reg, &spec)?;
    let before = l.reg.clone();
    let slot = l.reg.free_chain_slot()?;
    if let Some(maps) = dataplane::open_maps()? {
        maps.reset_chain_stats(slot)?;
    }
    l.reg.chains.insert(spec.name.clone(), Chain { spec, slot, origin });
    commit(&mut l, before)
}

pub fn chain_delete(name: &str) -> Result<Vec<String>> {
    let mut l = Locked::open()?;
    ensure!(l.reg.chains.contains_key(name), "no chain named {name:?} (`xnf chain list` shows them)");
    let before = l.reg.clone();
    l.reg.chains.remove(name);
    commit(&mut l, before)
}

mod skel {
    //! Generated skeleton.
    #![allow(clippy::all, missing_docs, non_camel_case_types, unused)]
    pub mod chain {
        include!(concat!(env!("OUT_DIR"), "/chain.skel.rs"));
    }
}

/// Every chain's and NF's counters now (what `xnf chain stats` shows).
pub fn counters() -> Result<Snapshot> {
    report::snapshot(&Locked::open()?.reg)
}

/// The neighbour table of the chain's exit (the neighbours it sends to, for the
/// daemon to keep confirmed); None when it has no state here.
pub fn neigh_table() -> Result<Option<xnf_core::neigh::Table>> {
    Ok(xnf_core::lifecycle::Lifecycle::<program::Chain>::maps()?.map(|m| xnf_core::neigh::Table { stamps: m.neigh_use, epoch: m.neigh_epoch }))
}

/// The host end of NF `name` as the registry has it (a runtime's CNI
/// plugin may have named it, not [`host_ifname`]); None without that NF.
pub fn nf_host_port(name: &str) -> Result<Option<String>> {
    Ok(Locked::open()?.reg.nfs.get(name).map(|nf| nf.host_ifname.clone()))
}
