//! Synthetic route tables for the route-lookup experiments, installed in a
//! lab namespace through xnf-netns's batched rtnetlink.
//!
//! The prefixes follow the public BGP table's length mix (see
//! `xnf_netns::RouteSet`). An IPv4 table of a million prefixes cannot fit in
//! the lab's 198.18.0.0/15, so the table spans unicast space like a real
//! one; the experiment only ever sends to [`Installed::targets`], which lie
//! inside the lab range (in prefixes of the table), so no packet is ever
//! addressed outside it.
//!
//! `--routes FILE` installs a table dump instead ([`read_table`]: one
//! prefix per line, or an MRT dump read by `mrt.rs`): IPv4
//! prefixes as they are (plus a synthetic slice in the lab's range for the
//! traffic, which a real table never covers), real IPv6 prefixes moved
//! into 2001:db8::/32 ([`lab_v6`]).

use std::io::{BufRead, Read};
use std::net::{IpAddr, Ipv6Addr};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, ensure, Context, Result};
use ipnet::{IpNet, Ipv6Net};
use xnf_core::class::parse_prefix;
use xnf_netns::{lookup_targets, InstalledRoutes, Netns, RouteSet};

use super::params::Value;

/// Seed of every synthetic table: the same count gives the same table, so
/// runs are comparable.
const SEED: u64 = 0x786e66;

fn synthetic_set(ipv6: bool, count: u64) -> Result<RouteSet> {
    let n = usize::try_from(count).context("route count too large")?;
    if ipv6 {
        RouteSet::synthetic_v6(n, SEED)
    } else {
        RouteSet::synthetic_v4(n, SEED)
    }
}

fn gateway(via: &str) -> Result<IpAddr> {
    via.parse().map_err(|_| anyhow!("synthetic routes need `via` = a gateway address, got `{via}`"))
}

/// Installs `count` synthetic prefixes via `via` out of `dev`; they stay
/// until the namespace goes (topology files use this).
pub fn install_synthetic(ns: &Netns, ipv6: bool, count: u64, via: &str, dev: Option<&str>) -> Result<()> {
    let dev = dev.ok_or_else(|| anyhow!("synthetic routes need `dev` = the interface towards `via`"))?;
    let set = synthetic_set(ipv6, count)?;
    ns.install_routes(&set, gateway(via)?, dev)?;
    Ok(())
}

/// What `--routes` takes: a number of synthetic prefixes, or a table dump.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Routes {
    /// That many synthetic prefixes (0: none).
    Count(u64),
    /// A table dump: one prefix per line ([`parse_table`]) or MRT ([`read_table`]).
    File(PathBuf),
}

impl Routes {
    /// A value that parses as a number is a count, anything else a path.
    pub fn parse(s: &str) -> Result<Routes, String> {
        let s = s.trim();
        if s.is_empty() {
            return Err("an empty --routes value: give a count or a table file".into());
        }
        Ok(match s.parse::<u64>() {
            Ok(n) => Routes::Count(n),
            Err(_) => Routes::File(PathBuf::from(s)),
        })
    }

    /// The point's value: the count, or the file's path as given.
    pub fn from_value(v: &Value) -> Result<Routes> {
        match v {
            Value::Int(n) => Ok(Routes::Count(u64::try_from(*n).context("a negative route count")?)),
            Value::Text(p) => Ok(Routes::File(PathBuf::from(p))),
            Value::Bool(_) => bail!("routes: not a count or a file"),
        }
    }

    /// Refuses what cannot be installed before anything is built: a count
    /// above `max`, a file that does not read or parse.
    pub fn check(&self, max: u64) -> Result<()> {
        match self {
            Routes::Count(n) => ensure!(*n <= max, "--routes {n}: at most {max}"),
            Routes::File(p) => {
                read_table(p)?;
            }
        }
        Ok(())
    }
}

impl From<Routes> for Value {
    fn from(r: Routes) -> Value {
        match r {
            Routes::Count(n) => Value::from(n),
            Routes::File(p) => Value::Text(p.display().to_string()),
        }
    }
}

impl serde::Serialize for Routes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Routes::Count(n) => s.serialize_u64(*n),
            Routes::File(p) => s.serialize_str(&p.display().to_string()),
        }
    }
}

/// A table dump read from a file: its prefixes by family, as the lab
/// installs them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableFile {
    pub v4: Vec<IpNet>,
    /// Real IPv6 prefixes (2000::/4) moved into 2001:db8::/32 ([`lab_v6`]).
    pub v6: Vec<IpNet>,
    /// Lines or MRT entries that repeated a prefix (dumps taken from
    /// several peers do).
    pub duplicates: usize,
    /// MRT only: announced prefixes the lab cannot install (a default
    /// route, bogons, IPv6 longer than /100), left out. A text table fails
    /// on such a line instead: it can be edited, a dump cannot.
    pub skipped: usize,
}

