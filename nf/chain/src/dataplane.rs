//! Makes the kernel match the registry: one chain program, pinned under
//! `/sys/fs/bpf/xnf/net-<inode>/chain/`, the forward stage of every
//! ingress and of the host end of every NF's veth (behind the entry
//! program, so `xnf filter` can sit in front of it), and its tables
//! (ports, NFs, devmap, rules) rewritten from the registry on every change. Reconciling the
//! whole state each time keeps every command idempotent and lets a later
//! command repair what an interrupted one left.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use xnf_core::lifecycle::Lifecycle;
use xnf_core::sources::Sources;
use xnf_core::state;
use xnf_core::xdp::{veth_peer_warning, XdpLink, XdpMode};
use xnf_netns::netlink::{self, Link};

use crate::model::{successors, Function};
use crate::ns;
use crate::program::{Chain, ChainMaps, NfEntry, Plan, Port, Rpf, Rule, MAX_INGRESS, MAX_NFS, MAX_RULES};
use crate::registry::{Nf, Registry};

type Life = Lifecycle<Chain>;

pub fn pin_dir() -> Result<PathBuf> {
    Life::pin_dir()
}

/// Pin of the program xnf attached to an NF's own end.
fn function_pin(dir: &Path, nf: &str) -> PathBuf {
    dir.join(format!("fn-{nf}"))
}

/// True if the NF's host end still exists (it vanishes with the NF's namespace).
pub fn present(nf: &Nf, links: &[Link]) -> bool {
    links.iter().any(|l| l.ifindex == nf.host_ifindex && l.name == nf.host_ifname)
}

/// Derives the tables from the registry, the interfaces that exist and
/// the kernel's source check on them.
pub fn plan(reg: &Registry, links: &[Link], sources: &Sources) -> Result<Plan> {
    let mut p = Plan::default();
    let by_name = |n: &str| links.iter().find(|l| l.name == n);
    // NFs deleted by force still name their place in the chains that used them.
    let names: BTreeSet<String> = reg.nfs.keys().chain(reg.chains.values().flat_map(|c| &c.spec.nfs)).cloned().collect();
    let chains: Vec<_> = reg.chains.values().map(|c| &c.spec).collect();
    let next = successors(&names, &chains)?;
    let up: BTreeMap<&str, &Nf> = reg.nfs.iter().filter(|(_, n)| present(n, links)).map(|(k, n)| (k.as_str(), n)).collect();

    for (name, nf) in &up {
        let succ = next.get(*name).cloned().flatten();
        // A successor that is gone keeps its slot in the entry: the slot is
        // empty, so frames for it are dropped and counted, never routed around it.
        let next_slot = match succ {
            None => None,
            Some(s) => match reg.nfs.get(&s) {
                Some(n) => Some(n.slot),
                // Deleted: point at a slot no NF holds, so frames are dropped.
                None => Some(unused_slot(reg)),
            },
        };
        p.nfs.insert(nf.slot, NfEntry { ifindex: nf.host_ifindex, next: next_slot, host_mac: nf.host_mac, nf_mac: nf.nf_mac });
        let rpf = sources.rpf(nf.host_ifindex, &nf.host_ifname)?;
        if rpf != Rpf::Off {
            p.warnings.push(format!(
                "reverse-path filtering is {} on {} (net.ipv4.conf.all.rp_filter): the kernel drops what NF {name} sends back, \
                 and so does the chain's exit; set net.ipv4.conf.all.rp_filter=0",
                rpf.name(),
                nf.host_ifname
            ));
        }
        p.ports.insert(nf.host_ifindex, Port::Nf { slot: nf.slot, rpf });
        p.tx.insert(nf.host_ifindex);
    }

    // Ingress stats slots follow the sorted ingress names: stable while the set is.
    let ingresses: BTreeSet<&str> = reg.chains.values().map(|c| c.spec.ingress.as_str()).collect();
    for (slot, name) in ingresses.iter().enumerate() {
        let slot = slot as u32;
        anyhow::ensure!(slot < MAX_INGRESS, "more than {MAX_INGRESS} ingress interfaces");
        match by_name(name) {
            Some(l) => {
                p.ports.insert(l.ifindex, Port::Ingress { mac: l.mac.unwrap_or_default(), slot });
                p.tx.insert(l.ifindex);
            }
            None => p.warnings.push(format!("ingress {name} does not exist (any more): its chains steer nothing")),
        }
    }
    let mut ordered: Vec<_> = reg.chains.values().collect();
    ordered.sort_by(|a, b| (a.spec.priority, &a.spec.name).cmp(&(b.spec.priority, &b.spec.name)));
    for c in ordered {
        let Some(ingress) = by_name(&c.spec.ingress) else { continue };
        let complete = c.spec.nfs.iter().all(|n| up.contains_key(n.as_str()));
        if !complete {
            let gone: Vec<&str> = c.spec.nfs.iter().filter(|n| !up.contains_key(n.as_str())).map(String::as_str).collect();
            p.warnings.push(format!(
                "chain {} is down (NF {} gone): its traffic is dropped until an NF of that name exists again",
                c.spec.name,
                gone.join(", ")
            ));
        }
        let first = complete.then(|| reg.nfs[&c.spec.nfs[0]].slot);
        for m in &c.spec.matches {
            let class = m.class().with_context(|| format!("chain {}", c.spec.name))?;
            let unsure_drop = c.spec.unknown_l4 == crate::model::UnknownL4::Drop;
            p.rules.push(Rule { ifindex: ingress.ifindex, chain: c.slot, first_nf: first, class, unsure_drop });
        }
        for e in &c.spec.egress {
            match by_name(e) {
                Some(l) => {
                    p.tx.insert(l.ifindex);
                    if l.is_veth() {
                        p.warnings.extend(veth_peer_warning(l, links));
                    }
                }
                None => p.warnings.push(format!("chain {}: egress {e} does not exist; frames routed there take the kernel path", c.spec.name)),
            }
        }
    }
    anyhow::ensure!(p.rules.len() <= MAX_RULES as usize, "{} traffic classes in all chains; the classifier holds {}", p.rules.len(), MAX_RULES);
    p.warnings.sort();
    p.warnings.dedup();
    Ok(p)
}

