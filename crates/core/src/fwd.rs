//! Why a frame was or was not forwarded by the FIB code the router and the
//! chain exit share (`enum xnf_router_reason` in `bpf/include/xnf/fib.h`).

use crate::abi::types;

crate::c_enum! {
    /// Why a packet got its verdict: forwarded, or why the kernel got it.
    pub enum Reason: types::xnf_router_reason, max XNF_R_MAX {
        Forwarded = XNF_R_FORWARDED => "forwarded",
        NonIp = XNF_R_NON_IP => "non-ip",
        Malformed = XNF_R_MALFORMED => "malformed",
        Qinq = XNF_R_QINQ => "qinq",
        VlanUnknown = XNF_R_VLAN_UNKNOWN => "vlan-unknown",
        NotOurMac = XNF_R_NOT_OUR_MAC => "not-our-mac",
        IpOptions = XNF_R_IP_OPTIONS => "ip-options",
        Ipv6Hbh = XNF_R_IPV6_HBH => "ipv6-hop-by-hop",
        BadCsum = XNF_R_BAD_CSUM => "bad-checksum",
        Ttl = XNF_R_TTL => "ttl",
        Local = XNF_R_LOCAL => "local-or-no-route",
        FwdDisabled = XNF_R_FWD_DISABLED => "fwd-disabled",
        NoNeigh = XNF_R_NO_NEIGH => "no-neigh",
        Mtu = XNF_R_MTU => "mtu",
        Unreachable = XNF_R_UNREACHABLE => "unreachable",
        Unsupported = XNF_R_UNSUPPORTED => "unsupported-route",
        NotManaged = XNF_R_NOT_MANAGED => "not-managed",
        NoHeadroom = XNF_R_NO_HEADROOM => "no-headroom",
        Blackhole = XNF_R_BLACKHOLE => "blackhole",
        Multicast = XNF_R_MULTICAST => "broadcast-multicast",
        Unconfigured = XNF_R_UNCONFIGURED => "unconfigured",
        EgressSkbMode = XNF_R_EGRESS_SKB => "egress-skb-mode",
        Martian = XNF_R_MARTIAN => "martian",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_names_are_unique() {
        let mut names: Vec<_> = Reason::ALL.iter().map(|r| r.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Reason::ALL.len());
    }
}
