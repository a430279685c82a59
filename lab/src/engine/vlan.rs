//! 802.1Q at a point of `xnf lab router` (`--vlan`): which side of dut is
//! tagged, the VLAN devices that make it so, and the probe that refuses
//! tagged points up front on a kernel without 802.1Q.
//!
//! ```text
//!  gen [gen] ── VID 100 ── [in] dut [out] ── VID 200 ── [sink] sink
//!                           └ in.100    out.200 ┘
//! ```
//!
//! A tagged side of dut is a VLAN device on its veth that takes over the
//! veth's addresses (and, on the egress, the permanent neighbour entries
//! towards the sink), so the kernel routes through it and `xnf router`'s
//! follower finds it. Only dut gets VLAN devices: gen's frames come from the
//! XDP generator, tagged by its template, with MACs from the topology, and
//! the sink counts in XDP on its veth, which sees the tagged frames, and
//! needs no neighbour resolution (dut's entries are permanent).

use std::fmt;

use anyhow::{bail, ensure, Context, Result};
use serde::Serialize;
use xnf_core::features::{load_module, Feature};
use xnf_netns::{Mac, Netns, Offload};

use super::params::{Point, Value};
use super::topology::{ifname, BuiltTopology};
use crate::programs::sink::SinkCounter;

/// The VLAN ID between gen and dut (tagged ingress).
pub const GEN_VID: u16 = 100;
/// The VLAN ID between dut and the sink (tagged egress).
pub const SINK_VID: u16 = 200;

/// Which side of dut carries an 802.1Q tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// Untagged in, untagged out.
    None,
    /// Tagged in (VID 100), untagged out.
    In,
    /// Untagged in, tagged out (VID 200).
    Out,
    /// Tagged in and out.
    Both,
}

impl Pattern {
    pub const ALL: [Pattern; 4] = [Pattern::None, Pattern::In, Pattern::Out, Pattern::Both];