/// A slot no NF holds (its table entry stays empty).
fn unused_slot(reg: &Registry) -> u32 {
    Registry::free_slot(reg.nfs.values().map(|n| n.slot), MAX_NFS, "NF").unwrap_or(MAX_NFS - 1)
}

/// Brings tables and attachments in line with the registry; returns warnings.
pub fn sync(reg: &Registry) -> Result<Vec<String>> {
    state::ensure_bpffs()?;
    let links = netlink::links()?;
    let sources = Sources::read()?;
    let plan = plan(reg, &links, &sources)?;
    let dir = pin_dir()?;
    if plan.ports.is_empty() && reg.nfs.is_empty() {
        teardown(&dir);
        return Ok(plan.warnings);
    }
    let maps = Life::maps_or_create()?;

    // Tables first, so a port attached below finds its entries. The host's
    // addresses are read afresh on every chain command (there is no
    // follower): an address added later is known from the next one on.
    maps.set_locals(&sources.locals())?;
    for slot in 0..MAX_NFS {
        match plan.nfs.get(&slot) {
            Some(e) => maps.set_nf(slot, *e)?,
            None if maps.nf(slot)?.ifindex != 0 => maps.clear_nf(slot)?,
            None => {}
        }
    }
    for t in &plan.tx {
        maps.add_tx(*t)?;
    }
    for t in maps.tx_ports()? {
        if !plan.tx.contains(&t) {
            maps.del_tx(t)?;
        }
    }
    for (ifindex, port) in &plan.ports {
        maps.set_port(*ifindex, *port)?;
    }
    maps.set_rules(&plan.rules)?;

    let attached: BTreeSet<u32> = attached_ports(&maps)?;
    for ifindex in plan.ports.keys() {
        if attached.contains(ifindex) {
            continue;
        }
        let link = links.iter().find(|l| l.ifindex == *ifindex).with_context(|| format!("port {ifindex} is gone"))?;
        Life::install_on(&maps, link, XdpMode::Native, &())?;
    }
    for ifindex in attached {
        if !plan.ports.contains_key(&ifindex) {
            Life::remove_from(ifindex)?;
        }
    }
    for (ifindex, _) in maps.ports()? {
        if !plan.ports.contains_key(&ifindex) {
            maps.del_port(ifindex)?;
        }
    }
    Ok(plan.warnings)
}

/// Ports in the tables whose forward stage is the chain program.
fn attached_ports(maps: &ChainMaps) -> Result<BTreeSet<u32>> {
    Ok(maps.ports()?.into_iter().map(|(i, _)| i).filter(|i| port_attached(*i)).collect())
}

fn detach_pin(pin: &Path) {
    if let Ok(l) = XdpLink::open(pin) {
        let _ = l.detach();
    }
    let _ = std::fs::remove_file(pin);
}

/// Detaches everything and removes the pins: nothing of the chain is left.
pub fn teardown(dir: &Path) {
    if let Ok(Some(maps)) = Life::maps() {
        for (ifindex, _) in maps.ports().unwrap_or_default() {
            if port_attached(ifindex) {
                let _ = Life::remove_from(ifindex);
            }
        }
    }
    // The NFs' own programs: detached explicitly, as a process holding a
    // link open would keep it attached after its pin is gone.
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        if e.file_name().to_string_lossy().starts_with("fn-") {
            detach_pin(&e.path());
        }
    }
    let _ = Life::remove_state();
}

/// Attaches the NF's function (pass or reflect) to its own end, in its
/// namespace, and pins the link with the chain's state.
pub fn attach_function(nf: &Nf) -> Result<()> {
    let dir = pin_dir()?;
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let pin = function_pin(&dir, &nf.spec.name);
    detach_pin(&pin);
    let (function, ifindex, ifname) = (nf.spec.function, nf.nf_ifindex, nf.spec.ifname.clone());
    let link = ns::run_in(&nf.netns_path, move || {
        let link = match function {
            Function::Pass => XdpLink::create(xnf_pass::PassProgram::load()?.prog(), ifindex, &ifname, XdpMode::Native)?,
            Function::Reflect => XdpLink::create(xnf_pass::ReflectProgram::load()?.prog(), ifindex, &ifname, XdpMode::Native)?,
            Function::None => return Ok(None),
        };
        Ok(Some(link))
    })?;
    if let Some(l) = link {
        l.pin(&pin)?;
    }
    Ok(())
}

pub fn detach_function(name: &str) -> Result<()> {
    detach_pin(&function_pin(&pin_dir()?, name));
    Ok(())
}

/// True if xnf's function link for `name` is pinned and still attached.
pub fn function_attached(name: &str) -> bool {
    pin_dir().ok().map(|d| function_pin(&d, name)).and_then(|p| XdpLink::open(&p).ok()).and_then(|l| l.info().ok()).is_some_and(|(i, _)| i != 0)
}

/// True if the chain program is `ifindex`'s forward stage.
pub fn port_attached(ifindex: u32) -> bool {
    Life::stage_prog(ifindex).is_some()
}

/// The shared maps, if the chain program is loaded in this namespace.
pub fn open_maps() -> Result<Option<ChainMaps>> {
    Life::maps()
}
