/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * What xnf lb writes (lb.bpf.c decides when): the outer headers of IP-in-IP
 * and GUE, DSR's MACs, and the ICMP too-big errors it answers with. Every
 * header is written whole, checksummed from scratch; the packet tests
 * compare the bytes with frames built independently (tests/packets.rs).
 */
#pragma once

#include "xnf/common.h"
#include "xnf/parse.h"
#include "xnf/csum.h"
#include "lb.h"

/* The inner packet's DSCP and ECN, which the outer header carries too
 * (RFC 6040's normal mode: congestion marks survive the tunnel). */
static __always_inline __u8 inner_tos(const struct xnf_pkt *p)
{
	if (p->family == AF_INET)
		return p->tos;
	return (bpf_ntohl(p->flowinfo) >> 20) & 0xff;
}

static __always_inline void put_eth(struct ethhdr *eth, const __u8 *dst, const __u8 *src, __u16 proto)
{
	__builtin_memcpy(eth->h_dest, dst, ETH_ALEN);
	__builtin_memcpy(eth->h_source, src, ETH_ALEN);
	eth->h_proto = bpf_htons(proto);
}

/*
 * The header is written in 16- and 32-bit words, and its checksum summed
 * from the same words in registers: reading back a word just written as
 * two bytes defeats the CPU's store forwarding (it waits for the stores to
 * retire), and that one stall was an eighth of the lb's own time (perf of
 * the JIT image, `xnf lab lb --path tx`). The words are the header's as
 * memory holds it, so the sum is the one csum_words() would read.
 */
static __always_inline void put_ipv4(struct iphdr *o, __u8 tos, __u32 tot_len, __u8 proto, __be32 src, __be32 dst,
				     __be16 frag_off)
{
	__u16 *w = (__u16 *)o;
	__u16 vt = bpf_htons(0x4500 | tos), len = bpf_htons(tot_len);
	__u16 tp = bpf_htons(XNF_LB_OUTER_TTL << 8 | proto);
	__u32 sum = (__u32)vt + len + frag_off + tp + (src & 0xffff) + (src >> 16) + (dst & 0xffff) + (dst >> 16);

	w[0] = vt;
	w[1] = len;
	w[2] = 0; /* id */
	w[3] = frag_off;
	w[4] = tp;
	w[5] = ~csum_fold(sum);
	o->saddr = src;
	o->daddr = dst;
}

static __always_inline void put_ipv6(struct ipv6hdr *o, __u8 tc, __u32 label, __u32 payload_len, __u8 proto,
				     const __u32 *src, const __u32 *dst)
{
	*(__be32 *)o = bpf_htonl(0x60000000 | ((__u32)tc << 20) | (label & 0xfffff));
	o->payload_len = bpf_htons(payload_len);
	o->nexthdr = proto;
	o->hop_limit = XNF_LB_OUTER_TTL;
	__builtin_memcpy(&o->saddr, src, 16);
	__builtin_memcpy(&o->daddr, dst, 16);
}

/* GUE variant 1's UDP header: the source port carries 14 bits of the flow
 * hash (ECMP paths and receive queues spread by it); the checksum is zero,
 * over IPv6 too (RFC 6935 allows it for tunnels): the decap program does
 * not check it, and computing it would read the whole packet. */
static __always_inline void put_gue(struct udphdr *u, __u32 hash, __be16 port, __u32 inner)
{
	u->source = bpf_htons(0xc000 | (hash & 0x3fff));
	u->dest = port;
	u->len = bpf_htons(inner + sizeof(*u));
	u->check = 0;
}

/* Bytes the mode puts in front of the inner packet for a backend of @family. */
static __always_inline __u32 xnf_lb_overhead(__u8 mode, __u8 family)
{
	__u32 n;

	if (mode == XNF_LB_DSR)
		return 0;
	n = family == AF_INET ? sizeof(struct iphdr) : sizeof(struct ipv6hdr);
	return mode == XNF_LB_GUE ? n + sizeof(struct udphdr) : n;
}

/*
 * Puts the outer headers in front of the IP packet (the frame must have
 * no trailer and no tag) and the Ethernet header @dst <- @src in front of
 * them. DSR changes the MACs only. 0, or -1 if the frame cannot grow.
 */
