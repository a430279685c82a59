/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * The routing half shared by every xnf program that forwards with the
 * kernel FIB (router, chain exit): checking a parsed IP packet (parse.h)
 * the way the kernel's forwarding path would, filling struct
 * bpf_fib_lookup from it, naming why a lookup failed, and the TTL /
 * hop-limit decrement.
 *
 * Whatever these functions refuse is handed to the kernel with XDP_PASS by
 * the caller, so the kernel's own answer (ICMP error, option processing,
 * neighbour resolution) stays exactly what it is without XDP.
 */
#pragma once

#include "common.h"
#include "parse.h"
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
	XNF_R_MULTICAST,     /* broadcast/multicast destination (ARP, ND, LLDP): never routed */
	XNF_R_UNCONFIGURED,  /* the interface's slot is empty: a control-plane fault */
	XNF_R_EGRESS_SKB,    /* egress attached in skb mode: no XDP transmit from the driver hook */
	XNF_R_MARTIAN,       /* an address the kernel never forwards between (source or destination) */
	XNF_R_MAX,
};

/*
 * The kernel's reverse-path filter on an ingress (net.ipv4.conf.*.rp_filter,
 * the larger of "all" and the device's own): the source of a forwarded
 * packet must be routed back out of the ingress (strict) or at all (loose).
 */
enum xnf_rpf {
	XNF_RPF_OFF = 0,
	XNF_RPF_STRICT = 1,
	XNF_RPF_LOOSE = 2,
};

enum xnf_fib_limits {
	XNF_MAX_LOCALS = 4096,        /* local and broadcast IPv4 addresses a source check holds */
	XNF_LOCALS_FILTER_BITS = 12,  /* log2 of the bits of the locals' filter */
	XNF_LOCALS_FILTER_WORDS = 64, /* its 64-bit words */
};

/*
 * The host's own IPv4 addresses and its broadcast addresses (the /32
 * entries of the kernel's local table), as sources the kernel never
 * forwards: fib_validate_source refuses a local source outright, and a
 * broadcast source whenever it checks the way back (rp_filter, policy
 * rules). Every program that forwards has this table; its control plane
 * fills it (xnf_core::sources::write_locals).
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XNF_MAX_LOCALS);
	__type(key, __be32);
	__type(value, __u32);
} locals SEC(".maps");

/*
 * A filter in front of that table: bit h(a) is set for every address a in
 * it (the control plane sets the new bits before it adds addresses and
 * clears old ones after it removes them: the filter always covers the
 * table). A forwarded packet's source is almost never local, and a clear
 * bit says so with one inlined array load instead of a hash lookup (4 ns
 * per packet here); a set bit takes the table's exact answer.
 */
struct xnf_locals_filter {
	__u64 bits[XNF_LOCALS_FILTER_WORDS];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xnf_locals_filter);
} locals_filter SEC(".maps");

/* The filter's bit of an address: the top bits of a multiplicative hash of
 * the address as it sits in the header (crates/core/src/sources.rs has the
 * same function). */
static __always_inline __u32 xnf_locals_bit(__be32 a)
{
	return ((__u32)a * 0x9e3779b1u) >> (32 - XNF_LOCALS_FILTER_BITS);
}

/* True if @a is one of the host's own or broadcast addresses. */
static __always_inline int xnf_is_local(__be32 a)
{
	struct xnf_locals_filter *f;
	__u32 zero = 0, bit = xnf_locals_bit(a);

	f = bpf_map_lookup_elem(&locals_filter, &zero);
	if (f && !(f->bits[(bit >> 6) & (XNF_LOCALS_FILTER_WORDS - 1)] & (1ULL << (bit & 63))))
		return 0;
	return bpf_map_lookup_elem(&locals, &a) != 0;
}

/* True if the IPv4 header at @off (no options) carries a valid checksum. */
static __always_inline int ipv4_csum_ok_at(struct xdp_md *ctx, __u32 off)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct iphdr *iph;

	if (off > XNF_MAX_OFF)
		return 0;
	iph = data + off;
	if ((void *)(iph + 1) > end)
		return 0;
	return ipv4_csum_ok(iph);
}

