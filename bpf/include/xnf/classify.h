/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Traffic classes: the header fields a class looks at, how a frame's
 * fields are read, and whether they match. Shared by the chain classifier
 * (chain.bpf.c) and the AF_XDP selector (afxdp.bpf.c), so `--match` means
 * the same everywhere (Rust side: crates/core/src/class.rs).
 */
#pragma once

#include "common.h"
#include "parsing.h"

/* Fields a class looks at (xnf_match.flags). */
enum xnf_match_flag {
	XNF_M_VLAN = 1 << 0,  /* one 802.1Q tag with this VID (else: untagged only) */
	XNF_M_PROTO = 1 << 1,
	XNF_M_SPORT = 1 << 2, /* UDP/TCP source port range */
	XNF_M_DPORT = 1 << 3,
	XNF_M_SRC = 1 << 4,   /* source prefix */
	XNF_M_DST = 1 << 5,   /* destination prefix */
};

struct xnf_match {
	__u16 flags;
	__u16 vid;
	__u8 family;     /* 0 (any), AF_INET or AF_INET6 */
	__u8 proto;
	__u16 pad;
	__u16 sport_lo, sport_hi;  /* host order, inclusive */
	__u16 dport_lo, dport_hi;
	__u32 src[4], src_mask[4]; /* network order, IPv4 in word 0 */
	__u32 dst[4], dst_mask[4];
};

/* The header fields classes look at. */
struct flow {
	__u32 src[4], dst[4]; /* network order; IPv4 in word 0 */
	__u16 sport, dport;   /* host order */
	__u16 vid;
	__u8 tagged;
	__u8 family;
	__u8 proto;
	__u8 has_ports;
	__be16 l3_proto;
};

/* Why a frame has no flow. */
enum xnf_flow_result {
	XNF_FLOW_OK = 0,
	XNF_FLOW_MALFORMED, /* truncated or self-contradicting headers */
	XNF_FLOW_QINQ,      /* 802.1ad or stacked tags */
	XNF_FLOW_NON_IP,    /* ARP, LLDP, ... */
};

/* Source and destination address, protocol and ports of an IPv4 packet.
 * Only a first fragment carries ports; later ones match no port rule. */
static __always_inline int flow_ipv4(struct cursor *c, struct flow *f)
{
	struct iphdr *iph = parse_ipv4(c);
	__u32 ihl, tot_len;

	if (!iph || iph->version != 4 || iph->ihl < 5)
		return -1;
	ihl = iph->ihl * 4;
	/* The kernel drops what its length fields contradict; so classify
	 * nothing a receiver's stack would only throw away. */
	tot_len = bpf_ntohs(iph->tot_len);
	if (tot_len < ihl || tot_len > bytes_left(iph, c))
		return -1;
	f->family = AF_INET;
	f->proto = iph->protocol;
	f->src[0] = iph->saddr;
	f->dst[0] = iph->daddr;
	if (iph->frag_off & bpf_htons(0x1fff))
		return 0;
	if (f->proto == IPPROTO_UDP || f->proto == IPPROTO_TCP) {
		__be16 *l4 = (void *)iph + ihl;

		if ((void *)(l4 + 2) > c->end)
			return 0; /* truncated L4: no port rule matches */
		f->sport = bpf_ntohs(l4[0]);
		f->dport = bpf_ntohs(l4[1]);
		f->has_ports = 1;
	}
	return 0;
}

/* IPv6: ports only when UDP/TCP follows the fixed header directly. */
static __always_inline int flow_ipv6(struct cursor *c, struct flow *f)
{
	struct ipv6hdr *ip6h = parse_ipv6(c);

	if (!ip6h || ip6h->version != 6)
		return -1;
	if (bpf_ntohs(ip6h->payload_len) + sizeof(*ip6h) > bytes_left(ip6h, c))
		return -1;
	f->family = AF_INET6;
	f->proto = ip6h->nexthdr;
	__builtin_memcpy(f->src, &ip6h->saddr, sizeof(f->src));
	__builtin_memcpy(f->dst, &ip6h->daddr, sizeof(f->dst));
	if (f->proto == IPPROTO_UDP || f->proto == IPPROTO_TCP) {
		__be16 *l4 = (void *)(ip6h + 1);

		if ((void *)(l4 + 2) > c->end)
			return 0;
		f->sport = bpf_ntohs(l4[0]);
		f->dport = bpf_ntohs(l4[1]);
		f->has_ports = 1;
	}
	return 0;
}

/* After the Ethernet header at @c: at most one 802.1Q tag, then IP. */
static __always_inline __u32 flow_after_eth(struct cursor *c, __be16 proto, struct flow *f)
{
	if (proto == bpf_htons(ETH_P_8021AD))
		return XNF_FLOW_QINQ;
	if (proto == bpf_htons(ETH_P_8021Q)) {
		struct vlan_hdr *vh = parse_vlan(c);

		if (!vh)
			return XNF_FLOW_MALFORMED;
		proto = vh->h_vlan_encapsulated_proto;
		if (proto_is_vlan(proto))
			return XNF_FLOW_QINQ;
		f->tagged = 1;
		f->vid = bpf_ntohs(vh->h_vlan_TCI) & VLAN_VID_MASK;
	}
	f->l3_proto = proto;
	if (proto == bpf_htons(ETH_P_IP))
		return flow_ipv4(c, f) ? XNF_FLOW_MALFORMED : XNF_FLOW_OK;
	if (proto == bpf_htons(ETH_P_IPV6))
		return flow_ipv6(c, f) ? XNF_FLOW_MALFORMED : XNF_FLOW_OK;
	return XNF_FLOW_NON_IP;
}

static __always_inline int prefix_match(const __u32 *addr, const __u32 *net, const __u32 *mask)
{
	return ((addr[0] & mask[0]) == net[0]) & ((addr[1] & mask[1]) == net[1]) &
	       ((addr[2] & mask[2]) == net[2]) & ((addr[3] & mask[3]) == net[3]);
}

static __always_inline int match_flow(const struct xnf_match *m, const struct flow *f)
{
	if (m->flags & XNF_M_VLAN) {
		if (!f->tagged || f->vid != m->vid)
			return 0;
	} else if (f->tagged) {
		return 0;
	}
	if (m->family && m->family != f->family)
		return 0;
	if ((m->flags & XNF_M_PROTO) && m->proto != f->proto)
		return 0;
	if ((m->flags & (XNF_M_SPORT | XNF_M_DPORT)) && !f->has_ports)
		return 0;
	if ((m->flags & XNF_M_SPORT) && (f->sport < m->sport_lo || f->sport > m->sport_hi))
		return 0;
	if ((m->flags & XNF_M_DPORT) && (f->dport < m->dport_lo || f->dport > m->dport_hi))
		return 0;
	if ((m->flags & XNF_M_SRC) && !prefix_match(f->src, m->src, m->src_mask))
		return 0;
	if ((m->flags & XNF_M_DST) && !prefix_match(f->dst, m->dst, m->dst_mask))
		return 0;
	return 1;
}
