//! The flood and what recognises it: the generator's UDP frames from many
//! sources in the lab range to a port the victim does not serve (or, with
//! `--flood syn`, TCP SYNs to a port it listens on), the blocklist of the
//! second scenario ([`super::blocklist`]), the rules the flood meets before
//! the one that drops it (`--rules`), and the same match written for each
//! filter (an xnf rule file, nftables, xdp-filter's port list).

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use anyhow::{ensure, Result};
use xnf_packet::{PacketBuilder, TcpFlags};

use super::blocklist::{Blocklist, BlocklistKind};
use crate::engine::topology::BuiltTopology;
use crate::programs::gen::GenConfig;

/// Where flood sources start without a blocklist: 198.19.0.0/16 is in the
/// lab range and holds no link of any topology (they use 198.18.0.0/20).
const SOURCE_BASE: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 0);

/// The first UDP port of the rules the flood does not meet (`--rules`):
/// above the flood's default port and the victim's service.
const OTHER_PORTS_FROM: u16 = 10_000;

/// What the flood is and how filters recognise it.
pub struct Flood {
    /// The destination port: one the victim does not serve (UDP), or
    /// listens on without ever accepting (SYN).
    pub port: u16,
    /// TCP SYNs instead of UDP: the SYN-flood scenario.
    pub syn: bool,
    /// Source addresses, one flow each.
    pub sources: Vec<IpAddr>,
    /// The second scenario: the list every filter drops by, written to a
    /// file (one prefix per line) for xnf; None: the filters drop by port.
    pub blocklist: Option<Blocklist>,
    /// UDP destination ports of the rules before the one that drops the
    /// flood (`--rules` N: N-1 of them), none of them the flood's or the
    /// victim's service's: every flood frame is checked against each.
    pub other_ports: Vec<u16>,
    /// Some point of the run has such rules (`--rules` > 1): a filter that
    /// loads its matchers by need (xdp-filter-ip's port feature) loads them
    /// at every point, so that all points measure one program.
    pub rules_swept: bool,
}

impl Flood {
    /// `sources` addresses counting up from 198.19.0.1, dropped by port.
    pub fn by_port(port: u16, sources: u32) -> Result<Flood> {
        ensure!((1..=65_000).contains(&sources), "--sources {sources}: use 1..=65000 (they count up from {SOURCE_BASE}, inside 198.19.0.0/16)");
        let base = u32::from(SOURCE_BASE);
        let sources = (1..=sources).map(|i| IpAddr::V4(Ipv4Addr::from(base + i))).collect();
        Ok(Flood { port, sources, blocklist: None, syn: false, other_ports: Vec::new(), rules_swept: false })
    }

    /// A list of `size` entries of `kind` ([`Blocklist::new`]), the
    /// flood's `sources` spread over distinct entries of its slice in the
    /// lab range; filters drop by the list. The list file goes to `dir`.
    pub fn by_blocklist(port: u16, kind: BlocklistKind, size: u64, sources: u32, dir: &Path) -> Result<Flood> {
        let (list, sources) = Blocklist::new(kind, size, sources, dir)?;
        Ok(Flood { port, sources, blocklist: Some(list), syn: false, other_ports: Vec::new(), rules_swept: false })
    }

    /// `self` with `rules` rules in every filter, the one that drops the
    /// flood last: `rules - 1` UDP ports from 10000 up, skipping the
    /// flood's port and `service` (the victim's).
    pub fn with_rules(mut self, rules: u32, service: u16) -> Flood {
        let skip = [self.port, service];
        self.other_ports = (OTHER_PORTS_FROM..=u16::MAX).filter(|p| !skip.contains(p)).take(rules.saturating_sub(1) as usize).collect();
        self
    }

    /// The generator's frames: 64-byte UDP (or TCP SYNs) from every source
    /// to `victim`'s port, addressed to dut's ingress MAC.
    pub fn traffic(&self, t: &BuiltTopology, victim: IpAddr) -> Result<GenConfig> {
        let roles = t.roles()?;
        let b = PacketBuilder::ethernet(t.mac(&roles.gen)?, t.mac(&roles.dut_in)?).ip(self.sources[0], victim);
        let b = if self.syn { b.tcp(1024, self.port, TcpFlags::SYN) } else { b.udp(1024, self.port) };
        let frame = b.frame_len(60).try_build()?;
        Ok(GenConfig { template: frame, ipv6: false, flows: 1, base_sport: 1024, src_addrs: self.sources.clone(), ..Default::default() })
    }