/*
 * IPv4 addresses the kernel never forwards between, whatever the routes
 * say (ip_route_input_slow; route_localnet is off): a loopback, multicast,
 * limited-broadcast or "this network" (0/8) destination is not unicast-
 * routed; a multicast, limited-broadcast, loopback or 0/8 source is a
 * martian.
 */
static __always_inline int ipv4_martian(__be32 src, __be32 dst)
{
	__u32 s = bpf_ntohl(src), d = bpf_ntohl(dst);

	return (d >> 24) == 127 || (d >> 28) == 0xe || d == 0xffffffff || (d >> 24) == 0 ||
	       (s >> 24) == 127 || (s >> 28) == 0xe || s == 0xffffffff || (s >> 24) == 0;
}

/*
 * IPv6 addresses the kernel refuses on receive (ipv6_rcv: a loopback
 * source or destination, a multicast or v4-mapped source, a multicast
 * destination of scope 0 or 1) or to forward (ip6_forward: an unspecified,
 * multicast, loopback or link-local source). Multicast destinations of
 * wider scope take the kernel's multicast path: they are never unicast-
 * forwarded either (*local).
 */
static __always_inline int ipv6_martian(const __u32 *src, const __u32 *dst, int *local)
{
	__u32 s0 = bpf_ntohl(src[0]), d0 = bpf_ntohl(dst[0]);
	int s_zero = !src[0] && !src[1] && !src[2];
	int d_zero = !dst[0] && !dst[1] && !dst[2];

	if (s_zero && (!src[3] || src[3] == bpf_htonl(1)))
		return 1; /* :: or ::1 */
	if (d_zero && dst[3] == bpf_htonl(1))
		return 1; /* ::1 */
	if ((s0 >> 24) == 0xff || (s0 & 0xffc00000) == 0xfe800000)
		return 1; /* multicast, link-local */
	if (!src[0] && !src[1] && src[2] == bpf_htonl(0xffff))
		return 1; /* v4-mapped */
	if ((d0 >> 24) == 0xff) {
		if (((d0 >> 16) & 0xf) <= 1)
			return 1; /* reserved or interface-local scope */
		*local = 1;
	}
	return 0;
}

/*
 * Checks the parsed IP packet @pkt the way the kernel's forwarding path
 * would before its route lookup. Returns XNF_R_FORWARDED, or why the
 * kernel must handle the packet.
 */
static __always_inline __u32 fib_check(struct xdp_md *ctx, const struct xnf_pkt *pkt)
{
	if (pkt->family == AF_INET) {
		/* Options (record route, timestamps, ...) are rewritten by
		 * forwarding routers; only the kernel implements that. */
		if (pkt->ip_options)
			return XNF_R_IP_OPTIONS;
		/* The kernel drops a header with a bad checksum; so must we. */
		if (!ipv4_csum_ok_at(ctx, pkt->l3_off))
			return XNF_R_BAD_CSUM;
		if (ipv4_martian(pkt->src[0], pkt->dst[0]))
			return XNF_R_MARTIAN;
	} else {
		/* Hop-by-hop options are for every router (and jumbograms carry
		 * their length there): the kernel's business. Other extension
		 * headers are end-to-end and forwarded untouched. */
		int local = 0;

		if (pkt->hbh)
			return XNF_R_IPV6_HBH;
		if (ipv6_martian(pkt->src, pkt->dst, &local))
			return XNF_R_MARTIAN;
		if (local)
			return XNF_R_LOCAL;
	}
	return XNF_R_FORWARDED;
}

/*
 * Fills all of @p (stale bytes included) for bpf_fib_lookup() of the
 * checked packet @pkt arriving on @iif. Done only when the helper runs:
 * a route cache hit never needs it.
 */
