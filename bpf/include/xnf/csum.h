/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/* Internet checksum helpers (RFC 1071, RFC 1624). */
#pragma once

#include "common.h"

static __always_inline __u16 csum_fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)sum;
}

/*
 * RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m'). Unlike the shortcut used by the
 * kernel's ip_decrease_ttl() this gives exactly the checksum a full
 * recomputation would give, so forwarded headers are bit-identical to what a
 * from-scratch checksum produces (the packet tests check this).
 * All three values are in network byte order; one's complement sums do not
 * care about byte order as long as it is the same for all operands.
 */
static __always_inline __u16 csum_replace16(__u16 check, __u16 old, __u16 new)
{
	__u32 sum = (__u16)~check + (__u16)~old + (__u32)new;

	return ~csum_fold(sum);
}

/* One's complement sum, unfolded, of @n 16-bit words at @p (n a constant:
 * unrolled; below 2^31 for any header-sized n). */
static __always_inline __u32 csum_words(const void *p, int n)
{
	const __u16 *w = p;
	__u32 sum = 0;

#pragma unroll
	for (int i = 0; i < n; i++)
		sum += w[i];
	return sum;
}

/* True if the 20-byte IPv4 header (no options) carries a valid checksum. */
static __always_inline int ipv4_csum_ok(const struct iphdr *iph)
{
	return csum_fold(csum_words(iph, sizeof(*iph) / 2)) == 0xffff;
}

/*
 * Decrement the IPv4 TTL and patch the header checksum incrementally. The
 * TTL shares a 16-bit word with the protocol field; the new word is
 * computed and stored whole: storing the TTL byte and loading the word
 * back stalls the CPU's store forwarding (a load wider than the store it
 * reads from: the top line of the router's profile, 9 % of its samples).
 */
static __always_inline void ipv4_decrement_ttl(struct iphdr *iph)
{
	__u16 *word = (__u16 *)&iph->ttl;
	__u16 old = *word;
	__u16 new = bpf_htons(bpf_ntohs(old) - 0x100);

	*word = new;
	iph->check = csum_replace16(iph->check, old, new);
}

/*
 * RFC 1624 eqn. 3 with the ~m + m' part summed beforehand: @delta is a
 * one's complement sum (unfolded, below 2^31) of ~old + new over every
 * 16-bit word that changed, possibly in several fields. Gives exactly what
 * a full recomputation gives, as csum_replace16 does.
 */
static __always_inline __u16 csum_add_delta(__u16 check, __u32 delta)
{
	return ~csum_fold((__u32)(__u16)~check + delta);
}
