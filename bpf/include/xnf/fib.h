/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * The routing half shared by every xnf program that forwards with the
 * kernel FIB (router, chain exit): checking an IP header the way the
 * kernel's forwarding path would, filling struct bpf_fib_lookup from it,
 * naming why a lookup failed, and the TTL / hop-limit decrement.
 *
 * Whatever these functions refuse is handed to the kernel with XDP_PASS by
 * the caller, so the kernel's own answer (ICMP error, option processing,
 * neighbour resolution) stays exactly what it is without XDP.
 */
#pragma once

#include "common.h"
#include "parsing.h"
#include "csum.h"

/*
 * Why a packet got its verdict. Forwarded packets count under
 * XNF_R_FORWARDED; every other reason explains an XDP_PASS (or, for
 * blackhole routes, an XDP_DROP).
 */
enum xnf_router_reason {
	XNF_R_FORWARDED = 0,
	XNF_R_NON_IP,        /* not IPv4/IPv6 (ARP, LLDP, ...) */
	XNF_R_MALFORMED,     /* truncated or inconsistent headers */
	XNF_R_QINQ,          /* 802.1ad or stacked tags */
	XNF_R_VLAN_UNKNOWN,  /* tag whose VID has no VLAN device here */
	XNF_R_NOT_OUR_MAC,   /* Ethernet destination is not the interface */
	XNF_R_IP_OPTIONS,    /* IPv4 options: the kernel processes them */
	XNF_R_IPV6_HBH,      /* IPv6 hop-by-hop options: every router reads them */
	XNF_R_BAD_CSUM,      /* IPv4 header checksum wrong */
	XNF_R_TTL,           /* TTL / hop limit <= 1: kernel sends time-exceeded */
	XNF_R_LOCAL,         /* for this host, or no route (FIB: not forwarded) */
	XNF_R_FWD_DISABLED,  /* forwarding disabled on the ingress interface */
	XNF_R_NO_NEIGH,      /* next hop has no neighbour entry yet */
	XNF_R_MTU,           /* larger than the egress MTU */
	XNF_R_UNREACHABLE,   /* unreachable/prohibit route: kernel sends ICMP */
	XNF_R_UNSUPPORTED,   /* route needs encapsulation (lwt) or has no source */
	XNF_R_NOT_MANAGED,   /* egress interface not attached to this router */
	XNF_R_NO_HEADROOM,   /* could not push a VLAN tag */
	XNF_R_BLACKHOLE,     /* blackhole route: dropped, as the kernel would */
	XNF_R_MAX,
};


/* Ports feed the FIB's multipath hash; only a first fragment has them. */
static __always_inline void fib_ports(struct bpf_fib_lookup *p, void *l4,
				      struct cursor *c, int has_ports)
{
	struct udphdr *uh = l4;

	if (!has_ports || (p->l4_protocol != IPPROTO_UDP &&
			   p->l4_protocol != IPPROTO_TCP))
		return;
	if ((void *)(uh + 1) > c->end)
		return; /* a truncated L4 header is forwarded like the kernel does */
	p->sport = uh->source;
	p->dport = uh->dest;
}

static __always_inline __u32 ipv4_prepare(struct cursor *c, struct bpf_fib_lookup *p)
{
	struct iphdr *iph = parse_ipv4(c);
	__u32 tot_len;

	if (!iph || iph->version != 4 || iph->ihl < 5)
		return XNF_R_MALFORMED;
	tot_len = bpf_ntohs(iph->tot_len);
	if (tot_len < iph->ihl * 4 || tot_len > bytes_left(iph, c))
		return XNF_R_MALFORMED;
	/* Options (record route, timestamps, ...) are rewritten by forwarding
	 * routers; only the kernel implements that. Rare on today's networks. */
	if (iph->ihl != 5)
		return XNF_R_IP_OPTIONS;
	/* The kernel drops a header with a bad checksum; so must we. */
	if (!ipv4_csum_ok(iph))
		return XNF_R_BAD_CSUM;
	/* TTL 1 would expire here: the kernel sends the time-exceeded. */
	if (iph->ttl <= 1)
		return XNF_R_TTL;

	p->family = AF_INET;
	p->tos = iph->tos;
	p->l4_protocol = iph->protocol;
	p->tot_len = tot_len;
	p->ipv4_src = iph->saddr;
	p->ipv4_dst = iph->daddr;
	/* Fragments are forwarded as they are; all fragments of a datagram
	 * hash alike because none of them contributes ports. */
	fib_ports(p, iph + 1, c, !(iph->frag_off & bpf_htons(0x3fff)));
	return XNF_R_FORWARDED;
}