    pub fn name(self) -> &'static str {
        match self {
            Pattern::None => "none",
            Pattern::In => "in",
            Pattern::Out => "out",
            Pattern::Both => "both",
        }
    }

    /// `--vlan` values, one element of the list.
    pub fn parse(s: &str) -> Result<Pattern, String> {
        let s = s.trim();
        Pattern::ALL.into_iter().find(|p| p.name() == s).ok_or_else(|| format!("`{s}`: --vlan takes none, in, out or both"))
    }

    /// The VLAN ID of dut's ingress, if tagged.
    pub fn ingress_vid(self) -> Option<u16> {
        matches!(self, Pattern::In | Pattern::Both).then_some(GEN_VID)
    }

    /// The VLAN ID of dut's egress, if tagged.
    pub fn egress_vid(self) -> Option<u16> {
        matches!(self, Pattern::Out | Pattern::Both).then_some(SINK_VID)
    }

    /// The pattern of `p`: its `vlan`, none if it has none (a sweep of
    /// `none` alone leaves the parameter out, so points read as before).
    pub fn of(p: &Point) -> Result<Pattern> {
        match p.get("vlan") {
            None => Ok(Pattern::None),
            Some(Value::Text(t)) => Pattern::parse(t).map_err(|e| anyhow::anyhow!("the point's vlan {e}")),
            Some(v) => bail!("the point's vlan is {v}, not a pattern"),
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl From<Pattern> for Value {
    fn from(p: Pattern) -> Value {
        Value::Text(p.name().into())
    }
}

/// Refuses tagged patterns on a kernel that cannot make a VLAN device:
/// the module is looked for and loaded, then a VLAN device is made on a
/// veth in a scratch namespace (removed again), so nothing is built for a
/// run that could not finish.
pub fn require_8021q(patterns: &[Pattern]) -> Result<()> {
    let Some(first) = patterns.iter().find(|p| **p != Pattern::None) else {
        return Ok(());
    };
    let refuse = |why: String| {
        anyhow::anyhow!(
            "--vlan {first}: this kernel has no 802.1Q support (module 8021q / CONFIG_VLAN_8021Q: {why}): only --vlan none runs here; the 6.1 guest has it (scripts/kernels.sh)"
        )
    };
    Feature::Vlan.probe().map_err(refuse)?;
    load_module("8021q").map_err(|e| refuse(format!("{e:#}")))?;
    // Only the VLAN device's creation answers the question: the scratch
    // namespace and veth failing is another problem, reported as itself.
    let ns = Netns::new("vlanprobe")?;
    xnf_netns::veth(&ns, "xnfvp0", &ns, "xnfvp1", None)?;
    create_vlan(&ns, "xnfvp0", "xnfvp0.7", 7).map_err(|e| refuse(format!("{e:#}")))
}

/// Checks that the frames a forwarder delivered during one run carry the
/// pattern's egress tag (VLAN 200) or none, read from the sink's tag
/// counters (`count_tags`). A few frames of dut's own (IPv6 router
/// solicitations, MLD reports) may go either way: the check allows 1 %
/// and 100 frames.
pub struct TagCheck<'a> {
    pattern: Pattern,
    variant: String,
    sink: &'a SinkCounter,
    /// (packets, tagged, tagged with VLAN 200) at the start.
    start: (u64, u64, u64),
}

impl<'a> TagCheck<'a> {
    pub fn start(pattern: Pattern, variant: &str, sink: &'a SinkCounter) -> Result<TagCheck<'a>> {
        let start = read(sink)?;
        Ok(TagCheck { pattern, variant: variant.into(), sink, start })
    }

    /// Fails, in one line, if the frames that arrived are not the pattern's.
    pub fn check(self) -> Result<()> {
        let now = read(self.sink)?;
        let counted = (now.0 - self.start.0, now.1 - self.start.1, now.2 - self.start.2);
        tags_fit(self.pattern, &self.variant, counted)
    }
}

/// Whether (frames, tagged, tagged with VLAN 200) at the sink fit the
/// pattern's egress, but for 1 % and 100 frames.
fn tags_fit(p: Pattern, v: &str, (n, tagged, ours): (u64, u64, u64)) -> Result<()> {
    let slack = n / 100 + 100;
    match p.egress_vid() {
        Some(vid) => ensure!(
            ours + slack >= n,
            "--vlan {p}, {v}: {} of the {n} frames at the sink lack a VLAN {vid} tag ({} untagged): dut did not tag its egress",
            n - ours,
            n - tagged
        ),
        None => ensure!(tagged <= slack, "--vlan {p}, {v}: {tagged} of the {n} frames at the sink are tagged: dut did not untag its egress"),
    }
    Ok(())
}

fn read(sink: &SinkCounter) -> Result<(u64, u64, u64)> {
    let (tagged, ours) = sink.tags()?;
    Ok((sink.packets()?, tagged, ours))
}

/// `ip link add link PARENT name NAME type vlan id VID`.
fn create_vlan(ns: &Netns, parent: &str, name: &str, vid: u16) -> Result<()> {
    ns.ip(&["link", "add", "link", parent, "name", name, "type", "vlan", "id", &vid.to_string()])?;
    Ok(())
}

/// [`create_vlan`], up (its parent is).
fn add_vlan(ns: &Netns, parent: &str, name: &str, vid: u16) -> Result<()> {
    create_vlan(ns, parent, name, vid)?;
    ns.link_up(name)
}

/// The VLAN device's name on `parent`: `parent.VID`, within the 15 bytes
/// of an interface name (so the topology's names must leave room).
pub fn vlan_name(parent: &str, vid: u16) -> Result<String> {
    let name = format!("{parent}.{vid}");
    ensure!(name.len() <= 15, "--vlan: the VLAN device `{name}` would be longer than 15 bytes: give dut's interfaces shorter names in the topology");
    Ok(name)
}

/// One side of dut made tagged: the VLAN device and what it took over.
struct Side<'a> {
    ns: &'a Netns,
    parent: String,
    dev: String,
    cidrs: Vec<String>,
    neighbours: Vec<(String, Mac)>,
    /// TX VLAN offload was on and is turned back on.
    txvlan: bool,
}

/// dut's VLAN devices at a point, for as long as it lives: dropping it
/// deletes them and gives the veths back their addresses and neighbours.
pub struct Tagged<'a> {
    sides: Vec<Side<'a>>,
}

