/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * The one parser of every xnf program: Ethernet, at most one 802.1Q tag,
 * IPv4 or IPv6 with its extension headers, and the L4 ports. It fills one
 * struct xnf_pkt; each network function decides what to do with it.
 *
 * The rules, decided here once (README: "What the parser accepts"):
 *
 * - Malformed, as the kernel would drop it: a header cut short by the end
 *   of the frame, an IP version that contradicts the ethertype, an IPv4
 *   IHL below 5 or total length below the header or beyond the frame, an
 *   IPv6 payload length beyond the frame.
 * - The IP packet ends where its length field says (ip_end); what follows
 *   is an Ethernet trailer or padding that the kernel trims on receive. No
 *   header is ever read beyond ip_end, so padding never becomes ports.
 * - Tags: one 802.1Q tag is parsed (VID 0 is a priority tag: the frame is
 *   untagged for routing and classes, as in the kernel); an 802.1ad outer
 *   tag or a second tag is "qinq", left to the kernel.
 * - IPv4 options are accepted and skipped (the router hands them to the
 *   kernel itself; classes read past them, as the kernel's delivery does).
 * - IPv4 fragments: an offset (frag_off & 0x1fff) makes a later fragment,
 *   without an L4 header; MF with offset 0 is the first fragment, whose L4
 *   header is read. Either kind is a fragment (frag_off & 0x3fff), and a
 *   fragment contributes no ports to the FIB's multipath hash (the kernel's
 *   flow dissector gives none either, so all fragments hash alike).
 * - IPv6 extension headers (hop-by-hop, routing, fragment, destination
 *   options, authentication) are walked, at most XNF_MAX_EXT of them, up to
 *   the upper-layer protocol; a fragment header with an offset ends the
 *   walk as a later fragment (its next header is the datagram's protocol).
 *   A longer chain, or one cut short by the end of the IP packet, leaves
 *   the protocol unknown (XNF_L4_UNKNOWN): nothing that needs it may match.
 *   A hop-by-hop header anywhere marks the packet (hbh), whatever its length. "No next header" (59) and ESP (50) carry no
 *   ports; neither do other protocols.
 * - L4: only UDP and TCP have ports here. Ports are read when the first
 *   four bytes of the L4 header lie before ip_end; otherwise the L4 header
 *   is truncated and the ports unknown.
 */
#pragma once

#include "common.h"

/* Extension headers walked before giving up on an IPv6 packet's protocol. */
#define XNF_MAX_EXT 8

enum xnf_parse_result {
	XNF_PARSE_OK = 0,
	XNF_PARSE_MALFORMED, /* truncated or self-contradicting headers */
	XNF_PARSE_QINQ,      /* 802.1ad or stacked tags */
	XNF_PARSE_NON_IP,    /* ARP, LLDP, ... */
};

enum xnf_frag {
	XNF_FRAG_NONE = 0,
	XNF_FRAG_FIRST,      /* offset 0, more fragments follow: has the L4 header */
	XNF_FRAG_LATER,      /* offset > 0: no L4 header */
};

/* What is known of the L4 header. */
enum xnf_l4 {
	XNF_L4_PORTS = 0,    /* UDP/TCP, ports read */
	XNF_L4_NO_PORTS,     /* a protocol without ports (ICMP, ESP, no next header, ...) */
	XNF_L4_LATER_FRAG,   /* a later fragment: protocol known, ports not */
	XNF_L4_TRUNCATED,    /* UDP/TCP whose ports lie beyond ip_end */
	XNF_L4_UNKNOWN,      /* extension headers beyond XNF_MAX_EXT or cut short: protocol unknown */
};

struct xnf_pkt {
	__u32 src[4], dst[4];  /* network order; IPv4 in word 0 */
	__be32 flowinfo;       /* IPv6 traffic class and flow label */
	__u16 l3_off;          /* offset of the IP header */
	__u16 l4_off;          /* offset of the L4 header (after options, extension headers) */
	__u16 ip_end;          /* offset of the end of the IP packet */
	__be16 l3_proto;       /* ETH_P_IP or ETH_P_IPV6, after the tag */
	__be16 tci;            /* the 802.1Q tag, network order (tagged only) */
	__u16 vid;             /* its VLAN ID; 0: untagged or priority-tagged */
	__u16 sport, dport;    /* host order (l4 == XNF_L4_PORTS) */
	__u8 tagged;           /* one 802.1Q tag present (any VID, 0 included) */
	__u8 family;           /* AF_INET or AF_INET6 */
	__u8 proto;            /* upper-layer protocol (meaningless with XNF_L4_UNKNOWN) */
	__u8 ip_proto;         /* the IP header's own field: IPv4 protocol, IPv6 first next
	                        * header (what the kernel's route lookup keys on) */
	__u8 frag;             /* enum xnf_frag */
	__u8 l4;               /* enum xnf_l4 */
	__u8 tos;              /* IPv4 TOS */
	__u8 ttl;              /* TTL or hop limit */
	__u8 ip_options;       /* IPv4 header longer than 20 bytes */
	__u8 hbh;              /* IPv6 hop-by-hop options present */
};

static __always_inline int xnf_is_ext_hdr(__u8 nh)
{
	return nh == IPPROTO_HOPOPTS || nh == IPPROTO_ROUTING || nh == IPPROTO_FRAGMENT ||
	       nh == IPPROTO_DSTOPTS || nh == IPPROTO_AH;
}

/* Ports of UDP/TCP at p->l4_off, read only from before ip_end. */
static __always_inline void xnf_parse_ports(void *data, void *end, struct xnf_pkt *p)
{
	__be16 *ports = data + p->l4_off;

	if (p->proto != IPPROTO_UDP && p->proto != IPPROTO_TCP) {
		p->l4 = XNF_L4_NO_PORTS;
		return;
	}
	if ((__u32)p->l4_off + 4 > p->ip_end || (void *)(ports + 2) > end) {
		p->l4 = XNF_L4_TRUNCATED;
		return;
	}
	p->sport = bpf_ntohs(ports[0]);
	p->dport = bpf_ntohs(ports[1]);
	p->l4 = XNF_L4_PORTS;
}

static __always_inline enum xnf_parse_result xnf_parse_ipv4(void *data, void *end, struct xnf_pkt *p)
{
	struct iphdr *iph = data + p->l3_off;
	__u32 ihl, tot_len, frag;

	if ((void *)(iph + 1) > end || iph->version != 4 || iph->ihl < 5)
		return XNF_PARSE_MALFORMED;
	ihl = iph->ihl * 4;
	tot_len = bpf_ntohs(iph->tot_len);
	if (tot_len < ihl || tot_len > (__u32)(end - (void *)iph))
		return XNF_PARSE_MALFORMED;
	p->family = AF_INET;
	p->proto = iph->protocol;
	p->ip_proto = iph->protocol;
	p->tos = iph->tos;
	p->ttl = iph->ttl;
	p->src[0] = iph->saddr;
	p->dst[0] = iph->daddr;
	p->ip_options = ihl > sizeof(*iph);
	p->ip_end = p->l3_off + tot_len;
	p->l4_off = p->l3_off + ihl;
	frag = bpf_ntohs(iph->frag_off);
	if (frag & 0x1fff) {
		p->frag = XNF_FRAG_LATER;
		p->l4 = XNF_L4_LATER_FRAG;
		return XNF_PARSE_OK;
	}
	if (frag & 0x2000)
		p->frag = XNF_FRAG_FIRST;
	xnf_parse_ports(data, end, p);
	return XNF_PARSE_OK;
}

/*
 * Walks the extension headers from p->l4_off. Stops at the upper-layer
 * protocol, at a later fragment, or after XNF_MAX_EXT headers.
 */
static __always_inline void xnf_walk_ipv6_ext(void *data, void *end, struct xnf_pkt *p)
{
	__u32 off = p->l4_off;
	__u8 nh = p->proto;
	int i;

#pragma unroll
	for (i = 0; i < XNF_MAX_EXT; i++) {
		__u32 len;
		__u8 *h;

		if (!xnf_is_ext_hdr(nh))
			break;
		/* Hop-by-hop options are the kernel's to process, whatever they
		 * hold (a payload length of 0 announces a jumbogram there). */
		if (nh == IPPROTO_HOPOPTS)
			p->hbh = 1;
		/* Every extension header has at least 8 bytes, starting with the
		 * next header and the length. */
		if (off > XNF_MAX_OFF || off + 8 > p->ip_end)
			goto cut;
		h = data + off;
		if ((void *)(h + 8) > end)
			goto cut;
		if (nh == IPPROTO_FRAGMENT) {
			__u16 fo = bpf_ntohs(*(__be16 *)(h + 2));

			len = 8;
			if (fo & 0xfff8) {
				p->frag = XNF_FRAG_LATER;
				p->proto = h[0];
				p->l4 = XNF_L4_LATER_FRAG;
				return;
			}
			p->frag = XNF_FRAG_FIRST;
		} else if (nh == IPPROTO_AH) {
			len = ((__u32)h[1] + 2) * 4;
		} else {
			len = ((__u32)h[1] + 1) * 8;
		}
		nh = h[0];
		off += len;
	}
	p->proto = nh;
	if (xnf_is_ext_hdr(nh)) {
		p->l4 = XNF_L4_UNKNOWN;
		return;
	}
	p->l4_off = off;
	xnf_parse_ports(data, end, p);
	return;
cut:
	/* The chain ends before the IP packet does: the protocol behind it
	 * cannot be known. */
	p->proto = nh;
	p->l4 = XNF_L4_UNKNOWN;
}

static __always_inline enum xnf_parse_result xnf_parse_ipv6(void *data, void *end, struct xnf_pkt *p)
{
	struct ipv6hdr *ip6h = data + p->l3_off;
	__u32 plen;

	if ((void *)(ip6h + 1) > end || ip6h->version != 6)
		return XNF_PARSE_MALFORMED;
	plen = bpf_ntohs(ip6h->payload_len);
	if (plen + sizeof(*ip6h) > (__u32)(end - (void *)ip6h))
		return XNF_PARSE_MALFORMED;
	p->family = AF_INET6;
	p->proto = ip6h->nexthdr;
	p->ip_proto = ip6h->nexthdr;
	p->ttl = ip6h->hop_limit;
	p->flowinfo = *(__be32 *)ip6h & bpf_htonl(0x0FFFFFFF);
	__builtin_memcpy(p->src, &ip6h->saddr, sizeof(p->src));
	__builtin_memcpy(p->dst, &ip6h->daddr, sizeof(p->dst));
	p->ip_end = p->l3_off + sizeof(*ip6h) + plen;
	p->l4_off = p->l3_off + sizeof(*ip6h);
	xnf_walk_ipv6_ext(data, end, p);
	return XNF_PARSE_OK;
}

/*
 * Parses the frame of @ctx into @p (zeroed by the caller).
 *
 * Not inlined, on purpose: a BPF subprogram that writes the fields through
 * @p into the caller's stack. Inlined, clang splits struct xnf_pkt into some
 * twenty scalars live across every branch of the parse, BPF's ten
 * registers cannot hold them, and the spills and reloads were most of the
 * router's own time: its cached path took 91 ns per frame inlined, 63 ns
 * as a subprogram (bpf_stats run time, `xnf lab router`, 64 B IPv4). The
 * call itself is a direct call in the JIT; the verifier still follows it
 * per call site, so the callers keep exact bounds on what it wrote.
 *
 * A program that keeps few values live across the parse defines
 * XNF_PARSE_INLINE before including this file: the filter, whose context
 * is in memory anyway, is 1-2 ns faster with it inlined (test run, the
 * flood frame), because on this kernel's mitigations (return thunks) a
 * subprogram's return is not free.
 */
#ifdef XNF_PARSE_INLINE
static __always_inline
#else
static __attribute__((noinline, unused))
#endif
enum xnf_parse_result xnf_parse(struct xdp_md *ctx, struct xnf_pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__be16 proto;

	if ((void *)(eth + 1) > end)
		return XNF_PARSE_MALFORMED;
	proto = eth->h_proto;
	p->l3_off = sizeof(*eth);
	if (proto == bpf_htons(ETH_P_8021AD))
		return XNF_PARSE_QINQ;
	if (proto == bpf_htons(ETH_P_8021Q)) {
		struct vlan_hdr *vh = (void *)(eth + 1);

		if ((void *)(vh + 1) > end)
			return XNF_PARSE_MALFORMED;
		proto = vh->h_vlan_encapsulated_proto;
		if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD))
			return XNF_PARSE_QINQ;
		p->tagged = 1;
		p->tci = vh->h_vlan_TCI;
		p->vid = bpf_ntohs(vh->h_vlan_TCI) & VLAN_VID_MASK;
		p->l3_off += sizeof(*vh);
	}
	p->l3_proto = proto;
	if (proto == bpf_htons(ETH_P_IP))
		return xnf_parse_ipv4(data, end, p);
	if (proto == bpf_htons(ETH_P_IPV6))
		return xnf_parse_ipv6(data, end, p);
	return XNF_PARSE_NON_IP;
}

static __always_inline int xnf_mac_eq(const __u8 *a, const __u8 *b)
{
	return *(const __u32 *)a == *(const __u32 *)b &&
	       *(const __u16 *)(a + 4) == *(const __u16 *)(b + 4);
}

/* Group bit: broadcast and multicast destinations (ARP, ND, LLDP, STP). */
static __always_inline int xnf_mac_is_multicast(const __u8 *mac)
{
	return mac[0] & 1;
}
