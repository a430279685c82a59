//! Parsers for the per-namespace counters in /proc/net/{snmp,snmp6,netstat,dev}.

use std::collections::BTreeMap;

use anyhow::{Context, Result};

/// Protocol counters of one namespace, keyed by (protocol, counter), e.g.
/// `("Ip", "ForwDatagrams")`, `("Icmp", "InTimeExcds")`,
/// `("Ip6", "OutForwDatagrams")`, `("Icmp6", "InTimeExcds")`,
/// `("IpExt", "InNoRoutes")`, `("TcpExt", "ListenDrops")`.
///
/// Built from snmp, snmp6 and netstat; the only value left out is `Tcp MaxConn`,
/// which is -1 rather than a counter.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snmp {
    values: BTreeMap<(String, String), u64>,
}

impl Snmp {
    /// The counter, or `None` if this kernel does not report it.
    pub fn get(&self, proto: &str, name: &str) -> Option<u64> {
        self.values.get(&(proto.to_owned(), name.to_owned())).copied()
    }

    /// The counter, or an error naming the counters that `proto` does have.
    pub fn value(&self, proto: &str, name: &str) -> Result<u64> {
        self.get(proto, name).with_context(|| {
            let known: Vec<&str> = self.values.keys().filter(|(p, _)| p == proto).map(|(_, n)| n.as_str()).collect();
            format!("no SNMP counter {proto} {name}; {proto} has: {known:?}")
        })
    }

    /// All counters in (protocol, counter) order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str, u64)> {
        self.values.iter().map(|((p, n), v)| (p.as_str(), n.as_str(), *v))
    }

    /// Adds the header/value line pairs of /proc/net/snmp or /proc/net/netstat:
    /// `Ip: Forwarding DefaultTTL ...` followed by `Ip: 1 64 ...`.
    pub(crate) fn add_table(&mut self, text: &str) {
        let mut lines = text.lines();
        while let (Some(head), Some(vals)) = (lines.next(), lines.next()) {
            let (Some((proto, names)), Some((_, vals))) = (head.split_once(':'), vals.split_once(':')) else {
                continue;
            };
            for (name, val) in names.split_whitespace().zip(vals.split_whitespace()) {
                if let Ok(v) = val.parse() {
                    self.values.insert((proto.to_owned(), name.to_owned()), v);
                }
            }
        }
    }

    /// Adds the `Ip6InReceives  123` lines of /proc/net/snmp6; the protocol is
    /// the name up to and including its first `6` (Ip6, Icmp6, Udp6, UdpLite6).
    pub(crate) fn add_snmp6(&mut self, text: &str) {
        for line in text.lines() {
            let mut words = line.split_whitespace();
            let (Some(key), Some(val)) = (words.next(), words.next()) else {
                continue;
            };
            let (Some(i), Ok(v)) = (key.find('6'), val.parse()) else {
                continue;
            };
            let (proto, name) = key.split_at(i + 1);
            self.values.insert((proto.to_owned(), name.to_owned()), v);
        }
    }
}

/// Packet counters of one interface, from /proc/net/dev.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub rx_errors: u64,
    pub rx_dropped: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    pub tx_errors: u64,
    pub tx_dropped: u64,
}

/// Every interface's counters in the text of /proc/net/dev.
pub(crate) fn parse_dev_all(text: &str) -> BTreeMap<String, LinkStats> {
    text.lines().filter_map(parse_dev_line).collect()
}

/// Finds `ifname` in the text of /proc/net/dev.
pub(crate) fn parse_dev(text: &str, ifname: &str) -> Option<LinkStats> {
    text.lines().filter_map(parse_dev_line).find(|(name, _)| name == ifname).map(|(_, s)| s)
}

/// One interface's line: `  name: rx_bytes rx_packets ... (16 numbers)`.
fn parse_dev_line(line: &str) -> Option<(String, LinkStats)> {
    let (name, rest) = line.rsplit_once(':')?;
    let v: Vec<u64> = rest.split_whitespace().map(|w| w.parse().ok()).collect::<Option<_>>()?;
    (v.len() >= 16).then(|| {
        (
            name.trim().to_string(),
            LinkStats {
                rx_bytes: v[0],
                rx_packets: v[1],
                rx_errors: v[2],
                rx_dropped: v[3],
                tx_bytes: v[8],
                tx_packets: v[9],
                tx_errors: v[10],
                tx_dropped: v[11],
            },
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_snmp_files() {
        let mut s = Snmp::default();
        s.add_table(
            "Ip: Forwarding DefaultTTL InReceives ForwDatagrams\nIp: 1 64 10 7\n\
             Icmp: InMsgs InTimeExcds\nIcmp: 3 2\nTcp: RtoMin MaxConn\nTcp: 200 -1\n",
        );
        s.add_snmp6("Ip6InReceives                   \t12\nIp6OutForwDatagrams 5\nIcmp6InTimeExcds 4\nUdpLite6InErrors 0\n");
        assert_eq!(s.get("Ip", "ForwDatagrams"), Some(7));
        assert_eq!(s.get("Icmp", "InTimeExcds"), Some(2));
        assert_eq!(s.get("Ip6", "OutForwDatagrams"), Some(5));
        assert_eq!(s.get("Icmp6", "InTimeExcds"), Some(4));
        assert_eq!(s.get("UdpLite6", "InErrors"), Some(0));
        assert_eq!(s.get("Tcp", "MaxConn"), None);
        assert_eq!(s.get("Tcp", "RtoMin"), Some(200));
        assert!(format!("{:#}", s.value("Ip", "Nope").unwrap_err()).contains("ForwDatagrams"));
    }

    #[test]
    fn parses_dev() {
        let text = "Inter-|   Receive                                                |  Transmit\n \
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
 lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0\n\
xnf1dut0: 1000 10 1 2 0 0 0 0 2000 20 3 4 0 0 0 0\n";
        let s = parse_dev(text, "xnf1dut0").unwrap();
        assert_eq!((s.rx_bytes, s.rx_packets, s.rx_errors, s.rx_dropped), (1000, 10, 1, 2));
        assert_eq!((s.tx_bytes, s.tx_packets, s.tx_errors, s.tx_dropped), (2000, 20, 3, 4));
        assert_eq!(parse_dev(text, "lo"), Some(LinkStats::default()));
        assert_eq!(parse_dev(text, "xnf1"), None);
        let all = parse_dev_all(text);
        assert_eq!(all.keys().collect::<Vec<_>>(), ["lo", "xnf1dut0"]);
        assert_eq!((all["xnf1dut0"].rx_packets, all["xnf1dut0"].tx_packets), (10, 20));
    }
}