impl TableFile {
    fn add(&mut self, net: IpNet) {
        match net {
            IpNet::V4(_) => self.v4.push(net),
            IpNet::V6(_) => self.v6.push(net),
        }
    }

    /// Sorted, repeats counted and dropped.
    fn finish(mut self) -> TableFile {
        for list in [&mut self.v4, &mut self.v6] {
            let n = list.len();
            list.sort_unstable();
            list.dedup();
            self.duplicates += n - list.len();
        }
        self
    }
}

/// A prefix as the lab installs it (IPv6 moved into 2001:db8::/32), if it
/// follows the rules every installed table follows (global unicast IPv4,
/// nothing on the links).
fn installable(net: IpNet) -> Result<IpNet> {
    let net = match net {
        IpNet::V6(p) => IpNet::V6(lab_v6(p)?),
        v4 => v4,
    };
    RouteSet::from_prefixes(vec![net])?;
    Ok(net)
}

/// Bits the lab's IPv6 range adds to a real IPv6 prefix: 2000::/4 is
/// moved onto 2001:db8::/32, so every length grows by 32 - 4.
pub const V6_FILE_SHIFT: u8 = 28;

/// A real IPv6 prefix (inside 2000::/4, at most /100) at its place inside
/// 2001:db8::/32: its bits after the first four follow 2001:db8::. The
/// tree keeps its shape (lengths relative to each other); real allocations
/// never use 2000::/16, so nothing lands on the links' 2001:db8::/44. A
/// prefix already inside 2001:db8::/32 is a lab table's and stays.
pub fn lab_v6(p: Ipv6Net) -> Result<Ipv6Net> {
    let lab: Ipv6Net = "2001:db8::/32".parse().expect("a prefix");
    if lab.contains(&p) {
        return Ok(p);
    }
    let global: Ipv6Net = "2000::/4".parse().expect("a prefix");
    ensure!(global.contains(&p), "{p} is not global unicast IPv6 (2000::/4, at most /4 long)");
    ensure!(p.prefix_len() <= 128 - V6_FILE_SHIFT, "{p}: longer than /{}, no room for it in 2001:db8::/32", 128 - V6_FILE_SHIFT);
    let bits = (u128::from(p.network()) << 4) >> 32 | u128::from(lab.network());
    Ok(Ipv6Net::new(Ipv6Addr::from(bits), p.prefix_len() + V6_FILE_SHIFT)?)
}

/// Parses a table dump: one IPv4 or IPv6 prefix per line (an address alone
/// is a host prefix), `#` starts a comment, blank lines are skipped. A
/// line that is not a prefix the lab can install fails the whole table
/// with `origin` and the line number: nothing is installed from it.
pub fn parse_table(text: &str, origin: &str) -> Result<TableFile> {
    let mut t = TableFile::default();
    for (i, line) in text.lines().enumerate() {
        let entry = line.split('#').next().unwrap_or("").trim();
        if entry.is_empty() {
            continue;
        }
        let at = || format!("{origin}: line {}", i + 1);
        ensure!(!entry.contains(char::is_whitespace), "{}: `{entry}`: one prefix per line", at());
        // Checked line by line to name the line.
        t.add(installable(parse_prefix(entry).with_context(at)?).with_context(at)?);
    }
    Ok(t.finish())
}

/// The prefixes of an MRT dump (`mrt.rs`) as the lab installs them; the
/// copies of one it cannot install are counted in `skipped`. Each distinct
/// prefix is checked once: a full dump repeats every one per peer.
pub fn parse_mrt(reader: impl std::io::Read, origin: &str) -> Result<TableFile> {
    let mut t = TableFile::default();
    // Each distinct prefix, and whether the lab installs it.
    let mut seen = std::collections::HashMap::<IpNet, bool>::new();
    super::mrt::prefixes(reader, origin, |net| match seen.get(&net) {
        Some(true) => t.duplicates += 1,
        Some(false) => t.skipped += 1,
        None => {
            let ok = installable(net).map(|n| t.add(n)).is_ok();
            t.skipped += usize::from(!ok);
            seen.insert(net, ok);
        }
    })?;
    Ok(t.finish())
}

