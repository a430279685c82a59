//! Katran's data plane as a peer of `xnf lab lb`: its `balancer.bpf.c`, built by `scripts/peers.sh --katran DIR`
//! from the user's Katran checkout (never part of this repository), loaded and given one service here as Katran's own
//! control plane (`katran/lib/KatranLb.cpp`, which needs folly) would give it.
//!
//! What Katran's control plane does and this loader does the same way, with the layouts of Katran's headers
//! (`katran/lib/bpf/balancer_structs.h`, `balancer_maps.h`, `control_data_maps.h`, `balancer_consts.h`):
//! - `vip_map`: the VIP (`struct vip_definition`: address, port, protocol) → `struct vip_meta` { flags 0, vip number 0 };
//! - `reals`: backend `n` (1-based: Katran's real ids start at 1, 0 means "no real") → `struct real_definition`;
//! - `ch_rings`: the VIP's Maglev ring, `RING_SIZE` (65,537) real ids from `vip_num * RING_SIZE`, made by Katran's
//!   default `HashFunction::Maglev` (`MaglevHash.cpp`, `MaglevBase.cpp`: MurmurHash3_x64_64 with seeds 0, 2307, 42
//!   and 2718281828 for offset and skip, weight 1);
//! - `lru_mapping`: one LRU hash per CPU, `LruSize / CPUs` entries each (`kDefaultLruSize` 8,000,000);
//! - `ctl_array[0]`: the MAC every encapsulated packet is sent to (Katran's "default router").
//!
//! Where it differs, and why:
//! - A real's Maglev `hash` is folly's `IPAddress::hash()` in Katran; folly is not reproduced here, so the ring is
//!   built from a hash of our own over the address: the same algorithm and parameters, other permutations.
//! - `ch_rings` is made for one VIP (`RING_SIZE` entries, not `MAX_VIPS × RING_SIZE`, 134 MB) and `server_id_map`
//!   (QUIC routing, 64 MB preallocated) with one entry: the program bounds every index by the map's lookup, and the
//!   lab's VIP uses neither more VIPs nor QUIC.
//!
//! Katran sends every packet it balances with `XDP_TX` (it has no redirect), so it takes only the lab's `tx` path.

use std::net::IpAddr;
use std::os::fd::AsFd;
use std::path::PathBuf;

use anyhow::{bail, ensure, Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType, ObjectBuilder};
use xnf_core::xdp::{XdpLink, XdpMode};
use xnf_netns::netlink::link_by_name;
use xnf_netns::Mac;
use xnf_netns::Netns;

/// `RING_SIZE` of balancer_consts.h: entries of one VIP's consistent-hash ring.
pub const RING_SIZE: u32 = 65537;
/// `kDefaultLruSize` of KatranLbStructs.h: the connection table's entries, split over the forwarding CPUs.
pub const LRU_SIZE: u32 = 8_000_000;
/// `F_IPV6` of balancer_consts.h: a real's address is IPv6.
const F_IPV6: u8 = 1;
/// The object scripts/peers.sh builds, under the peers' folder.
const OBJECT: &str = "katran/balancer.bpf.o";
/// What scripts/peers.sh records of the build: the checkout's commit and the compiler flags.
const BUILD_NOTE: &str = "katran/BUILD";

/// `struct vip_definition` (balancer_structs.h): 20 bytes, the address union first.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct VipDefinition {
    pub addr: [u8; 16],
    /// Network order, as the program copies it from the TCP/UDP header.
    pub port: [u8; 2],
    pub proto: u8,
    pub pad: u8,
}

/// `struct vip_meta`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct VipMeta {
    pub flags: u32,
    pub vip_num: u32,
}

/// `struct real_definition`: 20 bytes.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct RealDefinition {
    pub addr: [u8; 16],
    pub flags: u8,
    pub pad: [u8; 3],
}

/// `struct ctl_value`: a union of a u64, an ifindex and a MAC.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct CtlValue {
    pub mac: [u8; 6],
    pub pad: [u8; 2],
}

/// `struct flow_key`: 40 bytes (the LRU's key).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct FlowKey {
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub ports: [u16; 2],
    pub proto: u8,
    pub pad: [u8; 3],
}

/// `struct real_pos_lru`: 16 bytes (the LRU's value).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct RealPosLru {
    pub pos: u32,
    pub atime: u64,
}

