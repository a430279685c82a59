/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * The syn-cookie action of filter.bpf.c: a SYN flood answered at the
 * driver, without a byte of the kernel's memory per SYN.
 *
 * The kernel keeps the connections; this program only stands in front of
 * its handshake, the way the kernel's SYNPROXY does, and with the same
 * cookies:
 *
 * - A SYN is answered here, with XDP_TX, by a SYN-ACK whose sequence number
 *   is a SYN cookie from bpf_tcp_raw_gen_syncookie_ipv4/6: the kernel's own
 *   cookie function and secret, so the kernel can check it later. The SYN
 *   itself never reaches the kernel: a flood of them costs no socket, no
 *   conntrack entry, no listen queue. The SYN-ACK offers the rule's MSS and
 *   no other option (window scaling, timestamps and SACK are lost for the
 *   connections made during a flood, as with the kernel's own cookies
 *   without timestamps).
 * - Segments of a connection the kernel's conntrack already knows go to the
 *   kernel (bpf_xdp_ct_lookup).
 * - An ACK whose acknowledgement carries a valid cookie
 *   (bpf_tcp_raw_check_syncookie_ipv4/6) goes to the kernel, where the
 *   nftables `synproxy` statement that `xnf filter apply` installs (see
 *   src/synproxy.rs) checks it again, opens the connection to the server
 *   and from then on translates the sequence numbers between the two
 *   handshakes. Handing the ACK to the kernel's TCP directly does not work:
 *   its cookie check accepts cookies only after its own listen queue
 *   overflowed recently.
 * - Everything else the rule takes is dropped: an ACK flood, RSTs and FINs
 *   of no connection, fragments (no handshake is answered in pieces), and,
 *   fail-closed, anything whose TCP header cannot be read.
 *
 * What goes to the kernel goes there directly (XDP_PASS), not to the next
 * stage: the synproxy must see every segment of the connections it
 * translates, so a router stage must not forward them past it.
 */
#pragma once

#include "xnf/common.h"
#include "xnf/parse.h"
#include "xnf/csum.h"

#define XNF_TCP_FIN 0x01
#define XNF_TCP_SYN 0x02
#define XNF_TCP_RST 0x04
#define XNF_TCP_ACK 0x10

/*
 * Conntrack's kfuncs (net/netfilter/nf_conntrack_bpf.c). Weak, and called
 * only when the loader found them (have_conntrack, set before load from
 * /proc/kallsyms): where the kernel has no conntrack, or Debian's module
 * is not loaded when the filter loads, libbpf leaves the calls unresolved
 * and the verifier never reaches them; segments that are neither a SYN nor
 * a valid cookie then go to the kernel unchecked, counted. (Not
 * bpf_ksym_exists(): for a kfunc it needs Linux 6.4's ld_imm64 of a
 * function, which 6.1 refuses.)
 */
const volatile __u8 have_conntrack = 0;

struct bpf_ct_opts___xnf {
	__s32 netns_id;
	__s32 error;
	__u8 l4proto;
	__u8 dir;
	__u8 reserved[2];
};

struct nf_conn___xnf {
	unsigned long status;
} __attribute__((preserve_access_index));

#define XNF_CT_OPTS_SZ 12       /* the size every kernel since 6.0 accepts */
#define XNF_IPS_CONFIRMED (1UL << 3)

extern struct nf_conn___xnf *bpf_xdp_ct_lookup(struct xdp_md *ctx, struct bpf_sock_tuple *tuple, __u32 tuple_sz,
					       struct bpf_ct_opts___xnf *opts, __u32 opts_sz) __weak __ksym;
extern void bpf_ct_release(struct nf_conn___xnf *ct) __weak __ksym;

/* A SYN-ACK as sent: IP header, TCP header, one MSS option. */
struct xnf_synack4 {
	struct iphdr ip;
	struct tcphdr tcp;
	__be32 mss;
};