static __always_inline int xnf_lb_encap(struct xdp_md *ctx, const struct xnf_pkt *p, __u32 hash,
					const struct xnf_lb_service *s, const struct xnf_lb_backend *b,
					const __u32 *src, const __u8 *dmac, const __u8 *smac)
{
	__u32 inner = p->ip_end - p->l3_off;
	__u32 extra = xnf_lb_overhead(s->mode, b->family);
	__u8 tos = inner_tos(p);
	__u8 proto;
	void *data, *end;

	if (s->mode == XNF_LB_DSR) {
		data = (void *)(long)ctx->data;
		end = (void *)(long)ctx->data_end;
		if (data + sizeof(struct ethhdr) > end)
			return -1;
		put_eth(data, dmac, smac, bpf_ntohs(p->l3_proto));
		return 0;
	}
	if (bpf_xdp_adjust_head(ctx, -(int)extra))
		return -1;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if (s->mode == XNF_LB_GUE)
		proto = IPPROTO_UDP;
	else
		proto = b->family == AF_INET ? IPPROTO_IPIP : IPPROTO_IPV6;
	if (b->family == AF_INET) {
		struct iphdr *o = data + sizeof(struct ethhdr);
		struct udphdr *u = (void *)(o + 1);

		if ((void *)(u + 1) > end)
			return -1;
		put_eth(data, dmac, smac, ETH_P_IP);
		/* DF: a packet too big for the path is answered, never fragmented
		 * (the backend's decap cannot reassemble). */
		put_ipv4(o, tos, inner + extra, proto, src[0], b->addr[0], bpf_htons(0x4000));
		if (s->mode == XNF_LB_GUE)
			put_gue(u, hash, s->gue_port, inner);
	} else {
		struct ipv6hdr *o = data + sizeof(struct ethhdr);
		struct udphdr *u = (void *)(o + 1);

		if ((void *)(u + 1) > end)
			return -1;
		put_eth(data, dmac, smac, ETH_P_IPV6);
		put_ipv6(o, tos, hash, inner + extra - sizeof(*o), proto, src, b->addr);
		if (s->mode == XNF_LB_GUE)
			put_gue(u, hash, s->gue_port, inner);
	}
	return 0;
}

/* Folds a 64-bit one's complement sum. */
static __always_inline __u16 csum_fold64(__u64 sum)
{
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffffffff) + (sum >> 32);
	return csum_fold((__u32)sum);
}

/*
 * Answers a packet that would not fit the egress MTU once encapsulated
 * (@mtu: what is left for it) with ICMP frag-needed or ICMPv6 packet-too-
 * big from the VIP, quoting the packet's first bytes, sent back the way
 * it came. The client's stack lowers its path MTU and sends smaller
 * segments; without the answer its large packets would vanish.
 */
static __always_inline int xnf_lb_too_big(struct xdp_md *ctx, const struct xnf_pkt *p, const struct ethhdr *eth,
					  __u32 mtu)
{
	__u32 ip_len = p->ip_end - p->l3_off;
	void *data, *end;
	__u64 sum;
	int len;

	if (p->family == AF_INET) {
		struct iphdr *ip;
		__u8 *icmp;

		len = sizeof(struct ethhdr) + sizeof(*ip) + 8 + XNF_LB_QUOTE4;
		if (ip_len < XNF_LB_QUOTE4 || bpf_xdp_adjust_head(ctx, -(int)(sizeof(*ip) + 8)))
			return -1;
		if (bpf_xdp_adjust_tail(ctx, len - (int)(ctx->data_end - ctx->data)))
			return -1;
		data = (void *)(long)ctx->data;
		end = (void *)(long)ctx->data_end;
		ip = data + sizeof(struct ethhdr);
		icmp = (void *)(ip + 1);
		if ((void *)(icmp + 8 + XNF_LB_QUOTE4) > end)
			return -1;
		put_eth(data, eth->h_source, eth->h_dest, ETH_P_IP);
		put_ipv4(ip, 0, sizeof(*ip) + 8 + XNF_LB_QUOTE4, IPPROTO_ICMP, p->dst[0], p->src[0], 0);
		if (mtu < 68)
			mtu = 68;
		*(__u32 *)icmp = bpf_htonl(3 << 24 | 4 << 16); /* type, code, checksum 0 */
		*(__u32 *)(icmp + 4) = bpf_htonl(mtu & 0xffff);
		sum = csum_words(icmp, 4);
		sum += (__u32)bpf_csum_diff(0, 0, (void *)(icmp + 8), XNF_LB_QUOTE4, 0);
		*(__u16 *)(icmp + 2) = ~csum_fold64(sum);
	} else {
		struct ipv6hdr *ip;
		__u8 *icmp;

		len = sizeof(struct ethhdr) + sizeof(*ip) + 8 + XNF_LB_QUOTE6;
		if (ip_len < XNF_LB_QUOTE6 || bpf_xdp_adjust_head(ctx, -(int)(sizeof(*ip) + 8)))
			return -1;
		if (bpf_xdp_adjust_tail(ctx, len - (int)(ctx->data_end - ctx->data)))
			return -1;
		data = (void *)(long)ctx->data;
		end = (void *)(long)ctx->data_end;
		ip = data + sizeof(struct ethhdr);
		icmp = (void *)(ip + 1);
		if ((void *)(icmp + 8 + XNF_LB_QUOTE6) > end)
			return -1;
		put_eth(data, eth->h_source, eth->h_dest, ETH_P_IPV6);
		put_ipv6(ip, 0, 0, 8 + XNF_LB_QUOTE6, IPPROTO_ICMPV6, p->dst, p->src);
		if (mtu < 1280)
			mtu = 1280;
		*(__u32 *)icmp = bpf_htonl(2 << 24); /* packet too big, code 0, checksum 0 */
		*(__u32 *)(icmp + 4) = bpf_htonl(mtu);
		/* The pseudo-header: addresses, upper-layer length, next header. */
		sum = csum_words(&ip->saddr, 16) + bpf_htonl(8 + XNF_LB_QUOTE6) + bpf_htonl(IPPROTO_ICMPV6);
		sum += csum_words(icmp, 4);
		sum += (__u32)bpf_csum_diff(0, 0, (void *)(icmp + 8), XNF_LB_QUOTE6, 0);
		*(__u16 *)(icmp + 2) = ~csum_fold64(sum);
	}
	return 0;
}