/// Reads and parses the table in `path`: text with one prefix per line, or
/// an MRT dump, either gzip-compressed or not (read as a stream).
pub fn read_table(path: &Path) -> Result<TableFile> {
    let origin = path.display().to_string();
    let mut r = super::mrt::open(path, &origin)?;
    if super::mrt::is_binary(r.fill_buf().with_context(|| format!("--routes {origin}: cannot read it"))?) {
        return parse_mrt(r, &origin);
    }
    let mut bytes = Vec::new();
    r.read_to_end(&mut bytes).with_context(|| format!("--routes {origin}: cannot read it to the end (a gzip file cut short or corrupt?)"))?;
    let text = String::from_utf8(bytes).map_err(|_| anyhow!("--routes {origin}: neither text (one prefix per line) nor MRT"))?;
    parse_table(&text, &origin)
}

/// A table to install: its prefixes and what it is, for results.
pub struct Table {
    pub set: RouteSet,
    /// "synthetic" or the file's name.
    pub source: String,
    /// Prefixes from the source (the rest are synthetic traffic targets).
    pub from_source: usize,
    /// What the table is, in one line for notes.
    pub about: String,
}

/// Synthetic prefixes in the lab's slice added to a dump that has none
/// there: real IPv4 tables leave 198.18.0.0/15 out, and the traffic may
/// only go to lab addresses.
const TARGET_SLICE: usize = 4096;

impl Table {
    /// The table `routes` names for one family (None for 0 routes).
    pub fn load(routes: &Routes, ipv6: bool) -> Result<Option<Table>> {
        let family = if ipv6 { "IPv6" } else { "IPv4" };
        match routes {
            Routes::Count(0) => Ok(None),
            Routes::Count(n) => Ok(Some(Table {
                set: synthetic_set(ipv6, *n)?,
                source: "synthetic".into(),
                from_source: *n as usize,
                about: format!("{n} synthetic {family} prefixes"),
            })),
            Routes::File(path) => {
                let t = read_table(path)?;
                let (mine, other) = if ipv6 { (t.v6, t.v4.len()) } else { (t.v4, t.v6.len()) };
                let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
                ensure!(
                    !mine.is_empty(),
                    "--routes {}: no {family} prefixes in it ({other} of the other family{})",
                    path.display(),
                    if ipv6 { "" } else { ": add --ipv6?" }
                );
                let n = mine.len();
                let mut about = format!("table {name}: {n} {family} prefixes");
                if ipv6 {
                    about.push_str(" (real ones moved into 2001:db8::/32, each length + 28)");
                }
                let mut prefixes = mine;
                if lookup_targets(&prefixes, 1).is_err() {
                    let slice = synthetic_set(ipv6, TARGET_SLICE as u64)?;
                    prefixes.extend(slice.prefixes().iter().copied().filter(|p| prefixes.binary_search(p).is_err()).collect::<Vec<_>>());
                    about.push_str(&format!(" + {} synthetic ones in the lab's range that the traffic goes to", prefixes.len() - n));
                }
                if t.duplicates > 0 || other > 0 {
                    about.push_str(&format!(" ({} repeated lines, {other} prefixes of the other family left out)", t.duplicates));
                }
                if t.skipped > 0 {
                    about.push_str(&format!(
                        " ({} announced prefixes the lab cannot install left out: default routes, bogons, IPv6 longer than /100)",
                        t.skipped
                    ));
                }
                Ok(Some(Table { set: RouteSet::from_prefixes(prefixes)?, source: name, from_source: n, about }))
            }
        }
    }
}

/// Synthetic routes removed again when dropped (the router experiment
/// installs a table per sweep point).
pub struct Installed<'a> {
    routes: InstalledRoutes<'a>,
}