/// `struct lb_stats`: a pair of counters (packets and bytes for `reals_stats`).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct LbStats {
    pub v1: u64,
    pub v2: u64,
}

fn bytes<T: Copy>(v: &T) -> &[u8] {
    // SAFETY: T is a plain #[repr(C)] struct of integers and byte arrays, fully initialised (padding is spelled out).
    unsafe { std::slice::from_raw_parts((v as *const T).cast(), std::mem::size_of::<T>()) }
}

/// `addr` in the 16 bytes of Katran's address unions: an IPv4 address in the first four.
fn addr16(addr: IpAddr) -> [u8; 16] {
    let mut a = [0u8; 16];
    match addr {
        IpAddr::V4(v4) => a[..4].copy_from_slice(&v4.octets()),
        IpAddr::V6(v6) => a = v6.octets(),
    }
    a
}

/// MurmurHash3_x64_64 of two words, as Katran's `katran/lib/MurmurHash3.cpp` computes it for Maglev.
pub fn murmur3_x64_64(a: u64, b: u64, seed: u32) -> u64 {
    const C1: u64 = 0x87c3_7b91_1142_53d5;
    const C2: u64 = 0x4cf5_ad43_2745_937f;
    let fmix = |mut k: u64| {
        k ^= k >> 33;
        k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
        k ^= k >> 33;
        k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        k ^ (k >> 33)
    };
    let (mut h1, mut h2) = (u64::from(seed), u64::from(seed));
    h1 ^= a.wrapping_mul(C1).rotate_left(31).wrapping_mul(C2);
    h1 = h1.rotate_left(27).wrapping_add(h2).wrapping_mul(5).wrapping_add(0x52dc_e729);
    h2 ^= b.wrapping_mul(C2).rotate_left(33).wrapping_mul(C1);
    h2 = h2.rotate_left(31).wrapping_add(h1).wrapping_mul(5).wrapping_add(0x3849_5ab5);
    h1 ^= 16;
    h2 ^= 16;
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    h1 = fmix(h1);
    h2 = fmix(h2);
    h1.wrapping_add(h2)
}

/// Katran's default Maglev ring (`MaglevHash::generateHashRing`, every weight 1) over `reals` (real id, hash):
/// each real's permutation from (offset, skip), slots filled in turn until all `size` are taken.
pub fn maglev_ring(reals: &[(u32, u64)], size: u32) -> Vec<u32> {
    if reals.len() <= 1 {
        return vec![reals.first().map_or(0, |r| r.0); size as usize];
    }
    let perm: Vec<(u64, u64)> =
        reals.iter().map(|&(_, h)| (murmur3_x64_64(h, 42, 0) % u64::from(size), murmur3_x64_64(h, 2_718_281_828, 2307) % u64::from(size - 1) + 1)).collect();
    let mut ring = vec![None::<u32>; size as usize];
    let mut next = vec![0u64; reals.len()];
    let mut taken = 0;
    loop {
        for (i, &(num, _)) in reals.iter().enumerate() {
            let (offset, skip) = perm[i];
            let mut cur = ((offset + next[i] * skip) % u64::from(size)) as usize;
            while ring[cur].is_some() {
                next[i] += 1;
                cur = ((offset + next[i] * skip) % u64::from(size)) as usize;
            }
            ring[cur] = Some(num);
            next[i] += 1;
            taken += 1;
            if taken == size {
                return ring.into_iter().map(|r| r.unwrap_or(0)).collect();
            }
        }
    }
}

/// The endpoint hash of a real (see the module's doc: Katran's is folly's `IPAddress::hash()`).
fn real_hash(addr: IpAddr) -> u64 {
    let a = addr16(addr);
    let (hi, lo) = (u64::from_be_bytes(a[..8].try_into().unwrap()), u64::from_be_bytes(a[8..].try_into().unwrap()));
    murmur3_x64_64(hi, lo, 0x6b61_7472)
}

/// The object scripts/peers.sh built, or one line saying how to build it.
pub fn object() -> Result<PathBuf> {
    object_in(&crate::engine::peers::folder())
}

fn object_in(peers: &std::path::Path) -> Result<PathBuf> {
    let path = peers.join(OBJECT);
    ensure!(
        path.is_file(),
        "katran: {} not found: build Katran's data plane with scripts/peers.sh --katran DIR (DIR: a checkout of github.com/facebookincubator/katran)",
        path.display()
    );
    Ok(path)
}