impl<'a> Tagged<'a> {
    /// Tags dut's sides as `pattern` says (nothing for none); on failure
    /// whatever was done is undone.
    pub fn new(t: &'a BuiltTopology, pattern: Pattern) -> Result<Tagged<'a>> {
        let roles = t.roles()?;
        let mut me = Tagged { sides: Vec::new() };
        for (ep, vid) in [(&roles.dut_in, pattern.ingress_vid()), (&roles.dut_out, pattern.egress_vid())] {
            if let Some(vid) = vid {
                me.tag(t, ep, vid).with_context(|| format!("--vlan {pattern}: tagging {ep} with VLAN {vid}"))?;
            }
        }
        Ok(me)
    }

    /// The device dut routes through on the side of its veth `parent`:
    /// the VLAN device when that side is tagged, else the veth itself.
    pub fn device(&self, parent: &str) -> String {
        self.sides.iter().find(|s| s.parent == parent).map_or_else(|| parent.to_string(), |s| s.dev.clone())
    }

    fn tag(&mut self, t: &'a BuiltTopology, ep: &str, vid: u16) -> Result<()> {
        let (ns, parent) = t.endpoint(ep)?;
        let dev = vlan_name(&parent, vid)?;
        let cidrs = t.cidrs(ep);
        let neighbours = neighbours_on(t, ep)?;
        // The tag in the frame, where a NIC puts it: with TX VLAN offload a
        // veth hands the peer's XDP the tag outside the frame.
        let txvlan = ns.offload(&parent, Offload::TxVlan)?;
        let side = Side { ns, parent: parent.clone(), dev: dev.clone(), cidrs, neighbours, txvlan };
        add_vlan(ns, &parent, &dev, vid)?;
        // Recorded before it is configured: a failure from here on is undone.
        self.sides.push(side);
        let side = self.sides.last().expect("pushed");
        if txvlan {
            ns.set_offload(&parent, Offload::TxVlan, false)?;
        }
        for c in &side.cidrs {
            ns.ip(&["addr", "del", c, "dev", &parent])?;
        }
        let mut b = ns.batch();
        for c in &side.cidrs {
            b.addr_add(&dev, c)?;
        }
        for (a, mac) in &side.neighbours {
            b.neigh_add(a, *mac, &dev)?;
        }
        b.apply()
    }
}

impl Drop for Tagged<'_> {
    fn drop(&mut self) {
        for s in self.sides.drain(..).rev() {
            let ns = s.ns;
            // The device's addresses, routes and neighbours go with it.
            let _ = ns.ip(&["link", "del", &s.dev]);
            // One at a time: a set-up that failed half-way left some
            // addresses on the veth, and re-adding those fails harmlessly.
            let back = s.cidrs.iter().map(|c| ns.addr_add(&s.parent, c));
            // IPv4 flushes a device's neighbours, permanent ones too, when
            // its last address goes.
            let neighbours = s.neighbours.iter().map(|(a, mac)| ns.neigh_add(a, *mac, &s.parent));
            for e in back.chain(neighbours).filter_map(Result::err) {
                if !format!("{e:#}").contains("exists") {
                    eprintln!("xnf lab: giving {} back what its VLAN device had: {e:#}", s.parent);
                }
            }
            if s.txvlan {
                let _ = ns.set_offload(&s.parent, Offload::TxVlan, true);
            }
        }
    }
}

/// The topology's neighbour entries on endpoint `ep` (address, MAC).
fn neighbours_on(t: &BuiltTopology, ep: &str) -> Result<Vec<(String, Mac)>> {
    let (ns, dev) = ep.split_once(':').context("an endpoint is namespace:interface")?;
    t.spec
        .neighbours
        .iter()
        .filter(|n| n.ns == ns && ifname(&n.dev) == ifname(dev))
        .map(|n| Ok((n.ip.clone(), n.mac.parse::<Mac>().or_else(|_| t.mac(&n.mac))?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_parse_and_name_their_tags() {
        assert_eq!(Pattern::parse(" both").unwrap(), Pattern::Both);
        assert!(Pattern::parse("qinq").unwrap_err().contains("none, in, out or both"));
        let tags: Vec<(Option<u16>, Option<u16>)> = Pattern::ALL.iter().map(|p| (p.ingress_vid(), p.egress_vid())).collect();
        assert_eq!(tags, [(None, None), (Some(100), None), (None, Some(200)), (Some(100), Some(200))]);
        assert_eq!(Pattern::of(&Point::default()).unwrap(), Pattern::None, "no vlan: untagged");
        assert_eq!(Pattern::of(&Point::default().with("vlan", Pattern::Out)).unwrap(), Pattern::Out);
        assert!(Pattern::of(&Point::default().with("vlan", 3u32)).is_err());
    }

    #[test]
    fn vlan_devices_are_named_after_their_parent_within_15_bytes() {
        assert_eq!(vlan_name("xnfin", 100).unwrap(), "xnfin.100");
        assert!(format!("{:#}", vlan_name("xnfingress01", 100).unwrap_err()).contains("longer than 15 bytes"));
    }

    #[test]
    fn the_sink_must_see_the_patterns_egress_tags() {
        assert!(tags_fit(Pattern::Out, "xnf", (1_000_000, 999_000, 999_000)).is_ok());
        assert!(tags_fit(Pattern::None, "xnf", (1_000_000, 50, 0)).is_ok(), "dut's own frames may be tagged");
        assert!(tags_fit(Pattern::In, "xnf", (0, 0, 0)).is_ok(), "nothing arrived: the rate says so");
        let e = format!("{:#}", tags_fit(Pattern::Both, "kernel", (10_000, 10_000, 0)).unwrap_err());
        assert_eq!(e, "--vlan both, kernel: 10000 of the 10000 frames at the sink lack a VLAN 200 tag (0 untagged): dut did not tag its egress");
        let e = format!("{:#}", tags_fit(Pattern::Out, "kernel", (10_000, 0, 0)).unwrap_err());
        assert!(e.contains("(10000 untagged)"), "{e}");
        let e = format!("{:#}", tags_fit(Pattern::In, "xdp-forward", (10_000, 10_000, 0)).unwrap_err());
        assert_eq!(e, "--vlan in, xdp-forward: 10000 of the 10000 frames at the sink are tagged: dut did not untag its egress");
    }

    #[test]
    fn untagged_needs_no_802_1q() {
        require_8021q(&[Pattern::None]).unwrap();
        require_8021q(&[]).unwrap();
    }
}