static __always_inline void fib_fill(const struct xnf_pkt *pkt, __u32 iif, struct bpf_fib_lookup *p)
{
	__builtin_memset(p, 0, sizeof(*p));
	if (pkt->family == AF_INET) {
		p->family = AF_INET;
		p->tos = pkt->tos;
		p->ipv4_src = pkt->src[0];
		p->ipv4_dst = pkt->dst[0];
	} else {
		p->family = AF_INET6;
		p->flowinfo = pkt->flowinfo;
		__builtin_memcpy(p->ipv6_src, pkt->src, sizeof(p->ipv6_src));
		__builtin_memcpy(p->ipv6_dst, pkt->dst, sizeof(p->ipv6_dst));
	}
	/* The kernel's input route lookup keys on the IP header's own protocol
	 * field (for IPv6 the first next header, ip6_route_input), and hashes
	 * multipath routes over the ports of unfragmented UDP/TCP only: the
	 * same values here give the same path. */
	p->l4_protocol = pkt->ip_proto;
	p->tot_len = pkt->ip_end - pkt->l3_off;
	if (pkt->frag == XNF_FRAG_NONE && pkt->l4 == XNF_L4_PORTS && pkt->ip_proto == pkt->proto) {
		p->sport = bpf_htons(pkt->sport);
		p->dport = bpf_htons(pkt->dport);
	}
	p->ifindex = iif;
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

/* True if the lookup found a route that forwards (whether or not the
 * neighbour is known and the packet fits). */
static __always_inline int fib_forwards(long rc)
{
	return rc == BPF_FIB_LKUP_RET_SUCCESS || rc == BPF_FIB_LKUP_RET_NO_NEIGH ||
	       rc == BPF_FIB_LKUP_RET_FRAG_NEEDED;
}

/*
 * What the kernel's own path says of @pkt after the lookup returned @rc.
 * The route decides first whether the packet is forwarded at all (local
 * delivery, unreachable, blackhole: no TTL check, as in ip_route_input);
 * a packet to be forwarded then has its TTL checked before the neighbour
 * and the MTU (ip_forward, ip6_forward): TTL 1 gets time-exceeded.
 */
static __always_inline __u32 fib_result(long rc, const struct xnf_pkt *pkt)
{
	if (fib_forwards(rc) && pkt->ttl <= 1)
		return XNF_R_TTL;
	if (rc == BPF_FIB_LKUP_RET_SUCCESS)
		return XNF_R_FORWARDED;
	return fib_reason(rc);
}

/*
 * The kernel's source check for an IPv4 packet it would forward
 * (fib_validate_source, run by ip_route_input before ip_forward looks at
 * the TTL), which bpf_fib_lookup() leaves out: never from one of the
 * host's own or broadcast addresses (the locals table above: the
 * /32 local and broadcast entries of the kernel's local table) and, with
 * @rpf on the ingress @iif, only from a source routed back out of @iif
 * (strict) or routed at all (loose). The way back is looked up as the
 * kernel does it: from the destination, as if arriving on the forward
 * route's egress @oif. Returns XNF_R_FORWARDED or why the kernel gets it.
 */
static __always_inline __u32 fib_check_source(struct xdp_md *ctx, const struct xnf_pkt *f, __u32 iif,
					      __u32 oif, __u8 rpf, __u32 fib_flags)
{
	struct bpf_fib_lookup back;
	__be32 src = f->src[0];
	long rc;

	if (xnf_is_local(src))
		return XNF_R_MARTIAN;
	if (rpf == XNF_RPF_OFF)
		return XNF_R_FORWARDED;
	__builtin_memset(&back, 0, sizeof(back));
	back.family = AF_INET;
	back.tos = f->tos;
	back.ipv4_src = f->dst[0];
	back.ipv4_dst = src;
	back.ifindex = oif;
	rc = bpf_fib_lookup(ctx, &back, sizeof(back), fib_flags);
	switch (rc) {
	case BPF_FIB_LKUP_RET_SUCCESS:
	case BPF_FIB_LKUP_RET_NO_NEIGH:
		/* A unicast route back: enough for loose mode, strict mode
		 * wants it through the ingress. (With multipath the kernel
		 * accepts any of the paths; we see one, and hand the others to
		 * the kernel.) */
		return rpf == XNF_RPF_STRICT && back.ifindex != iif ? XNF_R_MARTIAN : XNF_R_FORWARDED;
	case BPF_FIB_LKUP_RET_BLACKHOLE:
	case BPF_FIB_LKUP_RET_UNREACHABLE:
	case BPF_FIB_LKUP_RET_PROHIBIT:
	case BPF_FIB_LKUP_RET_NOT_FWDED:
		/* No unicast route back: the filter drops the packet. */
		return XNF_R_MARTIAN;
	default:
		/* Forwarding off on @oif (which the kernel's own reverse lookup
		 * does not mind), an lwt route: the kernel decides. */
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