/// What scripts/peers.sh recorded of the build (commit and flags), for the results' notes.
pub fn build_note() -> String {
    std::fs::read_to_string(crate::engine::peers::folder().join(BUILD_NOTE)).map_or_else(|_| "build not recorded".into(), |s| s.trim().replace('\n', "; "))
}

/// One service for Katran: `vip`:`port`/`proto` over `reals`, encapsulated packets sent to `gateway`.
pub struct Service {
    pub vip: IpAddr,
    pub port: u16,
    /// IPPROTO_TCP or IPPROTO_UDP.
    pub proto: u8,
    pub reals: Vec<IpAddr>,
    pub gateway: Mac,
}

/// Katran's balancer attached (native XDP) to one interface of a lab namespace; detached when dropped.
pub struct KatranGuard {
    _link: XdpLink,
    reals_stats: MapHandle,
    reals: usize,
}

impl KatranGuard {
    /// Loads the object, checks its maps' layouts against ours, fills them for `svc` and attaches to `dev` in `ns`.
    pub fn attach(ns: &Netns, dev: &str, svc: Service) -> Result<Self> {
        let path = object()?;
        let dev = dev.to_string();
        // libbpf-rs objects cannot leave the thread that loaded them; the link and a map's fd can.
        ns.run(move || -> Result<Self> {
            let ifindex = link_by_name(&dev)?.ifindex;
            let mut open = ObjectBuilder::default().open_file(&path).with_context(|| format!("opening {}", path.display()))?;
            for mut m in open.maps_mut() {
                match m.name().to_str() {
                    Some("ch_rings") => m.set_max_entries(RING_SIZE)?,
                    Some("server_id_map") => m.set_max_entries(1)?,
                    _ => {}
                }
            }
            let obj = open.load().with_context(|| format!("loading Katran's {} (see `dmesg` and the verifier's log above)", path.display()))?;
            let map = |name: &str| -> Result<MapHandle> {
                let m = obj
                    .maps()
                    .find(|m| m.name() == name)
                    .with_context(|| format!("katran: the object has no map {name}: not a Katran balancer this lab knows"))?;
                MapHandle::try_from(&m).with_context(|| format!("katran: opening map {name}"))
            };
            check_layouts(&map)?;
            fill(&map, &svc)?;
            let prog = obj.progs_mut().find(|p| p.name() == "balancer_ingress").context("katran: the object has no program balancer_ingress")?;
            self_check(&prog, &svc)?;
            let link = XdpLink::create(prog.as_fd(), ifindex, &dev, XdpMode::Native)?;
            Ok(KatranGuard { _link: link, reals_stats: map("reals_stats")?, reals: svc.reals.len() })
        })?
    }

    /// Packets Katran sent to each real (its `reals_stats`, summed over CPUs), real 1 first.
    pub fn per_real(&self) -> Result<Vec<u64>> {
        (1..=self.reals as u32)
            .map(|i| {
                let v = self.reals_stats.lookup_percpu(&i.to_ne_bytes(), MapFlags::ANY)?.context("katran: reals_stats has no such real")?;
                Ok(v.iter().map(|c| u64::from_ne_bytes(c[..8].try_into().unwrap())).sum())
            })
            .collect()
    }
}

/// Runs the loaded program (BPF_PROG_TEST_RUN) over 64 flows per real before it meets a frame: each must come out
/// XDP_TX as IPv4 in IPv4 to one of the reals, from 198.18.0.0/16 (peers.sh's IPIP_V4_PREFIX), to the gateway's MAC,
/// the packet as it came inside; and every real must be picked. Proves the maps are filled as Katran reads them.
fn self_check(prog: &libbpf_rs::ProgramMut, svc: &Service) -> Result<()> {
    let IpAddr::V4(vip) = svc.vip else { return Ok(()) };
    let mut hit = vec![0u32; svc.reals.len()];
    for k in 0..64 * svc.reals.len() as u32 {
        let client = std::net::Ipv4Addr::from(0xc613_0100 + k); // 198.19.1.0 …
        let b = xnf_packet::PacketBuilder::ethernet(Mac([2, 0, 0, 0, 0, 1]), Mac([2, 0, 0, 0, 0, 2])).ip(IpAddr::V4(client), IpAddr::V4(vip));
        let frame =
            if svc.proto == 6 { b.tcp(1024, svc.port, xnf_packet::TcpFlags::ACK).seq(1).ack(1).try_build()? } else { b.udp(1024, svc.port).try_build()? };
        let mut out = vec![0u8; frame.len() + 64];
        let input = libbpf_rs::ProgramInput { data_in: Some(&frame), data_out: Some(&mut out), ..Default::default() };
        let o = prog.test_run(input).context("katran: a test run of balancer_ingress")?;
        let data = o.data.context("katran: the test run gave no frame back")?;
        ensure!(o.return_value == 3, "katran: a flow to the VIP came out with XDP action {}, not XDP_TX: its maps are not as loaded", o.return_value);
        let real = real_of(data, &frame, svc)?;
        hit[real] += 1;
    }
    ensure!(!hit.contains(&0), "katran: of {} test flows no real got any of {hit:?}: its ring is not as loaded", 64 * svc.reals.len());
    Ok(())
}

