/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * xnf lb decap: the backends' half of xnf lb. Strips the outer header of
 * what a balancer sent this host (IP-in-IP, IPv6-in-IPv6, either inside
 * the other, and GUE: IP in UDP to the configured port) and hands the
 * inner packet on as if it had arrived that way: to the next stage, or to
 * the kernel, which delivers it to the VIP on a local interface (usually
 * the loopback) and answers the client directly.
 *
 * Why in XDP: many kernels (this project's test machine among them) have
 * no ipip or fou module, and where they do, the tunnel device costs a
 * second pass through the stack. Only packets addressed to one of this
 * host's addresses (the locals map, filled by the control plane) are
 * touched: a tunnel passing through is forwarded as it is. Outer
 * fragments are the kernel's (it reassembles before any decapsulation).
 * The inner packet is checked no further than its version: the kernel's
 * receive path checks it as it checks any packet. A congestion mark (CE)
 * the outer header picked up on the way becomes the inner packet's, as
 * RFC 6040 and the kernel's tunnels do.
 */
#include "xnf/common.h"
#include "xnf/parse.h"
#include "xnf/csum.h"
#include "xnf/stage.h"
#include "lb.h"

const volatile struct {
	enum xnf_decap_counter counter;
	struct xnf_decap_stats stats;
} xnf_btf_anchor = {};

/* GUE's UDP destination port (network order); 0: no GUE. Set at load. */
const volatile __be16 gue_port = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct xnf_lb_addr);
	__type(value, __u32);
} locals SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xnf_decap_stats);
} stats SEC(".maps");

static __always_inline void count(struct xnf_decap_stats *st, __u32 k)
{
	if (st && k < XNF_DECAP_COUNTERS)
		st->c[k]++;
}

static __always_inline int next(struct xdp_md *ctx, struct xnf_decap_stats *st, __u32 k)
{
	count(st, k);
	return xnf_next_stage(ctx, XNF_STAGE_LB);
}

static __always_inline int to_kernel(struct xnf_decap_stats *st, __u32 k)
{
	count(st, k);
	return XDP_PASS;
}

static __always_inline int is_local(const struct xnf_pkt *p)
{
	struct xnf_lb_addr a = { .family = p->family };

	__builtin_memcpy(a.addr, p->dst, sizeof(a.addr));
	return bpf_map_lookup_elem(&locals, &a) != 0;
}

/* The inner packet's family from the byte at @off (its version), or 0. */
static __always_inline __u16 inner_proto(struct xdp_md *ctx, __u32 off, __u8 want)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u8 *v;

	if (off > XNF_MAX_OFF)
		return 0;
	v = data + off;
	if ((void *)(v + 1) > end)
		return 0;
	if ((*v >> 4) == 4 && (!want || want == 4))
		return ETH_P_IP;
	if ((*v >> 4) == 6 && (!want || want == 6))
		return ETH_P_IPV6;
	return 0;
}

/*
 * RFC 6040 decapsulation, for an outer header marked CE (congestion
 * experienced): an inner packet of an ECN-capable transport (ECT(0) or
 * ECT(1)) takes the mark, or the congestion signal a router gave on the
 * way from the balancer (which copies the inner ECN field to the outer,
 * encap.h) would vanish here. The inner packet, after the Ethernet header,
 * is of family @proto. A Not-ECT inner packet stays as it is: the RFC (and
 * the kernel's tunnels) drop it, but a router marks only ECT packets, and
 * the balancer's outer header is Not-ECT when the inner one is.
 */
static __always_inline void propagate_ce(void *data, void *end, __u16 proto)
{
	if (proto == ETH_P_IP) {
		struct iphdr *iph = data + sizeof(struct ethhdr);
		__u16 *word = (__u16 *)iph;  /* version, IHL and TOS */
		__u16 old;

		if ((void *)(iph + 1) > end || (iph->tos & 3) == 0 || (iph->tos & 3) == 3)
			return;
		old = *word;
		iph->tos |= 3;
		iph->check = csum_replace16(iph->check, old, *word);
	} else {
		/* The traffic class's ECN bits are bits 4-5 of the second byte. */
		__u8 *b = data + sizeof(struct ethhdr);
		__u8 ecn;

		if ((void *)(b + 2) > end)
			return;
		ecn = (b[1] >> 4) & 3;
		if (ecn == 1 || ecn == 2)
			b[1] |= 0x30;
	}
}

SEC("xdp")
int xnf_lb_decap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct xnf_pkt p = {};
	struct xnf_decap_stats *st;
	struct ethhdr eth, *neth;
	__u32 zero = 0, inner, kind;
	__u16 proto;
	__u8 want, outer_ecn;

	st = bpf_map_lookup_elem(&stats, &zero);
	count(st, XNF_DECAP_RX);
	if (xnf_parse(ctx, &p) != XNF_PARSE_OK || p.tagged)
		return next(ctx, st, XNF_DECAP_CONTINUE);
	if (p.proto == IPPROTO_IPIP || p.proto == IPPROTO_IPV6) {
		want = p.proto == IPPROTO_IPIP ? 4 : 6;
		kind = want == 4 ? XNF_DECAP_IPIP : XNF_DECAP_IP6IP6;
		inner = p.l4_off;
	} else if (gue_port && p.proto == IPPROTO_UDP && p.l4 == XNF_L4_PORTS && p.dport == bpf_ntohs(gue_port)) {
		want = 0;
		kind = XNF_DECAP_GUE;
		inner = p.l4_off + sizeof(struct udphdr);
	} else if (p.frag == XNF_FRAG_LATER && gue_port && p.proto == IPPROTO_UDP) {
		/* A later UDP fragment has no port to tell GUE by: it could be
		 * ours, so the kernel reassembles it (and then drops it when it
		 * cannot decapsulate: counted, not silent). Without GUE, UDP is
		 * never ours. (Later IPIP/IPv6 fragments took the branch above.) */
		return is_local(&p) ? to_kernel(st, XNF_DECAP_FRAGMENT) : next(ctx, st, XNF_DECAP_CONTINUE);
	} else {
		return next(ctx, st, XNF_DECAP_CONTINUE);
	}
	if (!is_local(&p))
		return next(ctx, st, XNF_DECAP_CONTINUE);
	if (p.frag)
		return to_kernel(st, XNF_DECAP_FRAGMENT);
	if (inner >= p.ip_end)
		return to_kernel(st, XNF_DECAP_BAD_INNER);
	proto = inner_proto(ctx, inner, want);
	if (!proto)
		return to_kernel(st, XNF_DECAP_BAD_INNER);
	if ((void *)((struct ethhdr *)data + 1) > end)
		return to_kernel(st, XNF_DECAP_ERROR);
	__builtin_memcpy(&eth, data, sizeof(eth));
	outer_ecn = p.family == AF_INET ? p.tos & 3 : (bpf_ntohl(p.flowinfo) >> 20) & 3;
	if (bpf_xdp_adjust_head(ctx, (int)(inner - sizeof(eth))))
		return to_kernel(st, XNF_DECAP_ERROR);
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	neth = data;
	if ((void *)(neth + 1) > end)
		return to_kernel(st, XNF_DECAP_ERROR);
	__builtin_memcpy(neth, &eth, sizeof(eth));
	neth->h_proto = bpf_htons(proto);
	if (outer_ecn == 3)
		propagate_ce(data, end, proto);
	count(st, kind);
	return xnf_next_stage(ctx, XNF_STAGE_LB);
}

char _license[] SEC("license") = "Dual MIT/GPL";