    /// For the generator's side of a SYN flood: an xnf rule file that drops
    /// what comes back to the flood's sources (the SYN-ACKs), so the
    /// generator's kernel never receives them. Every variant's answers
    /// end there alike, at the cost of an XDP drop.
    pub fn reply_sink_rules() -> String {
        format!("default = \"pass\"\n\n[[rule]]\nname = \"answers to the flood\"\ndst = \"{SOURCE_BASE}/16\"\naction = \"drop\"\n")
    }

    /// The xnf filter's rule file: the rules the flood does not meet, then
    /// the one that drops it (answers its SYNs with cookies); the rest passes.
    pub fn xnf_rules(&self) -> String {
        if self.syn {
            return format!("default = \"pass\"\n\n[[rule]]\nname = \"syn-flood\"\nproto = \"tcp\"\ndport = {}\naction = \"syn-cookie\"\n", self.port);
        }
        let mut t = String::from("default = \"pass\"\n");
        if let Some(b) = &self.blocklist {
            let _ = write!(t, "\n[lists]\nflood = \"{}\"\n", b.path.display());
        }
        for p in &self.other_ports {
            let _ = write!(t, "\n[[rule]]\nname = \"port-{p}\"\nproto = \"udp\"\ndport = {p}\naction = \"drop\"\n");
        }
        match &self.blocklist {
            None => {
                let _ = write!(t, "\n[[rule]]\nname = \"flood\"\nproto = \"udp\"\ndport = {}\naction = \"drop\"\n", self.port);
            }
            Some(_) => t.push_str("\n[[rule]]\nname = \"blocklist\"\nsrc = \"@flood\"\naction = \"drop\"\n"),
        }
        t
    }

    /// An nftables table `family name` with a chain on `hook` (e.g.
    /// `ingress device "xnfin" priority -500`): the rules the flood does
    /// not meet, one rule each (a linear list as a user writes it, not a
    /// set, which would be one lookup whatever their number), then the
    /// one that counts in counter `dropped` and drops the flood.
    pub fn nft_table(&self, family: &str, name: &str, hook: &str) -> String {
        let mut t = format!("table {family} {name} {{\n\tcounter dropped {{ }}\n");
        let rule = match &self.blocklist {
            None => format!("meta l4proto udp udp dport {}", self.port),
            Some(b) => {
                match b.kind {
                    // Nested prefixes (half of a BGP-like table) merge into
                    // their covering ones: an interval set holds no overlaps.
                    BlocklistKind::Prefixes => t.push_str("\tset flood {\n\t\ttype ipv4_addr\n\t\tflags interval\n\t\tauto-merge\n\t\telements = {\n"),
                    // Single addresses: a plain set, a hash table.
                    BlocklistKind::Addresses => t.push_str("\tset flood {\n\t\ttype ipv4_addr\n\t\telements = {\n"),
                }
                for p in b.prefixes.prefixes() {
                    let _ = if b.kind == BlocklistKind::Addresses { writeln!(t, "\t\t\t{},", p.addr()) } else { writeln!(t, "\t\t\t{p},") };
                }
                t.push_str("\t\t}\n\t}\n");
                "ip saddr @flood".to_string()
            }
        };
        let _ = write!(t, "\tchain c {{\n\t\ttype filter hook {hook}; policy accept;\n");
        for p in &self.other_ports {
            let _ = writeln!(t, "\t\tmeta l4proto udp udp dport {p} drop");
        }
        let _ = write!(t, "\t\t{rule} counter name \"dropped\" drop\n\t}}\n}}\n");
        t
    }
}

/// One point of a variant's curve: the flood rate it was sent at and the
/// victim's transactions per second (medians over the runs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CurvePoint {
    pub flood_pps: f64,
    pub tps: f64,
}