/// Which real `out` (Katran's frame for `frame`) goes to, after checking it is what Katran's IPIP encap makes.
fn real_of(out: &[u8], frame: &[u8], svc: &Service) -> Result<usize> {
    ensure!(out.len() == frame.len() + 20 && out[..6] == svc.gateway.0 && out[12..14] == [8, 0], "katran: the frame out is not IPv4 to the gateway's MAC");
    let ip = &out[14..34];
    ensure!(
        ip[0] == 0x45 && ip[9] == 4 && ip[12..14] == [198, 18],
        "katran: the frame out is not IPv4 in IPv4 from 198.18.0.0/16 (built without peers.sh's IPIP_V4_PREFIX?)"
    );
    ensure!(out[34..] == frame[14..], "katran: the packet inside is not the one that came");
    let dst = IpAddr::from(<[u8; 4]>::try_from(&ip[16..20]).unwrap());
    svc.reals.iter().position(|&r| r == dst).with_context(|| format!("katran: a flow went to {dst}, not a real"))
}

/// Refuses an object whose maps' keys and values are not the sizes of the structs above (another Katran layout).
fn check_layouts(map: &dyn Fn(&str) -> Result<MapHandle>) -> Result<()> {
    use std::mem::size_of;
    let want: [(&str, usize, usize); 6] = [
        ("vip_map", size_of::<VipDefinition>(), size_of::<VipMeta>()),
        ("reals", 4, size_of::<RealDefinition>()),
        ("ch_rings", 4, 4),
        ("ctl_array", 4, size_of::<CtlValue>()),
        ("reals_stats", 4, size_of::<LbStats>()),
        ("lru_mapping", 4, 4),
    ];
    for (name, k, v) in want {
        let m = map(name)?;
        let (mk, mv) = (m.key_size() as usize, m.value_size() as usize);
        if (mk, mv) != (k, v) {
            bail!("katran: map {name} has key/value of {mk}/{mv} bytes where this lab's loader has {k}/{v}: a Katran layout it does not know (build the commit the lab README names)");
        }
    }
    Ok(())
}