static __always_inline __u32 ipv6_prepare(struct cursor *c, struct bpf_fib_lookup *p)
{
	struct ipv6hdr *ip6h = parse_ipv6(c);
	__u32 plen;

	if (!ip6h || ip6h->version != 6)
		return XNF_R_MALFORMED;
	plen = bpf_ntohs(ip6h->payload_len);
	if (plen + sizeof(*ip6h) > bytes_left(ip6h, c))
		return XNF_R_MALFORMED;
	/* Hop-by-hop options are for every router (and jumbograms carry their
	 * length there): the kernel's business. Other extension headers are
	 * end-to-end and forwarded untouched. */
	if (ip6h->nexthdr == IPPROTO_HOPOPTS)
		return XNF_R_IPV6_HBH;
	if (ip6h->hop_limit <= 1)
		return XNF_R_TTL;

	p->family = AF_INET6;
	p->flowinfo = *(__be32 *)ip6h & bpf_htonl(0x0FFFFFFF);
	p->l4_protocol = ip6h->nexthdr;
	p->tot_len = plen + sizeof(*ip6h);
	__builtin_memcpy(p->ipv6_src, &ip6h->saddr, sizeof(p->ipv6_src));
	__builtin_memcpy(p->ipv6_dst, &ip6h->daddr, sizeof(p->ipv6_dst));
	fib_ports(p, ip6h + 1, c, 1);
	return XNF_R_FORWARDED;
}

/* Map a failed FIB lookup to the reason the kernel gets the packet. */
static __always_inline __u32 fib_reason(long rc)
{
	switch (rc) {
	case BPF_FIB_LKUP_RET_BLACKHOLE:
		return XNF_R_BLACKHOLE;
	case BPF_FIB_LKUP_RET_UNREACHABLE:
	case BPF_FIB_LKUP_RET_PROHIBIT:
		return XNF_R_UNREACHABLE;
	case BPF_FIB_LKUP_RET_NOT_FWDED:
		return XNF_R_LOCAL;
	case BPF_FIB_LKUP_RET_FWD_DISABLED:
		return XNF_R_FWD_DISABLED;
	/* The kernel resolves the neighbour (ARP/ND) when it forwards this
	 * packet itself; once the entry exists the next packets take XDP. */
	case BPF_FIB_LKUP_RET_NO_NEIGH:
		return XNF_R_NO_NEIGH;
	/* The kernel fragments or sends frag-needed / packet-too-big. */
	case BPF_FIB_LKUP_RET_FRAG_NEEDED:
		return XNF_R_MTU;
	default:
		return XNF_R_UNSUPPORTED;
	}
}

/* Decrement TTL / hop limit of the IP header at the constant offset @off. */
static __always_inline int decrement_hops_at(struct xdp_md *ctx, __be16 proto, const int off)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;

	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *iph = data + off;

		if ((void *)(iph + 1) > end)
			return -1;
		ipv4_decrement_ttl(iph);
	} else {
		struct ipv6hdr *ip6h = data + off;

		if ((void *)(ip6h + 1) > end)
			return -1;
		ip6h->hop_limit--;
	}
	return 0;
}