struct xnf_synack6 {
	struct ipv6hdr ip;
	struct tcphdr tcp;
	__be32 mss;
};

/* The segment as the cookie helpers want it: copies of its headers. */
struct xnf_seg {
	union {
		struct iphdr v4;
		struct ipv6hdr v6;
	} ip;
	__u8 th[60];      /* the TCP header, options included */
};

/* Copies the IP and TCP headers. Returns the TCP header's length, or 0 if
 * it is cut short. */
static __always_inline __u32 load_seg(struct xdp_md *ctx, const struct xnf_pkt *p, struct xnf_seg *s)
{
	__u32 len;

	if (p->family == AF_INET) {
		if (bpf_xdp_load_bytes(ctx, p->l3_off, &s->ip.v4, sizeof(s->ip.v4)))
			return 0;
	} else if (bpf_xdp_load_bytes(ctx, p->l3_off, &s->ip.v6, sizeof(s->ip.v6))) {
		return 0;
	}
	if ((__u32)p->l4_off + 20 > p->ip_end || bpf_xdp_load_bytes(ctx, p->l4_off, s->th, 20))
		return 0;
	len = (s->th[12] >> 4) * 4;
	if (len < 20 || (__u32)p->l4_off + len > p->ip_end)
		return 0;
	if (len > 20 && bpf_xdp_load_bytes(ctx, p->l4_off + 20, s->th + 20, len - 20))
		return 0;
	return len;
}

/* 1: conntrack knows the connection; 0: it does not; -1: no lookup here. */
static __always_inline int known_connection(struct xdp_md *ctx, const struct xnf_pkt *p)
{
	struct bpf_ct_opts___xnf opts = { .netns_id = -1 /* BPF_F_CURRENT_NETNS */, .l4proto = IPPROTO_TCP };
	struct bpf_sock_tuple t = {};
	struct nf_conn___xnf *ct;
	unsigned long status;
	__u32 size;

	if (!have_conntrack)
		return -1;
	if (p->family == AF_INET) {
		t.ipv4.saddr = p->src[0];
		t.ipv4.daddr = p->dst[0];
		t.ipv4.sport = bpf_htons(p->sport);
		t.ipv4.dport = bpf_htons(p->dport);
		size = sizeof(t.ipv4);
	} else {
		__builtin_memcpy(t.ipv6.saddr, p->src, 16);
		__builtin_memcpy(t.ipv6.daddr, p->dst, 16);
		t.ipv6.sport = bpf_htons(p->sport);
		t.ipv6.dport = bpf_htons(p->dport);
		size = sizeof(t.ipv6);
	}
	ct = bpf_xdp_ct_lookup(ctx, &t, size, &opts, XNF_CT_OPTS_SZ);
	if (!ct)
		return 0;
	status = ct->status;
	bpf_ct_release(ct);
	/* An unconfirmed entry is a first packet still on its way in. */
	return (status & XNF_IPS_CONFIRMED) != 0;
}

/* Whether an ACK acknowledges a SYN-ACK of ours: its cookie checks out. */
static __always_inline int cookie_valid(struct xdp_md *ctx, const struct xnf_pkt *p)
{
	struct xnf_seg s = {};

	if (!load_seg(ctx, p, &s))
		return 0;
	if (p->family == AF_INET)
		return bpf_tcp_raw_check_syncookie_ipv4(&s.ip.v4, (struct tcphdr *)s.th) == 0;
	return bpf_tcp_raw_check_syncookie_ipv6(&s.ip.v6, (struct tcphdr *)s.th) == 0;
}