/// Fills the maps as KatranLb would for `svc` (see the module's doc).
fn fill(map: &dyn Fn(&str) -> Result<MapHandle>, svc: &Service) -> Result<()> {
    let vip = VipDefinition { addr: addr16(svc.vip), port: svc.port.to_be_bytes(), proto: svc.proto, pad: 0 };
    map("vip_map")?.update(bytes(&vip), bytes(&VipMeta { flags: 0, vip_num: 0 }), MapFlags::ANY).context("katran: adding the VIP")?;
    let reals = map("reals")?;
    let mut ids = Vec::new();
    for (i, &r) in svc.reals.iter().enumerate() {
        let id = i as u32 + 1;
        let def = RealDefinition { addr: addr16(r), flags: if r.is_ipv6() { F_IPV6 } else { 0 }, pad: [0; 3] };
        reals.update(&id.to_ne_bytes(), bytes(&def), MapFlags::ANY).context("katran: adding a real")?;
        ids.push((id, real_hash(r)));
    }
    let rings = map("ch_rings")?;
    let ring = maglev_ring(&ids, RING_SIZE);
    let keys: Vec<u8> = (0..RING_SIZE).flat_map(|k| k.to_ne_bytes()).collect();
    let values: Vec<u8> = ring.iter().flat_map(|r| r.to_ne_bytes()).collect();
    rings.update_batch(&keys, &values, RING_SIZE, MapFlags::ANY, MapFlags::ANY).context("katran: writing the Maglev ring")?;
    map("ctl_array")?
        .update(&0u32.to_ne_bytes(), bytes(&CtlValue { mac: svc.gateway.0, pad: [0; 2] }), MapFlags::ANY)
        .context("katran: setting the gateway's MAC")?;
    let cpus = libbpf_rs::num_possible_cpus()? as u32;
    let lrus = map("lru_mapping")?;
    let opts = libbpf_sys::bpf_map_create_opts { sz: std::mem::size_of::<libbpf_sys::bpf_map_create_opts>() as _, ..Default::default() };
    for cpu in 0..cpus {
        let lru = MapHandle::create(
            MapType::LruHash,
            Some(format!("katran_lru{cpu}")),
            std::mem::size_of::<FlowKey>() as u32,
            std::mem::size_of::<RealPosLru>() as u32,
            LRU_SIZE / cpus,
            &opts,
        )
        .context("katran: making a CPU's connection table")?;
        let fd = std::os::fd::AsRawFd::as_raw_fd(&lru.as_fd()) as u32;
        lrus.update(&cpu.to_ne_bytes(), &fd.to_ne_bytes(), MapFlags::ANY).context("katran: installing a CPU's connection table")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// Sizes and offsets of katran/lib/bpf/balancer_structs.h (commit 19f08fec82fb, 2026-08-22), by hand from the
    /// C rules: unions of 16 bytes first, then the small members, padded to the largest alignment.
    #[test]
    fn layouts_are_katrans() {
        assert_eq!((size_of::<VipDefinition>(), offset_of!(VipDefinition, port), offset_of!(VipDefinition, proto)), (20, 16, 18));
        assert_eq!((size_of::<VipMeta>(), offset_of!(VipMeta, vip_num)), (8, 4));
        assert_eq!((size_of::<RealDefinition>(), offset_of!(RealDefinition, flags)), (20, 16));
        assert_eq!(size_of::<CtlValue>(), 8);
        assert_eq!((size_of::<FlowKey>(), offset_of!(FlowKey, dst), offset_of!(FlowKey, ports), offset_of!(FlowKey, proto)), (40, 16, 32, 36));
        assert_eq!((size_of::<RealPosLru>(), offset_of!(RealPosLru, atime)), (16, 8));
        assert_eq!(size_of::<LbStats>(), 16);
    }

    /// The values Katran's own katran/lib/MurmurHash3.cpp and MaglevHash.cpp (commit 19f08fec82fb) give, compiled
    /// alone with g++ for this test's inputs: the hash and the ring algorithm are Katran's, bit for bit.
    #[test]
    fn murmur_and_maglev_match_katrans_code() {
        assert_eq!(murmur3_x64_64(1, 2, 0), 16063648466534526982);
        assert_eq!(murmur3_x64_64(0x1234_5678_9ABC_DEF0, 42, 0), 17316371820207082798);
        assert_eq!(murmur3_x64_64(0x1234_5678_9ABC_DEF0, 2_718_281_828, 2307), 18254679442414625671);
        assert_eq!(maglev_ring(&[(1, 1000), (2, 2000), (3, 3000)], 13), vec![2, 3, 3, 1, 3, 1, 2, 2, 3, 1, 1, 2, 1]);
    }

    #[test]
    fn an_unbuilt_katran_is_refused_in_one_line_naming_the_build() {
        let dir = std::env::temp_dir().join(format!("xnf-katran-test-{}", std::process::id()));
        let e = format!("{:#}", object_in(&dir).unwrap_err());
        assert!(e.starts_with("katran: ") && e.contains("scripts/peers.sh --katran DIR") && !e.contains('\n'), "{e}");
    }

    #[test]
    fn the_ring_is_full_and_balanced() {
        let reals: Vec<(u32, u64)> = (1..=4).map(|i| (i, real_hash(IpAddr::from([198, 18, 10 + i as u8, 2])))).collect();
        let ring = maglev_ring(&reals, RING_SIZE);
        assert_eq!(ring.len(), RING_SIZE as usize);
        let mut n = [0u32; 5];
        ring.iter().for_each(|&r| n[r as usize] += 1);
        assert_eq!(n[0], 0, "no slot left without a real");
        // Maglev gives each of N reals within one slot of size/N.
        for c in &n[1..] {
            assert!(c.abs_diff(RING_SIZE / 4) <= 1, "{n:?}");
        }
        assert_eq!(maglev_ring(&reals[..1], 7), vec![1; 7]);
    }
}