/// The flood rate at which the transactions fall to half of those without
/// a flood (the first point, at rate 0): linear between the two measured
/// rates around the crossing; None if they never fall that far.
pub fn half_rate(curve: &[CurvePoint]) -> Option<f64> {
    let base = curve.first()?.tps;
    let half = base / 2.0;
    curve.windows(2).find(|w| w[1].tps <= half).map(|w| {
        let (a, b) = (w[0], w[1]);
        if a.tps <= b.tps {
            return b.flood_pps;
        }
        a.flood_pps + (b.flood_pps - a.flood_pps) * (a.tps - half) / (a.tps - b.tps)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(flood_pps: f64, tps: f64) -> CurvePoint {
        CurvePoint { flood_pps, tps }
    }

    #[test]
    fn half_rate_interpolates_between_the_rates_around_the_crossing() {
        let c = [pt(0.0, 20000.0), pt(1e6, 15000.0), pt(2e6, 5000.0)];
        // 10,000 is half way from 15,000 to 5,000.
        assert_eq!(half_rate(&c), Some(1.5e6));
        assert_eq!(half_rate(&[pt(0.0, 20000.0), pt(3e6, 19000.0)]), None, "never halved");
        assert_eq!(half_rate(&[pt(0.0, 20000.0), pt(1e6, 10000.0)]), Some(1e6), "exactly half");
        assert_eq!(half_rate(&[]), None);
    }

    #[test]
    fn rules_drop_the_flood_by_port_or_by_list() {
        let f = Flood::by_port(9, 4).unwrap();
        assert_eq!(f.sources.len(), 4);
        assert_eq!(f.sources[0], "198.19.0.1".parse::<IpAddr>().unwrap());
        let rules = f.xnf_rules();
        assert!(rules.contains("proto = \"udp\"\ndport = 9\naction = \"drop\""), "{rules}");
        let nft = f.nft_table("netdev", "xnffilter", "ingress device \"xnfin\" priority -500");
        assert!(nft.contains("udp dport 9 counter name \"dropped\" drop") && nft.contains("hook ingress device"), "{nft}");
        assert!(Flood::by_port(9, 0).is_err());
    }

    #[test]
    fn a_blocklist_holds_the_sources_and_is_written_for_every_filter() {
        let dir = std::env::temp_dir().join(format!("xnf-filter-flood-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = Flood::by_blocklist(9, BlocklistKind::Prefixes, 5000, 64, &dir).unwrap();
        let b = f.blocklist.as_ref().unwrap();
        assert_eq!(std::fs::read_to_string(&b.path).unwrap().lines().count(), 5000);
        for s in &f.sources {
            assert!(b.prefixes.prefixes().iter().any(|p| p.contains(s)), "{s} not in the list");
            assert!(xnf_netns::is_test_ip(*s), "{s} outside the lab range");
        }
        assert!(f.xnf_rules().contains(&format!("flood = \"{}\"", b.path.display())));
        assert!(f.nft_table("ip", "t", "prerouting priority raw").contains("ip saddr @flood counter"));
        let path = b.path.clone();
        drop(f);
        assert!(!path.exists(), "the list file goes with the flood");
        // Addresses: a plain set of addresses (no intervals), /32s for xnf.
        let f = Flood::by_blocklist(9, BlocklistKind::Addresses, 2000, 64, &dir).unwrap().with_rules(3, 5001);
        let nft = f.nft_table("ip", "t", "prerouting priority raw");
        assert!(nft.contains("set flood {\n\t\ttype ipv4_addr\n\t\telements = {\n") && !nft.contains("interval"), "{nft}");
        assert!(!nft.contains("/32"), "addresses, not prefixes");
        let rules = f.xnf_rules();
        assert!(rules.find("dport = 10001").unwrap() < rules.find("src = \"@flood\"").unwrap(), "the list's rule last: {rules}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_flood_meets_n_minus_one_rules_before_the_one_that_drops_it() {
        let f = Flood::by_port(10_001, 4).unwrap().with_rules(4, 10_000);
        assert_eq!(f.other_ports, [10_002, 10_003, 10_004], "neither the flood's port nor the service's");
        let rules = f.xnf_rules();
        assert_eq!(rules.matches("[[rule]]").count(), 4);
        assert!(rules.trim_end().ends_with("name = \"flood\"\nproto = \"udp\"\ndport = 10001\naction = \"drop\""), "{rules}");
        xnf_filter::rules::RuleSet::parse(&rules, "test").unwrap();
        let nft = f.nft_table("ip", "t", "prerouting priority raw");
        let chain = &nft[nft.find("chain c").unwrap()..];
        assert_eq!(chain.matches(" drop\n").count(), 4, "one rule each, not a set: {nft}");
        assert!(chain.find("dport 10004 drop").unwrap() < chain.find("dport 10001 counter").unwrap(), "{nft}");
        assert!(Flood::by_port(9, 4).unwrap().with_rules(1, 5001).other_ports.is_empty());
    }
}