impl<'a> Installed<'a> {
    /// Installs `set` via `via` out of `dev`.
    pub fn new(ns: &'a Netns, set: RouteSet, via: &str, dev: &str) -> Result<Installed<'a>> {
        let routes = InstalledRoutes::new(ns, set, gateway(via)?, dev)?;
        Ok(Installed { routes })
    }

    /// Seconds the batched install took.
    pub fn install_seconds(&self) -> f64 {
        self.routes.report().seconds
    }

    /// Up to `n` destinations in distinct installed prefixes, all inside
    /// the lab's address range. A small table has fewer prefixes there than
    /// a sweep has flows: then fewer are returned and the generator's flows
    /// repeat destinations (with distinct ports).
    pub fn targets(&self, n: usize) -> Result<Vec<IpAddr>> {
        targets(self.routes.routes(), n)
    }
}

/// Up to `n` destinations in distinct prefixes of `set`, all inside the
/// lab's address range (see [`Installed::targets`]).
pub fn targets(set: &RouteSet, n: usize) -> Result<Vec<IpAddr>> {
    let mut want = n.max(1);
    loop {
        match set.lookup_targets(want) {
            Ok(t) => return Ok(t),
            Err(_) if want > 1 => want /= 2,
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(v: &[IpNet]) -> Vec<String> {
        v.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_dump_parses_with_comments_blank_lines_and_repeats() {
        let text = "# a dump\n\n1.0.0.0/24\n203.0.113.0/24   # a comment\n1.0.0.0/24\n  8.8.8.0/24\n2a00:1450::/32\n2001:db8:100::/48\n9.9.9.9\n";
        let t = parse_table(text, "bgp.txt").unwrap();
        assert_eq!(nets(&t.v4), ["1.0.0.0/24", "8.8.8.0/24", "9.9.9.9/32", "203.0.113.0/24"]);
        // 2a00:1450::/32 moved: its bits after the first four follow 2001:db8::.
        assert_eq!(nets(&t.v6), ["2001:db8:100::/48", "2001:db8:a001:4500::/60"]);
        assert_eq!(t.duplicates, 1);
    }

    #[test]
    fn a_bad_line_fails_the_table_naming_file_and_line() {
        for (text, line, why) in [
            ("1.0.0.0/24\n1.0.0.1/24\n", "line 2", "host bits"),
            ("# x\n\n1.0.0.0/33\n", "line 3", "not an IP prefix"),
            ("1.0.0.0/24 via 2.2.2.2\n", "line 1", "one prefix per line"),
            ("1.0.0.0/24\n10.0.0.0/8\n", "line 2", "global unicast"),
            ("198.18.0.0/24\n", "line 1", "links"),
            ("fe80::/10\n", "line 1", "not global unicast IPv6"),
            ("2001:db8:100::1/128\n2a00::/120\n", "line 2", "longer than /100"),
        ] {
            let e = format!("{:#}", parse_table(text, "bgp.txt").unwrap_err());
            assert!(e.contains("bgp.txt: ") && e.contains(line) && e.contains(why) && !e.contains('\n'), "{text:?}: {e}");
        }
    }

    #[test]
    fn real_ipv6_prefixes_keep_their_tree_inside_the_lab_range() {
        let p = |s: &str| lab_v6(s.parse().unwrap()).unwrap().to_string();
        assert_eq!(p("2000::/4"), "2001:db8::/32");
        assert_eq!(p("2001:4860::/32"), "2001:db8:14:8600::/60");
        // A more-specific stays inside its aggregate.
        let (agg, more) = (lab_v6("2a00:1450::/32".parse().unwrap()).unwrap(), lab_v6("2a00:1450:4001::/48".parse().unwrap()).unwrap());
        assert!(agg.contains(&more) && more.prefix_len() == 76);
    }

    #[test]
    fn a_value_that_parses_as_a_number_is_a_count() {
        assert_eq!(Routes::parse("1000").unwrap(), Routes::Count(1000));
        assert_eq!(Routes::parse(" 0 ").unwrap(), Routes::Count(0));
        assert_eq!(Routes::parse("bgp.txt").unwrap(), Routes::File("bgp.txt".into()));
        assert_eq!(Routes::parse("1e6").unwrap(), Routes::File("1e6".into()));
        assert!(Routes::parse("").is_err());
        assert_eq!(Routes::from_value(&Value::from(Routes::File("t.txt".into()))).unwrap(), Routes::File("t.txt".into()));
        assert!(Routes::Count(3_000_000).check(2_000_000).unwrap_err().to_string().contains("--routes 3000000"));
    }

    #[test]
    fn a_real_ipv4_table_gets_lab_targets_and_says_so() {
        let dir = std::env::temp_dir().join(format!("xnf-lab-table-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("rib.txt");
        std::fs::write(&path, "1.0.0.0/24\n1.0.4.0/22\n2a00:1450::/32\n").unwrap();
        let t = Table::load(&Routes::File(path.clone()), false).unwrap().unwrap();
        assert_eq!((t.source.as_str(), t.from_source, t.set.len()), ("rib.txt", 2, 2 + TARGET_SLICE));
        assert!(t.about.starts_with("table rib.txt: 2 IPv4 prefixes + 4096 synthetic") && t.about.contains("1 prefixes of the other family"), "{}", t.about);
        assert!(t.set.lookup_targets(100).is_ok());
        let v6 = Table::load(&Routes::File(path.clone()), true).unwrap().unwrap();
        assert_eq!(v6.set.len(), 1, "a moved IPv6 table has targets of its own");
        std::fs::write(&path, "2a00:1450::/32\n").unwrap();
        let e = Table::load(&Routes::File(path.clone()), false).err().unwrap().to_string();
        assert!(e.contains("no IPv4 prefixes") && e.contains("--ipv6"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