/* The TCP part of the SYN-ACK answering segment @s with @cookie. */
static __always_inline void synack_tcp(struct tcphdr *t, __be32 *opt, const struct xnf_seg *s, __u32 cookie, __u16 mss)
{
	const struct tcphdr *syn = (const struct tcphdr *)s->th;

	t->source = syn->dest;
	t->dest = syn->source;
	t->seq = bpf_htonl(cookie);
	t->ack_seq = bpf_htonl(bpf_ntohl(syn->seq) + 1);
	/* Data offset 6 words (the MSS option), flags SYN and ACK. The
	 * window stays 0: the synproxy opens it once the server has
	 * answered, as it does for the SYN-ACKs it sends itself. */
	((__u8 *)t)[12] = 6 << 4;
	((__u8 *)t)[13] = XNF_TCP_SYN | XNF_TCP_ACK;
	*opt = bpf_htonl((2 << 24) | (4 << 16) | mss); /* kind 2, length 4 */
}

/* Puts @hdr in place of the @len-byte frame's IP packet, which starts at
 * @l3_off, and sends the frame back: MACs swapped, any VLAN tag kept. */
static __always_inline int rewrite(struct xdp_md *ctx, __u32 l3_off, __u32 len, const void *hdr, __u32 size)
{
	if (bpf_xdp_adjust_tail(ctx, (int)(l3_off + size) - (int)len))
		return 0;
	if (bpf_xdp_store_bytes(ctx, l3_off, (void *)hdr, size))
		return 0;
	return xnf_swap_macs(ctx) == 0;
}

/* Answers a SYN (the @len-byte frame) with a cookie SYN-ACK in its place.
 * False if it cannot (a TCP header cut short). */
static __always_inline int answer_syn(struct xdp_md *ctx, const struct xnf_pkt *p, __u32 len, __u16 mss)
{
	struct xnf_seg s = {};
	__u32 th_len;
	__s64 v;

	th_len = load_seg(ctx, p, &s);
	if (!th_len)
		return 0;
	if (p->family == AF_INET) {
		struct xnf_synack4 a = {};

		v = bpf_tcp_raw_gen_syncookie_ipv4(&s.ip.v4, (struct tcphdr *)s.th, th_len);
		if (v < 0)
			return 0;
		a.ip.version = 4;
		a.ip.ihl = 5;
		a.ip.tot_len = bpf_htons(sizeof(a));
		a.ip.frag_off = bpf_htons(0x4000); /* DF */
		a.ip.ttl = 64;
		a.ip.protocol = IPPROTO_TCP;
		a.ip.saddr = s.ip.v4.daddr;
		a.ip.daddr = s.ip.v4.saddr;
		a.ip.check = ~csum_fold(csum_words(&a.ip, sizeof(a.ip) / 2));
		synack_tcp(&a.tcp, &a.mss, &s, (__u32)v, mss);
		a.tcp.check = ~csum_fold(csum_words(&a.ip.saddr, 4) + bpf_htons(IPPROTO_TCP) + bpf_htons(24) + csum_words(&a.tcp, 12));
		return rewrite(ctx, p->l3_off, len, &a, sizeof(a));
	} else {
		struct xnf_synack6 a = {};

		v = bpf_tcp_raw_gen_syncookie_ipv6(&s.ip.v6, (struct tcphdr *)s.th, th_len);
		if (v < 0)
			return 0;
		*(__be32 *)&a.ip = bpf_htonl(0x60000000);
		a.ip.payload_len = bpf_htons(24);
		a.ip.nexthdr = IPPROTO_TCP;
		a.ip.hop_limit = 64;
		a.ip.saddr = s.ip.v6.daddr;
		a.ip.daddr = s.ip.v6.saddr;
		/* The IPv6 header is 20 bytes longer: so is the MSS. */
		synack_tcp(&a.tcp, &a.mss, &s, (__u32)v, mss - 20);
		a.tcp.check = ~csum_fold(csum_words(&a.ip.saddr, 16) + bpf_htons(IPPROTO_TCP) + bpf_htons(24) + csum_words(&a.tcp, 12));
		return rewrite(ctx, p->l3_off, len, &a, sizeof(a));
	}
}
