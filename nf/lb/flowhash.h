/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * The flow hash of xnf lb: Bob Jenkins' lookup3 hashword() over the flow's
 * 32-bit words, in host order, with a fixed seed. src/flow.rs computes the
 * same function: every instance behind ECMP, and the Rust model in the
 * tests, put a flow in the same table entry.
 *
 *   IPv4: src, dst, ports, protocol             (4 words)
 *   IPv6: src[0..4], dst[0..4], ports, protocol (10 words)
 *
 * ports = sport << 16 | dport, or 0 for a 3-tuple service.
 */
#pragma once

#include "xnf/common.h"

#define XNF_LB_HASH_SEED 0x786e666cU /* "xnfl" */

#define xnf_rot(x, k) (((x) << (k)) | ((x) >> (32 - (k))))

#define xnf_mix(a, b, c)                                  \
	do {                                              \
		a -= c; a ^= xnf_rot(c, 4);  c += b;      \
		b -= a; b ^= xnf_rot(a, 6);  a += c;      \
		c -= b; c ^= xnf_rot(b, 8);  b += a;      \
		a -= c; a ^= xnf_rot(c, 16); c += b;      \
		b -= a; b ^= xnf_rot(a, 19); a += c;      \
		c -= b; c ^= xnf_rot(b, 4);  b += a;      \
	} while (0)

#define xnf_final(a, b, c)                                \
	do {                                              \
		c ^= b; c -= xnf_rot(b, 14);              \
		a ^= c; a -= xnf_rot(c, 11);              \
		b ^= a; b -= xnf_rot(a, 25);              \
		c ^= b; c -= xnf_rot(b, 16);              \
		a ^= c; a -= xnf_rot(c, 4);               \
		b ^= a; b -= xnf_rot(a, 14);              \
		c ^= b; c -= xnf_rot(b, 24);              \
	} while (0)

static __always_inline __u32 xnf_flow_hash4(__be32 src, __be32 dst, __u32 ports, __u32 proto)
{
	__u32 a, b, c;

	a = b = c = 0xdeadbeef + (4 << 2) + XNF_LB_HASH_SEED;
	a += bpf_ntohl(src);
	b += bpf_ntohl(dst);
	c += ports;
	xnf_mix(a, b, c);
	a += proto;
	xnf_final(a, b, c);
	return c;
}

static __always_inline __u32 xnf_flow_hash6(const __u32 *src, const __u32 *dst, __u32 ports, __u32 proto)
{
	__u32 a, b, c;

	a = b = c = 0xdeadbeef + (10 << 2) + XNF_LB_HASH_SEED;
	a += bpf_ntohl(src[0]);
	b += bpf_ntohl(src[1]);
	c += bpf_ntohl(src[2]);
	xnf_mix(a, b, c);
	a += bpf_ntohl(src[3]);
	b += bpf_ntohl(dst[0]);
	c += bpf_ntohl(dst[1]);
	xnf_mix(a, b, c);
	a += bpf_ntohl(dst[2]);
	b += bpf_ntohl(dst[3]);
	c += ports;
	xnf_mix(a, b, c);
	a += proto;
	xnf_final(a, b, c);
	return c;
}
